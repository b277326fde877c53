//! `cluster` rows: insert, project-scoped lookups, paginated lists, status and health writes, delete.

use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;
use sqlx::types::Json;
use sqlx::{FromRow, PgExecutor, PgPool};
use uuid::Uuid;

use super::DbResult;
use crate::domain::labels::Labels;
use crate::domain::resources::Resolved;

#[derive(Debug, Clone, FromRow, PartialEq)]
pub struct ClusterRow {
    pub id: i64,
    pub uuid: Uuid,
    pub project_id: String,
    pub user_id: String,
    pub name: Option<String>,
    pub cluster_template_id: Uuid,
    pub keypair: Option<String>,
    pub docker_volume_size: Option<i32>,
    pub labels: Json<Labels>,
    pub master_flavor_id: Option<String>,
    pub flavor_id: Option<String>,
    pub stack_id: Option<String>,
    pub api_address: Option<String>,
    pub status: String,
    pub status_reason: Option<String>,
    pub health_status: Option<String>,
    pub health_status_reason: Json<serde_json::Value>,
    pub create_timeout: Option<i32>,
    pub discovery_url: Option<String>,
    pub coe_version: Option<String>,
    pub container_version: Option<String>,
    pub ca_cert_ref: Option<String>,
    pub magnum_cert_ref: Option<String>,
    pub etcd_ca_cert_ref: Option<String>,
    pub front_proxy_ca_cert_ref: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub floating_ip_enabled: Option<bool>,
    pub master_lb_enabled: Option<bool>,
    /// OpenStack ids the cluster resolved to at create (image, flavors, networks).
    pub resolved: Json<Resolved>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The management cluster it was placed on at create (`[[capi.management_clusters]]`
    /// name); `None`: the unnamed one (`[capi] kubeconfig`).
    pub management_cluster: Option<String>,
}

impl ClusterRow {
    /// The row a create records for `plan`, owned by `project_id`/`user_id`: in
    /// `CREATE_IN_PROGRESS`, nothing resolved yet.
    pub fn from_plan(
        plan: &crate::domain::new_cluster::ClusterPlan,
        project_id: &str,
        user_id: &str,
    ) -> Self {
        crate::domain::spec::Cluster::from_plan(plan, project_id, user_id).into()
    }

    /// The name of its management cluster: `""` for the unnamed one.
    pub fn management_cluster_name(&self) -> &str {
        self.management_cluster.as_deref().unwrap_or("")
    }
}

/// Columns a client may sort clusters by (`node_count` is computed, so it is not one).
pub const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "project_id",
    "user_id",
    "name",
    "cluster_template_id",
    "keypair",
    "docker_volume_size",
    "labels",
    "master_flavor_id",
    "flavor_id",
    "stack_id",
    "api_address",
    "status",
    "status_reason",
    "health_status",
    "health_status_reason",
    "create_timeout",
    "discovery_url",
    "coe_version",
    "container_version",
    "ca_cert_ref",
    "magnum_cert_ref",
    "etcd_ca_cert_ref",
    "front_proxy_ca_cert_ref",
    "fixed_network",
    "fixed_subnet",
    "floating_ip_enabled",
    "master_lb_enabled",
    "created_at",
    "updated_at",
];

/// Which clusters a caller can see.
#[derive(Debug, Clone)]
pub enum Scope {
    All,
    Project(String),
}

impl Scope {
    pub(super) fn sql(&self, param: usize) -> String {
        self.sql_on("t", param)
    }
    /// [`Self::sql`]'s condition on the cluster called `alias`.
    pub(super) fn sql_on(&self, alias: &str, param: usize) -> String {
        match self {
            Scope::All => "TRUE".into(),
            Scope::Project(_) => format!("{alias}.project_id = ${param}"),
        }
    }
    pub(super) fn project(&self) -> &str {
        match self {
            Scope::All => "",
            Scope::Project(p) => p,
        }
    }

    /// Whether a cluster of `project` is in the scope ([`Self::sql`]'s condition).
    pub(super) fn holds(&self, project: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Project(p) => p == project,
        }
    }
}

pub async fn by_uuid<'e>(
    ex: impl PgExecutor<'e>,
    scope: &Scope,
    uuid: Uuid,
) -> DbResult<Option<ClusterRow>> {
    let sql = format!(
        "SELECT * FROM cluster t WHERE t.uuid = $1 AND {}",
        scope.sql(2)
    );
    Ok(sqlx::query_as::<_, ClusterRow>(AssertSqlSafe(sql))
        .bind(uuid)
        .bind(scope.project())
        .fetch_optional(ex)
        .await?)
}

