//! Start-up and shutdown of a serving replica: pool, migrations, HTTP listener, worker,
//! heartbeat, graceful stop on SIGTERM/SIGINT.

use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

#[cfg(feature = "dev")]
use crate::app::simulated_backend;
use crate::app::{App, AppState, AuthMode};
use crate::capi::apply::Mgmt;
use crate::capi::driver::{Capi, CapiDriver, CapiParts};
use crate::capi::fleet::Fleet;
use crate::capi::render::Renderer;
use crate::config::{Config, DriverKind};
use crate::db;
use crate::domain::status::Status;
use crate::driver::Backend;
use crate::listener::{ReloadingCert, no_delay};

/// Errors that stop the service from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "no database configured: set [database] url (or MAGNUM_CAPI__DATABASE__URL), or use `serve --dev`"
    )]
    NoDatabase,
    #[error(transparent)]
    Db(#[from] db::DbError),
    #[error("cannot listen on {0}: {1}")]
    Bind(std::net::SocketAddr, std::io::Error),
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
    #[error("[http] TLS: {0}")]
    Tls(#[from] crate::listener::TlsError),
    #[error("policy file {0}: {1}")]
    Policy(String, String),
    #[error("{0}")]
    Capi(String),
}

/// Loads `[policy] file` (if any) and installs it for the process; Magnum's defaults otherwise.
pub fn load_policy(cfg: &Config) -> Result<(), ServeError> {
    let Some(path) = &cfg.policy.file else {
        return Ok(());
    };
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ServeError::Policy(shown.clone(), e.to_string()))?;
    let policy = crate::domain::policy_lang::Policy::from_yaml_overrides(&text)
        .map_err(|e| ServeError::Policy(shown.clone(), e.to_string()))?;
    crate::domain::policy::install(policy)
        .map_err(|_| ServeError::Policy(shown, "a policy is already installed".into()))?;
    tracing::info!(file = %path.display(), "policy overrides loaded");
    Ok(())
}

/// The in-process simulated management cluster `serve --dev` may start (only in builds with the
/// `dev` feature; without it there is none to hold).
#[cfg(feature = "dev")]
pub type SimGuard = crate::simkube::SimCluster;
#[cfg(not(feature = "dev"))]
pub enum SimGuard {}

/// The management cluster the CAPI driver talks to, and the simulated one it may have started.
pub struct CapiSetup {
    pub capi: Arc<Capi>,
    /// `serve --dev` without a kubeconfig (and tests): the in-process management cluster; it
    /// lives as long as this value.
    pub sim: Option<SimGuard>,
}

/// The backend of an app: the CAPI driver on `capi`'s management cluster, else (see
/// [`backend_for_members`]) the simulated one.
pub fn backend_for(cfg: &Config, capi: Option<&Arc<Capi>>) -> Arc<dyn Backend> {
    match capi {
        Some(c) => Arc::new(CapiDriver(c.clone())),
        None => backend_for_members(cfg, &[]),
    }
}

/// The backend over `members`: none, the simulated one (in a build without the `dev` feature,
/// which has none, a fleet of none: `check` after a management cluster failed); the unnamed
/// one alone, its CAPI driver; several (or named ones), the fleet routing each cluster to its
/// own.
pub fn backend_for_members(cfg: &Config, members: &[Arc<Capi>]) -> Arc<dyn Backend> {
    match members {
        #[cfg(feature = "dev")]
        [] => simulated_backend(cfg),
        [only] if only.name().is_empty() => Arc::new(CapiDriver(only.clone())),
        several => {
            #[cfg(not(feature = "dev"))]
            let _ = cfg;
            Arc::new(Fleet::new(several))
        }
    }
}

/// The management clusters of a replica and the simulated ones it may have started.
pub struct FleetSetup {
    pub members: Vec<Arc<Capi>>,
    /// Simulated management clusters (`serve --dev`); they live as long as this value.
    pub sims: Vec<SimGuard>,
}

/// A kube client for the cluster of the kubeconfig file `path` (its current context).
pub async fn client_from_kubeconfig(path: &std::path::Path) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let kcfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    kube::Client::try_from(kcfg).map_err(|e| e.to_string())
}

