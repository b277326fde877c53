//! A delete leaves nothing behind and destroys nothing the tenant keeps: the load balancers
//! (with their floating IPs) and volumes the workload's cloud-controller-manager and Cinder CSI
//! created are removed with the cluster's own credential — exactly those, never another
//! cluster's, never a load balancer they only attached to, a volume no PersistentVolume says
//! `Delete` for, or a floating IP its Service keeps — a cleanup that cannot finish fails the
//! delete naming why and resumes on the next delete, and the credentials janitor deletes
//! credentials of clusters that do not exist. Real Keystone, the fake Octavia/Cinder/Neutron/Nova
//! of `common/fakecloud_workload.rs` in its catalog, the simulated management cluster and its
//! workload clusters.

use crate::common;

use crate::common::TestApp;
use crate::common::capi::{CapiApp, capi_app_on};
use crate::common::fakecloud::workload::{self, floating_ip, load_balancer, volume};
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
pub(crate) async fn running_cluster_with(
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

/// Alice's running cluster `name` with what its workload left (`lbs` load balancers, `vols`
/// volumes, ids tagged `tag`): `(token, project, uuid, CAPI name)`.
async fn alices_cluster(
    app: &CapiApp,
    name: &str,
    tag: &str,
    lbs: usize,
    vols: usize,
) -> (String, String, String, String) {
    let (ks, _) = parts().await;
    let token = ks.token("alice", "alpha").await;
    let project = ks.project_id("alpha").to_string();
    let (uuid, capi) = running_cluster(&app.t, &token, name).await;
    leave_workload(app, &capi, tag, lbs, vols, &project);
    (token, project, uuid, capi)
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

pub(crate) async fn delete(t: &TestApp, token: &str, uuid: &str) {
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

/// What a workload left in the tenant project: `lbs` Service load balancers (`default/svc<i>`,
/// each with OCCM's floating IP on its VIP port) and `vols` CSI volumes of cluster `capi`, each
/// with its `Delete` PersistentVolume `pvc-<i>` in the workload cluster; tagged with `tag` in
/// their ids so tests sharing the fake cloud never see each other's.
fn leave_workload(app: &CapiApp, capi: &str, tag: &str, lbs: usize, vols: usize, project: &str) {
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
            w.floating_ips.push(floating_ip(
                &format!("{tag}-fip-{i}"),
                &port,
                project,
                capi,
                &format!("default/svc{i}"),
            ));
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
    for i in 0..vols {
        in_workload(
            app,
            project,
            capi,
            pv(&format!("pvc-{i}"), &format!("{tag}-vol-{i}"), "Delete"),
        );
    }
}

/// Writes `object` (a PersistentVolume, a Service) into cluster `capi`'s workload cluster.
fn in_workload(app: &CapiApp, project: &str, capi: &str, object: Value) {
    let store = app
        .sim
        .workload_store(&format!("magnum-{project}"), capi)
        .expect("the workload cluster");
    let resource = magnum_capi::simkube::Resource::of(
        object["apiVersion"].as_str().unwrap_or("v1"),
        object["kind"].as_str().unwrap_or_default(),
    );
    store.put(&resource, object).unwrap();
}

/// A CSI volume `<tag>-vol-held` of cluster `capi` (its PersistentVolume `pvc-held` says
/// `Delete`) attached to server `<tag>-server`, which exists (a VM outside the cluster): it
/// holds the delete open until [`let_go`].
fn held_volume(app: &CapiApp, project: &str, capi: &str, tag: &str) {
    let (server, id) = (format!("{tag}-server"), format!("{tag}-vol-held"));
    cloud_of().workload(|w| {
        w.servers
            .push(json!({"id": server, "name": "vm", "status": "ACTIVE"}));
        w.volumes
            .push(volume(&id, json!({CSI_KEY: capi}), Some(&server), project));
    });
    in_workload(app, project, capi, pv("pvc-held", &id, "Delete"));
}

/// Server `<tag>-server` goes; Nova detaches its volume `<tag>-vol-held`.
fn let_go(tag: &str) {
    let (server, id) = (format!("{tag}-server"), format!("{tag}-vol-held"));
    cloud_of().workload(|w| {
        w.servers.retain(|s| s["id"] != server.as_str());
        for v in w.volumes.iter_mut().filter(|v| v["id"] == id.as_str()) {
            v["attachments"] = json!([]);
            v["status"] = json!("available");
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

    leave_workload(&app, &capi, "mine", 3, 5, &project);
    // Another cluster of the same project, and things named like ours but not ours.
    leave_workload(&app, &other_capi, "theirs", 2, 2, &project);
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

/// A service that is in the catalog but failing is retried until the delete's deadline, the
/// reason naming it; once it answers again the delete finishes.
#[tokio::test]
async fn octavia_down_is_retried_naming_it_and_the_delete_finishes_when_it_is_back() {
    let _env = env_exclusive().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (token, _, uuid, _) = alices_cluster(&app, "octavia-down", "down", 1, 1).await;

    cloud_of().workload(|w| w.down.insert("load-balancer".into()));
    delete(t, &token, &uuid).await;
    let reason = wait_reason(t, &token, &uuid, "retrying the cleanup: ").await;
    assert!(
        reason.contains("Octavia") && reason.contains("503"),
        "{reason}"
    );
    assert_eq!(remaining("down").0.len(), 1, "nothing was deleted");
    let r = t
        .call_token(
            Some(&token),
            "GET",
            &format!("/v1/clusters/{uuid}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.body["status"], "DELETE_IN_PROGRESS");

    // Octavia is back: the same delete goes on and finishes.
    cloud_of().workload(|w| w.down.remove("load-balancer"));
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(remaining("down"), (vec![], vec![], vec![]));
}

#[tokio::test]
async fn the_cleanup_waits_for_attached_volumes_and_survives_a_restart() {
    let _env = env_shared().await;
    let app = app(|cfg| cfg.operations.lease_secs = 2).await;
    let (token, project, uuid, capi) = alices_cluster(&app, "restarted", "restart", 0, 1).await;
    held_volume(&app, &project, &capi, "restart");
    delete(&app.t, &token, &uuid).await;
    // The detached volume goes; the attached one waits for its server.
    wait_reason(
        &app.t,
        &token,
        &uuid,
        "deleting 1 volume (volume restart-vol-held is attached to server restart-server)",
    )
    .await;
    assert_eq!(remaining("restart").1, ["restart-vol-held"]);

    // The service dies mid-way; another one takes the operation over.
    let (url, sim) = app.kill().await;
    let app = capi_app_on(Some(url), Some(sim), true, |cfg| {
        cfg.capi.cleanup_poll_secs = 1;
        cfg.operations.lease_secs = 2;
    })
    .await;
    let_go("restart");
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

// ---- the delete rules of issue 24: what a delete deletes, keeps and says it did not check ----

/// The report a finished delete left on the management cluster (`<capi>-delete-report`):
/// `(kept, not checked)` lines; `None` when it kept and skipped nothing.
fn delete_report(app: &CapiApp, uuid: &str) -> Option<(Vec<String>, Vec<String>)> {
    let cms = app
        .sim
        .store()
        .list(
            &magnum_capi::simkube::Resource::of("v1", "ConfigMap"),
            None,
            &format!("magnum.openstack.org/deleted-cluster-uuid={uuid}"),
        )
        .unwrap();
    let cm = cms.first()?;
    let lines = |k: &str| -> Vec<String> {
        cm["data"][k]
            .as_str()
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    Some((lines("kept"), lines("not-checked")))
}

/// Serialises [`region_with`] within the process.
static REGIONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Region `region` in the test Keystone with a copy of RegionOne's public endpoints of the
/// service `types` only (a cloud without the other services, for a service configured with
/// `region_name = region`). Created once; later calls find it.
async fn region_with(region: &str, types: &[&str]) {
    let _serial = REGIONS.lock().await;
    let (ks, _) = parts().await;
    if !ks.ensure_region(region).await {
        return;
    }
    let services = ks.admin("GET", "/services", None).await;
    let one = crate::common::keystone::REGION;
    let endpoints = ks
        .admin(
            "GET",
            &format!("/endpoints?interface=public&region_id={one}"),
            None,
        )
        .await;
    for service in services["services"].as_array().into_iter().flatten() {
        if !types.iter().any(|t| service["type"] == *t) {
            continue;
        }
        for e in endpoints["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["service_id"] == service["id"])
        {
            let body = json!({"endpoint": {"service_id": service["id"], "interface": "public",
                "region_id": region, "url": e["url"]}});
            ks.admin("POST", "/endpoints", Some(body)).await;
        }
    }
}

/// An app whose catalog is region `region`: RegionOne's services of `types` only.
async fn app_in_region(region: &str, types: &[&str]) -> CapiApp {
    region_with(region, types).await;
    let region = region.to_string();
    app(move |cfg| cfg.keystone.region_name = Some(region)).await
}

/// Deletes Alice's cluster `name` (one load balancer and two volumes left, ids tagged `tag`) on
/// an app whose catalog has only the services `types` (region `region`); once it is gone, what
/// is left of the workload (load balancers, volumes) and what the delete did not check.
async fn delete_with_catalog_of(
    region: &str,
    types: &[&str],
    name: &str,
    tag: &str,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let app = app_in_region(region, types).await;
    let t = &app.t;
    let (token, _, uuid, _) = alices_cluster(&app, name, tag, 1, 2).await;
    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    let (lbs, vols, fips) = remaining(tag);
    assert_eq!(fips, Vec::<String>::new(), "OCCM's floating IP went");
    let (kept, not_checked) = delete_report(&app, &uuid).expect("a delete report");
    assert_eq!(kept, Vec::<String>::new());
    (lbs, vols, not_checked)
}

#[tokio::test]
async fn a_catalog_without_load_balancer_deletes_the_rest_and_says_what_it_did_not_check() {
    let _env = env_shared().await;
    let types = ["identity", "image", "compute", "network", "block-storage"];
    let (lbs, vols, not_checked) =
        delete_with_catalog_of("RegionNoOctavia", &types, "no-octavia", "nooctavia").await;
    assert_eq!(lbs, ["nooctavia-lb-0"], "no Octavia to ask: untouched");
    assert_eq!(vols, Vec::<String>::new(), "the volumes went");
    assert_eq!(
        not_checked,
        ["load balancers (no load-balancer service in the catalog)"]
    );
}

#[tokio::test]
async fn a_catalog_without_block_storage_deletes_the_rest_and_says_what_it_did_not_check() {
    let _env = env_shared().await;
    let types = ["identity", "image", "compute", "network", "load-balancer"];
    let (lbs, vols, not_checked) =
        delete_with_catalog_of("RegionNoCinder", &types, "no-cinder", "nocinder").await;
    assert_eq!(lbs, Vec::<String>::new(), "the load balancer went");
    assert_eq!(vols, ["nocinder-vol-0", "nocinder-vol-1"], "untouched");
    assert_eq!(
        not_checked,
        ["volumes (no block-storage service in the catalog)"]
    );
}

#[tokio::test]
async fn neutron_without_floating_ips_deletes_the_rest_and_says_what_it_did_not_check() {
    let _env = env_exclusive().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (token, _, uuid, _) = alices_cluster(&app, "no-l3", "nol3", 1, 1).await;

    cloud_of().workload(|w| w.missing.insert("floatingips".into()));
    delete(t, &token, &uuid).await;
    let gone = t.wait_cluster_token(&token, &uuid, "GONE").await;
    cloud_of().workload(|w| w.missing.remove("floatingips"));
    assert_eq!(gone.status, 404);
    let (lbs, vols, _) = remaining("nol3");
    assert_eq!((lbs.len(), vols.len()), (0, 0));
    let (_, not_checked) = delete_report(&app, &uuid).expect("a delete report");
    assert_eq!(not_checked, ["floating IPs (Neutron has no L3 extension)"]);
}

/// A PersistentVolume as the workload's Cinder CSI writes it, for volume `handle`.
fn pv(name: &str, handle: &str, policy: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": policy, "storageClassName": "csi-cinder-sc-retain",
            "csi": {"driver": "cinder.csi.openstack.org", "volumeHandle": handle, "fsType": "ext4"}},
        "status": {"phase": "Bound"}})
}

/// Writes into cluster `capi`'s workload cluster the PersistentVolumes of volumes `<tag>-vol-0`
/// (`Retain`) and `<tag>-vol-1` (`Delete`).
fn retain_first_of_two(app: &CapiApp, project: &str, capi: &str, tag: &str) {
    for (i, policy) in ["Retain", "Delete"].iter().enumerate() {
        let volume = format!("{tag}-vol-{i}");
        in_workload(app, project, capi, pv(&format!("pvc-{i}"), &volume, policy));
    }
}

#[tokio::test]
async fn retained_and_marked_volumes_survive_the_delete_and_are_reported() {
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (token, project, uuid, capi) = alices_cluster(&app, "retained", "retain", 0, 3).await;
    cloud_of().workload(|w| {
        if let Some(v) = w.volumes.iter_mut().find(|v| v["id"] == "retain-vol-2") {
            v["metadata"]["magnum-capi/keep"] = json!("true");
        }
    });
    // vol-0's PersistentVolume is Retain, vol-1's Delete.
    retain_first_of_two(&app, &project, &capi, "retain");

    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(remaining("retain").1, ["retain-vol-0", "retain-vol-2"]);
    let (kept, not_checked) = delete_report(&app, &uuid).expect("a delete report");
    assert_eq!(
        kept,
        [
            "volume retain-vol-0 (its PersistentVolume's reclaimPolicy is Retain)",
            "volume retain-vol-2 (metadata magnum-capi/keep=true)"
        ]
    );
    assert_eq!(not_checked, Vec::<String>::new());

    // The report stays `[capi] delete_report_retention_days` (30) after the delete; the
    // maintenance pass that runs later than that removes it.
    let now = chrono::Utc::now();
    let expire = |days| {
        app.capi
            .expire_delete_reports(now + chrono::Duration::days(days))
    };
    assert_eq!(expire(29).await.unwrap(), 0);
    assert!(
        delete_report(&app, &uuid).is_some(),
        "kept within its retention"
    );
    assert_eq!(expire(31).await.unwrap(), 1);
    assert!(delete_report(&app, &uuid).is_none(), "removed after it");
}

#[tokio::test]
async fn a_volumes_csi_snapshots_go_first_and_a_hand_made_snapshot_keeps_it() {
    use crate::common::fakecloud::workload::snapshot;
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (token, project, uuid, capi) = alices_cluster(&app, "snapshotted", "snap", 0, 2).await;
    cloud_of().workload(|w| {
        w.snapshots.push(snapshot(
            "snap-csi-0",
            "snap-vol-0",
            json!({CSI_KEY: capi}),
            &project,
        ));
        w.snapshots.push(snapshot(
            "snap-csi-1",
            "snap-vol-0",
            json!({CSI_KEY: capi}),
            &project,
        ));
        w.snapshots
            .push(snapshot("snap-hand-0", "snap-vol-1", json!({}), &project));
    });

    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(remaining("snap").1, ["snap-vol-1"]);
    let snapshots: Vec<String> = cloud_of().workload(|w| {
        w.snapshots
            .iter()
            .filter_map(|s| s["id"].as_str())
            .filter(|id| id.starts_with("snap-"))
            .map(str::to_string)
            .collect()
    });
    assert_eq!(snapshots, ["snap-hand-0"]);
    let (kept, _) = delete_report(&app, &uuid).expect("a delete report");
    assert_eq!(
        kept,
        ["volume snap-vol-1 (it has snapshot snap-hand-0 not made by the cluster's Cinder CSI)"]
    );
}

#[tokio::test]
async fn a_volume_stuck_deleting_is_waited_for_and_the_delete_completes_when_it_goes() {
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (token, _, uuid, _) = alices_cluster(&app, "stuck", "stuck", 0, 1).await;
    cloud_of().workload(|w| {
        w.stuck.insert("stuck-vol-0".into());
        if let Some(v) = w.volumes.iter_mut().find(|v| v["id"] == "stuck-vol-0") {
            v["status"] = json!("deleting");
        }
    });

    delete(t, &token, &uuid).await;
    wait_reason(
        t,
        &token,
        &uuid,
        "deleting 1 volume (volume stuck-vol-0 is deleting)",
    )
    .await;
    // Cinder finishes.
    cloud_of().workload(|w| w.stuck.remove("stuck-vol-0"));
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(remaining("stuck").1, Vec::<String>::new());
}

#[tokio::test]
async fn the_clusters_load_balancers_on_a_later_page_are_found() {
    let _env = env_exclusive().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (ks, _) = parts().await;
    let token = ks.token("alice", "alpha").await;
    let project = ks.project_id("alpha").to_string();
    let (uuid, capi) = running_cluster(t, &token, "paged").await;
    // Three load balancers of someone else first, then the cluster's two: with two a page,
    // the cluster's are on pages two and three.
    cloud_of().workload(|w| {
        for i in 0..3 {
            w.load_balancers.insert(
                0,
                load_balancer(
                    &format!("pagefirst-lb-{i}"),
                    &format!("other-{i}"),
                    &format!("pagefirst-vip-{i}"),
                    &project,
                ),
            );
        }
        w.page_size = Some(2);
    });
    leave_workload(&app, &capi, "paged", 2, 3, &project);
    cloud_of().clear_requests();

    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    cloud_of().workload(|w| w.page_size = None);
    assert_eq!(remaining("paged"), (vec![], vec![], vec![]));
    assert_eq!(remaining("pagefirst").0.len(), 3);
    let pages: Vec<Seen> = cloud_of()
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/lbaas/loadbalancers"))
        .collect();
    assert!(
        pages.iter().all(|r| r
            .query
            .as_deref()
            .is_some_and(|q| q.contains(&format!("project_id={project}")))),
        "filtered by project: {pages:?}"
    );
    assert!(
        pages
            .iter()
            .any(|r| r.query.as_deref().is_some_and(|q| q.contains("marker="))),
        "followed the next links: {pages:?}"
    );
}

#[tokio::test]
async fn a_tenants_floating_ip_is_disassociated_and_kept_occms_own_and_its_security_groups_go() {
    use crate::common::fakecloud::workload::{floating_ip_described, security_group};
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (ks, _) = parts().await;
    let token = ks.token("alice", "alpha").await;
    let project = ks.project_id("alpha").to_string();
    let (uuid, capi) = running_cluster(t, &token, "fips").await;
    // Two Services: OCCM allocated svc0's floating IP; svc1 was given one the tenant had
    // (`loadBalancerIP`), so OCCM only associated it.
    leave_workload(&app, &capi, "fips", 2, 0, &project);
    cloud_of().workload(|w| {
        w.floating_ips.retain(|f| f["id"] != "fips-fip-1");
        w.floating_ips.push(floating_ip_described(
            "fips-tenant",
            "fips-vip-1",
            &project,
            "reserved for the shop",
        ));
        // An OCCM floating IP whose load balancer is gone already.
        w.floating_ips.push(floating_ip(
            "fips-orphan",
            "",
            &project,
            &capi,
            "default/gone",
        ));
        w.security_groups.push(security_group(
            "fips-sg-occm",
            "lb-sg-1234-default-svc0",
            &format!("Security Group for default/svc0 Service LoadBalancer in cluster {capi}"),
            &project,
        ));
        w.security_groups.push(security_group(
            "fips-sg-tenant",
            "web",
            "Security Group for default/svc0 Service LoadBalancer in cluster someone-else",
            &project,
        ));
    });

    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    let (lbs, _, fips) = remaining("fips");
    assert_eq!(lbs, Vec::<String>::new());
    assert_eq!(fips, ["fips-tenant"]);
    let tenant = stored(|w| &w.floating_ips, "fips-tenant");
    assert_eq!(tenant["port_id"], Value::Null, "disassociated");
    let groups: Vec<String> = cloud_of().workload(|w| {
        w.security_groups
            .iter()
            .filter_map(|g| g["id"].as_str())
            .filter(|id| id.starts_with("fips-"))
            .map(str::to_string)
            .collect()
    });
    assert_eq!(groups, ["fips-sg-tenant"]);
    let (kept, _) = delete_report(&app, &uuid).expect("a delete report");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0].starts_with("floating IP 172.24.4.50 (fips-tenant; not allocated by the cluster"),
        "{kept:?}"
    );
}

/// Deletes the cluster's credential Secret from the management cluster; the Secret, to put back.
fn remove_credential_secret(app: &CapiApp, project: &str, capi: &str) -> Value {
    let secrets = magnum_capi::simkube::Resource::of("v1", "Secret");
    let ns = format!("magnum-{project}");
    let name = format!("{capi}-cloud-credentials");
    let gone = app
        .sim
        .store()
        .delete(&secrets, &ns, &name)
        .expect("deleting the credential Secret");
    let mut secret = (*gone).clone();
    if let Some(meta) = secret["metadata"].as_object_mut() {
        meta.retain(|k, _| ["name", "namespace", "labels"].contains(&k.as_str()));
    }
    secret
}

#[tokio::test]
async fn without_its_credential_secret_the_delete_fails_naming_what_it_could_not_clean() {
    let _env = env_shared().await;
    let app = app(|cfg| {
        cfg.capi.cleanup_without_credential = magnum_capi::config::CleanupWithoutCredential::Fail;
    })
    .await;
    let t = &app.t;
    let (token, project, uuid, capi) =
        alices_cluster(&app, "no-cred-fail", "nocredfail", 1, 2).await;
    let ns = format!("magnum-{project}");
    retain_first_of_two(&app, &project, &capi, "nocredfail");
    let secret = remove_credential_secret(&app, &project, &capi);

    delete(t, &token, &uuid).await;
    let failed = t
        .wait_cluster_token(&token, &uuid, "DELETE_FAILED")
        .await
        .body;
    let reason = failed["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("its credential Secret is gone")
            && reason.contains(&project)
            && reason.contains("cleanup_without_credential"),
        "{reason}"
    );
    let (lbs, vols, _) = remaining("nocredfail");
    assert_eq!((lbs.len(), vols.len()), (1, 2), "nothing was touched");

    // The credential is back: deleting again finishes, with what the first delete read of the
    // PersistentVolumes (the workload cluster is gone by now).
    until("the workload cluster to go with its Cluster", || async {
        app.sim.workload_store(&ns, &capi).is_none().then_some(())
    })
    .await;
    let secrets = magnum_capi::simkube::Resource::of("v1", "Secret");
    app.sim.store().put(&secrets, secret).unwrap();
    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    let (lbs, vols, fips) = remaining("nocredfail");
    assert_eq!((lbs, fips), (vec![], vec![]));
    assert_eq!(
        vols,
        ["nocredfail-vol-0"],
        "the Retain volume stays, the other goes"
    );
}

#[tokio::test]
async fn without_its_credential_secret_the_service_user_cleans_up_in_the_project() {
    let _env = env_shared().await;
    let (ks, _) = parts().await;
    // A service user with a role in the tenant's project (the policy needs one).
    let (svc, svc_id) = ks.new_user("svc-cleanup", "admin", "alpha").await;
    let app = app(|cfg| {
        cfg.capi.cleanup_without_credential =
            magnum_capi::config::CleanupWithoutCredential::Service;
        cfg.keystone.username = Some(svc.clone());
        cfg.keystone.password = Some(crate::common::keystone::password(&svc).into());
        cfg.keystone.project_name = Some("alpha".into());
    })
    .await;
    let t = &app.t;
    let (token, project, uuid, capi) = alices_cluster(&app, "no-cred-svc", "nocredsvc", 1, 1).await;
    remove_credential_secret(&app, &project, &capi);

    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(remaining("nocredsvc"), (vec![], vec![], vec![]));
    // It acted as the service user, scoped to the cluster's project.
    let deletes: Vec<Seen> = cloud_of()
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.ends_with("/loadbalancers/nocredsvc-lb-0"))
        .collect();
    let used = deletes
        .first()
        .and_then(|r| r.token.clone())
        .expect("a delete");
    let (status, body) = ks.validate(&used).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token"]["user"]["id"], svc_id.as_str());
    assert_eq!(body["token"]["project"]["id"], project.as_str());
}

// ---- issue 43: what the tenant keeps survives the delete ----

/// The ids starting with `tag` of the fake Octavia's `kind` (`listeners`, `pools`, `members`,
/// `healthmonitors`).
fn octavia_ids(kind: &str, tag: &str) -> Vec<String> {
    cloud_of().workload(|w| {
        let items = match kind {
            "listeners" => &w.listeners,
            "pools" => &w.pools,
            "members" => &w.members,
            _ => &w.health_monitors,
        };
        items
            .iter()
            .filter_map(|v| v["id"].as_str())
            .filter(|id| id.starts_with(tag))
            .map(str::to_string)
            .collect()
    })
}

/// The fake's item `id` of the list `of` picks, as a read shows it (`null`: none).
fn stored(of: fn(&workload::Workload) -> &Vec<Value>, id: &str) -> Value {
    cloud_of().workload(|w| {
        of(w)
            .iter()
            .find(|v| v["id"] == id)
            .map(settled)
            .unwrap_or_default()
    })
}

/// Load balancer `id` (named `name`, tagged `tags`, VIP port `vip`) with one listener and one
/// pool for each of `services` (`(OCCM's load balancer name of the Service, port)`; the
/// listener tagged with it, as OCCM tags them, the pool with a member and a health monitor) and
/// one the tenant made by hand (`https`, pool `backends`).
fn load_balancer_with_listeners(
    (id, name, vip): (&str, &str, &str),
    tags: &[&str],
    services: &[(&str, u16)],
    project: &str,
) {
    use crate::common::fakecloud::workload::{health_monitor, listener, member, pool};
    cloud_of().workload(|w| {
        let mut lb = load_balancer(id, name, vip, project);
        lb["tags"] = json!(tags);
        let (mut listeners, mut pools) = (Vec::new(), Vec::new());
        for (i, (occm, port)) in services.iter().enumerate() {
            let (l, p) = (format!("{id}-listener-{i}"), format!("{id}-pool-{i}"));
            let (m, hm) = (format!("{id}-member-{i}"), format!("{id}-monitor-{i}"));
            let name = |kind: &str| format!("{kind}_0_{occm}");
            w.listeners.push(listener(
                &l,
                id,
                (&name("listener"), &[occm]),
                *port,
                Some(&p),
                project,
            ));
            w.pools.push(pool(
                &p,
                id,
                Some(&l),
                &name("pool"),
                (&[&m], Some(&hm)),
                project,
            ));
            w.members.push(member(&m, &p, "10.0.0.21", project));
            w.health_monitors.push(health_monitor(&hm, &p, project));
            listeners.push(l);
            pools.push(p);
        }
        let (l, p) = (format!("{id}-listener-tenant"), format!("{id}-pool-tenant"));
        w.listeners
            .push(listener(&l, id, ("https", &[]), 443, Some(&p), project));
        w.pools
            .push(pool(&p, id, Some(&l), "backends", (&[], None), project));
        listeners.push(l);
        pools.push(p);
        lb["listeners"] = json!(
            listeners
                .iter()
                .map(|l| json!({"id": l}))
                .collect::<Vec<_>>()
        );
        lb["pools"] = json!(pools.iter().map(|p| json!({"id": p})).collect::<Vec<_>>());
        w.load_balancers.push(lb);
    });
}

/// OCCM deletes only the load balancers it named for a Service; one it only attached a Service
/// to (the tenant's, given by `loadbalancer.openstack.org/load-balancer-id`) or one another
/// cluster's Services share keeps, with the floating IP on its VIP: only the listeners, pools
/// (members, health monitors) and tags OCCM made for the cluster's Services go.
#[tokio::test]
async fn a_load_balancer_the_cluster_only_attached_to_or_shares_stays_with_its_floating_ip() {
    use crate::common::fakecloud::workload::floating_ip_described;
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (token, project, uuid, capi) = alices_cluster(&app, "attached", "att", 1, 0).await;
    let web = format!("kube_service_{capi}_shop_web");
    let api = format!("kube_service_{capi}_shop_api");
    let theirs = "kube_service_c0000000000004000800000000000000b_shop_api";
    // The tenant's load balancer `shop`, which the cluster's Service shop/web was given.
    load_balancer_with_listeners(
        ("att-tenant", "shop", "att-vip-tenant"),
        &[&web, "team=shop"],
        &[(&web, 80)],
        &project,
    );
    cloud_of().workload(|w| {
        w.floating_ips.push(floating_ip_described(
            "att-fip-tenant",
            "att-vip-tenant",
            &project,
            "shop.example.com",
        ));
    });
    // OCCM named this one for shop/api, but another cluster's Service shares it.
    load_balancer_with_listeners(
        ("att-shared", &api, "att-vip-shared"),
        &[&api, theirs],
        &[(&api, 8080), (theirs, 9090)],
        &project,
    );
    cloud_of().clear_requests();

    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    let (lbs, _, fips) = remaining("att");
    assert_eq!(lbs, ["att-tenant", "att-shared"], "the owned att-lb-0 went");
    assert_eq!(fips, ["att-fip-tenant"], "OCCM's att-fip-0 went");
    let fip = stored(|w| &w.floating_ips, "att-fip-tenant");
    assert_eq!(fip["port_id"], "att-vip-tenant", "still on the VIP");
    assert_eq!(
        stored(|w| &w.load_balancers, "att-tenant")["tags"],
        json!(["team=shop"])
    );
    assert_eq!(
        stored(|w| &w.load_balancers, "att-shared")["tags"],
        json!([theirs])
    );
    let kept = |kind| {
        let mut ids = octavia_ids(kind, "att-");
        ids.sort();
        ids
    };
    assert_eq!(
        kept("listeners"),
        [
            "att-shared-listener-1",
            "att-shared-listener-tenant",
            "att-tenant-listener-tenant"
        ]
    );
    assert_eq!(
        kept("pools"),
        [
            "att-shared-pool-1",
            "att-shared-pool-tenant",
            "att-tenant-pool-tenant"
        ]
    );
    assert_eq!(kept("members"), ["att-shared-member-1"]);
    assert_eq!(kept("healthmonitors"), ["att-shared-monitor-1"]);
    let load_balancer_deletes: Vec<String> = cloud_of()
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/loadbalancers/att-"))
        .map(|r| r.path)
        .collect();
    assert!(
        load_balancer_deletes
            .iter()
            .all(|p| p.ends_with("/att-lb-0")),
        "{load_balancer_deletes:?}"
    );
    let (mut kept, _) = delete_report(&app, &uuid).expect("a delete report");
    kept.sort();
    assert_eq!(
        kept,
        [
            format!(
                "load balancer {api} (att-shared; not the cluster's alone: only the cluster's \
                 listeners, pools and tags removed, it kept)"
            ),
            "load balancer shop (att-tenant; not the cluster's alone: only the cluster's \
             listeners, pools and tags removed, it and the floating IP 172.24.4.50 on its VIP \
             kept)"
                .to_string(),
        ]
    );
}

/// The Kubernetes Retain workflow: the PersistentVolume deleted, its volume kept for the tenant
/// to reclaim. A CSI volume no live PersistentVolume says `Delete` for is kept and reported, in
/// the status reason while the delete works and in the delete report.
#[tokio::test]
async fn a_volume_whose_persistent_volume_is_gone_is_kept_and_reported() {
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (token, project, uuid, capi) = alices_cluster(&app, "orphaned", "orphan", 0, 2).await;
    // The tenant deleted vol-1's PersistentVolume (reclaimPolicy Retain) to keep its data.
    let store = app
        .sim
        .workload_store(&format!("magnum-{project}"), &capi)
        .expect("the workload cluster");
    store
        .delete(
            &magnum_capi::simkube::Resource::of("v1", "PersistentVolume"),
            "",
            "pvc-1",
        )
        .expect("the PersistentVolume");
    // A volume still attached to a server outside the cluster holds the delete open.
    held_volume(&app, &project, &capi, "orphan");
    delete(t, &token, &uuid).await;
    let kept = "kept volume orphan-vol-1 (no PersistentVolume of the cluster names it)";
    let path = format!("/v1/clusters/{uuid}");
    until("the status reason to say what the delete keeps", || async {
        let r = t.call_token(Some(&token), "GET", &path, None, None).await;
        let reason = r.body["status_reason"].as_str().unwrap_or_default();
        reason.contains(kept).then_some(())
    })
    .await;
    let_go("orphan");
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert_eq!(remaining("orphan").1, ["orphan-vol-1"]);
    let (kept, not_checked) = delete_report(&app, &uuid).expect("a delete report");
    assert_eq!(
        kept,
        ["volume orphan-vol-1 (no PersistentVolume of the cluster names it)"]
    );
    assert_eq!(not_checked, Vec::<String>::new());
}

/// A Service of the workload cluster as OCCM leaves it: type LoadBalancer, its load balancer
/// `lb` in `loadbalancer.openstack.org/load-balancer-id`, and `annotations`.
fn service(namespace: &str, name: &str, lb: &str, annotations: Value) -> Value {
    let mut all = json!({"loadbalancer.openstack.org/load-balancer-id": lb});
    if let (Some(all), Some(more)) = (all.as_object_mut(), annotations.as_object()) {
        all.extend(more.clone());
    }
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "annotations": all},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "172.24.4.60"}]}}})
}

