//! The upgrade of a cluster adopted from Magnum's Cluster API drivers (issue 25 item 2), on the
//! driver's own objects, as the driver itself would have done it (docs/moving-from-magnum.md).
//! magnum-cluster-api (`driver.py` `upgrade_cluster`, `resources.py`): the Cluster's
//! `spec.topology.version` (the `kube_tag`) and its `imageUUID` topology variable, plus the
//! `imageUUID` override of each `machineDeployments` entry that has one; CAPI's topology
//! controller then rolls the control plane and the workers. magnum-capi-helm (`helm upgrade` of
//! capi-helm-charts' `openstack-cluster` with the new `kubernetesVersion`/`machineImageId`): new
//! OpenStackMachineTemplates (immutable, so copies of the live ones with `image: {id}`, named
//! `<component>-<8 hex of the spec's checksum>` as the chart names them) and the control
//! plane's and each MachineDeployment's version and `infrastructureRef` pointed at them.
//! Every patch tests what it replaces first, so an object changed meanwhile fails the patch
//! instead of being overwritten.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::apply::ObjectRef;
use super::driver::{Capi, CapiError};
use super::{LABEL_CAPI_CLUSTER_NAME, kinds};
use crate::domain::imported::DriverFamily;
use crate::domain::os_distro::OsDistro;
use crate::domain::spec::{ObjectsAt, Template};

/// The topology variable (and `machineDeployments` override) magnum-cluster-api keeps the
/// Glance image id in.
const MCAPI_IMAGE_VARIABLE: &str = "imageUUID";
/// capi-helm-charts' `projectPrefix`: its annotation of a machine template's full checksum.
const CHART_CHECKSUM_ANNOTATION: &str = "capi.stackhpc.com/template-checksum";
/// Where a KubeadmControlPlane keeps its machine template: v1beta2, then v1beta1.
const KCP_INFRA_REFS: [&str; 2] = [
    "/spec/machineTemplate/spec/infrastructureRef",
    "/spec/machineTemplate/infrastructureRef",
];
const MD_INFRA_REF: &str = "/spec/template/spec/infrastructureRef";

/// What an adopted cluster is upgraded to: the Kubernetes version (`v1.x.y`) and the Glance
/// image id, and the image's distribution.
#[derive(Debug, Clone)]
pub struct UpgradeTo {
    pub version: String,
    pub image_id: String,
    pub distro: OsDistro,
}

impl UpgradeTo {
    /// From the operation's template (as the request checked it: `domain::adopted_upgrade`).
    pub fn of(t: &Template) -> Result<Self, CapiError> {
        let version = t
            .labels
            .get("kube_tag")
            .cloned()
            .or_else(|| t.resolved.kube_version.clone())
            .ok_or_else(|| CapiError::Invalid("the template names no Kubernetes version".into()))?;
        let version = format!("v{}", version.trim_start_matches('v'));
        // Without an image service to resolve it (`serve --dev`), the image as the template
        // names it.
        let image_id = t
            .resolved
            .image_id
            .clone()
            .or_else(|| t.image_id.clone())
            .ok_or_else(|| CapiError::Invalid("the template names no image".into()))?;
        let distro = OsDistro::from_image(t.resolved.os_distro.as_deref())
            .map_err(|e| CapiError::Invalid(e.to_string()))?;
        Ok(Self {
            version,
            image_id,
            distro,
        })
    }
}

/// A JSON-patch `test` then `replace` of `path` (from `current` to `value`); nothing when they
/// are equal.
fn swap(ops: &mut Vec<Value>, path: &str, current: &Value, value: Value) {
    if *current != value {
        ops.push(json!({"op": "test", "path": path, "value": current}));
        ops.push(json!({"op": "replace", "path": path, "value": value}));
    }
}

/// The index of the entry named `name` in the array at `path` of `obj`.
fn entry(obj: &Value, path: &str, name: &str) -> Option<(usize, Value)> {
    obj.pointer(path)?
        .as_array()?
        .iter()
        .enumerate()
        .find(|(_, v)| v.get("name").and_then(Value::as_str) == Some(name))
        .map(|(i, v)| (i, v.clone()))
}

