//! `/v1/certificates` and `/v1/credentials` handlers.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::context::Cloud;
use super::error::ApiResult;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::microversion::Mv;
use super::{RequestId, uuid_body};
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::{certificates, credentials};

/// The cluster's CA certificate.
#[utoipa::path(get, path = "/v1/certificates/{ident}", tag = "certificates",
    params(("ident" = String, Path, description = "Cluster UUID or name"),
           ("ca_cert_type" = Option<String>, Query, description = "kubernetes (default), etcd or front_proxy")),
    responses((status = 200, description = "`{cluster_uuid, pem, links}`"), (status = 404, description = "No such cluster")))]
pub async fn show(
    State(app): State<AppState>,
    caller: Caller,
    BaseUrl(base): BaseUrl,
    Path(ident): Path<String>,
    args: QueryArgs,
) -> ApiResult<Json<Value>> {
    args.only(&["ca_cert_type"])?;
    let kind = certificates::ca_kind(args.get("ca_cert_type"))?;
    Ok(Json(
        certificates::show(&app, &caller, &base, &ident, kind).await?,
    ))
}

/// Sign a CSR with the cluster's CA; 201.
#[utoipa::path(post, path = "/v1/certificates", tag = "certificates",
    request_body(content = Object, description = "`{cluster_uuid, csr, ca_cert_type?}`"),
    responses((status = 201, description = "`{cluster_uuid, csr, pem, links}`"), (status = 400, description = "Unknown cluster or invalid CSR")))]
pub async fn sign(
    State(app): State<AppState>,
    caller: Caller,
    BaseUrl(base): BaseUrl,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    Ok((
        StatusCode::CREATED,
        Json(certificates::sign(&app, &caller, &base, &body).await?),
    ))
}

/// Rotate the cluster's CA; 202.
#[utoipa::path(patch, path = "/v1/certificates/{ident}", tag = "certificates",
    params(("ident" = String, Path, description = "Cluster UUID or name")),
    responses((status = 202, description = "`{uuid}`")))]
pub async fn rotate_ca(
    State(app): State<AppState>,
    caller: Caller,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let uuid = certificates::rotate_ca(&app, &caller, &ident, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}

/// Rotate the cluster's cloud credential; API ≥ 1.12.
#[utoipa::path(patch, path = "/v1/credentials/{ident}", tag = "credentials",
    params(("ident" = String, Path, description = "Cluster UUID or name")),
    responses((status = 202, description = "`{uuid}`"), (status = 406, description = "Below 1.12")))]
pub async fn rotate_credential(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
) -> ApiResult<(StatusCode, Json<Value>)> {
    mv.require(12, "rotate")?;
    let uuid = credentials::rotate(&app, &caller, cloud.as_ref(), &ident, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}
