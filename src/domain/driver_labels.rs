//! The labels of the two Cluster API drivers of Magnum (issue 25 item 4): every label
//! magnum-cluster-api 0.38 and magnum-capi-helm 1.4 honour, what magnum-capi does with it (mapped
//! to its rendering, mapped by the image-tag renderer, or accepted and ignored), and the defaults
//! that differ from the driver that made a template's clusters. Read from the drivers' sources
//! (mcapi `src/magnum.rs` `ClusterLabels`, `utils.py`, `resources.py`; capi-helm `driver.py`,
//! `conf.py` `[capi_helm_cluster_labels]`). The import report and docs/moving-from-magnum.md use it; the render test
//! builds a cluster from each driver's whole set, so no label a working template carries is a 400.

use super::imported::DriverFamily;
use super::labels::Labels;

/// What magnum-capi does with a driver's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Read by the values document (`capi::values`, its module table says how).
    Mapped,
    /// An image tag or add-on choice the renderer maps to chart values (issue 27).
    Renderer,
    /// Accepted and has no effect here; why.
    Ignored(&'static str),
}

/// One label of a driver.
#[derive(Debug, Clone, Copy)]
pub struct DriverLabel {
    pub name: &'static str,
    /// Honoured by magnum-capi-helm 1.4.
    pub capi_helm: bool,
    /// Honoured by magnum-cluster-api 0.38.
    pub cluster_api: bool,
    pub effect: Effect,
    /// A value a working template of that driver carries (the render test uses it).
    pub sample: &'static str,
}

const fn l(
    name: &'static str,
    capi_helm: bool,
    cluster_api: bool,
    effect: Effect,
    sample: &'static str,
) -> DriverLabel {
    DriverLabel {
        name,
        capi_helm,
        cluster_api,
        effect,
        sample,
    }
}

use Effect::{Ignored, Mapped, Renderer};

const IMAGE_TAG: Effect = Renderer;
const CHART_VERSION: Effect = Ignored(
    "the Helm chart is not used: magnum-capi renders its own objects (add-on chart versions are \
     `[capi]` settings)",
);

