//! The simulator's engine, standing in for the CAPI and CAPO controller managers: it follows the
//! store's change feed, marks affected objects dirty (plus an index from each CAPI cluster to
//! its parts), and every `step` reconciles only the dirty objects, one transition each, on the
//! blocking pool. The per-kind behaviour lives in `reconcile`.
//!
//! It also keeps what the store does not: per Machine the PKI its bootstrap data carried and
//! what kubeadm installed (`pki`), the simulated workload clusters (`workload`) and their
//! loopback TLS endpoints (`endpoint`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::endpoint::{self, Endpoints, Serving};
use super::objects::{
    Kind, LABEL_CLUSTER_UUID, LABEL_CONTROL_PLANE, cluster_names, condition_true, is_deleting,
    label, owners, str_at,
};
use super::pki::{Bootstrap, Installed};
use super::reconcile;
use super::simulation::Simulation;
use super::store::{Event, EventType, ObjectKey, Store, StoreError};
use super::workload::{self, Workloads};

/// The PKI of one Machine, as the simulator tracks it (not in the store).
#[derive(Debug, Default)]
struct MachinePki {
    /// Taken when CAPI rendered the bootstrap data (Pending → Provisioning).
    bootstrap: Option<Bootstrap>,
    /// Set once kubeadm init/join succeeded (Provisioning → Running).
    installed: Option<Installed>,
}

/// Objects related to CAPI clusters, kept current from the change feed.
#[derive(Default)]
struct Links {
    /// (namespace, cluster name) → parts naming that cluster.
    by_cluster: HashMap<(String, String), HashSet<ObjectKey>>,
    /// (namespace, Magnum cluster uuid) → parts carrying that uuid label.
    by_uuid: HashMap<(String, String), HashSet<ObjectKey>>,
    /// (namespace, Magnum cluster uuid) → the CAPI Cluster with that label.
    cluster_by_uuid: HashMap<(String, String), String>,
    /// Object named by a Cluster's infrastructureRef / controlPlaneRef → that Cluster.
    referenced_by: HashMap<ObjectKey, ObjectKey>,
}

fn insert_or_remove(
    map: &mut HashMap<(String, String), HashSet<ObjectKey>>,
    at: (String, String),
    key: &ObjectKey,
    present: bool,
) {
    if present {
        map.entry(at).or_default().insert(key.clone());
    } else if let Some(set) = map.get_mut(&at) {
        set.remove(key);
        if set.is_empty() {
            map.remove(&at);
        }
    }
}

