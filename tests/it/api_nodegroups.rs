//! HTTP-level rules of `/v1/clusters/{ident}/nodegroups` (contract §1.5, §3, §4), one test per rule.

use crate::common::*;

use serde_json::{Value, json};

const V: &str = "1.9";

/// A template and a cluster of `who` in CREATE_COMPLETE (api_address set); no worker afterwards.
async fn ready_cluster(t: &TestApp, who: &As) -> String {
    let ct = t.template(who, "ct").await;
    let w = start_worker(t);
    let uuid = t.cluster(who, "c", &ct).await;
    t.wait_cluster(who, &uuid, "CREATE_COMPLETE").await;
    w.stop().await;
    uuid
}

/// Alice's cluster `c` on her template `ct` (not waited for).
async fn alices_cluster_c(t: &TestApp) -> String {
    let ct = t.template(&ALICE, "ct").await;
    t.cluster(&ALICE, "c", &ct).await
}

fn ngs_path(cluster: &str) -> String {
    format!("/v1/clusters/{cluster}/nodegroups")
}

fn ng_path(cluster: &str, ng: &str) -> String {
    format!("/v1/clusters/{cluster}/nodegroups/{ng}")
}

async fn create_ng(t: &TestApp, who: &As, cluster: &str, body: Value) -> Resp {
    t.post_v(who, &ngs_path(cluster), V, body).await
}

async fn cluster_status(t: &TestApp, who: &As, cluster: &str) -> Value {
    t.get(who, &format!("/v1/clusters/{cluster}")).await.body["status"].clone()
}

const FULL_KEYS: [&str; 28] = [
    "id",
    "uuid",
    "name",
    "cluster_id",
    "project_id",
    "docker_volume_size",
    "labels",
    "labels_overridden",
    "labels_added",
    "labels_skipped",
    "links",
    "flavor_id",
    "image_id",
    "node_addresses",
    "node_count",
    "role",
    "min_node_count",
    "max_node_count",
    "is_default",
    "stack_id",
    "status",
    "status_reason",
    "version",
    "node_labels",
    "node_taints",
    "merge_labels",
    "created_at",
    "updated_at",
];

fn full_keys() -> Vec<String> {
    let mut k: Vec<String> = FULL_KEYS.iter().map(|s| s.to_string()).collect();
    k.sort();
    k
}

#[tokio::test]
async fn nodegroups_below_1_9_are_406_like_magnum() {
    let t = app().await;
    let ct = t.template(&ADMIN, "ct").await;
    let uuid = t.cluster(&ADMIN, "c", &ct).await;
    let r = t.get(&ADMIN, &ngs_path(&uuid)).await;
    r.assert_status(406);
    assert_eq!(
        r.body,
        sample("error_406_nodegroup_list_default_microversion")
    );
    let r = t.get_v(&ADMIN, &ngs_path(&uuid), "1.8").await;
    r.assert_status(406);
    for (method, path) in [
        ("GET", ng_path(&uuid, "default-worker")),
        ("POST", ngs_path(&uuid)),
        ("PATCH", ng_path(&uuid, "default-worker")),
        ("DELETE", ng_path(&uuid, "default-worker")),
    ] {
        let body = match method {
            "POST" => Some(json!({"name": "x"})),
            "PATCH" => Some(json!([])),
            _ => None,
        };
        let r = t.call(&ADMIN, method, &path, Some("1.8"), body).await;
        r.assert_status(406);
    }
}

