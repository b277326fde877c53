#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Load benchmark of the read paths and the create, with Magnum 23's figures beside ours.
//!
//! The service runs in this process (multi-threaded runtime, loopback listener) on a private
//! PostgreSQL; the load comes from `wrk -t2 -c20 --latency` in a separate process (the method
//! of the performance issue; `apt-get install wrk`), or, when `wrk` is not on `PATH` or with
//! `BENCH_LOADGEN=internal`, from 20 reqwest connections in this process.
//!
//! By default the service runs on **the production path**: everything `serve` runs
//! (`server::serve_members_until`: the API, the operation worker, the heartbeat, the view
//! follower, and each management cluster's watchers, status writer, probe and maintenance),
//! the real Keystone validating tokens (tests/it/common/keystone.rs), the fake Glance/Nova/
//! Neutron answering the create's look-ups through the token's catalog, the caller's token
//! sealed with a configured key, the CAPI driver validating the values document, and placement
//! over two management clusters, each `magnum-capi simulate` as a process of its own (this
//! build's binary; [`Simulators`]). The worker applies the creates it claims before the bench
//! removes them ([`Recycler`] counts them). `BENCH_PATH=dev` runs the old `--dev` path (header
//! identity, no look-ups, the simulated backend, no worker) instead.
//!
//! Data (the issue's): 50 templates; clusters with 2 nodegroups each, 11 labels on every
//! cluster, nodegroup and template, all in one project. Scenarios at 10,000 clusters:
//! `GET /v1/clustertemplates`, `GET /v1/clusters/detail?limit=1000`, `GET /v1/clusters?limit=1000`,
//! `GET /v1/clusters/{uuid}`, and shows of 1,000 different clusters (each connection going round
//! them, a wrk script), each asked of two instances on the same database — one as `serve`
//! runs it (serialised views reused until a change notification, src/view_cache.rs) and one with
//! `[api] view_cache_mib = 0` (every answer built from a PostgreSQL read started after its
//! request, shared only by concurrent requests, src/coalesce.rs) — and followed by its
//! "ceiling": a trivial handler in this process answering the same bytes from memory under the
//! same load generator (what the machine, the loopback and the load generator allow at most).
//! Then reads of many different objects mixed in one run ([`mixed_reads`]: shows of 1,000
//! clusters, list and detail pages at 300 markers, nodegroup lists by role and nodegroup shows
//! of 300 clusters, template shows and pages; each kind's figures apart), then
//! `POST /v1/clusters` (latency of the 202) with 1 and with 20 reqwest connections in one
//! project whose stored quota is 20, and with 20 connections in 20 such projects (with
//! Keystone: 20 new Keystone projects, a member's token in each, validated once before), each
//! beside its ceiling (a 202 from memory); before them, creates with a token not yet cached
//! (cold) beside its second use (warm): each client
//! removes the cluster it created (untimed, by SQL) before its next create, so its project stays
//! within the quota (the removals waiting at once go out in one statement: [`Recycler`]). The real Magnum's create is measured the same way (same clients, same
//! projects and quotas, same body; at least 10 s), its look-ups going to the same fake
//! Glance/Nova/Neutron through the catalog in its requests' token info; its cast to the
//! conductor goes to oslo.messaging's `fake://` transport and writes no row (see
//! [`Recycle::Nothing`]). A create it refuses stops the bench with its status and body. After
//! each of Magnum's scenarios the bench waits until it has answered the requests still queued
//! ([`settle`]), so its backlog does not run on our next scenario's cores. The closing table puts each figure beside Magnum 23's under the same method (gunicorn, 2
//! workers, same data, Keystone tokens cached; the performance issue's reference), with the
//! ratio, the ceiling and our share of it.
//!
//! The scale curve follows: with 1,000, 10,000 and 100,000 clusters in the database, the time of
//! one `GET /v1/clusters/detail?limit=1000` (sequential requests), the service's RSS (this
//! process; PostgreSQL not included) and the p99 of `GET /v1/clusters?limit=1000` with 100
//! concurrent connections.
//!
//! Run: `cargo bench --bench api_load` (a release build). Knobs (environment):
//! * `BENCH_SECS=N` — seconds per load scenario (default 10);
//! * `BENCH_SCALE=1000,10000,100000` — the scale curve's points (`none` to skip it; the table
//!   always runs at 10,000 clusters);
//! * `BENCH_LOADGEN=wrk|internal` — the load generator (default: wrk when installed);
//! * `BENCH_ONLY=<text>` — only the reads whose path contains it (to profile one; with `perf
//!   record -a` started once the scenarios begin, see docs/benchmarks.md); `mixed`: only the
//!   mixed reads; `no-reads`: only the creates;
//! * `BENCH_PATH=dev` — the `--dev` path instead of the production path (above);
//! * `BENCH_KEYSTONE=1` — with `BENCH_PATH=dev`, real tokens and look-ups all the same;
//! * `BENCH_PERF=<prefix>` — `perf record` around each of our create scenarios ([`Perf`]);
//! * `BENCH_MAGNUM=0` — no Magnum beside us (typed-in figures, labelled so);
//! * `BENCH_KEYSTONE_NICE=N` — Keystone's gunicorn runs at niceness N (default 10; 0 leaves it):
//!   in production Keystone runs on other machines, here it shares the two cores with the
//!   service measured (the worker's application credentials), so it yields them;
//! * `BENCH_KEYSTONE_CACHE=0` — Keystone without its cache (by default its `[cache]` is on, with
//!   oslo.cache's in-process dictionary, as production Keystones run it with memcached; off, a
//!   validation runs ~300 SQL queries and each of the worker's application-credential requests
//!   costs Keystone ~0.3 s of CPU on the two cores measured);
//! * `BENCH_KEYSTONE_IDLE=0` — Keystone's gunicorn keeps the normal scheduling policy (by default
//!   it runs at `SCHED_IDLE`, `chrt -i`: only on a core nothing else wants, so a request of ours
//!   waking never waits for it);
//!
//! * `BENCH_PG=throwaway` — our PostgreSQL without flushing its commits (`fsync=off`, as
//!   `serve --dev` runs it); by default it flushes each commit, as a production server and the
//!   MariaDB under Magnum (its defaults: `innodb_flush_log_at_trx_commit=1`) do.
//!
//! The machine is shared: compare ratios to the ceiling, measured in the same minute, rather
//! than absolute figures across runs.

#[path = "../tests/it/common/fakecloud.rs"]
mod fakecloud;
#[path = "../tests/it/common/keystone.rs"]
mod keystone;
// The import tests' harness: this bench uses its MariaDB, schema and gunicorn launcher only.
#[allow(dead_code)]
#[path = "../tests/it/common/magnum.rs"]
mod magnum;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::serve::ListenerExt;
use magnum_capi::app::{App, AuthMode};
use magnum_capi::config::{Config, DriverKind, ManagementClusterConfig};
use magnum_capi::db;
use magnum_capi::devdb::EmbeddedPostgres;
use magnum_capi::server;
use reqwest::header::{HeaderMap, HeaderValue};

const CONCURRENCY: usize = 20;
/// Clients of the scale curve's list scenario.
const MANY_CLIENTS: usize = 100;
/// The table's data size.
const TABLE_CLUSTERS: i64 = 10_000;

struct Stats {
    rps: f64,
    p50: Duration,
    p99: Duration,
    requests: u64,
    bytes: usize,
}

/// The production path's sealing key (base64 of 32 bytes; any key does, the bench's own).
const SEAL_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The production path's management clusters: `magnum-capi simulate` processes (this build's
/// binary), each with the CAPI/CAPO CRDs as its admission when they are at hand
/// (`MAGNUM_CAPI_CRD_DIR`, else ../shared/crds); killed when dropped.
struct Simulators {
    children: Vec<std::process::Child>,
    kubeconfigs: Vec<std::path::PathBuf>,
    _dir: tempfile::TempDir,
}

impl Simulators {
    fn start(n: usize) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let crds = std::env::var_os("MAGNUM_CAPI_CRD_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/crds")
            });
        let mut sims = Simulators {
            children: Vec::new(),
            kubeconfigs: Vec::new(),
            _dir: dir,
        };
        for i in 0..n {
            let kubeconfig = sims._dir.path().join(format!("mc-{i}.kubeconfig"));
            let log =
                std::fs::File::create(sims._dir.path().join(format!("mc-{i}.log"))).expect("log");
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_magnum-capi"));
            cmd.arg("simulate").arg("--kubeconfig-out").arg(&kubeconfig);
            if crds.join("cluster.x-k8s.io_clusters.yaml").exists() {
                cmd.arg("--crd-dir").arg(&crds);
            }
            let child = cmd
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()
                .expect("magnum-capi simulate");
            sims.children.push(child);
            let t = Instant::now();
            while !kubeconfig.is_file() {
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "simulate wrote no kubeconfig"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            sims.kubeconfigs.push(kubeconfig);
        }
        sims
    }

    /// The simulators' resident sets, in MiB.
    fn rss_mib(&self) -> Vec<f64> {
        self.children
            .iter()
            .map(|c| rss_of(&format!("/proc/{}/status", c.id())))
            .collect()
    }
}

