//! Requests authenticated by a real Keystone: keystonemiddleware's 401, identity taken from the
//! token, system scope, the token cache, quota project checks, and template/cluster input
//! validated against the fake Glance/Nova/Neutron found through the token's catalog.

use crate::common;

use std::time::Duration;

use crate::common::fakecloud::{self as fc};
use crate::common::stack::{env_exclusive, env_shared, keystone_app, parts};
use crate::common::{FCOS_REFUSAL, assert_magnum_error};
use serde_json::{Value, json};

fn template_body(name: &str) -> Value {
    json!({
        "name": name, "coe": "kubernetes", "image_id": "flatcar-4152",
        "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
        "external_network_id": "public", "keypair_id": "default",
        "network_driver": "calico"
    })
}

#[tokio::test]
async fn missing_or_bad_tokens_get_keystonemiddlewares_401() {
    let _cloud = env_shared().await;
    let (ks, _) = parts().await;
    let app = keystone_app(|_| {}).await;
    for token in [None, Some("not-a-token"), Some("gAAAAAB-bogus-fernet")] {
        let r = app
            .call_token(token, "GET", "/v1/clusters", None, None)
            .await;
        r.assert_status(401);
        assert_eq!(
            r.body,
            json!({"error": {"code": 401, "title": "Unauthorized",
                "message": "The request you have made requires authentication."}})
        );
        assert_eq!(
            r.header("www-authenticate"),
            Some(format!("Keystone uri=\"{}\"", ks.url).as_str())
        );
    }
    // The version documents need no token.
    app.call_token(None, "GET", "/", None, None)
        .await
        .assert_status(200);
    app.call_token(None, "GET", "/v1", None, None)
        .await
        .assert_status(200);
}

#[tokio::test]
async fn identity_and_references_come_from_keystone_and_the_catalog() {
    let _cloud = env_exclusive().await;
    let (ks, cloud) = parts().await;
    let app = keystone_app(|_| {}).await;
    let alice = ks.token("alice", "alpha").await;
    cloud.clear_requests();
    let mut body = template_body("k8s");
    body["cluster_distro"] = json!("something-else");
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clustertemplates",
            None,
            Some(body),
        )
        .await;
    r.assert_status(201);
    assert_eq!(r.body["project_id"], ks.project_id("alpha"));
    assert_eq!(r.body["user_id"], ks.user_id("alice"));
    // Magnum takes the distro from the image's os_distro, whatever the client said.
    assert_eq!(r.body["cluster_distro"], "flatcar");
    // The names the client used are kept; the ids they resolved to are stored for the driver.
    assert_eq!(r.body["image_id"], "flatcar-4152");
    let uuid = r.body["uuid"].as_str().unwrap().to_string();
    let resolved = resolved_of(&app, "cluster_template", &uuid).await;
    assert_eq!(
        resolved,
        json!({"image_id": fc::IMAGE_FLATCAR, "os_distro": "flatcar",
               "flavor_id": fc::FLAVOR_SMALL, "master_flavor_id": fc::FLAVOR_MEDIUM,
               // The flavors' sizes, for the autoscaler's scale-from-zero capacity.
               "flavor_sizes": {
                   fc::FLAVOR_SMALL: {"vcpus": 1, "ram_mib": 2048, "disk_gib": 20},
                   fc::FLAVOR_MEDIUM: {"vcpus": 2, "ram_mib": 4096, "disk_gib": 40}},
               "external_network_id": fc::NETWORK_PUBLIC})
    );
    // Every look-up went out with the caller's own token.
    let seen = cloud.requests();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|s| s.token.as_deref() == Some(alice.as_str())),
        "{seen:?}"
    );

    // A cluster inherits the references, checks the keypair, and records its own ids.
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clusters",
            None,
            Some(
                json!({"name": "c1", "cluster_template_id": uuid, "node_count": 1,
                        "fixed_network": "private", "fixed_subnet": "private-subnet"}),
            ),
        )
        .await;
    r.assert_status(202);
    let cuuid = r.body["uuid"].as_str().unwrap().to_string();
    let resolved = resolved_of(&app, "cluster", &cuuid).await;
    assert_eq!(resolved["fixed_network_id"], fc::NETWORK_PRIVATE);
    assert_eq!(resolved["fixed_subnet_id"], fc::SUBNET_PRIVATE);
    assert_eq!(resolved["image_id"], fc::IMAGE_FLATCAR);
    let r = app
        .call_token(
            Some(&alice),
            "GET",
            &format!("/v1/clusters/{cuuid}"),
            None,
            None,
        )
        .await;
    r.assert_status(200);
    assert_eq!(r.body["user_id"], ks.user_id("alice"));
    assert_eq!(r.body["project_id"], ks.project_id("alpha"));
}

