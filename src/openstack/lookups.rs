//! Look-ups in Glance, Nova and Neutron with the caller's token: every match for a name or id,
//! so the caller (the service layer) applies Magnum's rules (none → 400/404, several → 409).

use openstack_sdk::api::compute::v2::flavor::extra_spec::list_21 as flavor_extra_specs;
use openstack_sdk::api::compute::v2::flavor::list_detailed_20 as flavor_list;
use openstack_sdk::api::compute::v2::keypair::get_20 as keypair_get;
use openstack_sdk::api::compute::v2::limit::list_21 as limits_get;
use openstack_sdk::api::image::v2::image::{get as image_get, list as image_list};
use openstack_sdk::api::network::v2::network::list as network_list;
use openstack_sdk::api::network::v2::subnet::list as subnet_list;
use openstack_sdk_core::api::RestEndpoint;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::call::{OpenStackError, builder_error, query_found};
use super::session::UserSession;

/// A Glance image, with the properties Magnum reads.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub os_distro: Option<String>,
    #[serde(default)]
    pub kube_version: Option<String>,
}

/// A Nova flavor: what the zero-root-disk rule and the autoscaler's capacity hints need.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub disk: i64,
    #[serde(default)]
    pub vcpus: u32,
    /// MiB.
    #[serde(default)]
    pub ram: u64,
    /// Its extra specs, where Nova shows them in the list: from microversion 2.61, unless a
    /// policy hides them from the caller (`None` then: ask `os-extra_specs`).
    #[serde(default)]
    pub extra_specs: Option<std::collections::BTreeMap<String, String>>,
}

/// A Neutron network.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Network {
    pub id: String,
    #[serde(default)]
    pub name: String,
}

/// A Neutron subnet.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub network_id: String,
}

/// One query as the caller, within the configured per-call timeout.
async fn query<T, E>(s: &UserSession, service: &str, ep: E) -> Result<T, OpenStackError>
where
    E: RestEndpoint + Sync,
    T: DeserializeOwned + Send + 'static,
{
    super::call::query(s, service, s.timeout(), ep).await
}

/// Images whose id (when `ident` is a UUID) or name is `ident`.
pub async fn images(s: &UserSession, ident: &str) -> Result<Vec<Image>, OpenStackError> {
    const SVC: &str = "Glance";
    if uuid::Uuid::parse_str(ident).is_ok() {
        let ep = image_get::Request::builder()
            .id(ident)
            .build()
            .map_err(|e| builder_error(SVC, e))?;
        if let Some(img) = query_found::<Image, _, _>(s, SVC, s.timeout(), ep).await? {
            return Ok(vec![img]);
        }
    }
    let ep = image_list::Request::builder()
        .name(ident)
        .build()
        .map_err(|e| builder_error(SVC, e))?;
    query(s, SVC, ep).await
}

/// Nova's microversion that shows each flavor's extra specs in the list.
const FLAVOR_EXTRA_SPECS: &str = "compute 2.61";

/// Every flavor the caller can see (Magnum matches name or id over the whole list), with its
/// extra specs where Nova shows them: one request instead of one more per flavor afterwards.
/// A Nova older than 2.61 (406) is asked again without the microversion.
pub async fn flavors(s: &UserSession) -> Result<Vec<Flavor>, OpenStackError> {
    const SVC: &str = "Nova";
    let ep = flavor_list::Request::builder()
        .header(
            http::header::HeaderName::from_static("openstack-api-version"),
            http::HeaderValue::from_static(FLAVOR_EXTRA_SPECS),
        )
        .build()
        .map_err(|e| builder_error(SVC, e))?;
    match query(s, SVC, ep).await {
        Err(OpenStackError::NotAcceptable(_)) => {
            let ep = flavor_list::Request::builder()
                .build()
                .map_err(|e| builder_error(SVC, e))?;
            query(s, SVC, ep).await
        }
        r => r,
    }
}

/// A flavor's extra specs (`GET /flavors/{id}/os-extra_specs`), as the caller.
pub async fn flavor_extra_specs(
    s: &UserSession,
    flavor_id: &str,
) -> Result<std::collections::BTreeMap<String, String>, OpenStackError> {
    const SVC: &str = "Nova";
    let ep = flavor_extra_specs::Request::builder()
        .flavor_id(flavor_id)
        .build()
        .map_err(|e| builder_error(SVC, e))?;
    query(s, SVC, ep).await
}

/// Whether the caller owns a keypair named `name`.
pub async fn keypair_exists(s: &UserSession, name: &str) -> Result<bool, OpenStackError> {
    const SVC: &str = "Nova";
    let ep = keypair_get::Request::builder()
        .id(name)
        .build()
        .map_err(|e| builder_error(SVC, e))?;
    let found: Option<serde_json::Value> = query_found(s, SVC, s.timeout(), ep).await?;
    Ok(found.is_some())
}

