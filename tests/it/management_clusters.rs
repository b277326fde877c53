//! Several management clusters (issue 19) on two simulated ones, `east` and `west`: placement
//! by template label, availability zone and weight; one of them unreachable (its clusters'
//! operations wait and complete once it is back, the other's go on); two replicas writing each
//! management cluster's statuses once.

use crate::common::capi::{fleet_app_on, kubeconfig, start_sims};
use crate::common::wait::until;
use crate::common::*;

use serde_json::{Value, json};

async fn template(t: &TestApp, name: &str, labels: Value) -> String {
    let mut l = json!({"kube_tag": "v1.33.5"});
    l.as_object_mut()
        .unwrap()
        .extend(labels.as_object().unwrap().clone());
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"name": name, "image_id": "ubuntu-2404-kube-v1.33.5", "coe": "kubernetes",
                   "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                   "external_network_id": "public", "labels": l}),
        )
        .await;
    r.assert_status(201);
    r.body["uuid"].as_str().unwrap().to_string()
}

async fn create(t: &TestApp, name: &str, ct: &str, labels: Option<Value>) -> String {
    let mut body = json!({"name": name, "cluster_template_id": ct, "master_count": 1,
                          "node_count": 1});
    if let Some(l) = labels {
        body["labels"] = l;
        body["merge_labels"] = json!(true);
    }
    let r = t.post(&ALICE, "/v1/clusters", body).await;
    r.assert_status(202);
    r.body["uuid"].as_str().unwrap().to_string()
}

