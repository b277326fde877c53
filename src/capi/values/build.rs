//! [`build`]: the values document from the rows, and the cluster-wide parts of it (networks,
//! API server, kubeadm, addons); the machines are in [`super::nodegroups`].

use std::net::IpAddr;

use super::clc;
use super::cx::{Cx, given_and_resolved, label_map};
use super::document::{
    Addons, ApiLoadBalancer, ApiSecurityGroups, ApiServer, Bootstrap, CaValues, CcmLoadBalancer,
    Cloud, CloudConfig, CloudCredentials, Cni, CsiCinder, EtcdDefrag, FlavorRef, HelmChart,
    KubeNetwork, Kubeadm, ManagedSubnet, NameValue, Networking, NodeSettings, ResourceRef,
    StorageClass, Values, nv,
};
use super::error::{ValuesError, bad};
use super::hygiene;
use super::keystone;
use super::labels::{LabelView, chart_version_label, cidrs_overlap, parse_cidr};
use super::nodegroups::master_nodegroup;
use super::nodes;
use super::versions::chart_for_minor;
use crate::capi::pki::ClusterCas;
use crate::capi::{LABEL_CLUSTER_UUID, LABEL_PROJECT_ID};
use crate::config::CapiConfig;
use crate::domain::kube_version::kube_version;
use crate::domain::os_distro::OsDistro;
use crate::domain::spec::Cluster;
use crate::domain::spec::Nodegroup;
use crate::domain::spec::Template;
use crate::k8s::schema::{dns1123_label_error, dns1123_subdomain_error};

/// Labels of the pod network (the CNIs' names for it).
const POD_CIDR_LABELS: &[&str] = &["calico_ipv4pool", "cilium_ipv4pool", "flannel_network_cidr"];

