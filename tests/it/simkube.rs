//! The simulated management cluster driven through the real kube client over HTTP: the API
//! semantics the driver relies on (SSA, selectors, watches, /status, finalizers, GC, errors) and
//! the CAPI/CAPO simulator (provisioning, scaling, rollout, injected failures, deletion).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::Kubeconfig;
use kube::runtime::watcher;
use magnum_capi::capi::pki::{generate_ca, verifies};
use magnum_capi::simkube::{Resource, SimCluster, SimOptions};
use serde_json::{Value, json};

use crate::common::wait::{deadline, until};

const UUID_LABEL: &str = "magnum.openstack.org/cluster-uuid";

fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn api(sim: &SimCluster, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(sim.client(), ns, &resource(api_version, kind))
}

fn all(sim: &SimCluster, api_version: &str, kind: &str) -> Api<DynamicObject> {
    Api::all_with(sim.client(), &resource(api_version, kind))
}

fn ssa() -> PatchParams {
    PatchParams::apply("magnum-capi").force()
}

async fn start() -> SimCluster {
    SimCluster::start(SimOptions::for_tests()).await.unwrap()
}

async fn namespace(sim: &SimCluster, ns: &str) {
    let ns_obj: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .unwrap();
    Api::<Namespace>::all(sim.client())
        .patch(ns, &ssa(), &Patch::Apply(&ns_obj))
        .await
        .unwrap();
}

/// Applies one object (apiVersion/kind/metadata.name/namespace from the body).
async fn apply(sim: &SimCluster, obj: Value) -> DynamicObject {
    let av = obj["apiVersion"].as_str().unwrap().to_string();
    let kind = obj["kind"].as_str().unwrap().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
    let dynobj: DynamicObject = serde_json::from_value(obj).unwrap();
    api(sim, &ns, &av, &kind)
        .patch(&name, &ssa(), &Patch::Apply(&dynobj))
        .await
        .unwrap()
}

fn widget(name: &str, uuid: &str, size: i64) -> Value {
    json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "labels": {UUID_LABEL: uuid}},
        "spec": {"size": size},
    })
}

