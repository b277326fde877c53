//! Checks the fake Glance / Nova / Neutron / Octavia / Cinder of `common/fakecloud*.rs` against
//! the wire format: the reads, and the lifecycle Cluster API Provider OpenStack drives (network,
//! router, ports, floating IPs, load balancer, volumes, servers) with the services' refusals.

use std::time::Duration;

use crate::common::fakecloud::*;
use serde_json::{Value, json};

const TOKEN: &str = "gAAAAAfake-token";

async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = reqwest::Client::new()
        .get(url)
        .header("X-Auth-Token", TOKEN)
        .header("Accept", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(req).await
}

async fn send(req: reqwest::RequestBuilder) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn version_documents_need_no_token() {
    let c = FakeCloud::start().await;
    let anon = reqwest::Client::new();
    for url in [format!("{}/", c.image_url()), c.image_url()] {
        let (s, _, body) = send(anon.get(url)).await;
        assert_eq!(s, 300);
        assert_eq!(body["versions"][0]["id"], "v2.16");
        assert_eq!(body["versions"][0]["status"], "CURRENT");
        assert_eq!(
            body["versions"][0]["links"][0]["href"],
            format!("{}/image/v2/", c.base)
        );
    }
    let (s, _, body) = send(anon.get(format!("{}/", c.compute_url()))).await;
    assert_eq!(s, 200);
    assert_eq!(body["version"]["version"], "2.96");
    assert_eq!(body["version"]["min_version"], "2.1");
    assert_eq!(
        body["version"]["links"][0]["href"],
        format!("{}/compute/v2.1/", c.base)
    );
    let (s, _, body) = send(anon.get(format!("{}/compute/", c.base))).await;
    assert_eq!(s, 200);
    assert_eq!(body["versions"][1]["id"], "v2.1");
    let (s, _, body) = send(anon.get(format!("{}/", c.network_url()))).await;
    assert_eq!(s, 200);
    assert_eq!(
        body["versions"][0]["links"][0]["href"],
        format!("{}/networking/v2.0/", c.base)
    );
}

#[tokio::test]
async fn resources_need_a_token() {
    let c = FakeCloud::start().await;
    let anon = reqwest::Client::new();
    for url in [
        format!("{}/v2/images", c.image_url()),
        format!("{}/flavors/detail", c.compute_url()),
        format!("{}/v2.0/networks", c.network_url()),
    ] {
        let (s, h, body) = send(anon.get(&url).header("Accept", "application/json")).await;
        assert_eq!(s, 401, "{url}");
        assert!(
            h["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Keystone uri=")
        );
        if url.contains("/image/") {
            assert_eq!(body["code"], "401 Unauthorized");
            assert_eq!(body["title"], "Unauthorized");
        } else {
            assert_eq!(
                body,
                json!({"error": {"code": 401, "title": "Unauthorized",
                "message": "The request you have made requires authentication."}})
            );
        }
    }
    let seen = c.requests();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| s.token.is_none() && s.method == "GET"));
}

#[tokio::test]
async fn glance_images() {
    let c = FakeCloud::start().await;
    let url = format!("{}/v2/images", c.image_url());
    let (s, _, body) = get(&url, &[]).await;
    assert_eq!(s, 200);
    assert_eq!(body["first"], "/v2/images");
    assert_eq!(body["schema"], "/v2/schemas/images");
    assert_eq!(body["images"].as_array().unwrap().len(), 5);
    assert!(body.get("next").is_none());

    let (_, _, body) = get(&format!("{url}?name=dup-image"), &[]).await;
    assert_eq!(names(&body["images"]), ["dup-image", "dup-image"]);
    assert_eq!(body["first"], "/v2/images?name=dup-image");
    let (_, _, body) = get(
        &format!("{url}?name=flatcar-4152&unknown_ctl=&limit=10"),
        &[],
    )
    .await;
    assert_eq!(
        body["images"].as_array().unwrap().len(),
        0,
        "unknown keys are property filters"
    );
    let (_, _, body) = get(
        &format!("{url}?id={IMAGE_UBUNTU_KUBE}&visibility=public"),
        &[],
    )
    .await;
    assert_eq!(names(&body["images"]), ["ubuntu-2204-kube-v1.30.4"]);
    let (_, _, body) = get(&format!("{url}?os_distro=ubuntu"), &[]).await;
    assert_eq!(body["images"].as_array().unwrap().len(), 3);

    // Pagination: newest first, `next` carries the marker.
    let (_, _, body) = get(&format!("{url}?limit=2"), &[]).await;
    assert_eq!(body["images"][0]["id"], IMAGE_DUP_B);
    assert_eq!(
        body["next"],
        format!("/v2/images?limit=2&marker={IMAGE_DUP_A}")
    );
    let (_, _, body) = get(&format!("{url}?limit=2&marker={IMAGE_DUP_A}"), &[]).await;
    assert_eq!(body["images"][0]["id"], IMAGE_NO_DISTRO);
    let (s, _, body) = get(&format!("{url}?marker=nope"), &[]).await;
    assert_eq!(s, 400);
    assert_eq!(body["code"], "400 Bad Request");

    let (s, _, img) = get(&format!("{url}/{IMAGE_UBUNTU_KUBE}/"), &[]).await;
    assert_eq!(s, 200);
    assert_eq!(img["os_distro"], "ubuntu");
    assert_eq!(img["kube_version"], "v1.30.4");
    assert_eq!(img["self"], format!("/v2/images/{IMAGE_UBUNTU_KUBE}"));
    assert_eq!(img["status"], "active");
    let (_, _, img) = get(&format!("{url}/{IMAGE_NO_DISTRO}"), &[]).await;
    assert!(img.get("os_distro").is_none());

    let (s, _, body) = get(&format!("{url}/missing"), &[]).await;
    assert_eq!(s, 404);
    assert_eq!(
        body,
        json!({"message": "No image found with ID missing<br /><br />\n\n\n",
        "code": "404 Not Found", "title": "Not Found"})
    );
    let resp = reqwest::Client::new()
        .get(format!("{url}/missing"))
        .header("X-Auth-Token", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        resp.text()
            .await
            .unwrap()
            .contains("No image found with ID missing")
    );

    let id = c.add_image(json!({"name": "extra", "os_distro": "fedora-coreos"}));
    let (_, _, body) = get(&format!("{url}?limit=1"), &[]).await;
    assert_eq!(body["images"][0]["id"], id.as_str());
    assert!(c.remove(&id));
    assert_eq!(get(&format!("{url}/{id}"), &[]).await.0, 404);
}

