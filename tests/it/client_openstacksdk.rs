//! openstacksdk 4.22.0 (`conn.container_infrastructure_management`, out of the Keystone
//! virtualenv) unchanged against the service with the Cluster API driver on the simulated
//! management cluster, real Keystone password auth and the catalog's `container-infra` endpoint.
//! `tests/fixtures/sdk/flow.py` makes the SDK's own calls (templates: create, get, find, list
//! with and without `limit`, update through `commit`'s JSON patch, delete; clusters: create,
//! `wait_for_status`, get by name, find, list, delete, `wait_for_delete`; the CA and a signed CSR;
//! `services()` as an admin and as a member) and prints one JSON document of what it saw.
//!
//! What the SDK does differently from python-magnumclient: it sends no `OpenStack-API-Version`
//! header, so everything runs at the minimum microversion 1.1 (the 1.1 views, `stack_id`
//! included); it follows `next` links; it updates with a JSON patch computed by `jsonpatch`
//! (nested paths like `/labels/sdk`); its `Cluster.status_reason` reads the body's `reason`
//! (a key Magnum never sends), so it is always None and not asserted here; a resource fetched
//! or found by name keeps the name as its `id`; `Cluster.resize`/`upgrade` need 1.7/1.8 and so
//! answer 406 unless the caller sets a microversion (as against Magnum).

use std::time::Instant;

use crate::common::capi::{capi_app_on, objects};
use crate::common::fakecloud::{IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT, NETWORK_PUBLIC};
use crate::common::keystone::{ADMIN_PROJECT, ADMIN_USER, REGION, password};
use crate::common::osc::python_json;
use crate::common::stack::{env_exclusive, parts, serve_as_endpoint};

use magnum_capi::capi::pki;
use serde_json::{Value, json};

