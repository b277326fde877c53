//! The values document: everything the templates need to render one Magnum cluster, built by a
//! pure function from the template, cluster and nodegroups (`domain::spec`), the operator
//! settings, and the credential and CAs when they are to be written. The equivalent of the azimuth
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
//! | `etcd_blockdevice_size`\|`etcd_volume_size`, `etcd_blockdevice_type` (volume/local), `etcd_blockdevice_volume_type`\|`etcd_volume_type`, `etcd_blockdevice_volume_az` | etcd disk (`additionalBlockDevices` + `diskSetup`/`mounts` at `/var/lib/etcd`) |
//! | `docker_volume_type` (NG), with the nodegroup/cluster/template field `docker_volume_size` | containerd's own Cinder volume at `/var/lib/containerd` on every machine |
//! | `master_lb_floating_ip_enabled` | floating IP on the API (default true) |
//! | `api_master_lb_allowed_cidrs`\|`master_lb_allowed_cidrs` | API load balancer source CIDRs, with the management cluster's `egress_cidrs` (set, the API gets its load balancer, as magnum-capi-helm always made one; refused where nothing enforces them: no Octavia, `kube_vip_enabled`, a provider of `[capi] octavia_providers_without_allowed_cidrs`, no `egress_cidrs`) |
//! | `kube_vip_enabled`, `api_server_fixed_ip`, `kube_vip_interface`, `kube_vip_image` | the API on a virtual IP of the control-plane machines (kube-vip static pod) instead of an Octavia load balancer ([`vip`]); `api_server_fixed_ip` alone: the API load balancer's address |
//! | `octavia_enabled` | CCM's `Service type=LoadBalancer` (default: the creator's catalog has Octavia) |
//! | `octavia_provider`, `octavia_lb_algorithm`, `octavia_lb_healthcheck` | API LB and CCM |
//! | `api_server_lb_flavor`, `api_server_lb_availability_zone`, `api_server_floating_ip` | API LB |
//! | `fixed_subnet_cidr` | subnet CAPO creates when no fixed network is given |
//! | `extra_network_names`\|`extra_network_name` (NG) | extra ports on workers (space/comma list) |
//! | `calico_ipv4pool`\|`cilium_ipv4pool`\|`flannel_network_cidr`, `service_cluster_ip_range`, `dns_cluster_domain` | cluster networks |
//! | `container_infra_prefix` | kubeadm image repository (its registry trusts the registry CA) and the registry of every add-on image ([`CHART_IMAGES`], k8s-keystone-auth) |
//! | `cloud_provider_tag`, `cinder_csi_plugin_tag`, `manila_csi_plugin_tag`, `csi_attacher_tag`, `csi_provisioner_tag`, `csi_snapshotter_tag`, `csi_resizer_tag`, `csi_liveness_probe_tag`, `csi_node_driver_registrar_tag` | the tag of the image each names ([`CHART_IMAGES`]) |
//! | `containerd_registry_mirrors` | `registry=mirror-url,…`: containerd `hosts.toml` per registry, mirrors in order |
//! | `insecure_registries` | `host[:port],…`: TLS not verified (and plain HTTP) for these registries and mirrors |
//! | `containerd_registry_ca` | base64 PEM CA of private registries/mirrors (else `[capi] registry_ca`) |
//! | `audit_log_enabled`, `audit_log_maxage`\|`audit_log_max_age`, `audit_log_maxbackup`\|`audit_log_max_backup`, `audit_log_maxsize`\|`audit_log_max_size` | apiserver audit log (policy file, flags, hostPath volumes; defaults 30, 10, 100) |
//! | `server_group_policies` (NG) | Nova server group (`anti-affinity`, `soft-anti-affinity`, `affinity`, `soft-affinity`) of the control plane (cluster label) and of each nodegroup (its labels, else the cluster's) |
//! | `api_server_cert_sans`, `admission_control_list`, `api_server_tls_cipher_suites`, `kubelet_tls_cipher_suites` | apiserver/kubelet flags |
//! | `oidc_issuer_url`, `oidc_client_id`, `oidc_username_claim`, `oidc_username_prefix`, `oidc_groups_claim`, `oidc_groups_prefix` | apiserver OIDC |
//! | `auto_healing_enabled` (NG) | MachineHealthChecks (default true) |
//! | `auto_scaling_enabled`, `min_node_count`, `max_node_count` (NG) | autoscaler bounds |
//! | `calico_tag`, `cilium_tag`, `cilium_hubble_ui_enabled`, `flannel_tag`, `flannel_backend` (vxlan/host-gw/wireguard) | CNI chart version / Hubble / flannel backend |
//! | `metrics_server_enabled`, `monitoring_enabled`, `ingress_controller`, `manila_csi_enabled`, `manila_csi_share_network_id`, `manila_csi_share_type`, `manila_csi_share_protocol`, `gpu_operator_enabled` | optional add-ons (docs/templates-and-labels.md "Add-ons", [`OPTIONAL_ADDONS`]) |
//! | `keystone_auth_enabled`, `keystone_auth_authz_enabled` (default true), `keystone_auth_policy_configmap` | k8s-keystone-auth webhooks (docs/templates-and-labels.md "Add-ons") |
//! | `etcd_encryption_enabled` | Secrets encrypted at rest in etcd (default on for a new cluster; once on it stays on) |
//! | `etcd_defrag_schedule` | cron schedule of the etcd defragmentation CronJob (default Sundays 03:17; `off`) |
//! | `cinder_csi_enabled`, `csi_cinder_reclaim_policy`, `csi_cinder_volume_binding_mode`, `csi_cinder_fstype`, `csi_cinder_allow_volume_expansion`, `csi_cinder_availability_zone`, `csi_cinder_volume_type` | Cinder CSI and its StorageClass |
//!
//! Template fields besides labels: `http_proxy`, `https_proxy`, `no_proxy` (containerd and
//! kubelet drop-ins on every node, env of the CCM and Cinder CSI; `no_proxy` completed with
//! localhost, the pod/service/node networks, `.svc`, `.<dns domain>`, the API's SANs and
//! floating IP, and at boot the API endpoint); `network_driver` (calico, cilium, flannel); the
//! image's `os_distro` (else `cluster_distro`): cloud-init for ubuntu, debian, rocky, Ignition
//! for flatcar ([`Bootstrap`], `clc`), any other a [`ValuesError::Invalid`].
//!
//! Layout: `document` (the serialised types), `labels` (reading labels), `build` (the document
//! from the spec, cluster-wide parts), `addons` (optional add-ons and the autoscaler),
//! `nodegroups` (control plane and workers), `nodes` (proxies, registries, audit log, server
//! groups), `clc` (Flatcar's node settings as a Container Linux Config), `rows` (the
//! `render` command's cluster from API bodies). The Kubernetes-version rule is the domain's
//! ([`crate::domain::kube_version`]).

