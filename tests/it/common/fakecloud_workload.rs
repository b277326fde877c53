//! The fake cloud's Octavia, Cinder and Nova compute resources, in the services' real wire
//! formats (shapes, status codes, fault bodies and messages checked against the octavia, cinder
//! and nova sources and what gophercloud v2 parses): what Cluster API Provider OpenStack makes
//! and deletes, and what a workload cluster's controllers leave behind.
//!
//! * Octavia v2 (`/load-balancer/v2/lbaas/…` and `/v2.0/…`; the root answers the version list
//!   v2.0 … v2.27): load balancers (a VIP port made in Neutron on the VIP subnet; list by any
//!   attribute, `project_id` included; delete with `?cascade=true`, 409 without it while
//!   listeners or pools exist and while `PENDING_*`), listeners (`allowed_cidrs`), pools, members,
//!   health monitors; providers, flavors and availability zones (none of either).
//!   Every change puts the object and its load balancer in `PENDING_CREATE`/`PENDING_UPDATE`, as
//!   shown by the change's answer and the first read after it; the second read shows `ACTIVE`
//!   (another change meanwhile: 409 "immutable", as the real one).
//! * Cinder v3 (`/volume/v3/{project}`): volumes (create, from an image too, `creating` →
//!   `available` on the next read; `attaching` → `in-use` while a server boots from them;
//!   `?metadata=…`, `name`, `status`, `project_id` filters; delete, 400 while attached or with
//!   snapshots) and snapshots (`…/snapshots/detail?volume_id=…`, delete).
//! * Nova (`/compute/v2.1`, microversions as in `fakecloud`): servers (create with the body
//!   gophercloud sends: ports or networks, `block_device_mapping_v2`, metadata, tags from 2.52,
//!   user data, key, zone, server group hint; refused as Nova does for an unknown or refused
//!   flavor, a missing or inactive image, a flavor too small for the image, a zero-disk flavor
//!   without a root volume, a port in use, an unknown key or zone; `BUILD` in the first read,
//!   `ACTIVE` from the second; list with the `name` regex filter; delete: ports unbound,
//!   `delete_on_termination` volumes deleted), `os-interface`, `os-availability-zone` (`nova`)
//!   and server groups (list, create with microversion ≥ 2.64's `policy`, show, delete).
//!
//! Lists page as the services do (`limit`/`marker`, a `next` link in `<key>_links`), at most
//! [`Workload::page_size`] items a page when set (Octavia's and Neutron's
//! `pagination_max_limit`, Cinder's `osapi_max_limit`).
//! Deletes of load balancers, volumes and snapshots are asynchronous as in the real services:
//! `PENDING_DELETE`/`deleting` until the next listing, then gone (a volume in [`Workload::stuck`]
//! stays `deleting` until taken out of it). A deleted server is gone at once.
//! Each service can be taken down on its own (503 in its format); Neutron's L3 extension can be
//! missing (`missing` holds `floatingips`: 404, and `router` absent from the extensions).
//! Simplified: no health checking (members are `ONLINE`), no quotas outside Neutron's, no
//! scheduling (every server lands on `fake-compute-1` in zone `nova`), ports Nova makes for a
//! `networks: [{"uuid"}]` entry get no security group.

use std::collections::{HashMap, HashSet};

use axum::http::Method;
use axum::response::Response;
use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::{
    Inner, Req, new_id, now_micro, now_noz, now_z, observe, public, regex_search, select,
    settle_later,
};

/// What the fake's Octavia, Cinder, Nova and Neutron (`fakecloud_neutron`) hold, and the knobs
/// tests turn.
#[derive(Default)]
pub struct Workload {
    pub load_balancers: Vec<Value>,
    pub listeners: Vec<Value>,
    pub pools: Vec<Value>,
    pub members: Vec<Value>,
    pub health_monitors: Vec<Value>,
    pub volumes: Vec<Value>,
    pub snapshots: Vec<Value>,
    pub servers: Vec<Value>,
    pub server_groups: Vec<Value>,
    pub floating_ips: Vec<Value>,
    pub security_groups: Vec<Value>,
    pub security_group_rules: Vec<Value>,
    pub ports: Vec<Value>,
    pub routers: Vec<Value>,
    pub trunks: Vec<Value>,
    /// Services answering 503: `load-balancer`, `volume`.
    pub down: HashSet<String>,
    /// Neutron resources of an extension the cloud does not have: `floatingips`.
    pub missing: HashSet<String>,
    /// Volumes whose deletion does not finish (`deleting` until taken out).
    pub stuck: HashSet<String>,
    /// Most items a list answers per page (`None`: all).
    pub page_size: Option<usize>,
    /// Flavors Nova refuses to boot (403, its quota message for the flavor's cores).
    pub refused_flavors: HashSet<String>,
    /// Neutron quotas: `(project, resource)` → how many (`floatingip`, `port`, `network`,
    /// `subnet`, `router`, `security_group`, `security_group_rule`); 409 `OverQuota` beyond.
    pub quotas: HashMap<(String, String), usize>,
}

/// An answer: status and JSON body (`Null`: no body).
pub type Answer = (u16, Value);

/// How many reads after a change still show an Octavia object's or a server's transitional
/// state (CAPO waits for them in steps of about a second, resp. ten).
const PENDING_READS: u64 = 1;

fn octavia_fault(status: u16, msg: &str) -> Answer {
    let code = if status < 500 { "Client" } else { "Server" };
    (
        status,
        json!({"faultcode": code, "faultstring": msg, "debuginfo": null}),
    )
}

/// Nova's and Cinder's fault body (`{"badRequest": {"code", "message"}}` and kin).
fn fault(status: u16, msg: &str) -> Answer {
    let name = match status {
        400 => "badRequest",
        403 => "forbidden",
        404 => "itemNotFound",
        409 => "conflictingRequest",
        413 => "overLimit",
        _ => "computeFault",
    };
    (status, json!({name: {"code": status, "message": msg}}))
}

/// The message of a `NeutronError` body (for services relaying Neutron's refusals).
fn neutron_message(e: &Value) -> String {
    e["NeutronError"]["message"]
        .as_str()
        .map_or_else(|| e.to_string(), str::to_string)
}

pub(super) fn neutron_fault(status: u16, kind: &str, msg: &str) -> Answer {
    (
        status,
        json!({"NeutronError": {"type": kind, "message": msg, "detail": ""}}),
    )
}

/// Cinder's `metadata` filter: a Python dict literal (`{'k': 'v'}`) or JSON.
fn metadata_filter(raw: &str) -> Option<Map<String, Value>> {
    serde_json::from_str::<Value>(raw)
        .or_else(|_| serde_json::from_str::<Value>(&raw.replace('\'', "\"")))
        .ok()?
        .as_object()
        .cloned()
}

/// One page of `items` (`limit`/`marker` from `query`, at most `max` a page), under `key`, with
/// a `next` link to `url` (the other query parameters kept) when more follow.
pub(super) fn page(
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
}

/// Answers the Octavia, Cinder and Nova compute requests this module owns; `None` for others.
pub(super) fn dispatch(st: &mut Inner, r: &Req, segs: &[&str]) -> Option<Response> {
    let url = format!("{}/{}", st.base, segs.join("/"));
    let answer = match segs {
        ["load-balancer", "v2" | "v2.0", "lbaas", rest @ ..] => {
            if st.workload.down.contains("load-balancer") {
                octavia_fault(503, "Service Unavailable")
            } else {
                octavia(st, r, rest, &url)
            }
        }
        [
            "volume",
            "v3",
            _project,
            kind @ ("volumes" | "snapshots"),
            rest @ ..,
        ] => {
            if st.workload.down.contains("volume") {
                fault(503, "Service Unavailable")
            } else if *kind == "volumes" {
                cinder(st, r, rest, &url)
            } else {
                snapshots(st, r, rest, &url)
            }
        }
        ["compute", "v2.1", rest @ ..] if nova_owns(rest) => {
            let mv = match super::nova_microversion(r) {
                Ok(mv) => mv,
                Err(e) => return Some(e),
            };
            let mut resp = super::respond(nova(st, r, rest, mv, &url));
            super::nova_headers(&mut resp, mv);
            return Some(resp);
        }
        _ => return None,
    };
    Some(super::respond(answer))
}

/// Octavia's version list (its root, served without a token).
pub(super) fn octavia_versions(base: &str) -> Value {
    let href = format!("{base}/load-balancer/v2");
    let versions: Vec<Value> = (0..=27)
        .map(|m| {
            let status = if m == 27 { "CURRENT" } else { "SUPPORTED" };
            json!({"id": format!("v2.{m}"), "status": status, "updated": "2023-03-01T00:00:00Z",
                   "links": [{"href": href, "rel": "self"}]})
        })
        .collect();
    json!({ "versions": versions })
}