#[tokio::test]
async fn list_items_have_magnums_short_keys() {
    let t = app().await;
    let ct = t.template(&ADMIN, "ct").await;
    let uuid = t.cluster(&ADMIN, "c", &ct).await;
    let r = t.get_v(&ADMIN, &ngs_path(&uuid), "latest").await;
    r.assert_status(200);
    let expected = sample("nodegroup_list");
    assert_eq!(keys(&r.body), keys(&expected));
    let items = r.body["nodegroups"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for item in items {
        assert_eq!(keys(item), keys(&expected["nodegroups"][0]));
        assert_eq!(item["min_node_count"], 0);
        assert_eq!(item["max_node_count"], Value::Null);
        assert_eq!(item["merge_labels"], false);
    }
    // Sorted by id: master first, like Magnum.
    assert_eq!(items[0]["name"], "default-master");
    assert_eq!(items[1]["name"], "default-worker");
}

#[tokio::test]
async fn list_with_a_trailing_slash_works() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .get_v(&ALICE, &format!("/v1/clusters/{uuid}/nodegroups/"), V)
        .await;
    r.assert_status(200);
    assert_eq!(r.body["nodegroups"].as_array().unwrap().len(), 2);
    // The cluster may be named by name too.
    let r = t.get_v(&ALICE, &ngs_path("c"), V).await;
    r.assert_status(200);
}

#[tokio::test]
async fn list_filters_by_role() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    create_ng(&t, &ALICE, &uuid, json!({"name": "extra", "role": "gpu"}))
        .await
        .assert_status(202);
    let r = t
        .get_v(&ALICE, &format!("{}?role=master", ngs_path(&uuid)), V)
        .await;
    assert_eq!(r.names("nodegroups"), vec!["default-master"]);
    let r = t
        .get_v(&ALICE, &format!("{}?role=worker", ngs_path(&uuid)), V)
        .await;
    assert_eq!(r.names("nodegroups"), vec!["default-worker"]);
    let r = t
        .get_v(&ALICE, &format!("{}?role=gpu", ngs_path(&uuid)), V)
        .await;
    assert_eq!(r.names("nodegroups"), vec!["extra"]);
    let r = t
        .get_v(&ALICE, &format!("{}?bogus=1", ngs_path(&uuid)), V)
        .await;
    r.assert_status(400);
}

#[tokio::test]
async fn list_paginates_with_a_next_link() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = t
        .get_v(&ALICE, &format!("{}?limit=1", ngs_path(&uuid)), V)
        .await;
    r.assert_status(200);
    let first = r.body["nodegroups"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        r.body["next"],
        format!(
            "http://127.0.0.1:9511/v1/clusters/{uuid}/nodegroups?sort_key=id&sort_dir=asc&limit=1&marker={first}"
        )
    );
    let next = r.body["next"]
        .as_str()
        .unwrap()
        .replace("http://127.0.0.1:9511", "");
    let r2 = t.get_v(&ALICE, &next, V).await;
    r2.assert_status(200);
    assert_eq!(r2.body["nodegroups"][0]["name"], "default-worker");
}

/// Paging a cluster's nodegroups one at a time, by the next links, in every order gives the
/// whole list in that order, and a role filters it.
#[tokio::test]
async fn pages_of_one_walk_the_whole_list_in_every_order() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    for (name, role) in [
        ("b-extra", "gpu"),
        ("a-extra", "worker"),
        ("c-extra", "gpu"),
    ] {
        create_ng(&t, &ALICE, &uuid, json!({"name": name, "role": role}))
            .await
            .assert_status(202);
    }
    let walk = |query: String| {
        let t = &t;
        let uuid = uuid.clone();
        async move {
            let mut names = Vec::new();
            let mut path = format!("{}?limit=1&{query}", ngs_path(&uuid));
            loop {
                let r = t.get_v(&ALICE, &path, V).await;
                r.assert_status(200);
                let page = r.names("nodegroups");
                assert!(page.len() <= 1, "{path}: {page:?}");
                let empty = page.is_empty();
                names.extend(page);
                match r.body["next"].as_str() {
                    Some(next) if !empty => {
                        path = next.replace("http://127.0.0.1:9511", "");
                    }
                    _ => return names,
                }
            }
        }
    };
    let created = [
        "default-master",
        "default-worker",
        "b-extra",
        "a-extra",
        "c-extra",
    ];
    let reversed: Vec<&str> = created.iter().rev().copied().collect();
    assert_eq!(walk("sort_key=id".into()).await, created);
    assert_eq!(walk("sort_key=id&sort_dir=desc".into()).await, reversed);
    // A role, in either order (the next link does not carry it, as Magnum's does not).
    for (query, want) in [
        ("role=gpu", ["b-extra", "c-extra"]),
        ("role=gpu&sort_dir=desc", ["c-extra", "b-extra"]),
    ] {
        let r = t
            .get_v(&ALICE, &format!("{}?{query}", ngs_path(&uuid)), V)
            .await;
        r.assert_status(200);
        assert_eq!(r.names("nodegroups"), want, "{query}");
    }
    assert_eq!(
        walk("sort_key=name".into()).await,
        [
            "a-extra",
            "b-extra",
            "c-extra",
            "default-master",
            "default-worker"
        ]
    );
    // Bob sees none of it: the cluster is not his.
    let r = t
        .get_v(&BOB, &format!("{}?limit=1", ngs_path(&uuid)), V)
        .await;
    assert_magnum_error(&r, 404, &format!("Cluster {uuid} could not be found."));
}

