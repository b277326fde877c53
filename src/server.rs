//! Start-up and shutdown of a serving replica: pool, migrations, HTTP listener, worker,
//! heartbeat, graceful stop on SIGTERM/SIGINT.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::{App, AppState, AuthMode};
use crate::config::{Config, DriverKind};
use crate::db;
use crate::driver::Driver;
use crate::driver::simulated::SimulatedDriver;

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
    #[error("policy file {0}: {1}")]
    Policy(String, String),
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

pub fn driver_for(cfg: &Config) -> Arc<dyn Driver> {
    match cfg.driver.kind {
        DriverKind::Simulated => Arc::new(SimulatedDriver {
            delay: Duration::from_millis(cfg.driver.simulated_delay_ms),
        }),
    }
}

/// Connects, migrates (if configured) and builds the shared state.
pub async fn build_state(cfg: Config, url: &str, auth: AuthMode) -> Result<AppState, ServeError> {
    let pool = db::connect(url, &cfg.database).await?;
    if cfg.database.migrate_on_start {
        db::migrate(&pool).await?;
    }
    Ok(App::new(pool, cfg, auth))
}

/// Serves until a shutdown signal, then drains requests and stops the background tasks.
pub async fn serve(state: AppState, listener: TcpListener) -> Result<(), ServeError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let host = state.config.service_host();
    let mut background = Vec::new();
    background.push(tokio::spawn(crate::worker::heartbeat(
        state.clone(),
        host.clone(),
        stop_rx.clone(),
    )));
    if state.config.operations.worker_enabled {
        let driver = driver_for(&state.config);
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
    let svc = crate::api::service(state.clone());
    tracing::info!(addr = %listener.local_addr()?, "magnum-capi listening");
    axum::serve(listener, tower::make::Shared::new(svc))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    let _ = stop_tx.send(true);
    for t in background {
        let _ = t.await;
    }
    state.pool.close().await;
    Ok(())
}

async fn shutdown_signal() {
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