// ---------------------------------------------------------------------------------- Octavia

/// Octavia's collections: (URL segment, JSON singular, list key, title for messages).
fn octavia_kind(seg: &str) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match seg {
        "loadbalancers" => ("loadbalancer", "loadbalancers", "Load Balancer"),
        "listeners" => ("listener", "listeners", "Listener"),
        "pools" => ("pool", "pools", "Pool"),
        "healthmonitors" => ("healthmonitor", "healthmonitors", "Health Monitor"),
        _ => return None,
    })
}

fn octavia_coll<'a>(w: &'a mut Workload, seg: &str) -> &'a mut Vec<Value> {
    match seg {
        "loadbalancers" => &mut w.load_balancers,
        "listeners" => &mut w.listeners,
        "pools" => &mut w.pools,
        "members" => &mut w.members,
        _ => &mut w.health_monitors,
    }
}

fn octavia(st: &mut Inner, r: &Req, rest: &[&str], url: &str) -> Answer {
    let page_size = st.workload.page_size;
    match (r.method.clone(), rest) {
        (Method::GET, ["providers"]) => (
            200,
            json!({"providers": [
                {"name": "amphora", "description": "The Octavia Amphora driver."},
                {"name": "octavia", "description": "Deprecated alias of the Octavia Amphora driver."}]}),
        ),
        (Method::GET, ["flavors"]) => (200, json!({"flavors": [], "flavors_links": []})),
        (Method::GET, ["availabilityzones"]) => (
            200,
            json!({"availability_zones": [], "availability_zones_links": []}),
        ),
        (Method::GET, [seg]) if octavia_kind(seg).is_some() => {
            if *seg == "loadbalancers" {
                st.workload.settle();
            }
            let key = octavia_kind(seg).map_or("", |k| k.1);
            list_observed(
                octavia_coll(&mut st.workload, seg),
                &r.query,
                page_size,
                url,
                key,
            )
        }
        (Method::GET, [seg, id]) if octavia_kind(seg).is_some() => {
            let (one, _, title) = octavia_kind(seg).unwrap_or_default();
            match octavia_coll(&mut st.workload, seg)
                .iter_mut()
                .find(|v| v["id"] == *id)
            {
                Some(v) => (200, json!({ one: observe(v) })),
                None => octavia_fault(404, &format!("{title} {id} could not be found.")),
            }
        }
        (Method::POST, ["loadbalancers"]) => create_lb(st, r),
        (Method::POST, ["listeners"]) => create_listener(st, r),
        (Method::POST, ["pools"]) => create_pool(st, r),
        (Method::POST, ["healthmonitors"]) => create_monitor(st, r),
        (Method::PUT, [seg, id]) if octavia_kind(seg).is_some() => update_octavia(st, r, seg, id),
        (Method::DELETE, ["loadbalancers", id]) => {
            let cascade = r.param("cascade") == Some("true");
            delete_lb(st, id, cascade)
        }
        (Method::DELETE, [seg, id]) if octavia_kind(seg).is_some() => delete_child(st, seg, id),
        (Method::GET, ["pools", pool, "members"]) => {
            let w = &mut st.workload;
            if !w.pools.iter().any(|p| p["id"] == *pool) {
                return octavia_fault(404, &format!("Pool {pool} could not be found."));
            }
            let mut q = r.query.clone();
            q.push(("pool_id".into(), (*pool).into()));
            list_observed(&mut w.members, &q, page_size, url, "members")
        }
        (Method::GET, ["pools", pool, "members", id]) => {
            let members = &mut st.workload.members;
            match members
                .iter_mut()
                .find(|m| m["id"] == *id && m["pool_id"] == *pool)
            {
                Some(m) => (200, json!({"member": observe(m)})),
                None => octavia_fault(404, &format!("Member {id} could not be found.")),
            }
        }
        (Method::POST, ["pools", pool, "members"]) => create_member(st, r, pool),
        (Method::DELETE, ["pools", pool, "members", id]) => delete_member(st, pool, id),
        _ => octavia_fault(405, "Method not allowed"),
    }
}

/// A filtered, observed, paged list of `items`.
fn list_observed(
    items: &mut [Value],
    query: &[(String, String)],
    max: Option<usize>,
    url: &str,
    key: &str,
) -> Answer {
    let skip = [
        "limit",
        "marker",
        "page_reverse",
        "sort",
        "sort_key",
        "sort_dir",
        "fields",
        "cascade",
    ];
    let raw: Vec<Value> = items.iter().map(public).collect();
    let hits = select(&raw, query, &skip);
    let shown: Vec<Value> = hits.into_iter().map(|i| observe(&mut items[i])).collect();
    page(shown, query, max, url, key)
}

/// The load balancer `id`'s 409 while a change is under way.
fn immutable(w: &Workload, id: &str) -> Result<(), Answer> {
    let busy = w.load_balancers.iter().any(|lb| {
        lb["id"] == id
            && lb["provisioning_status"]
                .as_str()
                .is_some_and(|s| s.starts_with("PENDING_"))
    });
    if busy {
        return Err(octavia_fault(
            409,
            &format!("Load Balancer {id} is immutable and cannot be updated."),
        ));
    }
    Ok(())
}

/// A change under the load balancer: `PENDING_UPDATE` until read.
fn lb_changing(w: &mut Workload, id: &str) {
    if let Some(lb) = w.load_balancers.iter_mut().find(|lb| lb["id"] == id) {
        lb["provisioning_status"] = json!("PENDING_UPDATE");
        lb["updated_at"] = json!(now_noz());
        settle_later(lb, json!({"provisioning_status": "ACTIVE"}), PENDING_READS);
    }
}

/// Fields every Octavia object starts with (`PENDING_CREATE`, `ACTIVE` once read twice).
fn octavia_new(project: &str, body: &Map<String, Value>, fields: Value) -> Value {
    let mut v = json!({"id": new_id(), "name": "", "description": "", "admin_state_up": true,
        "project_id": project, "tenant_id": project, "provisioning_status": "PENDING_CREATE",
        "operating_status": "OFFLINE", "created_at": now_noz(), "updated_at": null,
        "tags": []});
    if let (Some(o), Value::Object(f)) = (v.as_object_mut(), fields) {
        o.extend(f);
        for (k, x) in body {
            o.insert(k.clone(), x.clone());
        }
    }
    settle_later(
        &mut v,
        json!({"provisioning_status": "ACTIVE", "operating_status": "ONLINE"}),
        PENDING_READS,
    );
    v
}

/// What Octavia fills in for a listener of load balancer `lb` that a create does not give.
fn listener_defaults(lb: &str) -> Value {
    json!({"connection_limit": -1, "default_tls_container_ref": null,
        "sni_container_refs": [], "default_pool_id": null, "l7policies": [],
        "insert_headers": {}, "loadbalancers": [{"id": lb}],
        "timeout_client_data": 50000, "timeout_member_connect": 5000,
        "timeout_member_data": 50000, "timeout_tcp_inspect": 0,
        "client_ca_tls_container_ref": null, "client_authentication": "NONE",
        "client_crl_container_ref": null, "allowed_cidrs": null, "tls_ciphers": null,
        "tls_versions": null, "alpn_protocols": null, "hsts_include_subdomains": false,
        "hsts_max_age": null, "hsts_preload": false})
}

/// What Octavia fills in for a pool of load balancer `lb` (default pool of `listener`).
fn pool_defaults(lb: &str, listener: Option<&str>) -> Value {
    let listeners: Vec<Value> = listener.iter().map(|l| json!({"id": l})).collect();
    json!({"session_persistence": null, "loadbalancers": [{"id": lb}],
        "listeners": listeners, "members": [], "healthmonitor_id": null,
        "tls_enabled": false, "tls_ciphers": null, "tls_versions": null,
        "alpn_protocols": null, "ca_tls_container_ref": null, "crl_container_ref": null,
        "tls_container_ref": null})
}

/// What Octavia fills in for a health monitor of pool `pool`.
fn monitor_defaults(pool: &str) -> Value {
    json!({"max_retries_down": 3, "http_method": null, "url_path": null,
        "expected_codes": null, "pools": [{"id": pool}], "http_version": null,
        "domain_name": null})
}

/// What Octavia fills in for a member of pool `pool`.
fn member_defaults(pool: &str) -> Value {
    json!({"pool_id": pool, "weight": 1, "subnet_id": null, "monitor_address": null,
        "monitor_port": null, "backup": false, "vnic_type": "normal"})
}

fn octavia_body(r: &Req, key: &str) -> Result<Map<String, Value>, Answer> {
    r.body
        .get(key)
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| octavia_fault(400, &format!("Missing argument: \"{key}\"")))
}

