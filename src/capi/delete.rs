//! Deletes as steps: a cluster (its `Cluster`, then what its workload left in the tenant
//! project, then our own objects and its credential) and a nodegroup (its MachineDeployment,
//! then its templates and server group). Each run does what can be done now and requeues with
//! what is left; the worker parks it until the cluster's objects change.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use super::apply::ObjectRef;
use super::cleanup::{Remaining, Report, WorkloadRead};
use super::driver::{Capi, CapiError, name_of, namespace_of};
use super::status::Observed;
use super::{LABEL_CLUSTER_UUID, LABEL_NODEGROUP_UUID, LABEL_PROJECT_ID, kinds};
use crate::domain::spec::{Cluster, ClusterSpec, Nodegroup, Operation};
use crate::driver::{Journal, Outcome};

/// The kinds we create besides the watched ones; deleted by label once the cluster is gone.
const OWNED_KINDS: [kinds::Gvk; 11] = [
    kinds::OPENSTACK_MACHINE_TEMPLATE,
    kinds::KUBEADM_CONFIG_TEMPLATE,
    kinds::MACHINE_HEALTH_CHECK,
    kinds::HELM_CHART_PROXY,
    kinds::CLUSTER_RESOURCE_SET,
    kinds::DEPLOYMENT,
    kinds::ROLE_BINDING,
    kinds::ROLE,
    kinds::SERVICE_ACCOUNT,
    kinds::CONFIG_MAP,
    kinds::SECRET,
];

