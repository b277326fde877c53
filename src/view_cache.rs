//! Serialised cluster and template views, reused until PostgreSQL reports a change under them.
//!
//! Every change to a cluster, nodegroup or template notifies `magnum_capi_views` when it commits
//! (any replica, any writer); a notification moves this process's generation and every view
//! stored under an older generation stops being served (the generation is part of the key; old
//! entries age out). A view is stored under the generation read *before* its rows, so a change
//! that lands while it is being built leaves it under a retired generation. Concurrent requests
//! for a view nobody has built yet wait for one build (no stampede after every change).
//!
//! Read-your-writes on every replica: each changing transaction also moves one change position
//! at its commit and announces it after its other notifications (`db::events::position`). A read
//! first reads the committed position — one statement shared by the concurrent reads that all
//! arrived before it was sent (`coalesce::Batch`, [`POSITION_READS`] at once), never one already
//! in flight — and reuses nothing
//! unless this replica's listener has received that position, so every change answered before
//! the read started (on any replica) has retired what it changed here. The listener is waited
//! for [`CATCH_UP`] at most; a read it is still behind for is built from PostgreSQL. Writes
//! through this replica's API also move the generation themselves before they answer (the front
//! middleware). While the listening connection is down, nothing is reused; one that died
//! without a word stops reuse at once (reads find it behind) and is replaced within three
//! `[database] listen_heartbeat_ms` (`db::events`). Only a successful write through the API
//! retires views (a refused one changed nothing). `[api] view_cache_mib = 0` turns reuse off
//! (and with it the position read).
//! Template rows, which every create reads, are reused under a second generation that only a
//! change of templates moves ([`ViewCache::template_generation`]), after the same position check.
//!
//! Without reuse (turned off, or not listening), concurrent identical requests for a page still
//! share a build, but only one that started after all of them arrived (`coalesce`): nothing is
//! served that was read before its request. A show is built by each request ([`Unreused::Own`]):
//! its one read already goes out together with every concurrent request's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::coalesce::{Batch, Coalesce};
use crate::db::events::{self, Event};
use crate::db::kept::KeptPool;

/// The cluster a stored view shows, so a reuse is authorised like the first read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub project_id: String,
    pub user_id: String,
}

/// One stored response body.
#[derive(Debug)]
pub struct View {
    pub body: Bytes,
    pub owner: Option<Owner>,
}

/// How a view is built for requests while views are not reused (turned off, or not listening).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreused {
    /// Concurrent identical requests share one build that started after all of them arrived
    /// (`coalesce`): a page, whose build is the cost.
    Shared,
    /// Each request builds its own: a show, whose one read already goes out in one statement
    /// with every concurrent request's (`coalesce::Batch`; identical keys read once), so a
    /// queue of builds for one key would only hold a popular cluster's shows back.
    Own,
}

/// How long a read waits for this replica's listener to receive the change position committed
/// when the read started, before it builds from PostgreSQL instead. A listener alive receives a
/// commit's announcement within a millisecond or so of it; a stalled one should not hold every
/// read for long until its heartbeat replaces it.
pub const CATCH_UP: Duration = Duration::from_millis(10);

/// How many reads of the committed change position may be in flight at once. A read waits for
/// a statement sent after it arrived; with one in flight at most, a read arriving during it
/// waits for it and then for its own (a round trip and a half on average), with two its own
/// statement usually goes out at once (one round trip), still shared by whoever arrives
/// while both are busy.
pub const POSITION_READS: usize = 2;

/// Reads the committed change position (`db::events::position` on the pool).
pub type ReadPosition = Box<dyn Fn() -> BoxFuture<'static, sqlx::Result<i64>> + Send + Sync>;

/// The process's store of serialised views (a `moka` cache bounded by bytes).
pub struct ViewCache {
    entries: Option<moka::future::Cache<String, Arc<View>>>,
    /// Builds shared by concurrent identical requests while views are not reused.
    shared: Coalesce<Arc<View>>,
    generation: AtomicU64,
    /// Moved only by changes that may touch a template ([`Self::template_generation`]).
    templates: AtomicU64,
    listening: AtomicBool,
    /// The newest change position the listener has received (or read when it began listening).
    seen: watch::Sender<i64>,
    /// Reads of the committed position, shared by the reads waiting for one.
    positions: Batch<(), i64>,
}

impl std::fmt::Debug for ViewCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewCache")
            .field("enabled", &self.entries.is_some())
            .field("generation", &self.generation.load(Ordering::Relaxed))
            .field("listening", &self.listening.load(Ordering::Relaxed))
            .field("seen", &*self.seen.borrow())
            .finish()
    }
}

