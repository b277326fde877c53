//! What both CAPI benches (`capi`, on the simulator; `capi_real`, on the real kube-apiserver)
//! report of the requests the service sends the management cluster: the reachability probe told
//! apart, and one summary by verb per operation; and the percentiles and RSS they print.

use std::time::Duration;

use magnum_capi::simkube::requests::{RequestCounts, RequestKey, Verb};

/// The reachability probe (`GET /version` every `[capi] probe_interval_secs`): a cost of the
/// management cluster, not of its clusters, reported apart.
pub fn is_probe(k: &RequestKey) -> bool {
    k.verb == Verb::Discovery && k.resource == "/version"
}

/// `n (writes …, lists …, gets …, watches …; ops operations, reachability probe aside)`: the
/// requests of `counts` per operation of `ops`.
pub fn per_op(counts: &RequestCounts, ops: usize) -> String {
    let all = counts.count(|k| !is_probe(k)) as f64 / ops as f64;
    let by = |v: &[Verb]| counts.count(|k| v.contains(&k.verb)) as f64 / ops as f64;
    format!(
        "{all:.1} (writes {:.1}, lists {:.1}, gets {:.1}, watches {:.1}; {ops} operations, reachability probe aside)",
        by(&[
            Verb::Apply,
            Verb::Create,
            Verb::Update,
            Verb::Patch,
            Verb::Delete,
            Verb::DeleteCollection
        ]),
        by(&[Verb::List]),
        by(&[Verb::Get]),
        by(&[Verb::Watch]),
    )
}

/// The `p` quantile of `v` (sorted here); zero when empty.
pub fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

/// VmRSS of process `pid` (`self`: this one), MiB.
pub fn rss_mib(pid: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}
