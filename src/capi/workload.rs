//! The workload cluster as the driver reaches it: a kube client from the admin kubeconfig CAPI
//! keeps in `<cluster>-kubeconfig` on the management cluster (through its `proxy-url`, if any),
//! and what a delete reads there before the machines go (what the PersistentVolumes say of
//! their Cinder volumes, which Services keep their floating IPs).

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, Service};
use kube::api::{Api, ListParams};

use super::apply::ObjectRef;
use super::cleanup::{KEEP_FLOATING_IP, KeptService, WorkloadRead};
use super::driver::{Capi, name_of, namespace_of};
use super::{kinds, secret_data};
use crate::domain::spec::Cluster;

/// How long reading the workload cluster may take (it may be half torn down already).
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Cinder CSI's driver name in a PersistentVolume's `spec.csi.driver`.
const CINDER_CSI_DRIVER: &str = "cinder.csi.openstack.org";

/// OCCM's Service annotation naming the load balancer the Service uses (OCCM writes it; a
/// tenant sets it to attach the Service to a load balancer of theirs).
const LOAD_BALANCER_ID: &str = "loadbalancer.openstack.org/load-balancer-id";

impl Capi {
    /// A client of the workload cluster, with the admin kubeconfig CAPI keeps in
    /// `<cluster>-kubeconfig`; `Err(why)` when there is none yet or it cannot be used.
    pub(super) async fn workload_client(&self, c: &Cluster) -> Result<kube::Client, String> {
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        let v = self
            .mgmt
            .get_value(&ObjectRef::new(
                kinds::SECRET,
                &ns,
                &format!("{name}-kubeconfig"),
            ))
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no kubeconfig Secret yet".to_string())?;
        let text =
            secret_data(&v, "value").ok_or_else(|| "the kubeconfig Secret is empty".to_string())?;
        kubeconfig_client(&text).await
    }

    /// What a delete needs of the workload cluster, read before its machines go: the
    /// PersistentVolumes' Cinder volumes by reclaim policy and the Services that keep their
    /// floating IPs; `Err(why)` when it cannot be read.
    pub(super) async fn read_workload(&self, c: &Cluster) -> Result<WorkloadRead, String> {
        let client = self.workload_client(c).await?;
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let services: Api<Service> = Api::all(client);
        let lp = ListParams::default();
        let (pvs, services) = tokio::time::timeout(WORKLOAD_TIMEOUT, async {
            tokio::join!(pvs.list(&lp), services.list(&lp))
        })
        .await
        .map_err(|_| "the workload cluster did not answer in time".to_string())?;
        let pvs = pvs.map_err(|e| format!("listing PersistentVolumes: {e}"))?;
        let services = services.map_err(|e| format!("listing Services: {e}"))?;
        Ok(WorkloadRead {
            retained: cinder_volumes(&pvs.items, "Retain"),
            deletable: cinder_volumes(&pvs.items, "Delete"),
            keep_floating_ips: keeping_floating_ips(&services.items),
            unreadable: None,
        })
    }
}

/// A client of the workload cluster of kubeconfig `text` (its current context), as the driver
/// reads workload clusters: its `proxy-url` honoured (a private cluster's, through
/// `magnum-capi api-proxy`; docs/private-clusters.md), every call bounded.
pub async fn kubeconfig_client(text: &str) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::from_yaml(text).map_err(|e| e.to_string())?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    cfg.connect_timeout = Some(WORKLOAD_TIMEOUT);
    cfg.read_timeout = Some(WORKLOAD_TIMEOUT);
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

/// The Cinder volume ids of the PersistentVolumes whose reclaim policy is `policy` (Cinder
/// CSI's `volumeHandle`, or the in-tree `cinder.volumeID`).
pub fn cinder_volumes(pvs: &[PersistentVolume], policy: &str) -> Vec<String> {
    pvs.iter()
        .filter_map(|pv| pv.spec.as_ref())
        .filter(|s| s.persistent_volume_reclaim_policy.as_deref() == Some(policy))
        .filter_map(|s| {
            s.csi
                .as_ref()
                .filter(|csi| csi.driver == CINDER_CSI_DRIVER)
                .map(|csi| csi.volume_handle.clone())
                .or_else(|| s.cinder.as_ref().map(|c| c.volume_id.clone()))
        })
        .collect()
}

/// The Services whose floating IP OCCM must not release (`keep-floatingip: "true"`, the one
/// value OCCM reads as true), with what tells their floating IP.
pub fn keeping_floating_ips(services: &[Service]) -> Vec<KeptService> {
    services
        .iter()
        .filter(|s| {
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(KEEP_FLOATING_IP))
                .is_some_and(|v| v == "true")
        })
        .map(|s| KeptService {
            namespace: s.metadata.namespace.clone().unwrap_or_default(),
            name: s.metadata.name.clone().unwrap_or_default(),
            load_balancer_id: s
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LOAD_BALANCER_ID))
                .cloned(),
            addresses: s
                .status
                .as_ref()
                .and_then(|st| st.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|i| i.ip.clone())
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(policy: &str, spec: serde_json::Value) -> PersistentVolume {
        let mut spec = spec;
        spec["persistentVolumeReclaimPolicy"] = serde_json::json!(policy);
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv"}, "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn persistent_volumes_give_their_cinder_volumes_by_reclaim_policy() {
        let csi =
            |h: &str| serde_json::json!({"csi": {"driver": CINDER_CSI_DRIVER, "volumeHandle": h}});
        let pvs = [
            pv("Retain", csi("v-retain")),
            pv("Delete", csi("v-delete")),
            pv(
                "Retain",
                serde_json::json!({"cinder": {"volumeID": "v-intree"}}),
            ),
            pv(
                "Retain",
                serde_json::json!({"csi": {"driver": "nfs.csi.k8s.io", "volumeHandle": "share"}}),
            ),
            pv(
                "Delete",
                serde_json::json!({"csi": {"driver": "nfs.csi.k8s.io", "volumeHandle": "nfs"}}),
            ),
            pv("Recycle", csi("v-recycle")),
        ];
        assert_eq!(cinder_volumes(&pvs, "Retain"), ["v-retain", "v-intree"]);
        assert_eq!(cinder_volumes(&pvs, "Delete"), ["v-delete"]);
    }

    #[test]
    fn services_keep_their_floating_ip_only_with_keep_floatingip_true() {
        let svc = |name: &str, keep: Option<&str>| -> Service {
            let mut annotations = serde_json::json!({LOAD_BALANCER_ID: format!("lb-{name}")});
            if let Some(k) = keep {
                annotations[KEEP_FLOATING_IP] = serde_json::json!(k);
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
                "spec": {"type": "LoadBalancer"},
                "status": {"loadBalancer": {"ingress": [{"ip": "172.24.4.9"}]}},
            }))
            .unwrap()
        };
        let services = [
            svc("kept", Some("true")),
            svc("released", Some("false")),
            svc("unsure", Some("yes")),
            svc("plain", None),
        ];
        assert_eq!(
            keeping_floating_ips(&services),
            [KeptService {
                namespace: "shop".into(),
                name: "kept".into(),
                load_balancer_id: Some("lb-kept".into()),
                addresses: vec!["172.24.4.9".into()],
            }]
        );
    }
}
