//! Field sets as server-side apply tracks them: which fields of an object a value sets (shaped
//! by the structural schema: granular or atomic maps, `x-kubernetes-list-type` `map`/`set`/atomic
//! lists), their `FieldsV1` encoding (`f:`, `k:`, `v:` path elements, `.` for a member with
//! children), and reading, removing and merging values at such paths.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

/// One path: encoded elements such as `f:spec`, `k:{"name":"a"}`, `v:"x"`.
pub(super) type Path = Vec<String>;

/// A set of field paths, as a tree keyed by encoded path elements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub(super) fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    pub(super) fn insert(&mut self, path: &[String]) {
        match path.split_first() {
            None => self.member = true,
            Some((head, rest)) => self.children.entry(head.clone()).or_default().insert(rest),
        }
    }

    fn node(&self, path: &[String]) -> Option<&FieldSet> {
        match path.split_first() {
            None => Some(self),
            Some((head, rest)) => self.children.get(head)?.node(rest),
        }
    }

    pub(super) fn contains(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|n| n.member)
    }

    /// Whether the path or anything below it is in the set.
    pub(super) fn covers(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|n| !n.is_empty())
    }

    /// Whether the member at `path` has members below it (a list item with fields).
    pub(super) fn has_children(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|n| !n.children.is_empty())
    }

    /// Removes one member, dropping nodes left empty.
    pub(super) fn remove(&mut self, path: &[String]) {
        match path.split_first() {
            None => self.member = false,
            Some((head, rest)) => {
                if let Some(child) = self.children.get_mut(head) {
                    child.remove(rest);
                    if child.is_empty() {
                        self.children.remove(head);
                    }
                }
            }
        }
    }

    /// Every member path, parents before their children.
    pub(super) fn members(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.walk(&mut Vec::new(), &mut out);
        out
    }

    fn walk(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (k, child) in &self.children {
            prefix.push(k.clone());
            child.walk(prefix, out);
            prefix.pop();
        }
    }

    /// Members of `self` that are not members of `other`.
    pub(super) fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        for p in other.members() {
            out.remove(&p);
        }
        out
    }

    pub(super) fn union_with(&mut self, other: &FieldSet) {
        for p in other.members() {
            self.insert(&p);
        }
    }

    /// The `FieldsV1` JSON of the set.
    pub(super) fn to_json(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (k, child) in &self.children {
            m.insert(k.clone(), child.to_json());
        }
        Value::Object(m)
    }

    /// Reads `FieldsV1` JSON (`{}` is a member leaf, `.` marks a member with children).
    pub(super) fn from_json(v: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Some(m) = v.as_object() {
            for (k, child) in m {
                if k == "." {
                    set.member = true;
                    continue;
                }
                let mut c = FieldSet::from_json(child);
                if child.as_object().is_some_and(Map::is_empty) {
                    c.member = true;
                }
                set.children.insert(k.clone(), c);
            }
        }
        set
    }
}

/// How a list merges (`x-kubernetes-list-type`, atomic when unset).
enum ListType<'a> {
    Atomic,
    Set,
    Map(Vec<&'a str>),
}

/// The schema Kubernetes applies to `metadata` whatever a CRD says: labels and annotations are
/// granular maps, finalizers a set, ownerReferences a map keyed by `uid`.
fn metadata_schema() -> &'static Value {
    static META: OnceLock<Value> = OnceLock::new();
    META.get_or_init(|| {
        json!({"type": "object", "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "items": {"type": "string"},
                           "x-kubernetes-list-type": "set"},
            "ownerReferences": {"type": "array", "items": {"type": "object"},
                                "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["uid"]},
        }})
    })
}

/// The metadata fields a manager can own (the rest is system-managed or identity).
const OWNABLE_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// The schema of field `k` inside `schema` (`None`: untyped, granular maps and atomic lists).
fn prop<'a>(schema: Option<&'a Value>, k: &str) -> Option<&'a Value> {
    let s = schema?;
    s.get("properties")
        .and_then(|p| p.get(k))
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

fn items(schema: Option<&Value>) -> Option<&Value> {
    schema?.get("items")
}

fn list_type(schema: Option<&Value>) -> ListType<'_> {
    let Some(s) = schema else {
        return ListType::Atomic;
    };
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => ListType::Set,
        Some("map") => ListType::Map(
            s.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default(),
        ),
        _ => ListType::Atomic,
    }
}

