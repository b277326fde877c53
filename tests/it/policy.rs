//! Operator policy overrides: installed once per process (like oslo.policy's enforcer), so this
//! binary's tests all run under the same override file.

use crate::common::*;
use magnum_capi::domain::policy_lang::Policy;
use serde_json::json;

const OVERRIDES: &str = "# only admins create clusters here\n\"cluster:create\": \"role:admin\"\n";

fn install_overrides() {
    // Every test installs the same policy; only the first call takes effect.
    let _ = magnum_capi::domain::policy::install(Policy::from_yaml_overrides(OVERRIDES).unwrap());
}

#[tokio::test]
async fn an_override_denies_what_the_default_allows() {
    install_overrides();
    let t = app().await;
    let ct = t.template(&ALICE, "k8s").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct}),
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
    install_overrides();
    let t = app().await;
    let ct = t.template(&ALICE, "k8s").await;
    t.get(&ALICE, &format!("/v1/clustertemplates/{ct}"))
        .await
        .assert_status(200);
    t.get(&BOB, &format!("/v1/clustertemplates/{ct}"))
        .await
        .assert_status(404);
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
