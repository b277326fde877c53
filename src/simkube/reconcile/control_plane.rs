//! The KubeadmControlPlane controller: creates, replaces (version, template, `rollout.after`)
//! and removes control-plane Machines one at a time, reports its status and writes the
//! kubeconfig once initialized.

use serde_json::{Value, json};

use super::ctx::Ctx;
use super::machines::{
    MachineView, NewMachine, create_machine, failures, machines_of, rolled_out, rollout_after,
    rollout_conditions, version_key, victims,
};
use crate::simkube::kubeconfig;
use crate::simkube::objects::*;
use crate::simkube::store::{StoreError, now_rfc3339};

pub(super) fn control_plane(cx: &Ctx<'_>, kcp: &Value) -> Result<(), StoreError> {
    if is_deleting(kcp) {
        return Ok(());
    }
    let ns = namespace(kcp);
    let Some(cluster_name) = label(kcp, LABEL_CLUSTER_NAME)
        .map(str::to_string)
        .or_else(|| owners(kcp, "Cluster").into_iter().next().map(|(n, _)| n))
    else {
        return Ok(());
    };
    let Some(cluster) = cx.get(Kind::Cluster, ns, &cluster_name) else {
        return Ok(());
    };
    let desired = i64_at(kcp, &["spec", "replicas"]).unwrap_or(1).max(0) as usize;
    let version = str_at(kcp, &["spec", "version"]);
    let template = str_at(
        kcp,
        &[
            "spec",
            "machineTemplate",
            "spec",
            "infrastructureRef",
            "name",
        ],
    )
    .or_else(|| {
        str_at(
            kcp,
            &["spec", "machineTemplate", "infrastructureRef", "name"],
        )
    });
    let after = rollout_after(cx, Kind::ControlPlane, kcp);
    let machines = machines_of(cx, kcp, |m| {
        str_at(m, &["spec", "version"]) == version
            && annotation(m, ANNOTATION_INFRA_TEMPLATE) == template
            && rolled_out(m, after)
    });
    let live: Vec<&MachineView> = machines.iter().filter(|m| !m.deleting).collect();
    let outdated: Vec<&MachineView> = live.iter().copied().filter(|m| !m.up_to_date).collect();
    let infra_ok = bool_at(
        &cluster,
        &["status", "initialization", "infrastructureProvisioned"],
    ) && str_at(&cluster, &["spec", "controlPlaneEndpoint", "host"]).is_some();

    let mut waiting: Option<String> = None;
    if !infra_ok {
        waiting = Some("Waiting for the cluster infrastructure to be ready".into());
    } else if machines.iter().any(|m| m.deleting) {
        waiting = Some("Waiting for machines being deleted".into());
    } else if let Some(m) = live.iter().find(|m| !m.ready) {
        waiting = Some(match &m.failure {
            Some(f) => format!("* Machine {}: {f}", m.name),
            None => format!("Waiting for Machine {} to become ready", m.name),
        });
    } else if (!outdated.is_empty() && live.len() <= desired)
        || (outdated.is_empty() && live.len() < desired)
    {
        match template {
            None => waiting = Some("spec.machineTemplate.spec.infrastructureRef is not set".into()),
            Some(t) => {
                let mut labels =
                    string_map(at(kcp, &["spec", "machineTemplate", "metadata", "labels"]));
                labels.insert(LABEL_CONTROL_PLANE.into(), json!(""));
                labels.insert(LABEL_CONTROL_PLANE_NAME.into(), json!(name(kcp)));
                let created = create_machine(
                    cx,
                    NewMachine {
                        ns,
                        cluster: &cluster_name,
                        prefix: name(kcp),
                        labels,
                        annotations: string_map(at(
                            kcp,
                            &["spec", "machineTemplate", "metadata", "annotations"],
                        )),
                        owner: owner_ref(CONTROL_PLANE_VERSION, "KubeadmControlPlane", kcp, true),
                        version,
                        infra_template: t,
                        bootstrap_template: None,
                        failure_domain: None,
                    },
                )?;
                if !created {
                    waiting = Some(format!("OpenStackMachineTemplate {t} does not exist"));
                }
            }
        }
    } else if let Some(victim) = victims(
        if outdated.is_empty() {
            live.clone()
        } else {
            outdated.clone()
        },
        true,
    )
    .first()
    .filter(|_| live.len() > desired)
    {
        cx.delete(&victim.key)?;
    }

    let observed = generation(kcp);
    let ready = live.iter().filter(|m| m.ready).count();
    let up_to_date = live.len() - outdated.len();
    let initialized = ready > 0
        || bool_at(
            kcp,
            &["status", "initialization", "controlPlaneInitialized"],
        );
    let all_ready = !live.is_empty() && ready == live.len();
    let failed = failures(&live);
    let problems = if failed.is_empty() {
        waiting
            .clone()
            .unwrap_or_else(|| "Control plane machines are not ready yet".into())
    } else {
        failed.join("\n")
    };
    let quorum = ready * 2 > live.len();
    let scaling_up = live.len() < desired || (!failed.is_empty() && ready < desired);
    let [machines_up_to_date, rolling_out, scaling_down, deleting] =
        rollout_conditions(outdated.len(), live.len(), desired);
    let conds = [
        Cond::check(
            "Available",
            initialized && quorum,
            "Available",
            "NotAvailable",
            problems.clone(),
        ),
        Cond::new("CertificatesAvailable", CondStatus::True, "Available", ""),
        Cond::check(
            "Initialized",
            initialized,
            "Initialized",
            "NotInitialized",
            "Control plane not yet initialized",
        ),
        Cond::check(
            "EtcdClusterHealthy",
            all_ready,
            "Healthy",
            "NotHealthy",
            problems.clone(),
        ),
        Cond::check(
            "ControlPlaneComponentsHealthy",
            all_ready,
            "Healthy",
            "NotHealthy",
            problems.clone(),
        ),
        Cond::check(
            "MachinesReady",
            all_ready,
            "Ready",
            "NotReady",
            problems.clone(),
        ),
        machines_up_to_date,
        rolling_out,
        if scaling_up {
            let mut msg = format!("Scaling up from {} to {desired} replicas", ready);
            if let Some(w) = &waiting {
                msg.push_str(&format!(" is blocked because:\n{w}"));
            }
            Cond::new("ScalingUp", CondStatus::True, "ScalingUp", msg)
        } else {
            Cond::new("ScalingUp", CondStatus::False, "NotScalingUp", "")
        },
        scaling_down,
        deleting,
    ];
    let mut status = json!({
        "observedGeneration": observed,
        "selector": format!("{LABEL_CLUSTER_NAME}={cluster_name},{LABEL_CONTROL_PLANE}"),
        "replicas": machines.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "upToDateReplicas": up_to_date,
        "initialization": {"controlPlaneInitialized": initialized},
        "conditions": conditions_v1beta2(kcp.get("status"), &conds, observed, &now_rfc3339()),
    });
    if let Some(v) = live
        .iter()
        .filter_map(|m| m.version.as_deref())
        .min_by_key(|v| version_key(v))
    {
        status["version"] = json!(v);
    }
    cx.set_status(Kind::ControlPlane, kcp, status)?;
    if initialized {
        kubeconfig::ensure(cx.store, &cluster, &cx.sim.workload_url(ns, &cluster_name))?;
    }
    Ok(())
}
