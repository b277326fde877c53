//! Test harness: one private PostgreSQL per test binary (started from the local binaries, gone
//! when the process exits), a migrated template database, and a fresh database per test.
//! Requests go through the real router in-process; the worker runs only when asked for.
#![allow(dead_code)]

pub mod capi;
pub mod capi_drivers;
pub mod chart;
pub mod clients;
pub mod fakecloud;
pub mod keystone;
pub mod magnum;
pub mod osc;
pub mod realstack;
pub mod served;
pub mod stack;
pub mod tcp_proxy;
pub mod wait;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use magnum_capi::app::{App, AppState, AuthMode};
use magnum_capi::config::Config;
use magnum_capi::db;
use magnum_capi::devdb::EmbeddedPostgres;
use serde_json::Value;
use sqlx::Connection;
use tokio::sync::{OnceCell, watch};
use tower::ServiceExt;

static PG: OnceLock<EmbeddedPostgres> = OnceLock::new();
static TEMPLATE: OnceCell<()> = OnceCell::const_new();
static COUNTER: AtomicUsize = AtomicUsize::new(0);
const TEMPLATE_DB: &str = "magnum_template";

/// The virtualenv a `.ci/*-venv.sh` script builds (or finds cached) and prints; its progress
/// goes to the test's stderr.
pub fn cached_venv(script: &str) -> std::path::PathBuf {
    let out = std::process::Command::new("bash")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(out.status.success(), "{script} failed");
    std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A fresh directory for a test's reports and artefacts, beside the build (`$CARGO_TARGET_DIR`
/// or `target/`), not in the checkout; what an earlier run left there is removed.
pub fn artifact_dir(name: &str) -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The tests' HTTP client: built once (a client's TLS roots take tens of milliseconds to load in
/// a debug build, and the real-stack waits poll for minutes), never reusing a connection (each
/// test has its own runtime: a connection made on another one may be gone).
pub fn http() -> reqwest::Client {
    static HTTP: OnceLock<reqwest::Client> = OnceLock::new();
    HTTP.get_or_init(|| {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("the tests' HTTP client")
    })
    .clone()
}

pub fn pg() -> &'static EmbeddedPostgres {
    PG.get_or_init(|| {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        EmbeddedPostgres::start()
            .expect("start the test PostgreSQL (is Debian's postgresql installed?)")
    })
}

async fn ensure_template() {
    TEMPLATE
        .get_or_init(|| async {
            let mut admin = sqlx::PgConnection::connect(&pg().url("postgres"))
                .await
                .expect("connect admin");
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "CREATE DATABASE {TEMPLATE_DB}"
            )))
            .execute(&mut admin)
            .await
            .expect("create template");
            let cfg = Config::default();
            let pool = db::connect(&pg().url(TEMPLATE_DB), &cfg.database)
                .await
                .expect("template pool");
            db::migrate(&pool).await.expect("migrate template");
            pool.close().await;
            admin.close().await.ok();
        })
        .await;
}

/// A fresh, migrated database; returns its URL.
pub async fn fresh_database() -> String {
    let pg = pg();
    ensure_template().await;
    let name = format!(
        "t_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let mut admin = sqlx::PgConnection::connect(&pg.url("postgres"))
        .await
        .expect("connect admin");
    // Concurrent clones of one template can collide; retry briefly.
    let mut last_err = None;
    for _ in 0..50 {
        match sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}"
        )))
        .execute(&mut admin)
        .await
        {
            Ok(_) => {
                last_err = None;
                break;
            }
            Err(e) => {
                last_err = Some(e);
                // A retry after a collision, not a wait for a state: a short pause.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    if let Some(e) = last_err {
        panic!("create test database: {e}");
    }
    admin.close().await.ok();
    pg.url(&name)
}

