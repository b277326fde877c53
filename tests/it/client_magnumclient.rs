//! python-magnumclient 5.0.0 (through `openstack coe …`, python-openstackclient 10.5.0, the
//! Keystone virtualenv) unchanged against the service with the Cluster API driver on the
//! simulated management cluster and the real Keystone: the day-2 commands client_osc.rs does not
//! cover. Nodegroups (µv latest, i.e. ≥ 1.9: create and wait for CREATE_COMPLETE, show, list by
//! `--role`, update, delete), `cluster resize` (the default worker and `--nodegroup`), `cluster
//! upgrade` to the next kube minor, `ca show`/`sign`/`rotate`, `cluster config`, `credential
//! rotate` by another member of the project, pagination of `cluster list` and `cluster
//! template list` (`--limit`, `--sort-key`, `--sort-dir`), and of `quotas list` (`--limit`,
//! `--marker`).
//!
//! The client has no `--marker` option on the cluster and template lists: with `--limit` it
//! follows the `next` links the service returns (each carrying `marker=<uuid>`), so `[api]
//! max_limit` is 2 here and a `--limit 3` listing takes two pages, the second by marker. Only
//! `quotas list` takes `--marker`, the integer `id` of the last quota of the previous page.
//!
//! Assertions are on what the client prints and on the service's state (its API in-process,
//! the objects on the simulated management cluster, Keystone). Setup (templates, clusters) goes
//! through the API in-process; the clients only run the commands under test, independent ones
//! concurrently (each `openstack` costs a few seconds).

use crate::common::pick;

use std::time::Instant;

use crate::common::TestApp;
use crate::common::capi::{CapiApp, authenticates, capi_app_on, objects, secret_credential};
use crate::common::fakecloud::{IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT, NETWORK_PUBLIC};
use crate::common::osc::{Osc, Out};
use crate::common::stack::{cloud, env_exclusive, parts, serve_as_endpoint};
use crate::common::wait::until;

use magnum_capi::capi::pki;
use serde_json::{Value, json};

/// The image of the upgrade target: Kubernetes one minor above IMAGE_UBUNTU_KUBE's v1.30.4.
const IMAGE_KUBE_131: &str = "11111111-0000-4000-8000-000000000131";
/// A CSR with a subject of three RDNs (O=system:masters, O=developers, CN=alice), ECDSA P-384.
const CSR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/csr/p384.csr");
/// `coe nodegroup show` polls before the nodegroup must be CREATE_COMPLETE.
const POLLS: usize = 10;
/// `openstack` invocations at a time.
const PARALLEL: usize = 2;

/// `field` of every element of a JSON array.
fn column(v: &Value, field: &str) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|e| e[field].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `openstack` with at most [`PARALLEL`] invocations at a time: each is a Python process
/// busy for seconds, and more of them at once starve Keystone (the service's token validation
/// then times out into 503s) on a small CI machine.
struct Cli {
    osc: Osc,
    gate: tokio::sync::Semaphore,
}

impl Cli {
    async fn ok(&self, user: &str, project: &str, args: &[&str]) -> Out {
        let _permit = self.gate.acquire().await.unwrap();
        self.osc.ok(user, project, args).await
    }

    async fn fails(&self, user: &str, project: &str, args: &[&str]) -> Out {
        let _permit = self.gate.acquire().await.unwrap();
        self.osc.fails(user, project, args).await
    }
}

#[track_caller]
fn says(out: &Out, line: &str) {
    assert_eq!(out.stdout.trim(), line, "{}", out.dump());
}

async fn api(t: &TestApp, token: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    let r = t
        .call_token(Some(token), method, path, Some("latest"), body)
        .await;
    assert!(
        r.status.is_success(),
        "{method} {path}: {} {}",
        r.status,
        r.body
    );
    r.body
}

async fn template(t: &TestApp, token: &str, name: &str, image: &str, kube_tag: &str) -> String {
    let body = api(
        t,
        token,
        "POST",
        "/v1/clustertemplates",
        Some(json!({"name": name, "image_id": image, "coe": "kubernetes",
            "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
            "keypair_id": KEYPAIR_DEFAULT, "external_network_id": NETWORK_PUBLIC,
            "labels": {"kube_tag": kube_tag}})),
    )
    .await;
    body["uuid"].as_str().unwrap().to_string()
}

