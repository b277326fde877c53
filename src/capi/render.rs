//! Rendering: a values document through the handlebars templates (built in, or an operator's
//! overrides) into Kubernetes objects as JSON, ordered for apply, with immutable machine
//! templates named after a hash of their spec.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use handlebars::{
    Context, Handlebars, Helper, HelperDef, HelperResult, Output, RenderContext, RenderErrorReason,
    Renderable,
};
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::values::Values;
use crate::k8s::schema::check_metadata;

/// The built-in templates, one per object family, embedded so the binary renders anywhere.
pub const BUILTIN_TEMPLATES: &[(&str, &str)] = &[
    (
        "namespace.yaml.hbs",
        include_str!("../../templates/namespace.yaml.hbs"),
    ),
    (
        "cloud-credentials.yaml.hbs",
        include_str!("../../templates/cloud-credentials.yaml.hbs"),
    ),
    (
        "ca-secrets.yaml.hbs",
        include_str!("../../templates/ca-secrets.yaml.hbs"),
    ),
    (
        "cluster.yaml.hbs",
        include_str!("../../templates/cluster.yaml.hbs"),
    ),
    (
        "openstackcluster.yaml.hbs",
        include_str!("../../templates/openstackcluster.yaml.hbs"),
    ),
    (
        "control-plane.yaml.hbs",
        include_str!("../../templates/control-plane.yaml.hbs"),
    ),
    (
        "nodegroup.yaml.hbs",
        include_str!("../../templates/nodegroup.yaml.hbs"),
    ),
    (
        "healthchecks.yaml.hbs",
        include_str!("../../templates/healthchecks.yaml.hbs"),
    ),
    (
        "addons.yaml.hbs",
        include_str!("../../templates/addons.yaml.hbs"),
    ),
    (
        "autoscaler.yaml.hbs",
        include_str!("../../templates/autoscaler.yaml.hbs"),
    ),
];

/// Machine templates are immutable: named by the hash of their spec (`capi::kinds::TEMPLATES`).
fn is_hashed(kind: &str) -> bool {
    super::kinds::TEMPLATES.iter().any(|k| k.1 == kind)
}

/// Why rendering failed. All are operator or template-author errors except `NoCredentials`.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("cannot read the template directory {path}: {source}")]
    ReadDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the template override {path}: {source}")]
    ReadOverride {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not one of the templates ({known}); remove or rename it")]
    UnknownOverride { path: PathBuf, known: String },
    #[error("template {name} does not compile: {message}")]
    Compile { name: String, message: String },
    #[error("template {name}: {message}")]
    Render { name: String, message: String },
    #[error("template {name} produced invalid YAML: {message}")]
    Yaml { name: String, message: String },
    #[error("template {name} produced a document that is not a Kubernetes object: {doc}")]
    NotAnObject { name: String, doc: String },
    #[error("rendered objects break Kubernetes rules: {}", .0.join("; "))]
    Metadata(Vec<String>),
    #[error("the values hold no credentials to render")]
    NoCredentials,
    #[error("cannot serialise the values: {0}")]
    Values(String),
}

/// The compiled templates (strict mode: a value a template names but the values lack is an
/// error, not an empty string).
pub struct Renderer {
    hb: Handlebars<'static>,
    /// The operator's extra add-on templates (`<templates_dir>/addons.d/*.hbs`), by name, in
    /// name order: rendered for every cluster after the built-in add-ons.
    extra: Vec<String>,
}

/// The directory of operator-provided add-on templates inside `[capi] templates_dir`.
pub const EXTRA_ADDONS_DIR: &str = "addons.d";

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.hb.get_templates().keys().collect();
        names.sort();
        f.debug_struct("Renderer")
            .field("templates", &names)
            .finish()
    }
}

