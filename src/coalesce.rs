//! Concurrent identical reads share one build that started after all of them arrived: never
//! one already in flight, so an answer is never older than its request (a client reads its own
//! writes, as when each request builds its own).
//!
//! Builds of one key run one at a time. A request waits for a build that *started* after it
//! arrived, or for the key's turn to build, whichever comes first. So while one build runs,
//! every identical request that arrives waits for the next one, which the first of them runs and
//! the rest share: under load a popular page or show costs PostgreSQL one
//! statement per build, not one per request; alone, a request builds at once. A failed build
//! is shared with no one (each waiter builds on its own and gets its own error). Keys are
//! forgotten once no request holds them.
//!
//! [`Batch`] does the same for reads of different keys: requests that arrive while the
//! batch's statements are all busy wait for the next statement, which reads all their keys at
//! once.
//!
//! Hand-rolled: the single-flight crates (and `moka`'s `get_with`) join a build in flight,
//! whose answer may predate a request's own write; the data-loader crates wait a fixed delay
//! for a batch to fill, which every request would pay alone.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{Semaphore, mpsc, oneshot, watch};

/// One key's turn to build and the newest finished build's answer, numbered by when its build
/// started.
struct Slot<V> {
    /// How many builds have started (the number of the newest).
    started: AtomicU64,
    /// Held by the request building now.
    turn: tokio::sync::Mutex<()>,
    /// The newest successful build's number and answer; every waiter wakes when it moves.
    done: watch::Sender<Option<(u64, V)>>,
}

/// Shares builds among concurrent identical requests (see the module).
pub struct Coalesce<V> {
    slots: std::sync::Mutex<HashMap<String, Arc<Slot<V>>>>,
}

impl<V> Default for Coalesce<V> {
    fn default() -> Self {
        Self {
            slots: std::sync::Mutex::new(HashMap::new()),
        }
    }
}

impl<V> std::fmt::Debug for Coalesce<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalesce")
            .field("keys", &self.held())
            .finish()
    }
}

impl<V: Clone> Coalesce<V> {
    /// The answer for `key`: from a build that started after this call, its own or a
    /// concurrent identical request's.
    pub async fn run<E, Fut>(&self, key: String, build: impl FnOnce() -> Fut) -> Result<V, E>
    where
        Fut: Future<Output = Result<V, E>>,
    {
        let slot = self
            .lock()
            .entry(key.clone())
            .or_insert_with(Self::slot)
            .clone();
        let held = Held {
            owner: self,
            key,
            slot,
        };
        Self::answer(&held.slot, build).await
    }

    /// Waits for a build that started after this call, or for the turn to build, whichever
    /// comes first; the waiters of a build all wake when it is done (no chain of hand-overs). A
    /// builder that fails or goes away leaves the turn to the next waiter.
    async fn answer<E, Fut>(slot: &Slot<V>, build: impl FnOnce() -> Fut) -> Result<V, E>
    where
        Fut: Future<Output = Result<V, E>>,
    {
        let mut done = slot.done.subscribe();
        let arrived = slot.started.load(Ordering::Acquire);
        let fresh = |done: &mut watch::Receiver<Option<(u64, V)>>| match &*done.borrow_and_update()
        {
            Some((n, v)) if *n > arrived => Some(v.clone()),
            _ => None,
        };
        let turn = loop {
            if let Some(v) = fresh(&mut done) {
                return Ok(v);
            }
            tokio::select! {
                biased;
                // The sender lives in the slot this call holds: `changed` cannot fail.
                _ = done.changed() => {}
                turn = slot.turn.lock() => break turn,
            }
        };
        // A build may have finished between the wake and the turn.
        if let Some(v) = fresh(&mut done) {
            return Ok(v);
        }
        let n = slot.started.fetch_add(1, Ordering::AcqRel) + 1;
        let built = build().await;
        if let Ok(v) = &built {
            slot.done.send_replace(Some((n, v.clone())));
        }
        drop(turn);
        built
    }

    fn slot() -> Arc<Slot<V>> {
        Arc::new(Slot {
            started: AtomicU64::new(0),
            turn: tokio::sync::Mutex::new(()),
            done: watch::channel(None).0,
        })
    }
}

/// A request's hold on its key's slot: the slot is forgotten when the last holder lets go,
/// answered or gone away.
struct Held<'a, V> {
    owner: &'a Coalesce<V>,
    key: String,
    slot: Arc<Slot<V>>,
}

