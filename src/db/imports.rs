//! Writes of `magnum-capi import` (issue 25): templates, clusters, nodegroups and quotas upserted
//! by Magnum's keys (UUIDs; project and resource for quotas) inside the caller's one transaction,
//! and the `imported_cluster` record of each imported cluster. Running it again updates what
//! changed and creates nothing twice. Also the reads that keep the rest of the service away from
//! read-only imported clusters.
//!
//! Each table is written by one statement: the records travel as one JSON array and
//! `jsonb_populate_recordset` turns them into rows of the table's own type, so 10,000 clusters
//! cost one round trip instead of 10,000.

use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::DbResult;
use crate::domain::imported::{ClusterRecord, ImportState, NodegroupRecord, Plan};

/// Rows created, changed and left as they were by one table's upsert.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    /// Rows removed because Magnum no longer has them (read-only imported clusters and the
    /// nodegroups of imported clusters only).
    pub removed: u64,
}

/// What one run wrote, per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub templates: Counts,
    pub clusters: Counts,
    pub nodegroups: Counts,
    pub quotas: Counts,
}

// The columns an import writes are Magnum's own: each table's sort keys (every model column,
// as Magnum accepts them), plus the nodegroup's node labels and taints (not sortable).

/// The nodegroup columns an import writes.
fn nodegroup_columns() -> Vec<&'static str> {
    super::nodegroups::SORT_KEYS
        .iter()
        .copied()
        .chain(["node_labels", "node_taints"])
        .collect()
}

/// `INSERT … SELECT` from the JSON array `$1` into `table`, updating a row of the same `key` only
/// when a column differs; returns one `inserted` flag per row written. New rows keep Magnum's
/// `id` (the API shows nodegroup ids, takes integer idents and lists in id order); a row already
/// here keeps its own. An id taken by a row made here fails the run (the primary key).
fn upsert_sql(table: &str, columns: &[&str], key: &str) -> String {
    let list = columns.join(", ");
    let r_list = columns
        .iter()
        .map(|c| format!("r.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let columns: Vec<&str> = columns.iter().copied().filter(|c| *c != "id").collect();
    let set = columns
        .iter()
        .map(|c| format!("{c} = EXCLUDED.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mine = columns
        .iter()
        .map(|c| format!("{table}.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let theirs = columns
        .iter()
        .map(|c| format!("EXCLUDED.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "INSERT INTO {table} ({list})
         SELECT {r_list}
           FROM jsonb_populate_recordset(NULL::{table}, $1) WITH ORDINALITY AS r
          ORDER BY r.ordinality
         ON CONFLICT ({key}) DO UPDATE SET {set}
          WHERE ({mine}) IS DISTINCT FROM ({theirs})
         RETURNING (xmax = 0) AS inserted"
    )
}

async fn upsert<T: Serialize>(
    conn: &mut PgConnection,
    table: &str,
    columns: &[&str],
    key: &str,
    records: &[T],
) -> DbResult<Counts> {
    let sql = upsert_sql(table, columns, key);
    let flags: Vec<bool> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(sqlx::types::Json(records))
        .fetch_all(&mut *conn)
        .await?;
    let created = flags.iter().filter(|f| **f).count() as u64;
    let updated = flags.len() as u64 - created;
    // The table's own ids continue after the highest one now in use.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT setval(pg_get_serial_sequence('{table}', 'id'),
                       GREATEST((SELECT max(id) FROM {table}), 1))"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(Counts {
        created,
        updated,
        unchanged: records.len() as u64 - created - updated,
        removed: 0,
    })
}

/// The clusters among `uuids` that exist here but were not imported (made through this API):
/// an import must not overwrite them.
pub async fn clusters_not_imported(conn: &mut PgConnection, uuids: &[Uuid]) -> DbResult<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "SELECT c.uuid FROM cluster c
          WHERE c.uuid = ANY($1)
            AND NOT EXISTS (SELECT 1 FROM imported_cluster i WHERE i.cluster_uuid = c.uuid)
          ORDER BY c.id",
    )
    .bind(uuids)
    .fetch_all(&mut *conn)
    .await?)
}

#[derive(Serialize)]
struct ImportedRow<'a> {
    cluster_uuid: Uuid,
    source_driver: &'a str,
    driver_basis: &'a str,
    stack_id: Option<&'a str>,
    state: &'a str,
}