impl Renderer {
    /// Compiles the built-in templates, each replaced by the file of the same name in
    /// `overrides_dir` when there is one. Other `*.hbs` files there are an error (a typo would
    /// otherwise silently keep the built-in).
    pub fn new(overrides_dir: Option<&Path>) -> Result<Self, RenderError> {
        let mut sources: HashMap<&str, String> = BUILTIN_TEMPLATES
            .iter()
            .map(|(n, s)| (*n, (*s).to_owned()))
            .collect();
        if let Some(dir) = overrides_dir {
            let entries = std::fs::read_dir(dir).map_err(|source| RenderError::ReadDir {
                path: dir.to_path_buf(),
                source,
            })?;
            for entry in entries {
                let path = entry
                    .map_err(|source| RenderError::ReadDir {
                        path: dir.to_path_buf(),
                        source,
                    })?
                    .path();
                let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
                    continue;
                };
                if !file.ends_with(".hbs") {
                    continue;
                }
                let Some((name, _)) = BUILTIN_TEMPLATES.iter().find(|(n, _)| *n == file) else {
                    return Err(RenderError::UnknownOverride {
                        path,
                        known: BUILTIN_TEMPLATES
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                };
                let text = std::fs::read_to_string(&path)
                    .map_err(|source| RenderError::ReadOverride { path, source })?;
                sources.insert(name, text);
            }
        }
        let mut hb = registry();
        let compile = |hb: &mut Handlebars<'static>, name: &str, text: String| {
            hb.register_template_string(name, text)
                .map_err(|e| RenderError::Compile {
                    name: name.to_owned(),
                    message: e.to_string(),
                })
        };
        for (name, _) in BUILTIN_TEMPLATES {
            compile(&mut hb, name, sources.remove(name).unwrap_or_default())?;
        }
        let mut extra = Vec::new();
        if let Some(dir) = overrides_dir.map(|d| d.join(EXTRA_ADDONS_DIR))
            && dir.is_dir()
        {
            let read_dir = |source| RenderError::ReadDir {
                path: dir.clone(),
                source,
            };
            let mut files = Vec::new();
            for entry in std::fs::read_dir(&dir).map_err(read_dir)? {
                let path = entry.map_err(read_dir)?.path();
                if path.extension().is_some_and(|e| e == "hbs") {
                    files.push(path);
                }
            }
            files.sort();
            for path in files {
                let name = format!(
                    "{EXTRA_ADDONS_DIR}/{}",
                    path.file_name()
                        .and_then(|f| f.to_str())
                        .unwrap_or_default()
                );
                let text = std::fs::read_to_string(&path)
                    .map_err(|source| RenderError::ReadOverride { path, source })?;
                compile(&mut hb, &name, text)?;
                extra.push(name);
            }
        }
        Ok(Self { hb, extra })
    }

    /// Every object of the cluster, in apply order: Namespace, Secrets (credentials only when
    /// `values.credentials`, CAs only when `values.cas`), machine and config templates,
    /// OpenStackCluster, KubeadmControlPlane, Cluster, MachineDeployments, MachineHealthChecks,
    /// addons (built in, then the operator's `addons.d/`), the autoscaler (when a nodegroup
    /// autoscales).
    pub fn render(&self, values: &Values) -> Result<Vec<Value>, RenderError> {
        // One context for every template: `Handlebars::render` would deep-copy the values per call.
        let mut ctx = context(values)?;
        let mut objects = self.render_template("namespace.yaml.hbs", &ctx)?;
        if values.credentials.is_some() {
            objects.extend(self.render_template("cloud-credentials.yaml.hbs", &ctx)?);
        }
        if values.cas.is_some() {
            objects.extend(self.render_template("ca-secrets.yaml.hbs", &ctx)?);
        }
        for name in [
            "cluster.yaml.hbs",
            "openstackcluster.yaml.hbs",
            "control-plane.yaml.hbs",
        ] {
            objects.extend(self.render_template(name, &ctx)?);
        }
        let groups = ctx
            .data()
            .get("nodeGroups")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for ng in groups {
            set_node_group(&mut ctx, Some(ng));
            objects.extend(self.render_template("nodegroup.yaml.hbs", &ctx)?);
        }
        // No later template may see the last `nodeGroup` (strict mode must report a stray one).
        set_node_group(&mut ctx, None);
        objects.extend(self.render_template("healthchecks.yaml.hbs", &ctx)?);
        objects.extend(self.render_template("addons.yaml.hbs", &ctx)?);
        for name in &self.extra {
            objects.extend(self.render_template(name, &ctx)?);
        }
        if values.autoscaler.is_some() {
            objects.extend(self.render_template("autoscaler.yaml.hbs", &ctx)?);
        }
        merge_image_values(&mut objects, &values.addons.image_values)?;
        finish(objects)
    }

