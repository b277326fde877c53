//! Request-body schemas: WSME's parsing rules (unknown attributes, read-only fields, types, ranges,
//! patterns, enums, mandatory fields) with Magnum's exact messages, shared by POST and PATCH.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::error::{DomainError, DomainResult};
use super::pyliteral::to_python_str;

/// The cluster and federation name pattern.
pub const CLUSTER_NAME_PATTERN: &str = "^[a-zA-Z][a-zA-Z0-9_.-]*$";

/// [`CLUSTER_NAME_PATTERN`] checked by hand: the pattern is tiny and a regex engine buys nothing.
pub fn is_cluster_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// What a field accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A string of `min..=max` characters.
    Str { min: usize, max: usize },
    /// A cluster name: 1–242 characters matching [`CLUSTER_NAME_PATTERN`].
    ClusterName,
    /// An integer in the closed range.
    Int { min: Option<i64>, max: Option<i64> },
    /// A boolean (JSON bool, or a string `bool_from_string` accepts).
    Bool,
    /// One of the listed strings.
    Enum(&'static [&'static str]),
    /// Labels: a dict whose values may be str/int/bool/float, stored as strings.
    Labels,
    /// A dict of strings to strings.
    StrDict,
    /// A list of strings.
    StrList,
    /// Kubernetes taints: a list of `{key, value?, effect}` objects (checked by nodegroup rules).
    Taints,
    /// Accepted and ignored (Magnum's schema lists it, the server overwrites it).
    Ignored,
}

/// A field's declared default, restored by a PATCH `remove`.
#[derive(Debug, Clone, Copy)]
pub enum Default {
    Null,
    Bool(bool),
    Int(i64),
    Str(&'static str),
    EmptyDict,
}

impl Default {
    fn value(self) -> Value {
        match self {
            Default::Null => Value::Null,
            Default::Bool(b) => Value::Bool(b),
            Default::Int(i) => Value::from(i),
            Default::Str(s) => Value::from(s),
            Default::EmptyDict => Value::Object(Map::new()),
        }
    }
}

/// One attribute of a request type.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub mandatory: bool,
    pub readonly: bool,
    pub default: Default,
}

impl Field {
    pub const fn new(name: &'static str, kind: Kind) -> Self {
        Self {
            name,
            kind,
            mandatory: false,
            readonly: false,
            default: Default::Null,
        }
    }
    pub const fn mandatory(mut self) -> Self {
        self.mandatory = true;
        self
    }
    pub const fn readonly(mut self) -> Self {
        self.readonly = true;
        self
    }
    pub const fn default(mut self, d: Default) -> Self {
        self.default = d;
        self
    }
}

/// A request type: the argument name WSME reports and its attributes in declaration order.
#[derive(Debug)]
pub struct Schema {
    pub arg: &'static str,
    pub fields: &'static [Field],
}

/// A parsed body: only the keys the client sent, converted to their canonical JSON form.
#[derive(Debug, Clone, PartialEq, std::default::Default)]
pub struct Body(pub Map<String, Value>);

