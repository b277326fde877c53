//! Where a request came from and the URL the client addressed the service by (the `links`
//! and `Location` it follows): the one place that reads `Forwarded` and `X-Forwarded-Proto`,
//! `-Host`, `-Prefix`, `-For` (as oslo's `http_proxy_to_wsgi` does for Magnum), and only when
//! the TCP peer is one of `[http] trusted_proxies`; from anyone else they are ignored.

use std::net::IpAddr;

use axum::http::{HeaderMap, Uri};

use crate::config::HttpConfig;
use crate::listener::Connection;

/// The request's origin, computed once by the front middleware.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `scheme://host[/prefix]`, without a trailing slash.
    pub base_url: String,
    /// The client's address: the TCP peer, or behind trusted proxies the address they name;
    /// empty when unknown (a request not served from a socket).
    pub client: String,
}

impl Origin {
    /// The origin of a request with `headers` and `uri` that came on `conn`.
    pub fn of(
        headers: &HeaderMap,
        uri: &Uri,
        conn: Option<&Connection>,
        http: &HttpConfig,
    ) -> Origin {
        let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::trim);
        let trusted = conn.is_some_and(|c| http.trusts(c.peer.ip()));
        let forwarded_header = |n: &str| if trusted { header(n) } else { None };
        let forwarded = forwarded_header("forwarded");
        let first = |n: &str| {
            forwarded_header(n)
                .and_then(|v| v.split(',').next())
                .map(str::trim)
        };
        let own_scheme = if conn.is_some_and(|c| c.https) {
            "https"
        } else {
            "http"
        };
        let scheme = forwarded
            .and_then(|f| first_element_param(f, "proto"))
            .or_else(|| first("x-forwarded-proto"))
            .unwrap_or(own_scheme);
        let host = forwarded
            .and_then(|f| first_element_param(f, "host"))
            .or_else(|| first("x-forwarded-host"))
            .or_else(|| header("host"))
            .or_else(|| uri.authority().map(|a| a.as_str()))
            .unwrap_or("localhost:9511");
        let prefix = forwarded_header("x-forwarded-prefix")
            .unwrap_or("")
            .trim_end_matches('/');
        let client = match conn {
            None => String::new(),
            Some(c) if !trusted => c.peer.ip().to_string(),
            Some(c) => forwarded_client(forwarded, forwarded_header("x-forwarded-for"), http)
                .unwrap_or_else(|| c.peer.ip().to_string()),
        };
        Origin {
            base_url: format!("{scheme}://{host}{prefix}"),
            client,
        }
    }
}

/// `key`'s value in the first element of a `Forwarded` header (RFC 7239): what the proxy
/// nearest the client saw.
fn first_element_param<'a>(forwarded: &'a str, key: &'a str) -> Option<&'a str> {
    params(forwarded.split(',').next()?, key).next()
}

fn params<'a>(element: &'a str, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    element
        .split(';')
        .filter_map(|kv| kv.split_once('='))
        .filter(move |(k, _)| k.trim().eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim().trim_matches('"'))
}

/// The client behind the trusted proxies: walking the `for` list from the nearest hop back,
/// the first address that is not itself a trusted proxy (anything before it could be made up
/// by the client).
fn forwarded_client(
    forwarded: Option<&str>,
    x_forwarded_for: Option<&str>,
    http: &HttpConfig,
) -> Option<String> {
    let hops: Vec<&str> = match forwarded {
        Some(f) => f
            .split(',')
            .filter_map(|e| params(e, "for").next())
            .collect(),
        None => x_forwarded_for?.split(',').map(str::trim).collect(),
    };
    let mut client = None;
    for hop in hops.iter().rev() {
        client = Some(hop.to_string());
        match node_address(hop) {
            Some(ip) if http.trusts(ip) => continue,
            _ => break,
        }
    }
    client
}

/// The address of a node as `Forwarded`/`X-Forwarded-For` write it: `192.0.2.1`,
/// `192.0.2.1:4711`, `[2001:db8::1]:4711`, `2001:db8::1`; `None` for `unknown` or an
/// obfuscated name.
fn node_address(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse() {
        return Some(ip);
    }
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    node.rsplit_once(':')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(trusted: &[&str]) -> HttpConfig {
        HttpConfig {
            trusted_proxies: trusted.iter().map(|s| s.parse().unwrap()).collect(),
            ..HttpConfig::default()
        }
    }

    fn conn(peer: &str, https: bool) -> Connection {
        Connection {
            peer: peer.parse().unwrap(),
            https,
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const PROXIED: [(&str, &str); 5] = [
        ("host", "10.0.0.5:9511"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "magnum.example.com"),
        ("x-forwarded-prefix", "/container-infra/"),
        ("x-forwarded-for", "203.0.113.9, 10.0.0.2"),
    ];

    #[test]
    fn forwarded_headers_count_from_a_trusted_proxy() {
        let o = Origin::of(
            &headers(&PROXIED),
            &Uri::from_static("/v1"),
            Some(&conn("10.0.0.1:40000", false)),
            &http(&["10.0.0.0/24"]),
        );
        assert_eq!(o.base_url, "https://magnum.example.com/container-infra");
        // 10.0.0.2 is a trusted hop too: the client is the address before it.
        assert_eq!(o.client, "203.0.113.9");
    }

    #[test]
    fn forwarded_headers_are_ignored_from_anyone_else() {
        let untrusted = [
            (Some(conn("192.0.2.1:40000", false)), http(&["10.0.0.0/24"])),
            (Some(conn("10.0.0.1:40000", false)), http(&[])),
            (None, http(&["0.0.0.0/0"])),
        ];
        for (c, cfg) in untrusted {
            let o = Origin::of(
                &headers(&PROXIED),
                &Uri::from_static("/v1"),
                c.as_ref(),
                &cfg,
            );
            assert_eq!(o.base_url, "http://10.0.0.5:9511", "{c:?}");
            assert_eq!(
                o.client,
                c.map(|c| c.peer.ip().to_string()).unwrap_or_default()
            );
        }
    }

    #[test]
    fn the_rfc_7239_header_wins_and_its_first_element_is_the_clients_view() {
        let h = headers(&[
            ("host", "internal"),
            ("x-forwarded-proto", "http"),
            (
                "forwarded",
                "for=\"[2001:db8::7]:4711\";proto=https;host=api.example.com, for=10.0.0.2",
            ),
        ]);
        let o = Origin::of(
            &h,
            &Uri::from_static("/"),
            Some(&conn("[::ffff:10.0.0.1]:5000", false)),
            &http(&["10.0.0.0/24"]),
        );
        assert_eq!(o.base_url, "https://api.example.com");
        assert_eq!(o.client, "[2001:db8::7]:4711");
    }

    #[test]
    fn a_tls_connection_without_proxy_headers_links_https() {
        let o = Origin::of(
            &headers(&[("host", "magnum:9511")]),
            &Uri::from_static("/"),
            Some(&conn("192.0.2.1:1", true)),
            &http(&[]),
        );
        assert_eq!(o.base_url, "https://magnum:9511");
    }
}
