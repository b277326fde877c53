//! The service layer's error: what a use case can fail with, in four classes (a broken API
//! rule, the database, an OpenStack service, the cluster backend) and the service's own faults,
//! each with its cause as its source. The HTTP layer maps it to
//! Magnum's error bodies in one place (`api::error`).

use crate::db::DbError;
use crate::domain::error::DomainError;
use crate::driver::BackendError;
use crate::openstack::OpenStackError;
use crate::seal::SealError;

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
    /// The caller's token could not be sealed for the worker (logged; answered generically).
    #[error("sealing the request's token: {0}")]
    Seal(#[from] SealError),
    /// A response body could not be serialised (logged; answered generically).
    #[error("serialising a response: {0}")]
    Serialize(#[from] serde_json::Error),
    /// A rule of the service itself broken (logged; answered generically).
    #[error("{0}")]
    Invariant(&'static str),
}

/// Results of the service layer (`E` defaults to [`Error`]).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Transactions are opened and committed in the service layer; their errors are database errors.
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Db(DbError::from(e))
    }
}

/// A use case's transaction rolled back on contention may be run again (`db::retry`).
impl crate::db::Contended for Error {
    fn is_contention(&self) -> bool {
        matches!(self, Error::Db(d) if crate::db::Contended::is_contention(d))
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
