//! Add-on images: where each chart we render takes its images from ([`CHART_IMAGES`]), so that
//! `container_infra_prefix` moves every one of them to the prefix registry (air-gapped clusters)
//! and the image tag labels (`cloud_provider_tag`, `cinder_csi_plugin_tag`, the `csi_*_tag`
//! family, …) set the tag of the image they name. The result is one values overlay per chart,
//! merged by the renderer into that chart's HelmChartProxy `valuesTemplate`.
//!
//! The rule of the prefix: the registry is replaced and the image's path kept
//! (`registry.k8s.io/provider-os/openstack-cloud-controller-manager` →
//! `<prefix>/provider-os/openstack-cloud-controller-manager`), which is what mirroring each
//! upstream registry into one registry (`crane`/`skopeo sync`) gives. kubeadm's own images follow
//! kubeadm's rule (`<prefix>/<name>`). Image digests the charts pin are kept: a mirror copies
//! them unchanged.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::error::ValuesError;
use super::labels::LabelView;

/// How a chart names one of its images.
#[derive(Debug, Clone, Copy)]
pub enum ImageKey {
    /// `<path>.repository` holds the image (or, for the GPU operator, its path) with its
    /// registry: it becomes the prefix plus the upstream's path. Tags are `<path>.tag`.
    Repository(&'static str),
    /// `<path>.registry` holds the registry of images whose repository the chart keeps.
    Registry,
    /// `<path>` itself is the image, registry and path, without a tag.
    Image(&'static str),
    /// `<path>` is a registry for several images; `true`: it must end in `/` (Calico's
    /// `Installation`).
    RegistryOf { trailing_slash: bool },
    /// `<path>` is a list whose entries name their images whole, tags included (the GPU
    /// operator's Kata runtime classes): no registry value moves them, so under a prefix the list
    /// is emptied rather than left pulling from the public registry (an operator who needs them
    /// lists the mirrored ones in a template override).
    EmptiedList,
}

/// One image of a chart.
#[derive(Debug, Clone, Copy)]
pub struct ChartImage {
    /// Dotted path in the chart's values.
    pub path: &'static str,
    pub key: ImageKey,
    /// The label that sets its tag (`<path>.tag`).
    pub tag_label: Option<&'static str>,
}

const fn repo(path: &'static str, upstream: &'static str) -> ChartImage {
    ChartImage {
        path,
        key: ImageKey::Repository(upstream),
        tag_label: None,
    }
}

const fn tagged(path: &'static str, upstream: &'static str, label: &'static str) -> ChartImage {
    ChartImage {
        path,
        key: ImageKey::Repository(upstream),
        tag_label: Some(label),
    }
}

const fn registry(path: &'static str) -> ChartImage {
    ChartImage {
        path,
        key: ImageKey::Registry,
        tag_label: None,
    }
}

/// Every chart the built-in templates render, with every image its values name (read from each
/// chart's `values.yaml` at the version `[capi]` pins; images of components we leave off are
/// listed too, so switching one on in a template override stays covered). A chart added to
/// the templates without a row here fails the render tests (`every_addon_image_comes_from_the_prefix`);
/// tests/it/addon_images.rs renders the real charts with these values and fails on any image
/// of their manifests, optional parts on, left outside the prefix or moved off its path.
pub const CHART_IMAGES: &[(&str, &[ChartImage])] = &[
    (
        "tigera-operator",
        &[
            ChartImage {
                path: "tigeraOperator.registry",
                key: ImageKey::RegistryOf {
                    trailing_slash: false,
                },
                tag_label: None,
            },
            ChartImage {
                path: "calicoctl.image",
                key: ImageKey::Image("quay.io/calico/ctl"),
                tag_label: None,
            },
            ChartImage {
                path: "installation.registry",
                key: ImageKey::RegistryOf {
                    trailing_slash: true,
                },
                tag_label: None,
            },
        ],
    ),
    (
        "cilium",
        &[
            repo("image", "quay.io/cilium/cilium"),
            repo("operator.image", "quay.io/cilium/operator"),
            repo("envoy.image", "quay.io/cilium/cilium-envoy"),
            repo("hubble.relay.image", "quay.io/cilium/hubble-relay"),
            repo(
                "hubble.ui.backend.image",
                "quay.io/cilium/hubble-ui-backend",
            ),
            repo("hubble.ui.frontend.image", "quay.io/cilium/hubble-ui"),
            repo("certgen.image", "quay.io/cilium/certgen"),
            repo("nodeinit.image", "quay.io/cilium/startup-script"),
            repo("preflight.image", "quay.io/cilium/cilium"),
            repo("preflight.envoy.image", "quay.io/cilium/cilium-envoy"),
            repo(
                "clustermesh.apiserver.image",
                "quay.io/cilium/clustermesh-apiserver",
            ),
            repo(
                "authentication.mutual.spire.install.initImage",
                "docker.io/library/busybox",
            ),
            repo(
                "authentication.mutual.spire.install.agent.image",
                "ghcr.io/spiffe/spire-agent",
            ),
            repo(
                "authentication.mutual.spire.install.server.image",
                "ghcr.io/spiffe/spire-server",
            ),
            repo("encryption.ztunnel.image", "docker.io/istio/ztunnel"),
        ],
    ),
    (
        "flannel",
        &[
            repo("flannel.image", "ghcr.io/flannel-io/flannel"),
            repo("flannel.image_cni", "ghcr.io/flannel-io/flannel-cni-plugin"),
            repo(
                "netpol.image",
                "registry.k8s.io/networking/kube-network-policies",
            ),
        ],
    ),
    (
        "openstack-cloud-controller-manager",
        &[tagged(
            "image",
            "registry.k8s.io/provider-os/openstack-cloud-controller-manager",
            "cloud_provider_tag",
        )],
    ),
    (
        "openstack-cinder-csi",
        &[
            tagged(
                "csi.attacher.image",
                "registry.k8s.io/sig-storage/csi-attacher",
                "csi_attacher_tag",
            ),
            tagged(
                "csi.provisioner.image",
                "registry.k8s.io/sig-storage/csi-provisioner",
                "csi_provisioner_tag",
            ),
            tagged(
                "csi.snapshotter.image",
                "registry.k8s.io/sig-storage/csi-snapshotter",
                "csi_snapshotter_tag",
            ),
            tagged(
                "csi.resizer.image",
                "registry.k8s.io/sig-storage/csi-resizer",
                "csi_resizer_tag",
            ),
            tagged(
                "csi.livenessprobe.image",
                "registry.k8s.io/sig-storage/livenessprobe",
                "csi_liveness_probe_tag",
            ),
            tagged(
                "csi.nodeDriverRegistrar.image",
                "registry.k8s.io/sig-storage/csi-node-driver-registrar",
                "csi_node_driver_registrar_tag",
            ),
            tagged(
                "csi.plugin.image",
                "registry.k8s.io/provider-os/cinder-csi-plugin",
                "cinder_csi_plugin_tag",
            ),
        ],
    ),
    (
        "openstack-manila-csi",
        &[
            tagged(
                "csimanila.image",
                "registry.k8s.io/provider-os/manila-csi-plugin",
                "manila_csi_plugin_tag",
            ),
            repo(
                "nodeplugin.registrar.image",
                "registry.k8s.io/sig-storage/csi-node-driver-registrar",
            ),
            repo(
                "controllerplugin.provisioner.image",
                "registry.k8s.io/sig-storage/csi-provisioner",
            ),
            repo(
                "controllerplugin.snapshotter.image",
                "registry.k8s.io/sig-storage/csi-snapshotter",
            ),
            repo(
                "controllerplugin.resizer.image",
                "registry.k8s.io/sig-storage/csi-resizer",
            ),
        ],
    ),
    (
        "csi-driver-nfs",
        &[
            repo("image.nfs", "registry.k8s.io/sig-storage/nfsplugin"),
            repo(
                "image.csiProvisioner",
                "registry.k8s.io/sig-storage/csi-provisioner",
            ),
            repo(
                "image.csiResizer",
                "registry.k8s.io/sig-storage/csi-resizer",
            ),
            repo(
                "image.csiSnapshotter",
                "registry.k8s.io/sig-storage/csi-snapshotter",
            ),
            repo(
                "image.livenessProbe",
                "registry.k8s.io/sig-storage/livenessprobe",
            ),
            repo(
                "image.nodeDriverRegistrar",
                "registry.k8s.io/sig-storage/csi-node-driver-registrar",
            ),
            repo(
                "image.externalSnapshotter",
                "registry.k8s.io/sig-storage/snapshot-controller",
            ),
        ],
    ),
    (
        "metrics-server",
        &[
            repo("image", "registry.k8s.io/metrics-server/metrics-server"),
            repo(
                "addonResizer.image",
                "registry.k8s.io/autoscaling/addon-resizer",
            ),
        ],
    ),
    (
        // `global.imageRegistry` replaces the registry of every image of the chart and of its
        // subcharts (Grafana, kube-state-metrics, node-exporter).
        "kube-prometheus-stack",
        &[ChartImage {
            path: "global.imageRegistry",
            key: ImageKey::RegistryOf {
                trailing_slash: false,
            },
            tag_label: None,
        }],
    ),
    // The controller, its admission-webhook job and the default backend take their registry
    // from `global.image` since chart 4.12, from their own `registry` before (set too, so that
    // an older `ingress_nginx_chart_version` stays under the prefix).
    (
        "ingress-nginx",
        &[
            registry("global.image"),
            registry("controller.image"),
            registry("controller.admissionWebhooks.patch.image"),
            registry("controller.opentelemetry.image"),
            registry("defaultBackend.image"),
        ],
    ),
    ("traefik", &[registry("image")]),
    (
        "gpu-operator",
        &[
            repo("operator", "nvcr.io/nvidia"),
            repo("operator.initContainer", "nvcr.io/nvidia"),
            repo("validator", "nvcr.io/nvidia/cloud-native"),
            repo("driver", "nvcr.io/nvidia"),
            repo("driver.manager", "nvcr.io/nvidia/cloud-native"),
            repo("toolkit", "nvcr.io/nvidia/k8s"),
            repo("devicePlugin", "nvcr.io/nvidia"),
            repo("dcgm", "nvcr.io/nvidia/cloud-native"),
            repo("dcgmExporter", "nvcr.io/nvidia/k8s"),
            repo("gfd", "nvcr.io/nvidia"),
            repo("migManager", "nvcr.io/nvidia/cloud-native"),
            repo("nodeStatusExporter", "nvcr.io/nvidia/cloud-native"),
            repo("gds", "nvcr.io/nvidia/cloud-native"),
            repo("gdrcopy", "nvcr.io/nvidia/cloud-native"),
            repo("vgpuDeviceManager", "nvcr.io/nvidia/cloud-native"),
            // No public image: one the operator builds, which goes to the prefix registry.
            repo("vgpuManager", ""),
            repo("vgpuManager.driverManager", "nvcr.io/nvidia/cloud-native"),
            repo("vfioManager", "nvcr.io/nvidia"),
            repo("vfioManager.driverManager", "nvcr.io/nvidia/cloud-native"),
            repo("sandboxDevicePlugin", "nvcr.io/nvidia"),
            repo("kataManager", "nvcr.io/nvidia/cloud-native"),
            ChartImage {
                path: "kataManager.config.runtimeClasses",
                key: ImageKey::EmptiedList,
                tag_label: None,
            },
            repo("ccManager", "nvcr.io/nvidia/cloud-native"),
            repo(
                "node-feature-discovery.image",
                "registry.k8s.io/nfd/node-feature-discovery",
            ),
        ],
    ),
];

/// Every image tag label, in the order of [`CHART_IMAGES`].
pub fn tag_labels() -> impl Iterator<Item = &'static str> {
    CHART_IMAGES
        .iter()
        .flat_map(|(_, images)| images.iter().filter_map(|i| i.tag_label))
}

/// `container_infra_prefix`, checked: a registry host with an optional path, without a
/// scheme, tag or digest; a trailing `/` is dropped.
pub(super) fn prefix(view: &LabelView<'_>) -> Result<Option<String>, ValuesError> {
    view.parsed(&["container_infra_prefix"], |v| {
        let p = v.trim_end_matches('/');
        if p.contains("://") {
            return Err(
                "must be a registry and path like registry.example.com/k8s, without a \
                        scheme"
                    .into(),
            );
        }
        if p.contains('@') || p.is_empty() {
            return Err("must be a registry and path like registry.example.com/k8s".into());
        }
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '/');
        if !p.chars().all(ok) || p.contains("//") {
            return Err("must be a registry and path like registry.example.com/k8s".into());
        }
        Ok(p.to_owned())
    })
}

