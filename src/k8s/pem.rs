//! PEM as Kubernetes carries it in Secrets and kubeconfigs: the blocks of a bundle, the
//! certificates in it, whether a private key belongs to a certificate.

use rcgen::KeyPair;

/// The DER contents of every PEM block labelled one of `labels`, in order; `None` for a block
/// whose body is not base64. Whitespace (CRLF, indentation) inside and around blocks is ignored.
pub fn pem_blocks(pem: &str, labels: &[&str]) -> Vec<Option<Vec<u8>>> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        let body = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(body_end) = body.find(&end_marker) else {
            rest = after; // an unterminated block: look for the next one
            continue;
        };
        if labels.contains(&label) {
            let b64: String = body[..body_end]
                .chars()
                .filter(|c| !c.is_ascii_whitespace())
                .collect();
            out.push(base64::engine::general_purpose::STANDARD.decode(b64).ok());
        }
        rest = &body[body_end + end_marker.len()..];
    }
    out
}

/// The DER of each (base64-valid) CERTIFICATE block of `pem`, in order.
pub fn cert_ders(pem: &str) -> Vec<Vec<u8>> {
    pem_blocks(pem, &["CERTIFICATE"])
        .into_iter()
        .flatten()
        .collect()
}

/// Whether `key_pem` (a private key, PKCS#8) is the key of the first certificate of `cert_pem`.
pub fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    let Some(der) = cert_ders(cert_pem).into_iter().next() else {
        return false;
    };
    let (Ok((_, cert)), Ok(key)) = (
        x509_parser::parse_x509_certificate(&der),
        KeyPair::from_pem(key_pem),
    ) else {
        return false;
    };
    key.public_key_raw() == cert.public_key().subject_public_key.data.as_ref()
}