/// Up to two visible clusters called `name`.
pub async fn by_name<'e>(
    ex: impl PgExecutor<'e>,
    scope: &Scope,
    name: &str,
) -> DbResult<Vec<ClusterRow>> {
    let sql = format!(
        "SELECT * FROM cluster t WHERE t.name = $1 AND {} ORDER BY t.id LIMIT 2",
        scope.sql(2)
    );
    Ok(sqlx::query_as::<_, ClusterRow>(AssertSqlSafe(sql))
        .bind(name)
        .bind(scope.project())
        .fetch_all(ex)
        .await?)
}

/// Locks the cluster row for the rest of the transaction and reads it as it is now: the first
/// lock of every transaction that writes the cluster, its nodegroups or its operations (the
/// lock order of `db`); `None` when the cluster is gone.
pub async fn lock<'e>(ex: impl PgExecutor<'e>, uuid: Uuid) -> DbResult<Option<ClusterRow>> {
    Ok(
        sqlx::query_as::<_, ClusterRow>("SELECT * FROM cluster WHERE uuid = $1 FOR UPDATE")
            .bind(uuid)
            .fetch_optional(ex)
            .await?,
    )
}

/// What [`lock_unless_held`] found.
#[derive(Debug)]
pub enum Locked {
    /// The row, locked for the rest of the transaction.
    Row(Box<ClusterRow>),
    /// Another transaction holds the row's lock.
    Held,
    /// The cluster is gone.
    Gone,
}

/// [`lock`] without waiting: a row another transaction holds is [`Locked::Held`] at once (the
/// status writer, which must not wait behind one cluster's writer with every other cluster's
/// change queued behind it).
pub async fn lock_unless_held(conn: &mut sqlx::PgConnection, uuid: Uuid) -> DbResult<Locked> {
    let row = sqlx::query_as::<_, ClusterRow>(
        "SELECT * FROM cluster WHERE uuid = $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(uuid)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = row {
        return Ok(Locked::Row(Box::new(row)));
    }
    // Skipped or absent: a plain read tells which, without waiting for the lock.
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM cluster WHERE uuid = $1)")
        .bind(uuid)
        .fetch_one(&mut *conn)
        .await?;
    Ok(if exists { Locked::Held } else { Locked::Gone })
}

/// A cluster with what its views read from elsewhere, fetched in the same statement: its
/// nodegroups' aggregates (in nodegroup order) and its template's labels.
#[derive(Debug, FromRow)]
pub struct ClusterWithNodes {
    #[sqlx(flatten)]
    pub cluster: ClusterRow,
    /// Nodes of the non-master nodegroups.
    pub ng_node_count: i64,
    pub ng_master_count: i64,
    /// `node_addresses` of each non-master nodegroup.
    pub ng_node_addresses: Json<Vec<Vec<String>>>,
    pub ng_master_addresses: Json<Vec<Vec<String>>>,
    /// `(name, status_reason)` of each nodegroup in a `*FAILED` status.
    pub ng_faults: Json<Vec<(String, Option<String>)>>,
    /// The template's labels (the detail views' parent labels); NULL when the template is gone.
    pub template_labels: Option<Json<Labels>>,
    /// The version of its stored view (`db::cluster_views`) these rows are.
    pub view_version: Option<i64>,
}

/// The clusters `uuids` (those still there) with their nodegroups' aggregates and their
/// templates' labels, in one statement: the rows a cluster's view is built from.
pub async fn with_nodes_by_uuids<'e>(
    ex: impl PgExecutor<'e>,
    uuids: &[Uuid],
) -> DbResult<Vec<ClusterWithNodes>> {
    Ok(sqlx::query_as::<_, ClusterWithNodes>(
        "SELECT t.*, g.*,
                (SELECT ct.labels FROM cluster_template ct WHERE ct.uuid = t.cluster_template_id) AS template_labels,
                (SELECT v.version FROM cluster_view v WHERE v.cluster_uuid = t.uuid) AS view_version
           FROM cluster t
           CROSS JOIN LATERAL (
             SELECT COALESCE(sum(n.node_count) FILTER (WHERE n.role <> 'master'), 0)::bigint AS ng_node_count,
                    COALESCE(sum(n.node_count) FILTER (WHERE n.role = 'master'), 0)::bigint AS ng_master_count,
                    COALESCE(json_agg(n.node_addresses ORDER BY n.id) FILTER (WHERE n.role <> 'master'), '[]') AS ng_node_addresses,
                    COALESCE(json_agg(n.node_addresses ORDER BY n.id) FILTER (WHERE n.role = 'master'), '[]') AS ng_master_addresses,
                    COALESCE(json_agg(json_build_array(n.name, n.status_reason) ORDER BY n.id)
                             FILTER (WHERE n.status LIKE '%FAILED'), '[]') AS ng_faults
               FROM nodegroup n WHERE n.cluster_id = t.uuid) g
          WHERE t.uuid = ANY($1)",
    )
    .bind(uuids)
    .fetch_all(ex)
    .await?)
}

