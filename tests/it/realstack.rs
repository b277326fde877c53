//! The driver on the real management stack (`common::realstack`): the real kube-apiserver with
//! the CAPI, CABPK, KCP, CAPO and CAAPH CRDs and webhooks, and the real controllers.

use std::path::Path;

use serde_json::{Value, json};

use reqwest::Method;

use crate::common::realstack::{
    Production, REAL_DEADLINE, RealStack, chart_identity, client_of, config_of, request_token,
    server_side_apply, stack,
};
use crate::common::served::run_command;
use crate::common::wait::until_within;
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
        let body = text.split("\n---\n").nth(1).unwrap();
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

/// magnum-capi runs on the real management cluster with exactly the chart's RBAC (its
/// ServiceAccount, ClusterRoles and bindings rendered from `deploy/helm`, a token of that
/// account): `check` passes, and a cluster created through the API with a Keystone token has
/// every object applied under that identity and judged by the real webhooks, the watchers read
/// the real controllers' conditions, and its delete is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn magnum_capi_runs_with_exactly_the_charts_rbac() {
    let s = stack().await;
    let (ks, _) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(0, &kubeconfig, LOOPBACK_CHARTS, "").await;

    let out = run_command("check", &served.config).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let token = ks.token("alice", "alpha").await;
    let t = realstack_template(&served, &token, "rbac", KUBE_IMAGE, "m1.large").await;
    let uuid = create_cluster(&served, &token, "rbac", &t, json!({})).await;
    let path = format!("/v1/clusters/{uuid}");
    // Applied under the chart's identity and judged by the real webhooks: every kind is on the
    // management cluster, and the service reports no refusal.
    let admin = s.admin().await;
    let ns = format!("magnum-{}", ks.project_id("alpha"));
    for (api_version, kind) in [
        ("cluster.x-k8s.io/v1beta2", "Cluster"),
        (
            "controlplane.cluster.x-k8s.io/v1beta2",
            "KubeadmControlPlane",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackCluster",
        ),
        ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        ("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy"),
    ] {
        let ar = magnum_capi::capi::apply::resource(api_version, kind);
        let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), &ns, &ar);
        until_within(REAL_DEADLINE, &format!("a {kind} in {ns}"), || async {
            let list = api.list(&Default::default()).await.ok()?;
            (!list.items.is_empty()).then_some(())
        })
        .await;
    }
    let (_, body) = served.call(&token, Method::GET, &path, None).await;
    let reason = body["status_reason"].as_str().unwrap_or_default();
    assert!(
        !reason.contains("forbidden") && !reason.contains("refused"),
        "{body}"
    );
    assert!(
        !served.log_text().contains("forbidden"),
        "{}",
        served.log_text()
    );
    let (st, b) = served.call(&token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
}

/// The chart's identity cannot make itself more than it is: it cannot mint a token for another
/// ServiceAccount (by TokenRequest or a service-account token Secret, anywhere), run a pod (as
/// any account; a Deployment outside the project namespaces), write anything outside the
/// project namespaces (`magnum-…`: the chart's admission policy), bind cluster-admin or any
/// ClusterRole but the autoscaler's, write RBAC roles, or impersonate.
#[tokio::test]
async fn the_charts_identity_cannot_escalate() {
    let s = stack().await;
    let kubeconfig = chart_identity(s).await;
    let client = client_of(config_of(&kubeconfig).await);
    s.namespace("magnum-escalation").await;
    let attempts = [
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "as-another", "namespace": "magnum-escalation"},
            "spec": {"serviceAccountName": "default",
                "containers": [{"name": "c", "image": "busybox"}]}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "admin-for-me", "namespace": "magnum-escalation"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "magnum-capi",
                "namespace": "magnum-capi"}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "admin-for-me"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "magnum-capi",
                "namespace": "magnum-capi"}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "everything", "namespace": "magnum-escalation"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        // A token of any ServiceAccount through a Secret the API server fills in: in the
        // account's own namespaces, and outside them.
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": "borrowed", "namespace": "magnum-escalation",
                "annotations": {"kubernetes.io/service-account.name": "default"}}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": "borrowed", "namespace": "kube-system",
                "annotations": {"kubernetes.io/service-account.name": "clusterrole-aggregation-controller"}}}),
        // Any write outside the project namespaces: a plain Secret, a Deployment running as
        // kube-system's accounts, a RoleBinding of the autoscaler's role, a namespace.
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "planted", "namespace": "kube-system"},
            "stringData": {"k": "v"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "as-kube-system", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}},
                    "spec": {"serviceAccountName": "clusterrole-aggregation-controller",
                        "containers": [{"name": "c", "image": "busybox"}]}}}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "autoscaler-for-me", "namespace": "kube-system"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "magnum-capi-cluster-autoscaler"},
            "subjects": [{"kind": "ServiceAccount", "name": "magnum-capi",
                "namespace": "magnum-capi"}]}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}),
    ];
    for obj in &attempts {
        let err = server_side_apply(&client, obj, "magnum-capi", false)
            .await
            .expect_err(&format!("{} was allowed", obj["kind"]));
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{}: {err}",
            obj["kind"]
        );
    }
    // What the service does write, it may: a Secret in a project namespace.
    let allowed = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "allowed", "namespace": "magnum-escalation"},
        "stringData": {"k": "v"}});
    server_side_apply(&client, &allowed, "magnum-capi", true)
        .await
        .expect("a Secret in a project namespace");
    // TokenRequest for another account, and impersonation, are refused.
    let err = request_token(&client, "kube-system", "default")
        .await
        .expect_err("a token for kube-system/default was minted");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    let mut cfg = config_of(&kubeconfig).await;
    cfg.auth_info.impersonate = Some("system:admin".into());
    let impersonating = client_of(cfg);
    let nodes: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(impersonating);
    let err = nodes.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
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
    ks.register_endpoint_async(&served.url("/v1"))
        .await
        .expect("registering container-infra");
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
pub(crate) const LOOPBACK_CHARTS: &str = "http://127.0.0.1:9/charts";

