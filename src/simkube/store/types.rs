//! The vocabulary of the store's API: what it keys objects by (`Resource`, `ObjectKey`), how
//! a write addresses and changes an object (`Target`, `Patch`, `Propagation`), how it is tuned
//! (`StoreOptions`, `Validator`) and how it fails (`StoreError`).

use std::sync::Arc;

use serde_json::{Value, json};

/// Checks an object before it is stored; `Err` carries the messages of a 422 `Invalid` answer.
pub type Validator = Arc<dyn Fn(&Value) -> Result<(), Vec<String>> + Send + Sync>;

/// A kind of object as the store keys it: API group (`""` for core) and plural name. The
/// version is not part of the key: an object is served with the apiVersion it was written with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resource {
    pub group: String,
    pub plural: String,
}

impl Resource {
    pub fn new(group: impl Into<String>, plural: impl Into<String>) -> Self {
        Resource {
            group: group.into(),
            plural: plural.into(),
        }
    }

    /// A core (`/api/v1`) resource such as `secrets` or `namespaces`.
    pub fn core(plural: impl Into<String>) -> Self {
        Resource::new("", plural)
    }

    /// The resource of `apiVersion` + `kind`, pluralised as kube's `ApiResource::from_gvk` does.
    pub fn of(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        Resource::new(group, kube::api::ApiResource::from_gvk(&gvk).plural)
    }

    pub fn is_core(&self) -> bool {
        self.group.is_empty()
    }

    /// Custom resources (every non-core group here) have a `/status` subresource: writes to the
    /// main resource keep the stored status, writes to `/status` change only the status.
    pub fn has_status_subresource(&self) -> bool {
        !self.is_core()
    }

    /// `plural` or `plural.group`, as Kubernetes names a resource in error messages.
    pub fn qualified(&self) -> String {
        if self.is_core() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub(super) fn is_namespace(&self) -> bool {
        self.is_core() && self.plural == "namespaces"
    }
}

/// Where one object lives: resource, namespace (`""` for cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub resource: Resource,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(resource: &Resource, namespace: &str, name: &str) -> Self {
        ObjectKey {
            resource: resource.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// Why a store operation failed; each maps to a Kubernetes `Status` reason and HTTP code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Expired(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
}

impl StoreError {
    pub fn code(&self) -> u16 {
        match self {
            StoreError::NotFound(_) => 404,
            StoreError::AlreadyExists(_) | StoreError::Conflict(_) => 409,
            StoreError::Invalid(_) => 422,
            StoreError::BadRequest(_) => 400,
            StoreError::Expired(_) => 410,
            StoreError::MethodNotAllowed(_) => 405,
            StoreError::UnsupportedMediaType(_) => 415,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::NotFound(_) => "NotFound",
            StoreError::AlreadyExists(_) => "AlreadyExists",
            StoreError::Conflict(_) => "Conflict",
            StoreError::Invalid(_) => "Invalid",
            StoreError::BadRequest(_) => "BadRequest",
            StoreError::Expired(_) => "Expired",
            StoreError::MethodNotAllowed(_) => "MethodNotAllowed",
            StoreError::UnsupportedMediaType(_) => "UnsupportedMediaType",
        }
    }

    /// The Kubernetes `Status` object kube parses into `Error::Api`.
    pub fn status_body(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        })
    }
}

pub(super) fn not_found(res: &Resource, name: &str) -> StoreError {
    StoreError::NotFound(format!("{} \"{name}\" not found", res.qualified()))
}

/// How a write changes an existing object.
#[derive(Debug, Clone)]
pub enum Patch {
    /// Server-side apply: create when absent, else JSON-merge the body (no field ownership).
    Apply(Value),
    /// RFC 7386 JSON merge patch (also used for strategic merge patch).
    Merge(Value),
    /// RFC 6902 JSON patch.
    Json(json_patch::Patch),
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The object; for custom resources the stored `status` is kept.
    Main,
    /// The `/status` subresource: only `status` changes.
    Status,
}

/// Tuning of the store.
#[derive(Clone)]
pub struct StoreOptions {
    pub validator: Option<Validator>,
    /// Events kept for watch resumption; older resourceVersions get `410 Expired`.
    pub history: usize,
    /// Capacity of the change broadcast; a watcher that falls further behind catches up from
    /// the history (or is told `410`), never slowing writers.
    pub channel_capacity: usize,
    /// Reject namespaced writes into a Namespace that does not exist (as kube-apiserver does).
    pub require_namespaces: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            validator: None,
            history: 10_000,
            channel_capacity: 16_384,
            require_namespaces: true,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("validator", &self.validator.is_some())
            .field("history", &self.history)
            .field("channel_capacity", &self.channel_capacity)
            .field("require_namespaces", &self.require_namespaces)
            .finish()
    }
}

/// What happens to an object's dependents when it is deleted (`propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Remove the object now, collect dependents afterwards.
    #[default]
    Background,
    /// Keep the object (`foregroundDeletion` finalizer) until its dependents are removed.
    Foreground,
    /// Remove the object and leave its dependents, minus the owner reference.
    Orphan,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_follows_kube_pluralisation() {
        assert_eq!(
            Resource::of("cluster.x-k8s.io/v1beta2", "MachineHealthCheck"),
            Resource::new("cluster.x-k8s.io", "machinehealthchecks")
        );
        assert_eq!(Resource::of("v1", "Secret"), Resource::core("secrets"));
    }
}
