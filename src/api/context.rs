//! The caller's identity as an extractor, and the middleware that establishes it: Keystone
//! token validation (or, with `serve --dev` in a build with the `dev` feature only, development
//! headers).

use axum::extract::{FromRequestParts, Request, State};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::app::{AppState, AuthMode};
use crate::domain::policy::Caller;
use crate::openstack::{Identity, OpenStackError, UserSession};

/// Default development identity: an admin of project `dev`.
#[cfg(feature = "dev")]
pub const DEV_USER: &str = "dev-user";
#[cfg(feature = "dev")]
pub const DEV_PROJECT: &str = "dev";
#[cfg(feature = "dev")]
pub const DEV_ROLES: &str = "admin,member,reader";

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Identity from development headers (only ever used with `serve --dev`; `dev` builds only).
#[cfg(feature = "dev")]
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
        system_scope: false,
    }
}

/// The policy's view of a validated token.
fn keystone_caller(id: &Identity) -> Caller {
    Caller {
        user_id: id.user_id.clone(),
        // Unscoped and domain-scoped tokens have no project: every project rule then denies.
        project_id: id.project_id.clone().unwrap_or_default(),
        roles: id.roles.iter().map(|r| r.to_ascii_lowercase()).collect(),
        system_scope: id.system_scope,
    }
}

/// Authenticates every request except `/`, `/v1` and the health/spec endpoints.
pub async fn authenticate(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    match identify_request(&app, req.headers()).await {
        Ok(found) => {
            insert(&mut req, found);
            next.run(req).await
        }
        Err(refused) => refused.into_response(),
    }
}

/// Establishes the caller where a token is offered but not required (`/readyz`): a request
/// without a token, or with one that cannot be validated now, goes on anonymously.
pub async fn identify(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    if let Ok(found) = identify_request(&app, req.headers()).await {
        insert(&mut req, found);
    }
    next.run(req).await
}

fn insert(req: &mut Request, (caller, cloud): (Caller, Option<Cloud>)) {
    req.extensions_mut().insert(caller);
    if let Some(cloud) = cloud {
        req.extensions_mut().insert(cloud);
    }
}

/// The request's caller (and, with Keystone, its cloud session), or the answer refusing it.
async fn identify_request(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<(Caller, Option<Cloud>), ApiError> {
    match &app.auth {
        #[cfg(feature = "dev")]
        AuthMode::DevHeaders => Ok((dev_caller(headers), None)),
        AuthMode::Keystone(ks) => {
            let unauthorized = || ApiError::Unauthorized(ks.www_authenticate());
            let token = header(headers, "x-auth-token").ok_or_else(unauthorized)?;
            match ks.validate(token).await {
                Ok(identity) => Ok((
                    keystone_caller(&identity),
                    Some(Cloud(Some(ks.user_session(token, identity)))),
                )),
                Err(OpenStackError::InvalidToken) => Err(unauthorized()),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot validate a token");
                    Err(ApiError::AuthUnavailable)
                }
            }
        }
    }
}

/// The caller's OpenStack session (their token and catalog) for Glance/Nova/Neutron look-ups;
/// `None` in `serve --dev` without Keystone, where nothing is looked up.
#[derive(Debug, Clone, Default)]
pub struct Cloud(pub Option<UserSession>);

impl<S: Send + Sync> FromRequestParts<S> for Cloud {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Cloud>().cloned().unwrap_or_default())
    }
}

/// The caller when the request was authenticated (routes outside the authenticated set).
impl<S: Send + Sync> axum::extract::OptionalFromRequestParts<S> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Caller>().cloned())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthorized(String::new()))
    }
}
