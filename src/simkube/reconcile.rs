//! What each simulated CAPI/CAPO controller does with one object in one step: Cluster
//! (finalizer, adoption, endpoint, aggregate status, cascading delete), OpenStackCluster
//! (network, load balancer, floating IP or an injected failure), KubeadmControlPlane and
//! MachineDeployment (machines, scaling, rolling replacement on template/version changes and
//! `spec.rollout.after`, status), Machine/OpenStackMachine (provisioning or an injected
//! `InstanceCreateFailed`; then kubeadm init/join against the modelled PKI, see `pki`) and
//! MachineHealthCheck (status only).

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::controllers::Simulator;
use super::kubeconfig;
use super::objects::*;
use super::pki::{Bootstrap, Ca, Installed, check_pins, parse_bundle};
use super::store::{ObjectKey, Store, StoreError, Target, now_rfc3339, random_suffix};
use super::workload;

/// `NodeHealthy` reasons of a Machine whose kubeadm failed (the failure is final: kubeadm runs
/// once; the Machine has to be replaced).
const KUBEADM_INIT_FAILED: &str = "KubeadmInitFailed";
const KUBEADM_JOIN_FAILED: &str = "KubeadmJoinFailed";

/// What a reconcile needs: the store, the failure markers of this step, the simulator's
/// index and address pools.
pub(crate) struct Ctx<'a> {
    pub sim: &'a Simulator,
    pub store: &'a Store,
    pub markers: &'a [String],
}

