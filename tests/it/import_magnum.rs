//! `magnum-capi import` against the real Magnum (issue 25): Magnum's own schema of three
//! releases (the newest, one of 2024 and one of 2023: both sides of the trust-column drop, of the
//! 1.14 nodegroup columns and of the template `driver` column), fixtures written through Magnum's own db API, the real binary importing them, and
//! every imported object's `GET` compared with Magnum's own API answer (links aside) at several
//! microversions. Then: re-import idempotent and bringing edits over, `--dry-run` writing
//! nothing, bad input refused with nothing written, read-only imported clusters.

use std::process::Command;

use serde_json::{Value, json};
use sqlx::Connection;

use crate::common::magnum::{MagnumDb, NEWEST, OF_2023, OF_2024};
use crate::common::{self, As, TestApp, assert_magnum_error};

const PA: &str = "p-import-a";
const PB: &str = "p-import-b";
/// Admin of the fixtures' first project (Magnum's and our policies then show everything).
const ADMIN_A: As = As {
    user: "u-import-a",
    project: PA,
    roles: "admin,member,reader",
};

const T_HELM: &str = "7e1f0d7a-0001-4000-8000-000000000001";
const T_MCAPI: &str = "7e1f0d7a-0002-4000-8000-000000000002";
const T_HEAT: &str = "7e1f0d7a-0003-4000-8000-000000000003";

const HEALTH: [&str; 3] = ["HEALTHY", "UNHEALTHY", "UNKNOWN"];

fn cluster_uuid(i: usize) -> String {
    format!("c1a5e700-0000-4000-8000-{i:012}")
}

fn ng_uuid(i: usize, k: usize) -> String {
    format!("9e000000-{k:04}-4000-8000-{i:012}")
}

