//! The Cluster API driver: renders clusters into CAPI/CAPO objects (`values` → `render`),
//! applies them to the management cluster (`apply`), and turns what CAPI reports back into
//! Magnum statuses (`watch` → `status`).

pub mod access;
pub mod addon_health;
pub mod addon_rollout;
pub mod adopt;
pub mod adopt_credentials;
pub mod adopt_nodegroups;
pub mod adopt_upgrade;
pub mod api_security;
pub mod api_vip;
pub mod apply;
pub mod ca;
pub mod cleanup;
pub mod credentials;
pub mod delete;
pub mod driver;
pub mod encryption;
pub mod fleet;
pub mod forget;
pub mod health;
pub mod pki;
pub mod private;
pub mod reach;
pub mod reload;
pub mod render;
pub mod status;
pub mod upgrade;
pub mod values;
pub mod watch;
pub mod workload;

pub use crate::k8s::labels::{LABEL_CAPI_CLUSTER_NAME, LABEL_HELM_CHART_PROXY};
pub use crate::k8s::secret::secret_data;

/// `<cluster>-cloud-credentials`: the Secret with the cluster's `clouds.yaml` (CAPO's identityRef).
pub fn credentials_secret_name(cluster: &str) -> String {
    format!("{cluster}-cloud-credentials")
}

/// The Secret the Magnum driver that made an adopted cluster (`at`) keeps its application
/// credential in: magnum-cluster-api's `<stack_id>-cloud-config`, magnum-capi-helm's
/// `<release>-cloud-credentials` (ours is named the same way).
pub fn driver_credentials_secret(at: &crate::domain::spec::ObjectsAt) -> String {
    match at.driver {
        crate::domain::imported::DriverFamily::ClusterApi => format!("{}-cloud-config", at.name),
        _ => credentials_secret_name(&at.name),
    }
}

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

/// `(apiVersion, kind)` of every kind the driver reads or writes: one place for the versions.
pub mod kinds {
    pub type Gvk = (&'static str, &'static str);
    pub const SECRET: Gvk = ("v1", "Secret");
    pub const CLUSTER: Gvk = ("cluster.x-k8s.io/v1beta2", "Cluster");
    pub const MACHINE_DEPLOYMENT: Gvk = ("cluster.x-k8s.io/v1beta2", "MachineDeployment");
    pub const MACHINE_SET: Gvk = ("cluster.x-k8s.io/v1beta2", "MachineSet");
    pub const MACHINE: Gvk = ("cluster.x-k8s.io/v1beta2", "Machine");
    pub const MACHINE_HEALTH_CHECK: Gvk = ("cluster.x-k8s.io/v1beta2", "MachineHealthCheck");
    pub const CONTROL_PLANE: Gvk = (
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
    );
    pub const KUBEADM_CONFIG_TEMPLATE: Gvk = (
        "bootstrap.cluster.x-k8s.io/v1beta2",
        "KubeadmConfigTemplate",
    );
    pub const OPENSTACK_CLUSTER: Gvk = (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackCluster",
    );
    pub const OPENSTACK_MACHINE_TEMPLATE: Gvk = (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachineTemplate",
    );
    /// CAPO's server of one OpenStackMachine (named after it), where Nova's refusal of the
    /// create lands (`InstanceReady` `False`, `instanceState: ERROR`): watched for failures.
    pub const OPENSTACK_SERVER: Gvk = (
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "OpenStackServer",
    );
    pub const HELM_CHART_PROXY: Gvk = ("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy");
    pub const CLUSTER_RESOURCE_SET: Gvk = ("addons.cluster.x-k8s.io/v1beta2", "ClusterResourceSet");
    /// CAAPH's per-cluster release of a HelmChartProxy: watched for add-on health.
    pub const HELM_RELEASE_PROXY: Gvk = ("addons.cluster.x-k8s.io/v1alpha1", "HelmReleaseProxy");
    /// The cluster autoscaler's objects (templates/autoscaler.yaml.hbs).
    pub const SERVICE_ACCOUNT: Gvk = ("v1", "ServiceAccount");
    pub const ROLE: Gvk = ("rbac.authorization.k8s.io/v1", "Role");
    pub const ROLE_BINDING: Gvk = ("rbac.authorization.k8s.io/v1", "RoleBinding");
    pub const DEPLOYMENT: Gvk = ("apps/v1", "Deployment");
    /// The k8s-keystone-auth manifests, a ClusterResourceSet resource (templates/addons.yaml.hbs).
    pub const CONFIG_MAP: Gvk = ("v1", "ConfigMap");
    /// A project's namespace (`templates/namespace.yaml.hbs`), applied before its objects.
    pub const NAMESPACE: Gvk = ("v1", "Namespace");
    /// Immutable machine templates, named by the hash of their spec.
    pub const TEMPLATES: [Gvk; 2] = [OPENSTACK_MACHINE_TEMPLATE, KUBEADM_CONFIG_TEMPLATE];

    /// Every kind above, once: what the service account's RBAC on the management cluster must
    /// cover (`deploy/kubernetes/clusterrole.yaml`, checked against this list by
    /// `tests/deploy.rs`).
    pub const ALL: [Gvk; 20] = [
        NAMESPACE,
        SECRET,
        CLUSTER,
        MACHINE_DEPLOYMENT,
        MACHINE_SET,
        MACHINE,
        MACHINE_HEALTH_CHECK,
        CONTROL_PLANE,
        KUBEADM_CONFIG_TEMPLATE,
        OPENSTACK_CLUSTER,
        OPENSTACK_MACHINE_TEMPLATE,
        OPENSTACK_SERVER,
        HELM_CHART_PROXY,
        CLUSTER_RESOURCE_SET,
        HELM_RELEASE_PROXY,
        SERVICE_ACCOUNT,
        ROLE,
        ROLE_BINDING,
        DEPLOYMENT,
        CONFIG_MAP,
    ];
    /// The autoscaler's kinds, in delete order (pruned when no nodegroup autoscales). `Role`
    /// is rendered no more (its RoleBinding grants `[capi] autoscaler_cluster_role`): listed so
    /// that the Role an earlier version made is pruned and deleted with the cluster.
    pub const AUTOSCALER: [Gvk; 4] = [DEPLOYMENT, ROLE_BINDING, ROLE, SERVICE_ACCOUNT];
}

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
