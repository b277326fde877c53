//! A delete leaves nothing behind: the load balancers (with their floating IPs) and volumes the
//! workload's cloud-controller-manager and Cinder CSI created are removed with the cluster's own
//! credential — exactly those, never another cluster's — a cleanup that cannot finish fails the
//! delete naming why and resumes on the next delete, and the credentials janitor deletes
//! credentials of clusters that do not exist. Real Keystone, the fake Octavia/Cinder/Neutron/Nova
//! of `common/fakecloud_workload.rs` in its catalog, the simulated management cluster.

use crate::common;

use crate::common::TestApp;
use crate::common::capi::{CapiApp, capi_app_on};
use crate::common::fakecloud::workload::{floating_ip, load_balancer, volume};
use crate::common::fakecloud::*;
use crate::common::keystone::keystone;
use crate::common::stack::{env_exclusive, env_shared, parts};
use crate::common::wait::until;

use serde_json::{Value, json};

const CSI_KEY: &str = "cinder.csi.openstack.org/cluster";

async fn post(t: &TestApp, token: &str, path: &str, body: Value, status: u16) -> Value {
    let r = t
        .call_token(Some(token), "POST", path, Some("latest"), Some(body))
        .await;
    assert_eq!(r.status, status, "{}", r.body);
    r.body
}

/// A template and a cluster from it, `CREATE_COMPLETE`; `(uuid, CAPI name)`.
async fn running_cluster(t: &TestApp, token: &str, name: &str) -> (String, String) {
    running_cluster_with(t, token, name, json!({"kube_tag": "v1.30.4"})).await
}

/// [`running_cluster`] from a template with `labels`.
async fn running_cluster_with(
    t: &TestApp,
    token: &str,
    name: &str,
    labels: Value,
) -> (String, String) {
    let ct = post(
        t,
        token,
        "/v1/clustertemplates",
        json!({"name": format!("{name}-ct"), "image_id": IMAGE_UBUNTU_KUBE, "coe": "kubernetes",
               "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
               "keypair_id": KEYPAIR_DEFAULT, "external_network_id": NETWORK_PUBLIC,
               "labels": labels}),
        201,
    )
    .await;
    let c = post(
        t,
        token,
        "/v1/clusters",
        json!({"name": name, "cluster_template_id": ct["uuid"]}),
        202,
    )
    .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let status = t
        .wait_cluster_token(token, &uuid, "CREATE_COMPLETE")
        .await
        .body;
    assert_eq!(status["status"], "CREATE_COMPLETE");
    (uuid, status["stack_id"].as_str().unwrap().to_string())
}

/// Polls the cluster until its `status_reason` starts with `prefix`; the reason.
async fn wait_reason(t: &TestApp, token: &str, uuid: &str, prefix: &str) -> String {
    let path = format!("/v1/clusters/{uuid}");
    until(&format!("status_reason {prefix:?}"), || async {
        let r = t.call_token(Some(token), "GET", &path, None, None).await;
        let reason = r.body["status_reason"].as_str().unwrap_or_default();
        reason.starts_with(prefix).then(|| reason.to_string())
    })
    .await
}

