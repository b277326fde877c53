//! Response bodies the handlers share: pre-serialised JSON, the `{"uuid": …}` of asynchronous
//! operations.

use axum::response::{IntoResponse, Response};

use super::schemas;

/// A serialised JSON body sent as `axum::Json` would send it.
pub fn json_bytes(body: bytes::Bytes) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// The `{"uuid": ...}` body of asynchronous cluster operations.
pub fn uuid_body(uuid: uuid::Uuid) -> schemas::UuidBody {
    schemas::UuidBody { uuid }
}
