//! Admin-ish surfaces: quotas, stats, mservices, certificates and credentials, checked against
//! the real-Magnum captures in the contract's samples.
use crate::common::*;

use serde_json::json;

const ALICE2: As = As {
    user: "alice2",
    project: "p-alice",
    roles: "member,reader",
};
const OTHER_ADMIN: As = As {
    user: "root",
    project: "p-ops",
    roles: "admin,member,reader",
};

// ---------------------------------------------------------------- quotas

#[tokio::test]
async fn quota_create_matches_capture_and_rejects_duplicates() {
    let t = app().await;
    let p = "40631c09e1694438b4a3a718f748db82";
    let r = t
        .post(
            &ADMIN,
            "/v1/quotas",
            json!({"project_id": p, "resource": "Cluster", "hard_limit": 7}),
        )
        .await;
    r.assert_status(201);
    assert_eq!(
        keys(&r.body),
        [
            "created_at",
            "hard_limit",
            "id",
            "project_id",
            "resource",
            "updated_at"
        ]
    );
    assert!(r.body["id"].is_i64());
    assert_eq!(r.body["hard_limit"], 7);
    assert_eq!(r.body["project_id"], p);
    assert_eq!(r.body["resource"], "Cluster");
    assert!(
        r.body["created_at"]
            .as_str()
            .is_some_and(|s| s.ends_with("+00:00"))
    );
    assert!(r.body["updated_at"].is_null());

    let dup = t
        .post(
            &ADMIN,
            "/v1/quotas",
            json!({"project_id": p, "resource": "Cluster", "hard_limit": 7}),
        )
        .await;
    dup.assert_status(409);
    assert_eq!(
        dup.body,
        magnum_error(
            409,
            &format!("Quota for project {p} already exists for resource Cluster.")
        )
    );
}

#[tokio::test]
async fn quota_create_defaults_and_validation() {
    let t = app().await;
    // resource and hard_limit default.
    let r = t
        .post(&ADMIN, "/v1/quotas", json!({"project_id": "p-x"}))
        .await;
    r.assert_status(201);
    assert_eq!(r.body["resource"], "Cluster");
    assert_eq!(r.body["hard_limit"], 1);
    // Missing project_id.
    let r = t.post(&ADMIN, "/v1/quotas", json!({"hard_limit": 3})).await;
    assert_magnum_error(&r, 400, "project_id");
    // Non-admin.
    let r = t
        .post(&ALICE, "/v1/quotas", json!({"project_id": "p-alice"}))
        .await;
    r.assert_status(403);
    assert_eq!(
        r.body,
        magnum_error(403, "Policy doesn't allow quota:create to be performed.")
    );
}

#[tokio::test]
async fn quota_update_delete_and_default_show() {
    let t = app().await;
    let p = "40631c09e1694438b4a3a718f748db82";
    let path = format!("/v1/quotas/{p}/Cluster");
    // PATCH before the row exists → 404.
    let r = t.patch(&ADMIN, &path, json!({"hard_limit": 9})).await;
    assert_magnum_error(
        &r,
        404,
        &format!("Quota could not be found: project_id {p} resource Cluster."),
    );

    let created = t
        .post(
            &ADMIN,
            "/v1/quotas",
            json!({"project_id": p, "resource": "Cluster", "hard_limit": 7}),
        )
        .await;
    created.assert_status(201);

    let r = t.get(&ADMIN, &path).await;
    r.assert_status(200);
    assert_eq!(r.body, created.body);

    // PATCH takes a Quota object, not a JSON-patch; project/resource come from the URL.
    let r = t.patch(&ADMIN, &path, json!({"hard_limit": 9})).await;
    r.assert_status(202);
    assert_eq!(r.body["id"], created.body["id"]);
    assert_eq!(r.body["hard_limit"], 9);
    assert!(r.body["updated_at"].is_string());
    // Non-admin PATCH / DELETE.
    t.patch(&ALICE, &path, json!({"hard_limit": 1}))
        .await
        .assert_status(403);
    t.delete(&ALICE, &path).await.assert_status(403);

    t.delete(&ADMIN, &path).await.assert_status(204);
    let r = t.delete(&ADMIN, &path).await;
    assert_magnum_error(
        &r,
        404,
        &format!("Quota could not be found: project_id {p} resource Cluster."),
    );

    // No row: the configured default, without id or timestamps (quota_show_default_after_delete).
    let r = t.get(&ADMIN, &path).await;
    r.assert_status(200);
    assert_eq!(
        r.body,
        json!({"hard_limit": 20, "project_id": p, "resource": "Cluster"})
    );
}

