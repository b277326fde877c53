//! The kinds of recorded cluster operations, the status each one fails into, and the retry
//! backoff of the operation queue: the vocabulary the service, the worker and the drivers share.

use std::fmt;
use std::str::FromStr;

use super::status::Status;

/// A kind of recorded cluster operation, stored in `operation.kind` by its [`as_str`] name.
///
/// [`as_str`]: OperationKind::as_str
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    Create,
    Delete,
    Resize,
    Upgrade,
    NodegroupCreate,
    NodegroupUpdate,
    NodegroupDelete,
    RotateCa,
    RotateCredential,
}

impl OperationKind {
    pub const ALL: [OperationKind; 9] = [
        OperationKind::Create,
        OperationKind::Delete,
        OperationKind::Resize,
        OperationKind::Upgrade,
        OperationKind::NodegroupCreate,
        OperationKind::NodegroupUpdate,
        OperationKind::NodegroupDelete,
        OperationKind::RotateCa,
        OperationKind::RotateCredential,
    ];

    /// The name stored in Postgres.
    pub const fn as_str(self) -> &'static str {
        match self {
            OperationKind::Create => "cluster_create",
            OperationKind::Delete => "cluster_delete",
            OperationKind::Resize => "cluster_resize",
            OperationKind::Upgrade => "cluster_upgrade",
            OperationKind::NodegroupCreate => "nodegroup_create",
            OperationKind::NodegroupUpdate => "nodegroup_update",
            OperationKind::NodegroupDelete => "nodegroup_delete",
            OperationKind::RotateCa => "rotate_ca",
            OperationKind::RotateCredential => "rotate_credential",
        }
    }

    /// The status the cluster shows while the operation runs (what a step's progress is
    /// written under).
    pub const fn in_progress_status(self) -> Status {
        match self {
            OperationKind::Create => Status::CreateInProgress,
            OperationKind::Delete => Status::DeleteInProgress,
            _ => Status::UpdateInProgress,
        }
    }

    /// The status the cluster (and the operation's nodegroup) gets when the operation is given up.
    pub const fn failed_status(self) -> Status {
        match self {
            OperationKind::Create => Status::CreateFailed,
            OperationKind::Delete => Status::DeleteFailed,
            _ => Status::UpdateFailed,
        }
    }

    /// Whether a failure of this kind stands until the next operation: CAPI converging again
    /// does not undo it (a credential or CA rotation that failed did not happen; an upgrade
    /// that failed did not roll the add-ons after the one that failed it — its retry does).
    pub const fn failure_is_final(self) -> bool {
        matches!(
            self,
            OperationKind::RotateCredential | OperationKind::RotateCa | OperationKind::Upgrade
        )
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operation kind this version does not know (a row written by a newer replica).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown operation kind {0:?}")]
pub struct UnknownKind(pub String);

impl FromStr for OperationKind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_string()))
    }
}

/// Delay before attempt `attempts + 1`: base · 2^(attempts-1), capped at 5 minutes.
pub fn backoff_ms(base_ms: i64, attempts: i32) -> i64 {
    let exp = u32::try_from(attempts.saturating_sub(1).clamp(0, 16)).unwrap_or(16);
    base_ms.saturating_mul(1i64 << exp).min(300_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff_ms(1000, 1), 1000);
        assert_eq!(backoff_ms(1000, 2), 2000);
        assert_eq!(backoff_ms(1000, 4), 8000);
        assert_eq!(backoff_ms(1000, 40), 300_000);
    }

    #[test]
    fn given_up_operations_fail_their_action() {
        assert_eq!(OperationKind::Create.failed_status(), Status::CreateFailed);
        assert_eq!(OperationKind::Delete.failed_status(), Status::DeleteFailed);
        assert_eq!(OperationKind::Resize.failed_status(), Status::UpdateFailed);
    }

    #[test]
    fn stored_names_round_trip() {
        for k in OperationKind::ALL {
            assert_eq!(k.as_str().parse::<OperationKind>(), Ok(k));
        }
        assert!("cluster_explode".parse::<OperationKind>().is_err());
    }
}