/// One template attribute changed from a valid body → (status, Magnum's message).
#[tokio::test]
async fn template_references_are_validated_with_magnums_messages() {
    let _cloud = env_shared().await;
    let (ks, _) = parts().await;
    let app = keystone_app(|_| {}).await;
    let alice = ks.token("alice", "alpha").await;
    let cases: &[(&str, Value, u16, &str)] = &[
        (
            "image_id",
            json!("no-such"),
            400,
            "Image no-such could not be found.",
        ),
        (
            "image_id",
            json!("no-distro"),
            400,
            "Image no-distro doesn't contain os_distro field.",
        ),
        (
            "image_id",
            json!("dup-image"),
            409,
            "Multiple images exist with same name 'dup-image'. Please use the image ID instead.",
        ),
        (
            "flavor_id",
            json!("m9.huge"),
            400,
            "Unable to find flavor m9.huge.",
        ),
        (
            "master_flavor_id",
            json!("m9.huge"),
            400,
            "Unable to find flavor m9.huge.",
        ),
        (
            "flavor_id",
            json!("ds-zero"),
            400,
            "Flavor with zero root volume size is not supported when boot_volume_size is zero.",
        ),
        (
            "external_network_id",
            json!("private"),
            400,
            "Unable to find external network private.",
        ),
        (
            "fixed_network",
            json!("nope"),
            400,
            "Unable to find fixed network nope.",
        ),
        (
            "fixed_network",
            json!("dup-net"),
            409,
            "Multiple networks exist with same name 'dup-net'. Please use the network ID instead.",
        ),
        (
            "fixed_subnet",
            json!("nope"),
            400,
            "Unable to find fixed subnet nope.",
        ),
        (
            "fixed_subnet",
            json!("dup-subnet"),
            409,
            "Multiple subnets exist with same name 'dup-subnet'. Please use the subnet ID instead.",
        ),
    ];
    for (i, (field, value, status, msg)) in cases.iter().enumerate() {
        let mut body = template_body(&format!("bad-{i}"));
        body[*field] = value.clone();
        let r = app
            .call_token(
                Some(&alice),
                "POST",
                "/v1/clustertemplates",
                None,
                Some(body),
            )
            .await;
        assert_magnum_error(&r, *status, msg);
    }
    // Ids work as well as names; a boot volume lifts the root-disk rule; the image's
    // kube_version is recorded.
    let mut body = template_body("by-id");
    body["image_id"] = json!(fc::IMAGE_UBUNTU_KUBE);
    body["flavor_id"] = json!("ds-zero");
    body["labels"] = json!({"boot_volume_size": "20"});
    body["external_network_id"] = json!(fc::NETWORK_PUBLIC);
    body["fixed_network"] = json!(fc::NETWORK_DUP_A);
    body["fixed_subnet"] = json!(fc::SUBNET_DUP_B);
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clustertemplates",
            None,
            Some(body),
        )
        .await;
    r.assert_status(201);
    assert_eq!(r.body["cluster_distro"], "ubuntu");
    let resolved = resolved_of(&app, "cluster_template", r.body["uuid"].as_str().unwrap()).await;
    assert_eq!(resolved["kube_version"], "v1.30.4");
    assert_eq!(resolved["fixed_network_id"], fc::NETWORK_DUP_A);
    assert_eq!(resolved["fixed_subnet_id"], fc::SUBNET_DUP_B);

    // PATCH re-validates the references.
    let r = app
        .call_token(
            Some(&alice),
            "PATCH",
            "/v1/clustertemplates/by-id",
            None,
            Some(json!([{"op": "replace", "path": "/image_id", "value": "no-distro"}])),
        )
        .await;
    assert_magnum_error(&r, 400, "Image no-distro doesn't contain os_distro field.");
    let r = app
        .call_token(
            Some(&alice),
            "PATCH",
            "/v1/clustertemplates/by-id",
            None,
            Some(json!([{"op": "replace", "path": "/image_id", "value": "flatcar-4152"}])),
        )
        .await;
    r.assert_status(200);
    // cluster_distro stays what it was at create (Magnum never recomputes it).
    assert_eq!(r.body["cluster_distro"], "ubuntu");
}

