//! A cluster without an Octavia load balancer on the real management stack (issue 46 item 3):
//! the real CAPO builds it on the fake cloud with its API on the control plane's virtual IP
//! (`kube_vip_enabled`; the node agent serves the API on that address, on loopback, as kube-vip
//! would hold it), the real KCP carries kube-vip's static pod, and the delete leaves nothing.
//! And an API restricted by `api_master_lb_allowed_cidrs` (item 4): the real CAPO boots the
//! machines in the driver's security groups, none of whose rules opens the API port to everyone.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::realstack::{Production, chart_identity, stack};
use crate::realstack::{
    KUBE_IMAGE, LOOPBACK_CHARTS, create_cluster, nodes_of, wait_for_status, workload_client,
};

/// The management cluster's egress addresses the restricted cluster admits (loopback, where
/// the node agent serves its API).
const EGRESS: &str = "127.0.0.0/8";

/// Private: no floating IP, the API on the virtual IP itself (the management cluster reaches it
/// as it reaches any private API; here, on loopback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_octavia_serves_its_api_on_the_control_planes_virtual_ip() {
    vip_cluster("127.77.0", false).await;
}

/// With a floating IP: CAPO's, the endpoint, moved by the create onto a port holding the
/// virtual IP (so it follows kube-vip's leader, not the first machine), gone with the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_octavia_has_its_floating_ip_on_the_virtual_ip() {
    vip_cluster("127.78.0", true).await;
}

/// A cluster of one master on node subnet `<net>.0/24` (on loopback, where the node agent can
/// serve the virtual IP `<net>.254`: the subnet's last host address, kept out of its pool),
/// with or without a `floating` IP, created, checked and deleted.
async fn vip_cluster(net: &str, floating: bool) {
    let node_cidr = format!("{net}.0/24");
    let vip = format!("{net}.254");
    let vip = vip.as_str();
    let t0 = std::time::Instant::now();
    let s = stack().await;
    let (ks, cloud) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(0, &kubeconfig, LOOPBACK_CHARTS, "").await;
    let token = ks.token("bob", "beta").await;
    let project = ks.project_id("beta").to_string();
    let labels = json!({"kube_vip_enabled": "true",
                        "master_lb_floating_ip_enabled": floating.to_string(),
                        "fixed_subnet_cidr": node_cidr});
    let tpl = template(&served, &token, &format!("vip-{net}"), false, labels).await;
    let lbs_before = lbs_of(&cloud.workload(|w| w.load_balancers.clone()), &project);
    let uuid = create_cluster(&served, &token, &format!("vip-{net}"), &tpl, json!({})).await;
    let path = format!("/v1/clusters/{uuid}");
    let body = wait_for_status(&served, &token, &path, "CREATE_COMPLETE").await;
    eprintln!("CREATE_COMPLETE after {:.1?}", t0.elapsed());
    let api = body["api_address"].as_str().unwrap().to_string();
    let name = magnum_capi::capi::capi_name(uuid.parse().unwrap());
    let ports = cloud.workload(|w| w.ports.clone());
    if floating {
        // The endpoint is CAPO's floating IP, on the port that holds the virtual IP.
        let host = api
            .strip_prefix("https://")
            .and_then(|a| a.strip_suffix(":6443"))
            .unwrap_or_else(|| panic!("{body}"));
        assert_ne!(host, vip, "{body}");
        let fips = cloud.workload(|w| w.floating_ips.clone());
        let fip = fips
            .iter()
            .find(|f| f["floating_ip_address"] == host)
            .unwrap_or_else(|| panic!("no floating IP {host}: {fips:#?}"));
        let port = ports
            .iter()
            .find(|p| p["name"] == format!("{name}-api-vip"))
            .unwrap_or_else(|| panic!("no virtual IP port: {ports:#?}"));
        assert_eq!(port["fixed_ips"][0]["ip_address"], vip, "{port:#}");
        assert_eq!(fip["port_id"], port["id"], "{fip:#}");
        assert_eq!(fip["fixed_ip_address"], vip, "{fip:#}");
    } else {
        assert_eq!(api, format!("https://{vip}:6443"), "{body}");
    }

    // No load balancer was made for it; the control-plane server's port lets the VIP through.
    let lbs = lbs_of(&cloud.workload(|w| w.load_balancers.clone()), &project);
    assert_eq!(lbs, lbs_before, "a load balancer was created");
    let control_plane_ports: Vec<&Value> = ports
        .iter()
        .filter(|p| {
            p["name"]
                .as_str()
                .is_some_and(|n| n.contains(&name) && n.contains("control-plane"))
        })
        .collect();
    assert!(
        !control_plane_ports.is_empty(),
        "no control-plane port: {ports:#?}"
    );
    for p in &control_plane_ports {
        assert_eq!(p["allowed_address_pairs"][0]["ip_address"], vip, "{p:#}");
        // Neutron gave the machine another address: the virtual IP is outside the pool.
        assert_ne!(p["fixed_ips"][0]["ip_address"], vip, "{p:#}");
    }

    // The real KCP holds kube-vip's static pod for that address.
    let admin = s.admin().await;
    let ns_kcp = format!("magnum-{project}");
    let ar = magnum_capi::capi::apply::resource(
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
    );
    let kcps = kube::Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), &ns_kcp, &ar);
    let kcp = kcps
        .get(&format!("{name}-control-plane"))
        .await
        .expect("the KubeadmControlPlane");
    let kcp = serde_json::to_value(kcp).unwrap();
    let files = kcp["spec"]["kubeadmConfigSpec"]["files"]
        .as_array()
        .unwrap();
    let pod = files
        .iter()
        .find(|f| f["path"] == magnum_capi::capi::values::KUBE_VIP_MANIFEST_PATH)
        .unwrap_or_else(|| panic!("no kube-vip static pod in {kcp:#}"));
    assert!(
        pod["content"]
            .as_str()
            .unwrap()
            .contains(&format!("value: \"{vip}\"")),
        "{pod:#}"
    );

    // `coe cluster config`'s client reaches the workload API on the virtual IP.
    reached_then_deleted(&served, &token, &uuid, &api).await;
    // Nor CAPO's floating IP: it went with the cluster, not with a machine.
    let ns = format!("magnum-{project}");
    let capo = magnum_capi::capi::api_vip::capo_description(&ns, &name);
    let fips = cloud.workload(|w| w.floating_ips.clone());
    assert!(
        fips.iter().all(|f| f["description"] != capo.as_str()),
        "{fips:#?}"
    );
    assert_eq!(
        lbs_of(&cloud.workload(|w| w.load_balancers.clone()), &project),
        lbs_before
    );
    eprintln!("the whole test took {:.1?}", t0.elapsed());
}

