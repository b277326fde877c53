//! `/v1/certificates` and `/v1/credentials` handlers.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::body::uuid_body;
use super::context::Cloud;
use super::error::ApiResult;
use super::extract::RequestId;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::microversion::Mv;
use super::schemas::{
    CaCertTypeQuery, CertificateSign, Conflict, Forbidden, MagnumError, MinVersion, NotFound,
    UuidBody,
};
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::views::{Certificate, SignedCertificate};
use crate::service::{certificates, credentials};

/// The first version with credential rotation.
const CREDENTIALS_SINCE: u32 = 12;

/// The cluster's CA certificate.
#[utoipa::path(get, path = "/v1/certificates/{ident}", tag = "certificates",
    params(("ident" = String, Path, description = "Cluster UUID or name", min_length = 1),
           CaCertTypeQuery),
    responses((status = 200, description = "The CA certificate", body = Certificate),
              (status = 400, description = "An unknown query argument or `ca_cert_type`, or a \
                                            cluster without a CA yet", body = MagnumError),
              Forbidden, NotFound, Conflict))]
pub async fn show(
    State(app): State<AppState>,
    caller: Caller,
    BaseUrl(base): BaseUrl,
    Path(ident): Path<String>,
    args: QueryArgs,
) -> ApiResult<Json<Certificate>> {
    args.only(&["ca_cert_type"])?;
    let kind = certificates::ca_kind(args.get("ca_cert_type"))?;
    Ok(Json(
        certificates::show(&app, &caller, &base, &ident, kind).await?,
    ))
}

/// Sign a CSR with the cluster's CA; 201.
#[utoipa::path(post, path = "/v1/certificates", tag = "certificates",
    request_body(content = CertificateSign, content_type = "application/json"),
    responses((status = 201, description = "The signed certificate", body = SignedCertificate),
              Forbidden, Conflict))]
pub async fn sign(
    State(app): State<AppState>,
    caller: Caller,
    BaseUrl(base): BaseUrl,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<SignedCertificate>)> {
    Ok((
        StatusCode::CREATED,
        Json(certificates::sign(&app, &caller, &base, &body).await?),
    ))
}

/// Rotate the cluster's CA; 202.
#[utoipa::path(patch, path = "/v1/certificates/{ident}", tag = "certificates",
    params(("ident" = String, Path, description = "Cluster UUID or name", min_length = 1)),
    responses((status = 202, description = "Accepted: the cluster's uuid", body = UuidBody),
              (status = 400, description = "The cluster cannot rotate its CA now (its status, \
                                            or a backend without CAs)", body = MagnumError),
              Forbidden, NotFound, Conflict))]
pub async fn rotate_ca(
    State(app): State<AppState>,
    caller: Caller,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
) -> ApiResult<(StatusCode, Json<UuidBody>)> {
    let uuid = certificates::rotate_ca(&app, &caller, &ident, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}

/// Rotate the cluster's cloud credential; API ≥ 1.12.
#[utoipa::path(patch, path = "/v1/credentials/{ident}", tag = "credentials",
    params(("ident" = String, Path, description = "Cluster UUID or name", min_length = 1),
           MinVersion<CREDENTIALS_SINCE>),
    responses((status = 202, description = "Accepted: the cluster's uuid", body = UuidBody),
              (status = 400, description = "The cluster cannot rotate its credential now (its \
                                            status, or a backend without credentials)", body = MagnumError),
              Forbidden, NotFound, Conflict))]
pub async fn rotate_credential(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
) -> ApiResult<(StatusCode, Json<UuidBody>)> {
    mv.require(CREDENTIALS_SINCE, "rotate")?;
    let uuid = credentials::rotate(&app, &caller, cloud.as_ref(), &ident, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}
