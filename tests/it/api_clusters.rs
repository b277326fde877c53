//! HTTP-level rules of `/v1/clusters` (contract §1.4, §2, §3, §4, §6, §11), one test per rule.

use crate::common::*;

use std::collections::BTreeSet;

use serde_json::{Value, json};

/// A cluster that reached CREATE_COMPLETE; no worker runs afterwards.
async fn ready_cluster(t: &TestApp, who: &As, name: &str, body: Value) -> String {
    let w = start_worker(t);
    let r = t.post(who, "/v1/clusters", body_named(name, body)).await;
    r.assert_status(202);
    let uuid = r.body["uuid"].as_str().expect("uuid").to_string();
    t.wait_cluster(who, &uuid, "CREATE_COMPLETE").await;
    w.stop().await;
    uuid
}

fn body_named(name: &str, mut body: Value) -> Value {
    body["name"] = json!(name);
    body
}

async fn nodegroups(t: &TestApp, who: &As, cluster: &str) -> Vec<Value> {
    let r = t
        .get_v(who, &format!("/v1/clusters/{cluster}/nodegroups"), "1.9")
        .await;
    r.assert_status(200);
    r.body["nodegroups"].as_array().expect("list").clone()
}

fn ng_named<'a>(ngs: &'a [Value], name: &str) -> &'a Value {
    ngs.iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no nodegroup {name} in {ngs:?}"))
}

// ---------------------------------------------------------------------------------------------
// create

#[tokio::test]
async fn create_returns_202_with_only_the_uuid() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c1", "cluster_template_id": ct}),
        )
        .await;
    r.assert_status(202);
    assert_eq!(keys(&r.body), keys(&sample("cluster_create")));
    assert!(uuid::Uuid::parse_str(r.body["uuid"].as_str().expect("uuid")).is_ok());
    assert!(r.header("location").is_none());
}

#[tokio::test]
async fn create_row_is_visible_immediately_in_create_in_progress() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    let r = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    r.assert_status(200);
    assert_eq!(r.body["status"], "CREATE_IN_PROGRESS");
    assert_eq!(r.body["uuid"], uuid.as_str());
}

#[tokio::test]
async fn create_makes_two_default_nodegroups_in_create_in_progress() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    let ngs = nodegroups(&t, &ALICE, &uuid).await;
    assert_eq!(ngs.len(), 2);
    let m = ng_named(&ngs, "default-master");
    let w = ng_named(&ngs, "default-worker");
    assert_eq!(m["role"], "master");
    assert_eq!(w["role"], "worker");
    for n in [m, w] {
        assert_eq!(n["status"], "CREATE_IN_PROGRESS");
        assert_eq!(n["is_default"], true);
        assert_eq!(n["node_count"], 1);
        assert_eq!(n["image_id"], "ubuntu-jammy");
    }
    assert_eq!(m["flavor_id"], "m1.medium");
    assert_eq!(w["flavor_id"], "m1.small");
}

#[tokio::test]
async fn create_records_exactly_one_operation_with_the_rows() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    let ops = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{uuid}' AND kind = 'cluster_create' AND state = 'pending'"
        ))
        .await;
    assert_eq!(ops, 1);
    let rows = t
        .sql_i64(&format!(
            "SELECT count(*) FROM nodegroup WHERE cluster_id = '{uuid}'"
        ))
        .await;
    assert_eq!(rows, 2);
}

#[tokio::test]
async fn create_inherits_flavors_keypair_and_volume_size_from_the_template() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    let r = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(r.body["flavor_id"], "m1.small");
    assert_eq!(r.body["master_flavor_id"], "m1.medium");
    assert_eq!(r.body["keypair"], "kp");
    assert_eq!(r.body["docker_volume_size"], 10);
    assert_eq!(r.body["cluster_template_id"], ct.as_str());
}

#[tokio::test]
async fn create_values_given_override_the_template() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c1", "cluster_template_id": ct, "flavor_id": "f2",
                   "master_flavor_id": "f3", "keypair": "kp2", "docker_volume_size": 50}),
        )
        .await;
    r.assert_status(202);
    let c = t
        .get(
            &ALICE,
            &format!("/v1/clusters/{}", r.body["uuid"].as_str().unwrap()),
        )
        .await;
    assert_eq!(c.body["flavor_id"], "f2");
    assert_eq!(c.body["master_flavor_id"], "f3");
    assert_eq!(c.body["keypair"], "kp2");
    assert_eq!(c.body["docker_volume_size"], 50);
}

#[tokio::test]
async fn create_template_can_be_named_by_name() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct-by-name").await;
    let uuid = t.cluster(&ALICE, "c1", "ct-by-name").await;
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["cluster_template_id"], ct.as_str());
}

async fn labels_of_new_cluster(t: &TestApp, ct: &str, extra: Value) -> Value {
    let mut body = json!({"name": "c1", "cluster_template_id": ct});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let r = t.post(&ALICE, "/v1/clusters", body).await;
    r.assert_status(202);
    let c = t
        .get(
            &ALICE,
            &format!("/v1/clusters/{}", r.body["uuid"].as_str().unwrap()),
        )
        .await;
    c.body["labels"].clone()
}

#[tokio::test]
async fn create_without_labels_copies_the_template_labels() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let l = labels_of_new_cluster(&t, &ct, json!({})).await;
    assert_eq!(l, json!({"kube_tag": "v1.30.4"}));
}

#[tokio::test]
async fn create_with_empty_labels_copies_the_template_labels() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let l = labels_of_new_cluster(&t, &ct, json!({"labels": {}})).await;
    assert_eq!(l, json!({"kube_tag": "v1.30.4"}));
}