/// What the two other drivers leave on their management clusters (the fixtures the import and
/// adoption tests load into the simulator) is what real Cluster API accepts: each object passes
/// the real apiserver and the providers' webhooks (dry run), so the adoption tests start from
/// objects real CAPI could hold.
#[tokio::test]
async fn the_other_drivers_fixtures_pass_the_real_apiserver_and_webhooks() {
    use crate::common::capi_drivers::{Driver, capi_objects, cluster_uuid};
    let s = stack().await;
    let admin = s.admin().await;
    let mut rejected = Vec::new();
    for driver in [Driver::ClusterApi, Driver::CapiHelm] {
        let ns = driver.namespace("0a1b2c3d4e5f60718293a4b5c6d7e8f9");
        s.namespace(&ns).await;
        for (_, obj) in capi_objects(driver, &ns, "kube-fx7q2", &cluster_uuid(7)) {
            if let Err(e) = server_side_apply(&admin, &obj, "fixture", true).await {
                rejected.push(format!("{driver:?} {}: {e}", obj["kind"]));
            }
        }
    }
    assert!(rejected.is_empty(), "{}", rejected.join("\n"));
}

/// The fake Glance's Kubernetes image (v1.30.4).
pub(crate) const KUBE_IMAGE: &str = "ubuntu-2204-kube-v1.30.4";

/// The image of the lifecycle test's upgrade (the next Kubernetes minor).
pub(crate) const UPGRADE_IMAGE: &str = "11111111-0000-4000-8000-0000000000a1";

/// An image two minors ahead of [`KUBE_IMAGE`]: the upgrade the lifecycle test sees refused.
const SKIP_IMAGE: &str = "11111111-0000-4000-8000-0000000000a2";

/// A template on the real stack booting `image` with the control plane on `master_flavor`:
/// the fake Glance's and Nova's, and the external network whose floating IPs are on loopback
/// (the node agent serves the API there); its uuid.
pub(crate) async fn realstack_template(
    served: &Production,
    token: &str,
    name: &str,
    image: &str,
    master_flavor: &str,
) -> String {
    realstack_template_with(served, token, name, image, master_flavor, json!({})).await
}

