//! Application credentials with the real Keystone: created as the requesting user at create
//! (admin role dropped), only in the management cluster's Secret (never in Postgres or a
//! response), deleted with the cluster.

use crate::common;

use crate::common::capi::{authenticates, capi_app_on, postgres_text, secret_credential};
use crate::common::fakecloud::*;
use crate::common::keystone::keystone;
use crate::common::stack::{env_exclusive, env_shared};
use crate::common::wait::until;
use crate::common::{TestApp, assert_magnum_error};

use serde_json::{Value, json};

async fn app_creds(token: &str, user_id: &str) -> Vec<Value> {
    let (status, body) = keystone()
        .request(
            "GET",
            &format!("/users/{user_id}/application_credentials"),
            Some(token),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    body["application_credentials"].as_array().unwrap().clone()
}

/// POSTs `body` to `path` as the token's user, expecting `status`; the created uuid.
async fn create(t: &TestApp, token: &str, path: &str, body: Value, status: u16) -> Value {
    let r = t
        .call_token(Some(token), "POST", path, Some("latest"), Some(body))
        .await;
    assert_eq!(r.status, status, "{}", r.body);
    r.body
}

/// POSTs `body` to `path` as the token's user; the answer (for requests that are refused).
async fn refused(t: &TestApp, token: &str, path: &str, body: Value) -> common::Resp {
    t.call_token(Some(token), "POST", path, Some("latest"), Some(body))
        .await
}

/// A template on the fake cloud's Ubuntu image (kube_version v1.30.4) and a cluster from it.
async fn cluster(t: &TestApp, token: &str) -> String {
    let ct = create(
        t,
        token,
        "/v1/clustertemplates",
        json!({
        "name": "kube", "image_id": IMAGE_UBUNTU_KUBE, "coe": "kubernetes",
        "flavor_id": "m1.small", "master_flavor_id": "m1.medium", "keypair_id": KEYPAIR_DEFAULT,
        "external_network_id": NETWORK_PUBLIC, "labels": {"kube_tag": "v1.30.4"}}),
        201,
    )
    .await;
    let c = create(
        t,
        token,
        "/v1/clusters",
        json!({"name": "c1", "cluster_template_id": ct["uuid"]}),
        202,
    )
    .await;
    c["uuid"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn the_cluster_credential_lives_in_keystone_and_the_secret_only() {
    let _env = env_shared().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let ks = keystone();
    let token = ks.token("alice", "alpha").await;
    let alice = ks.user_id("alice").to_string();
    let before = app_creds(&token, &alice).await.len();

    // kube_tag and the image's kube_version must agree.
    let bad = refused(
        t,
        &token,
        "/v1/clustertemplates",
        json!({
        "name": "bad", "image_id": IMAGE_UBUNTU_KUBE, "coe": "kubernetes",
        "external_network_id": NETWORK_PUBLIC, "labels": {"kube_tag": "v1.31.0"}}),
    )
    .await;
    assert_magnum_error(&bad, 400, "v1.30.4");
    let c = cluster(t, &token).await;

    // One new credential, named for the cluster, without admin: made by the create operation
    // (the 202 does not wait for it).
    let creds = until("the cluster's credential", || async {
        let creds = app_creds(&token, &alice).await;
        (creds.len() > before).then_some(creds)
    })
    .await;
    assert_eq!(creds.len(), before + 1);
    let cred = creds
        .iter()
        .find(|a| {
            a["name"]
                .as_str()
                .unwrap()
                .starts_with(&format!("magnum-{c}-"))
        })
        .expect("the cluster's credential");
    let roles: Vec<&str> = cred["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        roles.contains(&"member") && !roles.contains(&"admin"),
        "{roles:?}"
    );
    let id = cred["id"].as_str().unwrap().to_string();

    // Its secret is in the management cluster's Secret and nowhere in Postgres.
    let stored: String = until("the credential to be recorded", || async {
        sqlx::query_scalar::<_, Option<String>>(
            "SELECT app_cred_id FROM cluster WHERE uuid = $1::uuid",
        )
        .bind(&c)
        .fetch_one(&t.state.pool)
        .await
        .unwrap()
    })
    .await;
    assert_eq!(stored, id);
    let (in_secret, secret) = secret_credential(&app, &c);
    assert_eq!(in_secret, id);
    assert!(secret.len() > 20);
    assert!(
        !postgres_text(&t.state.pool).await.contains(&secret),
        "the credential secret reached Postgres"
    );
    // The credential works: it authenticates with Keystone.
    assert!(authenticates(&id, &secret).await);

    let path = format!("/v1/clusters/{c}");
    let get = || t.call_token(Some(&token), "GET", &path, None, None);
    until("CREATE_COMPLETE", || async {
        let r = get().await;
        (r.body["status"] == "CREATE_COMPLETE").then_some(())
    })
    .await;
    let r = get().await;
    assert!(!r.body.to_string().contains(&secret));

    // Delete: the cluster goes, and so does its credential.
    let r = t
        .call_token(Some(&token), "DELETE", &path, None, None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    until("the cluster to be gone", || async {
        let r = get().await;
        (r.status == 404).then_some(())
    })
    .await;
    let left = app_creds(&token, &alice).await;
    assert!(
        !left.iter().any(|a| a["id"] == id.as_str()),
        "credential left behind: {left:?}"
    );
    assert_eq!(left.len(), before);
}

#[tokio::test]
async fn a_credential_keystone_would_not_delete_is_retried_until_it_is_gone() {
    let _env = common::stack::env_exclusive().await;
    // The delete cleanup acts with the cluster's credential, so with Keystone down it fails the
    // delete (tests/capi_cleanup.rs); this test is about the credential deleted afterwards.
    let app = capi_app_on(None, None, true, |cfg| cfg.capi.delete_cleanup = false).await;
    let t = &app.t;
    let ks = keystone();
    let token = ks.token("alice", "alpha").await;
    let alice = ks.user_id("alice").to_string();
    let c = cluster(t, &token).await;
    let path = format!("/v1/clusters/{c}");
    let get = || t.call_token(Some(&token), "GET", &path, None, None);
    until("CREATE_COMPLETE", || async {
        (get().await.body["status"] == "CREATE_COMPLETE").then_some(())
    })
    .await;
    let id: String = sqlx::query_scalar("SELECT app_cred_id FROM cluster WHERE uuid = $1::uuid")
        .bind(&c)
        .fetch_one(&t.state.pool)
        .await
        .unwrap();

    // Keystone goes away during the delete: the cluster is still deleted (the token is cached),
    // the credential is recorded as a leftover.
    tokio::task::spawn_blocking(move || keystone().stop())
        .await
        .unwrap();
    let r = t
        .call_token(Some(&token), "DELETE", &path, None, None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    until("the cluster to be gone", || async {
        (get().await.status == 404).then_some(())
    })
    .await;
    let left: Vec<String> = sqlx::query_scalar("SELECT id FROM app_credential_leftover")
        .fetch_all(&t.state.pool)
        .await
        .unwrap();
    assert_eq!(left, std::slice::from_ref(&id));

    // Keystone is back: the sweep deletes it.
    tokio::task::spawn_blocking(move || keystone().start())
        .await
        .unwrap();
    let capi = app.capi.clone();
    until("the leftover credential to be deleted", || async {
        let _ = magnum_capi::maintenance::sweep_leftover_credentials(&t.state.pool, &capi).await;
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM app_credential_leftover")
            .fetch_one(&t.state.pool)
            .await
            .unwrap();
        (n == 0).then_some(())
    })
    .await;
    let token = ks.token("alice", "alpha").await;
    assert!(
        !app_creds(&token, &alice)
            .await
            .iter()
            .any(|a| a["id"] == id.as_str())
    );
}

#[tokio::test]
async fn the_create_answers_before_keystone_and_a_dead_token_fails_it_cleanly() {
    let _env = env_shared().await;
    let ks = keystone();
    let mut app = capi_app_on(None, None, true, |cfg| {
        cfg.operations.worker_enabled = false;
    })
    .await;
    let (user, token) = ks.new_user_token("sealed", "member", "alpha").await;
    let before = app_creds(&token, &user).await.len();
    let c = cluster(&app.t, &token).await;
    // Recorded and answered: the credential does not exist yet, the token is in the operation
    // only sealed.
    let r = app
        .t
        .call_token(
            Some(&token),
            "GET",
            &format!("/v1/clusters/{c}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.body["status"], "CREATE_IN_PROGRESS");
    assert_eq!(app_creds(&token, &user).await.len(), before);
    let pool = app.t.state.pool.clone();
    let sealed = || async {
        sqlx::query_scalar::<_, Option<String>>(
            "SELECT payload->>'sealed_token' FROM operation WHERE cluster_uuid = $1::uuid",
        )
        .bind(&c)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    assert!(sealed().await.is_some_and(|s| !s.contains(&token)));
    assert!(!postgres_text(&app.t.state.pool).await.contains(&token));

    // The token dies before the worker gets to it: the create fails with Keystone's reason and
    // leaves nothing behind.
    ks.revoke(&token).await;
    app.start_worker();
    let admin = ks.token("admin", "admin").await;
    let path = format!("/v1/clusters/{c}");
    let failed = until("CREATE_FAILED", || async {
        let r = app
            .t
            .call_token(Some(&admin), "GET", &path, None, None)
            .await;
        (r.body["status"] == "CREATE_FAILED").then_some(r.body)
    })
    .await;
    let reason = failed["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("could not be created as the user who created it"),
        "{reason}"
    );
    let admin_view = ks.token("admin", "admin").await;
    let (status, body) = ks
        .request(
            "GET",
            &format!("/users/{user}/application_credentials"),
            Some(&admin_view),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["application_credentials"].as_array().unwrap().len(),
        before,
        "no credential was left"
    );
    assert!(
        common::capi::objects(&app, "v1", "Secret", &c).is_empty(),
        "no Secret was left"
    );
    assert_eq!(
        sealed().await,
        None,
        "the sealed token goes with the operation"
    );
}

/// Keystone goes away between the 202 and the worker: the create retries, then fails with the
/// reason, and nothing is left — no credential once Keystone is back, no Secret, no sealed token.
#[tokio::test]
async fn keystone_down_after_the_202_fails_the_create_with_the_reason_and_no_leftovers() {
    let _env = env_exclusive().await;
    let ks = keystone();
    let mut app = capi_app_on(None, None, true, |cfg| {
        cfg.operations.worker_enabled = false;
        cfg.operations.max_attempts = 2;
        cfg.operations.retry_base_ms = 50;
    })
    .await;
    let (user, token) = ks.new_user_token("unlucky", "member", "alpha").await;
    let before = app_creds(&token, &user).await.len();
    let c = cluster(&app.t, &token).await;
    let path = format!("/v1/clusters/{c}");
    // The token was validated (and cached) by the create; Keystone goes now.
    tokio::task::spawn_blocking(|| keystone().stop())
        .await
        .unwrap();
    app.start_worker();
    let failed = until("CREATE_FAILED", || async {
        let r = app
            .t
            .call_token(Some(&token), "GET", &path, None, None)
            .await;
        (r.body["status"] == "CREATE_FAILED").then_some(r.body)
    })
    .await;
    tokio::task::spawn_blocking(|| keystone().start())
        .await
        .unwrap();
    let reason = failed["status_reason"].as_str().unwrap();
    assert!(reason.to_lowercase().contains("keystone"), "{reason}");
    assert!(!failed.to_string().contains(&token));
    assert_eq!(
        app_creds(&token, &user).await.len(),
        before,
        "no credential"
    );
    assert!(
        common::capi::objects(&app, "v1", "Secret", &c).is_empty(),
        "no Secret was left"
    );
    let sealed: Option<String> = sqlx::query_scalar(
        "SELECT payload->>'sealed_token' FROM operation WHERE cluster_uuid = $1::uuid",
    )
    .bind(&c)
    .fetch_one(&app.t.state.pool)
    .await
    .unwrap();
    assert_eq!(sealed, None, "the sealed token goes with the operation");
    assert!(!postgres_text(&app.t.state.pool).await.contains(&token));
}

/// A GPU flavor (Nova extra specs read at validation, from the flavor list) brings the GPU operator; Keystone
/// authentication gets the service's Keystone URL; bad add-on labels are 400 naming the label;
/// an autoscaled nodegroup with a minimum of 0 gets the flavor's size (from Nova's flavor list)
/// as cluster-autoscaler's capacity annotations.
#[tokio::test]
async fn a_gpu_flavor_and_keystone_auth_reach_the_management_cluster() {
    let _env = env_shared().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let token = keystone().token("alice", "alpha").await;
    common::stack::cloud().add_flavor(json!({
        "id": "gpu-t4", "name": "g1.t4", "ram": 16384, "disk": 40, "vcpus": 8,
        "extra_specs": {"pci_passthrough:alias": "nvidia-t4:1", "hw:cpu_policy": "dedicated"}}));
    let body = |name: &str, labels: Value| {
        json!({"name": name, "image_id": IMAGE_UBUNTU_KUBE, "coe": "kubernetes",
               "flavor_id": "g1.t4", "master_flavor_id": "m1.medium",
               "keypair_id": KEYPAIR_DEFAULT, "external_network_id": NETWORK_PUBLIC,
               "labels": labels})
    };
    for (labels, label) in [
        (
            json!({"keystone_auth_enabled": "sure"}),
            "keystone_auth_enabled",
        ),
        (
            json!({"keystone_auth_policy_configmap": "Bad_Name"}),
            "keystone_auth_policy_configmap",
        ),
        (
            json!({"gpu_operator_enabled": "maybe"}),
            "gpu_operator_enabled",
        ),
    ] {
        let bad = refused(t, &token, "/v1/clustertemplates", body("bad", labels)).await;
        assert_magnum_error(&bad, 400, label);
    }
    let ct = create(
        t,
        &token,
        "/v1/clustertemplates",
        body(
            "gpu",
            json!({"kube_tag": "v1.30.4", "keystone_auth_enabled": "true",
                   "auto_scaling_enabled": "true", "min_node_count": "0",
                   "max_node_count": "3"}),
        ),
        201,
    )
    .await;
    let c = create(
        t,
        &token,
        "/v1/clusters",
        json!({"name": "gpu", "cluster_template_id": ct["uuid"]}),
        202,
    )
    .await;
    let c = c["uuid"].as_str().unwrap().to_string();
    let gpu = until("the GPU operator for the GPU flavor", || async {
        common::capi::objects(
            &app,
            "addons.cluster.x-k8s.io/v1alpha1",
            "HelmChartProxy",
            &c,
        )
        .into_iter()
        .find(|h| h["spec"]["chartName"] == "gpu-operator")
    })
    .await;
    assert_eq!(
        gpu["spec"]["version"],
        magnum_capi::config::CapiConfig::default().gpu_operator_chart_version
    );
    // The extra specs came with Nova's flavor list (microversion 2.61): the flavor's own
    // `os-extra_specs` was never asked for.
    let asked: Vec<String> = common::stack::cloud()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p.contains("gpu-t4/os-extra_specs"))
        .collect();
    assert!(asked.is_empty(), "{asked:?}");
    let cm = common::capi::objects(&app, "v1", "ConfigMap", &c)
        .pop()
        .expect("the k8s-keystone-auth manifests");
    let manifests = cm["data"]["keystone-auth.yaml"].as_str().unwrap();
    let url = app.t.state.config.keystone.public_v3_url().unwrap();
    assert!(
        manifests.contains(&format!("--keystone-url={url}")),
        "{manifests}"
    );
    // The image follows the cluster's minor (v1.30).
    assert!(
        manifests.contains("k8s-keystone-auth:v1.30.3"),
        "{manifests}"
    );
    // Scale from zero: g1.t4's size on the MachineDeployment.
    let md = common::capi::objects(&app, "cluster.x-k8s.io/v1beta2", "MachineDeployment", &c)
        .pop()
        .expect("the worker MachineDeployment");
    let ann = &md["metadata"]["annotations"];
    assert_eq!(
        ann["cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"], "0",
        "{md}"
    );
    assert_eq!(
        ann["capacity.cluster-autoscaler.kubernetes.io/cpu"], "8",
        "{md}"
    );
    assert_eq!(
        ann["capacity.cluster-autoscaler.kubernetes.io/memory"], "16384Mi",
        "{md}"
    );
    assert_eq!(
        ann["capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk"], "40Gi",
        "{md}"
    );
}
