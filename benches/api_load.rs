#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Load benchmark of the read paths and the create, with Magnum 23's figures beside ours.
//!
//! The service runs in this process (multi-threaded runtime, loopback listener) on a private
//! PostgreSQL; the load comes from `wrk -t2 -c20 --latency` in a separate process (the method
//! of the performance issue; `apt-get install wrk`), or, when `wrk` is not on `PATH` or with
//! `BENCH_LOADGEN=internal`, from 20 reqwest connections in this process.
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
//! Then `POST /v1/clusters` (latency of the 202) with 1 and with 20 reqwest connections in one
//! project whose stored quota is 20, and with 20 connections in 20 such projects: each client
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
//!   record -a` started once the scenarios begin, see docs/benchmarks.md);
//! * `BENCH_KEYSTONE=1` — real tokens: the test harness's Keystone (tests/common/keystone.rs)
//!   validates them (cache warm after the first request) and the fake Glance/Nova/Neutron
//!   answers the look-ups of `POST /v1/clusters`; also reports what a cold (uncached) token
//!   validation costs. Without it, `--dev` identity headers.
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
use magnum_capi::config::Config;
use magnum_capi::db;
use magnum_capi::devdb::EmbeddedPostgres;
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
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
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
    projects: Vec<String>,
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
#[derive(Clone)]
struct Recycler(Arc<magnum_capi::coalesce::Batch<uuid::Uuid, ()>>);

type Kept = Arc<tokio::sync::Mutex<Option<sqlx::pool::PoolConnection<sqlx::Postgres>>>>;

impl Recycler {
    fn start(pool: sqlx::PgPool) -> Self {
        let kept: Kept = Arc::default();
        let remove: magnum_capi::coalesce::BatchRead<uuid::Uuid, ()> =
            Arc::new(move |uuids: Vec<uuid::Uuid>| {
                let (pool, kept) = (pool.clone(), kept.clone());
                Box::pin(async move {
                    let mut kept = kept.lock().await;
                    if kept.is_none() {
                        let mut c = pool.acquire().await.expect("a connection for removals");
                        sqlx::query("SET session_replication_role = replica")
                            .execute(&mut *c)
                            .await
                            .expect("removals as a bulk load");
                        // Planned once, by index: `uuid = ANY($1)` was planned again for every
                        // removal, and `operation`, empty when the bench began and not analysed
                        // since, was read whole by each (with every removal's dead rows).
                        for set in [
                            "SET plan_cache_mode = force_generic_plan",
                            "SET enable_seqscan = off",
                        ] {
                            sqlx::query(set)
                                .execute(&mut *c)
                                .await
                                .expect("removals planned once, by index");
                        }
                        *kept = Some(c);
                    }
                    let conn = kept.as_mut().expect("kept");
                    sqlx::query(
                        "WITH ops AS (DELETE FROM operation WHERE cluster_uuid = ANY($1)),
                              ngs AS (DELETE FROM nodegroup WHERE cluster_id = ANY($1)),
                              views AS (DELETE FROM cluster_view WHERE cluster_uuid = ANY($1))
                         DELETE FROM cluster WHERE uuid = ANY($1)",
                    )
                    .bind(&uuids)
                    .execute(&mut **conn)
                    .await
                    .expect("recycling created clusters");
                    Some(uuids.into_iter().map(|u| (u, ())).collect())
                })
            });
        Self(Arc::new(magnum_capi::coalesce::Batch::new(1, 256, remove)))
    }

