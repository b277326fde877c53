//! The Cluster API driver end to end through the HTTP API: real Postgres, the real `kube`
//! client against the simulated management cluster (every write validated against the CAPI/CAPO
//! CRD schemas), statuses from the watchers; with the real Keystone where credentials matter.

use crate::common;

use crate::common::capi::{capi_app_on, objects, template};
use crate::common::wait::{until, until_left_alone};
use crate::common::*;

use serde_json::{Value, json};

async fn nodegroups(t: &TestApp, who: &As, cluster: &str) -> Vec<Value> {
    let r = t
        .get_v(who, &format!("/v1/clusters/{cluster}/nodegroups"), "1.9")
        .await;
    r.assert_status(200);
    r.body["nodegroups"].as_array().expect("list").clone()
}

/// Creates a cluster as ALICE (`202`); its uuid.
async fn create_cluster(t: &TestApp, body: Value) -> String {
    let r = t.post(&ALICE, "/v1/clusters", body).await;
    r.assert_status(202);
    r.body["uuid"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn create_resize_nodegroups_upgrade_delete() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let c = create_cluster(
        t,
        json!({"name": "c1", "cluster_template_id": ct, "master_count": 1, "node_count": 2}),
    )
    .await;
    let done = t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await.body;
    assert!(
        done["api_address"]
            .as_str()
            .unwrap()
            .starts_with("https://"),
        "{done}"
    );
    assert_eq!(done["coe_version"], "v1.33.5");
    assert_eq!(
        done["master_addresses"].as_array().unwrap().len(),
        1,
        "{done}"
    );
    assert_eq!(
        done["node_addresses"].as_array().unwrap().len(),
        2,
        "{done}"
    );
    assert_eq!(done["health_status"], "HEALTHY", "{done}");
    let stack = done["stack_id"].as_str().unwrap().to_string();
    // The CAs and the credentials Secret exist, labelled with project, user and cluster.
    let secrets = objects(&app, "v1", "Secret", &c);
    let names: Vec<&str> = secrets
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    for suffix in ["ca", "etcd", "proxy", "sa", "cloud-credentials"] {
        assert!(
            names.contains(&format!("{stack}-{suffix}").as_str()),
            "{names:?}"
        );
    }
    for s in &secrets {
        assert_eq!(
            s["metadata"]["labels"]["magnum.openstack.org/user-id"],
            ALICE.user
        );
        assert_eq!(
            s["metadata"]["labels"]["magnum.openstack.org/project-id"],
            ALICE.project
        );
    }

    // Resize the default worker to 1, removing a named machine.
    let machines = objects(&app, "cluster.x-k8s.io/v1beta2", "Machine", &c);
    let workers: Vec<String> = machines
        .iter()
        .filter(|m| m["metadata"]["labels"]["magnum.openstack.org/role"] == "worker")
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(workers.len(), 2);
    let r = t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/actions/resize"),
            "1.7",
            json!({"node_count": 1, "nodes_to_remove": [workers[0]]}),
        )
        .await;
    r.assert_status(202);
    let done = t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["node_count"], 1);
    until("the named machine to be removed", || async {
        let left: Vec<String> = objects(&app, "cluster.x-k8s.io/v1beta2", "Machine", &c)
            .iter()
            .filter(|m| m["metadata"]["labels"]["magnum.openstack.org/role"] == "worker")
            .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        (left.len() == 1 && left[0] == workers[1]).then_some(())
    })
    .await;

    // Add a nodegroup, then remove it.
    let r = t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/nodegroups"),
            "1.9",
            json!({"name": "gpu", "node_count": 2, "flavor_id": "g1.large"}),
        )
        .await;
    r.assert_status(202);
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
    let gpu = t
        .get_v(&ALICE, &format!("/v1/clusters/{c}/nodegroups/gpu"), "1.9")
        .await
        .body;
    assert_eq!(gpu["status"], "CREATE_COMPLETE", "{gpu}");
    assert_eq!(gpu["node_addresses"].as_array().unwrap().len(), 2);
    let mds = objects(&app, "cluster.x-k8s.io/v1beta2", "MachineDeployment", &c);
    assert_eq!(mds.len(), 2);
    let r = t
        .delete_v(&ALICE, &format!("/v1/clusters/{c}/nodegroups/gpu"), "1.9")
        .await;
    r.assert_status(204);
    until("the gpu nodegroup to be gone", || async {
        let ngs = nodegroups(t, &ALICE, &c).await;
        (!ngs.iter().any(|n| n["name"] == "gpu")).then_some(())
    })
    .await;
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
    assert_eq!(
        objects(&app, "cluster.x-k8s.io/v1beta2", "MachineDeployment", &c).len(),
        1
    );

    // Upgrade to a template with a new image and the next patch release: machines roll.
    let before: Vec<String> = objects(
        &app,
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachineTemplate",
        &c,
    )
    .iter()
    .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
    .collect();
    let ct2 = template(t, "k134", "ubuntu-2404-kube-v1.34.1", "v1.34.1").await;
    let skip = template(t, "k136", "ubuntu-2404-kube-v1.36.0", "v1.36.0").await;
    let r = t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/actions/upgrade"),
            "1.8",
            json!({"cluster_template": skip}),
        )
        .await;
    assert_magnum_error(&r, 400, "skips a minor");
    let r = t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/actions/upgrade"),
            "1.8",
            json!({"cluster_template": ct2}),
        )
        .await;
    r.assert_status(202);
    let done = t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["cluster_template_id"], ct2.as_str());
    assert_eq!(done["coe_version"], "v1.34.1");
    let after: Vec<String> = until("superseded machine templates to be removed", || async {
        let names: Vec<String> = objects(
            &app,
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachineTemplate",
            &c,
        )
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
        (!names.iter().any(|n| before.contains(n))).then_some(names)
    })
    .await;
    assert!(!after.is_empty());

    // Delete: everything goes, then the row (404).
    let r = t.delete(&ALICE, &format!("/v1/clusters/{c}")).await;
    r.assert_status(204);
    t.wait_cluster(&ALICE, &c, "GONE").await;
    for (av, k) in [
        ("cluster.x-k8s.io/v1beta2", "Cluster"),
        ("cluster.x-k8s.io/v1beta2", "Machine"),
        ("v1", "Secret"),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachineTemplate",
        ),
        (
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate",
        ),
    ] {
        assert!(objects(&app, av, k, &c).is_empty(), "{k} left behind");
    }
}

