//! The images the Cluster API driver boots, named by their Glance `os_distro` (Magnum's
//! `cluster_distro`), and the rule that refuses the others (Magnum's `enforce_driver_supported`
//! at template create, `enforce_cluster_type_supported` at cluster create).

/// An operating system whose images this service boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsDistro {
    /// cloud-init (image-builder's Ubuntu images); `ubuntu-focal` too (magnum-cluster-api's name).
    Ubuntu,
    /// cloud-init, apt like Ubuntu.
    Debian,
    /// cloud-init, dnf instead of apt (`rocky`, Glance's name, or magnum-cluster-api's `rockylinux`).
    Rocky,
    /// Ignition (CABPK `format: ignition`, Ignition spec 2.3 from a Container Linux Config).
    Flatcar,
}

/// The cluster types accepted (every `os_distro` this service boots), as Magnum's refusal lists
/// the loaded drivers' (sorted, `(server_type, os, coe)`).
pub const SUPPORTED: &str = "(vm, debian, kubernetes), (vm, flatcar, kubernetes), (vm, rocky, kubernetes), (vm, rockylinux, kubernetes), (vm, ubuntu, kubernetes), (vm, ubuntu-focal, kubernetes)";

/// An image whose `os_distro` this service does not boot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
/// Magnum 23's `ClusterTypeNotSupported`, word for word, with a hint for Fedora CoreOS after it.
#[error(
    "Cluster type (vm, {os_distro}, kubernetes) is not supported by any loaded cluster driver. \
     Loaded drivers support: {SUPPORTED}.{hint}"
)]
pub struct UnsupportedDistro {
    pub os_distro: String,
    hint: &'static str,
}

impl OsDistro {
    /// The distro of an image's `os_distro`; unset (a template made without an image service, in
    /// `serve --dev`) is Ubuntu, the images every example uses.
    pub fn from_image(os_distro: Option<&str>) -> Result<Self, UnsupportedDistro> {
        let Some(raw) = os_distro.map(str::trim).filter(|d| !d.is_empty()) else {
            return Ok(Self::Ubuntu);
        };
        match raw.to_ascii_lowercase().as_str() {
            "ubuntu" | "ubuntu-focal" => Ok(Self::Ubuntu),
            "debian" => Ok(Self::Debian),
            "rocky" | "rockylinux" => Ok(Self::Rocky),
            "flatcar" => Ok(Self::Flatcar),
            other => Err(UnsupportedDistro {
                os_distro: raw.to_owned(),
                // Ignition spec 3 is all Fedora CoreOS boots; CABPK writes spec 2.3.
                hint: if other.starts_with("fedora-coreos") || other == "fcos" {
                    " Fedora CoreOS boots only Ignition spec 3 configs, and Cluster API's kubeadm \
                     bootstrap writes spec 2.3: use a Flatcar image."
                } else {
                    ""
                },
            }),
        }
    }

    /// The name the renders and the README use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ubuntu => "ubuntu",
            Self::Debian => "debian",
            Self::Rocky => "rocky",
            Self::Flatcar => "flatcar",
        }
    }

    /// Whether the machines boot Ignition instead of cloud-init.
    pub fn ignition(self) -> bool {
        matches!(self, Self::Flatcar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_names_and_the_refusal() {
        for (name, d) in [
            (None, OsDistro::Ubuntu),
            (Some(""), OsDistro::Ubuntu),
            (Some("ubuntu"), OsDistro::Ubuntu),
            (Some("Ubuntu-Focal"), OsDistro::Ubuntu),
            (Some("debian"), OsDistro::Debian),
            (Some("rocky"), OsDistro::Rocky),
            (Some("rockylinux"), OsDistro::Rocky),
            (Some("flatcar"), OsDistro::Flatcar),
        ] {
            assert_eq!(OsDistro::from_image(name), Ok(d), "{name:?}");
        }
        let e = OsDistro::from_image(Some("fedora-coreos"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "Cluster type (vm, fedora-coreos, kubernetes) is not supported by any loaded \
                 cluster driver. Loaded drivers support: (vm, debian, kubernetes), "
            ),
            "{e}"
        );
        assert!(
            e.contains(SUPPORTED) && e.contains("Ignition spec 3"),
            "{e}"
        );
        let e = OsDistro::from_image(Some("windows"))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with(&format!("{SUPPORTED}.")), "{e}");
    }
}
