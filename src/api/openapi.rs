//! The OpenAPI document, generated from the handlers' annotations; served and written to `openapi.yaml`.

use axum::Json;
use axum::http::header;
use axum::response::IntoResponse;
use utoipa::OpenApi;

use super::{certificates, clusters, clustertemplates, misc, nodegroups, versions};

#[derive(OpenApi)]
#[openapi(
    info(title = "magnum-capi", description = "OpenStack Magnum (container-infra) v1 API served by magnum-capi. Send `OpenStack-API-Version: container-infra 1.x` (1.1–1.14; `latest` allowed)."),
    paths(
        versions::root, versions::v1, versions::healthcheck,
        clustertemplates::list, clustertemplates::detail, clustertemplates::show,
        clustertemplates::create, clustertemplates::update, clustertemplates::delete,
        clusters::list, clusters::detail, clusters::show, clusters::create, clusters::update,
        clusters::delete, clusters::resize, clusters::upgrade,
        nodegroups::list, nodegroups::show, nodegroups::create, nodegroups::update, nodegroups::delete,
        certificates::show, certificates::sign, certificates::rotate_ca, certificates::rotate_credential,
        misc::mservices, misc::stats, misc::quota_list, misc::quota_show, misc::quota_create,
        misc::quota_update, misc::quota_delete,
    ),
    tags((name = "clusters"), (name = "clustertemplates"), (name = "nodegroups"))
)]
pub struct ApiDoc;

/// The spec as YAML (what `magnum-capi openapi` prints and `openapi.yaml` holds).
pub fn yaml_text() -> Result<String, String> {
    ApiDoc::openapi().to_yaml().map_err(|e| e.to_string())
}

pub async fn json() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}

pub async fn yaml() -> impl IntoResponse {
    match yaml_text() {
        Ok(y) => ([(header::CONTENT_TYPE, "application/yaml")], y).into_response(),
        Err(e) => super::error::ApiError::Internal(e).into_response(),
    }
}
