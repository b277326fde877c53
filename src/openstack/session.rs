//! A client that acts as the caller: their token, their catalog. It implements the SDK's
//! `AsyncClient`, so the SDK's endpoint builders (Glance, Nova, Neutron) run on it unchanged.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::HeaderValue;
use openstack_sdk_core::api::{ApiError, AsyncClient, RestClient};
use openstack_sdk_core::catalog::ServiceEndpoint;
use openstack_sdk_core::types::{ApiVersion, BoxedAsyncRead, ServiceType};
use secrecy::{ExposeSecret, SecretString};

use super::catalog::{Catalog, versioned};

/// Why a request made as the caller failed before any service answered.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no {0} endpoint in the caller's service catalog")]
    NoEndpoint(String),
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("{0}")]
    Request(String),
    #[error("streaming bodies are not used by this service")]
    Unsupported,
}

/// The caller's token and catalog, plus the shared HTTP client (timeouts, CA bundle).
#[derive(Clone)]
pub struct UserSession {
    http: reqwest::Client,
    token: SecretString,
    catalog: Arc<Catalog>,
    interface: String,
    region: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for UserSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSession")
            .field("catalog", &self.catalog.types())
            .finish_non_exhaustive()
    }
}

impl UserSession {
    pub fn new(
        http: reqwest::Client,
        token: SecretString,
        catalog: Arc<Catalog>,
        interface: String,
        region: Option<String>,
        timeout: Duration,
    ) -> Self {
        Self {
            http,
            token,
            catalog,
            interface,
            region,
            timeout,
        }
    }

    /// The caller's token (to seal it for the operation that acts as the caller later).
    pub fn token(&self) -> &SecretString {
        &self.token
    }

    /// How long one call may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The versioned root of `service_type`'s API from the catalog.
    pub fn endpoint_url(&self, service_type: &ServiceType) -> Result<String, SessionError> {
        let (catalog_type, version) = match service_type {
            ServiceType::Image => ("image", "v2"),
            ServiceType::Compute => ("compute", "v2.1"),
            ServiceType::Network => ("network", "v2.0"),
            ServiceType::Identity => ("identity", "v3"),
            other => return Err(SessionError::NoEndpoint(other.to_string())),
        };
        let url = self
            .catalog
            .url(catalog_type, &self.interface, self.region.as_deref())
            .ok_or_else(|| SessionError::NoEndpoint(catalog_type.into()))?;
        Ok(versioned(url, version))
    }
}

impl UserSession {
    /// The unversioned-or-versioned identity URL workload clusters authenticate against
    /// (`clouds.yaml` `auth_url`), from the caller's catalog at `interface`.
    pub fn identity_url(&self, interface: &str) -> Option<String> {
        self.catalog
            .url("identity", interface, self.region.as_deref())
            .map(|u| versioned(u, "v3"))
    }

    /// The region the caller's endpoints were chosen in.
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// The first catalog URL of any of `service_types` (aliases, e.g. Cinder's `block-storage`,
    /// `volumev3`) at this session's interface and region.
    pub fn catalog_url(&self, service_types: &[&str]) -> Option<&str> {
        service_types
            .iter()
            .find_map(|t| self.catalog.url(t, &self.interface, self.region.as_deref()))
    }

    /// One JSON request as the session's user: `method` on `url`, answered with the status and
    /// the body (`Null` when empty or not JSON). Used for the few Octavia and Cinder calls the
    /// delete cleanup makes: the SDK's `load_balancer`/`block_storage` features would add their
    /// whole generated API to the build for four endpoints, and cascade deletes and Cinder's
    /// metadata filter are plain query strings anyway.
    pub async fn send_json(
        &self,
        service: &str,
        method: reqwest::Method,
        url: &str,
    ) -> Result<(u16, serde_json::Value), super::call::OpenStackError> {
        self.send_json_with(service, method, url, &[], None).await
    }

