//! Application-credential rotation with the real Keystone on the simulated management cluster:
//! `PATCH /v1/credentials` by another member (ownership moves, the old credential is deleted),
//! who may not rotate (reader, admin of another project), the periodic check that notices a
//! disabled owner and the implicit rotation that lets another member delete the cluster, and a
//! rotation while Keystone is down (the old credential stays, UPDATE_FAILED, a retry works).
//! Also `openstack coe cluster config` end to end.

use crate::common;

use crate::common::capi::{authenticates, capi_app_on, objects, postgres_text, secret_credential};
use crate::common::fakecloud::*;
use crate::common::keystone::keystone;
use crate::common::osc::Osc;
use crate::common::stack::{env_exclusive, env_shared, serve_as_endpoint};
use crate::common::wait::until;
use crate::common::{TestApp, assert_magnum_error};

use magnum_capi::capi::pki;
use serde_json::{Value, json};

async fn creds_of(user_id: &str) -> Vec<Value> {
    keystone().app_credentials_of(user_id).await
}

async fn call(
    t: &TestApp,
    token: &str,
    method: &str,
    path: &str,
    v: &str,
    body: Option<Value>,
) -> common::Resp {
    t.call_token(Some(token), method, path, Some(v), body).await
}

async fn get_cluster(t: &TestApp, token: &str, c: &str) -> common::Resp {
    call(
        t,
        token,
        "GET",
        &format!("/v1/clusters/{c}"),
        "latest",
        None,
    )
    .await
}