fn atomic_map(schema: Option<&Value>) -> bool {
    schema.is_some_and(|s| s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"))
}

pub(super) fn field(k: &str) -> String {
    format!("f:{k}")
}

/// The `k:` element of a list-map item (keys sorted, as Kubernetes encodes them).
fn key_elem(item: &Value, keys: &[&str]) -> Option<String> {
    let mut sorted: Vec<&str> = keys.to_vec();
    sorted.sort_unstable();
    let mut m = Map::new();
    for k in sorted {
        m.insert(k.to_string(), item.get(k)?.clone());
    }
    Some(format!("k:{}", Value::Object(m)))
}

fn is_scalar(v: &Value) -> bool {
    !(v.is_object() || v.is_array())
}

/// The fields `obj` sets, shaped by its schema: everything but `apiVersion`, `kind`, the
/// identity and system fields of `metadata`, and (`with_status` false) `status`. `strict`
/// refuses list-map items without their keys (as apply does); otherwise such a list is atomic.
pub(super) fn field_set(
    obj: &Value,
    schema: Option<&Value>,
    with_status: bool,
    strict: bool,
) -> Result<FieldSet, String> {
    let mut set = FieldSet::default();
    let Some(m) = obj.as_object() else {
        return Ok(set);
    };
    let mut path = Vec::new();
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if !with_status => {}
            "metadata" => {
                let meta = Some(metadata_schema());
                for f in OWNABLE_METADATA {
                    if let Some(v) = v.get(*f) {
                        path.push(field("metadata"));
                        path.push(field(f));
                        collect(v, prop(meta, f), &mut path, &mut set, strict)?;
                        path.truncate(0);
                    }
                }
            }
            _ => {
                path.push(field(k));
                collect(v, prop(schema, k), &mut path, &mut set, strict)?;
                path.pop();
            }
        }
    }
    Ok(set)
}

fn collect(
    v: &Value,
    schema: Option<&Value>,
    path: &mut Path,
    out: &mut FieldSet,
    strict: bool,
) -> Result<(), String> {
    match v {
        Value::Object(m) if !m.is_empty() && !atomic_map(schema) => {
            for (k, c) in m {
                path.push(field(k));
                collect(c, prop(schema, k), path, out, strict)?;
                path.pop();
            }
        }
        Value::Array(list) => match list_type(schema) {
            ListType::Map(keys) if !keys.is_empty() => {
                let item_schema = items(schema);
                let mut elems = Vec::with_capacity(list.len());
                for (i, item) in list.iter().enumerate() {
                    match key_elem(item, &keys).filter(|_| item.is_object()) {
                        Some(e) if elems.contains(&e) => {
                            if strict {
                                return Err(format!(
                                    "{}: duplicate entries for key {}",
                                    dotted(path),
                                    e.trim_start_matches("k:")
                                ));
                            }
                            out.insert(path);
                            return Ok(());
                        }
                        Some(e) => elems.push(e),
                        None if strict => {
                            return Err(format!(
                                "{}: element {i}: associative list with keys has an element \
                                 that omits key field(s) {keys:?}",
                                dotted(path)
                            ));
                        }
                        None => {
                            out.insert(path);
                            return Ok(());
                        }
                    }
                }
                for (item, elem) in list.iter().zip(elems) {
                    path.push(elem);
                    out.insert(path);
                    if let Some(m) = item.as_object() {
                        for (k, c) in m {
                            path.push(field(k));
                            collect(c, prop(item_schema, k), path, out, strict)?;
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
            ListType::Set if list.iter().all(is_scalar) => {
                for item in list {
                    path.push(format!("v:{item}"));
                    out.insert(path);
                    path.pop();
                }
            }
            _ => out.insert(path),
        },
        _ => out.insert(path),
    }
    Ok(())
}

/// A path as Kubernetes prints it in conflicts (`.spec.items[name="a"].x`).
pub(super) fn dotted(path: &[String]) -> String {
    let mut s = String::new();
    for e in path {
        if let Some(f) = e.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            let keys: Value = serde_json::from_str(k).unwrap_or(Value::Null);
            let inner: Vec<String> = keys
                .as_object()
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            s.push_str(&format!("[{}]", inner.join(",")));
        } else if let Some(v) = e.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        } else {
            s.push_str(&format!("[{e}]"));
        }
    }
    s
}

/// Whether a list item matches a `k:` or `v:` element.
fn item_matches(item: &Value, elem: &str) -> bool {
    if let Some(k) = elem.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(k) else {
            return false;
        };
        keys.iter().all(|(k, v)| item.get(k) == Some(v))
    } else if let Some(v) = elem.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|v| *item == v)
    } else {
        false
    }
}