/// Builds every management cluster when `[driver] kind = "capi"`: without
/// `[[capi.management_clusters]]`, the one of [`build_capi`]; with them, each named one (its
/// kubeconfig, in-cluster, or with `dev` and `simulated = true` an in-process simulator) after
/// the unnamed `[capi] kubeconfig`, when that is also set (it keeps the clusters recorded
/// before).
pub async fn build_fleet(
    cfg: &Config,
    auth: &AuthMode,
    dev: bool,
) -> Result<FleetSetup, ServeError> {
    if cfg.capi.management_clusters.is_empty() {
        return Ok(match build_capi(cfg, auth, dev).await? {
            Some(s) => FleetSetup {
                members: vec![s.capi],
                sims: s.sim.into_iter().collect(),
            },
            None => FleetSetup {
                members: Vec::new(),
                sims: Vec::new(),
            },
        });
    }
    let mut setup = FleetSetup {
        members: Vec::new(),
        sims: Vec::new(),
    };
    if cfg.driver.kind != DriverKind::Capi {
        return Ok(setup);
    }
    let mut shared_duties = true;
    if let Some(path) = &cfg.capi.kubeconfig {
        let client = client_from_kubeconfig(path)
            .await
            .map_err(|e| ServeError::Capi(format!("management cluster (unnamed): {e}")))?;
        setup
            .members
            .push(capi_runtime_named(cfg, auth, client, "", shared_duties)?);
        shared_duties = false;
    }
    for m in &cfg.capi.management_clusters {
        let err = |e: String| ServeError::Capi(format!("management cluster {}: {e}", m.name));
        let client = if let Some(path) = &m.kubeconfig {
            client_from_kubeconfig(path).await.map_err(err)?
        } else if m.simulated {
            if !dev {
                return Err(err("simulated = true needs `serve --dev`".into()));
            }
            let (client, sim) = start_simulator(cfg).await?;
            tracing::warn!(management_cluster = %m.name, "simulated management cluster");
            setup.sims.push(sim);
            client
        } else {
            let kcfg = kube::Config::incluster().map_err(|e| err(e.to_string()))?;
            kube::Client::try_from(kcfg).map_err(|e| err(e.to_string()))?
        };
        setup.members.push(capi_runtime_named(
            cfg,
            auth,
            client,
            &m.name,
            shared_duties,
        )?);
        shared_duties = false;
    }
    Ok(setup)
}

fn read_cloud_ca(cfg: &Config) -> Result<Option<String>, ServeError> {
    let path = cfg
        .capi
        .cloud_ca_file
        .as_ref()
        .or(cfg.keystone.cafile.as_ref());
    path.map(|p| {
        std::fs::read_to_string(p)
            .map_err(|e| ServeError::Capi(format!("cannot read {}: {e}", p.display())))
    })
    .transpose()
}

/// The CRDs in `dir` as the simulated management cluster's admission: schema list/map types
/// for server-side apply, defaults, schema validation and CEL rules.
#[cfg(feature = "dev")]
pub fn crd_validator(dir: &std::path::Path) -> Result<crate::simkube::Validator, ServeError> {
    let admission = crate::simkube::admission::CrdAdmission::load(dir)
        .map_err(|e| ServeError::Capi(format!("CRD directory {}: {e}", dir.display())))?;
    Ok(Arc::new(admission))
}

