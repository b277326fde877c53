//! A cluster's Kubernetes version: the `kube_tag` label or the image's `kube_version` property,
//! which must agree, normalised to `vMAJOR.MINOR.PATCH[-suffix]`.

use super::labels::Labels;

/// What a version must look like, for messages.
pub const VERSION_HINT: &str = "must be a version like v1.33.5";

/// Why no Kubernetes version could be settled on. The messages are the API's (a template create
/// returns them as 400s, a render as values errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeVersionError {
    /// The `kube_tag` label is not a version.
    #[error("label kube_tag={value:?} is invalid: {VERSION_HINT}")]
    BadTag { value: String },
    /// `kube_tag` and the image's `kube_version` differ.
    #[error("{}", mismatch_message(label, image))]
    Mismatch { label: String, image: String },
    /// The image's property or the configured default is not a version (the message says which).
    #[error("{0}")]
    Invalid(String),
}

/// The message of a `kube_tag` that disagrees with the image's `kube_version`.
pub fn mismatch_message(label: &str, image: &str) -> String {
    format!(
        "the kube_tag label ({label}) does not match the image's kube_version property ({image}); \
         drop kube_tag or use an image of that version"
    )
}

/// A Kubernetes version normalised to `vMAJOR.MINOR.PATCH[-suffix]`.
pub fn normalise_version(s: &str) -> Option<String> {
    let s = s.trim();
    let bare = s.strip_prefix(['v', 'V']).unwrap_or(s);
    let (core, suffix) = match bare.find(['-', '+']) {
        Some(i) => (&bare[..i], &bare[i..]),
        None => (bare, ""),
    };
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let suffix_ok = suffix.len() != 1
        && suffix
            .bytes()
            .skip(1)
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'));
    (numeric && suffix_ok).then(|| format!("v{bare}"))
}

/// The cluster's Kubernetes version: the `kube_tag` label or the image's `kube_version`
/// property (whichever is given; both must agree after normalisation), else `default`.
/// Always `v`-prefixed. An empty label or property counts as absent.
pub fn kube_version(
    labels: &Labels,
    resolved_kube_version: Option<&str>,
    default: &str,
) -> Result<String, KubeVersionError> {
    let tag = labels
        .get("kube_tag")
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(|v| normalise_version(v).ok_or_else(|| KubeVersionError::BadTag { value: v.into() }))
        .transpose()?;
    let image = resolved_kube_version
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| {
            normalise_version(v).ok_or_else(|| {
                KubeVersionError::Invalid(format!(
                    "the image's kube_version property {v:?} is not a version like v1.33.5"
                ))
            })
        })
        .transpose()?;
    match (tag, image) {
        (Some(t), Some(i)) if t != i => Err(KubeVersionError::Mismatch { label: t, image: i }),
        (Some(v), _) | (None, Some(v)) => Ok(v),
        (None, None) => normalise_version(default).ok_or_else(|| {
            KubeVersionError::Invalid(format!(
                "[capi] default_kube_version {default:?} is not a version like v1.33.5"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Labels with only `kube_tag` (when given).
    fn tag(v: Option<&str>) -> Labels {
        v.map(|v| ("kube_tag".to_owned(), v.to_owned()))
            .into_iter()
            .collect()
    }

    #[test]
    fn kube_version_takes_the_label_or_the_image_and_normalises() {
        assert_eq!(
            kube_version(&tag(Some("1.33.2")), None, "v1.30.0").unwrap(),
            "v1.33.2"
        );
        assert_eq!(
            kube_version(&tag(None), Some("v1.32.1"), "v1.30.0").unwrap(),
            "v1.32.1"
        );
        assert_eq!(
            kube_version(&tag(Some("v1.32.1")), Some("1.32.1"), "v1.30.0").unwrap(),
            "v1.32.1"
        );
        assert_eq!(
            kube_version(&tag(Some("")), None, "1.30.0").unwrap(),
            "v1.30.0"
        );
    }

    #[test]
    fn kube_version_mismatch_names_both() {
        let err = kube_version(&tag(Some("v1.33.0")), Some("v1.32.1"), "v1").unwrap_err();
        assert_eq!(
            err,
            KubeVersionError::Mismatch {
                label: "v1.33.0".into(),
                image: "v1.32.1".into()
            }
        );
        assert!(err.to_string().contains("kube_tag"));
        let err = kube_version(&tag(Some(" latest ")), None, "v1.30.0").unwrap_err();
        assert_eq!(
            err,
            KubeVersionError::BadTag {
                value: "latest".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "label kube_tag=\"latest\" is invalid: must be a version like v1.33.5"
        );
    }

    #[test]
    fn versions_accept_suffixes_but_not_junk() {
        assert_eq!(
            normalise_version("v1.21.1-rancher1").as_deref(),
            Some("v1.21.1-rancher1")
        );
        assert_eq!(normalise_version("1.2"), None);
        assert_eq!(normalise_version("v1.2.x"), None);
        assert_eq!(normalise_version("v1.2.3-"), None);
        assert_eq!(normalise_version("v1.2.3-a b"), None);
    }
}