#[tokio::test]
async fn quota_show_is_limited_to_own_project_for_non_admins() {
    let t = app().await;
    let r = t.get(&ALICE, "/v1/quotas/p-alice/Cluster").await;
    r.assert_status(200);
    assert_eq!(r.body["project_id"], "p-alice");
    let r = t.get(&ALICE, "/v1/quotas/p-bob/Cluster").await;
    r.assert_status(403);
    assert_eq!(r.body, magnum_error(403, "Not authorized."));
}

#[tokio::test]
async fn quota_list_own_all_tenants_and_paging() {
    let t = app().await;
    let r = t.get(&ADMIN, "/v1/quotas").await;
    r.assert_status(200);
    assert_eq!(r.body, json!({"quotas": []}));

    let mut ids = Vec::new();
    for p in ["admin-project", "p-a", "p-b", "p-c"] {
        let r = t
            .post(
                &ADMIN,
                "/v1/quotas",
                json!({"project_id": p, "hard_limit": 2}),
            )
            .await;
        r.assert_status(201);
        ids.push(r.body["id"].as_i64().expect("id"));
    }
    // Without all_tenants: the caller's own project only.
    let r = t.get(&ADMIN, "/v1/quotas").await;
    r.assert_status(200);
    let own = r.body["quotas"].as_array().expect("quotas");
    assert_eq!(own.len(), 1);
    assert_eq!(own[0]["project_id"], "admin-project");
    assert!(r.body.get("next").is_none());

    let r = t.get(&ADMIN, "/v1/quotas?all_tenants=True").await;
    r.assert_status(200);
    assert_eq!(r.body["quotas"].as_array().map(Vec::len), Some(4));
    assert!(r.body.get("next").is_none());

    // Paging: marker is the integer id; next carries it.
    let r = t.get(&ADMIN, "/v1/quotas?all_tenants=True&limit=2").await;
    r.assert_status(200);
    let page: Vec<i64> = r.body["quotas"]
        .as_array()
        .expect("quotas")
        .iter()
        .filter_map(|q| q["id"].as_i64())
        .collect();
    assert_eq!(page, ids[..2]);
    assert_eq!(
        r.body["next"],
        format!(
            "http://127.0.0.1:9511/v1/quotas?sort_key=id&sort_dir=asc&limit=2&marker={}",
            ids[1]
        )
    );
    let r = t
        .get(
            &ADMIN,
            &format!("/v1/quotas?all_tenants=True&limit=2&marker={}", ids[1]),
        )
        .await;
    r.assert_status(200);
    let page: Vec<i64> = r.body["quotas"]
        .as_array()
        .expect("quotas")
        .iter()
        .filter_map(|q| q["id"].as_i64())
        .collect();
    assert_eq!(page, ids[2..]);
    let r = t
        .get(
            &ADMIN,
            &format!("/v1/quotas?all_tenants=True&limit=2&marker={}", ids[3]),
        )
        .await;
    assert_eq!(r.body["quotas"], json!([]));

    // A non-integer marker and unknown arguments are rejected; non-admins may not list.
    t.get(&ADMIN, "/v1/quotas?marker=abc")
        .await
        .assert_status(400);
    t.get(&ADMIN, "/v1/quotas?foo=1").await.assert_status(400);
    let r = t.get(&ALICE, "/v1/quotas").await;
    r.assert_status(403);
    assert_eq!(
        r.body,
        magnum_error(403, "Policy doesn't allow quota:get_all to be performed.")
    );
}

// ---------------------------------------------------------------- stats