/// A cluster as openstack-exporter's container-infra metrics label it: its nodegroups' node and
/// master counts summed, as the API answers them.
#[derive(Debug, Clone, FromRow)]
pub struct ExportedCluster {
    pub uuid: Uuid,
    pub name: Option<String>,
    pub stack_id: Option<String>,
    pub status: String,
    pub project_id: String,
    pub node_count: i64,
    pub master_count: i64,
}

/// Every cluster for the per-cluster metrics, in one statement (ordered by uuid: a scrape's series
/// keep their order).
pub async fn exported(pool: &PgPool) -> DbResult<Vec<ExportedCluster>> {
    Ok(sqlx::query_as::<_, ExportedCluster>(
        "SELECT c.uuid, c.name, c.stack_id, c.status, c.project_id,
                COALESCE(sum(n.node_count) FILTER (WHERE n.role <> 'master'), 0)::bigint AS node_count,
                COALESCE(sum(n.node_count) FILTER (WHERE n.role = 'master'), 0)::bigint AS master_count
           FROM cluster c LEFT JOIN nodegroup n ON n.cluster_id = c.uuid
          GROUP BY c.uuid, c.name, c.stack_id, c.status, c.project_id
          ORDER BY c.uuid",
    )
    .fetch_all(pool)
    .await?)
}

/// Clusters per management cluster (`""`: the unnamed one), for placement by weight.
pub async fn count_by_management_cluster<'e>(
    ex: impl PgExecutor<'e>,
) -> DbResult<Vec<(String, i64)>> {
    Ok(
        sqlx::query_as("SELECT management_cluster, clusters FROM cluster_management_count")
            .fetch_all(ex)
            .await?,
    )
}

/// Clusters per management cluster and status (`magnum-capi management-clusters`, `/metrics`).
pub async fn count_by_management_cluster_and_status(
    pool: &PgPool,
) -> DbResult<Vec<(String, String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT COALESCE(management_cluster, ''), status, count(*) FROM cluster GROUP BY 1, 2
          ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await?)
}

/// The SQL condition "row `cluster` is not a read-only import from Magnum" (`imported_cluster`,
/// written by `db::imports`): such clusters have nothing on a management cluster that speaks
/// for them, so the status writer's queries and the reachability marks skip them.
const NOT_READ_ONLY: &str = "NOT EXISTS (SELECT 1 FROM imported_cluster ic
                              WHERE ic.cluster_uuid = cluster.uuid AND ic.state = 'read_only')";

/// The clusters on management cluster `name` (`""`: the unnamed one) in one of `statuses`
/// (all of them when empty); never a read-only import (nothing there speaks for it).
pub async fn of_management_cluster(
    pool: &PgPool,
    name: &str,
    statuses: &[&str],
) -> DbResult<Vec<Uuid>> {
    let rows: Vec<(Uuid,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT uuid FROM cluster WHERE COALESCE(management_cluster, '') = $1
                AND (cardinality($2::text[]) = 0 OR status = ANY($2)) AND {}",
        NOT_READ_ONLY
    )))
    .bind(name)
    .bind(statuses)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(u,)| u).collect())
}

/// The rows of those of `clusters` that are on management cluster `name` (`""`: the unnamed
/// one) and not read-only imports: what its status writer has anything to write for, in one
/// statement.
pub async fn of_management_cluster_among(
    pool: &PgPool,
    name: &str,
    clusters: &[Uuid],
) -> DbResult<Vec<ClusterRow>> {
    Ok(sqlx::query_as::<_, ClusterRow>(sqlx::AssertSqlSafe(format!(
        "SELECT * FROM cluster WHERE uuid = ANY($2) AND COALESCE(management_cluster, '') = $1
                AND {NOT_READ_ONLY}"
    )))
    .bind(name)
    .bind(clusters)
    .fetch_all(pool)
    .await?)
}

