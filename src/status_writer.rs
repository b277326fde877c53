//! The status writer: turns what the watchers observed of a management cluster's objects
//! (`capi::watch::Observer`, evaluated by `capi::status`) into Magnum statuses in Postgres, one
//! replica per management cluster at a time (an advisory lock). With the worker, the only writer
//! of cluster rows after a request: the backends report, they write nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::capi::status::{self, ClusterState, NodegroupState};
use crate::capi::watch::Observer;
use crate::db::DbResult;
use crate::db::clusters::{self as cdb, DriverFacts};
use crate::db::nodegroups as ndb;
use crate::db::status::{Transition, write as write_status};
use crate::domain::operation::OperationKind;
use crate::domain::status::Status;

/// Operations whose failure CAPI converging does not undo: the cluster stays `UPDATE_FAILED`
/// until the next operation.
fn final_failures() -> Vec<&'static str> {
    OperationKind::ALL
        .into_iter()
        .filter(|k| k.failure_is_final())
        .map(OperationKind::as_str)
        .collect()
}

/// What the operation queue and the credential check say of a cluster (see [`state_of`]).
#[derive(Debug, Default, sqlx::FromRow)]
struct Queue {
    /// An operation is pending or running.
    open: bool,
    /// When its last operation was recorded.
    last: Option<DateTime<Utc>>,
    /// Its last operation failed, and that failure is final.
    final_failure: Option<bool>,
    credential_problem: Option<String>,
}

/// The queue's view of each of `clusters`, in one statement (`uuid` first in each row).
const QUEUE_OF: &str = "SELECT c.uuid, COALESCE(o.open, false) AS open, o.last,
        (SELECT state = 'failed' AND kind = ANY($2) FROM operation
          WHERE cluster_uuid = c.uuid ORDER BY id DESC LIMIT 1) AS final_failure,
        c.credential_problem
   FROM cluster c
   LEFT JOIN LATERAL (SELECT bool_or(state IN ('pending', 'running')) AS open,
                             max(created_at) AS last
                        FROM operation WHERE cluster_uuid = c.uuid) o ON true
  WHERE c.uuid = ANY($1)";

/// The cluster state [`status::evaluate`] reads, from the cluster's row, its nodegroups and
/// its queue.
fn state_of(
    cluster: &cdb::ClusterRow,
    ngs: &[ndb::NodegroupRow],
    queue: Queue,
    timeouts: &Timeouts,
) -> ClusterState {
    let status: Status = cluster.status.parse().unwrap_or(Status::CreateInProgress);
    let deadline = match status {
        Status::CreateInProgress => Some(
            cluster.created_at
                + chrono::Duration::minutes(i64::from(cluster.create_timeout.unwrap_or(60).max(1))),
        ),
        Status::UpdateInProgress => queue.last.map(|t| {
            t + chrono::Duration::from_std(timeouts.update).unwrap_or(chrono::Duration::hours(1))
        }),
        _ => None,
    };
    ClusterState {
        status,
        status_reason: cluster.status_reason.clone(),
        nodegroups: ngs
            .iter()
            .map(|n| NodegroupState {
                uuid: n.uuid,
                is_master: n.is_master(),
                status: n.status.as_deref().and_then(|s| s.parse().ok()),
                status_reason: n.status_reason.clone(),
                node_count: n.node_count,
                addresses: n.node_addresses.0.clone(),
            })
            .collect(),
        operation_open: queue.open,
        final_failure: queue.final_failure.unwrap_or(false),
        deadline,
        api_address: cluster.api_address.clone(),
        coe_version: cluster.coe_version.clone(),
        health_status: cluster.health_status.clone(),
        health_status_reason: cluster.health_status_reason.0.clone(),
        credential_problem: queue.credential_problem,
        addon_install_timeout: chrono::Duration::from_std(timeouts.addon_install)
            .unwrap_or(chrono::Duration::minutes(30)),
        openstack_retry_grace: chrono::Duration::from_std(timeouts.openstack_retry)
            .unwrap_or(chrono::Duration::minutes(2)),
        kube_end_of_life: timeouts.kube_end_of_life.clone(),
    }
}

