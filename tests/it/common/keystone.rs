//! A real Keystone for integration tests: one per test process, started on first use of
//! [`keystone()`], seeded through its REST API, gone when the process exits.
//!
//! * Python side: a virtualenv built by `.ci/keystone-venv.sh` and cached outside the repository
//!   in `${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}/venv-<hash of the pins>`. It is (re)built
//!   when its `.complete` marker is missing, under an exclusive lock on `<cache>/venv.lock`, so
//!   concurrent test binaries install once.
//! * Keystone side: a temporary directory with `keystone.conf` (sqlite in WAL mode with a 60 s
//!   busy timeout — two workers writing at once otherwise fail requests with "database is
//!   locked" under load —, fernet tokens, no cache, bcrypt at the minimum cost so password auth is fast), `keystone-manage` db_sync /
//!   fernet_setup / credential_setup / bootstrap, then gunicorn (2 sync workers) on a free
//!   loopback port, through a wrapper module that empties `sys.argv` (oslo.config would otherwise
//!   parse gunicorn's flags and every worker would exit with "unrecognized arguments").
//! * The gunicorn master is forked from a long-lived spawner thread with `PR_SET_PDEATHSIG`
//!   (SIGINT = quick shutdown), and a gunicorn `post_fork` hook gives every worker
//!   `PR_SET_PDEATHSIG(SIGKILL)`, so nothing outlives a SIGKILLed test process. Temporary
//!   directories are left behind at exit (statics are not dropped) and swept by the next start.
//! * Seed: projects `alpha`, `beta`, `service`; users `alice` (member of alpha), `bob` (member of
//!   beta), `rita` (reader of alpha), `svc-magnum` (admin and service on service) plus the
//!   bootstrap `admin` (admin on project `admin`, and on the system). Implied roles come from
//!   keystone 30's bootstrap: admin ⇒ manager ⇒ member ⇒ reader (plus admin ⇒ member), so a
//!   member token carries `member, reader`, an admin one `admin, manager, member, reader`
//!   (checked; missing links would be created). Passwords come from [`password`].
//!
//! Cost, measured on the 2-core Debian 12 / Python 3.11 machine (shared, load 1–4):
//! * one-time venv build (`.ci/keystone-venv.sh`, empty pip cache): 63 s;
//! * per test process, first [`keystone()`] call: 17–19 s = keystone-manage 4.5–6 s (one Python
//!   import, the four steps forked from it, three in parallel) + gunicorn `--preload` with 2
//!   workers answering 3.5–4.5 s + seeding 6–10 s (every Keystone request costs 0.3–0.6 s here:
//!   with `[cache] enabled = false` token validation alone runs ~300 SQL queries);
//! * stop() ~0.05 s, start() ~3 s; a password token ~0.3 s (cached per (user, project)), a
//!   validation ~0.4 s.
//!
//! The instance is shared by all tests of a process: [`Keystone::stop`] takes it away from every
//! concurrently running test, and [`Keystone::register_endpoint`] replaces the one
//! `container-infra` endpoint. Tests that need either in isolation can use a private instance
//! from [`Keystone::launch`] (another ~17 s) or serialize themselves.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fs::{self, File, TryLockError};
use std::future::Future;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::signal::{self, Signal};
use nix::unistd::{Group, Pid, User};
use serde_json::{Value, json};

/// The domain everything lives in.
pub const DOMAIN: &str = "default";
pub const REGION: &str = "RegionOne";
/// Bootstrap admin (role admin on project `admin` and on the system).
pub const ADMIN_USER: &str = "admin";
pub const ADMIN_PROJECT: &str = "admin";
/// The service user the API under test validates tokens with.
pub const SERVICE_USER: &str = "svc-magnum";
pub const SERVICE_PROJECT: &str = "service";
pub const SERVICE_TYPE: &str = "container-infra";
pub const SERVICE_NAME: &str = "magnum";

/// Projects created in the default domain.
pub const PROJECTS: &[&str] = &["alpha", "beta", SERVICE_PROJECT];
/// (user, project, roles) created by the seed.
pub const ASSIGNMENTS: &[(&str, &str, &[&str])] = &[
    ("alice", "alpha", &["member"]),
    ("bob", "beta", &["member"]),
    ("rita", "alpha", &["reader"]),
    (SERVICE_USER, SERVICE_PROJECT, &["admin", "service"]),
];

/// The password of a seeded user (also of `admin`).
pub fn password(user: &str) -> String {
    format!("{user}-Secret-1")
}

const VENV_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/keystone-venv.sh");
const DIR_PREFIX: &str = "magnum-capi-keystone-";
const OWNER_LOCK: &str = ".owner.lock";
const WSGI_MODULE: &str = "keystone_test_wsgi";
const SETUP_MODULE: &str = "keystone_test_setup";
const GUNICORN_CONF: &str = "keystone_test_gunicorn.py";
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

