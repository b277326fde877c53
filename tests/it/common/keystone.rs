//! A real Keystone for integration tests: one per test process, started on first use of
//! [`keystone()`], seeded through its REST API, gone when the process exits.
//!
//! * Python side: a virtualenv built by `.ci/keystone-venv.sh` and cached outside the repository
//!   in `${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}/venv-<hash of the pins>`. It is (re)built
//!   when its `.complete` marker is missing, under an exclusive lock on `<cache>/venv.lock`, so
//!   concurrent test binaries install once.
//! * Keystone side: a temporary directory with `keystone.conf` (PostgreSQL, fernet tokens, no
//!   cache unless [`Options::cache`] asks for it (the benchmark does), bcrypt at the minimum cost
//!   so password auth is fast) and fresh fernet/credential key repositories, then gunicorn (2
//!   sync workers) on a free loopback port, through a wrapper module that empties `sys.argv`
//!   (oslo.config would otherwise parse gunicorn's flags and every worker would exit with
//!   "unrecognized arguments").
//! * Database: `keystone_<pid>_<n>` in a private PostgreSQL per test process ([`postgres`],
//!   [`EmbeddedPostgres`] like the service's tests), over loopback with psycopg2. On sqlite two
//!   workers writing at once (password auth records the user's last activity) failed requests
//!   with 500 "database is locked" under load; PostgreSQL has row locks and no such failure.
//! * Cached seed ([`SeedCache`]): the first start after any change of the venv, the PostgreSQL
//!   version or this file runs `keystone-manage` db_sync and bootstrap, seeds through the REST
//!   API and saves a `pg_dump` of the result (plus the seeded ids) in
//!   `<cache>/keystone-db-<key>/`; every later start restores that dump with `psql` and points
//!   the identity endpoints at its own port, with no keystone-manage and no seeding.
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
//! Cost, measured on the 2-core Debian 12 / Python 3.11 machine (shared with other builds,
//! load 8–10 while measured):
//! * one-time venv build (`.ci/keystone-venv.sh`, empty pip cache): 35–63 s;
//! * once per change of the cache key, the first [`keystone()`] call builds the cached database:
//!   keystone-manage (one Python import, db_sync then bootstrap forked from it) + gunicorn +
//!   seeding (every Keystone request costs 0.3–0.6 s here: with `[cache] enabled = false`
//!   token validation alone runs ~300 SQL queries) + pg_dump, 50–60 s under that load;
//! * per test process, first [`keystone()`] call from the cache: 12 s under that load
//!   (was 52–60 s with sqlite, db_sync and the REST seed in every process) = PostgreSQL initdb
//!   and start + restore 3.5 s + gunicorn `--preload` with 2 workers answering 8 s (3.5–4.5 s on
//!   a quiet machine);
//! * stop() ~0.05 s, start() ~3–4 s; a password token ~0.3 s (cached per (user, project)), a
//!   validation ~0.4 s.
//!
//! The instance is shared by all tests of a process: [`Keystone::stop`] takes it away from every
//! concurrently running test, and [`Keystone::register_endpoint`] replaces the one
//! `container-infra` endpoint. Tests that need either in isolation can use a private instance
//! from [`Keystone::launch`] (another gunicorn start, a few seconds) or serialize themselves.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fs::{self, File, TryLockError};
use std::future::Future;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use magnum_capi::devdb::EmbeddedPostgres;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
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

/// A project made by [`Keystone::new_project`] and its member: ids and the member's token.
pub struct ProjectMember {
    pub project: String,
    pub user: String,
    pub token: String,
    /// The names a client logs in with (the password is [`password`] of `user_name`).
    pub project_name: String,
    pub user_name: String,
}

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

/// Keystone's configuration beyond the tests' defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Keystone's own cache (`[cache] enabled`, oslo.cache's in-process dictionary backend), as
    /// production Keystones run it (with memcached): each gunicorn worker keeps the roles,
    /// projects and catalog it looked up, so a validation costs a few queries instead of ~300.
    /// Off for the tests: the two workers' caches are apart, and a test changing an assignment
    /// or revoking a token through one worker would get the other's stale answer.
    pub cache: bool,
}

