//! What a workload cluster's own controllers create in the tenant project, seen and removed with
//! the cluster's credential: Octavia load balancers of `Service type=LoadBalancer`, Neutron
//! floating IPs and security groups, Cinder volumes of PersistentVolumes and their snapshots,
//! and whether the Nova servers those volumes are attached to still exist; and the Nova server
//! groups the driver places a cluster's machines in. Lists are filtered by project on the
//! server and followed through every page (`*_links`). Which of them belong to a cluster is the
//! driver's rule (`capi::cleanup`); this module only speaks the services' wire formats.

use reqwest::Method;
use serde_json::Value;

use super::call::OpenStackError;
use super::catalog::versioned;
use super::session::UserSession;

const OCTAVIA: &str = "Octavia";
const CINDER: &str = "Cinder";
const NEUTRON: &str = "Neutron";
const NOVA: &str = "Nova";

/// A load balancer as Octavia lists it (the fields the cleanup reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancer {
    pub id: String,
    pub name: String,
    pub tags: Vec<String>,
    pub provisioning_status: String,
    pub vip_port_id: Option<String>,
    /// Its listeners' ids.
    pub listeners: Vec<String>,
    /// Its pools' ids.
    pub pools: Vec<String>,
}

/// A listener or a pool of a load balancer as Octavia shows it (the fields the cleanup reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbChild {
    pub id: String,
    pub name: String,
    pub tags: Vec<String>,
    /// A listener's default pool.
    pub default_pool_id: Option<String>,
}

/// Octavia's collections under a load balancer that the cleanup reads and deletes one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbChildKind {
    Listener,
    Pool,
}

impl LbChildKind {
    fn segment(self) -> &'static str {
        match self {
            Self::Listener => "listeners",
            Self::Pool => "pools",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Self::Listener => "listener",
            Self::Pool => "pool",
        }
    }
}

/// A volume as Cinder lists it (the fields the cleanup reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub id: String,
    pub status: String,
    pub metadata: serde_json::Map<String, Value>,
    /// Servers the volume is attached to.
    pub attached_to: Vec<String>,
}

/// How a delete (or a tag update, which Octavia refuses the same way while busy) ended when it
/// did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted (updated) now, or already gone.
    Done,
    /// Refused for now (a load balancer in a `PENDING_*` state, an attached volume): try again.
    NotYet,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The message of an error body in any of the services' formats.
fn message(body: &Value) -> String {
    let candidates = [
        "/faultstring",          // Octavia (WSME)
        "/NeutronError/message", // Neutron
        "/badRequest/message",   // Cinder / Nova
        "/itemNotFound/message", // Cinder / Nova
        "/overLimit/message",    // Cinder / Nova
        "/computeFault/message", // Nova
        "/error/message",        // keystonemiddleware
    ];
    candidates
        .iter()
        .find_map(|p| body.pointer(p).and_then(Value::as_str))
        .unwrap_or("no error message")
        .to_string()
}

fn failed(service: &str, what: &str, status: u16, body: &Value) -> OpenStackError {
    match status {
        401 => OpenStackError::InvalidToken,
        403 => OpenStackError::Forbidden(format!("{service} ({what})")),
        404 => OpenStackError::NotFound(format!("{service} ({what})")),
        _ => OpenStackError::unavailable(
            service,
            format!("{what} answered {status}: {}", message(body)),
        ),
    }
}

fn endpoint(s: &UserSession, service: &str, types: &[&str]) -> Result<String, OpenStackError> {
    s.catalog_url(types)
        .map(|u| u.trim_end_matches('/').to_string())
        .ok_or_else(|| {
            OpenStackError::unavailable(
                service,
                format!("no {} endpoint in the service catalog", types[0]),
            )
        })
}

/// Whether the session's catalog has any of `types` (a cloud without Octavia or Cinder has
/// nothing of that kind to clean).
pub fn has_service(s: &UserSession, types: &[&str]) -> bool {
    s.catalog_url(types).is_some()
}

pub use super::catalog::{BLOCK_STORAGE, LOAD_BALANCER, NETWORK};

/// Octavia's v2 root (catalogs list it unversioned).
fn octavia(s: &UserSession) -> Result<String, OpenStackError> {
    Ok(versioned(&endpoint(s, OCTAVIA, LOAD_BALANCER)?, "v2"))
}