    /// Just what a credential rotation writes: the Namespace and the credential-bearing Secrets
    /// (CAPO's `<cluster>-cloud-credentials` and the `<cluster>-cloud-config` resource Secret
    /// that the ClusterResourceSet re-applies into the workload cluster).
    pub fn render_credentials(&self, values: &Values) -> Result<Vec<Value>, RenderError> {
        if values.credentials.is_none() {
            return Err(RenderError::NoCredentials);
        }
        let ctx = context(values)?;
        let mut objects = self.render_template("namespace.yaml.hbs", &ctx)?;
        objects.extend(self.render_template("cloud-credentials.yaml.hbs", &ctx)?);
        finish(objects)
    }

    fn render_template(&self, name: &str, ctx: &Context) -> Result<Vec<Value>, RenderError> {
        let text = self
            .hb
            .render_with_context(name, ctx)
            .map_err(|e| RenderError::Render {
                name: name.to_owned(),
                message: e.to_string(),
            })?;
        parse_documents(name, &text)
    }
}

/// A registry with the settings and helpers every template is compiled with.
fn registry() -> Handlebars<'static> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.register_helper("json", Box::new(json_helper));
    hb.register_helper("b64", Box::new(B64Helper));
    hb.register_helper("ini", Box::new(ini_helper));
    hb.register_helper("indent", Box::new(indent_helper));
    hb
}

/// Sets (or, with `None`, removes) the `nodeGroup` that `nodegroup.yaml.hbs` renders.
fn set_node_group(ctx: &mut Context, ng: Option<Value>) {
    if let Value::Object(m) = ctx.data_mut() {
        match ng {
            Some(ng) => m.insert("nodeGroup".into(), ng),
            None => m.remove("nodeGroup"),
        };
    }
}

/// The templates' context: the values as JSON, plus the secrets `Values` never serialises.
fn context(values: &Values) -> Result<Context, RenderError> {
    let mut ctx = serde_json::to_value(values).map_err(|e| RenderError::Values(e.to_string()))?;
    if let Some(c) = &values.credentials
        && let Some(Value::Object(m)) = ctx.get_mut("credentials")
    {
        m.insert(
            "applicationCredentialSecret".into(),
            Value::String(c.application_credential_secret.expose_secret().to_owned()),
        );
    }
    if let Some(cas) = &values.cas
        && let Some(Value::Object(m)) = ctx.get_mut("cas")
    {
        for (key, pair) in [
            ("ca", &cas.ca),
            ("etcd", &cas.etcd),
            ("frontProxy", &cas.front_proxy),
            ("sa", &cas.sa),
        ] {
            if let Some(Value::Object(p)) = m.get_mut(key) {
                p.insert(
                    "keyPem".into(),
                    Value::String(pair.key_pem.expose_secret().to_owned()),
                );
            }
        }
    }
    Ok(Context::from(ctx))
}

/// Splits multi-document YAML into objects; empty (or comment-only) documents are skipped.
fn parse_documents(name: &str, text: &str) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(text) {
        let v = Value::deserialize(doc).map_err(|e| RenderError::Yaml {
            name: name.to_owned(),
            message: e.to_string(),
        })?;
        match v {
            Value::Null => {}
            Value::Object(ref m) if m.contains_key("apiVersion") && m.contains_key("kind") => {
                out.push(v);
            }
            other => {
                return Err(RenderError::NotAnObject {
                    name: name.to_owned(),
                    // Characters, not bytes: `String::truncate` panics inside a character.
                    doc: other.to_string().chars().take(200).collect(),
                });
            }
        }
    }
    Ok(out)
}

