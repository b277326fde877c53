//! `/v1/clustertemplates`: create, show, list/pagination, visibility, PATCH, in-use rules, delete.
//! Expected bodies are copied from the real-Magnum captures in
//! `../shared/reference/magnum-samples/*.json` (named next to each literal).
use crate::common::*;

use serde_json::{Value, json};

const BASE: &str = "http://127.0.0.1:9511";

/// The request body of clustertemplate_create.json (and most error samples).
fn sample_request() -> Value {
    json!({"name": "k8s-sample-200219", "image_id": "ubuntu-jammy", "keypair_id": "magnum-test",
        "external_network_id": "public", "flavor_id": "ds2G", "master_flavor_id": "ds2G",
        "coe": "kubernetes", "network_driver": "flannel", "docker_volume_size": 10,
        "dns_nameserver": "8.8.8.8", "labels": {"kube_tag": "v1.27.3"}})
}

/// The response body of clustertemplate_create.json.
fn sample_response() -> Value {
    json!({"uuid": "f03c1849-6105-42cf-9575-05e5bb22cf88", "name": "k8s-sample-200219",
        "coe": "kubernetes", "image_id": "ubuntu-jammy", "flavor_id": "ds2G",
        "master_flavor_id": "ds2G", "dns_nameserver": "8.8.8.8", "keypair_id": "magnum-test",
        "external_network_id": "public", "fixed_network": null, "fixed_subnet": null,
        "network_driver": "flannel", "apiserver_port": null, "docker_volume_size": 10,
        "cluster_distro": "ubuntu",
        "links": [
            {"href": "http://127.0.0.1:9511/v1/clustertemplates/f03c1849-6105-42cf-9575-05e5bb22cf88", "rel": "self"},
            {"href": "http://127.0.0.1:9511/clustertemplates/f03c1849-6105-42cf-9575-05e5bb22cf88", "rel": "bookmark"}],
        "http_proxy": null, "https_proxy": null, "no_proxy": null, "volume_driver": null,
        "registry_enabled": false, "labels": {"kube_tag": "v1.27.3"}, "tls_disabled": false,
        "public": false, "server_type": "vm", "insecure_registry": null,
        "docker_storage_driver": null, "master_lb_enabled": false, "floating_ip_enabled": true,
        "project_id": "c8b157b57076449e9ff39361466e1848",
        "user_id": "84ea2156a57e4ffcbcd6a0d29daffba4", "hidden": false, "tags": null,
        "driver": "k8s_capi_helm_v1", "created_at": "2026-11-21T20:02:22+00:00", "updated_at": null})
}

/// Values that depend on who/when/which OpenStack: compared by type only, or (cluster_distro,
/// which Magnum copies from the Glance image's `os_distro`) not at all.
const VOLATILE: [&str; 7] = [
    "uuid",
    "links",
    "project_id",
    "user_id",
    "created_at",
    "driver",
    "cluster_distro",
];

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Asserts `ours` has exactly the sample's keys, the same JSON types (except cluster_distro),
/// and equal values for everything not in [`VOLATILE`].
#[track_caller]
fn assert_like_sample(ours: &Value, sample: &Value) {
    assert_eq!(keys(ours), keys(sample));
    for (k, sv) in sample.as_object().unwrap() {
        let ov = &ours[k];
        if k != "cluster_distro" {
            assert_eq!(json_type(ov), json_type(sv), "type of {k}: {ov} vs {sv}");
        }
        if !VOLATILE.contains(&k.as_str()) {
            assert_eq!(ov, sv, "value of {k}");
        }
    }
}

#[track_caller]
fn assert_links(t: &Value) {
    let uuid = t["uuid"].as_str().unwrap();
    assert_eq!(
        t["links"],
        json!([
            {"href": format!("{BASE}/v1/clustertemplates/{uuid}"), "rel": "self"},
            {"href": format!("{BASE}/clustertemplates/{uuid}"), "rel": "bookmark"},
        ])
    );
}

fn names(r: &Resp) -> Vec<String> {
    r.names("clustertemplates")
}

fn uuids(r: &Resp) -> Vec<String> {
    r.body["clustertemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uuid"].as_str().unwrap().to_string())
        .collect()
}

async fn create(t: &TestApp, who: &As, body: Value) -> Value {
    let r = t.post(who, "/v1/clustertemplates", body).await;
    r.assert_status(201);
    r.body
}

async fn patch_ok(t: &TestApp, who: &As, ident: &str, ops: Value) -> Value {
    let r = t
        .patch(who, &format!("/v1/clustertemplates/{ident}"), ops)
        .await;
    r.assert_status(200);
    r.body
}

// ---------------------------------------------------------------------------------------------
// Create

#[tokio::test]
async fn create_returns_201_location_and_the_sample_shape() {
    let t = app().await;
    let r = t
        .post(&ADMIN, "/v1/clustertemplates", sample_request())
        .await;
    r.assert_status(201);
    let uuid = r.body["uuid"].as_str().unwrap();
    assert!(uuid::Uuid::try_parse(uuid).is_ok());
    assert_eq!(
        r.header("location").unwrap(),
        format!("{BASE}/v1/clustertemplates/{uuid}")
    );
    assert_like_sample(&r.body, &sample_response());
    assert_links(&r.body);
    assert_eq!(r.body["project_id"], ADMIN.project);
    assert_eq!(r.body["user_id"], ADMIN.user);
    let created = r.body["created_at"].as_str().unwrap();
    assert!(created.ends_with("+00:00"), "{created}");
    assert!(chrono::DateTime::parse_from_rfc3339(created).is_ok());
    // GET returns the same document.
    let g = t.get(&ADMIN, &format!("/v1/clustertemplates/{uuid}")).await;
    g.assert_status(200);
    assert_eq!(g.body, r.body);
}

