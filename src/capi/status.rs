//! From what CAPI/CAPO report to Magnum statuses (pure): nodegroup readiness from the
//! KubeadmControlPlane and MachineDeployments, failures from Machine/OpenStackMachine conditions
//! and the OpenStackCluster, the operation deadline, addresses, version and health.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{LABEL_NODEGROUP_UUID, addon_health};
use crate::domain::status::Status;

/// Everything the watchers know about one cluster's objects.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub cluster: Option<Shared>,
    pub openstack_cluster: Option<Shared>,
    pub control_plane: Option<Shared>,
    pub machine_deployments: Vec<Shared>,
    pub machines: Vec<Shared>,
    /// CAAPH's HelmReleaseProxies of the cluster (add-on health; not part of `is_empty`: CAAPH
    /// removes them with their proxies, after the cluster).
    pub addons: Vec<Shared>,
    /// CAPO's OpenStackServers of the cluster's machines (each named after its
    /// OpenStackMachine): Nova's refusal of a create is reported there only — CAPO v0.14 leaves
    /// the OpenStackMachine and the Machine waiting. Not part of `is_empty`: they go with their
    /// OpenStackMachines.
    pub servers: Vec<Shared>,
}

/// An object as the watchers keep it: shared, so a status evaluation reads the index's copy
/// instead of cloning every object of the cluster.
pub type Shared = std::sync::Arc<Value>;

impl Observed {
    /// Nothing of the cluster exists on the management cluster.
    pub fn is_empty(&self) -> bool {
        self.cluster.is_none()
            && self.openstack_cluster.is_none()
            && self.control_plane.is_none()
            && self.machine_deployments.is_empty()
            && self.machines.is_empty()
    }

    /// The version each worker Machine runs (`spec.version`), with its nodegroup.
    pub fn kubelet_versions(&self) -> Vec<crate::driver::KubeletVersion> {
        self.machines
            .iter()
            .filter(|m| label(m, "cluster.x-k8s.io/control-plane").is_none())
            .filter_map(|m| {
                Some(crate::driver::KubeletVersion {
                    nodegroup: self.nodegroup_of(m).and_then(|u| Uuid::parse_str(u).ok()),
                    machine: name(m).to_string(),
                    version: s(m, "/spec/version")?.to_string(),
                })
            })
            .collect()
    }

    /// The Machines that failed for good (their own failure or their server's), not being
    /// deleted already: (namespace, name).
    pub fn failed_machines(&self) -> Vec<(String, String)> {
        self.machines
            .iter()
            .filter(|m| m.pointer("/metadata/deletionTimestamp").is_none())
            .filter(|m| failure_of(m).or_else(|| self.server_failure(m)).is_some())
            .filter_map(|m| {
                Some((
                    s(m, "/metadata/namespace")?.to_string(),
                    name(m).to_string(),
                ))
            })
            .collect()
    }

    /// The first failure of a machine not being deleted (its own or its server's), as
    /// `Machine <name>: <why>`: what ends an upgrade whose rollout cannot go on.
    pub fn machine_failure(&self) -> Option<String> {
        self.machines
            .iter()
            .filter(|m| m.pointer("/metadata/deletionTimestamp").is_none())
            .find_map(|m| {
                failure_of(m)
                    .or_else(|| self.server_failure(m))
                    .map(|f| format!("Machine {}: {f}", name(m)))
            })
    }

    /// The nodegroup a Machine belongs to: its own nodegroup label, else — a Machine of an
    /// adopted cluster, whose template the Magnum driver wrote — by the labels CAPI gives every
    /// Machine: a control-plane machine's is the control plane's nodegroup, a
    /// MachineDeployment's that deployment's (whose nodegroup label adoption set). Read from the
    /// index's objects as they are (a status pass copies none of them).
    pub fn nodegroup_of<'a>(&'a self, m: &'a Value) -> Option<&'a str> {
        if let Some(ng) = label(m, LABEL_NODEGROUP_UUID) {
            return Some(ng);
        }
        let owner = if label(m, "cluster.x-k8s.io/control-plane").is_some() {
            self.control_plane.as_deref()
        } else {
            let d = label(m, "cluster.x-k8s.io/deployment-name")?;
            self.machine_deployments
                .iter()
                .find(|md| name(md) == d)
                .map(|md| &**md)
        };
        label(owner?, LABEL_NODEGROUP_UUID)
    }

    /// Why the server of Machine `m` failed (a create Nova refused, an instance in `ERROR`):
    /// the OpenStackServer named after its OpenStackMachine, which CAPO never retries.
    fn server_failure(&self, m: &Value) -> Option<String> {
        if s(m, "/spec/infrastructureRef/kind") != Some("OpenStackMachine") {
            return None;
        }
        let osm = s(m, "/spec/infrastructureRef/name")?;
        let server = self.servers.iter().find(|v| name(v) == osm)?;
        if server.pointer("/metadata/deletionTimestamp").is_some() {
            return None;
        }
        failure_of(server).map(|f| format!("OpenStackServer {osm}: {f}"))
    }
}

/// The control plane `cp` (as the management cluster has it) runs `version` on every one of its
/// machines, all ready and up to date with its current spec (which asks for `version`).
pub fn control_plane_at(cp: &Value, version: &str) -> bool {
    s(cp, "/spec/version") == Some(version)
        && s(cp, "/status/version") == Some(version)
        && i32::try_from(int(cp, "/spec/replicas").unwrap_or(0))
            .is_ok_and(|n| replicas_ready(cp, n))
}

/// How far the control plane `cp` is: `<ready>/<replicas> machines ready, <up to date> up to
/// date, running <version>`.
pub fn control_plane_progress(cp: &Value) -> String {
    format!(
        "{}/{} machines ready, {} up to date, running {}",
        int(cp, "/status/readyReplicas").unwrap_or(0),
        int(cp, "/spec/replicas").unwrap_or(0),
        int(cp, "/status/upToDateReplicas").unwrap_or(0),
        s(cp, "/status/version").unwrap_or("an unknown version")
    )
}