#[tokio::test]
async fn create_with_labels_uses_them_verbatim() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let l = labels_of_new_cluster(&t, &ct, json!({"labels": {"a": "b"}})).await;
    assert_eq!(l, json!({"a": "b"}));
}

#[tokio::test]
async fn create_merge_labels_unions_with_the_template_cluster_winning() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let l = labels_of_new_cluster(
        &t,
        &ct,
        json!({"labels": {"a": "b", "kube_tag": "v1.31.0"}, "merge_labels": true}),
    )
    .await;
    assert_eq!(l, json!({"a": "b", "kube_tag": "v1.31.0"}));
}

#[tokio::test]
async fn create_label_values_are_strings() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let l = labels_of_new_cluster(&t, &ct, json!({"labels": {"n": 5, "b": true}})).await;
    assert_eq!(l, json!({"n": "5", "b": "True"}));
}

#[tokio::test]
async fn create_floating_ip_and_master_lb_inherit_only_when_the_key_is_absent() {
    let t = app().await;
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"name": "ct", "image_id": "ubuntu-jammy", "coe": "kubernetes",
                   "flavor_id": "m1.small", "floating_ip_enabled": false, "master_lb_enabled": true}),
        )
        .await;
    r.assert_status(201);
    let ct = r.body["uuid"].as_str().unwrap().to_string();
    let show = |body: Value| {
        let t = &t;
        async move {
            let r = t.post(&ALICE, "/v1/clusters", body).await;
            r.assert_status(202);
            t.get(
                &ALICE,
                &format!("/v1/clusters/{}", r.body["uuid"].as_str().unwrap()),
            )
            .await
            .body
        }
    };
    let absent = show(json!({"name": "a", "cluster_template_id": ct})).await;
    assert_eq!(absent["floating_ip_enabled"], false);
    assert_eq!(absent["master_lb_enabled"], true);
    let given = show(json!({"name": "b", "cluster_template_id": ct,
                           "floating_ip_enabled": true, "master_lb_enabled": false}))
    .await;
    assert_eq!(given["floating_ip_enabled"], true);
    assert_eq!(given["master_lb_enabled"], false);
    let null =
        show(json!({"name": "c", "cluster_template_id": ct, "floating_ip_enabled": null})).await;
    assert_eq!(null["floating_ip_enabled"], Value::Null);
}

#[tokio::test]
async fn create_rejects_an_empty_name() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "", "cluster_template_id": ct, "create_timeout": null}),
        )
        .await;
    assert_magnum_error(&r, 400, "field/attribute name");
}

#[tokio::test]
async fn create_without_name_generates_one() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(&ALICE, "/v1/clusters", json!({"cluster_template_id": ct}))
        .await;
    r.assert_status(202);
    let c = t
        .get(
            &ALICE,
            &format!("/v1/clusters/{}", r.body["uuid"].as_str().unwrap()),
        )
        .await;
    assert!(
        c.body["name"].as_str().unwrap().ends_with("-cluster"),
        "{}",
        c.body
    );
}

#[tokio::test]
async fn create_timeout_null_is_stored_as_null_and_absent_defaults_to_60() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "a", "cluster_template_id": ct, "create_timeout": null}),
        )
        .await;
    r.assert_status(202);
    let c = t
        .get(
            &ALICE,
            &format!("/v1/clusters/{}", r.body["uuid"].as_str().unwrap()),
        )
        .await;
    assert_eq!(c.body["create_timeout"], Value::Null);
    let uuid = t.cluster(&ALICE, "b", &ct).await;
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["create_timeout"], 60);
}

#[tokio::test]
async fn create_rejects_a_name_not_matching_the_pattern() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    for bad in ["1abc", "a b", "-x"] {
        let r = t
            .post(
                &ALICE,
                "/v1/clusters",
                json!({"name": bad, "cluster_template_id": ct}),
            )
            .await;
        assert_magnum_error(
            &r,
            400,
            &format!(
                "Invalid input for field/attribute name. Value: '{bad}'. Value should match the pattern ^[a-zA-Z][a-zA-Z0-9_.-]*$"
            ),
        );
    }
}

#[tokio::test]
async fn create_negative_node_count_matches_magnum_exactly() {
    let t = app().await;
    let ct = t.template(&ADMIN, "ct").await;
    let r = t
        .post(
            &ADMIN,
            "/v1/clusters",
            json!({"name": "bad", "cluster_template_id": ct, "node_count": -1}),
        )
        .await;
    r.assert_status(400);
    assert_eq!(r.body, sample("error_400_cluster_create_bad_node_count"));
}

#[tokio::test]
async fn create_zero_node_count_is_rejected_below_1_10() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post_v(
            &ALICE,
            "/v1/clusters",
            "1.9",
            json!({"name": "z", "cluster_template_id": ct, "node_count": 0}),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Resizing a nodegroup to zero is not supported in the provided microversion.",
    );
}

#[tokio::test]
async fn create_zero_node_count_is_accepted_at_1_10() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post_v(
            &ALICE,
            "/v1/clusters",
            "1.10",
            json!({"name": "z", "cluster_template_id": ct, "node_count": 0}),
        )
        .await;
    r.assert_status(202);
    let c = t
        .get(
            &ALICE,
            &format!("/v1/clusters/{}", r.body["uuid"].as_str().unwrap()),
        )
        .await;
    assert_eq!(c.body["node_count"], 0);
}

