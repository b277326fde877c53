//! The Cluster API Addon Provider Helm (CAAPH) controller: each HelmChartProxy gets one
//! HelmReleaseProxy per selected Cluster as soon as the Cluster exists, named as CAAPH names it
//! (`<chart>-<cluster>-<5 characters>`, from a generateName), owned by the proxy (deleted with
//! it), labelled as CAAPH labels them, its spec carrying the proxy's values and options, with
//! CAAPH v0.6's conditions (`ClusterAvailable`, `HelmReleaseReady` and their summary `Ready`).
//! As the real CAAPH v0.6.4 does on the real stack (`tests/it/realstack_addons.rs`), a proxy
//! first says `PreparingToHelmInstall`, then waits for the cluster: `NotAvailable` when the
//! Cluster says its control plane is not initialised, `GetKubeconfigFailed` while the
//! `<cluster>-kubeconfig` Secret does not exist (real CAPI leaves `controlPlaneInitialized` unset
//! until it is true, so that is what a real create shows). Then the release is deployed — or,
//! when a failure marker names the chart or the proxy, `HelmInstallOrUpgradeFailed` (an add-on
//! that does not install), or, when a marker `pending:<chart>` names it, `HelmReleasePending`
//! with the release `pending-install` (`pending-upgrade` once deployed) for as long as the marker
//! stays (an install or upgrade Helm is still working on). A proxy whose spec changes has its
//! release proxies' specs updated (their generation moves, as an upgrade of the release), and
//! its `status.observedGeneration` says CAAPH has taken it.

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
    // What CAAPH copies from the proxy into each release proxy's spec.
    let wanted = json!({
        "chartName": chart,
        "repoURL": spec("repoURL"),
        "version": spec("version"),
        "releaseName": spec("releaseName"),
        "namespace": spec("namespace"),
        "values": spec("valuesTemplate"),
        "options": at(hcp, &["spec", "options"]).cloned().unwrap_or_else(|| json!({})),
    });
    for cluster in clusters.iter().filter(|c| !is_deleting(c)) {
        let cluster_name = name(cluster);
        let hrp = match release_proxy(cx, ns, cluster_name, name(hcp))? {
            // A proxy whose spec changed (an upgrade's new chart version or values): CAAPH
            // updates the release proxy, whose Helm release is then upgraded.
            Some(h) if outdated(&h, &wanted) => cx.edit(Kind::HelmReleaseProxy, &h, |o| {
                if let Some(Value::Object(spec)) = o.get_mut("spec") {
                    for (k, v) in wanted.as_object().into_iter().flatten() {
                        spec.insert(k.clone(), v.clone());
                    }
                }
            })?,
            Some(h) => h,
            None => {
                let mut spec = wanted.clone();
                spec["clusterRef"] = json!({"apiVersion": "cluster.x-k8s.io/v1beta2",
                    "kind": "Cluster", "name": cluster_name, "namespace": ns});
                cx.store.create(
                &Kind::HelmReleaseProxy.resource(),
                ns,
                json!({
                    "apiVersion": ADDONS_VERSION,
                    "kind": "HelmReleaseProxy",
                    "metadata": {
                        "name": generated_name(&format!("{chart}-{cluster_name}-"),
                                               &format!("{ns}/{}/{cluster_name}", name(hcp))),
                        "generateName": format!("{chart}-{cluster_name}-"),
                        "namespace": ns,
                        "labels": {
                            LABEL_CLUSTER_NAME: cluster_name,
                            LABEL_HELM_CHART_PROXY: name(hcp),
                        },
                        "ownerReferences": [owner_ref(ADDONS_VERSION, "HelmChartProxy", hcp, true)],
                    },
                    "spec": spec,
                }),
            )?
            }
        };
        if let Some(waiting) = waiting_for_cluster(cx, cluster) {
            let preparing = "Preparing to to install Helm chart";
            let (reason, message) = waiting;
            let conds = json!([
                {"type": "ClusterAvailable", "status": "False", "reason": reason,
                 "message": message},
                {"type": "HelmReleaseReady", "status": "False",
                 "reason": "PreparingToHelmInstall", "message": preparing},
                {"type": "Ready", "status": "False", "reason": "IssuesReported",
                 "message": format!("* ClusterAvailable: {}\n* HelmReleaseReady: {preparing}",
                                    if message.is_empty() { reason } else { &message })},
            ]);
            set_conditions(cx, &hrp, conds, None)?;
            continue;
        }
        let pending = cx.markers.iter().any(|m| {
            m.strip_prefix("pending:")
                .is_some_and(|p| !p.is_empty() && (chart.contains(p) || name(hcp).contains(p)))
        });
        // Helm runs again only for a changed spec: a release deployed for this generation stays
        // deployed whatever marker is set later (CAAPH does not reinstall it).
        let settled = str_at(&hrp, &["status", "status"]) == Some("deployed")
            && i64_at(&hrp, &["status", "observedGeneration"]) == Some(generation(&hrp));
        let failed = !pending && !settled && (cx.fails(&chart) || cx.fails(name(hcp)));
        // A release Helm deployed before is upgraded, not installed.
        let phase = if str_at(&hrp, &["status", "status"]).is_some_and(|r| r != "pending-install") {
            "pending-upgrade"
        } else {
            "pending-install"
        };
        let (ready, reason, message, release) = if pending {
            (
                "False",
                "HelmReleasePending",
                format!("Helm release is in a pending state: {phase}"),
                phase,
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
        let (summary_reason, summary_message) = if ready == "True" {
            ("InfoReported", String::new())
        } else {
            ("IssuesReported", format!("* HelmReleaseReady: {message}"))
        };
        let conds = json!([
            {"type": "ClusterAvailable", "status": "True", "reason": "Available", "message": ""},
            {"type": "HelmReleaseReady", "status": ready, "reason": reason, "message": message},
            {"type": "Ready", "status": ready, "reason": summary_reason,
             "message": summary_message},
        ]);
        set_conditions(cx, &hrp, conds, Some(release))?;
    }
    // CAAPH's word that it has passed this spec to the release proxies.
    if i64_at(hcp, &["status", "observedGeneration"]) != Some(generation(hcp)) {
        let mut status = at(hcp, &["status"]).cloned().unwrap_or_else(|| json!({}));
        status["observedGeneration"] = json!(generation(hcp));
        cx.set_status(Kind::HelmChartProxy, hcp, status)?;
    }
    Ok(())
}

/// The release proxy's spec lacks something of `wanted` (the proxy changed since).
fn outdated(hrp: &Value, wanted: &Value) -> bool {
    wanted
        .as_object()
        .into_iter()
        .flatten()
        .any(|(k, v)| at(hrp, &["spec", k]) != Some(v))
}

/// The release proxy of HelmChartProxy `proxy` for cluster `cluster`, found by CAAPH's labels.
fn release_proxy(
    cx: &Ctx<'_>,
    ns: &str,
    cluster: &str,
    proxy: &str,
) -> Result<Option<std::sync::Arc<Value>>, StoreError> {
    let selector = format!("{LABEL_CLUSTER_NAME}={cluster},{LABEL_HELM_CHART_PROXY}={proxy}");
    Ok(cx
        .store
        .list(&Kind::HelmReleaseProxy.resource(), Some(ns), &selector)?
        .into_iter()
        .next())
}

/// A name from `generate_name` as the kube-apiserver makes one (the prefix cut to 58
/// characters, then 5 of its random characters), the characters drawn from `seed` so that the
/// simulation repeats itself.
fn generated_name(generate_name: &str, seed: &str) -> String {
    use sha2::Digest;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let prefix: String = generate_name.chars().take(58).collect();
    let digest = sha2::Sha256::digest(seed.as_bytes());
    let suffix: String = digest
        .iter()
        .take(5)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// Why CAAPH cannot reach `cluster` yet (`ClusterAvailable`'s reason and message), as its
/// HelmReleaseProxy controller decides: the Cluster says its control plane is not initialised
/// (`controlPlaneInitialized: false`), or the kubeconfig Secret is not there.
fn waiting_for_cluster(cx: &Ctx<'_>, cluster: &Value) -> Option<(&'static str, String)> {
    let explicitly_not_initialised = at(
        cluster,
        &["status", "initialization", "controlPlaneInitialized"],
    )
    .and_then(Value::as_bool)
        == Some(false);
    if explicitly_not_initialised {
        return Some(("NotAvailable", String::new()));
    }
    let (ns, cname) = (namespace(cluster), name(cluster));
    let secret = crate::simkube::kubeconfig::secret_name(cname);
    cx.get(Kind::Secret, ns, &secret).is_none().then(|| {
        (
            "GetKubeconfigFailed",
            format!(
                "failed to get kubeconfig for cluster: failed to retrieve kubeconfig secret for \
                 Cluster {ns}/{cname}: Secret \"{secret}\" not found"
            ),
        )
    })
}

/// Sets the proxy's conditions (and, with `release`, the release's status and revision, which a
/// proxy has only once Helm made a release; without, they stay as they are) unless they already
/// say the same; `lastTransitionTime` moves only when a condition's status does (metav1
/// conditions).
fn set_conditions(
    cx: &Ctx<'_>,
    hrp: &Value,
    mut conds: Value,
    release: Option<&str>,
) -> Result<(), StoreError> {
    let release = release.or_else(|| str_at(hrp, &["status", "status"]));
    let same = |c: &Value| {
        condition(hrp, c["type"].as_str().unwrap_or_default()).is_some_and(|old| {
            ["status", "reason", "message"]
                .iter()
                .all(|k| old.get(*k) == c.get(*k))
        })
    };
    let unchanged = conds.as_array().is_some_and(|cs| cs.iter().all(same))
        && str_at(hrp, &["status", "status"]) == release
        && i64_at(hrp, &["status", "observedGeneration"]) == Some(generation(hrp));
    if unchanged {
        return Ok(());
    }
    let now = now_rfc3339();
    for c in conds.as_array_mut().into_iter().flatten() {
        let t = c["type"].as_str().unwrap_or_default().to_string();
        let status = c["status"].clone();
        let since = condition(hrp, &t)
            .filter(|old| old.get("status") == Some(&status))
            .and_then(|old| old.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        c["lastTransitionTime"] = since;
        c["observedGeneration"] = json!(generation(hrp));
    }
    let mut status = json!({"conditions": conds, "observedGeneration": generation(hrp)});
    if let Some(r) = release {
        status["status"] = json!(r);
        status["revision"] = json!(1);
    }
    cx.set_status(Kind::HelmReleaseProxy, hrp, status)?;
    Ok(())
}
