//! Certificates on the Cluster API driver: the CA from the cluster's Secret, CSR signing with it
//! (a matrix of key types and bad requests), and CA rotation end to end on the simulated
//! management cluster, whose simulated apiservers accept or reject client certificates by the CAs
//! their machines were built with.

use crate::common::capi::{CapiApp, admin_csr, capi_app_on, objects, secret_text};
use crate::common::wait::until;
use crate::common::*;

use magnum_capi::capi::pki;
use serde_json::{Value, json};

const RSA2048: &str = include_str!("../fixtures/csr/rsa2048.csr");
const RSA4096: &str = include_str!("../fixtures/csr/rsa4096.csr");

/// A complete cluster (one control-plane machine, one worker) of ALICE; its uuid.
async fn cluster(t: &TestApp, tls_disabled: bool) -> String {
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"name": "k", "image_id": "ubuntu-2404-kube-v1.33.5", "coe": "kubernetes",
                   "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                   "external_network_id": "public", "tls_disabled": tls_disabled,
                   "labels": {"kube_tag": "v1.33.5"}}),
        )
        .await;
    r.assert_status(201);
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": r.body["uuid"], "node_count": 1}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    c
}

async fn sign(t: &TestApp, c: &str, csr: &str, ca_type: Option<&str>) -> Resp {
    let mut body = json!({"cluster_uuid": c, "csr": csr});
    if let Some(ty) = ca_type {
        body["ca_cert_type"] = json!(ty);
    }
    t.post(&ALICE, "/v1/certificates", body).await
}

async fn ca(t: &TestApp, c: &str, ca_type: &str) -> String {
    let r = t
        .get(
            &ALICE,
            &format!("/v1/certificates/{c}?ca_cert_type={ca_type}"),
        )
        .await;
    r.assert_status(200);
    r.body["pem"].as_str().unwrap().to_string()
}

fn names(c: &str) -> (String, String) {
    crate::common::capi::capi_names(c)
}

fn accepts(app: &CapiApp, c: &str, cert: &str) -> bool {
    let (ns, name) = names(c);
    app.sim
        .simulator()
        .expect("controllers")
        .workload_accepts(&ns, &name, cert)
}

fn secret(app: &CapiApp, c: &str, suffix: &str) -> Value {
    let (_, name) = names(c);
    objects(app, "v1", "Secret", c)
        .into_iter()
        .find(|s| s["metadata"]["name"] == format!("{name}-{suffix}").as_str())
        .unwrap_or_else(|| panic!("no {suffix} Secret"))
}