/// A nodegroup as Postgres has it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodegroupState {
    pub uuid: Uuid,
    pub is_master: bool,
    pub status: Option<Status>,
    pub status_reason: Option<String>,
    pub node_count: i32,
    pub addresses: Vec<String>,
}

/// The cluster as Postgres has it, plus what the queue says.
#[derive(Debug, Clone)]
pub struct ClusterState {
    pub status: Status,
    pub status_reason: Option<String>,
    pub nodegroups: Vec<NodegroupState>,
    /// An operation is recorded but not yet applied: what CAPI shows is not the new spec yet.
    pub operation_open: bool,
    /// The last operation failed for a reason CAPI converging does not undo (a credential or CA
    /// rotation): the status stays as the failure left it.
    pub final_failure: bool,
    /// When the current create/update must have finished.
    pub deadline: Option<DateTime<Utc>>,
    pub api_address: Option<String>,
    pub coe_version: Option<String>,
    pub health_status: Option<String>,
    pub health_status_reason: Value,
    /// Why the cluster's application credential no longer works (the periodic check).
    pub credential_problem: Option<String>,
    /// How long an add-on may stay in progress before it counts as failed (`[capi]
    /// addon_install_timeout_secs`).
    pub addon_install_timeout: chrono::Duration,
    /// How long CAPO may retry an OpenStack error before it is the cluster's failure (`[capi]
    /// openstack_retry_grace_secs`).
    pub openstack_retry_grace: chrono::Duration,
    /// When upstream support of each Kubernetes minor ends (`kubernetes` in the health reason).
    pub kube_end_of_life: std::sync::Arc<crate::domain::kube_support::EndOfLife>,
}

/// What should change in Postgres; `None`/empty = leave as is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    pub status: Option<(Status, Option<String>)>,
    pub api_address: Option<String>,
    pub coe_version: Option<String>,
    pub health: Option<(String, Value)>,
    pub nodegroups: Vec<NodegroupChange>,
    /// When to evaluate again though nothing changes (an add-on in progress would pass its
    /// timeout then); not a change to write.
    pub recheck_at: Option<DateTime<Utc>>,
}

