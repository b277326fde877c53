//! The Cluster API Addon Provider Helm (CAAPH) controller: each HelmChartProxy gets one
//! HelmReleaseProxy per selected Cluster once that cluster's control plane is initialised,
//! owned by the proxy (deleted with it), labelled as CAAPH labels them, with CAAPH v0.6's
//! conditions (`ClusterAvailable`, `HelmReleaseReady` and their summary `Ready`): deployed — or,
//! when a failure marker names the chart or the proxy, `HelmInstallOrUpgradeFailed` (an add-on
//! that does not install), or, when a marker `pending:<chart>` names it, `HelmReleasePending`
//! with the release `pending-install` for as long as the marker stays (an install Helm is still
//! working on).

use serde_json::{Value, json};

use super::ctx::Ctx;
use crate::simkube::objects::*;
use crate::simkube::store::{StoreError, now_rfc3339};

use crate::k8s::labels::LABEL_HELM_CHART_PROXY;
const ADDONS_VERSION: &str = "addons.cluster.x-k8s.io/v1alpha1";

pub(super) fn helm_chart_proxy(cx: &Ctx<'_>, hcp: &Value) -> Result<(), StoreError> {
    if is_deleting(hcp) {
        return Ok(());
    }
    let ns = namespace(hcp);
    let selector = string_map(at(hcp, &["spec", "clusterSelector", "matchLabels"]))
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    if selector.is_empty() {
        return Ok(());
    }
    let clusters = cx
        .store
        .list(&Kind::Cluster.resource(), Some(ns), &selector)?;
    let spec = |k: &str| str_at(hcp, &["spec", k]).unwrap_or_default().to_string();
    let chart = spec("chartName");
    for cluster in clusters.iter().filter(|c| !is_deleting(c)) {
        let initialised = bool_at(
            cluster,
            &["status", "initialization", "controlPlaneInitialized"],
        ) || condition_true(cluster, "ControlPlaneInitialized");
        if !initialised {
            continue;
        }
        let cluster_name = name(cluster);
        let hrp_name = format!("{}-{cluster_name}", name(hcp));
        let hrp = match cx.get(Kind::HelmReleaseProxy, ns, &hrp_name) {
            Some(h) => h,
            None => cx.store.create(
                &Kind::HelmReleaseProxy.resource(),
                ns,
                json!({
                    "apiVersion": ADDONS_VERSION,
                    "kind": "HelmReleaseProxy",
                    "metadata": {
                        "name": hrp_name,
                        "namespace": ns,
                        "labels": {
                            LABEL_CLUSTER_NAME: cluster_name,
                            LABEL_HELM_CHART_PROXY: name(hcp),
                        },
                        "ownerReferences": [owner_ref(ADDONS_VERSION, "HelmChartProxy", hcp, true)],
                    },
                    "spec": {
                        "clusterRef": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                       "name": cluster_name, "namespace": ns},
                        "chartName": chart,
                        "repoURL": spec("repoURL"),
                        "version": spec("version"),
                        "releaseName": spec("releaseName"),
                        "namespace": spec("namespace"),
                    },
                }),
            )?,
        };
        let pending = cx.markers.iter().any(|m| {
            m.strip_prefix("pending:")
                .is_some_and(|p| !p.is_empty() && (chart.contains(p) || name(hcp).contains(p)))
        });
        let failed = !pending && (cx.fails(&chart) || cx.fails(name(hcp)));
        let (ready, reason, message, release) = if pending {
            (
                "False",
                "HelmReleasePending",
                "Helm release is in a pending state: pending-install".to_string(),
                "pending-install",
            )
        } else if failed {
            (
                "False",
                "HelmInstallOrUpgradeFailed",
                format!("error installing {chart}: simulated failure"),
                "failed",
            )
        } else {
            ("True", "Ready", String::new(), "deployed")
        };
        let current = condition(&hrp, "HelmReleaseReady");
        let unchanged = current.is_some_and(|c| {
            c.get("status").and_then(Value::as_str) == Some(ready)
                && c.get("message").and_then(Value::as_str) == Some(message.as_str())
        });
        if unchanged {
            continue;
        }
        let now = now_rfc3339();
        // lastTransitionTime moves only when the status does (metav1 conditions).
        let since = |t: &str, status: &str| {
            condition(&hrp, t)
                .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
                .and_then(|c| c.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now))
        };
        let (summary_reason, summary_message) = if ready == "True" {
            ("InfoReported", String::new())
        } else {
            ("IssuesReported", format!("* HelmReleaseReady: {message}"))
        };
        cx.set_status(
            Kind::HelmReleaseProxy,
            &hrp,
            json!({
                "conditions": [
                    {"type": "ClusterAvailable", "status": "True", "reason": "Available",
                     "message": "", "lastTransitionTime": since("ClusterAvailable", "True")},
                    {"type": "HelmReleaseReady", "status": ready, "reason": reason,
                     "message": message, "lastTransitionTime": since("HelmReleaseReady", ready)},
                    {"type": "Ready", "status": ready, "reason": summary_reason,
                     "message": summary_message, "lastTransitionTime": since("Ready", ready)},
                ],
                "status": release,
                "revision": 1,
                "observedGeneration": generation(&hrp),
            }),
        )?;
    }
    Ok(())
}
