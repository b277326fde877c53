//! Nodegroups added to, changed on and deleted from clusters adopted from Magnum's Cluster API
//! drivers (issue 25 item 2), written where and as each driver writes its own, so that no
//! existing machine rolls. magnum-cluster-api: an entry of the Cluster's
//! `spec.topology.workers.machineDeployments` (CAPI's topology controller makes the
//! MachineDeployment and its templates from it), shaped as its `mutate_machine_deployment`
//! shapes one, added with a JSON patch `add` at `/-`, removed with `test` + `remove`.
//! magnum-capi-helm: a MachineDeployment with its KubeadmConfigTemplate and
//! OpenStackMachineTemplate, copies of the cluster's default worker's (so the new nodes join and
//! are configured as the driver's are), named and labelled as the capi-helm-charts
//! `openstack-cluster` chart names a node group's. Both carry our labels from the start, so the
//! watchers see them; the pure builders are below the [`Capi`] methods.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::adopt::LABEL_TOPOLOGY_DEPLOYMENT;
use super::apply::ObjectRef;
use super::delete::UNANNOUNCED_POLL;
use super::driver::{Capi, CapiError};
use super::render::{TemplateRef, referenced_templates};
use super::status::Observed;
use super::values::{ANNOTATION_AUTOSCALER_MAX, ANNOTATION_AUTOSCALER_MIN, worker_size};
use super::{LABEL_CAPI_CLUSTER_NAME, LABEL_CLUSTER_UUID, LABEL_NODEGROUP_UUID, LABEL_ROLE, kinds};
use crate::domain::imported::{DriverFamily, capi_helm_sanitized};
use crate::domain::labels::Labels;
use crate::domain::spec::{Cluster, ClusterSpec, Nodegroup, ObjectsAt, Operation};
use crate::driver::Outcome;

/// The capi-helm-charts label naming a node group's objects (`<projectPrefix>/node-group`).
pub const LABEL_HELM_NODE_GROUP: &str = "capi.stackhpc.com/node-group";
/// The labels magnum-cluster-api gives a nodegroup's topology entry (its nodes get them).
const LABEL_MCAPI_NODEGROUP: &str = "node.cluster.x-k8s.io/nodegroup";
const LABEL_MCAPI_WORKER_ROLE: &str = "node-role.kubernetes.io/worker";
/// CAPI's label on every Machine of a MachineDeployment: the deployment's name.
const LABEL_DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
const TOPOLOGY_ENTRIES: &str = "/spec/topology/workers/machineDeployments";

/// What a new or changed nodegroup of an adopted cluster asks for.
#[derive(Debug, Clone)]
pub struct AdoptedWorker<'a> {
    pub uuid: Uuid,
    pub cluster_uuid: Uuid,
    pub name: &'a str,
    pub flavor: Option<&'a str>,
    pub image: Option<&'a str>,
    /// Its labels (the cluster's, inherited at create, and its own).
    pub labels: &'a Labels,
    /// Fixed replicas, or autoscaler bounds (min, max), by this driver's rules.
    pub replicas: Option<i32>,
    pub autoscale: Option<(i32, i32)>,
}

impl<'a> AdoptedWorker<'a> {
    /// The nodegroup `ng` of cluster `c`, sized by this driver's rules (its labels over the
    /// cluster's).
    pub fn of(c: &Cluster, ng: &'a Nodegroup) -> Result<Self, CapiError> {
        let (replicas, autoscale) = worker_size(ng, &c.labels)?;
        let autoscale = autoscale.map(|a| (a.min, a.max));
        Ok(Self {
            uuid: ng.uuid,
            cluster_uuid: c.uuid,
            name: &ng.name,
            flavor: ng.flavor_id.as_deref(),
            image: ng.image_id.as_deref(),
            labels: &ng.labels,
            replicas,
            autoscale,
        })
    }

    /// Nodegroup `ng` of the cluster `spec` describes (`None`: gone since).
    pub fn in_spec(spec: &'a ClusterSpec, ng: Uuid) -> Result<Option<Self>, CapiError> {
        spec.nodegroups
            .iter()
            .find(|n| n.uuid == ng)
            .map(|n| Self::of(&spec.cluster, n))
            .transpose()
    }

    fn ours(&self) -> [(&'static str, String); 3] {
        [
            (LABEL_CLUSTER_UUID, self.cluster_uuid.to_string()),
            (LABEL_NODEGROUP_UUID, self.uuid.to_string()),
            (LABEL_ROLE, "worker".into()),
        ]
    }

    fn autoscaler_annotations(&self) -> Map<String, Value> {
        self.autoscale
            .iter()
            .flat_map(|(min, max)| {
                [
                    (
                        ANNOTATION_AUTOSCALER_MIN.to_string(),
                        json!(min.to_string()),
                    ),
                    (
                        ANNOTATION_AUTOSCALER_MAX.to_string(),
                        json!(max.to_string()),
                    ),
                ]
            })
            .collect()
    }
}

/// Why nodegroup `ng` cannot be added to (or kept on) a cluster adopted from `at.driver`, as
/// the 400 says: a name the driver's objects cannot carry (magnum-cluster-api: the topology
/// entry's name is an RFC 1123 subdomain of at most 63 characters, as its
/// `validate_nodegroup_name` demands; magnum-capi-helm: `<release>-<sanitised name>` must
/// differ from every other nodegroup's), node labels or taints (neither driver writes them),
/// and sizes this driver's rules refuse. `others`: the cluster's other nodegroups.
pub fn nodegroup_refusal(
    at: &ObjectsAt,
    c: &Cluster,
    ng: &Nodegroup,
    others: &[Nodegroup],
) -> Option<String> {
    let filled = |v: &Option<Value>| {
        v.as_ref().is_some_and(|v| match v {
            Value::Object(m) => !m.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Null => false,
            _ => true,
        })
    };
    if filled(&ng.node_labels) || filled(&ng.node_taints) {
        return Some(format!(
            "node_labels and node_taints are not available for nodegroups of a cluster adopted \
             from Magnum: {} does not write them. Create nodegroup {} without them.",
            driver_name(at.driver),
            ng.name
        ));
    }
    match at.driver {
        DriverFamily::ClusterApi if !rfc1123_subdomain(&ng.name) => {
            return Some(format!(
                "Nodegroup name {} is invalid for a cluster adopted from magnum-cluster-api: it \
                 names an entry of the Cluster's topology, which must be lower-case letters, \
                 digits, '-' and '.', start and end with a letter or digit, and be at most 63 \
                 characters.",
                ng.name
            ));
        }
        DriverFamily::CapiHelm => {
            let mine = capi_helm_sanitized(&ng.name);
            if mine.trim_matches('-').is_empty() {
                return Some(format!(
                    "Nodegroup name {} is invalid for a cluster adopted from magnum-capi-helm: \
                     it needs at least one letter or digit.",
                    ng.name
                ));
            }
            let md = helm_component_name(&at.name, &mine);
            if let Some(o) = others
                .iter()
                .filter(|o| !o.is_master() && o.uuid != ng.uuid)
                .find(|o| helm_component_name(&at.name, &capi_helm_sanitized(&o.name)) == md)
            {
                return Some(format!(
                    "Nodegroup name {} is invalid for a cluster adopted from magnum-capi-helm: \
                     its MachineDeployment would be {md}, which nodegroup {} already has. Choose \
                     another name.",
                    ng.name, o.name
                ));
            }
        }
        _ => {}
    }
    worker_size(ng, &c.labels).err().map(|e| e.to_string())
}

fn driver_name(d: DriverFamily) -> &'static str {
    match d {
        DriverFamily::ClusterApi => "magnum-cluster-api",
        DriverFamily::CapiHelm => "magnum-capi-helm",
        DriverFamily::Heat | DriverFamily::Unknown => "its driver",
    }
}