/// Which cluster state Postgres has, for [`status::evaluate`] (in the writing transaction).
async fn load_state(
    tx: &mut sqlx::PgConnection,
    cluster: &cdb::ClusterRow,
    timeouts: &Timeouts,
) -> DbResult<ClusterState> {
    let ngs = ndb::of_cluster(&mut *tx, cluster.uuid).await?;
    let queue = queues(&mut *tx, &[cluster.uuid])
        .await?
        .remove(&cluster.uuid)
        .unwrap_or_default();
    Ok(state_of(cluster, &ngs, queue, timeouts))
}

/// [`Queue`] of each of `clusters` that exists.
async fn queues(
    conn: &mut sqlx::PgConnection,
    clusters: &[Uuid],
) -> DbResult<HashMap<Uuid, Queue>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        uuid: Uuid,
        #[sqlx(flatten)]
        queue: Queue,
    }
    let rows: Vec<Row> = sqlx::query_as(QUEUE_OF)
        .bind(clusters)
        .bind(final_failures())
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.into_iter().map(|r| (r.uuid, r.queue)).collect())
}

/// The state of each of `clusters` this writer has anything to write for (its management
/// cluster's, not read-only imports), read without locks in three statements: what a pass
/// evaluates first, so only the clusters with something to write take a transaction.
async fn load_states(
    pool: &PgPool,
    member: &str,
    clusters: &[Uuid],
    timeouts: &Timeouts,
) -> DbResult<HashMap<Uuid, ClusterState>> {
    let rows = cdb::of_management_cluster_among(pool, member, clusters).await?;
    let ours: Vec<Uuid> = rows.iter().map(|r| r.uuid).collect();
    let mut conn = pool.acquire().await?;
    let mut ngs: HashMap<Uuid, Vec<ndb::NodegroupRow>> = HashMap::new();
    for n in ndb::of_clusters(&mut *conn, &ours).await? {
        ngs.entry(n.cluster_id).or_default().push(n);
    }
    let mut queues = queues(&mut conn, &ours).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let queue = queues.remove(&r.uuid).unwrap_or_default();
            let ng = ngs.get(&r.uuid).map_or(&[][..], Vec::as_slice);
            (r.uuid, state_of(r, ng, queue, timeouts))
        })
        .collect())
}

/// The time limits the status writer applies, how long it gathers notifications, and the
/// dates upstream support of each Kubernetes minor ends.
#[derive(Debug, Clone)]
pub struct Timeouts {
    /// An update, from its last operation's start, before `UPDATE_FAILED` (`[capi]
    /// update_timeout_mins`).
    pub update: Duration,
    /// An add-on installing or upgrading before it counts as failed (`[capi]
    /// addon_install_timeout_secs`).
    pub addon_install: Duration,
    /// CAPO retrying an OpenStack error before it counts as the cluster's failure (`[capi]
    /// openstack_retry_grace_secs`).
    pub openstack_retry: Duration,
    /// When upstream support of each Kubernetes minor ends (`[upgrades]
    /// kubernetes_end_of_life`).
    pub kube_end_of_life: Arc<crate::domain::kube_support::EndOfLife>,
    /// How long other transactions' notifications are gathered into one pass after the first
    /// of them (`[capi] status_gather_ms`).
    pub notified_gather: Duration,
}

impl Timeouts {
    pub fn of(
        config: &crate::config::CapiConfig,
        upgrades: &crate::config::UpgradesConfig,
    ) -> Self {
        Timeouts {
            update: Duration::from_secs(config.update_timeout_mins.max(1) * 60),
            addon_install: Duration::from_secs(config.addon_install_timeout_secs),
            openstack_retry: Duration::from_secs(config.openstack_retry_grace_secs),
            // Checked when the configuration was read; a table built in code that is not one
            // checks nothing.
            kube_end_of_life: Arc::new(upgrades.end_of_life().unwrap_or_default()),
            notified_gather: Duration::from_millis(config.status_gather_ms),
        }
    }
}