/// Everything needed to render one cluster.
pub struct Inputs<'a> {
    pub template: &'a Template,
    pub cluster: &'a Cluster,
    /// All nodegroups of the cluster that should exist (leave out those being deleted).
    pub nodegroups: &'a [Nodegroup],
    pub config: &'a CapiConfig,
    /// Present when the cloud-credentials Secrets are to be written (create, rotation).
    pub credentials: Option<CloudCredentials>,
    /// Present when the CA Secrets are to be written (create only).
    pub cas: Option<&'a ClusterCas>,
    /// The CA rotation's rollout marker: machines created before it are replaced.
    pub rollout_after: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether the API server encrypts Secrets at rest, as the driver found the cluster (its
    /// `<cluster>-etcd-encryption` Secret); `None`: as `etcd_encryption_enabled` says (default on,
    /// as for a new cluster).
    pub etcd_encryption: Option<bool>,
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
        etcd_encryption,
    } = inputs;
    let mut cx = Cx::new(template, cluster, config)?;
    let namespace = crate::capi::namespace(&config.namespace_prefix, &cluster.project_id);
    if let Some(e) = dns1123_label_error(&namespace) {
        return Err(ValuesError::Invalid(format!("namespace {namespace:?} {e}")));
    }
    let resolved_kube = cx
        .tr
        .kube_version
        .as_deref()
        .or(cx.cr.kube_version.as_deref());
    let kubernetes_version =
        kube_version(&cluster.labels, resolved_kube, &config.default_kube_version)?;
    cx.kube_version = kubernetes_version.clone();
    let networking = cx.networking()?;
    let kube_network = cx.kube_network(networking.managed_subnet.as_ref())?;
    let master = master_nodegroup(nodegroups)?;
    let mut networking = networking;
    let mut api_server = cx.api_server(master.node_count, &networking)?;
    if let (Some(vip), Some(m)) = (&api_server.vip, &mut networking.managed_subnet) {
        m.allocation_pools = super::vip::pools_without(m, &vip.address);
    }
    let kubeadm = cx.kubeadm()?;
    let os_distro = cx
        .tr
        .os_distro
        .clone()
        .or_else(|| cx.cr.os_distro.clone())
        .or_else(|| template.cluster_distro.clone());
    let distro = OsDistro::from_image(os_distro.as_deref())
        .map_err(|e| ValuesError::Invalid(e.to_string()))?;
    let nodes = cx.nodes(distro, &networking, &kube_network, &api_server, &kubeadm)?;
    let audit_policy = match nodes::audit_log(&cx.view)? {
        Some((log, args, volumes, policy)) => {
            api_server.extra_args.extend(args);
            api_server.extra_volumes.extend(volumes);
            api_server.audit_log = Some(log);
            Some(policy)
        }
        None => None,
    };
    // Read (and so checked) whatever the driver decided.
    let encrypt = hygiene::encryption_wanted(&cx.view, true)?;
    let mut secret_files = Vec::new();
    if etcd_encryption.unwrap_or(encrypt) {
        let (arg, volume, file) = hygiene::encryption_parts(&cx.cluster_name);
        api_server.extra_args.push(arg);
        api_server.extra_volumes.push(volume);
        secret_files.push(file);
    }
    let keystone_auth = cx.keystone_auth()?;
    let keystone_parts = keystone_auth.as_ref().map(keystone::api_server_parts);
    if let Some(k) = &keystone_parts {
        api_server.extra_args.extend(k.args.iter().cloned());
        api_server.extra_volumes.push(k.volume.clone());
        if !api_server.cert_sans.contains(&k.cert_san) {
            api_server.cert_sans.push(k.cert_san.clone());
        }
    }
    let machines = cx.machine_refs()?;
    let vip = api_server.vip.as_ref();
    let control_plane_commands: Vec<String> = nodes
        .pre_kubeadm_commands
        .iter()
        .chain(vip.iter().flat_map(|v| &v.pre_kubeadm_commands))
        .cloned()
        .collect();
    let mut control_plane = cx.control_plane(master, &machines, &control_plane_commands)?;
    control_plane.files = nodes
        .files
        .iter()
        .cloned()
        .chain(audit_policy)
        .chain(keystone_parts.map(|k| k.file))
        .chain(vip.map(|v| v.manifest.clone()))
        .collect();
    let mut node_groups =
        cx.node_groups(nodegroups, &machines, &kubeadm, &nodes.pre_kubeadm_commands)?;
    let ssh_key_name = cluster
        .keypair
        .clone()
        .or_else(|| template.keypair_id.clone())
        .filter(|k| !k.is_empty());
    if distro.ignition() {
        let ssh = ssh_key_name.is_some();
        control_plane.machine.ignition = Some(clc::config(
            &control_plane.files,
            &control_plane.machine.data_volumes,
            ssh,
        )?);
        for ng in &mut node_groups {
            ng.machine.ignition = Some(clc::config(&nodes.files, &ng.machine.data_volumes, ssh)?);
        }
    }
    // Files kubeadm writes: the node's own (Flatcar has them in Ignition) and those it reads
    // from Secrets on the management cluster.
    control_plane.kubeadm_files = if distro.ignition() {
        secret_files
    } else {
        serde_json::to_value(&control_plane.files)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .chain(secret_files)
            .collect()
    };
    let mut addons = cx.addons(&networking)?;
    addons.keystone_auth = keystone_auth;
    let flavors: Vec<&FlavorRef> = node_groups
        .iter()
        .map(|n| &n.machine.flavor)
        .chain([&control_plane.machine.flavor])
        .collect();
    addons.gpu_operator = cx.gpu_operator(&flavors)?;
    addons.cloud_env = nodes
        .proxy
        .as_ref()
        .map(|p| p.env.clone())
        .unwrap_or_default();
    let autoscaler = cx.autoscaler(&node_groups, &kubernetes_version, &namespace);
    Ok(Values {
        cloud: Cloud {
            name: "openstack".into(),
            credentials_secret_name: crate::capi::credentials_secret_name(&cx.cluster_name),
        },
        namespace_labels: label_map(&[
            (LABEL_PROJECT_ID, &cluster.project_id),
            ("app.kubernetes.io/managed-by", "magnum-capi"),
        ]),
        namespace,
        project_id: cluster.project_id.clone(),
        user_id: cluster.user_id.clone(),
        kubernetes_version,
        os_distro,
        bootstrap: bootstrap(distro),
        ssh_key_name,
        networking,
        kube_network,
        api_server,
        kubeadm,
        nodes,
        control_plane,
        node_groups,
        addons,
        autoscaler,
        credentials,
        cas: cas.map(CaValues::from),
        rollout_after: rollout_after.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        cluster_name: cx.cluster_name,
        cluster_uuid: cx.cluster_uuid,
        common_labels: cx.common_labels,
    })
}