#[tokio::test]
async fn create_applies_magnum_defaults() {
    let t = app().await;
    let b = create(&t, &ALICE, json!({"image_id": "img", "coe": "kubernetes"})).await;
    // Magnum's default is `flannel`; ours is the configured `[api] default_network_driver`.
    assert_eq!(
        b["network_driver"],
        t.state.config.api.default_network_driver.as_str()
    );
    assert_eq!(b["server_type"], "vm");
    assert_eq!(b["floating_ip_enabled"], true);
    assert_eq!(b["master_lb_enabled"], false);
    assert_eq!(b["registry_enabled"], false);
    assert_eq!(b["tls_disabled"], false);
    assert_eq!(b["public"], false);
    assert_eq!(b["hidden"], false);
    assert_eq!(b["labels"], json!({}));
    assert_eq!(b["keypair_id"], Value::Null);
    assert_eq!(b["updated_at"], Value::Null);
    assert!(b["driver"].is_string());
}

#[tokio::test]
async fn create_network_driver_default_and_allowed_list_follow_config() {
    let t = app_with(|c| {
        c.api.default_network_driver = "flannel".into();
        c.api.allowed_network_drivers = vec!["flannel".into(), "calico".into()];
    })
    .await;
    let b = create(&t, &ALICE, json!({"image_id": "img", "coe": "kubernetes"})).await;
    assert_eq!(b["network_driver"], "flannel");
    let b = create(
        &t,
        &ALICE,
        json!({"image_id": "img", "coe": "kubernetes", "network_driver": "calico"}),
    )
    .await;
    assert_eq!(b["network_driver"], "calico");
    // Supported but not allowed here.
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"image_id": "img", "coe": "kubernetes", "network_driver": "cilium"}),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Network driver type cilium is not allowed, expecting a flannel/calico/unspecified network driver. ",
    );
}

#[tokio::test]
async fn create_accepts_a_client_supplied_uuid() {
    let t = app().await;
    let u = "0b6f0a96-5bd3-4c36-9a4e-2d12f5d04a0e";
    let b = create(
        &t,
        &ALICE,
        json!({"uuid": u, "image_id": "img", "coe": "kubernetes"}),
    )
    .await;
    assert_eq!(b["uuid"], u);
}

#[tokio::test]
async fn create_default_name_is_greek_n_template() {
    let t = app().await;
    const GREEK: [&str; 24] = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
        "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi",
        "chi", "psi", "omega",
    ];
    for body in [
        json!({"image_id": "img", "coe": "kubernetes"}),
        json!({"image_id": "img", "coe": "kubernetes", "name": null}),
    ] {
        let b = create(&t, &ALICE, body).await;
        let name = b["name"].as_str().unwrap();
        let parts: Vec<&str> = name.split('-').collect();
        assert_eq!(parts.len(), 3, "{name}");
        assert!(GREEK.contains(&parts[0]), "{name}");
        let n: u32 = parts[1].parse().unwrap();
        assert!((1..=24).contains(&n), "{name}");
        assert_eq!(parts[2], "template");
    }
}

#[tokio::test]
async fn create_stores_label_values_as_strings() {
    let t = app().await;
    let b = create(
        &t,
        &ALICE,
        json!({"image_id": "img", "coe": "kubernetes",
            "labels": {"t": true, "f": false, "n": 5, "s": "x", "fl": 1.5}}),
    )
    .await;
    let expected = json!({"t": "True", "f": "False", "n": "5", "s": "x", "fl": "1.5"});
    assert_eq!(b["labels"], expected);
    let g = t
        .get(
            &ALICE,
            &format!("/v1/clustertemplates/{}", b["uuid"].as_str().unwrap()),
        )
        .await;
    assert_eq!(g.body["labels"], expected);
}

#[tokio::test]
async fn create_bad_coe_is_400_as_error_400_bad_coe() {
    let t = app().await;
    let mut body = sample_request();
    body["name"] = json!("x");
    body["coe"] = json!("nomad");
    let r = t.post(&ADMIN, "/v1/clustertemplates", body).await;
    r.assert_status(400);
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "client", "status": 400,
            "title": "Invalid input for field/attribute coe",
            "detail": "Invalid input for field/attribute coe. Value: 'nomad'. Value should be one of: kubernetes",
            "links": []}]})
    );
}

#[tokio::test]
async fn create_bad_network_driver_is_400_as_error_400_bad_network_driver() {
    let t = app().await;
    let mut body = sample_request();
    body["name"] = json!("x");
    body["network_driver"] = json!("weird");
    let r = t.post(&ADMIN, "/v1/clustertemplates", body).await;
    r.assert_status(400);
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "client", "status": 400,
            "title": "Network driver type weird is not supported, expecting a flannel/calico/cilium/unspecified network driver",
            "detail": "Network driver type weird is not supported, expecting a flannel/calico/cilium/unspecified network driver.",
            "links": []}]})
    );
}

#[tokio::test]
async fn create_missing_image_is_400_as_error_400_missing_image() {
    let t = app().await;
    let mut body = sample_request();
    body.as_object_mut().unwrap().remove("image_id");
    let r = t.post(&ADMIN, "/v1/clustertemplates", body).await;
    r.assert_status(400);
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "client", "status": 400,
            "title": "Invalid input for field/attribute image_id",
            "detail": "Invalid input for field/attribute image_id. Value: 'None'. Mandatory field missing.",
            "links": []}]})
    );
}

#[tokio::test]
async fn create_missing_coe_is_400() {
    let t = app().await;
    let r = t
        .post(&ALICE, "/v1/clustertemplates", json!({"image_id": "img"}))
        .await;
    assert_magnum_error(
        &r,
        400,
        "Invalid input for field/attribute coe. Value: 'None'. Mandatory field missing.",
    );
}

#[tokio::test]
async fn create_public_by_non_admin_is_403_as_demo_public_forbidden() {
    let t = app().await;
    let mut body = sample_request();
    body["name"] = json!("k8s-demo-public");
    body["public"] = json!(true);
    let r = t.post(&ALICE, "/v1/clustertemplates", body.clone()).await;
    r.assert_status(403);
    assert_eq!(
        r.body,
        magnum_error(
            403,
            "Not authorized to set public or hidden flag for cluster template."
        )
    );
    body["public"] = json!(false);
    body["hidden"] = json!(true);
    let r = t.post(&ALICE, "/v1/clustertemplates", body.clone()).await;
    r.assert_status(403);
    // Admin may.
    body["public"] = json!(true);
    let b = create(&t, &ADMIN, body).await;
    assert_eq!(b["public"], true);
    assert_eq!(b["hidden"], true);
}

