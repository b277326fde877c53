//! What the simulated apiserver does with a custom resource before storing it, from the CRDs:
//! structural defaults, `openAPIV3Schema` validation (`k8s::schema`) and the
//! `x-kubernetes-validations` CEL rules (with `oldSelf` transition rules on updates and
//! `messageExpression`), evaluated with the `cel` crate. Rules it cannot evaluate are kept in
//! `CrdAdmission::unsupported`, never silently dropped.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use cel::{Context, Program};
use serde_json::Value;

use super::store::{Admission, FieldError};
use crate::k8s::schema::{CrdSchemas, SchemaError};

/// Functions of the CEL standard library the `cel` crate evaluates as Kubernetes does. A rule
/// calling anything else (Kubernetes' extension libraries: `isSorted`, `quantity`, `url`,
/// `format`, `lowerAscii`, …, or timestamps and durations, not built here) is unsupported.
const SUPPORTED_FUNCTIONS: &[&str] = &[
    "size",
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "dyn",
];

/// One `x-kubernetes-validations` entry, compiled.
struct Rule {
    source: String,
    program: Program,
    message: Option<String>,
    message_expression: Option<Program>,
    /// References `oldSelf`: evaluated on updates only, where the old value exists.
    transition: bool,
}

/// A rule the evaluator cannot handle: where it is and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnsupportedRule {
    pub api_version: String,
    pub kind: String,
    /// The schema location (`.spec.x[]`).
    pub path: String,
    pub rule: String,
    pub reason: String,
}

/// Rules of one kind, by schema location (a JSON pointer into the `openAPIV3Schema`).
type KindRules = HashMap<String, Vec<Rule>>;

/// Defaults, schema validation and CEL rules of every CRD in a directory.
pub struct CrdAdmission {
    schemas: CrdSchemas,
    rules: HashMap<(String, String), KindRules>,
    unsupported: Vec<UnsupportedRule>,
}

impl std::fmt::Debug for CrdAdmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdAdmission")
            .field("schemas", &self.schemas)
            .field("unsupported", &self.unsupported.len())
            .finish_non_exhaustive()
    }
}

impl CrdAdmission {
    /// Loads the CRDs of `dir` and compiles their rules.
    pub fn load(dir: &Path) -> Result<Self, SchemaError> {
        let schemas = CrdSchemas::load(dir)?;
        let mut rules = HashMap::new();
        let mut unsupported = Vec::new();
        for (api_version, kind, schema) in schemas.kinds() {
            let mut found = KindRules::new();
            let mut bad = Vec::new();
            collect_rules(schema, String::new(), String::new(), &mut found, &mut bad);
            for (path, rule, reason) in bad {
                unsupported.push(UnsupportedRule {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                    path,
                    rule,
                    reason,
                });
            }
            rules.insert((api_version.to_string(), kind.to_string()), found);
        }
        unsupported.sort();
        for u in &unsupported {
            tracing::warn!(kind = %u.kind, path = %u.path, rule = %u.rule, reason = %u.reason,
                "CEL rule not evaluated by the simulated apiserver");
        }
        Ok(CrdAdmission {
            schemas,
            rules,
            unsupported,
        })
    }

    /// The rules this evaluator does not check.
    pub fn unsupported(&self) -> &[UnsupportedRule] {
        &self.unsupported
    }

    /// Number of rules compiled (supported ones).
    pub fn rule_count(&self) -> usize {
        self.rules
            .values()
            .flat_map(HashMap::values)
            .map(Vec::len)
            .sum()
    }
}

/// Walks a schema collecting its rules by location; `path` is the printable schema path.
fn collect_rules(
    schema: &Value,
    ptr: String,
    path: String,
    out: &mut KindRules,
    bad: &mut Vec<(String, String, String)>,
) {
    let at = if path.is_empty() {
        ".".into()
    } else {
        path.clone()
    };
    for v in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let source = v.get("rule").and_then(Value::as_str).unwrap_or_default();
        match compile_rule(v) {
            Ok(rule) => out.entry(ptr.clone()).or_default().push(rule),
            Err(reason) => bad.push((at.clone(), source.to_string(), reason)),
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            collect_rules(
                sub,
                format!("{ptr}/properties/{k}"),
                format!("{path}.{k}"),
                out,
                bad,
            );
        }
    }
    if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
        collect_rules(sub, format!("{ptr}/items"), format!("{path}[]"), out, bad);
    }
    if let Some(sub) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        collect_rules(
            sub,
            format!("{ptr}/additionalProperties"),
            format!("{path}{{}}"),
            out,
            bad,
        );
    }
}

