//! The object store behind the simulated API server: every object in memory, one global
//! resourceVersion counter, Kubernetes write semantics (metadata, `/status` subresource,
//! finalizers, ownerReference garbage collection), a bounded event history and a broadcast of
//! changes that watchers and the CAPI/CAPO simulator subscribe to.
//!
//! `state` owns the `Store` itself, its indexes (`Inner`) and the reads; the vocabulary of
//! the API is in `types`, metadata rules in `meta`, create/update/patch in `write`, field sets
//! in `fields` and their ownership (`managedFields`, server-side apply) in `managed`, deletion
//! and garbage collection in `delete`, change events in `event`, the event history and watches
//! in `watch`. This file only declares and re-exports.

mod delete;
mod event;
mod fields;
mod managed;
mod meta;
mod state;
mod types;
mod watch;
mod write;

pub use delete::FOREGROUND_FINALIZER;
pub use event::{Event, EventType, watch_line};
pub use meta::{add_finalizer, has_finalizer, remove_finalizer};
pub use meta::{now_rfc3339, random_suffix};
pub use state::Store;
pub use types::{
    Admission, FieldError, FieldManager, ObjectKey, Patch, Propagation, Resource, StoreError,
    StoreOptions, Target, Validator,
};
pub use watch::WatchStart;

/// What the unit tests of the submodules share.
#[cfg(test)]
mod fixtures {
    use serde_json::{Value, json};

    use super::{Resource, Store, StoreOptions};

    pub(super) fn store() -> Store {
        Store::new(StoreOptions::default())
    }

    pub(super) fn cr(name: &str) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}},
               "spec": {"size": 1}, "status": {"ready": true}})
    }

    pub(super) fn widgets() -> Resource {
        Resource::new("example.com", "widgets")
    }
}
