//! What `magnum-capi api-proxy` lets through: for each private cluster the service placed on the
//! management cluster (`capi::private::PrivateApi`, from their OpenStackClusters), its API
//! endpoint (`ip:port`) and the network namespaces it may be dialled from, by cluster — never
//! by address: every cluster's default network is the same `10.0.0.0/24`, so two tenants'
//! clusters may have the same API address, each behind its own router. Kept current by a watch
//! of the OpenStackClusters.

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
use crate::config::NetnsPattern;

/// One allowed endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `<namespace>/<name>` of the cluster on the management cluster.
    pub cluster: String,
    pub addr: SocketAddr,
    /// Network namespace names to dial from, in order of preference.
    pub namespaces: Vec<String>,
}

/// The allowed endpoints, by cluster (`<namespace>/<name>`, the identity a client's proxy
/// credential proves).
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    by_cluster: HashMap<String, Target>,
}

impl Allowlist {
    /// What one OpenStackCluster allows: its endpoint when it is a private cluster of ours, with
    /// the namespaces `patterns` name for it (a pattern whose id is unknown is skipped). An
    /// endpoint that is not an IP address is left out: CAPO's private endpoint is the load
    /// balancer's fixed IP, and a name would be resolved outside the tenant's network.
    pub fn target(osc: &Value, patterns: &[NetnsPattern]) -> Option<Target> {
        let p = PrivateApi::of(osc)?;
        let ip: IpAddr = p.host.parse().ok()?;
        let namespaces = patterns
            .iter()
            .filter_map(|pat| pat.render(p.router_id.as_deref(), p.network_id.as_deref()))
            .collect();
        Some(Target {
            cluster: p.cluster,
            addr: SocketAddr::new(ip, p.port),
            namespaces,
        })
    }

    /// Whether cluster `key`'s entry is `target` already (`None`: it has none).
    fn holds(&self, key: &str, target: Option<&Target>) -> bool {
        self.by_cluster.get(key) == target
    }

    /// Sets cluster `key`'s entry to `target` (`None`: removes it), leaving every other
    /// cluster's; whether anything changed.
    pub fn set(&mut self, key: &str, target: Option<Target>) -> bool {
        if self.holds(key, target.as_ref()) {
            return false;
        }
        match target {
            Some(t) => self.by_cluster.insert(key.to_string(), t),
            None => self.by_cluster.remove(key),
        };
        true
    }

    /// Cluster `cluster`'s entry (`<namespace>/<name>`), when it is an allowed private cluster.
    pub fn get(&self, cluster: &str) -> Option<&Target> {
        self.by_cluster.get(cluster)
    }

    pub fn len(&self) -> usize {
        self.by_cluster.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_cluster.is_empty()
    }
}

/// Keeps `tx` the allowlist of `client`'s OpenStackClusters (those the service labelled), until
/// `stop`, event by event ([`Follow`]).
pub async fn follow(
    client: kube::Client,
    patterns: Vec<NetnsPattern>,
    tx: watch::Sender<Arc<Allowlist>>,
    mut stop: watch::Receiver<bool>,
) {
    let (av, k) = kinds::OPENSTACK_CLUSTER;
    let api: Api<DynamicObject> = Api::all_with(client, &resource(av, k));
    let cfg = watcher::Config::default().labels(LABEL_CLUSTER_UUID);
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut follow = Follow {
        relist: None,
        target: |o: &DynamicObject| {
            serde_json::to_value(o)
                .ok()
                .and_then(|v| Allowlist::target(&v, &patterns))
        },
    };
    loop {
        let ev = tokio::select! {
            ev = stream.next() => ev,
            _ = stop.changed() => return,
        };
        let changed = match ev {
            Some(Ok(ev)) => follow.event(ev, &tx),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "watching OpenStackClusters failed; retrying");
                false
            }
            None => return,
        };
        if changed {
            tracing::info!(
                endpoints = tx.borrow().len(),
                "allowlist of private cluster APIs changed"
            );
        }
    }
}

/// What [`follow`] keeps between watch events: the relist being gathered, and `target`, which
/// derives one OpenStackCluster's entry ([`Allowlist::target`]).
struct Follow<F> {
    relist: Option<Allowlist>,
    target: F,
}