#[tokio::test]
async fn get_by_id_uuid_and_name_returns_the_full_body() {
    let t = app().await;
    let uuid = alices_cluster_c(&t).await;
    let by_name = t.get_v(&ALICE, &ng_path(&uuid, "default-worker"), V).await;
    by_name.assert_status(200);
    let b = &by_name.body;
    assert_eq!(keys(b), full_keys());
    assert!(b["id"].is_i64(), "{b}");
    assert_eq!(b["cluster_id"], uuid.as_str());
    assert_eq!(b["project_id"], "p-alice");
    assert_eq!(b["role"], "worker");
    assert_eq!(b["is_default"], true);
    assert_eq!(b["labels"], json!({"kube_tag": "v1.30.4"}));
    assert_eq!(b["labels_overridden"], json!({}));
    assert_eq!(b["labels_added"], json!({}));
    assert_eq!(b["labels_skipped"], json!({}));
    assert_eq!(b["docker_volume_size"], 10);
    let ng = b["uuid"].as_str().unwrap();
    assert_eq!(
        b["links"],
        json!([
            {"href": format!("http://127.0.0.1:9511/v1/clusters/{uuid}/nodegroups/{ng}"), "rel": "self"},
            {"href": format!("http://127.0.0.1:9511/clusters/{uuid}/nodegroups/{ng}"), "rel": "bookmark"},
        ])
    );
    assert!(b["created_at"].as_str().unwrap().ends_with("+00:00"));
    let by_uuid = t.get_v(&ALICE, &ng_path(&uuid, ng), V).await;
    by_uuid.assert_status(200);
    assert_eq!(&by_uuid.body, b);
    let id = b["id"].as_i64().unwrap().to_string();
    let by_id = t.get_v(&ALICE, &ng_path(&uuid, &id), V).await;
    by_id.assert_status(200);
    assert_eq!(&by_id.body, b);
    let missing = t.get_v(&ALICE, &ng_path(&uuid, "nope"), V).await;
    assert_magnum_error(&missing, 404, "Nodegroup nope could not be found.");
}

/// A cluster named by its uuid (its owner, labels and nodegroups read in one statement) and by
/// its name (the cluster first, then its nodegroups) answers every nodegroup read alike.
#[tokio::test]
async fn nodegroup_reads_by_the_clusters_uuid_and_by_its_name_answer_alike() {
    let t = app().await;
    let uuid = alices_cluster_c(&t).await;
    let worker = t.get_v(&ALICE, &ng_path(&uuid, "default-worker"), V).await;
    let ng = worker.body["uuid"].as_str().unwrap().to_string();
    let id = worker.body["id"].as_i64().unwrap().to_string();
    let reads = [
        ngs_path("{c}"),
        format!("{}?role=worker", ngs_path("{c}")),
        format!("{}?role=master", ngs_path("{c}")),
        format!("{}?role=none", ngs_path("{c}")),
        format!("{}?limit=1", ngs_path("{c}")),
        format!("{}?sort_key=name&sort_dir=desc", ngs_path("{c}")),
        ng_path("{c}", "default-worker"),
        ng_path("{c}", &ng),
        ng_path("{c}", &id),
        ng_path("{c}", "nope"),
    ];
    for who in [&ALICE, &ADMIN, &BOB] {
        for read in &reads {
            let by_uuid = t.get_v(who, &read.replace("{c}", &uuid), V).await;
            let by_name = t.get_v(who, &read.replace("{c}", "c"), V).await;
            let want = match (who.project, read.ends_with("nope")) {
                ("p-bob", _) | (_, true) => 404,
                _ => 200,
            };
            by_uuid.assert_status(want);
            by_name.assert_status(want);
            if want == 200 {
                assert_eq!(by_uuid.body, by_name.body, "{read} as {}", who.user);
            }
        }
    }
    let listed = t
        .get_v(&ALICE, &format!("{}?limit=1", ngs_path(&uuid)), V)
        .await;
    assert_eq!(listed.body["nodegroups"].as_array().unwrap().len(), 1);
    assert!(
        listed.body["next"]
            .as_str()
            .unwrap()
            .contains(&format!("clusters/{uuid}/nodegroups")),
        "{}",
        listed.body
    );
    let none = t
        .get_v(&ALICE, &format!("{}?role=none", ngs_path(&uuid)), V)
        .await;
    assert_eq!(none.body["nodegroups"], json!([]));
}

