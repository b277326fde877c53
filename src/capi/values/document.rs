//! The serialisable values document: [`Values`] and its parts, the templates' context
//! (camelCase), with secrets skipped in serialisation and redacted in `Debug`.

use std::collections::BTreeMap;

use secrecy::SecretString;
use serde::Serialize;
use uuid::Uuid;

use crate::capi::pki::ClusterCas;

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
    /// The image's `os_distro` as Glance gave it.
    pub os_distro: Option<String>,
    /// How the machines boot, by the image's `os_distro`: cloud-init or Ignition.
    pub bootstrap: Bootstrap,
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
    /// What every node gets besides kubeadm: proxy environment, containerd registry settings.
    pub nodes: NodeSettings,
    /// The `default-master` nodegroup: KubeadmControlPlane and its machines.
    pub control_plane: ControlPlane,
    /// Every worker nodegroup, ordered by creation: one MachineDeployment each.
    pub node_groups: Vec<NodeGroup>,
    /// Workload-cluster addons.
    pub addons: Addons,
    /// The cluster autoscaler on the management cluster: present when a nodegroup autoscales.
    pub autoscaler: Option<ClusterAutoscaler>,
    /// The credential, when its Secrets are to be written.
    pub credentials: Option<CloudCredentials>,
    /// The CAs, when their Secrets are to be written.
    pub cas: Option<CaValues>,
    /// `spec.rollout.after` of the control plane and every MachineDeployment (RFC 3339), set by
    /// a CA rotation so every machine is rebuilt with the CA Secrets of its phase.
    pub rollout_after: Option<String>,
}

/// How the machines of the cluster boot (docs/templates-and-labels.md, "Templates, images and node settings"): cloud-init (Ubuntu, Debian, Rocky)
/// or Ignition (Flatcar), and the node name and provider id kubeadm registers each node with,
/// in the bootstrap's own syntax.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// `ubuntu`, `debian`, `rocky` or `flatcar`.
    pub os_distro: String,
    /// cloud-init's Jinja `{{ local_hostname }}`, or `${COREOS_OPENSTACK_HOSTNAME}` which the
    /// commands before kubeadm substitute from coreos-metadata.
    pub node_name: String,
    /// `openstack:///<server id>` in the same syntax.
    pub provider_id: String,
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
    pub(super) fn id(id: &str) -> Self {
        Self {
            id: Some(id.to_owned()),
            name: None,
        }
    }
    pub(super) fn name(name: &str) -> Self {
        Self {
            id: None,
            name: Some(name.to_owned()),
        }
    }
    /// An id when `ident` is a uuid, else a name.
    pub(super) fn from_ident(ident: &str) -> Self {
        if Uuid::parse_str(ident).is_ok() {
            Self::id(ident)
        } else {
            Self::name(ident)
        }
    }
    /// The resolved id if any, else whatever was given.
    pub(super) fn resolve(resolved: Option<&String>, given: Option<&String>) -> Option<Self> {
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
    /// Empty: Neutron's default pool. With the API on a virtual IP: all but that address.
    pub allocation_pools: Vec<AllocationPool>,
}

/// A Neutron allocation pool (first and last address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationPool {
    pub start: String,
    pub end: String,
}

/// The machines' security groups the driver makes (`capi::api_security`) when the API is
/// restricted to `api_master_lb_allowed_cidrs`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiSecurityGroups {
    /// The control-plane machines' group name.
    pub control_plane: String,
    /// The workers' group name.
    pub worker: String,
    /// Who may reach the API port of a control-plane machine besides the node subnet: the
    /// allowed CIDRs and the management cluster's egress addresses (the listener's list).
    pub api_cidrs: Vec<String>,
}

