//! Upgrade rules (pure): a cluster moves to a template of the same COE whose Kubernetes version
//! is not lower and does not skip a minor release (an equal version is an image-only upgrade);
//! its kubelets stay within the skew Kubernetes allows, the new image is the cluster's distro at
//! the template's version, and the cloud's quota has room for the machines a rollout adds. A
//! failed upgrade may be rolled back to the template it left, unless the control plane already
//! runs the newer minor.

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

/// The minor of a version (`v1.33.5` → (1, 33)).
fn minor(v: &str) -> Option<(u64, u64)> {
    parse(v).map(|(a, b, _)| (a, b))
}

/// The rollback of a failed upgrade to the template it left (`to_version`): allowed whatever the
/// versions, unless the control plane (`control_plane`, its lowest machine's version) already
/// runs a newer minor — kubeadm cannot take a control plane back a minor.
pub fn check_rollback(
    control_plane: Option<&str>,
    to_version: Option<&str>,
) -> Result<(), DomainError> {
    let (Some(cp), Some(to)) = (control_plane, to_version) else {
        return Ok(());
    };
    match (minor(cp), minor(to)) {
        (Some(c), Some(t)) if c > t => Err(invalid(format!(
            "the control plane already runs {cp}, a newer minor than {to}, and cannot be rolled \
             back; retry the upgrade instead."
        ))),
        _ => Ok(()),
    }
}

/// Kubernetes' version skew policy: every kubelet (`running`: what runs it, its version) at most
/// `max_skew` minors behind the control plane's new version `to`, which the control plane
/// reaches before the nodegroups roll.
pub fn check_kubelet_skew(
    to: Option<&str>,
    running: &[(String, String)],
    max_skew: u64,
) -> Result<(), DomainError> {
    let Some(t) = to.and_then(minor) else {
        return Ok(());
    };
    let behind = running
        .iter()
        .find(|(_, v)| minor(v).is_some_and(|k| k.0 != t.0 || t.1.saturating_sub(k.1) > max_skew));
    match behind {
        Some((what, v)) => Err(invalid(format!(
            "{what} runs kubelet {v}, more than {max_skew} minor versions behind {to}, which \
             Kubernetes' version skew policy does not allow; upgrade it to a newer version first.",
            to = to.unwrap_or_default()
        ))),
        None => Ok(()),
    }
}

/// The new template's image (`image`, as Glance has it now: its `os_distro` and `kube_version`
/// properties) boots the cluster's distro (`distro`) at the template's version (`kube_tag`).
pub fn check_image(
    image: &str,
    image_distro: Option<&str>,
    image_kube_version: Option<&str>,
    distro: Option<&str>,
    kube_tag: Option<&str>,
) -> Result<(), DomainError> {
    if let (Some(have), Some(want)) = (image_distro, distro)
        && !have.eq_ignore_ascii_case(want)
    {
        return Err(invalid(format!(
            "image {image} is os_distro {have}, the cluster runs {want}."
        )));
    }
    if let (Some(have), Some(want)) = (image_kube_version, kube_tag)
        && parse(have).is_some()
        && parse(have) != parse(want)
    {
        return Err(invalid(format!(
            "image {image} has kube_version {have}, the template's kube_tag is {want}."
        )));
    }
    Ok(())
}

/// What some machines need of the compute quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    pub instances: u64,
    pub cores: u64,
    /// MiB.
    pub ram: u64,
}

/// Nova's absolute limits (`GET /limits`): a maximum below 0 is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_instances: i64,
    pub used_instances: i64,
    pub max_cores: i64,
    pub used_cores: i64,
    pub max_ram: i64,
    pub used_ram: i64,
}

/// The quota has room for the machines a rolling upgrade adds next to the running ones
/// (`surge`).
pub fn check_quota(limits: &Limits, surge: Need) -> Result<(), DomainError> {
    let short = |what: &str, max: i64, used: i64, need: u64| {
        let need = i64::try_from(need).unwrap_or(i64::MAX);
        (max >= 0 && used.saturating_add(need) > max)
            .then(|| format!("{what}: {need} more needed, {used} of {max} used"))
    };
    let missing: Vec<String> = [
        short(
            "instances",
            limits.max_instances,
            limits.used_instances,
            surge.instances,
        ),
        short("cores", limits.max_cores, limits.used_cores, surge.cores),
        short("RAM (MiB)", limits.max_ram, limits.used_ram, surge.ram),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(invalid(format!(
        "the compute quota has no room for the {} machine(s) the rolling upgrade adds ({}).",
        surge.instances,
        missing.join("; ")
    )))
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

    #[test]
    fn a_rollback_is_refused_once_the_control_plane_runs_the_newer_minor() {
        assert!(check_rollback(Some("v1.33.5"), Some("v1.33.5")).is_ok());
        assert!(check_rollback(Some("v1.33.5"), Some("v1.33.1")).is_ok());
        assert!(check_rollback(None, Some("v1.33.1")).is_ok());
        let e = check_rollback(Some("v1.34.1"), Some("v1.33.5")).unwrap_err();
        assert!(e.to_string().contains("retry the upgrade"), "{e}");
    }

    #[test]
    fn kubelets_stay_within_the_skew() {
        let running = |v: &str| vec![("nodegroup default-worker".to_string(), v.to_string())];
        assert!(check_kubelet_skew(Some("v1.34.0"), &running("v1.31.2"), 3).is_ok());
        let e = check_kubelet_skew(Some("v1.34.0"), &running("v1.30.2"), 3).unwrap_err();
        assert!(
            e.to_string()
                .contains("default-worker runs kubelet v1.30.2"),
            "{e}"
        );
        assert!(check_kubelet_skew(Some("v1.34.0"), &running("v1.31.2"), 2).is_err());
        assert!(check_kubelet_skew(None, &running("v1.20.0"), 3).is_ok());
    }

    #[test]
    fn the_image_must_be_the_clusters_distro_at_the_templates_version() {
        assert!(
            check_image(
                "i",
                Some("ubuntu"),
                Some("v1.34.1"),
                Some("ubuntu"),
                Some("v1.34.1")
            )
            .is_ok()
        );
        assert!(check_image("i", Some("ubuntu"), None, Some("ubuntu"), Some("v1.34.1")).is_ok());
        let e = check_image("i", Some("flatcar"), None, Some("ubuntu"), None).unwrap_err();
        assert!(e.to_string().contains("os_distro flatcar"), "{e}");
        let e = check_image(
            "i",
            Some("ubuntu"),
            Some("v1.33.5"),
            Some("ubuntu"),
            Some("v1.34.1"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("kube_version v1.33.5"), "{e}");
    }

    #[test]
    fn the_quota_must_have_room_for_the_surge() {
        let limits = Limits {
            max_instances: 10,
            used_instances: 8,
            max_cores: -1,
            used_cores: 100,
            max_ram: 51200,
            used_ram: 0,
        };
        let two = Need {
            instances: 2,
            cores: 4,
            ram: 8192,
        };
        assert!(check_quota(&limits, two).is_ok());
        let three = Need {
            instances: 3,
            ..two
        };
        let e = check_quota(&limits, three).unwrap_err();
        assert!(
            e.to_string()
                .contains("instances: 3 more needed, 8 of 10 used"),
            "{e}"
        );
    }
}
