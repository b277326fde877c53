//! What a delete removes besides what CAPI owns, and the credentials janitor.
//!
//! The workload's cloud-controller-manager and Cinder CSI run with the cluster's CAPI name as
//! their cluster name (rendered in `templates/addons.yaml.hbs`: OCCM `cluster.name` →
//! `--cluster-name`, CSI `clusterID` → `--cluster`), so what they created in the tenant project
//! is recognisable:
//! * load balancers named (or tagged) `kube_service_<capi name>_<namespace>_<service>`;
//! * volumes with metadata `cinder.csi.openstack.org/cluster=<capi name>`.
//!
//! Once the cluster's machines are gone (no live CCM can recreate anything), the delete removes
//! exactly those with the cluster's own application credential — load balancers first (cascade,
//! with the floating IPs on their VIP ports), then detached volumes; attached ones once Nova has
//! let go of them. A CAPI name is `c` + 32 hex digits, so one cluster's prefix never matches
//! another's.
//!
//! The credentials janitor (`crate::maintenance`) deletes application credentials named
//! `magnum-<uuid>-…` whose cluster does not exist ([`credential_cluster`] reads the name).

use uuid::Uuid;

use super::driver::{Capi, CapiError, name_of, namespace_of};
use super::values::ServerGroup;
use crate::domain::spec::Cluster;
use crate::openstack::workload::{self, Deleted, LoadBalancer, Volume};
use crate::openstack::{OpenStackError, UserSession};

/// Cinder CSI's metadata key naming the cluster of a volume it created.
pub const CSI_CLUSTER_KEY: &str = "cinder.csi.openstack.org/cluster";

/// The name prefix of the cluster's Service load balancers.
pub fn load_balancer_prefix(capi_name: &str) -> String {
    format!("kube_service_{capi_name}_")
}

/// Whether the load balancer was created by this cluster's cloud-controller-manager.
pub fn owns_load_balancer(capi_name: &str, lb: &LoadBalancer) -> bool {
    let prefix = load_balancer_prefix(capi_name);
    lb.name.starts_with(&prefix) || lb.tags.iter().any(|t| t.starts_with(&prefix))
}

/// Whether the volume was created by this cluster's Cinder CSI.
pub fn owns_volume(capi_name: &str, v: &Volume) -> bool {
    v.metadata.get(CSI_CLUSTER_KEY).and_then(|x| x.as_str()) == Some(capi_name)
}

/// The cluster from a credential name `magnum-<uuid>-<nonce>`.
pub fn credential_cluster(name: &str) -> Option<Uuid> {
    let rest = name.strip_prefix("magnum-")?;
    let (uuid, nonce) = rest.rsplit_once('-')?;
    (!nonce.is_empty()).then_some(())?;
    Uuid::try_parse(uuid).ok()
}

/// What is left of the cluster's cloud resources after a cleanup pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remaining {
    pub load_balancers: usize,
    pub volumes: usize,
    /// Why something could not go yet (e.g. a volume still attached to a live server).
    pub waiting_for: Vec<String>,
}

impl Remaining {
    pub fn is_done(&self) -> bool {
        self.load_balancers == 0 && self.volumes == 0
    }

    /// `deleting 2 load balancers, 3 volumes (volume v attached to server s)`.
    pub fn describe(&self) -> String {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut parts = Vec::new();
        if self.load_balancers > 0 {
            parts.push(plural(
                self.load_balancers,
                "load balancer",
                "load balancers",
            ));
        }
        if self.volumes > 0 {
            parts.push(plural(self.volumes, "volume", "volumes"));
        }
        let mut out = format!("deleting {}", parts.join(", "));
        if !self.waiting_for.is_empty() {
            out.push_str(&format!(" ({})", self.waiting_for.join("; ")));
        }
        out
    }
}

