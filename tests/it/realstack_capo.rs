//! The real Cluster API Provider OpenStack (v0.14.7, the real-stack tier's `capo-manager`, with
//! the real CAPI core controllers) against the fake cloud (`common/fakecloud*.rs`) and the real
//! Keystone, no magnum-capi process involved: CAPO authenticates with an application credential
//! of a seeded user from a `clouds.yaml` Secret, builds the network, router, security groups, API
//! load balancer and floating IP of an OpenStackCluster as magnum-capi renders it, boots an
//! OpenStackMachine's server from a root volume behind that load balancer, and removes all of it
//! again; and a flavor Nova refuses ends in Nova's own error on the machine's server.

use std::time::Instant;

use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::{Value, json};

use crate::common::fakecloud::{FakeCloud, IMAGE_UBUNTU_KUBE, NETWORK_PUBLIC, settled};
use crate::common::keystone::Keystone;
use crate::common::realstack::{REAL_DEADLINE, RealStack, server_side_apply, stack};
use crate::common::stack::{env_shared, parts};
use crate::common::wait::until_within;
use crate::render::{MGMT_EGRESS, build_values, render_config, renderer, rows, with_labels};

const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const INFRA_ALPHA: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
const MANAGER: &str = "magnum-capi";

/// One test's tenant on the real stack: alice of `alpha` with an application credential in a
/// `clouds.yaml` Secret of namespace `ns`.
struct Tenant {
    s: &'static RealStack,
    ks: &'static Keystone,
    cloud: &'static FakeCloud,
    admin: kube::Client,
    ns: String,
    /// The project CAPO works in (alpha's id).
    project: String,
    /// The Secret holding the `clouds.yaml`.
    secret: String,
    credential: String,
}

