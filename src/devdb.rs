//! A private, throwaway PostgreSQL server started from the local binaries (for `serve --dev` and tests).
//!
//! [`EmbeddedPostgres::start`] runs `initdb` into a fresh temporary directory and then runs
//! `postgres` directly (not `pg_ctl`) as a child process listening on `127.0.0.1` on a free port,
//! with durability switched off (`fsync=off` and friends) because the data is thrown away anyway;
//! [`EmbeddedPostgres::start_durable`] keeps PostgreSQL's own defaults (every commit flushed), as a
//! production server runs, for measurements that compare commits with another database's.
//!
//! * Binaries are taken from `$MAGNUM_CAPI_PG_BINDIR`, else the highest-numbered
//!   `/usr/lib/postgresql/*/bin` (Debian layout), else the directory of `initdb` on `PATH`.
//! * `initdb`/`postgres` refuse to run as root, so when the effective uid is 0 both run as the
//!   `postgres` system user and the temporary directory is chowned to it.
//! * The server never outlives the process that started it: the child gets `PR_SET_PDEATHSIG`
//!   (`SIGINT`, i.e. fast shutdown). Because that signal fires when the *thread* that forked the
//!   child exits, children are forked from one dedicated spawner thread that lives as long as the
//!   process.
//! * [`EmbeddedPostgres::stop`] (also run by `Drop`) shuts the server down and removes the
//!   temporary directory.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{self, Sender};
use std::thread;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{self, Signal};
use nix::unistd::{Gid, Pid, Uid, User};

/// Environment variable that overrides where the PostgreSQL server binaries are looked up.
const BINDIR_ENV: &str = "MAGNUM_CAPI_PG_BINDIR";
/// Debian/Ubuntu layout: `/usr/lib/postgresql/<major>/bin`.
const DEBIAN_PG_ROOT: &str = "/usr/lib/postgresql";
/// System user the server runs as when we are root.
const PG_SYSTEM_USER: &str = "postgres";
/// Database superuser created by `initdb`.
const PG_SUPERUSER: &str = "postgres";
/// Prefix of our temporary directories.
const DIR_PREFIX: &str = "magnum-capi-devdb-";
/// Lock file inside each temporary directory, flock-ed by the owning process for its lifetime.
const OWNER_LOCK: &str = ".owner.lock";

const START_ATTEMPTS: u32 = 3;
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const READY_POLL: Duration = Duration::from_millis(50);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const LOG_TAIL_BYTES: u64 = 8 * 1024;
const LOG_TAIL_LINES: usize = 30;

/// Errors from starting the throwaway server.
#[derive(Debug, thiserror::Error)]
pub enum DevDbError {
    /// No usable PostgreSQL server binaries.
    #[error(
        "PostgreSQL server binaries (initdb, postgres, pg_isready) not found ({searched}); \
         install Debian's `postgresql` package or set {BINDIR_ENV} to the directory containing them"
    )]
    BinariesNotFound {
        /// Where we looked.
        searched: String,
    },
    /// Running as root, but there is no unprivileged `postgres` user to run the server as.
    #[error(
        "running as root, but system user `{PG_SYSTEM_USER}` does not exist (initdb/postgres refuse \
         to run as root); install Debian's `postgresql` package or run as an unprivileged user"
    )]
    NoPostgresUser,
    /// `initdb` exited unsuccessfully.
    #[error("initdb failed ({status}): {stderr}")]
    InitDb {
        /// Exit status of `initdb`.
        status: ExitStatus,
        /// What `initdb` wrote to stderr (and stdout, if stderr was empty).
        stderr: String,
    },
    /// `postgres` exited before it accepted connections.
    #[error("postgres exited during startup ({status}) on port {port}; log tail:\n{log_tail}")]
    StartFailed {
        /// Exit status of `postgres`.
        status: ExitStatus,
        /// Port it was asked to listen on.
        port: u16,
        /// Last lines of the server log.
        log_tail: String,
    },
    /// `postgres` did not accept connections in time.
    #[error(
        "postgres did not accept connections on port {port} within {timeout:?}; log tail:\n{log_tail}"
    )]
    StartTimeout {
        /// Port it was asked to listen on.
        port: u16,
        /// How long we waited.
        timeout: Duration,
        /// Last lines of the server log.
        log_tail: String,
    },
    /// An I/O or system-call failure.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> DevDbError {
    let context = context.into();
    move |source| DevDbError::Io { context, source }
}