#[tokio::test]
async fn create_by_reader_is_403() {
    let t = app().await;
    let r = t
        .post(
            &READER,
            "/v1/clustertemplates",
            json!({"image_id": "img", "coe": "kubernetes"}),
        )
        .await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow clustertemplate:create to be performed.",
    );
}

#[tokio::test]
async fn create_duplicate_uuid_is_409() {
    let t = app().await;
    let u = "0b6f0a96-5bd3-4c36-9a4e-2d12f5d04a0e";
    let body = json!({"uuid": u, "image_id": "img", "coe": "kubernetes"});
    create(&t, &ALICE, body.clone()).await;
    let r = t.post(&BOB, "/v1/clustertemplates", body).await;
    r.assert_status(409);
    assert_eq!(
        r.body,
        magnum_error(
            409,
            &format!("A ClusterTemplate with UUID {u} already exists.")
        )
    );
}

#[tokio::test]
async fn create_duplicate_names_are_accepted() {
    let t = app().await;
    t.template(&ALICE, "dup").await;
    t.template(&ALICE, "dup").await;
}

// ---------------------------------------------------------------------------------------------
// Show

#[tokio::test]
async fn show_by_uuid_and_by_name() {
    let t = app().await;
    let uuid = t.template(&ALICE, "by-name").await;
    let a = t.get(&ALICE, &format!("/v1/clustertemplates/{uuid}")).await;
    a.assert_status(200);
    let b = t.get(&ALICE, "/v1/clustertemplates/by-name").await;
    b.assert_status(200);
    assert_eq!(a.body, b.body);
    assert_eq!(a.body["uuid"], uuid.as_str());
    // An integer-looking ident is a name, not an id.
    let r = t.get(&ALICE, "/v1/clustertemplates/1").await;
    r.assert_status(404);
    let n = t.template(&ALICE, "42").await;
    let r = t.get(&ALICE, "/v1/clustertemplates/42").await;
    r.assert_status(200);
    assert_eq!(r.body["uuid"], n.as_str());
}

#[tokio::test]
async fn show_by_ambiguous_name_is_409_as_error_409_show_by_ambiguous_name() {
    let t = app().await;
    t.template(&ADMIN, "k8s-sample-renamed-200219").await;
    t.template(&ADMIN, "k8s-sample-renamed-200219").await;
    let r = t
        .get(&ADMIN, "/v1/clustertemplates/k8s-sample-renamed-200219")
        .await;
    r.assert_status(409);
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "client", "status": 409,
            "title": "Multiple ClusterTemplates exist with same name",
            "detail": "Multiple ClusterTemplates exist with same name. Please use the ClusterTemplate uuid instead.",
            "links": []}]})
    );
}

#[tokio::test]
async fn show_unknown_uuid_is_404_as_error_404_clustertemplate_show() {
    let t = app().await;
    let r = t
        .get(
            &ADMIN,
            "/v1/clustertemplates/00000000-0000-0000-0000-000000000000",
        )
        .await;
    r.assert_status(404);
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "client", "status": 404,
            "title": "ClusterTemplate 00000000-0000-0000-0000-000000000000 could not be found",
            "detail": "ClusterTemplate 00000000-0000-0000-0000-000000000000 could not be found.",
            "links": []}]})
    );
}

#[tokio::test]
async fn show_unknown_name_is_404_as_error_404_clustertemplate_by_name() {
    let t = app().await;
    let r = t.get(&ADMIN, "/v1/clustertemplates/no-such-template").await;
    r.assert_status(404);
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "client", "status": 404,
            "title": "ClusterTemplate no-such-template could not be found",
            "detail": "ClusterTemplate no-such-template could not be found.",
            "links": []}]})
    );
}

#[tokio::test]
async fn delete_unknown_is_404_as_error_404_clustertemplate_delete() {
    let t = app().await;
    let r = t
        .delete(&ADMIN, "/v1/clustertemplates/no-such-template")
        .await;
    r.assert_status(404);
    assert_eq!(
        r.body,
        magnum_error(404, "ClusterTemplate no-such-template could not be found.")
    );
    let r = t
        .patch(
            &ADMIN,
            "/v1/clustertemplates/no-such-template",
            json!([{"op": "replace", "path": "/name", "value": "x"}]),
        )
        .await;
    r.assert_status(404);
    assert_eq!(
        r.body,
        magnum_error(404, "ClusterTemplate no-such-template could not be found.")
    );
}

// ---------------------------------------------------------------------------------------------
// List, detail, pagination