impl Tenant {
    async fn new(ns: &str) -> Tenant {
        let s = stack().await;
        let (ks, cloud) = parts().await;
        cloud.set_identity(&ks.url);
        s.namespace(ns).await;
        let admin = s.admin().await;
        let token = ks.token("alice", "alpha").await;
        let body = json!({"application_credential": {
            "name": format!("capo-{ns}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
            "description": "CAPO on the fake cloud (tests/it/realstack_capo.rs)"}});
        let path = format!("/users/{}/application_credentials", ks.user_id("alice"));
        let (status, created) = ks
            .request("POST", &path, Some(&token), None, Some(body))
            .await
            .expect("creating the application credential");
        assert_eq!(status, 201, "{created}");
        let id = created["application_credential"]["id"].as_str().unwrap();
        let secret = created["application_credential"]["secret"]
            .as_str()
            .unwrap();
        let clouds = format!(
            "clouds:\n  openstack:\n    auth:\n      auth_url: {}\n      \
             application_credential_id: {id}\n      application_credential_secret: {secret}\n    \
             auth_type: v3applicationcredential\n    region_name: RegionOne\n    \
             interface: public\n    identity_api_version: 3\n",
            ks.url
        );
        use base64::Engine as _;
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
        let name = format!("{ns}-cloud-credentials");
        let obj = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns},
            "data": {"clouds.yaml": b64(&clouds)}});
        server_side_apply(&admin, &obj, MANAGER, false)
            .await
            .expect("the clouds.yaml Secret");
        Tenant {
            s,
            ks,
            cloud,
            admin,
            ns: ns.to_string(),
            project: ks.project_id("alpha").to_string(),
            secret: name,
            credential: id.to_string(),
        }
    }

    fn api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        let ar = magnum_capi::capi::apply::resource(api_version, kind);
        Api::namespaced_with(self.admin.clone(), &self.ns, &ar)
    }

    async fn apply(&self, obj: &Value) {
        server_side_apply(&self.admin, obj, MANAGER, false)
            .await
            .unwrap_or_else(|e| {
                panic!("applying {} {}: {e}", obj["kind"], obj["metadata"]["name"])
            });
    }

    async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        match self.api(api_version, kind).get_opt(name).await {
            Ok(o) => o.map(|o| serde_json::to_value(o).expect("json")),
            Err(e) => panic!("reading {kind} {name}: {e}"),
        }
    }

    async fn delete(&self, api_version: &str, kind: &str, name: &str) {
        match self
            .api(api_version, kind)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting {kind} {name}: {e}"),
        }
    }

    /// Waits until every named object is gone (their finalizers removed).
    async fn wait_gone(&self, objects: &[(&str, &str, &str)]) {
        for (api_version, kind, name) in objects {
            until_within(
                REAL_DEADLINE,
                &format!("{kind} {name} to be gone"),
                || async {
                    self.get(api_version, kind, name)
                        .await
                        .is_none()
                        .then_some(())
                },
            )
            .await;
        }
    }

    /// A minimal v1beta2 Cluster whose infrastructure is OpenStackCluster `name` (no control
    /// plane: the test brings its own Machine).
    fn cluster(&self, name: &str) -> Value {
        json!({"apiVersion": CAPI, "kind": "Cluster",
            "metadata": {"name": name, "namespace": self.ns,
                "labels": {CLUSTER_NAME_LABEL: name}},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "OpenStackCluster", "name": name}}})
    }

    /// An OpenStackMachine `name` of cluster `cluster` with `spec`, owned by a Machine (a control
    /// plane one with `control_plane`) whose bootstrap data is a ready Secret.
    async fn machine(&self, cluster: &str, name: &str, mut spec: Value, control_plane: bool) {
        spec["identityRef"] = json!({"name": self.secret, "cloudName": "openstack"});
        use base64::Engine as _;
        let data = base64::engine::general_purpose::STANDARD.encode("#cloud-config\n{}\n");
        let bootstrap = format!("{name}-bootstrap");
        self.apply(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": bootstrap, "namespace": self.ns,
                "labels": {CLUSTER_NAME_LABEL: cluster}},
            "type": "cluster.x-k8s.io/secret", "data": {"value": data}}))
            .await;
        self.apply(&json!({"apiVersion": INFRA, "kind": "OpenStackMachine",
            "metadata": {"name": name, "namespace": self.ns,
                "labels": {CLUSTER_NAME_LABEL: cluster}},
            "spec": spec}))
            .await;
        let mut labels = json!({ CLUSTER_NAME_LABEL: cluster });
        if control_plane {
            labels[CONTROL_PLANE_LABEL] = json!("");
        }
        self.apply(&json!({"apiVersion": CAPI, "kind": "Machine",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {"clusterName": cluster, "bootstrap": {"dataSecretName": bootstrap},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "OpenStackMachine", "name": name}}}))
            .await;
    }

    /// Waits for CAPO to mark OpenStackCluster `name` ready; its last state.
    async fn ready_cluster(&self, name: &str) -> Value {
        until_within(
            REAL_DEADLINE,
            &format!("CAPO to make OpenStackCluster {name} ready"),
            || async {
                let osc = self.get(INFRA, "OpenStackCluster", name).await?;
                let fatal = &osc["status"]["failureMessage"];
                assert!(fatal.is_null(), "OpenStackCluster {name} failed: {fatal}");
                (osc["status"]["ready"] == true).then_some(osc)
            },
        )
        .await
    }

    /// Deletes Cluster `name` and waits for CAPI and CAPO to remove it with what it owns.
    async fn delete_cluster(&self, name: &str, machines: &[&str]) {
        self.delete(CAPI, "Cluster", name).await;
        let mut gone: Vec<(&str, &str, &str)> = Vec::new();
        for m in machines {
            gone.push((CAPI, "Machine", m));
            gone.push((INFRA, "OpenStackMachine", m));
            gone.push((INFRA_ALPHA, "OpenStackServer", m));
        }
        gone.push((INFRA, "OpenStackCluster", name));
        gone.push((CAPI, "Cluster", name));
        self.wait_gone(&gone).await;
    }

    /// Deletes the application credential (the test's last step).
    async fn close(&self) {
        let token = self.ks.token("alice", "alpha").await;
        let path = format!(
            "/users/{}/application_credentials/{}",
            self.ks.user_id("alice"),
            self.credential
        );
        let (status, body) = self
            .ks
            .request("DELETE", &path, Some(&token), None, None)
            .await
            .expect("deleting the application credential");
        assert_eq!(status, 204, "{body}");
    }
}

