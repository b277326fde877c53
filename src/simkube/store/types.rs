//! The vocabulary of the store's API: what it keys objects by (`Resource`, `ObjectKey`), how
//! a write addresses and changes an object (`Target`, `Patch`, `Propagation`, `FieldManager`),
//! how it is tuned and checked (`StoreOptions`, `Admission`) and how it fails (`StoreError`).

use std::sync::Arc;

use serde_json::{Value, json};

/// What the API server knows of a kind beyond storing it: its structural schema (list and map
/// types for server-side apply), its defaults, and its validation (a 422 `Invalid` on `Err`).
/// A plain `Fn(&Value) -> Result<(), Vec<String>>` is one that only validates.
pub trait Admission: Send + Sync {
    /// Checks `new` (with the stored `old` on updates, for transition rules).
    fn validate(&self, new: &Value, old: Option<&Value>) -> Result<(), Vec<FieldError>>;

    /// Fills in defaults before the object is validated and stored.
    fn default(&self, _obj: &mut Value) {}

    /// The `openAPIV3Schema` of `apiVersion` + `kind`, if one is known.
    fn schema(&self, _api_version: &str, _kind: &str) -> Option<&Value> {
        None
    }
}

impl<F> Admission for F
where
    F: Fn(&Value) -> Result<(), Vec<String>> + Send + Sync,
{
    fn validate(&self, new: &Value, _old: Option<&Value>) -> Result<(), Vec<FieldError>> {
        self(new).map_err(|errs| errs.into_iter().map(FieldError::from_message).collect())
    }
}

/// The schema, defaults and validation of every write (see `Admission`).
pub type Validator = Arc<dyn Admission>;

/// One problem of an invalid object: the field (`spec.x[0].y`, empty when unknown) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A message as `CrdSchemas::validate` words it (`at /spec/x: …`), or any other text.
    pub fn from_message(msg: String) -> Self {
        if let Some(rest) = msg.strip_prefix("at ")
            && let Some((ptr, text)) = rest.split_once(": ")
            && ptr.starts_with('/')
        {
            let field = ptr
                .trim_start_matches('/')
                .split('/')
                .filter(|s| !s.is_empty())
                .map(|s| s.replace("~1", "/").replace("~0", "~"))
                .fold(String::new(), |acc, seg| {
                    if seg.parse::<usize>().is_ok() {
                        format!("{acc}[{seg}]")
                    } else if acc.is_empty() {
                        seg
                    } else {
                        format!("{acc}.{seg}")
                    }
                });
            return FieldError::new(field, text);
        }
        FieldError::new("", msg)
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

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
    /// 422 `Invalid` with the Status `details` (kind, name, one cause per field).
    #[error("{message}")]
    InvalidObject { message: String, details: Value },
    /// 409 `Conflict` of server-side apply, with one cause per field and manager.
    #[error("{message}")]
    FieldConflict { message: String, details: Value },
}

impl StoreError {
    pub fn code(&self) -> u16 {
        match self {
            StoreError::NotFound(_) => 404,
            StoreError::AlreadyExists(_)
            | StoreError::Conflict(_)
            | StoreError::FieldConflict { .. } => 409,
            StoreError::Invalid(_) | StoreError::InvalidObject { .. } => 422,
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
            StoreError::Conflict(_) | StoreError::FieldConflict { .. } => "Conflict",
            StoreError::Invalid(_) | StoreError::InvalidObject { .. } => "Invalid",
            StoreError::BadRequest(_) => "BadRequest",
            StoreError::Expired(_) => "Expired",
            StoreError::MethodNotAllowed(_) => "MethodNotAllowed",
            StoreError::UnsupportedMediaType(_) => "UnsupportedMediaType",
        }
    }

    /// The Kubernetes `Status` object kube parses into `Error::Api`.
    pub fn status_body(&self) -> Value {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if let StoreError::InvalidObject { details, .. }
        | StoreError::FieldConflict { details, .. } = self
        {
            body["details"] = details.clone();
        }
        body
    }
}

pub(super) fn not_found(res: &Resource, name: &str) -> StoreError {
    StoreError::NotFound(format!("{} \"{name}\" not found", res.qualified()))
}

/// How a write changes an existing object.
#[derive(Debug, Clone)]
pub enum Patch {
    /// Server-side apply: create when absent, else merge by field ownership (`managedFields`).
    Apply(Value),
    /// RFC 7386 JSON merge patch (also used for strategic merge patch).
    Merge(Value),
    /// RFC 6902 JSON patch.
    Json(json_patch::Patch),
}

/// Who writes: the field manager recorded in `managedFields`, and for apply whether conflicts
/// with other managers are overridden (`force=true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldManager {
    pub name: String,
    pub force: bool,
}

impl FieldManager {
    pub fn new(name: impl Into<String>, force: bool) -> Self {
        FieldManager {
            name: name.into(),
            force,
        }
    }
}

impl Default for FieldManager {
    /// Writes through the store's Rust API (the simulated controllers, test seeding).
    fn default() -> Self {
        FieldManager::new("simkube", true)
    }
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
