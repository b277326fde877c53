//! The service catalog that comes with a validated token, and endpoint selection from it.

use serde::Deserialize;

/// One service of the catalog (`token.catalog[]`).
#[derive(Debug, Clone, Deserialize)]
pub struct CatalogEntry {
    #[serde(rename = "type")]
    pub service_type: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
}

/// One endpoint of a catalog entry.
#[derive(Debug, Clone, Deserialize)]
pub struct Endpoint {
    pub interface: String,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub region_id: Option<String>,
    pub url: String,
}

/// The caller's catalog, as Keystone returned it with the token.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Catalog(pub Vec<CatalogEntry>);

impl Catalog {
    /// URL of the first endpoint of `service_type` with `interface`, in `region` when given.
    pub fn url(&self, service_type: &str, interface: &str, region: Option<&str>) -> Option<&str> {
        self.0
            .iter()
            .filter(|e| e.service_type == service_type)
            .flat_map(|e| e.endpoints.iter())
            .filter(|ep| ep.interface == interface)
            .find(|ep| {
                region.is_none_or(|r| {
                    ep.region_id.as_deref() == Some(r) || ep.region.as_deref() == Some(r)
                })
            })
            .map(|ep| ep.url.as_str())
    }

    /// Service types present (for logs and error messages).
    pub fn types(&self) -> Vec<&str> {
        self.0.iter().map(|e| e.service_type.as_str()).collect()
    }
}

/// Catalog types of Octavia.
pub const LOAD_BALANCER: &[&str] = &["load-balancer"];
/// Catalog types of Cinder v3 (`block-storage`, and the older `volumev3`).
pub const BLOCK_STORAGE: &[&str] = &["block-storage", "volumev3"];
/// Catalog type of Neutron.
pub const NETWORK: &[&str] = &["network"];

/// One catalog entry the service finds endpoints in (at `[keystone] interface` and
/// `region_name`), as `magnum-capi check` looks for it.
pub struct Used {
    pub name: &'static str,
    /// The entry's types (aliases).
    pub types: &'static [&'static str],
    /// What the service uses it for.
    pub purpose: &'static str,
    /// Whether clusters can be made without it.
    pub optional: bool,
}

/// Every catalog entry the service uses.
pub const USED: [Used; 6] = [
    Used {
        name: "identity",
        types: &["identity"],
        purpose: "the workload clusters' auth_url",
        optional: false,
    },
    Used {
        name: "compute",
        types: &["compute"],
        purpose: "Nova: flavors, key pairs, server groups",
        optional: false,
    },
    Used {
        name: "network",
        types: NETWORK,
        purpose: "Neutron: networks, subnets, the delete cleanup",
        optional: false,
    },
    Used {
        name: "image",
        types: &["image"],
        purpose: "Glance: images and their os_distro",
        optional: false,
    },
    Used {
        name: "load-balancer",
        types: LOAD_BALANCER,
        purpose: "Octavia: the delete cleanup of Service load balancers",
        optional: true,
    },
    Used {
        name: "block-storage",
        types: BLOCK_STORAGE,
        purpose: "Cinder: the delete cleanup of volumes",
        optional: true,
    },
];

/// The catalog URL with the API version appended when it has none. Catalogs list Nova
/// versioned (`…/compute/v2.1`) but Glance and Neutron unversioned (`…/image`, `:9696`);
/// the SDK's endpoint paths are relative to the versioned root. Hand-rolled instead of the
/// SDK's version discovery: that lives inside its own session type and would cost a round trip
/// per request, while the major versions of these three APIs have been fixed for a decade.
pub fn versioned(url: &str, version: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let last = trimmed.rsplit('/').next().unwrap_or_default();
    if is_version_segment(last) {
        trimmed.to_string()
    } else {
        format!("{trimmed}/{version}")
    }
}

fn is_version_segment(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let mut parts = rest.splitn(2, '.');
    let major_ok = parts
        .next()
        .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()));
    let minor_ok = parts
        .next()
        .is_none_or(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()));
    major_ok && minor_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        serde_json::from_value(json!([
            {"type": "image", "name": "glance", "endpoints": [
                {"interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": "http://a/image"},
                {"interface": "internal", "region_id": "RegionOne", "url": "http://internal/image"},
                {"interface": "public", "region_id": "RegionTwo", "url": "http://b/image"}]},
            {"type": "compute", "endpoints": [
                {"interface": "public", "region_id": "RegionOne", "url": "http://a/compute/v2.1"}]}
        ]))
        .unwrap()
    }

    #[test]
    fn picks_interface_and_region() {
        let c = catalog();
        assert_eq!(c.url("image", "public", None), Some("http://a/image"));
        assert_eq!(
            c.url("image", "public", Some("RegionTwo")),
            Some("http://b/image")
        );
        assert_eq!(
            c.url("image", "internal", None),
            Some("http://internal/image")
        );
        assert_eq!(c.url("image", "admin", None), None);
        assert_eq!(c.url("network", "public", None), None);
        assert_eq!(c.types(), ["image", "compute"]);
    }

    #[test]
    fn appends_versions_only_when_missing() {
        assert_eq!(versioned("http://a/image", "v2"), "http://a/image/v2");
        assert_eq!(versioned("http://a:9292/", "v2"), "http://a:9292/v2");
        assert_eq!(
            versioned("http://a/compute/v2.1", "v2.1"),
            "http://a/compute/v2.1"
        );
        assert_eq!(
            versioned("http://a:9696/v2.0/", "v2.0"),
            "http://a:9696/v2.0"
        );
        assert_eq!(versioned("http://a/volume", "v3"), "http://a/volume/v3");
        assert_eq!(versioned("http://a/v", "v2"), "http://a/v/v2");
        assert_eq!(versioned("http://a/v2.", "v2"), "http://a/v2./v2");
    }
}
