//! The operators' endpoints: `/healthz` (the process answers), `/readyz` (its dependencies do)
//! and `/metrics` (Prometheus text), plus the middleware that counts every API request.

use std::time::Instant;

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use super::schemas::{AuthError, MagnumError, UnavailableBody};
use crate::app::AppState;
use crate::domain::error::DomainError;
use crate::domain::policy::Caller;
use crate::service::operating;
use crate::telemetry;

/// The answer of `/healthz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Alive {
    /// `ok`.
    pub status: String,
}

/// Process alive: always 200.
#[utoipa::path(get, path = "/healthz", tag = "operating", security(()),
    responses((status = 200, description = "The process answers", body = Alive)))]
pub async fn healthz() -> Json<Alive> {
    Json(Alive {
        status: "ok".into(),
    })
}

/// This replica can answer reads: 200, or 503 naming the failed checks (`{status, checks:
/// [{name, ok, detail, optional}]}`). Keystone and the management clusters are reported
/// (`optional`) but never make it 503. Versions are shown to admins; anyone else sees `ok` or
/// a failure's reason.
#[utoipa::path(get, path = "/readyz", tag = "operating", security(()),
    responses((status = 200, description = "PostgreSQL answers and is migrated (the optional \
                                            checks may still have failed)",
               body = super::schemas::ReadinessSchema),
              (status = 503, description = "PostgreSQL does not answer or is not migrated (the \
                                            failed checks say which)",
               body = super::schemas::ReadinessSchema)))]
pub async fn readyz(State(app): State<AppState>, caller: Option<Caller>) -> Response {
    let r = operating::readiness(&app).await;
    let r = if caller.as_ref().is_some_and(Caller::is_admin) {
        r
    } else {
        r.without_details()
    };
    readiness_answer(r)
}

/// `/readyz` on `[http] metrics_bind`: the monitoring network sees every detail.
pub async fn readyz_open(State(app): State<AppState>) -> Response {
    readiness_answer(operating::readiness(&app).await)
}

fn readiness_answer(r: operating::Readiness) -> Response {
    let status = if r.ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(r)).into_response()
}

/// Serialises gauge refresh + render: two scrapes at once would interleave their gauges.
static SCRAPE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The Prometheus text.
pub async fn render(app: &AppState) -> Response {
    let _one = SCRAPE.lock().await;
    // Installed before the gauges are set (a recorder installed later would miss them).
    let handle = telemetry::handle();
    if let Err(e) = operating::refresh_gauges(app).await {
        tracing::warn!(error = %e, "metrics: database gauges not refreshed");
    }
    let mut text = handle.map(|h| h.render()).unwrap_or_default();
    text.push_str(&operating::container_infra_metrics(app).await);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `/metrics` on the API port: an admin's token, unless `[http] metrics_public`.
#[utoipa::path(get, path = "/metrics", tag = "operating",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4",
               content_type = "text/plain; version=0.0.4; charset=utf-8", body = String),
              (status = 401, description = "No token, or one Keystone does not accept (unless \
                                            `[http] metrics_public`)", body = AuthError),
              (status = 403, description = "Not an admin (unless `[http] metrics_public`)",
               body = MagnumError),
              (status = 503, description = "Keystone cannot be reached to validate the token",
               body = UnavailableBody)))]
pub async fn metrics(State(app): State<AppState>, caller: Option<Caller>) -> Response {
    if !app.config.http.metrics_public && !caller.as_ref().is_some_and(Caller::is_admin) {
        return ApiError::Domain(DomainError::Forbidden(
            "Metrics are for admins (or set [http] metrics_public / metrics_bind).".into(),
        ))
        .into_response();
    }
    render(&app).await
}

/// `/metrics` on `[http] metrics_bind`: unauthenticated, on a port meant for the monitoring
/// network.
pub async fn metrics_open(State(app): State<AppState>) -> Response {
    render(&app).await
}

/// Counts the request by its route template (not its path: ids would explode the series).
pub async fn count(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let resp = next.run(req).await;
    telemetry::http_request(&method, &route, resp.status().as_u16(), started.elapsed());
    resp
}
