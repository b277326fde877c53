//! The optional add-ons (docs/templates-and-labels.md "Add-ons": one row of [`OPTIONAL_ADDONS`] each, switched by a
//! label) and the cluster autoscaler, whose image follows the cluster's Kubernetes minor.

use std::collections::BTreeMap;

use super::cx::{Cx, label_map};
use super::document::{ClusterAutoscaler, CsiManila, FlavorRef, HelmChart, NodeGroup};
use super::error::{ValuesError, bad};
use super::labels::LabelView;
use super::versions::{chart_for_minor, tag_for_minor};
use crate::config::CapiConfig;

/// An optional add-on delivered by a HelmChartProxy named `<cluster>-<key>`; its health is
/// reported as `addon.<key>` in `health_status_reason`.
#[derive(Debug, Clone, Copy)]
pub struct AddonSpec {
    /// Proxy name suffix and health key.
    pub key: &'static str,
    /// The label that switches it on or off.
    pub label: &'static str,
    /// `None`: a boolean label, on by default when `default`. `Some(v)`: on when the label is
    /// `v` (a choice label such as `ingress_controller`).
    pub value: Option<&'static str>,
    /// On when the label is absent.
    pub default: bool,
    /// Chart name.
    pub chart: &'static str,
    /// Namespace of the release in the workload cluster.
    pub namespace: &'static str,
}

const fn switch(
    key: &'static str,
    label: &'static str,
    default: bool,
    chart: &'static str,
    namespace: &'static str,
) -> AddonSpec {
    AddonSpec {
        key,
        label,
        value: None,
        default,
        chart,
        namespace,
    }
}

/// Every optional add-on, in the order of the add-on table in docs/templates-and-labels.md.
pub const OPTIONAL_ADDONS: &[AddonSpec] = &[
    switch(
        "metrics-server",
        "metrics_server_enabled",
        true,
        "metrics-server",
        "kube-system",
    ),
    switch(
        "monitoring",
        "monitoring_enabled",
        false,
        "kube-prometheus-stack",
        "monitoring",
    ),
    AddonSpec {
        key: "ingress-nginx",
        label: "ingress_controller",
        value: Some("nginx"),
        default: false,
        chart: "ingress-nginx",
        namespace: "ingress-nginx",
    },
    AddonSpec {
        key: "ingress-traefik",
        label: "ingress_controller",
        value: Some("traefik"),
        default: false,
        chart: "traefik",
        namespace: "traefik",
    },
    switch(
        "csi-manila",
        "manila_csi_enabled",
        false,
        "openstack-manila-csi",
        "kube-system",
    ),
    switch(
        "csi-nfs",
        "manila_csi_enabled",
        false,
        "csi-driver-nfs",
        "kube-system",
    ),
    switch(
        "gpu-operator",
        "gpu_operator_enabled",
        false,
        "gpu-operator",
        "gpu-operator",
    ),
];

/// `(repository, version)` of an add-on's chart from `[capi]` for a cluster on `kube_version`.
fn chart_source(config: &CapiConfig, key: &str, kube_version: &str) -> (String, String) {
    let (repo, version) = chart_source_fixed(config, key);
    let version = match key {
        "csi-manila" => chart_for_minor(&config.manila_csi_chart_versions, version, kube_version),
        _ => version.to_owned(),
    };
    (repo.to_owned(), version)
}

fn chart_source_fixed<'c>(config: &'c CapiConfig, key: &str) -> (&'c str, &'c str) {
    match key {
        "metrics-server" => (
            &config.metrics_server_chart_repo,
            &config.metrics_server_chart_version,
        ),
        "monitoring" => (
            &config.monitoring_chart_repo,
            &config.monitoring_chart_version,
        ),
        "ingress-nginx" => (
            &config.ingress_nginx_chart_repo,
            &config.ingress_nginx_chart_version,
        ),
        "ingress-traefik" => (&config.traefik_chart_repo, &config.traefik_chart_version),
        "csi-manila" => (
            &config.openstack_chart_repo,
            &config.manila_csi_chart_version,
        ),
        "csi-nfs" => (&config.nfs_csi_chart_repo, &config.nfs_csi_chart_version),
        "gpu-operator" => (
            &config.gpu_operator_chart_repo,
            &config.gpu_operator_chart_version,
        ),
        _ => ("", ""),
    }
}

/// Cluster-autoscaler tag per Kubernetes minor (the autoscaler is released per minor and only
/// supports its own): the built-in `[capi] autoscaler_image_tags`; a minor not listed gets
/// `v1.<minor>.0`.
pub const AUTOSCALER_TAGS: &[(u32, &str)] = &[
    (30, "v1.30.4"),
    (31, "v1.31.1"),
    (32, "v1.32.1"),
    (33, "v1.33.0"),
    (34, "v1.34.0"),
];

