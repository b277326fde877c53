//! magnum-capi's add-ons installed for real: the real CAAPH (v0.6.4, the real stack's
//! `caaph-manager`, Helm v3.20 inside) turns the HelmChartProxies magnum-capi renders into
//! HelmReleaseProxies and runs `helm install` against the node agent's workload API, with every
//! chart fetched from a chart repository this test serves on loopback. The charts are the
//! project's own test chart (`tests/realstack/charts/addon`: one ConfigMap carrying the chart's
//! identity and the values CAAPH passed), packaged once per chart name and version `[capi]` names,
//! since the real charts' Deployments and DaemonSets would need kubelets to ever become ready.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Digest;

use crate::common::realstack::{Production, REAL_DEADLINE, RealStack, chart_identity, stack};
use crate::common::wait::until_within;
use crate::realstack::{KUBE_IMAGE, create_cluster, realstack_template, wait_for_status};
use magnum_capi::config::CapiConfig;

/// Every chart (name, version) the default `[capi]` names, whichever add-on, network driver or
/// Kubernetes minor picks it.
fn project_charts(c: &CapiConfig) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut add = |name: &str, version: &str| {
        out.insert((name.to_string(), version.to_string()));
    };
    add("tigera-operator", &c.calico_chart_version);
    add("cilium", &c.cilium_chart_version);
    add("flannel", &c.flannel_chart_version);
    add("metrics-server", &c.metrics_server_chart_version);
    add("kube-prometheus-stack", &c.monitoring_chart_version);
    add("ingress-nginx", &c.ingress_nginx_chart_version);
    add("traefik", &c.traefik_chart_version);
    add("csi-driver-nfs", &c.nfs_csi_chart_version);
    add("gpu-operator", &c.gpu_operator_chart_version);
    for (name, default, by_minor) in [
        (
            "openstack-cloud-controller-manager",
            &c.ccm_chart_version,
            &c.ccm_chart_versions,
        ),
        (
            "openstack-cinder-csi",
            &c.cinder_csi_chart_version,
            &c.cinder_csi_chart_versions,
        ),
        (
            "openstack-manila-csi",
            &c.manila_csi_chart_version,
            &c.manila_csi_chart_versions,
        ),
    ] {
        add(name, default);
        for v in by_minor.values() {
            add(name, v);
        }
    }
    out
}

/// The project's test chart packaged as chart `name` at `version` (the `.tgz` Helm fetches: the
/// chart's files under a directory of its name).
fn package(name: &str, version: &str) -> Vec<u8> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/realstack/charts/addon");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    let chart_yaml = std::fs::read_to_string(source.join("Chart.yaml"))
        .unwrap()
        .replace("\nname: addon\n", &format!("\nname: {name}\n"))
        .replace("\nversion: 0.0.0\n", &format!("\nversion: {version}\n"));
    assert!(chart_yaml.contains(&format!("version: {version}\n")));
    std::fs::write(dir.join("Chart.yaml"), chart_yaml).unwrap();
    for file in ["values.yaml", "templates/configmap.yaml"] {
        std::fs::copy(source.join(file), dir.join(file)).unwrap();
    }
    let tgz = tmp.path().join("chart.tgz");
    let out = std::process::Command::new("tar")
        .arg("-C")
        .arg(tmp.path())
        .arg("-czf")
        .arg(&tgz)
        .arg(name)
        .output()
        .expect("running tar");
    assert!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&tgz).unwrap()
}

/// A Helm chart repository on loopback: `<url>/index.yaml` and one `.tgz` per chart; what was
/// asked of it is kept.
struct ChartRepo {
    url: String,
    requested: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone)]
struct RepoState {
    files: Arc<BTreeMap<String, Vec<u8>>>,
    requested: Arc<Mutex<Vec<String>>>,
}

