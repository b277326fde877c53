//! Watching the management cluster: one `kube::runtime` watcher per kind (Cluster,
//! KubeadmControlPlane, MachineDeployment, Machine, OpenStackCluster) across namespaces,
//! selected by our cluster-uuid label, feeding an in-memory index per Magnum cluster (plus
//! CAAPH's HelmReleaseProxies and CAPO's OpenStackServers, which carry only the CAPI cluster
//! name: indexed by namespace and cluster name, joined to the Magnum cluster through its
//! `Cluster`). What changed goes out on a
//! feed of cluster uuids; the status writer (`crate::status_writer`) turns it into statuses.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use super::apply::resource;
use super::status::{Observed, Shared};
use super::{LABEL_CAPI_CLUSTER_NAME, LABEL_CLUSTER_UUID, LABEL_HELM_CHART_PROXY, kinds};

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
    /// Machines without our label (those of clusters adopted from a Magnum driver, which made
    /// their templates): joined to their cluster by namespace and CAPI cluster name.
    AdoptedMachine,
    /// CAPO's server of each OpenStackMachine: where Nova's refusal of a create is reported.
    OpenStackServer,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Cluster,
        Kind::OpenStackCluster,
        Kind::ControlPlane,
        Kind::MachineDeployment,
        Kind::Machine,
        Kind::HelmReleaseProxy,
        Kind::AdoptedMachine,
        Kind::OpenStackServer,
    ];

    /// The labels the watcher selects by: ours, CAAPH's for its release proxies, CAPI's cluster
    /// name without ours for the Machines of adopted clusters.
    fn selector(self) -> &'static str {
        match self {
            Kind::HelmReleaseProxy => LABEL_HELM_CHART_PROXY,
            Kind::AdoptedMachine => ADOPTED_MACHINES,
            Kind::OpenStackServer => LABEL_CAPI_CLUSTER_NAME,
            _ => LABEL_CLUSTER_UUID,
        }
    }

    /// Indexed by namespace and CAPI cluster name (not carrying our cluster-uuid label).
    fn joined(self) -> bool {
        matches!(
            self,
            Kind::HelmReleaseProxy | Kind::AdoptedMachine | Kind::OpenStackServer
        )
    }

    pub fn gvk(self) -> kinds::Gvk {
        match self {
            Kind::Cluster => kinds::CLUSTER,
            Kind::OpenStackCluster => kinds::OPENSTACK_CLUSTER,
            Kind::ControlPlane => kinds::CONTROL_PLANE,
            Kind::MachineDeployment => kinds::MACHINE_DEPLOYMENT,
            Kind::Machine | Kind::AdoptedMachine => kinds::MACHINE,
            Kind::HelmReleaseProxy => kinds::HELM_RELEASE_PROXY,
            Kind::OpenStackServer => kinds::OPENSTACK_SERVER,
        }
    }
}

/// Machines CAPI made for a cluster (it labels each with the cluster's name) that do not carry
/// our cluster-uuid label: those of adopted clusters, whose templates the Magnum driver wrote.
const ADOPTED_MACHINES: &str = "cluster.x-k8s.io/cluster-name,!magnum.openstack.org/cluster-uuid";

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
        // `disableAPIServerFloatingIP`: whether an OpenStackCluster is private
        // (`capi::private::PrivateApi`, read by the kubeconfig keeper); a Machine's
        // `infrastructureRef`: the name of its OpenStackMachine, and so of its OpenStackServer.
        for k in [
            "replicas",
            "version",
            "controlPlaneEndpoint",
            "providerID",
            "disableAPIServerFloatingIP",
            "infrastructureRef",
            // An API on a virtual IP: where its floating IP goes (`capi::api_vip`).
            "apiServerFixedIP",
            // A control plane's machine template: whether an upgrade has rolled it
            // (`capi::upgrade`, which reads it here instead of listing it at every step).
            "machineTemplate",
        ] {
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
    /// Objects joined by CAPI cluster (HelmReleaseProxies, adopted clusters' Machines), by
    /// kind and cluster, then name.
    joined: HashMap<(Kind, ClusterKey), BTreeMap<String, Shared>>,
    /// Joined objects being relisted, per kind.
    joined_relist: HashMap<Kind, Vec<(ClusterKey, String, Shared)>>,
}

impl Index {
    /// The Magnum clusters of `keys` (those whose `Cluster` was seen).
    fn uuids_of<'a>(&self, keys: impl IntoIterator<Item = &'a ClusterKey>) -> Vec<Uuid> {
        keys.into_iter()
            .filter_map(|k| self.uuids.get(k).copied())
            .collect()
    }
}