/// A tag label's value: an OCI tag (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`).
fn tag(view: &LabelView<'_>, label: &'static str) -> Result<Option<String>, ValuesError> {
    view.parsed(&[label], |v| {
        let mut chars = v.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if first_ok
            && v.len() <= 128
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            Ok(v.to_owned())
        } else {
            Err("must be an image tag like v1.33.1".into())
        }
    })
}

/// The tag labels, checked (template create/PATCH).
pub(super) fn check_labels(view: &LabelView<'_>) -> Result<(), ValuesError> {
    prefix(view)?;
    for label in tag_labels() {
        tag(view, label)?;
    }
    Ok(())
}

/// `upstream` (registry/path) moved under `prefix`: the registry replaced, the path kept (no
/// upstream: the prefix itself).
pub fn under_prefix(prefix: &str, upstream: &str) -> String {
    if upstream.is_empty() {
        return prefix.to_owned();
    }
    match upstream.split_once('/') {
        Some((first, path)) if first.contains('.') || first.contains(':') => {
            format!("{prefix}/{path}")
        }
        _ => format!("{prefix}/{upstream}"),
    }
}

/// The values overlay of every chart that `prefix` or a tag label changes, by chart name.
pub(super) fn overlays(
    view: &LabelView<'_>,
    prefix: Option<&str>,
) -> Result<BTreeMap<String, Value>, ValuesError> {
    let mut out = BTreeMap::new();
    for (chart, images) in CHART_IMAGES {
        let mut overlay = Value::Object(Map::new());
        for image in *images {
            let tag = match image.tag_label {
                Some(label) => tag(view, label)?,
                None => None,
            };
            if let Some(tag) = tag {
                set(&mut overlay, image.path, "tag", Value::String(tag));
            }
            let Some(prefix) = prefix else { continue };
            // The keys that name the image themselves are set where they are.
            let (parent, leaf) = image.path.rsplit_once('.').unwrap_or(("", image.path));
            let (parent, key, value) = match image.key {
                ImageKey::Repository(upstream) => (
                    image.path,
                    "repository",
                    Value::String(under_prefix(prefix, upstream)),
                ),
                ImageKey::Registry => (image.path, "registry", Value::String(prefix.to_owned())),
                ImageKey::Image(upstream) => {
                    (parent, leaf, Value::String(under_prefix(prefix, upstream)))
                }
                ImageKey::RegistryOf { trailing_slash } => {
                    let value = match trailing_slash {
                        true => format!("{prefix}/"),
                        false => prefix.to_owned(),
                    };
                    (parent, leaf, Value::String(value))
                }
                ImageKey::EmptiedList => (parent, leaf, Value::Array(Vec::new())),
            };
            set(&mut overlay, parent, key, value);
        }
        if overlay.as_object().is_some_and(|m| !m.is_empty()) {
            out.insert((*chart).to_owned(), overlay);
        }
    }
    Ok(out)
}

