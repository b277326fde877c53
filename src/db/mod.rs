//! Persistence: the Postgres pool, migrations, row types and one repository module per table.
//! Every API write is one transaction; constraint violations become domain errors here.

pub mod clusters;
pub mod day2;
pub mod events;
pub mod janitor;
pub mod nodegroups;
pub mod operations;
pub mod page;
pub mod quotas;
pub mod services;
pub mod status;
pub mod templates;

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::config::DatabaseConfig;

/// Errors of the persistence layer.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// A unique or foreign-key constraint was violated; carries the constraint name.
    #[error("constraint {0} violated")]
    Constraint(String),
    /// The pool had no free connection in time, or the server is unreachable.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database error: {0}")]
    Other(sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) => match db.constraint() {
                Some(c) => DbError::Constraint(c.to_string()),
                None => DbError::Other(e),
            },
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                DbError::Unavailable(e.to_string())
            }
            _ => DbError::Other(e),
        }
    }
}

pub type DbResult<T> = Result<T, DbError>;

/// The migrations embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Opens the pool described by `cfg` against `url`.
pub async fn connect(url: &str, cfg: &DatabaseConfig) -> DbResult<PgPool> {
    let opts: PgConnectOptions = url.parse().map_err(DbError::Other)?;
    let pool = PgPoolOptions::new()
        .max_connections(cfg.max_connections)
        .min_connections(cfg.min_connections)
        .acquire_timeout(Duration::from_secs(cfg.acquire_timeout_secs))
        .connect_with(opts.application_name("magnum-capi"))
        .await?;
    Ok(pool)
}

/// A pool that connects on first use (`magnum-capi check` reports an unreachable database as a
/// failed check instead of failing to start).
pub fn connect_lazy(url: &str, cfg: &DatabaseConfig) -> DbResult<PgPool> {
    let opts: PgConnectOptions = url.parse().map_err(DbError::Other)?;
    Ok(PgPoolOptions::new()
        .max_connections(cfg.max_connections.min(2))
        .acquire_timeout(Duration::from_secs(cfg.acquire_timeout_secs.min(5)))
        .connect_lazy_with(opts.application_name("magnum-capi check")))
}

/// Applies pending migrations.
pub async fn migrate(pool: &PgPool) -> DbResult<()> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// Whether every migration this binary embeds is applied (and none failed): `Ok(latest)` or
/// `Err(what is missing)`.
pub async fn migrations_current(pool: &PgPool) -> DbResult<Result<i64, String>> {
    let applied: Vec<(i64, bool)> =
        match sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(pool)
            .await
        {
            Ok(rows) => rows,
            // A database never migrated has no bookkeeping table yet.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Vec::new(),
            Err(e) => return Err(e.into()),
        };
    let missing: Vec<String> = MIGRATOR
        .iter()
        .filter(|m| !applied.iter().any(|(v, ok)| *v == m.version && *ok))
        .map(|m| format!("{} {}", m.version, m.description))
        .collect();
    Ok(if missing.is_empty() {
        Ok(MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0))
    } else {
        Err(format!(
            "{} not applied: {} (run `magnum-capi migrate`)",
            if missing.len() == 1 {
                "migration"
            } else {
                "migrations"
            },
            missing.join(", ")
        ))
    })
}

/// The numbers `/metrics` reports from the database: operations pending or running, the age
/// of the oldest pending one, clusters by status and by health, leftover credentials.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub queue_depth: i64,
    pub oldest_pending_secs: f64,
    pub clusters_by_status: Vec<(String, i64)>,
    pub clusters_by_health: Vec<(String, i64)>,
    pub leftover_credentials: i64,
}

pub async fn gauges(pool: &PgPool) -> DbResult<Gauges> {
    let (queue_depth, oldest_pending_secs): (i64, f64) = sqlx::query_as(
        "SELECT count(*),
                COALESCE(EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE state = 'pending')), 0)::float8
           FROM operation WHERE state IN ('pending', 'running')",
    )
    .fetch_one(pool)
    .await?;
    let clusters_by_status = sqlx::query_as("SELECT status, count(*) FROM cluster GROUP BY status")
        .fetch_all(pool)
        .await?;
    let clusters_by_health = sqlx::query_as(
        "SELECT COALESCE(health_status, 'UNKNOWN'), count(*) FROM cluster GROUP BY 1",
    )
    .fetch_all(pool)
    .await?;
    let leftover_credentials = sqlx::query_scalar("SELECT count(*) FROM app_credential_leftover")
        .fetch_one(pool)
        .await?;
    Ok(Gauges {
        queue_depth,
        oldest_pending_secs,
        clusters_by_status,
        clusters_by_health,
        leftover_credentials,
    })
}
