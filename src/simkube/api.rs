//! The HTTP surface of the simulated management cluster: an axum router speaking enough of the
//! Kubernetes REST API (paths, verbs, patch types, watch streams, `Status` errors, minimal
//! discovery, server-side printing for kubectl) for kube-rs clients and kubectl, translating
//! every request into one `Store` call. Requests under `/workload/{namespace}/{cluster}` go,
//! with the same handlers, to that simulated workload cluster's store, as does every request to
//! a workload cluster's own endpoint (`Scope::Workload`, see `endpoint`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::access::{self, Denials};
use super::requests::{RequestKey, Requests, Verb};
use super::selector::Selector;
use super::store::{
    Event, EventType, FieldManager, Patch, Propagation, Resource, Store, StoreError, Target,
    watch_line,
};
use super::table;
use super::workload::{self, Workloads};

/// Largest request body accepted.
const MAX_BODY: usize = 64 << 20;
/// Watch duration when the client sends no `timeoutSeconds` (kube-apiserver's minimum).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// What the router shares between requests.
#[derive(Clone)]
pub(crate) struct ApiState {
    pub store: Arc<Store>,
    /// The simulated workload clusters, served under `/workload/{namespace}/{cluster}`.
    pub workloads: Arc<Workloads>,
    /// Which API this router serves.
    pub scope: Scope,
    pub shutdown: watch::Receiver<bool>,
    pub bookmark_interval: Duration,
    /// While false, every request is answered 503 (an outage of the API server, for tests).
    pub available: Arc<std::sync::atomic::AtomicBool>,
    /// What `SelfSubjectAccessReview`s answer denied.
    pub denials: Arc<Denials>,
    /// Every request the management cluster's own API answers, by verb and resource
    /// (`SimCluster::requests`); `None` on a workload cluster's endpoint, which counts nothing.
    pub requests: Option<Arc<Requests>>,
}

/// The management cluster's API (`store`, plus the workload clusters under `/workload/…`), or
/// one workload cluster's API at its own endpoint.
#[derive(Clone, Debug)]
pub(crate) enum Scope {
    Management,
    Workload { namespace: String, cluster: String },
}

pub(crate) fn router(state: ApiState) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// A request path resolved to a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ResourcePath {
    resource: Resource,
    /// `v1` or `group/version`, used for list and bookmark type fields.
    api_version: String,
    /// `None` for cluster-scoped or all-namespaces paths.
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    ApiVersions,
    ApiGroups,
    Version,
    Health,
    ResourceList(String),
    Object(ResourcePath),
}

fn parse_route(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, api_version, rest) = match segs.as_slice() {
        ["api"] => return Some(Route::ApiVersions),
        ["apis"] => return Some(Route::ApiGroups),
        ["version"] => return Some(Route::Version),
        ["healthz" | "readyz" | "livez"] => return Some(Route::Health),
        ["api", v] => return Some(Route::ResourceList((*v).to_string())),
        ["apis", g, v] => return Some(Route::ResourceList(format!("{g}/{v}"))),
        ["api", v, rest @ ..] => ("", (*v).to_string(), rest),
        ["apis", g, v, rest @ ..] => (*g, format!("{g}/{v}"), rest),
        _ => return None,
    };
    let object =
        |plural: &str, namespace: Option<&str>, name: Option<&&str>, sub: Option<&&str>| {
            Route::Object(ResourcePath {
                resource: Resource::new(group, plural),
                api_version: api_version.clone(),
                namespace: namespace.map(str::to_string),
                name: name.map(|s| (*s).to_string()),
                subresource: sub.map(|s| (*s).to_string()),
            })
        };
    Some(match rest {
        ["namespaces", ns, plural, more @ ..]
            if !(more.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            if more.len() > 2 {
                return None;
            }
            object(plural, Some(ns), more.first(), more.get(1))
        }
        [plural, more @ ..] if more.len() <= 2 => object(plural, None, more.first(), more.get(1)),
        _ => return None,
    })
}

fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn error_response(err: &StoreError) -> Response {
    let code = StatusCode::from_u16(err.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &err.status_body())
}