fn nix_err(context: impl Into<String>) -> impl FnOnce(nix::Error) -> DevDbError {
    let context = context.into();
    move |errno| DevDbError::Io {
        context,
        source: io::Error::from(errno),
    }
}

/// A running throwaway PostgreSQL server. Stopped (and its data removed) by [`stop`](Self::stop)
/// or on drop.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    port: u16,
    /// The directory of the server's Unix socket.
    sock: PathBuf,
    child: Option<Child>,
    dir: Option<tempfile::TempDir>,
    /// Held while the server is ours; released by the kernel if this process dies without
    /// running `Drop`, which lets a later `start` sweep the leftover directory.
    owner_lock: Option<Flock<File>>,
}

impl EmbeddedPostgres {
    /// initdb into a fresh temp dir, start postgres on 127.0.0.1 with a free port, wait until it
    /// accepts connections. Commits are not flushed to disk: the data is thrown away.
    pub fn start() -> Result<Self, DevDbError> {
        Self::start_with(Durability::Throwaway)
    }

    /// [`Self::start`] with PostgreSQL's own durability (`fsync`, `synchronous_commit` and
    /// `full_page_writes` on): each acknowledged commit is on disk, as on a production server.
    pub fn start_durable() -> Result<Self, DevDbError> {
        Self::start_with(Durability::Flushed)
    }

    fn start_with(durability: Durability) -> Result<Self, DevDbError> {
        let bindir = find_bindir()?;
        let run_as = if nix::unistd::geteuid().is_root() {
            let user = User::from_name(PG_SYSTEM_USER)
                .map_err(nix_err(format!("looking up user `{PG_SYSTEM_USER}`")))?
                .ok_or(DevDbError::NoPostgresUser)?;
            Some(RunAs {
                uid: user.uid,
                gid: user.gid,
            })
        } else {
            None
        };

        let parent = temp_parent(run_as.is_some());
        sweep_stale(&parent);
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(io_err(format!(
                "creating temporary directory in {}",
                parent.display()
            )))?;
        let root = dir.path().to_path_buf();
        let data = root.join("data");
        let sock = root.join("sock");
        let log = root.join("postgres.log");
        let owner_lock = lock_owner(&root)?;

        fs::create_dir(&sock).map_err(io_err(format!("creating {}", sock.display())))?;
        if let Some(ra) = run_as {
            // The directory is 0700, so after the chown only that user (and root) can enter it;
            // `temp_parent` made sure everything above it is world-traversable.
            ra.chown(&root)?;
            ra.chown(&sock)?;
        }

        init_db(&bindir, &root, &data, run_as)?;

        let mut attempt = 1;
        loop {
            let port = free_port()?;
            match launch(&bindir, &root, &data, &sock, &log, port, run_as, durability) {
                Ok(child) => {
                    tracing::info!(
                        port,
                        pid = child.id(),
                        dir = %root.display(),
                        "throwaway PostgreSQL server is ready"
                    );
                    return Ok(Self {
                        port,
                        sock: sock.clone(),
                        child: Some(child),
                        dir: Some(dir),
                        owner_lock: Some(owner_lock),
                    });
                }
                Err(err @ DevDbError::StartFailed { .. })
                    if attempt < START_ATTEMPTS && looks_like_port_clash(&err) =>
                {
                    tracing::debug!(port, attempt, "postgres could not bind its port, retrying");
                    attempt += 1;
                }
                // `dir` is dropped (and removed) on the way out.
                Err(err) => return Err(err),
            }
        }
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// postgres://postgres@127.0.0.1:PORT/<database>  (trust auth, superuser `postgres`)
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://{PG_SUPERUSER}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// The same database over the server's Unix socket (what the service itself uses: no TCP
    /// stack between it and its database: less of the kernel's work per statement).
    pub fn socket_url(&self, database: &str) -> String {
        let host: String =
            form_urlencoded::byte_serialize(self.sock.as_os_str().as_encoded_bytes()).collect();
        format!(
            "postgres://{PG_SUPERUSER}@localhost/{database}?host={host}&port={}",
            self.port
        )
    }

    /// Fast shutdown, wait for exit, remove the data dir. Idempotent. Also done by Drop.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            shutdown(&mut child);
        }
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_path_buf();
            if let Err(err) = dir.close() {
                tracing::warn!(dir = %path.display(), error = %err, "could not remove throwaway PostgreSQL directory");
            }
        }
        self.owner_lock = None;
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The unprivileged identity the server runs as when we are root.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: Uid,
    gid: Gid,
}