#[tokio::test]
async fn other_projects_cannot_see_nodegroups() {
    let t = app().await;
    let ct = t.template(&BOB, "ct").await;
    let uuid = t.cluster(&BOB, "c", &ct).await;
    t.get_v(&ALICE, &ngs_path(&uuid), V)
        .await
        .assert_status(404);
    t.get_v(&ALICE, &ng_path(&uuid, "default-worker"), V)
        .await
        .assert_status(404);
    let r = t.get_v(&ADMIN, &ngs_path(&uuid), V).await;
    r.assert_status(200);
    assert_eq!(r.body["nodegroups"].as_array().unwrap().len(), 2);
    t.get_v(&ADMIN, &ng_path(&uuid, "default-worker"), V)
        .await
        .assert_status(200);
}

#[tokio::test]
async fn create_returns_202_with_the_full_nodegroup() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(
        &t,
        &ALICE,
        &uuid,
        json!({"name": "ng1", "node_count": 2, "min_node_count": 1, "max_node_count": 5,
               "labels": {"extra": "x"}, "merge_labels": true,
               "node_labels": {"tier": "gpu"},
               "node_taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]}),
    )
    .await;
    r.assert_status(202);
    let b = &r.body;
    assert_eq!(keys(b), full_keys());
    assert!(b["id"].is_i64());
    assert_eq!(b["name"], "ng1");
    assert_eq!(b["role"], "worker");
    assert_eq!(b["is_default"], false);
    assert_eq!(b["node_count"], 2);
    assert_eq!(b["min_node_count"], 1);
    assert_eq!(b["max_node_count"], 5);
    assert_eq!(b["flavor_id"], "m1.small");
    assert_eq!(b["image_id"], "ubuntu-jammy");
    assert_eq!(b["labels"], json!({"kube_tag": "v1.30.4", "extra": "x"}));
    assert_eq!(b["labels_added"], json!({"extra": "x"}));
    assert_eq!(b["node_labels"], json!({"tier": "gpu"}));
    assert_eq!(
        b["node_taints"],
        json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
    );
    assert_eq!(b["status"], "CREATE_IN_PROGRESS");
    let ng = b["uuid"].as_str().unwrap();
    // Visible at once, and the cluster is updating.
    let g = t.get_v(&ALICE, &ng_path(&uuid, ng), V).await;
    g.assert_status(200);
    assert_eq!(
        cluster_status(&t, &ALICE, &uuid).await,
        "UPDATE_IN_PROGRESS"
    );
    let ops = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE nodegroup_uuid = '{ng}' AND kind = 'nodegroup_create'"
        ))
        .await;
    assert_eq!(ops, 1);
    // The worker completes it.
    let w = start_worker(&t);
    t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    let g = t.get_v(&ALICE, &ng_path(&uuid, ng), V).await;
    assert_eq!(g.body["status"], "CREATE_COMPLETE");
    assert_eq!(g.body["node_addresses"].as_array().unwrap().len(), 2);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(c.body["node_count"], 3);
    w.stop().await;
}

