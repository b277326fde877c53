//! Workloads that read the cloud credential restarted when a rotation changes it (what
//! Stakater's Reloader does for a Secret, done by the driver): once the workload cluster's
//! `kube-system/cloud-config` Secret (which the cloud-config ClusterResourceSet re-applies)
//! carries the new application credential, every Deployment and DaemonSet of `kube-system`
//! whose pods mount it (the OpenStack cloud provider, the Cinder and Manila CSI) gets its pod
//! template annotated with the credential's id, so their pods restart on it before the old
//! credential is deleted. (A CA rotation replaces every node three times, which restarts every
//! pod; the management cluster's autoscaler is restarted by its rendered annotation.)

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::driver::{Capi, CapiError};
use crate::domain::spec::Cluster;

/// The Secret in the workload cluster the cloud provider and the CSI drivers read.
const CLOUD_CONFIG: &str = "cloud-config";
/// The pod-template annotation that restarts them.
pub const ANNOTATION_CREDENTIAL: &str = "magnum.openstack.org/cloud-credential";

/// The pod template mounts Secret `name`.
fn mounts(t: Option<&PodTemplateSpec>, name: &str) -> bool {
    t.and_then(|t| t.spec.as_ref())
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .any(|v| {
            v.secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some(name))
        })
}

/// The pod template's annotation already names `id`.
fn restarted_for(t: Option<&PodTemplateSpec>, id: &str) -> bool {
    t.and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(ANNOTATION_CREDENTIAL))
        .is_some_and(|v| v == id)
}

impl Capi {
    /// Restarts the workloads that read the cloud credential once the workload cluster has the
    /// new one (`app_cred_id`); `false` while its Secret still has the old one. A workload
    /// cluster that cannot be reached, or has no such Secret, has nothing to restart (`true`).
    pub(super) async fn restart_credential_readers(
        &self,
        c: &Cluster,
        app_cred_id: &str,
    ) -> Result<bool, CapiError> {
        let client = match self.workload_client(c).await {
            Ok(cl) => cl,
            Err(why) => {
                tracing::warn!(cluster = %c.uuid, %why, "workload cluster not reached; nothing restarted for the new credential");
                return Ok(true);
            }
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
        let secret = match secrets.get_opt(CLOUD_CONFIG).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(cluster = %c.uuid, error = %e, "workload cluster not read; nothing restarted for the new credential");
                return Ok(true);
            }
        };
        let Some(secret) = secret else {
            return Ok(true);
        };
        let delivered = secret
            .data
            .as_ref()
            .and_then(|d| d.get("cloud.conf"))
            .is_some_and(|conf| String::from_utf8_lossy(&conf.0).contains(app_cred_id));
        if !delivered {
            return Ok(false);
        }
        let waiting = |e: kube::Error| {
            CapiError::Waiting(format!("restarting the cloud-config readers: {e}"))
        };
        let patch = Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
            ANNOTATION_CREDENTIAL: app_cred_id}}}}}));
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
        let daemonsets: Api<DaemonSet> = Api::namespaced(client, "kube-system");
        let n = restart_readers(&deployments, &patch, app_cred_id, |d| {
            d.spec.as_ref().map(|s| &s.template)
        })
        .await
        .map_err(waiting)?
            + restart_readers(&daemonsets, &patch, app_cred_id, |d| {
                d.spec.as_ref().map(|s| &s.template)
            })
            .await
            .map_err(waiting)?;
        if n > 0 {
            tracing::info!(cluster = %c.uuid, workloads = n, "restarted for the new cloud credential");
        }
        Ok(true)
    }
}

/// Patches with `patch` every object of `api` whose pod template (`template`) mounts the
/// cloud-config Secret and was not restarted for `app_cred_id` yet; how many it patched.
async fn restart_readers<K>(
    api: &Api<K>,
    patch: &Patch<serde_json::Value>,
    app_cred_id: &str,
    template: impl Fn(&K) -> Option<&PodTemplateSpec>,
) -> Result<usize, kube::Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let mut n = 0;
    for o in api.list(&ListParams::default()).await?.items {
        let t = template(&o);
        if mounts(t, CLOUD_CONFIG) && !restarted_for(t, app_cred_id) {
            let name = o.meta().name.clone().unwrap_or_default();
            api.patch(&name, &PatchParams::default(), patch).await?;
            n += 1;
        }
    }
    Ok(n)
}