/// The running simulator; shared by its tasks and the `SimCluster` handle.
pub struct Simulator {
    store: Arc<Store>,
    step: Duration,
    markers: RwLock<Vec<String>>,
    paused: AtomicBool,
    dirty: Mutex<HashSet<ObjectKey>>,
    links: Mutex<Links>,
    /// (namespace, cluster) → last node address handed out (host part).
    next_host: Mutex<HashMap<(String, String), u32>>,
    floating_ips: AtomicU32,
    /// `http://127.0.0.1:<port>` of the API server (it serves the workload APIs below it too).
    base_url: String,
    workloads: Arc<Workloads>,
    /// The workload clusters' TLS endpoints.
    endpoints: Endpoints,
    serving: Serving,
    /// This simulator, for the endpoints' servers (which must not keep it alive).
    me: Weak<Simulator>,
    /// Machine → its PKI.
    pki: Mutex<HashMap<ObjectKey, MachinePki>>,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("step", &self.step)
            .field("paused", &self.paused.load(Ordering::Relaxed))
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Simulator {
    /// Starts the feed and the step loop; both, and the workload endpoints, stop when
    /// `serving.shutdown` turns true. `base_url` is the API server's, which serves `workloads`
    /// too.
    pub(crate) fn start(
        store: Arc<Store>,
        step: Duration,
        fail_markers: Vec<String>,
        base_url: String,
        workloads: Arc<Workloads>,
        serving: Serving,
    ) -> (Arc<Simulator>, Vec<JoinHandle<()>>) {
        let feed = store.subscribe();
        let shutdown = serving.shutdown.clone();
        let sim = Arc::new_cyclic(|me| Simulator {
            store,
            step: step.max(Duration::from_millis(1)),
            markers: RwLock::new(fail_markers),
            paused: AtomicBool::new(false),
            dirty: Mutex::new(HashSet::new()),
            links: Mutex::new(Links::default()),
            next_host: Mutex::new(HashMap::new()),
            floating_ips: AtomicU32::new(0),
            base_url,
            workloads,
            endpoints: Endpoints::default(),
            serving,
            me: me.clone(),
            pki: Mutex::new(HashMap::new()),
        });
        sim.resync();
        let tasks = vec![
            tokio::spawn(sim.clone().follow(feed, shutdown.clone())),
            tokio::spawn(sim.clone().run_steps(shutdown)),
        ];
        (sim, tasks)
    }

    /// Replaces the failure markers and re-examines every object.
    pub fn set_fail_markers(&self, markers: Vec<String>) {
        *self.markers.write().unwrap_or_else(|e| e.into_inner()) = markers;
        self.resync();
    }

    pub fn fail_markers(&self) -> Vec<String> {
        self.markers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops reconciling (changes still accumulate as dirty objects).
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Rebuilds the index and marks every simulated object dirty (after a lagged feed).
    pub fn resync(&self) {
        lock(&self.pki).retain(|k, _| self.store.get(&k.resource, &k.namespace, &k.name).is_some());
        for kind in Kind::ALL {
            if kind == Kind::Secret {
                continue;
            }
            let (objects, _) = self.store.list_matching(
                &kind.resource(),
                None,
                &Default::default(),
                &Default::default(),
            );
            for obj in objects {
                let key = ObjectKey::new(
                    &kind.resource(),
                    super::objects::namespace(&obj),
                    super::objects::name(&obj),
                );
                self.observe(kind, &key, &obj, false);
            }
        }
    }

    pub(crate) fn mark(&self, key: ObjectKey) {
        lock(&self.dirty).insert(key);
    }

    fn mark_all(&self, keys: impl IntoIterator<Item = ObjectKey>) {
        lock(&self.dirty).extend(keys);
    }

    async fn follow(
        self: Arc<Self>,
        mut feed: broadcast::Receiver<Arc<Event>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                r = feed.recv() => match r {
                    Ok(event) => {
                        if let Some(kind) = Kind::of(&event.key.resource) {
                            self.observe(kind, &event.key, &event.object, event.event_type == EventType::Deleted);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "simulator fell behind the change feed; resyncing");
                        self.resync();
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }

    async fn run_steps(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(self.step);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = ticker.tick() => {}
            }
            if self.is_paused() {
                continue;
            }
            let mut batch: Vec<ObjectKey> = std::mem::take(&mut *lock(&self.dirty))
                .into_iter()
                .collect();
            if batch.is_empty() {
                continue;
            }
            batch.sort();
            let this = self.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || this.process(batch)).await {
                tracing::error!(error = %e, "simulator step panicked");
            }
        }
    }

    /// One step: reconcile each dirty object once.
    fn process(&self, batch: Vec<ObjectKey>) {
        let markers = self.fail_markers();
        let cx = reconcile::Ctx {
            sim: self,
            store: &self.store,
            markers: &markers,
        };
        for key in batch {
            match reconcile::reconcile(&cx, &key) {
                Ok(()) => {}
                Err(e @ StoreError::Conflict(_)) => {
                    tracing::debug!(?key, error = %e, "simulator retrying");
                    self.mark(key);
                }
                Err(e) => tracing::warn!(?key, error = %e, "simulated controller failed"),
            }
        }
    }

    /// Index maintenance and dirty marking for one object change.
    fn observe(&self, kind: Kind, key: &ObjectKey, obj: &Value, deleted: bool) {
        let ns = key.namespace.clone();
        let mut dirty: Vec<ObjectKey> = Vec::new();
        let mut links = lock(&self.links);
        let uuid = label(obj, LABEL_CLUSTER_UUID).map(str::to_string);
        if kind == Kind::Cluster {
            for (path, target) in [
                ("infrastructureRef", Kind::InfraCluster),
                ("controlPlaneRef", Kind::ControlPlane),
            ] {
                if let Some(n) = str_at(obj, &["spec", path, "name"]) {
                    let target_key = ObjectKey::new(&target.resource(), &ns, n);
                    if deleted {
                        links.referenced_by.remove(&target_key);
                    } else {
                        links.referenced_by.insert(target_key.clone(), key.clone());
                        dirty.push(target_key);
                    }
                }
            }
            if deleted {
                self.remove_workload(&ns, &key.name);
            }
            if let Some(u) = &uuid {
                if deleted {
                    links.cluster_by_uuid.remove(&(ns.clone(), u.clone()));
                } else {
                    links
                        .cluster_by_uuid
                        .insert((ns.clone(), u.clone()), key.name.clone());
                }
            }
            dirty.push(key.clone());
            if !deleted {
                let parts = links.by_cluster.get(&(ns.clone(), key.name.clone()));
                dirty.extend(
                    parts
                        .into_iter()
                        .flatten()
                        .filter(|k| {
                            matches!(
                                Kind::of(&k.resource),
                                Some(
                                    Kind::MachineDeployment
                                        | Kind::MachineHealthCheck
                                        | Kind::ControlPlane
                                        | Kind::InfraCluster
                                        | Kind::HelmChartProxy
                                )
                            )
                        })
                        .cloned(),
                );
            }
        } else if kind.is_cluster_part() {
            let names = cluster_names(obj);
            for n in &names {
                insert_or_remove(
                    &mut links.by_cluster,
                    (ns.clone(), n.clone()),
                    key,
                    !deleted,
                );
            }
            if let Some(u) = &uuid {
                insert_or_remove(&mut links.by_uuid, (ns.clone(), u.clone()), key, !deleted);
            }
            let clusters =
                || {
                    names
                        .iter()
                        .cloned()
                        .chain(uuid.as_ref().and_then(|u| {
                            links.cluster_by_uuid.get(&(ns.clone(), u.clone())).cloned()
                        }))
                        .map(|n| ObjectKey::new(&Kind::Cluster.resource(), &ns, &n))
                        .chain(links.referenced_by.get(key).cloned())
                        .collect::<Vec<_>>()
                };
            match kind {
                Kind::Machine => {
                    if deleted {
                        lock(&self.pki).remove(key);
                        self.remove_node(obj);
                    }
                    dirty.push(key.clone());
                    for (owner_kind, owner_res) in [
                        ("KubeadmControlPlane", Kind::ControlPlane),
                        ("MachineDeployment", Kind::MachineDeployment),
                    ] {
                        for (n, _) in owners(obj, owner_kind) {
                            dirty.push(ObjectKey::new(&owner_res.resource(), &ns, &n));
                        }
                    }
                    if deleted {
                        dirty.extend(clusters());
                    }
                }
                Kind::InfraMachine => {
                    for (n, _) in owners(obj, "Machine") {
                        dirty.push(ObjectKey::new(&Kind::Machine.resource(), &ns, &n));
                    }
                    if deleted {
                        dirty.extend(clusters());
                    }
                }
                Kind::InfraCluster | Kind::ControlPlane | Kind::MachineDeployment => {
                    dirty.push(key.clone());
                    dirty.extend(clusters());
                }
                Kind::MachineHealthCheck | Kind::HelmChartProxy => {
                    dirty.push(key.clone());
                    if deleted {
                        dirty.extend(clusters());
                    }
                }
                _ => {
                    if deleted {
                        dirty.extend(clusters());
                    }
                }
            }
        } else if kind == Kind::Secret && deleted {
            // A removed kubeconfig Secret may be what a deleting Cluster waits for.
            if let Some(n) = label(obj, super::objects::LABEL_CLUSTER_NAME) {
                dirty.push(ObjectKey::new(&Kind::Cluster.resource(), &ns, n));
            }
        }
        drop(links);
        self.mark_all(dirty);
    }

    /// Keys of the parts of a cluster (by name and by Magnum uuid label).
    pub(crate) fn cluster_parts(
        &self,
        ns: &str,
        cluster: &str,
        uuid: Option<&str>,
    ) -> Vec<ObjectKey> {
        let links = lock(&self.links);
        let mut out: Vec<ObjectKey> = links
            .by_cluster
            .get(&(ns.to_string(), cluster.to_string()))
            .into_iter()
            .flatten()
            .chain(
                uuid.and_then(|u| links.by_uuid.get(&(ns.to_string(), u.to_string())))
                    .into_iter()
                    .flatten(),
            )
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The next node address of a cluster: 127.0.0.10, 127.0.0.11, … (loopback: Magnum reports
    /// them as node addresses, and a client that follows one, ssh say, stays on this machine).
    pub(crate) fn next_node_address(&self, ns: &str, cluster: &str) -> String {
        let mut hosts = lock(&self.next_host);
        let n = hosts
            .entry((ns.to_string(), cluster.to_string()))
            .or_insert(9);
        *n += 1;
        let a = *n - 10;
        format!("127.0.{}.{}", a / 240, 10 + a % 240)
    }

    /// The simulated workload API of a cluster, as its kubeconfig names it: its TLS endpoint
    /// `https://127.0.0.1:<port>` once open, else `{base url}/workload/{namespace}/{cluster}`
    /// (plain HTTP on the management API server).
    pub fn workload_url(&self, namespace: &str, cluster: &str) -> String {
        match self.endpoints.port(namespace, cluster) {
            Some(port) => endpoint::url(port),
            None => workload::url(&self.base_url, namespace, cluster),
        }
    }

    /// The port of a cluster's loopback API endpoint, opened unless it is (CAPO's load balancer
    /// or floating IP).
    pub(crate) fn open_endpoint(&self, namespace: &str, cluster: &str) -> std::io::Result<u16> {
        self.endpoints
            .open(self.me.clone(), &self.serving, namespace, cluster)
    }

    /// The Cluster is gone: its workload cluster and its endpoint with it.
    pub(crate) fn remove_workload(&self, namespace: &str, cluster: &str) {
        self.workloads.remove(namespace, cluster);
        self.endpoints.close(namespace, cluster);
    }

    /// The Node of a Machine leaves the workload cluster with it.
    pub(crate) fn remove_node(&self, machine: &Value) {
        let cluster = str_at(machine, &["spec", "clusterName"]).unwrap_or_default();
        if let Some(store) = self
            .workloads
            .get(super::objects::namespace(machine), cluster)
        {
            workload::remove_node(&store, super::objects::name(machine));
        }
    }

    pub(crate) fn workloads(&self) -> &Workloads {
        &self.workloads
    }

    pub(crate) fn workloads_arc(&self) -> Arc<Workloads> {
        self.workloads.clone()
    }

    /// The management cluster's store.
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// What the bootstrap data of a Machine carried; taken by `capture` (and kept) if it was not
    /// when CAPI rendered it.
    pub(crate) fn bootstrap(
        &self,
        machine: &ObjectKey,
        capture: impl FnOnce() -> Bootstrap,
    ) -> Bootstrap {
        if let Some(b) = lock(&self.pki)
            .get(machine)
            .and_then(|p| p.bootstrap.clone())
        {
            return b;
        }
        let b = capture();
        lock(&self.pki)
            .entry(machine.clone())
            .or_default()
            .bootstrap = Some(b.clone());
        b
    }

    /// CAPI renders a Machine's bootstrap data (Pending → Provisioning).
    pub(crate) fn set_bootstrap(&self, machine: &ObjectKey, bootstrap: Bootstrap) {
        lock(&self.pki).insert(
            machine.clone(),
            MachinePki {
                bootstrap: Some(bootstrap),
                installed: None,
            },
        );
    }

    pub(crate) fn set_installed(&self, machine: &ObjectKey, installed: Installed) {
        lock(&self.pki)
            .entry(machine.clone())
            .or_default()
            .installed = Some(installed);
    }

    /// The control-plane Machines of a cluster that run kubeadm's PKI (joined, not deleting),
    /// oldest first, with what they installed; `ready_only` drops those not `Ready`.
    pub(crate) fn control_plane_pki(
        &self,
        ns: &str,
        cluster: &str,
        ready_only: bool,
    ) -> Vec<(String, Installed)> {
        let mut machines: Vec<(String, String, ObjectKey)> = self
            .cluster_parts(ns, cluster, None)
            .into_iter()
            .filter(|k| Kind::Machine.is(&k.resource))
            .filter_map(|k| {
                let m = self.store.get(&k.resource, &k.namespace, &k.name)?;
                let wanted = label(&m, LABEL_CONTROL_PLANE).is_some()
                    && str_at(&m, &["spec", "clusterName"]) == Some(cluster)
                    && !is_deleting(&m)
                    && (!ready_only || condition_true(&m, "Ready"));
                let created = str_at(&m, &["metadata", "creationTimestamp"])
                    .unwrap_or_default()
                    .to_string();
                wanted.then(|| (created, k.name.clone(), k))
            })
            .collect();
        machines.sort();
        let pki = lock(&self.pki);
        machines
            .into_iter()
            .filter_map(|(_, name, k)| {
                let installed = pki.get(&k)?.installed.clone()?;
                Some((name, installed))
            })
            .collect()
    }

    /// What the workload cluster's apiservers would do with a client certificate (PEM): true
    /// iff the cluster has at least one control-plane machine running kubeadm's PKI and the
    /// certificate is within its validity and signed by a CA in the `ca` trust bundle of every
    /// one of them (the load balancer may send a request to any).
    pub fn workload_accepts(&self, namespace: &str, cluster: &str, client_cert_pem: &str) -> bool {
        self.workload_trusts(namespace, cluster, |ca| ca.accepts(client_cert_pem))
    }

    /// `workload_accepts` for a DER certificate (as a TLS client presents it).
    pub(crate) fn workload_accepts_der(&self, namespace: &str, cluster: &str, der: &[u8]) -> bool {
        self.workload_trusts(namespace, cluster, |ca| ca.accepts_der(der))
    }

    fn workload_trusts(
        &self,
        namespace: &str,
        cluster: &str,
        accepts: impl Fn(&super::pki::Ca) -> bool,
    ) -> bool {
        let servers = self.control_plane_pki(namespace, cluster, false);
        !servers.is_empty()
            && servers
                .iter()
                .all(|(_, m)| m.ca_trust.as_ref().is_some_and(&accepts))
    }

    /// Whether a workload cluster's PKI is modelled (its `<cluster>-ca` Secret exists, so its
    /// kubeconfig carries a client certificate): without one, its API lets every client in.
    pub(crate) fn workload_pki_modelled(&self, namespace: &str, cluster: &str) -> bool {
        self.store
            .get(
                &Kind::Secret.resource(),
                namespace,
                &format!("{cluster}-ca"),
            )
            .is_some()
    }

    /// A floating IP (a router's external address), from loopback 127.255.0.0/24: nothing the
    /// simulator hands out leads off the machine.
    pub(crate) fn next_floating_ip(&self) -> String {
        let n = self.floating_ips.fetch_add(1, Ordering::Relaxed);
        format!("127.255.0.{}", n % 254 + 1)
    }
}

impl Simulation for Simulator {
    fn store(&self) -> &Arc<Store> {
        Simulator::store(self)
    }
    fn cluster_parts(&self, ns: &str, cluster: &str, uuid: Option<&str>) -> Vec<ObjectKey> {
        Simulator::cluster_parts(self, ns, cluster, uuid)
    }
    fn mark(&self, key: ObjectKey) {
        Simulator::mark(self, key)
    }
    fn next_floating_ip(&self) -> String {
        Simulator::next_floating_ip(self)
    }
    fn next_node_address(&self, ns: &str, cluster: &str) -> String {
        Simulator::next_node_address(self, ns, cluster)
    }
    fn control_plane_pki(
        &self,
        ns: &str,
        cluster: &str,
        ready_only: bool,
    ) -> Vec<(String, Installed)> {
        Simulator::control_plane_pki(self, ns, cluster, ready_only)
    }
    fn bootstrap(&self, machine: &ObjectKey, capture: &dyn Fn() -> Bootstrap) -> Bootstrap {
        Simulator::bootstrap(self, machine, capture)
    }
    fn set_bootstrap(&self, machine: &ObjectKey, bootstrap: Bootstrap) {
        Simulator::set_bootstrap(self, machine, bootstrap)
    }
    fn set_installed(&self, machine: &ObjectKey, installed: Installed) {
        Simulator::set_installed(self, machine, installed)
    }
    fn workloads(&self) -> &Workloads {
        Simulator::workloads(self)
    }
    fn workloads_arc(&self) -> Arc<Workloads> {
        Simulator::workloads_arc(self)
    }
    fn open_endpoint(&self, namespace: &str, cluster: &str) -> std::io::Result<u16> {
        Simulator::open_endpoint(self, namespace, cluster)
    }
    fn workload_url(&self, namespace: &str, cluster: &str) -> String {
        Simulator::workload_url(self, namespace, cluster)
    }
    fn remove_workload(&self, namespace: &str, cluster: &str) {
        Simulator::remove_workload(self, namespace, cluster)
    }
    fn remove_node(&self, machine: &Value) {
        Simulator::remove_node(self, machine)
    }
    fn workload_pki_modelled(&self, namespace: &str, cluster: &str) -> bool {
        Simulator::workload_pki_modelled(self, namespace, cluster)
    }
    fn workload_accepts_der(&self, namespace: &str, cluster: &str, der: &[u8]) -> bool {
        Simulator::workload_accepts_der(self, namespace, cluster, der)
    }
}
