//! The HTTP flows of gophercloud v2 (`openstack/containerinfra/...`) and of the Terraform
//! provider (`openstack_containerinfra_*_v1`, built on gophercloud), replayed over real HTTP
//! against the service on a loopback port with the Cluster API driver on the simulated
//! management cluster and the real Keystone. Neither Go nor Terraform can run here, so each
//! request is built as gophercloud marshals it (sorted keys, compact, HTML-escaped, the
//! `OpenStack-API-Version: container-infra X.Y` header only when the caller set a microversion)
//! and each response is decoded into structs that mirror gophercloud's result structs with
//! Go's `encoding/json` strictness: a label value that is not a string, a timestamp without an
//! offset or a string where Go has an `int` fails the decode; `null` is tolerated everywhere.
//!
//! Sources read (gophercloud master 95eea8e5, terraform-provider-openstack master 27f26125):
//! - gophercloud `openstack/containerinfra/v1/{clusters,clustertemplates,nodegroups,certificates}/
//!   {requests,results,urls}.go`, `openstack/containerinfra/apiversions/{requests,results,urls}.go`,
//!   `openstack/utils/base_endpoint.go`, `openstack/endpoint_location.go` (`V3EndpointURL`),
//!   `endpoint_search.go` (`ServiceTypeAliases`), `service_client.go` (`setMicroversionHeader`),
//!   `provider_client.go` (headers, default OK codes), `pagination/` (`LinkedPageBase`).
//! - terraform-provider-openstack `openstack/containerinfra_shared_v1.go`,
//!   `openstack/resource_openstack_containerinfra_{cluster,clustertemplate,nodegroup}_v1.go`.
//!
//! The catalog has one `container-infra` endpoint per Keystone, so the flows share one service
//! instance in one test; the independent cluster life cycles run concurrently.

use std::collections::HashMap;
use std::future::Future;
use std::time::Instant;

use crate::common::capi::{CapiApp, capi_app_on};
use crate::common::fakecloud::{IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT, NETWORK_PUBLIC};
use crate::common::keystone::{DOMAIN, REGION, keystone, password};
use crate::common::stack::{cloud, env_exclusive, serve_as_endpoint};
use crate::common::wait::until;
use chrono::{DateTime, FixedOffset};
use magnum_capi::capi::pki;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// Result structs as gophercloud declares them (`results.go`), with Go's decoding rules.

/// Go's `map[string]string`: string values (a JSON `null` value decodes to "").
type GoStrMap = HashMap<String, Option<String>>;

/// `time.Time` as `encoding/json` decodes it: a JSON string in RFC 3339 with `T` and an offset
/// (`Z` or `±hh:mm`), or `null` (left zero).
fn go_time<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<DateTime<FixedOffset>>, D::Error> {
    let Some(s) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let b = s.as_bytes();
    let offset_ok = s.ends_with('Z')
        || (b.len() > 6 && matches!(b[b.len() - 6], b'+' | b'-') && b[b.len() - 3] == b':');
    if b.get(10) != Some(&b'T') || !offset_ok {
        return Err(serde::de::Error::custom(format!(
            "parsing time {s:?} as \"2006-01-02T15:04:05Z07:00\""
        )));
    }
    DateTime::parse_from_rfc3339(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// `gophercloud.Link`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Link {
    href: Option<String>,
    rel: Option<String>,
}

/// `clusters.Cluster`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Cluster {
    api_address: Option<String>,
    coe_version: Option<String>,
    cluster_template_id: Option<String>,
    container_version: Option<String>,
    create_timeout: Option<i64>,
    #[serde(default, deserialize_with = "go_time")]
    created_at: Option<DateTime<FixedOffset>>,
    discovery_url: Option<String>,
    docker_volume_size: Option<i64>,
    faults: Option<GoStrMap>,
    flavor_id: Option<String>,
    keypair: Option<String>,
    labels: Option<GoStrMap>,
    labels_added: Option<GoStrMap>,
    labels_overridden: Option<GoStrMap>,
    labels_skipped: Option<GoStrMap>,
    links: Option<Vec<Link>>,
    master_flavor_id: Option<String>,
    master_addresses: Option<Vec<Option<String>>>,
    master_count: Option<i64>,
    name: Option<String>,
    node_addresses: Option<Vec<Option<String>>>,
    node_count: Option<i64>,
    project_id: Option<String>,
    stack_id: Option<String>,
    status: Option<String>,
    status_reason: Option<String>,
    uuid: Option<String>,
    #[serde(default, deserialize_with = "go_time")]
    updated_at: Option<DateTime<FixedOffset>>,
    user_id: Option<String>,
    floating_ip_enabled: Option<bool>,
    master_lb_enabled: Option<bool>,
    fixed_network: Option<String>,
    fixed_subnet: Option<String>,
    health_status: Option<String>,
    health_status_reason: Option<Map<String, Value>>,
}

/// `clustertemplates.ClusterTemplate`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct ClusterTemplate {
    apiserver_port: Option<i64>,
    coe: Option<String>,
    cluster_distro: Option<String>,
    #[serde(default, deserialize_with = "go_time")]
    created_at: Option<DateTime<FixedOffset>>,
    dns_nameserver: Option<String>,
    docker_storage_driver: Option<String>,
    docker_volume_size: Option<i64>,
    external_network_id: Option<String>,
    fixed_network: Option<String>,
    fixed_subnet: Option<String>,
    flavor_id: Option<String>,
    floating_ip_enabled: Option<bool>,
    http_proxy: Option<String>,
    https_proxy: Option<String>,
    image_id: Option<String>,
    insecure_registry: Option<String>,
    keypair_id: Option<String>,
    labels: Option<GoStrMap>,
    links: Option<Vec<Link>>,
    master_flavor_id: Option<String>,
    master_lb_enabled: Option<bool>,
    name: Option<String>,
    network_driver: Option<String>,
    no_proxy: Option<String>,
    project_id: Option<String>,
    public: Option<bool>,
    registry_enabled: Option<bool>,
    server_type: Option<String>,
    tls_disabled: Option<bool>,
    uuid: Option<String>,
    #[serde(default, deserialize_with = "go_time")]
    updated_at: Option<DateTime<FixedOffset>>,
    user_id: Option<String>,
    volume_driver: Option<String>,
    hidden: Option<bool>,
}

