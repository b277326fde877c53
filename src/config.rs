//! Typed service configuration: the only place that reads the config file and the environment.
//!
//! One TOML file (`--config FILE`) plus `MAGNUM_CAPI__<SECTION>__<KEY>` environment overrides,
//! parsed once at start-up into the documented sections below. Unknown keys are an error.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Errors while reading or validating configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The whole configuration. Every section has defaults, so an empty file is valid.
#[derive(Debug, Clone, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub http: HttpConfig,
    pub database: DatabaseConfig,
    pub api: ApiConfig,
    pub quotas: QuotasConfig,
    pub service: ServiceConfig,
    pub operations: OperationsConfig,
    pub driver: DriverConfig,
    pub policy: PolicyConfig,
    pub keystone: KeystoneConfig,
    pub openstack: OpenStackConfig,
    pub capi: CapiConfig,
    pub upgrades: UpgradesConfig,
    pub api_proxy: ApiProxyConfig,
    pub log: LogConfig,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Text,
    /// One JSON object per line, with the span fields (request id, operation, cluster) on each.
    Json,
}

/// `[log]`: the log format (the level comes from `RUST_LOG`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// How each line is written.
    pub format: LogFormat,
}

/// `[keystone]`: how tokens are validated (what keystonemiddleware's `[keystone_authtoken]` is for
/// Magnum). The service authenticates with its own password or application credential and checks
/// every `X-Auth-Token` with `GET /v3/auth/tokens`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct KeystoneConfig {
    /// `false` is accepted only with `serve --dev` (identity then comes from development headers).
    pub enabled: bool,
    /// Keystone's URL, e.g. `http://keystone:5000/v3` (`/v3` optional).
    #[schemars(example = &"http://keystone.example.com:5000/v3")]
    pub auth_url: Option<String>,
    /// Password authentication of the service user: its name (it needs the `service` or
    /// `admin` role, which Keystone demands of whoever validates tokens).
    #[schemars(example = &"magnum")]
    pub username: Option<String>,
    /// Its password.
    #[schemars(with = "Option<String>", example = &"secret")]
    pub password: Option<secrecy::SecretString>,
    /// The project the service user's token is scoped to.
    #[schemars(example = &"service")]
    pub project_name: Option<String>,
    /// The service user's domain.
    pub user_domain_name: String,
    /// `project_name`'s domain.
    pub project_domain_name: String,
    /// Application-credential authentication of the service user (instead of
    /// username/password): the credential's id.
    #[schemars(example = &"0123456789abcdef0123456789abcdef")]
    pub application_credential_id: Option<String>,
    /// Its secret.
    #[schemars(with = "Option<String>", example = &"secret")]
    pub application_credential_secret: Option<secrecy::SecretString>,
    /// Region whose endpoints are used (catalog look-ups); any region when unset.
    #[schemars(example = &"RegionOne")]
    pub region_name: Option<String>,
    /// Endpoint interface used from the catalog: `public`, `internal` or `admin`.
    pub interface: String,
    /// CA bundle (PEM) for Keystone and the services found in the catalog.
    #[schemars(example = &"/etc/ssl/certs/openstack-ca.pem")]
    pub cafile: Option<std::path::PathBuf>,
    /// Skip TLS verification (testing only).
    pub insecure: bool,
    /// Seconds a validated token is trusted before it is checked again (never past its expiry).
    pub token_cache_time: u64,
    /// Upper bound of cached token validations.
    pub token_cache_size: u64,
    /// Seconds each call to Keystone may take.
    pub timeout_secs: u64,
    /// URI announced in `WWW-Authenticate: Keystone uri="…"` on 401 (default: `auth_url`).
    #[schemars(example = &"https://keystone.example.com/v3")]
    pub www_authenticate_uri: Option<String>,
}

impl Default for KeystoneConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            auth_url: None,
            username: None,
            password: None,
            project_name: None,
            user_domain_name: "Default".into(),
            project_domain_name: "Default".into(),
            application_credential_id: None,
            application_credential_secret: None,
            region_name: None,
            interface: "public".into(),
            cafile: None,
            insecure: false,
            token_cache_time: 300,
            token_cache_size: 10_000,
            timeout_secs: 10,
            www_authenticate_uri: None,
        }
    }
}

impl KeystoneConfig {
    /// The versioned public Keystone URL workload clusters validate tokens with:
    /// `www_authenticate_uri`, else `auth_url`.
    pub fn public_v3_url(&self) -> Option<String> {
        let url = self
            .www_authenticate_uri
            .as_ref()
            .or(self.auth_url.as_ref())?;
        let url = url.trim_end_matches('/');
        Some(if url.ends_with("/v3") {
            url.to_owned()
        } else {
            format!("{url}/v3")
        })
    }

    /// Whether requests are authenticated by Keystone (else: `--dev` header identity).
    pub fn active(&self) -> bool {
        self.enabled && self.auth_url.is_some()
    }

    fn validate(&self, dev: bool) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(format!("[keystone] {m}")));
        if !self.enabled {
            return if dev {
                Ok(())
            } else {
                bad("enabled = false is only accepted with `serve --dev`")
            };
        }
        if self.auth_url.is_none() {
            return if dev {
                Ok(())
            } else {
                bad("auth_url is required (or run `serve --dev`)")
            };
        }
        let app_cred = self.application_credential_id.is_some();
        if app_cred && self.application_credential_secret.is_none() {
            return bad("application_credential_id needs application_credential_secret");
        }
        if !app_cred
            && (self.username.is_none() || self.password.is_none() || self.project_name.is_none())
        {
            return bad(
                "username, password and project_name (or application_credential_id and \
                 application_credential_secret) are required",
            );
        }
        if !["public", "internal", "admin"].contains(&self.interface.as_str()) {
            return bad("interface must be public, internal or admin");
        }
        if self.token_cache_size == 0 || self.timeout_secs == 0 {
            return bad("token_cache_size and timeout_secs must be >= 1");
        }
        Ok(())
    }
}

/// `[openstack]`: calls to Glance, Nova and Neutron made with the caller's token.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OpenStackConfig {
    /// Seconds each call may take before the request fails with 503.
    pub timeout_secs: u64,
    /// Boot volume size (GB) assumed when the `boot_volume_size` label is absent (Magnum's
    /// `[cinder] default_boot_volume_size`); with 0, flavors need a root disk.
    pub default_boot_volume_size: i64,
}

impl Default for OpenStackConfig {
    fn default() -> Self {
        Self {
            timeout_secs: 10,
            default_boot_volume_size: 0,
        }
    }
}

