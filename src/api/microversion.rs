//! API microversions: parsing `OpenStack-API-Version`, the supported range, the response headers.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};

use super::error::ApiError;

pub use crate::domain::version::{MAX_VERSION, MIN_VERSION, SERVICE_TYPE, Version};
/// Header names.
pub const HEADER: &str = "openstack-api-version";
const SERVICES: [&str; 3] = [
    "container-infrastructure-management",
    "container-infrastructure",
    "container-infra",
];

/// Why a version header was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionError {
    /// Malformed: wrong token count, unknown service, or not `int.int` (pecan-level 406).
    Malformed(&'static str),
    /// Well-formed but outside [MIN, MAX] (the `microversion-unsupported` 406).
    Unsupported(Version),
}

/// Parses the header value as Magnum does: no header → 1.1; `<anything> latest` → max.
pub fn parse(value: Option<&str>) -> Result<Version, VersionError> {
    let Some(value) = value else {
        return Ok(MIN_VERSION);
    };
    let tokens: Vec<&str> = value.split_whitespace().collect();
    if tokens.len() != 2 {
        return Err(VersionError::Malformed(
            "Invalid service type for OpenStack-API-Version header",
        ));
    }
    if tokens[1].eq_ignore_ascii_case("latest") {
        return Ok(MAX_VERSION);
    }
    if !SERVICES.contains(&tokens[0].to_ascii_lowercase().as_str()) {
        return Err(VersionError::Malformed(
            "Invalid service type for OpenStack-API-Version header",
        ));
    }
    let invalid = VersionError::Malformed("Invalid value for OpenStack-API-Version header");
    let (maj, min) = tokens[1].split_once('.').ok_or(invalid.clone())?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(maj) || !digits(min) {
        return Err(invalid);
    }
    let v = Version::new(
        maj.parse().map_err(|_| invalid.clone())?,
        min.parse().map_err(|_| invalid.clone())?,
    );
    if v < MIN_VERSION || v > MAX_VERSION {
        return Err(VersionError::Unsupported(v));
    }
    Ok(v)
}

/// Reads the version from request headers.
pub fn from_headers(headers: &HeaderMap) -> Result<Version, VersionError> {
    match headers.get(HEADER) {
        None => parse(None),
        Some(v) => match v.to_str() {
            Ok(s) => parse(Some(s)),
            Err(_) => Err(VersionError::Malformed(
                "Invalid value for OpenStack-API-Version header",
            )),
        },
    }
}

/// Adds Magnum's four version headers, naming `requested`.
pub fn add_headers(headers: &mut HeaderMap, requested: Version) {
    let pairs = [
        (
            "openstack-api-minimum-version",
            format!("{SERVICE_TYPE} {MIN_VERSION}"),
        ),
        (
            "openstack-api-maximum-version",
            format!("{SERVICE_TYPE} {MAX_VERSION}"),
        ),
        (HEADER, format!("{SERVICE_TYPE} {requested}")),
        // Magnum's spelling of the header name.
        ("vary", "OpenStack-API-Version".to_string()),
    ];
    for (name, value) in pairs {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
}

/// The resolved version of this request (the version layer put it in the extensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mv(pub Version);

impl Mv {
    /// 406 unless the request's version is at least `1.minor`; `api` names the method as Magnum does.
    pub fn require(self, minor: u32, api: &str) -> Result<(), ApiError> {
        if self.0.at_least(minor) {
            Ok(())
        } else {
            Err(ApiError::NotAcceptable(format!(
                "Version {} was requested but the requested API {api} is not supported for this version.",
                self.0
            )))
        }
    }
    pub fn at_least(self, minor: u32) -> bool {
        self.0.at_least(minor)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Mv {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Mv>()
            .copied()
            .unwrap_or(Mv(MIN_VERSION)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_header_is_the_minimum_and_latest_is_the_maximum() {
        assert_eq!(parse(None), Ok(MIN_VERSION));
        assert_eq!(parse(Some("container-infra latest")), Ok(MAX_VERSION));
        assert_eq!(parse(Some("magnum LATEST")), Ok(MAX_VERSION));
        assert_eq!(parse(Some("container-infra 1.10")), Ok(Version::new(1, 10)));
        assert_eq!(
            parse(Some("Container-Infrastructure-Management 1.9")),
            Ok(Version::new(1, 9))
        );
    }

    #[test]
    fn malformed_headers_are_pecan_406() {
        assert!(
            matches!(parse(Some("1.2")), Err(VersionError::Malformed(m)) if m.starts_with("Invalid service type"))
        );
        assert!(
            matches!(parse(Some("compute 1.2")), Err(VersionError::Malformed(m)) if m.starts_with("Invalid service type"))
        );
        assert!(
            matches!(parse(Some("container-infra abc")), Err(VersionError::Malformed(m)) if m.starts_with("Invalid value"))
        );
        assert!(matches!(
            parse(Some("container-infra 1.-1")),
            Err(VersionError::Malformed(_))
        ));
        assert!(matches!(
            parse(Some("container-infra 99999999999999999999.1")),
            Err(VersionError::Malformed(_))
        ));
    }

    #[test]
    fn out_of_range_is_unsupported() {
        assert_eq!(
            parse(Some("container-infra 1.15")),
            Err(VersionError::Unsupported(Version::new(1, 15)))
        );
        assert_eq!(
            parse(Some("container-infra 1.0")),
            Err(VersionError::Unsupported(Version::new(1, 0)))
        );
        assert_eq!(
            parse(Some("container-infra 9.99")),
            Err(VersionError::Unsupported(Version::new(9, 99)))
        );
    }

    proptest::proptest! {
        #[test]
        fn any_header_value_parses_or_is_refused_without_panicking(s in "\\PC*") {
            let _ = parse(Some(&s));
        }
        #[test]
        fn versions_in_range_round_trip(minor in 1u32..=14) {
            let header = format!("container-infra 1.{minor}");
            proptest::prop_assert_eq!(parse(Some(&header)), Ok(Version::new(1, minor)));
        }
    }
}
