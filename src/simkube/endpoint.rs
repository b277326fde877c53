//! The API endpoint of each simulated workload cluster: one loopback TLS listener per CAPI
//! cluster (`https://127.0.0.1:<port>`, its `controlPlaneEndpoint`), opened when CAPO would
//! create the load balancer / floating IP and closed when the Cluster is gone.
//!
//! One port per cluster rather than SNI on a shared one: the endpoint is an IP address, and TLS
//! clients send no SNI for IP addresses, so one port could not tell the clusters apart.
//!
//! Until `kubeadm init` created the workload cluster, connections are dropped (a load balancer
//! without members). Then each handshake presents a serving certificate (SANs `127.0.0.1`,
//! `localhost` and kubeadm's `kubernetes*` names) signed by the `<cluster>-ca` key of the
//! oldest control-plane machine, and asks for a client certificate without verifying it, as
//! kube-apiserver does (`RequestClientCert`, possession still proven); authentication happens
//! per request (`authenticate`): a certificate every control-plane machine's trust bundle
//! accepts is the admin, any other certificate is 401, no credentials are `system:anonymous`
//! (403 except the public health and version paths). Clusters whose PKI is not modelled (no
//! `<cluster>-ca` Secret) are served with a self-signed certificate and accept any client.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use super::api::{ApiState, Scope, router};
use super::pki::{SigningKey, parse_bundle};
use super::simulation::Simulation;
use crate::listener::{Handshaken, TlsListener};

/// A client that connects and never finishes its handshake is dropped after this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Paths kube-apiserver lets `system:anonymous` read (`system:public-info-viewer`).
const PUBLIC_PATHS: [&str; 4] = ["/version", "/healthz", "/readyz", "/livez"];

type Key = (String, String);

/// The open endpoints, by (namespace, CAPI cluster name).
#[derive(Default)]
pub(crate) struct Endpoints {
    open: Mutex<HashMap<Key, Endpoint>>,
}

struct Endpoint {
    port: u16,
    stop: Arc<watch::Sender<bool>>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.open.lock().map(|m| m.len()).unwrap_or_default();
        f.debug_struct("Endpoints").field("open", &n).finish()
    }
}

/// What an endpoint's server needs besides the simulator.
#[derive(Clone)]
pub(crate) struct Serving {
    pub runtime: tokio::runtime::Handle,
    pub shutdown: watch::Receiver<bool>,
    pub bookmark_interval: Duration,
}

/// `https://127.0.0.1:<port>`.
pub fn url(port: u16) -> String {
    format!("https://{}:{port}", Ipv4Addr::LOCALHOST)
}

impl Endpoints {
    /// The port of a cluster's endpoint, opening it first unless it is open.
    pub(crate) fn open(
        &self,
        sim: Weak<dyn Simulation>,
        serving: &Serving,
        namespace: &str,
        cluster: &str,
    ) -> std::io::Result<u16> {
        let key = (namespace.to_string(), cluster.to_string());
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = open.get(&key) {
            return Ok(e.port);
        }
        let tcp = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        tcp.set_nonblocking(true)?;
        let port = tcp.local_addr()?.port();
        let (stop, stop_rx) = watch::channel(false);
        let stop = Arc::new(stop);
        let server = Server {
            sim,
            key: key.clone(),
            serving: serving.clone(),
            cache: Arc::new(Mutex::new(None)),
        };
        serving
            .runtime
            .spawn(server.run(tcp, stop.clone(), stop_rx));
        tracing::info!(%namespace, %cluster, url = %url(port), "workload API endpoint open");
        open.insert(key, Endpoint { port, stop });
        Ok(port)
    }

    pub(crate) fn port(&self, namespace: &str, cluster: &str) -> Option<u16> {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), cluster.to_string()))
            .map(|e| e.port)
    }

    /// Closes a cluster's endpoint: the listener and every open connection and watch.
    pub(crate) fn close(&self, namespace: &str, cluster: &str) {
        let removed = self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(namespace.to_string(), cluster.to_string()));
        if let Some(e) = removed {
            let _ = e.stop.send(true);
        }
    }
}

impl Drop for Endpoints {
    fn drop(&mut self) {
        for e in self
            .open
            .get_mut()
            .map(|m| m.values())
            .into_iter()
            .flatten()
        {
            let _ = e.stop.send(true);
        }
    }
}

/// The serving certificate in force, by the identity of what signed it.
type Cache = Arc<Mutex<Option<(String, Arc<ServerConfig>)>>>;