#[tokio::test]
async fn create_missing_template_is_400_at_1_1_like_magnum() {
    let t = app().await;
    let r = t
        .post(
            &ADMIN,
            "/v1/clusters",
            json!({"name": "bad", "cluster_template_id": "no-such-template", "node_count": 1}),
        )
        .await;
    r.assert_status(400);
    assert_eq!(r.body, sample("error_400_cluster_create_bad_template"));
}

#[tokio::test]
async fn create_missing_template_is_404_from_1_10() {
    let t = app().await;
    let r = t
        .post_v(
            &ADMIN,
            "/v1/clusters",
            "1.10",
            json!({"name": "bad", "cluster_template_id": "no-such-template"}),
        )
        .await;
    assert_magnum_error(
        &r,
        404,
        "ClusterTemplate no-such-template could not be found.",
    );
}

#[tokio::test]
async fn create_even_master_count_is_400() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "m", "cluster_template_id": ct, "master_count": 2, "master_lb_enabled": true}),
        )
        .await;
    assert_magnum_error(&r, 400, "even");
}

#[tokio::test]
async fn create_three_masters_need_a_load_balancer() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "m", "cluster_template_id": ct, "master_count": 3}),
        )
        .await;
    r.assert_status(400);
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "m", "cluster_template_id": ct, "master_count": 3, "master_lb_enabled": true}),
        )
        .await;
    r.assert_status(202);
    let c = t
        .get(
            &ALICE,
            &format!("/v1/clusters/{}", r.body["uuid"].as_str().unwrap()),
        )
        .await;
    assert_eq!(c.body["master_count"], 3);
}

#[tokio::test]
async fn create_beyond_the_default_quota_of_20_is_403() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    for i in 0..20 {
        t.cluster(&ALICE, &format!("c{i}"), &ct).await;
    }
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c20", "cluster_template_id": ct}),
        )
        .await;
    assert_magnum_error(&r, 403, &quota_message(20));
    // Another project is unaffected.
    let ct_b = t.template(&BOB, "ct").await;
    t.cluster(&BOB, "b", &ct_b).await;
}

#[tokio::test]
async fn create_beyond_a_stored_quota_is_403() {
    let t = app().await;
    let q = t
        .post(
            &ADMIN,
            "/v1/quotas",
            json!({"project_id": "p-alice", "resource": "Cluster", "hard_limit": 1}),
        )
        .await;
    q.assert_status(201);
    let ct = t.template(&ALICE, "ct").await;
    t.cluster(&ALICE, "c1", &ct).await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c2", "cluster_template_id": ct}),
        )
        .await;
    assert_magnum_error(&r, 403, &quota_message(1));
}

#[tokio::test]
async fn create_rejects_read_only_fields() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    for (field, value) in [
        ("stack_id", json!("s")),
        ("api_address", json!("https://1.2.3.4:6443")),
        ("project_id", json!("p-bob")),
    ] {
        let mut body = json!({"name": "c", "cluster_template_id": ct});
        body[field] = value;
        let r = t.post(&ALICE, "/v1/clusters", body).await;
        assert_magnum_error(&r, 400, "Cannot set read only field.");
    }
}

#[tokio::test]
async fn create_from_a_hidden_template_is_403_for_non_admins() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let p = t
        .patch(
            &ADMIN,
            &format!("/v1/clustertemplates/{ct}"),
            json!([{"op": "replace", "path": "/hidden", "value": "true"}]),
        )
        .await;
    p.assert_status(200);
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct}),
        )
        .await;
    assert_magnum_error(&r, 403, "Not authorized.");
    // An admin may still use it.
    t.cluster(&ADMIN, "c", &ct).await;
}

// ---------------------------------------------------------------------------------------------
// views

#[tokio::test]
async fn show_full_view_has_magnums_keys_without_faults_when_not_failed() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    let r = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    let mut expected = keys(&sample("cluster_show_after_create"));
    expected.retain(|k| k != "faults");
    assert_eq!(keys(&r.body), expected);
    assert_eq!(r.body["merge_labels"], false);
    assert_eq!(r.body["health_status_reason"], json!({}));
    assert_eq!(r.body["node_addresses"], json!([]));
    assert_eq!(r.body["project_id"], "p-alice");
    assert_eq!(r.body["user_id"], "alice");
    assert_eq!(
        r.body["links"],
        json!([{"href": format!("http://127.0.0.1:9511/v1/clusters/{uuid}"), "rel": "self"},
               {"href": format!("http://127.0.0.1:9511/clusters/{uuid}"), "rel": "bookmark"}])
    );
}

#[tokio::test]
async fn show_faults_appear_only_when_failed() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    t.write_sql(&format!(
        "UPDATE cluster SET status = 'CREATE_FAILED', status_reason = 'boom' WHERE uuid = '{uuid}'"
    ))
    .await;
    t.write_sql(&format!("UPDATE nodegroup SET status = 'CREATE_FAILED', status_reason = 'no capacity' WHERE cluster_id = '{uuid}' AND name = 'default-worker'")).await;
    let r = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(keys(&r.body), keys(&sample("cluster_show_create_failed")));
    assert_eq!(r.body["faults"], json!({"default-worker": "no capacity"}));
    assert_eq!(r.body["status_reason"], "boom");
    // Magnum adds faults in its show only: detail items have none (the real Magnum's answers,
    // tests/it/import_magnum.rs).
    let d = t.get(&ALICE, "/v1/clusters/detail").await;
    assert_eq!(d.body["clusters"][0]["status"], "CREATE_FAILED");
    assert!(d.body["clusters"][0].get("faults").is_none(), "{}", d.body);
}