/// An image this driver cannot boot (Fedora CoreOS: Ignition spec 3 only, Cluster API's kubeadm
/// bootstrap writes spec 2.3) is refused at template create, as Magnum refuses a cluster type
/// no driver provides, naming the os_distro values that boot; the same template on a Flatcar
/// image is taken.
#[tokio::test]
async fn an_image_whose_os_distro_cannot_boot_is_a_400_naming_the_supported_ones() {
    let _cloud = env_exclusive().await;
    let (ks, cloud) = parts().await;
    let app = keystone_app(|_| {}).await;
    let alice = ks.token("alice", "alpha").await;
    let fcos = cloud.add_image(json!({"name": "fedora-coreos-40", "os_distro": "fedora-coreos"}));
    let mut body = template_body("fcos");
    body["image_id"] = json!("fedora-coreos-40");
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clustertemplates",
            None,
            Some(body),
        )
        .await;
    cloud.remove(&fcos);
    assert_magnum_error(&r, 400, FCOS_REFUSAL);
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clustertemplates",
            None,
            Some(template_body("flatcar")),
        )
        .await;
    r.assert_status(201);
    assert_eq!(r.body["cluster_distro"], "flatcar");
}

#[tokio::test]
async fn cluster_keypair_and_flavor_overrides_are_checked() {
    let _cloud = env_shared().await;
    let (ks, _) = parts().await;
    let app = keystone_app(|_| {}).await;
    let alice = ks.token("alice", "alpha").await;
    let mut body = template_body("t");
    body.as_object_mut().unwrap().remove("keypair_id");
    app.call_token(
        Some(&alice),
        "POST",
        "/v1/clustertemplates",
        None,
        Some(body),
    )
    .await
    .assert_status(201);
    let cluster = |extra: Value| {
        let mut b = json!({"name": "c", "cluster_template_id": "t", "node_count": 1});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clusters",
            None,
            Some(cluster(json!({"keypair": "missing"}))),
        )
        .await;
    assert_magnum_error(&r, 404, "Unable to find keypair missing.");
    // With the keypair also wrong, the answer is still Magnum's first check (flavors come before
    // the keypair), whichever of the look-ups, which go out together, returns first.
    let both_wrong = json!({"keypair": "missing", "flavor_id": "ds-zero"});
    let mut bodies = vec![json!({"keypair": "default", "flavor_id": "ds-zero"})];
    bodies.extend(std::iter::repeat_n(both_wrong, 5));
    for extra in bodies {
        let r = app
            .call_token(
                Some(&alice),
                "POST",
                "/v1/clusters",
                None,
                Some(cluster(extra)),
            )
            .await;
        assert_magnum_error(
            &r,
            400,
            "Flavor with zero root volume size is not supported when boot_volume_size is zero.",
        );
    }
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clusters",
            None,
            Some(cluster(
                json!({"keypair": "default", "flavor_id": "m1.tiny"}),
            )),
        )
        .await;
    r.assert_status(202);
    // Nothing was recorded for the refused requests.
    assert_eq!(app.sql_i64("SELECT count(*) FROM cluster").await, 1);
}

#[tokio::test]
async fn an_unreachable_or_slow_cloud_is_a_503_not_a_500() {
    let _cloud = env_exclusive().await;
    let (ks, cloud) = parts().await;
    let app = keystone_app(|c| c.openstack.timeout_secs = 1).await;
    let alice = ks.token("alice", "alpha").await;
    cloud.set_down(true);
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clustertemplates",
            None,
            Some(template_body("down")),
        )
        .await;
    cloud.set_down(false);
    assert_magnum_error(&r, 503, "Glance");
    assert_eq!(r.body["errors"][0]["code"], "server");

    cloud.set_delay(Duration::from_millis(2500));
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clustertemplates",
            None,
            Some(template_body("slow")),
        )
        .await;
    cloud.set_delay(Duration::ZERO);
    r.assert_status(503);
    assert_eq!(
        app.sql_i64("SELECT count(*) FROM cluster_template").await,
        0
    );
}

#[tokio::test]
async fn system_scoped_tokens_are_refused_by_policy() {
    let _cloud = env_shared().await;
    let (ks, _) = parts().await;
    let app = keystone_app(|_| {}).await;
    let system = ks.system_token("admin").await.unwrap();
    let r = app
        .call_token(Some(&system), "GET", "/v1/clusters", None, None)
        .await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow cluster:get_all to be performed.",
    );
    let r = app
        .call_token(Some(&system), "GET", "/v1/mservices", None, None)
        .await;
    r.assert_status(403);
}

