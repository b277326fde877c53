//! What operators watch: the readiness of the service's dependencies (`/readyz`, `magnum-capi
//! check`) and the database-backed gauges `/metrics` reports.

use std::time::Duration;

use crate::app::App;
use crate::db;
use crate::domain::status::Status;
use crate::driver::Check;
use crate::openstack::{Keystone, catalog};
use crate::telemetry;

/// How long one dependency may take to answer a readiness check: the checks run at once, so
/// the answer comes within a Kubernetes probe's default-sized timeout (5 s).
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);
/// The management clusters' checks ask several questions each (bounded by the driver too).
const BACKEND_TIMEOUT: Duration = Duration::from_secs(4);

/// The outcome of every readiness check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Readiness {
    /// `ok` or `failed`.
    pub status: &'static str,
    pub checks: Vec<Check>,
}

impl Readiness {
    /// Whether this replica can answer reads (PostgreSQL reachable and migrated): what
    /// `/readyz` answers 200 for.
    pub fn ok(&self) -> bool {
        !self.checks.iter().any(Check::blocks)
    }

    /// Whether every dependency answered (what `magnum-capi check` passes on).
    pub fn all_ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The answer for someone who may not see versions and addresses: a passing check says
    /// `ok`, a failing one keeps its reason.
    pub fn without_details(mut self) -> Self {
        for c in self.checks.iter_mut().filter(|c| c.ok) {
            c.detail = "ok".into();
        }
        self
    }
}

async fn bounded<F>(name: &str, limit: Duration, f: F) -> Check
where
    F: std::future::Future<Output = Result<String, String>>,
{
    match tokio::time::timeout(limit, f).await {
        Ok(r) => Check::new(name, r),
        Err(_) => Check::new(name, Err(format!("no answer within {}s", limit.as_secs()))),
    }
}

/// PostgreSQL reachable and migrated (what readiness stands on), plus Keystone (when requests
/// are authenticated by it) and whatever the backend depends on (the management clusters and
/// their CRDs), reported but never making the replica unready: with Keystone or a management
/// cluster down every replica would leave the Service at once, and reads, deletes and requests
/// with cached tokens would fail with them. The checks run at once, each bounded.
pub async fn readiness(app: &App) -> Readiness {
    let postgresql = bounded("postgresql", CHECK_TIMEOUT, async {
        sqlx::query_scalar::<_, String>("SELECT version()")
            .fetch_one(&app.pool)
            .await
            .map(|v| v.split(" on ").next().unwrap_or_default().to_string())
            .map_err(|e| format!("unreachable: {e}"))
    });
    let migrations = bounded("migrations", CHECK_TIMEOUT, async {
        match db::migrations_current(&app.pool).await {
            Ok(Ok(latest)) => Ok(format!("at {latest}")),
            Ok(Err(missing)) => Err(missing),
            Err(e) => Err(format!("cannot read: {e}")),
        }
    });
    let keystone = async {
        match app.auth.keystone() {
            Some(k) => Some(
                bounded("keystone", CHECK_TIMEOUT, async {
                    k.reachable()
                        .await
                        .map(|v| format!("identity {v}"))
                        .map_err(|e| e.to_string())
                })
                .await,
            ),
            None => None,
        }
    };
    let backend = async {
        match tokio::time::timeout(BACKEND_TIMEOUT, app.backend.readiness()).await {
            Ok(found) => found,
            Err(_) => vec![Check::new(
                "management_cluster",
                Err(format!("no answer within {}s", BACKEND_TIMEOUT.as_secs())),
            )],
        }
    };
    let (postgresql, migrations, keystone, backend) =
        tokio::join!(postgresql, migrations, keystone, backend);
    let mut checks = vec![postgresql, migrations];
    let reported = keystone.into_iter().chain(backend).map(|mut c| {
        c.optional = true;
        c
    });
    checks.extend(reported);
    for c in &checks {
        telemetry::ready(&c.name, c.ok);
    }
    let status = if !checks.iter().any(Check::blocks) {
        "ok"
    } else {
        "failed"
    };
    Readiness { status, checks }
}

