//! Running it in production: `/metrics` families move through a cluster's lifecycle, `/readyz`
//! names the dependency that went away and recovers when it is back, `/healthz` always answers,
//! and `magnum-capi check` reports the same checks from the command line.

use crate::common;

use crate::common::capi::capi_app_on;
use crate::common::wait::until;
use crate::common::{ADMIN, ALICE, TestApp, fresh_database, pg};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

/// A TCP relay to the test PostgreSQL that can be cut (open connections closed, new ones
/// refused) and restored: PostgreSQL "going away" without stopping the one other tests use.
struct Relay {
    port: u16,
    up: Arc<AtomicBool>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Relay {
    async fn start(target_port: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let generation = Arc::new(generation);
        let (up2, gen2) = (up.clone(), generation.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: connection refused, in effect
                }
                let mut cut = gen2.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", target_port)).await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Relay {
            port,
            up,
            generation,
        }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn scrape(t: &TestApp) -> String {
    let r = t.call(&ADMIN, "GET", "/metrics", None, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body.as_str().unwrap().to_string()
}

#[tokio::test]
async fn metrics_move_through_a_cluster_lifecycle() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let before = scrape(t).await;
    let ct = t
        .call(
            &ALICE,
            "POST",
            "/v1/clustertemplates",
            None,
            Some(
                json!({"name": "ct", "image_id": "ubuntu", "coe": "kubernetes",
                        "external_network_id": "public", "flavor_id": "m1.small",
                        "master_flavor_id": "m1.medium", "labels": {"kube_tag": "v1.33.5"}}),
            ),
        )
        .await;
    assert_eq!(ct.status, 201, "{}", ct.body);
    let c = t
        .call(
            &ALICE,
            "POST",
            "/v1/clusters",
            None,
            Some(json!({"name": "m", "cluster_template_id": ct.body["uuid"]})),
        )
        .await;
    assert_eq!(c.status, 202, "{}", c.body);
    let uuid = c.body["uuid"].as_str().unwrap().to_string();
    until("CREATE_COMPLETE", || async {
        let r = t
            .call(&ALICE, "GET", &format!("/v1/clusters/{uuid}"), None, None)
            .await;
        (r.body["status"] == "CREATE_COMPLETE").then_some(())
    })
    .await;
    let after = until("the create to be counted done", || async {
        let text = scrape(t).await;
        let done = |s: &str| {
            metric(
                s,
                "magnum_capi_operations_total",
                &[("kind", "cluster_create"), ("outcome", "done")],
            )
        };
        (done(&text) > done(&before)).then_some(text)
    })
    .await;
    // The request that created it, by route template (never by id).
    let posts = |s: &str| {
        metric(
            s,
            "magnum_capi_http_requests_total",
            &[
                ("route", "/v1/clusters"),
                ("method", "POST"),
                ("status", "202"),
            ],
        )
    };
    assert_eq!(posts(&after) - posts(&before), 1.0);
    assert!(!after.contains(&format!("route=\"/v1/clusters/{uuid}\"")));
    assert!(after.contains("route=\"/v1/clusters/{ident}\""));
    // Queue back to 0; clusters by status from this database.
    assert_eq!(
        metric(&after, "magnum_capi_operation_queue_depth", &[]),
        0.0
    );
    assert_eq!(
        metric(
            &after,
            "magnum_capi_clusters",
            &[("status", "CREATE_COMPLETE")]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &after,
            "magnum_capi_clusters",
            &[("status", "CREATE_IN_PROGRESS")]
        ),
        0.0
    );
    // The watchers saw the objects, and statuses were written from them.
    assert!(metric(&after, "magnum_capi_watch_events_total", &[]) > 0.0);
    assert!(metric(&after, "magnum_capi_status_write_delay_seconds_count", &[]) > 0.0);
    assert_eq!(metric(&after, "magnum_capi_status_writer_leader", &[]), 1.0);

    // openstack-exporter's container-infra families, its labels and status numbering, a series
    // per cluster: its dashboards and alerts work unchanged.
    let labels = [
        ("uuid", uuid.as_str()),
        ("name", "m"),
        ("status", "CREATE_COMPLETE"),
        ("project_id", "p-alice"),
    ];
    let exporter = |s: &str, name: &str, more: &[(&str, &str)]| {
        let all: Vec<(&str, &str)> = labels.iter().chain(more).copied().collect();
        metric(s, name, &all)
    };
    assert_eq!(metric(&after, "openstack_container_infra_up", &[]), 1.0);
    assert_eq!(
        metric(&after, "openstack_container_infra_total_clusters", &[]),
        1.0
    );
    let counts = [("node_count", "1"), ("master_count", "1")];
    assert_eq!(
        exporter(&after, "openstack_container_infra_cluster_status", &counts),
        0.0
    );
    assert!(
        after.contains("openstack_container_infra_cluster_status{")
            && after.contains("stack_id=\"")
    );
    assert_eq!(
        exporter(
            &after,
            "openstack_container_infra_cluster_masters",
            &counts[..1]
        ),
        1.0
    );
    assert_eq!(
        exporter(
            &after,
            "openstack_container_infra_cluster_nodes",
            &counts[1..]
        ),
        1.0
    );
    // Deleted, its series go with it.
    let r = t
        .call(
            &ALICE,
            "DELETE",
            &format!("/v1/clusters/{uuid}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let gone = until("the deleted cluster's series to go", || async {
        let text = scrape(t).await;
        (!text.contains(&uuid)).then_some(text)
    })
    .await;
    assert_eq!(
        metric(&gone, "openstack_container_infra_total_clusters", &[]),
        0.0
    );

    // A member may not read them; an admin may.
    let r = t.call(&ALICE, "GET", "/metrics", None, None).await;
    assert_eq!(r.status, 403, "{}", r.body);
}

#[tokio::test]
async fn metrics_bind_serves_them_without_a_token() {
    let url = fresh_database().await;
    let mut cfg = common::test_config(&url);
    cfg.http.metrics_bind = Some("127.0.0.1:0".parse().unwrap());
    cfg.http.metrics_public = false;
    cfg.http.metrics_per_cluster = false;
    let pool = magnum_capi::db::connect(&url, &cfg.database).await.unwrap();
    let state = magnum_capi::app::App::new(pool, cfg, magnum_capi::app::AuthMode::DevHeaders);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let svc = magnum_capi::api::metrics_service(state.clone());
    tokio::spawn(async move { axum::serve(listener, svc).await });
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("# TYPE magnum_capi_operation_queue_depth gauge"),
        "{text}"
    );
    // `[http] metrics_per_cluster = false`: no per-cluster families.
    assert!(!text.contains("openstack_container_infra"), "{text}");
    // Readiness there shows what it found (the monitoring network may see versions).
    let ready: Value = reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "ok", "{ready}");
    assert!(
        ready["checks"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("PostgreSQL ")),
        "{ready}"
    );
}

