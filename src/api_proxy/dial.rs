//! Opening the proxy's connection to an API endpoint: from inside a Neutron network namespace
//! (`/run/netns/qrouter-<router id>`, …) when one of the cluster's is on this node, else — only
//! when configured — from the proxy's own namespace.
//!
//! `setns(2)` moves the calling thread only, so each namespaced dial runs on a thread of its
//! own that exits afterwards (a pooled thread would stay in the tenant's namespace); a socket
//! keeps the namespace it was created in, so the connection is then driven by tokio as usual.
//! Every dial holds a permit of `[api_proxy] max_dials` until it is done — a namespaced one until
//! its thread ends, even when the client has gone — so the threads are bounded.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

/// Why no connection was opened.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// None of the cluster's namespaces is on this node (and dialling from the host is off).
    #[error("no network namespace of this cluster on this node (looked for {0})")]
    NoNamespace(String),
    #[error("cannot enter network namespace {path}: {source}")]
    Enter {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The namespace to dial from: the first of `names` present in `dir`; `Ok(None)` (the host's
/// own) when none is and `from_host` allows it.
pub fn choose(dir: &Path, names: &[String], from_host: bool) -> Result<Option<PathBuf>, DialError> {
    if let Some(found) = names.iter().map(|n| dir.join(n)).find(|p| p.exists()) {
        return Ok(Some(found));
    }
    if from_host {
        return Ok(None);
    }
    Err(DialError::NoNamespace(names.join(", ")))
}

/// A TCP connection to `addr` opened in network namespace `netns` (a file of `ip netns`), or in
/// the current one when `None`, within `timeout`; `permit` is released when the dial is done.
pub async fn connect(
    addr: SocketAddr,
    netns: Option<PathBuf>,
    timeout: Duration,
    permit: OwnedSemaphorePermit,
) -> Result<TcpStream, DialError> {
    let failed = |source| DialError::Connect { addr, source };
    let Some(path) = netns else {
        let dialled = tokio::time::timeout(timeout, TcpStream::connect(addr)).await;
        drop(permit);
        return match dialled {
            Ok(r) => r.map_err(failed),
            Err(_) => Err(failed(std::io::ErrorKind::TimedOut.into())),
        };
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("api-proxy-dial".into())
        .spawn(move || {
            let _ = tx.send(connect_in(&path, addr, timeout));
            drop(permit);
        })
        .map_err(failed)?;
    let stream = rx
        .await
        .map_err(|_| failed(std::io::Error::other("the dialling thread died")))??;
    TcpStream::from_std(stream).map_err(failed)
}

/// On the calling (dedicated) thread: enter `path`'s network namespace and connect.
fn connect_in(
    path: &Path,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<std::net::TcpStream, DialError> {
    let enter = |source| DialError::Enter {
        path: path.display().to_string(),
        source,
    };
    let ns = std::fs::File::open(path).map_err(enter)?;
    nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| enter(e.into()))?;
    let failed = |source| DialError::Connect { addr, source };
    let stream = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(failed)?;
    stream.set_nonblocking(true).map_err(failed)?;
    stream.set_nodelay(true).map_err(failed)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_namespace_present_is_chosen_else_the_host_only_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("qdhcp-n1"), "").unwrap();
        let names = ["qrouter-r1", "qdhcp-n1"].map(String::from);
        assert_eq!(
            choose(dir.path(), &names, false).unwrap(),
            Some(dir.path().join("qdhcp-n1"))
        );
        let absent = ["qrouter-r2".to_string()];
        assert!(matches!(
            choose(dir.path(), &absent, false),
            Err(DialError::NoNamespace(n)) if n == "qrouter-r2"
        ));
        assert_eq!(choose(dir.path(), &absent, true).unwrap(), None);
    }
}