/// The management cluster an admin sees on the cluster.
async fn placed(t: &TestApp, c: &str) -> String {
    let r = t.get(&ADMIN, &format!("/v1/clusters/{c}")).await;
    r.assert_status(200);
    r.body["management_cluster"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The cluster once its `health_status` is `want`.
async fn wait_health(t: &TestApp, c: &str, want: &str) -> Value {
    until(&format!("cluster {c} to be {want}"), || async {
        let r = t.get(&ADMIN, &format!("/v1/clusters/{c}")).await;
        (r.body["health_status"] == want).then_some(r.body)
    })
    .await
}

/// How many CAPI `Cluster` objects of Magnum cluster `c` the simulated `sim` holds.
fn capi_clusters(sim: &magnum_capi::simkube::SimCluster, c: &str) -> usize {
    let res = magnum_capi::simkube::Resource::of("cluster.x-k8s.io/v1beta2", "Cluster");
    sim.store()
        .list(
            &res,
            None,
            &format!("magnum.openstack.org/cluster-uuid={c}"),
        )
        .unwrap()
        .len()
}

#[tokio::test]
async fn placement_by_label_by_zone_and_by_weight() {
    let sims = start_sims(&["east", "west"]).await;
    let app = fleet_app_on(None, &sims, |cfg| {
        let m = &mut cfg.capi.management_clusters;
        m[0].weight = 3;
        m[0].availability_zones = vec!["az-east".into()];
        m[1].availability_zones = vec!["az-west".into()];
        let mut north = magnum_capi::config::ManagementClusterConfig::named("north");
        north.enabled = false;
        m.push(north);
    })
    .await;
    let t = &app.t;
    let plain = template(t, "plain", json!({})).await;
    let to_west = template(t, "to-west", json!({"management_cluster": "west"})).await;

    // The template's label wins over the zone.
    let a = create(
        t,
        "a",
        &to_west,
        Some(json!({"availability_zone": "az-east"})),
    )
    .await;
    assert_eq!(placed(t, &a).await, "west");
    // Only admins see where a cluster lives.
    let mine = t.get(&ALICE, &format!("/v1/clusters/{a}")).await;
    assert!(
        mine.body.get("management_cluster").is_none(),
        "{}",
        mine.body
    );
    // The zone, then the weight.
    let b = create(
        t,
        "b",
        &plain,
        Some(json!({"availability_zone": "az-east"})),
    )
    .await;
    assert_eq!(placed(t, &b).await, "east");
    let mut got = Vec::new();
    for i in 0..4 {
        let c = create(t, &format!("w{i}"), &plain, None).await;
        got.push(placed(t, &c).await);
    }
    // east (weight 3) holds 1 and west 1: east until it has three times west's, then west.
    assert_eq!(got, ["east", "east", "east", "west"]);

    // Unknown or draining management clusters are refused before anything is recorded.
    for (name, why) in [("nowhere", "names no configured"), ("north", "draining")] {
        let ct = template(
            t,
            &format!("to-{name}"),
            json!({"management_cluster": name}),
        )
        .await;
        let r = t
            .post(
                &ALICE,
                "/v1/clusters",
                json!({"name": format!("x-{name}"), "cluster_template_id": ct}),
            )
            .await;
        assert_magnum_error(&r, 400, why);
    }

    // Each cluster is built on its own management cluster only.
    t.wait_cluster(&ADMIN, &a, "CREATE_COMPLETE").await;
    t.wait_cluster(&ADMIN, &b, "CREATE_COMPLETE").await;
    assert_eq!(capi_clusters(app.sim("west"), &a), 1);
    assert_eq!(capi_clusters(app.sim("east"), &a), 0);
    assert_eq!(capi_clusters(app.sim("east"), &b), 1);
    assert_eq!(capi_clusters(app.sim("west"), &b), 0);
}

#[tokio::test]
async fn an_unreachable_management_cluster_only_holds_up_its_own_clusters() {
    let sims = start_sims(&["east", "west"]).await;
    let app = fleet_app_on(None, &sims, |_| {}).await;
    let t = &app.t;
    let to_east = template(t, "to-east", json!({"management_cluster": "east"})).await;
    let to_west = template(t, "to-west", json!({"management_cluster": "west"})).await;
    let e = create(t, "e", &to_east, None).await;
    let w = create(t, "w", &to_west, None).await;
    t.wait_cluster(&ADMIN, &e, "CREATE_COMPLETE").await;
    t.wait_cluster(&ADMIN, &w, "CREATE_COMPLETE").await;

    app.sim("east").set_available(false);
    // Its clusters say why their health is unknown; the other's stay as they are.
    let seen = wait_health(t, &e, "UNKNOWN").await;
    let reason = seen["health_status_reason"]["management_cluster"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("east is unreachable"), "{seen}");
    assert_eq!(seen["status"], "CREATE_COMPLETE");
    // Readiness names it, but the replica stays ready for the other one.
    let r = t.call(&ALICE, "GET", "/readyz", None, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let failed: Vec<&str> = r.body["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        ["management_cluster:east", "crds:east"],
        "{}",
        r.body
    );

    // Operations on both: east's wait, west's complete and its status keeps flowing.
    let resize = |c: String| async move {
        t.post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/actions/resize"),
            "1.7",
            json!({"node_count": 2}),
        )
        .await
        .assert_status(202);
    };
    resize(e.clone()).await;
    resize(w.clone()).await;
    let e2 = create(t, "e2", &to_east, None).await;
    let done = t.wait_cluster(&ADMIN, &w, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["node_count"], 2, "{done}");
    assert_eq!(done["health_status"], "HEALTHY", "{done}");
    let waiting = t
        .sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{e}' AND state = 'pending'
                AND attempts = 0 AND last_error LIKE '%east is unreachable%'"
        ))
        .await;
    assert_eq!(
        waiting, 1,
        "the resize of {e} waits without spending attempts"
    );
    assert_eq!(
        t.get(&ALICE, &format!("/v1/clusters/{e}")).await.body["status"],
        "UPDATE_IN_PROGRESS"
    );
    assert_eq!(
        t.get(&ALICE, &format!("/v1/clusters/{e2}")).await.body["status"],
        "CREATE_IN_PROGRESS"
    );

    // Back: what waited completes, and the health is evaluated afresh.
    app.sim("east").set_available(true);
    let done = t.wait_cluster(&ADMIN, &e, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["node_count"], 2, "{done}");
    t.wait_cluster(&ADMIN, &e2, "CREATE_COMPLETE").await;
    let healthy = wait_health(t, &e, "HEALTHY").await;
    assert!(
        healthy["health_status_reason"]
            .get("management_cluster")
            .is_none(),
        "{healthy}"
    );
}

