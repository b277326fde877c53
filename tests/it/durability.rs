//! Durability of recorded operations: the queue's claim/lease/retry semantics against the real
//! database, the worker's retry policy, and — the point of the whole design — that an
//! acknowledged operation survives a crash of the process and runs exactly once.
use crate::common::served::{Server, WORKER_OFF, WORKER_ON};
use crate::common::wait::{until, until_left_alone};
use crate::common::*;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use magnum_capi::db::operations::{self as odb, NewOperation, OperationRow};
use magnum_capi::driver::simulated::SimulatedDriver;
use magnum_capi::driver::{Backend, DriverError, DriverFuture};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::watch;
use uuid::Uuid;

async fn enqueue(pool: &PgPool, cluster: Uuid, kind: &str) -> i64 {
    odb::enqueue(
        pool,
        &NewOperation {
            cluster_uuid: cluster,
            nodegroup_uuid: None,
            kind: kind.parse().expect("a known operation kind"),
            payload: json!({}),
            request_id: Some("req-test"),
        },
    )
    .await
    .expect("enqueue")
}

async fn op(pool: &PgPool, id: i64) -> OperationRow {
    sqlx::query_as::<_, OperationRow>("SELECT * FROM operation WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("operation")
}

// ------------------------------------------------------------ (a) queue semantics

#[tokio::test]
async fn concurrent_claimers_never_share_an_operation() {
    let t = app().await;
    let pool = t.state.pool.clone();
    let mut all = HashSet::new();
    for _ in 0..40 {
        all.insert(enqueue(&pool, Uuid::new_v4(), "cluster_create").await);
    }
    let mut tasks = Vec::new();
    for w in 0..4 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let me = format!("worker-{w}");
            let mut got = Vec::new();
            while let Some(o) = odb::claim(&pool, &me, 60).await.expect("claim") {
                assert_eq!(o.state, "running");
                assert_eq!(o.locked_by.as_deref(), Some(me.as_str()));
                assert_eq!(o.attempts, 1);
                got.push(o.id);
                tokio::task::yield_now().await;
            }
            got
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for task in tasks {
        for id in task.await.expect("claimer") {
            total += 1;
            assert!(seen.insert(id), "operation {id} was claimed twice");
        }
    }
    assert_eq!(total, 40);
    assert_eq!(seen, all);
    assert_eq!(
        t.sql_i64("SELECT count(*) FROM operation WHERE state = 'running' AND attempts = 1")
            .await,
        40
    );
}

#[tokio::test]
async fn claim_skips_rows_locked_by_another_transaction() {
    let t = app().await;
    let pool = t.state.pool.clone();
    let a = enqueue(&pool, Uuid::new_v4(), "cluster_create").await;
    let b = enqueue(&pool, Uuid::new_v4(), "cluster_create").await;
    // Another transaction holds a row lock on `a` (e.g. a claimer mid-statement).
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SELECT id FROM operation WHERE id = $1 FOR UPDATE")
        .bind(a)
        .execute(&mut *tx)
        .await
        .expect("lock");
    // The claim does not wait for it and takes the next one.
    let got = tokio::time::timeout(Duration::from_secs(5), odb::claim(&pool, "w2", 60))
        .await
        .expect("claim must not block on a locked row")
        .expect("claim")
        .expect("an operation");
    assert_eq!(got.id, b);
    tx.rollback().await.expect("rollback");
    let got = odb::claim(&pool, "w2", 60)
        .await
        .expect("claim")
        .expect("an operation");
    assert_eq!(got.id, a);
}

#[tokio::test]
async fn operations_of_one_cluster_run_in_order() {
    let t = app().await;
    let pool = t.state.pool.clone();
    let c = Uuid::new_v4();
    let first = enqueue(&pool, c, "cluster_create").await;
    let second = enqueue(&pool, c, "cluster_resize").await;
    let other = enqueue(&pool, Uuid::new_v4(), "cluster_create").await;

    let o = odb::claim(&pool, "w1", 60)
        .await
        .expect("claim")
        .expect("op");
    assert_eq!(o.id, first);
    // The cluster's second operation waits for the running first; other clusters do not.
    let o = odb::claim(&pool, "w2", 60)
        .await
        .expect("claim")
        .expect("op");
    assert_eq!(o.id, other);
    assert!(odb::claim(&pool, "w2", 60).await.expect("claim").is_none());

    // Back to pending (not due yet): still blocks the second.
    odb::retry_later(&pool, first, "w1", "transient", 60_000)
        .await
        .expect("retry");
    assert!(odb::claim(&pool, "w2", 60).await.expect("claim").is_none());

    // Due again: the first is claimed again, then finished; only then the second.
    sqlx::query("UPDATE operation SET not_before = now() WHERE id = $1")
        .bind(first)
        .execute(&pool)
        .await
        .expect("due");
    let o = odb::claim(&pool, "w1", 60)
        .await
        .expect("claim")
        .expect("op");
    assert_eq!((o.id, o.attempts), (first, 2));
    assert!(odb::claim(&pool, "w2", 60).await.expect("claim").is_none());
    assert!(odb::finish(&pool, first, "w1").await.expect("finish"));
    let o = odb::claim(&pool, "w2", 60)
        .await
        .expect("claim")
        .expect("op");
    assert_eq!(o.id, second);

    // A failed (given up) predecessor does not block its successors either.
    let c2 = Uuid::new_v4();
    let f1 = enqueue(&pool, c2, "cluster_create").await;
    let f2 = enqueue(&pool, c2, "cluster_delete").await;
    let o = odb::claim(&pool, "w1", 60)
        .await
        .expect("claim")
        .expect("op");
    assert_eq!(o.id, f1);
    assert!(
        !odb::fail(&pool, f1, "intruder", "boom")
            .await
            .expect("fail")
    );
    assert!(odb::fail(&pool, f1, "w1", "boom").await.expect("fail"));
    let o = odb::claim(&pool, "w1", 60)
        .await
        .expect("claim")
        .expect("op");
    assert_eq!(o.id, f2);
}

#[tokio::test]
async fn expired_lease_is_reclaimed_and_the_old_holder_cannot_finish() {
    let t = app().await;
    let pool = t.state.pool.clone();
    let id = enqueue(&pool, Uuid::new_v4(), "cluster_create").await;
    let o = odb::claim(&pool, "dead", 1)
        .await
        .expect("claim")
        .expect("op");
    assert_eq!(o.id, id);
    assert!(o.locked_until.is_some_and(|u| u > o.not_before));
    // Lease still valid: nobody else gets it.
    assert!(
        odb::claim(&pool, "alive", 60)
            .await
            .expect("claim")
            .is_none()
    );
    // The holder vanished; its lease runs out (the sleep is the expiry under test).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let o = odb::claim(&pool, "alive", 60)
        .await
        .expect("claim")
        .expect("reclaimed");
    assert_eq!(o.id, id);
    assert_eq!(o.attempts, 2);
    assert_eq!(o.locked_by.as_deref(), Some("alive"));
    // The former holder's late outcome is ignored; renewals by it are no-ops.
    assert!(!odb::renew(&pool, id, "dead", 600).await.expect("renew"));
    assert!(
        op(&pool, id).await.locked_until
            < Some(chrono::Utc::now() + chrono::Duration::seconds(120))
    );
    assert!(!odb::finish(&pool, id, "dead").await.expect("finish"));
    assert!(!odb::fail(&pool, id, "dead", "late").await.expect("fail"));
    assert!(!odb::release(&pool, id, "dead").await.expect("release"));
    odb::retry_later(&pool, id, "dead", "late", 0)
        .await
        .expect("retry");
    let row = op(&pool, id).await;
    assert_eq!(row.state, "running");
    assert_eq!(row.locked_by.as_deref(), Some("alive"));
    assert!(odb::finish(&pool, id, "alive").await.expect("finish"));
    let row = op(&pool, id).await;
    assert_eq!(row.state, "done");
    assert!(row.locked_by.is_none() && row.locked_until.is_none());
    assert!(row.finished_at.is_some());
    // Done is final: neither claimed again nor finished twice.
    assert!(
        odb::claim(&pool, "alive", 60)
            .await
            .expect("claim")
            .is_none()
    );
    assert!(!odb::finish(&pool, id, "alive").await.expect("finish"));
}

#[tokio::test]
async fn retry_later_defers_the_operation() {
    let t = app().await;
    let pool = t.state.pool.clone();
    let id = enqueue(&pool, Uuid::new_v4(), "cluster_create").await;
    odb::claim(&pool, "w", 60)
        .await
        .expect("claim")
        .expect("op");
    let before = chrono::Utc::now();
    odb::retry_later(&pool, id, "w", "backend unreachable", 30_000)
        .await
        .expect("retry");
    let row = op(&pool, id).await;
    assert_eq!(row.state, "pending");
    assert_eq!(row.attempts, 1);
    assert_eq!(row.last_error.as_deref(), Some("backend unreachable"));
    assert!(row.locked_by.is_none() && row.locked_until.is_none());
    assert!(
        row.not_before > before + chrono::Duration::seconds(25),
        "not_before {} should be ~30 s after {before}",
        row.not_before
    );
    assert!(odb::claim(&pool, "w", 60).await.expect("claim").is_none());
    // Only the holder can put it back.
    let id2 = enqueue(&pool, Uuid::new_v4(), "cluster_create").await;
    odb::claim(&pool, "w", 60)
        .await
        .expect("claim")
        .expect("op");
    odb::retry_later(&pool, id2, "intruder", "x", 30_000)
        .await
        .expect("retry");
    assert_eq!(op(&pool, id2).await.state, "running");
}

// ------------------------------------------------------------ (b) worker retries

/// Fails `transient` times (then `permanent`, if set), otherwise behaves like the simulated driver.
struct Flaky {
    transient: AtomicUsize,
    permanent: Option<&'static str>,
    calls: AtomicUsize,
    inner: SimulatedDriver,
}

impl Flaky {
    fn new(transient: usize, permanent: Option<&'static str>) -> Arc<Self> {
        Arc::new(Flaky {
            transient: AtomicUsize::new(transient),
            permanent,
            calls: AtomicUsize::new(0),
            inner: SimulatedDriver {
                delay: Duration::ZERO,
                run: Duration::ZERO,
            },
        })
    }
}

impl Backend for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn execute<'a>(&'a self, run: magnum_capi::driver::Run<'a>) -> DriverFuture<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let left = self.transient.load(Ordering::SeqCst);
        if left > 0 {
            self.transient.store(left - 1, Ordering::SeqCst);
            return Box::pin(async { Err(DriverError::Transient("backend unreachable".into())) });
        }
        if let Some(msg) = self.permanent {
            return Box::pin(async move { Err(DriverError::Permanent(msg.into())) });
        }
        self.inner.execute(run)
    }
}