impl RunAs {
    fn chown(&self, path: &Path) -> Result<(), DevDbError> {
        nix::unistd::chown(path, Some(self.uid), Some(self.gid))
            .map_err(nix_err(format!("chown {}", path.display())))
    }

    fn apply(&self, cmd: &mut Command) {
        // std drops supplementary groups, then setgid, then setuid in the child.
        cmd.uid(self.uid.as_raw()).gid(self.gid.as_raw());
    }
}

/// Fast shutdown (SIGINT), wait up to [`STOP_TIMEOUT`], then SIGKILL.
fn shutdown(child: &mut Child) {
    let raw = i32::try_from(child.id()).unwrap_or(i32::MAX);
    let pid = Pid::from_raw(raw);
    match child.try_wait() {
        Ok(Some(_)) => return,
        Ok(None) => {}
        Err(err) => tracing::warn!(pid = raw, error = %err, "could not poll postgres"),
    }
    if let Err(err) = signal::kill(pid, Signal::SIGINT) {
        tracing::warn!(pid = raw, error = %err, "could not send SIGINT to postgres");
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) => thread::sleep(Duration::from_millis(20)),
            Err(_) => break,
        }
    }
    tracing::warn!(pid = raw, "postgres did not shut down in time, killing it");
    if let Err(err) = child.kill() {
        tracing::warn!(pid = raw, error = %err, "could not kill postgres");
    }
    if let Err(err) = child.wait() {
        tracing::warn!(pid = raw, error = %err, "could not reap postgres");
    }
}

// ---------------------------------------------------------------------------------------------
// Binary discovery
// ---------------------------------------------------------------------------------------------

const REQUIRED_BINARIES: [&str; 3] = ["initdb", "postgres", "pg_isready"];

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn has_binaries(dir: &Path) -> bool {
    REQUIRED_BINARIES
        .iter()
        .all(|name| is_executable(&dir.join(name)))
}

/// Parses a Debian version directory name such as `15` or `9.6` into a sortable key.
fn version_key(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|p| p.parse::<u32>().ok()).collect()
}

fn find_bindir() -> Result<PathBuf, DevDbError> {
    if let Some(dir) = std::env::var_os(BINDIR_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return if has_binaries(&dir) {
            Ok(dir)
        } else {
            Err(DevDbError::BinariesNotFound {
                searched: format!("{BINDIR_ENV}={}", dir.display()),
            })
        };
    }

    let mut candidates: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(DEBIAN_PG_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let key = version_key(entry.file_name().to_str()?)?;
            let bin = entry.path().join("bin");
            is_executable(&bin.join("initdb")).then_some((key, bin))
        })
        .collect();
    candidates.sort();
    if let Some((_, bin)) = candidates.pop()
        && has_binaries(&bin)
    {
        return Ok(bin);
    }

    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let initdb = dir.join("initdb");
        if is_executable(&initdb) {
            // Resolve symlinks (e.g. /usr/bin/initdb -> ../lib/postgresql/NN/bin/initdb) so that
            // postgres and pg_isready are found next to the real binary.
            let real = fs::canonicalize(&initdb).unwrap_or(initdb);
            if let Some(parent) = real.parent().filter(|p| has_binaries(p)) {
                return Ok(parent.to_path_buf());
            }
            if has_binaries(&dir) {
                return Ok(dir);
            }
        }
    }

    Err(DevDbError::BinariesNotFound {
        searched: format!("{BINDIR_ENV} unset, {DEBIAN_PG_ROOT}/*/bin, PATH"),
    })
}

// ---------------------------------------------------------------------------------------------
// Temp dir, initdb, launch
// ---------------------------------------------------------------------------------------------

