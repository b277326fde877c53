//! Behaviour the schema-driven fuzzer (tests/it/fuzz_openapi.rs) found wrong and the contract now
//! states: text with U+0000, which PostgreSQL cannot store, is the client's error (400), not a
//! database failure (500).

use crate::common;

use crate::common::{ADMIN, magnum_error};
use serde_json::json;

const NUL_REFUSED: &str = "Invalid input: text cannot contain NUL (U+0000) characters.";

#[tokio::test]
async fn a_nul_in_a_body_is_refused_before_anything_is_stored() {
    let t = common::app().await;
    let r = t
        .post(
            &ADMIN,
            "/v1/clustertemplates",
            json!({"coe": "kubernetes", "image_id": "img", "fixed_network": "a\u{0}b"}),
        )
        .await;
    r.assert_status(400);
    assert_eq!(r.body, magnum_error(400, NUL_REFUSED));
    // In a label key too.
    let r = t
        .post(
            &ADMIN,
            "/v1/clustertemplates",
            json!({"coe": "kubernetes", "image_id": "img", "labels": {"k\u{0}": "v"}}),
        )
        .await;
    r.assert_status(400);
    assert_eq!(t.sql_i64("SELECT count(*) FROM cluster_template").await, 0);
}

#[tokio::test]
async fn a_nul_in_a_path_or_query_is_refused() {
    let t = common::app().await;
    for path in [
        "/v1/clusters/a%00b",
        "/v1/quotas/p%00/Cluster",
        "/v1/stats?project_id=%00",
    ] {
        let r = t.get(&ADMIN, path).await;
        r.assert_status(400);
        assert_eq!(r.body, magnum_error(400, NUL_REFUSED), "{path}");
    }
    let r = t
        .get_v(&ADMIN, "/v1/clusters/c/nodegroups?role=%00", "1.9")
        .await;
    r.assert_status(400);
}
