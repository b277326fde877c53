//! Connections kept beside the pool for the API's reads, handed back without sqlx's release
//! round trip.
//!
//! sqlx's pool sends every connection handed back to it a `Sync` and waits for PostgreSQL's
//! answer before another task may take it (sqlx-core 0.9, `Floating::return_to_pool`: a
//! statement dropped half-way would otherwise leave its rows unread on the connection), and has
//! no setting to leave that out. For a show or a page, one statement, that is a second round
//! trip and a second wake-up of the backend for every statement (docs/benchmarks.md, "Stop 58").
//! [`KeptPool`] keeps up to `size` connections of its own, made with the pool's options: a
//! connection whose statement ran to its end goes back to the set at once
//! ([`KeptConnection::done`]); one dropped before that (the request was cancelled, the
//! statement failed) is closed, as nothing says what is left unread on it. When every kept
//! connection is busy for longer than [`WAIT_FOR_KEPT`] (2 ms), or one cannot be made, a read
//! takes one from the pool as before: no read waits long for the set, and none holds one while
//! waiting for another. The kept connections
//! are not the pool's: the worker, the followers and the writes keep all of
//! `[database] max_connections`, and closing the pool never waits for them.
//!
//! `&KeptPool` is a [`sqlx::Executor`] like `&PgPool`: a statement given to it runs on a kept
//! connection. It is for reads: a statement whose kept connection turns out lost (cut, or its
//! backend ended: a failover) before any of its rows came runs once more, on a new connection,
//! and the other idle ones, lost alike, are closed. So a cut costs no read an error once
//! PostgreSQL answers again, where a pooled connection used within a second of it failed its
//! statement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{
    Connection, Describe, Either, Execute, Executor, PgConnection, PgPool, Postgres, SqlStr,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a connection (pooled or kept) may sit idle before it is checked when taken again.
pub(crate) const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

/// How long making a kept connection may take before a read takes the pool's instead (a
/// connection is made in milliseconds; a server that does not answer should not add much to
/// the pool's own wait).
const MAKE_WITHIN: Duration = Duration::from_secs(1);

/// How long one connection is kept before it is closed and another made (the pool's default
/// `max_lifetime`).
const KEEP_FOR: Duration = Duration::from_secs(30 * 60);

/// How long a read waits for a kept connection when all are busy before it takes the pool's.
/// Under load one is usually handed back within it, and the pool's costs a round trip more
/// (docs/benchmarks.md, stop 59: 12–18% more reads built from PostgreSQL than taking the
/// pool's at once); a slow statement holding every kept connection costs a read 2 ms at most.
const WAIT_FOR_KEPT: Duration = Duration::from_millis(2);

/// Connections kept beside the pool for one-statement reads (module docs).
#[derive(Clone)]
pub struct KeptPool {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where a read goes when the set is busy, and whose options make the kept connections.
    pool: PgPool,
    /// One permit per connection the set may hold (idle or in use).
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Idle>>,
    closed: AtomicBool,
}

/// A kept connection between two reads.
struct Idle {
    conn: PgConnection,
    made: Instant,
    idle_since: Instant,
}

impl std::fmt::Debug for KeptPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptPool")
            .field("free", &self.inner.permits.available_permits())
            .field("idle", &self.inner.idle().len())
            .finish()
    }
}

impl Inner {
    /// Whether the set is in use: neither it nor the pool beside it was closed (a closed pool
    /// stops every read, kept or not).
    fn open(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && !self.pool.is_closed()
    }

    /// Closes the idle connections.
    fn forget_idle(&self) {
        let idle = std::mem::take(&mut *self.idle());
        drop(idle);
    }

    /// The idle connections (a panic while they were held left nothing half-done in them).
    fn idle(&self) -> MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle kept connection still answering (checked first when it sat idle for a while,
    /// as the pool checks its own), or a new one; `None` when none can be made in time.
    async fn kept(&self) -> Option<(PgConnection, Instant)> {
        let idle = self.idle().pop();
        if let Some(mut i) = idle
            && (i.idle_since.elapsed() < PING_IDLE_AFTER || i.conn.ping().await.is_ok())
        {
            return Some((i.conn, i.made));
        }
        // Bounded well below the pool's acquire timeout: a read that cannot have a kept
        // connection still has the pool's whole wait before its 503.
        let made = tokio::time::timeout(
            self.pool.options().get_acquire_timeout().min(MAKE_WITHIN),
            PgConnection::connect_with(&self.pool.connect_options()),
        )
        .await;
        match made {
            Ok(Ok(conn)) => Some((conn, Instant::now())),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "no kept connection for a read; it takes the pool's");
                None
            }
            Err(_) => None,
        }
    }
}

/// A connection taken for one read: a kept one (back to the set by [`Self::done`]) or, when the
/// set was busy, the pool's own.
pub struct KeptConnection {
    conn: Taken,
}

enum Taken {
    Kept {
        conn: PgConnection,
        made: Instant,
        inner: Arc<Inner>,
        _permit: OwnedSemaphorePermit,
    },
    Pooled(PoolConnection<Postgres>),
}