/// While management cluster `name` is unreachable (`reason`), its clusters' health is
/// `UNKNOWN` with `{"management_cluster": reason}`; once it is back (`None`), that finding is
/// cleared for the writer to evaluate again. Returns its clusters. Read-only imports are left
/// as Magnum showed them.
pub async fn mark_unreachable(
    pool: &PgPool,
    name: &str,
    reason: Option<&str>,
) -> DbResult<Vec<Uuid>> {
    let mut tx = pool.begin().await?;
    match reason {
        Some(r) => {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE cluster SET health_status = 'UNKNOWN',
                        health_status_reason = jsonb_build_object('management_cluster', $2::text)
                  WHERE COALESCE(management_cluster, '') = $1 AND {}",
                NOT_READ_ONLY
            )))
            .bind(name)
            .bind(r)
            .execute(&mut *tx)
            .await?;
        }
        None => {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE cluster SET health_status = NULL, health_status_reason = '{{}}'
                  WHERE COALESCE(management_cluster, '') = $1
                    AND health_status_reason ? 'management_cluster' AND {}",
                NOT_READ_ONLY
            )))
            .bind(name)
            .execute(&mut *tx)
            .await?;
        }
    }
    let rows: Vec<(Uuid,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT uuid FROM cluster WHERE COALESCE(management_cluster, '') = $1 AND {}",
        NOT_READ_ONLY
    )))
    .bind(name)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows.into_iter().map(|(u,)| u).collect())
}

pub async fn set_health<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    health_status: Option<&str>,
    reason: &serde_json::Value,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE cluster SET health_status = $2, health_status_reason = $3, updated_at = now() WHERE uuid = $1",
    )
    .bind(uuid)
    .bind(health_status)
    .bind(Json(reason))
    .execute(ex)
    .await?;
    Ok(())
}

/// Fields a driver reports once the cluster exists.
#[derive(Debug, Clone, Default)]
pub struct DriverFacts {
    pub api_address: Option<String>,
    pub coe_version: Option<String>,
    pub container_version: Option<String>,
}

pub async fn set_driver_facts<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    f: &DriverFacts,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE cluster SET api_address = COALESCE($2, api_address),
            coe_version = COALESCE($3, coe_version),
            container_version = COALESCE($4, container_version), updated_at = now()
         WHERE uuid = $1",
    )
    .bind(uuid)
    .bind(&f.api_address)
    .bind(&f.coe_version)
    .bind(&f.container_version)
    .execute(ex)
    .await?;
    Ok(())
}

/// Moves the cluster to template `to` as an applied upgrade: the template it leaves is kept in
/// `upgrade_from` until the cluster is stable again ([`super::status::write`] puts a failed one
/// back on it, a completed one forgets it).
pub async fn upgrade_to<'e>(ex: impl PgExecutor<'e>, uuid: Uuid, to: Uuid) -> DbResult<()> {
    sqlx::query(
        "UPDATE cluster SET upgrade_from = jsonb_build_object('template', cluster_template_id,
                                                              'to', $2::uuid),
                            cluster_template_id = $2, updated_at = now()
          WHERE uuid = $1",
    )
    .bind(uuid)
    .bind(to)
    .execute(ex)
    .await?;
    Ok(())
}

/// The upgrade in flight: the template it left and the one it moves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpgradeFrom {
    pub template: Uuid,
    pub to: Uuid,
}

/// The cluster's upgrade in flight (applied, the cluster not stable since), if any.
pub async fn upgrade_from<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
) -> DbResult<Option<UpgradeFrom>> {
    let row: Option<(Option<Uuid>, Option<Uuid>)> = sqlx::query_as(
        "SELECT (upgrade_from->>'template')::uuid, (upgrade_from->>'to')::uuid
           FROM cluster WHERE uuid = $1",
    )
    .bind(uuid)
    .fetch_optional(ex)
    .await?;
    Ok(match row {
        Some((Some(template), Some(to))) => Some(UpgradeFrom { template, to }),
        _ => None,
    })
}

/// Hard-deletes the cluster; its nodegroups go with it (ON DELETE CASCADE).
pub async fn delete<'e>(ex: impl PgExecutor<'e>, uuid: Uuid) -> DbResult<()> {
    sqlx::query("DELETE FROM cluster WHERE uuid = $1")
        .bind(uuid)
        .execute(ex)
        .await?;
    Ok(())
}

