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
mod health_check;
mod infra_cluster;
mod kubeadm;
mod machine;
mod machine_deployment;
mod machines;

use std::sync::Arc;

use serde_json::Value;

use super::controllers::Simulator;
use super::objects::*;
use super::store::{ObjectKey, Store, StoreError, Target};
use addons::helm_chart_proxy;
use cluster::cluster;
use control_plane::control_plane;
use health_check::health_check;
use infra_cluster::infra_cluster;
use machine::machine;
use machine_deployment::machine_deployment;

/// What a reconcile needs: the store, the failure markers of this step, the simulator's
/// index and address pools.
pub(crate) struct Ctx<'a> {
    pub sim: &'a Simulator,
    pub store: &'a Store,
    pub markers: &'a [String],
}

impl Ctx<'_> {
    fn fails(&self, text: &str) -> bool {
        self.markers
            .iter()
            .any(|m| !m.is_empty() && text.contains(m.as_str()))
    }

    fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.store.get(&kind.resource(), ns, name)
    }

    fn set_status(&self, kind: Kind, obj: &Value, status: Value) -> Result<Arc<Value>, StoreError> {
        self.store.update(
            &kind.resource(),
            namespace(obj),
            name(obj),
            Target::Status,
            move |o| {
                if let Some(m) = o.as_object_mut() {
                    m.insert("status".into(), status);
                }
            },
        )
    }

    fn edit(
        &self,
        kind: Kind,
        obj: &Value,
        f: impl FnOnce(&mut Value),
    ) -> Result<Arc<Value>, StoreError> {
        self.store
            .update(&kind.resource(), namespace(obj), name(obj), Target::Main, f)
    }

    fn delete(&self, key: &ObjectKey) -> Result<(), StoreError> {
        match self.store.delete(&key.resource, &key.namespace, &key.name) {
            Ok(_) | Err(StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

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

/// The `* Type: message` lines of the conditions among `conds` that are not True, as an
/// aggregate condition's message lists them.
fn failed_condition_message(conds: &[&Cond]) -> String {
    conds
        .iter()
        .filter(|c| c.status != CondStatus::True)
        .map(|c| {
            if c.message.is_empty() {
                format!("* {}: {}", c.kind, c.reason)
            } else {
                format!("* {}: {}", c.kind, c.message.replace('\n', "\n  "))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The message of a Machine's condition `kind` when its reason is one of `reasons`.
fn failure_message(m: &Value, kind: &str, reasons: &[&str]) -> Option<String> {
    let c = condition(m, kind)?;
    if !reasons.contains(&c.get("reason")?.as_str()?) {
        return None;
    }
    c.get("message")?.as_str().map(str::to_string)
}