/// What writing one cluster's evaluation came to.
#[derive(Debug, Clone, Copy, Default)]
pub struct Synced {
    /// The cluster's new status, when it changed.
    pub status: Option<Status>,
    /// When to evaluate it again though nothing changes (an add-on would time out).
    pub recheck_at: Option<DateTime<Utc>>,
    /// Another transaction held the cluster's row: nothing was evaluated; try again shortly.
    pub held: bool,
}

/// Evaluates one cluster and writes what changed, under the cluster's row lock (so an API
/// write that starts a new operation is never overwritten by a stale conclusion). A row another
/// transaction holds is not waited for ([`Synced::held`]): the writer serves every cluster of
/// its management cluster, and one held row must not stop the others' statuses.
pub async fn sync_cluster(
    pool: &PgPool,
    observer: &Observer,
    member: &str,
    cluster: Uuid,
    timeouts: &Timeouts,
) -> DbResult<Synced> {
    let mut tx = pool.begin().await?;
    let row = match cdb::lock_unless_held(&mut tx, cluster).await? {
        cdb::Locked::Row(row) => row,
        cdb::Locked::Gone => return Ok(Synced::default()),
        cdb::Locked::Held => {
            return Ok(Synced {
                held: true,
                ..Synced::default()
            });
        }
    };
    // Another management cluster's: its own writer concludes from its own observer.
    if row.management_cluster_name() != member {
        return Ok(Synced::default());
    }
    // Imported read-only from Magnum: nothing on a management cluster speaks for it.
    if crate::db::imports::is_read_only(&mut *tx, cluster).await? {
        return Ok(Synced::default());
    }
    let state = load_state(&mut tx, &row, timeouts).await?;
    let ev = status::evaluate(&observer.observed(cluster), &state, Utc::now());
    let recheck_at = ev.recheck_at;
    if ev.is_noop() {
        return Ok(Synced {
            recheck_at,
            ..Synced::default()
        });
    }
    if ev.api_address.is_some() || ev.coe_version.is_some() {
        cdb::set_driver_facts(
            &mut *tx,
            cluster,
            &DriverFacts {
                api_address: ev.api_address.clone(),
                coe_version: ev.coe_version.clone(),
                container_version: None,
            },
        )
        .await?;
    }
    if let Some((h, reason)) = &ev.health {
        cdb::set_health(&mut *tx, cluster, Some(h), reason).await?;
    }
    for ng in &ev.nodegroups {
        if let Some((st, reason)) = &ng.status {
            ndb::set_status(&mut *tx, ng.uuid, st.as_str(), reason.as_deref()).await?;
        }
        if let Some(a) = &ng.addresses {
            ndb::set_addresses(&mut *tx, ng.uuid, a).await?;
        }
        if let Some(n) = ng.node_count {
            ndb::set_node_count(&mut *tx, ng.uuid, n).await?;
        }
    }
    let new_status = ev.status.as_ref().map(|(s, _)| *s);
    if let Some((st, reason)) = &ev.status {
        write_status(
            &mut tx,
            cluster,
            Transition::Observed {
                status: *st,
                reason: reason.as_deref(),
            },
        )
        .await?;
        tracing::info!(cluster = %cluster, status = st.as_str(), reason = reason.as_deref().unwrap_or(""), "cluster status from CAPI");
    }
    tx.commit().await?;
    Ok(Synced {
        status: new_status,
        recheck_at,
        held: false,
    })
}

/// Advisory-lock key of the status writer (one replica writes statuses at a time).
const WRITER_LOCK: i64 = 0x6d61_676e_756d_0001;

/// The status-writer lock of management cluster `name`: [`WRITER_LOCK`] for the unnamed one,
/// else derived from the name (FNV-1a), so each has its own writer.
pub fn writer_lock(name: &str) -> i64 {
    if name.is_empty() {
        return WRITER_LOCK;
    }
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    WRITER_LOCK ^ i64::from_ne_bytes(hash.to_ne_bytes())
}