#[tokio::test]
async fn list_items_have_magnums_short_keys() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    t.cluster(&ALICE, "c1", &ct).await;
    let r = t.get(&ALICE, "/v1/clusters").await;
    r.assert_status(200);
    let expected = sample("cluster_list");
    assert_eq!(keys(&r.body), keys(&expected));
    assert_eq!(keys(&r.body["clusters"][0]), keys(&expected["clusters"][0]));
    assert_eq!(r.body["clusters"][0]["merge_labels"], false);
}

#[tokio::test]
async fn detail_items_are_the_full_view() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    let r = t.get(&ALICE, "/v1/clusters/detail").await;
    r.assert_status(200);
    let expected = sample("cluster_list_detail");
    assert_eq!(keys(&r.body["clusters"][0]), keys(&expected["clusters"][0]));
    let show = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(r.body["clusters"][0], show.body);
}

#[tokio::test]
async fn microversion_1_13_shows_cluster_id_instead_of_stack_id() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    for path in [
        format!("/v1/clusters/{uuid}"),
        "/v1/clusters".to_string(),
        "/v1/clusters/detail".to_string(),
    ] {
        for (v, present, absent) in [
            ("1.13", "cluster_id", "stack_id"),
            ("latest", "cluster_id", "stack_id"),
            ("1.12", "stack_id", "cluster_id"),
            ("1.1", "stack_id", "cluster_id"),
        ] {
            let r = t.get_v(&ALICE, &path, v).await;
            r.assert_status(200);
            let item = if r.body.get("clusters").is_some() {
                r.body["clusters"][0].clone()
            } else {
                r.body.clone()
            };
            assert!(item.get(present).is_some(), "{path} @ {v}: {item}");
            assert!(item.get(absent).is_none(), "{path} @ {v}: {item}");
        }
    }
}

#[tokio::test]
async fn labels_diffs_report_the_parent_value() {
    let t = app().await;
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"name": "ct", "image_id": "ubuntu-jammy", "coe": "kubernetes",
                   "labels": {"kube_tag": "v1.30.4", "gone": "g", "same": "s"}}),
        )
        .await;
    r.assert_status(201);
    let ct = r.body["uuid"].as_str().unwrap().to_string();
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct,
                   "labels": {"kube_tag": "v1.31.0", "same": "s", "new": "n"}}),
        )
        .await;
    r.assert_status(202);
    let c = t
        .get(
            &ALICE,
            &format!("/v1/clusters/{}", r.body["uuid"].as_str().unwrap()),
        )
        .await;
    assert_eq!(c.body["labels_overridden"], json!({"kube_tag": "v1.30.4"}));
    assert_eq!(c.body["labels_added"], json!({"new": "n"}));
    assert_eq!(c.body["labels_skipped"], json!({"gone": "g"}));
}

#[tokio::test]
async fn timestamps_are_rfc3339_with_an_explicit_offset() {
    let t = app_with_worker().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c1", &ct).await;
    let r = t.wait_cluster(&ALICE, &uuid, "CREATE_COMPLETE").await;
    for k in ["created_at", "updated_at"] {
        let s = r.body[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k}: {}", r.body));
        assert!(s.ends_with("+00:00"), "{k}={s}");
        assert!(chrono::DateTime::parse_from_rfc3339(s).is_ok(), "{k}={s}");
        assert_eq!(s.len(), "2016-08-29T06:51:31+00:00".len(), "{k}={s}");
    }
}

#[tokio::test]
async fn node_and_master_counts_are_computed_from_nodegroups() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct, "node_count": 4,
                   "master_count": 3, "master_lb_enabled": true}),
        )
        .await;
    r.assert_status(202);
    let uuid = r.body["uuid"].as_str().unwrap().to_string();
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["node_count"], 4);
    assert_eq!(c.body["master_count"], 3);
    // An extra worker group counts towards node_count.
    t.write_sql(&format!(
        "INSERT INTO nodegroup (uuid, name, cluster_id, project_id, node_count, role, min_node_count, is_default, labels, node_addresses, status)
         VALUES ('{}', 'extra', '{uuid}', 'p-alice', 2, 'worker', 0, false, '{{}}', '[]', 'CREATE_COMPLETE')",
        uuid::Uuid::new_v4()
    )).await;
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["node_count"], 6);
    assert_eq!(c.body["master_count"], 3);
    let l = t.get(&ALICE, "/v1/clusters").await;
    assert_eq!(l.body["clusters"][0]["node_count"], 6);
}

// ---------------------------------------------------------------------------------------------
// lookups, visibility, pagination

#[tokio::test]
async fn get_by_name_resolves_the_cluster() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "named", &ct).await;
    let r = t.get(&ALICE, "/v1/clusters/named").await;
    r.assert_status(200);
    assert_eq!(r.body["uuid"], uuid.as_str());
}

#[tokio::test]
async fn get_by_ambiguous_name_is_409() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    t.cluster(&ALICE, "twin", &ct).await;
    t.cluster(&ALICE, "twin", &ct).await;
    let r = t.get(&ALICE, "/v1/clusters/twin").await;
    assert_magnum_error(
        &r,
        409,
        "Multiple clusters exist with same name. Please use the cluster uuid instead.",
    );
    assert_eq!(
        r.body["errors"][0]["title"],
        "Multiple clusters exist with same name"
    );
}

