//! Pure rules of the Magnum API: statuses, request schemas, label semantics, JSON-PATCH,
//! policy defaults, generated names. No I/O here.

pub mod adopted_upgrade;
pub mod certificates;
pub mod driver_labels;
pub mod error;
pub mod fields;
pub mod imported;
pub mod kube_support;
pub mod kube_version;
pub mod labels;
pub mod listing;
pub mod names;
pub mod new_cluster;
pub mod nodegroup_rules;
pub mod operation;
pub mod os_distro;
pub mod patch;
pub mod placement;
pub mod policy;
pub mod policy_lang;
pub mod pyliteral;
pub mod resources;
pub mod schemas;
pub mod spec;
pub mod status;
pub mod upgrade;
pub mod version;
