//! Private clusters (README "Private clusters"): `magnum-capi api-proxy` dials a private API from
//! inside the network namespace Neutron would give the tenant's router (a real namespace,
//! created here with `ip netns`, holding a TLS API the host cannot reach) and only for the
//! endpoints of private clusters; and the service writes the proxy into a private cluster's
//! kubeconfig (again after CAPI regenerates it) and reaches the cluster through it itself.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use magnum_capi::api_proxy::ApiProxy;
use magnum_capi::capi::apply::resource;
use magnum_capi::config::ApiProxyConfig;
use magnum_capi::simkube::SimCluster;
use magnum_capi::simkube::requests::Verb;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::capi::{bare_sim, capi_app_on, capi_names, secret_text};
use crate::common::wait::until;
use crate::common::*;

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
        let path = self.path();
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
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

/// A TLS API serving `/version` on `listener`; the PEM of the CA its certificate (for
/// 127.0.0.1) is signed by.
async fn serve_tls_api(listener: std::net::TcpListener) -> String {
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
        axum::routing::get(|| async {
            axum::Json(json!({"major": "1", "minor": "33", "gitVersion": MARKER,
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

/// An OpenStackCluster the service would have made, its API on `endpoint` without a floating
/// IP (`private`), behind router `router_id`.
async fn put_openstack_cluster(
    sim: &SimCluster,
    name: &str,
    endpoint: &str,
    private: bool,
    router_id: &str,
) {
    let (host, port) = endpoint.rsplit_once(':').unwrap();
    let (av, kind) = magnum_capi::capi::kinds::OPENSTACK_CLUSTER;
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client(), NS, &resource(av, kind));
    let obj = json!({"apiVersion": av, "kind": kind,
        "metadata": {"name": name, "namespace": NS,
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

/// The first line of the proxy's answer to a raw request.
async fn proxy_answer(proxy: std::net::SocketAddr, request: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0; 512];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn the_proxy_reaches_a_private_api_from_its_router_namespace_and_nothing_else() {
    let router = uuid::Uuid::new_v4().to_string();
    let ns = NetNs::router(&router);
    let listener = ns.listen();
    let endpoint = listener.local_addr().unwrap().to_string();
    let ca = serve_tls_api(listener).await;
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
    let bound = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = ApiProxy::start(&cfg, sim.client(), bound).unwrap();
    until("the allowlist to hold both private clusters", || async {
        (proxy.allowlist().len() == 2).then_some(())
    })
    .await;
    let proxy_url = format!("http://{}", proxy.addr());
    // What `magnum-capi check` asks of `[capi] api_proxy_url`: this proxy, not another server.
    magnum_capi::api_proxy::probe(&proxy_url).await.unwrap();
    let not_a_proxy = magnum_capi::api_proxy::probe(sim.url()).await.unwrap_err();
    assert!(
        not_a_proxy.contains("is not magnum-capi api-proxy"),
        "{not_a_proxy}"
    );

    // Through the proxy: the API inside the router namespace answers.
    let through = kubeconfig(&server, &ca, Some(&proxy_url));
    assert_eq!(version(&through).await.unwrap(), MARKER);
    assert_eq!(proxy.tunnels_to(&format!("{NS}/private")), 1);

    // Everything else is refused, saying why.
    let connect = |target: &str| format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    let refused = proxy_answer(proxy.addr(), &connect(&public)).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let sim_api = sim.url().trim_start_matches("http://").to_string();
    let refused = proxy_answer(proxy.addr(), &connect(&sim_api)).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let elsewhere = proxy_answer(proxy.addr(), &connect("127.0.0.1:1")).await;
    assert!(elsewhere.starts_with("HTTP/1.1 502"), "{elsewhere}");
    let plain = proxy_answer(
        proxy.addr(),
        &format!("GET http://{sim_api}/ HTTP/1.1\r\nHost: {sim_api}\r\n\r\n"),
    )
    .await;
    assert!(plain.starts_with("HTTP/1.1 405"), "{plain}");
    assert_eq!(proxy.tunnels_to(&format!("{NS}/private")), 1);
    assert_eq!(proxy.tunnels_to(&format!("{NS}/elsewhere")), 0);

    // A deleted cluster leaves the allowlist.
    let (av, kind) = magnum_capi::capi::kinds::OPENSTACK_CLUSTER;
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client(), NS, &resource(av, kind));
    api.delete("private", &Default::default()).await.unwrap();
    until("the deleted cluster to leave the allowlist", || async {
        proxy.allowlist().get(&endpoint).is_none().then_some(())
    })
    .await;
    let refused = proxy_answer(proxy.addr(), &connect(&endpoint)).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
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
    // are on loopback), its URL configured as `[capi] api_proxy_url`.
    let bound = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", bound.local_addr().unwrap());
    let url = proxy_url.clone();
    let app = capi_app_on(None, None, false, move |cfg| {
        cfg.capi.api_proxy_url = Some(url);
    })
    .await;
    let netns_dir = tempfile::tempdir().unwrap();
    let cfg = ApiProxyConfig {
        dial_from_host: true,
        netns_dir: netns_dir.path().to_path_buf(),
        ..ApiProxyConfig::default()
    };
    let proxy = ApiProxy::start(&cfg, app.sim.client(), bound).unwrap();
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

    // The private cluster's kubeconfig names the proxy; the public one's does not.
    let with_proxy = |c: &str| {
        capi_kubeconfig(&app, c)
            .filter(|k| k["clusters"][0]["cluster"]["proxy-url"] == proxy_url.as_str())
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
    let (ns, name) = capi_names(&private);
    let key = format!("{ns}/{name}");
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
    let url = "http://proxy.example:3128";
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.capi.api_proxy_url = Some(url.into());
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
        (kc["clusters"][0]["cluster"]["proxy-url"] == url).then_some(())
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
