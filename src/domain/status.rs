//! Cluster and nodegroup status vocabulary (Heat's 18 values) and which operations each allows.

use std::fmt;
use std::str::FromStr;

/// A cluster or nodegroup status, exactly as Magnum spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    CreateInProgress,
    CreateFailed,
    CreateComplete,
    UpdateInProgress,
    UpdateFailed,
    UpdateComplete,
    DeleteInProgress,
    DeleteFailed,
    DeleteComplete,
    ResumeComplete,
    ResumeFailed,
    RestoreComplete,
    RollbackInProgress,
    RollbackFailed,
    RollbackComplete,
    SnapshotComplete,
    CheckComplete,
    AdoptComplete,
}

use Status::*;

const ALL: [(Status, &str); 18] = [
    (CreateInProgress, "CREATE_IN_PROGRESS"),
    (CreateFailed, "CREATE_FAILED"),
    (CreateComplete, "CREATE_COMPLETE"),
    (UpdateInProgress, "UPDATE_IN_PROGRESS"),
    (UpdateFailed, "UPDATE_FAILED"),
    (UpdateComplete, "UPDATE_COMPLETE"),
    (DeleteInProgress, "DELETE_IN_PROGRESS"),
    (DeleteFailed, "DELETE_FAILED"),
    (DeleteComplete, "DELETE_COMPLETE"),
    (ResumeComplete, "RESUME_COMPLETE"),
    (ResumeFailed, "RESUME_FAILED"),
    (RestoreComplete, "RESTORE_COMPLETE"),
    (RollbackInProgress, "ROLLBACK_IN_PROGRESS"),
    (RollbackFailed, "ROLLBACK_FAILED"),
    (RollbackComplete, "ROLLBACK_COMPLETE"),
    (SnapshotComplete, "SNAPSHOT_COMPLETE"),
    (CheckComplete, "CHECK_COMPLETE"),
    (AdoptComplete, "ADOPT_COMPLETE"),
];

/// Every status name, in Heat's order (the values Magnum's `status` field types accept).
pub const NAMES: [&str; 18] = {
    let mut out = [""; 18];
    let mut i = 0;
    while i < ALL.len() {
        out[i] = ALL[i].1;
        i += 1;
    }
    out
};

impl Status {
    /// Every status name, in Heat's order.
    pub fn all_names() -> impl Iterator<Item = &'static str> {
        ALL.iter().map(|(_, n)| *n)
    }

    pub fn as_str(self) -> &'static str {
        ALL.iter()
            .find(|(s, _)| *s == self)
            .map(|(_, n)| *n)
            .unwrap_or("UNKNOWN")
    }

    /// The eight `*_COMPLETE` statuses from which update, upgrade and CA rotation are accepted.
    pub fn is_stable_complete(self) -> bool {
        matches!(
            self,
            CreateComplete
                | UpdateComplete
                | ResumeComplete
                | RestoreComplete
                | RollbackComplete
                | SnapshotComplete
                | CheckComplete
                | AdoptComplete
        )
    }

    /// Statuses in which a resize is accepted: the stable set plus an update already running or failed
    /// (the cluster autoscaler resizes while an update is in flight).
    pub fn allows_resize(self) -> bool {
        self.is_stable_complete() || matches!(self, UpdateInProgress | UpdateFailed)
    }

    /// Statuses in which a nodegroup update is acted upon.
    pub fn allows_nodegroup_update(self) -> bool {
        self.allows_resize()
    }

    /// The statuses Terraform and the clients treat as failures; only these carry `faults`.
    pub fn is_failed(self) -> bool {
        matches!(
            self,
            CreateFailed | UpdateFailed | DeleteFailed | RollbackFailed | ResumeFailed
        )
    }

    pub fn is_in_progress(self) -> bool {
        matches!(
            self,
            CreateInProgress | UpdateInProgress | DeleteInProgress | RollbackInProgress
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the 18 statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status {0}")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL.iter()
            .find(|(_, n)| *n == s)
            .map(|(st, _)| *st)
            .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

/// Cluster `health_status` values.
pub const HEALTH_STATUSES: [&str; 3] = ["HEALTHY", "UNHEALTHY", "UNKNOWN"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_name() {
        for (status, name) in ALL {
            assert_eq!(status.as_str(), name);
            assert_eq!(name.parse::<Status>(), Ok(status));
        }
        assert!("create_complete".parse::<Status>().is_err());
    }

    #[test]
    fn resize_is_allowed_while_an_update_runs_but_upgrade_is_not() {
        assert!(UpdateInProgress.allows_resize());
        assert!(!UpdateInProgress.is_stable_complete());
        assert!(CheckComplete.is_stable_complete());
        assert!(!CreateInProgress.allows_resize());
    }

    #[test]
    fn exactly_five_statuses_are_failures() {
        assert_eq!(ALL.iter().filter(|(s, _)| s.is_failed()).count(), 5);
    }
}
