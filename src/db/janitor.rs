//! What the credentials janitor reads and writes: the intents recorded before a cluster's
//! application credential is created, and which clusters exist.

use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::DbResult;

/// Records that a credential of `cluster` is about to be created for `user_id`.
pub async fn record_intent<'e>(
    ex: impl PgExecutor<'e>,
    cluster: Uuid,
    user_id: &str,
) -> DbResult<()> {
    sqlx::query(
        "INSERT INTO app_credential_intent (cluster_uuid, user_id) VALUES ($1, $2)
         ON CONFLICT (cluster_uuid, user_id) DO UPDATE SET created_at = now()",
    )
    .bind(cluster)
    .bind(user_id)
    .execute(ex)
    .await?;
    Ok(())
}

/// Intents older than `grace_secs`, oldest first: `(cluster, user)`.
pub async fn due_intents(
    pool: &PgPool,
    grace_secs: u64,
    limit: i64,
) -> DbResult<Vec<(Uuid, String)>> {
    Ok(sqlx::query_as(
        "SELECT cluster_uuid, user_id FROM app_credential_intent
          WHERE created_at < now() - make_interval(secs => $1)
          ORDER BY created_at LIMIT $2",
    )
    .bind(grace_secs as f64)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

pub async fn drop_intent(pool: &PgPool, cluster: Uuid, user_id: &str) -> DbResult<()> {
    sqlx::query("DELETE FROM app_credential_intent WHERE cluster_uuid = $1 AND user_id = $2")
        .bind(cluster)
        .bind(user_id)
        .execute(pool)
        .await?;
    Ok(())
}

/// Whether the cluster has a row.
pub async fn cluster_exists(pool: &PgPool, cluster: Uuid) -> DbResult<bool> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM cluster WHERE uuid = $1)")
            .bind(cluster)
            .fetch_one(pool)
            .await?,
    )
}

/// Whether this transaction got the advisory lock `key` (no other replica holds it); it is
/// released when the transaction ends.
pub async fn try_lock(tx: &mut sqlx::PgConnection, key: i64) -> DbResult<bool> {
    Ok(sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(key)
        .fetch_one(tx)
        .await?)
}
