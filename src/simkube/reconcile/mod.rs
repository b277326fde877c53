//! What each simulated CAPI/CAPO controller does with one object in one step: the reconcile
//! context (`Ctx`), the dispatch by kind (`reconcile`) and the condition helpers several
//! controllers share. One submodule per controller: `cluster` (finalizer, adoption, endpoint,
//! aggregate status, cascading delete), `infra_cluster` (OpenStackCluster: network, load
//! balancer, floating IP or an injected failure), `control_plane` and `machine_deployment`
//! (machines, scaling, rolling replacement, status; what they share is in `machines`),
//! `machine` (Machine/OpenStackMachine provisioning or an injected `InstanceCreateFailed`, then
//! kubeadm init/join against the modelled PKI in `kubeadm`), `health_check` (status only) and
//! `addons` (CAAPH: HelmChartProxy → HelmReleaseProxies, or an injected install failure).

mod addons;
mod cluster;
mod control_plane;
mod ctx;
mod health_check;
mod infra_cluster;
mod kubeadm;
mod machine;
mod machine_deployment;
mod machines;

use super::objects::*;
use super::store::{ObjectKey, StoreError};
use addons::helm_chart_proxy;
use cluster::cluster;
use control_plane::control_plane;
pub(crate) use ctx::Ctx;
use health_check::health_check;
use infra_cluster::infra_cluster;
use machine::machine;
use machine_deployment::machine_deployment;

/// Reconciles one object (absent objects and kinds without a controller are no-ops).
pub(crate) fn reconcile(cx: &Ctx<'_>, key: &ObjectKey) -> Result<(), StoreError> {
    let Some(kind) = Kind::of(&key.resource) else {
        return Ok(());
    };
    let Some(obj) = cx.store.get(&key.resource, &key.namespace, &key.name) else {
        return Ok(());
    };
    match kind {
        Kind::Cluster => cluster(cx, obj),
        Kind::InfraCluster => infra_cluster(cx, &obj),
        Kind::ControlPlane => control_plane(cx, &obj),
        Kind::MachineDeployment => machine_deployment(cx, &obj),
        Kind::Machine => machine(cx, &obj),
        Kind::MachineHealthCheck => health_check(cx, &obj),
        Kind::HelmChartProxy => helm_chart_proxy(cx, &obj),
        _ => Ok(()),
    }
}
