//! Version documents, microversion negotiation, Magnum's routing quirks and the error format.
//! Expected bodies are copied from the real-Magnum captures in
//! `../shared/reference/magnum-samples/*.json` (named next to each literal).
use crate::common::*;

use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};

const HOST: &str = "127.0.0.1:9511";

/// A request with arbitrary headers and a raw body (no identity unless given in `headers`).
async fn raw(
    t: &TestApp,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", HOST)
        .header("accept", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let body = body.map(|s| Body::from(s.to_string())).unwrap_or_default();
    t.raw(b.body(body).unwrap()).await
}

/// Identity headers of `who`.
fn id(who: &As) -> [(&'static str, &'static str); 3] {
    [
        ("x-user-id", who.user),
        ("x-project-id", who.project),
        ("x-roles", who.roles),
    ]
}

fn with<'a>(who: &As, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v: Vec<(&'a str, &'a str)> = id(who).to_vec();
    v.extend_from_slice(extra);
    v
}

#[track_caller]
fn assert_request_id(r: &Resp) {
    let rid = r
        .header("x-openstack-request-id")
        .expect("request id header");
    let uuid = rid.strip_prefix("req-").expect("req- prefix");
    assert!(uuid::Uuid::try_parse(uuid).is_ok(), "{rid}");
}

#[track_caller]
fn assert_no_version_headers(r: &Resp) {
    for h in [
        "openstack-api-version",
        "openstack-api-minimum-version",
        "openstack-api-maximum-version",
    ] {
        assert!(r.header(h).is_none(), "{h} unexpectedly present");
    }
}

#[track_caller]
fn assert_version_headers(r: &Resp, requested: &str) {
    assert_eq!(
        r.header("openstack-api-minimum-version"),
        Some("container-infrastructure-management 1.1")
    );
    assert_eq!(
        r.header("openstack-api-maximum-version"),
        Some("container-infrastructure-management 1.14")
    );
    assert_eq!(
        r.header("openstack-api-version"),
        Some(format!("container-infrastructure-management {requested}").as_str())
    );
    assert_eq!(r.header("vary"), Some("OpenStack-API-Version"));
}

/// Magnum's error body for an exception raised in the app (`code: "client"`).
fn client_error(status: u16, title: &str, detail: &str) -> Value {
    json!({"errors": [{"request_id": "", "code": "client", "status": status,
        "title": title, "detail": detail, "links": []}]})
}

/// root_get.json body.
fn root_doc() -> Value {
    json!({
        "name": "OpenStack Magnum API",
        "description": "Magnum is an OpenStack project which aims to provide container cluster management.",
        "versions": [{"id": "v1",
            "links": [{"href": "http://127.0.0.1:9511/v1/", "rel": "self"}],
            "status": "CURRENT", "max_version": "1.14", "min_version": "1.1"}]
    })
}

/// v1_get.json / v1_get_slash.json body.
fn v1_doc() -> Value {
    let coll = |n: &str| {
        json!([{"href": format!("http://127.0.0.1:9511/v1/{n}/"), "rel": "self"},
               {"href": format!("http://127.0.0.1:9511/{n}/"), "rel": "bookmark"}])
    };
    json!({
        "id": "v1",
        "media_types": [{"base": "application/json", "type": "application/vnd.openstack.magnum.v1+json"}],
        "links": [
            {"href": "http://127.0.0.1:9511/v1/", "rel": "self"},
            {"href": "http://docs.openstack.org/developer/magnum/dev/api-spec-v1.html",
             "rel": "describedby", "type": "text/html"}
        ],
        "clustertemplates": coll("clustertemplates"),
        "clusters": coll("clusters"),
        "quotas": coll("quotas"),
        "certificates": coll("certificates"),
        "mservices": coll("mservices"),
        "stats": coll("stats"),
        "federations": coll("federations"),
        "nodegroups": [
            {"href": "http://127.0.0.1:9511/v1/clusters/{cluster_id}/nodegroups", "rel": "self"},
            {"href": "http://127.0.0.1:9511/clusters/{cluster_id}/nodegroups", "rel": "bookmark"}
        ],
        "credentials": coll("credentials"),
    })
}