async fn delete(t: &TestApp, token: &str, uuid: &str) {
    let r = t
        .call_token(
            Some(token),
            "DELETE",
            &format!("/v1/clusters/{uuid}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
}

/// What a workload left in the tenant project: `lbs` Service load balancers (each with a
/// floating IP on its VIP port) and `vols` CSI volumes of cluster `capi`, tagged with `tag` in
/// their ids so tests sharing the fake cloud never see each other's.
fn leave_workload(capi: &str, tag: &str, lbs: usize, vols: usize, project: &str) {
    cloud_of().workload(|w| {
        for i in 0..lbs {
            let id = format!("{tag}-lb-{i}");
            let port = format!("{tag}-vip-{i}");
            w.load_balancers.push(load_balancer(
                &id,
                &format!("kube_service_{capi}_default_svc{i}"),
                &port,
                project,
            ));
            w.floating_ips
                .push(floating_ip(&format!("{tag}-fip-{i}"), &port, project));
        }
        for i in 0..vols {
            w.volumes.push(volume(
                &format!("{tag}-vol-{i}"),
                json!({CSI_KEY: capi, "csi.storage.k8s.io/pvc/name": format!("data-{i}")}),
                None,
                project,
            ));
        }
    });
}

fn cloud_of() -> &'static FakeCloud {
    common::stack::cloud()
}

/// Ids of the fake's load balancers, volumes and floating IPs whose id starts with `tag`.
fn remaining(tag: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    cloud_of().workload(|w| {
        let ids = |items: &[Value]| -> Vec<String> {
            items
                .iter()
                .filter_map(|v| v["id"].as_str())
                .filter(|id| id.starts_with(tag))
                .map(str::to_string)
                .collect()
        };
        (
            ids(&w.load_balancers),
            ids(&w.volumes),
            ids(&w.floating_ips),
        )
    })
}

async fn app(tweak: impl FnOnce(&mut magnum_capi::config::Config)) -> CapiApp {
    capi_app_on(None, None, true, |cfg| {
        cfg.capi.cleanup_poll_secs = 1;
        tweak(cfg);
    })
    .await
}

/// The fake Nova's server groups whose name starts with `prefix`: `(name, policy)`.
fn server_groups(prefix: &str) -> Vec<(String, String)> {
    cloud_of().workload(|w| {
        let mut v: Vec<(String, String)> = w
            .server_groups
            .iter()
            .filter(|g| g["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .map(|g| (g["name"].to_string(), g["policy"].to_string()))
            .collect();
        v.sort();
        v
    })
}

/// `server_group_policies` makes the driver create the Nova server group (with the cluster's
/// credential, before the machines that select it by name) and delete it after the machines;
/// a cluster that did not ask leaves the project's other groups alone.
#[tokio::test]
async fn server_groups_are_created_before_the_machines_and_deleted_after_them() {
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (ks, _) = parts().await;
    let token = ks.token("alice", "alpha").await;
    let labels = json!({"kube_tag": "v1.30.4", "server_group_policies": "soft-anti-affinity"});
    let (uuid, capi) = running_cluster_with(t, &token, "grouped", labels).await;
    let groups = server_groups(&format!("{capi}-"));
    assert!(!groups.is_empty(), "no server group for {capi}");
    assert!(
        groups.iter().all(|(_, p)| p == "\"soft-anti-affinity\""),
        "{groups:?}"
    );
    // Every machine template names one of them.
    let osmts = app
        .sim
        .store()
        .list(
            &magnum_capi::simkube::Resource::of(
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackMachineTemplate",
            ),
            None,
            "",
        )
        .unwrap();
    let named: Vec<String> = osmts
        .iter()
        .filter(|o| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&capi))
        })
        .filter_map(|o| {
            o.pointer("/spec/template/spec/serverGroup/filter/name")
                .map(Value::to_string)
        })
        .collect();
    assert!(!named.is_empty());
    assert!(
        named.iter().all(|n| groups.iter().any(|(g, _)| g == n)),
        "{named:?} vs {groups:?}"
    );
    // A group of the same project the cluster did not create.
    cloud_of().workload(|w| {
        w.server_groups
            .push(json!({"id": "foreign-sg", "name": "foreign-group",
            "policy": "affinity", "rules": {}, "members": [], "project_id": "", "user_id": ""}));
    });
    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(server_groups(&format!("{capi}-")), vec![]);
    assert_eq!(server_groups("foreign-").len(), 1);
}

