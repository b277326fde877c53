//! Add-ons through an upgrade (pure): which stage an add-on rolls in, the rendered objects with
//! the add-ons of later stages held as they are live, which add-ons of a stage the new template
//! changes, and whether a stage has rolled out — for `upgrade`, which applies the machines
//! first, then, once the control plane runs the new version, the stages in [`STAGES`] order,
//! each after the one before it is Ready (magnum-cluster-api #919: the CNI and the other add-ons
//! stayed on the versions the cluster was created with).
//!
//! The order: the CNI first (the new kubelets need it, and a network outage hurts most), then
//! the cloud provider (OCCM initialises the new nodes and runs the load balancers), then storage
//! (Cinder, Manila and the NFS node plugin), then everything else (metrics-server, monitoring,
//! ingress, the GPU operator, the operator's `addons.d`, the cluster autoscaler).

use serde_json::Value;

use super::addon_health::{AddonState, assess};
use super::{LABEL_HELM_CHART_PROXY, kinds};

/// One step of the add-on rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Network = 1,
    CloudProvider = 2,
    Storage = 3,
    Rest = 4,
}

/// The stages in rollout order.
pub const STAGES: [Stage; 4] = [
    Stage::Network,
    Stage::CloudProvider,
    Stage::Storage,
    Stage::Rest,
];

impl Stage {
    /// The stage of the add-on `key` (its HelmChartProxy's name without `<cluster>-`).
    pub fn of(key: &str) -> Self {
        match key {
            "cni" => Stage::Network,
            "ccm" => Stage::CloudProvider,
            k if k.starts_with("csi-") => Stage::Storage,
            _ => Stage::Rest,
        }
    }

    /// Its number: the stages released so far are recorded as the last one's.
    pub fn rank(self) -> u8 {
        self as u8
    }

    /// What it rolls, for the cluster's `status_reason`.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::Network => "the CNI",
            Stage::CloudProvider => "the cloud provider",
            Stage::Storage => "the storage drivers",
            Stage::Rest => "the other add-ons",
        }
    }
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn int(v: &Value, ptr: &str) -> Option<i64> {
    v.pointer(ptr).and_then(Value::as_i64)
}

fn name(v: &Value) -> &str {
    s(v, "/metadata/name").unwrap_or_default()
}

fn is(v: &Value, gvk: kinds::Gvk) -> bool {
    s(v, "/apiVersion") == Some(gvk.0) && s(v, "/kind") == Some(gvk.1)
}

/// The add-on key of an object of cluster `cluster` that an upgrade rolls in stages: a
/// HelmChartProxy (`<cluster>-<key>`), or the autoscaler's Deployment (`autoscaler`, whose image
/// follows the Kubernetes minor). `None` for everything else.
pub fn addon_key<'a>(obj: &'a Value, cluster: &str) -> Option<&'a str> {
    let n = name(obj);
    if is(obj, kinds::HELM_CHART_PROXY) {
        return Some(
            n.strip_prefix(cluster)
                .and_then(|k| k.strip_prefix('-'))
                .unwrap_or(n),
        );
    }
    (is(obj, kinds::DEPLOYMENT) && n == format!("{cluster}-autoscaler")).then_some("autoscaler")
}

/// `want` holds nothing `have` does not: every field it sets (recursively, lists whole) has the
/// same value in `have`. Live objects carry defaults we never wrote; they make no difference.
fn covers(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| h.get(k).is_some_and(|hv| covers(hv, wv))),
        (h, w) => h == w,
    }
}

fn live_of<'a>(live: &'a [Value], obj: &Value) -> Option<&'a Value> {
    live.iter()
        .find(|l| name(l) == name(obj) && s(l, "/kind") == s(obj, "/kind"))
}

/// The rendered add-on objects of a stage after `released` are held: they keep the spec they
/// have live (the template's new versions wait for their stage), and one not live yet is left
/// out until then. Everything else is as rendered.
pub fn hold(rendered: Vec<Value>, live: &[Value], cluster: &str, released: u8) -> Vec<Value> {
    rendered
        .into_iter()
        .filter_map(|mut obj| {
            let Some(key) = addon_key(&obj, cluster) else {
                return Some(obj);
            };
            if Stage::of(key).rank() <= released {
                return Some(obj);
            }
            let spec = live_of(live, &obj)?.get("spec")?.clone();
            obj["spec"] = spec;
            Some(obj)
        })
        .collect()
}