async fn repo_file(State(st): State<RepoState>, UrlPath(file): UrlPath<String>) -> Response {
    st.requested.lock().unwrap().push(file.clone());
    match st.files.get(&file) {
        Some(body) => {
            let kind = if file.ends_with(".yaml") {
                "application/x-yaml"
            } else {
                "application/gzip"
            };
            ([(header::CONTENT_TYPE, kind)], body.clone()).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

impl ChartRepo {
    /// Serves `charts` (name, version) under `http://127.0.0.1:<port>/charts`.
    async fn serve(charts: &BTreeSet<(String, String)>) -> ChartRepo {
        let mut files = BTreeMap::new();
        let mut entries: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (name, version) in charts {
            let tgz = package(name, version);
            let file = format!("{name}-{version}.tgz");
            entries.entry(name.clone()).or_default().push(json!({
                "apiVersion": "v2", "name": name, "version": version, "type": "application",
                "description": "magnum-capi real-stack test chart",
                "urls": [file], "digest": hex::encode(sha2::Sha256::digest(&tgz)),
                "created": "2026-01-01T00:00:00Z",
            }));
            files.insert(file, tgz);
        }
        // JSON is YAML: Helm reads the index as it is.
        let index = json!({"apiVersion": "v1", "entries": entries,
                           "generated": "2026-01-01T00:00:00Z"});
        files.insert("index.yaml".into(), index.to_string().into_bytes());
        let requested = Arc::new(Mutex::new(Vec::new()));
        let state = RepoState {
            files: Arc::new(files),
            requested: requested.clone(),
        };
        let app = Router::new()
            .route("/charts/{file}", get(repo_file))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ChartRepo {
            url: format!("http://127.0.0.1:{port}/charts"),
            requested,
        }
    }

    fn requested(&self) -> Vec<String> {
        self.requested.lock().unwrap().clone()
    }
}

const ADDONS: &str = "addons.cluster.x-k8s.io/v1alpha1";

fn api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let ar = magnum_capi::capi::apply::resource(ADDONS, kind);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The cluster's HelmReleaseProxies (CAAPH labels them with the Cluster's name), as JSON.
async fn release_proxies(admin: &kube::Client, ns: &str, cluster: &str) -> Vec<Value> {
    let lp = ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}"));
    api(admin, ns, "HelmReleaseProxy")
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .into_iter()
                .map(|o| serde_json::to_value(o).unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// Condition `t` of `obj`.
fn condition<'a>(obj: &'a Value, t: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

/// The add-on a release proxy is for: its HelmChartProxy's name without `<cluster>-`.
fn addon_of(hrp: &Value, cluster: &str) -> String {
    let proxy =
        hrp["metadata"]["labels"]["helmreleaseproxy.addons.cluster.x-k8s.io/helmchartproxy-name"]
            .as_str()
            .unwrap_or_default();
    proxy
        .strip_prefix(&format!("{cluster}-"))
        .unwrap_or(proxy)
        .to_string()
}

/// A client of the workload cluster's API (the node agent's) through the kubeconfig KCP wrote
/// for it.
async fn workload_client(admin: &kube::Client, ns: &str, cluster: &str) -> kube::Client {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), ns);
    let secret = secrets.get(&format!("{cluster}-kubeconfig")).await.unwrap();
    let value = &secret.data.unwrap()["value"].0;
    let kc = Kubeconfig::from_yaml(std::str::from_utf8(value).unwrap()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// What was seen of one cluster's add-ons while it came up: each release proxy's
/// `ClusterAvailable` and `HelmReleaseReady` reasons as CAAPH wrote them, and magnum-capi's
/// `addon.*` entries of `health_status_reason`.
#[derive(Default, Debug)]
struct Seen {
    proxies: BTreeSet<String>,
    health: BTreeSet<String>,
}

impl Seen {
    fn record(&mut self, hrps: &[Value], cluster: &str, reason: &Value) {
        for h in hrps {
            let r = |t: &str| {
                condition(h, t)
                    .and_then(|c| c["reason"].as_str())
                    .unwrap_or("-")
                    .to_string()
            };
            self.proxies.insert(format!(
                "{}: ClusterAvailable={} HelmReleaseReady={}",
                addon_of(h, cluster),
                r("ClusterAvailable"),
                r("HelmReleaseReady")
            ));
        }
        for (k, v) in reason.as_object().into_iter().flatten() {
            if k.starts_with("addon.") {
                self.health
                    .insert(format!("{k}: {}", v.as_str().unwrap_or_default()));
            }
        }
    }
}

/// Records, until aborted, what the release proxies of `cluster` (magnum-capi's cluster at
/// `url`) say and what magnum-capi makes of them.
fn record_addons(
    admin: kube::Client,
    ns: String,
    cluster: String,
    url: String,
    token: String,
) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let http = crate::common::http();
        loop {
            let hrps = release_proxies(&admin, &ns, &cluster).await;
            let body: Value = match http
                .get(&url)
                .header("x-auth-token", &token)
                .header("openstack-api-version", "container-infra latest")
                .send()
                .await
            {
                Ok(r) => r.json().await.unwrap_or_default(),
                Err(_) => Value::Null,
            };
            seen.lock()
                .unwrap()
                .record(&hrps, &cluster, &body["health_status_reason"]);
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    (out, task)
}

/// The add-ons of a cluster of the realstack template (calico, the OpenStack cloud provider,
/// Cinder CSI, metrics-server), as `health_status_reason` names them.
const DEFAULT_ADDONS: [&str; 4] = ["ccm", "cni", "csi-cinder", "metrics-server"];

/// A version of the CNI chart the repository does not have.
const MISSING_CALICO: &str = "v3.99.0";

/// Real CAAPH installs every add-on of a cluster into its workload API from the loopback chart
/// repository: each HelmReleaseProxy ends `Ready=True` with its release `deployed`, the release
/// (Helm's `sh.helm.release.v1.*` Secret) and the chart's ConfigMap, with the values magnum-capi
/// rendered, are in the workload cluster, and magnum-capi reports every add-on `Ready`. A second
/// cluster whose `calico_tag` names a chart version the repository lacks gets CAAPH's real
/// failure (`HelmInstallOrUpgradeFailed`, Helm's own "not found in … repository"), and
/// magnum-capi's `health_status_reason` carries exactly that message for the CNI while its other
/// add-ons are `Ready`. Both clusters are then deleted with their releases installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caaph_installs_the_addons_into_the_workload_cluster_and_its_failures_reach_health() {
    let s: &RealStack = stack().await;
    let (ks, _) = crate::common::stack::parts().await;
    let config = CapiConfig::default();
    let charts = project_charts(&config);
    assert!(
        !charts.contains(&("tigera-operator".to_string(), MISSING_CALICO.to_string())),
        "{charts:?}"
    );
    let repo = ChartRepo::serve(&charts).await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(0, &kubeconfig, &repo.url, "").await;
    let token = ks.token("alice", "alpha").await;
    let t = realstack_template(&served, &token, "addons", KUBE_IMAGE, "m1.large").await;
    let good = create_cluster(&served, &token, "addons", &t, json!({})).await;
    let bad = create_cluster(
        &served,
        &token,
        "addons-missing",
        &t,
        json!({"labels": {"calico_tag": MISSING_CALICO}}),
    )
    .await;
    let good_path = format!("/v1/clusters/{good}");
    let bad_path = format!("/v1/clusters/{bad}");
    let admin = s.admin().await;
    let ns = format!("magnum-{}", ks.project_id("alpha"));
    let good_name = magnum_capi::capi::capi_name(good.parse().unwrap());
    let bad_name = magnum_capi::capi::capi_name(bad.parse().unwrap());
    let (coming_up, recorder) = record_addons(
        admin.clone(),
        ns.clone(),
        good_name.clone(),
        served.url(&good_path),
        token.clone(),
    );
    wait_for_status(&served, &token, &good_path, "CREATE_COMPLETE").await;
    wait_for_status(&served, &token, &bad_path, "CREATE_COMPLETE").await;

    // Every release proxy of the good cluster: installed, Ready, its release deployed.
    let proxies = until_within(
        REAL_DEADLINE,
        "the add-ons' releases to be deployed",
        || async {
            let hrps = release_proxies(&admin, &ns, &good_name).await;
            let ready = hrps.len() == DEFAULT_ADDONS.len()
                && hrps.iter().all(|h| {
                    condition(h, "Ready").is_some_and(|c| c["status"] == "True")
                        && h["status"]["status"] == "deployed"
                });
            ready.then_some(hrps)
        },
    )
    .await;
    let mut addons: Vec<String> = proxies.iter().map(|h| addon_of(h, &good_name)).collect();
    addons.sort();
    assert_eq!(addons, DEFAULT_ADDONS, "{proxies:#?}");
    for h in &proxies {
        let ready = condition(h, "HelmReleaseReady").unwrap();
        assert_eq!(
            (&ready["status"], &ready["reason"]),
            (&json!("True"), &json!("Ready")),
            "{h:#}"
        );
        assert_eq!(
            condition(h, "ClusterAvailable").unwrap()["status"],
            "True",
            "{h:#}"
        );
        assert_eq!(h["status"]["revision"], 1, "{h:#}");
    }

    // What Helm left in the workload cluster: the release record and the chart's object, with
    // the values magnum-capi rendered into the HelmChartProxy.
    let workload = workload_client(&admin, &ns, &good_name).await;
    for h in &proxies {
        let spec = &h["spec"];
        let release = spec["releaseName"].as_str().unwrap();
        let release_ns = spec["namespace"].as_str().unwrap();
        let chart = spec["chartName"].as_str().unwrap();
        let version = spec["version"].as_str().unwrap();
        assert!(charts.contains(&(chart.to_string(), version.to_string())));
        let secrets: Api<Secret> = Api::namespaced(workload.clone(), release_ns);
        let record = secrets
            .get(&format!("sh.helm.release.v1.{release}.v1"))
            .await
            .unwrap_or_else(|e| panic!("{release}'s release record in {release_ns}: {e}"));
        let labels = record.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("owner").map(String::as_str), Some("helm"));
        assert_eq!(labels.get("status").map(String::as_str), Some("deployed"));
        let cms: Api<ConfigMap> = Api::namespaced(workload.clone(), release_ns);
        let cm = cms
            .get(&format!("{release}-addon"))
            .await
            .unwrap_or_else(|e| panic!("{release}'s ConfigMap in {release_ns}: {e}"));
        let data = cm.data.unwrap_or_default();
        assert_eq!(data["chart"], format!("{chart}-{version}"));
        let tgz = format!("{chart}-{version}.tgz");
        assert!(repo.requested().contains(&tgz), "{tgz} was not fetched");
        let values: Value = serde_json::from_str(&data["values.json"]).unwrap();
        match addon_of(h, &good_name).as_str() {
            "ccm" => assert_eq!(values["cluster"]["name"], good_name.as_str(), "{values}"),
            "csi-cinder" => assert_eq!(values["clusterID"], good_name.as_str(), "{values}"),
            "metrics-server" => assert!(
                values["args"]
                    .as_array()
                    .is_some_and(|a| a.contains(&json!("--kubelet-insecure-tls"))),
                "{values}"
            ),
            "cni" => assert_eq!(values["installation"]["cni"]["type"], "Calico", "{values}"),
            other => panic!("unexpected add-on {other}"),
        }
    }
    let requested = repo.requested();
    assert!(requested.iter().any(|f| f == "index.yaml"), "{requested:?}");

    // magnum-capi reads the same: every add-on Ready.
    let body = until_within(
        REAL_DEADLINE,
        "magnum-capi to report the add-ons ready",
        || async {
            let (_, b) = served.call(&token, Method::GET, &good_path, None).await;
            let reason = &b["health_status_reason"];
            DEFAULT_ADDONS
                .iter()
                .all(|a| reason[format!("addon.{a}")] == "Ready")
                .then_some(b)
        },
    )
    .await;
    assert_eq!(body["health_status"], "HEALTHY", "{body}");
    // On the way there, CAAPH said what it says of every cluster coming up (the kubeconfig
    // Secret not written yet, `GetKubeconfigFailed`), and magnum-capi never took that, or
    // anything else CAAPH said, for a failed add-on.
    let coming_up = std::mem::take(&mut *coming_up.lock().unwrap());
    eprintln!("the add-ons of the healthy cluster as they came up: {coming_up:#?}");
    assert!(
        coming_up.health.iter().all(|h| !h.contains("Failed")),
        "{coming_up:#?}"
    );

    // The cluster whose CNI chart version is missing: CAAPH's real failure, word for word.
    let failed = until_within(
        REAL_DEADLINE,
        "CAAPH to fail the missing CNI chart",
        || async {
            let hrps = release_proxies(&admin, &ns, &bad_name).await;
            let cni = hrps.into_iter().find(|h| addon_of(h, &bad_name) == "cni")?;
            let c = condition(&cni, "HelmReleaseReady")?;
            (c["status"] == "False" && c["reason"] == "HelmInstallOrUpgradeFailed").then_some(cni)
        },
    )
    .await;
    // Helm never got as far as a release: no release status, no revision.
    assert!(failed["status"]["status"].is_null(), "{failed:#}");
    assert!(failed["status"]["revision"].is_null(), "{failed:#}");
    let message = condition(&failed, "HelmReleaseReady").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!(
            "chart \"tigera-operator\" version \"{MISSING_CALICO}\" not found in {} repository",
            repo.url
        )),
        "{failed:#}"
    );
    let body = until_within(
        REAL_DEADLINE,
        "magnum-capi to report the CNI failed",
        || async {
            let (_, b) = served.call(&token, Method::GET, &bad_path, None).await;
            (b["health_status_reason"]["addon.cni"] == format!("Failed: {message}")).then_some(b)
        },
    )
    .await;
    assert_eq!(body["health_status"], "UNHEALTHY", "{body}");
    let others = until_within(
        REAL_DEADLINE,
        "the other add-ons of that cluster to be ready",
        || async {
            let (_, b) = served.call(&token, Method::GET, &bad_path, None).await;
            let reason = b["health_status_reason"].clone();
            DEFAULT_ADDONS
                .iter()
                .filter(|a| **a != "cni")
                .all(|a| reason[format!("addon.{a}")] == "Ready")
                .then_some(reason)
        },
    )
    .await;
    eprintln!("failing cluster: {others}");

    for path in [&good_path, &bad_path] {
        let (st, b) = served.call(&token, Method::DELETE, path, None).await;
        assert_eq!(st, 204, "{b}");
    }
    for path in [&good_path, &bad_path] {
        wait_for_status(&served, &token, path, "DELETE_COMPLETE").await;
    }
    recorder.abort();
    // CAAPH let its release proxies go (its finalizer uninstalls the release first).
    for name in [&good_name, &bad_name] {
        until_within(
            REAL_DEADLINE,
            &format!("{name}'s release proxies to be gone"),
            || async {
                release_proxies(&admin, &ns, name)
                    .await
                    .is_empty()
                    .then_some(())
            },
        )
        .await;
    }
}

