//! One call to an OpenStack service: made within its timeout, counted in the metrics, and its
//! failure as an [`OpenStackError`] the API layer maps to a status.

/// What can go wrong talking to OpenStack. The API layer maps each variant to a status.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenStackError {
    /// The caller's token is unknown, expired or revoked (401).
    #[error("the token is not valid")]
    InvalidToken,
    /// A service could not be reached, timed out or answered unexpectedly (503).
    #[error("{service} is unavailable: {detail}")]
    Unavailable { service: String, detail: String },
    /// The remote service answered 404.
    #[error("{0} not found")]
    NotFound(String),
    /// The remote service answered 403.
    #[error("{0} forbidden")]
    Forbidden(String),
    /// The remote service does not serve the microversion asked for (406); the caller may ask
    /// again without it (503 where nobody does).
    #[error("{0} does not serve the microversion asked for")]
    NotAcceptable(String),
}

impl OpenStackError {
    pub fn unavailable(service: &str, detail: impl std::fmt::Display) -> Self {
        Self::Unavailable {
            service: service.to_string(),
            detail: detail.to_string(),
        }
    }
}

/// One SDK request on `client` within `timeout`, its errors mapped to ours. Every call to
/// Keystone, Glance, Nova and Neutron goes through here.
pub(crate) async fn query<T, E, C>(
    client: &C,
    service: &str,
    timeout: std::time::Duration,
    ep: E,
) -> Result<T, OpenStackError>
where
    E: openstack_sdk_core::api::RestEndpoint + Sync,
    C: openstack_sdk_core::api::AsyncClient + Sync,
    T: serde::de::DeserializeOwned + Send + 'static,
{
    use openstack_sdk_core::api::QueryAsync;
    let started = std::time::Instant::now();
    let r = match tokio::time::timeout(timeout, ep.query_async(client)).await {
        Ok(r) => r.map_err(|e| from_api_error(service, e)),
        Err(_) => Err(OpenStackError::unavailable(
            service,
            format!("no answer within {}s", timeout.as_secs()),
        )),
    };
    // A 404 is an answer, not a failure of the service.
    let ok = matches!(&r, Ok(_) | Err(OpenStackError::NotFound(_)));
    crate::telemetry::openstack_call(service, ok, started.elapsed());
    r
}

/// As [`query`], with the service's 404 as `None`.
pub(crate) async fn query_found<T, E, C>(
    client: &C,
    service: &str,
    timeout: std::time::Duration,
    ep: E,
) -> Result<Option<T>, OpenStackError>
where
    E: openstack_sdk_core::api::RestEndpoint + Sync,
    C: openstack_sdk_core::api::AsyncClient + Sync,
    T: serde::de::DeserializeOwned + Send + 'static,
{
    match query(client, service, timeout, ep).await {
        Ok(v) => Ok(Some(v)),
        Err(OpenStackError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A request builder refused its input (a value that cannot be sent, e.g. in a header).
pub(crate) fn builder_error(service: &str, e: impl std::fmt::Display) -> OpenStackError {
    OpenStackError::unavailable(service, format!("building the request: {e}"))
}

/// Turns an SDK query error into ours: 401/404/403 keep their meaning, everything else (connection
/// refused, timeouts, 5xx, undecodable answers) means the service is unavailable.
pub(crate) fn from_api_error<E>(
    service: &str,
    e: openstack_sdk_core::api::ApiError<E>,
) -> OpenStackError
where
    E: std::error::Error + Send + Sync + 'static,
{
    use openstack_sdk_core::api::ApiError as A;
    let status = match &e {
        A::OpenStack { status, .. }
        | A::OpenStackService { status, .. }
        | A::OpenStackUnrecognized { status, .. } => Some(*status),
        _ => None,
    };
    match status.map(|s| s.as_u16()) {
        // The token the call was made with is no longer accepted (expired or revoked).
        Some(401) => OpenStackError::InvalidToken,
        Some(404) => OpenStackError::NotFound(service.to_string()),
        Some(403) => OpenStackError::Forbidden(service.to_string()),
        Some(406) => OpenStackError::NotAcceptable(service.to_string()),
        _ => OpenStackError::unavailable(service, first_line(&e.to_string())),
    }
}

/// SDK errors span several lines (uri, status, body); logs and messages want the first.
fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
