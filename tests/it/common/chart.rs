//! The Helm chart deploy/helm/magnum-capi as the tests see it: rendered by the Helm engine of
//! helm-python-sdk (`.ci/helm-venv.sh`, `.ci/helm-render.py`; no helm binary installs here), its
//! objects parsed, and the Deployment's API container materialised as a process would run it
//! (`Pod`: its files under a private root, its environment with the Secrets resolved).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use base64::Engine;
use serde::Deserialize;
use serde_json::Value;

pub const CHART: &str = "deploy/helm/magnum-capi";
/// The release and namespace every render uses (the plain manifests' too).
pub const RELEASE: &str = "magnum-capi";

/// The kinds the chart renders that have no namespace.
pub const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The helm-venv's python (built on first use, ~20 s, then cached in ~/.cache/magnum-capi).
fn python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let out = Command::new("bash")
            .arg(root().join(".ci/helm-venv.sh"))
            .output()
            .expect("run .ci/helm-venv.sh");
        assert!(
            out.status.success(),
            ".ci/helm-venv.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = String::from_utf8(out.stdout).expect("utf-8");
        PathBuf::from(dir.trim()).join("bin/python")
    })
}

fn helm_render(args: &[&str], values: &Value) -> (bool, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("values.json");
    std::fs::write(&file, values.to_string()).expect("write values");
    let mut cmd = Command::new(python());
    cmd.arg(root().join(".ci/helm-render.py"));
    for a in args {
        if *a == "VALUES" {
            cmd.arg(&file);
        } else {
            cmd.arg(a);
        }
    }
    let out = cmd
        .current_dir(root())
        .output()
        .expect("run helm-render.py");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The chart rendered with `values` (over its defaults): template path → YAML; `Err` is the
/// Helm engine's message (a `required`/`fail` of the chart, a template error).
pub fn try_render(values: &Value) -> Result<BTreeMap<String, String>, String> {
    try_render_chart(Path::new(CHART), values, RELEASE, RELEASE)
}

/// Any chart directory (relative paths are the repository's) rendered as release `release` in
/// `namespace` with `values` over its defaults, as [`try_render`] renders ours.
pub fn try_render_chart(
    chart: &Path,
    values: &Value,
    release: &str,
    namespace: &str,
) -> Result<BTreeMap<String, String>, String> {
    let chart = chart.to_str().expect("a UTF-8 chart path");
    let (ok, out, err) = helm_render(&[chart, "VALUES", release, namespace], values);
    if !ok {
        return Err(err);
    }
    Ok(serde_json::from_str(&out).expect("render output is JSON"))
}

/// The upstream charts of our add-ons, each in the directory its chart name names, fetched from
/// the Go modules that ship them by `tests/addon-charts/fetch.sh` on first use (~20 s) and cached
/// in ~/.cache/magnum-capi after; its `BUILD` says which versions.
pub fn addon_charts() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        super::realstack::cached_build(
            &root().join("tests/addon-charts/fetch.sh"),
            "add-on charts",
            "Go 1.26 and the Go module proxy",
        )
    })
}

pub fn render(values: &Value) -> BTreeMap<String, String> {
    try_render(values).unwrap_or_else(|e| panic!("the chart does not render: {e}"))
}

/// helm-render.py's JSON answer to `args` (values files as paths under the repository), which
/// must succeed.
fn render_files<T: serde::de::DeserializeOwned>(args: &[&str]) -> T {
    let out = Command::new(python())
        .arg(root().join(".ci/helm-render.py"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run helm-render.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// What `--manifests` makes of the chart with the values file `values` (a path under the
/// repository): file name → text, as deploy/kubernetes/generate.sh writes them.
pub fn plain_manifests(values: &str) -> BTreeMap<String, String> {
    render_files(&["--manifests", CHART, values, RELEASE, RELEASE])
}

/// What `--overlay` makes of the values files `base` and `overlay` (paths under the repository):
/// `{files: {name: YAML}, resources: [name], patches: [name]}`, as generate.sh writes the overlay.
pub fn overlay_manifests(base: &str, overlay: &str) -> Value {
    render_files(&["--overlay", CHART, base, overlay, RELEASE, RELEASE])
}

/// `helm lint --strict` with `values`: its error messages (none: it passed).
pub fn lint(values: &Value) -> Vec<String> {
    let (_, out, err) = helm_render(&["--lint", CHART, "VALUES", RELEASE], values);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("lint: {err}"));
    report["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Every object of a render, in template order.
pub fn objects(rendered: &BTreeMap<String, String>) -> Vec<Value> {
    let mut out = Vec::new();
    for (path, text) in rendered {
        for doc in yaml_serde::Deserializer::from_str(text) {
            let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}"));
            if !v.is_null() {
                out.push(v);
            }
        }
    }
    out
}

/// The one object of `kind` named `name` (any name when `None`).
pub fn find<'a>(objects: &'a [Value], kind: &str, name: Option<&str>) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && name.is_none_or(|n| o["metadata"]["name"] == n))
        .unwrap_or_else(|| panic!("no {kind} {name:?} rendered"))
}