/// `[capi]`: the management cluster and what is rendered onto it. The first four key names are
/// fixed for deployment tooling (devstack writes them).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CapiConfig {
    /// Kubeconfig of the management cluster; unset: `KUBECONFIG`, then in-cluster. With
    /// `serve --dev` and neither, an in-process simulated management cluster is started.
    #[schemars(example = &"/etc/magnum-capi/management-cluster.kubeconfig")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Namespaces are `<prefix>-<project_id>`.
    pub namespace_prefix: String,
    /// Operator overrides: a file here replaces the built-in template of the same name.
    #[schemars(example = &"/etc/magnum-capi/templates")]
    pub templates_dir: Option<std::path::PathBuf>,
    /// Server-side-apply field manager.
    pub field_manager: String,
    /// Pod network of every workload cluster (`calico_ipv4pool` / `cilium_ipv4pool` override it).
    pub pod_cidr: String,
    /// Service network (`service_cluster_ip_range` overrides it).
    pub service_cidr: String,
    /// Node subnet CAPO creates when no fixed network is given (`fixed_subnet_cidr` overrides it).
    pub node_cidr: String,
    /// Kubernetes version when neither `kube_tag` nor the image's `kube_version` gives one.
    pub default_kube_version: String,
    /// Octavia provider of the API load balancer and CCM (`octavia_provider` overrides it).
    pub octavia_provider: String,
    /// Octavia providers that cannot restrict a listener's source addresses: a cluster asking
    /// for `api_master_lb_allowed_cidrs` on one of them is refused (400) rather than left open.
    /// ovn-octavia-provider refuses `allowed_cidrs`, and CAPO silently drops them for it.
    pub octavia_providers_without_allowed_cidrs: Vec<String>,
    /// The addresses the unnamed management cluster's Cluster API reaches workload APIs from
    /// (its egress/NAT addresses, CIDRs): admitted by every `api_master_lb_allowed_cidrs`
    /// restriction so that CAPI never locks itself out. Empty: such restrictions are refused
    /// (400) on clusters placed there. `[[capi.management_clusters]] egress_cidrs` for the
    /// named ones.
    #[schemars(example = &vec!["203.0.113.0/28".to_string()])]
    pub egress_cidrs: Vec<String>,
    /// The kube-vip image of clusters with `kube_vip_enabled` (their API on a virtual IP of the
    /// control-plane machines instead of an Octavia load balancer); `kube_vip_image` overrides
    /// it, `container_infra_prefix` moves it like any other image.
    pub kube_vip_image: String,
    /// Minutes an update (resize, upgrade, nodegroup change) may take before `UPDATE_FAILED`.
    pub update_timeout_mins: u64,
    /// Milliseconds the status writer gathers other transactions' change notifications (an API
    /// write, the worker, another replica) into one pass after the first of them. Those
    /// transactions wrote their own statuses: only the writer's re-evaluation waits. At a few
    /// hundred creates a second, a pass per commit read each one's clusters in four statements,
    /// as much PostgreSQL time as the creates' own statement (docs/benchmarks.md). A change the
    /// watchers see is written at once, whatever this is. 0: a pass per wake-up; at most 60000
    /// (the writer's safety poll: a longer gather would wait for nothing).
    pub status_gather_ms: u64,
    /// Seconds an add-on (a CAAPH release) may stay installing or upgrading before the cluster's
    /// health counts it as failed (docs/templates-and-labels.md, "Add-on health").
    pub addon_install_timeout_secs: u64,
    /// Seconds CAPO may keep retrying an OpenStack error (its OpenStackCluster `Ready=False`
    /// with severity `Warning`, no `failureReason`: a Neutron or Octavia call it will try again)
    /// before the cluster is `CREATE_FAILED`/`UPDATE_FAILED` with that error; a failure CAPO
    /// calls terminal fails at once.
    pub openstack_retry_grace_secs: u64,
    /// Minutes a delete may take (CAPI's teardown and the cloud cleanup together, from the
    /// request) before the operation reports `DELETE_FAILED` with what is left.
    pub delete_timeout_mins: u64,
    /// On delete, remove the load balancers and volumes the workload's cloud-controller-manager
    /// and Cinder CSI created in the tenant project (docs/delete-cleanup.md).
    pub delete_cleanup: bool,
    /// Days a delete report (`<cluster>-delete-report`: what a finished delete kept or could not
    /// check) stays on the management cluster; the maintenance pass removes older ones. 0 keeps
    /// them until the operator removes them.
    pub delete_report_retention_days: u32,
    /// Seconds between passes of the delete cleanup while something is left.
    pub cleanup_poll_secs: u64,
    /// What a delete does when the cluster's credential Secret is gone (docs/delete-cleanup.md): `fail` (`DELETE_FAILED` naming it) or `service` (clean up with the service's
    /// own user, scoped to the cluster's project).
    pub cleanup_without_credential: CleanupWithoutCredential,
    /// What a delete does with the cluster's CSI volumes and the floating IPs OCCM allocated for
    /// it when its workload cluster (PersistentVolumes, Services) could not be read: `keep` them
    /// all or `delete` them.
    pub unread_volumes: UnreadVolumes,
    /// CA bundle written as `cacert` into each cluster's cloud-credentials Secret (the CA of the
    /// OpenStack endpoints); unset: `[keystone] cafile`, else none.
    #[schemars(example = &"/etc/ssl/certs/openstack-ca.pem")]
    pub cloud_ca_file: Option<std::path::PathBuf>,
    /// Interface the workload cluster's OpenStack clients use (`public` or `internal`).
    pub app_cred_interface: String,
    /// Directory of CAPI/CAPO CRD files; when set, the simulated management cluster validates
    /// every write against them.
    #[schemars(example = &"/var/lib/magnum-capi/crds")]
    pub crd_dir: Option<std::path::PathBuf>,
    /// Simulated management cluster (`serve --dev` / tests only): milliseconds each step takes.
    pub sim_step_ms: u64,
    /// Root volume size (GiB) of every machine when the `boot_volume_size` label is absent; 0
    /// boots from the flavor's disk. Keep it equal to `[openstack] default_boot_volume_size`,
    /// which decides whether diskless flavors pass validation.
    pub default_boot_volume_size: u32,
    /// Cinder type of those root volumes when `boot_volume_type` is absent (unset: Cinder's default).
    #[schemars(example = &"ssd")]
    pub default_boot_volume_type: Option<String>,
    /// Helm repository of the Calico `tigera-operator` chart.
    pub calico_chart_repo: String,
    /// `tigera-operator` chart version (= Calico version; the `calico_tag` label overrides it).
    pub calico_chart_version: String,
    /// Helm repository of the `cilium` chart.
    pub cilium_chart_repo: String,
    /// `cilium` chart version (the `cilium_tag` label overrides it).
    pub cilium_chart_version: String,
    /// Helm repository of the `flannel` chart (`network_driver=flannel`).
    pub flannel_chart_repo: String,
    /// `flannel` chart version (the `flannel_tag` label overrides it).
    pub flannel_chart_version: String,
    /// PEM CA bundle of the private registries every node trusts (containerd `hosts.toml`
    /// `ca`), unless the template gives its own (`containerd_registry_ca` label, base64 PEM).
    #[schemars(example = &"-----BEGIN CERTIFICATE-----\n…\n-----END CERTIFICATE-----\n")]
    pub registry_ca: Option<String>,
    /// Helm repository of the cloud-provider-openstack charts (CCM and Cinder CSI).
    pub openstack_chart_repo: String,
    /// `openstack-cloud-controller-manager` chart version; match it to the Kubernetes minor
    /// (chart 2.33.x is cloud-provider-openstack 1.33).
    pub ccm_chart_version: String,
    /// `openstack-cinder-csi` chart version (same rule).
    pub cinder_csi_chart_version: String,
    /// Chart versions by Kubernetes minor (`"1.33" = "2.33.1"`): the cluster's minor picks the
    /// CCM, Cinder CSI and Manila CSI charts at create and at each upgrade (docs/templates-and-labels.md, "Add-ons");
    /// a minor not listed gets `ccm_chart_version` / `cinder_csi_chart_version` /
    /// `manila_csi_chart_version`. Setting a table replaces the built-in one.
    pub ccm_chart_versions: MinorTable,
    /// `openstack-cinder-csi` chart versions by Kubernetes minor (as `ccm_chart_versions`).
    pub cinder_csi_chart_versions: MinorTable,
    /// `openstack-manila-csi` chart versions by Kubernetes minor (as `ccm_chart_versions`).
    pub manila_csi_chart_versions: MinorTable,
    /// Helm repository of the `metrics-server` chart (add-on `metrics_server_enabled`).
    pub metrics_server_chart_repo: String,
    /// `metrics-server` chart version.
    pub metrics_server_chart_version: String,
    /// Helm repository of `kube-prometheus-stack` (add-on `monitoring_enabled`).
    pub monitoring_chart_repo: String,
    /// `kube-prometheus-stack` chart version.
    pub monitoring_chart_version: String,
    /// Helm repository of `ingress-nginx` (add-on `ingress_controller=nginx`).
    pub ingress_nginx_chart_repo: String,
    /// `ingress-nginx` chart version.
    pub ingress_nginx_chart_version: String,
    /// Helm repository of `traefik` (add-on `ingress_controller=traefik`).
    pub traefik_chart_repo: String,
    /// `traefik` chart version.
    pub traefik_chart_version: String,
    /// `openstack-manila-csi` chart version (repository `openstack_chart_repo`; add-on
    /// `manila_csi_enabled`).
    pub manila_csi_chart_version: String,
    /// Helm repository of `csi-driver-nfs`, Manila CSI's NFS node plugin.
    pub nfs_csi_chart_repo: String,
    /// `csi-driver-nfs` chart version.
    pub nfs_csi_chart_version: String,
    /// Helm repository of the NVIDIA `gpu-operator` (add-on `gpu_operator_enabled`).
    pub gpu_operator_chart_repo: String,
    /// `gpu-operator` chart version.
    pub gpu_operator_chart_version: String,
    /// Image of the cluster autoscaler (run on the management cluster for clusters with an
    /// autoscaled nodegroup), without tag.
    pub autoscaler_image: String,
    /// Its tag; unset: the tag for the cluster's Kubernetes minor (docs/templates-and-labels.md, "Add-ons").
    #[schemars(example = &"v1.33.0")]
    pub autoscaler_image_tag: Option<String>,
    /// Autoscaler tags by Kubernetes minor; a minor not listed gets `v1.<minor>.0`.
    pub autoscaler_image_tags: MinorTable,
    /// The ClusterRole (installed with the service: deploy/kubernetes) each cluster's autoscaler
    /// is bound to in its namespace. The service holds `bind` on this one name only, so it
    /// creates no Role and needs no `escalate`.
    pub autoscaler_cluster_role: String,
    /// Image of k8s-keystone-auth (`keystone_auth_enabled`), without tag.
    pub keystone_auth_image: String,
    /// Its tags by Kubernetes minor (cloud-provider-openstack releases); other minors `v1.<minor>.0`.
    pub keystone_auth_image_tags: MinorTable,
    /// Keystone URL the workload clusters' k8s-keystone-auth validates tokens with (the public
    /// identity endpoint); unset: `[keystone] www_authenticate_uri`, else `[keystone] auth_url`.
    #[schemars(example = &"https://keystone.example.com/v3")]
    pub keystone_auth_url: Option<String>,
    /// The CA bundle (PEM) k8s-keystone-auth trusts for that URL: the one of `cloud_ca_file`
    /// (else `[keystone] cafile`), read at start-up; not a configuration key.
    #[serde(skip)]
    pub keystone_auth_ca: Option<String>,
    /// Days a client certificate signed by `POST /v1/certificates` is valid (never beyond the
    /// cluster CA).
    pub client_cert_validity_days: u32,
    /// Seconds between checks that each cluster's application credential still authenticates
    /// (0 = never check).
    pub credential_check_interval_secs: u64,
    /// Days an application credential created for a cluster lives (0 = no expiry). With an
    /// expiry the credential is created `unrestricted` so that it can renew itself (docs/clients.md).
    pub app_cred_expiry_days: u32,
    /// A credential with an expiry is renewed this many days before it.
    pub app_cred_renew_before_days: u32,
    /// Several management clusters (docs/install.md, "Many management clusters"): each cluster is placed
    /// on one at create. `kubeconfig` above, when also set, stays the unnamed one that holds
    /// the clusters recorded before (it takes no new ones while named ones exist).
    pub management_clusters: Vec<ManagementClusterConfig>,
    /// Seconds between reachability probes of each management cluster (an unreachable one
    /// defers its clusters' operations and says so in their health).
    pub probe_interval_secs: u64,
    /// `http://host:port` of `magnum-capi api-proxy` (docs/private-clusters.md): written as
    /// `proxy-url` into the `<cluster>-kubeconfig` Secret of every cluster whose API has no
    /// floating IP, with that cluster's credential (from `api_proxy_key`), so CAPI and the
    /// service's own workload reads go through it. Unset: none.
    #[schemars(example = &"http://192.0.2.10:3128")]
    pub api_proxy_url: Option<String>,
    /// The proxy key (base64 of 32 bytes), the proxies' `[api_proxy] key`: each private
    /// cluster's proxy credential is derived from it. Required with `api_proxy_url`.
    #[schemars(with = "Option<String>", example = &"base64 of 32 random bytes: head -c 32 /dev/urandom | base64")]
    pub api_proxy_key: Option<secrecy::SecretString>,
}