#[tokio::test]
async fn the_ca_comes_from_the_secret_and_signs_every_supported_csr() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let c = cluster(t, false).await;

    // GET: the CA of each type is the Secret's certificate.
    let k8s = ca(t, &c, "kubernetes").await;
    assert_eq!(k8s, secret_text(&secret(&app, &c, "ca"), "tls.crt"));
    let etcd = ca(t, &c, "etcd").await;
    assert_eq!(etcd, secret_text(&secret(&app, &c, "etcd"), "tls.crt"));
    let proxy = ca(t, &c, "front-proxy").await;
    assert_eq!(proxy, ca(t, &c, "front_proxy").await);
    assert_ne!(k8s, etcd);
    let r = t.get(&ALICE, &format!("/v1/certificates/{c}")).await;
    assert_eq!(r.body["pem"].as_str(), Some(k8s.as_str()));
    assert_eq!(r.body["cluster_uuid"], c.as_str());
    assert!(
        r.body["links"][0]["href"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/certificates/{c}"))
    );

    // POST: RSA 2048/4096 and ECDSA P-256 are signed by the cluster CA, subject and SANs kept.
    for (what, csr) in [
        ("rsa2048", RSA2048.to_string()),
        ("rsa4096", RSA4096.to_string()),
        ("p256", admin_csr()),
    ] {
        let r = sign(t, &c, &csr, None).await;
        assert_eq!(r.status, 201, "{what}: {}", r.body);
        assert_eq!(r.body["csr"].as_str(), Some(csr.as_str()));
        let pem = r.body["pem"].as_str().unwrap();
        assert!(
            pki::verifies(pem, &k8s),
            "{what}: not signed by the cluster CA"
        );
        assert!(!pki::verifies(pem, &etcd), "{what}: signed by the etcd CA");
        let (_, der) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let cert = der.parse_x509().unwrap();
        assert!(
            cert.subject().to_string().contains("system:masters"),
            "{what}: {}",
            cert.subject()
        );
        assert!(!cert.is_ca());
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let days = (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp())
            / 86400;
        assert!((364..=366).contains(&days), "{what}: {days} days");
        if what == "rsa4096" {
            let san = cert.subject_alternative_name().unwrap().unwrap().value;
            assert!(format!("{:?}", san.general_names).contains("admin.example"));
        }
        // The simulated apiserver takes it: its machines trust this CA.
        assert!(
            accepts(&app, &c, pem),
            "{what}: rejected by the workload cluster"
        );
    }

    // The etcd CA signs when asked for it, and that certificate is no client of the apiserver.
    let r = sign(t, &c, RSA2048, Some("etcd")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let pem = r.body["pem"].as_str().unwrap();
    assert_eq!(r.body["ca_cert_type"], "etcd");
    assert!(pki::verifies(pem, &etcd) && !pki::verifies(pem, &k8s));
    assert!(!accepts(&app, &c, pem));

    // Bad requests: 400 with what is wrong, never 500.
    let flipped = {
        let body: String = RSA2048
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let mut der =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, body).unwrap();
        let n = der.len();
        der[n - 5] ^= 0x01; // inside the signature
        format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der)
        )
    };
    for (csr, says) in [
        ("hello".to_string(), "not a PEM"),
        (
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
                .to_string(),
            "Invalid CSR",
        ),
        (flipped, "signature does not verify"),
        (
            include_str!("../fixtures/csr/rsa1024.csr").to_string(),
            "unsupported key",
        ),
    ] {
        let r = sign(t, &c, &csr, None).await;
        assert_magnum_error(&r, 400, says);
    }
    let r = sign(t, &c, RSA2048, Some("nope")).await;
    assert_eq!(r.status, 400);
    let r = t
        .post(
            &ALICE,
            "/v1/certificates",
            json!({"cluster_uuid": uuid::Uuid::new_v4(), "csr": RSA2048}),
        )
        .await;
    assert_eq!(r.status, 400, "unknown cluster: {}", r.body);

    // Policy: only the creating user (or an admin of the project); another project does not see it.
    let r = t.get(&READER, &format!("/v1/certificates/{c}")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = t.get(&BOB, &format!("/v1/certificates/{c}")).await;
    assert_eq!(r.status, 404, "{}", r.body);
    // Certificate lookups are not widened for admins (contract §4.4).
    let r = t.get(&ADMIN, &format!("/v1/certificates/{c}")).await;
    assert_eq!(r.status, 404, "{}", r.body);
}