impl Drop for Simulators {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Which load generator drives the scenarios.
#[derive(Clone, Copy, PartialEq)]
enum LoadGen {
    Wrk,
    Internal,
}

struct Bench {
    client: Arc<reqwest::Client>,
    headers: HeaderMap,
    loadgen: LoadGen,
    secs: u64,
}

impl Bench {
    /// Loads `url` with `connections` connections for `secs` seconds.
    async fn get(&self, url: &str, connections: usize, secs: u64) -> Stats {
        self.get_paths(url, &[], connections, secs).await
    }

    /// Loads `base` followed by each of `paths` in turn (none: `base` alone) with
    /// `connections` connections for `secs` seconds.
    async fn get_paths(
        &self,
        base: &str,
        paths: &[String],
        connections: usize,
        secs: u64,
    ) -> Stats {
        match self.loadgen {
            LoadGen::Wrk => wrk(&self.headers, base, paths, connections, secs).await,
            LoadGen::Internal => {
                let urls: Vec<String> = if paths.is_empty() {
                    vec![base.to_string()]
                } else {
                    paths.iter().map(|p| format!("{base}{p}")).collect()
                };
                load(&self.client, &urls, connections, secs, None).await
            }
        }
    }

    /// The trivial handler answering `body` from memory, under the same load.
    async fn ceiling(&self, body: Vec<u8>, connections: usize, secs: u64) -> Stats {
        self.ceiling_paths(body, &[], connections, secs).await
    }

    /// [`Self::ceiling`] asked for each of `paths` in turn (any path gets `body`).
    async fn ceiling_paths(
        &self,
        body: Vec<u8>,
        paths: &[String],
        connections: usize,
        secs: u64,
    ) -> Stats {
        let (addr, server) = trivial_server(body).await;
        let s = self
            .get_paths(&format!("http://{addr}"), paths, connections, secs)
            .await;
        server.abort();
        s
    }

    async fn body(&self, url: &str) -> Vec<u8> {
        let r = self.client.get(url).send().await.expect("request");
        assert!(r.status().is_success(), "{} {url}", r.status());
        r.bytes().await.expect("body").to_vec()
    }
}

/// A trivial handler answering `body` from memory to any request, on a loopback port (the
/// ceiling's server; abort the task to stop it).
async fn trivial_server(body: Vec<u8>) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let body = bytes::Bytes::from(body);
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { ([("content-type", "application/json")], body) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let listener = listener.tap_io(magnum_capi::listener::no_delay);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, server)
}

/// The ceiling of a create scenario: the same clients posting the same body to the trivial
/// handler, which answers a create's 202 body from memory.
async fn ceiling_creates(b: &Bench, clients: usize, secs: u64) -> Stats {
    let (addr, server) =
        trivial_server(br#"{"uuid":"00000000-0000-4000-8000-000000000000"}"#.to_vec()).await;
    let creates = Creates {
        body: "{}".repeat(200),
        clients: vec![HeaderMap::new()],
        recycle: Recycle::Nothing,
    };
    let s = load(
        &b.client,
        &[format!("http://{addr}/v1/clusters")],
        clients,
        secs,
        Some(creates),
    )
    .await;
    server.abort();
    s
}

/// The body of a successful answer to `what` (any other stops the bench with it).
async fn success_body(resp: reqwest::Response, what: &str) -> bytes::Bytes {
    let status = resp.status();
    let body = resp.bytes().await.expect("body");
    assert!(
        status.is_success(),
        "{status} {what}: {}",
        String::from_utf8_lossy(&body)
    );
    body
}

/// `x-auth-token: token`.
fn token_header(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("x-auth-token", HeaderValue::from_str(token).expect("token"));
    h
}

/// `x-project-id: project` (`--dev` identity and the Magnum beside us).
fn project_header(project: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "x-project-id",
        HeaderValue::from_str(project).expect("project"),
    );
    h
}

/// `perf record` while the value lives, around each of our create scenarios
/// (`BENCH_PERF=<prefix>`): `<prefix>-<scenario>.machine` (`1c`, `20c`, `20c20p`), the whole machine (`-a`; `perf report
/// --sort comm` says which process the time went to: this one, PostgreSQL, Keystone, the
/// simulators), and `<prefix>-<scenario>.service`, this process with DWARF call graphs (the service,
/// its worker and the load generator's client side; `perf report --children`).
struct Perf(Vec<std::process::Child>);

impl Perf {
    fn record(prefix: &str, scenario: &str) -> Self {
        let spawn = |args: &[&str]| {
            std::process::Command::new("perf")
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("perf record")
        };
        let pid = std::process::id().to_string();
        let (machine, service) = (
            format!("{prefix}-{scenario}.machine"),
            format!("{prefix}-{scenario}.service"),
        );
        let children = vec![
            spawn(&["record", "-F", "199", "-a", "-g", "-o", &machine]),
            spawn(&[
                "record",
                "-F",
                "199",
                "--call-graph",
                "dwarf,16384",
                "-o",
                &service,
                "-p",
                &pid,
            ]),
        ];
        // perf needs a moment before it samples.
        std::thread::sleep(Duration::from_millis(500));
        Self(children)
    }
}

impl Drop for Perf {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SIGINT: perf writes its file and exits.
            let _ = std::process::Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

/// Serves `state`'s API on a loopback port.
async fn spawn_api(state: magnum_capi::app::AppState) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let svc = magnum_capi::api::service(state);
    // TCP_NODELAY as `serve` sets it (a multi-segment answer would wait for a delayed ACK).
    let listener = listener.tap_io(magnum_capi::listener::no_delay);
    tokio::spawn(async move {
        axum::serve(listener, tower::make::Shared::new(svc))
            .await
            .expect("serve");
    });
    addr
}

/// `wrk -t2 -c<connections> -d<secs>s --latency` with our headers on `base`, or on each of
/// `paths` after it in turn (a script); its summary parsed.
async fn wrk(
    headers: &HeaderMap,
    base: &str,
    paths: &[String],
    connections: usize,
    secs: u64,
) -> Stats {
    let mut cmd = tokio::process::Command::new("wrk");
    cmd.args(["-t2", &format!("-c{connections}"), &format!("-d{secs}s")])
        .args(["--latency", "--timeout", "30s"]);
    // Only for many paths; kept until wrk is done with it.
    let script = (!paths.is_empty()).then(|| {
        // Each thread starts at its own place in the list and goes round it.
        let list: Vec<String> = paths.iter().map(|p| format!("{p:?}")).collect();
        let lua = format!(
            "local paths = {{{}}}\nlocal i = 0\nfunction init(args) i = math.random(#paths) end\n\
             function request() i = i % #paths + 1 return wrk.format(nil, paths[i]) end\n",
            list.join(",")
        );
        let script = tempfile::NamedTempFile::new().expect("wrk script");
        std::fs::write(script.path(), lua).expect("wrk script");
        script
    });
    if let Some(script) = &script {
        cmd.arg("-s").arg(script.path());
    }
    let url = if paths.is_empty() {
        base.to_string()
    } else {
        format!("{base}{}", paths[0])
    };
    for (k, v) in headers {
        cmd.arg("-H")
            .arg(format!("{k}: {}", v.to_str().expect("header")));
    }
    let out = cmd.arg(&url).output().await.expect("running wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wrk failed: {text}");
    assert!(
        !text.contains("Non-2xx"),
        "wrk saw failed requests on {url}: {text}"
    );
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::trim))
            .unwrap_or_else(|| panic!("no {prefix:?} in wrk's output: {text}"))
            .to_string()
    };
    let duration = |v: &str| {
        let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
        let n: f64 = num.parse().expect("wrk latency");
        Duration::from_secs_f64(match unit {
            "us" => n / 1e6,
            "ms" => n / 1e3,
            "s" => n,
            "m" => n * 60.0,
            _ => panic!("wrk latency unit {unit:?}"),
        })
    };
    let requests: u64 = text
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("wrk request count");
    Stats {
        rps: field("Requests/sec:").parse().expect("wrk req/s"),
        p50: duration(&field("50%")),
        p99: duration(&field("99%")),
        requests,
        bytes: 0,
    }
}

/// The creates of a POST scenario: the body, the project client `i` creates in
/// (`projects[i % len]`, by `x-project-id`; with Keystone the token's project) and how each
/// created cluster is removed again, untimed, so the project stays within its quota of 20.
#[derive(Clone)]
struct Creates {
    body: String,
    /// Client `i`'s own headers: `clients[i % len]` (its project: `x-project-id`, or with
    /// Keystone its project's token; none: the client's defaults).
    clients: Vec<HeaderMap>,
    recycle: Recycle,
}

/// How a POST scenario removes each cluster it created before the client's next create.
#[derive(Clone)]
enum Recycle {
    /// Our rows (the cluster, its nodegroups and its pending operation) deleted by SQL: the
    /// worker is off, and an API delete would only record a delete operation. The clients'
    /// removals go to one task that deletes all those waiting in one statement (see
    /// [`Recycler`]).
    Ours(Recycler),
    /// Nothing: Magnum's API writes no row. It casts the create to its conductor, which writes
    /// the cluster; here the cast goes to oslo.messaging's `fake://` transport (a cast does not
    /// wait for the conductor, so the 202 comes as soon as with RabbitMQ) and no conductor
    /// consumes it, so nothing accumulates against Magnum's quota and there is nothing to
    /// remove: its quota check counts the project's rows as they were when the run began, as
    /// ours does between a create and its recycling.
    Nothing,
}

