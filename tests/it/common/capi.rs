//! The service with the Cluster API driver on a simulated management cluster: real Postgres,
//! real Keystone (optional), the real `kube` client over HTTP to the in-process API, the CAPI
//! simulator playing the controllers, the watchers and the status writer.

use std::sync::Arc;
use std::time::Duration;

use magnum_capi::app::{App, AuthMode};
use magnum_capi::config::{Config, DriverKind};
use magnum_capi::openstack::Keystone as KeystoneClient;
use magnum_capi::simkube::{SimCluster, SimOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{ALICE, TestApp, fresh_database, test_config};

/// The CRD directory beside the checkout (`MAGNUM_CAPI_CRD_DIR` overrides); its absence fails.
pub fn crd_dir() -> std::path::PathBuf {
    let dir = std::env::var_os("MAGNUM_CAPI_CRD_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/crds"));
    assert!(
        dir.join("cluster.x-k8s.io_clusters.yaml").exists(),
        "the CAPI/CAPO CRDs are missing: {} (set MAGNUM_CAPI_CRD_DIR)",
        dir.display()
    );
    dir
}

/// A service instance (API, worker, watchers, status writer) on a simulated management cluster.
pub struct CapiApp {
    pub t: TestApp,
    pub sim: Arc<SimCluster>,
    /// The CAPI driver's runtime (for tests that call its maintenance directly).
    pub capi: Arc<magnum_capi::capi::driver::Capi>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl CapiApp {
    /// Starts the operation worker of an app built with `worker_enabled = false`.
    pub fn start_worker(&mut self) {
        let state = self.t.state.clone();
        let rx = self.stop.subscribe();
        self.tasks.push(tokio::spawn(magnum_capi::worker::run(
            state.clone(),
            state.backend.clone(),
            format!("test-worker-{}", uuid::Uuid::new_v4().simple()),
            rx,
        )));
    }

    /// Stops the worker, watchers and writer, as a crash would (nothing is handed back).
    pub async fn kill(mut self) -> (String, Arc<SimCluster>) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        let _ = self.stop.send(true);
        (self.t.url.clone(), self.sim.clone())
    }
}

impl Drop for CapiApp {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A bare (no controllers) simulated API server validating with the CRDs, with namespace `ns`.
pub async fn bare_sim(ns: &str) -> SimCluster {
    let sim = SimCluster::start(SimOptions {
        controllers: false,
        validator: Some(magnum_capi::server::crd_validator(&crd_dir()).unwrap()),
        ..SimOptions::for_tests()
    })
    .await
    .unwrap();
    sim.store().ensure_namespace(ns).unwrap();
    sim
}

/// (namespace, CAPI name) of ALICE's cluster `c` on the management cluster.
pub fn capi_names(c: &str) -> (String, String) {
    let uuid = uuid::Uuid::parse_str(c).unwrap();
    (
        magnum_capi::capi::namespace("magnum", ALICE.project),
        magnum_capi::capi::capi_name(uuid),
    )
}

/// Options of a simulated cluster for tests: fast steps, CRD validation of every write.
pub fn sim_options(step_ms: u64) -> SimOptions {
    SimOptions {
        step: Duration::from_millis(step_ms),
        validator: Some(magnum_capi::server::crd_validator(&crd_dir()).expect("CRD schemas")),
        ..SimOptions::default()
    }
}

/// Database `url` (fresh when `None`) and a configuration with the CAPI driver on it, its
/// simulated management clusters stepping fast.
async fn capi_config(url: Option<String>) -> (String, Config) {
    let url = match url {
        Some(u) => u,
        None => fresh_database().await,
    };
    let mut cfg = test_config(&url);
    cfg.driver.kind = DriverKind::Capi;
    cfg.capi.sim_step_ms = super::wait::SIM_STEP_MS;
    (url, cfg)
}

/// Builds an instance on database `url` (fresh when `None`) and management cluster `sim` (new
/// when `None`). `keystone`: authenticate with the real Keystone (and create real application
/// credentials) instead of dev headers.
pub async fn capi_app_on(
    url: Option<String>,
    sim: Option<Arc<SimCluster>>,
    keystone: bool,
    tweak: impl FnOnce(&mut Config),
) -> CapiApp {
    let (url, mut cfg) = capi_config(url).await;
    if keystone {
        let (ks, _) = super::stack::parts().await;
        cfg.keystone = ks.service_config();
    }
    tweak(&mut cfg);
    let sim = match sim {
        Some(s) => s,
        None => Arc::new(
            SimCluster::start(sim_options(cfg.capi.sim_step_ms))
                .await
                .expect("simulated management cluster"),
        ),
    };
    let auth = if keystone {
        AuthMode::Keystone(Arc::new(
            KeystoneClient::new(&cfg.keystone, &cfg.openstack).expect("keystone client"),
        ))
    } else {
        AuthMode::DevHeaders
    };
    let capi = magnum_capi::server::capi_runtime(&cfg, &auth, sim.client()).expect("capi runtime");
    let pool = magnum_capi::db::connect(&url, &cfg.database)
        .await
        .expect("pool");
    let backend = magnum_capi::server::backend_for(&cfg, Some(&capi));
    let state = App::with_backend(pool, cfg, auth, backend);
    let (stop, rx) = watch::channel(false);
    let mut tasks = magnum_capi::server::spawn_capi(&state, &capi, rx.clone());
    // `[operations] worker_enabled = false`: the test starts a worker itself (`start_worker`).
    if state.config.operations.worker_enabled {
        tasks.push(tokio::spawn(magnum_capi::worker::run(
            state.clone(),
            state.backend.clone(),
            format!("test-worker-{}", uuid::Uuid::new_v4().simple()),
            rx,
        )));
    }
    CapiApp {
        t: TestApp {
            state,
            url,
            stop: None,
        },
        sim,
        capi,
        stop,
        tasks,
    }
}

/// A Secret's value for `key`, from `data` (base64) or `stringData`.
pub fn secret_text(secret: &Value, key: &str) -> String {
    use base64::Engine;
    if let Some(v) = secret["data"][key].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v)
            .expect("base64 secret data");
        return String::from_utf8(bytes).expect("utf-8 secret");
    }
    secret["stringData"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in the secret"))
        .to_string()
}

