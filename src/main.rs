//! CLI: `serve [--config FILE] [--dev [--sim-management-clusters a,b]]`, `migrate`, `check`,
//! `management-clusters`, `cluster forget UUID [--yes] [--force]`, `openapi`,
//! `render --template T --cluster C`, `import --magnum-db URL [--dry-run]`, `api-proxy`, and in development
//! builds `simulate --kubeconfig-out FILE [--listen ADDR]`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use magnum_capi::app::AuthMode;
use magnum_capi::config::{Config, ConfigError, LogFormat};
use magnum_capi::openstack::Keystone;
use magnum_capi::{api, db, server};

#[derive(Parser)]
#[command(
    name = "magnum-capi",
    version,
    about = "The OpenStack Magnum (container-infra) v1 API, provisioning Kubernetes through Cluster API",
    long_about = "The OpenStack Magnum (container-infra) v1 API, provisioning Kubernetes clusters \
                  through Cluster API: one binary serves the API and runs the operations; state \
                  lives in PostgreSQL.",
    after_help = "Every command that reads a configuration takes --config FILE (or \
                  MAGNUM_CAPI_CONFIG); any key can be set as MAGNUM_CAPI__<SECTION>__<KEY>. \
                  `magnum-capi config sample` prints every key with its default. Guides: README.md and docs/ \
                  and docs/ (install.md, operate.md, moving-from-magnum.md, …)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API and run the operation worker (docs/install.md; try it with --dev).
    Serve {
        /// TOML configuration file.
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
        /// Development mode: a throwaway PostgreSQL when no database is configured, identity
        /// from X-User-Id/X-Project-Id/X-Roles headers. Never use in production (a build without
        /// the `dev` feature refuses it).
        #[arg(long)]
        dev: bool,
        /// With `--dev`: one simulated management cluster per comma-separated name (e.g.
        /// `east,west`), as `[[capi.management_clusters]]` entries.
        #[arg(long, value_delimiter = ',', requires = "dev")]
        sim_management_clusters: Vec<String>,
    },
    /// List the management clusters: reachability, the CAPI/CAPO versions found, and their
    /// clusters by status (from `[database] url`, when set). Guide: docs/install.md, "Many
    /// management clusters".
    ManagementClusters {
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Apply the database migrations to `[database] url` and exit (docs/operate.md, "Upgrades
    /// and rollback").
    Migrate {
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Check the configuration, the sealing key and every dependency (PostgreSQL and its
    /// migrations; a Keystone login with the service's credentials and the catalog entries it
    /// uses; each management cluster, its CRDs and every permission the driver needs on it)
    /// and print a report naming each failure; exits non-zero on a failure. Guide:
    /// docs/operate.md, "Health, readiness and check".
    Check {
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Import a Magnum database (templates, clusters, nodegroups, quotas; every UUID, owner,
    /// timestamp, status and label kept) into `[database] url`, in one transaction; run it again
    /// to bring over what changed in Magnum since. Prints a report per object. Guide:
    /// docs/moving-from-magnum.md.
    Import {
        /// The Magnum database: `mysql://user:password@host[:port]/database`.
        #[arg(long, env = "MAGNUM_CAPI_IMPORT_MAGNUM_DB", hide_env_values = true)]
        magnum_db: String,
        /// Check and report everything, write nothing (the run is rolled back).
        #[arg(long)]
        dry_run: bool,
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Administrator commands on one cluster (docs/delete-cleanup.md, "Forgetting a cluster").
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Run the proxy to the APIs of private clusters (no floating IP on their API load
    /// balancer) until SIGTERM: HTTP CONNECT to the allowlisted API endpoints only, dialled from
    /// the tenant network's namespace on this node (`[api_proxy]`; docs/private-clusters.md).
    ApiProxy {
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print the OpenAPI document (YAML), the API's reference (as the committed openapi.yaml).
    Openapi,
    /// The configuration file: `config sample` prints the reference of every key.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Development builds: run a simulated management cluster (a Kubernetes API and a
    /// simulator playing the CAPI/CAPO controllers) as a process of its own, writing a
    /// kubeconfig for it, so several `serve` replicas share one management cluster as they
    /// would a real one. It authenticates nobody: loopback only unless `--allow-remote`.
    /// Guide: docs/development.md.
    #[cfg(feature = "dev")]
    Simulate {
        /// Where to write the kubeconfig (once the API listens).
        #[arg(long)]
        kubeconfig_out: PathBuf,
        /// Listen address (port 0: a free one, named in the kubeconfig).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Listen on a non-loopback address: anyone who reaches it is cluster admin.
        #[arg(long)]
        allow_remote: bool,
        /// Milliseconds between simulated transitions (`[capi] sim_step_ms`).
        #[arg(long, default_value_t = 1000)]
        step_ms: u64,
        /// CRD files every write is validated against (defaults, schemas, CEL rules), e.g.
        /// the Cluster API and CAPO CRDs.
        #[arg(long)]
        crd_dir: Option<PathBuf>,
    },
    /// Print the CAPI/CAPO manifests of a hypothetical cluster (multi-document YAML), with
    /// placeholder credentials and CAs: what the driver would apply (docs/architecture.md).
    Render {
        /// A cluster template as `GET /v1/clustertemplates/{id}` shows it (JSON).
        #[arg(long)]
        template: PathBuf,
        /// A cluster as `GET /v1/clusters/{id}` shows it (JSON); absent fields take the API's
        /// defaults.
        #[arg(long)]
        cluster: PathBuf,
        /// Its nodegroups (`GET /v1/clusters/{id}/nodegroups` body or a list); default master
        /// and worker nodegroups when absent.
        #[arg(long)]
        nodegroups: Option<PathBuf>,
        /// TOML configuration file (`[capi]` settings and template overrides).
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the configuration reference: every section and key with its default and its
    /// documentation, as a TOML file that loads as it is (etc/magnum-capi.toml.example;
    /// docs/install.md, "Configuration").
    Sample,
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Finish a delete that cannot finish: print what the cluster leaves in its tenant project,
    /// then (with --yes) remove its records and its objects on the management cluster (their
    /// finalizers dropped). Nothing in the cloud is deleted.
    Forget {
        /// The cluster's uuid.
        uuid: uuid::Uuid,
        /// Do it (without: only print what would be left).
        #[arg(long)]
        yes: bool,
        /// Forget a cluster that is not being deleted (not DELETE_FAILED or DELETE_IN_PROGRESS).
        #[arg(long)]
        force: bool,
        #[arg(long, env = "MAGNUM_CAPI_CONFIG")]
        config: Option<PathBuf>,
    },
}

/// What `migrate` and `serve` say when no database is configured.
const MISSING_DATABASE_URL: &str = "[database] url is required: set it in the configuration file \
     (--config FILE) or as MAGNUM_CAPI__DATABASE__URL, e.g. postgres://magnum:secret@db/magnum \
     (or run `serve --dev` for a throwaway database)";

fn main() -> anyhow::Result<()> {
    // One TLS provider for the whole process, before any client is built.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    let config = preload(&cli);
    init_logging(
        config
            .as_ref()
            .and_then(|c| c.as_ref().ok())
            .map(|c| c.log.format)
            .unwrap_or_default(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(cli, config))
}

/// The configuration of a command that logs as it says, loaded once — for the log format, then
/// by the command itself (the seal key file with it); `None` for the other commands.
fn preload(cli: &Cli) -> Option<Result<Config, ConfigError>> {
    match &cli.command {
        Command::Serve { config, .. }
        | Command::Migrate { config }
        | Command::Check { config }
        | Command::Import { config, .. }
        | Command::ManagementClusters { config }
        | Command::ApiProxy { config }
        | Command::Cluster {
            command: ClusterCommand::Forget { config, .. },
        } => Some(Config::load(config.as_deref())),
        _ => None,
    }
}

/// What [`preload`] read for the command (its error, if it did not load, reported now).
fn preloaded(config: Option<Result<Config, ConfigError>>) -> anyhow::Result<Config> {
    Ok(config.context("the command's configuration was not loaded")??)
}

/// Logs in `format` (text unless the command's configuration asks for JSON; a configuration
/// that does not load is reported by the command itself).
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,sqlx=warn,openstack_sdk=warn,openstack_sdk_core=warn".into());
    match format {
        LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
        LogFormat::Json => {
            let subscriber = magnum_capi::telemetry::json_subscriber(filter, std::io::stderr);
            if tracing::subscriber::set_global_default(subscriber).is_err() {
                eprintln!("a log subscriber was already installed");
            }
        }
    }
}

/// `check`: every readiness check, from the command line; `Ok(false)` when one failed.
async fn check(config: Option<&std::path::Path>, cfg: Config) -> anyhow::Result<bool> {
    println!(
        "magnum-capi check (configuration: {})",
        config.map_or_else(|| "defaults".to_string(), |p| p.display().to_string())
    );
    let line = |ok: bool, name: &str, detail: &str| {
        println!(
            "  {:<7} {name:<24} {detail}",
            if ok { "ok" } else { "FAILED" }
        );
    };
    let mut failed = false;
    if let Err(e) = server::load_policy(&cfg)
        .map_err(anyhow::Error::from)
        .and_then(|()| cfg.validate_for_serve(false).map_err(anyhow::Error::from))
    {
        line(false, "configuration", &e.to_string());
        failed = true;
    } else {
        line(true, "configuration", "valid for `serve`");
    }
    match cfg.operations.sealer() {
        Ok(s) if !s.ephemeral => {
            let ids = s.key_ids();
            line(
                true,
                "seal_key",
                &format!(
                    "sealing with {}; opening also {} previous",
                    ids[0],
                    ids.len() - 1
                ),
            );
        }
        Ok(_) => {
            line(
                false,
                "seal_key",
                "not set: [operations] seal_key or seal_key_file",
            );
            failed = true;
        }
        Err(e) => {
            line(false, "seal_key", &e.to_string());
            failed = true;
        }
    }
    let Some(url) = cfg.database.url.clone() else {
        line(false, "postgresql", "[database] url is not set");
        return Ok(false);
    };
    let auth = match auth_mode(&cfg) {
        Ok(auth) => auth,
        Err(e) => {
            line(false, "keystone", &e.to_string());
            return Ok(false);
        }
    };
    let members = match server::build_fleet(&cfg, &auth, false).await {
        Ok(s) => s.members,
        Err(e) => {
            line(false, "management_cluster", &e.to_string());
            failed = true;
            Vec::new()
        }
    };
    let backend = server::backend_for_members(&cfg, &members);
    let pool = db::connect_lazy(&url, &cfg.database)?;
    let app = magnum_capi::app::App::with_backend(pool, cfg, auth, backend);
    let r = magnum_capi::service::operating::preflight(&app).await;
    for c in &r.checks {
        line(c.ok, &c.name, &c.detail);
    }
    let probed = match app.config.capi.api_proxy() {
        Ok(None) => None,
        Ok(Some(p)) => Some(
            magnum_capi::api_proxy::probe(p.base(), p.key())
                .await
                .map(|()| {
                    format!(
                        "{} answers and admits the service's credentials (private clusters)",
                        p.base()
                    )
                }),
        ),
        Err(e) => Some(Err(e.to_string())),
    };
    match probed {
        Some(Ok(detail)) => line(true, "api_proxy", &detail),
        Some(Err(e)) => {
            line(false, "api_proxy", &e);
            failed = true;
        }
        None => {}
    }
    if failed || !r.all_ok() {
        println!("check failed");
        return Ok(false);
    }
    println!("all checks passed");
    Ok(true)
}

/// `management-clusters`: each management cluster with its reachability, the provider
/// versions found on it and its clusters by status.
async fn management_clusters(cfg: Config) -> anyhow::Result<()> {
    use magnum_capi::capi::fleet;
    let setup = server::build_fleet(&cfg, &auth_mode(&cfg)?, false).await?;
    let counts = match &cfg.database.url {
        Some(url) => {
            let pool = db::connect_lazy(url, &cfg.database)?;
            Some(db::clusters::count_by_management_cluster_and_status(&pool).await)
        }
        None => None,
    };
    for m in &setup.members {
        let entry = cfg
            .capi
            .management_clusters
            .iter()
            .find(|e| e.name == m.name());
        println!("{}", fleet::shown(m.name()));
        if let Some(e) = entry {
            println!(
                "  placement:   weight {}, {}{}{}",
                e.weight,
                if e.enabled {
                    "enabled"
                } else {
                    "DRAINING (no new clusters)"
                },
                e.region
                    .as_deref()
                    .map(|r| format!(", region {r}"))
                    .unwrap_or_default(),
                if e.availability_zones.is_empty() {
                    String::new()
                } else {
                    format!(", zones {}", e.availability_zones.join(" "))
                }
            );
        } else if !cfg.capi.management_clusters.is_empty() {
            println!("  placement:   none (holds the clusters recorded before placement)");
        }
        match fleet::probe(m).await {
            Ok(v) => {
                println!("  reachable:   yes (Kubernetes {v})");
                for (provider, version) in fleet::versions(m).await {
                    println!("  {:<12} {version}", format!("{provider}:"));
                }
            }
            Err(e) => println!("  reachable:   NO ({e})"),
        }
        match &counts {
            Some(Ok(rows)) => {
                let mine: Vec<String> = rows
                    .iter()
                    .filter(|(n, _, _)| *n == m.name())
                    .map(|(_, status, n)| format!("{status} {n}"))
                    .collect();
                let total: i64 = rows
                    .iter()
                    .filter(|(n, _, _)| *n == m.name())
                    .map(|(_, _, n)| n)
                    .sum();
                println!(
                    "  clusters:    {total}{}",
                    if mine.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", mine.join(", "))
                    }
                );
            }
            Some(Err(e)) => println!("  clusters:    unknown (database: {e})"),
            None => println!("  clusters:    unknown ([database] url is not set)"),
        }
    }
    if setup.members.is_empty() {
        println!("no management cluster: [driver] kind is not \"capi\"");
    }
    Ok(())
}

/// `cluster forget`: prints the plan; with `yes` (and `force` for a cluster not being deleted)
/// forgets the cluster. `Ok(false)` when refused.
async fn forget(uuid: uuid::Uuid, yes: bool, force: bool, cfg: Config) -> anyhow::Result<bool> {
    use magnum_capi::service::forget;
    let url = cfg.database.url.clone().context(MISSING_DATABASE_URL)?;
    let auth = auth_mode(&cfg)?;
    let setup = server::build_fleet(&cfg, &auth, false).await?;
    let backend = server::backend_for_members(&cfg, &setup.members);
    let pool = db::connect(&url, &cfg.database).await?;
    let app = magnum_capi::app::App::with_backend(pool, cfg, auth, backend);
    let plan = forget::plan(&app, uuid).await?;
    let c = &plan.cluster;
    println!(
        "cluster {} ({}), project {}, {}{}",
        c.uuid,
        c.name.as_deref().unwrap_or(""),
        c.project_id,
        c.status,
        c.status_reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    if plan.imported_from.is_some() {
        println!(
            "It was imported read-only from Magnum: forgetting it removes its records only; \
             nothing on any management cluster or in the cloud is touched (importing again \
             while Magnum still has it brings it back). Left in project {}:",
            c.project_id
        );
    } else {
        println!(
            "Forgetting it removes its records and its objects on the management cluster; \
             nothing in the cloud is deleted. Left in project {}:",
            c.project_id
        );
    }
    for l in &plan.leftovers {
        println!("  - {l}");
    }
    if let Some(why) = &plan.refusal
        && !force
    {
        println!("refused: {why} (--force forgets it anyway)");
        return Ok(false);
    }
    if !yes {
        println!("nothing done: run again with --yes to forget it");
        return Ok(true);
    }
    let operator = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let done = forget::forget(&app, &plan, &operator).await?;
    println!(
        "forgotten: its records are removed; {} objects removed from the management cluster",
        done.removed.len()
    );
    if !done.failed.is_empty() {
        println!("not removed from the management cluster (remove them by hand):");
        for f in &done.failed {
            println!("  - {f}");
        }
    }
    Ok(true)
}

async fn run(cli: Cli, config: Option<Result<Config, ConfigError>>) -> anyhow::Result<()> {
    match cli.command {
        Command::Cluster {
            command: ClusterCommand::Forget {
                uuid, yes, force, ..
            },
        } => {
            if forget(uuid, yes, force, preloaded(config)?).await? {
                Ok(())
            } else {
                std::process::exit(1)
            }
        }
        Command::ManagementClusters { .. } => management_clusters(preloaded(config)?).await,
        Command::Check { config: path } => {
            if check(path.as_deref(), preloaded(config)?).await? {
                Ok(())
            } else {
                std::process::exit(1)
            }
        }
        Command::Render {
            template,
            cluster,
            nodegroups,
            config,
        } => {
            print!(
                "{}",
                render_manifests(
                    &template,
                    &cluster,
                    nodegroups.as_deref(),
                    config.as_deref()
                )?
            );
            Ok(())
        }
        Command::Import {
            magnum_db, dry_run, ..
        } => import(&magnum_db, dry_run, preloaded(config)?).await,
        #[cfg(feature = "dev")]
        Command::Simulate {
            kubeconfig_out,
            listen,
            allow_remote,
            step_ms,
            crd_dir,
        } => {
            simulate(
                &kubeconfig_out,
                listen,
                allow_remote,
                step_ms,
                crd_dir.as_deref(),
            )
            .await
        }
        Command::ApiProxy { .. } => api_proxy(preloaded(config)?).await,
        Command::Openapi => {
            print!("{}", api::openapi::yaml_text().map_err(anyhow::Error::msg)?);
            Ok(())
        }
        Command::Config {
            command: ConfigCommand::Sample,
        } => {
            print!("{}", magnum_capi::config_sample::sample());
            Ok(())
        }
        Command::Migrate { .. } => {
            let cfg = preloaded(config)?;
            let url = cfg.database.url.clone().context(MISSING_DATABASE_URL)?;
            let pool = db::connect(&url, &cfg.database).await?;
            db::migrate(&pool).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Serve {
            dev,
            sim_management_clusters,
            ..
        } => {
            let mut cfg = preloaded(config)?;
            for name in sim_management_clusters {
                let known = cfg
                    .capi
                    .management_clusters
                    .iter_mut()
                    .find(|m| m.name == name);
                match known {
                    Some(m) => m.simulated = true,
                    None => {
                        let mut m = magnum_capi::config::ManagementClusterConfig::named(&name);
                        m.simulated = true;
                        cfg.capi.management_clusters.push(m);
                    }
                }
            }
            cfg.validate_management_clusters()?;
            server::load_policy(&cfg)?;
            cfg.validate_for_serve(dev)?;
            #[cfg(feature = "dev")]
            let mut embedded: Option<magnum_capi::devdb::EmbeddedPostgres> = None;
            let url = match (&cfg.database.url, dev) {
                (Some(url), _) => url.clone(),
                #[cfg(feature = "dev")]
                (None, true) => {
                    tracing::info!("no [database] url: starting a throwaway PostgreSQL");
                    let pg =
                        tokio::task::spawn_blocking(magnum_capi::devdb::EmbeddedPostgres::start)
                            .await??;
                    let url = pg.socket_url("postgres");
                    embedded = Some(pg);
                    url
                }
                #[cfg(not(feature = "dev"))]
                (None, true) => anyhow::bail!(
                    "no [database] url: this build has no throwaway PostgreSQL (build with the \
                     `dev` feature for `serve --dev` without a database)"
                ),
                (None, false) => return Err(server::ServeError::NoDatabase.into()),
            };
            let auth = auth_mode(&cfg)?;
            match &auth {
                AuthMode::Keystone(_) => {
                    tracing::info!(auth_url = ?cfg.keystone.auth_url, "tokens are validated by Keystone");
                }
                #[cfg(feature = "dev")]
                AuthMode::DevHeaders => tracing::warn!(
                    "INSECURE DEVELOPMENT MODE: no Keystone; identity is taken from X-User-Id / \
                     X-Project-Id / X-Roles headers (default: admin of project 'dev') and nothing is \
                     looked up in Glance/Nova/Neutron; never expose this to a network"
                ),
            }
            let listener = server::bind(&cfg).await?;
            let setup = server::build_fleet(&cfg, &auth, dev).await?;
            let state = server::build_state_for(cfg, &url, auth, &setup.members).await?;
            let result = server::serve_members(state, &setup.members, listener).await;
            drop(setup);
            #[cfg(feature = "dev")]
            if let Some(mut pg) = embedded {
                tokio::task::spawn_blocking(move || pg.stop()).await?;
            }
            Ok(result?)
        }
    }
}

/// `simulate`: the simulated management cluster until SIGINT/SIGTERM; its kubeconfig is written
/// (atomically: whoever waits for the file reads it whole) once the API listens.
#[cfg(feature = "dev")]
async fn simulate(
    kubeconfig_out: &std::path::Path,
    listen: std::net::SocketAddr,
    allow_remote: bool,
    step_ms: u64,
    crd_dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use magnum_capi::simkube::{SimCluster, SimOptions};
    if !listen.ip().is_loopback() && !allow_remote {
        anyhow::bail!(
            "--listen {listen} is not a loopback address: the simulated management cluster \
             authenticates nobody (anyone reaching it is cluster admin); add --allow-remote to \
             listen there anyway"
        );
    }
    let opts = SimOptions {
        addr: listen,
        step: std::time::Duration::from_millis(step_ms),
        validator: crd_dir.map(server::crd_validator).transpose()?,
        ..SimOptions::default()
    };
    let sim = SimCluster::start(opts).await?;
    let text = yaml_serde::to_string(&sim.kubeconfig())?;
    let tmp = kubeconfig_out.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, kubeconfig_out)
        .with_context(|| format!("cannot write {}", kubeconfig_out.display()))?;
    tracing::warn!(
        url = %sim.url(),
        kubeconfig = %kubeconfig_out.display(),
        "DEVELOPMENT: simulated management cluster (no real CAPI, no authentication)"
    );
    println!("{}", sim.url());
    server::shutdown_signal().await;
    sim.shutdown().await;
    Ok(())
}

/// `api-proxy`: the proxy on `[api_proxy] bind`, following `[api_proxy] kubeconfig`'s (else
/// `KUBECONFIG`'s, else the in-cluster) management cluster, until SIGINT/SIGTERM.
async fn api_proxy(config: Config) -> anyhow::Result<()> {
    let cfg = config.api_proxy;
    let key = cfg.proxy_key()?;
    let client = match &cfg.kubeconfig {
        Some(path) => server::client_from_kubeconfig(path)
            .await
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("management cluster {}", path.display()))?,
        None => kube::Client::try_default()
            .await
            .context("management cluster (KUBECONFIG, else in-cluster)")?,
    };
    let listener = tokio::net::TcpListener::bind(cfg.bind)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.bind))?;
    let proxy = magnum_capi::api_proxy::ApiProxy::start(&cfg, key, client, listener)?;
    tracing::info!(listen = %proxy.addr(), netns_dir = %cfg.netns_dir.display(), max_dials = cfg.max_dials, "api-proxy serving");
    server::shutdown_signal().await;
    drop(proxy);
    Ok(())
}

/// `import`: the report on stdout; any failure is an error (non-zero exit) and wrote nothing.
async fn import(magnum_db: &str, dry_run: bool, cfg: Config) -> anyhow::Result<()> {
    let url =
        cfg.database.url.clone().context(
            "[database] url is required: the import writes into magnum-capi's PostgreSQL",
        )?;
    let pool = db::connect(&url, &cfg.database).await?;
    if let Err(missing) = db::migrations_current(&pool).await? {
        anyhow::bail!("magnum-capi's database is not ready: {missing}");
    }
    // The management clusters Magnum's Cluster API drivers' clusters are looked for on (to
    // adopt them): those configured; none configured, nothing is adopted.
    let configured = cfg.capi.kubeconfig.is_some()
        || !cfg.capi.management_clusters.is_empty()
        || std::env::var_os("KUBECONFIG").is_some();
    let fleet = if configured {
        server::build_fleet(&cfg, &auth_mode(&cfg)?, false)
            .await?
            .members
    } else {
        Vec::new()
    };
    let outcome = magnum_capi::import::run(magnum_db, &pool, dry_run, &cfg.capi, &fleet).await?;
    print!("{}", outcome.report);
    Ok(())
}

/// Keystone when `[keystone]` is configured, else development header identity (`serve --dev`;
/// a build without the `dev` feature has none and says so).
fn auth_mode(cfg: &Config) -> anyhow::Result<AuthMode> {
    if cfg.keystone.active() {
        let ks = Keystone::new(&cfg.keystone, &cfg.openstack)?;
        return Ok(AuthMode::Keystone(Arc::new(ks)));
    }
    development_identity()
}

#[cfg(feature = "dev")]
fn development_identity() -> anyhow::Result<AuthMode> {
    Ok(AuthMode::DevHeaders)
}

#[cfg(not(feature = "dev"))]
fn development_identity() -> anyhow::Result<AuthMode> {
    anyhow::bail!(
        "[keystone] auth_url is required: this build has no `dev` feature, so there is no \
         development identity"
    )
}

/// `render`: the manifests the driver would apply for the cluster these API bodies describe.
/// Nothing is looked up in OpenStack; the credential and the CAs are marked placeholders.
fn render_manifests(
    template: &std::path::Path,
    cluster: &std::path::Path,
    nodegroups: Option<&std::path::Path>,
    config: Option<&std::path::Path>,
) -> anyhow::Result<String> {
    use magnum_capi::capi::{render, values};
    let mut cfg = Config::load(config)?;
    if cfg.capi.keystone_auth_url.is_none() {
        cfg.capi.keystone_auth_url = cfg.keystone.public_v3_url();
    }
    let read = |path: &std::path::Path| -> anyhow::Result<serde_json::Value> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
    };
    let (t, c) = (read(template)?, read(cluster)?);
    let n = nodegroups.map(read).transpose()?;
    let rows = values::rows_from_api(&t, &c, n.as_ref())?;
    let cas = values::placeholder_cas();
    let v = values::build(values::Inputs {
        template: &rows.template,
        cluster: &rows.cluster,
        nodegroups: &rows.nodegroups,
        config: &cfg.capi,
        credentials: Some(values::placeholder_credentials()),
        cas: Some(&cas),
        rollout_after: None,
        etcd_encryption: None,
    })?;
    let objects = render::Renderer::new(cfg.capi.templates_dir.as_deref())?.render(&v)?;
    Ok(format!(
        "# Manifests for a hypothetical cluster, rendered by `magnum-capi render`.\n\
         # The application credential and the CAs in the Secrets are PLACEHOLDERS, not secrets;\n\
         # images, flavors and networks are referenced as given (nothing was looked up).\n{}",
        render::to_yaml(&objects)
    ))
}