/// `nodegroups.NodeGroup`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct NodeGroup {
    id: Option<i64>,
    uuid: Option<String>,
    name: Option<String>,
    cluster_id: Option<String>,
    project_id: Option<String>,
    docker_volume_size: Option<i64>,
    labels: Option<GoStrMap>,
    labels_added: Option<GoStrMap>,
    labels_overridden: Option<GoStrMap>,
    labels_skipped: Option<GoStrMap>,
    links: Option<Vec<Link>>,
    flavor_id: Option<String>,
    image_id: Option<String>,
    node_addresses: Option<Vec<Option<String>>>,
    node_count: Option<i64>,
    role: Option<String>,
    min_node_count: Option<i64>,
    max_node_count: Option<i64>,
    is_default: Option<bool>,
    stack_id: Option<String>,
    status: Option<String>,
    status_reason: Option<String>,
    version: Option<String>,
    #[serde(default, deserialize_with = "go_time")]
    created_at: Option<DateTime<FixedOffset>>,
    #[serde(default, deserialize_with = "go_time")]
    updated_at: Option<DateTime<FixedOffset>>,
}

/// `certificates.Certificate`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Certificate {
    cluster_uuid: Option<String>,
    bay_uuid: Option<String>,
    links: Option<Vec<Link>>,
    pem: Option<String>,
    csr: Option<String>,
}

/// `apiversions.APIVersion`.
#[derive(Debug, Deserialize)]
struct ApiVersion {
    id: Option<String>,
    min_version: Option<String>,
    status: Option<String>,
    max_version: Option<String>,
}

/// The `struct{ UUID string }` the create/update/resize/upgrade results extract.
#[derive(Debug, Deserialize)]
struct UuidOnly {
    uuid: Option<String>,
}

/// A page of a `LinkedPageBase` pager: its items and `next`.
trait Page: DeserializeOwned {
    type Item;
    fn take(self) -> (Vec<Self::Item>, Option<String>);
}

macro_rules! page {
    ($name:ident, $key:ident, $item:ty) => {
        #[derive(Debug, Deserialize)]
        struct $name {
            $key: Option<Vec<$item>>,
            next: Option<String>,
        }
        impl Page for $name {
            type Item = $item;
            fn take(self) -> (Vec<$item>, Option<String>) {
                (self.$key.unwrap_or_default(), self.next)
            }
        }
    };
}
page!(ClusterPage, clusters, Cluster);
page!(ClusterTemplatePage, clustertemplates, ClusterTemplate);
page!(NodeGroupPage, nodegroups, NodeGroup);

// ---------------------------------------------------------------------------------------------
// A gophercloud ServiceClient.

/// `json.Marshal` of the `map[string]any` gophercloud's `BuildRequestBody` produces: keys
/// sorted, compact, `<`, `>`, `&`, U+2028 and U+2029 escaped.
fn go_marshal(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sorted(v))
        .unwrap()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

#[derive(Debug)]
struct GcError {
    status: u16,
    body: String,
}

impl std::fmt::Display for GcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Expected HTTP response code [...] but got {}: {}",
            self.status, self.body
        )
    }
}

/// `gophercloud.ServiceClient` for `container-infrastructure-management` v1.
#[derive(Clone)]
struct Gc {
    http: reqwest::Client,
    token: String,
    /// The catalog URL, normalized with a trailing `/` (`gophercloud.NormalizeURL`).
    endpoint: String,
    /// `client.Microversion` (Terraform sets it per resource and operation).
    microversion: Option<&'static str>,
}