impl Capi {
    /// One step of a cluster delete: asks for the `Cluster`'s deletion (CAPI cascades), removes
    /// what the workload created in the tenant project once its machines are gone (`cleanup`),
    /// and when both are done our own objects, the credential and the rows. Until then it
    /// requeues with what is left as progress; the step wakes on every change of the cluster's
    /// objects, and polls only the cloud cleanup. Bounded by `delete_timeout_mins` from the
    /// operation's start (a retry or a restart keeps the deadline); past it the delete fails
    /// naming what is left.
    pub(super) async fn delete_cluster(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        op: &Operation,
    ) -> Result<Outcome, CapiError> {
        let c = &spec.cluster;
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        let mut step: DeleteStep = serde_json::from_value(op.step.clone()).unwrap_or_default();
        if !self.observer.synced() {
            return Ok(step.requeue(Duration::from_secs(1), None));
        }
        // Before the machines go, while the workload cluster answers: what its
        // PersistentVolumes say of their volumes and which Services keep their floating IPs.
        // Recorded (and the step requeued) before the deletion is asked for, so a crash or a
        // retry never reads a half torn-down cluster instead; a delete asked again after one
        // that failed keeps what that one read.
        if step.workload.is_none() && self.config.delete_cleanup && self.keystone.is_some() {
            let earlier = op.earlier_steps.iter().find_map(|s| {
                serde_json::from_value::<DeleteStep>(s.clone())
                    .ok()
                    .and_then(|s| s.workload)
            });
            step.workload = Some(match earlier {
                Some(read) => read,
                None => self.read_workload_or_why(c).await,
            });
            return Ok(step.requeue(Duration::from_millis(1), None));
        }
        let observed = self.observer.observed(c.uuid);
        // Asked once, and again only if the Cluster shows up without a deletion under way.
        let deleting = observed
            .cluster
            .as_ref()
            .is_some_and(|o| o.pointer("/metadata/deletionTimestamp").is_some());
        if !step.requested || (observed.cluster.is_some() && !deleting) {
            self.mgmt
                .delete(&ObjectRef::new(kinds::CLUSTER, &ns, &name))
                .await?;
            step.requested = true;
        }
        step.cleaned |= !self.config.delete_cleanup;
        let mut cloud_left: Option<String> = None;
        // Never before the machines are gone: a live cloud-controller-manager would recreate
        // what we delete.
        if !step.cleaned && observed.machines.is_empty() {
            let read = step.workload.clone().unwrap_or_default();
            let pass = match self.cleanup_session(spec).await {
                Ok(Some(s)) => self.cleanup_cloud(c, &s, &read, &mut step.report).await,
                Ok(None) => Ok(Remaining::default()),
                Err(e) => Err(e),
            };
            match pass {
                Ok(left) => {
                    step.cleaned = left.is_done();
                    cloud_left = (!step.cleaned).then(|| left.describe());
                }
                // A service that is there but failing (down, timing out) is retried until the
                // deadline, saying so; anything else fails the delete now.
                Err(e) if e.is_transient() => {
                    tracing::warn!(cluster = %c.uuid, error = %e, "delete cleanup: will retry");
                    cloud_left = Some(format!("retrying the cleanup: {e}"));
                }
                Err(e) => return Err(e),
            }
        }
        let capi_gone = observed.is_empty();
        if capi_gone && step.cleaned {
            // What it kept or could not check is the cluster's last status reason before it
            // goes (one more run when no progress showed it yet).
            let report = step.report.describe();
            if !step.report.is_empty() && !step.reported.contains(&report) {
                step.reported.clone_from(&report);
                return Ok(step.requeue(Duration::from_millis(1), Some(report)));
            }
            self.delete_remains(journal, spec, &ns).await?;
            self.write_delete_report(c, &ns, &step.report).await?;
            return Ok(Outcome::ClusterDeleted);
        }
        let report = (!step.report.is_empty()).then(|| step.report.describe());
        let what = [
            cloud_left,
            (!capi_gone).then(|| blocking(&observed)),
            report,
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ");
        let (timeout, left) = self.delete_time_left(op);
        if left.is_zero() {
            return Err(CapiError::Stuck(format!(
                "Timed out deleting the cluster after {} minutes: {what}. Deleting it again \
                 resumes from here.",
                timeout.num_minutes()
            )));
        }
        // Changes of the cluster's objects wake the step at once; the cloud cleanup, which
        // nothing announces, is looked at every `cleanup_poll_secs`.
        let after = if !step.cleaned && observed.machines.is_empty() || capi_gone {
            Duration::from_secs(self.config.cleanup_poll_secs.max(1))
        } else {
            UNANNOUNCED_POLL
        };
        let progress = (what != step.reported).then(|| what.clone());
        step.reported = what;
        Ok(step.requeue(after.min(left), progress))
    }

    /// What is left once Cluster API and the cloud cleanup are done with a deleted cluster: its
    /// server groups, the objects CAPI does not own, the credential (the worker deletes the
    /// rows).
    async fn delete_remains(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        ns: &str,
    ) -> Result<(), CapiError> {
        let c = &spec.cluster;
        // The machines are gone: their server groups can go (with the credential, before its
        // Secret is deleted below); a failure is retried like the rest of the delete.
        if uses_server_groups(c, spec.nodegroups.iter()) {
            self.delete_server_groups(spec, |_| true).await?;
        }
        // Adopted and never rotated here: the driver's credential, while its Secret still
        // says which it is.
        if let Some(at) = &c.objects_at
            && spec.day2.app_cred_id.is_none()
        {
            self.delete_drivers_credential(journal, c, at).await?;
        }
        // Then what CAPI does not own: our Secrets, machine templates, addons.
        let sel = format!("{LABEL_CLUSTER_UUID}={}", c.uuid);
        for gvk in OWNED_KINDS {
            self.mgmt.delete_labelled(gvk, ns, &sel).await?;
        }
        // Adopted from magnum-cluster-api: the Secrets it made for the cluster, by its own
        // names and label (magnum-capi-helm's carry our cluster-uuid label: gone above). The
        // namespace is never deleted: `magnum-system` and magnum-capi-helm's per-project
        // namespace hold other clusters.
        if let Some(at) = &c.objects_at
            && at.driver == crate::domain::imported::DriverFamily::ClusterApi
        {
            for suffix in ["ca", "etcd", "proxy", "sa", "cloud-config"] {
                self.mgmt
                    .delete(&ObjectRef::new(
                        kinds::SECRET,
                        ns,
                        &format!("{}-{suffix}", at.name),
                    ))
                    .await?;
            }
            self.mgmt
                .delete_labelled(kinds::SECRET, ns, &format!("cluster-uuid={}", c.uuid))
                .await?;
        }
        // The credential: with the service's credentials (its owner may be gone).
        if let Some(id) = &spec.day2.app_cred_id {
            let result = match &self.keystone {
                Some(k) => k.delete_app_credential(&c.user_id, id).await,
                None => Ok(()),
            };
            match result {
                Ok(()) => {
                    tracing::info!(cluster = %c.uuid, app_cred = %id, "application credential deleted")
                }
                Err(e) => {
                    tracing::warn!(cluster = %c.uuid, app_cred = %id, error = %e, "application credential not deleted yet; will retry");
                    journal
                        .leftover_credential(c.uuid, &c.user_id, id, &e.to_string())
                        .await?;
                    crate::telemetry::app_credential("leftover", 1);
                }
            }
        }
        Ok(())
    }

    /// What the workload cluster says of its volumes and floating IPs, or why it could not be
    /// read.
    async fn read_workload_or_why(&self, c: &Cluster) -> WorkloadRead {
        match self.read_workload(c).await {
            Ok(read) => read,
            Err(why) => {
                tracing::warn!(cluster = %c.uuid, reason = %why, "the workload cluster's PersistentVolumes and Services could not be read");
                WorkloadRead {
                    unreadable: Some(why),
                    ..WorkloadRead::default()
                }
            }
        }
    }

    /// Once the cluster is gone: what its delete kept in the tenant project or could not check,
    /// in the final log line and, when there is any, in the ConfigMap `<capi name>-delete-report`
    /// of its namespace. That ConfigMap does not carry the cluster label, so it outlives the
    /// cluster; [`Capi::expire_delete_reports`] removes it after `[capi]
    /// delete_report_retention_days`.
    async fn write_delete_report(
        &self,
        c: &Cluster,
        ns: &str,
        report: &Report,
    ) -> Result<(), CapiError> {
        if report.is_empty() {
            tracing::info!(cluster = %c.uuid, "cluster deleted: nothing kept, everything checked");
            return Ok(());
        }
        tracing::info!(cluster = %c.uuid, kept = ?report.kept, not_checked = ?report.not_checked, "cluster deleted: {}", report.describe());
        let cm = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": delete_report_name(&name_of(c)),
                "namespace": ns,
                "labels": {
                    LABEL_DELETED_CLUSTER: c.uuid.to_string(),
                    LABEL_PROJECT_ID: c.project_id,
                },
            },
            "data": {
                "cluster": c.uuid.to_string(),
                "name": c.name,
                "kept": report.kept.join("\n"),
                "not-checked": report.not_checked.join("\n"),
            },
        });
        self.mgmt.apply(&cm).await?;
        Ok(())
    }

    /// Removes the delete reports written more than `[capi] delete_report_retention_days`
    /// before `now` (by their `creationTimestamp`; none when it is 0): one LIST of ConfigMaps by
    /// the report label, one DELETE per expired report. How many were removed.
    pub async fn expire_delete_reports(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<usize, CapiError> {
        let days = self.config.delete_report_retention_days;
        if days == 0 {
            return Ok(0);
        }
        let oldest = now.timestamp() - i64::from(days) * 86_400;
        let mut removed = 0;
        for cm in self
            .mgmt
            .list_all(kinds::CONFIG_MAP, LABEL_DELETED_CLUSTER)
            .await?
        {
            let m = &cm.metadata;
            let written = m.creation_timestamp.as_ref().map(|t| t.0.as_second());
            let (Some(ns), Some(name)) = (&m.namespace, &m.name) else {
                continue;
            };
            if written.is_none_or(|t| t > oldest) {
                continue;
            }
            self.mgmt
                .delete(&ObjectRef::new(kinds::CONFIG_MAP, ns, name))
                .await?;
            tracing::info!(namespace = %ns, name = %name, retention_days = days, "delete report removed after its retention");
            removed += 1;
        }
        Ok(removed)
    }

    /// One step of a nodegroup delete: the first renders the cluster without the nodegroup and
    /// deletes its MachineDeployment (and health check); later ones find its machines gone, then
    /// delete its templates and server group (the worker deletes its row). Requeued (woken by changes of the cluster's
    /// objects) while CAPI deletes the machines, within `delete_timeout_mins` of the operation's
    /// start.
    pub(super) async fn delete_nodegroup(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        ng: Uuid,
        op: &Operation,
    ) -> Result<Outcome, CapiError> {
        let c = &spec.cluster;
        let ns = namespace_of(&self.config, c);
        let sel = format!("{LABEL_NODEGROUP_UUID}={ng}");
        let mut step: DeleteStep = serde_json::from_value(op.step.clone()).unwrap_or_default();
        if !step.requested {
            self.apply_cluster(journal, spec, Some(ng), false).await?;
            for gvk in [kinds::MACHINE_DEPLOYMENT, kinds::MACHINE_HEALTH_CHECK] {
                self.mgmt.delete_labelled(gvk, &ns, &sel).await?;
            }
            step.requested = true;
        }
        let id = ng.to_string();
        let gone = |o: &Observed| {
            let has = |v: &Value| o.nodegroup_of(v) == Some(id.as_str());
            !o.machine_deployments.iter().any(|v| has(v)) && !o.machines.iter().any(|v| has(v))
        };
        if !(self.observer.synced() && gone(&self.observer.observed(c.uuid))) {
            let left = self.nodegroup_delete_left(op)?;
            return Ok(step.requeue(UNANNOUNCED_POLL.min(left), None));
        }
        for gvk in kinds::TEMPLATES {
            self.mgmt.delete_labelled(gvk, &ns, &sel).await?;
        }
        // Its server group is named after the nodegroup's objects: `<cluster>-…-<uuid hex 8>`.
        let short = format!("-{}", &ng.simple().to_string()[..8]);
        if uses_server_groups(c, spec.nodegroups.iter().filter(|n| n.uuid == ng)) {
            self.delete_server_groups(spec, |n| n.ends_with(&short))
                .await?;
        }
        Ok(Outcome::NodegroupDeleted(ng))
    }
}