/// The removal of created clusters, untimed but on the same two cores as the service: each
/// client waits until its cluster is gone (so its project keeps its place under the quota),
/// and every removal waiting meanwhile goes out in one statement (the service's own
/// `coalesce::Batch`, one statement at a time) on one kept connection. Removed one statement
/// each, twenty clients' removals cost as much PostgreSQL time as their creates and stole it
/// from the creates being measured; Magnum's side removes nothing. The connection runs with
/// `session_replication_role = replica`, as a bulk removal would: the foreign keys' per-row
/// cascades do not fire (the statement deletes the nodegroups itself) and the removal is not
/// announced, while the triggers that keep each project's count and the stored views fire
/// always (their migrations say so). The statement removes the clusters' stored views itself,
/// so the nodegroups' trigger finds none left to retire before the clusters' removes them.
/// Its commits are not flushed one by one (`synchronous_commit = off`).
#[derive(Clone)]
struct Recycler {
    batch: Arc<magnum_capi::coalesce::Batch<uuid::Uuid, ()>>,
    /// Removed clusters whose create operation the worker had claimed (began to apply).
    claimed: Arc<std::sync::atomic::AtomicU64>,
}

type Kept = Arc<tokio::sync::Mutex<Option<sqlx::pool::PoolConnection<sqlx::Postgres>>>>;

impl Recycler {
    fn start(pool: sqlx::PgPool) -> Self {
        let kept: Kept = Arc::default();
        let claimed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = claimed.clone();
        let remove: magnum_capi::coalesce::BatchRead<uuid::Uuid, ()> = Arc::new(
            move |uuids: Vec<uuid::Uuid>| {
                let (pool, kept, counted) = (pool.clone(), kept.clone(), counted.clone());
                Box::pin(async move {
                    let mut kept = kept.lock().await;
                    if kept.is_none() {
                        let mut c = pool.acquire().await.expect("a connection for removals");
                        for (set, why) in [
                            // As a bulk removal would (the struct's doc says what fires).
                            ("SET session_replication_role = replica", "as a bulk load"),
                            // The bench's housekeeping, not a tenant's request: its commits are
                            // not flushed one by one, so they do not queue at the disk with the
                            // creates measured (which are).
                            ("SET synchronous_commit = off", "not flushed one by one"),
                            // Planned once, by index: `uuid = ANY($1)` was planned again for
                            // every removal, and `operation`, empty when the bench began and not
                            // analysed since, was read whole by each (with every removal's dead
                            // rows).
                            ("SET plan_cache_mode = force_generic_plan", "planned once"),
                            ("SET enable_seqscan = off", "by index"),
                        ] {
                            sqlx::query(set)
                                .execute(&mut *c)
                                .await
                                .unwrap_or_else(|e| panic!("removals {why}: {e}"));
                        }
                        *kept = Some(c);
                    }
                    let conn = kept.as_mut().expect("kept");
                    let claimed: i64 = sqlx::query_scalar(
                        "WITH ops AS (DELETE FROM operation WHERE cluster_uuid = ANY($1) RETURNING attempts),
                              ngs AS (DELETE FROM nodegroup WHERE cluster_id = ANY($1)),
                              views AS (DELETE FROM cluster_view WHERE cluster_uuid = ANY($1)),
                              gone AS (DELETE FROM cluster WHERE uuid = ANY($1))
                         SELECT count(*) FILTER (WHERE attempts > 0) FROM ops",
                    )
                    .bind(&uuids)
                    .fetch_one(&mut **conn)
                    .await
                    .expect("recycling created clusters");
                    counted.fetch_add(claimed as u64, std::sync::atomic::Ordering::Relaxed);
                    Some(uuids.into_iter().map(|u| (u, ())).collect())
                })
            },
        );
        Self {
            batch: Arc::new(magnum_capi::coalesce::Batch::new(1, 256, remove)),
            claimed,
        }
    }

    async fn remove(&self, uuid: uuid::Uuid) {
        self.batch
            .get(uuid)
            .await
            .expect("recycled")
            .expect("recycled");
    }

    /// How many removed clusters' creates the worker had claimed so far.
    fn claimed(&self) -> u64 {
        self.claimed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Creates {
    async fn recycle(&self, created: &[u8]) {
        match &self.recycle {
            Recycle::Nothing => {}
            Recycle::Ours(recycler) => {
                let v: serde_json::Value = serde_json::from_slice(created).expect("JSON");
                let uuid = uuid::Uuid::parse_str(v["uuid"].as_str().expect("uuid")).expect("uuid");
                recycler.remove(uuid).await;
            }
        }
    }
}

async fn load(
    client: &reqwest::Client,
    urls: &[String],
    connections: usize,
    secs: u64,
    creates: Option<Creates>,
) -> Stats {
    let urls: Vec<(usize, String)> = urls.iter().map(|u| (0, u.clone())).collect();
    load_kinds(client, &urls, 1, connections, secs, creates)
        .await
        .0
}

/// [`load`] over URLs of `kinds` kinds (each URL tagged with its kind's index): the whole
/// run's figures and each kind's (its requests per second of the same run).
async fn load_kinds(
    client: &reqwest::Client,
    urls: &[(usize, String)],
    kinds: usize,
    connections: usize,
    secs: u64,
    creates: Option<Creates>,
) -> (Stats, Vec<Stats>) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..connections {
        let client = client.clone();
        let urls = urls.to_vec();
        let creates = creates.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut bytes = 0;
            // Each connection starts at its own place in the list and goes round it, on a kind
            // of its own (the list is its kinds in turn): the rounds the deadline cuts short then
            // end on every kind alike. Had all started on the first kind, each cut round would
            // count the first kinds once more than the last (a sixth more for a client that
            // finishes six rounds, as Magnum's do in ten seconds).
            let mut next = worker * urls.len() / connections / kinds * kinds + worker % kinds;
            while Instant::now() < deadline {
                let (kind, url) = &urls[next % urls.len()];
                next += 1;
                let t = Instant::now();
                let req = match &creates {
                    Some(c) => client
                        .post(url)
                        .header("content-type", "application/json")
                        .headers(c.clients[worker % c.clients.len()].clone())
                        .body(c.body.clone()),
                    None => client.get(url),
                };
                let body = success_body(req.send().await.expect("request"), url).await;
                lat.push((*kind, t.elapsed()));
                bytes = body.len();
                if let Some(c) = &creates {
                    c.recycle(&body).await;
                }
            }
            (lat, bytes)
        }));
    }
    let mut all = Vec::new();
    let mut bytes = 0;
    for t in tasks {
        let (lat, b) = t.await.expect("task");
        all.extend(lat);
        bytes = b;
    }
    let secs = start.elapsed().as_secs_f64();
    // Requests per second of the clients' time (a create's untimed recycling excluded).
    let stats = |mut lat: Vec<Duration>| {
        lat.sort_unstable();
        let pct = |p: f64| {
            lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        Stats {
            rps: lat.len() as f64 / secs,
            p50: pct(0.50),
            p99: pct(0.99),
            requests: lat.len() as u64,
            bytes,
        }
    };
    let per_kind = (0..kinds)
        .map(|k| {
            stats(
                all.iter()
                    .filter(|(kind, _)| *kind == k)
                    .map(|(_, d)| *d)
                    .collect(),
            )
        })
        .collect();
    (stats(all.into_iter().map(|(_, d)| d).collect()), per_kind)
}

/// Magnum 23.0.0 under gunicorn (2 workers) on the same kind of machine, typed in: the fallback
/// when the real Magnum cannot run beside us (`BENCH_MAGNUM=0`, no MariaDB), labelled so in the
/// table. Req/s of the reads (the performance issue's table), seconds per create (the median of
/// ../shared/reference/environment-notes.md once its fake cloud set TCP_NODELAY; the 0.60 s
/// of before was that fake's own Nagle delay).
const MAGNUM: [(&str, f64); 6] = [
    ("GET /v1/clustertemplates (50)", 61.0),
    ("GET /v1/clusters/detail?limit=1000", 1.10),
    ("GET /v1/clusters?limit=1000", 1.13),
    ("GET /v1/clusters/{uuid}", 121.0),
    // Not in the issue's table: its show's figure (Magnum reads one row either way).
    ("GET /v1/clusters/{uuid}, 1,000 different ones", 121.0),
    ("POST /v1/clusters -> 202 (s)", 0.12),
];

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(name: &str, s: &Stats, body: usize) {
    println!(
        "{name:<48} {:>9.1} req/s   p50 {:>8.2} ms   p99 {:>8.2} ms   ({} requests, body {} B)",
        s.rps,
        ms(s.p50),
        ms(s.p99),
        s.requests,
        body.max(s.bytes)
    );
}

use magnum::bench::{CLUSTER_KUBE_TAG, eleven_labels, labels_with};

/// 50 templates in `project`; returns the first one's uuid.
async fn seed_templates(pool: &sqlx::PgPool, project: &str) -> String {
    sqlx::query(
        "INSERT INTO cluster_template (uuid, project_id, user_id, name, image_id, flavor_id, master_flavor_id,
            keypair_id, external_network_id, network_driver, docker_volume_size, coe, labels, server_type, driver, dns_nameserver, public)
         SELECT md5('template-' || g)::uuid, $1, 'bench-user', 'template-' || g, $3, 'm1.small', 'm1.medium',
            'default', 'public', 'calico', 20, 'kubernetes', $2::jsonb,
            'vm', 'k8s_capi_rust_v1', '8.8.8.8', true
           FROM generate_series(1, 50) g",
    )
    .bind(project)
    .bind(eleven_labels())
    .bind(magnum::bench::IMAGE)
    .execute(pool)
    .await
    .expect("templates");
    let (ct,): (uuid::Uuid,) =
        sqlx::query_as("SELECT uuid FROM cluster_template ORDER BY id LIMIT 1")
            .fetch_one(pool)
            .await
            .expect("template");
    ct.to_string()
}

