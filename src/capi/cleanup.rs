//! What a delete removes besides what CAPI owns, and the credentials janitor.
//!
//! The workload's cloud-controller-manager (OCCM) and Cinder CSI run with the cluster's CAPI
//! name as their cluster name (rendered in `templates/addons.yaml.hbs`: OCCM `cluster.name` →
//! `--cluster-name`, CSI `clusterID` → `--cluster`), so what they did in the tenant project is
//! recognisable, and the delete follows OCCM's own ownership rules (cloud-provider-openstack's
//! `ensureLoadBalancerDeleted`):
//! * a load balancer named `kube_service_<capi name>_<namespace>_<service>` that no other
//!   cluster's Service shares was created by the cluster: deleted with everything under it;
//! * one only tagged `kube_service_<capi name>_…` (the tenant's, given to a Service with
//!   `loadbalancer.openstack.org/load-balancer-id`), or shared with another cluster's Services,
//!   is not: only the listeners and pools OCCM made for the cluster's Services and their tags
//!   go; it and the floating IP on its VIP stay;
//! * a floating IP OCCM allocated goes unless its Service says
//!   `loadbalancer.openstack.org/keep-floatingip: "true"`;
//! * a volume with metadata `cinder.csi.openstack.org/cluster=<capi name>` goes only when a
//!   PersistentVolume read before the machines went says `Delete` for it.
//!
//! Once the cluster's machines are gone (no live CCM can recreate anything), the delete acts
//! with the cluster's own application credential — floating IPs, then load balancers, then
//! security groups and detached volumes; attached ones once Nova has let go of them. A CAPI name
//! is `c` + 32 hex digits, so one cluster's prefix never matches another's.
//!
//! The janitor deletes application credentials named `magnum-<uuid>-…` whose cluster does not
//! exist (a crash between creating a credential and committing its cluster), following the
//! creations recorded in Postgres before each credential is made.

use uuid::Uuid;

use super::driver::{Capi, CapiError, name_of};
use super::values::ServerGroup;
use crate::config::{CleanupWithoutCredential, UnreadVolumes};
use crate::domain::spec::{Cluster, ClusterSpec};
use crate::openstack::workload::{
    self, Deleted, FloatingIp, LbChild, LbChildKind, LoadBalancer, Volume,
};
use crate::openstack::{OpenStackError, UserSession};

/// Cinder CSI's metadata key naming the cluster of a volume it created.
pub const CSI_CLUSTER_KEY: &str = "cinder.csi.openstack.org/cluster";

/// The prefix of OCCM's names and tags of everything it makes for a Service.
const OCCM_PREFIX: &str = "kube_service_";

/// The name prefix of the cluster's Service load balancers.
pub fn load_balancer_prefix(capi_name: &str) -> String {
    format!("{OCCM_PREFIX}{capi_name}_")
}

/// OCCM's name for the load balancer of Service `namespace/service` of cluster `capi_name`
/// (`kube_service_<cluster>_<namespace>_<service>`, cut to 255 bytes as OCCM cuts it); also the
/// tag it puts on each load balancer and listener the Service uses.
pub fn occm_load_balancer_name(capi_name: &str, namespace: &str, service: &str) -> String {
    let mut name = format!("{OCCM_PREFIX}{capi_name}_{namespace}_{service}");
    let mut end = name.len().min(255);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name.truncate(end);
    name
}

/// What the delete does with a load balancer of the cluster's Services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbOwnership {
    /// OCCM created it for one of them (its name) and no other cluster's Service shares it:
    /// deleted with everything under it.
    Owned,
    /// They only attached to it (tagged for the cluster, named otherwise), or another cluster's
    /// Services share it: their listeners, pools and tags go, it stays.
    Attached,
}

/// Whether load balancer `lb` is one of the cluster's Services', and how (OCCM's rule: it
/// deletes a load balancer it named and no other Service's tag is on).
pub fn load_balancer_ownership(capi_name: &str, lb: &LoadBalancer) -> Option<LbOwnership> {
    let prefix = load_balancer_prefix(capi_name);
    let named = lb.name.starts_with(&prefix);
    let tagged = lb.tags.iter().any(|t| t.starts_with(&prefix));
    let shared = lb
        .tags
        .iter()
        .any(|t| t.starts_with(OCCM_PREFIX) && !t.starts_with(&prefix));
    match (named, tagged) {
        (true, _) if !shared => Some(LbOwnership::Owned),
        (true, _) | (false, true) => Some(LbOwnership::Attached),
        (false, false) => None,
    }
}