fn kind_for(store: &Store, res: &Resource) -> String {
    if let Some((_, kind)) = store.kind_of(res) {
        return kind;
    }
    let known = match res.plural.as_str() {
        "namespaces" => "Namespace",
        "secrets" => "Secret",
        "configmaps" => "ConfigMap",
        "services" => "Service",
        "serviceaccounts" => "ServiceAccount",
        "pods" => "Pod",
        "nodes" => "Node",
        "persistentvolumes" => "PersistentVolume",
        "events" => "Event",
        "clusters" => "Cluster",
        "machines" => "Machine",
        "machinesets" => "MachineSet",
        "machinedeployments" => "MachineDeployment",
        "machinehealthchecks" => "MachineHealthCheck",
        "kubeadmcontrolplanes" => "KubeadmControlPlane",
        "kubeadmconfigs" => "KubeadmConfig",
        "kubeadmconfigtemplates" => "KubeadmConfigTemplate",
        "openstackclusters" => "OpenStackCluster",
        "openstackmachines" => "OpenStackMachine",
        "openstackmachinetemplates" => "OpenStackMachineTemplate",
        "openstackservers" => "OpenStackServer",
        other => {
            let singular = other.strip_suffix('s').unwrap_or(other);
            let mut chars = singular.chars();
            return chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default();
        }
    };
    known.to_string()
}

/// A list body written item by item (no copy of the stored objects into a new `Value`).
fn list_response(api_version: &str, kind: &str, rv: u64, items: &[Arc<Value>]) -> Response {
    let mut buf = Vec::with_capacity(256 + items.len() * 1024);
    buf.extend_from_slice(
        format!(
            "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"items\":[",
            json!(api_version),
            json!(format!("{kind}List"))
        )
        .as_bytes(),
    );
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        if serde_json::to_writer(&mut buf, &**item).is_err() {
            buf.extend_from_slice(b"{}");
        }
    }
    buf.extend_from_slice(b"]}");
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        buf,
    )
        .into_response()
}

fn parse_body(bytes: &Bytes, allow_yaml: bool) -> Result<Value, StoreError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => Ok(v),
        Err(e) if allow_yaml => yaml_serde::from_slice::<Value>(bytes).map_err(|y| {
            StoreError::BadRequest(format!("body is neither JSON ({e}) nor YAML ({y})"))
        }),
        Err(e) => Err(StoreError::BadRequest(format!("invalid JSON body: {e}"))),
    }
}

fn selectors(q: &HashMap<String, String>) -> Result<(Selector, Selector), StoreError> {
    let labels = Selector::parse(
        q.get("labelSelector")
            .map(String::as_str)
            .unwrap_or_default(),
    )
    .map_err(StoreError::BadRequest)?;
    let fields = Selector::parse(
        q.get("fieldSelector")
            .map(String::as_str)
            .unwrap_or_default(),
    )
    .map_err(StoreError::BadRequest)?;
    Ok((labels, fields))
}

/// `propagationPolicy` from the DeleteOptions body or the query (default Background).
fn propagation(q: &HashMap<String, String>, bytes: &Bytes) -> Propagation {
    let body: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let policy = body
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .or_else(|| q.get("propagationPolicy").map(String::as_str));
    match policy {
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        _ if body.get("orphanDependents") == Some(&Value::Bool(true)) => Propagation::Orphan,
        _ => Propagation::Background,
    }
}

/// The field manager of a write: `fieldManager`, else (not for apply, which requires it) the
/// client's User-Agent up to its first `/`, as kube-apiserver derives it.
fn field_manager(
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    apply: bool,
) -> Result<FieldManager, StoreError> {
    let force = q.get("force").is_some_and(|f| f == "true");
    if force && !apply {
        return Err(StoreError::BadRequest(
            "force may not be set for non-apply patch requests".into(),
        ));
    }
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return Ok(FieldManager::new(m.clone(), force));
    }
    if apply {
        return Err(StoreError::BadRequest(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is \
             required for apply patch"
                .into(),
        ));
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|ua| !ua.is_empty())
        .unwrap_or("unknown");
    Ok(FieldManager::new(agent, false))
}

fn target_of(path: &ResourcePath) -> Result<Target, StoreError> {
    match path.subresource.as_deref() {
        None | Some("finalize") => Ok(Target::Main),
        Some("status") => Ok(Target::Status),
        Some(other) => Err(StoreError::NotFound(format!(
            "the server could not find the requested resource ({} {other})",
            path.resource.qualified()
        ))),
    }
}