/// The add-on objects of `stage` among `rendered` that the rollout changes: not live, or live
/// with a spec that lacks what the render says (a new chart version, new values).
pub fn changed<'a>(
    rendered: &'a [Value],
    live: &[Value],
    cluster: &str,
    stage: Stage,
) -> Vec<&'a Value> {
    rendered
        .iter()
        .filter(|o| addon_key(o, cluster).is_some_and(|k| Stage::of(k) == stage))
        .filter(|o| {
            live_of(live, o).is_none_or(|l| {
                !covers(
                    l.get("spec").unwrap_or(&Value::Null),
                    o.get("spec").unwrap_or(&Value::Null),
                )
            })
        })
        .collect()
}

/// The release proxies of HelmChartProxy `proxy` among `hrps`.
fn releases_of<'a>(proxy: &str, hrps: impl IntoIterator<Item = &'a Value>) -> Vec<&'a Value> {
    hrps.into_iter()
        .filter(|h| {
            h.pointer("/metadata/labels")
                .and_then(|l| l.get(LABEL_HELM_CHART_PROXY))
                .and_then(Value::as_str)
                == Some(proxy)
        })
        .collect()
}

/// Whether add-on HelmChartProxy `proxy` has a release that has failed (before an upgrade rolls
/// it: its failure is its health's, not the upgrade's, so it is not counted as rolled).
pub fn failing<'a>(proxy: &str, hrps: impl IntoIterator<Item = &'a Value>) -> bool {
    releases_of(proxy, hrps)
        .into_iter()
        .any(|h| matches!(assess(h), AddonState::Failed(_)))
}

/// Where the add-ons of a stage are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roll {
    /// Every one of them is Ready on its new spec.
    Done,
    /// Some are still being rolled: `<add-on>: what it does`, one each.
    Rolling(Vec<String>),
    /// One that this upgrade changed failed: `<add-on>: why`.
    Failed(String),
}

