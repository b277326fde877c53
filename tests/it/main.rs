//! The integration tests: one binary (the crate is linked once, not once per file), a module per
//! area, and the harness in `common` (PostgreSQL, Keystone, the fake cloud, simulated management
//! clusters, the real binary). Everything process-wide the harness starts is shared by all
//! modules; tests that disturb a shared service hold `common::stack::env_exclusive`, the others
//! `env_shared`. Tests that must own the process itself (the metrics recorder, the global log
//! subscriber) are the other binary, `tests/process_global`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod addon_images;
mod adopt_capi_drivers;
mod api_admin;
mod api_clusters;
mod api_contract;
mod api_dialog_defaults;
mod api_empty_strings;
mod api_nodegroups;
mod api_proxy;
mod api_templates;
mod api_versions_errors;
mod capi_api_endpoint;
mod capi_certificates;
mod capi_cleanup;
mod capi_credentials;
mod capi_forget;
mod capi_hygiene;
mod capi_keystone;
mod capi_lifecycle;
mod capi_upgrades;
mod chart;
mod check;
mod cli;
mod client_gophercloud;
mod client_horizon;
mod client_horizon_browser;
mod client_magnumclient;
mod client_openstacksdk;
mod client_osc;
mod client_terraform;
mod concurrency;
mod config;
mod deploy;
mod devstack;
mod docs;
mod durability;
mod fakecloud_selftest;
mod fuzz_openapi;
mod import_capi_drivers;
mod import_magnum;
mod kept_reads;
mod keystone_auth;
mod keystone_harness;
mod layers;
mod listener;
mod magnum_beside;
mod management_clusters;
mod mgmt_cost;
mod openapi;
mod policy;
mod previous_release;
mod realstack;
mod realstack_addons;
mod realstack_adopt;
mod realstack_capo;
mod realstack_vip;
mod reconciler;
mod render;
mod render_distro;
mod replicas;
mod simkube;
mod simkube_apply;
mod smoke;
mod snapshots;
mod stored_views;
mod view_cache;
