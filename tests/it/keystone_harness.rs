//! Checks of the real-Keystone test harness (common/keystone.rs).

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::keystone::keystone;
use crate::common::stack::{env_exclusive, env_shared};
use serde_json::Value;

fn role_names(token_body: &Value) -> Vec<String> {
    let mut v: Vec<String> = token_body["token"]["roles"]
        .as_array()
        .expect("roles")
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn member_token_validates_with_implied_roles() {
    let _g = env_shared().await;
    let ks = keystone();
    let alice = ks.token("alice", "alpha").await;
    let (status, body) = ks.validate(&alice).await;
    assert_eq!(status, 200, "{body}");
    let t = &body["token"];
    assert_eq!(t["user"]["id"], ks.user_id("alice"));
    assert_eq!(t["user"]["name"], "alice");
    assert_eq!(t["project"]["id"], ks.project_id("alpha"));
    assert_eq!(t["project"]["domain"]["id"], "default");
    assert_eq!(role_names(&body), ["member", "reader"]);

    let (status, body) = ks.validate(&ks.token("rita", "alpha").await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(role_names(&body), ["reader"]);

    let (status, body) = ks.validate(&ks.token("bob", "beta").await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token"]["project"]["id"], ks.project_id("beta"));

    let (status, body) = ks.validate(&ks.service_token().await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        role_names(&body),
        ["admin", "manager", "member", "reader", "service"],
        "{body}"
    );

    // No role on the project: no token.
    assert!(ks.try_token("alice", "beta").await.is_err());
    // Tokens are cached per (user, project).
    assert_eq!(ks.token("alice", "alpha").await, alice);
    // Wrong token → 404 from validation.
    let (status, _) = ks.validate("gAAAAAnot-a-token").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn revoked_token_is_404() {
    let _g = env_shared().await;
    let ks = keystone();
    let tok = ks.issue_token("bob", "beta").await.unwrap();
    assert_eq!(ks.validate(&tok).await.0, 200);
    ks.revoke(&tok).await;
    let (status, body) = ks.validate(&tok).await;
    assert_eq!(status, 404, "{body}");
    // Other tokens of the same user are unaffected.
    let other = ks.issue_token("bob", "beta").await.unwrap();
    assert_eq!(ks.validate(&other).await.0, 200);
}

#[tokio::test]
async fn catalog_has_container_infra() {
    let _g = env_shared().await;
    let ks = keystone();
    let url = "http://127.0.0.1:9511/v1";
    ks.register_endpoint(url); // sync, from inside an async test
    ks.register_endpoint(url); // idempotent
    assert_eq!(ks.endpoint_url().as_deref(), Some(url));
    let (status, body) = ks.validate(&ks.token("alice", "alpha").await).await;
    assert_eq!(status, 200);
    let catalog = body["token"]["catalog"].as_array().expect("catalog");
    let svc = catalog
        .iter()
        .find(|s| s["type"] == "container-infra")
        .unwrap_or_else(|| panic!("no container-infra in {catalog:?}"));
    assert_eq!(svc["name"], "magnum");
    assert_eq!(svc["id"], ks.service_id.as_str());
    let eps = svc["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 1, "{eps:?}");
    assert_eq!(eps[0]["interface"], "public");
    assert_eq!(eps[0]["region_id"], "RegionOne");
    assert_eq!(eps[0]["url"], url);
    // Identity is in the catalog too (from bootstrap).
    let identity = catalog.iter().find(|s| s["type"] == "identity").unwrap();
    assert!(
        identity["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["url"] == ks.url.as_str())
    );
}

#[tokio::test]
async fn stop_and_start() {
    // Takes Keystone away from every test of the binary: it runs alone.
    let _g = env_exclusive().await;
    let ks = keystone();
    let tok = ks.token("alice", "alpha").await;
    assert!(ks.is_running());
    let t = Instant::now();
    ks.stop();
    eprintln!("stop took {:?}", t.elapsed());
    assert!(!ks.is_running());
    assert!(std::net::TcpStream::connect(("127.0.0.1", ks.port)).is_err());
    assert!(ks.issue_token("alice", "alpha").await.is_err());
    ks.stop(); // idempotent
    let t = Instant::now();
    ks.start();
    eprintln!("start took {:?}", t.elapsed());
    assert!(ks.is_running());
    // Same port, same keys, same database: the old token is still good.
    let (status, body) = ks.validate(&tok).await;
    assert_eq!(status, 200, "{body}");
    ks.start(); // idempotent
}

const HELPER_ENV: &str = "MAGNUM_CAPI_KEYSTONE_TEST_HELPER";

/// Child half of `gunicorn_dies_with_sigkilled_parent`.
#[test]
#[ignore = "helper process for gunicorn_dies_with_sigkilled_parent"]
fn helper_start_and_hang() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let ks = keystone();
    println!("KEYSTONE_HELPER {} {}", ks.port, ks.pid().unwrap());
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn pids_in_group(pgid: u32) -> Vec<u32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // state ppid pgrp
        if f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string() {
            out.push(pid);
        }
    }
    out
}

#[test]
fn gunicorn_dies_with_sigkilled_parent() {
    let exe = std::env::current_exe().unwrap();
    let mut helper = Command::new(exe)
        .args([
            "--exact",
            "keystone_harness::helper_start_and_hang",
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = helper.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if let Some(i) = l.find("KEYSTONE_HELPER ") {
                let _ = tx.send(l[i..].to_owned());
                break;
            }
        }
    });
    let line = match rx.recv_timeout(Duration::from_secs(180)) {
        Ok(l) => l,
        Err(e) => {
            let _ = helper.kill();
            let _ = helper.wait();
            panic!("helper did not start Keystone: {e}");
        }
    };
    let parts: Vec<&str> = line.split_whitespace().collect();
    let port: u16 = parts[1].parse().unwrap();
    let pid: u32 = parts[2].parse().unwrap();
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    // Keystone answers once one worker has booted; the master forks the second one on its own
    // schedule (later on a loaded machine), so wait for it rather than expect it already there.
    let booted = Instant::now() + Duration::from_secs(120);
    while pids_in_group(pid).len() < 3 && Instant::now() < booted {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        pids_in_group(pid).len() >= 3,
        "master + 2 workers: {:?}",
        pids_in_group(pid)
    );

    helper.kill().unwrap();
    helper.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (!pids_in_group(pid).is_empty()
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = pids_in_group(pid);
    for p in &left {
        let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
    }
    assert!(
        left.is_empty(),
        "gunicorn processes {left:?} outlived their parent"
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}
