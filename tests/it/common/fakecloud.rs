//! An in-process fake of the few Glance / Nova / Neutron read endpoints the service calls while
//! validating cluster templates and clusters, speaking the real OpenStack JSON wire format
//! (shapes and messages checked against the glance, nova, neutron and keystonemiddleware sources).
//!
//! * One HTTP server on `127.0.0.1:0`, laid out like devstack: `/image` (Glance, unversioned),
//!   `/compute/v2.1` (Nova, versioned), `/networking` (Neutron, unversioned).
//! * Version documents need no token, as in the real services (their paste pipelines answer them
//!   before `authtoken`). Anything else without `X-Auth-Token` gets 401 with `WWW-Authenticate`:
//!   keystonemiddleware's `{"error": {...}}` from Nova and Neutron, a webob error from Glance (it
//!   runs `authtoken` with `delay_auth_decision`). Any non-empty token is accepted.
//! * Glance serves its image schema (`/v2/schemas/image`), which glanceclient (Horizon's image
//!   lists) reads before any list.
//! * Glance errors are webob's, content-negotiated: `{"message", "code", "title"}` when `Accept`
//!   mentions `application/json` (openstack_sdk always sends it), an HTML page otherwise.
//! * Nova honours microversions (`OpenStack-API-Version: compute X.Y` or the legacy header;
//!   default 2.1, max [`NOVA_MAX_MICROVERSION`]): flavor `description` needs 2.55, `extra_specs`
//!   2.61, a zero `swap` reads `""` before 2.75, keypair `type` needs 2.2 and `?user_id=` 2.10;
//!   `GET /flavors/{id}/os-extra_specs` answers `{"extra_specs": {...}}` at any microversion.
//! * Keypair ownership: the fake cannot read users out of tokens. A keypair added with an owner is
//!   hidden only from requests whose user is known and different: `?user_id=` (2.10+, as a Nova
//!   admin would) or the user given to [`FakeCloud::set_token_user`] for the request's token.
//!   Keypairs without an owner (the seeded ones) are everybody's.
//! * Octavia (`/load-balancer`), Cinder (`/volume/v3/{project}`) and Nova servers, zones and
//!   server groups: see `fakecloud_workload`; Neutron's writes and its resources besides the
//!   network and subnet reads here (ports, routers, security groups, floating IPs, tags, trunks,
//!   quotas): see `fakecloud_neutron`. Together they answer everything Cluster API Provider
//!   OpenStack v0.14 asks while it builds and deletes a cluster's network, load balancer and
//!   machines (`tests/it/realstack_capo.rs` runs the real one against them).
//! * Floating IPs and router gateways take addresses from the `public` network's subnet,
//!   `127.100.0.0/16` (pool [`FLOATING_IP_POOL`]): loopback addresses a process on this machine
//!   can bind.
//! * What a create makes belongs to the project of the request's token: looked up in Keystone
//!   once per token when [`FakeCloud::set_identity`] names one (a token may read itself), else
//!   [`PROJECT_ID`] (or what [`FakeCloud::set_token_project`] says).
//! * Transitional states settle on reads, as a client polling the real service sees them: see the
//!   module docs of `fakecloud_workload` and `fakecloud_neutron` for each resource.
//! * Simplified: no policy (listings are those of an admin of [`PROJECT_ID`]: every project's
//!   resources, and any project may use any network); default sort orders only; Neutron ignores
//!   filters on unknown attributes (the real one answers 400); Glance treats any unknown query key
//!   as a property filter, as the real one does; IPv4 only.
#![allow(dead_code, clippy::result_large_err)] // handlers return ready-made error responses

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::serve::ListenerExt;
use serde_json::{Value, json};

#[path = "fakecloud_neutron.rs"]
mod neutron;
#[path = "fakecloud_workload.rs"]
pub mod workload;

/// Project owning every seeded resource.
pub const PROJECT_ID: &str = "6f3c1d2e4a5b4c7d8e9f0a1b2c3d4e5f";
/// `user_id` of keypairs without an owner when the requesting user is unknown.
pub const SEED_USER_ID: &str = "9b0b3a1c0d2e4f5a8b7c6d5e4f3a2b1c";
pub const NOVA_MAX_MICROVERSION: &str = "2.96";

pub const IMAGE_FLATCAR: &str = "11111111-0000-4000-8000-000000000001";
pub const IMAGE_UBUNTU_KUBE: &str = "11111111-0000-4000-8000-000000000002";
pub const IMAGE_NO_DISTRO: &str = "11111111-0000-4000-8000-000000000003";
pub const IMAGE_DUP_A: &str = "11111111-0000-4000-8000-000000000004";
pub const IMAGE_DUP_B: &str = "11111111-0000-4000-8000-000000000005";

pub const FLAVOR_TINY: &str = "1";
pub const FLAVOR_SMALL: &str = "2";
pub const FLAVOR_MEDIUM: &str = "3";
pub const FLAVOR_LARGE: &str = "4";
/// `ds-zero`: root disk 0 (boot from volume only).
pub const FLAVOR_DISK_ZERO: &str = "d0";

pub const KEYPAIR_DEFAULT: &str = "default";
pub const KEYPAIR_ALICE: &str = "alice-key";

pub const NETWORK_PUBLIC: &str = "22222222-0000-4000-8000-000000000001";
pub const NETWORK_PRIVATE: &str = "22222222-0000-4000-8000-000000000002";
pub const NETWORK_DUP_A: &str = "22222222-0000-4000-8000-000000000003";
pub const NETWORK_DUP_B: &str = "22222222-0000-4000-8000-000000000004";

pub const SUBNET_PUBLIC: &str = "33333333-0000-4000-8000-000000000001";
pub const SUBNET_PRIVATE: &str = "33333333-0000-4000-8000-000000000002";
pub const SUBNET_DUP_A: &str = "33333333-0000-4000-8000-000000000003";
pub const SUBNET_DUP_B: &str = "33333333-0000-4000-8000-000000000004";

/// The allocation pool of the `public` network's subnet (`127.100.0.0/16`, gateway
/// `127.100.0.1`): every floating IP and router gateway address comes from it, lowest free first.
pub const FLOATING_IP_POOL: (&str, &str) = ("127.100.0.2", "127.100.255.254");

/// Fields every added resource starts from (`PROJECT` is replaced by [`PROJECT_ID`]).
const DEFAULTS: &str = r#"{
"image": {"name": null, "disk_format": "qcow2", "container_format": "bare",
  "visibility": "public", "size": 1073741824, "virtual_size": 10737418240, "status": "active",
  "checksum": null, "protected": false, "min_ram": 0, "min_disk": 0, "owner": "PROJECT",
  "os_hidden": false, "os_hash_algo": "sha512", "os_hash_value": null, "id": null,
  "created_at": null, "updated_at": null, "tags": [], "self": null, "file": null,
  "schema": "/v2/schemas/image"},
"flavor": {"id": null, "name": null, "ram": 512, "disk": 1, "swap": 0,
  "OS-FLV-EXT-DATA:ephemeral": 0, "OS-FLV-DISABLED:disabled": false, "vcpus": 1,
  "os-flavor-access:is_public": true, "rxtx_factor": 1.0, "description": null, "extra_specs": {}},
