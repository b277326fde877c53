#![allow(clippy::unwrap_used, clippy::expect_used)]
//! CAPI driver benchmark on the REAL management stack (`tests/it/common/realstack.rs`: etcd,
//! kube-apiserver, kube-controller-manager and the CAPI, CABPK, KCP, CAPO and CAAPH managers,
//! the fake cloud and its node agent playing the servers), with `magnum-capi serve` as
//! production runs it (Keystone tokens, the chart's RBAC), its management cluster reached
//! through a counting TLS proxy in front of the apiserver — what `benches/capi.rs` measures on
//! the simulator, measured here on the real thing:
//! 1. requests (by verb and resource) and bytes (TLS bytes on the wire and the HTTP bytes inside,
//!    both ways) the service sends the management cluster per create, resize, upgrade and
//!    delete, each kind of operation from a quiet baseline;
//! 2. `POST /v1/clusters` (202) → its `Cluster` object, and → every object the service applies
//!    for it during its create, as seen by a watch of the harness on the apiserver;
//! 3. status delay: a real controller's change of a Machine (CAPI copying its addresses from
//!    CAPO's server; KCP or a MachineSet deleting it in a roll) or of the Cluster's API endpoint
//!    (CAPO, CAPI) → `GET /v1/clusters/{uuid}` shows it, the change timestamped where the
//!    harness' own watch received it, our side polled every `BENCH_POLL_MS` (default 25);
//! 4. `BENCH_CLUSTERS` (default 1000) clusters' objects (Cluster, OpenStackCluster,
//!    KubeadmControlPlane, MachineDeployment and a Machine, copied from a real cluster of step 1
//!    with its status, each in a namespace of its own, the Cluster paused so the controllers
//!    leave them be) in the real apiserver and etcd: the service's RSS delta once its watchers
//!    indexed them; its requests over `BENCH_IDLE_SECS` (default 120) idle, extrapolated to an
//!    hour; the apiserver's CPU time over that window with the service running and, the same
//!    window length, after it was stopped (the controllers frozen, SIGSTOP, for both windows).
//!
//! Run: `cargo bench --bench capi_real` (BENCH_REAL_CLUSTERS=N clusters go through the lifecycle
//! of steps 1–3 side by side, default 3). A bench of its own rather than a mode of `capi`: it
//! drives the service as a process (its RSS, its CPU and its absence are measured) with the
//! real-stack harness, which the simulator bench does not build.

#[path = "../tests/it/common/mod.rs"]
mod common;
#[path = "shared/mgmt_requests.rs"]
mod mgmt_requests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use magnum_capi::capi::{LABEL_CLUSTER_UUID, kinds};
use magnum_capi::simkube::requests::Verb;
use mgmt_requests::{is_probe, pct, rss_mib};
use reqwest::Method;
use serde_json::{Value, json};

use common::realstack::{Production, REAL_DEADLINE, chart_identity, stack};
use common::wait::until_within;