impl Gc {
    /// Authenticates like `openstack.AuthenticatedClient` with password credentials scoped to a
    /// project and finds the endpoint like `openstack.NewContainerInfraV1`.
    async fn authenticate(user: &str, project: &str) -> Gc {
        let ks = keystone();
        let http = reqwest::Client::new();
        // tokens3.Create: POST /v3/auth/tokens, catalog included; the token is X-Subject-Token.
        let body = go_marshal(&json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "domain": {"id": DOMAIN}, "name": user, "password": password(user)}}},
            "scope": {"project": {"domain": {"id": DOMAIN}, "name": project}}}}));
        let resp = http
            .post(format!("{}/auth/tokens", ks.url))
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201);
        let token = resp.headers()["x-subject-token"]
            .to_str()
            .unwrap()
            .to_string();
        let body: Value = resp.json().await.unwrap();
        // V3EndpointURL: the first catalog entry whose type is the service type or one of its
        // aliases (`ServiceTypeAliases`), then its first endpoint with interface public in the
        // region.
        let types = [
            "container-infrastructure-management",
            "container-infrastructure",
            "container-infra",
        ];
        let url = body["token"]["catalog"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| types.contains(&e["type"].as_str().unwrap_or("")))
            .flat_map(|e| e["endpoints"].as_array().unwrap().iter())
            .find(|ep| {
                ep["interface"] == "public" && (ep["region"] == REGION || ep["region_id"] == REGION)
            })
            .and_then(|ep| ep["url"].as_str())
            .expect("a container-infra endpoint in the catalog")
            .to_string();
        let endpoint = if url.ends_with('/') {
            url
        } else {
            format!("{url}/")
        };
        Gc {
            http,
            token,
            endpoint,
            microversion: None,
        }
    }

    fn at(&self, microversion: &'static str) -> Gc {
        Gc {
            microversion: Some(microversion),
            ..self.clone()
        }
    }

    /// `client.ServiceURL(parts...)`.
    fn url(&self, parts: &[&str]) -> String {
        format!("{}{}", self.endpoint, parts.join("/"))
    }

    /// `ProviderClient.Request`: the body as `json.Marshal` renders it, `Accept` always,
    /// `Content-Type` only with a body, the microversion header only when set; a status outside
    /// `ok` is an error.
    async fn request(
        &self,
        method: &str,
        url: &str,
        body: Option<&Value>,
        ok: &[u16],
    ) -> Result<Vec<u8>, GcError> {
        let mut req = self
            .http
            .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url)
            .header("accept", "application/json")
            .header(
                "user-agent",
                "gophercloud/v2.10.0 terraform-provider-openstack/test",
            )
            .header("x-auth-token", &self.token);
        if let Some(mv) = self.microversion {
            // setMicroversionHeader: magnum is sent `container-infra`, whatever the type.
            req = req.header("openstack-api-version", format!("container-infra {mv}"));
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(go_marshal(b));
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap().to_vec();
        if ok.contains(&status) {
            Ok(bytes)
        } else {
            Err(GcError {
                status,
                body: String::from_utf8_lossy(&bytes).into(),
            })
        }
    }

    /// `request` + `ExtractInto`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        url: &str,
        body: Option<&Value>,
        ok: &[u16],
    ) -> Result<T, GcError> {
        let bytes = self.request(method, url, body, ok).await?;
        Ok(decode(&bytes))
    }

    /// `pagination.Pager.AllPages` over a `LinkedPageBase`: follows `next` verbatim until it
    /// is empty or a page has no items.
    async fn all_pages<P: Page>(&self, first: String) -> (Vec<P::Item>, usize) {
        let (mut items, mut url, mut requests) = (Vec::new(), first, 0);
        loop {
            let page: P = self.call("GET", &url, None, &[200]).await.unwrap();
            requests += 1;
            let (mut got, next) = page.take();
            if got.is_empty() {
                return (items, requests);
            }
            items.append(&mut got);
            match next.filter(|n| !n.is_empty()) {
                Some(n) => url = n,
                None => return (items, requests),
            }
            assert!(requests < 50, "the pager does not end");
        }
    }

    // --- clusters (clusters/requests.go) ---

    async fn cluster_create(&self, opts: Value) -> Result<String, GcError> {
        let r: UuidOnly = self
            .call("POST", &self.url(&["clusters"]), Some(&opts), &[202])
            .await?;
        Ok(r.uuid.unwrap_or_default())
    }

    async fn cluster_get(&self, id: &str) -> Result<Cluster, GcError> {
        self.call("GET", &self.url(&["clusters", id]), None, &[200])
            .await
    }

    async fn cluster_update(&self, id: &str, ops: Value) -> Result<String, GcError> {
        let r: UuidOnly = self
            .call(
                "PATCH",
                &self.url(&["clusters", id]),
                Some(&ops),
                &[200, 202],
            )
            .await?;
        Ok(r.uuid.unwrap_or_default())
    }

    async fn cluster_resize(&self, id: &str, opts: Value) -> Result<String, GcError> {
        let r: UuidOnly = self
            .call(
                "POST",
                &self.url(&["clusters", id, "actions/resize"]),
                Some(&opts),
                &[200, 202],
            )
            .await?;
        Ok(r.uuid.unwrap_or_default())
    }

    async fn cluster_upgrade(&self, id: &str, template: &str) -> Result<String, GcError> {
        // UpgradeOpts.ToClustersUpgradeMap defaults max_batch_size to 1.
        let opts = json!({"cluster_template": template, "max_batch_size": 1});
        let r: UuidOnly = self
            .call(
                "POST",
                &self.url(&["clusters", id, "actions/upgrade"]),
                Some(&opts),
                &[202],
            )
            .await?;
        Ok(r.uuid.unwrap_or_default())
    }

    async fn cluster_delete(&self, id: &str) -> Result<(), GcError> {
        // No OkCodes: DELETE defaults to 202, 204.
        self.request("DELETE", &self.url(&["clusters", id]), None, &[202, 204])
            .await
            .map(drop)
    }

    // --- cluster templates (clustertemplates/requests.go) ---

    async fn template_create(&self, opts: Value) -> ClusterTemplate {
        self.call(
            "POST",
            &self.url(&["clustertemplates"]),
            Some(&opts),
            &[201],
        )
        .await
        .unwrap()
    }

    async fn template_get(&self, id: &str) -> ClusterTemplate {
        self.call("GET", &self.url(&["clustertemplates", id]), None, &[200])
            .await
            .unwrap()
    }

    async fn template_update(&self, id: &str, ops: Value) -> Result<ClusterTemplate, GcError> {
        self.call(
            "PATCH",
            &self.url(&["clustertemplates", id]),
            Some(&ops),
            &[200, 202],
        )
        .await
    }

    // --- nodegroups (nodegroups/requests.go) ---

    async fn ng_get(&self, cluster: &str, ng: &str) -> Result<NodeGroup, GcError> {
        self.call(
            "GET",
            &self.url(&["clusters", cluster, "nodegroups", ng]),
            None,
            &[200],
        )
        .await
    }

    async fn ng_list(&self, cluster: &str) -> Vec<NodeGroup> {
        // ListOpts{} encodes to no query at all.
        self.all_pages::<NodeGroupPage>(self.url(&["clusters", cluster, "nodegroups"]))
            .await
            .0
    }

    async fn ng_create(&self, cluster: &str, opts: Value) -> Result<NodeGroup, GcError> {
        self.call(
            "POST",
            &self.url(&["clusters", cluster, "nodegroups"]),
            Some(&opts),
            &[202],
        )
        .await
    }

    async fn ng_update(&self, cluster: &str, ng: &str, ops: Value) -> Result<NodeGroup, GcError> {
        self.call(
            "PATCH",
            &self.url(&["clusters", cluster, "nodegroups", ng]),
            Some(&ops),
            &[202],
        )
        .await
    }

    async fn ng_delete(&self, cluster: &str, ng: &str) -> Result<(), GcError> {
        self.request(
            "DELETE",
            &self.url(&["clusters", cluster, "nodegroups", ng]),
            None,
            &[202, 204],
        )
        .await
        .map(drop)
    }

    // --- certificates (certificates/requests.go) ---

    async fn cert_get(&self, cluster: &str) -> Certificate {
        self.call("GET", &self.url(&["certificates", cluster]), None, &[200])
            .await
            .unwrap()
    }

    async fn cert_create(&self, cluster: &str, csr: &str) -> Certificate {
        let opts = json!({"cluster_uuid": cluster, "csr": csr});
        self.call("POST", &self.url(&["certificates"]), Some(&opts), &[201])
            .await
            .unwrap()
    }

    /// `certificates.Update`: PATCH with a nil body (no Content-Type), 202.
    async fn cert_rotate(&self, cluster: &str) -> Result<(), GcError> {
        self.request("PATCH", &self.url(&["certificates", cluster]), None, &[202])
            .await
            .map(drop)
    }
}

