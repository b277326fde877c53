//! Two replicas as the Helm chart configures them, on one database and one management cluster:
//! `magnum-capi simulate` (the simulated management cluster as a process of its own, its
//! kubeconfig given to the chart), the migration Job's command, then two `serve` processes in
//! production mode (Keystone, no `--dev`) whose arguments, environment and files are the rendered
//! Deployment's, ConfigMap's and Secrets' (tests/it/common/chart.rs; only the listen addresses
//! move to loopback ports, as each pod has its own network). Creates through both complete, also
//! while the sealing key is rotated and the replicas are replaced one at a time; an outage of
//! Keystone or of the management cluster leaves both replicas ready and serving reads.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use secrecy::ExposeSecret;
use serde_json::{Value, json};

use crate::common::capi::crd_dir;
use crate::common::chart::{self, objects, render};
use crate::common::fakecloud::{IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT, NETWORK_PUBLIC};
use crate::common::fresh_database;
use crate::common::served::{self, free_port};
use crate::common::stack::{env_exclusive, parts};
use crate::common::wait::{SIM_STEP_MS, until};

const KEY_OLD: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_NEW: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
/// Creates per round, spread over the replicas.
const CREATES: usize = 40;

/// A child process of the test, its stderr in `log`; SIGKILLed when dropped.
struct Process {
    child: Child,
    log: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    fn spawn(args: &[String], env: &[(String, String)], log: PathBuf) -> Process {
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_magnum-capi"));
        cmd.args(args)
            .env_remove("MAGNUM_CAPI_CONFIG")
            .env("RUST_LOG", "info,sqlx=warn")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        let child = cmd.spawn().expect("spawn magnum-capi");
        Process { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with the log when the process has exited.
    fn assert_running(&mut self, what: &str) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!("{what} exited ({status}):\n{}", self.log_text());
        }
    }

    /// SIGTERM, then wait (bounded) for the graceful exit.
    async fn terminate(mut self) {
        served::terminate(&mut self.child).await;
    }
}

/// `magnum-capi simulate`, the management cluster the replicas share.
struct Simulated {
    process: Process,
    kubeconfig: PathBuf,
}

async fn simulate(dir: &Path) -> Simulated {
    let kubeconfig = dir.join("management-cluster.kubeconfig");
    let args: Vec<String> = [
        "simulate",
        "--kubeconfig-out",
        kubeconfig.to_str().unwrap(),
        "--step-ms",
        &SIM_STEP_MS.to_string(),
        "--crd-dir",
        crd_dir().to_str().unwrap(),
    ]
    .map(String::from)
    .into();
    let mut process = Process::spawn(&args, &[], dir.join("simulate.log"));
    until("simulate to write its kubeconfig", || {
        process.assert_running("simulate");
        let written = kubeconfig.is_file();
        async move { written.then_some(()) }
    })
    .await;
    Simulated {
        process,
        kubeconfig,
    }
}

/// The chart's values: this test's database, Keystone and management cluster, the key ring,
/// and settings an operator could give (`config`) for a fast test.
async fn values(db: &str, kubeconfig: &Path, current: &str, previous: &[&str]) -> Value {
    let (ks, _) = parts().await;
    let service = ks.service_config();
    json!({
        "database": {"url": db},
        "sealKeys": {"current": current, "previous": previous},
        "keystone": {
            "authUrl": service.auth_url,
            "username": service.username,
            "projectName": service.project_name,
            "password": service.password.as_ref().map(|p| p.expose_secret().to_string()),
        },
        "managementCluster": {"kubeconfig": std::fs::read_to_string(kubeconfig).unwrap()},
        "config": {
            "database": {"max_connections": 5},
            "operations": {"poll_interval_ms": 50, "retry_base_ms": 50},
            "quotas": {"max_clusters_per_project": 2 * CREATES + 10},
            // As every test of the real Keystone: its calls can be slow while the machine builds.
            "keystone": {"timeout_secs": 60},
            "openstack": {"timeout_secs": 60},
        },
    })
}

/// One replica: the rendered Deployment's container as a process.
struct Replica {
    process: Process,
    port: u16,
    metrics_port: u16,
    _pod: chart::Pod,
}

