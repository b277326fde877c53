//! The values document: everything the templates need to render one Magnum cluster, built by a
//! pure function from the template, cluster and nodegroup rows (+ operator settings, and the
//! credential and CAs when they are to be written). The equivalent of the azimuth
//! `openstack-cluster` chart values; label semantics (both drivers' dialects) live here.
//!
//! Labels honoured (cluster labels, which Magnum already merged from the template; `NG`: a
//! nodegroup's own labels win). Aliases separated by `|` must agree when both are set; empty
//! values count as unset; a malformed value is a [`ValuesError::BadLabel`] naming the label.
//!
//! | label | effect |
//! |---|---|
//! | `kube_tag` | Kubernetes version (must match the image's `kube_version` when both exist) |
//! | `availability_zone` (NG) | MachineDeployment failure domain; control-plane AZ fallback |
//! | `control_plane_availability_zones` | comma list of control-plane AZs |
//! | `boot_volume_size`, `boot_volume_type`, `boot_volume_availability_zone` (NG) | root volume |
//! | `etcd_blockdevice_size`\|`etcd_volume_size`, `etcd_blockdevice_type` (volume/local), `etcd_blockdevice_volume_type`\|`etcd_volume_type`, `etcd_blockdevice_volume_az` | etcd disk |
//! | `master_lb_floating_ip_enabled` | floating IP on the API (default true) |
//! | `api_master_lb_allowed_cidrs`\|`master_lb_allowed_cidrs` | API load balancer source CIDRs |
//! | `octavia_provider`, `octavia_lb_algorithm`, `octavia_lb_healthcheck` | API LB and CCM |
//! | `api_server_lb_flavor`, `api_server_lb_availability_zone`, `api_server_floating_ip` | API LB |
//! | `fixed_subnet_cidr` | subnet CAPO creates when no fixed network is given |
//! | `extra_network_names`\|`extra_network_name` (NG) | extra ports on workers (space/comma list) |
//! | `calico_ipv4pool`\|`cilium_ipv4pool`, `service_cluster_ip_range`, `dns_cluster_domain` | cluster networks |
//! | `container_infra_prefix` | kubeadm image repository |
//! | `api_server_cert_sans`, `admission_control_list`, `api_server_tls_cipher_suites`, `kubelet_tls_cipher_suites` | apiserver/kubelet flags |
//! | `oidc_issuer_url`, `oidc_client_id`, `oidc_username_claim`, `oidc_username_prefix`, `oidc_groups_claim`, `oidc_groups_prefix` | apiserver OIDC |
//! | `auto_healing_enabled` (NG) | MachineHealthChecks (default true) |
//! | `auto_scaling_enabled`, `min_node_count`, `max_node_count` (NG) | autoscaler bounds |
//! | `calico_tag`, `cilium_tag`, `cilium_hubble_ui_enabled` | CNI chart version / Hubble |
//! | `cinder_csi_enabled`, `csi_cinder_reclaim_policy`, `csi_cinder_volume_binding_mode`, `csi_cinder_fstype`, `csi_cinder_allow_volume_expansion`, `csi_cinder_availability_zone`, `csi_cinder_volume_type` | Cinder CSI and its StorageClass |

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use secrecy::SecretString;
use serde::Serialize;
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::pki::ClusterCas;
use super::schema::{
    dns1123_label_error, dns1123_subdomain_error, label_key_error, label_value_error,
};
use super::{
    LABEL_CLUSTER_UUID, LABEL_NODEGROUP_UUID, LABEL_PROJECT_ID, LABEL_ROLE, LABEL_USER_ID,
};
use crate::config::CapiConfig;
use crate::db::clusters::ClusterRow;
use crate::db::nodegroups::NodegroupRow;
use crate::db::templates::TemplateRow;
use crate::domain::fields::bool_from_string;
use crate::domain::labels::Labels;
use crate::domain::resources::Resolved;

pub use super::LABEL_CAPI_CLUSTER_NAME;
/// Autoscaler bounds on a MachineDeployment.
pub const ANNOTATION_AUTOSCALER_MIN: &str =
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
pub const ANNOTATION_AUTOSCALER_MAX: &str =
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
/// Longest CAPI cluster name: leaves room for `-control-plane-<hash8>` within 63 characters.
pub const MAX_CLUSTER_NAME: usize = 40;

/// Why a cluster cannot be rendered: bad input (400s), with the label or field named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesError {
    #[error("label {label}={value:?} is invalid: {reason}")]
    BadLabel {
        label: String,
        value: String,
        reason: String,
    },
    #[error("labels {first}={first_value:?} and {second}={second_value:?} disagree; set only one")]
    LabelConflict {
        first: String,
        first_value: String,
        second: String,
        second_value: String,
    },
    #[error(
        "the kube_tag label ({label}) does not match the image's kube_version property ({image}); \
         drop kube_tag or use an image of that version"
    )]
    KubeVersionMismatch { label: String, image: String },
    #[error("{0}")]
    Invalid(String),
}

fn bad(label: &str, value: &str, reason: impl Into<String>) -> ValuesError {
    ValuesError::BadLabel {
        label: label.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

/// The application credential a cluster's OpenStack clients (CAPO on the management cluster, the
/// CCM and CSI in the workload cluster) authenticate with.
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudCredentials {
    pub auth_url: String,
    pub region_name: Option<String>,
    /// Endpoint interface: `public` or `internal`.
    pub interface: String,
    pub application_credential_id: String,
    /// Never serialised: the renderer hands it to the templates itself, so a values document can
    /// be stored or logged.
    #[serde(skip)]
    pub application_credential_secret: SecretString,
    /// CA bundle (PEM) of the OpenStack endpoints.
    pub cacert: Option<String>,
    /// Verify the endpoints' TLS certificates.
    pub verify: bool,
}

impl std::fmt::Debug for CloudCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudCredentials")
            .field("auth_url", &self.auth_url)
            .field("region_name", &self.region_name)
            .field("interface", &self.interface)
            .field("application_credential_id", &self.application_credential_id)
            .field("application_credential_secret", &"<redacted>")
            .field("cacert", &self.cacert.as_ref().map(|_| "<pem>"))
            .field("verify", &self.verify)
            .finish()
    }
}

/// Everything needed to render one cluster.
pub struct Inputs<'a> {
    pub template: &'a TemplateRow,
    pub cluster: &'a ClusterRow,
    /// All nodegroups of the cluster that should exist (leave out those being deleted).
    pub nodegroups: &'a [NodegroupRow],
    pub config: &'a CapiConfig,
    /// Present when the cloud-credentials Secrets are to be written (create, rotation).
    pub credentials: Option<CloudCredentials>,
    /// Present when the CA Secrets are to be written (create only).
    pub cas: Option<&'a ClusterCas>,
    /// The CA rotation's rollout marker: machines created before it are replaced.
    pub rollout_after: Option<chrono::DateTime<chrono::Utc>>,
}

/// The values document. Serialised (camelCase) it is the templates' context; secrets are
/// skipped in serialisation and redacted in `Debug`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Values {
    /// CAPI `Cluster` name (the cluster's `stack_id`); prefix of every object name.
    pub cluster_name: String,
    /// Namespace of every namespaced object: `<prefix>-<project id>`.
    pub namespace: String,
    /// Magnum cluster uuid, project and owner.
    pub cluster_uuid: String,
    pub project_id: String,
    pub user_id: String,
    /// Labels every object of the cluster carries: the three `magnum.openstack.org` labels and
    /// `cluster.x-k8s.io/cluster-name`.
    pub common_labels: BTreeMap<String, String>,
    /// Labels of the (per-project, shared) Namespace: only the project, since it outlives any
    /// one cluster (and must never match a selector on a cluster's uuid).
    pub namespace_labels: BTreeMap<String, String>,
    /// Kubernetes version, `v`-prefixed (`kube_tag` or the image's `kube_version`).
    pub kubernetes_version: String,
    /// The image's `os_distro` (informational).
    pub os_distro: Option<String>,
    /// Nova keypair injected into every machine.
    pub ssh_key_name: Option<String>,
    /// CAPO identity: the cloud name in `clouds.yaml` and the Secret holding it.
    pub cloud: Cloud,
    /// Neutron side of the cluster.
    pub networking: Networking,
    /// Pod and service networks inside the cluster.
    pub kube_network: KubeNetwork,
    /// How the Kubernetes API is exposed and configured.
    pub api_server: ApiServer,
    /// kubeadm settings shared by every node.
    pub kubeadm: Kubeadm,
    /// The `default-master` nodegroup: KubeadmControlPlane and its machines.
    pub control_plane: ControlPlane,
    /// Every worker nodegroup, ordered by creation: one MachineDeployment each.
    pub node_groups: Vec<NodeGroup>,
    /// Workload-cluster addons.
    pub addons: Addons,
    /// The credential, when its Secrets are to be written.
    pub credentials: Option<CloudCredentials>,
    /// The CAs, when their Secrets are to be written.
    pub cas: Option<CaValues>,
    /// `spec.rollout.after` of the control plane and every MachineDeployment (RFC 3339), set by
    /// a CA rotation so every machine is rebuilt with the CA Secrets of its phase.
    pub rollout_after: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cloud {
    /// Cloud name in `clouds.yaml` (`openstack`).
    pub name: String,
    /// `<name>-cloud-credentials`: the OpenStackCluster's `identityRef`.
    pub credentials_secret_name: String,
}

/// A Neutron network or subnet, by id (when resolved or given as one) or by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    pub id: Option<String>,
    pub name: Option<String>,
}