#[tokio::test]
async fn a_failing_image_fails_the_create_with_the_reason() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "bad", "sim-fail-image", "v1.33.5").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c1", "cluster_template_id": ct}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    let failed = t.wait_cluster(&ALICE, &c, "CREATE_FAILED").await.body;
    let reason = failed["status_reason"].as_str().unwrap();
    assert!(reason.contains("No valid host was found"), "{reason}");
    // And it can still be deleted.
    t.delete(&ALICE, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(204);
    t.wait_cluster(&ALICE, &c, "GONE").await;
}

#[tokio::test]
async fn a_create_past_its_deadline_fails_with_what_it_waited_for() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    app.sim.pause();
    let ct = template(t, "slow", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c1", "cluster_template_id": ct, "create_timeout": 1}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    // Time passes: the cluster was created two minutes ago.
    sqlx::query(
        "UPDATE cluster SET created_at = now() - interval '2 minutes' WHERE uuid = $1::uuid",
    )
    .bind(&c)
    .execute(&t.state.pool)
    .await
    .unwrap();
    let failed = t.wait_cluster(&ALICE, &c, "CREATE_FAILED").await.body;
    assert!(
        failed["status_reason"]
            .as_str()
            .unwrap()
            .starts_with("Timed out"),
        "{failed}"
    );
    // CAPI converges later: the cluster recovers.
    app.sim.resume();
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
}