/// Builds the CAPI runtime when `[driver] kind = "capi"`: a kube client from `[capi] kubeconfig`,
/// `KUBECONFIG` or in-cluster config; with `dev` and none of them, a simulated management
/// cluster started here.
pub async fn build_capi(
    cfg: &Config,
    auth: &AuthMode,
    dev: bool,
) -> Result<Option<CapiSetup>, ServeError> {
    if cfg.driver.kind != DriverKind::Capi {
        return Ok(None);
    }
    let kube_err = |e: String| ServeError::Capi(format!("management cluster: {e}"));
    let configured = cfg.capi.kubeconfig.is_some() || std::env::var_os("KUBECONFIG").is_some();
    let (client, sim) = if let Some(path) = &cfg.capi.kubeconfig {
        let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| kube_err(e.to_string()))?;
        let kcfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .map_err(|e| kube_err(e.to_string()))?;
        (
            kube::Client::try_from(kcfg).map_err(|e| kube_err(e.to_string()))?,
            None,
        )
    } else if configured || !dev {
        let kcfg = kube::Config::infer()
            .await
            .map_err(|e| kube_err(e.to_string()))?;
        (
            kube::Client::try_from(kcfg).map_err(|e| kube_err(e.to_string()))?,
            None,
        )
    } else {
        let (client, sim) = start_simulator(cfg).await?;
        (client, Some(sim))
    };
    let capi = capi_runtime(cfg, auth, client)?;
    Ok(Some(CapiSetup { capi, sim }))
}

/// `serve --dev` without a kubeconfig: the in-process simulated management cluster.
#[cfg(feature = "dev")]
async fn start_simulator(cfg: &Config) -> Result<(kube::Client, SimGuard), ServeError> {
    use crate::simkube::{SimCluster, SimOptions};
    let opts = SimOptions {
        step: Duration::from_millis(cfg.capi.sim_step_ms),
        validator: cfg.capi.crd_dir.as_deref().map(crd_validator).transpose()?,
        ..SimOptions::default()
    };
    let sim = SimCluster::start(opts)
        .await
        .map_err(|e| ServeError::Capi(format!("management cluster: {e}")))?;
    tracing::warn!(url = %sim.url(), "DEVELOPMENT MODE: simulated management cluster (no real CAPI)");
    Ok((sim.client(), sim))
}

#[cfg(not(feature = "dev"))]
async fn start_simulator(_cfg: &Config) -> Result<(kube::Client, SimGuard), ServeError> {
    Err(ServeError::Capi(
        "no management cluster: set [capi] kubeconfig or KUBECONFIG (this build has no simulated \
         management cluster; build with the `dev` feature for `serve --dev` without one)"
            .into(),
    ))
}

/// The CAPI driver's runtime on an existing management-cluster client.
pub fn capi_runtime(
    cfg: &Config,
    auth: &AuthMode,
    client: kube::Client,
) -> Result<Arc<Capi>, ServeError> {
    capi_runtime_named(cfg, auth, client, "", true)
}

/// [`capi_runtime`] for management cluster `name` (`""`: the unnamed one); `shared_duties`:
/// it also runs the Keystone-wide chores (one per replica).
pub fn capi_runtime_named(
    cfg: &Config,
    auth: &AuthMode,
    client: kube::Client,
    name: &str,
    shared_duties: bool,
) -> Result<Arc<Capi>, ServeError> {
    let renderer = Renderer::new(cfg.capi.templates_dir.as_deref())
        .map_err(|e| ServeError::Capi(format!("templates: {e}")))?;
    let cloud_ca = read_cloud_ca(cfg)?;
    let mut config = cfg.capi.clone();
    config.keystone_auth_url = config
        .keystone_auth_url
        .take()
        .or_else(|| cfg.keystone.public_v3_url());
    config.keystone_auth_ca = cloud_ca.clone();
    // `[capi] egress_cidrs` are the unnamed one's; a named one has its own.
    if let Some(m) = cfg.capi.management_clusters.iter().find(|m| m.name == name) {
        config.egress_cidrs.clone_from(&m.egress_cidrs);
    }
    Ok(Arc::new(Capi::new(CapiParts {
        mgmt: Mgmt::new(client, &cfg.capi.field_manager),
        renderer,
        config,
        keystone: match auth {
            AuthMode::Keystone(k) => Some(k.clone()),
            #[cfg(feature = "dev")]
            AuthMode::DevHeaders => None,
        },
        cloud_ca,
        name: name.to_string(),
        shared_duties,
    })))
}

/// How often the status writer re-checks in-progress clusters and its lock when no event woke
/// it (it wakes on watch events, cluster-change notifications, reachability changes and
/// deadlines).
const SAFETY_POLL: Duration = Duration::from_millis(crate::config::STATUS_SAFETY_POLL_MS);