/// Kubernetes' DNS-1123 subdomain, at most 63 characters (the topology entry name's pattern).
fn rfc1123_subdomain(s: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    s.len() <= 63 && s.split('.').all(part)
}

/// The chart's `openstack-cluster.componentName`: `<release>-<component>`, cut to 63
/// characters, without a trailing `-`.
pub fn helm_component_name(release: &str, component: &str) -> String {
    let full = format!("{release}-{component}");
    let cut: String = full.chars().take(63).collect();
    cut.trim_end_matches('-').to_string()
}

impl Capi {
    /// [`nodegroup_refusal`] of nodegroup `ng` among `nodegroups` of cluster `c` (adopted: its
    /// `objects_at` set; `None` for any other cluster).
    pub fn adopted_nodegroup_refusal(
        &self,
        c: &Cluster,
        nodegroups: &[Nodegroup],
        ng: Uuid,
    ) -> Option<String> {
        let at = c.objects_at.as_ref()?;
        let n = nodegroups.iter().find(|n| n.uuid == ng)?;
        nodegroup_refusal(at, c, n, nodegroups)
    }

    /// A nodegroup create on an adopted cluster: the driver's objects for it, beside the
    /// driver's own (idempotent: a replay finds them there).
    pub(super) async fn create_adopted_nodegroup(
        &self,
        spec: &ClusterSpec,
        at: &ObjectsAt,
        ng: Uuid,
    ) -> Result<(), CapiError> {
        let Some(worker) = AdoptedWorker::in_spec(spec, ng)? else {
            return Ok(());
        };
        match at.driver {
            DriverFamily::ClusterApi => {
                self.patch_adopted_cluster(at, |cluster| {
                    let default = default_entry(cluster, spec);
                    topology_add_patch(cluster, topology_entry(default.as_ref(), &worker))
                })
                .await?;
            }
            DriverFamily::CapiHelm => {
                let ns = at.namespace.as_str();
                let (md, osmt, kct) = self.helm_default_worker(spec, at).await?;
                let objects = helm_nodegroup_objects(&at.name, &md, &osmt, &kct, &worker)?;
                self.mgmt.apply_all(&objects).await?;
                tracing::info!(cluster = %spec.cluster.uuid, nodegroup = %ng, namespace = ns, "adopted cluster: nodegroup objects written beside magnum-capi-helm's");
            }
            DriverFamily::Heat | DriverFamily::Unknown => {}
        }
        Ok(())
    }

    /// A nodegroup update on an adopted cluster: its autoscaler bounds where the driver keeps
    /// them (the MachineDeployment's annotations; magnum-cluster-api: its topology entry's),
    /// when it autoscales. Its size changes through a resize.
    pub(super) async fn update_adopted_nodegroup(
        &self,
        spec: &ClusterSpec,
        at: &ObjectsAt,
        ng: Uuid,
    ) -> Result<(), CapiError> {
        let Some(worker) = AdoptedWorker::in_spec(spec, ng)? else {
            return Ok(());
        };
        let annotations = worker.autoscaler_annotations();
        if annotations.is_empty() {
            return Ok(());
        }
        match at.driver {
            DriverFamily::ClusterApi => {
                self.patch_adopted_cluster(at, |cluster| {
                    topology_annotations_patch(cluster, worker.name, &annotations)
                })
                .await?;
            }
            DriverFamily::CapiHelm => {
                let ns = at.namespace.as_str();
                let sel = format!("{LABEL_NODEGROUP_UUID}={ng}");
                for md in self.mgmt.list(kinds::MACHINE_DEPLOYMENT, ns, &sel).await? {
                    let name = md.metadata.name.unwrap_or_default();
                    self.mgmt
                        .merge_patch(
                            &ObjectRef::new(kinds::MACHINE_DEPLOYMENT, ns, &name),
                            &json!({"metadata": {"annotations": annotations}}),
                        )
                        .await?;
                }
            }
            DriverFamily::Heat | DriverFamily::Unknown => {}
        }
        Ok(())
    }