/// The value at `path`, if present.
pub(super) fn get_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for e in path {
        cur = match e.strip_prefix("f:") {
            Some(f) => cur.get(f)?,
            None => cur.as_array()?.iter().find(|i| item_matches(i, e))?,
        };
    }
    Some(cur)
}

/// Removes the field or list item at `path` (nothing when absent).
pub(super) fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for e in parent {
        let next = match e.strip_prefix("f:") {
            Some(f) => cur.get_mut(f),
            None => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| item_matches(i, e))),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last.strip_prefix("f:") {
        Some(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        None => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| !item_matches(i, last));
            }
        }
    }
}

/// Merges an applied configuration into the live object: granular maps field by field, list
/// maps item by item (by key), sets by value, everything else (atomic) replaced.
pub(super) fn merge(live: &mut Value, cfg: &Value, schema: Option<&Value>) {
    match (live, cfg) {
        (Value::Object(l), Value::Object(c)) if !atomic_map(schema) => {
            for (k, cv) in c {
                match l.get_mut(k) {
                    Some(lv) => merge(lv, cv, prop(schema, k)),
                    None => {
                        l.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(c)) => match list_type(schema) {
            ListType::Map(keys) if !keys.is_empty() => {
                let item_schema = items(schema);
                for ci in c {
                    let Some(elem) = key_elem(ci, &keys) else {
                        l.push(ci.clone());
                        continue;
                    };
                    match l.iter_mut().find(|li| item_matches(li, &elem)) {
                        Some(li) => merge(li, ci, item_schema),
                        None => l.push(ci.clone()),
                    }
                }
            }
            ListType::Set => {
                for ci in c {
                    if !l.contains(ci) {
                        l.push(ci.clone());
                    }
                }
            }
            _ => *l = c.clone(),
        },
        (l, c) => *l = c.clone(),
    }
}

/// `merge` of a whole object: the CRD's schema, with `metadata` shaped as Kubernetes does.
pub(super) fn root_merge(live: &mut Value, cfg: &Value, schema: Option<&Value>) {
    let (Value::Object(l), Value::Object(c)) = (&mut *live, cfg) else {
        *live = cfg.clone();
        return;
    };
    for (k, cv) in c {
        let sub = if k == "metadata" {
            Some(metadata_schema())
        } else {
            prop(schema, k)
        };
        match l.get_mut(k) {
            Some(lv) => merge(lv, cv, sub),
            None => {
                l.insert(k.clone(), cv.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(elems: &[&str]) -> Path {
        elems.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn field_sets_encode_as_fields_v1() {
        let schema = json!({"properties": {"spec": {"properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object"}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set"},
            "args": {"type": "array"}}}}});
        let obj = json!({"apiVersion": "v1", "kind": "X",
            "metadata": {"name": "a", "labels": {"l": "1"}},
            "spec": {"items": [{"name": "a", "v": 1}], "tags": ["x"], "args": ["--a"]}});
        let set = field_set(&obj, Some(&schema), false, true).unwrap();
        assert_eq!(
            set.to_json(),
            json!({"f:metadata": {"f:labels": {"f:l": {}}},
                   "f:spec": {"f:args": {}, "f:items": {"k:{\"name\":\"a\"}": {
                       ".": {}, "f:name": {}, "f:v": {}}}, "f:tags": {"v:\"x\"": {}}}})
        );
        assert_eq!(FieldSet::from_json(&set.to_json()), set);
        let item = p(&["f:spec", "f:items", "k:{\"name\":\"a\"}"]);
        assert!(set.contains(&item) && set.has_children(&item));
        assert_eq!(
            get_at(&obj, &[item.clone(), p(&["f:v"])].concat()),
            Some(&json!(1))
        );
        assert_eq!(dotted(&item), ".spec.items[name=\"a\"]");
        let mut o = obj.clone();
        remove_at(&mut o, &item);
        assert_eq!(o["spec"]["items"], json!([]));
        for bad in [
            json!({"spec": {"items": [{"v": 1}]}}),
            json!({"spec": {"items": [{"name": "a"}, {"name": "a", "v": 2}]}}),
        ] {
            assert!(field_set(&bad, Some(&schema), false, true).is_err());
            let lenient = field_set(&bad, Some(&schema), false, false).unwrap();
            assert!(lenient.contains(&p(&["f:spec", "f:items"])));
        }
    }
}
