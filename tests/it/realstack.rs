//! The driver on the real management stack (`common::realstack`): the real kube-apiserver with
//! the CAPI, CABPK, KCP, CAPO and CAAPH CRDs and webhooks, and the real controllers.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::realstack::{server_side_apply, stack};
use magnum_capi::config::CapiConfig;

use crate::render::{build_values, keystone_config, renderer, rows, with_labels};

/// Every render the render suite pins (its snapshots: all distros, add-ons, zones, volumes,
/// networks, autoscaling, keystone auth, credentials and CAs) and a few more shapes the
/// snapshots do not hold (a private API, control planes spread over zones).
fn corpus() -> Vec<(String, Vec<Value>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/snapshots");
    let mut out = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("it__render") && n.ends_with(".snap")
        })
        .collect();
    names.sort();
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap();
        // insta's header, then the JSON the render test asserted equal to its render.
        let body = text.splitn(3, "\n---\n").nth(1).unwrap();
        // Snapshots of one part of a render (keystone_auth's, versions_by_minor's) are not
        // lists of objects; keystone_auth is rendered whole below.
        let Ok(objects) = serde_json::from_str::<Vec<Value>>(body) else {
            continue;
        };
        if !objects.iter().all(|o| o.get("apiVersion").is_some()) {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        out.push((name, objects));
    }
    assert!(out.len() >= 14, "the render snapshots are missing: {dir:?}");
    for (name, labels, config) in [
        (
            "private_api",
            json!({"master_lb_enabled": "true", "master_lb_floating_ip_enabled": "false"}),
            CapiConfig::default(),
        ),
        (
            "keystone_auth",
            json!({"keystone_auth_enabled": "true"}),
            keystone_config(),
        ),
        (
            "control_plane_zones",
            json!({"control_plane_availability_zones": "az1,az2,az3", "availability_zone": "az1"}),
            CapiConfig::default(),
        ),
    ] {
        let (mut t, mut c) = with_labels(labels);
        t["master_lb_enabled"] = json!(true);
        c["master_count"] = json!(3);
        let values = build_values(&rows(t, c, None), &config).unwrap();
        out.push((name.to_string(), renderer().render(&values).unwrap()));
    }
    out
}

/// Every object the render suite produces passes the real apiserver's schema, CEL rules and
/// metadata checks and every provider's defaulting and validating webhooks (server-side apply,
/// dry run, as the driver's field manager): zero rejections.
#[tokio::test]
async fn every_rendered_object_passes_the_real_apiserver_and_the_providers_webhooks() {
    let s = stack().await;
    let admin = s.admin().await;
    let mut rejected = Vec::new();
    let mut judged = 0;
    for (render, objects) in corpus() {
        for obj in &objects {
            if obj["kind"] == "Namespace" {
                s.namespace(obj["metadata"]["name"].as_str().unwrap()).await;
                continue;
            }
            judged += 1;
            if let Err(e) = server_side_apply(&admin, obj, "magnum-capi", true).await {
                rejected.push(format!(
                    "{render}: {} {}: {e}",
                    obj["kind"].as_str().unwrap_or("?"),
                    obj["metadata"]["name"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    assert!(judged > 200, "only {judged} objects judged");
    assert!(
        rejected.is_empty(),
        "{} of {judged} rendered objects rejected by the real stack:\n{}",
        rejected.len(),
        rejected.join("\n")
    );
}

/// The webhooks are really in the path: an object the providers' webhooks refuse (a
/// KubeadmControlPlane with an even number of replicas and a stacked etcd; a MachineDeployment
/// whose version is not a Kubernetes version) is rejected with the webhook's own message.
#[tokio::test]
async fn the_providers_webhooks_judge_what_is_applied() {
    let s = stack().await;
    let admin = s.admin().await;
    let (_, mut objects) = corpus()
        .into_iter()
        .find(|(n, _)| n.ends_with("__ha"))
        .unwrap();
    let ns = objects[0]["metadata"]["name"].as_str().unwrap().to_string();
    s.namespace(&ns).await;
    let kcp = objects
        .iter_mut()
        .find(|o| o["kind"] == "KubeadmControlPlane")
        .unwrap();
    kcp["spec"]["replicas"] = json!(2);
    let err = server_side_apply(&admin, kcp, "magnum-capi", true)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("admission webhook") && err.contains("replicas"),
        "{err}"
    );
    let md = objects
        .iter_mut()
        .find(|o| o["kind"] == "MachineDeployment")
        .unwrap();
    md["spec"]["template"]["spec"]["version"] = json!("one-point-thirty");
    let err = server_side_apply(&admin, md, "magnum-capi", true)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("admission webhook") && err.contains("version"),
        "{err}"
    );
}

/// `tests/realstack/up.sh`: the whole stack for a person to try by hand — the real management
/// cluster and controllers, the real Keystone with the fake cloud in its catalog, and
/// `magnum-capi serve` in production mode on `PORT` (default 9511) — with the `export` lines of
/// a tenant and of the management cluster's admin written to `$REALSTACK_STATE/env`. Runs until
/// it is stopped (tests/realstack/down.sh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tests/realstack/up.sh runs it: it runs until it is stopped"]
async fn up() {
    use crate::common::keystone::password;
    use crate::common::realstack::Production;
    let state = std::path::PathBuf::from(
        std::env::var("REALSTACK_STATE").expect("REALSTACK_STATE (tests/realstack/up.sh sets it)"),
    );
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9511);
    let s = stack().await;
    let (ks, _) = crate::common::stack::parts().await;
    let served = Production::start(port, &s.kubeconfig, LOOPBACK_CHARTS, "").await;
    let env = format!(
        "export OS_AUTH_URL={}\nexport OS_IDENTITY_API_VERSION=3\nexport OS_REGION_NAME=RegionOne\n\
         export OS_USERNAME=alice\nexport OS_PASSWORD={}\nexport OS_PROJECT_NAME=alpha\n\
         export OS_USER_DOMAIN_NAME=Default\nexport OS_PROJECT_DOMAIN_NAME=Default\n\
         export KUBECONFIG={}\n\
         # magnum-capi: http://127.0.0.1:{port}/v1 (log {}); the management cluster's logs: {}/logs\n",
        ks.url,
        password("alice"),
        s.kubeconfig.display(),
        served.log.display(),
        s.dir.display(),
    );
    std::fs::write(state.join("env.tmp"), env).unwrap();
    std::fs::rename(state.join("env.tmp"), state.join("env")).unwrap();
    eprintln!("the real stack is up; tests/realstack/down.sh stops it");
    std::future::pending::<()>().await;
}

/// Chart repositories on the real stack: a loopback port nothing listens on, so CAAPH's chart
/// fetches fail on this machine (its real failure condition) and never leave it.
const LOOPBACK_CHARTS: &str = "http://127.0.0.1:9/charts";
