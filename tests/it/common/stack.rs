//! The service under test wired to the real Keystone (tokens, catalog) and the fake
//! Nova/Glance/Neutron registered in that catalog.

use std::sync::{Arc, OnceLock};

use magnum_capi::app::AuthMode;
use magnum_capi::config::Config;
use magnum_capi::openstack::Keystone as KeystoneClient;

use super::fakecloud::FakeCloud;
use super::keystone::{Keystone, keystone};
use super::{TestApp, app_with_auth};

static CLOUD: OnceLock<FakeCloud> = OnceLock::new();

/// The fake cloud of this process: served from its own runtime thread (it outlives every
/// test's runtime) and registered in the Keystone catalog as `image`, `compute`, `network`.
pub fn cloud() -> &'static FakeCloud {
    CLOUD.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let c = FakeCloud::start().await;
                let ks = keystone();
                ks.register_services(&c.catalog())
                    .await
                    .expect("registering the fake cloud");
                tx.send(c).expect("handing over the fake cloud");
                std::future::pending::<()>().await
            })
        });
        rx.recv().expect("fake cloud started")
    })
}

/// Keystone and the fake cloud, started (blocking work kept off the test's runtime).
pub async fn parts() -> (&'static Keystone, &'static FakeCloud) {
    tokio::task::spawn_blocking(|| (keystone(), cloud()))
        .await
        .expect("starting Keystone and the fake cloud")
}

/// Serves `state` on a loopback port and points the catalog's `container-infra` endpoint at it
/// (one per Keystone: hold `env_exclusive`, or be the only such test of the binary).
pub async fn serve_as_endpoint(state: &magnum_capi::app::AppState) -> tokio::task::JoinHandle<()> {
    let (ks, _) = parts().await;
    let (port, server) = serve_loopback(state).await;
    ks.register_endpoint_async(&format!("http://127.0.0.1:{port}/v1"))
        .await
        .expect("registering the endpoint");
    server
}

/// Serves `state` on a loopback port as `serve` does (`[http]` TLS and trusted proxies
/// included); its port and the server's task.
pub async fn serve_loopback(
    state: &magnum_capi::app::AppState,
) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("loopback port");
    let port = listener.local_addr().expect("bound").port();
    let tls = magnum_capi::server::tls_config(&state.config.http).expect("TLS configuration");
    let state = state.clone();
    let server = tokio::spawn(async move {
        magnum_capi::server::serve_api(&state, listener, tls, std::future::pending())
            .await
            .expect("serving the API");
    });
    (port, server)
}

/// An instance on its own database whose requests are authenticated by the real Keystone, with
/// the worker running.
pub async fn keystone_app(tweak: impl FnOnce(&mut Config)) -> TestApp {
    let (ks, _) = parts().await;
    app_with_auth(
        |cfg| {
            cfg.keystone = ks.service_config();
            tweak(cfg)
        },
        |cfg| {
            AuthMode::Keystone(Arc::new(
                KeystoneClient::new(&cfg.keystone, &cfg.openstack).expect("keystone client"),
            ))
        },
    )
    .await
    .with_worker()
}

/// Tests that take the shared fake cloud or Keystone down, slow them or inspect the request log
/// hold this exclusively; every other test of the process holds it shared.
static ENV_USE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

pub async fn env_shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    ENV_USE.read().await
}

pub async fn env_exclusive() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    ENV_USE.write().await
}
