//! `metadata.managedFields`: who owns which fields, and how writes change that. Server-side
//! apply (conflicts with other managers, removal of what the applier owned and dropped, merge
//! by the schema's list and map types) and the `Update` entry every other write records.

use serde_json::{Value, json};

use super::fields::{FieldSet, dotted, field_set, get_at, remove_at, root_merge};
use super::meta::{meta_mut, now_rfc3339};
use super::types::StoreError;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }
}

fn read(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let s = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    list.iter()
        .map(|e| Entry {
            manager: s(e, "manager"),
            operation: s(e, "operation"),
            api_version: s(e, "apiVersion"),
            time: s(e, "time"),
            subresource: e
                .get("subresource")
                .and_then(Value::as_str)
                .map(str::to_string),
            set: FieldSet::from_json(e.get("fieldsV1").unwrap_or(&Value::Null)),
        })
        .collect()
}

fn write(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.set.is_empty())
        .map(|e| {
            let mut v = json!({"manager": e.manager, "operation": e.operation,
                "apiVersion": e.api_version, "time": e.time, "fieldsType": "FieldsV1",
                "fieldsV1": e.set.to_json()});
            if let Some(sub) = e.subresource {
                v["subresource"] = json!(sub);
            }
            v
        })
        .collect();
    if let Some(meta) = meta_mut(obj) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

fn api_version(obj: &Value) -> String {
    obj.get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Everything but `managedFields` is equal.
fn same_content(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        v
    };
    strip(a) == strip(b)
}

/// Who writes and how: the field manager, `force` for apply, and the subresource addressed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Writer<'a> {
    pub manager: &'a str,
    pub force: bool,
    pub subresource: Option<&'a str>,
    /// Whether `status` belongs to the fields written (no `/status` subresource, or writing it).
    pub with_status: bool,
}

/// Server-side apply of `cfg` over `live`: the new object, managed fields included, or a 409
/// naming every conflicting field and manager when `force` is off.
pub(super) fn apply(
    live: &Value,
    cfg: &Value,
    w: Writer<'_>,
    schema: Option<&Value>,
) -> Result<Value, StoreError> {
    let applied = field_set(cfg, schema, w.with_status, true)
        .map_err(|e| StoreError::BadRequest(format!("failed to create typed patch object: {e}")))?;
    let mut entries = read(live);
    let mine = entries
        .iter()
        .position(|e| e.is(w.manager, "Apply", w.subresource));
    let last = mine.map(|i| entries[i].set.clone()).unwrap_or_default();

    let mut conflicts: Vec<(Vec<String>, usize)> = Vec::new();
    for path in applied.members() {
        if applied.has_children(&path) || get_at(live, &path) == get_at(cfg, &path) {
            continue;
        }
        for (i, e) in entries.iter().enumerate() {
            if Some(i) != mine && e.set.contains(&path) {
                conflicts.push((path.clone(), i));
            }
        }
    }
    if !conflicts.is_empty() {
        if !w.force {
            return Err(conflict_error(&conflicts, &entries));
        }
        for (path, i) in &conflicts {
            entries[*i].set.remove(path);
        }
    }

    let mut others = FieldSet::default();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) != mine {
            others.union_with(&e.set);
        }
    }
    let mut new = live.clone();
    // Parents first: a list-map item is found by its key fields, so they must still be there
    // when the item goes (its own fields go with it).
    for path in last.difference(&applied).members() {
        if !others.covers(&path) {
            remove_at(&mut new, &path);
        }
    }
    root_merge(&mut new, cfg, schema);

    let entry = Entry {
        manager: w.manager.to_string(),
        operation: "Apply".into(),
        api_version: api_version(cfg),
        time: String::new(),
        subresource: w.subresource.map(str::to_string),
        set: applied,
    };
    let changed = !same_content(live, &new) || mine.is_none_or(|i| entries[i].set != entry.set);
    match mine {
        Some(i) => {
            let time = if changed {
                now_rfc3339()
            } else {
                entries[i].time.clone()
            };
            entries[i] = Entry { time, ..entry };
        }
        None => entries.push(Entry {
            time: now_rfc3339(),
            ..entry
        }),
    }
    write(&mut new, entries);
    Ok(new)
}