/// The decoded `data` of a Secret (`stringData` too).
pub fn secret_data(secret: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in secret["data"].as_object().into_iter().flatten() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("base64 Secret data");
        out.insert(k.clone(), String::from_utf8(bytes).expect("utf-8"));
    }
    for (k, v) in secret["stringData"].as_object().into_iter().flatten() {
        out.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
    }
    out
}

/// The API container of the rendered Deployment as a process: its files written under `root`
/// (each volume's ConfigMap/Secret items at `root` + mount path), its arguments and environment
/// with every mount path moved under `root` and every Secret reference resolved. Secrets the
/// chart does not render (the operator's own) come from `existing`. `/tmp` stays the real one.
pub struct Pod {
    pub root: tempfile::TempDir,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Pod {
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub fn pod(objects: &[Value], existing: &[Value]) -> Pod {
    workload(objects, existing, "Deployment", None, "magnum-capi")
}

/// [`pod`] for container `container` of the `kind` object named `name` (any when `None`), e.g.
/// the migration Job's.
pub fn workload(
    objects: &[Value],
    existing: &[Value],
    kind: &str,
    name: Option<&str>,
    container: &str,
) -> Pod {
    let all: Vec<Value> = objects.iter().chain(existing).cloned().collect();
    let secret =
        |name: &str| -> BTreeMap<String, String> { secret_data(find(&all, "Secret", Some(name))) };
    let owner = find(objects, kind, name);
    let spec = &owner["spec"]["template"]["spec"];
    let container = spec["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == container))
        .unwrap_or_else(|| panic!("no container {container} in {kind} {name:?}"));
    let root = tempfile::tempdir().expect("pod root");
    let mounts: Vec<(String, String)> = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["mountPath"].as_str().unwrap().to_string(),
            )
        })
        .filter(|(_, path)| path != "/tmp")
        .collect();
    // The outermost mount paths: moving those moves every path under them.
    let moved: Vec<String> = mounts
        .iter()
        .map(|(_, p)| p.clone())
        .filter(|p| {
            !mounts
                .iter()
                .any(|(_, q)| q != p && p.starts_with(&format!("{q}/")))
        })
        .collect();
    let relocate = |text: &str| -> String {
        let mut t = text.to_string();
        for p in &moved {
            t = t.replace(p.as_str(), &format!("{}{p}", root.path().display()));
        }
        t
    };
    let volume = |name: &str| -> &Value {
        spec["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == name))
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    // (volume source, its items) → files
    let files_of = |source: &Value| -> BTreeMap<String, String> {
        let data = if let Some(cm) = source.get("configMap") {
            let name = cm["name"].as_str().unwrap();
            find(&all, "ConfigMap", Some(name))["data"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect::<BTreeMap<_, _>>()
        } else {
            let s = source.get("secret").expect("a configMap or secret volume");
            let name = s["secretName"].as_str().or(s["name"].as_str()).unwrap();
            secret(name)
        };
        let items = source
            .get("configMap")
            .or(source.get("secret"))
            .and_then(|s| s["items"].as_array());
        match items {
            None => data,
            Some(items) => items
                .iter()
                .map(|i| {
                    let key = i["key"].as_str().unwrap();
                    (
                        i["path"].as_str().unwrap().to_string(),
                        data.get(key)
                            .unwrap_or_else(|| panic!("no key {key}"))
                            .clone(),
                    )
                })
                .collect(),
        }
    };
    for (name, path) in &mounts {
        let v = volume(name);
        let files = if let Some(projected) = v.get("projected") {
            projected["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(files_of)
                .collect()
        } else if v.get("emptyDir").is_some() {
            BTreeMap::new()
        } else {
            files_of(v)
        };
        let dir = root.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).expect("mount dir");
        for (file, text) in files {
            std::fs::write(dir.join(&file), relocate(&text)).expect("write mounted file");
        }
    }
    let args = container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| relocate(a.as_str().unwrap()))
        .collect();
    let env = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let value = if let Some(v) = e["value"].as_str() {
                v.to_string()
            } else {
                let r = &e["valueFrom"]["secretKeyRef"];
                let (s, k) = (r["name"].as_str().unwrap(), r["key"].as_str().unwrap());
                secret(s)
                    .get(k)
                    .unwrap_or_else(|| panic!("{name}: Secret {s} has no key {k}"))
                    .clone()
            };
            (name, relocate(&value))
        })
        .collect();
    Pod { root, args, env }
}

/// An operator's own Secret (not rendered by the chart), as a rendered object.
pub fn existing_secret(name: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": RELEASE}, "data": data})
}