/// Merges each chart's image values (`container_infra_prefix`, the image tag labels) into the
/// `valuesTemplate` of every HelmChartProxy of that chart, the operator's `addons.d/` ones
/// included. Done on the rendered YAML rather than in the templates so that no template (nor an
/// operator's override of one) has to spell out, and keep up with, every image of its chart.
fn merge_image_values(
    objects: &mut [Value],
    image_values: &std::collections::BTreeMap<String, Value>,
) -> Result<(), RenderError> {
    for obj in objects
        .iter_mut()
        .filter(|o| kind_of(o) == "HelmChartProxy")
    {
        let Some(overlay) = obj
            .pointer("/spec/chartName")
            .and_then(Value::as_str)
            .and_then(|c| image_values.get(c))
        else {
            continue;
        };
        let name = name_of(obj).to_owned();
        let yaml_error = |message: String| RenderError::Yaml {
            name: format!("HelmChartProxy {name} valuesTemplate"),
            message,
        };
        let text = obj
            .pointer("/spec/valuesTemplate")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut chart_values: Value = match text.trim() {
            "" => Value::Object(serde_json::Map::new()),
            t => yaml_serde::from_str(t).map_err(|e| yaml_error(e.to_string()))?,
        };
        super::values::merge_values(&mut chart_values, overlay);
        let merged = yaml_serde::to_string(&chart_values).map_err(|e| yaml_error(e.to_string()))?;
        if let Some(Value::Object(spec)) = obj.get_mut("spec") {
            spec.insert("valuesTemplate".into(), Value::String(merged));
        }
    }
    Ok(())
}

fn finish(mut objects: Vec<Value>) -> Result<Vec<Value>, RenderError> {
    name_templates_by_hash(&mut objects);
    objects.sort_by_key(apply_rank);
    let problems: Vec<String> = objects.iter().flat_map(check_metadata).collect();
    if !problems.is_empty() {
        return Err(RenderError::Metadata(problems));
    }
    Ok(objects)
}

fn kind_of(obj: &Value) -> &str {
    obj.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Position in apply order: what others refer to first, then the referrers, addons last.
fn apply_rank(obj: &Value) -> u8 {
    match kind_of(obj) {
        "Namespace" => 0,
        "Secret" | "ConfigMap" | "ServiceAccount" | "Role" | "RoleBinding" => 1,
        "OpenStackMachineTemplate" | "KubeadmConfigTemplate" => 2,
        "OpenStackCluster" => 3,
        "KubeadmControlPlane" => 4,
        "Cluster" => 5,
        "MachineDeployment" => 6,
        "MachineHealthCheck" => 7,
        "HelmChartProxy" | "ClusterResourceSet" => 8,
        _ => 9,
    }
}

/// The first 8 hex digits of the SHA-256 of `v` as canonical JSON (keys sorted at every level).
pub fn spec_hash(v: &Value) -> String {
    let digest = Sha256::digest(canonical_json(v).as_bytes());
    hex::encode(digest)[..8].to_owned()
}

fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical_json(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// Renames every machine/config template to `<name>-<spec hash>` and points the references of
/// the other objects (`{apiGroup, kind, name}`) at the new names.
fn name_templates_by_hash(objects: &mut [Value]) {
    let mut renames: HashMap<(String, String), String> = HashMap::new();
    for obj in objects.iter_mut() {
        let kind = kind_of(obj).to_owned();
        if !is_hashed(&kind) {
            continue;
        }
        let old = name_of(obj).to_owned();
        let hash = spec_hash(obj.get("spec").unwrap_or(&Value::Null));
        let new = format!("{old}-{hash}");
        if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
            meta.insert("name".into(), Value::String(new.clone()));
        }
        renames.insert((kind, old), new);
    }
    if renames.is_empty() {
        return;
    }
    for obj in objects.iter_mut() {
        if !is_hashed(kind_of(obj))
            && let Some(spec) = obj.get_mut("spec")
        {
            rewrite_refs(spec, &renames);
        }
    }
}

fn rewrite_refs(v: &mut Value, renames: &HashMap<(String, String), String>) {
    match v {
        Value::Object(m) => {
            if m.contains_key("apiGroup") {
                let key = (
                    m.get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    m.get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                );
                if let Some(new) = renames.get(&key) {
                    m.insert("name".into(), Value::String(new.clone()));
                }
            }
            m.values_mut().for_each(|c| rewrite_refs(c, renames));
        }
        Value::Array(a) => a.iter_mut().for_each(|c| rewrite_refs(c, renames)),
        _ => {}
    }
}

/// A machine or bootstrap template an object refers to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TemplateRef {
    pub kind: String,
    pub name: String,
}

