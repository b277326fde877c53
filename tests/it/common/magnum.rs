//! The real Magnum for the import tests: one private MariaDB per test binary (Debian's
//! `mariadb-server` binaries, a datadir of its own, loopback only, run as the `mysql` user when
//! the tests run as root, gone when the process exits), Magnum's own schema of a release from
//! PyPI (`magnum-db-manage upgrade` from `.ci/magnum-venv.sh`'s virtualenv, once per release and
//! process, then copied per test with `CREATE TABLE … LIKE`), fixtures written through Magnum's
//! own db API, and Magnum's own API answers (tests/it/magnum/*.py: the real controllers, objects
//! and policy, in-process, straight to the database).

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::signal::Signal;
use serde_json::Value;

/// The newest Magnum (no trust columns; nodegroup `node_labels`/`node_taints`; template
/// `driver`), one of 2024 (trust columns, template `driver`, no 1.14 nodegroup columns) and one
/// of 2023 (no template `driver` either).
pub const NEWEST: &str = "23.0.0";
pub const OF_2024: &str = "19.0.1";
pub const OF_2023: &str = "17.0.2";

const USER: &str = "magnum";
const PASSWORD: &str = "magnum-test-pw";
const DIR_PREFIX: &str = "magnum-capi-mariadb-";
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The private MariaDB of this test process.
pub struct MariaDb {
    _child: Child,
    pub port: u16,
    dir: PathBuf,
    /// Keeps `dir` this process's (see `keystone::private_dir`).
    _owner: std::fs::File,
}

static MARIADB: OnceLock<MariaDb> = OnceLock::new();
static COUNTER: AtomicUsize = AtomicUsize::new(0);
/// Releases whose schema database exists in this process.
static SCHEMAS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

pub fn mariadb() -> &'static MariaDb {
    MARIADB.get_or_init(|| {
        MariaDb::start().expect("start the test MariaDB (is Debian's mariadb-server installed?)")
    })
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl MariaDb {
    fn start() -> Result<MariaDb> {
        let (dir, owner) = super::keystone::private_dir(DIR_PREFIX)?;
        let data = dir.join("data");
        std::fs::create_dir_all(&data).context("creating the MariaDB datadir")?;
        // mariadbd refuses to run as root: as root, everything runs as the `mysql` user, which
        // owns the datadir.
        let run_as = if nix::unistd::geteuid().is_root() {
            let u = nix::unistd::User::from_name("mysql")?
                .ok_or_else(|| anyhow!("no `mysql` user (is mariadb-server installed?)"))?;
            for p in [&dir, &data] {
                nix::unistd::chown(p.as_path(), Some(u.uid), Some(u.gid))?;
            }
            Some((u.uid.as_raw(), u.gid.as_raw()))
        } else {
            None
        };
        let small = ["--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M"];
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(small)
            .stdin(Stdio::null());
        if let Some((uid, gid)) = run_as {
            install.uid(uid).gid(gid);
        }
        let out = install.output().context("running mariadb-install-db")?;
        if !out.status.success() {
            bail!(
                "mariadb-install-db failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let log = std::fs::File::create(dir.join("server.log"))?;
        let mut cmd = Command::new("/usr/sbin/mariadbd");
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.join("sock").display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .arg(format!("--port={port}"))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .args(small)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0);
        if let Some((uid, gid)) = run_as {
            cmd.uid(uid).gid(gid);
        }
        let parent = nix::unistd::getpid();
        // SAFETY: runs in the forked child before exec (after setuid, which would clear the
        // parent-death signal) and only makes async-signal-safe calls (prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(
                        nix::errno::Errno::ESRCH as i32,
                    ));
                }
                Ok(())
            });
        }
        let mut child =
            magnum_capi::devdb::spawn_from_spawner_thread(cmd).context("starting mariadbd")?;
        let deadline = Instant::now() + READY_TIMEOUT;
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                bail!(
                    "mariadbd exited ({st}): {}",
                    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("mariadbd did not listen on {port} within {READY_TIMEOUT:?}");
            }
            // Start-up poll of a process being born (no event to wait on).
            std::thread::sleep(Duration::from_millis(50));
        }
        let m = MariaDb {
            _child: child,
            port,
            dir,
            _owner: owner,
        };
        m.root_sql(&format!(
            "CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}';
             GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%';
             CREATE USER '{USER}'@'localhost' IDENTIFIED BY '{PASSWORD}';
             GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'localhost';"
        ))?;
        Ok(m)
    }

    /// Runs `sql` as root over the socket.
    pub fn root_sql(&self, sql: &str) -> Result<String> {
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .args(["-u", "root", "--batch", "--skip-column-names", "-e", sql])
            .output()
            .context("running the mariadb client")?;
        if !out.status.success() {
            bail!("{sql}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// A URL of database `db` as the import reads it.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://{USER}:{PASSWORD}@127.0.0.1:{}/{db}", self.port)
    }

    /// The same for SQLAlchemy (Magnum's configuration), over the server's Unix socket as the
    /// service reaches its own database in development mode and in the bench (like for like).
    fn sqlalchemy_url(&self, db: &str) -> String {
        format!(
            "mysql+pymysql://{USER}:{PASSWORD}@localhost/{db}?unix_socket={}",
            self.dir.join("sock").display()
        )
    }

    fn write_conf(&self, db: &str) -> Result<PathBuf> {
        let path = self.dir.join(format!("{db}.conf"));
        // `transport_url`: Magnum's API hooks build an RPC client; nothing is sent on it.
        std::fs::write(
            &path,
            format!(
                "[DEFAULT]\ntransport_url = fake://\n[database]\nconnection = {}\n",
                self.sqlalchemy_url(db)
            ),
        )?;
        Ok(path)
    }
}

