//! Request extractors with Magnum's error behaviour: JSON bodies (415, bad JSON), query strings
//! (unknown arguments, typed values), the request's own base URL for links, the request id.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde_json::Value;
use uuid::Uuid;

use super::error::ApiError;
use crate::domain::error::DomainError;
use crate::domain::fields::bool_from_string;

/// A request body parsed as JSON (any JSON value; schemas check the shape).
#[derive(Debug)]
pub struct JsonBody(pub Value);

/// Largest body accepted (a CSR or a template is a few KiB).
const MAX_BODY: usize = 1 << 20;

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;
    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
            .await
            .map_err(|_| DomainError::BadRequest("Request body is too large".into()))?;
        parse_json(content_type.as_deref(), &bytes).map(JsonBody)
    }
}

/// Parses a body whose `Content-Type` is `content_type`.
pub fn parse_json(content_type: Option<&str>, bytes: &Bytes) -> Result<Value, ApiError> {
    if let Some(ct) = content_type {
        let mime = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let is_json = mime == "application/json" || mime.ends_with("+json");
        if !is_json && !bytes.is_empty() {
            return Err(ApiError::UnsupportedMediaType(format!(
                "Unknown mimetype: {mime}"
            )));
        }
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|_| DomainError::BadRequest("Request is not in valid JSON format".into()))?;
    if holds_nul(&v) {
        return Err(DomainError::BadRequest(NUL_REFUSED.into()).into());
    }
    Ok(v)
}

/// PostgreSQL text cannot hold U+0000: a NUL in a request would fail in the database (a 500)
/// where it is the client's error (400).
pub const NUL_REFUSED: &str = "Invalid input: text cannot contain NUL (U+0000) characters.";

fn holds_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(m) => m.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// Whether the path or the query carries an encoded NUL (a raw one is not a valid URI).
pub fn has_nul(uri: &axum::http::Uri) -> bool {
    uri.path().contains("%00") || uri.query().is_some_and(|q| q.contains("%00"))
}

/// The raw query arguments, in order.
#[derive(Debug, Default)]
pub struct QueryArgs(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryArgs {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let q = parts.uri.query().unwrap_or("");
        Ok(QueryArgs(
            form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        ))
    }
}

impl QueryArgs {
    /// 400 `Unknown argument: "x"` for any argument outside `allowed`.
    pub fn only(&self, allowed: &[&str]) -> Result<&Self, ApiError> {
        if let Some((k, _)) = self.0.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            return Err(DomainError::BadRequest(format!("Unknown argument: \"{k}\"")).into());
        }
        Ok(self)
    }
    /// The last value given for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    pub fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.get(key)
            .map(|v| {
                v.trim().parse::<i64>().map_err(|_| {
                    DomainError::invalid_field(key, v, "unable to convert to int").into()
                })
            })
            .transpose()
    }
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        self.get(key)
            .map(|v| {
                bool_from_string(v).ok_or_else(|| {
                    DomainError::invalid_field(key, v, "Invalid boolean value").into()
                })
            })
            .transpose()
    }
    pub fn uuid(&self, key: &str) -> Result<Option<Uuid>, ApiError> {
        self.get(key)
            .map(|v| {
                parse_uuid(v).ok_or_else(|| {
                    DomainError::BadRequest(format!("Expected a uuid but received {v}.")).into()
                })
            })
            .transpose()
    }
}

pub use crate::domain::names::parse_uuid;

/// The application URL of this request (`scheme://host[/prefix]`), as the front middleware
/// found it ([`super::origin::Origin`]: proxy headers count only from trusted proxies).
#[derive(Debug, Clone)]
pub struct BaseUrl(pub String);

impl<S: Send + Sync> FromRequestParts<S> for BaseUrl {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if let Some(found) = parts.extensions.get::<BaseUrl>() {
            return Ok(found.clone());
        }
        // Not through the front middleware: no proxy is trusted.
        let origin = super::origin::Origin::of(
            &parts.headers,
            &parts.uri,
            None,
            &crate::config::HttpConfig::default(),
        );
        Ok(BaseUrl(origin.base_url))
    }
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