/// The pace of the credential maintenance (leftovers, checks due, renewals, abandoned staged
/// and orphaned credentials), all due on the scale of minutes to days: every 5 minutes, or the
/// credential check interval when shorter (at least 30 s).
fn maintenance_every(check_interval_secs: u64) -> Duration {
    let secs = match check_interval_secs {
        0 => 300,
        n => n.clamp(30, 300),
    };
    Duration::from_secs(secs)
}

/// Starts the watchers, the status writer (its lock keyed by the management cluster's name),
/// the reachability probe and the credential maintenance of the CAPI driver on one management
/// cluster; they stop with `stop`.
pub fn spawn_capi(
    app: &AppState,
    capi: &Arc<Capi>,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let capi = capi.clone();
    let mut tasks = capi
        .observer()
        .spawn_watchers(capi.mgmt().client().clone(), stop.clone());
    let feed = capi.take_feed();
    if let Some(feed) = feed {
        let collector = capi.clone();
        let pool = app.pool.clone();
        let on_status: crate::status_writer::OnStatus = Arc::new(move |cluster, status| {
            if matches!(status, Status::CreateComplete | Status::UpdateComplete) {
                let (c, pool) = (collector.clone(), pool.clone());
                tokio::spawn(async move {
                    let row = crate::db::clusters::by_uuid(
                        &pool,
                        &crate::db::clusters::Scope::All,
                        cluster,
                    )
                    .await;
                    let collected = match row {
                        Ok(Some(row)) => c
                            .collect_templates(&row.into())
                            .await
                            .map(drop)
                            .map_err(|e| e.to_string()),
                        Ok(None) => Ok(()),
                        Err(e) => Err(e.to_string()),
                    };
                    if let Err(e) = collected {
                        tracing::warn!(cluster = %cluster, error = %e, "removing superseded machine templates failed");
                    }
                });
            }
        });
        tasks.push(tokio::spawn(crate::status_writer::run_writer(
            app.pool.clone(),
            crate::status_writer::WriterScope {
                name: capi.name().to_string(),
                reach: capi.reach().clone(),
            },
            capi.observer().clone(),
            feed,
            crate::status_writer::Timeouts::of(capi.config(), &app.config.upgrades),
            SAFETY_POLL,
            on_status,
            stop.clone(),
        )));
    }
    match capi.config().api_proxy() {
        Ok(Some(urls)) => tasks.push(tokio::spawn(crate::capi::private::keep_proxy_urls(
            capi.clone(),
            urls,
            stop.clone(),
        ))),
        Ok(None) => {}
        // Refused at load; a configuration built in code may still carry it.
        Err(e) => {
            tracing::error!(error = %e, "private clusters' kubeconfigs are not given the proxy")
        }
    }
    tasks.push(tokio::spawn(crate::capi::fleet::watch_reachability(
        capi.clone(),
        Duration::from_secs(capi.config().probe_interval_secs.max(1)),
        stop.clone(),
    )));
    let every = maintenance_every(capi.config().credential_check_interval_secs);
    let (pool, sweeper, mut stop) = (app.pool.clone(), capi.clone(), stop);
    let journal = crate::service::journal::PgJournal::new(app.pool.clone());
    tasks.push(tokio::spawn(async move {
        loop {
            crate::maintenance::run(&pool, &sweeper, &journal).await;
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
        }
    }));
    tasks
}

/// Connects, migrates (if configured) and builds the shared state.
pub async fn build_state(
    cfg: Config,
    url: &str,
    auth: AuthMode,
    capi: Option<&Arc<Capi>>,
) -> Result<AppState, ServeError> {
    let members: Vec<Arc<Capi>> = capi.into_iter().cloned().collect();
    build_state_for(cfg, url, auth, &members).await
}

/// [`build_state`] over several management clusters.
pub async fn build_state_for(
    cfg: Config,
    url: &str,
    auth: AuthMode,
    members: &[Arc<Capi>],
) -> Result<AppState, ServeError> {
    let pool = db::connect(url, &cfg.database).await?;
    if cfg.database.migrate_on_start {
        db::migrate(&pool).await?;
    }
    let backend = backend_for_members(&cfg, members);
    Ok(App::with_backend(pool, cfg, auth, backend))
}