#[tokio::test]
async fn a_create_interrupted_by_a_crash_completes_once_after_restart() {
    let app = capi_app_on(None, None, false, |cfg| cfg.operations.lease_secs = 2).await;
    let ct = template(&app.t, "k", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let r = app
        .t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c1", "cluster_template_id": ct}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    // Crash as soon as the first CAPI object is on the management cluster.
    until("the apply to start", || async {
        (!objects(&app, "v1", "Secret", &c).is_empty()).then_some(())
    })
    .await;
    let (url, sim) = app.kill().await;
    let app = capi_app_on(Some(url), Some(sim), false, |cfg| {
        cfg.operations.lease_secs = 2
    })
    .await;
    app.t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    let ops: Vec<(String, String)> =
        sqlx::query_as("SELECT kind, state FROM operation WHERE cluster_uuid = $1::uuid")
            .bind(&c)
            .fetch_all(&app.t.state.pool)
            .await
            .unwrap();
    assert_eq!(ops, [("cluster_create".to_string(), "done".to_string())]);
    assert_eq!(
        objects(&app, "cluster.x-k8s.io/v1beta2", "Cluster", &c).len(),
        1
    );
    assert_eq!(
        objects(&app, "cluster.x-k8s.io/v1beta2", "MachineDeployment", &c).len(),
        1
    );
}

#[tokio::test]
async fn a_create_refused_after_provisioning_leaves_nothing_behind() {
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.quotas.max_clusters_per_project = 1
    })
    .await;
    let t = &app.t;
    let ct = template(t, "k", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c1", "cluster_template_id": ct}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    let secrets = |app: &common::capi::CapiApp| {
        let res = magnum_capi::simkube::Resource::of("v1", "Secret");
        app.sim.store().list(&res, None, "").unwrap().len()
    };
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    let before = secrets(&app);
    // Over quota: the credentials Secret written before the quota check is removed again.
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c2", "cluster_template_id": ct}),
        )
        .await;
    r.assert_status(403);
    assert_eq!(
        secrets(&app),
        before,
        "a Secret of the refused create was left behind"
    );
    assert!(!objects(&app, "v1", "Secret", &c).is_empty());
}