#[tokio::test]
async fn get_unknown_cluster_is_404_with_magnums_message() {
    let t = app().await;
    let r = t.get(&ALICE, "/v1/clusters/nope").await;
    assert_magnum_error(&r, 404, "Cluster nope could not be found.");
    let u = uuid::Uuid::new_v4();
    let r = t.get(&ALICE, &format!("/v1/clusters/{u}")).await;
    assert_magnum_error(&r, 404, &format!("Cluster {u} could not be found."));
}

#[tokio::test]
async fn other_projects_cannot_see_a_cluster() {
    let t = app().await;
    let ct = t.template(&BOB, "ct").await;
    let uuid = t.cluster(&BOB, "bobs", &ct).await;
    for path in [format!("/v1/clusters/{uuid}"), "/v1/clusters/bobs".into()] {
        let r = t.get(&ALICE, &path).await;
        r.assert_status(404);
    }
    let l = t.get(&ALICE, "/v1/clusters").await;
    assert_eq!(l.body["clusters"], json!([]));
    let d = t.delete(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    d.assert_status(404);
    let p = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            json!([{"op": "replace", "path": "/node_count", "value": 2}]),
        )
        .await;
    p.assert_status(404);
}

#[tokio::test]
async fn admin_sees_clusters_of_all_projects() {
    let t = app().await;
    let ca = t.template(&ALICE, "ct").await;
    let cb = t.template(&BOB, "ct").await;
    let a = t.cluster(&ALICE, "a", &ca).await;
    let b = t.cluster(&BOB, "b", &cb).await;
    let l = t.get(&ADMIN, "/v1/clusters").await;
    let uuids: BTreeSet<String> = l.body["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["uuid"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(uuids, BTreeSet::from([a.clone(), b.clone()]));
    t.get(&ADMIN, &format!("/v1/clusters/{b}"))
        .await
        .assert_status(200);
    t.get(&ADMIN, "/v1/clusters/a").await.assert_status(200);
    let d = t.get(&ADMIN, "/v1/clusters/detail").await;
    assert_eq!(d.body["clusters"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn list_paginates_with_a_next_link() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let mut created = vec![];
    for i in 0..3 {
        created.push(t.cluster(&ALICE, &format!("c{i}"), &ct).await);
    }
    for path in ["clusters", "clusters/detail"] {
        let r = t.get(&ALICE, &format!("/v1/{path}?limit=2")).await;
        r.assert_status(200);
        let page: Vec<&str> = r.body["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["uuid"].as_str().unwrap())
            .collect();
        assert_eq!(page, vec![created[0].as_str(), created[1].as_str()]);
        assert_eq!(
            r.body["next"],
            format!(
                "http://127.0.0.1:9511/v1/{path}?sort_key=id&sort_dir=asc&limit=2&marker={}",
                created[1]
            )
        );
        let next = r.body["next"].as_str().unwrap();
        let rest = next.trim_start_matches("http://127.0.0.1:9511");
        let r2 = t.get(&ALICE, rest).await;
        r2.assert_status(200);
        assert_eq!(r2.body["clusters"].as_array().unwrap().len(), 1);
        assert_eq!(r2.body["clusters"][0]["uuid"], created[2].as_str());
        assert!(r2.body.get("next").is_none(), "{}", r2.body);
        let all = t.get(&ALICE, &format!("/v1/{path}")).await;
        assert!(all.body.get("next").is_none());
    }
}

/// A page after a marker, in each order: by id either way (one index range from the marker), by
/// another key (the marker's value compared), for a project and for an admin; the last
/// cluster's page is empty, not a 404.
#[tokio::test]
async fn list_pages_from_a_marker_in_every_order() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let mut created = vec![];
    for name in ["b", "d", "a", "c"] {
        created.push(t.cluster(&ALICE, name, &ct).await);
    }
    let uuids = |r: &crate::common::Resp| -> Vec<String> {
        r.body["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["uuid"].as_str().unwrap().to_string())
            .collect()
    };
    for who in [&ALICE, &ADMIN] {
        let desc = t
            .get(
                who,
                &format!("/v1/clusters?sort_dir=desc&limit=2&marker={}", created[2]),
            )
            .await;
        desc.assert_status(200);
        assert_eq!(uuids(&desc), vec![created[1].clone(), created[0].clone()]);
        // By name: a, b, c, d; after "b" come "c" and "d".
        let by_name = t
            .get(
                who,
                &format!(
                    "/v1/clusters/detail?sort_key=name&limit=2&marker={}",
                    created[0]
                ),
            )
            .await;
        by_name.assert_status(200);
        assert_eq!(
            uuids(&by_name),
            vec![created[3].clone(), created[1].clone()]
        );
        let by_name_desc = t
            .get(
                who,
                &format!(
                    "/v1/clusters?sort_key=name&sort_dir=desc&marker={}",
                    created[3]
                ),
            )
            .await;
        assert_eq!(
            uuids(&by_name_desc),
            vec![created[0].clone(), created[2].clone()]
        );
        // From the end, without a marker: the newest first.
        let newest = t.get(who, "/v1/clusters?sort_dir=desc&limit=3").await;
        assert_eq!(
            uuids(&newest),
            vec![created[3].clone(), created[2].clone(), created[1].clone()]
        );
        let last = t
            .get(who, &format!("/v1/clusters?marker={}", created[3]))
            .await;
        last.assert_status(200);
        assert!(uuids(&last).is_empty(), "{}", last.body);
    }
}

#[tokio::test]
async fn sort_key_node_count_is_400() {
    let t = app().await;
    let r = t.get(&ALICE, "/v1/clusters?sort_key=node_count").await;
    assert_magnum_error(
        &r,
        400,
        "The sort_key value \"node_count\" is an invalid field for sorting",
    );
    t.get(&ALICE, "/v1/clusters?sort_key=name&sort_dir=desc")
        .await
        .assert_status(200);
}

// ---------------------------------------------------------------------------------------------
// PATCH

fn replace(path: &str, value: Value) -> Value {
    json!([{"op": "replace", "path": path, "value": value}])
}

#[tokio::test]
async fn patch_node_count_resizes_the_default_worker() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            replace("/node_count", json!(3)),
        )
        .await;
    r.assert_status(202);
    assert_eq!(r.body, json!({"uuid": uuid}));
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["status"], "UPDATE_IN_PROGRESS");
    assert_eq!(c.body["node_count"], 3);
    assert_eq!(c.body["master_count"], 1);
    let ngs = nodegroups(&t, &ALICE, &uuid).await;
    assert_eq!(ng_named(&ngs, "default-worker")["node_count"], 3);
    assert_eq!(
        ng_named(&ngs, "default-worker")["status"],
        "UPDATE_IN_PROGRESS"
    );
    let w = start_worker(&t);
    let c = t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    assert_eq!(c.body["node_count"], 3);
    assert_eq!(c.body["node_addresses"].as_array().unwrap().len(), 3);
    let ngs = nodegroups(&t, &ALICE, &uuid).await;
    assert_eq!(
        ng_named(&ngs, "default-worker")["status"],
        "UPDATE_COMPLETE"
    );
    w.stop().await;
}

#[tokio::test]
async fn patch_of_other_properties_is_400() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            replace("/name", json!("other")),
        )
        .await;
    assert_magnum_error(&r, 400, "cannot change cluster property(ies) name.");
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            json!([{"op": "replace", "path": "/name", "value": "x"},
                   {"op": "replace", "path": "/labels", "value": "{'a': 'b'}"}]),
        )
        .await;
    assert_magnum_error(&r, 400, "cannot change cluster property(ies) name, labels.");
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["name"], "c");
}