/// One endpoint's server.
struct Server {
    sim: Weak<dyn Simulation>,
    key: Key,
    serving: Serving,
    cache: Cache,
}

impl Server {
    async fn run(
        self,
        tcp: std::net::TcpListener,
        stop: Arc<watch::Sender<bool>>,
        stop_rx: watch::Receiver<bool>,
    ) {
        let tcp = match TcpListener::from_std(tcp) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "workload API endpoint cannot listen");
                return;
            }
        };
        // The simulated cluster shutting down closes every endpoint.
        let mut global = self.serving.shutdown.clone();
        let forward = stop.clone();
        let mut closed = stop_rx.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = global.wait_for(|v| *v) => { let _ = forward.send(true); }
                _ = closed.wait_for(|v| *v) => {}
            }
        });
        let local = tcp.local_addr().ok();
        let (tx, incoming) =
            TlsListener::fed(local.unwrap_or_else(|| SocketAddr::from((Ipv4Addr::LOCALHOST, 0))));
        let Some(sim) = self.sim.upgrade() else {
            return;
        };
        let state = ApiState {
            // Unused: a workload-scoped request resolves its cluster's store.
            store: sim.store().clone(),
            workloads: sim.workloads_arc(),
            scope: Scope::Workload {
                namespace: self.key.0.clone(),
                cluster: self.key.1.clone(),
            },
            shutdown: stop_rx.clone(),
            bookmark_interval: self.serving.bookmark_interval,
            available: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            // No RBAC on a workload API: its client certificates are cluster admin.
            denials: Arc::default(),
            // Not the management cluster's: not counted.
            requests: None,
        };
        drop(sim);
        let auth = Auth {
            sim: self.sim.clone(),
            key: self.key.clone(),
        };
        let app = router(state)
            .layer(axum::middleware::from_fn_with_state(auth, authenticate))
            .into_make_service_with_connect_info::<Peer>();
        let mut graceful = stop_rx.clone();
        let serve = axum::serve(incoming, app).with_graceful_shutdown(async move {
            let _ = graceful.wait_for(|v| *v).await;
        });
        let accept = self.accept(tcp, tx, stop_rx);
        let (served, ()) = tokio::join!(serve, accept);
        if let Err(e) = served {
            tracing::warn!(error = %e, "workload API endpoint failed");
        }
    }

    /// Accepts connections and hands each, once its handshake succeeded, to the HTTP server.
    async fn accept(
        &self,
        tcp: TcpListener,
        tx: mpsc::Sender<Handshaken>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let accepted = tokio::select! {
                _ = stop.wait_for(|v| *v) => return,
                r = tcp.accept() => r,
            };
            let (mut socket, addr) = match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e, "workload API endpoint accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // As a real API server: events and answers leave at once (no Nagle delay).
            crate::listener::no_delay(&mut socket);
            let Some(sim) = self.sim.upgrade() else {
                return;
            };
            // No workload cluster yet: a load balancer without members resets the connection.
            let Some(config) = self.tls_config(sim.as_ref()) else {
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let accepted = tokio::time::timeout(
                    HANDSHAKE_TIMEOUT,
                    TlsAcceptor::from(config).accept(socket),
                )
                .await;
                match accepted {
                    Ok(Ok(stream)) => {
                        let _ = tx.send((stream, addr)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "workload API TLS handshake failed"),
                    Err(_) => tracing::debug!("workload API TLS handshake timed out"),
                }
            });
        }
    }

    /// The TLS configuration for the next connection, `None` while the cluster has no workload
    /// API. The serving certificate is re-issued when the signing CA changes.
    fn tls_config(&self, sim: &dyn Simulation) -> Option<Arc<ServerConfig>> {
        let (ns, cluster) = (&self.key.0, &self.key.1);
        sim.workloads().get(ns, cluster)?;
        let signer = sim
            .control_plane_pki(ns, cluster, false)
            .into_iter()
            .find_map(|(_, m)| m.serving_ca);
        let id = signer
            .as_ref()
            .and_then(|(pem, _)| parse_bundle(pem).ok()?.first().map(|c| c.pin()))
            .unwrap_or_else(|| "self-signed".into());
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((cached, config)) = cache.as_ref()
            && *cached == id
        {
            return Some(config.clone());
        }
        match server_config(signer.as_ref()) {
            Ok(config) => {
                *cache = Some((id, config.clone()));
                Some(config)
            }
            Err(e) => {
                tracing::warn!(%ns, %cluster, error = %e, "cannot issue the workload API serving certificate");
                None
            }
        }
    }
}

