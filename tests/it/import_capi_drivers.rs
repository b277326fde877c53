//! Clusters magnum-cluster-api and magnum-capi-helm made, imported from Magnum (issue 25): the
//! objects each driver leaves (fixtures written from their sources, `common::capi_drivers`) on
//! the simulated management cluster. Imported without a management cluster to look on, they
//! stay read-only, but the CA each driver left serves `coe ca show` and `coe ca sign` (what
//! `coe cluster config` needs);
//! a Heat cluster, which has none, refuses the signing with the read-only reason.

use crate::common::capi::{admin_csr, capi_app_on};
use crate::common::capi_drivers::{Driver, TENANT, imported_cluster, load_driver_objects};
use crate::common::*;

use magnum_capi::capi::pki;
use serde_json::json;

/// `POST /v1/certificates` of an admin CSR for cluster `c`.
async fn sign(t: &TestApp, c: &str) -> Resp {
    t.post(
        &TENANT,
        "/v1/certificates",
        json!({"cluster_uuid": c, "csr": admin_csr()}),
    )
    .await
}

#[tokio::test]
async fn the_ca_each_capi_driver_left_serves_ca_show_and_sign_and_the_cluster_stays_read_only() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    // Nothing of the management cluster acts on the fixtures.
    app.sim.pause();
    for (n, driver, stack) in [
        (1, Driver::ClusterApi, "kube-x7k2p"),
        (2, Driver::CapiHelm, "live-2-0a1b2c3d4e5f"),
    ] {
        let c = imported_cluster(t, n, driver, stack, &TENANT).await;
        let ca = pki::generate_ca("kubernetes").unwrap();
        load_driver_objects(&app.sim, driver, &c, stack, TENANT.project, &ca);

        let r = t.get(&TENANT, &format!("/v1/certificates/{c}")).await;
        r.assert_status(200);
        assert_eq!(
            r.body["pem"].as_str(),
            Some(ca.cert_pem.as_str()),
            "{driver:?}"
        );
        let etcd = t
            .get(&TENANT, &format!("/v1/certificates/{c}?ca_cert_type=etcd"))
            .await;
        etcd.assert_status(200);
        assert_ne!(
            etcd.body["pem"], r.body["pem"],
            "{driver:?}: the etcd CA is its own"
        );

        let r = sign(t, &c).await;
        r.assert_status(201);
        let cert = r.body["pem"].as_str().unwrap();
        assert!(pki::verifies(cert, &ca.cert_pem), "{driver:?}: {cert}");

        // Imported without a management cluster to look on: read-only, changes refused
        // saying why (adoption: `adopt_capi_drivers`).
        let r = t.delete(&TENANT, &format!("/v1/clusters/{c}")).await;
        assert_magnum_error(
            &r,
            400,
            &magnum_capi::domain::imported::refusal(&c, driver.entry_point()),
        );
    }

    // A CAPI driver's cluster whose CA Secret is not on this management cluster says where it
    // was looked for.
    let c = imported_cluster(t, 3, Driver::ClusterApi, "kube-gone1", &TENANT).await;
    let r = t.get(&TENANT, &format!("/v1/certificates/{c}")).await;
    assert_magnum_error(
        &r,
        400,
        &format!(
            "Cluster {c} was imported from Magnum and its CA Secret magnum-system/kube-gone1-ca is \
             not on the management cluster: this service's management cluster must be the one its \
             Magnum driver used."
        ),
    );

    // A Heat cluster has no CA here: signing is refused with the read-only reason.
    let c = imported_cluster(
        t,
        4,
        Driver::Heat,
        "5eac0000-0000-4000-8000-000000000004",
        &TENANT,
    )
    .await;
    let r = sign(t, &c).await;
    assert_magnum_error(
        &r,
        400,
        &format!(
            "Cluster {c} was imported from Magnum and is read-only: made by the Heat driver \
             (k8s_fedora_coreos_v1): magnum-capi cannot manage Heat stacks. It can be listed and \
             shown; to change it, use the Magnum that made it, or recreate it in magnum-capi (an \
             administrator can remove this record, and only the record, with `magnum-capi \
             cluster forget {c} --force --yes`)."
        ),
    );
    app.sim.resume();
}