/// Cinder's v3 root: catalogs list it with the project (`…/v3/<project>`) or without
/// (`…/v3`, microversion 3.67 and later), never unversioned in practice.
fn cinder(s: &UserSession) -> Result<String, OpenStackError> {
    let url = endpoint(s, CINDER, BLOCK_STORAGE)?;
    if url.split('/').any(|seg| seg == "v3") {
        Ok(url)
    } else {
        Ok(format!("{url}/v3"))
    }
}

fn neutron(s: &UserSession) -> Result<String, OpenStackError> {
    Ok(versioned(&endpoint(s, NEUTRON, NETWORK)?, "v2.0"))
}

/// Pages a list call may span before it counts as a loop (a service answering the same `next`
/// link forever).
const MAX_PAGES: usize = 1000;

/// Every item of a list call, following the `{key}_links` `next` links page by page (the
/// pagination Octavia, Cinder and Neutron share). `what` names the call in errors. A 404 is
/// `NotFound` (for Neutron: the extension is not there).
async fn list_all(
    s: &UserSession,
    service: &str,
    what: &str,
    first: String,
    key: &str,
) -> Result<Vec<Value>, OpenStackError> {
    let mut out = Vec::new();
    let mut url = Some(first);
    let mut pages = 0;
    while let Some(u) = url.take() {
        pages += 1;
        if pages > MAX_PAGES {
            return Err(OpenStackError::unavailable(
                service,
                format!("{what}: more than {MAX_PAGES} pages"),
            ));
        }
        let (status, body) = s.send_json(service, Method::GET, &u).await?;
        if status != 200 {
            return Err(failed(service, what, status, &body));
        }
        let items = body.get(key).and_then(Value::as_array);
        let got = items.map_or(0, Vec::len);
        out.extend(items.into_iter().flatten().cloned());
        url = body
            .get(format!("{key}_links"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|l| l.get("rel").and_then(Value::as_str) == Some("next"))
            .and_then(|l| l.get("href").and_then(Value::as_str))
            .filter(|_| got > 0)
            .map(str::to_string);
    }
    Ok(out)
}

/// `url?k=v&…`, the values form-encoded.
fn with_query(url: String, pairs: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        q.append_pair(k, v);
    }
    format!("{url}?{}", q.finish())
}

/// A volume's or snapshot's `metadata`.
fn metadata(v: &Value) -> serde_json::Map<String, Value> {
    v.get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// The load balancers of `project` (filtered by Octavia, every page).
pub async fn load_balancers(
    s: &UserSession,
    project: &str,
) -> Result<Vec<LoadBalancer>, OpenStackError> {
    let url = with_query(
        format!("{}/lbaas/loadbalancers", octavia(s)?),
        &[("project_id", project)],
    );
    let all = list_all(s, OCTAVIA, "listing load balancers", url, "loadbalancers").await?;
    Ok(all
        .iter()
        .map(|lb| LoadBalancer {
            id: text(lb, "id"),
            name: text(lb, "name"),
            tags: strings(lb, "tags"),
            provisioning_status: text(lb, "provisioning_status"),
            vip_port_id: lb
                .get("vip_port_id")
                .and_then(Value::as_str)
                .map(str::to_string),
            listeners: ids(lb, "listeners"),
            pools: ids(lb, "pools"),
        })
        .collect())
}

/// The ids of a load balancer's `key` (`[{"id": …}]`).
fn ids(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|x| text(x, "id"))
        .filter(|id| !id.is_empty())
        .collect()
}

/// Listener or pool `id` (`None` once it is gone).
pub async fn lb_child(
    s: &UserSession,
    kind: LbChildKind,
    id: &str,
) -> Result<Option<LbChild>, OpenStackError> {
    let url = format!("{}/lbaas/{}/{id}", octavia(s)?, kind.segment());
    let (status, body) = s.send_json(OCTAVIA, Method::GET, &url).await?;
    match status {
        200 => {
            let v = body.get(kind.key()).cloned().unwrap_or_default();
            Ok(Some(LbChild {
                id: text(&v, "id"),
                name: text(&v, "name"),
                tags: strings(&v, "tags"),
                default_pool_id: v
                    .get("default_pool_id")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            }))
        }
        404 => Ok(None),
        _ => Err(failed(OCTAVIA, "reading a listener or pool", status, &body)),
    }
}