    /// One step of a nodegroup delete on an adopted cluster. The first asks for it where the
    /// driver keeps the nodegroup (magnum-cluster-api: its topology entry removed, the
    /// topology controller deletes the MachineDeployment and its templates; magnum-capi-helm:
    /// its MachineDeployment deleted) and records what it waits for; later ones find its
    /// machines gone and (magnum-capi-helm) delete the templates only that MachineDeployment
    /// referred to. Within `delete_timeout_mins` of the operation's start.
    pub(super) async fn delete_adopted_nodegroup(
        &self,
        spec: &ClusterSpec,
        at: &ObjectsAt,
        ng: Uuid,
        op: &Operation,
    ) -> Result<Outcome, CapiError> {
        let c = &spec.cluster;
        let ns = at.namespace.as_str();
        let mut step: AdoptedDeleteStep =
            serde_json::from_value(op.step.clone()).unwrap_or_default();
        if !step.requested {
            let name = spec
                .nodegroups
                .iter()
                .find(|n| n.uuid == ng)
                .map(|n| n.name.clone())
                .unwrap_or_default();
            let mut sel = vec![format!("{LABEL_NODEGROUP_UUID}={ng}")];
            if at.driver == DriverFamily::ClusterApi {
                self.patch_adopted_cluster(at, |cluster| topology_remove_patch(cluster, &name))
                    .await?;
                sel.push(format!(
                    "{LABEL_CAPI_CLUSTER_NAME}={},{LABEL_TOPOLOGY_DEPLOYMENT}={name}",
                    at.name
                ));
            }
            for s in &sel {
                for md in self.mgmt.list(kinds::MACHINE_DEPLOYMENT, ns, s).await? {
                    let v =
                        serde_json::to_value(&md).map_err(|e| CapiError::Invalid(e.to_string()))?;
                    let md_name = md.metadata.name.unwrap_or_default();
                    if at.driver == DriverFamily::CapiHelm {
                        step.templates
                            .extend(self.helm_templates_of(ns, &md_name, v).await?);
                        self.mgmt
                            .delete(&ObjectRef::new(kinds::MACHINE_DEPLOYMENT, ns, &md_name))
                            .await?;
                    }
                    if !step.deployments.contains(&md_name) {
                        step.deployments.push(md_name);
                    }
                }
            }
            step.requested = true;
            return Ok(step.requeue(std::time::Duration::from_millis(1)));
        }
        let gone = self.observer.synced()
            && nodegroup_gone(&self.observer.observed(c.uuid), ng, &step.deployments);
        if !gone {
            let left = self.nodegroup_delete_left(op)?;
            return Ok(step.requeue(UNANNOUNCED_POLL.min(left)));
        }
        if at.driver == DriverFamily::CapiHelm && !step.templates.is_empty() {
            let live = self.helm_live_users(at, &step.deployments).await?;
            for t in unused_templates(&step.templates, &live) {
                let gvk = kinds::TEMPLATES
                    .into_iter()
                    .find(|g| g.1 == t.0)
                    .unwrap_or(kinds::OPENSTACK_MACHINE_TEMPLATE);
                self.mgmt.delete(&ObjectRef::new(gvk, ns, &t.1)).await?;
            }
        }
        Ok(Outcome::NodegroupDeleted(ng))
    }

    /// magnum-capi-helm's default worker: its MachineDeployment (the default worker
    /// nodegroup's, which adoption labelled) and the two templates it refers to.
    async fn helm_default_worker(
        &self,
        spec: &ClusterSpec,
        at: &ObjectsAt,
    ) -> Result<(Value, Value, Value), CapiError> {
        let ns = at.namespace.as_str();
        let Some(default) = spec
            .nodegroups
            .iter()
            .find(|n| n.is_default && !n.is_master())
        else {
            return Err(CapiError::Stuck(
                "the cluster has no default worker nodegroup to copy".into(),
            ));
        };
        let sel = format!("{LABEL_NODEGROUP_UUID}={}", default.uuid);
        let Some(md) = self
            .mgmt
            .list(kinds::MACHINE_DEPLOYMENT, ns, &sel)
            .await?
            .into_iter()
            .next()
        else {
            return Err(CapiError::Stuck(format!(
                "the MachineDeployment of the default worker nodegroup {} is not on the \
                 management cluster",
                default.name
            )));
        };
        let md = serde_json::to_value(&md).map_err(|e| CapiError::Invalid(e.to_string()))?;
        let get = |gvk: kinds::Gvk, pointer: &str| {
            let name = md
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            async move {
                self.read(&ObjectRef::new(gvk, ns, &name))
                    .await?
                    .ok_or_else(|| {
                        CapiError::Stuck(format!(
                            "{} {name} of the default worker is not on the management cluster",
                            gvk.1
                        ))
                    })
            }
        };
        let osmt = get(
            kinds::OPENSTACK_MACHINE_TEMPLATE,
            "/spec/template/spec/infrastructureRef/name",
        )
        .await?;
        let kct = get(
            kinds::KUBEADM_CONFIG_TEMPLATE,
            "/spec/template/spec/bootstrap/configRef/name",
        )
        .await?;
        Ok((md, osmt, kct))
    }

    /// The templates MachineDeployment `md` (as `v`) and its MachineSets refer to.
    async fn helm_templates_of(
        &self,
        ns: &str,
        md: &str,
        v: Value,
    ) -> Result<Vec<(String, String)>, CapiError> {
        let mut objs = vec![with_kind(v, kinds::MACHINE_DEPLOYMENT)];
        let sel = format!("{LABEL_DEPLOYMENT_NAME}={md}");
        for ms in self.mgmt.list(kinds::MACHINE_SET, ns, &sel).await? {
            let v = serde_json::to_value(&ms).map_err(|e| CapiError::Invalid(e.to_string()))?;
            objs.push(with_kind(v, kinds::MACHINE_SET));
        }
        Ok(referenced_templates(&objs)
            .into_iter()
            .map(|t| (t.kind, t.name))
            .collect())
    }

