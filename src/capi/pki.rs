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

pub use crate::k8s::pem::key_matches;
use crate::k8s::pem::{cert_ders, pem_blocks};
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

// ---------------------------------------------------------------------------------------------
// Client certificates for `POST /v1/certificates`, and PEM bundles for CA rotation.
// ---------------------------------------------------------------------------------------------

use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::cri_attributes::ParsedCriAttribute;
use x509_parser::error::X509Error;
use x509_parser::extensions::ParsedExtension;
use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_PKCS1_RSAENCRYPTION,
    OID_PKCS1_SHA1WITHRSA, OID_SHA1_WITH_RSA, OID_SIG_ED25519, OID_X509_EXT_SUBJECT_ALT_NAME,
};
use x509_parser::prelude::FromDer;
use x509_parser::public_key::PublicKey;
use x509_parser::x509::SubjectPublicKeyInfo;

/// Why a certificate signing request could not be signed. The messages are meant for the API
/// user (they end up in Magnum's error body), except `Ca`/`Signing`, which are server-side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    #[error("Invalid CSR: it is not a PEM-encoded certificate signing request")]
    NotPem,
    #[error("Invalid CSR: {0}")]
    Malformed(String),
    #[error("Invalid CSR: its signature does not verify")]
    BadSignature,
    #[error(
        "Invalid CSR: unsupported key type {0}; use RSA (2048–8192 bits), ECDSA P-256/P-384 or Ed25519"
    )]
    UnsupportedKey(String),
    #[error(
        "Invalid CSR: unsupported signature algorithm {0}; sign it with SHA-256, SHA-384 or SHA-512"
    )]
    UnsupportedSignature(String),
    #[error("the cluster CA cannot be used: {0}")]
    Ca(String),
    #[error("signing the certificate failed: {0}")]
    Signing(String),
}

/// Time allowed for clocks running behind ours: certificates start this long before now.
const CLOCK_SKEW_SECS: i64 = 5 * 60;
/// RSA moduli accepted in a CSR, in bits.
const RSA_BITS: std::ops::RangeInclusive<usize> = 2048..=8192;

fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Each CERTIFICATE block of `pem`, in order, re-encoded canonically (64-column base64, LF);
/// other blocks and text around them are dropped.
pub fn pem_certs(pem: &str) -> Vec<String> {
    cert_ders(pem)
        .iter()
        .map(|der| pem_encode("CERTIFICATE", der))
        .collect()
}

/// The certificates of `certs` (each may itself be a bundle), in order, as one PEM bundle;
/// a certificate already in the bundle is not repeated.
pub fn bundle(certs: &[&str]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for cert in certs.iter().flat_map(|pem| pem_certs(pem)) {
        if !seen.contains(&cert) {
            seen.push(cert);
        }
    }
    seen.concat()
}

fn first_cert_der(pem: &str) -> Result<Vec<u8>, CsrError> {
    cert_ders(pem)
        .into_iter()
        .next()
        .ok_or_else(|| CsrError::Ca("there is no PEM certificate".into()))
}

fn parse_cert(der: &[u8]) -> Result<X509Certificate<'_>, CsrError> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, cert)| cert)
        .map_err(|e| CsrError::Ca(format!("the certificate does not parse: {e}")))
}

/// When the first certificate of `cert_pem` expires.
pub fn not_after(cert_pem: &str) -> Result<chrono::DateTime<Utc>, CsrError> {
    let der = first_cert_der(cert_pem)?;
    let ts = parse_cert(&der)?.validity().not_after.timestamp();
    chrono::DateTime::from_timestamp(ts, 0)
        .ok_or_else(|| CsrError::Ca(format!("expiry {ts} is out of range")))
}

/// Whether the signature of the first certificate of `cert_pem` verifies with the public key of
/// any certificate of `ca_pem` (RSA, ECDSA and Ed25519 signatures, checked with aws-lc-rs).
pub fn verifies(cert_pem: &str, ca_pem: &str) -> bool {
    let Some(der) = cert_ders(cert_pem).into_iter().next() else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
        return false;
    };
    cert_ders(ca_pem).iter().any(|ca_der| {
        x509_parser::parse_x509_certificate(ca_der)
            .is_ok_and(|(_, ca)| cert.verify_signature(Some(ca.public_key())).is_ok())
    })
}