/// The simulator's CAAPH (`src/simkube/reconcile/addons.rs`) goes the real one's way, as the
/// test above saw it: a release proxy per add-on, named from CAAPH's generateName
/// (`<chart>-<cluster>-` cut to 58 characters, then 5), exists from the moment the Cluster does
/// and says `PreparingToHelmInstall` while it waits for the cluster, carries its HelmChartProxy's
/// values, and ends `Ready` with its release deployed; magnum-capi calls no add-on failed on the
/// way and every one `Ready` at the end.
#[tokio::test]
async fn the_simulated_caaph_goes_the_real_ones_way() {
    use crate::common::ALICE;
    use crate::common::capi::{capi_app_on, template};
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    // Every version of every release proxy, from a watch opened before the cluster exists.
    let versions = Arc::new(Mutex::new(Vec::<Value>::new()));
    let watching = {
        let versions = versions.clone();
        let hrps: Api<DynamicObject> = Api::all_with(
            app.sim.client(),
            &magnum_capi::capi::apply::resource(ADDONS, "HelmReleaseProxy"),
        );
        let stream = hrps.watch(&WatchParams::default(), "0").await.unwrap();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Added(o) | WatchEvent::Modified(o) = event {
                    versions
                        .lock()
                        .unwrap()
                        .push(serde_json::to_value(o).unwrap());
                }
            }
        })
    };
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "addons", "cluster_template_id": ct, "master_count": 1,
                   "node_count": 1}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    let cluster = magnum_capi::capi::capi_name(c.parse().unwrap());
    let res = magnum_capi::simkube::Resource::of(ADDONS, "HelmReleaseProxy");
    let selector = format!("cluster.x-k8s.io/cluster-name={cluster}");
    let seen = Mutex::new(Seen::default());
    let hrps = until_within(
        REAL_DEADLINE,
        "every add-on deployed and reported ready",
        || async {
            let hrps: Vec<Value> = app
                .sim
                .store()
                .list(&res, None, &selector)
                .unwrap()
                .iter()
                .map(|o| (**o).clone())
                .collect();
            let b = t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body;
            let reason = &b["health_status_reason"];
            seen.lock().unwrap().record(&[], &cluster, reason);
            let done = DEFAULT_ADDONS
                .iter()
                .all(|a| reason[format!("addon.{a}")] == "Ready")
                && hrps.iter().all(|h| h["status"]["status"] == "deployed");
            done.then_some(hrps)
        },
    )
    .await;
    watching.abort();
    let versions = std::mem::take(&mut *versions.lock().unwrap());
    seen.lock()
        .unwrap()
        .record(&versions, &cluster, &Value::Null);
    let seen = seen.into_inner().unwrap();
    assert!(
        seen.health.iter().all(|h| !h.contains("Failed")),
        "{seen:#?}"
    );
    for addon in DEFAULT_ADDONS {
        assert!(
            seen.proxies
                .iter()
                .any(|p| p.starts_with(&format!("{addon}: "))
                    && p.ends_with("HelmReleaseReady=PreparingToHelmInstall")),
            "{addon} never waited for the cluster: {seen:#?}"
        );
    }
    assert_eq!(hrps.len(), DEFAULT_ADDONS.len(), "{hrps:#?}");
    let hcps = app
        .sim
        .store()
        .list(
            &magnum_capi::simkube::Resource::of(ADDONS, "HelmChartProxy"),
            None,
            "",
        )
        .unwrap();
    for h in &hrps {
        let chart = h["spec"]["chartName"].as_str().unwrap();
        let prefix: String = format!("{chart}-{cluster}-").chars().take(58).collect();
        let name = h["metadata"]["name"].as_str().unwrap();
        assert!(
            name.starts_with(&prefix) && name.len() == prefix.len() + 5,
            "{name}"
        );
        let proxy =
            h["metadata"]["labels"]["helmreleaseproxy.addons.cluster.x-k8s.io/helmchartproxy-name"]
                .as_str()
                .unwrap();
        let hcp = hcps
            .iter()
            .find(|p| p["metadata"]["name"] == proxy)
            .unwrap();
        assert_eq!(h["spec"]["values"], hcp["spec"]["valuesTemplate"], "{h:#}");
        assert_eq!(h["spec"]["options"], hcp["spec"]["options"], "{h:#}");
        assert_eq!(
            condition(h, "HelmReleaseReady").unwrap()["reason"],
            "Ready",
            "{h:#}"
        );
    }
}