impl Capi {
    /// How long nodegroup delete `op` may still wait for its machines to go
    /// (`delete_timeout_mins` from its start); past it, the failure naming why.
    pub(super) fn nodegroup_delete_left(&self, op: &Operation) -> Result<Duration, CapiError> {
        let (_, left) = self.delete_time_left(op);
        if left.is_zero() {
            return Err(CapiError::Stuck(
                "Timed out waiting for the nodegroup's machines to be deleted".into(),
            ));
        }
        Ok(left)
    }

    /// A delete's deadline (`delete_timeout_mins`, from delete `op`'s start: a retry or a
    /// restart keeps it) and what is left of it.
    fn delete_time_left(&self, op: &Operation) -> (chrono::Duration, Duration) {
        let timeout = chrono::Duration::minutes(
            i64::try_from(self.config.delete_timeout_mins.max(1)).unwrap_or(30),
        );
        let left = (op.created_at + timeout - chrono::Utc::now())
            .to_std()
            .unwrap_or_default();
        (timeout, left)
    }
}

/// Label of a delete report ConfigMap: the uuid of the cluster it reports on (not the cluster
/// label, which would delete it with the cluster's own objects).
pub const LABEL_DELETED_CLUSTER: &str = "magnum.openstack.org/deleted-cluster-uuid";