/// Nova's absolute limits of the caller's project (`GET /limits`, `limits.absolute`): the
/// maxima (below 0: unlimited) and what is used.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AbsoluteLimits {
    #[serde(default = "unlimited")]
    pub max_total_instances: i64,
    #[serde(default)]
    pub total_instances_used: i64,
    #[serde(default = "unlimited")]
    pub max_total_cores: i64,
    #[serde(default)]
    pub total_cores_used: i64,
    #[serde(rename = "maxTotalRAMSize", default = "unlimited")]
    pub max_total_ram_size: i64,
    #[serde(rename = "totalRAMUsed", default)]
    pub total_ram_used: i64,
}

fn unlimited() -> i64 {
    -1
}

/// The caller's project's compute limits and usage.
pub async fn compute_limits(s: &UserSession) -> Result<AbsoluteLimits, OpenStackError> {
    const SVC: &str = "Nova";
    #[derive(Deserialize)]
    struct Limits {
        absolute: AbsoluteLimits,
    }
    let ep = limits_get::Request::builder()
        .build()
        .map_err(|e| builder_error(SVC, e))?;
    let l: Limits = query(s, SVC, ep).await?;
    Ok(l.absolute)
}

/// Rows that have an id (to merge the by-name and by-id answers).
trait HasId {
    fn id(&self) -> &str;
}

impl HasId for Network {
    fn id(&self) -> &str {
        &self.id
    }
}

impl HasId for Subnet {
    fn id(&self) -> &str {
        &self.id
    }
}

/// Neutron filters by one attribute at a time; Magnum matches name or id, so ask both ways, side
/// by side, and merge (`fetch(by_id)`). Neutron makes every id itself, a UUID (its API takes
/// none on create): an `ident` that is not one can only be a name, and is asked for once.
async fn by_name_or_id<T, F, Fut>(ident: &str, fetch: F) -> Result<Vec<T>, OpenStackError>
where
    T: HasId,
    F: Fn(bool) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, OpenStackError>>,
{
    if uuid::Uuid::parse_str(ident).is_err() {
        return fetch(false).await;
    }
    // The by-name answer's error first, as when they ran one after the other.
    let (by_name, by_id) = tokio::join!(fetch(false), fetch(true));
    let mut found = by_name?;
    for row in by_id? {
        if !found.iter().any(|f| f.id() == row.id()) {
            found.push(row);
        }
    }
    Ok(found)
}

/// Networks whose name or id is `ident`; only `router:external` ones when `external`.
pub async fn networks(
    s: &UserSession,
    ident: &str,
    external: bool,
) -> Result<Vec<Network>, OpenStackError> {
    const SVC: &str = "Neutron";
    by_name_or_id(ident, |by_id| async move {
        let mut b = network_list::Request::builder();
        if by_id {
            b.id(ident);
        } else {
            b.name(ident);
        }
        if external {
            b.router_external(true);
        }
        query(s, SVC, b.build().map_err(|e| builder_error(SVC, e))?).await
    })
    .await
}

