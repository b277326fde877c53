//! The simulated management cluster's answer to `SelfSubjectAccessReview` (what `magnum-capi
//! check` asks before trusting its RBAC): its one identity is the admin, allowed everything
//! except what a test denied ([`Denials`], `SimCluster::deny`). A denial changes the review's
//! answer only; requests are not refused by it.

use std::sync::Mutex;

use serde_json::{Value, json};

use super::store::StoreError;

/// `(group, resource, verb)` a review answers "denied" for.
#[derive(Debug, Default)]
pub struct Denials(Mutex<Vec<(String, String, String)>>);

impl Denials {
    /// From now on reviews of `verb` on `resource` of API group `group` (`""`: core) answer
    /// denied, whatever namespace or name they ask about.
    pub fn deny(&self, group: &str, resource: &str, verb: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push((
            group.into(),
            resource.into(),
            verb.into(),
        ));
    }

    fn denies(&self, group: &str, resource: &str, verb: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|(g, r, v)| g == group && r == resource && v == verb)
    }
}

/// The review `asked` with its `status` filled in, as kube-apiserver answers a create of a
/// `SelfSubjectAccessReview` (nothing is stored).
pub(crate) fn review(denials: &Denials, asked: &Value) -> Result<Value, StoreError> {
    let Some(attrs) = asked.pointer("/spec/resourceAttributes") else {
        // Non-resource URLs: the service asks about none; the admin may.
        return Ok(answered(asked, true));
    };
    let field = |k: &str| attrs.get(k).and_then(Value::as_str).unwrap_or_default();
    if field("verb").is_empty() || field("resource").is_empty() {
        return Err(StoreError::BadRequest(
            "spec.resourceAttributes needs a verb and a resource".into(),
        ));
    }
    let denied = denials.denies(field("group"), field("resource"), field("verb"));
    Ok(answered(asked, !denied))
}

fn answered(asked: &Value, allowed: bool) -> Value {
    let mut out = asked.clone();
    out["apiVersion"] = json!("authorization.k8s.io/v1");
    out["kind"] = json!("SelfSubjectAccessReview");
    out["status"] = if allowed {
        json!({"allowed": true, "reason": "the simulated management cluster's admin"})
    } else {
        json!({"allowed": false, "denied": true, "reason": "denied by the test (SimCluster::deny)"})
    };
    out
}
