//! The fake Neutron's writes and every Neutron resource besides the network and subnet reads of
//! `fakecloud`, in the real API's shapes, status codes and `NeutronError` bodies (checked against
//! the neutron and neutron-lib sources): networks and subnets created, updated and deleted (a
//! DHCP port per network with a DHCP subnet; 409 `NetworkInUse`/`SubnetInUse` while other ports
//! hold addresses), ports (fixed IPs from the subnets' allocation pools, security groups,
//! bindings; list filters incl. `fixed_ips=ip_address=…` and repeated `device_owner`), routers
//! (external gateway with an address on the external network, `add_router_interface` /
//! `remove_router_interface`, 409 `RouterInUse`), security groups (created with Neutron's two
//! egress rules) and their rules (409 `SecurityGroupRuleExists`), floating IPs (allocated from the
//! external network's subnet, see [`super::FLOATING_IP_POOL`]; associated only through a router
//! joining the port's subnet to that network, as Neutron requires; `DOWN` → `ACTIVE` on the next
//! read), tags (`/{resource}/{id}/tags`), trunks, extensions, and per-project quotas
//! ([`super::workload::Workload::quotas`]: 409 `OverQuota`).
//!
//! Creates belong to the project of the request's token (see `FakeCloud::set_identity`); the
//! internal ports Neutron makes for floating IPs and router gateways belong to no project, as in
//! the real service. Lists answer as for an admin (every project's), paged like the other lists
//! of the fake.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use axum::http::Method;
use serde_json::{Map, Value, json};

use super::workload::{Answer, neutron_fault, page};
use super::{Inner, Req, new_id, now_z, observe, public, select};

/// Neutron's resources kept here: (URL plural, JSON singular).
const KINDS: &[(&str, &str)] = &[
    ("ports", "port"),
    ("routers", "router"),
    ("security-groups", "security_group"),
    ("security-group-rules", "security_group_rule"),
    ("floatingips", "floatingip"),
    ("trunks", "trunk"),
];

/// Attributes each create accepts (anything else: 400 `Unrecognized attribute(s)`).
const NETWORK_ATTRS: &str = "name admin_state_up shared port_security_enabled mtu description \
    router:external tenant_id project_id availability_zone_hints dns_domain qos_policy_id \
    provider:network_type provider:physical_network provider:segmentation_id segments \
    is_default tags";
const SUBNET_ATTRS: &str = "name network_id ip_version cidr gateway_ip allocation_pools \
    dns_nameservers host_routes enable_dhcp description ipv6_ra_mode ipv6_address_mode \
    subnetpool_id prefixlen use_default_subnetpool service_types segment_id tenant_id project_id \
    dns_publish_fixed_ip tags";
const PORT_ATTRS: &str = "name network_id admin_state_up mac_address fixed_ips device_id \
    device_owner tenant_id project_id security_groups allowed_address_pairs extra_dhcp_opts \
    description port_security_enabled binding:host_id binding:vnic_type binding:profile \
    qos_policy_id propagate_uplink_status dns_name dns_domain tags numa_affinity_policy hints";
const PORT_UPDATE: &str = "name admin_state_up device_id device_owner security_groups \
    allowed_address_pairs extra_dhcp_opts description port_security_enabled binding:host_id \
    binding:vnic_type binding:profile qos_policy_id propagate_uplink_status dns_name dns_domain \
    mac_address";
const ROUTER_ATTRS: &str = "name admin_state_up description external_gateway_info distributed \
    ha availability_zone_hints flavor_id tenant_id project_id tags";
const SG_ATTRS: &str = "name description stateful tenant_id project_id tags";
const RULE_ATTRS: &str = "security_group_id direction ethertype protocol port_range_min \
    port_range_max remote_ip_prefix remote_group_id remote_address_group_id description \
    tenant_id project_id";
const FIP_ATTRS: &str = "floating_network_id floating_ip_address subnet_id port_id \
    fixed_ip_address description tenant_id project_id dns_name dns_domain qos_policy_id tags";
const TRUNK_ATTRS: &str = "name port_id sub_ports admin_state_up description tenant_id \
    project_id tags";
/// What `GET /v2.0/extensions` lists (`router` only while floating IPs are not `missing`).
const EXTENSIONS: &[&str] = &[
    "external-net",
    "security-group",
    "quotas",
    "trunk",
    "trunk-details",
    "standard-attr-tag",
    "standard-attr-description",
    "standard-attr-revisions",
    "standard-attr-timestamp",
    "port-security",
    "binding",
    "allowed-address-pairs",
    "extra_dhcp_opt",
    "project-id",
    "net-mtu",
    "availability_zone",
    "stateful-security-group",
];

/// Answers the Neutron requests this module owns; `None` for the others (the network and subnet
/// reads of `fakecloud`, unknown paths).
pub(super) fn dispatch(st: &mut Inner, r: &Req, segs: &[&str]) -> Option<Answer> {
    let ["networking", "v2.0", rest @ ..] = segs else {
        return None;
    };
    let url = format!("{}/{}", st.base, segs.join("/"));
    if rest.first() == Some(&"floatingips") && st.workload.missing.contains("floatingips") {
        return None;
    }
    let m = r.method.clone();
    Some(match (m, rest) {
        (Method::GET, ["networks" | "subnets", ..]) => return None,
        (Method::POST, ["networks"]) => create_network(st, r),
        (Method::PUT, ["networks", id]) => update_item(st, r, "networks", id, NETWORK_ATTRS),
        (Method::DELETE, ["networks", id]) => delete_network(st, id),
        (Method::POST, ["subnets"]) => create_subnet(st, r),
        (Method::PUT, ["subnets", id]) => update_item(st, r, "subnets", id, SUBNET_ATTRS),
        (Method::DELETE, ["subnets", id]) => delete_subnet(st, id),
        (Method::GET, ["extensions"]) => extensions(st),
        (Method::GET, [kind]) if plural(kind) => list(st, r, kind, &url),
        (Method::GET, [kind, id]) if plural(kind) => show(st, kind, id),
        (Method::POST, ["ports"]) => create_port(st, r),
        (Method::PUT, ["ports", id]) => update_item(st, r, "ports", id, PORT_UPDATE),
        (Method::DELETE, ["ports", id]) => delete_port(st, id),
        (Method::POST, ["routers"]) => create_router(st, r),
        (Method::PUT, ["routers", id]) => update_router(st, r, id),
        (Method::PUT, ["routers", id, "add_router_interface"]) => add_interface(st, r, id),
        (Method::PUT, ["routers", id, "remove_router_interface"]) => remove_interface(st, r, id),
        (Method::DELETE, ["routers", id]) => delete_router(st, id),
        (Method::POST, ["security-groups"]) => create_security_group(st, r),
        (Method::PUT, ["security-groups", id]) => {
            update_item(st, r, "security-groups", id, "name description stateful")
        }
        (Method::DELETE, ["security-groups", id]) => delete_security_group(st, id),
        (Method::POST, ["security-group-rules"]) => create_rule(st, r),
        (Method::DELETE, ["security-group-rules", id]) => {
            let rules = &mut st.workload.security_group_rules;
            match rules.iter().position(|x| x["id"] == *id) {
                Some(i) => {
                    rules.remove(i);
                    (204, Value::Null)
                }
                None => not_found("security-group-rules", id),
            }
        }
        (Method::POST, ["floatingips"]) => create_floating_ip(st, r),
        (Method::PUT, ["floatingips", id]) => update_floating_ip(st, r, id),
        (Method::DELETE, ["floatingips", id]) => delete_floating_ip(st, id),
        (Method::POST, ["trunks"]) => create_trunk(st, r),
        (Method::DELETE, ["trunks", id]) => {
            let trunks = &mut st.workload.trunks;
            match trunks.iter().position(|x| x["id"] == *id) {
                Some(i) => {
                    trunks.remove(i);
                    (204, Value::Null)
                }
                None => not_found("trunks", id),
            }
        }
        (Method::GET, ["trunks", id, "get_subports"]) => match find(st, "trunks", id) {
            Some(t) => (200, json!({"sub_ports": t["sub_ports"]})),
            None => not_found("trunks", id),
        },
        (Method::PUT, ["trunks", id, "remove_subports"]) => remove_subports(st, r, id),
        (Method::GET, [kind, id, "tags"]) => match find(st, kind, id) {
            Some(v) => (200, json!({"tags": v["tags"]})),
            None => not_found(kind, id),
        },
        (Method::PUT, [kind, id, "tags"]) => replace_tags(st, r, kind, id),
        (Method::PUT, [kind, id, "tags", tag]) => {
            let tags = find(st, kind, id).map(|v| v["tags"].clone());
            let Some(Value::Array(mut tags)) = tags else {
                return Some(not_found(kind, id));
            };
            if !tags.contains(&json!(tag)) {
                tags.push(json!(tag));
            }
            set_field(st, kind, id, "tags", Value::Array(tags));
            (201, Value::Null)
        }
        (Method::DELETE, [kind, id, "tags", ..]) => {
            let tag = rest.get(3).copied();
            let Some(Value::Array(mut tags)) = find(st, kind, id).map(|v| v["tags"].clone()) else {
                return Some(not_found(kind, id));
            };
            tags.retain(|t| tag.is_some_and(|want| t != want));
            set_field(st, kind, id, "tags", Value::Array(tags));
            (204, Value::Null)
        }
        _ => return None,
    })
}