impl Replica {
    /// Starts the pod of `rendered` as replica `name` and waits for `/healthz`.
    async fn start(rendered: &[Value], name: &str, dir: &Path) -> Replica {
        let pod = chart::pod(rendered, &[]);
        let (port, metrics_port) = (free_port(), free_port());
        let mut env = pod.env.clone();
        for (k, v) in &mut env {
            // The chart listens on every address of the pod's own network; here every replica
            // shares the machine's, so each gets loopback ports of its own.
            match k.as_str() {
                "MAGNUM_CAPI__HTTP__BIND" => *v = format!("127.0.0.1:{port}"),
                "MAGNUM_CAPI__HTTP__METRICS_BIND" => *v = format!("127.0.0.1:{metrics_port}"),
                _ => {}
            }
        }
        // A pod's host name (its heartbeat in `magnum_service`).
        env.push(("MAGNUM_CAPI__SERVICE__HOST".into(), name.into()));
        let log = dir.join(format!("{name}.log"));
        let mut r = Replica {
            process: Process::spawn(&pod.args, &env, log),
            port,
            metrics_port,
            _pod: pod,
        };
        let url = r.url("/healthz");
        served::wait_answering(&mut r.process.child, &r.process.log, &url).await;
        r
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn call(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = crate::common::http()
            .request(method.parse().unwrap(), self.url(path))
            .header("OpenStack-API-Version", "container-infra latest");
        if let Some(t) = token {
            req = req.header("X-Auth-Token", t);
        }
        served::answer(req, body).await
    }

    async fn create(&self, token: &str, template: &str, name: &str) -> String {
        let (st, c) = self
            .call(
                Some(token),
                "POST",
                "/v1/clusters",
                Some(json!({"name": name, "cluster_template_id": template})),
            )
            .await;
        assert_eq!(st, 202, "{c}");
        c["uuid"].as_str().unwrap().to_string()
    }

    /// `/readyz`: the status and the checks that failed (all optional ones, when 200).
    async fn readiness(&self) -> (u16, Vec<(String, bool)>) {
        let (st, body) = self.call(None, "GET", "/readyz", None).await;
        let failed = body["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["ok"] == false)
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_string(),
                    c["optional"] == true,
                )
            })
            .collect();
        (st, failed)
    }
}

/// Runs the migration Job's container (its command and environment as rendered) to completion.
fn migrate(rendered: &[Value], dir: &Path) {
    let job = chart::workload(rendered, &[], "Job", Some("magnum-capi-migrate"), "migrate");
    let log = dir.join("migrate.log");
    let mut p = Process::spawn(&job.args, &job.env, log);
    let status = p.child.wait().expect("migrate");
    assert!(
        status.success(),
        "the migration Job failed:\n{}",
        p.log_text()
    );
}

/// Waits until every one of `clusters` is CREATE_COMPLETE (read through `replica`), failing at
/// once on a CREATE_FAILED. The creates share one Keystone, whose application-credential
/// creation is the slow part here (seconds each on a busy machine), so the wait is one step per
/// cluster that completes: each step is bounded by the harness's deadline, not the whole batch.
async fn wait_complete(replica: &Replica, token: &str, clusters: &[String]) {
    let mut done = 0;
    while done < clusters.len() {
        done = until(
            &format!(
                "one more of {} creates to complete ({done} done)",
                clusters.len()
            ),
            || async {
                let (st, list) = replica
                    .call(Some(token), "GET", "/v1/clusters?limit=1000", None)
                    .await;
                assert_eq!(st, 200, "{list}");
                let mut complete = 0;
                for c in list["clusters"].as_array().into_iter().flatten() {
                    if !clusters.iter().any(|u| c["uuid"] == u.as_str()) {
                        continue;
                    }
                    match c["status"].as_str().unwrap_or_default() {
                        "CREATE_COMPLETE" => complete += 1,
                        "CREATE_FAILED" => panic!("{} failed: {c}", c["uuid"]),
                        _ => {}
                    }
                }
                (complete > done).then_some(complete)
            },
        )
        .await;
    }
}

