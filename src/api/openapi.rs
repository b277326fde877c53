//! The OpenAPI document, generated from the handlers' annotations and the typed views; served
//! and written to `openapi.yaml`. [`Contract`] adds what every operation of a kind shares (the
//! version header, the authentication, version and availability errors, the body errors) so no
//! handler can forget them.

use axum::Json;
use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::schemas::{self, AuthError, MagnumError, NotAcceptableBody, UnavailableBody};
use super::{certificates, clusters, clustertemplates, misc, nodegroups, operating, versions};

#[derive(OpenApi)]
#[openapi(
    info(title = "magnum-capi", description = "OpenStack Magnum (container-infra) v1 API served by magnum-capi. Send `OpenStack-API-Version: container-infra 1.x` (1.1–1.14; `latest` allowed). Requests under `/v1/` carry a Keystone token in `X-Auth-Token` (`serve --dev`: development headers instead). Every response carries `x-openstack-request-id`."),
    paths(
        versions::root, versions::v1, versions::healthcheck,
        operating::healthz, operating::readyz, operating::metrics, json, yaml,
        clustertemplates::list, clustertemplates::detail, clustertemplates::show,
        clustertemplates::create, clustertemplates::update, clustertemplates::delete,
        clusters::list, clusters::detail, clusters::show, clusters::create, clusters::update,
        clusters::delete, clusters::resize, clusters::upgrade,
        nodegroups::list, nodegroups::show, nodegroups::create, nodegroups::update, nodegroups::delete,
        certificates::show, certificates::sign, certificates::rotate_ca, certificates::rotate_credential,
        misc::mservices, misc::stats, misc::quota_list, misc::quota_show, misc::quota_create,
        misc::quota_update, misc::quota_delete,
    ),
    components(schemas(MagnumError, AuthError, NotAcceptableBody, UnavailableBody)),
    modifiers(&Contract),
    tags((name = "clusters"), (name = "clustertemplates"), (name = "nodegroups"),
         (name = "certificates"), (name = "credentials"), (name = "quotas"), (name = "stats"),
         (name = "mservices"), (name = "versions"), (name = "operating"))
)]
pub struct ApiDoc;

/// The keys a response object may leave out (the views' `skip_serializing_if` fields); every
/// other key of a response object is always present, null when it has no value.
const MAY_BE_ABSENT: &[(&str, &[&str])] = &[
    ("Cluster", &["faults", "management_cluster"]),
    ("ClusterSummary", &["stack_id", "cluster_id"]),
    ("ClusterTemplateList", &["next"]),
    ("ClusterDetailList", &["next"]),
    ("ClusterSummaryList", &["next"]),
    ("NodeGroupList", &["next"]),
    ("QuotaList", &["next"]),
    ("Quota", &["id", "created_at", "updated_at"]),
    ("SignedCertificate", &["ca_cert_type"]),
    ("Link", &["type"]),
    ("Taint", &["value"]),
];

/// The request bodies, whose `required` lists are their mandatory fields.
const REQUEST_BODIES: &[&str] = &[
    "ClusterTemplateCreate",
    "ClusterCreate",
    "NodeGroupCreate",
    "QuotaCreate",
    "QuotaUpdate",
    "ClusterResize",
    "ClusterUpgrade",
    "CertificateSign",
    "PatchOperation",
    "JsonPatch",
];

fn error_response(description: &str, schema: &str) -> RefOr<Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(schema)))
                .build(),
        )
        .build()
        .into()
}

fn add_response(op: &mut Operation, status: &str, response: impl FnOnce() -> RefOr<Response>) {
    if !op.responses.responses.contains_key(status) {
        op.responses.responses.insert(status.into(), response());
    }
}

fn has_param(op: &Operation, name: &str) -> bool {
    op.parameters.as_ref().is_some_and(|ps| {
        ps.iter()
            .any(|p| matches!(p, RefOr::T(p) if p.name == name))
    })
}

/// What every operation of a kind shares.
struct Contract;

