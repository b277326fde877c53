#![allow(clippy::unwrap_used, clippy::expect_used)]
//! CAPI driver benchmark, in-process with a private PostgreSQL and the simulated management
//! cluster (real `kube` client over loopback HTTP):
//! 1. render time per cluster (values document + handlebars → objects);
//! 2. `POST /v1/clusters` → its `Cluster` object on the management cluster (202 included);
//! 3. status delay: a Machine address changed on the management API → `GET /v1/clusters/{id}`
//!    shows it (watch → index → writer → Postgres → API);
//! 4. management-cluster cost: the requests the simulated management cluster answered
//!    (`SimCluster::requests`) per create, resize, upgrade and delete, each from a quiet
//!    baseline;
//! 5. memory: RSS of the watchers' index with 10,000 simulated clusters (5 objects each), and
//!    the status delay again with them all on the management cluster;
//! 6. idle: requests over `BENCH_IDLE_SECS` (default 60) with every cluster idle, extrapolated
//!    to an hour, and one maintenance pass (every 5 minutes);
//! 7. the service's RSS with 10,000 and 100,000 clusters' rows in PostgreSQL, and the status
//!    delay again with them: right after the rows were inserted (the writer is evaluating each
//!    of them, as their inserts notified it) and `BENCH_SETTLE_SECS` (default 60) later.
//!
//! Run: `cargo bench --bench capi` (BENCH_CLUSTERS=N for scenario 5, default 10000).

#[path = "shared/mgmt_requests.rs"]
mod mgmt_requests;

use std::time::{Duration, Instant};

use mgmt_requests::{is_probe, pct, rss_mib};

use magnum_capi::app::{App, AuthMode};
use magnum_capi::capi::{render::Renderer, values};
use magnum_capi::config::{CapiConfig, Config};
use magnum_capi::db;
use magnum_capi::devdb::EmbeddedPostgres;
use magnum_capi::simkube::requests::{RequestCounts, Verb};
use magnum_capi::simkube::{Resource, SimCluster, SimOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

/// `n requests (by verb) per operation`, printed.
fn per_op(what: &str, counts: &RequestCounts, ops: usize) {
    println!(
        "management-cluster requests per {what}: {}",
        mgmt_requests::per_op(counts, ops)
    );
}

fn render_time() {
    let template = json!({"name": "k", "image_id": "ubuntu-2404-kube-v1.33.5", "coe": "kubernetes",
        "flavor_id": "m1.small", "master_flavor_id": "m1.medium", "external_network_id": "public",
        "labels": {"kube_tag": "v1.33.5", "boot_volume_size": "40", "auto_healing_enabled": "true"}});
    let cluster =
        json!({"name": "c", "master_count": 3, "node_count": 5, "master_lb_enabled": true});
    let rows = values::rows_from_api(&template, &cluster, None).expect("rows");
    let renderer = Renderer::new(None).expect("renderer");
    let cfg = CapiConfig::default();
    let n = 2000;
    let t = Instant::now();
    let mut objects = 0;
    for _ in 0..n {
        let v = values::build(values::Inputs {
            template: &rows.template,
            cluster: &rows.cluster,
            nodegroups: &rows.nodegroups,
            config: &cfg,
            credentials: None,
            cas: None,
            rollout_after: None,
            etcd_encryption: None,
        })
        .expect("values");
        objects = renderer.render(&v).expect("render").len();
    }
    let per = t.elapsed() / n;
    println!("render: {per:?} per cluster ({objects} objects, HA control plane, {n} renders)");
}

/// `POST /v1/certificates`' work: parse and verify the CSR, sign with the cluster CA (RSA 2048
/// CSR as python-magnumclient sends, ECDSA P-256 CA as created at cluster create).
fn csr_signing_time() {
    let ca = magnum_capi::capi::pki::generate_ca("kubernetes").expect("CA");
    let csr = include_str!("../tests/fixtures/csr/rsa2048.csr");
    let validity = Duration::from_secs(365 * 86400);
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        magnum_capi::capi::pki::sign_csr(&ca, csr, validity).expect("signed");
    }
    println!(
        "csr signing: {:?} per certificate ({n} RSA-2048 CSRs)",
        t.elapsed() / n
    );
}

