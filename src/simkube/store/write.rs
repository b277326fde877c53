//! Creating and changing objects: create (system metadata, `generateName`, Namespace check),
//! replace, patch (server-side apply, merge, JSON), update, the `/status` subresource rules,
//! resourceVersion preconditions, field ownership (`managedFields`, via `managed`), and
//! `commit`, the one place a new state is defaulted, validated, stored, indexed and announced.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::delete::Removed;
use super::event::EventType;
use super::managed::{self, Writer};
use super::meta::{
    fold_string_data, has_finalizers, is_deleting, meta_mut, meta_str, now_rfc3339, owner_uids,
    random_suffix, require_object, set_meta, spec_changed, strip_nulls,
};
use super::state::{Inner, Store};
use super::types::{
    FieldError, FieldManager, ObjectKey, Patch, Resource, StoreError, Target, not_found,
};

/// A precondition carried in the body: a stale `metadata.resourceVersion` is a 409 Conflict.
fn check_precondition(res: &Resource, old: &Value, body: &Value) -> Result<(), StoreError> {
    match meta_str(body, "resourceVersion") {
        Some(rv) if !rv.is_empty() && Some(rv) != meta_str(old, "resourceVersion") => {
            Err(StoreError::Conflict(format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please \
                 apply your changes to the latest version and try again",
                res.qualified(),
                meta_str(old, "name").unwrap_or_default()
            )))
        }
        _ => Ok(()),
    }
}

/// How a create records field ownership.
#[derive(Clone, Copy)]
enum Track<'a> {
    /// Test seeding (`put`): none, and a custom resource keeps the `status` given.
    Seed,
    /// An `Update` entry of this manager for every field set.
    Update(&'a FieldManager),
    /// Server-side apply that creates: an `Apply` entry of this manager.
    Apply(&'a FieldManager),
}

/// The 422 of an object its admission refused, worded as kube-apiserver does
/// (`Kind.group "name" is invalid: field: message`, several in brackets).
fn invalid(key: &ObjectKey, obj: &Value, errs: &[FieldError]) -> StoreError {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let what = if key.resource.is_core() {
        kind.to_string()
    } else {
        format!("{kind}.{}", key.resource.group)
    };
    let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
    let joined = match list.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", list.join(", ")),
    };
    let causes: Vec<Value> = errs
        .iter()
        .map(|e| json!({"reason": "FieldValueInvalid", "message": e.message, "field": e.field}))
        .collect();
    StoreError::InvalidObject {
        message: format!("{what} \"{}\" is invalid: {joined}", key.name),
        details: json!({"name": key.name, "group": key.resource.group, "kind": kind,
                        "causes": causes}),
    }
}

impl Store {
    /// Creates the Namespace if it does not exist.
    pub fn ensure_namespace(&self, name: &str) -> Result<Arc<Value>, StoreError> {
        let res = Resource::core("namespaces");
        let mut inner = self.write();
        if let Some(o) = inner.lookup(&res, "", name) {
            return Ok(o.clone());
        }
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        self.create_locked(
            &mut inner,
            &res,
            "",
            obj,
            Track::Update(&FieldManager::default()),
        )
    }

    /// Creates an object (409 `AlreadyExists` when present). A custom resource's `status` in
    /// the body is dropped, as for a real `/status` subresource.
    pub fn create(
        &self,
        res: &Resource,
        namespace: &str,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.create_as(res, namespace, obj, &FieldManager::default())
    }

    /// `create` by a named field manager (its `Update` entry owns every field set).
    pub fn create_as(
        &self,
        res: &Resource,
        namespace: &str,
        obj: Value,
        manager: &FieldManager,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.write();
        self.create_locked(&mut inner, res, namespace, obj, Track::Update(manager))
    }

    /// Test seeding: creates or replaces the whole object, `status` included, bypassing the
    /// subresource rules (system metadata is still managed). Namespace from `metadata`.
    pub fn put(&self, res: &Resource, obj: Value) -> Result<Arc<Value>, StoreError> {
        require_object(&obj)?;
        let ns = meta_str(&obj, "namespace").unwrap_or_default().to_string();
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let mut inner = self.write();
        let key = ObjectKey::new(res, &ns, &name);
        let Some(old) = inner.get(&key).cloned() else {
            return self.create_locked(&mut inner, res, &ns, obj, Track::Seed);
        };
        let mut new = obj;
        strip_nulls(&mut new);
        fold_string_data(res, &mut new);
        Self::carry_system_metadata(&old, &mut new);
        self.commit(&mut inner, key, Some(old), new)
    }

