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
//! The janitor deletes application credentials named `magnum-<uuid>-…` whose cluster does not
//! exist (a crash between creating a credential and committing its cluster), following the
//! creations recorded in Postgres before each credential is made.

use uuid::Uuid;

use super::driver::{Capi, CapiError, name_of};
use super::values::ServerGroup;
use crate::config::{CleanupWithoutCredential, UnreadVolumes};
use crate::domain::spec::{Cluster, ClusterSpec};
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

/// Cinder metadata by which a tenant keeps a CSI volume through its cluster's delete.
pub const KEEP_KEY: &str = "magnum-capi/keep";

/// How OCCM describes a floating IP it allocates for a Service (`Floating IP for Kubernetes
/// external service <ns>/<svc> from cluster <cluster>`; releases before 1.26 leave out the
/// Service): only these are deleted; any other on a load balancer's VIP is the tenant's.
pub fn occm_floating_ip(capi_name: &str, description: &str) -> bool {
    description.starts_with("Floating IP for Kubernetes external service")
        && description.ends_with(&format!(" from cluster {capi_name}"))
}

/// How OCCM describes the security group it creates for a Service with
/// `manage-security-groups` (`Security Group for <ns>/<svc> Service LoadBalancer in cluster
/// <cluster>`).
pub fn occm_security_group(capi_name: &str, description: &str) -> bool {
    description.starts_with("Security Group for ")
        && description.ends_with(&format!(" Service LoadBalancer in cluster {capi_name}"))
}

/// Why volume `v` stays, if it does: its keep marker, its `Retain` PersistentVolume, or
/// PersistentVolumes that could not be read under `[capi] unread_volumes = "keep"`.
pub fn keeps_volume(v: &Volume, pvs: &PvRead, unread: UnreadVolumes) -> Option<String> {
    if v.metadata.get(KEEP_KEY).and_then(|x| x.as_str()) == Some("true") {
        return Some(format!("metadata {KEEP_KEY}=true"));
    }
    if pvs.retained.contains(&v.id) {
        return Some("its PersistentVolume's reclaimPolicy is Retain".into());
    }
    match (&pvs.unreadable, unread) {
        (Some(why), UnreadVolumes::Keep) => Some(format!(
            "the cluster's PersistentVolumes could not be read: {why}; [capi] unread_volumes = \
             \"keep\""
        )),
        _ => None,
    }
}

/// What the cluster's PersistentVolumes said, read before its machines went.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PvRead {
    /// Cinder volumes of `Retain` PersistentVolumes.
    #[serde(default)]
    pub retained: Vec<String>,
    /// Why they could not be read (`[capi] unread_volumes` decides).
    #[serde(default)]
    pub unreadable: Option<String>,
}

/// What a delete left in the tenant project on purpose, and what it could not look at: kept in
/// the delete's step (it survives a requeue or a restart), shown in `status_reason`, the final
/// log line and the `<capi name>-delete-report` ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    #[serde(default)]
    pub kept: Vec<String>,
    #[serde(default)]
    pub not_checked: Vec<String>,
}

impl Report {
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.not_checked.is_empty()
    }

    fn keep(&mut self, what: String) {
        if !self.kept.contains(&what) {
            self.kept.push(what);
        }
    }

    fn skip(&mut self, what: &str) {
        if !self.not_checked.iter().any(|w| w == what) {
            self.not_checked.push(what.to_string());
        }
    }

    /// `kept volume v (…); not checked: load balancers (…)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.kept.is_empty() {
            parts.push(format!("kept {}", self.kept.join(", ")));
        }
        if !self.not_checked.is_empty() {
            parts.push(format!("not checked: {}", self.not_checked.join(", ")));
        }
        parts.join("; ")
    }
}

/// What is left of the cluster's cloud resources after a cleanup pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remaining {
    pub load_balancers: usize,
    pub volumes: usize,
    pub security_groups: usize,
    /// Why something could not go yet (e.g. a volume still attached to a live server).
    pub waiting_for: Vec<String>,
}

impl Remaining {
    pub fn is_done(&self) -> bool {
        self.load_balancers == 0 && self.volumes == 0 && self.security_groups == 0
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
        if self.security_groups > 0 {
            parts.push(plural(
                self.security_groups,
                "security group",
                "security groups",
            ));
        }
        let mut out = format!("deleting {}", parts.join(", "));
        if !self.waiting_for.is_empty() {
            out.push_str(&format!(" ({})", self.waiting_for.join("; ")));
        }
        out
    }
}

