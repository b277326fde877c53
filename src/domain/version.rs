//! API microversions as values: the `major.minor` version a request asked for and the range
//! this service supports (parsing the header is the HTTP layer's).

use std::fmt;

/// A `major.minor` API version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }
    /// At least `1.minor`.
    pub fn at_least(self, minor: u32) -> bool {
        self >= Version::new(1, minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The service type the version headers name (`OpenStack-API-Version: <type> <version>`).
pub const SERVICE_TYPE: &str = "container-infrastructure-management";

pub const MIN_VERSION: Version = Version::new(1, 1);
/// What Magnum 23.0.0 advertises.
pub const MAX_VERSION: Version = Version::new(1, 14);