// ---------------------------------------------------------------------------------------------
// Version documents

#[tokio::test]
async fn root_document_matches_magnum_without_auth() {
    let t = app().await;
    let r = raw(&t, "GET", "/", &[], None).await;
    r.assert_status(200);
    assert_eq!(r.body, root_doc());
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn root_document_has_no_openstack_api_headers() {
    let t = app().await;
    // Even a bad version header is not looked at on `/`.
    let r = raw(
        &t,
        "GET",
        "/",
        &[("openstack-api-version", "container-infra 9.99")],
        None,
    )
    .await;
    r.assert_status(200);
    assert_no_version_headers(&r);
    assert_request_id(&r);
}

#[tokio::test]
async fn v1_document_matches_magnum_with_and_without_slash() {
    let t = app().await;
    for path in ["/v1", "/v1/"] {
        let r = raw(&t, "GET", path, &[], None).await;
        r.assert_status(200);
        assert_eq!(r.body, v1_doc(), "{path}");
        assert_version_headers(&r, "1.1");
        assert_request_id(&r);
    }
}

#[tokio::test]
async fn v1_document_negotiates_the_version() {
    let t = app().await;
    let r = raw(
        &t,
        "GET",
        "/v1",
        &[("openstack-api-version", "container-infra 1.15")],
        None,
    )
    .await;
    r.assert_status(406);
    assert_version_headers(&r, "1.15");
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let t = app().await;
    let a = raw(&t, "GET", "/", &[], None).await;
    let b = raw(&t, "GET", "/v1", &[], None).await;
    let c = t.get(&ADMIN, "/v1/nonexistent").await;
    let d = t.get(&ADMIN, "/v1/clustertemplates/nope").await;
    let e = t.get_v(&ADMIN, "/v1/clustertemplates", "9.99").await;
    let f = t.get(&ADMIN, "/v1/clustertemplates?limit=0").await;
    let g = t
        .call(&ADMIN, "PUT", "/v1/clustertemplates", None, None)
        .await;
    let h = t.get(&ADMIN, "/v1/clustertemplates").await;
    for r in [&a, &b, &c, &d, &e, &f, &g, &h] {
        assert_request_id(r);
    }
    assert_eq!(
        [d.status, e.status, f.status, g.status].map(|s| s.as_u16()),
        [404, 406, 400, 405]
    );
    // Unique per request.
    assert_ne!(
        a.header("x-openstack-request-id"),
        b.header("x-openstack-request-id")
    );
}

// ---------------------------------------------------------------------------------------------
// Microversions

#[tokio::test]
async fn no_version_header_means_1_1() {
    let t = app().await;
    let r = t.get(&ALICE, "/v1/clustertemplates").await;
    r.assert_status(200);
    assert_version_headers(&r, "1.1");
}

#[tokio::test]
async fn explicit_version_is_echoed() {
    let t = app().await;
    let r = t.get_v(&ALICE, "/v1/clustertemplates", "1.9").await;
    r.assert_status(200);
    assert_version_headers(&r, "1.9");
}

#[tokio::test]
async fn latest_means_1_14_whatever_the_service_name() {
    let t = app().await;
    let r = t.get_v(&ALICE, "/v1/clustertemplates", "latest").await;
    r.assert_status(200);
    assert_version_headers(&r, "1.14");
    let r = raw(
        &t,
        "GET",
        "/v1/clustertemplates",
        &with(&ALICE, &[("openstack-api-version", "magnum LATEST")]),
        None,
    )
    .await;
    r.assert_status(200);
    assert_version_headers(&r, "1.14");
}

#[tokio::test]
async fn all_three_service_names_are_accepted() {
    let t = app().await;
    for svc in [
        "container-infra",
        "container-infrastructure",
        "container-infrastructure-management",
    ] {
        let v = format!("{svc} 1.4");
        let r = raw(
            &t,
            "GET",
            "/v1/clustertemplates",
            &with(&ALICE, &[("openstack-api-version", v.as_str())]),
            None,
        )
        .await;
        r.assert_status(200);
        assert_version_headers(&r, "1.4");
    }
}

#[tokio::test]
async fn legacy_magnum_version_header_is_ignored() {
    let t = app().await;
    let r = raw(
        &t,
        "GET",
        "/v1/clustertemplates",
        &with(&ALICE, &[("x-openstack-magnum-api-version", "1.99")]),
        None,
    )
    .await;
    r.assert_status(200);
    assert_version_headers(&r, "1.1");
}

#[tokio::test]
async fn major_mismatch_is_406_as_error_406_bad_microversion() {
    let t = app().await;
    let r = t.get_v(&ADMIN, "/v1/clustertemplates", "9.99").await;
    r.assert_status(406);
    // error_406_bad_microversion.json
    assert_eq!(
        r.body,
        json!({"errors": [{"code": "magnum.microversion-unsupported",
            "title": "Requested microversion is unsupported",
            "description": "Mutually exclusive versions requested. Version 9.99 requested but not supported by this service.The supported version range is: [container-infrastructure-management 1.1, container-infrastructure-management 1.14].",
            "max_version": "1.14", "min_version": "1.1",
            "links": [{"rel": "help", "href": "http://docs.openstack.org/api-guide/compute/microversions.html"}]}]})
    );
    assert_version_headers(&r, "9.99");
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn too_old_version_is_406_as_error_406_too_old_microversion() {
    let t = app().await;
    let r = t.get_v(&ADMIN, "/v1/clustertemplates", "1.0").await;
    r.assert_status(406);
    // error_406_too_old_microversion.json
    assert_eq!(
        r.body,
        json!({"errors": [{"code": "magnum.microversion-unsupported",
            "title": "Requested microversion is unsupported",
            "description": "Version 1.0 was requested but the minor version is not supported by this service. The supported version range is: [container-infrastructure-management 1.1, container-infrastructure-management 1.14].",
            "max_version": "1.14", "min_version": "1.1",
            "links": [{"rel": "help", "href": "http://docs.openstack.org/api-guide/compute/microversions.html"}]}]})
    );
    assert_version_headers(&r, "1.0");
}

#[tokio::test]
async fn version_1_15_is_406() {
    let t = app().await;
    let r = t.get_v(&ADMIN, "/v1/clustertemplates", "1.15").await;
    r.assert_status(406);
    assert_eq!(
        r.body["errors"][0]["description"],
        "Version 1.15 was requested but the minor version is not supported by this service. The supported version range is: [container-infrastructure-management 1.1, container-infrastructure-management 1.14]."
    );
    assert_eq!(
        r.body["errors"][0]["code"],
        "magnum.microversion-unsupported"
    );
    assert_version_headers(&r, "1.15");
}

#[tokio::test]
async fn malformed_version_is_406_as_error_406_malformed_microversion() {
    let t = app().await;
    let r = t.get_v(&ADMIN, "/v1/clustertemplates", "abc").await;
    r.assert_status(406);
    // error_406_malformed_microversion.json (no version headers there either)
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "", "status": 406, "title": "Not Acceptable",
            "detail": "Invalid value for OpenStack-API-Version header", "links": []}]})
    );
    assert_no_version_headers(&r);
    assert_request_id(&r);
}

