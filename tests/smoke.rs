#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;
use common::*;

#[tokio::test]
async fn root_advertises_1_14() {
    let t = app().await;
    let r = t.get(&ADMIN, "/").await;
    r.assert_status(200);
    assert_eq!(r.body["versions"][0]["max_version"], "1.14");
}