/// `GET /v1/clusters/{uuid}` as the bench's project.
async fn show(http: &reqwest::Client, base: &str, uuid: &str) -> Value {
    http.get(format!("{base}/v1/clusters/{uuid}"))
        .header("x-project-id", "bench")
        .header("x-roles", "member,reader")
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

/// Polls `GET /v1/clusters/{uuid}` until its status is `status`.
async fn wait_status(http: &reqwest::Client, base: &str, uuid: &str, status: &str) {
    loop {
        let v = show(http, base, uuid).await;
        if v["status"] == status {
            return;
        }
        assert!(
            !v["status"].as_str().unwrap_or_default().ends_with("FAILED"),
            "{v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Scenario 3: a worker Machine's address changed on the management API (controllers
/// paused) → `GET /v1/clusters/{uuid}` shows it, for each of `uuids`. `round` makes the
/// addresses new on a second pass.
async fn status_delay(
    sim: &SimCluster,
    http: &reqwest::Client,
    base: &str,
    uuids: &[String],
    round: u8,
    what: &str,
) {
    let machine_res = Resource::of("cluster.x-k8s.io/v1beta2", "Machine");
    let mut lat = Vec::new();
    for (i, u) in uuids.iter().enumerate().take(40) {
        let machines = sim
            .store()
            .list(
                &machine_res,
                None,
                &format!("magnum.openstack.org/cluster-uuid={u},magnum.openstack.org/role=worker"),
            )
            .expect("list");
        let m = machines.first().expect("a worker machine");
        let name = m["metadata"]["name"].as_str().expect("name").to_string();
        let ip = format!("198.51.{round}.{}", i + 1);
        let t = Instant::now();
        sim.store()
            .patch_status(
                &machine_res,
                "magnum-bench",
                &name,
                &json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}),
            )
            .expect("patch");
        loop {
            let v = show(http, base, u).await;
            if v["node_addresses"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == ip.as_str()))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        lat.push(t.elapsed());
    }
    println!(
        "status delay (management API change → GET shows it): p50 {:?}, p99 {:?}, max {:?} ({} changes, {what})",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0),
        lat.len()
    );
}

fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    render_time();
    csr_signing_time();
    let clusters: usize = std::env::var("BENCH_CLUSTERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let pg = EmbeddedPostgres::start().expect("PostgreSQL");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = pg.socket_url("postgres");
    rt.block_on(async move {
        let sim = SimCluster::start(SimOptions {
            step: Duration::from_millis(20),
            ..SimOptions::default()
        })
        .await
        .expect("simulated cluster");
        let mut cfg = Config::default();
        cfg.database.url = Some(url.clone());
        cfg.database.max_connections = 16;
        cfg.quotas.max_clusters_per_project = 1_000_000;
        cfg.operations.poll_interval_ms = 20;
        let pool = db::connect(&url, &cfg.database).await.expect("pool");
        db::migrate(&pool).await.expect("migrate");
        let auth = AuthMode::DevHeaders;
        let capi = magnum_capi::server::capi_runtime(&cfg, &auth, sim.client()).expect("capi");
        let backend = magnum_capi::server::backend_for(&cfg, Some(&capi));
        let state = App::with_backend(pool, cfg, auth, backend);
        let (_stop, rx) = watch::channel(false);
        let _bg = magnum_capi::server::spawn_capi(&state, &capi, rx.clone());
        tokio::spawn(magnum_capi::worker::run(
            state.clone(),
            state.backend.clone(),
            "bench".into(),
            rx,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let svc = magnum_capi::api::service(state.clone());
        tokio::spawn(async move {
            axum::serve(listener, tower::make::Shared::new(svc)).await.expect("serve");
        });
        let http = reqwest::Client::new();
        let post = |path: &str, body: Value| {
            http.post(format!("{base}{path}"))
                .header("x-project-id", "bench")
                .header("x-user-id", "bench-user")
                .header("x-roles", "member,reader")
                .json(&body)
                .send()
        };
        let r = post("/v1/clustertemplates", json!({"name": "k", "image_id": "ubuntu-2404-kube-v1.33.5",
            "coe": "kubernetes", "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
            "external_network_id": "public", "labels": {"kube_tag": "v1.33.5"}}))
            .await
            .expect("template");
        assert_eq!(r.status(), 201);

        // Start-up (discovery, the watches' first lists) is over once the template exists.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before_creates = sim.requests();
        // 2. POST → Cluster object applied.
        let cluster_res = Resource::of("cluster.x-k8s.io/v1beta2", "Cluster");
        let mut lat = Vec::new();
        let mut uuids = Vec::new();
        for i in 0..50 {
            let t = Instant::now();
            let r = post("/v1/clusters", json!({"name": format!("c{i}"), "cluster_template_id": "k"}))
                .await
                .expect("post");
            let body: Value = r.json().await.expect("json");
            let uuid = body["uuid"].as_str().expect("uuid").to_string();
            let name = magnum_capi::capi::capi_name(uuid.parse().expect("uuid"));
            while sim.store().get(&cluster_res, "magnum-bench", &name).is_none() {
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            lat.push(t.elapsed());
            uuids.push(uuid);
        }
        println!(
            "POST /v1/clusters → Cluster applied: p50 {:?}, p99 {:?} (50 sequential creates, credentials Secret + 4 CAs + ~13 objects)",
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99)
        );

        for u in &uuids {
            wait_status(&http, &base, u, "CREATE_COMPLETE").await;
        }
        // 4. Requests per operation, each kind from a quiet baseline (all of one kind done).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let ops = 10;
        per_op("create", &sim.requests().since(&before_creates), uuids.len());
        let r = post("/v1/clustertemplates", json!({"name": "k134", "image_id": "ubuntu-2404-kube-v1.34.1",
            "coe": "kubernetes", "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
            "external_network_id": "public", "labels": {"kube_tag": "v1.34.1"}}))
            .await
            .expect("template");
        assert_eq!(r.status(), 201);
        for (what, path, body, status) in [
            ("resize", "actions/resize", json!({"node_count": 2}), "UPDATE_COMPLETE"),
            ("upgrade", "actions/upgrade", json!({"cluster_template": "k134"}), "UPDATE_COMPLETE"),
        ] {
            let before = sim.requests();
            for u in &uuids[..ops] {
                let r = http.post(format!("{base}/v1/clusters/{u}/{path}"))
                    .header("x-project-id", "bench").header("x-user-id", "bench-user")
                    .header("x-roles", "member,reader")
                    .header("openstack-api-version", "container-infra latest")
                    .json(&body).send().await.expect("action");
                assert_eq!(r.status(), 202, "{what}: {}", r.text().await.unwrap_or_default());
            }
            for u in &uuids[..ops] {
                wait_status(&http, &base, u, status).await;
            }
            // Follow-ups (superseded templates collected after an upgrade) land right after.
            tokio::time::sleep(Duration::from_secs(2)).await;
            per_op(what, &sim.requests().since(&before), ops);
        }
        let before = sim.requests();
        for u in uuids.drain(..ops) {
            let r = http.delete(format!("{base}/v1/clusters/{u}"))
                .header("x-project-id", "bench").header("x-roles", "member,reader")
                .send().await.expect("delete");
            assert_eq!(r.status(), 204);
            loop {
                let r = http.get(format!("{base}/v1/clusters/{u}"))
                    .header("x-project-id", "bench").header("x-roles", "member,reader")
                    .send().await.expect("get");
                if r.status() == 404 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        per_op("delete", &sim.requests().since(&before), ops);

        // 3. Status delay with the bench's own clusters only.
        sim.pause();
        status_delay(&sim, &http, &base, &uuids, 1, "40 clusters on the management cluster").await;

        // 5. Memory of the index: clusters' objects written straight into the simulated store
        //    (no rows in Postgres: the writer finds nothing to update).
        let before = rss_mib("self");
        let kinds = [
            ("cluster.x-k8s.io/v1beta2", "Cluster"),
            ("infrastructure.cluster.x-k8s.io/v1beta1", "OpenStackCluster"),
            ("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane"),
            ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
            ("cluster.x-k8s.io/v1beta2", "Machine"),
        ];
        sim.store().ensure_namespace("magnum-mem").expect("namespace");
        let t = Instant::now();
        for i in 0..clusters {
            let uuid = uuid::Uuid::new_v4().to_string();
            for (av, k) in kinds {
                let obj = json!({"apiVersion": av, "kind": k,
                    "metadata": {"name": format!("mem-{i}"), "namespace": "magnum-mem",
                                 "labels": {"magnum.openstack.org/cluster-uuid": uuid,
                                            "cluster.x-k8s.io/cluster-name": format!("mem-{i}")}},
                    "spec": {"replicas": 3, "version": "v1.33.5"},
                    "status": {"replicas": 3, "readyReplicas": 3, "upToDateReplicas": 3,
                               "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                               "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                               "lastTransitionTime": "2026-11-21T00:00:00Z"}]}});
                sim.store().put(&Resource::of(av, k), obj).expect("put");
            }
        }
        let after_store = rss_mib("self");
        let want = clusters + uuids.len();
        while capi.observer().clusters().len() < want {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let synced = t.elapsed();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after_index = rss_mib("self");
        println!(
            "memory: {clusters} simulated clusters ({} objects) watched; RSS {before:.0} MiB → {after_store:.0} MiB with the simulated store → {after_index:.0} MiB once the watchers indexed them (index ≈ {:.0} MiB, {:.1} KiB per cluster); all indexed {synced:?} after the first write",
            clusters * kinds.len(),
            after_index - after_store,
            (after_index - after_store) * 1024.0 / clusters as f64,
        );
        status_delay(&sim, &http, &base, &uuids, 2,
            &format!("{} clusters' objects on the management cluster", clusters + uuids.len())).await;

        // 6. Idle: every cluster done, nothing asked of the API; what the management cluster
        //    is asked for a window, extrapolated to an hour.
        let idle_secs: u64 = std::env::var("BENCH_IDLE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60);
        let before = sim.requests();
        tokio::time::sleep(Duration::from_secs(idle_secs)).await;
        let idle = sim.requests().since(&before);
        let hour = 3600.0 / idle_secs as f64;
        let watched = clusters + uuids.len();
        let polling = idle.count(|k| k.verb != Verb::Watch && !is_probe(k));
        println!(
            "idle ({idle_secs} s, {watched} clusters): {polling} requests other than watches and the probe ({:.4} per cluster per hour); {} watch requests, {} reachability probes ({:.0} per hour per management cluster): {idle}",
            polling as f64 * hour / watched as f64,
            idle.count(|k| k.verb == Verb::Watch),
            idle.count(is_probe),
            idle.count(is_probe) as f64 * hour,
        );
        let before = sim.requests();
        let journal = magnum_capi::service::journal::PgJournal::new(state.pool.clone());
        magnum_capi::maintenance::run(&state.pool, &capi, &journal).await;
        let pass = sim.requests().since(&before);
        println!(
            "one maintenance pass (every 5 min, fleet-wide; no Keystone here, so no credential checks): {} requests: {pass}",
            pass.total()
        );

        // 7. The service's RSS with clusters' rows in PostgreSQL (no objects for them).
        for total in [10_000i64, 100_000] {
            let have: (i64,) = sqlx::query_as("SELECT count(*) FROM cluster WHERE project_id = 'rows'")
                .fetch_one(&state.pool).await.expect("count");
            sqlx::query(
                "INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, keypair,
                    labels, master_flavor_id, flavor_id, stack_id, status, create_timeout, api_address, coe_version)
                 SELECT md5('row-' || g)::uuid, 'rows', 'bench-user', 'row-' || g,
                    (SELECT uuid FROM cluster_template WHERE name = 'k'), 'default',
                    '{\"kube_tag\": \"v1.33.5\"}'::jsonb, 'm1.medium', 'm1.small', 'r' || md5(g::text),
                    'CREATE_COMPLETE', 60, 'https://192.0.2.1:6443', 'v1.33.5'
                   FROM generate_series($1::bigint, $2::bigint) g",
            )
            .bind(have.0 + 1)
            .bind(total)
            .execute(&state.pool)
            .await
            .expect("rows");
            // A pass of what reads every row: the maintenance and a page of the list.
            magnum_capi::maintenance::run(&state.pool, &capi, &journal).await;
            let r = http.get(format!("{base}/v1/clusters?limit=1000"))
                .header("x-project-id", "rows").header("x-roles", "member,reader")
                .send().await.expect("list");
            assert_eq!(r.status(), 200);
            tokio::time::sleep(Duration::from_secs(2)).await;
            println!("service RSS with {} clusters' rows in PostgreSQL (and the {watched} clusters' objects watched above): {:.0} MiB", total + uuids.len() as i64, rss_mib("self"));
        }
        // 3 again, with the rows: what the writer reads per pass must not grow with them. The
        // rows' inserts each notified the writer, which evaluates every one of them (a
        // transaction each) in one pass: measured once while that backlog drains, and once
        // after `BENCH_SETTLE_SECS` (default 60).
        let rows = 100_000 + uuids.len();
        status_delay(&sim, &http, &base, &uuids, 3,
            &format!("{watched} clusters' objects, {rows} clusters' rows in PostgreSQL, right after 90,000 were inserted")).await;
        let settle: u64 = std::env::var("BENCH_SETTLE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
        tokio::time::sleep(Duration::from_secs(settle)).await;
        status_delay(&sim, &http, &base, &uuids, 4,
            &format!("{watched} clusters' objects, {rows} clusters' rows in PostgreSQL, {settle} s later")).await;
    });
}