fn plural(kind: &str) -> bool {
    KINDS.iter().any(|(p, _)| *p == kind)
}

fn singular(kind: &str) -> &'static str {
    match kind {
        "networks" => "network",
        "subnets" => "subnet",
        _ => KINDS
            .iter()
            .find(|(p, _)| *p == kind)
            .map_or("resource", |(_, s)| s),
    }
}

/// The collection behind a URL plural.
fn coll<'a>(st: &'a mut Inner, kind: &str) -> Option<&'a mut Vec<Value>> {
    let w = &mut st.workload;
    Some(match kind {
        "networks" => st.items.entry("network").or_default(),
        "subnets" => st.items.entry("subnet").or_default(),
        "ports" => &mut w.ports,
        "routers" => &mut w.routers,
        "security-groups" => &mut w.security_groups,
        "security-group-rules" => &mut w.security_group_rules,
        "floatingips" => &mut w.floating_ips,
        "trunks" => &mut w.trunks,
        _ => return None,
    })
}

fn find(st: &mut Inner, kind: &str, id: &str) -> Option<Value> {
    coll(st, kind)?.iter().find(|v| v["id"] == id).cloned()
}

fn set_field(st: &mut Inner, kind: &str, id: &str, key: &str, value: Value) {
    if let Some(v) = coll(st, kind).and_then(|c| c.iter_mut().find(|v| v["id"] == id)) {
        v[key] = value;
        touch(v);
    }
}

/// A changed resource's `updated_at` and `revision_number`.
fn touch(v: &mut Value) {
    v["updated_at"] = json!(now_z());
    let rev = v["revision_number"].as_u64().unwrap_or(0);
    v["revision_number"] = json!(rev + 1);
}

/// Neutron's 404 for resource `id` of `kind`.
pub(super) fn not_found(kind: &str, id: &str) -> Answer {
    let (ty, msg) = match kind {
        "networks" => (
            "NetworkNotFound",
            format!("Network {id} could not be found."),
        ),
        "subnets" => ("SubnetNotFound", format!("Subnet {id} could not be found.")),
        "ports" => ("PortNotFound", format!("Port {id} could not be found.")),
        "routers" => ("RouterNotFound", format!("Router {id} could not be found")),
        "security-groups" => (
            "SecurityGroupNotFound",
            format!("Security group {id} does not exist"),
        ),
        "security-group-rules" => (
            "SecurityGroupRuleNotFound",
            format!("Security group rule {id} does not exist"),
        ),
        "floatingips" => (
            "FloatingIPNotFound",
            format!("Floating IP {id} could not be found"),
        ),
        "trunks" => ("TrunkNotFound", format!("Trunk {id} could not be found.")),
        _ => ("HTTPNotFound", "The resource could not be found.".into()),
    };
    neutron_fault(404, ty, &msg)
}

fn bad_request(msg: &str) -> Answer {
    neutron_fault(400, "HTTPBadRequest", msg)
}

/// The request's `{key: {...}}` body with only the attributes in `allowed`, or Neutron's 400.
fn body_of(r: &Req, key: &str, allowed: &str) -> Result<Map<String, Value>, Answer> {
    let body = r
        .body
        .get(key)
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| bad_request(&format!("Unable to find '{key}' in request body")))?;
    check_attrs(&body, allowed)?;
    Ok(body)
}

/// A create's body ([`body_of`]) and the network its required
/// `field` names (Neutron's 400 without it, 404 for an unknown network).
fn create_on_network(
    st: &Inner,
    r: &Req,
    key: &str,
    allowed: &str,
    field: &str,
) -> Result<(Map<String, Value>, Value), Answer> {
    let body = body_of(r, key, allowed)?;
    let Some(network) = body.get(field).and_then(Value::as_str).map(str::to_string) else {
        return Err(bad_request(&format!(
            "Failed to parse request. Required attribute '{field}' not specified"
        )));
    };
    let net = st
        .list("network")
        .iter()
        .find(|n| n["id"] == network)
        .cloned()
        .ok_or_else(|| not_found("networks", &network))?;
    Ok((body, net))
}

/// 400 for attributes outside `allowed`.
fn check_attrs(body: &Map<String, Value>, allowed: &str) -> Result<(), Answer> {
    let bad: Vec<&str> = body
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.split_whitespace().any(|a| a == *k))
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(bad_request(&format!(
        "Unrecognized attribute(s) '{}'",
        bad.join(", ")
    )))
}

/// 409 `OverQuota` when `project` already has its quota of `resource` (`count` of them).
fn quota(st: &Inner, project: &str, resource: &str, count: usize) -> Result<(), Answer> {
    let key = (project.to_string(), resource.to_string());
    match st.workload.quotas.get(&key) {
        Some(limit) if count >= *limit => Err(neutron_fault(
            409,
            "OverQuota",
            &format!("Quota exceeded for resources: ['{resource}']."),
        )),
        _ => Ok(()),
    }
}

fn count_of(items: &[Value], project: &str) -> usize {
    items.iter().filter(|v| v["project_id"] == project).count()
}

/// Fields every resource this module creates starts with.
fn stamped(id: &str, project: &str) -> Value {
    let now = now_z();
    json!({"id": id, "tenant_id": project, "project_id": project, "created_at": now,
           "updated_at": now, "revision_number": 1, "tags": [], "description": ""})
}

fn merge(into: &mut Value, from: &Map<String, Value>) {
    if let Some(o) = into.as_object_mut() {
        for (k, v) in from {
            o.insert(k.clone(), v.clone());
        }
    }
}

/// What a reader sees of a stored item (security groups carry their rules).
fn view(st: &Inner, kind: &str, v: &Value) -> Value {
    let mut out = public(v);
    if kind == "security-groups" {
        let rules: Vec<Value> = st
            .workload
            .security_group_rules
            .iter()
            .filter(|x| x["security_group_id"] == v["id"])
            .map(public)
            .collect();
        out["security_group_rules"] = json!(rules);
    }
    out
}