pub fn test_config(url: &str) -> Config {
    let mut cfg = Config::default();
    cfg.database.url = Some(url.to_string());
    cfg.database.max_connections = 5;
    cfg.database.min_connections = 0;
    cfg.database.migrate_on_start = false;
    cfg.operations.poll_interval_ms = 50;
    cfg.operations.retry_base_ms = 50;
    // Calls to the real (sqlite-backed) Keystone can exceed the 10 s default while the machine
    // compiles; a test must not fail on that (tests of timeouts set their own).
    cfg.openstack.timeout_secs = 60;
    // API tests: operations complete at once, no management cluster (tests/capi_*.rs use one).
    cfg.driver.kind = magnum_capi::config::DriverKind::Simulated;
    cfg
}

/// A service instance on its own database.
pub struct TestApp {
    pub state: AppState,
    pub url: String,
    stop: Option<watch::Sender<bool>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(true);
        }
    }
}

/// A response: status, headers and the body parsed as JSON (Null when empty).
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Resp {
    /// The `name` of each item of the list body's `collection` (`clustertemplates`,
    /// `nodegroups`, …), in order; an item without a name fails the test.
    pub fn names(&self, collection: &str) -> Vec<String> {
        self.body[collection]
            .as_array()
            .unwrap_or_else(|| panic!("no {collection} in {}", self.body))
            .iter()
            .map(|t| {
                t["name"]
                    .as_str()
                    .unwrap_or_else(|| panic!("an item of {collection} without a name: {t}"))
                    .to_string()
            })
            .collect()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// `errors[0].detail` of a Magnum error body.
    pub fn detail(&self) -> &str {
        self.body["errors"][0]["detail"].as_str().unwrap_or("")
    }
    #[track_caller]
    pub fn assert_status(&self, status: u16) -> &Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.body
        );
        self
    }
}

/// An answer tests read: its HTTP status and JSON body (an in-process [`Resp`] or the real
/// binary's `(status, body)`).
pub trait Answer {
    fn code(&self) -> u16;
    fn json(&self) -> &Value;
}

impl Answer for Resp {
    fn code(&self) -> u16 {
        self.status.as_u16()
    }
    fn json(&self) -> &Value {
        &self.body
    }
}

impl Answer for (u16, Value) {
    fn code(&self) -> u16 {
        self.0
    }
    fn json(&self) -> &Value {
        &self.1
    }
}

pub async fn app() -> TestApp {
    app_with(|_| {}).await
}

pub async fn app_with(tweak: impl FnOnce(&mut Config)) -> TestApp {
    app_with_auth(tweak, |_| AuthMode::DevHeaders).await
}

/// An instance whose requests are authenticated as `auth` decides from the final config.
pub async fn app_with_auth(
    tweak: impl FnOnce(&mut Config),
    auth: impl FnOnce(&Config) -> AuthMode,
) -> TestApp {
    let url = fresh_database().await;
    let mut cfg = test_config(&url);
    tweak(&mut cfg);
    let pool = db::connect(&url, &cfg.database).await.expect("pool");
    let auth = auth(&cfg);
    TestApp {
        state: App::new(pool, cfg, auth),
        url,
        stop: None,
    }
}

/// An instance whose worker executes operations with the simulated driver.
pub async fn app_with_worker() -> TestApp {
    app().await.with_worker()
}

impl TestApp {
    /// Starts the worker (simulated driver) for this instance; it stops when the app is dropped.
    pub fn with_worker(mut self) -> TestApp {
        self.start_worker();
        self
    }

    /// Follows change notifications as `serve` does, so serialised views are reused (without
    /// it they never are); waits until it listens.
    pub async fn with_view_cache(mut self) -> TestApp {
        let tx = self.stop.get_or_insert_with(|| watch::channel(false).0);
        magnum_capi::server::spawn_view_follower(&self.state, tx.subscribe());
        wait::until("the view cache to listen", || async {
            self.state.views.listening().then_some(())
        })
        .await;
        self
    }

    /// Another instance on the same database (another replica), its config tweaked.
    pub async fn twin(&self, tweak: impl FnOnce(&mut Config)) -> TestApp {
        self.twin_at(&self.url.clone(), tweak).await
    }