/// Templates of both CAPI drivers (one public, one hidden) and of the Heat driver, clusters in
/// every status Magnum has (each with a master and a worker nodegroup, labels and taints on some,
/// a third nodegroup on the first), and quotas.
fn fixtures() -> Value {
    let templates = json!([
        {"uuid": T_HELM, "project_id": PA, "user_id": "u-import-a", "name": "k8s-helm",
         "coe": "kubernetes", "image_id": "ubuntu-2204-kube-v1.30.4", "flavor_id": "m1.medium",
         "master_flavor_id": "m1.large", "keypair_id": "kp", "external_network_id": "public",
         "network_driver": "calico", "volume_driver": "cinder", "dns_nameserver": "8.8.8.8",
         "docker_volume_size": 20, "cluster_distro": "ubuntu", "server_type": "vm",
         "public": true, "hidden": false, "registry_enabled": false, "tls_disabled": false,
         "master_lb_enabled": true, "floating_ip_enabled": false, "tags": "prod",
         "driver": "k8s_capi_helm_v1", "created_at": "2024-03-01 09:00:00",
         "labels": {"kube_tag": "v1.30.4", "monitoring_enabled": "true",
                    "octavia_provider": "ovn", "cinder_csi_enabled": "true",
                    "auto_healing_enabled": "false", "boot_volume_size": "40",
                    "kube_dashboard_enabled": "true"}},
        {"uuid": T_MCAPI, "project_id": PA, "user_id": "u-import-a", "name": "k8s-mcapi",
         "coe": "kubernetes", "image_id": "ubuntu-2204-kube-v1.31.1", "flavor_id": "m1.small",
         "master_flavor_id": "m1.medium", "external_network_id": "public",
         "network_driver": "cilium", "cluster_distro": "ubuntu", "server_type": "vm",
         "public": false, "hidden": true, "master_lb_enabled": false,
         "floating_ip_enabled": true, "http_proxy": "http://proxy:3128",
         "https_proxy": "http://proxy:3128", "no_proxy": "10.0.0.0/8",
         "driver": "k8s_cluster_api_ubuntu", "created_at": "2024-03-02 09:00:00",
         "updated_at": "2024-06-02 09:00:00",
         "labels": {"kube_tag": "v1.31.1", "audit_log_enabled": "true",
                    "server_group_policies": "soft-anti-affinity",
                    "keystone_auth_enabled": "true", "availability_zone": "az1"}},
        {"uuid": T_HEAT, "project_id": PB, "user_id": "u-import-b", "name": "k8s-heat",
         "coe": "kubernetes", "image_id": "fedora-coreos-38", "flavor_id": "m1.small",
         "external_network_id": "public", "network_driver": "flannel",
         "docker_storage_driver": "overlay2", "cluster_distro": "fedora-coreos",
         "server_type": "vm", "public": true, "insecure_registry": "10.1.1.1:5000",
         "apiserver_port": 6443, "created_at": "2023-05-01 08:00:00",
         "labels": {"kube_tag": "v1.27.8-rancher2", "etcd_volume_size": "10",
                    "cloud_provider_enabled": "true", "heat_container_agent_tag": "ussuri-dev"}}
    ]);
    let statuses: Vec<&str> = magnum_capi::domain::status::Status::all_names().collect();
    let mut clusters = Vec::new();
    let mut nodegroups = Vec::new();
    for (i, status) in statuses.iter().enumerate() {
        let (template, project, user, stack_id) = match i % 3 {
            0 => (T_HELM, PA, "u-import-a", format!("c{i}-abcdef{i:06}")),
            1 => (T_MCAPI, PA, "u-import-a", format!("kube-a{i:04}")),
            _ => (
                T_HEAT,
                PB,
                "u-import-b",
                format!("5eac0000-0000-4000-8000-{i:012}"),
            ),
        };
        let failed = status.ends_with("FAILED");
        let uuid = cluster_uuid(i);
        clusters.push(json!({
            "uuid": uuid, "project_id": project, "user_id": user, "name": format!("cl-{i}"),
            "cluster_template_id": template, "keypair": if i % 2 == 0 { json!("kp") } else { json!(null) },
            "docker_volume_size": if i % 4 == 0 { json!(null) } else { json!(10 + i) },
            "labels": if i % 2 == 0 { json!({"kube_tag": "v1.30.4", "extra": format!("x{i}")}) } else { json!({}) },
            "master_flavor_id": "m1.large", "flavor_id": "m1.medium", "stack_id": stack_id,
            "api_address": format!("https://192.0.2.{i}:6443"), "status": status,
            "status_reason": format!("reason of cl-{i}"),
            "health_status": HEALTH[i % 3],
            "health_status_reason": if i % 3 == 1 { json!({"api": "ok", "cl-node-0.Ready": "False"}) } else { json!({}) },
            "create_timeout": 60, "discovery_url": if i % 3 == 2 { json!("https://discovery.etcd.io/x") } else { json!(null) },
            "coe_version": "v1.30.4", "container_version": "1.7.13",
            "ca_cert_ref": format!("x509-{i}"), "magnum_cert_ref": format!("x509m-{i}"),
            "fixed_network": if i % 2 == 1 { json!("private") } else { json!(null) },
            "fixed_subnet": null, "floating_ip_enabled": i % 2 == 0, "master_lb_enabled": i % 3 == 0,
            "trust_id": "a-trust", "trustee_username": "trustee", "trustee_password": "secret-pw",
            "trustee_user_id": "trustee-id",
            "created_at": format!("2024-04-{:02} 10:{:02}:00", 1 + i, i),
            "updated_at": if i % 2 == 0 { json!(format!("2024-05-{:02} 11:00:00", 1 + i)) } else { json!(null) },
        }));
        nodegroups.push(json!({
            "uuid": ng_uuid(i, 1), "name": "default-master", "cluster_id": uuid,
            "project_id": project, "labels": {}, "flavor_id": "m1.large",
            "image_id": "img", "node_addresses": [format!("10.0.{i}.1")], "node_count": 1,
            "role": "master", "min_node_count": 1, "max_node_count": null, "is_default": true,
            "stack_id": stack_id, "status": "CREATE_COMPLETE", "version": "v1.30.4",
            "created_at": format!("2024-04-{:02} 10:{:02}:00", 1 + i, i),
        }));
        nodegroups.push(json!({
            "uuid": ng_uuid(i, 2), "name": "default-worker", "cluster_id": uuid,
            "project_id": project, "labels": {"ng": "worker"}, "flavor_id": "m1.medium",
            "image_id": "img", "node_addresses": [format!("10.0.{i}.2"), format!("10.0.{i}.3")],
            "node_count": 2, "role": "worker", "min_node_count": 0,
            "max_node_count": if i % 2 == 0 { json!(5) } else { json!(null) }, "is_default": true,
            "stack_id": stack_id, "status": if failed { *status } else { "CREATE_COMPLETE" },
            "status_reason": if failed { json!(format!("worker of cl-{i} failed")) } else { json!(null) },
            "node_labels": if i % 2 == 0 { json!({"tier": "web"}) } else { json!(null) },
            "node_taints": if i % 2 == 0 { json!([{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]) } else { json!(null) },
            "created_at": format!("2024-04-{:02} 10:{:02}:00", 1 + i, i),
            "updated_at": "2024-06-01 00:00:00",
        }));
    }
    nodegroups.push(json!({
        "uuid": ng_uuid(0, 3), "name": "gpu", "cluster_id": cluster_uuid(0),
        "project_id": PA, "labels": {"gpu": "true"}, "flavor_id": "g1.large",
        "image_id": "img", "node_addresses": [], "node_count": 0, "role": "gpu",
        "min_node_count": 0, "max_node_count": 3, "is_default": false,
        "status": "UPDATE_COMPLETE", "version": "v1.30.4",
        "created_at": "2024-04-02 00:00:00",
    }));
    json!({
        "templates": templates,
        "clusters": clusters,
        "nodegroups": nodegroups,
        "quotas": [
            {"project_id": PA, "resource": "Cluster", "hard_limit": 7, "created_at": "2024-01-01 00:00:00"},
            {"project_id": PB, "resource": "Cluster", "hard_limit": 3, "created_at": "2024-01-02 00:00:00",
             "updated_at": "2024-02-02 00:00:00"},
        ],
    })
}

/// Runs the real binary's `import` into `app`'s database; (success, stdout, stderr).
fn import(app: &TestApp, magnum_url: &str, dry_run: bool) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_magnum-capi"));
    cmd.args(["import", "--magnum-db", magnum_url])
        .env_remove("MAGNUM_CAPI_CONFIG")
        .env("MAGNUM_CAPI__DATABASE__URL", &app.url)
        .env("RUST_LOG", "warn");
    if dry_run {
        cmd.arg("--dry-run");
    }
    let out = cmd.output().expect("run magnum-capi import");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[track_caller]
fn import_ok(app: &TestApp, magnum_url: &str) -> String {
    let (ok, out, err) = import(app, magnum_url, false);
    assert!(ok, "import failed:\n{err}\n{out}");
    out
}

/// The rows of each table the import writes, in our database.
async fn counts(app: &TestApp) -> Vec<(String, i64)> {
    let mut c = sqlx::PgConnection::connect(&app.url).await.unwrap();
    let mut out = Vec::new();
    for t in [
        "cluster_template",
        "cluster",
        "nodegroup",
        "quotas",
        "imported_cluster",
    ] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {t}")))
            .fetch_one(&mut c)
            .await
            .unwrap();
        out.push((t.to_string(), n));
    }
    out
}