#[tokio::test]
async fn two_replicas_write_each_management_clusters_statuses_once() {
    let sims = start_sims(&["east", "west"]).await;
    let first = fleet_app_on(None, &sims, |_| {}).await;
    let url = first.t.url.clone();
    // Every write of a status, whoever made it.
    for sql in [
        "CREATE TABLE status_log (uuid uuid, status text)",
        "CREATE FUNCTION log_status() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN INSERT INTO status_log VALUES (NEW.uuid, NEW.status); RETURN NEW; END $$",
        "CREATE TRIGGER log_status AFTER UPDATE OF status ON cluster
           FOR EACH ROW EXECUTE FUNCTION log_status()",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&first.t.state.pool)
            .await
            .unwrap();
    }
    let second = fleet_app_on(Some(url.clone()), &sims, |_| {}).await;
    let t = &first.t;
    let to_east = template(t, "to-east", json!({"management_cluster": "east"})).await;
    let to_west = template(t, "to-west", json!({"management_cluster": "west"})).await;
    let e = create(t, "e", &to_east, None).await;
    let w = create(&second.t, "w", &to_west, None).await;
    t.wait_cluster(&ADMIN, &e, "CREATE_COMPLETE").await;
    second.t.wait_cluster(&ADMIN, &w, "CREATE_COMPLETE").await;
    for c in [&e, &w] {
        let n = t
            .sql_i64(&format!(
                "SELECT count(*) FROM status_log WHERE uuid = '{c}' AND status = 'CREATE_COMPLETE'"
            ))
            .await;
        assert_eq!(n, 1, "cluster {c}: CREATE_COMPLETE written {n} times");
    }
    // One writer per management cluster: both locks are held, by one replica each at most.
    let cfg = test_config(&url);
    let other = magnum_capi::db::connect(&url, &cfg.database).await.unwrap();
    for name in ["east", "west"] {
        let key = magnum_capi::status_writer::writer_lock(name);
        assert!(
            magnum_capi::status_writer::try_lead_key(&other, key)
                .await
                .is_none(),
            "nobody writes {name}'s statuses"
        );
    }
    // The replica holding them dies: the other takes over and statuses keep flowing.
    drop(first);
    second
        .t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{e}/actions/resize"),
            "1.7",
            json!({"node_count": 2}),
        )
        .await
        .assert_status(202);
    second.t.wait_cluster(&ADMIN, &e, "UPDATE_COMPLETE").await;
}

#[tokio::test]
async fn the_command_lists_reachability_versions_and_clusters_by_status() {
    let sims = start_sims(&["east", "west"]).await;
    let app = fleet_app_on(None, &sims, |_| {}).await;
    let t = &app.t;
    let to_east = template(t, "to-east", json!({"management_cluster": "east"})).await;
    let e = create(t, "e", &to_east, None).await;
    t.wait_cluster(&ADMIN, &e, "CREATE_COMPLETE").await;

    let dir = tempfile::tempdir().unwrap();
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let down = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = {:?}\n[[capi.management_clusters]]\nname = \"east\"\nkubeconfig = {:?}\n\
             weight = 2\n[[capi.management_clusters]]\nname = \"west\"\nkubeconfig = {:?}\nenabled = false\n",
            t.url,
            kubeconfig(dir.path(), "east", app.sim("east").url()),
            kubeconfig(dir.path(), "west", &down),
        ),
    )
    .unwrap();
    let out = crate::common::served::run_command("management-clusters", &config).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (east, west) = text.split_once("\nwest\n").expect(&text);
    assert!(east.starts_with("east\n"), "{text}");
    assert!(east.contains("weight 2, enabled"), "{text}");
    assert!(east.contains("reachable:   yes"), "{text}");
    assert!(east.contains("CAPI:"), "{text}");
    assert!(
        east.contains("clusters:    1 (CREATE_COMPLETE 1)"),
        "{text}"
    );
    assert!(west.contains("DRAINING"), "{text}");
    assert!(west.contains("reachable:   NO"), "{text}");
    assert!(west.contains("clusters:    0"), "{text}");
}
