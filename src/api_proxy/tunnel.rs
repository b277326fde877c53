//! The proxy's HTTP side: `CONNECT ip:port` (what client-go and kube-rs send for a kubeconfig's
//! `proxy-url`) with the credential of a private cluster (`Proxy-Authorization: Basic`, from the
//! `proxy-url`'s userinfo; `proxy_auth`) to that cluster's API endpoint opens a tunnel to it,
//! dialled from that cluster's namespaces; anything else is refused with a status that says why.
//! TLS stays end to end between the client and the API. Credentials are never logged.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::allowlist::Allowlist;
use super::dial;
use crate::proxy_auth::ProxyKey;

/// The realm of the `Proxy-Authenticate` challenge.
const CHALLENGE: &str = "Basic realm=\"magnum-capi api-proxy\"";

/// The proxy's state: the allowlist it follows, the key credentials are checked with, how it
/// dials, what it tunnelled.
pub struct Proxy {
    pub allowlist: watch::Receiver<Arc<Allowlist>>,
    pub key: ProxyKey,
    pub netns_dir: PathBuf,
    pub dial_from_host: bool,
    pub connect_timeout: Duration,
    /// `[api_proxy] max_dials` permits: one per connection being opened.
    pub dials: Arc<Semaphore>,
    pub max_dials: usize,
    /// Tunnels opened, by cluster (`<namespace>/<name>`).
    pub tunnels: Mutex<HashMap<String, u64>>,
}

impl Proxy {
    /// Tunnels opened to `cluster`'s API so far.
    pub fn tunnels_to(&self, cluster: &str) -> u64 {
        let t = self.tunnels.lock().unwrap_or_else(PoisonError::into_inner);
        t.get(cluster).copied().unwrap_or(0)
    }

    /// Connections being opened now.
    pub fn dialling(&self) -> usize {
        self.max_dials
            .saturating_sub(self.dials.available_permits())
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>, peer: SocketAddr) -> Response<String> {
        if req.method() != Method::CONNECT {
            return reply(
                StatusCode::METHOD_NOT_ALLOWED,
                "this proxy only tunnels (CONNECT) to private cluster APIs",
            );
        }
        let Some(authority) = req.uri().authority().map(|a| a.to_string()) else {
            return reply(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
        };
        let cluster = req
            .headers()
            .get(PROXY_AUTHORIZATION)
            .and_then(|h| self.key.authenticate(h.as_bytes()));
        let Some(cluster) = cluster else {
            tracing::warn!(client = %peer, target = %authority, "refused: no valid proxy credential");
            let mut r = reply(
                StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                "the proxy-url of a private cluster's kubeconfig carries its credential",
            );
            r.headers_mut().insert(
                PROXY_AUTHENTICATE,
                http::HeaderValue::from_static(CHALLENGE),
            );
            return r;
        };
        // The cluster the credential names decides where to dial: its own endpoint, from its
        // own namespaces, whatever other cluster has the same address.
        let target = self.allowlist.borrow().get(&cluster).cloned();
        let Some(target) = target else {
            tracing::warn!(client = %peer, cluster = %cluster, target = %authority, "refused: not a private cluster");
            return reply(StatusCode::FORBIDDEN, "not a private cluster");
        };
        if authority.parse::<SocketAddr>().ok() != Some(target.addr) {
            tracing::warn!(client = %peer, cluster = %cluster, target = %authority, "refused: not the cluster's API endpoint");
            return reply(
                StatusCode::FORBIDDEN,
                "not the API endpoint of this private cluster",
            );
        }
        let Ok(permit) = self.dials.clone().try_acquire_owned() else {
            tracing::warn!(client = %peer, cluster = %cluster, limit = self.max_dials, "refused: too many connections being opened");
            let mut r = reply(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "too many connections being opened at once (max_dials = {}); retry",
                    self.max_dials
                ),
            );
            r.headers_mut()
                .insert(RETRY_AFTER, http::HeaderValue::from_static("1"));
            return r;
        };
        let upstream = match dial::choose(&self.netns_dir, &target.namespaces, self.dial_from_host)
        {
            Ok(netns) => dial::connect(target.addr, netns, self.connect_timeout, permit).await,
            Err(e) => Err(e),
        };
        let mut upstream = match upstream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(client = %peer, cluster = %target.cluster, error = %e, "cannot reach the cluster's API");
                return reply(StatusCode::BAD_GATEWAY, &e.to_string());
            }
        };
        *self
            .tunnels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(target.cluster.clone())
            .or_default() += 1;
        tracing::info!(client = %peer, cluster = %target.cluster, endpoint = %target.addr, "tunnel opened");
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(up) => {
                    let _ =
                        tokio::io::copy_bidirectional(&mut TokioIo::new(up), &mut upstream).await;
                }
                Err(e) => tracing::debug!(error = %e, "the client left before the tunnel opened"),
            }
        });
        reply(StatusCode::OK, "")
    }
}

fn reply(status: StatusCode, text: &str) -> Response<String> {
    let mut r = Response::new(text.to_string());
    *r.status_mut() = status;
    r
}

/// Accepts clients on `listener` until `stop`; each connection is served by `proxy`.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>, mut stop: watch::Receiver<bool>) {
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a proxy client failed");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let p = proxy.clone();
                async move { Ok::<_, Infallible>(p.handle(req, peer).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(tcp), svc)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(client = %peer, error = %e, "proxy connection ended");
            }
        });
    }
}