impl Evaluation {
    /// Nothing to write.
    pub fn is_noop(&self) -> bool {
        Evaluation {
            recheck_at: None,
            ..self.clone()
        } == Evaluation::default()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodegroupChange {
    pub uuid: Uuid,
    pub status: Option<(Status, Option<String>)>,
    pub addresses: Option<Vec<String>>,
    /// An autoscaled nodegroup's size as the autoscaler set it (its MachineDeployment's replicas).
    pub node_count: Option<i32>,
}

/// The replicas of a MachineDeployment the autoscaler owns (it carries the bounds annotation).
fn autoscaled_replicas(md: &Value) -> Option<i32> {
    md.pointer("/metadata/annotations")?
        .get(super::values::ANNOTATION_AUTOSCALER_MIN)?;
    i32::try_from(int(md, "/spec/replicas")?).ok()
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn int(v: &Value, ptr: &str) -> Option<i64> {
    v.pointer(ptr).and_then(Value::as_i64)
}

fn label<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn conditions(v: &Value) -> impl Iterator<Item = &Value> {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The status (`True`/`False`/`Unknown`) of condition `t`.
fn condition<'a>(v: &'a Value, t: &str) -> Option<&'a Value> {
    conditions(v).find(|c| s(c, "/type") == Some(t))
}

fn condition_true(v: &Value, t: &str) -> bool {
    condition(v, t).and_then(|c| s(c, "/status")) == Some("True")
}

/// The object has seen its latest spec (no `observedGeneration` = assume so).
fn observed_current(v: &Value) -> bool {
    match (
        int(v, "/status/observedGeneration"),
        int(v, "/metadata/generation"),
    ) {
        (Some(o), Some(g)) => o >= g,
        _ => true,
    }
}

/// A replica set (KCP or MD) that has converged on `want` ready, up-to-date replicas, and, for a
/// control plane that reports the version its machines run (`status.version`, their lowest),
/// runs its `spec.version`: until then an upgrade's rollout is not over (a v1beta1 control
/// plane has no `upToDateReplicas` to say so), and the cluster's `coe_version`, read from that
/// status, would be written the old one beside `UPDATE_COMPLETE`.
fn replicas_ready(v: &Value, want: i32) -> bool {
    let want = i64::from(want);
    let spec = int(v, "/spec/replicas").unwrap_or(want);
    let n = |p: &str| int(v, p).unwrap_or(0);
    let at_version = match (s(v, "/status/version"), s(v, "/spec/version")) {
        (Some(have), Some(asked)) => have == asked,
        _ => true,
    };
    at_version
        && observed_current(v)
        && v.pointer("/metadata/deletionTimestamp").is_none()
        && spec == want
        && n("/status/replicas") == want
        && n("/status/readyReplicas") == want
        && int(v, "/status/upToDateReplicas").unwrap_or(want) == want
        && int(v, "/status/availableReplicas").unwrap_or(want) == want
}

/// Why an object says it failed (CAPO's failure fields, or a condition that is `False` with a
/// failure reason), if it does.
fn failure_of(v: &Value) -> Option<String> {
    if let Some(m) = s(v, "/status/failureMessage").filter(|m| !m.is_empty()) {
        return Some(m.to_string());
    }
    conditions(v).find_map(|c| {
        let failed = s(c, "/status") == Some("False")
            && (s(c, "/severity") == Some("Error")
                || s(c, "/reason").is_some_and(|r| r.contains("Failed") || r.contains("Error")));
        failed.then(|| {
            let reason = s(c, "/reason").unwrap_or_default();
            match s(c, "/message").filter(|m| !m.is_empty()) {
                Some(m) => format!("{reason}: {m}"),
                None => reason.to_string(),
            }
        })
    })
}

/// Since when CAPO has been retrying an error it does not call terminal: its v1beta1 `Ready`
/// condition `False` with severity `Warning` ("a temporary issue that may be resolved on
/// retry"), no `failureMessage`. `None` when the error is terminal or there is none.
fn retried_since(v: &Value) -> Option<DateTime<Utc>> {
    if s(v, "/status/failureMessage").is_some_and(|m| !m.is_empty()) {
        return None;
    }
    let ready = condition(v, "Ready")?;
    if s(ready, "/status") != Some("False") || s(ready, "/severity") != Some("Warning") {
        return None;
    }
    s(ready, "/lastTransitionTime")
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

fn name(v: &Value) -> &str {
    s(v, "/metadata/name").unwrap_or_default()
}

/// The addresses of the machines of one nodegroup: external first, else internal.
fn addresses(machines: &[&Value]) -> Vec<String> {
    let mut out = Vec::new();
    for m in machines {
        let addrs = m
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let pick = |t: &str| {
            addrs
                .iter()
                .find(|a| s(a, "/type") == Some(t))
                .and_then(|a| s(a, "/address"))
                .map(str::to_string)
        };
        if let Some(a) = pick("ExternalIP").or_else(|| pick("InternalIP")) {
            out.push(a);
        }
    }
    out.sort();
    out
}

/// `https://host:port` once CAPI knows the control-plane endpoint.
pub fn api_address(cluster: &Value) -> Option<String> {
    let host = s(cluster, "/spec/controlPlaneEndpoint/host").filter(|h| !h.is_empty())?;
    let port = int(cluster, "/spec/controlPlaneEndpoint/port").unwrap_or(6443);
    if host.contains(':') {
        Some(format!("https://[{host}]:{port}"))
    } else {
        Some(format!("https://{host}:{port}"))
    }
}

fn completed(s: Status) -> Status {
    match s {
        Status::CreateInProgress | Status::CreateFailed | Status::CreateComplete => {
            Status::CreateComplete
        }
        _ => Status::UpdateComplete,
    }
}

fn failed(s: Status) -> Status {
    match s {
        Status::CreateInProgress | Status::CreateFailed => Status::CreateFailed,
        _ => Status::UpdateFailed,
    }
}

/// Statuses a watcher may move on from (in progress, or failed and possibly recovering).
fn watched(s: Status) -> bool {
    matches!(
        s,
        Status::CreateInProgress
            | Status::UpdateInProgress
            | Status::CreateFailed
            | Status::UpdateFailed
    )
}

/// Compares what CAPI reports with what Postgres has, at `now`: the facts (API address,
/// version), each nodegroup's verdict, the cluster's status from those, and its health.
pub fn evaluate(obs: &Observed, db: &ClusterState, now: DateTime<Utc>) -> Evaluation {
    let mut ev = Evaluation::default();
    if db.status == Status::DeleteInProgress || db.status == Status::DeleteComplete {
        return ev; // the delete operation reports its own progress
    }
    if let Some(addr) = obs.cluster.as_deref().and_then(api_address)
        && db.api_address.as_deref() != Some(addr.as_str())
    {
        ev.api_address = Some(addr);
    }
    if let Some(cp) = &obs.control_plane
        && let Some(v) = s(cp, "/status/version").or_else(|| s(cp, "/spec/version"))
        && db.coe_version.as_deref() != Some(v)
    {
        ev.coe_version = Some(v.to_string());
    }

    let verdicts: Vec<Verdict> = db
        .nodegroups
        .iter()
        .map(|ng| nodegroup_verdict(obs, ng, db.operation_open))
        .collect();
    let rolling = topology_rolling(obs);
    let all_ready =
        obs.cluster.is_some() && rolling.is_none() && verdicts.iter().all(|v| v.waiting.is_none());
    let mut waiting: Vec<String> = rolling
        .into_iter()
        .chain(verdicts.iter().filter_map(|v| v.waiting.clone()))
        .collect();
    let mut retry_until = None;
    let infra_failure = obs.openstack_cluster.as_deref().and_then(|oc| {
        let failure = format!("OpenStackCluster: {}", failure_of(oc)?);
        match retried_since(oc).map(|since| since + db.openstack_retry_grace) {
            Some(until) if now < until => {
                retry_until = Some(until);
                waiting.push(format!("{failure} (CAPO retries)"));
                None
            }
            _ => Some(failure),
        }
    });
    let failure = infra_failure.or_else(|| verdicts.iter().find_map(|v| v.failure.clone()));
    ev.nodegroups = verdicts.into_iter().filter_map(|v| v.change).collect();

    if watched(db.status) && !db.operation_open && !db.final_failure {
        let next = cluster_status(db, all_ready, failure, &waiting, now);
        if let Some(n) = next
            && (n.0 != db.status || n.1 != db.status_reason)
        {
            ev.status = Some(n);
        }
    }

    let (health, recheck_at) = health(obs, db, now);
    ev.recheck_at = match (recheck_at, retry_until) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // A cluster nothing is known of yet (a new one, before its objects are seen) keeps the
    // health Magnum gives it, none: writing `UNKNOWN` would only cost each create a second
    // transaction.
    let untold = db.health_status.is_none() && obs.cluster.is_none() && health.0 == "UNKNOWN";
    if !untold
        && (Some(health.0.as_str()) != db.health_status.as_deref()
            || health.1 != db.health_status_reason)
    {
        ev.health = Some(health);
    }
    ev
}

/// For a ClusterClass cluster (magnum-cluster-api's, adopted), what its topology still has to
/// roll out: a control plane or MachineDeployment not yet at `spec.topology.version`. CAPI's
/// topology controller writes the version into them after the Cluster changes, and until it
/// has, their replicas look ready at the old version, so an upgrade is not complete.
fn topology_rolling(obs: &Observed) -> Option<String> {
    let want = obs
        .cluster
        .as_deref()
        .and_then(|c| s(c, "/spec/topology/version"))?;
    let behind = |v: &Value, path: &str| s(v, path).is_some_and(|have| have != want);
    let cp = obs
        .control_plane
        .as_deref()
        .filter(|cp| behind(cp, "/spec/version"))
        .map(name);
    let md = obs
        .machine_deployments
        .iter()
        .find(|md| behind(md, "/spec/template/spec/version"))
        .map(|md| name(md));
    cp.or(md)
        .map(|n| format!("{n}: the topology's {want} not rolled out yet"))
}

/// What one nodegroup's objects say.
struct Verdict {
    /// What it still waits for (`None`: ready).
    waiting: Option<String>,
    /// Its first machine's (or owner's) failure.
    failure: Option<String>,
    /// What to write of it, when anything changed.
    change: Option<NodegroupChange>,
}

/// A nodegroup's objects (its control plane or MachineDeployment, its machines) against its
/// row: ready or not (never while an operation of the cluster is open, which may not be
/// applied yet), failed, and what changed (status, addresses, autoscaled node count).
fn nodegroup_verdict(obs: &Observed, ng: &NodegroupState, operation_open: bool) -> Verdict {
    let id = ng.uuid.to_string();
    let owner: Option<&Value> = if ng.is_master {
        obs.control_plane.as_deref()
    } else {
        obs.machine_deployments
            .iter()
            .find(|md| label(md, LABEL_NODEGROUP_UUID) == Some(id.as_str()))
            .map(|md| &**md)
    };
    let machines: Vec<&Value> = obs
        .machines
        .iter()
        .filter(|m| obs.nodegroup_of(m) == Some(id.as_str()))
        .map(|m| &**m)
        .collect();
    let autoscaled = (!ng.is_master)
        .then(|| owner.and_then(autoscaled_replicas))
        .flatten();
    let want = autoscaled.unwrap_or(ng.node_count);
    let ready = !operation_open && owner.is_some_and(|o| replicas_ready(o, want));
    // A machine being deleted is on its way out: CAPO may report a delete it retries
    // (`InstanceDeleteFailed` while its OpenStackServer goes first), which is no failure of the
    // nodegroup; a delete that cannot finish is the delete's to report.
    let failure = machines
        .iter()
        .filter(|m| m.pointer("/metadata/deletionTimestamp").is_none())
        .find_map(|m| {
            failure_of(m)
                .or_else(|| obs.server_failure(m))
                .map(|f| format!("Machine {}: {f}", name(m)))
        })
        .or_else(|| owner.and_then(failure_of));
    let what = if ng.is_master {
        "control plane"
    } else {
        "nodegroup"
    };
    let waiting = (!ready).then(|| match owner {
        Some(o) => format!(
            "{what} {}: {}/{} machines ready",
            name(o),
            int(o, "/status/readyReplicas").unwrap_or(0),
            want
        ),
        None => format!("{what} {id}: not created yet"),
    });
    let mut change = NodegroupChange {
        uuid: ng.uuid,
        status: None,
        addresses: None,
        node_count: autoscaled.filter(|n| *n != ng.node_count && !operation_open),
    };
    let addrs = addresses(&machines);
    if addrs != ng.addresses && !(machines.is_empty() && owner.is_none()) {
        change.addresses = Some(addrs);
    }
    if let Some(st) = ng.status.filter(|s| watched(*s)) {
        let next = if ready {
            Some((completed(st), None))
        } else {
            failure.as_ref().map(|f| (failed(st), Some(f.clone())))
        };
        if let Some(n) = next
            && (n.0 != st || n.1 != ng.status_reason)
        {
            change.status = Some(n);
        }
    }
    let changed =
        change.status.is_some() || change.addresses.is_some() || change.node_count.is_some();
    Verdict {
        waiting,
        failure,
        change: changed.then_some(change),
    }
}

/// The cluster's next status from its nodegroups' verdicts: complete when all are ready, failed
/// with the first failure, failed when its deadline passed with what it still waits for.
fn cluster_status(
    db: &ClusterState,
    all_ready: bool,
    failure: Option<String>,
    waiting: &[String],
    now: DateTime<Utc>,
) -> Option<(Status, Option<String>)> {
    if all_ready {
        Some((completed(db.status), None))
    } else if let Some(f) = failure {
        Some((failed(db.status), Some(f)))
    } else if db.deadline.is_some_and(|d| now >= d)
        && matches!(
            db.status,
            Status::CreateInProgress | Status::UpdateInProgress
        )
    {
        Some((
            failed(db.status),
            Some(format!(
                "Timed out waiting for the cluster: {}",
                if waiting.is_empty() {
                    "the Cluster object does not exist".to_string()
                } else {
                    waiting.join("; ")
                }
            )),
        ))
    } else {
        None
    }
}

/// `HEALTHY` when the Cluster is available, every machine's node is ready, the cluster's
/// credential works and no add-on failed; the reason maps `api` and `<node>.Ready` as Magnum's
/// own monitor does, plus `credential` when the credential does not work (CAPO and the cloud
/// provider cannot act) and `addon.<add-on>` per add-on ([`addon_health`]). Also when to look
/// again for an add-on still in progress.
fn health(
    obs: &Observed,
    db: &ClusterState,
    now: DateTime<Utc>,
) -> ((String, Value), Option<DateTime<Utc>>) {
    let credential_problem = db.credential_problem.as_deref();
    let mut reason = Map::new();
    if let Some(p) = credential_problem {
        reason.insert("credential".into(), json!(p));
    }
    let Some(cluster) = &obs.cluster else {
        let status = if reason.is_empty() {
            "UNKNOWN"
        } else {
            "UNHEALTHY"
        };
        return ((status.into(), Value::Object(reason)), None);
    };
    let api_ok =
        condition_true(cluster, "ControlPlaneAvailable") || condition_true(cluster, "Available");
    reason.insert("api".into(), json!(if api_ok { "ok" } else { "nok" }));
    let mut nodes: BTreeMap<String, bool> = BTreeMap::new();
    for m in &obs.machines {
        let node = s(m, "/status/nodeRef/name").unwrap_or_else(|| name(m));
        let ready = condition_true(m, "NodeReady") || condition_true(m, "Ready");
        nodes.insert(format!("{node}.Ready"), ready);
    }
    let all =
        api_ok && !nodes.is_empty() && nodes.values().all(|r| *r) && credential_problem.is_none();
    for (k, v) in nodes {
        reason.insert(k, json!(if v { "True" } else { "False" }));
    }
    let addons = addon_health::of_cluster(
        name(cluster),
        obs.addons.iter().map(|a| &**a),
        now,
        db.addon_install_timeout,
    );
    reason.extend(addons.entries.into_iter().map(|(k, v)| (k, json!(v))));
    // Informational: a cluster out of upstream support still works (the status is unchanged).
    let version = obs
        .control_plane
        .as_deref()
        .and_then(|cp| s(cp, "/status/version").or_else(|| s(cp, "/spec/version")))
        .or(db.coe_version.as_deref());
    if let Some(why) = version.and_then(|v| db.kube_end_of_life.out_of_support(v, now.date_naive()))
    {
        reason.insert(crate::domain::kube_support::REASON_KEY.into(), json!(why));
    }
    let status = if all && addons.healthy {
        "HEALTHY"
    } else {
        "UNHEALTHY"
    };
    ((status.into(), Value::Object(reason)), addons.recheck_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ng(master: bool, count: i32, status: Status) -> NodegroupState {
        NodegroupState {
            uuid: Uuid::new_v4(),
            is_master: master,
            status: Some(status),
            status_reason: None,
            node_count: count,
            addresses: vec![],
        }
    }

    fn state(status: Status, ngs: Vec<NodegroupState>) -> ClusterState {
        ClusterState {
            status,
            status_reason: None,
            nodegroups: ngs,
            operation_open: false,
            final_failure: false,
            deadline: None,
            api_address: None,
            coe_version: None,
            health_status: None,
            health_status_reason: json!({}),
            credential_problem: None,
            addon_install_timeout: chrono::Duration::minutes(30),
            openstack_retry_grace: chrono::Duration::minutes(2),
            kube_end_of_life: Default::default(),
        }
    }

    fn ready_set(n: i32) -> Value {
        json!({"metadata": {"generation": 2}, "spec": {"replicas": n},
               "status": {"observedGeneration": 2, "replicas": n, "readyReplicas": n,
                          "upToDateReplicas": n, "availableReplicas": n, "version": "v1.33.5"}})
    }

    fn machine(ng: Uuid, ip: &str, ready: bool) -> Value {
        json!({"metadata": {"name": format!("m-{ip}"), "labels": {LABEL_NODEGROUP_UUID: ng.to_string()}},
               "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                          "nodeRef": {"name": format!("node-{ip}")},
                          "conditions": [{"type": "NodeReady", "status": if ready {"True"} else {"False"}, "reason": "x"}]}})
    }

    fn observed(master: &NodegroupState, worker: &NodegroupState) -> Observed {
        let mut md = ready_set(worker.node_count);
        md["metadata"]["labels"] = json!({LABEL_NODEGROUP_UUID: worker.uuid.to_string()});
        md["metadata"]["name"] = json!("k-md");
        Observed {
            cluster: Some(Shared::new(
                json!({"spec": {"controlPlaneEndpoint": {"host": "203.0.113.9", "port": 6443}},
                                 "status": {"conditions": [{"type": "Available", "status": "True"}]}}),
            )),
            openstack_cluster: Some(Shared::new(json!({"status": {"ready": true}}))),
            control_plane: Some(Shared::new(ready_set(master.node_count))),
            machine_deployments: vec![Shared::new(md)],
            machines: vec![
                Shared::new(machine(master.uuid, "10.0.0.3", true)),
                Shared::new(machine(worker.uuid, "10.0.0.9", true)),
            ],
            addons: Vec::new(),
            servers: Vec::new(),
        }
    }

    /// CAPO v0.14 reports Nova's refusal on the machine's OpenStackServer only (the Machine and
    /// its OpenStackMachine keep waiting, and CAPO never retries the server): the nodegroup and
    /// the create fail with Nova's words; a server of another machine, or one going away, does
    /// not count.
    #[test]
    fn a_server_nova_refused_fails_its_machines_nodegroup_with_novas_reason() {
        let (m, w) = (
            ng(true, 1, Status::CreateInProgress),
            ng(false, 2, Status::CreateInProgress),
        );
        let db = state(Status::CreateInProgress, vec![m.clone(), w.clone()]);
        let mut obs = observed(&m, &w);
        let mut waiting = machine(w.uuid, "10.0.0.10", false);
        waiting["spec"] = json!({"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "OpenStackMachine", "name": "k-md-x7"}});
        obs.machines.push(Shared::new(waiting));
        std::sync::Arc::make_mut(&mut obs.machine_deployments[0])["status"]["readyReplicas"] =
            json!(1);
        let refused = |name: &str| {
            json!({"metadata": {"name": name}, "status": {"instanceState": "ERROR", "conditions": [
                {"type": "InstanceReady", "status": "False", "severity": "Error",
                 "reason": "InstanceCreateFailed",
                 "message": "create OpenStack instance: Quota exceeded for cores: Requested 4, but already used 0 of 3 cores"}]}})
        };
        obs.servers = vec![Shared::new(refused("k-md-other"))];
        assert_eq!(
            evaluate(&obs, &db, Utc::now()).status,
            None,
            "not its server"
        );
        let mut going = refused("k-md-x7");
        going["metadata"]["deletionTimestamp"] = json!("set");
        obs.servers = vec![Shared::new(going)];
        assert_eq!(
            evaluate(&obs, &db, Utc::now()).status,
            None,
            "being deleted"
        );
        obs.servers = vec![Shared::new(refused("k-md-x7"))];
        let ev = evaluate(&obs, &db, Utc::now());
        let (st, reason) = ev.status.unwrap();
        assert_eq!(st, Status::CreateFailed);
        assert_eq!(
            reason.as_deref(),
            Some(
                "Machine m-10.0.0.10: OpenStackServer k-md-x7: InstanceCreateFailed: create \
                 OpenStack instance: Quota exceeded for cores: Requested 4, but already used 0 \
                 of 3 cores"
            )
        );
        let ngc = ev.nodegroups.iter().find(|c| c.uuid == w.uuid).unwrap();
        assert_eq!(ngc.status.as_ref().unwrap().0, Status::CreateFailed);
    }

    /// A new cluster (its create recorded, nothing of it observed yet) keeps Magnum's null
    /// health: its evaluation writes nothing. Once it had one, losing sight of its objects makes
    /// it `UNKNOWN`, and a credential problem is said at once.
    #[test]
    fn a_cluster_nothing_is_known_of_keeps_no_health_until_something_is() {
        let (m, w) = (
            ng(true, 1, Status::CreateInProgress),
            ng(false, 1, Status::CreateInProgress),
        );
        let mut db = state(Status::CreateInProgress, vec![m.clone(), w.clone()]);
        db.operation_open = true;
        let ev = evaluate(&Observed::default(), &db, Utc::now());
        assert!(ev.is_noop(), "{ev:?}");
        let ev = evaluate(&observed(&m, &w), &db, Utc::now());
        assert_eq!(ev.health.unwrap().0, "HEALTHY");
        db.health_status = Some("HEALTHY".into());
        let ev = evaluate(&Observed::default(), &db, Utc::now());
        assert_eq!(ev.health.unwrap().0, "UNKNOWN");
        db.health_status = None;
        db.credential_problem = Some("its owner is disabled".into());
        let ev = evaluate(&Observed::default(), &db, Utc::now());
        assert_eq!(ev.health.unwrap().0, "UNHEALTHY");
    }

    /// A rollout's machine being deleted while CAPO retries its server's delete is no failure.
    #[test]
    fn a_machine_being_deleted_fails_nothing() {
        let (m, w) = (
            ng(true, 1, Status::UpdateInProgress),
            ng(false, 1, Status::UpdateInProgress),
        );
        let db = state(Status::UpdateInProgress, vec![m.clone(), w.clone()]);
        let mut obs = observed(&m, &w);
        let mut going = machine(w.uuid, "10.0.0.7", false);
        going["metadata"]["deletionTimestamp"] = json!("set");
        going["status"]["conditions"] = json!([{"type": "InfrastructureReady", "status": "False",
            "severity": "Error", "reason": "InstanceDeleteFailed",
            "message": "openstackservers \"k-md-x\" not found"}]);
        obs.machines.push(Shared::new(going));
        let ev = evaluate(&obs, &db, Utc::now());
        assert_eq!(ev.status, Some((Status::UpdateComplete, None)));
    }

    #[test]
    fn a_topology_upgrade_completes_only_once_its_version_is_rolled_out() {
        let (m, w) = (
            ng(true, 1, Status::UpdateInProgress),
            ng(false, 1, Status::UpdateInProgress),
        );
        let db = state(Status::UpdateInProgress, vec![m.clone(), w.clone()]);
        let mut obs = observed(&m, &w);
        let mut cluster = (*obs.cluster.take().unwrap()).clone();
        cluster["spec"]["topology"] = json!({"version": "v1.34.1"});
        obs.cluster = Some(Shared::new(cluster));
        let mut cp = (*obs.control_plane.take().unwrap()).clone();
        cp["spec"]["version"] = json!("v1.33.5");
        obs.control_plane = Some(Shared::new(cp.clone()));
        let ev = evaluate(&obs, &db, Utc::now());
        assert_eq!(ev.status, None, "replicas ready at the old version");
        cp["spec"]["version"] = json!("v1.34.1");
        cp["status"]["version"] = json!("v1.34.1");
        obs.control_plane = Some(Shared::new(cp));
        let mut md = (*obs.machine_deployments[0]).clone();
        md["spec"]["template"]["spec"]["version"] = json!("v1.33.5");
        obs.machine_deployments = vec![Shared::new(md.clone())];
        assert_eq!(
            evaluate(&obs, &db, Utc::now()).status,
            None,
            "workers behind"
        );
        md["spec"]["template"]["spec"]["version"] = json!("v1.34.1");
        obs.machine_deployments = vec![Shared::new(md)];
        let ev = evaluate(&obs, &db, Utc::now());
        assert_eq!(ev.status, Some((Status::UpdateComplete, None)));
        assert_eq!(ev.coe_version.as_deref(), Some("v1.34.1"));
    }

    #[test]
    fn an_upgrade_completes_with_the_version_its_control_plane_runs() {
        let (m, w) = (
            ng(true, 1, Status::UpdateInProgress),
            ng(false, 1, Status::UpdateInProgress),
        );
        let mut db = state(Status::UpdateInProgress, vec![m.clone(), w.clone()]);
        db.coe_version = Some("v1.33.5".into());
        let mut obs = observed(&m, &w);
        // Asked for v1.34.1, its replicas still ready on v1.33.5 (the rollout has not begun).
        std::sync::Arc::make_mut(obs.control_plane.as_mut().unwrap())["spec"]["version"] =
            json!("v1.34.1");
        let ev = evaluate(&obs, &db, Utc::now());
        assert_eq!(ev.status, None, "the control plane still runs v1.33.5");
        assert_eq!(ev.coe_version, None);
        std::sync::Arc::make_mut(obs.control_plane.as_mut().unwrap())["status"]["version"] =
            json!("v1.34.1");
        let ev = evaluate(&obs, &db, Utc::now());
        assert_eq!(ev.status, Some((Status::UpdateComplete, None)));
        assert_eq!(ev.coe_version.as_deref(), Some("v1.34.1"));
    }

    #[test]
    fn ready_objects_complete_the_create_with_addresses_and_version() {
        let (m, w) = (
            ng(true, 1, Status::CreateInProgress),
            ng(false, 1, Status::CreateInProgress),
        );
        let db = state(Status::CreateInProgress, vec![m.clone(), w.clone()]);
        let ev = evaluate(&observed(&m, &w), &db, Utc::now());
        assert_eq!(ev.status, Some((Status::CreateComplete, None)));
        assert_eq!(ev.api_address.as_deref(), Some("https://203.0.113.9:6443"));
        assert_eq!(ev.coe_version.as_deref(), Some("v1.33.5"));
        assert_eq!(ev.nodegroups.len(), 2);
        assert_eq!(
            ev.nodegroups[0].addresses,
            Some(vec!["10.0.0.3".to_string()])
        );
        assert_eq!(
            ev.nodegroups[1].status,
            Some((Status::CreateComplete, None))
        );
        let (h, reason) = ev.health.unwrap();
        assert_eq!(h, "HEALTHY");
        assert_eq!(reason["api"], "ok");
        assert_eq!(reason["node-10.0.0.9.Ready"], "True");
    }

    #[test]
    fn nothing_concludes_while_an_operation_is_not_applied_yet() {
        let (m, w) = (
            ng(true, 1, Status::UpdateInProgress),
            ng(false, 3, Status::UpdateInProgress),
        );
        let mut db = state(Status::UpdateInProgress, vec![m.clone(), w.clone()]);
        let mut obs = observed(&m, &ng(false, 1, Status::UpdateComplete));
        std::sync::Arc::make_mut(&mut obs.machine_deployments[0])["metadata"]["labels"] =
            json!({LABEL_NODEGROUP_UUID: w.uuid.to_string()});
        // The MD still shows one replica: not ready for three.
        assert_eq!(evaluate(&obs, &db, Utc::now()).status, None);
        db.operation_open = true;
        obs.machine_deployments[0] = Shared::new({
            let mut md = ready_set(3);
            md["metadata"]["labels"] = json!({LABEL_NODEGROUP_UUID: w.uuid.to_string()});
            md
        });
        assert_eq!(evaluate(&obs, &db, Utc::now()).status, None);
        db.operation_open = false;
        assert_eq!(
            evaluate(&obs, &db, Utc::now()).status,
            Some((Status::UpdateComplete, None))
        );
        // A spec the controller has not observed yet is not ready.
        std::sync::Arc::make_mut(&mut obs.machine_deployments[0])["metadata"]["generation"] =
            json!(3);
        assert_eq!(evaluate(&obs, &db, Utc::now()).status, None);
    }

    #[test]
    fn machine_failures_fail_the_create_and_convergence_recovers() {
        let (m, w) = (
            ng(true, 1, Status::CreateInProgress),
            ng(false, 2, Status::CreateInProgress),
        );
        let db = state(Status::CreateInProgress, vec![m.clone(), w.clone()]);
        let mut obs = observed(&m, &w);
        let mut bad = machine(w.uuid, "10.0.0.10", false);
        bad["status"]["conditions"] = json!([{"type": "InfrastructureReady", "status": "False",
            "reason": "InstanceCreateFailed", "message": "No valid host was found"}]);
        obs.machines.push(Shared::new(bad));
        std::sync::Arc::make_mut(&mut obs.machine_deployments[0])["status"]["readyReplicas"] =
            json!(1);
        let ev = evaluate(&obs, &db, Utc::now());
        let (st, reason) = ev.status.unwrap();
        assert_eq!(st, Status::CreateFailed);
        assert!(reason.unwrap().contains("No valid host was found"));
        let ngc = ev.nodegroups.iter().find(|c| c.uuid == w.uuid).unwrap();
        assert_eq!(ngc.status.as_ref().unwrap().0, Status::CreateFailed);
        // Later everything converges: the failed cluster recovers.
        let mut db = state(Status::CreateFailed, vec![m.clone(), w.clone()]);
        db.status_reason = Some("x".into());
        let mut obs = observed(&m, &w);
        obs.machines
            .push(Shared::new(machine(w.uuid, "10.0.0.11", true)));
        assert_eq!(
            evaluate(&obs, &db, Utc::now()).status,
            Some((Status::CreateComplete, None))
        );
    }

    #[test]
    fn the_deadline_fails_with_what_is_missing() {
        let (m, w) = (
            ng(true, 1, Status::CreateInProgress),
            ng(false, 1, Status::CreateInProgress),
        );
        let mut db = state(Status::CreateInProgress, vec![m.clone(), w.clone()]);
        let mut obs = observed(&m, &w);
        std::sync::Arc::make_mut(obs.control_plane.as_mut().unwrap())["status"]["readyReplicas"] =
            json!(0);
        assert_eq!(evaluate(&obs, &db, Utc::now()).status, None);
        db.deadline = Some(Utc::now() - chrono::Duration::seconds(1));
        let (st, reason) = evaluate(&obs, &db, Utc::now()).status.unwrap();
        assert_eq!(st, Status::CreateFailed);
        assert!(reason.unwrap().contains("0/1 machines ready"));
    }

    /// CAPO's retried error, as the real CAPO v0.14.7 writes it for a Neutron call that failed:
    /// the cluster stays in progress (the error among what it waits for) until the grace is
    /// over, and is evaluated again then though nothing changes; a terminal one fails at once.
    #[test]
    fn errors_capo_retries_fail_the_cluster_only_after_the_grace() {
        let (m, w) = (
            ng(true, 1, Status::CreateInProgress),
            ng(false, 1, Status::CreateInProgress),
        );
        let mut db = state(Status::CreateInProgress, vec![m.clone(), w.clone()]);
        let retried = |since: DateTime<Utc>| {
            let t = since.to_rfc3339();
            json!({"status": {"ready": false, "conditions": [
                {"type": "Ready", "status": "False", "severity": "Warning",
                 "reason": "OpenStackError", "lastTransitionTime": t,
                 "message": "failed to reconcile network: Expected HTTP response code [201 202] \
                    but got 503 instead"},
                {"type": "NetworkReady", "status": "False", "severity": "Error",
                 "reason": "NetworkCreateFailed", "lastTransitionTime": t,
                 "message": "Failed to reconcile network: got 503"}]}})
        };
        let now = Utc::now();
        let mut obs = observed(&m, &w);
        obs.control_plane = None;
        obs.openstack_cluster = Some(Shared::new(retried(now - chrono::Duration::seconds(10))));
        let ev = evaluate(&obs, &db, now);
        assert_eq!(ev.status, None, "still in progress while CAPO retries");
        let expected = now - chrono::Duration::seconds(10) + db.openstack_retry_grace;
        assert!(
            ev.recheck_at
                .is_some_and(|t| (t - expected).num_milliseconds().abs() < 1000),
            "{:?}",
            ev.recheck_at
        );

        obs.openstack_cluster = Some(Shared::new(retried(now - chrono::Duration::minutes(3))));
        let (st, reason) = evaluate(&obs, &db, now).status.unwrap();
        assert_eq!(st, Status::CreateFailed);
        assert!(reason.unwrap().contains("got 503"));

        // At the create's deadline the error is what it names.
        obs.openstack_cluster = Some(Shared::new(retried(now - chrono::Duration::seconds(10))));
        db.deadline = Some(now - chrono::Duration::seconds(1));
        let (st, reason) = evaluate(&obs, &db, now).status.unwrap();
        assert_eq!(st, Status::CreateFailed);
        assert!(reason.unwrap().contains("(CAPO retries)"));
    }

    #[test]
    fn infrastructure_failures_are_reported_and_health_follows_nodes() {
        let (m, w) = (
            ng(true, 1, Status::CreateInProgress),
            ng(false, 1, Status::CreateInProgress),
        );
        let db = state(Status::CreateInProgress, vec![m.clone(), w.clone()]);
        let mut obs = observed(&m, &w);
        obs.control_plane = None;
        obs.openstack_cluster = Some(Shared::new(json!({"status": {"ready": false,
            "failureReason": "CreateError", "failureMessage": "failed to reconcile external network"}})));
        let ev = evaluate(&obs, &db, Utc::now());
        assert_eq!(ev.status.as_ref().unwrap().0, Status::CreateFailed);
        assert!(
            ev.status
                .unwrap()
                .1
                .unwrap()
                .starts_with("OpenStackCluster: failed to reconcile")
        );
        obs.machines[1] = Shared::new(machine(w.uuid, "10.0.0.9", false));
        assert_eq!(ev.health.unwrap().0, "HEALTHY");
        let now = Utc::now();
        let ((h, r), _) = health(&obs, &db, now);
        assert_eq!(h, "UNHEALTHY");
        assert_eq!(r["node-10.0.0.9.Ready"], "False");
        assert_eq!(health(&Observed::default(), &db, now).0.0, "UNKNOWN");
        // A credential that no longer works makes the cluster unhealthy, and says why.
        let mut db = db;
        db.credential_problem =
            Some("Application credential x no longer authenticates: its owner is disabled".into());
        let ((h, r), _) = health(&obs, &db, now);
        assert_eq!(h, "UNHEALTHY");
        assert!(
            r["credential"]
                .as_str()
                .unwrap()
                .contains("owner is disabled")
        );
        assert_eq!(r["api"], "ok");
    }

    #[test]
    fn a_failed_addon_makes_the_cluster_unhealthy_but_not_failed() {
        let master = ng(true, 1, Status::CreateInProgress);
        let worker = ng(false, 1, Status::CreateInProgress);
        let mut obs = observed(&master, &worker);
        std::sync::Arc::make_mut(obs.cluster.as_mut().unwrap())["metadata"] =
            json!({"name": "k", "namespace": "ns"});
        let hrp = |proxy: &str, status: &str, message: &str| {
            Shared::new(json!({"metadata": {"name": format!("{proxy}-k"),
                                "labels": {crate::capi::LABEL_HELM_CHART_PROXY: proxy}},
                   "status": {"conditions": [{"type": "Ready", "status": status,
                              "reason": "HelmInstallOrUpgradeFailed", "message": message}]}}))
        };
        obs.addons = vec![
            hrp("k-cni", "True", ""),
            hrp(
                "k-metrics-server",
                "False",
                "error installing metrics-server",
            ),
        ];
        let db = state(Status::CreateInProgress, vec![master, worker]);
        let ev = evaluate(&obs, &db, Utc::now());
        assert_eq!(ev.status.unwrap().0, Status::CreateComplete);
        let (h, reason) = ev.health.unwrap();
        assert_eq!(h, "UNHEALTHY");
        assert_eq!(reason["addon.cni"], "Ready");
        assert_eq!(
            reason["addon.metrics-server"],
            "Failed: error installing metrics-server"
        );
        // Still installing: reported, not unhealthy, and looked at again when it would time out.
        let created = Utc::now() - chrono::Duration::minutes(1);
        obs.addons = vec![Shared::new(json!({"metadata": {"name": "x",
            "creationTimestamp": created.to_rfc3339(),
            "labels": {crate::capi::LABEL_HELM_CHART_PROXY: "k-cni"}}}))];
        let ev = evaluate(&obs, &db, Utc::now());
        let (h, reason) = ev.health.unwrap();
        assert_eq!(h, "HEALTHY");
        assert_eq!(reason["addon.cni"], "Progressing: installing");
        assert!(ev.recheck_at.is_some_and(|t| t > Utc::now()));
    }

    #[test]
    fn an_adopted_clusters_machines_belong_to_the_nodegroup_of_their_control_plane_or_deployment() {
        let (cp, md) = (Uuid::new_v4(), Uuid::new_v4());
        let o = Observed {
            control_plane: Some(Shared::new(
                json!({"metadata": {"name": "kcp", "labels": {LABEL_NODEGROUP_UUID: cp.to_string()}}}),
            )),
            machine_deployments: vec![Shared::new(
                json!({"metadata": {"name": "md", "labels": {LABEL_NODEGROUP_UUID: md.to_string()}}}),
            )],
            ..Observed::default()
        };
        let machine = |labels: Value| json!({"metadata": {"name": "m", "labels": labels}});
        let of = |m: Value| o.nodegroup_of(&m).map(str::to_string);
        assert_eq!(
            of(machine(json!({"cluster.x-k8s.io/control-plane": ""}))),
            Some(cp.to_string())
        );
        assert_eq!(
            of(machine(json!({"cluster.x-k8s.io/deployment-name": "md"}))),
            Some(md.to_string())
        );
        assert_eq!(
            of(machine(
                json!({"cluster.x-k8s.io/deployment-name": "other"})
            )),
            None
        );
    }

    #[test]
    fn ipv6_endpoints_are_bracketed() {
        let c = json!({"spec": {"controlPlaneEndpoint": {"host": "2001:db8::1", "port": 443}}});
        assert_eq!(
            api_address(&c).as_deref(),
            Some("https://[2001:db8::1]:443")
        );
        assert_eq!(
            api_address(&json!({"spec": {"controlPlaneEndpoint": {"host": ""}}})),
            None
        );
    }
}
