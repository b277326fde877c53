//! Unauthenticated documents: `/` (versions), `/v1` (resource links), `/healthcheck`.

use axum::Json;
use serde_json::{Value, json};

use super::extract::BaseUrl;
use super::microversion::{MAX_VERSION, MIN_VERSION};

/// The API versions document (no version negotiation here).
#[utoipa::path(get, path = "/", tag = "versions", security(()),
    responses((status = 200, description = "The versions this service offers")))]
pub async fn root(BaseUrl(base): BaseUrl) -> Json<Value> {
    Json(json!({
        "name": "OpenStack Magnum API",
        "description": "Magnum is an OpenStack project which aims to provide container cluster management.",
        "versions": [{
            "id": "v1",
            "links": [{"href": format!("{base}/v1/"), "rel": "self"}],
            "status": "CURRENT",
            "max_version": MAX_VERSION.to_string(),
            "min_version": MIN_VERSION.to_string(),
        }],
    }))
}

fn collection(base: &str, name: &str) -> Value {
    json!([
        {"href": format!("{base}/v1/{name}/"), "rel": "self"},
        {"href": format!("{base}/{name}/"), "rel": "bookmark"},
    ])
}

/// The v1 document: media types and links to every collection.
#[utoipa::path(get, path = "/v1", tag = "versions", security(()),
    responses((status = 200, description = "Links to the v1 collections"),
              (status = 406, description = "Unsupported microversion")))]
pub async fn v1(BaseUrl(base): BaseUrl) -> Json<Value> {
    let mut doc = json!({
        "id": "v1",
        "media_types": [{"base": "application/json", "type": "application/vnd.openstack.magnum.v1+json"}],
        "links": [
            {"href": format!("{base}/v1/"), "rel": "self"},
            {"href": "http://docs.openstack.org/developer/magnum/dev/api-spec-v1.html", "rel": "describedby", "type": "text/html"},
        ],
    });
    if let Some(m) = doc.as_object_mut() {
        for name in [
            "clustertemplates",
            "clusters",
            "quotas",
            "certificates",
            "mservices",
            "stats",
            "federations",
            "credentials",
        ] {
            m.insert(name.into(), collection(&base, name));
        }
        m.insert(
            "nodegroups".into(),
            json!([
                {"href": format!("{base}/v1/clusters/{{cluster_id}}/nodegroups"), "rel": "self"},
                {"href": format!("{base}/clusters/{{cluster_id}}/nodegroups"), "rel": "bookmark"},
            ]),
        );
    }
    Json(doc)
}

/// Liveness as oslo.middleware's healthcheck answers it.
#[utoipa::path(get, path = "/healthcheck", tag = "versions", security(()),
    responses((status = 200, description = "The service is up")))]
pub async fn healthcheck() -> Json<Value> {
    Json(json!({"detailed": false, "reasons": ["OK"]}))
}