/// A serving certificate as kubeadm issues the apiserver's, signed by `signer` (a CA bundle
/// whose first certificate belongs to the key) or self-signed.
fn serving_certificate(
    signer: Option<&(String, SigningKey)>,
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), String> {
    let e = |e: rcgen::Error| e.to_string();
    let mut params = CertificateParams::new(vec![
        "localhost".to_string(),
        Ipv4Addr::LOCALHOST.to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
    ])
    .map_err(e)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(e)?;
    let cert = match signer {
        Some((ca_pem, ca_key)) => {
            let issuer = Issuer::from_ca_cert_pem(ca_pem, KeyPair::from_pem(&ca_key.0).map_err(e)?)
                .map_err(e)?;
            params.signed_by(&key, &issuer).map_err(e)?
        }
        None => params.self_signed(&key).map_err(e)?,
    };
    Ok((
        cert.der().clone(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    ))
}

fn server_config(signer: Option<&(String, SigningKey)>) -> Result<Arc<ServerConfig>, String> {
    let (cert, key) = serving_certificate(signer)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = Arc::new(RequestClientCert {
        algorithms: provider.signature_verification_algorithms,
    });
    let mut config = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)
        .map_err(|e| e.to_string())?;
    // The HTTP server speaks HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Go's `tls.RequestClientCert`, which kube-apiserver uses: a client certificate is asked for
/// and its possession proven, but its chain is left to per-request authentication (so a
/// rotated-out CA's certificate gets 401, not a handshake failure).
#[derive(Debug)]
struct RequestClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The client certificate a connection presented (DER), if any.
#[derive(Clone, Debug)]
struct Peer(Option<Vec<u8>>);

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let (_, conn) = stream.io().get_ref();
        Peer(
            conn.peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.as_ref().to_vec()),
        )
    }
}

#[derive(Clone)]
struct Auth {
    sim: Weak<dyn Simulation>,
    key: Key,
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code.as_u16()});
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// kube-apiserver's authentication, for the one identity the simulator models (the admin).
async fn authenticate(State(auth): State<Auth>, req: Request, next: Next) -> Response {
    let Some(sim) = auth.sim.upgrade() else {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the server is shutting down".into(),
        );
    };
    let (ns, cluster) = (&auth.key.0, &auth.key.1);
    let cert = req
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .and_then(|c| c.0.0.clone());
    let token = req.headers().contains_key(header::AUTHORIZATION);
    let verdict = if !sim.workload_pki_modelled(ns, cluster) {
        // No CA modelled: kubeconfigs carry a bearer token, which is not checked.
        Ok(())
    } else if let Some(der) = &cert {
        if sim.workload_accepts_der(ns, cluster, der) {
            Ok(())
        } else {
            Err(StatusCode::UNAUTHORIZED)
        }
    } else if token {
        Err(StatusCode::UNAUTHORIZED)
    } else if PUBLIC_PATHS.contains(&req.uri().path()) {
        Ok(())
    } else {
        Err(StatusCode::FORBIDDEN)
    };
    match verdict {
        Ok(()) => next.run(req).await,
        Err(StatusCode::FORBIDDEN) => status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "forbidden: User \"system:anonymous\" cannot {} path \"{}\"",
                req.method().as_str().to_ascii_lowercase(),
                req.uri().path()
            ),
        ),
        Err(code) => status(code, "Unauthorized", "Unauthorized".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::pki::{generate_ca, verifies};

    #[test]
    fn serving_certificates_are_signed_by_the_ca_and_name_the_loopback() {
        let ca = generate_ca("kubernetes").unwrap();
        let signer = (ca.cert_pem.clone(), SigningKey(ca.key_pem.clone()));
        let (cert, _) = serving_certificate(Some(&signer)).unwrap();
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, cert.as_ref())
        );
        assert!(verifies(&pem, &ca.cert_pem));
        let (_, x509) = x509_parser::parse_x509_certificate(cert.as_ref()).unwrap();
        let san = x509.subject_alternative_name().unwrap().unwrap().value;
        let names = format!("{:?}", san.general_names);
        assert!(
            names.contains("127.0.0.1") || names.contains("[127, 0, 0, 1]"),
            "{names}"
        );
        assert!(names.contains("localhost"), "{names}");
        assert!(server_config(None).is_ok());
    }
}
