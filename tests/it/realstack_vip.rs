//! A cluster without an Octavia load balancer on the real management stack (issue 46 item 3):
//! the real CAPO builds it on the fake cloud with its API on the control plane's virtual IP
//! (`kube_vip_enabled`; the node agent serves the API on that address, on loopback, as kube-vip
//! would hold it), the real KCP carries kube-vip's static pod, and the delete leaves nothing.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::realstack::{Production, chart_identity, stack};
use crate::realstack::{
    KUBE_IMAGE, LOOPBACK_CHARTS, create_cluster, nodes_of, wait_for_status, workload_client,
};

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
    let (st, tpl) = served
        .call(
            &token,
            Method::POST,
            "/v1/clustertemplates",
            Some(json!({
                "name": format!("vip-{net}"), "coe": "kubernetes", "image_id": KUBE_IMAGE,
                "external_network_id": "public", "flavor_id": "m1.medium",
                "master_flavor_id": "m1.large", "network_driver": "calico",
                "master_lb_enabled": false,
                "labels": {"kube_vip_enabled": "true",
                           "master_lb_floating_ip_enabled": floating.to_string(),
                           "fixed_subnet_cidr": node_cidr},
            })),
        )
        .await;
    assert_eq!(st, 201, "{tpl}");
    let tpl = tpl["uuid"].as_str().unwrap().to_string();
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
    let workload = workload_client(&served, &token, &uuid).await;
    assert_eq!(nodes_of(&workload, &api).await, Ok(2));

    let (st, b) = served.call(&token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(&served, &token, &path, "DELETE_COMPLETE").await;
    let left = cloud.resources_where(|v| {
        ["name", "description"]
            .iter()
            .any(|k| v[*k].as_str().is_some_and(|s| s.contains(&name)))
    });
    assert!(left.is_empty(), "left on the fake cloud: {left:#?}");
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
