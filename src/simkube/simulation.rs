//! What the simulated controllers (`reconcile`) and the workload endpoints (`endpoint`) ask of
//! the simulator that runs them: its store, its index of cluster parts, the address pools, the
//! workload clusters and the machines' PKI. `controllers::Simulator` provides it; neither side
//! imports the simulator itself.

use std::sync::Arc;

use serde_json::Value;

use super::pki::{Bootstrap, Installed};
use super::store::{ObjectKey, Store};
use super::workload::Workloads;

/// The simulator as its controllers and endpoints see it.
pub(crate) trait Simulation: Send + Sync {
    /// The management cluster's store.
    fn store(&self) -> &Arc<Store>;
    /// The objects that make up CAPI cluster `cluster` (and, with `uuid`, Magnum's cluster).
    fn cluster_parts(&self, ns: &str, cluster: &str, uuid: Option<&str>) -> Vec<ObjectKey>;
    /// Reconcile `key` again at the next step.
    fn mark(&self, key: ObjectKey);
    fn next_floating_ip(&self) -> String;
    fn next_node_address(&self, ns: &str, cluster: &str) -> String;
    /// The PKI of the cluster's control-plane machines (`ready_only`: those kubeadm finished).
    fn control_plane_pki(
        &self,
        ns: &str,
        cluster: &str,
        ready_only: bool,
    ) -> Vec<(String, Installed)>;
    /// The machine's bootstrap data, captured by `capture` the first time.
    fn bootstrap(&self, machine: &ObjectKey, capture: &dyn Fn() -> Bootstrap) -> Bootstrap;
    fn set_bootstrap(&self, machine: &ObjectKey, bootstrap: Bootstrap);
    fn set_installed(&self, machine: &ObjectKey, installed: Installed);
    fn workloads(&self) -> &Workloads;
    fn workloads_arc(&self) -> Arc<Workloads>;
    /// The port of the cluster's API endpoint, opened unless it is open.
    fn open_endpoint(&self, namespace: &str, cluster: &str) -> std::io::Result<u16>;
    fn workload_url(&self, namespace: &str, cluster: &str) -> String;
    fn remove_workload(&self, namespace: &str, cluster: &str);
    fn remove_node(&self, machine: &Value);
    /// Whether the cluster's CAs are modelled (else client certificates are not checked).
    fn workload_pki_modelled(&self, namespace: &str, cluster: &str) -> bool;
    fn workload_accepts_der(&self, namespace: &str, cluster: &str, der: &[u8]) -> bool;
}
