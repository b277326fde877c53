//! Deleting objects: finalizers hold an object (`deletionTimestamp`) until the last one goes;
//! removal garbage-collects dependents left without owners and a Namespace's contents;
//! foreground and orphan propagation; deletecollection.

use std::sync::Arc;

use serde_json::{Value, json};

use super::event::EventType;
use super::meta::{
    add_finalizer, has_finalizer, has_finalizers, is_deleting, mark_deleting, meta_str, owner_uids,
    remove_finalizer, set_meta,
};
use super::state::{Inner, Store};
use super::types::{ObjectKey, Propagation, Resource, StoreError, not_found};
use crate::simkube::selector::Selector;

/// A removed object: where garbage collection and foreground deletion continue from.
pub(super) struct Removed {
    key: ObjectKey,
    uid: String,
    owners: Vec<String>,
}

impl Removed {
    pub(super) fn of(key: &ObjectKey, obj: &Value) -> Self {
        Removed {
            key: key.clone(),
            uid: meta_str(obj, "uid").unwrap_or_default().to_string(),
            owners: owner_uids(obj),
        }
    }
}

/// The finalizer a foreground deletion holds until the dependents are gone.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

impl Store {
    /// Deletes an object in the background: with finalizers it gets `deletionTimestamp` and
    /// stays; without, it is removed and its dependents are garbage-collected. Returns the
    /// object's last state.
    pub fn delete(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        self.delete_with(res, namespace, name, Propagation::Background)
    }

