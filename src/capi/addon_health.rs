//! Add-on health (pure): what one CAAPH `HelmReleaseProxy` says about its add-on — ready, still
//! in progress (installing, upgrading, waiting for the control plane, uninstalling) or failed —
//! and the cluster's `addon.<add-on>` entries of `health_status_reason` from them, for
//! `status::health`. An add-on in progress is not a failure; one in progress for longer than
//! `[capi] addon_install_timeout_secs` is.
//!
//! CAAPH v0.6 writes `metav1.Condition`s (no severity): `HelmReleaseReady` (reasons
//! `PreparingToHelmInstall` and `HelmReleasePending` while Helm works, `HelmInstallOrUpgradeFailed`,
//! `HelmReleaseGetFailed`, `HelmReleaseDeletionFailed` when it failed, `HelmReleaseDeleted`),
//! `ClusterAvailable` (`NotAvailable` while the Cluster says its control plane is not initialised;
//! `GetClusterFailed`, `GetKubeconfigFailed`, `GetCredentialsFailed`, `GetCACertificateFailed`),
//! and `Ready`, their summary (`IssuesReported` as soon as either is `False`, in progress or not,
//! which is why `Ready=False` alone says nothing). Conditions in CAPI's v1beta1 shape carry a
//! `severity`: `Info` is in progress, `Warning`/`Error` a failure; that is honoured when present.
//!
//! What the real CAAPH does while a cluster is created (`tests/it/realstack_addons.rs`): it makes
//! the release proxies as soon as the Cluster exists, says `PreparingToHelmInstall`, and, until
//! KCP has written the `<cluster>-kubeconfig` Secret, `ClusterAvailable=False` with
//! `GetKubeconfigFailed` ("… Secret "<cluster>-kubeconfig" not found"), not `NotAvailable`; once
//! the Secret is there it runs Helm at once, and until the workload API answers Helm fails with
//! `HelmInstallOrUpgradeFailed` "Kubernetes cluster unreachable: …" (CAAPH retries). Both are the
//! cluster still coming up, not a broken add-on: in progress, "waiting for the cluster", bounded by
//! the timeout (and the API's own state is the reason's `api`). A kubeconfig that is there and
//! cannot be used, or any other Helm error, is a failure.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// `HelmReleaseReady`'s reasons that mean Helm or CAAPH failed (CAAPH v0.6).
const FAILED_REASONS: [&str; 7] = [
    "HelmInstallOrUpgradeFailed",
    "HelmReleaseGetFailed",
    "HelmReleaseDeletionFailed",
    "GetClusterFailed",
    "GetKubeconfigFailed",
    "GetCredentialsFailed",
    "GetCACertificateFailed",
];

/// What one release proxy says about its add-on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddonState {
    Ready,
    /// Helm (or CAAPH, waiting for the cluster) is working on it: `what` it does (`installing`,
    /// `upgrading`, …), CAAPH's message, and since when (`None`: unknown).
    InProgress {
        what: String,
        message: Option<String>,
        since: Option<DateTime<Utc>>,
    },
    /// CAAPH reported a failure: its message (or reason).
    Failed(String),
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn condition<'a>(hrp: &'a Value, t: &str) -> Option<&'a Value> {
    hrp.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| s(c, "/type") == Some(t))
}