/// `[[capi.management_clusters]]`: one Cluster API installation clusters can be placed on.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ManagementClusterConfig {
    /// Recorded on each cluster placed here (lowercase letters, digits, `-`, `_`). Required.
    #[schemars(example = &"east")]
    pub name: String,
    /// Its kubeconfig; unset: the in-cluster service account.
    #[serde(default)]
    #[schemars(example = &"/etc/magnum-capi/east.kubeconfig")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The region it serves: clusters created in that region go here.
    #[serde(default)]
    #[schemars(example = &"RegionOne")]
    pub region: Option<String>,
    /// The availability zones it serves: clusters whose `availability_zone` label names one go
    /// here.
    #[serde(default)]
    pub availability_zones: Vec<String>,
    /// Projects whose clusters go here (after the template's `management_cluster` label).
    #[serde(default)]
    pub projects: Vec<String>,
    /// Share of new clusters when nothing else decides: fewest clusters relative to weight.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// `false`: draining, no new clusters are placed here (its clusters keep working).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// `serve --dev` only: an in-process simulated management cluster instead of a kubeconfig.
    #[serde(default)]
    pub simulated: bool,
    /// The addresses its Cluster API reaches workload APIs from (as `[capi] egress_cidrs` for
    /// the unnamed one): admitted by every `api_master_lb_allowed_cidrs` restriction of the
    /// clusters placed here; empty: such restrictions are refused (400) here.
    #[serde(default)]
    #[schemars(example = &vec!["198.51.100.7/32".to_string()])]
    pub egress_cidrs: Vec<String>,
}

fn default_weight() -> u32 {
    1
}

fn default_true() -> bool {
    true
}

impl ManagementClusterConfig {
    /// An enabled entry of weight 1 with nothing else set.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.into(),
            kubeconfig: None,
            region: None,
            availability_zones: Vec::new(),
            projects: Vec::new(),
            weight: 1,
            enabled: true,
            simulated: false,
            egress_cidrs: Vec::new(),
        }
    }
}