#[tokio::test]
async fn one_replica_at_a_time_writes_statuses() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let cfg = test_config(&app.t.url);
    let other = magnum_capi::db::connect(&app.t.url, &cfg.database)
        .await
        .unwrap();
    // This instance's writer holds the lock: a second replica does not get it.
    until("the first writer to hold the lock", || async {
        magnum_capi::status_writer::try_lead(&other)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // That replica dies (its connection closes): the second one takes over.
    let _ = app.kill().await;
    until("the lock to pass to the second replica", || async {
        magnum_capi::status_writer::try_lead(&other)
            .await
            .map(|_| ())
    })
    .await;
}

/// The autoscaler's objects of cluster `c` on the management cluster: (kind, name).
fn autoscaler_objects(app: &common::capi::CapiApp, c: &str) -> Vec<(String, String)> {
    [
        ("apps/v1", "Deployment"),
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ]
    .into_iter()
    .flat_map(|(av, kind)| {
        objects(app, av, kind, c).into_iter().map(move |o| {
            (
                kind.to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
    })
    .collect()
}

#[tokio::test]
async fn the_autoscaler_follows_autoscaling_and_node_count_follows_the_autoscaler() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let c = create_cluster(
        t,
        json!({"name": "auto", "cluster_template_id": ct, "master_count": 1, "node_count": 1,
                   "labels": {"kube_tag": "v1.33.5", "auto_scaling_enabled": "true",
                              "min_node_count": "1", "max_node_count": "3"}}),
    )
    .await;
    let done = t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await.body;
    let stack = done["stack_id"].as_str().unwrap().to_string();
    let name = format!("{stack}-autoscaler");
    let mut want: Vec<(String, String)> = ["Deployment", "ServiceAccount", "RoleBinding"]
        .into_iter()
        .map(|k| (k.to_string(), name.clone()))
        .collect();
    want.sort();
    let mut have = autoscaler_objects(&app, &c);
    have.sort();
    assert_eq!(
        have, want,
        "autoscaling on: one autoscaler on the management cluster"
    );

    // The autoscaler scales the MachineDeployment up: GET shows it.
    let md = objects(&app, "cluster.x-k8s.io/v1beta2", "MachineDeployment", &c)
        .pop()
        .unwrap();
    let res = magnum_capi::simkube::Resource::of("cluster.x-k8s.io/v1beta2", "MachineDeployment");
    app.sim
        .store()
        .update(
            &res,
            md["metadata"]["namespace"].as_str().unwrap(),
            md["metadata"]["name"].as_str().unwrap(),
            magnum_capi::simkube::store::Target::Main,
            |o| o["spec"]["replicas"] = json!(2),
        )
        .unwrap();
    until("node_count to follow the autoscaler", || async {
        let ngs = nodegroups(t, &ALICE, &c).await;
        let worker = ngs.iter().find(|n| n["role"] == "worker").unwrap();
        (worker["node_count"] == 2).then_some(())
    })
    .await;
    let worker = nodegroups(t, &ALICE, &c)
        .await
        .into_iter()
        .find(|n| n["role"] == "worker")
        .unwrap();
    let ng_path = format!(
        "/v1/clusters/{c}/nodegroups/{}",
        worker["uuid"].as_str().unwrap()
    );

    // Equal bounds: a fixed size, so no autoscaler.
    let r = t
        .patch_v(
            &ALICE,
            &ng_path,
            "1.9",
            json!([{"op": "replace", "path": "/min_node_count", "value": 2},
                   {"op": "replace", "path": "/max_node_count", "value": 2}]),
        )
        .await;
    r.assert_status(202);
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
    until("the autoscaler to be removed", || async {
        autoscaler_objects(&app, &c).is_empty().then_some(())
    })
    .await;

    // Autoscaling again, then delete: removed with the cluster.
    let r = t
        .patch_v(
            &ALICE,
            &ng_path,
            "1.9",
            json!([{"op": "replace", "path": "/max_node_count", "value": 4}]),
        )
        .await;
    r.assert_status(202);
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
    assert_eq!(autoscaler_objects(&app, &c).len(), 3);
    // The Role an earlier version rendered beside the RoleBinding goes with the next apply.
    let binding = objects(&app, "rbac.authorization.k8s.io/v1", "RoleBinding", &c).remove(0);
    let role = magnum_capi::simkube::Resource::of("rbac.authorization.k8s.io/v1", "Role");
    app.sim
        .store()
        .put(
            &role,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": binding["metadata"]["name"],
                                "namespace": binding["metadata"]["namespace"],
                                "labels": binding["metadata"]["labels"]},
                   "rules": []}),
        )
        .unwrap();
    assert_eq!(autoscaler_objects(&app, &c).len(), 4);
    t.patch_v(
        &ALICE,
        &ng_path,
        "1.9",
        json!([{"op": "replace", "path": "/max_node_count", "value": 5}]),
    )
    .await
    .assert_status(202);
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
    until("the earlier version's Role to be pruned", || async {
        (autoscaler_objects(&app, &c).len() == 3).then_some(())
    })
    .await;
    t.delete(&ALICE, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(204);
    t.wait_cluster(&ALICE, &c, "GONE").await;
    assert!(autoscaler_objects(&app, &c).is_empty());
}

#[tokio::test]
async fn a_failing_addon_makes_the_cluster_unhealthy_not_failed() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    // CAAPH (simulated) fails to install metrics-server.
    app.sim.set_fail_markers(vec!["metrics-server".into()]);
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "addons", "cluster_template_id": ct, "master_count": 1,
                   "node_count": 1}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    let body = until("the add-on failure in the health reason", || async {
        let b = t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body;
        (b["health_status_reason"]["addon.metrics-server"]
            .as_str()
            .is_some_and(|m| m.starts_with("Failed: ") && m.contains("simulated failure")))
        .then_some(b)
    })
    .await;
    assert_eq!(body["status"], "CREATE_COMPLETE", "{body}");
    assert_eq!(body["health_status"], "UNHEALTHY", "{body}");
    for addon in ["cni", "ccm", "csi-cinder"] {
        assert_eq!(
            body["health_status_reason"][format!("addon.{addon}")],
            "Ready",
            "{body}"
        );
    }
    // CAAPH succeeds on its next attempt: healthy again.
    app.sim.set_fail_markers(vec![]);
    let body = until("the cluster to be healthy again", || async {
        let b = t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body;
        (b["health_status"] == "HEALTHY").then_some(b)
    })
    .await;
    assert_eq!(
        body["health_status_reason"]["addon.metrics-server"],
        "Ready"
    );
    // The release proxies go with the cluster.
    t.delete(&ALICE, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(204);
    t.wait_cluster(&ALICE, &c, "GONE").await;
    let res =
        magnum_capi::simkube::Resource::of("addons.cluster.x-k8s.io/v1alpha1", "HelmReleaseProxy");
    assert!(app.sim.store().list(&res, None, "").unwrap().is_empty());
}