/// The autoscaler tag for a `v1.N.x` Kubernetes version with the built-in table.
pub fn autoscaler_tag(kube_version: &str) -> String {
    tag_for_minor(&CapiConfig::default().autoscaler_image_tags, kube_version)
}

/// The add-on labels of a template, checked as a cluster create would (except what depends on
/// the cluster: its Keystone URL, the GPU flavors).
pub(super) fn check_labels(view: &LabelView<'_>, config: &CapiConfig) -> Result<(), ValuesError> {
    for spec in OPTIONAL_ADDONS.iter().filter(|s| s.value.is_none()) {
        view.bool(&[spec.label], spec.default)?;
    }
    ingress(view, config)?;
    manila_labels(view)?;
    super::keystone::labels(view)?;
    Ok(())
}

/// The add-on key of the ingress controller `ingress_controller` asks for (checked): nginx and
/// Traefik, each behind a `LoadBalancer` Service whose Octavia load balancer the CCM creates and
/// the delete cleanup removes. `octavia` (the Heat driver's octavia-ingress-controller) is
/// refused: it creates a load balancer per Ingress under names the cleanup does not know, so
/// they would outlive the cluster in the tenant's project, and it has no published chart.
fn ingress(view: &LabelView<'_>, config: &CapiConfig) -> Result<Option<&'static str>, ValuesError> {
    let Some(v) = view.token(&["ingress_controller"])? else {
        return Ok(None);
    };
    let key = match v.to_ascii_lowercase().as_str() {
        "" | "none" => return Ok(None),
        "nginx" => "ingress-nginx",
        "traefik" => "ingress-traefik",
        "octavia" => {
            return Err(bad(
                "ingress_controller",
                &v,
                "the Octavia ingress controller is not offered (it makes a load balancer per \
                 Ingress that the cluster's delete would leave behind); use nginx or traefik, \
                 whose one load balancer is an ordinary LoadBalancer Service",
            ));
        }
        _ => return Err(bad("ingress_controller", &v, "supported: nginx, traefik")),
    };
    if !config.delete_cleanup {
        return Err(bad(
            "ingress_controller",
            &v,
            "needs [capi] delete_cleanup (its load balancer would outlive the cluster)",
        ));
    }
    Ok(Some(key))
}

/// Manila's share network, type and protocol labels.
fn manila_labels(view: &LabelView<'_>) -> Result<(Option<String>, String, String), ValuesError> {
    Ok((
        view.token(&["manila_csi_share_network_id"])?,
        view.token(&["manila_csi_share_type"])?
            .unwrap_or_else(|| "default".into()),
        view.one_of(&["manila_csi_share_protocol"], &["NFS"], "NFS")?,
    ))
}

impl Cx<'_> {
    /// The optional add-on `key` as a chart, or `None` when its label turns it off.
    pub(super) fn optional_addon(&self, key: &str) -> Result<Option<HelmChart>, ValuesError> {
        let Some(spec) = OPTIONAL_ADDONS.iter().find(|a| a.key == key) else {
            return Ok(None);
        };
        let on = match spec.value {
            None => self.view.bool(&[spec.label], spec.default)?,
            Some(v) => self.view.token(&[spec.label])?.as_deref() == Some(v),
        };
        Ok(on.then(|| self.addon_chart(spec)))
    }

    fn addon_chart(&self, spec: &AddonSpec) -> HelmChart {
        let (repo, version) = chart_source(self.config, spec.key, &self.kube_version);
        HelmChart {
            proxy_name: format!("{}-{}", self.cluster_name, spec.key),
            repo,
            name: spec.chart.to_owned(),
            version,
            release_name: spec.chart.to_owned(),
            namespace: spec.namespace.to_owned(),
        }
    }

    /// The GPU operator: as `gpu_operator_enabled` says when it is set, else on when a machine
    /// flavor of the cluster was found to carry a GPU (its Nova extra specs, at validation).
    pub(super) fn gpu_operator(
        &self,
        flavors: &[&FlavorRef],
    ) -> Result<Option<HelmChart>, ValuesError> {
        const KEY: &str = "gpu-operator";
        if self.view.raw(&["gpu_operator_enabled"])?.is_some() {
            return self.optional_addon(KEY);
        }
        let gpu_ids = || self.tr.gpu_flavor_ids.iter().chain(&self.cr.gpu_flavor_ids);
        let gpu = flavors
            .iter()
            .filter_map(|f| f.id.as_ref())
            .any(|id| gpu_ids().any(|g| g == id));
        Ok(OPTIONAL_ADDONS
            .iter()
            .find(|a| a.key == KEY)
            .filter(|_| gpu)
            .map(|spec| self.addon_chart(spec)))
    }

    /// The ingress controller of `key` (`ingress-nginx`, `ingress-traefik`) when
    /// `ingress_controller` asks for it, only with the delete cleanup, which removes the load
    /// balancer its Service gets.
    pub(super) fn ingress(&self, key: &str) -> Result<Option<HelmChart>, ValuesError> {
        match ingress(&self.view, self.config)? {
            Some(k) if k == key => self.optional_addon(key),
            _ => Ok(None),
        }
    }

    /// Manila CSI with the NFS node plugin and a StorageClass (`manila_csi_*` labels).
    pub(super) fn manila(&self) -> Result<Option<CsiManila>, ValuesError> {
        let (Some(chart), Some(nfs_chart)) = (
            self.optional_addon("csi-manila")?,
            self.optional_addon("csi-nfs")?,
        ) else {
            return Ok(None);
        };
        let (share_network_id, share_type, protocol) = manila_labels(&self.view)?;
        Ok(Some(CsiManila {
            chart,
            nfs_chart,
            share_network_id,
            share_type,
            protocol,
        }))
    }

    /// The autoscaler, when a nodegroup autoscales.
    pub(super) fn autoscaler(
        &self,
        node_groups: &[NodeGroup],
        kube_version: &str,
        namespace: &str,
    ) -> Option<ClusterAutoscaler> {
        if node_groups.iter().all(|n| n.autoscale.is_none()) {
            return None;
        }
        let name = format!("{}-autoscaler", self.cluster_name);
        let selector = label_map(&[
            ("app.kubernetes.io/name", "cluster-autoscaler"),
            ("app.kubernetes.io/instance", &name),
        ]);
        let mut labels: BTreeMap<String, String> = self.common_labels.clone();
        labels.extend(selector.clone());
        let tag = self
            .config
            .autoscaler_image_tag
            .clone()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| tag_for_minor(&self.config.autoscaler_image_tags, kube_version));
        Some(ClusterAutoscaler {
            image: format!("{}:{tag}", self.config.autoscaler_image),
            auto_discovery_arg: format!(
                "--node-group-auto-discovery=clusterapi:namespace={namespace},clusterName={}",
                self.cluster_name
            ),
            kubeconfig_secret: format!("{}-kubeconfig", self.cluster_name),
            cluster_role: self.config.autoscaler_cluster_role.clone(),
            name,
            labels,
            selector,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_autoscaler_follows_the_kubernetes_minor() {
        assert_eq!(autoscaler_tag("v1.33.5"), "v1.33.0");
        assert_eq!(autoscaler_tag("v1.31.0"), "v1.31.1");
        assert_eq!(autoscaler_tag("v1.30.9"), "v1.30.4");
        assert_eq!(autoscaler_tag("v1.40.2"), "v1.40.0");
    }

    #[test]
    fn the_builtin_autoscaler_table_is_the_config_default() {
        let table = CapiConfig::default().autoscaler_image_tags;
        assert_eq!(table.len(), AUTOSCALER_TAGS.len());
        for (minor, tag) in AUTOSCALER_TAGS {
            assert_eq!(
                table.get(&format!("1.{minor}")).map(String::as_str),
                Some(*tag)
            );
        }
    }

    #[test]
    fn openstack_charts_follow_the_kubernetes_minor() {
        let config = CapiConfig::default();
        for (kube, ccm, cinder) in [
            ("v1.31.2", "2.31.4", "2.31.8"),
            ("v1.33.5", "2.33.1", "2.33.1"),
            ("v1.34.1", "2.34.0", "2.34.0"),
            // Not in the table: the single key.
            ("v1.40.0", "2.33.1", "2.33.1"),
        ] {
            let v = |t, f| chart_for_minor(t, f, kube);
            assert_eq!(
                v(&config.ccm_chart_versions, &config.ccm_chart_version),
                ccm
            );
            assert_eq!(
                v(
                    &config.cinder_csi_chart_versions,
                    &config.cinder_csi_chart_version
                ),
                cinder
            );
        }
        assert_eq!(
            tag_for_minor(&config.keystone_auth_image_tags, "v1.32.0"),
            "v1.32.1"
        );
    }

    #[test]
    fn every_addon_has_a_chart_source() {
        let config = CapiConfig::default();
        for a in OPTIONAL_ADDONS {
            let (repo, version) = chart_source(&config, a.key, "v1.33.5");
            assert!(!repo.is_empty() && !version.is_empty(), "{}", a.key);
        }
    }
}
