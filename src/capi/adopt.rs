//! Adoption of the clusters Magnum's Cluster API drivers made (issue 25 item 2), on the
//! management cluster: whether a driver's `Cluster` is there ([`Capi::find_adoptable`]), our
//! labels on its Cluster, OpenStackCluster, control plane and MachineDeployments so the watchers
//! and the status writer see them ([`Capi::adopt`]: metadata labels only, nothing of a spec, so
//! no machine rolls), and the resize of an adopted cluster where its driver keeps the replicas
//! ([`Capi::resize_adopted`]). The drivers' names and labels, read from their sources:
//! magnum-capi-helm names the control plane `<release>-control-plane` and a nodegroup's
//! MachineDeployment `<release>-<sanitized nodegroup name>`; magnum-cluster-api uses a
//! ClusterClass, so its MachineDeployments carry `topology.cluster.x-k8s.io/deployment-name` =
//! the nodegroup name and their replicas live in the Cluster's `spec.topology`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use kube::api::{Api, DynamicObject, ListParams};

use super::apply::{KubeError, ObjectRef};
use super::driver::{Capi, CapiError};
use super::{LABEL_CLUSTER_UUID, LABEL_NODEGROUP_UUID, LABEL_ROLE, kinds};
use crate::domain::imported::{DriverFamily, capi_helm_sanitized};
use crate::domain::spec::{ClusterSpec, ObjectsAt};

/// The topology label CAPI's topology controller puts on a ClusterClass MachineDeployment: the
/// name of its entry in `spec.topology.workers.machineDeployments`.
pub const LABEL_TOPOLOGY_DEPLOYMENT: &str = "topology.cluster.x-k8s.io/deployment-name";

/// One nodegroup as adoption maps it onto the driver's objects.
#[derive(Debug, Clone)]
pub struct AdoptedNodegroup {
    pub uuid: Uuid,
    pub name: String,
    pub is_master: bool,
}

/// Whether `md` (a MachineDeployment the driver made for cluster `at`) implements nodegroup
/// `ng`, by the driver's own naming.
pub fn implements(at: &ObjectsAt, md: &Value, ng: &AdoptedNodegroup) -> bool {
    if ng.is_master {
        return false;
    }
    match at.driver {
        DriverFamily::CapiHelm => {
            md.pointer("/metadata/name").and_then(Value::as_str)
                == Some(format!("{}-{}", at.name, capi_helm_sanitized(&ng.name)).as_str())
        }
        DriverFamily::ClusterApi => {
            md.pointer("/metadata/labels")
                .and_then(|l| l.get(LABEL_TOPOLOGY_DEPLOYMENT))
                .and_then(Value::as_str)
                == Some(ng.name.as_str())
        }
        DriverFamily::Heat | DriverFamily::Unknown => false,
    }
}

fn labels(pairs: &[(&str, String)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::from(v.clone())))
        .collect()
}

fn ref_name<'a>(cluster: &'a Value, field: &str) -> Option<&'a str> {
    cluster
        .pointer(&format!("/spec/{field}/name"))
        .and_then(Value::as_str)
}

