//! The API listener as `serve` runs it: HTTPS with the configured certificate, a replaced
//! certificate served from the next connection on without a restart (a pair that does not load
//! keeps the previous one), and the proxy headers that build `links` honoured only from
//! `[http] trusted_proxies`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::common::app_with;
use super::common::stack::serve_loopback;

/// A CA and a serving certificate it signed for `localhost` / `127.0.0.1` (PEM).
struct Issued {
    ca: String,
    cert: String,
    key: String,
}

fn issue(ca_name: &str) -> Issued {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    Issued {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// Puts `content` at `path` by renaming a new file over it, as Kubernetes updates the files of
/// a mounted Secret.
fn replace(path: &Path, content: &str) {
    let staged = path.with_extension("new");
    std::fs::write(&staged, content).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// Whether a new client trusting only `ca` completes a request to `url` (a full handshake: a
/// client of its own each time, so no session of an earlier one is resumed); the answer.
async fn answers(ca: &str, url: &str) -> Option<Value> {
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()])
        .build()
        .unwrap();
    let r = client.get(url).send().await.ok()?;
    assert_eq!(r.status(), 200);
    Some(r.json().await.unwrap())
}

#[tokio::test]
async fn https_serves_the_configured_certificate_and_a_replaced_one_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key): (PathBuf, PathBuf) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let (first, second) = (issue("first CA"), issue("second CA"));
    replace(&cert, &first.cert);
    replace(&key, &first.key);
    let t = app_with(|cfg| {
        cfg.http.tls_cert_file = Some(cert.clone());
        cfg.http.tls_key_file = Some(key.clone());
    })
    .await;
    let (port, _server) = serve_loopback(&t.state).await;
    let url = format!("https://localhost:{port}/");
    let (trusts_first, trusts_second) = (&first.ca, &second.ca);

    let body = answers(trusts_first, &url)
        .await
        .expect("HTTPS with the first certificate");
    assert_eq!(
        body["versions"][0]["links"][0]["href"],
        format!("https://localhost:{port}/v1/"),
        "an HTTPS listener links HTTPS"
    );
    assert!(answers(trusts_second, &url).await.is_none());

    // Half a rotation (the new certificate, the old key): not a pair, the first stays in service.
    replace(&cert, &second.cert);
    assert!(answers(trusts_first, &url).await.is_some());
    assert!(answers(trusts_second, &url).await.is_none());

    // The rotation complete: the next connection gets the second certificate.
    replace(&key, &second.key);
    assert!(answers(trusts_second, &url).await.is_some());
    assert!(answers(trusts_first, &url).await.is_none());
}

#[tokio::test]
async fn a_certificate_without_its_key_is_a_configuration_error() {
    let e = magnum_capi::config::Config::load(Some(&write_config(
        "[http]\ntls_cert_file = \"/etc/magnum-capi/tls.crt\"\n",
    )))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("tls_cert_file and tls_key_file go together"),
        "{e}"
    );
    let e = magnum_capi::config::Config::load(Some(&write_config(
        "[http]\ntrusted_proxies = [\"10.0.0.0/8\", \"proxy.example.com\"]\n",
    )))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("\"proxy.example.com\" is neither an IP address nor a CIDR"),
        "{e}"
    );
}

fn write_config(text: &str) -> tempfile::TempPath {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    f.into_temp_path()
}

/// The root document's link and a created template's `Location` as the client sees them,
/// asked through a proxy on loopback that says the client used `https://magnum.example.com`.
async fn links_seen_through_a_proxy(trusted_proxies: &[&str]) -> (String, String) {
    let trusted: Vec<ipnet::IpNet> = trusted_proxies.iter().map(|s| s.parse().unwrap()).collect();
    let t = app_with(|cfg| cfg.http.trusted_proxies = trusted).await;
    let (port, _server) = serve_loopback(&t.state).await;
    let client = reqwest::Client::new();
    let proxied = |rb: reqwest::RequestBuilder| {
        rb.header("x-forwarded-proto", "https")
            .header("x-forwarded-host", "magnum.example.com")
            .header("x-forwarded-for", "203.0.113.9")
    };
    let root: Value = proxied(client.get(format!("http://127.0.0.1:{port}/")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let created = proxied(client.post(format!("http://127.0.0.1:{port}/v1/clustertemplates")))
        .header("x-user-id", "alice")
        .header("x-project-id", "p-alice")
        .header("x-roles", "member,reader")
        .json(&serde_json::json!({"image_id": "ubuntu-jammy", "coe": "kubernetes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_string();
    let root_link = root["versions"][0]["links"][0]["href"]
        .as_str()
        .unwrap()
        .to_string();
    (root_link, location)
}

#[tokio::test]
async fn forwarded_host_and_proto_build_links_from_a_trusted_proxy() {
    let (root, location) = links_seen_through_a_proxy(&["127.0.0.1/32"]).await;
    assert_eq!(root, "https://magnum.example.com/v1/");
    assert!(
        location.starts_with("https://magnum.example.com/v1/clustertemplates/"),
        "{location}"
    );
}

#[tokio::test]
async fn forwarded_headers_from_an_untrusted_peer_are_ignored() {
    for trusted in [&[][..], &["10.0.0.0/8", "::1/128"][..]] {
        let (root, location) = links_seen_through_a_proxy(trusted).await;
        assert!(root.starts_with("http://127.0.0.1:"), "{trusted:?}: {root}");
        assert!(
            location.starts_with("http://127.0.0.1:"),
            "{trusted:?}: {location}"
        );
    }
}