/// Objects of one kind on the simulated cluster carrying our label for `cluster`.
pub fn objects(app: &CapiApp, api_version: &str, kind: &str, cluster: &str) -> Vec<Value> {
    let res = magnum_capi::simkube::Resource::of(api_version, kind);
    app.sim
        .store()
        .list(
            &res,
            None,
            &format!("magnum.openstack.org/cluster-uuid={cluster}"),
        )
        .expect("label selector")
        .iter()
        .map(|v| (**v).clone())
        .collect()
}

/// The cluster's API is served by a load balancer without a floating IP (what the cluster
/// dialog's defaults give, issue 44): the OpenStackCluster says so.
pub fn assert_private_api_load_balancer(app: &CapiApp, cluster: &str) {
    let (api_version, kind) = magnum_capi::capi::kinds::OPENSTACK_CLUSTER;
    let osc = objects(app, api_version, kind, cluster)
        .pop()
        .expect("the OpenStackCluster");
    assert_eq!(
        osc["spec"]["apiServerLoadBalancer"]["enabled"], true,
        "{osc}"
    );
    assert_eq!(osc["spec"]["disableAPIServerFloatingIP"], true, "{osc}");
}

/// The application credential (id, secret) in the cluster's cloud-credentials Secret.
pub fn secret_credential(app: &CapiApp, cluster: &str) -> (String, String) {
    let s = objects(app, "v1", "Secret", cluster)
        .into_iter()
        .find(|s| {
            s["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-cloud-credentials"))
        })
        .expect("credentials Secret");
    let clouds = secret_text(&s, "clouds.yaml");
    let field = |k: &str| {
        clouds
            .lines()
            .find_map(|l| l.trim().strip_prefix(k))
            .map(|s| s.trim().trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("no {k} in clouds.yaml"))
    };
    (
        field("application_credential_id:"),
        field("application_credential_secret:"),
    )
}

/// Whether an application credential obtains a token from the test Keystone.
pub async fn authenticates(id: &str, secret: &str) -> bool {
    let (status, _) = super::keystone::keystone()
        .request(
            "POST",
            "/auth/tokens",
            None,
            None,
            Some(serde_json::json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": {"id": id, "secret": secret}}}})),
        )
        .await
        .expect("POST /auth/tokens");
    status == 201
}

/// Every cluster, operation and nodegroup row as text (to check a secret never reached them).
pub async fn postgres_text(pool: &sqlx::PgPool) -> String {
    sqlx::query_scalar(
        "SELECT coalesce(string_agg(t, ' '), '') FROM (
            SELECT row_to_json(c)::text AS t FROM cluster c
            UNION ALL SELECT row_to_json(o)::text FROM operation o
            UNION ALL SELECT row_to_json(n)::text FROM nodegroup n) x",
    )
    .fetch_one(pool)
    .await
    .expect("dumping the rows")
}