/// magnum-cluster-api's upgrade of its ClusterClass `Cluster`, as JSON-patch operations: the
/// topology's version and `imageUUID` variable, and each worker entry's `imageUUID` override
/// (every entry magnum-cluster-api wrote has one), each tested before it is replaced. `Err`
/// when the Cluster is not what that driver writes.
pub fn topology_upgrade_patch(cluster: &Value, to: &UpgradeTo) -> Result<Vec<Value>, String> {
    let mut ops = Vec::new();
    let version = cluster
        .pointer("/spec/topology/version")
        .ok_or("the Cluster has no spec.topology.version")?;
    swap(
        &mut ops,
        "/spec/topology/version",
        version,
        json!(to.version),
    );
    let (i, var) = entry(cluster, "/spec/topology/variables", MCAPI_IMAGE_VARIABLE)
        .ok_or("the Cluster's topology has no imageUUID variable")?;
    if var.get("value") != Some(&json!(to.image_id)) {
        let base = format!("/spec/topology/variables/{i}");
        ops.push(
            json!({"op": "test", "path": format!("{base}/name"), "value": MCAPI_IMAGE_VARIABLE}),
        );
        ops.push(json!({"op": "replace", "path": format!("{base}/value"), "value": to.image_id}));
    }
    let workers = cluster
        .pointer("/spec/topology/workers/machineDeployments")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (j, md) in workers.iter().enumerate() {
        let md_base = format!("/spec/topology/workers/machineDeployments/{j}");
        let Some((k, o)) = entry(md, "/variables/overrides", MCAPI_IMAGE_VARIABLE) else {
            continue;
        };
        if o.get("value") != Some(&json!(to.image_id)) {
            let name = md.get("name").cloned().unwrap_or(Value::Null);
            let base = format!("{md_base}/variables/overrides/{k}");
            ops.push(json!({"op": "test", "path": format!("{md_base}/name"), "value": name}));
            ops.push(json!({"op": "test", "path": format!("{base}/name"), "value": MCAPI_IMAGE_VARIABLE}));
            ops.push(
                json!({"op": "replace", "path": format!("{base}/value"), "value": to.image_id}),
            );
        }
    }
    Ok(ops)
}

/// capi-helm-charts' replacement of the immutable machine template `live` for `component`
/// (`<release>-control-plane` or `<release>-<nodegroup>`, the name the chart gives that part)
/// on image `image_id`: the same spec with `image: {id}` (what the chart renders from
/// magnum-capi-helm's `machineImageId`), named `<component>-<first 8 hex of its checksum>`
/// with the full checksum annotated (nothing of Helm's: Helm must never take it for its
/// release's). The checksum is of the spec as JSON, not of the chart's YAML text: the
/// name has the chart's shape, not necessarily the hash a `helm upgrade` would compute.
pub fn replacement_template(live: &Value, component: &str, image_id: &str) -> Value {
    let mut spec = live.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["template"]["spec"]["image"] = json!({"id": image_id});
    let sum = hex::encode(Sha256::digest(spec.to_string().as_bytes()));
    let labels = live
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    json!({
        "apiVersion": kinds::OPENSTACK_MACHINE_TEMPLATE.0,
        "kind": kinds::OPENSTACK_MACHINE_TEMPLATE.1,
        "metadata": {
            "name": format!("{component}-{}", &sum[..8]),
            "namespace": live.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
            "labels": labels,
            "annotations": {CHART_CHECKSUM_ANNOTATION: sum},
        },
        "spec": spec,
    })
}

/// The JSON patch pointing a control plane or MachineDeployment (`obj`) at `template` and
/// `version` (at `version_path`), testing the reference it replaces.
pub fn rollout_patch(
    obj: &Value,
    ref_path: &str,
    template: &str,
    version_path: &str,
    version: &str,
) -> Vec<Value> {
    let mut ops = Vec::new();
    let name_path = format!("{ref_path}/name");
    if let Some(current) = obj.pointer(&name_path) {
        swap(&mut ops, &name_path, current, json!(template));
    }
    match obj.pointer(version_path) {
        Some(current) => swap(&mut ops, version_path, current, json!(version)),
        None => ops.push(json!({"op": "add", "path": version_path, "value": version})),
    }
    ops
}