/// Checks the CSR's key is one we sign, and returns it in rcgen's terms.
fn supported_key(spki: &SubjectPublicKeyInfo<'_>) -> Result<rcgen::SubjectPublicKeyInfo, CsrError> {
    let alg = &spki.algorithm.algorithm;
    if *alg == OID_PKCS1_RSAENCRYPTION {
        let bits = match spki.parsed() {
            Ok(PublicKey::RSA(rsa)) => {
                let m = rsa.modulus;
                let m = &m[m.iter().take_while(|b| **b == 0).count()..];
                m.first()
                    .map_or(0, |b| m.len() * 8 - b.leading_zeros() as usize)
            }
            _ => {
                return Err(CsrError::Malformed(
                    "its RSA public key does not parse".into(),
                ));
            }
        };
        if !RSA_BITS.contains(&bits) {
            return Err(CsrError::UnsupportedKey(format!("RSA-{bits}")));
        }
    } else if *alg == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok());
        match curve {
            Some(c) if c == OID_EC_P256 || c == OID_NIST_EC_P384 => {}
            Some(c) => {
                return Err(CsrError::UnsupportedKey(format!(
                    "ECDSA on curve {}",
                    oid_name(&c)
                )));
            }
            None => {
                return Err(CsrError::UnsupportedKey(
                    "ECDSA without a named curve".into(),
                ));
            }
        }
    } else if *alg != OID_SIG_ED25519 {
        return Err(CsrError::UnsupportedKey(oid_name(alg)));
    }
    rcgen::SubjectPublicKeyInfo::from_der(spki.raw)
        .map_err(|_| CsrError::UnsupportedKey(oid_name(alg)))
}

fn oid_name(oid: &x509_parser::der_parser::oid::Oid<'_>) -> String {
    x509_parser::objects::oid2sn(oid, x509_parser::objects::oid_registry())
        .map_or_else(|_| oid.to_id_string(), str::to_string)
}

/// The subjectAltName extension the CSR requests, as (critical, DER GeneralNames); every other
/// requested extension is ignored.
fn requested_san(csr: &X509CertificationRequest<'_>) -> Result<Option<(bool, Vec<u8>)>, CsrError> {
    let mut san = None;
    for attr in csr.certification_request_info.iter_attributes() {
        let ParsedCriAttribute::ExtensionRequest(req) = attr.parsed_attribute() else {
            continue;
        };
        for ext in req
            .extensions
            .iter()
            .filter(|e| e.oid == OID_X509_EXT_SUBJECT_ALT_NAME)
        {
            if !matches!(
                ext.parsed_extension(),
                ParsedExtension::SubjectAlternativeName(_)
            ) {
                return Err(CsrError::Malformed(
                    "its subject alternative names do not parse".into(),
                ));
            }
            if san.is_some() {
                return Err(CsrError::Malformed(
                    "it requests subject alternative names twice".into(),
                ));
            }
            san = Some((ext.critical, ext.value.to_vec()));
        }
    }
    Ok(san)
}

/// Total length (header + content) of the DER element at the start of `input`.
fn der_len(input: &[u8]) -> Option<usize> {
    let tag = *input.first()?;
    if tag & 0x1f == 0x1f {
        return None; // high tag numbers: not used in certificates
    }
    let l0 = *input.get(1)?;
    let (header, len) = if l0 < 0x80 {
        (2, usize::from(l0))
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let bytes = input.get(2..2 + n)?;
        (
            2 + n,
            bytes.iter().fold(0usize, |a, b| (a << 8) | usize::from(*b)),
        )
    };
    let total = header.checked_add(len)?;
    (total <= input.len()).then_some(total)
}

/// The elements of a DER SEQUENCE (each with its header).
fn der_sequence(input: &[u8]) -> Option<Vec<&[u8]>> {
    if input.first() != Some(&0x30) || der_len(input)? != input.len() {
        return None;
    }
    let header = if input[1] < 0x80 {
        2
    } else {
        2 + usize::from(input[1] & 0x7f)
    };
    let mut rest = input.get(header..)?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (el, r) = rest.split_at(der_len(rest)?);
        out.push(el);
        rest = r;
    }
    Some(out)
}