#[tokio::test]
async fn list_and_detail_are_identical_full_documents() {
    let t = app().await;
    t.template(&ALICE, "a").await;
    t.template(&ALICE, "b").await;
    let l = t.get(&ALICE, "/v1/clustertemplates").await;
    l.assert_status(200);
    let d = t.get(&ALICE, "/v1/clustertemplates/detail").await;
    d.assert_status(200);
    assert_eq!(l.body, d.body);
    assert_eq!(keys(&l.body), ["clustertemplates"]);
    let items = l.body["clustertemplates"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for item in items {
        assert_eq!(keys(item), keys(&sample_response()));
        let one = t
            .get(
                &ALICE,
                &format!("/v1/clustertemplates/{}", item["uuid"].as_str().unwrap()),
            )
            .await;
        assert_eq!(&one.body, item);
    }
}

#[tokio::test]
async fn list_is_sorted_by_id_by_default() {
    let t = app().await;
    let a = t.template(&ALICE, "z").await;
    let b = t.template(&ALICE, "a").await;
    let c = t.template(&ALICE, "m").await;
    let r = t.get(&ALICE, "/v1/clustertemplates").await;
    assert_eq!(uuids(&r), [a.clone(), b.clone(), c.clone()]);
    let r = t.get(&ALICE, "/v1/clustertemplates?sort_dir=desc").await;
    assert_eq!(uuids(&r), [c, b, a]);
}

#[tokio::test]
async fn list_sorts_by_sort_key_and_dir() {
    let t = app().await;
    for n in ["b", "c", "a"] {
        t.template(&ALICE, n).await;
    }
    let r = t.get(&ALICE, "/v1/clustertemplates?sort_key=name").await;
    assert_eq!(names(&r), ["a", "b", "c"]);
    let r = t
        .get(&ALICE, "/v1/clustertemplates?sort_key=name&sort_dir=desc")
        .await;
    assert_eq!(names(&r), ["c", "b", "a"]);
}

#[tokio::test]
async fn list_next_link_has_magnum_format_as_clustertemplate_list_paged() {
    let t = app().await;
    for n in ["k8s-demo-200219", "k8s-sample-200219", "other"] {
        t.template(&ADMIN, n).await;
    }
    let r = t
        .get(
            &ADMIN,
            "/v1/clustertemplates?limit=1&sort_key=name&sort_dir=asc",
        )
        .await;
    r.assert_status(200);
    assert_eq!(names(&r), ["k8s-demo-200219"]);
    let marker = &uuids(&r)[0];
    assert_eq!(
        r.body["next"],
        format!("{BASE}/v1/clustertemplates?sort_key=name&sort_dir=asc&limit=1&marker={marker}")
    );
    // Follow the links the way magnumclient does (strip scheme and host).
    let mut seen = names(&r);
    let mut next = r.body["next"].as_str().map(str::to_string);
    while let Some(url) = next {
        let path = url.strip_prefix(BASE).unwrap();
        let r = t.get(&ADMIN, path).await;
        r.assert_status(200);
        seen.extend(names(&r));
        next = r.body["next"].as_str().map(str::to_string);
    }
    assert_eq!(seen, ["k8s-demo-200219", "k8s-sample-200219", "other"]);
}

#[tokio::test]
async fn list_detail_next_link_points_at_detail() {
    let t = app().await;
    let a = t.template(&ALICE, "a").await;
    t.template(&ALICE, "b").await;
    let r = t.get(&ALICE, "/v1/clustertemplates/detail?limit=1").await;
    assert_eq!(
        r.body["next"],
        format!("{BASE}/v1/clustertemplates/detail?sort_key=id&sort_dir=asc&limit=1&marker={a}")
    );
}

#[tokio::test]
async fn list_next_present_iff_page_full() {
    let t = app().await;
    for n in ["a", "b", "c"] {
        t.template(&ALICE, n).await;
    }
    let full = t.get(&ALICE, "/v1/clustertemplates?limit=3").await;
    assert_eq!(uuids(&full).len(), 3);
    assert!(full.body.get("next").is_some(), "limit hit exactly → next");
    let r = t.get(&ALICE, "/v1/clustertemplates?limit=4").await;
    assert_eq!(uuids(&r).len(), 3);
    assert!(r.body.get("next").is_none(), "{}", r.body);
    let r = t.get(&ALICE, "/v1/clustertemplates").await;
    assert!(r.body.get("next").is_none(), "never null, just absent");
    // The page after the last one is empty and has no next.
    let last = &uuids(&full)[2];
    let r = t
        .get(
            &ALICE,
            &format!("/v1/clustertemplates?limit=3&marker={last}"),
        )
        .await;
    r.assert_status(200);
    assert_eq!(r.body, json!({"clustertemplates": []}));
}

#[tokio::test]
async fn list_marker_starts_strictly_after_it() {
    let t = app().await;
    let a = t.template(&ALICE, "a").await;
    let b = t.template(&ALICE, "b").await;
    let c = t.template(&ALICE, "c").await;
    let r = t
        .get(&ALICE, &format!("/v1/clustertemplates?marker={a}"))
        .await;
    assert_eq!(uuids(&r), [b.clone(), c]);
    let r = t
        .get(
            &ALICE,
            &format!("/v1/clustertemplates?marker={b}&sort_dir=desc"),
        )
        .await;
    assert_eq!(uuids(&r), [a]);
}

#[tokio::test]
async fn list_limit_not_positive_is_400() {
    let t = app().await;
    for l in ["0", "-1"] {
        let r = t
            .get(&ALICE, &format!("/v1/clustertemplates?limit={l}"))
            .await;
        r.assert_status(400);
        assert_eq!(r.body, magnum_error(400, "Limit must be positive"));
    }
}

#[tokio::test]
async fn list_bad_sort_dir_is_400() {
    let t = app().await;
    let r = t.get(&ALICE, "/v1/clustertemplates?sort_dir=up").await;
    assert_magnum_error(
        &r,
        400,
        "Invalid sort direction: up. Acceptable values are 'asc' or 'desc'",
    );
}

#[tokio::test]
async fn list_bad_sort_key_is_400() {
    let t = app().await;
    let r = t.get(&ALICE, "/v1/clustertemplates?sort_key=bogus").await;
    assert_magnum_error(
        &r,
        400,
        "The sort_key value \"bogus\" is an invalid field for sorting",
    );
    // `links` is an API attribute but not a column.
    let r = t.get(&ALICE, "/v1/clustertemplates?sort_key=links").await;
    r.assert_status(400);
}

#[tokio::test]
async fn list_marker_not_a_uuid_is_400() {
    let t = app().await;
    let r = t.get(&ALICE, "/v1/clustertemplates?marker=x").await;
    r.assert_status(400);
    assert_eq!(r.body, magnum_error(400, "Expected a uuid but received x."));
}

#[tokio::test]
async fn list_marker_unknown_is_404() {
    let t = app().await;
    let bob = t.template(&BOB, "bob").await;
    // Alice's templates come after Bob's private one: his is still no marker of hers (the
    // page's statement finds the marker among what she sees), in either direction and order.
    t.template(&ALICE, "alice").await;
    for query in ["", "&sort_dir=desc", "&sort_key=name"] {
        let r = t
            .get(&ALICE, &format!("/v1/clustertemplates?marker={bob}{query}"))
            .await;
        assert_magnum_error(
            &r,
            404,
            &format!("ClusterTemplate {bob} could not be found."),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Visibility

#[tokio::test]
async fn visibility_private_templates_are_per_project() {
    let t = app().await;
    let a = t.template(&ALICE, "alice-t").await;
    let b = t.template(&BOB, "bob-t").await;
    let r = t.get(&ALICE, "/v1/clustertemplates").await;
    assert_eq!(uuids(&r), vec![a.clone()]);
    let r = t.get(&BOB, "/v1/clustertemplates/detail").await;
    assert_eq!(uuids(&r), vec![b.clone()]);
    let r = t.get(&ALICE, &format!("/v1/clustertemplates/{b}")).await;
    r.assert_status(404);
    let r = t.get(&ALICE, "/v1/clustertemplates/bob-t").await;
    r.assert_status(404);
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{b}"),
            json!([{"op": "replace", "path": "/name", "value": "mine"}]),
        )
        .await;
    r.assert_status(404);
    let r = t.delete(&ALICE, &format!("/v1/clustertemplates/{b}")).await;
    r.assert_status(404);
    // The reader of the same project sees Alice's template.
    let r = t.get(&READER, &format!("/v1/clustertemplates/{a}")).await;
    r.assert_status(200);
}

#[tokio::test]
async fn visibility_public_non_hidden_templates_are_visible_to_all() {
    let t = app().await;
    let public = create(
        &t,
        &ADMIN,
        json!({"name": "pub", "image_id": "img", "coe": "kubernetes", "public": true}),
    )
    .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let hidden = create(
        &t,
        &ADMIN,
        json!({"name": "pubhidden", "image_id": "img", "coe": "kubernetes",
            "public": true, "hidden": true}),
    )
    .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    for who in [&ALICE, &BOB, &READER] {
        let r = t.get(who, "/v1/clustertemplates").await;
        assert_eq!(uuids(&r), vec![public.clone()]);
        t.get(who, &format!("/v1/clustertemplates/{public}"))
            .await
            .assert_status(200);
        t.get(who, "/v1/clustertemplates/pub")
            .await
            .assert_status(200);
        t.get(who, &format!("/v1/clustertemplates/{hidden}"))
            .await
            .assert_status(404);
    }
    // Someone else's public template can't be changed or deleted by a member.
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{public}"),
            json!([{"op": "replace", "path": "/name", "value": "mine"}]),
        )
        .await;
    r.assert_status(403);
    let r = t
        .delete(&ALICE, &format!("/v1/clustertemplates/{public}"))
        .await;
    r.assert_status(403);
}

#[tokio::test]
async fn visibility_admin_sees_all_projects() {
    let t = app().await;
    let a = t.template(&ALICE, "a").await;
    let b = t.template(&BOB, "b").await;
    let h = create(
        &t,
        &ADMIN,
        json!({"name": "h", "image_id": "img", "coe": "kubernetes", "hidden": true}),
    )
    .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let r = t.get(&ADMIN, "/v1/clustertemplates").await;
    assert_eq!(uuids(&r), [a.clone(), b.clone(), h]);
    t.get(&ADMIN, &format!("/v1/clustertemplates/{b}"))
        .await
        .assert_status(200);
    let p = patch_ok(
        &t,
        &ADMIN,
        &a,
        json!([{"op": "replace", "path": "/name", "value": "renamed"}]),
    )
    .await;
    assert_eq!(p["name"], "renamed");
    assert_eq!(p["project_id"], ALICE.project);
    t.delete(&ADMIN, &format!("/v1/clustertemplates/{b}"))
        .await
        .assert_status(204);
}

// ---------------------------------------------------------------------------------------------
// PATCH

#[tokio::test]
async fn patch_replace_name_add_label_replace_size_as_clustertemplate_patch() {
    let t = app().await;
    let created = create(&t, &ADMIN, sample_request()).await;
    let uuid = created["uuid"].as_str().unwrap();
    let p = patch_ok(
        &t,
        &ADMIN,
        uuid,
        json!([{"op": "replace", "path": "/name", "value": "k8s-sample-renamed-200219"},
               {"op": "add", "path": "/labels/new_label", "value": "x"},
               {"op": "replace", "path": "/docker_volume_size", "value": 20}]),
    )
    .await;
    // clustertemplate_patch.json response.
    let mut expected = sample_response();
    expected["name"] = json!("k8s-sample-renamed-200219");
    expected["docker_volume_size"] = json!(20);
    expected["labels"] = json!({"kube_tag": "v1.27.3", "new_label": "x"});
    // Magnum answers with the object as loaded before the save, so its `updated_at` is stale
    // (null on a first PATCH); ours is the stored row with the new timestamp.
    assert!(p["updated_at"].as_str().unwrap().ends_with("+00:00"));
    expected["updated_at"] = p["updated_at"].clone();
    assert_like_sample(&p, &expected);
    assert_eq!(p["uuid"], uuid);
    assert_eq!(p["created_at"], created["created_at"]);
    // Persisted.
    let g = t.get(&ADMIN, &format!("/v1/clustertemplates/{uuid}")).await;
    assert_eq!(g.body, p);
    // Lookup by the new name works.
    t.get(&ADMIN, "/v1/clustertemplates/k8s-sample-renamed-200219")
        .await
        .assert_status(200);
}

#[tokio::test]
async fn patch_remove_sets_null_as_clustertemplate_patch_remove() {
    let t = app().await;
    let uuid = create(&t, &ADMIN, sample_request()).await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let p = patch_ok(
        &t,
        &ADMIN,
        &uuid,
        json!([{"op": "remove", "path": "/dns_nameserver"}]),
    )
    .await;
    let mut expected = sample_response();
    expected["dns_nameserver"] = Value::Null;
    // updated_at is set by a write (the sample shows a timestamp here).
    expected["updated_at"] = json!("2026-11-21T20:02:37+00:00");
    let mut ours = p.clone();
    let updated = ours["updated_at"]
        .as_str()
        .expect("updated_at set")
        .to_string();
    assert!(updated.ends_with("+00:00"));
    ours["updated_at"] = expected["updated_at"].clone();
    assert_like_sample(&ours, &expected);
}

#[tokio::test]
async fn patch_remove_restores_declared_defaults() {
    let t = app().await;
    let uuid = create(
        &t,
        &ALICE,
        json!({"image_id": "img", "coe": "kubernetes", "floating_ip_enabled": false,
            "master_lb_enabled": true, "keypair_id": "kp", "labels": {"a": "b"},
            "docker_volume_size": 5}),
    )
    .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let p = patch_ok(
        &t,
        &ALICE,
        &uuid,
        json!([{"op": "remove", "path": "/floating_ip_enabled"},
               {"op": "remove", "path": "/master_lb_enabled"},
               {"op": "remove", "path": "/keypair_id"},
               {"op": "remove", "path": "/docker_volume_size"},
               {"op": "remove", "path": "/labels"}]),
    )
    .await;
    assert_eq!(p["floating_ip_enabled"], true);
    assert_eq!(p["master_lb_enabled"], false);
    assert_eq!(p["keypair_id"], Value::Null);
    assert_eq!(p["docker_volume_size"], Value::Null);
    assert_eq!(p["labels"], json!({}));
}

#[tokio::test]
async fn patch_add_and_remove_single_labels() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let p = patch_ok(
        &t,
        &ALICE,
        &uuid,
        json!([{"op": "add", "path": "/labels/a", "value": "1"},
               {"op": "remove", "path": "/labels/kube_tag"}]),
    )
    .await;
    assert_eq!(p["labels"], json!({"a": "1"}));
    // Removing a label that is not there is a patch error.
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "remove", "path": "/labels/missing"}]),
        )
        .await;
    assert_magnum_error(&r, 400, "Couldn't apply patch");
}

