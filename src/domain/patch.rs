//! Magnum's JSON-PATCH dialect: the RFC 6902 subset (add/replace/remove) with WSME's op checks,
//! internal and non-removable paths, Python-literal dict values, and application to a document.

use serde_json::{Map, Value};

use super::error::{DomainError, DomainResult};
use super::pyliteral;
use super::pyliteral::to_python_str;

/// One validated patch operation.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchOp {
    pub op: Op,
    pub path: String,
    pub value: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Replace,
    Remove,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Replace => "replace",
            Op::Remove => "remove",
        }
    }
}

/// Which paths a resource protects.
#[derive(Debug, Clone, Copy)]
pub struct PatchRules {
    /// Paths that can never be patched (exact path or any sub-path).
    pub internal: &'static [&'static str],
    /// Paths that cannot be removed.
    pub non_removable: &'static [&'static str],
    /// Paths whose string values are Python literals to evaluate on `replace`.
    pub literal_paths: &'static [&'static str],
}

/// Paths every resource treats as internal.
pub const COMMON_INTERNAL: [&str; 7] = [
    "/created_at",
    "/id",
    "/links",
    "/updated_at",
    "/uuid",
    "/project_id",
    "/user_id",
];

fn is_valid_path(path: &str) -> bool {
    // ^(/[\w-]+)+$
    path.starts_with('/')
        && path[1..].split('/').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        })
}

/// Parses and validates a PATCH body against `rules` (WSME's `JsonPatchType`).
pub fn parse(body: &Value, rules: &PatchRules) -> DomainResult<Vec<PatchOp>> {
    let items = body.as_array().ok_or_else(|| {
        DomainError::invalid_field(
            "patch",
            &to_python_str(body),
            "Wrong type. Expected '[<class 'magnum.api.controllers.v1.types.JsonPatchType'>]', got '<class 'dict'>'",
        )
    })?;
    let mut ops = Vec::with_capacity(items.len());
    for item in items {
        let obj = item.as_object().ok_or_else(|| {
            DomainError::invalid_field(
                "patch",
                &to_python_str(item),
                "Wrong type. Expected an object",
            )
        })?;
        let mut unknown: Vec<&str> = obj
            .keys()
            .map(String::as_str)
            .filter(|k| !matches!(*k, "op" | "path" | "value"))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            return Err(DomainError::BadRequest(format!(
                "Unknown attribute for argument patch: {}",
                unknown.join(", ")
            )));
        }
        let path_value = obj.get("path").filter(|v| !v.is_null());
        let path = match path_value {
            None => {
                return Err(DomainError::invalid_field(
                    "path",
                    "None",
                    "Mandatory field missing.",
                ));
            }
            Some(Value::String(p)) => p.clone(),
            Some(other) => {
                return Err(DomainError::invalid_field(
                    "path",
                    &to_python_str(other),
                    "Wrong type. Expected '<class 'str'>'",
                ));
            }
        };
        if !is_valid_path(&path) {
            return Err(DomainError::invalid_field(
                "path",
                &path,
                "Value should match the pattern ^(/[\\w-]+)+$",
            ));
        }
        let op = match obj.get("op").filter(|v| !v.is_null()) {
            None => {
                return Err(DomainError::invalid_field(
                    "op",
                    "None",
                    "Mandatory field missing.",
                ));
            }
            Some(Value::String(s)) if s == "add" => Op::Add,
            Some(Value::String(s)) if s == "replace" => Op::Replace,
            Some(Value::String(s)) if s == "remove" => Op::Remove,
            Some(other) => {
                return Err(DomainError::invalid_field(
                    "op",
                    &to_python_str(other),
                    "Value should be one of: remove, add, replace",
                ));
            }
        };
        let value = match obj.get("value") {
            None => None,
            Some(v @ (Value::String(_) | Value::Bool(_) | Value::Null)) => Some(v.clone()),
            Some(v @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(v.clone()),
            Some(other) => {
                return Err(DomainError::invalid_field(
                    "value",
                    &to_python_str(other),
                    &format!(
                        "Wrong type. Expected '[<class 'str'>, <class 'int'>]', got '{}'",
                        match other {
                            Value::Array(_) => "<class 'list'>",
                            Value::Object(_) => "<class 'dict'>",
                            _ => "<class 'float'>",
                        }
                    ),
                ));
            }
        };
        let covers = |p: &&str| path == *p || path.starts_with(&format!("{p}/"));
        if COMMON_INTERNAL.iter().chain(rules.internal).any(covers) {
            return Err(DomainError::BadRequest(format!(
                "'{path}' is an internal attribute and can not be updated"
            )));
        }
        if op == Op::Remove && rules.non_removable.contains(&path.as_str()) {
            return Err(DomainError::BadRequest(format!(
                "'{path}' is a mandatory attribute and can not be removed"
            )));
        }
        if op != Op::Remove && value.is_none() {
            return Err(DomainError::BadRequest(
                "'add' and 'replace' operations needs value".into(),
            ));
        }
        ops.push(PatchOp { op, path, value });
    }
    Ok(ops)
}