#[tokio::test]
async fn nova_flavors() {
    let c = FakeCloud::start().await;
    let url = format!("{}/flavors", c.compute_url());
    let (s, h, body) = get(&format!("{url}/detail"), &[]).await;
    assert_eq!(s, 200);
    assert_eq!(h["openstack-api-version"], "compute 2.1");
    assert_eq!(
        names(&body["flavors"]),
        ["m1.tiny", "m1.small", "m1.medium", "m1.large", "ds-zero"]
    );
    let small = &body["flavors"][1];
    assert_eq!(small["disk"], 20);
    assert_eq!(small["swap"], "");
    assert_eq!(small["os-flavor-access:is_public"], true);
    assert_eq!(small["links"][0]["href"], format!("{url}/2"));
    assert!(small.get("description").is_none() && small.get("extra_specs").is_none());

    let (_, _, body) = get(
        &format!("{url}/detail"),
        &[("OpenStack-API-Version", "compute 2.61")],
    )
    .await;
    assert_eq!(body["flavors"][0]["extra_specs"], json!({}));
    assert_eq!(body["flavors"][0]["description"], Value::Null);
    let (_, _, body) = get(
        &format!("{url}/d0"),
        &[("X-OpenStack-Nova-API-Version", "2.75")],
    )
    .await;
    assert_eq!(body["flavor"]["disk"], 0);
    assert_eq!(body["flavor"]["swap"], 0);
    let (s, _, body) = get(
        &format!("{url}/detail"),
        &[("OpenStack-API-Version", "compute 3.0")],
    )
    .await;
    assert_eq!(s, 406);
    assert_eq!(body["computeFault"]["code"], 406);

    let (_, _, body) = get(&format!("{url}/"), &[]).await;
    let tiny = &body["flavors"][0];
    assert_eq!(
        tiny.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["id", "name", "links"]
    );
    let (_, _, body) = get(&format!("{url}/detail?limit=2&is_public=true"), &[]).await;
    assert_eq!(names(&body["flavors"]), ["m1.tiny", "m1.small"]);
    let (_, _, body) = get(&format!("{url}/detail?marker=2&minDisk=40"), &[]).await;
    assert_eq!(names(&body["flavors"]), ["m1.medium", "m1.large"]);

    let (s, _, body) = get(&format!("{url}/nope"), &[]).await;
    assert_eq!(s, 404);
    assert_eq!(
        body,
        json!({"itemNotFound": {"code": 404, "message": "Flavor nope could not be found."}})
    );
    c.add_flavor(json!({"id": "p1", "name": "private", "os-flavor-access:is_public": false}));
    let (_, _, body) = get(&format!("{url}/detail?is_public=false"), &[]).await;
    assert_eq!(names(&body["flavors"]), ["private"]);

    // Extra specs: Nova's `{"extra_specs": {...}}` at any microversion; 404 for no flavor.
    c.add_flavor(json!({"id": "g1", "name": "gpu", "extra_specs": {"resources:VGPU": "1"}}));
    let (s, _, body) = get(&format!("{url}/g1/os-extra_specs"), &[]).await;
    assert_eq!(s, 200);
    assert_eq!(body, json!({"extra_specs": {"resources:VGPU": "1"}}));
    let (_, _, body) = get(&format!("{url}/1/os-extra_specs"), &[]).await;
    assert_eq!(body, json!({"extra_specs": {}}));
    let (s, _, body) = get(&format!("{url}/nope/os-extra_specs"), &[]).await;
    assert_eq!(s, 404);
    assert_eq!(
        body["itemNotFound"]["message"],
        "Flavor nope could not be found."
    );
}