impl KeptPool {
    /// A set of at most `size` connections made with `pool`'s options, beside `pool` (0: every
    /// read uses the pool as is).
    pub fn new(pool: PgPool, size: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                pool,
                permits: Arc::new(Semaphore::new(size)),
                idle: Mutex::default(),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// A connection for one read: a kept one when the set has one free (or room to make one)
    /// now or within [`WAIT_FOR_KEPT`], else one of the pool's.
    pub async fn acquire(&self) -> sqlx::Result<KeptConnection> {
        let inner = &self.inner;
        // A free permit is taken at once: the timeout polls the acquire before its deadline.
        if let Ok(Ok(permit)) =
            tokio::time::timeout(WAIT_FOR_KEPT, inner.permits.clone().acquire_owned()).await
            && inner.open()
            && let Some((conn, made)) = inner.kept().await
        {
            return Ok(KeptConnection {
                conn: Taken::Kept {
                    conn,
                    made,
                    inner: inner.clone(),
                    _permit: permit,
                },
            });
        }
        Ok(KeptConnection {
            conn: Taken::Pooled(inner.pool.acquire().await?),
        })
    }

    /// A kept connection was lost: the idle ones, made alike, are closed too.
    fn lost_one(&self, e: &sqlx::Error) {
        tracing::debug!(error = %e, "a kept connection was lost; its read runs again");
        self.inner.forget_idle();
    }

    /// Closes the set for good: its idle connections now, each one in use when its read is
    /// done; later reads use the pool (as they do once the pool is closed).
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.forget_idle();
    }
}

impl KeptConnection {
    /// Whether it is one of the set's (not the pool's).
    fn is_kept(&self) -> bool {
        matches!(self.conn, Taken::Kept { .. })
    }

    /// The read ran to its end: a kept connection goes back to the set, ready for the next one
    /// (closed instead once kept for [`KEEP_FOR`]); a pool's goes back to the pool.
    pub fn done(self) {
        let Taken::Kept {
            conn, made, inner, ..
        } = self.conn
        else {
            return;
        };
        if !inner.open() || made.elapsed() >= KEEP_FOR {
            return;
        }
        inner.idle().push(Idle {
            conn,
            made,
            idle_since: Instant::now(),
        });
    }
}

impl std::ops::Deref for KeptConnection {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        match &self.conn {
            Taken::Kept { conn, .. } => conn,
            Taken::Pooled(conn) => conn,
        }
    }
}

impl std::ops::DerefMut for KeptConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match &mut self.conn {
            Taken::Kept { conn, .. } => conn,
            Taken::Pooled(conn) => conn,
        }
    }
}

/// A statement given to `&KeptPool` runs on a kept connection, which goes back to the set once
/// its rows are all read (as `&PgPool` runs it on a pooled one).
impl<'k> Executor<'k> for &'_ KeptPool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Postgres>,
    {
        let kept = self.clone();
        Box::pin(async_stream::try_stream! {
            let statement = Statement::of(query)?;
            let mut again = true;
            loop {
                let mut conn = kept.acquire().await?;
                let retry = again && conn.is_kept();
                let mut lost_it = None;
                {
                    let mut rows = (&mut *conn).fetch_many(statement.clone());
                    let mut yielded = false;
                    loop {
                        match rows.try_next().await {
                            Ok(Some(row)) => {
                                yielded = true;
                                yield row;
                            }
                            Ok(None) => break,
                            Err(e) if retry && !yielded && lost(&e) => {
                                lost_it = Some(e);
                                break;
                            }
                            Err(e) => Err(e)?,
                        }
                    }
                }
                let Some(e) = lost_it else {
                    conn.done();
                    break;
                };
                drop(conn);
                kept.lost_one(&e);
                again = false;
            }
        })
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Postgres>,
    {
        // Through `fetch_many`, its one way to run and run again: every row is read, so the
        // connection goes back to the set (the statements given here return one row).
        let mut rows = self.fetch_many(query);
        Box::pin(async move {
            let mut first = None;
            while let Some(item) = rows.try_next().await? {
                if let (None, Either::Right(row)) = (&first, item) {
                    first = Some(row);
                }
            }
            Ok(first)
        })
    }

    /// Prepared (and described) on the pool, as the pool's own `Executor` does: a statement
    /// prepared on one connection says nothing of the kept one a read then runs on.
    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'k: 'e,
    {
        let pool = self.inner.pool.clone();
        Box::pin(async move { pool.prepare_with(sql, parameters).await })
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'k: 'e,
    {
        let pool = self.inner.pool.clone();
        Box::pin(async move { pool.describe(sql).await })
    }
}

/// Whether `e` says the connection itself is gone (cut, or its backend ended by PostgreSQL:
/// SQLSTATE classes 08 and 57P), not that PostgreSQL refused the statement.
fn lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
        _ => false,
    }
}

/// A statement taken apart so it can run a second time (its arguments kept).
#[derive(Clone)]
struct Statement {
    sql: SqlStr,
    prepared: Option<PgStatement>,
    arguments: Option<PgArguments>,
    persistent: bool,
}

impl Statement {
    fn of<'q>(mut query: impl Execute<'q, Postgres>) -> sqlx::Result<Self> {
        let arguments = query.take_arguments().map_err(sqlx::Error::Encode)?;
        Ok(Self {
            prepared: query.statement().cloned(),
            persistent: query.persistent(),
            arguments,
            sql: query.sql(),
        })
    }
}

impl<'q> Execute<'q, Postgres> for Statement {
    fn sql(self) -> SqlStr {
        self.sql
    }

    fn statement(&self) -> Option<&PgStatement> {
        self.prepared.as_ref()
    }

    fn take_arguments(&mut self) -> Result<Option<PgArguments>, sqlx::error::BoxDynError> {
        Ok(self.arguments.take())
    }

    fn persistent(&self) -> bool {
        self.persistent
    }
}