const FLOW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sdk/flow.py");
const CSR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/csr/rsa2048.csr"
);
const HOST: &str = "sdk-test-host";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstacksdk_container_infrastructure_management_works_against_the_service() {
    let t0 = Instant::now();
    let _env = env_exclusive().await;
    let (ks, _) = parts().await;
    // One heartbeat only, so `report_count` is known.
    let app = capi_app_on(None, None, true, |cfg| {
        cfg.service.report_interval_secs = 3600
    })
    .await;
    let t = &app.t;
    let (hb_stop, hb_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(magnum_capi::worker::heartbeat(
        t.state.clone(),
        HOST.into(),
        hb_rx,
    ));
    let server = serve_as_endpoint(&t.state).await;
    let endpoint = ks.endpoint_url().unwrap();
    eprintln!("setup done in {:.1?}", t0.elapsed());

    let cfg = json!({
        "auth_url": ks.url, "region": REGION,
        "user": {"username": "alice", "password": password("alice"), "project": "alpha"},
        "admin": {"username": ADMIN_USER, "password": password(ADMIN_USER),
                  "project": ADMIN_PROJECT},
        "image": IMAGE_UBUNTU_KUBE, "kube_tag": "v1.30.4", "keypair": KEYPAIR_DEFAULT,
        "external_network": NETWORK_PUBLIC, "csr": CSR,
    });
    let seen = python_json(ks, FLOW, &[("SDK_FLOW_CONFIG", &cfg.to_string())]).await;
    let ctx = serde_json::to_string_pretty(&seen).unwrap();
    let alpha = ks.project_id("alpha");

    // Password auth through Keystone's catalog, no microversion header: 1.1 is answered.
    assert_eq!(seen["endpoint"], endpoint.as_str(), "{ctx}");
    assert_eq!(
        seen["microversion_answered"], "container-infrastructure-management 1.1",
        "{ctx}"
    );

    // Templates.
    let ct = seen["template_created"]["id"].as_str().unwrap().to_string();
    uuid::Uuid::parse_str(&ct).unwrap();
    let template = json!({
        "id": ct, "name": "sdk-ct", "coe": "kubernetes", "image_id": IMAGE_UBUNTU_KUBE,
        "external_network_id": NETWORK_PUBLIC, "flavor_id": "m1.small",
        "master_flavor_id": "m1.medium", "keypair_id": KEYPAIR_DEFAULT,
        "labels": {"kube_tag": "v1.30.4"}, "docker_volume_size": null,
        "network_driver": "calico", "cluster_distro": "ubuntu", "is_public": false,
        "is_hidden": false, "is_tls_disabled": false, "server_type": "vm",
    });
    assert_eq!(seen["template_created"], template, "{ctx}");
    assert_eq!(seen["template_got"], template, "{ctx}");
    // `find` by name: the GET by name answers (Magnum resolves names in the path); the SDK
    // keeps the name it asked for as the resource's `id` (the body has `uuid`, not `id`).
    assert_eq!(seen["template_found_by_name"], "sdk-ct", "{ctx}");
    assert_eq!(seen["template_find_missing"], Value::Null, "{ctx}");
    assert_eq!(
        seen["template_find_missing_error"]["type"], "NotFoundException",
        "{ctx}"
    );
    assert_eq!(
        seen["templates_listed"],
        json!(["sdk-ct", "sdk-other"]),
        "{ctx}"
    );
    // limit=1: two pages and a third, empty one through the `next` links.
    assert_eq!(
        seen["templates_paged"],
        json!(["sdk-ct", "sdk-other"]),
        "{ctx}"
    );
    let updated = json!({"docker_volume_size": 15,
                         "labels": {"kube_tag": "v1.30.4", "sdk": "yes"}});
    assert_eq!(
        seen["template_updated"],
        json!({"id": ct, "docker_volume_size": 15,
               "labels": {"kube_tag": "v1.30.4", "sdk": "yes"}}),
        "{ctx}"
    );
    assert_eq!(seen["template_after_update"], updated, "{ctx}");
    assert_eq!(
        seen["template_deleted_get"],
        json!({"type": "NotFoundException", "status": 404, "details": "Not Found"}),
        "{ctx}"
    );
    assert_eq!(
        seen["template_delete_missing_ignored"],
        Value::Null,
        "{ctx}"
    );

    // Clusters.
    let c = seen["cluster_created_id"].as_str().unwrap().to_string();
    let uuid = uuid::Uuid::parse_str(&c).unwrap();
    assert_eq!(seen["cluster_listed_early"], json!([["sdk-c", c]]), "{ctx}");
    let stack_id = magnum_capi::capi::capi_name(uuid);
    assert_eq!(
        seen["cluster_complete"],
        json!({"id": c, "name": "sdk-c", "status": "CREATE_COMPLETE",
               "cluster_template_id": ct, "node_count": 1, "master_count": 1,
               "keypair": KEYPAIR_DEFAULT, "create_timeout": 60, "stack_id": stack_id,
               "coe_version": "v1.30.4", "project_id": alpha,
               "labels": {"kube_tag": "v1.30.4", "sdk": "yes"},
               "flavor_id": "m1.small", "master_flavor_id": "m1.medium"}),
        "{ctx}"
    );
    assert!(
        seen["cluster_api_address"]
            .as_str()
            .is_some_and(|a| a.starts_with("https://")),
        "{ctx}"
    );
    assert_eq!(
        seen["cluster_got_by_name"],
        json!({"id": "sdk-c", "status": "CREATE_COMPLETE"}),
        "{ctx}"
    );
    assert_eq!(seen["cluster_found"], "sdk-c", "{ctx}");
    assert_eq!(
        seen["clusters_listed"],
        json!([{"id": c, "name": "sdk-c", "status": "CREATE_COMPLETE", "stack_id": stack_id}]),
        "{ctx}"
    );

    // Certificates: the CA, and the CSR signed by it with its subject.
    let ca = seen["ca"]["pem"].as_str().unwrap();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ctx}");
    assert_eq!(seen["ca"]["cluster_uuid"], c.as_str(), "{ctx}");
    assert_eq!(seen["ca"]["bay_uuid"], Value::Null, "{ctx}");
    assert_eq!(seen["signed"]["cluster_uuid"], c.as_str(), "{ctx}");
    assert_eq!(seen["signed_csr_echoed"], true, "{ctx}");
    let cert = seen["signed"]["pem"].as_str().unwrap();
    assert!(pki::verifies(cert, ca), "not signed by the CA: {ctx}");
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
    assert_eq!(
        pem.parse_x509().unwrap().subject().to_string(),
        "O=system:masters, CN=admin"
    );

    // `Cluster.resize`/`upgrade` send no microversion either: 406 below 1.7/1.8, as Magnum
    // (an SDK user must pass a microversion; nothing changed).
    let not_acceptable =
        json!({"type": "HttpException", "status": 406, "details": "Not Acceptable"});
    assert_eq!(seen["resize_at_1_1"], not_acceptable, "{ctx}");
    assert_eq!(seen["upgrade_at_1_1"], not_acceptable, "{ctx}");
    assert_eq!(seen["status_after_actions"], "CREATE_COMPLETE", "{ctx}");

    // Delete: the SDK's wait_for_delete saw the 404.
    assert_eq!(
        seen["cluster_deleted_get"],
        json!({"type": "NotFoundException", "status": 404, "details": "Not Found"}),
        "{ctx}"
    );
    assert_eq!(seen["templates_left"], json!([]), "{ctx}");

    // Services: the heartbeat's conductor for the admin; a member may not list them.
    assert_eq!(
        seen["services"],
        json!([{"binary": "magnum-conductor", "host": HOST, "state": "up",
                "disabled_reason": null, "report_count": 1}]),
        "{ctx}"
    );
    assert_eq!(
        seen["services_as_member"],
        json!({"type": "ForbiddenException", "status": 403, "details": "Forbidden"}),
        "{ctx}"
    );

    // The service's side: nothing left in Postgres or on the management cluster.
    for table in ["cluster", "cluster_template", "nodegroup"] {
        assert_eq!(
            t.sql_i64(&format!("SELECT count(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
    for (av, kind) in [
        ("cluster.x-k8s.io/v1beta2", "Cluster"),
        ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        ("v1", "Secret"),
    ] {
        assert!(objects(&app, av, kind, &c).is_empty(), "{kind} left behind");
    }

    let _ = hb_stop.send(true);
    server.abort();
    drop(app);
    eprintln!("client_openstacksdk finished in {:.1?}", t0.elapsed());
}
