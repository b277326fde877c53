//! Shared application state handed to every handler and background task.

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::Notify;

use crate::capi::driver::Capi;
use crate::config::Config;
use crate::openstack::Keystone;

/// How requests are authenticated.
#[derive(Debug, Clone)]
pub enum AuthMode {
    /// `serve --dev` only: identity from `X-User-Id` / `X-Project-Id` / `X-Roles` headers.
    DevHeaders,
    /// Every `X-Auth-Token` is validated by Keystone.
    Keystone(Arc<Keystone>),
}

impl AuthMode {
    /// The Keystone client, when requests are authenticated by Keystone.
    pub fn keystone(&self) -> Option<&Keystone> {
        match self {
            AuthMode::Keystone(k) => Some(k),
            AuthMode::DevHeaders => None,
        }
    }
}

/// Everything a request needs, behind one `Arc`.
#[derive(Debug)]
pub struct App {
    pub pool: PgPool,
    pub config: Config,
    pub auth: AuthMode,
    /// Wakes the operation worker when a new operation is recorded.
    pub work_ready: Notify,
    /// The Cluster API driver's runtime (management cluster, renderer, watchers), when the
    /// configured driver is `capi`.
    pub capi: Option<Arc<Capi>>,
}

pub type AppState = Arc<App>;

impl App {
    pub fn new(pool: PgPool, config: Config, auth: AuthMode) -> AppState {
        Self::with_capi(pool, config, auth, None)
    }

    pub fn with_capi(
        pool: PgPool,
        config: Config,
        auth: AuthMode,
        capi: Option<Arc<Capi>>,
    ) -> AppState {
        Arc::new(App {
            pool,
            config,
            auth,
            work_ready: Notify::new(),
            capi,
        })
    }
}
