//! What operators watch: the readiness of the service's dependencies (`/readyz`, `magnum-capi
//! check`) and the database-backed gauges `/metrics` reports.

use std::time::Duration;

use crate::app::App;
use crate::db;
use crate::domain::status::Status;
use crate::driver::Check;
use crate::telemetry;

/// How long one dependency may take to answer a readiness check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The outcome of every readiness check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Readiness {
    /// `ok` or `failed`.
    pub status: &'static str,
    pub checks: Vec<Check>,
}

impl Readiness {
    pub fn ok(&self) -> bool {
        !self.checks.iter().any(Check::blocks)
    }
}

async fn bounded<F>(name: &str, f: F) -> Check
where
    F: std::future::Future<Output = Result<String, String>>,
{
    match tokio::time::timeout(CHECK_TIMEOUT, f).await {
        Ok(r) => Check::new(name, r),
        Err(_) => Check::new(
            name,
            Err(format!("no answer within {}s", CHECK_TIMEOUT.as_secs())),
        ),
    }
}

/// PostgreSQL reachable and migrated, Keystone reachable (when requests are authenticated by
/// it), and whatever the backend depends on (the management cluster and its CRDs).
pub async fn readiness(app: &App) -> Readiness {
    let mut checks = vec![
        bounded("postgresql", async {
            sqlx::query_scalar::<_, String>("SELECT version()")
                .fetch_one(&app.pool)
                .await
                .map(|v| v.split(" on ").next().unwrap_or_default().to_string())
                .map_err(|e| format!("unreachable: {e}"))
        })
        .await,
        bounded("migrations", async {
            match db::migrations_current(&app.pool).await {
                Ok(Ok(latest)) => Ok(format!("at {latest}")),
                Ok(Err(missing)) => Err(missing),
                Err(e) => Err(format!("cannot read: {e}")),
            }
        })
        .await,
    ];
    if let Some(k) = app.auth.keystone() {
        checks.push(
            bounded("keystone", async {
                k.reachable()
                    .await
                    .map(|v| format!("identity {v}"))
                    .map_err(|e| e.to_string())
            })
            .await,
        );
    }
    match tokio::time::timeout(CHECK_TIMEOUT * 2, app.backend.readiness()).await {
        Ok(backend) => checks.extend(backend),
        Err(_) => checks.push(Check::new(
            "management_cluster",
            Err(format!(
                "no answer within {}s",
                (CHECK_TIMEOUT * 2).as_secs()
            )),
        )),
    }
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