impl Ctx<'_> {
    fn fails(&self, text: &str) -> bool {
        self.markers
            .iter()
            .any(|m| !m.is_empty() && text.contains(m.as_str()))
    }

    fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.store.get(&kind.resource(), ns, name)
    }

    fn set_status(&self, kind: Kind, obj: &Value, status: Value) -> Result<Arc<Value>, StoreError> {
        self.store.update(
            &kind.resource(),
            namespace(obj),
            name(obj),
            Target::Status,
            move |o| {
                if let Some(m) = o.as_object_mut() {
                    m.insert("status".into(), status);
                }
            },
        )
    }

    fn edit(
        &self,
        kind: Kind,
        obj: &Value,
        f: impl FnOnce(&mut Value),
    ) -> Result<Arc<Value>, StoreError> {
        self.store
            .update(&kind.resource(), namespace(obj), name(obj), Target::Main, f)
    }

    fn delete(&self, key: &ObjectKey) -> Result<(), StoreError> {
        match self.store.delete(&key.resource, &key.namespace, &key.name) {
            Ok(_) | Err(StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Reconciles one object (absent objects and kinds without a controller are no-ops).
pub(crate) fn reconcile(cx: &Ctx<'_>, key: &ObjectKey) -> Result<(), StoreError> {
    let Some(kind) = Kind::of(&key.resource) else {
        return Ok(());
    };
    let Some(obj) = cx.store.get(&key.resource, &key.namespace, &key.name) else {
        return Ok(());
    };
    match kind {
        Kind::Cluster => cluster(cx, obj),
        Kind::InfraCluster => infra_cluster(cx, &obj),
        Kind::ControlPlane => control_plane(cx, &obj),
        Kind::MachineDeployment => machine_deployment(cx, &obj),
        Kind::Machine => machine(cx, &obj),
        Kind::MachineHealthCheck => health_check(cx, &obj),
        _ => Ok(()),
    }
}

fn failed_condition_message(conds: &[&Cond]) -> String {
    conds
        .iter()
        .filter(|c| c.status != CondStatus::True)
        .map(|c| {
            if c.message.is_empty() {
                format!("* {}: {}", c.kind, c.reason)
            } else {
                format!("* {}: {}", c.kind, c.message.replace('\n', "\n  "))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// ---- Cluster ----

/// CAPI sets the Cluster as owner of its infrastructure, control plane and deployments.
fn adopt(cx: &Ctx<'_>, kind: Kind, obj: &Value, cluster: &Value) -> Result<(), StoreError> {
    let cluster_name = name(cluster).to_string();
    if is_deleting(obj)
        || (is_owned_by(obj, uid(cluster)) && label(obj, LABEL_CLUSTER_NAME) == Some(&cluster_name))
    {
        return Ok(());
    }
    let owner = owner_ref(CAPI_VERSION, "Cluster", cluster, false);
    cx.edit(kind, obj, move |o| {
        add_owner_ref(o, owner);
        set_at(
            o,
            &["metadata", "labels"],
            LABEL_CLUSTER_NAME,
            json!(cluster_name),
        );
    })?;
    Ok(())
}

/// Live (not deleting) MachineDeployments and MachineHealthChecks belonging to the cluster by
/// `spec.clusterName`, in one pass over its parts.
fn deployments_and_health_checks(
    cx: &Ctx<'_>,
    ns: &str,
    cluster: &str,
) -> (Vec<Arc<Value>>, Vec<Arc<Value>>) {
    let (mut mds, mut mhcs) = (Vec::new(), Vec::new());
    for k in cx.sim.cluster_parts(ns, cluster, None) {
        let list = if Kind::MachineDeployment.is(&k.resource) {
            &mut mds
        } else if Kind::MachineHealthCheck.is(&k.resource) {
            &mut mhcs
        } else {
            continue;
        };
        if let Some(o) = cx.store.get(&k.resource, &k.namespace, &k.name)
            && !is_deleting(&o)
            && str_at(&o, &["spec", "clusterName"]) == Some(cluster)
        {
            list.push(o);
        }
    }
    (mds, mhcs)
}

/// A Cluster condition that is True while the same condition is True on its control plane or
/// any deployment, listing which.
fn rollup(
    kind: &'static str,
    sources: &[(&str, &Value)],
    yes: &'static str,
    no: &'static str,
) -> Cond {
    let active: Vec<String> = sources
        .iter()
        .filter(|(_, o)| condition_true(o, kind))
        .map(|(what, o)| {
            let m = condition_message(o, kind);
            format!(
                "* {what} {}: {}",
                name(o),
                if m.is_empty() { kind.to_string() } else { m }
            )
        })
        .collect();
    if active.is_empty() {
        Cond::new(kind, CondStatus::False, no, "")
    } else {
        Cond::new(kind, CondStatus::True, yes, active.join("\n"))
    }
}

/// A Cluster condition summarising `MachinesReady` of the given owners.
fn machines_ready(kind: &'static str, sources: &[(&str, &Value)]) -> Cond {
    if sources.is_empty() {
        return Cond::new(kind, CondStatus::True, "NoReplicas", "");
    }
    let not_ready: Vec<String> = sources
        .iter()
        .filter(|(_, o)| !condition_true(o, "MachinesReady"))
        .map(|(what, o)| {
            format!(
                "* {what} {}: {}",
                name(o),
                condition_message(o, "MachinesReady")
            )
        })
        .collect();
    Cond::check(
        kind,
        not_ready.is_empty(),
        "Ready",
        "NotReady",
        not_ready.join("\n"),
    )
}

/// `desiredReplicas` (`spec.replicas`, default 1) and the replica counts of `status`, summed
/// over `objs` (the control plane, or every MachineDeployment).
fn replicas_summary<'a>(objs: impl IntoIterator<Item = &'a Arc<Value>>) -> Value {
    const COUNTS: [&str; 4] = [
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "upToDateReplicas",
    ];
    let mut desired = 0;
    let mut counts = [0i64; 4];
    for o in objs {
        desired += i64_at(o, &["spec", "replicas"]).unwrap_or(1);
        for (sum, f) in counts.iter_mut().zip(COUNTS) {
            *sum += i64_at(o, &["status", f]).unwrap_or(0);
        }
    }
    let mut out = json!({"desiredReplicas": desired});
    for (f, n) in COUNTS.into_iter().zip(counts) {
        out[f] = json!(n);
    }
    out
}

fn cluster(cx: &Ctx<'_>, mut c: Arc<Value>) -> Result<(), StoreError> {
    if is_deleting(&c) {
        return cluster_delete(cx, &c);
    }
    if !has_finalizer(&c, FINALIZER_CLUSTER) {
        c = cx.edit(Kind::Cluster, &c, |o| add_finalizer(o, FINALIZER_CLUSTER))?;
    }
    let (ns, cname) = (namespace(&c).to_string(), name(&c).to_string());
    let infra_name = str_at(&c, &["spec", "infrastructureRef", "name"]).map(str::to_string);
    let cp_name = str_at(&c, &["spec", "controlPlaneRef", "name"]).map(str::to_string);
    let osc = infra_name
        .as_deref()
        .and_then(|n| cx.get(Kind::InfraCluster, &ns, n));
    let kcp = cp_name
        .as_deref()
        .and_then(|n| cx.get(Kind::ControlPlane, &ns, n));
    let (mds, health_checks) = deployments_and_health_checks(cx, &ns, &cname);
    let adoptees = osc
        .iter()
        .map(|o| (Kind::InfraCluster, o))
        .chain(kcp.iter().map(|o| (Kind::ControlPlane, o)))
        .chain(mds.iter().map(|o| (Kind::MachineDeployment, o)))
        .chain(health_checks.iter().map(|o| (Kind::MachineHealthCheck, o)));
    for (kind, obj) in adoptees {
        adopt(cx, kind, obj, &c)?;
    }

    let infra_ready = osc.as_deref().is_some_and(|o| {
        bool_at(o, &["status", "ready"])
            && str_at(o, &["spec", "controlPlaneEndpoint", "host"]).is_some()
    });
    if infra_ready
        && str_at(&c, &["spec", "controlPlaneEndpoint", "host"]).is_none()
        && let Some(endpoint) = osc
            .as_deref()
            .and_then(|o| at(o, &["spec", "controlPlaneEndpoint"]))
            .cloned()
    {
        c = cx.edit(Kind::Cluster, &c, |o| {
            set_at(o, &["spec"], "controlPlaneEndpoint", endpoint)
        })?;
    }

    let prev = c.get("status");
    let infra_provisioned = infra_ready
        || bool_at(
            &c,
            &["status", "initialization", "infrastructureProvisioned"],
        );
    let infra = match (&osc, infra_name.as_deref()) {
        (_, None) => Cond::new(
            "InfrastructureReady",
            CondStatus::False,
            "InfrastructureDoesNotExist",
            "spec.infrastructureRef is not set",
        ),
        (None, Some(n)) => Cond::new(
            "InfrastructureReady",
            CondStatus::False,
            "InfrastructureDoesNotExist",
            format!("OpenStackCluster {n} does not exist"),
        ),
        (Some(_), _) if infra_provisioned => {
            Cond::new("InfrastructureReady", CondStatus::True, "Ready", "")
        }
        (Some(o), _) => Cond::new(
            "InfrastructureReady",
            CondStatus::False,
            "NotReady",
            str_at(o, &["status", "failureMessage"])
                .unwrap_or("OpenStackCluster status.ready is false"),
        ),
    };
    let cp_initialized = kcp
        .as_deref()
        .is_some_and(|k| bool_at(k, &["status", "initialization", "controlPlaneInitialized"]))
        || bool_at(&c, &["status", "initialization", "controlPlaneInitialized"]);
    let cp_available = kcp
        .as_deref()
        .is_some_and(|k| condition_true(k, "Available"));
    let cp_message = match (&kcp, cp_name.as_deref()) {
        (Some(k), _) => {
            let m = condition_message(k, "Available");
            if m.is_empty() {
                "Control plane is not available yet".to_string()
            } else {
                m
            }
        }
        (None, Some(n)) => format!("KubeadmControlPlane {n} does not exist"),
        (None, None) => "spec.controlPlaneRef is not set".to_string(),
    };
    let initialized = Cond::check(
        "ControlPlaneInitialized",
        cp_initialized,
        "Initialized",
        "NotInitialized",
        "Control plane not yet initialized",
    );
    let cp = Cond::check(
        "ControlPlaneAvailable",
        cp_available,
        "Available",
        "NotAvailable",
        cp_message,
    );
    let unavailable: Vec<String> = mds
        .iter()
        .filter(|md| !condition_true(md, "Available"))
        .map(|md| {
            let m = condition_message(md, "Available");
            format!(
                "* MachineDeployment {}: {}",
                name(md),
                if m.is_empty() {
                    "not available".into()
                } else {
                    m
                }
            )
        })
        .collect();
    let workers = if mds.is_empty() {
        Cond::new("WorkersAvailable", CondStatus::True, "NoWorkers", "")
    } else {
        Cond::check(
            "WorkersAvailable",
            unavailable.is_empty(),
            "Available",
            "NotAvailable",
            unavailable.join("\n"),
        )
    };
    let available_ok =
        infra_provisioned && cp_initialized && cp_available && workers.status == CondStatus::True;
    let available = Cond::check(
        "Available",
        available_ok,
        "Available",
        "NotAvailable",
        failed_condition_message(&[&infra, &initialized, &cp, &workers]),
    );
    let deleting = Cond::new("Deleting", CondStatus::False, "NotDeleting", "");
    let control_plane: Vec<(&str, &Value)> =
        kcp.iter().map(|k| ("KubeadmControlPlane", &**k)).collect();
    let deployments: Vec<(&str, &Value)> =
        mds.iter().map(|m| ("MachineDeployment", &**m)).collect();
    let both: Vec<(&str, &Value)> = control_plane.iter().chain(&deployments).copied().collect();
    let rollups = [
        rollup("RollingOut", &both, "RollingOut", "NotRollingOut"),
        rollup("ScalingUp", &both, "ScalingUp", "NotScalingUp"),
        rollup("ScalingDown", &both, "ScalingDown", "NotScalingDown"),
        machines_ready("ControlPlaneMachinesReady", &control_plane),
        machines_ready("WorkerMachinesReady", &deployments),
        Cond::check(
            "RemoteConnectionProbe",
            cp_initialized,
            "ProbeSucceeded",
            "ProbeFailed",
            "Remote connection not established yet",
        ),
    ];
    let endpoint_set = str_at(&c, &["spec", "controlPlaneEndpoint", "host"]).is_some();
    let phase = if infra_provisioned && endpoint_set {
        "Provisioned"
    } else if infra_name.is_some() {
        "Provisioning"
    } else {
        "Pending"
    };
    let observed = generation(&c);
    let mut status = json!({
        "observedGeneration": observed,
        "phase": phase,
        "initialization": {
            "infrastructureProvisioned": infra_provisioned,
            "controlPlaneInitialized": cp_initialized,
        },
        "conditions": conditions_v1beta2(
            prev,
            &[[available, infra, initialized, cp, workers, deleting].as_slice(), &rollups].concat(),
            observed,
            &now_rfc3339(),
        ),
    });
    if kcp.is_some() {
        status["controlPlane"] = replicas_summary(&kcp);
    }
    if !mds.is_empty() {
        status["workers"] = replicas_summary(&mds);
    }
    let c = cx.set_status(Kind::Cluster, &c, status)?;
    // KCP regenerates a deleted `<cluster>-kubeconfig` (a deleted Secret marks the Cluster).
    if cp_initialized && kcp.as_deref().is_some_and(|k| !is_deleting(k)) {
        kubeconfig::ensure(cx.store, &c, &cx.sim.workload_url(&ns, &cname))?;
    }
    Ok(())
}

/// Deleting a Cluster: delete its parts (and kubeconfig), then drop the finalizer.
fn cluster_delete(cx: &Ctx<'_>, c: &Value) -> Result<(), StoreError> {
    if !has_finalizer(c, FINALIZER_CLUSTER) {
        return Ok(());
    }
    let (ns, cname) = (namespace(c), name(c));
    let uuid = label(c, LABEL_CLUSTER_UUID);
    let mut keys = cx.sim.cluster_parts(ns, cname, uuid);
    let refs: Vec<ObjectKey> = [
        ("infrastructureRef", Kind::InfraCluster),
        ("controlPlaneRef", Kind::ControlPlane),
    ]
    .into_iter()
    .filter_map(|(field, kind)| {
        str_at(c, &["spec", field, "name"]).map(|n| ObjectKey::new(&kind.resource(), ns, n))
    })
    .collect();
    keys.extend(refs.iter().cloned());
    keys.push(ObjectKey::new(
        &Kind::Secret.resource(),
        ns,
        &kubeconfig::secret_name(cname),
    ));
    keys.sort();
    keys.dedup();
    let remaining: Vec<(ObjectKey, Arc<Value>)> = keys
        .into_iter()
        .filter_map(|k| {
            cx.store
                .get(&k.resource, &k.namespace, &k.name)
                .map(|o| (k, o))
        })
        .filter(|(k, o)| {
            refs.contains(k)
                || k.resource.is_core()
                || cluster_names(o).iter().any(|n| n == cname)
                || (uuid.is_some() && label(o, LABEL_CLUSTER_UUID) == uuid)
        })
        .collect();
    let machines_left = |cp: bool| {
        remaining.iter().any(|(k, o)| {
            Kind::Machine.is(&k.resource) && label(o, LABEL_CONTROL_PLANE).is_some() == cp
        })
    };
    let reason = if machines_left(false) {
        "WaitingForWorkersDeletion"
    } else if machines_left(true)
        || remaining
            .iter()
            .any(|(k, _)| Kind::ControlPlane.is(&k.resource))
    {
        "WaitingForControlPlaneDeletion"
    } else if remaining.is_empty() {
        "DeletionCompleted"
    } else {
        "WaitingForInfrastructureDeletion"
    };
    let message = if remaining.is_empty() {
        String::new()
    } else {
        format!("Waiting for {} objects to be deleted", remaining.len())
    };
    let observed = generation(c);
    let prev = c.get("status").cloned().unwrap_or_else(|| json!({}));
    let deleting = conditions_v1beta2(
        Some(&prev),
        &[Cond::new("Deleting", CondStatus::True, reason, message)],
        observed,
        &now_rfc3339(),
    );
    let mut status = prev.clone();
    let mut conds: Vec<Value> = at(&prev, &["conditions"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|c| c["type"] != "Deleting")
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    conds.extend(deleting.as_array().cloned().unwrap_or_default());
    if let Some(s) = status.as_object_mut() {
        s.insert("phase".into(), json!("Deleting"));
        s.insert("conditions".into(), Value::Array(conds));
    }
    cx.set_status(Kind::Cluster, c, status)?;
    if remaining.is_empty() {
        cx.edit(Kind::Cluster, c, |o| remove_finalizer(o, FINALIZER_CLUSTER))?;
        cx.sim.workloads().remove(ns, cname);
        return Ok(());
    }
    for (key, obj) in &remaining {
        if !is_deleting(obj) {
            cx.delete(key)?;
        }
    }
    Ok(())
}

// ---- OpenStackCluster ----

/// `cidr`'s network with the last octet replaced (`10.6.0.0/24`, 10 → `10.6.0.10`).
fn host_in(cidr: &str, host: u8) -> String {
    let net = cidr.split('/').next().unwrap_or_default();
    match net.rsplit_once('.') {
        Some((prefix, _)) if net.split('.').count() == 4 => format!("{prefix}.{host}"),
        _ => format!("10.6.0.{host}"),
    }
}

fn infra_cluster(cx: &Ctx<'_>, osc: &Value) -> Result<(), StoreError> {
    if is_deleting(osc) || bool_at(osc, &["status", "ready"]) {
        return Ok(());
    }
    // CAPO waits until the CAPI cluster controller has set the owner reference.
    let Some((cluster_name, _)) = owners(osc, "Cluster").into_iter().next() else {
        return Ok(());
    };
    let (ns, now) = (namespace(osc), now_rfc3339());
    let prev = osc.get("status");
    let external = str_at(osc, &["spec", "externalNetwork", "id"])
        .or_else(|| str_at(osc, &["spec", "externalNetwork", "filter", "name"]));
    if let Some(ext) = external.filter(|e| cx.fails(e)) {
        let message = format!(
            "failed to reconcile external network: failed to get external network: no external \
             network found matching {ext}"
        );
        let status = json!({
            "ready": false,
            "failureReason": "UpdateError",
            "failureMessage": message,
            "conditions": conditions_v1beta1(prev, &[Cond::new("Ready", CondStatus::False, "UpdateError", message.clone())], &now),
        });
        cx.set_status(Kind::InfraCluster, osc, status)?;
        return Ok(());
    }
    let host = str_at(osc, &["spec", "controlPlaneEndpoint", "host"])
        .or_else(|| str_at(osc, &["spec", "apiServerFloatingIP"]))
        .map(str::to_string)
        .unwrap_or_else(|| cx.sim.next_floating_ip());
    let port = i64_at(osc, &["spec", "controlPlaneEndpoint", "port"])
        .or_else(|| i64_at(osc, &["spec", "apiServerPort"]))
        .unwrap_or(6443);
    let osc = if str_at(osc, &["spec", "controlPlaneEndpoint", "host"]).is_none() {
        let endpoint = json!({"host": host, "port": port});
        cx.edit(Kind::InfraCluster, osc, |o| {
            set_at(o, &["spec"], "controlPlaneEndpoint", endpoint)
        })?
    } else {
        Arc::new(osc.clone())
    };
    let cidr = at(&osc, &["spec", "managedSubnets"])
        .and_then(Value::as_array)
        .and_then(|s| s.first())
        .and_then(|s| str_at(s, &["cidr"]))
        .unwrap_or("10.6.0.0/24")
        .to_string();
    let base = format!("k8s-clusterapi-cluster-{ns}-{cluster_name}");
    let id = || uuid::Uuid::new_v4().to_string();
    let (network_id, subnet_id) = (id(), id());
    let mut status = json!({
        "ready": true,
        "initialization": {"provisioned": true},
        "externalNetwork": {"id": external.map(str::to_string).unwrap_or_else(id), "name": "public"},
        "network": {
            "id": network_id,
            "name": base,
            "subnets": [{"cidr": cidr, "id": subnet_id, "name": base}],
        },
        "router": {"id": id(), "name": base, "ips": [cx.sim.next_floating_ip()]},
        "controlPlaneSecurityGroup": {"id": id(), "name": format!("{base}-secgroup-controlplane")},
        "workerSecurityGroup": {"id": id(), "name": format!("{base}-secgroup-worker")},
        "failureDomains": {"nova": {"controlPlane": true}},
        "conditions": conditions_v1beta1(prev, &[Cond::new("Ready", CondStatus::True, "Ready", "")], &now),
    });
    if bool_at(&osc, &["spec", "apiServerLoadBalancer", "enabled"]) {
        status["apiServerLoadBalancer"] = json!({
            "id": id(),
            "name": format!("{base}-kubeapi"),
            "ip": host,
            "internalIP": host_in(&cidr, 250),
            "loadBalancerNetwork": {"id": network_id, "name": base, "subnets": [{"cidr": cidr, "id": subnet_id, "name": base}]},
        });
    }
    cx.set_status(Kind::InfraCluster, &osc, status)?;
    Ok(())
}

// ---- Machines (shared by the control plane and deployments) ----

/// What an owner needs to know about one of its Machines.
struct MachineView {
    key: ObjectKey,
    name: String,
    created: String,
    deleting: bool,
    ready: bool,
    /// Why provisioning (InfrastructureReady `InstanceCreateFailed`) or kubeadm failed.
    failure: Option<String>,
    up_to_date: bool,
    delete_first: bool,
    version: Option<String>,
}

fn machines_of(
    cx: &Ctx<'_>,
    owner: &Value,
    up_to_date: impl Fn(&Value) -> bool,
) -> Vec<MachineView> {
    let mut out: Vec<MachineView> = cx
        .store
        .dependents(uid(owner))
        .into_iter()
        .filter(|(k, _)| Kind::Machine.is(&k.resource))
        .map(|(key, m)| MachineView {
            name: name(&m).to_string(),
            created: str_at(&m, &["metadata", "creationTimestamp"])
                .unwrap_or_default()
                .to_string(),
            deleting: is_deleting(&m),
            ready: condition_true(&m, "Ready"),
            failure: failure_message(&m, "InfrastructureReady", &["InstanceCreateFailed"])
                .or_else(|| kubeadm_failure(&m)),
            up_to_date: up_to_date(&m),
            delete_first: annotation(&m, ANNOTATION_DELETE_MACHINE).is_some(),
            version: str_at(&m, &["spec", "version"]).map(str::to_string),
            key,
        })
        .collect();
    out.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
    out
}

/// The order in which machines are removed: annotated first, then not ready, then by age
/// (oldest first when `oldest`, else newest first).
fn victims(mut candidates: Vec<&MachineView>, oldest: bool) -> Vec<&MachineView> {
    candidates.sort_by(|a, b| {
        let age = if oldest {
            (&a.created, &a.name).cmp(&(&b.created, &b.name))
        } else {
            (&b.created, &b.name).cmp(&(&a.created, &a.name))
        };
        (!a.delete_first, a.ready)
            .cmp(&(!b.delete_first, b.ready))
            .then(age)
    });
    candidates
}

fn failures(machines: &[&MachineView]) -> Vec<String> {
    machines
        .iter()
        .filter_map(|m| {
            m.failure
                .as_ref()
                .map(|f| format!("* Machine {}: {f}", m.name))
        })
        .collect()
}

/// Semantic-ish version order (`v1.30.2` < `v1.31.0`).
fn version_key(v: &str) -> Vec<u64> {
    v.trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().unwrap_or(0))
        .collect()
}

/// `spec.rollout.after` of a KubeadmControlPlane or MachineDeployment once reached (Machines
/// created before it are outdated); one still in the future has the owner looked at again next
/// step.
fn rollout_after(cx: &Ctx<'_>, kind: Kind, owner: &Value) -> Option<DateTime<Utc>> {
    let after = str_at(owner, &["spec", "rollout", "after"])?;
    let after = DateTime::parse_from_rfc3339(after)
        .ok()?
        .with_timezone(&Utc);
    if after > Utc::now() {
        cx.sim.mark(ObjectKey::new(
            &kind.resource(),
            namespace(owner),
            name(owner),
        ));
        return None;
    }
    Some(after)
}

/// False for a Machine created before a reached `rollout.after` (by the simulator's own
/// creation time, else `creationTimestamp`).
fn rolled_out(m: &Value, after: Option<DateTime<Utc>>) -> bool {
    let Some(after) = after else {
        return true;
    };
    annotation(m, ANNOTATION_CREATED)
        .or_else(|| str_at(m, &["metadata", "creationTimestamp"]))
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|created| created.with_timezone(&Utc) >= after)
}

struct NewMachine<'a> {
    ns: &'a str,
    cluster: &'a str,
    prefix: &'a str,
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
    owner: Value,
    version: Option<&'a str>,
    infra_template: &'a str,
    bootstrap_template: Option<&'a str>,
    failure_domain: Option<&'a str>,
}

/// Creates a Machine and its OpenStackMachine (cloned from the template); false when the
/// template does not exist.
fn create_machine(cx: &Ctx<'_>, m: NewMachine<'_>) -> Result<bool, StoreError> {
    let Some(template) = cx.get(Kind::InfraMachineTemplate, m.ns, m.infra_template) else {
        return Ok(false);
    };
    let mut labels = m.labels;
    labels.insert(LABEL_CLUSTER_NAME.into(), json!(m.cluster));
    let mut annotations = m.annotations;
    annotations.insert(ANNOTATION_INFRA_TEMPLATE.into(), json!(m.infra_template));
    annotations.insert(
        ANNOTATION_CREATED.into(),
        json!(Utc::now().to_rfc3339_opts(SecondsFormat::Nanos, true)),
    );
    if let Some(b) = m.bootstrap_template {
        annotations.insert(ANNOTATION_BOOTSTRAP_TEMPLATE.into(), json!(b));
    }
    for _ in 0..8 {
        let machine_name = format!("{}-{}", m.prefix, random_suffix());
        let mut spec = json!({
            "clusterName": m.cluster,
            "bootstrap": {"configRef": {"apiGroup": BOOTSTRAP_GROUP, "kind": "KubeadmConfig", "name": machine_name}},
            "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "OpenStackMachine", "name": machine_name},
        });
        if let Some(v) = m.version {
            spec["version"] = json!(v);
        }
        if let Some(fd) = m.failure_domain {
            spec["failureDomain"] = json!(fd);
        }
        let machine = json!({
            "apiVersion": CAPI_VERSION,
            "kind": "Machine",
            "metadata": {
                "name": machine_name,
                "namespace": m.ns,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [m.owner],
                "finalizers": [FINALIZER_MACHINE],
            },
            "spec": spec,
        });
        let created = match cx.store.create(&Kind::Machine.resource(), m.ns, machine) {
            Ok(c) => c,
            Err(StoreError::AlreadyExists(_)) => continue,
            Err(e) => return Err(e),
        };
        let infra = json!({
            "apiVersion": INFRA_VERSION,
            "kind": "OpenStackMachine",
            "metadata": {
                "name": machine_name,
                "namespace": m.ns,
                "labels": labels,
                "annotations": {
                    "cluster.x-k8s.io/cloned-from-name": m.infra_template,
                    "cluster.x-k8s.io/cloned-from-groupkind": "OpenStackMachineTemplate.infrastructure.cluster.x-k8s.io",
                },
                "ownerReferences": [owner_ref(CAPI_VERSION, "Machine", &created, true)],
            },
            "spec": at(&template, &["spec", "template", "spec"]).cloned().unwrap_or_else(|| json!({})),
        });
        match cx.store.create(&Kind::InfraMachine.resource(), m.ns, infra) {
            Ok(_) | Err(StoreError::AlreadyExists(_)) => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// The conditions the control plane and deployments report alike: `MachinesUpToDate`,
/// `RollingOut`, `ScalingDown` and `Deleting` (False: deleting owners are not reconciled).
fn rollout_conditions(outdated: usize, live: usize, desired: usize) -> [Cond; 4] {
    [
        Cond::check(
            "MachinesUpToDate",
            outdated == 0,
            "UpToDate",
            "NotUpToDate",
            format!("{outdated} Machines are not up-to-date"),
        ),
        if outdated == 0 {
            Cond::new("RollingOut", CondStatus::False, "NotRollingOut", "")
        } else {
            Cond::new(
                "RollingOut",
                CondStatus::True,
                "RollingOut",
                format!("Rolling out {outdated} not up-to-date replicas"),
            )
        },
        if live > desired && outdated == 0 {
            Cond::new(
                "ScalingDown",
                CondStatus::True,
                "ScalingDown",
                format!("Scaling down from {live} to {desired} replicas"),
            )
        } else {
            Cond::new("ScalingDown", CondStatus::False, "NotScalingDown", "")
        },
        Cond::new("Deleting", CondStatus::False, "NotDeleting", ""),
    ]
}

// ---- KubeadmControlPlane ----

fn control_plane(cx: &Ctx<'_>, kcp: &Value) -> Result<(), StoreError> {
    if is_deleting(kcp) {
        return Ok(());
    }
    let ns = namespace(kcp);
    let Some(cluster_name) = label(kcp, LABEL_CLUSTER_NAME)
        .map(str::to_string)
        .or_else(|| owners(kcp, "Cluster").into_iter().next().map(|(n, _)| n))
    else {
        return Ok(());
    };
    let Some(cluster) = cx.get(Kind::Cluster, ns, &cluster_name) else {
        return Ok(());
    };
    let desired = i64_at(kcp, &["spec", "replicas"]).unwrap_or(1).max(0) as usize;
    let version = str_at(kcp, &["spec", "version"]);
    let template = str_at(
        kcp,
        &[
            "spec",
            "machineTemplate",
            "spec",
            "infrastructureRef",
            "name",
        ],
    )
    .or_else(|| {
        str_at(
            kcp,
            &["spec", "machineTemplate", "infrastructureRef", "name"],
        )
    });
    let after = rollout_after(cx, Kind::ControlPlane, kcp);
    let machines = machines_of(cx, kcp, |m| {
        str_at(m, &["spec", "version"]) == version
            && annotation(m, ANNOTATION_INFRA_TEMPLATE) == template
            && rolled_out(m, after)
    });
    let live: Vec<&MachineView> = machines.iter().filter(|m| !m.deleting).collect();
    let outdated: Vec<&MachineView> = live.iter().copied().filter(|m| !m.up_to_date).collect();
    let infra_ok = bool_at(
        &cluster,
        &["status", "initialization", "infrastructureProvisioned"],
    ) && str_at(&cluster, &["spec", "controlPlaneEndpoint", "host"]).is_some();

    let mut waiting: Option<String> = None;
    if !infra_ok {
        waiting = Some("Waiting for the cluster infrastructure to be ready".into());
    } else if machines.iter().any(|m| m.deleting) {
        waiting = Some("Waiting for machines being deleted".into());
    } else if let Some(m) = live.iter().find(|m| !m.ready) {
        waiting = Some(match &m.failure {
            Some(f) => format!("* Machine {}: {f}", m.name),
            None => format!("Waiting for Machine {} to become ready", m.name),
        });
    } else if (!outdated.is_empty() && live.len() <= desired)
        || (outdated.is_empty() && live.len() < desired)
    {
        match template {
            None => waiting = Some("spec.machineTemplate.spec.infrastructureRef is not set".into()),
            Some(t) => {
                let mut labels =
                    string_map(at(kcp, &["spec", "machineTemplate", "metadata", "labels"]));
                labels.insert(LABEL_CONTROL_PLANE.into(), json!(""));
                labels.insert(LABEL_CONTROL_PLANE_NAME.into(), json!(name(kcp)));
                let created = create_machine(
                    cx,
                    NewMachine {
                        ns,
                        cluster: &cluster_name,
                        prefix: name(kcp),
                        labels,
                        annotations: string_map(at(
                            kcp,
                            &["spec", "machineTemplate", "metadata", "annotations"],
                        )),
                        owner: owner_ref(CONTROL_PLANE_VERSION, "KubeadmControlPlane", kcp, true),
                        version,
                        infra_template: t,
                        bootstrap_template: None,
                        failure_domain: None,
                    },
                )?;
                if !created {
                    waiting = Some(format!("OpenStackMachineTemplate {t} does not exist"));
                }
            }
        }
    } else if let Some(victim) = victims(
        if outdated.is_empty() {
            live.clone()
        } else {
            outdated.clone()
        },
        true,
    )
    .first()
    .filter(|_| live.len() > desired)
    {
        cx.delete(&victim.key)?;
    }

    let observed = generation(kcp);
    let ready = live.iter().filter(|m| m.ready).count();
    let up_to_date = live.len() - outdated.len();
    let initialized = ready > 0
        || bool_at(
            kcp,
            &["status", "initialization", "controlPlaneInitialized"],
        );
    let all_ready = !live.is_empty() && ready == live.len();
    let failed = failures(&live);
    let problems = if failed.is_empty() {
        waiting
            .clone()
            .unwrap_or_else(|| "Control plane machines are not ready yet".into())
    } else {
        failed.join("\n")
    };
    let quorum = ready * 2 > live.len();
    let scaling_up = live.len() < desired || (!failed.is_empty() && ready < desired);
    let [machines_up_to_date, rolling_out, scaling_down, deleting] =
        rollout_conditions(outdated.len(), live.len(), desired);
    let conds = [
        Cond::check(
            "Available",
            initialized && quorum,
            "Available",
            "NotAvailable",
            problems.clone(),
        ),
        Cond::new("CertificatesAvailable", CondStatus::True, "Available", ""),
        Cond::check(
            "Initialized",
            initialized,
            "Initialized",
            "NotInitialized",
            "Control plane not yet initialized",
        ),
        Cond::check(
            "EtcdClusterHealthy",
            all_ready,
            "Healthy",
            "NotHealthy",
            problems.clone(),
        ),
        Cond::check(
            "ControlPlaneComponentsHealthy",
            all_ready,
            "Healthy",
            "NotHealthy",
            problems.clone(),
        ),
        Cond::check(
            "MachinesReady",
            all_ready,
            "Ready",
            "NotReady",
            problems.clone(),
        ),
        machines_up_to_date,
        rolling_out,
        if scaling_up {
            let mut msg = format!("Scaling up from {} to {desired} replicas", ready);
            if let Some(w) = &waiting {
                msg.push_str(&format!(" is blocked because:\n{w}"));
            }
            Cond::new("ScalingUp", CondStatus::True, "ScalingUp", msg)
        } else {
            Cond::new("ScalingUp", CondStatus::False, "NotScalingUp", "")
        },
        scaling_down,
        deleting,
    ];
    let mut status = json!({
        "observedGeneration": observed,
        "selector": format!("{LABEL_CLUSTER_NAME}={cluster_name},{LABEL_CONTROL_PLANE}"),
        "replicas": machines.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "upToDateReplicas": up_to_date,
        "initialization": {"controlPlaneInitialized": initialized},
        "conditions": conditions_v1beta2(kcp.get("status"), &conds, observed, &now_rfc3339()),
    });
    if let Some(v) = live
        .iter()
        .filter_map(|m| m.version.as_deref())
        .min_by_key(|v| version_key(v))
    {
        status["version"] = json!(v);
    }
    cx.set_status(Kind::ControlPlane, kcp, status)?;
    if initialized {
        kubeconfig::ensure(cx.store, &cluster, &cx.sim.workload_url(ns, &cluster_name))?;
    }
    Ok(())
}

// ---- MachineDeployment ----

fn machine_deployment(cx: &Ctx<'_>, md: &Value) -> Result<(), StoreError> {
    if is_deleting(md) {
        return Ok(());
    }
    let ns = namespace(md);
    let Some(cluster_name) = str_at(md, &["spec", "clusterName"]) else {
        return Ok(());
    };
    let Some(cluster) = cx.get(Kind::Cluster, ns, cluster_name) else {
        return Ok(());
    };
    let desired = i64_at(md, &["spec", "replicas"]).unwrap_or(1).max(0) as usize;
    let version = str_at(md, &["spec", "template", "spec", "version"]);
    let infra_template = str_at(
        md,
        &["spec", "template", "spec", "infrastructureRef", "name"],
    );
    let bootstrap_template = str_at(
        md,
        &["spec", "template", "spec", "bootstrap", "configRef", "name"],
    );
    let after = rollout_after(cx, Kind::MachineDeployment, md);
    let machines = machines_of(cx, md, |m| {
        str_at(m, &["spec", "version"]) == version
            && annotation(m, ANNOTATION_INFRA_TEMPLATE) == infra_template
            && annotation(m, ANNOTATION_BOOTSTRAP_TEMPLATE) == bootstrap_template
            && rolled_out(m, after)
    });
    let live: Vec<&MachineView> = machines.iter().filter(|m| !m.deleting).collect();
    let outdated: Vec<&MachineView> = live.iter().copied().filter(|m| !m.up_to_date).collect();
    let fresh: Vec<&MachineView> = live.iter().copied().filter(|m| m.up_to_date).collect();

    let mut waiting: Option<String> = None;
    let mut create = 0usize;
    let mut remove: Vec<&MachineView> = Vec::new();
    if !bool_at(
        &cluster,
        &["status", "initialization", "controlPlaneInitialized"],
    ) {
        waiting = Some("Waiting for the control plane to be initialized".into());
    } else if bool_at(md, &["spec", "paused"]) {
        waiting = Some("MachineDeployment is paused".into());
    } else if !outdated.is_empty() {
        // RollingUpdate with maxSurge 1, maxUnavailable 0: one machine at a time.
        if live.len() < desired + 1 && fresh.len() < desired {
            create = 1;
        } else if fresh.iter().all(|m| m.ready) {
            remove = victims(outdated.clone(), true)
                .into_iter()
                .take(1)
                .collect();
        } else {
            waiting = Some("Waiting for new machines to become ready".into());
        }
    } else if live.len() < desired {
        create = desired - live.len();
    } else if live.len() > desired {
        remove = victims(live.clone(), false)
            .into_iter()
            .take(live.len() - desired)
            .collect();
    }
    for victim in &remove {
        cx.delete(&victim.key)?;
    }
    if create > 0 {
        match infra_template {
            None => waiting = Some("spec.template.spec.infrastructureRef is not set".into()),
            Some(t) => {
                let mut labels = string_map(at(md, &["spec", "template", "metadata", "labels"]));
                labels.insert(LABEL_DEPLOYMENT_NAME.into(), json!(name(md)));
                let annotations =
                    string_map(at(md, &["spec", "template", "metadata", "annotations"]));
                for _ in 0..create {
                    let created = create_machine(
                        cx,
                        NewMachine {
                            ns,
                            cluster: cluster_name,
                            prefix: name(md),
                            labels: labels.clone(),
                            annotations: annotations.clone(),
                            owner: owner_ref(CAPI_VERSION, "MachineDeployment", md, true),
                            version,
                            infra_template: t,
                            bootstrap_template,
                            failure_domain: str_at(
                                md,
                                &["spec", "template", "spec", "failureDomain"],
                            ),
                        },
                    )?;
                    if !created {
                        waiting = Some(format!("OpenStackMachineTemplate {t} does not exist"));
                        break;
                    }
                }
            }
        }
    }

    let observed = generation(md);
    let ready = live.iter().filter(|m| m.ready).count();
    let failed = failures(&live);
    let problems = if failed.is_empty() {
        waiting.clone().unwrap_or_default()
    } else {
        failed.join("\n")
    };
    let all_ready = ready == live.len();
    let phase = if ready < desired {
        "ScalingUp"
    } else if live.len() > desired {
        "ScalingDown"
    } else {
        "Running"
    };
    let with_problems = |base: String| {
        if problems.is_empty() {
            base
        } else {
            format!("{base}\n{problems}")
        }
    };
    let [machines_up_to_date, rolling_out, scaling_down, deleting] =
        rollout_conditions(outdated.len(), live.len(), desired);
    let conds = [
        Cond::check(
            "Available",
            ready >= desired,
            "Available",
            "NotAvailable",
            with_problems(format!(
                "{ready} available replicas, at least {desired} required"
            )),
        ),
        Cond::check(
            "MachinesReady",
            all_ready,
            "Ready",
            "NotReady",
            with_problems(format!(
                "{} of {} Machines are not ready",
                live.len() - ready,
                live.len()
            )),
        ),
        machines_up_to_date,
        rolling_out,
        if ready < desired && live.len() <= desired {
            Cond::new(
                "ScalingUp",
                CondStatus::True,
                "ScalingUp",
                with_problems(format!("Scaling up from {ready} to {desired} replicas")),
            )
        } else {
            Cond::new("ScalingUp", CondStatus::False, "NotScalingUp", "")
        },
        scaling_down,
        deleting,
    ];
    let status = json!({
        "observedGeneration": observed,
        "selector": format!("{LABEL_CLUSTER_NAME}={cluster_name},{LABEL_DEPLOYMENT_NAME}={}", name(md)),
        "phase": phase,
        "replicas": live.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "upToDateReplicas": fresh.len(),
        "conditions": conditions_v1beta2(md.get("status"), &conds, observed, &now_rfc3339()),
    });
    cx.set_status(Kind::MachineDeployment, md, status)?;
    Ok(())
}

// ---- Machine / OpenStackMachine ----

/// The injected failure of an OpenStackMachine whose image or flavor carries a marker.
fn instance_failure(cx: &Ctx<'_>, osm: &Value) -> Option<String> {
    let image = str_at(osm, &["spec", "image", "filter", "name"])
        .or_else(|| str_at(osm, &["spec", "image", "id"]))
        .or_else(|| str_at(osm, &["spec", "image", "imageRef", "name"]))
        .unwrap_or_default();
    let flavor = str_at(osm, &["spec", "flavor"])
        .or_else(|| str_at(osm, &["spec", "flavorID"]))
        .unwrap_or_default();
    (cx.fails(image) || cx.fails(flavor)).then(|| {
        format!(
            "Failed to create server: No valid host was found. There are not enough hosts \
             available. (image {image}, flavor {flavor})"
        )
    })
}

/// The message of a Machine's condition `kind` when its reason is one of `reasons`.
fn failure_message(m: &Value, kind: &str, reasons: &[&str]) -> Option<String> {
    let c = condition(m, kind)?;
    if !reasons.contains(&c.get("reason")?.as_str()?) {
        return None;
    }
    c.get("message")?.as_str().map(str::to_string)
}

/// Why kubeadm failed on a Machine, if it did.
fn kubeadm_failure(m: &Value) -> Option<String> {
    failure_message(
        m,
        "NodeHealthy",
        &[KUBEADM_INIT_FAILED, KUBEADM_JOIN_FAILED],
    )
}

/// What CAPI puts in a machine's bootstrap data: the CA Secrets as they are now (etcd and
/// front-proxy for control-plane machines only).
fn capture_bootstrap(cx: &Ctx<'_>, ns: &str, cluster: &str, control_plane: bool) -> Bootstrap {
    let read = |suffix: &str| {
        let secret = format!("{cluster}-{suffix}");
        cx.get(Kind::Secret, ns, &secret)
            .map(|s| Ca::from_secret(&s, &secret))
    };
    Bootstrap {
        ca: read("ca"),
        etcd: control_plane.then(|| read("etcd")).flatten(),
        proxy: control_plane.then(|| read("proxy")).flatten(),
    }
}

/// What kubeadm did on a booted machine.
struct Kubeadm {
    /// `kubeadm init` (the first control-plane machine creates the workload cluster, its
    /// `cluster-info` carrying the CA bundle it installed), else `kubeadm join`.
    init: bool,
    /// What it installed, or why it failed.
    result: Result<Installed, String>,
}

/// kubeadm init/join of one machine against the cluster's modelled PKI: discovery pins
/// (`cluster-info` must hold a pinned `<cluster>-ca` key), then TLS with every Ready
/// control-plane machine (each side trusts the other's `ca` signer), then etcd peer TLS for
/// control-plane machines (each side trusts the other's etcd signer). `None`: nothing to join
/// yet (no workload cluster or no Ready control-plane machine).
fn kubeadm(cx: &Ctx<'_>, key: &ObjectKey, cluster: &str, control_plane: bool) -> Option<Kubeadm> {
    let ns = key.namespace.as_str();
    let bootstrap = cx
        .sim
        .bootstrap(key, || capture_bootstrap(cx, ns, cluster, control_plane));
    let workload = cx.sim.workloads().get(ns, cluster);
    let init = control_plane && workload.is_none();
    let verb = if init { "kubeadm init" } else { "kubeadm join" };
    let fail = |message: String| {
        Some(Kubeadm {
            init,
            result: Err(format!("{verb}: {message}")),
        })
    };
    if let Some(e) = bootstrap.local_error(control_plane) {
        return fail(e);
    }
    if init {
        return Some(Kubeadm {
            init,
            result: Ok(Installed::control_plane(bootstrap)),
        });
    }
    let workload = workload?;
    // Discovery: the cluster-info CA data must contain a key pinned by `caCertHashes`.
    let unverified = |e: String| {
        fail(format!(
            "couldn't validate the identity of the API Server: {e}"
        ))
    };
    let discovered = match workload::cluster_info_ca(&workload) {
        Err(e) => return unverified(e),
        Ok(None) => None,
        Ok(Some(pem)) => match parse_bundle(&pem) {
            Ok(trust) => Some(Ca {
                pem,
                trust,
                key_error: None,
            }),
            Err(e) => {
                return unverified(format!(
                    "the certificate-authority-data of the cluster-info ConfigMap: {e}"
                ));
            }
        },
    };
    if let Some(Ok(ca)) = &bootstrap.ca {
        let presented = discovered.as_ref().map_or(&[][..], |c| c.trust.as_slice());
        if let Err(e) = check_pins(&ca.pins(), presented) {
            return fail(e);
        }
    }
    let peers = cx.sim.control_plane_pki(ns, cluster, true);
    let (_, oldest) = peers.first()?;
    let installed = if control_plane {
        Installed::control_plane(bootstrap)
    } else {
        // A worker trusts what discovery found; its kubelet client certificate comes from the
        // control plane's signer.
        Installed {
            ca_trust: discovered,
            ca_signer: oldest.ca_signer.clone(),
            etcd: None,
        }
    };
    for (peer, theirs) in &peers {
        if let (Some(trust), Some(signer)) = (&installed.ca_trust, &theirs.ca_signer)
            && !trust.trusts(signer)
        {
            return fail(format!(
                "tls: failed to verify certificate: x509: certificate signed by unknown authority \
                 (this machine does not trust the CA {} that signs the serving certificate of \
                 control plane machine {peer})",
                signer.describe()
            ));
        }
        if let (Some(signer), Some(trust)) = (&installed.ca_signer, &theirs.ca_trust)
            && !trust.trusts(signer)
        {
            return fail(format!(
                "Unauthorized: control plane machine {peer} does not trust the CA {} that signs \
                 this machine's client certificate",
                signer.describe()
            ));
        }
        let (Some(mine), Some(their_etcd)) = (&installed.etcd, &theirs.etcd) else {
            continue;
        };
        if let Some(signer) = mine.signer()
            && !their_etcd.trusts(signer)
        {
            return fail(format!(
                "[etcd] failed to add this machine as an etcd member: remote error: tls: bad \
                 certificate (control plane machine {peer} does not trust the etcd CA {} that \
                 signs this machine's peer certificate)",
                signer.describe()
            ));
        }
        if let Some(signer) = their_etcd.signer()
            && !mine.trusts(signer)
        {
            return fail(format!(
                "[etcd] failed to add this machine as an etcd member: tls: failed to verify \
                 certificate: x509: certificate signed by unknown authority (this machine does \
                 not trust the etcd CA {} that signs the peer certificate of control plane \
                 machine {peer})",
                signer.describe()
            ));
        }
    }
    Some(Kubeadm {
        init,
        result: Ok(installed),
    })
}

fn machine(cx: &Ctx<'_>, m: &Value) -> Result<(), StoreError> {
    if is_deleting(m) {
        if has_finalizer(m, FINALIZER_MACHINE) {
            cx.edit(Kind::Machine, m, |o| remove_finalizer(o, FINALIZER_MACHINE))?;
        }
        return Ok(());
    }
    let phase = str_at(m, &["status", "phase"]);
    if phase == Some("Running") || kubeadm_failure(m).is_some() {
        return Ok(());
    }
    let (ns, observed, now) = (namespace(m), generation(m), now_rfc3339());
    let key = ObjectKey::new(&Kind::Machine.resource(), ns, name(m));
    let prev = m.get("status");
    let osm = str_at(m, &["spec", "infrastructureRef", "name"])
        .and_then(|n| cx.get(Kind::InfraMachine, ns, n));
    let cluster_name = str_at(m, &["spec", "clusterName"]).unwrap_or_default();
    let cluster = cx.get(Kind::Cluster, ns, cluster_name);
    let is_control_plane = label(m, LABEL_CONTROL_PLANE).is_some();
    let not_deleting = Cond::new("Deleting", CondStatus::False, "NotDeleting", "");
    let node_missing = |k: &'static str| {
        Cond::new(
            k,
            CondStatus::Unknown,
            "NodeDoesNotExist",
            "Waiting for a Node to exist",
        )
    };
    let pending = |bootstrap: Cond, infra: Cond, phase: &str, bootstrapped: bool| {
        let ready = Cond::new(
            "Ready",
            CondStatus::False,
            "NotReady",
            failed_condition_message(&[&bootstrap, &infra]),
        );
        json!({
            "observedGeneration": observed,
            "phase": phase,
            "initialization": {"bootstrapDataSecretCreated": bootstrapped, "infrastructureProvisioned": false},
            "conditions": conditions_v1beta2(prev, &[
                Cond::new("Available", CondStatus::False, "NotReady", "* Ready: not ready"),
                ready,
                bootstrap,
                infra,
                node_missing("NodeReady"),
                node_missing("NodeHealthy"),
                not_deleting.clone(),
            ], observed, &now),
        })
    };
    let bootstrap_ok = Cond::new("BootstrapConfigReady", CondStatus::True, "Ready", "");
    let Some(osm) = osm else {
        let infra = Cond::new(
            "InfrastructureReady",
            CondStatus::False,
            "InfrastructureDoesNotExist",
            "OpenStackMachine does not exist",
        );
        cx.set_status(
            Kind::Machine,
            m,
            pending(bootstrap_ok, infra, "Pending", false),
        )?;
        return Ok(());
    };
    if matches!(phase, None | Some("Pending")) {
        let cp_ready = cluster
            .as_deref()
            .is_some_and(|c| bool_at(c, &["status", "initialization", "controlPlaneInitialized"]));
        if !is_control_plane && !cp_ready {
            let bootstrap = Cond::new(
                "BootstrapConfigReady",
                CondStatus::False,
                "NotReady",
                "Waiting for the control plane to be initialized",
            );
            let infra = Cond::new(
                "InfrastructureReady",
                CondStatus::False,
                "NotReady",
                "Waiting for bootstrap data",
            );
            cx.set_status(
                Kind::Machine,
                m,
                pending(bootstrap, infra, "Pending", false),
            )?;
            return Ok(());
        }
        // The bootstrap data is rendered now, with the CA Secrets as they are.
        cx.sim.set_bootstrap(
            &key,
            capture_bootstrap(cx, ns, cluster_name, is_control_plane),
        );
        let infra = Cond::new(
            "InfrastructureReady",
            CondStatus::False,
            "NotReady",
            "Waiting for the OpenStack instance to become ACTIVE",
        );
        cx.set_status(
            Kind::Machine,
            m,
            pending(bootstrap_ok, infra, "Provisioning", true),
        )?;
        return Ok(());
    }

    if let Some(message) = instance_failure(cx, &osm) {
        let failed = |k: &'static str| {
            Cond::new(
                k,
                CondStatus::False,
                "InstanceCreateFailed",
                message.clone(),
            )
        };
        cx.set_status(Kind::InfraMachine, &osm, json!({
            "ready": false,
            "instanceState": "ERROR",
            "failureReason": "CreateError",
            "failureMessage": message,
            "conditions": conditions_v1beta1(osm.get("status"), &[failed("Ready"), failed("InstanceReady")], &now),
        }))?;
        let mut status = pending(bootstrap_ok, failed("InfrastructureReady"), "Failed", true);
        status["deprecated"] =
            json!({"v1beta1": {"failureReason": "CreateError", "failureMessage": message}});
        cx.set_status(Kind::Machine, m, status)?;
        return Ok(());
    }

    let Some(Kubeadm { init, result }) = kubeadm(cx, &key, cluster_name, is_control_plane) else {
        cx.sim.mark(key);
        return Ok(());
    };
    let instance_id = uuid::Uuid::new_v4().to_string();
    let provider_id = format!("openstack:///{instance_id}");
    let address = cx.sim.next_node_address(ns, cluster_name);
    let addresses = json!([{"type": "InternalIP", "address": address}]);
    let pid = provider_id.clone();
    let osm = cx.edit(Kind::InfraMachine, &osm, move |o| {
        set_at(o, &["spec"], "providerID", json!(pid))
    })?;
    cx.set_status(
        Kind::InfraMachine,
        &osm,
        json!({
            "ready": true,
            "initialization": {"provisioned": true},
            "instanceID": instance_id,
            "instanceState": "ACTIVE",
            "addresses": addresses,
            "conditions": conditions_v1beta1(osm.get("status"), &[
                Cond::new("Ready", CondStatus::True, "Ready", ""),
                Cond::new("InstanceReady", CondStatus::True, "Ready", ""),
            ], &now),
        }),
    )?;
    let pid = provider_id.clone();
    let m = cx.edit(Kind::Machine, m, move |o| {
        set_at(o, &["spec"], "providerID", json!(pid))
    })?;
    let ok = |k: &'static str, reason: &'static str| Cond::new(k, CondStatus::True, reason, "");
    let installed = match result {
        Ok(installed) => installed,
        Err(message) => {
            let reason = if init {
                KUBEADM_INIT_FAILED
            } else {
                KUBEADM_JOIN_FAILED
            };
            let health = Cond::new("NodeHealthy", CondStatus::False, reason, message.clone());
            let status = json!({
                "observedGeneration": generation(&m),
                "phase": "Failed",
                "addresses": addresses,
                "lastUpdated": now,
                "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
                "deprecated": {"v1beta1": {"failureReason": "JoinClusterTimeoutError", "failureMessage": message}},
                "conditions": conditions_v1beta2(m.get("status"), &[
                    Cond::new("Available", CondStatus::False, "NotReady", "* Ready: not ready"),
                    Cond::new("Ready", CondStatus::False, "NotReady", failed_condition_message(&[&health])),
                    ok("BootstrapConfigReady", "Ready"),
                    ok("InfrastructureReady", "Ready"),
                    node_missing("NodeReady"),
                    health,
                    not_deleting,
                ], generation(&m), &now),
            });
            cx.set_status(Kind::Machine, &m, status)?;
            return Ok(());
        }
    };
    let kubelet = str_at(&m, &["spec", "version"])
        .unwrap_or("v0.0.0")
        .to_string();
    let status = json!({
        "observedGeneration": generation(&m),
        "phase": "Running",
        "addresses": addresses,
        "nodeRef": {"name": name(&m)},
        "lastUpdated": now,
        "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": uuid::Uuid::new_v4().to_string(),
            "containerRuntimeVersion": "containerd://1.7.27",
            "kernelVersion": "6.1.0-simkube",
            "kubeProxyVersion": kubelet,
            "kubeletVersion": kubelet,
            "machineID": uuid::Uuid::new_v4().simple().to_string(),
            "operatingSystem": "linux",
            "osImage": str_at(&osm, &["spec", "image", "filter", "name"]).unwrap_or("simulated"),
            "systemUUID": instance_id,
        },
        "conditions": conditions_v1beta2(m.get("status"), &[
            ok("Available", "Available"),
            ok("Ready", "Ready"),
            ok("BootstrapConfigReady", "Ready"),
            ok("InfrastructureReady", "Ready"),
            ok("NodeReady", "NodeReady"),
            ok("NodeHealthy", "NodeHealthy"),
            not_deleting,
        ], generation(&m), &now),
    });
    cx.set_status(Kind::Machine, &m, status)?;
    if init {
        // `kubeadm init` publishes cluster-info with the CA it installed.
        let server = cluster
            .as_deref()
            .and_then(kubeconfig::endpoint)
            .unwrap_or_else(|| "https://127.0.0.1:6443".to_string());
        let ca_pem = installed.ca_trust.as_ref().map(|c| c.pem.as_str());
        cx.sim.workloads().init(ns, cluster_name, &server, ca_pem)?;
    }
    cx.sim.set_installed(&key, installed);
    Ok(())
}

// ---- MachineHealthCheck ----

fn health_check(cx: &Ctx<'_>, mhc: &Value) -> Result<(), StoreError> {
    if is_deleting(mhc) {
        return Ok(());
    }
    let ns = namespace(mhc);
    let Some(cluster_name) = str_at(mhc, &["spec", "clusterName"]) else {
        return Ok(());
    };
    let wanted = string_map(at(mhc, &["spec", "selector", "matchLabels"]));
    let mut targets: Vec<Arc<Value>> = cx
        .sim
        .cluster_parts(ns, cluster_name, None)
        .into_iter()
        .filter(|k| Kind::Machine.is(&k.resource))
        .filter_map(|k| cx.store.get(&k.resource, &k.namespace, &k.name))
        .filter(|m| !is_deleting(m))
        .filter(|m| wanted.iter().all(|(k, v)| label(m, k) == v.as_str()))
        .collect();
    targets.sort_by(|a, b| name(a).cmp(name(b)));
    let healthy = targets
        .iter()
        .filter(|m| condition_true(m, "Ready"))
        .count();
    let observed = generation(mhc);
    let status = json!({
        "observedGeneration": observed,
        "expectedMachines": targets.len(),
        "currentHealthy": healthy,
        "remediationsAllowed": healthy,
        "targets": targets.iter().map(|m| name(m)).collect::<Vec<_>>(),
        "conditions": conditions_v1beta2(mhc.get("status"), &[
            Cond::new("RemediationAllowed", CondStatus::True, "RemediationAllowed", ""),
            Cond::new("Paused", CondStatus::False, "NotPaused", ""),
        ], observed, &now_rfc3339()),
    });
    cx.set_status(Kind::MachineHealthCheck, mhc, status)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet_hosts_and_versions() {
        assert_eq!(host_in("10.6.0.0/24", 250), "10.6.0.250");
        assert_eq!(host_in("garbage", 7), "10.6.0.7");
        assert!(version_key("v1.30.10") > version_key("v1.30.9"));
        assert!(version_key("v1.31.0") > version_key("v1.30.9"));
    }
}
