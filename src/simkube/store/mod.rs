//! The object store behind the simulated API server: every object in memory, one global
//! resourceVersion counter, Kubernetes write semantics (metadata, `/status` subresource,
//! finalizers, ownerReference garbage collection), a bounded event history and a broadcast of
//! changes that watchers and the CAPI/CAPO simulator subscribe to.
//!
//! This module owns the `Store` itself, its indexes (`Inner`) and the reads; the vocabulary of
//! the API is in `types`, metadata rules in `meta`, create/update/patch in `write`, field sets
//! in `fields` and their ownership (`managedFields`, server-side apply) in `managed`, deletion
//! and garbage collection in `delete`, the event history and watches in `watch`.

mod delete;
mod fields;
mod managed;
mod meta;
mod types;
mod watch;
mod write;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value;
use tokio::sync::broadcast;

use super::selector::Selector;

pub use delete::FOREGROUND_FINALIZER;
pub use meta::{now_rfc3339, random_suffix};
pub use types::{
    Admission, FieldError, FieldManager, ObjectKey, Patch, Propagation, Resource, StoreError,
    StoreOptions, Target, Validator,
};
pub use watch::{Event, EventType, WatchStart, watch_line};

type NameMap = BTreeMap<(String, String), Arc<Value>>;

#[derive(Default)]
struct Inner {
    rv: u64,
    objects: HashMap<Resource, NameMap>,
    uids: HashMap<String, ObjectKey>,
    /// owner uid → objects whose ownerReferences name it.
    dependents: HashMap<String, HashSet<ObjectKey>>,
    /// resource → (apiVersion, kind) last written, for list and bookmark type fields.
    kinds: HashMap<Resource, (String, String)>,
    history: VecDeque<Arc<Event>>,
    /// resourceVersion of the newest event dropped from the history.
    floor: u64,
}

impl Inner {
    fn get(&self, key: &ObjectKey) -> Option<&Arc<Value>> {
        self.lookup(&key.resource, &key.namespace, &key.name)
    }

    /// A read without building an `ObjectKey` first (the hot path of `Store::get`).
    fn lookup(&self, res: &Resource, namespace: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects
            .get(res)?
            .get(&(namespace.to_string(), name.to_string()))
    }
}

/// The in-memory object store. Cheap to share (`Arc<Store>`); all methods are synchronous and
/// hold the lock only for the operation itself.
pub struct Store {
    inner: RwLock<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
    opts: StoreOptions,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource_version", &self.resource_version())
            .field("opts", &self.opts)
            .finish()
    }
}

impl Store {
    pub fn new(opts: StoreOptions) -> Self {
        let (tx, _) = broadcast::channel(opts.channel_capacity.max(16));
        let store = Store {
            inner: RwLock::new(Inner::default()),
            tx,
            opts,
        };
        for ns in ["default", "kube-system", "kube-public"] {
            // Cannot fail on an empty store without a validator; with one, a rejected
            // Namespace only means tests must create it themselves.
            let _ = store.ensure_namespace(ns);
        }
        store
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The current (newest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.read().rv
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.read().objects.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The apiVersion and kind last written for a resource.
    pub fn kind_of(&self, res: &Resource) -> Option<(String, String)> {
        self.read().kinds.get(res).cloned()
    }

    /// All API groups that have objects (for discovery).
    pub fn groups(&self) -> Vec<(String, String)> {
        let inner = self.read();
        let mut seen: Vec<(String, String)> = inner
            .kinds
            .iter()
            .filter(|(r, _)| !r.is_core())
            .map(|(r, (av, _))| (r.group.clone(), av.clone()))
            .collect();
        seen.sort();
        seen.dedup_by(|a, b| a.0 == b.0);
        seen
    }

    pub fn get(&self, res: &Resource, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.read().lookup(res, namespace, name).cloned()
    }

    /// Objects of a resource in one namespace (`Some`) or all (`None`), filtered by selectors;
    /// also returns the resourceVersion the list is consistent with.
    pub fn list_matching(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        labels: &Selector,
        fields: &Selector,
    ) -> (Vec<Arc<Value>>, u64) {
        let inner = self.read();
        let items = Self::scan(&inner, res, namespace)
            .filter(|o| labels.matches_labels(o) && fields.matches_fields(o))
            .cloned()
            .collect();
        (items, inner.rv)
    }

    /// Objects of a resource with a label selector string (test convenience).
    pub fn list(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Arc<Value>>, StoreError> {
        let sel = Selector::parse(label_selector).map_err(StoreError::BadRequest)?;
        Ok(self
            .list_matching(res, namespace, &sel, &Selector::default())
            .0)
    }

    fn scan<'a>(
        inner: &'a Inner,
        res: &Resource,
        namespace: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = &'a Arc<Value>> + 'a> {
        let Some(map) = inner.objects.get(res) else {
            return Box::new(std::iter::empty());
        };
        match namespace {
            None => Box::new(map.values()),
            Some(ns) => Box::new(
                map.range((ns.to_string(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns)
                    .map(|(_, v)| v),
            ),
        }
    }

    /// Objects whose ownerReferences name `uid`.
    pub fn dependents(&self, uid: &str) -> Vec<(ObjectKey, Arc<Value>)> {
        let inner = self.read();
        let mut out: Vec<(ObjectKey, Arc<Value>)> = inner
            .dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|k| inner.get(k).map(|o| (k.clone(), o.clone())))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// What the unit tests of the submodules share.
#[cfg(test)]
mod fixtures {
    use serde_json::{Value, json};

    use super::{Resource, Store, StoreOptions};

    pub(super) fn store() -> Store {
        Store::new(StoreOptions::default())
    }

    pub(super) fn cr(name: &str) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}},
               "spec": {"size": 1}, "status": {"ready": true}})
    }

    pub(super) fn widgets() -> Resource {
        Resource::new("example.com", "widgets")
    }
}
