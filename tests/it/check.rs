//! `magnum-capi check` as an operator runs it (the real binary, a configuration file): it logs
//! in to the real Keystone with the service's credentials, finds the catalog entries the service
//! uses, asks the (simulated) management cluster with `SelfSubjectAccessReview` for every
//! permission the driver needs, checks the sealing key — and names each failure, exiting
//! non-zero.

use std::path::Path;

use magnum_capi::config::KeystoneConfig;
use secrecy::ExposeSecret;

use crate::common::capi::{kubeconfig, sim_options};
use crate::common::fresh_database;
use crate::common::served::run_command;
use crate::common::stack::{env_shared, parts};

const SEAL_KEY: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";

/// A configuration as an operator writes it: the database, Keystone with the service user's
/// `password`, the sealing key, the CAPI driver on the management cluster at `server`.
fn config(
    dir: &Path,
    db: &str,
    k: &KeystoneConfig,
    password: &str,
    server: &str,
) -> std::path::PathBuf {
    let path = dir.join("magnum-capi.toml");
    std::fs::write(
        &path,
        format!(
            "[database]\nurl = {db:?}\n\
             [keystone]\nauth_url = {:?}\nusername = {:?}\npassword = {password:?}\n\
             project_name = {:?}\ntimeout_secs = 30\n\
             [operations]\nseal_key = {SEAL_KEY:?}\n\
             [driver]\nkind = \"capi\"\n\
             [capi]\nkubeconfig = {:?}\n",
            k.auth_url.as_deref().unwrap(),
            k.username.as_deref().unwrap(),
            k.project_name.as_deref().unwrap(),
            kubeconfig(dir, "management", server),
        ),
    )
    .unwrap();
    path
}

/// Runs `magnum-capi check --config <config>`: whether it passed, and its report.
async fn check(config: &Path) -> (bool, String) {
    let out = run_command("check", config).await;
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
    )
}

/// The report's line for check `name`: (passed, detail).
fn line<'a>(report: &'a str, name: &str) -> (bool, &'a str) {
    report
        .lines()
        .find_map(|l| {
            let (status, rest) = l.trim().split_once(' ')?;
            let (n, detail) = rest
                .trim_start()
                .split_once(' ')
                .unwrap_or((rest.trim(), ""));
            (n == name).then(|| (status == "ok", detail.trim()))
        })
        .unwrap_or_else(|| panic!("no line {name} in:\n{report}"))
}

#[tokio::test]
async fn check_logs_in_finds_the_catalog_and_asks_for_every_permission() {
    let _env = env_shared().await;
    let (ks, _) = parts().await;
    let k = ks.service_config();
    let password = k.password.clone().unwrap();
    let sim = magnum_capi::simkube::SimCluster::start(sim_options(1000))
        .await
        .unwrap();
    let (db, dir) = (fresh_database().await, tempfile::tempdir().unwrap());
    let good = config(dir.path(), &db, &k, password.expose_secret(), sim.url());

    let (passed, report) = check(&good).await;
    assert!(passed, "{report}");
    let (ok, login) = line(&report, "keystone_login");
    assert!(ok && login.contains("roles"), "{report}");
    for entry in ["identity", "compute", "network", "image"] {
        let (ok, url) = line(&report, &format!("catalog:{entry}"));
        assert!(ok && url.starts_with("http"), "{report}");
    }
    let (ok, permissions) = line(&report, "permissions");
    assert!(ok && permissions.starts_with("all "), "{report}");
    assert!(line(&report, "seal_key").0, "{report}");

    // The account loses two permissions: both are named, and check fails.
    sim.deny("", "secrets", "delete");
    sim.deny("cluster.x-k8s.io", "machines", "patch");
    let (passed, report) = check(&good).await;
    assert!(!passed, "{report}");
    let (ok, permissions) = line(&report, "permissions");
    assert!(!ok, "{report}");
    assert_eq!(
        permissions, "denied: delete secrets, patch machines.cluster.x-k8s.io",
        "{report}"
    );
    assert!(report.ends_with("check failed\n"), "{report}");

    // Credentials Keystone refuses: the login says so (and the rest is still reported).
    let wrong = config(dir.path(), &db, &k, "not-the-password", sim.url());
    let (passed, report) = check(&wrong).await;
    assert!(!passed, "{report}");
    let (ok, login) = line(&report, "keystone_login");
    assert!(!ok, "{report}");
    assert!(
        login.starts_with("the service's credentials are refused: Keystone answered 401"),
        "{report}"
    );
    assert!(line(&report, "postgresql").0, "{report}");
}