/// Namespace and CAPI cluster name of a joined object (CAPI's and CAAPH's cluster-name label).
fn joined_key(o: &DynamicObject) -> Option<(ClusterKey, String)> {
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
        if kind.joined() {
            return self.apply_joined_event(kind, ev);
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

    /// An event of a joined kind: indexed by CAPI cluster; its Magnum cluster is re-evaluated.
    fn apply_joined_event(&self, kind: Kind, ev: Event<DynamicObject>) {
        let touched: Vec<Uuid> = self.with_index(|ix| match ev {
            Event::Apply(o) => match joined_key(&o) {
                Some((k, name)) => {
                    ix.joined
                        .entry((kind, k.clone()))
                        .or_default()
                        .insert(name, prune(&o));
                    ix.uuids_of([&k])
                }
                None => Vec::new(),
            },
            Event::Delete(o) => match joined_key(&o) {
                Some((k, name)) => {
                    let key = (kind, k);
                    if let Some(m) = ix.joined.get_mut(&key) {
                        m.remove(&name);
                        if m.is_empty() {
                            ix.joined.remove(&key);
                        }
                    }
                    ix.uuids_of([&key.1])
                }
                None => Vec::new(),
            },
            Event::Init => {
                ix.joined_relist.insert(kind, Vec::new());
                Vec::new()
            }
            Event::InitApply(o) => {
                if let Some((k, name)) = joined_key(&o) {
                    ix.joined_relist
                        .entry(kind)
                        .or_default()
                        .push((k, name, prune(&o)));
                }
                Vec::new()
            }
            Event::InitDone => {
                let mut keys: HashSet<ClusterKey> = HashSet::new();
                ix.joined.retain(|(k, c), _| {
                    if *k == kind {
                        keys.insert(c.clone());
                    }
                    *k != kind
                });
                for (c, name, v) in ix.joined_relist.remove(&kind).unwrap_or_default() {
                    keys.insert(c.clone());
                    ix.joined.entry((kind, c)).or_default().insert(name, v);
                }
                ix.synced.insert(kind);
                ix.uuids_of(keys.iter())
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
                        Kind::HelmReleaseProxy | Kind::AdoptedMachine | Kind::OpenStackServer => {}
                    }
                }
            }
            let key = o.cluster.as_ref().and_then(|c| {
                let s = |p: &str| c.pointer(p).and_then(Value::as_str).map(str::to_owned);
                Some((s("/metadata/namespace")?, s("/metadata/name")?))
            });
            if let Some(k) = key {
                let joined = |kind: Kind| ix.joined.get(&(kind, k.clone()));
                if let Some(addons) = joined(Kind::HelmReleaseProxy) {
                    o.addons = addons.values().cloned().collect();
                }
                // As indexed: their nodegroup is read through `Observed::nodegroup_of`.
                if let Some(machines) = joined(Kind::AdoptedMachine) {
                    o.machines.extend(machines.values().cloned());
                }
                if let Some(servers) = joined(Kind::OpenStackServer) {
                    o.servers = servers.values().cloned().collect();
                }
            }
            o
        })
    }

    /// The OpenStackCluster of CAPI cluster `name` in `namespace` (our rendering names it after
    /// its `Cluster`), as indexed; `None` until its `Cluster` and it were seen.
    pub fn openstack_cluster(&self, namespace: &str, name: &str) -> Option<Shared> {
        self.with_index(|ix| {
            let key = (namespace.to_string(), name.to_string());
            let objs = ix.by_cluster.get(ix.uuids.get(&key)?)?;
            objs.get(&(Kind::OpenStackCluster, format!("{namespace}/{name}")))
                .cloned()
        })
    }

    /// Namespace and name of the CAPI cluster of Magnum cluster `cluster`, once its `Cluster`
    /// was seen.
    pub fn capi_cluster(&self, cluster: Uuid) -> Option<(String, String)> {
        self.with_index(|ix| {
            let objs = ix.by_cluster.get(&cluster)?;
            let ((_, key), _) = objs
                .range((Kind::Cluster, String::new())..)
                .next()
                .filter(|((k, _), _)| *k == Kind::Cluster)?;
            let (ns, name) = key.split_once('/')?;
            Some((ns.to_string(), name.to_string()))
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

    /// The CAPI `Cluster` `magnum-p/ca` of Magnum cluster `a`.
    fn cluster_ca(a: Uuid) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "ca", "namespace": "magnum-p",
                         "labels": {LABEL_CLUSTER_UUID: a.to_string()}}}))
        .unwrap()
    }

    #[test]
    fn an_adopted_clusters_machines_are_read_from_the_index_not_copied_per_evaluation() {
        let (obs, _feed) = Observer::new();
        let (a, ng) = (Uuid::new_v4(), Uuid::new_v4());
        let obj = |v: Value| -> DynamicObject { serde_json::from_value(v).unwrap() };
        obs.apply_event(Kind::Cluster, Event::Apply(cluster_ca(a)));
        obs.apply_event(
            Kind::MachineDeployment,
            Event::Apply(obj(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                "metadata": {"name": "ca-md-0", "namespace": "magnum-p",
                             "labels": {LABEL_CLUSTER_UUID: a.to_string(),
                                        (super::super::LABEL_NODEGROUP_UUID): ng.to_string()}}}))),
        );
        obs.apply_event(
            Kind::AdoptedMachine,
            Event::Apply(obj(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": "ca-md-0-x", "namespace": "magnum-p",
                             "labels": {LABEL_CAPI_CLUSTER_NAME: "ca",
                                        "cluster.x-k8s.io/deployment-name": "ca-md-0"}}}))),
        );
        let (first, second) = (obs.observed(a), obs.observed(a));
        assert_eq!(first.machines.len(), 1);
        assert_eq!(
            first.nodegroup_of(&first.machines[0]),
            Some(ng.to_string().as_str()),
            "attributed to its deployment's nodegroup"
        );
        assert!(
            Shared::ptr_eq(&first.machines[0], &second.machines[0]),
            "each evaluation shares the index's Machine"
        );
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
        obs.apply_event(Kind::Cluster, Event::Apply(cluster_ca(a)));
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
