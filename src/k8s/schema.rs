//! What the management cluster's apiserver would check on our objects, without one: CRD
//! `openAPIV3Schema` validation (with the apiserver's defaulting and pruning imitated) and the
//! metadata rules (names, label syntax) that no schema carries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

/// Errors while loading CRD files.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("cannot read CRD directory {path}: {source}")]
    ReadDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read CRD file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a CustomResourceDefinition: {reason}")]
    NotACrd { path: PathBuf, reason: String },
    #[error("{path}: the schema of {api_version} {kind} does not compile: {message}")]
    Compile {
        path: PathBuf,
        api_version: String,
        kind: String,
        message: String,
    },
    #[error("no CustomResourceDefinition in {0}")]
    Empty(PathBuf),
}

struct Compiled {
    /// The CRD's schema as written (its `default`s and `nullable`s drive the pre-validation pass).
    raw: Value,
    validator: jsonschema::Validator,
}

/// Every served version of every CRD in a directory, compiled once.
pub struct CrdSchemas {
    /// Keyed by (`apiVersion`, `kind`).
    schemas: HashMap<(String, String), Compiled>,
}

impl std::fmt::Debug for CrdSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<_> = self.schemas.keys().collect();
        keys.sort();
        f.debug_struct("CrdSchemas").field("kinds", &keys).finish()
    }
}

impl CrdSchemas {
    /// Reads every `*.yaml`/`*.yml` file of `dir` (not recursing) that holds a
    /// CustomResourceDefinition and compiles each served version's schema.
    pub fn load(dir: &Path) -> Result<Self, SchemaError> {
        let entries = std::fs::read_dir(dir).map_err(|source| SchemaError::ReadDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut paths = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| SchemaError::ReadDir {
                path: dir.to_path_buf(),
                source,
            })?;
            let path = entry.path();
            let yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
            if yaml && path.is_file() {
                paths.push(path);
            }
        }
        paths.sort();
        let mut schemas = HashMap::new();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|source| SchemaError::Read {
                path: path.clone(),
                source,
            })?;
            for doc in yaml_serde::Deserializer::from_str(&text) {
                let crd = Value::deserialize(doc).map_err(|e| SchemaError::NotACrd {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                    continue;
                }
                for (key, compiled) in compile_crd(&path, &crd)? {
                    schemas.insert(key, compiled);
                }
            }
        }
        if schemas.is_empty() {
            return Err(SchemaError::Empty(dir.to_path_buf()));
        }
        Ok(Self { schemas })
    }

    /// Whether a CRD serves `kind` at `api_version`.
    pub fn has(&self, api_version: &str, kind: &str) -> bool {
        self.schemas
            .contains_key(&(api_version.to_owned(), kind.to_owned()))
    }

    /// The `openAPIV3Schema` (as written) serving `kind` at `api_version`.
    pub fn schema(&self, api_version: &str, kind: &str) -> Option<&Value> {
        self.schemas
            .get(&(api_version.to_owned(), kind.to_owned()))
            .map(|c| &c.raw)
    }

    /// Every served (`apiVersion`, `kind`) with its schema as written.
    pub fn kinds(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.schemas
            .iter()
            .map(|((av, kind), c)| (av.as_str(), kind.as_str(), &c.raw))
    }

    /// What the apiserver does to a custom resource before validating and storing it: drops
    /// `null`s of non-nullable fields and fills in the schema's `default`s. Other kinds are left
    /// alone.
    pub fn apply_defaults(&self, obj: &mut Value) {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        if let Some(compiled) = self.schemas.get(&(api_version.to_owned(), kind.to_owned())) {
            default_and_prune(obj, &compiled.raw);
        }
    }

    /// Validates `obj` against its CRD: `Ok(true)` when valid, `Ok(false)` when no CRD serves its
    /// apiVersion/kind (built-in kinds, kinds of other providers), else one `at <json pointer>:
    /// <message>` line per problem. Like the apiserver, nulls of non-nullable fields are dropped
    /// and `default`s applied first, and unknown fields are errors (not pruned).
    pub fn validate(&self, obj: &Value) -> Result<bool, Vec<String>> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let Some(compiled) = self.schemas.get(&(api_version.to_owned(), kind.to_owned())) else {
            return Ok(false);
        };
        let mut obj = obj.clone();
        default_and_prune(&mut obj, &compiled.raw);
        let errors: Vec<String> = compiled
            .validator
            .iter_errors(&obj)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("at {at}: {e}")
            })
            .collect();
        if errors.is_empty() {
            Ok(true)
        } else {
            Err(errors)
        }
    }
}