#[tokio::test]
async fn stats_scopes_and_counts_masters() {
    let t = app().await;
    let ct_a = t.template(&ALICE, "ct-a").await;
    let ct_b = t.template(&BOB, "ct-b").await;
    t.cluster(&ALICE, "a1", &ct_a).await;
    t.cluster(&ALICE, "a2", &ct_a).await;
    let r = t
        .post(
            &BOB,
            "/v1/clusters",
            json!({"name": "b1", "cluster_template_id": ct_b, "node_count": 3, "master_count": 1}),
        )
        .await;
    r.assert_status(202);

    // Global for an admin: 3 clusters; nodes = 2·(1 master + 1 worker) + (1 + 3).
    let r = t.get(&ADMIN, "/v1/stats").await;
    r.assert_status(200);
    assert_eq!(r.body, json!({"clusters": 3, "nodes": 8}));
    let r = t.get(&ADMIN, "/v1/stats?project_id=p-alice").await;
    assert_eq!(r.body, json!({"clusters": 2, "nodes": 4}));
    let r = t.get(&ADMIN, "/v1/stats?type=cluster").await;
    assert_eq!(r.body, json!({"clusters": 3, "nodes": 8}));
    let r = t.get(&ADMIN, "/v1/stats?type=Cluster").await;
    r.assert_status(200);

    // Non-admin: own project, explicit or not.
    let r = t.get(&ALICE, "/v1/stats").await;
    assert_eq!(r.body, json!({"clusters": 2, "nodes": 4}));
    let r = t.get(&BOB, "/v1/stats?project_id=p-bob&type=cluster").await;
    assert_eq!(r.body, json!({"clusters": 1, "nodes": 4}));
    let r = t.get(&BOB, "/v1/stats?project_id=p-alice").await;
    r.assert_status(403);
    assert_eq!(r.body, magnum_error(403, "Not authorized."));
    // An empty project.
    let r = t.get(&ADMIN, "/v1/stats?project_id=nobody").await;
    assert_eq!(r.body, json!({"clusters": 0, "nodes": 0}));

    t.get(&ADMIN, "/v1/stats?type=x").await.assert_status(400);
    t.get(&ADMIN, "/v1/stats?foo=1").await.assert_status(400);
}

// ---------------------------------------------------------------- mservices

#[tokio::test]
async fn mservices_lists_this_replica() {
    let t = app().await;
    let host = t.state.config.service_host();
    magnum_capi::db::services::heartbeat(&t.state.pool, &host, "magnum-conductor")
        .await
        .expect("heartbeat");
    magnum_capi::db::services::heartbeat(&t.state.pool, &host, "magnum-conductor")
        .await
        .expect("heartbeat");
    let r = t.get(&ADMIN, "/v1/mservices").await;
    r.assert_status(200);
    let list = r.body["mservices"].as_array().expect("mservices");
    assert_eq!(list.len(), 1);
    let s = &list[0];
    assert_eq!(
        keys(s),
        [
            "binary",
            "created_at",
            "disabled",
            "disabled_reason",
            "host",
            "id",
            "report_count",
            "state",
            "updated_at"
        ]
    );
    assert_eq!(s["host"], host.as_str());
    assert_eq!(s["binary"], "magnum-conductor");
    assert_eq!(s["state"], "up");
    assert_eq!(s["report_count"], 2);
    assert_eq!(s["disabled"], false);
    assert!(s["disabled_reason"].is_null());
    assert!(s["id"].is_i64());
    assert!(r.body.get("next").is_none());

    // Not seen for longer than service_down_time → down.
    let down = t.state.config.service.service_down_time_secs + 5;
    let n = t
        .sql_i64(&format!(
            "WITH u AS (UPDATE magnum_service SET last_seen_up = now() - interval '{down} seconds' RETURNING 1)
             SELECT count(*) FROM u"
        ))
        .await;
    assert_eq!(n, 1);
    let r = t.get(&ADMIN, "/v1/mservices").await;
    assert_eq!(r.body["mservices"][0]["state"], "down");
    // A fresh heartbeat brings it back.
    magnum_capi::db::services::heartbeat(&t.state.pool, &host, "magnum-conductor")
        .await
        .expect("heartbeat");
    let r = t.get(&ADMIN, "/v1/mservices").await;
    assert_eq!(r.body["mservices"][0]["state"], "up");
    assert_eq!(r.body["mservices"][0]["report_count"], 3);
}