/// Deletes a listener or a pool (a pool with its members and health monitor); while its load
/// balancer is immutable (409), [`Deleted::NotYet`].
pub async fn delete_lb_child(
    s: &UserSession,
    kind: LbChildKind,
    id: &str,
) -> Result<Deleted, OpenStackError> {
    let url = format!("{}/lbaas/{}/{id}", octavia(s)?, kind.segment());
    delete_unless_busy(s, OCTAVIA, &url, "deleting a listener or pool").await
}

/// A DELETE the service refuses with 409 while the resource is busy or in use
/// ([`Deleted::NotYet`]); gone already counts as deleted.
async fn delete_unless_busy(
    s: &UserSession,
    service: &str,
    url: &str,
    what: &str,
) -> Result<Deleted, OpenStackError> {
    let (status, body) = s.send_json(service, Method::DELETE, url).await?;
    match status {
        200..=299 | 404 => Ok(Deleted::Done),
        409 => Ok(Deleted::NotYet),
        _ => Err(failed(service, what, status, &body)),
    }
}

/// Replaces the load balancer's tags with `tags`; while it is immutable (409),
/// [`Deleted::NotYet`].
pub async fn set_load_balancer_tags(
    s: &UserSession,
    id: &str,
    tags: &[String],
) -> Result<Deleted, OpenStackError> {
    let url = format!("{}/lbaas/loadbalancers/{id}", octavia(s)?);
    let body = serde_json::json!({"loadbalancer": {"tags": tags}});
    let (status, answer) = s
        .send_json_with(OCTAVIA, Method::PUT, &url, &[], Some(&body))
        .await?;
    match status {
        200..=299 => Ok(Deleted::Done),
        409 => Ok(Deleted::NotYet),
        _ => Err(failed(
            OCTAVIA,
            "updating a load balancer's tags",
            status,
            &answer,
        )),
    }
}

/// Deletes the load balancer with everything under it (`cascade=true`: listeners, pools,
/// members, health monitors). Its floating IPs are the caller's business (see
/// [`floating_ips`]).
pub async fn delete_load_balancer(
    s: &UserSession,
    lb: &LoadBalancer,
) -> Result<Deleted, OpenStackError> {
    if lb.provisioning_status.starts_with("PENDING_") {
        return Ok(Deleted::NotYet);
    }
    let url = format!("{}/lbaas/loadbalancers/{}?cascade=true", octavia(s)?, lb.id);
    // 409: immutable while another change is under way.
    delete_unless_busy(s, OCTAVIA, &url, "deleting a load balancer").await
}

/// A floating IP as Neutron lists it (the fields the cleanup reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloatingIp {
    pub id: String,
    pub address: String,
    pub port_id: Option<String>,
    pub description: String,
}

/// The floating IPs of `project` (every page); `Ok(None)` when Neutron has no L3 extension
/// (`/floatingips` answers 404 and `/extensions` does not list `router`).
pub async fn floating_ips(
    s: &UserSession,
    project: &str,
) -> Result<Option<Vec<FloatingIp>>, OpenStackError> {
    let root = neutron(s)?;
    let url = with_query(format!("{root}/floatingips"), &[("project_id", project)]);
    let all = match list_all(s, NEUTRON, "listing floating IPs", url, "floatingips").await {
        Ok(all) => all,
        Err(OpenStackError::NotFound(what)) => {
            return if has_extension(s, "router").await? {
                Err(OpenStackError::NotFound(what))
            } else {
                Ok(None)
            };
        }
        Err(e) => return Err(e),
    };
    Ok(Some(
        all.iter()
            .map(|f| FloatingIp {
                id: text(f, "id"),
                address: text(f, "floating_ip_address"),
                port_id: f.get("port_id").and_then(Value::as_str).map(str::to_string),
                description: text(f, "description"),
            })
            .collect(),
    ))
}

/// Whether Neutron lists extension `alias` (`GET /v2.0/extensions`).
async fn has_extension(s: &UserSession, alias: &str) -> Result<bool, OpenStackError> {
    let url = format!("{}/extensions", neutron(s)?);
    let all = list_all(s, NEUTRON, "listing extensions", url, "extensions").await?;
    Ok(all
        .iter()
        .any(|e| e.get("alias").and_then(Value::as_str) == Some(alias)))
}

