//! `magnum_service` rows: replica registration and heartbeats behind `GET /v1/mservices`.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};

use super::DbResult;

#[derive(Debug, Clone, FromRow, PartialEq)]
pub struct ServiceRow {
    pub id: i64,
    pub host: String,
    pub binary: String,
    pub disabled: bool,
    pub disabled_reason: Option<String>,
    pub last_seen_up: Option<DateTime<Utc>>,
    pub forced_down: bool,
    pub report_count: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// Registers (or re-registers) a replica and counts one report.
pub async fn heartbeat(pool: &PgPool, host: &str, binary: &str) -> DbResult<ServiceRow> {
    Ok(sqlx::query_as::<_, ServiceRow>(
        "INSERT INTO magnum_service (host, \"binary\", last_seen_up, report_count)
         VALUES ($1, $2, now(), 1)
         ON CONFLICT (host, \"binary\") DO UPDATE
            SET last_seen_up = now(), report_count = magnum_service.report_count + 1,
                updated_at = now()
         RETURNING *",
    )
    .bind(host)
    .bind(binary)
    .fetch_one(pool)
    .await?)
}

pub async fn list(pool: &PgPool) -> DbResult<Vec<ServiceRow>> {
    Ok(
        sqlx::query_as::<_, ServiceRow>("SELECT * FROM magnum_service ORDER BY id")
            .fetch_all(pool)
            .await?,
    )
}