#[tokio::test]
async fn nova_keypairs() {
    let c = FakeCloud::start().await;
    let url = format!("{}/os-keypairs", c.compute_url());
    let (s, _, body) = get(
        &format!("{url}/{KEYPAIR_ALICE}"),
        &[("OpenStack-API-Version", "compute 2.2")],
    )
    .await;
    assert_eq!(s, 200);
    let kp = &body["keypair"];
    for f in [
        "name",
        "public_key",
        "fingerprint",
        "user_id",
        "id",
        "created_at",
        "deleted",
        "deleted_at",
        "updated_at",
        "type",
    ] {
        assert!(kp.get(f).is_some(), "{f}");
    }
    let (_, _, body) = get(&url, &[]).await;
    assert_eq!(body["keypairs"].as_array().unwrap().len(), 2);
    assert_eq!(body["keypairs"][0]["keypair"]["name"], KEYPAIR_DEFAULT);
    assert!(
        body["keypairs"][0]["keypair"].get("type").is_none(),
        "type needs 2.2"
    );

    let (s, _, body) = get(&format!("{url}/nope"), &[]).await;
    assert_eq!(s, 404);
    assert_eq!(
        body["itemNotFound"]["message"],
        format!("Keypair nope not found for user {SEED_USER_ID}")
    );

    // Ownership applies once the requesting user is known.
    c.add_keypair(Some("bob-id"), json!({"name": "bobs"}));
    assert_eq!(get(&format!("{url}/bobs"), &[]).await.0, 200);
    c.set_token_user(TOKEN, "alice-id");
    let (s, _, body) = get(&format!("{url}/bobs"), &[]).await;
    assert_eq!(s, 404);
    assert_eq!(
        body["itemNotFound"]["message"],
        "Keypair bobs not found for user alice-id"
    );
    let (s, _, body) = get(
        &format!("{url}/bobs?user_id=bob-id"),
        &[("OpenStack-API-Version", "compute 2.10")],
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(body["keypair"]["user_id"], "bob-id");
}

#[tokio::test]
async fn neutron_networks_and_subnets() {
    let c = FakeCloud::start().await;
    let url = format!("{}/v2.0", c.network_url());
    let (s, _, body) = get(&format!("{url}/networks"), &[]).await;
    assert_eq!(s, 200);
    assert_eq!(
        names(&body["networks"]),
        ["public", "private", "dup-net", "dup-net"]
    );
    assert_eq!(body["networks"][0]["subnets"], json!([SUBNET_PUBLIC]));

    let (_, _, body) = get(
        &format!("{url}/networks?router:external=True&fields=id&fields=name"),
        &[],
    )
    .await;
    assert_eq!(
        body,
        json!({"networks": [{"id": NETWORK_PUBLIC, "name": "public"}]})
    );
    let (_, _, body) = get(
        &format!("{url}/networks?name=dup-net&router%3Aexternal=false&bogus=1"),
        &[],
    )
    .await;
    assert_eq!(body["networks"].as_array().unwrap().len(), 2);
    let (_, _, body) = get(
        &format!("{url}/networks?id={NETWORK_PRIVATE}&id={NETWORK_PUBLIC}"),
        &[],
    )
    .await;
    assert_eq!(body["networks"].as_array().unwrap().len(), 2);
    let (_, _, body) = get(&format!("{url}/networks?limit=1"), &[]).await;
    assert_eq!(body["networks_links"][0]["rel"], "next");

    let (s, _, body) = get(&format!("{url}/networks/{NETWORK_PRIVATE}"), &[]).await;
    assert_eq!(s, 200);
    assert_eq!(body["network"]["router:external"], false);
    let (s, _, body) = get(&format!("{url}/networks/nope"), &[]).await;
    assert_eq!(s, 404);
    assert_eq!(
        body,
        json!({"NeutronError": {"type": "NetworkNotFound",
        "message": "Network nope could not be found.", "detail": ""}})
    );

    let (_, _, body) = get(&format!("{url}/subnets?network_id={NETWORK_PRIVATE}"), &[]).await;
    assert_eq!(names(&body["subnets"]), ["private-subnet"]);
    assert_eq!(body["subnets"][0]["cidr"], "10.0.0.0/24");
    let (_, _, body) = get(&format!("{url}/subnets?name=dup-subnet"), &[]).await;
    assert_eq!(body["subnets"].as_array().unwrap().len(), 2);
    let (s, _, body) = get(&format!("{url}/subnets/{SUBNET_PUBLIC}"), &[]).await;
    assert_eq!(s, 200);
    assert_eq!(body["subnet"]["router:external"], true);
    let (s, _, body) = get(&format!("{url}/subnets/nope"), &[]).await;
    assert_eq!(s, 404);
    assert_eq!(body["NeutronError"]["type"], "SubnetNotFound");

    let net = c.add_network(json!({"name": "extra"}));
    let sub =
        c.add_subnet(json!({"name": "extra-subnet", "network_id": net, "cidr": "10.9.0.0/24"}));
    let (_, _, body) = get(&format!("{url}/networks/{net}"), &[]).await;
    assert_eq!(body["network"]["subnets"], json!([sub]));
}

#[tokio::test]
async fn down_delay_and_request_log() {
    let c = FakeCloud::start().await;
    c.set_down(true);
    let (s, _, body) = get(&format!("{}/flavors/detail", c.compute_url()), &[]).await;
    assert_eq!(s, 503);
    assert_eq!(body["serviceUnavailable"]["code"], 503);
    let (s, _, body) = get(&format!("{}/v2/images", c.image_url()), &[]).await;
    assert_eq!(s, 503);
    assert_eq!(body["code"], "503 Service Unavailable");
    let (s, _, body) = get(&format!("{}/", c.network_url()), &[]).await;
    assert_eq!(s, 503);
    assert_eq!(body["NeutronError"]["type"], "ServiceUnavailable");
    c.set_down(false);

    let seen = c.requests();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].path, "/compute/v2.1/flavors/detail");
    assert_eq!(seen[0].token.as_deref(), Some(TOKEN));
    c.clear_requests();
    get(&format!("{}/v2/images?name=a%20b", c.image_url()), &[]).await;
    assert_eq!(c.requests()[0].query.as_deref(), Some("name=a%20b"));

    c.set_delay(Duration::from_millis(500));
    let slow = reqwest::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let err = slow
        .get(format!("{}/", c.compute_url()))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    c.set_delay(Duration::ZERO);
    assert_eq!(get(&format!("{}/", c.compute_url()), &[]).await.0, 200);
}