/// Deletes a floating IP (gone already counts as deleted).
pub async fn delete_floating_ip(s: &UserSession, id: &str) -> Result<(), OpenStackError> {
    let url = format!("{}/floatingips/{id}", neutron(s)?);
    let (status, body) = s.send_json(NEUTRON, Method::DELETE, &url).await?;
    match status {
        200..=299 | 404 => Ok(()),
        _ => Err(failed(NEUTRON, "deleting a floating IP", status, &body)),
    }
}

/// Disassociates a floating IP from its port, keeping the address in the project.
pub async fn disassociate_floating_ip(s: &UserSession, id: &str) -> Result<(), OpenStackError> {
    let url = format!("{}/floatingips/{id}", neutron(s)?);
    let body = serde_json::json!({"floatingip": {"port_id": null}});
    let (status, answer) = s
        .send_json_with(NEUTRON, Method::PUT, &url, &[], Some(&body))
        .await?;
    match status {
        200..=299 | 404 => Ok(()),
        _ => Err(failed(
            NEUTRON,
            "disassociating a floating IP",
            status,
            &answer,
        )),
    }
}

/// A security group as Neutron lists it (the fields the cleanup reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub description: String,
}

fn security_group_of(g: &Value) -> SecurityGroup {
    SecurityGroup {
        id: text(g, "id"),
        name: text(g, "name"),
        description: text(g, "description"),
    }
}

/// The security groups of `project` (every page); `Ok(None)` when Neutron has no
/// security-group extension (404).
pub async fn security_groups(
    s: &UserSession,
    project: &str,
) -> Result<Option<Vec<SecurityGroup>>, OpenStackError> {
    let url = with_query(
        format!("{}/security-groups", neutron(s)?),
        &[("project_id", project)],
    );
    match list_all(
        s,
        NEUTRON,
        "listing security groups",
        url,
        "security_groups",
    )
    .await
    {
        Ok(all) => Ok(Some(all.iter().map(security_group_of).collect())),
        Err(OpenStackError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes a security group; one still used by a port (409) is [`Deleted::NotYet`].
pub async fn delete_security_group(s: &UserSession, id: &str) -> Result<Deleted, OpenStackError> {
    let url = format!("{}/security-groups/{id}", neutron(s)?);
    delete_unless_busy(s, NEUTRON, &url, "deleting a security group").await
}

/// The volumes whose metadata has `key` = `value` (Cinder filters; the caller checks again),
/// every page.
pub async fn volumes_with_metadata(
    s: &UserSession,
    key: &str,
    value: &str,
) -> Result<Vec<Volume>, OpenStackError> {
    let filter = serde_json::json!({ key: value }).to_string();
    let url = with_query(
        format!("{}/volumes/detail", cinder(s)?),
        &[("metadata", &filter)],
    );
    let all = list_all(s, CINDER, "listing volumes", url, "volumes").await?;
    Ok(all
        .iter()
        .map(|v| Volume {
            id: text(v, "id"),
            status: text(v, "status"),
            metadata: metadata(v),
            attached_to: v
                .get("attachments")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|a| text(a, "server_id"))
                .filter(|id| !id.is_empty())
                .collect(),
        })
        .collect())
}

/// A volume snapshot as Cinder lists it (the fields the cleanup reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub id: String,
    pub status: String,
    pub metadata: serde_json::Map<String, Value>,
}

/// The snapshots of volume `volume` (Cinder filters by `volume_id`; checked again), every page.
pub async fn snapshots_of(s: &UserSession, volume: &str) -> Result<Vec<Snapshot>, OpenStackError> {
    let url = with_query(
        format!("{}/snapshots/detail", cinder(s)?),
        &[("volume_id", volume)],
    );
    let all = list_all(s, CINDER, "listing snapshots", url, "snapshots").await?;
    Ok(all
        .iter()
        .filter(|v| v.get("volume_id").and_then(Value::as_str) == Some(volume))
        .map(|v| Snapshot {
            id: text(v, "id"),
            status: text(v, "status"),
            metadata: metadata(v),
        })
        .collect())
}

/// Deletes a snapshot; a busy one (a `*ing` state, Cinder's 400) is [`Deleted::NotYet`].
pub async fn delete_snapshot(s: &UserSession, snap: &Snapshot) -> Result<Deleted, OpenStackError> {
    if snap.status.ends_with("ing") {
        return Ok(Deleted::NotYet);
    }
    let url = format!("{}/snapshots/{}", cinder(s)?, snap.id);
    let (status, body) = s.send_json(CINDER, Method::DELETE, &url).await?;
    match status {
        200..=299 | 404 => Ok(Deleted::Done),
        400 | 409 => Ok(Deleted::NotYet),
        _ => Err(failed(CINDER, "deleting a snapshot", status, &body)),
    }
}

/// Deletes a detached volume; an attached or busy one (any `*ing` state, `error_deleting`
/// included: only an admin's state reset lets Cinder take that one again) is
/// [`Deleted::NotYet`].
pub async fn delete_volume(s: &UserSession, v: &Volume) -> Result<Deleted, OpenStackError> {
    if !v.attached_to.is_empty() || v.status == "in-use" || v.status.ends_with("ing") {
        return Ok(Deleted::NotYet);
    }
    let url = format!("{}/volumes/{}", cinder(s)?, v.id);
    let (status, body) = s.send_json(CINDER, Method::DELETE, &url).await?;
    match status {
        200..=299 | 404 => Ok(Deleted::Done),
        // Cinder's "Invalid volume" (attached, has snapshots, …) and its state conflicts.
        400 | 409 => Ok(Deleted::NotYet),
        _ => Err(failed(CINDER, "deleting a volume", status, &body)),
    }
}

/// Whether Nova still has server `id`.
pub async fn server_exists(s: &UserSession, id: &str) -> Result<bool, OpenStackError> {
    let root = nova(s)?;
    let (status, body) = s
        .send_json(NOVA, Method::GET, &format!("{root}/servers/{id}"))
        .await?;
    match status {
        200 => Ok(true),
        404 => Ok(false),
        _ => Err(failed(NOVA, "reading a server", status, &body)),
    }
}

/// A Nova server group (the fields the driver reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerGroup {
    pub id: String,
    pub name: String,
}

