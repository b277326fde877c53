//! `magnum-capi api-proxy`: how CAPI and the service reach the API of a private cluster (its
//! load balancer has no floating IP), run where Neutron's namespaces are (network nodes). An
//! HTTP CONNECT proxy that only opens tunnels to the API endpoint of the private cluster whose
//! credential the client presents (`crate::proxy_auth`; the clusters from the management
//! cluster's OpenStackClusters, `allowlist`), dialled from inside that cluster's router/DHCP/
//! metadata namespace (`dial`, a bounded number at once); `tunnel` serves it. The service writes
//! its URL with each cluster's credential as `proxy-url` into those clusters' kubeconfigs
//! (`capi::private`).

pub mod allowlist;
pub mod dial;
pub mod tunnel;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::config::ApiProxyConfig;
use crate::proxy_auth::ProxyKey;

/// A running proxy; stopped when dropped.
pub struct ApiProxy {
    addr: SocketAddr,
    proxy: Arc<tunnel::Proxy>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ApiProxy {
    /// Serves `listener`, following the OpenStackClusters of `client`'s management cluster and
    /// admitting the credentials of `key` (`[api_proxy] key`).
    pub fn start(
        cfg: &ApiProxyConfig,
        key: ProxyKey,
        client: kube::Client,
        listener: TcpListener,
    ) -> std::io::Result<ApiProxy> {
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let (tx, rx) = watch::channel(Arc::new(allowlist::Allowlist::default()));
        let max_dials = cfg.max_dials.max(1);
        let proxy = Arc::new(tunnel::Proxy {
            allowlist: rx,
            key,
            netns_dir: cfg.netns_dir.clone(),
            dial_from_host: cfg.dial_from_host,
            connect_timeout: Duration::from_secs(cfg.connect_timeout_secs.max(1)),
            dials: Arc::new(Semaphore::new(max_dials)),
            max_dials,
            tunnels: Default::default(),
        });
        let tasks = vec![
            tokio::spawn(allowlist::follow(
                client,
                cfg.namespaces.clone(),
                tx,
                stopped.clone(),
            )),
            tokio::spawn(tunnel::serve(listener, proxy.clone(), stopped)),
        ];
        Ok(ApiProxy {
            addr,
            proxy,
            stop,
            tasks,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The allowlist in force now.
    pub fn allowlist(&self) -> Arc<allowlist::Allowlist> {
        self.proxy.allowlist.borrow().clone()
    }

    /// Tunnels opened to `cluster` (`<namespace>/<name>`) so far.
    pub fn tunnels_to(&self, cluster: &str) -> u64 {
        self.proxy.tunnels_to(cluster)
    }

    /// Connections being opened now (at most `[api_proxy] max_dials`).
    pub fn dialling(&self) -> usize {
        self.proxy.dialling()
    }
}

/// An address no private cluster's API has (TEST-NET-1, RFC 5737): what [`probe`] asks for.
const PROBE_TARGET: &str = "192.0.2.1:1";
/// The cluster [`probe`] presents a credential of: no namespace can be named `-`, so no cluster.
const PROBE_CLUSTER: &str = "-/magnum-capi-check";

/// Whether `url` (`[capi] api_proxy_url`) is a `magnum-capi api-proxy` holding `key` that
/// answers: shown a credential of `key` for a cluster that cannot exist, it must refuse with 403
/// (a proxy with another key refuses the credential: 407) (for `magnum-capi check`). `Err` says
/// what answered instead.
pub async fn probe(url: &str, key: &ProxyKey) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let authority = uri
        .authority()
        .ok_or_else(|| format!("{url} names no host"))?
        .as_str()
        .to_string();
    let authority = if uri.port().is_some() {
        authority
    } else {
        format!("{authority}:80")
    };
    let ask = async {
        let mut s = TcpStream::connect(&authority)
            .await
            .map_err(|e| e.to_string())?;
        let req = format!(
            "CONNECT {PROBE_TARGET} HTTP/1.1\r\nHost: {PROBE_TARGET}\r\nProxy-Authorization: {}\r\n\r\n",
            key.authorization(PROBE_CLUSTER)
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0; 256];
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let first = tokio::time::timeout(Duration::from_secs(3), ask)
        .await
        .map_err(|_| format!("{authority} did not answer within 3 s"))??;
    if first.starts_with("HTTP/1.1 403") {
        Ok(())
    } else if first.starts_with("HTTP/1.1 407") {
        Err(format!(
            "{authority} refuses the service's credentials: its [api_proxy] key is not [capi] \
             api_proxy_key"
        ))
    } else {
        Err(format!(
            "{authority} is not magnum-capi api-proxy: a CONNECT to {PROBE_TARGET} got {first:?} (want 403)"
        ))
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}
