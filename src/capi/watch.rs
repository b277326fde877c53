//! Watching the management cluster: one `kube::runtime` watcher per kind (Cluster,
//! KubeadmControlPlane, MachineDeployment, Machine, OpenStackCluster) across namespaces,
//! selected by our cluster-uuid label, feeding an in-memory index per Magnum cluster (plus
//! CAAPH's HelmReleaseProxies, which carry only the CAPI cluster name: indexed by namespace and
//! cluster name, joined to the Magnum cluster through its `Cluster`); and the status writer
//! that turns index changes into Postgres statuses, one replica at a time.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::{Map, Value};
use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use super::apply::resource;
use super::status::{self, ClusterState, NodegroupState, Observed, Shared};
use super::{LABEL_CAPI_CLUSTER_NAME, LABEL_CLUSTER_UUID, LABEL_HELM_CHART_PROXY, kinds};
use crate::db::DbResult;
use crate::db::clusters::{self as cdb, DriverFacts};
use crate::db::nodegroups as ndb;
use crate::db::status::{Transition, write as write_status};
use crate::domain::operation::OperationKind;
use crate::domain::status::Status;

/// The kinds we watch, with the slot each fills in [`Observed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Cluster,
    OpenStackCluster,
    ControlPlane,
    MachineDeployment,
    Machine,
    /// CAAPH's per-cluster release of an add-on (add-on health).
    HelmReleaseProxy,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Cluster,
        Kind::OpenStackCluster,
        Kind::ControlPlane,
        Kind::MachineDeployment,
        Kind::Machine,
        Kind::HelmReleaseProxy,
    ];

    /// The label the watcher selects by: ours, or CAAPH's for its release proxies.
    fn selector(self) -> &'static str {
        match self {
            Kind::HelmReleaseProxy => LABEL_HELM_CHART_PROXY,
            _ => LABEL_CLUSTER_UUID,
        }
    }

    pub fn gvk(self) -> kinds::Gvk {
        match self {
            Kind::Cluster => kinds::CLUSTER,
            Kind::OpenStackCluster => kinds::OPENSTACK_CLUSTER,
            Kind::ControlPlane => kinds::CONTROL_PLANE,
            Kind::MachineDeployment => kinds::MACHINE_DEPLOYMENT,
            Kind::Machine => kinds::MACHINE,
            Kind::HelmReleaseProxy => kinds::HELM_RELEASE_PROXY,
        }
    }
}

/// The part of an object status evaluation reads (managedFields, annotations but the
/// autoscaler's bounds, and most of the spec are dropped: 10,000 clusters' worth of full objects would not fit comfortably).
fn prune(obj: &DynamicObject) -> Shared {
    let mut meta = Map::new();
    let m = &obj.metadata;
    meta.insert(
        "name".into(),
        Value::from(m.name.clone().unwrap_or_default()),
    );
    if let Some(ns) = &m.namespace {
        meta.insert("namespace".into(), Value::from(ns.clone()));
    }
    if let Some(l) = &m.labels {
        meta.insert("labels".into(), serde_json::to_value(l).unwrap_or_default());
    }
    if let Some(g) = m.generation {
        meta.insert("generation".into(), Value::from(g));
    }
    // A CA rotation waits for machines created after its rollout marker.
    if let Some(t) = &m.creation_timestamp {
        meta.insert(
            "creationTimestamp".into(),
            serde_json::to_value(t).unwrap_or_default(),
        );
    }
    if m.deletion_timestamp.is_some() {
        meta.insert("deletionTimestamp".into(), Value::from("set"));
    }
    // An autoscaled MachineDeployment: its replicas are the autoscaler's (node_count follows).
    if let Some(min) = m
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::values::ANNOTATION_AUTOSCALER_MIN))
    {
        let mut ann = Map::new();
        ann.insert(
            super::values::ANNOTATION_AUTOSCALER_MIN.into(),
            Value::from(min.clone()),
        );
        meta.insert("annotations".into(), Value::Object(ann));
    }
    let mut spec = Map::new();
    if let Some(s) = obj.data.get("spec").and_then(Value::as_object) {
        for k in ["replicas", "version", "controlPlaneEndpoint", "providerID"] {
            if let Some(v) = s.get(k) {
                spec.insert(k.into(), v.clone());
            }
        }
    }
    let mut out = Map::new();
    out.insert("metadata".into(), Value::Object(meta));
    out.insert("spec".into(), Value::Object(spec));
    if let Some(st) = obj.data.get("status") {
        out.insert("status".into(), st.clone());
    }
    Shared::new(Value::Object(out))
}