#[tokio::test]
async fn patch_bad_op_is_400_as_error_400_patch_bad_op() {
    let t = app().await;
    let uuid = t.template(&ADMIN, "t").await;
    let r = t
        .patch(
            &ADMIN,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "frobnicate", "path": "/name", "value": "x"}]),
        )
        .await;
    r.assert_status(400);
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "client", "status": 400,
            "title": "Invalid input for field/attribute op",
            "detail": "Invalid input for field/attribute op. Value: 'frobnicate'. Value should be one of: remove, add, replace",
            "links": []}]})
    );
}

#[tokio::test]
async fn patch_internal_path_is_400_as_error_400_patch_invalid_path() {
    let t = app().await;
    let uuid = t.template(&ADMIN, "t").await;
    let r = t
        .patch(
            &ADMIN,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "replace", "path": "/uuid", "value": "x"}]),
        )
        .await;
    r.assert_status(400);
    assert_eq!(
        r.body,
        magnum_error(
            400,
            "'/uuid' is an internal attribute and can not be updated"
        )
    );
    for path in ["/project_id", "/user_id", "/created_at", "/id", "/links"] {
        let r = t
            .patch(
                &ADMIN,
                &format!("/v1/clustertemplates/{uuid}"),
                json!([{"op": "replace", "path": path, "value": "x"}]),
            )
            .await;
        assert_magnum_error(
            &r,
            400,
            &format!("'{path}' is an internal attribute and can not be updated"),
        );
    }
}

