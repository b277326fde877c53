//! The contract between the service layer / operation queue and a cluster backend: the one
//! [`Backend`] trait covering everything the services need from a backend (template checks, CA
//! read and signing, credential staging, readiness) and the worker's `execute` (which, for a
//! create, provisions the cluster's credential with the caller's sealed token). Implemented by
//! the Cluster API driver (`crate::capi::driver::CapiDriver`) and by [`simulated`], which needs
//! no infrastructure.

#[cfg(feature = "dev")]
pub mod simulated;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use secrecy::SecretString;
use sqlx::PgPool;

use crate::db::DbError;
use crate::db::clusters::ClusterRow;
use crate::db::nodegroups::NodegroupRow;
use crate::db::operations::OperationRow;
use crate::db::templates::TemplateRow;
use crate::domain::certificates::CaKind;
use crate::openstack::{OpenStackError, UserSession};

/// The cause an operation failure carries, kept whole so its source chain reaches the log.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// How executing an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Worth retrying (backend unreachable, conflict, timeout).
    #[error(transparent)]
    Transient(Cause),
    /// Retrying cannot help (invalid spec, quota refused by the cloud).
    #[error(transparent)]
    Permanent(Cause),
    /// Nothing could be tried now (the cluster's management cluster is unreachable): the
    /// operation waits, this attempt not counted, and is tried again after `retry_ms`.
    #[error("{reason}")]
    Deferred { reason: String, retry_ms: i64 },
}

impl DriverError {
    /// A transient failure described by `reason` alone (no underlying error to keep).
    pub fn transient(reason: impl Into<String>) -> Self {
        DriverError::Transient(reason.into().into())
    }

    /// A permanent failure described by `reason` alone.
    pub fn permanent(reason: impl Into<String>) -> Self {
        DriverError::Permanent(reason.into().into())
    }
}

/// What one run of an operation came to when it did not fail. A backend never waits for the
/// world inside a run: it does what can be done now and says when to look again.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The operation is complete; the cluster's status follows from what its management
    /// cluster reports (the status writer).
    Done,
    /// The operation is complete and the cluster is `status` now (unless another of its
    /// operations is still open): what no object on the management cluster will report (a
    /// rotation finished).
    Completed(crate::domain::status::Status),
    /// The nodegroup is gone from the management cluster: its row goes, and the cluster is
    /// `UPDATE_COMPLETE` (unless another of its operations is still open).
    NodegroupDeleted(uuid::Uuid),
    /// The cluster is gone from the management cluster and the cloud: its rows go.
    ClusterDeleted,
    /// The world is still working (a management cluster deleting machines, a rollout, a cloud
    /// deleting what a cluster left): run the operation again after `after`, or as soon as the
    /// backend reports a change of the cluster ([`Backend::changes`]), without holding a worker
    /// meanwhile and without counting an attempt. `progress` is a new `status_reason` to show
    /// (written only while the cluster is still in the operation's in-progress status);
    /// `step` is what the backend records to resume from (handed back in `OperationRow::step`).
    Requeue {
        after: Duration,
        progress: Option<String>,
        step: Option<serde_json::Value>,
    },
}

/// How a request-time backend call failed, in the classes the service layer tells apart.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The request cannot be served as it stands (a bad label value, a bad CSR): the client's.
    #[error("{0}")]
    Invalid(String),
    /// The management cluster cannot be reached now; the client may retry.
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    OpenStack(#[from] OpenStackError),
    #[error(transparent)]
    Db(#[from] DbError),
    /// Anything else: the backend's own fault, with its cause.
    #[error(transparent)]
    Internal(Cause),
}

pub type DriverFuture<'a> = Pin<Box<dyn Future<Output = Result<Outcome, DriverError>> + Send + 'a>>;
pub type BackendFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BackendError>> + Send + 'a>>;

/// What provisioning a cluster's credential needs.
pub struct ProvisionRequest<'a> {
    pub pool: &'a PgPool,
    pub template: &'a TemplateRow,
    pub cluster: &'a ClusterRow,
    pub nodegroups: &'a [NodegroupRow],
    /// The caller's token and catalog (absent in `--dev` without Keystone).
    pub session: Option<&'a UserSession>,
    pub roles: &'a [String],
}

/// What provisioning created for a cluster, to record with it or to revoke when that fails.
#[derive(Default)]
pub struct Provisioned {
    /// The application credential's id (None: none was created).
    pub app_cred_id: Option<String>,
    pub app_cred_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Who owns the credential and the session that created it (to delete it again).
    pub user_id: String,
    pub session: Option<UserSession>,
    /// The Secrets written on the management cluster, as (namespace, name).
    pub secrets: Vec<(String, String)>,
}

/// One readiness check and its outcome (`/readyz`, `magnum-capi check`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    /// What was found, or why it failed.
    pub detail: String,
    /// A failure that does not make the replica unready (one of several management clusters:
    /// only its clusters are affected).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

impl Check {
    pub fn new(name: &str, result: Result<String, String>) -> Self {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        Self {
            name: name.to_string(),
            ok,
            detail,
            optional: false,
        }
    }

    /// Whether it makes the replica unready.
    pub fn blocks(&self) -> bool {
        !self.ok && !self.optional
    }
}

/// What removing a cluster's objects from its management cluster came to (`Backend::forget`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// The objects removed, as `Kind/name`.
    pub removed: Vec<String>,
    /// The objects that could not be removed, each with why.
    pub failed: Vec<String>,
}

