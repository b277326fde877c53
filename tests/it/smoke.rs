//! First contact: the root document over the in-process router, and the real binary refusing to
//! serve without Keystone outside `--dev`.

use crate::common::*;

#[tokio::test]
async fn root_advertises_1_14() {
    let t = app().await;
    let r = t.get(&ADMIN, "/").await;
    r.assert_status(200);
    assert_eq!(r.body["versions"][0]["max_version"], "1.14");
}

/// The real binary: without `--dev` it refuses to start unless Keystone is configured, and says
/// which key is missing (no silent 401-for-everything service).
#[test]
fn serve_without_keystone_needs_dev_mode() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .args(["serve"])
        .env(
            "MAGNUM_CAPI__DATABASE__URL",
            "postgres://nobody@127.0.0.1:1/none",
        )
        .env("MAGNUM_CAPI__HTTP__BIND", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[keystone] auth_url is required"), "{err}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .args(["serve"])
        .env("MAGNUM_CAPI__KEYSTONE__ENABLED", "false")
        .env(
            "MAGNUM_CAPI__DATABASE__URL",
            "postgres://nobody@127.0.0.1:1/none",
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("only accepted with `serve --dev`"), "{err}");
}
