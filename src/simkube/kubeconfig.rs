//! The `<cluster>-kubeconfig` Secret the simulated control plane publishes, as CAPI does once
//! the first control-plane machine is up (and again whenever it is deleted): server the
//! simulated workload API (`{management url}/workload/{namespace}/{cluster}`, plain HTTP), the
//! whole `tls.crt` of `<cluster>-ca` as CA data, and an admin client certificate signed by the
//! CA's current key (`tls.key`, the key of the first certificate of `tls.crt`).

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
use super::pki::secret_text;
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
    let ca_pem = ca.as_deref().and_then(|s| secret_text(s, "tls.crt"));
    let credentials = match (
        &ca_pem,
        ca.as_deref().and_then(|s| secret_text(s, "tls.key")),
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

    #[test]
    fn admin_certificate_is_signed_by_the_cluster_ca() {
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes");
        let ca_cert = params.self_signed(&ca_key).unwrap();
        let (ca_pem_text, ca_key_pem) = (ca_cert.pem(), ca_key.serialize_pem());
        let (cert, key) = admin_credentials(&ca_pem_text, &ca_key_pem).unwrap();
        assert!(key.contains("PRIVATE KEY"));
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
        let parsed = pem.parse_x509().unwrap();
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca_pem_text.as_bytes()).unwrap();
        let ca_parsed = ca_pem.parse_x509().unwrap();
        assert_eq!(parsed.issuer(), ca_parsed.subject());
        assert!(
            parsed
                .verify_signature(Some(ca_parsed.public_key()))
                .is_ok()
        );
    }

    #[test]
    fn with_a_bundle_the_first_certificate_issues_the_admin_certificate() {
        let ca = |cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, cn);
            (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
        };
        let (new, new_key) = ca("new");
        let (old, _) = ca("old");
        let (cert, _) = admin_credentials(&format!("{new}{old}"), &new_key).unwrap();
        let parse = |pem: &str| {
            x509_parser::pem::parse_x509_pem(pem.as_bytes())
                .unwrap()
                .1
                .contents
        };
        let (leaf, new_der, old_der) = (parse(&cert), parse(&new), parse(&old));
        let leaf = x509_parser::parse_x509_certificate(&leaf).unwrap().1;
        let new_ca = x509_parser::parse_x509_certificate(&new_der).unwrap().1;
        let old_ca = x509_parser::parse_x509_certificate(&old_der).unwrap().1;
        assert!(leaf.verify_signature(Some(new_ca.public_key())).is_ok());
        assert!(leaf.verify_signature(Some(old_ca.public_key())).is_err());
    }

    #[test]
    fn kubeconfig_points_at_the_endpoint_with_the_ca() {
        let doc = serde_json::to_value(render(
            "demo",
            "https://203.0.113.5:6443",
            Some("PEM"),
            None,
        ))
        .unwrap();
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://203.0.113.5:6443"
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