/// The virtualenv with Magnum `release` (built on first use by `.ci/magnum-venv.sh`).
fn venv(release: &str) -> Result<PathBuf> {
    let out = Command::new("bash")
        .arg(repo().join(".ci/magnum-venv.sh"))
        .arg(release)
        .stdin(Stdio::null())
        .output()
        .context("running .ci/magnum-venv.sh")?;
    if !out.status.success() {
        bail!(
            ".ci/magnum-venv.sh {release} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// What the newest Magnum's own WSME request types do with each `(type, body)` (see
/// tests/it/magnum/magnum_types.py): `Ok(())` where the type takes the body, else its message.
/// Needs only the virtualenv (no database).
pub fn types(bodies: &[(&str, Value)]) -> Vec<std::result::Result<(), String>> {
    use std::io::Write;
    let venv = venv(NEWEST).unwrap_or_else(|e| panic!("Magnum {NEWEST} venv: {e:#}"));
    let input: Vec<Value> = bodies
        .iter()
        .map(|(t, b)| serde_json::json!({"type": t, "body": b}))
        .collect();
    let mut child = Command::new(venv.join("bin/python"))
        .arg(repo().join("tests/it/magnum/magnum_types.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running magnum_types.py");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(Value::Array(input).to_string().as_bytes())
        .expect("writing magnum_types.py's input");
    let out = child.wait_with_output().expect("magnum_types.py");
    assert!(
        out.status.success(),
        "magnum_types.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = serde_json::from_slice(&out.stdout).expect("magnum_types.py's JSON");
    answers
        .into_iter()
        .map(|a| match a["takes"].as_bool() {
            Some(true) => Ok(()),
            _ => Err(a["error"].as_str().unwrap_or_default().to_string()),
        })
        .collect()
}

fn schema_db(release: &str) -> String {
    format!("magnum_schema_{}", release.replace('.', "_"))
}

/// A Magnum database of one release, private to a test.
pub struct MagnumDb {
    pub release: &'static str,
    pub name: String,
    pub url: String,
    conf: PathBuf,
    venv: PathBuf,
}

impl MagnumDb {
    /// A fresh database with `release`'s schema, as its own migrations create it.
    pub fn create(release: &'static str) -> MagnumDb {
        Self::try_create(release).unwrap_or_else(|e| panic!("Magnum {release} schema: {e:#}"))
    }

    pub fn try_create(release: &'static str) -> Result<MagnumDb> {
        let m = mariadb();
        let venv = venv(release)?;
        let schema = schema_db(release);
        {
            let mut done = SCHEMAS.lock().unwrap_or_else(|p| p.into_inner());
            if !done.contains(release) {
                m.root_sql(&format!("CREATE DATABASE {schema}"))?;
                let conf = m.write_conf(&schema)?;
                let out = Command::new(venv.join("bin/magnum-db-manage"))
                    .arg("--config-file")
                    .arg(&conf)
                    .arg("upgrade")
                    .stdin(Stdio::null())
                    .output()
                    .context("running magnum-db-manage")?;
                if !out.status.success() {
                    bail!(
                        "magnum-db-manage upgrade failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                done.insert(release.to_string());
            }
        }
        let name = format!(
            "magnum_{}_{}_{}",
            release.replace('.', "_"),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let tables = m.root_sql(&format!(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema}'"
        ))?;
        let mut sql = format!("CREATE DATABASE {name};");
        for t in tables.lines().map(str::trim).filter(|t| !t.is_empty()) {
            sql.push_str(&format!("CREATE TABLE {name}.`{t}` LIKE {schema}.`{t}`;"));
        }
        sql.push_str(&format!(
            "INSERT INTO {name}.alembic_version SELECT * FROM {schema}.alembic_version;"
        ));
        m.root_sql(&sql)?;
        let conf = m.write_conf(&name)?;
        Ok(MagnumDb {
            release,
            url: m.url(&name),
            name,
            conf,
            venv,
        })
    }

    fn python(&self, script: &str, input: &Value) -> Result<String> {
        use std::io::Write;
        let mut child = Command::new(self.venv.join("bin/python"))
            .arg(repo().join("tests/it/magnum").join(script))
            .arg(&self.conf)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {script}"))?;
        child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("no stdin"))?
            .write_all(input.to_string().as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("{script} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// Writes `fixtures` through Magnum's db API (see magnum_load.py).
    pub fn load(&self, fixtures: &Value) {
        self.python("magnum_load.py", fixtures)
            .unwrap_or_else(|e| panic!("loading fixtures into Magnum {}: {e:#}", self.release));
    }

    /// Magnum's own answers to `requests` (see magnum_api.py).
    pub fn api(&self, requests: &[Value]) -> Vec<(u16, Value)> {
        let out = self
            .python("magnum_api.py", &Value::Array(requests.to_vec()))
            .unwrap_or_else(|e| panic!("Magnum {} API: {e:#}", self.release));
        let answers: Vec<Value> = serde_json::from_str(&out).expect("magnum_api.py's JSON");
        answers
            .into_iter()
            .map(|a| (a["status"].as_u64().unwrap_or(0) as u16, a["body"].clone()))
            .collect()
    }

    /// The newest microversion this release's API serves (`latest` for the newest release).
    pub fn newest_microversion(&self) -> &'static str {
        match self.release {
            NEWEST => "latest",
            _ => "1.11",
        }
    }

    /// Magnum's API on this database over HTTP, as the performance figures measure it:
    /// gunicorn with 2 sync workers (magnum_wsgi.py: Magnum's controllers, objects and policy,
    /// identity from the X-Project-Id/X-User-Id/X-Roles headers). `catalog` (`(service type,
    /// name, URL)`, e.g. [`super::fakecloud::FakeCloud::catalog`]) is the service catalog every
    /// request's context carries, as keystonemiddleware's `keystone.token_info` would: Magnum's
    /// create looks its image, flavors, keypair and network up there. The newest release only
    /// (its venv has gunicorn and a driver).
    pub fn serve(&self, catalog: &[(&str, &str, String)]) -> Result<MagnumApi> {
        let port = super::keystone::free_port()?;
        let dir = mariadb().dir.join(format!("{}-api", self.name));
        std::fs::create_dir_all(&dir)?;
        let catalog = serde_json::to_string(catalog)?;
        let child = super::keystone::gunicorn(&super::keystone::Gunicorn {
            venv: &self.venv,
            dir: &dir,
            pythonpath: &repo().join("tests/it/magnum"),
            app: "magnum_wsgi:application",
            env: &[
                ("MAGNUM_CAPI_MAGNUM_CONF", self.conf.as_os_str()),
                ("MAGNUM_CAPI_MAGNUM_CATALOG", catalog.as_ref()),
            ],
            port,
            ready_path: "/v1",
            what: "Magnum's API",
        })?;
        Ok(MagnumApi {
            child: Some(child),
            port,
        })
    }

    /// Runs `sql` in this database as root.
    pub fn sql(&self, sql: &str) -> String {
        mariadb()
            .root_sql(&format!("USE {}; {sql}", self.name))
            .unwrap_or_else(|e| panic!("{e:#}"))
    }
}

/// Magnum's API served by gunicorn ([`MagnumDb::serve`]); stopped on drop.
pub struct MagnumApi {
    child: Option<Child>,
    pub port: u16,
}

impl MagnumApi {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for MagnumApi {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            super::keystone::kill_group(child);
        }
    }
}

/// The load benchmark's data (benches/api_load.rs), loaded into ours and into the real Magnum
/// beside us, and what it starts: kept here so tests/it/magnum_beside.rs starts Magnum exactly
/// as the bench does.
pub mod bench {
    use super::{MagnumApi, MagnumDb, NEWEST, Result};

    /// The templates' image: the fake cloud's Ubuntu image (`os_distro` ubuntu, `kube_version`
    /// v1.30.4), which Magnum's create looks up in Glance and its driver needs.
    pub const IMAGE: &str = super::super::fakecloud::IMAGE_UBUNTU_KUBE;
    /// The cluster distro Magnum stores on a template from its image's `os_distro` (seeded by
    /// SQL here, so written as its template create would).
    pub const CLUSTER_DISTRO: &str = "ubuntu";
    /// Magnum's driver for (vm, ubuntu, kubernetes): magnum-capi-helm's entry point.
    pub const MAGNUM_DRIVER: &str = "k8s_capi_helm_v1";
    /// The clusters' labels: the template's, `kube_tag` overridden (the detail views' label
    /// diffs are not empty).
    pub const CLUSTER_KUBE_TAG: (&str, &str) = ("kube_tag", "v1.31.1");

    /// Eleven labels, as a JSON object (the performance issue's data; `kube_tag` is the one
    /// the CAPI drivers require).
    pub fn eleven_labels() -> String {
        labels_with(&[])
    }

    /// [`eleven_labels`] with some values replaced (in place: the keys keep their order).
    pub fn labels_with(changed: &[(&str, &str)]) -> String {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("kube_tag", "v1.30.4"),
            ("auto_healing_enabled", "true"),
            ("auto_scaling_enabled", "false"),
            ("boot_volume_size", "40"),
            ("boot_volume_type", "ssd"),
            ("container_infra_prefix", "registry.example.org/capi/"),
            ("cloud_provider_enabled", "true"),
            ("keystone_auth_enabled", "true"),
            ("master_lb_floating_ip_enabled", "false"),
            ("monitoring_enabled", "false"),
            ("os_distro", "ubuntu"),
        ] {
            m.insert(k.into(), v.into());
        }
        for (k, v) in changed {
            m.insert((*k).into(), (*v).into());
        }
        serde_json::Value::Object(m).to_string()
    }

    /// The body of the bench's creates (`POST /v1/clusters`), in ours and in Magnum.
    pub fn create_body(template: &str) -> String {
        format!("{{\"cluster_template_id\": \"{template}\", \"node_count\": 1}}")
    }

    /// The real Magnum beside us: a database of Magnum 23's own schema filled with the rows the
    /// bench writes into ours ([`seed`]), served by gunicorn with 2 workers and `catalog` (the
    /// fake cloud's Glance, Nova and Neutron) in every request's token info.
    pub fn start(
        project: &str,
        clusters: i64,
        catalog: &[(&str, &str, String)],
    ) -> Result<(MagnumDb, MagnumApi)> {
        let db = MagnumDb::try_create(NEWEST)?;
        seed(&db, project, clusters);
        let api = db.serve(catalog)?;
        Ok((db, api))
    }

    /// 50 public templates and clusters 1..=`clusters` (2 nodegroups each) in `project`, as the
    /// bench's `seed_templates` and `seed_clusters` write them into ours: same names, labels,
    /// uuids and order. What Magnum's template create would have stored beside them is set as
    /// it would: `hidden` false (its look-up of a public template reads `hidden = 0`; NULL
    /// hides it from every other project), the image's `cluster_distro`, its driver.
    pub fn seed(db: &MagnumDb, project: &str, clusters: i64) {
        // A uuid as PostgreSQL's `md5(x)::uuid` writes it.
        let uuid = |x: &str| {
            format!(
                "insert(insert(insert(insert(md5({x}), 9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-')"
            )
        };
        let sql = format!(
            "INSERT INTO cluster_template (uuid, project_id, user_id, name, image_id, flavor_id,
                master_flavor_id, keypair_id, external_network_id, network_driver,
                docker_volume_size, coe, labels, server_type, cluster_distro, driver,
                dns_nameserver, public, hidden, created_at)
             SELECT {tu}, '{project}', 'bench-user', concat('template-', seq), '{IMAGE}',
                'm1.small', 'm1.medium', 'default', 'public', 'calico', 20, 'kubernetes',
                '{labels}', 'vm', '{CLUSTER_DISTRO}', '{MAGNUM_DRIVER}', '8.8.8.8', 1, 0,
                UTC_TIMESTAMP() FROM seq_1_to_50 ORDER BY seq;
             INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, keypair,
                docker_volume_size, labels, master_flavor_id, flavor_id, stack_id, status,
                create_timeout, api_address, coe_version, created_at)
             SELECT {cu}, '{project}', 'bench-user', concat('cluster-', seq), {t1}, 'default', 20,
                '{cluster_labels}', 'm1.medium', 'm1.small', concat('c', md5(seq)), 'CREATE_COMPLETE',
                60, 'https://192.0.2.1:6443', 'v1.31.1', UTC_TIMESTAMP()
               FROM seq_1_to_{clusters} ORDER BY seq;
             INSERT INTO nodegroup (uuid, name, cluster_id, project_id, labels, flavor_id, image_id,
                node_addresses, node_count, role, is_default, status, created_at)
             SELECT {nu}, r.name, c.uuid, c.project_id, c.labels, 'm1.small', 'ubuntu-jammy',
                '[\"192.0.2.10\"]', 1, r.role, 1, 'CREATE_COMPLETE', UTC_TIMESTAMP()
               FROM cluster c CROSS JOIN (SELECT 'default-master' AS name, 'master' AS role
                                          UNION ALL SELECT 'default-worker', 'worker') r
              ORDER BY c.id, r.role;
             ANALYZE TABLE cluster, nodegroup, cluster_template;",
            tu = uuid("concat('template-', seq)"),
            cu = uuid("concat('cluster-', seq)"),
            t1 = uuid("'template-1'"),
            nu = uuid("concat('ng-', c.uuid, r.role)"),
            labels = eleven_labels(),
            cluster_labels = labels_with(&[CLUSTER_KUBE_TAG]),
        );
        db.sql(&sql);
    }

    /// A stored cluster quota of `limit` for `project` (the bench gives Magnum's creating
    /// projects the quota it gives ours).
    pub fn set_quota(db: &MagnumDb, project: &str, limit: i32) {
        db.sql(&format!(
            "INSERT INTO quotas (project_id, resource, hard_limit, created_at)
             VALUES ('{project}', 'Cluster', {limit}, UTC_TIMESTAMP())"
        ));
    }
}