impl Capi {
    /// Upgrades the adopted cluster at `at` to `to` on its driver's objects (module docs).
    pub(super) async fn upgrade_adopted(
        &self,
        at: &ObjectsAt,
        to: &Template,
    ) -> Result<(), CapiError> {
        let to = UpgradeTo::of(to)?;
        let ns = at.namespace.as_str();
        let cluster_ref = ObjectRef::new(kinds::CLUSTER, ns, &at.name);
        let cluster = self.read(&cluster_ref).await?.ok_or_else(|| {
            CapiError::Stuck(format!(
                "the Cluster {ns}/{} is gone from the management cluster",
                at.name
            ))
        })?;
        let kcp_name = cluster
            .pointer("/spec/controlPlaneRef/name")
            .and_then(Value::as_str)
            .ok_or_else(|| CapiError::Stuck("the Cluster has no control plane".into()))?;
        let kcp_ref = ObjectRef::new(kinds::CONTROL_PLANE, ns, kcp_name);
        let kcp = self
            .read(&kcp_ref)
            .await?
            .ok_or_else(|| CapiError::Stuck(format!("the control plane {kcp_name} is gone")))?;
        // The bootstrap the driver made stays: it must boot the new image.
        let ignition = kcp.pointer("/spec/kubeadmConfigSpec/format") == Some(&json!("ignition"));
        if ignition != to.distro.ignition() {
            return Err(CapiError::Invalid(format!(
                "the cluster's machines boot {} and the new image is {}: its bootstrap cannot \
                 boot it",
                if ignition { "Ignition" } else { "cloud-init" },
                to.distro.as_str()
            )));
        }
        match at.driver {
            DriverFamily::ClusterApi => {
                let ops = topology_upgrade_patch(&cluster, &to).map_err(|why| {
                    CapiError::Stuck(format!(
                        "{why}: not a Cluster magnum-cluster-api made; nothing was changed"
                    ))
                })?;
                if !ops.is_empty() {
                    self.mgmt
                        .json_patch(&cluster_ref, &Value::Array(ops))
                        .await?;
                }
                self.topology_taken_up(&kcp_ref, &to.version).await?;
            }
            DriverFamily::CapiHelm => {
                let ref_path = KCP_INFRA_REFS
                    .into_iter()
                    .find(|p| kcp.pointer(p).is_some())
                    .ok_or_else(|| {
                        CapiError::Stuck("the control plane names no machine template".into())
                    })?;
                let component = format!("{}-control-plane", at.name);
                self.roll_to(&kcp_ref, &kcp, ref_path, "/spec/version", &component, &to)
                    .await?;
                let sel = format!("{LABEL_CAPI_CLUSTER_NAME}={}", at.name);
                for md in self.mgmt.list(kinds::MACHINE_DEPLOYMENT, ns, &sel).await? {
                    let name = md.metadata.name.clone().unwrap_or_default();
                    let md =
                        serde_json::to_value(md).map_err(|e| CapiError::Invalid(e.to_string()))?;
                    let r = ObjectRef::new(kinds::MACHINE_DEPLOYMENT, ns, &name);
                    // The chart names a nodegroup's parts `<release>-<nodegroup>`: the
                    // MachineDeployment's own name.
                    self.roll_to(
                        &r,
                        &md,
                        MD_INFRA_REF,
                        "/spec/template/spec/version",
                        &name,
                        &to,
                    )
                    .await?;
                }
            }
            DriverFamily::Heat | DriverFamily::Unknown => {}
        }
        Ok(())
    }

