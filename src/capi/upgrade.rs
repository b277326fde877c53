//! The upgrade operation of a cluster made here: the new template's machines first (the
//! control plane and the nodegroups roll, CAPI's `MachineDeployment`s after their control
//! plane), then, once the control plane runs the new version, the add-ons the new template
//! changes, stage after stage ([`addon_rollout`]), each waiting for its HelmReleaseProxies to
//! be Ready on the new version. One run does what can be done now and requeues while CAPI or
//! CAAPH work (no worker waits); where it is is the operation's step, so replays resume there.
//!
//! A machine that fails, an add-on this upgrade changed that fails, or the rollout outlasting
//! `[capi] update_timeout_mins` fails the upgrade (`UPDATE_FAILED`, the cluster back on the
//! template it left, retried or rolled back from there).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::addon_rollout::{self, Roll, STAGES, Stage};
use super::apply::ObjectRef;
use super::driver::{Capi, CapiError, name_of, namespace_of, upgraded};
use super::status::{control_plane_at, control_plane_progress};
use super::{LABEL_CLUSTER_UUID, kinds};
use crate::domain::spec::{ClusterSpec, Operation, Template};
use crate::driver::{Journal, Outcome, Report};

/// How often a rollout is looked at when no change of the cluster woke it sooner.
const POLL: Duration = Duration::from_secs(30);

/// Where an upgrade is between its runs.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct UpgradeStep {
    /// When the new template was applied (the rollout's deadline counts from then); `None`:
    /// not yet.
    #[serde(default)]
    applied_at: Option<DateTime<Utc>>,
    /// The last add-on stage released ([`Stage::rank`]; 0: none).
    #[serde(default)]
    released: u8,
    /// The HelmChartProxies this upgrade changed (their failure is its failure).
    #[serde(default)]
    rolled: Vec<String>,
}

impl UpgradeStep {
    fn requeue(&self, progress: String, facts: Vec<crate::driver::Fact>) -> Report {
        Report {
            outcome: Outcome::Requeue {
                after: POLL,
                progress: Some(progress),
                step: serde_json::to_value(self).ok(),
            },
            facts,
        }
    }
}

impl Capi {
    /// The cluster's objects of one kind as they are live (listed: the service account may
    /// list, not get, most kinds), typed.
    async fn live(&self, spec: &ClusterSpec, gvk: kinds::Gvk) -> Result<Vec<Value>, CapiError> {
        let c = &spec.cluster;
        let ns = namespace_of(&self.config, c);
        let sel = format!("{LABEL_CLUSTER_UUID}={}", c.uuid);
        let mut out = Vec::new();
        for o in self.mgmt.list(gvk, &ns, &sel).await? {
            let mut v = serde_json::to_value(&o).map_err(|e| CapiError::Invalid(e.to_string()))?;
            // A listed item carries no type (the list has it).
            v["apiVersion"] = gvk.0.into();
            v["kind"] = gvk.1.into();
            out.push(v);
        }
        Ok(out)
    }

    /// The cluster's HelmChartProxies and autoscaler Deployment as they are live.
    async fn live_addons(&self, spec: &ClusterSpec) -> Result<Vec<Value>, CapiError> {
        let autoscaler = format!("{}-autoscaler", name_of(&spec.cluster));
        let mut live = self.live(spec, kinds::HELM_CHART_PROXY).await?;
        live.extend(
            self.live(spec, kinds::DEPLOYMENT)
                .await?
                .into_iter()
                .filter(|d| {
                    d.pointer("/metadata/name").and_then(Value::as_str) == Some(&autoscaler)
                }),
        );
        Ok(live)
    }