/// Which management cluster a writer writes for, and what its probes found.
#[derive(Debug, Clone, Default)]
pub struct WriterScope {
    /// `""`: the unnamed one.
    pub name: String,
    pub reach: Arc<crate::capi::reach::Reach>,
}

/// The channel a change to a cluster row or to one of its operations notifies (payload: the
/// cluster's uuid; triggers of migration `cluster_change_events`).
pub const CLUSTER_CHANNEL: &str = "magnum_capi_clusters";

/// Called with every cluster that reached a new status (e.g. to collect superseded templates).
pub type OnStatus = Arc<dyn Fn(Uuid, Status) + Send + Sync>;

type Pending = HashMap<Uuid, tokio::time::Instant>;
type Rechecks = HashMap<Uuid, DateTime<Utc>>;

/// Drains the observer's change feed into Postgres while this replica holds the writer lock of
/// its management cluster (`scope`).
///
/// Nothing runs while nothing happens: the writer wakes on the watchers' changes, on
/// `magnum_capi_clusters` notifications (any replica's cluster or operation change, gathered for
/// `[capi] status_gather_ms` into one pass), on a change of the management cluster's reachability, at
/// the next in-progress deadline and when an add-on still in progress would pass its timeout;
/// `safety` is only the pace of the re-check of in-progress clusters and of the lock's
/// connection when no event came. A replica without the lock waits for it in PostgreSQL
/// (`pg_advisory_lock`), so it takes over as soon as the holder's session ends.
#[expect(
    clippy::too_many_arguments,
    reason = "the writer's whole setup, passed once"
)]
pub async fn run_writer(
    pool: PgPool,
    scope: WriterScope,
    observer: Arc<Observer>,
    mut dirty: mpsc::UnboundedReceiver<Uuid>,
    timeouts: Timeouts,
    safety: Duration,
    on_status: OnStatus,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut w = Writer {
        key: writer_lock(&scope.name),
        shown: crate::domain::placement::shown(&scope.name).to_string(),
        pool,
        scope,
        observer,
        timeouts,
        safety,
        on_status,
        leader: None,
        acquiring: None,
        events: None,
        pending: HashMap::new(),
        rechecks: HashMap::new(),
        wake_at: tokio::time::Instant::now() + safety,
        retry_lock_at: None,
        marked_down: None,
        fresh: false,
        held: false,
        gather_until: None,
        urgent: false,
    };
    loop {
        w.start_waiting_for_the_lock();
        let Some(woke) = w.next_wake(&mut dirty, &mut shutdown).await else {
            return;
        };
        let mut rescan = w.woken(woke);
        // Take everything queued so far, then write: the watchers' changes, and the
        // notifications that have already arrived (a burst of them, such as a bulk insert's,
        // is one pass, not a pass each).
        while let Ok(u) = dirty.try_recv() {
            rescan |= w.woken(Wake::Changed(u));
        }
        for _ in 0..NOTIFICATIONS_PER_WAKE {
            let Some(Ok(Some(n))) = w.events.as_mut().and_then(|l| l.try_recv().now_or_never())
            else {
                break;
            };
            rescan |= w.woken(Wake::Notified(Ok(Some(n))));
        }
        crate::telemetry::status_writer_of(&w.scope.name, w.leader.is_some());
        if w.leader.is_none() {
            w.pending.clear();
            w.gather_until = None;
            continue;
        }
        // Only other transactions' commits so far: more are gathered for a moment, so a
        // stream of them (every create commits, each batch notifies) is a pass every
        // `notified_gather`, not one per commit.
        if !rescan
            && !w.urgent
            && w.gather_until
                .is_some_and(|t| t > tokio::time::Instant::now())
        {
            continue;
        }
        w.gather_until = None;
        w.urgent = false;
        if rescan && !w.still_leading().await {
            continue;
        }
        w.record_reachability().await;
        for u in take_due(&mut w.rechecks, Utc::now()) {
            w.queue(u);
        }
        if rescan {
            w.queue_in_progress().await;
        }
        // Unreachable: nothing new to conclude; what it last showed stays in Postgres.
        if !w.observer.synced() || w.marked_down.is_some() || (w.pending.is_empty() && !rescan) {
            continue;
        }
        w.write_pending().await;
        w.schedule_next_wake().await;
    }
}

