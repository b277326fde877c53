//! A simulated management cluster for `serve --dev` and the tests: an in-process Kubernetes API
//! and a CAPI/CAPO simulator that plays the controllers. Never used against real infrastructure.
//!
//! `SimCluster::start` binds an axum server (`api`) over an in-memory object store (`store`)
//! and, unless disabled, starts the simulator (`controllers` + `reconcile`) on the same store.
//! Each simulated workload cluster (`workload`) is served over TLS at its own loopback endpoint
//! (`endpoint`, its `controlPlaneEndpoint`), and, without authentication, under
//! `/workload/{namespace}/{cluster}` on this server; the simulator models kubeadm's PKI on them
//! (`pki`). CRD defaults, schemas and CEL rules are applied to writes by `admission`.

mod access;
pub mod admission;
mod api;
pub mod controllers;
mod endpoint;
mod kubeconfig;
pub mod objects;
mod pki;
mod reconcile;
pub mod requests;
pub mod selector;
mod simulation;
pub mod store;
mod table;
mod workload;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use controllers::Simulator;
pub use selector::Selector;
pub use store::{
    Admission, Event, EventType, FieldError, FieldManager, ObjectKey, Patch, Propagation, Resource,
    Store, StoreError, StoreOptions, Target, Validator,
};

/// How a simulated management cluster runs.
#[derive(Clone)]
pub struct SimOptions {
    /// Listen address; port 0 picks a free one.
    pub addr: SocketAddr,
    /// Run the CAPI/CAPO simulator (false: a bare API server).
    pub controllers: bool,
    /// Time between simulated transitions.
    pub step: Duration,
    /// Image/flavor or external-network substrings that make provisioning fail.
    pub fail_markers: Vec<String>,
    /// Optional schema check of every write (422 `Invalid` on `Err`).
    pub validator: Option<Validator>,
    /// Watch events kept for resumption (older resourceVersions get 410 `Expired`).
    pub watch_history: usize,
    /// How often open watches that asked for bookmarks receive one.
    pub bookmark_interval: Duration,
    /// Namespaced writes need an existing Namespace, as on a real apiserver.
    pub require_namespaces: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            controllers: true,
            step: Duration::from_secs(1),
            fail_markers: vec!["sim-fail".to_string()],
            validator: None,
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(5),
            require_namespaces: true,
        }
    }
}

impl SimOptions {
    /// Fast transitions for tests (50 ms steps, 1 s bookmarks).
    pub fn for_tests() -> Self {
        SimOptions {
            step: Duration::from_millis(50),
            bookmark_interval: Duration::from_secs(1),
            ..SimOptions::default()
        }
    }
}

impl std::fmt::Debug for SimOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimOptions")
            .field("addr", &self.addr)
            .field("controllers", &self.controllers)
            .field("step", &self.step)
            .field("fail_markers", &self.fail_markers)
            .field("validator", &self.validator.is_some())
            .field("watch_history", &self.watch_history)
            .field("bookmark_interval", &self.bookmark_interval)
            .field("require_namespaces", &self.require_namespaces)
            .finish()
    }
}

/// Why the simulated cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid server URL {0}")]
    Url(String),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

/// A running simulated management cluster. Dropping it stops the server and the simulator.
pub struct SimCluster {
    url: String,
    client: kube::Client,
    store: Arc<Store>,
    workloads: Arc<workload::Workloads>,
    simulator: Option<Arc<Simulator>>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    available: Arc<std::sync::atomic::AtomicBool>,
    denials: Arc<access::Denials>,
    requests: Arc<requests::Requests>,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("url", &self.url)
            .field("simulator", &self.simulator)
            .finish()
    }
}