/// A template and a complete cluster of the token's user; the cluster uuid.
pub(crate) async fn cluster(t: &TestApp, token: &str) -> String {
    let r = call(
        t,
        token,
        "POST",
        "/v1/clustertemplates",
        "latest",
        Some(json!({
        "name": "kube", "image_id": IMAGE_UBUNTU_KUBE, "coe": "kubernetes",
        "flavor_id": "m1.small", "master_flavor_id": "m1.medium", "keypair_id": KEYPAIR_DEFAULT,
        "external_network_id": NETWORK_PUBLIC, "labels": {"kube_tag": "v1.30.4"}})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = call(
        t,
        token,
        "POST",
        "/v1/clusters",
        "latest",
        Some(json!({"name": "c1", "cluster_template_id": r.body["uuid"]})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    t.wait_cluster_token(token, &c, "CREATE_COMPLETE").await;
    c
}

async fn owner(t: &TestApp, c: &str) -> (String, Option<String>) {
    sqlx::query_as("SELECT user_id, app_cred_id FROM cluster WHERE uuid = $1::uuid")
        .bind(c)
        .fetch_one(&t.state.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn another_member_rotates_the_credential_and_becomes_the_owner() {
    let _env = env_shared().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let ks = keystone();
    let (owner_id, owner_token) = ks.new_user_token("owner", "member", "alpha").await;
    let (carol_id, carol_token) = ks.new_user_token("carol", "member", "alpha").await;
    let rita = ks.token("rita", "alpha").await;
    let admin = ks.admin_token().await;
    let c = cluster(t, &owner_token).await;
    let (old_id, old_secret) = secret_credential(&app, &c);
    let path = format!("/v1/credentials/{c}");

    // Below 1.12 the action does not exist; a reader and an admin of another project may not.
    let r = call(t, &carol_token, "PATCH", &path, "1.11", None).await;
    assert_eq!(r.status, 406, "{}", r.body);
    let r = call(t, &rita, "PATCH", &path, "1.12", None).await;
    assert_eq!(r.status, 403, "reader: {}", r.body);
    let r = call(t, &admin, "PATCH", &path, "1.12", None).await;
    assert_magnum_error(&r, 403, "member of project");
    let bob = ks.token("bob", "beta").await;
    let r = call(t, &bob, "PATCH", &path, "1.12", None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(owner(t, &c).await, (owner_id.clone(), Some(old_id.clone())));

    // Carol rotates: she owns the cluster and its new credential; the old one is gone.
    let r = call(t, &carol_token, "PATCH", &path, "1.12", None).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.body["uuid"], c.as_str());
    let body = t
        .wait_cluster_token(&carol_token, &c, "UPDATE_COMPLETE")
        .await
        .body;
    assert_eq!(body["user_id"], carol_id.as_str(), "{body}");
    let (new_id, new_secret) = secret_credential(&app, &c);
    assert_ne!(new_id, old_id);
    assert_eq!(owner(t, &c).await, (carol_id.clone(), Some(new_id.clone())));
    assert!(authenticates(&new_id, &new_secret).await);
    assert!(!authenticates(&old_id, &old_secret).await);
    assert!(
        creds_of(&carol_id)
            .await
            .iter()
            .any(|a| a["id"] == new_id.as_str())
    );
    assert!(
        !creds_of(&owner_id)
            .await
            .iter()
            .any(|a| a["id"] == old_id.as_str())
    );
    // Every object of the cluster carries the new owner; no staging Secret is left.
    for s in objects(&app, "v1", "Secret", &c) {
        assert_eq!(
            s["metadata"]["labels"]["magnum.openstack.org/user-id"],
            carol_id.as_str(),
            "{}",
            s["metadata"]["name"]
        );
        assert!(
            !s["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-credential-rotation")
        );
    }
    for kind in ["Cluster", "MachineDeployment"] {
        for o in objects(&app, "cluster.x-k8s.io/v1beta2", kind, &c) {
            assert_eq!(
                o["metadata"]["labels"]["magnum.openstack.org/user-id"],
                carol_id.as_str()
            );
        }
    }
    // The secret never reached Postgres or a response.
    let dump = postgres_text(&t.state.pool).await;
    assert!(!dump.contains(&new_secret) && !dump.contains(&old_secret));
    assert!(!body.to_string().contains(&new_secret));

    // Delete: no credential of the cluster is left for anyone.
    let r = call(
        t,
        &carol_token,
        "DELETE",
        &format!("/v1/clusters/{c}"),
        "latest",
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    t.wait_cluster_token(&carol_token, &c, "GONE").await;
    let prefix = format!("magnum-{c}-");
    for u in [&owner_id, &carol_id] {
        assert!(
            !creds_of(u)
                .await
                .iter()
                .any(|a| a["name"].as_str().unwrap().starts_with(&prefix))
        );
    }
}

#[tokio::test]
async fn a_disabled_owner_shows_in_health_and_another_member_can_still_delete() {
    let _env = env_shared().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let ks = keystone();
    let (dave_id, dave_token) = ks.new_user_token("dave", "member", "alpha").await;
    let (erin_id, erin_token) = ks.new_user_token("erin", "member", "alpha").await;
    let c = cluster(t, &dave_token).await;
    let capi = app.capi.clone();

    // The periodic check finds nothing wrong.
    sqlx::query("UPDATE cluster SET credential_checked_at = NULL")
        .execute(&t.state.pool)
        .await
        .unwrap();
    assert_eq!(
        magnum_capi::maintenance::check_credentials(&t.state.pool, &capi)
            .await
            .unwrap(),
        1
    );
    let r = get_cluster(t, &erin_token, &c).await;
    assert!(
        r.body["health_status_reason"].get("credential").is_none(),
        "{}",
        r.body
    );

    // Dave is disabled: his credential stops authenticating, and the health says why.
    ks.admin(
        "PATCH",
        &format!("/users/{dave_id}"),
        Some(json!({"user": {"enabled": false}})),
    )
    .await;
    sqlx::query("UPDATE cluster SET credential_checked_at = NULL")
        .execute(&t.state.pool)
        .await
        .unwrap();
    assert_eq!(
        magnum_capi::maintenance::check_credentials(&t.state.pool, &capi)
            .await
            .unwrap(),
        1
    );
    let body = until("health to show the credential problem", || async {
        let r = get_cluster(t, &erin_token, &c).await;
        r.body["health_status_reason"]
            .get("credential")
            .is_some()
            .then_some(r.body)
    })
    .await;
    assert_eq!(body["health_status"], "UNHEALTHY", "{body}");
    let why = body["health_status_reason"]["credential"].as_str().unwrap();
    assert!(
        why.contains(&format!("user {dave_id}) is disabled")),
        "{why}"
    );
    assert_eq!(body["status"], "CREATE_COMPLETE");

    // Erin deletes it: the credential is rotated to her first, then everything goes.
    let r = call(
        t,
        &erin_token,
        "DELETE",
        &format!("/v1/clusters/{c}"),
        "latest",
        None,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    t.wait_cluster_token(&erin_token, &c, "GONE").await;
    // The rows go before the worker marks the delete done (the row delete is the driver's last
    // step, the operation's end the worker's), so the 404 can be seen a moment earlier.
    let want = [
        ("cluster_create", "done"),
        ("rotate_credential", "done"),
        ("cluster_delete", "done"),
    ]
    .map(|(k, s)| (k.to_string(), s.to_string()));
    until("every operation of the cluster done", || async {
        let kinds: Vec<(String, String)> = sqlx::query_as(
            "SELECT kind, state FROM operation WHERE cluster_uuid = $1::uuid ORDER BY id",
        )
        .bind(&c)
        .fetch_all(&t.state.pool)
        .await
        .unwrap();
        (kinds == want).then_some(())
    })
    .await;
    let prefix = format!("magnum-{c}-");
    for u in [&dave_id, &erin_id] {
        let left = creds_of(u).await;
        assert!(
            !left
                .iter()
                .any(|a| a["name"].as_str().unwrap().starts_with(&prefix)),
            "{left:?}"
        );
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM app_credential_leftover")
        .fetch_one(&t.state.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn a_rotation_while_keystone_is_down_fails_cleanly_and_a_retry_works() {
    let _env = env_exclusive().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let ks = keystone();
    let token = ks.token("alice", "alpha").await;
    let c = cluster(t, &token).await;
    let (old_id, old_secret) = secret_credential(&app, &c);
    let path = format!("/v1/credentials/{c}");
    // The token is validated (and cached) before Keystone goes.
    let r = get_cluster(t, &token, &c).await;
    assert_eq!(r.status, 200);

    tokio::task::spawn_blocking(|| keystone().stop())
        .await
        .unwrap();
    let r = call(t, &token, "PATCH", &path, "1.12", None).await;
    assert_eq!(r.status, 503, "{}", r.body);
    let r = get_cluster(t, &token, &c).await;
    assert_eq!(r.body["status"], "UPDATE_FAILED", "{}", r.body);
    assert!(
        r.body["status_reason"]
            .as_str()
            .unwrap()
            .contains("previous credential stays in force"),
        "{}",
        r.body
    );
    assert_eq!(secret_credential(&app, &c).0, old_id);
    tokio::task::spawn_blocking(|| keystone().start())
        .await
        .unwrap();
    // Still failed (CAPI converging does not undo it), and the old credential still works (a
    // pause: what is checked is that nothing changes).
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let r = get_cluster(t, &token, &c).await;
    assert_eq!(r.body["status"], "UPDATE_FAILED", "{}", r.body);
    assert!(authenticates(&old_id, &old_secret).await);

    // The retry succeeds.
    let r = call(t, &token, "PATCH", &path, "1.12", None).await;
    assert_eq!(r.status, 202, "{}", r.body);
    t.wait_cluster_token(&token, &c, "UPDATE_COMPLETE").await;
    let (new_id, new_secret) = secret_credential(&app, &c);
    assert_ne!(new_id, old_id);
    assert!(authenticates(&new_id, &new_secret).await);
    assert!(!authenticates(&old_id, &old_secret).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coe_cluster_config_gives_a_kubeconfig_the_cluster_accepts() {
    let _env = env_exclusive().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let ks = keystone();
    let token = ks.token("alice", "alpha").await;
    let c = cluster(t, &token).await;
    let server = serve_as_endpoint(&t.state).await;
    let dir = tempfile::tempdir().unwrap();
    let osc = Osc::new(ks);
    osc.ok(
        "alice",
        "alpha",
        &[
            "coe",
            "cluster",
            "config",
            &c,
            "--dir",
            dir.path().to_str().unwrap(),
            "--force",
        ],
    )
    .await;
    let text = std::fs::read_to_string(dir.path().join("config")).unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let b64 = |s: &str| {
        String::from_utf8(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s).unwrap(),
        )
        .unwrap()
    };
    let cluster = kc.clusters[0].cluster.as_ref().unwrap();
    let api = get_cluster(t, &token, &c).await.body["api_address"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(cluster.server.as_deref(), Some(api.as_str()));
    let ca = b64(cluster.certificate_authority_data.as_deref().unwrap());
    let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
    let cert = b64(user.client_certificate_data.as_deref().unwrap());
    assert!(
        pki::verifies(&cert, &ca),
        "the client certificate does not verify against the CA"
    );
    let (_, der) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
    let parsed = der.parse_x509().unwrap();
    assert!(
        parsed.subject().to_string().contains("admin"),
        "{}",
        parsed.subject()
    );
    let uuid = uuid::Uuid::parse_str(&c).unwrap();
    let ns = magnum_capi::capi::namespace("magnum", ks.project_id("alpha"));
    assert!(app.sim.simulator().unwrap().workload_accepts(
        &ns,
        &magnum_capi::capi::capi_name(uuid),
        &cert
    ));
    // kubectl reads it.
    if let Ok(out) = std::process::Command::new("kubectl")
        .args([
            "--kubeconfig",
            dir.path().join("config").to_str().unwrap(),
            "config",
            "view",
            "-o",
            "json",
        ])
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The cluster answers at its api_address, on loopback over TLS: its Nodes are its machines.
    assert!(api.starts_with("https://127.0.0.1:"), "{api}");
    let capi_name = magnum_capi::capi::capi_name(uuid);
    let selector = magnum_capi::simkube::Selector::parse(&format!(
        "cluster.x-k8s.io/cluster-name={capi_name}"
    ))
    .unwrap();
    let (machines, _) = app.sim.store().list_matching(
        &magnum_capi::simkube::Resource::new("cluster.x-k8s.io", "machines"),
        Some(&ns),
        &selector,
        &Default::default(),
    );
    let mut machines: Vec<String> = machines
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    machines.sort();
    assert_eq!(machines.len(), 2, "one control-plane machine, one worker");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    let mut nodes: Vec<String> = nodes
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, machines);
    assert_eq!(client.apiserver_version().await.unwrap().major, "1");
    // `kubectl get nodes` (asynchronously: this runtime serves the cluster it talks to).
    if let Ok(out) = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(dir.path().join("config"))
        .args(["get", "nodes", "-o", "name"])
        .output()
        .await
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.trim_start_matches("node/").to_string())
            .collect();
        assert_eq!(listed, machines);
    }
    server.abort();
}

#[tokio::test]
async fn a_credential_with_an_expiry_renews_itself_before_it() {
    let _env = env_shared().await;
    // Credentials live four days and renew (at most half their life) two days ahead.
    let app = capi_app_on(None, None, true, |cfg| {
        cfg.capi.app_cred_expiry_days = 4;
        cfg.capi.app_cred_renew_before_days = 2;
    })
    .await;
    let t = &app.t;
    let ks = keystone();
    let (frank_id, token) = ks.new_user_token("frank", "member", "alpha").await;
    let c = cluster(t, &token).await;
    let (old_id, old_secret) = secret_credential(&app, &c);
    let cred = creds_of(&frank_id)
        .await
        .into_iter()
        .find(|a| a["id"] == old_id.as_str())
        .unwrap();
    assert!(cred["expires_at"].is_string(), "{cred}");
    assert_eq!(
        cred["unrestricted"], true,
        "a credential that renews itself must be unrestricted"
    );

    let capi = app.capi.clone();
    let journal = magnum_capi::service::journal::PgJournal::new(t.state.pool.clone());
    assert_eq!(
        magnum_capi::maintenance::renew_expiring(&t.state.pool, &capi, &journal)
            .await
            .unwrap(),
        0,
        "not due yet"
    );
    // A day before the expiry (as Postgres sees it) it is due.
    common::credential_due_in_a_day(&t.state.pool, &c).await;
    assert_eq!(
        magnum_capi::maintenance::renew_expiring(&t.state.pool, &capi, &journal)
            .await
            .unwrap(),
        1
    );
    let new_id = until("the renewed credential", || async {
        let (id, _) = secret_credential(&app, &c);
        let (_, stored) = owner(t, &c).await;
        (id != old_id && stored.as_deref() == Some(id.as_str())).then_some(id)
    })
    .await;
    // Same owner, a later expiry, the old one deleted; the status never changed.
    assert_eq!(owner(t, &c).await.0, frank_id);
    until("the old credential to be deleted", || async {
        (!authenticates(&old_id, &old_secret).await).then_some(())
    })
    .await;
    assert!(
        creds_of(&frank_id)
            .await
            .iter()
            .any(|a| a["id"] == new_id.as_str())
    );
    let r = get_cluster(t, &token, &c).await;
    assert_eq!(r.body["status"], "CREATE_COMPLETE");
    // The successor lives four days again: nothing is due.
    assert_eq!(
        magnum_capi::maintenance::renew_expiring(&t.state.pool, &capi, &journal)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn a_staged_credential_nobody_recorded_is_discarded() {
    let _env = env_shared().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let ks = keystone();
    let (gina_id, token) = ks.new_user_token("gina", "member", "alpha").await;
    let c = cluster(t, &token).await;
    let before = secret_credential(&app, &c);
    // A request staged a credential and died before recording the rotation.
    let capi = app.capi.clone();
    let k = capi.keystone().cloned().unwrap();
    let identity = k.validate(&token).await.unwrap();
    let magnum_capi::db::spec::Loaded::Spec(spec) =
        magnum_capi::db::spec::load(&t.state.pool, uuid::Uuid::parse_str(&c).unwrap())
            .await
            .unwrap()
    else {
        panic!("cluster {c} not found");
    };
    let journal = magnum_capi::service::journal::PgJournal::new(t.state.pool.clone());
    let session = k.user_session(&token, identity.clone());
    let staged = capi
        .stage_rotation(&journal, &spec, &session, &gina_id, &identity.roles, false)
        .await
        .unwrap();
    let id = staged.payload.app_cred_id.clone();
    assert!(
        creds_of(&gina_id)
            .await
            .iter()
            .any(|a| a["id"] == id.as_str())
    );
    let staging = |app: &common::capi::CapiApp| {
        objects(app, "v1", "Secret", &c).iter().any(|s| {
            s["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-credential-rotation")
        })
    };
    assert!(staging(&app));
    // Within the grace period it stays; after it, it goes, credential and all.
    let grace = std::time::Duration::from_secs(600);
    assert_eq!(
        magnum_capi::maintenance::sweep_staged(&t.state.pool, &capi, &journal, grace)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        magnum_capi::maintenance::sweep_staged(
            &t.state.pool,
            &capi,
            &journal,
            std::time::Duration::ZERO
        )
        .await
        .unwrap(),
        1
    );
    assert!(!staging(&app));
    assert!(
        !creds_of(&gina_id)
            .await
            .iter()
            .any(|a| a["id"] == id.as_str())
    );
    // The cluster's own credential is untouched.
    assert_eq!(secret_credential(&app, &c), before);
    assert!(authenticates(&before.0, &before.1).await);
}

/// Replicas with different key rings on one database: a create sealed by one replica is handed
/// back by a replica without that key (no attempt counted, the cluster still in progress) and
/// completed by one holding it in its rotated ring (new key current, old key previous); with no
/// replica holding it, the create fails once `unseal_wait_secs` is over, naming the key.
#[tokio::test]
async fn a_create_sealed_with_another_key_waits_for_a_replica_that_holds_it() {
    use base64::Engine as _;
    let _env = env_shared().await;
    let key = |b: u8| {
        secrecy::SecretString::from(base64::engine::general_purpose::STANDARD.encode([b; 32]))
    };
    let (old, new, other) = (key(1), key(2), key(3));
    let with_keys = |current: &secrecy::SecretString, previous: &[secrecy::SecretString]| {
        let (current, previous) = (current.clone(), previous.to_vec());
        move |cfg: &mut magnum_capi::config::Config| {
            cfg.operations.seal_key = Some(current);
            cfg.operations.previous_seal_keys = previous;
        }
    };
    // Replica A seals with the old key and runs no worker.
    let a = capi_app_on(None, None, true, |cfg| {
        with_keys(&old, &[])(cfg);
        cfg.operations.worker_enabled = false;
    })
    .await;
    let (url, sim) = (a.t.url.clone(), a.sim.clone());
    let token = keystone().token("alice", "alpha").await;
    let create = |name: &'static str| {
        let (t, token) = (&a.t, token.clone());
        async move {
            let r = call(
                t,
                &token,
                "POST",
                "/v1/clustertemplates",
                "latest",
                Some(json!({
                "name": name, "image_id": IMAGE_UBUNTU_KUBE, "coe": "kubernetes",
                "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                "keypair_id": KEYPAIR_DEFAULT, "external_network_id": NETWORK_PUBLIC,
                "labels": {"kube_tag": "v1.30.4"}})),
            )
            .await;
            assert_eq!(r.status, 201, "{}", r.body);
            let r = call(
                t,
                &token,
                "POST",
                "/v1/clusters",
                "latest",
                Some(json!({"name": name, "cluster_template_id": r.body["uuid"]})),
            )
            .await;
            assert_eq!(r.status, 202, "{}", r.body);
            r.body["uuid"].as_str().unwrap().to_string()
        }
    };
    let operation = |c: String| {
        let pool = a.t.state.pool.clone();
        async move {
            sqlx::query_as::<_, (String, i32, Option<String>)>(
                "SELECT state, attempts, last_error FROM operation
                  WHERE cluster_uuid = $1::uuid AND kind = 'cluster_create'",
            )
            .bind(c)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let first = create("sealed-old").await;

    // Replica B holds only the new key: it hands the create back, counting no attempt.
    let b = capi_app_on(
        Some(url.clone()),
        Some(sim.clone()),
        true,
        with_keys(&new, &[]),
    )
    .await;
    let (state, attempts, error) = until("replica B to hand the create back", || async {
        let row = operation(first.clone()).await;
        row.2
            .as_deref()
            .is_some_and(|e| e.contains("which this replica does not hold"))
            .then_some(row)
    })
    .await;
    assert_eq!((state.as_str(), attempts), ("pending", 0), "{error:?}");
    let shown = get_cluster(&a.t, &token, &first).await;
    assert_eq!(shown.body["status"], "CREATE_IN_PROGRESS", "{}", shown.body);
    drop(b);

    // Replica C has the rotated ring: it opens what the old key sealed.
    let c = capi_app_on(
        Some(url.clone()),
        Some(sim.clone()),
        true,
        with_keys(&new, std::slice::from_ref(&old)),
    )
    .await;
    c.t.wait_cluster_token(&token, &first, "CREATE_COMPLETE")
        .await;
    drop(c);

    // Nobody holds the key and the wait is over: the create fails, saying which key.
    let second = create("sealed-old-2").await;
    let d = capi_app_on(Some(url), Some(sim), true, |cfg| {
        with_keys(&other, &[])(cfg);
        cfg.operations.unseal_wait_secs = 0;
    })
    .await;
    let failed =
        d.t.wait_cluster_token(&token, &second, "CREATE_FAILED")
            .await;
    let reason = failed.body["status_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no replica opened it"), "{}", failed.body);
    let (state, _, _) = operation(second).await;
    assert_eq!(state, "failed");
}