type CompiledVersions = Vec<((String, String), Compiled)>;

fn compile_crd(path: &Path, crd: &Value) -> Result<CompiledVersions, SchemaError> {
    let not_crd = |reason: &str| SchemaError::NotACrd {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    let spec = crd.get("spec").ok_or_else(|| not_crd("no spec"))?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or_else(|| not_crd("no spec.group"))?;
    let kind = spec
        .pointer("/names/kind")
        .and_then(Value::as_str)
        .ok_or_else(|| not_crd("no spec.names.kind"))?;
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or_else(|| not_crd("no spec.versions"))?;
    let mut out = Vec::new();
    for v in versions {
        if v.get("served") == Some(&Value::Bool(false)) {
            continue;
        }
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| not_crd("a version without a name"))?;
        let Some(raw) = v.pointer("/schema/openAPIV3Schema") else {
            continue;
        };
        let api_version = format!("{group}/{name}");
        let mut strict = raw.clone();
        kubify(&mut strict);
        // The apiserver checks an object's own metadata as ObjectMeta whatever the CRD says;
        // `check_metadata` covers what matters of it.
        if let Some(Value::Object(props)) = strict.get_mut("properties")
            && props.contains_key("metadata")
        {
            props.insert("metadata".into(), json!({"type": "object"}));
        }
        let validator = jsonschema::draft4::options()
            .should_validate_formats(true)
            .build(&strict)
            .map_err(|e| SchemaError::Compile {
                path: path.to_path_buf(),
                api_version: api_version.clone(),
                kind: kind.to_owned(),
                message: e.to_string(),
            })?;
        out.push((
            (api_version, kind.to_owned()),
            Compiled {
                raw: raw.clone(),
                validator,
            },
        ));
    }
    Ok(out)
}

/// Turns a structural CRD schema into a JSON schema that rejects what the apiserver rejects or
/// prunes: `nullable` admits `null`, and objects with `properties` (and no
/// `x-kubernetes-preserve-unknown-fields`) admit no other keys. CEL rules stay unchecked.
fn kubify(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    if m.get("nullable") == Some(&Value::Bool(true))
        && let Some(Value::String(t)) = m.get("type").cloned()
    {
        m.insert("type".into(), json!([t, "null"]));
    }
    let preserve = m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if m.contains_key("properties") && !m.contains_key("additionalProperties") && !preserve {
        m.insert("additionalProperties".into(), Value::Bool(false));
    }
    // Recurse into sub-schemas only: `default`/`enum` values are data, and `properties` keys are
    // field names (a field may well be called `default`).
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(kubify);
    }
    for key in ["items", "additionalProperties", "not"] {
        match m.get_mut(key) {
            Some(v @ Value::Object(_)) => kubify(v),
            Some(Value::Array(items)) => items.iter_mut().for_each(kubify),
            _ => {}
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(items)) = m.get_mut(key) {
            items.iter_mut().for_each(kubify);
        }
    }
}

