//! The part of kubeadm's PKI the simulator models, so that a CA rotation done in the wrong order
//! fails as it would on real machines.
//!
//! CAPI's bootstrap data carries each CA Secret (`<cluster>-ca`, `-etcd`, `-proxy`) verbatim:
//! kubeadm installs `tls.crt` as the trust bundle (every certificate in it) and signs with
//! `tls.key`, which must be the key of the FIRST certificate. Join discovery pins the SHA-256
//! of the public key of every certificate of `<cluster>-ca` (CAPI's `caCertHashes`) and checks
//! them against the CA data of the workload `kube-public/cluster-info` ConfigMap (kubeadm's
//! `CheckAny`). Certificates are compared by public key, never by PEM text, and client
//! certificates are checked by real signature verification.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rcgen::KeyPair;
use serde_json::Value;
use sha2::{Digest, Sha256};
use x509_parser::prelude::{FromDer, SubjectPublicKeyInfo, X509Certificate};

use crate::k8s::pem::key_matches;

/// One parsed CA certificate: its public key (SubjectPublicKeyInfo DER) and a readable name.
#[derive(Clone)]
pub struct Cert {
    spki: Vec<u8>,
    subject: String,
}

impl fmt::Debug for Cert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cert({} {})", self.subject, self.pin())
    }
}

impl Cert {
    fn from_der(der: &[u8]) -> Result<Cert, String> {
        let (_, x509) = X509Certificate::from_der(der).map_err(|e| e.to_string())?;
        let subject = x509
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_string)
            .unwrap_or_else(|| x509.subject().to_string());
        Ok(Cert {
            spki: x509.public_key().raw.to_vec(),
            subject,
        })
    }

    /// kubeadm's public-key pin: `sha256:` + hex SHA-256 of the SubjectPublicKeyInfo.
    pub fn pin(&self) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(&self.spki)))
    }

    /// `"CN" (sha256:…)`, for messages.
    pub fn describe(&self) -> String {
        format!("{:?} ({})", self.subject, self.pin())
    }

    /// Same public key (what TLS verification of something this CA signed depends on).
    pub fn same_key(&self, other: &Cert) -> bool {
        self.spki == other.spki
    }
}

/// Every certificate of a PEM bundle, in order.
pub fn parse_bundle(pem: &str) -> Result<Vec<Cert>, String> {
    let mut out = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|e| format!("invalid PEM: {e}"))?;
        if block.label == "CERTIFICATE" {
            out.push(Cert::from_der(&block.contents)?);
        }
    }
    if out.is_empty() {
        return Err("no PEM certificate found".into());
    }
    Ok(out)
}

/// A CA as kubeadm installs it from one Secret: `tls.crt` as trust bundle, its first
/// certificate as signer.
#[derive(Clone, Debug)]
pub struct Ca {
    /// The bundle as installed (`tls.crt` verbatim, or the CA data discovery found).
    pub pem: String,
    pub trust: Vec<Cert>,
    /// Set when `tls.key` is missing, unreadable, or not the key of the first certificate:
    /// machines that sign with this CA fail (workers never get the key).
    pub key_error: Option<String>,
    /// `tls.key` when it is the key of the first certificate: what a control-plane machine signs
    /// its apiserver serving certificate with.
    pub key: Option<SigningKey>,
}

/// A CA private key (PEM), kept out of `Debug` output.
#[derive(Clone)]
pub struct SigningKey(pub String);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl Ca {
    /// The CA in a Secret (`Err` when `tls.crt` holds no certificate).
    pub fn from_secret(secret: &Value, secret_name: &str) -> Result<Ca, String> {
        let pem = crate::k8s::secret::secret_data(secret, "tls.crt").unwrap_or_default();
        let trust = parse_bundle(&pem).map_err(|e| {
            format!("[certs] failure loading certificate authority from Secret {secret_name}: tls.crt: {e}")
        })?;
        let load_error =
            |what: String| format!("[certs] failure loading key from Secret {secret_name}: {what}");
        let key_text = crate::k8s::secret::secret_data(secret, "tls.key");
        let key_error = match &key_text {
            None => Some(load_error("tls.key is missing".into())),
            Some(key) => match KeyPair::from_pem(key) {
                Err(e) => Some(load_error(format!("tls.key: cannot parse the key: {e}"))),
                Ok(_) if key_matches(&pem, key) => None,
                Ok(_) => Some(format!(
                    "[certs] the certificate and key in Secret {secret_name} do not match: tls.key \
                     is not the key of the first certificate of tls.crt, {} (tls: private key does \
                     not match public key)",
                    trust[0].describe()
                )),
            },
        };
        let key = key_text.filter(|_| key_error.is_none()).map(SigningKey);
        Ok(Ca {
            pem,
            trust,
            key_error,
            key,
        })
    }

