//! Private clusters — an API load balancer without a floating IP — as the management cluster
//! shows them: which OpenStackClusters are private and where their API is (the one rule
//! `magnum-capi api-proxy`'s allowlist and the kubeconfig keeper share), and the keeper that
//! writes `[capi] api_proxy_url` with the cluster's own proxy credential (`crate::proxy_auth`)
//! as `proxy-url` into their `<cluster>-kubeconfig` Secret each time CAPI creates or regenerates
//! it (CAPI's regeneration keeps the server and drops the rest). That Secret is the only place
//! the credential is kept.

use std::collections::HashSet;
use std::sync::Arc;

use base64::Engine;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::apply::{ObjectRef, resource};
use super::driver::Capi;
use super::{LABEL_CAPI_CLUSTER_NAME, LABEL_CLUSTER_UUID, kinds, secret_data};
use crate::proxy_auth::ProxyUrls;

/// The API endpoint of a private cluster and the Neutron resources behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateApi {
    /// `<namespace>/<name>` of the OpenStackCluster (the CAPI cluster's name).
    pub cluster: String,
    /// `spec.controlPlaneEndpoint`: the load balancer's (or machine's) fixed IP and port.
    pub host: String,
    pub port: u16,
    /// `status.router.id`: its `qrouter-<id>` namespace routes into the cluster's network.
    pub router_id: Option<String>,
    /// `status.network.id`: `qdhcp-<id>` / `ovnmeta-<id>` have a port on it.
    pub network_id: Option<String>,
}