    /// What still refers to templates in the adopted cluster: its control plane,
    /// MachineDeployments and MachineSets, by their `spec.clusterName` (the chart's objects do
    /// not all carry CAPI's cluster-name label, and a template missed here would be deleted in
    /// use).
    /// MachineSets of the `deleted` MachineDeployments that CAPI has not removed yet do not
    /// count.
    async fn helm_live_users(
        &self,
        at: &ObjectsAt,
        deleted: &[String],
    ) -> Result<Vec<Value>, CapiError> {
        let mut live = Vec::new();
        for gvk in [kinds::MACHINE_DEPLOYMENT, kinds::MACHINE_SET] {
            for o in self.mgmt.list(gvk, &at.namespace, "").await? {
                let v = serde_json::to_value(&o).map_err(|e| CapiError::Invalid(e.to_string()))?;
                let of_deleted = v
                    .pointer("/metadata/labels")
                    .and_then(|l| l.get(LABEL_DEPLOYMENT_NAME))
                    .and_then(Value::as_str)
                    .is_some_and(|d| deleted.iter().any(|x| x == d));
                if v.pointer("/spec/clusterName").and_then(Value::as_str) == Some(&at.name)
                    && !of_deleted
                {
                    live.push(with_kind(v, gvk));
                }
            }
        }
        let (_, cluster) = self.adopted_cluster(at).await?;
        if let Some(kcp) = cluster
            .pointer("/spec/controlPlaneRef/name")
            .and_then(Value::as_str)
            && let Some(v) = self
                .read(&ObjectRef::new(kinds::CONTROL_PLANE, &at.namespace, kcp))
                .await?
        {
            live.push(with_kind(v, kinds::CONTROL_PLANE));
        }
        Ok(live)
    }
}

/// Lists do not repeat the kind on their items.
fn with_kind(mut v: Value, gvk: kinds::Gvk) -> Value {
    v["kind"] = Value::from(gvk.1);
    v
}

/// Where a nodegroup delete of an adopted cluster is between its runs.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct AdoptedDeleteStep {
    #[serde(default)]
    requested: bool,
    /// The MachineDeployments it waits for (their Machines carry CAPI's deployment-name label,
    /// not always ours).
    #[serde(default)]
    deployments: Vec<String>,
    /// (kind, name) of the templates they referred to (magnum-capi-helm).
    #[serde(default)]
    templates: Vec<(String, String)>,
}

impl AdoptedDeleteStep {
    fn requeue(&self, after: std::time::Duration) -> Outcome {
        Outcome::Requeue {
            after,
            progress: None,
            step: serde_json::to_value(self).ok(),
        }
    }
}