    async fn remove(&self, uuid: uuid::Uuid) {
        self.0.get(uuid).await.expect("recycled").expect("recycled");
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
            let mut next = worker;
            while Instant::now() < deadline {
                let url = &urls[next % urls.len()];
                next += connections;
                let t = Instant::now();
                let req = match &creates {
                    Some(c) => client
                        .post(url)
                        .header("content-type", "application/json")
                        .header("x-project-id", &c.projects[worker % c.projects.len()])
                        .body(c.body.clone()),
                    None => client.get(url),
                };
                let resp = req.send().await.expect("request");
                let status = resp.status();
                let body = resp.bytes().await.expect("body");
                assert!(
                    status.is_success(),
                    "{status} {url}: {}",
                    String::from_utf8_lossy(&body)
                );
                lat.push(t.elapsed());
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
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Stats {
        // Requests per second of the clients' time (a create's untimed recycling excluded).
        rps: all.len() as f64 / secs,
        p50: pct(0.50),
        p99: pct(0.99),
        requests: all.len() as u64,
        bytes,
    }
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
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One point of the scale curve.
struct ScalePoint {
    clusters: i64,
    detail_ms: f64,
    detail_p50_ms: f64,
    rss: f64,
    list_many: Stats,
    list_many_plain: Stats,
    list_many_ceiling: Stats,
}

/// `base`: the service reusing serialised views; `plain`: the same service building every
/// response from PostgreSQL (the detail page times are taken there: they are what scales).
async fn scale_point(b: &Bench, base: &str, plain: &str, clusters: i64) -> ScalePoint {
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
    ScalePoint {
        clusters,
        detail_ms: ms(mean),
        detail_p50_ms: ms(times[times.len() / 2]),
        rss: rss_mib(),
        list_many,
        list_many_plain,
        list_many_ceiling,
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

fn wrk_installed() -> bool {
    std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok()
}

fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
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
    let with_keystone = std::env::var("BENCH_KEYSTONE").is_ok_and(|v| v == "1");
    // Started before the runtime: the harness blocks while Keystone boots.
    let ks = with_keystone.then(keystone::keystone);
    let pg = EmbeddedPostgres::start().expect("PostgreSQL");
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
        let state = App::new(pool.clone(), cfg, auth.clone());
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        magnum_capi::server::spawn_view_follower(&state, stop_rx);
        while !state.views.listening() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let addr = spawn_api(state).await;
        let plain_addr = spawn_api(App::new(pool.clone(), plain_cfg, auth)).await;
        headers.insert("accept", HeaderValue::from_static("application/json"));
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
        let mut seeded = 0;
        let mut newest = String::new();
        let mut curve = Vec::new();
        for &n in scale.iter().filter(|&&n| n < TABLE_CLUSTERS) {
            newest = seed_clusters(&pool, &project, &template, seeded, n).await;
            seeded = n;
            curve.push(scale_point(&b, &base, &plain, n).await);
        }
        if seeded < TABLE_CLUSTERS {
            newest = seed_clusters(&pool, &project, &template, seeded, TABLE_CLUSTERS).await;
            seeded = TABLE_CLUSTERS;
        }
        if scale.contains(&TABLE_CLUSTERS) {
            curve.push(scale_point(&b, &base, &plain, TABLE_CLUSTERS).await);
        }
        println!("{TABLE_CLUSTERS} clusters x 2 nodegroups, 50 templates, 11 labels each");
        let mut rows = Vec::new();
        // The newest 1,000 clusters: shows of different clusters, each asked in turn.
        let spread: Vec<String> = sqlx::query_scalar::<_, uuid::Uuid>(
            "SELECT uuid FROM cluster WHERE project_id = $1 ORDER BY id DESC LIMIT 1000",
        )
        .bind(&project)
        .fetch_all(&pool)
        .await
        .expect("uuids")
        .into_iter()
        .map(|u| format!("/v1/clusters/{u}"))
        .collect();
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
        // Creates in a project with a realistic quota (a stored 20) and in 20 such projects:
        // each client removes what it created (untimed) before its next create, so its project
        // stays within the quota and every create's check counts the project's clusters. With
        // Keystone the token's project is the one holding the table's clusters: its quota is
        // those plus 20, and there is no second project.
        let body = magnum::bench::create_body(&template);
        let one = if with_keystone { project.clone() } else { "bench-create".to_string() };
        let many: Vec<String> = (0..CONCURRENCY).map(|i| format!("bench-create-{i}")).collect();
        for p in std::iter::once(&one).chain(&many) {
            let limit = if *p == project { TABLE_CLUSTERS as i32 + 20 } else { 20 };
            db::quotas::insert(&pool, p, "Cluster", limit).await.expect("quota");
            if let Ok((mdb, _)) = &magnum_run {
                magnum::bench::set_quota(mdb, p, limit);
            }
        }
        let mut scenarios = vec![
            (1, "POST /v1/clusters (202), 1 client, one project", vec![one.clone()]),
            (CONCURRENCY, "POST /v1/clusters (202), 20 clients, one project", vec![one.clone()]),
        ];
        if !with_keystone {
            scenarios.push((CONCURRENCY, "POST /v1/clusters (202), 20 clients, 20 projects", many));
        }
        let mut posts = Vec::new();
        let recycler = Recycler::start(pool.clone());
        for (clients, label, projects) in scenarios {
            let creates = Creates {
                body: body.clone(),
                projects,
                recycle: Recycle::Ours(recycler.clone()),
            };
            let s = load(&client, &[format!("{base}/v1/clusters")], clients, secs.min(5), Some(creates.clone())).await;
            report(label, &s, 0);
            let magnum = match &magnum_bench {
                Some((murl, mb)) => {
                    let creates = Creates { recycle: Recycle::Nothing, ..creates };
                    let m = load(&mb.client, &[format!("{murl}/v1/clusters")], clients, secs.max(10), Some(creates)).await;
                    report("  the real Magnum 23 beside us", &m, 0);
                    settle(mb, murl).await;
                    Some(m)
                }
                None => None,
            };
            posts.push((label, s, magnum));
        }
        for &n in scale.iter().filter(|&&n| n > TABLE_CLUSTERS) {
            seed_clusters(&pool, &project, &template, seeded, n).await;
            seeded = n;
            curve.push(scale_point(&b, &base, &plain, n).await);
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
        for (label, s, magnum) in &posts {
            let (magnum_p50, how) = match magnum {
                Some(m) => (m.p50.as_secs_f64(), format!("p50 {:.0} ms, p99 {:.0} ms, measured beside us", ms(m.p50), ms(m.p99))),
                None => (MAGNUM[5].1, "typed in: environment notes' median, not measured in this run".to_string()),
            };
            println!(
                "| {label} | {magnum_p50:.3} s ({how}) | p50 {:.1} ms, p99 {:.1} ms ({:.0} req/s) | {:.0}x | | | | |",
                ms(s.p50),
                ms(s.p99),
                s.rps,
                magnum_p50 / s.p50.as_secs_f64()
            );
        }
        if !curve.is_empty() {
            println!();
            println!(
                "| clusters in the database | GET /v1/clusters/detail?limit=1000 built from PostgreSQL (mean, p50 of 20) | service RSS | GET /v1/clusters?limit=1000, {MANY_CLIENTS} clients | same, built from PostgreSQL | ceiling, same clients |"
            );
            println!("| --- | --- | --- | --- | --- | --- |");
            for p in &curve {
                println!(
                    "| {} | {:.1} ms, {:.1} ms | {:.0} MiB | {:.1} req/s, p99 {:.0} ms | {:.1} req/s, p99 {:.0} ms | {:.0} req/s, p99 {:.0} ms |",
                    p.clusters,
                    p.detail_ms,
                    p.detail_p50_ms,
                    p.rss,
                    p.list_many.rps,
                    ms(p.list_many.p99),
                    p.list_many_plain.rps,
                    ms(p.list_many_plain.p99),
                    p.list_many_ceiling.rps,
                    ms(p.list_many_ceiling.p99)
                );
            }
        }
    });
    drop(pg);
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
/// the page, in order, or of the cluster shown.
async fn same_rows(ours: &Bench, url: &str, magnum: &Bench, magnum_url: &str) {
    let uuids = |body: Vec<u8>| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        match v.get("clusters").or_else(|| v.get("clustertemplates")) {
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
    assert_eq!(
        a, b,
        "{url}: Magnum and magnum-capi answer with different rows"
    );
}