async fn create_cluster(t: &TestApp, token: &str, name: &str, template: &str) -> String {
    let body = api(
        t,
        token,
        "POST",
        "/v1/clusters",
        Some(json!({"name": name, "cluster_template_id": template, "node_count": 1})),
    )
    .await;
    body["uuid"].as_str().unwrap().to_string()
}

/// `spec.replicas` of the MachineDeployment of nodegroup `ng` (uuid).
fn replicas(app: &CapiApp, c: &str, ng: &str) -> Option<i64> {
    objects(app, "cluster.x-k8s.io/v1beta2", "MachineDeployment", c)
        .iter()
        .find(|m| m["metadata"]["labels"]["magnum.openstack.org/nodegroup-uuid"] == ng)
        .map(|m| m["spec"]["replicas"].as_i64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn magnumclient_day2_commands_work_against_the_capi_driver() {
    let t0 = Instant::now();
    let _env = env_exclusive().await;
    let (ks, _) = parts().await;
    cloud().add_image(
        json!({"id": IMAGE_KUBE_131, "name": "ubuntu-2204-kube-v1.31.1",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.31.1"}),
    );
    let app = capi_app_on(None, None, true, |cfg| cfg.api.max_limit = 2).await;
    let t = &app.t;
    let server = serve_as_endpoint(&t.state).await;
    let (carol, carol_id) = ks.new_user("carol", "member", "alpha").await;
    let alice = ks.token("alice", "alpha").await;
    let bob = ks.token("bob", "beta").await;

    // Alice: two templates (v1.30 → v1.31) and two clusters; bob: a page-able project.
    let k130 = template(t, &alice, "k130", IMAGE_UBUNTU_KUBE, "v1.30.4").await;
    let k131 = template(t, &alice, "k131", IMAGE_KUBE_131, "v1.31.1").await;
    let c1 = create_cluster(t, &alice, "c1", &k130).await;
    let c2 = create_cluster(t, &alice, "c2", &k130).await;
    let mut bob_templates = Vec::new();
    for name in ["t-a", "t-b", "t-c", "t-d", "t-e"] {
        let u = template(t, &bob, name, IMAGE_UBUNTU_KUBE, "v1.30.4").await;
        bob_templates.push((name, u));
    }
    let mut bob_clusters = Vec::new();
    for name in ["p-a", "p-b", "p-c"] {
        bob_clusters.push((
            name,
            create_cluster(t, &bob, name, &bob_templates[0].1).await,
        ));
    }
    t.wait_cluster_token(&alice, &c1, "CREATE_COMPLETE").await;
    t.wait_cluster_token(&alice, &c2, "CREATE_COMPLETE").await;
    let osc = Cli {
        osc: Osc::new(ks),
        gate: tokio::sync::Semaphore::new(PARALLEL),
    };
    eprintln!("setup done in {:.1?}", t0.elapsed());

    // --- c1: nodegroups, resize, upgrade ---
    let nodegroups_resize_upgrade = async {
        let out = osc
            .ok(
                "alice",
                "alpha",
                &[
                    "coe",
                    "nodegroup",
                    "create",
                    "c1",
                    "ng1",
                    "--node-count",
                    "1",
                    "--min-nodes",
                    "1",
                    "--flavor",
                    "m1.large",
                    "--role",
                    "gpu",
                ],
            )
            .await;
        let ng_uuid = out.accepted_uuid("nodegroup");
        let mut shown = None;
        for _ in 0..POLLS {
            let out = osc
                .ok(
                    "alice",
                    "alpha",
                    &["coe", "nodegroup", "show", "c1", "ng1", "-f", "json"],
                )
                .await;
            let ng = out.json();
            if ng["status"] == "CREATE_COMPLETE" {
                shown = Some((out, ng));
                break;
            }
            assert_eq!(ng["status"], "CREATE_IN_PROGRESS", "{}", out.dump());
        }
        let (out, ng) = shown.expect("nodegroup ng1 never reached CREATE_COMPLETE");
        assert_eq!(
            pick(
                &ng,
                &[
                    "uuid",
                    "name",
                    "cluster_id",
                    "project_id",
                    "flavor_id",
                    "image_id",
                    "node_count",
                    "min_node_count",
                    "max_node_count",
                    "role",
                    "is_default",
                    "status_reason",
                ]
            ),
            json!({"uuid": ng_uuid, "name": "ng1", "cluster_id": c1,
                   "project_id": ks.project_id("alpha"), "flavor_id": "m1.large",
                   "image_id": IMAGE_UBUNTU_KUBE, "node_count": 1, "min_node_count": 1,
                   "max_node_count": null, "role": "gpu", "is_default": false,
                   "status_reason": null}),
            "{}",
            out.dump()
        );
        assert_eq!(ng["node_addresses"].as_array().map(Vec::len), Some(1));
        assert_eq!(replicas(&app, &c1, &ng_uuid), Some(1));
        t.wait_cluster_token(&alice, &c1, "UPDATE_COMPLETE").await;

        // By role (one GET), and all of them by name through the `next` links (pages of 2).
        let by_role = osc.ok(
            "alice",
            "alpha",
            &[
                "coe",
                "nodegroup",
                "list",
                "c1",
                "--role",
                "gpu",
                "-f",
                "json",
            ],
        );
        let all = osc.ok(
            "alice",
            "alpha",
            &[
                "coe",
                "nodegroup",
                "list",
                "c1",
                "--limit",
                "10",
                "--sort-key",
                "name",
                "--sort-dir",
                "desc",
                "-f",
                "json",
            ],
        );
        let (by_role, all) = tokio::join!(by_role, all);
        assert_eq!(
            by_role.json(),
            json!([{"uuid": ng_uuid, "name": "ng1", "flavor_id": "m1.large",
                    "image_id": IMAGE_UBUNTU_KUBE, "node_count": 1,
                    "status": "CREATE_COMPLETE", "role": "gpu"}]),
            "{}",
            by_role.dump()
        );
        let all_v = all.json();
        assert_eq!(
            column(&all_v, "name"),
            ["ng1", "default-worker", "default-master"],
            "{}",
            all.dump()
        );
        assert_eq!(
            column(&all_v, "role"),
            ["gpu", "worker", "master"],
            "{}",
            all.dump()
        );

        // A command on c1 as alice: the line it prints, then c1 once UPDATE_COMPLETE.
        let (cli, me, c1_ref) = (&osc, alice.as_str(), c1.as_str());
        let accepted = move |args: &'static [&'static str], line: &'static str| async move {
            let out = cli.ok("alice", "alpha", args).await;
            says(&out, line);
            t.wait_cluster_token(me, c1_ref, "UPDATE_COMPLETE")
                .await
                .body
        };
        // A nodegroup of c1 from the API.
        let nodegroup = move |name: &'static str| async move {
            let path = format!("/v1/clusters/{c1_ref}/nodegroups/{name}");
            api(t, me, "GET", &path, None).await
        };

        // Update the bounds.
        accepted(
            &[
                "coe",
                "nodegroup",
                "update",
                "c1",
                "ng1",
                "--min-nodes",
                "1",
                "--max-nodes",
                "3",
            ],
            "Request to update nodegroup ng1 has been accepted.",
        )
        .await;
        let ng = nodegroup("ng1").await;
        assert_eq!(
            pick(&ng, &["min_node_count", "max_node_count", "node_count"]),
            json!({"min_node_count": 1, "max_node_count": 3, "node_count": 1}),
            "{ng}"
        );

        // Resize the new nodegroup, then the default worker.
        let done = accepted(
            &["coe", "cluster", "resize", "c1", "2", "--nodegroup", "ng1"],
            "Request to resize cluster c1 has been accepted.",
        )
        .await;
        // A cluster's node_count is that of all its worker nodegroups (as Magnum's).
        assert_eq!(done["node_count"], 3, "{done}");
        let ng = nodegroup("ng1").await;
        assert_eq!(ng["node_count"], 2, "{ng}");
        assert_eq!(replicas(&app, &c1, &ng_uuid), Some(2));

        let done = accepted(
            &["coe", "cluster", "resize", "c1", "2"],
            "Request to resize cluster c1 has been accepted.",
        )
        .await;
        assert_eq!(done["node_count"], 4, "{done}");
        let worker = nodegroup("default-worker").await;
        assert_eq!(worker["node_count"], 2, "{worker}");
        assert_eq!(
            replicas(&app, &c1, worker["uuid"].as_str().unwrap()),
            Some(2)
        );

        // Delete the nodegroup: its MachineDeployment goes, the row too.
        let out = osc
            .ok(
                "alice",
                "alpha",
                &["coe", "nodegroup", "delete", "c1", "ng1"],
            )
            .await;
        says(&out, "Request to delete nodegroup ng1 has been accepted.");
        until("ng1 to be gone", || async {
            let r = t
                .call_token(
                    Some(&alice),
                    "GET",
                    &format!("/v1/clusters/{c1}/nodegroups/ng1"),
                    Some("latest"),
                    None,
                )
                .await;
            (r.status == 404).then_some(())
        })
        .await;
        let done = t
            .wait_cluster_token(&alice, &c1, "UPDATE_COMPLETE")
            .await
            .body;
        assert_eq!(done["node_count"], 2, "{done}");
        assert_eq!(replicas(&app, &c1, &ng_uuid), None);

        // Upgrade to the next minor (the template by name, as a user types it).
        accepted(
            &["coe", "cluster", "upgrade", "c1", "k131"],
            "Request to upgrade cluster c1 has been accepted.",
        )
        .await;
        let out = osc
            .ok(
                "alice",
                "alpha",
                &["coe", "cluster", "show", "c1", "-f", "json"],
            )
            .await;
        assert_eq!(
            pick(
                &out.json(),
                &[
                    "uuid",
                    "status",
                    "cluster_template_id",
                    "coe_version",
                    "node_count"
                ]
            ),
            json!({"uuid": c1, "status": "UPDATE_COMPLETE", "cluster_template_id": k131,
                   "coe_version": "v1.31.1", "node_count": 2}),
            "{}",
            out.dump()
        );
    };

    // --- c2: CA show/sign/rotate, kubeconfig, credential rotation by another member ---
    let certificates_credentials = async {
        let dir = tempfile::tempdir().unwrap();
        let dir_s = dir.path().to_str().unwrap();
        let config_args = ["coe", "cluster", "config", "c2", "--dir", dir_s, "--force"];
        let (shown, signed, config) = tokio::join!(
            osc.ok("alice", "alpha", &["coe", "ca", "show", "c2"]),
            osc.ok("alice", "alpha", &["coe", "ca", "sign", "c2", CSR]),
            osc.ok("alice", "alpha", &config_args),
        );
        let old_ca = shown.stdout.trim().to_string();
        let server_ca = api(t, &alice, "GET", &format!("/v1/certificates/{c2}"), None).await;
        assert_eq!(
            old_ca,
            server_ca["pem"].as_str().unwrap().trim(),
            "{}",
            shown.dump()
        );
        assert!(old_ca.starts_with("-----BEGIN CERTIFICATE-----"));
        let cert = signed.stdout.trim().to_string();
        assert!(
            pki::verifies(&cert, &old_ca),
            "not signed by the CA: {}",
            signed.dump()
        );
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
        let parsed = pem.parse_x509().unwrap();
        assert_eq!(
            parsed.subject().to_string(),
            "O=system:masters, O=developers, CN=alice"
        );
        assert_eq!(
            config.stdout.trim(),
            format!("export KUBECONFIG={}", dir.path().join("config").display()),
            "{}",
            config.dump()
        );
        let kc = std::fs::read_to_string(dir.path().join("config")).unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&kc).unwrap();
        let c = api(t, &alice, "GET", &format!("/v1/clusters/{c2}"), None).await;
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            c["api_address"].as_str()
        );

        // CA rotation: UPDATE_COMPLETE after three rollouts, a new CA, old certificates refused.
        let out = osc
            .ok("alice", "alpha", &["coe", "ca", "rotate", "c2"])
            .await;
        says(
            &out,
            &format!("Request to rotate the CA certificate for cluster {c2} has been accepted."),
        );
        t.wait_cluster_token(&alice, &c2, "UPDATE_COMPLETE").await;
        let out = osc.ok("alice", "alpha", &["coe", "ca", "show", "c2"]).await;
        let new_ca = out.stdout.trim().to_string();
        assert!(new_ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(new_ca, old_ca);
        assert!(!pki::verifies(&cert, &new_ca));

        // Carol (another member of alpha) rotates the credential and becomes the owner.
        let (old_id, old_secret) = secret_credential(&app, &c2);
        let out = osc
            .ok(&carol, "alpha", &["coe", "credential", "rotate", "c2"])
            .await;
        // The client prints failures of this command on stdout and exits 0.
        says(
            &out,
            &format!("Request to rotate credentials for cluster {c2} accepted."),
        );
        let done = t
            .wait_cluster_token(&alice, &c2, "UPDATE_COMPLETE")
            .await
            .body;
        assert_eq!(done["user_id"], carol_id.as_str(), "{done}");
        let (new_id, new_secret) = secret_credential(&app, &c2);
        assert_ne!(new_id, old_id);
        assert!(authenticates(&new_id, &new_secret).await);
        assert!(!authenticates(&old_id, &old_secret).await);
        // The former owner is no longer the cluster's user: `ca show` is the owner's or an
        // admin's (Magnum's certificate:get).
        osc.fails("alice", "alpha", &["coe", "ca", "show", "c2"])
            .await
            .stderr_has("(HTTP 403)");
    };

    // --- bob: pages of clusters and templates ---
    let pages = async {
        let names = |rows: &[(&str, String)], pick: &[usize]| -> Vec<(String, String)> {
            pick.iter()
                .map(|&i| (rows[i].0.to_string(), rows[i].1.clone()))
                .collect()
        };
        let listed = |out: &Out| -> Vec<(String, String)> {
            let v = out.json();
            column(&v, "name")
                .into_iter()
                .zip(column(&v, "uuid"))
                .collect()
        };
        // `coe <what> list --limit <limit> --sort-key name --sort-dir <dir> -f json`.
        let sorted = |what: &'static [&'static str], limit, dir| {
            let mut args = vec!["coe"];
            args.extend(what);
            args.extend([
                "list",
                "--limit",
                limit,
                "--sort-key",
                "name",
                "--sort-dir",
                dir,
                "-f",
                "json",
            ]);
            args
        };
        let clusters: &[&str] = &["cluster"];
        let templates: &[&str] = &["cluster", "template"];
        let (c_first, c_all, t_first, t_three) = (
            sorted(clusters, "2", "desc"),
            sorted(clusters, "3", "desc"),
            sorted(templates, "2", "desc"),
            sorted(templates, "3", "asc"),
        );
        let (c_first, c_all, t_first, t_three) = tokio::join!(
            osc.ok("bob", "beta", &c_first),
            osc.ok("bob", "beta", &c_all),
            osc.ok("bob", "beta", &t_first),
            osc.ok("bob", "beta", &t_three),
        );
        assert_eq!(
            listed(&c_first),
            names(&bob_clusters, &[2, 1]),
            "{}",
            c_first.dump()
        );
        assert_eq!(
            listed(&c_all),
            names(&bob_clusters, &[2, 1, 0]),
            "{}",
            c_all.dump()
        );
        assert_eq!(
            listed(&t_first),
            names(&bob_templates, &[4, 3]),
            "{}",
            t_first.dump()
        );
        assert_eq!(
            listed(&t_three),
            names(&bob_templates, &[0, 1, 2]),
            "{}",
            t_three.dump()
        );
    };

    // --- admin: pages of quotas by `--limit` and `--marker` (the quota's integer id) ---
    let quota_pages = async {
        let admin = ks.admin_token().await;
        let mut ids = Vec::new();
        for (project, limit) in [("alpha", 10), ("beta", 20), ("service", 30)] {
            let q = api(
                t,
                &admin,
                "POST",
                "/v1/quotas",
                Some(
                    json!({"project_id": ks.project_id(project), "resource": "Cluster",
                            "hard_limit": limit}),
                ),
            )
            .await;
            ids.push(
                q["id"]
                    .as_i64()
                    .unwrap_or_else(|| panic!("no id: {q}"))
                    .to_string(),
            );
        }
        let after_second = [
            "coe",
            "quotas",
            "list",
            "--all-tenants",
            "--marker",
            &ids[1],
            "--limit",
            "5",
            "--sort-key",
            "id",
        ];
        let (first, after_second) = tokio::join!(
            osc.ok(
                "admin",
                "admin",
                &[
                    "coe",
                    "quotas",
                    "list",
                    "--all-tenants",
                    "--limit",
                    "2",
                    "--sort-key",
                    "id"
                ],
            ),
            osc.ok("admin", "admin", &after_second),
        );
        let row = |project: &str, limit: &'static str| {
            vec![
                ks.project_id(project).to_string(),
                "Cluster".into(),
                limit.into(),
            ]
        };
        let header = vec![
            "project_id".to_string(),
            "resource".into(),
            "hard_limit".into(),
        ];
        assert_eq!(
            first.table(),
            [header.clone(), row("alpha", "10"), row("beta", "20")],
            "{}",
            first.dump()
        );
        assert_eq!(
            after_second.table(),
            [header, row("service", "30")],
            "{}",
            after_second.dump()
        );
    };

    tokio::join!(
        nodegroups_resize_upgrade,
        certificates_credentials,
        pages,
        quota_pages
    );

    server.abort();
    drop(app);
    eprintln!("client_magnumclient finished in {:.1?}", t0.elapsed());
}