impl ViewCache {
    /// A cache of at most `max_bytes` of keys and bodies (0: views are never reused), reading
    /// the committed change position on `reads`.
    pub fn new(max_bytes: u64, reads: KeptPool) -> Self {
        Self::with_positions(
            max_bytes,
            Box::new(move || {
                let reads = reads.clone();
                Box::pin(async move { events::position(&reads).await })
            }),
        )
    }

    /// [`Self::new`] with the committed position read by `committed`.
    pub fn with_positions(max_bytes: u64, committed: ReadPosition) -> Self {
        let entries = (max_bytes > 0).then(|| {
            moka::future::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|k: &String, v: &Arc<View>| {
                    u32::try_from(k.len() + v.body.len() + 128).unwrap_or(u32::MAX)
                })
                .build()
        });
        Self {
            entries,
            shared: Coalesce::default(),
            generation: AtomicU64::new(0),
            templates: AtomicU64::new(0),
            listening: AtomicBool::new(false),
            seen: watch::channel(0).0,
            positions: Self::position_reads(committed),
        }
    }

    /// The committed position read by `committed`, one statement for every waiting read (its
    /// failure is logged here: each waiting read then reuses nothing).
    fn position_reads(committed: ReadPosition) -> Batch<(), i64> {
        let committed = Arc::new(committed);
        Batch::new(
            POSITION_READS,
            usize::MAX,
            Arc::new(move |_: Vec<()>| {
                let read = committed();
                Box::pin(async move {
                    match read.await {
                        Ok(p) => Some(std::collections::HashMap::from([((), p)])),
                        Err(e) => {
                            tracing::debug!(error = %e, "change position unread; views are not reused");
                            None
                        }
                    }
                })
            }),
        )
    }

    /// The generation a view built from a read starting now belongs to; `None` when views are
    /// not reused now (turned off, or change notifications are not being received). Does not
    /// count as a use (observers: tests, diagnostics).
    pub fn peek(&self) -> Option<u64> {
        self.reusing()
            .then(|| self.generation.load(Ordering::Acquire))
    }

    /// Whether anything is reused now: turned on, and change notifications being received.
    fn reusing(&self) -> bool {
        self.entries.is_some() && self.listening.load(Ordering::Acquire)
    }

    /// The generation a template row read starting now belongs to (`db::templates::ByUuid`
    /// reuses rows within it); `None` when nothing is reused now, as [`Self::peek`]. Only a
    /// change of templates moves it: a template write through this replica's API
    /// ([`Self::templates_changed`]), a notification of any other table than `cluster` and
    /// `nodegroup`, a gap in listening. So the creates that read their template do not retire
    /// it, as they retire every view. Does not check the position (observers).
    pub fn template_generation(&self) -> Option<u64> {
        self.reusing()
            .then(|| self.templates.load(Ordering::Acquire))
    }

    /// [`Self::template_generation`] for a read starting now: `None` also while this replica's
    /// listener is behind the committed position ([`Self::caught_up`]).
    pub async fn template_generation_for_read(&self) -> Option<u64> {
        if !self.caught_up().await {
            return None;
        }
        self.template_generation()
    }

    /// Whether template rows read in generation `g` ([`Self::template_generation`], taken
    /// without checking the position) are as fresh as a read starting now: this replica's
    /// listener has caught up with the committed position and no template change moved the
    /// generation since. Lets a create check its template beside its look-ups instead of
    /// before them.
    pub async fn template_generation_held(&self, g: u64) -> bool {
        self.caught_up().await && self.template_generation() == Some(g)
    }

    /// A template was written through this replica: rows read before are not reused (called
    /// before the write is answered, so its client reads it at once).
    pub fn templates_changed(&self) {
        self.templates.fetch_add(1, Ordering::AcqRel);
    }

    /// [`Self::peek`] for a read starting now: `None` also while this replica's listener is
    /// behind the committed position ([`Self::caught_up`]); a read without reuse is counted.
    async fn generation(&self) -> Option<u64> {
        if !self.reusing() {
            crate::telemetry::view_cache("bypass");
            return None;
        }
        if !self.caught_up().await {
            crate::telemetry::view_cache("behind");
            return None;
        }
        let g = self.peek();
        if g.is_none() {
            crate::telemetry::view_cache("bypass");
        }
        g
    }

    /// Whether this replica's listener has received every change committed before this call:
    /// reads the committed position (one statement shared by the calls that all arrived before
    /// it was sent) and waits [`CATCH_UP`] at most for the listener to reach it. Its
    /// announcements come before the position's, so once it is received every change up to it
    /// has moved the generations. `false` when nothing is reused or the read failed.
    async fn caught_up(&self) -> bool {
        if !self.reusing() {
            return false;
        }
        let Ok(Some(committed)) = self.positions.get(()).await else {
            return false;
        };
        let mut seen = self.seen.subscribe();
        matches!(
            tokio::time::timeout(CATCH_UP, seen.wait_for(|s| *s >= committed)).await,
            Ok(Ok(_))
        )
    }

    /// The listener received (or read when it began listening) change position `p`.
    fn seen(&self, p: i64) {
        self.seen.send_if_modified(|s| {
            let newer = p > *s;
            if newer {
                *s = p;
            }
            newer
        });
    }

    /// The view for the key `key` makes: stored, or built by `build` and stored — once, while
    /// concurrent callers of the same key wait for it. Without reuse (off, not listening)
    /// built as `unreused` says, and nothing is stored. A failed build stores nothing and is
    /// the caller's error; whoever waited on it builds on its own.
    pub async fn get_or_build<E, F, Fut>(
        &self,
        key: impl FnOnce() -> String,
        unreused: Unreused,
        build: F,
    ) -> Result<Arc<View>, E>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(Bytes, Option<Owner>), E>>,
    {
        let view = |(body, owner)| Arc::new(View { body, owner });
        let generation = match &self.entries {
            Some(_) => self.generation().await,
            None => None,
        };
        let (Some(entries), Some(generation)) = (&self.entries, generation) else {
            return match unreused {
                Unreused::Shared => {
                    self.shared
                        .run(key(), || async { build().await.map(view) })
                        .await
                }
                Unreused::Own => build().await.map(view),
            };
        };
        let mut built = false;
        let mut failed = None;
        let found = entries
            .optionally_get_with(format!("{generation} {}", key()), async {
                built = true;
                match build().await {
                    Ok(v) => Some(view(v)),
                    Err(e) => {
                        failed = Some(e);
                        None
                    }
                }
            })
            .await;
        crate::telemetry::view_cache(if built { "miss" } else { "hit" });
        match (found, failed) {
            (Some(v), _) => Ok(v),
            (None, Some(e)) => Err(e),
            (None, None) => build().await.map(view),
        }
    }

    /// Something under the views changed: nothing stored so far is served again.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether change notifications are being received (views are reused only then).
    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    fn set_listening(&self, on: bool) {
        // Moved first: whatever was stored before a gap is not served after it.
        self.changed();
        self.templates_changed();
        self.listening.store(on, Ordering::Release);
    }

    /// Follows the change notifications until `shutdown` (one task per process).
    pub async fn follow_changes(
        &self,
        pool: &PgPool,
        heartbeat: std::time::Duration,
        shutdown: watch::Receiver<bool>,
    ) {
        if self.entries.is_none() {
            return;
        }
        events::follow(
            pool,
            &[events::VIEWS_CHANNEL],
            "view cache",
            heartbeat,
            shutdown,
            |e| match e {
                Event::Listening { position } => {
                    // After the generations moved: a read that finds the position received
                    // reads the moved generation.
                    self.set_listening(true);
                    self.seen(position);
                }
                Event::Notified(payload) => match events::announced_position(payload) {
                    // The transaction's other announcements came before and moved the
                    // generations.
                    Some(p) => self.seen(p),
                    None => {
                        self.changed();
                        // Cluster and nodegroup writes name their table; anything else (a
                        // template's, a truncation's) may have changed a template.
                        if !matches!(payload, "cluster" | "nodegroup") {
                            self.templates_changed();
                        }
                    }
                },
                Event::Lost => self.set_listening(false),
            },
        )
        .await;
        self.set_listening(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI64;

    /// A cache whose committed position is always 0 (what a listener starts with).
    fn cache(max_bytes: u64) -> ViewCache {
        at_position(max_bytes, Arc::new(AtomicI64::new(0)))
    }

    /// A cache whose committed position is what `committed` holds when read.
    fn at_position(max_bytes: u64, committed: Arc<AtomicI64>) -> ViewCache {
        ViewCache::with_positions(
            max_bytes,
            Box::new(move || {
                let p = committed.load(Ordering::SeqCst);
                Box::pin(async move { Ok(p) })
            }),
        )
    }

    #[tokio::test]
    async fn nothing_is_reused_until_the_listener_has_the_committed_position() {
        let committed = Arc::new(AtomicI64::new(0));
        let c = at_position(1 << 20, committed.clone());
        c.set_listening(true);
        assert_eq!(read(&c, "k", "one").await, "one");
        assert_eq!(read(&c, "k", "two").await, "one", "reused");
        // Another replica's write committed; its announcements have not arrived here yet.
        committed.store(1, Ordering::SeqCst);
        assert_eq!(read(&c, "k", "three").await, "three", "built: behind");
        assert_eq!(read(&c, "k", "four").await, "four", "still behind");
        // Its table's announcement, then its position.
        c.changed();
        c.seen(1);
        assert_eq!(read(&c, "k", "five").await, "five", "the change retired it");
        assert_eq!(read(&c, "k", "six").await, "five", "reused again");
        // A listener that catches up while the read waits.
        committed.store(2, Ordering::SeqCst);
        let c = Arc::new(c);
        let reader = {
            let c = c.clone();
            tokio::spawn(async move { c.caught_up().await })
        };
        tokio::time::sleep(CATCH_UP / 4).await;
        c.seen(2);
        assert!(reader.await.unwrap(), "waited for the listener");
    }

    async fn read(c: &ViewCache, key: &str, body: &'static str) -> Bytes {
        c.get_or_build(
            || key.to_owned(),
            Unreused::Shared,
            || async { Ok::<_, ()>((Bytes::from_static(body.as_bytes()), None)) },
        )
        .await
        .unwrap()
        .body
        .clone()
    }

    #[tokio::test]
    async fn a_view_is_served_only_in_its_generation_and_only_while_listening() {
        let c = cache(1 << 20);
        assert_eq!(c.generation().await, None, "not listening yet");
        assert_eq!(read(&c, "k", "one").await, "one");
        assert_eq!(read(&c, "k", "two").await, "two", "nothing reused yet");
        c.set_listening(true);
        assert_eq!(read(&c, "k", "three").await, "three");
        assert_eq!(read(&c, "k", "four").await, "three", "reused");
        c.changed();
        assert_eq!(
            read(&c, "k", "five").await,
            "five",
            "a change retires the view"
        );
        c.set_listening(false);
        assert_eq!(
            read(&c, "k", "six").await,
            "six",
            "notifications may be missed"
        );
        c.set_listening(true);
        assert_eq!(
            read(&c, "k", "seven").await,
            "seven",
            "nothing from before the gap"
        );
    }

    #[tokio::test]
    async fn concurrent_readers_of_a_missing_view_share_one_build_and_failures_are_not_kept() {
        let c = Arc::new(cache(1 << 20));
        c.set_listening(true);
        let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (c, builds) = (c.clone(), builds.clone());
            tasks.push(tokio::spawn(async move {
                c.get_or_build(
                    || "k".into(),
                    Unreused::Shared,
                    || async {
                        builds.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        Ok::<_, ()>((Bytes::from_static(b"page"), None))
                    },
                )
                .await
                .unwrap()
                .body
                .clone()
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), "page");
        }
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        let failed = c
            .get_or_build(
                || "e".into(),
                Unreused::Shared,
                || async { Err::<(Bytes, Option<Owner>), _>("boom") },
            )
            .await;
        assert_eq!(failed.unwrap_err(), "boom");
        assert_eq!(read(&c, "e", "ok").await, "ok", "a failure is not stored");
    }

    /// A read of "k" whose build answers how many builds started before it (after 30 ms).
    async fn numbered(
        c: Arc<ViewCache>,
        builds: Arc<std::sync::atomic::AtomicUsize>,
        unreused: Unreused,
    ) -> Bytes {
        c.get_or_build(
            || "k".into(),
            unreused,
            || async {
                let n = builds.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                Ok::<_, ()>((Bytes::from(n.to_string()), None))
            },
        )
        .await
        .unwrap()
        .body
        .clone()
    }

    #[tokio::test]
    async fn without_reuse_only_requests_waiting_together_share_a_build() {
        for c in [cache(0), cache(1 << 20)] {
            // Off, or on but not listening.
            let c = Arc::new(c);
            let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let read = |c, builds| numbered(c, builds, Unreused::Shared);
            let first = tokio::spawn(read(c.clone(), builds.clone()));
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            let waiting: Vec<_> = (0..8)
                .map(|_| tokio::spawn(read(c.clone(), builds.clone())))
                .collect();
            assert_eq!(first.await.unwrap(), "0");
            for t in waiting {
                assert_eq!(t.await.unwrap(), "1", "the build after the one they found");
            }
            assert_eq!(read(c.clone(), builds.clone()).await, "2", "nothing kept");
            assert_eq!(builds.load(Ordering::SeqCst), 3);
        }
    }

    #[tokio::test]
    async fn without_reuse_a_view_built_by_each_request_is_built_for_each() {
        for c in [cache(0), cache(1 << 20)] {
            let c = Arc::new(c);
            let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let tasks: Vec<_> = (0..8)
                .map(|_| tokio::spawn(numbered(c.clone(), builds.clone(), Unreused::Own)))
                .collect();
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.unwrap());
            }
            answers.sort();
            assert_eq!(answers, (0..8).map(|n| n.to_string()).collect::<Vec<_>>());
            assert_eq!(c.shared.held(), 0, "no key made");
        }
    }

    #[tokio::test]
    async fn a_cache_of_zero_bytes_never_reuses() {
        let c = cache(0);
        c.set_listening(true);
        assert_eq!(c.generation().await, None);
    }
}