#[tokio::test]
async fn another_replicas_operation_wakes_an_idle_worker_at_once() {
    // An idle worker whose safety poll is a minute away: only the queue's NOTIFY can wake it.
    // A poll far beyond the wait's deadline: only the notification can wake the worker in time.
    let t = app_with(|cfg| cfg.operations.poll_interval_ms = 3_600_000).await;
    let w = start_worker(&t);
    // Let it go idle first: being parked in its poll is not observable, so a pause.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // Another replica records an operation: a plain insert through the queue on its own
    // connection, no in-process wake-up.
    let other = db(&t.url).await;
    let id = enqueue(&other, Uuid::new_v4(), "cluster_create").await;
    until("the notification to wake the worker", || async {
        (op(&t.state.pool, id).await.state == "done").then_some(())
    })
    .await;
    w.stop().await;
}

async fn ops_of(t: &TestApp, cluster: &str) -> Vec<OperationRow> {
    odb::of_cluster(&t.state.pool, Uuid::parse_str(cluster).expect("uuid"))
        .await
        .expect("ops")
}

async fn wait_op_state(t: &TestApp, cluster: &str, state: &str) -> OperationRow {
    until(
        &format!("an operation of {cluster} to be {state}"),
        || async {
            ops_of(t, cluster)
                .await
                .into_iter()
                .find(|o| o.state == state)
        },
    )
    .await
}