impl Default for CapiConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            namespace_prefix: "magnum".into(),
            templates_dir: None,
            field_manager: "magnum-capi".into(),
            pod_cidr: "172.16.0.0/13".into(),
            service_cidr: "172.24.0.0/13".into(),
            node_cidr: "10.0.0.0/24".into(),
            default_kube_version: "v1.33.5".into(),
            octavia_provider: "amphora".into(),
            octavia_providers_without_allowed_cidrs: vec!["ovn".into()],
            egress_cidrs: Vec::new(),
            kube_vip_image: "ghcr.io/kube-vip/kube-vip:v1.2.3".into(),
            update_timeout_mins: 60,
            status_gather_ms: 50,
            addon_install_timeout_secs: 1800,
            openstack_retry_grace_secs: 120,
            delete_timeout_mins: 30,
            delete_cleanup: true,
            delete_report_retention_days: 30,
            cleanup_poll_secs: 5,
            cleanup_without_credential: CleanupWithoutCredential::Fail,
            unread_volumes: UnreadVolumes::Keep,
            cloud_ca_file: None,
            app_cred_interface: "public".into(),
            crd_dir: None,
            sim_step_ms: 1000,
            default_boot_volume_size: 0,
            default_boot_volume_type: None,
            calico_chart_repo: "https://docs.tigera.io/calico/charts".into(),
            calico_chart_version: "v3.31.5".into(),
            cilium_chart_repo: "https://helm.cilium.io/".into(),
            cilium_chart_version: "1.19.3".into(),
            flannel_chart_repo: "https://flannel-io.github.io/flannel/".into(),
            flannel_chart_version: "v0.27.4".into(),
            registry_ca: None,
            openstack_chart_repo: "https://kubernetes.github.io/cloud-provider-openstack".into(),
            ccm_chart_version: "2.33.1".into(),
            cinder_csi_chart_version: "2.33.1".into(),
            // Verified against the release-1.N branches of kubernetes/cloud-provider-openstack.
            ccm_chart_versions: minor_table(&[
                ("1.30", "2.30.5"),
                ("1.31", "2.31.4"),
                ("1.32", "2.32.1"),
                ("1.33", "2.33.1"),
                ("1.34", "2.34.0"),
                ("1.35", "2.35.0"),
            ]),
            cinder_csi_chart_versions: minor_table(&[
                ("1.30", "2.30.3"),
                ("1.31", "2.31.8"),
                ("1.32", "2.32.2"),
                ("1.33", "2.33.1"),
                ("1.34", "2.34.0"),
                ("1.35", "2.35.0"),
            ]),
            manila_csi_chart_versions: minor_table(&[
                ("1.30", "2.30.3"),
                ("1.31", "2.31.5"),
                ("1.32", "2.32.1"),
                ("1.33", "2.33.1"),
                ("1.34", "2.34.0"),
                ("1.35", "2.35.0"),
            ]),
            metrics_server_chart_repo: "https://kubernetes-sigs.github.io/metrics-server/".into(),
            metrics_server_chart_version: "3.13.0".into(),
            monitoring_chart_repo: "https://prometheus-community.github.io/helm-charts".into(),
            monitoring_chart_version: "77.0.0".into(),
            ingress_nginx_chart_repo: "https://kubernetes.github.io/ingress-nginx".into(),
            ingress_nginx_chart_version: "4.13.0".into(),
            traefik_chart_repo: "https://traefik.github.io/charts".into(),
            traefik_chart_version: "37.3.0".into(),
            manila_csi_chart_version: "2.33.1".into(),
            nfs_csi_chart_repo:
                "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts"
                    .into(),
            nfs_csi_chart_version: "v4.11.0".into(),
            gpu_operator_chart_repo: "https://helm.ngc.nvidia.com/nvidia".into(),
            gpu_operator_chart_version: "v25.3.4".into(),
            autoscaler_image: "registry.k8s.io/autoscaling/cluster-autoscaler".into(),
            autoscaler_cluster_role: "magnum-capi-cluster-autoscaler".into(),
            autoscaler_image_tag: None,
            autoscaler_image_tags: minor_table(&[
                ("1.30", "v1.30.4"),
                ("1.31", "v1.31.1"),
                ("1.32", "v1.32.1"),
                ("1.33", "v1.33.0"),
                ("1.34", "v1.34.0"),
            ]),
            keystone_auth_image: "registry.k8s.io/provider-os/k8s-keystone-auth".into(),
            // cloud-provider-openstack release tags (the k8s-keystone-auth image's).
            keystone_auth_image_tags: minor_table(&[
                ("1.30", "v1.30.3"),
                ("1.31", "v1.31.4"),
                ("1.32", "v1.32.1"),
                ("1.33", "v1.33.1"),
                ("1.34", "v1.34.1"),
                ("1.35", "v1.35.0"),
            ]),
            keystone_auth_url: None,
            keystone_auth_ca: None,
            client_cert_validity_days: 365,
            credential_check_interval_secs: 300,
            app_cred_expiry_days: 0,
            app_cred_renew_before_days: 7,
            management_clusters: Vec::new(),
            probe_interval_secs: 10,
            api_proxy_url: None,
            api_proxy_key: None,
        }
    }
}

/// `[api_proxy]`: `magnum-capi api-proxy`, the HTTP CONNECT proxy to the API endpoints of
/// private clusters (docs/private-clusters.md), run where Neutron's namespaces are.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApiProxyConfig {
    /// Where the proxy listens (the address `[capi] api_proxy_url` names).
    pub bind: SocketAddr,
    /// The management cluster whose OpenStackClusters make the allowlist (unset: `KUBECONFIG`,
    /// then in-cluster).
    #[schemars(example = &"/etc/magnum-capi/management-cluster.kubeconfig")]
    pub kubeconfig: Option<PathBuf>,
    /// Where `ip netns` keeps its namespaces.
    pub netns_dir: PathBuf,
    /// The namespaces a private cluster's API is dialled from, the first present on this node
    /// wins: `{router_id}` and `{network_id}` are the OpenStackCluster's router and network.
    #[schemars(with = "Vec<String>")]
    pub namespaces: Vec<NetnsPattern>,
    /// Dial from the proxy's own network namespace when none of the cluster's is on this node
    /// (a proxy on a host with a leg in the tenant networks).
    pub dial_from_host: bool,
    /// Seconds a connection to an API endpoint may take to open.
    pub connect_timeout_secs: u64,
    /// The proxy key (base64 of 32 bytes), the service's `[capi] api_proxy_key`: a client must
    /// present the credential derived from it for the cluster it connects to. Required.
    #[schemars(with = "Option<String>", example = &"the service's [capi] api_proxy_key")]
    pub key: Option<secrecy::SecretString>,
    /// Connections being opened at once (each namespaced one on a thread of its own); a CONNECT
    /// beyond them is refused with 503.
    pub max_dials: usize,
}

impl ApiProxyConfig {
    /// `key`, which `magnum-capi api-proxy` needs: it opens nothing without authenticating.
    pub fn proxy_key(&self) -> Result<crate::proxy_auth::ProxyKey, ConfigError> {
        let key = self.key.as_ref().ok_or_else(|| {
            ConfigError::Invalid(
                "[api_proxy] key is required (the service's [capi] api_proxy_key; e.g. \
                 `head -c 32 /dev/urandom | base64`)"
                    .into(),
            )
        })?;
        crate::proxy_auth::ProxyKey::from_base64(key)
            .map_err(|e| ConfigError::Invalid(format!("[api_proxy] key: {e}")))
    }
}

impl Default for ApiProxyConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 3128)),
            kubeconfig: None,
            netns_dir: PathBuf::from("/run/netns"),
            // DHCP and OVN metadata namespaces first: each has its own port on the cluster's
            // network, while a standby L3-HA router's namespace exists but does not route.
            namespaces: vec![
                NetnsPattern::of_id("qdhcp-", NetnsId::Network),
                NetnsPattern::of_id("ovnmeta-", NetnsId::Network),
                NetnsPattern::of_id("qrouter-", NetnsId::Router),
            ],
            dial_from_host: false,
            connect_timeout_secs: 10,
            key: None,
            max_dials: 32,
        }
    }
}

/// Which id of an OpenStackCluster a namespace name holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsId {
    /// `{router_id}`: `status.router.id`.
    Router,
    /// `{network_id}`: `status.network.id`.
    Network,
}

/// One entry of `[api_proxy] namespaces`: a network namespace name with `{router_id}` and
/// `{network_id}` in it, parsed once, at load (the only place the placeholders are read).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct NetnsPattern(Vec<NetnsPart>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum NetnsPart {
    Text(String),
    Id(NetnsId),
}

impl NetnsPattern {
    /// `prefix` followed by the id.
    pub fn of_id(prefix: &str, id: NetnsId) -> Self {
        NetnsPattern(vec![NetnsPart::Text(prefix.into()), NetnsPart::Id(id)])
    }

    /// The namespace name for a cluster's router and network ids; `None` when it needs one that
    /// is unknown, or one that is not a plain name (letters, digits, `-`, `_`: Neutron's ids are
    /// UUIDs; anything else, a `/` above all, would name a file outside `netns_dir`).
    pub fn render(&self, router_id: Option<&str>, network_id: Option<&str>) -> Option<String> {
        let plain = |id: &str| {
            !id.is_empty()
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        let mut name = String::new();
        for part in &self.0 {
            match part {
                NetnsPart::Text(t) => name.push_str(t),
                NetnsPart::Id(which) => {
                    let id = match which {
                        NetnsId::Router => router_id,
                        NetnsId::Network => network_id,
                    }
                    .filter(|id| plain(id))?;
                    name.push_str(id);
                }
            }
        }
        Some(name)
    }
}

/// The pattern as written, `{router_id}` and `{network_id}` back in place (the reference's default).
impl From<NetnsPattern> for String {
    fn from(pattern: NetnsPattern) -> String {
        pattern
            .0
            .iter()
            .map(|part| match part {
                NetnsPart::Text(t) => t.as_str(),
                NetnsPart::Id(NetnsId::Router) => "{router_id}",
                NetnsPart::Id(NetnsId::Network) => "{network_id}",
            })
            .collect()
    }
}

impl TryFrom<String> for NetnsPattern {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let refuse = || {
            format!(
                "[api_proxy] namespaces: {text:?} may use {{router_id}} and {{network_id}} only, \
                 and no '/'"
            )
        };
        let mut parts = Vec::new();
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let (part, len) = if let Some(after) = rest.strip_prefix("{router_id}") {
                (NetnsPart::Id(NetnsId::Router), rest.len() - after.len())
            } else if let Some(after) = rest.strip_prefix("{network_id}") {
                (NetnsPart::Id(NetnsId::Network), rest.len() - after.len())
            } else {
                let len = rest.find('{').unwrap_or(rest.len());
                let literal = &rest[..len];
                if len == 0 || literal.contains(['}', '/']) {
                    return Err(refuse());
                }
                (NetnsPart::Text(literal.into()), len)
            };
            parts.push(part);
            rest = &rest[len..];
        }
        if parts.is_empty() {
            return Err(refuse());
        }
        Ok(NetnsPattern(parts))
    }
}

