//! Forgetting a cluster whose delete cannot finish (`magnum-capi cluster forget`): what it leaves
//! in the tenant project, read from its objects on the management cluster, and the removal of
//! those objects with their finalizers dropped, so no CAPI/CAPO/CAAPH controller acts on the
//! cloud for them afterwards. Nothing in the cloud is touched here.

use std::collections::BTreeSet;

use kube::api::DynamicObject;
use serde_json::Value;

use super::apply::ObjectRef;
use super::driver::{Capi, CapiError, name_of, namespace_of};
use super::{LABEL_CAPI_CLUSTER_NAME, LABEL_CLUSTER_UUID, kinds};
use crate::domain::spec::Cluster;
use crate::driver::Forgotten;

/// The kinds a cluster has objects of on the management cluster, the `Cluster` first (so CAPI
/// stops reconciling the rest), the namespace (shared by the project's clusters) never.
fn forgettable() -> impl Iterator<Item = kinds::Gvk> {
    std::iter::once(kinds::CLUSTER).chain(
        kinds::ALL
            .into_iter()
            .filter(|k| *k != kinds::NAMESPACE && *k != kinds::CLUSTER),
    )
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

impl Capi {
    /// The cluster's objects of kind `gvk`: ours (our uuid label) and those CAPI and CAAPH made
    /// for it (CAPI's cluster-name label), once each.
    async fn objects_of(
        &self,
        c: &Cluster,
        gvk: kinds::Gvk,
    ) -> Result<Vec<DynamicObject>, CapiError> {
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for selector in [
            format!("{LABEL_CLUSTER_UUID}={}", c.uuid),
            format!("{LABEL_CAPI_CLUSTER_NAME}={name}"),
        ] {
            for o in self.mgmt.list(gvk, &ns, &selector).await? {
                if seen.insert(o.metadata.name.clone().unwrap_or_default()) {
                    out.push(o);
                }
            }
        }
        Ok(out)
    }

    /// What the cluster leaves in its tenant project when it is forgotten now: the servers of
    /// the machines still on the management cluster, the network, router, API load balancer and
    /// security groups its `OpenStackCluster` reports, what the workload made (load balancers,
    /// volumes) and the server groups the driver made.
    pub async fn leftovers(&self, c: &Cluster) -> Result<Vec<String>, CapiError> {
        let name = name_of(c);
        let mut out = Vec::new();
        for m in self.objects_of(c, kinds::MACHINE).await? {
            let m = serde_json::to_value(&m).unwrap_or_default();
            out.push(format!(
                "Nova server of machine {} ({})",
                s(&m, "/metadata/name").unwrap_or("?"),
                s(&m, "/spec/providerID").unwrap_or("no server id reported yet")
            ));
        }
        for osc in self.objects_of(c, kinds::OPENSTACK_CLUSTER).await? {
            let osc = serde_json::to_value(&osc).unwrap_or_default();
            for (what, ptr) in [
                ("Neutron network", "/status/network/id"),
                ("Neutron router", "/status/router/id"),
                (
                    "Octavia API load balancer",
                    "/status/apiServerLoadBalancer/id",
                ),
                ("bastion server", "/status/bastion/id"),
                (
                    "security group (control plane)",
                    "/status/controlPlaneSecurityGroup/id",
                ),
                ("security group (workers)", "/status/workerSecurityGroup/id"),
                (
                    "security group (bastion)",
                    "/status/bastionSecurityGroup/id",
                ),
            ] {
                if let Some(id) = s(&osc, ptr) {
                    out.push(format!("{what} {id}"));
                }
            }
        }
        out.push(format!(
            "any Octavia load balancers of its Services (named or tagged kube_service_{name}_…), \
             the floating IPs on their VIP ports and the security groups OCCM made for them \
             (descriptions ending 'cluster {name}')"
        ));
        out.push(format!(
            "any Cinder volumes of its PersistentVolumes (metadata \
             cinder.csi.openstack.org/cluster={name}) and their snapshots"
        ));
        out.push(format!(
            "any Nova server groups named {name}-control-plane or {name}-<nodegroup>…"
        ));
        if super::api_security::may_have_groups(c) {
            out.push(format!(
                "the security groups {} and {} (the machines' groups of an API restricted by \
                 api_master_lb_allowed_cidrs)",
                super::api_security::control_plane_group(&name),
                super::api_security::worker_group(&name)
            ));
        }
        if super::api_vip::on_virtual_ip(c) {
            out.push(format!(
                "the API's virtual-IP port {} and the floating IP on it",
                super::api_vip::vip_port_name(&name)
            ));
        }
        Ok(out)
    }

    /// Removes the cluster's objects from the management cluster, each deleted with its
    /// finalizers dropped; carries on past a failure and reports it.
    pub async fn forget(&self, c: &Cluster) -> Forgotten {
        let ns = namespace_of(&self.config, c);
        let mut done = Forgotten::default();
        for gvk in forgettable() {
            let objects = match self.objects_of(c, gvk).await {
                Ok(o) => o,
                Err(e) => {
                    done.failed.push(format!("{} (listing): {e}", gvk.1));
                    continue;
                }
            };
            for o in objects {
                let name = o.metadata.name.unwrap_or_default();
                let shown = format!("{}/{name}", gvk.1);
                match self.mgmt.remove(&ObjectRef::new(gvk, &ns, &name)).await {
                    Ok(()) => done.removed.push(shown),
                    Err(e) => done.failed.push(format!("{shown}: {e}")),
                }
            }
        }
        done
    }
}