fn cluster_uuid(obj: &DynamicObject) -> Option<Uuid> {
    obj.metadata
        .labels
        .as_ref()?
        .get(LABEL_CLUSTER_UUID)
        .and_then(|s| Uuid::parse_str(s).ok())
}

type Objects = BTreeMap<(Kind, String), Shared>;

/// A CAPI cluster by namespace and name.
type ClusterKey = (String, String);

#[derive(Default)]
struct Index {
    by_cluster: HashMap<Uuid, Objects>,
    /// Objects being relisted by a restarting watcher, per kind.
    relist: HashMap<Kind, Vec<(Uuid, String, Shared)>>,
    synced: HashSet<Kind>,
    /// The Magnum cluster of each CAPI cluster seen (from the `Cluster` objects).
    uuids: HashMap<ClusterKey, Uuid>,
    /// HelmReleaseProxies by CAPI cluster, then name.
    addons: HashMap<ClusterKey, BTreeMap<String, Shared>>,
    /// HelmReleaseProxies being relisted.
    addons_relist: Vec<(ClusterKey, String, Shared)>,
}

impl Index {
    /// The Magnum clusters of `keys` (those whose `Cluster` was seen).
    fn uuids_of<'a>(&self, keys: impl IntoIterator<Item = &'a ClusterKey>) -> Vec<Uuid> {
        keys.into_iter()
            .filter_map(|k| self.uuids.get(k).copied())
            .collect()
    }
}

/// Namespace and CAPI cluster name of a HelmReleaseProxy (CAAPH's cluster-name label).
fn addon_key(o: &DynamicObject) -> Option<(ClusterKey, String)> {
    let cluster = o.metadata.labels.as_ref()?.get(LABEL_CAPI_CLUSTER_NAME)?;
    Some((
        (o.metadata.namespace.clone()?, cluster.clone()),
        o.metadata.name.clone()?,
    ))
}

fn cluster_key(o: &DynamicObject) -> Option<ClusterKey> {
    Some((o.metadata.namespace.clone()?, o.metadata.name.clone()?))
}

/// How many changes the feed holds for a slow subscriber before it lags (a lagging worker
/// wakes every operation it parked, so nothing is missed).
const FEED_CAPACITY: usize = 4096;

/// The watchers' shared view, and the channel that tells the writer what changed.
pub struct Observer {
    index: Mutex<Index>,
    dirty: mpsc::UnboundedSender<Uuid>,
    /// Bumped on every change; waiters re-check when it moves.
    version: watch::Sender<u64>,
    /// Every cluster whose objects changed, for the worker to wake the operation it parked for
    /// that cluster (`crate::driver::Backend::changes`).
    feed: tokio::sync::broadcast::Sender<Uuid>,
    /// The change feeds of the other management clusters' observers (`Observer::link`): a
    /// touch reaches the cluster's own writer whichever observer it went through.
    peers: std::sync::OnceLock<Vec<mpsc::UnboundedSender<Uuid>>>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

impl Observer {
    /// A new observer and the receiving end of its change feed (for [`run_writer`]).
    pub fn new() -> (Arc<Observer>, mpsc::UnboundedReceiver<Uuid>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (version, _) = watch::channel(0);
        let (feed, _) = tokio::sync::broadcast::channel(FEED_CAPACITY);
        (
            Arc::new(Observer {
                index: Mutex::new(Index::default()),
                dirty: tx,
                version,
                feed,
                peers: std::sync::OnceLock::new(),
            }),
            rx,
        )
    }

    fn with_index<T>(&self, f: impl FnOnce(&mut Index) -> T) -> T {
        let mut guard = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }

    /// Marks a cluster for re-evaluation (e.g. when its operation finished), by whichever
    /// linked writer owns it.
    pub fn touch(&self, cluster: Uuid) {
        let _ = self.dirty.send(cluster);
        for p in self.peers.get().into_iter().flatten() {
            let _ = p.send(cluster);
        }
    }