#[tokio::test]
async fn patch_remove_of_mandatory_attribute_is_400() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    for path in [
        "/coe",
        "/image_id",
        "/network_driver",
        "/external_network_id",
        "/tls_disabled",
        "/public",
        "/server_type",
        "/registry_enabled",
        "/cluster_distro",
        "/hidden",
    ] {
        let r = t
            .patch(
                &ALICE,
                &format!("/v1/clustertemplates/{uuid}"),
                json!([{"op": "remove", "path": path}]),
            )
            .await;
        r.assert_status(400);
        assert_eq!(
            r.body,
            magnum_error(
                400,
                &format!("'{path}' is a mandatory attribute and can not be removed")
            )
        );
    }
}

#[tokio::test]
async fn patch_replace_labels_with_python_literal_string() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let p = patch_ok(
        &t,
        &ALICE,
        &uuid,
        json!([{"op": "replace", "path": "/labels", "value": "{'a': 'b'}"}]),
    )
    .await;
    assert_eq!(p["labels"], json!({"a": "b"}));
    // Terraform's form, non-string values, and magnumclient's str(dict).
    let p = patch_ok(
        &t,
        &ALICE,
        &uuid,
        json!([{"op": "replace", "path": "/labels",
            "value": "{'kube_tag':'v1.30.4','n': 3, \"t\": True}"}]),
    )
    .await;
    assert_eq!(
        p["labels"],
        json!({"kube_tag": "v1.30.4", "n": "3", "t": "True"})
    );
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "replace", "path": "/labels", "value": "{'a': "}]),
        )
        .await;
    assert_magnum_error(&r, 400, "Couldn't apply patch");
}

#[tokio::test]
async fn patch_boolean_strings_are_accepted() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let p = patch_ok(
        &t,
        &ALICE,
        &uuid,
        json!([{"op": "replace", "path": "/tls_disabled", "value": "true"},
               {"op": "replace", "path": "/master_lb_enabled", "value": "True"},
               {"op": "replace", "path": "/floating_ip_enabled", "value": "false"},
               {"op": "replace", "path": "/registry_enabled", "value": "1"}]),
    )
    .await;
    assert_eq!(p["tls_disabled"], true);
    assert_eq!(p["master_lb_enabled"], true);
    assert_eq!(p["floating_ip_enabled"], false);
    assert_eq!(p["registry_enabled"], true);
    // Publishing needs admin, also through PATCH.
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "replace", "path": "/public", "value": "true"}]),
        )
        .await;
    assert_magnum_error(
        &r,
        403,
        "Not authorized to set public or hidden flag for cluster template.",
    );
    let p = patch_ok(
        &t,
        &ADMIN,
        &uuid,
        json!([{"op": "replace", "path": "/public", "value": "true"},
               {"op": "replace", "path": "/hidden", "value": "false"}]),
    )
    .await;
    assert_eq!(p["public"], true);
    assert_eq!(p["hidden"], false);
    // Not a boolean.
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "replace", "path": "/tls_disabled", "value": "maybe"}]),
        )
        .await;
    assert_magnum_error(&r, 400, "Invalid input for field/attribute tls_disabled");
}