/// Whether the backend keeps per-cluster application credentials, so a rotation has to stage a
/// new one before the operation is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// Nothing to stage: the operation is recorded and `execute` completes it.
    None,
    /// A new credential is created with the caller's token and staged ([`Backend::stage_credential`]).
    Staged,
}

/// A cluster backend. Implementations of `execute` must be idempotent: an operation whose
/// replica died mid-way is executed again. A run does what can be done now and returns: done,
/// or [`Outcome::Requeue`] while the world works (no run waits for a management cluster or a
/// cloud). On success the backend has reported the resulting statuses (through `db::status`);
/// on a final failure the queue marks the resources `*_FAILED`.
///
/// The request-time methods have defaults describing a backend without a management cluster:
/// it provisions nothing, and its clusters have no CAs.
pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;

    /// Executes one claimed operation. `caller` is the token of the request that recorded it,
    /// when the request sealed one for the backend (a create: the cluster's application
    /// credential is created as the caller).
    fn execute<'a>(
        &'a self,
        pool: &'a PgPool,
        op: &'a OperationRow,
        caller: Option<&'a SecretString>,
    ) -> DriverFuture<'a>;

    /// Feeds of the clusters whose observed state changed, so an operation requeued for a
    /// cluster runs again as soon as something happened to it. None: a requeued operation
    /// waits its `after`.
    fn changes(&self) -> Vec<tokio::sync::broadcast::Receiver<uuid::Uuid>> {
        Vec::new()
    }

    /// Called once the queue has recorded the operation as done (e.g. to re-evaluate statuses
    /// that waited for it).
    fn finished(&self, _op: &OperationRow) {}

    /// The PEM certificate (bundle) of the cluster's CA `kind`; `None` when it has none.
    fn ca_certificate<'a>(
        &'a self,
        _cluster: &'a ClusterRow,
        _kind: CaKind,
    ) -> BackendFuture<'a, Option<String>> {
        Box::pin(async { Ok(None) })
    }

    /// Signs `csr` (PEM) with the cluster's CA `kind` as a client certificate valid for
    /// `validity`; `None` when the cluster has no such CA. A CSR that cannot be signed is
    /// [`BackendError::Invalid`].
    fn sign_certificate<'a>(
        &'a self,
        _cluster: &'a ClusterRow,
        _kind: CaKind,
        _csr: &'a str,
        _validity: Duration,
    ) -> BackendFuture<'a, Option<String>> {
        Box::pin(async { Ok(None) })
    }

    /// Whether a cluster template can be built by this backend (e.g. its Kubernetes version
    /// rules: `kube_tag` and the image's `kube_version` must agree; its proxies and labels). A
    /// refusal is [`BackendError::Invalid`].
    fn validate_template(&self, _template: &TemplateRow) -> Result<(), BackendError> {
        Ok(())
    }

    /// Whether a cluster (as it is about to be recorded: a create, a new nodegroup) can be
    /// built by this backend, so that bad labels are refused before anything is recorded
    /// instead of failing on the management cluster. A refusal is [`BackendError::Invalid`].
    fn validate_cluster(
        &self,
        _template: &TemplateRow,
        _cluster: &ClusterRow,
        _nodegroups: &[NodegroupRow],
    ) -> Result<(), BackendError> {
        Ok(())
    }

    /// What this backend depends on, checked now (the management cluster's API, the CRDs at the
    /// versions the driver writes). None for a backend without dependencies.
    fn readiness(&self) -> Pin<Box<dyn Future<Output = Vec<Check>> + Send + '_>> {
        Box::pin(async { Vec::new() })
    }

    /// Whether credential rotations stage a credential first.
    fn credentials(&self) -> Credentials {
        Credentials::None
    }

    /// Creates a new application credential for `user_id` with the caller's `session` and
    /// stages it for the cluster; returns the payload of the rotation operation that commits
    /// it. On failure nothing is left behind.
    fn stage_credential<'a>(
        &'a self,
        _pool: &'a PgPool,
        _cluster: &'a ClusterRow,
        _session: &'a UserSession,
        _user_id: &'a str,
        _roles: &'a [String],
        _implicit: bool,
    ) -> BackendFuture<'a, serde_json::Value> {
        Box::pin(async {
            Err(BackendError::Invalid(
                "this backend keeps no application credentials".into(),
            ))
        })
    }

    /// What the cluster would leave in its tenant project (and where to find it) if its records
    /// were dropped now, before a delete finished: for an administrator about to forget it
    /// (`magnum-capi cluster forget`). Reads only; nothing in the cloud is touched.
    fn leftovers<'a>(&'a self, _cluster: &'a ClusterRow) -> BackendFuture<'a, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Removes the cluster's objects from its management cluster without letting a controller
    /// act on the cloud for them (their finalizers are dropped), best effort: what was removed
    /// and what could not be. Nothing in the cloud is touched.
    fn forget<'a>(&'a self, _cluster: &'a ClusterRow) -> BackendFuture<'a, Forgotten> {
        Box::pin(async { Ok(Forgotten::default()) })
    }

    /// Discards a staged credential whose rotation could not be recorded.
    fn discard_staged<'a>(
        &'a self,
        _pool: &'a PgPool,
        _cluster: &'a ClusterRow,
        _payload: &'a serde_json::Value,
    ) -> BackendFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
}

impl std::fmt::Debug for dyn Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({})", self.name())
    }
}