/// `auto_scaling_enabled` without a maximum is a 400 saying what to set, at cluster create,
/// nodegroup create and nodegroup PATCH; nothing is recorded.
#[tokio::test]
async fn autoscaling_without_a_maximum_is_a_400() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "nomax", "cluster_template_id": ct, "master_count": 1,
                   "node_count": 1, "labels": {"kube_tag": "v1.33.5",
                   "auto_scaling_enabled": "true", "min_node_count": "1"}}),
        )
        .await;
    assert_magnum_error(&r, 400, "no max_node_count is set");
    let r = t.get(&ALICE, "/v1/clusters").await;
    assert_eq!(r.body["clusters"], json!([]), "nothing recorded");
    // A nodegroup that autoscales (its own label) without a maximum.
    let c = create_cluster(
        t,
        json!({"name": "fixed", "cluster_template_id": ct, "master_count": 1, "node_count": 1}),
    )
    .await;
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    let r = t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/nodegroups"),
            "1.9",
            json!({"name": "auto", "node_count": 1, "min_node_count": 1,
                   "labels": {"auto_scaling_enabled": "true"}, "merge_labels": true}),
        )
        .await;
    assert_magnum_error(&r, 400, "no max_node_count is set");
    // With a maximum it is taken; a PATCH taking the maximum away is refused.
    let r = t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/nodegroups"),
            "1.9",
            json!({"name": "auto", "node_count": 1, "min_node_count": 1, "max_node_count": 3,
                   "labels": {"auto_scaling_enabled": "true"}, "merge_labels": true}),
        )
        .await;
    r.assert_status(202);
    let r = t
        .patch_v(
            &ALICE,
            &format!("/v1/clusters/{c}/nodegroups/auto"),
            "1.9",
            json!([{"op": "remove", "path": "/max_node_count"}]),
        )
        .await;
    assert_magnum_error(&r, 400, "no max_node_count is set");
}