fn time(v: &Value, ptr: &str) -> Option<DateTime<Utc>> {
    s(v, ptr)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// The condition's message, else its reason.
fn text(c: &Value) -> String {
    s(c, "/message")
        .filter(|m| !m.is_empty())
        .or_else(|| s(c, "/reason"))
        .unwrap_or("Unknown")
        .to_string()
}

/// CAAPH cannot reach the workload cluster yet: its `GetKubeconfigFailed` for a kubeconfig Secret
/// that does not exist yet, or Helm's "Kubernetes cluster unreachable" (its check of the API
/// before it installs or upgrades) — what it says of every add-on of a cluster coming up.
fn cluster_not_reachable_yet(c: &Value) -> bool {
    let message = s(c, "/message").unwrap_or_default();
    match s(c, "/reason") {
        Some("GetKubeconfigFailed") => {
            message.contains("kubeconfig") && message.contains("not found")
        }
        Some("HelmInstallOrUpgradeFailed") => message.starts_with("Kubernetes cluster unreachable"),
        _ => false,
    }
}

/// A `False` condition that reports a failure: by severity where the condition has one (CAPI's
/// v1beta1 shape), else by CAAPH's failure reasons (but for a cluster not reachable yet).
fn is_failure(c: &Value) -> bool {
    if s(c, "/status") != Some("False") {
        return false;
    }
    match s(c, "/severity") {
        Some("Info") => false,
        Some("Warning" | "Error") => true,
        _ => {
            s(c, "/reason").is_some_and(|r| FAILED_REASONS.contains(&r))
                && !cluster_not_reachable_yet(c)
        }
    }
}

/// What Helm is doing, from the release's status (`pending-upgrade`, …) or the condition.
fn activity(hrp: &Value, c: Option<&Value>) -> String {
    let release = s(hrp, "/status/status").unwrap_or_default();
    let message = c.and_then(|c| s(c, "/message")).unwrap_or_default();
    let reason = c.and_then(|c| s(c, "/reason")).unwrap_or_default();
    let says = |w: &str| release == w || message.contains(w);
    if says("pending-upgrade") {
        "upgrading"
    } else if says("pending-rollback") {
        "rolling back"
    } else if says("uninstalling") || reason == "HelmReleaseDeleted" {
        "uninstalling"
    } else if s(c.unwrap_or(&Value::Null), "/type") == Some("ClusterAvailable")
        || c.is_some_and(cluster_not_reachable_yet)
    {
        "waiting for the cluster"
    } else {
        "installing"
    }
    .to_string()
}

/// What a HelmReleaseProxy says about its add-on.
pub fn assess(hrp: &Value) -> AddonState {
    let release = condition(hrp, "HelmReleaseReady");
    let cluster = condition(hrp, "ClusterAvailable");
    let ready = condition(hrp, "Ready");
    let is_true = |c: Option<&Value>| c.and_then(|c| s(c, "/status")) == Some("True");
    let deleting = hrp.pointer("/metadata/deletionTimestamp").is_some();
    if !deleting && (is_true(release) || (release.is_none() && is_true(ready))) {
        return AddonState::Ready;
    }
    // The summary speaks only when the conditions it summarises are absent (other shapes).
    let summary = (release.is_none() && cluster.is_none())
        .then_some(ready)
        .flatten();
    if let Some(f) = [release, cluster, summary]
        .into_iter()
        .flatten()
        .find(|c| is_failure(c))
    {
        return AddonState::Failed(text(f));
    }
    // The cluster not reachable yet says more than Helm's "preparing" that comes with it.
    let working = [cluster, release, summary]
        .into_iter()
        .flatten()
        .find(|c| s(c, "/status") != Some("True"));
    // Since Helm started on it: `HelmReleaseReady` turned False then (an upgrade of a deployed
    // release) or when CAAPH first reported; else since the proxy exists.
    let since = release
        .filter(|c| s(c, "/status") != Some("True"))
        .and_then(|c| time(c, "/lastTransitionTime"))
        .or_else(|| time(hrp, "/metadata/creationTimestamp"));
    AddonState::InProgress {
        what: if deleting {
            "uninstalling".into()
        } else {
            activity(hrp, working)
        },
        message: working.map(text),
        since,
    }
}

/// The add-ons of one cluster, as `health_status_reason` shows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AddonsHealth {
    /// `(addon.<add-on>, what it says)`.
    pub entries: Vec<(String, String)>,
    /// No add-on failed (in progress within its time counts as healthy).
    pub healthy: bool,
    /// When an add-on now in progress would pass the timeout (to look again then).
    pub recheck_at: Option<DateTime<Utc>>,
}

