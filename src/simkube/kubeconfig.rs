//! The `<cluster>-kubeconfig` Secret the simulated control plane publishes, as CAPI does once
//! the first control-plane machine is up (and again whenever it is deleted): server the
//! simulated workload API's endpoint (`https://127.0.0.1:<port>`, see `endpoint`), the whole
//! `tls.crt` of `<cluster>-ca` as CA data, and an admin client certificate signed by the CA's
//! current key (`tls.key`, the key of the first certificate of `tls.crt`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext, Preferences,
};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{Value, json};

use super::objects::{
    CAPI_VERSION, Kind, LABEL_CLUSTER_NAME, i64_at, name, namespace, owner_ref, str_at,
};
use super::store::{Store, StoreError};

/// `https://host:port` of a Cluster's `spec.controlPlaneEndpoint`, once set.
pub fn endpoint(cluster: &Value) -> Option<String> {
    let host = str_at(cluster, &["spec", "controlPlaneEndpoint", "host"])?;
    let port = i64_at(cluster, &["spec", "controlPlaneEndpoint", "port"]).unwrap_or(6443);
    Some(if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    })
}

/// Name of a cluster's kubeconfig Secret.
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// An admin client certificate and key signed by the cluster CA (the first certificate of
/// `ca_cert_pem` is the issuer).
fn admin_credentials(ca_cert_pem: &str, ca_key_pem: &str) -> Option<(String, String)> {
    let ca_key = KeyPair::from_pem(ca_key_pem).ok()?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).ok()?;
    let key = KeyPair::generate().ok()?;
    let mut params = CertificateParams::new(Vec::<String>::new()).ok()?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "system:masters");
    dn.push(DnType::CommonName, "kubernetes-admin");
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).ok()?;
    Some((cert.pem(), key.serialize_pem()))
}

/// The kubeconfig document for a cluster whose API is at `server`: the CA when known (else
/// `insecure-skip-tls-verify`), the admin certificate when signed (else a bearer token).
pub fn render(
    cluster: &str,
    server: &str,
    ca_pem: Option<&str>,
    credentials: Option<(String, String)>,
) -> Kubeconfig {
    let user_name = format!("{cluster}-admin");
    let context = format!("{user_name}@{cluster}");
    let user = match credentials {
        Some((cert, key)) => AuthInfo {
            client_certificate_data: Some(STANDARD.encode(cert)),
            client_key_data: Some(STANDARD.encode(key).into()),
            ..AuthInfo::default()
        },
        None => AuthInfo {
            token: Some(format!("simkube-{}", uuid::Uuid::new_v4().simple()).into()),
            ..AuthInfo::default()
        },
    };
    Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        preferences: Some(Preferences::default()),
        clusters: vec![NamedCluster {
            name: cluster.into(),
            cluster: Some(Cluster {
                server: Some(server.into()),
                certificate_authority_data: ca_pem.map(|ca| STANDARD.encode(ca)),
                insecure_skip_tls_verify: ca_pem.is_none().then_some(true),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        contexts: vec![NamedContext {
            name: context.clone(),
            context: Some(Context {
                cluster: cluster.into(),
                user: Some(user_name.clone()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user_name,
            auth_info: Some(user),
            ..NamedAuthInfo::default()
        }],
        current_context: Some(context),
        ..Kubeconfig::default()
    }
}

/// Creates `<cluster>-kubeconfig` (owned by the Cluster, API at `server`) unless it exists or the
/// cluster has no control-plane endpoint yet.
pub fn ensure(store: &Store, cluster: &Value, server: &str) -> Result<(), StoreError> {
    let (ns, cluster_name) = (namespace(cluster), name(cluster));
    let secrets = Kind::Secret.resource();
    let secret = secret_name(cluster_name);
    if store.get(&secrets, ns, &secret).is_some() {
        return Ok(());
    }
    if endpoint(cluster).is_none() {
        return Ok(());
    }
    let ca = store.get(&secrets, ns, &format!("{cluster_name}-ca"));
    let ca_pem = ca
        .as_deref()
        .and_then(|s| crate::k8s::secret::secret_data(s, "tls.crt"));
    let credentials = match (
        &ca_pem,
        ca.as_deref()
            .and_then(|s| crate::k8s::secret::secret_data(s, "tls.key")),
    ) {
        (Some(cert), Some(key)) => admin_credentials(cert, &key),
        _ => None,
    };
    let doc = render(cluster_name, server, ca_pem.as_deref(), credentials);
    let yaml = yaml_serde::to_string(&doc)
        .map_err(|e| StoreError::Invalid(format!("kubeconfig rendering failed: {e}")))?;
    let obj = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret,
            "namespace": ns,
            "labels": {LABEL_CLUSTER_NAME: cluster_name},
            "ownerReferences": [owner_ref(CAPI_VERSION, "Cluster", cluster, true)],
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": STANDARD.encode(yaml)},
    });
    match store.create(&secrets, ns, obj) {
        Ok(_) | Err(StoreError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::capi::pki::{generate_ca, verifies};

    /// (issuer, subject) of a PEM certificate.
    fn names(cert_pem: &str) -> (String, String) {
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        (cert.issuer().to_string(), cert.subject().to_string())
    }

    #[test]
    fn admin_certificate_is_signed_by_the_cluster_ca() {
        let ca = generate_ca("kubernetes").unwrap();
        let (cert, key) = admin_credentials(&ca.cert_pem, &ca.key_pem).unwrap();
        assert!(key.contains("PRIVATE KEY"));
        assert_eq!(
            names(&cert),
            (
                "CN=kubernetes".into(),
                "O=system:masters, CN=kubernetes-admin".into()
            )
        );
        assert!(verifies(&cert, &ca.cert_pem));
    }

    #[test]
    fn with_a_bundle_the_first_certificate_issues_the_admin_certificate() {
        let (new, old) = (generate_ca("new").unwrap(), generate_ca("old").unwrap());
        let bundle = format!("{}{}", new.cert_pem, old.cert_pem);
        let (cert, _) = admin_credentials(&bundle, &new.key_pem).unwrap();
        assert!(verifies(&cert, &new.cert_pem));
        assert!(!verifies(&cert, &old.cert_pem));
        // The key alone decides the signature; the issuer name shows which certificate issued.
        assert_eq!(names(&cert).0, "CN=new");
    }

    #[test]
    fn kubeconfig_points_at_the_endpoint_with_the_ca() {
        let doc = serde_json::to_value(render("demo", "https://127.0.0.1:6443", Some("PEM"), None))
            .unwrap();
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:6443"
        );
        assert_eq!(
            doc["clusters"][0]["cluster"]["certificate-authority-data"],
            STANDARD.encode("PEM")
        );
        assert_eq!(doc["current-context"], "demo-admin@demo");
        assert!(doc["clusters"][0]["cluster"]["insecure-skip-tls-verify"].is_null());
        assert!(
            doc["users"][0]["user"]["token"]
                .as_str()
                .unwrap()
                .starts_with("simkube-")
        );
        let insecure = serde_json::to_value(render("demo", "https://h:6443", None, None)).unwrap();
        assert_eq!(
            insecure["clusters"][0]["cluster"]["insecure-skip-tls-verify"],
            true
        );
    }
}