impl CapiConfig {
    /// `api_proxy_url` with `api_proxy_key` (docs/private-clusters.md): what each private
    /// cluster's kubeconfig gets as `proxy-url`; `None` without a proxy.
    pub fn api_proxy(&self) -> Result<Option<crate::proxy_auth::ProxyUrls>, ConfigError> {
        let Some(url) = &self.api_proxy_url else {
            return Ok(None);
        };
        let invalid = |e: crate::proxy_auth::ProxyAuthError| {
            ConfigError::Invalid(format!("[capi] api_proxy_url/api_proxy_key: {e}"))
        };
        let key = self.api_proxy_key.as_ref().ok_or_else(|| {
            ConfigError::Invalid(
                "[capi] api_proxy_key is required with api_proxy_url (the proxies' [api_proxy] \
                 key; e.g. `head -c 32 /dev/urandom | base64`)"
                    .into(),
            )
        })?;
        let key = crate::proxy_auth::ProxyKey::from_base64(key).map_err(invalid)?;
        crate::proxy_auth::ProxyUrls::new(url, key)
            .map(Some)
            .map_err(invalid)
    }

    fn validate_management_clusters(&self) -> Result<(), ConfigError> {
        check_egress_cidrs("[capi]", &self.egress_cidrs)?;
        let mut seen = std::collections::HashSet::new();
        for m in &self.management_clusters {
            let valid = !m.name.is_empty()
                && m.name.len() <= 63
                && m.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if !valid {
                return Err(ConfigError::Invalid(format!(
                    "[[capi.management_clusters]] name {:?}: 1-63 lowercase letters, digits, '-' \
                     or '_'",
                    m.name
                )));
            }
            if !seen.insert(m.name.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "[[capi.management_clusters]] name {:?} is given twice",
                    m.name
                )));
            }
            check_egress_cidrs(
                &format!("[[capi.management_clusters]] {}", m.name),
                &m.egress_cidrs,
            )?;
            if m.weight == 0 {
                return Err(ConfigError::Invalid(format!(
                    "[[capi.management_clusters]] {}: weight must be >= 1 (use enabled = false \
                     to drain it)",
                    m.name
                )));
            }
        }
        Ok(())
    }
}

/// The status writer's safety poll (one minute), which is also the longest `[capi]
/// status_gather_ms`.
pub const STATUS_SAFETY_POLL_MS: u64 = 60_000;

/// Each of `cidrs` must be a CIDR (`egress_cidrs` end up in Octavia's `allowed_cidrs`).
fn check_egress_cidrs(section: &str, cidrs: &[String]) -> Result<(), ConfigError> {
    for c in cidrs {
        c.parse::<ipnet::IpNet>().map_err(|_| {
            ConfigError::Invalid(format!(
                "{section} egress_cidrs {c:?}: must be a CIDR like 203.0.113.0/28"
            ))
        })?;
    }
    Ok(())
}

/// Versions by Kubernetes minor, keyed `"1.<minor>"`.
pub type MinorTable = std::collections::BTreeMap<String, String>;

fn minor_table(pairs: &[(&str, &str)]) -> MinorTable {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `[policy]`: operator overrides of Magnum's default policy.
#[derive(Debug, Clone, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// oslo.policy YAML (or JSON) file with rule overrides, e.g. `/etc/magnum/policy.yaml`;
    /// rules it does not name keep Magnum's defaults. A bad rule stops start-up.
    #[schemars(example = &"/etc/magnum/policy.yaml")]
    pub file: Option<std::path::PathBuf>,
}

/// `[http]`: where the API listens.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Listen address (`127.0.0.1:9511` by default; Magnum's port).
    pub bind: SocketAddr,
    /// Seconds a request may take before it is answered 503; `0` disables the limit.
    pub request_timeout_secs: u64,
    /// A second listener serving only `/metrics`, unauthenticated (for Prometheus on an
    /// internal network). Unset: `/metrics` is served on the API port only.
    #[schemars(example = &"0.0.0.0:9512")]
    pub metrics_bind: Option<SocketAddr>,
    /// `/metrics` on the API port without a token; otherwise it needs an admin's token.
    pub metrics_public: bool,
    /// `/metrics` also carries openstack-exporter's container-infra families
    /// (`openstack_container_infra_cluster_status`, `…_cluster_masters`, `…_cluster_nodes`,
    /// `…_total_clusters`, `…_up`) with its labels, a series of each per cluster, so its
    /// dashboards and alerts work unchanged. Three series per cluster: turn off where a scrape
    /// of every cluster is too much.
    pub metrics_per_cluster: bool,
    /// PEM certificate chain (leaf first) served on `bind`: the API speaks HTTPS. Set with
    /// `tls_key_file`, or neither (plain HTTP). Replaced files are picked up at the next
    /// connection, without a restart; a pair that does not load keeps the previous one.
    /// The metrics listener (`metrics_bind`) stays plain HTTP.
    #[schemars(example = &"/etc/magnum-capi/tls/tls.crt")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of `tls_cert_file`.
    #[schemars(example = &"/etc/magnum-capi/tls/tls.key")]
    pub tls_key_file: Option<PathBuf>,
    /// Addresses or CIDRs (`10.0.0.0/8`, `192.0.2.7`, `fd00::/8`) of the reverse proxies whose
    /// `Forwarded` / `X-Forwarded-Proto` / `-Host` / `-Prefix` / `-For` headers say how the
    /// client addressed the API (the `links` it follows). From any other TCP peer they are
    /// ignored. Empty by default: no proxy is trusted.
    #[serde(deserialize_with = "addresses_or_cidrs")]
    #[schemars(with = "Vec<String>")]
    pub trusted_proxies: Vec<IpNet>,
}

/// `"192.0.2.7"` or `"10.0.0.0/8"`: an address is a network of one.
fn addresses_or_cidrs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let given = Vec::<String>::deserialize(d)?;
    given
        .iter()
        .map(|s| {
            let s = s.trim();
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "[http] trusted_proxies: {s:?} is neither an IP address nor a CIDR"
                    ))
                })
        })
        .collect()
}

impl HttpConfig {
    /// The certificate and key files of `[http]`, when the API speaks HTTPS.
    pub fn tls(&self) -> Option<(&Path, &Path)> {
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        }
    }

    /// Whether `peer` is one of `trusted_proxies`.
    pub fn trusts(&self, peer: std::net::IpAddr) -> bool {
        // An IPv4 peer on a dual-stack socket shows as `::ffff:a.b.c.d`.
        let peer = match peer {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, std::net::IpAddr::V4),
            v4 => v4,
        };
        self.trusted_proxies.iter().any(|n| n.contains(&peer))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(_), None) | (None, Some(_)) => Err(ConfigError::Invalid(
                "[http] tls_cert_file and tls_key_file go together: set both (HTTPS) or neither \
                 (plain HTTP)"
                    .into(),
            )),
            _ => Ok(()),
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 9511)),
            request_timeout_secs: 60,
            metrics_bind: None,
            metrics_public: false,
            metrics_per_cluster: true,
            tls_cert_file: None,
            tls_key_file: None,
            trusted_proxies: Vec::new(),
        }
    }
}