/// The templates the KubeadmControlPlane, MachineDeployments and MachineSets among `objects` refer to (works
/// on rendered and on live objects). Templates labelled with the cluster's uuid that are not in
/// this set are superseded.
pub fn referenced_templates(objects: &[Value]) -> BTreeSet<TemplateRef> {
    let mut out = BTreeSet::new();
    let mut add = |r: Option<&Value>| {
        if let Some(r) = r
            && let (Some(kind), Some(name)) = (
                r.get("kind").and_then(Value::as_str),
                r.get("name").and_then(Value::as_str),
            )
        {
            out.insert(TemplateRef {
                kind: kind.to_owned(),
                name: name.to_owned(),
            });
        }
    };
    for obj in objects {
        match kind_of(obj) {
            "KubeadmControlPlane" => {
                add(obj.pointer("/spec/machineTemplate/spec/infrastructureRef"));
            }
            // A MachineSet refers to them as its MachineDeployment did when it was made.
            "MachineDeployment" | "MachineSet" => {
                add(obj.pointer("/spec/template/spec/infrastructureRef"));
                add(obj.pointer("/spec/template/spec/bootstrap/configRef"));
            }
            _ => {}
        }
    }
    out
}

/// Objects as multi-document YAML (for the CLI).
pub fn to_yaml(objects: &[Value]) -> String {
    let mut out = String::new();
    for obj in objects {
        out.push_str("---\n");
        match yaml_serde::to_string(obj) {
            Ok(s) => out.push_str(&s),
            // A serde_json::Value always serialises; keep the output whole regardless.
            Err(e) => out.push_str(&format!("# cannot print this object: {e}\n")),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Parameter `index` of `helper`; in strict mode a missing value is an error.
fn param_value<'a>(
    h: &'a Helper<'_>,
    helper: &'static str,
    index: usize,
    r: &Handlebars<'_>,
) -> Result<&'a Value, handlebars::RenderError> {
    let p = h
        .param(index)
        .ok_or(RenderErrorReason::ParamNotFoundForIndex(helper, index))?;
    if r.strict_mode() && p.is_value_missing() {
        return Err(handlebars::RenderError::strict_error(p.relative_path()));
    }
    Ok(p.value())
}

/// Parameter `index` of `helper`, which must be a string.
fn string_param<'a>(
    h: &'a Helper<'_>,
    helper: &'static str,
    index: usize,
    r: &Handlebars<'_>,
) -> Result<&'a str, handlebars::RenderError> {
    match param_value(h, helper, index, r)? {
        Value::String(s) => Ok(s),
        _ => Err(RenderErrorReason::InvalidParamType("string").into()),
    }
}

/// `{{json value}}`: the value as JSON, which is also a valid YAML scalar, sequence or mapping,
/// so user-supplied strings cannot break out of their field.
fn json_helper(
    h: &Helper<'_>,
    r: &Handlebars<'_>,
    _: &Context,
    _: &mut RenderContext<'_, '_>,
    out: &mut dyn Output,
) -> HelperResult {
    let v = param_value(h, "json", 0, r)?;
    let s = serde_json::to_string(v).map_err(|e| RenderErrorReason::Other(e.to_string()))?;
    out.write(&s)?;
    Ok(())
}

/// `{{b64 value}}` or `{{#b64}}…{{/b64}}`: standard base64 of a string or of the rendered block.
struct B64Helper;

impl HelperDef for B64Helper {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        r: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let text = match h.template() {
            Some(t) => t.renders(r, ctx, rc)?,
            None => string_param(h, "b64", 0, r)?.to_owned(),
        };
        out.write(&base64::engine::general_purpose::STANDARD.encode(text.as_bytes()))?;
        Ok(())
    }
}

/// `{{ini value}}`: a quoted `cloud.conf` (gcfg) value; strings with line breaks are refused.
fn ini_helper(
    h: &Helper<'_>,
    r: &Handlebars<'_>,
    _: &Context,
    _: &mut RenderContext<'_, '_>,
    out: &mut dyn Output,
) -> HelperResult {
    let s = match param_value(h, "ini", 0, r)? {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => return Err(RenderErrorReason::InvalidParamType("string").into()),
    };
    if s.contains(['\n', '\r']) {
        return Err(RenderErrorReason::Other("ini values cannot span lines".into()).into());
    }
    out.write(&format!(
        "\"{}\"",
        s.replace('\\', "\\\\").replace('"', "\\\"")
    ))?;
    Ok(())
}

