#![allow(clippy::unwrap_used, clippy::expect_used)]
//! CAPI driver benchmark, in-process with a private PostgreSQL and the simulated management
//! cluster (real `kube` client over loopback HTTP):
//! 1. render time per cluster (values document + handlebars → objects);
//! 2. `POST /v1/clusters` → its `Cluster` object on the management cluster (202 included);
//! 3. status delay: a Machine address changed on the management API → `GET /v1/clusters/{id}`
//!    shows it (watch → index → writer → Postgres → API);
//! 4. memory: RSS of the watchers' index with 10,000 simulated clusters (5 objects each).
//!
//! Run: `cargo bench --bench capi` (BENCH_CLUSTERS=N for scenario 4, default 10000).

use std::time::{Duration, Instant};

use magnum_capi::app::{App, AuthMode};
use magnum_capi::capi::{render::Renderer, values};
use magnum_capi::config::{CapiConfig, Config};
use magnum_capi::db;
use magnum_capi::devdb::EmbeddedPostgres;
use magnum_capi::simkube::{Resource, SimCluster, SimOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
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
    let url = pg.url("postgres");
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

        // 3. Status delay: wait for every cluster to complete, then change Machine addresses.
        for u in &uuids {
            loop {
                let v: Value = http.get(format!("{base}/v1/clusters/{u}"))
                    .header("x-project-id", "bench").header("x-roles", "member,reader")
                    .send().await.expect("get").json().await.expect("json");
                if v["status"] == "CREATE_COMPLETE" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        sim.pause();
        let machine_res = Resource::of("cluster.x-k8s.io/v1beta2", "Machine");
        let mut lat = Vec::new();
        for (i, u) in uuids.iter().enumerate().take(40) {
            let machines = sim
                .store()
                .list(&machine_res, None, &format!("magnum.openstack.org/cluster-uuid={u},magnum.openstack.org/role=worker"))
                .expect("list");
            let m = machines.first().expect("a worker machine");
            let name = m["metadata"]["name"].as_str().expect("name").to_string();
            let ip = format!("198.51.100.{}", i + 1);
            let t = Instant::now();
            sim.store()
                .patch_status(&machine_res, "magnum-bench", &name,
                    &json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}))
                .expect("patch");
            loop {
                let v: Value = http.get(format!("{base}/v1/clusters/{u}"))
                    .header("x-project-id", "bench").header("x-roles", "member,reader")
                    .send().await.expect("get").json().await.expect("json");
                if v["node_addresses"].as_array().is_some_and(|a| a.iter().any(|x| x == ip.as_str())) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            lat.push(t.elapsed());
        }
        println!(
            "status delay (management API change → GET shows it): p50 {:?}, p99 {:?}, max {:?} (40 changes)",
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99),
            pct(&mut lat, 1.0)
        );

        // 4. Memory of the index: clusters' objects written straight into the simulated store
        //    (no rows in Postgres: the writer finds nothing to update).
        let before = rss_mib();
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
        let after_store = rss_mib();
        let want = clusters + uuids.len();
        while capi.observer().clusters().len() < want {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let synced = t.elapsed();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after_index = rss_mib();
        println!(
            "memory: {clusters} simulated clusters ({} objects) watched; RSS {before:.0} MiB → {after_store:.0} MiB with the simulated store → {after_index:.0} MiB once the watchers indexed them (index ≈ {:.0} MiB, {:.1} KiB per cluster); all indexed {synced:?} after the first write",
            clusters * kinds.len(),
            after_index - after_store,
            (after_index - after_store) * 1024.0 / clusters as f64,
        );
    });
}