    /// Deletes an object with a propagation policy.
    pub fn delete_with(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        propagation: Propagation,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.write();
        let key = ObjectKey::new(res, namespace, name);
        let old = inner
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(res, name))?;
        let uid = meta_str(&old, "uid").unwrap_or_default().to_string();
        let has_dependents = inner.dependents.get(&uid).is_some_and(|d| !d.is_empty());
        if propagation == Propagation::Foreground && has_dependents && !is_deleting(&old) {
            let mut new = (*old).clone();
            mark_deleting(&mut new);
            add_finalizer(&mut new, FOREGROUND_FINALIZER);
            let marked = self.commit(&mut inner, key.clone(), Some(old), new)?;
            let mut dependents: Vec<ObjectKey> = inner
                .dependents
                .get(&uid)
                .map(|d| d.iter().cloned().collect())
                .unwrap_or_default();
            dependents.sort();
            for dep in dependents {
                if let Ok((_, Some(removed))) = self.delete_one(&mut inner, &dep) {
                    self.cascade(&mut inner, removed);
                }
            }
            self.finish_foreground(&mut inner, &uid);
            return Ok(inner.get(&key).cloned().unwrap_or(marked));
        }
        let (obj, removed) = self.delete_one(&mut inner, &key)?;
        match (removed, propagation) {
            (Some(removed), Propagation::Orphan) => {
                self.orphan(&mut inner, &removed.uid);
                for owner in &removed.owners {
                    self.finish_foreground(&mut inner, owner);
                }
            }
            (Some(removed), _) => self.cascade(&mut inner, removed),
            (None, _) => {}
        }
        Ok(obj)
    }

    /// Deletes every object matching the selectors (deletecollection).
    pub fn delete_collection(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        labels: &Selector,
        fields: &Selector,
    ) -> Vec<Arc<Value>> {
        let mut inner = self.write();
        let keys: Vec<ObjectKey> = Self::scan(&inner, res, namespace)
            .filter(|o| labels.matches_labels(o) && fields.matches_fields(o))
            .map(|o| {
                ObjectKey::new(
                    res,
                    meta_str(o, "namespace").unwrap_or_default(),
                    meta_str(o, "name").unwrap_or_default(),
                )
            })
            .collect();
        let mut out = Vec::new();
        for key in keys {
            if let Ok((obj, removed)) = self.delete_one(&mut inner, &key) {
                out.push(obj);
                if let Some(removed) = removed {
                    self.cascade(&mut inner, removed);
                }
            }
        }
        out
    }

    pub(super) fn remove_locked(
        &self,
        inner: &mut Inner,
        key: &ObjectKey,
        last: Arc<Value>,
        rv: u64,
    ) {
        let stored = inner
            .objects
            .get_mut(&key.resource)
            .and_then(|m| m.remove(&(key.namespace.clone(), key.name.clone())));
        Self::reindex(inner, key, Some(stored.as_deref().unwrap_or(&last)), None);
        self.emit(inner, rv, EventType::Deleted, key.clone(), last, None);
    }

    /// Marks or removes one object; returns its last state and, when removed, its key and uid.
    fn delete_one(
        &self,
        inner: &mut Inner,
        key: &ObjectKey,
    ) -> Result<(Arc<Value>, Option<Removed>), StoreError> {
        let old = inner
            .get(key)
            .cloned()
            .ok_or_else(|| not_found(&key.resource, &key.name))?;
        if is_deleting(&old) {
            return Ok((old, None));
        }
        if has_finalizers(&old) {
            let mut new = (*old).clone();
            mark_deleting(&mut new);
            return Ok((self.commit(inner, key.clone(), Some(old), new)?, None));
        }
        inner.rv += 1;
        let rv = inner.rv;
        let mut last = (*old).clone();
        set_meta(&mut last, "resourceVersion", json!(rv.to_string()));
        let last = Arc::new(last);
        self.remove_locked(inner, key, last.clone(), rv);
        let removed = Removed::of(key, &last);
        Ok((last, Some(removed)))
    }

    /// Garbage collection after a removal: dependents with no remaining owner are deleted
    /// (recursively, by a work list), a removed Namespace takes its contents with it, and an
    /// owner waiting in foreground deletion is released once its last dependent is gone.
    pub(super) fn cascade(&self, inner: &mut Inner, removed: Removed) {
        let mut work = vec![removed];
        while let Some(Removed { key, uid, owners }) = work.pop() {
            for owner in &owners {
                self.finish_foreground(inner, owner);
            }
            let mut victims: Vec<ObjectKey> = inner
                .dependents
                .remove(&uid)
                .map(|s| s.into_iter().collect())
                .unwrap_or_default();
            victims.retain(|k| {
                inner
                    .get(k)
                    .is_some_and(|o| !owner_uids(o).iter().any(|u| inner.uids.contains_key(u)))
            });
            if key.resource.is_namespace() {
                let ns = key.name.clone();
                for (res, map) in &inner.objects {
                    victims.extend(
                        map.range((ns.clone(), String::new())..)
                            .take_while(|((n, _), _)| *n == ns)
                            .map(|((n, name), _)| ObjectKey::new(res, n, name)),
                    );
                }
            }
            victims.sort();
            victims.dedup();
            for victim in victims {
                if let Ok((_, Some(next))) = self.delete_one(inner, &victim) {
                    work.push(next);
                }
            }
        }
    }

    /// Garbage collection of an object just written none of whose owners keeps it, as kube's
    /// garbage collector does when it sees the new dependent: an owner keeps it unless it is
    /// gone or being deleted in the foreground (whose dependents all go, even ones added after
    /// it started). A controller that read its owner before the owner's deletion (the
    /// MachineDeployment controller replacing the Machines the driver's foreground delete just
    /// marked) writes a dependent the deletion has already passed: without this it stays,
    /// and a foreground-deleting owner waits for it, forever.
    pub(super) fn collect_if_orphaned(&self, inner: &mut Inner, key: &ObjectKey) {
        let orphaned = inner.get(key).is_some_and(|o| {
            let owners = owner_uids(o);
            let keeps = |uid: &String| {
                inner
                    .uids
                    .get(uid)
                    .and_then(|k| inner.get(k))
                    .is_some_and(|owner| {
                        !(is_deleting(owner) && has_finalizer(owner, FOREGROUND_FINALIZER))
                    })
            };
            !owners.is_empty() && !owners.iter().any(keeps)
        });
        if orphaned && let Ok((_, Some(removed))) = self.delete_one(inner, key) {
            self.cascade(inner, removed);
        }
    }

    /// Drops the `foregroundDeletion` finalizer of a deleting owner without dependents.
    fn finish_foreground(&self, inner: &mut Inner, owner_uid: &str) {
        if inner
            .dependents
            .get(owner_uid)
            .is_some_and(|d| !d.is_empty())
        {
            return;
        }
        let Some(key) = inner.uids.get(owner_uid).cloned() else {
            return;
        };
        let Some(owner) = inner.get(&key).cloned() else {
            return;
        };
        if !is_deleting(&owner) || !has_finalizer(&owner, FOREGROUND_FINALIZER) {
            return;
        }
        let mut new = (*owner).clone();
        remove_finalizer(&mut new, FOREGROUND_FINALIZER);
        if let Err(e) = self.commit(inner, key, Some(owner), new) {
            tracing::warn!(error = %e, "releasing a foreground deletion failed");
        }
    }

    /// Orphan propagation: the dependents lose their reference to the removed owner.
    fn orphan(&self, inner: &mut Inner, owner_uid: &str) {
        let dependents: Vec<ObjectKey> = inner
            .dependents
            .remove(owner_uid)
            .map(|d| d.into_iter().collect())
            .unwrap_or_default();
        for dep in dependents {
            let Some(old) = inner.get(&dep).cloned() else {
                continue;
            };
            let mut new = (*old).clone();
            if let Some(Value::Array(refs)) = new
                .get_mut("metadata")
                .and_then(|m| m.get_mut("ownerReferences"))
            {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
            }
            if let Err(e) = self.commit(inner, dep, Some(old), new) {
                tracing::warn!(error = %e, "orphaning a dependent failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simkube::store::fixtures::{cr, store, widgets};
    use crate::simkube::store::{Patch, Target};

    fn owned_secret(name: &str, owner: &Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default",
            "finalizers": ["x/hold"],
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]}})
    }

    #[test]
    fn finalizers_delay_removal_until_the_last_one_goes() {
        let s = store();
        let mut o = cr("a");
        o["metadata"]["finalizers"] = json!(["x/y"]);
        s.create(&widgets(), "default", o).unwrap();
        let d = s.delete(&widgets(), "default", "a").unwrap();
        assert!(d["metadata"]["deletionTimestamp"].is_string());
        assert!(s.get(&widgets(), "default", "a").is_some());
        s.patch(
            &widgets(),
            "default",
            "a",
            Patch::Merge(json!({"metadata": {"finalizers": null}})),
            Target::Main,
        )
        .unwrap();
        assert!(s.get(&widgets(), "default", "a").is_none());
    }

    #[test]
    fn removing_an_owner_collects_its_dependents_recursively() {
        let s = store();
        let owner = s.create(&widgets(), "default", cr("owner")).unwrap();
        let mut child = cr("child");
        child["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1", "kind": "Widget", "name": "owner", "uid": owner["metadata"]["uid"]}]);
        let child = s.create(&widgets(), "default", child).unwrap();
        let mut grandchild = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gc", "namespace": "default"}});
        grandchild["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1", "kind": "Widget", "name": "child", "uid": child["metadata"]["uid"]}]);
        s.create(&Resource::core("secrets"), "default", grandchild)
            .unwrap();
        s.delete(&widgets(), "default", "owner").unwrap();
        assert!(s.get(&widgets(), "default", "child").is_none());
        assert!(s.get(&Resource::core("secrets"), "default", "gc").is_none());
    }

    #[test]
    fn a_dependent_written_after_its_owner_was_removed_is_collected() {
        // A controller that read its owner before the owner's deletion (the simulated
        // MachineDeployment scaling up while the driver deletes it) creates its Machine after
        // the cascade: the garbage collector must still take it, or it stays forever.
        let s = store();
        let secrets = Resource::core("secrets");
        let owner = s.create(&widgets(), "default", cr("owner")).unwrap();
        s.delete(&widgets(), "default", "owner").unwrap();
        let mut plain = owned_secret("plain", &owner);
        plain["metadata"]["finalizers"] = json!([]);
        s.create(&secrets, "default", plain).unwrap();
        assert!(s.get(&secrets, "default", "plain").is_none());
        // With a finalizer it is marked for deletion, for its controller to let go.
        s.create(&secrets, "default", owned_secret("held", &owner))
            .unwrap();
        let held = s.get(&secrets, "default", "held").unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        // One owner left is enough to keep it.
        let other = s.create(&widgets(), "default", cr("other")).unwrap();
        let mut kept = owned_secret("kept", &owner);
        kept["metadata"]["finalizers"] = json!([]);
        kept["metadata"]["ownerReferences"]
            .as_array_mut()
            .unwrap()
            .push(
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "name": "other",
                         "uid": other["metadata"]["uid"]}),
            );
        s.create(&secrets, "default", kept).unwrap();
        let kept = s.get(&secrets, "default", "kept").unwrap();
        assert!(kept["metadata"].get("deletionTimestamp").is_none());
    }

    #[test]
    fn a_dependent_written_during_its_owners_foreground_deletion_goes_too() {
        // The driver deletes a MachineDeployment in the foreground; its controller, which read
        // it just before, replaces the Machines that deletion marked. The new one must go as
        // well, and the owner with it once its dependents are gone.
        let s = store();
        let secrets = Resource::core("secrets");
        let owner = s.create(&widgets(), "default", cr("owner")).unwrap();
        s.create(&secrets, "default", owned_secret("old", &owner))
            .unwrap();
        s.delete_with(&widgets(), "default", "owner", Propagation::Foreground)
            .unwrap();
        s.create(&secrets, "default", owned_secret("new", &owner))
            .unwrap();
        let new = s.get(&secrets, "default", "new").unwrap();
        assert!(new["metadata"]["deletionTimestamp"].is_string(), "{new}");
        for name in ["old", "new"] {
            s.patch(
                &secrets,
                "default",
                name,
                Patch::Merge(json!({"metadata": {"finalizers": null}})),
                Target::Main,
            )
            .unwrap();
        }
        assert!(s.get(&widgets(), "default", "owner").is_none());
    }

    #[test]
    fn foreground_deletion_keeps_the_owner_until_its_dependents_are_gone() {
        let s = store();
        let secrets = Resource::core("secrets");
        let owner = s.create(&widgets(), "default", cr("owner")).unwrap();
        s.create(&secrets, "default", owned_secret("dep", &owner))
            .unwrap();
        let marked = s
            .delete_with(&widgets(), "default", "owner", Propagation::Foreground)
            .unwrap();
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(
            marked["metadata"]["finalizers"],
            json!([FOREGROUND_FINALIZER])
        );
        let dep = s.get(&secrets, "default", "dep").unwrap();
        assert!(dep["metadata"]["deletionTimestamp"].is_string());
        s.patch(
            &secrets,
            "default",
            "dep",
            Patch::Merge(json!({"metadata": {"finalizers": null}})),
            Target::Main,
        )
        .unwrap();
        assert!(s.get(&secrets, "default", "dep").is_none());
        assert!(s.get(&widgets(), "default", "owner").is_none());
    }

    #[test]
    fn orphan_deletion_leaves_dependents_without_the_owner_reference() {
        let s = store();
        let secrets = Resource::core("secrets");
        let owner = s.create(&widgets(), "default", cr("owner")).unwrap();
        s.create(&secrets, "default", owned_secret("dep", &owner))
            .unwrap();
        s.delete_with(&widgets(), "default", "owner", Propagation::Orphan)
            .unwrap();
        assert!(s.get(&widgets(), "default", "owner").is_none());
        let dep = s.get(&secrets, "default", "dep").unwrap();
        assert!(dep["metadata"].get("deletionTimestamp").is_none());
        assert_eq!(dep["metadata"]["ownerReferences"], json!([]));
    }

    #[test]
    fn namespaces_must_exist_and_take_their_contents_along() {
        let s = store();
        let mut o = cr("a");
        o["metadata"]["namespace"] = json!("proj");
        assert_eq!(
            s.create(&widgets(), "proj", o.clone()).unwrap_err().code(),
            404
        );
        s.ensure_namespace("proj").unwrap();
        s.create(&widgets(), "proj", o).unwrap();
        s.delete(&Resource::core("namespaces"), "", "proj").unwrap();
        assert!(s.get(&widgets(), "proj", "a").is_none());
    }
}