#[tokio::test]
async fn two_replicas_as_the_chart_configures_them_complete_every_create_through_a_key_rotation() {
    // Keystone is stopped below.
    let _env = env_exclusive().await;
    let (ks, _) = parts().await;
    let dir = tempfile::tempdir().unwrap();
    let db = fresh_database().await;
    let mut sim = simulate(dir.path()).await;

    let old = objects(&render(&values(&db, &sim.kubeconfig, KEY_OLD, &[]).await));
    migrate(&old, dir.path());
    let a = Replica::start(&old, "replica-a", dir.path()).await;
    let b = Replica::start(&old, "replica-b", dir.path()).await;
    let alice = ks.token("alice", "alpha").await;

    // The metrics listener answers a scraper without a token; the API port's /metrics does not.
    let metrics = reqwest::get(format!("http://127.0.0.1:{}/metrics", a.metrics_port))
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.unwrap().contains("magnum_capi_"));
    assert_eq!(a.call(None, "GET", "/metrics", None).await.0, 401);

    let (st, ct) = a
        .call(
            Some(&alice),
            "POST",
            "/v1/clustertemplates",
            Some(json!({
                "name": "kube", "image_id": IMAGE_UBUNTU_KUBE, "coe": "kubernetes",
                "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                "keypair_id": KEYPAIR_DEFAULT, "external_network_id": NETWORK_PUBLIC,
                "labels": {"kube_tag": "v1.30.4"}})),
        )
        .await;
    assert_eq!(st, 201, "{ct}");
    let ct = ct["uuid"].as_str().unwrap().to_string();

    // Round 1: 40 creates through both replicas, one key.
    let mut first = Vec::new();
    for i in 0..CREATES {
        let r = if i % 2 == 0 { &a } else { &b };
        first.push(r.create(&alice, &ct, &format!("one-{i}")).await);
    }
    wait_complete(&b, &alice, &first).await;

    // Round 2: the key rotated halfway. A third of the creates before, a third while replica A
    // runs with the new key (sealing with it; B cannot open those and hands them back) and B
    // with the old one, a third once both are replaced; nothing is waited for in between.
    let new = objects(&render(
        &values(&db, &sim.kubeconfig, KEY_NEW, &[KEY_OLD]).await,
    ));
    migrate(&new, dir.path());
    let mut second = Vec::new();
    let third = CREATES / 3;
    for i in 0..third {
        let r = if i % 2 == 0 { &a } else { &b };
        second.push(r.create(&alice, &ct, &format!("two-{i}")).await);
    }
    // As the Deployment rolls (maxSurge 1, maxUnavailable 0): the new replica, then the old
    // one goes.
    let a2 = Replica::start(&new, "replica-a2", dir.path()).await;
    a.process.terminate().await;
    for i in third..2 * third {
        let r = if i % 2 == 0 { &a2 } else { &b };
        second.push(r.create(&alice, &ct, &format!("two-{i}")).await);
    }
    let b2 = Replica::start(&new, "replica-b2", dir.path()).await;
    b.process.terminate().await;
    for i in 2 * third..CREATES {
        let r = if i % 2 == 0 { &a2 } else { &b2 };
        second.push(r.create(&alice, &ct, &format!("two-{i}")).await);
    }
    wait_complete(&a2, &alice, &second).await;

    // Keystone stopped: both replicas stay ready, the token they validated keeps working, a
    // token neither has seen gets keystonemiddleware's 503.
    let bob = ks.issue_token("bob", "beta").await.unwrap();
    for r in [&a2, &b2] {
        assert_eq!(
            r.call(Some(&alice), "GET", "/v1/clusters", None).await.0,
            200
        );
    }
    tokio::task::spawn_blocking(move || ks.stop())
        .await
        .unwrap();
    let mut seen = Vec::new();
    for r in [&a2, &b2] {
        seen.push((
            r.readiness().await,
            r.call(Some(&alice), "GET", "/v1/clusters", None).await,
            r.call(Some(&bob), "GET", "/v1/clusters", None).await,
        ));
    }
    tokio::task::spawn_blocking(move || ks.start())
        .await
        .unwrap();
    for (ready, cached, uncached) in seen {
        assert_eq!(ready, (200, vec![("keystone".to_string(), true)]));
        assert_eq!(cached.0, 200, "{}", cached.1);
        assert_eq!(
            uncached,
            (
                503,
                json!({"error": {"code": 503, "title": "Service Unavailable",
                    "message": "The Keystone service is temporarily unavailable."}})
            )
        );
    }

    // The management cluster gone: both replicas stay ready and serve reads.
    sim.process.child.kill().expect("SIGKILL simulate");
    let _ = sim.process.child.wait();
    for r in [&a2, &b2] {
        let (st, failed) = r.readiness().await;
        assert_eq!(st, 200, "{failed:?}");
        assert!(
            failed.contains(&("management_cluster".to_string(), true)),
            "{failed:?}"
        );
        assert!(failed.iter().all(|(_, optional)| *optional), "{failed:?}");
        let (st, body) = r
            .call(
                Some(&alice),
                "GET",
                &format!("/v1/clusters/{}", second[0]),
                None,
            )
            .await;
        assert_eq!(
            (st, body["status"].clone()),
            (200, json!("CREATE_COMPLETE"))
        );
        let (st, list) = r
            .call(Some(&alice), "GET", "/v1/clusters?limit=200", None)
            .await;
        assert_eq!(st, 200);
        assert_eq!(list["clusters"].as_array().unwrap().len(), 2 * CREATES);
    }
}

#[test]
fn simulate_refuses_a_non_loopback_address_unless_told() {
    let out = Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .args([
            "simulate",
            "--kubeconfig-out",
            "/nonexistent/kc",
            "--listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("authenticates nobody") && err.contains("--allow-remote"),
        "{err}"
    );
}