fn compile_rule(v: &Value) -> Result<Rule, String> {
    let source = v
        .get("rule")
        .and_then(Value::as_str)
        .ok_or("no rule")?
        .to_string();
    let program = compile(&source)?;
    let message_expression = v
        .get("messageExpression")
        .and_then(Value::as_str)
        .map(|m| compile(m).map_err(|e| format!("messageExpression: {e}")))
        .transpose()?;
    let transition = program.references().has_variable("oldSelf");
    Ok(Rule {
        source,
        program,
        message: v.get("message").and_then(Value::as_str).map(str::to_string),
        message_expression,
        transition,
    })
}

fn compile(source: &str) -> Result<Program, String> {
    let program = Program::compile(source).map_err(|e| format!("does not parse: {e}"))?;
    let refs = program.references();
    let mut missing: Vec<&str> = refs
        .functions()
        .into_iter()
        .filter(|f| !is_operator(f) && !SUPPORTED_FUNCTIONS.contains(f))
        .collect();
    missing.sort_unstable();
    if !missing.is_empty() {
        return Err(format!("unsupported functions: {}", missing.join(", ")));
    }
    // Variables other than `self`/`oldSelf` are comprehension variables (`all(x, …)`); an
    // unknown one fails evaluation, which refuses the object (never passes it silently).
    Ok(program)
}

/// CEL operators (`_==_`, `!_`, `@in`, `_[_]`, …) are not library functions.
fn is_operator(f: &str) -> bool {
    f.starts_with('_') || f.starts_with('@') || f.starts_with('!')
}

/// The CEL value of a JSON value; `number` fields are doubles even when written as integers.
fn to_cel(v: &Value, schema: Option<&Value>) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => {
            let is_number =
                schema.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("number");
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) if !is_number => cel::Value::Int(i),
                (None, Some(u)) if !is_number => cel::Value::UInt(u),
                _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
            }
        }
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.get("items"));
            cel::Value::List(Arc::new(
                items.iter().map(|i| to_cel(i, item_schema)).collect(),
            ))
        }
        Value::Object(m) => {
            let map: HashMap<String, cel::Value> = m
                .iter()
                .map(|(k, v)| (k.clone(), to_cel(v, child_schema(schema, k))))
                .collect();
            cel::Value::from(map)
        }
    }
}

fn child_schema<'a>(schema: Option<&'a Value>, k: &str) -> Option<&'a Value> {
    let s = schema?;
    s.get("properties")
        .and_then(|p| p.get(k))
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

/// The old list item a new one is compared with: only list-map items correlate (by key).
fn old_item<'a>(schema: &Value, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old?.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
}

/// One value being checked, with its old counterpart and where it is.
struct Node<'a> {
    value: &'a Value,
    old: Option<&'a Value>,
    schema: &'a Value,
    ptr: String,
    field: String,
}