fn list(st: &mut Inner, r: &Req, kind: &str, url: &str) -> Answer {
    let key = kind.replace('-', "_");
    let skip = [
        "fields",
        "limit",
        "marker",
        "sort_key",
        "sort_dir",
        "page_reverse",
        "fixed_ips",
    ];
    let raw: Vec<Value> = coll(st, kind)
        .map(|c| c.iter().map(public).collect())
        .unwrap_or_default();
    let fixed: Vec<(String, String)> = r
        .all("fixed_ips")
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let hits: Vec<usize> = select(&raw, &r.query, &skip)
        .into_iter()
        .filter(|i| {
            fixed.iter().all(|(k, want)| {
                raw[*i]["fixed_ips"].as_array().is_some_and(|ips| {
                    ips.iter().any(|ip| match k.as_str() {
                        "ip_address_substr" => {
                            ip["ip_address"].as_str().is_some_and(|a| a.contains(want))
                        }
                        _ => ip[k.as_str()] == want.as_str(),
                    })
                })
            })
        })
        .collect();
    let mut shown = Vec::with_capacity(hits.len());
    for i in hits {
        let seen = coll(st, kind).map(|c| observe(&mut c[i]));
        shown.push(view(st, kind, &seen.unwrap_or_default()));
    }
    let fields: Vec<&str> = r.all("fields").collect();
    if !fields.is_empty() {
        for v in &mut shown {
            if let Some(o) = v.as_object_mut() {
                o.retain(|k, _| fields.contains(&k.as_str()));
            }
        }
    }
    page(shown, &r.query, st.workload.page_size, url, &key)
}

fn show(st: &mut Inner, kind: &str, id: &str) -> Answer {
    let seen = coll(st, kind).and_then(|c| c.iter_mut().find(|v| v["id"] == id).map(observe));
    match seen {
        Some(v) => (200, json!({ singular(kind): view(st, kind, &v) })),
        None => not_found(kind, id),
    }
}

/// PUT of the attributes in `allowed` (400 for others).
fn update_item(st: &mut Inner, r: &Req, kind: &str, id: &str, allowed: &str) -> Answer {
    let key = singular(kind);
    let body = match body_of(r, key, allowed) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if kind == "ports"
        && let Some(Value::Array(groups)) = body.get("security_groups")
        && let Some(missing) = groups
            .iter()
            .find(|g| !st.workload.security_groups.iter().any(|s| s["id"] == **g))
    {
        return not_found("security-groups", missing.as_str().unwrap_or(""));
    }
    let Some(v) = coll(st, kind).and_then(|c| c.iter_mut().find(|v| v["id"] == id)) else {
        return not_found(kind, id);
    };
    merge(v, &body);
    touch(v);
    let v = v.clone();
    (200, json!({ key: view(st, kind, &v) }))
}

fn extensions(st: &Inner) -> Answer {
    let mut aliases: Vec<&str> = EXTENSIONS.to_vec();
    if !st.workload.missing.contains("floatingips") {
        aliases.extend(["router", "extraroute", "ext-gw-mode", "l3-flavors"]);
    }
    let exts: Vec<Value> = aliases
        .iter()
        .map(|a| {
            json!({"alias": a, "name": a, "description": "",
                   "updated": "2013-01-20T00:00:00-00:00", "links": []})
        })
        .collect();
    (200, json!({ "extensions": exts }))
}

fn replace_tags(st: &mut Inner, r: &Req, kind: &str, id: &str) -> Answer {
    let Some(tags) = r.body.get("tags").and_then(Value::as_array) else {
        return bad_request("Invalid input for tags. Reason: Invalid data format for tag list.");
    };
    let mut clean: Vec<Value> = Vec::new();
    for t in tags {
        match t.as_str() {
            Some(s) if !s.is_empty() && s.len() <= 255 && !s.contains(',') => {
                if !clean.contains(t) {
                    clean.push(t.clone());
                }
            }
            _ => {
                return bad_request(&format!(
                    "Invalid input for tags. Reason: '{t}' is not a valid tag."
                ));
            }
        }
    }
    if find(st, kind, id).is_none() {
        return not_found(kind, id);
    }
    set_field(st, kind, id, "tags", Value::Array(clean.clone()));
    (200, json!({ "tags": clean }))
}

// ------------------------------------------------------------------------------------- IPAM

fn ip(s: &str) -> Option<Ipv4Addr> {
    s.parse().ok()
}

fn subnet_net(subnet: &Value) -> Option<ipnet::Ipv4Net> {
    subnet["cidr"].as_str()?.parse().ok()
}

/// Addresses of `subnet` in use: its gateway and the ports' fixed IPs on it.
fn used(ports: &[Value], subnet: &Value) -> HashSet<Ipv4Addr> {
    let id = &subnet["id"];
    let mut out: HashSet<Ipv4Addr> = ports
        .iter()
        .flat_map(|p| p["fixed_ips"].as_array().cloned().unwrap_or_default())
        .filter(|f| f["subnet_id"] == *id)
        .filter_map(|f| f["ip_address"].as_str().and_then(ip))
        .collect();
    if let Some(g) = subnet["gateway_ip"].as_str().and_then(ip) {
        out.insert(g);
    }
    out
}

/// The lowest free address of `subnet`'s allocation pools.
fn allocate(ports: &[Value], subnet: &Value) -> Option<String> {
    let used = used(ports, subnet);
    for pool in subnet["allocation_pools"].as_array().into_iter().flatten() {
        let (Some(a), Some(b)) = (
            pool["start"].as_str().and_then(ip),
            pool["end"].as_str().and_then(ip),
        ) else {
            continue;
        };
        let hit = (u32::from(a)..=u32::from(b))
            .map(Ipv4Addr::from)
            .find(|x| !used.contains(x));
        if let Some(x) = hit {
            return Some(x.to_string());
        }
    }
    None
}

fn subnets_of(st: &Inner, network: &str) -> Vec<Value> {
    st.list("subnet")
        .iter()
        .filter(|s| s["network_id"] == network)
        .cloned()
        .collect()
}

/// The `fixed_ips` of a new port on `network`: each wanted `{subnet_id?, ip_address?}` resolved,
/// or one address of the network's first subnet with room; or Neutron's error.
fn fixed_ips(st: &Inner, network: &str, wanted: Option<&Vec<Value>>) -> Result<Vec<Value>, Answer> {
    let subnets = subnets_of(st, network);
    let ports = &st.workload.ports;
    let exhausted = || {
        neutron_fault(
            409,
            "IpAddressGenerationFailure",
            &format!("No more IP addresses available on network {network}."),
        )
    };
    let Some(wanted) = wanted else {
        if subnets.is_empty() {
            return Ok(Vec::new());
        }
        for s in &subnets {
            if let Some(a) = allocate(ports, s) {
                return Ok(vec![json!({"subnet_id": s["id"], "ip_address": a})]);
            }
        }
        return Err(exhausted());
    };
    let mut out: Vec<Value> = Vec::new();
    for f in wanted {
        let want_ip = f["ip_address"].as_str().filter(|a| !a.is_empty());
        let subnet = match f["subnet_id"].as_str().filter(|s| !s.is_empty()) {
            Some(sid) => match subnets.iter().find(|s| s["id"] == sid) {
                Some(s) => s.clone(),
                None => {
                    return Err(bad_request(&format!(
                        "Invalid input for operation: Failed to create port on network \
                         {network}, because fixed_ips included invalid subnet {sid}."
                    )));
                }
            },
            None => {
                let by_ip = want_ip.and_then(|a| {
                    let a = ip(a)?;
                    subnets
                        .iter()
                        .find(|s| subnet_net(s).is_some_and(|n| n.contains(&a)))
                });
                match by_ip {
                    Some(s) => s.clone(),
                    None => {
                        return Err(bad_request(&format!(
                            "Invalid input for operation: IP address {} is not a valid IP for \
                             the specified subnet.",
                            want_ip.unwrap_or("")
                        )));
                    }
                }
            }
        };
        let address = match want_ip {
            Some(a) => {
                let parsed = ip(a);
                if !parsed.is_some_and(|x| subnet_net(&subnet).is_some_and(|n| n.contains(&x))) {
                    return Err(bad_request(&format!(
                        "Invalid input for operation: IP address {a} is not a valid IP for the \
                         specified subnet."
                    )));
                }
                let taken = parsed.is_some_and(|x| used(ports, &subnet).contains(&x))
                    || out.iter().any(|o| o["ip_address"] == a);
                if taken {
                    return Err(neutron_fault(
                        409,
                        "IpAddressAlreadyAllocated",
                        &format!(
                            "IP address {a} already allocated in subnet {}",
                            subnet["id"].as_str().unwrap_or("")
                        ),
                    ));
                }
                a.to_string()
            }
            None => {
                let mut taken_here: Vec<Value> = ports.clone();
                taken_here.push(json!({"fixed_ips": out.clone()}));
                allocate(&taken_here, &subnet).ok_or_else(exhausted)?
            }
        };
        out.push(json!({"subnet_id": subnet["id"], "ip_address": address}));
    }
    Ok(out)
}