    /// [`Self::twin`] reaching the database at `url` (the same one, e.g. through a proxy).
    pub async fn twin_at(&self, url: &str, tweak: impl FnOnce(&mut Config)) -> TestApp {
        let mut cfg = self.state.config.clone();
        cfg.database.url = Some(url.to_string());
        tweak(&mut cfg);
        let pool = db::connect(url, &cfg.database).await.expect("pool");
        TestApp {
            state: App::new(pool, cfg, self.state.auth.clone()),
            url: url.to_string(),
            stop: None,
        }
    }

    fn start_worker(&mut self) {
        let t = self;
        let tx = t.stop.get_or_insert_with(|| watch::channel(false).0);
        let rx = tx.subscribe();
        let driver = t.state.backend.clone();
        tokio::spawn(magnum_capi::worker::run(
            t.state.clone(),
            driver,
            "test-worker".into(),
            rx,
        ));
    }
}

/// Who sends a request.
#[derive(Debug, Clone)]
pub struct As {
    pub user: &'static str,
    pub project: &'static str,
    pub roles: &'static str,
}

/// The 400 of a template on a Fedora CoreOS image (`domain::os_distro`), asserted whole by the
/// tests that create one through `--dev` headers and through Keystone.
pub const FCOS_REFUSAL: &str = "Cluster type (vm, fedora-coreos, kubernetes) is not supported \
     by any loaded cluster driver. Loaded drivers support: (vm, debian, kubernetes), (vm, flatcar, \
     kubernetes), (vm, rocky, kubernetes), (vm, rockylinux, kubernetes), (vm, ubuntu, kubernetes), \
     (vm, ubuntu-focal, kubernetes). Fedora CoreOS boots only Ignition spec 3 configs, and Cluster \
     API's kubeadm bootstrap writes spec 2.3: use a Flatcar image.";

pub const ADMIN: As = As {
    user: "admin-user",
    project: "admin-project",
    roles: "admin,member,reader",
};
pub const ALICE: As = As {
    user: "alice",
    project: "p-alice",
    roles: "member,reader",
};
pub const BOB: As = As {
    user: "bob",
    project: "p-bob",
    roles: "member,reader",
};
pub const READER: As = As {
    user: "rita",
    project: "p-alice",
    roles: "reader",
};

impl TestApp {
    pub async fn raw(&self, req: Request<Body>) -> Resp {
        let svc = magnum_capi::api::service(self.state.clone());
        let resp = svc.oneshot(req).await.expect("infallible");
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Resp {
            status,
            headers,
            body,
        }
    }

    /// A request as `who`, with an optional microversion and JSON body.
    pub async fn call(
        &self,
        who: &As,
        method: &str,
        path: &str,
        version: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let headers = [
            ("x-user-id", who.user),
            ("x-project-id", who.project),
            ("x-roles", who.roles),
        ];
        self.send(&headers, method, path, version, body).await
    }

    /// A request carrying a Keystone token (`None`: no token at all).
    pub async fn call_token(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        version: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let headers: Vec<(&str, &str)> = token.map(|t| ("x-auth-token", t)).into_iter().collect();
        self.send(&headers, method, path, version, body).await
    }