impl CrdAdmission {
    fn check(&self, rules: &KindRules, n: Node<'_>, errs: &mut Vec<FieldError>) {
        for rule in rules.get(&n.ptr).into_iter().flatten() {
            if rule.transition && n.old.is_none() {
                continue;
            }
            if let Some(message) = evaluate(rule, &n) {
                let field = if n.field.is_empty() {
                    "<root>".to_string()
                } else {
                    n.field.clone()
                };
                errs.push(FieldError::new(
                    field,
                    format!("Invalid value: \"{}\": {message}", type_name(n.value)),
                ));
            }
        }
        match n.value {
            Value::Object(m) => {
                let props = n.schema.get("properties").and_then(Value::as_object);
                let extra = n
                    .schema
                    .get("additionalProperties")
                    .filter(|a| a.is_object());
                for (k, v) in m {
                    let (sub, ptr) = match (props.and_then(|p| p.get(k)), extra) {
                        (Some(s), _) => (s, format!("{}/properties/{k}", n.ptr)),
                        (None, Some(s)) => (s, format!("{}/additionalProperties", n.ptr)),
                        (None, None) => continue,
                    };
                    let field = if n.field.is_empty() {
                        k.clone()
                    } else if props.is_some_and(|p| p.contains_key(k)) {
                        format!("{}.{k}", n.field)
                    } else {
                        format!("{}[{k}]", n.field)
                    };
                    let old = n.old.and_then(|o| o.get(k));
                    self.check(
                        rules,
                        Node {
                            value: v,
                            old,
                            schema: sub,
                            ptr,
                            field,
                        },
                        errs,
                    );
                }
            }
            Value::Array(list) => {
                if let Some(dup) = duplicate(n.schema, list) {
                    errs.push(FieldError::new(
                        format!("{}[{dup}]", n.field),
                        format!("Duplicate value: {}", list[dup]),
                    ));
                }
                let Some(sub) = n.schema.get("items").filter(|i| i.is_object()) else {
                    return;
                };
                for (i, item) in list.iter().enumerate() {
                    self.check(
                        rules,
                        Node {
                            value: item,
                            old: old_item(n.schema, item, n.old),
                            schema: sub,
                            ptr: format!("{}/items", n.ptr),
                            field: format!("{}[{i}]", n.field),
                        },
                        errs,
                    );
                }
            }
            _ => {}
        }
    }
}

/// The index of the first item repeating an earlier one in a `set` list (by value) or a `map`
/// list (by its keys), which the apiserver refuses.
fn duplicate(schema: &Value, list: &[Value]) -> Option<usize> {
    let keys: Option<Vec<&str>> = match schema.get("x-kubernetes-list-type").and_then(Value::as_str)
    {
        Some("set") => None,
        Some("map") => Some(
            schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)?
                .iter()
                .filter_map(Value::as_str)
                .collect(),
        ),
        _ => return None,
    };
    let same = |a: &Value, b: &Value| match &keys {
        None => a == b,
        Some(keys) => keys.iter().all(|k| a.get(k) == b.get(k)),
    };
    (1..list.len()).find(|&i| list[..i].iter().any(|earlier| same(earlier, &list[i])))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
    }
}

/// The CEL standard library, built once (a `Context::default()` builds it per evaluation).
fn stdlib() -> Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(cel::Env::stdlib())).clone()
}

/// `None` when the rule holds, else the message to report.
fn evaluate(rule: &Rule, n: &Node<'_>) -> Option<String> {
    let mut ctx = Context::with_env(stdlib());
    ctx.add_variable_from_value("self", to_cel(n.value, Some(n.schema)));
    if let Some(old) = n.old {
        ctx.add_variable_from_value("oldSelf", to_cel(old, Some(n.schema)));
    }
    match rule.program.execute(&ctx) {
        Ok(cel::Value::Bool(true)) => None,
        Ok(cel::Value::Bool(false)) => Some(
            rule.message_expression
                .as_ref()
                .and_then(|m| match m.execute(&ctx) {
                    Ok(cel::Value::String(s)) if !s.trim().is_empty() => Some(s.to_string()),
                    _ => None,
                })
                .or_else(|| rule.message.clone())
                .unwrap_or_else(|| format!("failed rule: {}", rule.source)),
        ),
        Ok(other) => Some(format!(
            "rule {} did not evaluate to a bool (got {other:?})",
            rule.source
        )),
        Err(e) => Some(format!("rule {}: evaluation error: {e}", rule.source)),
    }
}