/// `[database]`: the PostgreSQL that holds all state.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `postgres://user:pass@host:port/db`. Required outside `serve --dev`.
    #[schemars(example = &"postgres://magnum:secret@127.0.0.1:5432/magnum")]
    pub url: Option<String>,
    /// Upper bound of pooled connections (each `LISTEN` follower's among them). The one
    /// connection that records creates and the `kept_read_connections` come on top.
    pub max_connections: u32,
    /// Connections kept open while idle.
    pub min_connections: u32,
    /// Seconds to wait for a free connection before the request fails with 503.
    pub acquire_timeout_secs: u64,
    /// Run pending migrations when `serve` starts (otherwise use `magnum-capi migrate`).
    pub migrate_on_start: bool,
    /// Milliseconds between the heartbeats of each `LISTEN` connection (`src/db/events.rs`): a
    /// connection that died without a word (failover without a reset, dropped packets) is
    /// noticed within three, and serialised views stop being reused until it is back.
    pub listen_heartbeat_ms: u64,
    /// Milliseconds a statement recording creates may run on its kept connection
    /// (`db::creates::Recorder`): PostgreSQL's `statement_timeout` there; with half as much
    /// again for the network, a batch without an answer counts its connection lost.
    pub creates_timeout_ms: u64,
    /// Connections kept open beside the pool for the API's one-statement reads (shows, pages,
    /// look-ups; `db::kept`): a read on one hands it back without the round trip the pool
    /// makes for every connection handed back to it. When all are busy a read uses the pool.
    /// 0: every read uses the pool.
    pub kept_read_connections: u32,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            max_connections: 20,
            min_connections: 1,
            acquire_timeout_secs: 10,
            migrate_on_start: true,
            listen_heartbeat_ms: 2000,
            creates_timeout_ms: 10_000,
            kept_read_connections: 8,
        }
    }
}

impl DatabaseConfig {
    /// The heartbeat of `LISTEN` connections (at least 50 ms).
    pub fn listen_heartbeat(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.listen_heartbeat_ms.max(50))
    }

    /// The bound of a statement recording creates (at least 100 ms).
    pub fn creates_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.creates_timeout_ms.max(100))
    }
}

/// `[api]`: knobs of the HTTP surface.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Largest page a list returns (Magnum's `[api] max_limit`); also the default page size.
    pub max_limit: i64,
    /// Network drivers templates may use (Magnum's `kubernetes_allowed_network_drivers`).
    pub allowed_network_drivers: Vec<String>,
    /// Network driver stored when a template does not name one.
    pub default_network_driver: String,
    /// Driver name stored in `driver` of new templates when neither request nor image names one.
    pub default_driver: String,
    /// MiB of serialised cluster and template views kept for reuse until their data changes
    /// (`src/view_cache.rs`); 0 builds every response from PostgreSQL.
    pub view_cache_mib: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            max_limit: 1000,
            allowed_network_drivers: vec!["all".into()],
            default_network_driver: "calico".into(),
            default_driver: "k8s_capi_rust_v1".into(),
            view_cache_mib: 64,
        }
    }
}

/// `[quotas]`: defaults when no quota row exists for a project.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QuotasConfig {
    /// Clusters a project may own when no quota row says otherwise.
    pub max_clusters_per_project: i64,
}

impl Default for QuotasConfig {
    fn default() -> Self {
        Self {
            max_clusters_per_project: 20,
        }
    }
}

/// `[upgrades]`: what a cluster upgrade checks before anything changes, which Kubernetes minors
/// are still supported upstream, and the nodegroup flavor change extension (docs/operate.md,
/// "Upgrading clusters").
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UpgradesConfig {
    /// Minor versions a nodegroup's kubelets may lag the control plane an upgrade moves to
    /// (Kubernetes' version skew policy: 3 since 1.28); an upgrade that would exceed it is a 400.
    pub max_kubelet_skew: u64,
    /// Check that the project's compute quota (Nova's limits) has room for the machines a rolling
    /// upgrade adds (one per control plane and per nodegroup); skipped when it cannot be read.
    pub check_quota: bool,
    /// End of upstream support of each Kubernetes minor (`"1.<minor>" = "YYYY-MM-DD"`, as
    /// kubernetes.io/releases publishes them). A cluster on a minor past its date, or older than
    /// every minor listed, says so in `health_status_reason` (`kubernetes`); an empty table
    /// checks nothing.
    pub kubernetes_end_of_life: MinorTable,
    /// Extension (off: Magnum's 400): `PATCH /v1/clusters/{c}/nodegroups/{ng}` may replace
    /// `/flavor_id`, and the nodegroup's machines are replaced by ones of the new flavor.
    pub nodegroup_flavor_change: bool,
}

impl Default for UpgradesConfig {
    fn default() -> Self {
        Self {
            max_kubelet_skew: 3,
            check_quota: true,
            kubernetes_end_of_life: minor_table(&[
                ("1.29", "2025-02-28"),
                ("1.30", "2025-06-28"),
                ("1.31", "2025-10-28"),
                ("1.32", "2026-02-28"),
                ("1.33", "2026-06-28"),
                ("1.34", "2026-10-27"),
                ("1.35", "2027-02-28"),
                ("1.36", "2027-06-28"),
            ]),
            nodegroup_flavor_change: false,
        }
    }
}

impl UpgradesConfig {
    /// The end-of-life table, parsed (checked when the configuration is read).
    pub fn end_of_life(&self) -> Result<crate::domain::kube_support::EndOfLife, ConfigError> {
        crate::domain::kube_support::EndOfLife::parse(&self.kubernetes_end_of_life)
            .map_err(|e| ConfigError::Invalid(format!("[upgrades] kubernetes_end_of_life: {e}")))
    }
}

/// `[service]`: how this replica shows up in `GET /v1/mservices`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// Host name reported for this replica; defaults to the machine's host name.
    #[schemars(example = &"api-1")]
    pub host: Option<String>,
    /// Seconds between heartbeats.
    pub report_interval_secs: u64,
    /// A replica not seen for this many seconds is reported `down` (Magnum's `service_down_time`).
    pub service_down_time_secs: i64,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            host: None,
            report_interval_secs: 10,
            service_down_time_secs: 180,
        }
    }
}

/// `[operations]`: the durable queue of cluster operations.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OperationsConfig {
    /// Run the queue worker in this process.
    pub worker_enabled: bool,
    /// The safety poll: milliseconds an idle worker waits at most. New work wakes a worker on
    /// every replica at once (PostgreSQL `LISTEN/NOTIFY`; one that claims it wakes the next),
    /// and retries or expired leases when they come due; this only bounds what a lost
    /// notification could delay.
    pub poll_interval_ms: u64,
    /// Seconds a claimed operation stays leased to a replica; a crashed replica's work is retried after it.
    pub lease_secs: i64,
    /// Attempts before an operation is given up and its resource marked `*_FAILED`.
    pub max_attempts: i32,
    /// First retry delay in milliseconds; doubles on every attempt.
    pub retry_base_ms: i64,
    /// Operations executed concurrently by this replica.
    pub concurrency: usize,
    /// Key (base64 of 32 bytes) sealing the caller's token into a create operation, so the
    /// worker creates the cluster's application credential as the caller. Give every replica
    /// the same key. Required outside `serve --dev` (this or `seal_key_file`); in development
    /// one is generated per process when unset.
    #[schemars(example = &"base64 of 32 random bytes: head -c 32 /dev/urandom | base64")]
    #[schemars(with = "Option<String>")]
    pub seal_key: Option<secrecy::SecretString>,
    /// A file holding the current key on its first line and previous keys on the following
    /// ones (a mounted Secret), read at start instead of `seal_key`.
    #[schemars(example = &"/etc/magnum-capi/seal.key")]
    pub seal_key_file: Option<std::path::PathBuf>,
    /// Keys sealing no longer but still opening what they sealed: after a rotation, keep the
    /// old key here until no operation sealed with it is left (the longest a create waits for
    /// its credential: minutes).
    #[schemars(with = "Vec<String>")]
    pub previous_seal_keys: Vec<secrecy::SecretString>,
    /// How long an operation sealed with a key this replica does not hold waits for a replica
    /// that holds it (handed back to the queue, no attempt counted) before it fails, saying
    /// which key is missing.
    pub unseal_wait_secs: u64,
    /// The keys `seal_key_file` held: read once, by [`Config::load`] (never from the file again).
    #[serde(skip)]
    file_keys: Option<SealKeys>,
}

