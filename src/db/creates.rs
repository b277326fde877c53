//! A cluster create recorded in one statement: the project's quota checked under its lock, the
//! cluster, its two default nodegroups and its create operation inserted — one round trip to
//! PostgreSQL, committed on its own (the statement is its transaction).

use sqlx::{PgExecutor, PgPool};

use super::DbResult;
use super::clusters::ClusterRow;
use super::nodegroups::{self, NodegroupRow};
use super::operations::{self, NewOperation};

/// What [`record`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The rows and the operation are committed.
    Created,
    /// The project holds `limit` clusters already: nothing was written.
    QuotaReached { limit: i64 },
}

/// Whether `project` is at its cluster quota (its `quotas` row, else `default_limit`), asked
/// under the project's lock as [`record`] asks it: the limit when it is reached.
pub async fn quota_reached(
    pool: &PgPool,
    project: &str,
    default_limit: i64,
) -> DbResult<Option<i64>> {
    let (reached,): (Option<i64>,) =
        sqlx::query_as("SELECT magnum_capi_cluster_quota_reached($1, $2)")
            .bind(project)
            .bind(default_limit)
            .fetch_one(pool)
            .await?;
    Ok(reached)
}

/// Records a new cluster `c` (its project's quota permitting: the project's `quotas` row, else
/// `default_limit`), its nodegroups and `op`, in one statement run as its own transaction
/// (`ex` must not be inside one that outlives it, or the project's lock would be held longer).
///
/// `magnum_capi_cluster_quota_reached` takes the project's advisory lock and reads the project's
/// cluster count (`cluster_project_count`, kept by `cluster`'s triggers in the writing
/// transaction) with a snapshot taken after it (a volatile function's statements each take a new
/// one), so two concurrent creates cannot both take the last place; the inserts run only when
/// it finds room, and the foreign keys are checked when the statement ends, after all of them.
pub async fn record<'e>(
    ex: impl PgExecutor<'e>,
    c: &ClusterRow,
    ngs: [&NodegroupRow; 2],
    op: &NewOperation<'_>,
    default_limit: i64,
) -> DbResult<Recorded> {
    let [m, w] = ngs;
    let q = sqlx::query_as(
        "WITH room AS MATERIALIZED (
           SELECT magnum_capi_cluster_quota_reached($1, $2) AS reached),
         c AS (
           INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, keypair,
               docker_volume_size, labels, master_flavor_id, flavor_id, stack_id, status,
               status_reason, health_status, health_status_reason, create_timeout, discovery_url,
               fixed_network, fixed_subnet, floating_ip_enabled, master_lb_enabled, resolved,
               management_cluster)
           SELECT $3, $1, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
               $19, $20, $21, $22, $23, NULLIF($24, '')
             FROM room WHERE reached IS NULL
           RETURNING uuid),
         ng AS (
           INSERT INTO nodegroup (uuid, name, cluster_id, project_id, docker_volume_size, labels,
               flavor_id, image_id, node_addresses, node_count, role, max_node_count,
               min_node_count, is_default, stack_id, status, status_reason, version, node_labels,
               node_taints)
           SELECT v.* FROM c, (VALUES
             -- the master's and the worker's columns, bound by `nodegroups::bind_columns`
             ($25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40, $41,
              $42, $43, $44),
             ($45, $46, $47, $48, $49, $50, $51, $52, $53, $54, $55, $56, $57, $58, $59, $60, $61,
              $62, $63, $64)) AS v),
         op AS (
           INSERT INTO operation (cluster_uuid, nodegroup_uuid, kind, payload, request_id)
           SELECT $65, $66, $67, $68, $69 FROM c
           RETURNING id)
         SELECT reached, (SELECT pg_notify('magnum_capi_operations', id::text)::text FROM op)
           FROM room",
    )
    .bind(&c.project_id)
    .bind(default_limit)
    .bind(c.uuid)
    .bind(&c.user_id)
    .bind(&c.name)
    .bind(c.cluster_template_id)
    .bind(&c.keypair)
    .bind(c.docker_volume_size)
    .bind(&c.labels)
    .bind(&c.master_flavor_id)
    .bind(&c.flavor_id)
    .bind(&c.stack_id)
    .bind(&c.status)
    .bind(&c.status_reason)
    .bind(&c.health_status)
    .bind(&c.health_status_reason)
    .bind(c.create_timeout)
    .bind(&c.discovery_url)
    .bind(&c.fixed_network)
    .bind(&c.fixed_subnet)
    .bind(c.floating_ip_enabled)
    .bind(c.master_lb_enabled)
    .bind(&c.resolved)
    .bind(&c.management_cluster);
    let q = nodegroups::bind_columns(nodegroups::bind_columns(q, m), w);
    let (reached, _): (Option<i64>, Option<String>) =
        operations::bind_columns(q, op).fetch_one(ex).await?;
    Ok(match reached {
        None => Recorded::Created,
        Some(limit) => Recorded::QuotaReached { limit },
    })
}
