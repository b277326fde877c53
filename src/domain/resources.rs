//! The OpenStack resources a template or cluster resolved to when it was validated (ids, not the
//! names clients may have used), stored with the row for the driver to build machines from.

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
}