/// The ids of `project`'s load balancers.
fn lbs_of(lbs: &[Value], project: &str) -> Vec<String> {
    lbs.iter()
        .filter(|l| l["project_id"] == json!(project))
        .filter_map(|l| l["id"].as_str().map(str::to_string))
        .collect()
}

/// An API restricted by `api_master_lb_allowed_cidrs`, built by the real CAPO through the
/// driver: no managed security groups (CAPO's open the API port to everyone); the driver's two
/// groups on every machine's port, the API port only from the allowed CIDRs, the management
/// cluster's egress addresses and the node subnet; the workload API reachable; the delete
/// removes the groups with the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_api_is_closed_on_the_machines_security_groups_too() {
    let t0 = std::time::Instant::now();
    let s = stack().await;
    let (ks, cloud) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(
        0,
        &kubeconfig,
        LOOPBACK_CHARTS,
        &format!("egress_cidrs = [{EGRESS:?}]\n"),
    )
    .await;
    // Not beta: the tests above count its load balancers, and this cluster has one.
    let token = ks.token("alice", "alpha").await;
    let labels = json!({"api_master_lb_allowed_cidrs": "192.0.2.0/24"});
    let tpl = template(&served, &token, "restricted", true, labels).await;
    let uuid = create_cluster(&served, &token, "restricted", &tpl, json!({})).await;
    let path = format!("/v1/clusters/{uuid}");
    let body = wait_for_status(&served, &token, &path, "CREATE_COMPLETE").await;
    eprintln!("CREATE_COMPLETE after {:.1?}", t0.elapsed());
    let name = magnum_capi::capi::capi_name(uuid.parse().unwrap());

    let (groups, capos, rules, ports) = cloud.workload(|w| {
        let of = |suffix: &str| {
            w.security_groups
                .iter()
                .find(|g| g["name"] == format!("{name}-secgroup-{suffix}"))
                .cloned()
                .unwrap_or_else(|| panic!("no {suffix} group of {name}"))
        };
        let capos: Vec<Value> = w
            .security_groups
            .iter()
            .filter(|g| {
                g["name"].as_str().is_some_and(|n| {
                    n.starts_with("k8s-cluster-") && n.contains(&name) && n.contains("-secgroup-")
                })
            })
            .cloned()
            .collect();
        let servers: Vec<&Value> = w
            .servers
            .iter()
            .filter(|v| v["name"].as_str().is_some_and(|n| n.contains(&name)))
            .collect();
        let ports: Vec<Value> = w
            .ports
            .iter()
            .filter(|p| servers.iter().any(|v| v["id"] == p["device_id"]))
            .cloned()
            .collect();
        (
            [of("controlplane"), of("worker")],
            capos,
            w.security_group_rules.clone(),
            ports,
        )
    });
    assert_eq!(capos, Vec::<Value>::new());
    assert_eq!(ports.len(), 2, "{ports:#?}");
    for p in &ports {
        let on = p["security_groups"].as_array().unwrap();
        assert_eq!(on.len(), 1, "{p:#}");
        assert!(groups.iter().any(|g| g["id"] == on[0]), "{p:#}");
        // No rule of the machine's group admits the API port from anywhere.
        let open: Vec<&Value> = rules
            .iter()
            .filter(|r| r["security_group_id"] == on[0] && r["direction"] == "ingress")
            .filter(|r| r["remote_group_id"].is_null())
            .filter(|r| r["remote_ip_prefix"].is_null() || r["remote_ip_prefix"] == "0.0.0.0/0")
            .collect();
        assert!(open.is_empty(), "{open:#?}");
    }
    let mut api: Vec<&str> = rules
        .iter()
        .filter(|r| r["security_group_id"] == groups[0]["id"] && r["port_range_min"] == 6443)
        .filter_map(|r| r["remote_ip_prefix"].as_str())
        .collect();
    api.sort();
    assert_eq!(api, ["10.0.0.0/24", EGRESS, "192.0.2.0/24"]);

    // Cluster API (and `coe cluster config`'s client) still reach the API.
    let address = body["api_address"].as_str().unwrap().to_string();
    reached_then_deleted(&served, &token, &uuid, &address).await;
    eprintln!("the whole test took {:.1?}", t0.elapsed());
}