/// Single-`policy` server groups (and the soft policies) need microversion 2.64.
const NOVA_SERVER_GROUPS: [(&str, &str); 2] = [
    ("openstack-api-version", "compute 2.64"),
    ("x-openstack-nova-api-version", "2.64"),
];

fn nova(s: &UserSession) -> Result<String, OpenStackError> {
    Ok(versioned(&endpoint(s, NOVA, &["compute"])?, "v2.1"))
}

/// The server groups of the token's project.
pub async fn server_groups(s: &UserSession) -> Result<Vec<ServerGroup>, OpenStackError> {
    let url = format!("{}/os-server-groups", nova(s)?);
    let (status, body) = s
        .send_json_with(NOVA, Method::GET, &url, &NOVA_SERVER_GROUPS, None)
        .await?;
    if status != 200 {
        return Err(failed(NOVA, "listing server groups", status, &body));
    }
    Ok(body
        .get("server_groups")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|g| ServerGroup {
                    id: text(g, "id"),
                    name: text(g, "name"),
                })
                .collect()
        })
        .unwrap_or_default())
}

/// Creates a server group with `policy`; returns its id.
pub async fn create_server_group(
    s: &UserSession,
    name: &str,
    policy: &str,
) -> Result<String, OpenStackError> {
    let url = format!("{}/os-server-groups", nova(s)?);
    let body = serde_json::json!({"server_group": {"name": name, "policy": policy}});
    let (status, answer) = s
        .send_json_with(NOVA, Method::POST, &url, &NOVA_SERVER_GROUPS, Some(&body))
        .await?;
    match status {
        200..=299 => answer
            .pointer("/server_group/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| failed(NOVA, "creating a server group (no id)", status, &answer)),
        _ => Err(failed(NOVA, "creating a server group", status, &answer)),
    }
}

/// Deletes a server group (gone already counts as deleted).
pub async fn delete_server_group(s: &UserSession, id: &str) -> Result<(), OpenStackError> {
    let url = format!("{}/os-server-groups/{id}", nova(s)?);
    let (status, body) = s
        .send_json_with(NOVA, Method::DELETE, &url, &NOVA_SERVER_GROUPS, None)
        .await?;
    match status {
        200..=299 | 404 => Ok(()),
        _ => Err(failed(NOVA, "deleting a server group", status, &body)),
    }
}

/// The ids of `project`'s Neutron ports named `name` (on `network`, when given).
pub async fn ports_named(
    s: &UserSession,
    project: &str,
    name: &str,
    network: Option<&str>,
) -> Result<Vec<String>, OpenStackError> {
    let root = neutron(s)?;
    let mut q = vec![("project_id", project), ("name", name)];
    if let Some(n) = network {
        q.push(("network_id", n));
    }
    let url = with_query(format!("{root}/ports"), &q);
    let all = list_all(s, NEUTRON, "listing ports", url, "ports").await?;
    Ok(all.iter().map(|p| text(p, "id")).collect())
}

/// Creates a port on `network` holding `address` of `subnet`, bound to nothing; its id.
pub async fn create_port(
    s: &UserSession,
    network: &str,
    subnet: &str,
    address: &str,
    name: &str,
    description: &str,
) -> Result<String, OpenStackError> {
    let body = serde_json::json!({"port": {
        "network_id": network, "name": name, "description": description,
        "fixed_ips": [{"subnet_id": subnet, "ip_address": address}]}});
    neutron_create(s, "ports", "port", &body).await
}

/// POSTs `body` to Neutron's `collection`; the id of the `key` it answers with.
async fn neutron_create(
    s: &UserSession,
    collection: &str,
    key: &str,
    body: &Value,
) -> Result<String, OpenStackError> {
    let url = format!("{}/{collection}", neutron(s)?);
    let what = format!("creating a {}", key.replace('_', " "));
    let (status, answer) = s
        .send_json_with(NEUTRON, Method::POST, &url, &[], Some(body))
        .await?;
    match status {
        200..=299 => answer
            .get(key)
            .and_then(|v| v.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| failed(NEUTRON, &format!("{what} (no id)"), status, &answer)),
        _ => Err(failed(NEUTRON, &what, status, &answer)),
    }
}

/// DELETEs `id` of Neutron's `collection` (gone already counts as deleted).
async fn neutron_delete(s: &UserSession, collection: &str, id: &str) -> Result<(), OpenStackError> {
    let url = format!("{}/{collection}/{id}", neutron(s)?);
    let (status, body) = s.send_json(NEUTRON, Method::DELETE, &url).await?;
    match status {
        200..=299 | 404 => Ok(()),
        _ => Err(failed(
            NEUTRON,
            &format!("deleting from {collection}"),
            status,
            &body,
        )),
    }
}

/// Deletes a port (gone already counts as deleted).
pub async fn delete_port(s: &UserSession, id: &str) -> Result<(), OpenStackError> {
    neutron_delete(s, "ports", id).await
}

/// Points floating IP `id` at `address` of port `port` (moving it there from wherever it was).
pub async fn associate_floating_ip(
    s: &UserSession,
    id: &str,
    port: &str,
    address: &str,
) -> Result<(), OpenStackError> {
    let url = format!("{}/floatingips/{id}", neutron(s)?);
    let body = serde_json::json!({"floatingip": {"port_id": port, "fixed_ip_address": address}});
    let (status, answer) = s
        .send_json_with(NEUTRON, Method::PUT, &url, &[], Some(&body))
        .await?;
    match status {
        200..=299 => Ok(()),
        _ => Err(failed(
            NEUTRON,
            "associating a floating IP",
            status,
            &answer,
        )),
    }
}

/// A security-group rule, as Neutron has it (what two rules are compared on, and its id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroupRule {
    /// Empty for a rule yet to be created.
    pub id: String,
    pub direction: String,
    pub ethertype: String,
    /// `None`: any protocol.
    pub protocol: Option<String>,
    pub port_range_min: Option<u16>,
    pub port_range_max: Option<u16>,
    pub remote_ip_prefix: Option<String>,
    pub remote_group_id: Option<String>,
    pub description: String,
}

