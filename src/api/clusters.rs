//! `/v1/clusters` handlers, including `actions/resize` and `actions/upgrade`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::body::{json_bytes, uuid_body};
use super::context::Cloud;
use super::error::ApiResult;
use super::extract::RequestId;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::microversion::Mv;
use super::pagination::list_query;
use super::schemas::{
    BadRequest, ClusterCreate, ClusterListQuery, ClusterResize, ClusterUpgrade, Conflict,
    Forbidden, JsonPatch, MagnumError, MinVersion, NotFound, RollbackQuery, UuidBody,
};
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::clusters;
use crate::service::views::{Cluster, ClusterDetailList, ClusterSummaryList};

/// The first version with `actions/resize` and `actions/upgrade`.
const ACTIONS_SINCE: u32 = 7;
/// The first version whose upgrades are carried out: 1.7 has the route but refuses every
/// upgrade (400), as Magnum does, so the document offers upgrades from 1.8.
const UPGRADE_SINCE: u32 = 8;

/// List clusters (short form).
#[utoipa::path(get, path = "/v1/clusters", tag = "clusters",
    params(ClusterListQuery),
    responses((status = 200, description = "A page of clusters", body = ClusterSummaryList),
              BadRequest, Forbidden, NotFound))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Response> {
    list_clusters(&app, &caller, mv, &args, false, &base).await
}

/// List clusters (full form).
#[utoipa::path(get, path = "/v1/clusters/detail", tag = "clusters",
    params(ClusterListQuery),
    responses((status = 200, description = "A page of clusters", body = ClusterDetailList),
              BadRequest, Forbidden, NotFound))]
pub async fn detail(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Response> {
    list_clusters(&app, &caller, mv, &args, true, &base).await
}

/// Show a cluster by UUID or name.
#[utoipa::path(get, path = "/v1/clusters/{ident}", tag = "clusters",
    params(("ident" = String, Path, description = "UUID or name", min_length = 1)),
    responses((status = 200, description = "The cluster", body = Cluster),
              Forbidden, NotFound, Conflict))]
pub async fn show(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    Path(ident): Path<String>,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Response> {
    // The serialised view (reused while the cluster is unchanged), as `Json` would send it.
    Ok(json_bytes(
        clusters::get_json(&app, &caller, &ident, &base, mv.0).await?,
    ))
}

/// Create a cluster: the row exists (CREATE_IN_PROGRESS) before the 202 is sent.
#[utoipa::path(post, path = "/v1/clusters", tag = "clusters",
    request_body(content = ClusterCreate, content_type = "application/json"),
    responses((status = 202, description = "Accepted: the new cluster's uuid", body = UuidBody),
              (status = 403, description = "Not allowed by policy, the template is hidden, or \
                                            the project's quota is reached", body = MagnumError),
              (status = 404, description = "The template does not exist (from 1.10; below, 400)",
               body = MagnumError),
              Conflict))]
pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<UuidBody>)> {
    let uuid = clusters::create(&app, &caller, cloud.as_ref(), mv.0, &body, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}

/// JSON-PATCH `node_count`, `health_status`, `health_status_reason` (anything else: 400).
#[utoipa::path(patch, path = "/v1/clusters/{ident}", tag = "clusters",
    params(("ident" = String, Path, description = "UUID or name", min_length = 1), RollbackQuery),
    request_body(content = JsonPatch, content_type = "application/json"),
    responses((status = 202, description = "Accepted: the cluster's uuid", body = UuidBody),
              Forbidden, NotFound, Conflict))]
#[allow(clippy::too_many_arguments)] // one per request part; a struct would only rename them
pub async fn update(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path(ident): Path<String>,
    args: QueryArgs,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<UuidBody>)> {
    if mv.at_least(3) {
        args.only(&["rollback"])?;
        args.bool("rollback")?;
    } else {
        args.only(&[])?;
    }
    let uuid = clusters::update(&app, &caller, cloud.as_ref(), mv.0, &ident, &body, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}

/// Delete a cluster (any status); it disappears (404) once the driver reports it gone.
#[utoipa::path(delete, path = "/v1/clusters/{ident}", tag = "clusters",
    params(("ident" = String, Path, description = "UUID or name", min_length = 1)),
    responses((status = 204, description = "Deletion recorded"), Forbidden, NotFound, Conflict))]
pub async fn delete(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
) -> ApiResult<StatusCode> {
    clusters::delete(&app, &caller, cloud.as_ref(), &ident, &rid).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resize a nodegroup (default worker unless named); API ≥ 1.7.
#[utoipa::path(post, path = "/v1/clusters/{ident}/actions/resize", tag = "clusters",
    params(("ident" = String, Path, description = "UUID or name", min_length = 1),
           MinVersion<ACTIONS_SINCE>),
    request_body(content = ClusterResize, content_type = "application/json"),
    responses((status = 202, description = "Accepted: the cluster's uuid", body = UuidBody),
              Forbidden, NotFound, Conflict))]
pub async fn resize(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<UuidBody>)> {
    mv.require(ACTIONS_SINCE, "resize")?;
    let uuid = clusters::resize(&app, &caller, cloud.as_ref(), mv.0, &ident, &body, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}

/// Upgrade to another template; API ≥ 1.8 (1.7: 400).
#[utoipa::path(post, path = "/v1/clusters/{ident}/actions/upgrade", tag = "clusters",
    params(("ident" = String, Path, description = "UUID or name", min_length = 1),
           MinVersion<UPGRADE_SINCE>),
    request_body(content = ClusterUpgrade, content_type = "application/json"),
    responses((status = 202, description = "Accepted: the cluster's uuid", body = UuidBody),
              Forbidden, NotFound, Conflict))]
pub async fn upgrade(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<UuidBody>)> {
    mv.require(ACTIONS_SINCE, "upgrade")?;
    let uuid = clusters::upgrade(&app, &caller, cloud.as_ref(), mv.0, &ident, &body, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}

async fn list_clusters(
    app: &AppState,
    caller: &Caller,
    mv: Mv,
    args: &QueryArgs,
    detail: bool,
    base: &str,
) -> ApiResult<Response> {
    args.only(&["marker", "limit", "sort_key", "sort_dir"])?;
    let q = list_query(args, clusters::SORT_KEYS, app.config.api.max_limit)?;
    Ok(json_bytes(
        clusters::list_json(app, caller, mv.0, &q, detail, base).await?,
    ))
}