/// The task that retires serialised views when PostgreSQL reports a change (`view_cache`).
pub fn spawn_view_follower(
    state: &AppState,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move {
        let heartbeat = state.config.database.listen_heartbeat();
        state
            .views
            .follow_changes(&state.pool, heartbeat, stop)
            .await
    })
}

/// Serves until a shutdown signal, then drains requests and stops the background tasks (and,
/// with `capi`, the CAPI driver's watchers, status writer and janitor).
pub async fn serve(
    state: AppState,
    capi: Option<&Arc<Capi>>,
    listener: TcpListener,
) -> Result<(), ServeError> {
    let members: Vec<Arc<Capi>> = capi.into_iter().cloned().collect();
    serve_members(state, &members, listener).await
}

/// [`serve`] with the watchers, writer and janitor of every management cluster in `members`.
pub async fn serve_members(
    state: AppState,
    members: &[Arc<Capi>],
    listener: TcpListener,
) -> Result<(), ServeError> {
    serve_members_until(state, members, listener, shutdown_signal()).await
}

/// [`serve_members`] until `shutdown` rather than a signal: everything `serve` runs, in a
/// process that stops it itself (the load benchmark's production path).
pub async fn serve_members_until(
    state: AppState,
    members: &[Arc<Capi>],
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let tls = tls_config(&state.config.http)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    crate::telemetry::handle();
    let host = state.config.service_host();
    let mut background = Vec::new();
    background.push(tokio::spawn(crate::worker::heartbeat(
        state.clone(),
        host.clone(),
        stop_rx.clone(),
    )));
    background.push(spawn_view_follower(&state, stop_rx.clone()));
    for capi in members {
        background.extend(spawn_capi(&state, capi, stop_rx.clone()));
    }
    if state.config.operations.worker_enabled {
        let driver = state.backend.clone();
        let worker_id = format!(
            "{host}:{}:{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        background.push(tokio::spawn(crate::worker::run(
            state.clone(),
            driver,
            worker_id,
            stop_rx.clone(),
        )));
    }
    if let Some(addr) = state.config.http.metrics_bind {
        let metrics = TcpListener::bind(addr)
            .await
            .map_err(|e| ServeError::Bind(addr, e))?;
        let app = crate::api::metrics_service(state.clone());
        let mut stop = stop_rx.clone();
        tracing::info!(%addr, "metrics listening");
        background.push(tokio::spawn(async move {
            let served =
                axum::serve(metrics.tap_io(no_delay), app).with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|v| *v).await;
                });
            if let Err(e) = served.await {
                tracing::error!(error = %e, "metrics listener failed");
            }
        }));
    }
    serve_api(&state, listener, tls, shutdown).await?;
    let _ = stop_tx.send(true);
    for t in background {
        let _ = t.await;
    }
    // The read connections kept beside the pool, and the pool's.
    state.reads.close();
    state.pool.close().await;
    Ok(())
}

/// The TLS configuration of the API listener when `[http] tls_cert_file`/`tls_key_file` are
/// set (loaded now: a pair that does not load stops the start).
pub fn tls_config(
    http: &crate::config::HttpConfig,
) -> Result<Option<Arc<rustls::ServerConfig>>, ServeError> {
    match http.tls() {
        Some((cert, key)) => Ok(Some(
            Arc::new(ReloadingCert::load(cert, key)?).server_config()?,
        )),
        None => Ok(None),
    }
}

/// The API on `listener` (HTTPS with `tls`) until `shutdown`, then the requests in flight.
pub async fn serve_api(
    state: &AppState,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    tracing::info!(
        addr = %listener.local_addr()?,
        scheme = if tls.is_some() { "https" } else { "http" },
        "magnum-capi listening"
    );
    let svc = crate::api::service(state.clone());
    Ok(crate::listener::serve(listener, tls, svc, shutdown).await?)
}

/// SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
}

pub async fn bind(cfg: &Config) -> Result<TcpListener, ServeError> {
    TcpListener::bind(cfg.http.bind)
        .await
        .map_err(|e| ServeError::Bind(cfg.http.bind, e))
}
