//! Writing the outcome of an operation back to the cluster, aware of operations still queued.

use sqlx::PgExecutor;
use uuid::Uuid;

use super::DbResult;

/// Sets the cluster's status to `status` unless another operation of the cluster is still open
/// (then the cluster stays `*_IN_PROGRESS` for that one).
pub async fn cluster_status<'e>(
    ex: impl PgExecutor<'e>,
    cluster: Uuid,
    op_id: i64,
    status: &str,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE cluster SET status = $3, status_reason = NULL, updated_at = now()
          WHERE uuid = $1 AND NOT EXISTS (
            SELECT 1 FROM operation WHERE cluster_uuid = $1 AND id <> $2
               AND state IN ('pending', 'running'))",
    )
    .bind(cluster)
    .bind(op_id)
    .bind(status)
    .execute(ex)
    .await?;
    Ok(())
}

/// Marks the cluster (and the operation's nodegroup) failed with `reason`.
pub async fn failed(
    ex: &mut sqlx::PgConnection,
    cluster: Uuid,
    nodegroup: Option<Uuid>,
    status: &str,
    reason: &str,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE cluster SET status = $2, status_reason = $3, updated_at = now() WHERE uuid = $1",
    )
    .bind(cluster)
    .bind(status)
    .bind(reason)
    .execute(&mut *ex)
    .await?;
    if let Some(ng) = nodegroup {
        sqlx::query("UPDATE nodegroup SET status = $2, status_reason = $3, updated_at = now() WHERE uuid = $1")
            .bind(ng)
            .bind(status)
            .bind(reason)
            .execute(&mut *ex)
            .await?;
    }
    Ok(())
}