/// Clusters `from+1..=to` in `project` (2 nodegroups each, 11 labels everywhere; one label
/// overridden so the detail view's label diffs are not empty); returns the newest's uuid. The
/// rows' uuids are md5 sums of their names, as [`seed_magnum`] makes them.
async fn seed_clusters(
    pool: &sqlx::PgPool,
    project: &str,
    template: &str,
    from: i64,
    to: i64,
) -> String {
    let ct = uuid::Uuid::parse_str(template).expect("uuid");
    let (before,): (i64,) = sqlx::query_as("SELECT COALESCE(max(id), 0) FROM cluster")
        .fetch_one(pool)
        .await
        .expect("max id");
    sqlx::query(
        "INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, keypair, docker_volume_size,
            labels, master_flavor_id, flavor_id, stack_id, status, create_timeout, api_address, coe_version)
         SELECT md5('cluster-' || g)::uuid, $1, 'bench-user', 'cluster-' || g, $2, 'default', 20,
            $3::jsonb, 'm1.medium', 'm1.small', 'c' || md5(g::text),
            'CREATE_COMPLETE', 60, 'https://192.0.2.1:6443', 'v1.31.1'
           FROM generate_series($4::bigint, $5::bigint) g",
    )
    .bind(project)
    .bind(ct)
    .bind(labels_with(&[CLUSTER_KUBE_TAG]))
    .bind(from + 1)
    .bind(to)
    .execute(pool)
    .await
    .expect("clusters");
    sqlx::query(
        "INSERT INTO nodegroup (uuid, name, cluster_id, project_id, labels, flavor_id, image_id, node_addresses,
            node_count, role, is_default, status)
         SELECT md5('ng-' || c.uuid::text || r.role)::uuid, r.name, c.uuid, c.project_id, c.labels, 'm1.small', 'ubuntu-jammy',
            '[\"192.0.2.10\"]', 1, r.role, true, 'CREATE_COMPLETE'
           FROM cluster c CROSS JOIN (VALUES ('default-master', 'master'), ('default-worker', 'worker')) AS r(name, role)
          WHERE c.id > $1",
    )
    .bind(before)
    .execute(pool)
    .await
    .expect("nodegroups");
    sqlx::query("ANALYZE").execute(pool).await.expect("analyze");
    // The seeding's pages written out now, not by a checkpoint during the scenarios that follow
    // (PostgreSQL flushes each commit: a checkpoint's writes would slow the commits measured).
    sqlx::query("CHECKPOINT")
        .execute(pool)
        .await
        .expect("checkpoint");
    let (cl,): (uuid::Uuid,) = sqlx::query_as("SELECT uuid FROM cluster ORDER BY id DESC LIMIT 1")
        .fetch_one(pool)
        .await
        .expect("cluster");
    cl.to_string()
}

/// The real Magnum beside us (tests/it/common/magnum.rs's `bench::start`, as
/// tests/it/magnum_beside.rs starts it): Magnum 23's own schema on the import tests' MariaDB,
/// filled with the rows [`seed_templates`] and [`seed_clusters`] write into ours (same names,
/// labels, uuids and order), served by gunicorn with 2 workers as the issue measured it, with
/// `catalog` (the fake cloud's Glance, Nova and Neutron, which our creates call too) in every
/// request's token info. `Err`: why it does not run here (the table then shows the typed-in
/// figures, labelled so).
fn magnum_beside(
    project: &str,
    clusters: i64,
    catalog: &[(&str, &str, String)],
) -> Result<(magnum::MagnumDb, magnum::MagnumApi), String> {
    if std::env::var("BENCH_MAGNUM").is_ok_and(|v| v == "0") {
        return Err("BENCH_MAGNUM=0".into());
    }
    if !std::path::Path::new("/usr/sbin/mariadbd").exists() {
        return Err("no MariaDB (apt-get install mariadb-server)".into());
    }
    magnum::bench::start(project, clusters, catalog).map_err(|e| format!("{e:#}"))
}

/// This process's resident set (the service; PostgreSQL is another process), in MiB.
fn rss_mib() -> f64 {
    rss_of("/proc/self/status")
}

/// The resident set `status` (a `/proc/<pid>/status`) reports, in MiB.
fn rss_of(status: &str) -> f64 {
    std::fs::read_to_string(status)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The `_sum` and `_count` of each series of histogram `metric` in this process's metrics
/// (the service's `/metrics` text), by the series' labels.
fn histogram_totals(metric: &str) -> std::collections::BTreeMap<String, (f64, f64)> {
    let text = magnum_capi::telemetry::handle()
        .map(|h| h.render())
        .unwrap_or_default();
    let mut out = std::collections::BTreeMap::<String, (f64, f64)>::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        let (which, rest) = if let Some(r) = rest.strip_prefix("_sum") {
            (0, r)
        } else if let Some(r) = rest.strip_prefix("_count") {
            (1, r)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let e = out.entry(labels.to_string()).or_default();
        if which == 0 { e.0 = v } else { e.1 = v }
    }
    out
}

/// Where a create scenario's time went, from the service's own histograms: the mean server-side
/// duration of the creates, and of each OpenStack service's calls made meanwhile (the look-ups;
/// Keystone's are the worker's), with how many per create.
struct TimeSplit {
    http: std::collections::BTreeMap<String, (f64, f64)>,
    openstack: std::collections::BTreeMap<String, (f64, f64)>,
    stages: std::collections::BTreeMap<String, (f64, f64)>,
}

impl TimeSplit {
    fn now() -> Self {
        Self {
            http: histogram_totals(magnum_capi::telemetry::HTTP_DURATION),
            openstack: histogram_totals(magnum_capi::telemetry::OPENSTACK_DURATION),
            stages: histogram_totals(magnum_capi::telemetry::CREATE_STAGE),
        }
    }

    fn print_since(&self, before: &Self) {
        let delta = |now: &std::collections::BTreeMap<String, (f64, f64)>,
                     then: &std::collections::BTreeMap<String, (f64, f64)>,
                     key: &str| {
            let (s1, c1) = now.get(key).copied().unwrap_or_default();
            let (s0, c0) = then.get(key).copied().unwrap_or_default();
            (s1 - s0, c1 - c0)
        };
        let creates = self
            .http
            .keys()
            .filter(|k| k.contains("\"POST\"") && k.contains("route=\"/v1/clusters\""))
            .map(|k| delta(&self.http, &before.http, k))
            .fold((0.0, 0.0), |a, d| (a.0 + d.0, a.1 + d.1));
        if creates.1 == 0.0 {
            return;
        }
        let mut parts = vec![format!(
            "server side {:.2} ms",
            1000.0 * creates.0 / creates.1
        )];
        for k in self.openstack.keys() {
            let (sum, count) = delta(&self.openstack, &before.openstack, k);
            if count > 0.0 {
                parts.push(format!(
                    "{k}: {:.2} calls per create, {:.2} ms each",
                    count / creates.1,
                    1000.0 * sum / count
                ));
            }
        }
        println!(
            "  mean per create ({} creates): {}",
            creates.1,
            parts.join("; ")
        );
        // In the request's order (`telemetry::create_stage`).
        let stages: Vec<String> = ["template", "lookups", "validate", "seal", "record"]
            .iter()
            .filter_map(|st| {
                let key = format!("{{stage=\"{st}\"}}");
                let (sum, count) = delta(&self.stages, &before.stages, &key);
                (count > 0.0).then(|| format!("{st} {:.3} ms", 1000.0 * sum / count))
            })
            .collect();
        if !stages.is_empty() {
            println!("  its stages (mean): {}", stages.join(", "));
        }
    }
}

/// One point of the scale curve.
struct ScalePoint {
    clusters: i64,
    detail_ms: f64,
    detail_p50_ms: f64,
    rss: f64,
    /// The simulated management clusters' resident sets (the production path), in MiB.
    sims_rss: Vec<f64>,
    /// `pg_database_size` of the bench's database, in MiB.
    pg_mib: f64,
    list_many: Stats,
    list_many_plain: Stats,
    list_many_ceiling: Stats,
    /// Shows of the 1,000 newest clusters, 20 clients: reused, built from PostgreSQL.
    shows: Stats,
    shows_plain: Stats,
    /// `POST /v1/clusters`, 1 client, in the project holding the clusters.
    creates: Stats,
}

/// The shows of the project's 1,000 newest clusters, each a different path.
async fn newest_shows(pool: &sqlx::PgPool, project: &str) -> Vec<String> {
    sqlx::query_scalar::<_, uuid::Uuid>(
        "SELECT uuid FROM cluster WHERE project_id = $1 ORDER BY id DESC LIMIT 1000",
    )
    .bind(project)
    .fetch_all(pool)
    .await
    .expect("uuids")
    .into_iter()
    .map(|u| format!("/v1/clusters/{u}"))
    .collect()
}

/// What a scale point measures besides the reads: the creates' body, client and recycling,
/// and the simulated management clusters (the production path).
struct ScaleCx<'a> {
    pool: &'a sqlx::PgPool,
    project: &'a str,
    creates: Creates,
    sims: Option<&'a Simulators>,
}