#[tokio::test]
async fn readyz_names_what_went_away_and_recovers() {
    let url = fresh_database().await;
    let relay = Relay::start(pg().port()).await;
    let proxied = url.replace(&format!(":{}/", pg().port()), &format!(":{}/", relay.port));
    assert_ne!(proxied, url);
    let app = capi_app_on(Some(proxied), None, false, |cfg| {
        cfg.database.acquire_timeout_secs = 2;
    })
    .await;
    let t = &app.t;
    let ready = || async {
        let r = t.call(&ALICE, "GET", "/readyz", None, None).await;
        (r.status, r.body)
    };
    let failed = |body: &Value| -> Vec<String> {
        body["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["ok"] == false)
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, body) = ready().await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["postgresql", "migrations", "management_cluster", "crds"]
    );
    assert_eq!(
        t.call(&ALICE, "GET", "/healthz", None, None).await.status,
        200
    );

    // No versions for a caller who is not an admin.
    assert!(
        body["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["detail"] == "ok"),
        "{body}"
    );

    // The management cluster goes away: reported, but the replica still serves reads.
    app.sim.set_available(false);
    let (status, body) = ready().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok");
    assert_eq!(failed(&body), ["management_cluster", "crds"], "{body}");
    assert!(
        body["checks"].as_array().unwrap()[2..]
            .iter()
            .all(|c| c["optional"] == true),
        "{body}"
    );
    t.call(&ALICE, "GET", "/v1/clusters", None, None)
        .await
        .assert_status(200);
    app.sim.set_available(true);
    assert_eq!(ready().await.0, 200);

    // PostgreSQL goes away.
    relay.cut();
    let body = until("postgresql to be reported down", || async {
        let (status, body) = ready().await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(failed(&body).contains(&"postgresql".to_string()), "{body}");
    // The process itself is fine.
    assert_eq!(
        t.call(&ALICE, "GET", "/healthz", None, None).await.status,
        200
    );
    relay.restore();
    until("readiness to come back", || async {
        (ready().await.0 == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn check_reports_every_dependency_and_fails_on_any() {
    let url = fresh_database().await;
    let (ks, _) = common::stack::parts().await;
    let k = ks.service_config();
    let keystone = format!(
        "[keystone]\nauth_url = {:?}\nusername = {:?}\npassword = {:?}\nproject_name = {:?}\n",
        k.auth_url.unwrap(),
        k.username.unwrap(),
        secrecy::ExposeSecret::expose_secret(&k.password.unwrap()),
        k.project_name.unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    // The key ring as a mounted Secret would hold it: the current key, then a previous one.
    let key = dir.path().join("seal.key");
    std::fs::write(
        &key,
        "# current, then previous\nAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n\
         AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\n",
    )
    .unwrap();
    let write = |name: &str, db: &str, keystone: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "[database]\nurl = {db:?}\n[driver]\nkind = \"simulated\"\n\
                 [operations]\nseal_key_file = {key:?}\n{keystone}"
            ),
        )
        .unwrap();
        path
    };
    let run = |path: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
            .args(["check", "--config"])
            .arg(path)
            .env_remove("MAGNUM_CAPI_CONFIG")
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let good = run(&write("good.toml", &url, &keystone));
    let out = String::from_utf8_lossy(&good.stdout).to_string();
    for line in [
        "ok      configuration".to_string(),
        "ok      postgresql".to_string(),
        "ok      migrations".to_string(),
        "ok      keystone".to_string(),
        format!(
            "ok      {:<24} sealing with 72cd6e8422c407fb; opening also 1 previous",
            "seal_key"
        ),
    ] {
        assert!(
            out.contains(&line),
            "{line}:\n{out}\n{}",
            String::from_utf8_lossy(&good.stderr)
        );
    }
    assert!(out.contains("all checks passed"), "{out}");
    assert!(good.status.success(), "{out}");

    // Without Keystone the configuration is not servable outside --dev: reported, non-zero.
    let no_ks = run(&write(
        "no-keystone.toml",
        &url,
        "[keystone]\nenabled = false\n",
    ));
    let out = String::from_utf8_lossy(&no_ks.stdout).to_string();
    assert!(out.contains("FAILED  configuration"), "{out}");
    assert!(!no_ks.status.success());

    // An unreachable database fails the check, naming it.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let bad_url = url.replace(&format!(":{}/", pg().port()), &format!(":{port}/"));
    let bad = run(&write("bad.toml", &bad_url, &keystone));
    let out = String::from_utf8_lossy(&bad.stdout).to_string();
    assert!(out.contains("FAILED  postgresql"), "{out}");
    assert!(!bad.status.success());
}

/// Everything logged in this process, as JSON lines (installed once, for the log test).
fn captured_logs() -> &'static std::sync::Mutex<Vec<u8>> {
    static LOGS: std::sync::OnceLock<&'static std::sync::Mutex<Vec<u8>>> =
        std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let buf: &'static std::sync::Mutex<Vec<u8>> =
            Box::leak(Box::new(std::sync::Mutex::new(Vec::new())));
        let filter = tracing_subscriber::EnvFilter::new("info,sqlx=warn");
        let subscriber = magnum_capi::telemetry::json_subscriber(filter, move || Sink(buf));
        tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
        buf
    })
}

struct Sink(&'static std::sync::Mutex<Vec<u8>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn json_logs_carry_the_request_and_cluster_and_never_a_secret() {
    let logs = captured_logs();
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let (ks, _) = common::stack::parts().await;
    let token = ks.token("alice", "alpha").await;
    let post = |path: &'static str, body: Value| {
        let token = token.clone();
        async move {
            t.call_token(Some(&token), "POST", path, Some("latest"), Some(body))
                .await
        }
    };
    let ct = post(
        "/v1/clustertemplates",
        json!({"name": "logs", "image_id": common::fakecloud::IMAGE_UBUNTU_KUBE,
               "coe": "kubernetes", "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
               "keypair_id": "default", "external_network_id": common::fakecloud::NETWORK_PUBLIC,
               "labels": {"kube_tag": "v1.30.4"}}),
    )
    .await;
    assert_eq!(ct.status, 201, "{}", ct.body);
    let c = post(
        "/v1/clusters",
        json!({"name": "logs", "cluster_template_id": ct.body["uuid"]}),
    )
    .await;
    assert_eq!(c.status, 202, "{}", c.body);
    let uuid = c.body["uuid"].as_str().unwrap().to_string();
    let path = format!("/v1/clusters/{uuid}");
    until("CREATE_COMPLETE", || async {
        let r = t.call_token(Some(&token), "GET", &path, None, None).await;
        (r.body["status"] == "CREATE_COMPLETE").then_some(())
    })
    .await;
    let (_, secret) = common::capi::secret_credential(&app, &uuid);
    let r = t
        .call_token(Some(&token), "DELETE", &path, None, None)
        .await;
    assert_eq!(r.status, 204);
    until("the cluster to be gone", || async {
        let r = t.call_token(Some(&token), "GET", &path, None, None).await;
        (r.status == 404).then_some(())
    })
    .await;

    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        !text.contains(&secret),
        "an application-credential secret reached the log"
    );
    assert!(!text.contains(&token), "a token reached the log");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    // Every line logged inside this cluster's operations names the operation, the cluster and
    // the request that asked for it.
    let of_cluster: Vec<&Value> = lines
        .iter()
        .filter(|l| l["span"]["name"] == "operation" && l["span"]["cluster"] == uuid.as_str())
        .collect();
    assert!(of_cluster.len() >= 2, "{of_cluster:?}");
    for l in &of_cluster {
        assert!(
            l["span"]["request_id"]
                .as_str()
                .is_some_and(|r| r.starts_with("req-")),
            "{l}"
        );
    }
    // And what the API logged while handling a request carries its id.
    assert!(
        lines
            .iter()
            .filter(|l| l["spans"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["name"] == "request")))
            .all(|l| l["spans"][0]["request_id"]
                .as_str()
                .is_some_and(|r| r.starts_with("req-"))),
    );
}