impl<V> Drop for Held<'_, V> {
    fn drop(&mut self) {
        let mut slots = self.owner.lock();
        // Only the map and this hold it (a holder takes it from the map under this lock).
        if Arc::strong_count(&self.slot) == 2 {
            slots.remove(&self.key);
        }
    }
}

impl<V> Coalesce<V> {
    /// How many keys requests hold now (0 when idle: nothing is kept).
    pub fn held(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Slot<V>>>> {
        // A panic while the map is held leaves it consistent (no half-made change).
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads of many keys in one statement: `None` when it failed (each caller then reads its own
/// key on its own, for its own error).
pub type BatchRead<K, V> = Arc<
    dyn Fn(Vec<K>) -> Pin<Box<dyn Future<Output = Option<HashMap<K, V>>> + Send>> + Send + Sync,
>;

/// A request's key and where its answer goes.
type Waiter<K, V> = (K, oneshot::Sender<Option<Option<V>>>);

/// Concurrent reads of single keys gathered into statements of many (see the module): at most
/// `in_flight` statements at once, each of at most `max_keys` keys; a request alone goes out at
/// once. The gatherer is a task of its own, started by the first request (it ends with this).
pub struct Batch<K, V> {
    read: BatchRead<K, V>,
    in_flight: usize,
    max_keys: usize,
    queue: OnceLock<mpsc::UnboundedSender<Waiter<K, V>>>,
}

impl<K, V> std::fmt::Debug for Batch<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("in_flight", &self.in_flight)
            .field("max_keys", &self.max_keys)
            .finish()
    }
}

impl<K, V> Batch<K, V>
where
    K: Clone + Eq + Hash + Send + 'static,
    V: Clone + Send + 'static,
{
    pub fn new(in_flight: usize, max_keys: usize, read: BatchRead<K, V>) -> Self {
        Self {
            read,
            in_flight: in_flight.max(1),
            max_keys: max_keys.max(1),
            queue: OnceLock::new(),
        }
    }

    /// The value of `key` (`None`: there is none) from a statement sent after this call;
    /// `Err(())` when that statement failed: read it on your own.
    #[allow(clippy::result_unit_err)] // the caller's own read gives the error
    pub async fn get(&self, key: K) -> Result<Option<V>, ()> {
        let (tx, rx) = oneshot::channel();
        let queue = self.queue.get_or_init(|| {
            let (queue, rx) = mpsc::unbounded_channel();
            tokio::spawn(gather(rx, self.read.clone(), self.in_flight, self.max_keys));
            queue
        });
        queue.send((key, tx)).map_err(|_| ())?;
        rx.await.ok().flatten().ok_or(())
    }
}

/// The gatherer: for each free statement, the requests that arrived meanwhile (at least one).
async fn gather<K, V>(
    mut queue: mpsc::UnboundedReceiver<Waiter<K, V>>,
    read: BatchRead<K, V>,
    in_flight: usize,
    max_keys: usize,
) where
    K: Clone + Eq + Hash + Send + 'static,
    V: Clone + Send + 'static,
{
    let statements = Arc::new(Semaphore::new(in_flight));
    loop {
        let Ok(statement) = statements.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut waiters = vec![first];
        while waiters.len() < max_keys {
            match queue.try_recv() {
                Ok(w) => waiters.push(w),
                Err(_) => break,
            }
        }
        let read = read.clone();
        tokio::spawn(async move {
            let mut keys: Vec<K> = Vec::with_capacity(waiters.len());
            for (k, _) in &waiters {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
            let found = read(keys).await;
            drop(statement);
            for (k, tx) in waiters {
                // A request that went away takes no answer.
                let _ = tx.send(found.as_ref().map(|m| m.get(&k).cloned()));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[tokio::test]
    async fn requests_arriving_during_a_build_share_the_next_one_not_that_one() {
        let c = Arc::new(Coalesce::<u64>::default());
        let builds = Arc::new(AtomicUsize::new(0));
        // The value a build answers is the number of builds begun before it (its "version").
        let read = |c: Arc<Coalesce<u64>>, builds: Arc<AtomicUsize>| async move {
            c.run("k".into(), || async {
                let v = builds.fetch_add(1, Ordering::SeqCst) as u64;
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, ()>(v)
            })
            .await
            .unwrap()
        };
        let first = tokio::spawn(read(c.clone(), builds.clone()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Arrive while the first build runs: none may take its answer (it began before them).
        let later: Vec<_> = (0..16)
            .map(|_| tokio::spawn(read(c.clone(), builds.clone())))
            .collect();
        assert_eq!(first.await.unwrap(), 0);
        for t in later {
            assert_eq!(t.await.unwrap(), 1, "the build after the one in flight");
        }
        assert_eq!(builds.load(Ordering::SeqCst), 2, "17 requests, two builds");
        assert_eq!(c.held(), 0, "nothing kept once idle");
        // Alone, a request builds at once, and never reuses an answer from before it.
        assert_eq!(read(c.clone(), builds.clone()).await, 2);
        assert_eq!(read(c.clone(), builds.clone()).await, 3);
    }

    #[tokio::test]
    async fn a_failed_build_is_no_ones_answer_but_its_own_and_keys_do_not_mix() {
        let c = Arc::new(Coalesce::<&'static str>::default());
        let builds = Arc::new(AtomicUsize::new(0));
        let read = |ok: bool, wait: u64| {
            let (c, builds) = (c.clone(), builds.clone());
            tokio::spawn(async move {
                c.run("k".into(), || async {
                    builds.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                    if ok { Ok("built") } else { Err("boom") }
                })
                .await
            })
        };
        let busy = read(true, 50);
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Both wait for the next build; the one that fails is not the other's answer.
        let failing = [read(false, 20), read(false, 20)];
        tokio::time::sleep(Duration::from_millis(5)).await;
        let other = c.run("other".into(), || async { Ok::<_, &str>("other") });
        assert_eq!(other.await, Ok("other"), "another key does not wait");
        assert_eq!(busy.await.unwrap(), Ok("built"));
        for f in failing {
            assert_eq!(f.await.unwrap(), Err("boom"));
        }
        assert_eq!(
            builds.load(Ordering::SeqCst),
            3,
            "each failure its own build"
        );
        assert_eq!(read(true, 0).await.unwrap(), Ok("built"));
        assert_eq!(
            builds.load(Ordering::SeqCst),
            4,
            "built anew after the failures"
        );
        assert_eq!(c.held(), 0);
    }

    #[tokio::test]
    async fn a_builder_that_goes_away_leaves_the_turn_to_a_waiter() {
        let c = Arc::new(Coalesce::<u32>::default());
        let gone = {
            let c = c.clone();
            tokio::spawn(async move {
                c.run("k".into(), || async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok::<_, ()>(0)
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let waiting = {
            let c = c.clone();
            tokio::spawn(async move { c.run("k".into(), || async { Ok::<_, ()>(1) }).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        gone.abort();
        let answer = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert_eq!(answer.unwrap().unwrap(), Ok(1));
        assert_eq!(c.held(), 0, "nothing kept for the request that went away");
    }

    #[tokio::test]
    async fn reads_waiting_for_a_statement_go_together_in_the_next_one() {
        let statements = Arc::new(std::sync::Mutex::new(Vec::<Vec<u32>>::new()));
        let log = statements.clone();
        let read: BatchRead<u32, String> = Arc::new(move |keys: Vec<u32>| {
            let log = log.clone();
            Box::pin(async move {
                log.lock().unwrap().push(keys.clone());
                tokio::time::sleep(Duration::from_millis(30)).await;
                // Key 7 does not exist; key 9 fails the statement it is in.
                (!keys.contains(&9)).then(|| {
                    keys.iter()
                        .filter(|&&k| k != 7)
                        .map(|&k| (k, format!("v{k}")))
                        .collect()
                })
            })
        });
        let b = Arc::new(Batch::new(1, 100, read));
        let get = |k: u32| {
            let b = b.clone();
            tokio::spawn(async move { b.get(k).await })
        };
        let first = get(1);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let waiting: Vec<_> = [2, 3, 3, 7].into_iter().map(get).collect();
        assert_eq!(first.await.unwrap(), Ok(Some("v1".into())));
        let answers: Vec<_> = futures::future::join_all(waiting).await;
        let answers: Vec<_> = answers.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            answers,
            [
                Ok(Some("v2".into())),
                Ok(Some("v3".into())),
                Ok(Some("v3".into())),
                Ok(None)
            ]
        );
        assert_eq!(
            *statements.lock().unwrap(),
            [vec![1], vec![2, 3, 7]],
            "alone at once, then the waiting ones together, each key once"
        );
        assert_eq!(
            b.get(9).await,
            Err(()),
            "a failed statement is each caller's to redo"
        );
        assert_eq!(
            b.get(1).await,
            Ok(Some("v1".into())),
            "and the next one is read anew"
        );
    }
}