/// `json.Unmarshal` into `T`; a failure is what gophercloud would return as the error.
#[track_caller]
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> T {
    serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "gophercloud could not decode {} into {}: {e}",
            String::from_utf8_lossy(bytes),
            std::any::type_name::<T>()
        )
    })
}

// ---------------------------------------------------------------------------------------------
// Terraform's waiting and reading.

const ERROR_STATUSES: [&str; 5] = [
    "CREATE_FAILED",
    "UPDATE_FAILED",
    "DELETE_FAILED",
    "RESUME_FAILED",
    "ROLLBACK_FAILED",
];

/// `retry.StateChangeConf{Pending, Target, Delay: 0}.WaitForStateContext` polling as the
/// harness does (Terraform polls every 20 s, 10 s while deleting; the simulator is much faster): an error from the refresh aborts, a state neither pending nor target aborts when a
/// pending list is given. Returns every state seen, in order.
async fn wait_state<F, Fut>(
    what: &str,
    pending: &[&str],
    target: &str,
    mut refresh: F,
) -> Vec<String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<String, String>>,
{
    let seen = std::cell::RefCell::new(Vec::<String>::new());
    until(&format!("{what} to become '{target}'"), || {
        let state = refresh();
        let seen = &seen;
        async move {
            let state = state
                .await
                .unwrap_or_else(|e| panic!("{what}: {e} (states seen: {:?})", seen.borrow()));
            let mut seen = seen.borrow_mut();
            if seen.last() != Some(&state) {
                seen.push(state.clone());
            }
            if state == target {
                return Some(seen.clone());
            }
            assert!(
                pending.is_empty() || pending.contains(&state.as_str()),
                "{what}: unexpected state '{state}', wanted target '{target}' (states seen: {seen:?})"
            );
            None
        }
    })
    .await
}

/// `containerInfraClusterV1StateRefreshFunc`: 404 is DELETE_COMPLETE, a failed status an error.
async fn cluster_state(gc: &Gc, id: &str) -> Result<String, String> {
    match gc.cluster_get(id).await {
        Err(e) if e.status == 404 => Ok("DELETE_COMPLETE".into()),
        Err(e) => Err(e.to_string()),
        Ok(c) => {
            let status = c.status.unwrap_or_default();
            if ERROR_STATUSES.contains(&status.as_str()) {
                return Err(format!(
                    "openstack_containerinfra_cluster_v1 is in an error state: {}",
                    c.status_reason.unwrap_or_default()
                ));
            }
            Ok(status)
        }
    }
}

/// `containerInfraNodeGroupV1StateRefreshFunc`.
async fn ng_state(gc: &Gc, cluster: &str, ng: &str) -> Result<String, String> {
    match gc.ng_get(cluster, ng).await {
        Err(e) if e.status == 404 => Ok("DELETE_COMPLETE".into()),
        Err(e) => Err(e.to_string()),
        Ok(n) => {
            let status = n.status.unwrap_or_default();
            if ERROR_STATUSES.contains(&status.as_str()) {
                return Err(format!(
                    "openstack_containerinfra_nodegroup_v1 is in an error state: {}",
                    n.status_reason.unwrap_or_default()
                ));
            }
            Ok(status)
        }
    }
}

async fn wait_cluster(gc: &Gc, id: &str, pending: &[&str], target: &str) -> Vec<String> {
    wait_state(&format!("cluster {id}"), pending, target, || {
        cluster_state(gc, id)
    })
    .await
}

/// The Terraform state of a cluster after `resourceContainerInfraClusterV1Read`.
#[derive(Debug)]
struct TfCluster {
    c: Cluster,
    /// From the default worker nodegroup (listed at 1.9).
    node_count: i64,
    kubeconfig: Option<TfKubeconfig>,
}

#[derive(Debug)]
struct TfKubeconfig {
    host: String,
    ca: String,
    client_certificate: String,
}

/// `resourceContainerInfraClusterV1Read` on a fresh client (no microversion): GET the cluster,
/// then (client now at 1.9) the nodegroup list for the default worker's count and, on the first
/// read only (the state keeps the client certificate), the kubeconfig: CA, RSA-4096 CSR with
/// SHA-512, `CN=admin, O=system:masters, OU=terraform`, signed by POST /v1/certificates.
async fn tf_cluster_read(base: &Gc, id: &str, first: bool) -> TfCluster {
    let gc = Gc {
        microversion: None,
        ..base.clone()
    };
    let c = gc.cluster_get(id).await.unwrap();
    // created_at/updated_at are formatted with time.RFC3339: they must have parsed.
    assert!(c.created_at.is_some(), "created_at: {c:?}");
    let gc = gc.at("1.9");
    let ngs = gc.ng_list(id).await;
    let node_count = ngs
        .iter()
        .find(|n| n.is_default == Some(true) && n.role.as_deref() != Some("master"))
        .and_then(|n| n.node_count)
        .expect("Default worker nodegroup not found");
    let kubeconfig = if first {
        let ca = gc.cert_get(id).await;
        assert_eq!(ca.cluster_uuid.as_deref(), Some(id));
        let key =
            rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA512, rcgen::RsaKeySize::_4096)
                .unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, "admin");
        dn.push(rcgen::DnType::OrganizationName, "system:masters");
        dn.push(rcgen::DnType::OrganizationalUnitName, "terraform");
        params.distinguished_name = dn;
        let csr = params.serialize_request(&key).unwrap().pem().unwrap();
        let cert = gc.cert_create(id, &csr).await;
        assert_eq!(cert.cluster_uuid.as_deref(), Some(id));
        assert_eq!(cert.csr.as_deref(), Some(csr.as_str()));
        Some(TfKubeconfig {
            host: c.api_address.clone().unwrap_or_default(),
            ca: ca.pem.unwrap_or_default(),
            client_certificate: cert.pem.unwrap_or_default(),
        })
    } else {
        None
    };
    TfCluster {
        c,
        node_count,
        kubeconfig,
    }
}

