//! Vocabulary of the simulated controllers: the CAPI/CAPO kinds they act on, the well-known
//! labels, annotations and finalizers, JSON accessors, and condition lists in the two shapes
//! the CRDs use (CAPI v1beta2 `metav1.Condition`, CAPO v1beta1 conditions with severity).

use serde_json::{Map, Value, json};

use super::store::Resource;

pub const CAPI_GROUP: &str = "cluster.x-k8s.io";
pub const CAPI_VERSION: &str = "cluster.x-k8s.io/v1beta2";
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";
pub const CONTROL_PLANE_VERSION: &str = "controlplane.cluster.x-k8s.io/v1beta2";
pub const BOOTSTRAP_GROUP: &str = "bootstrap.cluster.x-k8s.io";
pub const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const INFRA_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
pub const ADDONS_GROUP: &str = "addons.cluster.x-k8s.io";

pub use super::store::{add_finalizer, has_finalizer, remove_finalizer};
pub use crate::k8s::labels::LABEL_CAPI_CLUSTER_NAME as LABEL_CLUSTER_NAME;
pub const LABEL_CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
pub const LABEL_CONTROL_PLANE_NAME: &str = "cluster.x-k8s.io/control-plane-name";
pub const LABEL_DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
/// Magnum's label on every object it creates (the driver's watch selector).
pub const LABEL_CLUSTER_UUID: &str = "magnum.openstack.org/cluster-uuid";
/// Machines carrying this annotation are removed first on scale-down.
pub const ANNOTATION_DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
/// The cluster autoscaler's lower bound on a MachineDeployment (the initial replicas).
pub const ANNOTATION_AUTOSCALER_MIN: &str =
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
/// Which machine template / bootstrap template a simulated Machine was made from (rollouts).
pub const ANNOTATION_INFRA_TEMPLATE: &str = "simkube.magnum.openstack.org/infrastructure-template";
pub const ANNOTATION_BOOTSTRAP_TEMPLATE: &str = "simkube.magnum.openstack.org/bootstrap-template";
/// When the simulator created a Machine, to the nanosecond (`spec.rollout.after` compares with
/// it; `creationTimestamp` has whole seconds only).
pub const ANNOTATION_CREATED: &str = "simkube.magnum.openstack.org/created";
pub const FINALIZER_CLUSTER: &str = "cluster.cluster.x-k8s.io";
pub const FINALIZER_MACHINE: &str = "machine.cluster.x-k8s.io";

/// The kinds the simulator knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Cluster,
    Machine,
    MachineSet,
    MachineDeployment,
    MachineHealthCheck,
    ControlPlane,
    KubeadmConfig,
    KubeadmConfigTemplate,
    InfraCluster,
    InfraMachine,
    InfraMachineTemplate,
    Secret,
    HelmChartProxy,
    HelmReleaseProxy,
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Cluster,
        Kind::Machine,
        Kind::MachineSet,
        Kind::MachineDeployment,
        Kind::MachineHealthCheck,
        Kind::ControlPlane,
        Kind::KubeadmConfig,
        Kind::KubeadmConfigTemplate,
        Kind::InfraCluster,
        Kind::InfraMachine,
        Kind::InfraMachineTemplate,
        Kind::Secret,
        Kind::HelmChartProxy,
        Kind::HelmReleaseProxy,
    ];

    pub fn group(self) -> &'static str {
        match self {
            Kind::Cluster
            | Kind::Machine
            | Kind::MachineSet
            | Kind::MachineDeployment
            | Kind::MachineHealthCheck => CAPI_GROUP,
            Kind::ControlPlane => CONTROL_PLANE_GROUP,
            Kind::KubeadmConfig | Kind::KubeadmConfigTemplate => BOOTSTRAP_GROUP,
            Kind::InfraCluster | Kind::InfraMachine | Kind::InfraMachineTemplate => INFRA_GROUP,
            Kind::Secret => "",
            Kind::HelmChartProxy | Kind::HelmReleaseProxy => ADDONS_GROUP,
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Kind::Cluster => "clusters",
            Kind::Machine => "machines",
            Kind::MachineSet => "machinesets",
            Kind::MachineDeployment => "machinedeployments",
            Kind::MachineHealthCheck => "machinehealthchecks",
            Kind::ControlPlane => "kubeadmcontrolplanes",
            Kind::KubeadmConfig => "kubeadmconfigs",
            Kind::KubeadmConfigTemplate => "kubeadmconfigtemplates",
            Kind::InfraCluster => "openstackclusters",
            Kind::InfraMachine => "openstackmachines",
            Kind::InfraMachineTemplate => "openstackmachinetemplates",
            Kind::Secret => "secrets",
            Kind::HelmChartProxy => "helmchartproxies",
            Kind::HelmReleaseProxy => "helmreleaseproxies",
        }
    }

    pub fn resource(self) -> Resource {
        Resource::new(self.group(), self.plural())
    }

    /// True when `res` is this kind's resource (no allocation, unlike comparing `resource()`).
    pub fn is(self, res: &Resource) -> bool {
        self.group() == res.group && self.plural() == res.plural
    }

    pub fn of(res: &Resource) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.is(res))
    }

    /// Kinds that belong to one CAPI cluster and go away with it.
    pub fn is_cluster_part(self) -> bool {
        !matches!(self, Kind::Cluster | Kind::Secret)
    }
}

