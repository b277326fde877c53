//! The real binary as tests run it: `magnum-capi serve --dev` on a test database, a loopback
//! port, its log in a file; requests as Alice; SIGKILL, SIGTERM and readiness.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;

use super::ALICE;

/// A running `magnum-capi serve --dev`; SIGKILLed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    log: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Server {
    pub async fn start(db_url: &str, env: &[(&str, &str)]) -> Server {
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "magnum-capi-durability-{}-{port}.log",
            std::process::id()
        ));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_magnum-capi"));
        cmd.args(["serve", "--dev"])
            .env_remove("MAGNUM_CAPI_CONFIG")
            .env("MAGNUM_CAPI__DATABASE__URL", db_url)
            .env("MAGNUM_CAPI__DATABASE__MAX_CONNECTIONS", "5")
            .env("MAGNUM_CAPI__HTTP__BIND", format!("127.0.0.1:{port}"))
            .env("MAGNUM_CAPI__OPERATIONS__POLL_INTERVAL_MS", "100")
            .env("MAGNUM_CAPI__SERVICE__HOST", "durability-test")
            // The queue's guarantees with the delay-controlled driver; the CAPI driver's crash
            // recovery is tests/capi_lifecycle.rs.
            .env("MAGNUM_CAPI__DRIVER__KIND", "simulated")
            .env("RUST_LOG", "info,sqlx=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn magnum-capi");
        let mut s = Server { child, port, log };
        s.wait_ready().await;
        s
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("magnum-capi exited early ({status}):\n{}", self.log_text());
            }
            if let Ok(r) = client.get(self.url("/")).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("magnum-capi never became ready:\n{}", self.log_text());
    }

    /// SIGKILL: no graceful shutdown, no chance to record anything.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait (bounded) for a graceful exit.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "magnum-capi did not stop within 15 s of SIGTERM:\n{}",
            self.log_text()
        );
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let client = reqwest::Client::new();
        let mut req = client
            .request(method, self.url(path))
            .header("accept", "application/json")
            .header("x-user-id", ALICE.user)
            .header("x-project-id", ALICE.project)
            .header("x-roles", ALICE.roles);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn create_cluster(&self) -> Uuid {
        let (st, ct) = self
            .call(
                reqwest::Method::POST,
                "/v1/clustertemplates",
                Some(json!({
                    "name": "ct", "image_id": "ubuntu-jammy", "coe": "kubernetes",
                    "flavor_id": "m1.small", "master_flavor_id": "m1.medium", "keypair_id": "kp",
                    "labels": {"kube_tag": "v1.30.4"},
                })),
            )
            .await;
        assert_eq!(st, 201, "{ct}");
        let (st, c) = self
            .call(
                reqwest::Method::POST,
                "/v1/clusters",
                Some(json!({"name": "durable", "cluster_template_id": ct["uuid"]})),
            )
            .await;
        assert_eq!(st, 202, "{c}");
        Uuid::parse_str(c["uuid"].as_str().expect("uuid")).expect("uuid")
    }

    pub async fn cluster_status(&self, c: Uuid) -> String {
        let (st, body) = self
            .call(reqwest::Method::GET, &format!("/v1/clusters/{c}"), None)
            .await;
        assert_eq!(st, 200, "{body}");
        body["status"].as_str().unwrap_or_default().to_string()
    }

    pub async fn wait_status(&self, c: Uuid, want: &str, within: Duration) {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            last = self.cluster_status(c).await;
            if last == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "cluster {c} stuck in {last}, wanted {want}:\n{}",
            self.log_text()
        );
    }
}