impl Admission for CrdAdmission {
    fn validate(&self, new: &Value, old: Option<&Value>) -> Result<(), Vec<FieldError>> {
        let mut errs: Vec<FieldError> = match self.schemas.validate(new) {
            Ok(_) => Vec::new(),
            Err(messages) => messages.into_iter().map(FieldError::from_message).collect(),
        };
        let av = new.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = new.get("kind").and_then(Value::as_str).unwrap_or("");
        if let (Some(schema), Some(rules)) = (
            self.schemas.schema(av, kind),
            self.rules.get(&(av.to_string(), kind.to_string())),
        ) && errs.is_empty()
        {
            // As kube-apiserver: CEL runs on schema-valid objects only; an update is compared
            // with the stored object of the same apiVersion.
            let old = old.filter(|o| o.get("apiVersion") == new.get("apiVersion"));
            self.check(
                rules,
                Node {
                    value: new,
                    old,
                    schema,
                    ptr: String::new(),
                    field: String::new(),
                },
                &mut errs,
            );
        }
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }

    fn default(&self, obj: &mut Value) {
        self.schemas.apply_defaults(obj);
    }

    fn schema(&self, api_version: &str, kind: &str) -> Option<&Value> {
        self.schemas.schema(api_version, kind)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Evaluates one rule source on `value` (and `old`) as the admission does.
    fn holds(source: &str, schema: &Value, value: &Value, old: Option<&Value>) -> bool {
        let rule = compile_rule(&json!({"rule": source, "message": "m"})).unwrap();
        let node = Node {
            value,
            old,
            schema,
            ptr: String::new(),
            field: String::new(),
        };
        evaluate(&rule, &node).is_none()
    }

    #[test]
    fn the_rule_shapes_of_the_capi_and_capo_crds_evaluate() {
        let any = json!({});
        let unique = "self.all(x, self.exists_one(y, x.name == y.name))";
        assert!(holds(
            unique,
            &any,
            &json!([{"name": "a"}, {"name": "b"}]),
            None
        ));
        assert!(!holds(
            unique,
            &any,
            &json!([{"name": "a"}, {"name": "a"}]),
            None
        ));
        let one_of = "[has(self.layout),has(self.diskLayout)].filter(x,x==true).size() == 1";
        assert!(holds(one_of, &any, &json!({"layout": true}), None));
        assert!(!holds(one_of, &any, &json!({}), None));
        let not_in = "!(self in ['Ready','Available'])";
        assert!(holds(not_in, &any, &json!("Custom"), None));
        assert!(!holds(not_in, &any, &json!("Ready"), None));
        let pattern = "self.matches('^(Linux|[0-9A-F]{2})$')";
        assert!(holds(pattern, &any, &json!("Linux"), None));
        assert!(!holds(pattern, &any, &json!("NTFS"), None));
        let cond = "has(self.type) && self.type == 'Bool' ? has(self.bool) : !has(self.bool)";
        assert!(holds(
            cond,
            &any,
            &json!({"type": "Bool", "bool": true}),
            None
        ));
        assert!(!holds(
            cond,
            &any,
            &json!({"type": "String", "bool": true}),
            None
        ));
        let immutable =
            "(!has(self.region) && !has(oldSelf.region)) || self.region == oldSelf.region";
        let (r1, r2) = (json!({"region": "a"}), json!({"region": "b"}));
        assert!(holds(immutable, &any, &r1, Some(&r1)));
        assert!(!holds(immutable, &any, &r2, Some(&r1)));
        assert!(!holds(immutable, &any, &r1, Some(&json!({}))));
        assert!(holds(immutable, &any, &json!({}), Some(&json!({}))));
        // `number` fields are doubles even when written as integers.
        let number = json!({"type": "number"});
        assert!(holds("self > 0.5", &number, &json!(1), None));
    }

    #[test]
    fn message_expressions_word_the_failure_and_unknown_functions_are_refused_at_load() {
        let rule = compile_rule(&json!({"rule": "self.size() < 2", "message": "static",
            "messageExpression": "'has ' + string(self.size()) + ' items'"}))
        .unwrap();
        let schema = json!({});
        let value = json!([1, 2, 3]);
        let node = Node {
            value: &value,
            old: None,
            schema: &schema,
            ptr: String::new(),
            field: String::new(),
        };
        assert_eq!(evaluate(&rule, &node).as_deref(), Some("has 3 items"));
        let err = compile_rule(&json!({"rule": "self.isSorted()"}))
            .err()
            .unwrap();
        assert_eq!(err, "unsupported functions: isSorted");
        assert!(compile_rule(&json!({"rule": "self.("})).is_err());
    }
}
