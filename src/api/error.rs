//! The one place errors become HTTP: Magnum's error body, status codes and the 406 variants.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::schemas::{
    AuthError, AuthErrorItem, ErrorCode, HelpLink, MagnumError, MicroversionError,
    MicroversionErrorItem,
};
use crate::db::DbError;
use crate::domain::error::DomainError;
use crate::domain::version::{MAX_VERSION, MIN_VERSION, SERVICE_TYPE, Version};
use crate::driver::BackendError;
use crate::openstack::OpenStackError;
use crate::service;

/// Marks responses produced below the version layer (unknown route, 405, malformed version
/// header, version gates): Magnum sends no version headers on those.
#[derive(Debug, Clone, Copy)]
pub struct NoVersionHeaders;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Db(#[from] DbError),
    /// Unknown path (pecan's 404).
    #[error("Not Found")]
    RouteNotFound,
    /// Known path, wrong method (pecan's 405).
    #[error("Method Not Allowed")]
    MethodNotAllowed,
    /// Pecan-level 406: malformed version header or an API absent at the requested version.
    #[error("{0}")]
    NotAcceptable(String),
    /// A well-formed version outside the supported range.
    #[error("microversion {0} unsupported")]
    MicroversionUnsupported(Version),
    /// Body with a content type other than JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// No token or a token Keystone does not accept (keystonemiddleware's body); carries the
    /// `WWW-Authenticate` value (`Keystone uri="…"`).
    #[error("authentication required")]
    Unauthorized(String),
    /// Keystone cannot be reached and the token is not cached (keystonemiddleware's 503).
    #[error("the Keystone service is unavailable")]
    AuthUnavailable,
    /// A dependency (database, Keystone) is down; the client may retry.
    #[error("{0}")]
    Unavailable(String),
    /// The service's own fault, its cause as the source (logged with its chain; answered
    /// generically).
    #[error("internal error: {0}")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

pub type ApiResult<T> = Result<T, ApiError>;

/// OpenStack failures the service layer did not give a Magnum meaning of their own.
impl From<OpenStackError> for ApiError {
    fn from(e: OpenStackError) -> Self {
        match e {
            OpenStackError::InvalidToken => ApiError::Unauthorized(String::new()),
            OpenStackError::NotFound(what) => {
                ApiError::Domain(DomainError::NotFound(format!("{what} could not be found.")))
            }
            OpenStackError::Forbidden(_) => ApiError::Domain(DomainError::not_authorized()),
            e @ (OpenStackError::Unavailable { .. } | OpenStackError::NotAcceptable(_)) => {
                tracing::warn!(error = %e, "OpenStack call failed");
                ApiError::Unavailable(format!("{e}. Please retry later."))
            }
        }
    }
}

/// Backend failures at request time: what cannot be served as asked is the client's (400), an
/// unreachable management cluster or Keystone is a 503, anything else a 500 with the reason logged.
impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::Invalid(m) => ApiError::Domain(DomainError::BadRequest(m)),
            BackendError::Unavailable(m) => {
                tracing::warn!(error = %m, "management cluster call failed");
                ApiError::Unavailable(format!("{m}. Please retry later."))
            }
            BackendError::OpenStack(o) => o.into(),
            // The journal is PostgreSQL: an outage is a 503 as for any other write.
            BackendError::Journal(j) => match j.source.downcast::<DbError>() {
                Ok(d) => ApiError::Db(*d),
                Err(source) => ApiError::Internal(Box::new(crate::driver::JournalError {
                    what: j.what,
                    source,
                })),
            },
            BackendError::Internal(cause) => ApiError::Internal(cause),
        }
    }
}

/// The service layer's error classes, each to its HTTP meaning.
impl From<service::Error> for ApiError {
    fn from(e: service::Error) -> Self {
        match e {
            service::Error::Domain(d) => ApiError::Domain(d),
            service::Error::Db(d) => ApiError::Db(d),
            service::Error::OpenStack(o) => o.into(),
            service::Error::Backend(b) => b.into(),
            e @ (service::Error::Seal(_)
            | service::Error::Serialize(_)
            | service::Error::Invariant(_)) => ApiError::Internal(Box::new(e)),
        }
    }
}

fn magnum_body(
    status: StatusCode,
    code: ErrorCode,
    title: &str,
    detail: &str,
) -> Json<MagnumError> {
    Json(MagnumError::new(status.as_u16(), code, title, detail))
}

/// Magnum's `title`: the message up to (excluding) the first '.'.
pub fn title_of(detail: &str) -> &str {
    detail.split('.').next().unwrap_or(detail)
}

fn client_error(status: StatusCode, detail: &str) -> Response {
    (
        status,
        magnum_body(status, ErrorCode::Client, title_of(detail), detail),
    )
        .into_response()
}