/// OCCM's `loadbalancer.openstack.org/keep-floatingip: "true"`: the floating IP OCCM allocated
/// for the Service is disassociated and kept; another Service's goes.
#[tokio::test]
async fn a_floating_ip_its_service_keeps_is_disassociated_and_kept() {
    let _env = env_shared().await;
    let app = app(|_| {}).await;
    let t = &app.t;
    let (token, project, uuid, capi) = alices_cluster(&app, "keep-fip", "keepfip", 2, 0).await;
    let keep = json!({"loadbalancer.openstack.org/keep-floatingip": "true"});
    let release = json!({"loadbalancer.openstack.org/keep-floatingip": "false"});
    in_workload(
        &app,
        &project,
        &capi,
        service("default", "svc0", "keepfip-lb-0", keep),
    );
    in_workload(
        &app,
        &project,
        &capi,
        service("default", "svc1", "keepfip-lb-1", release),
    );

    delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    let (lbs, _, fips) = remaining("keepfip");
    assert_eq!(lbs, Vec::<String>::new());
    assert_eq!(fips, ["keepfip-fip-0"]);
    let fip = stored(|w| &w.floating_ips, "keepfip-fip-0");
    assert_eq!(fip["port_id"], Value::Null, "disassociated");
    let (kept, _) = delete_report(&app, &uuid).expect("a delete report");
    assert_eq!(
        kept,
        [
            "floating IP 172.24.4.50 (keepfip-fip-0; its Service default/svc0 has \
          loadbalancer.openstack.org/keep-floatingip: \"true\")"
        ]
    );
}
