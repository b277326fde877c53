//! Shared application state handed to every handler and background task.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;

use crate::config::Config;
use crate::driver::Backend;
use crate::driver::simulated::SimulatedDriver;
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
    /// The cluster backend the services and the worker use (the Cluster API driver, or the
    /// simulated one).
    pub backend: Arc<dyn Backend>,
}

pub type AppState = Arc<App>;

impl App {
    /// An app on the simulated backend (`[driver] kind = "simulated"`).
    pub fn new(pool: PgPool, config: Config, auth: AuthMode) -> AppState {
        let backend = simulated_backend(&config);
        Self::with_backend(pool, config, auth, backend)
    }

    pub fn with_backend(
        pool: PgPool,
        config: Config,
        auth: AuthMode,
        backend: Arc<dyn Backend>,
    ) -> AppState {
        Arc::new(App {
            pool,
            config,
            auth,
            work_ready: Notify::new(),
            backend,
        })
    }
}

/// The operation-completing backend without a management cluster.
pub fn simulated_backend(cfg: &Config) -> Arc<dyn Backend> {
    Arc::new(SimulatedDriver {
        delay: Duration::from_millis(cfg.driver.simulated_delay_ms),
    })
}
