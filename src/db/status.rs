//! The one writer of `cluster.status` / `status_reason`: every path that changes a cluster's
//! status (a request starting an operation, a driver finishing or reporting progress, the worker
//! giving an operation up, the leader-locked watcher concluding from the management cluster)
//! states what happened as a [`Transition`], and [`write`] decides under the cluster's row lock
//! whether and what to write. Two replicas therefore never race two statuses onto a cluster:
//! each decision is taken on the row as it is, while no other writer can change it.

use sqlx::PgConnection;
use uuid::Uuid;

use super::DbResult;
use crate::domain::status::Status;

/// What happened to a cluster, as its writer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition<'a> {
    /// A request recorded an operation: the cluster is `status` (an `*_IN_PROGRESS`) from now.
    Begin(Status),
    /// Operation `op` completed: the cluster is `status`, unless another of its operations is
    /// still open (then it stays in progress for that one).
    Completed { op: i64, status: Status },
    /// An operation failed or was refused: `status` (`*_FAILED`) with `reason`, also on the
    /// operation's nodegroup when it has one.
    Failed {
        status: Status,
        reason: &'a str,
        nodegroup: Option<Uuid>,
    },
    /// The running operation's progress: a new `reason`, only while the cluster is still
    /// `status` (a stale report never overwrites what came after it).
    Progress { status: Status, reason: &'a str },
    /// The conclusion drawn from the management cluster by the status writer.
    Observed {
        status: Status,
        reason: Option<&'a str>,
    },
}

/// Applies `t` to `cluster` inside the caller's transaction (`conn`), taking the cluster's row
/// lock first ([`super::clusters::lock`], the first lock of the crate's lock order). Returns the status written, or `None` when the transition did not apply (the
/// cluster is gone, another operation is open, or the status moved on).
pub async fn write(
    conn: &mut PgConnection,
    cluster: Uuid,
    t: Transition<'_>,
) -> DbResult<Option<Status>> {
    let Some(row) = super::clusters::lock(&mut *conn, cluster).await? else {
        return Ok(None);
    };
    let status_now = row.status;
    let other_open = match t {
        Transition::Completed { op, .. } => {
            let (open,): (bool,) = sqlx::query_as(
                "SELECT EXISTS (SELECT 1 FROM operation WHERE cluster_uuid = $1 AND id <> $2
                                  AND state IN ('pending', 'running'))",
            )
            .bind(cluster)
            .bind(op)
            .fetch_one(&mut *conn)
            .await?;
            open
        }
        _ => false,
    };
    let (status, reason) = match t {
        Transition::Begin(s) => (s, None),
        Transition::Completed { status, .. } if !other_open => (status, None),
        Transition::Completed { .. } => return Ok(None),
        Transition::Failed {
            status,
            reason,
            nodegroup,
        } => {
            if let Some(ng) = nodegroup {
                sqlx::query(
                    "UPDATE nodegroup SET status = $2, status_reason = $3, updated_at = now()
                      WHERE uuid = $1",
                )
                .bind(ng)
                .bind(status.as_str())
                .bind(reason)
                .execute(&mut *conn)
                .await?;
            }
            (status, Some(reason))
        }
        Transition::Progress { status, reason } if status_now == status.as_str() => {
            (status, Some(reason))
        }
        Transition::Progress { .. } => return Ok(None),
        Transition::Observed { status, reason } => (status, reason),
    };
    // An upgrade in flight (`upgrade_from`) ends with the status: a failed one leaves the cluster
    // on the template it left (while that still exists), a stable cluster is on the one it
    // moved to (a failed upgrade that converged later, or its retry, completed it).
    sqlx::query(
        "UPDATE cluster SET status = $2, status_reason = $3, updated_at = now(),
                cluster_template_id = CASE
                    WHEN upgrade_from IS NULL THEN cluster_template_id
                    WHEN $4 THEN (upgrade_from->>'to')::uuid
                    WHEN $2 = 'UPDATE_FAILED' AND EXISTS (
                         SELECT 1 FROM cluster_template t
                          WHERE t.uuid = (upgrade_from->>'template')::uuid)
                      THEN (upgrade_from->>'template')::uuid
                    ELSE cluster_template_id END,
                upgrade_from = CASE WHEN $4 THEN NULL ELSE upgrade_from END
          WHERE uuid = $1",
    )
    .bind(cluster)
    .bind(status.as_str())
    .bind(reason)
    .bind(status.is_stable_complete())
    .execute(&mut *conn)
    .await?;
    Ok(Some(status))
}

/// [`write`] in a transaction of its own.
pub async fn write_now(
    pool: &sqlx::PgPool,
    cluster: Uuid,
    t: Transition<'_>,
) -> DbResult<Option<Status>> {
    let mut tx = pool.begin().await?;
    let written = write(&mut tx, cluster, t).await?;
    tx.commit().await?;
    Ok(written)
}
