//! `/v1/mservices`, `/v1/stats` and `/v1/quotas` handlers.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::error::ApiResult;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::misc::{self, QuotaQuery};

/// Replicas of this service and whether they are up (admin).
#[utoipa::path(get, path = "/v1/mservices", tag = "mservices",
    responses((status = 200, description = "`{mservices: [...]}`"), (status = 403, description = "Not an admin")))]
pub async fn mservices(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
) -> ApiResult<Json<Value>> {
    args.only(&[])?;
    Ok(Json(misc::mservices(&app, &caller).await?))
}

/// Cluster and node counts.
#[utoipa::path(get, path = "/v1/stats", tag = "stats",
    params(("project_id" = Option<String>, Query, description = "Project to count (admins: any)"),
           ("type" = Option<String>, Query, description = "Only `cluster`")),
    responses((status = 200, description = "`{clusters, nodes}`")))]
pub async fn stats(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
) -> ApiResult<Json<Value>> {
    args.only(&["project_id", "type"])?;
    Ok(Json(
        misc::stats(&app, &caller, args.get("type"), args.get("project_id")).await?,
    ))
}

/// List quotas (admin); `all_tenants=true` for every project.
#[utoipa::path(get, path = "/v1/quotas", tag = "quotas",
    params(("all_tenants" = Option<bool>, Query, description = "Every project's quotas"),
           ("marker" = Option<i64>, Query, description = "Integer id of the last quota of the previous page")),
    responses((status = 200, description = "`{quotas: [...], next?}`")))]
pub async fn quota_list(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    args.only(&["marker", "limit", "sort_key", "sort_dir", "all_tenants"])?;
    let (limit, sort_key, desc) =
        super::pagination::common(&args, misc::QUOTA_SORT_KEYS, app.config.api.max_limit)?;
    let q = QuotaQuery {
        limit,
        sort_key,
        desc,
        marker: args.int("marker")?,
        all_tenants: args.bool("all_tenants")?.unwrap_or(false),
    };
    Ok(Json(misc::list(&app, &caller, &q, &base).await?))
}

/// Show a project's quota (the configured default when none is stored).
#[utoipa::path(get, path = "/v1/quotas/{project_id}/{resource}", tag = "quotas",
    params(("project_id" = String, Path, description = "Project"), ("resource" = String, Path, description = "`Cluster`")),
    responses((status = 200, description = "The quota")))]
pub async fn quota_show(
    State(app): State<AppState>,
    caller: Caller,
    Path((project, resource)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(misc::get(&app, &caller, &project, &resource).await?))
}

/// Create a quota (admin); 201.
#[utoipa::path(post, path = "/v1/quotas", tag = "quotas",
    request_body(content = Object, description = "`{project_id, resource, hard_limit}`"),
    responses((status = 201, description = "The quota"), (status = 409, description = "Already exists")))]
pub async fn quota_create(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    Ok((
        StatusCode::CREATED,
        Json(misc::create(&app, &caller, &body).await?),
    ))
}

/// Change a quota's hard limit (admin); 202. The body is a Quota object, not a JSON-PATCH.
#[utoipa::path(patch, path = "/v1/quotas/{project_id}/{resource}", tag = "quotas",
    params(("project_id" = String, Path, description = "Project"), ("resource" = String, Path, description = "`Cluster`")),
    request_body(content = Object, description = "`{hard_limit}`"),
    responses((status = 202, description = "The quota"), (status = 404, description = "No such quota")))]
pub async fn quota_update(
    State(app): State<AppState>,
    caller: Caller,
    Path((project, resource)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    Ok((
        StatusCode::ACCEPTED,
        Json(misc::update(&app, &caller, &project, &resource, &body).await?),
    ))
}

/// Delete a quota (admin).
#[utoipa::path(delete, path = "/v1/quotas/{project_id}/{resource}", tag = "quotas",
    params(("project_id" = String, Path, description = "Project"), ("resource" = String, Path, description = "`Cluster`")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such quota")))]
pub async fn quota_delete(
    State(app): State<AppState>,
    caller: Caller,
    Path((project, resource)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    misc::delete(&app, &caller, &project, &resource).await?;
    Ok(StatusCode::NO_CONTENT)
}