impl Modify for Contract {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for (path, item) in doc.paths.paths.iter_mut() {
            let versioned = path == "/v1" || path.starts_with("/v1/");
            let authenticated = path.starts_with("/v1/");
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                // Handler names repeat across resources (`list`, `show`): prefix the tag.
                if let (Some(id), Some(tag)) =
                    (&op.operation_id, op.tags.as_ref().and_then(|t| t.first()))
                {
                    op.operation_id = Some(format!("{tag}.{id}"));
                }
                // Free text parameters cannot carry NUL either (400).
                for p in op.parameters.iter_mut().flatten() {
                    if let RefOr::T(p) = p
                        && let Some(RefOr::T(Schema::Object(o))) = p.schema.as_mut()
                        && o.pattern.is_none()
                        && o.format.is_none()
                        && o.enum_values.is_none()
                        && matches!(&o.schema_type, SchemaType::Type(Type::String))
                    {
                        o.pattern = Some(schemas::NO_NUL.to_string());
                    }
                }
                if versioned {
                    if !has_param(op, "OpenStack-API-Version") {
                        op.parameters
                            .get_or_insert_with(Vec::new)
                            .insert(0, RefOr::T(schemas::version_header(1)));
                    }
                    add_response(op, "406", || {
                        error_response(
                            "`OpenStack-API-Version` malformed or outside the supported range, \
                             or the operation does not exist at the requested version",
                            "NotAcceptableBody",
                        )
                    });
                }
                if authenticated {
                    add_response(op, "401", || {
                        error_response(
                            "No `X-Auth-Token`, or one Keystone does not accept",
                            "AuthError",
                        )
                    });
                    add_response(op, "503", || {
                        error_response(
                            "Keystone, the database or the management cluster cannot be \
                             reached, or the request outlived `[http] request_timeout_secs` \
                             (then without a body); retry later",
                            "UnavailableBody",
                        )
                    });
                }
                if authenticated || op.request_body.is_some() {
                    add_response(op, "400", || {
                        error_response(
                            "Invalid input: a NUL character in the path or query, or a body \
                             that is not JSON or that the request parser or the operation's \
                             rules refuse",
                            "MagnumError",
                        )
                    });
                }
                if op.request_body.is_some() {
                    add_response(op, "415", || {
                        error_response("A body that is not JSON", "MagnumError")
                    });
                }
            }
        }
        if let Some(components) = doc.components.as_mut() {
            for (name, schema) in components.schemas.iter_mut() {
                if REQUEST_BODIES.contains(&name.as_str()) {
                    continue;
                }
                let absent = MAY_BE_ABSENT
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(&[][..], |(_, keys)| *keys);
                // A view that extends another (`#[serde(flatten)]`) is `allOf` the other's
                // reference and its own object: that object's keys are required the same way.
                let objects: Vec<&mut utoipa::openapi::Object> = match schema {
                    RefOr::T(Schema::Object(object)) => vec![object],
                    RefOr::T(Schema::AllOf(all)) => all
                        .items
                        .iter_mut()
                        .filter_map(|item| match item {
                            RefOr::T(Schema::Object(object)) => Some(object),
                            _ => None,
                        })
                        .collect(),
                    _ => continue,
                };
                for object in objects {
                    object.required = object
                        .properties
                        .keys()
                        .filter(|k| !absent.contains(&k.as_str()))
                        .cloned()
                        .collect();
                }
            }
        }
    }
}

/// The spec as YAML (what `magnum-capi openapi` prints and `openapi.yaml` holds).
pub fn yaml_text() -> Result<String, String> {
    ApiDoc::openapi().to_yaml().map_err(|e| e.to_string())
}

/// This document as JSON.
#[utoipa::path(get, path = "/openapi.json", tag = "operating", security(()),
    responses((status = 200, description = "This OpenAPI document", body = Object)))]
pub async fn json() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}

/// This document as YAML.
#[utoipa::path(get, path = "/openapi.yaml", tag = "operating", security(()),
    responses((status = 200, description = "This OpenAPI document",
               content_type = "application/yaml", body = Object)))]
pub async fn yaml() -> impl IntoResponse {
    match yaml_text() {
        Ok(y) => ([(header::CONTENT_TYPE, "application/yaml")], y).into_response(),
        Err(e) => super::error::ApiError::Internal(e.into()).into_response(),
    }
}
