//! `/v1/clusters` handlers, including `actions/resize` and `actions/upgrade`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::context::Cloud;
use super::error::ApiResult;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::microversion::Mv;
use super::pagination::list_query;
use super::{RequestId, uuid_body};
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::{clusters, views};

/// List clusters (short form).
#[utoipa::path(get, path = "/v1/clusters", tag = "clusters",
    params(("marker" = Option<String>, Query, description = "UUID of the last cluster of the previous page"),
           ("limit" = Option<i64>, Query, description = "Page size"),
           ("sort_key" = Option<String>, Query, description = "Column to sort by"),
           ("sort_dir" = Option<String>, Query, description = "asc or desc")),
    responses((status = 200, description = "`{clusters: [...], next?}`")))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    list_clusters(&app, &caller, mv, &args, false, &base).await
}

/// List clusters (full form).
#[utoipa::path(get, path = "/v1/clusters/detail", tag = "clusters",
    responses((status = 200, description = "`{clusters: [...], next?}`")))]
pub async fn detail(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    list_clusters(&app, &caller, mv, &args, true, &base).await
}

/// Show a cluster by UUID or name.
#[utoipa::path(get, path = "/v1/clusters/{ident}", tag = "clusters",
    params(("ident" = String, Path, description = "UUID or name")),
    responses((status = 200, description = "The cluster"), (status = 404, description = "Not found")))]
pub async fn show(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    Path(ident): Path<String>,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    let v = clusters::get(&app, &caller, &ident).await?;
    let s = views::summarize(v.nodegroups.iter());
    Ok(Json(views::cluster_full(
        &v.cluster,
        &s,
        &v.template_labels,
        &base,
        mv.0,
    )))
}

/// Create a cluster: the row exists (CREATE_IN_PROGRESS) before the 202 is sent.
#[utoipa::path(post, path = "/v1/clusters", tag = "clusters",
    request_body(content = Object, description = "Cluster attributes"),
    responses((status = 202, description = "`{uuid}`"), (status = 400, description = "Invalid input"),
              (status = 403, description = "Quota exceeded")))]
pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let uuid = clusters::create(&app, &caller, cloud.as_ref(), mv.0, &body, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}

/// JSON-PATCH `node_count`, `health_status`, `health_status_reason`.
#[utoipa::path(patch, path = "/v1/clusters/{ident}", tag = "clusters",
    params(("ident" = String, Path, description = "UUID or name"),
           ("rollback" = Option<bool>, Query, description = "Accepted from 1.3")),
    request_body(content = Object, description = "RFC 6902 operations"),
    responses((status = 202, description = "`{uuid}`")))]
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
) -> ApiResult<(StatusCode, Json<Value>)> {
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
    params(("ident" = String, Path, description = "UUID or name")),
    responses((status = 204, description = "Deletion recorded")))]
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
    params(("ident" = String, Path, description = "UUID or name")),
    request_body(content = Object, description = "`{node_count, nodes_to_remove?, nodegroup?}`"),
    responses((status = 202, description = "`{uuid}`")))]
pub async fn resize(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    mv.require(7, "resize")?;
    let uuid = clusters::resize(&app, &caller, cloud.as_ref(), mv.0, &ident, &body, &rid).await?;
    Ok((StatusCode::ACCEPTED, Json(uuid_body(uuid))))
}

/// Upgrade to another template; API ≥ 1.8.
#[utoipa::path(post, path = "/v1/clusters/{ident}/actions/upgrade", tag = "clusters",
    params(("ident" = String, Path, description = "UUID or name")),
    request_body(content = Object, description = "`{cluster_template, max_batch_size?, nodegroup?}`"),
    responses((status = 202, description = "`{uuid}`")))]
pub async fn upgrade(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path(ident): Path<String>,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    mv.require(7, "upgrade")?;
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
) -> ApiResult<Json<Value>> {
    args.only(&["marker", "limit", "sort_key", "sort_dir"])?;
    let q = list_query(args, clusters::SORT_KEYS, app.config.api.max_limit)?;
    Ok(Json(
        clusters::list(app, caller, mv.0, &q, detail, base).await?,
    ))
}