/// `v` without its `links` (hosts differ) and `next` (a URL of the host).
fn without_links(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "links" && *k != "next")
                .map(|(k, v)| (k.clone(), without_links(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_links).collect()),
        other => other.clone(),
    }
}

/// The minor of `1.N` (`latest`: above every other).
fn minor(v: &str) -> u32 {
    v.strip_prefix("1.")
        .and_then(|m| m.parse().ok())
        .unwrap_or(u32::MAX)
}

/// A body for a failure message (the lists are long).
fn short(v: &Value) -> String {
    v.to_string().chars().take(1500).collect()
}

/// `ours` shows every key of `magnums` with the same value (and, with `exact`, no other key).
fn same_answer(path: &str, v: &str, magnums: &Value, ours: &Value, exact: bool) {
    match (magnums, ours) {
        (Value::Object(m), Value::Object(o)) => {
            for (k, mv) in m {
                let ov = o
                    .get(k)
                    .unwrap_or_else(|| panic!("{path} @{v}: our answer lacks {k:?}"));
                same_answer(&format!("{path} .{k}"), v, mv, ov, exact);
            }
            if exact {
                let extra: Vec<&String> = o.keys().filter(|k| !m.contains_key(*k)).collect();
                assert!(
                    extra.is_empty(),
                    "{path} @{v}: keys Magnum does not show: {extra:?}"
                );
            }
        }
        (Value::Array(m), Value::Array(o)) => {
            assert_eq!(
                m.len(),
                o.len(),
                "{path} @{v}: {} vs {}",
                short(magnums),
                short(ours)
            );
            for (i, (mv, ov)) in m.iter().zip(o).enumerate() {
                same_answer(&format!("{path}[{i}]"), v, mv, ov, exact);
            }
        }
        _ => assert_eq!(magnums, ours, "{path} @{v}"),
    }
}

