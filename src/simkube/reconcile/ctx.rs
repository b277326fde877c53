//! The reconcile context (`Ctx`: the store, this step's failure markers, the simulator around
//! the controllers) and the condition helpers several controllers share.

use std::sync::Arc;

use serde_json::Value;

use crate::simkube::objects::*;
use crate::simkube::simulation::Simulation;
use crate::simkube::store::{ObjectKey, Store, StoreError, Target};

/// What a reconcile needs: the store, the failure markers of this step, the simulator's
/// index and address pools.
pub(crate) struct Ctx<'a> {
    pub sim: &'a dyn Simulation,
    pub store: &'a Store,
    pub markers: &'a [String],
}

impl Ctx<'_> {
    pub(super) fn fails(&self, text: &str) -> bool {
        self.markers
            .iter()
            .any(|m| !m.is_empty() && text.contains(m.as_str()))
    }

    pub(super) fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.store.get(&kind.resource(), ns, name)
    }

    pub(super) fn set_status(
        &self,
        kind: Kind,
        obj: &Value,
        status: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.store.update(
            &kind.resource(),
            namespace(obj),
            name(obj),
            Target::Status,
            move |o| {
                if let Some(m) = o.as_object_mut() {
                    m.insert("status".into(), status);
                }
            },
        )
    }

    pub(super) fn edit(
        &self,
        kind: Kind,
        obj: &Value,
        f: impl FnOnce(&mut Value),
    ) -> Result<Arc<Value>, StoreError> {
        self.store
            .update(&kind.resource(), namespace(obj), name(obj), Target::Main, f)
    }

    pub(super) fn delete(&self, key: &ObjectKey) -> Result<(), StoreError> {
        match self.store.delete(&key.resource, &key.namespace, &key.name) {
            Ok(_) | Err(StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The `* Type: message` lines of the conditions among `conds` that are not True, as an
/// aggregate condition's message lists them.
pub(super) fn failed_condition_message(conds: &[&Cond]) -> String {
    conds
        .iter()
        .filter(|c| c.status != CondStatus::True)
        .map(|c| {
            if c.message.is_empty() {
                format!("* {}: {}", c.kind, c.reason)
            } else {
                format!("* {}: {}", c.kind, c.message.replace('\n', "\n  "))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The message of a Machine's condition `kind` when its reason is one of `reasons`.
pub(super) fn failure_message(m: &Value, kind: &str, reasons: &[&str]) -> Option<String> {
    let c = condition(m, kind)?;
    if !reasons.contains(&c.get("reason")?.as_str()?) {
        return None;
    }
    c.get("message")?.as_str().map(str::to_string)
}
