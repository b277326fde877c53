//! The part of the fake cloud a workload cluster's controllers leave behind, in the services'
//! real wire formats: Octavia v2 load balancers (`/load-balancer/v2/lbaas/loadbalancers`: list
//! by `project_id`, show, delete with `?cascade=true`; 409 without cascade while listeners or
//! pools exist, 409 while `PENDING_*`), Cinder v3 volumes (`/volume/v3/{project}/volumes/detail
//! ?metadata=…`, show, delete; 400 while attached or with snapshots) and snapshots
//! (`…/snapshots/detail?volume_id=…`, delete), Neutron floating IPs (`/networking/v2.0/
//! floatingips` list by `port_id`/`project_id`, update of `port_id`, delete), security groups
//! (`/networking/v2.0/security-groups`: list by `project_id`, delete) and extensions
//! (`/networking/v2.0/extensions`), Nova servers (`/compute/v2.1/servers/{id}`) and Nova server
//! groups (`/compute/v2.1/os-server-groups`: list, create with microversion ≥ 2.64's `policy`,
//! show, delete; 400 for an unknown policy as Nova's schema check answers).
//!
//! Lists page as the services do (`limit`/`marker`, a `next` link in `<key>_links`), at most
//! [`Workload::page_size`] items a page when set (Octavia's and Neutron's
//! `pagination_max_limit`, Cinder's `osapi_max_limit`).
//! Deletes are asynchronous as in the real services: a deleted load balancer is
//! `PENDING_DELETE` and a deleted volume or snapshot `deleting` until the next listing, then
//! gone (a volume in [`Workload::stuck`] stays `deleting` until taken out of it).
//! Each service can be taken down on its own (503 in its format); Neutron's L3 extension can be
//! missing (`missing` holds `floatingips`: 404, and `router` absent from the extensions).

use std::collections::HashSet;

use axum::http::Method;
use serde_json::{Value, json};

/// Octavia's, Cinder's, Neutron's floating IPs and Nova's servers.
#[derive(Default)]
pub struct Workload {
    pub load_balancers: Vec<Value>,
    pub volumes: Vec<Value>,
    pub floating_ips: Vec<Value>,
    pub servers: Vec<Value>,
    pub server_groups: Vec<Value>,
    pub snapshots: Vec<Value>,
    pub security_groups: Vec<Value>,
    /// Services answering 503: `load-balancer`, `volume`.
    pub down: HashSet<String>,
    /// Neutron resources of an extension the cloud does not have: `floatingips`.
    pub missing: HashSet<String>,
    /// Volumes whose deletion does not finish (`deleting` until taken out).
    pub stuck: HashSet<String>,
    /// Most items a list answers per page (`None`: all).
    pub page_size: Option<usize>,
}

/// An answer: status and JSON body (`Null`: no body).
pub type Answer = (u16, Value);

fn octavia_fault(status: u16, msg: &str) -> Answer {
    let code = if status < 500 { "Client" } else { "Server" };
    (
        status,
        json!({"faultcode": code, "faultstring": msg, "debuginfo": null}),
    )
}

fn cinder_fault(status: u16, msg: &str) -> Answer {
    let name = match status {
        400 => "badRequest",
        404 => "itemNotFound",
        _ => "computeFault",
    };
    (status, json!({name: {"code": status, "message": msg}}))
}

fn neutron_fault(status: u16, kind: &str, msg: &str) -> Answer {
    (
        status,
        json!({"NeutronError": {"type": kind, "message": msg, "detail": ""}}),
    )
}

/// Cinder's `metadata` filter: a Python dict literal (`{'k': 'v'}`) or JSON.
fn metadata_filter(raw: &str) -> Option<serde_json::Map<String, Value>> {
    serde_json::from_str::<Value>(raw)
        .or_else(|_| serde_json::from_str::<Value>(&raw.replace('\'', "\"")))
        .ok()?
        .as_object()
        .cloned()
}

