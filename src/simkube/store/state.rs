//! The `Store` itself: every object in memory with its indexes (`Inner`: by resource and name,
//! by uid, by owner), the resourceVersion counter, the event history, and the reads.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value;
use tokio::sync::broadcast;

use super::event::Event;
use super::types::{ObjectKey, Resource, StoreError, StoreOptions};
use crate::simkube::selector::Selector;

pub(super) type NameMap = BTreeMap<(String, String), Arc<Value>>;

#[derive(Default)]
pub(super) struct Inner {
    pub(super) rv: u64,
    pub(super) objects: HashMap<Resource, NameMap>,
    pub(super) uids: HashMap<String, ObjectKey>,
    /// owner uid → objects whose ownerReferences name it.
    pub(super) dependents: HashMap<String, HashSet<ObjectKey>>,
    /// resource → (apiVersion, kind) last written, for list and bookmark type fields.
    pub(super) kinds: HashMap<Resource, (String, String)>,
    pub(super) history: VecDeque<Arc<Event>>,
    /// resourceVersion of the newest event dropped from the history.
    pub(super) floor: u64,
}

impl Inner {
    pub(super) fn get(&self, key: &ObjectKey) -> Option<&Arc<Value>> {
        self.lookup(&key.resource, &key.namespace, &key.name)
    }

    /// A read without building an `ObjectKey` first (the hot path of `Store::get`).
    pub(super) fn lookup(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
    ) -> Option<&Arc<Value>> {
        self.objects
            .get(res)?
            .get(&(namespace.to_string(), name.to_string()))
    }
}

/// The in-memory object store. Cheap to share (`Arc<Store>`); all methods are synchronous and
/// hold the lock only for the operation itself.
pub struct Store {
    pub(super) inner: RwLock<Inner>,
    pub(super) tx: broadcast::Sender<Arc<Event>>,
    pub(super) opts: StoreOptions,
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

    pub(super) fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Inner> {
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

    pub(super) fn scan<'a>(
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
