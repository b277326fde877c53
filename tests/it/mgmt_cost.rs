//! What the service costs the management cluster, bounded: the simulated management cluster
//! counts every request it answers (`SimCluster::requests`), and these tests fail when a create,
//! resize, upgrade or delete asks more of it than stated, or when idle clusters cost it
//! anything but watches (docs/benchmarks.md "Management-cluster cost").

use crate::common::capi::{CapiApp, capi_app_on, template};
use crate::common::wait::until;
use crate::common::*;

use magnum_capi::simkube::requests::{RequestCounts, RequestKey, Verb};
use serde_json::json;

/// Management-cluster requests a create may cost, the reachability probe aside. Measured 32: 17
/// server-side applies (the objects, 4 CAs and the credential Secret), 12 LISTs by the
/// cluster's label (what the apply prunes), 3 GETs; the rest is headroom (a conflict retried).
const CREATE_BOUND: u64 = 40;
/// Same for a resize: measured 25 (the cluster's objects re-applied, 12 prune LISTs, 1 GET).
const RESIZE_BOUND: u64 = 32;
/// Same for an upgrade: measured 44 (as a resize, plus the 2 superseded machine templates
/// deleted, plus its staged runs: per run the add-ons' proxies and the autoscaler LISTed, and
/// the add-ons of each stage applied; the encryption Secret is no longer read at each run).
const UPGRADE_BOUND: u64 = 56;
/// Same for a delete: measured 17 (the Cluster, the ClusterResourceSet and 6 Secrets deleted,
/// 11 LISTs of what is left).
const DELETE_BOUND: u64 = 24;

/// The reachability probe (`GET /version` every `[capi] probe_interval_secs`): a cost per
/// management cluster, not per cluster, counted apart.
fn is_probe(k: &RequestKey) -> bool {
    k.verb == Verb::Discovery && k.resource == "/version"
}

/// Requests an operation made, the probe aside.
fn operation_cost(counts: &RequestCounts) -> u64 {
    counts.count(|k| !is_probe(k))
}

/// Waits for `n` more reachability probes than `from` saw: a window measured in the service's
/// own periodic work rather than in seconds.
async fn probes(app: &CapiApp, from: &RequestCounts, n: u64) -> RequestCounts {
    until(&format!("{n} reachability probes"), || async {
        let now = app.sim.requests();
        (now.since(from).count(is_probe) >= n).then_some(now)
    })
    .await
}

/// Waits for cluster `c` to reach `status`, then for the operation's follow-ups (superseded
/// templates collected after an upgrade) to land: two more probe periods. The counts then.
async fn completed(app: &CapiApp, c: &str, status: &str) -> RequestCounts {
    app.t.wait_cluster(&ALICE, c, status).await;
    probes(app, &app.sim.requests(), 2).await
}

#[tokio::test]
async fn operations_cost_a_bounded_number_of_requests_and_idle_clusters_only_watches() {
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.capi.probe_interval_secs = 1;
    })
    .await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let ct2 = template(t, "k134", "ubuntu-2404-kube-v1.34.1", "v1.34.1").await;
    // A quiet baseline: start-up (discovery, the watches' first lists) is over.
    let quiet = probes(&app, &app.sim.requests(), 2).await;

    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c1", "cluster_template_id": ct, "master_count": 1, "node_count": 2}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    let created = completed(&app, &c, "CREATE_COMPLETE").await;
    let create = created.since(&quiet);
    println!("create: {} requests: {create}", operation_cost(&create));

    // Idle: the window is five of the service's probe periods; nothing but the probe and
    // watches may ask the management cluster anything (statuses come from the watches).
    let idle_to = probes(&app, &created, 5).await;
    let idle = idle_to.since(&created);
    println!("idle (5 probe periods): {idle}");
    assert_eq!(
        idle.count(|k| k.verb != Verb::Watch && !is_probe(k)),
        0,
        "an idle cluster was polled: {idle}"
    );

    let r = t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/actions/resize"),
            "1.7",
            json!({"node_count": 1}),
        )
        .await;
    r.assert_status(202);
    let resized = completed(&app, &c, "UPDATE_COMPLETE").await;
    let resize = resized.since(&idle_to);
    println!("resize: {} requests: {resize}", operation_cost(&resize));

    let r = t
        .post_v(
            &ALICE,
            &format!("/v1/clusters/{c}/actions/upgrade"),
            "1.8",
            json!({"cluster_template": ct2}),
        )
        .await;
    r.assert_status(202);
    let upgraded = completed(&app, &c, "UPDATE_COMPLETE").await;
    let upgrade = upgraded.since(&resized);
    println!("upgrade: {} requests: {upgrade}", operation_cost(&upgrade));

    let r = t.delete(&ALICE, &format!("/v1/clusters/{c}")).await;
    r.assert_status(204);
    let deleted = completed(&app, &c, "GONE").await;
    let delete = deleted.since(&upgraded);
    println!("delete: {} requests: {delete}", operation_cost(&delete));

    // The cluster encrypts Secrets at rest for good once its Secret is written: the renders of
    // a resize and of every run of an upgrade do not read it again (the real roll's runs read
    // it 83 times an upgrade when they did).
    for (what, counts) in [("resize", &resize), ("upgrade", &upgrade)] {
        let secret_reads = counts.count(|k| k.verb == Verb::Get && k.resource == "secrets");
        assert_eq!(secret_reads, 0, "a {what} read Secrets: {counts}");
    }
    for (what, counts, bound) in [
        ("create", &create, CREATE_BOUND),
        ("resize", &resize, RESIZE_BOUND),
        ("upgrade", &upgrade, UPGRADE_BOUND),
        ("delete", &delete, DELETE_BOUND),
    ] {
        assert!(
            operation_cost(counts) <= bound,
            "a {what} cost {} management-cluster requests (bound {bound}): {counts}",
            operation_cost(counts)
        );
    }
}