#[tokio::test]
async fn transient_failures_are_retried_until_success() {
    let t = app_with(|c| {
        c.operations.retry_base_ms = 20;
        c.operations.max_attempts = 5;
    })
    .await;
    let ct = t.template(&ALICE, "ct").await;
    let c = t.cluster(&ALICE, "c", &ct).await;
    let driver = Flaky::new(2, None);
    let worker = start_worker_with(&t, driver.clone());
    let r = t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    assert!(r.body.get("faults").is_none());
    let o = wait_op_state(&t, &c, "done").await;
    assert_eq!(o.attempts, 3);
    assert_eq!(o.last_error.as_deref(), Some("backend unreachable"));
    assert_eq!(driver.calls.load(Ordering::SeqCst), 3);
    worker.stop().await;
}

#[tokio::test]
async fn permanent_failure_fails_the_cluster() {
    let t = app_with(|c| c.operations.retry_base_ms = 20).await;
    let ct = t.template(&ALICE, "ct").await;
    let c = t.cluster(&ALICE, "c", &ct).await;
    let driver = Flaky::new(0, Some("flavor m1.small is not available"));
    let worker = start_worker_with(&t, driver.clone());
    let r = t.wait_cluster(&ALICE, &c, "CREATE_FAILED").await;
    assert_eq!(r.body["status_reason"], "flavor m1.small is not available");
    assert!(r.body["faults"].is_object(), "{}", r.body);
    let o = wait_op_state(&t, &c, "failed").await;
    assert_eq!(o.attempts, 1);
    assert_eq!(
        o.last_error.as_deref(),
        Some("flavor m1.small is not available")
    );
    assert!(o.finished_at.is_some() && o.locked_by.is_none());
    // The list (short view) carries the status too; nothing runs it again (a pause: what is
    // checked is that nothing happens).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(driver.calls.load(Ordering::SeqCst), 1);
    worker.stop().await;
}

