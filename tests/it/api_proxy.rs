//! Private clusters (docs/private-clusters.md): `magnum-capi api-proxy` dials a private API from
//! inside the network namespace Neutron would give the tenant's router (a real namespace,
//! created here with `ip netns`, holding a TLS API the host cannot reach), only for the client
//! that presents that cluster's credential, only to that cluster's endpoint (two clusters with
//! the same address each reach their own), and a bounded number at once; and the service writes
//! the proxy with each cluster's credential into a private cluster's kubeconfig (again after
//! CAPI regenerates it) and reaches the cluster through it itself.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use magnum_capi::api_proxy::ApiProxy;
use magnum_capi::capi::apply::resource;
use magnum_capi::config::ApiProxyConfig;
use magnum_capi::proxy_auth::{ProxyKey, ProxyUrls};
use magnum_capi::simkube::SimCluster;
use magnum_capi::simkube::requests::Verb;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::capi::{bare_sim, capi_app_on, capi_names, secret_text};
use crate::common::wait::until;
use crate::common::*;

/// The deployment's proxy key (`[capi] api_proxy_key`, `[api_proxy] key`): base64 of 32 bytes.
const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// Another deployment's.
const OTHER_KEY: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

fn key(text: &str) -> ProxyKey {
    ProxyKey::from_base64(&text.to_string().into()).unwrap()
}

/// The `proxy-url` cluster `cluster` (`<namespace>/<name>`) gets for `proxy`.
fn proxy_url(proxy: &ApiProxy, cluster: &str) -> String {
    ProxyUrls::new(&format!("http://{}", proxy.addr()), key(KEY))
        .unwrap()
        .for_cluster(cluster)
}

/// A proxy holding [`KEY`] on loopback, following `sim`'s OpenStackClusters.
async fn start_proxy(sim: &SimCluster, cfg: &ApiProxyConfig) -> ApiProxy {
    let bound = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ApiProxy::start(cfg, key(KEY), sim.client(), bound).unwrap()
}

/// A network namespace of `ip netns`, named like Neutron's router namespaces; deleted on drop.
struct NetNs {
    name: String,
}