/// `std::env::temp_dir()`, unless another user must reach into it and one of its ancestors is
/// not world-traversable (e.g. `TMPDIR=/root/tmp`), in which case `/tmp`.
fn temp_parent(for_other_user: bool) -> PathBuf {
    let tmp = std::env::temp_dir();
    if !for_other_user {
        return tmp;
    }
    let traversable = tmp
        .ancestors()
        .all(|p| fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    if traversable {
        tmp
    } else {
        tracing::debug!(tmp = %tmp.display(), "temp dir not traversable by the postgres user, using /tmp");
        PathBuf::from("/tmp")
    }
}

/// Creates `<root>/.owner.lock` and takes an exclusive flock on it. The file is created under a
/// temporary name and renamed only once locked, so [`sweep_stale`] never sees it unlocked while
/// its owner is alive.
fn lock_owner(root: &Path) -> Result<Flock<File>, DevDbError> {
    let tmp = root.join(".owner.lock.new");
    let file = File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| nix_err(format!("locking {}", tmp.display()))(errno))?;
    let dest = root.join(OWNER_LOCK);
    fs::rename(&tmp, &dest).map_err(io_err(format!("renaming to {}", dest.display())))?;
    Ok(lock)
}

/// Removes directories left behind by processes that died without running `Drop` (SIGKILL,
/// `std::process::exit`, servers kept in statics): the parent-death signal stopped their server,
/// but nobody deleted the data. A directory is stale when its owner lock can be taken (the
/// owner is gone) and it has no `postmaster.pid` (the server has finished shutting down).
/// Directories without an owner lock are left alone. Best effort: errors are ignored.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(DIR_PREFIX.as_bytes())
        {
            continue;
        }
        let dir = entry.path();
        let Ok(file) = File::open(dir.join(OWNER_LOCK)) else {
            continue;
        };
        let Ok(_lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        if dir.join("data").join("postmaster.pid").exists() {
            continue;
        }
        match fs::remove_dir_all(&dir) {
            Ok(()) => {
                tracing::debug!(dir = %dir.display(), "removed stale throwaway PostgreSQL directory")
            }
            Err(err) => {
                tracing::debug!(dir = %dir.display(), error = %err, "could not remove stale directory")
            }
        }
    }
}

/// Removes `PG*` variables (PGDATA, PGPORT, PGHOST, PGOPTIONS, ...) that could redirect the tools.
fn scrub_env(cmd: &mut Command) {
    let pg_vars: Vec<OsString> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| k.as_encoded_bytes().starts_with(b"PG"))
        .collect();
    for k in pg_vars {
        cmd.env_remove(k);
    }
}

fn init_db(
    bindir: &Path,
    root: &Path,
    data: &Path,
    run_as: Option<RunAs>,
) -> Result<(), DevDbError> {
    let mut last = None;
    for locale_arg in ["--locale=C.UTF-8", "--no-locale"] {
        if data.exists() {
            fs::remove_dir_all(data).map_err(io_err(format!("removing {}", data.display())))?;
        }
        let mut cmd = Command::new(bindir.join("initdb"));
        cmd.arg("-D")
            .arg(data)
            .args([
                "-U",
                PG_SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                locale_arg,
                "-N",
            ])
            .current_dir(root)
            .stdin(Stdio::null());
        scrub_env(&mut cmd);
        if let Some(ra) = run_as {
            ra.apply(&mut cmd);
        }
        let started = Instant::now();
        let out = cmd.output().map_err(io_err(format!(
            "running {}",
            bindir.join("initdb").display()
        )))?;
        if out.status.success() {
            tracing::debug!(elapsed = ?started.elapsed(), locale_arg, "initdb done");
            return Ok(());
        }
        let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if stderr.is_empty() {
            stderr = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        }
        tracing::debug!(locale_arg, %stderr, "initdb failed");
        last = Some(DevDbError::InitDb {
            status: out.status,
            stderr,
        });
    }
    Err(last.unwrap_or(DevDbError::BinariesNotFound {
        searched: bindir.display().to_string(),
    }))
}

fn free_port() -> Result<u16, DevDbError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(io_err("binding 127.0.0.1:0 to find a free port"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("reading local address of probe socket"))?
        .port();
    Ok(port)
}

fn looks_like_port_clash(err: &DevDbError) -> bool {
    let DevDbError::StartFailed { log_tail, .. } = err else {
        return false;
    };
    [
        "could not bind",
        "Address already in use",
        "could not create any TCP/IP sockets",
        "could not create lock file",
    ]
    .iter()
    .any(|needle| log_tail.contains(needle))
}

/// Starts `postgres` and waits until it accepts connections. On failure the child is gone.
/// Whether the server flushes its commits to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    Throwaway,
    Flushed,
}

