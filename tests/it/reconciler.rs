//! The driver as a reconciler: long operations are steps that hold no worker while the
//! management cluster works, so deletes that take long never hold up a create. The service as
//! `serve --dev` runs it (API, two workers, watchers, status writer, the CAPI driver on the
//! simulated management cluster), in process so the test can hold machines in deletion.

use crate::common::ALICE;
use crate::common::capi::{CapiApp, capi_app_on, template};

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;

/// Simulated Cluster API step: slow enough that a create takes seconds of simulated work, so
/// that work, not the machine's load, decides the times compared below.
const STEP_MS: u64 = 200;

/// A finalizer of the test's that keeps machines deleting, like a cloud slow to delete servers.
const HOLD: &str = "test.magnum-capi/hold";

fn machines(app: &CapiApp) -> Api<DynamicObject> {
    Api::all_with(app.sim.client(), &machines_resource())
}

/// Sets (or clears) the test's finalizer on every machine of `cluster`; how many.
async fn hold_machines(app: &CapiApp, cluster: &str, hold: bool) -> usize {
    let api = machines(app);
    let sel = format!("magnum.openstack.org/cluster-uuid={cluster}");
    let list = api.list(&ListParams::default().labels(&sel)).await.unwrap();
    let finalizers = if hold { json!([HOLD]) } else { json!([]) };
    for m in &list.items {
        let ns = m.metadata.namespace.clone().unwrap();
        let name = m.metadata.name.clone().unwrap();
        Api::<DynamicObject>::namespaced_with(app.sim.client(), &ns, &machines_resource())
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
            )
            .await
            .unwrap();
    }
    list.items.len()
}

/// Creates clusters `{name}-0..2` one after the other: the fastest one's time to
/// `CREATE_COMPLETE` (machine load only ever adds time, so the fastest is the work itself).
async fn fastest_create(t: &crate::common::TestApp, template: &str, name: &str) -> Duration {
    let mut fastest = Duration::MAX;
    for i in 0..3 {
        let t0 = Instant::now();
        let c = t.cluster(&ALICE, &format!("{name}-{i}"), template).await;
        t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
        fastest = fastest.min(t0.elapsed());
    }
    fastest
}

fn machines_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Machine",
    ))
}

#[tokio::test]
async fn deletes_waiting_for_the_management_cluster_do_not_delay_a_create() {
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.operations.concurrency = 2;
        cfg.capi.sim_step_ms = STEP_MS;
    })
    .await;
    let t = &app.t;
    let ct = template(t, "ct", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;

    let mut doomed = Vec::new();
    for i in 0..8 {
        doomed.push(t.cluster(&ALICE, &format!("doomed-{i}"), &ct).await);
    }
    for c in &doomed {
        t.wait_cluster(&ALICE, c, "CREATE_COMPLETE").await;
        assert!(
            hold_machines(&app, c, true).await > 0,
            "{c} has no machines"
        );
    }

    // The same create on an idle service: the fastest of three, so a moment of load on the
    // machine does not decide the comparison.
    let on_idle = fastest_create(t, &ct, "idle").await;

    // Eight deletes whose machines do not go away, on two workers; then the create.
    for c in &doomed {
        t.delete(&ALICE, &format!("/v1/clusters/{c}"))
            .await
            .assert_status(204);
    }
    let beside_deletes = fastest_create(t, &ct, "busy").await;
    eprintln!(
        "fastest of three creates on an idle service: {on_idle:?}; beside 8 held deletes: {beside_deletes:?}"
    );
    for c in &doomed {
        let r = t.get(&ALICE, &format!("/v1/clusters/{c}")).await;
        assert_eq!(r.body["status"], "DELETE_IN_PROGRESS", "{}", r.body);
        assert!(
            r.body["status_reason"]
                .as_str()
                .unwrap_or_default()
                .contains("Machines"),
            "the delete shows what it waits for: {}",
            r.body
        );
    }
    assert!(
        beside_deletes.as_secs_f64() <= on_idle.as_secs_f64() * 1.5,
        "a create took {beside_deletes:?} beside 8 deletes, {on_idle:?} on an idle service"
    );

    // Released, every delete finishes (woken by the machines going, not by a timer).
    for c in &doomed {
        hold_machines(&app, c, false).await;
    }
    for c in &doomed {
        t.wait_cluster(&ALICE, c, "GONE").await;
    }
}
