//! The object store behind the simulated API server: every object in memory, one global
//! resourceVersion counter, Kubernetes write semantics (metadata, `/status` subresource,
//! finalizers, ownerReference garbage collection), a bounded event history and a broadcast of
//! changes that watchers and the CAPI/CAPO simulator subscribe to.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use chrono::SecondsFormat;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::objects::{add_finalizer, has_finalizer, remove_finalizer};
use super::selector::Selector;

/// Checks an object before it is stored; `Err` carries the messages of a 422 `Invalid` answer.
pub type Validator = Arc<dyn Fn(&Value) -> Result<(), Vec<String>> + Send + Sync>;

/// A kind of object as the store keys it: API group (`""` for core) and plural name. The
/// version is not part of the key: an object is served with the apiVersion it was written with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resource {
    pub group: String,
    pub plural: String,
}

impl Resource {
    pub fn new(group: impl Into<String>, plural: impl Into<String>) -> Self {
        Resource {
            group: group.into(),
            plural: plural.into(),
        }
    }

    /// A core (`/api/v1`) resource such as `secrets` or `namespaces`.
    pub fn core(plural: impl Into<String>) -> Self {
        Resource::new("", plural)
    }

    /// The resource of `apiVersion` + `kind`, pluralised as kube's `ApiResource::from_gvk` does.
    pub fn of(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        Resource::new(group, kube::api::ApiResource::from_gvk(&gvk).plural)
    }

    pub fn is_core(&self) -> bool {
        self.group.is_empty()
    }

    /// Custom resources (every non-core group here) have a `/status` subresource: writes to the
    /// main resource keep the stored status, writes to `/status` change only the status.
    pub fn has_status_subresource(&self) -> bool {
        !self.is_core()
    }

    /// `plural` or `plural.group`, as Kubernetes names a resource in error messages.
    pub fn qualified(&self) -> String {
        if self.is_core() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn is_namespace(&self) -> bool {
        self.is_core() && self.plural == "namespaces"
    }
}

/// Where one object lives: resource, namespace (`""` for cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub resource: Resource,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(resource: &Resource, namespace: &str, name: &str) -> Self {
        ObjectKey {
            resource: resource.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object; every change bumps the global resourceVersion by exactly one.
#[derive(Debug)]
pub struct Event {
    pub resource_version: u64,
    pub event_type: EventType,
    pub key: ObjectKey,
    pub object: Arc<Value>,
    /// The previous state, for `MODIFIED` (lets label-selected watches see objects enter and
    /// leave the selection).
    pub old: Option<Arc<Value>>,
    line: OnceLock<Bytes>,
}

impl Event {
    /// The newline-terminated watch-stream line, serialised once however many watchers send it.
    pub fn line(&self) -> Bytes {
        self.line
            .get_or_init(|| watch_line(self.event_type.as_str(), &self.object))
            .clone()
    }
}

/// `{"type":…,"object":…}\n` without copying the object into a new `Value`.
pub fn watch_line(event_type: &str, object: &Value) -> Bytes {
    let body = serde_json::to_string(object).unwrap_or_else(|_| "{}".to_string());
    Bytes::from(format!("{{\"type\":\"{event_type}\",\"object\":{body}}}\n"))
}

/// Why a store operation failed; each maps to a Kubernetes `Status` reason and HTTP code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Expired(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
}

impl StoreError {
    pub fn code(&self) -> u16 {
        match self {
            StoreError::NotFound(_) => 404,
            StoreError::AlreadyExists(_) | StoreError::Conflict(_) => 409,
            StoreError::Invalid(_) => 422,
            StoreError::BadRequest(_) => 400,
            StoreError::Expired(_) => 410,
            StoreError::MethodNotAllowed(_) => 405,
            StoreError::UnsupportedMediaType(_) => 415,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::NotFound(_) => "NotFound",
            StoreError::AlreadyExists(_) => "AlreadyExists",
            StoreError::Conflict(_) => "Conflict",
            StoreError::Invalid(_) => "Invalid",
            StoreError::BadRequest(_) => "BadRequest",
            StoreError::Expired(_) => "Expired",
            StoreError::MethodNotAllowed(_) => "MethodNotAllowed",
            StoreError::UnsupportedMediaType(_) => "UnsupportedMediaType",
        }
    }

    /// The Kubernetes `Status` object kube parses into `Error::Api`.
    pub fn status_body(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        })
    }
}

fn not_found(res: &Resource, name: &str) -> StoreError {
    StoreError::NotFound(format!("{} \"{name}\" not found", res.qualified()))
}

/// How a write changes an existing object.
#[derive(Debug, Clone)]
pub enum Patch {
    /// Server-side apply: create when absent, else JSON-merge the body (no field ownership).
    Apply(Value),
    /// RFC 7386 JSON merge patch (also used for strategic merge patch).
    Merge(Value),
    /// RFC 6902 JSON patch.
    Json(json_patch::Patch),
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The object; for custom resources the stored `status` is kept.
    Main,
    /// The `/status` subresource: only `status` changes.
    Status,
}