    async fn send(
        &self,
        headers: &[(&str, &str)],
        method: &str,
        path: &str,
        version: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let mut b = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(path)
            .header("host", "127.0.0.1:9511")
            .header("accept", "application/json");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        if let Some(v) = version {
            b = b.header("openstack-api-version", format!("container-infra {v}"));
        }
        let req = match body {
            Some(v) => b
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&v).expect("json"))),
            None => b.body(Body::empty()),
        }
        .expect("request");
        self.raw(req).await
    }

    pub async fn get(&self, who: &As, path: &str) -> Resp {
        self.call(who, "GET", path, None, None).await
    }
    pub async fn get_v(&self, who: &As, path: &str, v: &str) -> Resp {
        self.call(who, "GET", path, Some(v), None).await
    }
    pub async fn post(&self, who: &As, path: &str, body: Value) -> Resp {
        self.call(who, "POST", path, None, Some(body)).await
    }
    pub async fn post_v(&self, who: &As, path: &str, v: &str, body: Value) -> Resp {
        self.call(who, "POST", path, Some(v), Some(body)).await
    }
    pub async fn patch(&self, who: &As, path: &str, body: Value) -> Resp {
        self.call(who, "PATCH", path, None, Some(body)).await
    }
    pub async fn patch_v(&self, who: &As, path: &str, v: &str, body: Value) -> Resp {
        self.call(who, "PATCH", path, Some(v), Some(body)).await
    }
    pub async fn delete(&self, who: &As, path: &str) -> Resp {
        self.call(who, "DELETE", path, None, None).await
    }
    pub async fn delete_v(&self, who: &As, path: &str, v: &str) -> Resp {
        self.call(who, "DELETE", path, Some(v), None).await
    }

    /// Creates a template as `who` and returns its uuid.
    pub async fn template(&self, who: &As, name: &str) -> String {
        let r = self
            .post(
                who,
                "/v1/clustertemplates",
                serde_json::json!({
                    "name": name, "image_id": "ubuntu-jammy", "coe": "kubernetes",
                    "flavor_id": "m1.small", "master_flavor_id": "m1.medium", "keypair_id": "kp",
                    "docker_volume_size": 10, "labels": {"kube_tag": "v1.30.4"},
                }),
            )
            .await;
        r.assert_status(201);
        r.body["uuid"].as_str().expect("uuid").to_string()
    }

    /// Creates a cluster as `who` from `template` and returns its uuid.
    pub async fn cluster(&self, who: &As, name: &str, template: &str) -> String {
        let r = self
            .post(
                who,
                "/v1/clusters",
                serde_json::json!({"name": name, "cluster_template_id": template}),
            )
            .await;
        r.assert_status(202);
        r.body["uuid"].as_str().expect("uuid").to_string()
    }

    /// The cluster once its status is `status` (`"GONE"`: the 404), as `who` reads it.
    pub async fn wait_cluster(&self, who: &As, uuid: &str, status: &str) -> Resp {
        let path = format!("/v1/clusters/{uuid}");
        wait::status(&format!("cluster {uuid}"), &[status], || {
            self.get(who, &path)
        })
        .await
    }

    /// The cluster once its status is `status` (`"GONE"`: the 404), read with a Keystone token
    /// at the default microversion (whose view still has `stack_id`).
    pub async fn wait_cluster_token(&self, token: &str, uuid: &str, status: &str) -> Resp {
        let path = format!("/v1/clusters/{uuid}");
        wait::status(&format!("cluster {uuid}"), &[status], || {
            self.call_token(Some(token), "GET", &path, None, None)
        })
        .await
    }

    /// Runs a write the way another replica would (straight to PostgreSQL) and waits until this
    /// instance has heard of it (its change notification retired the serialised views);
    /// returns the rows affected.
    pub async fn write_sql(&self, sql: &str) -> u64 {
        let before = self.state.views.peek();
        let n = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&self.state.pool)
            .await
            .expect("sql")
            .rows_affected();
        if let Some(g) = before.filter(|_| n > 0) {
            wait::until(&format!("the change notification of: {sql}"), || async {
                (self.state.views.peek() != Some(g)).then_some(())
            })
            .await;
        }
        n
    }

    /// Runs SQL against this test's database.
    pub async fn sql_i64(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        let (n,): (i64,) = sqlx::query_as(sql)
            .fetch_one(&self.state.pool)
            .await
            .expect("sql");
        n
    }
}

/// A worker on an existing test app, so a test can observe `*_IN_PROGRESS` first and then let
/// the simulated driver finish; `stop` waits until it is gone.
pub struct Worker {
    tx: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<()>,
}

pub fn start_worker(t: &TestApp) -> Worker {
    start_worker_with(t, t.state.backend.clone())
}

