//! The OpenStack resources a template or cluster resolved to when it was validated (ids, not the
//! names clients may have used), stored with the row for the driver to build machines from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Ids found in Glance, Nova and Neutron; absent fields were not given or not looked up
/// (`serve --dev` without Keystone looks nothing up).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resolved {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The image's `os_distro` property.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os_distro: Option<String>,
    /// The image's `kube_version` property, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flavor_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master_flavor_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_network_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed_network_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed_subnet_id: Option<String>,
    /// Those of `flavor_id` and `master_flavor_id` whose Nova extra specs ask for a GPU
    /// ([`flavor_has_gpu`]); empty when none does or the extra specs could not be read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_flavor_ids: Vec<String>,
    /// What a server of each of `flavor_id` and `master_flavor_id` gets, by flavor id (the
    /// cluster autoscaler's capacity hints for a nodegroup scaled to zero).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub flavor_sizes: BTreeMap<String, FlavorSize>,
    /// Whether the creator's catalog has a load balancer service (Octavia); `None` where no
    /// catalog was read (development mode without Keystone, rows of older releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_service: Option<bool>,
}

/// A Nova flavor's size, as Nova lists it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlavorSize {
    pub vcpus: u32,
    /// Memory in MiB (Nova's `ram`).
    pub ram_mib: u64,
    /// Root disk in GiB (Nova's `disk`; 0: the server boots from a volume).
    pub disk_gib: u64,
}

/// Whether a flavor's extra specs give its servers a GPU: a vGPU or physical-GPU resource
/// (`resources:VGPU`, `resources:PGPU`, any `resources:*GPU*` custom class) greater than zero,
/// a required `trait:CUSTOM_*GPU*` trait, or a PCI passthrough alias naming a GPU
/// (`pci_passthrough:alias` entries `name:count` whose name contains `gpu`, `nvidia`, `tesla`).
pub fn flavor_has_gpu<'a>(extra_specs: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    extra_specs.into_iter().any(|(key, value)| {
        let (key, value) = (key.to_ascii_uppercase(), value.trim());
        if let Some(class) = key.strip_prefix("RESOURCES:") {
            return class.contains("GPU") && value.parse::<u32>().is_ok_and(|n| n > 0);
        }
        if let Some(t) = key.strip_prefix("TRAIT:") {
            return t.starts_with("CUSTOM_") && t.contains("GPU") && value == "required";
        }
        if key == "PCI_PASSTHROUGH:ALIAS" {
            return value.split(',').any(|alias| {
                let name = alias.split(':').next().unwrap_or("").to_ascii_lowercase();
                ["gpu", "nvidia", "tesla"].iter().any(|w| name.contains(w))
            });
        }
        false
    })
}

#[cfg(test)]
mod gpu_tests {
    use super::flavor_has_gpu;

    #[test]
    fn gpu_extra_specs() {
        for yes in [
            [("resources:VGPU", "1")],
            [("resources:PGPU", "2")],
            [("resources:CUSTOM_NVIDIA_A100_GPU", "1")],
            [("trait:CUSTOM_HAS_GPU", "required")],
            [("pci_passthrough:alias", "nvidia-a100:1")],
            [("pci_passthrough:alias", "nic:1,gpu-t4:2")],
        ] {
            assert!(flavor_has_gpu(yes), "{yes:?}");
        }
        for no in [
            [("resources:VGPU", "0")],
            [("resources:VCPU", "4")],
            [("trait:CUSTOM_HAS_GPU", "forbidden")],
            [("pci_passthrough:alias", "sriov-nic:1")],
            [("hw:cpu_policy", "dedicated")],
        ] {
            assert!(!flavor_has_gpu(no), "{no:?}");
        }
    }
}