impl ResourceRef {
    fn id(id: &str) -> Self {
        Self {
            id: Some(id.to_owned()),
            name: None,
        }
    }
    fn name(name: &str) -> Self {
        Self {
            id: None,
            name: Some(name.to_owned()),
        }
    }
    /// An id when `ident` is a uuid, else a name.
    fn from_ident(ident: &str) -> Self {
        if Uuid::parse_str(ident).is_ok() {
            Self::id(ident)
        } else {
            Self::name(ident)
        }
    }
    /// The resolved id if any, else whatever was given.
    fn resolve(resolved: Option<&String>, given: Option<&String>) -> Option<Self> {
        resolved
            .map(|id| Self::id(id))
            .or_else(|| given.map(|g| Self::from_ident(g)))
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Networking {
    /// External network (floating IPs, router gateway); `None` disables external access.
    pub external_network: Option<ResourceRef>,
    /// Existing network the nodes join (`fixed_network`); `None`: CAPO creates one.
    pub network: Option<ResourceRef>,
    /// Existing subnet (`fixed_subnet`).
    pub subnet: Option<ResourceRef>,
    /// The subnet CAPO creates when no network is given (`fixed_subnet_cidr`).
    pub managed_subnet: Option<ManagedSubnet>,
    /// The template's `dns_nameserver`, split on commas.
    pub dns_nameservers: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedSubnet {
    pub cidr: String,
    pub dns_nameservers: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeNetwork {
    /// `calico_ipv4pool` | `cilium_ipv4pool`, else `[capi] pod_cidr`.
    pub pod_cidr: String,
    /// `service_cluster_ip_range`, else `[capi] service_cidr`.
    pub service_cidr: String,
    /// `dns_cluster_domain`, else `cluster.local`.
    pub service_domain: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiServer {
    /// The Octavia load balancer in front of the API (`master_lb_enabled`, or several
    /// masters); `None` exposes the single master directly.
    pub load_balancer: Option<ApiLoadBalancer>,
    /// Whether the API gets a floating IP (`master_lb_floating_ip_enabled`, default true).
    pub floating_ip: bool,
    /// A pre-allocated floating IP address for the API (`api_server_floating_ip`).
    pub floating_ip_address: Option<String>,
    /// Port when the template sets `apiserver_port` to something other than 6443.
    pub port: Option<u16>,
    /// Extra SANs of the serving certificate (`api_server_cert_sans`).
    pub cert_sans: Vec<String>,
    /// kube-apiserver flags (OIDC, admission plugins, TLS cipher suites).
    pub extra_args: Vec<NameValue>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiLoadBalancer {
    /// Octavia provider (`octavia_provider`, else `[capi] octavia_provider`).
    pub provider: String,
    /// Source CIDRs allowed to reach the API (`api_master_lb_allowed_cidrs`).
    pub allowed_cidrs: Vec<String>,
    /// Octavia flavor (`api_server_lb_flavor`).
    pub flavor: Option<String>,
    /// Octavia availability zone (`api_server_lb_availability_zone`).
    pub availability_zone: Option<String>,
}

/// A `{name, value}` pair (kubeadm v1beta2 extra args).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameValue {
    pub name: String,
    pub value: String,
}

fn nv(name: &str, value: impl Into<String>) -> NameValue {
    NameValue {
        name: name.into(),
        value: value.into(),
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kubeadm {
    /// Registry of the control-plane images (`container_infra_prefix`, trailing `/` removed).
    pub image_repository: Option<String>,
    /// kubelet flags of every node (besides `cloud-provider`/`provider-id`, which the templates
    /// set): `tls-cipher-suites` from `kubelet_tls_cipher_suites`.
    pub kubelet_extra_args: Vec<NameValue>,
}

/// A Nova flavor: by id when resolved, else by the name (or id) the cluster gave.
pub type FlavorRef = ResourceRef;

/// A Glance image: by id (resolved, or given as a uuid), else a name filter.
pub type ImageRef = ResourceRef;

/// What a machine is made of.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    pub flavor: FlavorRef,
    pub image: ImageRef,
    /// Boot from a Cinder volume (`boot_volume_size` > 0).
    pub root_volume: Option<RootVolume>,
    /// Extra networks each machine gets a port on (`extra_network_names`, workers only).
    pub extra_networks: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RootVolume {
    pub size_gib: u32,
    /// Cinder volume type (`boot_volume_type`).
    pub volume_type: Option<String>,
    /// Cinder availability zone (`boot_volume_availability_zone`); unset: Cinder's choice.
    pub availability_zone: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBlockDevice {
    pub size_gib: u32,
    /// `Volume` (Cinder) or `Local` (the flavor's ephemeral disk).
    pub storage_type: String,
    pub volume_type: Option<String>,
    pub availability_zone: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// KubeadmControlPlane (and its MachineHealthCheck) name: `<cluster>-control-plane`.
    pub name: String,
    /// Base name of its OpenStackMachineTemplate (the renderer appends a spec hash).
    pub machine_template_name: String,
    pub nodegroup_uuid: String,
    /// Labels of the KubeadmControlPlane and its machine template.
    pub labels: BTreeMap<String, String>,
    /// Labels every control-plane Machine inherits.
    pub machine_labels: BTreeMap<String, String>,
    /// Selector of its machines (for the health check).
    pub selector: BTreeMap<String, String>,
    /// Odd, ≥ 1.
    pub machine_count: i32,
    pub machine: Machine,
    /// Compute AZs the control plane spreads over (`control_plane_availability_zones`, else
    /// `availability_zone`); empty: Nova chooses (`controlPlaneOmitAvailabilityZone`).
    pub availability_zones: Vec<String>,
    /// A dedicated etcd disk (`etcd_blockdevice_size` | `etcd_volume_size` > 0).
    pub etcd_block_device: Option<EtcdBlockDevice>,
    /// A MachineHealthCheck for the control plane (`auto_healing_enabled`).
    pub health_check: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    pub uuid: String,
    /// The Magnum nodegroup name.
    pub magnum_name: String,
    /// Name of its MachineDeployment and MachineHealthCheck and base name of its templates:
    /// `<cluster>-<sanitised name>-<first 8 hex of the uuid>`.
    pub name: String,
    /// Labels of the MachineDeployment and its templates.
    pub labels: BTreeMap<String, String>,
    /// Annotations of the MachineDeployment (autoscaler bounds).
    pub annotations: BTreeMap<String, String>,
    /// Selector of the MachineDeployment (and its health check).
    pub selector: BTreeMap<String, String>,
    /// Labels every Machine inherits (CAPI copies `node-role.kubernetes.io/*` and
    /// `node.cluster.x-k8s.io/*` ones to the Node).
    pub machine_labels: BTreeMap<String, String>,
    /// Fixed size; `None` when the autoscaler owns the replica count.
    pub replicas: Option<i32>,
    pub autoscale: Option<Autoscale>,
    pub machine: Machine,
    /// Compute AZ (`availability_zone` of the nodegroup, else of the cluster).
    pub failure_domain: Option<String>,
    /// kubelet flags: the shared ones plus `node-labels` from the nodegroup's `node_labels`.
    pub kubelet_extra_args: Vec<NameValue>,
    /// Node taints (the nodegroup's `node_taints`), set by kubeadm at join.
    pub node_taints: Vec<Taint>,
    /// A MachineHealthCheck (`auto_healing_enabled`).
    pub health_check: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Autoscale {
    pub min: i32,
    pub max: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// A Helm chart delivered by a HelmChartProxy.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HelmChart {
    /// HelmChartProxy name.
    pub proxy_name: String,
    pub repo: String,
    pub name: String,
    pub version: String,
    pub release_name: String,
    /// Namespace of the release in the workload cluster.
    pub namespace: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Addons {
    /// Labels that select this cluster's `Cluster` (HelmChartProxy/ClusterResourceSet
    /// `clusterSelector`): its uuid.
    pub cluster_selector: BTreeMap<String, String>,
    pub cni: Cni,
    pub cloud_controller_manager: HelmChart,
    /// `None` when `cinder_csi_enabled=false`.
    pub csi_cinder: Option<CsiCinder>,
    pub cloud_config: CloudConfig,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cni {
    /// `calico` or `cilium` (the template's `network_driver`).
    pub kind: String,
    pub calico: bool,
    pub cilium: bool,
    pub chart: HelmChart,
    /// Cilium's Hubble relay and UI (`cilium_hubble_ui_enabled`).
    pub hubble_ui: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CsiCinder {
    pub chart: HelmChart,
    /// The default StorageClass (`csi_cinder_*` labels).
    pub storage_class: StorageClass,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageClass {
    pub name: String,
    /// `Delete` (default) or `Retain` (`csi_cinder_reclaim_policy`).
    pub reclaim_policy: String,
    /// `WaitForFirstConsumer` (default) or `Immediate` (`csi_cinder_volume_binding_mode`).
    pub volume_binding_mode: String,
    /// `csi_cinder_allow_volume_expansion`, default true.
    pub allow_volume_expansion: bool,
    /// `csi_cinder_fstype`, default `ext4`.
    pub fstype: String,
    /// Cinder AZ of the volumes (`csi_cinder_availability_zone`).
    pub availability_zone: Option<String>,
    /// Cinder volume type (`csi_cinder_volume_type`).
    pub volume_type: Option<String>,
}

/// The workload cluster's `kube-system/cloud-config` Secret (CCM and CSI configuration),
/// delivered by a ClusterResourceSet.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudConfig {
    /// Name of the ClusterResourceSet and of its resource Secret: `<cluster>-cloud-config`.
    pub resource_set_name: String,
    /// `[LoadBalancer]` of `cloud.conf`.
    pub load_balancer: CcmLoadBalancer,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CcmLoadBalancer {
    /// `octavia_provider`.
    pub provider: String,
    /// `octavia_lb_algorithm`; default `SOURCE_IP_PORT` for `ovn`, else `ROUND_ROBIN`.
    pub method: String,
    /// `octavia_lb_healthcheck`, default true.
    pub create_monitor: bool,
    /// External network id for Service floating IPs (when known as an id).
    pub floating_network_id: Option<String>,
}

/// The four CAs CAPI expects; private keys are never serialised.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaValues {
    pub ca: CaPair,
    pub etcd: CaPair,
    pub front_proxy: CaPair,
    pub sa: CaPair,
}

#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaPair {
    pub cert_pem: String,
    #[serde(skip)]
    pub key_pem: SecretString,
}

impl std::fmt::Debug for CaPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaPair")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl From<&ClusterCas> for CaValues {
    fn from(c: &ClusterCas) -> Self {
        let pair = |k: &super::pki::KeyPairPem| CaPair {
            cert_pem: k.cert_pem.clone(),
            key_pem: SecretString::from(k.key_pem.clone()),
        };
        Self {
            ca: pair(&c.ca),
            etcd: pair(&c.etcd),
            front_proxy: pair(&c.front_proxy),
            sa: pair(&c.sa),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Labels

/// Label look-up over a nodegroup's labels (first) and the cluster's (second), with aliases:
/// the first alias present wins, and two aliases present with different values are an error.
/// Empty values count as absent (Magnum templates often carry `key: ""`).
#[derive(Clone, Copy)]
struct LabelView<'a> {
    scopes: [Option<&'a Labels>; 2],
}

impl<'a> LabelView<'a> {
    fn cluster(labels: &'a Labels) -> Self {
        Self {
            scopes: [Some(labels), None],
        }
    }
    fn nodegroup(ng: &'a Labels, cluster: &'a Labels) -> Self {
        Self {
            scopes: [Some(ng), Some(cluster)],
        }
    }

    fn raw(&self, names: &[&'static str]) -> Result<Option<(&'static str, &'a str)>, ValuesError> {
        for scope in self.scopes.iter().flatten() {
            let found: Vec<(&'static str, &'a str)> = names
                .iter()
                .filter_map(|n| scope.get(*n).map(|v| (*n, v.trim())))
                .filter(|(_, v)| !v.is_empty())
                .collect();
            if let Some(&(first, fv)) = found.first() {
                if let Some(&(second, sv)) = found.iter().find(|(_, v)| *v != fv) {
                    return Err(ValuesError::LabelConflict {
                        first: first.into(),
                        first_value: fv.into(),
                        second: second.into(),
                        second_value: sv.into(),
                    });
                }
                return Ok(Some((first, fv)));
            }
        }
        Ok(None)
    }

    /// The value of the first alias set, through `parse`; its error is a
    /// [`ValuesError::BadLabel`] naming the label.
    fn parsed<T>(
        &self,
        names: &[&'static str],
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ValuesError> {
        match self.raw(names)? {
            None => Ok(None),
            Some((label, v)) => parse(v).map(Some).map_err(|reason| bad(label, v, reason)),
        }
    }

    /// A value that must be one token (no spaces or quotes): names, zones, ids.
    fn token(&self, names: &[&'static str]) -> Result<Option<String>, ValuesError> {
        self.parsed(names, |v| {
            if v.chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\' | '{' | '}'))
            {
                Ok(v.to_owned())
            } else {
                Err("must be a single word without quotes or braces".into())
            }
        })
    }

    fn bool(&self, names: &[&'static str], default: bool) -> Result<bool, ValuesError> {
        let b = self.parsed(names, |v| {
            bool_from_string(v).ok_or_else(|| "must be true or false".into())
        })?;
        Ok(b.unwrap_or(default))
    }

    fn u32(&self, names: &[&'static str]) -> Result<Option<u32>, ValuesError> {
        self.parsed(names, |v| {
            v.parse::<u32>()
                .map_err(|_| "must be a non-negative integer".into())
        })
    }

    fn one_of(
        &self,
        names: &[&'static str],
        allowed: &[&str],
        default: &str,
    ) -> Result<String, ValuesError> {
        let v = self.parsed(names, |v| {
            allowed
                .iter()
                .find(|a| a.eq_ignore_ascii_case(v))
                .map(|a| (*a).to_owned())
                .ok_or_else(|| format!("must be one of {}", allowed.join(", ")))
        })?;
        Ok(v.unwrap_or_else(|| default.to_owned()))
    }

    fn cidr(&self, names: &[&'static str]) -> Result<Option<String>, ValuesError> {
        self.parsed(names, |v| parse_cidr(v).map(|_| v.to_owned()))
    }

    /// A list split on any of `seps`, empty items dropped, each item through `check` (its error
    /// is a [`ValuesError::BadLabel`] naming the label and the item).
    fn list(
        &self,
        names: &[&'static str],
        seps: &[char],
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Result<Vec<String>, ValuesError> {
        let Some((label, v)) = self.raw(names)? else {
            return Ok(vec![]);
        };
        v.split(|c| seps.contains(&c))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                check(s)
                    .map(|()| s.to_owned())
                    .map_err(|reason| bad(label, s, reason))
            })
            .collect()
    }
}

/// For [`LabelView::list`]: every item is fine.
fn any_item(_: &str) -> Result<(), String> {
    Ok(())
}

/// An IPv4 or IPv6 CIDR as (address, prefix length).
pub fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = s
        .split_once('/')
        .ok_or_else(|| "must be a CIDR like 10.0.0.0/24".to_owned())?;
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    let len: u8 = len
        .parse()
        .map_err(|_| format!("{len:?} is not a prefix length"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(format!("prefix length {len} exceeds {max}"));
    }
    Ok((addr, len))
}

/// Whether two CIDRs share addresses (different families never do).
fn cidrs_overlap(a: (IpAddr, u8), b: (IpAddr, u8)) -> bool {
    let to_u128 = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32u32),
        IpAddr::V6(v6) => (u128::from(v6), 128u32),
    };
    let ((x, bits_a), (y, bits_b)) = (to_u128(a.0), to_u128(b.0));
    if bits_a != bits_b {
        return false;
    }
    let len = u32::from(a.1.min(b.1));
    let shift = bits_a - len;
    let mask = if shift >= 128 { 0 } else { u128::MAX << shift };
    (x & mask) == (y & mask)
}

/// A Kubernetes version normalised to `vMAJOR.MINOR.PATCH[-suffix]`.
fn normalise_version(s: &str) -> Option<String> {
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
/// Always `v`-prefixed.
pub fn kube_version(
    labels: &Labels,
    resolved_kube_version: Option<&str>,
    default: &str,
) -> Result<String, ValuesError> {
    let tag = LabelView::cluster(labels).parsed(&["kube_tag"], |v| {
        normalise_version(v).ok_or_else(|| "must be a version like v1.33.5".into())
    })?;
    let image = resolved_kube_version
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| {
            normalise_version(v).ok_or_else(|| {
                ValuesError::Invalid(format!(
                    "the image's kube_version property {v:?} is not a version like v1.33.5"
                ))
            })
        })
        .transpose()?;
    match (tag, image) {
        (Some(t), Some(i)) if t != i => {
            Err(ValuesError::KubeVersionMismatch { label: t, image: i })
        }
        (Some(v), _) | (None, Some(v)) => Ok(v),
        (None, None) => normalise_version(default).ok_or_else(|| {
            ValuesError::Invalid(format!(
                "[capi] default_kube_version {default:?} is not a version like v1.33.5"
            ))
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Names

/// `s` lower-cased with every run of other characters than `[a-z0-9]` turned into one `-`,
/// trimmed of `-`, and cut to at most `max` characters.
pub fn sanitise_fragment(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.trim_matches('-').chars().take(max).collect();
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// Object name of a worker nodegroup: `<cluster>-<fragment>-<first 8 hex of its uuid>`, the
/// fragment sized so that `<name>-<hash8>` (its templates) stays within 63 characters.
pub fn nodegroup_object_name(cluster_name: &str, ng_name: &str, ng_uuid: Uuid) -> String {
    let hex = ng_uuid.simple().to_string();
    let short = &hex[..8];
    // 63 = cluster + '-' + fragment + '-' + 8 + '-' + 8
    let budget = 63usize.saturating_sub(cluster_name.len() + 1 + 1 + 8 + 9);
    let fragment = sanitise_fragment(ng_name, budget);
    if fragment.is_empty() {
        format!("{cluster_name}-{short}")
    } else {
        format!("{cluster_name}-{fragment}-{short}")
    }
}

// ---------------------------------------------------------------------------------------------
// Building

fn label_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn check_label_value(what: &str, v: &str) -> Result<(), ValuesError> {
    match label_value_error(v) {
        None => Ok(()),
        Some(e) => Err(ValuesError::Invalid(format!(
            "{what} {v:?} cannot be a Kubernetes label value: {e}"
        ))),
    }
}

/// A flavor from (given, resolved): by the resolved id, else by what was given, as a name.
fn flavor_ref((given, resolved): (Option<&String>, Option<&String>)) -> Option<FlavorRef> {
    resolved
        .map(|id| ResourceRef::id(id))
        .or_else(|| given.map(|g| ResourceRef::name(g)))
}

/// Chart versions and similar values end up inside HelmChartProxy value templates (Go
/// templates): keep them to plain version syntax.
fn chart_version_label(
    view: &LabelView<'_>,
    label: &'static str,
    default: &str,
    leading_v: bool,
) -> Result<String, ValuesError> {
    let version = view.parsed(&[label], |v| {
        normalise_version(v).ok_or_else(|| "must be a version like v1.2.3".into())
    })?;
    Ok(match version {
        None => default.to_owned(),
        Some(v) if leading_v => v,
        Some(v) => v.trim_start_matches('v').to_owned(),
    })
}

/// Builds the values document. Pure: the same rows give the same document.
pub fn build(inputs: Inputs<'_>) -> Result<Values, ValuesError> {
    let Inputs {
        template,
        cluster,
        nodegroups,
        config,
        credentials,
        cas,
        rollout_after,
    } = inputs;
    let cx = Cx::new(template, cluster, config)?;
    let namespace = super::namespace(&config.namespace_prefix, &cluster.project_id);
    if let Some(e) = dns1123_label_error(&namespace) {
        return Err(ValuesError::Invalid(format!("namespace {namespace:?} {e}")));
    }
    let resolved_kube = cx
        .tr
        .kube_version
        .as_deref()
        .or(cx.cr.kube_version.as_deref());
    let kubernetes_version = kube_version(
        &cluster.labels.0,
        resolved_kube,
        &config.default_kube_version,
    )?;
    let networking = cx.networking()?;
    let kube_network = cx.kube_network(networking.managed_subnet.as_ref())?;
    let master = master_nodegroup(nodegroups)?;
    let api_server = cx.api_server(master.node_count, networking.external_network.is_some())?;
    let kubeadm = cx.kubeadm()?;
    let machines = cx.machine_refs()?;
    let control_plane = cx.control_plane(master, &machines)?;
    let node_groups = cx.node_groups(nodegroups, &machines, &kubeadm)?;
    let addons = cx.addons(&networking)?;
    Ok(Values {
        cloud: Cloud {
            name: "openstack".into(),
            credentials_secret_name: super::credentials_secret_name(&cx.cluster_name),
        },
        namespace_labels: label_map(&[
            (LABEL_PROJECT_ID, &cluster.project_id),
            ("app.kubernetes.io/managed-by", "magnum-capi"),
        ]),
        namespace,
        project_id: cluster.project_id.clone(),
        user_id: cluster.user_id.clone(),
        kubernetes_version,
        os_distro: cx
            .tr
            .os_distro
            .clone()
            .or_else(|| cx.cr.os_distro.clone())
            .or_else(|| template.cluster_distro.clone()),
        ssh_key_name: cluster
            .keypair
            .clone()
            .or_else(|| template.keypair_id.clone())
            .filter(|k| !k.is_empty()),
        networking,
        kube_network,
        api_server,
        kubeadm,
        control_plane,
        node_groups,
        addons,
        credentials,
        cas: cas.map(CaValues::from),
        rollout_after: rollout_after.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        cluster_name: cx.cluster_name,
        cluster_uuid: cx.cluster_uuid,
        common_labels: cx.common_labels,
    })
}

/// Bad input in a nodegroup's own fields, naming the nodegroup.
fn ng_invalid(ng: &NodegroupRow, what: impl std::fmt::Display) -> ValuesError {
    ValuesError::Invalid(format!("nodegroup {}: {what}", ng.name))
}

fn master_nodegroup(nodegroups: &[NodegroupRow]) -> Result<&NodegroupRow, ValuesError> {
    let masters: Vec<&NodegroupRow> = nodegroups.iter().filter(|n| n.is_master()).collect();
    let master = match masters.as_slice() {
        [m] => *m,
        [] => {
            return Err(ValuesError::Invalid(
                "the cluster has no master nodegroup".into(),
            ));
        }
        _ => {
            return Err(ValuesError::Invalid(
                "the cluster has more than one master nodegroup".into(),
            ));
        }
    };
    if master.node_count < 1 || master.node_count % 2 == 0 {
        return Err(ValuesError::Invalid(format!(
            "master count {} is invalid: the control plane needs an odd number of masters \
             (1, 3, 5…) to keep etcd quorum",
            master.node_count
        )));
    }
    Ok(master)
}

/// The machine image and flavors the cluster's rows name, paired with what they resolved to.
struct MachineRefs<'a> {
    image: ImageRef,
    /// The template's image reference (nodegroups naming it get the resolved image).
    template_image: Option<&'a String>,
    master_flavor: (Option<&'a String>, Option<&'a String>),
    worker_flavor: (Option<&'a String>, Option<&'a String>),
}

impl MachineRefs<'_> {
    /// A nodegroup's image: the template's (resolved) unless the nodegroup names another.
    fn image_for(&self, ng_image: Option<&String>) -> ImageRef {
        match ng_image.filter(|i| !i.is_empty()) {
            Some(i) if Some(i) != self.template_image => ResourceRef::from_ident(i),
            _ => self.image.clone(),
        }
    }

    /// A nodegroup's flavor: resolved when it is the cluster's worker or master flavor.
    fn flavor_for(&self, ng_flavor: Option<&String>) -> Option<FlavorRef> {
        match ng_flavor.filter(|f| !f.is_empty()) {
            Some(f) if Some(f) == self.worker_flavor.0 => flavor_ref(self.worker_flavor),
            Some(f) if Some(f) == self.master_flavor.0 => flavor_ref(self.master_flavor),
            Some(f) => flavor_ref((Some(f), None)),
            None => flavor_ref(self.worker_flavor),
        }
    }
}

/// What the parts of the build share: the rows, the cluster's label view, the names.
struct Cx<'a> {
    t: &'a TemplateRow,
    c: &'a ClusterRow,
    tr: &'a Resolved,
    cr: &'a Resolved,
    view: LabelView<'a>,
    config: &'a CapiConfig,
    cluster_name: String,
    cluster_uuid: String,
    common_labels: BTreeMap<String, String>,
}

impl<'a> Cx<'a> {
    fn new(
        t: &'a TemplateRow,
        c: &'a ClusterRow,
        config: &'a CapiConfig,
    ) -> Result<Self, ValuesError> {
        let cluster_name = c
            .stack_id
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| super::capi_name(c.uuid));
        if let Some(e) = dns1123_label_error(&cluster_name) {
            return Err(ValuesError::Invalid(format!(
                "CAPI cluster name {cluster_name:?} {e}"
            )));
        }
        if cluster_name.len() > MAX_CLUSTER_NAME {
            return Err(ValuesError::Invalid(format!(
                "CAPI cluster name {cluster_name:?} is longer than {MAX_CLUSTER_NAME} characters"
            )));
        }
        check_label_value("project id", &c.project_id)?;
        check_label_value("user id", &c.user_id)?;
        let cluster_uuid = c.uuid.to_string();
        let common_labels = label_map(&[
            (LABEL_CLUSTER_UUID, &cluster_uuid),
            (LABEL_PROJECT_ID, &c.project_id),
            (LABEL_USER_ID, &c.user_id),
            (LABEL_CAPI_CLUSTER_NAME, &cluster_name),
        ]);
        Ok(Self {
            t,
            c,
            tr: &t.resolved.0,
            cr: &c.resolved.0,
            view: LabelView::cluster(&c.labels.0),
            config,
            cluster_name,
            cluster_uuid,
            common_labels,
        })
    }

    fn networking(&self) -> Result<Networking, ValuesError> {
        let (t, c, tr, cr) = (self.t, self.c, self.tr, self.cr);
        let external_network = ResourceRef::resolve(
            tr.external_network_id
                .as_ref()
                .or(cr.external_network_id.as_ref()),
            t.external_network_id.as_ref().filter(|s| !s.is_empty()),
        );
        let (net_given, net_resolved) = given_and_resolved(
            (c.fixed_network.as_ref(), cr.fixed_network_id.as_ref()),
            (t.fixed_network.as_ref(), tr.fixed_network_id.as_ref()),
        );
        let network = net_given.and_then(|g| ResourceRef::resolve(net_resolved, Some(g)));
        let (subnet_given, subnet_resolved) = given_and_resolved(
            (c.fixed_subnet.as_ref(), cr.fixed_subnet_id.as_ref()),
            (t.fixed_subnet.as_ref(), tr.fixed_subnet_id.as_ref()),
        );
        let subnet = subnet_given.and_then(|g| ResourceRef::resolve(subnet_resolved, Some(g)));
        if subnet.is_some() && network.is_none() {
            return Err(ValuesError::Invalid(
                "fixed_subnet needs fixed_network (the network the subnet belongs to)".into(),
            ));
        }
        let mut dns_nameservers = Vec::new();
        for ns in t
            .dns_nameserver
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            if ns.parse::<IpAddr>().is_err() {
                return Err(ValuesError::Invalid(format!(
                    "dns_nameserver {ns:?} is not an IP address"
                )));
            }
            dns_nameservers.push(ns.to_owned());
        }
        let node_cidr = self.view.cidr(&["fixed_subnet_cidr"])?;
        let managed_subnet = match (&network, node_cidr) {
            (Some(_), _) => None,
            (None, Some(cidr)) => Some(cidr),
            (None, None) => Some(self.config.node_cidr.clone()),
        }
        .map(|cidr| ManagedSubnet {
            cidr,
            dns_nameservers: dns_nameservers.clone(),
        });
        Ok(Networking {
            external_network,
            network,
            subnet,
            managed_subnet,
            dns_nameservers,
        })
    }

    /// Pod and service networks; none of them (nor the node subnet CAPO creates) may overlap.
    fn kube_network(&self, managed: Option<&ManagedSubnet>) -> Result<KubeNetwork, ValuesError> {
        let view = &self.view;
        let pod_cidr = view
            .cidr(&["calico_ipv4pool", "cilium_ipv4pool"])?
            .unwrap_or_else(|| self.config.pod_cidr.clone());
        let service_cidr = view
            .cidr(&["service_cluster_ip_range"])?
            .unwrap_or_else(|| self.config.service_cidr.clone());
        let service_domain = view
            .token(&["dns_cluster_domain"])?
            .unwrap_or_else(|| "cluster.local".into());
        if dns1123_subdomain_error(&service_domain).is_some() {
            return Err(bad(
                "dns_cluster_domain",
                &service_domain,
                "must be a DNS domain like cluster.local",
            ));
        }
        let parse = |what: &str, v: &str| {
            parse_cidr(v).map_err(|e| ValuesError::Invalid(format!("{what} {v:?}: {e}")))
        };
        let mut nets = vec![
            ("pod network", parse("pod network", &pod_cidr)?),
            ("service network", parse("service network", &service_cidr)?),
        ];
        if let Some(m) = managed {
            nets.push(("node network", parse("node network", &m.cidr)?));
        }
        for (i, (an, a)) in nets.iter().enumerate() {
            for (bn, b) in &nets[i + 1..] {
                if cidrs_overlap(*a, *b) {
                    return Err(ValuesError::Invalid(format!(
                        "the {an} {}/{} overlaps the {bn} {}/{}",
                        a.0, a.1, b.0, b.1
                    )));
                }
            }
        }
        Ok(KubeNetwork {
            pod_cidr,
            service_cidr,
            service_domain,
        })
    }

    fn octavia_provider(&self) -> Result<String, ValuesError> {
        Ok(self
            .view
            .token(&["octavia_provider"])?
            .unwrap_or_else(|| self.config.octavia_provider.clone()))
    }

    fn api_server(
        &self,
        master_count: i32,
        has_external_network: bool,
    ) -> Result<ApiServer, ValuesError> {
        let (view, t, c) = (&self.view, self.t, self.c);
        const ALLOWED_CIDRS: &[&str] = &["api_master_lb_allowed_cidrs", "master_lb_allowed_cidrs"];
        let lb_wanted = c.master_lb_enabled.unwrap_or(t.master_lb_enabled) || master_count > 1;
        let floating_ip =
            view.bool(&["master_lb_floating_ip_enabled"], true)? && has_external_network;
        let load_balancer = if lb_wanted {
            let allowed_cidrs = view.list(ALLOWED_CIDRS, &[','], |c| parse_cidr(c).map(drop))?;
            Some(ApiLoadBalancer {
                provider: self.octavia_provider()?,
                allowed_cidrs,
                flavor: view.token(&["api_server_lb_flavor"])?,
                availability_zone: view.token(&["api_server_lb_availability_zone"])?,
            })
        } else {
            if let Some((label, v)) = view.raw(ALLOWED_CIDRS)? {
                return Err(bad(
                    label,
                    v,
                    "needs the API load balancer (master_lb_enabled, or more than one master)",
                ));
            }
            if !floating_ip {
                return Err(ValuesError::Invalid(
                    "without the API load balancer (master_lb_enabled, or more than one master) \
                     the API needs a floating IP: an external network and \
                     master_lb_floating_ip_enabled=true"
                        .into(),
                ));
            }
            None
        };
        let floating_ip_address = view.parsed(&["api_server_floating_ip"], |v| {
            v.parse::<IpAddr>()
                .map_err(|_| "must be an IP address".to_owned())?;
            if !floating_ip {
                return Err(
                    "needs a floating IP for the API (master_lb_floating_ip_enabled \
                            and an external network)"
                        .into(),
                );
            }
            Ok(v.to_owned())
        })?;
        let port = match t.apiserver_port {
            None | Some(6443) => None,
            Some(p) => Some(u16::try_from(p).ok().filter(|p| *p > 0).ok_or_else(|| {
                ValuesError::Invalid(format!("apiserver_port {p} is not a port"))
            })?),
        };
        let cert_sans = view.list(&["api_server_cert_sans"], &[','], |san| {
            let dns_name = san.to_ascii_lowercase().replace('*', "x");
            if san.parse::<IpAddr>().is_err() && dns1123_subdomain_error(&dns_name).is_some() {
                return Err("each SAN must be a DNS name or an IP address".into());
            }
            Ok(())
        })?;
        Ok(ApiServer {
            load_balancer,
            floating_ip,
            floating_ip_address,
            port,
            cert_sans,
            extra_args: self.api_server_args()?,
        })
    }

    /// kube-apiserver flags: admission plugins, OIDC, TLS cipher suites.
    fn api_server_args(&self) -> Result<Vec<NameValue>, ValuesError> {
        let view = &self.view;
        let mut args = Vec::new();
        let mut admission = vec!["NodeRestriction".to_owned()];
        let plugins = view.list(&["admission_control_list"], &[','], |p| {
            if p.bytes().all(|b| b.is_ascii_alphanumeric()) {
                Ok(())
            } else {
                Err("admission plugin names are alphanumeric".into())
            }
        })?;
        for plugin in plugins {
            if !admission.contains(&plugin) {
                admission.push(plugin);
            }
        }
        if admission.len() > 1 {
            args.push(nv("enable-admission-plugins", admission.join(",")));
        }
        if let Some(issuer) = view.token(&["oidc_issuer_url"])? {
            if !issuer.starts_with("https://") {
                return Err(bad("oidc_issuer_url", &issuer, "must be an https:// URL"));
            }
            let client_id = view.token(&["oidc_client_id"])?.ok_or_else(|| {
                ValuesError::Invalid("oidc_issuer_url needs oidc_client_id".into())
            })?;
            args.push(nv("oidc-issuer-url", issuer));
            args.push(nv("oidc-client-id", client_id));
            let claim = view.token(&["oidc_username_claim"])?;
            args.push(nv(
                "oidc-username-claim",
                claim.unwrap_or_else(|| "sub".into()),
            ));
            for (label, flag) in [
                ("oidc_username_prefix", "oidc-username-prefix"),
                ("oidc_groups_claim", "oidc-groups-claim"),
                ("oidc_groups_prefix", "oidc-groups-prefix"),
            ] {
                if let Some(v) = view.token(&[label])? {
                    args.push(nv(flag, v));
                }
            }
        }
        if let Some(suites) = cipher_suites(view, "api_server_tls_cipher_suites")? {
            args.push(nv("tls-cipher-suites", suites));
        }
        Ok(args)
    }

    fn kubeadm(&self) -> Result<Kubeadm, ValuesError> {
        let mut kubelet_extra_args = Vec::new();
        if let Some(suites) = cipher_suites(&self.view, "kubelet_tls_cipher_suites")? {
            kubelet_extra_args.push(nv("tls-cipher-suites", suites));
        }
        Ok(Kubeadm {
            image_repository: self
                .view
                .token(&["container_infra_prefix"])?
                .map(|p| p.trim_end_matches('/').to_owned())
                .filter(|p| !p.is_empty()),
            kubelet_extra_args,
        })
    }

    fn machine_refs(&self) -> Result<MachineRefs<'a>, ValuesError> {
        let (t, c, tr, cr) = (self.t, self.c, self.tr, self.cr);
        let image = ResourceRef::resolve(
            tr.image_id.as_ref().or(cr.image_id.as_ref()),
            t.image_id.as_ref().filter(|i| !i.is_empty()),
        )
        .ok_or_else(|| ValuesError::Invalid("the cluster template has no image".into()))?;
        Ok(MachineRefs {
            image,
            template_image: t.image_id.as_ref(),
            master_flavor: given_and_resolved(
                (c.master_flavor_id.as_ref(), cr.master_flavor_id.as_ref()),
                (t.master_flavor_id.as_ref(), tr.master_flavor_id.as_ref()),
            ),
            worker_flavor: given_and_resolved(
                (c.flavor_id.as_ref(), cr.flavor_id.as_ref()),
                (t.flavor_id.as_ref(), tr.flavor_id.as_ref()),
            ),
        })
    }

    fn control_plane(
        &self,
        master: &NodegroupRow,
        machines: &MachineRefs<'_>,
    ) -> Result<ControlPlane, ValuesError> {
        let view = &self.view;
        let mut availability_zones = Vec::new();
        for az in view.list(&["control_plane_availability_zones"], &[','], any_item)? {
            if !availability_zones.contains(&az) {
                availability_zones.push(az);
            }
        }
        if availability_zones.is_empty()
            && let Some(az) = view.token(&["availability_zone"])?
        {
            availability_zones.push(az);
        }
        let etcd_size = view
            .u32(&["etcd_blockdevice_size", "etcd_volume_size"])?
            .unwrap_or(0);
        let etcd_block_device = if etcd_size > 0 {
            let storage_type =
                view.one_of(&["etcd_blockdevice_type"], &["Volume", "Local"], "Volume")?;
            let volume = storage_type == "Volume";
            Some(EtcdBlockDevice {
                size_gib: etcd_size,
                volume_type: match volume {
                    true => view.token(&["etcd_blockdevice_volume_type", "etcd_volume_type"])?,
                    false => None,
                },
                availability_zone: match volume {
                    true => view.token(&["etcd_blockdevice_volume_az"])?,
                    false => None,
                },
                storage_type,
            })
        } else {
            None
        };
        let uuid = master.uuid.to_string();
        let name = format!("{}-control-plane", self.cluster_name);
        let mut labels = self.common_labels.clone();
        labels.insert(LABEL_NODEGROUP_UUID.into(), uuid.clone());
        labels.insert(LABEL_ROLE.into(), "master".into());
        let flavor = flavor_ref(machines.master_flavor)
            .ok_or_else(|| ValuesError::Invalid("no master flavor (master_flavor_id)".into()))?;
        Ok(ControlPlane {
            machine_template_name: name.clone(),
            name,
            labels,
            machine_labels: label_map(&[
                (LABEL_CLUSTER_UUID, &self.cluster_uuid),
                (LABEL_NODEGROUP_UUID, &uuid),
                (LABEL_ROLE, "master"),
            ]),
            selector: label_map(&[(LABEL_NODEGROUP_UUID, &uuid)]),
            nodegroup_uuid: uuid,
            machine_count: master.node_count,
            machine: Machine {
                flavor,
                image: machines.image_for(master.image_id.as_ref()),
                root_volume: root_volume(view, self.config)?,
                extra_networks: vec![],
            },
            availability_zones,
            etcd_block_device,
            health_check: view.bool(&["auto_healing_enabled"], true)?,
        })
    }

    /// The worker nodegroups, ordered by creation.
    fn node_groups(
        &self,
        nodegroups: &[NodegroupRow],
        machines: &MachineRefs<'_>,
        kubeadm: &Kubeadm,
    ) -> Result<Vec<NodeGroup>, ValuesError> {
        let mut workers: Vec<&NodegroupRow> =
            nodegroups.iter().filter(|n| !n.is_master()).collect();
        workers.sort_by_key(|n| (n.id, n.uuid));
        let mut names = BTreeSet::new();
        let mut out = Vec::new();
        for ng in workers {
            let group = self.node_group(ng, machines, kubeadm)?;
            if !names.insert(group.name.clone()) {
                return Err(ValuesError::Invalid(format!(
                    "nodegroups of this cluster would share the object name {}; recreate one of \
                     them",
                    group.name
                )));
            }
            out.push(group);
        }
        Ok(out)
    }

    fn node_group(
        &self,
        ng: &NodegroupRow,
        machines: &MachineRefs<'_>,
        kubeadm: &Kubeadm,
    ) -> Result<NodeGroup, ValuesError> {
        let view = LabelView::nodegroup(&ng.labels.0, &self.c.labels.0);
        let uuid = ng.uuid.to_string();
        let role = match sanitise_fragment(&ng.role, 63) {
            r if r.is_empty() => "worker".to_owned(),
            r => r,
        };
        let mut labels = self.common_labels.clone();
        labels.insert(LABEL_NODEGROUP_UUID.into(), uuid.clone());
        labels.insert(LABEL_ROLE.into(), "worker".into());
        let selector = label_map(&[
            (LABEL_CAPI_CLUSTER_NAME, &self.cluster_name),
            (LABEL_NODEGROUP_UUID, &uuid),
        ]);
        let mut machine_labels = selector.clone();
        machine_labels.insert(LABEL_CLUSTER_UUID.into(), self.cluster_uuid.clone());
        machine_labels.insert(LABEL_ROLE.into(), "worker".into());
        machine_labels.insert(format!("node-role.kubernetes.io/{role}"), String::new());
        machine_labels.insert(
            "node.cluster.x-k8s.io/nodegroup".into(),
            sanitise_fragment(&ng.name, 63),
        );
        let (replicas, autoscale) = size(ng, &view)?;
        let annotations = match &autoscale {
            Some(a) => label_map(&[
                (ANNOTATION_AUTOSCALER_MIN, &a.min.to_string()),
                (ANNOTATION_AUTOSCALER_MAX, &a.max.to_string()),
            ]),
            None => BTreeMap::new(),
        };
        let flavor = machines
            .flavor_for(ng.flavor_id.as_ref())
            .ok_or_else(|| ValuesError::Invalid(format!("nodegroup {} has no flavor", ng.name)))?;
        let extra_networks = view.list(
            &["extra_network_names", "extra_network_name"],
            &[' ', ','],
            any_item,
        )?;
        let mut kubelet_extra_args = kubeadm.kubelet_extra_args.clone();
        let node_labels = node_labels(ng)?;
        if !node_labels.is_empty() {
            let joined: Vec<String> = node_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            kubelet_extra_args.push(nv("node-labels", joined.join(",")));
        }
        let cluster_auto_healing = self.view.bool(&["auto_healing_enabled"], true)?;
        Ok(NodeGroup {
            name: nodegroup_object_name(&self.cluster_name, &ng.name, ng.uuid),
            uuid,
            magnum_name: ng.name.clone(),
            labels,
            annotations,
            selector,
            machine_labels,
            replicas,
            autoscale,
            machine: Machine {
                flavor,
                image: machines.image_for(ng.image_id.as_ref()),
                root_volume: root_volume(&view, self.config)?,
                extra_networks,
            },
            failure_domain: view.token(&["availability_zone"])?,
            kubelet_extra_args,
            node_taints: node_taints(ng)?,
            health_check: view.bool(&["auto_healing_enabled"], cluster_auto_healing)?,
        })
    }

    fn addons(&self, networking: &Networking) -> Result<Addons, ValuesError> {
        let (view, config) = (&self.view, self.config);
        let chart =
            |proxy: &str, repo: &str, name: &str, version: String, namespace: &str| HelmChart {
                proxy_name: format!("{}-{proxy}", self.cluster_name),
                repo: repo.to_owned(),
                name: name.to_owned(),
                version,
                release_name: name.to_owned(),
                namespace: namespace.to_owned(),
            };
        let network_driver = self
            .t
            .network_driver
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or("calico")
            .to_ascii_lowercase();
        let cni = match network_driver.as_str() {
            "calico" => Cni {
                kind: "calico".into(),
                calico: true,
                cilium: false,
                chart: chart(
                    "cni",
                    &config.calico_chart_repo,
                    "tigera-operator",
                    chart_version_label(view, "calico_tag", &config.calico_chart_version, true)?,
                    "tigera-operator",
                ),
                hubble_ui: false,
            },
            "cilium" => Cni {
                kind: "cilium".into(),
                calico: false,
                cilium: true,
                chart: chart(
                    "cni",
                    &config.cilium_chart_repo,
                    "cilium",
                    chart_version_label(view, "cilium_tag", &config.cilium_chart_version, false)?,
                    "kube-system",
                ),
                hubble_ui: view.bool(&["cilium_hubble_ui_enabled"], false)?,
            },
            other => {
                return Err(ValuesError::Invalid(format!(
                    "network_driver {other:?} is not supported by this driver (calico or cilium)"
                )));
            }
        };
        let mut cloud_controller_manager = chart(
            "ccm",
            &config.openstack_chart_repo,
            "openstack-cloud-controller-manager",
            config.ccm_chart_version.clone(),
            "kube-system",
        );
        cloud_controller_manager.release_name = "openstack-ccm".into();
        let csi_cinder = if view.bool(&["cinder_csi_enabled"], true)? {
            let mut csi_chart = chart(
                "csi-cinder",
                &config.openstack_chart_repo,
                "openstack-cinder-csi",
                config.cinder_csi_chart_version.clone(),
                "kube-system",
            );
            csi_chart.release_name = "cinder-csi".into();
            Some(CsiCinder {
                chart: csi_chart,
                storage_class: storage_class(view)?,
            })
        } else {
            None
        };
        let provider = self.octavia_provider()?;
        let ovn = provider.eq_ignore_ascii_case("ovn");
        let method = view.one_of(
            &["octavia_lb_algorithm"],
            &[
                "ROUND_ROBIN",
                "LEAST_CONNECTIONS",
                "SOURCE_IP",
                "SOURCE_IP_PORT",
            ],
            if ovn { "SOURCE_IP_PORT" } else { "ROUND_ROBIN" },
        )?;
        if ovn && method != "SOURCE_IP_PORT" {
            return Err(bad(
                "octavia_lb_algorithm",
                &method,
                "the ovn provider only supports SOURCE_IP_PORT",
            ));
        }
        Ok(Addons {
            cluster_selector: label_map(&[(LABEL_CLUSTER_UUID, &self.cluster_uuid)]),
            cni,
            cloud_controller_manager,
            csi_cinder,
            cloud_config: CloudConfig {
                resource_set_name: format!("{}-cloud-config", self.cluster_name),
                load_balancer: CcmLoadBalancer {
                    provider,
                    method,
                    create_monitor: view.bool(&["octavia_lb_healthcheck"], true)?,
                    floating_network_id: networking
                        .external_network
                        .as_ref()
                        .and_then(|n| n.id.clone()),
                },
            },
        })
    }
}

/// Fixed replicas, or autoscaler bounds (`auto_scaling_enabled`): min from the nodegroup (else
/// `min_node_count`), at least 1 since scale-from-zero needs capacity hints we cannot compute;
/// max from the nodegroup (else `max_node_count`, else its size). Equal bounds mean fixed.
fn size(
    ng: &NodegroupRow,
    view: &LabelView<'_>,
) -> Result<(Option<i32>, Option<Autoscale>), ValuesError> {
    if !view.bool(&["auto_scaling_enabled"], false)? {
        if ng.node_count < 0 {
            return Err(ng_invalid(
                ng,
                format!("node_count {} is negative", ng.node_count),
            ));
        }
        return Ok((Some(ng.node_count), None));
    }
    let label_count = |label: &'static str| -> Result<Option<i32>, ValuesError> {
        view.u32(&[label])?
            .map(|m| i32::try_from(m).map_err(|_| bad(label, &m.to_string(), "too large")))
            .transpose()
    };
    let min = match ng.min_node_count {
        m if m > 0 => m,
        _ => label_count("min_node_count")?.unwrap_or(1),
    }
    .max(1);
    let max = match ng.max_node_count {
        Some(m) => m,
        None => label_count("max_node_count")?.unwrap_or(ng.node_count.max(min)),
    };
    if max < min {
        return Err(ng_invalid(
            ng,
            format!(
                "max_node_count {max} is below min_node_count {min} (autoscaling needs at \
                 least one node)"
            ),
        ));
    }
    Ok(if min == max {
        (Some(min), None)
    } else {
        (None, Some(Autoscale { min, max }))
    })
}

fn storage_class(view: &LabelView<'_>) -> Result<StorageClass, ValuesError> {
    Ok(StorageClass {
        name: "csi-cinder".into(),
        reclaim_policy: view.one_of(
            &["csi_cinder_reclaim_policy"],
            &["Delete", "Retain"],
            "Delete",
        )?,
        volume_binding_mode: view.one_of(
            &["csi_cinder_volume_binding_mode"],
            &["WaitForFirstConsumer", "Immediate"],
            "WaitForFirstConsumer",
        )?,
        allow_volume_expansion: view.bool(&["csi_cinder_allow_volume_expansion"], true)?,
        fstype: view.one_of(&["csi_cinder_fstype"], &["ext4", "xfs", "btrfs"], "ext4")?,
        availability_zone: view.token(&["csi_cinder_availability_zone"])?,
        volume_type: view.token(&["csi_cinder_volume_type"])?,
    })
}

/// A reference the cluster gives (with what it resolved to), else the template's: never one's
/// name paired with the other's id.
fn given_and_resolved<'a>(
    cluster: (Option<&'a String>, Option<&'a String>),
    template: (Option<&'a String>, Option<&'a String>),
) -> (Option<&'a String>, Option<&'a String>) {
    match cluster.0.filter(|s| !s.is_empty()) {
        Some(given) => (Some(given), cluster.1),
        None => (template.0.filter(|s| !s.is_empty()), template.1),
    }
}

fn cipher_suites(view: &LabelView<'_>, label: &'static str) -> Result<Option<String>, ValuesError> {
    let suites = view.list(&[label], &[','], |s| {
        if s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            Ok(())
        } else {
            Err("cipher suite names are like TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into())
        }
    })?;
    Ok((!suites.is_empty()).then(|| suites.join(",")))
}

fn root_volume(
    view: &LabelView<'_>,
    config: &CapiConfig,
) -> Result<Option<RootVolume>, ValuesError> {
    let size = view
        .u32(&["boot_volume_size"])?
        .unwrap_or(config.default_boot_volume_size);
    if size == 0 {
        return Ok(None);
    }
    Ok(Some(RootVolume {
        size_gib: size,
        volume_type: view.token(&["boot_volume_type"])?.or_else(|| {
            config
                .default_boot_volume_type
                .clone()
                .filter(|t| !t.is_empty())
        }),
        availability_zone: view.token(&["boot_volume_availability_zone"])?,
    }))
}

/// The nodegroup's `node_labels`, checked as Kubernetes labels (the kubelet refuses to start
/// with a bad one).
fn node_labels(ng: &NodegroupRow) -> Result<BTreeMap<String, String>, ValuesError> {
    let mut out = BTreeMap::new();
    let Some(Json(v)) = &ng.node_labels else {
        return Ok(out);
    };
    let Some(map) = v.as_object() else {
        return match v {
            Value::Null => Ok(out),
            _ => Err(ng_invalid(ng, "node_labels must be a dict")),
        };
    };
    for (k, v) in map {
        let v = v
            .as_str()
            .ok_or_else(|| ng_invalid(ng, format!("node label {k} must have a string value")))?;
        if let Some(e) = label_key_error(k).or_else(|| label_value_error(v)) {
            return Err(ng_invalid(ng, format!("node label {k}={v}: {e}")));
        }
        out.insert(k.clone(), v.to_owned());
    }
    Ok(out)
}

fn node_taints(ng: &NodegroupRow) -> Result<Vec<Taint>, ValuesError> {
    let Some(Json(v)) = &ng.node_taints else {
        return Ok(vec![]);
    };
    let items = match v {
        Value::Null => return Ok(vec![]),
        Value::Array(items) => items,
        _ => return Err(ng_invalid(ng, "node_taints must be a list")),
    };
    let mut out = Vec::new();
    for item in items {
        let key = item
            .get("key")
            .and_then(Value::as_str)
            .ok_or_else(|| ng_invalid(ng, "each taint needs a key"))?;
        let value = item
            .get("value")
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty());
        let effect = item.get("effect").and_then(Value::as_str).unwrap_or("");
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            return Err(ng_invalid(
                ng,
                format!("taint {key}: effect {effect:?} is invalid"),
            ));
        }
        if let Some(e) = label_key_error(key).or_else(|| value.and_then(label_value_error)) {
            return Err(ng_invalid(ng, format!("taint {key}: {e}")));
        }
        out.push(Taint {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.to_owned(),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Hypothetical clusters (the `render` command)

/// The rows of a hypothetical cluster, built from API bodies.
#[derive(Debug, Clone)]
pub struct ApiRows {
    pub template: TemplateRow,
    pub cluster: ClusterRow,
    pub nodegroups: Vec<NodegroupRow>,
}

fn field_str(v: &Value, key: &str) -> Option<String> {
    match v.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

fn field_bool(v: &Value, key: &str) -> Result<Option<bool>, ValuesError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) => bool_from_string(s)
            .map(Some)
            .ok_or_else(|| ValuesError::Invalid(format!("{key} must be a boolean"))),
        Some(_) => Err(ValuesError::Invalid(format!("{key} must be a boolean"))),
    }
}

fn field_i32(v: &Value, key: &str) -> Result<Option<i32>, ValuesError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_i64()
            .or_else(|| x.as_str().and_then(|s| s.trim().parse().ok()))
            .and_then(|n| i32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| ValuesError::Invalid(format!("{key} must be an integer"))),
    }
}

fn field_uuid(v: &Value, key: &str) -> Result<Option<Uuid>, ValuesError> {
    field_str(v, key)
        .map(|s| {
            Uuid::parse_str(&s)
                .map_err(|_| ValuesError::Invalid(format!("{key} {s:?} is not a uuid")))
        })
        .transpose()
}

fn field_labels(v: &Value, key: &str) -> Result<Option<Labels>, ValuesError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        )),
        Some(_) => Err(ValuesError::Invalid(format!("{key} must be a dict"))),
    }
}

/// A fixed uuid for what the API would generate, so the same bodies render the same objects.
const PLACEHOLDER_CLUSTER_UUID: u128 = 0x0000_0000_0000_4000_8000_0000_0000_0001;

/// Rows for the cluster that `cluster` (a `GET /v1/clusters/{id}` body) would be when created
/// from `template` (a `GET /v1/clustertemplates/{id}` body), with `nodegroups` (a
/// `GET /v1/clusters/{id}/nodegroups` body, or a list of nodegroup bodies; the default master
/// and worker nodegroups are added when missing). Absent fields take the API's defaults and
/// the cluster inherits what the template gives, as on create. Nothing is looked up, so
/// images, flavors and networks are referenced as given.
pub fn rows_from_api(
    template: &Value,
    cluster: &Value,
    nodegroups: Option<&Value>,
) -> Result<ApiRows, ValuesError> {
    let epoch = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
    let t_labels = field_labels(template, "labels")?.unwrap_or_default();
    let project_id = field_str(cluster, "project_id")
        .or_else(|| field_str(template, "project_id"))
        .unwrap_or_else(|| "project".into());
    let user_id = field_str(cluster, "user_id")
        .or_else(|| field_str(template, "user_id"))
        .unwrap_or_else(|| "user".into());
    let t = TemplateRow {
        id: 1,
        uuid: field_uuid(template, "uuid")?
            .unwrap_or(Uuid::from_u128(PLACEHOLDER_CLUSTER_UUID + 1)),
        project_id: project_id.clone(),
        user_id: user_id.clone(),
        name: field_str(template, "name"),
        image_id: field_str(template, "image_id"),
        flavor_id: field_str(template, "flavor_id"),
        master_flavor_id: field_str(template, "master_flavor_id"),
        keypair_id: field_str(template, "keypair_id"),
        external_network_id: field_str(template, "external_network_id"),
        fixed_network: field_str(template, "fixed_network"),
        fixed_subnet: field_str(template, "fixed_subnet"),
        network_driver: field_str(template, "network_driver"),
        volume_driver: field_str(template, "volume_driver"),
        dns_nameserver: field_str(template, "dns_nameserver").or_else(|| Some("8.8.8.8".into())),
        apiserver_port: field_i32(template, "apiserver_port")?,
        docker_volume_size: field_i32(template, "docker_volume_size")?,
        docker_storage_driver: field_str(template, "docker_storage_driver"),
        cluster_distro: field_str(template, "cluster_distro"),
        coe: field_str(template, "coe").or_else(|| Some("kubernetes".into())),
        http_proxy: field_str(template, "http_proxy"),
        https_proxy: field_str(template, "https_proxy"),
        no_proxy: field_str(template, "no_proxy"),
        registry_enabled: field_bool(template, "registry_enabled")?.unwrap_or(false),
        labels: Json(t_labels.clone()),
        tls_disabled: field_bool(template, "tls_disabled")?.unwrap_or(false),
        public: field_bool(template, "public")?.unwrap_or(false),
        server_type: field_str(template, "server_type"),
        insecure_registry: field_str(template, "insecure_registry"),
        master_lb_enabled: field_bool(template, "master_lb_enabled")?.unwrap_or(false),
        floating_ip_enabled: field_bool(template, "floating_ip_enabled")?.unwrap_or(true),
        hidden: field_bool(template, "hidden")?.unwrap_or(false),
        tags: field_str(template, "tags"),
        driver: field_str(template, "driver"),
        resolved: Json(Resolved::default()),
        created_at: epoch,
        updated_at: None,
    };
    let uuid = field_uuid(cluster, "uuid")?.unwrap_or(Uuid::from_u128(PLACEHOLDER_CLUSTER_UUID));
    let c_labels = match field_labels(cluster, "labels")? {
        Some(l) if !l.is_empty() => l,
        _ => t_labels,
    };
    let inherit =
        |key: &str, from: &Option<String>| field_str(cluster, key).or_else(|| from.clone());
    let c = ClusterRow {
        id: 1,
        uuid,
        project_id: project_id.clone(),
        user_id,
        name: field_str(cluster, "name"),
        cluster_template_id: t.uuid,
        keypair: inherit("keypair", &t.keypair_id),
        docker_volume_size: field_i32(cluster, "docker_volume_size")?.or(t.docker_volume_size),
        labels: Json(c_labels.clone()),
        master_flavor_id: inherit("master_flavor_id", &t.master_flavor_id),
        flavor_id: inherit("flavor_id", &t.flavor_id),
        stack_id: field_str(cluster, "stack_id"),
        api_address: None,
        status: "CREATE_IN_PROGRESS".into(),
        status_reason: None,
        health_status: None,
        health_status_reason: Json(serde_json::json!({})),
        create_timeout: field_i32(cluster, "create_timeout")?,
        discovery_url: None,
        coe_version: None,
        container_version: None,
        ca_cert_ref: None,
        magnum_cert_ref: None,
        etcd_ca_cert_ref: None,
        front_proxy_ca_cert_ref: None,
        fixed_network: inherit("fixed_network", &t.fixed_network),
        fixed_subnet: inherit("fixed_subnet", &t.fixed_subnet),
        floating_ip_enabled: field_bool(cluster, "floating_ip_enabled")?,
        master_lb_enabled: field_bool(cluster, "master_lb_enabled")?,
        resolved: Json(Resolved::default()),
        created_at: epoch,
        updated_at: None,
    };

    let items: Vec<Value> = match nodegroups {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) => a.clone(),
        Some(v) => match v.get("nodegroups") {
            Some(Value::Array(a)) => a.clone(),
            _ => {
                return Err(ValuesError::Invalid(
                    "nodegroups must be a list or {\"nodegroups\": [...]}".into(),
                ));
            }
        },
    };
    let mut ngs = Vec::new();
    let ng_row = |i: usize, body: &Value| -> Result<NodegroupRow, ValuesError> {
        let role = field_str(body, "role").unwrap_or_else(|| "worker".into());
        let name = field_str(body, "name")
            .ok_or_else(|| ValuesError::Invalid(format!("nodegroup #{} has no name", i + 1)))?;
        let master = role == "master";
        let fallback_flavor = if master {
            &c.master_flavor_id
        } else {
            &c.flavor_id
        };
        let node_labels = body
            .get("node_labels")
            .filter(|v| !v.is_null())
            .cloned()
            .map(Json);
        let node_taints = body
            .get("node_taints")
            .filter(|v| !v.is_null())
            .cloned()
            .map(Json);
        let index = u128::try_from(i).unwrap_or(0) + 1;
        Ok(NodegroupRow {
            id: i64::try_from(i).unwrap_or(0) + 1,
            uuid: field_uuid(body, "uuid")?
                .unwrap_or(Uuid::from_u128(uuid.as_u128() ^ (index << 64))),
            name,
            cluster_id: uuid,
            project_id: project_id.clone(),
            docker_volume_size: field_i32(body, "docker_volume_size")?,
            labels: Json(
                field_labels(body, "labels")?
                    .filter(|l| !l.is_empty())
                    .unwrap_or_else(|| c_labels.clone()),
            ),
            flavor_id: field_str(body, "flavor_id").or_else(|| fallback_flavor.clone()),
            image_id: field_str(body, "image_id").or_else(|| t.image_id.clone()),
            node_addresses: Json(vec![]),
            node_count: field_i32(body, "node_count")?.unwrap_or(1),
            role,
            max_node_count: field_i32(body, "max_node_count")?,
            min_node_count: field_i32(body, "min_node_count")?.unwrap_or(0),
            is_default: field_bool(body, "is_default")?.unwrap_or(false),
            stack_id: None,
            status: None,
            status_reason: None,
            version: None,
            node_labels,
            node_taints,
            created_at: epoch,
            updated_at: None,
        })
    };
    for (i, body) in items.iter().enumerate() {
        ngs.push(ng_row(i, body)?);
    }
    let base = ngs.len();
    if !ngs.iter().any(NodegroupRow::is_master) {
        let count = field_i32(cluster, "master_count")?.unwrap_or(1);
        let body = serde_json::json!({"name": "default-master", "role": "master",
            "node_count": count, "is_default": true});
        ngs.push(ng_row(base, &body)?);
    }
    if items.is_empty() {
        let count = field_i32(cluster, "node_count")?.unwrap_or(1);
        let mut body = serde_json::json!({"name": "default-worker", "role": "worker",
            "node_count": count, "is_default": true});
        if let Some(min) = c_labels
            .get("min_node_count")
            .and_then(|m| m.parse::<i32>().ok())
        {
            body["min_node_count"] = min.into();
        }
        ngs.push(ng_row(base + 1, &body)?);
    }
    Ok(ApiRows {
        template: t,
        cluster: c,
        nodegroups: ngs,
    })
}

/// A stand-in credential for printed manifests: obviously not a real one.
pub fn placeholder_credentials() -> CloudCredentials {
    CloudCredentials {
        auth_url: "https://keystone.example.invalid/v3".into(),
        region_name: None,
        interface: "public".into(),
        application_credential_id: "PLACEHOLDER-application-credential-id".into(),
        application_credential_secret: SecretString::from("PLACEHOLDER-not-a-secret".to_owned()),
        cacert: None,
        verify: true,
    }
}

/// Stand-in CAs for printed manifests: marked placeholders, not PEM.
pub fn placeholder_cas() -> ClusterCas {
    let pair = |what: &str| super::pki::KeyPairPem {
        cert_pem: format!(
            "PLACEHOLDER {what} certificate (generated when the cluster is created)\n"
        ),
        key_pem: format!(
            "PLACEHOLDER {what} private key (generated when the cluster is created)\n"
        ),
    };
    ClusterCas {
        ca: pair("cluster CA"),
        etcd: pair("etcd CA"),
        front_proxy: pair("front-proxy CA"),
        sa: pair("service-account key pair"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::label_map as l;

    #[test]
    fn kube_version_takes_the_label_or_the_image_and_normalises() {
        assert_eq!(
            kube_version(&l(&[("kube_tag", "1.33.2")]), None, "v1.30.0").unwrap(),
            "v1.33.2"
        );
        assert_eq!(
            kube_version(&l(&[]), Some("v1.32.1"), "v1.30.0").unwrap(),
            "v1.32.1"
        );
        assert_eq!(
            kube_version(&l(&[("kube_tag", "v1.32.1")]), Some("1.32.1"), "v1.30.0").unwrap(),
            "v1.32.1"
        );
        assert_eq!(
            kube_version(&l(&[("kube_tag", "")]), None, "1.30.0").unwrap(),
            "v1.30.0"
        );
    }

    #[test]
    fn kube_version_mismatch_names_both() {
        let err = kube_version(&l(&[("kube_tag", "v1.33.0")]), Some("v1.32.1"), "v1").unwrap_err();
        assert_eq!(
            err,
            ValuesError::KubeVersionMismatch {
                label: "v1.33.0".into(),
                image: "v1.32.1".into()
            }
        );
        assert!(err.to_string().contains("kube_tag"));
        assert!(matches!(
            kube_version(&l(&[("kube_tag", "latest")]), None, "v1.30.0"),
            Err(ValuesError::BadLabel { .. })
        ));
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

    #[test]
    fn aliases_agree_or_fail() {
        let labels = l(&[("etcd_volume_size", "5"), ("etcd_blockdevice_size", "5")]);
        let v = LabelView::cluster(&labels);
        assert_eq!(
            v.u32(&["etcd_blockdevice_size", "etcd_volume_size"])
                .unwrap(),
            Some(5)
        );
        let labels = l(&[("etcd_volume_size", "5"), ("etcd_blockdevice_size", "6")]);
        let v = LabelView::cluster(&labels);
        assert!(matches!(
            v.u32(&["etcd_blockdevice_size", "etcd_volume_size"]),
            Err(ValuesError::LabelConflict { .. })
        ));
    }

    #[test]
    fn nodegroup_labels_win_over_cluster_labels() {
        let ng = l(&[("availability_zone", "az2")]);
        let cl = l(&[("availability_zone", "az1"), ("boot_volume_size", "")]);
        let v = LabelView::nodegroup(&ng, &cl);
        assert_eq!(
            v.token(&["availability_zone"]).unwrap().as_deref(),
            Some("az2")
        );
        assert_eq!(v.u32(&["boot_volume_size"]).unwrap(), None);
    }

    #[test]
    fn bools_are_strict() {
        let labels = l(&[("a", "True"), ("b", "off"), ("c", "maybe")]);
        let v = LabelView::cluster(&labels);
        assert!(v.bool(&["a"], false).unwrap());
        assert!(!v.bool(&["b"], true).unwrap());
        assert!(
            v.bool(&["c"], true)
                .unwrap_err()
                .to_string()
                .contains("label c")
        );
    }

    #[test]
    fn cidrs_parse_and_overlap() {
        let a = parse_cidr("10.0.0.0/8").unwrap();
        let b = parse_cidr("10.1.0.0/16").unwrap();
        let c = parse_cidr("172.16.0.0/13").unwrap();
        let d = parse_cidr("fd00::/64").unwrap();
        assert!(cidrs_overlap(a, b));
        assert!(!cidrs_overlap(a, c));
        assert!(!cidrs_overlap(a, d));
        assert!(cidrs_overlap(parse_cidr("0.0.0.0/0").unwrap(), c));
        assert!(parse_cidr("10.0.0.0").is_err());
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("nope/8").is_err());
    }

    #[test]
    fn fragments_and_nodegroup_names_fit() {
        assert_eq!(sanitise_fragment("My_Big  Group!", 63), "my-big-group");
        assert_eq!(sanitise_fragment("--x--", 63), "x");
        assert_eq!(sanitise_fragment("default-worker", 8), "default");
        let u = Uuid::parse_str("5d12f6fd-a196-4bf0-ae4c-1f639a523a52").unwrap();
        let cluster = "c0123456789abcdef0123456789abcdef";
        let name = nodegroup_object_name(cluster, "default-worker", u);
        assert_eq!(name, format!("{cluster}-default-wor-5d12f6fd"));
        assert!(name.len() + 9 <= 63);
        assert_eq!(
            nodegroup_object_name(cluster, "___", u),
            format!("{cluster}-5d12f6fd")
        );
        let long = "x".repeat(MAX_CLUSTER_NAME);
        assert!(nodegroup_object_name(&long, "anything", u).len() + 9 <= 63);
    }
}