    /// Links the observers of several management clusters (each writer ignores the clusters
    /// that are not its own).
    pub fn link(observers: &[Arc<Observer>]) {
        for o in observers {
            let others = observers
                .iter()
                .filter(|p| !Arc::ptr_eq(p, o))
                .map(|p| p.dirty.clone())
                .collect();
            let _ = o.peers.set(others);
        }
    }

    /// A feed of the clusters whose objects change from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Uuid> {
        self.feed.subscribe()
    }

    fn changed(&self, clusters: impl IntoIterator<Item = Uuid>) {
        for c in clusters {
            let _ = self.dirty.send(c);
            // No subscriber (no worker on this replica) is not an error.
            let _ = self.feed.send(c);
        }
        self.version.send_modify(|v| *v += 1);
    }

    fn apply_event(&self, kind: Kind, ev: Event<DynamicObject>) {
        match &ev {
            Event::Init => crate::telemetry::watch_resync(kind.gvk().1),
            Event::InitDone => {}
            _ => crate::telemetry::watch_event(kind.gvk().1),
        }
        if kind == Kind::HelmReleaseProxy {
            return self.apply_addon_event(ev);
        }
        if kind == Kind::Cluster {
            self.with_index(|ix| match &ev {
                Event::Apply(o) | Event::InitApply(o) => {
                    if let (Some(k), Some(u)) = (cluster_key(o), cluster_uuid(o)) {
                        ix.uuids.insert(k, u);
                    }
                }
                Event::Delete(o) => {
                    if let Some(k) = cluster_key(o) {
                        ix.uuids.remove(&k);
                    }
                }
                Event::Init | Event::InitDone => {}
            });
        }
        let key = |o: &DynamicObject| {
            format!(
                "{}/{}",
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default()
            )
        };
        let touched: Vec<Uuid> = self.with_index(|ix| match ev {
            Event::Apply(o) => cluster_uuid(&o)
                .map(|u| {
                    ix.by_cluster
                        .entry(u)
                        .or_default()
                        .insert((kind, key(&o)), prune(&o));
                    vec![u]
                })
                .unwrap_or_default(),
            // An object that stops matching our label selector arrives as DELETED in its new
            // state, without the label (as kube-apiserver sends it): found by name instead,
            // or its cluster would keep it, and any step waiting for it to go, forever.
            Event::Delete(o) => cluster_uuid(&o)
                .or_else(|| {
                    let k = (kind, key(&o));
                    ix.by_cluster
                        .iter()
                        .find(|(_, objs)| objs.contains_key(&k))
                        .map(|(u, _)| *u)
                })
                .map(|u| {
                    if let Some(objs) = ix.by_cluster.get_mut(&u) {
                        objs.remove(&(kind, key(&o)));
                        if objs.is_empty() {
                            ix.by_cluster.remove(&u);
                        }
                    }
                    vec![u]
                })
                .unwrap_or_default(),
            Event::Init => {
                ix.relist.insert(kind, Vec::new());
                Vec::new()
            }
            Event::InitApply(o) => {
                if let Some(u) = cluster_uuid(&o) {
                    let k = key(&o);
                    ix.relist.entry(kind).or_default().push((u, k, prune(&o)));
                }
                Vec::new()
            }
            Event::InitDone => {
                let fresh = ix.relist.remove(&kind).unwrap_or_default();
                let mut touched: HashSet<Uuid> = HashSet::new();
                for (u, objs) in ix.by_cluster.iter_mut() {
                    let before = objs.len();
                    objs.retain(|(k, _), _| *k != kind);
                    if objs.len() != before {
                        touched.insert(*u);
                    }
                }
                for (u, k, v) in fresh {
                    ix.by_cluster.entry(u).or_default().insert((kind, k), v);
                    touched.insert(u);
                }
                ix.by_cluster.retain(|_, objs| !objs.is_empty());
                ix.synced.insert(kind);
                touched.into_iter().collect()
            }
        });
        self.changed(touched);
    }