/// Subnets whose name or id is `ident`.
pub async fn subnets(s: &UserSession, ident: &str) -> Result<Vec<Subnet>, OpenStackError> {
    const SVC: &str = "Neutron";
    by_name_or_id(ident, |by_id| async move {
        let mut b = subnet_list::Request::builder();
        if by_id {
            b.id(ident);
        } else {
            b.name(ident);
        }
        query(s, SVC, b.build().map_err(|e| builder_error(SVC, e))?).await
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::http::{HeaderMap, StatusCode};
    use serde_json::json;

    use super::*;
    use crate::openstack::catalog::Catalog;

    /// A Nova serving microversions up to `max_minor` (2.x): the flavor list, with the extra
    /// specs from 2.61; the microversion of each list asked for, in `asked`.
    async fn nova(max_minor: u32, asked: Arc<Mutex<Vec<String>>>) -> UserSession {
        let list = move |headers: HeaderMap| {
            let asked = asked.clone();
            async move {
                let mv = headers
                    .get("openstack-api-version")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                asked.lock().unwrap().push(mv.clone());
                let minor: u32 = mv
                    .strip_prefix("compute 2.")
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(1);
                if minor > max_minor {
                    return (StatusCode::NOT_ACCEPTABLE, axum::Json(json!({}))).into_response();
                }
                let mut f = json!({"id": "g1", "name": "gpu", "disk": 10, "vcpus": 8, "ram": 1024});
                if minor >= 61 {
                    f["extra_specs"] = json!({"resources:VGPU": "1"});
                }
                axum::Json(json!({ "flavors": [f] })).into_response()
            }
        };
        use axum::response::IntoResponse;
        let app =
            axum::Router::new().route("/compute/v2.1/flavors/detail", axum::routing::get(list));
        serving("compute", "/compute/v2.1", app).await
    }

    /// A session whose catalog has `service_type` at `path` of `app`, served on a port of its own.
    async fn serving(service_type: &str, path: &str, app: axum::Router) -> UserSession {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{path}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let catalog: Catalog = serde_json::from_value(json!([{"type": service_type, "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": url}]}]))
        .unwrap();
        UserSession::new(
            reqwest::Client::new(),
            secrecy::SecretString::from("token"),
            Arc::new(catalog),
            "public".into(),
            None,
            std::time::Duration::from_secs(5),
        )
    }

    /// A Neutron whose network list answers one network for a `name` filter equal to
    /// `named` and one `id` filter equal to `by_id`, and nothing otherwise; the query of each
    /// list asked for, in `asked`. A by-name list of a UUID answers only once a by-id list has
    /// been asked too (500 after two seconds without): the two must be in flight together.
    async fn neutron(
        named: &'static str,
        by_id: &'static str,
        asked: Arc<Mutex<Vec<String>>>,
    ) -> UserSession {
        use axum::extract::RawQuery;
        use axum::response::IntoResponse;
        // Told once a by-id list is asked (kept as a permit if nobody waits yet).
        let id_asked = Arc::new(tokio::sync::Notify::new());
        let list = move |RawQuery(q): RawQuery| {
            let (asked, id_asked) = (asked.clone(), id_asked.clone());
            async move {
                let q = q.unwrap_or_default();
                asked.lock().unwrap().push(q.clone());
                if !q.contains("name=") {
                    id_asked.notify_one();
                } else if uuid::Uuid::parse_str(named).is_ok() {
                    let waited = std::time::Duration::from_secs(2);
                    if tokio::time::timeout(waited, id_asked.notified())
                        .await
                        .is_err()
                    {
                        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
                    }
                }
                let mut nets = Vec::new();
                if q.contains(&format!("name={named}")) {
                    nets.push(json!({"id": "11111111-2222-4333-8444-555555555555", "name": named}));
                }
                if q.contains(&format!("id={by_id}")) && !q.contains("name=") {
                    nets.push(json!({"id": by_id, "name": "other"}));
                }
                axum::Json(json!({ "networks": nets })).into_response()
            }
        };
        let app = axum::Router::new().route("/v2.0/networks", axum::routing::get(list));
        serving("network", "", app).await
    }

    #[tokio::test]
    async fn a_network_named_is_asked_for_once_and_a_uuid_by_name_and_by_id() {
        const ID: &str = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";
        // A name can be no Neutron id: one list, by name.
        let asked = Arc::new(Mutex::new(Vec::new()));
        let s = neutron("public", ID, asked.clone()).await;
        let found = networks(&s, "public", true).await.unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].name, "public");
        let q = asked.lock().unwrap().clone();
        assert_eq!(q.len(), 1, "{q:?}");
        assert!(q[0].contains("name=public"), "{q:?}");
        assert!(q[0].contains("external"), "only external networks: {q:?}");
        assert!(!q[0].contains("id="), "{q:?}");
        // A UUID may be an id or a name (Magnum matches either): both asked, side by side (the
        // fake holds the by-name answer until the by-id list is asked), the answers merged.
        let asked = Arc::new(Mutex::new(Vec::new()));
        let s = neutron(ID, ID, asked.clone()).await;
        let mut ids: Vec<String> = networks(&s, ID, false)
            .await
            .unwrap()
            .into_iter()
            .map(|n| n.id)
            .collect();
        ids.sort();
        assert_eq!(ids, ["11111111-2222-4333-8444-555555555555", ID]);
        assert_eq!(asked.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn flavors_come_with_their_extra_specs_and_an_older_nova_is_asked_again_without() {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let s = nova(96, asked.clone()).await;
        let f = flavors(&s).await.unwrap();
        assert_eq!(
            f[0].extra_specs
                .as_ref()
                .and_then(|e| e.get("resources:VGPU")),
            Some(&"1".to_string())
        );
        assert_eq!(*asked.lock().unwrap(), ["compute 2.61"]);

        let asked = Arc::new(Mutex::new(Vec::new()));
        let s = nova(60, asked.clone()).await;
        let f = flavors(&s).await.unwrap();
        assert_eq!(f[0].id, "g1");
        assert_eq!(f[0].extra_specs, None);
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 2, "{asked:?}");
        assert_eq!(asked[0], "compute 2.61");
        assert_ne!(asked[1], "compute 2.61");
    }
}
