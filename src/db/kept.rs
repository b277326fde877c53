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
//! connection is busy, or one cannot be made, a read takes one from the pool as before, so no
//! read waits for the set and none holds one while waiting for another. The kept connections
//! are not the pool's: the worker, the followers and the writes keep all of
//! `[database] max_connections`, and closing the pool never waits for them.
//!
//! `&KeptPool` is a [`sqlx::Executor`] like `&PgPool`: a statement given to it runs on a kept
//! connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{
    Connection, Describe, Either, Execute, Executor, PgConnection, PgPool, Postgres, SqlStr,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a connection (pooled or kept) may sit idle before it is checked when taken again.
pub(crate) const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

/// How long one connection is kept before it is closed and another made (the pool's default
/// `max_lifetime`).
const KEEP_FOR: Duration = Duration::from_secs(30 * 60);

/// Connections kept beside the pool for one-statement reads (module docs).
#[derive(Clone)]
pub struct KeptPool {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where a read goes when the set is busy, and whose options make the kept connections.
    pool: PgPool,
    options: PgConnectOptions,
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
        let made = tokio::time::timeout(
            self.pool.options().get_acquire_timeout(),
            PgConnection::connect_with(&self.options),
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
                options: (*pool.connect_options()).clone(),
                pool,
                permits: Arc::new(Semaphore::new(size)),
                idle: Mutex::default(),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// A connection for one read: a kept one when the set has one free (or room to make one),
    /// else one of the pool's.
    pub async fn acquire(&self) -> sqlx::Result<KeptConnection> {
        let inner = &self.inner;
        if let Ok(permit) = inner.permits.clone().try_acquire_owned()
            && !inner.closed.load(Ordering::Acquire)
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

    /// Runs `statement` on a connection for one read, handed back once it ran to its end.
    async fn once<T>(
        &self,
        statement: impl AsyncFnOnce(&mut PgConnection) -> sqlx::Result<T>,
    ) -> sqlx::Result<T> {
        let mut conn = self.acquire().await?;
        let out = statement(&mut conn).await?;
        conn.done();
        Ok(out)
    }

    /// Closes the set for good: its idle connections now, each one in use when its read is
    /// done; later reads use the pool.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let idle = std::mem::take(&mut *self.inner.idle());
        drop(idle);
    }
}

impl KeptConnection {
    /// The read ran to its end: a kept connection goes back to the set, ready for the next one
    /// (closed instead once kept for [`KEEP_FOR`]); a pool's goes back to the pool.
    pub fn done(self) {
        let Taken::Kept {
            conn, made, inner, ..
        } = self.conn
        else {
            return;
        };
        if inner.closed.load(Ordering::Acquire) || made.elapsed() >= KEEP_FOR {
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
            let mut conn = kept.acquire().await?;
            {
                let mut rows = (&mut *conn).fetch_many(query);
                while let Some(row) = rows.try_next().await? {
                    yield row;
                }
            }
            conn.done();
        })
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Postgres>,
    {
        let kept = self.clone();
        Box::pin(async move {
            kept.once(async move |c| c.fetch_optional(query).await)
                .await
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'k: 'e,
    {
        let kept = self.clone();
        Box::pin(async move {
            kept.once(async move |c| c.prepare_with(sql, parameters).await)
                .await
        })
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'k: 'e,
    {
        let kept = self.clone();
        Box::pin(async move { kept.once(async move |c| c.describe(sql).await).await })
    }
}