fn as_python(ops: &[PatchOp]) -> String {
    let list: Vec<Value> = ops
        .iter()
        .map(|p| {
            let mut m = Map::new();
            m.insert("op".into(), Value::from(p.op.as_str()));
            m.insert("path".into(), Value::from(p.path.clone()));
            if let Some(v) = &p.value {
                m.insert("value".into(), v.clone());
            }
            Value::Object(m)
        })
        .collect();
    pyliteral::to_python_str(&Value::Array(list))
}

fn patch_error(ops: &[PatchOp], reason: impl std::fmt::Display) -> DomainError {
    DomainError::BadRequest(format!(
        "Couldn't apply patch '{}'. Reason: {reason}",
        as_python(ops)
    ))
}

/// Applies `ops` to `doc` the way Magnum's `apply_jsonpatch` does.
pub fn apply(
    doc: &Map<String, Value>,
    ops: &[PatchOp],
    rules: &PatchRules,
) -> DomainResult<Map<String, Value>> {
    let mut resolved = Vec::with_capacity(ops.len());
    for p in ops {
        if p.op == Op::Add && p.path.matches('/').count() == 1 {
            let attr = &p.path[1..];
            match doc.get(attr) {
                None => {
                    return Err(DomainError::BadRequest(format!(
                        "Adding a new attribute {} to the root of the resource is not allowed.",
                        p.path
                    )));
                }
                Some(v) if !v.is_null() => {
                    return Err(DomainError::BadRequest(format!(
                        "The attribute {} has existed, please use 'replace' operation instead.",
                        p.path
                    )));
                }
                Some(_) => {}
            }
        }
        let mut value = p.value.clone();
        if p.op == Op::Replace
            && rules.literal_paths.contains(&p.path.as_str())
            && let Some(Value::String(s)) = &value
        {
            let parsed = pyliteral::parse(s).map_err(|e| patch_error(ops, e))?;
            value = Some(parsed);
        }
        let mut op = Map::new();
        op.insert("op".into(), Value::from(p.op.as_str()));
        op.insert("path".into(), Value::from(p.path.clone()));
        if let Some(v) = value {
            op.insert("value".into(), v);
        }
        resolved.push(Value::Object(op));
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(resolved)).map_err(|e| patch_error(ops, e))?;
    let mut target = Value::Object(doc.clone());
    json_patch::patch(&mut target, &patch).map_err(|e| patch_error(ops, e))?;
    match target {
        Value::Object(m) => Ok(m),
        _ => Err(patch_error(ops, "the document is no longer an object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RULES: PatchRules = PatchRules {
        internal: &["/stack_id"],
        non_removable: &["/coe"],
        literal_paths: &["/labels"],
    };

    fn msg(body: Value) -> String {
        match parse(&body, &RULES) {
            Ok(ops) => {
                let doc = json!({"name": "a", "labels": {"x": "1"}, "keypair": null, "coe": "kubernetes"});
                match apply(doc.as_object().unwrap(), &ops, &RULES) {
                    Ok(_) => String::new(),
                    Err(e) => e.message().to_string(),
                }
            }
            Err(e) => e.message().to_string(),
        }
    }

    #[test]
    fn unknown_op_names_the_three_allowed() {
        assert_eq!(
            msg(json!([{"op": "frobnicate", "path": "/name", "value": "x"}])),
            "Invalid input for field/attribute op. Value: 'frobnicate'. Value should be one of: remove, add, replace"
        );
    }

    #[test]
    fn internal_paths_are_refused() {
        assert_eq!(
            msg(json!([{"op": "replace", "path": "/uuid", "value": "x"}])),
            "'/uuid' is an internal attribute and can not be updated"
        );
        assert_eq!(
            msg(json!([{"op": "remove", "path": "/stack_id"}])),
            "'/stack_id' is an internal attribute and can not be updated"
        );
    }

    #[test]
    fn mandatory_paths_cannot_be_removed() {
        assert_eq!(
            msg(json!([{"op": "remove", "path": "/coe"}])),
            "'/coe' is a mandatory attribute and can not be removed"
        );
    }

    #[test]
    fn add_and_replace_need_a_value() {
        assert_eq!(
            msg(json!([{"op": "add", "path": "/keypair"}])),
            "'add' and 'replace' operations needs value"
        );
    }

    #[test]
    fn add_to_root_rules() {
        assert_eq!(
            msg(json!([{"op": "add", "path": "/bogus", "value": "x"}])),
            "Adding a new attribute /bogus to the root of the resource is not allowed."
        );
        assert_eq!(
            msg(json!([{"op": "add", "path": "/name", "value": "x"}])),
            "The attribute /name has existed, please use 'replace' operation instead."
        );
        assert_eq!(
            msg(json!([{"op": "add", "path": "/keypair", "value": "k"}])),
            ""
        );
        assert_eq!(
            msg(json!([{"op": "add", "path": "/labels/new", "value": "k"}])),
            ""
        );
    }

    #[test]
    fn values_must_be_strings_or_integers() {
        assert!(
            msg(json!([{"op": "replace", "path": "/name", "value": 1.5}])).contains("Wrong type")
        );
        assert!(
            msg(json!([{"op": "replace", "path": "/name", "value": {"a": 1}}]))
                .contains("Wrong type")
        );
    }

    #[test]
    fn labels_string_is_a_python_literal() {
        let ops = parse(&json!([{"op": "replace", "path": "/labels", "value": "{'kube_tag': 'v1.30', 'a': 'b'}"}]), &RULES).unwrap();
        let doc = json!({"labels": {}});
        let out = apply(doc.as_object().unwrap(), &ops, &RULES).unwrap();
        assert_eq!(out["labels"], json!({"kube_tag": "v1.30", "a": "b"}));
        let ops = parse(
            &json!([{"op": "replace", "path": "/labels", "value": "{'a'"}]),
            &RULES,
        )
        .unwrap();
        let err = apply(doc.as_object().unwrap(), &ops, &RULES).unwrap_err();
        assert!(err.message().starts_with("Couldn't apply patch '[{'op': 'replace', 'path': '/labels', 'value': \"{'a'\"}]'. Reason: "));
    }

    #[test]
    fn removing_a_missing_key_is_a_patch_error() {
        assert!(
            msg(json!([{"op": "remove", "path": "/labels/nope"}]))
                .starts_with("Couldn't apply patch")
        );
    }

    #[test]
    fn paths_must_match_the_pattern() {
        assert!(
            msg(json!([{"op": "replace", "path": "/labels/a.b", "value": "x"}]))
                .contains("should match the pattern")
        );
        assert!(
            msg(json!([{"op": "replace", "path": "name", "value": "x"}]))
                .contains("should match the pattern")
        );
    }

    fn arb_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or(Value::Null)),
            "(/[a-z_]{0,6}){0,3}".prop_map(Value::String),
            "\\PC{0,12}".prop_map(Value::String),
            prop::sample::select(vec!["add", "replace", "remove", "test", "move"])
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec!["op", "path", "value", "from", "x"])
                        .prop_map(String::from),
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn any_patch_body_is_applied_or_refused_without_panicking(body in arb_json()) {
            let doc = json!({"name": "a", "labels": {"x": "1"}, "keypair": null, "coe": "kubernetes", "list": [1, 2]});
            if let Ok(ops) = parse(&body, &RULES) {
                let _ = apply(doc.as_object().unwrap(), &ops, &RULES);
            }
        }

        #[test]
        fn any_labels_literal_is_applied_or_refused_without_panicking(lit in "\\PC{0,40}") {
            let doc = json!({"labels": {}});
            let body = json!([{"op": "replace", "path": "/labels", "value": lit}]);
            let ops = parse(&body, &RULES).unwrap();
            let _ = apply(doc.as_object().unwrap(), &ops, &RULES);
        }
    }
}