"keypair": {"name": null, "public_key": null, "type": "ssh", "user_id": null,
  "fingerprint": "6b:1d:4e:9a:0c:55:7f:32:aa:10:8e:c4:21:09:de:7e", "id": null,
  "created_at": "2024-06-01T12:00:00.000000", "deleted": false, "deleted_at": null,
  "updated_at": null},
"network": {"id": null, "name": "", "tenant_id": "PROJECT", "admin_state_up": true, "mtu": 1442,
  "status": "ACTIVE", "subnets": [], "shared": false, "availability_zone_hints": [],
  "availability_zones": [], "ipv4_address_scope": null, "ipv6_address_scope": null,
  "router:external": false, "description": "", "port_security_enabled": true,
  "qos_policy_id": null, "l2_adjacency": true, "dns_domain": "", "tags": [], "created_at": null,
  "updated_at": null, "revision_number": 1, "project_id": "PROJECT",
  "provider:network_type": "geneve", "provider:physical_network": null,
  "provider:segmentation_id": null},
"subnet": {"id": null, "name": "", "tenant_id": "PROJECT", "network_id": null, "ip_version": 4,
  "subnetpool_id": null, "enable_dhcp": true, "ipv6_ra_mode": null, "ipv6_address_mode": null,
  "gateway_ip": null, "cidr": null, "allocation_pools": [], "host_routes": [],
  "dns_nameservers": [], "description": "", "service_types": [], "tags": [],
  "created_at": null, "updated_at": null, "revision_number": 0, "project_id": "PROJECT",
  "segment_id": null, "router:external": false, "dns_publish_fixed_ip": false}
}"#;

/// The default cloud; ids are the `pub const`s above.
const SEED: &str = r#"{
"image": [
  {"id": "11111111-0000-4000-8000-000000000001", "name": "flatcar-4152",
   "os_distro": "flatcar", "os_version": "4152.2.3", "created_at": "2024-06-01T12:00:00Z"},
  {"id": "11111111-0000-4000-8000-000000000002", "name": "ubuntu-2204-kube-v1.30.4",
   "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.30.4",
   "created_at": "2024-06-02T12:00:00Z"},
  {"id": "11111111-0000-4000-8000-000000000003", "name": "no-distro", "disk_format": "raw",
   "created_at": "2024-06-03T12:00:00Z"},
  {"id": "11111111-0000-4000-8000-000000000004", "name": "dup-image", "os_distro": "ubuntu",
   "created_at": "2024-06-04T12:00:00Z"},
  {"id": "11111111-0000-4000-8000-000000000005", "name": "dup-image", "os_distro": "ubuntu",
   "created_at": "2024-06-05T12:00:00Z"}],
"flavor": [
  {"id": "1", "name": "m1.tiny", "ram": 512, "disk": 1, "vcpus": 1},
  {"id": "2", "name": "m1.small", "ram": 2048, "disk": 20, "vcpus": 1},
  {"id": "3", "name": "m1.medium", "ram": 4096, "disk": 40, "vcpus": 2},
  {"id": "4", "name": "m1.large", "ram": 8192, "disk": 80, "vcpus": 4},
  {"id": "d0", "name": "ds-zero", "ram": 2048, "disk": 0, "vcpus": 2}],
"keypair": [{"name": "default"}, {"name": "alice-key"}],
"network": [
  {"id": "22222222-0000-4000-8000-000000000001", "name": "public", "router:external": true,
   "is_default": true, "mtu": 1500, "provider:network_type": "flat",
   "provider:physical_network": "public", "provider:segmentation_id": null},
  {"id": "22222222-0000-4000-8000-000000000002", "name": "private"},
  {"id": "22222222-0000-4000-8000-000000000003", "name": "dup-net"},
  {"id": "22222222-0000-4000-8000-000000000004", "name": "dup-net"}],
"subnet": [
  {"id": "33333333-0000-4000-8000-000000000001", "name": "public-subnet", "enable_dhcp": false,
   "network_id": "22222222-0000-4000-8000-000000000001", "cidr": "127.100.0.0/16",
   "gateway_ip": "127.100.0.1",
   "allocation_pools": [{"start": "127.100.0.2", "end": "127.100.255.254"}]},
  {"id": "33333333-0000-4000-8000-000000000002", "name": "private-subnet",
   "network_id": "22222222-0000-4000-8000-000000000002", "cidr": "10.0.0.0/24",
   "gateway_ip": "10.0.0.1", "allocation_pools": [{"start": "10.0.0.2", "end": "10.0.0.254"}]},
  {"id": "33333333-0000-4000-8000-000000000003", "name": "dup-subnet",
   "network_id": "22222222-0000-4000-8000-000000000003", "cidr": "10.1.0.0/24",
   "gateway_ip": "10.1.0.1", "allocation_pools": [{"start": "10.1.0.2", "end": "10.1.0.254"}]},
  {"id": "33333333-0000-4000-8000-000000000004", "name": "dup-subnet",
   "network_id": "22222222-0000-4000-8000-000000000004", "cidr": "10.2.0.0/24",
   "gateway_ip": "10.2.0.1", "allocation_pools": [{"start": "10.2.0.2", "end": "10.2.0.254"}]}]
}"#;

const NOVA_MIN: (u32, u32) = (2, 1);
const NOVA_MAX: (u32, u32) = (2, 96);
const UNAVAILABLE: &str = "The server is currently unavailable. Please try again at a later time.";
const NOT_FOUND: &str = "The resource could not be found.";
const KEYPAIR_FIELDS: &str = "name public_key fingerprint type";
const KEYPAIR_SHOW_FIELDS: &str = "user_id created_at deleted deleted_at id updated_at";
const GLANCE_NOT_FILTERS: &str = "limit marker sort sort_key sort_dir member_status tag";

/// One request as the fake received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// The `X-Auth-Token` header.
    pub token: Option<String>,
}

#[derive(Default)]
struct Inner {
    base: String,
    defaults: Value,
    /// Resources by kind ("image", "flavor", "keypair", "network", "subnet"), in insertion order.
    /// A keypair's owner is kept in its `_owner` field (never shown).
    items: HashMap<&'static str, Vec<Value>>,
    token_users: HashMap<String, String>,
    /// Project of each token seen in a create (or set by a test).
    token_projects: HashMap<String, String>,
    /// Nova's absolute limits a test set for a project, over Nova's default quotas.
    compute_limits: HashMap<String, Value>,
    /// Keystone (`…/v3`) to look a token's project up in.
    identity: Option<String>,
    seen: Vec<Seen>,
    workload: workload::Workload,
    down: bool,
    delay: Duration,
    counter: u64,
}

type Shared = Arc<Mutex<Inner>>;

