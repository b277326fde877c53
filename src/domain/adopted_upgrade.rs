//! What an upgrade of a cluster adopted from Magnum's Cluster API drivers needs of its new
//! template (pure; docs/moving-from-magnum.md): a Kubernetes version and a resolved Glance
//! image id (both drivers write the id, not a name), and an image the bootstrap the driver
//! already made can boot (an upgrade keeps that bootstrap: the KubeadmConfigTemplates, the
//! ClusterClass, cloud-init or Ignition). Versions themselves follow `domain::upgrade`.

use super::error::DomainError;
use super::imported::{DriverFamily, family_of};
use super::os_distro::OsDistro;

/// The new template as an adopted cluster's upgrade reads it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// `kube_tag`, else the image's `kube_version`.
    pub version: Option<&'a str>,
    /// The Glance id the template's image resolved to (without an image service to ask, the
    /// image as the template names it).
    pub image_id: Option<&'a str>,
    /// The image's `os_distro`.
    pub os_distro: Option<&'a str>,
}

/// The distro a Magnum driver entry point boots, when its name says (magnum-cluster-api has
/// one entry point per distro; magnum-capi-helm's one boots Ubuntu or Flatcar).
fn distro_of_entry_point(source_driver: &str) -> Option<OsDistro> {
    match source_driver {
        "k8s_cluster_api_ubuntu" | "k8s_cluster_api_ubuntu_focal" => Some(OsDistro::Ubuntu),
        "k8s_cluster_api_debian" => Some(OsDistro::Debian),
        "k8s_cluster_api_rockylinux" => Some(OsDistro::Rocky),
        "k8s_cluster_api_flatcar" => Some(OsDistro::Flatcar),
        _ => None,
    }
}

fn invalid(msg: String) -> DomainError {
    DomainError::BadRequest(format!("Cluster Template is not valid for upgrade: {msg}"))
}

/// Checks the new template of an upgrade of cluster `cluster`, adopted from `source_driver`,
/// whose current template's image has `current_os` (`None`: not known here, e.g. a template
/// imported from Magnum, which never resolved it).
pub fn check(
    cluster: &str,
    source_driver: &str,
    current_os: Option<&str>,
    to: Target<'_>,
) -> Result<(), DomainError> {
    if !matches!(
        family_of(source_driver),
        DriverFamily::CapiHelm | DriverFamily::ClusterApi
    ) {
        return Err(invalid(format!(
            "cluster {cluster} was made by {source_driver}, which has no Cluster API objects to upgrade."
        )));
    }
    if to.version.is_none() {
        return Err(invalid(
            "it names no Kubernetes version (no kube_tag label, no kube_version on its image); \
             the driver's objects need one."
                .into(),
        ));
    }
    if to.image_id.is_none() {
        return Err(invalid(
            "it names no image; the driver's objects name the image every machine boots.".into(),
        ));
    }
    let new = OsDistro::from_image(to.os_distro).map_err(|e| invalid(e.to_string()))?;
    let current = match current_os {
        Some(os) => OsDistro::from_image(Some(os)).ok(),
        None => distro_of_entry_point(source_driver),
    };
    // magnum-capi-helm's one entry point boots both: without a known image, only the family
    // (cloud-init or Ignition) is checked, by the worker against the live bootstrap.
    let refused = match current {
        Some(cur) => cur != new,
        None => false,
    };
    if refused {
        let cur = current.map_or("", OsDistro::as_str);
        return Err(invalid(format!(
            "its image is {} and cluster {cluster} boots {cur}: an upgrade keeps the bootstrap \
             configuration {source_driver} made for {cur}, which cannot boot another distribution. \
             Use a {cur} image.",
            new.as_str()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to<'a>(os: Option<&'a str>) -> Target<'a> {
        Target {
            version: Some("v1.32.1"),
            image_id: Some("img"),
            os_distro: os,
        }
    }

    #[test]
    fn an_adopted_upgrade_keeps_the_distribution_the_driver_boots() {
        assert!(check("c", "k8s_cluster_api_ubuntu", None, to(Some("ubuntu"))).is_ok());
        let e = check("c", "k8s_cluster_api_ubuntu", None, to(Some("flatcar"))).unwrap_err();
        assert!(e.to_string().contains("boots ubuntu"), "{e}");
        assert!(
            check(
                "c",
                "k8s_capi_helm_v1",
                Some("flatcar"),
                to(Some("flatcar"))
            )
            .is_ok()
        );
        assert!(check("c", "k8s_capi_helm_v1", Some("flatcar"), to(Some("ubuntu"))).is_err());
        assert!(check("c", "k8s_capi_helm_v1", None, to(Some("ubuntu"))).is_ok());
        let e = check("c", "k8s_capi_helm_v1", None, to(Some("fedora-coreos"))).unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
    }

    #[test]
    fn an_adopted_upgrade_needs_a_version_and_a_resolved_image() {
        let mut t = to(Some("ubuntu"));
        t.version = None;
        assert!(check("c", "k8s_capi_helm_v1", None, t).is_err());
        let mut t = to(Some("ubuntu"));
        t.image_id = None;
        let e = check("c", "k8s_capi_helm_v1", None, t).unwrap_err();
        assert!(e.to_string().contains("names no image"), "{e}");
        assert!(check("c", "k8s_fedora_coreos_v1", None, to(None)).is_err());
    }
}
