//! gophercloud v2, the real one, drives the service: `tests/clients/gophercloud/main.go` (ours,
//! built on `github.com/gophercloud/gophercloud/v2` as pinned in its go.mod, by
//! `tests/clients/build.sh`) authenticates against the real Keystone, finds the service as
//! `container-infra` in the catalog (gophercloud's service-type aliases) and calls every
//! containerinfra function the library has — `apiversions` List/Get; `clustertemplates`
//! Create/Get/Update/List/Delete; `clusters` Create/Get/List/ListDetail (paged)/Update/Resize
//! (1.7)/Upgrade (1.8)/Delete; `nodegroups` (1.9+) Create/Get/List/Update/Delete; `certificates`
//! Get/Create/Update (rotate); `quotas` Create — checking that gophercloud's own result types
//! decode every answer and carry the values sent, and that the errors Magnum answers arrive as
//! gophercloud's `ErrUnexpectedResponseCode` with Magnum's status. The service runs the Cluster
//! API driver on a simulated management cluster; the client certificates it signs are used on
//! the cluster's (simulated) workload API, before and after a CA rotation.
//!
//! This replaces the byte-for-byte replay of gophercloud's requests this module held while Go
//! could not run here; no replay is kept: everything the replay checked, the real client (here)
//! or the real Terraform provider (`client_terraform.rs`) now does. The one property the replay
//! forced with a paused simulator — the first GET after a resize's 202 never sees the previous
//! `UPDATE_COMPLETE` — is checked here as the real client meets it (the first status seen after
//! each update must be `UPDATE_IN_PROGRESS`).

use std::time::Instant;

use crate::common::capi::capi_app_on;
use crate::common::clients::built;
use crate::common::fakecloud::{IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT, NETWORK_PUBLIC};
use crate::common::keystone::{ADMIN_PROJECT, ADMIN_USER, DOMAIN, REGION, keystone, password};
use crate::common::stack::{cloud, env_exclusive, serve_as_endpoint};
use crate::common::wait::deadline;
use serde_json::json;

/// The steps `main.go` prints `ok` for, in order.
const STEPS: &[&str] = &[
    "authenticate and find container-infra in the catalog",
    "apiversions",
    "clustertemplates create/get/update/list/delete",
    "clusters create (a full CreateOpts and a zero-node one at 1.10)",
    "clusters list and list detail, paged",
    "nodegroups (1.9+) create/get/list/update/resize/delete",
    "clusters update (node_count) and resize (1.7)",
    "certificates get/create/rotate",
    "clusters upgrade (1.8)",
    "quotas create",
    "clusters delete",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gophercloud_v2_drives_every_containerinfra_call() {
    let dir = built().await;
    let _env = env_exclusive().await;
    let t0 = Instant::now();
    let app = capi_app_on(None, None, true, |_| {}).await;
    let server = serve_as_endpoint(&app.t.state).await;
    // The upgrade target: an image of the next minor release.
    let next = cloud().add_image(json!({"name": "ubuntu-2204-kube-v1.31.2",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.31.2"}));
    let ks = keystone();
    let mut cmd = tokio::process::Command::new(dir.join("bin/gophercloud-check"));
    cmd.env_clear()
        .env("GC_AUTH_URL", &ks.url)
        .env("GC_REGION", REGION)
        .env("GC_DOMAIN", DOMAIN)
        .env("GC_USER", "alice")
        .env("GC_PASSWORD", password("alice"))
        .env("GC_PROJECT", "alpha")
        .env("GC_ADMIN_USER", ADMIN_USER)
        .env("GC_ADMIN_PASSWORD", password(ADMIN_USER))
        .env("GC_ADMIN_PROJECT", ADMIN_PROJECT)
        .env("GC_IMAGE", IMAGE_UBUNTU_KUBE)
        .env("GC_KUBE_TAG", "v1.30.4")
        .env("GC_NEXT_IMAGE", &next)
        .env("GC_NEXT_KUBE_TAG", "v1.31.2")
        .env("GC_KEYPAIR", KEYPAIR_DEFAULT)
        .env("GC_EXTERNAL_NETWORK", NETWORK_PUBLIC)
        .env("GC_FLAVOR", "m1.small")
        .env("GC_MASTER_FLAVOR", "m1.medium")
        .env("GC_WAIT_SECONDS", deadline().as_secs().to_string())
        .kill_on_drop(true);
    eprintln!("setup done in {:.1?}", t0.elapsed());
    let out = tokio::time::timeout(deadline() * 4, cmd.output())
        .await
        .expect("gophercloud-check did not finish")
        .expect("running gophercloud-check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "{stdout}{}\ngophercloud-check done in {:.1?}",
        String::from_utf8_lossy(&out.stderr),
        t0.elapsed()
    );
    assert!(out.status.success(), "gophercloud-check: {}", out.status);
    // Every step ran, in order (a step that silently did nothing would be missing).
    let done: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .map(|l| l.rsplit_once(" (").map_or(l, |(name, _)| name))
        .collect();
    assert_eq!(done, STEPS);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&format!("PASS {} steps", STEPS.len()))),
        "{stdout}"
    );
    server.abort();
}