/// Cluster `uuid`'s two nodes seen through its API at `api` by `coe cluster config`'s client;
/// then its delete, after which the fake cloud holds nothing whose name or description has its
/// CAPI name.
async fn reached_then_deleted(served: &Production, token: &str, uuid: &str, api: &str) {
    let workload = workload_client(served, token, uuid).await;
    assert_eq!(nodes_of(&workload, api).await, Ok(2));
    let path = format!("/v1/clusters/{uuid}");
    let (st, b) = served.call(token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(served, token, &path, "DELETE_COMPLETE").await;
    let name = magnum_capi::capi::capi_name(uuid.parse().unwrap());
    let (_, cloud) = crate::common::stack::parts().await;
    let left = cloud.resources_where(|v| {
        ["name", "description"]
            .iter()
            .any(|k| v[*k].as_str().is_some_and(|s| s.contains(&name)))
    });
    assert!(left.is_empty(), "left on the fake cloud: {left:#?}");
}

/// A one-master template `name` on the fake cloud's image, flavors and `public`, with
/// `master_lb_enabled` and `labels`; its uuid.
async fn template(
    served: &Production,
    token: &str,
    name: &str,
    master_lb_enabled: bool,
    labels: Value,
) -> String {
    crate::realstack::realstack_template_with(
        served,
        token,
        name,
        KUBE_IMAGE,
        "m1.large",
        json!({"master_lb_enabled": master_lb_enabled, "labels": labels}),
    )
    .await
}