impl PrivateApi {
    /// The private API of an OpenStackCluster the service created (it carries the cluster-uuid
    /// label), whose spec disables the API floating IP, once CAPO set its endpoint; `None`
    /// for any other.
    pub fn of(osc: &Value) -> Option<PrivateApi> {
        osc.pointer("/metadata/labels")?.get(LABEL_CLUSTER_UUID)?;
        if osc.pointer("/spec/disableAPIServerFloatingIP") != Some(&Value::Bool(true)) {
            return None;
        }
        let text = |p: &str| {
            osc.pointer(p)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let host = text("/spec/controlPlaneEndpoint/host")?;
        let port = osc
            .pointer("/spec/controlPlaneEndpoint/port")
            .and_then(Value::as_u64)
            .unwrap_or(6443);
        Some(PrivateApi {
            cluster: format!(
                "{}/{}",
                text("/metadata/namespace")?,
                text("/metadata/name")?
            ),
            host,
            port: u16::try_from(port).ok()?,
            router_id: text("/status/router/id"),
            network_id: text("/status/network/id"),
        })
    }
}

/// `kubeconfig` (YAML) with `proxy-url: url` on every cluster entry; `None` when each has it
/// already (nothing to write).
pub fn with_proxy_url(kubeconfig: &str, url: &str) -> Result<Option<String>, String> {
    let mut doc: Value = yaml_serde::from_str(kubeconfig).map_err(|e| e.to_string())?;
    let clusters = doc
        .get_mut("clusters")
        .and_then(Value::as_array_mut)
        .ok_or("the kubeconfig has no clusters")?;
    let mut changed = false;
    for entry in clusters {
        let Some(cluster) = entry.get_mut("cluster").and_then(Value::as_object_mut) else {
            continue;
        };
        if cluster.get("proxy-url").and_then(Value::as_str) != Some(url) {
            cluster.insert("proxy-url".into(), json!(url));
            changed = true;
        }
    }
    if !changed {
        return Ok(None);
    }
    yaml_serde::to_string(&doc)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Suffix of CAPI's admin kubeconfig Secret, `<cluster>-kubeconfig`.
const KUBECONFIG_SUFFIX: &str = "-kubeconfig";

/// Keeps the cluster's `proxy-url` of `urls` in the kubeconfig Secret of every private cluster
/// of `capi`'s management cluster, until `stop`: watches the Secrets CAPI labels with a cluster
/// name and patches (conditionally on the version read, so a regeneration racing it is never
/// undone) each kubeconfig of a private cluster that lacks it. Whether a cluster is private is read from
/// the watchers' index of OpenStackClusters (no request per Secret event); a kubeconfig whose
/// OpenStackCluster the index does not hold yet (its watch lags the Secrets') is looked at again
/// when that cluster's objects next change. Every replica may run it: the write is idempotent.
pub async fn keep_proxy_urls(capi: Arc<Capi>, urls: ProxyUrls, mut stop: watch::Receiver<bool>) {
    let (av, k) = kinds::SECRET;
    let api: Api<DynamicObject> = Api::all_with(capi.mgmt().client().clone(), &resource(av, k));
    let cfg = watcher::Config::default().labels(LABEL_CAPI_CLUSTER_NAME);
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut changes = capi.observer().subscribe();
    // Kubeconfigs without the proxy-url whose cluster the index did not know yet, by namespace
    // and CAPI cluster name (a foreign cluster's stays here, costing nothing).
    let mut unresolved: HashSet<(String, String)> = HashSet::new();
    loop {
        let secret = tokio::select! {
            ev = stream.next() => match ev {
                Some(Ok(Event::Apply(s) | Event::InitApply(s))) => s,
                Some(Ok(Event::Delete(s))) => {
                    if let Some(key) = kubeconfig_of(&s) {
                        unresolved.remove(&key);
                    }
                    continue;
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "watching kubeconfig Secrets failed; retrying");
                    continue;
                }
                None => return,
            },
            changed = changes.recv() => {
                let retry: Vec<(String, String)> = match changed {
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    // Nothing waits: the index is not even looked at.
                    _ if unresolved.is_empty() => Vec::new(),
                    Ok(cluster) => capi
                        .observer()
                        .capi_cluster(cluster)
                        .filter(|key| unresolved.contains(key))
                        .into_iter()
                        .collect(),
                    // Changes were missed: look at every unresolved kubeconfig again.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        unresolved.iter().cloned().collect()
                    }
                };
                for key in retry {
                    let secret = ObjectRef::new(kinds::SECRET, &key.0, &format!("{}{KUBECONFIG_SUFFIX}", key.1));
                    match capi.mgmt().get_value(&secret).await {
                        Ok(Some(s)) => keep(&capi, key, &s, &urls, &mut unresolved).await,
                        Ok(None) => {
                            unresolved.remove(&key);
                        }
                        Err(e) => tracing::warn!(%secret, error = %e, "could not read a kubeconfig Secret; retried on its cluster's next change"),
                    }
                }
                continue;
            }
            _ = stop.changed() => return,
        };
        // Only kubeconfigs are looked at: CAPI labels every Secret of a cluster (CAs,
        // bootstrap data), and those are not turned into JSON at all.
        let Some(key) = kubeconfig_of(&secret) else {
            continue;
        };
        let Ok(secret) = serde_json::to_value(&secret) else {
            continue;
        };
        keep(&capi, key, &secret, &urls, &mut unresolved).await;
    }
}

/// Namespace and CAPI cluster name of CAPI's admin kubeconfig Secret (`<cluster>-kubeconfig`,
/// labelled with its cluster's name); `None` for any other Secret.
fn kubeconfig_of(secret: &DynamicObject) -> Option<(String, String)> {
    let m = &secret.metadata;
    let cluster = m.labels.as_ref()?.get(LABEL_CAPI_CLUSTER_NAME)?;
    (m.name.as_deref()?.strip_suffix(KUBECONFIG_SUFFIX)? == cluster)
        .then(|| (m.namespace.clone().unwrap_or_default(), cluster.clone()))
}

/// [`keep_one`], logging a failure (retried on the Secret's next change).
async fn keep(
    capi: &Capi,
    key: (String, String),
    secret: &Value,
    urls: &ProxyUrls,
    unresolved: &mut HashSet<(String, String)>,
) {
    if let Err(e) = keep_one(capi, key, secret, urls, unresolved).await {
        tracing::warn!(
            secret = %ObjectRef::of(secret).map(|r| r.to_string()).unwrap_or_default(),
            error = %e,
            "could not write proxy-url into a private cluster's kubeconfig; retried on its next change"
        );
    }
}