/// Sets `<path>.<key>` in `root`, creating the maps on the way (`path` may be empty).
fn set(root: &mut Value, path: &str, key: &str, value: Value) {
    let mut at = root;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let Value::Object(m) = at else { return };
        at = m
            .entry(part.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if let Value::Object(m) = at {
        m.insert(key.to_owned(), value);
    }
}

/// `overlay` merged into `base`: maps merged key by key, anything else replaced.
pub fn merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::values::cx::label_map as l;

    #[test]
    fn the_prefix_replaces_the_registry_and_keeps_the_path() {
        assert_eq!(
            under_prefix(
                "reg.example.com:5000/k8s",
                "registry.k8s.io/sig-storage/csi-resizer"
            ),
            "reg.example.com:5000/k8s/sig-storage/csi-resizer"
        );
        assert_eq!(under_prefix("reg", "traefik"), "reg/traefik");
        // An image with no public upstream (the GPU operator's vGPU manager) is the prefix's.
        assert_eq!(under_prefix("reg", ""), "reg");
    }

    #[test]
    fn a_list_naming_its_images_whole_is_emptied_under_a_prefix() {
        let labels = l(&[]);
        let out = overlays(&LabelView::cluster(&labels), Some("reg")).unwrap();
        assert_eq!(
            out["gpu-operator"]["kataManager"]["config"]["runtimeClasses"],
            serde_json::json!([])
        );
        assert_eq!(out["gpu-operator"]["vgpuManager"]["repository"], "reg");
    }

    #[test]
    fn prefixes_and_tags_are_checked() {
        for bad_prefix in [
            "https://reg.example.com",
            "reg.example.com/k8s@sha256",
            "a b",
        ] {
            let labels = l(&[("container_infra_prefix", bad_prefix)]);
            assert!(
                check_labels(&LabelView::cluster(&labels)).is_err(),
                "{bad_prefix}"
            );
        }
        let labels = l(&[("container_infra_prefix", "reg.example.com/k8s/")]);
        assert_eq!(
            prefix(&LabelView::cluster(&labels)).unwrap().as_deref(),
            Some("reg.example.com/k8s")
        );
        let labels = l(&[("cloud_provider_tag", "v1.33.1; rm -rf")]);
        let err = check_labels(&LabelView::cluster(&labels)).unwrap_err();
        assert!(err.to_string().contains("cloud_provider_tag"), "{err}");
    }

    #[test]
    fn no_prefix_and_no_tag_label_change_nothing() {
        let labels = l(&[]);
        assert!(
            overlays(&LabelView::cluster(&labels), None)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn merging_keeps_what_the_overlay_does_not_name() {
        let mut base = serde_json::json!({"csi": {"plugin": {"extraEnv": [1]}}, "a": 1});
        merge(
            &mut base,
            &serde_json::json!({"csi": {"plugin": {"image": {"tag": "v1"}}}}),
        );
        assert_eq!(
            base,
            serde_json::json!({"csi": {"plugin": {"extraEnv": [1], "image": {"tag": "v1"}}}, "a": 1})
        );
    }
}