/// The CNI chart of the first template of the upgrade test (the repository has it besides the
/// default).
const OLD_CALICO: &str = "v3.30.2";

/// A template on the real stack (as [`realstack_template`]) with `labels`; its uuid.
async fn template_with_labels(
    served: &Production,
    token: &str,
    name: &str,
    image: &str,
    labels: Value,
) -> String {
    crate::realstack::realstack_template_with(
        served,
        token,
        name,
        image,
        "m1.large",
        json!({"labels": labels}),
    )
    .await
}

/// One look at the upgrade: the version the control plane runs, and per add-on the chart
/// version of its HelmChartProxy and whether its release proxy is Ready on that version.
#[derive(Debug, Clone, Default)]
struct Sample {
    control_plane: String,
    proxies: BTreeMap<String, String>,
    ready: BTreeMap<String, bool>,
}

async fn sample(admin: &kube::Client, ns: &str, cluster: &str) -> Sample {
    let mut out = Sample::default();
    let kcp_ar = magnum_capi::capi::apply::resource(
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
    );
    let kcps: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &kcp_ar);
    if let Ok(k) = kcps.get(&format!("{cluster}-control-plane")).await {
        let v = serde_json::to_value(k).unwrap();
        out.control_plane = v["status"]["version"].as_str().unwrap_or_default().into();
    }
    let lp = ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}"));
    for p in api(admin, ns, "HelmChartProxy")
        .list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let v = serde_json::to_value(p).unwrap();
        let name = v["metadata"]["name"].as_str().unwrap_or_default();
        let key = name.strip_prefix(&format!("{cluster}-")).unwrap_or(name);
        out.proxies.insert(
            key.into(),
            v["spec"]["version"].as_str().unwrap_or_default().into(),
        );
    }
    for h in release_proxies(admin, ns, cluster).await {
        let key = addon_of(&h, cluster);
        let on = out.proxies.get(&key).map(String::as_str) == h["spec"]["version"].as_str();
        let ready = condition(&h, "Ready").is_some_and(|c| c["status"] == "True");
        out.ready.insert(key, on && ready);
    }
    out
}

