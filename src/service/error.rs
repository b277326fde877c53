//! The service layer's error: what a use case can fail with, in four classes (a broken API
//! rule, the database, an OpenStack service, the cluster backend). The HTTP layer maps it to
//! Magnum's error bodies in one place (`api::error`).

use crate::db::DbError;
use crate::domain::error::DomainError;
use crate::driver::BackendError;
use crate::openstack::OpenStackError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rule of the Magnum API (bad input, policy, not found, conflict).
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Db(#[from] DbError),
    /// Keystone, Glance, Nova or Neutron failed in a way the use case gave no meaning of its own.
    #[error(transparent)]
    OpenStack(#[from] OpenStackError),
    /// The cluster backend (management cluster) failed at request time.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The service's own fault (logged; answered generically).
    #[error("{0}")]
    Internal(String),
}

/// Results of the service layer (`E` defaults to [`Error`]).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Transactions are opened and committed in the service layer; their errors are database errors.
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Db(DbError::from(e))
    }
}

impl Error {
    /// The domain error this is, if it is one (e.g. to turn a 404 into a 400 where Magnum does).
    pub fn as_domain(&self) -> Option<&DomainError> {
        match self {
            Error::Domain(d) => Some(d),
            _ => None,
        }
    }
}
