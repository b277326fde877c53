//! The CAPI driver: executes recorded operations against the management cluster (render →
//! server-side apply, or delete and wait), provisions each cluster's application credential and
//! CAs, and cleans up credentials that could not be deleted at the time.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::apply::{KubeError, Mgmt, ObjectRef};
use super::pki::{ClusterCas, PkiError};
use super::render::{RenderError, Renderer, TemplateRef, referenced_templates};
use super::values::{self, CloudCredentials, Inputs, ValuesError};
use super::watch::Observer;
use super::{LABEL_CLUSTER_UUID, LABEL_NODEGROUP_UUID, kinds};
use crate::config::CapiConfig;
use crate::domain::certificates::CaKind;
use crate::domain::operation::OperationKind as K;
use crate::domain::spec::{Cluster, ClusterSpec, Nodegroup, Operation, Template};
use crate::driver::{
    Backend, BackendError, BackendFuture, Credentials, DriverError, DriverFuture, Fact, Forgotten,
    Journal, JournalError, Outcome, ProvisionRequest, Provisioned, Report, Run,
};
use crate::openstack::{Keystone, OpenStackError, UserSession, appcred};
use secrecy::{ExposeSecret, SecretString};

/// How a CAPI driver step failed.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    #[error(transparent)]
    Kube(#[from] KubeError),
    #[error(transparent)]
    Values(#[from] ValuesError),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    OpenStack(#[from] OpenStackError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Waiting(String),
    /// A wait reached its deadline, or nothing can act for the cluster: retrying the same way
    /// cannot help (the operation fails with this reason; a new request starts over).
    #[error("{0}")]
    Stuck(String),
}

impl CapiError {
    /// Worth retrying: the management cluster, the journal or OpenStack unreachable, or waiting.
    pub fn is_transient(&self) -> bool {
        match self {
            CapiError::Kube(k) => k.is_transient(),
            CapiError::Journal(_) | CapiError::Waiting(_) => true,
            CapiError::OpenStack(OpenStackError::Unavailable { .. }) => true,
            _ => false,
        }
    }
}

impl From<CapiError> for DriverError {
    fn from(e: CapiError) -> Self {
        if e.is_transient() {
            DriverError::Transient(Box::new(e))
        } else {
            DriverError::Permanent(Box::new(e))
        }
    }
}

/// Request-time failures in the service layer's classes: bad values are the client's, an
/// unreachable management cluster is worth a retry, anything else is ours.
impl From<CapiError> for BackendError {
    fn from(e: CapiError) -> Self {
        match e {
            CapiError::OpenStack(o) => BackendError::OpenStack(o),
            CapiError::Values(v) => BackendError::Invalid(v.to_string()),
            CapiError::Journal(j) => BackendError::Journal(j),
            CapiError::Kube(k) if k.is_transient() => BackendError::Unavailable(k.to_string()),
            other => BackendError::Internal(Box::new(other)),
        }
    }
}

/// Kinds whose objects of a cluster that a render no longer produces are deleted after the
/// apply: an add-on switched off, the autoscaler when no nodegroup autoscales any more.
const PRUNED_KINDS: [kinds::Gvk; 6] = [
    kinds::HELM_CHART_PROXY,
    kinds::CONFIG_MAP,
    kinds::AUTOSCALER[0],
    kinds::AUTOSCALER[1],
    kinds::AUTOSCALER[2],
    kinds::AUTOSCALER[3],
];

/// Every kind we create for a cluster, all labelled with its uuid and owner.
pub(super) const LABELLED_KINDS: [kinds::Gvk; 14] = [
    kinds::SECRET,
    kinds::CLUSTER,
    kinds::OPENSTACK_CLUSTER,
    kinds::CONTROL_PLANE,
    kinds::MACHINE_DEPLOYMENT,
    kinds::MACHINE_HEALTH_CHECK,
    kinds::OPENSTACK_MACHINE_TEMPLATE,
    kinds::KUBEADM_CONFIG_TEMPLATE,
    kinds::HELM_CHART_PROXY,
    kinds::CLUSTER_RESOURCE_SET,
    kinds::DEPLOYMENT,
    kinds::ROLE_BINDING,
    kinds::SERVICE_ACCOUNT,
    kinds::CONFIG_MAP,
];

/// Everything the driver of one management cluster needs, shared with the status writer (its
/// observer and change feed) and the periodic chores (`crate::maintenance`). Its fields are the
/// driver's own (visible to `capi` only); others read them through the accessors below.
pub struct Capi {
    pub(super) mgmt: Mgmt,
    pub(super) renderer: Renderer,
    pub(super) observer: Arc<Observer>,
    pub(super) config: CapiConfig,
    pub(super) keystone: Option<Arc<Keystone>>,
    /// The CA bundle of the OpenStack endpoints, written into each credentials Secret.
    pub(super) cloud_ca: Option<String>,
    /// The observer's change feed, taken once by the status writer.
    pub(super) feed: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Uuid>>>,
    /// Application credentials of clusters that did not exist, deleted by the janitor.
    pub(super) orphans_deleted: std::sync::atomic::AtomicUsize,
    /// Its `[[capi.management_clusters]]` name; `""`: the unnamed one (`[capi] kubeconfig`).
    pub(super) name: String,
    /// Whether its API answered the last probe (`super::fleet`).
    pub(super) reach: Arc<super::reach::Reach>,
    /// Runs the Keystone-wide chores of `maintenance` (leftover, orphaned and checked
    /// credentials): one management cluster of a replica does, not each.
    pub(super) shared_duties: bool,
    /// Clusters whose encryption Secret this replica wrote or saw: they encrypt for good (see
    /// `Capi::etcd_encryption`), so their renders read it no more.
    pub(super) encrypting: moka::future::Cache<Uuid, ()>,
}

/// Clusters [`Capi::encrypting`] remembers (16 bytes each); one it forgot reads its Secret once
/// more.
const ENCRYPTING_KEPT: u64 = 100_000;

/// What a [`Capi`] is made of (the rest starts empty: its observer, reachability, counters).
pub struct CapiParts {
    pub mgmt: Mgmt,
    pub renderer: Renderer,
    /// `[capi]` as this management cluster uses it.
    pub config: CapiConfig,
    pub keystone: Option<Arc<Keystone>>,
    pub cloud_ca: Option<String>,
    pub name: String,
    pub shared_duties: bool,
}

impl Capi {
    pub fn new(parts: CapiParts) -> Self {
        let (observer, feed) = Observer::new();
        Self {
            mgmt: parts.mgmt,
            renderer: parts.renderer,
            observer,
            config: parts.config,
            keystone: parts.keystone,
            cloud_ca: parts.cloud_ca,
            feed: std::sync::Mutex::new(Some(feed)),
            orphans_deleted: Default::default(),
            name: parts.name,
            reach: Default::default(),
            shared_duties: parts.shared_duties,
            encrypting: moka::future::Cache::new(ENCRYPTING_KEPT),
        }
    }

    pub fn mgmt(&self) -> &Mgmt {
        &self.mgmt
    }

    pub fn renderer(&self) -> &Renderer {
        &self.renderer
    }

    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }

    pub fn config(&self) -> &CapiConfig {
        &self.config
    }

    pub fn keystone(&self) -> Option<&Arc<Keystone>> {
        self.keystone.as_ref()
    }

    /// The observer's change feed, for the one status writer (`None` once taken).
    pub fn take_feed(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Uuid>> {
        self.feed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Application credentials of clusters that did not exist, deleted so far.
    pub fn orphans_deleted(&self) -> usize {
        self.orphans_deleted
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts `n` more orphaned credentials deleted.
    pub fn note_orphans_deleted(&self, n: usize) {
        self.orphans_deleted
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Its `[[capi.management_clusters]]` name; `""`: the unnamed one.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn reach(&self) -> &Arc<super::reach::Reach> {
        &self.reach
    }

    /// Whether it runs the Keystone-wide chores of its replica.
    pub fn shared_duties(&self) -> bool {
        self.shared_duties
    }
}

impl std::fmt::Debug for Capi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capi")
            .field("name", &self.name)
            .field("mgmt", &self.mgmt)
            .finish_non_exhaustive()
    }
}

/// A credential just created for a cluster (`id` None: `--dev` placeholders).
pub(super) struct NewCredential {
    pub id: Option<String>,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub creds: CloudCredentials,
}

/// The cluster's namespace: ours for the project, or where another driver left its objects.
pub fn namespace_of(cfg: &CapiConfig, c: &Cluster) -> String {
    match &c.objects_at {
        Some(at) => at.namespace.clone(),
        None => super::namespace(&cfg.namespace_prefix, &c.project_id),
    }
}

/// The cluster's CAPI `Cluster` name (its Secrets are named after it).
pub fn name_of(c: &Cluster) -> String {
    match &c.objects_at {
        Some(at) => at.name.clone(),
        None => cluster_name(c.stack_id.as_deref(), c.uuid),
    }
}

/// The CAPI `Cluster` name: the cluster's `stack_id`, else derived from its uuid.
pub(super) fn cluster_name(stack_id: Option<&str>, uuid: Uuid) -> String {
    stack_id.map_or_else(|| super::capi_name(uuid), str::to_string)
}

/// The machine templates among `templates` that no live object needs any more: neither the
/// control plane, a MachineDeployment, nor a MachineSet that still has machines refers to them.
/// With nothing live to compare with, nothing is superseded.
pub fn superseded(templates: &[TemplateRef], live: &[Value]) -> Vec<TemplateRef> {
    let needed: Vec<Value> = live
        .iter()
        .filter(|o| {
            o.get("kind").and_then(Value::as_str) != Some(kinds::MACHINE_SET.1)
                || o.pointer("/status/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    > 0
        })
        .cloned()
        .collect();
    let referenced = referenced_templates(&needed);
    if referenced.is_empty() {
        return Vec::new();
    }
    templates
        .iter()
        .filter(|t| !referenced.contains(t))
        .cloned()
        .collect()
}

impl Capi {
    /// Whether `c` lives on this management cluster.
    pub fn owns(&self, c: &Cluster) -> bool {
        c.management_cluster_name() == self.name
    }

    pub(super) fn inputs<'a>(
        &'a self,
        template: &'a Template,
        cluster: &'a Cluster,
        nodegroups: &'a [Nodegroup],
        credentials: Option<CloudCredentials>,
        cas: Option<&'a ClusterCas>,
    ) -> Inputs<'a> {
        Inputs {
            template,
            cluster,
            nodegroups,
            config: &self.config,
            credentials,
            cas,
            rollout_after: None,
            etcd_encryption: None,
        }
    }

    /// Credentials for the cluster's Secret: a new application credential created as the caller
    /// (`session`) for `cluster.user_id`, or, in `--dev` without Keystone, clearly fake ones.
    pub(super) async fn new_credentials(
        &self,
        journal: &dyn Journal,
        cluster: &Cluster,
        session: Option<&UserSession>,
        roles: &[String],
    ) -> Result<NewCredential, CapiError> {
        let iface = self.config.app_cred_interface.clone();
        match session {
            Some(s) => {
                let auth_url = s
                    .identity_url(&iface)
                    .or_else(|| s.identity_url("public"))
                    .ok_or_else(|| {
                        CapiError::Invalid("no identity endpoint in the service catalog".into())
                    })?;
                let name = cluster.name.clone().unwrap_or_default();
                let expires_at = (self.config.app_cred_expiry_days > 0).then(|| {
                    chrono::Utc::now()
                        + chrono::Duration::days(i64::from(self.config.app_cred_expiry_days))
                });
                // Recorded first: a crash after Keystone created it leaves a trace the
                // credentials janitor follows (`cleanup::sweep_orphan_credentials`).
                journal
                    .credential_intent(cluster.uuid, &cluster.user_id)
                    .await?;
                let cred =
                    appcred::create(s, &cluster.user_id, roles, cluster.uuid, &name, expires_at)
                        .await?;
                tracing::info!(cluster = %cluster.uuid, app_cred = %cred.id, user = %cluster.user_id, "application credential created");
                crate::telemetry::app_credential("created", 1);
                Ok(NewCredential {
                    id: Some(cred.id.clone()),
                    expires_at,
                    creds: CloudCredentials {
                        auth_url,
                        region_name: s.region().map(str::to_string),
                        interface: iface,
                        application_credential_id: cred.id,
                        application_credential_secret: cred.secret,
                        cacert: self.cloud_ca.clone(),
                        verify: true,
                    },
                })
            }
            // `--dev` without Keystone: nothing can authenticate, say so in the Secret.
            None => Ok(NewCredential {
                id: None,
                expires_at: None,
                creds: CloudCredentials {
                    interface: iface,
                    ..values::placeholder_credentials()
                },
            }),
        }
    }

    /// At create, before the cluster is recorded: the namespace and the cloud-credentials Secret
    /// with a fresh application credential, so the credential secret exists only in Keystone and
    /// on the management cluster. On failure nothing is left behind.
    pub async fn provision(&self, req: ProvisionRequest<'_>) -> Result<Provisioned, CapiError> {
        let ProvisionRequest {
            journal,
            template,
            cluster,
            nodegroups,
            session,
            roles,
        } = req;
        let NewCredential {
            id,
            expires_at,
            creds,
        } = self
            .new_credentials(journal, cluster, session, roles)
            .await?;
        let mut p = Provisioned {
            app_cred_id: id,
            app_cred_expires_at: expires_at,
            user_id: cluster.user_id.clone(),
            session: session.cloned(),
            secrets: Vec::new(),
        };
        let applied = async {
            let v = values::build(self.inputs(template, cluster, nodegroups, Some(creds), None))?;
            let objs = self.renderer.render_credentials(&v)?;
            for o in &objs {
                let r = ObjectRef::of(o)?;
                if r.kind == "Secret"
                    && let Some(ns) = r.namespace
                {
                    p.secrets.push((ns, r.name));
                }
            }
            self.mgmt.apply_all(&objs).await?;
            Ok::<_, CapiError>(())
        }
        .await;
        if let Err(e) = applied {
            self.revoke(&p).await;
            return Err(e);
        }
        Ok(p)
    }

    /// The create's first step, in the operation: the cluster's application credential created as
    /// the user who asked (their token, sealed in the operation), written into the cluster's
    /// Secrets and recorded. Replays are safe: a credential already recorded is kept, and one a
    /// crash left unrecorded is deleted before a new one is made. An invalid or expired token is
    /// final (`CREATE_FAILED` with Keystone's answer); Keystone unreachable is retried.
    async fn provision_as_caller(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        token: &SecretString,
    ) -> Result<(), CapiError> {
        let Some(k) = &self.keystone else {
            return Ok(());
        };
        let c = &spec.cluster;
        if spec.day2.app_cred_id.is_some() {
            return Ok(());
        }
        let prefix = appcred::name_prefix(c.uuid);
        for (id, name) in k.app_credentials_of(&c.user_id).await? {
            if name.starts_with(&prefix) {
                k.delete_app_credential(&c.user_id, &id).await?;
                tracing::info!(cluster = %c.uuid, app_cred = %id, "unrecorded credential of an interrupted create deleted");
            }
        }
        let refused = |why: String| {
            CapiError::Stuck(format!(
                "The application credential of the cluster could not be created as the user who \
                 created it: {why}. Delete the cluster and create it again."
            ))
        };
        let identity = match k.validate(token.expose_secret()).await {
            Ok(i) => i,
            Err(OpenStackError::InvalidToken) => {
                return Err(refused(
                    "Keystone no longer accepts the token of the request (expired or revoked)"
                        .into(),
                ));
            }
            Err(e) => return Err(e.into()),
        };
        let session = k.user_session(token.expose_secret(), identity.clone());
        let p = match self
            .provision(ProvisionRequest {
                journal,
                template: &spec.template,
                cluster: c,
                nodegroups: &spec.nodegroups,
                session: Some(&session),
                roles: &identity.roles,
            })
            .await
        {
            Ok(p) => p,
            Err(CapiError::OpenStack(
                e @ (OpenStackError::InvalidToken
                | OpenStackError::Forbidden(_)
                | OpenStackError::NotFound(_)),
            )) => {
                return Err(refused(format!("Keystone refused it ({e})")));
            }
            Err(e) => return Err(e),
        };
        let recorded = match p.app_cred_id.as_deref() {
            Some(id) => {
                journal
                    .credential_created(c.uuid, id, p.app_cred_expires_at)
                    .await
            }
            None => Ok(()),
        };
        if let Err(e) = recorded {
            self.revoke(&p).await;
            return Err(e.into());
        }
        Ok(())
    }

    /// Undoes [`Capi::provision`] when the credential could not be recorded.
    pub async fn revoke(&self, p: &Provisioned) {
        for (ns, name) in &p.secrets {
            if let Err(e) = self
                .mgmt
                .delete(&ObjectRef::new(kinds::SECRET, ns, name))
                .await
            {
                tracing::warn!(secret = %name, error = %e, "could not delete an unused credentials Secret");
            }
        }
        if let (Some(id), Some(s)) = (&p.app_cred_id, &p.session)
            && let Err(e) = appcred::delete(s, s.timeout(), &p.user_id, id).await
        {
            tracing::warn!(app_cred = %id, error = %e, "could not delete an unused application credential");
        }
    }

    /// The cluster's CAs to write, if its `<name>-ca` Secret does not exist yet.
    async fn cas_to_write(&self, ns: &str, name: &str) -> Result<Option<ClusterCas>, CapiError> {
        let existing = self
            .mgmt
            .get(&ObjectRef::new(kinds::SECRET, ns, &format!("{name}-ca")))
            .await?;
        Ok(match existing {
            Some(_) => None,
            None => Some(ClusterCas::generate()?),
        })
    }

    /// Renders the cluster as its spec has it and applies it (without `skip_nodegroup`, a
    /// nodegroup being deleted). `create` also writes the CAs (once) and, without Keystone,
    /// placeholder credentials.
    pub(super) async fn apply_cluster(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        skip_nodegroup: Option<Uuid>,
        create: bool,
    ) -> Result<Vec<Value>, CapiError> {
        self.apply_cluster_with(journal, spec, skip_nodegroup, create, |objs| objs)
            .await
    }

    /// [`Capi::apply_cluster`] with the rendered objects passed through `adjust` before they
    /// are applied (an upgrade holds the add-ons of its later stages as they are).
    pub(super) async fn apply_cluster_with(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        skip_nodegroup: Option<Uuid>,
        create: bool,
        adjust: impl FnOnce(Vec<Value>) -> Vec<Value>,
    ) -> Result<Vec<Value>, CapiError> {
        let cluster = &spec.cluster;
        let ngs: Vec<Nodegroup> = spec
            .nodegroups
            .iter()
            .filter(|n| Some(n.uuid) != skip_nodegroup)
            .cloned()
            .collect();
        let (ns, name) = (namespace_of(&self.config, cluster), name_of(cluster));
        let cas = if create {
            self.cas_to_write(&ns, &name).await?
        } else {
            None
        };
        let creds = if create
            && self
                .mgmt
                .get(&ObjectRef::new(
                    kinds::SECRET,
                    &ns,
                    &super::credentials_secret_name(&name),
                ))
                .await?
                .is_none()
        {
            if self.keystone.is_some() {
                return Err(CapiError::Invalid(
                    "the cluster's cloud credentials are missing from the management cluster"
                        .into(),
                ));
            }
            Some(
                self.new_credentials(journal, cluster, None, &[])
                    .await?
                    .creds,
            )
        } else {
            None
        };
        let (encrypt, encryption_secret) = self.etcd_encryption(spec, create).await?;
        let v = values::build(Inputs {
            rollout_after: spec.day2.ca_rollout_after,
            etcd_encryption: Some(encrypt),
            ..self.inputs(&spec.template, cluster, &ngs, creds, cas.as_ref())
        })?;
        let mut objs = adjust(self.renderer.render(&v)?);
        let writes_encryption = encryption_secret.is_some();
        if let Some(secret) = encryption_secret {
            // Before the control plane that reads it, after the namespace.
            let at = objs.iter().take_while(|o| o["kind"] == "Namespace").count();
            objs.insert(at, secret);
            tracing::info!(cluster = %cluster.uuid, "etcd encryption at rest on");
        }
        self.ensure_server_groups(cluster, &v.server_groups())
            .await?;
        self.ensure_api_security_groups(cluster, &v).await?;
        self.mgmt.apply_all(&objs).await?;
        if writes_encryption {
            self.encrypting.insert(cluster.uuid, ()).await;
        }
        self.prune(&ns, cluster.uuid, &objs).await?;
        Ok(objs)
    }

    /// The cluster's objects as [`Capi::apply_cluster`] would apply them (without the Secrets
    /// only a create writes).
    pub(super) async fn render_cluster(&self, spec: &ClusterSpec) -> Result<Vec<Value>, CapiError> {
        let (encrypt, _) = self.etcd_encryption(spec, false).await?;
        let v = values::build(Inputs {
            rollout_after: spec.day2.ca_rollout_after,
            etcd_encryption: Some(encrypt),
            ..self.inputs(&spec.template, &spec.cluster, &spec.nodegroups, None, None)
        })?;
        Ok(self.renderer.render(&v)?)
    }

    /// Deletes the cluster's objects of [`PRUNED_KINDS`] that `rendered` no longer has.
    async fn prune(&self, ns: &str, cluster: Uuid, rendered: &[Value]) -> Result<(), CapiError> {
        let sel = format!("{LABEL_CLUSTER_UUID}={cluster}");
        for gvk in PRUNED_KINDS {
            let keep: std::collections::HashSet<&str> = rendered
                .iter()
                .filter(|o| o["kind"] == gvk.1 && o["apiVersion"] == gvk.0)
                .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
                .collect();
            for o in self.mgmt.list(gvk, ns, &sel).await? {
                let name = o.metadata.name.unwrap_or_default();
                if !keep.contains(name.as_str()) {
                    self.mgmt.delete(&ObjectRef::new(gvk, ns, &name)).await?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the cluster's machine templates that nothing live refers to any more (after a
    /// rollout completed).
    pub async fn collect_templates(&self, c: &Cluster) -> Result<usize, CapiError> {
        let cluster = c.uuid;
        let ns = namespace_of(&self.config, c);
        let owned = format!("{}={}", super::LABEL_CAPI_CLUSTER_NAME, name_of(c));
        let mut live = Vec::new();
        for gvk in [
            kinds::CONTROL_PLANE,
            kinds::MACHINE_DEPLOYMENT,
            kinds::MACHINE_SET,
        ] {
            for o in self.mgmt.list(gvk, &ns, &owned).await? {
                let mut v =
                    serde_json::to_value(&o).map_err(|e| CapiError::Invalid(e.to_string()))?;
                // Lists do not repeat the kind on their items.
                v["kind"] = Value::from(gvk.1);
                live.push(v);
            }
        }
        let sel = format!("{LABEL_CLUSTER_UUID}={cluster}");
        let mut templates = Vec::new();
        for gvk in kinds::TEMPLATES {
            for t in self.mgmt.list(gvk, &ns, &sel).await? {
                templates.push(TemplateRef {
                    kind: gvk.1.to_string(),
                    name: t.metadata.name.unwrap_or_default(),
                });
            }
        }
        let old = superseded(&templates, &live);
        for t in &old {
            let gvk = kinds::TEMPLATES
                .into_iter()
                .find(|g| g.1 == t.kind)
                .unwrap_or(kinds::OPENSTACK_MACHINE_TEMPLATE);
            self.mgmt.delete(&ObjectRef::new(gvk, &ns, &t.name)).await?;
        }
        Ok(old.len())
    }

    /// `cluster.x-k8s.io/delete-machine` on the machines a resize should remove (by machine
    /// name, node name or the Nova server id at the end of the provider id).
    async fn mark_for_removal(
        &self,
        cluster: &Cluster,
        nodegroup: Uuid,
        which: &[String],
    ) -> Result<(), CapiError> {
        if which.is_empty() {
            return Ok(());
        }
        let ns = namespace_of(&self.config, cluster);
        let sel = format!("{LABEL_NODEGROUP_UUID}={nodegroup}");
        let mut ann = Map::new();
        ann.insert("cluster.x-k8s.io/delete-machine".into(), json!("yes"));
        for m in self.mgmt.list(kinds::MACHINE, &ns, &sel).await? {
            let name = m.metadata.name.clone().unwrap_or_default();
            let node = m
                .data
                .pointer("/status/nodeRef/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let provider = m
                .data
                .pointer("/spec/providerID")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let hit = which.iter().any(|w| {
                !w.is_empty() && (*w == name || w == node || provider.ends_with(&format!("/{w}")))
            });
            if hit {
                self.mgmt
                    .annotate(&ObjectRef::new(kinds::MACHINE, &ns, &name), &ann)
                    .await?;
            }
        }
        Ok(())
    }

    /// What each worker machine of `cluster` runs, as the watchers last saw it.
    pub(super) fn kubelet_versions(&self, cluster: &Cluster) -> Vec<crate::driver::KubeletVersion> {
        self.observer.observed(cluster.uuid).kubelet_versions()
    }

    pub(super) async fn run(&self, run: Run<'_>) -> Result<Report, CapiError> {
        let Run {
            op,
            spec,
            upgrade_to,
            caller,
            journal,
        } = run;
        let c = &spec.cluster;
        let kind = op.op_kind().map_err(|e| {
            CapiError::Invalid(format!("the Cluster API driver cannot run it: {e}"))
        })?;
        let facts = Vec::new();
        // Adopted from a Magnum Cluster API driver: only what acts on that driver's objects.
        if let Some(at) = &c.objects_at {
            return match kind {
                K::Resize => {
                    self.resize_adopted(spec, at).await?;
                    Ok(Report {
                        outcome: Outcome::Done,
                        facts,
                    })
                }
                K::Delete => Ok(self.delete_cluster(journal, spec, op).await?.into()),
                K::Upgrade => {
                    let to = upgrade_to.ok_or_else(|| {
                        CapiError::Invalid("the upgrade names no template".into())
                    })?;
                    self.upgrade_adopted(at, to).await?;
                    Ok(Report {
                        outcome: Outcome::Done,
                        facts: upgraded(spec, op, upgrade_to).1,
                    })
                }
                K::RotateCredential => Ok(self.commit_rotation(journal, spec, op).await?.into()),
                K::NodegroupCreate | K::NodegroupUpdate => {
                    if let Some(ng) = op.nodegroup_uuid {
                        if kind == K::NodegroupCreate {
                            self.create_adopted_nodegroup(spec, at, ng).await?;
                        } else {
                            self.update_adopted_nodegroup(spec, at, ng).await?;
                        }
                    }
                    Ok(Report {
                        outcome: Outcome::Done,
                        facts,
                    })
                }
                K::NodegroupDelete => match op.nodegroup_uuid {
                    Some(ng) => Ok(self
                        .delete_adopted_nodegroup(spec, at, ng, op)
                        .await?
                        .into()),
                    None => Ok(Report {
                        outcome: Outcome::Done,
                        facts,
                    }),
                },
                other => Err(CapiError::Invalid(format!(
                    "{other:?} is not available for a cluster adopted from Magnum (its objects \
                     are the ones its Magnum driver made)"
                ))),
            };
        }
        match kind {
            K::Create => {
                // Applied once; a requeue below only waits to move the API's floating IP.
                let applied = op.step.get("applied").and_then(Value::as_bool) == Some(true);
                if !applied {
                    if let Some(token) = caller {
                        self.provision_as_caller(journal, spec, token).await?;
                    }
                    self.apply_cluster(journal, spec, None, true).await?;
                }
                if let Some(what) = self.float_api_vip(c).await? {
                    // Within the create's own deadline (the status writer judges it only once
                    // the operation ends).
                    let minutes = c.create_timeout.unwrap_or(60).max(1);
                    if chrono::Utc::now()
                        > op.created_at + chrono::Duration::minutes(minutes.into())
                    {
                        return Err(CapiError::Stuck(format!(
                            "Timed out after {minutes} minutes waiting for {what} to put the \
                             API's floating IP on its virtual IP"
                        )));
                    }
                    return Ok(Outcome::Requeue {
                        after: std::time::Duration::from_secs(5),
                        progress: None,
                        step: Some(serde_json::json!({"applied": true})),
                    }
                    .into());
                }
            }
            K::Resize => {
                if let Some(ng) = op.nodegroup_uuid {
                    let which =
                        crate::domain::fields::string_list(op.payload.get("nodes_to_remove"));
                    self.mark_for_removal(c, ng, &which).await?;
                }
                self.apply_cluster(journal, spec, None, false).await?;
            }
            K::Upgrade => return self.upgrade(journal, spec, op, upgrade_to).await,
            K::NodegroupCreate | K::NodegroupUpdate => {
                self.apply_cluster(journal, spec, None, false).await?;
            }
            K::NodegroupDelete => {
                if let Some(ng) = op.nodegroup_uuid {
                    return Ok(self.delete_nodegroup(journal, spec, ng, op).await?.into());
                }
            }
            K::Delete => return Ok(self.delete_cluster(journal, spec, op).await?.into()),
            K::RotateCredential => {
                return Ok(self.commit_rotation(journal, spec, op).await?.into());
            }
            K::RotateCa => return Ok(self.rotate_ca(journal, spec, op).await?.into()),
        }
        Ok(Report {
            outcome: Outcome::Done,
            facts,
        })
    }
}

/// The labels that pick an add-on's version: the CNI's chart, and every image tag label of the
/// add-on charts ([`values::tag_labels`]: the cloud provider's and the CSI drivers'); an upgrade
/// moves a cluster to the new template's.
fn addon_version_labels() -> impl Iterator<Item = &'static str> {
    ["calico_tag", "cilium_tag", "flannel_tag"]
        .into_iter()
        .chain(values::tag_labels())
}

/// The cluster as an upgrade makes it — on the new template (`to`), its and every nodegroup's
/// version label following that template's `kube_tag` (the version is the cluster's: every
/// MachineDeployment runs it; as magnum-cluster-api's `upgrade_cluster` labels them), the
/// default nodegroups (and the one the operation names) on the payload's image — and those
/// changes as facts for the worker to record once it is applied.
pub(super) fn upgraded(
    spec: &ClusterSpec,
    op: &Operation,
    to: Option<&Template>,
) -> (ClusterSpec, Vec<Fact>) {
    let mut out = spec.clone();
    let mut facts = Vec::new();
    if let Some(t) = to {
        out.template = t.clone();
        out.cluster.cluster_template_id = t.uuid;
        facts.push(Fact::Template(t.uuid));
        // `kube_tag` follows the new template; so does every add-on version label the cluster
        // took from the template it leaves (a value of its own stays).
        let left = &spec.template.labels;
        for key in std::iter::once("kube_tag").chain(addon_version_labels()) {
            let value = t.labels.get(key).cloned();
            let have = out.cluster.labels.get(key).cloned();
            if key != "kube_tag" && (have.as_ref() != left.get(key) || have == value) {
                continue;
            }
            // As `db::clusters::set_label`: the cluster's and all its nodegroups' labels.
            let set = |labels: &mut crate::domain::labels::Labels| match &value {
                Some(v) => {
                    labels.insert(key.into(), v.clone());
                }
                None => {
                    labels.remove(key);
                }
            };
            set(&mut out.cluster.labels);
            for ng in &mut out.nodegroups {
                set(&mut ng.labels);
            }
            facts.push(Fact::Label {
                key: key.into(),
                value,
            });
        }
    }
    let image = op.payload.get("image_id").and_then(Value::as_str);
    let (left, own) = (&spec.template, &spec.cluster);
    for ng in &mut out.nodegroups {
        // The flavor follows the new template where the nodegroup took it from the one it leaves
        // (a same-version template of a bigger flavor rolls the machines; magnum-cluster-api
        // #387); a flavor the cluster or nodegroup chose stays.
        if let Some(t) = to.filter(|_| ng.is_default) {
            let (was, chosen, next) = if ng.is_master() {
                (
                    &left.master_flavor_id,
                    &own.master_flavor_id,
                    &t.master_flavor_id,
                )
            } else {
                (&left.flavor_id, &own.flavor_id, &t.flavor_id)
            };
            if let Some(next) = next.as_ref().filter(|n| !n.is_empty())
                && (chosen.as_ref().is_none_or(String::is_empty) || chosen == was)
                && ng.flavor_id == *was
                && ng.flavor_id.as_ref() != Some(next)
            {
                ng.flavor_id = Some(next.clone());
                facts.push(Fact::NodegroupFlavor {
                    nodegroup: ng.uuid,
                    flavor: next.clone(),
                });
            }
        }
        if ng.is_default || Some(ng.uuid) == op.nodegroup_uuid {
            // As `db::nodegroups::set_image`: no image keeps the one it has.
            if let Some(i) = image {
                ng.image_id = Some(i.to_string());
            }
            facts.push(Fact::NodegroupImage {
                nodegroup: ng.uuid,
                image: image.map(str::to_string),
            });
        }
    }
    (out, facts)
}

/// The driver the worker runs.
#[derive(Debug, Clone)]
pub struct CapiDriver(pub Arc<Capi>);

impl Backend for CapiDriver {
    fn name(&self) -> &'static str {
        "capi"
    }
    fn execute<'a>(&'a self, run: Run<'a>) -> DriverFuture<'a> {
        Box::pin(async move { self.0.run(run).await.map_err(DriverError::from) })
    }
    fn finished(&self, op: &Operation) {
        self.0.observer.touch(op.cluster_uuid);
    }
    fn changes(&self) -> Vec<tokio::sync::broadcast::Receiver<Uuid>> {
        vec![self.0.observer.subscribe()]
    }
    fn ca_certificate<'a>(
        &'a self,
        cluster: &'a Cluster,
        kind: CaKind,
    ) -> BackendFuture<'a, Option<String>> {
        Box::pin(async move {
            Ok(self
                .0
                .cluster_ca(cluster, kind)
                .await?
                .map(|pair| pair.cert_pem))
        })
    }
    fn sign_certificate<'a>(
        &'a self,
        cluster: &'a Cluster,
        kind: CaKind,
        csr: &'a str,
        validity: Duration,
    ) -> BackendFuture<'a, Option<String>> {
        Box::pin(async move {
            let Some(ca) = self.0.cluster_ca(cluster, kind).await? else {
                return Ok(None);
            };
            match super::pki::sign_csr(&ca, csr, validity) {
                Ok(pem) => Ok(Some(pem)),
                // The CA material itself is unusable: ours to fix, not the caller's.
                Err(e @ super::pki::CsrError::Ca(_)) => Err(BackendError::Internal(Box::new(e))),
                Err(e) => Err(BackendError::Invalid(e.to_string())),
            }
        })
    }
    fn credentials(&self) -> Credentials {
        Credentials::Staged
    }
    fn leftovers<'a>(&'a self, cluster: &'a Cluster) -> BackendFuture<'a, Vec<String>> {
        Box::pin(async move { Ok(self.0.leftovers(cluster).await?) })
    }
    fn forget<'a>(&'a self, cluster: &'a Cluster) -> BackendFuture<'a, Forgotten> {
        Box::pin(async move { Ok(self.0.forget(cluster).await) })
    }
    fn kubelet_versions(&self, cluster: &Cluster) -> Vec<crate::driver::KubeletVersion> {
        self.0.kubelet_versions(cluster)
    }
    fn validate_template(&self, template: &Template) -> Result<(), BackendError> {
        values::check_template(template, &self.0.config)
            .map_err(|e| BackendError::Invalid(e.to_string()))
    }
    fn validate_cluster(
        &self,
        template: &Template,
        cluster: &Cluster,
        nodegroups: &[Nodegroup],
    ) -> Result<(), BackendError> {
        values::build(self.0.inputs(template, cluster, nodegroups, None, None))
            .map(drop)
            .map_err(|e| BackendError::Invalid(e.to_string()))
    }
    fn validate_adopted_nodegroup(
        &self,
        cluster: &Cluster,
        nodegroups: &[Nodegroup],
        nodegroup: Uuid,
    ) -> Result<(), BackendError> {
        match self
            .0
            .adopted_nodegroup_refusal(cluster, nodegroups, nodegroup)
        {
            Some(why) => Err(BackendError::Invalid(why)),
            None => Ok(()),
        }
    }
    fn readiness(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<crate::driver::Check>> + Send + '_>>
    {
        Box::pin(self.0.readiness())
    }
    fn permissions(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<crate::driver::Check>> + Send + '_>>
    {
        Box::pin(async { vec![self.0.permissions().await] })
    }
    fn stage_credential<'a>(
        &'a self,
        journal: &'a dyn Journal,
        spec: &'a ClusterSpec,
        session: &'a UserSession,
        user_id: &'a str,
        roles: &'a [String],
        implicit: bool,
    ) -> BackendFuture<'a, Value> {
        Box::pin(async move {
            let staged = self
                .0
                .stage_rotation(journal, spec, session, user_id, roles, implicit)
                .await?;
            serde_json::to_value(&staged.payload).map_err(|e| BackendError::Internal(Box::new(e)))
        })
    }
    fn discard_staged<'a>(
        &'a self,
        journal: &'a dyn Journal,
        cluster: &'a Cluster,
        payload: &'a Value,
    ) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            Ok(self
                .0
                .discard_staged_payload(journal, cluster, payload)
                .await?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(kind: &str, name: &str) -> TemplateRef {
        TemplateRef {
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn md(kind: &str, infra: &str, bootstrap: &str, replicas: i64) -> Value {
        json!({"kind": kind, "spec": {"template": {"spec": {
                  "infrastructureRef": {"kind": "OpenStackMachineTemplate", "name": infra},
                  "bootstrap": {"configRef": {"kind": "KubeadmConfigTemplate", "name": bootstrap}}}}},
               "status": {"replicas": replicas}})
    }

    #[test]
    fn templates_still_needed_are_never_superseded() {
        let templates = [
            t("OpenStackMachineTemplate", "cp-new"),
            t("OpenStackMachineTemplate", "md-old"),
            t("OpenStackMachineTemplate", "md-new"),
            t("KubeadmConfigTemplate", "kct-old"),
            t("KubeadmConfigTemplate", "kct-new"),
        ];
        let kcp = json!({"kind": "KubeadmControlPlane", "spec": {"machineTemplate": {"spec": {
            "infrastructureRef": {"kind": "OpenStackMachineTemplate", "name": "cp-new"}}}}});
        // Mid-rollout: the old MachineSet still has machines.
        let live = [
            kcp.clone(),
            md("MachineDeployment", "md-new", "kct-new", 2),
            md("MachineSet", "md-old", "kct-old", 1),
            md("MachineSet", "md-new", "kct-new", 1),
        ];
        assert!(superseded(&templates, &live).is_empty());
        // Rolled out: the old MachineSet is empty; a MachineDeployment scaled to zero still
        // keeps its own templates.
        let live = [
            kcp,
            md("MachineDeployment", "md-new", "kct-new", 0),
            md("MachineSet", "md-old", "kct-old", 0),
            md("MachineSet", "md-new", "kct-new", 0),
        ];
        assert_eq!(
            superseded(&templates, &live),
            [
                t("OpenStackMachineTemplate", "md-old"),
                t("KubeadmConfigTemplate", "kct-old")
            ]
        );
        // Nothing live to compare with: keep everything.
        assert!(superseded(&templates, &[]).is_empty());
    }
}
