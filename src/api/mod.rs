//! HTTP surface: the router, the front middleware (request ids, Magnum's routing quirks,
//! microversions), and one thin handler module per resource.

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
pub mod pagination;
pub mod versions;

use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use tower::Layer;

use crate::app::AppState;
use error::{ApiError, NoVersionHeaders};
use microversion::{Mv, VersionError};

/// The listener of `[http] metrics_bind`: `/metrics` only, unauthenticated.
pub fn metrics_service(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(operating::metrics_open))
        .with_state(state)
}

/// The `{"uuid": ...}` body of asynchronous cluster operations.
pub fn uuid_body(uuid: uuid::Uuid) -> serde_json::Value {
    serde_json::json!({ "uuid": uuid })
}

/// The `x-openstack-request-id` of the current request.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(|| RequestId(String::new())))
    }
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

async fn front(req: Request, next: Next) -> Response {
    use tracing::Instrument;
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    // Every log line of the request carries its id (and, in JSON logs, method and path).
    let span = tracing::info_span!("request", request_id = %request_id,
        method = %req.method(), path = %req.uri().path());
    front_in_span(req, next, request_id).instrument(span).await
}

async fn front_in_span(mut req: Request, next: Next, request_id: String) -> Response {
    req.extensions_mut().insert(RequestId(request_id.clone()));
    if let Some(uri) = normalize(req.uri()) {
        *req.uri_mut() = uri;
    }
    let path = req.uri().path();
    let versioned = path == "/v1" || path.starts_with("/v1/");
    let mut resp = if versioned {
        match microversion::from_headers(req.headers()) {
            Ok(v) => {
                req.extensions_mut().insert(Mv(v));
                let mut resp = fix_405(next.run(req).await);
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

/// The routes that need an authenticated caller.
fn v1_routes(state: AppState) -> Router<AppState> {
    Router::new()
        .route(
            "/v1/clustertemplates",
            get(clustertemplates::list).post(clustertemplates::create),
        )
        .route("/v1/clustertemplates/detail", get(clustertemplates::detail))
        .route(
            "/v1/clustertemplates/{ident}",
            get(clustertemplates::show)
                .patch(clustertemplates::update)
                .delete(clustertemplates::delete),
        )
        .route("/v1/clusters", get(clusters::list).post(clusters::create))
        .route("/v1/clusters/detail", get(clusters::detail))
        .route(
            "/v1/clusters/{ident}",
            get(clusters::show)
                .patch(clusters::update)
                .delete(clusters::delete),
        )
        .route(
            "/v1/clusters/{ident}/actions/resize",
            post(clusters::resize),
        )
        .route(
            "/v1/clusters/{ident}/actions/upgrade",
            post(clusters::upgrade),
        )
        .route(
            "/v1/clusters/{ident}/nodegroups",
            get(nodegroups::list).post(nodegroups::create),
        )
        .route(
            "/v1/clusters/{ident}/nodegroups/{ng}",
            get(nodegroups::show)
                .patch(nodegroups::update)
                .delete(nodegroups::delete),
        )
        .route("/v1/certificates", post(certificates::sign))
        .route(
            "/v1/certificates/{ident}",
            get(certificates::show).patch(certificates::rotate_ca),
        )
        .route(
            "/v1/credentials/{ident}",
            patch(certificates::rotate_credential),
        )
        .route("/v1/mservices", get(misc::mservices))
        .route("/v1/stats", get(misc::stats))
        .route("/v1/quotas", get(misc::quota_list).post(misc::quota_create))
        .route(
            "/v1/quotas/{project_id}/{resource}",
            get(misc::quota_show)
                .patch(misc::quota_update)
                .delete(misc::quota_delete),
        )
        .route_layer(middleware::from_fn_with_state(state, context::authenticate))
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
    let metrics = Router::new().route("/metrics", get(operating::metrics));
    let metrics = if state.config.http.metrics_public {
        metrics
    } else {
        metrics.route_layer(middleware::from_fn_with_state(
            state.clone(),
            context::authenticate,
        ))
    };
    let mut router = Router::new()
        .route("/", get(versions::root))
        .route("/v1", get(versions::v1))
        .route("/healthcheck", get(versions::healthcheck))
        .route("/healthz", get(operating::healthz))
        .route("/readyz", get(operating::readyz))
        .route("/openapi.json", get(openapi::json))
        .route("/openapi.yaml", get(openapi::yaml))
        .merge(metrics)
        .merge(v1_routes(state.clone()))
        .layer(middleware::from_fn(operating::count))
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
    middleware::from_fn(front).layer(router)
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
}