fn der_encode(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// Replaces the issuer and subject Names of the certificate `der` by these exact DER encodings
/// (rcgen's `DistinguishedName` cannot hold a repeated attribute, such as two `O` groups, and
/// may re-encode strings) and signs it again with `key`.
fn with_names(der: &[u8], issuer: &[u8], subject: &[u8], key: &KeyPair) -> Option<Vec<u8>> {
    use rcgen::SigningKey as _;
    let cert = der_sequence(der)?;
    let [tbs, sig_alg, _sig] = cert.as_slice() else {
        return None;
    };
    let mut fields = der_sequence(tbs)?;
    // version [0], serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, …
    if fields.len() < 7 || fields[0].first() != Some(&0xa0) {
        return None;
    }
    fields[3] = issuer;
    fields[5] = subject;
    let tbs = der_encode(0x30, &fields.concat());
    let mut sig = vec![0u8]; // no unused bits
    sig.extend(key.sign(&tbs).ok()?);
    Some(der_encode(
        0x30,
        &[tbs.as_slice(), sig_alg, &der_encode(0x03, &sig)].concat(),
    ))
}

/// Signs the PEM certificate signing request `csr_pem` with the cluster CA `ca` (the first
/// certificate of `ca.cert_pem` and `ca.key_pem`) and returns the client certificate, PEM.
///
/// The certificate keeps the request's subject (every RDN, in order, byte for byte), its public
/// key and its requested subjectAltName; it is a client-auth leaf (digitalSignature +
/// keyEncipherment, clientAuth, CA:FALSE) whatever else the request asks for, with a random
/// serial, valid from five minutes ago until `validity` from now, but never past the CA.
/// The request's own signature is verified (x509-parser with aws-lc-rs) before anything else
/// is looked at beyond its key.
pub fn sign_csr(
    ca: &KeyPairPem,
    csr_pem: &str,
    validity: std::time::Duration,
) -> Result<String, CsrError> {
    // The request.
    let csr_der = pem_blocks(csr_pem, &["CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"])
        .into_iter()
        .next()
        .ok_or(CsrError::NotPem)?
        .ok_or_else(|| CsrError::Malformed("the PEM block is not valid base64".into()))?;
    let (rest, csr) = X509CertificationRequest::from_der(&csr_der).map_err(|_| {
        CsrError::Malformed(
            "the PEM block does not hold a PKCS#10 certificate signing request".into(),
        )
    })?;
    if !rest.is_empty() {
        return Err(CsrError::Malformed(
            "there is trailing data after the request".into(),
        ));
    }
    let info = &csr.certification_request_info;
    let public_key = supported_key(&info.subject_pki)?;
    let sig_alg = &csr.signature_algorithm.algorithm;
    if *sig_alg == OID_PKCS1_SHA1WITHRSA || *sig_alg == OID_SHA1_WITH_RSA {
        return Err(CsrError::UnsupportedSignature(oid_name(sig_alg)));
    }
    csr.verify_signature().map_err(|e| match e {
        X509Error::SignatureUnsupportedAlgorithm => {
            CsrError::UnsupportedSignature(oid_name(sig_alg))
        }
        _ => CsrError::BadSignature,
    })?;
    let subject = info.subject.as_raw();
    let san = requested_san(&csr)?;
    if info.subject.iter().next().is_none() && san.is_none() {
        return Err(CsrError::Malformed(
            "it has neither a subject nor subject alternative names".into(),
        ));
    }

    // The CA: its first certificate and the key of that certificate.
    let ca_der = first_cert_der(&ca.cert_pem)?;
    let ca_cert = parse_cert(&ca_der)?;
    if !ca_cert.is_ca() {
        return Err(CsrError::Ca(
            "its certificate is not a CA certificate".into(),
        ));
    }
    let ca_key = KeyPair::from_pem(&ca.key_pem)
        .map_err(|e| CsrError::Ca(format!("its private key does not parse: {e}")))?;
    if ca_key.public_key_raw() != ca_cert.public_key().subject_public_key.data.as_ref() {
        return Err(CsrError::Ca(
            "its private key is not the key of its first certificate".into(),
        ));
    }

    // Validity: [now − skew, min(now + validity, CA expiry)], inside the CA's own validity.
    let now = Utc::now().timestamp();
    let ca_not_before = ca_cert.validity().not_before.timestamp();
    let ca_not_after = ca_cert.validity().not_after.timestamp();
    let wanted = i64::try_from(validity.as_secs())
        .ok()
        .and_then(|v| now.checked_add(v))
        .unwrap_or(i64::MAX);
    let not_after = wanted.min(ca_not_after);
    let not_before = (now - CLOCK_SKEW_SECS).max(ca_not_before);
    if not_after <= now {
        return Err(CsrError::Ca(format!(
            "its certificate expired on {}",
            chrono::DateTime::from_timestamp(ca_not_after, 0)
                .map_or_else(|| ca_not_after.to_string(), |t| t.to_rfc3339())
        )));
    }
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let at = |ts: i64| {
        u64::try_from(ts)
            .map(|s| epoch + std::time::Duration::from_secs(s))
            .map_err(|_| CsrError::Ca(format!("time {ts} is before 1970")))
    };

    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new(); // replaced by `subject` below
    params.serial_number = Some(random_serial());
    params.not_before = at(not_before)?;
    params.not_after = at(not_after)?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    if let Some((critical, general_names)) = san {
        let mut ext = rcgen::CustomExtension::from_oid_content(&[2, 5, 29, 17], general_names);
        // RFC 5280 4.2.1.6: critical when the subject is empty.
        ext.set_criticality(critical || info.subject.iter().next().is_none());
        params.custom_extensions.push(ext);
    }
    // The authority key identifier is the CA's subject key identifier, when it has one.
    let ca_ski = ca_cert
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        });
    params.use_authority_key_identifier_extension = ca_ski.is_some();
    let mut issuer_params = CertificateParams::default();
    issuer_params.distinguished_name = DistinguishedName::new(); // replaced below
    if let Some(ski) = ca_ski {
        issuer_params.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(ski);
    }
    let issuer = rcgen::Issuer::new(issuer_params, &ca_key);
    let draft = params
        .signed_by(&public_key, &issuer)
        .map_err(|e| CsrError::Signing(e.to_string()))?;
    let der = with_names(draft.der(), ca_cert.subject().as_raw(), subject, &ca_key)
        .ok_or_else(|| CsrError::Signing("could not set the certificate's names".into()))?;

    // Belt and braces: what we hand out is what we meant to.
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| CsrError::Signing(format!("the certificate does not parse: {e}")))?;
    if cert.verify_signature(Some(ca_cert.public_key())).is_err()
        || cert.subject().as_raw() != subject
        || cert.public_key().raw != info.subject_pki.raw
    {
        return Err(CsrError::Signing(
            "the signed certificate is inconsistent".into(),
        ));
    }
    Ok(pem_encode("CERTIFICATE", &der))
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

    // --- CSR signing ---------------------------------------------------------------------

    const RSA2048: &str = include_str!("../../tests/fixtures/csr/rsa2048.csr");
    const RSA4096: &str = include_str!("../../tests/fixtures/csr/rsa4096.csr");
    const RSA1024: &str = include_str!("../../tests/fixtures/csr/rsa1024.csr");
    const P384: &str = include_str!("../../tests/fixtures/csr/p384.csr");
    const ED25519: &str = include_str!("../../tests/fixtures/csr/ed25519.csr");

    const DAY: std::time::Duration = std::time::Duration::from_secs(86400);
    const YEAR: std::time::Duration = std::time::Duration::from_secs(365 * 86400);

    fn der_of(pem: &str) -> Vec<u8> {
        pem_blocks(pem, &["CERTIFICATE", "CERTIFICATE REQUEST"])
            .remove(0)
            .unwrap()
    }

    fn p256_csr(ca_true: bool) -> String {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(vec!["kubectl.example".to_string()]).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "system:masters");
        dn.push(DnType::CommonName, "terraform");
        params.distinguished_name = dn;
        if ca_true {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        }
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn rsa_ca() -> KeyPairPem {
        let key =
            KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048).unwrap();
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "rsa-ca");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_after = rcgen::date_time_ymd(Utc::now().year() + 2, 1, 1);
        KeyPairPem {
            cert_pem: params.self_signed(&key).unwrap().pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Signs `csr` with `ca` and checks everything a client certificate must be.
    fn check_signed(ca: &KeyPairPem, csr: &str, sans: &[&str]) -> String {
        let other = generate_ca("kubernetes").unwrap();
        let pem = sign_csr(ca, csr, YEAR).unwrap();
        assert_eq!(pem_certs(&pem), vec![pem.clone()]);
        assert!(verifies(&pem, &ca.cert_pem));
        assert!(!verifies(&pem, &other.cert_pem));

        let der = der_of(&pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let csr_der = der_of(csr);
        let (_, req) = X509CertificationRequest::from_der(&csr_der).unwrap();
        // Subject (byte for byte) and key of the request; issuer of the CA.
        let info = &req.certification_request_info;
        assert_eq!(cert.subject().as_raw(), info.subject.as_raw());
        assert_eq!(cert.public_key().raw, info.subject_pki.raw);
        let ca_der = der_of(&ca.cert_pem);
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
        assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
        // SANs.
        let got: Vec<String> = cert
            .subject_alternative_name()
            .unwrap()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .map(|n| n.to_string())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(got, sans);
        // A client-auth leaf.
        assert!(!cert.is_ca());
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth && !eku.any && eku.other.is_empty());
        let ku = cert.key_usage().unwrap().unwrap().value;
        assert!(ku.digital_signature() && ku.key_encipherment() && !ku.key_cert_sign());
        assert!(cert.tbs_certificate.raw_serial().len() <= 17);
        assert!(!cert.tbs_certificate.raw_serial().is_empty());
        assert!(cert.tbs_certificate.raw_serial()[0] & 0x80 == 0);
        // About a year, starting five minutes ago.
        let now = Utc::now().timestamp();
        let nb = cert.validity().not_before.timestamp();
        let na = cert.validity().not_after.timestamp();
        assert!(
            (now - 300 - 5..=now - 300 + 5).contains(&nb)
                || nb == ca_cert.validity().not_before.timestamp()
        );
        assert!((now + YEAR.as_secs() as i64 - 5..=now + YEAR.as_secs() as i64 + 5).contains(&na));
        pem
    }

    #[test]
    fn signs_the_supported_key_types() {
        let ca = generate_ca("kubernetes").unwrap();
        let dns_ip = ["DNSName(admin.example)", "IPAddress(0a:00:00:01)"];
        check_signed(&ca, RSA2048, &[]);
        check_signed(&ca, RSA4096, &dns_ip);
        check_signed(&ca, P384, &[]);
        check_signed(&ca, ED25519, &[]);
        check_signed(&ca, &p256_csr(false), &["DNSName(kubectl.example)"]);
        // An RSA CA signs too, and the RSA signature is really checked.
        let rsa = rsa_ca();
        let pem = check_signed(&rsa, &p256_csr(false), &["DNSName(kubectl.example)"]);
        assert!(!verifies(&pem, &ca.cert_pem));
        assert!(verifies(&pem, &bundle(&[&ca.cert_pem, &rsa.cert_pem])));
    }

    #[test]
    fn accepts_crlf_and_surrounding_text() {
        let ca = generate_ca("kubernetes").unwrap();
        let messy = format!("csr:\r\n  {}", RSA2048.replace('\n', "\r\n  "));
        let pem = sign_csr(&ca, &messy, DAY).unwrap();
        assert!(verifies(&pem, &ca.cert_pem));
    }

    #[test]
    fn keeps_every_rdn_in_order() {
        let ca = generate_ca("kubernetes").unwrap();
        let pem = sign_csr(&ca, P384, DAY).unwrap();
        let der = der_of(&pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(
            cert.subject().to_string(),
            "O=system:masters, O=developers, CN=alice"
        );
        let pem = sign_csr(&ca, RSA2048, DAY).unwrap();
        let der = der_of(&pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(cert.subject().to_string(), "O=system:masters, CN=admin");
        assert_eq!(cert.issuer().to_string(), "CN=kubernetes");
    }

    #[test]
    fn validity_is_capped_at_the_ca() {
        let ca = generate_ca("kubernetes").unwrap();
        let ca_not_after = not_after(&ca.cert_pem).unwrap();
        assert!(ca_not_after > Utc::now() + chrono::Duration::days(9 * 365));
        let pem = sign_csr(&ca, RSA2048, 20 * YEAR).unwrap();
        assert_eq!(not_after(&pem).unwrap(), ca_not_after);
        let pem = sign_csr(&ca, RSA2048, std::time::Duration::MAX).unwrap();
        assert_eq!(not_after(&pem).unwrap(), ca_not_after);
        let pem = sign_csr(&ca, RSA2048, DAY).unwrap();
        let delta = (not_after(&pem).unwrap() - (Utc::now() + chrono::Duration::days(1)))
            .num_seconds()
            .abs();
        assert!(delta <= 5, "{delta}");
    }

    #[test]
    fn a_bundle_signs_with_its_first_certificate() {
        let new = generate_ca("kubernetes").unwrap();
        let old = generate_ca("kubernetes").unwrap();
        let ca = KeyPairPem {
            cert_pem: bundle(&[&new.cert_pem, &old.cert_pem]),
            key_pem: new.key_pem.clone(),
        };
        assert_eq!(pem_certs(&ca.cert_pem).len(), 2);
        let pem = sign_csr(&ca, RSA2048, DAY).unwrap();
        assert!(verifies(&pem, &new.cert_pem));
        assert!(!verifies(&pem, &old.cert_pem));
        assert!(verifies(&pem, &ca.cert_pem));
        assert_eq!(
            not_after(&ca.cert_pem).unwrap(),
            not_after(&new.cert_pem).unwrap()
        );
        // The old key with the new certificate first is a server-side error.
        let wrong = KeyPairPem {
            cert_pem: ca.cert_pem.clone(),
            key_pem: old.key_pem.clone(),
        };
        let err = sign_csr(&wrong, RSA2048, DAY).unwrap_err();
        assert!(matches!(err, CsrError::Ca(_)), "{err}");
        assert!(
            err.to_string()
                .contains("not the key of its first certificate")
        );
    }

    #[test]
    fn a_request_for_a_ca_gets_a_leaf() {
        let ca = generate_ca("kubernetes").unwrap();
        check_signed(&ca, &p256_csr(true), &["DNSName(kubectl.example)"]);
    }

    #[test]
    fn bad_requests_are_rejected_with_a_clear_message() {
        let ca = generate_ca("kubernetes").unwrap();
        let sign = |csr: &str| sign_csr(&ca, csr, DAY).unwrap_err();

        for not_pem in [
            "",
            "hello",
            &ca.cert_pem,
            &der_of(RSA2048).len().to_string(),
        ] {
            let err = sign(not_pem);
            assert_eq!(err, CsrError::NotPem);
            assert_eq!(
                err.to_string(),
                "Invalid CSR: it is not a PEM-encoded certificate signing request"
            );
        }
        let err =
            sign("-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----\n");
        assert!(matches!(err, CsrError::Malformed(_)), "{err}");
        assert!(err.to_string().starts_with("Invalid CSR: "));
        let garbage = pem_encode("CERTIFICATE REQUEST", b"this is not DER at all");
        let err = sign(&garbage);
        assert!(matches!(err, CsrError::Malformed(_)), "{err}");
        assert_eq!(
            err.to_string(),
            "Invalid CSR: the PEM block does not hold a PKCS#10 certificate signing request"
        );

        // One flipped bit in the signature (the last bytes of the request).
        for csr in [RSA2048, RSA4096, P384, ED25519] {
            let mut der = der_of(csr);
            let last = der.len() - 1;
            der[last] ^= 0x01;
            let err = sign(&pem_encode("CERTIFICATE REQUEST", &der));
            assert_eq!(err, CsrError::BadSignature);
            assert_eq!(
                err.to_string(),
                "Invalid CSR: its signature does not verify"
            );
        }
        // ... and one in the subject, which the signature covers.
        let der = der_of(RSA2048);
        let at = der.windows(5).position(|w| w == b"admin").unwrap();
        let mut tampered = der.clone();
        tampered[at] = b'A';
        assert_eq!(
            sign(&pem_encode("CERTIFICATE REQUEST", &tampered)),
            CsrError::BadSignature
        );

        let err = sign(RSA1024);
        assert_eq!(err, CsrError::UnsupportedKey("RSA-1024".into()));
        assert_eq!(
            err.to_string(),
            "Invalid CSR: unsupported key type RSA-1024; use RSA (2048–8192 bits), ECDSA P-256/P-384 or Ed25519"
        );
    }

    #[test]
    fn the_ca_must_be_usable() {
        let ca = generate_ca("kubernetes").unwrap();
        let no_cert = KeyPairPem {
            cert_pem: String::new(),
            key_pem: ca.key_pem.clone(),
        };
        assert!(matches!(
            sign_csr(&no_cert, RSA2048, DAY),
            Err(CsrError::Ca(_))
        ));
        let no_key = KeyPairPem {
            cert_pem: ca.cert_pem.clone(),
            key_pem: "nope".into(),
        };
        let err = sign_csr(&no_key, RSA2048, DAY).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the cluster CA cannot be used: "),
            "{err}"
        );
        // A leaf is no CA.
        let leaf = KeyPairPem {
            cert_pem: sign_csr(&ca, RSA2048, DAY).unwrap(),
            key_pem: ca.key_pem.clone(),
        };
        assert!(matches!(
            sign_csr(&leaf, RSA2048, DAY),
            Err(CsrError::Ca(_))
        ));
    }

    #[test]
    fn bundle_helpers() {
        let a = generate_ca("a").unwrap();
        let b = generate_ca("b").unwrap();
        // Normalised: CRLF, indentation, text around, other blocks are dropped.
        let messy = format!(
            "subject=a\r\n  {}\n{}",
            a.cert_pem.replace('\n', "\r\n    "),
            a.key_pem
        );
        assert_eq!(pem_certs(&messy), vec![a.cert_pem.clone()]);
        let unterminated = format!("-----BEGIN FOO-----\nAAAA\n{}", a.cert_pem);
        assert_eq!(pem_certs(&unterminated), vec![a.cert_pem.clone()]);
        let ab = bundle(&[&a.cert_pem, &b.cert_pem]);
        assert_eq!(ab, format!("{}{}", a.cert_pem, b.cert_pem));
        assert_eq!(pem_certs(&ab), vec![a.cert_pem.clone(), b.cert_pem.clone()]);
        // No duplicates when the new certificate was already there.
        assert_eq!(bundle(&[&a.cert_pem, &ab]), ab);
        assert_eq!(bundle(&[]), "");
        assert!(pem_certs("nothing").is_empty());

        assert!(key_matches(&a.cert_pem, &a.key_pem));
        assert!(key_matches(&ab, &a.key_pem));
        assert!(!key_matches(&ab, &b.key_pem));
        assert!(!key_matches(&a.cert_pem, "garbage"));
        let rsa = rsa_ca();
        assert!(key_matches(&rsa.cert_pem, &rsa.key_pem));
        assert!(!key_matches(&rsa.cert_pem, &a.key_pem));

        // Self-signed CAs verify against themselves only.
        assert!(verifies(&a.cert_pem, &a.cert_pem));
        assert!(verifies(&a.cert_pem, &ab));
        assert!(!verifies(&a.cert_pem, &b.cert_pem));
        assert!(verifies(&rsa.cert_pem, &rsa.cert_pem));
        assert!(!verifies(&rsa.cert_pem, &ab));
        assert!(!verifies("", &ab));
        assert!(!verifies(&a.cert_pem, ""));

        let year = Utc::now().year() + CA_VALIDITY_YEARS;
        assert_eq!(not_after(&ab).unwrap().year(), year);
        assert!(matches!(not_after("x"), Err(CsrError::Ca(_))));
    }
}