    /// A HelmReleaseProxy event: indexed by CAPI cluster; its Magnum cluster is re-evaluated.
    fn apply_addon_event(&self, ev: Event<DynamicObject>) {
        let touched: Vec<Uuid> = self.with_index(|ix| match ev {
            Event::Apply(o) => match addon_key(&o) {
                Some((k, name)) => {
                    ix.addons
                        .entry(k.clone())
                        .or_default()
                        .insert(name, prune(&o));
                    ix.uuids_of([&k])
                }
                None => Vec::new(),
            },
            Event::Delete(o) => match addon_key(&o) {
                Some((k, name)) => {
                    if let Some(m) = ix.addons.get_mut(&k) {
                        m.remove(&name);
                        if m.is_empty() {
                            ix.addons.remove(&k);
                        }
                    }
                    ix.uuids_of([&k])
                }
                None => Vec::new(),
            },
            Event::Init => {
                ix.addons_relist.clear();
                Vec::new()
            }
            Event::InitApply(o) => {
                if let Some((k, name)) = addon_key(&o) {
                    ix.addons_relist.push((k, name, prune(&o)));
                }
                Vec::new()
            }
            Event::InitDone => {
                let old = std::mem::take(&mut ix.addons);
                for (k, name, v) in std::mem::take(&mut ix.addons_relist) {
                    ix.addons.entry(k).or_default().insert(name, v);
                }
                ix.synced.insert(Kind::HelmReleaseProxy);
                let keys: HashSet<&ClusterKey> = old.keys().chain(ix.addons.keys()).collect();
                ix.uuids_of(keys)
            }
        });
        self.changed(touched);
    }

    /// Every watched CAPI/CAPO kind has listed its objects at least once (not waiting for the
    /// add-on releases: without them only the `addon.*` health entries are missing).
    pub fn synced(&self) -> bool {
        self.with_index(|ix| {
            Kind::ALL
                .iter()
                .filter(|k| **k != Kind::HelmReleaseProxy)
                .all(|k| ix.synced.contains(k))
        })
    }

    /// What is known about one cluster.
    pub fn observed(&self, cluster: Uuid) -> Observed {
        self.with_index(|ix| {
            let mut o = Observed::default();
            if let Some(objs) = ix.by_cluster.get(&cluster) {
                for ((kind, _), v) in objs {
                    match kind {
                        Kind::Cluster => o.cluster = Some(v.clone()),
                        Kind::OpenStackCluster => o.openstack_cluster = Some(v.clone()),
                        Kind::ControlPlane => o.control_plane = Some(v.clone()),
                        Kind::MachineDeployment => o.machine_deployments.push(v.clone()),
                        Kind::Machine => o.machines.push(v.clone()),
                        Kind::HelmReleaseProxy => {}
                    }
                }
            }
            let key = o.cluster.as_ref().and_then(|c| {
                let s = |p: &str| c.pointer(p).and_then(Value::as_str).map(str::to_owned);
                Some((s("/metadata/namespace")?, s("/metadata/name")?))
            });
            if let Some(addons) = key.and_then(|k| ix.addons.get(&k)) {
                o.addons = addons.values().cloned().collect();
            }
            o
        })
    }

    /// Every cluster with objects on the management cluster.
    pub fn clusters(&self) -> Vec<Uuid> {
        self.with_index(|ix| ix.by_cluster.keys().copied().collect())
    }