/// `{{indent N value}}`: every line of a string prefixed with N spaces (for block scalars).
fn indent_helper(
    h: &Helper<'_>,
    r: &Handlebars<'_>,
    _: &Context,
    _: &mut RenderContext<'_, '_>,
    out: &mut dyn Output,
) -> HelperResult {
    let n = h
        .param(0)
        .and_then(|p| p.value().as_u64())
        .ok_or(RenderErrorReason::InvalidParamType("number of spaces"))?;
    let text = string_param(h, "indent", 1, r)?;
    let pad = " ".repeat(usize::try_from(n).unwrap_or(0));
    let indented: Vec<String> = text.lines().map(|l| format!("{pad}{l}")).collect();
    out.write(&indented.join("\n"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_hash_ignores_key_order() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": "s"}});
        let b = json!({"a": {"x": "s", "y": [1, 2]}, "b": 1});
        assert_eq!(spec_hash(&a), spec_hash(&b));
        assert_ne!(spec_hash(&a), spec_hash(&json!({"b": 2})));
        assert_eq!(spec_hash(&a).len(), 8);
    }

    #[test]
    fn templates_are_renamed_and_references_follow() {
        let mut objs = vec![
            json!({"apiVersion": "x/v1", "kind": "OpenStackMachineTemplate",
                   "metadata": {"name": "c-cp"}, "spec": {"a": 1}}),
            json!({"apiVersion": "x/v1", "kind": "KubeadmControlPlane",
                   "metadata": {"name": "c-cp"},
                   "spec": {"machineTemplate": {"spec": {"infrastructureRef":
                       {"apiGroup": "g", "kind": "OpenStackMachineTemplate", "name": "c-cp"}}}}}),
        ];
        name_templates_by_hash(&mut objs);
        let hashed = format!("c-cp-{}", spec_hash(&json!({"a": 1})));
        assert_eq!(name_of(&objs[0]), hashed);
        assert_eq!(name_of(&objs[1]), "c-cp");
        let refs = referenced_templates(&objs);
        assert_eq!(
            refs.into_iter().collect::<Vec<_>>(),
            vec![TemplateRef {
                kind: "OpenStackMachineTemplate".into(),
                name: hashed
            }]
        );
    }

    #[test]
    fn documents_split_and_empty_ones_skip() {
        let objs = parse_documents(
            "t",
            "---\n# only a comment\n---\napiVersion: v1\nkind: A\n---\n\n---\napiVersion: v1\nkind: B\n",
        )
        .unwrap();
        assert_eq!(objs.len(), 2);
        assert!(matches!(
            parse_documents("t", "just: a map\n"),
            Err(RenderError::NotAnObject { .. })
        ));
        assert!(matches!(
            parse_documents("t", "a: [\n"),
            Err(RenderError::Yaml { .. })
        ));
        // Cut to 200 characters, even where byte 200 falls inside one.
        let wide = format!("- a{}\n", "é".repeat(300));
        match parse_documents("t", &wide) {
            Err(RenderError::NotAnObject { doc, .. }) => assert_eq!(doc.chars().count(), 200),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn helpers_quote_encode_and_indent() {
        let hb = registry();
        let data = json!({"s": "a \"b\"\\c", "l": ["x"], "m": "l1\nl2"});
        let r = |t: &str| hb.render_template(t, &data);
        assert_eq!(r("{{json s}}").unwrap(), r#""a \"b\"\\c""#);
        assert_eq!(r("{{json l}}").unwrap(), r#"["x"]"#);
        assert_eq!(r("{{ini s}}").unwrap(), r#""a \"b\"\\c""#);
        assert!(r("{{ini m}}").is_err());
        assert_eq!(r("{{b64 s}}").unwrap(), "YSAiYiJcYw==");
        assert_eq!(r("{{#b64}}hi {{s}}{{/b64}}").unwrap(), "aGkgYSAiYiJcYw==");
        assert_eq!(r("{{indent 2 m}}").unwrap(), "  l1\n  l2");
        assert!(r("{{json nope}}").is_err());
        assert_eq!(r("\\{{ raw }}").unwrap(), "{{ raw }}");
    }
}