#[tokio::test]
async fn patch_add_on_existing_attribute_is_400() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "add", "path": "/name", "value": "x"}]),
        )
        .await;
    r.assert_status(400);
    assert_eq!(
        r.body,
        magnum_error(
            400,
            "The attribute /name has existed, please use 'replace' operation instead."
        )
    );
    // add on a null attribute is fine; add of an unknown root attribute is not.
    let p = patch_ok(
        &t,
        &ALICE,
        &uuid,
        json!([{"op": "add", "path": "/http_proxy", "value": "http://proxy:3128"}]),
    )
    .await;
    assert_eq!(p["http_proxy"], "http://proxy:3128");
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "add", "path": "/bogus", "value": "x"}]),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Adding a new attribute /bogus to the root of the resource is not allowed.",
    );
}

#[tokio::test]
async fn patch_values_are_validated_like_create() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let path = format!("/v1/clustertemplates/{uuid}");
    let cases = [
        (
            json!([{"op": "replace", "path": "/coe", "value": "swarm"}]),
            "Invalid input for field/attribute coe. Value: 'swarm'. Value should be one of: kubernetes",
        ),
        (
            json!([{"op": "replace", "path": "/network_driver", "value": "weird"}]),
            "Network driver type weird is not supported, expecting a flannel/calico/cilium/unspecified network driver.",
        ),
        (
            json!([{"op": "replace", "path": "/name", "value": {"a": 1}}]),
            "Invalid input for field/attribute value. Value: '{'a': 1}'. Wrong type. Expected '[<class 'str'>, <class 'int'>]', got '<class 'dict'>'",
        ),
        (
            json!([{"op": "replace", "path": "/name"}]),
            "'add' and 'replace' operations needs value",
        ),
    ];
    for (ops, msg) in cases {
        let r = t.patch(&ALICE, &path, ops.clone()).await;
        assert_magnum_error(&r, 400, msg);
    }
    let r = t
        .patch(
            &ALICE,
            &path,
            json!([{"op": "replace", "path": "/docker_volume_size", "value": 0}]),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Invalid input for field/attribute docker_volume_size",
    );
    // Nothing changed.
    let g = t.get(&ALICE, &path).await;
    assert_eq!(g.body["coe"], "kubernetes");
    assert_eq!(g.body["docker_volume_size"], 10);
    assert_eq!(g.body["updated_at"], Value::Null);
}

#[tokio::test]
async fn patch_by_reader_is_403() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let r = t
        .patch(
            &READER,
            &format!("/v1/clustertemplates/{uuid}"),
            json!([{"op": "replace", "path": "/name", "value": "x"}]),
        )
        .await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow clustertemplate:update to be performed.",
    );
}

// ---------------------------------------------------------------------------------------------
// In-use rules and delete

#[tokio::test]
async fn in_use_delete_is_400_as_error_400_clustertemplate_delete_in_use() {
    let t = app().await;
    let uuid = t.template(&ALICE, "used").await;
    t.cluster(&ALICE, "c1", &uuid).await;
    let msg = format!("ClusterTemplate {uuid} is referenced by one or multiple clusters.");
    let r = t
        .delete(&ALICE, &format!("/v1/clustertemplates/{uuid}"))
        .await;
    r.assert_status(400);
    assert_eq!(r.body, magnum_error(400, &msg));
    // By name, Magnum still names the uuid.
    let r = t.delete(&ALICE, "/v1/clustertemplates/used").await;
    r.assert_status(400);
    assert_eq!(r.body, magnum_error(400, &msg));
    t.get(&ALICE, &format!("/v1/clustertemplates/{uuid}"))
        .await
        .assert_status(200);
}

#[tokio::test]
async fn in_use_patch_of_name_is_allowed() {
    let t = app().await;
    let uuid = t.template(&ALICE, "used").await;
    t.cluster(&ALICE, "c1", &uuid).await;
    let p = patch_ok(
        &t,
        &ALICE,
        &uuid,
        json!([{"op": "replace", "path": "/name", "value": "renamed"}]),
    )
    .await;
    assert_eq!(p["name"], "renamed");
    // Publishing flags and tags are allowed too (admin for the flags).
    let p = patch_ok(
        &t,
        &ADMIN,
        &uuid,
        json!([{"op": "replace", "path": "/public", "value": true}]),
    )
    .await;
    assert_eq!(p["public"], true);
    let p = patch_ok(
        &t,
        &ADMIN,
        &uuid,
        json!([{"op": "replace", "path": "/hidden", "value": "true"}]),
    )
    .await;
    assert_eq!(p["hidden"], true);
    let p = patch_ok(
        &t,
        &ALICE,
        &uuid,
        json!([{"op": "add", "path": "/tags", "value": "t1"}]),
    )
    .await;
    assert_eq!(p["tags"], "t1");
}

#[tokio::test]
async fn in_use_patch_of_other_fields_is_400() {
    let t = app().await;
    let uuid = t.template(&ALICE, "used").await;
    t.cluster(&ALICE, "c1", &uuid).await;
    let msg = format!("ClusterTemplate {uuid} is referenced by one or multiple clusters.");
    for ops in [
        json!([{"op": "replace", "path": "/docker_volume_size", "value": 20}]),
        json!([{"op": "add", "path": "/labels/x", "value": "y"}]),
        json!([{"op": "replace", "path": "/name", "value": "n"},
               {"op": "replace", "path": "/flavor_id", "value": "m1.large"}]),
        json!([{"op": "replace", "path": "/public", "value": true},
               {"op": "replace", "path": "/hidden", "value": true}]),
        json!([{"op": "replace", "path": "/tags", "value": "x"},
               {"op": "replace", "path": "/name", "value": "y"}]),
    ] {
        let r = t
            .patch(&ADMIN, &format!("/v1/clustertemplates/{uuid}"), ops.clone())
            .await;
        r.assert_status(400);
        assert_eq!(r.body, magnum_error(400, &msg), "{ops}");
    }
    let g = t.get(&ALICE, &format!("/v1/clustertemplates/{uuid}")).await;
    assert_eq!(g.body["docker_volume_size"], 10);
    assert_eq!(g.body["name"], "used");
}

