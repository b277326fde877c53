//! Change events: one change of one object, its type and its watch-stream line.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use super::types::ObjectKey;

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object; every change bumps the global resourceVersion by exactly one.
#[derive(Debug)]
pub struct Event {
    pub resource_version: u64,
    pub event_type: EventType,
    pub key: ObjectKey,
    pub object: Arc<Value>,
    /// The previous state, for `MODIFIED` (lets label-selected watches see objects enter and
    /// leave the selection).
    pub old: Option<Arc<Value>>,
    line: OnceLock<Bytes>,
}

impl Event {
    pub(super) fn new(
        resource_version: u64,
        event_type: EventType,
        key: ObjectKey,
        object: Arc<Value>,
        old: Option<Arc<Value>>,
    ) -> Self {
        Event {
            resource_version,
            event_type,
            key,
            object,
            old,
            line: OnceLock::new(),
        }
    }

    /// The newline-terminated watch-stream line, serialised once however many watchers send it.
    pub fn line(&self) -> Bytes {
        self.line
            .get_or_init(|| watch_line(self.event_type.as_str(), &self.object))
            .clone()
    }
}

/// `{"type":…,"object":…}\n` without copying the object into a new `Value`.
pub fn watch_line(event_type: &str, object: &Value) -> Bytes {
    let body = serde_json::to_string(object).unwrap_or_else(|_| "{}".to_string());
    Bytes::from(format!("{{\"type\":\"{event_type}\",\"object\":{body}}}\n"))
}