/// A worker running `driver` (e.g. one that fails on purpose).
pub fn start_worker_with(
    t: &TestApp,
    driver: std::sync::Arc<dyn magnum_capi::driver::Backend>,
) -> Worker {
    let (tx, rx) = watch::channel(false);
    let handle = tokio::spawn(magnum_capi::worker::run(
        t.state.clone(),
        driver,
        "test-worker".into(),
        rx,
    ));
    Worker { tx, handle }
}

impl Worker {
    pub async fn stop(self) {
        let _ = self.tx.send(true);
        let _ = self.handle.await;
    }
}

/// The `body` of a response captured from a real Magnum (`../shared/reference/magnum-samples`,
/// beside the checkout).
pub fn sample(name: &str) -> Value {
    let path = format!(
        "{}/../shared/reference/magnum-samples/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    v["body"].clone()
}

/// The sorted keys of a JSON object (for shape comparisons with the samples).
pub fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

/// Magnum's error body for an exception raised in the app (`code: "client"`, title = the
/// detail up to its first '.'; `api_versions_errors.rs` pins titles literally).
pub fn magnum_error(status: u16, detail: &str) -> Value {
    let title = detail.split('.').next().unwrap_or(detail);
    serde_json::json!({"errors": [{"request_id": "", "code": "client", "status": status,
        "title": title, "detail": detail, "links": []}]})
}

/// Magnum's 403 detail for a project at its cluster quota of `n`.
pub fn quota_message(n: i64) -> String {
    format!(
        "Resource limit exceeded: You have reached the maximum clusters per project, {n}. You may delete a cluster to make room for a new one."
    )
}

/// Asserts that `r` is Magnum's answer to a refused request: HTTP `status`, and Magnum's error
/// body (`{"errors": [{"status", "code", "title", "detail", …}]}`, one error of that status)
/// whose `detail` contains `detail` (pass Magnum's whole sentence to pin it). Returns the detail.
#[track_caller]
pub fn assert_magnum_error<'r>(r: &'r impl Answer, status: u16, detail: &str) -> &'r str {
    let body = r.json();
    assert_eq!(r.code(), status, "unexpected status; body: {body}");
    let errors = body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("not Magnum's error body: {body}"));
    assert_eq!(errors.len(), 1, "{body}");
    let e = &errors[0];
    assert_eq!(e["status"], status, "{body}");
    assert!(
        e["code"].is_string() && e["title"].is_string(),
        "not Magnum's error body: {body}"
    );
    let text = e["detail"]
        .as_str()
        .unwrap_or_else(|| panic!("no detail: {body}"));
    assert!(
        text.contains(detail),
        "detail {text:?} does not contain {detail:?}"
    );
    text
}

/// The JSON object with the keys in `fields` only (to compare a selection of a client's output).
pub fn pick(v: &Value, fields: &[&str]) -> Value {
    Value::Object(
        fields
            .iter()
            .map(|f| (f.to_string(), v.get(*f).cloned().unwrap_or(Value::Null)))
            .collect(),
    )
}

/// Moves cluster `uuid`'s application-credential expiry to a day from now (as PostgreSQL sees
/// it): what makes the maintenance pass's renewal due.
pub async fn credential_due_in_a_day(pool: &sqlx::PgPool, uuid: &str) {
    sqlx::query(
        "UPDATE cluster SET app_cred_expires_at = now() + interval '1 day' WHERE uuid = $1::uuid",
    )
    .bind(uuid)
    .execute(pool)
    .await
    .unwrap();
}

/// Runs `sql` in a transaction with user triggers off, as a logical replication subscriber
/// writes: a change PostgreSQL does not announce. Returns the rows it changed.
pub async fn write_unannounced(pool: &sqlx::PgPool, sql: &str) -> u64 {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .expect("triggers off");
    let n = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut *tx)
        .await
        .expect("sql")
        .rows_affected();
    tx.commit().await.expect("commit");
    n
}