    /// [`UserSession::send_json`] with extra headers (a microversion) and a JSON body.
    pub async fn send_json_with(
        &self,
        service: &str,
        method: reqwest::Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, serde_json::Value), super::call::OpenStackError> {
        let unavailable =
            |e: reqwest::Error| super::call::OpenStackError::unavailable(service, e.without_url());
        let mut token = HeaderValue::from_str(self.token.expose_secret())
            .map_err(|e| super::call::OpenStackError::unavailable(service, e))?;
        token.set_sensitive(true);
        let started = std::time::Instant::now();
        let mut req = self
            .http
            .request(method, url)
            .header("x-auth-token", token)
            .header("accept", "application/json")
            .timeout(self.timeout);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let sent = req.send().await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                crate::telemetry::openstack_call(service, false, started.elapsed());
                return Err(unavailable(e));
            }
        };
        let status = resp.status().as_u16();
        crate::telemetry::openstack_call(service, status < 500, started.elapsed());
        let bytes = resp.bytes().await.map_err(unavailable)?;
        let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        Ok((status, body))
    }
}

impl RestClient for UserSession {
    type Error = SessionError;

    fn get_current_project(&self) -> Option<openstack_sdk_auth_core::types::Project> {
        None
    }
}

#[async_trait]
impl AsyncClient for UserSession {
    async fn rest_async(
        &self,
        mut request: http::request::Builder,
        body: Vec<u8>,
    ) -> Result<http::Response<Bytes>, ApiError<SessionError>> {
        let mut token = HeaderValue::from_str(self.token.expose_secret())
            .map_err(|e| ApiError::client(SessionError::Request(e.to_string())))?;
        token.set_sensitive(true);
        if let Some(h) = request.headers_mut() {
            h.insert("x-auth-token", token);
        }
        let req: reqwest::Request = request
            .body(body)
            .map_err(|e| ApiError::client(SessionError::Request(e.to_string())))?
            .try_into()
            .map_err(|e: reqwest::Error| ApiError::client(SessionError::Http(e)))?;
        let rsp = self
            .http
            .execute(req)
            .await
            .map_err(|e| ApiError::client(SessionError::Http(e)))?;
        let mut out = http::Response::builder().status(rsp.status());
        if let Some(h) = out.headers_mut() {
            h.extend(rsp.headers().clone());
        }
        let bytes = rsp
            .bytes()
            .await
            .map_err(|e| ApiError::client(SessionError::Http(e)))?;
        out.body(bytes)
            .map_err(|e| ApiError::client(SessionError::Request(e.to_string())))
    }

    async fn rest_read_body_async(
        &self,
        _request: http::request::Builder,
        _body: BoxedAsyncRead,
    ) -> Result<http::Response<Bytes>, ApiError<SessionError>> {
        Err(ApiError::client(SessionError::Unsupported))
    }

    async fn download_async(
        &self,
        _request: http::request::Builder,
        _body: Vec<u8>,
    ) -> Result<(http::HeaderMap, BoxedAsyncRead), ApiError<SessionError>> {
        Err(ApiError::client(SessionError::Unsupported))
    }

    async fn get_service_endpoint(
        &self,
        service_type: &ServiceType,
        version: Option<&ApiVersion>,
    ) -> Result<ServiceEndpoint, ApiError<SessionError>> {
        let url = self.endpoint_url(service_type).map_err(ApiError::client)?;
        let parsed = url::Url::parse(&url)
            .map_err(|e| ApiError::client(SessionError::Request(format!("{url}: {e}"))))?;
        let version = version
            .cloned()
            .or_else(|| ApiVersion::from_endpoint_url(&url))
            .unwrap_or_else(|| ApiVersion::new(2, 0));
        let mut ep = ServiceEndpoint::new(parsed, version);
        if *service_type == ServiceType::Compute {
            // Nova's floor is 2.1; the SDK's `_20` requests would otherwise ask for 2.0 (406).
            ep.set_min_version(Some("2.1"));
        }
        Ok(ep)
    }
}