static SHARED: OnceLock<Keystone> = OnceLock::new();

/// The Keystone of this test process (started on first call; panics when it cannot start).
pub fn keystone() -> &'static Keystone {
    SHARED.get_or_init(|| {
        // On a plain thread: the caller may be inside a tokio runtime, and seeding builds one.
        thread::spawn(Keystone::launch)
            .join()
            .unwrap_or_else(|_| panic!("starting Keystone panicked"))
            .unwrap_or_else(|e| panic!("starting the test Keystone: {e:#}"))
    })
}

pub struct Keystone {
    /// `http://127.0.0.1:PORT/v3`
    pub url: String,
    pub port: u16,
    /// Temporary directory: keystone.conf, keystone.db, keys, gunicorn.log.
    pub dir: PathBuf,
    pub venv: PathBuf,
    /// name → id
    pub user_ids: HashMap<String, String>,
    pub project_ids: HashMap<String, String>,
    pub role_ids: HashMap<String, String>,
    /// Id of the `container-infra` service.
    pub service_id: String,
    child: Mutex<Option<Child>>,
    tokens: Mutex<HashMap<(String, String), String>>,
    endpoint: Mutex<Option<(String, String)>>,
    client: reqwest::Client,
    _owner: File,
}

impl Keystone {
    /// Starts a new, private Keystone (the shared one is [`keystone()`]). Blocking; do not call
    /// from inside an async runtime thread that must stay responsive (it builds its own runtime
    /// on the calling thread for seeding, so call it from a plain thread).
    pub fn launch() -> Result<Keystone> {
        let t0 = Instant::now();
        let venv = ensure_venv()?;
        let t_venv = t0.elapsed();
        let tmp = std::env::temp_dir();
        sweep_stale(&tmp);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = tmp.join(format!("{DIR_PREFIX}{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let owner = File::create(dir.join(OWNER_LOCK)).context("creating owner lock")?;
        owner.lock().context("locking owner lock")?;

        let port = free_port()?;
        let url = format!("http://127.0.0.1:{port}/v3");
        write_config(&dir)?;

        let user = User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .ok_or_else(|| anyhow!("no name for the current uid"))?;
        let group = Group::from_gid(nix::unistd::getgid())
            .ok()
            .flatten()
            .map(|g| g.name)
            .ok_or_else(|| anyhow!("no name for the current gid"))?;
        let owner_flags = json!(["--keystone-user", user, "--keystone-group", group]);
        let mut fernet = json!(["fernet_setup"]);
        let mut credential = json!(["credential_setup"]);
        for v in [&mut fernet, &mut credential] {
            if let (Some(a), Some(f)) = (v.as_array_mut(), owner_flags.as_array()) {
                a.extend(f.iter().cloned());
            }
        }
        let admin_pw = password(ADMIN_USER);
        let bootstrap = json!([
            "bootstrap",
            "--bootstrap-password",
            admin_pw,
            "--bootstrap-username",
            ADMIN_USER,
            "--bootstrap-project-name",
            ADMIN_PROJECT,
            "--bootstrap-admin-url",
            url,
            "--bootstrap-internal-url",
            url,
            "--bootstrap-public-url",
            url,
            "--bootstrap-region-id",
            REGION,
        ]);
        // Stages: db_sync, fernet_setup and credential_setup are independent and run together;
        // then bootstrap.
        let stages = json!([[["db_sync"], fernet, credential], [bootstrap]]);
        let mut cmd = Command::new(venv.join("bin/python"));
        cmd.arg(dir.join(format!("{SETUP_MODULE}.py")))
            .arg(dir.join("keystone.conf"))
            .arg(stages.to_string())
            .current_dir(&dir)
            .stdin(Stdio::null());
        scrub_env(&mut cmd);
        let out = cmd.output().context("running keystone-manage steps")?;
        if !out.status.success() {
            bail!(
                "keystone-manage steps failed ({}):\n{}",
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 40)
            );
        }
        let t_manage = t0.elapsed();

        let child = launch_gunicorn(&venv, &dir, port)?;
        let t_ready = t0.elapsed();
        let client = reqwest::Client::builder()
            // Each test has its own runtime: never reuse a connection made on another one.
            .pool_max_idle_per_host(0)
            .timeout(HTTP_TIMEOUT)
            .build()
            .context("building the HTTP client")?;
        let mut ks = Keystone {
            url,
            port,
            dir,
            venv,
            user_ids: HashMap::new(),
            project_ids: HashMap::new(),
            role_ids: HashMap::new(),
            service_id: String::new(),
            child: Mutex::new(Some(child)),
            tokens: Mutex::new(HashMap::new()),
            endpoint: Mutex::new(None),
            client,
            _owner: owner,
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building a runtime for seeding")?
            .block_on(ks.seed())?;
        eprintln!(
            "test Keystone at {} ready in {:.1?} (venv {:.1?}, keystone-manage {:.1?}, \
             gunicorn {:.1?}, seed {:.1?}); dir {}",
            ks.url,
            t0.elapsed(),
            t_venv,
            t_manage - t_venv,
            t_ready - t_manage,
            t0.elapsed() - t_ready,
            ks.dir.display()
        );
        Ok(ks)
    }

    /// Id of a seeded user (`admin`, `alice`, `bob`, `rita`, `svc-magnum`).
    pub fn user_id(&self, name: &str) -> &str {
        self.user_ids
            .get(name)
            .unwrap_or_else(|| panic!("no seeded user {name}"))
    }

    /// Id of a seeded project (`admin`, `alpha`, `beta`, `service`).
    pub fn project_id(&self, name: &str) -> &str {
        self.project_ids
            .get(name)
            .unwrap_or_else(|| panic!("no seeded project {name}"))
    }

    /// Id of a role (`admin`, `member`, `reader`, `service`).
    pub fn role_id(&self, name: &str) -> &str {
        self.role_ids
            .get(name)
            .unwrap_or_else(|| panic!("no role {name}"))
    }

    /// A project-scoped token for `user` on `project` (password auth; cached).
    pub async fn token(&self, user: &str, project: &str) -> String {
        self.try_token(user, project)
            .await
            .unwrap_or_else(|e| panic!("token for {user} on {project}: {e:#}"))
    }

    /// The token the API under test authenticates with (`svc-magnum` on `service`).
    pub async fn service_token(&self) -> String {
        self.token(SERVICE_USER, SERVICE_PROJECT).await
    }

    pub async fn admin_token(&self) -> String {
        self.token(ADMIN_USER, ADMIN_PROJECT).await
    }

    /// A JSON request to Keystone as the admin that must succeed (status < 300): the body.
    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let token = self.admin_token().await;
        let (status, body) = self
            .request(method, path, Some(&token), None, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"));
        assert!(status < 300, "{method} {path}: {status} {body}");
        body
    }

    /// A new user `<prefix>-<random>` (password as the seeded users') with `role` on `project`
    /// (a seeded one): (name, id).
    pub async fn new_user(&self, prefix: &str, role: &str, project: &str) -> (String, String) {
        let name = format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let u = self
            .admin(
                "POST",
                "/users",
                Some(json!({"user": {"name": name, "domain_id": DOMAIN,
                    "password": password(&name)}})),
            )
            .await;
        let id = u["user"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no user id: {u}"))
            .to_string();
        let path = format!(
            "/projects/{}/users/{id}/roles/{}",
            self.project_id(project),
            self.role_id(role)
        );
        self.admin("PUT", &path, None).await;
        (name, id)
    }

    /// A new user with `role` on `project` and a token of theirs there; (id, token).
    pub async fn new_user_token(
        &self,
        prefix: &str,
        role: &str,
        project: &str,
    ) -> (String, String) {
        let (name, id) = self.new_user(prefix, role, project).await;
        let token = self.token(&name, project).await;
        (id, token)
    }

    pub async fn try_token(&self, user: &str, project: &str) -> Result<String> {
        let key = (user.to_string(), project.to_string());
        if let Some(t) = self.lock_tokens().get(&key) {
            return Ok(t.clone());
        }
        let token = self.issue_token(user, project).await?;
        self.lock_tokens().insert(key, token.clone());
        Ok(token)
    }

    /// Issues a new token (never cached).
    pub async fn issue_token(&self, user: &str, project: &str) -> Result<String> {
        self.issue_scoped(
            user,
            json!({"project": {"name": project, "domain": {"id": DOMAIN}}}),
        )
        .await
    }

    /// Issues a system-scoped token (`{"system": {"all": true}}`) for `user` (admin has the
    /// system role assignment from bootstrap).
    pub async fn system_token(&self, user: &str) -> Result<String> {
        self.issue_scoped(user, json!({"system": {"all": true}}))
            .await
    }

    /// Password authentication writes to Keystone's database (the user's failed-auth/last-active
    /// bookkeeping); with sqlite, two workers doing so at once can fail one with "database is
    /// locked" (a 500: WAL mode hands out SQLITE_BUSY at once when a reader must become a writer,
    /// whatever the busy timeout). A production Keystone on MySQL does not; the harness retries.
    async fn issue_scoped(&self, user: &str, scope: Value) -> Result<String> {
        let mut attempt = 0;
        loop {
            match self.issue_scoped_once(user, &scope).await {
                Err(e) if attempt < 4 && format!("{e:#}").contains("500 Internal Server Error") => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await;
                }
                other => return other,
            }
        }
    }

    async fn issue_scoped_once(&self, user: &str, scope: &Value) -> Result<String> {
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"id": DOMAIN}, "password": password(user)}}},
            "scope": scope,
        }});
        let resp = self
            .client
            .post(format!("{}/auth/tokens", self.url))
            .json(&body)
            .send()
            .await
            .context("POST /v3/auth/tokens")?;
        let status = resp.status();
        let token = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match token {
            Some(t) if status.as_u16() == 201 => Ok(t),
            _ => bail!(
                "POST /v3/auth/tokens: {status}: {}",
                resp.text().await.unwrap_or_default()
            ),
        }
    }

    /// Revokes `token` (DELETE /v3/auth/tokens as admin) and forgets it if cached.
    pub async fn revoke(&self, token: &str) {
        let admin = self.admin_token().await;
        let resp = self
            .client
            .delete(format!("{}/auth/tokens", self.url))
            .header("x-auth-token", &admin)
            .header("x-subject-token", token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("DELETE /v3/auth/tokens: {e}"));
        let status = resp.status().as_u16();
        assert_eq!(
            status,
            204,
            "revoke: {}",
            resp.text().await.unwrap_or_default()
        );
        self.lock_tokens().retain(|_, t| t != token);
    }

    /// Validates `token` as the service user (GET /v3/auth/tokens), like the API under test
    /// does: `(status, body)`.
    pub async fn validate(&self, token: &str) -> (u16, Value) {
        let svc = self.service_token().await;
        self.request("GET", "/auth/tokens", Some(&svc), Some(token), None)
            .await
            .unwrap_or_else(|e| panic!("GET /v3/auth/tokens: {e:#}"))
    }

    /// A JSON request to Keystone (`path` below `/v3`): `(status, body or Null)`.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        subject: Option<&str>,
        body: Option<Value>,
    ) -> Result<(u16, Value)> {
        let method = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self
            .client
            .request(method.clone(), format!("{}{path}", self.url))
            .header("accept", "application/json");
        if let Some(t) = token {
            req = req.header("x-auth-token", t);
        }
        if let Some(s) = subject {
            req = req.header("x-subject-token", s);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.context("reading body")?;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Ok((status, value))
    }

    /// Points the public `container-infra` endpoint (RegionOne) at `url`, replacing the previous
    /// one. Blocking; callable from sync code and from inside async tests.
    pub fn register_endpoint(&self, url: &str) {
        block_on(self.register_endpoint_async(url))
            .and_then(|r| r)
            .unwrap_or_else(|e| panic!("registering the container-infra endpoint: {e:#}"));
    }

    pub async fn register_endpoint_async(&self, url: &str) -> Result<()> {
        let admin = self.try_token(ADMIN_USER, ADMIN_PROJECT).await?;
        let existing = self.lock_endpoint().clone();
        match existing {
            Some((_, old)) if old == url => Ok(()),
            Some((id, _)) => {
                let body = json!({"endpoint": {"url": url}});
                let path = format!("/endpoints/{id}");
                expect(
                    200,
                    self.request("PATCH", &path, Some(&admin), None, Some(body)),
                )
                .await?;
                *self.lock_endpoint() = Some((id, url.to_string()));
                Ok(())
            }
            None => {
                let body = json!({"endpoint": {"service_id": self.service_id,
                    "interface": "public", "region_id": REGION, "url": url}});
                let v = expect(
                    201,
                    self.request("POST", "/endpoints", Some(&admin), None, Some(body)),
                )
                .await?;
                let id = str_at(&v, "/endpoint/id")?;
                *self.lock_endpoint() = Some((id, url.to_string()));
                Ok(())
            }
        }
    }

    /// `[keystone]` of the service under test: this Keystone, the service user's password. The
    /// per-call timeout is raised to 60 s: this sqlite-backed Keystone answers in 0.3–0.6 s
    /// on a quiet machine but has been seen to take over 10 s (the default) while the machine
    /// compiles, and a test must not fail on that.
    pub fn service_config(&self) -> magnum_capi::config::KeystoneConfig {
        magnum_capi::config::KeystoneConfig {
            auth_url: Some(self.url.clone()),
            username: Some(SERVICE_USER.into()),
            password: Some(password(SERVICE_USER).into()),
            project_name: Some(SERVICE_PROJECT.into()),
            timeout_secs: 60,
            ..Default::default()
        }
    }

    /// Registers `(type, name, url)` services (e.g. a fake cloud's), each with one public
    /// endpoint in RegionOne.
    pub async fn register_services(&self, services: &[(&str, &str, String)]) -> Result<()> {
        for (kind, name, url) in services {
            self.register_service(kind, name, url).await?;
        }
        Ok(())
    }

    /// Registers another service (`image`, `compute`, `network`, …) with one public endpoint in
    /// RegionOne, so it appears in every token's catalog.
    pub async fn register_service(&self, service_type: &str, name: &str, url: &str) -> Result<()> {
        let admin = self.try_token(ADMIN_USER, ADMIN_PROJECT).await?;
        let body = json!({"service": {"type": service_type, "name": name}});
        let v = expect(
            201,
            self.request("POST", "/services", Some(&admin), None, Some(body)),
        )
        .await?;
        let service_id = str_at(&v, "/service/id")?;
        let body = json!({"endpoint": {"service_id": service_id, "interface": "public",
            "region_id": REGION, "url": url}});
        expect(
            201,
            self.request("POST", "/endpoints", Some(&admin), None, Some(body)),
        )
        .await?;
        // Tokens issued before carry the old catalog.
        self.lock_tokens().clear();
        Ok(())
    }

    /// The URL last given to [`Keystone::register_endpoint`].
    pub fn endpoint_url(&self) -> Option<String> {
        self.lock_endpoint().as_ref().map(|(_, u)| u.clone())
    }

    /// Pid of the gunicorn master, when running.
    pub fn pid(&self) -> Option<u32> {
        self.lock_child().as_ref().map(Child::id)
    }

    /// Whether gunicorn is running (as far as this handle knows).
    pub fn is_running(&self) -> bool {
        self.lock_child().is_some()
    }

    /// Kills gunicorn (master and workers, SIGKILL) and waits until the port refuses
    /// connections. Issued tokens stay valid after [`Keystone::start`]. Idempotent.
    pub fn stop(&self) {
        if let Some(child) = self.lock_child().take() {
            kill_group(child);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while port_open(self.port) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts gunicorn again on the same port and waits until it answers. Idempotent.
    pub fn start(&self) {
        let mut guard = self.lock_child();
        if guard.is_some() {
            return;
        }
        let child = launch_gunicorn(&self.venv, &self.dir, self.port)
            .unwrap_or_else(|e| panic!("restarting Keystone: {e:#}"));
        *guard = Some(child);
    }

    async fn seed(&mut self) -> Result<()> {
        // Keystone answers a request in ~0.3–0.6 s here (hundreds of SQL queries without a
        // cache), so independent requests go out together (2 workers serve them).
        let auth = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": ADMIN_USER, "domain": {"id": DOMAIN}, "password": password(ADMIN_USER)}}},
            "scope": {"project": {"name": ADMIN_PROJECT, "domain": {"id": DOMAIN}}},
        }});
        let resp = self
            .client
            .post(format!("{}/auth/tokens", self.url))
            .json(&auth)
            .send()
            .await
            .context("admin token")?;
        let admin = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("no admin token ({})", resp.status()))?;
        let body: Value = resp.json().await.context("admin token body")?;
        self.user_ids
            .insert(ADMIN_USER.into(), str_at(&body, "/token/user/id")?);
        self.project_ids
            .insert(ADMIN_PROJECT.into(), str_at(&body, "/token/project/id")?);
        self.lock_tokens().insert(
            (ADMIN_USER.to_string(), ADMIN_PROJECT.to_string()),
            admin.clone(),
        );

        let mut batch = vec![
            Req::new("roles", "GET", "/roles", None, 200),
            Req::new("inferences", "GET", "/role_inferences", None, 200),
            Req::new(
                "service",
                "POST",
                "/services",
                Some(
                    json!({"service": {"type": SERVICE_TYPE, "name": SERVICE_NAME,
                    "description": "Container Infrastructure Management Service"}}),
                ),
                201,
            ),
        ];
        for name in PROJECTS {
            let body = json!({"project": {"name": name, "domain_id": DOMAIN,
                "description": "magnum-capi tests"}});
            batch.push(Req::new(
                &format!("project:{name}"),
                "POST",
                "/projects",
                Some(body),
                201,
            ));
        }
        for (user, _, _) in ASSIGNMENTS {
            let body = json!({"user": {"name": user, "domain_id": DOMAIN,
                "password": password(user)}});
            batch.push(Req::new(
                &format!("user:{user}"),
                "POST",
                "/users",
                Some(body),
                201,
            ));
        }
        let got = self.all(&admin, batch).await?;
        for r in got["roles"]["roles"].as_array().into_iter().flatten() {
            self.role_ids.insert(str_at(r, "/name")?, str_at(r, "/id")?);
        }
        for name in PROJECTS {
            let id = str_at(&got[&format!("project:{name}")], "/project/id")?;
            self.project_ids.insert(name.to_string(), id);
        }
        for (user, _, _) in ASSIGNMENTS {
            let id = str_at(&got[&format!("user:{user}")], "/user/id")?;
            self.user_ids.insert(user.to_string(), id);
        }
        self.service_id = str_at(&got["service"], "/service/id")?;

        let mut batch = vec![];
        for role in ["admin", "member", "reader", "service"] {
            if !self.role_ids.contains_key(role) {
                let body = json!({"role": {"name": role}});
                let v = expect(
                    201,
                    self.request("POST", "/roles", Some(&admin), None, Some(body)),
                )
                .await?;
                self.role_ids.insert(role.into(), str_at(&v, "/role/id")?);
            }
        }
        // Implied roles: keystone 30's bootstrap makes admin ⇒ manager ⇒ member ⇒ reader (and
        // admin ⇒ member directly). Make sure admin ⇒* member and member ⇒* reader hold.
        let mut edges: Vec<(String, String)> = vec![];
        for i in got["inferences"]["role_inferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let prior = str_at(i, "/prior_role/name")?;
            for r in i["implies"].as_array().into_iter().flatten() {
                edges.push((prior.clone(), str_at(r, "/name")?));
            }
        }
        for (prior, implied) in [("admin", "member"), ("member", "reader")] {
            if !implies(&edges, prior, implied) {
                let path = format!(
                    "/roles/{}/implies/{}",
                    self.role_ids[prior], self.role_ids[implied]
                );
                batch.push(Req::new(&path, "PUT", &path, None, 201));
            }
        }
        for (user, project, roles) in ASSIGNMENTS {
            for role in *roles {
                let path = format!(
                    "/projects/{}/users/{}/roles/{}",
                    self.project_ids[*project], self.user_ids[*user], self.role_ids[*role]
                );
                batch.push(Req::new(&path, "PUT", &path, None, 204));
            }
        }
        self.all(&admin, batch).await?;
        Ok(())
    }

    /// Sends `reqs` concurrently; returns their bodies by tag.
    async fn all(&self, token: &str, reqs: Vec<Req>) -> Result<HashMap<String, Value>> {
        let mut set = tokio::task::JoinSet::new();
        for r in reqs {
            let client = self.client.clone();
            let url = format!("{}{}", self.url, r.path);
            let token = token.to_string();
            set.spawn(async move {
                let method = reqwest::Method::from_bytes(r.method.as_bytes())?;
                let mut req = client
                    .request(method, &url)
                    .header("x-auth-token", token)
                    .header("accept", "application/json");
                if let Some(b) = &r.body {
                    req = req.json(b);
                }
                let resp = req
                    .send()
                    .await
                    .with_context(|| format!("{} {}", r.method, r.path))?;
                let status = resp.status().as_u16();
                let text = resp.text().await.unwrap_or_default();
                if status != r.status {
                    bail!(
                        "{} {}: expected {}, got {status}: {text}",
                        r.method,
                        r.path,
                        r.status
                    );
                }
                let v = serde_json::from_str(&text).unwrap_or(Value::Null);
                Ok::<_, anyhow::Error>((r.tag, v))
            });
        }
        let mut out = HashMap::new();
        while let Some(res) = set.join_next().await {
            let (tag, v) = res.context("seed task")??;
            out.insert(tag, v);
        }
        Ok(out)
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn lock_child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn lock_endpoint(&self) -> std::sync::MutexGuard<'_, Option<(String, String)>> {
        self.endpoint.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Keystone {
    /// Only private instances are dropped (the shared one lives in a static).
    fn drop(&mut self) {
        if let Some(child) = self.lock_child().take() {
            kill_group(child);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

struct Req {
    tag: String,
    method: &'static str,
    path: String,
    body: Option<Value>,
    status: u16,
}

impl Req {
    fn new(tag: &str, method: &'static str, path: &str, body: Option<Value>, status: u16) -> Req {
        Req {
            tag: tag.to_string(),
            method,
            path: path.to_string(),
            body,
            status,
        }
    }
}

/// Whether `prior` implies `implied`, directly or through other roles.
fn implies(edges: &[(String, String)], prior: &str, implied: &str) -> bool {
    let mut seen = vec![prior.to_string()];
    let mut i = 0;
    while i < seen.len() {
        let cur = seen[i].clone();
        for (p, r) in edges {
            if *p == cur && !seen.contains(r) {
                seen.push(r.clone());
            }
        }
        i += 1;
    }
    seen.iter().any(|r| r == implied)
}

/// Expects `status` from a request and returns its body.
async fn expect(status: u16, req: impl Future<Output = Result<(u16, Value)>>) -> Result<Value> {
    let (got, body) = req.await?;
    if got != status {
        bail!("expected {status}, got {got}: {body}");
    }
    Ok(body)
}

fn str_at(v: &Value, pointer: &str) -> Result<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no string at {pointer} in {v}"))
}

/// Runs a future to completion on a fresh current-thread runtime on a scoped thread, so it works
/// from sync code and from inside another runtime alike.
fn block_on<F>(fut: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    thread::scope(|s| {
        s.spawn(|| -> Result<F::Output> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(rt.block_on(fut))
        })
        .join()
        .map_err(|_| anyhow!("helper thread panicked"))?
    })
}

// ---------------------------------------------------------------------------------------------
// Virtualenv
// ---------------------------------------------------------------------------------------------

/// Returns the venv directory, building it first when it is missing or incomplete.
fn ensure_venv() -> Result<PathBuf> {
    let out = Command::new("bash")
        .args([VENV_SCRIPT, "--print-dir"])
        .output()
        .with_context(|| format!("running {VENV_SCRIPT}"))?;
    if !out.status.success() {
        bail!(
            "{VENV_SCRIPT} --print-dir failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let venv = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if venv_complete(&venv) {
        return Ok(venv);
    }
    let cache = venv
        .parent()
        .ok_or_else(|| anyhow!("venv path {} has no parent", venv.display()))?;
    fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let lock = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(cache.join("venv.lock"))
        .context("opening venv.lock")?;
    // Another test binary may be installing right now: wait for it, then look again.
    lock.lock().context("locking venv.lock")?;
    if venv_complete(&venv) {
        return Ok(venv);
    }
    eprintln!(
        "building the Keystone virtualenv {} (about a minute)",
        venv.display()
    );
    let out = Command::new("bash")
        .arg(VENV_SCRIPT)
        .env("MAGNUM_CAPI_VENV_LOCK_HELD", "1")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {VENV_SCRIPT}"))?;
    drop(lock);
    if !out.status.success() || !venv_complete(&venv) {
        bail!(
            "{VENV_SCRIPT} failed ({}):\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 40)
        );
    }
    Ok(venv)
}

fn venv_complete(venv: &Path) -> bool {
    venv.join(".complete").is_file()
        && venv.join("bin/gunicorn").is_file()
        && venv.join("bin/keystone-manage").is_file()
}

// ---------------------------------------------------------------------------------------------
// Keystone processes
// ---------------------------------------------------------------------------------------------

fn write_config(dir: &Path) -> Result<()> {
    let d = dir.display();
    let conf = format!(
        "[DEFAULT]\n\
         use_stderr = true\n\
         [database]\n\
         connection = sqlite:///{d}/keystone.db?timeout=60\n\
         [token]\n\
         provider = fernet\n\
         expiration = 86400\n\
         [fernet_tokens]\n\
         key_repository = {d}/fernet-keys\n\
         [credential]\n\
         key_repository = {d}/credential-keys\n\
         [cache]\n\
         enabled = false\n\
         [identity]\n\
         password_hash_algorithm = bcrypt\n\
         password_hash_rounds = 4\n"
    );
    fs::write(dir.join("keystone.conf"), conf).context("writing keystone.conf")?;
    // oslo.config parses sys.argv: gunicorn's flags would make every worker exit.
    let wrapper = format!(
        "import os, sys\n\
         sys.argv = sys.argv[:1]\n\
         import sqlite3\n\
         _db = sqlite3.connect(os.path.join({dir:?}, 'keystone.db'))\n\
         _db.execute('PRAGMA journal_mode=WAL')\n\
         _db.close()\n\
         os.environ['OS_KEYSTONE_CONFIG_DIR'] = {dir:?}\n\
         os.environ['OS_KEYSTONE_CONFIG_FILES'] = 'keystone.conf'\n\
         from keystone.server.wsgi import initialize_public_application\n\
         application = initialize_public_application()\n",
        dir = d.to_string()
    );
    fs::write(dir.join(format!("{WSGI_MODULE}.py")), wrapper).context("writing the wrapper")?;
    fs::write(dir.join(GUNICORN_CONF), GUNICORN_CONF_PY).context("writing gunicorn conf")?;
    fs::write(dir.join(format!("{SETUP_MODULE}.py")), SETUP_PY).context("writing setup")?;
    Ok(())
}

/// gunicorn config: every worker dies with the master (the master itself gets
/// PR_SET_PDEATHSIG from the harness).
const GUNICORN_CONF_PY: &str = r#"
import ctypes, signal

def post_fork(server, worker):
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
"#;

/// Runs `keystone-manage` steps with one Python import: the interpreter imports keystone once and
/// forks one child per step (importing keystone costs ~3.5 s of CPU per process).
/// argv: config file, JSON list of stages, each a list of steps run in parallel.
const SETUP_PY: &str = r#"
import json, os, sys, traceback
import keystone.cmd.manage as manage
import keystone.server.backends  # noqa: F401  (the heavy imports every step needs)

conf, stages = sys.argv[1], json.loads(sys.argv[2])

def run(step):
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        sys.argv = ["keystone-manage", "--config-file", conf] + step
        manage.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

for stage in stages:
    pids = {run(step): step for step in stage}
    failed = []
    for pid, step in pids.items():
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            failed.append(step[0])
    if failed:
        print("keystone-manage failed: " + ", ".join(failed), file=sys.stderr)
        sys.exit(1)
"#;

fn scrub_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let b = k.as_encoded_bytes();
        if b.starts_with(b"OS_") || b.starts_with(b"PYTHON") || b == b"VIRTUAL_ENV" {
            cmd.env_remove(k);
        }
    }
}

/// Starts gunicorn on `port` and waits until `GET /v3` answers 200.
fn launch_gunicorn(venv: &Path, dir: &Path, port: u16) -> Result<Child> {
    let log = dir.join("gunicorn.log");
    let log_file = File::options()
        .create(true)
        .append(true)
        .open(&log)
        .context("opening gunicorn.log")?;
    let start_offset = log_file.metadata().map(|m| m.len()).unwrap_or(0);
    let log_err = log_file.try_clone()?;
    let mut cmd = Command::new(venv.join("bin/gunicorn"));
    cmd.args(["--bind", &format!("127.0.0.1:{port}")])
        .args([
            "--workers",
            "2",
            "--preload",
            "--timeout",
            "300",
            "--graceful-timeout",
            "2",
        ])
        .arg("--config")
        .arg(dir.join(GUNICORN_CONF))
        .args(["--worker-tmp-dir", "/dev/shm", "--log-level", "warning"])
        .arg("--chdir")
        .arg(dir)
        .arg("--pythonpath")
        .arg(dir)
        .arg(format!("{WSGI_MODULE}:application"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        // Own process group, so stop() can kill master and workers together.
        .process_group(0);
    scrub_env(&mut cmd);
    let parent_pid = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (prctl, getppid) without allocating or taking locks.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGINT).map_err(io::Error::from)?;
            if nix::unistd::getppid() != parent_pid {
                return Err(io::Error::from_raw_os_error(
                    nix::errno::Errno::ESRCH as i32,
                ));
            }
            Ok(())
        });
    }
    let mut child = spawn_from_spawner_thread(cmd).context("starting gunicorn")?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "gunicorn exited ({status}) before answering:\n{}",
                log_since(&log, start_offset)
            );
        }
        if http_status(port, "/v3") == Some(200) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            kill_group(child);
            bail!(
                "Keystone did not answer on port {port} within {READY_TIMEOUT:?}:\n{}",
                log_since(&log, start_offset)
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn kill_group(mut child: Child) {
    // The master leads its own process group; workers are in it too.
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Status of a plain `GET path` on 127.0.0.1:port, or None when nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(250)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\
         Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 16];
    let mut n = 0;
    while n < 12 {
        match s.read(&mut head[n..]) {
            Ok(0) | Err(_) => return None,
            Ok(k) => n += k,
        }
    }
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_millis(250),
    )
    .is_ok()
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn log_since(log: &Path, offset: u64) -> String {
    let read = || -> io::Result<String> {
        let mut f = File::open(log)?;
        f.seek(SeekFrom::Start(offset))?;
        let mut s = String::new();
        f.read_to_string(&mut s)?;
        Ok(s)
    };
    tail(&read().unwrap_or_default(), 40)
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Removes directories of earlier test processes that are gone (their owner lock is free).
fn sweep_stale(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        if !e
            .file_name()
            .as_encoded_bytes()
            .starts_with(DIR_PREFIX.as_bytes())
        {
            continue;
        }
        let path = e.path();
        let Ok(f) = File::open(path.join(OWNER_LOCK)) else {
            continue;
        };
        match f.try_lock() {
            Ok(()) => {
                let _ = fs::remove_dir_all(&path);
            }
            Err(TryLockError::WouldBlock) | Err(TryLockError::Error(_)) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Spawner thread (same pattern as src/devdb.rs)
// ---------------------------------------------------------------------------------------------

type SpawnJob = (Command, Sender<io::Result<Child>>);

static SPAWNER: Mutex<Option<Sender<SpawnJob>>> = Mutex::new(None);

/// Forks `cmd` from a thread that lives as long as the process: `PR_SET_PDEATHSIG` fires when
/// the *thread* that forked the child exits, and callers are often short-lived test threads.
fn spawn_from_spawner_thread(cmd: Command) -> io::Result<Child> {
    let tx = {
        let mut guard = SPAWNER.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(tx) => tx.clone(),
            None => {
                let (tx, rx) = mpsc::channel::<SpawnJob>();
                thread::Builder::new()
                    .name("keystone-spawner".into())
                    .spawn(move || {
                        while let Ok((mut cmd, reply)) = rx.recv() {
                            let _ = reply.send(cmd.spawn());
                        }
                    })?;
                *guard = Some(tx.clone());
                tx
            }
        }
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.send((cmd, reply_tx))
        .map_err(|_| io::Error::other("keystone spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("keystone spawner thread did not answer"))?
}
