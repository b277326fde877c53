//! Metadata and body rules every write shares: reading and setting `metadata` fields,
//! deletion and finalizer state, owner uids, dropping `null`s, folding a Secret's
//! `stringData`, whether the spec changed, timestamps and `generateName` suffixes.

use chrono::SecondsFormat;
use serde_json::{Map, Value, json};

use super::types::{Resource, StoreError};

/// RFC 3339 timestamp in seconds, as Kubernetes writes them.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(super) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// The object's `metadata` map, created when missing (`None` only for a non-object value).
pub(super) fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = obj
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut()
}

pub(super) fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if let Some(meta) = meta_mut(obj) {
        meta.insert(field.to_string(), value);
    }
}

pub(super) fn require_object(obj: &Value) -> Result<(), StoreError> {
    if obj.is_object() {
        Ok(())
    } else {
        Err(StoreError::BadRequest(
            "the object must be a JSON object".into(),
        ))
    }
}

pub(super) fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

/// What a delete writes on an object that has to wait for its finalizers.
pub(super) fn mark_deleting(obj: &mut Value) {
    set_meta(obj, "deletionTimestamp", json!(now_rfc3339()));
    set_meta(obj, "deletionGracePeriodSeconds", json!(0));
}

pub(super) fn has_finalizers(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

pub(super) fn owner_uids(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Drops `null` members of objects, recursively, as the apiserver does for non-nullable fields.
pub(super) fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// A Secret's `stringData` is write-only: the apiserver folds it into `data` (base64).
pub(super) fn fold_string_data(res: &Resource, obj: &mut Value) {
    use base64::Engine;
    if !(res.is_core() && res.plural == "secrets") {
        return;
    }
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|m| m.remove("stringData"))
    else {
        return;
    };
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let data = root.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in strings {
            if let Some(text) = v.as_str() {
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(k, json!(encoded));
            }
        }
    }
}

/// True when anything besides `metadata` and `status` differs (→ `generation` + 1).
pub(super) fn spec_changed(old: &Value, new: &Value) -> bool {
    let empty = Map::new();
    let (o, n) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let skip = |k: &String| k == "metadata" || k == "status";
    o.iter()
        .filter(|(k, _)| !skip(k))
        .any(|(k, v)| n.get(k) != Some(v))
        || n.iter()
            .filter(|(k, _)| !skip(k))
            .any(|(k, _)| !o.contains_key(k))
}

/// Five characters as kube-apiserver appends for `generateName`.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n: u64 = rand::random();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Whether `finalizer` is among the object's finalizers.
pub fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Adds a finalizer (no-op when present).
pub fn add_finalizer(obj: &mut Value, finalizer: &str) {
    if has_finalizer(obj, finalizer) {
        return;
    }
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    match meta.get_mut("finalizers") {
        Some(Value::Array(list)) => list.push(json!(finalizer)),
        _ => {
            meta.insert("finalizers".into(), json!([finalizer]));
        }
    }
}

/// Removes a finalizer (no-op when absent).
pub fn remove_finalizer(obj: &mut Value, finalizer: &str) {
    if let Some(Value::Array(list)) = obj
        .get_mut("metadata")
        .and_then(|m| m.get_mut("finalizers"))
    {
        list.retain(|x| x != finalizer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simkube::store::fixtures::store;

    #[test]
    fn secret_string_data_is_folded_into_data() {
        let s = store();
        let o = s
            .create(
                &Resource::core("secrets"),
                "default",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                       "stringData": {"a": "hi"}, "data": {"b": "eA=="}}),
            )
            .unwrap();
        assert_eq!(o["data"], json!({"a": "aGk=", "b": "eA=="}));
        assert!(o.get("stringData").is_none());
    }
}
