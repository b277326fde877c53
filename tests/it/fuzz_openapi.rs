//! Schema-driven fuzzing of the OpenAPI contract: schemathesis (pinned in `.ci/fuzz-venv.sh`)
//! runs every documented operation, with every check it has, against the service as `serve
//! --dev` runs it (development-header identity, the simulated driver completing operations, a
//! private PostgreSQL) on a loopback port. Fails on any 5xx, a status code or a response body the
//! document does not describe, a schema-valid request refused, or an invalid one accepted.
//!
//! Bounded (examples per operation) so a run takes a few minutes on two cores. The seed changes
//! with every commit: it is derived from the checkout's HEAD commit (a fixed one without git),
//! printed first, and `MAGNUM_CAPI_FUZZ_SEED=<seed>` runs a given one again (to reproduce);
//! `tests/fuzz/schemathesis.toml` holds the settings and the few exceptions, each with its reason,
//! `tests/fuzz/hooks.py` the one request rewrite (whole floats) and the wait for asynchronous
//! deletes to finish (a client's wait, before a scenario reads the resource gone). The run's
//! figures are printed and its reports are left in `$CARGO_TARGET_DIR/fuzz-openapi/{latest,1.1}/`
//! (JUnit XML, the console log).

use crate::common;

use std::path::Path;
use std::process::Stdio;

const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz/schemathesis.toml");
const HOOKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz/hooks.py");

/// The seed of a run when neither the environment nor git gives one.
const FALLBACK_SEED: u64 = 20261123;
/// The variable that sets the seed (to reproduce a run).
const SEED_VAR: &str = "MAGNUM_CAPI_FUZZ_SEED";

/// The seed of this run and where it came from: `MAGNUM_CAPI_FUZZ_SEED`, else the first 32 bits
/// of the checkout's HEAD commit (so every commit explores other inputs), else
/// [`FALLBACK_SEED`].
fn seed() -> (u64, String) {
    if let Ok(v) = std::env::var(SEED_VAR) {
        let seed = v
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{SEED_VAR}={v:?} is not a seed: {e}"));
        return (seed, SEED_VAR.to_string());
    }
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head.as_deref().and_then(seed_of_commit) {
        Some(seed) => (seed, format!("commit {}", head.unwrap_or_default())),
        None => (FALLBACK_SEED, "no git commit: the fixed seed".to_string()),
    }
}

/// The seed of a commit: its hash's first 8 hex digits as a number.
fn seed_of_commit(hash: &str) -> Option<u64> {
    u64::from_str_radix(hash.get(..8)?, 16).ok()
}

#[test]
fn the_seed_follows_the_commit() {
    assert_eq!(seed_of_commit("366f351a0b"), Some(0x366f_351a));
    assert_ne!(seed_of_commit("414da16c"), seed_of_commit("9f37867e"));
    assert_eq!(seed_of_commit("not hex!"), None);
    assert_eq!(seed_of_commit("abc"), None);
}

/// One schemathesis run against the service on `port`; its console log and JUnit report go to
/// `dir`. Returns whether it passed and the console text.
async fn run_pass(venv: &Path, port: u16, seed: u64, dir: &Path, extra: &[&str]) -> (bool, String) {
    std::fs::create_dir_all(dir).expect("report directory");
    let started = std::time::Instant::now();
    // Run from the report directory: hypothesis and schemathesis leave their state in the cwd.
    let out = tokio::process::Command::new(venv.join("bin/st"))
        .current_dir(dir)
        .arg("--config-file")
        .arg(CONFIG)
        .args(["run", "--no-color", "--checks", "all", "--seed"])
        .arg(seed.to_string())
        .arg(format!("http://127.0.0.1:{port}/openapi.json"))
        .args(["--report", "junit", "--report-dir"])
        .arg(dir)
        .args(extra)
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_HOOKS", HOOKS)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("running schemathesis");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let log = dir.join("console.txt");
    std::fs::write(&log, &text).expect("console log");
    // The summary block (operations, test cases, failures) is what reports quote.
    let summary: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect();
    eprintln!(
        "schemathesis {extra:?} finished in {:.0?} (exit {:?}); log {}\n{}",
        started.elapsed(),
        out.status.code(),
        log.display(),
        summary.join("\n")
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_contract_violation() {
    let (seed, from) = seed();
    eprintln!("fuzz seed {seed} ({from}); run it again with {SEED_VAR}={seed}");
    let venv = tokio::task::spawn_blocking(|| common::cached_venv(".ci/fuzz-venv.sh"))
        .await
        .unwrap();
    // The simulated driver, not the Cluster API one on the simulated management cluster: that
    // one materialises every Machine, and a schema-valid cluster of 2^31 - 1 nodes (which the API
    // accepts, as Magnum does) exhausts the machine's memory.
    let app = common::app_with_worker().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let svc = magnum_capi::api::service(app.state.clone());
    let server = tokio::spawn(async move {
        axum::serve(listener, tower::make::Shared::new(svc))
            .await
            .expect("serving the API");
    });

    let reports = common::artifact_dir("fuzz-openapi");
    // Every operation at the latest microversion (the configuration's header).
    let latest = run_pass(&venv, port, seed, &reports.join("latest"), &[]).await;
    // The operations that exist at 1.1 (the version of requests without the header), where
    // responses have `stack_id` instead of `cluster_id` and a few rules differ.
    let oldest = run_pass(
        &venv,
        port,
        seed,
        &reports.join("1.1"),
        &[
            "-H",
            "OpenStack-API-Version: container-infra 1.1",
            "--exclude-operation-id-regex",
            "^(nodegroups\\..*|clusters\\.(resize|upgrade)|credentials\\..*)$",
        ],
    )
    .await;
    server.abort();
    for (name, (passed, text)) in [("latest", latest), ("1.1", oldest)] {
        assert!(
            passed,
            "schemathesis found contract violations at {name} with seed {seed} (full log in {}; \
             {SEED_VAR}={seed} reproduces):\n{text}",
            reports.display()
        );
    }
}