/// Whether listener or pool `child` of a load balancer the cluster's Services are attached to
/// is one OCCM made for them: tagged with one of their load balancer names, or named
/// `listener_<port index>_kube_service_<capi name>_…` (`pool_…`).
pub fn occm_child(capi_name: &str, kind: LbChildKind, child: &LbChild) -> bool {
    let prefix = load_balancer_prefix(capi_name);
    let head = match kind {
        LbChildKind::Listener => "listener_",
        LbChildKind::Pool => "pool_",
    };
    let named = child
        .name
        .strip_prefix(head)
        .and_then(|rest| rest.split_once('_'))
        .is_some_and(|(index, lb)| {
            !index.is_empty()
                && index.bytes().all(|b| b.is_ascii_digit())
                && lb.starts_with(&prefix)
        });
    named || child.tags.iter().any(|t| t.starts_with(&prefix))
}

/// Whether the volume was created by this cluster's Cinder CSI.
pub fn owns_volume(capi_name: &str, v: &Volume) -> bool {
    v.metadata.get(CSI_CLUSTER_KEY).and_then(|x| x.as_str()) == Some(capi_name)
}

/// Whether the cluster's workload ever ran with a credential of its project: ours
/// (`app_cred_id`) or, for a cluster adopted from another driver, that driver's (an adoption
/// never sets ours). Without one, nothing of the workload can be in the project.
pub fn had_credential(spec: &ClusterSpec) -> bool {
    spec.day2.app_cred_id.is_some() || spec.cluster.objects_at.is_some()
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

/// OCCM's Service annotation by which a tenant keeps the floating IP OCCM allocated.
pub const KEEP_FLOATING_IP: &str = "loadbalancer.openstack.org/keep-floatingip";

/// Why what the workload cluster would have told stays when it could not be read, under
/// `[capi] unread_volumes = "keep"`.
fn unread(read: &WorkloadRead, what: &str, setting: UnreadVolumes) -> Option<String> {
    match (&read.unreadable, setting) {
        (Some(why), UnreadVolumes::Keep) => Some(format!(
            "the cluster's {what} could not be read: {why}; [capi] unread_volumes = \"keep\""
        )),
        _ => None,
    }
}

/// Why volume `v` stays, if it does: its keep marker, its `Retain` PersistentVolume, no
/// PersistentVolume saying `Delete` for it (one deleted with `Retain` leaves the volume to the
/// tenant), or PersistentVolumes that could not be read under `[capi] unread_volumes = "keep"`.
pub fn keeps_volume(v: &Volume, read: &WorkloadRead, setting: UnreadVolumes) -> Option<String> {
    if v.metadata.get(KEEP_KEY).and_then(|x| x.as_str()) == Some("true") {
        return Some(format!("metadata {KEEP_KEY}=true"));
    }
    if read.retained.contains(&v.id) {
        return Some("its PersistentVolume's reclaimPolicy is Retain".into());
    }
    if read.unreadable.is_some() {
        return unread(read, "PersistentVolumes", setting);
    }
    (!read.deletable.contains(&v.id))
        .then(|| "no PersistentVolume of the cluster names it".to_string())
}

/// Why OCCM's floating IP `f` (on the VIP of the cluster's load balancer `on_vip`, if any)
/// stays: its Service says `keep-floatingip: "true"`, or the Services could not be read under
/// `[capi] unread_volumes = "keep"`. The Service is recognised by OCCM's description of the
/// floating IP, its address in the Service's status, or the load balancer it is on.
pub fn keeps_floating_ip(
    capi_name: &str,
    f: &FloatingIp,
    on_vip: Option<&LoadBalancer>,
    read: &WorkloadRead,
    setting: UnreadVolumes,
) -> Option<String> {
    if read.unreadable.is_some() {
        return unread(read, "Services", setting);
    }
    let described = |svc: &KeptService| {
        format!(
            "Floating IP for Kubernetes external service {}/{} from cluster {capi_name}",
            svc.namespace, svc.name
        )
    };
    read.keep_floating_ips
        .iter()
        .find(|svc| {
            f.description == described(svc)
                || svc.addresses.contains(&f.address)
                || on_vip.is_some_and(|lb| {
                    svc.load_balancer_id.as_deref() == Some(lb.id.as_str())
                        || lb.name == occm_load_balancer_name(capi_name, &svc.namespace, &svc.name)
                })
        })
        .map(|svc| {
            format!(
                "its Service {}/{} has {KEEP_FLOATING_IP}: \"true\"",
                svc.namespace, svc.name
            )
        })
}

/// What the workload cluster said before its machines went: which Cinder volumes its
/// PersistentVolumes keep or give up, and which Services keep their floating IPs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkloadRead {
    /// Cinder volumes of `Retain` PersistentVolumes.
    #[serde(default)]
    pub retained: Vec<String>,
    /// Cinder volumes of `Delete` PersistentVolumes: the only ones a delete removes.
    #[serde(default)]
    pub deletable: Vec<String>,
    /// The Services with `loadbalancer.openstack.org/keep-floatingip: "true"`.
    #[serde(default)]
    pub keep_floating_ips: Vec<KeptService>,
    /// Why the workload cluster could not be read (`[capi] unread_volumes` decides).
    #[serde(default)]
    pub unreadable: Option<String>,
}