/// On a failing test, the end of CAPO's and CAPI's logs.
struct LogsOnFailure(&'static RealStack);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for part in ["capo", "capi-core"] {
                eprintln!("--- {part} ---\n{}", self.0.log_tail(part, 60));
            }
        }
    }
}

/// The OpenStackCluster, Cluster and control-plane machine spec magnum-capi renders for a
/// one-master cluster with an API load balancer (allowed CIDRs) with a floating IP, a 12 GiB root
/// volume and a 2 GiB etcd volume, on this fake cloud's image, flavors, keypair and `public`.
fn rendered() -> (Value, Value) {
    let (mut t, mut c) = with_labels(json!({
        "boot_volume_size": "12",
        "etcd_volume_size": "2",
        "api_master_lb_allowed_cidrs": "10.0.0.0/8,192.168.0.0/16",
    }));
    t["master_lb_enabled"] = json!(true);
    t["keypair_id"] = json!("default");
    c["master_count"] = json!(1);
    let mut r = rows(t, c, None);
    r.template.resolved.image_id = Some(IMAGE_UBUNTU_KUBE.into());
    r.template.resolved.external_network_id = Some(NETWORK_PUBLIC.into());
    r.cluster.resolved = r.template.resolved.clone();
    let values = build_values(&r, &render_config()).unwrap();
    let objects = renderer().render(&values).unwrap();
    let osc = objects
        .iter()
        .find(|o| o["kind"] == "OpenStackCluster")
        .cloned()
        .expect("an OpenStackCluster");
    let cp = objects
        .iter()
        .filter(|o| o["kind"] == "OpenStackMachineTemplate")
        .find(|o| o["metadata"]["labels"]["magnum.openstack.org/role"] == "master")
        .map(|o| o["spec"]["template"]["spec"].clone())
        .expect("the control plane's OpenStackMachineTemplate");
    (osc, cp)
}

fn str_of<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no {pointer} in {v}"))
}

fn named<'a>(items: &'a [Value], name: &str) -> Vec<&'a Value> {
    items.iter().filter(|v| v["name"] == name).collect()
}

