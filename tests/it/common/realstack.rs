//! The real management stack (`tests/realstack/`): etcd, kube-apiserver, kube-controller-manager
//! and the CAPI, CABPK, KCP, CAPO and CAAPH managers with their webhooks, built from their pinned
//! Go modules by `tests/realstack/build.sh` (or found in its cache) and started once per test
//! binary on loopback by `stackctl`; gone with the process. Missing Go or a failed build fails
//! the tests that need it: they are never skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use super::keystone::private_dir;

const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// How long anything on the real stack may take ([`super::wait::until_within`]'s bound there):
/// real KCP and MachineSets roll machines one by one, each joining through the node agent (a CA
/// rotation rolls every machine three times); on a loaded 2-core machine that is minutes.
pub const REAL_DEADLINE: Duration = Duration::from_secs(480);

/// The running stack of this test process.
pub struct RealStack {
    /// The state directory: PKI, logs/, admin.kubeconfig, ready.json.
    pub dir: PathBuf,
    /// The admin's kubeconfig (system:masters, client certificate).
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:PORT`
    pub server: String,
    /// What stackctl wrote in ready.json.
    pub ready: Value,
    child: Mutex<Child>,
    _owner: std::fs::File,
}

impl Drop for RealStack {
    fn drop(&mut self) {
        if let Ok(mut c) = self.child.lock() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

static STACK: OnceLock<RealStack> = OnceLock::new();

/// The repository's `tests/realstack`.
pub fn realstack_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/realstack")
}

/// Builds the pinned stack (or finds it in the cache); the build directory.
pub fn build() -> PathBuf {
    go_build(&realstack_dir().join("build.sh"), "real stack")
}

/// Runs one of the Go test tier's build scripts (`tests/realstack/build.sh`,
/// `tests/clients/build.sh`); that directory.
pub fn go_build(script: &Path, what: &str) -> PathBuf {
    cached_build(script, what, "Go 1.26 and the Go module proxy")
}

/// Runs a build script of the test tiers (they build into `~/.cache/magnum-capi`, or find the
/// build there, and print its directory last); that directory. `needs` says what a failed build
/// lacks.
pub fn cached_build(script: &Path, what: &str, needs: &str) -> PathBuf {
    let t0 = Instant::now();
    let out = Command::new("bash")
        .arg(script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {} (is bash installed?): {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed ({}): the {what} needs {needs}",
        script.display(),
        out.status
    );
    let dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(str::trim)
        .map(PathBuf::from)
        .expect("the build script printed its directory");
    eprintln!("{what}: {} ({:.1?})", dir.display(), t0.elapsed());
    dir
}

/// The real stack of this process, started on first use (blocking; call it off the runtime, as
/// [`stack`] does).
pub fn realstack() -> &'static RealStack {
    STACK.get_or_init(|| {
        std::thread::spawn(RealStack::launch)
            .join()
            .unwrap_or_else(|_| panic!("starting the real stack panicked"))
    })
}

/// [`realstack`] from async code.
pub async fn stack() -> &'static RealStack {
    tokio::task::spawn_blocking(realstack)
        .await
        .expect("starting the real stack")
}

impl RealStack {
    fn launch() -> RealStack {
        let t0 = Instant::now();
        let build = build();
        let (dir, owner) = private_dir("magnum-capi-realstack-").expect("state directory");
        let log = std::fs::File::create(dir.join("stackctl.log")).expect("stackctl.log");
        let mut cmd = Command::new(build.join("bin/stackctl"));
        cmd.arg("up")
            .arg("--stack")
            .arg(&build)
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        let parent = nix::unistd::getpid();
        // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)?;
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child =
            magnum_capi::devdb::spawn_from_spawner_thread(cmd).expect("starting stackctl");
        let ready_file = dir.join("ready.json");
        let deadline = Instant::now() + READY_TIMEOUT;
        let ready: Value = loop {
            if let Ok(text) = std::fs::read_to_string(&ready_file) {
                break serde_json::from_str(&text).expect("ready.json");
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "stackctl exited ({status}) before the stack was ready:\n{}",
                    tail(&dir.join("stackctl.log"), 60)
                );
            }
            assert!(
                Instant::now() < deadline,
                "the real stack was not ready within {READY_TIMEOUT:?}:\n{}",
                tail(&dir.join("stackctl.log"), 60)
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!(
            "real stack at {} ready in {:.1?} (stackctl: {}); dir {}",
            ready["server"].as_str().unwrap_or("?"),
            t0.elapsed(),
            ready["started_in"].as_str().unwrap_or("?"),
            dir.display()
        );
        RealStack {
            kubeconfig: PathBuf::from(ready["kubeconfig"].as_str().expect("kubeconfig")),
            server: ready["server"].as_str().expect("server").to_string(),
            dir,
            ready,
            child: Mutex::new(child),
            _owner: owner,
        }
    }

    /// A client as the admin (system:masters).
    pub async fn admin(&self) -> kube::Client {
        client_of(config_of(&self.kubeconfig).await)
    }

    /// Writes a kubeconfig of the stack's apiserver that presents `token`; its path.
    pub fn kubeconfig_with_token(&self, token: &str, name: &str) -> PathBuf {
        let ca = std::fs::read(self.ready["ca_cert"].as_str().expect("ca_cert")).expect("CA");
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(ca);
        let doc = json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "realstack",
            "clusters": [{"name": "realstack", "cluster": {
                "server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "realstack", "context": {"cluster": "realstack", "user": name}}],
        });
        let path = self.dir.join(format!("{name}.kubeconfig"));
        // JSON is YAML: kubeconfig readers take it as it is. Written aside and renamed: tests
        // running side by side write the same identity's file while others read it.
        let aside = self.dir.join(format!(
            "{name}.kubeconfig.{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&aside, doc.to_string()).expect("kubeconfig");
        std::fs::rename(&aside, &path).expect("kubeconfig in place");
        path
    }

    /// The end of one part's log (`kube-apiserver`, `capi-core`, `capo`, …).
    pub fn log_tail(&self, part: &str, lines: usize) -> String {
        let path = self.ready["parts"][part]["log"]
            .as_str()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.join("logs").join(format!("{part}.log")));
        tail(&path, lines)
    }

    /// Creates (or keeps) a namespace for real. A request the apiserver answered nothing to (a
    /// connection dropped while a loaded machine starts the stack) is sent again until the
    /// deadline; a refusal fails at once.
    pub async fn namespace(&self, name: &str) {
        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.admin().await);
        let obj: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
        super::wait::until(&format!("namespace {name} created"), || async {
            match ns.create(&PostParams::default(), &obj).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Some(()),
                Err(kube::Error::Api(s)) => panic!("creating namespace {name}: {s}"),
                Err(e) => {
                    eprintln!("creating namespace {name}: {e}; again");
                    None
                }
            }
        })
        .await
    }

    /// A token of ServiceAccount `namespace/name`, minted by the admin, valid for an hour.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
        request_token(&self.admin().await, namespace, name)
            .await
            .unwrap_or_else(|e| panic!("token of {namespace}/{name}: {e}"))
    }
}

/// An HTTPS client of a workload API as a kubeconfig makes one: every CA of `ca_bundle` trusted
/// (two while a CA rotation is under way), the PEM client certificate and key presented.
pub fn workload_https_client(ca_bundle: &str, cert: &str, key: &str) -> reqwest::Client {
    let roots: Vec<_> = magnum_capi::capi::pki::pem_certs(ca_bundle)
        .iter()
        .map(|pem| reqwest::Certificate::from_pem(pem.as_bytes()).expect("a CA certificate"))
        .collect();
    let identity = format!("{cert}{key}");
    reqwest::Client::builder()
        .tls_certs_only(roots)
        .identity(reqwest::Identity::from_pem(identity.as_bytes()).expect("a client identity"))
        .build()
        .expect("the workload API's client")
}

/// The kube configuration of the kubeconfig at `path`.
pub async fn config_of(path: &Path) -> kube::Config {
    let kc = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()))
}

/// A client of `config`.
pub fn client_of(config: kube::Config) -> kube::Client {
    kube::Client::try_from(config).expect("kube client")
}

/// Asks, as `client`, for a token of ServiceAccount `namespace/name` (TokenRequest, one hour).
pub async fn request_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<String, kube::Error> {
    let ar = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "TokenRequest".into(),
        plural: "serviceaccounts".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let req = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}
    });
    let resp = api
        .create_subresource::<_, DynamicObject>("token", name, &PostParams::default(), &req)
        .await?;
    Ok(serde_json::to_value(resp).expect("json")["status"]["token"]
        .as_str()
        .expect("status.token")
        .to_string())
}

/// Server-side apply of `obj` as `field_manager`; with `dry_run`, judged and not stored.
pub async fn server_side_apply(
    client: &kube::Client,
    obj: &Value,
    field_manager: &str,
    dry_run: bool,
) -> Result<(), kube::Error> {
    let r = magnum_capi::capi::apply::ObjectRef::of(obj).expect("rendered object");
    let ar = magnum_capi::capi::apply::resource(&r.api_version, &r.kind);
    let api: Api<DynamicObject> = match &r.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let mut params = PatchParams::apply(field_manager).force();
    params.dry_run = dry_run;
    api.patch(&r.name, &params, &Patch::Apply(obj))
        .await
        .map(|_| ())
}

/// The last `lines` lines of the file at `path` (empty when unreadable).
fn tail(path: &Path, lines: usize) -> String {
    super::keystone::tail(&std::fs::read_to_string(path).unwrap_or_default(), lines)
}

/// Every `[capi]` chart repository setting: on the real stack each points at `charts` (a
/// loopback URL), so CAAPH never reaches off the machine for a chart.
const CHART_REPOS: &[&str] = &[
    "calico_chart_repo",
    "cilium_chart_repo",
    "flannel_chart_repo",
    "openstack_chart_repo",
    "metrics_server_chart_repo",
    "monitoring_chart_repo",
    "ingress_nginx_chart_repo",
    "traefik_chart_repo",
    "nfs_csi_chart_repo",
    "gpu_operator_chart_repo",
];

/// `magnum-capi serve` as production runs it (no `--dev`: Keystone tokens, the CAPI driver, the
/// worker) on a loopback port, its management cluster the real stack through `kubeconfig`.
/// SIGKILLed when dropped.
pub struct Production {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    pub config: PathBuf,
    pub database: String,
}

impl Drop for Production {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Production {
    /// Starts it on `port` (0: any free port) with `kubeconfig` and `charts` as every chart
    /// repository; `extra` is appended to its `[capi]` section.
    pub async fn start(port: u16, kubeconfig: &Path, charts: &str, extra: &str) -> Production {
        let (ks, cloud) = super::stack::parts().await;
        // What CAPO makes belongs to the project of the token of its application credential
        // (per-project quotas, leftovers by project): the fake cloud asks this Keystone.
        cloud.set_identity(&ks.url);
        let port = if port == 0 {
            super::served::free_port()
        } else {
            port
        };
        let database = super::fresh_database().await;
        let stack = stack().await;
        let config = stack.dir.join(format!("magnum-capi-{port}.toml"));
        let log = stack.dir.join(format!("magnum-capi-{port}.log"));
        let service = ks.service_config();
        use base64::Engine as _;
        let seal_key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>());
        let mut capi = format!("kubeconfig = {:?}\n", kubeconfig.display().to_string());
        for repo in CHART_REPOS {
            capi.push_str(&format!("{repo} = {charts:?}\n"));
        }
        capi.push_str(extra);
        let text = format!(
            "[http]\nbind = \"127.0.0.1:{port}\"\n\n\
             [database]\nurl = {database:?}\nmax_connections = 5\nmigrate_on_start = true\n\n\
             [operations]\nseal_key = {seal_key:?}\npoll_interval_ms = 1000\nretry_base_ms = 500\n\n\
             [keystone]\nauth_url = {:?}\nusername = {:?}\npassword = {:?}\nproject_name = {:?}\n\n\
             [capi]\n{capi}",
            service.auth_url.clone().unwrap_or_default(),
            service.username.clone().unwrap_or_default(),
            secrecy::ExposeSecret::expose_secret(service.password.as_ref().expect("password")),
            service.project_name.clone().unwrap_or_default(),
        );
        std::fs::write(&config, text).expect("writing the configuration");
        let file = std::fs::File::create(&log).expect("log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_magnum-capi"));
        cmd.args(["serve", "--config"])
            .arg(&config)
            .env_remove("MAGNUM_CAPI_CONFIG")
            .env_remove("KUBECONFIG")
            .env("RUST_LOG", "info,sqlx=warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file);
        let mut child = cmd.spawn().expect("starting magnum-capi serve");
        let url = format!("http://127.0.0.1:{port}/");
        super::served::wait_answering(&mut child, &log, &url).await;
        Production {
            child,
            port,
            log,
            config,
            database,
        }
    }

    /// The process id of `magnum-capi serve` (its RSS and CPU time in `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `path` under the service's root (`/v1/clusters`, …).
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// A request with a Keystone `token`: the status and the JSON answer.
    pub async fn call(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let req = super::http()
            .request(method, self.url(path))
            .header("x-auth-token", token)
            .header("openstack-api-version", "container-infra latest")
            .header("accept", "application/json");
        super::served::answer(req, body).await
    }
}