/// Every object's `GET` (and the lists) from Magnum and from us, compared.
async fn compare_all(db: &MagnumDb, app: &TestApp, fx: &Value) {
    let mut paths = vec![
        ("/v1/clustertemplates".to_string(), vec!["1.1", "latest"]),
        ("/v1/clustertemplates/detail".into(), vec!["1.1", "latest"]),
        ("/v1/clusters".into(), vec!["1.1", "1.11", "latest"]),
        ("/v1/clusters/detail".into(), vec!["1.1", "latest"]),
    ];
    for t in fx["templates"].as_array().unwrap() {
        paths.push((
            format!("/v1/clustertemplates/{}", t["uuid"].as_str().unwrap()),
            vec!["1.1", "latest"],
        ));
    }
    for c in fx["clusters"].as_array().unwrap() {
        let u = c["uuid"].as_str().unwrap();
        paths.push((
            format!("/v1/clusters/{u}"),
            vec!["1.1", "1.10", "1.13", "latest"],
        ));
        paths.push((
            format!("/v1/clusters/{u}/nodegroups"),
            vec!["1.9", "latest"],
        ));
    }
    for n in fx["nodegroups"].as_array().unwrap() {
        paths.push((
            format!(
                "/v1/clusters/{}/nodegroups/{}",
                n["cluster_id"].as_str().unwrap(),
                n["uuid"].as_str().unwrap()
            ),
            vec!["1.9", "latest"],
        ));
    }
    for q in fx["quotas"].as_array().unwrap() {
        paths.push((
            format!("/v1/quotas/{}/Cluster", q["project_id"].as_str().unwrap()),
            vec!["1.10", "latest"],
        ));
    }
    // A release answers the microversions it has: `latest` is its own newest, and a newer one is
    // asked of neither side.
    let newest = db.newest_microversion();
    let requests: Vec<Value> = paths
        .iter()
        .flat_map(|(p, vs)| {
            vs.iter()
                .filter_map(|v| match *v {
                    "latest" if newest == "latest" => Some("latest".to_string()),
                    "latest" => Some(newest.to_string()),
                    v if minor(v) > minor(newest) => None,
                    v => Some(v.to_string()),
                })
                .map(move |v| {
                    json!({"path": p, "version": v, "project": ADMIN_A.project,
                           "user": ADMIN_A.user, "roles": ADMIN_A.roles})
                })
        })
        .collect();
    let magnum = db.api(&requests);
    let exact = db.release == NEWEST;
    for (req, (m_status, m_body)) in requests.iter().zip(&magnum) {
        let (path, v) = (
            req["path"].as_str().unwrap(),
            req["version"].as_str().unwrap(),
        );
        let ours = app.get_v(&ADMIN_A, path, v).await;
        assert_eq!(
            ours.status.as_u16(),
            *m_status,
            "{path} @{v}: Magnum {}, ours {}",
            short(m_body),
            short(&ours.body)
        );
        same_answer(
            path,
            v,
            &without_links(m_body),
            &without_links(&ours.body),
            exact,
        );
    }
}

async fn imported_equals_magnums_answers(release: &'static str) {
    let db = MagnumDb::create(release);
    let fx = fixtures();
    db.load(&fx);
    let app = common::app().await;
    let out = import_ok(&app, &db.url);
    assert!(out.contains("written: templates 3: 3 created"), "{out}");
    compare_all(&db, &app, &fx).await;
}

#[tokio::test]
async fn an_import_of_the_newest_magnum_answers_as_magnum_does() {
    imported_equals_magnums_answers(NEWEST).await;
}