/// Chart repositories on a loopback port nothing listens on (as the real-stack tests do).
const LOOPBACK_CHARTS: &str = "http://127.0.0.1:9/charts";
/// The fake Glance's Kubernetes image, and the next minor's (added for the upgrade).
const KUBE_IMAGE: &str = "ubuntu-2204-kube-v1.30.4";
const UPGRADE_IMAGE: &str = "11111111-0000-4000-8000-0000000000a1";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// CPU time (user + system) of process `pid` so far.
fn cpu_time(pid: u32) -> Duration {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's `(name)`: state is field 3, utime and stime fields 14 and 15.
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

mod proxy {
    //! A TLS-terminating counting proxy in front of kube-apiserver: the service connects to it
    //! with its own kubeconfig (the apiserver's serving certificate and the stack's CA, the
    //! server's port changed), each of its connections is forwarded on one connection of the
    //! proxy's to the apiserver, and the requests are read off the plaintext as they pass.

    use std::collections::BTreeMap;
    use std::net::SocketAddr;
    use std::path::Path;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use magnum_capi::simkube::requests::{RequestCounts, RequestKey, Verb};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
    use tokio::net::{TcpListener, TcpStream};

    /// What passed so far.
    #[derive(Debug, Clone, Default)]
    pub struct Stats {
        pub requests: BTreeMap<RequestKey, u64>,
        /// Bytes on the wire (TLS records, handshakes included), service → apiserver.
        pub tls_up: u64,
        pub tls_down: u64,
        /// HTTP bytes inside (heads and bodies).
        pub http_up: u64,
        pub http_down: u64,
        /// Of `http_down`, what answered a watch (its events).
        pub watch_down: u64,
        pub connections: u64,
        /// Requests whose body length was not given (chunked): the connection's later requests
        /// are not counted (none seen with kube-rs).
        pub unparsed: u64,
    }

    impl Stats {
        pub fn counts(&self) -> RequestCounts {
            RequestCounts(self.requests.clone())
        }

        /// What passed after `earlier`.
        pub fn since(&self, earlier: &Stats) -> Stats {
            Stats {
                requests: self.counts().since(&earlier.counts()).0,
                tls_up: self.tls_up - earlier.tls_up,
                tls_down: self.tls_down - earlier.tls_down,
                http_up: self.http_up - earlier.http_up,
                http_down: self.http_down - earlier.http_down,
                watch_down: self.watch_down - earlier.watch_down,
                connections: self.connections - earlier.connections,
                unparsed: self.unparsed - earlier.unparsed,
            }
        }
    }

    type Shared = Arc<Mutex<Stats>>;

    fn with(stats: &Shared, f: impl FnOnce(&mut Stats)) {
        f(&mut stats.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub struct CountingProxy {
        pub port: u16,
        stats: Shared,
    }

    impl CountingProxy {
        /// Listens on loopback; forwards to `target`, presenting `cert`/`key` (PEM files) and
        /// trusting `ca` (PEM file) for the apiserver.
        pub async fn start(target: SocketAddr, cert: &Path, key: &Path, ca: &Path) -> Self {
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .expect("serving certificate")
                .collect::<Result<_, _>>()
                .expect("serving certificate");
            let key = PrivateKeyDer::from_pem_file(key).expect("serving key");
            let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .expect("serving identity");
            server.alpn_protocols = vec![b"http/1.1".to_vec()];
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).expect("CA") {
                roots.add(c.expect("CA")).expect("CA");
            }
            let mut client = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            client.alpn_protocols = vec![b"http/1.1".to_vec()];
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
            let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let port = listener.local_addr().expect("address").port();
            let stats = Shared::default();
            let st = stats.clone();
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, connector, st) =
                        (acceptor.clone(), connector.clone(), st.clone());
                    tokio::spawn(async move {
                        let _ = tcp.set_nodelay(true);
                        with(&st, |s| s.connections += 1);
                        let counted = Counted {
                            inner: tcp,
                            stats: st.clone(),
                        };
                        let Ok(down) = acceptor.accept(counted).await else {
                            return;
                        };
                        let Ok(up) = TcpStream::connect(target).await else {
                            return;
                        };
                        let _ = up.set_nodelay(true);
                        let name = ServerName::IpAddress(target.ip().into());
                        let Ok(up) = connector.connect(name, up).await else {
                            return;
                        };
                        pass(down, up, st).await;
                    });
                }
            });
            CountingProxy { port, stats }
        }

        pub fn stats(&self) -> Stats {
            self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }
    }

    /// The client's TCP stream, its bytes counted both ways.
    struct Counted {
        inner: TcpStream,
        stats: Shared,
    }

    impl AsyncRead for Counted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let before = buf.filled().len();
            let r = Pin::new(&mut self.inner).poll_read(cx, buf);
            let n = (buf.filled().len() - before) as u64;
            with(&self.stats, |s| s.tls_up += n);
            r
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let r = Pin::new(&mut self.inner).poll_write(cx, buf);
            if let Poll::Ready(Ok(n)) = &r {
                with(&self.stats, |s| s.tls_down += *n as u64);
            }
            r
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// Forwards plaintext both ways until either side closes, reading the requests off it.
    async fn pass<D, U>(down: D, up: U, stats: Shared)
    where
        D: AsyncRead + AsyncWrite + Unpin,
        U: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut dr, mut dw) = tokio::io::split(down);
        let (mut ur, mut uw) = tokio::io::split(up);
        let st = stats.clone();
        // One request at a time on an HTTP/1.1 connection: what comes down answers the last
        // request that went up.
        let watching = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let w = watching.clone();
        let requests = async move {
            let mut reader = Requests::default();
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = dr.read(&mut buf).await {
                with(&st, |s| {
                    s.http_up += n as u64;
                    if let Some(verb) = reader.feed(&buf[..n], s) {
                        w.store(verb == Verb::Watch, std::sync::atomic::Ordering::Relaxed);
                    }
                });
                if uw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = uw.shutdown().await;
        };
        let answers = async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = ur.read(&mut buf).await {
                let watch = watching.load(std::sync::atomic::Ordering::Relaxed);
                with(&stats, |s| {
                    s.http_down += n as u64;
                    if watch {
                        s.watch_down += n as u64;
                    }
                });
                if dw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = dw.shutdown().await;
        };
        tokio::select! {
            _ = requests => {}
            _ = answers => {}
        }
    }

    /// HTTP/1.1 requests read off a connection's client side: each head, then its
    /// `Content-Length` bytes of body skipped.
    #[derive(Default)]
    struct Requests {
        pending: Vec<u8>,
        body_left: usize,
        lost: bool,
    }

    impl Requests {
        /// Files the requests `chunk` completes the head of; the verb of the last.
        fn feed(&mut self, chunk: &[u8], stats: &mut Stats) -> Option<Verb> {
            let mut last = None;
            if self.lost {
                return None;
            }
            self.pending.extend_from_slice(chunk);
            loop {
                let skip = self.body_left.min(self.pending.len());
                self.pending.drain(..skip);
                self.body_left -= skip;
                if self.body_left > 0 {
                    return last;
                }
                let Some(end) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") else {
                    return last;
                };
                let head = String::from_utf8_lossy(&self.pending[..end]).into_owned();
                self.pending.drain(..end + 4);
                let mut lines = head.lines();
                let mut first = lines.next().unwrap_or_default().split(' ');
                let (method, target) = (
                    first.next().unwrap_or_default(),
                    first.next().unwrap_or("/"),
                );
                let mut content_type = "";
                for line in lines {
                    let Some((k, v)) = line.split_once(':') else {
                        continue;
                    };
                    let v = v.trim();
                    match k.trim().to_ascii_lowercase().as_str() {
                        "content-length" => self.body_left = v.parse().unwrap_or(0),
                        "content-type" => content_type = v,
                        "transfer-encoding" if v.contains("chunked") => self.lost = true,
                        _ => {}
                    }
                }
                let key = key(method, target, content_type);
                last = Some(key.verb);
                *stats.requests.entry(key).or_default() += 1;
                if self.lost {
                    stats.unparsed += 1;
                    return last;
                }
            }
        }
    }

    /// How a request is filed: the verb as kube-apiserver's audit log names it, the resource's
    /// plural with its group (and subresource), or the path for discovery.
    fn key(method: &str, target: &str, content_type: &str) -> RequestKey {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, rest) = match segs.as_slice() {
            ["api", _v, rest @ ..] if !rest.is_empty() => ("", rest),
            ["apis", g, _v, rest @ ..] if !rest.is_empty() => (*g, rest),
            _ => {
                return RequestKey {
                    verb: Verb::Discovery,
                    resource: path.to_string(),
                };
            }
        };
        let rest = match rest {
            ["namespaces", _ns, r @ ..] if !r.is_empty() => r,
            r => r,
        };
        let plural = rest.first().copied().unwrap_or_default();
        let named = rest.len() > 1;
        let mut resource = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        if let Some(sub) = rest.get(2) {
            resource = format!("{resource}/{sub}");
        }
        let watch = query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        let verb = match method {
            "GET" if named => Verb::Get,
            "GET" if watch => Verb::Watch,
            "GET" => Verb::List,
            "POST" => Verb::Create,
            "PUT" => Verb::Update,
            "PATCH" if content_type.starts_with("application/apply-patch") => Verb::Apply,
            "PATCH" => Verb::Patch,
            "DELETE" if named => Verb::Delete,
            _ => Verb::DeleteCollection,
        };
        RequestKey { verb, resource }
    }
}

