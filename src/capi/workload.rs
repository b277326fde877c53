//! The workload cluster as the driver reaches it: a kube client from the admin kubeconfig CAPI
//! keeps in `<cluster>-kubeconfig` on the management cluster (through its `proxy-url`, if any), and what a delete reads there
//! before the machines go (which Cinder volumes the cluster's PersistentVolumes retain).

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, ListParams};

use super::apply::ObjectRef;
use super::driver::{Capi, name_of, namespace_of};
use super::{kinds, secret_data};
use crate::domain::spec::Cluster;

/// How long reading the workload cluster may take (it may be half torn down already).
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Cinder CSI's driver name in a PersistentVolume's `spec.csi.driver`.
const CINDER_CSI_DRIVER: &str = "cinder.csi.openstack.org";

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

    /// The Cinder volumes the workload's PersistentVolumes keep (`reclaimPolicy: Retain`), read
    /// from the workload cluster; `Err(why)` when it cannot be read.
    pub(super) async fn retained_volumes(&self, c: &Cluster) -> Result<Vec<String>, String> {
        let client = self.workload_client(c).await?;
        let api: Api<PersistentVolume> = Api::all(client);
        let list = tokio::time::timeout(WORKLOAD_TIMEOUT, api.list(&ListParams::default()))
            .await
            .map_err(|_| "the workload cluster did not answer in time".to_string())?
            .map_err(|e| format!("listing PersistentVolumes: {e}"))?;
        Ok(retained(&list.items))
    }
}

/// A client of the workload cluster of kubeconfig `text` (its current context), as the driver
/// reads workload clusters: its `proxy-url` honoured (a private cluster's, through
/// `magnum-capi api-proxy`; README "Private clusters"), every call bounded.
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

/// The Cinder volume ids of the PersistentVolumes whose reclaim policy is `Retain` (Cinder CSI's
/// `volumeHandle`, or the in-tree `cinder.volumeID`).
pub fn retained(pvs: &[PersistentVolume]) -> Vec<String> {
    pvs.iter()
        .filter_map(|pv| pv.spec.as_ref())
        .filter(|s| s.persistent_volume_reclaim_policy.as_deref() == Some("Retain"))
        .filter_map(|s| {
            s.csi
                .as_ref()
                .filter(|csi| csi.driver == CINDER_CSI_DRIVER)
                .map(|csi| csi.volume_handle.clone())
                .or_else(|| s.cinder.as_ref().map(|c| c.volume_id.clone()))
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
    fn only_retained_cinder_volumes_are_kept() {
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
        ];
        assert_eq!(retained(&pvs), ["v-retain", "v-intree"]);
    }
}
