//! Why a cluster cannot be rendered ([`ValuesError`]), and the error of a malformed label.

use crate::domain::kube_version::{KubeVersionError, VERSION_HINT, mismatch_message};

/// Why a cluster cannot be rendered: bad input (400s), with the label or field named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesError {
    #[error("label {label}={value:?} is invalid: {reason}")]
    BadLabel {
        label: String,
        value: String,
        reason: String,
    },
    #[error("labels {first}={first_value:?} and {second}={second_value:?} disagree; set only one")]
    LabelConflict {
        first: String,
        first_value: String,
        second: String,
        second_value: String,
    },
    #[error("{}", mismatch_message(label, image))]
    KubeVersionMismatch { label: String, image: String },
    #[error("{0}")]
    Invalid(String),
}

pub(super) fn bad(label: &str, value: &str, reason: impl Into<String>) -> ValuesError {
    ValuesError::BadLabel {
        label: label.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

impl From<KubeVersionError> for ValuesError {
    fn from(e: KubeVersionError) -> Self {
        match e {
            KubeVersionError::BadTag { value } => bad("kube_tag", &value, VERSION_HINT),
            KubeVersionError::Mismatch { label, image } => {
                Self::KubeVersionMismatch { label, image }
            }
            KubeVersionError::Invalid(m) => Self::Invalid(m),
        }
    }
}
