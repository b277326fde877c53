#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Load benchmark: the service in-process on loopback with a private PostgreSQL, 20 concurrent
//! connections, fixed duration per scenario; prints req/s and p50/p99 latency.
//!
//! Scenarios match the figures measured for the real magnum-api: `GET /v1/clustertemplates`
//! with 50 templates, `GET /v1/clusters/detail?limit=1000` with 10,000 clusters (2 nodegroups
//! each) in one project, `GET /v1/clusters/{uuid}`, and `POST /v1/clusters`.
//! Run: `cargo bench --bench api_load` (BENCH_SECS=N to change the duration per scenario).
//! The closing table puts each figure beside Magnum 23's under the same method (gunicorn, 2
//! workers, same data; the performance issue's reference) with the ratio, and beside a
//! "ceiling": a trivial handler answering the same bytes from memory on the same machine, which
//! is what the load generator and the loopback allow at most.
//! `BENCH_KEYSTONE=1` runs the same scenarios with real tokens: the test harness's Keystone
//! (tests/common/keystone.rs) validates them (cache warm after the first request) and the fake
//! Glance/Nova/Neutron answers the look-ups of `POST /v1/clusters`; it also reports what a cold
//! (uncached) token validation costs.

#[path = "../tests/common/fakecloud.rs"]
mod fakecloud;
#[path = "../tests/common/keystone.rs"]
mod keystone;

use std::sync::Arc;
use std::time::{Duration, Instant};

use magnum_capi::app::{App, AuthMode};
use magnum_capi::config::Config;
use magnum_capi::db;
use magnum_capi::devdb::EmbeddedPostgres;
use reqwest::header::{HeaderMap, HeaderValue};

const CONCURRENCY: usize = 20;

struct Stats {
    count: usize,
    secs: f64,
    p50: Duration,
    p99: Duration,
    bytes: usize,
}

async fn load(client: &reqwest::Client, url: &str, secs: u64, post: Option<String>) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let client = client.clone();
        let url = url.to_string();
        let post = post.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut bytes = 0;
            let mut i = 0usize;
            while Instant::now() < deadline {
                let t = Instant::now();
                let req = match &post {
                    Some(body) => client
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("x-project-id", format!("bench-{worker}-{i}"))
                        .body(body.clone()),
                    None => client.get(&url),
                };
                let resp = req.send().await.expect("request");
                assert!(resp.status().is_success(), "{} {}", resp.status(), url);
                bytes = resp.bytes().await.expect("body").len();
                lat.push(t.elapsed());
                i += 1;
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
        count: all.len(),
        secs,
        p50: pct(0.50),
        p99: pct(0.99),
        bytes,
    }
}

/// Magnum 23.0.0 under gunicorn (2 workers) on the same kind of machine: req/s of the reads,
/// seconds per create (the performance issue's table).
const MAGNUM: [(&str, f64); 5] = [
    ("GET /v1/clustertemplates (50)", 61.0),
    ("GET /v1/clusters/detail?limit=1000", 1.10),
    ("GET /v1/clusters?limit=1000", 1.13),
    ("GET /v1/clusters/{uuid}", 121.0),
    ("POST /v1/clusters -> 202 (s)", 0.60),
];

/// Serves `body` for every request: the ceiling of what this load generator measures.
async fn ceiling(client: &reqwest::Client, body: Vec<u8>, secs: u64) -> Stats {
    let body = bytes::Bytes::from(body);
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { ([("content-type", "application/json")], body) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let s = load(client, &format!("http://{addr}/"), secs, None).await;
    server.abort();
    s
}

fn report(name: &str, s: &Stats) {
    println!(
        "{name:<48} {:>9.1} req/s   p50 {:>8.2} ms   p99 {:>8.2} ms   ({} requests, body {} B)",
        s.count as f64 / s.secs,
        s.p50.as_secs_f64() * 1000.0,
        s.p99.as_secs_f64() * 1000.0,
        s.count,
        s.bytes
    );
}

async fn seed(pool: &sqlx::PgPool, project: &str) -> (String, String) {
    sqlx::query(
        "INSERT INTO cluster_template (uuid, project_id, user_id, name, image_id, flavor_id, master_flavor_id,
            keypair_id, external_network_id, network_driver, docker_volume_size, coe, labels, server_type, driver, dns_nameserver, public)
         SELECT gen_random_uuid(), $1, 'bench-user', 'template-' || g, 'fedora-coreos-40', 'm1.small', 'm1.medium',
            'default', 'public', 'calico', 20, 'kubernetes', '{\"kube_tag\": \"v1.30.4\", \"auto_healing_enabled\": \"true\"}',
            'vm', 'k8s_capi_rust_v1', '8.8.8.8', true
           FROM generate_series(1, 50) g",
    )
    .bind(project)
    .execute(pool)
    .await
    .expect("templates");
    let (ct,): (uuid::Uuid,) =
        sqlx::query_as("SELECT uuid FROM cluster_template ORDER BY id LIMIT 1")
            .fetch_one(pool)
            .await
            .expect("template");
    sqlx::query(
        "INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, keypair, docker_volume_size,
            labels, master_flavor_id, flavor_id, stack_id, status, create_timeout, api_address, coe_version)
         SELECT gen_random_uuid(), $1, 'bench-user', 'cluster-' || g, $2, 'default', 20,
            '{\"kube_tag\": \"v1.30.4\", \"extra\": \"x\"}', 'm1.medium', 'm1.small', 'c' || md5(g::text),
            'CREATE_COMPLETE', 60, 'https://192.0.2.1:6443', 'v1.30.4'
           FROM generate_series(1, 10000) g",
    )
    .bind(project)
    .bind(ct)
    .execute(pool)
    .await
    .expect("clusters");
    sqlx::query(
        "INSERT INTO nodegroup (uuid, name, cluster_id, project_id, labels, flavor_id, image_id, node_addresses,
            node_count, role, is_default, status)
         SELECT gen_random_uuid(), r.name, c.uuid, c.project_id, c.labels, 'm1.small', 'ubuntu-jammy',
            '[\"192.0.2.10\"]', 1, r.role, true, 'CREATE_COMPLETE'
           FROM cluster c CROSS JOIN (VALUES ('default-master', 'master'), ('default-worker', 'worker')) AS r(name, role)",
    )
    .execute(pool)
    .await
    .expect("nodegroups");
    sqlx::query("ANALYZE").execute(pool).await.expect("analyze");
    let (cl,): (uuid::Uuid,) = sqlx::query_as("SELECT uuid FROM cluster ORDER BY id DESC LIMIT 1")
        .fetch_one(pool)
        .await
        .expect("cluster");
    (ct.to_string(), cl.to_string())
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

fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let with_keystone = std::env::var("BENCH_KEYSTONE").is_ok_and(|v| v == "1");
    // Started before the runtime: the harness blocks while Keystone boots.
    let ks = with_keystone.then(keystone::keystone);
    let pg = EmbeddedPostgres::start().expect("PostgreSQL");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = pg.url("postgres");
    rt.block_on(async move {
        let mut cfg = Config::default();
        cfg.database.url = Some(url.clone());
        cfg.database.max_connections = 24;
        cfg.operations.worker_enabled = false;
        cfg.quotas.max_clusters_per_project = 1_000_000;
        let pool = db::connect(&url, &cfg.database).await.expect("pool");
        db::migrate(&pool).await.expect("migrate");
        let mut headers = HeaderMap::new();
        let mut _cloud = None;
        let (project, auth) = match ks {
            Some(ks) => {
                let cloud = fakecloud::FakeCloud::start().await;
                ks.register_services(&cloud.catalog())
                    .await
                    .expect("catalog");
                _cloud = Some(cloud);
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
        let (template, cluster) = seed(&pool, &project).await;
        let state = App::new(pool, cfg, auth);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let svc = magnum_capi::api::service(state);
        tokio::spawn(async move {
            axum::serve(listener, tower::make::Shared::new(svc))
                .await
                .expect("serve");
        });
        headers.insert("accept", HeaderValue::from_static("application/json"));
        let client = Arc::new(
            reqwest::Client::builder()
                .default_headers(headers)
                .pool_max_idle_per_host(CONCURRENCY)
                .build()
                .expect("client"),
        );
        let base = format!("http://{addr}");
        println!(
            "magnum-capi load benchmark: {CONCURRENCY} connections, {secs} s per scenario, loopback, {}",
            if with_keystone { "real Keystone tokens (cache warm)" } else { "--dev identity headers" }
        );
        if let Some(ks) = ks {
            cold_validations(ks, &base).await;
            // Warm the cache for the token the scenarios use: they measure the warm path.
            let r = client
                .get(format!("{base}/v1/clustertemplates"))
                .send()
                .await
                .expect("warm-up");
            assert!(r.status().is_success(), "warm-up: {}", r.status());
        }
        let mut rows = Vec::new();
        for (i, path) in [
            "/v1/clustertemplates".to_string(),
            "/v1/clusters/detail?limit=1000".to_string(),
            "/v1/clusters?limit=1000".to_string(),
            format!("/v1/clusters/{cluster}"),
        ]
        .iter()
        .enumerate()
        {
            let url = format!("{base}{path}");
            let s = load(&client, &url, secs, None).await;
            report(MAGNUM[i].0, &s);
            let body = client
                .get(&url)
                .send()
                .await
                .expect("body")
                .bytes()
                .await
                .expect("body")
                .to_vec();
            let c = ceiling(&client, body, secs).await;
            report("  ceiling: the same bytes from memory", &c);
            rows.push((MAGNUM[i], s, Some(c)));
        }
        let body = format!("{{\"cluster_template_id\": \"{template}\", \"node_count\": 1}}");
        let s = load(
            &client,
            &format!("{base}/v1/clusters"),
            secs.min(5),
            Some(body),
        )
        .await;
        report("POST /v1/clusters (202, rows + operation)", &s);
        rows.push((MAGNUM[4], s, None));
        println!();
        println!(
            "| request | Magnum 23 | magnum-capi | ratio | ceiling (same bytes from memory) | share of ceiling |"
        );
        println!("| --- | --- | --- | --- | --- | --- |");
        for ((name, magnum), s, c) in &rows {
            let rps = s.count as f64 / s.secs;
            if let Some(c) = c {
                let ceil = c.count as f64 / c.secs;
                println!(
                    "| {name} | {magnum} req/s | {rps:.1} req/s, p99 {:.1} ms | {:.0}x | {ceil:.0} req/s | {:.0}% |",
                    s.p99.as_secs_f64() * 1000.0,
                    rps / magnum,
                    100.0 * rps / ceil
                );
            } else {
                println!(
                    "| {name} | {magnum} s | p50 {:.1} ms, p99 {:.1} ms | {:.0}x | | |",
                    s.p50.as_secs_f64() * 1000.0,
                    s.p99.as_secs_f64() * 1000.0,
                    magnum / s.p50.as_secs_f64()
                );
            }
        }
    });
    drop(pg);
}