/// `addon.<add-on>` per release proxy (`<add-on>` is its HelmChartProxy's name without the
/// `<cluster>-` prefix): `Ready`; `Progressing: installing (…)` while in progress within
/// `timeout`; `Failed: …` when CAAPH reported a failure or the add-on has been in progress for
/// longer than `timeout`.
pub fn of_cluster<'a>(
    cluster: &str,
    proxies: impl IntoIterator<Item = &'a Value>,
    now: DateTime<Utc>,
    timeout: chrono::Duration,
) -> AddonsHealth {
    let prefix = format!("{cluster}-");
    let mut out = AddonsHealth {
        healthy: true,
        ..AddonsHealth::default()
    };
    for hrp in proxies {
        let proxy = hrp
            .pointer("/metadata/labels")
            .and_then(|l| l.get(super::LABEL_HELM_CHART_PROXY))
            .and_then(Value::as_str)
            .or_else(|| s(hrp, "/metadata/name"))
            .unwrap_or_default();
        let key = proxy.strip_prefix(&prefix).unwrap_or(proxy);
        let shown = match assess(hrp) {
            AddonState::Ready => "Ready".to_string(),
            AddonState::Failed(why) => {
                out.healthy = false;
                format!("Failed: {why}")
            }
            AddonState::InProgress {
                what,
                message,
                since,
            } => {
                let detail = message.map(|m| format!(" ({m})")).unwrap_or_default();
                match since.map(|t| t + timeout) {
                    Some(limit) if limit <= now => {
                        out.healthy = false;
                        format!(
                            "Failed: still {what} after {} minutes{detail}",
                            (now - since.unwrap_or(now)).num_minutes()
                        )
                    }
                    limit => {
                        if let Some(l) = limit {
                            out.recheck_at = Some(out.recheck_at.map_or(l, |r| r.min(l)));
                        }
                        format!("Progressing: {what}{detail}")
                    }
                }
            }
        };
        out.entries.push((format!("addon.{key}"), shown));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A HelmReleaseProxy as CAAPH v0.6 leaves it: its conditions (type, status, reason,
    /// message, lastTransitionTime) and the Helm release's status.
    fn hrp(release: &str, conditions: Value) -> Value {
        json!({"metadata": {"name": "k-metrics-server-k", "creationTimestamp": "2026-11-27T01:00:00Z",
                             "labels": {crate::capi::LABEL_HELM_CHART_PROXY: "k-metrics-server"}},
               "status": {"conditions": conditions, "status": release, "revision": 1}})
    }

    fn cond(t: &str, status: &str, reason: &str, message: &str, at: &str) -> Value {
        json!({"type": t, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": at, "observedGeneration": 1})
    }

    fn at(t: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc)
    }

    const T0: &str = "2026-11-27T01:00:05Z";

    /// Helm working on the release (`phase`: `pending-install`, `pending-upgrade`) since `at`.
    fn pending(phase: &str, at: &str) -> Value {
        let message = format!("Helm release is in a pending state: {phase}");
        hrp(
            phase,
            json!([
                cond("ClusterAvailable", "True", "Available", "", T0),
                cond(
                    "HelmReleaseReady",
                    "False",
                    "HelmReleasePending",
                    &message,
                    at
                ),
                cond(
                    "Ready",
                    "False",
                    "IssuesReported",
                    &format!("* HelmReleaseReady: {message}"),
                    at
                ),
            ]),
        )
    }

    fn pending_install() -> Value {
        pending("pending-install", T0)
    }

    #[test]
    fn a_pending_install_is_in_progress_not_failed() {
        assert_eq!(
            assess(&pending_install()),
            AddonState::InProgress {
                what: "installing".into(),
                message: Some("Helm release is in a pending state: pending-install".into()),
                since: Some(at(T0)),
            }
        );
        // CAAPH's first word on a new proxy.
        let preparing = hrp(
            "",
            json!([cond(
                "HelmReleaseReady",
                "False",
                "PreparingToHelmInstall",
                "Preparing to to install Helm chart",
                T0
            )]),
        );
        assert!(
            matches!(assess(&preparing), AddonState::InProgress { what, .. } if what == "installing")
        );
        // Nothing reported yet: in progress since the proxy exists.
        let fresh = hrp("", json!([]));
        assert_eq!(
            assess(&fresh),
            AddonState::InProgress {
                what: "installing".into(),
                message: None,
                since: Some(at("2026-11-27T01:00:00Z")),
            }
        );
    }

    #[test]
    fn an_upgrade_and_a_cluster_not_up_yet_are_in_progress() {
        let later = "2026-11-27T02:00:00Z";
        let upgrading = pending("pending-upgrade", later);
        assert!(matches!(assess(&upgrading),
            AddonState::InProgress { what, since, .. } if what == "upgrading" && since == Some(at(later))));
        let waiting = hrp(
            "",
            json!([
                cond("ClusterAvailable", "False", "NotAvailable", "", T0),
                cond(
                    "HelmReleaseReady",
                    "False",
                    "PreparingToHelmInstall",
                    "Preparing to to install Helm chart",
                    T0
                ),
            ]),
        );
        assert!(
            matches!(assess(&waiting), AddonState::InProgress { what, .. } if what == "waiting for the cluster")
        );
    }

    #[test]
    fn failures_are_failures_whatever_the_summary_says() {
        let failed = hrp(
            "failed",
            json!([
                cond("ClusterAvailable", "True", "Available", "", T0),
                cond(
                    "HelmReleaseReady",
                    "False",
                    "HelmInstallOrUpgradeFailed",
                    "error installing metrics-server: context deadline exceeded",
                    T0
                ),
                cond(
                    "Ready",
                    "False",
                    "IssuesReported",
                    "* HelmReleaseReady: error …",
                    T0
                ),
            ]),
        );
        assert_eq!(
            assess(&failed),
            AddonState::Failed("error installing metrics-server: context deadline exceeded".into())
        );
        let bad_kubeconfig = hrp(
            "",
            json!([cond(
                "ClusterAvailable",
                "False",
                "GetKubeconfigFailed",
                "failed to get kubeconfig for cluster: couldn't get version/kind; json parse error",
                T0
            )]),
        );
        assert!(
            matches!(assess(&bad_kubeconfig), AddonState::Failed(m) if m.contains("kubeconfig"))
        );
        // What the real CAAPH (v0.6.4) said for a chart version its repository lacks
        // (tests/it/realstack_addons.rs): no release, so no release status either.
        let message = "chart \"tigera-operator\" version \"v3.99.0\" not found in \
                       http://127.0.0.1:35321/charts repository";
        let missing = json!({"metadata": {"name": "tigera-operator-k-kp6pm",
            "labels": {crate::capi::LABEL_HELM_CHART_PROXY: "k-cni"}},
        "status": {"observedGeneration": 1, "conditions": [
            cond("Ready", "False", "IssuesReported",
                 &format!("* HelmReleaseReady: {message}"), T0),
            cond("ClusterAvailable", "True", "Available", "", T0),
            cond("HelmReleaseReady", "False", "HelmInstallOrUpgradeFailed", message, T0),
        ]}});
        assert_eq!(assess(&missing), AddonState::Failed(message.into()));
        let h = of_cluster("k", [&missing], at(T0), chrono::Duration::minutes(30));
        assert!(!h.healthy);
        assert_eq!(
            h.entries,
            vec![("addon.cni".to_string(), format!("Failed: {message}"))]
        );
    }

    /// The real CAAPH (v0.6.4) on a cluster whose control plane is coming up
    /// (tests/it/realstack_addons.rs): the release proxy exists before KCP has written the
    /// kubeconfig Secret, and says so with `GetKubeconfigFailed`; then Helm runs before the API
    /// answers, "Kubernetes cluster unreachable". The cluster is on its way, not broken; past the
    /// timeout it is.
    #[test]
    fn a_kubeconfig_not_written_yet_is_the_cluster_coming_up() {
        let missing = "failed to get kubeconfig for cluster: failed to retrieve kubeconfig secret \
                       for Cluster magnum-p/k: Secret \"k-kubeconfig\" not found";
        let preparing = "Preparing to to install Helm chart";
        let coming_up = hrp(
            "",
            json!([
                cond(
                    "Ready",
                    "False",
                    "IssuesReported",
                    &format!("* ClusterAvailable: {missing}\n* HelmReleaseReady: {preparing}"),
                    T0
                ),
                cond(
                    "ClusterAvailable",
                    "False",
                    "GetKubeconfigFailed",
                    missing,
                    T0
                ),
                cond(
                    "HelmReleaseReady",
                    "False",
                    "PreparingToHelmInstall",
                    preparing,
                    T0
                ),
            ]),
        );
        assert_eq!(
            assess(&coming_up),
            AddonState::InProgress {
                what: "waiting for the cluster".into(),
                message: Some(missing.into()),
                since: Some(at(T0)),
            }
        );
        let timeout = chrono::Duration::minutes(30);
        let h = of_cluster("k", [&coming_up], at("2026-11-27T01:01:00Z"), timeout);
        assert!(h.healthy);
        assert_eq!(
            h.entries[0].1,
            format!("Progressing: waiting for the cluster ({missing})")
        );
        let h = of_cluster("k", [&coming_up], at("2026-11-27T01:40:05Z"), timeout);
        assert!(!h.healthy);
        assert!(
            h.entries[0]
                .1
                .starts_with("Failed: still waiting for the cluster after 40 minutes"),
            "{:?}",
            h.entries
        );
        // The Secret is there, the API does not answer yet: Helm's check fails, CAAPH retries.
        // `HelmReleaseReady` has been False since CAAPH first reported: the wait counts from then.
        let unreachable = "Kubernetes cluster unreachable: Get \"https://127.100.0.5:6443/version?\
                           timeout=10s\": dial tcp 127.100.0.5:6443: connect: connection refused";
        let helm_cannot_reach = hrp(
            "",
            json!([
                cond(
                    "Ready",
                    "False",
                    "IssuesReported",
                    &format!("* HelmReleaseReady: {unreachable}"),
                    T0
                ),
                cond("ClusterAvailable", "True", "Available", "", T0),
                cond(
                    "HelmReleaseReady",
                    "False",
                    "HelmInstallOrUpgradeFailed",
                    unreachable,
                    T0
                ),
            ]),
        );
        assert_eq!(
            assess(&helm_cannot_reach),
            AddonState::InProgress {
                what: "waiting for the cluster".into(),
                message: Some(unreachable.into()),
                since: Some(at(T0)),
            }
        );
        let h = of_cluster(
            "k",
            [&helm_cannot_reach],
            at("2026-11-27T01:40:05Z"),
            timeout,
        );
        assert!(!h.healthy);
        // Any other Helm error is the add-on's own failure at once.
        let mut broken = helm_cannot_reach.clone();
        broken["status"]["conditions"][2]["message"] =
            json!("execution error at (metrics-server/templates/x.yaml:1:4): bad values");
        assert!(matches!(assess(&broken), AddonState::Failed(m) if m.starts_with("execution")));
    }

    #[test]
    fn severity_decides_where_conditions_carry_one() {
        let mut info = cond(
            "HelmReleaseReady",
            "False",
            "Installing",
            "installing the chart",
            T0,
        );
        info["severity"] = json!("Info");
        assert!(matches!(
            assess(&hrp("", json!([info.clone()]))),
            AddonState::InProgress { .. }
        ));
        for sev in ["Warning", "Error"] {
            info["severity"] = json!(sev);
            assert_eq!(
                assess(&hrp("", json!([info.clone()]))),
                AddonState::Failed("installing the chart".into())
            );
        }
    }

    #[test]
    fn ready_releases_are_ready() {
        let ready = hrp(
            "deployed",
            json!([
                cond("ClusterAvailable", "True", "Available", "", T0),
                cond("HelmReleaseReady", "True", "Ready", "", T0),
                cond("Ready", "True", "InfoReported", "", T0),
            ]),
        );
        assert_eq!(assess(&ready), AddonState::Ready);
        assert_eq!(
            assess(&hrp("", json!([cond("Ready", "True", "Ready", "", T0)]))),
            AddonState::Ready
        );
    }

    #[test]
    fn the_cluster_entries_name_the_addon_and_a_timeout_fails_it() {
        let timeout = chrono::Duration::minutes(30);
        let h = of_cluster(
            "k",
            [&pending_install()],
            at("2026-11-27T01:10:00Z"),
            timeout,
        );
        assert!(h.healthy);
        assert_eq!(
            h.entries,
            vec![(
                "addon.metrics-server".to_string(),
                "Progressing: installing (Helm release is in a pending state: pending-install)"
                    .to_string()
            )]
        );
        assert_eq!(h.recheck_at, Some(at(T0) + timeout));
        let h = of_cluster(
            "k",
            [&pending_install()],
            at("2026-11-27T01:40:05Z"),
            timeout,
        );
        assert!(!h.healthy);
        assert_eq!(
            h.entries[0].1,
            "Failed: still installing after 40 minutes (Helm release is in a pending state: \
             pending-install)"
        );
        assert_eq!(h.recheck_at, None);
    }
}