#[tokio::test]
async fn invalid_service_type_is_406() {
    let t = app().await;
    for v in ["compute 1.2", "1.2", "container-infra 1.2 extra"] {
        let r = raw(
            &t,
            "GET",
            "/v1/clustertemplates",
            &with(&ADMIN, &[("openstack-api-version", v)]),
            None,
        )
        .await;
        r.assert_status(406);
        assert_eq!(
            r.body,
            json!({"errors": [{"request_id": "", "code": "", "status": 406, "title": "Not Acceptable",
                "detail": "Invalid service type for OpenStack-API-Version header", "links": []}]}),
            "{v}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Routing

#[tokio::test]
async fn unknown_path_is_pecan_404_as_error_404_unknown_resource() {
    let t = app().await;
    let r = t.get(&ADMIN, "/v1/nonexistent").await;
    r.assert_status(404);
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "", "status": 404, "title": "Not Found",
            "detail": "", "links": []}]})
    );
    assert_no_version_headers(&r);
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn wrong_method_is_405_with_allow_as_error_405_method() {
    let t = app().await;
    let uuid = t.template(&ADMIN, "t").await;
    let r = t
        .call(
            &ADMIN,
            "PUT",
            &format!("/v1/clustertemplates/{uuid}"),
            None,
            Some(json!({})),
        )
        .await;
    r.assert_status(405);
    // error_405_method.json
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "", "status": 405,
            "title": "Method Not Allowed", "detail": "", "links": []}]})
    );
    let allow = r
        .header("allow")
        .expect("Allow header")
        .to_ascii_uppercase();
    for m in ["GET", "PATCH", "DELETE"] {
        assert!(allow.contains(m), "{allow}");
    }
    assert!(!allow.contains("PUT"), "{allow}");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_request_id(&r);
}

