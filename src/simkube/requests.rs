//! What the simulated management cluster was asked: every request its own API server answers,
//! counted by verb and resource (`SimCluster::requests`), so tests and benches can state what an
//! operation or an idle hour costs the management cluster. Requests to the simulated workload
//! clusters (under `/workload/…` or at their own endpoints) are other API servers' and are not
//! counted.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;

/// The Kubernetes verb of a request, as kube-apiserver's audit log names them (plus discovery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// `/api`, `/apis`, `/version`, health and resource lists.
    Discovery,
    Get,
    List,
    Watch,
    Create,
    Update,
    /// A JSON or merge patch.
    Patch,
    /// A server-side apply (`application/apply-patch+yaml`).
    Apply,
    Delete,
    DeleteCollection,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Discovery => "discovery",
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Apply => "apply",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// One counted kind of request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestKey {
    pub verb: Verb,
    /// The resource's plural with its group (`machines.cluster.x-k8s.io`, `secrets`), or the
    /// path for discovery.
    pub resource: String,
}

/// The live counters. A mutex'd map: one short lock per request, nothing on the object path.
#[derive(Debug, Default)]
pub(crate) struct Requests(Mutex<HashMap<RequestKey, u64>>);

impl Requests {
    pub(crate) fn count(&self, key: RequestKey) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
    }

    pub(crate) fn snapshot(&self) -> RequestCounts {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        RequestCounts(map.iter().map(|(k, v)| (k.clone(), *v)).collect())
    }
}

/// The requests counted up to a moment; subtract an earlier snapshot with [`since`](Self::since).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts(pub BTreeMap<RequestKey, u64>);

impl RequestCounts {
    /// What was counted after `earlier` (a snapshot of the same cluster taken before).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts(
            self.0
                .iter()
                .filter_map(|(k, v)| {
                    let d = v.saturating_sub(earlier.0.get(k).copied().unwrap_or(0));
                    (d > 0).then(|| (k.clone(), d))
                })
                .collect(),
        )
    }

    /// How many requests `keep` accepts.
    pub fn count(&self, keep: impl Fn(&RequestKey) -> bool) -> u64 {
        self.0.iter().filter(|(k, _)| keep(k)).map(|(_, v)| v).sum()
    }

    /// Every request counted.
    pub fn total(&self) -> u64 {
        self.count(|_| true)
    }
}

/// `list machines.cluster.x-k8s.io ×3, …` — one entry per key.
impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {} ×{v}", k.verb.as_str(), k.resource)?;
        }
        Ok(())
    }
}
