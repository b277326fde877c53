//! `/v1/clustertemplates` handlers.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::context::Cloud;
use super::error::ApiResult;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::pagination::list_query;
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::{templates, views};

/// List cluster templates (always the full form).
#[utoipa::path(get, path = "/v1/clustertemplates", tag = "clustertemplates",
    params(("marker" = Option<String>, Query, description = "UUID of the last template of the previous page"),
           ("limit" = Option<i64>, Query, description = "Page size, capped at [api] max_limit"),
           ("sort_key" = Option<String>, Query, description = "Column to sort by (default id)"),
           ("sort_dir" = Option<String>, Query, description = "asc or desc")),
    responses((status = 200, description = "`{clustertemplates: [...], next?}`")))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    list_templates(&app, &caller, &args, false, &base).await
}

/// Same as the list: templates are always shown in full.
#[utoipa::path(get, path = "/v1/clustertemplates/detail", tag = "clustertemplates",
    responses((status = 200, description = "`{clustertemplates: [...], next?}`")))]
pub async fn detail(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    list_templates(&app, &caller, &args, true, &base).await
}

/// Show a template by UUID or name.
#[utoipa::path(get, path = "/v1/clustertemplates/{ident}", tag = "clustertemplates",
    params(("ident" = String, Path, description = "UUID or name")),
    responses((status = 200, description = "The template"), (status = 404, description = "Not found"),
              (status = 409, description = "Name is ambiguous")))]
pub async fn show(
    State(app): State<AppState>,
    caller: Caller,
    Path(ident): Path<String>,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<Value>> {
    let t = templates::get(&app, &caller, &ident).await?;
    Ok(Json(views::template(&t, &base)))
}

/// Create a template; 201 with `Location`.
#[utoipa::path(post, path = "/v1/clustertemplates", tag = "clustertemplates",
    request_body(content = Object, description = "ClusterTemplate attributes"),
    responses((status = 201, description = "The new template"), (status = 400, description = "Invalid input"),
              (status = 403, description = "Not allowed to publish")))]
pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    BaseUrl(base): BaseUrl,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let t = templates::create(&app, &caller, cloud.as_ref(), &body).await?;
    let location = format!("{base}/v1/clustertemplates/{}", t.uuid);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(views::template(&t, &base)),
    )
        .into_response())
}

/// JSON-PATCH a template; 200 with the template.
#[utoipa::path(patch, path = "/v1/clustertemplates/{ident}", tag = "clustertemplates",
    params(("ident" = String, Path, description = "UUID or name")),
    request_body(content = Object, description = "RFC 6902 operations (add/replace/remove)"),
    responses((status = 200, description = "The updated template"),
              (status = 400, description = "Invalid patch or template in use")))]
pub async fn update(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    Path(ident): Path<String>,
    BaseUrl(base): BaseUrl,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<Value>> {
    let t = templates::update(&app, &caller, cloud.as_ref(), &ident, &body).await?;
    Ok(Json(views::template(&t, &base)))
}

/// Delete a template that no cluster uses.
#[utoipa::path(delete, path = "/v1/clustertemplates/{ident}", tag = "clustertemplates",
    params(("ident" = String, Path, description = "UUID or name")),
    responses((status = 204, description = "Deleted"), (status = 400, description = "Template in use")))]
pub async fn delete(
    State(app): State<AppState>,
    caller: Caller,
    Path(ident): Path<String>,
) -> ApiResult<StatusCode> {
    templates::delete(&app, &caller, &ident).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_templates(
    app: &AppState,
    caller: &Caller,
    args: &QueryArgs,
    detail: bool,
    base: &str,
) -> ApiResult<Json<Value>> {
    args.only(&["marker", "limit", "sort_key", "sort_dir"])?;
    let q = list_query(args, templates::SORT_KEYS, app.config.api.max_limit)?;
    Ok(Json(templates::list(app, caller, &q, detail, base).await?))
}