/// The apiserver's steps before validation: drop `null`s of non-nullable fields, then fill in
/// `default`s, recursively.
fn default_and_prune(obj: &mut Value, schema: &Value) {
    match obj {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                m.retain(|k, v| {
                    !(v.is_null()
                        && props
                            .get(k)
                            .is_some_and(|s| s.get("nullable") != Some(&Value::Bool(true))))
                });
                for (k, prop) in props {
                    if !m.contains_key(k)
                        && let Some(d) = prop.get("default")
                    {
                        m.insert(k.clone(), d.clone());
                    }
                    if let Some(v) = m.get_mut(k) {
                        default_and_prune(v, prop);
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for v in m.values_mut() {
                    default_and_prune(v, ap);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for v in items.iter_mut() {
                    default_and_prune(v, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Kinds whose names we keep to a DNS-1123 label (≤ 63): they end up in label values
/// (`cluster.x-k8s.io/cluster-name`, `…/deployment-name`), host names or Octavia/Nova names.
const LABEL_NAMED_KINDS: &[&str] = &[
    "Namespace",
    "Secret",
    "Cluster",
    "OpenStackCluster",
    "KubeadmControlPlane",
    "MachineDeployment",
    "MachineHealthCheck",
    "OpenStackMachineTemplate",
    "KubeadmConfigTemplate",
    "HelmChartProxy",
    "ClusterResourceSet",
];

/// What the apiserver checks and no CRD schema does: the object's name (a DNS-1123 label of at
/// most 63 characters for the kinds we render, a DNS-1123 subdomain otherwise), its namespace, and
/// the syntax of label keys and values and annotation keys. One message per problem.
pub fn check_metadata(obj: &Value) -> Vec<String> {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = obj.pointer("/metadata/name").and_then(Value::as_str);
    let who = format!("{kind}/{}", name.unwrap_or("?"));
    let mut problems = Vec::new();
    if obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        problems.push(format!("{who}: apiVersion is missing"));
    }
    if kind.is_empty() {
        problems.push(format!("{who}: kind is missing"));
    }
    match name {
        None => problems.push(format!("{who}: metadata.name is missing")),
        Some(n) => {
            let err = if LABEL_NAMED_KINDS.contains(&kind) {
                dns1123_label_error(n)
            } else {
                dns1123_subdomain_error(n)
            };
            if let Some(e) = err {
                problems.push(format!("{who}: metadata.name: {e}"));
            }
        }
    }
    if let Some(ns) = obj.pointer("/metadata/namespace") {
        match ns.as_str() {
            Some(ns) => {
                if let Some(e) = dns1123_label_error(ns) {
                    problems.push(format!("{who}: metadata.namespace: {e}"));
                }
            }
            None => problems.push(format!("{who}: metadata.namespace must be a string")),
        }
    }
    check_string_map(
        obj.pointer("/metadata/labels"),
        &who,
        "labels",
        true,
        &mut problems,
    );
    check_string_map(
        obj.pointer("/metadata/annotations"),
        &who,
        "annotations",
        false,
        &mut problems,
    );
    problems
}

fn check_string_map(
    map: Option<&Value>,
    who: &str,
    what: &str,
    values_are_labels: bool,
    problems: &mut Vec<String>,
) {
    let Some(map) = map else { return };
    let Some(map) = map.as_object() else {
        problems.push(format!("{who}: metadata.{what} must be a map"));
        return;
    };
    for (k, v) in map {
        if let Some(e) = label_key_error(k) {
            problems.push(format!("{who}: metadata.{what} key {k:?}: {e}"));
        }
        match v.as_str() {
            None => problems.push(format!("{who}: metadata.{what}[{k:?}] must be a string")),
            Some(v) if values_are_labels => {
                if let Some(e) = label_value_error(v) {
                    problems.push(format!("{who}: metadata.{what}[{k:?}] = {v:?}: {e}"));
                }
            }
            Some(_) => {}
        }
    }
}

/// Why `s` is not a DNS-1123 label (lower-case alphanumerics and `-`, alphanumeric at both
/// ends, at most 63 characters), or `None`.
pub fn dns1123_label_error(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > 63 {
        return Some(format!("must be at most 63 characters (has {})", s.len()));
    }
    let ok_chars = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ends = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !ok_chars || !ends(s.as_bytes().first()) || !ends(s.as_bytes().last()) {
        return Some(
            "must consist of lower-case letters, digits and '-', and start and end with a letter \
             or digit"
                .into(),
        );
    }
    None
}

/// Why `s` is not a DNS-1123 subdomain (dot-separated DNS-1123 labels, at most 253
/// characters), or `None`.
pub fn dns1123_subdomain_error(s: &str) -> Option<String> {
    if s.len() > 253 {
        return Some(format!("must be at most 253 characters (has {})", s.len()));
    }
    s.split('.')
        .find_map(dns1123_label_error)
        .map(|e| format!("each dot-separated part {e}"))
}

/// Why `k` is not a valid label or annotation key (`[prefix/]name`: an optional DNS-1123
/// subdomain prefix, and a name of at most 63 alphanumerics, `-`, `_` or `.` that starts and ends
/// alphanumeric), or `None`.
pub fn label_key_error(k: &str) -> Option<String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && let Some(e) = dns1123_subdomain_error(p)
    {
        return Some(format!("prefix {p:?} {e}"));
    }
    if name.is_empty() {
        return Some("the name part must not be empty".into());
    }
    name_part_error(name).map(|e| format!("the name part {e}"))
}

/// Why `v` is not a valid label value (empty, or at most 63 alphanumerics, `-`, `_` or `.`
/// starting and ending alphanumeric), or `None`.
pub fn label_value_error(v: &str) -> Option<String> {
    if v.is_empty() {
        return None;
    }
    name_part_error(v)
}

fn name_part_error(s: &str) -> Option<String> {
    if s.len() > 63 {
        return Some(format!("must be at most 63 characters (has {})", s.len()));
    }
    let ok_chars = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    if !ok_chars || !ends(s.as_bytes().first()) || !ends(s.as_bytes().last()) {
        return Some(
            "must consist of letters, digits, '-', '_' or '.', and start and end with a letter or \
             digit"
                .into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_and_subdomains() {
        assert_eq!(dns1123_label_error("k5d12-ab"), None);
        assert!(dns1123_label_error("Abc").is_some());
        assert!(dns1123_label_error("-abc").is_some());
        assert!(dns1123_label_error("abc-").is_some());
        assert!(dns1123_label_error("a.b").is_some());
        assert!(dns1123_label_error(&"a".repeat(64)).is_some());
        assert_eq!(dns1123_label_error(&"a".repeat(63)), None);
        assert_eq!(dns1123_subdomain_error("a.b-c.d"), None);
        assert!(dns1123_subdomain_error("a..b").is_some());
    }

    #[test]
    fn label_keys_and_values() {
        assert_eq!(label_key_error("magnum.openstack.org/cluster-uuid"), None);
        assert_eq!(label_key_error("node-role.kubernetes.io/worker"), None);
        assert_eq!(label_key_error("plain_Key.1"), None);
        assert!(label_key_error("Bad.Prefix/x").is_some());
        assert!(label_key_error("a/").is_some());
        assert!(label_key_error("a/b/c").is_some());
        assert_eq!(label_value_error(""), None);
        assert_eq!(label_value_error("Abc_1.x-y"), None);
        assert!(label_value_error("a b").is_some());
        assert!(label_value_error(&"x".repeat(64)).is_some());
    }

    #[test]
    fn metadata_problems_are_reported_per_field() {
        let obj = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "Bad_Name",
                "namespace": "ns",
                "labels": {"ok": "fine", "bad key": "v", "k": "bad value"},
                "annotations": {"note": "any value at all"}
            }
        });
        let problems = check_metadata(&obj);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("metadata.name"));
        assert!(
            check_metadata(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a.b"}}))
            .is_empty()
        );
    }

    #[test]
    fn defaults_fill_in_and_non_nullable_nulls_drop() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {
                    "b": {"type": "string", "default": "x"},
                    "c": {"type": "string"},
                    "d": {"type": "string", "nullable": true}
                }}
            }
        });
        let mut obj = json!({"a": {"c": null, "d": null}});
        default_and_prune(&mut obj, &schema);
        assert_eq!(obj, json!({"a": {"b": "x", "d": null}}));
    }

    #[test]
    fn kubify_closes_objects_and_admits_null_for_nullable() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "string", "nullable": true},
                "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"k": {"type": "string"}}},
                "d": {"type": "object", "default": {"properties": 1}}
            }
        });
        kubify(&mut schema);
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["n"]["type"], json!(["string", "null"]));
        assert!(
            schema["properties"]["open"]
                .get("additionalProperties")
                .is_none()
        );
        assert_eq!(
            schema["properties"]["d"]["default"],
            json!({"properties": 1})
        );
    }
}