    /// Resolves when `pred` holds for the cluster's observed objects (checked after every
    /// change), or with `false` after `timeout`.
    pub async fn wait_for(
        &self,
        cluster: Uuid,
        timeout: Duration,
        pred: impl Fn(&Observed) -> bool,
    ) -> bool {
        let mut rx = self.version.subscribe();
        let check = async {
            loop {
                if self.synced() && pred(&self.observed(cluster)) {
                    return;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, check).await.is_ok()
    }

    /// Starts one watcher per kind on `client`; they run until `shutdown`.
    pub fn spawn_watchers(
        self: &Arc<Self>,
        client: kube::Client,
        shutdown: watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        Kind::ALL
            .iter()
            .map(|&kind| {
                let this = self.clone();
                let client = client.clone();
                let mut stop = shutdown.clone();
                tokio::spawn(async move {
                    let (av, k) = kind.gvk();
                    let api: Api<DynamicObject> = Api::all_with(client, &resource(av, k));
                    let cfg = watcher::Config::default().labels(kind.selector());
                    let mut stream = watcher::watcher(api, cfg)
                        .default_backoff()
                        .boxed();
                    loop {
                        tokio::select! {
                            ev = stream.next() => match ev {
                                Some(Ok(ev)) => this.apply_event(kind, ev),
                                Some(Err(e)) => tracing::warn!(kind = k, error = %e, "watch failed; retrying"),
                                None => return,
                            },
                            _ = stop.changed() => return,
                        }
                    }
                })
            })
            .collect()
    }
}

/// Operations whose failure CAPI converging does not undo: the cluster stays `UPDATE_FAILED`
/// until the next operation.
fn final_failures() -> Vec<&'static str> {
    OperationKind::ALL
        .into_iter()
        .filter(|k| k.failure_is_final())
        .map(OperationKind::as_str)
        .collect()
}

/// Which cluster state Postgres has, for [`status::evaluate`].
async fn load_state(
    tx: &mut sqlx::PgConnection,
    cluster: &cdb::ClusterRow,
    timeouts: Timeouts,
) -> DbResult<ClusterState> {
    let ngs = ndb::of_cluster(&mut *tx, cluster.uuid).await?;
    // One round trip: the queue's view and the credential check's finding.
    let (open, last, final_failure, credential_problem): (
        bool,
        Option<DateTime<Utc>>,
        Option<bool>,
        Option<String>,
    ) = sqlx::query_as(
        "SELECT COALESCE(bool_or(state IN ('pending', 'running')), false), max(created_at),
                (SELECT state = 'failed' AND kind = ANY($2) FROM operation
                  WHERE cluster_uuid = $1 ORDER BY id DESC LIMIT 1),
                (SELECT credential_problem FROM cluster WHERE uuid = $1)
           FROM operation WHERE cluster_uuid = $1",
    )
    .bind(cluster.uuid)
    .bind(final_failures())
    .fetch_one(&mut *tx)
    .await?;
    let status: Status = cluster.status.parse().unwrap_or(Status::CreateInProgress);
    let deadline = match status {
        Status::CreateInProgress => Some(
            cluster.created_at
                + chrono::Duration::minutes(i64::from(cluster.create_timeout.unwrap_or(60).max(1))),
        ),
        Status::UpdateInProgress => last.map(|t| {
            t + chrono::Duration::from_std(timeouts.update).unwrap_or(chrono::Duration::hours(1))
        }),
        _ => None,
    };
    Ok(ClusterState {
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
        operation_open: open,
        final_failure: final_failure.unwrap_or(false),
        deadline,
        api_address: cluster.api_address.clone(),
        coe_version: cluster.coe_version.clone(),
        health_status: cluster.health_status.clone(),
        health_status_reason: cluster.health_status_reason.0.clone(),
        credential_problem,
        addon_install_timeout: chrono::Duration::from_std(timeouts.addon_install)
            .unwrap_or(chrono::Duration::minutes(30)),
    })
}

/// The time limits the status writer applies.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// An update, from its last operation's start, before `UPDATE_FAILED` (`[capi]
    /// update_timeout_mins`).
    pub update: Duration,
    /// An add-on installing or upgrading before it counts as failed (`[capi]
    /// addon_install_timeout_secs`).
    pub addon_install: Duration,
}