/// Whether the HelmChartProxies of `stage` among `rendered` have rolled out on cluster
/// `cluster`: CAAPH has taken their spec (`live`: the proxies as they are; `observedGeneration`)
/// and passed it to their release proxies (`hrps`: the cluster's HelmReleaseProxies), whose
/// Helm release is Ready for that spec. An add-on in `rolled` (changed by this upgrade) that
/// failed fails the stage; one the upgrade did not change is waited for while in progress, but
/// its failure is not the upgrade's (its health says it).
pub fn stage_state<'a>(
    stage: Stage,
    rendered: &[Value],
    live: &[Value],
    hrps: impl IntoIterator<Item = &'a Value> + Clone,
    cluster: &str,
    rolled: &[String],
) -> Roll {
    let mut rolling = Vec::new();
    for hcp in rendered.iter().filter(|o| is(o, kinds::HELM_CHART_PROXY)) {
        let Some(key) = addon_key(hcp, cluster).filter(|k| Stage::of(k) == stage) else {
            continue;
        };
        let ours = rolled.iter().any(|r| r == name(hcp));
        let Some(proxy) = live_of(live, hcp) else {
            rolling.push(format!("{key}: not applied yet"));
            continue;
        };
        let taken = match (
            int(proxy, "/status/observedGeneration"),
            int(proxy, "/metadata/generation"),
        ) {
            (Some(o), Some(g)) => o >= g,
            _ => true,
        };
        if !taken {
            rolling.push(format!("{key}: waiting for CAAPH to take the new spec"));
            continue;
        }
        let releases = releases_of(name(hcp), hrps.clone());
        if releases.is_empty() && ours {
            rolling.push(format!("{key}: no release yet"));
        }
        for hrp in releases {
            let current = s(hrp, "/spec/version") == s(hcp, "/spec/version")
                && match (
                    int(hrp, "/status/observedGeneration"),
                    int(hrp, "/metadata/generation"),
                ) {
                    (Some(o), Some(g)) => o >= g,
                    _ => true,
                };
            match assess(hrp) {
                AddonState::Failed(why) if current && ours => {
                    return Roll::Failed(format!("{key}: {why}"));
                }
                AddonState::Failed(_) if current => {}
                AddonState::Ready if current => {}
                AddonState::InProgress { what, .. } if current => {
                    rolling.push(format!("{key}: {what}"));
                }
                _ => rolling.push(format!(
                    "{key}: waiting for its release to take version {}",
                    s(hcp, "/spec/version").unwrap_or("?")
                )),
            }
        }
    }
    if rolling.is_empty() {
        Roll::Done
    } else {
        Roll::Rolling(rolling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hcp(key: &str, version: &str, generation: i64, observed: i64) -> Value {
        json!({"apiVersion": kinds::HELM_CHART_PROXY.0, "kind": "HelmChartProxy",
               "metadata": {"name": format!("k-{key}"), "generation": generation},
               "spec": {"chartName": key, "version": version, "options": {"wait": true}},
               "status": {"observedGeneration": observed}})
    }

    fn hrp(key: &str, version: &str, ready: &str, reason: &str, message: &str) -> Value {
        json!({"metadata": {"name": format!("{key}-k-abcde"), "generation": 2,
                            "labels": {LABEL_HELM_CHART_PROXY: format!("k-{key}")}},
               "spec": {"version": version},
               "status": {"observedGeneration": 2, "conditions": [
                   {"type": "HelmReleaseReady", "status": ready, "reason": reason,
                    "message": message, "lastTransitionTime": "2026-11-29T10:00:00Z"}]}})
    }

    fn rendered(key: &str, version: &str) -> Value {
        let mut v = hcp(key, version, 1, 1);
        v.as_object_mut().unwrap().remove("status");
        v["metadata"].as_object_mut().unwrap().remove("generation");
        v
    }

    #[test]
    fn the_cni_rolls_first_then_the_cloud_provider_then_storage_then_the_rest() {
        let order: Vec<Stage> = [
            "metrics-server",
            "csi-cinder",
            "ccm",
            "cni",
            "csi-nfs",
            "autoscaler",
        ]
        .into_iter()
        .map(Stage::of)
        .collect();
        assert_eq!(
            order,
            [
                Stage::Rest,
                Stage::Storage,
                Stage::CloudProvider,
                Stage::Network,
                Stage::Storage,
                Stage::Rest
            ]
        );
        assert!(STAGES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn add_ons_of_later_stages_keep_their_live_spec_and_new_ones_wait() {
        let objs = vec![
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k-ca"}}),
            rendered("cni", "v3.31.0"),
            rendered("ccm", "2.34.0"),
            rendered("gpu-operator", "v25.3.0"),
        ];
        let live = vec![hcp("cni", "v3.30.0", 1, 1), hcp("ccm", "2.33.0", 1, 1)];
        let held = hold(objs.clone(), &live, "k", Stage::Network.rank());
        assert_eq!(held.len(), 3, "the add-on not live yet waits: {held:?}");
        assert_eq!(held[1]["spec"]["version"], "v3.31.0");
        assert_eq!(held[2]["spec"]["version"], "2.33.0");
        let all = hold(objs, &live, "k", Stage::Rest.rank());
        assert_eq!(all[3]["spec"]["version"], "v25.3.0");
    }

    #[test]
    fn only_what_the_render_changes_is_rolled_and_defaults_are_no_change() {
        let objs = vec![rendered("cni", "v3.31.0"), rendered("csi-cinder", "2.33.0")];
        let mut cinder = hcp("csi-cinder", "2.33.0", 1, 1);
        cinder["spec"]["options"]["timeout"] = json!("10m0s"); // a default CAAPH added
        let live = vec![hcp("cni", "v3.30.0", 1, 1), cinder];
        let cni = changed(&objs, &live, "k", Stage::Network);
        assert_eq!(cni.len(), 1);
        assert!(changed(&objs, &live, "k", Stage::Storage).is_empty());
    }

    #[test]
    fn a_stage_is_done_when_its_releases_are_ready_on_the_new_version() {
        let objs = vec![rendered("cni", "v3.31.0")];
        let rolled = vec!["k-cni".to_string()];
        let state = |live: &[Value], hrps: &[Value]| {
            stage_state(Stage::Network, &objs, live, hrps.iter(), "k", &rolled)
        };
        // CAAPH has not seen the new spec; then its release still has the old version.
        let unseen = [hcp("cni", "v3.31.0", 2, 1)];
        let ready_old = [hrp("cni", "v3.30.0", "True", "Ready", "")];
        assert!(matches!(state(&unseen, &ready_old), Roll::Rolling(_)));
        let seen = [hcp("cni", "v3.31.0", 2, 2)];
        assert!(matches!(state(&seen, &ready_old), Roll::Rolling(w) if w[0].contains("v3.31.0")));
        let upgrading = [hrp(
            "cni",
            "v3.31.0",
            "False",
            "HelmReleasePending",
            "Helm release is in a pending state: pending-upgrade",
        )];
        assert_eq!(
            state(&seen, &upgrading),
            Roll::Rolling(vec!["cni: upgrading".into()])
        );
        let ready = [hrp("cni", "v3.31.0", "True", "Ready", "")];
        assert_eq!(state(&seen, &ready), Roll::Done);
        let failed = [hrp(
            "cni",
            "v3.31.0",
            "False",
            "HelmInstallOrUpgradeFailed",
            "upgrade failed: timed out",
        )];
        assert_eq!(
            state(&seen, &failed),
            Roll::Failed("cni: upgrade failed: timed out".into())
        );
        // A failure the upgrade did not cause is the add-on's health, not the upgrade's.
        assert_eq!(
            stage_state(Stage::Network, &objs, &seen, failed.iter(), "k", &[]),
            Roll::Done
        );
    }
}
