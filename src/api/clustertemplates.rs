//! `/v1/clustertemplates` handlers.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::response::Response;

use super::context::Cloud;
use super::error::ApiResult;
use super::extract::{BaseUrl, JsonBody, QueryArgs};
use super::pagination::list_query;
use super::schemas::{
    BadRequest, ClusterTemplateCreate, Conflict, Forbidden, JsonPatch, NotFound, TemplateListQuery,
};
use crate::app::AppState;
use crate::domain::policy::Caller;
use crate::service::templates;
use crate::service::views::{self, ClusterTemplate, ClusterTemplateList};

/// List cluster templates (always the full form).
#[utoipa::path(get, path = "/v1/clustertemplates", tag = "clustertemplates",
    params(TemplateListQuery),
    responses((status = 200, description = "A page of templates", body = ClusterTemplateList),
              BadRequest, Forbidden, NotFound))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Response> {
    list_templates(&app, &caller, &args, false, &base).await
}

/// Same as the list: templates are always shown in full.
#[utoipa::path(get, path = "/v1/clustertemplates/detail", tag = "clustertemplates",
    params(TemplateListQuery),
    responses((status = 200, description = "A page of templates", body = ClusterTemplateList),
              BadRequest, Forbidden, NotFound))]
pub async fn detail(
    State(app): State<AppState>,
    caller: Caller,
    args: QueryArgs,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Response> {
    list_templates(&app, &caller, &args, true, &base).await
}

/// Show a template by UUID or name.
#[utoipa::path(get, path = "/v1/clustertemplates/{ident}", tag = "clustertemplates",
    params(("ident" = String, Path, description = "UUID or name", min_length = 1)),
    responses((status = 200, description = "The template", body = ClusterTemplate),
              Forbidden, NotFound, Conflict))]
pub async fn show(
    State(app): State<AppState>,
    caller: Caller,
    Path(ident): Path<String>,
    BaseUrl(base): BaseUrl,
) -> ApiResult<Json<ClusterTemplate>> {
    let t = templates::get(&app, &caller, &ident).await?;
    Ok(Json(views::template(&t, &base)))
}

/// Create a template; 201 with `Location`.
#[utoipa::path(post, path = "/v1/clustertemplates", tag = "clustertemplates",
    request_body(content = ClusterTemplateCreate, content_type = "application/json"),
    responses((status = 201, description = "The new template", body = ClusterTemplate,
               headers(("Location" = String, description = "The template's URL"))),
              (status = 403, description = "Not allowed by policy, or not allowed to publish \
                                            (`public`/`hidden`)", body = super::schemas::MagnumError),
              (status = 404, description = "The image, a flavor or a network does not exist \
                                            (only with a cloud to ask)", body = super::schemas::MagnumError),
              (status = 409, description = "A template with this `uuid` exists, or the image \
                                            name is ambiguous", body = super::schemas::MagnumError)))]
pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    BaseUrl(base): BaseUrl,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, [(HeaderName, String); 1], Json<ClusterTemplate>)> {
    let t = templates::create(&app, &caller, cloud.as_ref(), &body).await?;
    let location = format!("{base}/v1/clustertemplates/{}", t.uuid);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(views::template(&t, &base)),
    ))
}

/// JSON-PATCH a template; 200 with the template. While clusters use it, only `public` (to
/// true) may change (400 otherwise).
#[utoipa::path(patch, path = "/v1/clustertemplates/{ident}", tag = "clustertemplates",
    params(("ident" = String, Path, description = "UUID or name", min_length = 1)),
    request_body(content = JsonPatch, content_type = "application/json"),
    responses((status = 200, description = "The updated template", body = ClusterTemplate),
              Forbidden, NotFound, Conflict))]
pub async fn update(
    State(app): State<AppState>,
    caller: Caller,
    Cloud(cloud): Cloud,
    Path(ident): Path<String>,
    BaseUrl(base): BaseUrl,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<ClusterTemplate>> {
    let t = templates::update(&app, &caller, cloud.as_ref(), &ident, &body).await?;
    Ok(Json(views::template(&t, &base)))
}

/// Delete a template that no cluster uses.
#[utoipa::path(delete, path = "/v1/clustertemplates/{ident}", tag = "clustertemplates",
    params(("ident" = String, Path, description = "UUID or name", min_length = 1)),
    responses((status = 204, description = "Deleted"),
              (status = 400, description = "Clusters use the template", body = super::schemas::MagnumError),
              Forbidden, NotFound, Conflict))]
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
) -> ApiResult<Response> {
    args.only(&["marker", "limit", "sort_key", "sort_dir"])?;
    let q = list_query(args, &templates::SORT_KEYS, app.config.api.max_limit)?;
    // The serialised page (cached while no template changes), as `Json` would send it.
    let body = templates::list_json(app, caller, &q, detail, base).await?;
    Ok(super::body::json_bytes(body))
}