type Acquiring = std::pin::Pin<Box<dyn Future<Output = DbResult<sqlx::PgConnection>> + Send>>;

/// What woke the status writer.
enum Wake {
    /// A watcher saw cluster `0` change.
    Changed(Uuid),
    /// The wait for the writer lock ended.
    Lock(DbResult<sqlx::PgConnection>),
    /// A `magnum_capi_clusters` notification (`Ok(None)`: the listening connection dropped).
    Notified(Result<Option<sqlx::postgres::PgNotification>, sqlx::Error>),
    /// The management cluster's reachability changed, or the lock's retry time came.
    Nudged,
    /// The safety poll or a deadline came.
    Timer,
    /// The notifications gathered since the first of them are to be written.
    Gathered,
}

/// The status writer's state between wake-ups.
struct Writer {
    pool: PgPool,
    scope: WriterScope,
    observer: Arc<Observer>,
    timeouts: Timeouts,
    safety: Duration,
    on_status: OnStatus,
    /// The connection holding the writer lock, while this replica leads.
    leader: Option<sqlx::PgConnection>,
    acquiring: Option<Acquiring>,
    events: Option<sqlx::postgres::PgListener>,
    /// Each cluster to write, with when its first unwritten change arrived (the delay metric).
    pending: Pending,
    /// Clusters to evaluate again at a time (an add-on in progress would time out then).
    rechecks: Rechecks,
    wake_at: tokio::time::Instant,
    retry_lock_at: Option<tokio::time::Instant>,
    key: i64,
    /// The management cluster's name as logs and reasons show it.
    shown: String,
    /// The reason written into its clusters' health while it is unreachable.
    marked_down: Option<String>,
    /// Just took the lock: what a previous writer recorded about reachability is redone.
    fresh: bool,
    /// The last pass left a cluster pending because another transaction held its row.
    held: bool,
    /// Only notifications are pending: they are written then, with those arriving meanwhile.
    gather_until: Option<tokio::time::Instant>,
    /// Something other than a notification is pending (a watcher's change, the lock, the
    /// reachability): written at once, with whatever was gathered.
    urgent: bool,
}

impl Writer {
    fn queue(&mut self, cluster: Uuid) {
        self.pending
            .entry(cluster)
            .or_insert_with(tokio::time::Instant::now);
    }

    /// Starts waiting for the writer lock unless leading, waiting already or backing off.
    fn start_waiting_for_the_lock(&mut self) {
        let now = tokio::time::Instant::now();
        if self.leader.is_none()
            && self.acquiring.is_none()
            && self.retry_lock_at.is_none_or(|t| t <= now)
        {
            self.acquiring = Some(Box::pin(wait_lead(self.pool.clone(), self.key)));
        }
    }

