//! Whether a management cluster's API answers: the last probe's outcome, shared by the driver
//! (operations wait instead of failing), the fleet's prober and the status writer.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Whether a management cluster's API answered its last probe.
#[derive(Debug, Default)]
pub struct Reach {
    down: Mutex<Option<(String, Instant)>>,
    /// Signalled when reachability changes, so the status writer (which otherwise sleeps until
    /// an event) records it at once.
    changed: tokio::sync::Notify,
}

impl Reach {
    /// Why it is unreachable and for how long, or `None` when it answered last.
    pub fn down(&self) -> Option<(String, Duration)> {
        self.down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(why, since)| (why.clone(), since.elapsed()))
    }

    /// Waits until reachability changes (a change before the call counts once).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Records a probe's outcome; true when reachability changed.
    pub fn record(&self, outcome: Result<(), String>) -> bool {
        let changed = self.update(outcome);
        if changed {
            self.changed.notify_one();
        }
        changed
    }

    fn update(&self, outcome: Result<(), String>) -> bool {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        match (outcome, down.as_mut()) {
            (Ok(()), None) => false,
            (Ok(()), Some(_)) => {
                *down = None;
                true
            }
            (Err(why), Some((was, _))) => {
                *was = why;
                false
            }
            (Err(why), None) => {
                *down = Some((why, Instant::now()));
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reach_records_changes_and_keeps_the_first_failure_time() {
        let r = Reach::default();
        assert!(r.down().is_none());
        assert!(!r.record(Ok(())));
        assert!(r.record(Err("refused".into())));
        assert!(!r.record(Err("timeout".into())));
        assert_eq!(r.down().map(|d| d.0), Some("timeout".into()));
        assert!(r.record(Ok(())));
        assert!(r.down().is_none());
    }
}