fn create_lb(st: &mut Inner, r: &Req) -> Answer {
    let mut body = match octavia_body(r, "loadbalancer") {
        Ok(b) => b,
        Err(e) => return e,
    };
    let provider = body
        .remove("provider")
        .and_then(|p| p.as_str().map(str::to_string))
        .unwrap_or_else(|| "amphora".into());
    if !["amphora", "octavia"].contains(&provider.as_str()) {
        return octavia_fault(400, &format!("Provider '{provider}' is not enabled."));
    }
    if let Some(f) = body.get("flavor_id").and_then(Value::as_str) {
        return octavia_fault(400, &format!("Validation failure: Invalid flavor_id {f}."));
    }
    if let Some(az) = body.get("availability_zone").and_then(Value::as_str) {
        return octavia_fault(
            400,
            &format!("Validation failure: Invalid availability zone name {az}."),
        );
    }
    let subnet_id = body
        .remove("vip_subnet_id")
        .and_then(|s| s.as_str().map(str::to_string));
    let network_id = body
        .remove("vip_network_id")
        .and_then(|s| s.as_str().map(str::to_string));
    let address = body
        .remove("vip_address")
        .and_then(|s| s.as_str().map(str::to_string));
    let subnets = st.list("subnet").to_vec();
    let subnet = match (&subnet_id, &network_id) {
        (Some(s), _) => match subnets.iter().find(|x| x["id"] == s.as_str()) {
            Some(x) => x.clone(),
            None => return octavia_fault(400, &format!("Subnet {s} not found.")),
        },
        (None, Some(n)) => match subnets.iter().find(|x| x["network_id"] == n.as_str()) {
            Some(x) => x.clone(),
            None => return octavia_fault(400, &format!("Network {n} not found.")),
        },
        (None, None) => {
            return octavia_fault(
                400,
                "Validation failure: VIP must contain one of: vip_port_id, vip_network_id, \
                 vip_subnet_id.",
            );
        }
    };
    let network = subnet["network_id"].as_str().unwrap_or("").to_string();
    let mut lb = octavia_new(
        &r.project,
        &body,
        json!({"vip_subnet_id": subnet["id"], "vip_network_id": network,
            "vip_qos_policy_id": null, "listeners": [], "pools": [], "provider": provider,
            "flavor_id": null, "availability_zone": null, "additional_vips": [],
            "vip_vnic_type": "normal", "vip_sg_ids": null}),
    );
    let id = lb["id"].as_str().unwrap_or("").to_string();
    let wanted = vec![json!({"subnet_id": subnet["id"], "ip_address": address})];
    let extra = json!({"name": format!("octavia-lb-{id}"), "device_owner": "Octavia",
        "device_id": format!("lb-{id}"), "status": "ACTIVE",
        "binding:host_id": "fake-network-1", "binding:vif_type": "ovs"});
    let port = match super::neutron::new_port(
        st,
        &r.project,
        &network,
        Some(&wanted),
        extra.as_object().unwrap_or(&Map::new()),
    ) {
        Ok(p) => p,
        Err((409, e)) => return octavia_fault(409, &neutron_message(&e)),
        Err((_, e)) => return octavia_fault(400, &neutron_message(&e)),
    };
    lb["vip_port_id"] = port["id"].clone();
    lb["vip_address"] = port["fixed_ips"][0]["ip_address"].clone();
    st.workload.load_balancers.push(lb.clone());
    (201, json!({"loadbalancer": public(&lb)}))
}