/// Tuning of the store.
#[derive(Clone)]
pub struct StoreOptions {
    pub validator: Option<Validator>,
    /// Events kept for watch resumption; older resourceVersions get `410 Expired`.
    pub history: usize,
    /// Capacity of the change broadcast; a watcher that falls further behind catches up from
    /// the history (or is told `410`), never slowing writers.
    pub channel_capacity: usize,
    /// Reject namespaced writes into a Namespace that does not exist (as kube-apiserver does).
    pub require_namespaces: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            validator: None,
            history: 10_000,
            channel_capacity: 16_384,
            require_namespaces: true,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("validator", &self.validator.is_some())
            .field("history", &self.history)
            .field("channel_capacity", &self.channel_capacity)
            .field("require_namespaces", &self.require_namespaces)
            .finish()
    }
}

/// What a watch starts from, taken atomically with its subscription.
#[derive(Debug)]
pub struct WatchStart {
    /// Current objects (watch without a resourceVersion): sent as synthetic `ADDED`.
    pub snapshot: Vec<Arc<Value>>,
    /// Events after the requested resourceVersion still in the history (all resources).
    pub replay: Vec<Arc<Event>>,
    pub receiver: broadcast::Receiver<Arc<Event>>,
    /// The store's resourceVersion when the watch started.
    pub resource_version: u64,
}

/// A removed object: where garbage collection and foreground deletion continue from.
struct Removed {
    key: ObjectKey,
    uid: String,
    owners: Vec<String>,
}

impl Removed {
    fn of(key: &ObjectKey, obj: &Value) -> Self {
        Removed {
            key: key.clone(),
            uid: meta_str(obj, "uid").unwrap_or_default().to_string(),
            owners: owner_uids(obj),
        }
    }
}

/// The finalizer a foreground deletion holds until the dependents are gone.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// What happens to an object's dependents when it is deleted (`propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Remove the object now, collect dependents afterwards.
    #[default]
    Background,
    /// Keep the object (`foregroundDeletion` finalizer) until its dependents are removed.
    Foreground,
    /// Remove the object and leave its dependents, minus the owner reference.
    Orphan,
}

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

/// RFC 3339 timestamp in seconds, as Kubernetes writes them.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// The object's `metadata` map, created when missing (`None` only for a non-object value).
fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = obj
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut()
}

fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if let Some(meta) = meta_mut(obj) {
        meta.insert(field.to_string(), value);
    }
}

fn require_object(obj: &Value) -> Result<(), StoreError> {
    if obj.is_object() {
        Ok(())
    } else {
        Err(StoreError::BadRequest(
            "the object must be a JSON object".into(),
        ))
    }
}

fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

/// What a delete writes on an object that has to wait for its finalizers.
fn mark_deleting(obj: &mut Value) {
    set_meta(obj, "deletionTimestamp", json!(now_rfc3339()));
    set_meta(obj, "deletionGracePeriodSeconds", json!(0));
}

