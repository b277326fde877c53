//! Upgrade rules (pure): a cluster moves to a template of the same COE whose Kubernetes version
//! is not lower and does not skip a minor release; an equal version is an image-only upgrade.

use super::error::DomainError;

/// `v1.33.5` / `1.33` → (1, 33, 5); `None` when it is not a version.
pub fn parse(v: &str) -> Option<(u64, u64, u64)> {
    let v = v.trim().trim_start_matches('v');
    let core = v.split(['-', '+']).next()?;
    let mut it = core.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let patch = it.next().map(|p| p.parse().ok()).unwrap_or(Some(0))?;
    Some((major, minor, patch))
}

fn invalid(msg: String) -> DomainError {
    DomainError::BadRequest(format!("Cluster Template is not valid for upgrade: {msg}"))
}

/// Checks an upgrade from (`from_coe`, `from_version`) to (`to_coe`, `to_version`).
pub fn check(
    from_coe: &str,
    from_version: Option<&str>,
    to_coe: &str,
    to_version: Option<&str>,
) -> Result<(), DomainError> {
    if from_coe != to_coe {
        return Err(invalid(format!(
            "the COE must stay {from_coe}, the template is for {to_coe}."
        )));
    }
    let (Some(from), Some(to)) = (from_version, to_version) else {
        return Ok(()); // nothing known to compare (no kube_tag, no image kube_version)
    };
    let (Some(f), Some(t)) = (parse(from), parse(to)) else {
        return Err(invalid(format!(
            "cannot compare Kubernetes versions {from} and {to}."
        )));
    };
    if t < f {
        return Err(invalid(format!(
            "Kubernetes {to} is older than the cluster's {from}; downgrades are not supported."
        )));
    }
    if t.0 != f.0 || t.1 > f.1 + 1 {
        return Err(invalid(format!(
            "Kubernetes {to} skips a minor release after {from}; upgrade one minor version at a time."
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_go_up_one_minor_at_a_time() {
        assert_eq!(parse("v1.33.5"), Some((1, 33, 5)));
        assert_eq!(parse("1.34"), Some((1, 34, 0)));
        assert_eq!(parse("v1.32.1-rc.1"), Some((1, 32, 1)));
        assert!(check("kubernetes", Some("v1.32.4"), "kubernetes", Some("v1.33.1")).is_ok());
        assert!(check("kubernetes", Some("v1.33.1"), "kubernetes", Some("v1.33.1")).is_ok());
        assert!(check("kubernetes", Some("v1.33.1"), "kubernetes", Some("v1.33.4")).is_ok());
        assert!(check("kubernetes", None, "kubernetes", Some("v1.33.4")).is_ok());
        let e = check("kubernetes", Some("v1.33.1"), "kubernetes", Some("v1.32.9")).unwrap_err();
        assert!(e.to_string().contains("older"));
        let e = check("kubernetes", Some("v1.31.1"), "kubernetes", Some("v1.33.0")).unwrap_err();
        assert!(e.to_string().contains("skips a minor"));
        assert!(check("kubernetes", Some("v1.31.1"), "swarm", Some("v1.31.1")).is_err());
        assert!(check("kubernetes", Some("latest"), "kubernetes", Some("v1.31.1")).is_err());
    }
}
