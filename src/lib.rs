//! magnum-capi: the OpenStack Magnum (container-infra) v1 API on Postgres, provisioning
//! Kubernetes clusters through Cluster API. Flow: api → service (domain rules + db, one
//! transaction per write, operations recorded) → worker → driver → statuses back in db.

pub mod api;
pub mod api_proxy;
pub mod app;
pub mod capi;
pub mod coalesce;
pub mod config;
pub mod config_sample;
pub mod db;
#[cfg(feature = "dev")]
pub mod devdb;
pub mod domain;
pub mod driver;
pub mod import;
pub mod k8s;
pub mod listener;
pub mod maintenance;
pub mod openstack;
pub mod proxy_auth;
pub mod seal;
pub mod server;
pub mod service;
#[cfg(feature = "dev")]
pub mod simkube;
pub mod status_writer;
pub mod telemetry;
pub mod view_cache;
pub mod worker;

/// Every binary built on this crate (the service, the tests, the benchmarks) allocates with
/// mimalloc: per-thread free lists instead of glibc's arenas, whose locks and consolidation
/// showed in the read paths' profiles (docs/benchmarks.md, stop 59).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
