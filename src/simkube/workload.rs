//! Simulated workload clusters: one in-memory `Store` per CAPI cluster whose control plane has
//! initialized (`kubeadm init`), served with the management API's handlers at the cluster's TLS
//! endpoint (`endpoint`) and, unauthenticated, by the management API server under
//! `/workload/{namespace}/{cluster}`, and removed with the Cluster. A
//! workload store starts with the `default`, `kube-system` and `kube-public` Namespaces and the
//! `kube-public/cluster-info` ConfigMap kubeadm publishes for join discovery; each Running
//! Machine registers its Node there (`put_node`) and takes it along when deleted.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use super::kubeconfig;
use super::store::{Resource, Store, StoreError, StoreOptions};

/// Path prefix of the workload APIs on the management server.
const PATH_PREFIX: &str = "/workload";
const CLUSTER_INFO: &str = "cluster-info";
const KUBE_PUBLIC: &str = "kube-public";

/// `{base_url}/workload/{namespace}/{cluster}`: a workload API, as its kubeconfig names it.
pub fn url(base_url: &str, namespace: &str, cluster: &str) -> String {
    format!("{base_url}{PATH_PREFIX}/{namespace}/{cluster}")
}

/// `/workload/{ns}/{cluster}/rest…` → (ns, cluster, `/rest…`).
pub fn split_path(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix(PATH_PREFIX)?.strip_prefix('/')?;
    let (ns, rest) = rest.split_once('/')?;
    let (cluster, rest) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    (!ns.is_empty() && !cluster.is_empty()).then_some((ns, cluster, rest))
}

/// The workload clusters that exist, by (namespace, CAPI cluster name).
#[derive(Default)]
pub struct Workloads {
    stores: RwLock<HashMap<(String, String), Arc<Store>>>,
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.stores.read().map(|s| s.len()).unwrap_or_default();
        f.debug_struct("Workloads").field("clusters", &n).finish()
    }
}

impl Workloads {
    pub fn get(&self, namespace: &str, cluster: &str) -> Option<Arc<Store>> {
        self.stores
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), cluster.to_string()))
            .cloned()
    }

    /// `kubeadm init`: the workload store of a cluster (created unless it exists) with
    /// `kube-public/cluster-info` pointing at `server` with `ca_pem` as its CA data.
    pub fn init(
        &self,
        namespace: &str,
        cluster: &str,
        server: &str,
        ca_pem: Option<&str>,
    ) -> Result<Arc<Store>, StoreError> {
        let mut stores = self.stores.write().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_string(), cluster.to_string());
        if let Some(s) = stores.get(&key) {
            return Ok(s.clone());
        }
        let store = Arc::new(Store::new(StoreOptions {
            validator: None,
            history: 1_000,
            // Thousands of simulated clusters: keep each broadcast ring small.
            channel_capacity: 64,
            require_namespaces: true,
        }));
        store.create(&configmaps(), KUBE_PUBLIC, cluster_info(server, ca_pem)?)?;
        stores.insert(key, store.clone());
        Ok(store)
    }

    pub fn remove(&self, namespace: &str, cluster: &str) {
        self.stores
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(namespace.to_string(), cluster.to_string()));
    }
}

fn configmaps() -> Resource {
    Resource::core("configmaps")
}

fn nodes() -> Resource {
    Resource::core("nodes")
}

/// The Node the kubelet of a Running Machine registers (named as the Machine's `nodeRef`), with
/// kubeadm's role label and taint on control-plane machines; replaced if it exists.
pub fn put_node(store: &Store, machine: &Value, control_plane: bool) -> Result<(), StoreError> {
    let name = super::objects::name(machine);
    let status = machine.get("status").cloned().unwrap_or_default();
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    });
    let mut taints = json!([]);
    if control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
        labels["node.kubernetes.io/exclude-from-external-load-balancers"] = json!("");
        taints = json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
    }
    let mut addresses = status.get("addresses").cloned().unwrap_or(json!([]));
    if let Some(a) = addresses.as_array_mut() {
        a.push(json!({"type": "Hostname", "address": name}));
    }
    let now = super::store::now_rfc3339();
    let resources =
        json!({"cpu": "2", "ephemeral-storage": "20Gi", "memory": "4Gi", "pods": "110"});
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "providerID": machine.get("spec").and_then(|s| s.get("providerID")),
            "taints": taints,
        },
        "status": {
            "addresses": addresses,
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": status.get("nodeInfo"),
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
        },
    });
    remove_node(store, name);
    store.create(&nodes(), "", node)?;
    Ok(())
}

const KUBEADM_CONFIG: &str = "kubeadm-config";
const KUBE_SYSTEM: &str = "kube-system";