#[tokio::test]
async fn patch_health_status_is_saved_without_a_status_change() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            json!([{"op": "replace", "path": "/health_status", "value": "UNHEALTHY"},
                   {"op": "replace", "path": "/health_status_reason",
                    "value": "{'api': 'ok', 'node-0.Ready': 'False'}"}]),
        )
        .await;
    r.assert_status(202);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["status"], "CREATE_COMPLETE");
    assert_eq!(c.body["health_status"], "UNHEALTHY");
    assert_eq!(
        c.body["health_status_reason"],
        json!({"api": "ok", "node-0.Ready": "False"})
    );
    let ops = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{uuid}' AND kind <> 'cluster_create'"
        ))
        .await;
    assert_eq!(ops, 0);
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            replace("/health_status", json!("SICK")),
        )
        .await;
    r.assert_status(400);
}

#[tokio::test]
async fn patch_of_an_internal_path_is_400() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    for path in ["/api_address", "/stack_id", "/uuid", "/project_id"] {
        let r = t
            .patch(
                &ALICE,
                &format!("/v1/clusters/{uuid}"),
                replace(path, json!("x")),
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
async fn patch_rollback_is_accepted_from_1_3_only() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let body = replace("/health_status", json!("HEALTHY"));
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}?rollback=True"),
            body.clone(),
        )
        .await;
    assert_magnum_error(&r, 400, "Unknown argument: \"rollback\"");
    let r = t
        .patch_v(
            &ALICE,
            &format!("/v1/clusters/{uuid}?rollback=True"),
            "1.3",
            body,
        )
        .await;
    r.assert_status(202);
}

#[tokio::test]
async fn patch_with_a_trailing_slash_and_rollback_works() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .patch_v(
            &ALICE,
            &format!("/v1/clusters/{uuid}/?rollback=True"),
            "latest",
            replace("/node_count", json!(2)),
        )
        .await;
    r.assert_status(202);
    assert_eq!(r.body, json!({"uuid": uuid}));
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["node_count"], 2);
}

#[tokio::test]
async fn patch_remove_node_count_resets_it_to_1() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(
        &t,
        &ALICE,
        "c",
        json!({"cluster_template_id": ct, "node_count": 3}),
    )
    .await;
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            json!([{"op": "remove", "path": "/node_count"}]),
        )
        .await;
    r.assert_status(202);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["node_count"], 1);
    assert_eq!(c.body["status"], "UPDATE_IN_PROGRESS");
}

#[tokio::test]
async fn patch_node_count_zero_needs_1_10() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            replace("/node_count", json!(0)),
        )
        .await;
    r.assert_status(400);
    let r = t
        .patch_v(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            "1.10",
            replace("/node_count", json!(0)),
        )
        .await;
    r.assert_status(202);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["node_count"], 0);
}

// ---------------------------------------------------------------------------------------------
// delete

#[tokio::test]
async fn delete_is_204_then_in_progress_then_gone() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t.delete(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    r.assert_status(204);
    assert_eq!(r.body, Value::Null);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["status"], "DELETE_IN_PROGRESS");
    let w = start_worker(&t);
    let gone = t.wait_cluster(&ALICE, &uuid, "GONE").await;
    assert_magnum_error(&gone, 404, &format!("Cluster {uuid} could not be found."));
    w.stop().await;
    let ngs = t
        .sql_i64(&format!(
            "SELECT count(*) FROM nodegroup WHERE cluster_id = '{uuid}'"
        ))
        .await;
    assert_eq!(ngs, 0);
    // The template is no longer referenced.
    t.delete(&ALICE, &format!("/v1/clustertemplates/{ct}"))
        .await
        .assert_status(204);
}

