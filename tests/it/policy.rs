//! Operator policy overrides: installed once per process (like oslo.policy's enforcer), so these
//! tests run them in the real binary (`serve --dev` with `[policy] file`), which owns its process.

use crate::common::served::Server;
use crate::common::*;
use reqwest::Method;
use serde_json::json;

const OVERRIDES: &str = "# only admins create clusters here\n\"cluster:create\": \"role:admin\"\n";

/// `serve --dev` on a fresh database with [`OVERRIDES`] (the directory holds the policy file).
async fn served_with_overrides() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, OVERRIDES).unwrap();
    let url = fresh_database().await;
    let server = Server::start(
        &url,
        &[("MAGNUM_CAPI__POLICY__FILE", policy.to_str().unwrap())],
    )
    .await;
    (server, dir)
}

#[tokio::test]
async fn an_override_denies_what_the_default_allows() {
    let (s, _policy) = served_with_overrides().await;
    let ct = s.create_template().await;
    let r = s
        .call(
            Method::POST,
            "/v1/clusters",
            Some(json!({"name": "c", "cluster_template_id": ct})),
        )
        .await;
    assert_magnum_error(
        &r,
        403,
        "Policy doesn't allow cluster:create to be performed.",
    );
}

#[tokio::test]
async fn rules_not_overridden_keep_their_defaults() {
    let (s, _policy) = served_with_overrides().await;
    let ct = s.create_template().await;
    let path = format!("/v1/clustertemplates/{ct}");
    let (status, body) = s.call_as(&ALICE, Method::GET, &path, None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.call_as(&BOB, Method::GET, &path, None).await;
    assert_eq!(status, 404, "{body}");
}

#[test]
fn a_bad_policy_file_stops_start_up_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "\"cluster:get\": \"rule:admin_or_project_reader\"\n\"cluster:create\": \"role:admin and (\"\n").unwrap();
    let config = dir.path().join("magnum-capi.toml");
    std::fs::write(
        &config,
        format!("[policy]\nfile = \"{}\"\n", policy.display()),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("MAGNUM_CAPI__DATABASE__URL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cluster:create") && stderr.contains("line 2"),
        "{stderr}"
    );
}