    /// Whether CAPI's topology controller has taken a magnum-cluster-api Cluster's new version
    /// up: its control plane `kcp` asks for `version`. Until then the control plane and the
    /// MachineDeployments look ready at the old version, and an upgrade reported done at once
    /// was completed on that old view (found on the real topology controller:
    /// `tests/it/realstack_adopt.rs`). Not yet: [`CapiError::Waiting`], so the worker runs the
    /// (idempotent) step again later instead of holding itself while the controller catches up.
    async fn topology_taken_up(&self, kcp: &ObjectRef, version: &str) -> Result<(), CapiError> {
        let asked = self.read(kcp).await?.and_then(|v| {
            v.pointer("/spec/version")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        if asked.as_deref() == Some(version) {
            return Ok(());
        }
        Err(CapiError::Waiting(format!(
            "CAPI's topology controller has not yet asked the control plane {} for {version}",
            kcp.name
        )))
    }

    /// Writes the replacement of the machine template `obj` refers to at `ref_path` and points
    /// `obj` at it and at the new version.
    async fn roll_to(
        &self,
        r: &ObjectRef,
        obj: &Value,
        ref_path: &str,
        version_path: &str,
        component: &str,
        to: &UpgradeTo,
    ) -> Result<(), CapiError> {
        let ns = r.namespace.as_deref().unwrap_or_default();
        let current = obj
            .pointer(&format!("{ref_path}/name"))
            .and_then(Value::as_str)
            .ok_or_else(|| CapiError::Stuck(format!("{r} names no machine template")))?;
        let live = self
            .read(&ObjectRef::new(
                kinds::OPENSTACK_MACHINE_TEMPLATE,
                ns,
                current,
            ))
            .await?
            .ok_or_else(|| CapiError::Stuck(format!("the machine template {current} is gone")))?;
        let next = replacement_template(&live, component, &to.image_id);
        // A live template already on the image stays the one referred to.
        let template = if next.get("spec") == live.get("spec") {
            current
        } else {
            self.mgmt.apply(&next).await?;
            next.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let ops = rollout_patch(obj, ref_path, template, version_path, &to.version);
        if !ops.is_empty() {
            self.mgmt.json_patch(r, &Value::Array(ops)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to() -> UpgradeTo {
        UpgradeTo {
            version: "v1.32.1".into(),
            image_id: "img-new".into(),
            distro: OsDistro::Ubuntu,
        }
    }

    #[test]
    fn a_topology_upgrade_replaces_the_version_and_every_image_variable_after_testing_them() {
        let cluster = json!({"spec": {"topology": {"version": "v1.31.4",
            "variables": [{"name": "apiServerLoadBalancer", "value": {}},
                          {"name": "imageUUID", "value": "img-old"}],
            "workers": {"machineDeployments": [
                {"name": "default-worker", "class": "default-worker"},
                {"name": "gpu", "variables": {"overrides": [
                    {"name": "flavor", "value": "g1"}, {"name": "imageUUID", "value": "img-old"}]}}]}}}});
        let ops = topology_upgrade_patch(&cluster, &to()).unwrap();
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/spec/topology/version", "value": "v1.31.4"}),
                json!({"op": "replace", "path": "/spec/topology/version", "value": "v1.32.1"}),
                json!({"op": "test", "path": "/spec/topology/variables/1/name", "value": "imageUUID"}),
                json!({"op": "replace", "path": "/spec/topology/variables/1/value", "value": "img-new"}),
                json!({"op": "test", "path": "/spec/topology/workers/machineDeployments/1/name", "value": "gpu"}),
                json!({"op": "test", "path": "/spec/topology/workers/machineDeployments/1/variables/overrides/1/name", "value": "imageUUID"}),
                json!({"op": "replace", "path": "/spec/topology/workers/machineDeployments/1/variables/overrides/1/value", "value": "img-new"}),
            ]
        );
        let mut patched = cluster.clone();
        json_patch::patch(
            &mut patched,
            &serde_json::from_value::<json_patch::Patch>(Value::Array(ops)).unwrap(),
        )
        .unwrap();
        assert!(topology_upgrade_patch(&patched, &to()).unwrap().is_empty());
        let no_image = json!({"spec": {"topology": {"version": "v1.31.4", "variables": []}}});
        assert!(topology_upgrade_patch(&no_image, &to()).is_err());
    }

    #[test]
    fn a_chart_machine_template_is_replaced_by_a_copy_on_the_new_image_named_by_its_checksum() {
        let live = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "OpenStackMachineTemplate",
            "metadata": {"name": "r-control-plane-9a8b7c6d", "namespace": "ns",
                         "labels": {"capi.stackhpc.com/cluster": "r"}, "uid": "u1"},
            "spec": {"template": {"spec": {"flavor": "m1.medium",
                "image": {"filter": {"name": "old"}}, "sshKeyName": "k"}}}});
        let next = replacement_template(&live, "r-control-plane", "img-new");
        let name = next["metadata"]["name"].as_str().unwrap();
        let sum = next["metadata"]["annotations"][CHART_CHECKSUM_ANNOTATION]
            .as_str()
            .unwrap();
        assert_eq!(name, format!("r-control-plane-{}", &sum[..8]));
        assert_eq!(
            next["spec"]["template"]["spec"],
            json!({"flavor": "m1.medium", "image": {"id": "img-new"}, "sshKeyName": "k"})
        );
        assert_eq!(next["metadata"]["labels"], live["metadata"]["labels"]);
        assert!(next["metadata"].get("uid").is_none());
        assert_eq!(
            replacement_template(&live, "r-control-plane", "img-new"),
            next,
            "the same spec gives the same name"
        );
        assert_ne!(
            replacement_template(&live, "r-control-plane", "img-other")["metadata"]["name"],
            next["metadata"]["name"]
        );
    }

    #[test]
    fn a_rollout_patch_tests_the_template_it_replaces_and_sets_the_version() {
        let md = json!({"spec": {"template": {"spec": {"version": "v1.31.4",
            "infrastructureRef": {"name": "r-w-1f2e3d4c"}}}}});
        assert_eq!(
            rollout_patch(
                &md,
                MD_INFRA_REF,
                "r-w-0a0b0c0d",
                "/spec/template/spec/version",
                "v1.32.1"
            ),
            vec![
                json!({"op": "test", "path": "/spec/template/spec/infrastructureRef/name", "value": "r-w-1f2e3d4c"}),
                json!({"op": "replace", "path": "/spec/template/spec/infrastructureRef/name", "value": "r-w-0a0b0c0d"}),
                json!({"op": "test", "path": "/spec/template/spec/version", "value": "v1.31.4"}),
                json!({"op": "replace", "path": "/spec/template/spec/version", "value": "v1.32.1"}),
            ]
        );
        assert!(
            rollout_patch(
                &md,
                MD_INFRA_REF,
                "r-w-1f2e3d4c",
                "/spec/template/spec/version",
                "v1.31.4"
            )
            .is_empty()
        );
    }
}
