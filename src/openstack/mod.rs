//! OpenStack clients: Keystone (token validation and project look-ups with the service's own
//! credentials) and Glance/Nova/Neutron look-ups made with the caller's token and catalog.

pub mod appcred;
pub mod call;
pub mod catalog;
pub mod keystone;
pub mod lookups;
pub mod session;
pub mod workload;

pub use call::OpenStackError;
pub use catalog::Catalog;
pub use keystone::{Identity, Keystone};
pub use session::UserSession;
