#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Schema-driven fuzzing of the OpenAPI contract: schemathesis (pinned in `.ci/fuzz-venv.sh`)
//! runs every documented operation, with every check it has, against the service as `serve
//! --dev` runs it (development-header identity, the Cluster API driver on the in-process
//! simulated management cluster, a private PostgreSQL) on a loopback port. Fails on any 5xx, a
//! status code or a response body the document does not describe, a schema-valid request
//! refused, or an invalid one accepted.
//!
//! Bounded (examples per operation, seed, overall time) so a run takes a few minutes on two
//! cores; `tests/fuzz/schemathesis.toml` holds the settings and the few exceptions, each with its
//! reason. The run's figures are printed and its reports are left in
//! `$CARGO_TARGET_DIR/fuzz-openapi/` (JUnit XML, the console log).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

const VENV_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/fuzz-venv.sh");
const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz/schemathesis.toml");

/// The schemathesis virtualenv, built on first use (about 30 s) and cached after.
fn fuzz_venv() -> PathBuf {
    let out = std::process::Command::new("bash")
        .arg(VENV_SCRIPT)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("running .ci/fuzz-venv.sh");
    assert!(out.status.success(), ".ci/fuzz-venv.sh failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Where the reports go: beside the build, not in the checkout.
fn report_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("fuzz-openapi");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("report directory");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the typed contract is not complete yet: the last run still reports response-schema \
            mismatches and rejected schema-valid requests (issue 12 stays open); run with \
            `cargo test --test fuzz_openapi -- --ignored`"]
async fn schemathesis_finds_no_contract_violation() {
    let venv = tokio::task::spawn_blocking(fuzz_venv).await.unwrap();
    let app = common::capi::capi_app_on(None, None, false, |_| {}).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let svc = magnum_capi::api::service(app.t.state.clone());
    let server = tokio::spawn(async move {
        axum::serve(listener, tower::make::Shared::new(svc))
            .await
            .expect("serving the API");
    });

    let reports = report_dir();
    let log = reports.join("console.txt");
    let started = std::time::Instant::now();
    // Run from the report directory: hypothesis and schemathesis leave their state in the cwd.
    let out = tokio::process::Command::new(venv.join("bin/st"))
        .current_dir(&reports)
        .arg("--config-file")
        .arg(CONFIG)
        .args(["run", "--no-color", "--checks", "all"])
        .arg(format!("http://127.0.0.1:{port}/openapi.json"))
        .arg("--report")
        .arg("junit")
        .arg("--report-dir")
        .arg(&reports)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("running schemathesis");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    std::fs::write(&log, &text).expect("console log");
    server.abort();

    // The summary block (operations, test cases, failures) is what the report quotes.
    let summary: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect();
    eprintln!(
        "schemathesis finished in {:.0?} (exit {:?}); log {}\n{}",
        started.elapsed(),
        out.status.code(),
        log.display(),
        summary.join("\n")
    );
    assert!(
        out.status.success(),
        "schemathesis found contract violations (full log: {}):\n{text}",
        log.display()
    );
}