/// One page of `items` (`limit`/`marker` from `query`, at most `max` a page), under `key`, with
/// a `next` link to `url` (the other query parameters kept) when more follow.
fn page(
    items: Vec<Value>,
    query: &[(String, String)],
    max: Option<usize>,
    url: &str,
    key: &str,
) -> Answer {
    let param = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.as_str());
    let mut items = items;
    if let Some(m) = param("marker") {
        let Some(p) = items.iter().position(|v| v["id"] == m) else {
            return (
                400,
                json!({"badRequest": {"code": 400, "message": format!("marker [{m}] not found")}}),
            );
        };
        items.drain(..=p);
    }
    let limit = param("limit").and_then(|l| l.parse::<usize>().ok());
    let size = match (limit, max) {
        (Some(l), Some(m)) => Some(l.min(m)),
        (l, m) => l.or(m),
    };
    let mut links = Vec::new();
    if let Some(n) = size.filter(|n| *n > 0 && items.len() > *n) {
        items.truncate(n);
        let marker = items.last().and_then(|v| v["id"].as_str()).unwrap_or("");
        let n = n.to_string();
        let kept = query
            .iter()
            .filter(|(k, _)| k != "limit" && k != "marker")
            .map(|(k, v)| (k.as_str(), v.as_str()));
        let href = super::with_query(url, kept.chain([("limit", n.as_str()), ("marker", marker)]));
        links.push(json!({"rel": "next", "href": href}));
    }
    (200, json!({ key: items, format!("{key}_links"): links }))
}

/// Neutron's synchronous delete of item `id` of `items`: 204, or 404 `kind` with `missing`.
fn neutron_delete(items: &mut Vec<Value>, id: &str, kind: &str, missing: &str) -> Answer {
    let before = items.len();
    items.retain(|v| v["id"] != id);
    if items.len() == before {
        neutron_fault(404, kind, missing)
    } else {
        (204, Value::Null)
    }
}

/// Whether `v` belongs to the `project_id` asked for (no filter: everything).
fn of_project(v: &Value, query: &[(String, String)]) -> bool {
    query
        .iter()
        .filter(|(k, _)| k == "project_id")
        .all(|(_, p)| v["project_id"] == p.as_str())
}

impl Workload {
    /// Settles asynchronous deletes: what was deleted is gone by the next listing.
    fn settle(&mut self) {
        self.load_balancers
            .retain(|lb| lb["provisioning_status"] != "PENDING_DELETE");
        let stuck = &self.stuck;
        self.volumes.retain(|v| {
            v["status"] != "deleting" || v["id"].as_str().is_some_and(|id| stuck.contains(id))
        });
        self.snapshots.retain(|s| s["status"] != "deleting");
    }

    /// Answers a request for one of these resources; `None` when the path is not one of them.
    pub fn dispatch(
        &mut self,
        base: &str,
        method: &Method,
        segs: &[&str],
        query: &[(String, String)],
        body: &Value,
    ) -> Option<Answer> {
        let url = format!("{base}/{}", segs.join("/"));
        match segs {
            ["load-balancer", "v2", "lbaas", "loadbalancers", rest @ ..] => {
                if self.down.contains("load-balancer") {
                    return Some(octavia_fault(503, "Service Unavailable"));
                }
                Some(self.octavia(method, rest, query, &url))
            }
            ["volume", "v3", _project, "volumes", rest @ ..] => {
                if self.down.contains("volume") {
                    return Some(cinder_fault(503, "Service Unavailable"));
                }
                Some(self.cinder(method, rest, query, &url))
            }
            ["volume", "v3", _project, "snapshots", rest @ ..] => {
                if self.down.contains("volume") {
                    return Some(cinder_fault(503, "Service Unavailable"));
                }
                Some(self.cinder_snapshots(method, rest, query, &url))
            }
            ["networking", "v2.0", "floatingips", ..] if self.missing.contains("floatingips") => {
                None
            }
            ["networking", "v2.0", "floatingips", rest @ ..] => {
                Some(self.floating_ips(method, rest, query, body, &url))
            }
            ["networking", "v2.0", "security-groups", rest @ ..] => {
                Some(self.security_groups(method, rest, query, &url))
            }
            ["networking", "v2.0", "extensions"] if *method == Method::GET => {
                let mut aliases = vec!["external-net", "security-group", "quotas"];
                if !self.missing.contains("floatingips") {
                    aliases.push("router");
                }
                let exts: Vec<Value> = aliases
                    .iter()
                    .map(|a| json!({"alias": a, "name": a, "description": "", "updated": "2013-01-20T00:00:00-00:00", "links": []}))
                    .collect();
                Some((200, json!({ "extensions": exts })))
            }
            ["compute", "v2.1", "os-server-groups", rest @ ..] => {
                Some(self.server_groups(method, rest, body))
            }
            ["compute", "v2.1", "servers", id] if *method == Method::GET => {
                Some(match self.servers.iter().find(|s| s["id"] == *id) {
                    Some(s) => (200, json!({ "server": s })),
                    None => cinder_fault(404, &format!("Instance {id} could not be found.")),
                })
            }
            _ => None,
        }
    }