fn mac() -> String {
    let b: [u8; 3] = rand::random();
    format!("fa:16:3e:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2])
}

/// A new port of `project` on `network` with `fixed` addresses and the `extra` attributes,
/// stored; or Neutron's error. Shared with Octavia's VIP ports and the ports Nova makes.
pub(super) fn new_port(
    st: &mut Inner,
    project: &str,
    network: &str,
    fixed: Option<&Vec<Value>>,
    extra: &Map<String, Value>,
) -> Result<Value, Answer> {
    let Some(net) = st
        .list("network")
        .iter()
        .find(|n| n["id"] == network)
        .cloned()
    else {
        return Err(not_found("networks", network));
    };
    let ips = fixed_ips(st, network, fixed)?;
    let id = new_id();
    let mut port = stamped(&id, project);
    merge(
        &mut port,
        json!({"name": "", "network_id": network, "mac_address": mac(), "admin_state_up": true,
            "status": "DOWN", "device_id": "", "device_owner": "", "fixed_ips": ips,
            "allowed_address_pairs": [], "extra_dhcp_opts": [], "security_groups": [],
            "binding:vnic_type": "normal", "binding:host_id": "", "binding:profile": {},
            "binding:vif_type": "unbound", "binding:vif_details": {},
            "port_security_enabled": net["port_security_enabled"].as_bool().unwrap_or(true),
            "qos_policy_id": null, "qos_network_policy_id": null,
            "propagate_uplink_status": false, "dns_name": "", "dns_assignment": [],
            "dns_domain": "", "resource_request": null, "ip_allocation": "immediate"})
        .as_object()
        .unwrap_or(&Map::new()),
    );
    merge(&mut port, extra);
    st.workload.ports.push(port.clone());
    Ok(port)
}

// ---------------------------------------------------------------------- networks and subnets

fn create_network(st: &mut Inner, r: &Req) -> Answer {
    let body = match body_of(r, "network", NETWORK_ATTRS) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if let Err(e) = quota(
        st,
        &r.project,
        "network",
        count_of(st.list("network"), &r.project),
    ) {
        return e;
    }
    let id = new_id();
    let mut v = stamped(&id, &r.project);
    v["availability_zones"] = json!(["nova"]);
    merge(&mut v, &body);
    let id = st.add("network", v);
    let net = st.list("network").iter().find(|n| n["id"] == id).cloned();
    (201, json!({"network": net.map(|n| public(&n))}))
}

fn create_subnet(st: &mut Inner, r: &Req) -> Answer {
    let (body, net) = match create_on_network(st, r, "subnet", SUBNET_ATTRS, "network_id") {
        Ok(v) => v,
        Err(e) => return e,
    };
    let network = net["id"].as_str().unwrap_or_default().to_string();
    if body.get("ip_version").and_then(Value::as_u64).unwrap_or(4) != 4 {
        return bad_request("Invalid input for operation: only IPv4 subnets are supported here.");
    }
    let cidr_text = body.get("cidr").and_then(Value::as_str).unwrap_or("");
    let Ok(cidr) = cidr_text.parse::<ipnet::Ipv4Net>() else {
        return bad_request(&format!(
            "Invalid input for cidr. Reason: '{cidr_text}' is not a valid IP subnet."
        ));
    };
    let cidr = cidr.trunc();
    let overlaps = subnets_of(st, &network)
        .iter()
        .filter_map(subnet_net)
        .any(|n| n.contains(&cidr.network()) || cidr.contains(&n.network()));
    if overlaps {
        return bad_request(&format!(
            "Invalid input for operation: Requested subnet with cidr: {cidr} for network: \
             {network} overlaps with another subnet."
        ));
    }
    if let Err(e) = quota(
        st,
        &r.project,
        "subnet",
        count_of(st.list("subnet"), &r.project),
    ) {
        return e;
    }
    let step = |a: Ipv4Addr, by: i64| Ipv4Addr::from((i64::from(u32::from(a)) + by) as u32);
    let hosts: Vec<Ipv4Addr> = vec![step(cidr.network(), 1), step(cidr.broadcast(), -1)];
    let gateway = match body.get("gateway_ip") {
        Some(Value::Null) => Value::Null,
        Some(Value::String(g)) => json!(g),
        _ => json!(hosts[0].to_string()),
    };
    let pools = match body.get("allocation_pools") {
        Some(p @ Value::Array(_)) => p.clone(),
        _ => {
            let start = if gateway == json!(hosts[0].to_string()) {
                step(hosts[0], 1)
            } else {
                hosts[0]
            };
            json!([{"start": start.to_string(), "end": hosts[1].to_string()}])
        }
    };
    let id = new_id();
    let mut v = stamped(&id, &r.project);
    merge(&mut v, &body);
    v["cidr"] = json!(cidr.to_string());
    v["gateway_ip"] = gateway;
    v["allocation_pools"] = pools;
    v["enable_dhcp"] = json!(
        body.get("enable_dhcp")
            .and_then(Value::as_bool)
            .unwrap_or(true)
    );
    let id = st.add("subnet", v);
    let subnet = st.list("subnet").iter().find(|s| s["id"] == id).cloned();
    if subnet.as_ref().is_some_and(|s| s["enable_dhcp"] == true) {
        dhcp_port(st, &net, &id);
    }
    (201, json!({"subnet": subnet.map(|s| public(&s))}))
}

/// The network's DHCP port gets an address on a new DHCP subnet (the port made if missing).
fn dhcp_port(st: &mut Inner, net: &Value, subnet: &str) {
    let network = net["id"].as_str().unwrap_or("");
    let Some(s) = st
        .list("subnet")
        .iter()
        .find(|s| s["id"] == subnet)
        .cloned()
    else {
        return;
    };
    let Some(address) = allocate(&st.workload.ports, &s) else {
        return;
    };
    let fixed = json!({"subnet_id": subnet, "ip_address": address});
    let existing = st
        .workload
        .ports
        .iter_mut()
        .find(|p| p["network_id"] == network && p["device_owner"] == "network:dhcp");
    if let Some(p) = existing {
        if let Some(ips) = p["fixed_ips"].as_array_mut() {
            ips.push(fixed);
        }
        return;
    }
    let project = net["project_id"].as_str().unwrap_or("").to_string();
    let extra = json!({"device_owner": "network:dhcp", "status": "ACTIVE",
        "device_id": format!("dhcp{}-{network}", new_id()),
        "binding:host_id": "fake-network-1", "binding:vif_type": "ovs"});
    let wanted = vec![fixed];
    let _ = new_port(
        st,
        &project,
        network,
        Some(&wanted),
        extra.as_object().unwrap_or(&Map::new()),
    );
}

fn delete_network(st: &mut Inner, id: &str) -> Answer {
    if !st.list("network").iter().any(|n| n["id"] == id) {
        return not_found("networks", id);
    }
    let busy = st
        .workload
        .ports
        .iter()
        .any(|p| p["network_id"] == id && p["device_owner"] != "network:dhcp");
    if busy {
        return neutron_fault(
            409,
            "NetworkInUse",
            &format!(
                "Unable to complete operation on network {id}. There are one or more ports \
                 still in use on the network."
            ),
        );
    }
    st.workload.ports.retain(|p| p["network_id"] != id);
    st.items
        .entry("subnet")
        .or_default()
        .retain(|s| s["network_id"] != id);
    st.items
        .entry("network")
        .or_default()
        .retain(|n| n["id"] != id);
    (204, Value::Null)
}

fn delete_subnet(st: &mut Inner, id: &str) -> Answer {
    let Some(subnet) = st.list("subnet").iter().find(|s| s["id"] == id).cloned() else {
        return not_found("subnets", id);
    };
    let on_it = |p: &Value| {
        p["fixed_ips"]
            .as_array()
            .is_some_and(|ips| ips.iter().any(|f| f["subnet_id"] == id))
    };
    let busy = st
        .workload
        .ports
        .iter()
        .any(|p| on_it(p) && p["device_owner"] != "network:dhcp");
    if busy {
        return neutron_fault(
            409,
            "SubnetInUse",
            &format!(
                "Unable to complete operation on subnet {id}: One or more ports have an IP \
                 allocation from this subnet."
            ),
        );
    }
    for p in st.workload.ports.iter_mut().filter(|p| on_it(p)) {
        if let Some(ips) = p["fixed_ips"].as_array_mut() {
            ips.retain(|f| f["subnet_id"] != id);
        }
    }
    st.workload.ports.retain(|p| {
        p["device_owner"] != "network:dhcp"
            || p["fixed_ips"].as_array().is_some_and(|a| !a.is_empty())
    });
    st.items
        .entry("subnet")
        .or_default()
        .retain(|s| s["id"] != id);
    let network = subnet["network_id"].clone();
    if let Some(net) = st
        .items
        .entry("network")
        .or_default()
        .iter_mut()
        .find(|n| n["id"] == network)
        && let Some(list) = net["subnets"].as_array_mut()
    {
        list.retain(|s| s != id);
    }
    (204, Value::Null)
}

// ------------------------------------------------------------------------------------ ports

fn create_port(st: &mut Inner, r: &Req) -> Answer {
    let (body, net) = match create_on_network(st, r, "port", PORT_ATTRS, "network_id") {
        Ok(v) => v,
        Err(e) => return e,
    };
    let network = net["id"].as_str().unwrap_or_default().to_string();
    if let Err(e) = quota(
        st,
        &r.project,
        "port",
        count_of(&st.workload.ports, &r.project),
    ) {
        return e;
    }
    let security = body.get("port_security_enabled").and_then(Value::as_bool);
    let groups = body.get("security_groups").and_then(Value::as_array);
    if let Some(missing) = groups
        .into_iter()
        .flatten()
        .find(|g| !st.workload.security_groups.iter().any(|s| s["id"] == **g))
    {
        return not_found("security-groups", missing.as_str().unwrap_or(""));
    }
    if security == Some(false) && groups.is_some_and(|g| !g.is_empty()) {
        return neutron_fault(
            409,
            "PortSecurityAndIPRequiredForSecurityGroups",
            "Port security must be enabled and port must have an IP address in order to use \
             security groups.",
        );
    }
    let mut extra = body.clone();
    let fixed = extra
        .remove("fixed_ips")
        .and_then(|f| f.as_array().cloned());
    extra.remove("network_id");
    match new_port(st, &r.project, &network, fixed.as_ref(), &extra) {
        Ok(p) => (201, json!({"port": public(&p)})),
        Err(e) => e,
    }
}

fn delete_port(st: &mut Inner, id: &str) -> Answer {
    let Some(port) = find(st, "ports", id) else {
        return not_found("ports", id);
    };
    let owner = port["device_owner"].as_str().unwrap_or("");
    if owner == "network:router_interface" || owner == "network:router_gateway" {
        return neutron_fault(
            409,
            "L3PortInUse",
            &format!(
                "Port {id} cannot be deleted directly via the port API: has device owner \
                 {owner}."
            ),
        );
    }
    if let Some(t) = st.workload.trunks.iter().find(|t| t["port_id"] == id) {
        return neutron_fault(
            409,
            "PortInUseAsTrunkParent",
            &format!(
                "Port {id} is currently a parent port for trunk {}.",
                t["id"].as_str().unwrap_or("")
            ),
        );
    }
    remove_port(st, id);
    (204, Value::Null)
}

/// Removes port `id`, disassociating the floating IPs on it (shared with Octavia and Nova).
pub(super) fn remove_port(st: &mut Inner, id: &str) {
    st.workload.ports.retain(|p| p["id"] != id);
    for f in st
        .workload
        .floating_ips
        .iter_mut()
        .filter(|f| f["port_id"] == id)
    {
        disassociate(f);
    }
}

// ---------------------------------------------------------------------------------- routers

/// `external_gateway_info` with a gateway port on its network, or Neutron's error.
fn gateway(st: &mut Inner, router: &str, info: &Value) -> Result<Value, Answer> {
    let Some(network) = info["network_id"].as_str().map(str::to_string) else {
        return Err(bad_request(
            "Invalid input for external_gateway_info. Reason: network_id is required.",
        ));
    };
    let Some(net) = st
        .list("network")
        .iter()
        .find(|n| n["id"] == network)
        .cloned()
    else {
        return Err(not_found("networks", &network));
    };
    if net["router:external"] != true {
        return Err(neutron_fault(
            400,
            "BadRequest",
            &format!("Bad router request: Network {network} is not an external network."),
        ));
    }
    let wanted = info["external_fixed_ips"].as_array().cloned();
    let extra = json!({"device_owner": "network:router_gateway", "device_id": router,
        "status": "ACTIVE", "binding:host_id": "fake-network-1", "binding:vif_type": "ovs"});
    let port = new_port(
        st,
        "",
        &network,
        wanted.as_ref().filter(|w| !w.is_empty()),
        extra.as_object().unwrap_or(&Map::new()),
    )?;
    Ok(json!({"network_id": network,
        "enable_snat": info["enable_snat"].as_bool().unwrap_or(true),
        "external_fixed_ips": port["fixed_ips"], "qos_policy_id": null}))
}

fn create_router(st: &mut Inner, r: &Req) -> Answer {
    let body = match body_of(r, "router", ROUTER_ATTRS) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if let Err(e) = quota(
        st,
        &r.project,
        "router",
        count_of(&st.workload.routers, &r.project),
    ) {
        return e;
    }
    let id = new_id();
    let mut v = stamped(&id, &r.project);
    merge(
        &mut v,
        json!({"name": "", "status": "ACTIVE", "admin_state_up": true,
            "external_gateway_info": null, "routes": [], "distributed": false, "ha": false,
            "availability_zone_hints": [], "availability_zones": ["nova"], "flavor_id": null,
            "enable_ndp_proxy": false})
        .as_object()
        .unwrap_or(&Map::new()),
    );
    let mut body = body;
    if let Some(info) = body
        .remove("external_gateway_info")
        .filter(|i| !i.is_null())
    {
        match gateway(st, &id, &info) {
            Ok(g) => v["external_gateway_info"] = g,
            Err(e) => return e,
        }
    }
    merge(&mut v, &body);
    st.workload.routers.push(v.clone());
    (201, json!({"router": public(&v)}))
}

fn update_router(st: &mut Inner, r: &Req, id: &str) -> Answer {
    let mut body = match body_of(
        r,
        "router",
        "name admin_state_up description external_gateway_info",
    ) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(router) = find(st, "routers", id) else {
        return not_found("routers", id);
    };
    if let Some(info) = body.remove("external_gateway_info") {
        let old = router["external_gateway_info"]["network_id"].clone();
        let same_net = !old.is_null() && info["network_id"] == old;
        let used_by_fips = st
            .workload
            .floating_ips
            .iter()
            .any(|f| f["router_id"] == id);
        if used_by_fips && !same_net {
            return neutron_fault(
                409,
                "RouterExternalGatewayInUseByFloatingIp",
                &format!(
                    "Gateway cannot be updated for router {id}, since a gateway to external \
                     network {} is required by one or more floating IPs.",
                    old.as_str().unwrap_or("")
                ),
            );
        }
        let kept: Vec<Value> = st.workload.ports.clone();
        st.workload
            .ports
            .retain(|p| !(p["device_id"] == id && p["device_owner"] == "network:router_gateway"));
        let info_out = if info.is_null() {
            Value::Null
        } else {
            match gateway(st, id, &info) {
                Ok(g) => g,
                Err(e) => {
                    st.workload.ports = kept;
                    return e;
                }
            }
        };
        set_field(st, "routers", id, "external_gateway_info", info_out);
    }
    let Some(v) = st.workload.routers.iter_mut().find(|x| x["id"] == id) else {
        return not_found("routers", id);
    };
    merge(v, &body);
    touch(v);
    (200, json!({"router": public(v)}))
}

fn interface_answer(router: &Value, port: &Value) -> Answer {
    let subnets: Vec<Value> = port["fixed_ips"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["subnet_id"].clone())
        .collect();
    (
        200,
        json!({"id": router["id"], "tenant_id": router["project_id"],
            "project_id": router["project_id"], "port_id": port["id"],
            "network_id": port["network_id"], "subnet_id": subnets.first(),
            "subnet_ids": subnets, "tags": []}),
    )
}

fn add_interface(st: &mut Inner, r: &Req, id: &str) -> Answer {
    let Some(router) = find(st, "routers", id) else {
        return not_found("routers", id);
    };
    let bad = |m: String| neutron_fault(400, "BadRequest", &format!("Bad router request: {m}"));
    if let Some(port_id) = r.body["port_id"].as_str() {
        let Some(port) = find(st, "ports", port_id) else {
            return not_found("ports", port_id);
        };
        if port["device_id"].as_str().is_some_and(|d| !d.is_empty()) {
            return neutron_fault(
                409,
                "PortInUse",
                &format!(
                    "Unable to complete operation on port {port_id} for network {}. Port \
                     already has an attached device {}.",
                    port["network_id"].as_str().unwrap_or(""),
                    port["device_id"].as_str().unwrap_or("")
                ),
            );
        }
        let Some(p) = st.workload.ports.iter_mut().find(|p| p["id"] == port_id) else {
            return not_found("ports", port_id);
        };
        p["device_id"] = json!(id);
        p["device_owner"] = json!("network:router_interface");
        p["status"] = json!("ACTIVE");
        touch(p);
        let p = p.clone();
        return interface_answer(&router, &p);
    }
    let Some(subnet_id) = r.body["subnet_id"].as_str() else {
        return bad("Either subnet_id or port_id must be specified".into());
    };
    let Some(subnet) = st
        .list("subnet")
        .iter()
        .find(|s| s["id"] == subnet_id)
        .cloned()
    else {
        return not_found("subnets", subnet_id);
    };
    let Some(gw) = subnet["gateway_ip"].as_str().map(str::to_string) else {
        return bad("Subnet for router interface must have a gateway IP".into());
    };
    let attached = st.workload.ports.iter().any(|p| {
        p["device_id"] == id
            && p["device_owner"] == "network:router_interface"
            && p["fixed_ips"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["subnet_id"] == subnet_id))
    });
    if attached {
        return bad(format!("Router already has a port on subnet {subnet_id}"));
    }
    let network = subnet["network_id"].as_str().unwrap_or("").to_string();
    let project = router["project_id"].as_str().unwrap_or("").to_string();
    let wanted = vec![json!({"subnet_id": subnet_id, "ip_address": gw})];
    let extra = json!({"device_owner": "network:router_interface", "device_id": id,
        "status": "ACTIVE", "binding:host_id": "fake-network-1", "binding:vif_type": "ovs"});
    let extra = extra.as_object().cloned().unwrap_or_default();
    // The gateway address is the subnet's, kept out of allocation: the interface takes it
    // unless a port was given it explicitly.
    let mut without_gateway = subnet.clone();
    without_gateway["gateway_ip"] = Value::Null;
    let gw_ip = ip(&gw).unwrap_or(Ipv4Addr::UNSPECIFIED);
    if used(&st.workload.ports, &without_gateway).contains(&gw_ip) {
        return neutron_fault(
            409,
            "IpAddressAlreadyAllocated",
            &format!("IP address {gw} already allocated in subnet {subnet_id}"),
        );
    }
    let id_port = new_id();
    let mut port = stamped(&id_port, &project);
    merge(
        &mut port,
        json!({"name": "", "network_id": network, "mac_address": mac(), "admin_state_up": true,
            "fixed_ips": wanted, "allowed_address_pairs": [], "extra_dhcp_opts": [],
            "security_groups": [], "binding:vnic_type": "normal", "binding:profile": {},
            "binding:vif_details": {}, "port_security_enabled": false, "qos_policy_id": null,
            "propagate_uplink_status": false, "dns_name": "", "dns_assignment": [],
            "dns_domain": "", "resource_request": null, "ip_allocation": "immediate"})
        .as_object()
        .unwrap_or(&Map::new()),
    );
    merge(&mut port, &extra);
    st.workload.ports.push(port.clone());
    interface_answer(&router, &port)
}