#[allow(clippy::too_many_arguments)] // the server's paths, its port, its user and its durability
fn launch(
    bindir: &Path,
    root: &Path,
    data: &Path,
    sock: &Path,
    log: &Path,
    port: u16,
    run_as: Option<RunAs>,
    durability: Durability,
) -> Result<Child, DevDbError> {
    let log_file = File::create(log).map_err(io_err(format!("creating {}", log.display())))?;
    let log_err = log_file
        .try_clone()
        .map_err(io_err(format!("duplicating {}", log.display())))?;
    if let Some(ra) = run_as {
        ra.chown(log)?;
    }

    let port_s = port.to_string();
    let mut cmd = Command::new(bindir.join("postgres"));
    cmd.arg("-D")
        .arg(data)
        .args(["-h", "127.0.0.1", "-p", &port_s, "-k"])
        .arg(sock)
        .args(["-c", "max_connections=300", "-c", "shared_buffers=128MB"]);
    if durability == Durability::Throwaway {
        cmd.args([
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
        ]);
    }
    cmd.current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(log_err))
        // Own process group: a terminal Ctrl-C goes to us, and we decide when the server stops
        // (otherwise `serve --dev` would lose its database mid graceful-shutdown).
        .process_group(0);
    scrub_env(&mut cmd);
    if let Some(ra) = run_as {
        ra.apply(&mut cmd);
    }
    let parent_pid = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (prctl, getppid) without allocating or taking locks. std runs pre_exec
    // closures after setgid/setuid, which matters because changing credentials clears the
    // parent-death signal.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGINT).map_err(io::Error::from)?;
            // If the parent died between fork and prctl, the signal will never come: give up.
            if nix::unistd::getppid() != parent_pid {
                return Err(io::Error::from_raw_os_error(
                    nix::errno::Errno::ESRCH as i32,
                ));
            }
            Ok(())
        });
    }

    let mut child = spawn_from_spawner_thread(cmd).map_err(io_err(format!(
        "starting {}",
        bindir.join("postgres").display()
    )))?;
    match wait_ready(bindir, data, &mut child, port, log) {
        Ok(()) => Ok(child),
        Err(err) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(err)
        }
    }
}

fn wait_ready(
    bindir: &Path,
    data: &Path,
    child: &mut Child,
    port: u16,
    log: &Path,
) -> Result<(), DevDbError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(io_err("polling postgres during startup"))?
        {
            return Err(DevDbError::StartFailed {
                status,
                port,
                log_tail: log_tail(log),
            });
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(250)).is_ok()
            && pid_file_is(data, child.id())
            && pg_isready(bindir, port)
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DevDbError::StartTimeout {
                port,
                timeout: READY_TIMEOUT,
                log_tail: log_tail(log),
            });
        }
        thread::sleep(READY_POLL);
    }
}

/// Whether `postmaster.pid` names our child, so that a foreign listener on the same port is not
/// mistaken for our server.
fn pid_file_is(data: &Path, pid: u32) -> bool {
    fs::read_to_string(data.join("postmaster.pid"))
        .ok()
        .and_then(|s| s.lines().next().map(|l| l.trim() == pid.to_string()))
        .unwrap_or(false)
}

fn pg_isready(bindir: &Path, port: u16) -> bool {
    let mut cmd = Command::new(bindir.join("pg_isready"));
    cmd.args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", PG_SUPERUSER, "-d", "postgres", "-t", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    scrub_env(&mut cmd);
    cmd.status().is_ok_and(|s| s.success())
}

fn log_tail(log: &Path) -> String {
    let read = || -> io::Result<String> {
        let mut f = File::open(log)?;
        let len = f.metadata()?.len();
        let start = len.saturating_sub(LOG_TAIL_BYTES);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        let text = String::from_utf8_lossy(&buf);
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(LOG_TAIL_LINES);
        Ok(lines[from..].join("\n"))
    };
    read().unwrap_or_else(|err| format!("<could not read {}: {err}>", log.display()))
}

// ---------------------------------------------------------------------------------------------
// Spawner thread (the test harness starts its Keystone through it too)
// ---------------------------------------------------------------------------------------------

type SpawnJob = (Command, Sender<io::Result<Child>>);

/// Sender to the one spawner thread; `None` until first use.
static SPAWNER: Mutex<Option<Sender<SpawnJob>>> = Mutex::new(None);