/// The load balancer of a listener, pool or health monitor (for the immutable check).
fn lb_of(v: &Value) -> String {
    v["loadbalancers"][0]["id"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn create_listener(st: &mut Inner, r: &Req) -> Answer {
    let body = match octavia_body(r, "listener") {
        Ok(b) => b,
        Err(e) => return e,
    };
    let w = &mut st.workload;
    let lb_id = body["loadbalancer_id"].as_str().unwrap_or("").to_string();
    if !w.load_balancers.iter().any(|l| l["id"] == lb_id) {
        return octavia_fault(404, &format!("Load Balancer {lb_id} could not be found."));
    }
    if let Err(e) = immutable(w, &lb_id) {
        return e;
    }
    let protocol = body["protocol"].as_str().unwrap_or("");
    let protocols = [
        "HTTP",
        "HTTPS",
        "TCP",
        "TERMINATED_HTTPS",
        "UDP",
        "SCTP",
        "PROMETHEUS",
    ];
    if !protocols.contains(&protocol) {
        return octavia_fault(
            400,
            &format!(
                "Invalid input for field/attribute protocol. Value: '{protocol}'. Value should \
                 be one of: {}",
                protocols.join(", ")
            ),
        );
    }
    let port = body["protocol_port"].as_u64().unwrap_or(0);
    if !(1..=65535).contains(&port) {
        return octavia_fault(
            400,
            &format!("Invalid input for field/attribute protocol_port. Value: '{port}'."),
        );
    }
    let dup = w
        .listeners
        .iter()
        .any(|l| lb_of(l) == lb_id && l["protocol_port"] == port && l["protocol"] == protocol);
    if dup {
        return octavia_fault(
            409,
            &format!(
                "Another Listener on this Load Balancer is already using protocol {protocol} \
                 and protocol_port {port}"
            ),
        );
    }
    let mut fields = body.clone();
    fields.remove("loadbalancer_id");
    let v = octavia_new(&r.project, &fields, listener_defaults(&lb_id));
    if let Some(lb) = w.load_balancers.iter_mut().find(|l| l["id"] == lb_id)
        && let Some(list) = lb["listeners"].as_array_mut()
    {
        list.push(json!({"id": v["id"]}));
    }
    lb_changing(w, &lb_id);
    w.listeners.push(v.clone());
    (201, json!({"listener": public(&v)}))
}

fn create_pool(st: &mut Inner, r: &Req) -> Answer {
    let mut body = match octavia_body(r, "pool") {
        Ok(b) => b,
        Err(e) => return e,
    };
    let w = &mut st.workload;
    let listener = body
        .remove("listener_id")
        .and_then(|l| l.as_str().map(str::to_string));
    let lb_id = match (&listener, body.remove("loadbalancer_id")) {
        (Some(l), _) => match w.listeners.iter().find(|x| x["id"] == l.as_str()) {
            Some(x) => lb_of(x),
            None => return octavia_fault(404, &format!("Listener {l} could not be found.")),
        },
        (None, Some(Value::String(lb))) => lb,
        _ => {
            return octavia_fault(
                400,
                "Validation failure: An id for a loadbalancer or listener is required.",
            );
        }
    };
    if !w.load_balancers.iter().any(|l| l["id"] == lb_id) {
        return octavia_fault(404, &format!("Load Balancer {lb_id} could not be found."));
    }
    if let Err(e) = immutable(w, &lb_id) {
        return e;
    }
    let methods = [
        "ROUND_ROBIN",
        "LEAST_CONNECTIONS",
        "SOURCE_IP",
        "SOURCE_IP_PORT",
    ];
    let method = body["lb_algorithm"].as_str().unwrap_or("");
    if !methods.contains(&method) {
        return octavia_fault(
            400,
            &format!(
                "Invalid input for field/attribute lb_algorithm. Value: '{method}'. Value \
                 should be one of: {}",
                methods.join(", ")
            ),
        );
    }
    let v = octavia_new(
        &r.project,
        &body,
        pool_defaults(&lb_id, listener.as_deref()),
    );
    if let Some(l) = &listener
        && let Some(x) = w.listeners.iter_mut().find(|x| x["id"] == l.as_str())
    {
        x["default_pool_id"] = v["id"].clone();
    }
    if let Some(lb) = w.load_balancers.iter_mut().find(|l| l["id"] == lb_id)
        && let Some(list) = lb["pools"].as_array_mut()
    {
        list.push(json!({"id": v["id"]}));
    }
    lb_changing(w, &lb_id);
    w.pools.push(v.clone());
    (201, json!({"pool": public(&v)}))
}

fn create_monitor(st: &mut Inner, r: &Req) -> Answer {
    let mut body = match octavia_body(r, "healthmonitor") {
        Ok(b) => b,
        Err(e) => return e,
    };
    let w = &mut st.workload;
    let pool_id = body
        .remove("pool_id")
        .and_then(|p| p.as_str().map(str::to_string))
        .unwrap_or_default();
    let Some(pool) = w
        .pools
        .iter()
        .find(|p| p["id"] == pool_id.as_str())
        .cloned()
    else {
        return octavia_fault(404, &format!("Pool {pool_id} could not be found."));
    };
    let lb_id = lb_of(&pool);
    if let Err(e) = immutable(w, &lb_id) {
        return e;
    }
    if !pool["healthmonitor_id"].is_null() {
        return octavia_fault(409, "This pool already has a health monitor");
    }
    let types = [
        "HTTP",
        "HTTPS",
        "PING",
        "TCP",
        "TLS-HELLO",
        "UDP-CONNECT",
        "SCTP",
    ];
    let kind = body["type"].as_str().unwrap_or("");
    if !types.contains(&kind) {
        return octavia_fault(
            400,
            &format!("Invalid input for field/attribute type. Value: '{kind}'."),
        );
    }
    for k in ["delay", "timeout", "max_retries"] {
        if body.get(k).and_then(Value::as_u64).is_none() {
            return octavia_fault(400, &format!("Invalid input for field/attribute {k}."));
        }
    }
    let v = octavia_new(&r.project, &body, monitor_defaults(&pool_id));
    if let Some(p) = w.pools.iter_mut().find(|p| p["id"] == pool_id.as_str()) {
        p["healthmonitor_id"] = v["id"].clone();
    }
    lb_changing(w, &lb_id);
    w.health_monitors.push(v.clone());
    (201, json!({"healthmonitor": public(&v)}))
}

fn create_member(st: &mut Inner, r: &Req, pool_id: &str) -> Answer {
    let body = match octavia_body(r, "member") {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(pool) = st
        .workload
        .pools
        .iter()
        .find(|p| p["id"] == pool_id)
        .cloned()
    else {
        return octavia_fault(404, &format!("Pool {pool_id} could not be found."));
    };
    if let Some(s) = body.get("subnet_id").and_then(Value::as_str)
        && !st.list("subnet").iter().any(|x| x["id"] == s)
    {
        return octavia_fault(400, &format!("Subnet {s} not found."));
    }
    let w = &mut st.workload;
    let lb_id = lb_of(&pool);
    if let Err(e) = immutable(w, &lb_id) {
        return e;
    }
    let (address, port) = (&body["address"], &body["protocol_port"]);
    if !address.is_string() || !port.is_u64() {
        return octavia_fault(
            400,
            "Invalid input for field/attribute member: address and protocol_port are required.",
        );
    }
    let dup = w.members.iter().any(|m| {
        m["pool_id"] == pool_id && m["address"] == *address && m["protocol_port"] == *port
    });
    if dup {
        return octavia_fault(
            409,
            &format!(
                "Another member on this pool is already using ip {} on protocol_port {port}",
                address.as_str().unwrap_or("")
            ),
        );
    }
    let v = octavia_new(&r.project, &body, member_defaults(pool_id));
    if let Some(p) = w.pools.iter_mut().find(|p| p["id"] == pool_id)
        && let Some(list) = p["members"].as_array_mut()
    {
        list.push(json!({"id": v["id"]}));
    }
    lb_changing(w, &lb_id);
    w.members.push(v.clone());
    (201, json!({"member": public(&v)}))
}

fn delete_member(st: &mut Inner, pool_id: &str, id: &str) -> Answer {
    let w = &mut st.workload;
    let Some(m) = w
        .members
        .iter()
        .find(|m| m["id"] == id && m["pool_id"] == pool_id)
        .cloned()
    else {
        return octavia_fault(404, &format!("Member {id} could not be found."));
    };
    let lb_id = w
        .pools
        .iter()
        .find(|p| p["id"] == pool_id)
        .map(lb_of)
        .unwrap_or_default();
    if let Err(e) = immutable(w, &lb_id) {
        return e;
    }
    w.members.retain(|x| x["id"] != m["id"]);
    if let Some(p) = w.pools.iter_mut().find(|p| p["id"] == pool_id)
        && let Some(list) = p["members"].as_array_mut()
    {
        list.retain(|x| x["id"] != id);
    }
    lb_changing(w, &lb_id);
    (204, Value::Null)
}

fn update_octavia(st: &mut Inner, r: &Req, seg: &str, id: &str) -> Answer {
    let (one, _, title) = octavia_kind(seg).unwrap_or_default();
    let body = match octavia_body(r, one) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let w = &mut st.workload;
    let Some(v) = octavia_coll(w, seg).iter().find(|v| v["id"] == id).cloned() else {
        return octavia_fault(404, &format!("{title} {id} could not be found."));
    };
    let lb_id = if seg == "loadbalancers" {
        id.to_string()
    } else if seg == "healthmonitors" {
        let pool = v["pools"][0]["id"].clone();
        w.pools
            .iter()
            .find(|p| p["id"] == pool)
            .map(lb_of)
            .unwrap_or_default()
    } else {
        lb_of(&v)
    };
    if let Err(e) = immutable(w, &lb_id) {
        return e;
    }
    let Some(x) = octavia_coll(w, seg).iter_mut().find(|v| v["id"] == id) else {
        return octavia_fault(404, &format!("{title} {id} could not be found."));
    };
    for (k, val) in body {
        x[k.as_str()] = val;
    }
    x["provisioning_status"] = json!("PENDING_UPDATE");
    x["updated_at"] = json!(now_noz());
    settle_later(x, json!({"provisioning_status": "ACTIVE"}), PENDING_READS);
    let shown = public(x);
    if seg != "loadbalancers" {
        lb_changing(w, &lb_id);
    }
    (200, json!({ one: shown }))
}

fn delete_child(st: &mut Inner, seg: &str, id: &str) -> Answer {
    let (_, _, title) = octavia_kind(seg).unwrap_or_default();
    let w = &mut st.workload;
    let Some(v) = octavia_coll(w, seg).iter().find(|v| v["id"] == id).cloned() else {
        return octavia_fault(404, &format!("{title} {id} could not be found."));
    };
    let lb_id = match seg {
        "healthmonitors" => {
            let pool = v["pools"][0]["id"].clone();
            if let Some(p) = w.pools.iter_mut().find(|p| p["id"] == pool) {
                p["healthmonitor_id"] = Value::Null;
            }
            w.pools
                .iter()
                .find(|p| p["id"] == pool)
                .map(lb_of)
                .unwrap_or_default()
        }
        _ => lb_of(&v),
    };
    if let Err(e) = immutable(w, &lb_id) {
        return e;
    }
    octavia_coll(w, seg).retain(|x| x["id"] != id);
    match seg {
        "pools" => {
            w.members.retain(|m| m["pool_id"] != id);
            w.health_monitors.retain(|m| m["pools"][0]["id"] != id);
            for l in w
                .listeners
                .iter_mut()
                .filter(|l| l["default_pool_id"] == id)
            {
                l["default_pool_id"] = Value::Null;
            }
        }
        "listeners" => {}
        _ => {}
    }
    if let Some(lb) = w
        .load_balancers
        .iter_mut()
        .find(|l| l["id"] == lb_id.as_str())
    {
        for key in ["listeners", "pools"] {
            if let Some(list) = lb[key].as_array_mut() {
                list.retain(|x| x["id"] != id);
            }
        }
    }
    lb_changing(w, &lb_id);
    (204, Value::Null)
}

fn delete_lb(st: &mut Inner, id: &str, cascade: bool) -> Answer {
    let w = &mut st.workload;
    let Some(lb) = w.load_balancers.iter_mut().find(|l| l["id"] == id) else {
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
    if let Some(o) = lb.as_object_mut() {
        o.remove("_then");
        o.remove("_reads");
    }
    let vip = lb["vip_port_id"].as_str().map(str::to_string);
    let pools: Vec<Value> = w
        .pools
        .iter()
        .filter(|p| lb_of(p) == id)
        .map(|p| p["id"].clone())
        .collect();
    w.members.retain(|m| !pools.contains(&m["pool_id"]));
    w.health_monitors
        .retain(|m| !pools.contains(&m["pools"][0]["id"]));
    w.pools.retain(|p| lb_of(p) != id);
    w.listeners.retain(|l| lb_of(l) != id);
    // Octavia deletes the VIP port it made.
    if let Some(port) = vip
        && st
            .workload
            .ports
            .iter()
            .any(|p| p["id"] == port.as_str() && p["device_owner"] == "Octavia")
    {
        super::neutron::remove_port(st, &port);
    }
    (204, Value::Null)
}

// ----------------------------------------------------------------------------------- Cinder

/// Volume types Cinder knows (no `volume_type`: the first).
const VOLUME_TYPES: [&str; 2] = ["lvmdriver-1", "__DEFAULT__"];
const GIB: u64 = 1 << 30;

fn cinder(st: &mut Inner, r: &Req, rest: &[&str], url: &str) -> Answer {
    match (r.method.clone(), rest) {
        (Method::GET, ["detail"] | []) => {
            let w = &mut st.workload;
            w.settle();
            let wanted = match r.param("metadata").map(metadata_filter) {
                Some(None) => return fault(400, "Invalid filter: metadata"),
                Some(Some(m)) => m,
                None => Map::new(),
            };
            let project = r.param("project_id");
            let skip = [
                "metadata",
                "limit",
                "marker",
                "sort",
                "sort_key",
                "sort_dir",
                "offset",
                "all_tenants",
                "with_count",
                "project_id",
            ];
            let raw: Vec<Value> = w.volumes.iter().map(public).collect();
            let hits: Vec<usize> = select(&raw, &r.query, &skip)
                .into_iter()
                .filter(|i| {
                    let v = &raw[*i];
                    wanted
                        .iter()
                        .all(|(k, want)| v["metadata"].get(k) == Some(want))
                        && project.is_none_or(|p| v["os-vol-tenant-attr:tenant_id"] == p)
                })
                .collect();
            let detail = rest == ["detail"];
            let shown: Vec<Value> = hits
                .into_iter()
                .map(|i| {
                    let v = observe(&mut w.volumes[i]);
                    if detail {
                        v
                    } else {
                        json!({"id": v["id"], "name": v["name"], "links": v["links"]})
                    }
                })
                .collect();
            page(shown, &r.query, w.page_size, url, "volumes")
        }
        (Method::POST, []) => create_volume(st, r),
        (Method::GET, [id]) => match st.workload.volumes.iter_mut().find(|v| v["id"] == *id) {
            Some(v) => (200, json!({ "volume": observe(v) })),
            None => fault(404, &format!("Volume {id} could not be found.")),
        },
        (Method::DELETE, [id]) => {
            let w = &mut st.workload;
            let Some(v) = w.volumes.iter_mut().find(|v| v["id"] == *id) else {
                return fault(404, &format!("Volume {id} could not be found."));
            };
            let attached = v["attachments"].as_array().is_some_and(|a| !a.is_empty());
            let snapshots = w.snapshots.iter().any(|s| s["volume_id"] == *id);
            if attached || snapshots || !matches!(v["status"].as_str(), Some("available" | "error"))
            {
                return fault(
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
        _ => fault(404, "The resource could not be found."),
    }
}

fn create_volume(st: &mut Inner, r: &Req) -> Answer {
    let Some(b) = r.body.get("volume").and_then(Value::as_object).cloned() else {
        return fault(400, "Missing required element 'volume' in request body.");
    };
    let size = match &b.get("size") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let Some(size) = size.filter(|s| *s > 0) else {
        return fault(
            400,
            &format!(
                "Invalid input received: Volume size '{}' must be an integer and greater than 0",
                b.get("size").cloned().unwrap_or(Value::Null)
            ),
        );
    };
    let volume_type = match b.get("volume_type").and_then(Value::as_str) {
        None | Some("") => VOLUME_TYPES[0],
        Some(t) if VOLUME_TYPES.contains(&t) => t,
        Some(t) => {
            return fault(
                404,
                &format!("Volume type with name {t} could not be found."),
            );
        }
    };
    match b.get("availability_zone").and_then(Value::as_str) {
        None | Some("" | "nova") => {}
        Some(az) => return fault(400, &format!("Availability zone '{az}' is invalid.")),
    }
    let mut image_meta = Value::Null;
    if let Some(image) = b.get("imageRef").and_then(Value::as_str) {
        let Some(img) = st
            .list("image")
            .iter()
            .find(|i| i["id"] == image && i["status"] == "active")
        else {
            return fault(
                400,
                "Invalid image identifier or unable to access requested image.",
            );
        };
        let virtual_gib = img["virtual_size"].as_u64().unwrap_or(0).div_ceil(GIB);
        if virtual_gib > size {
            return fault(
                400,
                &format!(
                    "Image virtual size is {virtual_gib}GB and doesn't fit in a volume of size \
                     {size}GB."
                ),
            );
        }
        let min_disk = img["min_disk"].as_u64().unwrap_or(0);
        if min_disk > size {
            return fault(
                400,
                &format!(
                    "Volume size {size}GB cannot be smaller than the image minDisk size \
                     {min_disk}GB."
                ),
            );
        }
        image_meta = json!({"image_id": image, "image_name": img["name"],
            "container_format": img["container_format"], "disk_format": img["disk_format"],
            "min_disk": img["min_disk"].to_string(), "min_ram": img["min_ram"].to_string(),
            "size": img["size"].to_string(), "checksum": img["checksum"]});
    }
    let id = new_id();
    let metadata = b.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut v = volume(&id, metadata, None, &r.project);
    v["name"] = b.get("name").cloned().unwrap_or(Value::Null);
    v["description"] = b.get("description").cloned().unwrap_or(Value::Null);
    v["size"] = json!(size);
    v["volume_type"] = json!(volume_type);
    v["status"] = json!("creating");
    v["bootable"] = json!(if image_meta.is_null() {
        "false"
    } else {
        "true"
    });
    v["user_id"] = json!("");
    v["created_at"] = json!(now_micro());
    v["links"] = json!([{"rel": "self",
        "href": format!("{}/volume/v3/{}/volumes/{id}", st.base, r.project)}]);
    if !image_meta.is_null() {
        v["volume_image_metadata"] = image_meta;
    }
    settle_later(&mut v, json!({"status": "available"}), 0);
    st.workload.volumes.push(v.clone());
    (202, json!({"volume": public(&v)}))
}

fn snapshots(st: &mut Inner, r: &Req, rest: &[&str], url: &str) -> Answer {
    let w = &mut st.workload;
    match (r.method.clone(), rest) {
        (Method::GET, ["detail"]) => {
            w.settle();
            let volume = r.param("volume_id");
            let hits: Vec<Value> = w
                .snapshots
                .iter()
                .filter(|s| volume.is_none_or(|v| s["volume_id"] == v))
                .cloned()
                .collect();
            page(hits, &r.query, w.page_size, url, "snapshots")
        }
        (Method::DELETE, [id]) => {
            let Some(sn) = w.snapshots.iter_mut().find(|s| s["id"] == *id) else {
                return fault(404, &format!("Snapshot {id} could not be found."));
            };
            if !matches!(sn["status"].as_str(), Some("available" | "error")) {
                return fault(
                    400,
                    "Invalid snapshot: Snapshot status must be available or error and must \
                     not be part of a group.",
                );
            }
            sn["status"] = json!("deleting");
            (202, Value::Null)
        }
        _ => fault(404, "The resource could not be found."),
    }
}

// ------------------------------------------------------------------------------------- Nova

fn nova_owns(rest: &[&str]) -> bool {
    matches!(
        rest.first(),
        Some(&("servers" | "os-availability-zone" | "os-server-groups"))
    )
}

fn nova(st: &mut Inner, r: &Req, rest: &[&str], mv: (u32, u32), url: &str) -> Answer {
    match (r.method.clone(), rest) {
        (Method::POST, ["servers"]) => create_server(st, r, mv),
        (Method::GET, ["servers"]) => list_servers(st, r, mv, url, false),
        (Method::GET, ["servers", "detail"]) => list_servers(st, r, mv, url, true),
        (Method::GET, ["servers", id]) => {
            let Some(i) = st.workload.servers.iter().position(|s| s["id"] == *id) else {
                return fault(404, &format!("Instance {id} could not be found."));
            };
            observe(&mut st.workload.servers[i]);
            let s = st.workload.servers[i].clone();
            (200, json!({"server": server_view(st, &s, mv)}))
        }
        (Method::DELETE, ["servers", id]) => delete_server(st, id),
        (Method::GET, ["servers", id, "os-interface"]) => {
            if !st.workload.servers.iter().any(|s| s["id"] == *id) {
                return fault(404, &format!("Instance {id} could not be found."));
            }
            let list: Vec<Value> = st
                .workload
                .ports
                .iter()
                .filter(|p| p["device_id"] == *id)
                .map(|p| {
                    let mut a = json!({"port_state": p["status"], "fixed_ips": p["fixed_ips"],
                        "port_id": p["id"], "net_id": p["network_id"],
                        "mac_addr": p["mac_address"]});
                    if mv >= (2, 70) {
                        a["tag"] = Value::Null;
                    }
                    a
                })
                .collect();
            (200, json!({"interfaceAttachments": list}))
        }
        (Method::DELETE, ["servers", id, "os-interface", port]) => {
            if !st.workload.servers.iter().any(|s| s["id"] == *id) {
                return fault(404, &format!("Instance {id} could not be found."));
            }
            if !st
                .workload
                .ports
                .iter()
                .any(|p| p["id"] == *port && p["device_id"] == *id)
            {
                return fault(404, &format!("Port {port} is not attached"));
            }
            release_port(st, id, port);
            (202, Value::Null)
        }
        (Method::GET, ["os-availability-zone"] | ["os-availability-zone", "detail"]) => (
            200,
            json!({"availabilityZoneInfo": [
                {"zoneName": "nova", "zoneState": {"available": true}, "hosts": null}]}),
        ),
        (_, ["os-server-groups", rest @ ..]) => server_groups(&mut st.workload, r, rest),
        _ => fault(404, "The resource could not be found."),
    }
}

/// Unbinds port `port` from server `server` (deleting it when Nova made it).
fn release_port(st: &mut Inner, server: &str, port: &str) {
    let made = st
        .workload
        .servers
        .iter()
        .find(|s| s["id"] == server)
        .is_some_and(|s| {
            s["_made_ports"]
                .as_array()
                .is_some_and(|m| m.iter().any(|x| x == port))
        });
    if made {
        super::neutron::remove_port(st, port);
        return;
    }
    if let Some(p) = st.workload.ports.iter_mut().find(|p| p["id"] == port) {
        p["device_id"] = json!("");
        p["device_owner"] = json!("");
        p["binding:host_id"] = json!("");
        p["binding:vif_type"] = json!("unbound");
        p["status"] = json!("DOWN");
        p["updated_at"] = json!(now_z());
    }
}

/// A Nova microversion.
type Mv = (u32, u32);

/// Server create attributes: the first and last microversion accepting each.
const SERVER_ATTRS: &[(&str, Mv, Mv)] = &[
    ("name", (2, 1), (9, 0)),
    ("imageRef", (2, 1), (9, 0)),
    ("flavorRef", (2, 1), (9, 0)),
    ("adminPass", (2, 1), (9, 0)),
    ("metadata", (2, 1), (9, 0)),
    ("networks", (2, 1), (9, 0)),
    ("OS-DCF:diskConfig", (2, 1), (9, 0)),
    ("accessIPv4", (2, 1), (9, 0)),
    ("accessIPv6", (2, 1), (9, 0)),
    ("personality", (2, 1), (2, 56)),
    ("availability_zone", (2, 1), (9, 0)),
    ("block_device_mapping", (2, 1), (9, 0)),
    ("block_device_mapping_v2", (2, 1), (9, 0)),
    ("config_drive", (2, 1), (9, 0)),
    ("key_name", (2, 1), (9, 0)),
    ("min_count", (2, 1), (9, 0)),
    ("max_count", (2, 1), (9, 0)),
    ("return_reservation_id", (2, 1), (9, 0)),
    ("security_groups", (2, 1), (9, 0)),
    ("user_data", (2, 1), (9, 0)),
    ("description", (2, 19), (9, 0)),
    ("tags", (2, 52), (9, 0)),
    ("trusted_image_certificates", (2, 63), (9, 0)),
    ("host", (2, 74), (9, 0)),
    ("hypervisor_hostname", (2, 74), (9, 0)),
    ("hostname", (2, 90), (9, 0)),
];
const BDM_ATTRS: &str = "source_type destination_type guest_format device_type disk_bus \
    boot_index device_name delete_on_termination snapshot_id volume_id volume_size image_id \
    no_device connection_info uuid";

fn create_server(st: &mut Inner, r: &Req, mv: (u32, u32)) -> Answer {
    let Some(s) = r.body.get("server").and_then(Value::as_object).cloned() else {
        return fault(
            400,
            &format!(
                "Invalid input for field/attribute server. Value: {}. None is not of type \
                 'object'",
                r.body
            ),
        );
    };
    let shown = Value::Object(s.clone());
    let invalid = |msg: &str| {
        fault(
            400,
            &format!("Invalid input for field/attribute server. Value: {shown}. {msg}"),
        )
    };
    for k in s.keys() {
        let ok = SERVER_ATTRS
            .iter()
            .any(|(a, from, to)| a == k && (*from..=*to).contains(&mv));
        if !ok {
            return invalid(&format!(
                "Additional properties are not allowed ('{k}' was unexpected)"
            ));
        }
    }
    for required in ["name", "flavorRef"] {
        if !s.contains_key(required) {
            return invalid(&format!("'{required}' is a required property"));
        }
    }
    if mv >= (2, 37) && !s.contains_key("networks") {
        return invalid("'networks' is a required property");
    }
    let name = s["name"].as_str().unwrap_or("").to_string();
    if name.is_empty() || name.len() > 255 {
        return fault(
            400,
            &format!(
                "Invalid input for field/attribute name. Value: {}. '{name}' is too short",
                s["name"]
            ),
        );
    }
    let bdms: Vec<Value> = s
        .get("block_device_mapping_v2")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tag_ok = mv == (2, 32) || mv >= (2, 42);
    for (i, b) in bdms.iter().enumerate() {
        let known = |k: &str| {
            BDM_ATTRS.split_whitespace().any(|a| a == k)
                || (k == "tag" && tag_ok)
                || (k == "volume_type" && mv >= (2, 67))
        };
        let bad = b
            .as_object()
            .and_then(|o| o.keys().find(|k| !known(k)).cloned());
        if let Some(k) = bad {
            return fault(
                400,
                &format!(
                    "Invalid input for field/attribute {i}. Value: {b}. Additional properties \
                     are not allowed ('{k}' was unexpected)"
                ),
            );
        }
    }
    if let Some(tags) = s.get("tags").and_then(Value::as_array) {
        let bad = tags.iter().find(|t| {
            t.as_str()
                .is_none_or(|t| t.is_empty() || t.len() > 60 || t.contains(['/', ',']))
        });
        if tags.len() > 50 || bad.is_some() {
            return fault(
                400,
                &format!(
                    "Invalid input for field/attribute tags. Value: {}.",
                    s["tags"]
                ),
            );
        }
    }
    if let Some(data) = s.get("user_data").and_then(Value::as_str) {
        if data.len() > 65535 {
            return fault(
                400,
                &format!(
                    "Invalid input for field/attribute user_data. Value: {data}. '{data}' is too \
                     long"
                ),
            );
        }
        if base64::engine::general_purpose::STANDARD
            .decode(data)
            .is_err()
        {
            return fault(400, "User data needs to be valid base 64.");
        }
    }
    // The flavor.
    let flavor_id = match &s["flavorRef"] {
        Value::String(f) => f.clone(),
        other => other.to_string(),
    };
    let flavor_id = flavor_id.rsplit('/').next().unwrap_or("").to_string();
    let Some(flavor) = st
        .list("flavor")
        .iter()
        .find(|f| f["id"] == flavor_id)
        .cloned()
    else {
        return fault(400, &format!("Flavor {flavor_id} could not be found."));
    };
    if st.workload.refused_flavors.contains(&flavor_id) {
        let cores = flavor["vcpus"].as_u64().unwrap_or(1);
        return fault(
            403,
            &format!(
                "Quota exceeded for cores: Requested {cores}, but already used 0 of {} cores",
                cores.saturating_sub(1)
            ),
        );
    }
    // The boot source: a volume at boot index 0, or an image.
    let boot_index =
        |b: &Value| b["boot_index"] == 0 || b["boot_index"] == "0" || b["boot_index"] == 0.0;
    let boot = bdms.iter().find(|b| boot_index(b)).cloned();
    let volume_backed = boot
        .as_ref()
        .is_some_and(|b| b["destination_type"] == "volume");
    let mut volumes: Vec<(String, bool)> = Vec::new();
    for b in &bdms {
        if b["source_type"] != "volume" {
            continue;
        }
        let id = b["uuid"].as_str().unwrap_or("").to_string();
        let Some(i) = st
            .workload
            .volumes
            .iter()
            .position(|v| v["id"] == id.as_str())
        else {
            return fault(
                400,
                &format!("Block Device Mapping is Invalid: failed to get volume {id}."),
            );
        };
        let v = observe(&mut st.workload.volumes[i]);
        if v["status"] != "available" {
            return fault(
                400,
                &format!(
                    "Invalid volume: volume '{id}' status must be 'available'. Currently in '{}'",
                    v["status"].as_str().unwrap_or("")
                ),
            );
        }
        if boot_index(b) && v["bootable"] != "true" {
            return fault(400, &format!("Block Device {id} is not bootable."));
        }
        let on_term = b["delete_on_termination"] == true;
        volumes.push((id, on_term));
    }
    let image_id = match s.get("imageRef").and_then(Value::as_str) {
        Some(i) if !i.is_empty() => Some(i.rsplit('/').next().unwrap_or("").to_string()),
        _ => boot
            .as_ref()
            .filter(|b| b["source_type"] == "image")
            .and_then(|b| b["uuid"].as_str())
            .map(str::to_string),
    };
    let image = match &image_id {
        Some(i) => match st.list("image").iter().find(|x| x["id"] == i.as_str()) {
            Some(img) if img["status"] == "active" => Some(img.clone()),
            Some(_) => return fault(400, &format!("Image {i} is not active.")),
            None => return fault(400, &format!("Image {i} could not be found.")),
        },
        None => None,
    };
    if !volume_backed {
        let Some(img) = &image else {
            return fault(
                400,
                "Block Device Mapping is Invalid: Boot sequence for the instance and image/block \
                 device mapping combination is not valid.",
            );
        };
        let disk_gib = flavor["disk"].as_u64().unwrap_or(0);
        if disk_gib == 0 {
            return fault(
                403,
                "Only volume-backed servers are allowed for flavors with zero disk.",
            );
        }
        let disk = disk_gib * GIB;
        let image_size = img["virtual_size"]
            .as_u64()
            .unwrap_or(0)
            .max(img["size"].as_u64().unwrap_or(0));
        if image_size > disk || img["min_disk"].as_u64().unwrap_or(0) > disk_gib {
            return fault(
                400,
                &format!(
                    "Flavor's disk is too small for requested image. Flavor disk is {disk} \
                     bytes, image is {image_size} bytes."
                ),
            );
        }
    }
    if image
        .as_ref()
        .is_some_and(|i| i["min_ram"].as_u64().unwrap_or(0) > flavor["ram"].as_u64().unwrap_or(0))
    {
        return fault(400, "Flavor's memory is too small for requested image.");
    }
    if let Some(key) = s.get("key_name").and_then(Value::as_str)
        && !st.list("keypair").iter().any(|k| k["name"] == key)
    {
        return fault(400, "Invalid key_name provided.");
    }
    let zone = s
        .get("availability_zone")
        .and_then(Value::as_str)
        .filter(|z| !z.is_empty());
    if zone.is_some_and(|z| z != "nova") {
        return fault(400, "The requested availability zone is not available");
    }
    let group = r
        .body
        .pointer("/os:scheduler_hints/group")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(g) = &group
        && !st
            .workload
            .server_groups
            .iter()
            .any(|x| x["id"] == g.as_str())
    {
        return fault(404, &format!("Instance group {g} could not be found."));
    }
    // The network attachments: given ports (free) or networks Nova makes a port on.
    let mut ports: Vec<String> = Vec::new();
    let mut wanted_nets: Vec<String> = Vec::new();
    match s.get("networks") {
        Some(Value::Array(nets)) => {
            for n in nets {
                if let Some(p) = n["port"].as_str().filter(|p| !p.is_empty()) {
                    let Some(port) = st.workload.ports.iter().find(|x| x["id"] == p) else {
                        return fault(400, &format!("Port id {p} could not be found."));
                    };
                    if port["device_id"].as_str().is_some_and(|d| !d.is_empty()) {
                        return fault(409, &format!("Port {p} is still in use."));
                    }
                    ports.push(p.to_string());
                } else if let Some(net) = n["uuid"].as_str() {
                    if !st.list("network").iter().any(|x| x["id"] == net) {
                        return fault(400, &format!("Network {net} could not be found."));
                    }
                    wanted_nets.push(net.to_string());
                }
            }
        }
        Some(Value::String(_)) | None => {}
        Some(other) => {
            return invalid(&format!(
                "{other} is not valid under any of the given schemas"
            ));
        }
    }
    let id = new_id();
    let mut made: Vec<String> = Vec::new();
    for net in wanted_nets {
        match super::neutron::new_port(st, &r.project, &net, None, &Map::new()) {
            Ok(p) => {
                let pid = p["id"].as_str().unwrap_or("").to_string();
                made.push(pid.clone());
                ports.push(pid);
            }
            Err((_, e)) => {
                for p in &made {
                    super::neutron::remove_port(st, p);
                }
                return fault(400, &neutron_message(&e));
            }
        }
    }
    for p in st
        .workload
        .ports
        .iter_mut()
        .filter(|p| ports.iter().any(|x| p["id"] == x.as_str()))
    {
        p["device_id"] = json!(id);
        p["device_owner"] = json!("compute:nova");
        p["binding:host_id"] = json!("fake-compute-1");
        p["binding:vif_type"] = json!("ovs");
        p["status"] = json!("ACTIVE");
        p["updated_at"] = json!(now_z());
    }
    let attached_at = now_micro();
    let mut attached = Vec::new();
    for (i, (vol, on_term)) in volumes.iter().enumerate() {
        let device = format!("/dev/vd{}", (b'a' + u8::try_from(i).unwrap_or(0)) as char);
        if let Some(v) = st
            .workload
            .volumes
            .iter_mut()
            .find(|v| v["id"] == vol.as_str())
        {
            v["status"] = json!("attaching");
            let att = json!([{"id": vol, "attachment_id": new_id(), "volume_id": vol,
                "server_id": id, "host_name": "fake-compute-1", "device": device,
                "attached_at": attached_at}]);
            settle_later(v, json!({"status": "in-use", "attachments": att}), 0);
        }
        attached.push(json!({"id": vol, "delete_on_termination": on_term}));
    }
    if let Some(g) = &group
        && let Some(x) = st
            .workload
            .server_groups
            .iter_mut()
            .find(|x| x["id"] == g.as_str())
        && let Some(m) = x["members"].as_array_mut()
    {
        m.push(json!(id));
    }
    let now = now_z();
    let image_view = match (&image_id, volume_backed) {
        (Some(i), false) => json!({"id": i, "links": [{"rel": "bookmark",
            "href": format!("{}/compute/images/{i}", st.base)}]}),
        _ => json!(""),
    };
    let mut server = json!({
        "id": id, "name": name, "status": "BUILD", "tenant_id": r.project,
        "user_id": "", "metadata": s.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "hostId": "", "image": image_view, "flavor": flavor, "created": now, "updated": now,
        "accessIPv4": "", "accessIPv6": "", "OS-DCF:diskConfig": "MANUAL", "progress": 0,
        "OS-EXT-AZ:availability_zone": zone.unwrap_or("nova"),
        "config_drive": if s.get("config_drive") == Some(&json!(true)) { "True" } else { "" },
        "key_name": s.get("key_name").cloned().unwrap_or(Value::Null),
        "OS-SRV-USG:launched_at": null, "OS-SRV-USG:terminated_at": null,
        "OS-EXT-STS:task_state": "scheduling", "OS-EXT-STS:vm_state": "building",
        "OS-EXT-STS:power_state": 0, "locked": false, "locked_reason": null,
        "description": s.get("description").cloned().unwrap_or(Value::Null),
        "tags": s.get("tags").cloned().unwrap_or_else(|| json!([])),
        "os-extended-volumes:volumes_attached": attached,
        "server_groups": group.iter().collect::<Vec<_>>(),
        "OS-EXT-SRV-ATTR:host": null, "OS-EXT-SRV-ATTR:hypervisor_hostname": null,
        "OS-EXT-SRV-ATTR:instance_name": "",
        "_ports": ports, "_made_ports": made,
        "_user_data": s.get("user_data").cloned().unwrap_or(Value::Null),
    });
    settle_later(
        &mut server,
        json!({"status": "ACTIVE", "OS-EXT-STS:task_state": null,
            "OS-EXT-STS:vm_state": "active", "OS-EXT-STS:power_state": 1,
            "OS-SRV-USG:launched_at": now_micro(), "hostId": new_id().replace('-', ""),
            "OS-EXT-SRV-ATTR:host": "fake-compute-1",
            "OS-EXT-SRV-ATTR:hypervisor_hostname": "fake-compute-1",
            "OS-EXT-SRV-ATTR:instance_name": format!("instance-{}", &id[..8])}),
        PENDING_READS,
    );
    st.workload.servers.push(server.clone());
    let groups = security_group_names(st, &server);
    let links = server_links(&st.base, &id);
    let pass: String = new_id().replace('-', "")[..12].to_string();
    (
        202,
        json!({"server": {"id": id, "links": links, "OS-DCF:diskConfig": "MANUAL",
            "security_groups": groups, "adminPass": pass}}),
    )
}

fn server_links(base: &str, id: &str) -> Value {
    json!([{"rel": "self", "href": format!("{base}/compute/v2.1/servers/{id}")},
        {"rel": "bookmark", "href": format!("{base}/compute/servers/{id}")}])
}

/// `[{"name"}]` of the security groups on the server's ports.
fn security_group_names(st: &Inner, server: &Value) -> Value {
    let mut names: Vec<Value> = Vec::new();
    for p in st
        .workload
        .ports
        .iter()
        .filter(|p| p["device_id"] == server["id"])
    {
        for g in p["security_groups"].as_array().into_iter().flatten() {
            let name = st
                .workload
                .security_groups
                .iter()
                .find(|x| x["id"] == *g)
                .map_or(g.clone(), |x| x["name"].clone());
            let entry = json!({ "name": name });
            if !names.contains(&entry) {
                names.push(entry);
            }
        }
    }
    json!(names)
}

/// A server as Nova shows it at microversion `mv`.
fn server_view(st: &Inner, s: &Value, mv: (u32, u32)) -> Value {
    let mut v = public(s);
    let id = s["id"].as_str().unwrap_or("");
    let mut addresses = Map::new();
    if s["status"] != "BUILD" {
        for pid in s["_ports"].as_array().into_iter().flatten() {
            let Some(p) = st.workload.ports.iter().find(|p| p["id"] == *pid) else {
                continue;
            };
            let net = st
                .list("network")
                .iter()
                .find(|n| n["id"] == p["network_id"])
                .and_then(|n| n["name"].as_str())
                .unwrap_or("")
                .to_string();
            let entry = addresses.entry(net).or_insert_with(|| json!([]));
            let Some(list) = entry.as_array_mut() else {
                continue;
            };
            for f in p["fixed_ips"].as_array().into_iter().flatten() {
                list.push(json!({"version": 4, "addr": f["ip_address"],
                    "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": p["mac_address"]}));
            }
            for f in st
                .workload
                .floating_ips
                .iter()
                .filter(|f| f["port_id"] == p["id"])
            {
                list.push(json!({"version": 4, "addr": f["floating_ip_address"],
                    "OS-EXT-IPS:type": "floating", "OS-EXT-IPS-MAC:mac_addr": p["mac_address"]}));
            }
        }
        v["security_groups"] = security_group_names(st, s);
    }
    v["addresses"] = Value::Object(addresses);
    v["links"] = server_links(&st.base, id);
    let f = &s["flavor"];
    v["flavor"] = if mv >= (2, 47) {
        json!({"vcpus": f["vcpus"], "ram": f["ram"], "disk": f["disk"],
            "ephemeral": f["OS-FLV-EXT-DATA:ephemeral"], "swap": f["swap"],
            "original_name": f["name"], "extra_specs": f["extra_specs"]})
    } else {
        let fid = f["id"].as_str().unwrap_or("");
        json!({"id": fid, "links": [{"rel": "bookmark",
            "href": format!("{}/compute/flavors/{fid}", st.base)}]})
    };
    if let Some(o) = v.as_object_mut() {
        let gated = [
            ("locked", (2, 9)),
            ("description", (2, 19)),
            ("tags", (2, 26)),
            ("server_groups", (2, 71)),
            ("locked_reason", (2, 73)),
        ];
        for (k, from) in gated {
            if mv < from {
                o.remove(k);
            }
        }
        if mv >= (2, 63) {
            o.insert("trusted_image_certificates".into(), Value::Null);
        }
    }
    v
}

fn list_servers(st: &mut Inner, r: &Req, mv: (u32, u32), url: &str, detail: bool) -> Answer {
    let name = r.param("name");
    let status = r.param("status").map(str::to_ascii_uppercase);
    let tags: Vec<&str> = r
        .param("tags")
        .map(|t| t.split(',').collect())
        .unwrap_or_default();
    let hits: Vec<usize> = st
        .workload
        .servers
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            name.is_none_or(|n| regex_search(n, s["name"].as_str().unwrap_or("")))
                && status.as_deref().is_none_or(|x| s["status"] == x)
                && (mv < (2, 26)
                    || tags
                        .iter()
                        .all(|t| s["tags"].as_array().is_some_and(|a| a.contains(&json!(t)))))
        })
        .map(|(i, _)| i)
        .collect();
    let mut shown = Vec::with_capacity(hits.len());
    for i in hits {
        observe(&mut st.workload.servers[i]);
        let s = st.workload.servers[i].clone();
        shown.push(if detail {
            server_view(st, &s, mv)
        } else {
            let id = s["id"].as_str().unwrap_or("");
            json!({"id": id, "name": s["name"], "links": server_links(&st.base, id)})
        });
    }
    let (status, mut body) = page(shown, &r.query, st.workload.page_size, url, "servers");
    if body["servers_links"].as_array().is_some_and(Vec::is_empty)
        && let Some(o) = body.as_object_mut()
    {
        o.remove("servers_links");
    }
    (status, body)
}

fn delete_server(st: &mut Inner, id: &str) -> Answer {
    let Some(s) = st.workload.servers.iter().find(|s| s["id"] == id).cloned() else {
        return fault(404, &format!("Instance {id} could not be found."));
    };
    let ports: Vec<String> = st
        .workload
        .ports
        .iter()
        .filter(|p| p["device_id"] == id)
        .filter_map(|p| p["id"].as_str().map(str::to_string))
        .collect();
    for p in ports {
        release_port(st, id, &p);
    }
    for a in s["os-extended-volumes:volumes_attached"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let stuck = &st.workload.stuck;
        let vol = a["id"].clone();
        let keep =
            a["delete_on_termination"] != true || vol.as_str().is_some_and(|v| stuck.contains(v));
        if keep {
            if let Some(v) = st.workload.volumes.iter_mut().find(|v| v["id"] == vol) {
                if let Some(o) = v.as_object_mut() {
                    o.remove("_then");
                    o.remove("_reads");
                }
                v["attachments"] = json!([]);
                v["status"] = json!(if a["delete_on_termination"] == true {
                    "deleting"
                } else {
                    "available"
                });
            }
        } else {
            st.workload.volumes.retain(|v| v["id"] != vol);
        }
    }
    for g in st.workload.server_groups.iter_mut() {
        if let Some(m) = g["members"].as_array_mut() {
            m.retain(|x| x != id);
        }
    }
    st.workload.servers.retain(|x| x["id"] != id);
    (204, Value::Null)
}

fn server_groups(w: &mut Workload, r: &Req, rest: &[&str]) -> Answer {
    let method = r.method.clone();
    let body = &r.body;
    match (method, rest) {
        (Method::GET, []) => (200, json!({"server_groups": w.server_groups})),
        (Method::GET, [id]) => match w.server_groups.iter().find(|g| g["id"] == *id) {
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
                "id": format!("sg-{:04}-{name}", w.server_groups.len()),
                "name": name, "policy": policy, "rules": {}, "members": [],
                "project_id": "", "user_id": "",
            });
            w.server_groups.push(group.clone());
            (200, json!({ "server_group": group }))
        }
        (Method::DELETE, [id]) => {
            let before = w.server_groups.len();
            w.server_groups.retain(|g| g["id"] != *id);
            if w.server_groups.len() == before {
                fault(404, &format!("Server group {id} could not be found."))
            } else {
                (204, Value::Null)
            }
        }
        _ => fault(405, "Method not allowed"),
    }
}

// ------------------------------------------------------------------- leftovers, for tests

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

/// An Octavia object of `project` as reads show it once made: `fields` over Octavia's
/// `defaults`, `ACTIVE`.
fn made(project: &str, fields: Value, defaults: Value) -> Value {
    let body = fields.as_object().cloned().unwrap_or_default();
    super::settled(&octavia_new(project, &body, defaults))
}

/// A TCP listener on `port` of load balancer `lb` as Octavia shows it, named `name` with
/// `tags`, its default pool `pool`.
pub fn listener(
    id: &str,
    lb: &str,
    (name, tags): (&str, &[&str]),
    port: u16,
    pool: Option<&str>,
    project: &str,
) -> Value {
    made(
        project,
        json!({"id": id, "name": name, "tags": tags, "protocol": "TCP", "protocol_port": port,
               "default_pool_id": pool}),
        listener_defaults(lb),
    )
}

/// A pool of load balancer `lb` as Octavia shows it (the default pool of `listener`), named
/// `name`, with `members` and health monitor `monitor`.
pub fn pool(
    id: &str,
    lb: &str,
    listener: Option<&str>,
    name: &str,
    (members, monitor): (&[&str], Option<&str>),
    project: &str,
) -> Value {
    let members: Vec<Value> = members.iter().map(|m| json!({"id": m})).collect();
    made(
        project,
        json!({"id": id, "name": name, "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
               "members": members, "healthmonitor_id": monitor}),
        pool_defaults(lb, listener),
    )
}

/// A member `address`:30080 of pool `pool` as Octavia shows it.
pub fn member(id: &str, pool: &str, address: &str, project: &str) -> Value {
    made(
        project,
        json!({"id": id, "address": address, "protocol_port": 30080}),
        member_defaults(pool),
    )
}

/// A TCP health monitor of pool `pool` as Octavia shows it.
pub fn health_monitor(id: &str, pool: &str, project: &str) -> Value {
    made(
        project,
        json!({"id": id, "type": "TCP", "delay": 10, "timeout": 5, "max_retries": 3}),
        monitor_defaults(pool),
    )
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

/// A floating IP on `port`, described as OCCM describes the one it allocates for cluster
/// `capi`'s Service `service` (`namespace/name`).
pub fn floating_ip(id: &str, port: &str, project: &str, capi: &str, service: &str) -> Value {
    floating_ip_described(
        id,
        port,
        project,
        &format!("Floating IP for Kubernetes external service {service} from cluster {capi}"),
    )
}

/// A floating IP on `port` with `description` (e.g. one the tenant allocated). Its address is
/// outside the public subnet's pool: no port of the fake's Neutron holds it.
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