#[tokio::test]
async fn seed_ids_match_consts_and_remove() {
    let c = FakeCloud::start().await;
    let (i, n) = (c.image_url(), c.network_url());
    let images = [
        IMAGE_FLATCAR,
        IMAGE_UBUNTU_KUBE,
        IMAGE_NO_DISTRO,
        IMAGE_DUP_A,
        IMAGE_DUP_B,
    ];
    for id in images {
        assert_eq!(
            get(&format!("{i}/v2/images/{id}"), &[]).await.0,
            200,
            "{id}"
        );
    }
    let flavors = [
        FLAVOR_TINY,
        FLAVOR_SMALL,
        FLAVOR_MEDIUM,
        FLAVOR_LARGE,
        FLAVOR_DISK_ZERO,
    ];
    for id in flavors {
        let url = format!("{}/flavors/{id}", c.compute_url());
        assert_eq!(get(&url, &[]).await.0, 200, "{id}");
    }
    for name in [KEYPAIR_DEFAULT, KEYPAIR_ALICE] {
        let url = format!("{}/os-keypairs/{name}", c.compute_url());
        assert_eq!(get(&url, &[]).await.0, 200, "{name}");
    }
    for id in [
        NETWORK_PUBLIC,
        NETWORK_PRIVATE,
        NETWORK_DUP_A,
        NETWORK_DUP_B,
    ] {
        assert_eq!(
            get(&format!("{n}/v2.0/networks/{id}"), &[]).await.0,
            200,
            "{id}"
        );
    }
    for id in [SUBNET_PUBLIC, SUBNET_PRIVATE, SUBNET_DUP_A, SUBNET_DUP_B] {
        assert_eq!(
            get(&format!("{n}/v2.0/subnets/{id}"), &[]).await.0,
            200,
            "{id}"
        );
    }
    let (_, _, body) = get(&format!("{n}/v2.0/networks/{NETWORK_PUBLIC}"), &[]).await;
    assert_eq!(body["network"]["provider:segmentation_id"], Value::Null);

    // Removing a subnet unlinks it from its network and touches nothing else.
    assert!(c.remove(SUBNET_PRIVATE));
    assert!(!c.remove(SUBNET_PRIVATE));
    let (_, _, body) = get(&format!("{n}/v2.0/networks/{NETWORK_PRIVATE}"), &[]).await;
    assert_eq!(body["network"]["subnets"], json!([]));
    let (_, _, img) = get(&format!("{i}/v2/images/{IMAGE_NO_DISTRO}"), &[]).await;
    assert!(img.get("subnets").is_none());
    assert!(c.remove(KEYPAIR_ALICE));
    let url = format!("{}/os-keypairs/{KEYPAIR_ALICE}", c.compute_url());
    assert_eq!(get(&url, &[]).await.0, 404);

    // Keypair names travel percent-encoded; Nova's 2.0 (sent by some SDK endpoints) is refused.
    c.add_keypair(None, json!({"name": "my key"}));
    let url = format!("{}/os-keypairs/my%20key", c.compute_url());
    assert_eq!(get(&url, &[]).await.0, 200);
    let (s, _, body) = get(&url, &[("OpenStack-API-Version", "compute 2.0")]).await;
    assert_eq!(s, 406);
    assert_eq!(
        body["computeFault"]["message"],
        "Version 2.0 is not supported by the API. Minimum is 2.1 and maximum is 2.96."
    );
}

