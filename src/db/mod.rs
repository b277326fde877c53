//! Persistence: the Postgres pool, migrations, row types and one repository module per table.
//! Every API write is one transaction; constraint violations become domain errors here.

pub mod clusters;
pub mod day2;
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

/// Applies pending migrations.
pub async fn migrate(pool: &PgPool) -> DbResult<()> {
    MIGRATOR.run(pool).await?;
    Ok(())
}