/// One line per operation kind: requests by verb, bytes both ways, per operation.
fn per_op(what: &str, d: &proxy::Stats, ops: usize) {
    let counts = d.counts();
    let n = ops as f64;
    println!(
        "management-cluster requests per {what}: {}; bytes per {what}: TLS {:.0} KiB up / {:.0} KiB down, HTTP {:.0} KiB up / {:.0} KiB down of which watch events {:.0} KiB",
        mgmt_requests::per_op(&counts, ops),
        d.tls_up as f64 / 1024.0 / n,
        d.tls_down as f64 / 1024.0 / n,
        d.http_up as f64 / 1024.0 / n,
        d.http_down as f64 / 1024.0 / n,
        d.watch_down as f64 / 1024.0 / n,
    );
    println!("  {what}, all {ops}: {counts}");
    if d.unparsed > 0 {
        println!(
            "  ({} connections sent a chunked body: their later requests are not counted)",
            d.unparsed
        );
    }
}

/// One event of the harness' watch of the project namespace.
#[derive(Clone)]
struct Seen {
    at: Instant,
    kind: &'static str,
    name: String,
    uuid: String,
    deleted: bool,
    ours: bool,
    obj: Value,
}

/// Watches every kind the service writes or reads for a cluster (Machines included) in `ns`,
/// selected by our cluster-uuid label, each event timestamped on receipt.
fn record(
    admin: &kube::Client,
    ns: &str,
    log: Arc<Mutex<Vec<Seen>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    // Every namespaced kind the driver reads or writes; only what carries our label comes.
    kinds::ALL
        .into_iter()
        .filter(|k| *k != kinds::NAMESPACE)
        .map(|(av, kind)| {
            let ar = magnum_capi::capi::apply::resource(av, kind);
            let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ar);
            let log = log.clone();
            tokio::spawn(async move {
                let cfg = watcher::Config::default().labels(LABEL_CLUSTER_UUID);
                let mut s = watcher::watcher(api, cfg).boxed();
                while let Some(ev) = s.next().await {
                    let at = Instant::now();
                    let (obj, deleted) = match ev {
                        Ok(Event::Apply(o) | Event::InitApply(o)) => (o, false),
                        Ok(Event::Delete(o)) => (o, true),
                        _ => continue,
                    };
                    let uuid = obj
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_CLUSTER_UUID))
                        .cloned()
                        .unwrap_or_default();
                    let ours = obj
                        .metadata
                        .managed_fields
                        .iter()
                        .flatten()
                        .any(|m| m.manager.as_deref() == Some("magnum-capi"));
                    let name = obj.metadata.name.clone().unwrap_or_default();
                    let obj = if matches!(kind, "Machine" | "Cluster" | "OpenStackCluster") {
                        serde_json::to_value(&obj).unwrap_or_default()
                    } else {
                        Value::Null
                    };
                    let seen = Seen {
                        at,
                        kind,
                        name,
                        uuid,
                        deleted,
                        ours,
                        obj,
                    };
                    log.lock().unwrap().push(seen);
                }
            })
        })
        .collect()
}

