//! The durable operation queue: enqueue inside the API's transaction, claim with
//! `FOR UPDATE SKIP LOCKED` under a lease, complete, retry with backoff, or give up.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::types::Json;
use sqlx::{FromRow, PgExecutor, PgPool, Postgres};
use uuid::Uuid;

use super::DbResult;
use crate::domain::operation::{OperationKind, UnknownKind};

#[derive(Debug, Clone, FromRow, PartialEq)]
pub struct OperationRow {
    pub id: i64,
    pub cluster_uuid: Uuid,
    pub nodegroup_uuid: Option<Uuid>,
    pub kind: String,
    pub payload: Json<serde_json::Value>,
    pub state: String,
    pub attempts: i32,
    pub not_before: DateTime<Utc>,
    pub locked_by: Option<String>,
    pub locked_until: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub request_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Where a long operation is, as its backend recorded it ([`park`]); `None` before its
    /// first step.
    pub step: Option<Json<serde_json::Value>>,
}

impl OperationRow {
    /// The operation's kind; an error for a kind this version does not know.
    pub fn op_kind(&self) -> Result<OperationKind, UnknownKind> {
        self.kind.parse()
    }

    /// The step its backend recorded, or `Null` before the first.
    pub fn step(&self) -> &serde_json::Value {
        self.step
            .as_ref()
            .map_or(&serde_json::Value::Null, |s| &s.0)
    }
}

/// The payload key of a caller's token sealed for the worker (`crate::seal`); removed from the
/// payload when the operation ends, whatever the outcome.
pub const SEALED_TOKEN: &str = "sealed_token";

/// A new operation to record.
#[derive(Debug, Clone)]
pub struct NewOperation<'a> {
    pub cluster_uuid: Uuid,
    pub nodegroup_uuid: Option<Uuid>,
    pub kind: OperationKind,
    pub payload: serde_json::Value,
    pub request_id: Option<&'a str>,
}

/// The channel every replica's worker listens on; a recorded operation notifies it (delivered
/// when the recording transaction commits).
pub const CHANNEL: &str = "magnum_capi_operations";

/// Records an operation and notifies the workers; call it inside the transaction that makes the
/// state change.
pub async fn enqueue<'e>(ex: impl PgExecutor<'e>, op: &NewOperation<'_>) -> DbResult<i64> {
    let q = sqlx::query_as::<_, (i64, Option<String>)>(
        "WITH recorded AS (
           INSERT INTO operation (cluster_uuid, nodegroup_uuid, kind, payload, request_id)
           VALUES ($1, $2, $3, $4, $5) RETURNING id)
         SELECT id, pg_notify('magnum_capi_operations', id::text)::text FROM recorded",
    );
    let (id, _) = bind_columns(q, op).fetch_one(ex).await?;
    Ok(id)
}

/// Binds the five columns an insert of `op` writes, in [`enqueue`]'s order.
fn bind_columns<'q, O>(
    q: QueryAs<'q, Postgres, O, PgArguments>,
    op: &'q NewOperation<'_>,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    q.bind(op.cluster_uuid)
        .bind(op.nodegroup_uuid)
        .bind(op.kind.as_str())
        .bind(Json(&op.payload))
        .bind(op.request_id)
}

/// Records an operation that failed before it could be queued (e.g. Keystone refused the
/// credential a rotation needed): kept for the audit trail, never run.
pub async fn record_failed<'e>(
    ex: impl PgExecutor<'e>,
    op: &NewOperation<'_>,
    error: &str,
) -> DbResult<i64> {
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO operation (cluster_uuid, nodegroup_uuid, kind, payload, request_id, state,
                                last_error, finished_at)
         VALUES ($1, $2, $3, $4, $5, 'failed', $6, now()) RETURNING id",
    )
    .bind(op.cluster_uuid)
    .bind(op.nodegroup_uuid)
    .bind(op.kind.as_str())
    .bind(Json(&op.payload))
    .bind(op.request_id)
    .bind(error)
    .fetch_one(ex)
    .await?;
    Ok(id)
}