    fn octavia(
        &mut self,
        method: &Method,
        rest: &[&str],
        query: &[(String, String)],
        url: &str,
    ) -> Answer {
        let cascade = query.iter().any(|(k, v)| k == "cascade" && v == "true");
        match (method.clone(), rest) {
            (Method::GET, []) => {
                self.settle();
                let mine: Vec<Value> = self
                    .load_balancers
                    .iter()
                    .filter(|lb| of_project(lb, query))
                    .cloned()
                    .collect();
                page(mine, query, self.page_size, url, "loadbalancers")
            }
            (Method::GET, [id]) => match self.load_balancers.iter().find(|l| l["id"] == *id) {
                Some(lb) => (200, json!({ "loadbalancer": lb })),
                None => octavia_fault(404, &format!("Load Balancer {id} could not be found.")),
            },
            (Method::DELETE, [id]) => {
                let Some(lb) = self.load_balancers.iter_mut().find(|l| l["id"] == *id) else {
                    return octavia_fault(404, &format!("Load Balancer {id} could not be found."));
                };
                if lb["provisioning_status"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("PENDING_"))
                {
                    return octavia_fault(
                        409,
                        &format!("Load Balancer {id} is immutable and cannot be updated."),
                    );
                }
                let children = lb["listeners"].as_array().is_some_and(|l| !l.is_empty())
                    || lb["pools"].as_array().is_some_and(|p| !p.is_empty());
                if children && !cascade {
                    return octavia_fault(
                        409,
                        &format!("Cannot delete Load Balancer {id} - it has children"),
                    );
                }
                lb["provisioning_status"] = json!("PENDING_DELETE");
                (204, Value::Null)
            }
            _ => octavia_fault(405, "Method not allowed"),
        }
    }

    fn cinder(
        &mut self,
        method: &Method,
        rest: &[&str],
        query: &[(String, String)],
        url: &str,
    ) -> Answer {
        let metadata = query
            .iter()
            .find(|(k, _)| k == "metadata")
            .map(|(_, v)| v.as_str());
        match (method.clone(), rest) {
            (Method::GET, ["detail"]) => {
                self.settle();
                let wanted = match metadata.map(metadata_filter) {
                    Some(None) => return cinder_fault(400, "Invalid filter: metadata"),
                    Some(Some(m)) => m,
                    None => serde_json::Map::new(),
                };
                let hits: Vec<Value> = self
                    .volumes
                    .iter()
                    .filter(|v| {
                        wanted
                            .iter()
                            .all(|(k, want)| v["metadata"].get(k) == Some(want))
                    })
                    .cloned()
                    .collect();
                page(hits, query, self.page_size, url, "volumes")
            }
            (Method::GET, [id]) => match self.volumes.iter().find(|v| v["id"] == *id) {
                Some(v) => (200, json!({ "volume": v })),
                None => cinder_fault(404, &format!("Volume {id} could not be found.")),
            },
            (Method::DELETE, [id]) => {
                let Some(v) = self.volumes.iter_mut().find(|v| v["id"] == *id) else {
                    return cinder_fault(404, &format!("Volume {id} could not be found."));
                };
                let v = &mut *v;
                let attached = v["attachments"].as_array().is_some_and(|a| !a.is_empty());
                let snapshots = self.snapshots.iter().any(|s| s["volume_id"] == *id);
                if attached
                    || snapshots
                    || !matches!(v["status"].as_str(), Some("available" | "error"))
                {
                    return cinder_fault(
                        400,
                        "Invalid volume: Volume status must be available or error or \
                         error_restoring or error_extending or error_managing and must not be \
                         migrating, attached, belong to a group, have snapshots, awaiting a \
                         transfer, or be disassociated from snapshots after volume transfer.",
                    );
                }
                v["status"] = json!("deleting");
                (202, Value::Null)
            }
            _ => cinder_fault(404, "The resource could not be found."),
        }
    }

    fn floating_ips(
        &mut self,
        method: &Method,
        rest: &[&str],
        query: &[(String, String)],
        body: &Value,
        url: &str,
    ) -> Answer {
        let port = query
            .iter()
            .find(|(k, _)| k == "port_id")
            .map(|(_, v)| v.as_str());
        match (method.clone(), rest) {
            (Method::GET, []) => {
                let hits: Vec<Value> = self
                    .floating_ips
                    .iter()
                    .filter(|f| port.is_none_or(|p| f["port_id"] == p) && of_project(f, query))
                    .cloned()
                    .collect();
                page(hits, query, self.page_size, url, "floatingips")
            }
            (Method::PUT, [id]) => {
                let Some(f) = self.floating_ips.iter_mut().find(|f| f["id"] == *id) else {
                    return neutron_fault(
                        404,
                        "FloatingIPNotFound",
                        &format!("Floating IP {id} could not be found"),
                    );
                };
                let Some(port) = body.pointer("/floatingip/port_id") else {
                    return neutron_fault(400, "HTTPBadRequest", "Invalid input");
                };
                f["port_id"] = port.clone();
                if port.is_null() {
                    f["fixed_ip_address"] = Value::Null;
                    f["status"] = json!("DOWN");
                }
                (200, json!({ "floatingip": f }))
            }
            (Method::DELETE, [id]) => neutron_delete(
                &mut self.floating_ips,
                id,
                "FloatingIPNotFound",
                &format!("Floating IP {id} could not be found"),
            ),
            _ => neutron_fault(405, "HTTPMethodNotAllowed", "Method not allowed"),
        }
    }