/// CAPO builds the cluster's infrastructure from magnum-capi's OpenStackCluster (network, subnet,
/// router to `public`, an Octavia load balancer with listener, pool and health monitor, a
/// loopback floating IP on its VIP; no managed security groups, the API being restricted), boots
/// a control-plane machine from a root volume with an etcd volume behind the load balancer, in
/// the driver's security group (its API port closed to all but the allowed CIDRs), and on the
/// Cluster's deletion removes every one of them and its finalizers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capo_builds_a_cluster_and_a_machine_on_the_fake_cloud_and_removes_them() {
    let _env = env_shared().await;
    let t0 = Instant::now();
    let t = Tenant::new("capo-life").await;
    let _logs = LogsOnFailure(t.s);
    let (mut osc, cp_spec) = rendered();
    let name = str_of(&osc, "/metadata/name").to_string();
    osc["metadata"]["namespace"] = json!(t.ns);
    osc["spec"]["identityRef"]["name"] = json!(t.secret);
    t.apply(&osc).await;
    t.apply(&t.cluster(&name)).await;

    let osc = t.ready_cluster(&name).await;
    eprintln!("OpenStackCluster ready after {:.1?}", t0.elapsed());
    let st = &osc["status"];
    let crn = format!("{}-{name}", t.ns);
    let fip = str_of(st, "/apiServerLoadBalancer/ip").to_string();
    assert!(fip.starts_with("127.100."), "{st}");
    assert_eq!(osc["spec"]["controlPlaneEndpoint"]["host"], json!(fip));
    assert_eq!(osc["spec"]["controlPlaneEndpoint"]["port"], 6443);
    assert_eq!(st["externalNetwork"]["id"], NETWORK_PUBLIC);
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned();
    assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("True")));

    // What the fake cloud holds now, all of alice's project.
    let net_name = format!("k8s-clusterapi-cluster-{crn}");
    let networks = t.cloud.items("network");
    let net = named(&networks, &net_name);
    assert_eq!(net.len(), 1, "{net_name}");
    let net = net[0].clone();
    assert_eq!(net["project_id"], json!(t.project));
    assert_eq!(st["network"]["id"], net["id"]);
    let subnets = t.cloud.items("subnet");
    let subnet = subnets
        .iter()
        .find(|s| s["network_id"] == net["id"])
        .cloned()
        .expect("the cluster's subnet");
    assert_eq!(subnet["cidr"], "10.0.0.0/24");
    assert_eq!(subnet["dns_nameservers"], json!(["8.8.8.8", "1.1.1.1"]));
    assert_eq!(st["network"]["subnets"][0]["id"], subnet["id"]);
    let lb_name = format!("{net_name}-kubeapi");
    let (router, groups, lb, listener, pool, monitor, floating) = t.cloud.workload(|w| {
        let router = named(&w.routers, &net_name)[0].clone();
        let groups: Vec<Value> = w
            .security_groups
            .iter()
            .filter(|g| {
                g["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("k8s-cluster-{crn}-secgroup-")))
            })
            .cloned()
            .collect();
        let lb = named(&w.load_balancers, &lb_name)[0].clone();
        let listener = named(&w.listeners, &format!("{lb_name}-6443"))[0].clone();
        let pool = named(&w.pools, &format!("{lb_name}-6443"))[0].clone();
        let monitor = named(&w.health_monitors, &format!("{lb_name}-6443"))[0].clone();
        let floating = w
            .floating_ips
            .iter()
            .find(|f| f["floating_ip_address"] == fip.as_str())
            .cloned()
            .expect("the API floating IP");
        (router, groups, lb, listener, pool, monitor, floating)
    });
    assert_eq!(st["router"]["id"], router["id"]);
    assert_eq!(
        router["external_gateway_info"]["network_id"],
        NETWORK_PUBLIC
    );
    let gateway_ip = str_of(
        &router,
        "/external_gateway_info/external_fixed_ips/0/ip_address",
    );
    assert!(gateway_ip.starts_with("127.100."), "{router}");
    // The API is restricted: no managed groups (CAPO's would open 6443 to everyone).
    assert_eq!(groups, Vec::<Value>::new());
    assert!(st.get("controlPlaneSecurityGroup").is_none(), "{st}");
    // The driver's groups, as it makes them before the machines (with the cluster's
    // credential; here straight into the fake cloud).
    let groups = drivers_groups(&t, &name);
    assert_eq!(lb["provisioning_status"], "ACTIVE");
    assert_eq!(lb["project_id"], json!(t.project));
    assert_eq!(lb["vip_subnet_id"], subnet["id"]);
    assert_eq!(st["apiServerLoadBalancer"]["id"], lb["id"]);
    assert_eq!(st["apiServerLoadBalancer"]["internalIP"], lb["vip_address"]);
    assert_eq!(listener["protocol_port"], 6443);
    // CAPO adds the cluster subnet and the router's address to the template's CIDRs, and ours
    // the management cluster's egress addresses (issue 46 item 4).
    let mut allowed: Vec<&str> = listener["allowed_cidrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    allowed.sort();
    let router_cidr = format!("{gateway_ip}/32");
    let mut expected = vec![
        "10.0.0.0/8",
        "10.0.0.0/24",
        "192.168.0.0/16",
        &router_cidr,
        MGMT_EGRESS,
    ];
    expected.sort();
    assert_eq!(allowed, expected);
    assert_eq!(pool["listeners"][0]["id"], listener["id"]);
    assert_eq!(monitor["pools"][0]["id"], pool["id"]);
    assert_eq!(floating["port_id"], lb["vip_port_id"]);
    assert_eq!(floating["router_id"], router["id"]);
    assert_eq!(floating["project_id"], json!(t.project));
    assert_eq!(floating["status"], "ACTIVE");

    // A control-plane machine: its server boots from a root volume on the port CAPO made, and
    // joins the API load balancer's pool.
    let t1 = Instant::now();
    let machine = format!("{}-cp-0", t.ns);
    t.machine(&name, &machine, cp_spec, true).await;
    let osm = until_within(
        REAL_DEADLINE,
        "CAPO to make the OpenStackMachine ready",
        || async {
            let osm = t.get(INFRA, "OpenStackMachine", &machine).await?;
            (osm["status"]["ready"] == true).then_some(osm)
        },
    )
    .await;
    eprintln!("OpenStackMachine ready after {:.1?}", t1.elapsed());
    let server_id = str_of(&osm, "/status/instanceID").to_string();
    assert_eq!(
        osm["spec"]["providerID"],
        json!(format!("openstack:///{server_id}"))
    );
    let (server, port, volumes, member) = t.cloud.workload(|w| {
        let server = w
            .servers
            .iter()
            .find(|s| s["id"] == server_id.as_str())
            .map(settled);
        let port = w
            .ports
            .iter()
            .find(|p| p["device_id"] == server_id.as_str())
            .cloned();
        let volumes: Vec<Value> = w
            .volumes
            .iter()
            .filter(|v| {
                v["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("{machine}-")))
            })
            .map(settled)
            .collect();
        let member = w
            .members
            .iter()
            .find(|m| m["pool_id"] == pool["id"])
            .cloned();
        (server, port, volumes, member)
    });
    let server = server.expect("the machine's server");
    assert_eq!(server["status"], "ACTIVE");
    assert_eq!(server["name"], json!(machine));
    assert_eq!(server["image"], "", "boots from its root volume");
    let port = port.expect("the server's port");
    assert_eq!(port["name"], json!(format!("{machine}-0")));
    assert_eq!(port["network_id"], net["id"]);
    assert_eq!(port["project_id"], json!(t.project));
    assert_eq!(port["security_groups"], json!([groups[0]["id"]]));
    // Nothing on the machine's port admits the API from anywhere.
    let open = t.cloud.workload(|w| {
        w.security_group_rules
            .iter()
            .filter(|r| port["security_groups"][0] == r["security_group_id"])
            .filter(|r| r["direction"] == "ingress" && r["remote_group_id"].is_null())
            .filter(|r| r["remote_ip_prefix"].is_null() || r["remote_ip_prefix"] == "0.0.0.0/0")
            .cloned()
            .collect::<Vec<_>>()
    });
    assert_eq!(open, Vec::<Value>::new());
    let address = str_of(&port, "/fixed_ips/0/ip_address").to_string();
    assert!(address.starts_with("10.0.0."), "{port}");
    let internal = osm["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["type"] == "InternalIP" && a["address"] == address.as_str());
    assert!(internal, "{}", osm["status"]);
    let mut volume_names: Vec<(String, String, u64)> = volumes
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["status"].as_str().unwrap().to_string(),
                v["size"].as_u64().unwrap(),
            )
        })
        .collect();
    volume_names.sort();
    assert_eq!(
        volume_names,
        [
            (format!("{machine}-etcd"), "in-use".to_string(), 2),
            (format!("{machine}-root"), "in-use".to_string(), 12)
        ]
    );
    let member = member.expect("the machine in the API pool");
    assert_eq!(member["address"], json!(address));
    assert_eq!(member["protocol_port"], 6443);
    assert_eq!(member["name"], json!(format!("{lb_name}-6443-{machine}")));

    // Deleting the Cluster takes everything away.
    let t2 = Instant::now();
    t.delete_cluster(&name, &[&machine]).await;
    eprintln!("Cluster gone after {:.1?}", t2.elapsed());
    let ids: Vec<Value> = [
        &net["id"],
        &subnet["id"],
        &router["id"],
        &lb["id"],
        &lb["vip_port_id"],
        &listener["id"],
        &pool["id"],
        &monitor["id"],
        &member["id"],
        &floating["id"],
        &server["id"],
        &port["id"],
    ]
    .into_iter()
    .chain(volumes.iter().map(|v| &v["id"]))
    .cloned()
    .collect();
    let left = leftovers(t.cloud, &ids, &[&crn, &machine]);
    assert!(left.is_empty(), "left on the fake cloud: {left:#?}");
    // The driver's groups are the driver's to delete (its cleanup, after the machines).
    t.cloud.workload(|w| {
        w.security_groups
            .retain(|g| !groups.iter().any(|o| o["id"] == g["id"]));
        w.security_group_rules
            .retain(|r| !groups.iter().any(|o| o["id"] == r["security_group_id"]));
    });
    t.close().await;
    eprintln!("the whole test took {:.1?}", t0.elapsed());
}

