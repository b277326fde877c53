//! `/v1/mservices`, `/v1/stats` and `/v1/quotas` handlers.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::error::ApiResult;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::schemas::{
    BadRequest, Forbidden, MagnumError, NotFound, QuotaCreate, QuotaListQuery, QuotaUpdate,
    StatsQuery,
};
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::misc::{self, QuotaQuery};
use crate::service::views::{MServiceList, Quota, QuotaList, Stats};

/// Replicas of this service and whether they are up (admin).
#[utoipa::path(get, path = "/v1/mservices", tag = "mservices",
    responses((status = 200, description = "The replicas", body = MServiceList),
              (status = 400, description = "An unknown query argument", body = MagnumError),
              Forbidden))]
pub async fn mservices(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
) -> ApiResult<Json<MServiceList>> {
    args.only(&[])?;
    Ok(Json(misc::mservices(&app, &caller).await?))
}

/// Cluster and node counts.
#[utoipa::path(get, path = "/v1/stats", tag = "stats",
    params(StatsQuery),
    responses((status = 200, description = "The counts", body = Stats),
              BadRequest,
              (status = 403, description = "Not allowed by policy, or another project's counts \
                                            asked by a non-admin", body = MagnumError)))]
pub async fn stats(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
) -> ApiResult<Json<Stats>> {
    args.only(&["project_id", "type"])?;
    Ok(Json(
        misc::stats(&app, &caller, args.get("type"), args.get("project_id")).await?,
    ))
}

/// List quotas (admin); `all_tenants=true` for every project.
#[utoipa::path(get, path = "/v1/quotas", tag = "quotas",
    params(QuotaListQuery),
    responses((status = 200, description = "A page of quotas", body = QuotaList),
              BadRequest, Forbidden, NotFound))]
pub async fn quota_list(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<QuotaList>> {
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
    params(("project_id" = String, Path, description = "Project", min_length = 1),
           ("resource" = String, Path, description = "`Cluster`", min_length = 1)),
    responses((status = 200, description = "The quota", body = Quota),
              (status = 403, description = "Not allowed by policy, or another project's quota \
                                            asked by a non-admin", body = MagnumError)))]
pub async fn quota_show(
    State(app): State<AppState>,
    caller: Caller,
    Path((project, resource)): Path<(String, String)>,
) -> ApiResult<Json<Quota>> {
    Ok(Json(misc::get(&app, &caller, &project, &resource).await?))
}

/// Create a quota (admin); 201.
#[utoipa::path(post, path = "/v1/quotas", tag = "quotas",
    request_body(content = QuotaCreate, content_type = "application/json"),
    responses((status = 201, description = "The quota", body = Quota),
              Forbidden,
              (status = 404, description = "The project does not exist (with Keystone)", body = MagnumError),
              (status = 409, description = "The project has a quota for this resource", body = MagnumError)))]
pub async fn quota_create(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Quota>)> {
    Ok((
        StatusCode::CREATED,
        Json(misc::create(&app, &caller, &body).await?),
    ))
}

/// Change a quota's hard limit (admin); 202. The body is a Quota object, not a JSON-PATCH.
#[utoipa::path(patch, path = "/v1/quotas/{project_id}/{resource}", tag = "quotas",
    params(("project_id" = String, Path, description = "Project", min_length = 1),
           ("resource" = String, Path, description = "`Cluster`", min_length = 1)),
    request_body(content = QuotaUpdate, content_type = "application/json"),
    responses((status = 202, description = "The quota", body = Quota),
              Forbidden, NotFound))]
pub async fn quota_update(
    State(app): State<AppState>,
    caller: Caller,
    Path((project, resource)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Quota>)> {
    Ok((
        StatusCode::ACCEPTED,
        Json(misc::update(&app, &caller, &project, &resource, &body).await?),
    ))
}

/// Delete a quota (admin).
#[utoipa::path(delete, path = "/v1/quotas/{project_id}/{resource}", tag = "quotas",
    params(("project_id" = String, Path, description = "Project", min_length = 1),
           ("resource" = String, Path, description = "`Cluster`", min_length = 1)),
    responses((status = 204, description = "Deleted"), Forbidden, NotFound))]
pub async fn quota_delete(
    State(app): State<AppState>,
    caller: Caller,
    Path((project, resource)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    misc::delete(&app, &caller, &project, &resource).await?;
    Ok(StatusCode::NO_CONTENT)
}