/// CAAPH reports metrics-server `HelmReleasePending` (`pending-install`, as Helm does while it
/// works): the cluster is `HEALTHY` with the add-on's progress in the reason; once the release
/// is deployed, `Ready`. With `[capi] addon_install_timeout_secs = 1`, the same install counts as
/// failed once it has taken longer, without any other change to wake the status writer.
#[tokio::test]
async fn an_installing_addon_stays_healthy_until_its_install_timeout() {
    for timeout in [1800, 1] {
        let app = capi_app_on(None, None, false, |c| {
            c.capi.addon_install_timeout_secs = timeout;
        })
        .await;
        let t = &app.t;
        app.sim
            .set_fail_markers(vec!["pending:metrics-server".into()]);
        let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
        let c = create_cluster(
            t,
            json!({"name": "slow", "cluster_template_id": ct, "master_count": 1,
                   "node_count": 1}),
        )
        .await;
        t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
        let reason = |b: &Value| {
            b["health_status_reason"]["addon.metrics-server"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        if timeout > 1 {
            let body = until("the installing add-on in a healthy cluster", || async {
                let b = t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body;
                (b["health_status"] == "HEALTHY"
                    && b["health_status_reason"]["addon.cni"] == "Ready")
                    .then_some(b)
            })
            .await;
            assert_eq!(
                reason(&body),
                "Progressing: installing (Helm release is in a pending state: pending-install)",
                "{body}"
            );
            // Helm finishes: the add-on is ready.
            app.sim.set_fail_markers(vec![]);
            until("the add-on to be ready", || async {
                let b = t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body;
                (reason(&b) == "Ready" && b["health_status"] == "HEALTHY").then_some(())
            })
            .await;
        } else {
            let body = until(
                "the stuck install to make the cluster unhealthy",
                || async {
                    let b = t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body;
                    reason(&b)
                        .starts_with("Failed: still installing after ")
                        .then_some(b)
                },
            )
            .await;
            assert_eq!(body["health_status"], "UNHEALTHY", "{body}");
            assert_eq!(body["status"], "CREATE_COMPLETE", "{body}");
            assert_eq!(body["health_status_reason"]["api"], "ok", "{body}");
        }
    }
}

/// A proxied, mirrored, audited, anti-affine cluster and a flannel cluster reach
/// `CREATE_COMPLETE` on the simulated management cluster (every write CRD-validated); bad
/// node-setting values are refused at template and cluster create, naming the label or field.
#[tokio::test]
async fn node_settings_and_flannel_clusters_complete_and_bad_values_are_400() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let base = json!({"image_id": "ubuntu-2404-kube-v1.33.5", "coe": "kubernetes",
        "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
        "external_network_id": "public", "dns_nameserver": "8.8.8.8"});
    let template = |name: &str, extra: Value| {
        let mut body = base.clone();
        body["name"] = json!(name);
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let settings = template(
        "settings",
        json!({"http_proxy": "http://proxy.example.com:3128",
               "https_proxy": "http://proxy.example.com:3128", "no_proxy": "10.1.0.0/16",
               "master_lb_enabled": true, "docker_volume_size": 20,
               "labels": {"kube_tag": "v1.33.5",
                   "containerd_registry_mirrors": "docker.io=https://mirror.example.com",
                   "insecure_registries": "registry.local:5000",
                   "audit_log_enabled": "true", "server_group_policies": "anti-affinity",
                   "docker_volume_type": "ssd", "etcd_volume_size": "10",
                   "container_infra_prefix": "registry.local:5000/mirror",
                   "cloud_provider_tag": "v1.33.9", "ingress_controller": "traefik"}}),
    );
    let flannel = template(
        "flannel",
        json!({"network_driver": "flannel", "labels": {"kube_tag": "v1.33.5"}}),
    );
    let mut clusters = Vec::new();
    for (body, masters) in [(settings, 3), (flannel, 1)] {
        let r = t.post(&ALICE, "/v1/clustertemplates", body).await;
        r.assert_status(201);
        let ct = r.body["uuid"].as_str().unwrap().to_string();
        let r = t
            .post(
                &ALICE,
                "/v1/clusters",
                json!({"name": format!("c{masters}"), "cluster_template_id": ct,
                       "master_count": masters, "node_count": 1}),
            )
            .await;
        r.assert_status(202);
        clusters.push(r.body["uuid"].as_str().unwrap().to_string());
    }
    for c in &clusters {
        t.wait_cluster(&ALICE, c, "CREATE_COMPLETE").await;
    }
    let osmts = objects(
        &app,
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachineTemplate",
        &clusters[0],
    );
    assert!(
        osmts
            .iter()
            .all(|o| o["spec"]["template"]["spec"]["serverGroup"]["filter"]["name"].is_string()),
        "{osmts:#?}"
    );
    // containerd's volume on every machine (and etcd's on the control plane's).
    assert!(
        osmts
            .iter()
            .all(|o| o["spec"]["template"]["spec"]["additionalBlockDevices"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["name"] == "containerd"
                    && d["sizeGiB"] == 20
                    && d["storage"]["volume"]["type"] == "ssd"))),
        "{osmts:#?}"
    );
    // The add-ons' images come from the prefix, the CCM's with the tag the label names.
    let settings_hcps = objects(
        &app,
        "addons.cluster.x-k8s.io/v1alpha1",
        "HelmChartProxy",
        &clusters[0],
    );
    let ccm = settings_hcps
        .iter()
        .find(|h| h["spec"]["chartName"] == "openstack-cloud-controller-manager")
        .unwrap();
    let ccm_values: Value =
        yaml_serde::from_str(ccm["spec"]["valuesTemplate"].as_str().unwrap()).unwrap();
    assert_eq!(
        ccm_values["image"],
        json!({"repository":
                   "registry.local:5000/mirror/provider-os/openstack-cloud-controller-manager",
               "tag": "v1.33.9"})
    );
    assert!(
        settings_hcps
            .iter()
            .any(|h| h["spec"]["chartName"] == "traefik")
    );
    let kcp = objects(
        &app,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        &clusters[0],
    );
    assert!(
        kcp[0]["spec"]["kubeadmConfigSpec"]["files"]
            .to_string()
            .contains("HTTP_PROXY")
    );
    let hcps = objects(
        &app,
        "addons.cluster.x-k8s.io/v1alpha1",
        "HelmChartProxy",
        &clusters[1],
    );
    assert!(hcps.iter().any(|h| h["spec"]["chartName"] == "flannel"));

    // Bad values: 400 at template create, naming the label or field.
    for (extra, named) in [
        (json!({"http_proxy": "proxy:3128"}), "http_proxy"),
        (
            json!({"labels": {"containerd_registry_mirrors": "docker.io"}}),
            "containerd_registry_mirrors",
        ),
        (
            json!({"labels": {"server_group_policies": "spread"}}),
            "server_group_policies",
        ),
        (
            json!({"labels": {"audit_log_maxsize": "big"}}),
            "audit_log_maxsize",
        ),
        (
            json!({"labels": {"cloud_provider_tag": "v1 latest"}}),
            "cloud_provider_tag",
        ),
        (
            json!({"labels": {"container_infra_prefix": "https://registry.local"}}),
            "container_infra_prefix",
        ),
        (
            json!({"labels": {"ingress_controller": "octavia"}}),
            "use nginx or traefik",
        ),
    ] {
        let r = t
            .post(
                &ALICE,
                "/v1/clustertemplates",
                template("bad", extra.clone()),
            )
            .await;
        assert_magnum_error(&r, 400, named);
    }
    // …and at cluster create, for labels the cluster brings.
    let r = t
        .post(&ALICE, "/v1/clustertemplates", template("ok", json!({})))
        .await;
    r.assert_status(201);
    let ct = r.body["uuid"].as_str().unwrap().to_string();
    // …and when a PATCH brings them to a template.
    for (op, named) in [
        (
            json!({"op": "add", "path": "/labels/server_group_policies", "value": "spread"}),
            "server_group_policies",
        ),
        (
            json!({"op": "replace", "path": "/https_proxy", "value": "proxy:3128"}),
            "https_proxy",
        ),
    ] {
        let r = t
            .patch(&ALICE, &format!("/v1/clustertemplates/{ct}"), json!([op]))
            .await;
        assert_magnum_error(&r, 400, named);
    }
    let r = t
        .patch(
            &ALICE,
            &format!("/v1/clustertemplates/{ct}"),
            json!([{"op": "add", "path": "/labels/server_group_policies",
                    "value": "anti-affinity"}]),
        )
        .await;
    r.assert_status(200);
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "bad", "cluster_template_id": ct,
                   "labels": {"insecure_registries": "https://r.example.com"}}),
        )
        .await;
    assert_magnum_error(&r, 400, "insecure_registries");
}

