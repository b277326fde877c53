//! The API's listening socket (`server::serve_members`): plain HTTP, or HTTPS with the
//! certificate chain and key of `[http] tls_cert_file` / `tls_key_file` (PEM) picked up again
//! when the files change; either way each request carries its [`Connection`] (the TCP peer,
//! which `[http] trusted_proxies` is checked against, and whether it is HTTPS).
//!
//! Reloading: every handshake compares the files' metadata (modification and change times, size,
//! inode) with what was last loaded — two `stat` calls, nothing against a handshake's own
//! cost, and no timer or watcher task to keep. Kubernetes replaces a mounted Secret's files by
//! swapping a symlink, which changes all of them; a pair that does not load (a key that does not
//! match, a half-written file) keeps the previous certificate in service, is logged once, and
//! is tried again when the files change again.

use std::convert::Infallible;
use std::fs::Metadata;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::extract::Request;
use axum::middleware::AddExtension;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener, ListenerExt};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tower::Layer;

/// A client that connects and never finishes its handshake is dropped after this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a certificate and key pair cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{0} holds no certificate")]
    NoCertificate(String),
    #[error("{cert} and {key} do not make a usable pair: {source}")]
    Pair {
        cert: String,
        key: String,
        #[source]
        source: rustls::Error,
    },
    #[error("TLS configuration: {0}")]
    Config(#[source] rustls::Error),
}

/// What identifies a version of a file: it changes when the file is rewritten or replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: (u64, i64, i64),
}

impl Stamp {
    fn of(m: &Metadata) -> Self {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        Stamp {
            modified: m.modified().ok(),
            len: m.len(),
            #[cfg(unix)]
            inode: (m.ino(), m.ctime(), m.ctime_nsec()),
        }
    }
}

/// The pair in service and the version of the files last tried.
#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    tried: Option<[Stamp; 2]>,
}

/// The server certificate of the API listener, reloaded when its files change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<Loaded>,
}

impl ReloadingCert {
    /// Loads the pair now: a pair that does not load is a start-up error.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tried = stamps(cert_file, key_file);
        let key = read_pair(cert_file, key_file, &provider)?;
        Ok(ReloadingCert {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            provider,
            loaded: Mutex::new(Loaded {
                key: Arc::new(key),
                tried,
            }),
        })
    }

    /// The pair to present now: the files' current one when they changed and load.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamps(&self.cert_file, &self.key_file);
        if now.is_none() || now == loaded.tried {
            return loaded.key.clone();
        }
        loaded.tried = now;
        match read_pair(&self.cert_file, &self.key_file, &self.provider) {
            Ok(key) => {
                tracing::info!(cert = %self.cert_file.display(), "TLS certificate reloaded");
                loaded.key = Arc::new(key);
            }
            Err(e) => tracing::error!(
                error = %e,
                "the changed TLS certificate files do not load; the previous certificate stays in service"
            ),
        }
        loaded.key.clone()
    }

    /// The TLS configuration of the listener (HTTP/2 and HTTP/1.1), presenting this pair.
    pub fn server_config(self: Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(self);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Both files' versions, `None` while either cannot be read (keep what is loaded).
fn stamps(cert: &Path, key: &Path) -> Option<[Stamp; 2]> {
    let c = std::fs::metadata(cert).ok()?;
    let k = std::fs::metadata(key).ok()?;
    Some([Stamp::of(&c), Stamp::of(&k)])
}

fn read_pair(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let read_err = |path: &Path| {
        let path = path.display().to_string();
        move |source| TlsError::Read { path, source }
    };
    let chain = CertificateDer::pem_file_iter(cert_file)
        .map_err(read_err(cert_file))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_err(cert_file))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert_file.display().to_string()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(read_err(key_file))?;
    let pair = CertifiedKey::from_der(chain, key, provider).map_err(|source| TlsError::Pair {
        cert: cert_file.display().to_string(),
        key: key_file.display().to_string(),
        source,
    })?;
    // `from_der` lets a pair through whose match it cannot tell; a served certificate must match.
    pair.keys_match().map_err(|source| TlsError::Pair {
        cert: cert_file.display().to_string(),
        key: key_file.display().to_string(),
        source,
    })?;
    Ok(pair)
}

/// A connection whose TLS handshake completed, and its peer.
pub type Handshaken = (TlsStream<TcpStream>, SocketAddr);

/// The HTTPS side of a TCP listener: connections whose handshake finished, with their peer.
pub struct TlsListener {
    rx: mpsc::Receiver<Handshaken>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` and runs each handshake on its own task (a slow client holds up no one);
    /// the accept loop ends when this listener is dropped.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let (tx, listener) = Self::fed(tcp.local_addr()?);
        tokio::spawn(accept_loop(tcp, TlsAcceptor::from(config), tx));
        Ok(listener)
    }

    /// A listener on `local` serving what an accept loop of the caller's own sends (the
    /// simulated workload APIs choose each connection's certificate).
    pub fn fed(local: SocketAddr) -> (mpsc::Sender<Handshaken>, Self) {
        let (tx, rx) = mpsc::channel(64);
        (tx, TlsListener { rx, local })
    }
}

async fn accept_loop(tcp: TcpListener, acceptor: TlsAcceptor, tx: mpsc::Sender<Handshaken>) {
    loop {
        let accepted = tokio::select! {
            _ = tx.closed() => return,
            r = tcp.accept() => r,
        };
        let (socket, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        set_no_delay(&socket);
        let (acceptor, tx) = (acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
                Ok(Ok(stream)) => {
                    let _ = tx.send((stream, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept loop ended: nothing more comes (graceful shutdown ends the server).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Answers leave at once: without TCP_NODELAY a response written in more than one segment
/// waits for the client's delayed ACK (tens of milliseconds a request).
pub fn no_delay(tcp: &mut TcpStream) {
    set_no_delay(tcp);
}

fn set_no_delay(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

/// The connection a request came on: an extension of every request [`serve`] serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// The TCP peer: the client, or the proxy in front of the service.
    pub peer: SocketAddr,
    /// Whether the connection is TLS (the service's own HTTPS).
    pub https: bool,
}

/// Serves `svc` on `tcp` until `shutdown` (then drains the requests in flight): HTTPS with
/// `tls`, plain HTTP without. Every request carries its [`Connection`].
pub async fn serve<S>(
    tcp: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    svc: S,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    match tls {
        Some(config) => {
            axum::serve(TlsListener::new(tcp, config)?, WithConnection(svc, true))
                .with_graceful_shutdown(shutdown)
                .await
        }
        None => {
            axum::serve(tcp.tap_io(no_delay), WithConnection(svc, false))
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

/// Makes, per connection, `S` with the [`Connection`] in every request's extensions (what
/// axum's `into_make_service_with_connect_info` does for a `Router`; the API's service is a
/// router wrapped in layers). The flag: whether the listener is HTTPS.
#[derive(Clone)]
struct WithConnection<S>(S, bool);

impl<'a, L, S> tower::Service<IncomingStream<'a, L>> for WithConnection<S>
where
    L: Listener<Addr = SocketAddr>,
    S: Clone,
{
    type Response = AddExtension<S, Connection>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, stream: IncomingStream<'a, L>) -> Self::Future {
        let conn = Connection {
            peer: *stream.remote_addr(),
            https: self.1,
        };
        std::future::ready(Ok(axum::Extension(conn).layer(self.0.clone())))
    }
}
