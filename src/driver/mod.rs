//! The contract between the service layer / operation queue and a cluster backend: the one
//! [`Backend`] trait covering everything the services need from a backend (template checks, CA
//! read and signing, credential staging, readiness) and the worker's `execute` (which, for a
//! create, provisions the cluster's credential with the caller's sealed token). A backend works
//! on domain values (`domain::spec`), never on the database: the worker hands it a [`Run`] (the
//! operation and its [`ClusterSpec`]) and writes what its [`Report`] says; the few durable
//! writes a backend needs in the middle of a run go through the [`Journal`] port. Implemented by
//! the Cluster API driver (`crate::capi::driver::CapiDriver`) and by [`simulated`], which needs
//! no infrastructure.

#[cfg(feature = "dev")]
pub mod simulated;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use secrecy::SecretString;
use uuid::Uuid;

use crate::domain::certificates::CaKind;
use crate::domain::spec::{Cluster, ClusterSpec, Nodegroup, Operation, Template};
use crate::domain::status::Status;
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
    /// `step` is what the backend records to resume from (handed back in `Operation::step`).
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
    /// A durable write through the [`Journal`] failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// Anything else: the backend's own fault, with its cause.
    #[error(transparent)]
    Internal(Cause),
}

/// A fact a run established that the worker records with its outcome (in the same transaction).
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// The cluster is built from another template now (an upgrade).
    Template(Uuid),
    /// One of the cluster's labels is set (`Some`) or removed (an upgrade: `kube_tag` follows
    /// the new template).
    Label { key: String, value: Option<String> },
    /// A nodegroup runs another image (an upgrade).
    NodegroupImage {
        nodegroup: Uuid,
        image: Option<String>,
    },
    /// A nodegroup runs another flavor (an upgrade to a template of another flavor, which the
    /// nodegroup had taken from the template it leaves).
    NodegroupFlavor { nodegroup: Uuid, flavor: String },
    /// A nodegroup's node addresses (the simulated backend; CAPI's come from the status writer).
    NodegroupAddresses {
        nodegroup: Uuid,
        addresses: Vec<String>,
    },
    /// A nodegroup's status (the simulated backend).
    NodegroupStatus { nodegroup: Uuid, status: Status },
    /// What the cluster runs and where its API is (the simulated backend).
    Cluster {
        api_address: Option<String>,
        coe_version: Option<String>,
        container_version: Option<String>,
    },
}

/// What a run came to: its [`Outcome`] and the facts to record with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub outcome: Outcome,
    pub facts: Vec<Fact>,
}

impl From<Outcome> for Report {
    fn from(outcome: Outcome) -> Self {
        Self {
            outcome,
            facts: Vec::new(),
        }
    }
}

/// One run of an operation: what the worker resolved for it.
pub struct Run<'a> {
    pub op: &'a Operation,
    /// The cluster, its template, nodegroups and day-2 state as Postgres has them now.
    pub spec: &'a ClusterSpec,
    /// The template an upgrade moves the cluster to (its payload's `cluster_template`).
    pub upgrade_to: Option<&'a Template>,
    /// The token of the request that recorded the operation, when it sealed one for the
    /// backend (a create: the cluster's application credential is created as the caller).
    pub caller: Option<&'a SecretString>,
    pub journal: &'a dyn Journal,
}

/// A durable write through the [`Journal`] failed; worth retrying.
#[derive(Debug, thiserror::Error)]
#[error("recording {what} failed")]
pub struct JournalError {
    pub what: &'static str,
    #[source]
    pub source: Cause,
}

pub type JournalFuture<'a> = Pin<Box<dyn Future<Output = Result<(), JournalError>> + Send + 'a>>;

/// The durable writes a backend makes in the middle of a run or a request, before it goes on:
/// what must survive a crash between two calls to the outside world (Keystone, the management
/// cluster). Implemented over PostgreSQL by the service layer (`service::journal::PgJournal`).
pub trait Journal: Send + Sync {
    /// An application credential is about to be created for `cluster` as `user_id`: the trace
    /// the credentials janitor follows if the run dies before the credential is recorded.
    fn credential_intent<'a>(&'a self, cluster: Uuid, user_id: &'a str) -> JournalFuture<'a>;
    /// The cluster's application credential was created (at create).
    fn credential_created<'a>(
        &'a self,
        cluster: Uuid,
        id: &'a str,
        expires_at: Option<DateTime<Utc>>,
    ) -> JournalFuture<'a>;
    /// The cluster runs on a new application credential owned by `user_id` (a rotation).
    fn credential_rotated<'a>(
        &'a self,
        cluster: Uuid,
        user_id: &'a str,
        id: &'a str,
        expires_at: Option<DateTime<Utc>>,
    ) -> JournalFuture<'a>;
    /// Why the cluster's credential does not work (None: it does).
    fn credential_problem<'a>(
        &'a self,
        cluster: Uuid,
        problem: Option<&'a str>,
    ) -> JournalFuture<'a>;
    /// A credential that could not be deleted now, for the leftover sweep to retry.
    fn leftover_credential<'a>(
        &'a self,
        cluster: Uuid,
        user_id: &'a str,
        id: &'a str,
        error: &'a str,
    ) -> JournalFuture<'a>;
    /// The CA rotation's phase (None: finished) and, when given, its new rollout marker.
    fn ca_rotation<'a>(
        &'a self,
        cluster: Uuid,
        phase: Option<i16>,
        rollout_after: Option<DateTime<Utc>>,
    ) -> JournalFuture<'a>;
}