/// The API on a virtual IP of the control-plane machines (`kube_vip_enabled`, [`super::vip`]).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiVip {
    /// The address (`api_server_fixed_ip`, else the managed subnet's last host address).
    pub address: String,
    /// `kube_vip_interface`; `None`: kube-vip's choice (the default route's interface).
    pub interface: Option<String>,
    /// `kube_vip_image`, else `[capi] kube_vip_image` (under `container_infra_prefix`).
    pub image: String,
    /// kube-vip's static pod.
    pub manifest: NodeFile,
    /// On the machine kubeadm initialises: kube-vip on super-admin.conf until kubeadm is done.
    pub pre_kubeadm_commands: Vec<String>,
    pub post_kubeadm_commands: Vec<String>,
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
    /// masters); `None` exposes the single master directly, or the virtual IP.
    pub load_balancer: Option<ApiLoadBalancer>,
    /// The virtual IP the control-plane machines hold instead (`kube_vip_enabled`).
    pub vip: Option<ApiVip>,
    /// The driver's security groups instead of CAPO's managed ones, whose rule opens the API
    /// port to everyone: when `api_master_lb_allowed_cidrs` restricts the API.
    pub security_groups: Option<ApiSecurityGroups>,
    /// CAPO's `apiServerFixedIP`: the virtual IP, or the load balancer's address
    /// (`api_server_fixed_ip`).
    pub fixed_ip: Option<String>,
    /// Whether the API gets a floating IP (`master_lb_floating_ip_enabled`, default true).
    pub floating_ip: bool,
    /// A pre-allocated floating IP address for the API (`api_server_floating_ip`).
    pub floating_ip_address: Option<String>,
    /// Port when the template sets `apiserver_port` to something other than 6443.
    pub port: Option<u16>,
    /// Extra SANs of the serving certificate (`api_server_cert_sans`).
    pub cert_sans: Vec<String>,
    /// kube-apiserver flags (OIDC, admission plugins, TLS cipher suites, audit log).
    pub extra_args: Vec<NameValue>,
    /// The audit log (`audit_log_enabled`).
    pub audit_log: Option<AuditLog>,
    /// Host paths mounted into the kube-apiserver (the audit policy and log directory).
    pub extra_volumes: Vec<HostPathMount>,
}

/// The API server's audit log: policy file on every control-plane node, rotated log files.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditLog {
    pub policy_path: String,
    pub log_path: String,
    /// Days (`audit_log_maxage` | `audit_log_max_age`, default 30).
    pub max_age: u32,
    /// Files kept (`audit_log_maxbackup` | `audit_log_max_backup`, default 10).
    pub max_backup: u32,
    /// MiB per file (`audit_log_maxsize` | `audit_log_max_size`, default 100).
    pub max_size: u32,
}

/// A kubeadm `HostPathMount` of a control-plane component.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostPathMount {
    pub name: String,
    pub host_path: String,
    pub mount_path: String,
    pub read_only: bool,
    pub path_type: String,
}

/// A file cloud-init writes on a node before kubeadm runs (KubeadmConfig `files`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFile {
    pub path: String,
    pub owner: String,
    pub permissions: String,
    pub content: String,
}

/// Settings of every node (control plane and workers) that are not kubeadm's.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSettings {
    /// The template's `http_proxy`/`https_proxy`/`no_proxy`, for containerd and the kubelet.
    pub proxy: Option<Proxy>,
    /// containerd registry configuration (`hosts.toml` per registry).
    pub registries: Registries,
    /// Files every node gets: proxy drop-ins, `hosts.toml`s, the registry CA.
    pub files: Vec<NodeFile>,
    /// Commands every node runs before kubeadm (apply the proxy drop-ins).
    pub pre_kubeadm_commands: Vec<String>,
}

/// The proxy environment of nodes and of the addons that reach the cloud (CCM, Cinder CSI).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Proxy {
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    /// The template's `no_proxy` completed with what must never go through the proxy.
    pub no_proxy: String,
    /// `HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY` (and lower-case twins) as container env.
    pub env: Vec<NameValue>,
}

/// containerd registry settings, as the labels gave them.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Registries {
    /// `containerd_registry_mirrors`: each registry with its mirrors, in the order given.
    pub mirrors: Vec<RegistryMirrors>,
    /// `insecure_registries`: hosts whose TLS certificate is not verified (or plain HTTP).
    pub insecure: Vec<String>,
    /// Whether a CA for private registries is installed (`containerd_registry_ca` or
    /// `[capi] registry_ca`).
    pub ca: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryMirrors {
    pub registry: String,
    pub mirrors: Vec<String>,
}

/// A Nova server group the driver creates (with the cluster's credential) before the machines
/// and deletes after them; machines select it by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerGroup {
    pub name: String,
    /// `affinity`, `anti-affinity`, `soft-affinity` or `soft-anti-affinity`.
    pub policy: String,
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