impl Timeouts {
    pub fn of(config: &crate::config::CapiConfig) -> Self {
        Timeouts {
            update: Duration::from_secs(config.update_timeout_mins.max(1) * 60),
            addon_install: Duration::from_secs(config.addon_install_timeout_secs),
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
}

/// Evaluates one cluster and writes what changed, under the cluster's row lock (so an API
/// write that starts a new operation is never overwritten by a stale conclusion).
pub async fn sync_cluster(
    pool: &PgPool,
    observer: &Observer,
    member: &str,
    cluster: Uuid,
    timeouts: Timeouts,
) -> DbResult<Synced> {
    let mut tx = pool.begin().await?;
    let Some(row) = cdb::lock(&mut *tx, cluster).await? else {
        return Ok(Synced::default());
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
            status: None,
            recheck_at,
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
    pub reach: Arc<super::reach::Reach>,
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
/// `magnum_capi_clusters` notifications (any replica's cluster or operation change), on a change
/// of the management cluster's reachability, at the next in-progress deadline and when an add-on
/// still in progress would pass its timeout; `safety` is
/// only the pace of the re-check of in-progress clusters and of the lock's connection when no
/// event came. A replica without the lock waits for it in PostgreSQL (`pg_advisory_lock`), so it
/// takes over as soon as the holder's session ends.
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
    type Acquiring = std::pin::Pin<Box<dyn Future<Output = DbResult<sqlx::PgConnection>> + Send>>;
    let mut leader: Option<sqlx::PgConnection> = None;
    let mut acquiring: Option<Acquiring> = None;
    let mut events: Option<sqlx::postgres::PgListener> = None;
    // Each cluster to write, with when its first unwritten change arrived (the delay metric).
    let mut pending: Pending = HashMap::new();
    // Clusters to evaluate again at a time (an add-on in progress would time out then).
    let mut rechecks: Rechecks = HashMap::new();
    let now = tokio::time::Instant::now;
    let mut wake_at = now() + safety;
    let mut retry_lock_at: Option<tokio::time::Instant> = None;
    let key = writer_lock(&scope.name);
    let shown = crate::domain::placement::shown(&scope.name).to_string();
    // The reason written into its clusters' health while it is unreachable.
    let mut marked_down: Option<String> = None;
    // Just took the lock: what a previous writer recorded about reachability is redone.
    let mut fresh = false;
    loop {
        if leader.is_none() && acquiring.is_none() && retry_lock_at.is_none_or(|t| t <= now()) {
            acquiring = Some(Box::pin(wait_lead(pool.clone(), key)));
        }
        let mut rescan = false;
        tokio::select! {
            got = dirty.recv() => match got {
                Some(u) => { pending.entry(u).or_insert_with(now); }
                None => return,
            },
            got = async {
                match acquiring.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            } => {
                acquiring = None;
                match got {
                    Ok(conn) => {
                        tracing::info!(management_cluster = %shown, "this replica writes cluster statuses");
                        leader = Some(conn);
                        retry_lock_at = None;
                        marked_down = None;
                        fresh = true;
                        for u in observer.clusters() {
                            pending.entry(u).or_insert_with(now);
                        }
                        rescan = true;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "waiting for the status-writer lock failed; retrying");
                        retry_lock_at = Some(now() + Duration::from_secs(5));
                    }
                }
            },
            n = async {
                match events.as_mut() {
                    Some(l) => l.try_recv().await,
                    None => std::future::pending().await,
                }
            } => match n {
                Ok(Some(n)) => {
                    if let Ok(u) = n.payload().parse::<Uuid>() {
                        pending.entry(u).or_insert_with(now);
                    }
                }
                // The listening connection dropped (it reconnects on the next call): what was
                // notified meanwhile is lost, so look at everything in progress.
                Ok(None) => rescan = true,
                Err(e) => {
                    tracing::warn!(error = %e, "cluster change notifications lost");
                    events = None;
                    rescan = true;
                }
            },
            () = scope.reach.changed() => {}
            _ = tokio::time::sleep_until(wake_at), if leader.is_some() => rescan = true,
            _ = tokio::time::sleep_until(retry_lock_at.unwrap_or_else(now)), if retry_lock_at.is_some() => {}
            _ = shutdown.changed() => return,
        }
        // Take everything queued so far, then write.
        while let Ok(u) = dirty.try_recv() {
            pending.entry(u).or_insert_with(now);
        }
        crate::telemetry::status_writer_of(&scope.name, leader.is_some());
        let Some(conn) = leader.as_mut() else {
            pending.clear();
            continue;
        };
        if rescan {
            if sqlx::query("SELECT 1").execute(&mut *conn).await.is_err() {
                tracing::warn!("lost the status-writer lock's connection");
                leader = None;
                events = None;
                continue;
            }
            if events.is_none() {
                events = listen_for_changes(&pool).await;
            }
        }
        let down = scope.reach.down().map(|(why, _)| {
            format!(
                "The management cluster {shown} is unreachable ({why}); the cluster's status is \
                 the last one seen"
            )
        });
        if fresh || down.is_some() != marked_down.is_some() {
            match cdb::mark_unreachable(&pool, &scope.name, down.as_deref()).await {
                Ok(clusters) => {
                    marked_down = down;
                    fresh = false;
                    // Back: everything it holds is evaluated afresh.
                    if marked_down.is_none() {
                        for u in clusters {
                            pending.entry(u).or_insert_with(now);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "recording the management cluster's reachability failed")
                }
            }
        }
        for u in take_due(&mut rechecks, Utc::now()) {
            pending.entry(u).or_insert_with(now);
        }
        if rescan {
            match cdb::of_management_cluster(&pool, &scope.name, IN_PROGRESS).await {
                Ok(ids) => {
                    for u in ids {
                        pending.entry(u).or_insert_with(now);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "listing in-progress clusters failed"),
            }
        }
        // Unreachable: nothing new to conclude; what it last showed stays in Postgres.
        if !observer.synced() || marked_down.is_some() || (pending.is_empty() && !rescan) {
            continue;
        }
        write_pending(
            &pool,
            &observer,
            &scope.name,
            &mut pending,
            &mut rechecks,
            timeouts,
            &on_status,
        )
        .await;
        // Without notifications, the safety poll is all there is: keep it short then.
        let poll = if events.is_some() {
            safety
        } else {
            safety.min(Duration::from_secs(2))
        };
        wake_at = now() + poll;
        let recheck = rechecks.values().min().copied();
        match next_deadline(&pool, timeouts.update)
            .await
            .map(|d| d.into_iter().chain(recheck).min())
        {
            Ok(Some(d)) => {
                // A second past it, so the evaluation finds it passed.
                let left =
                    (d - Utc::now()).to_std().unwrap_or(Duration::ZERO) + Duration::from_secs(1);
                wake_at = wake_at.min(now() + left);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "reading the next in-progress deadline failed"),
        }
        if !pending.is_empty() {
            // A write failed: try again soon.
            wake_at = wake_at.min(now() + Duration::from_secs(1));
        }
    }
}

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

/// Writes what changed for each pending cluster of management cluster `member`, noting when
/// each wants to be evaluated again (`rechecks`); stops at the first failure (kept pending).
async fn write_pending(
    pool: &PgPool,
    observer: &Observer,
    member: &str,
    pending: &mut Pending,
    rechecks: &mut Rechecks,
    timeouts: Timeouts,
    on_status: &OnStatus,
) {
    for (u, since) in std::mem::take(pending) {
        match sync_cluster(pool, observer, member, u, timeouts).await {
            Ok(synced) => {
                match synced.recheck_at {
                    Some(at) => rechecks.insert(u, at),
                    None => rechecks.remove(&u),
                };
                if let Some(st) = synced.status {
                    crate::telemetry::status_delay(since.elapsed());
                    on_status(u, st);
                }
            }
            Err(e) => {
                tracing::warn!(cluster = %u, error = %e, "writing a status failed; will retry");
                pending.insert(u, since);
                break;
            }
        }
    }
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
    Ok(sqlx::query_scalar(
        "SELECT min(d) FROM (
           SELECT created_at + make_interval(mins => GREATEST(COALESCE(create_timeout, 60), 1)) AS d
             FROM cluster WHERE status = 'CREATE_IN_PROGRESS'
              AND NOT EXISTS (SELECT 1 FROM imported_cluster i WHERE i.cluster_uuid = cluster.uuid)
           UNION ALL
           SELECT (SELECT max(o.created_at) FROM operation o WHERE o.cluster_uuid = c.uuid)
                  + make_interval(secs => $1)
             FROM cluster c WHERE c.status = 'UPDATE_IN_PROGRESS'
              AND NOT EXISTS (SELECT 1 FROM imported_cluster i WHERE i.cluster_uuid = c.uuid)) x",
    )
    .bind(update_timeout.as_secs_f64())
    .fetch_one(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(name: &str, cluster: Uuid, ready: i64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": "magnum-p", "generation": 1,
                         "labels": {LABEL_CLUSTER_UUID: cluster.to_string()},
                         "managedFields": [{"manager": "x"}], "annotations": {"big": "x"}},
            "spec": {"replicas": 2, "template": {"spec": {"bootstrap": {}}}},
            "status": {"readyReplicas": ready}}))
        .unwrap()
    }

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

    #[tokio::test]
    async fn the_index_follows_events_and_a_relist_drops_what_is_gone() {
        let (obs, mut feed) = Observer::new();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        for k in Kind::ALL {
            obs.apply_event(k, Event::Init);
            obs.apply_event(k, Event::InitDone);
        }
        assert!(obs.synced());
        obs.apply_event(Kind::MachineDeployment, Event::Apply(object("md-a", a, 1)));
        obs.apply_event(Kind::MachineDeployment, Event::Apply(object("md-b", b, 2)));
        assert_eq!(feed.recv().await, Some(a));
        assert_eq!(feed.recv().await, Some(b));
        let seen = obs.observed(a);
        assert_eq!(seen.machine_deployments.len(), 1);
        // Only what status evaluation reads is kept.
        let md = &seen.machine_deployments[0];
        assert_eq!(md["status"]["readyReplicas"], 1);
        assert!(md["metadata"].get("managedFields").is_none());
        assert!(md["spec"].get("template").is_none());
        // The watch restarts; b's object was deleted meanwhile: the relist forgets it.
        obs.apply_event(Kind::MachineDeployment, Event::Init);
        obs.apply_event(
            Kind::MachineDeployment,
            Event::InitApply(object("md-a", a, 2)),
        );
        obs.apply_event(Kind::MachineDeployment, Event::InitDone);
        assert!(obs.observed(b).is_empty());
        assert_eq!(
            obs.observed(a).machine_deployments[0]["status"]["readyReplicas"],
            2
        );
        let mut touched = vec![feed.recv().await.unwrap(), feed.recv().await.unwrap()];
        touched.sort();
        let mut want = vec![a, b];
        want.sort();
        assert_eq!(touched, want);
        // A delete empties the cluster; waiters see it.
        let waiting = {
            let obs = obs.clone();
            tokio::spawn(async move {
                obs.wait_for(a, Duration::from_secs(5), |o| o.is_empty())
                    .await
            })
        };
        obs.apply_event(Kind::MachineDeployment, Event::Delete(object("md-a", a, 2)));
        assert!(waiting.await.unwrap());
        assert!(obs.clusters().is_empty());
    }

    #[tokio::test]
    async fn an_object_deleted_without_our_label_leaves_its_cluster() {
        let (obs, mut feed) = Observer::new();
        let a = Uuid::new_v4();
        obs.apply_event(Kind::MachineDeployment, Event::Apply(object("md-a", a, 1)));
        assert_eq!(feed.recv().await, Some(a));
        // Its label was removed: the label-selected watch reports it DELETED as it is now.
        let mut unlabelled = object("md-a", a, 1);
        unlabelled.metadata.labels = None;
        obs.apply_event(Kind::MachineDeployment, Event::Delete(unlabelled));
        assert_eq!(feed.try_recv().ok(), Some(a));
        assert!(obs.observed(a).machine_deployments.is_empty());
        assert!(obs.clusters().is_empty());
    }

    #[tokio::test]
    async fn release_proxies_join_their_cluster_by_namespace_and_name() {
        let (obs, _feed) = Observer::new();
        let a = Uuid::new_v4();
        let obj = |v: Value| -> DynamicObject { serde_json::from_value(v).unwrap() };
        let hrp = obj(json!({
            "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "HelmReleaseProxy",
            "metadata": {"name": "ca-metrics-server-ca", "namespace": "magnum-p",
                         "labels": {LABEL_CAPI_CLUSTER_NAME: "ca",
                                    LABEL_HELM_CHART_PROXY: "ca-metrics-server"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
        // The release may be seen before its Cluster.
        obs.apply_event(Kind::HelmReleaseProxy, Event::Apply(hrp.clone()));
        assert!(obs.observed(a).addons.is_empty());
        obs.apply_event(
            Kind::Cluster,
            Event::Apply(obj(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "ca", "namespace": "magnum-p",
                             "labels": {LABEL_CLUSTER_UUID: a.to_string()}}}))),
        );
        let seen = obs.observed(a);
        assert_eq!(seen.addons.len(), 1);
        assert_eq!(seen.addons[0]["status"]["conditions"][0]["status"], "True");
        assert!(!seen.is_empty());
        // A relist without it forgets it.
        obs.apply_event(Kind::HelmReleaseProxy, Event::Init);
        obs.apply_event(Kind::HelmReleaseProxy, Event::InitDone);
        assert!(obs.observed(a).addons.is_empty());
    }
}