pub type DriverFuture<'a> = Pin<Box<dyn Future<Output = Result<Report, DriverError>> + Send + 'a>>;
pub type BackendFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BackendError>> + Send + 'a>>;

/// What provisioning a cluster's credential needs.
pub struct ProvisionRequest<'a> {
    pub journal: &'a dyn Journal,
    pub template: &'a Template,
    pub cluster: &'a Cluster,
    pub nodegroups: &'a [Nodegroup],
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

/// The Kubernetes version a worker machine runs, as the management cluster reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletVersion {
    /// Its nodegroup, when the machine says.
    pub nodegroup: Option<Uuid>,
    pub machine: String,
    pub version: String,
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
/// cloud). On success the worker records the report (outcome and facts); on a final failure
/// it marks the resources `*_FAILED`. A backend writes no database itself.
///
/// The request-time methods have defaults describing a backend without a management cluster:
/// it provisions nothing, and its clusters have no CAs.
pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;

    /// Executes one step of a claimed operation.
    fn execute<'a>(&'a self, run: Run<'a>) -> DriverFuture<'a>;

    /// Feeds of the clusters whose observed state changed, so an operation requeued for a
    /// cluster runs again as soon as something happened to it. None: a requeued operation
    /// waits its `after`.
    fn changes(&self) -> Vec<tokio::sync::broadcast::Receiver<uuid::Uuid>> {
        Vec::new()
    }

    /// Called once the queue has recorded the operation as done (e.g. to re-evaluate statuses
    /// that waited for it).
    fn finished(&self, _op: &Operation) {}

    /// The PEM certificate (bundle) of the cluster's CA `kind`; `None` when it has none.
    fn ca_certificate<'a>(
        &'a self,
        _cluster: &'a Cluster,
        _kind: CaKind,
    ) -> BackendFuture<'a, Option<String>> {
        Box::pin(async { Ok(None) })
    }

    /// Signs `csr` (PEM) with the cluster's CA `kind` as a client certificate valid for
    /// `validity`; `None` when the cluster has no such CA. A CSR that cannot be signed is
    /// [`BackendError::Invalid`].
    fn sign_certificate<'a>(
        &'a self,
        _cluster: &'a Cluster,
        _kind: CaKind,
        _csr: &'a str,
        _validity: Duration,
    ) -> BackendFuture<'a, Option<String>> {
        Box::pin(async { Ok(None) })
    }

    /// Whether a cluster template can be built by this backend (e.g. its Kubernetes version
    /// rules: `kube_tag` and the image's `kube_version` must agree; its proxies and labels). A
    /// refusal is [`BackendError::Invalid`].
    fn validate_template(&self, _template: &Template) -> Result<(), BackendError> {
        Ok(())
    }

    /// Whether a cluster (as it is about to be recorded: a create, a new nodegroup) can be
    /// built by this backend, so that bad labels are refused before anything is recorded
    /// instead of failing on the management cluster. A refusal is [`BackendError::Invalid`].
    fn validate_cluster(
        &self,
        _template: &Template,
        _cluster: &Cluster,
        _nodegroups: &[Nodegroup],
    ) -> Result<(), BackendError> {
        Ok(())
    }

    /// The Kubernetes version each worker machine of `cluster` runs, as the management cluster
    /// last reported it (what runs it, its version), for an upgrade's kubelet skew check; empty
    /// when nothing is known.
    fn kubelet_versions(&self, _cluster: &Cluster) -> Vec<KubeletVersion> {
        Vec::new()
    }

    /// Whether nodegroup `nodegroup` (new or changed, among `nodegroups`) can be written beside
    /// the objects of `cluster`, a cluster adopted from a Magnum driver (its `objects_at` set),
    /// which is checked instead of [`Backend::validate_cluster`]: nothing of such a cluster is
    /// rendered here. A refusal is [`BackendError::Invalid`].
    fn validate_adopted_nodegroup(
        &self,
        _cluster: &Cluster,
        _nodegroups: &[Nodegroup],
        _nodegroup: Uuid,
    ) -> Result<(), BackendError> {
        Ok(())
    }

    /// What this backend depends on, checked now (the management cluster's API, the CRDs at the
    /// versions the driver writes). None for a backend without dependencies.
    fn readiness(&self) -> Pin<Box<dyn Future<Output = Vec<Check>> + Send + '_>> {
        Box::pin(async { Vec::new() })
    }

    /// Whether this backend may do everything it does on what it depends on (the management
    /// clusters' RBAC), asked now (`magnum-capi check`). None for a backend without
    /// dependencies.
    fn permissions(&self) -> Pin<Box<dyn Future<Output = Vec<Check>> + Send + '_>> {
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
        _journal: &'a dyn Journal,
        _spec: &'a ClusterSpec,
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
    fn leftovers<'a>(&'a self, _cluster: &'a Cluster) -> BackendFuture<'a, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Removes the cluster's objects from its management cluster without letting a controller
    /// act on the cloud for them (their finalizers are dropped), best effort: what was removed
    /// and what could not be. Nothing in the cloud is touched.
    fn forget<'a>(&'a self, _cluster: &'a Cluster) -> BackendFuture<'a, Forgotten> {
        Box::pin(async { Ok(Forgotten::default()) })
    }

    /// Discards a staged credential whose rotation could not be recorded.
    fn discard_staged<'a>(
        &'a self,
        _journal: &'a dyn Journal,
        _cluster: &'a Cluster,
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