impl NetNs {
    fn router(router_id: &str) -> NetNs {
        let name = format!("qrouter-{router_id}");
        ip(&["netns", "add", &name]);
        let ns = NetNs { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// A listener on 127.0.0.1 inside the namespace (bound by a thread that entered it; the
    /// socket stays in the namespace).
    fn listen(&self) -> std::net::TcpListener {
        self.listen_on("127.0.0.1:0".parse().unwrap())
    }

    /// A listener on `addr` inside the namespace: the same address in another namespace is
    /// another endpoint.
    fn listen_on(&self, addr: std::net::SocketAddr) -> std::net::TcpListener {
        let path = self.path();
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let l = std::net::TcpListener::bind(addr).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .join()
        .unwrap()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args:?} (network namespaces need root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the API inside the namespace answers at `/version`.
const MARKER: &str = "v1.33.5-inside-the-tenant-network";

/// A TLS API answering `marker` at `/version` on `listener`; the PEM of the CA its certificate
/// (for 127.0.0.1) is signed by.
async fn serve_tls_api(listener: std::net::TcpListener, marker: &'static str) -> String {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpListener::from_std(listener).unwrap();
    let tls = magnum_capi::listener::TlsListener::new(tcp, Arc::new(config)).unwrap();
    let app = axum::Router::new().route(
        "/version",
        axum::routing::get(move || async move {
            axum::Json(json!({"major": "1", "minor": "33", "gitVersion": marker,
                              "gitCommit": "", "gitTreeState": "", "buildDate": "",
                              "goVersion": "", "compiler": "", "platform": "linux/amd64"}))
        }),
    );
    tokio::spawn(async move { axum::serve(tls, app).await });
    ca_pem
}

/// A kubeconfig for the API at `server` trusting `ca_pem`, through `proxy` when given.
fn kubeconfig(server: &str, ca_pem: &str, proxy: Option<&str>) -> String {
    let mut cluster = json!({"server": server,
        "certificate-authority-data": STANDARD.encode(ca_pem)});
    if let Some(p) = proxy {
        cluster["proxy-url"] = json!(p);
    }
    yaml_serde::to_string(&json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }))
    .unwrap()
}

/// The `gitVersion` the API of kubeconfig `text` answers, read as the driver reads workload
/// clusters (`capi::workload::kubeconfig_client`).
async fn version(text: &str) -> Result<String, String> {
    let client = magnum_capi::capi::workload::kubeconfig_client(text).await?;
    client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .map_err(|e| e.to_string())
}

const NS: &str = "magnum-private";

/// An OpenStackCluster the service would have made in namespace [`NS`], its API on `endpoint`
/// without a floating IP (`private`), behind router `router_id`.
async fn put_openstack_cluster(
    sim: &SimCluster,
    name: &str,
    endpoint: &str,
    private: bool,
    router_id: &str,
) {
    put_openstack_cluster_in(sim, NS, name, endpoint, private, router_id).await;
}

/// [`put_openstack_cluster`] in namespace `ns` (another project's).
async fn put_openstack_cluster_in(
    sim: &SimCluster,
    ns: &str,
    name: &str,
    endpoint: &str,
    private: bool,
    router_id: &str,
) {
    sim.store().ensure_namespace(ns).unwrap();
    let (host, port) = endpoint.rsplit_once(':').unwrap();
    let (av, kind) = magnum_capi::capi::kinds::OPENSTACK_CLUSTER;
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client(), ns, &resource(av, kind));
    let obj = json!({"apiVersion": av, "kind": kind,
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"magnum.openstack.org/cluster-uuid": uuid::Uuid::new_v4().to_string()}},
        "spec": {"identityRef": {"cloudName": "openstack", "name": "creds"},
                 "disableAPIServerFloatingIP": private,
                 "controlPlaneEndpoint": {"host": host, "port": port.parse::<u16>().unwrap()}}});
    api.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
    let status = json!({"status": {"ready": true,
        "router": {"id": router_id, "name": "router"},
        "network": {"id": uuid::Uuid::new_v4().to_string(), "name": "network"}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The proxy's answer (status line and headers) to a raw request.
async fn proxy_reply(proxy: std::net::SocketAddr, request: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0; 1024];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The first line of the proxy's answer to a raw request.
async fn proxy_answer(proxy: std::net::SocketAddr, request: &str) -> String {
    let reply = proxy_reply(proxy, request).await;
    reply.lines().next().unwrap_or_default().to_string()
}

/// `CONNECT target`, with `Proxy-Authorization: authorization` when given.
fn connect(target: &str, authorization: Option<&str>) -> String {
    let auth = authorization
        .map(|a| format!("Proxy-Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n")
}

/// `CONNECT target` with the credential of cluster `cluster` under [`KEY`].
fn connect_as(cluster: &str, target: &str) -> String {
    connect(target, Some(&key(KEY).authorization(cluster)))
}

#[tokio::test]
async fn the_proxy_reaches_a_private_api_from_its_router_namespace_and_nothing_else() {
    let router = uuid::Uuid::new_v4().to_string();
    let ns = NetNs::router(&router);
    let listener = ns.listen();
    let endpoint = listener.local_addr().unwrap().to_string();
    let ca = serve_tls_api(listener, MARKER).await;
    let server = format!("https://{endpoint}");

    // The host itself cannot reach the API in the tenant's namespace.
    assert_ne!(
        version(&kubeconfig(&server, &ca, None))
            .await
            .ok()
            .as_deref(),
        Some(MARKER)
    );

    let sim = bare_sim(NS).await;
    put_openstack_cluster(&sim, "private", &endpoint, true, &router).await;
    // Private, but its router is on another node: allowlisted, not reachable from here.
    put_openstack_cluster(
        &sim,
        "elsewhere",
        "127.0.0.1:1",
        true,
        &uuid::Uuid::new_v4().to_string(),
    )
    .await;
    // An API with a floating IP is never proxied, even at an address in the same namespace.
    let public = format!("127.0.0.2:{}", endpoint.rsplit_once(':').unwrap().1);
    put_openstack_cluster(&sim, "public", &public, false, &router).await;

    let cfg = ApiProxyConfig::default();
    assert_eq!(cfg.netns_dir, PathBuf::from("/run/netns"));
    let proxy = start_proxy(&sim, &cfg).await;
    until("the allowlist to hold both private clusters", || async {
        (proxy.allowlist().len() == 2).then_some(())
    })
    .await;
    let base = format!("http://{}", proxy.addr());
    // What `magnum-capi check` asks of `[capi] api_proxy_url`: this proxy, with our key.
    magnum_capi::api_proxy::probe(&base, &key(KEY))
        .await
        .unwrap();
    let not_a_proxy = magnum_capi::api_proxy::probe(sim.url(), &key(KEY))
        .await
        .unwrap_err();
    assert!(
        not_a_proxy.contains("is not magnum-capi api-proxy"),
        "{not_a_proxy}"
    );
    let other_key = magnum_capi::api_proxy::probe(&base, &key(OTHER_KEY))
        .await
        .unwrap_err();
    assert!(
        other_key.contains("refuses the service's credentials"),
        "{other_key}"
    );

    // Through the proxy, with the cluster's proxy-url: the API inside the router namespace.
    let private = format!("{NS}/private");
    let through = kubeconfig(&server, &ca, Some(&proxy_url(&proxy, &private)));
    assert_eq!(version(&through).await.unwrap(), MARKER);
    assert_eq!(proxy.tunnels_to(&private), 1);

    // Everything else is refused, saying why.
    let refused = proxy_answer(proxy.addr(), &connect_as(&format!("{NS}/public"), &public)).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let sim_api = sim.url().trim_start_matches("http://").to_string();
    let refused = proxy_answer(proxy.addr(), &connect_as(&private, &sim_api)).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let elsewhere = proxy_answer(
        proxy.addr(),
        &connect_as(&format!("{NS}/elsewhere"), "127.0.0.1:1"),
    )
    .await;
    assert!(elsewhere.starts_with("HTTP/1.1 502"), "{elsewhere}");
    let plain = proxy_answer(
        proxy.addr(),
        &format!("GET http://{sim_api}/ HTTP/1.1\r\nHost: {sim_api}\r\n\r\n"),
    )
    .await;
    assert!(plain.starts_with("HTTP/1.1 405"), "{plain}");
    assert_eq!(proxy.tunnels_to(&private), 1);
    assert_eq!(proxy.tunnels_to(&format!("{NS}/elsewhere")), 0);

    // A deleted cluster leaves the allowlist: its credential opens nothing.
    let (av, kind) = magnum_capi::capi::kinds::OPENSTACK_CLUSTER;
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client(), NS, &resource(av, kind));
    api.delete("private", &Default::default()).await.unwrap();
    until("the deleted cluster to leave the allowlist", || async {
        proxy.allowlist().get(&private).is_none().then_some(())
    })
    .await;
    let refused = proxy_answer(proxy.addr(), &connect_as(&private, &endpoint)).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
}

/// Every cluster's default network is the same `10.0.0.0/24`, so two tenants' private clusters
/// can have the same API address, each behind its own router: each kubeconfig's proxy-url names
/// its cluster, which decides where the proxy dials, and one cluster's delete leaves the
/// other's route.
#[tokio::test]
async fn two_private_clusters_with_the_same_api_address_each_reach_their_own() {
    let (router_a, router_b) = (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    );
    let (ns_a, ns_b) = (NetNs::router(&router_a), NetNs::router(&router_b));
    let listener_a = ns_a.listen();
    let vip = listener_a.local_addr().unwrap();
    let listener_b = ns_b.listen_on(vip);
    let ca_a = serve_tls_api(listener_a, "v1.33.5-project-a").await;
    let ca_b = serve_tls_api(listener_b, "v1.33.5-project-b").await;
    let server = format!("https://{vip}");

    let sim = bare_sim("magnum-project-a").await;
    let (a, b) = ("magnum-project-a/cluster", "magnum-project-b/cluster");
    put_openstack_cluster_in(
        &sim,
        "magnum-project-a",
        "cluster",
        &vip.to_string(),
        true,
        &router_a,
    )
    .await;
    put_openstack_cluster_in(
        &sim,
        "magnum-project-b",
        "cluster",
        &vip.to_string(),
        true,
        &router_b,
    )
    .await;
    let proxy = start_proxy(&sim, &ApiProxyConfig::default()).await;
    until("the allowlist to hold both clusters", || async {
        (proxy.allowlist().len() == 2).then_some(())
    })
    .await;
    let kubeconfig_a = kubeconfig(&server, &ca_a, Some(&proxy_url(&proxy, a)));
    let kubeconfig_b = kubeconfig(&server, &ca_b, Some(&proxy_url(&proxy, b)));
    for _ in 0..3 {
        assert_eq!(version(&kubeconfig_a).await.unwrap(), "v1.33.5-project-a");
        assert_eq!(version(&kubeconfig_b).await.unwrap(), "v1.33.5-project-b");
    }
    assert_eq!((proxy.tunnels_to(a), proxy.tunnels_to(b)), (3, 3));

    // A's cluster is deleted: B still reaches its own API, A's credential opens nothing.
    let (av, kind) = magnum_capi::capi::kinds::OPENSTACK_CLUSTER;
    let api: Api<DynamicObject> =
        Api::namespaced_with(sim.client(), "magnum-project-a", &resource(av, kind));
    api.delete("cluster", &Default::default()).await.unwrap();
    until("the deleted cluster to leave the allowlist", || async {
        (proxy.allowlist().len() == 1).then_some(())
    })
    .await;
    assert_eq!(version(&kubeconfig_b).await.unwrap(), "v1.33.5-project-b");
    let refused = proxy_answer(proxy.addr(), &connect_as(a, &vip.to_string())).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
}

/// Anyone who reaches the proxy is asked for a private cluster's credential (407), which only
/// opens that cluster's own endpoint: no credential, another deployment's, one cluster's
/// password under another's name and anything but Basic are refused before anything is dialled.
#[tokio::test]
async fn only_a_private_clusters_credential_opens_a_tunnel_and_only_to_it() {
    // The "APIs": plain listeners on loopback, dialled from the host (no namespace here).
    let api_a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api_b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (ep_a, ep_b) = (
        api_a.local_addr().unwrap().to_string(),
        api_b.local_addr().unwrap().to_string(),
    );
    let sim = bare_sim(NS).await;
    put_openstack_cluster(&sim, "a", &ep_a, true, "r1").await;
    put_openstack_cluster(&sim, "b", &ep_b, true, "r2").await;
    let netns_dir = tempfile::tempdir().unwrap();
    let cfg = ApiProxyConfig {
        dial_from_host: true,
        netns_dir: netns_dir.path().to_path_buf(),
        ..ApiProxyConfig::default()
    };
    let proxy = start_proxy(&sim, &cfg).await;
    until("the allowlist to hold both clusters", || async {
        (proxy.allowlist().len() == 2).then_some(())
    })
    .await;
    let (a, b) = (format!("{NS}/a"), format!("{NS}/b"));

    let unauthenticated = proxy_reply(proxy.addr(), &connect(&ep_a, None)).await;
    assert!(
        unauthenticated.starts_with("HTTP/1.1 407"),
        "{unauthenticated}"
    );
    assert!(
        unauthenticated
            .to_ascii_lowercase()
            .contains("proxy-authenticate: basic realm=\"magnum-capi api-proxy\""),
        "{unauthenticated}"
    );
    let foreign = key(OTHER_KEY).authorization(&a);
    // a's password under b's name.
    let pair = String::from_utf8(
        STANDARD
            .decode(key(KEY).authorization(&a).trim_start_matches("Basic "))
            .unwrap(),
    )
    .unwrap();
    let borrowed = format!("Basic {}", STANDARD.encode(pair.replacen(&a, &b, 1)));
    for wrong in [
        foreign.as_str(),
        borrowed.as_str(),
        "Basic bWFnbnVtLXByaXZhdGUvYTo=",
        "Bearer x",
    ] {
        let refused = proxy_answer(proxy.addr(), &connect(&ep_b, Some(wrong))).await;
        assert!(refused.starts_with("HTTP/1.1 407"), "{wrong}: {refused}");
    }
    assert_eq!(proxy.tunnels_to(&b), 0);

    // a's credential opens a's endpoint, and not b's.
    let opened = proxy_answer(proxy.addr(), &connect_as(&a, &ep_a)).await;
    assert!(opened.starts_with("HTTP/1.1 200"), "{opened}");
    let refused = proxy_answer(proxy.addr(), &connect_as(&a, &ep_b)).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert_eq!((proxy.tunnels_to(&a), proxy.tunnels_to(&b)), (1, 0));
}

/// `[api_proxy] max_dials` bounds the connections being opened (each namespaced one is a thread
/// of its own): one more is refused with 503 at once, and the permit comes back when a dial ends.
#[tokio::test]
async fn a_dial_beyond_max_dials_is_refused_with_503() {
    // An "API" whose accept queue is full: a connection to it hangs in the dial until the test
    // accepts the one queued.
    let api = tokio::net::TcpSocket::new_v4().unwrap();
    api.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let api = api.listen(0).unwrap();
    let endpoint = api.local_addr().unwrap().to_string();
    let _queued = std::net::TcpStream::connect(&endpoint).unwrap();
    let sim = bare_sim(NS).await;
    put_openstack_cluster(&sim, "slow", &endpoint, true, "r1").await;
    let netns_dir = tempfile::tempdir().unwrap();
    let cfg = ApiProxyConfig {
        dial_from_host: true,
        netns_dir: netns_dir.path().to_path_buf(),
        max_dials: 1,
        connect_timeout_secs: 30,
        ..ApiProxyConfig::default()
    };
    let proxy = start_proxy(&sim, &cfg).await;
    until("the allowlist to hold the cluster", || async {
        (proxy.allowlist().len() == 1).then_some(())
    })
    .await;
    let slow = format!("{NS}/slow");
    let addr = proxy.addr();
    let request = connect_as(&slow, &endpoint);
    let first = tokio::spawn({
        let request = request.clone();
        async move { proxy_answer(addr, &request).await }
    });
    until("the first dial to be under way", || async {
        (proxy.dialling() == 1).then_some(())
    })
    .await;
    let refused = proxy_reply(addr, &request).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("max_dials = 1"), "{refused}");

    // The API accepts: the first dial completes, and its permit serves the next one.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = api.accept().await {
            held.push(s);
        }
    });
    let first = first.await.unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    until("the permit to come back", || async {
        (proxy.dialling() == 0).then_some(())
    })
    .await;
    let again = proxy_answer(addr, &request).await;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    assert_eq!(proxy.tunnels_to(&slow), 2);
}