fn remove_interface(st: &mut Inner, r: &Req, id: &str) -> Answer {
    let Some(router) = find(st, "routers", id) else {
        return not_found("routers", id);
    };
    let is_interface =
        |p: &Value| p["device_id"] == id && p["device_owner"] == "network:router_interface";
    let port = match (r.body["port_id"].as_str(), r.body["subnet_id"].as_str()) {
        (Some(port_id), _) => match st
            .workload
            .ports
            .iter()
            .find(|p| p["id"] == port_id && is_interface(p))
        {
            Some(p) => p.clone(),
            None => {
                return neutron_fault(
                    404,
                    "RouterInterfaceNotFound",
                    &format!("Router {id} does not have an interface with id {port_id}"),
                );
            }
        },
        (None, Some(subnet_id)) => {
            let hit = st.workload.ports.iter().find(|p| {
                is_interface(p)
                    && p["fixed_ips"]
                        .as_array()
                        .is_some_and(|f| f.iter().any(|f| f["subnet_id"] == subnet_id))
            });
            match hit {
                Some(p) => p.clone(),
                None => {
                    return neutron_fault(
                        404,
                        "RouterInterfaceNotFoundForSubnet",
                        &format!("Router {id} has no interface on subnet {subnet_id}"),
                    );
                }
            }
        }
        (None, None) => {
            return neutron_fault(
                400,
                "BadRequest",
                "Bad router request: Either subnet_id or port_id must be specified",
            );
        }
    };
    let subnets: Vec<Value> = port["fixed_ips"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["subnet_id"].clone())
        .collect();
    let needed = st.workload.floating_ips.iter().any(|f| {
        f["router_id"] == id
            && st.workload.ports.iter().any(|p| {
                p["id"] == f["port_id"]
                    && p["fixed_ips"]
                        .as_array()
                        .is_some_and(|ips| ips.iter().any(|x| subnets.contains(&x["subnet_id"])))
            })
    });
    if needed {
        return neutron_fault(
            409,
            "RouterInterfaceInUseByFloatingIP",
            &format!(
                "Router interface for subnet {} on router {id} cannot be deleted, as it is \
                 required by one or more floating IPs.",
                subnets.first().and_then(Value::as_str).unwrap_or("")
            ),
        );
    }
    let port_id = port["id"].as_str().unwrap_or("").to_string();
    st.workload.ports.retain(|p| p["id"] != port_id);
    interface_answer(&router, &port)
}