    fn security_groups(
        &mut self,
        method: &Method,
        rest: &[&str],
        query: &[(String, String)],
        url: &str,
    ) -> Answer {
        match (method.clone(), rest) {
            (Method::GET, []) => {
                let hits: Vec<Value> = self
                    .security_groups
                    .iter()
                    .filter(|g| of_project(g, query))
                    .cloned()
                    .collect();
                page(hits, query, self.page_size, url, "security_groups")
            }
            (Method::DELETE, [id]) => neutron_delete(
                &mut self.security_groups,
                id,
                "SecurityGroupNotFound",
                &format!("Security group {id} does not exist"),
            ),
            _ => neutron_fault(405, "HTTPMethodNotAllowed", "Method not allowed"),
        }
    }

    fn cinder_snapshots(
        &mut self,
        method: &Method,
        rest: &[&str],
        query: &[(String, String)],
        url: &str,
    ) -> Answer {
        match (method.clone(), rest) {
            (Method::GET, ["detail"]) => {
                self.settle();
                let volume = query
                    .iter()
                    .find(|(k, _)| k == "volume_id")
                    .map(|(_, v)| v.as_str());
                let hits: Vec<Value> = self
                    .snapshots
                    .iter()
                    .filter(|s| volume.is_none_or(|v| s["volume_id"] == v))
                    .cloned()
                    .collect();
                page(hits, query, self.page_size, url, "snapshots")
            }
            (Method::DELETE, [id]) => {
                let Some(sn) = self.snapshots.iter_mut().find(|s| s["id"] == *id) else {
                    return cinder_fault(404, &format!("Snapshot {id} could not be found."));
                };
                if !matches!(sn["status"].as_str(), Some("available" | "error")) {
                    return cinder_fault(
                        400,
                        "Invalid snapshot: Snapshot status must be available or error and must \
                         not be part of a group.",
                    );
                }
                sn["status"] = json!("deleting");
                (202, Value::Null)
            }
            _ => cinder_fault(404, "The resource could not be found."),
        }
    }
}

impl Workload {
    fn server_groups(&mut self, method: &Method, rest: &[&str], body: &Value) -> Answer {
        let fault = |status: u16, msg: &str| {
            let name = if status == 404 {
                "itemNotFound"
            } else {
                "badRequest"
            };
            (status, json!({name: {"code": status, "message": msg}}))
        };
        match (method.clone(), rest) {
            (Method::GET, []) => (200, json!({"server_groups": self.server_groups})),
            (Method::GET, [id]) => match self.server_groups.iter().find(|g| g["id"] == *id) {
                Some(g) => (200, json!({ "server_group": g })),
                None => fault(404, &format!("Server group {id} could not be found.")),
            },
            (Method::POST, []) => {
                let name = body.pointer("/server_group/name").and_then(Value::as_str);
                let policy = body.pointer("/server_group/policy").and_then(Value::as_str);
                let Some(name) = name.filter(|n| !n.is_empty() && n.len() <= 255) else {
                    return fault(400, "Invalid input for field/attribute name.");
                };
                let allowed = [
                    "anti-affinity",
                    "affinity",
                    "soft-anti-affinity",
                    "soft-affinity",
                ];
                let Some(policy) = policy.filter(|p| allowed.contains(p)) else {
                    return fault(400, "Invalid input for field/attribute policy.");
                };
                let group = json!({
                    "id": format!("sg-{:04}-{name}", self.server_groups.len()),
                    "name": name, "policy": policy, "rules": {}, "members": [],
                    "project_id": "", "user_id": "",
                });
                self.server_groups.push(group.clone());
                (200, json!({ "server_group": group }))
            }
            (Method::DELETE, [id]) => {
                let before = self.server_groups.len();
                self.server_groups.retain(|g| g["id"] != *id);
                if self.server_groups.len() == before {
                    fault(404, &format!("Server group {id} could not be found."))
                } else {
                    (204, Value::Null)
                }
            }
            _ => fault(405, "Method not allowed"),
        }
    }
}

