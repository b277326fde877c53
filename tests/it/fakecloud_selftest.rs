//! Checks the fake Glance / Nova / Neutron of `common/fakecloud.rs` against the wire format.

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
