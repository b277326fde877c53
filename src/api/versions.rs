//! Unauthenticated documents: `/` (versions), `/v1` (resource links), `/healthcheck`.

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::extract::BaseUrl;
use super::microversion::{MAX_VERSION, MIN_VERSION};
use crate::service::views::Link;

/// The API versions document.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Versions {
    pub name: String,
    pub description: String,
    pub versions: Vec<ApiVersion>,
}

/// One major version of the API and its microversion range.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApiVersion {
    /// `v1`.
    pub id: String,
    pub links: Vec<Link>,
    /// `CURRENT`.
    pub status: String,
    pub max_version: String,
    pub min_version: String,
}

/// The API versions document (no version negotiation here).
#[utoipa::path(get, path = "/", tag = "versions", security(()),
    responses((status = 200, description = "The versions this service offers", body = Versions)))]
pub async fn root(BaseUrl(base): BaseUrl) -> Json<Versions> {
    Json(Versions {
        name: "OpenStack Magnum API".into(),
        description:
            "Magnum is an OpenStack project which aims to provide container cluster management."
                .into(),
        versions: vec![ApiVersion {
            id: "v1".into(),
            links: vec![Link::new(format!("{base}/v1/"), "self")],
            status: "CURRENT".into(),
            max_version: MAX_VERSION.to_string(),
            min_version: MIN_VERSION.to_string(),
        }],
    })
}

/// A media type the v1 API speaks.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MediaType {
    pub base: String,
    #[serde(rename = "type")]
    pub media_type: String,
}

/// The v1 document: media types and the links of every collection.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct V1 {
    /// `v1`.
    pub id: String,
    pub media_types: Vec<MediaType>,
    pub links: Vec<Link>,
    pub clustertemplates: Vec<Link>,
    pub clusters: Vec<Link>,
    pub quotas: Vec<Link>,
    pub certificates: Vec<Link>,
    pub mservices: Vec<Link>,
    pub stats: Vec<Link>,
    pub federations: Vec<Link>,
    pub credentials: Vec<Link>,
    pub nodegroups: Vec<Link>,
}

fn collection(base: &str, name: &str) -> Vec<Link> {
    vec![
        Link::new(format!("{base}/v1/{name}/"), "self"),
        Link::new(format!("{base}/{name}/"), "bookmark"),
    ]
}

/// The v1 document: media types and links to every collection.
#[utoipa::path(get, path = "/v1", tag = "versions", security(()),
    responses((status = 200, description = "Links to the v1 collections", body = V1)))]
pub async fn v1(BaseUrl(base): BaseUrl) -> Json<V1> {
    Json(V1 {
        id: "v1".into(),
        media_types: vec![MediaType {
            base: "application/json".into(),
            media_type: "application/vnd.openstack.magnum.v1+json".into(),
        }],
        links: vec![
            Link::new(format!("{base}/v1/"), "self"),
            Link {
                href: "http://docs.openstack.org/developer/magnum/dev/api-spec-v1.html".into(),
                rel: "describedby".into(),
                media_type: Some("text/html".into()),
            },
        ],
        clustertemplates: collection(&base, "clustertemplates"),
        clusters: collection(&base, "clusters"),
        quotas: collection(&base, "quotas"),
        certificates: collection(&base, "certificates"),
        mservices: collection(&base, "mservices"),
        stats: collection(&base, "stats"),
        federations: collection(&base, "federations"),
        credentials: collection(&base, "credentials"),
        nodegroups: vec![
            Link::new(
                format!("{base}/v1/clusters/{{cluster_id}}/nodegroups"),
                "self",
            ),
            Link::new(
                format!("{base}/clusters/{{cluster_id}}/nodegroups"),
                "bookmark",
            ),
        ],
    })
}

/// oslo.middleware's healthcheck answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Healthcheck {
    pub detailed: bool,
    pub reasons: Vec<String>,
}

/// Liveness as oslo.middleware's healthcheck answers it.
#[utoipa::path(get, path = "/healthcheck", tag = "versions", security(()),
    responses((status = 200, description = "The service is up", body = Healthcheck)))]
pub async fn healthcheck() -> Json<Healthcheck> {
    Json(Healthcheck {
        detailed: false,
        reasons: vec!["OK".into()],
    })
}
