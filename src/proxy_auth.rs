//! The credential a private cluster's kubeconfig carries to `magnum-capi api-proxy` (docs/private-clusters.md): the cluster (`<namespace>/<name>` of its OpenStackCluster) as the user
//! and an HMAC-SHA256 of it under the deployment's proxy key as the password, in the userinfo of
//! the kubeconfig's `proxy-url`. client-go (Go's net/http) and kube-rs send that userinfo as
//! `Proxy-Authorization: Basic` with their CONNECT, so no controller needs a change. The proxy
//! recomputes the HMAC (compared in constant time): it needs the key only, never the kubeconfig
//! Secrets, and one credential opens one cluster's API. Written by the service
//! (`capi::private`), checked by the proxy (`api_proxy::tunnel`).

use aws_lc_rs::hmac;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use secrecy::SecretString;

const KEY_LEN: usize = 32;
/// Keeps this use of the key apart from any other.
const CONTEXT: &[u8] = b"magnum-capi api-proxy credential v1\0";

/// Why a key or a proxy URL cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyAuthError {
    #[error(
        "the api-proxy key must be {KEY_LEN} bytes, base64-encoded (e.g. `head -c 32 /dev/urandom \
         | base64`)"
    )]
    BadKey,
    #[error(
        "{0:?} must be http://host:port without a user or password (magnum-capi api-proxy speaks \
         plain HTTP CONNECT, the tunnelled API stays TLS; each cluster's credential comes from \
         the key)"
    )]
    BadUrl(String),
}

/// The deployment's proxy key: the service and every proxy hold the same one.
#[derive(Clone)]
pub struct ProxyKey(hmac::Key);

impl std::fmt::Debug for ProxyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxyKey(..)")
    }
}

impl ProxyKey {
    /// From base64 of 32 bytes.
    pub fn from_base64(text: &SecretString) -> Result<Self, ProxyAuthError> {
        let bytes = crate::seal::key_bytes(text).ok_or(ProxyAuthError::BadKey)?;
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
    }

    fn message(cluster: &str) -> Vec<u8> {
        [CONTEXT, cluster.as_bytes()].concat()
    }

    /// Cluster `cluster`'s password (URL-safe: it goes into a URL's userinfo as it is).
    fn password(&self, cluster: &str) -> String {
        URL_SAFE_NO_PAD.encode(hmac::sign(&self.0, &Self::message(cluster)))
    }

    /// The `Proxy-Authorization` value a client of `cluster`'s kubeconfig sends.
    pub fn authorization(&self, cluster: &str) -> String {
        let pair = format!("{cluster}:{}", self.password(cluster));
        format!("Basic {}", STANDARD.encode(pair))
    }

    /// The cluster a `Proxy-Authorization` value proves; `None` for anything else (no Basic
    /// credential, a password that is not the cluster's).
    pub fn authenticate(&self, header: &[u8]) -> Option<String> {
        let text = std::str::from_utf8(header).ok()?.trim();
        let (scheme, encoded) = text.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let pair = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
        let (cluster, password) = pair.split_once(':')?;
        let tag = URL_SAFE_NO_PAD.decode(password).ok()?;
        hmac::verify(&self.0, &Self::message(cluster), &tag).ok()?;
        Some(cluster.to_string())
    }
}

/// `[capi] api_proxy_url` with the key: the `proxy-url` of each private cluster's kubeconfig.
#[derive(Debug, Clone)]
pub struct ProxyUrls {
    base: url::Url,
    key: ProxyKey,
}

impl ProxyUrls {
    pub fn new(base: &str, key: ProxyKey) -> Result<Self, ProxyAuthError> {
        Ok(Self {
            base: check_url(base)?,
            key,
        })
    }

    /// The proxy's URL without any credential (what may be logged).
    pub fn base(&self) -> &str {
        self.base.as_str()
    }

    pub fn key(&self) -> &ProxyKey {
        &self.key
    }

    /// `cluster`'s `proxy-url`: the base with the cluster and its password as userinfo
    /// (percent-encoded; client-go and kube-rs decode it before sending).
    pub fn for_cluster(&self, cluster: &str) -> String {
        let mut url = self.base.clone();
        // Neither fails on an http URL with a host (`check_url`).
        let _ = url.set_username(cluster);
        let _ = url.set_password(Some(&self.key.password(cluster)));
        url.into()
    }
}

/// `url` as a proxy URL the credential can be added to: `http://host[:port]`, no userinfo.
pub fn check_url(url: &str) -> Result<url::Url, ProxyAuthError> {
    let bad = || ProxyAuthError::BadUrl(url.to_string());
    let parsed = url::Url::parse(url).map_err(|_| bad())?;
    let ok = parsed.scheme() == "http"
        && parsed.host().is_some()
        && parsed.username().is_empty()
        && parsed.password().is_none();
    ok.then_some(parsed).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> ProxyKey {
        ProxyKey::from_base64(&SecretString::from(STANDARD.encode([byte; 32]))).unwrap()
    }

    #[test]
    fn a_credential_proves_its_own_cluster_only() {
        let k = key(1);
        let a = k.authorization("magnum-p1/c1");
        assert_eq!(
            k.authenticate(a.as_bytes()).as_deref(),
            Some("magnum-p1/c1")
        );
        assert_eq!(
            k.authenticate(a.replacen("Basic", "basic", 1).as_bytes())
                .as_deref(),
            Some("magnum-p1/c1"),
            "the scheme is case-insensitive"
        );
        // c1's password presented for c2, another key's credential, garbage.
        let pair = String::from_utf8(STANDARD.decode(&a[6..]).unwrap()).unwrap();
        let stolen = pair.replacen("magnum-p1/c1", "magnum-p2/c1", 1);
        let stolen = format!("Basic {}", STANDARD.encode(stolen));
        assert_eq!(k.authenticate(stolen.as_bytes()), None);
        assert_eq!(
            k.authenticate(key(2).authorization("magnum-p1/c1").as_bytes()),
            None
        );
        for bad in ["", "Basic", "Basic !!!", "Bearer x", "Basic Og=="] {
            assert_eq!(k.authenticate(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn each_cluster_gets_its_own_proxy_url_which_says_nothing_else_of_the_key() {
        let urls = ProxyUrls::new("http://proxy.example:3128", key(1)).unwrap();
        let url = urls.for_cluster("magnum-p1/c1");
        let parsed = url::Url::parse(&url).unwrap();
        assert_eq!(parsed.username(), "magnum-p1%2Fc1");
        assert_eq!(
            (parsed.host_str(), parsed.port()),
            (Some("proxy.example"), Some(3128))
        );
        // What a client sends with it is the cluster's credential.
        let pair = format!("magnum-p1/c1:{}", parsed.password().unwrap());
        assert_eq!(
            format!("Basic {}", STANDARD.encode(pair)),
            urls.key().authorization("magnum-p1/c1")
        );
        assert_ne!(url, urls.for_cluster("magnum-p2/c1"));
        assert_eq!(urls.base(), "http://proxy.example:3128/");
        assert!(!format!("{urls:?}").contains(parsed.password().unwrap()));
    }

    #[test]
    fn keys_and_urls_that_cannot_work_are_refused() {
        for bad in ["", "c2hvcnQ=", "not base64"] {
            assert_eq!(
                ProxyKey::from_base64(&SecretString::from(bad)).unwrap_err(),
                ProxyAuthError::BadKey
            );
        }
        for bad in [
            "https://proxy:3128",
            "proxy:3128",
            "http://u:p@proxy:3128",
            "socks5://proxy:1080",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}