/// Writes `plan` in the caller's transaction `conn`: templates, clusters (and their
/// `imported_cluster` records), nodegroups, quotas. Read-only imported clusters Magnum no longer
/// has are removed, and so are nodegroups of imported clusters Magnum no longer has; templates
/// and quotas are never removed (they may be in use here).
pub async fn write(conn: &mut PgConnection, plan: &Plan) -> DbResult<Written> {
    let templates = upsert(
        conn,
        "cluster_template",
        &super::templates::SORT_KEYS,
        "uuid",
        &plan.templates,
    )
    .await?;
    // Clusters this service manages now (`Plan::managed_here`) keep their records here.
    let ours = |uuid: &Uuid| plan.managed_here.contains(uuid);
    let cluster_rows: Vec<&ClusterRecord> =
        plan.clusters.iter().filter(|c| !ours(&c.uuid)).collect();
    let mut clusters = upsert(
        conn,
        "cluster",
        super::clusters::SORT_KEYS,
        "uuid",
        &cluster_rows,
    )
    .await?;
    let imported: Vec<ImportedRow<'_>> = cluster_rows.iter().copied().map(imported_row).collect();
    sqlx::query(
        "INSERT INTO imported_cluster (cluster_uuid, source_driver, driver_basis, stack_id, state)
         SELECT r.cluster_uuid, r.source_driver, r.driver_basis, r.stack_id, r.state
           FROM jsonb_populate_recordset(NULL::imported_cluster, $1) AS r
         ON CONFLICT (cluster_uuid) DO UPDATE
            SET source_driver = EXCLUDED.source_driver, driver_basis = EXCLUDED.driver_basis,
                stack_id = EXCLUDED.stack_id, last_import_at = now(),
                -- Adopted stays adopted: a later run that cannot see the management cluster
                -- must not hand a managed cluster back to read-only.
                state = CASE WHEN imported_cluster.state = 'adopted' THEN 'adopted'
                             ELSE EXCLUDED.state END",
    )
    .bind(sqlx::types::Json(&imported))
    .execute(&mut *conn)
    .await?;
    let uuids: Vec<Uuid> = plan.clusters.iter().map(|c| c.uuid).collect();
    clusters.removed = sqlx::query(
        "DELETE FROM cluster c
          USING imported_cluster i
          WHERE i.cluster_uuid = c.uuid AND i.state = $2 AND c.uuid <> ALL($1)",
    )
    .bind(&uuids)
    .bind(ImportState::ReadOnly.as_str())
    .execute(&mut *conn)
    .await?
    .rows_affected();
    // Before the upsert: a nodegroup Magnum replaced by another of the same name must be gone
    // first (names are unique per cluster).
    let ng_uuids: Vec<Uuid> = plan.nodegroups.iter().map(|n| n.uuid).collect();
    let removed = sqlx::query(
        "DELETE FROM nodegroup n
          USING imported_cluster i
          WHERE i.cluster_uuid = n.cluster_id AND n.uuid <> ALL($1)
            AND i.cluster_uuid <> ALL($2)",
    )
    .bind(&ng_uuids)
    .bind(plan.managed_here.iter().collect::<Vec<_>>())
    .execute(&mut *conn)
    .await?
    .rows_affected();
    let nodegroup_rows: Vec<&NodegroupRecord> = plan
        .nodegroups
        .iter()
        .filter(|n| !ours(&n.cluster_id))
        .collect();
    let mut nodegroups = upsert(
        conn,
        "nodegroup",
        &nodegroup_columns(),
        "uuid",
        &nodegroup_rows,
    )
    .await?;
    nodegroups.removed = removed;
    let quotas = upsert(
        conn,
        "quotas",
        super::quotas::SORT_KEYS,
        "project_id, resource",
        &plan.quotas,
    )
    .await?;
    Ok(Written {
        templates,
        clusters,
        nodegroups,
        quotas,
    })
}

fn imported_row(c: &ClusterRecord) -> ImportedRow<'_> {
    ImportedRow {
        cluster_uuid: c.uuid,
        source_driver: &c.source.name,
        driver_basis: c.source.basis,
        stack_id: c.stack_id.as_deref(),
        state: c.state.as_str(),
    }
}

/// How a cluster was imported, when it was.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ImportedCluster {
    pub cluster_uuid: Uuid,
    pub source_driver: String,
    pub driver_basis: String,
    pub stack_id: Option<String>,
    pub state: String,
}

impl ImportedCluster {
    pub fn state(&self) -> Option<ImportState> {
        ImportState::parse(&self.state)
    }
}

/// The import record of `cluster`; `None` for a cluster made here.
pub async fn of_cluster<'e>(
    ex: impl PgExecutor<'e>,
    cluster: Uuid,
) -> DbResult<Option<ImportedCluster>> {
    Ok(sqlx::query_as(
        "SELECT cluster_uuid, source_driver, driver_basis, stack_id, state
           FROM imported_cluster WHERE cluster_uuid = $1",
    )
    .bind(cluster)
    .fetch_optional(ex)
    .await?)
}

/// Places adopted cluster `cluster` on management cluster `member` (`""`: the unnamed one),
/// where its driver's objects were found.
pub async fn place(conn: &mut PgConnection, cluster: Uuid, member: &str) -> DbResult<()> {
    sqlx::query("UPDATE cluster SET management_cluster = NULLIF($2, '') WHERE uuid = $1")
        .bind(cluster)
        .bind(member)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The imported clusters among `uuids` already adopted (a re-import keeps them adopted), each
/// with whether it was changed through this service since (an operation was accepted for it:
/// an import then keeps its records, `Plan::managed_here`).
pub async fn adopted_among(conn: &mut PgConnection, uuids: &[Uuid]) -> DbResult<Vec<(Uuid, bool)>> {
    Ok(sqlx::query_as(
        "SELECT i.cluster_uuid,
                EXISTS (SELECT 1 FROM operation o WHERE o.cluster_uuid = i.cluster_uuid)
           FROM imported_cluster i
          WHERE i.cluster_uuid = ANY($1) AND i.state = $2",
    )
    .bind(uuids)
    .bind(ImportState::Adopted.as_str())
    .fetch_all(&mut *conn)
    .await?)
}

/// Whether `cluster` is a read-only import (the status writer leaves those alone).
pub async fn is_read_only<'e>(ex: impl PgExecutor<'e>, cluster: Uuid) -> DbResult<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM imported_cluster WHERE cluster_uuid = $1 AND state = $2)",
    )
    .bind(cluster)
    .bind(ImportState::ReadOnly.as_str())
    .fetch_one(ex)
    .await?)
}
