//! What `magnum-capi api-proxy` lets through: the API endpoints (`ip:port`) of the private
//! clusters the service placed on the management cluster (`capi::private::PrivateApi`, from
//! their OpenStackClusters), each with the network namespaces it may be dialled from; kept
//! current by a watch of the OpenStackClusters.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;

use crate::capi::apply::resource;
use crate::capi::private::PrivateApi;
use crate::capi::{LABEL_CLUSTER_UUID, kinds};

/// One allowed endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `<namespace>/<name>` of the cluster on the management cluster.
    pub cluster: String,
    pub addr: SocketAddr,
    /// Network namespace names to dial from, in order of preference.
    pub namespaces: Vec<String>,
}

/// The allowed endpoints, by address.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    by_addr: HashMap<SocketAddr, Target>,
}

impl Allowlist {
    /// The private clusters among `oscs` (OpenStackClusters as JSON); `patterns` name their
    /// namespaces (`{router_id}`, `{network_id}`; a pattern whose id is unknown is skipped). An
    /// endpoint that is not an IP address is left out: CAPO's private endpoint is the load
    /// balancer's fixed IP, and a name would be resolved outside the tenant's network.
    pub fn build<'a>(oscs: impl IntoIterator<Item = &'a Value>, patterns: &[String]) -> Self {
        let by_addr = oscs
            .into_iter()
            .filter_map(PrivateApi::of)
            .filter_map(|p| {
                let ip: IpAddr = p.host.parse().ok()?;
                let namespaces = patterns
                    .iter()
                    .filter_map(|pat| namespace_name(pat, &p))
                    .collect();
                let addr = SocketAddr::new(ip, p.port);
                Some((
                    addr,
                    Target {
                        cluster: p.cluster,
                        addr,
                        namespaces,
                    },
                ))
            })
            .collect();
        Allowlist { by_addr }
    }

    /// The target a CONNECT authority (`ip:port`, `[v6]:port`) names, when allowed.
    pub fn get(&self, authority: &str) -> Option<&Target> {
        self.by_addr.get(&authority.parse::<SocketAddr>().ok()?)
    }

    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }
}

/// `pattern` with the private API's router and network ids, `None` when it needs one unknown.
fn namespace_name(pattern: &str, p: &PrivateApi) -> Option<String> {
    let mut name = pattern.to_string();
    for (key, value) in [
        ("{router_id}", &p.router_id),
        ("{network_id}", &p.network_id),
    ] {
        if name.contains(key) {
            name = name.replace(key, value.as_deref()?);
        }
    }
    Some(name)
}

/// Keeps `tx` the allowlist of `client`'s OpenStackClusters (those the service labelled), until
/// `stop`; a relist replaces it whole.
pub async fn follow(
    client: kube::Client,
    patterns: Vec<String>,
    tx: watch::Sender<Arc<Allowlist>>,
    mut stop: watch::Receiver<bool>,
) {
    let (av, k) = kinds::OPENSTACK_CLUSTER;
    let api: Api<DynamicObject> = Api::all_with(client, &resource(av, k));
    let cfg = watcher::Config::default().labels(LABEL_CLUSTER_UUID);
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let (mut live, mut relist) = (HashMap::<String, Value>::new(), None);
    loop {
        let ev = tokio::select! {
            ev = stream.next() => ev,
            _ = stop.changed() => return,
        };
        let key = |o: &DynamicObject| {
            format!(
                "{}/{}",
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default()
            )
        };
        match ev {
            Some(Ok(Event::Init)) => relist = Some(HashMap::new()),
            Some(Ok(Event::InitApply(o))) => {
                if let (Some(r), Ok(v)) = (relist.as_mut(), serde_json::to_value(&o)) {
                    r.insert(key(&o), v);
                }
                continue;
            }
            Some(Ok(Event::InitDone)) => live = relist.take().unwrap_or_default(),
            Some(Ok(Event::Apply(o))) => {
                if let Ok(v) = serde_json::to_value(&o) {
                    live.insert(key(&o), v);
                }
            }
            Some(Ok(Event::Delete(o))) => {
                live.remove(&key(&o));
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "watching OpenStackClusters failed; retrying");
                continue;
            }
            None => return,
        }
        let list = Allowlist::build(live.values(), &patterns);
        tx.send_if_modified(|old| {
            let same = old.by_addr == list.by_addr;
            if !same {
                tracing::info!(
                    endpoints = list.len(),
                    "allowlist of private cluster APIs changed"
                );
                *old = Arc::new(list);
            }
            !same
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn osc(name: &str, host: &str, disable_fip: bool, router: Option<&str>) -> Value {
        json!({"metadata": {"name": name, "namespace": "magnum-p",
                            "labels": {LABEL_CLUSTER_UUID: "u"}},
               "spec": {"disableAPIServerFloatingIP": disable_fip,
                        "controlPlaneEndpoint": {"host": host, "port": 6443}},
               "status": {"router": router.map(|r| json!({"id": r})), "network": {"id": "n1"}}})
    }

    #[test]
    fn only_private_ip_endpoints_are_allowed_with_their_namespaces_in_order() {
        let patterns = ["qrouter-{router_id}", "qdhcp-{network_id}", "fixed"].map(String::from);
        let oscs = [
            osc("private", "10.6.0.250", true, Some("r1")),
            osc("no-router", "10.7.0.250", true, None),
            osc("public", "203.0.113.5", false, Some("r2")),
            osc("named", "api.example.com", true, Some("r3")),
        ];
        let list = Allowlist::build(&oscs, &patterns);
        assert_eq!(list.len(), 2);
        let t = list.get("10.6.0.250:6443").unwrap();
        assert_eq!(t.cluster, "magnum-p/private");
        assert_eq!(t.namespaces, ["qrouter-r1", "qdhcp-n1", "fixed"]);
        assert_eq!(
            list.get("10.7.0.250:6443").unwrap().namespaces,
            ["qdhcp-n1", "fixed"]
        );
        assert!(list.get("10.6.0.250:22").is_none(), "another port");
        assert!(list.get("203.0.113.5:6443").is_none(), "a public API");
        assert!(list.get("api.example.com:6443").is_none());
        assert!(list.get("garbage").is_none());
    }
}