/// `<capi name>-delete-report`: what a cluster's delete kept or could not check.
pub fn delete_report_name(capi_name: &str) -> String {
    format!("{capi_name}-delete-report")
}

/// Whether the cluster or one of `nodegroups` asks for a server group (so that deletes without
/// any make no Keystone or Nova call for them).
fn uses_server_groups<'a>(
    c: &Cluster,
    mut nodegroups: impl Iterator<Item = &'a Nodegroup>,
) -> bool {
    let set = |l: &crate::domain::labels::Labels| {
        l.get("server_group_policies")
            .is_some_and(|v| !v.trim().is_empty())
    };
    set(&c.labels) || nodegroups.any(|n| set(&n.labels))
}

/// How often a step waiting for Cluster API looks again when no change of the cluster's objects
/// woke it sooner (a missed event, a watch being re-listed).
pub(super) const UNANNOUNCED_POLL: Duration = Duration::from_secs(10);

/// Where a cluster or nodegroup delete is between its runs.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct DeleteStep {
    /// The deletion of the Cluster (or the nodegroup's MachineDeployment) was asked for.
    #[serde(default)]
    requested: bool,
    /// The tenant project's leftovers are gone (or the cleanup is off).
    #[serde(default)]
    cleaned: bool,
    /// The progress last shown, so an unchanged one is not written again.
    #[serde(default)]
    reported: String,
    /// What the workload cluster said, read before the machines went (`pvs` in steps of
    /// releases that read only PersistentVolumes: no volume is then known `Delete`, so all are
    /// kept).
    #[serde(default, alias = "pvs")]
    workload: Option<WorkloadRead>,
    /// What the cleanup kept or could not check so far.
    #[serde(default)]
    report: Report,
}

impl DeleteStep {
    fn requeue(&self, after: Duration, progress: Option<String>) -> Outcome {
        Outcome::Requeue {
            after,
            progress,
            step: serde_json::to_value(self).ok(),
        }
    }
}

/// What still exists of a cluster being deleted, for `status_reason`.
fn blocking(o: &Observed) -> String {
    let mut parts = Vec::new();
    if o.cluster.is_some() {
        parts.push("Cluster".to_string());
    }
    if o.openstack_cluster.is_some() {
        parts.push("OpenStackCluster".to_string());
    }
    if o.control_plane.is_some() {
        parts.push("KubeadmControlPlane".to_string());
    }
    if !o.machine_deployments.is_empty() {
        parts.push(format!(
            "{} MachineDeployments",
            o.machine_deployments.len()
        ));
    }
    if !o.machines.is_empty() {
        parts.push(format!("{} Machines", o.machines.len()));
    }
    format!("Waiting for Cluster API to delete: {}", parts.join(", "))
}