/// A load balancer as Octavia shows it, named `name`, with one listener and pool (so only a
/// cascade delete removes it) and its VIP on port `vip_port_id`.
pub fn load_balancer(id: &str, name: &str, vip_port_id: &str, project: &str) -> Value {
    json!({
        "id": id, "name": name, "description": "Kubernetes external service",
        "provisioning_status": "ACTIVE", "operating_status": "ONLINE", "admin_state_up": true,
        "project_id": project, "tenant_id": project,
        "created_at": "2026-11-01T10:00:00", "updated_at": "2026-11-01T10:01:00",
        "vip_address": "10.0.0.50", "vip_port_id": vip_port_id,
        "vip_subnet_id": "33333333-0000-4000-8000-000000000002",
        "vip_network_id": "22222222-0000-4000-8000-000000000002", "vip_qos_policy_id": null,
        "listeners": [{"id": format!("{id}-listener")}], "pools": [{"id": format!("{id}-pool")}],
        "provider": "amphora", "flavor_id": null, "availability_zone": null, "tags": [],
        "additional_vips": [], "vip_vnic_type": "normal"
    })
}

/// A volume as Cinder shows it, with `metadata`, attached to `server` when given.
pub fn volume(id: &str, metadata: Value, server: Option<&str>, project: &str) -> Value {
    let attachments: Vec<Value> = server
        .map(|s| {
            json!({"id": format!("{id}-att"), "attachment_id": format!("{id}-att"),
                   "volume_id": id, "server_id": s, "host_name": null, "device": "/dev/vdb",
                   "attached_at": "2026-11-01T10:05:00.000000"})
        })
        .into_iter()
        .collect();
    json!({
        "id": id, "name": format!("pvc-{id}"), "status": if server.is_some() { "in-use" } else { "available" },
        "size": 1, "availability_zone": "nova", "created_at": "2026-11-01T10:04:00.000000",
        "updated_at": null, "attachments": attachments, "metadata": metadata,
        "volume_type": "lvmdriver-1", "bootable": "false", "encrypted": false,
        "multiattach": false, "os-vol-tenant-attr:tenant_id": project, "user_id": "csi",
        "description": "Created by OpenStack Cinder CSI driver", "snapshot_id": null,
        "source_volid": null, "consistencygroup_id": null, "replication_status": null,
        "links": []
    })
}

/// A floating IP on `port`, described as OCCM describes the ones it allocates for cluster
/// `capi`'s Service `default/svc`.
pub fn floating_ip(id: &str, port: &str, project: &str, capi: &str) -> Value {
    let mut f = floating_ip_described(id, port, project, "");
    f["description"] = json!(format!(
        "Floating IP for Kubernetes external service default/svc from cluster {capi}"
    ));
    f
}

/// A floating IP on `port` with `description` (e.g. one the tenant allocated).
pub fn floating_ip_described(id: &str, port: &str, project: &str, description: &str) -> Value {
    json!({
        "id": id, "floating_ip_address": "172.24.4.50", "floating_network_id":
        "22222222-0000-4000-8000-000000000001", "router_id": null, "port_id": port,
        "fixed_ip_address": "10.0.0.50", "status": "ACTIVE", "project_id": project,
        "tenant_id": project, "description": description, "tags": [], "port_details": null,
        "revision_number": 1, "created_at": "2026-11-01T10:01:00Z",
        "updated_at": "2026-11-01T10:01:00Z"
    })
}

/// A snapshot of volume `volume` as Cinder shows it, with `metadata`.
pub fn snapshot(id: &str, volume: &str, metadata: Value, project: &str) -> Value {
    json!({
        "id": id, "name": format!("snapshot-{id}"), "status": "available", "size": 1,
        "volume_id": volume, "metadata": metadata, "description": null,
        "created_at": "2026-11-01T10:06:00.000000", "updated_at": null, "progress": "100%",
        "os-extended-snapshot-attributes:project_id": project,
        "os-extended-snapshot-attributes:progress": "100%", "group_snapshot_id": null
    })
}

/// A security group as Neutron shows it, with `description`.
pub fn security_group(id: &str, name: &str, description: &str, project: &str) -> Value {
    json!({
        "id": id, "name": name, "description": description, "project_id": project,
        "tenant_id": project, "stateful": true, "shared": false, "tags": [],
        "security_group_rules": [], "revision_number": 1,
        "created_at": "2026-11-01T10:02:00Z", "updated_at": "2026-11-01T10:02:00Z"
    })
}
