//! Persistence: the Postgres pool, migrations, row types and one repository module per table.
//! Every API write is one transaction; constraint violations become [`Violation`]s here, named
//! by their constraint, for the service layer to give them a meaning.
//!
//! # Lock order
//!
//! Every transaction that writes a cluster, its nodegroups or its operations — request
//! handlers, the worker (progress, completion, give-up), the drivers and the status writer —
//! takes the **cluster's row lock first**, with [`clusters::lock`] (`SELECT … FOR UPDATE`),
//! and only then writes nodegroup rows and operation rows (in that order). [`status::write`]
//! takes the same lock, so a transaction that only moves the status follows the order by
//! itself; one that writes a nodegroup or an operation row before its status calls
//! [`clusters::lock`] before that first write. Inserting a nodegroup or an operation takes
//! a `FOR KEY SHARE` lock on the cluster (the foreign key): taken after the cluster's own lock,
//! it cannot be upgraded into a deadlock between two such inserts.
//!
//! Rows of different clusters are never locked in one transaction. Whatever still fails on
//! contention (a deadlock or a serialization failure, SQLSTATE 40P01/40001) is
//! [`DbError::Contention`], and [`retry`] re-runs a whole transaction that may be re-run.

pub mod cluster_views;
pub mod clusters;
pub mod creates;
pub mod day2;
pub mod events;
pub mod imports;
pub mod janitor;
pub mod kept;
pub mod nodegroups;
pub mod operations;
pub mod page;
pub mod quotas;
pub mod services;
pub mod spec;
pub mod status;
pub mod template_views;
pub mod templates;

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::config::DatabaseConfig;

/// Errors of the persistence layer; each keeps the `sqlx` error it came from as its source.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// A unique, foreign-key or check constraint was violated: which one, by its name.
    #[error("constraint {violation} violated")]
    Constraint {
        violation: Violation,
        #[source]
        source: sqlx::Error,
    },
    /// A deadlock or serialization failure (SQLSTATE 40P01 / 40001): the transaction was
    /// rolled back and may be re-run ([`retry`]).
    #[error("database contention: {0}")]
    Contention(#[source] sqlx::Error),
    /// The pool had no free connection in time, or the server is unreachable.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    #[error("database error: {0}")]
    Other(#[source] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// The constraints of the schema (migrations) whose violation means something to a caller,
/// by their names; any other is [`Violation::Other`] with its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// `cluster_template.uuid` is taken.
    TemplateUuid,
    /// `cluster.uuid` is taken (a create recorded twice: `creates::Recorder`).
    ClusterUuid,
    /// A cluster refers to a template that is gone (insert), or a template still used by a
    /// cluster was deleted.
    ClusterTemplate,
    /// A nodegroup of that name exists in the cluster.
    NodegroupName,
    /// A nodegroup refers to a cluster that is gone.
    NodegroupCluster,
    /// A quota for that project and resource exists.
    QuotaProjectResource,
    Other(String),
}

impl Violation {
    /// Every named constraint and its name in the schema.
    pub const NAMED: [(Violation, &'static str); 6] = [
        (Violation::TemplateUuid, "cluster_template_uuid_key"),
        (Violation::ClusterUuid, "cluster_uuid_key"),
        (
            Violation::ClusterTemplate,
            "cluster_cluster_template_id_fkey",
        ),
        (Violation::NodegroupName, "uniq_nodegroup0cluster_id0name"),
        (Violation::NodegroupCluster, "nodegroup_cluster_id_fkey"),
        (
            Violation::QuotaProjectResource,
            "uniq_quotas0project_id0resource",
        ),
    ];

    /// The violation of the constraint called `name`.
    pub fn of(name: &str) -> Self {
        Self::NAMED
            .iter()
            .find(|(_, n)| *n == name)
            .map_or_else(|| Violation::Other(name.to_string()), |(v, _)| v.clone())
    }

    /// The constraint's name in the schema.
    pub fn name(&self) -> &str {
        match self {
            Violation::Other(n) => n,
            known => Self::NAMED
                .iter()
                .find(|(v, _)| v == known)
                .map_or("", |(_, n)| n),
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// SQLSTATEs of a transaction rolled back on contention: deadlock, serialization failure.
const CONTENTION: [&str; 2] = ["40P01", "40001"];

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) => {
                if let Some(c) = db.constraint() {
                    let violation = Violation::of(c);
                    return DbError::Constraint {
                        violation,
                        source: e,
                    };
                }
                if db.code().is_some_and(|c| CONTENTION.contains(&c.as_ref())) {
                    return DbError::Contention(e);
                }
                DbError::Other(e)
            }
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                DbError::Unavailable(e)
            }
            _ => DbError::Other(e),
        }
    }
}