#[tokio::test]
async fn delete_twice_records_one_operation() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    t.delete(&ALICE, &format!("/v1/clusters/{uuid}"))
        .await
        .assert_status(204);
    t.delete(&ALICE, "/v1/clusters/c").await.assert_status(204);
    let ops = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{uuid}' AND kind = 'cluster_delete'"
        ))
        .await;
    assert_eq!(ops, 1);
}

#[tokio::test]
async fn delete_while_creating_ends_gone() {
    let t = app_with_worker().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    t.delete(&ALICE, &format!("/v1/clusters/{uuid}"))
        .await
        .assert_status(204);
    t.wait_cluster(&ALICE, &uuid, "GONE").await;
}

// ---------------------------------------------------------------------------------------------
// resize

fn resize_path(uuid: &str) -> String {
    format!("/v1/clusters/{uuid}/actions/resize")
}

#[tokio::test]
async fn resize_below_1_7_is_406() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .post_v(&ALICE, &resize_path(&uuid), "1.6", json!({"node_count": 2}))
        .await;
    assert_magnum_error(
        &r,
        406,
        "Version 1.6 was requested but the requested API resize is not supported for this version.",
    );
    let r = t
        .post(&ALICE, &resize_path(&uuid), json!({"node_count": 2}))
        .await;
    r.assert_status(406);
}

#[tokio::test]
async fn resize_outside_the_nodegroup_bounds_is_400() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(
        &t,
        &ALICE,
        "c",
        json!({"cluster_template_id": ct, "node_count": 3, "labels": {"min_node_count": "2"}}),
    )
    .await;
    let r = t
        .post_v(&ALICE, &resize_path(&uuid), "1.7", json!({"node_count": 1}))
        .await;
    assert_magnum_error(
        &r,
        400,
        "Resizing default-worker outside the allowed range: min_node_count = 2, max_node_count = None",
    );
}

#[tokio::test]
async fn resize_of_the_master_nodegroup_is_400() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .post_v(
            &ALICE,
            &resize_path(&uuid),
            "1.7",
            json!({"node_count": 3, "nodegroup": "default-master"}),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Resizing the master nodegroup is not supported by this driver.",
    );
}

#[tokio::test]
async fn resize_moves_cluster_and_nodegroup_through_update_in_progress() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .post_v(&ALICE, &resize_path(&uuid), "1.7", json!({"node_count": 4}))
        .await;
    r.assert_status(202);
    assert_eq!(r.body, json!({"uuid": uuid}));
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["status"], "UPDATE_IN_PROGRESS");
    let ngs = nodegroups(&t, &ALICE, &uuid).await;
    let w = ng_named(&ngs, "default-worker");
    assert_eq!(w["status"], "UPDATE_IN_PROGRESS");
    assert_eq!(w["node_count"], 4);
    let worker = start_worker(&t);
    let c = t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    assert_eq!(c.body["node_count"], 4);
    let ngs = nodegroups(&t, &ALICE, &uuid).await;
    assert_eq!(
        ng_named(&ngs, "default-worker")["status"],
        "UPDATE_COMPLETE"
    );
    worker.stop().await;
}

#[tokio::test]
async fn resize_accepts_nodes_to_remove() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(
        &t,
        &ALICE,
        "c",
        json!({"cluster_template_id": ct, "node_count": 3}),
    )
    .await;
    let r = t
        .post_v(
            &ALICE,
            &resize_path(&uuid),
            "1.7",
            json!({"node_count": 2, "nodes_to_remove": ["server-1"], "nodegroup": "default-worker"}),
        )
        .await;
    r.assert_status(202);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["node_count"], 2);
}

#[tokio::test]
async fn resize_to_zero_needs_1_10() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .post_v(&ALICE, &resize_path(&uuid), "1.9", json!({"node_count": 0}))
        .await;
    assert_magnum_error(
        &r,
        400,
        "Resizing a nodegroup to zero is not supported in the provided microversion.",
    );
    let r = t
        .post_v(
            &ALICE,
            &resize_path(&uuid),
            "1.10",
            json!({"node_count": 0}),
        )
        .await;
    r.assert_status(202);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["node_count"], 0);
}

// ---------------------------------------------------------------------------------------------
// upgrade

fn upgrade_path(uuid: &str) -> String {
    format!("/v1/clusters/{uuid}/actions/upgrade")
}

#[tokio::test]
async fn upgrade_below_1_7_is_406() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .post_v(
            &ALICE,
            &upgrade_path(&uuid),
            "1.6",
            json!({"cluster_template": ct}),
        )
        .await;
    r.assert_status(406);
}

#[tokio::test]
async fn upgrade_at_1_7_is_400() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .post_v(
            &ALICE,
            &upgrade_path(&uuid),
            "1.7",
            json!({"cluster_template": ct}),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Cluster upgrade is not supported in the provided microversion.",
    );
}

#[tokio::test]
async fn upgrade_requires_a_complete_status() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .post_v(
            &ALICE,
            &upgrade_path(&uuid),
            "1.8",
            json!({"cluster_template": ct, "max_batch_size": 1}),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Upgrading a cluster when status is \"CREATE_IN_PROGRESS\" is not supported.",
    );
}

#[tokio::test]
async fn upgrade_moves_through_update_and_switches_the_template() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let ct2 = t.template(&ALICE, "ct2").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .post_v(
            &ALICE,
            &upgrade_path(&uuid),
            "1.8",
            json!({"cluster_template": "ct2", "max_batch_size": 1}),
        )
        .await;
    r.assert_status(202);
    assert_eq!(r.body, json!({"uuid": uuid}));
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["status"], "UPDATE_IN_PROGRESS");
    let w = start_worker(&t);
    let c = t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    assert_eq!(c.body["cluster_template_id"], ct2.as_str());
    w.stop().await;
}

