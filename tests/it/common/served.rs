//! The real binary as tests run it: `magnum-capi serve --dev` on a test database, a loopback
//! port, its log in a file; requests as Alice; SIGKILL, SIGTERM and readiness. Also the previous
//! release's binary, built from this repository's history by `.ci/previous-release.sh`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};
use uuid::Uuid;

use super::wait::{status, until};
use super::{ALICE, As};

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

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The operation worker on (`Server::start`'s environment).
pub const WORKER_ON: (&str, &str) = ("MAGNUM_CAPI__OPERATIONS__WORKER_ENABLED", "true");
/// The operation worker off: operations are recorded, not run.
pub const WORKER_OFF: (&str, &str) = ("MAGNUM_CAPI__OPERATIONS__WORKER_ENABLED", "false");

static PREVIOUS_RELEASE: OnceLock<std::path::PathBuf> = OnceLock::new();

/// The previous release's `magnum-capi` (the tag in `.ci/previous-release`), built by
/// `.ci/previous-release.sh` into `~/.cache/magnum-capi` or found there (blocking: minutes on
/// first use; call it off the runtime).
pub fn previous_release() -> &'static Path {
    PREVIOUS_RELEASE.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/previous-release.sh");
        super::realstack::cached_build(
            &script,
            "previous release",
            "the repository's history (its tag or commit) and the Rust toolchain",
        )
        .join("magnum-capi")
    })
}

impl Server {
    pub async fn start(db_url: &str, env: &[(&str, &str)]) -> Server {
        Server::start_binary(Path::new(env!("CARGO_BIN_EXE_magnum-capi")), db_url, env).await
    }

    /// [`Server::start`] with another build of magnum-capi (the previous release's).
    pub async fn start_binary(binary: &Path, db_url: &str, env: &[(&str, &str)]) -> Server {
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "magnum-capi-durability-{}-{port}.log",
            std::process::id()
        ));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(binary);
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
        let url = self.url("/");
        wait_answering(&mut self.child, &self.log, &url).await;
    }

    /// SIGKILL: no graceful shutdown, no chance to record anything.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait (bounded) for a graceful exit.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        terminate(&mut self.child).await
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.call_as(&ALICE, method, path, body).await
    }

    /// A request as `who`, at the newest microversion (as Magnum's clients ask): the status and
    /// the body (Null when not JSON).
    pub async fn call_as(
        &self,
        who: &As,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let req = super::http()
            .request(method, self.url(path))
            .header("accept", "application/json")
            .header("openstack-api-version", "container-infra latest")
            .header("x-user-id", who.user)
            .header("x-project-id", who.project)
            .header("x-roles", who.roles);
        answer(req, body).await
    }

    /// A cluster template as Alice; its uuid.
    pub async fn create_template(&self) -> String {
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
        ct["uuid"].as_str().expect("uuid").to_string()
    }

    pub async fn create_cluster(&self) -> Uuid {
        let ct = self.create_template().await;
        let (st, c) = self
            .call(
                reqwest::Method::POST,
                "/v1/clusters",
                Some(json!({"name": "durable", "cluster_template_id": ct})),
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

    /// The cluster once its status is `want`.
    pub async fn wait_status(&self, c: Uuid, want: &str) -> (u16, Value) {
        let path = format!("/v1/clusters/{c}");
        status(&format!("cluster {c}"), &[want], || {
            self.call(reqwest::Method::GET, &path, None)
        })
        .await
    }
}

/// Runs `magnum-capi <command> --config <config>` to its end, with no configuration or
/// kubeconfig from the environment; off the test's runtime thread (a simulated management
/// cluster on it must answer the command).
pub async fn run_command(command: &str, config: &std::path::Path) -> std::process::Output {
    let (command, config) = (command.to_string(), config.to_path_buf());
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
            .args([command.as_str(), "--config"])
            .arg(&config)
            .env_remove("MAGNUM_CAPI_CONFIG")
            .env_remove("KUBECONFIG")
            .output()
            .expect("running magnum-capi")
    })
    .await
    .expect("magnum-capi ran")
}

/// SIGTERM to `child`, then wait (bounded) for its graceful exit.
pub async fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    until("magnum-capi to exit after SIGTERM", || {
        let exited = child.try_wait().ok().flatten();
        async move { exited }
    })
    .await
}

/// Waits until `url` answers 2xx; panics with the log in `log` if `child` exits first.
pub async fn wait_answering(child: &mut Child, log: &std::path::Path, url: &str) {
    let client = super::http();
    until(&format!("magnum-capi to answer {url}"), || {
        let exited = child.try_wait().ok().flatten();
        let probe = client.get(url).send();
        async move {
            if let Some(status) = exited {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                panic!("magnum-capi exited early ({status}):\n{text}");
            }
            probe
                .await
                .ok()
                .filter(|r| r.status().is_success())
                .map(drop)
        }
    })
    .await;
}

/// Sends `req` with `body` as JSON (if any): the status and the JSON answer (`Null` when the
/// answer is not JSON).
pub async fn answer(mut req: reqwest::RequestBuilder, body: Option<Value>) -> (u16, Value) {
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}