#[tokio::test]
async fn an_import_of_a_2024_magnum_answers_as_magnum_does() {
    imported_equals_magnums_answers(OF_2024).await;
}

#[tokio::test]
async fn an_import_of_a_2023_magnum_answers_as_magnum_does() {
    imported_equals_magnums_answers(OF_2023).await;
}

#[tokio::test]
async fn a_second_import_creates_nothing_and_brings_magnums_edits_over() {
    let db = MagnumDb::create(NEWEST);
    let fx = fixtures();
    db.load(&fx);
    let app = common::app().await;
    import_ok(&app, &db.url);
    let first = counts(&app).await;
    let again = import_ok(&app, &db.url);
    assert!(
        again.contains(
            "written: templates 3: 0 created, 0 updated, 3 unchanged; clusters 18: 0 created, \
             0 updated, 18 unchanged; nodegroups 37: 0 created, 0 updated, 37 unchanged; \
             quotas 2: 0 created, 0 updated, 2 unchanged"
        ),
        "{again}"
    );
    assert_eq!(counts(&app).await, first);

    // Magnum moves on while it still serves: a cluster is updated, another deleted.
    let (edited, gone) = (cluster_uuid(2), cluster_uuid(4));
    db.load(&json!({"update_clusters": [{"uuid": edited, "values": {
        "status": "UPDATE_COMPLETE", "status_reason": "resized",
        "health_status": "HEALTHY", "updated_at": "2024-09-09 09:09:09"}}]}));
    db.sql(&format!(
        "DELETE FROM nodegroup WHERE cluster_id = '{gone}'; DELETE FROM cluster WHERE uuid = '{gone}';"
    ));
    let third = import_ok(&app, &db.url);
    assert!(
        third.contains(
            "clusters 17: 0 created, 1 updated, 16 unchanged, 1 removed (gone from Magnum)"
        ),
        "{third}"
    );
    let c = app.get(&ADMIN_A, &format!("/v1/clusters/{edited}")).await;
    c.assert_status(200);
    assert_eq!(c.body["status"], "UPDATE_COMPLETE");
    assert_eq!(c.body["status_reason"], "resized");
    assert_eq!(c.body["updated_at"], "2024-09-09T09:09:09+00:00");
    app.get(&ADMIN_A, &format!("/v1/clusters/{gone}"))
        .await
        .assert_status(404);
    let mut fx = fx;
    fx["clusters"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["uuid"] != gone.as_str());
    fx["nodegroups"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["cluster_id"] != gone.as_str());
    compare_all(&db, &app, &fx).await;
}