fn api_status(err: kube::Error) -> (u16, String, String) {
    match err {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

// ---- API semantics ----

#[tokio::test]
async fn server_side_apply_creates_then_merges_and_bumps_generation_on_spec_changes() {
    let sim = start().await;
    let widgets = api(&sim, "default", "example.com/v1", "Widget");
    let mut body = widget("w1", "u1", 1);
    body["status"] = json!({"ready": true});
    let created = apply(&sim, body).await;
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert!(
        created.data.get("status").is_none(),
        "status is a subresource"
    );

    let same = apply(&sim, widget("w1", "u1", 1)).await;
    assert_eq!(
        same.metadata.resource_version,
        created.metadata.resource_version
    );
    let mut changed = widget("w1", "u1", 2);
    changed["metadata"]["labels"]["extra"] = json!("yes");
    let changed = apply(&sim, changed).await;
    assert_eq!(changed.metadata.generation, Some(2));
    assert_eq!(changed.data["spec"]["size"], 2);
    assert_eq!(changed.metadata.uid, created.metadata.uid);
    assert_eq!(widgets.get("w1").await.unwrap().labels()["extra"], "yes");
    sim.shutdown().await;
}

#[tokio::test]
async fn lists_filter_by_label_selectors_across_namespaces() {
    let sim = start().await;
    namespace(&sim, "p1").await;
    namespace(&sim, "p2").await;
    for (ns, name, uuid) in [
        ("p1", "a", Some("u1")),
        ("p2", "b", Some("u2")),
        ("p2", "c", None),
    ] {
        let mut w = widget(name, uuid.unwrap_or_default(), 1);
        w["metadata"]["namespace"] = json!(ns);
        if uuid.is_none() {
            w["metadata"]["labels"] = json!({"other": "x"});
        }
        apply(&sim, w).await;
    }
    let everywhere = all(&sim, "example.com/v1", "Widget");
    let names = |l: kube::core::ObjectList<DynamicObject>| {
        let mut n: Vec<String> = l
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .collect();
        n.sort();
        n
    };
    let list = everywhere
        .list(&ListParams::default().labels(UUID_LABEL))
        .await
        .unwrap();
    assert!(list.metadata.resource_version.is_some());
    assert_eq!(names(list), ["a", "b"]);
    let eq = everywhere
        .list(&ListParams::default().labels(&format!("{UUID_LABEL}=u2")))
        .await
        .unwrap();
    assert_eq!(names(eq), ["b"]);
    let ne = everywhere
        .list(&ListParams::default().labels(&format!("{UUID_LABEL}!=u2")))
        .await
        .unwrap();
    assert_eq!(names(ne), ["a", "c"]);
    let absent = everywhere
        .list(&ListParams::default().labels(&format!("!{UUID_LABEL}")))
        .await
        .unwrap();
    assert_eq!(names(absent), ["c"]);
    let one_ns = api(&sim, "p2", "example.com/v1", "Widget")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(names(one_ns), ["b", "c"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn watcher_sees_init_apply_and_delete_and_watches_resume_from_a_version() {
    let sim = start().await;
    apply(&sim, widget("before", "u0", 1)).await;
    let everywhere = all(&sim, "example.com/v1", "Widget");
    let mut stream = watcher(
        everywhere.clone(),
        watcher::Config::default().labels(UUID_LABEL),
    )
    .boxed();
    let mut seen = Vec::new();
    while !seen.contains(&"InitDone".to_string()) {
        let ev = tokio::time::timeout(deadline(), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(match ev {
            watcher::Event::Init => "Init".to_string(),
            watcher::Event::InitApply(o) => format!("InitApply({})", o.name_any()),
            watcher::Event::InitDone => "InitDone".to_string(),
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(seen, ["Init", "InitApply(before)", "InitDone"]);

    let created = apply(&sim, widget("w", "u1", 1)).await;
    apply(&sim, widget("w", "u1", 2)).await;
    api(&sim, "default", "example.com/v1", "Widget")
        .delete("w", &DeleteParams::default())
        .await
        .unwrap();
    let mut events = Vec::new();
    while events.len() < 3 {
        match tokio::time::timeout(deadline(), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::Apply(o) => events.push(format!(
                "Apply({}, {})",
                o.name_any(),
                o.data["spec"]["size"]
            )),
            watcher::Event::Delete(o) => events.push(format!("Delete({})", o.name_any())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(events, ["Apply(w, 1)", "Apply(w, 2)", "Delete(w)"]);

    // A raw watch from the creation's resourceVersion replays what came after it.
    let rv = created.metadata.resource_version.unwrap();
    let raw = everywhere
        .watch(&WatchParams::default().labels(UUID_LABEL).timeout(5), &rv)
        .await
        .unwrap();
    let replay: Vec<String> = raw
        .take(2)
        .map(|e| match e.unwrap() {
            WatchEvent::Modified(o) => format!("MODIFIED {}", o.name_any()),
            WatchEvent::Deleted(o) => format!("DELETED {}", o.name_any()),
            other => format!("{other:?}"),
        })
        .collect()
        .await;
    assert_eq!(replay, ["MODIFIED w", "DELETED w"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn label_selected_watches_see_objects_enter_and_leave_the_selection() {
    let sim = start().await;
    let everywhere = all(&sim, "example.com/v1", "Widget");
    let mut stream = watcher(everywhere, watcher::Config::default().labels(UUID_LABEL)).boxed();
    loop {
        if let watcher::Event::InitDone = tokio::time::timeout(deadline(), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            break;
        }
    }
    let mut w = widget("w", "u1", 1);
    w["metadata"]["labels"] = json!({"other": "x"});
    apply(&sim, w).await;
    let widgets = api(&sim, "default", "example.com/v1", "Widget");
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {UUID_LABEL: "u1"}}})),
        )
        .await
        .unwrap();
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {UUID_LABEL: null}}})),
        )
        .await
        .unwrap();
    let mut events = Vec::new();
    while events.len() < 2 {
        match tokio::time::timeout(deadline(), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::Apply(o) => events.push(format!("Apply({})", o.name_any())),
            watcher::Event::Delete(o) => events.push(format!("Delete({})", o.name_any())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(events, ["Apply(w)", "Delete(w)"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn streaming_watches_end_the_initial_events_with_a_bookmark_and_bookmark_progress() {
    let sim = start().await;
    apply(&sim, widget("a", "u1", 1)).await;
    let everywhere = all(&sim, "example.com/v1", "Widget");
    let mut stream = everywhere
        .watch(&WatchParams::default().initial_events().timeout(20), "0")
        .await
        .unwrap()
        .boxed();
    let mut next = async || {
        tokio::time::timeout(deadline(), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    match next().await {
        WatchEvent::Added(o) => assert_eq!(o.name_any(), "a"),
        other => panic!("expected ADDED a, got {other:?}"),
    }
    match next().await {
        WatchEvent::Bookmark(b) => assert_eq!(
            b.metadata.annotations.get("k8s.io/initial-events-end"),
            Some(&"true".to_string())
        ),
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    let b = apply(&sim, widget("b", "u1", 1)).await;
    match next().await {
        WatchEvent::Added(o) => assert_eq!(o.name_any(), "b"),
        other => panic!("expected ADDED b, got {other:?}"),
    }
    // The periodic bookmark (every second in tests) carries the newest version seen.
    match next().await {
        WatchEvent::Bookmark(bm) => {
            assert_eq!(
                Some(bm.metadata.resource_version),
                b.metadata.resource_version
            );
            assert!(bm.metadata.annotations.is_empty());
        }
        other => panic!("expected a progress bookmark, got {other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn status_subresource_and_main_resource_change_only_their_own_part() {
    let sim = start().await;
    let widgets = api(&sim, "default", "example.com/v1", "Widget");
    apply(&sim, widget("w", "u1", 1)).await;
    let patched = widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}, "spec": {"size": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["ready"], true);
    assert_eq!(patched.data["spec"]["size"], 1);
    assert_eq!(patched.metadata.generation, Some(1));
    let main = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": false}, "spec": {"size": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(main.data["status"]["ready"], true);
    assert_eq!(main.data["spec"]["size"], 3);
    let json_patched = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(
                    json!([{"op": "replace", "path": "/spec/size", "value": 4}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(json_patched.data["spec"]["size"], 4);
    assert_eq!(
        widgets.get_status("w").await.unwrap().data["status"]["ready"],
        true
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn delete_waits_for_finalizers_and_removing_the_last_one_removes_the_object() {
    let sim = start().await;
    let widgets = api(&sim, "default", "example.com/v1", "Widget");
    let mut w = widget("w", "u1", 1);
    w["metadata"]["finalizers"] = json!(["example.com/keep"]);
    apply(&sim, w).await;
    let pending = widgets.delete("w", &DeleteParams::default()).await.unwrap();
    let pending = pending
        .left()
        .expect("object returned while finalizers remain");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(
        widgets
            .get("w")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": []}})),
        )
        .await
        .unwrap();
    let (code, reason, _) = api_status(widgets.get("w").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    sim.shutdown().await;
}

#[tokio::test]
async fn removing_an_owner_garbage_collects_its_dependents() {
    let sim = start().await;
    let owner = apply(&sim, widget("owner", "u1", 1)).await;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "owned", "namespace": "default", "ownerReferences": [{
            "apiVersion": "example.com/v1", "kind": "Widget", "name": "owner",
            "uid": owner.metadata.uid.clone().unwrap(),
        }]},
        "stringData": {"k": "v"},
    }))
    .unwrap();
    let secrets = Api::<Secret>::namespaced(sim.client(), "default");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    api(&sim, "default", "example.com/v1", "Widget")
        .delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    assert!(secrets.get_opt("owned").await.unwrap().is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn errors_are_kubernetes_status_objects() {
    let rejects_bad = Arc::new(|obj: &Value| {
        if obj["spec"]["size"].as_i64().is_some_and(|s| s < 0) {
            Err(vec!["spec.size: Invalid value: must be >= 0".to_string()])
        } else {
            Ok(())
        }
    });
    let sim = SimCluster::start(SimOptions {
        validator: Some(rejects_bad),
        watch_history: 5,
        ..SimOptions::for_tests()
    })
    .await
    .unwrap();
    let widgets = api(&sim, "default", "example.com/v1", "Widget");
    let (code, reason, message) = api_status(widgets.get("nope").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert!(message.contains("\"nope\" not found"), "{message}");

    let created = apply(&sim, widget("w", "u1", 1)).await;
    let dup: DynamicObject = serde_json::from_value(widget("w", "u1", 1)).unwrap();
    let (code, reason, _) = api_status(
        widgets
            .create(&PostParams::default(), &dup)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));

    apply(&sim, widget("w", "u1", 2)).await;
    let (code, reason, _) = api_status(
        widgets
            .replace("w", &PostParams::default(), &created)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));

    let bad: DynamicObject = serde_json::from_value(widget("w", "u1", -1)).unwrap();
    let (code, reason, message) = api_status(
        widgets
            .patch("w", &ssa(), &Patch::Apply(&bad))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(message.contains("must be >= 0"), "{message}");

    for i in 0..10 {
        apply(&sim, widget(&format!("x{i}"), "u1", 1)).await;
    }
    let mut stream = widgets
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match stream.next().await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn many_concurrent_clients_each_see_their_own_writes() {
    let sim = Arc::new(start().await);
    let mut tasks = Vec::new();
    for i in 0..24 {
        let sim = sim.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("c{i}");
            for size in 1..=3 {
                apply(&sim, widget(&name, &format!("u{i}"), size)).await;
            }
            let got = api(&sim, "default", "example.com/v1", "Widget")
                .get(&name)
                .await
                .unwrap();
            assert_eq!(got.data["spec"]["size"], 3);
            assert_eq!(got.metadata.generation, Some(3));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let listed = all(&sim, "example.com/v1", "Widget")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 24);
}

// ---- the CAPI/CAPO simulator ----

const NS: &str = "magnum-p1";
const CLUSTER: &str = "kdemo";

/// A self-signed CA: (certificate PEM, key PEM).
fn new_ca(cn: &str) -> (String, String) {
    let ca = generate_ca(cn).unwrap();
    (ca.cert_pem, ca.key_pem)
}

/// The cluster's `<cluster>-{suffix}` CA Secret.
fn tls_secret(suffix: &str, crt: &str, key: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": format!("{CLUSTER}-{suffix}"), "namespace": NS, "labels": {UUID_LABEL: "u-demo"}},
        "data": {"tls.crt": STANDARD.encode(crt), "tls.key": STANDARD.encode(key)},
    })
}

fn ext_net() -> Value {
    json!({"id": "5f8d2d42-6a3b-4c8e-9d5a-0b1c2d3e4f50"})
}

/// A hand-written minimal cluster: `cp` control-plane and `workers` worker machines.
fn cluster_objects(
    cp: i64,
    workers: i64,
    worker_flavor: &str,
    external_network: Value,
) -> Vec<Value> {
    let labels = json!({UUID_LABEL: "u-demo"});
    let meta = |name: &str| json!({"name": name, "namespace": NS, "labels": labels});
    let infra_ref = |kind: &str, name: &str| json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": kind, "name": name});
    let machine_template = |name: &str, flavor: &str| {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineTemplate",
            "metadata": meta(name),
            "spec": {"template": {"spec": {"flavor": flavor, "image": {"filter": {"name": "ubuntu-2204-kube-v1.33.1"}}, "sshKeyName": "k"}}},
        })
    };
    let (ca, ca_key) = new_ca("kubernetes");
    vec![
        tls_secret("ca", &ca, &ca_key),
        machine_template(&format!("{CLUSTER}-control-plane"), "m1.medium"),
        machine_template(&format!("{CLUSTER}-md-0"), worker_flavor),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": meta(&format!("{CLUSTER}-md-0")),
            "spec": {"template": {"spec": {"format": "cloud-config"}}},
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": meta(CLUSTER),
            "spec": {
                "identityRef": {"cloudName": "openstack", "name": format!("{CLUSTER}-cloud-config"), "type": "Secret"},
                "externalNetwork": external_network,
                "apiServerLoadBalancer": {"enabled": true},
                "managedSubnets": [{"cidr": "10.6.0.0/24"}],
            },
        }),
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": meta(&format!("{CLUSTER}-control-plane")),
            "spec": {
                "replicas": cp, "version": "v1.33.1", "kubeadmConfigSpec": {"format": "cloud-config"},
                "machineTemplate": {
                    "metadata": {"labels": {UUID_LABEL: "u-demo", "magnum.openstack.org/role": "master"}},
                    "spec": {"infrastructureRef": infra_ref("OpenStackMachineTemplate", &format!("{CLUSTER}-control-plane"))},
                },
            },
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": meta(&format!("{CLUSTER}-md-0")),
            "spec": {
                "clusterName": CLUSTER, "replicas": workers, "selector": {"matchLabels": {}},
                "template": {
                    "metadata": {"labels": {UUID_LABEL: "u-demo", "magnum.openstack.org/role": "worker"}},
                    "spec": {
                        "clusterName": CLUSTER, "version": "v1.33.1",
                        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": format!("{CLUSTER}-md-0")}},
                        "infrastructureRef": infra_ref("OpenStackMachineTemplate", &format!("{CLUSTER}-md-0")),
                    },
                },
            },
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
            "metadata": meta(&format!("{CLUSTER}-workers")),
            "spec": {"clusterName": CLUSTER, "selector": {"matchLabels": {"magnum.openstack.org/role": "worker"}}},
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": meta(CLUSTER),
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "serviceDomain": "cluster.local"},
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": format!("{CLUSTER}-control-plane")},
                "infrastructureRef": infra_ref("OpenStackCluster", CLUSTER),
            },
        }),
    ]
}

async fn create_cluster(sim: &SimCluster, objects: Vec<Value>) {
    namespace(sim, NS).await;
    for obj in objects {
        apply(sim, obj).await;
    }
}

fn condition<'a>(obj: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn is_true(obj: &DynamicObject, kind: &str) -> bool {
    condition(obj, kind).is_some_and(|c| c["status"] == "True")
}

async fn wait_available(sim: &SimCluster) -> DynamicObject {
    let clusters = api(sim, NS, "cluster.x-k8s.io/v1beta2", "Cluster");
    until("the Cluster to become Available", || {
        let clusters = clusters.clone();
        async move {
            clusters
                .get(CLUSTER)
                .await
                .ok()
                .filter(|c| is_true(c, "Available"))
        }
    })
    .await
}

async fn machines(sim: &SimCluster, selector: &str) -> Vec<DynamicObject> {
    let mut items = api(sim, NS, "cluster.x-k8s.io/v1beta2", "Machine")
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items;
    items.sort_by_key(|m| m.name_any());
    items
}

#[tokio::test]
async fn a_minimal_cluster_becomes_available_with_addresses_and_a_kubeconfig() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(3, 2, "m1.small", ext_net())).await;
    let cluster = wait_available(&sim).await;
    assert_eq!(cluster.data["status"]["phase"], "Provisioned");
    assert_eq!(
        cluster.data["status"]["initialization"]["controlPlaneInitialized"],
        true
    );
    assert_eq!(cluster.data["status"]["controlPlane"]["readyReplicas"], 3);
    assert_eq!(cluster.data["status"]["workers"]["readyReplicas"], 2);
    assert!(
        cluster
            .finalizers()
            .contains(&"cluster.cluster.x-k8s.io".to_string())
    );
    let host = cluster.data["spec"]["controlPlaneEndpoint"]["host"]
        .as_str()
        .unwrap()
        .to_string();
    // The simulated load balancer is a loopback listener: nothing leads off the machine.
    assert_eq!(host, "127.0.0.1");
    for kind in [
        "InfrastructureReady",
        "ControlPlaneAvailable",
        "WorkersAvailable",
    ] {
        assert!(is_true(&cluster, kind), "{kind}");
    }

    let osc = api(
        &sim,
        NS,
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackCluster",
    )
    .get(CLUSTER)
    .await
    .unwrap();
    assert_eq!(osc.data["status"]["ready"], true);
    assert_eq!(
        osc.data["status"]["apiServerLoadBalancer"]["ip"],
        host.as_str()
    );
    assert_eq!(
        osc.data["status"]["network"]["subnets"][0]["cidr"],
        "10.6.0.0/24"
    );

    let kcp = api(
        &sim,
        NS,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
    )
    .get(&format!("{CLUSTER}-control-plane"))
    .await
    .unwrap();
    assert_eq!(kcp.data["status"]["readyReplicas"], 3);
    assert_eq!(kcp.data["status"]["version"], "v1.33.1");
    for kind in [
        "Available",
        "MachinesReady",
        "EtcdClusterHealthy",
        "ControlPlaneComponentsHealthy",
    ] {
        assert!(is_true(&kcp, kind), "{kind}");
    }

    let all_machines = machines(&sim, UUID_LABEL).await;
    assert_eq!(all_machines.len(), 5);
    let cp = machines(&sim, "cluster.x-k8s.io/control-plane").await;
    assert_eq!(cp.len(), 3);
    for m in &all_machines {
        assert_eq!(m.data["status"]["phase"], "Running");
        assert_eq!(m.labels()["cluster.x-k8s.io/cluster-name"], CLUSTER);
        assert_eq!(m.data["status"]["addresses"][0]["type"], "InternalIP");
        assert!(
            m.data["status"]["addresses"][0]["address"]
                .as_str()
                .unwrap()
                .starts_with("127.0.0."),
            "node addresses are on loopback"
        );
        assert_eq!(m.data["status"]["nodeRef"]["name"], m.name_any().as_str());
        for kind in [
            "Ready",
            "Available",
            "NodeReady",
            "InfrastructureReady",
            "BootstrapConfigReady",
        ] {
            assert!(is_true(m, kind), "{} {kind}", m.name_any());
        }
    }
    assert_eq!(
        cp[0].labels()["cluster.x-k8s.io/control-plane-name"],
        format!("{CLUSTER}-control-plane")
    );
    assert_eq!(cp[0].labels()["magnum.openstack.org/role"], "master");
    let workers = machines(&sim, "cluster.x-k8s.io/deployment-name").await;
    assert_eq!(workers.len(), 2);
    assert_eq!(workers[0].labels()["magnum.openstack.org/role"], "worker");

    let secret = Api::<Secret>::namespaced(sim.client(), NS)
        .get(&format!("{CLUSTER}-kubeconfig"))
        .await
        .unwrap();
    assert_eq!(secret.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
    assert_eq!(
        secret.metadata.labels.unwrap()["cluster.x-k8s.io/cluster-name"],
        CLUSTER
    );
    let kubeconfig: Value = yaml_serde::from_slice(&secret.data.unwrap()["value"].0).unwrap();
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["server"],
        sim.workload_url(NS, CLUSTER)
    );
    let ca = Api::<Secret>::namespaced(sim.client(), NS)
        .get(&format!("{CLUSTER}-ca"))
        .await
        .unwrap();
    let ca_pem = &ca.data.unwrap()["tls.crt"].0;
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"],
        STANDARD.encode(ca_pem)
    );
    assert!(kubeconfig["users"][0]["user"]["client-certificate-data"].is_string());

    let mhc = until("the health check to count the workers", || {
        let api = api(&sim, NS, "cluster.x-k8s.io/v1beta2", "MachineHealthCheck");
        async move {
            api.get(&format!("{CLUSTER}-workers"))
                .await
                .ok()
                .filter(|m| m.data["status"]["currentHealthy"] == 2)
        }
    })
    .await;
    assert_eq!(mhc.data["status"]["expectedMachines"], 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn scale_down_removes_the_machine_annotated_for_deletion() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(1, 3, "m1.small", ext_net())).await;
    wait_available(&sim).await;
    let workers = machines(&sim, "cluster.x-k8s.io/deployment-name").await;
    assert_eq!(workers.len(), 3);
    let doomed = workers[1].name_any();
    api(&sim, NS, "cluster.x-k8s.io/v1beta2", "Machine")
        .patch(
            &doomed,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": "yes"}}}),
            ),
        )
        .await
        .unwrap();
    let mds = api(&sim, NS, "cluster.x-k8s.io/v1beta2", "MachineDeployment");
    mds.patch(
        &format!("{CLUSTER}-md-0"),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    let left = until("the annotated machine to go", || {
        let sim = &sim;
        async move {
            let m = machines(sim, "cluster.x-k8s.io/deployment-name").await;
            (m.len() == 2).then_some(m)
        }
    })
    .await;
    assert!(left.iter().all(|m| m.name_any() != doomed));
    let md = until("the deployment to report 2 ready replicas", || {
        let mds = mds.clone();
        async move {
            mds.get(&format!("{CLUSTER}-md-0")).await.ok().filter(|m| {
                m.data["status"]["readyReplicas"] == 2 && m.data["status"]["replicas"] == 2
            })
        }
    })
    .await;
    assert_eq!(md.data["status"]["phase"], "Running");
    assert!(is_true(&md, "Available"));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_new_kubernetes_version_rolls_the_workers_one_by_one() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(1, 2, "m1.small", ext_net())).await;
    wait_available(&sim).await;
    let before: Vec<String> = machines(&sim, "cluster.x-k8s.io/deployment-name")
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    let mds = api(&sim, NS, "cluster.x-k8s.io/v1beta2", "MachineDeployment");
    mds.patch(
        &format!("{CLUSTER}-md-0"),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"version": "v1.34.0"}}}})),
    )
    .await
    .unwrap();
    let max_seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let after = until("all workers on v1.34.0", || {
        let (sim, max_seen) = (&sim, max_seen.clone());
        async move {
            let m = machines(sim, "cluster.x-k8s.io/deployment-name").await;
            let live = m
                .iter()
                .filter(|m| m.metadata.deletion_timestamp.is_none())
                .count();
            max_seen.fetch_max(live, std::sync::atomic::Ordering::SeqCst);
            (m.len() == 2
                && m.iter()
                    .all(|m| m.data["spec"]["version"] == "v1.34.0" && is_true(m, "Ready")))
            .then_some(m)
        }
    })
    .await;
    assert!(after.iter().all(|m| !before.contains(&m.name_any())));
    let max_seen = max_seen.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        max_seen <= 3,
        "at most one surge machine, saw {max_seen} live"
    );
    let md = until("the rollout to finish", || {
        let mds = mds.clone();
        async move {
            mds.get(&format!("{CLUSTER}-md-0"))
                .await
                .ok()
                .filter(|m| m.data["status"]["upToDateReplicas"] == 2 && !is_true(m, "RollingOut"))
        }
    })
    .await;
    assert_eq!(md.data["status"]["readyReplicas"], 2);
    sim.shutdown().await;
}