#[tokio::test]
async fn delete_removes_exactly_the_clusters_load_balancers_and_volumes() {
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (ks, _) = parts().await;
    let token = ks.token("alice", "alpha").await;
    let project = ks.project_id("alpha").to_string();
    let (uuid, capi) = running_cluster(t, &token, "cleaned").await;
    let (_other, other_capi) = running_cluster(t, &token, "neighbour").await;

    leave_workload(&capi, "mine", 3, 5, &project);
    // Another cluster of the same project, and things named like ours but not ours.
    leave_workload(&other_capi, "theirs", 2, 2, &project);
    cloud_of().workload(|w| {
        w.load_balancers.push(load_balancer(
            "alien-lb-0",
            &format!("my_kube_service_{capi}_default_web"),
            "alien-vip-0",
            &project,
        ));
        w.volumes.push(volume(
            "alien-vol-0",
            json!({"cluster": capi}),
            None,
            &project,
        ));
    });

    cloud_of().clear_requests();
    let started = std::time::Instant::now();
    delete(t, &token, &uuid).await;
    // While it works, the status says what it removes.
    let seen = wait_reason(t, &token, &uuid, "deleting ").await;
    assert!(
        seen.starts_with("deleting 3 load balancers, 5 volumes")
            || seen.starts_with("deleting 5 volumes"),
        "{seen}"
    );
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    let took = started.elapsed();
    let requests: Vec<Seen> = cloud_of()
        .requests()
        .into_iter()
        .filter(|r| {
            [
                "/load-balancer",
                "/volume",
                "/networking/v2.0/floatingips",
                "/compute/v2.1/servers",
            ]
            .iter()
            .any(|p| r.path.starts_with(p))
        })
        .collect();
    eprintln!(
        "delete of a cluster with 3 load balancers and 5 volumes: {} cloud requests, {:.1} s",
        requests.len(),
        took.as_secs_f64()
    );

    assert_eq!(remaining("mine"), (vec![], vec![], vec![]));
    let (lbs, vols, fips) = remaining("theirs");
    assert_eq!((lbs.len(), vols.len(), fips.len()), (2, 2, 2));
    assert_eq!(remaining("alien").0, ["alien-lb-0"]);
    assert_eq!(remaining("alien").1, ["alien-vol-0"]);
    // Load balancers went with everything under them, and only with the cluster's credential.
    let lb_deletes: Vec<&Seen> = requests
        .iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/loadbalancers/"))
        .collect();
    assert_eq!(lb_deletes.len(), 3, "{lb_deletes:?}");
    assert!(
        lb_deletes
            .iter()
            .all(|r| r.query.as_deref() == Some("cascade=true"))
    );
    assert!(requests.iter().all(|r| r.token.is_some()));
    assert!(
        requests
            .iter()
            .filter(|r| r.path.starts_with("/volume"))
            .all(|r| r.path.starts_with(&format!("/volume/v3/{project}/"))),
        "Cinder is reached at the catalog's project URL"
    );
    // The neighbour is untouched and still running.
    let r = t
        .call_token(Some(&token), "GET", "/v1/clusters/neighbour", None, None)
        .await;
    assert_eq!(r.body["status"], "CREATE_COMPLETE");
}

#[tokio::test]
async fn octavia_down_fails_the_delete_naming_it_and_a_second_delete_finishes() {
    let _env = env_exclusive().await;
    let app = app(|cfg| {
        cfg.operations.max_attempts = 2;
    })
    .await;
    let t = &app.t;
    let (ks, _) = parts().await;
    let token = ks.token("alice", "alpha").await;
    let project = ks.project_id("alpha").to_string();
    let (uuid, capi) = running_cluster(t, &token, "octavia-down").await;
    leave_workload(&capi, "down", 1, 1, &project);

    cloud_of().workload(|w| w.down.insert("load-balancer".into()));
    delete(t, &token, &uuid).await;
    let failed = t
        .wait_cluster_token(&token, &uuid, "DELETE_FAILED")
        .await
        .body;
    cloud_of().workload(|w| w.down.remove("load-balancer"));
    let reason = failed["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("Octavia") && reason.contains("503"),
        "{reason}"
    );
    assert_eq!(remaining("down").0.len(), 1, "nothing was deleted");

    // Octavia is back: deleting again resumes and finishes.
    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(remaining("down"), (vec![], vec![], vec![]));
}

