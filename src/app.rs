//! Shared application state handed to every handler and background task.

use std::sync::Arc;
#[cfg(feature = "dev")]
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::coalesce::Batch;
use crate::config::Config;
use crate::db::cluster_views::{self, ViewHead};
use crate::db::creates::Recorder;
use crate::db::kept::KeptPool;
use crate::db::templates;
use crate::driver::Backend;
use crate::openstack::Keystone;
use crate::seal::Sealer;
use crate::view_cache::ViewCache;

/// How requests are authenticated.
#[derive(Debug, Clone)]
pub enum AuthMode {
    /// `serve --dev` only: identity from `X-User-Id` / `X-Project-Id` / `X-Roles` headers (not
    /// in a build without the `dev` feature).
    #[cfg(feature = "dev")]
    DevHeaders,
    /// Every `X-Auth-Token` is validated by Keystone.
    Keystone(Arc<Keystone>),
}

impl AuthMode {
    /// The Keystone client, when requests are authenticated by Keystone.
    pub fn keystone(&self) -> Option<&Keystone> {
        match self {
            AuthMode::Keystone(k) => Some(k),
            #[cfg(feature = "dev")]
            AuthMode::DevHeaders => None,
        }
    }
}

/// Everything a request needs, behind one `Arc`.
#[derive(Debug)]
pub struct App {
    pub pool: PgPool,
    /// Connections kept beside `pool` for the API's reads, handed back without sqlx's release
    /// round trip (`db::kept`).
    pub reads: KeptPool,
    pub config: Config,
    pub auth: AuthMode,
    /// Wakes the operation worker when a new operation is recorded.
    pub work_ready: Notify,
    /// The cluster backend the services and the worker use (the Cluster API driver, or the
    /// simulated one).
    pub backend: Arc<dyn Backend>,
    /// Seals the caller's token into operations that act as the caller later (`None` only if
    /// no key could be made: creates with Keystone are then refused).
    pub sealer: Option<Sealer>,
    /// Serialised cluster and template views, reused until their data changes.
    pub views: ViewCache,
    /// Concurrent shows read together (`db::cluster_views::shows`).
    pub shows: Batch<Uuid, ViewHead>,
    /// Templates by uuid, reused until a template changes, else read together
    /// (`db::templates::ByUuid`).
    pub templates: templates::ByUuid,
    /// Concurrent creates recorded together (`db::creates::Recorder`).
    pub creates: Recorder,
}

pub type AppState = Arc<App>;

impl App {
    /// An app on the simulated backend (`[driver] kind = "simulated"`; `dev` builds only).
    #[cfg(feature = "dev")]
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
        let sealer = sealer_for(&config);
        let reads = KeptPool::new(
            pool.clone(),
            usize::try_from(config.database.kept_read_connections).unwrap_or(usize::MAX),
        );
        let views = ViewCache::new(
            config.api.view_cache_mib.saturating_mul(1 << 20),
            reads.clone(),
        );
        // Two statements at once: shows are short index reads, and the fewer run at once the
        // more of them each one reads (docs/architecture.md).
        let shows = cluster_views::shows(reads.clone(), 2);
        // One statement at a time (`Recorder` says why).
        let creates = Recorder::new(
            pool.clone(),
            config.quotas.max_clusters_per_project,
            config.database.creates_timeout(),
        );
        let templates = templates::ByUuid::new(reads.clone(), 2);
        Arc::new(App {
            shows,
            templates,
            creates,
            pool,
            reads,
            config,
            auth,
            work_ready: Notify::new(),
            backend,
            sealer,
            views,
        })
    }
}

/// The key ring of `[operations]` (required and checked by `Config::validate_for_serve`), or a
/// key generated for this process when none is configured (development), with a warning.
fn sealer_for(config: &Config) -> Option<Sealer> {
    match config.operations.sealer() {
        Ok(s) => {
            if s.ephemeral {
                tracing::warn!(
                    "no [operations] seal_key: a key was generated for this process; a create \
                     whose credential is not made before this process stops fails (set the same \
                     key on every replica)"
                );
            } else {
                tracing::info!(keys = ?s.key_ids(), "sealing with the first key, opening with all");
            }
            Some(s)
        }
        Err(e) => {
            tracing::error!(error = %e, "no sealing key: creates with Keystone are refused");
            None
        }
    }
}

/// The operation-completing backend without a management cluster (`dev` builds only).
#[cfg(feature = "dev")]
pub fn simulated_backend(cfg: &Config) -> Arc<dyn Backend> {
    Arc::new(crate::driver::simulated::SimulatedDriver {
        delay: Duration::from_millis(cfg.driver.simulated_delay_ms),
        run: Duration::from_millis(cfg.driver.simulated_run_ms),
    })
}