impl Schema {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Parses a POST body: unknown and read-only attributes are rejected, values are checked and
    /// normalised, mandatory fields must be present and non-null.
    pub fn parse_body(&self, body: &Value) -> DomainResult<Body> {
        let obj = body.as_object().ok_or_else(|| {
            DomainError::invalid_field(
                self.arg,
                &to_python_str(body),
                "Wrong type. Expected an object",
            )
        })?;
        let mut unknown: Vec<&str> = obj
            .keys()
            .filter(|k| self.field(k).is_none())
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            return Err(DomainError::BadRequest(format!(
                "Unknown attribute for argument {}: {}",
                self.arg,
                unknown.join(", ")
            )));
        }
        let mut out = Map::new();
        for field in self.fields {
            match obj.get(field.name) {
                Some(v) if field.readonly => {
                    return Err(DomainError::invalid_field(
                        field.name,
                        &to_python_str(v),
                        "Cannot set read only field.",
                    ));
                }
                Some(Value::Null) | None if field.mandatory => {
                    return Err(DomainError::invalid_field(
                        field.name,
                        "None",
                        "Mandatory field missing.",
                    ));
                }
                Some(v) => {
                    out.insert(field.name.to_string(), check(field, v, Source::Json)?);
                }
                None => {}
            }
        }
        Ok(Body(out))
    }

    /// Re-validates a whole document after a PATCH: every attribute is checked, attributes the
    /// patch removed get their declared default (WSME re-parses the patched document).
    pub fn revalidate(&self, doc: &Map<String, Value>) -> DomainResult<Map<String, Value>> {
        let mut out = Map::new();
        for field in self.fields {
            let value = match doc.get(field.name) {
                None => field.default.value(),
                Some(Value::Null) => Value::Null,
                Some(v) => check(field, v, Source::Patched)?,
            };
            if field.mandatory && value.is_null() {
                return Err(DomainError::invalid_field(
                    field.name,
                    "None",
                    "Mandatory field missing.",
                ));
            }
            out.insert(field.name.to_string(), value);
        }
        Ok(out)
    }
}

fn python_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<class 'NoneType'>",
        Value::Bool(_) => "<class 'bool'>",
        Value::Number(n) if n.is_f64() => "<class 'float'>",
        Value::Number(_) => "<class 'int'>",
        Value::String(_) => "<class 'str'>",
        Value::Array(_) => "<class 'list'>",
        Value::Object(_) => "<class 'dict'>",
    }
}

fn wrong_type(field: &Field, v: &Value, expected: &str) -> DomainError {
    DomainError::invalid_field(
        field.name,
        &to_python_str(v),
        &format!(
            "Wrong type. Expected '{expected}', got '{}'",
            python_type(v)
        ),
    )
}

/// Strict `oslo_utils.strutils.bool_from_string`.
pub fn bool_from_string(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
        "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
        _ => None,
    }
}

/// A label value as Magnum stores it: Python `str()` of the scalar.
pub fn label_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(_) | Value::Number(_) => Some(to_python_str(v)),
        _ => None,
    }
}

/// Where a value comes from: WSME converts a request body's JSON with `fromjson` (an integer
/// field takes anything Python's `int()` does, so Horizon's `str(value)` bodies work), while a
/// patched document is assigned attribute by attribute (integers must be integers).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Json,
    Patched,
}

/// Python's `int(s)` for a base-10 string: surrounding whitespace, a sign, digits with single
/// underscores between them.
fn python_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    let well_formed = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits.chars().all(|c| c.is_ascii_digit() || c == '_');
    if !well_formed {
        return None;
    }
    t.replace('_', "").parse().ok()
}