async fn handle(State(st): State<ApiState>, req: Request) -> Response {
    if !st.available.load(std::sync::atomic::Ordering::Relaxed) {
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "the server is currently unable to handle the request",
                    "reason": "ServiceUnavailable", "code": 503}),
        );
    }
    let (parts, body) = req.into_parts();
    let query = parse_query(parts.uri.query());
    let scoped = match &st.scope {
        Scope::Management => workload::split_path(parts.uri.path()),
        Scope::Workload { namespace, cluster } => {
            Some((namespace.as_str(), cluster.as_str(), parts.uri.path()))
        }
    };
    let workload = scoped.is_some();
    let (st, path) = match scoped {
        None => (st.clone(), parts.uri.path()),
        Some((ns, cluster, rest)) => match st.workloads.get(ns, cluster) {
            Some(store) => (
                ApiState {
                    store,
                    ..st.clone()
                },
                rest,
            ),
            None => {
                return error_response(&StoreError::NotFound(format!(
                    "workload cluster {ns}/{cluster} does not exist"
                )));
            }
        },
    };
    let Some(route) = parse_route(path) else {
        return error_response(&StoreError::NotFound(format!(
            "the server could not find the requested resource ({})",
            parts.uri.path()
        )));
    };
    // A workload cluster's API is another API server (here only simulated beside the
    // management cluster's): what it is asked costs the management cluster nothing.
    if let (false, Some(requests)) = (workload, &st.requests) {
        requests.count(request_key(&route, &parts.method, &parts.headers, &query));
    }
    let path = match route {
        Route::ApiVersions => {
            return json_response(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            );
        }
        Route::ApiGroups => return json_response(StatusCode::OK, &api_groups(&st.store)),
        Route::Version => {
            let recorded = workload
                .then(|| workload::kubernetes_version(&st.store))
                .flatten();
            return json_response(StatusCode::OK, &version(recorded.as_deref()));
        }
        Route::Health => return (StatusCode::OK, "ok").into_response(),
        Route::ResourceList(gv) => {
            return json_response(StatusCode::OK, &resource_list(&gv));
        }
        Route::Object(p) => p,
    };
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => return error_response(&StoreError::BadRequest(format!("reading body: {e}"))),
    };
    if path.resource == Resource::new("authorization.k8s.io", "selfsubjectaccessreviews") {
        if parts.method != Method::POST {
            return error_response(&StoreError::MethodNotAllowed(
                "selfsubjectaccessreviews can only be created".into(),
            ));
        }
        return match parse_body(&bytes, false).and_then(|b| access::review(&st.denials, &b)) {
            Ok(answer) => json_response(StatusCode::CREATED, &answer),
            Err(e) => error_response(&e),
        };
    }
    match dispatch(&st, &parts.method, &parts.headers, path, &query, &bytes) {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

/// How `SimCluster::requests` files a request.
fn request_key(
    route: &Route,
    method: &Method,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
) -> RequestKey {
    let Route::Object(path) = route else {
        let resource = match route {
            Route::ApiVersions => "/api".to_string(),
            Route::ApiGroups => "/apis".to_string(),
            Route::Version => "/version".to_string(),
            Route::Health => "/healthz".to_string(),
            Route::ResourceList(gv) => format!("/apis/{gv}"),
            Route::Object(_) => String::new(),
        };
        return RequestKey {
            verb: Verb::Discovery,
            resource,
        };
    };
    let named = path.name.is_some();
    let verb = match method.as_str() {
        "GET" if named => Verb::Get,
        "GET" if q.get("watch").is_some_and(|w| w == "true" || w == "1") => Verb::Watch,
        "GET" => Verb::List,
        "POST" => Verb::Create,
        "PUT" => Verb::Update,
        "PATCH"
            if headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("application/apply-patch")) =>
        {
            Verb::Apply
        }
        "PATCH" => Verb::Patch,
        "DELETE" if named => Verb::Delete,
        _ => Verb::DeleteCollection,
    };
    let mut resource = path.resource.qualified();
    if let Some(sub) = &path.subresource {
        resource = format!("{resource}/{sub}");
    }
    RequestKey { verb, resource }
}

