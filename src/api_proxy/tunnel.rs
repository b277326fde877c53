//! The proxy's HTTP side: `CONNECT ip:port` (what client-go and kube-rs send for a kubeconfig's
//! `proxy-url`) to an allowlisted private API endpoint opens a tunnel to it; anything else is
//! refused with a status that says why. TLS stays end to end between the client and the API.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::allowlist::Allowlist;
use super::dial;

/// The proxy's state: the allowlist it follows, how it dials, what it tunnelled.
pub struct Proxy {
    pub allowlist: watch::Receiver<Arc<Allowlist>>,
    pub netns_dir: PathBuf,
    pub dial_from_host: bool,
    pub connect_timeout: Duration,
    /// Tunnels opened, by cluster (`<namespace>/<name>`).
    pub tunnels: Mutex<HashMap<String, u64>>,
}

impl Proxy {
    /// Tunnels opened to `cluster`'s API so far.
    pub fn tunnels_to(&self, cluster: &str) -> u64 {
        let t = self.tunnels.lock().unwrap_or_else(PoisonError::into_inner);
        t.get(cluster).copied().unwrap_or(0)
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
        let target = self.allowlist.borrow().get(&authority).cloned();
        let Some(target) = target else {
            tracing::warn!(client = %peer, target = %authority, "refused: not the API endpoint of a private cluster");
            return reply(
                StatusCode::FORBIDDEN,
                "not the API endpoint of a private cluster",
            );
        };
        let upstream = match dial::choose(&self.netns_dir, &target.namespaces, self.dial_from_host)
        {
            Ok(netns) => dial::connect(target.addr, netns, self.connect_timeout).await,
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
