//! The MachineDeployment controller: scales its Machines, rolls them (maxSurge 1,
//! maxUnavailable 0) on version, template or `rollout.after` changes, and reports its status.

use serde_json::{Value, json};

use super::ctx::Ctx;
use super::machines::{
    MachineView, NewMachine, create_machine, failures, machines_of, rolled_out, rollout_after,
    rollout_conditions, victims,
};
use crate::simkube::objects::*;
use crate::simkube::store::{StoreError, now_rfc3339};

pub(super) fn machine_deployment(cx: &Ctx<'_>, md: &Value) -> Result<(), StoreError> {
    if is_deleting(md) {
        return Ok(());
    }
    let ns = namespace(md);
    let Some(cluster_name) = str_at(md, &["spec", "clusterName"]) else {
        return Ok(());
    };
    let Some(cluster) = cx.get(Kind::Cluster, ns, cluster_name) else {
        return Ok(());
    };
    let Some(replicas) = i64_at(md, &["spec", "replicas"]) else {
        // CAPI's defaulting: an autoscaled MachineDeployment starts at its minimum size (the
        // autoscaler then owns `spec.replicas`), any other at 1.
        let min = annotation(md, ANNOTATION_AUTOSCALER_MIN)
            .and_then(|m| m.parse::<i64>().ok())
            .unwrap_or(1);
        cx.edit(Kind::MachineDeployment, md, |o| {
            set_at(o, &["spec"], "replicas", json!(min));
        })?;
        return Ok(());
    };
    let desired = replicas.max(0) as usize;
    let version = str_at(md, &["spec", "template", "spec", "version"]);
    let infra_template = str_at(
        md,
        &["spec", "template", "spec", "infrastructureRef", "name"],
    );
    let bootstrap_template = str_at(
        md,
        &["spec", "template", "spec", "bootstrap", "configRef", "name"],
    );
    let after = rollout_after(cx, Kind::MachineDeployment, md);
    let machines = machines_of(cx, md, |m| {
        str_at(m, &["spec", "version"]) == version
            && annotation(m, ANNOTATION_INFRA_TEMPLATE) == infra_template
            && annotation(m, ANNOTATION_BOOTSTRAP_TEMPLATE) == bootstrap_template
            && rolled_out(m, after)
    });
    let live: Vec<&MachineView> = machines.iter().filter(|m| !m.deleting).collect();
    let outdated: Vec<&MachineView> = live.iter().copied().filter(|m| !m.up_to_date).collect();
    let fresh: Vec<&MachineView> = live.iter().copied().filter(|m| m.up_to_date).collect();

    let mut waiting: Option<String> = None;
    let mut create = 0usize;
    let mut remove: Vec<&MachineView> = Vec::new();
    if !bool_at(
        &cluster,
        &["status", "initialization", "controlPlaneInitialized"],
    ) {
        waiting = Some("Waiting for the control plane to be initialized".into());
    } else if bool_at(md, &["spec", "paused"]) {
        waiting = Some("MachineDeployment is paused".into());
    } else if !outdated.is_empty() {
        // RollingUpdate with maxSurge 1, maxUnavailable 0: one machine at a time.
        if live.len() < desired + 1 && fresh.len() < desired {
            create = 1;
        } else if fresh.iter().all(|m| m.ready) {
            remove = victims(outdated.clone(), true)
                .into_iter()
                .take(1)
                .collect();
        } else {
            waiting = Some("Waiting for new machines to become ready".into());
        }
    } else if live.len() < desired {
        create = desired - live.len();
    } else if live.len() > desired {
        remove = victims(live.clone(), false)
            .into_iter()
            .take(live.len() - desired)
            .collect();
    }
    for victim in &remove {
        cx.delete(&victim.key)?;
    }
    if create > 0 {
        match infra_template {
            None => waiting = Some("spec.template.spec.infrastructureRef is not set".into()),
            Some(t) => {
                let mut labels = string_map(at(md, &["spec", "template", "metadata", "labels"]));
                labels.insert(LABEL_DEPLOYMENT_NAME.into(), json!(name(md)));
                let annotations =
                    string_map(at(md, &["spec", "template", "metadata", "annotations"]));
                for _ in 0..create {
                    let created = create_machine(
                        cx,
                        NewMachine {
                            ns,
                            cluster: cluster_name,
                            prefix: name(md),
                            labels: labels.clone(),
                            annotations: annotations.clone(),
                            owner: owner_ref(CAPI_VERSION, "MachineDeployment", md, true),
                            version,
                            infra_template: t,
                            bootstrap_template,
                            failure_domain: str_at(
                                md,
                                &["spec", "template", "spec", "failureDomain"],
                            ),
                        },
                    )?;
                    if !created {
                        waiting = Some(format!("OpenStackMachineTemplate {t} does not exist"));
                        break;
                    }
                }
            }
        }
    }

    let observed = generation(md);
    let ready = live.iter().filter(|m| m.ready).count();
    let failed = failures(&live);
    let problems = if failed.is_empty() {
        waiting.clone().unwrap_or_default()
    } else {
        failed.join("\n")
    };
    let all_ready = ready == live.len();
    let phase = if ready < desired {
        "ScalingUp"
    } else if live.len() > desired {
        "ScalingDown"
    } else {
        "Running"
    };
    let with_problems = |base: String| {
        if problems.is_empty() {
            base
        } else {
            format!("{base}\n{problems}")
        }
    };
    let [machines_up_to_date, rolling_out, scaling_down, deleting] =
        rollout_conditions(outdated.len(), live.len(), desired);
    let conds = [
        Cond::check(
            "Available",
            ready >= desired,
            "Available",
            "NotAvailable",
            with_problems(format!(
                "{ready} available replicas, at least {desired} required"
            )),
        ),
        Cond::check(
            "MachinesReady",
            all_ready,
            "Ready",
            "NotReady",
            with_problems(format!(
                "{} of {} Machines are not ready",
                live.len() - ready,
                live.len()
            )),
        ),
        machines_up_to_date,
        rolling_out,
        if ready < desired && live.len() <= desired {
            Cond::new(
                "ScalingUp",
                CondStatus::True,
                "ScalingUp",
                with_problems(format!("Scaling up from {ready} to {desired} replicas")),
            )
        } else {
            Cond::new("ScalingUp", CondStatus::False, "NotScalingUp", "")
        },
        scaling_down,
        deleting,
    ];
    let status = json!({
        "observedGeneration": observed,
        "selector": format!("{LABEL_CLUSTER_NAME}={cluster_name},{LABEL_DEPLOYMENT_NAME}={}", name(md)),
        "phase": phase,
        "replicas": live.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "upToDateReplicas": fresh.len(),
        "conditions": conditions_v1beta2(md.get("status"), &conds, observed, &now_rfc3339()),
    });
    cx.set_status(Kind::MachineDeployment, md, status)?;
    Ok(())
}