/// A cluster on a Flatcar image (`serve --dev` takes the template's `cluster_distro`) reaches
/// `CREATE_COMPLETE` with Ignition bootstrap objects (every write CRD-validated by the simulated
/// management cluster); an os_distro this driver cannot boot is a 400 at template create.
#[tokio::test]
async fn a_flatcar_cluster_boots_ignition_and_an_unbootable_distro_is_400() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let body = |name: &str, distro: &str| {
        json!({"name": name, "image_id": "flatcar-kube-v1.33.5", "coe": "kubernetes",
               "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
               "external_network_id": "public", "cluster_distro": distro,
               "http_proxy": "http://proxy.example.com:3128", "docker_volume_size": 20,
               "labels": {"kube_tag": "v1.33.5"}})
    };
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            body("fcos", "fedora-coreos"),
        )
        .await;
    assert_magnum_error(&r, 400, FCOS_REFUSAL);
    let r = t
        .post(&ALICE, "/v1/clustertemplates", body("flatcar", "flatcar"))
        .await;
    r.assert_status(201);
    let ct = r.body["uuid"].as_str().unwrap().to_string();
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "fc", "cluster_template_id": ct, "node_count": 1}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    let kcp = objects(
        &app,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        &c,
    );
    let kct = objects(
        &app,
        "bootstrap.cluster.x-k8s.io/v1beta2",
        "KubeadmConfigTemplate",
        &c,
    );
    for spec in [
        &kcp[0]["spec"]["kubeadmConfigSpec"],
        &kct[0]["spec"]["template"]["spec"],
    ] {
        assert_eq!(spec["format"], "ignition", "{spec:#}");
        let clc = spec["ignition"]["containerLinuxConfig"]["additionalConfig"]
            .as_str()
            .unwrap();
        assert!(
            clc.contains("HTTP_PROXY=http://proxy.example.com:3128"),
            "{clc}"
        );
        assert!(clc.contains("name: var-lib-containerd.mount"), "{clc}");
        // Ignition has the node's files; kubeadm keeps only those it reads from Secrets (the
        // control plane's etcd encryption configuration).
        assert!(spec.get("mounts").is_none(), "{spec:#}");
        assert!(
            spec["files"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|f| f.get("contentFrom").is_some()),
            "{spec:#}"
        );
    }
    // A template made before the rule (or by hand) cannot start a cluster either: Magnum's
    // check at cluster create reads the template's cluster_distro.
    sqlx::query(
        "UPDATE cluster_template SET cluster_distro = 'fedora-coreos' WHERE uuid::text = $1",
    )
    .bind(&ct)
    .execute(&t.state.pool)
    .await
    .unwrap();
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "fc2", "cluster_template_id": ct, "node_count": 1}),
        )
        .await;
    assert_magnum_error(
        &r,
        400,
        "Cluster type (vm, fedora-coreos, kubernetes) is not supported by any loaded cluster \
         driver.",
    );
}