#[tokio::test]
async fn the_ca_rotates_in_three_rolled_out_phases_and_old_client_certificates_stop_working() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let c = cluster(t, false).await;
    let old_ca = ca(t, &c, "kubernetes").await;
    let old_etcd = ca(t, &c, "etcd").await;
    let old_client = sign(t, &c, &admin_csr(), None).await.body["pem"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(accepts(&app, &c, &old_client));
    let machines_before: Vec<String> = objects(&app, "cluster.x-k8s.io/v1beta2", "Machine", &c)
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(machines_before.len(), 2);

    let r = t
        .patch(&ALICE, &format!("/v1/certificates/{c}"), json!(null))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.body["uuid"], c.as_str());
    let r = t.get(&ALICE, &format!("/v1/clusters/{c}")).await;
    assert_eq!(r.body["status"], "UPDATE_IN_PROGRESS");
    // A second rotation while one runs: the status is not *_COMPLETE.
    let r = t
        .patch(&ALICE, &format!("/v1/certificates/{c}"), json!(null))
        .await;
    assert_eq!(r.status, 400, "{}", r.body);

    // Phase by phase, the Secret holds the bundle of the phase, and old certificates keep working
    // until the last phase is rolled out.
    let seen_phases = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let body = until("UPDATE_COMPLETE after the rotation", || async {
        let crt = secret_text(&secret(&app, &c, "ca"), "tls.crt");
        let certs = pki::pem_certs(&crt);
        let first_is_old = certs
            .first()
            .is_some_and(|f| pki::pem_certs(&old_ca).contains(f));
        seen_phases
            .lock()
            .unwrap()
            .insert(match (certs.len(), first_is_old) {
                (2, true) => 1,
                (2, false) => 2,
                (1, false) => 3,
                _ => 0,
            });
        let r = t.get(&ALICE, &format!("/v1/clusters/{c}")).await;
        assert_ne!(r.body["status"], "UPDATE_FAILED", "{}", r.body);
        (r.body["status"] == "UPDATE_COMPLETE").then_some(r.body)
    })
    .await;
    let seen_phases = seen_phases.into_inner().unwrap();
    for phase in [1, 2, 3] {
        assert!(seen_phases.contains(&phase), "phases seen: {seen_phases:?}");
    }
    assert_eq!(body["health_status"], "HEALTHY", "{body}");

    // New CAs everywhere; every machine was rebuilt; the old client certificate is refused.
    let new_ca = ca(t, &c, "kubernetes").await;
    assert_eq!(pki::pem_certs(&new_ca).len(), 1);
    assert!(!pki::pem_certs(&old_ca).contains(&pki::pem_certs(&new_ca)[0]));
    // The etcd CA is kept (KCP caches the etcd client certificate it signs: `capi::ca::rotated`).
    assert_eq!(ca(t, &c, "etcd").await, old_etcd);
    let machines_after = objects(&app, "cluster.x-k8s.io/v1beta2", "Machine", &c);
    assert_eq!(machines_after.len(), 2);
    for m in &machines_after {
        assert!(!machines_before.contains(&m["metadata"]["name"].as_str().unwrap().to_string()));
    }
    assert!(
        !accepts(&app, &c, &old_client),
        "the old CA's client certificate still works"
    );
    let new_client = sign(t, &c, &admin_csr(), None).await.body["pem"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(pki::verifies(&new_client, &new_ca));
    assert!(accepts(&app, &c, &new_client));
    // CAPI's own kubeconfig was regenerated with the new CA.
    let (ns, name) = names(&c);
    let kc = until("the regenerated kubeconfig", || async {
        let s = app.sim.store().get(
            &magnum_capi::simkube::Resource::of("v1", "Secret"),
            &ns,
            &format!("{name}-kubeconfig"),
        )?;
        Some(secret_text(&s, "value"))
    })
    .await;
    let kc = kube::config::Kubeconfig::from_yaml(&kc).unwrap();
    let cert = kc.auth_infos[0]
        .auth_info
        .as_ref()
        .unwrap()
        .client_certificate_data
        .clone()
        .unwrap();
    let cert = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, cert).unwrap(),
    )
    .unwrap();
    assert!(pki::verifies(&cert, &new_ca) && !pki::verifies(&cert, &old_ca));
    // Nothing of the rotation is left behind.
    let (_, name) = names(&c);
    assert!(
        !objects(&app, "v1", "Secret", &c)
            .iter()
            .any(|s| s["metadata"]["name"] == format!("{name}-ca-rotation").as_str())
    );
    let phase: Option<i16> =
        sqlx::query_scalar("SELECT ca_rotation_phase FROM cluster WHERE uuid = $1::uuid")
            .bind(&c)
            .fetch_one(&t.state.pool)
            .await
            .unwrap();
    assert_eq!(phase, None);
}

#[tokio::test]
async fn a_ca_rotation_is_refused_without_tls_or_outside_a_complete_status() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let c = cluster(t, true).await;
    let r = t
        .patch(&ALICE, &format!("/v1/certificates/{c}"), json!(null))
        .await;
    assert_magnum_error(&r, 400, "non-TLS");
    let r = t.get(&READER, &format!("/v1/certificates/{c}")).await;
    assert_eq!(r.status, 403);
    let r = t
        .patch(&READER, &format!("/v1/certificates/{c}"), json!(null))
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
}

#[tokio::test]
async fn without_keystone_a_credential_rotation_is_refused_clearly() {
    // `--dev` without Keystone: the cluster's Secret holds placeholders, nothing to rotate.
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let c = cluster(t, false).await;
    let r = t
        .call(
            &ALICE,
            "PATCH",
            &format!("/v1/credentials/{c}"),
            Some("1.12"),
            None,
        )
        .await;
    assert_magnum_error(&r, 400, "needs Keystone");
    let r = t.get(&ALICE, &format!("/v1/clusters/{c}")).await;
    assert_eq!(r.body["status"], "CREATE_COMPLETE");
}