/// The kubeconfig CAPI keeps for cluster `c` (its `proxy-url`, its client certificate).
fn capi_kubeconfig(app: &crate::common::capi::CapiApp, c: &str) -> Option<Value> {
    let (ns, name) = capi_names(c);
    let secret = app.sim.store().get(
        &magnum_capi::simkube::Resource::of("v1", "Secret"),
        &ns,
        &format!("{name}-kubeconfig"),
    )?;
    Some(yaml_serde::from_str(&secret_text(&secret, "value")).unwrap())
}

async fn cluster(t: &TestApp, name: &str, labels: Value) -> String {
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"name": name, "image_id": "ubuntu-2404-kube-v1.33.5", "coe": "kubernetes",
                   "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                   "external_network_id": "public", "master_lb_enabled": true,
                   "labels": labels}),
        )
        .await;
    r.assert_status(201);
    t.cluster(&ALICE, name, r.body["uuid"].as_str().unwrap())
        .await
}

#[tokio::test]
async fn a_private_clusters_kubeconfig_names_the_proxy_and_the_services_own_reads_go_through_it() {
    // The proxy on the host (`dial_from_host`: no Neutron namespace here; the simulated APIs
    // are on loopback), its URL and key configured as `[capi] api_proxy_url`/`api_proxy_key`.
    let bound = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", bound.local_addr().unwrap());
    let app = capi_app_on(None, None, false, move |cfg| {
        cfg.capi.api_proxy_url = Some(url);
        cfg.capi.api_proxy_key = Some(KEY.to_string().into());
    })
    .await;
    let netns_dir = tempfile::tempdir().unwrap();
    let cfg = ApiProxyConfig {
        dial_from_host: true,
        netns_dir: netns_dir.path().to_path_buf(),
        ..ApiProxyConfig::default()
    };
    let proxy = ApiProxy::start(&cfg, key(KEY), app.sim.client(), bound).unwrap();
    let t = &app.t;
    let private = cluster(
        t,
        "private",
        json!({"kube_tag": "v1.33.5", "master_lb_floating_ip_enabled": "false"}),
    )
    .await;
    let public = cluster(t, "public", json!({"kube_tag": "v1.33.5"})).await;
    t.wait_cluster(&ALICE, &private, "CREATE_COMPLETE").await;
    t.wait_cluster(&ALICE, &public, "CREATE_COMPLETE").await;

    // The private cluster's kubeconfig names the proxy with the cluster's own credential; the
    // public one's names no proxy.
    let (ns, name) = capi_names(&private);
    let key = format!("{ns}/{name}");
    let private_url = proxy_url(&proxy, &key);
    assert!(
        private_url.contains(&format!("{ns}%2F{name}:")),
        "{private_url}"
    );
    let with_proxy = |c: &str| {
        capi_kubeconfig(&app, c)
            .filter(|k| k["clusters"][0]["cluster"]["proxy-url"] == private_url.as_str())
    };
    let first = until("proxy-url in the private cluster's kubeconfig", || async {
        with_proxy(&private)
    })
    .await;
    let public_kc = capi_kubeconfig(&app, &public).unwrap();
    assert!(
        public_kc["clusters"][0]["cluster"]
            .get("proxy-url")
            .is_none(),
        "{public_kc}"
    );
    assert!(
        proxy.allowlist().len() == 1,
        "only the private cluster is allowlisted"
    );

    // The service's own workload reads (the CA rotation's cluster-info updates) go through the
    // proxy, and CAPI's regenerated kubeconfigs (phases 2 and 3) get the proxy-url again.
    let before = proxy.tunnels_to(&key);
    let r = t
        .patch(&ALICE, &format!("/v1/certificates/{private}"), json!(null))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    t.wait_cluster(&ALICE, &private, "UPDATE_COMPLETE").await;
    assert!(
        proxy.tunnels_to(&key) > before,
        "the rotation did not go through the proxy"
    );
    let again = until("proxy-url in the regenerated kubeconfig", || async {
        with_proxy(&private).filter(|k| k["users"] != first["users"])
    })
    .await;
    assert_eq!(
        again["clusters"][0]["cluster"]["server"],
        first["clusters"][0]["cluster"]["server"]
    );

    // Keeping the proxy-url costs the management cluster nothing per Secret event: whether a
    // cluster is private is read from the watchers' index. Five changes of the public cluster's
    // kubeconfig, then one regeneration of the private one's without the proxy-url: once that
    // has it again, the keeper has seen the five before it, and only written the one.
    let secret_res = magnum_capi::simkube::Resource::of("v1", "Secret");
    let kubeconfig_secret = |c: &str| {
        let (ns, name) = capi_names(c);
        (*app
            .sim
            .store()
            .get(&secret_res, &ns, &format!("{name}-kubeconfig"))
            .unwrap())
        .clone()
    };
    let before = app.sim.requests();
    for i in 0..5 {
        let mut s = kubeconfig_secret(&public);
        s["metadata"]["annotations"] = json!({"test/touched": i.to_string()});
        app.sim.store().put(&secret_res, s).unwrap();
    }
    let mut s = kubeconfig_secret(&private);
    let mut kc: Value = yaml_serde::from_str(&secret_text(&s, "value")).unwrap();
    kc["clusters"][0]["cluster"]
        .as_object_mut()
        .unwrap()
        .remove("proxy-url");
    s["data"]["value"] = json!(STANDARD.encode(yaml_serde::to_string(&kc).unwrap()));
    app.sim.store().put(&secret_res, s).unwrap();
    until("proxy-url in the kubeconfig regenerated again", || async {
        with_proxy(&private)
    })
    .await;
    let asked = app.sim.requests().since(&before);
    assert_eq!(
        asked.count(|k| k.resource.starts_with("openstackclusters.")),
        0,
        "the keeper asked for OpenStackClusters: {asked}"
    );
    assert_eq!(
        asked.count(|k| k.resource == "secrets" && k.verb != Verb::Watch),
        1,
        "only the private kubeconfig is written: {asked}"
    );
}