impl<F: Fn(&DynamicObject) -> Option<Target>> Follow<F> {
    /// Applies one watch event to the list `tx` holds; whether it changed. An event derives its
    /// own cluster's entry only (never every cluster's again), and the list, shared with the
    /// tunnels, is copied only when an entry changes while one holds it; a relist replaces it
    /// whole.
    fn event(&mut self, ev: Event<DynamicObject>, tx: &watch::Sender<Arc<Allowlist>>) -> bool {
        let key = |o: &DynamicObject| {
            format!(
                "{}/{}",
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default()
            )
        };
        match ev {
            Event::Init => {
                self.relist = Some(Allowlist::default());
                false
            }
            Event::InitApply(o) => {
                if let Some(r) = self.relist.as_mut() {
                    r.set(&key(&o), (self.target)(&o));
                }
                false
            }
            Event::InitDone => {
                let list = self.relist.take().unwrap_or_default();
                tx.send_if_modified(|old| {
                    let same = old.by_cluster == list.by_cluster;
                    if !same {
                        *old = Arc::new(list);
                    }
                    !same
                })
            }
            Event::Apply(o) => {
                let (k, t) = (key(&o), (self.target)(&o));
                tx.send_if_modified(|old| {
                    !old.holds(&k, t.as_ref()) && Arc::make_mut(old).set(&k, t)
                })
            }
            Event::Delete(o) => {
                let k = key(&o);
                tx.send_if_modified(|old| !old.holds(&k, None) && Arc::make_mut(old).set(&k, None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn osc_in(ns: &str, name: &str, host: &str, disable_fip: bool, router: Option<&str>) -> Value {
        json!({"metadata": {"name": name, "namespace": ns,
                            "labels": {LABEL_CLUSTER_UUID: "u"}},
               "spec": {"disableAPIServerFloatingIP": disable_fip,
                        "controlPlaneEndpoint": {"host": host, "port": 6443}},
               "status": {"router": router.map(|r| json!({"id": r})), "network": {"id": "n1"}}})
    }

    fn osc(name: &str, host: &str, disable_fip: bool, router: Option<&str>) -> Value {
        osc_in("magnum-p", name, host, disable_fip, router)
    }

    fn patterns(p: &[&str]) -> Vec<NetnsPattern> {
        p.iter()
            .map(|p| NetnsPattern::try_from(p.to_string()).unwrap())
            .collect()
    }

    #[test]
    fn each_event_updates_its_own_clusters_entry_and_leaves_the_others() {
        let patterns = patterns(&["qrouter-{router_id}"]);
        let target = |v: &Value| Allowlist::target(v, &patterns);
        let (a, b) = ("magnum-p/a", "magnum-p/b");
        let mut list = Allowlist::default();
        assert!(list.set(a, target(&osc("a", "10.6.0.250", true, Some("r1")))));
        assert!(list.set(b, target(&osc("b", "10.7.0.250", true, Some("r2")))));
        assert!(
            !list.set(a, target(&osc("a", "10.6.0.250", true, Some("r1")))),
            "the same entry again changes nothing"
        );
        // a's endpoint moves: its entry follows, b's entry stays.
        assert!(list.set(a, target(&osc("a", "10.6.0.251", true, Some("r1")))));
        assert_eq!(list.get(a).unwrap().addr.to_string(), "10.6.0.251:6443");
        assert_eq!(list.get(b).unwrap().namespaces, ["qrouter-r2"]);
        // b's router changes in its status: its namespaces follow.
        assert!(list.set(b, target(&osc("b", "10.7.0.250", true, Some("r3")))));
        assert_eq!(list.get(b).unwrap().namespaces, ["qrouter-r3"]);
        // a becomes public, then b is deleted: nothing is left.
        assert!(list.set(a, target(&osc("a", "10.6.0.251", false, Some("r1")))));
        assert!(list.set(b, None));
        assert!(!list.set(b, None));
        assert!(list.is_empty());
    }

    /// Every cluster's default network is the same `10.0.0.0/24`: two tenants' clusters with
    /// the same API address each keep their own router, and one's delete leaves the other's.
    #[test]
    fn clusters_with_the_same_api_address_keep_their_own_entries() {
        let patterns = patterns(&["qrouter-{router_id}"]);
        let target = |v: &Value| Allowlist::target(v, &patterns);
        let (a, b) = ("magnum-p1/c", "magnum-p2/c");
        let mut list = Allowlist::default();
        list.set(
            a,
            target(&osc_in("magnum-p1", "c", "10.0.0.5", true, Some("r1"))),
        );
        list.set(
            b,
            target(&osc_in("magnum-p2", "c", "10.0.0.5", true, Some("r2"))),
        );
        assert_eq!(list.get(a).unwrap().namespaces, ["qrouter-r1"]);
        assert_eq!(list.get(b).unwrap().namespaces, ["qrouter-r2"]);
        assert!(list.set(a, None));
        assert_eq!(list.get(b).unwrap().namespaces, ["qrouter-r2"]);
        assert_eq!(list.get(b).unwrap().addr.to_string(), "10.0.0.5:6443");
    }

    #[test]
    fn a_watch_event_derives_its_own_clusters_entry_only_and_copies_the_list_only_on_a_change() {
        let patterns = patterns(&["qrouter-{router_id}"]);
        let derived = std::cell::Cell::new(0);
        let mut follow = Follow {
            relist: None,
            target: |o: &DynamicObject| {
                derived.set(derived.get() + 1);
                Allowlist::target(&serde_json::to_value(o).unwrap(), &patterns)
            },
        };
        let obj = |i: usize, host: &str| -> DynamicObject {
            let mut v = osc(&format!("c{i}"), host, true, Some("r1"));
            v["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1beta1");
            v["kind"] = json!("OpenStackCluster");
            serde_json::from_value(v).unwrap()
        };
        let addr = |list: &Allowlist, i: usize| {
            list.get(&format!("magnum-p/c{i}"))
                .map(|t| t.addr.to_string())
        };
        let (tx, _rx) = watch::channel(Arc::new(Allowlist::default()));
        assert!(!follow.event(Event::Init, &tx));
        for i in 0..10 {
            let host = format!("10.6.0.{i}");
            assert!(!follow.event(Event::InitApply(obj(i, &host)), &tx));
        }
        assert!(follow.event(Event::InitDone, &tx));
        assert_eq!((tx.borrow().len(), derived.get()), (10, 10));

        // A tunnel holds the list while events come.
        let held = tx.borrow().clone();
        assert!(!follow.event(Event::Apply(obj(3, "10.6.0.3")), &tx));
        assert_eq!(derived.get(), 11, "one derivation for one event");
        assert!(Arc::ptr_eq(&held, &tx.borrow()), "not copied for no change");
        assert!(follow.event(Event::Apply(obj(3, "10.6.1.3")), &tx));
        assert_eq!(derived.get(), 12, "one derivation for one event");
        assert_eq!(addr(&tx.borrow(), 3).as_deref(), Some("10.6.1.3:6443"));
        assert_eq!(
            addr(&held, 3).as_deref(),
            Some("10.6.0.3:6443"),
            "the held list is not changed"
        );
        assert!(follow.event(Event::Delete(obj(4, "10.6.0.4")), &tx));
        assert_eq!(derived.get(), 12, "a delete derives nothing");
        assert_eq!(tx.borrow().len(), 9);
    }

    #[test]
    fn only_private_ip_endpoints_are_allowed_with_their_namespaces_in_order() {
        let patterns = patterns(&["qrouter-{router_id}", "qdhcp-{network_id}", "fixed"]);
        let mut list = Allowlist::default();
        for osc in [
            osc("private", "10.6.0.250", true, Some("r1")),
            osc("no-router", "10.7.0.250", true, None),
            osc("public", "203.0.113.5", false, Some("r2")),
            osc("named", "api.example.com", true, Some("r3")),
        ] {
            let key = format!("magnum-p/{}", osc["metadata"]["name"].as_str().unwrap());
            list.set(&key, Allowlist::target(&osc, &patterns));
        }
        assert_eq!(list.len(), 2);
        let t = list.get("magnum-p/private").unwrap();
        assert_eq!(t.cluster, "magnum-p/private");
        assert_eq!(t.addr.to_string(), "10.6.0.250:6443");
        assert_eq!(t.namespaces, ["qrouter-r1", "qdhcp-n1", "fixed"]);
        assert_eq!(
            list.get("magnum-p/no-router").unwrap().namespaces,
            ["qdhcp-n1", "fixed"]
        );
        assert!(list.get("magnum-p/public").is_none(), "a public API");
        assert!(list.get("magnum-p/named").is_none(), "not an IP address");
    }
}