    /// Waits for the next event; `None` when the writer should stop.
    async fn next_wake(
        &mut self,
        dirty: &mut mpsc::UnboundedReceiver<Uuid>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Wake> {
        let Writer {
            acquiring,
            events,
            scope,
            leader,
            wake_at,
            retry_lock_at,
            gather_until,
            ..
        } = self;
        let leading = leader.is_some();
        tokio::select! {
            got = dirty.recv() => got.map(Wake::Changed),
            got = async {
                match acquiring.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            } => Some(Wake::Lock(got)),
            n = async {
                match events.as_mut() {
                    Some(l) => l.try_recv().await,
                    None => std::future::pending().await,
                }
            } => Some(Wake::Notified(n)),
            () = scope.reach.changed() => Some(Wake::Nudged),
            _ = tokio::time::sleep_until(*wake_at), if leading => Some(Wake::Timer),
            _ = tokio::time::sleep_until(gather_until.unwrap_or_else(tokio::time::Instant::now)),
                if gather_until.is_some() => Some(Wake::Gathered),
            _ = tokio::time::sleep_until(retry_lock_at.unwrap_or_else(tokio::time::Instant::now)),
                if retry_lock_at.is_some() => Some(Wake::Nudged),
            _ = shutdown.changed() => None,
        }
    }

    /// Takes in what woke the writer; whether everything in progress should be looked at again.
    fn woken(&mut self, woke: Wake) -> bool {
        match woke {
            Wake::Changed(u) => {
                self.urgent = true;
                self.queue(u);
            }
            Wake::Lock(got) => {
                self.acquiring = None;
                match got {
                    Ok(conn) => {
                        self.urgent = true;
                        tracing::info!(management_cluster = %self.shown, "this replica writes cluster statuses");
                        self.leader = Some(conn);
                        self.retry_lock_at = None;
                        self.marked_down = None;
                        self.fresh = true;
                        for u in self.observer.clusters() {
                            self.queue(u);
                        }
                        return true;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "waiting for the status-writer lock failed; retrying");
                        self.retry_lock_at =
                            Some(tokio::time::Instant::now() + Duration::from_secs(5));
                    }
                }
            }
            Wake::Notified(Ok(Some(n))) => {
                if let Ok(u) = n.payload().parse::<Uuid>() {
                    self.queue(u);
                    let gather = self.timeouts.notified_gather;
                    self.gather_until
                        .get_or_insert_with(|| tokio::time::Instant::now() + gather);
                }
            }
            // The listening connection dropped (it reconnects on the next call): what was
            // notified meanwhile is lost, so look at everything in progress.
            Wake::Notified(Ok(None)) => return true,
            Wake::Notified(Err(e)) => {
                tracing::warn!(error = %e, "cluster change notifications lost");
                self.events = None;
                return true;
            }
            Wake::Nudged => self.urgent = true,
            Wake::Gathered => {}
            Wake::Timer => return true,
        }
        false
    }

    /// Whether the lock's connection still answers (if not, this replica no longer leads); also
    /// listens for change notifications again if that had stopped.
    async fn still_leading(&mut self) -> bool {
        let Some(conn) = self.leader.as_mut() else {
            return false;
        };
        if sqlx::query("SELECT 1").execute(&mut *conn).await.is_err() {
            tracing::warn!("lost the status-writer lock's connection");
            self.leader = None;
            self.events = None;
            return false;
        }
        if self.events.is_none() {
            self.events = listen_for_changes(&self.pool).await;
        }
        true
    }