fn conflict_error(conflicts: &[(Vec<String>, usize)], entries: &[Entry]) -> StoreError {
    let who = |i: usize| {
        let e = &entries[i];
        format!("conflict with \"{}\" using {}", e.manager, e.api_version)
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(path, i)| {
            json!({"reason": "FieldManagerConflict", "message": who(*i), "field": dotted(path)})
        })
        .collect();
    let message = match conflicts {
        [(path, i)] => format!(
            "Apply failed with 1 conflict: {}: {}",
            who(*i),
            dotted(path)
        ),
        _ => {
            let lines: Vec<String> = conflicts
                .iter()
                .map(|(path, i)| format!("{}: {}", who(*i), dotted(path)))
                .collect();
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        }
    };
    StoreError::FieldConflict {
        message,
        details: json!({"causes": causes}),
    }
}

/// Records a non-apply write (create, update, patch) of `new` over `old`: the writer's `Update`
/// entry gains the fields it set or changed, which every other manager loses; fields gone from
/// the object leave every entry.
pub(super) fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    w: Writer<'_>,
    schema: Option<&Value>,
) {
    let now_set = field_set(new, schema, w.with_status, false).unwrap_or_default();
    let mut changed = FieldSet::default();
    for path in now_set.members() {
        let before = old.and_then(|o| get_at(o, &path));
        let differs = if now_set.has_children(&path) {
            before.is_none()
        } else {
            before != get_at(new, &path)
        };
        if differs {
            changed.insert(&path);
        }
    }
    let gone = old
        .map(|o| field_set(o, schema, w.with_status, false).unwrap_or_default())
        .unwrap_or_default()
        .difference(&now_set);
    let mut entries = old.map(read).unwrap_or_default();
    for e in &mut entries {
        e.set = e.set.difference(&changed).difference(&gone);
    }
    if !changed.is_empty() {
        let av = api_version(new);
        match entries
            .iter_mut()
            .find(|e| e.is(w.manager, "Update", w.subresource))
        {
            Some(e) => {
                e.set.union_with(&changed);
                e.time = now_rfc3339();
                e.api_version = av;
            }
            None => entries.push(Entry {
                manager: w.manager.to_string(),
                operation: "Update".into(),
                api_version: av,
                time: now_rfc3339(),
                subresource: w.subresource.map(str::to_string),
                set: changed,
            }),
        }
    }
    write(new, entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Writer<'static> = Writer {
        manager: "a",
        force: false,
        subresource: None,
        with_status: false,
    };

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    #[test]
    fn apply_removes_what_the_manager_dropped_and_keeps_what_others_own() {
        let live = apply(&cm(json!({})), &cm(json!({"x": "1", "y": "2"})), W, None).unwrap();
        let mut by_b = live.clone();
        by_b["data"]["z"] = json!("3");
        track_update(Some(&live), &mut by_b, Writer { manager: "b", ..W }, None);
        let out = apply(&by_b, &cm(json!({"x": "1"})), W, None).unwrap();
        assert_eq!(out["data"], json!({"x": "1", "z": "3"}));
        let managers: Vec<&str> = out["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["a", "b"]);
        // b changes a's field: a conflict for a's next apply unless forced.
        let mut by_b2 = out.clone();
        by_b2["data"]["x"] = json!("9");
        track_update(Some(&out), &mut by_b2, Writer { manager: "b", ..W }, None);
        let err = apply(&by_b2, &cm(json!({"x": "1"})), W, None).unwrap_err();
        assert_eq!(err.code(), 409);
        assert!(err.to_string().contains(".data.x"), "{err}");
        let forced = apply(
            &by_b2,
            &cm(json!({"x": "1"})),
            Writer { force: true, ..W },
            None,
        );
        assert_eq!(forced.unwrap()["data"]["x"], "1");
    }
}
