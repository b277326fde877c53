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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_version_errors_keep_their_variant_and_message() {
        let cases = [
            KubeVersionError::BadTag {
                value: "latest".into(),
            },
            KubeVersionError::Mismatch {
                label: "v1.33.0".into(),
                image: "v1.32.1".into(),
            },
            KubeVersionError::Invalid("the image's kube_version property".into()),
        ];
        for e in cases {
            let v = ValuesError::from(e.clone());
            assert_eq!(v.to_string(), e.to_string());
            let same_variant = matches!(
                (&e, &v),
                (KubeVersionError::BadTag { .. }, ValuesError::BadLabel { label, .. }) if label == "kube_tag"
            ) || matches!(
                (&e, &v),
                (
                    KubeVersionError::Mismatch { .. },
                    ValuesError::KubeVersionMismatch { .. }
                )
            ) || matches!(
                (&e, &v),
                (KubeVersionError::Invalid(_), ValuesError::Invalid(_))
            );
            assert!(same_variant, "{e:?} became {v:?}");
        }
    }
}
