//! The Cluster API driver: renders clusters into CAPI/CAPO objects (`values` → `render`),
//! applies them to the management cluster (`apply`), and turns what CAPI reports back into
//! Magnum statuses (`watch` → `status`).

pub mod apply;

pub mod driver;
pub mod pki;
pub mod render;
pub mod schema;
pub mod status;
pub mod values;
pub mod watch;

/// Label on every object we create: the Magnum cluster's uuid.
pub const LABEL_CLUSTER_UUID: &str = "magnum.openstack.org/cluster-uuid";
/// Label on every object we create: the cluster's project.
pub const LABEL_PROJECT_ID: &str = "magnum.openstack.org/project-id";
/// Label on every object we create: the cluster's owner (the user whose credential it runs on).
pub const LABEL_USER_ID: &str = "magnum.openstack.org/user-id";
/// Label on the control plane, MachineDeployments and (through their machine templates) Machines:
/// the Magnum nodegroup they implement.
pub const LABEL_NODEGROUP_UUID: &str = "magnum.openstack.org/nodegroup-uuid";
/// Label on the same objects: `master` or `worker`.
pub const LABEL_ROLE: &str = "magnum.openstack.org/role";

/// The CAPI cluster name of a Magnum cluster (stored as `stack_id`): derived from the uuid, so it
/// never collides and never changes when the cluster is renamed. Starts with a letter (DNS-1035).
pub fn capi_name(cluster_uuid: uuid::Uuid) -> String {
    crate::domain::names::capi_cluster_name(cluster_uuid)
}

/// The namespace of a project's clusters: `<prefix>-<project id, [a-z0-9-] only>`.
pub fn namespace(prefix: &str, project_id: &str) -> String {
    let id: String = project_id
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    format!("{prefix}-{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_dns_safe() {
        let u = uuid::Uuid::parse_str("5d12f6fd-a196-4bf0-ae4c-1f639a523a52").unwrap();
        assert_eq!(capi_name(u), "c5d12f6fda1964bf0ae4c1f639a523a52");
        assert_eq!(namespace("magnum", "AB_cd-12"), "magnum-abcd-12");
    }
}