/// The kubeconfig keeper reads whether a cluster is private from the watchers' index, whose
/// watches may lag the Secrets': a kubeconfig seen before its cluster's OpenStackCluster is
/// indexed gets the proxy-url once that cluster's objects arrive (not only on the Secret's
/// next change, which CAPI may never make).
#[tokio::test]
async fn a_kubeconfig_seen_before_its_cluster_is_indexed_gets_the_proxy_url_once_it_is() {
    use magnum_capi::capi::{LABEL_CAPI_CLUSTER_NAME, LABEL_CLUSTER_UUID, kinds};
    use magnum_capi::simkube::Resource;
    let urls = ProxyUrls::new("http://proxy.example:3128", key(KEY)).unwrap();
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.capi.api_proxy_url = Some(urls.base().into());
        cfg.capi.api_proxy_key = Some(KEY.to_string().into());
    })
    .await;
    // Only the objects seeded here: no simulated controller acts on them.
    app.sim.pause();
    let store = app.sim.store();
    let res = |(av, kind): kinds::Gvk| Resource::of(av, kind);
    store
        .put(
            &Resource::of("v1", "Namespace"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        )
        .unwrap();
    // A private cluster's Cluster and OpenStackCluster, as the service would label them.
    let seed_cluster = |name: &str| {
        let labels = json!({LABEL_CLUSTER_UUID: uuid::Uuid::new_v4().to_string()});
        let meta = json!({"name": name, "namespace": NS, "labels": labels});
        let (av, kind) = kinds::CLUSTER;
        store
            .put(
                &res(kinds::CLUSTER),
                json!({"apiVersion": av, "kind": kind, "metadata": meta, "spec": {"paused": true}}),
            )
            .unwrap();
        let (av, kind) = kinds::OPENSTACK_CLUSTER;
        store
            .put(
                &res(kinds::OPENSTACK_CLUSTER),
                json!({"apiVersion": av, "kind": kind, "metadata": meta,
                       "spec": {"identityRef": {"cloudName": "openstack", "name": "creds"},
                                "disableAPIServerFloatingIP": true,
                                "controlPlaneEndpoint": {"host": "10.6.0.250", "port": 6443}}}),
            )
            .unwrap();
    };
    // CAPI's kubeconfig Secret of cluster `name`, without a proxy-url.
    let seed_kubeconfig = |name: &str| {
        let value = kubeconfig("https://10.6.0.250:6443", "CA", None);
        store
            .put(
                &res(kinds::SECRET),
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": format!("{name}-kubeconfig"), "namespace": NS,
                                    "labels": {LABEL_CAPI_CLUSTER_NAME: name}},
                       "data": {"value": STANDARD.encode(value)}}),
            )
            .unwrap();
    };
    let proxied = |name: &str| {
        let s = store.get(&res(kinds::SECRET), NS, &format!("{name}-kubeconfig"))?;
        let kc: Value = yaml_serde::from_str(&secret_text(&s, "value")).unwrap();
        let url = urls.for_cluster(&format!("{NS}/{name}"));
        (kc["clusters"][0]["cluster"]["proxy-url"] == url.as_str()).then_some(())
    };

    // `indexed` is in the watchers' index before its kubeconfig appears; `late`'s objects are
    // not, when its kubeconfig is seen.
    seed_cluster("indexed");
    until(
        "the indexed cluster's OpenStackCluster in the index",
        || async {
            app.capi
                .observer()
                .openstack_cluster(NS, "indexed")
                .map(|_| ())
        },
    )
    .await;
    seed_kubeconfig("late");
    seed_kubeconfig("indexed");
    // The keeper handles its Secret events in order: once the second has its proxy-url, the
    // first was seen, while its cluster was unknown.
    until("proxy-url in the indexed cluster's kubeconfig", || async {
        proxied("indexed")
    })
    .await;
    assert!(
        proxied("late").is_none(),
        "written without knowing whether the cluster is private"
    );
    seed_cluster("late");
    until(
        "proxy-url in the kubeconfig once its cluster is indexed",
        || async { proxied("late") },
    )
    .await;
}

