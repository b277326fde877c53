//! The four CAs of a cluster (Kubernetes, etcd, front-proxy, service-account key pair),
//! generated with rcgen at create so they exist before CAPI runs and the certificates API can use
//! them; they live only in the cluster's Secrets on the management cluster.

/// A certificate and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPairPem {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for KeyPairPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPairPem")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The CAs CAPI expects in `<name>-ca`, `<name>-etcd`, `<name>-proxy` and `<name>-sa`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCas {
    pub ca: KeyPairPem,
    pub etcd: KeyPairPem,
    pub front_proxy: KeyPairPem,
    /// The service-account signing key pair (`sa`): CAPI reads `tls.crt` (public key) and `tls.key`.
    pub sa: KeyPairPem,
}

use chrono::{Datelike, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SerialNumber,
};

/// How generating or reading key material failed.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
}

/// Years a cluster CA is valid (kubeadm uses 10).
pub const CA_VALIDITY_YEARS: i32 = 10;

fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    // Positive and without a leading zero byte, as RFC 5280 wants.
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

/// A self-signed CA (ECDSA P-256) named `cn`, valid from today for `CA_VALIDITY_YEARS`.
pub fn generate_ca(cn: &str) -> Result<KeyPairPem, PkiError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.serial_number = Some(random_serial());
    let today = Utc::now().date_naive();
    let (m, d) = (today.month() as u8, today.day().min(28) as u8);
    params.not_before = rcgen::date_time_ymd(today.year(), m, d);
    params.not_after = rcgen::date_time_ymd(today.year() + CA_VALIDITY_YEARS, m, d);
    params.use_authority_key_identifier_extension = false;
    let cert = params.self_signed(&key)?;
    Ok(KeyPairPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

impl ClusterCas {
    /// Fresh CAs for a cluster, named as kubeadm names its own.
    pub fn generate() -> Result<Self, PkiError> {
        let sa = KeyPair::generate()?;
        Ok(ClusterCas {
            ca: generate_ca("kubernetes")?,
            etcd: generate_ca("etcd-ca")?,
            front_proxy: generate_ca("front-proxy-ca")?,
            // CAPI keeps the service-account public key (not a certificate) in `tls.crt`.
            sa: KeyPairPem {
                cert_pem: sa.public_key_pem(),
                key_pem: sa.serialize_pem(),
            },
        })
    }

    /// The Secret name suffixes CAPI expects, each with its key pair.
    pub fn by_suffix(&self) -> [(&'static str, &KeyPairPem); 4] {
        [
            ("ca", &self.ca),
            ("etcd", &self.etcd),
            ("proxy", &self.front_proxy),
            ("sa", &self.sa),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_cas_are_ca_certificates_with_their_keys() {
        let cas = ClusterCas::generate().unwrap();
        for (suffix, kp) in cas.by_suffix() {
            assert!(kp.key_pem.contains("PRIVATE KEY"), "{suffix}");
            if suffix == "sa" {
                assert!(kp.cert_pem.contains("BEGIN PUBLIC KEY"));
                continue;
            }
            let (_, pem) = x509_parser::pem::parse_x509_pem(kp.cert_pem.as_bytes()).unwrap();
            let cert = pem.parse_x509().unwrap();
            assert!(cert.is_ca(), "{suffix}");
            let years = (cert.validity().not_after.timestamp()
                - cert.validity().not_before.timestamp())
                / (365 * 86400);
            assert_eq!(years, 10);
            // The key in the Secret is the key of the certificate.
            let key = KeyPair::from_pem(&kp.key_pem).unwrap();
            assert_eq!(
                key.public_key_raw(),
                cert.public_key().subject_public_key.data.as_ref()
            );
        }
        assert!(!format!("{:?}", cas).contains("PRIVATE KEY"));
        assert_ne!(cas.ca.cert_pem, ClusterCas::generate().unwrap().ca.cert_pem);
    }
}