/// `base`: the service reusing serialised views; `plain`: the same service building every
/// response from PostgreSQL (the detail page times are taken there: they are what scales).
async fn scale_point(
    b: &Bench,
    base: &str,
    plain: &str,
    clusters: i64,
    cx: &ScaleCx<'_>,
) -> ScalePoint {
    let url = format!("{plain}/v1/clusters/detail?limit=1000");
    for _ in 0..2 {
        b.body(&url).await;
    }
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        b.body(&url).await;
        times.push(t.elapsed());
    }
    times.sort_unstable();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    let secs = b.secs.div_ceil(2).max(3);
    let list = "/v1/clusters?limit=1000";
    let list_many = b.get(&format!("{base}{list}"), MANY_CLIENTS, secs).await;
    let list_many_plain = b.get(&format!("{plain}{list}"), MANY_CLIENTS, secs).await;
    let body = b.body(&format!("{base}{list}")).await;
    let list_many_ceiling = b.ceiling(body, MANY_CLIENTS, secs).await;
    let spread = newest_shows(cx.pool, cx.project).await;
    let shows = b.get_paths(base, &spread, CONCURRENCY, secs).await;
    let shows_plain = b.get_paths(plain, &spread, CONCURRENCY, secs).await;
    // The project holds every cluster: its quota (when the table's run set one) leaves room.
    db::quotas::update(cx.pool, cx.project, "Cluster", clusters as i32 + 20)
        .await
        .expect("quota");
    let url = format!("{base}/v1/clusters");
    let creates = load(&b.client, &[url], 1, secs, Some(cx.creates.clone())).await;
    let pg_mib = sqlx::query_scalar::<_, i64>("SELECT pg_database_size(current_database())")
        .fetch_one(cx.pool)
        .await
        .expect("database size") as f64
        / (1024.0 * 1024.0);
    ScalePoint {
        clusters,
        detail_ms: ms(mean),
        detail_p50_ms: ms(times[times.len() / 2]),
        rss: rss_mib(),
        sims_rss: cx.sims.map(Simulators::rss_mib).unwrap_or_default(),
        pg_mib,
        list_many,
        list_many_plain,
        list_many_ceiling,
        shows,
        shows_plain,
        creates,
    }
}

/// What a request costs when its token is not cached yet: fresh tokens, one request each.
async fn cold_validations(ks: &keystone::Keystone, base: &str) {
    const N: usize = 10;
    let mut tokens = Vec::new();
    for _ in 0..N {
        tokens.push(ks.issue_token("alice", "alpha").await.expect("token"));
    }
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/clusters/detail?limit=1");
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for t in &tokens {
        for lat in [&mut cold, &mut warm] {
            let start = Instant::now();
            let r = client
                .get(&url)
                .header("x-auth-token", t)
                .send()
                .await
                .expect("request");
            assert!(r.status().is_success(), "{}", r.status());
            lat.push(start.elapsed());
        }
    }
    let avg = |v: &[Duration]| v.iter().sum::<Duration>().as_secs_f64() * 1000.0 / v.len() as f64;
    println!(
        "token validation: first request with a new token {:.1} ms (mean of {N}), the next {:.2} ms",
        avg(&cold),
        avg(&warm)
    );
}

/// A create whose token is not cached yet (cold), beside the next one with the same token
/// (warm): one client, fresh tokens, one create each (recycled as the scenarios' are).
async fn cold_creates(ks: &keystone::Keystone, base: &str, body: &str, recycler: &Recycler) {
    const N: usize = 10;
    let mut tokens = Vec::new();
    for _ in 0..N {
        tokens.push(ks.issue_token("alice", "alpha").await.expect("token"));
    }
    let client = reqwest::Client::new();
    let creates = Creates {
        body: body.to_string(),
        clients: Vec::new(),
        recycle: Recycle::Ours(recycler.clone()),
    };
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for t in &tokens {
        for lat in [&mut cold, &mut warm] {
            let start = Instant::now();
            let r = client
                .post(format!("{base}/v1/clusters"))
                .header("x-auth-token", t)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .expect("request");
            let created = success_body(r, "POST /v1/clusters").await;
            lat.push(start.elapsed());
            creates.recycle(&created).await;
        }
    }
    cold.sort_unstable();
    warm.sort_unstable();
    println!(
        "POST /v1/clusters, 1 client, a new token each: cold (first use of the token) p50 {:.1} ms, max {:.1} ms; warm (its second use) p50 {:.1} ms, max {:.1} ms (n={N})",
        ms(cold[N / 2]),
        ms(cold[N - 1]),
        ms(warm[N / 2]),
        ms(warm[N - 1])
    );
}

fn wrk_installed() -> bool {
    std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok()
}

fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // The service's metrics recorder, installed before anything records (TimeSplit reads it).
    let _ = magnum_capi::telemetry::handle();
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let scale: Vec<i64> = match std::env::var("BENCH_SCALE") {
        Ok(v) if v == "none" => Vec::new(),
        Ok(v) => v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
        Err(_) => vec![1_000, 10_000, 100_000],
    };
    let loadgen = match std::env::var("BENCH_LOADGEN").as_deref() {
        Ok("internal") => LoadGen::Internal,
        Ok("wrk") => LoadGen::Wrk,
        _ if wrk_installed() => LoadGen::Wrk,
        _ => LoadGen::Internal,
    };
    let only = std::env::var("BENCH_ONLY").ok();
    // The production path unless `BENCH_PATH=dev` (README "Benchmarks").
    let production = std::env::var("BENCH_PATH").map_or(true, |v| v != "dev");
    let with_keystone = production || std::env::var("BENCH_KEYSTONE").is_ok_and(|v| v == "1");
    // Started before the runtime: the harness blocks while Keystone boots.
    // Keystone's own cache on, as production Keystones run (memcached there): without it, every
    // request of the worker's (its application credentials) costs Keystone ~0.3 s of CPU on the
    // two cores measured. `BENCH_KEYSTONE_CACHE=0` runs it as the tests do, uncached.
    let ks_opts = keystone::Options {
        cache: std::env::var("BENCH_KEYSTONE_CACHE").as_deref() != Ok("0"),
    };
    let ks = with_keystone.then(|| keystone::keystone_with(ks_opts));
    if ks.is_some() {
        println!(
            "Keystone's cache {} (BENCH_KEYSTONE_CACHE)",
            if ks_opts.cache {
                "on: oslo.cache's in-process dictionary"
            } else {
                "off"
            }
        );
    }
    if let Some(pid) = ks.and_then(|k| k.pid()) {
        let nice = std::env::var("BENCH_KEYSTONE_NICE").unwrap_or_else(|_| "10".into());
        // gunicorn leads its own process group (master and workers).
        let st = std::process::Command::new("renice")
            .args(["-n", &nice, "-g", &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("renice");
        assert!(st.success(), "renice of Keystone's gunicorn failed");
        println!("Keystone's gunicorn at niceness {nice} (BENCH_KEYSTONE_NICE)");
        // Niceness only weighs Keystone down: a waking request of ours still waits for the
        // scheduler to take a core from it. SCHED_IDLE runs it only on a core nothing else
        // wants, as if it were on another machine.
        if std::env::var("BENCH_KEYSTONE_IDLE").as_deref() != Ok("0") {
            let pids = std::process::Command::new("pgrep")
                .args(["-g", &pid.to_string()])
                .output()
                .expect("pgrep");
            for p in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                let st = std::process::Command::new("chrt")
                    .args(["-a", "-i", "-p", "0", p])
                    .stdout(std::process::Stdio::null())
                    .status()
                    .expect("chrt");
                assert!(st.success(), "chrt of Keystone's gunicorn ({p}) failed");
            }
            println!("Keystone's gunicorn at SCHED_IDLE (BENCH_KEYSTONE_IDLE)");
        }
    }
    // Like Magnum's MariaDB (which flushes every commit by default) and a production server:
    // each acknowledged commit on disk.
    let pg = if std::env::var("BENCH_PG").is_ok_and(|v| v == "throwaway") {
        println!("PostgreSQL without flushing its commits (BENCH_PG=throwaway)");
        EmbeddedPostgres::start()
    } else {
        EmbeddedPostgres::start_durable()
    }
    .expect("PostgreSQL");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = pg.socket_url("postgres");
    rt.block_on(async move {
        let mut cfg = Config::default();
        cfg.database.url = Some(url.clone());
        cfg.database.max_connections = 24;
        cfg.operations.worker_enabled = false;
        cfg.quotas.max_clusters_per_project = 1_000_000;
        let pool = db::connect(&url, &cfg.database).await.expect("pool");
        db::migrate(&pool).await.expect("migrate");
        let mut headers = HeaderMap::new();
        // The fake Glance/Nova/Neutron (real wire format, TCP_NODELAY): with Keystone our
        // creates' look-ups go there through the catalog; the real Magnum's always do.
        let cloud = fakecloud::FakeCloud::start().await;
        let (project, auth) = match ks {
            Some(ks) => {
                ks.register_services(&cloud.catalog())
                    .await
                    .expect("catalog");
                cfg.keystone = ks.service_config();
                let client = magnum_capi::openstack::Keystone::new(&cfg.keystone, &cfg.openstack)
                    .expect("keystone client");
                let token = ks.token("alice", "alpha").await;
                headers.insert("x-auth-token", HeaderValue::from_str(&token).expect("token"));
                (
                    ks.project_id("alpha").to_string(),
                    AuthMode::Keystone(Arc::new(client)),
                )
            }
            None => {
                headers.insert("x-project-id", HeaderValue::from_static("bench-project"));
                headers.insert("x-user-id", HeaderValue::from_static("bench-user"));
                headers.insert("x-roles", HeaderValue::from_static("member,reader"));
                ("bench-project".to_string(), AuthMode::DevHeaders)
            }
        };
        // Production: the CAPI driver on two management clusters, each `magnum-capi simulate`
        // as its own process, the worker on, the caller's token sealed with a configured key.
        let sims = production.then(|| tokio::task::block_in_place(|| Simulators::start(2)));
        if let Some(sims) = &sims {
            cfg.driver.kind = DriverKind::Capi;
            cfg.operations.worker_enabled = true;
            cfg.operations.seal_key = Some(secrecy::SecretString::from(SEAL_KEY));
            cfg.capi.management_clusters = sims
                .kubeconfigs
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let mut m = ManagementClusterConfig::named(&format!("mc-{i}"));
                    m.kubeconfig = Some(k.clone());
                    m
                })
                .collect();
        }
        let template = seed_templates(&pool, &project).await;
        // The real Magnum beside us, on the same rows (started before our scale points: its
        // rows are the table's).
        let magnum_run = tokio::task::block_in_place(|| {
            magnum_beside(&project, TABLE_CLUSTERS, &cloud.catalog())
        });
        let magnum_bench = match &magnum_run {
            Ok((_, api)) => {
                println!("the real Magnum 23.0.0 beside us: gunicorn, 2 sync workers, {}", api.url());
                let mut h = HeaderMap::new();
                h.insert("x-project-id", HeaderValue::from_str(&project).expect("project"));
                h.insert("x-user-id", HeaderValue::from_static("bench-user"));
                h.insert("x-roles", HeaderValue::from_static("member,reader"));
                h.insert("accept", HeaderValue::from_static("application/json"));
                // Nodegroups (the mixed reads) need microversion 1.9; both sides get the same.
                h.insert("openstack-api-version", HeaderValue::from_static("container-infra latest"));
                let client = reqwest::Client::builder()
                    .default_headers(h.clone())
                    .build()
                    .expect("client");
                let mb = Bench { client: Arc::new(client), headers: h, loadgen, secs };
                // Asked now, before any scenario: a create it refuses is a broken setup, shown
                // with Magnum's answer rather than replaced by the typed-in figure.
                if let Err(why) = magnum_create_probe(&mb, &api.url(), &magnum::bench::create_body(&template)).await {
                    panic!("the real Magnum beside us refuses the bench's create: {why}");
                }
                Some((api.url(), mb))
            }
            Err(why) => {
                println!("the real Magnum does not run here ({why}): its figures are the typed-in ones");
                None
            }
        };
        // Two instances on one database: as `serve` runs it (serialised views reused until a
        // change notification) and with `[api] view_cache_mib = 0` (every response built from
        // PostgreSQL).
        let mut plain_cfg = cfg.clone();
        plain_cfg.api.view_cache_mib = 0;
        let members = match &sims {
            Some(_) => server::build_fleet(&cfg, &auth, false).await.expect("management clusters").members,
            None => Vec::new(),
        };
        let backend = |cfg: &Config| server::backend_for_members(cfg, &members);
        let state = App::with_backend(pool.clone(), cfg.clone(), auth.clone(), backend(&cfg));
        let plain_state = App::with_backend(pool.clone(), plain_cfg.clone(), auth, backend(&plain_cfg));
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let addr = if production {
            // Everything `serve` runs: the API, the worker, the heartbeat, the view follower,
            // and each management cluster's watchers, status writer, probe and maintenance.
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("addr");
            let (state, members) = (state.clone(), members.clone());
            let mut stop_rx = stop_rx.clone();
            tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stop_rx.wait_for(|v| *v).await;
                };
                server::serve_members_until(state, &members, listener, shutdown)
                    .await
                    .expect("serve");
            });
            addr
        } else {
            server::spawn_view_follower(&state, stop_rx);
            spawn_api(state.clone()).await
        };
        while !state.views.listening() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let plain_addr = spawn_api(plain_state).await;
        headers.insert("accept", HeaderValue::from_static("application/json"));
        headers.insert("openstack-api-version", HeaderValue::from_static("container-infra latest"));
        let client = Arc::new(
            reqwest::Client::builder()
                .default_headers(headers.clone())
                .pool_max_idle_per_host(MANY_CLIENTS)
                .build()
                .expect("client"),
        );
        let b = Bench { client: client.clone(), headers, loadgen, secs };
        let base = format!("http://{addr}");
        let plain = format!("http://{plain_addr}");
        println!(
            "magnum-capi load benchmark: {}, {CONCURRENCY} connections, {secs} s per scenario, loopback, {}",
            match loadgen {
                LoadGen::Wrk => "wrk -t2 (separate process)",
                LoadGen::Internal => "in-process reqwest load",
            },
            if with_keystone { "real Keystone tokens (cache warm)" } else { "--dev identity headers" }
        );
        if let Some(ks) = ks {
            cold_validations(ks, &base).await;
            // Warm the cache for the token the scenarios use: they measure the warm path.
            b.body(&format!("{base}/v1/clustertemplates")).await;
        }
        // The scale points below the table's size come first, then the table, then the rest.
        // Each point's creates go to the project holding the clusters, recycled as the table's.
        let recycler = Recycler::start(pool.clone());
        let scale_cx = ScaleCx {
            pool: &pool,
            project: &project,
            creates: Creates {
                body: magnum::bench::create_body(&template),
                clients: vec![if with_keystone { HeaderMap::new() } else { project_header(&project) }],
                recycle: Recycle::Ours(recycler.clone()),
            },
            sims: sims.as_ref(),
        };
        let mut seeded = 0;
        let mut newest = String::new();
        let mut curve = Vec::new();
        for &n in scale.iter().filter(|&&n| n < TABLE_CLUSTERS) {
            newest = seed_clusters(&pool, &project, &template, seeded, n).await;
            seeded = n;
            curve.push(scale_point(&b, &base, &plain, n, &scale_cx).await);
        }
        if seeded < TABLE_CLUSTERS {
            newest = seed_clusters(&pool, &project, &template, seeded, TABLE_CLUSTERS).await;
            seeded = TABLE_CLUSTERS;
        }
        if scale.contains(&TABLE_CLUSTERS) {
            curve.push(scale_point(&b, &base, &plain, TABLE_CLUSTERS, &scale_cx).await);
        }
        println!("{TABLE_CLUSTERS} clusters x 2 nodegroups, 50 templates, 11 labels each");
        let mut rows = Vec::new();
        // The newest 1,000 clusters: shows of different clusters, each asked in turn.
        let spread = newest_shows(&pool, &project).await;
        let reads: [Vec<String>; 5] = [
            vec!["/v1/clustertemplates".to_string()],
            vec!["/v1/clusters/detail?limit=1000".to_string()],
            vec!["/v1/clusters?limit=1000".to_string()],
            vec![format!("/v1/clusters/{newest}")],
            spread,
        ];
        for (i, paths) in reads.iter().enumerate() {
            let path = &paths[0];
            if !only.as_deref().is_none_or(|o| path.contains(o)) {
                continue;
            }
            let url = format!("{base}{path}");
            let body = b.body(&url).await;
            // The same answer from both instances (links aside: they name each one's port).
            let same = String::from_utf8_lossy(&body).replace(&base, "")
                == String::from_utf8_lossy(&b.body(&format!("{plain}{path}")).await)
                    .replace(&plain, "");
            assert!(same, "{path}: the instances answer differently");
            let s = b.get_paths(&base, paths, CONCURRENCY, secs).await;
            report(MAGNUM[i].0, &s, body.len());
            let p = b.get_paths(&plain, paths, CONCURRENCY, secs).await;
            report("  built from PostgreSQL (no reuse)", &p, body.len());
            let len = body.len();
            let c = b.ceiling_paths(body, paths, CONCURRENCY, secs).await;
            report("  ceiling: the same bytes from memory", &c, len);
            let magnum = match &magnum_bench {
                Some((murl, mb)) => {
                    same_rows(&b, &url, mb, &format!("{murl}{path}")).await;
                    // At least 10 s: Magnum answers a page of 1,000 in about a second.
                    let m = mb.get_paths(murl, paths, CONCURRENCY, secs.max(10)).await;
                    report("  the real Magnum 23 beside us", &m, 0);
                    settle(mb, murl).await;
                    Some(m.rps)
                }
                None => None,
            };
            rows.push((MAGNUM[i], magnum, s, Some((p, c))));
        }
        // Reads of many different objects, mixed in one run (the way Terraform's waits,
        // Horizon's tables and scripts polling their own clusters ask): each kind's figures.
        let mixed = if only.as_deref().is_none_or(|o| o == "mixed") {
            Some(mixed_reads(&pool, &project, &b, &base, &plain, magnum_bench.as_ref()).await)
        } else {
            None
        };
        // Creates in a project with a realistic quota (a stored 20) and in 20 such projects:
        // each client removes what it created (untimed) before its next create, so its project
        // stays within the quota and every create's check counts the project's clusters. With
        // Keystone the one project is the token's, holding the table's clusters (its quota is
        // those plus 20), and the 20 are new Keystone projects, a member's token in each.
        let body = magnum::bench::create_body(&template);
        let one = if with_keystone { project.clone() } else { "bench-create".to_string() };
        // (project, our client's headers there).
        let mut many: Vec<(String, HeaderMap)> = Vec::new();
        for i in 0..CONCURRENCY {
            many.push(match ks {
                Some(ks) => {
                    let m = ks.new_project("bench").await;
                    // Validated once now: the scenarios measure the warm path (the cold one
                    // is measured apart, above).
                    let r = client
                        .get(format!("{base}/v1/clustertemplates"))
                        .headers(token_header(&m.token))
                        .send()
                        .await
                        .expect("request");
                    assert!(r.status().is_success(), "{}", r.status());
                    (m.project, token_header(&m.token))
                }
                None => {
                    let p = format!("bench-create-{i}");
                    (p.clone(), project_header(&p))
                }
            });
        }
        let one_ours = if with_keystone { HeaderMap::new() } else { project_header(&one) };
        for p in std::iter::once(&one).chain(many.iter().map(|(p, _)| p)) {
            let limit = if *p == project { TABLE_CLUSTERS as i32 + 20 } else { 20 };
            db::quotas::insert(&pool, p, "Cluster", limit).await.expect("quota");
            if let Ok((mdb, _)) = &magnum_run {
                magnum::bench::set_quota(mdb, p, limit);
            }
        }
        let scenarios = [
            (1, "POST /v1/clusters (202), 1 client, one project", vec![(one.clone(), one_ours.clone())]),
            (CONCURRENCY, "POST /v1/clusters (202), 20 clients, one project", vec![(one.clone(), one_ours)]),
            (CONCURRENCY, "POST /v1/clusters (202), 20 clients, 20 projects", many),
        ];
        let mut posts = Vec::new();
        let run_creates = only.as_deref().is_none_or(|o| o != "mixed");
        if let (Some(ks), true) = (ks, run_creates) {
            cold_creates(ks, &base, &body, &recycler).await;
        }
        let perf_prefix = std::env::var("BENCH_PERF").ok();
        for ((clients, label, projects), name) in scenarios.into_iter().zip(["1c", "20c", "20c20p"]).filter(|_| run_creates) {
            let creates = Creates {
                body: body.clone(),
                clients: projects.iter().map(|(_, h)| h.clone()).collect(),
                recycle: Recycle::Ours(recycler.clone()),
            };
            let url = format!("{base}/v1/clusters");
            let claimed = recycler.claimed();
            let perf = perf_prefix.as_deref().map(|p| Perf::record(p, name));
            let split = TimeSplit::now();
            let s = load(&client, &[url], clients, secs.min(5), Some(creates.clone())).await;
            drop(perf);
            report(label, &s, 0);
            TimeSplit::now().print_since(&split);
            if production {
                println!(
                    "  the worker had begun applying {} of these creates when they were removed",
                    recycler.claimed() - claimed
                );
            }
            let c = ceiling_creates(&b, clients, secs.min(5)).await;
            report("  ceiling: a 202 from memory", &c, 0);
            let magnum = match &magnum_bench {
                Some((murl, mb)) => {
                    let creates = Creates {
                        clients: projects.iter().map(|(p, _)| project_header(p)).collect(),
                        recycle: Recycle::Nothing,
                        ..creates
                    };
                    let m = load(&mb.client, &[format!("{murl}/v1/clusters")], clients, secs.max(10), Some(creates)).await;
                    report("  the real Magnum 23 beside us", &m, 0);
                    settle(mb, murl).await;
                    Some(m)
                }
                None => None,
            };
            posts.push((label, s, magnum, c));
        }
        for &n in scale.iter().filter(|&&n| n > TABLE_CLUSTERS) {
            seed_clusters(&pool, &project, &template, seeded, n).await;
            seeded = n;
            curve.push(scale_point(&b, &base, &plain, n, &scale_cx).await);
        }
        println!();
        println!(
            "| request | Magnum 23 | magnum-capi | ratio | built from PostgreSQL (view_cache_mib = 0: no reuse; concurrent requests share reads started after them) | ratio | ceiling (same bytes from memory) | share of ceiling |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
        for ((name, typed), measured, s, pc) in &rows {
            let (magnum, how) = match measured {
                Some(m) => (*m, "measured beside us"),
                None => (*typed, "typed in, not measured in this run"),
            };
            if let Some((p, c)) = pc {
                println!(
                    "| {name} | {magnum:.2} req/s ({how}) | {:.1} req/s, p99 {:.1} ms | {:.0}x | {:.1} req/s, p99 {:.1} ms | {:.0}x | {:.0} req/s | {:.0}% |",
                    s.rps,
                    ms(s.p99),
                    s.rps / magnum,
                    p.rps,
                    ms(p.p99),
                    p.rps / magnum,
                    c.rps,
                    100.0 * s.rps / c.rps
                );
            }
        }
        for (label, s, magnum, c) in &posts {
            let (m50, m99, how) = match magnum {
                Some(m) => (m.p50.as_secs_f64(), m.p99.as_secs_f64(), "measured beside us"),
                None => (MAGNUM[5].1, MAGNUM[5].1, "typed in: environment notes' median, not measured in this run"),
            };
            println!(
                "| {label} | p50 {:.0} ms, p99 {:.0} ms ({how}) | p50 {:.1} ms, p99 {:.1} ms ({:.0} req/s) | {:.0}x (p50), {:.0}x (p99) | | | {:.0} req/s, p50 {:.2} ms | {:.0}% |",
                m50 * 1000.0,
                m99 * 1000.0,
                ms(s.p50),
                ms(s.p99),
                s.rps,
                m50 / s.p50.as_secs_f64(),
                m99 / s.p99.as_secs_f64(),
                c.rps,
                ms(c.p50),
                100.0 * s.rps / c.rps
            );
        }
        if let Some((kinds, [Some(ours), Some(pl), Some(ceiling), m])) = &mixed {
            println!();
            println!("Mixed reads of many different objects, one run, 20 clients (each kind's req/s is its share of the run's):");
            println!("| kind | Magnum 23, measured beside us | magnum-capi, views reused | ratio | built from PostgreSQL | ratio |");
            println!("| --- | --- | --- | --- | --- | --- |");
            let row = |name: &str, o: &Stats, p: &Stats, m: Option<&Stats>| {
                let (mtext, r1, r2) = match m {
                    Some(m) => (
                        format!("{:.1} req/s, p50 {:.0} ms, p99 {:.0} ms", m.rps, ms(m.p50), ms(m.p99)),
                        format!("{:.0}x", o.rps / m.rps),
                        format!("{:.0}x", p.rps / m.rps),
                    ),
                    None => ("not measured".to_string(), String::new(), String::new()),
                };
                println!(
                    "| {name} | {mtext} | {:.0} req/s, p50 {:.2} ms, p99 {:.1} ms | {r1} | {:.0} req/s, p50 {:.2} ms, p99 {:.1} ms | {r2} |",
                    o.rps, ms(o.p50), ms(o.p99), p.rps, ms(p.p50), ms(p.p99)
                );
            };
            for k in kinds {
                row(k.kind, &k.ours, &k.plain, k.magnum.as_ref());
            }
            row("all kinds together", ours, pl, m.as_ref());
            println!(
                "ceiling (the same clients and paths, a {}-byte body from memory): {:.0} req/s; reused views reach {:.0}% of it, built from PostgreSQL {:.0}%",
                ceiling.bytes,
                ceiling.rps,
                100.0 * ours.rps / ceiling.rps,
                100.0 * pl.rps / ceiling.rps
            );
        }
        if !curve.is_empty() {
            println!();
            println!(
                "| clusters in the database | GET /v1/clusters/detail?limit=1000 built from PostgreSQL (mean, p50 of 20) | GET /v1/clusters?limit=1000, {MANY_CLIENTS} clients | same, built from PostgreSQL | ceiling, same clients | shows of 1,000 different clusters, {CONCURRENCY} clients | same, built from PostgreSQL | POST /v1/clusters, 1 client | service RSS | simulators' RSS | PostgreSQL database |"
            );
            println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
            for p in &curve {
                let sims: Vec<String> = p.sims_rss.iter().map(|r| format!("{r:.0}")).collect();
                println!(
                    "| {} | {:.1} ms, {:.1} ms | {:.1} req/s, p99 {:.0} ms | {:.1} req/s, p99 {:.0} ms | {:.0} req/s, p99 {:.0} ms | {:.0} req/s, p99 {:.1} ms | {:.0} req/s, p99 {:.1} ms | p50 {:.1} ms, p99 {:.1} ms | {:.0} MiB | {} MiB | {:.0} MiB |",
                    p.clusters,
                    p.detail_ms,
                    p.detail_p50_ms,
                    p.list_many.rps,
                    ms(p.list_many.p99),
                    p.list_many_plain.rps,
                    ms(p.list_many_plain.p99),
                    p.list_many_ceiling.rps,
                    ms(p.list_many_ceiling.p99),
                    p.shows.rps,
                    ms(p.shows.p99),
                    p.shows_plain.rps,
                    ms(p.shows_plain.p99),
                    ms(p.creates.p50),
                    ms(p.creates.p99),
                    p.rss,
                    if sims.is_empty() { "none".to_string() } else { sims.join(" + ") },
                    p.pg_mib
                );
            }
        }
        let _ = stop.send(true);
        drop(sims);
    });
    drop(pg);
}

