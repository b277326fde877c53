//! Every image the add-on charts run in a workload cluster comes from `container_infra_prefix`:
//! the real upstream charts (fetched from the Go modules that ship them by
//! tests/addon-charts/fetch.sh) rendered by the Helm engine with the values our HelmChartProxies
//! carry for clusters with the prefix set, and every image of their manifests checked. Where our
//! values put the prefix is tests/it/render.rs (`every_addon_image_comes_from_the_prefix`); this
//! is what the charts make of those values, so an image the values forget is caught.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::OnceLock;

use magnum_capi::capi::values::{CHART_IMAGES, ImageKey, merge_values, under_prefix};
use serde_json::{Value, json};

use crate::common::chart::{addon_charts, objects, try_render_chart};
use crate::render::{PREFIX, chart_values, clusters_with_every_addon, find};

/// The charts our templates render that no Go module served here ships: not checked, for the
/// reason given. A chart in neither this list nor tests/addon-charts/fetch.sh fails the test.
const NOT_FETCHED: &[(&str, &str)] = &[
    (
        "kube-prometheus-stack",
        "no Go module ships it (prometheus-community's chart repository)",
    ),
    (
        "traefik",
        "no Go module ships it (Traefik's chart repository)",
    ),
    (
        "csi-driver-nfs",
        "the Go module proxy serves no version of its module",
    ),
];

/// Public registries: a string naming one outside a URL is an image that escaped the prefix,
/// wherever it stands (an argument, an environment variable, a ConfigMap).
const PUBLIC_REGISTRIES: &[&str] = &[
    "docker.io",
    "registry-1.docker.io",
    "quay.io",
    "ghcr.io",
    "gcr.io",
    "k8s.gcr.io",
    "registry.k8s.io",
    "nvcr.io",
    "mcr.microsoft.com",
    "public.ecr.aws",
];

/// The custom resources from which an operator the charts install picks the registry of the
/// images it runs (Calico's, from tigera-operator's `Installation`), and where: unset, that is
/// the operator's default public registry.
const OPERATOR_REGISTRIES: &[(&str, &str)] = &[("Installation", "/spec/registry")];

/// What an unset [`OPERATOR_REGISTRIES`] field is listed as.
const UNSET: &str = "unset: the operator's default registry";