    /// The certificate this CA signs with (the first of the bundle).
    pub fn signer(&self) -> Option<&Cert> {
        self.trust.first()
    }

    /// CAPI's `caCertHashes`: the pins of every certificate of the bundle.
    pub fn pins(&self) -> Vec<String> {
        self.trust.iter().map(Cert::pin).collect()
    }

    /// True when a certificate signed by `signer`'s key verifies against this trust bundle.
    pub fn trusts(&self, signer: &Cert) -> bool {
        self.trust.iter().any(|c| c.same_key(signer))
    }

    /// True when the PEM client certificate is within its validity and its signature verifies
    /// against a certificate of this bundle.
    pub fn accepts(&self, client_cert_pem: &str) -> bool {
        x509_parser::pem::Pem::iter_from_buffer(client_cert_pem.as_bytes())
            .map_while(Result::ok)
            .find(|block| block.label == "CERTIFICATE")
            .is_some_and(|block| self.accepts_der(&block.contents))
    }

    /// `accepts` for a DER certificate (as a TLS handshake presents it).
    pub fn accepts_der(&self, client_cert_der: &[u8]) -> bool {
        let Ok((_, cert)) = X509Certificate::from_der(client_cert_der) else {
            return false;
        };
        cert.validity().is_valid()
            && self.trust.iter().any(|ca| {
                SubjectPublicKeyInfo::from_der(&ca.spki)
                    .is_ok_and(|(_, spki)| cert.verify_signature(Some(&spki)).is_ok())
            })
    }
}

/// kubeadm's `CheckAny`: Ok when one of `presented` (cluster-info's CA data) has a pinned key,
/// else its error text.
pub fn check_pins(pins: &[String], presented: &[Cert]) -> Result<(), String> {
    if presented.iter().any(|c| pins.contains(&c.pin())) {
        return Ok(());
    }
    let hashes: Vec<String> = presented.iter().map(Cert::pin).collect();
    Err(format!(
        "cluster CA found in cluster-info ConfigMap is invalid: none of the public keys {:?} are \
         pinned",
        hashes.join(":")
    ))
}

/// What a machine's bootstrap data carried, taken when CAPI renders it (Pending →
/// Provisioning). `None` fields: that Secret did not exist (that PKI is not modelled).
#[derive(Clone, Debug, Default)]
pub struct Bootstrap {
    pub ca: Option<Result<Ca, String>>,
    /// Control-plane machines only.
    pub etcd: Option<Result<Ca, String>>,
    /// Control-plane machines only: a mismatched front-proxy key fails kubeadm too.
    pub proxy: Option<Result<Ca, String>>,
}

impl Bootstrap {
    /// The first reason kubeadm on a machine with this bootstrap data fails before talking to
    /// anyone (unreadable bundles; mismatched keys on control-plane machines).
    pub fn local_error(&self, control_plane: bool) -> Option<String> {
        let mut cas = vec![&self.ca];
        if control_plane {
            cas.extend([&self.etcd, &self.proxy]);
        }
        cas.into_iter().flatten().find_map(|ca| match ca {
            Err(e) => Some(e.clone()),
            Ok(ca) if control_plane => ca.key_error.clone(),
            Ok(_) => None,
        })
    }
}

/// What kubeadm installed on a machine that joined: per CA the trust bundle and the signer.
/// `None`: that PKI is not modelled for the cluster (its Secret did not exist).
#[derive(Clone, Debug)]
pub struct Installed {
    /// Trust of the Kubernetes CA (control plane: `<cluster>-ca`; workers: cluster-info).
    pub ca_trust: Option<Ca>,
    /// The CA that signs this machine's certificates: serving and client certificates of a
    /// control-plane machine (`<cluster>-ca`), the kubelet client certificate of a worker (the
    /// control plane's signer when it joined).
    pub ca_signer: Option<Cert>,
    pub etcd: Option<Ca>,
    /// Control-plane machines: the `<cluster>-ca` bundle and key their apiserver's serving
    /// certificate is signed with (`None` on workers, or when the key does not match).
    pub serving_ca: Option<(String, SigningKey)>,
}

impl Installed {
    /// A control-plane machine: everything from its bootstrap data.
    pub fn control_plane(b: Bootstrap) -> Installed {
        let ca = b.ca.and_then(Result::ok);
        Installed {
            ca_signer: ca.as_ref().and_then(|c| c.signer().cloned()),
            serving_ca: ca
                .as_ref()
                .and_then(|c| Some((c.pem.clone(), c.key.clone()?))),
            ca_trust: ca,
            etcd: b.etcd.and_then(Result::ok),
        }
    }
}