fn has_finalizers(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn owner_uids(obj: &Value) -> Vec<String> {
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
fn strip_nulls(v: &mut Value) {
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
fn fold_string_data(res: &Resource, obj: &mut Value) {
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
fn spec_changed(old: &Value, new: &Value) -> bool {
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

    /// Subscribe to every future change (the simulator's feed).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
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

    /// Creates the Namespace if it does not exist.
    pub fn ensure_namespace(&self, name: &str) -> Result<Arc<Value>, StoreError> {
        let res = Resource::core("namespaces");
        let mut inner = self.write();
        if let Some(o) = inner.lookup(&res, "", name) {
            return Ok(o.clone());
        }
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        self.create_locked(&mut inner, &res, "", obj, false)
    }

    /// Creates an object (409 `AlreadyExists` when present). A custom resource's `status` in
    /// the body is dropped, as for a real `/status` subresource.
    pub fn create(
        &self,
        res: &Resource,
        namespace: &str,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.write();
        self.create_locked(&mut inner, res, namespace, obj, false)
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
            return self.create_locked(&mut inner, res, &ns, obj, true);
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
        let new = Self::finish_update(res, &old, body, target);
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
                    self.create_locked(&mut inner, res, namespace, body, false)
                        .map(|o| (o, true))
                }
                _ => Err(not_found(res, name)),
            };
        };
        let mut new = (*old).clone();
        match patch {
            Patch::Apply(body) | Patch::Merge(body) => {
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
        let new = Self::finish_update(res, &old, new, target);
        self.commit(&mut inner, key, Some(old), new)
            .map(|o| (o, false))
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
        let new = Self::finish_update(res, &old, new, target);
        self.commit(&mut inner, key, Some(old), new)
    }

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

    /// Starts a watch atomically: subscribes and takes either the current objects
    /// (`from = None`) or the history after `from` (410 `Expired` when it is gone).
    pub fn watch(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        from: Option<u64>,
        labels: &Selector,
        fields: &Selector,
    ) -> Result<WatchStart, StoreError> {
        let inner = self.read();
        let receiver = self.tx.subscribe();
        let (snapshot, replay) = match from {
            None => (
                Self::scan(&inner, res, namespace)
                    .filter(|o| labels.matches_labels(o) && fields.matches_fields(o))
                    .cloned()
                    .collect(),
                Vec::new(),
            ),
            Some(rv) => (Vec::new(), Self::history_after(&inner, rv)?),
        };
        Ok(WatchStart {
            snapshot,
            replay,
            receiver,
            resource_version: inner.rv,
        })
    }

    /// Events after `rv` (all resources), or 410 `Expired` when some were dropped.
    pub fn events_after(&self, rv: u64) -> Result<Vec<Arc<Event>>, StoreError> {
        Self::history_after(&self.read(), rv)
    }

    fn history_after(inner: &Inner, rv: u64) -> Result<Vec<Arc<Event>>, StoreError> {
        if rv < inner.floor {
            return Err(StoreError::Expired(format!(
                "too old resource version: {rv} ({})",
                inner.floor + 1
            )));
        }
        let start = inner.history.partition_point(|e| e.resource_version <= rv);
        Ok(inner.history.range(start..).cloned().collect())
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
        keep_status: bool,
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
            && !keep_status
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        if res.is_namespace() && obj.get("status").is_none() {
            obj["status"] = json!({"phase": "Active"});
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
        ] {
            match old_meta.get(f) {
                Some(v) => meta.insert(f.into(), v.clone()),
                None => meta.remove(f),
            };
        }
        meta.remove("managedFields");
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
    /// has no finalizers left.
    fn commit(
        &self,
        inner: &mut Inner,
        key: ObjectKey,
        old: Option<Arc<Value>>,
        mut new: Value,
    ) -> Result<Arc<Value>, StoreError> {
        if let Some(old) = &old
            && **old == new
        {
            return Ok(old.clone());
        }
        if let Some(validate) = &self.opts.validator {
            validate(&new).map_err(|errs| {
                let kind = new.get("kind").and_then(Value::as_str).unwrap_or_default();
                let what = if key.resource.is_core() {
                    kind.to_string()
                } else {
                    format!("{kind}.{}", key.resource.group)
                };
                StoreError::Invalid(format!(
                    "{what} \"{}\" is invalid: {}",
                    key.name,
                    errs.join("; ")
                ))
            })?;
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
        self.emit(inner, rv, event_type, key, new.clone(), old);
        Ok(new)
    }

    fn reindex(inner: &mut Inner, key: &ObjectKey, old: Option<&Value>, new: Option<&Value>) {
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

    fn remove_locked(&self, inner: &mut Inner, key: &ObjectKey, last: Arc<Value>, rv: u64) {
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
    fn cascade(&self, inner: &mut Inner, removed: Removed) {
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

    fn emit(
        &self,
        inner: &mut Inner,
        rv: u64,
        event_type: EventType,
        key: ObjectKey,
        obj: Arc<Value>,
        old: Option<Arc<Value>>,
    ) {
        let event = Arc::new(Event {
            resource_version: rv,
            event_type,
            key,
            object: obj,
            old,
            line: OnceLock::new(),
        });
        if self.opts.history > 0 {
            inner.history.push_back(event.clone());
            while inner.history.len() > self.opts.history {
                if let Some(e) = inner.history.pop_front() {
                    inner.floor = e.resource_version;
                }
            }
        } else {
            inner.floor = rv;
        }
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        Store::new(StoreOptions::default())
    }

    fn cr(name: &str) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}},
               "spec": {"size": 1}, "status": {"ready": true}})
    }

    fn widgets() -> Resource {
        Resource::new("example.com", "widgets")
    }

    #[test]
    fn plural_follows_kube_pluralisation() {
        assert_eq!(
            Resource::of("cluster.x-k8s.io/v1beta2", "MachineHealthCheck"),
            Resource::new("cluster.x-k8s.io", "machinehealthchecks")
        );
        assert_eq!(Resource::of("v1", "Secret"), Resource::core("secrets"));
    }

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

    fn owned_secret(name: &str, owner: &Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default",
            "finalizers": ["x/hold"],
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]}})
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

    #[test]
    fn history_is_bounded_and_old_versions_expire() {
        let s = Store::new(StoreOptions {
            history: 3,
            ..StoreOptions::default()
        });
        for i in 0..5 {
            s.create(&widgets(), "default", cr(&format!("w{i}")))
                .unwrap();
        }
        let rv = s.resource_version();
        assert_eq!(s.events_after(rv - 3).unwrap().len(), 3);
        assert_eq!(s.events_after(rv - 4).unwrap_err().code(), 410);
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