#[tokio::test]
async fn create_before_the_api_address_exists_is_409() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let uuid = t.cluster(&ALICE, "c", &ct).await;
    let r = create_ng(&t, &ALICE, &uuid, json!({"name": "ng1"})).await;
    assert_magnum_error(&r, 409, "Cluster API address is not available yet");
}

#[tokio::test]
async fn create_with_a_duplicate_name_is_409() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(&t, &ALICE, &uuid, json!({"name": "default-worker"})).await;
    assert_magnum_error(
        &r,
        409,
        &format!("A node group with name default-worker already exists in the cluster {uuid}."),
    );
    create_ng(&t, &ALICE, &uuid, json!({"name": "ng1"}))
        .await
        .assert_status(202);
    create_ng(&t, &ALICE, &uuid, json!({"name": "ng1"}))
        .await
        .assert_status(409);
}

#[tokio::test]
async fn create_with_inconsistent_counts_is_409() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    for (body, attr) in [
        (
            json!({"name": "a", "min_node_count": 3, "max_node_count": 2, "node_count": 2}),
            "max_node_count",
        ),
        (
            json!({"name": "b", "node_count": 5, "max_node_count": 3}),
            "max_node_count",
        ),
        (
            json!({"name": "c", "node_count": 1, "min_node_count": 2}),
            "min_node_count",
        ),
    ] {
        let r = create_ng(&t, &ALICE, &uuid, body).await;
        let detail = assert_magnum_error(&r, 409, &format!("{attr} for "));
        assert!(detail.contains("is invalid"), "{detail}");
    }
}

#[tokio::test]
async fn create_with_role_master_is_400() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(&t, &ALICE, &uuid, json!({"name": "m2", "role": "master"})).await;
    assert_magnum_error(
        &r,
        400,
        "Creating master nodegroups is currently not supported.",
    );
}

#[tokio::test]
async fn create_with_restricted_node_labels_is_409() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(
        &t,
        &ALICE,
        &uuid,
        json!({"name": "a", "node_labels": {"node-role.kubernetes.io/gpu": ""}}),
    )
    .await;
    assert_magnum_error(&r, 409, "node_labels for a is invalid");
    let r = create_ng(
        &t,
        &ALICE,
        &uuid,
        json!({"name": "b", "node_labels": {"example.k8s.io/x": "y"}}),
    )
    .await;
    r.assert_status(409);
    // kubelet's own namespaces and ordinary labels are fine.
    create_ng(
        &t,
        &ALICE,
        &uuid,
        json!({"name": "c", "node_labels": {"node.kubernetes.io/pool": "p", "team": "x"}}),
    )
    .await
    .assert_status(202);
}

#[tokio::test]
async fn create_with_invalid_taints_is_409() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    for taints in [
        json!([{"value": "v", "effect": "NoSchedule"}]),
        json!([{"key": "k", "effect": "Sometimes"}]),
        json!([{"key": "k", "effect": "NoSchedule", "extra": 1}]),
        json!(["k=v:NoSchedule"]),
    ] {
        let r = create_ng(
            &t,
            &ALICE,
            &uuid,
            json!({"name": "t", "node_taints": taints}),
        )
        .await;
        assert!(
            r.status.as_u16() == 409 || r.status.as_u16() == 400,
            "{taints}: {}",
            r.body
        );
        if r.status.as_u16() == 409 {
            assert_magnum_error(&r, 409, "node_taints for t is invalid");
        }
    }
    let r = create_ng(
        &t,
        &ALICE,
        &uuid,
        json!({"name": "t", "node_taints": [{"key": "k", "effect": "Sometimes"}]}),
    )
    .await;
    r.assert_status(409);
}

#[tokio::test]
async fn create_rejects_read_only_project_id() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(
        &t,
        &ALICE,
        &uuid,
        json!({"name": "a", "project_id": "p-alice"}),
    )
    .await;
    assert_magnum_error(&r, 400, "Cannot set read only field.");
}