    /// Writes the management cluster's reachability into its clusters' health when it changed
    /// (or when the lock was just taken); back from unreachable, everything is evaluated afresh.
    async fn record_reachability(&mut self) {
        let shown = &self.shown;
        let down = self.scope.reach.down().map(|(why, _)| {
            format!(
                "The management cluster {shown} is unreachable ({why}); the cluster's status is \
                 the last one seen"
            )
        });
        if !self.fresh && down.is_some() == self.marked_down.is_some() {
            return;
        }
        match cdb::mark_unreachable(&self.pool, &self.scope.name, down.as_deref()).await {
            Ok(clusters) => {
                self.marked_down = down;
                self.fresh = false;
                if self.marked_down.is_none() {
                    for u in clusters {
                        self.queue(u);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "recording the management cluster's reachability failed")
            }
        }
    }

    /// Queues every cluster of this management cluster with an operation in progress.
    async fn queue_in_progress(&mut self) {
        match cdb::of_management_cluster(&self.pool, &self.scope.name, IN_PROGRESS).await {
            Ok(ids) => {
                for u in ids {
                    self.queue(u);
                }
            }
            Err(e) => tracing::warn!(error = %e, "listing in-progress clusters failed"),
        }
    }

    /// Writes what changed for each pending cluster, noting when each wants to be evaluated
    /// again (`rechecks`); stops at the first failure, which stays pending with every cluster not
    /// reached; a cluster whose row another transaction holds stays pending and the rest go on.
    /// Only the clusters whose evaluation changes something take a transaction.
    async fn write_pending(&mut self) {
        // The queue's states are read first, in a few statements per chunk, and evaluated
        // without locks: the clusters there is nothing to write for (no row here: objects of
        // another deployment or of a cluster already purged; another management cluster's; a
        // read-only import; or an evaluation that changes nothing) cost no transaction. A
        // watch relisting thousands of clusters, a takeover or a bulk insert (an import from
        // Magnum notifies every row) would otherwise cost a transaction each, ahead of every
        // fresh change. One that changes something is evaluated again under its row's lock: a
        // write in between notified the writer, and is seen there.
        let queued: Vec<Uuid> = self.pending.keys().copied().collect();
        let mut states = HashMap::with_capacity(queued.len());
        for chunk in queued.chunks(STATES_PER_READ) {
            match load_states(&self.pool, &self.scope.name, chunk, &self.timeouts).await {
                Ok(s) => states.extend(s),
                Err(e) => {
                    tracing::warn!(error = %e, "reading which clusters to write failed; will retry");
                    return;
                }
            }
        }
        let now = Utc::now();
        self.held = false;
        let mut queue = std::mem::take(&mut self.pending).into_iter();
        for (u, since) in queue.by_ref() {
            let Some(state) = states.remove(&u) else {
                self.rechecks.remove(&u);
                continue;
            };
            let ev = status::evaluate(&self.observer.observed(u), &state, now);
            if ev.is_noop() {
                match ev.recheck_at {
                    Some(at) => self.rechecks.insert(u, at),
                    None => self.rechecks.remove(&u),
                };
                continue;
            }
            match sync_cluster(
                &self.pool,
                &self.observer,
                &self.scope.name,
                u,
                &self.timeouts,
            )
            .await
            {
                Ok(synced) if synced.held => {
                    self.pending.insert(u, since);
                    self.held = true;
                }
                Ok(synced) => {
                    match synced.recheck_at {
                        Some(at) => self.rechecks.insert(u, at),
                        None => self.rechecks.remove(&u),
                    };
                    if let Some(st) = synced.status {
                        crate::telemetry::status_delay(since.elapsed());
                        (self.on_status)(u, st);
                    }
                }
                Err(e) => {
                    tracing::warn!(cluster = %u, error = %e, "writing a status failed; will retry");
                    self.pending.insert(u, since);
                    break;
                }
            }
        }
        // After a failure, what was not reached stays queued too.
        self.pending.extend(queue);
    }

    /// When to wake without an event: the safety poll (short without notifications), the next
    /// in-progress deadline or add-on re-check, or soon when a write failed.
    async fn schedule_next_wake(&mut self) {
        let now = tokio::time::Instant::now();
        let poll = if self.events.is_some() {
            self.safety
        } else {
            self.safety.min(Duration::from_secs(2))
        };
        self.wake_at = now + poll;
        let recheck = self.rechecks.values().min().copied();
        match next_deadline(&self.pool, self.timeouts.update)
            .await
            .map(|d| d.into_iter().chain(recheck).min())
        {
            Ok(Some(d)) => {
                // A second past it, so the evaluation finds it passed.
                let left =
                    (d - Utc::now()).to_std().unwrap_or(Duration::ZERO) + Duration::from_secs(1);
                self.wake_at = self.wake_at.min(now + left);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "reading the next in-progress deadline failed"),
        }
        if !self.pending.is_empty() {
            // A row was held by another transaction (one that writes it briefly), or a write
            // failed: try again soon.
            let retry = if self.held {
                HELD_ROW_RETRY
            } else {
                Duration::from_secs(1)
            };
            self.wake_at = self.wake_at.min(now + retry);
        }
    }
}

/// How many notifications that have already arrived a wake-up takes in at most.
const NOTIFICATIONS_PER_WAKE: usize = 10_000;

/// How many queued clusters' states one read of a pass takes in (three statements each).
const STATES_PER_READ: usize = 1_000;

/// How soon a cluster whose row another transaction held is evaluated again: API writes hold a
/// row for milliseconds, and the status should follow within the second it promises.
const HELD_ROW_RETRY: Duration = Duration::from_millis(100);

/// The clusters whose re-evaluation time has come (removed from `rechecks`).
fn take_due(rechecks: &mut Rechecks, now: DateTime<Utc>) -> Vec<Uuid> {
    let due: Vec<Uuid> = rechecks
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(u, _)| *u)
        .collect();
    for u in &due {
        rechecks.remove(u);
    }
    due
}