/// Whether an operation of `kind` is pending or running for the cluster.
pub async fn has_open(pool: &PgPool, cluster: Uuid, kind: OperationKind) -> DbResult<bool> {
    let (open,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM operation WHERE cluster_uuid = $1 AND kind = $2
                          AND state IN ('pending', 'running'))",
    )
    .bind(cluster)
    .bind(kind.as_str())
    .fetch_one(pool)
    .await?;
    Ok(open)
}

/// Claims the oldest runnable operation: pending and due, or running with an expired lease
/// (its replica died). Operations of one cluster run in order, one at a time.
pub async fn claim(pool: &PgPool, worker: &str, lease_secs: i64) -> DbResult<Option<OperationRow>> {
    Ok(sqlx::query_as::<_, OperationRow>(
        "UPDATE operation SET state = 'running', attempts = attempts + 1, locked_by = $1,
                locked_until = now() + make_interval(secs => $2), updated_at = now()
          WHERE id = (
            SELECT o.id FROM operation o
             WHERE ((o.state = 'pending' AND o.not_before <= now())
                 OR (o.state = 'running' AND o.locked_until < now()))
               AND NOT EXISTS (SELECT 1 FROM operation p
                                WHERE p.cluster_uuid = o.cluster_uuid AND p.id < o.id
                                  AND p.state IN ('pending', 'running'))
             ORDER BY o.id
             LIMIT 1
             FOR UPDATE SKIP LOCKED)
         RETURNING *",
    )
    .bind(worker)
    .bind(lease_secs as f64)
    .fetch_optional(pool)
    .await?)
}