#[tokio::test]
async fn a_revoked_token_stops_working_within_the_cache_time() {
    let _cloud = env_shared().await;
    let (ks, _) = parts().await;
    // Long enough that revoking the token (a Keystone call, slow on a loaded machine) ends well
    // within it, so the second request is answered from the cache whatever the load.
    const CACHE_SECS: u64 = 15;
    let app = keystone_app(|c| c.keystone.token_cache_time = CACHE_SECS).await;
    let token = ks.issue_token("bob", "beta").await.unwrap();
    app.call_token(Some(&token), "GET", "/v1/clusters", None, None)
        .await
        .assert_status(200);
    // The token was cached at the latest now: it expires by `cached + CACHE_SECS`.
    let cached = tokio::time::Instant::now();
    ks.revoke(&token).await;
    // Still cached: no Keystone round trip for this request.
    app.call_token(Some(&token), "GET", "/v1/clusters", None, None)
        .await
        .assert_status(200);
    // The cache time running out is the behaviour under test: a pause until just past it.
    tokio::time::sleep_until(cached + Duration::from_millis(CACHE_SECS * 1000 + 500)).await;
    app.call_token(Some(&token), "GET", "/v1/clusters", None, None)
        .await
        .assert_status(401);
}

#[tokio::test]
async fn quota_creation_checks_the_project_in_keystone() {
    let _cloud = env_shared().await;
    let (ks, _) = parts().await;
    let app = keystone_app(|_| {}).await;
    let admin = ks.admin_token().await;
    let r = app
        .call_token(
            Some(&admin),
            "POST",
            "/v1/quotas",
            None,
            Some(json!({"project_id": "no-such-project", "resource": "Cluster", "hard_limit": 3})),
        )
        .await;
    assert_magnum_error(
        &r,
        404,
        "The project_id no-such-project could not be found.",
    );
    let beta = ks.project_id("beta").to_string();
    let r = app
        .call_token(
            Some(&admin),
            "POST",
            "/v1/quotas",
            None,
            Some(json!({"project_id": beta, "resource": "Cluster", "hard_limit": 3})),
        )
        .await;
    r.assert_status(201);
    assert_eq!(r.body["project_id"], beta);
}