    /// Replaces an object (PUT). A stale `metadata.resourceVersion` in the body is a 409.
    pub fn replace(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        body: Value,
        target: Target,
    ) -> Result<Arc<Value>, StoreError> {
        self.replace_as(res, namespace, name, body, target, &FieldManager::default())
    }

    /// `replace` by a named field manager.
    pub fn replace_as(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        body: Value,
        target: Target,
        manager: &FieldManager,
    ) -> Result<Arc<Value>, StoreError> {
        require_object(&body)?;
        if meta_str(&body, "name").is_some_and(|n| n != name) {
            return Err(StoreError::BadRequest(
                "the name of the object does not match the name on the URL".into(),
            ));
        }
        let mut inner = self.write();
        let key = ObjectKey::new(res, namespace, name);
        let old = inner
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(res, name))?;
        check_precondition(res, &old, &body)?;
        let mut new = Self::finish_update(res, &old, body, target);
        self.track(res, &old, &mut new, manager, target);
        self.commit(&mut inner, key, Some(old), new)
    }

    /// Patches an object; `Apply` creates it when absent (`true` in the result when created).
    pub fn patch(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        patch: Patch,
        target: Target,
    ) -> Result<(Arc<Value>, bool), StoreError> {
        self.patch_as(
            res,
            namespace,
            name,
            patch,
            target,
            &FieldManager::default(),
        )
    }

    /// `patch` by a named field manager: its `Apply` entry for server-side apply (409 on
    /// conflicts with other managers unless forced), its `Update` entry otherwise.
    pub fn patch_as(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        patch: Patch,
        target: Target,
        manager: &FieldManager,
    ) -> Result<(Arc<Value>, bool), StoreError> {
        let mut inner = self.write();
        let key = ObjectKey::new(res, namespace, name);
        let Some(old) = inner.get(&key).cloned() else {
            return match (patch, target) {
                (Patch::Apply(mut body), Target::Main) => {
                    if meta_str(&body, "name").is_some_and(|n| n != name) {
                        return Err(StoreError::BadRequest(
                            "the name of the object does not match the name on the URL".into(),
                        ));
                    }
                    set_meta(&mut body, "name", json!(name));
                    self.create_locked(&mut inner, res, namespace, body, Track::Apply(manager))
                        .map(|o| (o, true))
                }
                _ => Err(not_found(res, name)),
            };
        };
        let mut new = (*old).clone();
        match patch {
            Patch::Apply(body) => {
                let new = self.apply_over(res, &old, body, target, manager)?;
                return self
                    .commit(&mut inner, key, Some(old), new)
                    .map(|o| (o, false));
            }
            Patch::Merge(body) => {
                if !body.is_object() {
                    return Err(StoreError::BadRequest(
                        "patch body must be an object".into(),
                    ));
                }
                check_precondition(res, &old, &body)?;
                json_patch::merge(&mut new, &body);
            }
            Patch::Json(p) => {
                json_patch::patch(&mut new, &p)
                    .map_err(|e| StoreError::Invalid(format!("json patch failed: {e}")))?;
                require_object(&new)?;
            }
        }
        let mut new = Self::finish_update(res, &old, new, target);
        self.track(res, &old, &mut new, manager, target);
        self.commit(&mut inner, key, Some(old), new)
            .map(|o| (o, false))
    }

    /// Server-side apply of `body` over the stored `old`: the candidate new state.
    fn apply_over(
        &self,
        res: &Resource,
        old: &Value,
        body: Value,
        target: Target,
        manager: &FieldManager,
    ) -> Result<Value, StoreError> {
        if !body.is_object() {
            return Err(StoreError::BadRequest(
                "patch body must be an object".into(),
            ));
        }
        check_precondition(res, old, &body)?;
        let cfg = Self::applied_config(res, body, target);
        let schema = self.schema_of(old);
        let merged = managed::apply(old, &cfg, Self::writer(res, manager, target), schema)?;
        let fields = merged.pointer("/metadata/managedFields").cloned();
        let mut new = Self::finish_update(res, old, merged, target);
        match fields {
            Some(f) => set_meta(&mut new, "managedFields", f),
            None => {
                if let Some(m) = meta_mut(&mut new) {
                    m.remove("managedFields");
                }
            }
        }
        Ok(new)
    }

    /// The part of an applied body that the addressed target owns: `status` only through
    /// `/status`, never through the main resource of a kind with that subresource.
    fn applied_config(res: &Resource, mut body: Value, target: Target) -> Value {
        strip_nulls(&mut body);
        fold_string_data(res, &mut body);
        if let Some(m) = body.as_object_mut() {
            match target {
                Target::Status => {
                    m.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "status"))
                }
                Target::Main if res.has_status_subresource() => {
                    m.remove("status");
                }
                Target::Main => {}
            }
        }
        body
    }

    fn writer<'a>(res: &Resource, manager: &'a FieldManager, target: Target) -> Writer<'a> {
        Writer {
            manager: &manager.name,
            force: manager.force,
            subresource: (target == Target::Status).then_some("status"),
            with_status: target == Target::Status || !res.has_status_subresource(),
        }
    }

    /// The structural schema of an object's kind, when the admission knows it.
    fn schema_of(&self, obj: &Value) -> Option<&Value> {
        let av = obj.get("apiVersion").and_then(Value::as_str)?;
        let kind = obj.get("kind").and_then(Value::as_str)?;
        self.opts.validator.as_ref()?.schema(av, kind)
    }

    /// Records a non-apply write of `new` over `old` in `managedFields`.
    fn track(
        &self,
        res: &Resource,
        old: &Value,
        new: &mut Value,
        manager: &FieldManager,
        target: Target,
    ) {
        let schema = self.schema_of(old);
        managed::track_update(Some(old), new, Self::writer(res, manager, target), schema);
    }

    /// JSON-merges `patch` (`{"status": …}` or just the status fields under `status`) into the
    /// `/status` subresource.
    pub fn patch_status(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.patch(
            res,
            namespace,
            name,
            Patch::Merge(patch.clone()),
            Target::Status,
        )
        .map(|(o, _)| o)
    }

    /// Read-modify-write of one object under the store lock (no-op writes emit nothing).
    pub fn update(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        target: Target,
        f: impl FnOnce(&mut Value),
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.write();
        let key = ObjectKey::new(res, namespace, name);
        let old = inner
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(res, name))?;
        let mut new = (*old).clone();
        f(&mut new);
        require_object(&new)?;
        let mut new = Self::finish_update(res, &old, new, target);
        self.track(res, &old, &mut new, &FieldManager::default(), target);
        self.commit(&mut inner, key, Some(old), new)
    }

    // ---- write internals (all called with the write lock held) ----

    fn check_namespace(&self, inner: &Inner, res: &Resource, ns: &str) -> Result<(), StoreError> {
        if !self.opts.require_namespaces || ns.is_empty() || res.is_namespace() {
            return Ok(());
        }
        match inner.lookup(&Resource::core("namespaces"), "", ns) {
            Some(_) => Ok(()),
            None => Err(StoreError::NotFound(format!(
                "namespaces \"{ns}\" not found"
            ))),
        }
    }

    fn create_locked(
        &self,
        inner: &mut Inner,
        res: &Resource,
        namespace: &str,
        mut obj: Value,
        track: Track<'_>,
    ) -> Result<Arc<Value>, StoreError> {
        if !obj.is_object() {
            return Err(StoreError::BadRequest("the body must be an object".into()));
        }
        strip_nulls(&mut obj);
        fold_string_data(res, &mut obj);
        let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
            _ => {
                return Err(StoreError::Invalid(format!(
                    "{} is invalid: metadata.name: Required value: name or generateName is required",
                    res.qualified()
                )));
            }
        };
        if let Some(ns) = meta_str(&obj, "namespace")
            && !ns.is_empty()
            && !namespace.is_empty()
            && ns != namespace
        {
            return Err(StoreError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the \
                 request"
                    .into(),
            ));
        }
        self.check_namespace(inner, res, namespace)?;
        let key = ObjectKey::new(res, namespace, &name);
        if inner.get(&key).is_some() {
            return Err(StoreError::AlreadyExists(format!(
                "{} \"{name}\" already exists",
                res.qualified()
            )));
        }
        if obj.get("apiVersion").is_none()
            && let Some((av, kind)) = inner.kinds.get(res)
        {
            obj["apiVersion"] = json!(av);
            obj["kind"] = json!(kind);
        }
        if let Some(meta) = meta_mut(&mut obj) {
            meta.insert("name".into(), json!(name));
            if namespace.is_empty() {
                meta.remove("namespace");
            } else {
                meta.insert("namespace".into(), json!(namespace));
            }
            meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            meta.insert("generation".into(), json!(1));
            for f in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "selfLink",
            ] {
                meta.remove(f);
            }
        }
        if res.has_status_subresource()
            && !matches!(track, Track::Seed)
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        if res.is_namespace() && obj.get("status").is_none() {
            obj["status"] = json!({"phase": "Active"});
        }
        let schema = self.schema_of(&obj);
        match track {
            Track::Seed => {}
            Track::Update(m) => {
                managed::track_update(None, &mut obj, Self::writer(res, m, Target::Main), schema);
            }
            Track::Apply(m) => {
                // Applying over nothing is the body itself plus the applier's entry.
                let empty = json!({});
                obj = managed::apply(&empty, &obj, Self::writer(res, m, Target::Main), schema)?;
            }
        }
        self.commit(inner, key, None, obj)
    }

    /// Copies what clients cannot change from the stored object into the new one.
    fn carry_system_metadata(old: &Value, new: &mut Value) {
        for f in ["apiVersion", "kind"] {
            if new.get(f).is_none()
                && let Some(v) = old.get(f)
            {
                new[f] = v.clone();
            }
        }
        let generation = old
            .get("metadata")
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let bump = spec_changed(old, new);
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let Some(meta) = meta_mut(new) else {
            return;
        };
        for f in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "managedFields",
        ] {
            match old_meta.get(f) {
                Some(v) => meta.insert(f.into(), v.clone()),
                None => meta.remove(f),
            };
        }
        meta.insert(
            "generation".into(),
            json!(if bump { generation + 1 } else { generation }),
        );
    }

    /// Applies the subresource rules to a candidate new state of `old`.
    fn finish_update(res: &Resource, old: &Value, mut new: Value, target: Target) -> Value {
        match target {
            Target::Status => {
                let status = new
                    .get_mut("status")
                    .map(Value::take)
                    .filter(|s| !s.is_null());
                // Everything but `status` comes from the stored object; reuse the candidate
                // (already a copy of it in the common case) instead of cloning again.
                let rest_unchanged = match (old.as_object(), new.as_object()) {
                    (Some(o), Some(n)) => {
                        let others =
                            |m: &Map<String, Value>| m.keys().filter(|k| *k != "status").count();
                        others(o) == others(n)
                            && o.iter()
                                .filter(|(k, _)| *k != "status")
                                .all(|(k, v)| n.get(k) == Some(v))
                    }
                    _ => false,
                };
                let mut out = if rest_unchanged { new } else { old.clone() };
                if let Some(m) = out.as_object_mut() {
                    match status {
                        Some(mut s) => {
                            strip_nulls(&mut s);
                            m.insert("status".into(), s);
                        }
                        None => {
                            m.remove("status");
                        }
                    }
                }
                out
            }
            Target::Main => {
                strip_nulls(&mut new);
                fold_string_data(res, &mut new);
                if res.has_status_subresource()
                    && let Some(m) = new.as_object_mut()
                {
                    match old.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                Self::carry_system_metadata(old, &mut new);
                new
            }
        }
    }

    /// Stores `new` (validated, with a fresh resourceVersion) and emits its event; a no-op
    /// write returns the stored object unchanged. Removes the object when it is deleting and
    /// has no finalizers left, and deletes it when every owner it names is gone.
    pub(super) fn commit(
        &self,
        inner: &mut Inner,
        key: ObjectKey,
        old: Option<Arc<Value>>,
        mut new: Value,
    ) -> Result<Arc<Value>, StoreError> {
        if let Some(admission) = &self.opts.validator {
            admission.default(&mut new);
        }
        if let Some(old) = &old
            && **old == new
        {
            return Ok(old.clone());
        }
        if let Some(admission) = &self.opts.validator {
            admission
                .validate(&new, old.as_deref())
                .map_err(|errs| invalid(&key, &new, &errs))?;
        }
        if let (Some(av), Some(kind)) = (
            new.get("apiVersion").and_then(Value::as_str),
            new.get("kind").and_then(Value::as_str),
        ) && inner
            .kinds
            .get(&key.resource)
            .is_none_or(|(a, k)| a != av || k != kind)
        {
            inner
                .kinds
                .insert(key.resource.clone(), (av.to_string(), kind.to_string()));
        }
        inner.rv += 1;
        let rv = inner.rv;
        set_meta(&mut new, "resourceVersion", json!(rv.to_string()));
        let new = Arc::new(new);
        if is_deleting(&new) && !has_finalizers(&new) {
            self.remove_locked(inner, &key, new.clone(), rv);
            self.cascade(inner, Removed::of(&key, &new));
            return Ok(new);
        }
        Self::reindex(inner, &key, old.as_deref(), Some(&new));
        inner
            .objects
            .entry(key.resource.clone())
            .or_default()
            .insert((key.namespace.clone(), key.name.clone()), new.clone());
        let event_type = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.emit(inner, rv, event_type, key.clone(), new.clone(), old);
        self.collect_if_orphaned(inner, &key);
        Ok(new)
    }

    pub(super) fn reindex(
        inner: &mut Inner,
        key: &ObjectKey,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        let old_owners = old.map(owner_uids).unwrap_or_default();
        let new_owners = new.map(owner_uids).unwrap_or_default();
        for uid in old_owners.iter().filter(|u| !new_owners.contains(u)) {
            if let Some(set) = inner.dependents.get_mut(uid) {
                set.remove(key);
                if set.is_empty() {
                    inner.dependents.remove(uid);
                }
            }
        }
        for uid in new_owners {
            inner.dependents.entry(uid).or_default().insert(key.clone());
        }
        match (old, new) {
            (_, Some(n)) => {
                if let Some(uid) = meta_str(n, "uid") {
                    inner.uids.insert(uid.to_string(), key.clone());
                }
            }
            (Some(o), None) => {
                if let Some(uid) = meta_str(o, "uid") {
                    inner.uids.remove(uid);
                }
            }
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simkube::store::fixtures::{cr, store, widgets};

    #[test]
    fn create_sets_system_metadata_and_drops_custom_resource_status() {
        let s = store();
        let o = s.create(&widgets(), "default", cr("a")).unwrap();
        assert_eq!(o["metadata"]["generation"], 1);
        assert!(o["metadata"]["uid"].is_string());
        assert!(o["metadata"]["creationTimestamp"].is_string());
        assert!(o.get("status").is_none());
        let err = s.create(&widgets(), "default", cr("a")).unwrap_err();
        assert_eq!(err.code(), 409);
        assert_eq!(err.reason(), "AlreadyExists");
    }

    #[test]
    fn generation_moves_only_with_spec_and_no_op_writes_keep_the_version() {
        let s = store();
        let o = s.create(&widgets(), "default", cr("a")).unwrap();
        let rv = o["metadata"]["resourceVersion"].clone();
        let same = s
            .patch(
                &widgets(),
                "default",
                "a",
                Patch::Merge(json!({"spec": {"size": 1}})),
                Target::Main,
            )
            .unwrap()
            .0;
        assert_eq!(same["metadata"]["resourceVersion"], rv);
        let o = s
            .patch(
                &widgets(),
                "default",
                "a",
                Patch::Merge(json!({"metadata": {"labels": {"b": "c"}}})),
                Target::Main,
            )
            .unwrap()
            .0;
        assert_eq!(o["metadata"]["generation"], 1);
        let o = s
            .patch(
                &widgets(),
                "default",
                "a",
                Patch::Merge(json!({"spec": {"size": 2}})),
                Target::Main,
            )
            .unwrap()
            .0;
        assert_eq!(o["metadata"]["generation"], 2);
        let o = s
            .patch_status(
                &widgets(),
                "default",
                "a",
                &json!({"status": {"ready": true}, "spec": {"size": 9}}),
            )
            .unwrap();
        assert_eq!(o["status"]["ready"], true);
        assert_eq!(o["spec"]["size"], 2);
        assert_eq!(o["metadata"]["generation"], 2);
    }

    #[test]
    fn stale_resource_version_is_a_conflict() {
        let s = store();
        let mut body = (*s.create(&widgets(), "default", cr("a")).unwrap()).clone();
        s.patch(
            &widgets(),
            "default",
            "a",
            Patch::Merge(json!({"spec": {"size": 3}})),
            Target::Main,
        )
        .unwrap();
        body["spec"]["size"] = json!(5);
        let err = s
            .replace(&widgets(), "default", "a", body, Target::Main)
            .unwrap_err();
        assert_eq!(err.code(), 409);
        assert_eq!(err.reason(), "Conflict");
    }
}