#[tokio::test]
async fn a_dry_run_reports_every_object_and_writes_nothing() {
    let db = MagnumDb::create(NEWEST);
    let fx = fixtures();
    db.load(&fx);
    let app = common::app().await;
    let before = counts(&app).await;
    let (ok, out, err) = import(&app, &db.url, true);
    assert!(ok, "{err}");
    assert_eq!(counts(&app).await, before, "a dry run wrote:\n{out}");
    assert!(out.contains("(dry run: nothing was written)"), "{out}");
    for t in [T_HELM, T_MCAPI, T_HEAT] {
        assert!(
            out.contains(&format!("template {t} ")),
            "no line for {t}:\n{out}"
        );
    }
    assert!(
        out.contains(&format!(
            "template {T_MCAPI} \"k8s-mcapi\" (project {PA}, hidden): import"
        )),
        "{out}"
    );
    // Both drivers' labels: the ignored ones and the defaults that differ are named, with the
    // label that keeps the old behaviour.
    assert!(
        out.contains(
            "  note: labels accepted and ignored here: kube_dashboard_enabled (no dashboard add-on"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "  note: default differs: csi_cinder_reclaim_policy unset — magnum-capi-helm made \
             StorageClass reclaimPolicy Retain; magnum-capi: Delete (the volumes of deleted \
             PersistentVolumes are deleted); set csi_cinder_reclaim_policy=Retain on the template \
             to keep it"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "  note: default differs: csi_cinder_volume_binding_mode unset — magnum-cluster-api \
             made Immediate"
        ),
        "{out}"
    );
    // The mcapi template sets keystone_auth_enabled, the Heat template's clusters are Heat's:
    // nothing to say about that default.
    assert!(!out.contains("keystone_auth_enabled unset"), "{out}");
    let heat = cluster_uuid(2);
    assert!(
        out.contains(&format!(
            "cluster {heat} \"cl-2\" (project {PB}, CREATE_COMPLETE): import read-only — made by \
             the Heat driver (k8s_fedora_coreos_v1)"
        )),
        "{out}"
    );
    let helm = cluster_uuid(0);
    assert!(
        out.contains(&format!(
            "cluster {helm} \"cl-0\" (project {PA}, CREATE_IN_PROGRESS): import read-only — made \
             by k8s_capi_helm_v1: its Cluster API objects were not found on a configured \
             management cluster (import again once they are, to adopt it) (driver found by the \
             template's driver column)"
        )),
        "{out}"
    );
    assert!(
        out.contains("  nodegroups: default-master, default-worker, gpu"),
        "{out}"
    );
    // Where each CAPI driver left the cluster's objects (and the CA that serves it here).
    assert!(
        out.contains(
            "  Cluster API objects: magnum-pimporta/c0-abcdef000000 on the management cluster its \
             driver used; its CA Secret magnum-pimporta/c0-abcdef000000-ca serves ca show and ca \
             sign"
        ),
        "{out}"
    );
    assert!(
        out.contains("  Cluster API objects: magnum-system/kube-a0001 on the management cluster"),
        "{out}"
    );
    assert!(
        out.contains(&format!("quota {PA} Cluster = 7: import")),
        "{out}"
    );
    assert!(out.contains("skip table x509keypair (0 rows)"), "{out}");
    assert!(
        out.contains("would write: templates 3: 3 created, 0 updated, 0 unchanged"),
        "{out}"
    );
    assert!(!out.contains("secret-pw"), "{out}");
}

#[tokio::test]
async fn an_unreachable_or_foreign_database_is_a_clear_error_and_writes_nothing() {
    let app = common::app().await;
    let before = counts(&app).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cases = [
        (
            format!("mysql://magnum:hunter2@127.0.0.1:{closed}/magnum"),
            format!(
                "cannot connect to the Magnum database at mysql://magnum:***@127.0.0.1:{closed}/magnum"
            ),
        ),
        (
            "postgres://magnum@127.0.0.1/magnum".to_string(),
            "--magnum-db is not a MySQL/MariaDB URL".to_string(),
        ),
    ];
    for (url, says) in cases {
        let (ok, out, err) = import(&app, &url, false);
        assert!(!ok, "{url}: succeeded:\n{out}");
        assert!(err.contains(&says), "{url}: {err}");
        assert!(!err.contains("hunter2"), "the password was shown: {err}");
    }
    // A MariaDB database that is not Magnum's (empty).
    let m = crate::common::magnum::mariadb();
    let name = format!("not_magnum_{}", std::process::id());
    m.root_sql(&format!("CREATE DATABASE IF NOT EXISTS {name}"))
        .unwrap();
    let (ok, _, err) = import(&app, &m.url(&name), false);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "the database {name} is not a Magnum database: it has no table cluster_template"
        )),
        "{err}"
    );
    assert_eq!(counts(&app).await, before);
}

#[tokio::test]
async fn a_bad_row_or_a_clash_rolls_the_whole_run_back() {
    let db = MagnumDb::create(NEWEST);
    db.load(&fixtures());
    let app = common::app().await;
    let before = counts(&app).await;
    // A row Magnum's API would never have written.
    db.sql(&format!(
        "UPDATE cluster SET status = 'EXPLODED' WHERE uuid = '{}'",
        cluster_uuid(5)
    ));
    let (ok, out, err) = import(&app, &db.url, false);
    assert!(!ok, "{out}");
    assert!(
        err.contains(
            "cluster row id 6: status \"EXPLODED\" is not a Magnum status; nothing was written"
        ),
        "{err}"
    );
    assert_eq!(counts(&app).await, before);
    db.sql(&format!(
        "UPDATE cluster SET status = 'CREATE_COMPLETE' WHERE uuid = '{}'",
        cluster_uuid(5)
    ));
    // A quota made here holds the id of one of Magnum's: the quotas, written last, fail, and the
    // templates, clusters and nodegroups written before them are rolled back too.
    let mut c = sqlx::PgConnection::connect(&app.url).await.unwrap();
    sqlx::query("INSERT INTO quotas (id, project_id, resource, hard_limit) VALUES (2, 'p-local', 'Cluster', 1)")
        .execute(&mut c)
        .await
        .unwrap();
    let before = counts(&app).await;
    let (ok, out, err) = import(&app, &db.url, false);
    assert!(!ok, "{out}");
    assert!(err.contains("quotas_pkey"), "{err}");
    assert_eq!(counts(&app).await, before);
}