/// What `GET /v1/clusters/{uuid}` showed, on change.
#[derive(Clone, PartialEq)]
struct Shown {
    status: String,
    addresses: BTreeSet<String>,
    api_address: String,
}

/// What each cluster's `GET` showed, each change with when the poll saw it.
type ShownLog = HashMap<String, Vec<(Instant, Shown)>>;

/// Polls each cluster of `uuids` every `every`, recording each change of what it shows.
fn poll(
    served: Arc<Production>,
    token: String,
    uuids: Vec<String>,
    every: Duration,
    log: Arc<Mutex<ShownLog>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for u in &uuids {
                let (code, b) = served
                    .call(&token, Method::GET, &format!("/v1/clusters/{u}"), None)
                    .await;
                let at = Instant::now();
                if code != 200 {
                    continue;
                }
                let shown = Shown {
                    status: b["status"].as_str().unwrap_or_default().to_string(),
                    addresses: b["node_addresses"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .chain(b["master_addresses"].as_array().into_iter().flatten())
                        .filter_map(|a| a.as_str().map(str::to_string))
                        .collect(),
                    api_address: b["api_address"].as_str().unwrap_or_default().to_string(),
                };
                let mut log = log.lock().unwrap();
                let seq = log.entry(u.clone()).or_default();
                if seq.last().map(|(_, s)| s) != Some(&shown) {
                    seq.push((at, shown));
                }
            }
            tokio::time::sleep(every).await;
        }
    })
}

/// The address of a Machine the API shows (as `capi::status` picks it): its external one,
/// else its internal one.
fn shown_address(m: &Value) -> Option<&str> {
    let addrs = m.pointer("/status/addresses").and_then(Value::as_array)?;
    let pick = |t: &str| {
        addrs
            .iter()
            .find(|a| a["type"] == t)
            .and_then(|a| a["address"].as_str())
    };
    pick("ExternalIP").or_else(|| pick("InternalIP"))
}

