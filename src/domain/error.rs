//! The domain's error type: a Magnum exception class reduced to its HTTP meaning and message.
//!
//! Messages are Magnum's, word for word; the API layer turns them into Magnum's error body.

/// A rule of the Magnum API was broken. Each variant is one HTTP status class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// 400: invalid input or an operation the current state does not support.
    #[error("{0}")]
    BadRequest(String),
    /// 403: not allowed (policy, publish flags, quota).
    #[error("{0}")]
    Forbidden(String),
    /// 404: the named resource does not exist or is not visible.
    #[error("{0}")]
    NotFound(String),
    /// 409: ambiguous name, duplicate, or a conflicting state.
    #[error("{0}")]
    Conflict(String),
}

pub type DomainResult<T> = Result<T, DomainError>;

impl DomainError {
    pub fn message(&self) -> &str {
        match self {
            Self::BadRequest(m) | Self::Forbidden(m) | Self::NotFound(m) | Self::Conflict(m) => m,
        }
    }

    /// WSME's message for a field that fails validation.
    pub fn invalid_field(field: &str, value: &str, why: &str) -> Self {
        Self::BadRequest(format!(
            "Invalid input for field/attribute {field}. Value: '{value}'. {why}"
        ))
    }

    pub fn cluster_not_found(ident: &str) -> Self {
        Self::NotFound(format!("Cluster {ident} could not be found."))
    }

    pub fn template_not_found(ident: &str) -> Self {
        Self::NotFound(format!("ClusterTemplate {ident} could not be found."))
    }

    pub fn nodegroup_not_found(ident: &str) -> Self {
        Self::NotFound(format!("Nodegroup {ident} could not be found."))
    }

    pub fn quota_not_found(project_id: &str, resource: &str) -> Self {
        Self::NotFound(format!(
            "Quota could not be found: project_id {project_id} resource {resource}."
        ))
    }

    /// Name lookup matched more than one row (`kind` as Magnum names it, e.g. `clusters`).
    pub fn ambiguous_name(plural: &str, singular: &str) -> Self {
        Self::Conflict(format!(
            "Multiple {plural} exist with same name. Please use the {singular} uuid instead."
        ))
    }

    pub fn policy(rule: &str) -> Self {
        Self::Forbidden(format!("Policy doesn't allow {rule} to be performed."))
    }

    pub fn not_authorized() -> Self {
        Self::Forbidden("Not authorized.".into())
    }

    pub fn template_referenced(ident: &str) -> Self {
        Self::BadRequest(format!(
            "ClusterTemplate {ident} is referenced by one or multiple clusters."
        ))
    }
}