    /// One run of the upgrade of `spec` to `to` (see the module).
    pub(super) async fn upgrade(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        op: &Operation,
        to: Option<&Template>,
    ) -> Result<Report, CapiError> {
        let c = &spec.cluster;
        let mut step: UpgradeStep = serde_json::from_value(op.step.clone()).unwrap_or_default();
        let (target, facts) = upgraded(spec, op, to);
        let cluster = name_of(c);
        let Some(applied_at) = step.applied_at else {
            let live = self.live_addons(spec).await?;
            // The machines now, every add-on as it is (their turn comes with the control plane).
            let released = step.released;
            let held = |objs| addon_rollout::hold(objs, &live, &cluster, released);
            self.apply_cluster_with(journal, &target, None, false, held)
                .await?;
            // A retry or rollback of a failed upgrade: the machines that failed (and made it
            // fail) are replaced by ones of the template now applied, as a MachineHealthCheck
            // would; their owners would otherwise wait on them.
            if op.payload.get("retry").and_then(Value::as_bool) == Some(true) {
                for (ns, name) in self.observer.observed(c.uuid).failed_machines() {
                    tracing::info!(machine = %name, "deleting a failed machine for the retried upgrade");
                    self.mgmt
                        .delete(&ObjectRef::new(kinds::MACHINE, &ns, &name))
                        .await?;
                }
            }
            step.applied_at = Some(Utc::now());
            // The facts once, with the apply: recorded again they would lose the template left.
            return Ok(step.requeue("Upgrading: the control plane rolls out".into(), facts));
        };
        let observed = self.observer.observed(c.uuid);
        if let Some(failure) = observed.machine_failure() {
            return Err(CapiError::Stuck(failure));
        }
        let timeout = self.config.update_timeout_mins.max(1);
        let deadline = applied_at + chrono::Duration::minutes(i64::try_from(timeout).unwrap_or(60));
        let overdue = |what: &str| {
            CapiError::Stuck(format!(
                "Timed out after {timeout} minutes waiting for the upgrade: {what}"
            ))
        };
        let objs = self.render_cluster(&target).await?;
        // The control plane as it is, on the machine template and version just rendered (a new
        // image or flavor of the same version rolls it too).
        let rendered_cp = objs
            .iter()
            .find(|o| o["kind"] == kinds::CONTROL_PLANE.1)
            .ok_or_else(|| CapiError::Invalid("the render has no control plane".into()))?;
        let template_of = |cp: &Value| {
            cp.pointer("/spec/machineTemplate/spec/infrastructureRef/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let version = rendered_cp
            .pointer("/spec/version")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // As the watchers have it (their index keeps its template, versions and replicas);
        // listed only before they have seen it. A stale copy only delays the next stage.
        let same =
            |cp: &Value| cp.pointer("/metadata/name") == rendered_cp.pointer("/metadata/name");
        let live_cp = match observed.control_plane.as_deref().filter(|cp| same(cp)) {
            Some(cp) => Some(cp.clone()),
            None => self
                .live(spec, kinds::CONTROL_PLANE)
                .await?
                .into_iter()
                .find(|cp| same(cp)),
        };
        let rolled_out = live_cp.as_ref().is_some_and(|cp| {
            template_of(cp) == template_of(rendered_cp) && control_plane_at(cp, version)
        });
        if !rolled_out {
            let what = format!(
                "the control plane rolls out to {version} ({})",
                live_cp
                    .as_ref()
                    .map_or_else(|| "not there".into(), control_plane_progress)
            );
            if Utc::now() >= deadline {
                return Err(overdue(&what));
            }
            return Ok(step.requeue(format!("Upgrading: {what}"), Vec::new()));
        }
        // The add-ons as they are, once their turn has come.
        let live = self.live_addons(spec).await?;
        for stage in STAGES {
            if stage.rank() <= step.released {
                continue;
            }
            // The stage before this one has rolled out, or there was none.
            if let Some(prev) = STAGES.iter().rev().find(|s| s.rank() == step.released) {
                let hrps = observed.addons.iter().map(|a| &**a);
                match addon_rollout::stage_state(*prev, &objs, &live, hrps, &cluster, &step.rolled)
                {
                    Roll::Done => {}
                    Roll::Failed(why) => {
                        return Err(CapiError::Stuck(format!(
                            "Upgrading {}: add-on {why}",
                            prev.describe()
                        )));
                    }
                    Roll::Rolling(what) => {
                        let what = format!("{} roll out: {}", prev.describe(), what.join("; "));
                        if Utc::now() >= deadline {
                            return Err(overdue(&what));
                        }
                        return Ok(step.requeue(format!("Upgrading: {what}"), Vec::new()));
                    }
                }
            }
            step.released = stage.rank();
            let changed = addon_rollout::changed(&objs, &live, &cluster, stage);
            if changed.is_empty() {
                continue;
            }
            // An add-on already failing before its roll (a chart repository it never reached)
            // is rolled all the same, but its failure stays its health's, not the upgrade's.
            let hrps = observed.addons.iter().map(|a| &**a);
            for o in &changed {
                if let Some(n) = o.pointer("/metadata/name").and_then(Value::as_str)
                    && !step.rolled.iter().any(|r| r == n)
                    && !addon_rollout::failing(n, hrps.clone())
                {
                    step.rolled.push(n.to_string());
                }
            }
            let owned: Vec<Value> = changed.into_iter().cloned().collect();
            tracing::info!(cluster = %c.uuid, stage = stage.describe(), add_ons = owned.len(), "upgrade: rolling add-ons");
            self.mgmt.apply_all(&owned).await?;
            return Ok(step.requeue(
                format!("Upgrading: {} roll out", stage.describe()),
                Vec::new(),
            ));
        }
        // The last stage released: done when it has rolled out.
        let hrps = observed.addons.iter().map(|a| &**a);
        match addon_rollout::stage_state(Stage::Rest, &objs, &live, hrps, &cluster, &step.rolled) {
            Roll::Done => Ok(Outcome::Done.into()),
            Roll::Failed(why) => Err(CapiError::Stuck(format!(
                "Upgrading {}: add-on {why}",
                Stage::Rest.describe()
            ))),
            Roll::Rolling(what) => {
                let what = format!("{} roll out: {}", Stage::Rest.describe(), what.join("; "));
                if Utc::now() >= deadline {
                    return Err(overdue(&what));
                }
                Ok(step.requeue(format!("Upgrading: {what}"), Vec::new()))
            }
        }
    }
}