/// Status delays, content-matched: each address our API started showing, from the first
/// harness watch event of the Machine of that cluster showing it; each it stopped showing, from
/// the first event of that Machine after which it no longer shows it (the Machine gone: CAPI
/// removed its finalizer once its server was deleted); each API address, from the first
/// Cluster event whose `spec.controlPlaneEndpoint` holds its host (CAPI copying CAPO's).
fn delays(seen: &[Seen], shown: &ShownLog) -> (Vec<Duration>, usize) {
    let mut out = Vec::new();
    let mut negative = 0;
    let verbose = std::env::var_os("BENCH_VERBOSE").is_some();
    let t0 = seen.first().map(|s| s.at).unwrap_or_else(Instant::now);
    let mut push = |what: String, t_api: Instant, t_w: Option<Instant>| {
        if verbose {
            eprintln!(
                "{what}: watch +{:?}, shown +{:?}",
                t_w.map(|t| t - t0),
                t_api - t0
            );
        }
        if let Some(t_w) = t_w {
            match t_api.checked_duration_since(t_w) {
                Some(d) => out.push(d),
                None => negative += 1,
            }
        }
    };
    for (uuid, seq) in shown {
        let machines: Vec<&Seen> = seen
            .iter()
            .filter(|s| &s.uuid == uuid && s.kind == "Machine")
            .collect();
        for w in seq.windows(2) {
            let (before, (t_api, now)) = (&w[0].1, (&w[1].0, &w[1].1));
            for a in now.addresses.difference(&before.addresses) {
                // The fake cloud hands a released address out again: the Machine that shows it
                // is the one that began showing it last before the API did.
                let mut first: HashMap<&str, Instant> = HashMap::new();
                for m in &machines {
                    if !m.deleted && m.at < *t_api && shown_address(&m.obj) == Some(a.as_str()) {
                        first.entry(m.name.as_str()).or_insert(m.at);
                    }
                }
                let t_w = first.values().max().copied();
                push(format!("{uuid} {a} in ({})", now.status), *t_api, t_w);
            }
            for a in before.addresses.difference(&now.addresses) {
                let shows = |m: &Seen| !m.deleted && shown_address(&m.obj) == Some(a.as_str());
                let holder = machines.iter().rev().find(|m| m.at < *t_api && shows(m));
                let t_w = holder.and_then(|h| {
                    machines
                        .iter()
                        .find(|m| m.name == h.name && m.at > h.at && !shows(m))
                        .map(|m| m.at)
                });
                push(format!("{uuid} {a} out ({})", now.status), *t_api, t_w);
            }
            if now.api_address != before.api_address && !now.api_address.is_empty() {
                let host = now
                    .api_address
                    .trim_start_matches("https://")
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let t_w = seen
                    .iter()
                    .find(|s| {
                        &s.uuid == uuid
                            && s.kind == "Cluster"
                            && s.obj.pointer("/spec/controlPlaneEndpoint/host")
                                == Some(&json!(host))
                    })
                    .map(|s| s.at);
                push(format!("{uuid} API {host}"), *t_api, t_w);
            }
        }
    }
    (out, negative)
}

/// The object `obj` as a new one in namespace `ns` of cluster `uuid`: what the apiserver set
/// dropped, our label on, and the Cluster paused.
fn copy_into(obj: &Value, ns: &str, uuid: &str) -> Value {
    let mut o = obj.clone();
    let meta = &mut o["metadata"];
    if let Some(m) = meta.as_object_mut() {
        for f in [
            "uid",
            "resourceVersion",
            "managedFields",
            "ownerReferences",
            "creationTimestamp",
            "finalizers",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "annotations",
        ] {
            m.remove(f);
        }
    }
    meta["namespace"] = json!(ns);
    meta["labels"][LABEL_CLUSTER_UUID] = json!(uuid);
    if o["kind"] == "Cluster" {
        o["spec"]["paused"] = json!(true);
    }
    o
}

/// Creates `obj` as the admin (its status written after it, as the controllers would have),
/// retrying what a loaded apiserver or webhook answers nothing to.
async fn create_with_status(admin: &kube::Client, obj: &Value) {
    let av = obj["apiVersion"].as_str().expect("apiVersion");
    let kind = obj["kind"].as_str().expect("kind");
    let ns = obj["metadata"]["namespace"].as_str().expect("namespace");
    let name = obj["metadata"]["name"].as_str().expect("name");
    let ar = magnum_capi::capi::apply::resource(av, kind);
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ar);
    let mut spec = obj.clone();
    spec.as_object_mut().map(|o| o.remove("status"));
    let dynobj: DynamicObject = serde_json::from_value(spec).expect("object");
    until_within(
        REAL_DEADLINE,
        &format!("{kind} {ns}/{name} created"),
        || async {
            match api.create(&PostParams::default(), &dynobj).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Some(()),
                Err(kube::Error::Api(s)) if s.code < 500 => {
                    panic!("creating {kind} {ns}/{name}: {s}")
                }
                Err(_) => None,
            }
        },
    )
    .await;
    if obj.get("status").is_some_and(|s| !s.is_null()) {
        let status = json!({"status": obj["status"]});
        until_within(
            REAL_DEADLINE,
            &format!("{kind} {ns}/{name} status"),
            || async {
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
    }
}

/// Sends `signal` to every part of the stack but etcd and the apiserver (SIGSTOP: frozen,
/// SIGCONT: running again); how many.
fn freeze(ready: &Value, signal: nix::sys::signal::Signal) -> usize {
    let mut n = 0;
    for (part, p) in ready["parts"].as_object().into_iter().flatten() {
        if part == "etcd" || part == "kube-apiserver" {
            continue;
        }
        if let Some(pid) = p["pid"].as_i64() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
            n += 1;
        }
    }
    n
}

fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let t_bench = Instant::now();
    let n: usize = env_or("BENCH_REAL_CLUSTERS", 3);
    let mem_clusters: usize = env_or("BENCH_CLUSTERS", 1000);
    let idle_secs: u64 = env_or("BENCH_IDLE_SECS", 120);
    let poll_every = Duration::from_millis(env_or("BENCH_POLL_MS", 25));

    let s = stack().await;
    let (ks, cloud) = common::stack::parts().await;
    let apiserver_pid = s.ready["parts"]["kube-apiserver"]["pid"]
        .as_u64()
        .expect("apiserver pid") as u32;
    let chart_kubeconfig = chart_identity(s).await;

    // The service reaches the apiserver through the counting proxy: the chart's kubeconfig with
    // the proxy's port.
    let ca = std::path::PathBuf::from(s.ready["ca_cert"].as_str().expect("ca_cert"));
    let pki = ca.parent().expect("pki directory");
    let target: std::net::SocketAddr = s
        .server
        .trim_start_matches("https://")
        .parse()
        .expect("apiserver address");
    let proxy = proxy::CountingProxy::start(
        target,
        &pki.join("serving.crt"),
        &pki.join("serving.key"),
        &ca,
    )
    .await;
    let text = std::fs::read_to_string(&chart_kubeconfig).expect("kubeconfig");
    let proxied = s.dir.join("realcost-proxied.kubeconfig");
    std::fs::write(
        &proxied,
        text.replace(&s.server, &format!("https://127.0.0.1:{}", proxy.port)),
    )
    .expect("kubeconfig");
    let served = Arc::new(Production::start(0, &proxied, LOOPBACK_CHARTS, "").await);
    let served_pid = served.pid();
    eprintln!(
        "service up, its log {} ({:.0?} into the bench)",
        served.log.display(),
        t_bench.elapsed()
    );

    let member = ks.new_project("realcost").await;
    let token = member.token.clone();
    let ns = format!("magnum-{}", member.project);
    let admin = s.admin().await;
    let call = |method: Method, path: String, body: Option<Value>| {
        let (served, token) = (served.clone(), token.clone());
        async move { served.call(&token, method, &path, body).await }
    };
    let template = |name: &str, image: &str| {
        json!({"name": name, "coe": "kubernetes", "image_id": image,
            "external_network_id": "public", "flavor_id": "m1.medium",
            "master_flavor_id": "m1.large", "network_driver": "calico", "master_lb_enabled": true})
    };
    cloud.add_image(
        json!({"id": UPGRADE_IMAGE, "name": "ubuntu-2204-kube-v1.31.6",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.31.6",
        "created_at": "2024-09-01T12:00:00Z"}),
    );
    let mut templates = Vec::new();
    for (name, image) in [("rc", KUBE_IMAGE), ("rc-next", UPGRADE_IMAGE)] {
        let (st, t) = call(
            Method::POST,
            "/v1/clustertemplates".into(),
            Some(template(name, image)),
        )
        .await;
        assert_eq!(st, 201, "{t}");
        templates.push(t["uuid"].clone());
    }
    let (t1, t2) = (templates[0].clone(), templates[1].clone());

    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let recorders = record(&admin, &ns, seen.clone());
    let shown: Arc<Mutex<ShownLog>> = Arc::default();
    let wait_all = |uuids: Vec<String>, want: &'static str| {
        let call = &call;
        async move {
            for u in uuids {
                let path = format!("/v1/clusters/{u}");
                until_within(REAL_DEADLINE, &format!("{path} {want}"), || async {
                    let (code, b) = call(Method::GET, path.clone(), None).await;
                    if want == "DELETE_COMPLETE" {
                        return (code == 404).then_some(());
                    }
                    let st = b["status"].as_str().unwrap_or_default();
                    assert!(st == want || !st.ends_with("_FAILED"), "{path}: {b}");
                    (st == want).then_some(())
                })
                .await;
            }
        }
    };
    let quiet = Duration::from_secs(5);
    tokio::time::sleep(quiet).await;

    // 1 and 2: creates, side by side.
    let before = proxy.stats();
    let t_create = Instant::now();
    let mut posted = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let (st, c) = call(
            Method::POST,
            "/v1/clusters".into(),
            Some(json!({"name": format!("rc{i}"),
            "cluster_template_id": t1, "master_count": 1, "node_count": 1})),
        )
        .await;
        assert_eq!(st, 202, "{c}");
        posted.push((c["uuid"].as_str().expect("uuid").to_string(), t));
    }
    let uuids: Vec<String> = posted.iter().map(|(u, _)| u.clone()).collect();
    let poller = poll(
        served.clone(),
        token.clone(),
        uuids.clone(),
        poll_every,
        shown.clone(),
    );
    wait_all(uuids.clone(), "CREATE_COMPLETE").await;
    let create_took = t_create.elapsed();
    tokio::time::sleep(quiet).await;
    per_op("create", &proxy.stats().since(&before), n);
    {
        let log = seen.lock().unwrap();
        let mut to_cluster = Vec::new();
        let mut to_all = Vec::new();
        for (u, t) in &posted {
            let mine = log.iter().filter(|s| &s.uuid == u && s.ours && s.at > *t);
            let mut first: BTreeMap<(&str, &str), Instant> = BTreeMap::new();
            for s in mine {
                first.entry((s.kind, s.name.as_str())).or_insert(s.at);
            }
            if let Some(c) = first.iter().find(|((k, _), _)| *k == "Cluster") {
                to_cluster.push(*c.1 - *t);
            }
            if let Some(last) = first.values().max() {
                to_all.push(*last - *t);
            }
            eprintln!("{u}: {} objects of ours seen", first.len());
        }
        println!(
            "POST /v1/clusters → Cluster object on the apiserver: p50 {:?}, max {:?}; → every object the create applies: p50 {:?}, max {:?} ({n} creates side by side; all CREATE_COMPLETE after {create_took:.1?})",
            pct(&mut to_cluster, 0.5),
            pct(&mut to_cluster, 1.0),
            pct(&mut to_all, 0.5),
            pct(&mut to_all, 1.0)
        );
    }

    for (what, path, body) in [
        ("resize", "actions/resize", json!({"node_count": 3})),
        (
            "upgrade",
            "actions/upgrade",
            json!({"cluster_template": t2}),
        ),
    ] {
        let before = proxy.stats();
        let t = Instant::now();
        for u in &uuids {
            let (st, b) = call(
                Method::POST,
                format!("/v1/clusters/{u}/{path}"),
                Some(body.clone()),
            )
            .await;
            assert_eq!(st, 202, "{what}: {b}");
        }
        wait_all(uuids.clone(), "UPDATE_COMPLETE").await;
        let took = t.elapsed();
        tokio::time::sleep(quiet).await;
        per_op(what, &proxy.stats().since(&before), n);
        println!("  {what}: all {n} UPDATE_COMPLETE after {took:.1?}");
    }

    // The objects of a real, upgraded cluster: the 1,000 clusters' objects are copies of them.
    let model: Vec<Value> = {
        let mut out = Vec::new();
        for gvk in [
            kinds::CLUSTER,
            kinds::OPENSTACK_CLUSTER,
            kinds::CONTROL_PLANE,
            kinds::MACHINE_DEPLOYMENT,
            kinds::MACHINE,
        ] {
            let ar = magnum_capi::capi::apply::resource(gvk.0, gvk.1);
            let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &ar);
            let lp = kube::api::ListParams::default()
                .labels(&format!("{LABEL_CLUSTER_UUID}={}", uuids[0]));
            let list = api.list(&lp).await.expect("list");
            let obj = list
                .items
                .into_iter()
                .next()
                .unwrap_or_else(|| panic!("no {}", gvk.1));
            let mut v = serde_json::to_value(obj).expect("json");
            v["apiVersion"] = json!(gvk.0);
            v["kind"] = json!(gvk.1);
            out.push(v);
        }
        out
    };

    let before = proxy.stats();
    let t = Instant::now();
    for u in &uuids {
        let (st, b) = call(Method::DELETE, format!("/v1/clusters/{u}"), None).await;
        assert_eq!(st, 204, "delete: {b}");
    }
    wait_all(uuids.clone(), "DELETE_COMPLETE").await;
    let took = t.elapsed();
    tokio::time::sleep(quiet).await;
    per_op("delete", &proxy.stats().since(&before), n);
    println!("  delete: all {n} gone after {took:.1?}");
    poller.abort();
    let _ = poller.await;
    for r in &recorders {
        r.abort();
    }

    // 3. Status delays over the whole lifecycle.
    {
        let (mut lat, negative) = delays(&seen.lock().unwrap(), &shown.lock().unwrap());
        println!(
            "status delay (a real controller's change, as the harness' watch received it → GET shows it, polled every {poll_every:?}): p50 {:?}, p99 {:?}, max {:?} ({} changes: machine addresses in and out, API addresses; {negative} shown before the harness' watch delivered them)",
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99),
            pct(&mut lat, 1.0),
            lat.len()
        );
    }

    // 4. BENCH_CLUSTERS clusters' objects, paused, each in its own namespace.
    tokio::time::sleep(quiet).await;
    let rss_before = rss_mib(&served_pid.to_string());
    let before = proxy.stats();
    let t = Instant::now();
    let jobs: Vec<usize> = (0..mem_clusters).collect();
    futures::stream::iter(jobs)
        .for_each_concurrent(8, |i| {
            let (admin, model, s) = (admin.clone(), &model, s);
            async move {
                let ns = format!("realcost-{i}");
                s.namespace(&ns).await;
                let uuid = uuid::Uuid::new_v4().to_string();
                for obj in model {
                    create_with_status(&admin, &copy_into(obj, &ns, &uuid)).await;
                }
            }
        })
        .await;
    let made = t.elapsed();
    // Indexed: the service's watches quiet (nothing more sent to it for 5 s).
    let mut last = proxy.stats().http_down;
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = proxy.stats().http_down;
        if now == last {
            break;
        }
        last = now;
    }
    let rss_after = rss_mib(&served_pid.to_string());
    let d = proxy.stats().since(&before);
    println!(
        "memory: {mem_clusters} clusters' objects ({} objects copied from a real upgraded cluster, status included, Clusters paused) written in {made:.1?}; service RSS {rss_before:.0} MiB → {rss_after:.0} MiB once its watches went quiet (≈ {:.1} KiB per cluster); the watch events cost {:.1} MiB TLS down",
        mem_clusters * model.len(),
        (rss_after - rss_before) * 1024.0 / mem_clusters as f64,
        d.tls_down as f64 / 1_048_576.0,
    );

    // Idle: nothing asked of the service; the controllers' own writes (the copies' Paused
    // conditions) done. The controllers (every part of the stack but etcd and the apiserver)
    // are then frozen for both CPU windows: their own work on the apiserver varies more from
    // window to window than anything the idle service asks.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let frozen = freeze(&s.ready, nix::sys::signal::Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = proxy.stats();
    let (api0, svc0) = (cpu_time(apiserver_pid), cpu_time(served_pid));
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let (api1, svc1) = (cpu_time(apiserver_pid), cpu_time(served_pid));
    let idle = proxy.stats().since(&before);
    let counts = idle.counts();
    let hour = 3600.0 / idle_secs as f64;
    let polling = counts.count(|k| k.verb != Verb::Watch && !is_probe(k));
    println!(
        "idle ({idle_secs} s, {mem_clusters} clusters' objects watched): {polling} requests other than watches and the probe ({:.1} per hour); {} watch requests, {} probes ({:.0} per hour); TLS {:.1} KiB up / {:.1} KiB down ({:.1} MiB per hour both ways): {counts}",
        polling as f64 * hour,
        counts.count(|k| k.verb == Verb::Watch),
        counts.count(is_probe),
        counts.count(is_probe) as f64 * hour,
        idle.tls_up as f64 / 1024.0,
        idle.tls_down as f64 / 1024.0,
        (idle.tls_up + idle.tls_down) as f64 * hour / 1_048_576.0,
    );
    let with_us = api1 - api0;
    let svc = svc1 - svc0;
    match Arc::try_unwrap(served) {
        Ok(p) => drop(p),
        Err(_) => panic!("the service is still shared"),
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let api2 = cpu_time(apiserver_pid);
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let without = cpu_time(apiserver_pid) - api2;
    println!(
        "apiserver CPU over {idle_secs} s idle: {with_us:?} with the service running, {without:?} without it (the same objects; {frozen} controllers and agents frozen): with − without {:.0} ms per hour ({:.2} % of a core); the service's own CPU over the window {svc:?}",
        (with_us.as_secs_f64() - without.as_secs_f64()) * 1000.0 * hour,
        (with_us.as_secs_f64() - without.as_secs_f64()) / idle_secs as f64 * 100.0,
    );
    freeze(&s.ready, nix::sys::signal::Signal::SIGCONT);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "bench took {:.0?}; load average at the end: {}",
        t_bench.elapsed(),
        load.trim()
    );
}