/// The kinds of the mixed reads.
const MIXED: [&str; 7] = [
    "show: GET /v1/clusters/{uuid}, 1,000 different",
    "list page: GET /v1/clusters?limit=20&marker=…, 300 markers",
    "detail page: GET /v1/clusters/detail?limit=20&sort_dir=desc&marker=…",
    "nodegroups of a cluster, by role (300 clusters)",
    "nodegroup show: …/nodegroups/default-worker (300 clusters)",
    "template show: GET /v1/clustertemplates/{uuid}, 50",
    "template page: GET /v1/clustertemplates?limit=10&marker=…",
];

/// One kind of the mixed reads: ours reused, ours built from PostgreSQL, Magnum's.
struct MixedRow {
    kind: &'static str,
    ours: Stats,
    plain: Stats,
    magnum: Option<Stats>,
}

/// The mixed reads: [`MIXED`]'s kinds interleaved in one list of 2,100 different paths that
/// 20 clients go round, each from its own place (the internal load generator, which tells the
/// kinds apart), asked of our two instances, the ceiling (each kind's bytes from memory: the
/// mean of the kinds' bodies) and the real Magnum. Returns each kind's row and the whole run's
/// (ours, built from PostgreSQL, ceiling, Magnum).
async fn mixed_reads(
    pool: &sqlx::PgPool,
    project: &str,
    b: &Bench,
    base: &str,
    plain: &str,
    magnum: Option<&(String, Bench)>,
) -> (Vec<MixedRow>, [Option<Stats>; 4]) {
    const EACH: usize = 300;
    let uuids = |sql: &'static str, n: i64| async move {
        sqlx::query_scalar::<_, uuid::Uuid>(sql)
            .bind(project)
            .bind(n)
            .fetch_all(pool)
            .await
            .expect("uuids")
    };
    let clusters = uuids(
        "SELECT uuid FROM cluster WHERE project_id = $1 ORDER BY id DESC LIMIT $2",
        1000,
    )
    .await;
    let templates = uuids(
        "SELECT uuid FROM cluster_template WHERE project_id = $1 ORDER BY id LIMIT $2",
        50,
    )
    .await;
    let kinds: [Vec<String>; 7] = [
        clusters
            .iter()
            .map(|u| format!("/v1/clusters/{u}"))
            .collect(),
        clusters
            .iter()
            .step_by(3)
            .take(EACH)
            .map(|u| format!("/v1/clusters?limit=20&marker={u}"))
            .collect(),
        clusters
            .iter()
            .skip(1)
            .step_by(3)
            .take(EACH)
            .map(|u| format!("/v1/clusters/detail?limit=20&sort_dir=desc&marker={u}"))
            .collect(),
        clusters
            .iter()
            .skip(2)
            .step_by(3)
            .take(EACH)
            .enumerate()
            .map(|(i, u)| {
                format!(
                    "/v1/clusters/{u}/nodegroups?role={}",
                    if i % 2 == 0 { "worker" } else { "master" }
                )
            })
            .collect(),
        clusters
            .iter()
            .rev()
            .take(EACH)
            .map(|u| format!("/v1/clusters/{u}/nodegroups/default-worker"))
            .collect(),
        templates
            .iter()
            .map(|u| format!("/v1/clustertemplates/{u}"))
            .collect(),
        templates
            .iter()
            .take(40)
            .map(|u| format!("/v1/clustertemplates?limit=10&marker={u}"))
            .collect(),
    ];
    // Interleaved: every kind in turn, each going round its own list.
    let mut paths: Vec<(usize, String)> = Vec::new();
    for i in 0..EACH {
        for (k, list) in kinds.iter().enumerate() {
            paths.push((k, list[i % list.len()].clone()));
        }
    }
    // Both instances and Magnum answer each kind alike (a sample of each).
    let mut body_sizes = 0;
    for list in &kinds {
        for path in list.iter().take(3) {
            let body = b.body(&format!("{base}{path}")).await;
            body_sizes += body.len();
            let same = String::from_utf8_lossy(&body).replace(base, "")
                == String::from_utf8_lossy(&b.body(&format!("{plain}{path}")).await)
                    .replace(plain, "");
            if !same {
                println!("  WARNING {path}: our two instances answer differently");
            }
            if let Some((murl, mb)) = magnum
                && let Err(why) =
                    rows_compared(b, &format!("{base}{path}"), mb, &format!("{murl}{path}")).await
            {
                println!("  WARNING {why}");
            }
        }
    }
    let with = |base: &str| -> Vec<(usize, String)> {
        paths
            .iter()
            .map(|(k, p)| (*k, format!("{base}{p}")))
            .collect()
    };
    let secs = b.secs;
    // Untimed, each path asked once first (as a client polling its clusters has asked before):
    // the reused column measures reuse, not the first build of 2,100 views.
    futures::StreamExt::for_each_concurrent(
        futures::stream::iter(with(base)),
        CONCURRENCY,
        |(_, u)| async move {
            b.body(&u).await;
        },
    )
    .await;
    let (ours, ours_kinds) =
        load_kinds(&b.client, &with(base), MIXED.len(), CONCURRENCY, secs, None).await;
    report("mixed reads, reused views", &ours, 0);
    let (pl, plain_kinds) = load_kinds(
        &b.client,
        &with(plain),
        MIXED.len(),
        CONCURRENCY,
        secs,
        None,
    )
    .await;
    report("  built from PostgreSQL (no reuse)", &pl, 0);
    let (addr, server) = trivial_server(vec![b'x'; body_sizes / (3 * kinds.len())]).await;
    let (ceiling, _) = load_kinds(
        &b.client,
        &with(&format!("http://{addr}")),
        MIXED.len(),
        CONCURRENCY,
        secs,
        None,
    )
    .await;
    server.abort();
    report("  ceiling: the mean body from memory", &ceiling, 0);
    let (m, mut magnum_kinds) = match magnum {
        Some((murl, mb)) => {
            let (m, kinds) = load_kinds(
                &mb.client,
                &with(murl),
                MIXED.len(),
                CONCURRENCY,
                secs.max(10),
                None,
            )
            .await;
            report("  the real Magnum 23 beside us", &m, 0);
            settle(mb, murl).await;
            (Some(m), kinds.into_iter().map(Some).collect())
        }
        None => (None, Vec::new()),
    };
    magnum_kinds.resize_with(MIXED.len(), || None);
    let rows = MIXED
        .iter()
        .zip(ours_kinds.into_iter().zip(plain_kinds))
        .zip(magnum_kinds)
        .map(|((kind, (ours, plain)), magnum)| MixedRow {
            kind,
            ours,
            plain,
            magnum,
        })
        .collect();
    (rows, [Some(ours), Some(pl), Some(ceiling), m])
}