/// A JSON-patch list as gophercloud's `UpdateOpts` render it (`value` omitted when nil).
fn ops(list: &[(&str, &str, Option<Value>)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(op, path, value)| {
                let mut m = Map::new();
                m.insert("op".into(), json!(op));
                m.insert("path".into(), json!(path));
                if let Some(v) = value {
                    m.insert("value".into(), v.clone());
                }
                Value::Object(m)
            })
            .collect(),
    )
}

/// `containerInfraClusterTemplateV1AppendUpdateOpts` per changed attribute: "" is a `remove`
/// (no value), anything else a `replace` with the value as given (booleans already
/// `strconv.FormatBool`-ed, ints as ints).
fn tf_template_ops(changes: &[(&str, Value)]) -> Value {
    let list: Vec<(&str, String, Option<Value>)> = changes
        .iter()
        .map(|(attr, v)| {
            if *v == json!("") {
                ("remove", format!("/{attr}"), None)
            } else {
                ("replace", format!("/{attr}"), Some(v.clone()))
            }
        })
        .collect();
    let borrowed: Vec<(&str, &str, Option<Value>)> = list
        .iter()
        .map(|(op, path, v)| (*op, path.as_str(), v.clone()))
        .collect();
    ops(&borrowed)
}

/// `expandContainerInfraV1LabelsString`: `{'k':'v','k2':'v2'}`.
fn tf_labels_string(labels: &[(&str, &str)]) -> String {
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("'{k}':'{v}'")).collect();
    format!("{{{}}}", inner.join(","))
}