#[tokio::test]
async fn keystone_down_cached_tokens_pass_new_ones_get_503() {
    let _env = env_exclusive().await;
    let (ks, _) = parts().await;
    let app = keystone_app(|_| {}).await;
    let alice = ks.token("alice", "alpha").await;
    let admin = ks.admin_token().await;
    let bob = ks.issue_token("bob", "beta").await.unwrap();
    app.call_token(Some(&alice), "GET", "/v1/clusters", None, None)
        .await
        .assert_status(200);
    // Readiness: versions for an admin, `ok` for anyone else.
    let keystone_check = |body: &Value| -> Value {
        body["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "keystone")
            .cloned()
            .unwrap_or_else(|| panic!("no keystone check: {body}"))
    };
    let anonymous = app.call_token(None, "GET", "/readyz", None, None).await;
    anonymous.assert_status(200);
    assert_eq!(
        keystone_check(&anonymous.body)["detail"],
        "ok",
        "{}",
        anonymous.body
    );
    let shown = app
        .call_token(Some(&admin), "GET", "/readyz", None, None)
        .await;
    shown.assert_status(200);
    let detail = keystone_check(&shown.body)["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.starts_with("identity "), "{}", shown.body);
    tokio::task::spawn_blocking(move || ks.stop())
        .await
        .unwrap();
    let cached = app
        .call_token(Some(&alice), "GET", "/v1/clusters", None, None)
        .await;
    let uncached = app
        .call_token(Some(&bob), "GET", "/v1/clusters", None, None)
        .await;
    // Keystone's outage is reported, but the replica stays ready: reads go on.
    let ready = app.call_token(None, "GET", "/readyz", None, None).await;
    tokio::task::spawn_blocking(move || ks.start())
        .await
        .unwrap();
    ready.assert_status(200);
    let k = keystone_check(&ready.body);
    assert_eq!(
        (k["ok"].clone(), k["optional"].clone()),
        (json!(false), json!(true)),
        "{}",
        ready.body
    );
    cached.assert_status(200);
    uncached.assert_status(503);
    assert_eq!(
        uncached.body,
        json!({"error": {"code": 503, "title": "Service Unavailable",
            "message": "The Keystone service is temporarily unavailable."}})
    );
    // Back up: the new token validates.
    app.call_token(Some(&bob), "GET", "/v1/clusters", None, None)
        .await
        .assert_status(200);
}

/// Every endpoint × {admin, owner member, other project's member, reader, no token, revoked
/// token}; `None` skips a caller for a row (a mutation whose success would change later rows).
#[tokio::test]
async fn role_matrix_never_lets_another_project_in() {
    let _env = env_shared().await;
    let (ks, _) = parts().await;
    let app = keystone_app(|_| {}).await;
    let admin = ks.admin_token().await;
    let alice = ks.token("alice", "alpha").await;
    let bob = ks.token("bob", "beta").await;
    let rita = ks.token("rita", "alpha").await;
    let revoked = ks.issue_token("alice", "alpha").await.unwrap();
    ks.revoke(&revoked).await;
    let alpha = ks.project_id("alpha").to_string();

    for name in ["mt", "used"] {
        app.call_token(
            Some(&alice),
            "POST",
            "/v1/clustertemplates",
            None,
            Some(template_body(name)),
        )
        .await
        .assert_status(201);
    }
    let r = app
        .call_token(
            Some(&alice),
            "POST",
            "/v1/clusters",
            None,
            Some(json!({"name": "mc", "cluster_template_id": "used", "node_count": 1})),
        )
        .await;
    r.assert_status(202);
    let mc = r.body["uuid"].as_str().unwrap().to_string();
    app.wait_cluster_token(&alice, &mc, "CREATE_COMPLETE").await;

    let patch_name = json!([{"op": "replace", "path": "/name", "value": "mt"}]);
    let node_count = json!([{"op": "replace", "path": "/node_count", "value": 2}]);
    type Row<'a> = (
        &'a str,
        String,
        Option<&'a str>,
        Option<Value>,
        [Option<u16>; 4],
    );
    let rows: Vec<Row> = vec![
        (
            "GET",
            "/v1/clustertemplates".into(),
            None,
            None,
            [Some(200), Some(200), Some(200), Some(200)],
        ),
        (
            "GET",
            "/v1/clustertemplates/mt".into(),
            None,
            None,
            [Some(200), Some(200), Some(404), Some(200)],
        ),
        (
            "GET",
            "/v1/clustertemplates/detail".into(),
            None,
            None,
            [Some(200), Some(200), Some(200), Some(200)],
        ),
        (
            "PATCH",
            "/v1/clustertemplates/mt".into(),
            None,
            Some(patch_name),
            [Some(200), Some(200), Some(404), Some(403)],
        ),
        (
            "POST",
            "/v1/clustertemplates".into(),
            None,
            Some(template_body("new")),
            [Some(201), Some(201), Some(201), Some(403)],
        ),
        (
            "DELETE",
            "/v1/clustertemplates/used".into(),
            None,
            None,
            [Some(400), Some(400), Some(404), Some(403)],
        ),
        (
            "GET",
            "/v1/clusters".into(),
            None,
            None,
            [Some(200), Some(200), Some(200), Some(200)],
        ),
        (
            "GET",
            "/v1/clusters/detail".into(),
            None,
            None,
            [Some(200), Some(200), Some(200), Some(200)],
        ),
        (
            "GET",
            format!("/v1/clusters/{mc}"),
            None,
            None,
            [Some(200), Some(200), Some(404), Some(200)],
        ),
        (
            "GET",
            format!("/v1/clusters/{mc}/nodegroups"),
            Some("1.9"),
            None,
            [Some(200), Some(200), Some(404), Some(200)],
        ),
        (
            "GET",
            format!("/v1/clusters/{mc}/nodegroups/default-worker"),
            Some("1.9"),
            None,
            [Some(200), Some(200), Some(404), Some(200)],
        ),
        (
            "POST",
            format!("/v1/clusters/{mc}/nodegroups"),
            Some("1.9"),
            Some(json!({"name": "ng", "node_count": 1})),
            [None, None, Some(404), Some(403)],
        ),
        (
            "GET",
            "/v1/quotas".into(),
            None,
            None,
            [Some(200), Some(403), Some(403), Some(403)],
        ),
        (
            "POST",
            "/v1/quotas".into(),
            None,
            Some(json!({"project_id": alpha, "resource": "Cluster", "hard_limit": 5})),
            [None, Some(403), Some(403), Some(403)],
        ),
        (
            "GET",
            "/v1/mservices".into(),
            None,
            None,
            [Some(200), Some(403), Some(403), Some(403)],
        ),
        (
            "GET",
            "/v1/stats".into(),
            None,
            None,
            [Some(200), Some(200), Some(200), Some(200)],
        ),
        (
            "GET",
            format!("/v1/stats?project_id={alpha}"),
            None,
            None,
            [Some(200), Some(200), Some(403), Some(200)],
        ),
        (
            "GET",
            format!("/v1/certificates/{mc}"),
            None,
            None,
            [None, None, Some(404), Some(403)],
        ),
        // Another project does not see the cluster; an admin of another project does and is
        // refused: a credential created with their token would belong to their project.
        (
            "PATCH",
            format!("/v1/credentials/{mc}"),
            Some("1.12"),
            None,
            [Some(403), None, Some(404), Some(403)],
        ),
        (
            "PATCH",
            format!("/v1/clusters/{mc}"),
            None,
            Some(node_count),
            [None, Some(202), Some(404), Some(403)],
        ),
        (
            "DELETE",
            format!("/v1/clusters/{mc}"),
            None,
            None,
            [None, None, Some(404), Some(403)],
        ),
    ];
    let callers = [
        ("admin", &admin),
        ("alice", &alice),
        ("bob", &bob),
        ("rita", &rita),
    ];
    let mut failures = Vec::new();
    for (method, path, v, body, expect) in &rows {
        // Denied callers first, so a permitted mutation cannot change what they see.
        for (name, code) in [("none", 401), ("revoked", 401)] {
            let token = (name == "revoked").then_some(revoked.as_str());
            let r = app.call_token(token, method, path, *v, body.clone()).await;
            if r.status.as_u16() != code {
                failures.push(format!(
                    "{method} {path} as {name}: {} (want {code})",
                    r.status
                ));
            }
        }
        let mut order: Vec<usize> = (0..4).collect();
        order.sort_by_key(|i| expect[*i].is_some_and(|c| c < 300));
        for i in order {
            let Some(code) = expect[i] else { continue };
            let (name, token) = callers[i];
            let r = app
                .call_token(Some(token), method, path, *v, body.clone())
                .await;
            if r.status.as_u16() != code {
                failures.push(format!(
                    "{method} {path} as {name}: {} (want {code}) {}",
                    r.status, r.body
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    app.wait_cluster_token(&alice, &mc, "UPDATE_COMPLETE").await;
    app.call_token(
        Some(&alice),
        "DELETE",
        &format!("/v1/clusters/{mc}"),
        None,
        None,
    )
    .await
    .assert_status(204);
}

/// The `resolved` column of a template or cluster row.
async fn resolved_of(app: &common::TestApp, table: &str, uuid: &str) -> Value {
    let sql = match table {
        "cluster" => "SELECT resolved FROM cluster WHERE uuid::text = $1",
        _ => "SELECT resolved FROM cluster_template WHERE uuid::text = $1",
    };
    sqlx::query_scalar(sql)
        .bind(uuid)
        .fetch_one(&app.state.pool)
        .await
        .unwrap()
}

/// The service may authenticate with an application credential instead of a password; a wrong
/// secret leaves it unable to validate anything (503, never 500 or a pass).
#[tokio::test]
async fn the_service_can_authenticate_with_an_application_credential() {
    let _env = env_shared().await;
    let (ks, _) = parts().await;
    let svc = ks.service_token().await;
    let path = format!(
        "/users/{}/application_credentials",
        ks.user_id(common::keystone::SERVICE_USER)
    );
    let body = json!({"application_credential": {
        "name": format!("magnum-capi-test-{}", uuid::Uuid::new_v4().simple())}});
    let (status, cred) = ks
        .request("POST", &path, Some(&svc), None, Some(body))
        .await
        .unwrap();
    assert_eq!(status, 201, "{cred}");
    let id = cred["application_credential"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let secret = cred["application_credential"]["secret"]
        .as_str()
        .unwrap()
        .to_string();
    let alice = ks.token("alice", "alpha").await;
    // (Keystone hashes secrets with bcrypt, which reads 72 bytes: a wrong one must differ early.)
    for (secret, want) in [("not-the-secret".to_string(), 503), (secret, 200)] {
        let app = keystone_app(|c| {
            c.keystone.username = None;
            c.keystone.password = None;
            c.keystone.project_name = None;
            c.keystone.application_credential_id = Some(id.clone());
            c.keystone.application_credential_secret = Some(secret.into());
        })
        .await;
        app.call_token(Some(&alice), "GET", "/v1/clusters", None, None)
            .await
            .assert_status(want);
    }
}