impl SimCluster {
    /// Binds the API server, serves it, and starts the simulator when `opts.controllers`.
    pub async fn start(opts: SimOptions) -> Result<SimCluster, SimError> {
        let listener = tokio::net::TcpListener::bind(opts.addr)
            .await
            .map_err(|source| SimError::Bind {
                addr: opts.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: opts.addr,
            source,
        })?;
        let url = format!("http://{addr}");
        let uri: http::Uri = url.parse().map_err(|_| SimError::Url(url.clone()))?;
        let client = kube::Client::try_from(kube::Config::new(uri))?;
        let store = Arc::new(Store::new(StoreOptions {
            validator: opts.validator.clone(),
            history: opts.watch_history,
            require_namespaces: opts.require_namespaces,
            ..StoreOptions::default()
        }));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let workloads = Arc::new(workload::Workloads::default());
        let available = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let denials = Arc::new(access::Denials::default());
        let requests = Arc::new(requests::Requests::default());
        let app = api::router(api::ApiState {
            store: store.clone(),
            workloads: workloads.clone(),
            scope: api::Scope::Management,
            shutdown: shutdown_rx.clone(),
            bookmark_interval: opts.bookmark_interval,
            available: available.clone(),
            denials: denials.clone(),
            requests: Some(requests.clone()),
        });
        let mut stop = shutdown_rx.clone();
        let server = tokio::spawn(async move {
            // As a real API server: watch events and answers leave at once (no Nagle delay
            // measuring itself in the status latency).
            let listener = axum::serve::ListenerExt::tap_io(listener, crate::listener::no_delay);
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|v| *v).await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "simulated API server failed");
            }
        });
        let mut tasks = vec![server];
        let simulator = if opts.controllers {
            let (sim, sim_tasks) = Simulator::start(
                store.clone(),
                opts.step,
                opts.fail_markers,
                url.clone(),
                workloads.clone(),
                endpoint::Serving {
                    runtime: tokio::runtime::Handle::current(),
                    shutdown: shutdown_rx,
                    bookmark_interval: opts.bookmark_interval,
                },
            );
            tasks.extend(sim_tasks);
            Some(sim)
        } else {
            None
        };
        tracing::info!(%url, controllers = opts.controllers, "simulated management cluster started");
        Ok(SimCluster {
            url,
            client,
            store,
            workloads,
            simulator,
            shutdown,
            tasks,
            available,
            denials,
            requests,
        })
    }

    /// From now on `SelfSubjectAccessReview`s of `verb` on `resource` (API group `group`, `""`
    /// for core) answer denied, as for an account whose RBAC lacks it.
    pub fn deny(&self, group: &str, resource: &str, verb: &str) {
        self.denials.deny(group, resource, verb);
    }

    /// Every request this API server answered so far, by verb and resource (subtract an
    /// earlier snapshot with `RequestCounts::since` to cost an operation or a window).
    pub fn requests(&self) -> requests::RequestCounts {
        self.requests.snapshot()
    }

    /// An outage of the API server (every request answered 503) until set back to `true`.
    pub fn set_available(&self, up: bool) {
        self.available
            .store(up, std::sync::atomic::Ordering::Relaxed);
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A kubeconfig for this API server: plain HTTP and no credentials (it authenticates
    /// nobody), for clients in processes of their own (`magnum-capi simulate`).
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        use kube::config::{Cluster, Context, Kubeconfig, NamedCluster, NamedContext};
        const NAME: &str = "simulated";
        Kubeconfig {
            api_version: Some("v1".into()),
            kind: Some("Config".into()),
            clusters: vec![NamedCluster {
                name: NAME.into(),
                cluster: Some(Cluster {
                    server: Some(self.url.clone()),
                    ..Cluster::default()
                }),
                ..NamedCluster::default()
            }],
            contexts: vec![NamedContext {
                name: NAME.into(),
                context: Some(Context {
                    cluster: NAME.into(),
                    ..Context::default()
                }),
                ..NamedContext::default()
            }],
            current_context: Some(NAME.into()),
            ..Kubeconfig::default()
        }
    }

    /// A kube client for this API server (plain HTTP, default namespace `default`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Direct access to the objects, bypassing HTTP.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The object store of a simulated workload cluster, once its control plane initialized.
    pub fn workload_store(&self, namespace: &str, cluster: &str) -> Option<Arc<Store>> {
        self.workloads.get(namespace, cluster)
    }

    /// The workload API the `<cluster>-kubeconfig` Secret points at: the cluster's TLS endpoint
    /// `https://127.0.0.1:<port>` once open (see `Simulator::workload_url`), else
    /// `{url}/workload/{namespace}/{cluster}` (plain HTTP, no authentication) on this server.
    pub fn workload_url(&self, namespace: &str, cluster: &str) -> String {
        match &self.simulator {
            Some(sim) => sim.workload_url(namespace, cluster),
            None => workload::url(&self.url, namespace, cluster),
        }
    }

    /// See `Simulator::workload_accepts` (false without controllers).
    pub fn workload_accepts(&self, namespace: &str, cluster: &str, client_cert_pem: &str) -> bool {
        self.simulator
            .as_ref()
            .is_some_and(|s| s.workload_accepts(namespace, cluster, client_cert_pem))
    }

    /// The simulator, when controllers run.
    pub fn simulator(&self) -> Option<&Arc<Simulator>> {
        self.simulator.as_ref()
    }

    /// Replaces the failure markers at runtime (no-op without controllers).
    pub fn set_fail_markers(&self, markers: Vec<String>) {
        if let Some(sim) = &self.simulator {
            sim.set_fail_markers(markers);
        }
    }

    /// Stops the simulated controllers until `resume` (the API keeps serving).
    pub fn pause(&self) {
        if let Some(sim) = &self.simulator {
            sim.pause();
        }
    }

    pub fn resume(&self) {
        if let Some(sim) = &self.simulator {
            sim.resume();
        }
    }

    /// Stops watches, the server and the simulator, waiting briefly for them.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        for task in std::mem::take(&mut self.tasks) {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}
