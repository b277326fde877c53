//! The MachineHealthCheck controller: status only (targets and healthy counts; no remediation).

use std::sync::Arc;

use serde_json::{Value, json};

use super::ctx::Ctx;
use crate::simkube::objects::*;
use crate::simkube::store::{StoreError, now_rfc3339};

pub(super) fn health_check(cx: &Ctx<'_>, mhc: &Value) -> Result<(), StoreError> {
    if is_deleting(mhc) {
        return Ok(());
    }
    let ns = namespace(mhc);
    let Some(cluster_name) = str_at(mhc, &["spec", "clusterName"]) else {
        return Ok(());
    };
    let wanted = string_map(at(mhc, &["spec", "selector", "matchLabels"]));
    let mut targets: Vec<Arc<Value>> = cx
        .sim
        .cluster_parts(ns, cluster_name, None)
        .into_iter()
        .filter(|k| Kind::Machine.is(&k.resource))
        .filter_map(|k| cx.store.get(&k.resource, &k.namespace, &k.name))
        .filter(|m| !is_deleting(m))
        .filter(|m| wanted.iter().all(|(k, v)| label(m, k) == v.as_str()))
        .collect();
    targets.sort_by(|a, b| name(a).cmp(name(b)));
    let healthy = targets
        .iter()
        .filter(|m| condition_true(m, "Ready"))
        .count();
    let observed = generation(mhc);
    let status = json!({
        "observedGeneration": observed,
        "expectedMachines": targets.len(),
        "currentHealthy": healthy,
        "remediationsAllowed": healthy,
        "targets": targets.iter().map(|m| name(m)).collect::<Vec<_>>(),
        "conditions": conditions_v1beta2(mhc.get("status"), &[
            Cond::new("RemediationAllowed", CondStatus::True, "RemediationAllowed", ""),
            Cond::new("Paused", CondStatus::False, "NotPaused", ""),
        ], observed, &now_rfc3339()),
    });
    cx.set_status(Kind::MachineHealthCheck, mhc, status)?;
    Ok(())
}