/// Makes the driver's two security groups of cluster `name` (on the 10.0.0.0/24 node subnet,
/// the API restricted as `rendered` asks) in the fake cloud; `[control plane, workers]`.
fn drivers_groups(t: &Tenant, name: &str) -> [Value; 2] {
    use magnum_capi::capi::api_security as sg;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (cp_id, w_id) = (format!("{tag}-cp"), format!("{tag}-w"));
    let nodes = vec!["10.0.0.0/24".to_string()];
    let api: Vec<String> = ["10.0.0.0/8", "192.168.0.0/16", MGMT_EGRESS]
        .map(String::from)
        .to_vec();
    let sets = [
        (
            &cp_id,
            sg::control_plane_group(name),
            sg::control_plane_rules(&cp_id, &w_id, 6443, &api, &nodes),
        ),
        (
            &w_id,
            sg::worker_group(name),
            sg::worker_rules(&w_id, &cp_id, &nodes),
        ),
    ];
    t.cloud.workload(|w| {
        sets.map(|(id, group, rules)| {
            let g = crate::common::fakecloud::workload::security_group(id, &group, "", &t.project);
            w.security_groups.push(g.clone());
            for (i, r) in rules.iter().enumerate() {
                w.security_group_rules.push(json!({
                    "id": format!("{id}-{i}"), "security_group_id": id,
                    "direction": r.direction, "ethertype": r.ethertype, "protocol": r.protocol,
                    "port_range_min": r.port_range_min, "port_range_max": r.port_range_max,
                    "remote_ip_prefix": r.remote_ip_prefix, "remote_group_id": r.remote_group_id,
                    "description": r.description, "project_id": t.project,
                    "tenant_id": t.project}));
            }
            g
        })
    })
}