pub(super) fn nv(name: &str, value: impl Into<String>) -> NameValue {
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
    /// Data disks: etcd's (control plane, `etcd_volume_size`) and containerd's
    /// (`docker_volume_size`).
    pub data_volumes: Vec<DataVolume>,
    /// The data disks as CAPO `additionalBlockDevices`.
    pub block_devices: Vec<BlockDevice>,
    /// The data disks' file systems and mounts (KubeadmConfig `diskSetup`, `mounts`).
    pub disk_setup: Option<DiskSetup>,
    pub mounts: Vec<[String; 2]>,
    /// Commands the machine runs before kubeadm: every node's, then the data volumes' checks.
    pub pre_kubeadm_commands: Vec<String>,
    /// Flatcar: the machine's files, drop-ins, data volumes and units as a Container Linux
    /// Config (CABPK's `ignition.containerLinuxConfig.additionalConfig`), which replaces the
    /// cloud-init `files`, `diskSetup` and `mounts`.
    pub ignition: Option<String>,
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

/// A CAPO `additionalBlockDevices` entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    pub name: String,
    #[serde(rename = "sizeGiB")]
    pub size_gib: u32,
    pub storage: BlockDeviceStorage,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceStorage {
    #[serde(rename = "type")]
    pub storage_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<BlockDeviceVolume>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceVolume {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<NameRef>,
}

/// `{name: …}`.
#[derive(Debug, Clone, Serialize)]
pub struct NameRef {
    pub name: String,
}

/// KubeadmConfig `diskSetup` (cloud-init `fs_setup`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskSetup {
    pub filesystems: Vec<Filesystem>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Filesystem {
    pub device: String,
    pub filesystem: String,
    pub label: String,
    /// Never reformat a disk that already has a file system.
    pub overwrite: bool,
}

/// A data disk of a machine besides its root disk: a CAPO `additionalBlockDevices` entry (a
/// Cinder volume, or for etcd the flavor's ephemeral disk), formatted and mounted by cloud-init
/// (`diskSetup`, `mounts`) before kubeadm runs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolume {
    /// The block device's name, which CAPO tags it with: the node finds it as
    /// `/dev/disk/openstack/by-tag/<name>` (`etcd`, `containerd`).
    pub name: String,
    pub size_gib: u32,
    /// `Volume` (Cinder) or `Local` (the flavor's ephemeral disk; etcd only).
    pub storage_type: String,
    /// Cinder volume type; unset: Cinder's default type.
    pub volume_type: Option<String>,
    /// Cinder availability zone; unset: Cinder's choice.
    pub availability_zone: Option<String>,
    /// The device path on the node.
    pub device: String,
    /// The ext4 file system's label, which the mount refers to.
    pub label: String,
    /// Where it is mounted.
    pub mount_path: String,
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
    /// A MachineHealthCheck for the control plane (`auto_healing_enabled`).
    pub health_check: bool,
    /// Files of control-plane nodes: every node's plus the audit policy.
    pub files: Vec<NodeFile>,
    /// The KubeadmControlPlane's `files`: [`ControlPlane::files`] (but on Flatcar, whose
    /// Ignition has them) and the files read from Secrets (the etcd encryption configuration).
    pub kubeadm_files: Vec<serde_json::Value>,
    /// Nova server group of the control plane (`server_group_policies`).
    pub server_group: Option<ServerGroup>,
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
    /// Nova server group of the nodegroup (its `server_group_policies`).
    pub server_group: Option<ServerGroup>,
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
    /// metrics-server (`metrics_server_enabled`, default on).
    pub metrics_server: Option<HelmChart>,
    /// kube-prometheus-stack (`monitoring_enabled`).
    pub monitoring: Option<HelmChart>,
    /// ingress-nginx behind a LoadBalancer Service (`ingress_controller=nginx`).
    pub ingress_nginx: Option<HelmChart>,
    /// Traefik behind a LoadBalancer Service (`ingress_controller=traefik`).
    pub ingress_traefik: Option<HelmChart>,
    /// Manila CSI (`manila_csi_enabled`).
    pub csi_manila: Option<CsiManila>,
    /// The NVIDIA GPU operator (`gpu_operator_enabled`).
    pub gpu_operator: Option<HelmChart>,
    /// k8s-keystone-auth (`keystone_auth_enabled`), delivered by the cloud-config
    /// ClusterResourceSet from a ConfigMap of manifests.
    pub keystone_auth: Option<KeystoneAuth>,
    /// The etcd defragmentation CronJob (`etcd_defrag_schedule`), delivered by the cloud-config
    /// ClusterResourceSet from a ConfigMap.
    pub etcd_defrag: Option<EtcdDefrag>,
    /// Container env of the addons that reach the cloud (CCM, Cinder CSI): the proxy's.
    pub cloud_env: Vec<NameValue>,
    /// Values the renderer merges into the HelmChartProxy of each chart, by chart name: its
    /// images under `container_infra_prefix` and the tags the image tag labels set.
    pub image_values: BTreeMap<String, serde_json::Value>,
}

/// The etcd defragmentation CronJob in a ConfigMap the cloud-config ClusterResourceSet applies.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdDefrag {
    pub resource_set_name: String,
    /// The CronJob as JSON (one document).
    pub manifest: String,
}