#[tokio::test]
async fn imported_clusters_are_read_only_and_say_why() {
    let db = MagnumDb::create(NEWEST);
    db.load(&fixtures());
    let app = common::app().await;
    import_ok(&app, &db.url);
    let heat = cluster_uuid(2);
    let why = format!(
        "Cluster {heat} was imported from Magnum and is read-only: made by the Heat driver \
         (k8s_fedora_coreos_v1): magnum-capi cannot manage Heat stacks."
    );
    let admin_b = As {
        user: "u-import-b",
        project: PB,
        roles: "admin,member,reader",
    };
    let path = format!("/v1/clusters/{heat}");
    let r = app
        .patch(
            &admin_b,
            &path,
            json!([{"op": "replace", "path": "/node_count", "value": 3}]),
        )
        .await;
    assert_magnum_error(&r, 400, &why);
    let r = app.delete(&admin_b, &path).await;
    assert_magnum_error(&r, 400, &why);
    let r = app
        .post_v(
            &admin_b,
            &format!("{path}/actions/resize"),
            "1.7",
            json!({"node_count": 3}),
        )
        .await;
    assert_magnum_error(&r, 400, &why);
    let r = app
        .post_v(
            &admin_b,
            &format!("{path}/nodegroups"),
            "1.9",
            json!({"name": "extra", "node_count": 1}),
        )
        .await;
    assert_magnum_error(&r, 400, &why);
    let r = app
        .delete_v(
            &admin_b,
            &format!("{path}/nodegroups/default-worker"),
            "1.9",
        )
        .await;
    assert_magnum_error(&r, 400, &why);
    // A CAPI driver's cluster whose objects were not found says so.
    let helm = cluster_uuid(3);
    let r = app.delete(&ADMIN_A, &format!("/v1/clusters/{helm}")).await;
    assert_magnum_error(
        &r,
        400,
        "made by k8s_capi_helm_v1: its Cluster API objects were not found on a configured \
         management cluster (import again once they are, to adopt it).",
    );
    // Nothing changed.
    let c = app.get(&admin_b, &path).await;
    assert_eq!(c.body["status"], "CREATE_COMPLETE");
    assert_eq!(c.body["node_count"], 2);
}

#[tokio::test]
async fn the_status_writer_and_reachability_marks_leave_imported_clusters_alone() {
    use magnum_capi::db::clusters as cdb;
    let db = MagnumDb::create(NEWEST);
    db.load(&fixtures());
    let app = common::app().await;
    import_ok(&app, &db.url);
    let pool = &app.state.pool;
    // Imported clusters hold no management cluster (`NULL`, as Magnum's rows): the unnamed one's
    // in-progress clusters, which the status writer re-checks, do not include them …
    let in_progress =
        cdb::of_management_cluster(pool, "", &["CREATE_IN_PROGRESS", "UPDATE_IN_PROGRESS"])
            .await
            .unwrap();
    assert!(in_progress.is_empty(), "{in_progress:?}");
    // … an unreachable management cluster does not turn their health UNKNOWN …
    let marked = cdb::mark_unreachable(pool, "", Some("gone")).await.unwrap();
    assert!(marked.is_empty(), "{marked:?}");
    let healthy = cluster_uuid(0);
    let c = app.get(&ADMIN_A, &format!("/v1/clusters/{healthy}")).await;
    assert_eq!(c.body["health_status"], "HEALTHY");
    assert_eq!(c.body["health_status_reason"], json!({}));
    // … and the writer's own check says so for each of them.
    assert!(
        magnum_capi::db::imports::is_read_only(pool, healthy.parse().unwrap())
            .await
            .unwrap()
    );
}
