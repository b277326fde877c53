//! What the KubeadmControlPlane and MachineDeployment controllers share about their Machines:
//! a view of each owned Machine, the order victims are removed in, `rollout.after`, creating a
//! Machine with its OpenStackMachine, and the rollout conditions both report.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::ctx::Ctx;
use super::kubeadm::kubeadm_failure;
use crate::simkube::objects::*;
use crate::simkube::store::{ObjectKey, StoreError, random_suffix};

/// What an owner needs to know about one of its Machines.
pub(super) struct MachineView {
    pub(super) key: ObjectKey,
    pub(super) name: String,
    created: String,
    pub(super) deleting: bool,
    pub(super) ready: bool,
    /// Why kubeadm failed (a server Nova refused is on its OpenStackServer only: the Machine
    /// keeps waiting, as with CAPO v0.14).
    pub(super) failure: Option<String>,
    pub(super) up_to_date: bool,
    delete_first: bool,
    pub(super) version: Option<String>,
}

pub(super) fn machines_of(
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
            failure: kubeadm_failure(&m),
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
pub(super) fn victims(mut candidates: Vec<&MachineView>, oldest: bool) -> Vec<&MachineView> {
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

pub(super) fn failures(machines: &[&MachineView]) -> Vec<String> {
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
pub(super) fn version_key(v: &str) -> Vec<u64> {
    v.trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().unwrap_or(0))
        .collect()
}

/// `spec.rollout.after` of a KubeadmControlPlane or MachineDeployment once reached (Machines
/// created before it are outdated); one still in the future has the owner looked at again next
/// step.
pub(super) fn rollout_after(cx: &Ctx<'_>, kind: Kind, owner: &Value) -> Option<DateTime<Utc>> {
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
pub(super) fn rolled_out(m: &Value, after: Option<DateTime<Utc>>) -> bool {
    let Some(after) = after else {
        return true;
    };
    annotation(m, ANNOTATION_CREATED)
        .or_else(|| str_at(m, &["metadata", "creationTimestamp"]))
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|created| created.with_timezone(&Utc) >= after)
}

pub(super) struct NewMachine<'a> {
    pub(super) ns: &'a str,
    pub(super) cluster: &'a str,
    pub(super) prefix: &'a str,
    pub(super) labels: Map<String, Value>,
    pub(super) annotations: Map<String, Value>,
    pub(super) owner: Value,
    pub(super) version: Option<&'a str>,
    pub(super) infra_template: &'a str,
    pub(super) bootstrap_template: Option<&'a str>,
    pub(super) failure_domain: Option<&'a str>,
}

/// Creates a Machine and its OpenStackMachine (cloned from the template); false when the
/// template does not exist.
pub(super) fn create_machine(cx: &Ctx<'_>, m: NewMachine<'_>) -> Result<bool, StoreError> {
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
pub(super) fn rollout_conditions(outdated: usize, live: usize, desired: usize) -> [Cond; 4] {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_numerically() {
        assert!(version_key("v1.30.10") > version_key("v1.30.9"));
        assert!(version_key("v1.31.0") > version_key("v1.30.9"));
    }
}