fn dispatch(
    st: &ApiState,
    method: &Method,
    headers: &HeaderMap,
    path: ResourcePath,
    q: &HashMap<String, String>,
    bytes: &Bytes,
) -> Result<Response, StoreError> {
    let store = &st.store;
    let ns = path.namespace.clone().unwrap_or_default();
    let is_watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    match (method.as_str(), path.name.clone()) {
        ("GET", None) if is_watch => start_watch(st, path, q),
        ("GET", None) => {
            let (labels, fields) = selectors(q)?;
            let (items, rv) =
                store.list_matching(&path.resource, path.namespace.as_deref(), &labels, &fields);
            let kind = kind_for(store, &path.resource);
            if table::wanted(headers) {
                return Ok(json_response(
                    StatusCode::OK,
                    &table::render(&kind, &items, rv),
                ));
            }
            Ok(list_response(&path.api_version, &kind, rv, &items))
        }
        ("GET", Some(name)) => {
            target_of(&path)?;
            match store.get(&path.resource, &ns, &name) {
                Some(o) if table::wanted(headers) && path.subresource.is_none() => {
                    let kind = kind_for(store, &path.resource);
                    let rv = store.resource_version();
                    Ok(json_response(
                        StatusCode::OK,
                        &table::render(&kind, &[o], rv),
                    ))
                }
                Some(o) => Ok(json_response(StatusCode::OK, &o)),
                None => Err(StoreError::NotFound(format!(
                    "{} \"{name}\" not found",
                    path.resource.qualified()
                ))),
            }
        }
        ("POST", None) => {
            let body = parse_body(bytes, true)?;
            let ns = match path.namespace {
                Some(ns) => ns,
                None => body
                    .get("metadata")
                    .and_then(|m| m.get("namespace"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            };
            let manager = field_manager(q, headers, false)?;
            let o = store.create_as(&path.resource, &ns, body, &manager)?;
            Ok(json_response(StatusCode::CREATED, &o))
        }
        ("PUT", Some(name)) => {
            let target = target_of(&path)?;
            let body = parse_body(bytes, true)?;
            let manager = field_manager(q, headers, false)?;
            let o = store.replace_as(&path.resource, &ns, &name, body, target, &manager)?;
            Ok(json_response(StatusCode::OK, &o))
        }
        ("PATCH", Some(name)) => {
            let target = target_of(&path)?;
            let ctype = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let patch = if ctype.starts_with("application/apply-patch") {
                Patch::Apply(parse_body(bytes, true)?)
            } else if ctype.starts_with("application/json-patch+json") {
                let p: json_patch::Patch = serde_json::from_slice(bytes)
                    .map_err(|e| StoreError::BadRequest(format!("invalid JSON patch: {e}")))?;
                Patch::Json(p)
            } else if ctype.starts_with("application/merge-patch+json")
                || ctype.starts_with("application/strategic-merge-patch+json")
            {
                Patch::Merge(parse_body(bytes, false)?)
            } else {
                return Err(StoreError::UnsupportedMediaType(format!(
                    "the body of the request was in an unknown format - accepted media types \
                     include: application/json-patch+json, application/merge-patch+json, \
                     application/apply-patch+yaml (got {ctype:?})"
                )));
            };
            let manager = field_manager(q, headers, matches!(patch, Patch::Apply(_)))?;
            let (o, created) =
                store.patch_as(&path.resource, &ns, &name, patch, target, &manager)?;
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(json_response(code, &o))
        }
        ("DELETE", Some(name)) => {
            let o = store.delete_with(&path.resource, &ns, &name, propagation(q, bytes))?;
            Ok(json_response(StatusCode::OK, &o))
        }
        ("DELETE", None) => {
            let (labels, fields) = selectors(q)?;
            let items = store.delete_collection(
                &path.resource,
                path.namespace.as_deref(),
                &labels,
                &fields,
            );
            let kind = kind_for(store, &path.resource);
            Ok(list_response(
                &path.api_version,
                &kind,
                store.resource_version(),
                &items,
            ))
        }
        (m, _) => Err(StoreError::MethodNotAllowed(format!(
            "the server does not allow this method on the requested resource ({m})"
        ))),
    }
}

fn api_groups(store: &Store) -> Value {
    let groups: Vec<Value> = store
        .groups()
        .into_iter()
        .map(|(name, api_version)| {
            let version = api_version
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            json!({
                "name": name,
                "versions": [{"groupVersion": api_version, "version": version}],
                "preferredVersion": {"groupVersion": api_version, "version": version},
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The core (`v1`) resources the store serves in discovery: (plural, kind, namespaced, short
/// names).
const CORE_RESOURCES: [(&str, &str, bool, &[&str]); 9] = [
    ("configmaps", "ConfigMap", true, &["cm"]),
    ("events", "Event", true, &["ev"]),
    ("namespaces", "Namespace", false, &["ns"]),
    ("nodes", "Node", false, &["no"]),
    ("persistentvolumes", "PersistentVolume", false, &["pv"]),
    ("pods", "Pod", true, &["po"]),
    ("secrets", "Secret", true, &[]),
    ("serviceaccounts", "ServiceAccount", true, &["sa"]),
    ("services", "Service", true, &["svc"]),
];

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The custom resources a management cluster with CAPI v1.14, CAPO v0.14 and CAAPH v0.6
/// installed serves, as the simulator plays it: (apiVersion, kind, plural). The simulator's own
/// list, not the driver's: the driver's readiness check is tested against it.
const INSTALLED_CRDS: [(&str, &str, &str); 13] = [
    ("cluster.x-k8s.io/v1beta2", "Cluster", "clusters"),
    (
        "cluster.x-k8s.io/v1beta2",
        "MachineDeployment",
        "machinedeployments",
    ),
    ("cluster.x-k8s.io/v1beta2", "MachineSet", "machinesets"),
    ("cluster.x-k8s.io/v1beta2", "Machine", "machines"),
    (
        "cluster.x-k8s.io/v1beta2",
        "MachineHealthCheck",
        "machinehealthchecks",
    ),
    (
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    ),
    (
        "bootstrap.cluster.x-k8s.io/v1beta2",
        "KubeadmConfigTemplate",
        "kubeadmconfigtemplates",
    ),
    (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackCluster",
        "openstackclusters",
    ),
    (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachineTemplate",
        "openstackmachinetemplates",
    ),
    (
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "OpenStackServer",
        "openstackservers",
    ),
    (
        "addons.cluster.x-k8s.io/v1alpha1",
        "HelmChartProxy",
        "helmchartproxies",
    ),
    (
        "addons.cluster.x-k8s.io/v1beta2",
        "ClusterResourceSet",
        "clusterresourcesets",
    ),
    (
        "addons.cluster.x-k8s.io/v1alpha1",
        "HelmReleaseProxy",
        "helmreleaseproxies",
    ),
];

/// Discovery of a group/version: the core resources for `v1`, else the [`INSTALLED_CRDS`]
/// served there.
fn resource_list(gv: &str) -> Value {
    if gv == "v1" {
        let resources: Vec<Value> = CORE_RESOURCES
            .iter()
            .map(|(plural, kind, namespaced, short)| {
                json!({"name": plural, "singularName": kind.to_ascii_lowercase(),
                       "namespaced": namespaced, "kind": kind, "verbs": VERBS,
                       "shortNames": short})
            })
            .collect();
        return json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": resources});
    }
    let resources: Vec<Value> = INSTALLED_CRDS
        .iter()
        .filter(|(av, _, _)| *av == gv)
        .map(|(_, kind, plural)| {
            json!({"name": plural, "singularName": kind.to_ascii_lowercase(), "namespaced": true,
                   "kind": kind, "verbs": ["create", "delete", "deletecollection", "get", "list",
                                           "patch", "update", "watch"]})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// `/version`: a workload cluster's is the Kubernetes version kubeadm recorded
/// (`workload::kubernetes_version`), the management cluster's a fixed one.
fn version(git_version: Option<&str>) -> Value {
    let git_version = git_version.unwrap_or("v1.33.0-simkube");
    let mut parts = git_version.trim_start_matches('v').split(['.', '-']);
    let (major, minor) = (parts.next().unwrap_or("1"), parts.next().unwrap_or("33"));
    json!({
        "major": major, "minor": minor, "gitVersion": git_version, "gitCommit": "simkube",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none",
        "compiler": "simkube", "platform": "linux/amd64",
    })
}

/// Which events one watch delivers.
struct WatchFilter {
    resource: Resource,
    namespace: Option<String>,
    labels: Selector,
    fields: Selector,
}

impl WatchFilter {
    fn selects(&self, obj: &Value) -> bool {
        self.labels.matches_labels(obj) && self.fields.matches_fields(obj)
    }

    /// The line this watch sends for an event, if any. As kube-apiserver does, an object that
    /// starts matching the selectors arrives as `ADDED` and one that stops as `DELETED`.
    fn line_for(&self, e: &Event) -> Option<Bytes> {
        if e.key.resource != self.resource
            || self
                .namespace
                .as_ref()
                .is_some_and(|ns| *ns != e.key.namespace)
        {
            return None;
        }
        let now = self.selects(&e.object);
        let event_type = match e.event_type {
            EventType::Added | EventType::Deleted => now.then_some(e.event_type),
            EventType::Modified => {
                let before = e.old.as_deref().is_none_or(|o| self.selects(o));
                match (before, now) {
                    (true, true) => Some(EventType::Modified),
                    (false, true) => Some(EventType::Added),
                    (true, false) => Some(EventType::Deleted),
                    (false, false) => None,
                }
            }
        }?;
        Some(if event_type == e.event_type {
            e.line()
        } else {
            watch_line(event_type.as_str(), &e.object)
        })
    }
}

fn bookmark_line(api_version: &str, kind: &str, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    watch_line(
        "BOOKMARK",
        &json!({"apiVersion": api_version, "kind": kind, "metadata": meta}),
    )
}

fn start_watch(
    st: &ApiState,
    path: ResourcePath,
    q: &HashMap<String, String>,
) -> Result<Response, StoreError> {
    let (labels, fields) = selectors(q)?;
    let from = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| StoreError::BadRequest(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let send_initial = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let from = if send_initial { None } else { from };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_WATCH_TIMEOUT);
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<Bytes, Infallible>));
    let filter = WatchFilter {
        resource: path.resource.clone(),
        namespace: path.namespace.clone(),
        labels,
        fields,
    };
    let kind = kind_for(&st.store, &path.resource);
    match st.store.watch(
        &path.resource,
        path.namespace.as_deref(),
        from,
        &filter.labels,
        &filter.fields,
    ) {
        Ok(start) => {
            let task = WatchTask {
                store: st.store.clone(),
                filter,
                api_version: path.api_version,
                kind,
                tx,
                bookmarks,
                bookmark_interval: st.bookmark_interval,
                shutdown: st.shutdown.clone(),
            };
            tokio::spawn(task.run(start, from, send_initial, timeout));
        }
        Err(e) => {
            // As kube-apiserver does: 200 with one ERROR event, so clients re-list.
            let line = watch_line("ERROR", &e.status_body());
            tokio::spawn(async move {
                let _ = tx.send(line).await;
            });
        }
    }
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// One open watch: forwards matching events from the store's broadcast to the HTTP body.
struct WatchTask {
    store: Arc<Store>,
    filter: WatchFilter,
    api_version: String,
    kind: String,
    tx: mpsc::Sender<Bytes>,
    bookmarks: bool,
    bookmark_interval: Duration,
    shutdown: watch::Receiver<bool>,
}

impl WatchTask {
    /// Sends one line; false when the client is gone.
    async fn send(&self, line: Bytes) -> bool {
        self.tx.send(line).await.is_ok()
    }

    /// Sends `events` newer than `*last` that match; false when the client is gone.
    async fn forward(&self, events: &[Arc<Event>], last: &mut u64) -> bool {
        for e in events {
            if e.resource_version <= *last {
                continue;
            }
            *last = e.resource_version;
            if let Some(line) = self.filter.line_for(e)
                && !self.send(line).await
            {
                return false;
            }
        }
        true
    }

    async fn run(
        self,
        start: super::store::WatchStart,
        from: Option<u64>,
        send_initial: bool,
        timeout: Duration,
    ) {
        let mut rx = start.receiver;
        let mut last = from.unwrap_or(start.resource_version);
        for obj in &start.snapshot {
            if !self.send(watch_line("ADDED", obj)).await {
                return;
            }
        }
        if send_initial
            && !self
                .send(bookmark_line(&self.api_version, &self.kind, last, true))
                .await
        {
            return;
        }
        if !self.forward(&start.replay, &mut last).await {
            return;
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let period = self.bookmark_interval.max(Duration::from_millis(10));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        let mut bookmarked = last;
        let mut shutdown = self.shutdown.clone();
        if *shutdown.borrow_and_update() {
            return;
        }
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = &mut deadline => return,
                _ = self.tx.closed() => return,
                r = rx.recv() => match r {
                    Ok(e) => {
                        if !self.forward(std::slice::from_ref(&e), &mut last).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        match self.store.events_after(last) {
                            Ok(events) => {
                                if !self.forward(&events, &mut last).await {
                                    return;
                                }
                            }
                            Err(e) => {
                                let _ = self.send(watch_line("ERROR", &e.status_body())).await;
                                return;
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = ticker.tick(), if self.bookmarks => {
                    if last != bookmarked {
                        bookmarked = last;
                        if !self.send(bookmark_line(&self.api_version, &self.kind, last, false)).await {
                            return;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simkube::store::StoreOptions;

    #[tokio::test]
    async fn a_watch_that_falls_behind_the_broadcast_catches_up_from_the_history() {
        let store = Arc::new(Store::new(StoreOptions {
            channel_capacity: 16,
            ..StoreOptions::default()
        }));
        let widgets = Resource::new("example.com", "widgets");
        let all = Selector::default();
        let from = Some(store.resource_version());
        let start = store
            .watch(&widgets, Some("default"), from, &all, &all)
            .unwrap();
        // More writes than the broadcast holds before the watch reads any: it lags.
        let names: Vec<String> = (0..40).map(|i| format!("w{i:02}")).collect();
        for n in &names {
            let obj =
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": n}});
            store.create(&widgets, "default", obj).unwrap();
        }
        let (tx, mut rx) = mpsc::channel(256);
        let (_stop, shutdown) = watch::channel(false);
        let task = WatchTask {
            store: store.clone(),
            filter: WatchFilter {
                resource: widgets,
                namespace: Some("default".into()),
                labels: all.clone(),
                fields: all,
            },
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            tx,
            bookmarks: false,
            bookmark_interval: Duration::from_secs(60),
            shutdown,
        };
        tokio::spawn(task.run(start, from, false, Duration::from_secs(10)));
        let mut seen = Vec::new();
        while seen.len() < names.len() {
            let line = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            let event: Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(event["type"], "ADDED");
            seen.push(
                event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        assert_eq!(seen, names);
        // The events still buffered in the broadcast were already sent: no duplicates follow.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), rx.recv())
                .await
                .is_err()
        );
    }

    fn obj(
        ns: Option<&str>,
        plural: &str,
        group: &str,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> Route {
        Route::Object(ResourcePath {
            resource: Resource::new(group, plural),
            api_version: if group.is_empty() {
                "v1".into()
            } else {
                format!("{group}/v1beta2")
            },
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
        })
    }

    #[test]
    fn paths_resolve_to_resources() {
        let g = "cluster.x-k8s.io";
        for (path, want) in [
            (
                "/api/v1/namespaces",
                obj(None, "namespaces", "", None, None),
            ),
            (
                "/api/v1/namespaces/p1",
                obj(None, "namespaces", "", Some("p1"), None),
            ),
            (
                "/api/v1/namespaces/p1/status",
                obj(None, "namespaces", "", Some("p1"), Some("status")),
            ),
            (
                "/api/v1/namespaces/p1/secrets",
                obj(Some("p1"), "secrets", "", None, None),
            ),
            (
                "/api/v1/namespaces/p1/secrets/s",
                obj(Some("p1"), "secrets", "", Some("s"), None),
            ),
            ("/api/v1/secrets", obj(None, "secrets", "", None, None)),
            (
                "/apis/cluster.x-k8s.io/v1beta2/clusters",
                obj(None, "clusters", g, None, None),
            ),
            (
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/p1/clusters/c/status",
                obj(Some("p1"), "clusters", g, Some("c"), Some("status")),
            ),
        ] {
            assert_eq!(parse_route(path), Some(want), "{path}");
        }
        assert_eq!(parse_route("/api"), Some(Route::ApiVersions));
        assert_eq!(parse_route("/nope"), None);
        assert_eq!(parse_route("/api/v1/namespaces/p1/secrets/s/x/y"), None);
    }
}
