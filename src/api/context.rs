//! The caller's identity as an extractor, and the middleware that establishes it.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::app::{AppState, AuthMode};
use crate::domain::policy::Caller;

/// Default development identity: an admin of project `dev`.
pub const DEV_USER: &str = "dev-user";
pub const DEV_PROJECT: &str = "dev";
pub const DEV_ROLES: &str = "admin,member,reader";

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Identity from development headers (only ever used with `serve --dev`).
pub fn dev_caller(h: &HeaderMap) -> Caller {
    Caller {
        user_id: header(h, "x-user-id").unwrap_or(DEV_USER).to_string(),
        project_id: header(h, "x-project-id").unwrap_or(DEV_PROJECT).to_string(),
        roles: header(h, "x-roles")
            .unwrap_or(DEV_ROLES)
            .split(',')
            .map(|r| r.trim().to_ascii_lowercase())
            .filter(|r| !r.is_empty())
            .collect(),
    }
}

/// Authenticates every request except `/`, `/v1` and the health/spec endpoints.
pub async fn authenticate(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let caller = match app.auth {
        AuthMode::DevHeaders => dev_caller(req.headers()),
        AuthMode::Reject => return ApiError::Unauthorized.into_response(),
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthorized)
    }
}
