//! The Cluster controller: finalizer, adoption of its infrastructure, control plane,
//! deployments and health checks, the control-plane endpoint, the aggregate status (conditions
//! rolled up from its parts, replica summaries) and the cascading delete.

use std::sync::Arc;

use serde_json::{Value, json};

use super::ctx::{Ctx, failed_condition_message};
use crate::simkube::kubeconfig;
use crate::simkube::objects::*;
use crate::simkube::store::{ObjectKey, StoreError, now_rfc3339};

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

pub(super) fn cluster(cx: &Ctx<'_>, mut c: Arc<Value>) -> Result<(), StoreError> {
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
        cx.sim.remove_workload(ns, cname);
        return Ok(());
    }
    for (key, obj) in &remaining {
        if !is_deleting(obj) {
            cx.delete(key)?;
        }
    }
    Ok(())
}
