//! Watches: the bounded history they resume from (410 `Expired` beyond it), the broadcast
//! every change is sent on, and starting a watch.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::event::{Event, EventType};
use super::state::{Inner, Store};
use super::types::{ObjectKey, Resource, StoreError};
use crate::simkube::selector::Selector;

/// What a watch starts from, taken atomically with its subscription.
#[derive(Debug)]
pub struct WatchStart {
    /// Current objects (watch without a resourceVersion): sent as synthetic `ADDED`.
    pub snapshot: Vec<Arc<Value>>,
    /// Events after the requested resourceVersion still in the history (all resources).
    pub replay: Vec<Arc<Event>>,
    pub receiver: broadcast::Receiver<Arc<Event>>,
    /// The store's resourceVersion when the watch started.
    pub resource_version: u64,
}

impl Store {
    /// Subscribe to every future change (the simulator's feed).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Starts a watch atomically: subscribes and takes either the current objects
    /// (`from = None`) or the history after `from` (410 `Expired` when it is gone).
    pub fn watch(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        from: Option<u64>,
        labels: &Selector,
        fields: &Selector,
    ) -> Result<WatchStart, StoreError> {
        let inner = self.read();
        let receiver = self.tx.subscribe();
        let (snapshot, replay) = match from {
            None => (
                Self::scan(&inner, res, namespace)
                    .filter(|o| labels.matches_labels(o) && fields.matches_fields(o))
                    .cloned()
                    .collect(),
                Vec::new(),
            ),
            Some(rv) => (Vec::new(), Self::history_after(&inner, rv)?),
        };
        Ok(WatchStart {
            snapshot,
            replay,
            receiver,
            resource_version: inner.rv,
        })
    }

    /// Events after `rv` (all resources), or 410 `Expired` when some were dropped.
    pub fn events_after(&self, rv: u64) -> Result<Vec<Arc<Event>>, StoreError> {
        Self::history_after(&self.read(), rv)
    }

    fn history_after(inner: &Inner, rv: u64) -> Result<Vec<Arc<Event>>, StoreError> {
        if rv < inner.floor {
            return Err(StoreError::Expired(format!(
                "too old resource version: {rv} ({})",
                inner.floor + 1
            )));
        }
        let start = inner.history.partition_point(|e| e.resource_version <= rv);
        Ok(inner.history.range(start..).cloned().collect())
    }

    pub(super) fn emit(
        &self,
        inner: &mut Inner,
        rv: u64,
        event_type: EventType,
        key: ObjectKey,
        obj: Arc<Value>,
        old: Option<Arc<Value>>,
    ) {
        let event = Arc::new(Event::new(rv, event_type, key, obj, old));
        if self.opts.history > 0 {
            inner.history.push_back(event.clone());
            while inner.history.len() > self.opts.history {
                if let Some(e) = inner.history.pop_front() {
                    inner.floor = e.resource_version;
                }
            }
        } else {
            inner.floor = rv;
        }
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simkube::store::StoreOptions;
    use crate::simkube::store::fixtures::{cr, widgets};

    #[test]
    fn history_is_bounded_and_old_versions_expire() {
        let s = Store::new(StoreOptions {
            history: 3,
            ..StoreOptions::default()
        });
        for i in 0..5 {
            s.create(&widgets(), "default", cr(&format!("w{i}")))
                .unwrap();
        }
        let rv = s.resource_version();
        assert_eq!(s.events_after(rv - 3).unwrap().len(), 3);
        assert_eq!(s.events_after(rv - 4).unwrap_err().code(), 410);
    }
}
