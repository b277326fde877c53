//! Horizon's Magnum panels (magnum-ui): its REST layer drives python-magnumclient 5.0.0 as a
//! library at microversion 1.10 with every create attribute `str()`-ed and form diffs as JSON
//! patches. `tests/fixtures/horizon/flow.py` replays those calls against the service (CAPI
//! driver on the simulated management cluster, real Keystone tokens, the catalog's endpoint);
//! this test checks what it saw. What magnum-ui needs beyond the client (Heat for the resize
//! dialog's node list) is in docs/clients.md's client table. The dialogs a browser reaches with
//! Horizon's defaults (template wizard, cluster create, resize, the deletes) run for real in
//! `client_horizon_browser.rs`; this replay keeps what that flow does not click: every form
//! field `str()`-ed, template edits, the cluster config download, upgrade, CA rotation, the
//! old update form and the admin's quotas.

use crate::common::pick;

use crate::common::capi::capi_app_on;
use crate::common::fakecloud::*;
use crate::common::keystone::keystone;
use crate::common::osc::python_json;
use crate::common::stack::{cloud, env_exclusive, serve_as_endpoint};
use magnum_capi::capi::pki;
use serde_json::{Value, json};

const KUBE_NEXT: &str = "v1.31.2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn horizon_panels_work_through_python_magnumclient_at_1_10() {
    let _env = env_exclusive().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let ks = keystone();
    let next_image = cloud().add_image(json!({
        "name": format!("ubuntu-2204-kube-{KUBE_NEXT}"), "os_distro": "ubuntu",
        "os_version": "22.04", "kube_version": KUBE_NEXT}));
    let server = serve_as_endpoint(&app.t.state).await;
    let token = ks.token("alice", "alpha").await;
    let admin = ks.admin_token().await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/horizon/flow.py"
    );
    let url = ks.endpoint_url().unwrap();
    let v = python_json(
        ks,
        script,
        &[
            ("MAGNUM_URL", url.as_str()),
            ("TOKEN", token.as_str()),
            ("ADMIN_TOKEN", admin.as_str()),
            ("QUOTA_PROJECT", ks.project_id("beta")),
            ("IMAGE", IMAGE_UBUNTU_KUBE),
            ("IMAGE_NEXT", next_image.as_str()),
            ("KUBE_TAG", "v1.30.4"),
            ("KUBE_TAG_NEXT", KUBE_NEXT),
            ("FLAVOR", "m1.small"),
            ("MASTER_FLAVOR", "m1.medium"),
            ("KEYPAIR", KEYPAIR_DEFAULT),
            ("EXTERNAL_NETWORK", "public"),
        ],
    )
    .await;
    server.abort();

    // The template form's strings became typed attributes; labels stay strings.
    let ct = &v["template_created"];
    assert_eq!(ct["docker_volume_size"], 10, "{ct}");
    assert_eq!(ct["public"], false);
    assert_eq!(ct["tls_disabled"], false);
    assert_eq!(ct["master_lb_enabled"], true);
    assert_eq!(ct["floating_ip_enabled"], false);
    assert_eq!(ct["image_id"], IMAGE_UBUNTU_KUBE);
    assert_eq!(ct["external_network_id"], "public");
    assert_eq!(ct["http_proxy"], "http://proxy.example:3128");
    assert_eq!(
        ct["labels"],
        json!({"kube_tag": "v1.30.4", "monitoring_enabled": "true"})
    );
    // The edit: labels as a Python literal, a boolean as "False", an emptied field removed.
    let ops = v["template_patch"].as_array().unwrap();
    assert!(
        ops.iter()
            .any(|o| o["path"] == "/labels" && o["value"].as_str().unwrap().starts_with("{'")),
        "{ops:?}"
    );
    assert!(
        ops.contains(&json!({"op": "replace", "path": "/master_lb_enabled", "value": "False"}))
    );
    assert!(ops.contains(&json!({"op": "remove", "path": "/http_proxy"})));
    let ct = &v["template_updated"];
    assert_eq!(
        ct["labels"],
        json!({"kube_tag": "v1.30.4", "auto_healing_enabled": "false"})
    );
    assert_eq!(ct["master_lb_enabled"], false);
    assert_eq!(ct["http_proxy"], Value::Null);
    assert!(v["template_list"].as_array().unwrap().contains(&ct["uuid"]));

    // Create → complete; 1.10 views carry stack_id (cluster_id only from 1.13).
    let uuid = v["cluster_uuid"].as_str().unwrap();
    let created = &v["created"];
    assert_eq!(
        created["seen"],
        json!(["CREATE_IN_PROGRESS", "CREATE_COMPLETE"])
    );
    let cl = &created["cluster"];
    assert_eq!(cl["node_count"], 1);
    assert_eq!(cl["create_timeout"], 60);
    assert_eq!(cl["master_lb_enabled"], false);
    assert_eq!(cl["floating_ip_enabled"], true);
    assert_eq!(cl["keypair"], KEYPAIR_DEFAULT);
    let stack_id = cl["stack_id"].as_str().unwrap();
    assert_eq!(
        stack_id,
        magnum_capi::capi::capi_name(uuid.parse().unwrap())
    );
    assert_eq!(
        cl["labels"]["auto_healing_enabled"], "true",
        "merge_labels kept the cluster's label: {cl}"
    );
    assert_eq!(cl["labels"]["kube_tag"], "v1.30.4");
    let listed: Vec<&Value> = v["cluster_list"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["uuid"], uuid);
    assert_eq!(listed[0]["api_address"], cl["api_address"]);
    assert_eq!(v["stats"], json!({"clusters": 1, "nodes": 2}));

    // The "cluster config" download: a kubeconfig for api_address whose certificate the
    // cluster's CA signed and the (simulated) apiserver accepts.
    let cfg = &v["config"];
    let (ca, cert) = (cfg["ca"].as_str().unwrap(), cfg["cert"].as_str().unwrap());
    assert!(pki::verifies(cert, ca), "certificate not signed by the CA");
    assert!(pki::key_matches(cert, cfg["key"].as_str().unwrap()));
    let text = cfg["cluster_config"].as_str().unwrap();
    let api = cl["api_address"].as_str().unwrap();
    assert!(
        text.contains(&format!("server: {api}")),
        "kubeconfig without the api_address: {text}"
    );

    // The old update form's str()-ed node_count is a 400 (as Magnum's WSME answers it), never
    // a 500.
    let err = &v["update_with_string_count"];
    assert_eq!(err["status"], 400, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("node_count"),
        "{err}"
    );

    // Upgrade dialog and CA rotation.
    let up = &v["upgraded"]["cluster"];
    assert_ne!(up["cluster_template_id"], ct["uuid"]);
    assert_eq!(up["coe_version"], KUBE_NEXT);
    let rotated = v["ca_after_rotation"].as_str().unwrap();
    assert_ne!(rotated, ca, "the CA did not change");
    let new_cert = v["cert_after_rotation"].as_str().unwrap();
    assert!(pki::verifies(new_cert, rotated));
    // (The simulated apiserver's acceptance after a rotation is tests/capi_certificates.rs'.)
    assert!(
        !pki::verifies(cert, rotated),
        "the certificate of the old CA verifies against the new one"
    );

    // The admin's quota panel: its create form's str()-ed hard limit, then the list of all
    // projects' quotas.
    let quota = json!({"project_id": ks.project_id("beta"), "resource": "Cluster",
                       "hard_limit": 5});
    assert_eq!(
        pick(
            &v["quota_created"],
            &["project_id", "resource", "hard_limit"]
        ),
        quota
    );
    let listed: Vec<Value> = v["quotas_admin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| pick(q, &["project_id", "resource", "hard_limit"]))
        .collect();
    assert_eq!(listed, vec![quota], "{}", v["quotas_admin"]);
}