#[tokio::test]
async fn trailing_slashes_are_accepted() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let r = t.get(&ALICE, "/v1/clustertemplates/").await;
    r.assert_status(200);
    assert_eq!(r.body["clustertemplates"][0]["uuid"], uuid.as_str());
    let r = t
        .get(&ALICE, &format!("/v1/clustertemplates/{uuid}/"))
        .await;
    r.assert_status(200);
    assert_eq!(r.body["uuid"], uuid.as_str());
    let r = t.get(&ALICE, "/v1/clustertemplates/detail/?limit=5").await;
    r.assert_status(200);
    assert_eq!(r.body["clustertemplates"][0]["uuid"], uuid.as_str());
}

#[tokio::test]
async fn bookmark_routes_without_v1_resolve() {
    let t = app().await;
    let uuid = t.template(&ALICE, "t").await;
    let created = t.get(&ALICE, &format!("/v1/clustertemplates/{uuid}")).await;
    // The bookmark link itself, stripped of scheme and host.
    let bookmark = created.body["links"][1]["href"].as_str().unwrap();
    let path = bookmark.strip_prefix("http://127.0.0.1:9511").unwrap();
    assert_eq!(path, format!("/clustertemplates/{uuid}"));
    let r = t.get(&ALICE, path).await;
    r.assert_status(200);
    assert_eq!(r.body, created.body);
    let r = t.get(&ALICE, "/clustertemplates").await;
    r.assert_status(200);
    assert_eq!(r.body["clustertemplates"].as_array().unwrap().len(), 1);
    assert_version_headers(&r, "1.1");
}

#[tokio::test]
async fn bays_and_baymodels_are_404() {
    let t = app().await;
    for path in [
        "/v1/bays",
        "/v1/baymodels",
        "/v1/bays/x",
        "/v1/baymodels/detail",
        "/bays",
    ] {
        let r = t.get(&ADMIN, path).await;
        r.assert_status(404);
        assert_eq!(r.body["errors"][0]["title"], "Not Found", "{path}");
    }
    let r = t.post(&ADMIN, "/v1/baymodels", json!({"name": "x"})).await;
    r.assert_status(404);
}

#[tokio::test]
async fn cluster_detail_sub_path_is_404() {
    let t = app().await;
    let r = t.get(&ADMIN, "/v1/clusters/foo/detail").await;
    r.assert_status(404);
    let r = t
        .get(
            &ADMIN,
            "/v1/clusters/0b6f0a96-5bd3-4c36-9a4e-2d12f5d04a0e/detail",
        )
        .await;
    r.assert_status(404);
}

// ---------------------------------------------------------------------------------------------
// Errors

#[tokio::test]
async fn bad_json_is_400_as_error_400_bad_json() {
    let t = app().await;
    let r = raw(
        &t,
        "POST",
        "/v1/clustertemplates",
        &with(&ADMIN, &[("content-type", "application/json")]),
        Some("{not json"),
    )
    .await;
    r.assert_status(400);
    assert_eq!(
        r.body,
        client_error(
            400,
            "Request is not in valid JSON format",
            "Request is not in valid JSON format"
        )
    );
    assert_version_headers(&r, "1.1");
}