#[tokio::test]
async fn exhausted_retries_fail_the_cluster() {
    let t = app_with(|c| {
        c.operations.retry_base_ms = 10;
        c.operations.max_attempts = 3;
    })
    .await;
    let ct = t.template(&ALICE, "ct").await;
    let c = t.cluster(&ALICE, "c", &ct).await;
    let driver = Flaky::new(usize::MAX, None);
    let worker = start_worker_with(&t, driver.clone());
    let r = t.wait_cluster(&ALICE, &c, "CREATE_FAILED").await;
    assert_eq!(r.body["status_reason"], "backend unreachable");
    assert!(r.body["faults"].is_object());
    let o = wait_op_state(&t, &c, "failed").await;
    assert_eq!(o.attempts, 3);
    assert_eq!(driver.calls.load(Ordering::SeqCst), 3);
    worker.stop().await;
}

// ------------------------------------------------------------ (c) restart of the real binary

async fn db(url: &str) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await
        .expect("connect test database")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_operation_survives_a_crash_and_runs_exactly_once() {
    let url = fresh_database().await;
    let pool = db(&url).await;

    // 1. An instance that records but does not execute.
    let first = Server::start(&url, &[WORKER_OFF]).await;
    let c = first.create_cluster().await;
    assert_eq!(first.cluster_status(c).await, "CREATE_IN_PROGRESS");
    let ops = odb::of_cluster(&pool, c).await.expect("ops");
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].kind, "cluster_create");
    assert_eq!(ops[0].state, "pending");
    assert_eq!(ops[0].attempts, 0);
    assert!(
        ops[0]
            .request_id
            .as_deref()
            .is_some_and(|r| r.starts_with("req-"))
    );
    first.kill();

    // 2. After the crash, a new instance with a worker finishes the acknowledged work.
    let second = Server::start(&url, &[WORKER_ON]).await;
    second.wait_status(c, "CREATE_COMPLETE").await;
    let ops = odb::of_cluster(&pool, c).await.expect("ops");
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].state, "done");
    assert_eq!(ops[0].attempts, 1, "ran more than once: {ops:?}");
    assert!(ops[0].locked_by.is_none() && ops[0].finished_at.is_some());
    second.kill();

    // 3. Another restart does not run it again (a pause: what is checked is that nothing
    // happens).
    let third = Server::start(&url, &[WORKER_ON]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(third.cluster_status(c).await, "CREATE_COMPLETE");
    let again = odb::of_cluster(&pool, c).await.expect("ops");
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 1);
    assert_eq!(again[0].state, "done");
    assert_eq!(again[0].finished_at, ops[0].finished_at);
    // Both replicas heartbeated under the configured host as one service row.
    let (n,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM magnum_service WHERE host = 'durability-test'")
            .fetch_one(&pool)
            .await
            .expect("services");
    assert_eq!(n, 1);
    drop(third);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operation_of_a_killed_replica_is_taken_over_after_its_lease() {
    let url = fresh_database().await;
    let pool = db(&url).await;

    // 1. A replica that claims the operation and then takes "forever".
    let first = Server::start(
        &url,
        &[
            WORKER_ON,
            ("MAGNUM_CAPI__DRIVER__SIMULATED_RUN_MS", "60000"),
            ("MAGNUM_CAPI__OPERATIONS__LEASE_SECS", "2"),
        ],
    )
    .await;
    let c = first.create_cluster().await;
    let running = until("the operation to be claimed", || async {
        let ops = odb::of_cluster(&pool, c).await.expect("ops");
        ops.into_iter().find(|o| o.state == "running")
    })
    .await;
    assert_eq!(running.attempts, 1);
    let dead_worker = running.locked_by.clone().expect("holder");
    first.kill();
    assert_eq!(
        odb::of_cluster(&pool, c).await.expect("ops")[0].state,
        "running"
    );

    // 2. The next replica takes it over once the lease has expired, and completes it.
    let second = Server::start(
        &url,
        &[WORKER_ON, ("MAGNUM_CAPI__OPERATIONS__LEASE_SECS", "2")],
    )
    .await;
    second.wait_status(c, "CREATE_COMPLETE").await;
    let ops = odb::of_cluster(&pool, c).await.expect("ops");
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].state, "done");
    assert_eq!(ops[0].attempts, 2, "{ops:?}");
    assert!(ops[0].locked_by.is_none());
    assert_ne!(Some(dead_worker), ops[0].locked_by);
    drop(second);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_hands_the_running_operation_back() {
    let url = fresh_database().await;
    let pool = db(&url).await;

    // A long lease: only an explicit hand-back lets the next replica start at once.
    let first = Server::start(
        &url,
        &[
            WORKER_ON,
            ("MAGNUM_CAPI__DRIVER__SIMULATED_RUN_MS", "60000"),
        ],
    )
    .await;
    let c = first.create_cluster().await;
    until("the operation to be claimed", || async {
        let ops = odb::of_cluster(&pool, c).await.expect("ops");
        ops.iter().any(|o| o.state == "running").then_some(())
    })
    .await;
    let status = first.terminate().await;
    assert!(status.success(), "exit status {status}");
    let ops = odb::of_cluster(&pool, c).await.expect("ops");
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].state, "pending", "{ops:?}");
    assert_eq!(ops[0].attempts, 0, "the interrupted attempt is not counted");
    assert!(ops[0].locked_by.is_none() && ops[0].locked_until.is_none());

    let second = Server::start(&url, &[WORKER_ON]).await;
    second.wait_status(c, "CREATE_COMPLETE").await;
    let ops = odb::of_cluster(&pool, c).await.expect("ops");
    assert_eq!((ops[0].state.as_str(), ops[0].attempts), ("done", 1));
    drop(second);
    pool.close().await;
}

