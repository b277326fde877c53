//! The operation worker: claims recorded operations from Postgres, runs them through the
//! driver under a renewed lease, retries transient failures with exponential backoff, and marks
//! resources `*_FAILED` when an operation is given up. Also the mservice heartbeat.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

use crate::app::AppState;
use crate::db::operations::{self as odb, OperationRow};
use crate::db::services as sdb;
use crate::db::status::{self as status, Transition};
use crate::domain::operation::{OperationKind, backoff_ms};
use crate::driver::{Backend, DriverError};

/// Runs `concurrency` workers until `shutdown` flips to true.
pub async fn run(
    app: AppState,
    driver: Arc<dyn Backend>,
    worker_id: String,
    mut shutdown: watch::Receiver<bool>,
) {
    let n = app.config.operations.concurrency;
    let mut tasks = Vec::with_capacity(n + 1);
    tasks.push(tokio::spawn(listen(app.clone(), shutdown.clone())));
    for i in 0..n {
        let app = app.clone();
        let driver = driver.clone();
        let id = format!("{worker_id}/{i}");
        let shutdown = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            worker_loop(app, driver, id, shutdown).await
        }));
    }
    let _ = shutdown.wait_for(|stop| *stop).await;
    for t in tasks {
        let _ = t.await;
    }
}

/// Wakes this replica's workers whenever any replica records (or hands back) an operation:
/// PostgreSQL `LISTEN` on the queue's channel. While the listening connection is down, the
/// workers fall back to their safety poll.
pub async fn listen(app: AppState, shutdown: watch::Receiver<bool>) {
    crate::db::events::follow(
        &app.pool,
        &[odb::CHANNEL],
        "operation queue",
        shutdown,
        |e| {
            // On `Listening` too: something may have been recorded while nobody listened.
            if e != crate::db::events::Event::Lost {
                app.work_ready.notify_waiters();
            }
        },
    )
    .await;
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
                let span = tracing::info_span!("operation", id = op.id, kind = %op.kind,
                    cluster = %op.cluster_uuid, attempt = op.attempts,
                    request_id = op.request_id.as_deref().unwrap_or(""));
                execute(&app, driver.as_ref(), &id, op, &mut shutdown)
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
enum Run {
    Finished(Result<(), DriverError>),
    /// Another replica took the operation over after our lease ran out.
    LeaseLost,
    /// This replica is stopping.
    Interrupted,
}

async fn execute(
    app: &AppState,
    driver: &dyn Backend,
    worker: &str,
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
                let reason = format!("The request's token cannot be used by this replica: {e}");
                tracing::error!(error = %e, "unsealing the caller's token failed");
                crate::telemetry::operation_outcome(&op.kind, "failed");
                if let Err(e) = give_up(app, &op, worker, &reason).await {
                    tracing::error!(error = %e, "recording the failure failed");
                }
                return;
            }
            None => None,
        },
    };
    let run = {
        let work = driver.execute(&app.pool, &op, caller.as_ref());
        tokio::pin!(work);
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
        loop {
            tokio::select! {
                r = &mut work => break Run::Finished(r),
                _ = ticker.tick() => {
                    match odb::renew(&app.pool, op.id, worker, cfg.lease_secs).await {
                        Ok(true) => {}
                        Ok(false) => break Run::LeaseLost,
                        Err(e) => tracing::warn!(error = %e, "renewing the lease failed"),
                    }
                }
                _ = stopping(shutdown) => break Run::Interrupted,
            }
        }
    };
    let counted = match &run {
        Run::Finished(Ok(())) => "done",
        Run::Finished(Err(DriverError::Transient(_))) if op.attempts < cfg.max_attempts => "retry",
        Run::Finished(Err(DriverError::Deferred { .. })) => "deferred",
        Run::Finished(Err(_)) => "failed",
        Run::LeaseLost => "lease_lost",
        Run::Interrupted => "interrupted",
    };
    crate::telemetry::operation_outcome(&op.kind, counted);
    let outcome = match run {
        Run::Finished(Ok(())) => odb::finish(&app.pool, op.id, worker).await.map(|held| {
            driver.finished(&op);
            if !held {
                tracing::warn!("finished after the lease was lost; the new holder decides");
            }
        }),
        Run::Finished(Err(DriverError::Transient(e))) if op.attempts < cfg.max_attempts => {
            let delay = backoff_ms(cfg.retry_base_ms, op.attempts);
            tracing::warn!(error = %e, delay_ms = delay, "attempt failed, will retry");
            odb::retry_later(&app.pool, op.id, worker, &e, delay)
                .await
                .map(|_| ())
        }
        Run::Finished(Err(DriverError::Deferred { reason, retry_ms })) => {
            tracing::info!(reason = %reason, delay_ms = retry_ms, "waiting for the management cluster");
            odb::defer(&app.pool, op.id, worker, &reason, retry_ms)
                .await
                .map(|_| ())
        }
        Run::Finished(Err(e)) => {
            tracing::error!(error = %e, "operation failed for good");
            give_up(app, &op, worker, &e.to_string()).await
        }
        Run::LeaseLost => {
            tracing::warn!("lease lost to another replica; abandoning this attempt");
            Ok(())
        }
        Run::Interrupted => {
            tracing::info!("shutting down; handing the operation back to the queue");
            odb::release(&app.pool, op.id, worker).await.map(|_| ())
        }
    };
    if let Err(e) = outcome {
        tracing::error!(error = %e, "recording the outcome failed; the lease will expire and the operation rerun");
    }
}

async fn give_up(
    app: &AppState,
    op: &OperationRow,
    worker: &str,
    reason: &str,
) -> Result<(), crate::db::DbError> {
    let mut tx = app.pool.begin().await?;
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