#[tokio::test]
async fn non_json_content_type_is_415() {
    let t = app().await;
    let r = raw(
        &t,
        "POST",
        "/v1/clustertemplates",
        &with(&ADMIN, &[("content-type", "text/plain")]),
        Some("name=x"),
    )
    .await;
    r.assert_status(415);
    assert_eq!(
        r.body,
        client_error(
            415,
            "Unknown mimetype: text/plain",
            "Unknown mimetype: text/plain"
        )
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn unknown_attribute_is_400_as_error_400_unknown_field() {
    let t = app().await;
    let r = t
        .post(
            &ADMIN,
            "/v1/clustertemplates",
            json!({"name": "x", "image_id": "ubuntu-jammy", "keypair_id": "magnum-test",
                "external_network_id": "public", "flavor_id": "ds2G", "master_flavor_id": "ds2G",
                "coe": "kubernetes", "network_driver": "flannel", "docker_volume_size": 10,
                "dns_nameserver": "8.8.8.8", "labels": {"kube_tag": "v1.27.3"}, "bogus_field": 1}),
        )
        .await;
    r.assert_status(400);
    assert_eq!(
        r.body,
        client_error(
            400,
            "Unknown attribute for argument cluster_template: bogus_field",
            "Unknown attribute for argument cluster_template: bogus_field"
        )
    );
}

#[tokio::test]
async fn read_only_attribute_is_400() {
    let t = app().await;
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"image_id": "i", "coe": "kubernetes", "project_id": "p"}),
        )
        .await;
    assert_magnum_error(&r, 400, "Cannot set read only field");
}

#[tokio::test]
async fn unknown_query_param_is_400() {
    let t = app().await;
    for path in [
        "/v1/clustertemplates?x=1",
        "/v1/clustertemplates/detail?x=1",
        "/v1/clustertemplates?all_projects=True",
    ] {
        let r = t.get(&ADMIN, path).await;
        r.assert_status(400);
        let key = path.split('?').nth(1).unwrap().split('=').next().unwrap();
        let msg = format!("Unknown argument: \"{key}\"");
        assert_eq!(r.body, client_error(400, &msg, &msg), "{path}");
    }
}

#[tokio::test]
async fn error_title_is_detail_up_to_first_dot_and_code_client() {
    let t = app().await;
    let responses = [
        t.get(&ADMIN, "/v1/clustertemplates/no-such-template").await,
        t.get(&ADMIN, "/v1/clustertemplates?limit=0").await,
        t.get(&ADMIN, "/v1/clustertemplates?marker=x").await,
        t.post(&ADMIN, "/v1/clustertemplates", json!({"coe": "kubernetes"}))
            .await,
        t.post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"coe": "kubernetes", "image_id": "i", "public": true}),
        )
        .await,
    ];
    for r in &responses {
        assert!(r.status.is_client_error());
        let e = &r.body["errors"][0];
        let detail = e["detail"].as_str().unwrap();
        let title = detail.split('.').next().unwrap();
        assert_eq!(e["title"], title, "{}", r.body);
        assert_eq!(e["code"], "client");
        assert_eq!(e["status"], r.status.as_u16());
        assert_eq!(e["request_id"], "");
        assert_eq!(e["links"], json!([]));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
}

#[tokio::test]
async fn database_outage_is_503_in_magnums_format_not_500() {
    let t = app().await;
    t.state.pool.close().await;
    let r = t.get(&ALICE, "/v1/clusters").await;
    r.assert_status(503);
    let detail = "The database is temporarily unavailable, please retry.";
    assert_eq!(
        r.body,
        json!({"errors": [{"request_id": "", "code": "server", "status": 503,
            "title": "The database is temporarily unavailable, please retry",
            "detail": detail, "links": []}]})
    );
    assert_request_id(&r);
}