impl DbError {
    /// The violated constraint, if this is a violation.
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            DbError::Constraint { violation, .. } => Some(violation),
            _ => None,
        }
    }
}

/// Errors that may say "rolled back on contention, run the transaction again".
pub trait Contended {
    fn is_contention(&self) -> bool;
}

impl Contended for DbError {
    fn is_contention(&self) -> bool {
        matches!(self, DbError::Contention(_))
    }
}

/// How often [`retry`] runs a transaction at most.
pub const RETRY_ATTEMPTS: u32 = 5;

/// Runs `transaction` (a whole transaction: begin, reads, writes, commit) again while it fails
/// on contention ([`Contended`]), at most [`RETRY_ATTEMPTS`] times, after a short jittered
/// backoff (a few ms, doubling). Only for transactions whose every effect is in PostgreSQL
/// (a failed attempt left nothing behind); the last contention error is returned as is.
pub async fn retry<T, E, F, Fut>(mut transaction: F) -> Result<T, E>
where
    E: Contended,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut attempt = 1;
    loop {
        match transaction().await {
            Err(e) if e.is_contention() && attempt < RETRY_ATTEMPTS => {
                let ceiling_ms = 5u64 << attempt;
                let wait = rand::random_range(1..=ceiling_ms);
                tracing::debug!(
                    attempt,
                    wait_ms = wait,
                    "transaction rolled back on contention, running it again"
                );
                tokio::time::sleep(Duration::from_millis(wait)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

pub type DbResult<T> = Result<T, DbError>;

/// The migrations embedded in the binary. A database may hold migrations this binary does not
/// know (a newer release migrated it): they are ignored, so the previous release keeps starting
/// and serving during a rolling upgrade and after a rollback. That is safe only because every
/// migration is *expand-only* — it adds tables, nullable or defaulted columns, indexes — and a
/// column or table is dropped (*contract*) only in a release after the one that stopped using
/// it (docs/operate.md "Upgrades and rollback").
pub static MIGRATOR: std::sync::LazyLock<sqlx::migrate::Migrator> =
    std::sync::LazyLock::new(|| {
        let mut m = sqlx::migrate!("./migrations");
        m.set_ignore_missing(true);
        m
    });

/// Rows read together by uuid: concurrent look-ups of single rows waiting for a statement are
/// read in the next one (`coalesce::Batch`; at most `in_flight` at once, 256 uuids each). `sql`
/// takes the uuids as `$1` (`uuid[]`); `uuid_of` names each row's. A failed statement answers
/// no one: each caller then reads its own row alone, for its own error.
pub(crate) fn batched_by_uuid<R>(
    reads: kept::KeptPool,
    in_flight: usize,
    sql: &'static str,
    uuid_of: fn(&R) -> uuid::Uuid,
) -> crate::coalesce::Batch<uuid::Uuid, R>
where
    R: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Clone + Send + Unpin + 'static,
{
    let read: crate::coalesce::BatchRead<uuid::Uuid, R> = std::sync::Arc::new(
        move |uuids: Vec<uuid::Uuid>| {
            let reads = reads.clone();
            Box::pin(async move {
                match sqlx::query_as::<_, R>(sql)
                    .bind(uuids)
                    .fetch_all(&reads)
                    .await
                {
                    Ok(rows) => Some(
                        rows.into_iter()
                            .map(|r| (uuid_of(&r), r))
                            .collect::<std::collections::HashMap<_, _>>(),
                    ),
                    Err(e) => {
                        tracing::debug!(error = %e, sql, "a batch of reads failed; each reads alone");
                        None
                    }
                }
            })
        },
    );
    crate::coalesce::Batch::new(in_flight, 256, read)
}

/// Opens the pool described by `cfg` against `url`.
pub async fn connect(url: &str, cfg: &DatabaseConfig) -> DbResult<PgPool> {
    let opts: PgConnectOptions = url.parse().map_err(DbError::Other)?;
    let pool = PgPoolOptions::new()
        .max_connections(cfg.max_connections)
        .min_connections(cfg.min_connections)
        .acquire_timeout(Duration::from_secs(cfg.acquire_timeout_secs))
        // sqlx's default pings every connection taken from the pool: a second round trip for
        // every one-statement read (a show, a page). Only a connection that sat idle for a
        // while is checked; one that broke under load fails its statement as it would have
        // failed the ping a moment later.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= kept::PING_IDLE_AFTER {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
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