fn delete_router(st: &mut Inner, id: &str) -> Answer {
    if find(st, "routers", id).is_none() {
        return not_found("routers", id);
    }
    let interfaces = st
        .workload
        .ports
        .iter()
        .any(|p| p["device_id"] == id && p["device_owner"] == "network:router_interface");
    if interfaces {
        return neutron_fault(409, "RouterInUse", &format!("Router {id} still has ports"));
    }
    st.workload
        .ports
        .retain(|p| !(p["device_id"] == id && p["device_owner"] == "network:router_gateway"));
    st.workload.routers.retain(|x| x["id"] != id);
    (204, Value::Null)
}

// -------------------------------------------------------------------------- security groups

fn egress(group: &str, project: &str, ethertype: &str) -> Value {
    let mut v = stamped(&new_id(), project);
    merge(
        &mut v,
        json!({"security_group_id": group, "direction": "egress", "ethertype": ethertype,
            "protocol": null, "port_range_min": null, "port_range_max": null,
            "remote_ip_prefix": null, "remote_group_id": null, "remote_address_group_id": null,
            "normalized_cidr": null, "belongs_to_default_sg": false})
        .as_object()
        .unwrap_or(&Map::new()),
    );
    v
}

fn create_security_group(st: &mut Inner, r: &Req) -> Answer {
    let body = match body_of(r, "security_group", SG_ATTRS) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if let Err(e) = quota(
        st,
        &r.project,
        "security_group",
        count_of(&st.workload.security_groups, &r.project),
    ) {
        return e;
    }
    let id = new_id();
    let mut v = stamped(&id, &r.project);
    v["name"] = json!("");
    v["stateful"] = json!(true);
    v["shared"] = json!(false);
    merge(&mut v, &body);
    st.workload.security_groups.push(v.clone());
    for ethertype in ["IPv4", "IPv6"] {
        let rule = egress(&id, &r.project, ethertype);
        st.workload.security_group_rules.push(rule);
    }
    (
        201,
        json!({"security_group": view(st, "security-groups", &v)}),
    )
}