/// Whether nothing of nodegroup `ng` (its MachineDeployments `deployments`) is left among the
/// cluster's observed objects: no MachineDeployment and no Machine labelled with it or named
/// after one of them.
pub fn nodegroup_gone(o: &Observed, ng: Uuid, deployments: &[String]) -> bool {
    let id = ng.to_string();
    let label = |v: &Value, k: &str| {
        v.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let ours = |v: &Value| label(v, LABEL_NODEGROUP_UUID).as_deref() == Some(id.as_str());
    let named = |n: Option<String>| n.is_some_and(|n| deployments.contains(&n));
    !o.machine_deployments.iter().any(|md| {
        ours(md)
            || named(
                md.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )
    }) && !o
        .machines
        .iter()
        .any(|m| ours(m) || named(label(m, LABEL_DEPLOYMENT_NAME)))
}

/// The templates among `recorded` (kind, name) that nothing in `live` refers to any more, each
/// once, in order.
pub fn unused_templates(recorded: &[(String, String)], live: &[Value]) -> Vec<(String, String)> {
    let used = referenced_templates(live);
    recorded
        .iter()
        .filter(|(kind, name)| {
            !used.contains(&TemplateRef {
                kind: kind.clone(),
                name: name.clone(),
            })
        })
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The cluster's default worker entry in a ClusterClass topology: the default worker
/// nodegroup's (by name), else the first.
fn default_entry(cluster: &Value, spec: &ClusterSpec) -> Option<Value> {
    let entries = cluster.pointer(TOPOLOGY_ENTRIES)?.as_array()?;
    let name = spec
        .nodegroups
        .iter()
        .find(|n| n.is_default && !n.is_master())
        .map(|n| n.name.as_str());
    entries
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == name)
        .or_else(|| entries.first())
        .cloned()
}

/// magnum-cluster-api's topology entry for nodegroup `w`, as its `mutate_machine_deployment`
/// writes a new one (served as CAPI v1beta2): class `default-worker`, the nodegroup's name,
/// replicas (none when autoscaled: the bounds are the autoscaler's annotations), the
/// `availability_zone` label as failure domain, the driver's node labels plus ours, and the
/// variable overrides of `default` (the cluster's default worker entry, which the driver wrote
/// with the same rules) with the nodegroup's flavor, image (a Glance id), boot volume, image
/// repository and failure-domain hint. Its server-group override is left out: the driver made a server group
/// per nodegroup with its own credentials, so the new machines take the cluster's.
pub fn topology_entry(default: Option<&Value>, w: &AdoptedWorker<'_>) -> Value {
    let mut overrides: Vec<Value> = default
        .and_then(|d| d.pointer("/variables/overrides"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.get("name").and_then(Value::as_str) != Some("serverGroupId"))
        .collect();
    let mut set = |name: &str, value: Value| match overrides
        .iter_mut()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(name))
    {
        Some(v) => v["value"] = value,
        None => overrides.push(json!({"name": name, "value": value})),
    };
    if let Some(f) = w.flavor {
        set("flavor", json!(f));
    }
    // The driver writes Glance's id of the image; a nodegroup image given by name keeps the
    // default worker's.
    if let Some(i) = w.image.filter(|i| Uuid::parse_str(i).is_ok()) {
        set("imageUUID", json!(i));
    }
    let label = |k: &str| w.labels.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    if let Some(p) = label("container_infra_prefix") {
        set("imageRepository", json!(p));
    }
    if let Some(d) = label("different_failure_domain") {
        set(
            "isServerGroupDiffFailureDomain",
            json!(matches!(
                d.to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on" | "y" | "t"
            )),
        );
    }
    let size = label("boot_volume_size").and_then(|s| s.parse::<i64>().ok());
    let volume_type = label("boot_volume_type");
    if size.is_some() || volume_type.is_some() {
        let mut boot = default
            .and_then(|d| d.pointer("/variables/overrides"))
            .and_then(Value::as_array)
            .and_then(|o| {
                o.iter()
                    .find(|v| v.get("name").and_then(Value::as_str) == Some("bootVolume"))
            })
            .and_then(|v| v.get("value"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        if let Some(s) = size {
            boot["size"] = json!(s);
        }
        if let Some(t) = volume_type {
            boot["type"] = json!(t);
        }
        set("bootVolume", boot);
    }
    let mut labels = Map::new();
    labels.insert(LABEL_MCAPI_WORKER_ROLE.into(), json!(""));
    labels.insert(LABEL_MCAPI_NODEGROUP.into(), json!(w.name));
    for (k, v) in w.ours() {
        labels.insert(k.into(), json!(v));
    }
    let mut metadata = json!({"labels": labels});
    let annotations = w.autoscaler_annotations();
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    let mut entry = json!({
        "class": default
            .and_then(|d| d.get("class"))
            .cloned()
            .unwrap_or_else(|| json!("default-worker")),
        "name": w.name,
        "metadata": metadata,
    });
    if let Some(r) = w.replicas {
        entry["replicas"] = json!(r);
    }
    if let Some(az) = label("availability_zone") {
        entry["failureDomain"] = json!(az);
    }
    for copied in ["healthCheck", "deletion"] {
        if let Some(v) = default.and_then(|d| d.get(copied)) {
            entry[copied] = v.clone();
        }
    }
    if entry.get("deletion").is_none() {
        // The driver's `nodeVolumeDetachTimeout: 300s`.
        entry["deletion"] = json!({"nodeVolumeDetachTimeoutSeconds": 300});
    }
    if !overrides.is_empty() {
        entry["variables"] = json!({"overrides": overrides});
    }
    entry
}

/// The index of the topology entry named `name`.
fn entry_index(cluster: &Value, name: &str) -> Option<usize> {
    cluster
        .pointer(TOPOLOGY_ENTRIES)?
        .as_array()?
        .iter()
        .position(|e| e.get("name").and_then(Value::as_str) == Some(name))
}

/// The JSON patch adding `entry` to the Cluster's topology workers (`add` at `/-`, or the list
/// itself when there is none); empty when an entry of that name is there already (a replay).
pub fn topology_add_patch(cluster: &Value, entry: Value) -> Vec<Value> {
    let name = entry
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if entry_index(cluster, name).is_some() {
        return Vec::new();
    }
    if cluster
        .pointer(TOPOLOGY_ENTRIES)
        .is_some_and(Value::is_array)
    {
        vec![json!({"op": "add", "path": format!("{TOPOLOGY_ENTRIES}/-"), "value": entry})]
    } else if cluster.pointer("/spec/topology/workers").is_some() {
        vec![json!({"op": "add", "path": TOPOLOGY_ENTRIES, "value": [entry]})]
    } else {
        vec![json!({"op": "add", "path": "/spec/topology/workers",
                    "value": {"machineDeployments": [entry]}})]
    }
}

/// The JSON patch removing the topology entry `name` (its name tested first, so a concurrent
/// reorder fails the patch instead of removing another nodegroup); empty when it is gone.
pub fn topology_remove_patch(cluster: &Value, name: &str) -> Vec<Value> {
    let Some(i) = entry_index(cluster, name) else {
        return Vec::new();
    };
    let path = format!("{TOPOLOGY_ENTRIES}/{i}");
    vec![
        json!({"op": "test", "path": format!("{path}/name"), "value": name}),
        json!({"op": "remove", "path": path}),
    ]
}

/// The JSON patch setting `annotations` on the topology entry `name` (merged into what it has;
/// after testing its name), empty when they are there already or the entry is gone.
pub fn topology_annotations_patch(
    cluster: &Value,
    name: &str,
    annotations: &Map<String, Value>,
) -> Vec<Value> {
    let Some(i) = entry_index(cluster, name) else {
        return Vec::new();
    };
    let path = format!("{TOPOLOGY_ENTRIES}/{i}");
    let entry = cluster.pointer(&path).cloned().unwrap_or_default();
    let mut merged = entry
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let before = merged.clone();
    merged.extend(annotations.clone());
    if merged == before {
        return Vec::new();
    }
    let (target, value) = if entry.get("metadata").is_some() {
        (
            format!("{path}/metadata/annotations"),
            Value::Object(merged),
        )
    } else {
        (
            format!("{path}/metadata"),
            json!({"annotations": Value::Object(merged)}),
        )
    };
    vec![
        json!({"op": "test", "path": format!("{path}/name"), "value": name}),
        json!({"op": "add", "path": target, "value": value}),
    ]
}

/// magnum-capi-helm's objects for nodegroup `w` of release `release`: copies of the default
/// worker's MachineDeployment `md`, OpenStackMachineTemplate `osmt` and KubeadmConfigTemplate
/// `kct` (same namespace, Cluster, identity, image, network, bootstrap files and commands), with
/// the chart's naming for a node group (`<release>-<group>`, the templates
/// `<release>-<group>-<8 hex of their spec's SHA-256>`), its `capi.stackhpc.com/node-group`
/// label (also in the selector, the Machines' labels and the kubelet's `node-labels`), the
/// nodegroup's flavor, image (when it names one), replicas or autoscaler bounds, and our labels
/// (on the Machines too, so the watchers see them). Nothing of the driver's objects' status,
/// owners or Helm annotations is copied.
pub fn helm_nodegroup_objects(
    release: &str,
    md: &Value,
    osmt: &Value,
    kct: &Value,
    w: &AdoptedWorker<'_>,
) -> Result<Vec<Value>, CapiError> {
    let group = capi_helm_sanitized(w.name);
    let group = group.trim_matches('-');
    let md_name = helm_component_name(release, group);
    let ours = w.ours();
    let relabel = |labels: Option<&Value>, with_ours: bool| -> Value {
        let mut l = labels
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        l.insert(LABEL_HELM_NODE_GROUP.into(), json!(group));
        if with_ours {
            for (k, v) in &ours {
                l.insert((*k).into(), json!(v));
            }
        }
        Value::Object(l)
    };
    let copy = |src: &Value, spec: Value| -> Result<Value, CapiError> {
        let hash = hex::encode(Sha256::digest(
            serde_json::to_vec(&spec).map_err(|e| CapiError::Invalid(e.to_string()))?,
        ));
        Ok(json!({
            "apiVersion": src.get("apiVersion").cloned().unwrap_or_default(),
            "kind": src.get("kind").cloned().unwrap_or_default(),
            "metadata": {
                "name": format!("{md_name}-{}", &hash[..8]),
                "namespace": src.pointer("/metadata/namespace").cloned().unwrap_or_default(),
                "labels": relabel(src.pointer("/metadata/labels"), true),
            },
            "spec": spec,
        }))
    };

    let mut infra = osmt.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = infra
        .pointer_mut("/template/spec")
        .and_then(Value::as_object_mut)
    {
        if let Some(f) = w.flavor {
            m.remove("flavorID");
            m.insert("flavor".into(), json!(f));
        }
        if let Some(i) = w.image {
            let image = if Uuid::parse_str(i).is_ok() {
                json!({"id": i})
            } else {
                json!({"filter": {"name": i}})
            };
            m.insert("image".into(), image);
        }
    }
    let infra = copy(
        &with_kind(osmt.clone(), kinds::OPENSTACK_MACHINE_TEMPLATE),
        infra,
    )?;

    let mut bootstrap = kct.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Some(reg) = bootstrap
        .pointer_mut("/template/spec/joinConfiguration/nodeRegistration")
        .and_then(Value::as_object_mut)
    {
        let args = reg.entry("kubeletExtraArgs").or_insert_with(|| json!([]));
        set_node_group_label(args, group);
    }
    let bootstrap = copy(
        &with_kind(kct.clone(), kinds::KUBEADM_CONFIG_TEMPLATE),
        bootstrap,
    )?;

    let mut spec = md.get("spec").cloned().unwrap_or_else(|| json!({}));
    match w.replicas {
        Some(r) => spec["replicas"] = json!(r),
        None => {
            if let Some(m) = spec.as_object_mut() {
                m.remove("replicas");
            }
        }
    }
    if let Some(sel) = spec.pointer_mut("/selector/matchLabels")
        && let Some(m) = sel.as_object_mut()
        && m.contains_key(LABEL_HELM_NODE_GROUP)
    {
        m.insert(LABEL_HELM_NODE_GROUP.into(), json!(group));
    }
    let machine_labels = relabel(spec.pointer("/template/metadata/labels"), true);
    spec["template"]["metadata"]["labels"] = machine_labels;
    spec["template"]["spec"]["infrastructureRef"]["name"] = infra["metadata"]["name"].clone();
    spec["template"]["spec"]["bootstrap"]["configRef"]["name"] =
        bootstrap["metadata"]["name"].clone();
    let mut metadata = json!({
        "name": md_name,
        "namespace": md.pointer("/metadata/namespace").cloned().unwrap_or_default(),
        "labels": relabel(md.pointer("/metadata/labels"), true),
    });
    let annotations = w.autoscaler_annotations();
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    let deployment = json!({
        "apiVersion": md.get("apiVersion").cloned().unwrap_or_else(|| json!(kinds::MACHINE_DEPLOYMENT.0)),
        "kind": kinds::MACHINE_DEPLOYMENT.1,
        "metadata": metadata,
        "spec": spec,
    });
    Ok(vec![infra, bootstrap, deployment])
}

/// The chart's kubelet `node-labels` (`capi.stackhpc.com/node-group=<group>` among the others)
/// in a v1beta2 `kubeletExtraArgs` list: the group replaced, or the argument added.
fn set_node_group_label(args: &mut Value, group: &str) {
    let Some(list) = args.as_array_mut() else {
        return;
    };
    let ours = format!("{LABEL_HELM_NODE_GROUP}={group}");
    match list
        .iter_mut()
        .find(|a| a.get("name").and_then(Value::as_str) == Some("node-labels"))
    {
        Some(a) => {
            let value = a.get("value").and_then(Value::as_str).unwrap_or_default();
            let mut parts: Vec<String> = value
                .split(',')
                .filter(|p| !p.is_empty() && !p.starts_with(&format!("{LABEL_HELM_NODE_GROUP}=")))
                .map(str::to_owned)
                .collect();
            parts.push(ours);
            parts.sort();
            a["value"] = json!(parts.join(","));
        }
        None => list.push(json!({"name": "node-labels", "value": ours})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn worker<'a>(
        name: &'a str,
        l: &'a Labels,
        autoscale: Option<(i32, i32)>,
    ) -> AdoptedWorker<'a> {
        AdoptedWorker {
            uuid: Uuid::from_u128(2),
            cluster_uuid: Uuid::from_u128(1),
            name,
            flavor: Some("m1.large"),
            image: None,
            labels: l,
            replicas: if autoscale.is_some() { None } else { Some(2) },
            autoscale,
        }
    }

    fn default_worker_entry() -> Value {
        json!({"class": "default-worker", "name": "default-worker", "replicas": 1,
            "healthCheck": {"enabled": true},
            "deletion": {"nodeVolumeDetachTimeoutSeconds": 300},
            "metadata": {"labels": {"node-role.kubernetes.io/worker": "",
                                    "node.cluster.x-k8s.io/nodegroup": "default-worker"}},
            "variables": {"overrides": [
                {"name": "bootVolume", "value": {"size": 0, "type": "standard"}},
                {"name": "flavor", "value": "m1.small"},
                {"name": "imageRepository", "value": ""},
                {"name": "imageUUID", "value": "0b7a4c1e-0000-4000-8000-000000000001"},
                {"name": "hardwareDiskBus", "value": ""},
                {"name": "serverGroupId", "value": "sg-default-worker"},
                {"name": "isServerGroupDiffFailureDomain", "value": false}]}})
    }

    #[test]
    fn a_magnum_cluster_api_entry_is_the_default_workers_with_the_nodegroups_flavor_and_our_labels()
    {
        let l = labels(&[("boot_volume_size", "40"), ("availability_zone", "az-2")]);
        let e = topology_entry(Some(&default_worker_entry()), &worker("gpu", &l, None));
        assert_eq!(e["class"], "default-worker");
        assert_eq!(e["name"], "gpu");
        assert_eq!(e["replicas"], 2);
        assert_eq!(e["failureDomain"], "az-2");
        assert_eq!(e["healthCheck"], json!({"enabled": true}));
        assert_eq!(
            e["deletion"],
            json!({"nodeVolumeDetachTimeoutSeconds": 300})
        );
        assert_eq!(
            e["metadata"]["labels"],
            json!({"node-role.kubernetes.io/worker": "", "node.cluster.x-k8s.io/nodegroup": "gpu",
                   LABEL_CLUSTER_UUID: Uuid::from_u128(1).to_string(),
                   LABEL_NODEGROUP_UUID: Uuid::from_u128(2).to_string(), LABEL_ROLE: "worker"})
        );
        let o = e["variables"]["overrides"].as_array().unwrap();
        let var = |n: &str| {
            o.iter()
                .find(|v| v["name"] == n)
                .map(|v| v["value"].clone())
        };
        assert_eq!(var("flavor"), Some(json!("m1.large")));
        assert_eq!(
            var("bootVolume"),
            Some(json!({"size": 40, "type": "standard"}))
        );
        assert_eq!(
            var("imageUUID"),
            Some(json!("0b7a4c1e-0000-4000-8000-000000000001")),
            "no image of its own: the default worker's"
        );
        assert_eq!(
            var("serverGroupId"),
            None,
            "not the default worker's server group"
        );
        assert!(e.get("metadata").unwrap().get("annotations").is_none());
    }

    #[test]
    fn an_autoscaled_entry_has_bounds_and_no_replicas() {
        let l = Labels::new();
        let e = topology_entry(None, &worker("auto", &l, Some((1, 4))));
        assert!(e.get("replicas").is_none(), "{e}");
        assert_eq!(
            e["metadata"]["annotations"],
            json!({ANNOTATION_AUTOSCALER_MIN: "1", ANNOTATION_AUTOSCALER_MAX: "4"})
        );
        assert_eq!(e["class"], "default-worker");
        assert_eq!(
            e["variables"]["overrides"],
            json!([{"name": "flavor", "value": "m1.large"}])
        );
    }

    #[test]
    fn topology_patches_add_at_the_end_and_test_the_name_before_changing_an_entry() {
        let cluster = json!({"spec": {"topology": {"workers": {"machineDeployments": [
            {"class": "default-worker", "name": "default-worker"},
            {"class": "default-worker", "name": "gpu", "metadata": {"labels": {}}}]}}}});
        assert_eq!(
            topology_add_patch(&cluster, json!({"name": "new"})),
            vec![json!({"op": "add",
                "path": "/spec/topology/workers/machineDeployments/-", "value": {"name": "new"}})]
        );
        assert_eq!(
            topology_add_patch(&cluster, json!({"name": "gpu"})),
            Vec::<Value>::new()
        );
        let bare = json!({"spec": {"topology": {"controlPlane": {}}}});
        assert_eq!(
            topology_add_patch(&bare, json!({"name": "a"}))[0]["path"],
            "/spec/topology/workers"
        );
        assert_eq!(
            topology_remove_patch(&cluster, "gpu"),
            vec![
                json!({"op": "test", "path": "/spec/topology/workers/machineDeployments/1/name", "value": "gpu"}),
                json!({"op": "remove", "path": "/spec/topology/workers/machineDeployments/1"}),
            ]
        );
        assert!(topology_remove_patch(&cluster, "nope").is_empty());
        let bounds: Map<String, Value> = [(ANNOTATION_AUTOSCALER_MIN.to_string(), json!("2"))]
            .into_iter()
            .collect();
        assert_eq!(
            topology_annotations_patch(&cluster, "gpu", &bounds),
            vec![
                json!({"op": "test", "path": "/spec/topology/workers/machineDeployments/1/name", "value": "gpu"}),
                json!({"op": "add", "path": "/spec/topology/workers/machineDeployments/1/metadata/annotations",
                       "value": {ANNOTATION_AUTOSCALER_MIN: "2"}}),
            ]
        );
        assert_eq!(
            topology_annotations_patch(&cluster, "default-worker", &bounds)[1]["path"],
            "/spec/topology/workers/machineDeployments/0/metadata"
        );
    }

    fn helm_sources() -> (Value, Value, Value) {
        let chart = |c: &str| {
            json!({"capi.stackhpc.com/cluster": "live-abcdef123456", "capi.stackhpc.com/component": c,
                   "capi.stackhpc.com/node-group": "default-worker"})
        };
        let md = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "live-abcdef123456-default-worker", "namespace": "magnum-p",
                "uid": "u-1", "resourceVersion": "7", "labels": chart("worker"),
                "annotations": {"meta.helm.sh/release-name": "live-abcdef123456"}},
            "spec": {"clusterName": "live-abcdef123456", "replicas": 1,
                "selector": {"matchLabels": chart("worker")},
                "template": {"metadata": {"labels": chart("worker")},
                    "spec": {"clusterName": "live-abcdef123456", "version": "v1.31.4",
                        "bootstrap": {"configRef": {"kind": "KubeadmConfigTemplate", "name": "kct-1"}},
                        "infrastructureRef": {"kind": "OpenStackMachineTemplate", "name": "osmt-1"}}}},
            "status": {"replicas": 1}});
        let osmt = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "metadata": {"name": "osmt-1", "namespace": "magnum-p", "labels": chart("worker")},
            "spec": {"template": {"spec": {"flavorID": "f-1", "image": {"id": "img-1"},
                "identityRef": {"cloudName": "openstack", "name": "live-abcdef123456-cloud-credentials"}}}}});
        let kct = json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "metadata": {"name": "kct-1", "namespace": "magnum-p", "labels": chart("worker")},
            "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [
                {"name": "cloud-provider", "value": "external"},
                {"name": "node-labels", "value": "capi.stackhpc.com/node-group=default-worker"}]}}}}}});
        (md, osmt, kct)
    }

    #[test]
    fn a_magnum_capi_helm_nodegroup_copies_the_default_workers_objects_under_the_charts_names() {
        let (md, osmt, kct) = helm_sources();
        let l = Labels::new();
        let w = worker("GPU nodes", &l, None);
        let objs = helm_nodegroup_objects("live-abcdef123456", &md, &osmt, &kct, &w).unwrap();
        let [infra, bootstrap, deployment] = &objs[..] else {
            panic!("{objs:?}")
        };
        assert_eq!(infra["kind"], "OpenStackMachineTemplate");
        let infra_name = infra["metadata"]["name"].as_str().unwrap();
        assert!(
            infra_name.starts_with("live-abcdef123456-gpu-nodes-"),
            "{infra_name}"
        );
        assert_eq!(infra_name.len(), "live-abcdef123456-gpu-nodes-".len() + 8);
        assert_eq!(infra["spec"]["template"]["spec"]["flavor"], "m1.large");
        assert!(infra["spec"]["template"]["spec"].get("flavorID").is_none());
        assert_eq!(
            infra["spec"]["template"]["spec"]["image"],
            json!({"id": "img-1"})
        );
        assert_eq!(
            infra["metadata"]["labels"]["capi.stackhpc.com/node-group"],
            "gpu-nodes"
        );
        assert_eq!(
            bootstrap["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]
                [1]["value"],
            "capi.stackhpc.com/node-group=gpu-nodes"
        );
        assert_eq!(
            deployment["metadata"]["name"],
            "live-abcdef123456-gpu-nodes"
        );
        assert!(deployment["metadata"].get("uid").is_none());
        assert!(
            deployment["metadata"].get("annotations").is_none(),
            "no Helm ownership"
        );
        assert!(deployment.get("status").is_none());
        assert_eq!(deployment["spec"]["replicas"], 2);
        assert_eq!(
            deployment["spec"]["selector"]["matchLabels"]["capi.stackhpc.com/node-group"],
            "gpu-nodes"
        );
        let machine_labels = &deployment["spec"]["template"]["metadata"]["labels"];
        assert_eq!(
            machine_labels[LABEL_NODEGROUP_UUID],
            Uuid::from_u128(2).to_string()
        );
        assert_eq!(machine_labels["capi.stackhpc.com/node-group"], "gpu-nodes");
        assert_eq!(
            deployment["spec"]["template"]["spec"]["infrastructureRef"]["name"],
            infra["metadata"]["name"]
        );
        assert_eq!(
            deployment["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"],
            bootstrap["metadata"]["name"]
        );
        assert_eq!(deployment["spec"]["clusterName"], "live-abcdef123456");
        // The same nodegroup builds the same names (a replay applies the same objects).
        let again = helm_nodegroup_objects("live-abcdef123456", &md, &osmt, &kct, &w).unwrap();
        assert_eq!(again, objs);
        // Autoscaled: bounds as the chart writes them, no replicas.
        let auto = worker("gpu", &l, Some((1, 3)));
        let objs = helm_nodegroup_objects("live-abcdef123456", &md, &osmt, &kct, &auto).unwrap();
        assert!(objs[2]["spec"].get("replicas").is_none());
        assert_eq!(
            objs[2]["metadata"]["annotations"],
            json!({ANNOTATION_AUTOSCALER_MIN: "1", ANNOTATION_AUTOSCALER_MAX: "3"})
        );
    }

    #[test]
    fn node_labels_get_the_node_group_when_the_kubelet_had_none() {
        let mut args = json!([{"name": "cloud-provider", "value": "external"}]);
        set_node_group_label(&mut args, "gpu");
        assert_eq!(
            args[1],
            json!({"name": "node-labels", "value": "capi.stackhpc.com/node-group=gpu"})
        );
        let mut args =
            json!([{"name": "node-labels", "value": "a=b,capi.stackhpc.com/node-group=x"}]);
        set_node_group_label(&mut args, "gpu");
        assert_eq!(args[0]["value"], "a=b,capi.stackhpc.com/node-group=gpu");
    }

    #[test]
    fn a_deleted_nodegroups_templates_go_only_when_nothing_else_refers_to_them() {
        let recorded = vec![
            ("OpenStackMachineTemplate".to_string(), "shared".to_string()),
            ("OpenStackMachineTemplate".to_string(), "mine".to_string()),
            ("KubeadmConfigTemplate".to_string(), "kct-mine".to_string()),
        ];
        let other = json!({"kind": "MachineDeployment", "spec": {"template": {"spec": {
            "infrastructureRef": {"kind": "OpenStackMachineTemplate", "name": "shared"},
            "bootstrap": {"configRef": {"kind": "KubeadmConfigTemplate", "name": "kct-other"}}}}}});
        assert_eq!(
            unused_templates(&recorded, &[other]),
            vec![
                ("KubeadmConfigTemplate".to_string(), "kct-mine".to_string()),
                ("OpenStackMachineTemplate".to_string(), "mine".to_string()),
            ]
        );
    }

    #[test]
    fn a_nodegroup_is_gone_once_no_deployment_or_machine_of_it_is_left() {
        let ng = Uuid::from_u128(9);
        let md = json!({"metadata": {"name": "kube-x-gpu-abc", "labels": {}}});
        let machine =
            json!({"metadata": {"name": "m", "labels": {LABEL_DEPLOYMENT_NAME: "kube-x-gpu-abc"}}});
        let deployments = vec!["kube-x-gpu-abc".to_string()];
        let mut o = Observed {
            machine_deployments: vec![md.into()],
            machines: vec![machine.into()],
            ..Default::default()
        };
        assert!(!nodegroup_gone(&o, ng, &deployments));
        o.machine_deployments.clear();
        assert!(
            !nodegroup_gone(&o, ng, &deployments),
            "its machines are still there"
        );
        o.machines.clear();
        assert!(nodegroup_gone(&o, ng, &deployments));
        let labelled =
            json!({"metadata": {"name": "x", "labels": {LABEL_NODEGROUP_UUID: ng.to_string()}}});
        o.machines.push(labelled.into());
        assert!(!nodegroup_gone(&o, ng, &[]));
    }

    #[test]
    fn names_the_drivers_objects_cannot_carry_are_refused() {
        assert!(rfc1123_subdomain("gpu-1.large"));
        assert!(!rfc1123_subdomain("GPU"));
        assert!(!rfc1123_subdomain("gpu_1"));
        assert!(!rfc1123_subdomain("-gpu"));
        assert!(!rfc1123_subdomain(&"a".repeat(64)));
        assert_eq!(helm_component_name("rel", "gpu"), "rel-gpu");
        assert_eq!(helm_component_name(&"r".repeat(62), "gpu"), "r".repeat(62));
    }
}