/// Manila CSI: the Manila controller, the NFS node plugin it forwards to, and a StorageClass.
/// k8s-keystone-auth in the workload cluster (docs/templates-and-labels.md, "Add-ons").
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeystoneAuth {
    /// The management-side ConfigMap holding the manifests (a ClusterResourceSet resource).
    pub resource_set_name: String,
    /// Image with tag (the tag follows the Kubernetes minor).
    pub image: String,
    /// Keystone's public URL (`/v3`).
    pub auth_url: String,
    /// PEM CA bundle for Keystone, when the service has one.
    pub ca: Option<String>,
    /// Its command-line flags.
    pub args: Vec<String>,
    /// Also the authorization webhook (`keystone_auth_authz_enabled`, default true).
    pub authorization: bool,
    /// The kube-system ConfigMap whose `policies` it enforces.
    pub policy_config_map: String,
    /// The ConfigMap the default policy is written to.
    pub default_policy_config_map: String,
    /// The default policy (JSON) for the cluster's project.
    pub default_policy: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CsiManila {
    pub chart: HelmChart,
    /// `csi-driver-nfs`, the node plugin of NFS shares.
    pub nfs_chart: HelmChart,
    /// Share network of new shares (`manila_csi_share_network_id`).
    pub share_network_id: Option<String>,
    /// Manila share type (`manila_csi_share_type`, default `default`).
    pub share_type: String,
    /// Share protocol (`manila_csi_share_protocol`: `NFS`).
    pub protocol: String,
}

/// One cluster autoscaler per cluster, on the management cluster in the cluster's namespace
/// (`--cloud-provider=clusterapi`): it scales the MachineDeployments that carry the autoscaler
/// annotations, watching the workload cluster through CAPI's kubeconfig Secret.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAutoscaler {
    /// Name of its Deployment, ServiceAccount and RoleBinding: `<cluster>-autoscaler`.
    pub name: String,
    /// The ClusterRole its RoleBinding grants in the cluster's namespace
    /// (`[capi] autoscaler_cluster_role`).
    pub cluster_role: String,
    /// Image with tag (the tag follows the Kubernetes minor unless `[capi] autoscaler_image_tag`).
    pub image: String,
    /// `--node-group-auto-discovery=clusterapi:namespace=<ns>,clusterName=<cluster>`: this
    /// cluster's MachineDeployments only.
    pub auto_discovery_arg: String,
    /// `<cluster>-kubeconfig`: CAPI's admin kubeconfig of the workload cluster (key `value`).
    pub kubeconfig_secret: String,
    /// Labels of its objects: the common ones plus `app.kubernetes.io/*`.
    pub labels: BTreeMap<String, String>,
    /// Its pods' labels (the Deployment's selector).
    pub selector: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cni {
    /// `calico`, `cilium` or `flannel` (the template's `network_driver`).
    pub kind: String,
    pub calico: bool,
    pub cilium: bool,
    pub flannel: bool,
    /// Flannel's backend (`flannel_backend`, default `vxlan`).
    pub flannel_backend: String,
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
    /// Whether the CCM serves `Service type=LoadBalancer` (`octavia_enabled`, default: the
    /// creator's catalog has Octavia); off, its service controller never calls Octavia.
    pub enabled: bool,
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

impl Values {
    /// Every server group the cluster's machines are placed in.
    pub fn server_groups(&self) -> Vec<&ServerGroup> {
        self.control_plane
            .server_group
            .iter()
            .chain(
                self.node_groups
                    .iter()
                    .filter_map(|n| n.server_group.as_ref()),
            )
            .collect()
    }
}

impl From<&ClusterCas> for CaValues {
    fn from(c: &ClusterCas) -> Self {
        let pair = |k: &crate::capi::pki::KeyPairPem| CaPair {
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

/// The control-plane machines' security group of cluster `capi_name`, when the driver makes the
/// groups (a restricted API, `capi::api_security`).
pub fn control_plane_group(capi_name: &str) -> String {
    format!("{capi_name}-secgroup-controlplane")
}

/// The workers' security group of cluster `capi_name` (as [`control_plane_group`]).
pub fn worker_group(capi_name: &str) -> String {
    format!("{capi_name}-secgroup-worker")
}
