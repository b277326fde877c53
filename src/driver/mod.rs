//! Drivers execute recorded cluster operations. This module holds the contract between the
//! operation queue and a driver; `simulated` is the driver that needs no infrastructure.

pub mod simulated;

use std::future::Future;
use std::pin::Pin;

use sqlx::PgPool;

use crate::db::operations::OperationRow;

/// How executing an operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// Worth retrying (backend unreachable, conflict, timeout).
    #[error("{0}")]
    Transient(String),
    /// Retrying cannot help (invalid spec, quota refused by the cloud).
    #[error("{0}")]
    Permanent(String),
}

pub type DriverFuture<'a> = Pin<Box<dyn Future<Output = Result<(), DriverError>> + Send + 'a>>;

/// Executes one claimed operation. Implementations must be idempotent: an operation whose
/// replica died mid-way is executed again. On success the driver has written the resulting
/// statuses; on a final failure the queue marks the resources `*_FAILED`.
pub trait Driver: Send + Sync {
    fn name(&self) -> &'static str;
    fn execute<'a>(&'a self, pool: &'a PgPool, op: &'a OperationRow) -> DriverFuture<'a>;
    /// Called once the queue has recorded the operation as done (e.g. to re-evaluate statuses
    /// that waited for it).
    fn finished(&self, _op: &OperationRow) {}
}