impl Capi {
    /// One object of an adopted cluster, read by listing its namespace for its name (`None`
    /// when it is not there). The service's RBAC grants `list`, not `get`, on the Cluster API
    /// kinds (`capi::access::DRIVER_VERBS`, the chart's ClusterRole), and adoption runs under
    /// that identity: in `serve`, and in `magnum-capi import` with the service's configuration
    /// (a `get` was refused there on the real apiserver: `tests/it/realstack_adopt.rs`).
    pub(super) async fn read(&self, r: &ObjectRef) -> Result<Option<Value>, CapiError> {
        let ar = super::apply::resource(&r.api_version, &r.kind);
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.mgmt.client().clone(),
            r.namespace.as_deref().unwrap_or_default(),
            &ar,
        );
        let params = ListParams::default().fields(&format!("metadata.name={}", r.name));
        let list = api.list(&params).await.map_err(|e| match e {
            kube::Error::Api(s) if matches!(s.code, 400 | 403 | 404 | 405 | 415 | 422) => {
                KubeError::Refused {
                    what: r.to_string(),
                    message: s.message,
                }
            }
            other => KubeError::Unavailable(format!("{r}: {other}")),
        })?;
        list.items
            .into_iter()
            .find(|o| o.metadata.name.as_deref() == Some(r.name.as_str()))
            .map(|o| serde_json::to_value(o).map_err(|e| CapiError::Invalid(e.to_string())))
            .transpose()
    }

    /// The driver's CAPI `Cluster` at `at` on this management cluster, if it is there (what
    /// [`Capi::adopt`] labels).
    pub async fn find_adoptable(&self, at: &ObjectsAt) -> Result<Option<Value>, CapiError> {
        self.read(&ObjectRef::new(kinds::CLUSTER, &at.namespace, &at.name))
            .await
    }

    /// Labels the driver's objects of cluster `uuid` at `at` (its `cluster`, as
    /// [`Capi::find_adoptable`] found it) as ours: the Cluster, its
    /// OpenStackCluster and control plane (named by its refs) and the MachineDeployments of its
    /// nodegroups (by the driver's naming) get our cluster-uuid label, the control plane and
    /// MachineDeployments also their nodegroup's uuid and role. A merge patch of
    /// `metadata.labels` only: no spec changes, so nothing rolls, and no field of the driver's
    /// changes owner. Idempotent. Returns the nodegroups whose objects were not found.
    pub async fn adopt(
        &self,
        uuid: Uuid,
        at: &ObjectsAt,
        cluster: &Value,
        nodegroups: &[AdoptedNodegroup],
    ) -> Result<Vec<String>, CapiError> {
        let ns = at.namespace.as_str();
        let cluster_ref = ObjectRef::new(kinds::CLUSTER, ns, &at.name);
        let ours = labels(&[(LABEL_CLUSTER_UUID, uuid.to_string())]);
        self.mgmt.label(&cluster_ref, &ours).await?;
        if let Some(osc) = ref_name(cluster, "infrastructureRef") {
            self.mgmt
                .label(&ObjectRef::new(kinds::OPENSTACK_CLUSTER, ns, osc), &ours)
                .await?;
        }
        let mut missing = Vec::new();
        let master = nodegroups.iter().find(|n| n.is_master);
        match (ref_name(cluster, "controlPlaneRef"), master) {
            (Some(kcp), Some(m)) => {
                let l = labels(&[
                    (LABEL_CLUSTER_UUID, uuid.to_string()),
                    (LABEL_NODEGROUP_UUID, m.uuid.to_string()),
                    (LABEL_ROLE, "master".into()),
                ]);
                self.mgmt
                    .label(&ObjectRef::new(kinds::CONTROL_PLANE, ns, kcp), &l)
                    .await?;
            }
            (None, Some(m)) => missing.push(m.name.clone()),
            _ => {}
        }
        let sel = format!("{}={}", super::LABEL_CAPI_CLUSTER_NAME, at.name);
        let mds: Vec<Value> = self
            .mgmt
            .list(kinds::MACHINE_DEPLOYMENT, ns, &sel)
            .await?
            .into_iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect();
        for ng in nodegroups.iter().filter(|n| !n.is_master) {
            let Some(md) = mds.iter().find(|md| implements(at, md, ng)) else {
                missing.push(ng.name.clone());
                continue;
            };
            let name = md
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let l = labels(&[
                (LABEL_CLUSTER_UUID, uuid.to_string()),
                (LABEL_NODEGROUP_UUID, ng.uuid.to_string()),
                (LABEL_ROLE, "worker".into()),
            ]);
            self.mgmt
                .label(&ObjectRef::new(kinds::MACHINE_DEPLOYMENT, ns, name), &l)
                .await?;
        }
        Ok(missing)
    }

    /// A resize of an adopted cluster: each nodegroup's replicas set where its driver keeps
    /// them, and nothing else. magnum-capi-helm: `spec.replicas` of its MachineDeployment (and
    /// of the control plane), by a merge patch. magnum-cluster-api: the nodegroup's entry of
    /// the Cluster's `spec.topology.workers.machineDeployments` (and
    /// `spec.topology.controlPlane.replicas`), by a JSON patch that tests the entry's name
    /// first (the topology controller owns the MachineDeployments and would undo a change made
    /// on them). An autoscaled worker nodegroup's replicas are the autoscaler's: not written
    /// (as both drivers leave them out when autoscaling).
    pub(super) async fn resize_adopted(
        &self,
        spec: &ClusterSpec,
        at: &ObjectsAt,
    ) -> Result<(), CapiError> {
        let ns = at.namespace.as_str();
        let sized: Vec<&crate::domain::spec::Nodegroup> = spec
            .nodegroups
            .iter()
            .filter(|n| {
                n.is_master()
                    || !matches!(
                        super::values::worker_size(n, &spec.cluster.labels),
                        Ok((_, Some(_)))
                    )
            })
            .collect();
        match at.driver {
            DriverFamily::CapiHelm => {
                // One LIST per kind for all the nodegroups it sizes, not one per nodegroup.
                for (gvk, masters) in [
                    (kinds::CONTROL_PLANE, true),
                    (kinds::MACHINE_DEPLOYMENT, false),
                ] {
                    let counts: BTreeMap<String, i32> = sized
                        .iter()
                        .filter(|n| n.is_master() == masters)
                        .map(|n| (n.uuid.to_string(), n.node_count))
                        .collect();
                    if counts.is_empty() {
                        continue;
                    }
                    let uuids: Vec<&str> = counts.keys().map(String::as_str).collect();
                    let sel = format!("{LABEL_NODEGROUP_UUID} in ({})", uuids.join(","));
                    for o in self.mgmt.list(gvk, ns, &sel).await? {
                        let Some(&count) = o
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(LABEL_NODEGROUP_UUID))
                            .and_then(|u| counts.get(u))
                        else {
                            continue;
                        };
                        if o.data.pointer("/spec/replicas").and_then(Value::as_i64)
                            != Some(i64::from(count))
                        {
                            let name = o.metadata.name.unwrap_or_default();
                            self.mgmt
                                .merge_patch(
                                    &ObjectRef::new(gvk, ns, &name),
                                    &json!({"spec": {"replicas": count}}),
                                )
                                .await?;
                        }
                    }
                }
            }
            DriverFamily::ClusterApi => {
                let wanted: Vec<(&str, bool, i32)> = sized
                    .iter()
                    .map(|n| (n.name.as_str(), n.is_master(), n.node_count))
                    .collect();
                self.patch_adopted_cluster(at, |cluster| topology_replicas_patch(cluster, &wanted))
                    .await?;
            }
            DriverFamily::Heat | DriverFamily::Unknown => {}
        }
        Ok(())
    }

    /// The adopted cluster's CAPI `Cluster` (it must be there).
    pub(super) async fn adopted_cluster(
        &self,
        at: &ObjectsAt,
    ) -> Result<(ObjectRef, Value), CapiError> {
        let r = ObjectRef::new(kinds::CLUSTER, &at.namespace, &at.name);
        match self.read(&r).await? {
            Some(v) => Ok((r, v)),
            None => Err(CapiError::Stuck(format!(
                "the Cluster {}/{} is gone from the management cluster",
                at.namespace, at.name
            ))),
        }
    }

    /// Applies to the adopted cluster's CAPI `Cluster` the JSON patch `ops` makes of it as it
    /// is now (nothing when `ops` makes none): a GET and at most one PATCH, the way every change
    /// of a magnum-cluster-api topology (resize, nodegroup create, update, delete) is written.
    pub(super) async fn patch_adopted_cluster(
        &self,
        at: &ObjectsAt,
        ops: impl FnOnce(&Value) -> Vec<Value>,
    ) -> Result<(), CapiError> {
        let (r, cluster) = self.adopted_cluster(at).await?;
        let ops = ops(&cluster);
        if !ops.is_empty() {
            self.mgmt.json_patch(&r, &Value::Array(ops)).await?;
        }
        Ok(())
    }
}

