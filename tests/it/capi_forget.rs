//! `magnum-capi cluster forget` (the real binary, against the test's PostgreSQL and simulated
//! management cluster): it says what a cluster leaves in its tenant project, refuses a cluster
//! that is not being deleted unless forced, and with `--yes` removes the cluster's records and
//! its objects on the management cluster (their finalizers dropped).

use std::path::{Path, PathBuf};

use crate::common::capi::{capi_app_on, kubeconfig, objects, template};
use crate::common::capi_drivers::{Driver, TENANT, imported_cluster, load_driver_objects};
use crate::common::*;

use serde_json::json;

/// The command's configuration: the test's database and management cluster.
fn config(dir: &Path, db_url: &str, sim_url: &str) -> PathBuf {
    let path = dir.join("forget.toml");
    std::fs::write(
        &path,
        format!(
            "[database]\nurl = {db_url:?}\n[capi]\nkubeconfig = {:?}\n",
            kubeconfig(dir, "mgmt", sim_url)
        ),
    )
    .unwrap();
    path
}

/// Runs `cluster forget <uuid> <args>`: whether it succeeded, and what it printed.
async fn forget(config: &Path, uuid: &str, args: &[&str]) -> (bool, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_magnum-capi"));
    cmd.args(["cluster", "forget", uuid, "--config"])
        .arg(config)
        .args(args)
        .env_remove("MAGNUM_CAPI_CONFIG")
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1")
        .env("USER", "ops-tester");
    // Off this runtime's thread: the simulated management cluster answers on it.
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let text = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every object of the cluster on the management cluster, as `Kind/name`.
fn cluster_objects(app: &crate::common::capi::CapiApp, uuid: &str) -> Vec<String> {
    magnum_capi::capi::kinds::ALL
        .iter()
        .flat_map(|(av, kind)| {
            objects(app, av, kind, uuid)
                .into_iter()
                .map(move |o| format!("{kind}/{}", o["metadata"]["name"]))
        })
        .collect()
}

#[tokio::test]
async fn forget_finishes_a_stuck_delete_after_saying_what_is_left() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &t.url, app.sim.url());
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let create = |name: &'static str| {
        let ct = ct.clone();
        async move {
            let r = t
                .post(
                    &ALICE,
                    "/v1/clusters",
                    json!({"name": name, "cluster_template_id": ct, "master_count": 1,
                           "node_count": 1}),
                )
                .await;
            r.assert_status(202);
            let c = r.body["uuid"].as_str().unwrap().to_string();
            t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await.body
        }
    };
    let body = create("stuck").await;
    let c = body["uuid"].as_str().unwrap().to_string();
    let stack = body["stack_id"].as_str().unwrap().to_string();

    // Not being deleted: refused, even with --yes.
    let (ok, out) = forget(&config, &c, &["--yes"]).await;
    assert!(!ok, "{out}");
    assert!(out.contains("refused: cluster"), "{out}");
    assert!(out.contains("is CREATE_COMPLETE"), "{out}");
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;

    // The delete cannot finish: the management cluster's controllers stop.
    app.sim.pause();
    t.delete(&ALICE, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(204);
    t.wait_cluster(&ALICE, &c, "DELETE_IN_PROGRESS").await;

    // Without --yes: what would be left, and nothing done.
    let (ok, out) = forget(&config, &c, &[]).await;
    assert!(ok, "{out}");
    assert!(out.contains("DELETE_IN_PROGRESS"), "{out}");
    assert!(out.contains("nothing in the cloud is deleted"), "{out}");
    assert!(out.contains("Nova server of machine"), "{out}");
    assert!(out.contains(&format!("kube_service_{stack}_")), "{out}");
    assert!(
        out.contains(&format!("cinder.csi.openstack.org/cluster={stack}")),
        "{out}"
    );
    assert!(out.contains("nothing done"), "{out}");
    t.wait_cluster(&ALICE, &c, "DELETE_IN_PROGRESS").await;
    assert!(!cluster_objects(&app, &c).is_empty());

    // --yes: the records and the objects go.
    let (ok, out) = forget(&config, &c, &["--yes"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("forgotten: its records are removed"), "{out}");
    assert!(!out.contains("not removed"), "{out}");
    t.wait_cluster(&ALICE, &c, "GONE").await;
    assert_eq!(cluster_objects(&app, &c), Vec::<String>::new());
    // The audit line names the cluster and what was left.
    assert!(out.contains("audit=\"cluster.forget\""), "{out}");
    assert!(out.contains("operator=\"ops-tester\""), "{out}");
    app.sim.resume();

    // A cluster that is not being deleted: forgotten with --force.
    let body = create("forced").await;
    let c = body["uuid"].as_str().unwrap().to_string();
    let (ok, out) = forget(&config, &c, &["--yes", "--force"]).await;
    assert!(ok, "{out}");
    t.wait_cluster(&ALICE, &c, "GONE").await;
    assert_eq!(cluster_objects(&app, &c), Vec::<String>::new());
}

#[tokio::test]
async fn forgetting_an_imported_cluster_removes_its_records_and_touches_no_object_of_its_driver() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &t.url, app.sim.url());
    let stack = "live-0a1b2c3d4e5f";
    let c = imported_cluster(t, 9, Driver::CapiHelm, stack, &TENANT).await;
    // What magnum-capi-helm left on this (shared) management cluster: its namespace is the one
    // this driver uses for the project, its Secrets carry the same cluster-uuid label.
    app.sim.pause();
    let ca = magnum_capi::capi::pki::generate_ca("kubernetes").unwrap();
    load_driver_objects(&app.sim, Driver::CapiHelm, &c, stack, TENANT.project, &ca);
    let ns = Driver::CapiHelm.namespace(TENANT.project);
    assert_eq!(ns, magnum_capi::capi::namespace("magnum", TENANT.project));
    let before = cluster_objects(&app, &c);
    assert!(
        before.contains(&format!("Secret/\"{stack}-ca\"")),
        "{before:?}"
    );

    let (ok, out) = forget(&config, &c, &["--yes", "--force"]).await;
    assert!(ok, "{out}");
    assert!(
        out.contains("imported read-only from Magnum: forgetting it removes its records only"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "everything k8s_capi_helm_v1 made for it in Magnum (stack_id {stack})"
        )),
        "{out}"
    );
    assert!(out.contains("0 objects removed"), "{out}");
    t.wait_cluster(&TENANT, &c, "GONE").await;
    assert_eq!(cluster_objects(&app, &c), before);
    assert!(
        app.sim
            .store()
            .get(
                &magnum_capi::simkube::Resource::of("cluster.x-k8s.io/v1beta1", "Cluster"),
                &ns,
                stack
            )
            .is_some()
    );
    app.sim.resume();
}
