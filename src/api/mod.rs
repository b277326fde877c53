//! HTTP surface: the router, the front middleware (request ids, Magnum's routing quirks,
//! microversions), and one thin handler module per resource.

pub mod body;
pub mod certificates;
pub mod clusters;
pub mod clustertemplates;
pub mod context;
pub mod error;
pub mod extract;
pub mod microversion;
pub mod misc;
pub mod nodegroups;
pub mod openapi;
pub mod operating;
pub mod origin;
pub mod pagination;
pub mod schemas;
pub mod versions;

use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{self, MethodRouter, get};
use tower::Layer;

use crate::app::AppState;
use crate::domain::error::DomainError;
use error::{ApiError, NoVersionHeaders};
use extract::RequestId;
use microversion::{Mv, VersionError};

/// The listener of `[http] metrics_bind`: `/metrics` and `/readyz` (with every detail),
/// unauthenticated.
pub fn metrics_service(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(operating::metrics_open))
        .route("/readyz", get(operating::readyz_open))
        .with_state(state)
}

/// Paths served as they are; everything else not under `/v1` is a bookmark link (`/clusters/x`).
const UNVERSIONED: [&str; 7] = [
    "/",
    "/healthcheck",
    "/openapi.json",
    "/openapi.yaml",
    "/healthz",
    "/readyz",
    "/metrics",
];

/// Rewrites Magnum's path aliases: trailing slashes are ignored and a missing `/v1` is implied.
fn normalize(uri: &Uri) -> Option<Uri> {
    let path = uri.path();
    let trimmed = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
    let versioned = trimmed == "/v1" || trimmed.starts_with("/v1/");
    let new_path = if versioned || UNVERSIONED.contains(&trimmed) {
        trimmed.to_string()
    } else {
        format!("/v1{trimmed}")
    };
    if new_path == path {
        return None;
    }
    let pq = match uri.query() {
        Some(q) => format!("{new_path}?{q}"),
        None => new_path,
    };
    pq.parse().ok()
}

async fn front(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    use tracing::Instrument;
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let origin = origin::Origin::of(
        req.headers(),
        req.uri(),
        req.extensions().get::<crate::listener::Connection>(),
        &app.config.http,
    );
    // Every log line of the request carries its id (and, in JSON logs, method, path and the
    // client's address).
    let span = tracing::info_span!("request", request_id = %request_id,
        method = %req.method(), path = %req.uri().path(), client = %origin.client);
    req.extensions_mut()
        .insert(extract::BaseUrl(origin.base_url));
    front_in_span(req, next, request_id).instrument(span).await
}

async fn front_in_span(mut req: Request, next: Next, request_id: String) -> Response {
    req.extensions_mut().insert(RequestId(request_id.clone()));
    if let Some(uri) = normalize(req.uri()) {
        *req.uri_mut() = uri;
    }
    let path = req.uri().path();
    let versioned = path == "/v1" || path.starts_with("/v1/");
    let nul = path.starts_with("/v1/") && extract::has_nul(req.uri());
    let mut resp = if versioned {
        match microversion::from_headers(req.headers()) {
            Ok(v) => {
                req.extensions_mut().insert(Mv(v));
                let mut resp = if nul {
                    ApiError::Domain(DomainError::BadRequest(extract::NUL_REFUSED.into()))
                        .into_response()
                } else {
                    fix_405(next.run(req).await)
                };
                if resp.extensions().get::<NoVersionHeaders>().is_none() {
                    microversion::add_headers(resp.headers_mut(), v);
                }
                resp
            }
            Err(VersionError::Malformed(msg)) => {
                ApiError::NotAcceptable(msg.into()).into_response()
            }
            Err(VersionError::Unsupported(v)) => {
                let mut resp = ApiError::MicroversionUnsupported(v).into_response();
                microversion::add_headers(resp.headers_mut(), v);
                resp
            }
        }
    } else {
        fix_405(next.run(req).await)
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-openstack-request-id", v);
    }
    resp
}

/// axum's own 405 has an empty body; give it Magnum's, keeping `Allow`.
fn fix_405(resp: Response) -> Response {
    if resp.status() != StatusCode::METHOD_NOT_ALLOWED
        || resp.headers().contains_key("content-type")
    {
        return resp;
    }
    let allow = resp.headers().get("allow").cloned();
    let mut out = ApiError::MethodNotAllowed.into_response();
    if let Some(a) = allow {
        out.headers_mut().insert("allow", a);
    }
    out
}

async fn not_found() -> ApiError {
    ApiError::RouteNotFound
}

/// A router that records the method and path of every route it adds: the table the OpenAPI
/// test compares with the document, so a route cannot be served undocumented.
pub struct Routes {
    router: Router<AppState>,
    table: Vec<(Method, &'static str)>,
}

impl Routes {
    fn new() -> Self {
        Routes {
            router: Router::new(),
            table: Vec::new(),
        }
    }

    fn add(mut self, method: Method, path: &'static str, route: MethodRouter<AppState>) -> Self {
        // axum merges the methods of one path across calls.
        self.router = self.router.route(path, route);
        self.table.push((method, path));
        self
    }

    fn get<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Self {
        self.add(Method::GET, path, routing::get(h))
    }

    fn post<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Self {
        self.add(Method::POST, path, routing::post(h))
    }

    fn patch<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Self {
        self.add(Method::PATCH, path, routing::patch(h))
    }