/// The sealing keys as configured: the current one (None: none configured) and the previous.
#[derive(Debug, Clone)]
pub struct SealKeys {
    pub current: Option<secrecy::SecretString>,
    pub previous: Vec<secrecy::SecretString>,
}

impl OperationsConfig {
    /// Reads `seal_key_file` (the current key on its first line, previous ones on the following;
    /// `#` lines ignored) into the typed configuration; done once, by [`Config::load`]. Setting
    /// both `seal_key` and `seal_key_file` is refused (which would win is not obvious).
    fn read_seal_key_file(&mut self) -> Result<(), ConfigError> {
        let path = match (&self.seal_key, &self.seal_key_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid(
                    "[operations] set seal_key or seal_key_file, not both".into(),
                ));
            }
            (_, None) => return Ok(()),
            (None, Some(path)) => path,
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::Invalid(format!(
                "[operations] seal_key_file {}: {e}",
                path.display()
            ))
        })?;
        let mut lines = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| secrecy::SecretString::from(l.to_string()));
        let current = lines.next().ok_or_else(|| {
            ConfigError::Invalid(format!(
                "[operations] seal_key_file {} holds no key",
                path.display()
            ))
        })?;
        self.file_keys = Some(SealKeys {
            current: Some(current),
            previous: lines.collect(),
        });
        Ok(())
    }

    /// The key ring from `seal_key` / `seal_key_file` (as [`Config::load`] read it) and
    /// `previous_seal_keys`.
    pub fn seal_keys(&self) -> Result<SealKeys, ConfigError> {
        let mut previous = self.previous_seal_keys.clone();
        let current = match (&self.seal_key, &self.seal_key_file, &self.file_keys) {
            (Some(_), Some(_), _) => {
                return Err(ConfigError::Invalid(
                    "[operations] set seal_key or seal_key_file, not both".into(),
                ));
            }
            (Some(k), None, _) => Some(k.clone()),
            (None, Some(_), Some(file)) => {
                previous.extend(file.previous.iter().cloned());
                file.current.clone()
            }
            (None, Some(path), None) => {
                return Err(ConfigError::Invalid(format!(
                    "[operations] seal_key_file {}: not read (only Config::load reads it)",
                    path.display()
                )));
            }
            (None, None, _) => None,
        };
        Ok(SealKeys { current, previous })
    }

    /// The key ring, checked (every key 32 bytes of base64).
    pub fn sealer(&self) -> Result<crate::seal::Sealer, ConfigError> {
        let keys = self.seal_keys()?;
        crate::seal::Sealer::new(keys.current.as_ref(), &keys.previous)
            .map_err(|e| ConfigError::Invalid(format!("[operations] seal keys: {e}")))
    }
}

impl Default for OperationsConfig {
    fn default() -> Self {
        Self {
            worker_enabled: true,
            poll_interval_ms: 30_000,
            lease_secs: 300,
            max_attempts: 5,
            retry_base_ms: 2000,
            concurrency: 4,
            seal_key: None,
            seal_key_file: None,
            previous_seal_keys: Vec::new(),
            unseal_wait_secs: 600,
            file_keys: None,
        }
    }
}

/// `[capi] cleanup_without_credential`: how a delete cleans up once the cluster's credential
/// Secret is gone. Never skipped silently.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CleanupWithoutCredential {
    /// The delete fails (`DELETE_FAILED`) saying what could not be cleaned and why.
    Fail,
    /// The cleanup acts as the service's own user scoped to the cluster's project (the user
    /// needs a role there; password authentication only).
    Service,
}

/// `[capi] unread_volumes`: the CSI volumes (and OCCM's floating IPs) of a cluster whose
/// PersistentVolumes and Services could not be read before its machines went.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnreadVolumes {
    /// Kept, and reported (a `Retain` or a `keep-floatingip` cannot be ruled out).
    Keep,
    /// Deleted like those of a `Delete` PersistentVolume.
    Delete,
}

/// Which driver executes recorded operations.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    /// Cluster API on a management cluster (`[capi]`); with `serve --dev` and no kubeconfig, an
    /// in-process simulated management cluster.
    Capi,
    /// Completes every operation at once without any management cluster (API tests only; a
    /// build without the `dev` feature refuses it).
    Simulated,
}

/// `[driver]`: the executor of cluster operations.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DriverConfig {
    /// Which driver executes the operations.
    pub kind: DriverKind,
    /// Simulated driver only: milliseconds the simulated world takes to carry an operation
    /// out (the operation is parked meanwhile, holding no worker).
    pub simulated_delay_ms: u64,
    /// Simulated driver only: milliseconds one run of an operation itself takes, holding its
    /// worker (a slow management-cluster API); for tests of leases and graceful hand-back.
    pub simulated_run_ms: u64,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            kind: DriverKind::Capi,
            simulated_delay_ms: 0,
            simulated_run_ms: 0,
        }
    }
}

/// Prefix of the environment variables that override file values.
pub const ENV_PREFIX: &str = "MAGNUM_CAPI";