/// As CAPO v0.14 does with a server Nova refuses: the refusal is on the machine's
/// OpenStackServer (named after its OpenStackMachine, `instanceState: ERROR`, `InstanceReady`
/// False `InstanceCreateFailed` with Nova's message) while the OpenStackMachine and the Machine
/// only wait; the cluster is not available. Lifting the marker lets the simulator retry.
#[tokio::test]
async fn a_fail_marker_in_the_flavor_leaves_workers_not_ready_until_it_is_lifted() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(1, 1, "m1.sim-fail", ext_net())).await;
    let servers = api(
        &sim,
        NS,
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "OpenStackServer",
    );
    let server = until("the worker's server to be refused", || {
        let servers = servers.clone();
        async move {
            servers
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|s| s.data["status"]["instanceState"] == "ERROR")
        }
    })
    .await;
    let refused = condition(&server, "InstanceReady").unwrap();
    assert_eq!(refused["status"], "False");
    assert_eq!(refused["severity"], "Error");
    assert_eq!(refused["reason"], "InstanceCreateFailed");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.starts_with("create OpenStack instance: Failed to create server: No valid host"),
        "{message}"
    );
    assert!(message.contains("flavor m1.sim-fail"), "{message}");
    assert_eq!(
        server.metadata.labels.as_ref().unwrap()["cluster.x-k8s.io/cluster-name"],
        CLUSTER
    );
    let worker = machines(&sim, "cluster.x-k8s.io/deployment-name")
        .await
        .into_iter()
        .find(|m| m.data["spec"]["infrastructureRef"]["name"] == server.name_any().as_str())
        .unwrap();
    let infra = condition(&worker, "InfrastructureReady").unwrap();
    assert_eq!(infra["status"], "False");
    assert_ne!(infra["reason"], "InstanceCreateFailed", "the Machine waits");
    assert_ne!(worker.data["status"]["phase"], "Failed");
    let osm = api(
        &sim,
        NS,
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachine",
    )
    .get(&server.name_any())
    .await
    .unwrap();
    assert_ne!(osm.data["status"]["ready"], true);
    assert!(osm.data["status"]["failureMessage"].is_null());
    let clusters = api(&sim, NS, "cluster.x-k8s.io/v1beta2", "Cluster");
    let cluster = clusters.get(CLUSTER).await.unwrap();
    assert!(!is_true(&cluster, "Available"));

    sim.set_fail_markers(vec![]);
    wait_available(&sim).await;
    let left = servers.list(&Default::default()).await.unwrap().items;
    assert!(
        left.is_empty(),
        "the retried server replaced the refused one"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_fail_marker_in_the_external_network_fails_the_openstack_cluster() {
    let sim = start().await;
    create_cluster(
        &sim,
        cluster_objects(
            1,
            1,
            "m1.small",
            json!({"filter": {"name": "public-sim-fail"}}),
        ),
    )
    .await;
    let oscs = api(
        &sim,
        NS,
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackCluster",
    );
    let osc = until("the OpenStackCluster to fail", || {
        let oscs = oscs.clone();
        async move {
            oscs.get(CLUSTER)
                .await
                .ok()
                .filter(|o| o.data["status"]["failureMessage"].is_string())
        }
    })
    .await;
    assert_eq!(osc.data["status"]["ready"], false);
    assert!(
        osc.data["status"]["failureMessage"]
            .as_str()
            .unwrap()
            .starts_with("failed to reconcile external network: ")
    );
    let clusters = api(&sim, NS, "cluster.x-k8s.io/v1beta2", "Cluster");
    let cluster = until("the cluster to show it", || {
        let clusters = clusters.clone();
        async move {
            clusters.get(CLUSTER).await.ok().filter(|c| {
                condition(c, "InfrastructureReady").is_some_and(|i| {
                    i["message"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("failed to reconcile external network")
                })
            })
        }
    })
    .await;
    assert_eq!(cluster.data["status"]["phase"], "Provisioning");
    assert!(machines(&sim, UUID_LABEL).await.is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn deleting_a_cluster_cascades_and_the_cluster_disappears() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(1, 1, "m1.small", ext_net())).await;
    wait_available(&sim).await;
    let clusters = api(&sim, NS, "cluster.x-k8s.io/v1beta2", "Cluster");
    // Foreground, as the driver deletes.
    let deleting = clusters
        .delete(CLUSTER, &DeleteParams::foreground())
        .await
        .unwrap();
    assert!(
        deleting
            .left()
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    until("the Cluster to disappear", || {
        let clusters = clusters.clone();
        async move {
            clusters
                .get_opt(CLUSTER)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    for (av, kind) in [
        ("cluster.x-k8s.io/v1beta2", "Machine"),
        ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        ("cluster.x-k8s.io/v1beta2", "MachineHealthCheck"),
        (
            "controlplane.cluster.x-k8s.io/v1beta2",
            "KubeadmControlPlane",
        ),
        (
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackCluster",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachine",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachineTemplate",
        ),
    ] {
        let left = api(&sim, NS, av, kind)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        assert!(
            left.is_empty(),
            "{kind} left: {:?}",
            left.iter().map(|o| o.name_any()).collect::<Vec<_>>()
        );
    }
    let secrets = Api::<Secret>::namespaced(sim.client(), NS);
    assert!(
        secrets
            .get_opt(&format!("{CLUSTER}-kubeconfig"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        secrets
            .get_opt(&format!("{CLUSTER}-ca"))
            .await
            .unwrap()
            .is_some(),
        "the driver's own Secrets stay"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn paused_controllers_leave_new_objects_alone_until_resumed() {
    let sim = start().await;
    sim.pause();
    create_cluster(&sim, cluster_objects(1, 1, "m1.small", ext_net())).await;
    // Several 50 ms steps: a simulator that ignored the pause would have acted by now (a pause:
    // what is checked is that nothing happens).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cluster = sim
        .store()
        .get(&Resource::new("cluster.x-k8s.io", "clusters"), NS, CLUSTER)
        .unwrap();
    assert!(cluster["metadata"].get("finalizers").is_none());
    assert!(cluster.get("status").is_none());
    sim.resume();
    wait_available(&sim).await;
    sim.shutdown().await;
}

#[tokio::test]
async fn a_new_control_plane_version_replaces_control_plane_machines_one_at_a_time() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(3, 1, "m1.small", ext_net())).await;
    wait_available(&sim).await;
    let kcps = api(
        &sim,
        NS,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
    );
    let name = format!("{CLUSTER}-control-plane");
    kcps.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"version": "v1.34.0"}})),
    )
    .await
    .unwrap();
    let max_seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let kcp = until("the control plane on v1.34.0", || {
        let (kcps, sim, name, max_seen) = (kcps.clone(), &sim, name.clone(), max_seen.clone());
        async move {
            let count = machines(sim, "cluster.x-k8s.io/control-plane").await.len();
            max_seen.fetch_max(count, std::sync::atomic::Ordering::SeqCst);
            kcps.get(&name).await.ok().filter(|k| {
                k.data["status"]["version"] == "v1.34.0"
                    && k.data["status"]["upToDateReplicas"] == 3
                    && k.data["status"]["replicas"] == 3
            })
        }
    })
    .await;
    let max_seen = max_seen.load(std::sync::atomic::Ordering::SeqCst);
    assert!(max_seen <= 4, "at most one surge machine, saw {max_seen}");
    assert!(is_true(&kcp, "Available") && !is_true(&kcp, "RollingOut"));
    let cp = machines(&sim, "cluster.x-k8s.io/control-plane").await;
    assert!(cp.iter().all(|m| m.data["spec"]["version"] == "v1.34.0"));
    sim.shutdown().await;
}

/// Load check, not run by default: `SIMKUBE_CLUSTERS=10000 cargo test --release --test simkube
/// -- --ignored --nocapture many_clusters`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn many_clusters_become_available() {
    let n: usize = std::env::var("SIMKUBE_CLUSTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let sim = SimCluster::start(SimOptions {
        step: Duration::from_millis(200),
        ..SimOptions::for_tests()
    })
    .await
    .unwrap();
    let store = sim.store().clone();
    let started = std::time::Instant::now();
    for i in 0..n {
        let ns = format!("magnum-p{}", i % 100);
        store.ensure_namespace(&ns).unwrap();
        for obj in cluster_objects(1, 1, "m1.small", ext_net()) {
            let text = obj
                .to_string()
                .replace(CLUSTER, &format!("k{i}"))
                .replace(NS, &ns);
            let obj: Value = serde_json::from_str(&text).unwrap();
            let res = Resource::of(
                obj["apiVersion"].as_str().unwrap(),
                obj["kind"].as_str().unwrap(),
            );
            store.create(&res, &ns, obj).unwrap();
        }
    }
    println!(
        "seeded {n} clusters ({} objects) in {:?}",
        store.len(),
        started.elapsed()
    );
    let clusters = Resource::new("cluster.x-k8s.io", "clusters");
    // An ignored scale run: its own deadline (sized for 1000 clusters) and a progress line every
    // 2 s rather than the harness's wait.
    let end = std::time::Instant::now() + Duration::from_secs(1800);
    loop {
        let ready = store
            .list(&clusters, None, "")
            .unwrap()
            .iter()
            .filter(|c| {
                c["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|x| x["type"] == "Available" && x["status"] == "True")
                })
            })
            .count();
        println!(
            "{:?}: {ready}/{n} available, {} objects, rv {}",
            started.elapsed(),
            store.len(),
            store.resource_version()
        );
        if ready == n {
            break;
        }
        assert!(std::time::Instant::now() < end, "timed out");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let listed = all(&sim, "cluster.x-k8s.io/v1beta2", "Machine")
        .list(&ListParams::default().labels(UUID_LABEL))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2 * n);
}