/// Forks `cmd` from a dedicated thread that lives as long as the process.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process; the
/// caller may be a short-lived thread (e.g. a tokio test runtime worker), so the fork has to
/// happen on a thread that never exits. The static keeps a `Sender` alive forever, so the
/// thread's `recv` never fails and the thread never returns.
pub fn spawn_from_spawner_thread(cmd: Command) -> io::Result<Child> {
    let tx = {
        let mut guard = SPAWNER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match guard.as_ref() {
            Some(tx) => tx.clone(),
            None => {
                let (tx, rx) = mpsc::channel::<SpawnJob>();
                thread::Builder::new()
                    .name("process-spawner".into())
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
        .map_err(|_| io::Error::other("the process spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the process spawner thread did not answer"))?
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::BufRead;

    fn psql_select_1(port: u16) -> std::process::Output {
        Command::new("/usr/bin/psql")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
            .args(["-d", "postgres", "-XAtqc", "select 1"])
            .env_remove("PGPASSWORD")
            .env_remove("PGSERVICE")
            .output()
            .expect("run psql")
    }

    fn port_open(port: u16) -> bool {
        TcpStream::connect_timeout(
            &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            Duration::from_millis(500),
        )
        .is_ok()
    }

    #[test]
    fn start_query_stop() {
        let mut pg = EmbeddedPostgres::start().expect("start");
        let port = pg.port();
        let dir = pg.dir.as_ref().expect("dir").path().to_path_buf();
        assert!(dir.join("data").join("PG_VERSION").is_file());
        assert_eq!(
            pg.url("magnum"),
            format!("postgres://postgres@127.0.0.1:{port}/magnum")
        );

        let out = psql_select_1(port);
        assert!(
            out.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");

        pg.stop();
        assert!(!port_open(port), "port {port} still open after stop");
        assert!(!dir.exists(), "{} still exists after stop", dir.display());
        pg.stop(); // idempotent
        assert!(!psql_select_1(port).status.success());
    }

    #[test]
    fn the_socket_url_reaches_the_server_over_its_unix_socket() {
        use sqlx::Connection;
        let pg = EmbeddedPostgres::start().expect("start");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let over_socket: bool = rt.block_on(async {
            let mut c = sqlx::PgConnection::connect(&pg.socket_url("postgres"))
                .await
                .expect("connect over the socket");
            // No client address: a Unix-socket connection.
            sqlx::query_scalar("SELECT inet_client_addr() IS NULL")
                .fetch_one(&mut c)
                .await
                .expect("query")
        });
        assert!(over_socket);
    }

    #[test]
    fn a_durable_server_flushes_its_commits_and_a_throwaway_one_does_not() {
        use sqlx::Connection;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let settings = |pg: &EmbeddedPostgres| -> Vec<String> {
            rt.block_on(async {
                let mut c = sqlx::PgConnection::connect(&pg.socket_url("postgres"))
                    .await
                    .expect("connect");
                let mut out = Vec::new();
                for name in ["fsync", "synchronous_commit", "full_page_writes"] {
                    let v: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {name}")))
                        .fetch_one(&mut c)
                        .await
                        .expect("show");
                    out.push(v);
                }
                out
            })
        };
        let durable = EmbeddedPostgres::start_durable().expect("start durable");
        assert_eq!(settings(&durable), ["on", "on", "on"]);
        let throwaway = EmbeddedPostgres::start().expect("start");
        assert_eq!(settings(&throwaway), ["off", "off", "off"]);
    }

    #[test]
    fn two_servers_get_different_ports() {
        let a = EmbeddedPostgres::start().expect("start a");
        let b = EmbeddedPostgres::start().expect("start b");
        assert_ne!(a.port(), b.port());
        assert!(psql_select_1(a.port()).status.success());
        assert!(psql_select_1(b.port()).status.success());
        let (pa, pb) = (a.port(), b.port());
        let dir_a = a.dir.as_ref().expect("dir").path().to_path_buf();
        drop(a);
        drop(b);
        assert!(!port_open(pa) && !port_open(pb));
        assert!(!dir_a.exists());
    }

    #[test]
    fn start_from_short_lived_thread_survives_thread_exit() {
        // The caller thread exits right after start; pdeathsig must not fire.
        let pg = thread::spawn(EmbeddedPostgres::start)
            .join()
            .expect("join")
            .expect("start");
        thread::sleep(Duration::from_millis(500));
        assert!(psql_select_1(pg.port()).status.success());
    }

    #[test]
    fn bad_bindir_env_is_reported() {
        let err = DevDbError::BinariesNotFound {
            searched: "x".into(),
        };
        let msg = err.to_string();
        assert!(
            msg.contains("postgresql") && msg.contains(BINDIR_ENV),
            "{msg}"
        );
        assert_eq!(version_key("15"), Some(vec![15]));
        assert!(version_key("9.6") < version_key("15"));
        assert_eq!(version_key("foo"), None);
    }

    #[test]
    fn sweep_removes_only_orphaned_dirs() {
        let parent = tempfile::tempdir().expect("parent");
        let mk = |name: &str| {
            let d = parent.path().join(name);
            fs::create_dir_all(d.join("data")).expect("mkdir");
            d
        };
        let orphan = mk("magnum-capi-devdb-orphan");
        File::create(orphan.join(OWNER_LOCK)).expect("lock file");
        let owned = mk("magnum-capi-devdb-owned");
        let _held = lock_owner(&owned).expect("lock");
        let running = mk("magnum-capi-devdb-running");
        File::create(running.join(OWNER_LOCK)).expect("lock file");
        File::create(running.join("data").join("postmaster.pid")).expect("pid file");
        let unmarked = mk("magnum-capi-devdb-unmarked");
        let foreign = mk("something-else");
        File::create(foreign.join(OWNER_LOCK)).expect("lock file");

        sweep_stale(parent.path());

        assert!(!orphan.exists());
        assert!(owned.exists() && running.exists() && unmarked.exists() && foreign.exists());
    }

    const HELPER_ENV: &str = "MAGNUM_CAPI_DEVDB_TEST_HELPER";

    /// Child half of `server_dies_with_sigkilled_parent`: starts a server, reports it, hangs.
    #[test]
    #[ignore = "helper process for server_dies_with_sigkilled_parent"]
    fn helper_start_and_hang() {
        if std::env::var_os(HELPER_ENV).is_none() {
            return;
        }
        let pg = EmbeddedPostgres::start().expect("start");
        let pid = pg.child.as_ref().expect("child").id();
        let dir = pg.dir.as_ref().expect("dir").path().display().to_string();
        println!("DEVDB_HELPER {} {} {}", pg.port(), pid, dir);
        loop {
            thread::sleep(Duration::from_secs(60));
        }
    }

    fn process_alive(pid: u32) -> bool {
        // A zombie (not reaped because PID 1 in a container may not reap) counts as dead.
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X"),
            Err(_) => false,
        }
    }

    #[test]
    fn server_dies_with_sigkilled_parent() {
        let exe = std::env::current_exe().expect("current_exe");
        // libtest names tests by their path without the crate name.
        let path = module_path!()
            .split_once("::")
            .map_or("tests", |(_, rest)| rest);
        let name = format!("{path}::helper_start_and_hang");
        let mut helper = Command::new(exe)
            .args([
                "--exact",
                name.as_str(),
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn helper");
        let stdout = helper.stdout.take().expect("stdout");
        // libtest prints "test tests::helper_start_and_hang ... " without a newline first, so the
        // marker may be in the middle of a line. Read on a thread so a broken helper cannot hang us.
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for l in io::BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if let Some(idx) = l.find("DEVDB_HELPER ") {
                    let _ = tx.send(l[idx..].to_owned());
                    break;
                }
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(err) => {
                let _ = helper.kill();
                let _ = helper.wait();
                panic!("helper did not report a server: {err}");
            }
        };
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts.len(), 4, "helper said {line:?}");
        let port: u16 = parts[1].parse().expect("port");
        let pid: u32 = parts[2].parse().expect("pid");
        let dir = PathBuf::from(parts[3]);
        assert!(process_alive(pid));
        assert!(psql_select_1(port).status.success());

        helper.kill().expect("SIGKILL helper");
        helper.wait().expect("reap helper");

        let deadline = Instant::now() + Duration::from_secs(15);
        while process_alive(pid) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        let alive = process_alive(pid);
        if alive {
            let _ = signal::kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        assert!(!alive, "postgres {pid} outlived its SIGKILLed parent");
        assert!(!port_open(port));
        // The orphaned directory is swept by the next start.
        assert!(dir.join(OWNER_LOCK).exists());
        let pg = EmbeddedPostgres::start().expect("start after orphan");
        let swept = !dir.exists();
        let _ = fs::remove_dir_all(&dir);
        drop(pg);
        assert!(swept, "{} was not swept", dir.display());
    }
}