/// The chart's identity on the real stack: its ServiceAccount, ClusterRoles and bindings, and
/// the admission policy that confines its writes to the project namespaces, as `deploy/helm`
/// renders them with its default values, applied for real; a kubeconfig that presents a token
/// of that ServiceAccount.
pub async fn chart_identity(stack: &RealStack) -> PathBuf {
    const RBAC_KINDS: &[&str] = &[
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    let objects =
        tokio::task::spawn_blocking(|| super::chart::objects(&super::chart::render(&json!({}))))
            .await
            .expect("rendering the chart");
    let admin = stack.admin().await;
    let mut account = None;
    for obj in objects
        .iter()
        .filter(|o| RBAC_KINDS.contains(&o["kind"].as_str().unwrap_or_default()))
    {
        // `helm install --create-namespace`: the release's namespace exists before its objects.
        if let Some(ns) = obj["metadata"]["namespace"].as_str() {
            stack.namespace(ns).await;
        }
        if obj["kind"] == "ServiceAccount" {
            account = Some((
                obj["metadata"]["namespace"]
                    .as_str()
                    .expect("namespace")
                    .to_string(),
                obj["metadata"]["name"].as_str().expect("name").to_string(),
            ));
        }
        server_side_apply(&admin, obj, "realstack-harness", false)
            .await
            .unwrap_or_else(|e| panic!("applying the chart's {}: {e}", obj["kind"]));
    }
    let (ns, name) = account.expect("the chart renders a ServiceAccount");
    let token = stack.service_account_token(&ns, &name).await;
    let kubeconfig = stack.kubeconfig_with_token(&token, &format!("{ns}-{name}"));
    // The API server takes up a new admission policy a moment after it is written: wait until a
    // write outside the project namespaces (judged, not stored) is refused.
    let client = client_of(config_of(&kubeconfig).await);
    let probe = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "confinement-probe", "namespace": "default"}});
    super::wait::until_within(
        REAL_DEADLINE,
        "the chart's admission policy in force",
        || {
            let client = client.clone();
            let probe = probe.clone();
            async move {
                match server_side_apply(&client, &probe, "realstack-harness", true).await {
                    Err(kube::Error::Api(s)) if s.code == 403 => Some(()),
                    _ => None,
                }
            }
        },
    )
    .await;
    kubeconfig
}