/// Issue 46 item 2 on real Cluster API: an upgrade to a template of the next minor whose CNI
/// (the cluster took `calico_tag` from its template) and cloud-provider and Cinder CSI charts
/// (they follow the minor) differ. Real KCP rolls the control plane first, and only once it runs
/// the new version does magnum-capi hand the new CNI chart to real CAAPH, which upgrades the
/// Helm release in the workload cluster; the cloud provider follows once the CNI's release is
/// Ready, the CSI after it; the cluster ends `UPDATE_COMPLETE` with every release on its new
/// chart (revision 2) and the workload's objects from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_rolls_the_addons_on_real_caaph_after_the_control_plane_the_cni_first() {
    let s: &RealStack = stack().await;
    let (ks, cloud) = crate::common::stack::parts().await;
    let config = CapiConfig::default();
    let mut charts = project_charts(&config);
    charts.insert(("tigera-operator".to_string(), OLD_CALICO.to_string()));
    let repo = ChartRepo::serve(&charts).await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(0, &kubeconfig, &repo.url, "").await;
    let token = ks.token("alice", "alpha").await;
    let old = template_with_labels(
        &served,
        &token,
        "addons-up-1",
        KUBE_IMAGE,
        json!({"calico_tag": OLD_CALICO}),
    )
    .await;
    let image = "11111111-0000-4000-8000-0000000000a3";
    cloud.add_image(
        json!({"id": image, "name": "ubuntu-2204-kube-v1.31.6-addons",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.31.6",
        "created_at": "2024-09-01T12:00:00Z"}),
    );
    let new = template_with_labels(&served, &token, "addons-up-2", image, json!({})).await;
    let c = create_cluster(&served, &token, "addons-up", &old, json!({})).await;
    let path = format!("/v1/clusters/{c}");
    wait_for_status(&served, &token, &path, "CREATE_COMPLETE").await;
    let admin = s.admin().await;
    let ns = format!("magnum-{}", ks.project_id("alpha"));
    let name = magnum_capi::capi::capi_name(c.parse().unwrap());
    let before = until_within(REAL_DEADLINE, "every add-on Ready", || async {
        let s = sample(&admin, &ns, &name).await;
        (s.ready.len() == DEFAULT_ADDONS.len() && s.ready.values().all(|r| *r)).then_some(s)
    })
    .await;
    assert_eq!(before.proxies["cni"], OLD_CALICO, "{before:?}");

    // Every second, what the control plane runs and where the add-ons are.
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let recorder = {
        let (admin, ns, name, samples) = (admin.clone(), ns.clone(), name.clone(), samples.clone());
        tokio::spawn(async move {
            loop {
                let s = sample(&admin, &ns, &name).await;
                samples.lock().unwrap().push(s);
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        })
    };
    let (st, b) = served
        .call(
            &token,
            Method::POST,
            &format!("{path}/actions/upgrade"),
            Some(json!({"cluster_template": new})),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let done = wait_for_status(&served, &token, &path, "UPDATE_COMPLETE").await;
    assert_eq!(done["coe_version"], "v1.31.6", "{done}");
    let after = until_within(REAL_DEADLINE, "every add-on Ready again", || async {
        let s = sample(&admin, &ns, &name).await;
        (s.ready.len() == DEFAULT_ADDONS.len() && s.ready.values().all(|r| *r)).then_some(s)
    })
    .await;
    recorder.abort();
    let samples = samples.lock().unwrap().clone();
    assert_eq!(
        after.proxies["cni"], config.calico_chart_version,
        "{after:?}"
    );
    for key in ["ccm", "csi-cinder"] {
        assert_ne!(after.proxies[key], before.proxies[key], "{key}: {after:?}");
    }
    // The order: each add-on's new chart only once what it waits for is there.
    let first = |key: &str| {
        samples
            .iter()
            .find(|s| s.proxies.get(key) == after.proxies.get(key))
            .cloned()
            .unwrap_or_else(|| panic!("{key}'s new chart never seen: {samples:#?}"))
    };
    let cni = first("cni");
    assert_eq!(
        cni.control_plane, "v1.31.6",
        "the CNI before the control plane: {cni:?}"
    );
    let ccm = first("ccm");
    assert_eq!(
        ccm.ready.get("cni"),
        Some(&true),
        "the cloud provider before the CNI: {ccm:?}"
    );
    let csi = first("csi-cinder");
    assert_eq!(
        csi.ready.get("ccm"),
        Some(&true),
        "the CSI before the cloud provider: {csi:?}"
    );
    // In the workload cluster: each release upgraded (revision 2), the chart's object from the
    // new chart; magnum-capi says every add-on is Ready.
    let workload = workload_client(&admin, &ns, &name).await;
    for h in release_proxies(&admin, &ns, &name).await {
        let key = addon_of(&h, &name);
        if !["cni", "ccm", "csi-cinder"].contains(&key.as_str()) {
            continue;
        }
        assert_eq!(h["status"]["status"], "deployed", "{h:#}");
        assert_eq!(h["status"]["revision"], 2, "{h:#}");
        let spec = &h["spec"];
        let release = spec["releaseName"].as_str().unwrap();
        let cms: Api<ConfigMap> =
            Api::namespaced(workload.clone(), spec["namespace"].as_str().unwrap());
        let cm = cms.get(&format!("{release}-addon")).await.unwrap();
        assert_eq!(
            cm.data.unwrap_or_default()["chart"],
            format!(
                "{}-{}",
                spec["chartName"].as_str().unwrap(),
                spec["version"].as_str().unwrap()
            )
        );
    }
    let (_, shown) = served.call(&token, Method::GET, &path, None).await;
    for key in DEFAULT_ADDONS {
        assert_eq!(
            shown["health_status_reason"][format!("addon.{key}")],
            "Ready",
            "{shown}"
        );
    }
    let (st, b) = served.call(&token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(&served, &token, &path, "DELETE_COMPLETE").await;
}