impl Capi {
    /// A session acting as the cluster (its application credential, read from its Secret on
    /// the management cluster). `None` when the service runs without Keystone or the Secret is
    /// gone (nothing can act for the cluster any more; the delete goes on without cleanup).
    pub(super) async fn cluster_session(
        &self,
        c: &Cluster,
    ) -> Result<Option<UserSession>, CapiError> {
        let Some(k) = &self.keystone else {
            return Ok(None);
        };
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        let Some((id, secret)) = self.live_credential(&ns, &name).await? else {
            tracing::warn!(cluster = %c.uuid, "no cloud credentials left: load balancers and volumes of the cluster are not cleaned up");
            return Ok(None);
        };
        match k.token_for_app_credential(&id, &secret).await {
            Ok((token, identity)) => Ok(Some(k.user_session(&token, identity))),
            Err(OpenStackError::InvalidToken) => Err(CapiError::Stuck(format!(
                "Cannot clean up the cluster's load balancers and volumes: its application \
                 credential {id} no longer authenticates. A member of the project can rotate it \
                 (`openstack coe credential rotate`) and delete the cluster again."
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// One cleanup pass: deletes what can go now of the cluster's load balancers and volumes
    /// and says what is left. Idempotent: a later pass (a retry, another replica after a
    /// restart) continues where this one stopped.
    pub(super) async fn cleanup_cloud(&self, c: &Cluster) -> Result<Remaining, CapiError> {
        let Some(s) = self.cluster_session(c).await? else {
            return Ok(Remaining::default());
        };
        let name = name_of(c);
        let mut left = Remaining::default();
        // Done only when a listing shows nothing of the cluster's: deletes are asynchronous in
        // Octavia and Cinder, so what was deleted in this pass counts until it is gone.
        let lbs: Vec<LoadBalancer> = workload::load_balancers(&s)
            .await?
            .into_iter()
            .filter(|lb| owns_load_balancer(&name, lb))
            .collect();
        for lb in &lbs {
            if workload::delete_load_balancer(&s, lb).await? == Deleted::Done
                && !lb.provisioning_status.starts_with("PENDING_")
            {
                tracing::info!(cluster = %c.uuid, load_balancer = %lb.id, name = %lb.name, "load balancer deleted");
            }
        }
        left.load_balancers = lbs.len();
        let volumes: Vec<Volume> = workload::volumes_with_metadata(&s, CSI_CLUSTER_KEY, &name)
            .await?
            .into_iter()
            .filter(|v| owns_volume(&name, v))
            .collect();
        left.volumes = volumes.len();
        if !lbs.is_empty() {
            // Volumes after the load balancers.
            return Ok(left);
        }
        for v in &volumes {
            let mut live = Vec::new();
            for server in &v.attached_to {
                if workload::server_exists(&s, server).await? {
                    live.push(server.clone());
                }
            }
            if !live.is_empty() {
                left.waiting_for.push(format!(
                    "volume {} is attached to server {}",
                    v.id,
                    live.join(", ")
                ));
                continue;
            }
            match workload::delete_volume(&s, v).await? {
                Deleted::Done => {
                    tracing::info!(cluster = %c.uuid, volume = %v.id, "volume deleted")
                }
                Deleted::NotYet if !v.attached_to.is_empty() => {
                    left.waiting_for.push(format!(
                        "volume {} is still attached to deleted server {}",
                        v.id,
                        v.attached_to.join(", ")
                    ));
                }
                Deleted::NotYet => {}
            }
        }
        Ok(left)
    }

    /// Creates the Nova server groups `wanted` that do not exist yet, with the cluster's
    /// credential, before machines that name them are applied (CAPO selects them by name).
    pub(super) async fn ensure_server_groups(
        &self,
        c: &Cluster,
        wanted: &[&ServerGroup],
    ) -> Result<(), CapiError> {
        if wanted.is_empty() {
            return Ok(());
        }
        let Some(s) = self.cluster_session(c).await? else {
            return Ok(());
        };
        let existing = workload::server_groups(&s).await?;
        for g in wanted {
            if !existing.iter().any(|e| e.name == g.name) {
                let id = workload::create_server_group(&s, &g.name, &g.policy).await?;
                tracing::info!(cluster = %c.uuid, server_group = %id, name = %g.name, policy = %g.policy, "server group created");
            }
        }
        Ok(())
    }

    /// Deletes the cluster's server groups whose name `matches` (after their machines are
    /// gone). Nothing to act with (no Keystone, no credential left) is not an error.
    pub(super) async fn delete_server_groups(
        &self,
        c: &Cluster,
        matches: impl Fn(&str) -> bool,
    ) -> Result<(), CapiError> {
        let Some(s) = self.cluster_session(c).await? else {
            return Ok(());
        };
        let prefix = format!("{}-", name_of(c));
        for g in workload::server_groups(&s).await? {
            if g.name.starts_with(&prefix) && matches(&g.name) {
                workload::delete_server_group(&s, &g.id).await?;
                tracing::info!(cluster = %c.uuid, server_group = %g.id, name = %g.name, "server group deleted");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(name: &str, tags: &[&str]) -> LoadBalancer {
        LoadBalancer {
            id: "id".into(),
            name: name.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            provisioning_status: "ACTIVE".into(),
            vip_port_id: None,
        }
    }

    const A: &str = "c5d12f6fda1964bf0ae4c1f639a523a52";
    const B: &str = "c0000000000004000800000000000000b";

    #[test]
    fn load_balancers_are_the_clusters_by_name_or_tag_only() {
        assert!(owns_load_balancer(
            A,
            &lb(&format!("kube_service_{A}_default_web"), &[])
        ));
        assert!(owns_load_balancer(
            A,
            &lb("renamed", &[&format!("kube_service_{A}_ns_svc")])
        ));
        assert!(!owns_load_balancer(
            A,
            &lb(&format!("kube_service_{B}_default_web"), &[])
        ));
        // The API load balancer CAPO creates, and anything named differently, is not ours.
        assert!(!owns_load_balancer(
            A,
            &lb(&format!("k8s-clusterapi-cluster-magnum-p-{A}-kubeapi"), &[])
        ));
        assert!(!owns_load_balancer(
            A,
            &lb(&format!("x_kube_service_{A}_default_web"), &[])
        ));
    }

    #[test]
    fn volumes_are_the_clusters_by_csi_metadata_only() {
        let v = |meta: serde_json::Value| Volume {
            id: "v".into(),
            status: "available".into(),
            metadata: meta.as_object().cloned().unwrap_or_default(),
            attached_to: vec![],
        };
        assert!(owns_volume(A, &v(serde_json::json!({CSI_CLUSTER_KEY: A}))));
        assert!(!owns_volume(A, &v(serde_json::json!({CSI_CLUSTER_KEY: B}))));
        assert!(!owns_volume(A, &v(serde_json::json!({"cluster": A}))));
    }

    #[test]
    fn credential_names_give_their_cluster() {
        let u = "5d12f6fd-a196-4bf0-ae4c-1f639a523a52";
        assert_eq!(
            credential_cluster(&format!("magnum-{u}-0a1b2c3d")),
            Uuid::try_parse(u).ok()
        );
        assert_eq!(credential_cluster(&format!("magnum-{u}-")), None);
        assert_eq!(credential_cluster("magnum-not-a-uuid-00"), None);
        assert_eq!(credential_cluster(&format!("other-{u}-00")), None);
    }

    #[test]
    fn remaining_reads_like_the_status_reason() {
        let r = Remaining {
            load_balancers: 2,
            volumes: 3,
            waiting_for: vec![],
        };
        assert_eq!(r.describe(), "deleting 2 load balancers, 3 volumes");
        let r = Remaining {
            load_balancers: 0,
            volumes: 1,
            waiting_for: vec!["volume v is attached to server s".into()],
        };
        assert_eq!(
            r.describe(),
            "deleting 1 volume (volume v is attached to server s)"
        );
        assert!(Remaining::default().is_done());
    }
}