/// `magnum-capi check`: the readiness checks, then what only an operator's check asks — a
/// login with the service's own credentials and the catalog entries it uses, and, on every
/// management cluster, each permission the driver needs.
pub async fn preflight(app: &App) -> Readiness {
    let (mut found, login, permissions) = tokio::join!(
        readiness(app),
        async {
            match app.auth.keystone() {
                Some(k) => keystone_login(k).await,
                None => Vec::new(),
            }
        },
        async {
            match tokio::time::timeout(PERMISSIONS_TIMEOUT, app.backend.permissions()).await {
                Ok(found) => found,
                Err(_) => vec![Check::new(
                    "permissions",
                    Err(format!(
                        "no answer within {}s",
                        PERMISSIONS_TIMEOUT.as_secs()
                    )),
                )],
            }
        }
    );
    found.checks.extend(login);
    found.checks.extend(permissions);
    found
}

/// The whole permissions check (about eighty reviews per management cluster, eight at once).
const PERMISSIONS_TIMEOUT: Duration = Duration::from_secs(30);

/// The service user's login, its roles and the catalog entries the service uses.
async fn keystone_login(k: &Keystone) -> Vec<Check> {
    // Each call is bounded by `[keystone] timeout_secs`.
    let identity = match k.login().await {
        Ok(Ok(identity)) => identity,
        Ok(Err(refused)) => {
            return vec![Check::new(
                "keystone_login",
                Err(format!("the service's credentials are refused: {refused}")),
            )];
        }
        Err(e) => return vec![Check::new("keystone_login", Err(e.to_string()))],
    };
    let who = format!(
        "user {} in project {}, roles {}",
        identity.user_name,
        identity.project_name.as_deref().unwrap_or("(none)"),
        identity.roles.join(",")
    );
    // Keystone lets a user validate only its own tokens unless it has one of these.
    let validates = identity
        .roles
        .iter()
        .any(|r| r == "service" || r == "admin");
    let mut checks = vec![Check::new(
        "keystone_login",
        if validates {
            Ok(who)
        } else {
            Err(format!(
                "{who}: neither the service nor the admin role, so Keystone refuses it \
                 validating callers' tokens"
            ))
        },
    )];
    for used in catalog::USED {
        let found = k.endpoint(&identity.catalog, used.types);
        let result = match found {
            Some(url) => Ok(url.to_string()),
            None if used.optional => Ok(format!("none ({}; optional)", used.purpose)),
            None => Err(format!(
                "no {} endpoint at {} ({})",
                used.types.join(" or "),
                k.endpoint_scope(),
                used.purpose
            )),
        };
        checks.push(Check::new(&format!("catalog:{}", used.name), result));
    }
    checks
}

/// openstack-exporter's container-infra families for every cluster (Prometheus text), or nothing
/// when `[http] metrics_per_cluster` is off. A failed read answers `openstack_container_infra_up 0`.
pub async fn container_infra_metrics(app: &App) -> String {
    if !app.config.http.metrics_per_cluster {
        return String::new();
    }
    match db::clusters::exported(&app.pool).await {
        Ok(rows) => {
            let clusters: Vec<telemetry::InfraCluster<'_>> = rows
                .iter()
                .map(|r| telemetry::InfraCluster {
                    uuid: r.uuid,
                    name: r.name.as_deref().unwrap_or_default(),
                    stack_id: r.stack_id.as_deref().unwrap_or_default(),
                    status: &r.status,
                    project_id: &r.project_id,
                    node_count: r.node_count,
                    master_count: r.master_count,
                })
                .collect();
            telemetry::container_infra(Some(&clusters))
        }
        Err(e) => {
            tracing::warn!(error = %e, "metrics: clusters not read for the per-cluster families");
            telemetry::container_infra(None)
        }
    }
}

/// Sets the gauges `/metrics` reads from the database (queue, clusters by status and health,
/// leftover credentials).
pub async fn refresh_gauges(app: &App) -> Result<(), db::DbError> {
    let g = db::gauges(&app.pool).await?;
    telemetry::queue(g.queue_depth, g.oldest_pending_secs);
    let statuses: Vec<&str> = Status::all_names().collect();
    telemetry::by_label(
        telemetry::CLUSTERS,
        "status",
        &g.clusters_by_status,
        &statuses,
    );
    telemetry::by_label(
        telemetry::CLUSTERS_HEALTH,
        "health",
        &g.clusters_by_health,
        &["HEALTHY", "UNHEALTHY", "UNKNOWN"],
    );
    telemetry::leftover_credentials(g.leftover_credentials);
    if !app.config.capi.management_clusters.is_empty() {
        let counts = db::clusters::count_by_management_cluster_and_status(&app.pool).await?;
        telemetry::management_cluster_clusters(&counts);
    }
    Ok(())
}
