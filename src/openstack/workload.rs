//! What a workload cluster's own controllers create in the tenant project, seen and removed with
//! the cluster's credential: Octavia load balancers of `Service type=LoadBalancer` (with the
//! floating IPs on their VIP ports), Cinder volumes of PersistentVolumes, and whether the Nova
//! servers those volumes are attached to still exist; and the Nova server groups the driver
//! places a cluster's machines in. Which of them belong to a cluster is the
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

/// How a delete ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted now, or already gone.
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

/// Octavia's v2 root (catalogs list it unversioned).
fn octavia(s: &UserSession) -> Result<String, OpenStackError> {
    Ok(versioned(&endpoint(s, OCTAVIA, &["load-balancer"])?, "v2"))
}

/// Cinder's v3 root: catalogs list it with the project (`…/v3/<project>`) or without
/// (`…/v3`, microversion 3.67 and later), never unversioned in practice.
fn cinder(s: &UserSession) -> Result<String, OpenStackError> {
    let url = endpoint(s, CINDER, &["block-storage", "volumev3"])?;
    if url.split('/').any(|seg| seg == "v3") {
        Ok(url)
    } else {
        Ok(format!("{url}/v3"))
    }
}

/// Every load balancer the token's project can see.
pub async fn load_balancers(s: &UserSession) -> Result<Vec<LoadBalancer>, OpenStackError> {
    let url = format!("{}/lbaas/loadbalancers", octavia(s)?);
    let (status, body) = s.send_json(OCTAVIA, Method::GET, &url).await?;
    if status != 200 {
        return Err(failed(OCTAVIA, "listing load balancers", status, &body));
    }
    Ok(body
        .get("loadbalancers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|lb| LoadBalancer {
            id: text(lb, "id"),
            name: text(lb, "name"),
            tags: lb
                .get("tags")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            provisioning_status: text(lb, "provisioning_status"),
            vip_port_id: lb
                .get("vip_port_id")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
        .collect())
}

/// Deletes the floating IPs on the load balancer's VIP port, then the load balancer with
/// everything under it (`cascade=true`: listeners, pools, members, health monitors).
pub async fn delete_load_balancer(
    s: &UserSession,
    lb: &LoadBalancer,
) -> Result<Deleted, OpenStackError> {
    if lb.provisioning_status.starts_with("PENDING_") {
        return Ok(Deleted::NotYet);
    }
    if let Some(port) = &lb.vip_port_id {
        delete_floating_ips_of(s, port).await?;
    }
    let url = format!("{}/lbaas/loadbalancers/{}?cascade=true", octavia(s)?, lb.id);
    let (status, body) = s.send_json(OCTAVIA, Method::DELETE, &url).await?;
    match status {
        200..=299 | 404 => Ok(Deleted::Done),
        // Immutable while another change is under way.
        409 => Ok(Deleted::NotYet),
        _ => Err(failed(OCTAVIA, "deleting a load balancer", status, &body)),
    }
}

async fn delete_floating_ips_of(s: &UserSession, port: &str) -> Result<(), OpenStackError> {
    let root = versioned(&endpoint(s, NEUTRON, &["network"])?, "v2.0");
    let url = format!("{root}/floatingips?port_id={port}");
    let (status, body) = s.send_json(NEUTRON, Method::GET, &url).await?;
    if status != 200 {
        return Err(failed(NEUTRON, "listing floating IPs", status, &body));
    }
    let ids: Vec<String> = body
        .get("floatingips")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        // Neutron filters by port already; checked again so nothing else is ever deleted.
        .filter(|f| f.get("port_id").and_then(Value::as_str) == Some(port))
        .map(|f| text(f, "id"))
        .collect();
    for id in ids {
        let (status, body) = s
            .send_json(NEUTRON, Method::DELETE, &format!("{root}/floatingips/{id}"))
            .await?;
        if !(200..=299).contains(&status) && status != 404 {
            return Err(failed(NEUTRON, "deleting a floating IP", status, &body));
        }
    }
    Ok(())
}

/// The volumes whose metadata has `key` = `value` (Cinder filters; the caller checks again).
pub async fn volumes_with_metadata(
    s: &UserSession,
    key: &str,
    value: &str,
) -> Result<Vec<Volume>, OpenStackError> {
    let filter = serde_json::json!({ key: value }).to_string();
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("metadata", &filter)
        .finish();
    let url = format!("{}/volumes/detail?{query}", cinder(s)?);
    let (status, body) = s.send_json(CINDER, Method::GET, &url).await?;
    if status != 200 {
        return Err(failed(CINDER, "listing volumes", status, &body));
    }
    Ok(body
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| Volume {
            id: text(v, "id"),
            status: text(v, "status"),
            metadata: v
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
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

/// Deletes a detached volume; an attached or busy one is [`Deleted::NotYet`].
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