/// `kubeadm init` / `upgrade apply` on a control-plane machine: records the cluster's Kubernetes
/// version in `kube-system/kubeadm-config` (what `/version` reports) unless it is recorded.
pub fn record_kubernetes_version(store: &Store, version: &str) -> Result<(), StoreError> {
    if kubernetes_version(store).as_deref() == Some(version) {
        return Ok(());
    }
    let config = format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: {version}\n"
    );
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": KUBEADM_CONFIG, "namespace": KUBE_SYSTEM},
        "data": {"ClusterConfiguration": config},
    });
    let _ = store.delete(&configmaps(), KUBE_SYSTEM, KUBEADM_CONFIG);
    store.create(&configmaps(), KUBE_SYSTEM, cm)?;
    Ok(())
}

/// The `kubernetesVersion` of `kube-system/kubeadm-config`, if recorded.
pub fn kubernetes_version(store: &Store) -> Option<String> {
    let cm = store.get(&configmaps(), KUBE_SYSTEM, KUBEADM_CONFIG)?;
    let yaml = cm.get("data")?.get("ClusterConfiguration")?.as_str()?;
    let doc: Value = yaml_serde::from_str(yaml).ok()?;
    doc.get("kubernetesVersion")?.as_str().map(str::to_string)
}

/// Removes a Node (as CAPI does when it deletes the Machine); absent is fine.
pub fn remove_node(store: &Store, name: &str) {
    let _ = store.delete(&nodes(), "", name);
}

/// The `cluster-info` ConfigMap kubeadm init writes: a kubeconfig with one unnamed cluster.
fn cluster_info(server: &str, ca_pem: Option<&str>) -> Result<Value, StoreError> {
    let mut doc = kubeconfig::render("", server, ca_pem, None);
    doc.contexts.clear();
    doc.auth_infos.clear();
    doc.current_context = None;
    if let Some(c) = doc.clusters.first_mut().and_then(|c| c.cluster.as_mut()) {
        c.insecure_skip_tls_verify = None;
    }
    let yaml = yaml_serde::to_string(&doc)
        .map_err(|e| StoreError::Invalid(format!("cluster-info rendering failed: {e}")))?;
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CLUSTER_INFO, "namespace": KUBE_PUBLIC},
        "data": {"kubeconfig": yaml},
    }))
}

/// The CA bundle (PEM) of a workload cluster's `cluster-info`: `Err` when the ConfigMap or its
/// kubeconfig is missing or unreadable, `Ok(None)` when it carries no CA data.
pub fn cluster_info_ca(store: &Store) -> Result<Option<String>, String> {
    let cm = store
        .get(&configmaps(), KUBE_PUBLIC, CLUSTER_INFO)
        .ok_or_else(|| format!("configmaps \"{CLUSTER_INFO}\" not found in {KUBE_PUBLIC}"))?;
    let yaml = cm
        .get("data")
        .and_then(|d| d.get("kubeconfig"))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("there is no kubeconfig key in the {CLUSTER_INFO} ConfigMap"))?;
    super::pki::kubeconfig_ca(yaml)
        .map_err(|e| format!("couldn't parse the kubeconfig of the {CLUSTER_INFO} ConfigMap: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_paths_split_into_cluster_and_rest() {
        assert_eq!(
            split_path("/workload/ns1/c1/api/v1/namespaces/kube-public/configmaps"),
            Some(("ns1", "c1", "/api/v1/namespaces/kube-public/configmaps"))
        );
        assert_eq!(split_path("/workload/ns1/c1"), Some(("ns1", "c1", "")));
        assert_eq!(split_path("/workload/ns1"), None);
        assert_eq!(split_path("/workloads/ns1/c1/api"), None);
        assert_eq!(split_path("/api/v1"), None);
    }

    #[test]
    fn init_seeds_cluster_info_once() {
        let w = Workloads::default();
        let s = w
            .init("ns", "c", "https://127.0.0.1:6443", Some("PEM"))
            .unwrap();
        assert_eq!(cluster_info_ca(&s).unwrap().as_deref(), Some("PEM"));
        let cm = s.get(&configmaps(), KUBE_PUBLIC, CLUSTER_INFO).unwrap();
        let doc: Value = yaml_serde::from_str(cm["data"]["kubeconfig"].as_str().unwrap()).unwrap();
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:6443"
        );
        assert_eq!(kubernetes_version(&s), None);
        record_kubernetes_version(&s, "v1.33.5").unwrap();
        record_kubernetes_version(&s, "v1.33.5").unwrap();
        assert_eq!(kubernetes_version(&s).as_deref(), Some("v1.33.5"));
        let again = w.init("ns", "c", "https://other:1", None).unwrap();
        assert!(Arc::ptr_eq(&s, &again));
        w.remove("ns", "c");
        assert!(w.get("ns", "c").is_none());
    }
}
