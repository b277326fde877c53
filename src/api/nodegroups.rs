//! `/v1/clusters/{ident}/nodegroups` handlers (API ≥ 1.9).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::RequestId;
use super::context::Cloud;
use super::error::ApiResult;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::microversion::Mv;
use super::pagination::list_query;
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::{nodegroups, views};

/// Magnum reports every nodegroup method below 1.9 under this name.
const GATE_NAME: &str = "delete";

fn gate(mv: Mv) -> ApiResult<()> {
    mv.require(9, GATE_NAME)
}

/// List a cluster's nodegroups (short form), optionally by `role`.
#[utoipa::path(get, path = "/v1/clusters/{ident}/nodegroups", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name"),
           ("role" = Option<String>, Query, description = "Only this role")),
    responses((status = 200, description = "`{nodegroups: [...], next?}`"), (status = 406, description = "Below 1.9")))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    Path(ident): Path<String>,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    gate(mv)?;
    args.only(&["marker", "limit", "sort_key", "sort_dir", "role"])?;
    let q = list_query(&args, nodegroups::SORT_KEYS, app.config.api.max_limit)?;
    Ok(Json(
        nodegroups::list(&app, &caller, &ident, &q, args.get("role"), &base).await?,
    ))
}

/// Show a nodegroup by integer id, UUID or name.
#[utoipa::path(get, path = "/v1/clusters/{ident}/nodegroups/{ng}", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name"),
           ("ng" = String, Path, description = "Nodegroup id, UUID or name")),
    responses((status = 200, description = "The nodegroup")))]
pub async fn show(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    Path((ident, ng)): Path<(String, String)>,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    gate(mv)?;
    let (n, c) = nodegroups::get(&app, &caller, &ident, &ng).await?;
    Ok(Json(views::nodegroup_full(&n, &c.labels.0, &base)))
}

/// Create a worker nodegroup; 202 with the full nodegroup.
#[utoipa::path(post, path = "/v1/clusters/{ident}/nodegroups", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name")),
    request_body(content = Object, description = "NodeGroup attributes"),
    responses((status = 202, description = "The new nodegroup"), (status = 409, description = "Invalid counts, labels or taints")))]
#[allow(clippy::too_many_arguments)] // one per request part; a struct would only rename them
pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path(ident): Path<String>,
    BaseUrl(base): BaseUrl,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    gate(mv)?;
    let (n, c) = nodegroups::create(&app, &caller, cloud.as_ref(), &ident, &body, &rid).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(views::nodegroup_full(&n, &c.labels.0, &base)),
    ))
}

/// JSON-PATCH min/max counts, node labels and taints; 202 with the full nodegroup.
#[utoipa::path(patch, path = "/v1/clusters/{ident}/nodegroups/{ng}", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name"),
           ("ng" = String, Path, description = "Nodegroup id, UUID or name")),
    request_body(content = Object, description = "RFC 6902 operations"),
    responses((status = 202, description = "The nodegroup")))]
#[allow(clippy::too_many_arguments)] // one per request part; a struct would only rename them
pub async fn update(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path((ident, ng)): Path<(String, String)>,
    BaseUrl(base): BaseUrl,
    RequestId(rid): RequestId,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    gate(mv)?;
    let (n, c) =
        nodegroups::update(&app, &caller, cloud.as_ref(), &ident, &ng, &body, &rid).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(views::nodegroup_full(&n, &c.labels.0, &base)),
    ))
}

/// Delete a non-default nodegroup.
#[utoipa::path(delete, path = "/v1/clusters/{ident}/nodegroups/{ng}", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name"),
           ("ng" = String, Path, description = "Nodegroup id, UUID or name")),
    responses((status = 204, description = "Deletion recorded"), (status = 400, description = "Default nodegroup")))]
pub async fn delete(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    mv: Mv,
    Path((ident, ng)): Path<(String, String)>,
    RequestId(rid): RequestId,
) -> ApiResult<StatusCode> {
    gate(mv)?;
    nodegroups::delete(&app, &caller, cloud.as_ref(), &ident, &ng, &rid).await?;
    Ok(StatusCode::NO_CONTENT)
}