#[tokio::test]
async fn mservices_rejects_query_and_non_admins() {
    let t = app().await;
    t.get(&ADMIN, "/v1/mservices?limit=1")
        .await
        .assert_status(400);
    t.get(&ADMIN, "/v1/mservices?all_tenants=true")
        .await
        .assert_status(400);
    let r = t.get(&ALICE, "/v1/mservices").await;
    r.assert_status(403);
    let expected = magnum_error(
        403,
        "Policy doesn't allow magnum-service:get_all to be performed.",
    );
    assert_eq!(sample("error_403_mservices_demo"), expected);
    assert_eq!(r.body, expected);
}

// ---------------------------------------------------------------- certificates

#[tokio::test]
async fn certificate_of_unknown_cluster() {
    let t = app().await;
    let r = t.get(&ADMIN, "/v1/certificates/no-such-cluster").await;
    r.assert_status(404);
    assert_eq!(
        r.body,
        magnum_error(404, "Cluster no-such-cluster could not be found.")
    );
    // POST: the lookup failure is a 400.
    let csr = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n";
    let r = t
        .post(
            &ADMIN,
            "/v1/certificates",
            json!({"cluster_uuid": "no-such-cluster", "csr": csr}),
        )
        .await;
    assert_magnum_error(&r, 400, "Cluster no-such-cluster could not be found.");
    // bay_uuid is an unknown attribute on current Magnum.
    let r = t
        .post(
            &ADMIN,
            "/v1/certificates",
            json!({"bay_uuid": "5d12f6fd-a196-4bf0-ae4c-1f639a523a52", "csr": csr}),
        )
        .await;
    let detail = assert_magnum_error(&r, 400, "Unknown attribute");
    assert!(detail.contains("bay_uuid"), "{detail}");
    // Unknown query argument and bad ca_cert_type.
    t.get(&ADMIN, "/v1/certificates/no-such-cluster?foo=1")
        .await
        .assert_status(400);
}

#[tokio::test]
async fn certificate_get_belongs_to_the_cluster_creator() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let c = t.cluster(&ALICE, "c", &ct).await;
    let path = format!("/v1/certificates/{c}");
    // Another user of the same project (member or reader) is refused.
    for who in [&ALICE2, &READER] {
        let r = t.get(who, &path).await;
        r.assert_status(403);
        assert_eq!(
            r.body,
            magnum_error(403, "Policy doesn't allow certificate:get to be performed.")
        );
    }
    let csr = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n";
    let r = t
        .post(
            &ALICE2,
            "/v1/certificates",
            json!({"cluster_uuid": c, "csr": csr}),
        )
        .await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow certificate:create to be performed.",
    );
    // Another project does not see the cluster at all.
    t.get(&BOB, &path).await.assert_status(404);
    // Certificate lookups are not widened for admins (contract §4.4): another project's admin
    // does not find the cluster.
    t.get(&OTHER_ADMIN, &path).await.assert_status(404);
    // The creator passes the policy.
    let r = t.get(&ALICE, &path).await;
    assert_ne!(r.status.as_u16(), 403, "{}", r.body);
    assert_ne!(r.status.as_u16(), 404, "{}", r.body);
}

async fn set_cluster_status(t: &TestApp, uuid: &str, status: &str) {
    let n = t
        .write_sql(&format!(
            "UPDATE cluster SET status = '{status}' WHERE uuid = '{uuid}'"
        ))
        .await;
    assert_eq!(n, 1);
}