// ---------------------------------------------------------------------------------------------
// more create / patch / resize / upgrade rules

#[tokio::test]
async fn create_ignores_a_given_uuid() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let given = uuid::Uuid::new_v4().to_string();
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct, "uuid": given}),
        )
        .await;
    r.assert_status(202);
    assert_ne!(r.body["uuid"], given.as_str());
}

#[tokio::test]
async fn create_rejects_unknown_attributes() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct, "foo": 1}),
        )
        .await;
    assert_magnum_error(&r, 400, "Unknown attribute for argument cluster: foo");
}

#[tokio::test]
async fn create_requires_a_cluster_template_id() {
    let t = app().await;
    let r = t.post(&ALICE, "/v1/clusters", json!({"name": "c"})).await;
    assert_magnum_error(&r, 400, "Mandatory field missing.");
}

#[tokio::test]
async fn create_by_a_reader_is_403() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let r = t
        .post(
            &READER,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct}),
        )
        .await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow cluster:create to be performed.",
    );
}

#[tokio::test]
async fn patch_node_count_while_creating_is_accepted_and_ignored() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            replace("/node_count", json!(5)),
        )
        .await;
    r.assert_status(202);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["status"], "CREATE_IN_PROGRESS");
    assert_eq!(c.body["node_count"], 1);
    let ops = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{uuid}'"
        ))
        .await;
    assert_eq!(ops, 1);
}

#[tokio::test]
async fn patch_add_on_an_existing_attribute_is_400() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clusters/{uuid}"),
            json!([{"op": "add", "path": "/node_count", "value": 2}]),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "The attribute /node_count has existed, please use 'replace' operation instead.",
    );
}

#[tokio::test]
async fn resize_in_a_non_resizable_status_is_accepted_and_ignored() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .post_v(&ALICE, &resize_path(&uuid), "1.7", json!({"node_count": 3}))
        .await;
    r.assert_status(202);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["status"], "CREATE_IN_PROGRESS");
    assert_eq!(c.body["node_count"], 1);
}

#[tokio::test]
async fn resize_while_updating_is_accepted() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    t.post_v(&ALICE, &resize_path(&uuid), "1.7", json!({"node_count": 2}))
        .await
        .assert_status(202);
    t.post_v(&ALICE, &resize_path(&uuid), "1.7", json!({"node_count": 3}))
        .await
        .assert_status(202);
    let w = start_worker(&t);
    let c = t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    assert_eq!(c.body["node_count"], 3);
    w.stop().await;
}

#[tokio::test]
async fn resize_does_not_widen_admin_scope() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    let r = t
        .post_v(&ADMIN, &resize_path(&uuid), "1.7", json!({"node_count": 2}))
        .await;
    r.assert_status(404);
}

#[tokio::test]
async fn upgrade_of_a_non_default_nodegroup_to_another_template_is_409() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    t.template(&ALICE, "ct2").await;
    let uuid = ready_cluster(&t, &ALICE, "c", json!({"cluster_template_id": ct})).await;
    t.post_v(
        &ALICE,
        &format!("/v1/clusters/{uuid}/nodegroups"),
        "1.9",
        json!({"name": "ng1"}),
    )
    .await
    .assert_status(202);
    let w = start_worker(&t);
    t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    w.stop().await;
    let r = t
        .post_v(
            &ALICE,
            &upgrade_path(&uuid),
            "1.8",
            json!({"cluster_template": "ct2", "nodegroup": "ng1"}),
        )
        .await;
    r.assert_status(409);
}

#[tokio::test]
async fn list_with_an_invisible_marker_is_404_and_bad_limits_are_400() {
    let t = app().await;
    let ct = t.template(&BOB, "ct").await;
    let bobs = t.cluster(&BOB, "b", &ct).await;
    let r = t.get(&ALICE, &format!("/v1/clusters?marker={bobs}")).await;
    r.assert_status(404);
    let r = t.get(&ALICE, "/v1/clusters?limit=0").await;
    assert_magnum_error(&r, 400, "Limit must be positive");
    let r = t.get(&ALICE, "/v1/clusters?marker=nope").await;
    assert_magnum_error(&r, 400, "Expected a uuid but received nope.");
    let r = t.get(&ALICE, "/v1/clusters?all_projects=1").await;
    r.assert_status(400);
}

#[tokio::test]
async fn create_checks_the_quota_before_the_hidden_template() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    t.post(
        &ADMIN,
        "/v1/quotas",
        json!({"project_id": "p-alice", "resource": "Cluster", "hard_limit": 0}),
    )
    .await
    .assert_status(201);
    t.patch(
        &ADMIN,
        &format!("/v1/clustertemplates/{ct}"),
        json!([{"op": "replace", "path": "/hidden", "value": "true"}]),
    )
    .await
    .assert_status(200);
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct}),
        )
        .await;
    assert_magnum_error(&r, 403, &quota_message(0));
}

#[tokio::test]
async fn create_accepts_the_templates_integer_id() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let id = t
        .sql_i64(&format!(
            "SELECT id::bigint FROM cluster_template WHERE uuid = '{ct}'"
        ))
        .await;
    let uuid = t.cluster(&ALICE, "c", &id.to_string()).await;
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["cluster_template_id"], ct.as_str());
}