fn check(field: &Field, v: &Value, source: Source) -> DomainResult<Value> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    let invalid = |why: String| DomainError::invalid_field(field.name, &to_python_str(v), &why);
    match field.kind {
        Kind::Str { min, max } => {
            let s = v
                .as_str()
                .ok_or_else(|| wrong_type(field, v, "<class 'str'>"))?;
            check_len(s, min, max).map_err(invalid)?;
            Ok(v.clone())
        }
        Kind::ClusterName => {
            let s = v
                .as_str()
                .ok_or_else(|| wrong_type(field, v, "<class 'str'>"))?;
            check_len(s, 1, 242).map_err(invalid)?;
            if !is_cluster_name(s) {
                return Err(invalid(format!(
                    "Value should match the pattern {CLUSTER_NAME_PATTERN}"
                )));
            }
            Ok(v.clone())
        }
        Kind::Int { min, max } => {
            let n = match v {
                Value::Number(n) => n.as_i64(),
                Value::Bool(b) => Some(i64::from(*b)),
                Value::String(s) if source == Source::Json => {
                    Some(python_int(s).ok_or_else(|| {
                        invalid(format!("invalid literal for int() with base 10: '{s}'"))
                    })?)
                }
                _ => None,
            }
            .ok_or_else(|| wrong_type(field, v, "<class 'int'>"))?;
            if let Some(min) = min.filter(|m| n < *m) {
                return Err(invalid(format!(
                    "Value should be greater or equal to {min}"
                )));
            }
            if let Some(max) = max.filter(|m| n > *m) {
                return Err(invalid(format!("Value should be lower or equal to {max}")));
            }
            Ok(Value::from(n))
        }
        Kind::Bool => match v {
            Value::Bool(_) => Ok(v.clone()),
            Value::String(s) => bool_from_string(s)
                .map(Value::Bool)
                .ok_or_else(|| wrong_type(field, v, "<class 'bool'>")),
            _ => Err(wrong_type(field, v, "<class 'bool'>")),
        },
        Kind::Enum(values) => {
            let s = v
                .as_str()
                .ok_or_else(|| wrong_type(field, v, "<class 'str'>"))?;
            if values.contains(&s) {
                Ok(v.clone())
            } else {
                Err(invalid(format!(
                    "Value should be one of: {}",
                    values.join(", ")
                )))
            }
        }
        Kind::Labels => {
            let obj = v
                .as_object()
                .ok_or_else(|| wrong_type(field, v, "<class 'dict'>"))?;
            let mut out = Map::new();
            for (k, val) in obj {
                let s = label_value(val).ok_or_else(|| wrong_type(field, v, "<class 'dict'>"))?;
                out.insert(k.clone(), Value::String(s));
            }
            Ok(Value::Object(out))
        }
        Kind::StrDict => {
            let obj = v
                .as_object()
                .ok_or_else(|| wrong_type(field, v, "<class 'dict'>"))?;
            if obj.values().any(|x| !x.is_string()) {
                return Err(wrong_type(field, v, "<class 'dict'>"));
            }
            Ok(v.clone())
        }
        Kind::StrList => {
            let arr = v
                .as_array()
                .ok_or_else(|| wrong_type(field, v, "<class 'list'>"))?;
            if arr.iter().any(|x| !x.is_string()) {
                return Err(wrong_type(field, v, "<class 'list'>"));
            }
            Ok(v.clone())
        }
        Kind::Taints => {
            if v.is_array() {
                Ok(v.clone())
            } else {
                Err(wrong_type(field, v, "<class 'list'>"))
            }
        }
        Kind::Ignored => Ok(v.clone()),
    }
}

fn check_len(s: &str, min: usize, max: usize) -> Result<(), String> {
    let n = s.chars().count();
    if n < min {
        return Err(format!(
            "Value should have a minimum character requirement of {min}"
        ));
    }
    if n > max {
        return Err(format!(
            "Value should have a maximum character requirement of {max}"
        ));
    }
    Ok(())
}

impl Body {
    pub fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }
    /// The value if present and non-null.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    pub fn str(&self, key: &str) -> Option<String> {
        self.get(key).and_then(Value::as_str).map(str::to_string)
    }
    pub fn int(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(Value::as_i64)
    }
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }
    pub fn labels(&self, key: &str) -> Option<BTreeMap<String, String>> {
        self.get(key).and_then(string_map)
    }
}

/// A JSON object of strings as a sorted map (non-string values are skipped).
pub fn string_map(v: &Value) -> Option<BTreeMap<String, String>> {
    v.as_object().map(|o| {
        o.iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect()
    })
}