mod addons;
mod build;
mod clc;
mod cx;
mod document;
mod error;
mod hygiene;
mod images;
mod keystone;
mod labels;
mod nodegroups;
mod nodes;
mod rows;
mod versions;
mod vip;

pub use addons::{AUTOSCALER_TAGS, AddonSpec, OPTIONAL_ADDONS, autoscaler_tag};
pub use build::{Inputs, build};
pub use clc::{MAX_ADDITIONAL_CONFIG, mount_unit_name};
pub use cx::MAX_CLUSTER_NAME;
pub use document::Autoscale;
pub use document::*;
pub use document::{control_plane_group, worker_group};
pub use error::ValuesError;
pub use hygiene::{DEFRAG_LABEL, ENCRYPTION_KEY, ENCRYPTION_LABEL, encryption_secret_name};
pub use images::{
    CHART_IMAGES, ChartImage, ImageKey, merge as merge_values, tag_labels, under_prefix,
};
pub use keystone::default_policy as keystone_default_policy;
pub use nodegroups::{
    ANNOTATION_AUTOSCALER_MAX, ANNOTATION_AUTOSCALER_MIN, ANNOTATION_CAPACITY_PREFIX,
    nodegroup_object_name, sanitise_fragment, worker_size,
};
pub use nodes::{FLATCAR_KUBEADM_COMMANDS, SERVER_GROUP_POLICIES};
pub use rows::{ApiRows, placeholder_cas, placeholder_credentials, rows_from_api};
pub use vip::MANIFEST_PATH as KUBE_VIP_MANIFEST_PATH;

pub use crate::domain::kube_version::kube_version;

/// What can be checked of a template before any cluster uses it: the Kubernetes version rule,
/// the proxies, the network driver and its labels, and the labels of node settings (registries,
/// audit log, server groups), the add-ons' labels. Cluster create checks the whole document ([`build`]).
pub fn check_template(
    t: &crate::domain::spec::Template,
    config: &crate::config::CapiConfig,
) -> Result<(), ValuesError> {
    kube_version(
        &t.labels,
        t.resolved.kube_version.as_deref(),
        &config.default_kube_version,
    )?;
    let view = labels::LabelView::cluster(&t.labels);
    nodes::proxy(t, &[])?;
    nodes::registries(&view, config.registry_ca.as_deref())?;
    nodes::audit_log(&view)?;
    nodes::server_group(&view, "template")?;
    build::cni(&view, t.network_driver.as_deref(), config, "template")?;
    addons::check_labels(&view, config)?;
    images::check_labels(&view)?;
    Ok(())
}