#[tokio::test]
async fn delete_returns_204_then_404() {
    let t = app().await;
    let uuid = t.template(&ALICE, "gone").await;
    let r = t
        .delete(&ALICE, &format!("/v1/clustertemplates/{uuid}"))
        .await;
    r.assert_status(204);
    assert_eq!(r.body, Value::Null);
    let r = t.get(&ALICE, &format!("/v1/clustertemplates/{uuid}")).await;
    r.assert_status(404);
    assert_eq!(
        r.body,
        magnum_error(404, &format!("ClusterTemplate {uuid} could not be found."))
    );
    let r = t
        .delete(&ALICE, &format!("/v1/clustertemplates/{uuid}"))
        .await;
    r.assert_status(404);
    // By name.
    t.template(&ALICE, "byname").await;
    t.delete(&ALICE, "/v1/clustertemplates/byname")
        .await
        .assert_status(204);
    let r = t.get(&ALICE, "/v1/clustertemplates").await;
    assert_eq!(r.body, json!({"clustertemplates": []}));
}

#[tokio::test]
async fn delete_by_reader_is_403() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let r = t
        .delete(&READER, &format!("/v1/clustertemplates/{uuid}"))
        .await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow clustertemplate:delete to be performed.",
    );
}

#[tokio::test]
async fn visibility_owner_still_sees_own_hidden_template() {
    let t = app().await;
    let a = t.template(&ALICE, "mine").await;
    patch_ok(
        &t,
        &ADMIN,
        &a,
        json!([{"op": "replace", "path": "/hidden", "value": "true"}]),
    )
    .await;
    let r = t.get(&ALICE, "/v1/clustertemplates").await;
    assert_eq!(uuids(&r), vec![a.clone()]);
    t.get(&ALICE, &format!("/v1/clustertemplates/{a}"))
        .await
        .assert_status(200);
    // Other projects don't.
    let r = t.get(&BOB, "/v1/clustertemplates").await;
    assert_eq!(uuids(&r), Vec::<String>::new());
}

#[tokio::test]
async fn patch_of_another_projects_public_template_is_policy_403() {
    let t = app().await;
    let public = create(
        &t,
        &ADMIN,
        json!({"name": "pub", "image_id": "img", "coe": "kubernetes", "public": true}),
    )
    .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let r = t
        .patch(
            &BOB,
            &format!("/v1/clustertemplates/{public}"),
            json!([{"op": "replace", "path": "/name", "value": "mine"}]),
        )
        .await;
    r.assert_status(403);
    assert_eq!(
        r.body,
        magnum_error(
            403,
            "Policy doesn't allow clustertemplate:update to be performed."
        )
    );
}

#[tokio::test]
async fn create_accepts_json_content_type_with_charset() {
    let t = app().await;
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/clustertemplates")
        .header("host", "127.0.0.1:9511")
        .header("x-user-id", ALICE.user)
        .header("x-project-id", ALICE.project)
        .header("x-roles", ALICE.roles)
        .header("content-type", "application/json; charset=UTF-8")
        .body(axum::body::Body::from(
            json!({"image_id": "img", "coe": "kubernetes"}).to_string(),
        ))
        .unwrap();
    t.raw(req).await.assert_status(201);
}

#[tokio::test]
async fn create_field_constraints_are_400() {
    let t = app().await;
    let long = "x".repeat(256);
    let cases = [
        (
            json!({"image_id": "img", "coe": "kubernetes", "name": long}),
            format!(
                "Invalid input for field/attribute name. Value: '{long}'. Value should have a maximum character requirement of 255"
            ),
        ),
        (
            json!({"image_id": "img", "coe": "kubernetes", "apiserver_port": 80}),
            "Invalid input for field/attribute apiserver_port. Value: '80'. Value should be greater or equal to 1024".to_string(),
        ),
        (
            json!({"image_id": "img", "coe": "kubernetes", "docker_volume_size": 3_000_000_000_i64}),
            "Invalid input for field/attribute docker_volume_size. Value: '3000000000'. Value should be lower or equal to 2147483647".to_string(),
        ),
        (
            json!({"image_id": "img", "coe": "kubernetes", "server_type": "pod"}),
            "Invalid input for field/attribute server_type. Value: 'pod'. Value should be one of: vm, bm".to_string(),
        ),
        (
            json!({"image_id": "img", "coe": "kubernetes", "volume_driver": "rexray"}),
            "Volume driver type rexray is not supported, expecting a cinder/unspecified volume driver.".to_string(),
        ),
        (
            json!({"image_id": "img", "coe": "kubernetes", "docker_storage_driver": "devicemapper",
                "docker_volume_size": 2}),
            "docker volume size 2 GB is not valid, expecting minimum value 3GB for devicemapper storage driver.".to_string(),
        ),
    ];
    for (body, msg) in cases {
        let r = t.post(&ALICE, "/v1/clustertemplates", body).await;
        assert_magnum_error(&r, 400, &msg);
    }
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"image_id": "img", "coe": "kubernetes", "dns_nameserver": "not-an-ip"}),
        )
        .await;
    r.assert_status(400);
    // Nothing was stored.
    let r = t.get(&ALICE, "/v1/clustertemplates").await;
    assert_eq!(r.body, json!({"clustertemplates": []}));
}

#[tokio::test]
async fn list_limit_not_an_int_is_400() {
    let t = app().await;
    let r = t.get(&ALICE, "/v1/clustertemplates?limit=abc").await;
    assert_magnum_error(
        &r,
        400,
        "Invalid input for field/attribute limit. Value: 'abc'. unable to convert to int",
    );
}

#[tokio::test]
async fn list_limit_is_capped_at_max_limit() {
    let t = app_with(|c| c.api.max_limit = 2).await;
    for n in ["a", "b", "c"] {
        t.template(&ALICE, n).await;
    }
    let r = t.get(&ALICE, "/v1/clustertemplates?limit=50").await;
    assert_eq!(names(&r), ["a", "b"]);
    assert!(r.body["next"].as_str().unwrap().contains("limit=2"));
    // No limit given: the default page is max_limit, and a full page has a next link.
    let r = t.get(&ALICE, "/v1/clustertemplates").await;
    assert_eq!(names(&r), ["a", "b"]);
    assert!(r.body.get("next").is_some());
}