impl Config {
    /// Reads `file` (if given) and the environment, then validates the result.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder();
        if let Some(path) = file {
            builder = builder.add_source(
                config::File::from(path)
                    .format(config::FileFormat::Toml)
                    .required(true),
            );
        }
        builder = builder.add_source(
            config::Environment::with_prefix(ENV_PREFIX)
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                .list_separator(",")
                .with_list_parse_key("api.allowed_network_drivers")
                .with_list_parse_key("http.trusted_proxies")
                .with_list_parse_key("api_proxy.namespaces"),
        );
        let mut cfg: Config = builder.build()?.try_deserialize()?;
        cfg.operations.read_seal_key_file()?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks what only `serve` needs (the other commands never authenticate anyone).
    pub fn validate_for_serve(&self, dev: bool) -> Result<(), ConfigError> {
        self.refuse_development_only(dev)?;
        self.keystone.validate(dev)?;
        self.capi.api_proxy()?;
        // Every replica must open what any other sealed: a key generated per process would fail
        // creates claimed by another replica.
        // The key itself was read and checked by `Config::load` (`validate`).
        if !dev && self.operations.seal_key.is_none() && self.operations.seal_key_file.is_none() {
            return Err(ConfigError::Invalid(
                "[operations] seal_key or seal_key_file is required outside `serve --dev` (the \
                 same key on every replica; e.g. `head -c 32 /dev/urandom | base64`)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// A build with the `dev` feature has every development shortcut.
    #[cfg(feature = "dev")]
    fn refuse_development_only(&self, _dev: bool) -> Result<(), ConfigError> {
        Ok(())
    }

    /// A production build (no `dev` feature) has no development identity and no simulated
    /// backend: a configuration asking for one is refused, naming what to set instead.
    #[cfg(not(feature = "dev"))]
    fn refuse_development_only(&self, dev: bool) -> Result<(), ConfigError> {
        const BUILD: &str = "this build has no `dev` feature";
        let refuse = |m: String| Err(ConfigError::Invalid(m));
        if dev {
            return refuse(format!(
                "`serve --dev` is not available: {BUILD} (build with the default features)"
            ));
        }
        if !self.keystone.active() {
            return refuse(format!(
                "[keystone] auth_url is required: {BUILD}, so there is no identity from \
                 X-User-Id / X-Project-Id / X-Roles headers (and [keystone] enabled must be true)"
            ));
        }
        if self.driver.kind == DriverKind::Simulated {
            return refuse(format!(
                "[driver] kind = \"simulated\" is not available: {BUILD}; use \"capi\""
            ));
        }
        if let Some(m) = self.capi.management_clusters.iter().find(|m| m.simulated) {
            return refuse(format!(
                "[[capi.management_clusters]] {}: simulated = true is not available: {BUILD}",
                m.name
            ));
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.upgrades.end_of_life()?;
        if self.api.max_limit < 1 {
            return Err(ConfigError::Invalid("[api] max_limit must be >= 1".into()));
        }
        if self.quotas.max_clusters_per_project < 0 {
            return Err(ConfigError::Invalid(
                "[quotas] max_clusters_per_project must be >= 0".into(),
            ));
        }
        if self.database.max_connections == 0 {
            return Err(ConfigError::Invalid(
                "[database] max_connections must be >= 1".into(),
            ));
        }
        if self.operations.lease_secs < 1 || self.operations.max_attempts < 1 {
            return Err(ConfigError::Invalid(
                "[operations] lease_secs and max_attempts must be >= 1".into(),
            ));
        }
        if self.operations.concurrency == 0 {
            return Err(ConfigError::Invalid(
                "[operations] concurrency must be >= 1".into(),
            ));
        }
        self.http.validate()?;
        // The keys come from Secrets (the environment) and are required where used: `serve`
        // (`validate_for_serve`) and `api-proxy`; what is given is checked here.
        if let Some(url) = &self.capi.api_proxy_url {
            crate::proxy_auth::check_url(url)
                .map_err(|e| ConfigError::Invalid(format!("[capi] api_proxy_url: {e}")))?;
        }
        if let Some(key) = &self.capi.api_proxy_key {
            crate::proxy_auth::ProxyKey::from_base64(key)
                .map_err(|e| ConfigError::Invalid(format!("[capi] api_proxy_key: {e}")))?;
        }
        if self.api_proxy.key.is_some() {
            self.api_proxy.proxy_key()?;
        }
        if self.capi.status_gather_ms > STATUS_SAFETY_POLL_MS {
            return Err(ConfigError::Invalid(format!(
                "[capi] status_gather_ms must be at most {STATUS_SAFETY_POLL_MS}"
            )));
        }
        if self.api_proxy.max_dials == 0 {
            return Err(ConfigError::Invalid(
                "[api_proxy] max_dials must be >= 1".into(),
            ));
        }
        self.validate_management_clusters()?;
        self.operations.sealer()?;
        Ok(())
    }

    /// Checks `[[capi.management_clusters]]` (again, after the command line added some).
    pub fn validate_management_clusters(&self) -> Result<(), ConfigError> {
        self.capi.validate_management_clusters()
    }

    /// The host name this replica reports.
    pub fn service_host(&self) -> String {
        self.service.host.clone().unwrap_or_else(|| {
            hostname::get()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(toml: &str) -> Config {
        config::Config::builder()
            .add_source(config::File::from_str(toml, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap()
    }

    #[test]
    fn namespace_patterns_are_parsed_once_and_render_only_plain_ids() {
        let cfg = parsed(
            "[api_proxy]\nnamespaces = [\"qrouter-{router_id}\", \"x{network_id}-{router_id}\", \"fixed\"]\n",
        );
        let names: Vec<Option<String>> = cfg
            .api_proxy
            .namespaces
            .iter()
            .map(|p| p.render(Some("r1"), Some("n1")))
            .collect();
        assert_eq!(
            names,
            [
                Some("qrouter-r1".into()),
                Some("xn1-r1".into()),
                Some("fixed".into())
            ]
        );
        let router = &cfg.api_proxy.namespaces[0];
        assert_eq!(router.render(None, Some("n1")), None, "an unknown id");
        for id in ["../../proc/1/ns/net", "a/b", "", "r 1"] {
            assert_eq!(
                router.render(Some(id), None),
                None,
                "{id:?} is not a plain id"
            );
        }
        assert_eq!(
            ApiProxyConfig::default()
                .namespaces
                .iter()
                .map(|p| p.render(Some("r"), Some("n")))
                .collect::<Vec<_>>(),
            [
                Some("qdhcp-n".into()),
                Some("ovnmeta-n".into()),
                Some("qrouter-r".into())
            ]
        );
        for bad in ["{project_id}", "a/{router_id}", "", "x}", "{router_id"] {
            let err = NetnsPattern::try_from(bad.to_string()).unwrap_err();
            assert!(
                err.contains("may use {router_id} and {network_id} only"),
                "{bad}: {err}"
            );
        }
    }

    /// Keystone and a sealing key: what `serve` needs outside development.
    const KEYSTONE: &str = "[keystone]\nauth_url = \"http://k/v3\"\nusername = \"magnum\"\n\
                            password = \"pw\"\nproject_name = \"service\"\n\
                            [operations]\nseal_key = \"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\"\n";

    fn refusal(cfg: &Config, dev: bool) -> String {
        match cfg.validate_for_serve(dev) {
            Ok(()) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[cfg(feature = "dev")]
    #[test]
    fn development_builds_accept_header_identity_and_simulated_backends_with_serve_dev() {
        let cfg = parsed("[driver]\nkind = \"simulated\"\n");
        assert_eq!(refusal(&cfg, true), "");
        assert!(refusal(&cfg, false).contains("auth_url"));
        assert_eq!(refusal(&parsed(KEYSTONE), false), "");
    }

    /// The proxy key is required where it is used (`serve` with `api_proxy_url`, `api-proxy`),
    /// and whatever is given is checked at load.
    #[cfg(feature = "dev")]
    #[test]
    fn the_api_proxy_key_is_required_where_used_and_checked_where_given() {
        let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let url = "[capi]\napi_proxy_url = \"http://proxy:3128\"\n";
        let e = refusal(&parsed(url), true);
        assert!(e.contains("api_proxy_key is required"), "{e}");
        let with_key = parsed(&format!("{url}api_proxy_key = \"{key}\"\n"));
        assert_eq!(refusal(&with_key, true), "");
        assert!(with_key.validate().is_ok());
        let e = ApiProxyConfig::default()
            .proxy_key()
            .unwrap_err()
            .to_string();
        assert!(e.contains("[api_proxy] key is required"), "{e}");
        for bad in [
            "[api_proxy]\nkey = \"short\"\n".to_string(),
            format!("[capi]\napi_proxy_key = \"{}\"\n", &key[..20]),
            "[capi]\napi_proxy_url = \"http://u:p@proxy:3128\"\n".into(),
            "[api_proxy]\nmax_dials = 0\n".into(),
        ] {
            assert!(parsed(&bad).validate().is_err(), "{bad}");
        }
        let debug = format!("{with_key:?}");
        assert!(!debug.contains(key), "the key in Debug output");
    }

    /// The status writer's gather is bounded by its safety poll (an unbounded one would also
    /// overflow the writer's clock).
    #[test]
    fn the_status_gather_is_at_most_a_minute() {
        let gather = |ms: u64| parsed(&format!("[capi]\nstatus_gather_ms = {ms}\n")).validate();
        assert!(gather(0).is_ok());
        assert!(gather(STATUS_SAFETY_POLL_MS).is_ok());
        let e = gather(STATUS_SAFETY_POLL_MS + 1).unwrap_err().to_string();
        assert!(e.contains("status_gather_ms must be at most 60000"), "{e}");
    }

    /// Run by `.ci/run` as `cargo test --no-default-features --lib production_build`.
    #[cfg(not(feature = "dev"))]
    #[test]
    fn production_builds_refuse_header_identity_and_simulated_backends() {
        assert_eq!(refusal(&parsed(KEYSTONE), false), "");
        let dev = refusal(&parsed(KEYSTONE), true);
        assert!(dev.contains("`serve --dev` is not available"), "{dev}");
        for without_keystone in ["", "[keystone]\nenabled = false\n"] {
            let e = refusal(&parsed(without_keystone), false);
            assert!(e.contains("X-User-Id"), "{e}");
        }
        let e = refusal(
            &parsed(&format!("{KEYSTONE}[driver]\nkind = \"simulated\"\n")),
            false,
        );
        assert!(e.contains("kind = \"simulated\" is not available"), "{e}");
        let e = refusal(
            &parsed(&format!(
                "{KEYSTONE}[[capi.management_clusters]]\nname = \"east\"\nsimulated = true\n"
            )),
            false,
        );
        assert!(e.contains("east: simulated = true is not available"), "{e}");
    }
}