// ---- workload clusters and CA rotation ----

/// A client certificate signed by the CA (`ca_pem`'s first certificate, key `ca_key`).
fn client_cert(ca_pem: &str, ca_key: &str) -> String {
    client_credentials(ca_pem, ca_key).0
}

/// A client certificate signed by the CA, and its key (PEM).
fn client_credentials(ca_pem: &str, ca_key: &str) -> (String, String) {
    let issuer =
        rcgen::Issuer::from_ca_cert_pem(ca_pem, rcgen::KeyPair::from_pem(ca_key).unwrap()).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "someone");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap().pem();
    (cert, key.serialize_pem())
}

/// Two CA generations of `ca` and `etcd` (old, new), each (cert, key).
struct Cas {
    ca: [(String, String); 2],
    etcd: [(String, String); 2],
}

impl Cas {
    fn new() -> Self {
        Cas {
            ca: [new_ca("kubernetes"), new_ca("kubernetes")],
            etcd: [new_ca("etcd-ca"), new_ca("etcd-ca")],
        }
    }
}

/// The owners of the cluster's machines.
#[derive(Clone, Copy)]
enum Owner {
    ControlPlane,
    Workers,
}

impl Owner {
    fn api(self, sim: &SimCluster) -> Api<DynamicObject> {
        match self {
            Owner::ControlPlane => api(
                sim,
                NS,
                "controlplane.cluster.x-k8s.io/v1beta2",
                "KubeadmControlPlane",
            ),
            Owner::Workers => api(sim, NS, "cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        }
    }

    fn name(self) -> String {
        match self {
            Owner::ControlPlane => format!("{CLUSTER}-control-plane"),
            Owner::Workers => format!("{CLUSTER}-md-0"),
        }
    }

    /// The label its machines carry.
    fn selector(self) -> &'static str {
        match self {
            Owner::ControlPlane => "cluster.x-k8s.io/control-plane",
            Owner::Workers => "cluster.x-k8s.io/deployment-name",
        }
    }

    async fn get(self, sim: &SimCluster) -> Option<DynamicObject> {
        self.api(sim).get(&self.name()).await.ok()
    }

    async fn set_rollout_after(self, sim: &SimCluster, at: chrono::DateTime<chrono::Utc>) {
        let at = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let patch = json!({"spec": {"rollout": {"after": at}}});
        self.api(sim)
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Waits until its `MachinesReady` message mentions `needle`.
    async fn wait_reported(self, sim: &SimCluster, needle: &str) -> DynamicObject {
        until("the owner to report the failure", || async move {
            self.get(sim).await.filter(|o| {
                condition(o, "MachinesReady")
                    .is_some_and(|c| c["message"].as_str().unwrap_or_default().contains(needle))
            })
        })
        .await
    }
}

/// A validating simulated management cluster (the CAPI/CAPO CRDs) with a cluster whose `ca`
/// and `etcd` Secrets hold the old CAs.
async fn rotation_cluster(cp: i64, workers: i64, cas: &Cas) -> SimCluster {
    let sim = SimCluster::start(SimOptions {
        validator: Some(
            magnum_capi::server::crd_validator(&crate::common::capi::crd_dir()).unwrap(),
        ),
        ..SimOptions::for_tests()
    })
    .await
    .unwrap();
    let mut objects = cluster_objects(cp, workers, "m1.small", ext_net());
    objects[0] = tls_secret("ca", &cas.ca[0].0, &cas.ca[0].1);
    objects.push(tls_secret("etcd", &cas.etcd[0].0, &cas.etcd[0].1));
    create_cluster(&sim, objects).await;
    wait_available(&sim).await;
    wait_replaced(&sim, UUID_LABEL, &[], (cp + workers) as usize).await;
    sim
}

async fn kubeconfig_doc(sim: &SimCluster) -> Option<Kubeconfig> {
    let secret = Api::<Secret>::namespaced(sim.client(), NS)
        .get_opt(&format!("{CLUSTER}-kubeconfig"))
        .await
        .unwrap()?;
    let yaml = secret.data.unwrap()["value"].0.clone();
    Some(Kubeconfig::from_yaml(std::str::from_utf8(&yaml).unwrap()).unwrap())
}

/// The CA data (PEM) of a kubeconfig's cluster.
fn ca_data(doc: &Kubeconfig) -> Option<String> {
    let data = doc.clusters.first()?.cluster.as_ref()?;
    Some(pem_of(data.certificate_authority_data.as_deref()?))
}

/// The admin client certificate (PEM) of a kubeconfig.
fn admin_cert(doc: &Kubeconfig) -> Option<String> {
    let user = doc.auth_infos.first()?.auth_info.as_ref()?;
    Some(pem_of(user.client_certificate_data.as_deref()?))
}

/// A kube client for the workload cluster, built from `<cluster>-kubeconfig` as the driver does.
async fn workload_client(sim: &SimCluster) -> kube::Client {
    let doc = kubeconfig_doc(sim).await.unwrap();
    let config = kube::Config::from_custom_kubeconfig(doc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn pem_of(data: &str) -> String {
    String::from_utf8(STANDARD.decode(data).unwrap()).unwrap()
}

/// The server and CA data (PEM) of the workload cluster's `kube-public/cluster-info`.
async fn cluster_info_ca(client: &kube::Client) -> (String, String) {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "kube-public")
        .get("cluster-info")
        .await
        .unwrap();
    let doc: Value = yaml_serde::from_str(&cm.data.unwrap()["kubeconfig"]).unwrap();
    let cluster = &doc["clusters"][0]["cluster"];
    (
        cluster["server"].as_str().unwrap().to_string(),
        pem_of(cluster["certificate-authority-data"].as_str().unwrap()),
    )
}

/// Rewrites the CA data of `cluster-info` through the workload API, as the driver does.
async fn set_cluster_info_ca(sim: &SimCluster, bundle: &str) {
    let cms = Api::<ConfigMap>::namespaced(workload_client(sim).await, "kube-public");
    let cm = cms.get("cluster-info").await.unwrap();
    let mut doc: Value = yaml_serde::from_str(&cm.data.as_ref().unwrap()["kubeconfig"]).unwrap();
    doc["clusters"][0]["cluster"]["certificate-authority-data"] = json!(STANDARD.encode(bundle));
    let patch = json!({"data": {"kubeconfig": yaml_serde::to_string(&doc).unwrap()}});
    cms.patch(
        "cluster-info",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
}

fn names(machines: &[DynamicObject]) -> Vec<String> {
    machines.iter().map(|m| m.name_any()).collect()
}

/// Sets `spec.rollout.after` (now) on the control plane and the workers; returns the live
/// machines it should replace.
async fn roll_everything(sim: &SimCluster) -> Vec<String> {
    let mut live = machines(sim, UUID_LABEL).await;
    live.retain(|m| m.metadata.deletion_timestamp.is_none());
    let now = chrono::Utc::now();
    Owner::ControlPlane.set_rollout_after(sim, now).await;
    Owner::Workers.set_rollout_after(sim, now).await;
    names(&live)
}

/// `roll_everything`, then waits for its `total` replacements to be Ready.
async fn roll_and_wait(sim: &SimCluster, total: usize) -> Vec<DynamicObject> {
    let before = roll_everything(sim).await;
    wait_replaced(sim, UUID_LABEL, &before, total).await
}

/// Waits until `selector` selects `total` machines, all Ready and none of `before`.
async fn wait_replaced(
    sim: &SimCluster,
    selector: &str,
    before: &[String],
    total: usize,
) -> Vec<DynamicObject> {
    until("every machine to be replaced and Ready", || async move {
        let m = machines(sim, selector).await;
        (m.len() == total
            && m.iter()
                .all(|m| !before.contains(&m.name_any()) && is_true(m, "Ready")))
        .then_some(m)
    })
    .await
}

/// The first of `owner`'s machines whose `NodeHealthy` is False, with its message.
async fn wait_join_failure(sim: &SimCluster, owner: Owner) -> (DynamicObject, String) {
    until("a machine to fail kubeadm", || async move {
        machines(sim, owner.selector())
            .await
            .into_iter()
            .find_map(|m| {
                let c = condition(&m, "NodeHealthy")?;
                let msg =
                    (c["status"] == "False").then(|| c["message"].as_str().unwrap().to_string())?;
                Some((m, msg))
            })
    })
    .await
}

async fn delete_kubeconfig(sim: &SimCluster) {
    Api::<Secret>::namespaced(sim.client(), NS)
        .delete(&format!("{CLUSTER}-kubeconfig"), &DeleteParams::default())
        .await
        .unwrap();
}

/// `<cluster>-kubeconfig` once its admin certificate verifies against `ca_pem` (waits for the
/// regenerated Secret).
async fn wait_kubeconfig_signed_by(sim: &SimCluster, ca_pem: &str) -> Kubeconfig {
    until("the kubeconfig signed by the expected CA", || async move {
        let doc = kubeconfig_doc(sim).await?;
        verifies(&admin_cert(&doc)?, ca_pem).then_some(doc)
    })
    .await
}

#[tokio::test]
async fn the_kubeconfig_reaches_the_workload_api_and_its_cluster_info() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(1, 1, "m1.small", ext_net())).await;
    let cluster = wait_available(&sim).await;
    let doc = kubeconfig_doc(&sim).await.unwrap();
    assert_eq!(
        doc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
        Some(sim.workload_url(NS, CLUSTER).as_str())
    );
    let client = workload_client(&sim).await;
    let (server, ca) = cluster_info_ca(&client).await;
    let host = cluster.data["spec"]["controlPlaneEndpoint"]["host"]
        .as_str()
        .unwrap();
    let port = &cluster.data["spec"]["controlPlaneEndpoint"]["port"];
    assert_eq!(server, format!("https://{host}:{port}"));
    assert_eq!(server, sim.workload_url(NS, CLUSTER));
    let ca_secret = Api::<Secret>::namespaced(sim.client(), NS)
        .get(&format!("{CLUSTER}-ca"))
        .await
        .unwrap();
    assert_eq!(
        ca.as_bytes(),
        ca_secret.data.unwrap()["tls.crt"].0.as_slice()
    );
    // The endpoint the Cluster reports is the simulated load balancer, on loopback.
    assert_eq!(host, "127.0.0.1");
    // Every namespace kubeadm creates exists; ConfigMaps can be written, listed and deleted.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    let cm: ConfigMap = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}),
    )
    .unwrap();
    cms.patch("x", &ssa(), &Patch::Apply(&cm)).await.unwrap();
    // (kube-system also holds kubeadm's `kubeadm-config`.)
    let listed = cms.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.iter().filter(|c| c.name_any() == "x").count(), 1);
    cms.delete("x", &DeleteParams::default()).await.unwrap();
    // The management API does not see it; an unknown workload cluster is a 404.
    assert!(
        Api::<ConfigMap>::namespaced(sim.client(), "kube-public")
            .get_opt("cluster-info")
            .await
            .unwrap()
            .is_none()
    );
    let url = format!("{}/workload/{NS}/nope/api/v1/namespaces", sim.url());
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.status(), 404);
    let body = response.text().await.unwrap();
    assert!(
        body.contains(&format!("workload cluster {NS}/nope does not exist")),
        "{body}"
    );
    // The workload cluster goes with the Cluster.
    api(&sim, NS, "cluster.x-k8s.io/v1beta2", "Cluster")
        .delete(CLUSTER, &DeleteParams::foreground())
        .await
        .unwrap();
    until("the workload cluster to go", || {
        let sim = &sim;
        async move { sim.workload_store(NS, CLUSTER).is_none().then_some(()) }
    })
    .await;
    sim.shutdown().await;
}

