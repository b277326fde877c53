//! The real python client — `openstack coe …` from python-openstackclient 10.5.0 with the
//! python-magnumclient 5.0.0 plugin, out of the Keystone virtualenv — against the service served
//! on a loopback port, with real Keystone tokens and the catalog's `container-infra` endpoint.
//! Assertions are on what the client prints (`-f json` where the command has it, its tables
//! otherwise, its messages and exit status).
//!
//! The catalog has one `container-infra` endpoint per Keystone, so the whole file is one test
//! on one service instance. Each `openstack` invocation costs a few seconds (Python start-up,
//! a password token, Keystone validating that token for the service), so commands that do not
//! depend on each other run concurrently: the admin's and the negative cases beside alice's
//! template/cluster life cycle, and within it e.g. `template list` beside `template update`.

use crate::common::pick;

use std::time::Instant;

use crate::common::osc::Osc;
use crate::common::stack::{env_shared, keystone_app, parts, serve_as_endpoint};
use crate::common::wait::until;
use serde_json::json;

/// The host the test's heartbeat registers `magnum-conductor` under.
const HOST: &str = "osc-test-host";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstack_coe_commands_work_against_the_service() {
    let t0 = Instant::now();
    let _env = env_shared().await;
    let (ks, _) = parts().await;
    let app = keystone_app(|_| {}).await;
    // `magnum-capi serve` registers the replica as magnum-conductor; so does this test.
    let (hb_stop, hb_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(magnum_capi::worker::heartbeat(
        app.state.clone(),
        HOST.into(),
        hb_rx,
    ));
    let server = serve_as_endpoint(&app.state).await;
    let alpha = ks.project_id("alpha").to_string();
    let beta = ks.project_id("beta").to_string();
    let osc = Osc::new(ks);
    eprintln!("setup done in {:.1?}", t0.elapsed());

    // --- template create (alice) ---
    let out = osc
        .ok(
            "alice",
            "alpha",
            &[
                "coe",
                "cluster",
                "template",
                "create",
                "k8s",
                "--coe",
                "kubernetes",
                "--image",
                "flatcar-4152",
                "--external-network",
                "public",
                "--flavor",
                "m1.small",
                "--master-flavor",
                "m1.medium",
                "--keypair",
                "default",
                "--network-driver",
                "calico",
                "--docker-volume-size",
                "10",
                "--labels",
                "kube_tag=v1.30.4,foo=bar",
                "-f",
                "json",
            ],
        )
        .await;
    assert!(
        out.stdout
            .starts_with("Request to create cluster template k8s accepted\n"),
        "{}",
        out.dump()
    );
    let ct = out.json();
    let ct_uuid = ct["uuid"].as_str().unwrap().to_string();
    uuid::Uuid::parse_str(&ct_uuid).unwrap();
    assert_eq!(
        pick(
            &ct,
            &[
                "name",
                "coe",
                "image_id",
                "external_network_id",
                "flavor_id",
                "master_flavor_id",
                "keypair_id",
                "network_driver",
                "docker_volume_size",
                "labels",
                "cluster_distro",
                "project_id",
                "public",
                "hidden",
                "server_type",
                "tls_disabled",
                "updated_at",
                "fixed_network",
            ]
        ),
        json!({
            "name": "k8s", "coe": "kubernetes", "image_id": "flatcar-4152",
            "external_network_id": "public", "flavor_id": "m1.small",
            "master_flavor_id": "m1.medium", "keypair_id": "default", "network_driver": "calico",
            "docker_volume_size": 10, "labels": {"kube_tag": "v1.30.4", "foo": "bar"},
            // From the image's os_distro in (fake) Glance.
            "cluster_distro": "flatcar",
            "project_id": alpha, "public": false, "hidden": false, "server_type": "vm",
            "tls_disabled": false,
            // The client shows unset fields as "-".
            "updated_at": "-", "fixed_network": "-",
        }),
        "{}",
        out.dump()
    );

    // Other users and the admin, concurrently with alice's cluster life cycle.
    let negatives = async {
        let out = osc
            .fails(
                "rita",
                "alpha",
                &[
                    "coe",
                    "cluster",
                    "create",
                    "r1",
                    "--cluster-template",
                    "k8s",
                    "--keypair",
                    "default",
                ],
            )
            .await;
        out.stderr_has("Policy doesn't allow cluster:create to be performed")
            .stderr_has("(HTTP 403)");
        let out = osc
            .fails(
                "alice",
                "alpha",
                &[
                    "coe",
                    "cluster",
                    "template",
                    "create",
                    "bad",
                    "--coe",
                    "kubernetes",
                    "--image",
                    "no-such",
                    "--external-network",
                    "public",
                    "-f",
                    "json",
                ],
            )
            .await;
        out.stderr_has("Image no-such could not be found (HTTP 400)");
    };

    let admin = async {
        let out = osc
            .ok(
                "admin",
                "admin",
                &[
                    "coe",
                    "quota",
                    "create",
                    "--project-id",
                    &beta,
                    "--resource",
                    "Cluster",
                    "--hard-limit",
                    "5",
                ],
            )
            .await;
        // The client prints failures of this command on stdout and exits 0.
        assert!(!out.stdout.contains("failed"), "{}", out.dump());
        let q = out.properties();
        assert_eq!(
            pick(&q, &["project_id", "resource", "hard_limit", "updated_at"]),
            json!({"project_id": beta, "resource": "Cluster", "hard_limit": "5",
                   "updated_at": "-"}),
            "{}",
            out.dump()
        );
        assert!(q["id"].as_str().unwrap().parse::<i64>().is_ok(), "{q}");

        let out = osc
            .ok("admin", "admin", &["coe", "quota", "list", "--all-tenants"])
            .await;
        assert_eq!(
            out.table(),
            vec![
                vec!["project_id", "resource", "hard_limit"],
                vec![beta.as_str(), "Cluster", "5"],
            ],
            "{}",
            out.dump()
        );

        let out = osc
            .ok(
                "admin",
                "admin",
                &[
                    "coe",
                    "quota",
                    "show",
                    "--project-id",
                    &beta,
                    "--resource",
                    "Cluster",
                ],
            )
            .await;
        assert_eq!(out.properties(), q, "{}", out.dump());

        let out = osc
            .ok("admin", "admin", &["coe", "service", "list", "-f", "json"])
            .await;
        let services = out.json();
        let services = services.as_array().unwrap();
        assert_eq!(services.len(), 1, "{}", out.dump());
        assert_eq!(
            pick(
                &services[0],
                &["host", "binary", "state", "disabled", "disabled_reason"]
            ),
            json!({"host": HOST, "binary": "magnum-conductor", "state": "up",
                   "disabled": false, "disabled_reason": null}),
            "{}",
            out.dump()
        );
        assert!(services[0]["id"].is_i64(), "{}", out.dump());
    };

    let lifecycle = async {
        // --- template list ∥ update, then show ∥ cluster create ---
        let list_templates = async {
            let out = osc
                .ok(
                    "alice",
                    "alpha",
                    &["coe", "cluster", "template", "list", "-f", "json"],
                )
                .await;
            assert_eq!(
                out.json(),
                json!([{"uuid": ct_uuid, "name": "k8s", "tags": null}]),
                "{}",
                out.dump()
            );
        };
        let update = osc.ok(
            "alice",
            "alpha",
            &[
                "coe",
                "cluster",
                "template",
                "update",
                "k8s",
                "--label",
                "kube_tag=v1.31.1",
                "--no-label",
                "foo",
                "--docker-volume-size",
                "20",
                "-f",
                "json",
            ],
        );
        let ((), out) = tokio::join!(list_templates, update);
        let updated = out.json();
        assert_eq!(
            pick(&updated, &["uuid", "labels", "docker_volume_size"]),
            json!({"uuid": ct_uuid, "labels": {"kube_tag": "v1.31.1"}, "docker_volume_size": 20}),
            "{}",
            out.dump()
        );
        assert_ne!(updated["updated_at"], "-", "{}", out.dump());

        let show_template = async {
            let out = osc
                .ok(
                    "alice",
                    "alpha",
                    &["coe", "cluster", "template", "show", &ct_uuid, "-f", "json"],
                )
                .await;
            assert_eq!(out.json(), updated, "{}", out.dump());
        };
        let create = osc.ok(
            "alice",
            "alpha",
            &[
                "coe",
                "cluster",
                "create",
                "c1",
                "--cluster-template",
                "k8s",
                "--node-count",
                "1",
                "--master-count",
                "1",
                "--keypair",
                "default",
            ],
        );
        let ((), out) = tokio::join!(show_template, create);
        let c_uuid = out.accepted_uuid("cluster");

        // --- cluster list ∥ show (until CREATE_COMPLETE) ---
        let list_clusters = async {
            let out = osc
                .ok("alice", "alpha", &["coe", "cluster", "list", "-f", "json"])
                .await;
            let list = out.json();
            assert_eq!(list.as_array().map(Vec::len), Some(1), "{}", out.dump());
            assert_eq!(
                pick(
                    &list[0],
                    &["uuid", "name", "keypair", "node_count", "master_count"]
                ),
                json!({"uuid": c_uuid, "name": "c1", "keypair": "default", "node_count": 1,
                   "master_count": 1}),
                "{}",
                out.dump()
            );
            let status = list[0]["status"].as_str().unwrap_or_default();
            assert!(
                ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"].contains(&status),
                "{}",
                out.dump()
            );
        };

        let show = |c: &'static str| {
            let osc = &osc;
            async move {
                let out = osc
                    .ok(
                        "alice",
                        "alpha",
                        &["coe", "cluster", "show", c, "-f", "json"],
                    )
                    .await;
                let v = out.json();
                (out, v)
            }
        };
        let poll = until("cluster c1 to reach CREATE_COMPLETE", || async {
            let (out, v) = show("c1").await;
            if v["status"] == "CREATE_COMPLETE" {
                return Some((out, v));
            }
            assert_eq!(v["status"], "CREATE_IN_PROGRESS", "{}", out.dump());
            None
        });
        let ((), (out, c)) = tokio::join!(list_clusters, poll);
        assert_eq!(
            pick(
                &c,
                &[
                    "uuid",
                    "name",
                    "cluster_template_id",
                    "project_id",
                    "keypair",
                    "node_count",
                    "master_count",
                    "flavor_id",
                    "master_flavor_id",
                    "docker_volume_size",
                    "labels",
                    "create_timeout",
                    "status_reason",
                ]
            ),
            json!({
                "uuid": c_uuid, "name": "c1", "cluster_template_id": ct_uuid,
                "project_id": alpha, "keypair": "default", "node_count": 1, "master_count": 1,
                // Inherited from the (updated) template.
                "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                "docker_volume_size": 20, "labels": {"kube_tag": "v1.31.1"},
                "create_timeout": 60, "status_reason": null,
            }),
            "{}",
            out.dump()
        );
        assert!(
            c["api_address"]
                .as_str()
                .is_some_and(|a| a.starts_with("https://")),
            "{}",
            out.dump()
        );

        // --- cluster update: python-magnumclient 5.0.0's options. As in Magnum 23, only
        // node_count may change (`validation.validate_cluster_properties`): a new master count
        // or labels are a 400 naming the property, and nothing changes.
        for (args, property) in [
            (&["--master-count", "3"][..], "master_count"),
            (&["--label", "auto_healing_enabled=true"][..], "labels"),
            (&["--no-label", "kube_tag"][..], "labels"),
        ] {
            let mut cmd = vec!["coe", "cluster", "update", "c1"];
            cmd.extend_from_slice(args);
            let out = osc.fails("alice", "alpha", &cmd).await;
            // The client drops the message's final period.
            out.stderr_has(&format!(
                "cannot change cluster property(ies) {property} (HTTP 400)"
            ));
        }
        let out = osc
            .ok(
                "alice",
                "alpha",
                &["coe", "cluster", "update", "c1", "--node-count", "2"],
            )
            .await;
        assert_eq!(
            out.stdout.trim(),
            "Request to update cluster c1 has been accepted.",
            "{}",
            out.dump()
        );
        let (out, c) = until("cluster c1 to reach UPDATE_COMPLETE", || async {
            let (out, v) = show("c1").await;
            if v["status"] == "UPDATE_COMPLETE" {
                return Some((out, v));
            }
            assert_eq!(v["status"], "UPDATE_IN_PROGRESS", "{}", out.dump());
            None
        })
        .await;
        assert_eq!(
            pick(&c, &["node_count", "master_count"]),
            json!({"node_count": 2, "master_count": 1}),
            "{}",
            out.dump()
        );

        // --- stats: one cluster, 1 master + 2 workers ---
        let out = osc
            .ok("alice", "alpha", &["coe", "stats", "list", &alpha])
            .await;
        assert_eq!(
            out.properties(),
            json!({"clusters": "1", "nodes": "3"}),
            "{}",
            out.dump()
        );

        // --- cluster delete ---
        let out = osc
            .ok("alice", "alpha", &["coe", "cluster", "delete", "c1"])
            .await;
        assert_eq!(
            out.stdout.trim(),
            "Request to delete cluster c1 has been accepted.",
            "{}",
            out.dump()
        );
        until("cluster c1 to go away", || async {
            let out = osc
                .ok("alice", "alpha", &["coe", "cluster", "list", "-f", "json"])
                .await;
            let list = out.json();
            if list == json!([]) {
                return Some(());
            }
            assert_eq!(list[0]["status"], "DELETE_IN_PROGRESS", "{}", out.dump());
            None
        })
        .await;
        osc.fails("alice", "alpha", &["coe", "cluster", "show", "c1"])
            .await
            .stderr_has("Cluster c1 could not be found (HTTP 404)");

        // --- template delete ---
        let out = osc
            .ok(
                "alice",
                "alpha",
                &["coe", "cluster", "template", "delete", "k8s"],
            )
            .await;
        // The client reports failures of this command on stdout and exits 0.
        assert_eq!(
            out.stdout.trim(),
            "Request to delete cluster template k8s has been accepted.",
            "{}",
            out.dump()
        );
        let out = osc
            .ok(
                "alice",
                "alpha",
                &["coe", "cluster", "template", "list", "-f", "json"],
            )
            .await;
        assert_eq!(out.json(), json!([]), "{}", out.dump());
    };

    tokio::join!(lifecycle, admin, negatives);

    let _ = hb_stop.send(true);
    server.abort();
    drop(app);
    eprintln!("client_osc finished in {:.1?}", t0.elapsed());
}