#[tokio::test]
async fn the_cleanup_waits_for_attached_volumes_and_survives_a_restart() {
    let _env = env_shared().await;
    let app = app(|cfg| cfg.operations.lease_secs = 2).await;
    let (ks, _) = parts().await;
    let token = ks.token("alice", "alpha").await;
    let project = ks.project_id("alpha").to_string();
    let (uuid, capi) = running_cluster(&app.t, &token, "restarted").await;
    leave_workload(&capi, "restart", 0, 1, &project);
    // A volume still attached to a server that exists (say, a VM outside the cluster).
    cloud_of().workload(|w| {
        w.servers
            .push(json!({"id": "restart-server", "name": "vm", "status": "ACTIVE"}));
        w.volumes.push(volume(
            "restart-vol-attached",
            json!({CSI_KEY: capi}),
            Some("restart-server"),
            &project,
        ));
    });
    delete(&app.t, &token, &uuid).await;
    // The detached volume goes; the attached one waits for its server.
    wait_reason(
        &app.t,
        &token,
        &uuid,
        "deleting 1 volume (volume restart-vol-attached is attached to server restart-server)",
    )
    .await;
    assert_eq!(remaining("restart").1, ["restart-vol-attached"]);

    // The service dies mid-way; another one takes the operation over.
    let (url, sim) = app.kill().await;
    let app = capi_app_on(Some(url), Some(sim), true, |cfg| {
        cfg.capi.cleanup_poll_secs = 1;
        cfg.operations.lease_secs = 2;
    })
    .await;
    // The server goes; Nova detaches its volume.
    cloud_of().workload(|w| {
        w.servers.retain(|s| s["id"] != "restart-server");
        for v in w
            .volumes
            .iter_mut()
            .filter(|v| v["id"] == "restart-vol-attached")
        {
            v["attachments"] = json!([]);
            v["status"] = json!("available");
        }
    });
    app.t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(remaining("restart"), (vec![], vec![], vec![]));
}

#[tokio::test]
async fn the_janitor_deletes_credentials_of_clusters_that_do_not_exist_only() {
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let ks = keystone();
    let token = ks.token("alice", "alpha").await;
    let alice = ks.user_id("alice").to_string();
    let (uuid, _) = running_cluster(t, &token, "janitor").await;
    let live_cred: Option<String> =
        sqlx::query_scalar("SELECT app_cred_id FROM cluster WHERE uuid = $1::uuid")
            .bind(&uuid)
            .fetch_one(&t.state.pool)
            .await
            .unwrap();
    let live_cred = live_cred.unwrap();

    // A crash between creating a credential and committing its cluster: the credential exists
    // in Keystone, its intent in Postgres (old), its cluster nowhere.
    let orphan_cluster = uuid::Uuid::new_v4();
    let (status, body) = ks
        .request(
            "POST",
            &format!("/users/{alice}/application_credentials"),
            Some(&token),
            None,
            Some(json!({"application_credential": {
                "name": format!("magnum-{orphan_cluster}-0badc0de")}})),
        )
        .await
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let orphan = body["application_credential"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    sqlx::query(
        "INSERT INTO app_credential_intent (cluster_uuid, user_id, created_at)
         VALUES ($1, $2, now() - interval '1 hour')",
    )
    .bind(orphan_cluster)
    .bind(&alice)
    .execute(&t.state.pool)
    .await
    .unwrap();
    // A credential that merely looks like ours is someone else's business.
    let (status, _) = ks
        .request(
            "POST",
            &format!("/users/{alice}/application_credentials"),
            Some(&token),
            None,
            Some(json!({"application_credential": {"name": "magnum-not-a-cluster"}})),
        )
        .await
        .unwrap();
    assert_eq!(status, 201);

    let list = || async {
        let (status, body) = ks
            .request(
                "GET",
                &format!("/users/{alice}/application_credentials"),
                Some(&token),
                None,
                None,
            )
            .await
            .unwrap();
        assert_eq!(status, 200);
        body
    };
    // The sweep (this call, or the periodic one if it got the janitor's lock first).
    until("the orphan to be swept", || async {
        let _ = magnum_capi::maintenance::sweep_orphan_credentials(&t.state.pool, &app.capi).await;
        let body = list().await;
        (!body.to_string().contains(&orphan)).then_some(())
    })
    .await;
    let body = list().await;
    let ids: Vec<&str> = body["application_credentials"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    let names: Vec<&str> = body["application_credentials"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(!ids.contains(&orphan.as_str()), "the orphan is gone");
    assert!(
        ids.contains(&live_cred.as_str()),
        "the live cluster's stays"
    );
    assert!(names.contains(&"magnum-not-a-cluster"));
    let intents: i64 =
        sqlx::query_scalar("SELECT count(*) FROM app_credential_intent WHERE cluster_uuid = $1")
            .bind(orphan_cluster)
            .fetch_one(&t.state.pool)
            .await
            .unwrap();
    assert_eq!(intents, 0, "the intent is done with");
    assert!(app.capi.orphans_deleted() >= 1);
}