/// The CA bundle (PEM) in a kubeconfig document's first cluster, if any.
pub fn kubeconfig_ca(kubeconfig_yaml: &str) -> Result<Option<String>, String> {
    let doc: Value = yaml_serde::from_str(kubeconfig_yaml).map_err(|e| e.to_string())?;
    let Some(data) = doc
        .get("clusters")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(|c| c.get("cluster"))
        .and_then(|c| c.get("certificate-authority-data"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    let bytes = STANDARD
        .decode(data.trim())
        .map_err(|e| format!("certificate-authority-data: {e}"))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| format!("certificate-authority-data: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::pki::generate_ca;
    use rcgen::{CertificateParams, Issuer};
    use serde_json::json;

    fn ca(cn: &str) -> (String, String) {
        let ca = generate_ca(cn).unwrap();
        (ca.cert_pem, ca.key_pem)
    }

    fn leaf(ca_pem: &str, ca_key: &str) -> String {
        let issuer = Issuer::from_ca_cert_pem(ca_pem, KeyPair::from_pem(ca_key).unwrap()).unwrap();
        let params = CertificateParams::new(vec!["admin".to_string()]).unwrap();
        params
            .signed_by(&KeyPair::generate().unwrap(), &issuer)
            .unwrap()
            .pem()
    }

    fn secret(crt: &str, key: &str) -> Value {
        json!({"data": {"tls.crt": STANDARD.encode(crt), "tls.key": STANDARD.encode(key)}})
    }

    #[test]
    fn the_key_must_belong_to_the_first_certificate() {
        let (old, old_key) = ca("old");
        let (new, new_key) = ca("new");
        let both = format!("{old}{new}");
        let ok = Ca::from_secret(&secret(&both, &old_key), "c-ca").unwrap();
        assert!(ok.key_error.is_none());
        assert_eq!(ok.trust.len(), 2);
        assert_eq!(ok.signer().unwrap().subject, "old");
        let bad = Ca::from_secret(&secret(&both, &new_key), "c-ca").unwrap();
        let e = bad.key_error.clone().unwrap();
        assert!(e.contains("do not match") && e.contains("\"old\""), "{e}");
        let b = Bootstrap {
            ca: Some(Ok(bad)),
            ..Bootstrap::default()
        };
        assert!(b.local_error(true).is_some());
        assert!(b.local_error(false).is_none(), "workers never get the key");
        assert!(Ca::from_secret(&secret("junk", &old_key), "c-ca").is_err());
        let unreadable = Ca::from_secret(&secret(&old, "junk"), "c-ca").unwrap();
        let e = unreadable.key_error.unwrap();
        assert!(
            e.contains("failure loading key") && e.contains("cannot parse"),
            "{e}"
        );
    }

    #[test]
    fn trust_is_by_public_key_and_client_certificates_are_verified() {
        let (old, old_key) = ca("kubernetes");
        let (new, new_key) = ca("kubernetes");
        let old_only = Ca::from_secret(&secret(&old, &old_key), "x").unwrap();
        let both = Ca::from_secret(&secret(&format!("{new}{old}"), &new_key), "x").unwrap();
        let new_signer = both.signer().unwrap().clone();
        assert!(both.trusts(old_only.signer().unwrap()));
        assert!(!old_only.trusts(&new_signer));
        // Same subject, different key: not the same CA.
        assert!(!old_only.signer().unwrap().same_key(&new_signer));
        let by_new = leaf(&new, &new_key);
        assert!(both.accepts(&by_new));
        assert!(!old_only.accepts(&by_new));
        assert!(old_only.accepts(&leaf(&old, &old_key)));
        assert!(!old_only.accepts("garbage"));
    }

    #[test]
    fn pins_follow_kubeadm() {
        let (old, _) = ca("old");
        let (new, _) = ca("new");
        let old_certs = parse_bundle(&old).unwrap();
        let new_certs = parse_bundle(&new).unwrap();
        let pin = new_certs[0].pin();
        assert!(pin.starts_with("sha256:") && pin.len() == 7 + 64);
        assert!(
            check_pins(
                std::slice::from_ref(&pin),
                &parse_bundle(&format!("{old}{new}")).unwrap()
            )
            .is_ok()
        );
        let e = check_pins(&[pin], &old_certs).unwrap_err();
        assert_eq!(
            e,
            format!(
                "cluster CA found in cluster-info ConfigMap is invalid: none of the public keys \
                 \"{}\" are pinned",
                old_certs[0].pin()
            )
        );
    }

    #[test]
    fn kubeconfig_ca_reads_the_first_cluster() {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: ''\n  cluster:\n    server: https://h:6443\n    certificate-authority-data: {}\n",
            STANDARD.encode("PEM")
        );
        assert_eq!(kubeconfig_ca(&yaml).unwrap().as_deref(), Some("PEM"));
        assert_eq!(kubeconfig_ca("clusters: []").unwrap(), None);
    }
}