impl<'a> Cx<'a> {
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
            allocation_pools: Vec::new(),
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
            .cidr(POD_CIDR_LABELS)?
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
        networking: &Networking,
    ) -> Result<ApiServer, ValuesError> {
        let (view, t, c) = (&self.view, self.t, self.c);
        let has_external_network = networking.external_network.is_some();
        const ALLOWED_CIDRS: &[&str] = &["api_master_lb_allowed_cidrs", "master_lb_allowed_cidrs"];
        let port = match t.apiserver_port {
            None | Some(6443) => None,
            Some(p) => Some(u16::try_from(p).ok().filter(|p| *p > 0).ok_or_else(|| {
                ValuesError::Invalid(format!("apiserver_port {p} is not a port"))
            })?),
        };
        // The control-plane machines hold the API's address themselves: no load balancer,
        // whatever `master_lb_enabled` says (with several masters Magnum wants it true: the
        // virtual IP is their balancer).
        let vip = self.api_vip(networking, port.unwrap_or(6443))?;
        let allowed_given = view.raw(ALLOWED_CIDRS)?;
        let mut allowed_cidrs = view.list(ALLOWED_CIDRS, &[','], |c| parse_cidr(c).map(drop))?;
        // `0.0.0.0/0` (magnum-capi-helm's templates carry it) restricts nothing.
        let restricts = !allowed_cidrs.is_empty()
            && !allowed_cidrs
                .iter()
                .any(|c| parse_cidr(c).is_ok_and(|(_, len)| len == 0));
        if let (Some(_), true, Some((label, v))) = (&vip, restricts, allowed_given) {
            return Err(bad(
                label,
                v,
                format!(
                    "cannot be enforced on an API without an Octavia load balancer \
                     ({}=true): CAPO opens the control-plane security group's API port \
                     to everyone",
                    super::vip::ENABLED
                ),
            ));
        }
        // Allowed CIDRs restrict the API load balancer, so asking for them asks for one:
        // magnum-capi-helm always made it, and its templates carry the label without
        // `master_lb_enabled` (dropping the restriction silently would open the API).
        let lb_asked = vip.is_none()
            && (c.master_lb_enabled.unwrap_or(t.master_lb_enabled)
                || master_count > 1
                || !allowed_cidrs.is_empty());
        let floating_ip =
            view.bool(&["master_lb_floating_ip_enabled"], true)? && has_external_network;
        // Without a floating IP the API has no endpoint but a load balancer's (CAPO knows no
        // other), so it gets one, as magnum-capi-helm always built: Horizon's cluster dialog
        // sends `master_lb_enabled: false` with `master_lb_floating_ip_enabled=false` by
        // default. That API is private, on the balancer's fixed IP (docs/private-clusters.md).
        // A virtual IP is such an endpoint too.
        let lb_wanted = vip.is_none() && (lb_asked || !floating_ip);
        if lb_wanted && c.resolved.load_balancer_service == Some(false) {
            return Err(ValuesError::Invalid(no_api_endpoint(
                lb_asked,
                has_external_network,
            )));
        }
        let load_balancer = if lb_wanted {
            let provider = self.octavia_provider()?;
            if let (true, Some((label, v))) = (restricts, allowed_given) {
                self.admit_management_cluster(label, v, &provider, &mut allowed_cidrs)?;
            }
            Some(ApiLoadBalancer {
                provider,
                allowed_cidrs: std::mem::take(&mut allowed_cidrs),
                flavor: view.token(&["api_server_lb_flavor"])?,
                availability_zone: view.token(&["api_server_lb_availability_zone"])?,
            })
        } else {
            None
        };
        // CAPO's managed control-plane group opens the API port to everyone, past the
        // listener: the machines get the driver's groups instead (`capi::api_security`).
        let security_groups = match &load_balancer {
            Some(lb) if restricts => Some(ApiSecurityGroups {
                control_plane: super::document::control_plane_group(&self.cluster_name),
                worker: super::document::worker_group(&self.cluster_name),
                api_cidrs: lb.allowed_cidrs.clone(),
            }),
            _ => None,
        };
        let fixed_ip = match &vip {
            Some(v) => Some(v.address.clone()),
            None => view.parsed(&[super::vip::FIXED_IP], |v| {
                v.parse::<IpAddr>()
                    .map_err(|_| "must be an IP address".to_owned())?;
                if load_balancer.is_none() {
                    return Err(format!(
                        "is the address of the API's load balancer or, with {}=true, its \
                         virtual IP: this cluster has neither",
                        super::vip::ENABLED
                    ));
                }
                Ok(v.to_owned())
            })?,
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
        let mut cert_sans = view.list(&["api_server_cert_sans"], &[','], |san| {
            let dns_name = san.to_ascii_lowercase().replace('*', "x");
            if san.parse::<IpAddr>().is_err() && dns1123_subdomain_error(&dns_name).is_some() {
                return Err("each SAN must be a DNS name or an IP address".into());
            }
            Ok(())
        })?;
        if let Some(v) = &vip
            && !cert_sans.contains(&v.address)
        {
            cert_sans.push(v.address.clone());
        }
        Ok(ApiServer {
            load_balancer,
            vip,
            security_groups,
            fixed_ip,
            floating_ip,
            floating_ip_address,
            port,
            cert_sans,
            extra_args: self.api_server_args()?,
            audit_log: None,
            extra_volumes: Vec::new(),
        })
    }

    /// Refuses allowed CIDRs nothing would enforce (CAPO drops them without a word for a
    /// provider Octavia's VIP ACLs do not cover), and admits the management cluster's egress
    /// addresses so that Cluster API keeps reaching the API it restricts.
    fn admit_management_cluster(
        &self,
        label: &str,
        value: &str,
        provider: &str,
        allowed: &mut Vec<String>,
    ) -> Result<(), ValuesError> {
        let config = self.config;
        if config
            .octavia_providers_without_allowed_cidrs
            .iter()
            .any(|p| p.eq_ignore_ascii_case(provider))
        {
            return Err(bad(
                label,
                value,
                format!(
                    "cannot be enforced by the Octavia provider {provider:?} (it has no \
                     allowed CIDRs); choose another with octavia_provider"
                ),
            ));
        }
        if config.egress_cidrs.is_empty() {
            return Err(bad(
                label,
                value,
                "cannot be enforced here: the operator has not said which addresses Cluster \
                 API reaches the API from (egress_cidrs of the management cluster), and \
                 without them it would lock itself out",
            ));
        }
        for e in &config.egress_cidrs {
            if !allowed.contains(e) {
                allowed.push(e.clone());
            }
        }
        Ok(())
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
            image_repository: super::images::prefix(&self.view)?,
            kubelet_extra_args,
        })
    }

    /// Proxy and registry settings of every node. `no_proxy` is completed with what nodes must
    /// reach directly: localhost, the pod, service and node networks, the cluster's DNS
    /// domains, and the API's names and address as far as they are known before boot (the
    /// endpoint itself is added on each node at boot).
    fn nodes(
        &self,
        distro: OsDistro,
        networking: &Networking,
        kube_network: &KubeNetwork,
        api_server: &ApiServer,
        kubeadm: &Kubeadm,
    ) -> Result<NodeSettings, ValuesError> {
        let mut direct: Vec<String> = vec!["localhost".into(), "127.0.0.1".into()];
        direct.push(kube_network.pod_cidr.clone());
        direct.push(kube_network.service_cidr.clone());
        if let Some(m) = &networking.managed_subnet {
            direct.push(m.cidr.clone());
        }
        direct.push(".svc".into());
        direct.push(format!(".{}", kube_network.service_domain));
        direct.extend(api_server.floating_ip_address.iter().cloned());
        direct.extend(api_server.cert_sans.iter().cloned());
        let proxy = nodes::proxy(self.t, &direct)?;
        let (registries, ca) = nodes::registries(&self.view, self.config.registry_ca.as_deref())?;
        let prefix_host = kubeadm
            .image_repository
            .as_deref()
            .and_then(|p| p.split('/').next())
            .filter(|h| h.contains('.') || h.contains(':'));
        Ok(nodes::node_settings(
            distro,
            proxy,
            registries,
            ca,
            prefix_host,
        ))
    }

    fn addons(&self, networking: &Networking) -> Result<Addons, ValuesError> {
        let (view, config) = (&self.view, self.config);
        let chart = |proxy: &str, repo: &str, name: &str, version: String, namespace: &str| {
            helm_chart(&self.cluster_name, proxy, repo, name, version, namespace)
        };
        let cni = cni(
            view,
            self.t.network_driver.as_deref(),
            config,
            &self.cluster_name,
        )?;
        let mut cloud_controller_manager = chart(
            "ccm",
            &config.openstack_chart_repo,
            "openstack-cloud-controller-manager",
            chart_for_minor(
                &config.ccm_chart_versions,
                &config.ccm_chart_version,
                &self.kube_version,
            ),
            "kube-system",
        );
        cloud_controller_manager.release_name = "openstack-ccm".into();
        let csi_cinder = if view.bool(&["cinder_csi_enabled"], true)? {
            let mut csi_chart = chart(
                "csi-cinder",
                &config.openstack_chart_repo,
                "openstack-cinder-csi",
                chart_for_minor(
                    &config.cinder_csi_chart_versions,
                    &config.cinder_csi_chart_version,
                    &self.kube_version,
                ),
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
            metrics_server: self.optional_addon("metrics-server")?,
            cloud_env: Vec::new(),
            image_values: super::images::overlays(view, super::images::prefix(view)?.as_deref())?,
            monitoring: self.optional_addon("monitoring")?,
            ingress_nginx: self.ingress("ingress-nginx")?,
            ingress_traefik: self.ingress("ingress-traefik")?,
            csi_manila: self.manila()?,
            gpu_operator: None,
            keystone_auth: None,
            etcd_defrag: hygiene::defrag_schedule(view)?.map(|schedule| EtcdDefrag {
                resource_set_name: format!("{}-etcd-defrag", self.cluster_name),
                manifest: hygiene::defrag_manifest(
                    &schedule,
                    &match super::images::prefix(view).ok().flatten() {
                        Some(p) => super::images::under_prefix(&p, hygiene::ETCD_IMAGE),
                        None => hygiene::ETCD_IMAGE.to_string(),
                    },
                ),
            }),
            cloud_config: CloudConfig {
                resource_set_name: format!("{}-cloud-config", self.cluster_name),
                load_balancer: CcmLoadBalancer {
                    enabled: view.bool(
                        &["octavia_enabled"],
                        self.c.resolved.load_balancer_service != Some(false),
                    )?,
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

/// How a distro's machines boot and name themselves to kubeadm.
fn bootstrap(distro: OsDistro) -> Bootstrap {
    let (node_name, provider_id) = if distro.ignition() {
        (
            "${COREOS_OPENSTACK_HOSTNAME}",
            "openstack:///${COREOS_OPENSTACK_INSTANCE_UUID}",
        )
    } else {
        ("{{ local_hostname }}", "openstack:///'{{ instance_id }}'")
    };
    Bootstrap {
        os_distro: distro.as_str().into(),
        node_name: node_name.into(),
        provider_id: provider_id.into(),
    }
}

/// A HelmChartProxy's chart, its proxy named `<cluster>-<proxy>`.
fn helm_chart(
    cluster_name: &str,
    proxy: &str,
    repo: &str,
    name: &str,
    version: String,
    namespace: &str,
) -> HelmChart {
    HelmChart {
        proxy_name: format!("{cluster_name}-{proxy}"),
        repo: repo.to_owned(),
        name: name.to_owned(),
        version,
        release_name: name.to_owned(),
        namespace: namespace.to_owned(),
    }
}

/// The CNI of the template's `network_driver` (default calico) and its labels.
pub(super) fn cni(
    view: &LabelView<'_>,
    network_driver: Option<&str>,
    config: &CapiConfig,
    cluster_name: &str,
) -> Result<Cni, ValuesError> {
    let chart = |proxy: &str, repo: &str, name: &str, version: String, namespace: &str| {
        helm_chart(cluster_name, proxy, repo, name, version, namespace)
    };
    let network_driver = network_driver
        .filter(|d| !d.is_empty())
        .unwrap_or("calico")
        .to_ascii_lowercase();
    // Checked whatever the driver: a bad value is refused at create, not when someone later
    // switches the template to flannel.
    let flannel_backend = view.one_of(
        &["flannel_backend"],
        &["vxlan", "host-gw", "wireguard"],
        "vxlan",
    )?;
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
            flannel: false,
            flannel_backend: String::new(),
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
            flannel: false,
            flannel_backend: String::new(),
        },
        "flannel" => Cni {
            kind: "flannel".into(),
            calico: false,
            cilium: false,
            chart: chart(
                "cni",
                &config.flannel_chart_repo,
                "flannel",
                chart_version_label(view, "flannel_tag", &config.flannel_chart_version, true)?,
                "kube-flannel",
            ),
            hubble_ui: false,
            flannel: true,
            flannel_backend,
        },
        other => {
            return Err(ValuesError::Invalid(format!(
                "network_driver {other:?} is not supported by this driver (calico, cilium or \
                 flannel)"
            )));
        }
    };
    Ok(cni)
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

/// Why a cloud without a load balancer service cannot serve the API the request asks for, naming
/// what to change in Horizon's cluster dialog (magnum-ui) and on the command line.
fn no_api_endpoint(lb_asked: bool, has_external_network: bool) -> String {
    let mut why = String::from(
        "This cloud has no load balancer service (Octavia), so the Kubernetes API needs a \
         floating IP on its control-plane node: ",
    );
    if lb_asked {
        why.push_str(
            "untick \"Enable Load Balancer for Kubernetes API\" and keep 1 control-plane node \
             (master_lb_enabled false, master_count 1, no api_master_lb_allowed_cidrs), ",
        );
    }
    if !has_external_network {
        why.push_str("choose a cluster template with an external network (external_network_id), ");
    }
    why.push_str(
        "and add master_lb_floating_ip_enabled=true to \"Additional Labels\" with \
         \"I do want to override Template and Workflow Labels\" ticked (on the command line \
         --labels master_lb_floating_ip_enabled=true).",
    );
    why
}