/// Every label either driver honours, by name.
pub const DRIVER_LABELS: &[DriverLabel] = &[
    l("kube_tag", false, true, Mapped, "v1.33.5"),
    l(
        "capi_helm_chart_version",
        true,
        false,
        CHART_VERSION,
        "0.10.1",
    ),
    l("auto_healing_enabled", true, true, Mapped, "true"),
    l("auto_scaling_enabled", true, true, Mapped, "false"),
    l("min_node_count", true, true, Mapped, "1"),
    l("max_node_count", true, true, Mapped, "5"),
    l("master_lb_floating_ip_enabled", true, true, Mapped, "true"),
    l(
        "api_master_lb_allowed_cidrs",
        true,
        false,
        Mapped,
        "0.0.0.0/0",
    ),
    l("octavia_provider", true, true, Mapped, "amphora"),
    l("octavia_lb_algorithm", true, true, Mapped, "ROUND_ROBIN"),
    l("octavia_lb_healthcheck", true, true, Mapped, "true"),
    l("api_server_lb_flavor", false, true, Mapped, "lb-small"),
    l(
        "api_server_lb_availability_zone",
        false,
        true,
        Mapped,
        "az1",
    ),
    l(
        "api_server_floating_ip",
        false,
        true,
        Mapped,
        "203.0.113.10",
    ),
    l("fixed_subnet_cidr", true, true, Mapped, "10.0.0.0/24"),
    l("extra_network_names", true, false, Mapped, "storage-net"),
    l("extra_network_name", true, false, Mapped, "storage-net"),
    l("boot_volume_size", true, true, Mapped, "40"),
    l("boot_volume_type", true, true, Mapped, "ssd"),
    l("boot_volume_availability_zone", false, true, Mapped, "az1"),
    l("etcd_blockdevice_size", true, false, Mapped, "10"),
    l("etcd_volume_size", true, true, Mapped, "10"),
    l("etcd_blockdevice_type", true, false, Mapped, "volume"),
    l("etcd_blockdevice_volume_type", true, false, Mapped, "ssd"),
    l("etcd_volume_type", true, true, Mapped, "ssd"),
    l("etcd_blockdevice_volume_az", true, false, Mapped, "az1"),
    l("docker_volume_type", false, true, Mapped, "ssd"),
    l("availability_zone", false, true, Mapped, "az1"),
    l(
        "control_plane_availability_zones",
        false,
        true,
        Mapped,
        "az1",
    ),
    l(
        "server_group_policies",
        false,
        true,
        Mapped,
        "soft-anti-affinity",
    ),
    l(
        "different_failure_domain",
        false,
        true,
        Ignored("a scheduler hint for a custom Nova filter of Vexxhost's; not sent"),
        "false",
    ),
    l("keystone_auth_enabled", true, true, Mapped, "true"),
    l("monitoring_enabled", true, false, Mapped, "false"),
    l(
        "kube_dashboard_enabled",
        true,
        false,
        Ignored("no dashboard add-on (the capi-helm charts removed it too)"),
        "true",
    ),
    l("csi_cinder_availability_zone", true, false, Mapped, "nova"),
    l("csi_cinder_reclaim_policy", true, false, Mapped, "Retain"),
    l(
        "csi_cinder_volume_binding_mode",
        true,
        false,
        Mapped,
        "WaitForFirstConsumer",
    ),
    l("csi_cinder_fstype", true, false, Mapped, "ext4"),
    l(
        "csi_cinder_allow_volume_expansion",
        true,
        false,
        Mapped,
        "true",
    ),
    l("cinder_csi_enabled", false, true, Mapped, "true"),
    l("manila_csi_enabled", false, true, Mapped, "false"),
    l("manila_csi_share_network_id", false, true, Mapped, ""),
    l("cinder_csi_plugin_tag", false, true, IMAGE_TAG, "v1.32.0"),
    l("manila_csi_plugin_tag", false, true, IMAGE_TAG, "v1.32.0"),
    l("cloud_provider_tag", false, true, IMAGE_TAG, "v1.33.1"),
    l("csi_attacher_tag", false, true, IMAGE_TAG, "v4.7.0"),
    l("csi_liveness_probe_tag", false, true, IMAGE_TAG, "v2.14.0"),
    l(
        "csi_node_driver_registrar_tag",
        false,
        true,
        IMAGE_TAG,
        "v2.12.0",
    ),
    l("csi_provisioner_tag", false, true, IMAGE_TAG, "v5.1.0"),
    l("csi_resizer_tag", false, true, IMAGE_TAG, "v1.12.0"),
    l("csi_snapshotter_tag", false, true, IMAGE_TAG, "v8.1.0"),
    l("calico_tag", false, true, Mapped, "v3.29.3"),
    l("calico_ipv4pool", false, true, Mapped, "10.100.0.0/16"),
    l("cilium_tag", false, true, Mapped, "v1.15.3"),
    l("cilium_ipv4pool", false, true, Mapped, "10.100.0.0/16"),
    l("cilium_hubble_ui_enabled", false, true, Mapped, "false"),
    l(
        "service_cluster_ip_range",
        false,
        true,
        Mapped,
        "10.254.0.0/16",
    ),
    l("dns_cluster_domain", false, true, Mapped, "cluster.local"),
    l("container_infra_prefix", false, true, Mapped, ""),
    l(
        "api_server_cert_sans",
        false,
        true,
        Mapped,
        "k8s.example.com",
    ),
    l(
        "api_server_tls_cipher_suites",
        false,
        true,
        Mapped,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    l(
        "kubelet_tls_cipher_suites",
        false,
        true,
        Mapped,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    l(
        "admission_control_list",
        false,
        true,
        Mapped,
        "NodeRestriction",
    ),
    l("audit_log_enabled", false, true, Mapped, "true"),
    l("audit_log_max_age", false, true, Mapped, "30"),
    l("audit_log_max_backup", false, true, Mapped, "10"),
    l("audit_log_max_size", false, true, Mapped, "100"),
    l("oidc_issuer_url", false, true, Mapped, ""),
    l("oidc_client_id", false, true, Mapped, ""),
    l("oidc_username_claim", false, true, Mapped, "sub"),
    l("oidc_username_prefix", false, true, Mapped, "-"),
    l("oidc_groups_claim", false, true, Mapped, ""),
    l("oidc_groups_prefix", false, true, Mapped, ""),
];

/// A default that differs between a driver and magnum-capi, for a label left unset.
#[derive(Debug, Clone, Copy)]
pub struct DefaultDifference {
    pub label: &'static str,
    pub family: DriverFamily,
    /// What the driver did without the label.
    pub theirs: &'static str,
    /// What magnum-capi does without it.
    pub ours: &'static str,
    /// The label value that keeps the driver's behaviour, when one does.
    pub keep_with: Option<&'static str>,
    /// Only worth saying when this other label is `true` (autoscaling).
    pub when: Option<&'static str>,
}

const fn d(
    label: &'static str,
    family: DriverFamily,
    theirs: &'static str,
    ours: &'static str,
    keep_with: Option<&'static str>,
) -> DefaultDifference {
    DefaultDifference {
        label,
        family,
        theirs,
        ours,
        keep_with,
        when: None,
    }
}

/// [`d`], said only when the label `when` is `true`.
const fn d_when(when: &'static str, diff: DefaultDifference) -> DefaultDifference {
    DefaultDifference {
        when: Some(when),
        ..diff
    }
}

use DriverFamily::{CapiHelm, ClusterApi};

/// Defaults that differ, per driver.
pub const DEFAULT_DIFFERENCES: &[DefaultDifference] = &[
    d(
        "keystone_auth_enabled",
        ClusterApi,
        "k8s-keystone-auth on",
        "off",
        Some("true"),
    ),
    d(
        "server_group_policies",
        ClusterApi,
        "a soft-anti-affinity server group per nodegroup",
        "no server group",
        Some("soft-anti-affinity"),
    ),
    d(
        "csi_cinder_reclaim_policy",
        CapiHelm,
        "StorageClass reclaimPolicy Retain",
        "Delete (the volumes of deleted PersistentVolumes are deleted)",
        Some("Retain"),
    ),
    d(
        "csi_cinder_volume_binding_mode",
        ClusterApi,
        "Immediate",
        "WaitForFirstConsumer",
        Some("Immediate"),
    ),
    d(
        "manila_csi_enabled",
        ClusterApi,
        "Manila CSI on where the cloud has Manila",
        "off",
        Some("true"),
    ),
    d(
        "octavia_provider",
        ClusterApi,
        "amphorav2 for Services' load balancers",
        "[capi] octavia_provider (amphora)",
        Some("amphorav2"),
    ),
    d(
        "calico_ipv4pool",
        ClusterApi,
        "pods in 10.100.0.0/16",
        "[capi] pod_cidr (172.16.0.0/13)",
        Some("10.100.0.0/16"),
    ),
    d(
        "service_cluster_ip_range",
        ClusterApi,
        "services in 10.254.0.0/16",
        "[capi] service_cidr (172.24.0.0/13)",
        Some("10.254.0.0/16"),
    ),
    d(
        "kube_tag",
        CapiHelm,
        "the version from the image's kube_version only",
        "kube_tag, else the image's kube_version; both set and different is refused",
        None,
    ),
    d_when(
        "auto_scaling_enabled",
        d(
            "max_node_count",
            ClusterApi,
            "autoscaling without it: min_node_count + 1",
            "autoscaling without a maximum is refused (400): set it on the template or cluster",
            None,
        ),
    ),
    d_when(
        "auto_scaling_enabled",
        d(
            "max_node_count",
            CapiHelm,
            "autoscaling without it: the node count",
            "autoscaling without a maximum is refused (400): set it on the template or cluster",
            None,
        ),
    ),
    d(
        "metrics_server_enabled",
        ClusterApi,
        "no metrics-server",
        "metrics-server on",
        Some("false"),
    ),
];

/// The label `name` of either driver.
pub fn driver_label(name: &str) -> Option<&'static DriverLabel> {
    DRIVER_LABELS.iter().find(|l| l.name == name)
}

/// What the import report says about a template's labels, for clusters of `families` (the
/// template's driver when known, else both): the labels accepted and ignored here, and the
/// defaults that differ for labels the template leaves unset.
pub fn template_notes(labels: &Labels, families: &[DriverFamily]) -> Vec<String> {
    let mut notes = Vec::new();
    let ignored: Vec<String> = labels
        .keys()
        .filter_map(|k| match driver_label(k)?.effect {
            Ignored(why) => Some(format!("{k} ({why})")),
            _ => None,
        })
        .collect();
    if !ignored.is_empty() {
        notes.push(format!(
            "labels accepted and ignored here: {}",
            ignored.join("; ")
        ));
    }
    for diff in DEFAULT_DIFFERENCES {
        let unset = labels.get(diff.label).is_none_or(|v| v.trim().is_empty());
        let applies = diff.when.is_none_or(|w| {
            labels
                .get(w)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        });
        if !unset || !applies || !families.contains(&diff.family) {
            continue;
        }
        let keep = diff
            .keep_with
            .map(|v| format!("; set {}={v} on the template to keep it", diff.label))
            .unwrap_or_default();
        notes.push(format!(
            "default differs: {} unset — {} made {}; magnum-capi: {}{keep}",
            diff.label,
            family_name(diff.family),
            diff.theirs,
            diff.ours
        ));
    }
    notes
}

fn family_name(f: DriverFamily) -> &'static str {
    match f {
        CapiHelm => "magnum-capi-helm",
        ClusterApi => "magnum-cluster-api",
        DriverFamily::Heat => "the Heat driver",
        DriverFamily::Unknown => "an unknown driver",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_is_listed_once_and_belongs_to_a_driver() {
        let mut names: Vec<&str> = DRIVER_LABELS.iter().map(|l| l.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a label is listed twice");
        assert!(DRIVER_LABELS.iter().all(|l| l.capi_helm || l.cluster_api));
        for diff in DEFAULT_DIFFERENCES {
            assert!(
                driver_label(diff.label).is_some() || diff.label == "metrics_server_enabled",
                "{}",
                diff.label
            );
        }
    }

    #[test]
    fn the_notes_name_ignored_labels_and_the_drivers_defaults_the_template_leaves_unset() {
        let labels: Labels = [
            ("kube_dashboard_enabled", "true"),
            ("csi_cinder_reclaim_policy", ""),
            ("keystone_auth_enabled", "false"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let helm = template_notes(&labels, &[CapiHelm]).join("\n");
        assert!(
            helm.contains("ignored here: kube_dashboard_enabled (no dashboard"),
            "{helm}"
        );
        assert!(
            helm.contains(
                "default differs: csi_cinder_reclaim_policy unset — magnum-capi-helm made \
                 StorageClass reclaimPolicy Retain; magnum-capi: Delete"
            ),
            "{helm}"
        );
        assert!(
            helm.contains("set csi_cinder_reclaim_policy=Retain"),
            "{helm}"
        );
        assert!(!helm.contains("keystone_auth_enabled"), "{helm}");
        let mcapi = template_notes(&labels, &[ClusterApi]).join("\n");
        // Set (to false) on the template: the template's own value holds, nothing to say.
        assert!(!mcapi.contains("keystone_auth_enabled"), "{mcapi}");
        assert!(mcapi.contains("server_group_policies unset"), "{mcapi}");
        assert!(!mcapi.contains("reclaim"), "{mcapi}");
        // The autoscaling maximum only matters to a template that autoscales.
        assert!(!mcapi.contains("max_node_count"), "{mcapi}");
        let mut scaling = labels.clone();
        scaling.insert("auto_scaling_enabled".into(), "True".into());
        let mcapi = template_notes(&scaling, &[ClusterApi]).join("\n");
        assert!(mcapi.contains("max_node_count unset"), "{mcapi}");
        assert!(template_notes(&Labels::new(), &[DriverFamily::Heat]).is_empty());
    }
}