/// Marks a claimed operation done (only if this worker still holds it).
pub async fn finish<'e>(ex: impl PgExecutor<'e>, id: i64, worker: &str) -> DbResult<bool> {
    let r = sqlx::query(
        "UPDATE operation SET state = 'done', locked_by = NULL, locked_until = NULL,
                payload = payload - 'sealed_token', finished_at = now(), updated_at = now()
          WHERE id = $1 AND state = 'running' AND locked_by = $2",
    )
    .bind(id)
    .bind(worker)
    .execute(ex)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Puts a failed attempt back in the queue, due after `delay_ms` (only by the lease holder).
pub async fn retry_later(
    pool: &PgPool,
    id: i64,
    worker: &str,
    error: &str,
    delay_ms: i64,
) -> DbResult<bool> {
    requeue(pool, id, worker, error, delay_ms, true).await
}

/// Puts an attempt that could not start (its management cluster unreachable) back in the
/// queue, due after `delay_ms`, the attempt not counted (only by the lease holder).
pub async fn defer(
    pool: &PgPool,
    id: i64,
    worker: &str,
    reason: &str,
    delay_ms: i64,
) -> DbResult<bool> {
    requeue(pool, id, worker, reason, delay_ms, false).await
}

async fn requeue(
    pool: &PgPool,
    id: i64,
    worker: &str,
    error: &str,
    delay_ms: i64,
    counted: bool,
) -> DbResult<bool> {
    let r = sqlx::query(
        "UPDATE operation SET state = 'pending', locked_by = NULL, locked_until = NULL,
                attempts = CASE WHEN $5 THEN attempts ELSE GREATEST(attempts - 1, 0) END,
                last_error = $3, not_before = now() + make_interval(secs => $4), updated_at = now()
          WHERE id = $1 AND locked_by = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(worker)
    .bind(error)
    .bind(delay_ms as f64 / 1000.0)
    .bind(counted)
    .execute(pool)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Parks a running operation whose backend is waiting for the world (a management cluster
/// deleting machines, a rollout): pending again, due after `delay_ms` (or sooner through
/// [`wake`]), the step not counted as an attempt, `step` recorded for the next run. Only by the
/// lease holder, inside the caller's transaction (with the step's progress on the cluster).
pub async fn park<'e>(
    ex: impl PgExecutor<'e>,
    id: i64,
    worker: &str,
    delay_ms: i64,
    step: Option<&serde_json::Value>,
) -> DbResult<bool> {
    let r = sqlx::query(
        "UPDATE operation SET state = 'pending', locked_by = NULL, locked_until = NULL,
                attempts = GREATEST(attempts - 1, 0), step = COALESCE($4, step),
                not_before = now() + make_interval(secs => $3), updated_at = now()
          WHERE id = $1 AND locked_by = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(worker)
    .bind(delay_ms as f64 / 1000.0)
    .bind(step.map(Json))
    .execute(ex)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Makes a parked operation due now and tells the workers (its cluster changed on the
/// management cluster); true when it was still parked.
pub async fn wake(pool: &PgPool, id: i64) -> DbResult<bool> {
    let woken: Option<(i64,)> = sqlx::query_as(
        "WITH woken AS (
           UPDATE operation SET not_before = now()
            WHERE id = $1 AND state = 'pending' AND not_before > now() RETURNING id)
         SELECT id FROM woken, pg_notify('magnum_capi_operations', $1::text) AS n",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    Ok(woken.is_some())
}

/// Gives an operation up for good (only if `worker` still holds it); true when it did.
pub async fn fail<'e>(
    ex: impl PgExecutor<'e>,
    id: i64,
    worker: &str,
    error: &str,
) -> DbResult<bool> {
    let r = sqlx::query(
        "UPDATE operation SET state = 'failed', locked_by = NULL, locked_until = NULL,
                payload = payload - 'sealed_token', last_error = $3, finished_at = now(),
                updated_at = now()
          WHERE id = $1 AND state = 'running' AND locked_by = $2",
    )
    .bind(id)
    .bind(worker)
    .bind(error)
    .execute(ex)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Extends the lease of an operation this worker is running; false when the lease was lost
/// (it expired and another replica took the operation over).
pub async fn renew(pool: &PgPool, id: i64, worker: &str, lease_secs: i64) -> DbResult<bool> {
    let r = sqlx::query(
        "UPDATE operation SET locked_until = now() + make_interval(secs => $3)
          WHERE id = $1 AND locked_by = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(worker)
    .bind(lease_secs as f64)
    .execute(pool)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Hands an interrupted operation back to the queue at once (graceful shutdown): pending, due
/// now, the interrupted attempt not counted, and the other replicas told.
pub async fn release(pool: &PgPool, id: i64, worker: &str) -> DbResult<bool> {
    let released: Option<(i64,)> = sqlx::query_as(
        "WITH released AS (
           UPDATE operation SET state = 'pending', locked_by = NULL, locked_until = NULL,
                  attempts = GREATEST(attempts - 1, 0), not_before = now(), updated_at = now()
            WHERE id = $1 AND locked_by = $2 AND state = 'running' RETURNING id)
         SELECT id FROM released, pg_notify('magnum_capi_operations', $1::text) AS n",
    )
    .bind(id)
    .bind(worker)
    .fetch_optional(pool)
    .await?;
    Ok(released.is_some())
}

/// When the queue next has something to do without being told: the earliest retry coming due
/// or lease running out (a crashed replica's operation). `None`: nothing is waiting.
pub async fn next_due(pool: &PgPool) -> DbResult<Option<DateTime<Utc>>> {
    Ok(sqlx::query_scalar(
        "SELECT LEAST(min(not_before) FILTER (WHERE state = 'pending'),
                      min(locked_until) FILTER (WHERE state = 'running'))
           FROM operation WHERE state IN ('pending', 'running')",
    )
    .fetch_one(pool)
    .await?)
}

/// Every operation recorded for a cluster, oldest first.
pub async fn of_cluster(pool: &PgPool, cluster: Uuid) -> DbResult<Vec<OperationRow>> {
    Ok(sqlx::query_as::<_, OperationRow>(
        "SELECT * FROM operation WHERE cluster_uuid = $1 ORDER BY id",
    )
    .bind(cluster)
    .fetch_all(pool)
    .await?)
}