#[tokio::test]
async fn patch_updates_bounds_node_labels_and_taints() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(&t, &ALICE, &uuid, json!({"name": "ng1", "node_count": 2})).await;
    r.assert_status(202);
    let w = start_worker(&t);
    t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    w.stop().await;
    let r = t
        .patch_v(
            &ALICE,
            &ng_path(&uuid, "ng1"),
            V,
            json!([{"op": "replace", "path": "/min_node_count", "value": 1},
                   {"op": "replace", "path": "/max_node_count", "value": 4},
                   {"op": "replace", "path": "/node_labels", "value": "{'tier': 'gpu'}"},
                   {"op": "replace", "path": "/node_taints",
                    "value": "[{'key': 'gpu', 'value': 'true', 'effect': 'NoSchedule'}]"}]),
        )
        .await;
    r.assert_status(202);
    assert_eq!(keys(&r.body), full_keys());
    assert_eq!(r.body["min_node_count"], 1);
    assert_eq!(r.body["max_node_count"], 4);
    assert_eq!(r.body["node_labels"], json!({"tier": "gpu"}));
    assert_eq!(
        r.body["node_taints"],
        json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
    );
    assert_eq!(r.body["status"], "UPDATE_IN_PROGRESS");
    assert_eq!(
        cluster_status(&t, &ALICE, &uuid).await,
        "UPDATE_IN_PROGRESS"
    );
    let w = start_worker(&t);
    t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    w.stop().await;
    let g = t.get_v(&ALICE, &ng_path(&uuid, "ng1"), V).await;
    assert_eq!(g.body["status"], "UPDATE_COMPLETE");
    assert_eq!(g.body["max_node_count"], 4);
    // remove /max_node_count resets it to null.
    let r = t
        .patch_v(
            &ALICE,
            &ng_path(&uuid, "ng1"),
            V,
            json!([{"op": "remove", "path": "/max_node_count"}]),
        )
        .await;
    r.assert_status(202);
    assert_eq!(r.body["max_node_count"], Value::Null);
    // Bounds are re-validated (409).
    let r = t
        .patch_v(
            &ALICE,
            &ng_path(&uuid, "ng1"),
            V,
            json!([{"op": "replace", "path": "/min_node_count", "value": 5}]),
        )
        .await;
    r.assert_status(409);
}