/// `LISTEN` on [`CLUSTER_CHANNEL`]; `None` (with a warning) when it cannot.
async fn listen_for_changes(pool: &PgPool) -> Option<sqlx::postgres::PgListener> {
    let listening = async {
        let mut l = sqlx::postgres::PgListener::connect_with(pool).await?;
        l.listen(CLUSTER_CHANNEL).await?;
        Ok::<_, sqlx::Error>(l)
    }
    .await;
    listening
        .map_err(
            |e| tracing::warn!(error = %e, "cannot listen for cluster changes; polling meanwhile"),
        )
        .ok()
}

/// Takes the status-writer lock if no other replica holds it: the connection holding it, which
/// keeps the lock for as long as it lives.
pub async fn try_lead(pool: &PgPool) -> Option<sqlx::PgConnection> {
    try_lead_key(pool, WRITER_LOCK).await
}

/// [`try_lead`] for the writer lock `key` (see [`writer_lock`]).
pub async fn try_lead_key(pool: &PgPool, key: i64) -> Option<sqlx::PgConnection> {
    let mut conn = pool.acquire().await.ok()?.detach();
    let (got,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut conn)
        .await
        .ok()?;
    // Keep the connection (outside the pool): the lock lives as long as its session.
    got.then_some(conn)
}

/// Waits in PostgreSQL until this replica holds the status-writer lock `key` (granted when the
/// holder's session ends); the connection holding it, outside the pool.
async fn wait_lead(pool: PgPool, key: i64) -> DbResult<sqlx::PgConnection> {
    let mut conn = pool.acquire().await?.detach();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(key)
        .execute(&mut conn)
        .await?;
    Ok(conn)
}

/// The statuses the writer re-checks.
const IN_PROGRESS: &[&str] = &["CREATE_IN_PROGRESS", "UPDATE_IN_PROGRESS"];

/// The earliest deadline of an in-progress cluster ([`load_state`]'s): its create timeout, or
/// `update_timeout` after its last operation.
async fn next_deadline(pool: &PgPool, update_timeout: Duration) -> DbResult<Option<DateTime<Utc>>> {
    Ok(sqlx::query_scalar(NEXT_DEADLINE)
        .bind(update_timeout.as_secs_f64())
        .fetch_one(pool)
        .await?)
}

/// [`next_deadline`]'s statement (`$1`: the update timeout in seconds); it runs after every
/// pass, so it reads the in-progress rows through their index (migration
/// `index_in_progress_clusters`), never every cluster.
pub const NEXT_DEADLINE: &str = "SELECT min(d) FROM (
           SELECT created_at + make_interval(mins => GREATEST(COALESCE(create_timeout, 60), 1)) AS d
             FROM cluster WHERE status = 'CREATE_IN_PROGRESS'
              AND NOT EXISTS (SELECT 1 FROM imported_cluster i WHERE i.cluster_uuid = cluster.uuid
                                AND i.state = 'read_only')
           UNION ALL
           SELECT (SELECT max(o.created_at) FROM operation o WHERE o.cluster_uuid = c.uuid)
                  + make_interval(secs => $1)
             FROM cluster c WHERE c.status = 'UPDATE_IN_PROGRESS'
              AND NOT EXISTS (SELECT 1 FROM imported_cluster i WHERE i.cluster_uuid = c.uuid
                                AND i.state = 'read_only')) x";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recheck_is_due_once_its_time_has_come() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let now = Utc::now();
        let mut rechecks: Rechecks = HashMap::from([
            (a, now - chrono::Duration::seconds(1)),
            (b, now + chrono::Duration::minutes(5)),
        ]);
        assert_eq!(take_due(&mut rechecks, now), vec![a]);
        assert_eq!(rechecks.keys().collect::<Vec<_>>(), vec![&b]);
        assert!(take_due(&mut rechecks, now).is_empty());
    }
}