/// [`realstack_template`] with the fields of `extra` (labels, `master_lb_enabled`, …) set too.
pub(crate) async fn realstack_template_with(
    served: &Production,
    token: &str,
    name: &str,
    image: &str,
    master_flavor: &str,
    extra: Value,
) -> String {
    let mut body = json!({
        "name": name, "coe": "kubernetes", "image_id": image,
        "external_network_id": "public", "flavor_id": "m1.medium",
        "master_flavor_id": master_flavor, "network_driver": "calico",
        "master_lb_enabled": true,
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let (st, t) = served
        .call(token, Method::POST, "/v1/clustertemplates", Some(body))
        .await;
    assert_eq!(st, 201, "{t}");
    t["uuid"].as_str().unwrap().to_string()
}

/// Creates cluster `name` of template `template` as `token`: one master, one node, and the
/// fields of `extra`; its uuid.
pub(crate) async fn create_cluster(
    served: &Production,
    token: &str,
    name: &str,
    template: &str,
    extra: Value,
) -> String {
    let mut body = json!({"name": name, "cluster_template_id": template,
        "master_count": 1, "node_count": 1});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (st, c) = served
        .call(token, Method::POST, "/v1/clusters", Some(body))
        .await;
    assert_eq!(st, 202, "{c}");
    c["uuid"].as_str().unwrap().to_string()
}

/// Waits until cluster `path` has `want` (panicking early, with its reason and the controllers'
/// logs, when it lands on a failure instead; at the deadline, with every status it went through
/// and the controllers' last lines about it); its body.
pub(crate) async fn wait_for_status(
    served: &Production,
    token: &str,
    path: &str,
    want: &str,
) -> Value {
    let s = stack().await;
    // Each change (and when), so a wait that fails shows where the cluster went and stayed.
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    let t0 = std::time::Instant::now();
    let history = || seen.lock().unwrap().join("\n  ");
    let logs = || controllers_about(s, served, path, None);
    // The probe's own deadline is later: the timeout below says more than "timed out".
    let waited = tokio::time::timeout(
        REAL_DEADLINE,
        until_within(
            REAL_DEADLINE * 2,
            &format!("{path} to be {want}"),
            || async {
                let (code, b) = served.call(token, Method::GET, path, None).await;
                let status = b["status"].as_str().unwrap_or_default().to_string();
                let now = format!("{status}: {}", b["status_reason"]);
                let changed = seen
                    .lock()
                    .unwrap()
                    .last()
                    .is_none_or(|last| !last.starts_with(&now));
                if changed {
                    let line = format!("{now} (+{:.1?})", t0.elapsed());
                    eprintln!("{path}: {line}");
                    seen.lock().unwrap().push(line);
                }
                if want == "DELETE_COMPLETE" && code == 404 {
                    return Some(b);
                }
                assert!(
                    status == want || !status.ends_with("_FAILED"),
                    "{path} is {status}: {}\nit went:\n  {}\n{}",
                    b["status_reason"],
                    history(),
                    logs()
                );
                (status == want).then_some(b)
            },
        ),
    )
    .await;
    match waited {
        Ok(b) => b,
        Err(_) => panic!(
            "timed out after {}s waiting for {path} to be {want}; it went:\n  {}\n{}",
            REAL_DEADLINE.as_secs(),
            history(),
            logs()
        ),
    }
}

/// The last log lines about cluster `path` (`/v1/clusters/{uuid}`): the service's, and those of
/// CAPI, KCP and CAPO naming its objects (the shared stack's logs hold every test's clusters).
pub(crate) fn controllers_about(
    s: &RealStack,
    served: &Production,
    path: &str,
    adopted_as: Option<&str>,
) -> String {
    let uuid = path.rsplit('/').next().unwrap_or_default();
    let name = match adopted_as {
        Some(name) => name.to_string(),
        None => uuid
            .parse()
            .map(magnum_capi::capi::capi_name)
            .unwrap_or_default(),
    };
    let last = |text: &str, needle: &str| {
        let about: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
        about[about.len().saturating_sub(12)..].join("\n")
    };
    let mut out = format!(
        "magnum-capi about {uuid}:\n{}",
        last(&served.log_text(), uuid)
    );
    for part in ["capi-core", "capi-controlplane", "capo"] {
        let text = s.log_tail(part, 5000);
        out.push_str(&format!("\n{part} about {name}:\n{}", last(&text, &name)));
    }
    out
}

/// A client of cluster `uuid`'s workload API as `coe cluster config` makes one: the cluster's
/// CA (`ca show`) trusted, an admin client certificate it signs (`ca sign`) presented.
pub(crate) async fn workload_client(
    served: &Production,
    token: &str,
    uuid: &str,
) -> reqwest::Client {
    let (st, ca) = served
        .call(
            token,
            Method::GET,
            &format!("/v1/certificates/{uuid}"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{ca}");
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:masters");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "admin");
    let csr = params.serialize_request(&key).unwrap().pem().unwrap();
    let (st, signed) = served
        .call(
            token,
            Method::POST,
            "/v1/certificates",
            Some(json!({"cluster_uuid": uuid, "csr": csr})),
        )
        .await;
    assert_eq!(st, 201, "{signed}");
    crate::common::realstack::workload_https_client(
        ca["pem"].as_str().unwrap(),
        signed["pem"].as_str().unwrap(),
        &key.serialize_pem(),
    )
}

/// How many nodes the workload API at `api` lists for `client`; why, when it refuses it (or
/// the client refuses the API's certificate).
pub(crate) async fn nodes_of(client: &reqwest::Client, api: &str) -> Result<usize, String> {
    let answer = client
        .get(format!("{api}/api/v1/nodes"))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| format!("{e:?}"))?;
    let nodes: Value = answer.json().await.map_err(|e| e.to_string())?;
    nodes["items"]
        .as_array()
        .map(Vec::len)
        .ok_or_else(|| nodes.to_string())
}

/// The whole life of a cluster on real Cluster API, through the API with Keystone tokens and
/// the chart's identity: create → `CREATE_COMPLETE` with the API address CAPO made (a floating
/// IP on loopback) and the machines' addresses; a kubeconfig from `ca show` and `ca sign` that
/// reaches the workload API; resize up and down; a nodegroup added and deleted; an upgrade that
/// skips a minor refused; an upgrade to the next minor rolling real Machines; delete →
/// `DELETE_COMPLETE` with nothing of it left on the management cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_lives_its_whole_life_on_real_cluster_api() {
    let s = stack().await;
    let (ks, _) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(0, &kubeconfig, LOOPBACK_CHARTS, "").await;
    let token = ks.token("bob", "beta").await;
    let t = realstack_template(&served, &token, "life", KUBE_IMAGE, "m1.large").await;
    let uuid = create_cluster(&served, &token, "life", &t, json!({})).await;
    let path = format!("/v1/clusters/{uuid}");
    let body = wait_for_status(&served, &token, &path, "CREATE_COMPLETE").await;
    let api = body["api_address"].as_str().unwrap().to_string();
    assert!(api.starts_with("https://127."), "{body}");
    assert_eq!(
        body["node_addresses"].as_array().map(Vec::len),
        Some(1),
        "{body}"
    );

    // `coe cluster config`: the cluster's CA and a client certificate it signs reach the
    // workload API the machines joined.
    let workload = workload_client(&served, &token, &uuid).await;
    assert_eq!(nodes_of(&workload, &api).await, Ok(2));

    // Resize up, then down.
    for count in [2, 1] {
        let (st, b) = served
            .call(
                &token,
                Method::PATCH,
                &path,
                Some(json!([{"op": "replace", "path": "/node_count", "value": count}])),
            )
            .await;
        assert_eq!(st, 202, "{b}");
        let body = wait_for_status(&served, &token, &path, "UPDATE_COMPLETE").await;
        assert_eq!(
            body["node_addresses"].as_array().map(Vec::len),
            Some(count),
            "{body}"
        );
    }

    // A nodegroup of its own: added (its MachineDeployment's machines join), then deleted.
    let (st, b) = served
        .call(
            &token,
            Method::POST,
            &format!("{path}/nodegroups"),
            Some(json!({"name": "extra", "node_count": 1})),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let ng = format!("{path}/nodegroups/extra");
    let body = wait_for_status(&served, &token, &ng, "CREATE_COMPLETE").await;
    assert_eq!(
        body["node_addresses"].as_array().map(Vec::len),
        Some(1),
        "{body}"
    );
    let (st, b) = served.call(&token, Method::DELETE, &ng, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(&served, &token, &ng, "DELETE_COMPLETE").await;

    // Upgrade to a template of the next Kubernetes minor: KCP and the MachineDeployment roll
    // real Machines onto the new image.
    let (_, cloud) = crate::common::stack::parts().await;
    cloud.add_image(
        json!({"id": UPGRADE_IMAGE, "name": "ubuntu-2204-kube-v1.31.6",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.31.6",
        "created_at": "2024-09-01T12:00:00Z"}),
    );
    let t2 = realstack_template(&served, &token, "life-v1.31", UPGRADE_IMAGE, "m1.large").await;
    // Skipping a minor is refused before anything is applied (issue 46).
    cloud.add_image(json!({"id": SKIP_IMAGE, "name": "ubuntu-2204-kube-v1.32.2",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.32.2",
        "created_at": "2024-12-01T12:00:00Z"}));
    let skip = realstack_template(&served, &token, "life-v1.32", SKIP_IMAGE, "m1.large").await;
    let (st, b) = served
        .call(
            &token,
            Method::POST,
            &format!("{path}/actions/upgrade"),
            Some(json!({"cluster_template": skip})),
        )
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(b.to_string().contains("skips a minor release"), "{b}");
    let (st, b) = served
        .call(
            &token,
            Method::POST,
            &format!("{path}/actions/upgrade"),
            Some(json!({"cluster_template": t2})),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let body = wait_for_status(&served, &token, &path, "UPDATE_COMPLETE").await;
    assert_eq!(body["coe_version"], "v1.31.6", "{body}");
    assert_eq!(body["cluster_template_id"], t2, "{body}");

    let (st, b) = served.call(&token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(&served, &token, &path, "DELETE_COMPLETE").await;
    let admin = s.admin().await;
    let ns = format!("magnum-{}", ks.project_id("beta"));
    let name = magnum_capi::capi::capi_name(uuid.parse().unwrap());
    for (api_version, kind) in [
        ("cluster.x-k8s.io/v1beta2", "Cluster"),
        ("cluster.x-k8s.io/v1beta2", "Machine"),
        (
            "controlplane.cluster.x-k8s.io/v1beta2",
            "KubeadmControlPlane",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackCluster",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachine",
        ),
    ] {
        let ar = magnum_capi::capi::apply::resource(api_version, kind);
        let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), &ns, &ar);
        let left: Vec<_> = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|o| {
                o.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("cluster.x-k8s.io/cluster-name"))
                    == Some(&name)
            })
            .collect();
        assert!(left.is_empty(), "{kind} left: {left:?}");
    }
}

/// A control plane that never becomes healthy (its servers' flavor says `never-joins`: the node
/// agent plays nothing for them) fails the create at its `create_timeout` with what
/// real KCP and CAPI still wait for, a reason the tenant can act on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_that_never_joins_fails_the_create_at_its_timeout() {
    let s = stack().await;
    let (ks, cloud) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(0, &kubeconfig, LOOPBACK_CHARTS, "").await;
    // The render names the flavor by its id, which the agent reads.
    cloud.add_flavor(
        json!({"id": NEVER_JOINS_FLAVOR, "name": "m1.never-joins", "ram": 8192,
        "disk": 80, "vcpus": 4}),
    );
    let token = ks.token("alice", "alpha").await;
    let t = realstack_template(&served, &token, "never", KUBE_IMAGE, "m1.never-joins").await;
    let path = format!(
        "/v1/clusters/{}",
        create_cluster(&served, &token, "never", &t, json!({"create_timeout": 1})).await
    );
    let body = wait_for_status(&served, &token, &path, "CREATE_FAILED").await;
    let reason = body["status_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("Timed out waiting for the cluster")
            && reason.contains("machines ready"),
        "{reason}"
    );
    let (st, b) = served.call(&token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(&served, &token, &path, "DELETE_COMPLETE").await;
}

/// The flavor of servers the node agent never joins.
const NEVER_JOINS_FLAVOR: &str = "never-joins";

/// What the cloud refuses fails the cluster with the cloud's own words, a reason the tenant can
/// act on, each in a project of its own:
/// - a control-plane flavor Nova refuses (its quota of cores): CAPO v0.14 reports Nova's 403 on
///   the machine's OpenStackServer only (the Machine keeps waiting) → `CREATE_FAILED` naming
///   the server and Nova's message;
/// - a project whose Neutron quota allows no network: CAPO retries the OpenStackCluster →
///   `CREATE_FAILED` with Neutron's `OverQuota` once `[capi] openstack_retry_grace_secs` passed;
/// - an image deleted from Glance after the cluster was made: the resize's new machine is
///   refused by Nova → `UPDATE_FAILED` with Nova's 400;
///
/// and each of them still deletes to `DELETE_COMPLETE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_cloud_refuses_fails_the_cluster_with_the_clouds_reason() {
    let s = stack().await;
    let (ks, cloud) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(
        0,
        &kubeconfig,
        LOOPBACK_CHARTS,
        "openstack_retry_grace_secs = 5\n",
    )
    .await;
    let served = &served;

    let refused_flavor = async {
        cloud.add_flavor(
            json!({"id": "refused-cp", "name": "m1.refused-cp", "ram": 8192, "disk": 40,
            "vcpus": 4}),
        );
        cloud.workload(|w| w.refused_flavors.insert("refused-cp".into()));
        let token = ks.new_project("refused").await.token;
        let t = realstack_template(served, &token, "refused", KUBE_IMAGE, "m1.refused-cp").await;
        let path = format!(
            "/v1/clusters/{}",
            create_cluster(served, &token, "refused", &t, json!({})).await
        );
        let body = wait_for_status(served, &token, &path, "CREATE_FAILED").await;
        let reason = body["status_reason"].as_str().unwrap();
        assert!(
            reason.contains(": OpenStackServer ")
                && reason.contains("InstanceCreateFailed")
                && reason.contains("Quota exceeded for cores: Requested 4"),
            "{reason}"
        );
        (token, path)
    };

    let over_quota = async {
        let crate::common::keystone::ProjectMember { project, token, .. } =
            ks.new_project("overquota").await;
        cloud.workload(|w| w.quotas.insert((project.clone(), "network".into()), 0));
        let t = realstack_template(served, &token, "overquota", KUBE_IMAGE, "m1.large").await;
        let path = format!(
            "/v1/clusters/{}",
            create_cluster(served, &token, "overquota", &t, json!({})).await
        );
        let body = wait_for_status(served, &token, &path, "CREATE_FAILED").await;
        let reason = body["status_reason"].as_str().unwrap();
        assert!(
            reason.starts_with("OpenStackCluster: ")
                && reason.contains("Quota exceeded for resources: ['network']"),
            "{reason}"
        );
        (token, path)
    };

    let image_gone = async {
        let image = cloud.add_image(json!({"name": "ubuntu-2204-kube-v1.30.4-gone",
            "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.30.4"}));
        let token = ks.new_project("imagegone").await.token;
        let t = realstack_template(served, &token, "imagegone", &image, "m1.large").await;
        let uuid = create_cluster(served, &token, "imagegone", &t, json!({})).await;
        let path = format!("/v1/clusters/{uuid}");
        wait_for_status(served, &token, &path, "CREATE_COMPLETE").await;
        assert!(cloud.remove(&image), "the image was there");
        let (st, b) = served
            .call(
                &token,
                Method::POST,
                &format!("/v1/clusters/{uuid}/actions/resize"),
                Some(json!({"node_count": 2})),
            )
            .await;
        assert_eq!(st, 202, "{b}");
        let body = wait_for_status(served, &token, &path, "UPDATE_FAILED").await;
        let reason = body["status_reason"].as_str().unwrap();
        assert!(
            reason.contains(": OpenStackServer ")
                && reason.contains(&format!("Image {image} could not be found.")),
            "{reason}"
        );
        (token, path)
    };

    let done = tokio::join!(refused_flavor, over_quota, image_gone);
    for (token, path) in [done.0, done.1, done.2] {
        let (st, b) = served.call(&token, Method::DELETE, &path, None).await;
        assert_eq!(st, 204, "{b}");
        wait_for_status(served, &token, &path, "DELETE_COMPLETE").await;
    }
    cloud.workload(|w| w.refused_flavors.remove("refused-cp"));
}

/// The machines of cluster `uuid` of project `project` on the management cluster, by name.
async fn machine_names(project: &str, uuid: &str) -> std::collections::BTreeSet<String> {
    objects_of(project, uuid, "cluster.x-k8s.io/v1beta2", "Machine")
        .await
        .into_iter()
        .filter_map(|m| m["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// The application credential in cluster `uuid`'s `clouds.yaml` Secret, the one CAPO and the
/// cloud provider log in with: its id.
async fn credential_in_secret(project: &str, uuid: &str) -> String {
    let admin = stack().await.admin().await;
    let secrets = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        admin,
        &format!("magnum-{project}"),
    );
    let name = magnum_capi::capi::credentials_secret_name(&magnum_capi::capi::capi_name(
        uuid.parse().unwrap(),
    ));
    let secret = serde_json::to_value(secrets.get(&name).await.unwrap()).unwrap();
    magnum_capi::capi::credentials::clouds_yaml_credential(&secret)
        .unwrap()
        .0
}

/// A cluster's CA and its application credential rotate on real Cluster API:
/// - `PATCH /v1/certificates/{uuid}` → `UPDATE_COMPLETE` once real KCP and the MachineSet have
///   rolled every machine through the three phases (each joining through the node agent with
///   the CA of its phase): new machines only, a new CA, the workload API reached with a
///   certificate the new CA signs and no longer with the old CA's;
/// - `PATCH /v1/credentials/{uuid}` → `UPDATE_COMPLETE` with a new application credential in the
///   Secret CAPO reads and the old one gone from Keystone; a resize after it is built by CAPO
///   logging in with the new credential (the old one no longer authenticates);
///
/// then it deletes to `DELETE_COMPLETE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_ca_and_credential_rotate_on_real_cluster_api() {
    let s = stack().await;
    let (ks, _) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(0, &kubeconfig, LOOPBACK_CHARTS, "").await;
    let crate::common::keystone::ProjectMember { project, token, .. } =
        ks.new_project("rotate").await;
    let t = realstack_template(&served, &token, "rotate", KUBE_IMAGE, "m1.large").await;
    let uuid = create_cluster(&served, &token, "rotate", &t, json!({})).await;
    let path = format!("/v1/clusters/{uuid}");
    let body = wait_for_status(&served, &token, &path, "CREATE_COMPLETE").await;
    let api = body["api_address"].as_str().unwrap().to_string();
    let old_client = workload_client(&served, &token, &uuid).await;
    assert_eq!(nodes_of(&old_client, &api).await, Ok(2));
    let before = machine_names(&project, &uuid).await;
    assert_eq!(before.len(), 2, "{before:?}");

    let certificates = format!("/v1/certificates/{uuid}");
    let (st, b) = served
        .call(&token, Method::PATCH, &certificates, None)
        .await;
    assert_eq!(st, 202, "{b}");
    let body = wait_for_status(&served, &token, &path, "UPDATE_COMPLETE").await;
    // The API and every node healthy (the add-ons fail: their charts are not reachable here).
    let health = body["health_status_reason"].as_object().unwrap();
    assert_eq!(health["api"], "ok", "{body}");
    let nodes: Vec<_> = health
        .iter()
        .filter(|(k, _)| k.ends_with(".Ready"))
        .collect();
    assert_eq!(nodes.len(), 2, "{body}");
    assert!(nodes.iter().all(|(_, v)| *v == "True"), "{body}");
    let after = machine_names(&project, &uuid).await;
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(before.is_disjoint(&after), "{before:?} → {after:?}");
    let new_client = workload_client(&served, &token, &uuid).await;
    assert_eq!(nodes_of(&new_client, &api).await, Ok(2));
    let refused = nodes_of(&old_client, &api).await;
    assert!(
        refused.is_err(),
        "the old CA's client still reaches the API: {refused:?}"
    );

    let old_credential = credential_in_secret(&project, &uuid).await;
    let (st, b) = served
        .call(
            &token,
            Method::PATCH,
            &format!("/v1/credentials/{uuid}"),
            None,
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let body = wait_for_status(&served, &token, &path, "UPDATE_COMPLETE").await;
    let new_credential = credential_in_secret(&project, &uuid).await;
    assert_ne!(new_credential, old_credential);
    let user = body["user_id"].as_str().unwrap();
    let held: Vec<String> = ks
        .app_credentials_of(user)
        .await
        .iter()
        .filter_map(|a| a["id"].as_str().map(str::to_string))
        .collect();
    assert!(held.contains(&new_credential), "{held:?}");
    assert!(!held.contains(&old_credential), "{held:?}");
    let (st, b) = served
        .call(
            &token,
            Method::PATCH,
            &path,
            Some(json!([{"op": "replace", "path": "/node_count", "value": 2}])),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let body = wait_for_status(&served, &token, &path, "UPDATE_COMPLETE").await;
    assert_eq!(
        body["node_addresses"].as_array().map(Vec::len),
        Some(2),
        "{body}"
    );

    let (st, b) = served.call(&token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(&served, &token, &path, "DELETE_COMPLETE").await;
}

/// Cluster `uuid`'s objects of `kind` in project `project`'s namespace, on the management
/// cluster as the real controllers keep them.
async fn objects_of(project: &str, uuid: &str, api_version: &str, kind: &str) -> Vec<Value> {
    let admin = stack().await.admin().await;
    let ar = magnum_capi::capi::apply::resource(api_version, kind);
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        admin,
        &format!("magnum-{project}"),
        &ar,
    );
    let name = magnum_capi::capi::capi_name(uuid.parse().unwrap());
    api.list(
        &kube::api::ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={name}")),
    )
    .await
    .unwrap()
    .items
    .into_iter()
    .map(|o| serde_json::to_value(o).unwrap())
    .collect()
}

/// A failed upgrade on real Cluster API keeps the cluster on the template it left, and is
/// rolled back from `UPDATE_FAILED` through the API:
/// - an upgrade to the next minor whose image is gone from Glance once the upgrade passed its
///   checks → real KCP's new machine fails at CAPO (Nova refuses its server) →
///   `UPDATE_FAILED` naming Nova's refusal (the machine's failure, before
///   `[capi] update_timeout_mins`, short here to bound the wait), `cluster_template_id` the old
///   template;
/// - the rollback (the upgrade call to the old template) → `UPDATE_COMPLETE` with KCP, the
///   MachineDeployment and every real Machine back on the old version and no machine of the
///   failed template left;
///
/// then it deletes to `DELETE_COMPLETE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upgrade_keeps_its_template_and_rolls_back_on_real_cluster_api() {
    let s = stack().await;
    let (ks, cloud) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served =
        Production::start(0, &kubeconfig, LOOPBACK_CHARTS, "update_timeout_mins = 4\n").await;
    let crate::common::keystone::ProjectMember { project, token, .. } =
        ks.new_project("upgradefail").await;
    let old = realstack_template(&served, &token, "upfail", KUBE_IMAGE, "m1.large").await;
    let uuid = create_cluster(&served, &token, "upfail", &old, json!({})).await;
    let path = format!("/v1/clusters/{uuid}");
    wait_for_status(&served, &token, &path, "CREATE_COMPLETE").await;
    let before = machine_names(&project, &uuid).await;
    assert_eq!(before.len(), 2, "{before:?}");

    // The next minor, its image gone from Glance once the upgrade passed its checks: Nova
    // refuses the new machines' servers.
    let image = cloud.add_image(json!({"name": "ubuntu-2204-kube-v1.31.6-upfail",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.31.6",
        "created_at": "2024-09-01T12:00:00Z"}));
    let new = realstack_template(&served, &token, "upfail-v1.31", &image, "m1.large").await;
    let action = format!("{path}/actions/upgrade");
    let (st, b) = served
        .call(
            &token,
            Method::POST,
            &action,
            Some(json!({"cluster_template": new})),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    assert!(cloud.remove(&image), "the image was there");
    let failed = wait_for_status(&served, &token, &path, "UPDATE_FAILED").await;
    assert_eq!(failed["cluster_template_id"], old.as_str(), "{failed}");
    let reason = failed["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("OpenStackServer")
            && reason.contains(&format!("Image {image} could not be found.")),
        "{reason}"
    );

    // Rolled back: the upgrade call to the template it left.
    let (st, b) = served
        .call(
            &token,
            Method::POST,
            &action,
            Some(json!({"cluster_template": old})),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let done = wait_for_status(&served, &token, &path, "UPDATE_COMPLETE").await;
    assert_eq!(done["cluster_template_id"], old.as_str(), "{done}");
    assert_eq!(done["coe_version"], "v1.30.4", "{done}");
    let crd = "controlplane.cluster.x-k8s.io/v1beta2";
    let kcp = objects_of(&project, &uuid, crd, "KubeadmControlPlane").await;
    assert_eq!(kcp.len(), 1, "{kcp:?}");
    assert_eq!(kcp[0]["spec"]["version"], "v1.30.4", "{kcp:?}");
    let mds = objects_of(
        &project,
        &uuid,
        "cluster.x-k8s.io/v1beta2",
        "MachineDeployment",
    )
    .await;
    assert!(!mds.is_empty());
    for md in &mds {
        assert_eq!(md["spec"]["template"]["spec"]["version"], "v1.30.4", "{md}");
    }
    // Every machine back on the old version once the controllers settle, none of the refused
    // flavor left.
    until_within(
        REAL_DEADLINE,
        "the machines back on v1.30.4 and none of the failed template",
        || async {
            let machines = objects_of(&project, &uuid, "cluster.x-k8s.io/v1beta2", "Machine").await;
            let oms = objects_of(
                &project,
                &uuid,
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackMachine",
            )
            .await;
            let settled = machines.len() == 2
                && machines.iter().all(|m| m["spec"]["version"] == "v1.30.4")
                && !Value::Array(oms).to_string().contains(&image);
            settled.then_some(())
        },
    )
    .await;

    let (st, b) = served.call(&token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(&served, &token, &path, "DELETE_COMPLETE").await;
}