/// Drops the records of a cluster an administrator forgets (a delete that cannot finish), in
/// the caller's transaction after the row is locked: its open operations are closed as failed
/// with `reason` (no worker acts on them again), the credential intents of its creates dropped
/// (the credentials janitor would otherwise delete its credentials in Keystone, and forgetting
/// touches no cloud), and the row (its nodegroups with it). False when there was no row.
pub async fn forget(tx: &mut sqlx::PgConnection, uuid: Uuid, reason: &str) -> DbResult<bool> {
    sqlx::query(
        "UPDATE operation SET state = 'failed', last_error = $2, finished_at = now(),
                updated_at = now(), locked_by = NULL, locked_until = NULL
          WHERE cluster_uuid = $1 AND state IN ('pending', 'running')",
    )
    .bind(uuid)
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM app_credential_intent WHERE cluster_uuid = $1")
        .bind(uuid)
        .execute(&mut *tx)
        .await?;
    let deleted = sqlx::query("DELETE FROM cluster WHERE uuid = $1")
        .bind(uuid)
        .execute(&mut *tx)
        .await?;
    Ok(deleted.rows_affected() > 0)
}

/// `(clusters, nodes)` in scope (clusters from each project's count, as the quota check reads
/// them); nodes count every nodegroup, masters included.
pub async fn stats(pool: &PgPool, project: Option<&str>) -> DbResult<(i64, i64)> {
    let (clusters, nodes): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COALESCE(sum(clusters), 0)::bigint FROM cluster_project_count
                  WHERE $1::text IS NULL OR project_id = $1),
                (SELECT COALESCE(sum(n.node_count), 0)::bigint FROM nodegroup n
                   JOIN cluster c ON c.uuid = n.cluster_id
                  WHERE $1::text IS NULL OR c.project_id = $1)",
    )
    .bind(project)
    .fetch_one(pool)
    .await?;
    Ok((clusters, nodes))
}

/// Records the cluster's application credential id (the secret is never stored).
pub async fn set_app_cred<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    id: Option<&str>,
) -> DbResult<()> {
    sqlx::query("UPDATE cluster SET app_cred_id = $2 WHERE uuid = $1")
        .bind(uuid)
        .bind(id)
        .execute(ex)
        .await?;
    Ok(())
}

/// The cluster's application credential id, if it has one.
pub async fn app_cred<'e>(ex: impl PgExecutor<'e>, uuid: Uuid) -> DbResult<Option<String>> {
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT app_cred_id FROM cluster WHERE uuid = $1")
            .bind(uuid)
            .fetch_optional(ex)
            .await?;
    Ok(row.and_then(|(id,)| id))
}

/// Remembers a credential that could not be deleted yet, for the retry loop.
pub async fn add_leftover_cred<'e>(
    ex: impl PgExecutor<'e>,
    id: &str,
    user_id: &str,
    cluster: Uuid,
    error: &str,
) -> DbResult<()> {
    sqlx::query(
        "INSERT INTO app_credential_leftover (id, user_id, cluster_uuid, last_error)
         VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET last_error = $4",
    )
    .bind(id)
    .bind(user_id)
    .bind(cluster)
    .bind(error)
    .execute(ex)
    .await?;
    Ok(())
}

/// Leftover credentials due for another delete attempt.
pub async fn due_leftover_creds(pool: &PgPool) -> DbResult<Vec<(String, String, i32)>> {
    Ok(sqlx::query_as(
        "SELECT id, user_id, attempts FROM app_credential_leftover WHERE not_before <= now() ORDER BY created_at LIMIT 100",
    )
    .fetch_all(pool)
    .await?)
}

/// A leftover deleted (`done`) or to be retried later with backoff.
pub async fn leftover_cred_result(
    pool: &PgPool,
    id: &str,
    done: bool,
    error: Option<&str>,
    delay_secs: f64,
) -> DbResult<()> {
    if done {
        sqlx::query("DELETE FROM app_credential_leftover WHERE id = $1")
            .bind(id)
            .execute(pool)
            .await?;
    } else {
        sqlx::query(
            "UPDATE app_credential_leftover SET attempts = attempts + 1, last_error = $2,
                not_before = now() + make_interval(secs => $3) WHERE id = $1",
        )
        .bind(id)
        .bind(error)
        .bind(delay_secs)
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// Sets (or, with `None`, removes) one label of the cluster and of all its nodegroups.
pub async fn set_label(
    ex: &mut sqlx::PgConnection,
    uuid: Uuid,
    key: &str,
    value: Option<&str>,
) -> DbResult<()> {
    for table in ["cluster", "nodegroup"] {
        let filter = if table == "cluster" {
            "uuid = $1"
        } else {
            "cluster_id = $1"
        };
        let sql = format!(
            "UPDATE {table} SET labels = CASE WHEN $3::text IS NULL THEN labels - $2
                                              ELSE labels || jsonb_build_object($2::text, $3::text) END
              WHERE {filter}"
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(uuid)
            .bind(key)
            .bind(value)
            .execute(&mut *ex)
            .await?;
    }
    Ok(())
}