#[tokio::test]
async fn ca_rotation_needs_a_complete_tls_cluster() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let c = t.cluster(&ALICE, "c", &ct).await;
    let path = format!("/v1/certificates/{c}");

    // Still CREATE_IN_PROGRESS.
    let r = t.call(&ALICE, "PATCH", &path, None, None).await;
    assert_magnum_error(&r, 400, "not supported");

    set_cluster_status(&t, &c, "CREATE_COMPLETE").await;
    // A reader may not rotate.
    let r = t.call(&READER, "PATCH", &path, None, None).await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow certificate:rotate_ca to be performed.",
    );
    let ops_before = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{c}' AND kind = 'rotate_ca'"
        ))
        .await;
    assert_eq!(ops_before, 0);

    let r = t.call(&ALICE, "PATCH", &path, None, None).await;
    r.assert_status(202);
    assert_eq!(r.body, json!({"uuid": c}));
    let r = t.get(&ALICE, &format!("/v1/clusters/{c}")).await;
    assert_eq!(r.body["status"], "UPDATE_IN_PROGRESS");
    let ops = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{c}' AND kind = 'rotate_ca' AND state = 'pending'"
        ))
        .await;
    assert_eq!(ops, 1);

    // Now in progress → refused again.
    t.call(&ALICE, "PATCH", &path, None, None)
        .await
        .assert_status(400);
}

#[tokio::test]
async fn ca_rotation_refused_on_tls_disabled_template() {
    let t = app().await;
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({
                "name": "notls", "image_id": "ubuntu-jammy", "coe": "kubernetes",
                "flavor_id": "m1.small", "master_flavor_id": "m1.medium", "keypair_id": "kp",
                "tls_disabled": true, "labels": {"kube_tag": "v1.30.4"},
            }),
        )
        .await;
    r.assert_status(201);
    let ct = r.body["uuid"].as_str().expect("uuid").to_string();
    let c = t.cluster(&ALICE, "c", &ct).await;
    set_cluster_status(&t, &c, "UPDATE_COMPLETE").await;
    let r = t
        .call(
            &ALICE,
            "PATCH",
            &format!("/v1/certificates/{c}"),
            None,
            None,
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Rotating the CA certificate on a non-TLS cluster is not supported",
    );
}

// ---------------------------------------------------------------- credentials

#[tokio::test]
async fn credential_rotation_is_1_12_and_member_only() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let c = t.cluster(&ALICE, "c", &ct).await;
    let path = format!("/v1/credentials/{c}");

    // Below 1.12 → 406.
    let r = t.call(&ALICE, "PATCH", &path, None, None).await;
    r.assert_status(406);
    let r = t.call(&ALICE, "PATCH", &path, Some("1.11"), None).await;
    r.assert_status(406);

    // A reader is not a member.
    let r = t.call(&READER, "PATCH", &path, Some("1.12"), None).await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow credential:rotate to be performed.",
    );

    // No admin shortcut: another project's admin sees the cluster but may not rotate (the new
    // credential would belong to the admin's project) — 403, as the issue asks.
    let r = t
        .call(&OTHER_ADMIN, "PATCH", &path, Some("1.12"), None)
        .await;
    assert_magnum_error(&r, 403, "Only a member of project");
    // Another project's member does not see it at all.
    let r = t.call(&BOB, "PATCH", &path, Some("1.12"), None).await;
    r.assert_status(404);
    // An admin-only role (no member role) in the owning project is not a member either.
    let admin_only = As {
        user: "alice",
        project: "p-alice",
        roles: "admin",
    };
    let r = t
        .call(&admin_only, "PATCH", &path, Some("1.12"), None)
        .await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow credential:rotate to be performed.",
    );

    let r = t.call(&ALICE, "PATCH", &path, Some("1.12"), None).await;
    r.assert_status(202);
    assert_eq!(r.body, json!({"uuid": c}));
    let n = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{c}' AND kind = 'rotate_credential'"
        ))
        .await;
    assert_eq!(n, 1);
    // By name too, with the latest microversion.
    let r = t
        .call(&ALICE, "PATCH", "/v1/credentials/c", Some("latest"), None)
        .await;
    r.assert_status(202);

    // Unknown cluster.
    t.call(&ALICE, "PATCH", "/v1/credentials/nope", Some("1.12"), None)
        .await
        .assert_status(404);
}