/// A Service whose floating IP the tenant keeps, with what tells its floating IP.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptService {
    pub namespace: String,
    pub name: String,
    /// Its `loadbalancer.openstack.org/load-balancer-id` (OCCM writes it).
    #[serde(default)]
    pub load_balancer_id: Option<String>,
    /// Its `status.loadBalancer.ingress` IPs (OCCM shows the floating IP there).
    #[serde(default)]
    pub addresses: Vec<String>,
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
    /// The floating IPs kept so far, by id: a later pass keeps them when what told them (the
    /// load balancer they were on) is gone.
    #[serde(default)]
    pub kept_floating_ips: Vec<String>,
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
    /// Load balancers the cluster's Services only attached to or share, whose listeners and
    /// pools of the cluster are being removed.
    pub shared_load_balancers: usize,
    pub volumes: usize,
    pub security_groups: usize,
    /// Why something could not go yet (e.g. a volume still attached to a live server).
    pub waiting_for: Vec<String>,
}

impl Remaining {
    pub fn is_done(&self) -> bool {
        self.load_balancers == 0
            && self.shared_load_balancers == 0
            && self.volumes == 0
            && self.security_groups == 0
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
        if self.shared_load_balancers > 0 {
            parts.push(plural(
                self.shared_load_balancers,
                "shared load balancer's listeners",
                "shared load balancers' listeners",
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

/// Whether floating IP `f` is on `lb`'s VIP port.
fn on_vip(f: &FloatingIp, lb: &LoadBalancer) -> bool {
    lb.vip_port_id.is_some() && lb.vip_port_id == f.port_id
}

/// Whether the cluster's CCM could create Octavia load balancers: not when `octavia_enabled`
/// turned it off (`[LoadBalancer] enabled=false`). A catalog without Octavia is not enough to
/// know: the cleanup says it could not check.
pub fn ccm_made_load_balancers(c: &Cluster) -> bool {
    ccm_octavia(&c.labels)
}

/// `octavia_enabled`, default true.
fn ccm_octavia(labels: &crate::domain::labels::Labels) -> bool {
    labels
        .get("octavia_enabled")
        .and_then(|v| crate::domain::fields::bool_from_string(v.trim()))
        .unwrap_or(true)
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
    /// act) or for a cluster that never had a credential ([`had_credential`]).
    pub(super) async fn cleanup_session(
        &self,
        spec: &ClusterSpec,
    ) -> Result<Option<UserSession>, CapiError> {
        let c = &spec.cluster;
        let Some(k) = &self.keystone else {
            return Ok(None);
        };
        if let Some(s) = self.cluster_session(c).await? {
            return Ok(Some(s));
        }
        if !had_credential(spec) {
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
    /// floating IPs, security groups and volumes, releases the load balancers its Services only
    /// attached to, records in `report` what it keeps or cannot check, and says what is left.
    /// `read` is what the workload cluster said before its machines went. Idempotent: a later
    /// pass (a retry, another replica after a restart) continues where this one stopped.
    pub(super) async fn cleanup_cloud(
        &self,
        c: &Cluster,
        s: &UserSession,
        read: &WorkloadRead,
        report: &mut Report,
    ) -> Result<Remaining, CapiError> {
        let name = name_of(c);
        let project = c.project_id.as_str();
        let mut left = Remaining::default();
        // Done only when a listing shows nothing of the cluster's: deletes are asynchronous in
        // Octavia and Cinder, so what was deleted in this pass counts until it is gone.
        let (mut owned, mut attached) = (Vec::new(), Vec::new());
        if !ccm_made_load_balancers(c) {
            // Its CCM never served `Service type=LoadBalancer` (`octavia_enabled=false`; its
            // API has no Octavia load balancer of ours either: CAPO's, if any, goes with the
            // OpenStackCluster): nothing to look for, and the delete does not depend on Octavia.
        } else if workload::has_service(s, workload::LOAD_BALANCER) {
            for lb in workload::load_balancers(s, project).await? {
                match load_balancer_ownership(&name, &lb) {
                    Some(LbOwnership::Owned) => owned.push(lb),
                    Some(LbOwnership::Attached) => attached.push(lb),
                    None => {}
                }
            }
        } else {
            report.skip(NO_OCTAVIA);
        }
        let network = workload::has_service(s, workload::NETWORK);
        if !network {
            report.skip(NO_NEUTRON);
        }
        // Floating IPs before their load balancers.
        let fips = if network {
            match workload::floating_ips(s, project).await? {
                None => {
                    report.skip(NO_L3);
                    Vec::new()
                }
                Some(fips) => fips,
            }
        } else {
            Vec::new()
        };
        if network {
            self.cleanup_api_vip(c, s, &fips).await?;
        }
        for f in &fips {
            if report.kept_floating_ips.contains(&f.id) || attached.iter().any(|lb| on_vip(f, lb)) {
                // Kept by an earlier pass; or on the VIP of a load balancer that stays, which
                // keeps its address (reported with it below).
                continue;
            }
            let lb = owned.iter().find(|lb| on_vip(f, lb));
            let why = if occm_floating_ip(&name, &f.description) {
                match keeps_floating_ip(&name, f, lb, read, self.config.unread_volumes) {
                    Some(why) => why,
                    None => {
                        workload::delete_floating_ip(s, &f.id).await?;
                        tracing::info!(cluster = %c.uuid, floating_ip = %f.id, address = %f.address, "floating IP deleted");
                        continue;
                    }
                }
            } else if let Some(lb) = lb {
                format!(
                    "not allocated by the cluster, disassociated from load balancer {}",
                    lb.name
                )
            } else {
                continue;
            };
            if f.port_id.is_some() {
                workload::disassociate_floating_ip(s, &f.id).await?;
                tracing::info!(cluster = %c.uuid, floating_ip = %f.id, address = %f.address, "floating IP disassociated and kept");
            }
            report.keep(format!("floating IP {} ({}; {why})", f.address, f.id));
            report.kept_floating_ips.push(f.id.clone());
        }
        for lb in &owned {
            if workload::delete_load_balancer(s, lb).await? == Deleted::Done
                && !lb.provisioning_status.starts_with("PENDING_")
            {
                tracing::info!(cluster = %c.uuid, load_balancer = %lb.id, name = %lb.name, "load balancer deleted");
            }
        }
        left.load_balancers = owned.len();
        for lb in &attached {
            match self.release_load_balancer(c, s, lb).await? {
                Deleted::Done => {
                    let address = fips
                        .iter()
                        .find(|f| on_vip(f, lb))
                        .map(|f| format!(" and the floating IP {} on its VIP", f.address))
                        .unwrap_or_default();
                    report.keep(format!(
                        "load balancer {} ({}; not the cluster's alone: only the cluster's \
                         listeners, pools and tags removed, it{address} kept)",
                        lb.name, lb.id
                    ));
                }
                Deleted::NotYet => left.shared_load_balancers += 1,
            }
        }
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
            match keeps_volume(&v, read, self.config.unread_volumes) {
                Some(why) => report.keep(format!("volume {} ({why})", v.id)),
                None => doomed.push(v),
            }
        }
        if left.load_balancers > 0 || left.shared_load_balancers > 0 {
            // Security groups and volumes after the load balancers.
            left.volumes = doomed.len();
            return Ok(left);
        }
        if network {
            match workload::security_groups(s, project).await? {
                None => report.skip(NO_SECURITY_GROUPS),
                Some(groups) => {
                    for g in groups.iter().filter(|g| {
                        occm_security_group(&name, &g.description)
                            || super::api_security::drivers_group(&name, &g.name)
                    }) {
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

    /// One step of releasing a load balancer the cluster's Services only attached to or share,
    /// as OCCM releases one at a Service's delete: the pools OCCM made for them (with their
    /// members and health monitors), then their listeners, one change a pass (Octavia refuses
    /// the next while the load balancer is busy), then their tags. `Done` once nothing of the
    /// cluster's is left on it; the load balancer and its floating IP stay.
    async fn release_load_balancer(
        &self,
        c: &Cluster,
        s: &UserSession,
        lb: &LoadBalancer,
    ) -> Result<Deleted, CapiError> {
        if lb.provisioning_status.starts_with("PENDING_") {
            return Ok(Deleted::NotYet);
        }
        let name = name_of(c);
        let mut listeners = Vec::new();
        for id in &lb.listeners {
            if let Some(l) = workload::lb_child(s, LbChildKind::Listener, id).await?
                && occm_child(&name, LbChildKind::Listener, &l)
            {
                listeners.push(l);
            }
        }
        let mut doomed = Vec::new();
        for id in &lb.pools {
            if let Some(p) = workload::lb_child(s, LbChildKind::Pool, id).await?
                && (occm_child(&name, LbChildKind::Pool, &p)
                    || listeners
                        .iter()
                        .any(|l| l.default_pool_id.as_deref() == Some(p.id.as_str())))
            {
                doomed.push((LbChildKind::Pool, p));
            }
        }
        doomed.extend(listeners.into_iter().map(|l| (LbChildKind::Listener, l)));
        if let Some((kind, child)) = doomed.first() {
            if workload::delete_lb_child(s, *kind, &child.id).await? == Deleted::Done {
                tracing::info!(cluster = %c.uuid, load_balancer = %lb.id, kind = ?kind, id = %child.id, name = %child.name, "the cluster's listener or pool deleted from a load balancer it does not own");
            }
            return Ok(Deleted::NotYet);
        }
        let prefix = load_balancer_prefix(&name);
        let rest: Vec<String> = lb
            .tags
            .iter()
            .filter(|t| !t.starts_with(&prefix))
            .cloned()
            .collect();
        if rest.len() == lb.tags.len() {
            return Ok(Deleted::Done);
        }
        let done = workload::set_load_balancer_tags(s, &lb.id, &rest).await?;
        if done == Deleted::Done {
            tracing::info!(cluster = %c.uuid, load_balancer = %lb.id, name = %lb.name, "the cluster's tags removed from a load balancer it does not own; kept");
        }
        Ok(done)
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
        let Some(s) = self.cleanup_session(spec).await? else {
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

    #[test]
    fn a_cluster_whose_ccm_had_no_octavia_has_no_load_balancers_to_find() {
        let mut labels = crate::domain::labels::Labels::new();
        assert!(ccm_octavia(&labels));
        labels.insert("octavia_enabled".into(), "true".into());
        assert!(ccm_octavia(&labels));
        labels.insert("octavia_enabled".into(), "False".into());
        assert!(!ccm_octavia(&labels));
    }

    fn lb(name: &str, tags: &[&str]) -> LoadBalancer {
        LoadBalancer {
            id: "id".into(),
            name: name.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            provisioning_status: "ACTIVE".into(),
            vip_port_id: None,
            listeners: vec![],
            pools: vec![],
        }
    }

    const A: &str = "c5d12f6fda1964bf0ae4c1f639a523a52";
    const B: &str = "c0000000000004000800000000000000b";

    #[test]
    fn load_balancers_are_deleted_only_when_occm_named_them_for_the_cluster_alone() {
        let own = |name: &str, tags: &[&str]| load_balancer_ownership(A, &lb(name, tags));
        let web = format!("kube_service_{A}_default_web");
        let api = format!("kube_service_{A}_default_api");
        let theirs = format!("kube_service_{B}_default_web");
        // OCCM named it for one of the cluster's Services (and tagged it for them).
        assert_eq!(own(&web, &[]), Some(LbOwnership::Owned));
        assert_eq!(
            own(&web, &[&web, &api, "env=prod"]),
            Some(LbOwnership::Owned)
        );
        // The tenant's, given to a Service with `load-balancer-id`: tagged only.
        assert_eq!(own("shop", &[&web]), Some(LbOwnership::Attached));
        // Named for the cluster, but another cluster's Service shares it.
        assert_eq!(own(&web, &[&web, &theirs]), Some(LbOwnership::Attached));
        // Another cluster's, CAPO's API load balancer, anything named differently.
        assert_eq!(own(&theirs, &[&theirs]), None);
        assert_eq!(
            own(&format!("k8s-clusterapi-cluster-magnum-p-{A}-kubeapi"), &[]),
            None
        );
        assert_eq!(own(&format!("x_kube_service_{A}_default_web"), &[]), None);
        assert_eq!(own("shop", &[&format!("x_kube_service_{A}_ns_svc")]), None);
    }

    #[test]
    fn occms_names_are_cut_to_255_bytes_as_occm_cuts_them() {
        assert_eq!(
            occm_load_balancer_name(A, "default", "web"),
            format!("kube_service_{A}_default_web")
        );
        let long = occm_load_balancer_name(A, &"n".repeat(63), &"s".repeat(253));
        assert_eq!(long.len(), 255);
        assert!(long.starts_with(&load_balancer_prefix(A)));
    }

    #[test]
    fn the_clusters_listeners_and_pools_are_occms_by_tag_or_name() {
        let child = |name: &str, tags: &[&str]| LbChild {
            id: "c".into(),
            name: name.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            default_pool_id: None,
        };
        let web = format!("kube_service_{A}_default_web");
        let (l, p) = (LbChildKind::Listener, LbChildKind::Pool);
        assert!(occm_child(A, l, &child(&format!("listener_0_{web}"), &[])));
        assert!(occm_child(A, l, &child("renamed", &[&web])));
        assert!(occm_child(A, p, &child(&format!("pool_12_{web}"), &[])));
        // The tenant's own, another cluster's, and names that only look like OCCM's.
        assert!(!occm_child(A, l, &child("https", &[])));
        assert!(!occm_child(
            A,
            l,
            &child(&format!("listener_0_kube_service_{B}_default_web"), &[])
        ));
        assert!(!occm_child(A, l, &child(&format!("pool_0_{web}"), &[])));
        assert!(!occm_child(A, p, &child(&format!("pool_x_{web}"), &[])));
        assert!(!occm_child(A, p, &child(&format!("pool__{web}"), &[])));
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
    fn volumes_are_deleted_only_when_a_live_persistent_volume_says_delete() {
        let v = |id: &str, meta: serde_json::Value| Volume {
            id: id.into(),
            status: "available".into(),
            metadata: meta.as_object().cloned().unwrap_or_default(),
            attached_to: vec![],
        };
        let read = WorkloadRead {
            retained: vec!["r".into()],
            deletable: vec!["d".into(), "m".into()],
            ..WorkloadRead::default()
        };
        let keep = UnreadVolumes::Keep;
        let deleted = v("d", serde_json::json!({CSI_CLUSTER_KEY: A}));
        assert_eq!(keeps_volume(&deleted, &read, keep), None);
        assert!(
            keeps_volume(&v("r", serde_json::json!({})), &read, keep)
                .is_some_and(|w| w.contains("Retain"))
        );
        // Its PersistentVolume is gone (deleted with Retain, the tenant keeping the data).
        let orphan = v("o", serde_json::json!({CSI_CLUSTER_KEY: A}));
        assert_eq!(
            keeps_volume(&orphan, &read, keep).as_deref(),
            Some("no PersistentVolume of the cluster names it")
        );
        assert!(
            keeps_volume(&orphan, &read, UnreadVolumes::Delete).is_some(),
            "read: unread_volumes does not apply"
        );
        let marked = v("m", serde_json::json!({KEEP_KEY: "true"}));
        assert!(keeps_volume(&marked, &read, keep).is_some_and(|w| w.contains(KEEP_KEY)));
        let unmarked = v("m", serde_json::json!({KEEP_KEY: "false"}));
        assert_eq!(keeps_volume(&unmarked, &read, keep), None);
        let unread = WorkloadRead {
            unreadable: Some("no kubeconfig Secret yet".into()),
            ..WorkloadRead::default()
        };
        assert!(
            keeps_volume(&deleted, &unread, keep)
                .is_some_and(|w| w.contains("no kubeconfig Secret yet"))
        );
        assert_eq!(keeps_volume(&deleted, &unread, UnreadVolumes::Delete), None);
    }

    #[test]
    fn occms_floating_ips_are_kept_when_their_service_says_keep_floatingip() {
        let fip = |description: &str, address: &str| FloatingIp {
            id: "f".into(),
            address: address.into(),
            port_id: Some("vip".into()),
            description: description.into(),
        };
        let occm = |svc: &str| {
            format!("Floating IP for Kubernetes external service shop/{svc} from cluster {A}")
        };
        let read = WorkloadRead {
            keep_floating_ips: vec![KeptService {
                namespace: "shop".into(),
                name: "web".into(),
                load_balancer_id: Some("lb-web".into()),
                addresses: vec!["172.24.4.9".into()],
            }],
            ..WorkloadRead::default()
        };
        let keep = UnreadVolumes::Keep;
        let why = "its Service shop/web has loadbalancer.openstack.org/keep-floatingip: \"true\"";
        // By OCCM's description, by the Service's address, by the load balancer it is on.
        let by_description = fip(&occm("web"), "172.24.4.1");
        assert_eq!(
            keeps_floating_ip(A, &by_description, None, &read, keep).as_deref(),
            Some(why)
        );
        let old_occm = format!("Floating IP for Kubernetes external service from cluster {A}");
        let by_address = fip(&old_occm, "172.24.4.9");
        assert!(keeps_floating_ip(A, &by_address, None, &read, keep).is_some());
        let mut on = lb(&format!("kube_service_{A}_shop_web"), &[]);
        let by_lb_name = fip(&old_occm, "172.24.4.2");
        assert!(keeps_floating_ip(A, &by_lb_name, Some(&on), &read, keep).is_some());
        on.name = "renamed".into();
        assert!(keeps_floating_ip(A, &by_lb_name, Some(&on), &read, keep).is_none());
        on.id = "lb-web".into();
        assert!(keeps_floating_ip(A, &by_lb_name, Some(&on), &read, keep).is_some());
        // Another Service's goes.
        let other = fip(&occm("api"), "172.24.4.3");
        assert_eq!(keeps_floating_ip(A, &other, None, &read, keep), None);
        // Services that could not be read: kept unless unread_volumes = "delete".
        let unread = WorkloadRead {
            unreadable: Some("no kubeconfig Secret yet".into()),
            ..WorkloadRead::default()
        };
        assert!(
            keeps_floating_ip(A, &other, None, &unread, keep)
                .is_some_and(|w| w.contains("Services could not be read"))
        );
        assert_eq!(
            keeps_floating_ip(A, &other, None, &unread, UnreadVolumes::Delete),
            None
        );
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
            ..Remaining::default()
        };
        assert_eq!(r.describe(), "deleting 2 load balancers, 3 volumes");
        let r = Remaining {
            shared_load_balancers: 1,
            ..Remaining::default()
        };
        assert!(!r.is_done());
        assert_eq!(r.describe(), "deleting 1 shared load balancer's listeners");
        let r = Remaining {
            volumes: 1,
            waiting_for: vec!["volume v is attached to server s".into()],
            ..Remaining::default()
        };
        assert_eq!(
            r.describe(),
            "deleting 1 volume (volume v is attached to server s)"
        );
        assert!(Remaining::default().is_done());
    }
}