#[tokio::test]
async fn an_idle_service_leaves_postgres_alone_and_statuses_still_land_promptly() {
    // Production pacing: the worker's safety poll at its default (tests poll every 50 ms).
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.operations.poll_interval_ms = 30_000;
    })
    .await;
    let t = &app.t;
    let ct = template(t, "k", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    // Once start-up is over, a quiet stretch of 6 s comes: no statement from the writer, the
    // maintenance or the workers (a loop faster than that would never leave one). The one
    // statement that stays is by design: each LISTEN follower's heartbeat notification (one
    // `pg_notify` per `[database] listen_heartbeat_ms`, how a dead listener is noticed).
    until_left_alone(&t.url, 6.0).await;
    // Events still move statuses at once: a create completes on the simulated management
    // cluster in about a second (the writer's safety poll is a minute).
    let started = std::time::Instant::now();
    let c = create_cluster(t, json!({"name": "c1", "cluster_template_id": ct})).await;
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the status took {:?}",
        started.elapsed()
    );
}

/// Index and table scans of `operation` so far, as this database's statistics count them.
async fn operation_scans(probe: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT COALESCE(seq_scan, 0) + COALESCE(idx_scan, 0) FROM pg_stat_user_tables
          WHERE relname = 'operation'",
    )
    .fetch_one(probe)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_word_from_the_queue_wakes_one_worker_not_all_of_them() {
    use sqlx::Connection;
    // Four idle workers, the safety poll out of the way.
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.operations.poll_interval_ms = 30_000;
        cfg.operations.concurrency = 4;
    })
    .await;
    let t = &app.t;
    until_left_alone(&t.url, 3.0).await;
    let probe = tokio::sync::Mutex::new(sqlx::PgConnection::connect(&t.url).await.unwrap());
    // A backend idle since its last statement reports its counts within PostgreSQL's idle
    // interval (10 s): waited for out before each reading.
    let settle = std::time::Duration::from_secs(11);
    tokio::time::sleep(settle).await;
    let before = operation_scans(&mut *probe.lock().await).await;
    // What a replica's record of an operation says to every listener; here with nothing queued.
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(magnum_capi::db::operations::CHANNEL)
        .execute(&mut *probe.lock().await)
        .await
        .unwrap();
    tokio::time::sleep(settle).await;
    // Counted by now as a rule; on a slow machine the report may come a little later.
    let looked = until("the workers' look at the queue to be counted", || async {
        let looked = operation_scans(&mut *probe.lock().await).await - before;
        (looked > 0).then_some(looked)
    })
    .await;
    // One worker looks: its claim and its reading of the next due time, a few scans. Four
    // woken at once scan four times as much.
    println!("scans of `operation` after one word from the queue: {looked}");
    assert!(
        (1..=3).contains(&looked),
        "one worker should have looked at the queue, once: {looked} scans"
    );
}