/// A service instance over several simulated management clusters (`[[capi.management_clusters]]`
/// entries named as in `sims`, adjusted by `tweak`), with the worker, and per management
/// cluster the watchers, the status writer and the reachability probe.
pub struct FleetApp {
    pub t: TestApp,
    pub sims: Vec<(String, Arc<SimCluster>)>,
    pub members: Vec<Arc<magnum_capi::capi::driver::Capi>>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl FleetApp {
    /// The simulated management cluster `name`.
    pub fn sim(&self, name: &str) -> &Arc<SimCluster> {
        &self
            .sims
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no simulated management cluster {name}"))
            .1
    }
}

impl Drop for FleetApp {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts one simulated management cluster per name.
pub async fn start_sims(names: &[&str]) -> Vec<(String, Arc<SimCluster>)> {
    let mut sims = Vec::new();
    for n in names {
        let sim = SimCluster::start(sim_options(super::wait::SIM_STEP_MS))
            .await
            .expect("simulated management cluster");
        sims.push((n.to_string(), Arc::new(sim)));
    }
    sims
}

/// Builds an instance on database `url` (fresh when `None`) over `sims`.
pub async fn fleet_app_on(
    url: Option<String>,
    sims: &[(String, Arc<SimCluster>)],
    tweak: impl FnOnce(&mut Config),
) -> FleetApp {
    let (url, mut cfg) = capi_config(url).await;
    cfg.capi.probe_interval_secs = 1;
    cfg.capi.management_clusters = sims
        .iter()
        .map(|(n, _)| magnum_capi::config::ManagementClusterConfig::named(n))
        .collect();
    tweak(&mut cfg);
    let auth = AuthMode::DevHeaders;
    let members: Vec<_> = sims
        .iter()
        .enumerate()
        .map(|(i, (n, sim))| {
            magnum_capi::server::capi_runtime_named(&cfg, &auth, sim.client(), n, i == 0)
                .expect("capi runtime")
        })
        .collect();
    let pool = magnum_capi::db::connect(&url, &cfg.database)
        .await
        .expect("pool");
    let backend = magnum_capi::server::backend_for_members(&cfg, &members);
    let state = App::with_backend(pool, cfg, auth, backend);
    let (stop, rx) = watch::channel(false);
    let mut tasks = Vec::new();
    for m in &members {
        tasks.extend(magnum_capi::server::spawn_capi(&state, m, rx.clone()));
    }
    tasks.push(tokio::spawn(magnum_capi::worker::run(
        state.clone(),
        state.backend.clone(),
        format!("test-worker-{}", uuid::Uuid::new_v4().simple()),
        rx,
    )));
    FleetApp {
        t: TestApp {
            state,
            url,
            stop: None,
        },
        sims: sims.to_vec(),
        members,
        stop,
        tasks,
    }
}

/// Creates a template as ALICE for clusters on the simulated management cluster (an external
/// network, so a single master's API gets a floating IP); its uuid.
pub async fn template(t: &TestApp, name: &str, image: &str, kube_tag: &str) -> String {
    template_with(
        t,
        name,
        json!({"image_id": image, "labels": {"kube_tag": kube_tag}}),
    )
    .await
}

/// [`template`] of Kubernetes v1.33.5 with `fields` on top (their `labels` added to its own).
pub async fn template_with(t: &TestApp, name: &str, fields: Value) -> String {
    let mut body = json!({"name": name, "image_id": "ubuntu-2404-kube-v1.33.5",
        "coe": "kubernetes", "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
        "external_network_id": "public", "dns_nameserver": "8.8.8.8",
        "labels": {"kube_tag": "v1.33.5"}});
    for (k, v) in fields.as_object().into_iter().flatten() {
        match (k.as_str(), v.as_object()) {
            ("labels", Some(labels)) => {
                for (l, lv) in labels {
                    body["labels"][l] = lv.clone();
                }
            }
            _ => body[k] = v.clone(),
        }
    }
    let r = t.post(&ALICE, "/v1/clustertemplates", body).await;
    r.assert_status(201);
    r.body["uuid"].as_str().unwrap().to_string()
}

/// A kubeconfig for the plain-HTTP API at `server` (a simulated management cluster), written
/// into `dir` as `<name>.kubeconfig`, for the real binary's commands.
pub fn kubeconfig(dir: &std::path::Path, name: &str, server: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
             current-context: c\n"
        ),
    )
    .unwrap();
    path
}

/// A CSR (ECDSA P-256) with subject `O=system:masters, CN=admin`, as Terraform and
/// `coe cluster config` send.
pub fn admin_csr() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:masters");
    dn.push(rcgen::DnType::CommonName, "admin");
    params.distinguished_name = dn;
    params.serialize_request(&key).unwrap().pem().unwrap()
}