impl SecurityGroupRule {
    /// Whether both admit the same traffic (ids and descriptions aside).
    pub fn same_traffic(&self, other: &Self) -> bool {
        (
            &self.direction,
            &self.ethertype,
            &self.protocol,
            self.port_range_min,
            self.port_range_max,
            &self.remote_ip_prefix,
            &self.remote_group_id,
        ) == (
            &other.direction,
            &other.ethertype,
            &other.protocol,
            other.port_range_min,
            other.port_range_max,
            &other.remote_ip_prefix,
            &other.remote_group_id,
        )
    }
}

fn opt_text(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn opt_port(v: &Value, key: &str) -> Option<u16> {
    v.get(key)
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
}

/// `project`'s security groups named `name` (Neutron does not keep names unique).
pub async fn security_groups_named(
    s: &UserSession,
    project: &str,
    name: &str,
) -> Result<Vec<SecurityGroup>, OpenStackError> {
    let all = neutron_list(
        s,
        "security-groups",
        &[("project_id", project), ("name", name)],
    )
    .await?;
    Ok(all.iter().map(security_group_of).collect())
}

/// Creates a security group (Neutron gives it its two egress rules); its id.
pub async fn create_security_group(
    s: &UserSession,
    name: &str,
    description: &str,
) -> Result<String, OpenStackError> {
    let body = serde_json::json!({"security_group": {"name": name, "description": description}});
    neutron_create(s, "security-groups", "security_group", &body).await
}

/// The rules of security group `group`.
pub async fn security_group_rules(
    s: &UserSession,
    group: &str,
) -> Result<Vec<SecurityGroupRule>, OpenStackError> {
    let all = neutron_list(s, "security-group-rules", &[("security_group_id", group)]).await?;
    Ok(all
        .iter()
        .map(|r| SecurityGroupRule {
            id: text(r, "id"),
            direction: text(r, "direction"),
            ethertype: text(r, "ethertype"),
            protocol: opt_text(r, "protocol"),
            port_range_min: opt_port(r, "port_range_min"),
            port_range_max: opt_port(r, "port_range_max"),
            remote_ip_prefix: opt_text(r, "remote_ip_prefix"),
            remote_group_id: opt_text(r, "remote_group_id"),
            description: text(r, "description"),
        })
        .collect())
}

/// Adds `rule` to security group `group`.
pub async fn create_security_group_rule(
    s: &UserSession,
    group: &str,
    rule: &SecurityGroupRule,
) -> Result<(), OpenStackError> {
    let body = serde_json::json!({"security_group_rule": {
        "security_group_id": group, "direction": rule.direction, "ethertype": rule.ethertype,
        "protocol": rule.protocol, "port_range_min": rule.port_range_min,
        "port_range_max": rule.port_range_max, "remote_ip_prefix": rule.remote_ip_prefix,
        "remote_group_id": rule.remote_group_id, "description": rule.description}});
    neutron_create(s, "security-group-rules", "security_group_rule", &body)
        .await
        .map(drop)
}

/// Deletes a security-group rule (gone already counts as deleted).
pub async fn delete_security_group_rule(s: &UserSession, id: &str) -> Result<(), OpenStackError> {
    neutron_delete(s, "security-group-rules", id).await
}

/// The CIDRs of the subnets Neutron lists with `filters` (e.g. `network_id`, `id`, `name`).
pub async fn subnet_cidrs(
    s: &UserSession,
    filters: &[(&str, &str)],
) -> Result<Vec<String>, OpenStackError> {
    let all = neutron_list(s, "subnets", filters).await?;
    Ok(all.iter().map(|n| text(n, "cidr")).collect())
}

/// The ids of the networks Neutron lists with `filters` (e.g. `name`).
pub async fn network_ids(
    s: &UserSession,
    filters: &[(&str, &str)],
) -> Result<Vec<String>, OpenStackError> {
    let all = neutron_list(s, "networks", filters).await?;
    Ok(all.iter().map(|n| text(n, "id")).collect())
}

/// Every page of Neutron's `collection` (`security-group-rules`) listed with `filters`.
async fn neutron_list(
    s: &UserSession,
    collection: &str,
    filters: &[(&str, &str)],
) -> Result<Vec<Value>, OpenStackError> {
    let url = with_query(format!("{}/{collection}", neutron(s)?), filters);
    let what = format!("listing {}", collection.replace('-', " "));
    list_all(s, NEUTRON, &what, url, &collection.replace('-', "_")).await
}