fn labels(m: &Option<GoStrMap>) -> HashMap<String, String> {
    m.clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or_default()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The flows.

#[test]
fn the_mirrored_structs_are_as_strict_as_encoding_json() {
    // What Go accepts.
    let c: Cluster = decode(
        br#"{"uuid":"u","labels":{"a":"1","b":null},"create_timeout":null,"node_count":2,
             "created_at":"2016-08-29T06:51:31+00:00","updated_at":null,"faults":null,
             "health_status_reason":{"api":"ok","n":{"x":1}},"unknown":[1]}"#,
    );
    assert_eq!(c.node_count, Some(2));
    assert!(c.create_timeout.is_none() && c.updated_at.is_none());
    let _: Cluster = decode(br#"{"created_at":"2016-08-29T06:51:31.123456Z"}"#);
    // What Go rejects.
    for bad in [
        r#"{"labels":{"a":1}}"#,
        r#"{"labels":{"a":true}}"#,
        r#"{"created_at":"2016-08-29T06:51:31"}"#,
        r#"{"created_at":"2016-08-29 06:51:31+00:00"}"#,
        r#"{"create_timeout":"60"}"#,
        r#"{"docker_volume_size":1.5}"#,
        r#"{"health_status_reason":"ok"}"#,
        r#"{"node_addresses":"10.0.0.1"}"#,
    ] {
        assert!(
            serde_json::from_str::<Cluster>(bad).is_err(),
            "Go rejects {bad}"
        );
    }
    assert!(serde_json::from_str::<NodeGroup>(r#"{"id":"7"}"#).is_err());
    // gophercloud's marshalling.
    assert_eq!(
        go_marshal(&json!({"name": "", "create_timeout": null, "csr": "<&>",
                           "cluster_template_id": "t"})),
        r#"{"cluster_template_id":"t","create_timeout":null,"csr":"\u003c\u0026\u003e","name":""}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gophercloud_and_terraform_flows_work_against_the_service() {
    let t0 = Instant::now();
    let _env = env_exclusive().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let server = serve_as_endpoint(&app.t.state).await;
    let gc = Gc::authenticate("alice", "alpha").await;
    assert!(
        gc.endpoint.starts_with("http://127.0.0.1:") && gc.endpoint.ends_with("/v1/"),
        "{}",
        gc.endpoint
    );
    eprintln!("setup done in {:.1?}", t0.elapsed());

    api_versions(&gc).await;
    let (t1, t2) = templates(&gc).await;
    eprintln!("templates done in {:.1?}", t0.elapsed());

    // gophercloud always sends `name` and `create_timeout`: an unset name is "" — which
    // Magnum's WSME type (StringType(min_length=1)) rejects, as the service does.
    let err = gc
        .cluster_create(json!({"cluster_template_id": t1, "create_timeout": null, "name": ""}))
        .await
        .unwrap_err();
    assert_eq!(err.status, 400, "{err}");
    assert!(err.body.contains("name"), "{err}");

    let (a, b) = tokio::join!(
        cluster_with_nodegroup_and_upgrade(&app, &gc, &t1, &t2),
        zero_node_cluster_resized(&app, &gc, &t1)
    );
    eprintln!("cluster flows done in {:.1?}", t0.elapsed());

    listing(&gc, &[&a, &b], &[&t1, &t2]).await;

    // Terraform's delete: DELETE without a microversion, then GET until 404.
    for c in [&a, &b] {
        gc.cluster_delete(c).await.unwrap();
    }
    for c in [&a, &b] {
        wait_cluster(&gc, c, &[], "DELETE_COMPLETE").await;
    }
    eprintln!("all done in {:.1?}", t0.elapsed());
    server.abort();
}

/// `apiversions.List`: GET on the unversioned endpoint (`utils.BaseEndpoint`), one page.
async fn api_versions(gc: &Gc) {
    let base = gc.endpoint.trim_end_matches('/').trim_end_matches("v1");
    assert!(base.ends_with('/'), "{base}");
    #[derive(Deserialize)]
    struct Versions {
        versions: Option<Vec<ApiVersion>>,
    }
    let v: Versions = gc.call("GET", base, None, &[200]).await.unwrap();
    let v = v.versions.unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].id.as_deref(), Some("v1"));
    assert_eq!(v[0].status.as_deref(), Some("CURRENT"));
    assert_eq!(v[0].min_version.as_deref(), Some("1.1"));
    let max = v[0].max_version.clone().unwrap();
    let minor: u32 = max.strip_prefix("1.").unwrap().parse().unwrap();
    assert!(minor >= 10, "Terraform needs 1.10: {max}");
}

/// Template 1 as gophercloud creates it (booleans omitted), template 2 as Terraform creates it
/// (every boolean sent) and then updates it. Returns their uuids.
async fn templates(gc: &Gc) -> (String, String) {
    // gophercloud CreateOpts: `*bool` omitempty, so unset booleans are absent.
    let t1 = gc
        .template_create(json!({
            "coe": "kubernetes", "dns_nameserver": "8.8.8.8", "docker_volume_size": 10,
            "external_network_id": NETWORK_PUBLIC, "flavor_id": "m1.small",
            "image_id": IMAGE_UBUNTU_KUBE, "keypair_id": KEYPAIR_DEFAULT,
            "labels": {"kube_tag": "v1.30.4"}, "master_flavor_id": "m1.medium",
            "name": "gc-k8s-v130",
        }))
        .await;
    assert_eq!(t1.floating_ip_enabled, Some(true), "Magnum's default");
    assert_eq!(t1.master_lb_enabled, Some(false));
    assert_eq!(t1.cluster_distro.as_deref(), Some("ubuntu"));
    assert_eq!(t1.docker_volume_size, Some(10));
    assert!(t1.created_at.is_some());
    assert_eq!(
        labels(&t1.labels),
        HashMap::from([("kube_tag".into(), "v1.30.4".into())])
    );
    let t1 = t1.uuid.unwrap();

    // The upgrade target: an image with the next minor release.
    let image = cloud().add_image(json!({"name": "ubuntu-2204-kube-v1.31.2",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.31.2"}));
    // resourceContainerInfraClusterTemplateV1Create: all six booleans are sent.
    let created = gc
        .template_create(json!({
            "coe": "kubernetes", "dns_nameserver": "8.8.4.4", "docker_volume_size": 10,
            "external_network_id": NETWORK_PUBLIC, "flavor_id": "m1.small",
            "floating_ip_enabled": false, "hidden": false, "http_proxy": "http://proxy:3128",
            "image_id": image, "keypair_id": KEYPAIR_DEFAULT,
            "labels": {"kube_tag": "v1.31.2"}, "master_flavor_id": "m1.medium",
            "master_lb_enabled": true, "name": "tf-k8s", "public": false,
            "registry_enabled": false, "tls_disabled": false,
        }))
        .await;
    assert_eq!(created.floating_ip_enabled, Some(false));
    assert_eq!(created.master_lb_enabled, Some(true));
    assert_eq!(created.public, Some(false));
    assert_eq!(created.hidden, Some(false));
    let t2 = created.uuid.clone().unwrap();

    // resourceContainerInfraClusterTemplateV1Update, attributes in the provider's order.
    let patch = tf_template_ops(&[
        ("name", json!("tf-k8s-v131")),
        ("dns_nameserver", json!("")),
        ("docker_volume_size", json!(20)),
        ("floating_ip_enabled", json!("true")),
        ("http_proxy", json!("")),
        (
            "labels",
            json!(tf_labels_string(&[("kube_tag", "v1.31.2"), ("foo", "bar")])),
        ),
        ("master_lb_enabled", json!("false")),
    ]);
    assert_eq!(
        go_marshal(&patch[5]),
        r#"{"op":"replace","path":"/labels","value":"{'kube_tag':'v1.31.2','foo':'bar'}"}"#
    );
    assert_eq!(
        go_marshal(&patch[1]),
        r#"{"op":"remove","path":"/dns_nameserver"}"#
    );
    let updated = gc.template_update(&t2, patch).await.unwrap();
    // Then Read.
    let read = gc.template_get(&t2).await;
    for t in [&updated, &read] {
        assert_eq!(t.name.as_deref(), Some("tf-k8s-v131"));
        assert_eq!(t.dns_nameserver, None);
        assert_eq!(t.http_proxy, None);
        assert_eq!(t.docker_volume_size, Some(20));
        assert_eq!(t.floating_ip_enabled, Some(true));
        assert_eq!(t.master_lb_enabled, Some(false));
        assert_eq!(
            labels(&t.labels),
            HashMap::from([
                ("kube_tag".into(), "v1.31.2".into()),
                ("foo".into(), "bar".into())
            ])
        );
        assert!(t.updated_at.is_some(), "{t:?}");
        assert_eq!(t.created_at, created.created_at);
    }
    // A boolean string Magnum's bool_from_string refuses is a 400, not a 500.
    let err = gc
        .template_update(
            &t2,
            tf_template_ops(&[("registry_enabled", json!("maybe"))]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status, 400, "{err}");
    (t1, t2)
}

/// Terraform's create of `name`, no microversion unless node_count is 0 (then 1.10 for the
/// POST and the polling); the first GET comes at once and must find the cluster.
async fn tf_cluster_create(gc: &Gc, template: &str, name: &str, node_count: i64) -> String {
    let gc = if node_count == 0 {
        gc.at("1.10")
    } else {
        gc.clone()
    };
    // create_timeout is Optional+Computed: unset, gophercloud sends null. floating_ip_enabled,
    // master_lb_enabled, merge_labels and docker_volume_size are absent unless configured.
    let id = gc
        .cluster_create(json!({
            "cluster_template_id": template, "create_timeout": null,
            "keypair": KEYPAIR_DEFAULT, "master_count": 1, "name": name,
            "node_count": node_count,
        }))
        .await
        .unwrap();
    uuid::Uuid::parse_str(&id).unwrap();
    let seen = wait_cluster(&gc, &id, &["CREATE_IN_PROGRESS"], "CREATE_COMPLETE").await;
    assert_eq!(seen[0], "CREATE_IN_PROGRESS", "{seen:?}");
    id
}

/// Flows 2, 6, 7 and 5 on one cluster: create and read (kubeconfig), a nodegroup's life cycle,
/// then the upgrade.
async fn cluster_with_nodegroup_and_upgrade(app: &CapiApp, gc: &Gc, t1: &str, t2: &str) -> String {
    let id = tf_cluster_create(gc, t1, "tf_cluster", 1).await;
    let st = tf_cluster_read(gc, &id, true).await;
    let c = &st.c;
    assert_eq!(st.node_count, 1);
    assert_eq!(c.node_count, Some(1));
    assert_eq!(c.master_count, Some(1));
    assert_eq!(c.name.as_deref(), Some("tf_cluster"));
    assert_eq!(c.status.as_deref(), Some("CREATE_COMPLETE"));
    assert_eq!(c.cluster_template_id.as_deref(), Some(t1));
    // No header ⇒ 1.1 ⇒ stack_id (not cluster_id), set by the driver.
    assert!(
        c.stack_id.as_deref().is_some_and(|s| !s.is_empty()),
        "{c:?}"
    );
    // The explicit null gophercloud sent is kept (Terraform then stores 0).
    assert_eq!(c.create_timeout, None);
    assert_eq!(c.docker_volume_size, Some(10), "inherited");
    assert_eq!(c.keypair.as_deref(), Some(KEYPAIR_DEFAULT));
    assert_eq!(
        labels(&c.labels),
        HashMap::from([("kube_tag".into(), "v1.30.4".into())])
    );
    assert_eq!(c.coe_version.as_deref(), Some("v1.30.4"));
    assert_eq!(c.node_addresses.as_ref().map(Vec::len), Some(1));
    assert_eq!(c.master_addresses.as_ref().map(Vec::len), Some(1));

    // Kubeconfig (flow 7): host = api_address, the certificate chains to the CA and the
    // simulated apiserver accepts it.
    let kc = st.kubeconfig.as_ref().unwrap();
    assert!(kc.host.starts_with("https://"), "{}", kc.host);
    assert_eq!(Some(kc.host.as_str()), c.api_address.as_deref());
    assert!(
        pki::verifies(&kc.client_certificate, &kc.ca),
        "not signed by the cluster CA"
    );
    let (_, der) = x509_parser::pem::parse_x509_pem(kc.client_certificate.as_bytes()).unwrap();
    let cert = der.parse_x509().unwrap();
    let subject = cert.subject().to_string();
    assert!(
        subject.contains("CN=admin") && subject.contains("O=system:masters"),
        "{subject}"
    );
    let ns = magnum_capi::capi::namespace("magnum", keystone().project_id("alpha"));
    let name = magnum_capi::capi::capi_name(uuid::Uuid::parse_str(&id).unwrap());
    assert!(
        app.sim
            .simulator()
            .unwrap()
            .workload_accepts(&ns, &name, &kc.client_certificate),
        "the workload cluster rejects the Terraform client certificate"
    );

    nodegroup_flow(gc, &id).await;

    // The cluster settles before the next apply upgrades it.
    wait_cluster(gc, &id, &[], "UPDATE_COMPLETE").await;

    // Flow 5: cluster_template_id changed ⇒ actions/upgrade at 1.8, then wait (no pending
    // list) for UPDATE_COMPLETE with the same client — the status must move first.
    let up = gc.at("1.8");
    let r = up.cluster_upgrade(&id, t2).await.unwrap();
    assert_eq!(r, id);
    let seen = wait_cluster(&up, &id, &[], "UPDATE_COMPLETE").await;
    assert_eq!(seen[0], "UPDATE_IN_PROGRESS", "{seen:?}");
    let st = tf_cluster_read(gc, &id, false).await;
    assert_eq!(st.c.cluster_template_id.as_deref(), Some(t2));
    assert_eq!(st.c.coe_version.as_deref(), Some("v1.31.2"));
    assert_eq!(st.node_count, 1);
    id
}

/// Flow 6: `openstack_containerinfra_nodegroup_v1` create, update (min/max by PATCH and
/// node_count by resize in one apply), delete.
async fn nodegroup_flow(gc: &Gc, cluster: &str) {
    let gc = gc.at("1.9");
    // min_node_count 0 is omitted (int omitempty), max_node_count only when > 0.
    let ng = gc
        .ng_create(
            cluster,
            json!({"flavor_id": "m1.small", "max_node_count": 3, "min_node_count": 1,
               "name": "tf-ng", "node_count": 1}),
        )
        .await
        .unwrap();
    let ng_id = ng.uuid.clone().unwrap();
    uuid::Uuid::parse_str(&ng_id).unwrap();
    let tf_id = format!("{cluster}/{ng_id}");
    assert_eq!(tf_id.split_once('/').unwrap().1, ng_id);
    assert!(ng.id.is_some_and(|i| i > 0), "{ng:?}");
    assert_eq!(ng.cluster_id.as_deref(), Some(cluster));
    assert_eq!(ng.name.as_deref(), Some("tf-ng"));
    assert_eq!(ng.role.as_deref(), Some("worker"));
    assert_eq!(ng.is_default, Some(false));
    assert_eq!(
        (ng.node_count, ng.min_node_count, ng.max_node_count),
        (Some(1), Some(1), Some(3))
    );
    assert_eq!(ng.image_id.as_deref(), Some(IMAGE_UBUNTU_KUBE));
    assert!(ng.created_at.is_some());
    let seen = wait_state(
        "nodegroup create",
        &["CREATE_IN_PROGRESS"],
        "CREATE_COMPLETE",
        || ng_state(&gc, cluster, &ng_id),
    )
    .await;
    assert_eq!(seen[0], "CREATE_IN_PROGRESS", "{seen:?}");
    let read = gc.ng_get(cluster, &ng_id).await.unwrap();
    assert_eq!(read.node_addresses.as_ref().map(Vec::len), Some(1));

    // min 1 → 0 (replace 0), max 3 → 0 (remove), node_count 1 → 2 (resize with the uuid).
    let patch = ops(&[
        ("replace", "/min_node_count", Some(json!(0))),
        ("remove", "/max_node_count", None),
    ]);
    assert_eq!(
        go_marshal(&patch),
        r#"[{"op":"replace","path":"/min_node_count","value":0},{"op":"remove","path":"/max_node_count"}]"#
    );
    let patched = gc.ng_update(cluster, &ng_id, patch).await.unwrap();
    assert_eq!(patched.uuid.as_deref(), Some(ng_id.as_str()));
    assert_eq!(patched.min_node_count, Some(0));
    assert_eq!(patched.max_node_count, None);
    let r = gc
        .cluster_resize(cluster, json!({"node_count": 2, "nodegroup": ng_id}))
        .await
        .unwrap();
    assert_eq!(r, cluster);
    let seen = wait_state(
        "nodegroup resize",
        &["UPDATE_IN_PROGRESS"],
        "UPDATE_COMPLETE",
        || ng_state(&gc, cluster, &ng_id),
    )
    .await;
    assert_eq!(seen[0], "UPDATE_IN_PROGRESS", "{seen:?}");
    let read = gc.ng_get(cluster, &ng_id).await.unwrap();
    assert_eq!(
        (read.node_count, read.min_node_count, read.max_node_count),
        (Some(2), Some(0), None),
        "{read:?}"
    );
    assert_eq!(read.node_addresses.as_ref().map(Vec::len), Some(2));
    assert!(read.updated_at.is_some());

    // Delete: 204, then DELETE_IN_PROGRESS until 404.
    gc.ng_delete(cluster, &ng_id).await.unwrap();
    wait_state(
        "nodegroup delete",
        &["DELETE_IN_PROGRESS"],
        "DELETE_COMPLETE",
        || ng_state(&gc, cluster, &ng_id),
    )
    .await;
}

/// Flows 3, 4 and the CA rotation of 8 on a cluster created with node_count 0 (at 1.10).
async fn zero_node_cluster_resized(app: &CapiApp, gc: &Gc, t1: &str) -> String {
    let id = tf_cluster_create(gc, t1, "tf_zero", 0).await;
    let st = tf_cluster_read(gc, &id, false).await;
    assert_eq!(st.node_count, 0);
    assert_eq!(st.c.node_count, Some(0));
    assert_eq!(st.c.node_addresses.as_ref().map(Vec::len), Some(0));

    // node_count 0 → 2: PATCH without a microversion, wait UPDATE_COMPLETE, Read.
    let patch = ops(&[("replace", "/node_count", Some(json!(2)))]);
    assert_eq!(gc.cluster_update(&id, patch).await.unwrap(), id);
    wait_cluster(gc, &id, &[], "UPDATE_COMPLETE").await;
    let st = tf_cluster_read(gc, &id, false).await;
    assert_eq!((st.node_count, st.c.node_count), (2, Some(2)));

    // node_count 2 → 0: at 1.10 (below, Magnum refuses zero).
    let patch = ops(&[("replace", "/node_count", Some(json!(0)))]);
    let err = gc.cluster_update(&id, patch.clone()).await.unwrap_err();
    assert_eq!(err.status, 400, "{err}");
    let v10 = gc.at("1.10");
    // The cluster was UPDATE_COMPLETE already: the first poll must not see that again. The
    // simulated controllers wait meanwhile, so a scale-down finished before that poll (the
    // other flow runs beside this one) cannot pass for a status the 202 failed to move.
    app.sim.pause();
    assert_eq!(v10.cluster_update(&id, patch).await.unwrap(), id);
    let first = cluster_state(&v10, &id).await;
    app.sim.resume();
    assert_eq!(first.as_deref(), Ok("UPDATE_IN_PROGRESS"));
    wait_cluster(&v10, &id, &[], "UPDATE_COMPLETE").await;
    let st = tf_cluster_read(gc, &id, false).await;
    assert_eq!((st.node_count, st.c.node_count), (0, Some(0)));

    // gophercloud's clusters.Resize of the default worker by name (the caller sets 1.7).
    let r = gc
        .at("1.7")
        .cluster_resize(&id, json!({"node_count": 1, "nodegroup": "default-worker"}))
        .await
        .unwrap();
    assert_eq!(r, id);
    let seen = wait_cluster(gc, &id, &[], "UPDATE_COMPLETE").await;
    assert_eq!(seen[0], "UPDATE_IN_PROGRESS", "{seen:?}");
    let st = tf_cluster_read(gc, &id, false).await;
    assert_eq!(st.node_count, 1);

    // certificates.Update: PATCH with no body, no microversion ⇒ 202; the CA rotates.
    let ca_before = gc.cert_get(&id).await.pem.unwrap();
    gc.cert_rotate(&id).await.unwrap();
    let seen = wait_cluster(gc, &id, &[], "UPDATE_COMPLETE").await;
    assert_eq!(seen[0], "UPDATE_IN_PROGRESS", "{seen:?}");
    let ca_after = gc.cert_get(&id).await.pem.unwrap();
    assert_ne!(ca_before, ca_after, "the CA did not rotate");
    id
}

/// Flow 9: List/ListDetail with marker, limit, sort_key, sort_dir, following `next`.
async fn listing(gc: &Gc, clusters: &[&str], templates: &[&str]) {
    // BuildQueryString → url.Values.Encode(): keys sorted.
    let q = "?limit=1&sort_dir=asc&sort_key=created_at";
    for path in ["clusters", "clusters/detail"] {
        let (items, requests) = gc
            .all_pages::<ClusterPage>(format!("{}{q}", gc.url(&[path])))
            .await;
        // Created concurrently: the order between the two is the database's.
        let mut ids: Vec<&str> = items.iter().filter_map(|c| c.uuid.as_deref()).collect();
        ids.sort_unstable();
        let mut want = clusters.to_vec();
        want.sort_unstable();
        assert_eq!(ids, want, "{path}");
        // Two full pages, then an empty one ends the pager.
        assert_eq!(requests, 3, "{path}");
        for c in &items {
            assert!(c.stack_id.is_some() && c.status.is_some(), "{c:?}");
            if path == "clusters" {
                assert!(c.created_at.is_none(), "the short form has no timestamps");
            } else {
                assert!(c.created_at.is_some() && c.api_address.is_some());
            }
        }
    }
    // Starting after the first, newest first.
    let (items, _) = gc
        .all_pages::<ClusterPage>(format!(
            "{}?limit=5&marker={}&sort_dir=desc&sort_key=name",
            gc.url(&["clusters"]),
            clusters[1]
        ))
        .await;
    // Names sort tf_cluster < tf_zero, so after tf_zero (desc) comes tf_cluster.
    let ids: Vec<&str> = items.iter().filter_map(|c| c.uuid.as_deref()).collect();
    assert_eq!(ids, [clusters[0]]);

    let (items, _) = gc
        .all_pages::<ClusterTemplatePage>(format!(
            "{}?limit=1&sort_dir=asc&sort_key=created_at",
            gc.url(&["clustertemplates"])
        ))
        .await;
    let ids: Vec<&str> = items.iter().filter_map(|t| t.uuid.as_deref()).collect();
    assert_eq!(ids, templates);
}