/// Whether the real Magnum beside us accepts the bench's create (`Err`: why not — its look-ups
/// need the fake cloud in its catalog, its cast a transport).
async fn magnum_create_probe(magnum: &Bench, url: &str, body: &str) -> Result<(), String> {
    let r = magnum
        .client
        .post(format!("{url}/v1/clusters"))
        .header("content-type", "application/json")
        .header("x-project-id", "bench-create-probe")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("{status}: {text}"))
    }
}

/// Waits until the real Magnum has answered every request of the scenario just measured. Its
/// gunicorn workers go on with the requests still queued when the load generator stops (20
/// pages of 1,000 are about a minute of its two workers' time), on the same two cores as the
/// next scenario, ours; a request on a new connection is accepted after those queued before it,
/// so its answer means they are done.
async fn settle(magnum: &Bench, url: &str) {
    let t = Instant::now();
    let r = magnum
        .client
        .get(format!("{url}/"))
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .expect("Magnum's root after its backlog");
    assert!(r.status().is_success(), "Magnum's root: {}", r.status());
    println!(
        "  (Magnum's backlog answered {:.1} s after the scenario)",
        t.elapsed().as_secs_f64()
    );
}

/// Both services answer with the same rows (the same data is loaded into both): the uuids of
/// the page, in order, or of the object shown.
async fn same_rows(ours: &Bench, url: &str, magnum: &Bench, magnum_url: &str) {
    if let Err(why) = rows_compared(ours, url, magnum, magnum_url).await {
        panic!("{why}");
    }
}

/// [`same_rows`]' comparison; `Err`: how the rows differ.
async fn rows_compared(
    ours: &Bench,
    url: &str,
    magnum: &Bench,
    magnum_url: &str,
) -> Result<(), String> {
    let uuids = |body: Vec<u8>| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        match v
            .get("clusters")
            .or_else(|| v.get("clustertemplates"))
            .or_else(|| v.get("nodegroups"))
        {
            Some(list) => list
                .as_array()
                .expect("clusters")
                .iter()
                .map(|c| c["uuid"].as_str().unwrap_or_default().to_string())
                .collect(),
            None => vec![v["uuid"].as_str().unwrap_or_default().to_string()],
        }
    };
    let a = uuids(ours.body(url).await);
    let b = uuids(magnum.body(magnum_url).await);
    if a == b {
        Ok(())
    } else {
        Err(format!(
            "{url}: Magnum and magnum-capi answer with different rows: {a:?} and {b:?}"
        ))
    }
}