/// The strings of a JSON array (other items and non-arrays are ignored).
pub fn string_list(v: Option<&serde_json::Value>) -> Vec<String> {
    v.and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    static FIELDS: [Field; 5] = [
        Field::new("name", Kind::ClusterName),
        Field::new(
            "node_count",
            Kind::Int {
                min: Some(0),
                max: None,
            },
        )
        .default(Default::Int(1)),
        Field::new("coe", Kind::Enum(&["kubernetes"])).mandatory(),
        Field::new("labels", Kind::Labels).default(Default::EmptyDict),
        Field::new("uuid", Kind::Str { min: 1, max: 36 }).readonly(),
    ];
    static SCHEMA: Schema = Schema {
        arg: "cluster",
        fields: &FIELDS,
    };

    fn err(v: Value) -> String {
        SCHEMA
            .parse_body(&v)
            .err()
            .map(|e| e.message().to_string())
            .unwrap_or_default()
    }

    #[test]
    fn unknown_attributes_are_named() {
        assert_eq!(
            err(json!({"coe": "kubernetes", "zz": 1, "aa": 2})),
            "Unknown attribute for argument cluster: aa, zz"
        );
    }

    #[test]
    fn wsme_messages_are_exact() {
        assert_eq!(
            err(json!({"coe": "kubernetes", "node_count": -1})),
            "Invalid input for field/attribute node_count. Value: '-1'. Value should be greater or equal to 0"
        );
        assert_eq!(
            err(json!({"coe": "nomad"})),
            "Invalid input for field/attribute coe. Value: 'nomad'. Value should be one of: kubernetes"
        );
        assert_eq!(
            err(json!({"name": "x"})),
            "Invalid input for field/attribute coe. Value: 'None'. Mandatory field missing."
        );
        assert_eq!(
            err(json!({"coe": "kubernetes", "uuid": "x"})),
            "Invalid input for field/attribute uuid. Value: 'x'. Cannot set read only field."
        );
        assert_eq!(
            err(json!({"coe": "kubernetes", "name": "1x"})),
            "Invalid input for field/attribute name. Value: '1x'. Value should match the pattern ^[a-zA-Z][a-zA-Z0-9_.-]*$"
        );
        assert_eq!(
            err(json!({"coe": "kubernetes", "name": ""})),
            "Invalid input for field/attribute name. Value: ''. Value should have a minimum character requirement of 1"
        );
    }

    #[test]
    fn label_values_become_python_strings() {
        let body = SCHEMA
            .parse_body(
                &json!({"coe": "kubernetes", "labels": {"a": true, "b": 5, "c": 1.5, "d": "x"}}),
            )
            .unwrap();
        assert_eq!(
            body.0["labels"],
            json!({"a": "True", "b": "5", "c": "1.5", "d": "x"})
        );
    }

    #[test]
    fn revalidate_restores_defaults_of_removed_fields() {
        let doc = json!({"coe": "kubernetes"});
        let out = SCHEMA.revalidate(doc.as_object().unwrap()).unwrap();
        assert_eq!(out["node_count"], json!(1));
        assert_eq!(out["labels"], json!({}));
        assert_eq!(out["name"], Value::Null);
    }

    #[test]
    fn booleans_accept_strict_strings() {
        assert_eq!(bool_from_string("TRUE"), Some(true));
        assert_eq!(bool_from_string("off"), Some(false));
        assert_eq!(bool_from_string("maybe"), None);
    }

    #[test]
    fn body_integers_take_what_python_int_takes_but_patched_ones_do_not() {
        // Horizon sends `str(value)` for every create attribute.
        let b = SCHEMA
            .parse_body(&json!({"coe": "kubernetes", "node_count": " +1_0 "}))
            .unwrap();
        assert_eq!(b.int("node_count"), Some(10));
        for bad in ["", "1.5", "_1", "1__0", "ten", "--1"] {
            assert!(
                err(json!({"coe": "kubernetes", "node_count": bad}))
                    .contains(&format!("invalid literal for int() with base 10: '{bad}'")),
                "{bad}"
            );
        }
        assert!(
            err(json!({"coe": "kubernetes", "node_count": "-1"}))
                .contains("Value should be greater or equal to 0")
        );
        let doc = json!({"coe": "kubernetes", "node_count": "3"});
        let e = SCHEMA.revalidate(doc.as_object().unwrap()).unwrap_err();
        assert!(e.message().contains("Wrong type"), "{}", e.message());
    }
}