fn pecan_error(status: StatusCode, title: &str, detail: &str) -> Response {
    let mut resp = (
        status,
        magnum_body(status, ErrorCode::Framework, title, detail),
    )
        .into_response();
    resp.extensions_mut().insert(NoVersionHeaders);
    resp
}

/// Magnum's 406 body for a version outside the supported range.
pub fn microversion_unsupported_body(v: Version) -> MicroversionError {
    let range = format!("[{SERVICE_TYPE} {MIN_VERSION}, {SERVICE_TYPE} {MAX_VERSION}]");
    let description = if v.major != MAX_VERSION.major {
        format!(
            "Mutually exclusive versions requested. Version {v} requested but not supported by this service.The supported version range is: {range}."
        )
    } else {
        format!(
            "Version {v} was requested but the minor version is not supported by this service. The supported version range is: {range}."
        )
    };
    MicroversionError {
        errors: vec![MicroversionErrorItem {
            code: "magnum.microversion-unsupported".into(),
            title: "Requested microversion is unsupported".into(),
            description,
            max_version: MAX_VERSION.to_string(),
            min_version: MIN_VERSION.to_string(),
            links: vec![HelpLink {
                rel: "help".into(),
                href: "http://docs.openstack.org/api-guide/compute/microversions.html".into(),
            }],
        }],
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Domain(e) => {
                let status = match &e {
                    DomainError::BadRequest(_) => StatusCode::BAD_REQUEST,
                    DomainError::Forbidden(_) => StatusCode::FORBIDDEN,
                    DomainError::NotFound(_) => StatusCode::NOT_FOUND,
                    DomainError::Conflict(_) => StatusCode::CONFLICT,
                };
                client_error(status, e.message())
            }
            ApiError::Db(DbError::Contention(e)) => {
                // Still rolled back on contention after `db::retry`'s attempts: the request
                // met concurrent changes of the same cluster; the client may send it again.
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "transaction rolled back on contention"
                );
                client_error(
                    StatusCode::CONFLICT,
                    "The cluster is being changed by another request. Please retry.",
                )
            }
            ApiError::Db(DbError::Unavailable(e)) => {
                tracing::error!(error = &e as &dyn std::error::Error, "database unavailable");
                ApiError::Unavailable(
                    "The database is temporarily unavailable, please retry.".into(),
                )
                .into_response()
            }
            ApiError::Db(e) => internal(&e),
            ApiError::Internal(e) => internal(e.as_ref()),
            ApiError::RouteNotFound => pecan_error(StatusCode::NOT_FOUND, "Not Found", ""),
            ApiError::MethodNotAllowed => {
                pecan_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed", "")
            }
            ApiError::NotAcceptable(detail) => {
                pecan_error(StatusCode::NOT_ACCEPTABLE, "Not Acceptable", &detail)
            }
            ApiError::MicroversionUnsupported(v) => (
                StatusCode::NOT_ACCEPTABLE,
                Json(microversion_unsupported_body(v)),
            )
                .into_response(),
            ApiError::UnsupportedMediaType(detail) => {
                client_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, &detail)
            }
            ApiError::Unauthorized(www_authenticate) => {
                let mut resp = middleware_error(
                    StatusCode::UNAUTHORIZED,
                    "The request you have made requires authentication.",
                );
                if let Ok(v) = HeaderValue::from_str(&www_authenticate) {
                    resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
                }
                resp
            }
            ApiError::AuthUnavailable => middleware_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "The Keystone service is temporarily unavailable.",
            ),
            ApiError::Unavailable(detail) => {
                let status = StatusCode::SERVICE_UNAVAILABLE;
                (
                    status,
                    magnum_body(status, ErrorCode::Server, title_of(&detail), &detail),
                )
                    .into_response()
            }
        }
    }
}

/// keystonemiddleware's own error body (it answers before Magnum's error middleware runs).
fn middleware_error(status: StatusCode, message: &str) -> Response {
    let body = AuthError {
        error: AuthErrorItem {
            code: status.as_u16(),
            title: status.canonical_reason().unwrap_or_default().into(),
            message: message.into(),
        },
    };
    let mut resp = (status, Json(body)).into_response();
    resp.extensions_mut().insert(NoVersionHeaders);
    resp
}

fn internal(e: &(dyn std::error::Error + 'static)) -> Response {
    // 5xx: log the cause (the subscriber prints its sources too), answer generically (Magnum
    // strips tracebacks too).
    tracing::error!(error = e, "internal error");
    let status = StatusCode::INTERNAL_SERVER_ERROR;
    let msg = "An internal error occurred, see the service log for details.";
    (
        status,
        magnum_body(status, ErrorCode::Server, title_of(msg), msg),
    )
        .into_response()
}
