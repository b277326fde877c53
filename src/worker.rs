//! The operation worker: claims recorded operations from Postgres, runs them through the
//! driver under a renewed lease, parks the ones whose backend waits for the world (woken by the
//! backend's change feed or their due time), retries transient failures with exponential
//! backoff, and marks resources `*_FAILED` when an operation is given up. Also the mservice
//! heartbeat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use uuid::Uuid;

use tokio::sync::watch;
use tracing::Instrument;

use crate::app::AppState;
use crate::db::operations::{self as odb, OperationRow};
use crate::db::services as sdb;
use crate::db::spec::{self as spec_db, Loaded};
use crate::db::status::{self as status, Transition};
use crate::domain::operation::{OperationKind, backoff_ms};
use crate::domain::spec::{Operation, Template};
use crate::domain::status::Status;
use crate::driver::{Backend, DriverError, Fact, Outcome, Report, Run};
use crate::seal::SealError;
use crate::service::journal::PgJournal;

/// Runs `concurrency` workers until `shutdown` flips to true.
pub async fn run(
    app: AppState,
    driver: Arc<dyn Backend>,
    worker_id: String,
    mut shutdown: watch::Receiver<bool>,
) {
    let n = app.config.operations.concurrency;
    let parked = Parked::default();
    let mut tasks = Vec::with_capacity(n + 2);
    tasks.push(tokio::spawn(listen(app.clone(), shutdown.clone())));
    tasks.push(tokio::spawn(wake_on_changes(
        app.clone(),
        driver.changes(),
        parked.clone(),
        shutdown.clone(),
    )));
    for i in 0..n {
        let app = app.clone();
        let driver = driver.clone();
        let id = format!("{worker_id}/{i}");
        let shutdown = shutdown.clone();
        let parked = parked.clone();
        tasks.push(tokio::spawn(async move {
            worker_loop(app, driver, id, parked, shutdown).await
        }));
    }
    let _ = shutdown.wait_for(|stop| *stop).await;
    for t in tasks {
        let _ = t.await;
    }
}

/// Wakes one of this replica's workers whenever any replica records (or hands back) an
/// operation: PostgreSQL `LISTEN` on the queue's channel. A worker that claims one wakes the
/// next ([`worker_loop`]), so a batch of operations is taken up one worker after another and a
/// single one wakes one worker, not all of them to find the queue empty. While the listening
/// connection is down, the workers fall back to their safety poll.
pub async fn listen(app: AppState, shutdown: watch::Receiver<bool>) {
    crate::db::events::follow(
        &app.pool,
        &[odb::CHANNEL],
        "operation queue",
        app.config.database.listen_heartbeat(),
        shutdown,
        |e| match e {
            // Anything may have been recorded while nobody listened: every worker looks.
            crate::db::events::Event::Listening { .. } => app.work_ready.notify_waiters(),
            crate::db::events::Event::Notified(_) => app.work_ready.notify_one(),
            crate::db::events::Event::Lost => {}
        },
    )
    .await;
}

/// The operations this replica runs or parked, by cluster: what a change of that cluster
/// wakes. A change that arrives while the operation's step is running is remembered, so the
/// step that just looked at the cluster is not left waiting for its fallback due time.
#[derive(Clone, Default)]
struct Parked(Arc<Mutex<HashMap<Uuid, Watched>>>);

#[derive(Clone, Copy)]
struct Watched {
    op: i64,
    parked: bool,
    changed: bool,
}

impl Parked {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Uuid, Watched>) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The operation's step starts: changes of its cluster are noted from now on.
    fn running(&self, cluster: Uuid, op: i64) {
        self.with(|m| {
            m.insert(
                cluster,
                Watched {
                    op,
                    parked: false,
                    changed: false,
                },
            )
        });
    }

    /// The operation is parked; `Some(op)` when its cluster changed meanwhile (wake it now).
    fn parked(&self, cluster: Uuid) -> Option<i64> {
        self.with(|m| match m.get_mut(&cluster) {
            Some(w) if w.changed => m.remove(&cluster).map(|w| w.op),
            Some(w) => {
                w.parked = true;
                None
            }
            None => None,
        })
    }

    /// The operation ended (or left this replica): nothing to wake for its cluster.
    fn forget(&self, cluster: Uuid) {
        self.with(|m| m.remove(&cluster));
    }

    /// `cluster` changed (`None`: maybe any did): the parked operations to wake.
    fn changed(&self, cluster: Option<Uuid>) -> Vec<i64> {
        self.with(|m| {
            let keys: Vec<Uuid> = match cluster {
                Some(c) => m.contains_key(&c).then_some(c).into_iter().collect(),
                None => m.keys().copied().collect(),
            };
            let mut wake = Vec::new();
            for k in keys {
                if let Some(w) = m.get_mut(&k) {
                    if w.parked {
                        wake.push(w.op);
                        m.remove(&k);
                    } else {
                        w.changed = true;
                    }
                }
            }
            wake
        })
    }
}

