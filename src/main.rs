//! CLI: `serve [--config FILE] [--dev]`, `migrate`, `openapi`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use magnum_capi::app::AuthMode;
use magnum_capi::config::Config;
use magnum_capi::openstack::Keystone;
use magnum_capi::{api, db, devdb, server};

#[derive(Parser)]
#[command(
    name = "magnum-capi",
    version,
    about = "OpenStack Magnum API backed by Cluster API"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (and run the operation worker).
    Serve {
        /// TOML configuration file.
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
        /// Development mode: a throwaway PostgreSQL when no database is configured, identity
        /// from X-User-Id/X-Project-Id/X-Roles headers. Never use in production.
        #[arg(long)]
        dev: bool,
    },
    /// Apply database migrations and exit.
    Migrate {
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print the OpenAPI document (YAML).
    Openapi,
}

fn main() -> anyhow::Result<()> {
    // One TLS provider for the whole process, before any client is built.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "info,sqlx=warn,openstack_sdk=warn,openstack_sdk_core=warn".into()
            }),
        )
        .init();
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Openapi => {
            print!("{}", api::openapi::yaml_text().map_err(anyhow::Error::msg)?);
            Ok(())
        }
        Command::Migrate { config } => {
            let cfg = Config::load(config.as_deref())?;
            let url = cfg
                .database
                .url
                .clone()
                .context("[database] url is required")?;
            let pool = db::connect(&url, &cfg.database).await?;
            db::migrate(&pool).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Serve { config, dev } => {
            let cfg = Config::load(config.as_deref())?;
            server::load_policy(&cfg)?;
            cfg.validate_for_serve(dev)?;
            let mut embedded = None;
            let url = match (&cfg.database.url, dev) {
                (Some(url), _) => url.clone(),
                (None, true) => {
                    tracing::info!("no [database] url: starting a throwaway PostgreSQL");
                    let pg = tokio::task::spawn_blocking(devdb::EmbeddedPostgres::start).await??;
                    let url = pg.url("postgres");
                    embedded = Some(pg);
                    url
                }
                (None, false) => return Err(server::ServeError::NoDatabase.into()),
            };
            let auth = if cfg.keystone.active() {
                let ks = Keystone::new(&cfg.keystone, &cfg.openstack)?;
                tracing::info!(auth_url = ?cfg.keystone.auth_url, "tokens are validated by Keystone");
                AuthMode::Keystone(Arc::new(ks))
            } else {
                tracing::warn!(
                    "INSECURE DEVELOPMENT MODE: no Keystone; identity is taken from X-User-Id / \
                     X-Project-Id / X-Roles headers (default: admin of project 'dev') and nothing is \
                     looked up in Glance/Nova/Neutron; never expose this to a network"
                );
                AuthMode::DevHeaders
            };
            let listener = server::bind(&cfg).await?;
            let state = server::build_state(cfg, &url, auth).await?;
            let result = server::serve(state, listener).await;
            if let Some(mut pg) = embedded {
                tokio::task::spawn_blocking(move || pg.stop()).await?;
            }
            Ok(result?)
        }
    }
}