/// Why a kind was not checked, as the report says it.
const NO_OCTAVIA: &str = "load balancers (no load-balancer service in the catalog)";
const NO_CINDER: &str = "volumes (no block-storage service in the catalog)";
const NO_NEUTRON: &str = "floating IPs and security groups (no network service in the catalog)";
const NO_L3: &str = "floating IPs (Neutron has no L3 extension)";
const NO_SECURITY_GROUPS: &str = "security groups (Neutron has no security-group extension)";

impl Capi {
    /// A session acting as the cluster (its application credential, read from its Secret on
    /// the management cluster). `None` when the service runs without Keystone or the Secret is
    /// gone.
    pub(super) async fn cluster_session(
        &self,
        c: &Cluster,
    ) -> Result<Option<UserSession>, CapiError> {
        let Some(k) = &self.keystone else {
            return Ok(None);
        };
        let Some((id, secret)) = self.credential_of(c).await? else {
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

    /// The session a delete cleans up with: the cluster's credential; once its Secret is gone,
    /// `[capi] cleanup_without_credential` decides — the service's own user scoped to the
    /// project, or a failure naming what is left. `None` only without Keystone (nothing can
    /// act) or for a cluster that never had a credential (no workload ever ran with one, so
    /// nothing of it is in the project).
    pub(super) async fn cleanup_session(
        &self,
        c: &Cluster,
        had_credential: bool,
    ) -> Result<Option<UserSession>, CapiError> {
        let Some(k) = &self.keystone else {
            return Ok(None);
        };
        if let Some(s) = self.cluster_session(c).await? {
            return Ok(Some(s));
        }
        if !had_credential {
            tracing::info!(cluster = %c.uuid, "the cluster never had a credential: nothing of its workload to clean up");
            return Ok(None);
        }
        match self.config.cleanup_without_credential {
            CleanupWithoutCredential::Fail => Err(CapiError::Stuck(format!(
                "Cannot clean up the cluster's load balancers, floating IPs, security groups \
                 and volumes in project {}: its credential Secret is gone. Set [capi] \
                 cleanup_without_credential = \"service\" to clean up as the service user \
                 (it needs a role in the project) and delete the cluster again.",
                c.project_id
            ))),
            CleanupWithoutCredential::Service => {
                match k.service_token_for_project(&c.project_id).await {
                    Ok((token, identity)) => {
                        tracing::warn!(cluster = %c.uuid, project = %c.project_id, "the cluster's credential Secret is gone: cleaning up as the service user");
                        Ok(Some(k.user_session(&token, identity)))
                    }
                    Err(OpenStackError::Forbidden(why)) => Err(CapiError::Stuck(format!(
                        "Cannot clean up the cluster's load balancers, floating IPs, security \
                         groups and volumes: its credential Secret is gone and {why}."
                    ))),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// One cleanup pass with `s`: deletes what can go now of the cluster's load balancers,
    /// floating IPs, security groups and volumes, records in `report` what it keeps or cannot
    /// check, and says what is left. Idempotent: a later pass (a retry, another replica after a
    /// restart) continues where this one stopped.
    pub(super) async fn cleanup_cloud(
        &self,
        c: &Cluster,
        s: &UserSession,
        pvs: &PvRead,
        report: &mut Report,
    ) -> Result<Remaining, CapiError> {
        let name = name_of(c);
        let project = c.project_id.as_str();
        let mut left = Remaining::default();
        // Done only when a listing shows nothing of the cluster's: deletes are asynchronous in
        // Octavia and Cinder, so what was deleted in this pass counts until it is gone.
        let lbs: Vec<LoadBalancer> = if workload::has_service(s, workload::LOAD_BALANCER) {
            workload::load_balancers(s, project)
                .await?
                .into_iter()
                .filter(|lb| owns_load_balancer(&name, lb))
                .collect()
        } else {
            report.skip(NO_OCTAVIA);
            Vec::new()
        };
        let network = workload::has_service(s, workload::NETWORK);
        if !network {
            report.skip(NO_NEUTRON);
        }
        // Floating IPs before their load balancers: OCCM's go, the tenant's are let go of.
        if network {
            match workload::floating_ips(s, project).await? {
                None => report.skip(NO_L3),
                Some(fips) => {
                    for f in &fips {
                        let on_vip = lbs
                            .iter()
                            .find(|lb| lb.vip_port_id.is_some() && lb.vip_port_id == f.port_id);
                        if occm_floating_ip(&name, &f.description) {
                            workload::delete_floating_ip(s, &f.id).await?;
                            tracing::info!(cluster = %c.uuid, floating_ip = %f.id, address = %f.address, "floating IP deleted");
                        } else if let Some(lb) = on_vip {
                            workload::disassociate_floating_ip(s, &f.id).await?;
                            tracing::info!(cluster = %c.uuid, floating_ip = %f.id, address = %f.address, load_balancer = %lb.id, "floating IP disassociated and kept");
                            report.keep(format!(
                                "floating IP {} ({}; not allocated by the cluster, disassociated \
                                 from load balancer {})",
                                f.address, f.id, lb.name
                            ));
                        }
                    }
                }
            }
        }
        for lb in &lbs {
            if workload::delete_load_balancer(s, lb).await? == Deleted::Done
                && !lb.provisioning_status.starts_with("PENDING_")
            {
                tracing::info!(cluster = %c.uuid, load_balancer = %lb.id, name = %lb.name, "load balancer deleted");
            }
        }
        left.load_balancers = lbs.len();
        let volumes: Vec<Volume> = if workload::has_service(s, workload::BLOCK_STORAGE) {
            workload::volumes_with_metadata(s, CSI_CLUSTER_KEY, &name)
                .await?
                .into_iter()
                .filter(|v| owns_volume(&name, v))
                .collect()
        } else {
            report.skip(NO_CINDER);
            Vec::new()
        };
        let mut doomed = Vec::new();
        for v in volumes {
            match keeps_volume(&v, pvs, self.config.unread_volumes) {
                Some(why) => report.keep(format!("volume {} ({why})", v.id)),
                None => doomed.push(v),
            }
        }
        if !lbs.is_empty() {
            // Security groups and volumes after the load balancers.
            left.volumes = doomed.len();
            return Ok(left);
        }
        if network {
            match workload::security_groups(s, project).await? {
                None => report.skip(NO_SECURITY_GROUPS),
                Some(groups) => {
                    for g in groups
                        .iter()
                        .filter(|g| occm_security_group(&name, &g.description))
                    {
                        match workload::delete_security_group(s, &g.id).await? {
                            Deleted::Done => {
                                tracing::info!(cluster = %c.uuid, security_group = %g.id, name = %g.name, "security group deleted")
                            }
                            Deleted::NotYet => {
                                left.security_groups += 1;
                                left.waiting_for
                                    .push(format!("security group {} is in use", g.name));
                            }
                        }
                    }
                }
            }
        }
        for v in &doomed {
            if self.delete_one_volume(c, s, v, report, &mut left).await? {
                left.volumes += 1;
            }
        }
        Ok(left)
    }

    /// Deletes one volume of the cluster: its CSI snapshots first (one made otherwise keeps
    /// the volume), then the volume once no live server holds it. What waits is said in `left`;
    /// `false` when the volume is kept after all.
    async fn delete_one_volume(
        &self,
        c: &Cluster,
        s: &UserSession,
        v: &Volume,
        report: &mut Report,
        left: &mut Remaining,
    ) -> Result<bool, CapiError> {
        let name = name_of(c);
        let mut live = Vec::new();
        for server in &v.attached_to {
            if workload::server_exists(s, server).await? {
                live.push(server.clone());
            }
        }
        if !live.is_empty() {
            left.waiting_for.push(format!(
                "volume {} is attached to server {}",
                v.id,
                live.join(", ")
            ));
            return Ok(true);
        }
        let snapshots = workload::snapshots_of(s, &v.id).await?;
        if !snapshots.is_empty() {
            let csi = |m: &serde_json::Map<String, serde_json::Value>| {
                m.get(CSI_CLUSTER_KEY).and_then(|x| x.as_str()) == Some(name.as_str())
            };
            if let Some(other) = snapshots.iter().find(|sn| !csi(&sn.metadata)) {
                // A snapshot someone made by hand is the tenant's: it and its volume stay.
                report.keep(format!(
                    "volume {} (it has snapshot {} not made by the cluster's Cinder CSI)",
                    v.id, other.id
                ));
                return Ok(false);
            }
            for sn in &snapshots {
                if workload::delete_snapshot(s, sn).await? == Deleted::Done
                    && !sn.status.ends_with("ing")
                {
                    tracing::info!(cluster = %c.uuid, volume = %v.id, snapshot = %sn.id, "volume snapshot deleted");
                }
            }
            left.waiting_for.push(format!(
                "volume {} waits for its {} snapshot{} to be deleted",
                v.id,
                snapshots.len(),
                if snapshots.len() == 1 { "" } else { "s" }
            ));
            return Ok(true);
        }
        match workload::delete_volume(s, v).await? {
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
            Deleted::NotYet if v.status == "error_deleting" => {
                left.waiting_for.push(format!(
                    "volume {} is error_deleting: Cinder could not delete it; an admin can reset \
                     its state",
                    v.id
                ));
            }
            Deleted::NotYet => {
                left.waiting_for
                    .push(format!("volume {} is {}", v.id, v.status));
            }
        }
        Ok(true)
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
    /// gone), acting as [`Capi::cleanup_session`] does; a failure fails the step (retried like
    /// the rest of the cleanup). Nothing to act with (no Keystone) is not an error.
    pub(super) async fn delete_server_groups(
        &self,
        spec: &ClusterSpec,
        matches: impl Fn(&str) -> bool,
    ) -> Result<(), CapiError> {
        let c = &spec.cluster;
        let Some(s) = self
            .cleanup_session(c, spec.day2.app_cred_id.is_some())
            .await?
        else {
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
    fn volumes_are_kept_by_marker_retain_or_unread_persistent_volumes_only() {
        let v = |id: &str, meta: serde_json::Value| Volume {
            id: id.into(),
            status: "available".into(),
            metadata: meta.as_object().cloned().unwrap_or_default(),
            attached_to: vec![],
        };
        let read = PvRead {
            retained: vec!["r".into()],
            unreadable: None,
        };
        let keep = UnreadVolumes::Keep;
        let plain = v("p", serde_json::json!({CSI_CLUSTER_KEY: A}));
        assert_eq!(keeps_volume(&plain, &read, keep), None);
        assert!(
            keeps_volume(&v("r", serde_json::json!({})), &read, keep)
                .is_some_and(|w| w.contains("Retain"))
        );
        let marked = v("m", serde_json::json!({KEEP_KEY: "true"}));
        assert!(keeps_volume(&marked, &read, keep).is_some_and(|w| w.contains(KEEP_KEY)));
        let unmarked = v("m", serde_json::json!({KEEP_KEY: "false"}));
        assert_eq!(keeps_volume(&unmarked, &read, keep), None);
        let unread = PvRead {
            retained: vec![],
            unreadable: Some("no kubeconfig Secret yet".into()),
        };
        assert!(
            keeps_volume(&plain, &unread, keep)
                .is_some_and(|w| w.contains("no kubeconfig Secret yet"))
        );
        assert_eq!(keeps_volume(&plain, &unread, UnreadVolumes::Delete), None);
    }

    #[test]
    fn occm_descriptions_tell_its_floating_ips_and_security_groups() {
        let fip =
            format!("Floating IP for Kubernetes external service default/web from cluster {A}");
        assert!(occm_floating_ip(A, &fip));
        assert!(occm_floating_ip(
            A,
            &format!("Floating IP for Kubernetes external service from cluster {A}")
        ));
        assert!(!occm_floating_ip(B, &fip));
        assert!(!occm_floating_ip(A, "reserved for the shop"));
        let sg = format!("Security Group for default/web Service LoadBalancer in cluster {A}");
        assert!(occm_security_group(A, &sg));
        assert!(!occm_security_group(B, &sg));
        assert!(!occm_security_group(A, "default"));
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
            security_groups: 0,
            waiting_for: vec![],
        };
        assert_eq!(r.describe(), "deleting 2 load balancers, 3 volumes");
        let r = Remaining {
            load_balancers: 0,
            volumes: 1,
            security_groups: 0,
            waiting_for: vec!["volume v is attached to server s".into()],
        };
        assert_eq!(
            r.describe(),
            "deleting 1 volume (volume v is attached to server s)"
        );
        assert!(Remaining::default().is_done());
    }
}