/// The kubeconfig Secret of CAPI cluster `key` ([`kubeconfig_of`]'s namespace and name): patched
/// when its cluster is private and it lacks the cluster's `proxy-url` of `urls` (the identity is
/// the OpenStackCluster's, named after its `Cluster`); noted in `unresolved` while the index
/// holds no OpenStackCluster with an endpoint for it.
async fn keep_one(
    capi: &Capi,
    key: (String, String),
    secret: &Value,
    urls: &ProxyUrls,
    unresolved: &mut HashSet<(String, String)>,
) -> Result<(), String> {
    unresolved.remove(&key);
    let (ns, cluster) = (key.0.as_str(), key.1.as_str());
    let Some(text) = secret_data(secret, "value") else {
        return Ok(());
    };
    let Some(patched) = with_proxy_url(&text, &urls.for_cluster(&format!("{ns}/{cluster}")))?
    else {
        return Ok(());
    };
    let osc = capi.observer().openstack_cluster(ns, cluster);
    let has_endpoint = osc
        .as_deref()
        .and_then(|o| o.pointer("/spec/controlPlaneEndpoint/host"))
        .and_then(Value::as_str)
        .is_some_and(|h| !h.is_empty());
    if !has_endpoint {
        unresolved.insert(key);
        return Ok(());
    }
    if osc.as_deref().and_then(PrivateApi::of).is_none() {
        return Ok(());
    }
    let version = secret.pointer("/metadata/resourceVersion").cloned();
    let patch = json!({
        "metadata": {"resourceVersion": version},
        "data": {"value": base64::engine::general_purpose::STANDARD.encode(patched)},
    });
    capi.mgmt()
        .merge_patch(
            &ObjectRef::new(kinds::SECRET, ns, &format!("{cluster}{KUBECONFIG_SUFFIX}")),
            &patch,
        )
        .await
        .map_err(|e| e.to_string())?;
    // The URL without the credential: secrets are never logged.
    tracing::info!(
        cluster,
        namespace = ns,
        proxy = urls.base(),
        "proxy-url written into the private cluster's kubeconfig"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn osc(disable_fip: bool) -> Value {
        json!({"metadata": {"name": "c1", "namespace": "magnum-p",
                            "labels": {LABEL_CLUSTER_UUID: "u"}},
               "spec": {"disableAPIServerFloatingIP": disable_fip,
                        "controlPlaneEndpoint": {"host": "10.6.0.250", "port": 6443}},
               "status": {"router": {"id": "r1"}, "network": {"id": "n1"}}})
    }

    #[test]
    fn only_our_clusters_without_an_api_floating_ip_are_private() {
        assert_eq!(
            PrivateApi::of(&osc(true)),
            Some(PrivateApi {
                cluster: "magnum-p/c1".into(),
                host: "10.6.0.250".into(),
                port: 6443,
                router_id: Some("r1".into()),
                network_id: Some("n1".into()),
            })
        );
        assert_eq!(PrivateApi::of(&osc(false)), None);
        let mut foreign = osc(true);
        foreign["metadata"]["labels"] = json!({});
        assert_eq!(PrivateApi::of(&foreign), None, "not created by the service");
        let mut pending = osc(true);
        pending["spec"]["controlPlaneEndpoint"] = json!({"host": "", "port": 0});
        assert_eq!(PrivateApi::of(&pending), None, "no endpoint yet");
    }

    #[test]
    fn proxy_url_is_added_once_and_the_rest_is_kept() {
        let kc = "apiVersion: v1\nkind: Config\nclusters:\n- name: c1\n  cluster:\n    server: https://10.6.0.250:6443\n    certificate-authority-data: Q0E=\nusers:\n- name: a\n  user:\n    client-certificate-data: Qw==\ncurrent-context: x\n";
        let out = with_proxy_url(kc, "http://proxy:3128").unwrap().unwrap();
        let doc: Value = yaml_serde::from_str(&out).unwrap();
        assert_eq!(
            doc["clusters"][0]["cluster"]["proxy-url"],
            "http://proxy:3128"
        );
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://10.6.0.250:6443"
        );
        assert_eq!(doc["users"][0]["user"]["client-certificate-data"], "Qw==");
        assert_eq!(with_proxy_url(&out, "http://proxy:3128").unwrap(), None);
        assert!(with_proxy_url(&out, "http://other:3128").unwrap().is_some());
    }
}