#[tokio::test]
async fn a_management_cluster_routed_into_the_tenant_network_reaches_a_private_cluster_directly() {
    // No `[capi] api_proxy_url`: the management cluster has a leg in the tenant networks (the
    // simulated one reaches every API it hands out), so nothing is rewritten.
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let private = cluster(
        t,
        "private",
        json!({"kube_tag": "v1.33.5", "master_lb_floating_ip_enabled": "false"}),
    )
    .await;
    let body = t
        .wait_cluster(&ALICE, &private, "CREATE_COMPLETE")
        .await
        .body;
    let (ns, name) = capi_names(&private);
    let osc = app
        .sim
        .store()
        .get(
            &magnum_capi::simkube::Resource::of(
                magnum_capi::capi::kinds::OPENSTACK_CLUSTER.0,
                magnum_capi::capi::kinds::OPENSTACK_CLUSTER.1,
            ),
            &ns,
            &name,
        )
        .unwrap();
    assert_eq!(osc["spec"]["disableAPIServerFloatingIP"], true, "{osc}");
    assert!(
        magnum_capi::capi::private::PrivateApi::of(&osc).is_some(),
        "{osc}"
    );
    let kc = capi_kubeconfig(&app, &private).unwrap();
    let endpoint = &kc["clusters"][0]["cluster"];
    assert!(endpoint.get("proxy-url").is_none(), "{kc}");
    assert_eq!(body["api_address"], endpoint["server"], "{body}");
    // The service's own reads of the workload cluster (the CA rotation) reach it directly.
    let r = t
        .patch(&ALICE, &format!("/v1/certificates/{private}"), json!(null))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    t.wait_cluster(&ALICE, &private, "UPDATE_COMPLETE").await;
}