pub struct FakeCloud {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    inner: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCloud {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeCloud {
    /// Binds `127.0.0.1:0` and serves the seeded cloud on a tokio task (aborted on drop).
    pub async fn start() -> FakeCloud {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await;
        let listener = listener.unwrap_or_else(|e| panic!("fakecloud: bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("fakecloud: {e}"));
        let base = format!("http://{addr}");
        let mut inner = Inner {
            base: base.clone(),
            defaults: parse(&DEFAULTS.replace("PROJECT", PROJECT_ID)),
            ..Inner::default()
        };
        let seed = parse(SEED);
        for kind in ["image", "flavor", "keypair", "network", "subnet"] {
            for v in seed[kind].as_array().into_iter().flatten() {
                inner.add(kind, v.clone());
            }
        }
        let inner = Arc::new(Mutex::new(inner));
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let task = tokio::spawn(async move {
            let listener = listener.tap_io(magnum_capi::listener::no_delay);
            let _ = axum::serve(listener, app).await;
        });
        FakeCloud { base, inner, task }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `(service type, name, URL)` of each fake service, for registering in a catalog. Cinder's
    /// URL carries Keystone's `$(project_id)s` template, as devstack registers it; Octavia's is
    /// unversioned (gophercloud discovers its version at the root).
    pub fn catalog(&self) -> [(&'static str, &'static str, String); 5] {
        [
            ("image", "glance", self.image_url()),
            ("compute", "nova", self.compute_url()),
            ("network", "neutron", self.network_url()),
            (
                "load-balancer",
                "octavia",
                format!("{}/load-balancer", self.base),
            ),
            (
                "block-storage",
                "cinder",
                format!("{}/volume/v3/$(project_id)s", self.base),
            ),
        ]
    }

    /// Reads or changes what Octavia, Cinder, Nova's servers and Neutron beyond networks and
    /// subnets hold (and the knobs: services down, refused flavors, quotas, page size).
    pub fn workload<T>(&self, f: impl FnOnce(&mut workload::Workload) -> T) -> T {
        f(&mut self.lock().workload)
    }

    /// Glance, unversioned (clients append `/v2`).
    pub fn image_url(&self) -> String {
        format!("{}/image", self.base)
    }
    /// Nova, versioned.
    pub fn compute_url(&self) -> String {
        format!("{}/compute/v2.1", self.base)
    }
    /// Neutron, unversioned (clients append `/v2.0`).
    pub fn network_url(&self) -> String {
        format!("{}/networking", self.base)
    }
    pub fn requests(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }
    pub fn clear_requests(&self) {
        self.lock().seen.clear();
    }
    /// While down, every request (version documents too) answers 503 in the service's format.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }
    /// Latency added to every answer.
    pub fn set_delay(&self, d: Duration) {
        self.lock().delay = d;
    }
    /// Which user a token belongs to, for keypair ownership.
    pub fn set_token_user(&self, token: &str, user_id: &str) {
        let mut st = self.lock();
        st.token_users.insert(token.into(), user_id.into());
    }
    /// Which project a token belongs to: what its creates belong to.
    pub fn set_token_project(&self, token: &str, project_id: &str) {
        let mut st = self.lock();
        st.token_projects.insert(token.into(), project_id.into());
    }
    /// Looks up the project of a token unknown to the fake in this Keystone (`http://…/v3`) at
    /// its first create, as keystonemiddleware would (the token validates itself).
    pub fn set_identity(&self, keystone_url: &str) {
        self.lock().identity = Some(keystone_url.trim_end_matches('/').to_string());
    }
    /// The networks, subnets, images, flavors or keypairs (`kind` singular) as stored.
    pub fn items(&self, kind: &str) -> Vec<Value> {
        self.lock().list(kind).to_vec()
    }
    /// Adds an image (replacing one with the same `id`; a missing `id` gets a random UUID) on
    /// top of realistic defaults; custom properties go at top level. Returns the id.
    /// Every resource the fake cloud holds (networks, subnets, ports, routers, security groups
    /// and their rules, floating IPs, trunks, Octavia's objects, servers, volumes) that `pick`
    /// picks: what a delete left behind.
    pub fn resources_where(&self, pick: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::new();
        for kind in ["network", "subnet"] {
            out.extend(self.items(kind).into_iter().filter(|v| pick(v)));
        }
        self.workload(|w| {
            for list in [
                &w.ports,
                &w.routers,
                &w.security_groups,
                &w.security_group_rules,
                &w.floating_ips,
                &w.trunks,
                &w.load_balancers,
                &w.listeners,
                &w.pools,
                &w.members,
                &w.health_monitors,
                &w.servers,
                &w.volumes,
            ] {
                out.extend(list.iter().filter(|v| pick(v)).cloned());
            }
        });
        out
    }

    /// Nova's absolute limits of `project` from now: `absolute`'s keys (e.g.
    /// `maxTotalInstances`, `totalInstancesUsed`) over Nova's default quotas; `{}` resets them.
    pub fn set_compute_limits(&self, project: &str, absolute: Value) {
        self.lock()
            .compute_limits
            .insert(project.to_string(), absolute);
    }

    pub fn add_image(&self, v: Value) -> String {
        self.lock().add("image", v)
    }
    /// Adds a flavor given in Nova's detail format (like [`FakeCloud::add_image`]).
    pub fn add_flavor(&self, v: Value) -> String {
        self.lock().add("flavor", v)
    }
    /// Adds a keypair (replacing one with the same `name`); returns the name.
    pub fn add_keypair(&self, owner_user_id: Option<&str>, mut v: Value) -> String {
        if let (Some(o), Some(obj)) = (owner_user_id, v.as_object_mut()) {
            obj.insert("_owner".into(), json!(o));
            obj.insert("user_id".into(), json!(o));
        }
        self.lock().add("keypair", v)
    }
    pub fn add_network(&self, v: Value) -> String {
        self.lock().add("network", v)
    }
    /// Adds a subnet and lists it in its network's `subnets`.
    pub fn add_subnet(&self, v: Value) -> String {
        self.lock().add("subnet", v)
    }
    /// Removes the image, flavor, network or subnet with this id, or the keypair with this name.
    pub fn remove(&self, id: &str) -> bool {
        let mut st = self.lock();
        let mut found = false;
        for (kind, list) in st.items.iter_mut() {
            let key = if *kind == "keypair" { "name" } else { "id" };
            let before = list.len();
            list.retain(|v| v[key] != id);
            found |= list.len() != before;
            let subnets = list.iter_mut().filter_map(|v| v.get_mut("subnets"));
            for subnets in subnets.filter_map(Value::as_array_mut) {
                subnets.retain(|s| s != id);
            }
        }
        found
    }
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("fakecloud: bad built-in JSON: {e}"))
}

impl Inner {
    fn list(&self, kind: &str) -> &[Value] {
        self.items.get(kind).map_or(&[], Vec::as_slice)
    }

    fn add(&mut self, kind: &'static str, v: Value) -> String {
        self.counter += 1;
        let n = self.counter;
        let key = if kind == "keypair" { "name" } else { "id" };
        let id = match v[key].as_str() {
            Some(id) => id.to_string(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let mut item = self.defaults[kind].clone();
        item[key] = json!(id);
        if item.get("created_at") == Some(&Value::Null) {
            let (h, m, s) = (n / 3600 % 24, n / 60 % 60, n % 60);
            item["created_at"] = json!(format!("2025-01-01T{h:02}:{m:02}:{s:02}Z"));
        }
        match kind {
            "image" => {
                let hex = id.replace('-', "");
                item["os_hash_value"] = json!(hex.repeat(4));
                item["checksum"] = json!(hex);
                item["self"] = json!(format!("/v2/images/{id}"));
                item["file"] = json!(format!("/v2/images/{id}/file"));
            }
            "keypair" => {
                item["id"] = json!(n);
                item["user_id"] = json!(SEED_USER_ID);
                let key = format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake{n:012} {id}");
                item["public_key"] = json!(key);
            }
            "network" => item["provider:segmentation_id"] = json!(n),
            "subnet" => {
                let nets = self.items.entry("network").or_default();
                if let Some(net) = nets.iter_mut().find(|x| x["id"] == v["network_id"]) {
                    item["router:external"] = net["router:external"].clone();
                    let subnets = net["subnets"].as_array_mut();
                    if let Some(s) = subnets.filter(|s| !s.contains(&json!(id))) {
                        s.push(json!(id));
                    }
                }
            }
            _ => {}
        }
        if let (Some(obj), Value::Object(over)) = (item.as_object_mut(), v) {
            obj.extend(over);
        }
        if item.get("updated_at") == Some(&Value::Null) && kind != "keypair" {
            item["updated_at"] = item["created_at"].clone();
        }
        let list = self.items.entry(kind).or_default();
        match list.iter_mut().find(|x| x[key] == item[key]) {
            Some(x) => *x = item,
            None => list.push(item),
        }
        id
    }
}

// ------------------------------------------------------------------------------ HTTP plumbing

#[derive(Clone, Copy, PartialEq)]
enum Svc {
    Glance,
    Nova,
    Neutron,
}

struct Req {
    method: Method,
    headers: HeaderMap,
    query: Vec<(String, String)>,
    token: Option<String>,
    accept_json: bool,
    /// The JSON body (`Null` when none or not JSON).
    body: Value,
    /// The project of the token, for creates (see [`FakeCloud::set_identity`]).
    project: String,
}

impl Req {
    /// Every value of a query parameter.
    fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let hits = self.query.iter().filter(move |(k, _)| k == key);
        hits.map(|(_, v)| v.as_str())
    }
    fn param<'a>(&'a self, key: &'a str) -> Option<&'a str> {
        self.all(key).next()
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn handle(State(shared): State<Shared>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 24)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let query = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri);
    let path = parts.uri.path();
    let mut r = Req {
        method: parts.method.clone(),
        headers: parts.headers,
        query: query.map(|q| q.0).unwrap_or_default(),
        token: None,
        accept_json: false,
        body,
        project: PROJECT_ID.to_string(),
    };
    r.token = r
        .header("x-auth-token")
        .filter(|t| !t.is_empty())
        .map(Into::into);
    r.accept_json = r
        .header("accept")
        .is_some_and(|a| a.contains("application/json"));
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(pct_decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    // Creates are owned by the caller's project; Nova's limits are the project's.
    if (r.method == Method::POST || segs.last() == Some(&"limits"))
        && let Some(token) = r.token.clone()
    {
        r.project = project_of(&shared, &token).await;
    }
    let (mut resp, delay) = {
        let mut st = shared.lock().unwrap_or_else(|e| e.into_inner());
        st.seen.push(Seen {
            method: parts.method.to_string(),
            path: path.to_string(),
            query: parts.uri.query().map(str::to_string),
            token: r.token.clone(),
        });
        let mut resp = None;
        if !st.down && r.token.is_some() {
            resp = workload::dispatch(&mut st, &r, &segs);
            if resp.is_none() {
                resp = neutron::dispatch(&mut st, &r, &segs).map(respond);
            }
        }
        (resp.unwrap_or_else(|| dispatch(&st, &r, &segs)), st.delay)
    };
    if let Ok(v) = HeaderValue::from_str(&format!("req-{}", uuid::Uuid::new_v4())) {
        resp.headers_mut().insert("x-openstack-request-id", v);
    }
    // Only a delay set: a zero sleep still waits for the timer's next tick (about 1 ms), which
    // every look-up of the services measured against this fake would pay.
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    resp
}

/// The project of `token`: known, or looked up in the identity service (a token may read
/// itself), or [`PROJECT_ID`].
async fn project_of(shared: &Shared, token: &str) -> String {
    let identity = {
        let st = shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = st.token_projects.get(token) {
            return p.clone();
        }
        st.identity.clone()
    };
    let Some(url) = identity else {
        return PROJECT_ID.to_string();
    };
    // One client for every look-up (building one loads the TLS roots: slow in a debug build); no
    // kept connections (the fake cloud's runtime outlives the tests').
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let http = HTTP.get_or_init(|| {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("the fake cloud's HTTP client")
    });
    let lookup = async {
        let resp = http
            .get(format!("{url}/auth/tokens"))
            .timeout(Duration::from_secs(30))
            .header("X-Auth-Token", token)
            .header("X-Subject-Token", token)
            .send()
            .await
            .ok()?;
        let v: Value = resp.error_for_status().ok()?.json().await.ok()?;
        v.pointer("/token/project/id")?.as_str().map(str::to_string)
    };
    match lookup.await {
        Some(p) => {
            let mut st = shared.lock().unwrap_or_else(|e| e.into_inner());
            st.token_projects.insert(token.to_string(), p.clone());
            p
        }
        None => PROJECT_ID.to_string(),
    }
}

fn dispatch(st: &Inner, r: &Req, segs: &[&str]) -> Response {
    if let ["load-balancer"] = segs
        && !st.down
    {
        return json_resp(200, &workload::octavia_versions(&st.base));
    }
    let (svc, rest) = match segs.split_first() {
        Some((&"image", rest)) => (Svc::Glance, rest),
        Some((&"compute", rest)) => (Svc::Nova, rest),
        Some((&"networking", rest)) => (Svc::Neutron, rest),
        _ => return text(404, "text/plain", "404 Not Found".into()),
    };
    if st.down {
        return error(svc, r, 503, "ServiceUnavailable", UNAVAILABLE);
    }
    let get = r.method == Method::GET || r.method == Method::HEAD;
    let base = st.base.as_str();
    // Version documents: served before authentication, as by the real services.
    match (svc, rest) {
        (Svc::Glance, []) if get => return json_resp(300, &glance_versions(base)),
        (Svc::Glance, ["versions"]) if get => return json_resp(200, &glance_versions(base)),
        (Svc::Nova, []) if get => return json_resp(200, &nova_versions(base)),
        (Svc::Nova, ["v2.1"]) if get => {
            let mut v = nova_version(base);
            if let Some(links) = v["links"].as_array_mut() {
                let doc = "http://docs.openstack.org/";
                links.push(json!({"rel": "describedby", "type": "text/html", "href": doc}));
            }
            return json_resp(200, &json!({ "version": v }));
        }
        (Svc::Neutron, []) if get => {
            let link = json!({"href": format!("{base}/networking/v2.0/"), "rel": "self"});
            let v = json!({"id": "v2.0", "status": "CURRENT", "links": [link]});
            return json_resp(200, &json!({ "versions": [v] }));
        }
        _ => {}
    }
    if r.token.is_none() {
        return unauthorized(svc, r, base);
    }
    if !get {
        let msg = format!("The method {} is not allowed for this resource.", r.method);
        return error(svc, r, 405, "HTTPMethodNotAllowed", &msg);
    }
    match svc {
        Svc::Glance => glance(st, r, rest),
        Svc::Nova => nova(st, r, rest),
        Svc::Neutron => neutron(st, r, rest),
    }
}

fn text(status: u16, content_type: &'static str, body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let ct = HeaderValue::from_static(content_type);
    resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    resp
}

fn json_resp(status: u16, v: &Value) -> Response {
    text(status, "application/json", python_json(v))
}

/// JSON as the services' Python writes it (`json.dumps`: `", "` and `": "` between items), so
/// that a client quoting a body quotes the real bytes.
fn python_json(v: &Value) -> String {
    use serde::Serialize as _;
    use std::io::{self, Write};
    struct Python;
    impl serde_json::ser::Formatter for Python {
        fn begin_array_value<W: ?Sized + Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> io::Result<()> {
            if first { Ok(()) } else { w.write_all(b", ") }
        }
        fn begin_object_key<W: ?Sized + Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> io::Result<()> {
            if first { Ok(()) } else { w.write_all(b", ") }
        }
        fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
            w.write_all(b": ")
        }
    }
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Python);
    match v.serialize(&mut ser) {
        Ok(()) => String::from_utf8(out).unwrap_or_else(|_| v.to_string()),
        Err(_) => v.to_string(),
    }
}

/// A `(status, body)` answer (`Null`: no body).
fn respond((status, body): workload::Answer) -> Response {
    match body {
        Value::Null => text(status, "application/json", String::new()),
        body => json_resp(status, &body),
    }
}

// ------------------------------------------------------------- helpers of the resource modules

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Now, as Neutron and Nova write times (`2026-11-01T10:00:00Z`).
fn now_z() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now, as Octavia writes times (`2026-11-01T10:00:00`).
fn now_noz() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// Now, as Cinder and Nova's usage fields write times (`2026-11-01T10:00:00.000000`).
fn now_micro() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

/// A stored item without the fake's own bookkeeping (keys starting with `_`).
fn public(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !k.starts_with('_'))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Puts `v` in a transitional state that `reads` more reads still show; the read after them
/// finds `then` merged in.
fn settle_later(v: &mut Value, then: Value, reads: u64) {
    v["_then"] = then;
    v["_reads"] = json!(reads);
}

/// A stored item as reads show it once its transitional state has settled (for tests looking
/// at [`FakeCloud::workload`]'s items, which reads have not necessarily settled yet).
pub fn settled(v: &Value) -> Value {
    let mut v = v.clone();
    v["_reads"] = json!(0);
    observe(&mut v)
}

/// `v` as one read of it sees it (counting the read towards settling its transitional state).
fn observe(v: &mut Value) -> Value {
    match v.get("_reads").and_then(Value::as_u64) {
        Some(n) if n > 0 => v["_reads"] = json!(n - 1),
        _ => {
            if let Some(o) = v.as_object_mut() {
                o.remove("_reads");
                if let Some(Value::Object(then)) = o.remove("_then") {
                    o.extend(then);
                }
            }
        }
    }
    public(v)
}

/// Indices of the `items` a list query selects, as Neutron and Octavia filter: every key (but
/// `skip`) must match, a repeated key meaning any of its values; `tags`, `tags-any`, `not-tags`
/// and `not-tags-any` take comma-separated tags; a key no item has is ignored.
fn select(items: &[Value], query: &[(String, String)], skip: &[&str]) -> Vec<usize> {
    let mut keys: Vec<&str> = Vec::new();
    for (k, _) in query {
        if !skip.contains(&k.as_str()) && !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    let has_tag = |v: &Value, t: &str| {
        v["tags"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == t))
    };
    (0..items.len())
        .filter(|i| {
            let v = &items[*i];
            keys.iter().all(|k| match *k {
                "tags" => wants(query, k).all(|w| w.split(',').all(|t| has_tag(v, t))),
                "tags-any" => wants(query, k).all(|w| w.split(',').any(|t| has_tag(v, t))),
                "not-tags" => !wants(query, k).all(|w| w.split(',').all(|t| has_tag(v, t))),
                "not-tags-any" => !wants(query, k).all(|w| w.split(',').any(|t| has_tag(v, t))),
                _ if !items.iter().any(|x| x.get(*k).is_some()) => true,
                _ => wants(query, k).any(|w| matches(v.get(*k), w)),
            })
        })
        .collect()
}

/// Every value of `key` in `query`.
fn wants<'a>(query: &'a [(String, String)], key: &'a str) -> impl Iterator<Item = &'a String> {
    query.iter().filter(move |(q, _)| q == key).map(|(_, v)| v)
}

/// Whether `pat` matches somewhere in `text`, as Nova's `name` filter (a regular expression)
/// does; the syntax understood: literals, `\` escapes, `.`, `*`, `+`, `?`, `^` and `$`.
fn regex_search(pat: &str, text: &str) -> bool {
    let chars: Vec<char> = pat.chars().collect();
    let anchored = chars.first() == Some(&'^');
    let mut i = usize::from(anchored);
    let mut tokens: Vec<(Option<char>, char)> = Vec::new();
    let mut to_end = false;
    while i < chars.len() {
        let atom = match chars[i] {
            '$' if i + 1 == chars.len() => {
                to_end = true;
                i += 1;
                continue;
            }
            '.' => None,
            '\\' if i + 1 < chars.len() => {
                i += 1;
                Some(chars[i])
            }
            c => Some(c),
        };
        i += 1;
        let quant = match chars.get(i) {
            Some(q @ ('*' | '+' | '?')) => {
                i += 1;
                *q
            }
            _ => '1',
        };
        tokens.push((atom, quant));
    }
    let text: Vec<char> = text.chars().collect();
    let starts = if anchored { 0..=0 } else { 0..=text.len() };
    starts
        .into_iter()
        .any(|s| regex_here(&tokens, &text[s..], to_end))
}

fn regex_here(tokens: &[(Option<char>, char)], text: &[char], to_end: bool) -> bool {
    let Some(((atom, quant), rest)) = tokens.split_first() else {
        return !to_end || text.is_empty();
    };
    let fits = |c: &char| atom.is_none_or(|a| a == *c);
    match quant {
        '?' => {
            (text.first().is_some_and(fits) && regex_here(rest, &text[1..], to_end))
                || regex_here(rest, text, to_end)
        }
        '*' | '+' => {
            let n = text.iter().take_while(|c| fits(c)).count();
            let least = usize::from(*quant == '+');
            (least..=n)
                .rev()
                .any(|k| regex_here(rest, &text[k..], to_end))
        }
        _ => text.first().is_some_and(fits) && regex_here(rest, &text[1..], to_end),
    }
}

/// An error in the service's own format; `kind` is the Neutron error type.
fn error(svc: Svc, r: &Req, status: u16, kind: &str, msg: &str) -> Response {
    let title = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason());
    let title = title.unwrap_or("Error");
    match svc {
        // webob.exc.HTTPException(explanation=msg), content-negotiated.
        Svc::Glance if r.accept_json => {
            let message = format!("{msg}<br /><br />\n\n\n");
            let code = format!("{status} {title}");
            json_resp(
                status,
                &json!({"message": message, "code": code, "title": title}),
            )
        }
        Svc::Glance => {
            let msg = msg.replace('&', "&amp;").replace('<', "&lt;");
            let html = format!(
                "<html>\n <head>\n  <title>{status} {title}</title>\n </head>\n <body>\n  \
                 <h1>{status} {title}</h1>\n  {msg}<br /><br />\n\n\n\n </body>\n</html>"
            );
            text(status, "text/html; charset=UTF-8", html)
        }
        // nova.api.openstack.wsgi.Fault
        Svc::Nova => {
            let name = match status {
                400 => "badRequest",
                403 => "forbidden",
                404 => "itemNotFound",
                405 => "badMethod",
                409 => "conflictingRequest",
                503 => "serviceUnavailable",
                _ => "computeFault",
            };
            json_resp(status, &json!({name: {"code": status, "message": msg}}))
        }
        Svc::Neutron => {
            let e = json!({"type": kind, "message": msg, "detail": ""});
            json_resp(status, &json!({ "NeutronError": e }))
        }
    }
}

fn glance_err(r: &Req, status: u16, msg: &str) -> Response {
    error(Svc::Glance, r, status, "", msg)
}

fn nova_err(r: &Req, status: u16, msg: &str) -> Response {
    error(Svc::Nova, r, status, "", msg)
}

fn unauthorized(svc: Svc, r: &Req, base: &str) -> Response {
    let mut resp = if svc == Svc::Glance {
        let msg = "This server could not verify that you are authorized to access the document \
                   you requested. Either you supplied the wrong credentials (e.g., bad password), \
                   or your browser does not understand how to supply the credentials required.";
        glance_err(r, 401, msg)
    } else {
        let msg = "The request you have made requires authentication.";
        let e = json!({"code": 401, "title": "Unauthorized", "message": msg});
        json_resp(401, &json!({ "error": e }))
    };
    if let Ok(v) = HeaderValue::from_str(&format!("Keystone uri=\"{base}/identity\"")) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
        if let (b'%', Some(h), Some(l)) = (b[i], hex(i + 1), hex(i + 2)) {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path?k=v&...`, form-encoded.
fn with_query<'a>(path: &str, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut url = reqwest::Url::parse("http://x/").unwrap_or_else(|e| panic!("{e}"));
    url.query_pairs_mut().extend_pairs(pairs);
    match url.query() {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_string(),
    }
}

/// Does a stored attribute match a query value (`in:a,b` allowed, booleans as true/false/1/0)?
fn matches(have: Option<&Value>, want: &str) -> bool {
    if let Some(list) = want.strip_prefix("in:") {
        return list.split(',').any(|w| matches(have, w));
    }
    match have {
        Some(Value::String(s)) => s == want,
        Some(Value::Bool(b)) => match want.to_ascii_lowercase().as_str() {
            "true" | "1" => *b,
            "false" | "0" => !*b,
            _ => false,
        },
        Some(Value::Number(n)) => n.to_string() == want,
        Some(Value::Array(a)) => a.iter().any(|x| x.as_str() == Some(want)),
        _ => false,
    }
}

type Page<'a> = Result<(Option<usize>, Vec<&'a Value>), Response>;

/// `limit` (None when absent) and the items after `marker`, or the service's 400/404 (`what`:
/// Neutron's resource name).
fn paginate<'a>(svc: Svc, r: &Req, mut items: Vec<&'a Value>, what: &str) -> Page<'a> {
    let limit = match r.param("limit").map(str::parse::<i64>) {
        None => None,
        Some(Ok(n)) if n >= 0 => usize::try_from(n).ok(),
        Some(Ok(_)) => {
            return Err(error(
                svc,
                r,
                400,
                "BadRequest",
                "limit param must be positive",
            ));
        }
        Some(Err(_)) => return Err(error(svc, r, 400, "BadRequest", "limit must be an integer")),
    };
    if let Some(m) = r.param("marker") {
        let Some(p) = items.iter().position(|v| v["id"] == m) else {
            return Err(match svc {
                Svc::Glance => glance_err(r, 400, &format!("No image found with ID {m}")),
                Svc::Nova => nova_err(r, 400, &format!("marker [{m}] not found")),
                Svc::Neutron => {
                    let msg = format!("{what} {m} could not be found.");
                    error(svc, r, 404, &format!("{what}NotFound"), &msg)
                }
            });
        };
        items.drain(..=p);
    }
    Ok((limit, items))
}

// ------------------------------------------------------------------------------------ Glance

fn glance_versions(base: &str) -> Value {
    let href = format!("{base}/image/v2/");
    let version = |m: u32| {
        let status = if m == 16 { "CURRENT" } else { "SUPPORTED" };
        let id = format!("v2.{m}");
        json!({"id": id, "status": status, "links": [{"rel": "self", "href": href}]})
    };
    json!({ "versions": (0..=16).rev().map(version).collect::<Vec<_>>() })
}

fn glance(st: &Inner, r: &Req, rest: &[&str]) -> Response {
    let images = st.list("image");
    match rest {
        ["v2", "images"] => glance_list(r, images),
        // glanceclient (Horizon's image lists) builds its model from the schema first.
        ["v2", "schemas", "image"] => json_resp(200, &glance_image_schema()),
        ["v2", "images", id] => match images.iter().find(|i| i["id"] == *id) {
            Some(img) => json_resp(200, img),
            None => glance_err(r, 404, &format!("No image found with ID {id}")),
        },
        _ => glance_err(r, 404, NOT_FOUND),
    }
}

/// `GET /v2/schemas/image` as Glance serves it (api-ref's `schemas-image-show-response.json`
/// with today's `os_hidden` and four visibilities; the descriptions left out). Properties
/// outside the base ones are strings, as `additionalProperties` says.
fn glance_image_schema() -> Value {
    const UUID: &str =
        "^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$";
    let s = |t: &str| json!({"type": t});
    let nullable = |t: &str| json!({"type": ["null", t]});
    let read_only = |mut v: Value| {
        v["readOnly"] = json!(true);
        v
    };
    let extra = |v: Value| {
        let mut v = v;
        v["is_base"] = json!(false);
        v
    };
    json!({
        "name": "image",
        "additionalProperties": {"type": "string"},
        "links": [{"href": "{self}", "rel": "self"}, {"href": "{file}", "rel": "enclosure"},
                  {"href": "{schema}", "rel": "describedby"}],
        "properties": {
            "architecture": extra(s("string")),
            "checksum": read_only(json!({"type": ["null", "string"], "maxLength": 32})),
            "container_format": {"type": ["null", "string"], "enum": [null, "ami", "ari",
                "aki", "bare", "ovf", "ova", "docker", "compressed"]},
            "created_at": read_only(s("string")),
            "direct_url": read_only(s("string")),
            "disk_format": {"type": ["null", "string"], "enum": [null, "ami", "ari", "aki",
                "vhd", "vhdx", "vmdk", "raw", "qcow2", "vdi", "iso", "ploop"]},
            "file": read_only(s("string")),
            "id": {"type": "string", "pattern": UUID},
            "instance_uuid": extra(s("string")),
            "kernel_id": extra(json!({"type": ["null", "string"], "pattern": UUID})),
            "locations": {"type": "array", "items": {"type": "object",
                "properties": {"metadata": {"type": "object"},
                               "url": {"type": "string", "maxLength": 255}},
                "required": ["url", "metadata"]}},
            "min_disk": s("integer"),
            "min_ram": s("integer"),
            "name": {"type": ["null", "string"], "maxLength": 255},
            "os_distro": extra(s("string")),
            "os_hash_algo": read_only(json!({"type": ["null", "string"], "maxLength": 64})),
            "os_hash_value": read_only(json!({"type": ["null", "string"], "maxLength": 128})),
            "os_hidden": s("boolean"),
            "os_version": extra(s("string")),
            "owner": {"type": ["null", "string"], "maxLength": 255},
            "protected": s("boolean"),
            "ramdisk_id": extra(json!({"type": ["null", "string"], "pattern": UUID})),
            "schema": read_only(s("string")),
            "self": read_only(s("string")),
            "size": read_only(nullable("integer")),
            "status": read_only(json!({"type": "string", "enum": ["queued", "saving", "active",
                "killed", "deleted", "uploading", "importing", "pending_delete",
                "deactivated"]})),
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 255}},
            "updated_at": read_only(s("string")),
            "virtual_size": read_only(nullable("integer")),
            "visibility": {"type": "string",
                "enum": ["community", "public", "private", "shared"]},
        }
    })
}

fn glance_list(r: &Req, images: &[Value]) -> Response {
    let mut sorted: Vec<&Value> = images.iter().collect();
    // Glance's default order: newest first.
    let key = |v: &Value| (v["created_at"].to_string(), v["id"].to_string());
    sorted.sort_by_key(|v| std::cmp::Reverse(key(v)));
    let (limit, sorted) = match paginate(Svc::Glance, r, sorted, "") {
        Ok((limit, items)) => (limit.unwrap_or(25).min(1000), items),
        Err(e) => return e,
    };
    let not_filters: Vec<&str> = GLANCE_NOT_FILTERS.split(' ').collect();
    let hidden = r.param("os_hidden").unwrap_or("false");
    let wanted = |i: &&Value| {
        let visible = match r.param("visibility") {
            None => i["visibility"] != "community",
            Some(v) => v == "all" || i["visibility"] == v,
        };
        let mut filters = r
            .query
            .iter()
            .filter(|(k, _)| !not_filters.contains(&k.as_str()));
        let filters_ok = filters.all(|(k, v)| k == "visibility" || matches(i.get(k), v));
        let tags_ok = r.all("tag").all(|t| matches(i.get("tags"), t));
        visible && filters_ok && tags_ok && matches(i.get("os_hidden"), hidden)
    };
    let page: Vec<&Value> = sorted.into_iter().filter(wanted).take(limit).collect();
    // `first` and `next` echo the query without the marker.
    let params = r.query.iter().filter(|(k, _)| k != "marker");
    let params: Vec<(&str, &str)> = params.map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let first = with_query("/v2/images", params.clone());
    let mut body = json!({"images": page, "first": first, "schema": "/v2/schemas/images"});
    if let Some(last) = page.last().filter(|_| page.len() == limit) {
        let last = [("marker", last["id"].as_str().unwrap_or(""))];
        body["next"] = json!(with_query("/v2/images", params.into_iter().chain(last)));
    }
    json_resp(200, &body)
}

// -------------------------------------------------------------------------------------- Nova

fn nova_version(base: &str) -> Value {
    let media = json!({"base": "application/json",
        "type": "application/vnd.openstack.compute+json;version=2.1"});
    json!({"id": "v2.1", "status": "CURRENT", "version": NOVA_MAX_MICROVERSION,
        "min_version": "2.1", "updated": "2013-07-23T11:33:21Z",
        "links": [{"rel": "self", "href": format!("{base}/compute/v2.1/")}],
        "media-types": [media]})
}

fn nova_versions(base: &str) -> Value {
    let v2 = json!({"id": "v2.0", "status": "SUPPORTED", "version": "", "min_version": "",
        "updated": "2011-01-21T11:33:21Z",
        "links": [{"rel": "self", "href": format!("{base}/compute/v2/")}]});
    json!({ "versions": [v2, nova_version(base)] })
}

/// The requested microversion (default 2.1), or Nova's 400/406 fault.
fn nova_microversion(r: &Req) -> Result<(u32, u32), Response> {
    let new = r.header("openstack-api-version").unwrap_or("");
    let new = new
        .split(',')
        .find_map(|v| v.trim().strip_prefix("compute "));
    let legacy = r.header("x-openstack-nova-api-version");
    let Some(raw) = new.or(legacy).map(str::trim) else {
        return Ok(NOVA_MIN);
    };
    if raw.eq_ignore_ascii_case("latest") {
        return Ok(NOVA_MAX);
    }
    let parsed = raw.split_once('.').map(|(a, b)| (a.parse(), b.parse()));
    let msg = match parsed {
        Some((Ok(a), Ok(b))) if (NOVA_MIN..=NOVA_MAX).contains(&(a, b)) => return Ok((a, b)),
        Some((Ok(_), Ok(_))) => format!(
            "Version {raw} is not supported by the API. \
             Minimum is 2.1 and maximum is {NOVA_MAX_MICROVERSION}."
        ),
        _ => {
            let fix = "Must be of format MajorNum.MinorNum.";
            let msg = format!("API Version String {raw} is of invalid format. {fix}");
            return Err(nova_err(r, 400, &msg));
        }
    };
    Err(nova_err(r, 406, &msg))
}

fn nova(st: &Inner, r: &Req, rest: &[&str]) -> Response {
    let mv = match nova_microversion(r) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let flavors = st.list("flavor");
    let mut resp = match rest {
        ["v2.1", "flavors"] => flavor_list(st, r, mv, false),
        ["v2.1", "flavors", "detail"] => flavor_list(st, r, mv, true),
        ["v2.1", "flavors", id] => match flavors.iter().find(|f| f["id"] == *id) {
            Some(f) => json_resp(200, &json!({"flavor": flavor_view(&st.base, f, mv, true)})),
            None => nova_err(r, 404, &format!("Flavor {id} could not be found.")),
        },
        // Nova's `{"extra_specs": {key: value}}` at any microversion (policy-gated for
        // non-admins in real clouds; the fake answers as an admin).
        ["v2.1", "flavors", id, "os-extra_specs"] => {
            match flavors.iter().find(|f| f["id"] == *id) {
                Some(f) => {
                    let specs = f.get("extra_specs").cloned().unwrap_or_else(|| json!({}));
                    json_resp(200, &json!({ "extra_specs": specs }))
                }
                None => nova_err(r, 404, &format!("Flavor {id} could not be found.")),
            }
        }
        ["v2.1", "limits"] => compute_limits(st, r, mv),
        ["v2.1", "os-keypairs"] => keypairs(st, r, mv, None),
        ["v2.1", "os-keypairs", name] => keypairs(st, r, mv, Some(name)),
        _ => nova_err(r, 404, NOT_FOUND),
    };
    nova_headers(&mut resp, mv);
    resp
}

/// `GET /limits` as Nova answers it at `mv`: the project's absolute limits (Nova's default
/// quotas, nothing used, unless a test set others) and no rate limits. The network quotas
/// (proxied to Neutron) are gone from 2.36, the personality ones from 2.57.
fn compute_limits(st: &Inner, r: &Req, mv: (u32, u32)) -> Response {
    let mut absolute = json!({
        "maxImageMeta": 128, "maxServerMeta": 128, "maxTotalKeypairs": 100,
        "maxServerGroups": 10, "maxServerGroupMembers": 10, "totalServerGroupsUsed": 0,
        "maxTotalInstances": 10, "totalInstancesUsed": 0,
        "maxTotalCores": 20, "totalCoresUsed": 0,
        "maxTotalRAMSize": 51200, "totalRAMUsed": 0,
    });
    if mv < (2, 36) {
        for (k, v) in [
            ("maxSecurityGroups", 10),
            ("maxSecurityGroupRules", 20),
            ("maxTotalFloatingIps", 10),
            ("totalSecurityGroupsUsed", 0),
            ("totalFloatingIpsUsed", 0),
        ] {
            absolute[k] = json!(v);
        }
    }
    if mv < (2, 57) {
        absolute["maxPersonality"] = json!(5);
        absolute["maxPersonalitySize"] = json!(10240);
    }
    if let (Some(set), Some(a)) = (
        st.compute_limits.get(&r.project).and_then(Value::as_object),
        absolute.as_object_mut(),
    ) {
        a.extend(set.clone());
    }
    json_resp(200, &json!({"limits": {"rate": [], "absolute": absolute}}))
}

/// Nova's microversion headers on an answer given at `mv`.
fn nova_headers(resp: &mut Response, mv: (u32, u32)) {
    let ver = format!("{}.{}", mv.0, mv.1);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("compute {ver}")) {
        h.insert("openstack-api-version", v);
    }
    if let Ok(v) = HeaderValue::from_str(&ver) {
        h.insert("x-openstack-nova-api-version", v);
    }
    let vary = "OpenStack-API-Version, X-OpenStack-Nova-API-Version";
    h.insert(header::VARY, HeaderValue::from_static(vary));
}

fn flavor_view(base: &str, f: &Value, mv: (u32, u32), detail: bool) -> Value {
    let id = f["id"].as_str().unwrap_or("");
    let links = json!([{"rel": "self", "href": format!("{base}/compute/v2.1/flavors/{id}")},
        {"rel": "bookmark", "href": format!("{base}/compute/flavors/{id}")}]);
    let mut v = match detail {
        true => f.clone(),
        false => {
            json!({"id": id, "name": f["name"], "links": null, "description": f["description"]})
        }
    };
    v["links"] = links;
    if detail && mv < (2, 75) && v["swap"] == 0 {
        v["swap"] = json!("");
    }
    if let Some(o) = v.as_object_mut() {
        if mv < (2, 55) {
            o.remove("description");
        }
        if mv < (2, 61) {
            o.remove("extra_specs");
        }
    }
    v
}

fn flavor_list(st: &Inner, r: &Req, mv: (u32, u32), detail: bool) -> Response {
    let mut flavors: Vec<&Value> = st.list("flavor").iter().collect();
    flavors.sort_by_key(|f| f["id"].as_str().unwrap_or(""));
    let (limit, flavors) = match paginate(Svc::Nova, r, flavors, "") {
        Ok((limit, items)) => (limit.unwrap_or(1000).min(1000), items),
        Err(e) => return e,
    };
    // As for an admin: public only unless `is_public=false` (private only) or `none` (all).
    let public = match r.param("is_public").map(str::to_ascii_lowercase).as_deref() {
        Some("none") => None,
        Some("false" | "f" | "no" | "n" | "off" | "0") => Some(false),
        _ => Some(true),
    };
    let min = |param: &str| r.param(param).and_then(|v| v.parse().ok()).unwrap_or(0);
    let (min_ram, min_disk) = (min("minRam"), min("minDisk"));
    let wanted = |f: &&Value| {
        public.is_none_or(|p| f["os-flavor-access:is_public"] == p)
            && f["ram"].as_i64() >= Some(min_ram)
            && f["disk"].as_i64() >= Some(min_disk)
            && r.param("name").is_none_or(|n| f["name"] == n)
    };
    let list = flavors.into_iter().filter(wanted).take(limit);
    let list: Vec<Value> = list.map(|f| flavor_view(&st.base, f, mv, detail)).collect();
    json_resp(200, &json!({ "flavors": list }))
}

fn keypairs(st: &Inner, r: &Req, mv: (u32, u32), name: Option<&str>) -> Response {
    let by_param = r.param("user_id").filter(|_| mv >= (2, 10));
    let by_token = r.token.as_ref().and_then(|t| st.token_users.get(t));
    let user = by_param.or(by_token.map(String::as_str));
    let mut visible = st.list("keypair").iter().filter(|k| {
        let owner = k["_owner"].as_str();
        owner.is_none() || user.is_none() || owner == user
    });
    let view = |k: &Value, fields: &str| -> Value {
        let mut out = serde_json::Map::new();
        for f in fields.split(' ').filter(|f| *f != "type" || mv >= (2, 2)) {
            let v = match (f, user) {
                ("user_id", Some(user)) => json!(user),
                _ => k[f].clone(),
            };
            out.insert(f.to_string(), v);
        }
        Value::Object(out)
    };
    let Some(name) = name else {
        let list = visible.map(|k| json!({"keypair": view(k, KEYPAIR_FIELDS)}));
        return json_resp(200, &json!({ "keypairs": list.collect::<Vec<_>>() }));
    };
    match visible.find(|k| k["name"] == name) {
        Some(k) => {
            let fields = format!("{KEYPAIR_FIELDS} {KEYPAIR_SHOW_FIELDS}");
            json_resp(200, &json!({"keypair": view(k, &fields)}))
        }
        None => {
            let user = user.unwrap_or(SEED_USER_ID);
            nova_err(r, 404, &format!("Keypair {name} not found for user {user}"))
        }
    }
}

// ----------------------------------------------------------------------------------- Neutron

fn neutron(st: &Inner, r: &Req, rest: &[&str]) -> Response {
    let (kind, title) = match rest.get(1) {
        Some(&"networks") => ("network", "Network"),
        Some(&"subnets") => ("subnet", "Subnet"),
        _ => return error(Svc::Neutron, r, 404, "HTTPNotFound", NOT_FOUND),
    };
    let items = st.list(kind);
    // `fields` (repeatable) restricts the attributes shown.
    let fields: Vec<&str> = r.all("fields").collect();
    let project = |v: &Value| -> Value {
        match v.as_object() {
            Some(o) if !fields.is_empty() => {
                let kept = o.iter().filter(|(k, _)| fields.contains(&k.as_str()));
                Value::Object(kept.map(|(k, v)| (k.clone(), v.clone())).collect())
            }
            _ => v.clone(),
        }
    };
    match rest {
        ["v2.0", _, id] => match items.iter().find(|v| v["id"] == *id) {
            Some(v) => json_resp(200, &json!({ kind: project(v) })),
            None => {
                let msg = format!("{title} {id} could not be found.");
                error(Svc::Neutron, r, 404, &format!("{title}NotFound"), &msg)
            }
        },
        ["v2.0", _] => {
            let (limit, rest) = match paginate(Svc::Neutron, r, items.iter().collect(), title) {
                Ok((limit, items)) => (limit.filter(|n| *n > 0), items),
                Err(e) => return e,
            };
            // Filters on the resource's attributes; a repeated key means "any of".
            let is_attr = |k: &str| items.iter().any(|v| v.get(k).is_some());
            let ok = |v: &Value, k: &str| !is_attr(k) || r.all(k).any(|w| matches(v.get(k), w));
            let wanted = |v: &&Value| r.query.iter().all(|(k, _)| ok(v, k));
            let hits: Vec<&Value> = rest.into_iter().filter(wanted).collect();
            let page = &hits[..limit.unwrap_or(usize::MAX).min(hits.len())];
            let list: Vec<Value> = page.iter().map(|v| project(v)).collect();
            let mut body = json!({ format!("{kind}s"): list });
            if let (Some(l), Some(last)) = (limit, page.last().filter(|_| hits.len() > page.len()))
            {
                let (l, marker) = (l.to_string(), last["id"].as_str().unwrap_or(""));
                let path = format!("{}/networking/v2.0/{kind}s", st.base);
                let href = with_query(&path, [("limit", l.as_str()), ("marker", marker)]);
                body[format!("{kind}s_links")] = json!([{"rel": "next", "href": href}]);
            }
            json_resp(200, &body)
        }
        _ => error(Svc::Neutron, r, 404, "HTTPNotFound", NOT_FOUND),
    }
}