#[tokio::test]
async fn patch_of_an_internal_path_is_400() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    for (path, value) in [
        ("/node_count", json!(3)),
        ("/name", json!("x")),
        ("/role", json!("master")),
        ("/flavor_id", json!("f")),
    ] {
        let r = t
            .patch_v(
                &ALICE,
                &ng_path(&uuid, "default-worker"),
                V,
                json!([{"op": "replace", "path": path, "value": value}]),
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
async fn delete_of_a_default_nodegroup_is_400() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    for ng in ["default-worker", "default-master"] {
        let r = t.delete_v(&ALICE, &ng_path(&uuid, ng), V).await;
        assert_magnum_error(&r, 400, "Deleting a default nodegroup is not supported.");
    }
}

#[tokio::test]
async fn delete_of_another_nodegroup_is_204_then_gone() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(&t, &ALICE, &uuid, json!({"name": "ng1"})).await;
    r.assert_status(202);
    let w = start_worker(&t);
    t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    w.stop().await;
    let r = t.delete_v(&ALICE, &ng_path(&uuid, "ng1"), V).await;
    r.assert_status(204);
    let g = t.get_v(&ALICE, &ng_path(&uuid, "ng1"), V).await;
    g.assert_status(200);
    assert_eq!(g.body["status"], "DELETE_IN_PROGRESS");
    assert_eq!(
        cluster_status(&t, &ALICE, &uuid).await,
        "UPDATE_IN_PROGRESS"
    );
    // A second delete records nothing new.
    t.delete_v(&ALICE, &ng_path(&uuid, "ng1"), V)
        .await
        .assert_status(204);
    let ops = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{uuid}' AND kind = 'nodegroup_delete'"
        ))
        .await;
    assert_eq!(ops, 1);
    let w = start_worker(&t);
    t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    w.stop().await;
    let g = t.get_v(&ALICE, &ng_path(&uuid, "ng1"), V).await;
    g.assert_status(404);
    let l = t.get_v(&ALICE, &ngs_path(&uuid), V).await;
    assert_eq!(l.body["nodegroups"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn resize_of_a_named_nodegroup_moves_it_through_update() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(
        &t,
        &ALICE,
        &uuid,
        json!({"name": "ng1", "node_count": 1, "max_node_count": 3}),
    )
    .await;
    r.assert_status(202);
    let ng = r.body["uuid"].as_str().unwrap().to_string();
    let w = start_worker(&t);
    t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    w.stop().await;
    let resize = format!("/v1/clusters/{uuid}/actions/resize");
    let r = t
        .post_v(
            &ALICE,
            &resize,
            V,
            json!({"node_count": 4, "nodegroup": ng}),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Resizing ng1 outside the allowed range: min_node_count = 0, max_node_count = 3",
    );
    let r = t
        .post_v(
            &ALICE,
            &resize,
            V,
            json!({"node_count": 3, "nodegroup": ng}),
        )
        .await;
    r.assert_status(202);
    let g = t.get_v(&ALICE, &ng_path(&uuid, &ng), V).await;
    assert_eq!(g.body["status"], "UPDATE_IN_PROGRESS");
    assert_eq!(g.body["node_count"], 3);
    let w = start_worker(&t);
    t.wait_cluster(&ALICE, &uuid, "UPDATE_COMPLETE").await;
    w.stop().await;
    let g = t.get_v(&ALICE, &ng_path(&uuid, &ng), V).await;
    assert_eq!(g.body["status"], "UPDATE_COMPLETE");
    // The default worker was not touched.
    let d = t.get_v(&ALICE, &ng_path(&uuid, "default-worker"), V).await;
    assert_eq!(d.body["node_count"], 1);
}

#[tokio::test]
async fn stats_count_clusters_and_all_nodes() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    create_ng(&t, &ALICE, &uuid, json!({"name": "ng1", "node_count": 2}))
        .await
        .assert_status(202);
    let ct = t.template(&BOB, "ct").await;
    t.cluster(&BOB, "b", &ct).await;
    let r = t.get(&ALICE, "/v1/stats").await;
    r.assert_status(200);
    // master 1 + default worker 1 + ng1 2
    assert_eq!(r.body, json!({"clusters": 1, "nodes": 4}));
    let r = t.get(&ADMIN, "/v1/stats").await;
    assert_eq!(r.body, json!({"clusters": 2, "nodes": 6}));
    let ngs = t.get_v(&ALICE, &ngs_path(&uuid), V).await;
    let sum: i64 = ngs.body["nodegroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node_count"].as_i64().unwrap())
        .sum();
    assert_eq!(sum, 4);
    let c = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(
        c.body["node_count"].as_i64().unwrap() + c.body["master_count"].as_i64().unwrap(),
        sum
    );
}

#[tokio::test]
async fn patch_while_creating_answers_the_patch_but_changes_nothing() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    create_ng(&t, &ALICE, &uuid, json!({"name": "ng1"}))
        .await
        .assert_status(202);
    let r = t
        .patch_v(
            &ALICE,
            &ng_path(&uuid, "ng1"),
            V,
            json!([{"op": "replace", "path": "/max_node_count", "value": 7}]),
        )
        .await;
    r.assert_status(202);
    assert_eq!(r.body["max_node_count"], 7);
    assert_eq!(r.body["status"], "CREATE_IN_PROGRESS");
    let g = t.get_v(&ALICE, &ng_path(&uuid, "ng1"), V).await;
    assert_eq!(g.body["max_node_count"], Value::Null);
    let ops = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{uuid}' AND kind = 'nodegroup_update'"
        ))
        .await;
    assert_eq!(ops, 0);
}

#[tokio::test]
async fn admin_cannot_create_nodegroups_in_other_projects() {
    let t = app().await;
    let uuid = ready_cluster(&t, &ALICE).await;
    let r = create_ng(&t, &ADMIN, &uuid, json!({"name": "x"})).await;
    r.assert_status(404);
}
