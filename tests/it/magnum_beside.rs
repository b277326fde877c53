//! The real Magnum the load benchmark measures beside us (benches/api_load.rs), started as the
//! bench starts it (`common::magnum::bench::start`: Magnum 23 with its CAPI Helm driver, the
//! bench's rows, the fake cloud in every request's catalog), accepts the bench's create: without
//! this the bench's setup could rot and its create figure with it.

use crate::common::fakecloud::{self, FakeCloud, Seen};
use crate::common::magnum::bench;

/// The bench's seeding project (its templates are public there) and a project of its own.
const SEEDED: &str = "bench-project";
const CREATOR: &str = "bench-create";

#[tokio::test(flavor = "multi_thread")]
async fn the_real_magnum_beside_us_accepts_the_benchs_create_from_a_project_of_its_own() {
    let cloud = FakeCloud::start().await;
    let catalog = cloud.catalog();
    let (db, api) =
        tokio::task::spawn_blocking(move || bench::start(SEEDED, 3, &catalog).expect("Magnum"))
            .await
            .expect("start");
    let template = db.sql("SELECT uuid FROM cluster_template WHERE name = 'template-1'");
    let template = template.trim();
    assert_eq!(template.len(), 36, "{template:?}");
    cloud.clear_requests();

    let r = reqwest::Client::new()
        .post(format!("{}/v1/clusters", api.url()))
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("x-project-id", CREATOR)
        .header("x-user-id", "bench-user")
        .header("x-roles", "member,reader")
        .body(bench::create_body(template))
        .send()
        .await
        .expect("POST");
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    assert_eq!(status, 202, "Magnum answered {status}: {body}");
    let uuid = body["uuid"].as_str().unwrap_or_default();
    assert_eq!(uuid.len(), 36, "{body}");

    // Its validation asked our fake cloud, found through the catalog, with the request's token.
    let seen = cloud.requests();
    let asked = |what: &str, f: &dyn Fn(&Seen) -> bool| {
        assert!(
            seen.iter()
                .any(|s| s.method == "GET" && f(s) && s.token.is_some()),
            "Magnum did not look the {what} up in the fake cloud: {seen:#?}"
        );
    };
    asked("image", &|s| {
        s.path.starts_with("/image/v2/images") && s.path.contains(fakecloud::IMAGE_UBUNTU_KUBE)
    });
    asked("flavors", &|s| s.path.starts_with("/compute/v2.1/flavors"));
    asked("keypair", &|s| {
        s.path == format!("/compute/v2.1/os-keypairs/{}", fakecloud::KEYPAIR_DEFAULT)
    });
    asked("external network", &|s| {
        s.path.starts_with("/networking/v2.0/networks")
            && s.query
                .as_deref()
                .is_some_and(|q| q.contains("router%3Aexternal") || q.contains("router:external"))
    });

    // The API writes no cluster row: its conductor would, and the cast to it goes to the
    // `fake://` transport, which nothing consumes. So the bench has nothing of Magnum's to
    // remove between creates (`Recycle::Nothing`) and Magnum's quota check counts the same rows
    // at every create.
    let rows = db.sql(&format!(
        "SELECT count(*) FROM cluster WHERE project_id = '{CREATOR}' OR uuid = '{uuid}'"
    ));
    assert_eq!(rows.trim(), "0");
}
