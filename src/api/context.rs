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

/// Built and run by `.ci/run` as `cargo test --no-default-features --lib production_build`:
/// this build has no development identity at all (`AuthMode` has only Keystone).
#[cfg(test)]
#[cfg(not(feature = "dev"))]
mod production_build {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use tower::ServiceExt;

    use crate::app::{App, AuthMode};
    use crate::config::Config;
    use crate::openstack::Keystone;

    #[tokio::test]
    async fn production_build_answers_401_to_development_identity_headers() {
        // Nothing listens there: a request without a token never reaches Keystone.
        let cfg: Config = config::Config::builder()
            .add_source(config::File::from_str(
                "[keystone]\nauth_url = \"http://127.0.0.1:9/v3\"\nusername = \"magnum\"\n\
                 password = \"pw\"\nproject_name = \"service\"\n",
                config::FileFormat::Toml,
            ))
            .build()
            .and_then(config::Config::try_deserialize)
            .unwrap();
        let keystone = Keystone::new(&cfg.keystone, &cfg.openstack).unwrap();
        let pool =
            crate::db::connect_lazy("postgres://magnum@127.0.0.1:9/magnum", &cfg.database).unwrap();
        let backend = crate::server::backend_for_members(&cfg, &[]);
        let app = App::with_backend(pool, cfg, AuthMode::Keystone(Arc::new(keystone)), backend);
        for path in ["/v1/clusters", "/v1/clustertemplates", "/metrics"] {
            let req = Request::get(path)
                .header("x-user-id", "admin-user")
                .header("x-project-id", "admin-project")
                .header("x-roles", "admin,member,reader")
                .body(Body::empty())
                .unwrap();
            let resp = super::super::service(app.clone())
                .oneshot(req)
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
            assert_eq!(
                resp.headers()[header::WWW_AUTHENTICATE],
                "Keystone uri=\"http://127.0.0.1:9/v3\"",
                "{path}"
            );
        }
    }
}