/// The Keystone of this test process (started on first call; panics when it cannot start).
pub fn keystone() -> &'static Keystone {
    keystone_with(Options::default())
}

/// The Keystone of this process, started with `opts` by the first call (a later call gets it
/// as it was started).
pub fn keystone_with(opts: Options) -> &'static Keystone {
    SHARED.get_or_init(|| {
        // On a plain thread: the caller may be inside a tokio runtime, and seeding builds one.
        thread::spawn(move || Keystone::launch_with(opts))
            .join()
            .unwrap_or_else(|_| panic!("starting Keystone panicked"))
            .unwrap_or_else(|e| panic!("starting the test Keystone: {e:#}"))
    })
}

pub struct Keystone {
    /// `http://127.0.0.1:PORT/v3`
    pub url: String,
    pub port: u16,
    /// Temporary directory: keystone.conf, key repositories, gunicorn.log.
    pub dir: PathBuf,
    pub venv: PathBuf,
    /// Name of Keystone's database (in this process's Keystone PostgreSQL, see [`postgres`]).
    pub database: String,
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
        Self::launch_with(Options::default())
    }

    /// [`Keystone::launch`] with `opts`.
    pub fn launch_with(opts: Options) -> Result<Keystone> {
        let t0 = Instant::now();
        // Keystone's PostgreSQL (initdb + start, ~2 s on the first start in this process) comes up
        // while the venv is looked at.
        let pg = thread::spawn(|| postgres().map(|pg| pg.url("postgres")));
        let venv = ensure_venv()?;
        let t_venv = t0.elapsed();
        let (dir, owner) = private_dir(DIR_PREFIX)?;

        let port = free_port()?;
        let url = format!("http://127.0.0.1:{port}/v3");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building a runtime")?;
        let admin_url = pg
            .join()
            .map_err(|_| anyhow!("starting Keystone's PostgreSQL panicked"))??;
        let t_pg = t0.elapsed();
        let db = rt.block_on(Database::create(&admin_url))?;
        write_config(&dir, &db.sqlalchemy_url(), opts)?;
        write_key_repositories(&dir)?;

        // A database seeded by an earlier start is restored (no keystone-manage, no seeding);
        // otherwise this start builds it and saves it for the next ones, holding the cache lock
        // so that concurrent test processes wait for it instead of building it too.
        let cache = SeedCache::new(&venv, &db)?;
        let (ids, build_lock) = match cache.load() {
            Some(ids) => (Some(ids), None),
            None => {
                let lock = cache.lock()?;
                match cache.load() {
                    Some(ids) => (Some(ids), None),
                    None => (None, Some(lock)),
                }
            }
        };
        match &ids {
            Some(_) => db.restore(&cache.dump_file(), &url)?,
            None => keystone_manage(&venv, &dir, &url)?,
        }
        let t_db = t0.elapsed();

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
            database: db.name.clone(),
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
        let how = match ids {
            Some(ids) => {
                ks.set_ids(&ids)?;
                "restored"
            }
            None => {
                rt.block_on(ks.seed())?;
                cache.save(&db, &ks.ids())?;
                drop(build_lock);
                "built and cached"
            }
        };
        eprintln!(
            "test Keystone at {} ready in {:.1?} (venv {:.1?}, PostgreSQL {:.1?}, database {how} \
             {:.1?}, gunicorn {:.1?}, seed {:.1?}); dir {}, database {}",
            ks.url,
            t0.elapsed(),
            t_venv,
            t_pg - t_venv,
            t_db - t_pg,
            t_ready - t_db,
            t0.elapsed() - t_ready,
            ks.dir.display(),
            ks.database,
        );
        Ok(ks)
    }

    /// The seeded ids, as [`SeedCache`] keeps them next to the database dump.
    fn ids(&self) -> Value {
        json!({
            "users": self.user_ids,
            "projects": self.project_ids,
            "roles": self.role_ids,
            "service": self.service_id,
        })
    }

    fn set_ids(&mut self, ids: &Value) -> Result<()> {
        let map = |key: &str| -> Result<HashMap<String, String>> {
            serde_json::from_value(ids[key].clone()).with_context(|| format!("ids: {key}"))
        };
        self.user_ids = map("users")?;
        self.project_ids = map("projects")?;
        self.role_ids = map("roles")?;
        self.service_id = str_at(ids, "/service")?;
        Ok(())
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

    /// The application credentials of `user_id`, as the admin lists them.
    pub async fn app_credentials_of(&self, user_id: &str) -> Vec<Value> {
        self.admin(
            "GET",
            &format!("/users/{user_id}/application_credentials"),
            None,
        )
        .await["application_credentials"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A new user `<prefix>-<random>` (password as the seeded users') with `role` on `project`
    /// (a seeded one): (name, id).
    pub async fn new_user(&self, prefix: &str, role: &str, project: &str) -> (String, String) {
        self.new_user_on(prefix, role, self.project_id(project))
            .await
    }

    /// A new user with `role` on the project of id `project`: (name, id).
    async fn new_user_on(&self, prefix: &str, role: &str, project: &str) -> (String, String) {
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
            "/projects/{project}/users/{id}/roles/{}",
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

    /// A new project `<prefix>-<random>` with a new member of it, and the member's token there.
    /// For tests that change what the cloud allows one project (its quotas), or want a namespace
    /// of their own, without touching the seeded projects other tests share.
    pub async fn new_project(&self, prefix: &str) -> ProjectMember {
        let name = format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let p = self
            .admin(
                "POST",
                "/projects",
                Some(json!({"project": {"name": name, "domain_id": DOMAIN}})),
            )
            .await;
        let project = p["project"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no project id: {p}"))
            .to_string();
        let (user_name, user) = self.new_user_on(prefix, "member", &project).await;
        let token = self.token(&user_name, &name).await;
        ProjectMember {
            project,
            user,
            token,
            project_name: name,
            user_name,
        }
    }

    /// A real application credential of user `user` (made with their `token`) named `name`:
    /// (id, secret).
    pub async fn app_credential(&self, user: &str, token: &str, name: &str) -> (String, String) {
        let (status, body) = self
            .request(
                "POST",
                &format!("/users/{user}/application_credentials"),
                Some(token),
                None,
                Some(json!({"application_credential": {"name": name}})),
            )
            .await
            .expect("POST application_credentials");
        assert_eq!(status, 201, "{body}");
        let field = |k: &str| {
            body["application_credential"][k]
                .as_str()
                .unwrap_or_else(|| panic!("no {k}: {body}"))
                .to_string()
        };
        (field("id"), field("secret"))
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

    async fn issue_scoped(&self, user: &str, scope: Value) -> Result<String> {
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
    /// per-call timeout is raised to 60 s: this Keystone answers in 0.3–0.6 s
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

    /// Makes region `region` unless it exists; whether it was made.
    pub async fn ensure_region(&self, region: &str) -> bool {
        let regions = self.admin("GET", "/regions", None).await;
        let known = regions["regions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["id"] == region);
        if !known {
            self.admin("POST", "/regions", Some(json!({"region": {"id": region}})))
                .await;
        }
        !known
    }

    /// A public `container-infra` endpoint at `url` in region `region` (made when missing), beside
    /// RegionOne's: a client told that region reaches `url` while every other test's client
    /// keeps RegionOne's. Removed when the returned guard is dropped.
    pub async fn endpoint_in_region(&'static self, region: &str, url: &str) -> RegionEndpoint {
        self.ensure_region(region).await;
        let body = json!({"endpoint": {"service_id": self.service_id, "interface": "public",
            "region_id": region, "url": url}});
        let v = self.admin("POST", "/endpoints", Some(body)).await;
        let id = v["endpoint"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no endpoint id: {v}"))
            .to_string();
        // Tokens issued before carry the old catalog.
        self.lock_tokens().clear();
        RegionEndpoint { ks: self, id }
    }

    /// Region `region` (made when missing) given RegionOne's public endpoints of the services of
    /// `types` only (e.g. a cloud without `load-balancer`): a service configured with that
    /// region sees no other. Idempotent.
    pub async fn region_with(&self, region: &str, types: &[&str]) {
        if !self.ensure_region(region).await {
            return;
        }
        let services = self.admin("GET", "/services", None).await;
        let endpoints = self.admin("GET", "/endpoints?interface=public", None).await;
        for service in services["services"].as_array().into_iter().flatten() {
            if !types.iter().any(|t| service["type"] == *t) {
                continue;
            }
            for e in endpoints["endpoints"].as_array().into_iter().flatten() {
                if e["service_id"] == service["id"] && e["region_id"] == REGION {
                    let body = json!({"endpoint": {"service_id": service["id"],
                        "interface": "public", "region_id": region, "url": e["url"]}});
                    self.admin("POST", "/endpoints", Some(body)).await;
                }
            }
        }
        // Tokens issued before carry the old catalog.
        self.lock_tokens().clear();
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

/// An endpoint [`Keystone::endpoint_in_region`] made; deleted on drop (a failing test's too).
pub struct RegionEndpoint {
    ks: &'static Keystone,
    id: String,
}

impl Drop for RegionEndpoint {
    fn drop(&mut self) {
        let (ks, path) = (self.ks, format!("/endpoints/{}", self.id));
        let _ = block_on(async move {
            let admin = ks.try_token(ADMIN_USER, ADMIN_PROJECT).await?;
            expect(204, ks.request("DELETE", &path, Some(&admin), None, None)).await?;
            ks.lock_tokens().clear();
            Ok::<_, anyhow::Error>(())
        });
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

fn write_config(dir: &Path, database: &str, opts: Options) -> Result<()> {
    let d = dir.display();
    let cache = if opts.cache {
        "enabled = true\n\
         backend = oslo_cache.dict\n"
    } else {
        "enabled = false\n"
    };
    let conf = format!(
        "[DEFAULT]\n\
         use_stderr = true\n\
         [database]\n\
         connection = {database}\n\
         [token]\n\
         provider = fernet\n\
         expiration = 86400\n\
         [fernet_tokens]\n\
         key_repository = {d}/fernet-keys\n\
         [fernet_receipts]\n\
         key_repository = {d}/fernet-keys\n\
         [credential]\n\
         key_repository = {d}/credential-keys\n\
         [cache]\n\
         {cache}\
         [identity]\n\
         password_hash_algorithm = bcrypt\n\
         password_hash_rounds = 4\n"
    );
    fs::write(dir.join("keystone.conf"), conf).context("writing keystone.conf")?;
    // oslo.config parses sys.argv: gunicorn's flags would make every worker exit.
    let wrapper = format!(
        "import os, sys\n\
         sys.argv = sys.argv[:1]\n\
         os.environ['OS_KEYSTONE_CONFIG_DIR'] = {dir:?}\n\
         os.environ['OS_KEYSTONE_CONFIG_FILES'] = 'keystone.conf'\n\
         from keystone.server.wsgi import initialize_public_application\n\
         application = initialize_public_application()\n",
        dir = d.to_string()
    );
    fs::write(dir.join(format!("{WSGI_MODULE}.py")), wrapper).context("writing the wrapper")?;
    fs::write(dir.join(format!("{SETUP_MODULE}.py")), SETUP_PY).context("writing setup")?;
    Ok(())
}

/// The fernet token and credential key repositories, as `keystone-manage fernet_setup` and
/// `credential_setup` leave them: key `0` (staged) and key `1` (primary), each the URL-safe
/// base64 of 32 random bytes, in a 0700 directory. Written here, fresh for every instance, so
/// that a start from the cached database runs no keystone-manage (each call is a ~3.5 s Python
/// import).
fn write_key_repositories(dir: &Path) -> Result<()> {
    use base64::Engine as _;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    for repo in ["fernet-keys", "credential-keys"] {
        let path = dir.join(repo);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        for index in ["0", "1"] {
            let key = base64::engine::general_purpose::URL_SAFE.encode(rand::random::<[u8; 32]>());
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path.join(index))
                .and_then(|mut f| f.write_all(key.as_bytes()))
                .with_context(|| format!("writing {repo}/{index}"))?;
        }
    }
    Ok(())
}

/// `keystone-manage db_sync`, then `bootstrap` (admin user and project, RegionOne, the identity
/// service with its endpoints at `url`), with one Python import (see [`SETUP_PY`]).
fn keystone_manage(venv: &Path, dir: &Path, url: &str) -> Result<()> {
    let bootstrap = json!([
        "bootstrap",
        "--bootstrap-password",
        password(ADMIN_USER),
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
    let stages = json!([[["db_sync"]], [bootstrap]]);
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.arg(dir.join(format!("{SETUP_MODULE}.py")))
        .arg(dir.join("keystone.conf"))
        .arg(stages.to_string())
        .current_dir(dir)
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
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Keystone's database
// ---------------------------------------------------------------------------------------------

static POSTGRES: OnceLock<Result<EmbeddedPostgres, String>> = OnceLock::new();
static DATABASES: AtomicUsize = AtomicUsize::new(0);

/// The PostgreSQL server of this process's Keystones, started on first use the way the
/// service's tests and `serve --dev` start theirs ([`EmbeddedPostgres`]: a private cluster from
/// the local binaries, run as `postgres` when we are root, gone with the process). A server of
/// its own rather than the one of `tests/common/mod.rs`: this file is also compiled alone (by
/// `keystone_harness`), and a test that needs Keystone need not start the service's database.
fn postgres() -> Result<&'static EmbeddedPostgres> {
    POSTGRES
        .get_or_init(|| EmbeddedPostgres::start().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow!("starting Keystone's PostgreSQL: {e}"))
}

/// Keystone's own database in [`postgres`]: trust authentication as `postgres` over loopback.
struct Database {
    /// The server's `postgres` database (`postgres://…`), for administration.
    admin_url: String,
    port: u16,
    name: String,
    /// The server's binaries (`psql` and `pg_dump` of the same version are there).
    bindir: PathBuf,
    /// `server_version_num`, part of the [`SeedCache`] key.
    version: String,
}

impl Database {
    /// Creates `keystone_<pid>_<n>` (empty).
    async fn create(admin_url: &str) -> Result<Database> {
        use sqlx::Connection as _;
        let port = url::Url::parse(admin_url)
            .ok()
            .and_then(|u| u.port())
            .ok_or_else(|| anyhow!("no port in {admin_url}"))?;
        let mut admin = sqlx::PgConnection::connect(admin_url)
            .await
            .with_context(|| format!("connecting to {admin_url}"))?;
        let bindir: String =
            sqlx::query_scalar("SELECT setting FROM pg_config WHERE name = 'BINDIR'")
                .fetch_one(&mut admin)
                .await
                .context("looking up the server's BINDIR")?;
        let version: String = sqlx::query_scalar("SELECT current_setting('server_version_num')")
            .fetch_one(&mut admin)
            .await
            .context("looking up the server's version")?;
        let name = format!(
            "keystone_{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::SeqCst)
        );
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .with_context(|| format!("creating database {name}"))?;
        admin.close().await.ok();
        Ok(Database {
            admin_url: admin_url.to_string(),
            port,
            name,
            bindir: PathBuf::from(bindir),
            version,
        })
    }

    /// keystone.conf's `[database] connection`.
    fn sqlalchemy_url(&self) -> String {
        format!(
            "postgresql+psycopg2://postgres@127.0.0.1:{}/{}",
            self.port, self.name
        )
    }

    /// A client tool of the server (`psql`, `pg_dump`) pointed at this database.
    fn tool(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.bindir.join(name));
        cmd.args([
            "--host",
            "127.0.0.1",
            "--username",
            "postgres",
            "--no-password",
        ])
        .arg(format!("--port={}", self.port))
        .arg(format!("--dbname={}", self.name))
        .stdin(Stdio::null());
        for var in [
            "PGPASSWORD",
            "PGSERVICE",
            "PGOPTIONS",
            "PGDATABASE",
            "PGUSER",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Loads `dump` (from [`Database::dump`]) and points the identity endpoints that bootstrap
    /// registered at `url` (this instance's port), in one transaction.
    fn restore(&self, dump: &Path, url: &str) -> Result<()> {
        let update = format!(
            "UPDATE public.endpoint SET url = '{}' WHERE service_id IN \
             (SELECT id FROM public.service WHERE type = 'identity')",
            url.replace('\'', "''")
        );
        let out = self
            .tool("psql")
            .args(["--no-psqlrc", "--quiet", "--single-transaction"])
            .args(["--set", "ON_ERROR_STOP=1"])
            .arg("--file")
            .arg(dump)
            .args(["--command", &update])
            .output()
            .context("running psql")?;
        if !out.status.success() {
            bail!(
                "restoring {} into {} failed ({}):\n{}",
                dump.display(),
                self.name,
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 40)
            );
        }
        Ok(())
    }

    /// Writes the whole database as SQL to `to`.
    fn dump(&self, to: &Path) -> Result<()> {
        let out = self
            .tool("pg_dump")
            .args(["--no-owner", "--no-privileges", "--file"])
            .arg(to)
            .output()
            .context("running pg_dump")?;
        if !out.status.success() {
            bail!(
                "pg_dump of {} failed ({}):\n{}",
                self.name,
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 40)
            );
        }
        Ok(())
    }
}

/// A bootstrapped and seeded Keystone database, kept as a `pg_dump` next to the venv
/// (`<cache>/keystone-db-<key>/`: `dump.sql`, and `ids.json` with the seeded ids), so that a
/// start restores it (~0.5 s) instead of running keystone-manage and the REST seed (~10 s).
/// The key hashes everything the dump depends on: the venv (its pins), the PostgreSQL version
/// and this file (the seed, the setup steps and keystone.conf are all written here), so any
/// change rebuilds it. Built under an exclusive lock on `<cache>/keystone-db.lock`; complete
/// once its directory exists (renamed into place).
struct SeedCache {
    root: PathBuf,
    dir: PathBuf,
}

impl SeedCache {
    /// Caches unused for this long are removed when a new one is built.
    const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

    fn new(venv: &Path, db: &Database) -> Result<SeedCache> {
        use sha2::Digest as _;
        let root = venv
            .parent()
            .ok_or_else(|| anyhow!("venv path {} has no parent", venv.display()))?
            .to_path_buf();
        let mut h = sha2::Sha256::new();
        for part in [
            venv.file_name().unwrap_or_default().as_encoded_bytes(),
            db.version.as_bytes(),
            include_str!("keystone.rs").as_bytes(),
        ] {
            h.update(part);
            h.update([0]);
        }
        let key: String = h.finalize()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(SeedCache {
            dir: root.join(format!("keystone-db-{key}")),
            root,
        })
    }

    fn dump_file(&self) -> PathBuf {
        self.dir.join("dump.sql")
    }

    /// The seeded ids when the cache is complete.
    fn load(&self) -> Option<Value> {
        if !self.dump_file().is_file() {
            return None;
        }
        let ids = fs::read(self.dir.join("ids.json")).ok()?;
        serde_json::from_slice(&ids).ok()
    }

    fn lock(&self) -> Result<File> {
        fs::create_dir_all(&self.root)
            .with_context(|| format!("creating {}", self.root.display()))?;
        let lock = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("keystone-db.lock"))
            .context("opening keystone-db.lock")?;
        lock.lock().context("locking keystone-db.lock")?;
        Ok(lock)
    }

    /// Dumps `db` and writes `ids`; the caller holds [`SeedCache::lock`].
    fn save(&self, db: &Database, ids: &Value) -> Result<()> {
        let tmp = self
            .root
            .join(format!("keystone-db-tmp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        db.dump(&tmp.join("dump.sql"))?;
        fs::write(tmp.join("ids.json"), ids.to_string()).context("writing ids.json")?;
        let _ = fs::remove_dir_all(&self.dir);
        fs::rename(&tmp, &self.dir)
            .with_context(|| format!("renaming {} to {}", tmp.display(), self.dir.display()))?;
        self.sweep();
        Ok(())
    }

    /// Removes other caches not modified for [`SeedCache::MAX_AGE`] (and leftovers of builds
    /// that died).
    fn sweep(&self) {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let ours = e
                .file_name()
                .as_encoded_bytes()
                .starts_with(b"keystone-db-");
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Self::MAX_AGE);
            if ours && old && path != self.dir {
                let _ = fs::remove_dir_all(&path);
            }
        }
    }
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
    gunicorn(&Gunicorn {
        venv,
        dir,
        pythonpath: dir,
        app: &format!("{WSGI_MODULE}:application"),
        env: &[],
        port,
        ready_path: "/v3",
        what: "Keystone",
    })
}

/// A gunicorn server to start: the WSGI `app` (`module:attribute`, found on `pythonpath`) of
/// `venv`, 2 sync workers on `127.0.0.1:port`, its log and config in `dir`.
pub struct Gunicorn<'a> {
    pub venv: &'a Path,
    pub dir: &'a Path,
    pub pythonpath: &'a Path,
    pub app: &'a str,
    pub env: &'a [(&'a str, &'a std::ffi::OsStr)],
    pub port: u16,
    /// Answered 200 once the application is up.
    pub ready_path: &'a str,
    /// Its name in errors.
    pub what: &'a str,
}

/// Starts `g` (master and workers die with this process) and waits until `g.ready_path`
/// answers 200 (Keystone here; the real Magnum beside us in benches/api_load.rs).
pub fn gunicorn(g: &Gunicorn) -> Result<Child> {
    let (dir, port) = (g.dir, g.port);
    fs::write(dir.join(GUNICORN_CONF), GUNICORN_CONF_PY).context("writing gunicorn conf")?;
    let log = dir.join("gunicorn.log");
    let log_file = File::options()
        .create(true)
        .append(true)
        .open(&log)
        .context("opening gunicorn.log")?;
    let start_offset = log_file.metadata().map(|m| m.len()).unwrap_or(0);
    let log_err = log_file.try_clone()?;
    let mut cmd = Command::new(g.venv.join("bin/gunicorn"));
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
        .arg(g.pythonpath)
        .arg(g.app)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        // Own process group, so stop() can kill master and workers together.
        .process_group(0);
    scrub_env(&mut cmd);
    for (k, v) in g.env {
        cmd.env(k, v);
    }
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
    let mut child =
        magnum_capi::devdb::spawn_from_spawner_thread(cmd).context("starting gunicorn")?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "gunicorn exited ({status}) before answering:\n{}",
                log_since(&log, start_offset)
            );
        }
        if http_status(port, g.ready_path) == Some(200) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            kill_group(child);
            bail!(
                "{} did not answer on port {port} within {READY_TIMEOUT:?}:\n{}",
                g.what,
                log_since(&log, start_offset)
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Kills a gunicorn (master and workers) and reaps it.
pub fn kill_group(mut child: Child) {
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

pub fn free_port() -> Result<u16> {
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

/// The last `lines` lines of `s`.
pub fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Removes directories of earlier test processes that are gone (their owner lock is free).
/// A new directory of this process under the temp dir (`<prefix><pid>-<nanos>`) and the held
/// owner lock that keeps it: once this process is gone, the next [`private_dir`] of that
/// prefix removes it. Directories of earlier processes are swept first.
pub fn private_dir(prefix: &str) -> Result<(PathBuf, File)> {
    let tmp = std::env::temp_dir();
    sweep_stale(&tmp, prefix);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = tmp.join(format!("{prefix}{}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let owner = File::create(dir.join(OWNER_LOCK)).context("creating owner lock")?;
    owner.lock().context("locking owner lock")?;
    Ok((dir, owner))
}

fn sweep_stale(tmp: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        if !e
            .file_name()
            .as_encoded_bytes()
            .starts_with(prefix.as_bytes())
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