/// Everything the fake cloud still holds with one of `ids`, a name or description containing
/// one of `words`, or on a network or device of those.
fn leftovers(cloud: &FakeCloud, ids: &[Value], words: &[&str]) -> Vec<Value> {
    let mentions = |v: &Value| {
        ids.contains(&v["id"])
            || [
                "network_id",
                "device_id",
                "security_group_id",
                "pool_id",
                "port_id",
            ]
            .iter()
            .any(|k| ids.contains(&v[*k]))
            || ["name", "description"].iter().any(|k| {
                v[*k]
                    .as_str()
                    .is_some_and(|s| words.iter().any(|w| s.contains(w)))
            })
    };
    cloud.resources_where(mentions)
}

/// A flavor Nova refuses (its quota of cores): CAPO's real create fails with Nova's 403 and its
/// `forbidden` body, which lands on the machine's OpenStackServer; no server is left, and the
/// cluster still goes away whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flavor_nova_refuses_surfaces_novas_error_on_the_machines_server() {
    let _env = env_shared().await;
    let t0 = Instant::now();
    let t = Tenant::new("capo-refused").await;
    let _logs = LogsOnFailure(t.s);
    t.cloud.add_flavor(
        json!({"id": "capo-refused", "name": "m1.refused", "ram": 4096,
        "disk": 40, "vcpus": 4}),
    );
    t.cloud
        .workload(|w| w.refused_flavors.insert("capo-refused".into()));
    let name = "refused";
    t.apply(&json!({"apiVersion": INFRA, "kind": "OpenStackCluster",
        "metadata": {"name": name, "namespace": t.ns, "labels": {CLUSTER_NAME_LABEL: name}},
        "spec": {"identityRef": {"name": t.secret, "cloudName": "openstack"},
            "managedSubnets": [{"cidr": "10.7.0.0/24"}],
            "managedSecurityGroups": {"allowAllInClusterTraffic": false},
            "externalNetwork": {"filter": {"name": "public"}},
            "apiServerLoadBalancer": {"enabled": false},
            "disableAPIServerFloatingIP": true, "apiServerFixedIP": "10.7.0.10"}}))
        .await;
    t.apply(&t.cluster(name)).await;
    let osc = t.ready_cluster(name).await;
    assert_eq!(osc["spec"]["controlPlaneEndpoint"]["host"], "10.7.0.10");

    let machine = format!("{}-md-0", t.ns);
    let spec = json!({"flavor": "m1.refused",
        "image": {"filter": {"name": "ubuntu-2204-kube-v1.30.4"}}, "sshKeyName": "default"});
    t.machine(name, &machine, spec, false).await;
    let message = until_within(
        REAL_DEADLINE,
        "Nova's refusal on the machine's OpenStackServer",
        || async {
            let server = t.get(INFRA_ALPHA, "OpenStackServer", &machine).await?;
            let failed = server["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "InstanceReady" && c["status"] == "False")?;
            let message = failed["message"].as_str()?.to_string();
            message
                .contains("error creating Openstack instance")
                .then_some(message)
        },
    )
    .await;
    assert!(
        message.contains("403")
            && message.contains(
                r#"{"forbidden": {"code": 403, "message": "Quota exceeded for cores: Requested 4, but already used 0 of 3 cores"}}"#
            ),
        "{message}"
    );
    let server = t
        .get(INFRA_ALPHA, "OpenStackServer", &machine)
        .await
        .unwrap();
    assert_eq!(server["status"]["instanceState"], "ERROR");
    assert_eq!(server["status"]["resolved"]["flavorID"], "capo-refused");
    assert_eq!(server["status"]["resolved"]["imageID"], IMAGE_UBUNTU_KUBE);
    let osm = t.get(INFRA, "OpenStackMachine", &machine).await.unwrap();
    // CAPO v0.14.7 keeps the OpenStackMachine waiting for its server: Nova's refusal is on the
    // OpenStackServer only.
    assert_ne!(osm["status"]["ready"], true, "{}", osm["status"]);
    assert!(
        osm["status"]["failureMessage"].is_null(),
        "{}",
        osm["status"]
    );
    assert!(
        t.cloud
            .workload(|w| !w.servers.iter().any(|s| s["name"] == machine.as_str())),
        "Nova made no server"
    );

    t.delete_cluster(name, &[&machine]).await;
    let crn = format!("{}-{name}", t.ns);
    let left = leftovers(t.cloud, &[], &[&crn, &machine]);
    assert!(left.is_empty(), "left on the fake cloud: {left:#?}");
    t.cloud
        .workload(|w| w.refused_flavors.remove("capo-refused"));
    t.close().await;
    eprintln!("the whole test took {:.1?}", t0.elapsed());
}