/// A JSON request with the test token; `(status, body)`.
async fn call(
    method: &str,
    url: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = reqwest::Client::new()
        .request(method, url)
        .header("X-Auth-Token", TOKEN)
        .header("Accept", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let (s, _, v) = send(req).await;
    (s, v)
}

/// The `id` under `key` of a create's answer, asserting its status.
fn created(answer: (u16, Value), status: u16, key: &str) -> String {
    assert_eq!(answer.0, status, "{}", answer.1);
    answer.1[key]["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn neutron_networks_routers_ports_and_floating_ips_as_capo_drives_them() {
    let c = FakeCloud::start().await;
    c.set_token_project(TOKEN, "tenant-1");
    let n = format!("{}/v2.0", c.network_url());
    let net = created(
        call(
            "POST",
            &format!("{n}/networks"),
            Some(json!({"network": {"name": "k8s",
            "admin_state_up": true}})),
            &[],
        )
        .await,
        201,
        "network",
    );
    let (s, body) = call(
        "POST",
        &format!("{n}/networks"),
        Some(json!({"network": {"bogus": 1}})),
        &[],
    )
    .await;
    assert_eq!(
        (s, &body["NeutronError"]["message"]),
        (400, &json!("Unrecognized attribute(s) 'bogus'"))
    );
    let (s, body) = call(
        "POST",
        &format!("{n}/subnets"),
        Some(json!({"subnet": {
        "network_id": net, "ip_version": 4, "cidr": "10.6.0.0/24", "name": "k8s"}})),
        &[],
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let subnet = body["subnet"]["id"].as_str().unwrap().to_string();
    assert_eq!(body["subnet"]["gateway_ip"], "10.6.0.1");
    assert_eq!(
        body["subnet"]["allocation_pools"],
        json!([{"start": "10.6.0.2", "end": "10.6.0.254"}])
    );
    assert_eq!(body["subnet"]["project_id"], "tenant-1");
    let (_, body) = call(
        "GET",
        &format!("{n}/ports?network_id={net}&device_owner=network:dhcp"),
        None,
        &[],
    )
    .await;
    assert_eq!(
        body["ports"][0]["fixed_ips"][0]["ip_address"], "10.6.0.2",
        "{body}"
    );

    // A router with a loopback gateway address and an interface on the subnet.
    let (s, body) = call(
        "POST",
        &format!("{n}/routers"),
        Some(json!({"router": {"name": "r",
        "external_gateway_info": {"network_id": NETWORK_PUBLIC}}})),
        &[],
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let router = body["router"]["id"].as_str().unwrap().to_string();
    let gw = &body["router"]["external_gateway_info"]["external_fixed_ips"][0];
    assert_eq!(gw["subnet_id"], SUBNET_PUBLIC);
    assert_eq!(gw["ip_address"], FLOATING_IP_POOL.0);

    // A port with a security group; a floating IP cannot reach it before the interface exists.
    let sg = created(
        call(
            "POST",
            &format!("{n}/security-groups"),
            Some(json!({"security_group":
        {"name": "g", "description": "Cluster API managed group"}})),
            &[],
        )
        .await,
        201,
        "security_group",
    );
    let (_, body) = call("GET", &format!("{n}/security-groups?name=g"), None, &[]).await;
    let rules = body["security_groups"][0]["security_group_rules"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rules.len(), 2, "Neutron's egress rules");
    let rule = json!({"security_group_rule": {"security_group_id": sg, "direction": "egress",
        "ethertype": "IPv4"}});
    let (s, body) = call(
        "POST",
        &format!("{n}/security-group-rules"),
        Some(rule),
        &[],
    )
    .await;
    assert_eq!(
        (s, &body["NeutronError"]["type"]),
        (409, &json!("SecurityGroupRuleExists"))
    );
    let (s, body) = call(
        "POST",
        &format!("{n}/ports"),
        Some(json!({"port": {"name": "m-0",
        "network_id": net, "fixed_ips": [{"subnet_id": subnet}], "security_groups": [sg]}})),
        &[],
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let port = body["port"]["id"].as_str().unwrap().to_string();
    assert_eq!(body["port"]["fixed_ips"][0]["ip_address"], "10.6.0.3");
    let (s, body) = call(
        "POST",
        &format!("{n}/floatingips"),
        Some(json!({"floatingip": {
        "floating_network_id": NETWORK_PUBLIC, "description": "api"}})),
        &[],
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let fip = body["floatingip"]["id"].as_str().unwrap().to_string();
    assert_eq!(body["floatingip"]["floating_ip_address"], "127.100.0.3");
    assert_eq!(body["floatingip"]["status"], "DOWN");
    let attach = json!({"floatingip": {"port_id": port}});
    let (s, body) = call(
        "PUT",
        &format!("{n}/floatingips/{fip}"),
        Some(attach.clone()),
        &[],
    )
    .await;
    assert_eq!(
        (s, &body["NeutronError"]["type"]),
        (404, &json!("ExternalGatewayForFloatingIPNotFound"))
    );
    let (s, body) = call(
        "PUT",
        &format!("{n}/routers/{router}/add_router_interface"),
        Some(json!({"subnet_id": subnet})),
        &[],
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["subnet_ids"], json!([subnet]));
    let (s, body) = call("PUT", &format!("{n}/floatingips/{fip}"), Some(attach), &[]).await;
    assert_eq!(
        (s, &body["floatingip"]["fixed_ip_address"]),
        (200, &json!("10.6.0.3"))
    );
    let (_, body) = call("GET", &format!("{n}/floatingips/{fip}"), None, &[]).await;
    assert_eq!(
        body["floatingip"]["status"], "ACTIVE",
        "up on the next read"
    );
    let (_, body) = call(
        "GET",
        &format!("{n}/ports?fixed_ips=ip_address%3D10.6.0.3"),
        None,
        &[],
    )
    .await;
    assert_eq!(body["ports"].as_array().unwrap().len(), 1);
    let (s, body) = call(
        "PUT",
        &format!("{n}/ports/{port}/tags"),
        Some(json!({"tags": ["a", "b"]})),
        &[],
    )
    .await;
    assert_eq!((s, body), (200, json!({"tags": ["a", "b"]})));
    let (_, body) = call("GET", &format!("{n}/ports?tags=a,b"), None, &[]).await;
    assert_eq!(body["ports"].as_array().unwrap().len(), 1);

    // Deletes in the wrong order are refused as Neutron refuses them.
    let (s, body) = call(
        "PUT",
        &format!("{n}/routers/{router}/remove_router_interface"),
        Some(json!({"subnet_id": subnet})),
        &[],
    )
    .await;
    assert_eq!(
        (s, &body["NeutronError"]["type"]),
        (409, &json!("RouterInterfaceInUseByFloatingIP"))
    );
    // An update naming other attributes keeps the association; an empty one (what gophercloud v2
    // sends for `PortID: nil`) drops it, as Neutron does.
    let url = format!("{n}/floatingips/{fip}");
    let (_, body) = call(
        "PUT",
        &url,
        Some(json!({"floatingip": {"description": "x"}})),
        &[],
    )
    .await;
    assert_eq!(body["floatingip"]["port_id"], json!(port));
    let (_, body) = call("PUT", &url, Some(json!({"floatingip": {}})), &[]).await;
    assert_eq!(
        (
            &body["floatingip"]["port_id"],
            &body["floatingip"]["status"]
        ),
        (&Value::Null, &json!("DOWN"))
    );
    let (s, body) = call("DELETE", &format!("{n}/networks/{net}"), None, &[]).await;
    assert_eq!(
        (s, &body["NeutronError"]["type"]),
        (409, &json!("NetworkInUse"))
    );
    let (s, body) = call("DELETE", &format!("{n}/security-groups/{sg}"), None, &[]).await;
    assert_eq!(
        (s, &body["NeutronError"]["type"]),
        (409, &json!("SecurityGroupInUse"))
    );
    assert_eq!(
        call("DELETE", &format!("{n}/floatingips/{fip}"), None, &[])
            .await
            .0,
        204
    );
    assert_eq!(
        call("DELETE", &format!("{n}/ports/{port}"), None, &[])
            .await
            .0,
        204
    );
    let (s, body) = call("DELETE", &format!("{n}/routers/{router}"), None, &[]).await;
    assert_eq!(
        (s, &body["NeutronError"]["type"]),
        (409, &json!("RouterInUse"))
    );
    assert_eq!(
        call(
            "PUT",
            &format!("{n}/routers/{router}/remove_router_interface"),
            Some(json!({"subnet_id": subnet})),
            &[]
        )
        .await
        .0,
        200
    );
    for path in [
        format!("routers/{router}"),
        format!("networks/{net}"),
        format!("security-groups/{sg}"),
    ] {
        assert_eq!(
            call("DELETE", &format!("{n}/{path}"), None, &[]).await.0,
            204,
            "{path}"
        );
    }
    assert!(c.workload(|w| w.ports.is_empty() && w.security_group_rules.is_empty()));
    assert!(!c.items("subnet").iter().any(|s| s["id"] == subnet.as_str()));

    // A quota the test sets: Neutron's 409 OverQuota.
    c.workload(|w| w.quotas.insert(("tenant-1".into(), "floatingip".into()), 0));
    let (s, body) = call(
        "POST",
        &format!("{n}/floatingips"),
        Some(json!({"floatingip": {
        "floating_network_id": NETWORK_PUBLIC}})),
        &[],
    )
    .await;
    assert_eq!(s, 409);
    assert_eq!(
        body,
        json!({"NeutronError": {"type": "OverQuota",
        "message": "Quota exceeded for resources: ['floatingip'].", "detail": ""}})
    );
    let (_, body) = call("GET", &format!("{n}/extensions"), None, &[]).await;
    let aliases: Vec<&str> = body["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["alias"].as_str().unwrap())
        .collect();
    assert!(
        aliases.contains(&"trunk") && aliases.contains(&"router"),
        "{aliases:?}"
    );
}

#[tokio::test]
async fn octavia_load_balancers_settle_on_reads_and_cascade() {
    let c = FakeCloud::start().await;
    let anon = reqwest::Client::new();
    let (s, _, body) = send(anon.get(format!("{}/load-balancer/", c.base))).await;
    assert_eq!(s, 200);
    assert_eq!(
        body["versions"].as_array().unwrap().last().unwrap()["id"],
        "v2.27"
    );
    let lbaas = format!("{}/load-balancer/v2.0/lbaas", c.base);
    let (s, body) = call(
        "POST",
        &format!("{lbaas}/loadbalancers"),
        Some(json!({"loadbalancer": {
        "name": "api", "vip_subnet_id": SUBNET_PRIVATE, "tags": ["t"]}})),
        &[],
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let lb = body["loadbalancer"].clone();
    let id = lb["id"].as_str().unwrap();
    assert_eq!(lb["provisioning_status"], "PENDING_CREATE");
    assert_eq!(lb["vip_address"], "10.0.0.2");
    let vip = lb["vip_port_id"].as_str().unwrap().to_string();
    assert_eq!(
        c.workload(|w| w.ports.iter().filter(|p| p["id"] == vip.as_str()).count()),
        1
    );
    let listener = json!({"listener": {"name": "api-6443", "protocol": "TCP", "protocol_port": 6443,
        "loadbalancer_id": id, "allowed_cidrs": ["10.0.0.0/8"]}});
    let (s, body) = call(
        "POST",
        &format!("{lbaas}/listeners"),
        Some(listener.clone()),
        &[],
    )
    .await;
    assert_eq!(s, 409);
    assert_eq!(
        body["faultstring"],
        format!("Load Balancer {id} is immutable and cannot be updated.")
    );
    let status = |body: &Value| body["loadbalancer"]["provisioning_status"].clone();
    assert_eq!(
        status(
            &call("GET", &format!("{lbaas}/loadbalancers/{id}"), None, &[])
                .await
                .1
        ),
        "PENDING_CREATE"
    );
    assert_eq!(
        status(
            &call("GET", &format!("{lbaas}/loadbalancers/{id}"), None, &[])
                .await
                .1
        ),
        "ACTIVE"
    );
    let listener_id = created(
        call("POST", &format!("{lbaas}/listeners"), Some(listener), &[]).await,
        201,
        "listener",
    );
    let (_, body) = call("GET", &format!("{lbaas}/loadbalancers?name=api"), None, &[]).await;
    assert_eq!(
        body["loadbalancers"][0]["provisioning_status"],
        "PENDING_UPDATE"
    );
    assert_eq!(
        body["loadbalancers"][0]["listeners"],
        json!([{"id": listener_id}])
    );
    call("GET", &format!("{lbaas}/loadbalancers/{id}"), None, &[]).await;
    let pool = created(
        call(
            "POST",
            &format!("{lbaas}/pools"),
            Some(json!({"pool": {"name": "p",
        "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "listener_id": listener_id}})),
            &[],
        )
        .await,
        201,
        "pool",
    );
    for _ in 0..2 {
        call("GET", &format!("{lbaas}/loadbalancers/{id}"), None, &[]).await;
    }
    let (s, body) = call(
        "POST",
        &format!("{lbaas}/pools/{pool}/members"),
        Some(json!({"member": {
        "name": "m", "address": "10.0.0.9", "protocol_port": 6443}})),
        &[],
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let (s, body) = call("DELETE", &format!("{lbaas}/loadbalancers/{id}"), None, &[]).await;
    assert_eq!(s, 409, "{body}");
    for _ in 0..2 {
        call("GET", &format!("{lbaas}/loadbalancers/{id}"), None, &[]).await;
    }
    let (s, body) = call("DELETE", &format!("{lbaas}/loadbalancers/{id}"), None, &[]).await;
    assert_eq!(
        (s, &body["faultstring"]),
        (
            409,
            &json!(format!(
                "Cannot delete Load Balancer {id} - it has children"
            ))
        )
    );
    assert_eq!(
        call(
            "DELETE",
            &format!("{lbaas}/loadbalancers/{id}?cascade=true"),
            None,
            &[]
        )
        .await
        .0,
        204
    );
    assert!(c.workload(|w| w.listeners.is_empty()
        && w.pools.is_empty()
        && w.members.is_empty()
        && !w.ports.iter().any(|p| p["id"] == vip.as_str())));
    let (_, body) = call("GET", &format!("{lbaas}/loadbalancers"), None, &[]).await;
    assert_eq!(body["loadbalancers"], json!([]), "gone by the next listing");
    let (_, body) = call("GET", &format!("{lbaas}/providers"), None, &[]).await;
    assert_eq!(body["providers"][0]["name"], "amphora");
}

#[tokio::test]
async fn nova_boots_from_volume_and_refuses_as_nova_does() {
    let c = FakeCloud::start().await;
    let n = format!("{}/v2.0", c.network_url());
    let nova = c.compute_url();
    let cinder = format!("{}/volume/v3/{PROJECT_ID}", c.base);
    let mv = [("OpenStack-API-Version", "compute 2.53")];
    let port = |name: &str| json!({"port": {"name": name, "network_id": NETWORK_PRIVATE}});
    let p1 = created(
        call("POST", &format!("{n}/ports"), Some(port("a-0")), &[]).await,
        201,
        "port",
    );
    let server = |name: &str, flavor: &str, image: &str, port: &str| {
        json!({"server": {
        "name": name, "flavorRef": flavor, "imageRef": image, "networks": [{"port": port}],
        "user_data": "I2Nsb3VkLWNvbmZpZw==", "config_drive": false, "tags": ["k8s"]}})
    };

    // Nova's refusals, in its fault format.
    let (s, body) = call(
        "POST",
        &format!("{nova}/servers"),
        Some(server("a", FLAVOR_SMALL, IMAGE_FLATCAR, &p1)),
        &[],
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        body["badRequest"]["message"]
            .as_str()
            .unwrap()
            .split(". ")
            .last()
            .unwrap(),
        "Additional properties are not allowed ('tags' was unexpected)",
        "tags need 2.52"
    );
    c.workload(|w| w.refused_flavors.insert(FLAVOR_MEDIUM.into()));
    let (s, body) = call(
        "POST",
        &format!("{nova}/servers"),
        Some(server("a", FLAVOR_MEDIUM, IMAGE_FLATCAR, &p1)),
        &mv,
    )
    .await;
    assert_eq!(
        (s, body),
        (
            403,
            json!({"forbidden": {"code": 403,
        "message": "Quota exceeded for cores: Requested 2, but already used 0 of 1 cores"}})
        )
    );
    let (s, body) = call(
        "POST",
        &format!("{nova}/servers"),
        Some(server("a", FLAVOR_TINY, IMAGE_FLATCAR, &p1)),
        &mv,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        body["badRequest"]["message"],
        "Flavor's disk is too small for requested image. \
        Flavor disk is 1073741824 bytes, image is 10737418240 bytes."
    );
    let (s, body) = call(
        "POST",
        &format!("{nova}/servers"),
        Some(server("a", FLAVOR_DISK_ZERO, IMAGE_FLATCAR, &p1)),
        &mv,
    )
    .await;
    assert_eq!(
        (s, &body["forbidden"]["message"]),
        (
            403,
            &json!("Only volume-backed servers are allowed for flavors with zero disk.")
        )
    );
    c.remove(IMAGE_DUP_A);
    let (s, body) = call(
        "POST",
        &format!("{nova}/servers"),
        Some(server("a", FLAVOR_SMALL, IMAGE_DUP_A, &p1)),
        &mv,
    )
    .await;
    assert_eq!(
        (s, &body["badRequest"]["message"]),
        (
            400,
            &json!(format!("Image {IMAGE_DUP_A} could not be found."))
        )
    );

    // A root volume from an image: creating, then available; the server boots from it.
    let (s, body) = call(
        "POST",
        &format!("{cinder}/volumes"),
        Some(json!({"volume": {
        "name": "a-root", "size": 12, "imageRef": IMAGE_UBUNTU_KUBE}})),
        &[],
    )
    .await;
    assert_eq!(
        (s, &body["volume"]["status"]),
        (202, &json!("creating")),
        "{body}"
    );
    let vol = body["volume"]["id"].as_str().unwrap().to_string();
    let (_, body) = call("GET", &format!("{cinder}/volumes/{vol}"), None, &[]).await;
    assert_eq!(
        (&body["volume"]["status"], &body["volume"]["bootable"]),
        (&json!("available"), &json!("true"))
    );
    let (s, body) = call(
        "POST",
        &format!("{cinder}/volumes"),
        Some(json!({"volume": {"size": 1,
        "imageRef": IMAGE_UBUNTU_KUBE}})),
        &[],
    )
    .await;
    assert_eq!(
        (s, &body["badRequest"]["message"]),
        (
            400,
            &json!("Image virtual size is 10GB and doesn't fit in a volume of size 1GB.")
        )
    );
    let mut bfv = server("a", FLAVOR_DISK_ZERO, "", &p1);
    bfv["server"]["block_device_mapping_v2"] = json!([{"source_type": "volume",
        "destination_type": "volume", "uuid": vol, "boot_index": 0, "delete_on_termination": true}]);
    let (s, body) = call("POST", &format!("{nova}/servers"), Some(bfv), &mv).await;
    assert_eq!(s, 202, "{body}");
    let id = body["server"]["id"].as_str().unwrap().to_string();
    let (s, body) = call(
        "POST",
        &format!("{nova}/servers"),
        Some(server("b", FLAVOR_SMALL, IMAGE_FLATCAR, &p1)),
        &mv,
    )
    .await;
    assert_eq!(
        (s, &body["conflictingRequest"]["message"]),
        (409, &json!(format!("Port {p1} is still in use.")))
    );
    let server_url = format!("{nova}/servers/{id}");
    let get_server = || call("GET", &server_url, None, &mv);
    let (_, body) = get_server().await;
    assert_eq!(
        (&body["server"]["status"], &body["server"]["addresses"]),
        (&json!("BUILD"), &json!({}))
    );
    let (_, body) = get_server().await;
    assert_eq!(body["server"]["status"], "ACTIVE");
    assert_eq!(body["server"]["image"], "");
    assert_eq!(body["server"]["tags"], json!(["k8s"]));
    assert_eq!(
        body["server"]["addresses"]["private"][0]["OS-EXT-IPS:type"],
        "fixed"
    );
    assert_eq!(
        body["server"]["os-extended-volumes:volumes_attached"],
        json!([{"id": vol, "delete_on_termination": true}])
    );
    let (_, body) = call("GET", &format!("{cinder}/volumes/{vol}"), None, &[]).await;
    assert_eq!(body["volume"]["status"], "in-use");
    assert_eq!(body["volume"]["attachments"][0]["server_id"], json!(id));
    let (_, body) = call(
        "GET",
        &format!("{nova}/servers/detail?name=%5Ea%24"),
        None,
        &mv,
    )
    .await;
    assert_eq!(body["servers"].as_array().unwrap().len(), 1);
    let (_, body) = call(
        "GET",
        &format!("{nova}/servers/detail?name=%5Eb%24"),
        None,
        &mv,
    )
    .await;
    assert_eq!(body["servers"], json!([]));
    let (_, body) = call(
        "GET",
        &format!("{nova}/servers/{id}/os-interface"),
        None,
        &[],
    )
    .await;
    assert_eq!(body["interfaceAttachments"][0]["port_id"], json!(p1));
    let (_, body) = call("GET", &format!("{nova}/os-availability-zone"), None, &[]).await;
    assert_eq!(body["availabilityZoneInfo"][0]["zoneName"], "nova");

    // Deleting: gone at once, its port unbound, its root volume deleted with it.
    assert_eq!(
        call("DELETE", &format!("{nova}/servers/{id}"), None, &[])
            .await
            .0,
        204
    );
    let (s, body) = get_server().await;
    assert_eq!(
        (s, &body["itemNotFound"]["message"]),
        (404, &json!(format!("Instance {id} could not be found.")))
    );
    let (_, body) = call("GET", &format!("{n}/ports/{p1}"), None, &[]).await;
    assert_eq!(
        (&body["port"]["device_id"], &body["port"]["status"]),
        (&json!(""), &json!("DOWN"))
    );
    assert_eq!(
        call("GET", &format!("{cinder}/volumes/{vol}"), None, &[])
            .await
            .0,
        404
    );
}