/// Never finishes; records when its future is dropped (the worker abandoned it).
struct Hang {
    dropped: Arc<AtomicUsize>,
}

struct DropFlag(Arc<AtomicUsize>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Backend for Hang {
    fn name(&self) -> &'static str {
        "hang"
    }
    fn execute<'a>(&'a self, _run: magnum_capi::driver::Run<'a>) -> DriverFuture<'a> {
        let flag = DropFlag(self.dropped.clone());
        Box::pin(async move {
            let _flag = flag;
            std::future::pending::<()>().await;
            Ok(magnum_capi::driver::Outcome::Done.into())
        })
    }
}

#[tokio::test]
async fn worker_abandons_an_operation_whose_lease_was_taken_over() {
    let t = app_with(|c| c.operations.lease_secs = 3).await;
    let ct = t.template(&ALICE, "ct").await;
    let c = t.cluster(&ALICE, "c", &ct).await;
    let dropped = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = watch::channel(false);
    tokio::spawn(magnum_capi::worker::run(
        t.state.clone(),
        Arc::new(Hang {
            dropped: dropped.clone(),
        }),
        "slow".into(),
        rx,
    ));
    let o = wait_op_state(&t, &c, "running").await;
    assert!(
        o.locked_by
            .as_deref()
            .is_some_and(|w| w.starts_with("slow/"))
    );
    // Another replica took it over (as after an expired lease while this one was stalled).
    sqlx::query("UPDATE operation SET locked_by = 'other', attempts = attempts + 1 WHERE id = $1")
        .bind(o.id)
        .execute(&t.state.pool)
        .await
        .expect("steal");
    // The next renewal (every lease/3 = 1 s) notices and drops the driver's work.
    until("the driver's run to be dropped", || async {
        (dropped.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "driver run not abandoned"
    );
    let row = op(&t.state.pool, o.id).await;
    assert_eq!(row.state, "running");
    assert_eq!(row.locked_by.as_deref(), Some("other"));
    let r = t.get(&ALICE, &format!("/v1/clusters/{c}")).await;
    assert_eq!(r.body["status"], "CREATE_IN_PROGRESS");
    let _ = tx.send(true);
}

/// One word from the queue takes up a whole batch: the worker it wakes claims an operation and
/// wakes the next idle worker, which does the same (`worker::worker_loop`), so four operations
/// that became due together run side by side at once, not one per safety poll. (A word wakes
/// one worker, not all: `capi_lifecycle::a_word_from_the_queue_wakes_one_worker_not_all_of_them`.)
#[tokio::test]
async fn one_word_from_the_queue_takes_up_a_batch_worker_after_worker() {
    let t = app_with(|c| {
        c.operations.concurrency = 4;
        // The safety poll out of the way: only words wake a worker here.
        c.operations.poll_interval_ms = 600_000;
    })
    .await;
    let ct = t.template(&ALICE, "ct").await;
    for i in 0..4 {
        t.cluster(&ALICE, &format!("c{i}"), &ct).await;
    }
    // Recorded before any worker runs, and not due: the workers start and find nothing.
    let pool = &t.state.pool;
    sqlx::query("UPDATE operation SET not_before = now() + interval '1 hour'")
        .execute(pool)
        .await
        .unwrap();
    let (tx, rx) = watch::channel(false);
    let hang = Hang {
        dropped: Arc::default(),
    };
    tokio::spawn(magnum_capi::worker::run(
        t.state.clone(),
        Arc::new(hang),
        "batch".into(),
        rx,
    ));
    // Every worker has looked at the queue and sleeps.
    until_left_alone(&t.url, 2.0).await;
    sqlx::query("UPDATE operation SET not_before = now()")
        .execute(pool)
        .await
        .unwrap();
    // What one notification on the queue's channel does in this replica (`worker::listen`).
    t.state.work_ready.notify_one();
    let holders = until("the four operations to run side by side", || async {
        let holders: Vec<String> =
            sqlx::query_scalar("SELECT locked_by FROM operation WHERE state = 'running'")
                .fetch_all(pool)
                .await
                .unwrap();
        (holders.len() == 4).then_some(holders)
    })
    .await;
    let workers: HashSet<&String> = holders.iter().collect();
    assert_eq!(workers.len(), 4, "one worker each: {holders:?}");
    let _ = tx.send(true);
}

/// Rollback safety: this binary plays the previous release on a database the next release has
/// migrated — an expand-only migration it does not know (a new column with a default, a new
/// table, its row in sqlx's bookkeeping). It starts with `migrate_on_start` (sqlx would refuse a
/// database holding an unknown migration), is ready, records and completes a create, and
/// `magnum-capi migrate` on that database succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_starts_and_serves_on_the_next_releases_schema() {
    let url = fresh_database().await;
    let pool = db(&url).await;
    for statement in [
        "ALTER TABLE cluster ADD COLUMN next_release_field text NOT NULL DEFAULT ''",
        "CREATE TABLE next_release_table (id bigint PRIMARY KEY)",
        "INSERT INTO _sqlx_migrations (version, description, installed_on, success, checksum,
                                       execution_time)
              VALUES (29991231000000, 'next release', now(), true, '\\x00'::bytea, 0)",
    ] {
        sqlx::query(statement)
            .execute(&pool)
            .await
            .expect(statement);
    }
    let server = Server::start(&url, &[WORKER_ON]).await;
    let (status, ready) = server.call(reqwest::Method::GET, "/readyz", None).await;
    assert_eq!(status, 200, "{ready}");
    let c = server.create_cluster().await;
    server.wait_status(c, "CREATE_COMPLETE").await;
    let (status, list) = server
        .call(reqwest::Method::GET, "/v1/clusters", None)
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["clusters"].as_array().map(Vec::len), Some(1), "{list}");
    server.kill();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .arg("migrate")
        .env_remove("MAGNUM_CAPI_CONFIG")
        .env("MAGNUM_CAPI__DATABASE__URL", &url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The status writers hear of every operation recorded and of every change of its state, once
/// per cluster and statement (`magnum_capi_clusters`, payload the cluster's uuid; migration
/// `slimmer_creates`: one statement trigger for the inserts, a row trigger for the state). A
/// statement that records nothing is silent, and so is one applied as a replica (a logical
/// replication subscriber's, a bulk load's). A statement of several operations is one PL/pgSQL
/// call.
#[tokio::test]
async fn recorded_operations_and_their_state_changes_are_announced_per_cluster() {
    let t = app().await;
    let mut listener = sqlx::postgres::PgListener::connect(&t.url).await.unwrap();
    listener
        .listen(magnum_capi::status_writer::CLUSTER_CHANNEL)
        .await
        .unwrap();
    let pool = &t.state.pool;
    // What was announced up to a marker sent after the statement (in order, so all of it).
    let mut heard = async |statement: &str, binds: &[Uuid], replica: bool| {
        let mut c = pool.acquire().await.unwrap();
        let role = if replica { "replica" } else { "origin" };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET session_replication_role = {role}"
        )))
        .execute(&mut *c)
        .await
        .unwrap();
        let mut q = sqlx::query(sqlx::AssertSqlSafe(statement.to_string()));
        for b in binds {
            q = q.bind(b);
        }
        q.execute(&mut *c).await.unwrap();
        sqlx::query("RESET session_replication_role")
            .execute(&mut *c)
            .await
            .unwrap();
        sqlx::query("SELECT pg_notify($1, 'marker')")
            .bind(magnum_capi::status_writer::CLUSTER_CHANNEL)
            .execute(&mut *c)
            .await
            .unwrap();
        let mut got = Vec::new();
        loop {
            let n = listener.recv().await.unwrap();
            if n.payload() == "marker" {
                return got;
            }
            got.push(n.payload().to_string());
        }
    };
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut got = heard(
        "INSERT INTO operation (cluster_uuid, kind, payload)
         SELECT u, 'cluster_update', '{}' FROM unnest(ARRAY[$1, $1, $2]) u",
        &[a, b],
        false,
    )
    .await;
    got.sort();
    let mut want = vec![a.to_string(), b.to_string()];
    want.sort();
    assert_eq!(got, want, "one announcement per cluster of the statement");
    // One PL/pgSQL call per statement, not one per operation (counted in a transaction rolled
    // back: `pg_stat_xact_user_functions` is this transaction's own).
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL track_functions = 'pl'")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO operation (cluster_uuid, kind, payload)
         SELECT $1, 'cluster_update', '{}' FROM generate_series(1, 3)",
    )
    .bind(c)
    .execute(&mut *tx)
    .await
    .unwrap();
    let calls: Vec<(String, i64)> = sqlx::query_as(
        "SELECT funcname::text, calls FROM pg_stat_xact_user_functions
          WHERE funcname LIKE 'magnum_capi_operation%' ORDER BY funcname",
    )
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    assert_eq!(calls, [("magnum_capi_operations_recorded".to_string(), 1)]);
    tx.rollback().await.unwrap();
    let b_heard = [b.to_string()];
    for (what, statement, bound, replica, want) in [
        (
            "a change of state",
            "UPDATE operation SET state = 'running' WHERE cluster_uuid = $1",
            b,
            false,
            &b_heard[..],
        ),
        (
            "a change of anything but the state",
            "UPDATE operation SET payload = '{\"x\": 1}' WHERE cluster_uuid = $1",
            b,
            false,
            &[],
        ),
        (
            "a statement that records nothing",
            "INSERT INTO operation (cluster_uuid, kind, payload)
             SELECT $1, 'cluster_update', '{}' WHERE false",
            c,
            false,
            &[],
        ),
        (
            "a statement applied as a replica",
            "INSERT INTO operation (cluster_uuid, kind, payload) VALUES ($1, 'cluster_update', '{}')",
            c,
            true,
            &[],
        ),
    ] {
        assert_eq!(heard(statement, &[bound], replica).await, want, "{what}");
    }
}