/// `SimCluster::requests` is what the management cluster's own API server was asked: requests
/// to a workload cluster — at its endpoint, as its kubeconfig names it, or under
/// `/workload/{namespace}/{cluster}` on the management server — are another API server's and
/// are not in it (what `mgmt_cost::` bounds stays exact).
#[tokio::test]
async fn requests_to_workload_clusters_are_not_counted_as_the_management_clusters() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(1, 1, "m1.small", ext_net())).await;
    wait_available(&sim).await;
    let client = workload_client(&sim).await;
    let before = sim.requests();
    cluster_info_ca(&client).await;
    let path = format!("{}/workload/{NS}/{CLUSTER}/api/v1/namespaces", sim.url());
    let response = reqwest::get(path).await.unwrap();
    assert_eq!(response.status(), 200);
    let asked = sim.requests().since(&before);
    assert!(
        asked.0.is_empty(),
        "workload requests counted as the management cluster's: {asked}"
    );
    // The management cluster's own requests are counted.
    Api::<ConfigMap>::namespaced(sim.client(), "kube-public")
        .get_opt("cluster-info")
        .await
        .unwrap();
    assert_eq!(sim.requests().since(&before).0.len(), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_deleted_kubeconfig_is_regenerated_with_the_current_ca_key() {
    let cas = Cas::new();
    let sim = rotation_cluster(1, 1, &cas).await;
    let (old, old_key) = &cas.ca[0];
    let (new, new_key) = &cas.ca[1];
    wait_kubeconfig_signed_by(&sim, old).await;
    assert!(sim.workload_accepts(NS, CLUSTER, &client_cert(old, old_key)));
    assert!(!sim.workload_accepts(NS, CLUSTER, &client_cert(new, new_key)));
    assert!(!sim.workload_accepts(NS, "nope", &client_cert(old, old_key)));
    // Sign with new, trust both (the secret only: the machines still trust old alone).
    let bundle = format!("{new}{old}");
    apply(&sim, tls_secret("ca", &bundle, new_key)).await;
    delete_kubeconfig(&sim).await;
    let doc = wait_kubeconfig_signed_by(&sim, new).await;
    assert_eq!(ca_data(&doc).unwrap(), bundle);
    let cert = admin_cert(&doc).unwrap();
    assert!(!verifies(&cert, old));
    assert!(
        !sim.workload_accepts(NS, CLUSTER, &cert),
        "no machine trusts new yet"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn rollout_after_replaces_older_machines_exactly_once() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(1, 2, "m1.small", ext_net())).await;
    wait_available(&sim).await;
    // A time in the future does nothing until it is reached.
    let soon = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let before = names(&machines(&sim, UUID_LABEL).await);
    Owner::Workers.set_rollout_after(&sim, soon).await;
    // Not yet due (a pause: what is checked is that nothing happens).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(names(&machines(&sim, UUID_LABEL).await), before);
    let workers = names(&machines(&sim, Owner::Workers.selector()).await);
    let replaced = wait_replaced(&sim, Owner::Workers.selector(), &workers, 2).await;
    // And now (reached) on the control plane too.
    let after = names(&roll_and_wait(&sim, 3).await);
    assert!(replaced.iter().all(|m| !after.contains(&m.name_any())));
    // Exactly once: nothing is replaced again (a pause: what is checked is that nothing happens).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(names(&machines(&sim, UUID_LABEL).await), after);
    let md = Owner::Workers.get(&sim).await.unwrap();
    assert_eq!(md.data["status"]["upToDateReplicas"], 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_ca_rotation_in_three_phases_ends_on_the_new_ca() {
    let cas = Cas::new();
    let sim = rotation_cluster(1, 1, &cas).await;
    let [(old, old_key), (new, new_key)] = &cas.ca;
    let [(eold, eold_key), (enew, enew_key)] = &cas.etcd;

    let first_kubeconfig = kubeconfig_doc(&sim).await.unwrap();

    // 1: sign old, trust both; cluster-info carries both.
    apply(&sim, tls_secret("ca", &format!("{old}{new}"), old_key)).await;
    apply(&sim, tls_secret("etcd", &format!("{eold}{enew}"), eold_key)).await;
    set_cluster_info_ca(&sim, &format!("{old}{new}")).await;
    let machines = roll_and_wait(&sim, 2).await;
    // The first kubeconfig still works: the apiservers sign with the old CA and trust both.
    assert_eq!(
        node_names(&client_of(first_kubeconfig.clone()).await)
            .await
            .unwrap(),
        names(&machines)
    );

    // 2: sign new, trust both; a new kubeconfig.
    apply(&sim, tls_secret("ca", &format!("{new}{old}"), new_key)).await;
    apply(&sim, tls_secret("etcd", &format!("{enew}{eold}"), enew_key)).await;
    delete_kubeconfig(&sim).await;
    roll_and_wait(&sim, 2).await;
    wait_kubeconfig_signed_by(&sim, new).await;

    // 3: new only.
    apply(&sim, tls_secret("ca", new, new_key)).await;
    apply(&sim, tls_secret("etcd", enew, enew_key)).await;
    set_cluster_info_ca(&sim, new).await;
    delete_kubeconfig(&sim).await;
    let all = roll_and_wait(&sim, 2).await;
    assert!(all.iter().all(|m| m.data["status"]["phase"] == "Running"));

    let doc = until("the kubeconfig with the new CA only", || {
        let (sim, new) = (&sim, new);
        async move {
            let doc = wait_kubeconfig_signed_by(sim, new).await;
            (ca_data(&doc)? == *new).then_some(doc)
        }
    })
    .await;
    let cert = admin_cert(&doc).unwrap();
    assert!(verifies(&cert, new) && !verifies(&cert, old));
    assert!(sim.workload_accepts(NS, CLUSTER, &cert));
    assert!(sim.workload_accepts(NS, CLUSTER, &client_cert(new, new_key)));
    assert!(!sim.workload_accepts(NS, CLUSTER, &client_cert(old, old_key)));
    let (_, info) = cluster_info_ca(&workload_client(&sim).await).await;
    assert_eq!(info, *new);
    wait_available(&sim).await;
    // Through the endpoint: the new kubeconfig and any certificate of the new CA list the
    // Nodes; the old CA's certificate is Unauthorized, and a client that trusts only the old
    // CA refuses the apiserver's certificate.
    let nodes = names(&all);
    assert_eq!(node_names(&client_of(doc).await).await.unwrap(), nodes);
    let by_new = endpoint_kubeconfig(&sim, new, Some((new, new_key)));
    assert_eq!(node_names(&client_of(by_new).await).await.unwrap(), nodes);
    let by_old = endpoint_kubeconfig(&sim, new, Some((old, old_key)));
    match node_names(&client_of(by_old).await).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized")),
        other => panic!("the rotated-out CA's certificate was not refused: {other:?}"),
    }
    let stale = node_names(&client_of(first_kubeconfig).await).await;
    assert!(
        !matches!(stale, Ok(_) | Err(kube::Error::Api(_))),
        "a client trusting only the old CA accepted the serving certificate: {stale:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn swapping_the_ca_without_phase_one_fails_the_joins_at_discovery() {
    let cas = Cas::new();
    let sim = rotation_cluster(1, 1, &cas).await;
    let (new, new_key) = &cas.ca[1];
    apply(&sim, tls_secret("ca", new, new_key)).await;
    roll_everything(&sim).await;
    let (worker, message) = wait_join_failure(&sim, Owner::Workers).await;
    assert!(
        message.starts_with("kubeadm join: cluster CA found in cluster-info ConfigMap is invalid: none of the public keys \"sha256:"),
        "{message}"
    );
    assert!(message.ends_with("are pinned"), "{message}");
    assert_eq!(worker.data["status"]["phase"], "Failed");
    assert_eq!(
        condition(&worker, "NodeHealthy").unwrap()["reason"],
        "KubeadmJoinFailed"
    );
    assert_eq!(
        worker.data["status"]["deprecated"]["v1beta1"]["failureMessage"],
        message.as_str()
    );
    let (_, cp_message) = wait_join_failure(&sim, Owner::ControlPlane).await;
    assert!(cp_message.contains("are pinned"), "{cp_message}");
    // The owners report it, and the old machines keep serving with the old CA.
    let md = Owner::Workers.wait_reported(&sim, "are pinned").await;
    assert!(!is_true(&md, "MachinesReady"));
    let (old, old_key) = &cas.ca[0];
    assert!(sim.workload_accepts(NS, CLUSTER, &client_cert(old, old_key)));
    sim.shutdown().await;
}

#[tokio::test]
async fn swapping_the_ca_with_only_cluster_info_updated_fails_control_plane_tls() {
    let cas = Cas::new();
    let sim = rotation_cluster(1, 0, &cas).await;
    let [(old, _), (new, new_key)] = &cas.ca;
    set_cluster_info_ca(&sim, &format!("{old}{new}")).await;
    apply(&sim, tls_secret("ca", new, new_key)).await;
    roll_everything(&sim).await;
    let (_, message) = wait_join_failure(&sim, Owner::ControlPlane).await;
    assert!(
        message.starts_with("kubeadm join: tls: failed to verify certificate: x509: certificate signed by unknown authority (this machine does not trust the CA \"kubernetes\""),
        "{message}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn swapping_the_etcd_ca_without_phase_one_fails_the_etcd_join_of_an_ha_control_plane() {
    let cas = Cas::new();
    let sim = rotation_cluster(3, 0, &cas).await;
    let (enew, enew_key) = &cas.etcd[1];
    apply(&sim, tls_secret("etcd", enew, enew_key)).await;
    let before = roll_everything(&sim).await;
    let (failed, message) = wait_join_failure(&sim, Owner::ControlPlane).await;
    assert!(!before.contains(&failed.name_any()));
    assert!(
        message.starts_with("kubeadm join: [etcd] failed to add this machine as an etcd member: remote error: tls: bad certificate (control plane machine "),
        "{message}"
    );
    assert!(message.contains("\"etcd-ca\" (sha256:"), "{message}");
    let kcp = Owner::ControlPlane.wait_reported(&sim, "[etcd]").await;
    assert!(
        is_true(&kcp, "Available"),
        "the three old members keep quorum"
    );
    // It stays failed (kubeadm ran once); the old members were not replaced (a pause: what is
    // checked is that nothing changes).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cp = machines(&sim, Owner::ControlPlane.selector()).await;
    assert_eq!(cp.len(), 4);
    assert_eq!(
        cp.iter().filter(|m| before.contains(&m.name_any())).count(),
        3
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_key_that_is_not_the_first_certificates_fails_kubeadm() {
    let cas = Cas::new();
    let sim = rotation_cluster(1, 0, &cas).await;
    let [(old, old_key), (new, _)] = &cas.ca;
    // Trust both but sign with old while new comes first: kubeadm cannot use the pair.
    apply(&sim, tls_secret("ca", &format!("{new}{old}"), old_key)).await;
    roll_everything(&sim).await;
    let (m, message) = wait_join_failure(&sim, Owner::ControlPlane).await;
    assert!(
        message.starts_with(&format!(
            "kubeadm join: [certs] the certificate and key in Secret {CLUSTER}-ca do not match"
        )),
        "{message}"
    );
    assert_eq!(
        condition(&m, "NodeHealthy").unwrap()["reason"],
        "KubeadmJoinFailed"
    );
    sim.shutdown().await;
}

/// A kubeconfig for the workload endpoint trusting `server_ca` (PEM), with a client
/// certificate signed by `signer` (cert, key), or no credentials.
fn endpoint_kubeconfig(
    sim: &SimCluster,
    server_ca: &str,
    signer: Option<(&str, &str)>,
) -> Kubeconfig {
    let mut user = json!({});
    if let Some((ca, key)) = signer {
        let (cert, cert_key) = client_credentials(ca, key);
        user = json!({"client-certificate-data": STANDARD.encode(cert),
                      "client-key-data": STANDARD.encode(cert_key)});
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": sim.workload_url(NS, CLUSTER),
                                               "certificate-authority-data": STANDARD.encode(server_ca)}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }))
    .unwrap()
}

async fn client_of(doc: Kubeconfig) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(doc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The names of the workload cluster's Nodes.
async fn node_names(client: &kube::Client) -> Result<Vec<String>, kube::Error> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let mut names: Vec<String> = nodes.items.iter().map(|n| n.name_any()).collect();
    names.sort();
    Ok(names)
}

/// `kubectl --kubeconfig <doc> <args>`: its stdout, or `None` without kubectl on this machine.
async fn kubectl(doc: &Kubeconfig, args: &[&str]) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config");
    std::fs::write(&path, yaml_serde::to_string(doc).unwrap()).unwrap();
    // Asynchronously: the test's runtime serves the endpoint kubectl talks to.
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&path)
        .args(args)
        .output()
        .await
        .ok()?;
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[tokio::test]
async fn the_workload_endpoint_serves_nodes_version_and_pods_over_tls() {
    let sim = start().await;
    create_cluster(&sim, cluster_objects(1, 2, "m1.small", ext_net())).await;
    let cluster = wait_available(&sim).await;
    let all = wait_replaced(&sim, UUID_LABEL, &[], 3).await;
    let url = sim.workload_url(NS, CLUSTER);
    let port = cluster.data["spec"]["controlPlaneEndpoint"]["port"].clone();
    assert_eq!(url, format!("https://127.0.0.1:{port}"));
    let doc = kubeconfig_doc(&sim).await.unwrap();
    assert_eq!(
        doc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
        Some(url.as_str())
    );
    let client = client_of(doc.clone()).await;
    // Every machine registered its Node; the control plane's carries kubeadm's role.
    let want: Vec<String> = names(&all);
    assert_eq!(node_names(&client).await.unwrap(), want);
    let cp = &machines(&sim, "cluster.x-k8s.io/control-plane").await[0];
    let node = Api::<Node>::all(client.clone())
        .get(&cp.name_any())
        .await
        .unwrap();
    assert!(
        node.labels()
            .contains_key("node-role.kubernetes.io/control-plane")
    );
    let status = node.status.unwrap();
    assert_eq!(
        status.node_info.unwrap().kubelet_version,
        cp.data["spec"]["version"].as_str().unwrap()
    );
    assert_eq!(
        status.addresses.unwrap()[0].address,
        cp.data["status"]["addresses"][0]["address"]
            .as_str()
            .unwrap()
    );
    // The version kubeadm recorded: the control plane's.
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (
            version.major.as_str(),
            version.minor.as_str(),
            version.git_version.as_str()
        ),
        ("1", "33", "v1.33.1")
    );
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::all(client.clone());
    assert!(pods.list(&ListParams::default()).await.is_ok());
    // Anonymous: the version only.
    let ca = ca_data(&doc).unwrap();
    let anonymous = client_of(endpoint_kubeconfig(&sim, &ca, None)).await;
    assert!(anonymous.apiserver_version().await.is_ok());
    match node_names(&anonymous).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("anonymous listed nodes: {other:?}"),
    }
    // A client trusting another CA refuses the serving certificate.
    let (other_ca, other_key) = new_ca("kubernetes");
    let wrong_server = client_of(endpoint_kubeconfig(
        &sim,
        &other_ca,
        Some((&ca, &other_key)),
    ))
    .await;
    assert!(
        !matches!(
            node_names(&wrong_server).await,
            Ok(_) | Err(kube::Error::Api(_))
        ),
        "the serving certificate is not signed by the cluster CA"
    );
    // kubectl, where installed.
    if let Some(out) = kubectl(&doc, &["get", "nodes", "-o", "name"]).await {
        let listed: Vec<&str> = out.lines().collect();
        let expected: Vec<String> = want.iter().map(|n| format!("node/{n}")).collect();
        assert_eq!(listed, expected);
        let version = kubectl(&doc, &["get", "--raw", "/version"]).await.unwrap();
        assert!(version.contains("\"gitVersion\":\"v1.33.1\""), "{version}");
        kubectl(&doc, &["get", "pods", "-A"]).await.unwrap();
        // Server-side printing, as kube-apiserver does it.
        let table = kubectl(&doc, &["get", "nodes"]).await.unwrap();
        let lines: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines[0],
            ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
            "{table}"
        );
        assert_eq!(
            lines[1][..3],
            [want[0].as_str(), "Ready", "control-plane"],
            "{table}"
        );
        assert_eq!(
            lines[2][..3],
            [want[1].as_str(), "Ready", "<none>"],
            "{table}"
        );
        assert_eq!(lines[1][4], "v1.33.1", "{table}");
    }
    // A deleted worker takes its Node along.
    let worker = all
        .iter()
        .find(|m| m.name_any() != cp.name_any())
        .unwrap()
        .name_any();
    api(&sim, NS, "cluster.x-k8s.io/v1beta2", "Machine")
        .delete(&worker, &DeleteParams::default())
        .await
        .unwrap();
    until("the deleted machine's Node to go", || {
        let (client, worker) = (&client, &worker);
        async move { (!node_names(client).await.ok()?.contains(worker)).then_some(()) }
    })
    .await;
    // The endpoint closes with the Cluster.
    api(&sim, NS, "cluster.x-k8s.io/v1beta2", "Cluster")
        .delete(CLUSTER, &DeleteParams::foreground())
        .await
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    until("the endpoint to close", || {
        let addr = addr.clone();
        async move {
            tokio::net::TcpStream::connect(addr)
                .await
                .is_err()
                .then_some(())
        }
    })
    .await;
    sim.shutdown().await;
}