/// The JSON patch operations that set each nodegroup's replicas (`wanted`: name, whether it is
/// the control plane, node count) in a ClusterClass Cluster's topology, where they differ (each
/// entry's name tested first, so a concurrent reorder fails the patch instead of resizing
/// another nodegroup).
pub fn topology_replicas_patch(cluster: &Value, wanted: &[(&str, bool, i32)]) -> Vec<Value> {
    let mut ops = Vec::new();
    for &(name, is_master, count) in wanted {
        let want = json!(count);
        if is_master {
            let path = "/spec/topology/controlPlane/replicas";
            if cluster.pointer(path) != Some(&want) {
                ops.push(json!({"op": "add", "path": path, "value": want}));
            }
            continue;
        }
        let entries = cluster
            .pointer("/spec/topology/workers/machineDeployments")
            .and_then(Value::as_array);
        let Some((i, entry)) = entries.and_then(|e| {
            e.iter()
                .enumerate()
                .find(|(_, m)| m.get("name").and_then(Value::as_str) == Some(name))
        }) else {
            continue;
        };
        if entry.get("replicas") != Some(&want) {
            let base = format!("/spec/topology/workers/machineDeployments/{i}");
            ops.push(json!({"op": "test", "path": format!("{base}/name"), "value": name}));
            ops.push(json!({"op": "add", "path": format!("{base}/replicas"), "value": want}));
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(driver: DriverFamily) -> ObjectsAt {
        ObjectsAt {
            namespace: "ns".into(),
            name: "live-abcdef123456".into(),
            driver,
        }
    }

    fn ng(name: &str) -> AdoptedNodegroup {
        AdoptedNodegroup {
            uuid: Uuid::nil(),
            name: name.into(),
            is_master: false,
        }
    }

    #[test]
    fn each_driver_names_a_nodegroups_machine_deployment_its_own_way() {
        let helm = json!({"metadata": {"name": "live-abcdef123456-gpu-nodes"}});
        assert!(implements(
            &at(DriverFamily::CapiHelm),
            &helm,
            &ng("GPU nodes")
        ));
        assert!(!implements(&at(DriverFamily::CapiHelm), &helm, &ng("gpu")));
        let topology = json!({"metadata": {"name": "live-abcdef123456-gpu-x1y2z",
            "labels": {LABEL_TOPOLOGY_DEPLOYMENT: "gpu"}}});
        assert!(implements(
            &at(DriverFamily::ClusterApi),
            &topology,
            &ng("gpu")
        ));
        assert!(!implements(
            &at(DriverFamily::ClusterApi),
            &helm,
            &ng("gpu")
        ));
    }

    #[test]
    fn a_topology_resize_changes_only_the_replicas_that_differ_after_testing_the_entry() {
        let cluster = json!({"spec": {"topology": {"controlPlane": {"replicas": 3},
            "workers": {"machineDeployments": [
                {"class": "default-worker", "name": "default-worker", "replicas": 1},
                {"class": "default-worker", "name": "gpu", "replicas": 2}]}}}});
        let ops = topology_replicas_patch(
            &cluster,
            &[
                ("m", true, 3),
                ("default-worker", false, 1),
                ("gpu", false, 4),
            ],
        );
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/spec/topology/workers/machineDeployments/1/name", "value": "gpu"}),
                json!({"op": "add", "path": "/spec/topology/workers/machineDeployments/1/replicas", "value": 4}),
            ]
        );
        assert!(topology_replicas_patch(&cluster, &[("m", true, 3)]).is_empty());
    }
}