fn delete_security_group(st: &mut Inner, id: &str) -> Answer {
    if find(st, "security-groups", id).is_none() {
        return not_found("security-groups", id);
    }
    let in_use = st.workload.ports.iter().any(|p| {
        p["security_groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == id))
    });
    if in_use {
        return neutron_fault(
            409,
            "SecurityGroupInUse",
            &format!("Security Group {id} in use."),
        );
    }
    st.workload
        .security_group_rules
        .retain(|x| x["security_group_id"] != id && x["remote_group_id"] != id);
    st.workload.security_groups.retain(|g| g["id"] != id);
    (204, Value::Null)
}

/// The fields two rules are compared on for Neutron's duplicate check.
const RULE_KEY: [&str; 8] = [
    "security_group_id",
    "direction",
    "ethertype",
    "protocol",
    "port_range_min",
    "port_range_max",
    "remote_ip_prefix",
    "remote_group_id",
];

fn create_rule(st: &mut Inner, r: &Req) -> Answer {
    let body = match body_of(r, "security_group_rule", RULE_ATTRS) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let field = |k: &str| body.get(k).cloned().unwrap_or(Value::Null);
    let group = field("security_group_id");
    let Some(group_id) = group.as_str() else {
        return bad_request(
            "Failed to parse request. Required attribute 'security_group_id' not specified",
        );
    };
    let Some(sg) = find(st, "security-groups", group_id) else {
        return not_found("security-groups", group_id);
    };
    let direction = field("direction");
    if direction != "ingress" && direction != "egress" {
        return bad_request(&format!(
            "Invalid input for direction. Reason: {direction} is not in valid_values."
        ));
    }
    let ethertype = match field("ethertype") {
        Value::Null => json!("IPv4"),
        e if e == "IPv4" || e == "IPv6" => e,
        e => {
            return bad_request(&format!(
                "Invalid input for ethertype. Reason: {e} is not in valid_values."
            ));
        }
    };
    let protocol = match field("protocol") {
        Value::String(p) if p.is_empty() || p == "any" => Value::Null,
        p => p,
    };
    let (min, max) = (field("port_range_min"), field("port_range_max"));
    if (!min.is_null() || !max.is_null()) && protocol.is_null() {
        return bad_request("Must also specify protocol if port range is given.");
    }
    if (protocol == "tcp" || protocol == "udp")
        && let (Some(a), Some(b)) = (min.as_u64(), max.as_u64())
        && a > b
    {
        return bad_request("For TCP/UDP protocols, port_range_min must be <= port_range_max");
    }
    let remote_group = field("remote_group_id");
    if !remote_group.is_null() && !field("remote_ip_prefix").is_null() {
        return bad_request("Only remote_ip_prefix or remote_group_id may be provided.");
    }
    if let Some(rg) = remote_group.as_str()
        && find(st, "security-groups", rg).is_none()
    {
        return not_found("security-groups", rg);
    }
    let project = sg["project_id"].as_str().unwrap_or("").to_string();
    if let Err(e) = quota(
        st,
        &project,
        "security_group_rule",
        count_of(&st.workload.security_group_rules, &project),
    ) {
        return e;
    }
    let mut rule = egress(group_id, &project, "IPv4");
    merge(&mut rule, &body);
    rule["ethertype"] = ethertype;
    rule["protocol"] = protocol;
    rule["normalized_cidr"] = rule["remote_ip_prefix"].clone();
    if let Some(dup) = st
        .workload
        .security_group_rules
        .iter()
        .find(|x| RULE_KEY.iter().all(|k| x[*k] == rule[*k]))
    {
        return neutron_fault(
            409,
            "SecurityGroupRuleExists",
            &format!(
                "Security group rule already exists. Rule id is {}.",
                dup["id"].as_str().unwrap_or("")
            ),
        );
    }
    st.workload.security_group_rules.push(rule.clone());
    (201, json!({"security_group_rule": public(&rule)}))
}

// ----------------------------------------------------------------------------- floating IPs

fn disassociate(f: &mut Value) {
    f["port_id"] = Value::Null;
    f["fixed_ip_address"] = Value::Null;
    f["router_id"] = Value::Null;
    f["port_details"] = Value::Null;
    f["status"] = json!("DOWN");
    if let Some(o) = f.as_object_mut() {
        o.remove("_then");
        o.remove("_reads");
    }
    touch(f);
}

/// Points floating IP `fip` at `port_id` (at `fixed` or the port's first address) through the
/// router joining that address's subnet to the floating IP's network; or Neutron's error.
fn associate(st: &mut Inner, fip: &str, port_id: &str, fixed: Option<&str>) -> Result<(), Answer> {
    let Some(f) = find(st, "floatingips", fip) else {
        return Err(not_found("floatingips", fip));
    };
    let Some(port) = find(st, "ports", port_id) else {
        return Err(not_found("ports", port_id));
    };
    let ips = port["fixed_ips"].as_array().cloned().unwrap_or_default();
    let chosen = match fixed {
        Some(a) => ips.iter().find(|x| x["ip_address"] == a).cloned(),
        None => ips.first().cloned(),
    };
    let Some(chosen) = chosen else {
        return Err(neutron_fault(
            400,
            "BadRequest",
            &format!(
                "Bad floatingip request: Port {port_id} does not have a fixed IP address \
                 {}.",
                fixed.unwrap_or("")
            ),
        ));
    };
    let external = f["floating_network_id"].clone();
    let subnet = chosen["subnet_id"].clone();
    let router = st
        .workload
        .routers
        .iter()
        .filter(|x| x["external_gateway_info"]["network_id"] == external)
        .find(|x| {
            st.workload.ports.iter().any(|p| {
                p["device_id"] == x["id"]
                    && p["device_owner"] == "network:router_interface"
                    && p["fixed_ips"]
                        .as_array()
                        .is_some_and(|ips| ips.iter().any(|i| i["subnet_id"] == subnet))
            })
        })
        .map(|x| x["id"].clone());
    let Some(router) = router else {
        return Err(neutron_fault(
            404,
            "ExternalGatewayForFloatingIPNotFound",
            &format!(
                "External network {} is not reachable from subnet {}.  Therefore, cannot \
                 associate Port {port_id} with a Floating IP.",
                external.as_str().unwrap_or(""),
                subnet.as_str().unwrap_or("")
            ),
        ));
    };
    let taken = st.workload.floating_ips.iter().find(|x| {
        x["id"] != fip
            && x["port_id"] == port_id
            && x["fixed_ip_address"] == chosen["ip_address"]
            && x["floating_network_id"] == external
    });
    if taken.is_some() {
        return Err(neutron_fault(
            409,
            "FloatingIPPortAlreadyAssociated",
            &format!(
                "Cannot associate floating IP {} ({}) with port {port_id} using fixed IP {}, \
                 as that fixed IP already has a floating IP on external network {}.",
                f["floating_ip_address"].as_str().unwrap_or(""),
                fip,
                chosen["ip_address"].as_str().unwrap_or(""),
                external.as_str().unwrap_or("")
            ),
        ));
    }
    let details = json!({"name": port["name"], "network_id": port["network_id"],
        "mac_address": port["mac_address"], "admin_state_up": port["admin_state_up"],
        "status": port["status"], "device_id": port["device_id"],
        "device_owner": port["device_owner"]});
    if let Some(x) = st.workload.floating_ips.iter_mut().find(|x| x["id"] == fip) {
        x["port_id"] = json!(port_id);
        x["fixed_ip_address"] = chosen["ip_address"].clone();
        x["router_id"] = router;
        x["port_details"] = details;
        x["status"] = json!("DOWN");
        // Up once the L3 agent has it: the next read.
        x["_then"] = json!({"status": "ACTIVE"});
        x["_reads"] = json!(0);
        touch(x);
    }
    Ok(())
}

fn create_floating_ip(st: &mut Inner, r: &Req) -> Answer {
    let (body, net) = match create_on_network(st, r, "floatingip", FIP_ATTRS, "floating_network_id")
    {
        Ok(v) => v,
        Err(e) => return e,
    };
    let network = net["id"].as_str().unwrap_or_default().to_string();
    if net["router:external"] != true {
        return neutron_fault(
            400,
            "BadRequest",
            &format!("Bad floatingip request: Network {network} is not a valid external network."),
        );
    }
    if let Err(e) = quota(
        st,
        &r.project,
        "floatingip",
        count_of(&st.workload.floating_ips, &r.project),
    ) {
        return e;
    }
    let id = new_id();
    let mut wanted: Option<Vec<Value>> = None;
    if let Some(a) = body.get("floating_ip_address").and_then(Value::as_str) {
        wanted = Some(vec![json!({"ip_address": a})]);
    } else if let Some(s) = body.get("subnet_id").and_then(Value::as_str) {
        wanted = Some(vec![json!({"subnet_id": s})]);
    }
    let extra = json!({"device_owner": "network:floatingip", "device_id": id, "status": "N/A"});
    let port = match new_port(
        st,
        "",
        &network,
        wanted.as_ref(),
        extra.as_object().unwrap_or(&Map::new()),
    ) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let address = port["fixed_ips"][0]["ip_address"].clone();
    let mut v = stamped(&id, &r.project);
    merge(
        &mut v,
        json!({"floating_network_id": network, "floating_ip_address": address,
            "router_id": null, "port_id": null, "fixed_ip_address": null, "status": "DOWN",
            "port_details": null, "qos_policy_id": null, "qos_network_policy_id": null,
            "port_forwardings": [], "dns_domain": "", "dns_name": ""})
        .as_object()
        .unwrap_or(&Map::new()),
    );
    if let Some(d) = body.get("description") {
        v["description"] = d.clone();
    }
    if let Some(t) = body.get("tags") {
        v["tags"] = t.clone();
    }
    st.workload.floating_ips.push(v);
    if let Some(p) = body.get("port_id").and_then(Value::as_str) {
        let fixed = body.get("fixed_ip_address").and_then(Value::as_str);
        if let Err(e) = associate(st, &id, p, fixed) {
            st.workload.floating_ips.retain(|x| x["id"] != id);
            st.workload.ports.retain(|x| x["device_id"] != id);
            return e;
        }
    }
    let v = find(st, "floatingips", &id).unwrap_or_default();
    (201, json!({"floatingip": public(&v)}))
}

fn update_floating_ip(st: &mut Inner, r: &Req, id: &str) -> Answer {
    let body = match body_of(
        r,
        "floatingip",
        "port_id fixed_ip_address description qos_policy_id",
    ) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if find(st, "floatingips", id).is_none() {
        return not_found("floatingips", id);
    }
    match body.get("port_id") {
        Some(Value::String(p)) => {
            let fixed = body.get("fixed_ip_address").and_then(Value::as_str);
            if let Err(e) = associate(st, id, p, fixed) {
                return e;
            }
        }
        // `null`, or an empty update (Neutron keeps an association only when the update names
        // other attributes: its fix of bug #1610045), disassociates.
        Some(Value::Null) | None if body.get("port_id").is_some() || body.is_empty() => {
            if let Some(f) = st.workload.floating_ips.iter_mut().find(|f| f["id"] == id) {
                disassociate(f);
            }
        }
        None => {}
        Some(_) => return bad_request("Invalid input for port_id."),
    }
    if let Some(f) = st.workload.floating_ips.iter_mut().find(|f| f["id"] == id) {
        for k in ["description", "qos_policy_id"] {
            if let Some(v) = body.get(k) {
                f[k] = v.clone();
            }
        }
    }
    let v = find(st, "floatingips", id).unwrap_or_default();
    (200, json!({"floatingip": public(&v)}))
}

fn delete_floating_ip(st: &mut Inner, id: &str) -> Answer {
    if find(st, "floatingips", id).is_none() {
        return not_found("floatingips", id);
    }
    st.workload.floating_ips.retain(|f| f["id"] != id);
    st.workload
        .ports
        .retain(|p| !(p["device_id"] == id && p["device_owner"] == "network:floatingip"));
    (204, Value::Null)
}

// ----------------------------------------------------------------------------------- trunks

fn create_trunk(st: &mut Inner, r: &Req) -> Answer {
    let body = match body_of(r, "trunk", TRUNK_ATTRS) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(port_id) = body.get("port_id").and_then(Value::as_str) else {
        return bad_request("Failed to parse request. Required attribute 'port_id' not specified");
    };
    if find(st, "ports", port_id).is_none() {
        return not_found("ports", port_id);
    }
    if st.workload.trunks.iter().any(|t| t["port_id"] == port_id) {
        return neutron_fault(
            409,
            "TrunkPortInUse",
            &format!("Port {port_id} is in use by another trunk."),
        );
    }
    let mut v = stamped(&new_id(), &r.project);
    v["name"] = json!("");
    v["status"] = json!("DOWN");
    v["admin_state_up"] = json!(true);
    v["sub_ports"] = json!([]);
    merge(&mut v, &body);
    st.workload.trunks.push(v.clone());
    (201, json!({"trunk": public(&v)}))
}

fn remove_subports(st: &mut Inner, r: &Req, id: &str) -> Answer {
    let gone: Vec<Value> = r.body["sub_ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["port_id"].clone())
        .collect();
    let Some(t) = st.workload.trunks.iter_mut().find(|t| t["id"] == id) else {
        return not_found("trunks", id);
    };
    if let Some(subs) = t["sub_ports"].as_array_mut() {
        subs.retain(|s| !gone.contains(&s["port_id"]));
    }
    touch(t);
    (200, public(t))
}
