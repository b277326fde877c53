//! Serialised cluster and template views, reused until PostgreSQL reports a change under them.
//!
//! Every change to a cluster, nodegroup or template notifies `magnum_capi_views` when it commits
//! (any replica, any writer); a notification moves this process's generation and every view
//! stored under an older generation stops being served. A view is stored under the generation
//! read *before* its rows, so a change that lands while it is being built leaves it stale-marked.
//! Writes through this replica's API move the generation themselves before they answer (the
//! front middleware), so a client always reads its own writes here; a change made elsewhere is
//! served once its notification arrives (milliseconds). While the listening connection is down,
//! nothing is reused. `[api] view_cache_mib = 0` turns reuse off.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::db::events::{self, Event};

/// The cluster a stored view shows, so a reuse is authorised like the first read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub project_id: String,
    pub user_id: String,
}

/// One stored response body.
#[derive(Debug)]
pub struct View {
    generation: u64,
    pub body: Bytes,
    pub owner: Option<Owner>,
}

/// The process's store of serialised views (a `moka` cache bounded by bytes).
pub struct ViewCache {
    entries: Option<moka::future::Cache<String, Arc<View>>>,
    generation: AtomicU64,
    listening: AtomicBool,
}

impl std::fmt::Debug for ViewCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewCache")
            .field("enabled", &self.entries.is_some())
            .field("generation", &self.generation.load(Ordering::Relaxed))
            .field("listening", &self.listening.load(Ordering::Relaxed))
            .finish()
    }
}

impl ViewCache {
    /// A cache of at most `max_bytes` of keys and bodies (0: views are never reused).
    pub fn new(max_bytes: u64) -> Self {
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
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(false),
        }
    }

    /// The generation a view built from a read starting now belongs to; `None` when views are
    /// not reused now (turned off, or change notifications are not being received).
    pub fn generation(&self) -> Option<u64> {
        if self.entries.is_none() || !self.listening.load(Ordering::Acquire) {
            crate::telemetry::view_cache("bypass");
            return None;
        }
        Some(self.generation.load(Ordering::Acquire))
    }

    /// [`Self::generation`] without counting a use (for observers: tests, diagnostics).
    pub fn peek(&self) -> Option<u64> {
        (self.entries.is_some() && self.listening.load(Ordering::Acquire))
            .then(|| self.generation.load(Ordering::Acquire))
    }

    /// The view stored for `key`, if it belongs to `generation`.
    pub async fn get(&self, key: &str, generation: u64) -> Option<Arc<View>> {
        let hit = self
            .entries
            .as_ref()?
            .get(key)
            .await
            .filter(|v| v.generation == generation);
        crate::telemetry::view_cache(if hit.is_some() { "hit" } else { "miss" });
        hit
    }

    /// Stores `body` for `key` as built under `generation` (an older generation is not stored).
    pub async fn put(&self, key: String, generation: u64, body: Bytes, owner: Option<Owner>) {
        let Some(entries) = &self.entries else { return };
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        let view = Arc::new(View {
            generation,
            body,
            owner,
        });
        entries.insert(key, view).await;
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
        self.listening.store(on, Ordering::Release);
    }

    /// Follows the change notifications until `shutdown` (one task per process).
    pub async fn follow_changes(&self, pool: &PgPool, shutdown: watch::Receiver<bool>) {
        if self.entries.is_none() {
            return;
        }
        events::follow(
            pool,
            &[events::VIEWS_CHANNEL],
            "view cache",
            shutdown,
            |e| match e {
                Event::Listening => self.set_listening(true),
                Event::Notified => self.changed(),
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

    #[tokio::test]
    async fn a_view_is_served_only_in_its_generation_and_only_while_listening() {
        let c = ViewCache::new(1 << 20);
        assert_eq!(c.generation(), None, "not listening yet");
        c.set_listening(true);
        let g = c.generation().unwrap();
        c.put("k".into(), g, Bytes::from_static(b"one"), None).await;
        assert_eq!(c.get("k", g).await.unwrap().body, "one");
        c.changed();
        let g2 = c.generation().unwrap();
        assert!(c.get("k", g2).await.is_none(), "a change retires the view");
        // Built from a read that began before a change: not stored.
        c.put("k".into(), g, Bytes::from_static(b"old"), None).await;
        assert!(c.get("k", g2).await.is_none());
        c.put("k".into(), g2, Bytes::from_static(b"two"), None)
            .await;
        c.set_listening(false);
        assert_eq!(
            c.generation(),
            None,
            "notifications may be missed: no reuse"
        );
        c.set_listening(true);
        let g3 = c.generation().unwrap();
        assert!(
            c.get("k", g3).await.is_none(),
            "nothing from before the gap"
        );
    }

    #[tokio::test]
    async fn a_cache_of_zero_bytes_never_reuses() {
        let c = ViewCache::new(0);
        c.set_listening(true);
        assert_eq!(c.generation(), None);
    }
}