    fn delete<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Self {
        self.add(Method::DELETE, path, routing::delete(h))
    }
}

/// The routes anyone may call: versions, health, the OpenAPI document.
fn public_routes() -> Routes {
    Routes::new()
        .get("/", versions::root)
        .get("/v1", versions::v1)
        .get("/healthcheck", versions::healthcheck)
        .get("/healthz", operating::healthz)
        .get("/openapi.json", openapi::json)
        .get("/openapi.yaml", openapi::yaml)
}

/// `/readyz`: anyone may ask; an admin's token shows the details.
fn readiness_routes() -> Routes {
    Routes::new().get("/readyz", operating::readyz)
}

/// `/metrics` on the API port (authenticated unless `[http] metrics_public`).
fn metrics_routes() -> Routes {
    Routes::new().get("/metrics", operating::metrics)
}

/// The routes that need an authenticated caller.
fn v1_routes() -> Routes {
    Routes::new()
        .get("/v1/clustertemplates", clustertemplates::list)
        .post("/v1/clustertemplates", clustertemplates::create)
        .get("/v1/clustertemplates/detail", clustertemplates::detail)
        .get("/v1/clustertemplates/{ident}", clustertemplates::show)
        .patch("/v1/clustertemplates/{ident}", clustertemplates::update)
        .delete("/v1/clustertemplates/{ident}", clustertemplates::delete)
        .get("/v1/clusters", clusters::list)
        .post("/v1/clusters", clusters::create)
        .get("/v1/clusters/detail", clusters::detail)
        .get("/v1/clusters/{ident}", clusters::show)
        .patch("/v1/clusters/{ident}", clusters::update)
        .delete("/v1/clusters/{ident}", clusters::delete)
        .post("/v1/clusters/{ident}/actions/resize", clusters::resize)
        .post("/v1/clusters/{ident}/actions/upgrade", clusters::upgrade)
        .get("/v1/clusters/{ident}/nodegroups", nodegroups::list)
        .post("/v1/clusters/{ident}/nodegroups", nodegroups::create)
        .get("/v1/clusters/{ident}/nodegroups/{ng}", nodegroups::show)
        .patch("/v1/clusters/{ident}/nodegroups/{ng}", nodegroups::update)
        .delete("/v1/clusters/{ident}/nodegroups/{ng}", nodegroups::delete)
        .post("/v1/certificates", certificates::sign)
        .get("/v1/certificates/{ident}", certificates::show)
        .patch("/v1/certificates/{ident}", certificates::rotate_ca)
        .patch("/v1/credentials/{ident}", certificates::rotate_credential)
        .get("/v1/mservices", misc::mservices)
        .get("/v1/stats", misc::stats)
        .get("/v1/quotas", misc::quota_list)
        .post("/v1/quotas", misc::quota_create)
        .get("/v1/quotas/{project_id}/{resource}", misc::quota_show)
        .patch("/v1/quotas/{project_id}/{resource}", misc::quota_update)
        .delete("/v1/quotas/{project_id}/{resource}", misc::quota_delete)
}

/// Every route of [`service`] as (method, path template), in registration order.
pub fn route_table() -> Vec<(Method, &'static str)> {
    [
        public_routes(),
        readiness_routes(),
        metrics_routes(),
        v1_routes(),
    ]
    .into_iter()
    .flat_map(|r| r.table)
    .collect()
}

/// After a successful request that may have written (anything but GET/HEAD/OPTIONS) and
/// before its answer leaves, the serialised views stored so far are retired: this replica's
/// clients read their own writes at once, without waiting for the change notification
/// (`view_cache`). A refused request (401, 404, 409, …) wrote nothing and retires nothing, so
/// a client cannot keep the views empty by sending requests it may not make.
async fn own_writes(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let resp = next.run(req).await;
    if !reads && resp.status().is_success() {
        app.views.changed();
    }
    resp
}

/// The whole HTTP service: front middleware around the router.
pub fn service(
    state: AppState,
) -> impl tower::Service<
    Request,
    Response = Response,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    let timeout = state.config.http.request_timeout_secs;
    let front_state = state.clone();
    let authenticate = || middleware::from_fn_with_state(state.clone(), context::authenticate);
    let metrics = metrics_routes().router;
    let metrics = if state.config.http.metrics_public {
        metrics
    } else {
        metrics.route_layer(authenticate())
    };
    let readiness = readiness_routes()
        .router
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            context::identify,
        ));
    let mut router = public_routes()
        .router
        .merge(readiness)
        .merge(metrics)
        .merge(v1_routes().router.route_layer(authenticate()))
        .layer(middleware::from_fn(operating::count))
        .layer(middleware::from_fn_with_state(state.clone(), own_writes))
        .fallback(not_found)
        .with_state(state)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            ApiError::Internal("handler panicked".into()).into_response()
        }));
    if timeout > 0 {
        router = router.layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(timeout),
        ));
    }
    middleware::from_fn_with_state(front_state, front).layer(router)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> String {
        let uri: Uri = s.parse().unwrap();
        normalize(&uri)
            .map(|u| u.to_string())
            .unwrap_or_else(|| s.to_string())
    }

    #[test]
    fn bookmarks_and_trailing_slashes_route_like_magnum() {
        assert_eq!(n("/clusters/x"), "/v1/clusters/x");
        assert_eq!(
            n("/v1/clusters/x/?rollback=True"),
            "/v1/clusters/x?rollback=True"
        );
        assert_eq!(n("/v1/"), "/v1");
        assert_eq!(n("/"), "/");
        assert_eq!(n("/clusters/"), "/v1/clusters");
        assert_eq!(n("/healthcheck"), "/healthcheck");
    }

    #[test]
    fn the_unversioned_paths_are_the_routes_outside_v1() {
        let mut routed: Vec<&str> = route_table()
            .into_iter()
            .map(|(_, p)| p)
            .filter(|p| *p != "/v1" && !p.starts_with("/v1/"))
            .collect();
        routed.sort_unstable();
        routed.dedup();
        let mut listed = UNVERSIONED.to_vec();
        listed.sort_unstable();
        assert_eq!(routed, listed);
    }
}
