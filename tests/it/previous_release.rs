//! Rollback to the previous release, for real: the previous release's binary (the tag named in
//! `.ci/previous-release`, built from this repository's history) serves a database migrated by
//! this build — reads what this build wrote, creates, resizes and deletes — and runs beside this
//! build on it as during a rolling upgrade, each seeing the other's writes.
//!
//! v0.1.0 predates every migration from `stored_cluster_views` to `slimmer_creates`: it meets the
//! stored cluster and template views and their triggers, the view versions from a sequence, the
//! per-project cluster count and quota-check function, `cluster_heads`, the statement-level
//! cluster and nodegroup triggers (the row triggers they replaced are gone), and the create
//! functions planned once per connection — none of which it knows.

use crate::common::served::{Server, WORKER_ON, previous_release};
use crate::common::wait::until;
use crate::common::*;

use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

/// A cluster's show as one server answers it (status 200 asserted).
async fn show(server: &Server, c: Uuid) -> Value {
    let (st, body) = server
        .call(Method::GET, &format!("/v1/clusters/{c}"), None)
        .await;
    assert_eq!(st, 200, "{body}");
    body
}

/// Resizes `c` to `nodes` workers through `server` and waits for UPDATE_COMPLETE there.
async fn resize(server: &Server, c: Uuid, nodes: u64) {
    let (st, body) = server
        .call(
            Method::PATCH,
            &format!("/v1/clusters/{c}"),
            Some(json!([{"op": "replace", "path": "/node_count", "value": nodes}])),
        )
        .await;
    assert_eq!(st, 202, "{body}");
    let (_, done) = server.wait_status(c, "UPDATE_COMPLETE").await;
    assert_eq!(done["node_count"], nodes, "{done}");
}

/// The fields a tenant's client reads of a cluster, as `server` answers them.
async fn seen(server: &Server, c: Uuid) -> Value {
    let body = show(server, c).await;
    json!({
        "name": body["name"], "status": body["status"], "node_count": body["node_count"],
        "master_count": body["master_count"], "cluster_template_id": body["cluster_template_id"],
        "labels": body["labels"], "project_id": body["project_id"],
    })
}

/// Waits until `server` answers `c` as `want` (the servers learn each other's writes through
/// PostgreSQL's notifications).
async fn until_seen(server: &Server, c: Uuid, want: &Value) {
    until(
        &format!("cluster {c} as the other release wrote it"),
        || async {
            let got = seen(server, c).await;
            (&got == want).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_serves_this_releases_database_and_runs_beside_it() {
    let previous = tokio::task::spawn_blocking(previous_release)
        .await
        .expect("building the previous release");
    let url = fresh_database().await;

    // This release writes first: a template and a cluster, resized (stored views, statement
    // triggers, the create functions all in play).
    let current = Server::start(&url, &[WORKER_ON]).await;
    let ours = current.create_cluster().await;
    current.wait_status(ours, "CREATE_COMPLETE").await;
    resize(&current, ours, 2).await;
    let before = seen(&current, ours).await;
    current.kill();

    // Rolled back: the previous release starts on this schema (migrations it does not know are
    // ignored), is ready, and reads what this release wrote.
    let old = Server::start_binary(previous, &url, &[WORKER_ON]).await;
    let (st, ready) = old.call(Method::GET, "/readyz", None).await;
    assert_eq!(st, 200, "{ready}");
    assert_eq!(seen(&old, ours).await, before);
    let (st, ngs) = old
        .call(
            Method::GET,
            &format!("/v1/clusters/{ours}/nodegroups"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{ngs}");
    let counts: Vec<_> = ngs["nodegroups"]
        .as_array()
        .expect("nodegroups")
        .iter()
        .map(|n| (n["role"].clone(), n["node_count"].clone()))
        .collect();
    assert!(counts.contains(&(json!("worker"), json!(2))), "{ngs}");

    // Its own life of a cluster on this schema: create, resize, and a delete of this release's.
    let theirs = old.create_cluster().await;
    old.wait_status(theirs, "CREATE_COMPLETE").await;
    resize(&old, theirs, 3).await;
    resize(&old, ours, 1).await;
    let (st, body) = old
        .call(Method::DELETE, &format!("/v1/clusters/{ours}"), None)
        .await;
    assert_eq!(st, 204, "{body}");
    until("the previous release to finish its delete", || async {
        let (st, _) = old
            .call(Method::GET, &format!("/v1/clusters/{ours}"), None)
            .await;
        (st == 404).then_some(())
    })
    .await;

    // Rolled forward while the previous release still runs (a rolling upgrade): this release
    // answers what the previous one wrote — from its stored views, which the previous release
    // never heard of — and each sees the other's next write.
    let current = Server::start(&url, &[WORKER_ON]).await;
    let (st, _) = current
        .call(Method::GET, &format!("/v1/clusters/{ours}"), None)
        .await;
    assert_eq!(st, 404, "the cluster the previous release deleted");
    assert_eq!(seen(&current, theirs).await, seen(&old, theirs).await);
    let (st, list) = current.call(Method::GET, "/v1/clusters", None).await;
    assert_eq!(st, 200, "{list}");
    let uuids: Vec<_> = list["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .map(|c| c["uuid"].clone())
        .collect();
    assert_eq!(uuids, vec![json!(theirs.to_string())], "{list}");

    resize(&current, theirs, 1).await;
    until_seen(&old, theirs, &seen(&current, theirs).await).await;
    resize(&old, theirs, 2).await;
    until_seen(&current, theirs, &seen(&old, theirs).await).await;

    // A template renamed by the previous release is renamed in this one's answers.
    let template = show(&current, theirs).await["cluster_template_id"]
        .as_str()
        .expect("template id")
        .to_string();
    let (st, body) = old
        .call(
            Method::PATCH,
            &format!("/v1/clustertemplates/{template}"),
            Some(json!([{"op": "replace", "path": "/name", "value": "renamed-by-n-1"}])),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    until("this release to answer the template's new name", || async {
        let (st, body) = current
            .call(
                Method::GET,
                &format!("/v1/clustertemplates/{template}"),
                None,
            )
            .await;
        (st == 200 && body["name"] == "renamed-by-n-1").then_some(())
    })
    .await;

    // `magnum-capi migrate` of the previous release on this schema: nothing to do, no error.
    let out = std::process::Command::new(previous)
        .arg("migrate")
        .env_remove("MAGNUM_CAPI_CONFIG")
        .env("MAGNUM_CAPI__DATABASE__URL", &url)
        .output()
        .expect("running the previous release's migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(old);
    drop(current);
}
