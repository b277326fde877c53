//! `/v1/clusters/{ident}/nodegroups` handlers (API ≥ 1.9).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::body::json_bytes;
use super::context::Cloud;
use super::error::ApiResult;
use super::extract::RequestId;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::microversion::Mv;
use super::pagination::list_query;
use super::schemas::{
    BadRequest, Conflict, Forbidden, JsonPatch, MagnumError, MinVersion, NodeGroupCreate,
    NodegroupListQuery, NotFound,
};
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::nodegroups;
use crate::service::views::{self, NodeGroup, NodeGroupList};

/// The first version with nodegroups.
const SINCE: u32 = 9;
/// Magnum reports every nodegroup method below 1.9 under this name.
const GATE_NAME: &str = "delete";

fn gate(mv: Mv) -> ApiResult<()> {
    mv.require(SINCE, GATE_NAME)
}

/// List a cluster's nodegroups (short form), optionally by `role`.
#[utoipa::path(get, path = "/v1/clusters/{ident}/nodegroups", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name", min_length = 1),
           MinVersion<SINCE>, NodegroupListQuery),
    responses((status = 200, description = "A page of nodegroups", body = NodeGroupList),
              BadRequest, Forbidden, NotFound, Conflict))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    Path(ident): Path<String>,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Response> {
    gate(mv)?;
    args.only(&["marker", "limit", "sort_key", "sort_dir", "role"])?;
    let q = list_query(&args, nodegroups::SORT_KEYS, app.config.api.max_limit)?;
    // The serialised view (reused while the cluster is unchanged), as `Json` would send it.
    Ok(json_bytes(
        nodegroups::list_json(&app, &caller, &ident, &q, args.get("role"), &base).await?,
    ))
}

/// Show a nodegroup by integer id, UUID or name.
#[utoipa::path(get, path = "/v1/clusters/{ident}/nodegroups/{ng}", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name", min_length = 1),
           ("ng" = String, Path, description = "Nodegroup id, UUID or name", min_length = 1),
           MinVersion<SINCE>),
    responses((status = 200, description = "The nodegroup", body = NodeGroup),
              Forbidden, NotFound, Conflict))]
pub async fn show(
    State(app): State<AppState>,
    caller: Caller,
    mv: Mv,
    Path((ident, ng)): Path<(String, String)>,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Response> {
    gate(mv)?;
    Ok(json_bytes(
        nodegroups::show_json(&app, &caller, &ident, &ng, &base).await?,
    ))
}

/// Create a worker nodegroup; 202 with the full nodegroup.
#[utoipa::path(post, path = "/v1/clusters/{ident}/nodegroups", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name", min_length = 1),
           MinVersion<SINCE>),
    request_body(content = NodeGroupCreate, content_type = "application/json"),
    responses((status = 202, description = "The new nodegroup", body = NodeGroup),
              Forbidden, NotFound,
              (status = 409, description = "Invalid counts, labels or taints, a duplicate name, \
                                            or the cluster's API is not up yet", body = MagnumError)))]
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
) -> ApiResult<(StatusCode, Json<NodeGroup>)> {
    gate(mv)?;
    let (n, c) = nodegroups::create(&app, &caller, cloud.as_ref(), &ident, &body, &rid).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(views::nodegroup_full(&n, &c.labels.0, &base)),
    ))
}

/// JSON-PATCH min/max counts, node labels and taints; 202 with the full nodegroup.
#[utoipa::path(patch, path = "/v1/clusters/{ident}/nodegroups/{ng}", tag = "nodegroups",
    params(("ident" = String, Path, description = "Cluster UUID or name", min_length = 1),
           ("ng" = String, Path, description = "Nodegroup id, UUID or name", min_length = 1),
           MinVersion<SINCE>),
    request_body(content = JsonPatch, content_type = "application/json"),
    responses((status = 202, description = "The nodegroup", body = NodeGroup),
              Forbidden, NotFound,
              (status = 409, description = "Invalid counts, labels or taints, or the name \
                                            matches several nodegroups", body = MagnumError)))]
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
) -> ApiResult<(StatusCode, Json<NodeGroup>)> {
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
    params(("ident" = String, Path, description = "Cluster UUID or name", min_length = 1),
           ("ng" = String, Path, description = "Nodegroup id, UUID or name", min_length = 1),
           MinVersion<SINCE>),
    responses((status = 204, description = "Deletion recorded"),
              (status = 400, description = "A default nodegroup", body = MagnumError),
              Forbidden, NotFound, Conflict))]
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