/// The image references of `v` (a rendered object, at `at`): the strings under `image` keys
/// (joined to the `repository` beside them when they have no path of their own, as the GPU
/// operator's ClusterPolicy names images) and under `registry` keys (Calico's Installation).
fn image_refs(v: &Value, at: &str, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let here = format!("{at}.{k}");
                match (k.as_str(), v) {
                    ("image", Value::String(image)) => {
                        let repository = m.get("repository").and_then(Value::as_str);
                        let image = match repository {
                            Some(r) if !r.is_empty() && !image.contains('/') => {
                                format!("{r}/{image}")
                            }
                            _ => image.clone(),
                        };
                        out.insert(here, image);
                    }
                    ("registry", Value::String(r)) if !r.is_empty() => {
                        out.insert(here, r.clone());
                    }
                    _ => image_refs(v, &here, out),
                }
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                image_refs(v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Every mention of a public registry in the strings of `v` (outside URLs), at `at`.
fn public_registry_mentions(v: &Value, at: &str, out: &mut BTreeSet<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                public_registry_mentions(v, &format!("{at}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                public_registry_mentions(v, &format!("{at}[{i}]"), out);
            }
        }
        Value::String(s) => {
            for registry in PUBLIC_REGISTRIES {
                let needle = format!("{registry}/");
                for (i, _) in s.match_indices(&needle) {
                    let boundary = s[..i]
                        .chars()
                        .next_back()
                        .is_none_or(|c| c.is_whitespace() || "\"'=,:[(".contains(c));
                    if boundary {
                        let token = s[i..]
                            .split(|c: char| c.is_whitespace() || "\"',)]".contains(c))
                            .next()
                            .unwrap_or_default();
                        out.insert((at.to_owned(), token.to_owned()));
                    }
                }
            }
        }
        _ => {}
    }
}

/// One add-on chart rendered: its image references by where they are (`Kind/name.path`), and
/// the public registries its strings name, with where.
struct Images {
    refs: BTreeMap<String, String>,
    mentions: BTreeSet<(String, String)>,
}

impl Images {
    /// Every image that is not under `PREFIX`, as `image (where)`.
    fn escaping(&self) -> impl Iterator<Item = String> {
        let mentions = self.mentions.iter().map(|(at, r)| (at, r));
        self.refs
            .iter()
            .chain(mentions)
            .filter(|(_, r)| !r.starts_with(&format!("{PREFIX}/")))
            .map(|(at, r)| format!("{r} ({at})"))
    }
}

/// What `chart` (fetched) rendered as release `release` in `namespace` with `values` runs.
fn chart_images(chart: &str, release: &str, namespace: &str, values: &Value) -> Images {
    let dir: PathBuf = addon_charts().join(chart);
    assert!(
        dir.join("Chart.yaml").is_file(),
        "{chart}: not fetched: pin the Go module that ships it in tests/addon-charts/fetch.sh, \
         or say in NOT_FETCHED why it cannot be"
    );
    let mut rendered = try_render_chart(&dir, values, release, namespace)
        .unwrap_or_else(|e| panic!("{chart} does not render with our values {values}: {e}"));
    // What Helm installs: neither the notes nor the partials.
    rendered.retain(|path, _| {
        let file = path.rsplit('/').next().unwrap_or_default();
        file != "NOTES.txt" && !file.starts_with('_')
    });
    let mut refs = BTreeMap::new();
    let mut mentions = BTreeSet::new();
    for o in objects(&rendered) {
        let at = format!(
            "{}/{}",
            o["kind"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        );
        image_refs(&o, &at, &mut refs);
        public_registry_mentions(&o, &at, &mut mentions);
        for (kind, pointer) in OPERATOR_REGISTRIES {
            if o["kind"] == *kind && o.pointer(pointer).is_none() {
                let field = pointer.trim_start_matches('/').replace('/', ".");
                refs.insert(format!("{at}.{field}"), UNSET.to_owned());
            }
        }
    }
    Images { refs, mentions }
}

/// Each chart rendered (in the order of its HelmChartProxies), and the charts of them all.
type Renders = (Vec<(String, Images)>, BTreeSet<String>);

/// The add-on charts of clusters with every add-on on (one per CNI and ingress controller, and
/// Hubble), `labels` added: each HelmChartProxy of a fetched chart, in order, with its values
/// and `extra` merged over them, rendered (the first of equal values only); the charts of all
/// the HelmChartProxies.
fn addon_renders(labels: Value, extra: &dyn Fn(&str) -> Value) -> Renders {
    let mut l = json!({"cilium_hubble_ui_enabled": "true"});
    l.as_object_mut()
        .unwrap()
        .extend(labels.as_object().unwrap().clone());
    let objects = clusters_with_every_addon(l);
    let mut renders = Vec::new();
    let mut seen = BTreeSet::new();
    let mut charts = BTreeSet::new();
    for hcp in find(&objects, "HelmChartProxy") {
        let spec = &hcp["spec"];
        let chart = spec["chartName"].as_str().unwrap().to_owned();
        charts.insert(chart.clone());
        if NOT_FETCHED.iter().any(|(c, _)| *c == chart) {
            continue;
        }
        let mut values = chart_values(hcp);
        merge_values(&mut values, &extra(&chart));
        if !seen.insert((chart.clone(), values.to_string())) {
            continue;
        }
        let images = chart_images(
            &chart,
            spec["releaseName"].as_str().unwrap(),
            spec["namespace"].as_str().unwrap(),
            &values,
        );
        assert!(!images.refs.is_empty(), "{chart}: renders no image");
        renders.push((chart, images));
    }
    (renders, charts)
}

/// `renders`' images that escape the prefix, per chart; the failure lists them.
fn assert_under_the_prefix(renders: &[(String, Images)], what: &str) {
    let mut escaping: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (chart, images) in renders {
        escaping.entry(chart).or_default().extend(images.escaping());
    }
    let report: Vec<String> = escaping
        .iter()
        .filter(|(_, images)| !images.is_empty())
        .map(|(chart, images)| {
            let list: Vec<&str> = images.iter().map(String::as_str).collect();
            format!("{chart}:\n  {}", list.join("\n  "))
        })
        .collect();
    assert!(
        report.is_empty(),
        "images of the add-on charts ({what}) not under container_infra_prefix {PREFIX}:\n{}",
        report.join("\n")
    );
}

fn with_the_prefix() -> Value {
    json!({"container_infra_prefix": format!("{PREFIX}/")})
}

fn nothing(_: &str) -> Value {
    json!({})
}

/// The charts with our values and the prefix, rendered once for the tests that read them.
fn with_our_values() -> &'static Renders {
    static RENDERS: OnceLock<Renders> = OnceLock::new();
    RENDERS.get_or_init(|| addon_renders(with_the_prefix(), &nothing))
}

#[test]
fn every_image_of_every_addon_chart_comes_from_the_prefix() {
    let (renders, charts) = with_our_values();
    assert_under_the_prefix(renders, "our values");
    // Every chart is checked, or says why it cannot be.
    let checked: BTreeSet<&str> = renders.iter().map(|(c, _)| c.as_str()).collect();
    let unchecked: BTreeSet<&str> = NOT_FETCHED.iter().map(|(c, _)| *c).collect();
    let all: BTreeSet<&str> = checked.union(&unchecked).copied().collect();
    let rendered: BTreeSet<&str> = charts.iter().map(String::as_str).collect();
    assert_eq!(
        all, rendered,
        "charts checked or NOT_FETCHED, and charts rendered"
    );
}

#[test]
fn the_prefix_keeps_the_path_of_every_addon_chart_image() {
    let (plain, _) = addon_renders(json!({}), &nothing);
    let (prefixed, _) = with_our_values();
    assert_eq!(plain.len(), prefixed.len());
    let mut wrong = Vec::new();
    for ((chart, plain), (same_chart, prefixed)) in plain.iter().zip(prefixed) {
        assert_eq!(chart, same_chart);
        for (at, upstream) in &plain.refs {
            let Some(moved) = prefixed.refs.get(at).filter(|_| upstream != UNSET) else {
                continue;
            };
            let expected = under_prefix(PREFIX, upstream);
            if *moved != expected {
                wrong.push(format!(
                    "{chart}: {at}: {upstream} became {moved}, not {expected}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Values that switch on the parts of each chart our templates leave off (an operator's
/// template override may switch them on).
fn every_optional_part(chart: &str) -> Value {
    match chart {
        "cilium" => json!({
            "hubble": {"tls": {"auto": {"method": "cronJob"}}},
            "clustermesh": {"useAPIServer": true},
            "nodeinit": {"enabled": true},
            "preflight": {"enabled": true},
            "authentication": {
                "enabled": true,
                "mutual": {"spire": {"enabled": true, "install": {"enabled": true}}},
            },
            "encryption": {"enabled": true, "type": "ztunnel"},
        }),
        "flannel" => json!({"netpol": {"enabled": true}}),
        "metrics-server" => json!({"addonResizer": {"enabled": true}}),
        "ingress-nginx" => json!({
            "defaultBackend": {"enabled": true},
            "controller": {"opentelemetry": {"enabled": true}},
        }),
        "gpu-operator" => json!({
            "node-feature-discovery": {"gc": {"enable": true}, "topologyUpdater": {"enable": true}},
        }),
        _ => json!({}),
    }
}

#[test]
fn the_optional_parts_of_the_addon_charts_take_their_images_from_the_prefix_too() {
    let (renders, _) = addon_renders(with_the_prefix(), &every_optional_part);
    assert_under_the_prefix(&renders, "every optional part on");
    // And every image CHART_IMAGES moves is one of them: no row names a values key the chart
    // does not use.
    let mut unused = Vec::new();
    for (chart, images) in CHART_IMAGES {
        let rendered: Vec<&String> = renders
            .iter()
            .filter(|(c, _)| c == chart)
            .flat_map(|(_, i)| i.refs.values())
            .collect();
        for image in *images {
            if let ImageKey::Repository(upstream) = image.key {
                let moved = under_prefix(PREFIX, upstream);
                if !rendered.is_empty() && !rendered.iter().any(|r| r.starts_with(&moved)) {
                    unused.push(format!("{chart}: {} ({moved})", image.path));
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "rows of CHART_IMAGES that no rendered image follows:\n{}",
        unused.join("\n")
    );
}
