//! Day-2 state of clusters (migration 4): the application credential's owner, id, expiry and
//! health as the periodic check found it, and the CA rotation's phase and rollout marker.
//! Never secrets: credential secrets and CA keys live only on the management cluster.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor, PgPool};
use uuid::Uuid;

use super::DbResult;

/// A cluster's credential as Postgres knows it.
#[derive(Debug, Clone, FromRow, PartialEq)]
pub struct CredentialRow {
    pub uuid: Uuid,
    pub project_id: String,
    pub user_id: String,
    pub status: String,
    pub stack_id: Option<String>,
    pub app_cred_id: Option<String>,
    pub app_cred_expires_at: Option<DateTime<Utc>>,
    pub credential_problem: Option<String>,
}

const CREDENTIAL_COLUMNS: &str = "uuid, project_id, user_id, status, stack_id, app_cred_id,
    app_cred_expires_at, credential_problem";

pub async fn credential<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
) -> DbResult<Option<CredentialRow>> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {CREDENTIAL_COLUMNS} FROM cluster WHERE uuid = $1"
    )))
    .bind(uuid)
    .fetch_optional(ex)
    .await?)
}

/// Clusters whose credential is due for the periodic check (never checked, or last checked
/// `interval_secs` ago), oldest check first; clusters being deleted are left alone.
pub async fn due_checks(
    pool: &PgPool,
    interval_secs: u64,
    limit: i64,
) -> DbResult<Vec<CredentialRow>> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {CREDENTIAL_COLUMNS} FROM cluster
          WHERE app_cred_id IS NOT NULL AND status <> 'DELETE_IN_PROGRESS'
            AND (credential_checked_at IS NULL
                 OR credential_checked_at <= now() - make_interval(secs => $1))
          ORDER BY credential_checked_at NULLS FIRST, id
          LIMIT $2"
    )))
    .bind(interval_secs as f64)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Records the outcome of a check: `problem` = why the credential does not work (None: it does).
pub async fn set_problem<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    problem: Option<&str>,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE cluster SET credential_problem = $2, credential_checked_at = now() WHERE uuid = $1",
    )
    .bind(uuid)
    .bind(problem)
    .execute(ex)
    .await?;
    Ok(())
}

/// A rotation committed: the cluster now belongs to `user_id` and uses credential `id`.
pub async fn set_credential<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    user_id: &str,
    id: &str,
    expires_at: Option<DateTime<Utc>>,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE cluster SET user_id = $2, app_cred_id = $3, app_cred_expires_at = $4,
                credential_problem = NULL, credential_checked_at = now(), updated_at = now()
          WHERE uuid = $1",
    )
    .bind(uuid)
    .bind(user_id)
    .bind(id)
    .bind(expires_at)
    .execute(ex)
    .await?;
    Ok(())
}

/// Records when the cluster's credential expires (None: never).
pub async fn set_expiry<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    expires_at: Option<DateTime<Utc>>,
) -> DbResult<()> {
    sqlx::query("UPDATE cluster SET app_cred_expires_at = $2 WHERE uuid = $1")
        .bind(uuid)
        .bind(expires_at)
        .execute(ex)
        .await?;
    Ok(())
}

/// Clusters whose credential expires less than `before_secs` from now, soonest first.
pub async fn expiring(pool: &PgPool, before_secs: u64, limit: i64) -> DbResult<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "SELECT uuid FROM cluster
          WHERE app_cred_id IS NOT NULL AND status <> 'DELETE_IN_PROGRESS'
            AND app_cred_expires_at IS NOT NULL
            AND app_cred_expires_at <= now() + make_interval(secs => $1)
          ORDER BY app_cred_expires_at LIMIT $2",
    )
    .bind(before_secs as f64)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// The CA rotation of a cluster: its phase (1..=3, None when none is under way) and the rollout
/// marker last rendered.
pub async fn ca_rotation<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
) -> DbResult<(Option<i16>, Option<DateTime<Utc>>)> {
    let row: Option<(Option<i16>, Option<DateTime<Utc>>)> =
        sqlx::query_as("SELECT ca_rotation_phase, ca_rollout_after FROM cluster WHERE uuid = $1")
            .bind(uuid)
            .fetch_optional(ex)
            .await?;
    Ok(row.unwrap_or((None, None)))
}

pub async fn set_ca_rotation<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    phase: Option<i16>,
    rollout_after: Option<DateTime<Utc>>,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE cluster SET ca_rotation_phase = $2,
                ca_rollout_after = COALESCE($3, ca_rollout_after) WHERE uuid = $1",
    )
    .bind(uuid)
    .bind(phase)
    .bind(rollout_after)
    .execute(ex)
    .await?;
    Ok(())
}