// ---- JSON accessors ----

pub fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, seg| v.get(seg))
}

pub fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

pub fn i64_at(v: &Value, path: &[&str]) -> Option<i64> {
    at(v, path).and_then(Value::as_i64)
}

pub fn bool_at(v: &Value, path: &[&str]) -> bool {
    at(v, path).and_then(Value::as_bool).unwrap_or(false)
}

pub fn name(v: &Value) -> &str {
    str_at(v, &["metadata", "name"]).unwrap_or_default()
}

pub fn namespace(v: &Value) -> &str {
    str_at(v, &["metadata", "namespace"]).unwrap_or_default()
}

pub fn uid(v: &Value) -> &str {
    str_at(v, &["metadata", "uid"]).unwrap_or_default()
}

pub fn generation(v: &Value) -> i64 {
    i64_at(v, &["metadata", "generation"]).unwrap_or(1)
}

pub fn label<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    at(v, &["metadata", "labels"])?.get(key)?.as_str()
}

pub fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    at(v, &["metadata", "annotations"])?.get(key)?.as_str()
}

pub fn string_map(v: Option<&Value>) -> Map<String, Value> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(_, x)| x.is_string())
                .map(|(k, x)| (k.clone(), x.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The object at `path` inside `v`, created (over nulls) where missing; `None` when a
/// non-object is in the way.
pub fn obj_at_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut cur = v;
    for seg in path {
        let next = cur
            .as_object_mut()?
            .entry(seg.to_string())
            .or_insert_with(|| json!({}));
        if next.is_null() {
            *next = json!({});
        }
        cur = next;
    }
    cur.as_object_mut()
}

/// Sets `key` in the object at `path` (see `obj_at_mut`).
pub fn set_at(v: &mut Value, path: &[&str], key: &str, value: Value) {
    if let Some(m) = obj_at_mut(v, path) {
        m.insert(key.to_string(), value);
    }
}

pub fn is_deleting(v: &Value) -> bool {
    str_at(v, &["metadata", "deletionTimestamp"]).is_some()
}

/// Appends an owner reference unless one with the same uid is there.
pub fn add_owner_ref(v: &mut Value, owner: Value) {
    let owner_uid = owner
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if is_owned_by(v, &owner_uid) {
        return;
    }
    let Some(meta) = obj_at_mut(v, &["metadata"]) else {
        return;
    };
    match meta.get_mut("ownerReferences") {
        Some(Value::Array(list)) => list.push(owner),
        _ => {
            meta.insert("ownerReferences".into(), json!([owner]));
        }
    }
}

/// (name, uid) of the owners of a kind.
pub fn owners(v: &Value, kind: &str) -> Vec<(String, String)> {
    at(v, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter(|r| r.get("kind").and_then(Value::as_str) == Some(kind))
                .filter_map(|r| {
                    Some((
                        r.get("name")?.as_str()?.to_string(),
                        r.get("uid")?.as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn is_owned_by(v: &Value, owner_uid: &str) -> bool {
    at(v, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(owner_uid))
        })
}

pub fn owner_ref(api_version: &str, kind: &str, owner: &Value, controller: bool) -> Value {
    let mut r = json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name(owner),
        "uid": uid(owner),
    });
    if controller {
        r["controller"] = json!(true);
        r["blockOwnerDeletion"] = json!(true);
    }
    r
}

/// Names of the CAPI clusters an object belongs to: `cluster.x-k8s.io/cluster-name` label,
/// `spec.clusterName`, Cluster owner references.
pub fn cluster_names(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = label(v, LABEL_CLUSTER_NAME)
        .into_iter()
        .chain(str_at(v, &["spec", "clusterName"]))
        .map(str::to_string)
        .chain(owners(v, "Cluster").into_iter().map(|(n, _)| n))
        .filter(|n| !n.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

// ---- conditions ----

/// Status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CondStatus {
    True,
    False,
    Unknown,
}

impl CondStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CondStatus::True => "True",
            CondStatus::False => "False",
            CondStatus::Unknown => "Unknown",
        }
    }

    pub fn from_bool(ok: bool) -> Self {
        if ok {
            CondStatus::True
        } else {
            CondStatus::False
        }
    }
}

/// One condition to set; reasons must match `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`.
#[derive(Debug, Clone)]
pub struct Cond {
    pub kind: &'static str,
    pub status: CondStatus,
    pub reason: &'static str,
    pub message: String,
}

impl Cond {
    /// True with `yes`, False with `no` as reason.
    pub fn check(
        kind: &'static str,
        ok: bool,
        yes: &'static str,
        no: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Cond {
            kind,
            status: CondStatus::from_bool(ok),
            reason: if ok { yes } else { no },
            message: if ok { String::new() } else { message.into() },
        }
    }

    pub fn new(
        kind: &'static str,
        status: CondStatus,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Cond {
            kind,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// `lastTransitionTime` of `cond`: kept from `previous` while its status holds, else `now`.
fn transition_time(previous: Option<&Value>, cond: &Cond, now: &str) -> Value {
    previous
        .and_then(|p| p.get("conditions")?.as_array())
        .and_then(|list| {
            list.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(cond.kind))
        })
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(cond.status.as_str()))
        .and_then(|c| c.get("lastTransitionTime"))
        .cloned()
        .unwrap_or_else(|| json!(now))
}

/// CAPI v1beta2 (`metav1.Condition`) list; keeps `lastTransitionTime` while a status holds.
pub fn conditions_v1beta2(
    previous: Option<&Value>,
    conds: &[Cond],
    generation: i64,
    now: &str,
) -> Value {
    Value::Array(
        conds
            .iter()
            .map(|c| {
                json!({
                    "type": c.kind,
                    "status": c.status.as_str(),
                    "observedGeneration": generation,
                    "lastTransitionTime": transition_time(previous, c, now),
                    "reason": c.reason,
                    "message": c.message,
                })
            })
            .collect(),
    )
}

/// CAPO v1beta1 (clusterv1beta1) list: severity on False, empty reason/message omitted.
pub fn conditions_v1beta1(previous: Option<&Value>, conds: &[Cond], now: &str) -> Value {
    Value::Array(
        conds
            .iter()
            .map(|c| {
                let mut out = json!({"type": c.kind, "status": c.status.as_str(),
                                     "lastTransitionTime": transition_time(previous, c, now)});
                if c.status == CondStatus::False {
                    out["severity"] = json!("Error");
                }
                if c.status != CondStatus::True {
                    out["reason"] = json!(c.reason);
                    if !c.message.is_empty() {
                        out["message"] = json!(c.message);
                    }
                }
                out
            })
            .collect(),
    )
}

/// The condition of a type in an object's `status.conditions`.
pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    at(obj, &["status", "conditions"])?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

pub fn condition_true(obj: &Value, kind: &str) -> bool {
    condition(obj, kind)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

pub fn condition_message(obj: &Value, kind: &str) -> String {
    condition(obj, kind)
        .and_then(|c| c.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_is_kept_while_the_status_holds() {
        let first = json!({"conditions": conditions_v1beta2(None, &[Cond::check("Ready", false, "Ready", "NotReady", "waiting")], 1, "T1")});
        let same = conditions_v1beta2(
            Some(&first),
            &[Cond::check("Ready", false, "Ready", "NotReady", "still")],
            2,
            "T2",
        );
        assert_eq!(same[0]["lastTransitionTime"], "T1");
        assert_eq!(same[0]["observedGeneration"], 2);
        let flipped = conditions_v1beta2(
            Some(&first),
            &[Cond::check("Ready", true, "Ready", "NotReady", "")],
            2,
            "T3",
        );
        assert_eq!(flipped[0]["lastTransitionTime"], "T3");
        assert_eq!(flipped[0]["message"], "");
    }

    #[test]
    fn v1beta1_conditions_carry_severity_only_when_false() {
        let c = conditions_v1beta1(
            None,
            &[
                Cond::new("Ready", CondStatus::True, "Ready", ""),
                Cond::new(
                    "InstanceReady",
                    CondStatus::False,
                    "InstanceCreateFailed",
                    "boom",
                ),
            ],
            "T",
        );
        assert!(c[0].get("severity").is_none() && c[0].get("reason").is_none());
        assert_eq!(c[1]["severity"], "Error");
        assert_eq!(c[1]["reason"], "InstanceCreateFailed");
        assert_eq!(c[1]["message"], "boom");
    }

    #[test]
    fn kinds_round_trip_through_resources() {
        for k in Kind::ALL {
            assert_eq!(Kind::of(&k.resource()), Some(k));
        }
    }
}