/// Makes an operation parked for a cluster due as soon as the backend reports a change of that
/// cluster (CAPI deleted a machine, a rollout moved): the operation's next step runs within
/// milliseconds instead of at its fallback due time. A lagging feed wakes every parked
/// operation, so no change is missed.
async fn wake_on_changes(
    app: AppState,
    feeds: Vec<tokio::sync::broadcast::Receiver<Uuid>>,
    parked: Parked,
    mut shutdown: watch::Receiver<bool>,
) {
    if feeds.is_empty() {
        return;
    }
    let mut changes = futures::stream::select_all(feeds.into_iter().map(BroadcastStream::new));
    loop {
        let ops = tokio::select! {
            next = changes.next() => match next {
                Some(Ok(cluster)) => parked.changed(Some(cluster)),
                Some(Err(BroadcastStreamRecvError::Lagged(_))) => parked.changed(None),
                None => return,
            },
            _ = stopping(&mut shutdown) => return,
        };
        for op in ops {
            if let Err(e) = odb::wake(&app.pool, op).await {
                tracing::warn!(op, error = %e, "waking a parked operation failed; it runs when due");
            }
        }
    }
}

/// How long an idle worker sleeps: until the next retry or lease expiry, at most the safety poll.
async fn idle_for(app: &AppState, safety: Duration) -> Duration {
    match odb::next_due(&app.pool).await {
        Ok(Some(due)) => (due - chrono::Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .clamp(Duration::from_millis(10), safety),
        Ok(None) => safety,
        Err(e) => {
            tracing::warn!(error = %e, "reading the queue's next due time failed");
            safety.min(Duration::from_secs(1))
        }
    }
}

async fn worker_loop(
    app: AppState,
    driver: Arc<dyn Backend>,
    id: String,
    parked: Parked,
    mut shutdown: watch::Receiver<bool>,
) {
    let cfg = app.config.operations.clone();
    let safety = Duration::from_millis(cfg.poll_interval_ms.max(10));
    loop {
        if *shutdown.borrow() {
            return;
        }
        match odb::claim(&app.pool, &id, cfg.lease_secs).await {
            Ok(Some(op)) => {
                // There may be more: the next idle worker looks (one that finds nothing wakes
                // no other).
                app.work_ready.notify_one();
                let span = tracing::info_span!("operation", id = op.id, kind = %op.kind,
                    cluster = %op.cluster_uuid, attempt = op.attempts,
                    request_id = op.request_id.as_deref().unwrap_or(""));
                execute(&app, driver.as_ref(), &id, &parked, op, &mut shutdown)
                    .instrument(span)
                    .await;
                // What the operation wrote (a finished create, a deleted cluster) is read back
                // from this replica at once, not only when its change notification arrives.
                app.views.changed();
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "claiming an operation failed"),
        }
        // Registered before the due time is read, so a notification in between is not lost.
        let woken = app.work_ready.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let idle = idle_for(&app, safety).await;
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(idle) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Resolves once `rx` says stop (never, if the sender is gone).
async fn stopping(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How a driver run ended, seen from the queue.
enum Ending {
    Finished(Result<Report, DriverError>),
    /// Another replica took the operation over after our lease ran out.
    LeaseLost,
    /// This replica is stopping.
    Interrupted,
}

async fn execute(
    app: &AppState,
    driver: &dyn Backend,
    worker: &str,
    parked: &Parked,
    op: OperationRow,
    shutdown: &mut watch::Receiver<bool>,
) {
    let cfg = &app.config.operations;
    tracing::info!(driver = driver.name(), "executing");
    crate::telemetry::operation_attempt(&op.kind);
    // Keep the lease alive while the driver works.
    let renew_every = Duration::from_secs(u64::try_from(cfg.lease_secs / 3).unwrap_or(1).max(1));
    // The caller's token, when the request sealed one for this operation.
    let caller = match op.payload.0.get(odb::SEALED_TOKEN).and_then(|v| v.as_str()) {
        None => None,
        Some(sealed) => match app.sealer.as_ref().map(|s| s.unseal(sealed)) {
            Some(Ok(token)) => Some(token),
            Some(Err(e)) => {
                unusable_token(app, &op, worker, &e).await;
                return;
            }
            None => None,
        },
    };
    parked.running(op.cluster_uuid, op.id);
    let operation = Operation::from(&op);
    let journal = PgJournal::new(app.pool.clone());
    let run = {
        let work = run_step(app, driver, &operation, caller.as_ref(), &journal);
        tokio::pin!(work);
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
        loop {
            tokio::select! {
                r = &mut work => break Ending::Finished(r),
                _ = ticker.tick() => {
                    match odb::renew(&app.pool, op.id, worker, cfg.lease_secs).await {
                        Ok(true) => {}
                        Ok(false) => break Ending::LeaseLost,
                        Err(e) => tracing::warn!(error = %e, "renewing the lease failed"),
                    }
                }
                _ = stopping(shutdown) => break Ending::Interrupted,
            }
        }
    };
    let requeued = |r: &Ending| {
        matches!(
            r,
            Ending::Finished(Ok(Report {
                outcome: Outcome::Requeue { .. },
                ..
            }))
        )
    };
    let counted = match &run {
        r if requeued(r) => "requeued",
        Ending::Finished(Ok(_)) => "done",
        Ending::Finished(Err(DriverError::Transient(_))) if op.attempts < cfg.max_attempts => {
            "retry"
        }
        Ending::Finished(Err(DriverError::Deferred { .. })) => "deferred",
        Ending::Finished(Err(_)) => "failed",
        Ending::LeaseLost => "lease_lost",
        Ending::Interrupted => "interrupted",
    };
    crate::telemetry::operation_outcome(&op.kind, counted);
    if !requeued(&run) {
        parked.forget(op.cluster_uuid);
    }
    let outcome = match run {
        Ending::Finished(Ok(Report {
            outcome:
                Outcome::Requeue {
                    after,
                    progress,
                    step,
                },
            facts,
        })) => park(
            app,
            &op,
            worker,
            &facts,
            after,
            progress.as_deref(),
            step.as_ref(),
        )
        .await
        .map(|held| {
            if !held {
                parked.forget(op.cluster_uuid);
            } else if let Some(id) = parked.parked(op.cluster_uuid) {
                wake_soon(app, id);
            }
        }),
        Ending::Finished(Ok(done)) => complete(app, &op, worker, &done).await.map(|held| {
            if held {
                driver.finished(&operation);
            } else {
                tracing::warn!("finished after the lease was lost; the new holder decides");
            }
        }),
        Ending::Finished(Err(DriverError::Transient(e))) if op.attempts < cfg.max_attempts => {
            let delay = backoff_ms(cfg.retry_base_ms, op.attempts);
            tracing::warn!(error = %chain(e.as_ref()), delay_ms = delay, "attempt failed, will retry");
            odb::retry_later(&app.pool, op.id, worker, &e.to_string(), delay)
                .await
                .map(|_| ())
        }
        Ending::Finished(Err(DriverError::Deferred { reason, retry_ms })) => {
            tracing::info!(reason = %reason, delay_ms = retry_ms, "waiting for the management cluster");
            odb::defer(&app.pool, op.id, worker, &reason, retry_ms)
                .await
                .map(|_| ())
        }
        Ending::Finished(Err(e)) => {
            tracing::error!(error = %chain(&e), "operation failed for good");
            give_up(app, &op, worker, &e.to_string()).await
        }
        Ending::LeaseLost => {
            tracing::warn!("lease lost to another replica; abandoning this attempt");
            Ok(())
        }
        Ending::Interrupted => {
            tracing::info!("shutting down; handing the operation back to the queue");
            odb::release(&app.pool, op.id, worker).await.map(|_| ())
        }
    };
    if let Err(e) = outcome {
        tracing::error!(error = %e, "recording the outcome failed; the lease will expire and the operation rerun");
    }
}

/// Resolves what the operation needs from Postgres (its cluster's spec; an upgrade's new
/// template) and runs one step of it on the backend. A cluster already gone is done.
async fn run_step(
    app: &AppState,
    driver: &dyn Backend,
    op: &Operation,
    caller: Option<&secrecy::SecretString>,
    journal: &PgJournal,
) -> Result<Report, DriverError> {
    let transient = |e: crate::db::DbError| DriverError::Transient(Box::new(e));
    let spec = match spec_db::load(&app.pool, op.cluster_uuid)
        .await
        .map_err(transient)?
    {
        Loaded::Spec(spec) => spec,
        Loaded::ClusterGone => return Ok(Outcome::Done.into()),
        Loaded::TemplateGone => {
            return Err(DriverError::permanent(
                "the cluster's template no longer exists",
            ));
        }
    };
    // A delete asked again resumes from what an earlier one found.
    let mut op = op.clone();
    if op.op_kind() == Ok(OperationKind::Delete) {
        op.earlier_steps = spec_db::earlier_steps(&app.pool, &op)
            .await
            .map_err(transient)?;
    }
    let op = &op;
    let upgrade_to: Option<Template> = match op.op_kind() {
        Ok(OperationKind::Upgrade) => match op
            .payload
            .get("cluster_template")
            .and_then(serde_json::Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
        {
            Some(u) => spec_db::template(&app.pool, u).await.map_err(transient)?,
            None => None,
        },
        _ => None,
    };
    driver
        .execute(Run {
            op,
            spec: &spec,
            upgrade_to: upgrade_to.as_ref(),
            caller,
            journal,
        })
        .await
}

/// Records what a run established (lock order: the caller holds the cluster's row).
async fn write_facts(
    tx: &mut sqlx::PgConnection,
    cluster: Uuid,
    facts: &[Fact],
) -> Result<(), crate::db::DbError> {
    use crate::db::clusters as cdb;
    use crate::db::nodegroups as ndb;
    for fact in facts {
        match fact {
            Fact::Template(t) => cdb::upgrade_to(&mut *tx, cluster, *t).await?,
            Fact::Label { key, value } => {
                cdb::set_label(&mut *tx, cluster, key, value.as_deref()).await?
            }
            Fact::NodegroupImage { nodegroup, image } => {
                ndb::set_image(&mut *tx, *nodegroup, image.as_deref()).await?
            }
            Fact::NodegroupFlavor { nodegroup, flavor } => {
                ndb::set_flavor(&mut *tx, *nodegroup, flavor).await?
            }
            Fact::NodegroupAddresses {
                nodegroup,
                addresses,
            } => ndb::set_addresses(&mut *tx, *nodegroup, addresses).await?,
            Fact::NodegroupStatus { nodegroup, status } => {
                ndb::set_status(&mut *tx, *nodegroup, status.as_str(), None).await?
            }
            Fact::Cluster {
                api_address,
                coe_version,
                container_version,
            } => {
                let facts = cdb::DriverFacts {
                    api_address: api_address.clone(),
                    coe_version: coe_version.clone(),
                    container_version: container_version.clone(),
                };
                cdb::set_driver_facts(&mut *tx, cluster, &facts).await?
            }
        }
    }
    Ok(())
}

/// How soon an operation this replica cannot unseal is offered again (to any replica).
const HAND_BACK_MS: i64 = 2_000;

/// An operation whose sealed token this replica cannot open: sealed with a key it does not hold
/// (a replica with another ring, mid-rotation) goes back to the queue for a replica that holds
/// it, no attempt counted, until `[operations] unseal_wait_secs` after it was recorded; then,
/// or when the value is damaged, it fails saying why.
async fn unusable_token(app: &AppState, op: &OperationRow, worker: &str, e: &SealError) {
    let waited = (chrono::Utc::now() - op.created_at).num_seconds();
    let limit = app.config.operations.unseal_wait_secs;
    if matches!(e, SealError::OtherKey(_)) && u64::try_from(waited).unwrap_or(0) < limit {
        tracing::warn!(error = %e, "handing the operation back for a replica holding its key");
        crate::telemetry::operation_outcome(&op.kind, "deferred");
        let reason = format!("{e}; handed back for a replica that holds it");
        if let Err(e) = odb::defer(&app.pool, op.id, worker, &reason, HAND_BACK_MS).await {
            tracing::error!(error = %e, "handing the operation back failed; its lease will expire");
        }
        return;
    }
    let reason = if matches!(e, SealError::OtherKey(_)) {
        format!("The request's token cannot be used: no replica opened it within {limit}s: {e}")
    } else {
        format!("The request's token cannot be used by this replica: {e}")
    };
    tracing::error!(error = %e, "unsealing the caller's token failed");
    crate::telemetry::operation_outcome(&op.kind, "failed");
    if let Err(e) = give_up(app, op, worker, &reason).await {
        tracing::error!(error = %e, "recording the failure failed");
    }
}

/// Wakes a parked operation whose cluster changed while its step ran.
fn wake_soon(app: &AppState, op: i64) {
    let pool = app.pool.clone();
    tokio::spawn(async move {
        if let Err(e) = odb::wake(&pool, op).await {
            tracing::warn!(op, error = %e, "waking a parked operation failed; it runs when due");
        }
    });
}

/// The error and every source under it, as one line for the log.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

/// Records a completed operation and what its backend reported with it, in one transaction
/// (lock order: the cluster's row first, then its nodegroups, then the operation). Nothing is
/// recorded when the lease was lost meanwhile: the new holder runs the operation again, and a
/// run is idempotent. False then.
async fn complete(
    app: &AppState,
    op: &OperationRow,
    worker: &str,
    done: &Report,
) -> Result<bool, crate::db::DbError> {
    let mut tx = app.pool.begin().await?;
    if !done.facts.is_empty() {
        crate::db::clusters::lock(&mut *tx, op.cluster_uuid).await?;
        write_facts(&mut tx, op.cluster_uuid, &done.facts).await?;
    }
    let completed = |status| Transition::Completed { op: op.id, status };
    match &done.outcome {
        Outcome::Done | Outcome::Requeue { .. } => {}
        Outcome::Completed(status) => {
            status::write(&mut tx, op.cluster_uuid, completed(*status)).await?;
        }
        Outcome::NodegroupDeleted(ng) => {
            status::write(&mut tx, op.cluster_uuid, completed(Status::UpdateComplete)).await?;
            crate::db::nodegroups::delete(&mut *tx, *ng).await?;
        }
        Outcome::ClusterDeleted => crate::db::clusters::delete(&mut *tx, op.cluster_uuid).await?,
    }
    let held = odb::finish(&mut *tx, op.id, worker).await?;
    if held {
        tx.commit().await?;
    } else {
        tx.rollback().await?;
    }
    Ok(held)
}

/// Parks the operation for its next step (`odb::park`) and, in the same transaction, shows the
/// step's progress on the cluster while it is still in the operation's in-progress status.
/// Lock order: the cluster's row (by the status write) before the operation's. False when the
/// lease was lost meanwhile.
async fn park(
    app: &AppState,
    op: &OperationRow,
    worker: &str,
    facts: &[Fact],
    after: Duration,
    progress: Option<&str>,
    step: Option<&serde_json::Value>,
) -> Result<bool, crate::db::DbError> {
    let mut tx = app.pool.begin().await?;
    if !facts.is_empty() {
        crate::db::clusters::lock(&mut *tx, op.cluster_uuid).await?;
        write_facts(&mut tx, op.cluster_uuid, facts).await?;
    }
    if let (Some(reason), Ok(kind)) = (progress, op.op_kind()) {
        status::write(
            &mut tx,
            op.cluster_uuid,
            Transition::Progress {
                status: kind.in_progress_status(),
                reason,
            },
        )
        .await?;
    }
    let delay_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
    let held = odb::park(&mut *tx, op.id, worker, delay_ms, step).await?;
    if held {
        tx.commit().await?;
    } else {
        tracing::warn!("lease lost before parking; leaving the operation to its holder");
        tx.rollback().await?;
    }
    Ok(held)
}

async fn give_up(
    app: &AppState,
    op: &OperationRow,
    worker: &str,
    reason: &str,
) -> Result<(), crate::db::DbError> {
    let mut tx = app.pool.begin().await?;
    // Lock order (`db`): the cluster's row before the operation's.
    crate::db::clusters::lock(&mut *tx, op.cluster_uuid).await?;
    if !odb::fail(&mut *tx, op.id, worker, reason).await? {
        // The lease was lost meanwhile: the operation is another replica's now.
        tracing::warn!("lease lost before giving up; leaving the operation to its holder");
        tx.rollback().await?;
        return Ok(());
    }
    // A kind this version does not know fails as an update does.
    let kind = op.op_kind().unwrap_or(OperationKind::NodegroupUpdate);
    status::write(
        &mut tx,
        op.cluster_uuid,
        Transition::Failed {
            status: kind.failed_status(),
            reason,
            nodegroup: op.nodegroup_uuid,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Registers this replica as `magnum-conductor` and heartbeats until shutdown.
pub async fn heartbeat(app: AppState, host: String, mut shutdown: watch::Receiver<bool>) {
    let every = Duration::from_secs(app.config.service.report_interval_secs.max(1));
    loop {
        if let Err(e) = sdb::heartbeat(&app.pool, &host, "magnum-conductor").await {
            tracing::warn!(error = %e, "service heartbeat failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
    }
}
