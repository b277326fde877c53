//! Adoption of the clusters Magnum's two Cluster API drivers made (issue 25 item 2): each
//! driver's objects (fixtures written from their sources, `common::capi_drivers`) run on the
//! simulated management cluster; an import that finds them adopts the cluster, and from then
//! on its status and health come from those objects, `ca show`/`ca sign` use the driver's CA,
//! resize and delete act on the driver's objects, and nodegroups are added, resized, updated
//! and deleted as each driver writes its own. Adoption itself replaces no machine and changes
//! no spec, and no nodegroup operation replaces a machine or changes a spec of the driver's.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::capi::{CapiApp, admin_csr, authenticates, capi_app_on, postgres_text};
use crate::common::capi_drivers::{
    DRIVER_IMAGE, Driver, TENANT, WORKER, cluster_uuid, import_with, load_driver_objects,
};
use crate::common::keystone::keystone;
use crate::common::stack::env_shared;
use crate::common::wait::until;
use crate::common::*;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use magnum_capi::capi::pki;
use magnum_capi::domain::imported::{ImportState, refusal};
use magnum_capi::simkube::{Resource, SimCluster};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const KCP: &str = "controlplane.cluster.x-k8s.io/v1beta2";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

/// The driver's Machines of CAPI cluster `stack`: name → uid.
fn machines(sim: &SimCluster, ns: &str, stack: &str) -> BTreeMap<String, String> {
    sim.store()
        .list(
            &Resource::of("cluster.x-k8s.io/v1beta2", "Machine"),
            Some(ns),
            &format!("cluster.x-k8s.io/cluster-name={stack}"),
        )
        .expect("selector")
        .iter()
        .map(|m| {
            (
                m["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                m["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Whether every one of `n` machines of `stack` runs.
fn running(sim: &SimCluster, ns: &str, stack: &str, n: usize) -> bool {
    let all = sim
        .store()
        .list(
            &Resource::of("cluster.x-k8s.io/v1beta2", "Machine"),
            Some(ns),
            &format!("cluster.x-k8s.io/cluster-name={stack}"),
        )
        .expect("selector");
    all.len() == n && all.iter().all(|m| m["status"]["phase"] == "Running")
}

/// The specs of everything in `ns` that rolls machines when it changes: control planes,
/// MachineDeployments and machine templates, by kind and name.
fn rolling_specs(sim: &SimCluster, ns: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (av, kind) in [
        (
            "controlplane.cluster.x-k8s.io/v1beta2",
            "KubeadmControlPlane",
        ),
        ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachineTemplate",
        ),
        (
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate",
        ),
    ] {
        for o in sim
            .store()
            .list(&Resource::of(av, kind), Some(ns), "")
            .expect("list")
        {
            out.insert(
                format!(
                    "{kind}/{}",
                    o["metadata"]["name"].as_str().unwrap_or_default()
                ),
                o["spec"].clone(),
            );
        }
    }
    out
}

fn object(sim: &SimCluster, av: &str, kind: &str, ns: &str, name: &str) -> Option<Value> {
    sim.store()
        .get(&Resource::of(av, kind), ns, name)
        .map(|v| (*v).clone())
}

/// A running cluster of `driver`, adopted ([`adopted_on`]): its uuid and namespace, its CA, and
/// its Machines and rolling specs before adoption.
struct Adopted {
    c: String,
    ns: String,
    ca: pki::KeyPairPem,
    machines: BTreeMap<String, String>,
    specs: BTreeMap<String, Value>,
}

/// Loads `driver`'s objects of cluster `n` (`stack`) of `who` into `app`'s management cluster,
/// waits for its machines, imports it on the management cluster that has them (adopted) and
/// waits for its version and health from those objects (read from PostgreSQL, so it serves an
/// app authenticating by Keystone tokens as well as one by headers).
async fn adopted_on(app: &CapiApp, driver: Driver, n: u32, stack: &str, who: &As) -> Adopted {
    let (t, sim) = (&app.t, &app.sim);
    let c = cluster_uuid(n);
    let ns = driver.namespace(who.project);
    let ca = pki::generate_ca("kubernetes").unwrap();
    load_driver_objects(sim, driver, &c, stack, who.project, &ca);
    until("the driver's cluster to run", || async {
        running(sim, &ns, stack, 2).then_some(())
    })
    .await;
    let machines_before = machines(sim, &ns, stack);
    let specs_before = rolling_specs(sim, &ns);
    let (_, found) = import_with(t, std::slice::from_ref(&app.capi), n, driver, stack, who).await;
    assert_eq!(found.len(), 1, "{driver:?}");
    let imported = magnum_capi::db::imports::of_cluster(&t.state.pool, c.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(imported.state(), Some(ImportState::Adopted));
    until(
        "the adopted cluster's version and health from the driver's objects",
        || async {
            let (version, health): (Option<String>, Option<String>) = sqlx::query_as(
                "SELECT coe_version, health_status FROM cluster WHERE uuid = $1::uuid",
            )
            .bind(&c)
            .fetch_one(&t.state.pool)
            .await
            .ok()?;
            (version.as_deref() == Some("v1.31.4") && health.as_deref() == Some("HEALTHY"))
                .then_some(())
        },
    )
    .await;
    Adopted {
        c,
        ns,
        ca,
        machines: machines_before,
        specs: specs_before,
    }
}

async fn adoption_of(driver: Driver, stack: &str) {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let sim = &app.sim;
    let c = cluster_uuid(1);

    // An import that does not find the objects leaves it read-only, saying so; the next one,
    // on the management cluster that has them, adopts it.
    let (_, found) = import_with(t, &[], 1, driver, stack, &TENANT).await;
    assert!(found.is_empty());
    let r = t.delete(&TENANT, &format!("/v1/clusters/{c}")).await;
    assert_magnum_error(&r, 400, &refusal(&c, driver.entry_point()));
    let Adopted {
        c,
        ns,
        ca,
        machines: machines_before,
        specs: specs_before,
    } = adopted_on(&app, driver, 1, stack, &TENANT).await;

    // Status and health come from the driver's objects at once.
    let shown = until("health from the driver's objects", || async {
        let r = t.get(&TENANT, &format!("/v1/clusters/{c}")).await;
        (r.body["health_status"] == "HEALTHY"
            && r.body["node_addresses"]
                .as_array()
                .is_some_and(|a| a.len() == 1))
        .then_some(r.body)
    })
    .await;
    assert_eq!(shown["status"], "CREATE_COMPLETE", "{shown}");
    assert_eq!(shown["health_status_reason"]["api"], "ok", "{shown}");
    assert_ne!(
        shown["api_address"], "https://203.0.113.7:6443",
        "the API address is the one the Cluster reports: {shown}"
    );

    // Adoption replaced no machine and changed no spec that rolls machines.
    assert_eq!(machines(sim, &ns, stack), machines_before, "{driver:?}");
    assert_eq!(rolling_specs(sim, &ns), specs_before, "{driver:?}");

    // `coe cluster config`: the driver's CA shows and signs.
    let r = t.get(&TENANT, &format!("/v1/certificates/{c}")).await;
    assert_eq!(r.body["pem"].as_str(), Some(ca.cert_pem.as_str()));
    let r = t
        .post(
            &TENANT,
            "/v1/certificates",
            json!({"cluster_uuid": c, "csr": admin_csr()}),
        )
        .await;
    r.assert_status(201);
    assert!(pki::verifies(r.body["pem"].as_str().unwrap(), &ca.cert_pem));

    // Resize: the replicas where the driver keeps them, nothing else.
    let r = t
        .post_v(
            &TENANT,
            &format!("/v1/clusters/{c}/actions/resize"),
            "1.7",
            json!({"node_count": 2}),
        )
        .await;
    r.assert_status(202);
    if driver == Driver::ClusterApi {
        // magnum-cluster-api keeps them in the Cluster's topology; the simulated management
        // cluster has no topology controller, so the test plays it: the MachineDeployment
        // follows the topology.
        let md_name = format!("{stack}-{WORKER}-p4x9z");
        until("the topology to ask for two workers", || async {
            let cl = object(sim, "cluster.x-k8s.io/v1beta2", "Cluster", &ns, stack)?;
            (cl["spec"]["topology"]["workers"]["machineDeployments"][0]["replicas"] == 2)
                .then_some(())
        })
        .await;
        let mut md = object(
            sim,
            "cluster.x-k8s.io/v1beta2",
            "MachineDeployment",
            &ns,
            &md_name,
        )
        .expect("the MachineDeployment");
        md["spec"]["replicas"] = json!(2);
        sim.store()
            .put(
                &Resource::of("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
                md,
            )
            .expect("the topology controller's write");
    }
    let done = t.wait_cluster(&TENANT, &c, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["node_count"], 2);
    until("three machines", || async {
        running(sim, &ns, stack, 3).then_some(())
    })
    .await;
    let after = machines(sim, &ns, stack);
    assert!(
        machines_before.iter().all(|(n, u)| after.get(n) == Some(u)),
        "a resize adds a machine and keeps the others: {machines_before:?} → {after:?}"
    );
    let worker_templates = |specs: &BTreeMap<String, Value>| -> Vec<Value> {
        specs
            .iter()
            .filter(|(k, _)| !k.starts_with("MachineDeployment/"))
            .map(|(_, v)| v.clone())
            .collect()
    };
    assert_eq!(
        worker_templates(&rolling_specs(sim, &ns)),
        worker_templates(&specs_before),
        "a resize changes no template"
    );

    // A later import keeps it adopted (even one that cannot see the management cluster).
    import_with(t, &[], 1, driver, stack, &TENANT).await;
    let imported = magnum_capi::db::imports::of_cluster(&t.state.pool, c.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(imported.state(), Some(ImportState::Adopted));
    // Changed here since (the resize), the cluster is this service's now: Magnum's older row
    // (one worker, CREATE_COMPLETE) is not written over its record or its nodegroups.
    let kept = t.get(&TENANT, &format!("/v1/clusters/{c}")).await.body;
    assert_eq!(kept["node_count"], 2, "{kept}");
    assert_eq!(kept["status"], "UPDATE_COMPLETE", "{kept}");
    let ngs = t
        .get_v(&TENANT, &format!("/v1/clusters/{c}/nodegroups"), "1.9")
        .await
        .body;
    let workers: Vec<&Value> = ngs["nodegroups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["role"] == "worker")
        .collect();
    assert_eq!(workers.len(), 1, "{ngs}");
    assert_eq!(workers[0]["node_count"], 2, "{ngs}");

    // Delete: the driver's Cluster (CAPI cascades), then its Secrets by the driver's rules; the
    // namespace holds other clusters and stays.
    t.delete(&TENANT, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(204);
    t.wait_cluster(&TENANT, &c, "GONE").await;
    assert!(object(sim, "cluster.x-k8s.io/v1beta2", "Cluster", &ns, stack).is_none());
    assert!(machines(sim, &ns, stack).is_empty());
    for suffix in ["ca", "etcd", "proxy", "sa"] {
        assert!(
            object(sim, "v1", "Secret", &ns, &format!("{stack}-{suffix}")).is_none(),
            "{driver:?}: {stack}-{suffix} is gone"
        );
    }
    let credentials = match driver {
        Driver::ClusterApi => format!("{stack}-cloud-config"),
        _ => format!("{stack}-cloud-credentials"),
    };
    assert!(object(sim, "v1", "Secret", &ns, &credentials).is_none());
    assert!(object(sim, "v1", "Namespace", "", &ns).is_some());
}

#[tokio::test]
async fn a_cluster_magnum_capi_helm_made_is_adopted_resized_and_deleted_without_rolling_a_machine()
{
    adoption_of(Driver::CapiHelm, "live-1-0a1b2c3d4e5f").await;
}

#[tokio::test]
async fn a_cluster_magnum_cluster_api_made_is_adopted_resized_and_deleted_without_rolling_a_machine()
 {
    adoption_of(Driver::ClusterApi, "kube-x7k2p").await;
}

/// Every object of `ns` valid against the CAPI/CAPO CRDs (kinds they define).
fn valid_against_the_crds(objects: &[Value]) {
    let schemas = magnum_capi::k8s::schema::CrdSchemas::load(&crate::common::capi::crd_dir())
        .expect("the CRDs");
    for o in objects {
        assert_eq!(schemas.validate(o), Ok(true), "{o}");
    }
}

/// What CAPI's topology controller does with magnum-cluster-api's entry `entry` of Cluster
/// `stack` (the simulated management cluster has none, so the test plays it): a
/// MachineDeployment `<stack>-<entry name>-q7w2e` with the entry's labels and replicas, on
/// copies of the default worker's templates with the entry's flavor.
fn topology_controller_makes(sim: &SimCluster, ns: &str, stack: &str, entry: &Value) {
    let name = entry["name"].as_str().unwrap();
    let md_name = format!("{stack}-{name}-q7w2e");
    let default_md = object(
        sim,
        "cluster.x-k8s.io/v1beta2",
        "MachineDeployment",
        ns,
        &format!("{stack}-{WORKER}-p4x9z"),
    )
    .unwrap();
    let flavor = entry["variables"]["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "flavor")
        .unwrap()["value"]
        .clone();
    let mut refs = Vec::new();
    for (av, kind, pointer) in [
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachineTemplate",
            "/spec/template/spec/infrastructureRef/name",
        ),
        (
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate",
            "/spec/template/spec/bootstrap/configRef/name",
        ),
    ] {
        let src = default_md.pointer(pointer).unwrap().as_str().unwrap();
        let mut t = object(sim, av, kind, ns, src).unwrap();
        let copy = format!("{md_name}-{}", &kind[..4].to_lowercase());
        t["metadata"] = json!({"name": copy, "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": stack, "topology.cluster.x-k8s.io/owned": "",
                       "topology.cluster.x-k8s.io/deployment-name": name}});
        if kind == "OpenStackMachineTemplate" {
            t["spec"]["template"]["spec"]["flavor"] = flavor.clone();
        }
        sim.store().put(&Resource::of(av, kind), t).unwrap();
        refs.push(copy);
    }
    let mut labels = entry["metadata"]["labels"].clone();
    labels["cluster.x-k8s.io/cluster-name"] = json!(stack);
    labels["topology.cluster.x-k8s.io/owned"] = json!("");
    labels["topology.cluster.x-k8s.io/deployment-name"] = json!(name);
    let mut md = default_md.clone();
    md["metadata"] = json!({"name": md_name, "namespace": ns, "labels": labels});
    if entry["metadata"]["annotations"].is_object() {
        md["metadata"]["annotations"] = entry["metadata"]["annotations"].clone();
    }
    md["spec"]["replicas"] = entry.get("replicas").cloned().unwrap_or(json!(1));
    md["spec"]["selector"]["matchLabels"] = json!({"cluster.x-k8s.io/cluster-name": stack,
        "topology.cluster.x-k8s.io/deployment-name": name});
    md["spec"]["template"]["metadata"]["labels"] = labels;
    md["spec"]["template"]["spec"]["infrastructureRef"]["name"] = json!(refs[0]);
    md["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"] = json!(refs[1]);
    if let Some(m) = md.as_object_mut() {
        m.remove("status");
    }
    sim.store()
        .put(
            &Resource::of("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
            md,
        )
        .unwrap();
}

/// magnum-cluster-api's topology entry `name` of Cluster `stack`, once it is there.
async fn topology_entry(sim: &SimCluster, ns: &str, stack: &str, name: &str) -> (Value, Value) {
    until("the nodegroup's topology entry", || async {
        let cl = object(sim, "cluster.x-k8s.io/v1beta2", "Cluster", ns, stack)?;
        let e = cl["spec"]["topology"]["workers"]["machineDeployments"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)?
            .clone();
        Some((cl, e))
    })
    .await
}

/// The autoscaler's bounds as both drivers write them.
fn bounds(min: &str, max: &str) -> Value {
    json!({"cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": min,
           "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": max})
}

/// Adds nodegroup `body` to adopted cluster `c` and checks that it is written where and as
/// `driver` writes its own (autoscaler annotations `annotations`, flavor `flavor`), valid
/// against the CRDs; plays CAPI's topology controller for magnum-cluster-api; waits for
/// `CREATE_COMPLETE`. Its uuid.
#[expect(clippy::too_many_arguments)] // the cluster's coordinates, then what is asked and expected
async fn added(
    t: &crate::common::TestApp,
    sim: &SimCluster,
    driver: Driver,
    stack: &str,
    c: &str,
    body: Value,
    annotations: &Value,
    flavor: &str,
) -> String {
    let ns = driver.namespace(TENANT.project);
    let name = body["name"].as_str().unwrap().to_string();
    let r = t
        .post_v(
            &TENANT,
            &format!("/v1/clusters/{c}/nodegroups"),
            "1.9",
            body,
        )
        .await;
    r.assert_status(202);
    let ng = r.body["uuid"].as_str().unwrap().to_string();
    match driver {
        Driver::ClusterApi => {
            let (cluster, entry) = topology_entry(sim, &ns, stack, &name).await;
            assert_eq!(entry["class"], "default-worker", "{entry}");
            assert_eq!(
                entry.get("replicas").is_none(),
                annotations.is_object(),
                "replicas unless autoscaled: {entry}"
            );
            assert_eq!(&entry["metadata"]["annotations"], annotations, "{entry}");
            let l = &entry["metadata"]["labels"];
            assert_eq!(l["node.cluster.x-k8s.io/nodegroup"], name.as_str());
            assert_eq!(l["node-role.kubernetes.io/worker"], "");
            assert_eq!(l["magnum.openstack.org/nodegroup-uuid"], ng.as_str());
            assert_eq!(l["magnum.openstack.org/cluster-uuid"], c);
            let overrides = entry["variables"]["overrides"].as_array().unwrap();
            let var = |n: &str| {
                overrides
                    .iter()
                    .find(|v| v["name"] == n)
                    .map(|v| &v["value"])
            };
            assert_eq!(var("flavor"), Some(&json!(flavor)));
            assert_eq!(var("imageUUID"), Some(&json!(DRIVER_IMAGE)));
            assert_eq!(var("serverGroupId"), None);
            assert_eq!(entry["healthCheck"], json!({"enabled": true}));
            valid_against_the_crds(&[cluster]);
            topology_controller_makes(sim, &ns, stack, &entry);
        }
        _ => {
            let md_name = format!("{stack}-{name}");
            let md = until("the nodegroup's MachineDeployment", || async {
                object(
                    sim,
                    "cluster.x-k8s.io/v1beta2",
                    "MachineDeployment",
                    &ns,
                    &md_name,
                )
            })
            .await;
            assert_eq!(&md["metadata"]["annotations"], annotations, "{md}");
            // Ours to set unless autoscaled (the simulated CAPI may default them meanwhile, as
            // CAPI does from the autoscaler's minimum: what we applied is what is checked).
            let ours = md["metadata"]["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["manager"] == "magnum-capi" && m["operation"] == "Apply")
                .unwrap_or_else(|| panic!("no field manager of ours: {md}"));
            assert_eq!(
                ours["fieldsV1"]["f:spec"].get("f:replicas").is_none(),
                annotations.is_object(),
                "replicas unless autoscaled: {md}"
            );
            assert_eq!(
                md["metadata"]["labels"]["capi.stackhpc.com/node-group"],
                name.as_str()
            );
            assert_eq!(md["metadata"]["labels"]["capi.stackhpc.com/cluster"], stack);
            assert_eq!(
                md["spec"]["template"]["metadata"]["labels"]["magnum.openstack.org/nodegroup-uuid"],
                ng.as_str()
            );
            assert_eq!(md["spec"]["clusterName"], stack);
            let template = |av: &str, kind: &str, pointer: &str| {
                let t = md.pointer(pointer).unwrap().as_str().unwrap();
                assert!(t.starts_with(&format!("{md_name}-")), "{t}");
                object(sim, av, kind, &ns, t).unwrap()
            };
            let osmt = template(
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackMachineTemplate",
                "/spec/template/spec/infrastructureRef/name",
            );
            assert_eq!(osmt["spec"]["template"]["spec"]["flavor"], flavor);
            assert_eq!(
                osmt["spec"]["template"]["spec"]["identityRef"]["name"],
                format!("{stack}-cloud-credentials")
            );
            let kct = template(
                "bootstrap.cluster.x-k8s.io/v1beta2",
                "KubeadmConfigTemplate",
                "/spec/template/spec/bootstrap/configRef/name",
            );
            assert!(
                kct["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
                    ["kubeletExtraArgs"]
                    .as_array()
                    .unwrap()
                    .contains(&json!({"name": "node-labels",
                        "value": format!("capi.stackhpc.com/node-group={name}")})),
                "{kct}"
            );
            valid_against_the_crds(&[md, osmt, kct]);
        }
    }
    let path = format!("/v1/clusters/{c}/nodegroups/{ng}");
    until("the new nodegroup CREATE_COMPLETE", || async {
        let r = t.get_v(&TENANT, &path, "1.9").await;
        (r.body["status"] == "CREATE_COMPLETE").then_some(())
    })
    .await;
    ng
}

/// The autoscaler's annotations where `driver` keeps nodegroup `name`'s.
fn autoscaler_annotations(sim: &SimCluster, driver: Driver, stack: &str, name: &str) -> Value {
    let ns = driver.namespace(TENANT.project);
    match driver {
        Driver::ClusterApi => {
            let cl = object(sim, "cluster.x-k8s.io/v1beta2", "Cluster", &ns, stack).unwrap();
            cl["spec"]["topology"]["workers"]["machineDeployments"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name)
                .unwrap()["metadata"]["annotations"]
                .clone()
        }
        _ => object(
            sim,
            "cluster.x-k8s.io/v1beta2",
            "MachineDeployment",
            &ns,
            &format!("{stack}-{name}"),
        )
        .unwrap()["metadata"]["annotations"]
            .clone(),
    }
}

async fn nodegroups_on(driver: Driver, stack: &str) {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let a = adopted_on(&app, driver, 1, stack, &TENANT).await;
    let (t, sim, c, ns) = (&app.t, &app.sim, &a.c, &a.ns);
    let ngs = format!("/v1/clusters/{c}/nodegroups");

    // Names the driver's objects cannot carry are refused, as are node labels it never writes.
    let bad = match driver {
        Driver::ClusterApi => "GPU_nodes",
        _ => "Default Worker",
    };
    let r = t
        .post_v(&TENANT, &ngs, "1.9", json!({"name": bad, "node_count": 1}))
        .await;
    r.assert_status(400);
    assert!(
        r.body["errors"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("is invalid for a cluster adopted from")),
        "{}",
        r.body
    );
    let r = t
        .post_v(
            &TENANT,
            &ngs,
            "1.9",
            json!({"name": "labelled", "node_count": 1, "node_labels": {"a": "b"}}),
        )
        .await;
    let no_node_labels = "node_labels and node_taints are not available for nodegroups of a \
                          cluster adopted from Magnum";
    assert_magnum_error(&r, 400, no_node_labels);

    let unchanged = || {
        let now = machines(sim, ns, stack);
        assert!(
            a.machines.iter().all(|(n, u)| now.get(n) == Some(u)),
            "every machine of the driver's is kept: {:?} → {now:?}",
            a.machines
        );
        let specs = rolling_specs(sim, ns);
        for (k, v) in &a.specs {
            assert_eq!(specs.get(k), Some(v), "{driver:?}: {k} is unchanged");
        }
    };

    // A new nodegroup of a fixed size, on its own flavor.
    let gpu = added(
        t,
        sim,
        driver,
        stack,
        c,
        json!({"name": "gpu", "node_count": 1, "flavor_id": "m1.large"}),
        &Value::Null,
        "m1.large",
    )
    .await;
    until("three machines", || async {
        running(sim, ns, stack, 3).then_some(())
    })
    .await;
    unchanged();

    // Resize it (a nodegroup that is not the default one).
    t.post_v(
        &TENANT,
        &format!("/v1/clusters/{c}/actions/resize"),
        "1.7",
        json!({"node_count": 2, "nodegroup": "gpu"}),
    )
    .await
    .assert_status(202);
    if driver == Driver::ClusterApi {
        until("the topology to ask for two gpu machines", || async {
            let (_, e) = topology_entry(sim, ns, stack, "gpu").await;
            (e["replicas"] == 2).then_some(())
        })
        .await;
        let md_name = format!("{stack}-gpu-q7w2e");
        let mut md = object(
            sim,
            "cluster.x-k8s.io/v1beta2",
            "MachineDeployment",
            ns,
            &md_name,
        )
        .unwrap();
        md["spec"]["replicas"] = json!(2);
        sim.store()
            .put(
                &Resource::of("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
                md,
            )
            .unwrap();
    }
    t.wait_cluster(&TENANT, c, "UPDATE_COMPLETE").await;
    until("four machines", || async {
        running(sim, ns, stack, 4).then_some(())
    })
    .await;
    let gpu_path = format!("{ngs}/{gpu}");
    assert_eq!(
        t.get_v(&TENANT, &gpu_path, "1.9").await.body["node_count"],
        2
    );
    unchanged();

    // An autoscaled one: bounds as the driver writes them, no replicas; the flavor of the
    // default worker, which it inherits.
    let auto = added(
        t,
        sim,
        driver,
        stack,
        c,
        json!({"name": "auto", "node_count": 1, "min_node_count": 1, "max_node_count": 3,
               "labels": {"auto_scaling_enabled": "true"}}),
        &bounds("1", "3"),
        "m1.small",
    )
    .await;
    until("five machines", || async {
        running(sim, ns, stack, 5).then_some(())
    })
    .await;

    // Updated bounds: written where the driver keeps them when it autoscales; only recorded
    // when it does not.
    for (path, name) in [(format!("{ngs}/{auto}"), "auto"), (gpu_path.clone(), "gpu")] {
        t.patch_v(
            &TENANT,
            &path,
            "1.9",
            json!([{"op": "replace", "path": "/max_node_count", "value": 5}]),
        )
        .await
        .assert_status(202);
        let shown = until("the updated nodegroup", || async {
            let r = t.get_v(&TENANT, &path, "1.9").await;
            (r.body["status"] == "UPDATE_COMPLETE").then_some(r.body)
        })
        .await;
        assert_eq!(shown["max_node_count"], 5, "{shown}");
        let written = autoscaler_annotations(sim, driver, stack, name);
        if name == "auto" {
            assert_eq!(written, bounds("1", "5"), "{driver:?}");
        } else {
            assert_eq!(written, Value::Null, "{driver:?}: gpu does not autoscale");
        }
    }
    // Node labels the driver never writes are refused on an update as on a create.
    let r = t
        .patch_v(
            &TENANT,
            &gpu_path,
            "1.9",
            json!([{"op": "replace", "path": "/node_labels", "value": "{'a': 'b'}"}]),
        )
        .await;
    assert_magnum_error(&r, 400, no_node_labels);
    // A resize of an autoscaled nodegroup leaves its replicas to the autoscaler, as the
    // drivers do.
    t.post_v(
        &TENANT,
        &format!("/v1/clusters/{c}/actions/resize"),
        "1.7",
        json!({"node_count": 3, "nodegroup": "auto"}),
    )
    .await
    .assert_status(202);
    t.wait_cluster(&TENANT, c, "UPDATE_COMPLETE").await;
    match driver {
        Driver::ClusterApi => {
            let (_, e) = topology_entry(sim, ns, stack, "auto").await;
            assert!(e.get("replicas").is_none(), "{e}");
        }
        _ => {
            let md = object(
                sim,
                "cluster.x-k8s.io/v1beta2",
                "MachineDeployment",
                ns,
                &format!("{stack}-auto"),
            )
            .unwrap();
            assert_eq!(md["spec"]["replicas"], 1, "the autoscaler's minimum: {md}");
        }
    }
    assert!(running(sim, ns, stack, 5));
    unchanged();

    // Delete them: their objects go, the driver's stay as they were.
    for (ng, name) in [(&gpu, "gpu"), (&auto, "auto")] {
        t.delete_v(&TENANT, &format!("{ngs}/{ng}"), "1.9")
            .await
            .assert_status(204);
        if driver == Driver::ClusterApi {
            until("the entry removed from the topology", || async {
                let cl = object(sim, "cluster.x-k8s.io/v1beta2", "Cluster", ns, stack)?;
                (!cl["spec"]["topology"]["workers"]["machineDeployments"]
                    .as_array()?
                    .iter()
                    .any(|e| e["name"] == name))
                .then_some(())
            })
            .await;
            // The topology controller deletes the MachineDeployment and its templates.
            let md_name = format!("{stack}-{name}-q7w2e");
            sim.store()
                .delete(
                    &Resource::of("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
                    ns,
                    &md_name,
                )
                .unwrap();
            for (av, kind, suffix) in [
                (
                    "infrastructure.cluster.x-k8s.io/v1beta1",
                    "OpenStackMachineTemplate",
                    "open",
                ),
                (
                    "bootstrap.cluster.x-k8s.io/v1beta2",
                    "KubeadmConfigTemplate",
                    "kube",
                ),
            ] {
                sim.store()
                    .delete(&Resource::of(av, kind), ns, &format!("{md_name}-{suffix}"))
                    .unwrap();
            }
        }
        until("the nodegroup gone", || async {
            let r = t.get_v(&TENANT, &format!("{ngs}/{ng}"), "1.9").await;
            (r.status == 404).then_some(())
        })
        .await;
    }
    if driver == Driver::ClusterApi {
        let cl = object(sim, "cluster.x-k8s.io/v1beta2", "Cluster", ns, stack).unwrap();
        assert_eq!(
            cl["spec"]["topology"]["workers"]["machineDeployments"],
            json!([crate::common::capi_drivers::mcapi_worker_entry()])
        );
    }
    until("the driver's two machines", || async {
        running(sim, ns, stack, 2).then_some(())
    })
    .await;
    assert_eq!(machines(sim, ns, stack), a.machines, "{driver:?}");
    assert_eq!(
        rolling_specs(sim, ns),
        a.specs,
        "{driver:?}: nothing of them is left"
    );
    let shown = t.get(&TENANT, &format!("/v1/clusters/{c}")).await.body;
    assert_eq!(shown["status"], "UPDATE_COMPLETE", "{shown}");
}

#[tokio::test]
async fn a_nodegroup_is_added_resized_updated_and_deleted_on_a_cluster_magnum_capi_helm_made_without_rolling_a_machine()
 {
    nodegroups_on(Driver::CapiHelm, "live-1-0a1b2c3d4e5f").await;
}

#[tokio::test]
async fn a_nodegroup_is_added_resized_updated_and_deleted_on_a_cluster_magnum_cluster_api_made_without_rolling_a_machine()
 {
    nodegroups_on(Driver::ClusterApi, "kube-x7k2p").await;
}

/// A template of `who` on `image` with `kube_tag`; its uuid.
async fn template_of(t: &TestApp, who: &As, name: &str, image: &str, kube_tag: &str) -> String {
    let r = t
        .post(
            who,
            "/v1/clustertemplates",
            json!({"name": name, "image_id": image, "coe": "kubernetes",
                   "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                   "external_network_id": "public", "labels": {"kube_tag": kube_tag}}),
        )
        .await;
    r.assert_status(201);
    r.body["uuid"].as_str().unwrap().to_string()
}

async fn upgrade_of(driver: Driver, stack: &str) {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let (t, sim) = (&app.t, &app.sim);
    let Adopted { c, ns, .. } = adopted_on(&app, driver, 1, stack, &TENANT).await;
    let machines_before = machines(sim, &ns, stack);
    let image = "ubuntu-2204-kube-v1.32.1";

    // A downgrade is refused, as for any cluster.
    let old = template_of(t, &TENANT, "k130", "ubuntu-2204-kube-v1.30.2", "v1.30.2").await;
    let r = t
        .post_v(
            &TENANT,
            &format!("/v1/clusters/{c}/actions/upgrade"),
            "1.8",
            json!({"cluster_template": old}),
        )
        .await;
    assert_magnum_error(&r, 400, "downgrades are not supported");

    let next = template_of(t, &TENANT, "k132", image, "v1.32.1").await;
    let before = object(sim, CAPI, "Cluster", &ns, stack).unwrap();
    // CAPI's controllers wait until the test has seen the upgrade in progress: a rollout the
    // simulator finished first would otherwise hide whether the 202 moved the status.
    sim.pause();
    let r = t
        .post_v(
            &TENANT,
            &format!("/v1/clusters/{c}/actions/upgrade"),
            "1.8",
            json!({"cluster_template": next}),
        )
        .await;
    r.assert_status(202);
    let shown = t.get(&TENANT, &format!("/v1/clusters/{c}")).await.body;
    assert_eq!(shown["status"], "UPDATE_IN_PROGRESS", "{shown}");
    match driver {
        Driver::ClusterApi => {
            // The driver's topology: its version and every imageUUID, nothing else.
            let cl = until("the topology to ask for v1.32.1", || async {
                let cl = object(sim, CAPI, "Cluster", &ns, stack)?;
                (cl["spec"]["topology"]["version"] == "v1.32.1").then_some(cl)
            })
            .await;
            let mut want = before["spec"].clone();
            want["topology"]["version"] = json!("v1.32.1");
            want["topology"]["variables"][1]["value"] = json!(image);
            for o in want["topology"]["workers"]["machineDeployments"][0]["variables"]["overrides"]
                .as_array_mut()
                .unwrap()
                .iter_mut()
                .filter(|o| o["name"] == "imageUUID")
            {
                o["value"] = json!(image);
            }
            assert_eq!(cl["spec"], want);
            valid_against_the_crds(std::slice::from_ref(&cl));
            // No topology controller here: the test plays it, rolling the control plane and
            // the workers to the topology's version.
            let kcp_name = cl["spec"]["controlPlaneRef"]["name"].as_str().unwrap();
            let mut kcp = object(sim, KCP, "KubeadmControlPlane", &ns, kcp_name).unwrap();
            kcp["spec"]["version"] = json!("v1.32.1");
            sim.store()
                .put(&Resource::of(KCP, "KubeadmControlPlane"), kcp)
                .unwrap();
            let md_name = format!("{stack}-{WORKER}-p4x9z");
            let mut md = object(sim, CAPI, "MachineDeployment", &ns, &md_name).unwrap();
            md["spec"]["template"]["spec"]["version"] = json!("v1.32.1");
            sim.store()
                .put(&Resource::of(CAPI, "MachineDeployment"), md)
                .unwrap();
        }
        _ => {
            // The chart's way: new machine templates on the image, the control plane and the
            // MachineDeployment pointed at them with the version.
            let kcp_name = format!("{stack}-control-plane");
            let kcp = until("the control plane to ask for v1.32.1", || async {
                let kcp = object(sim, KCP, "KubeadmControlPlane", &ns, &kcp_name)?;
                (kcp["spec"]["version"] == "v1.32.1").then_some(kcp)
            })
            .await;
            let md_name = format!("{stack}-{WORKER}");
            let md = until("the workers to ask for v1.32.1", || async {
                let md = object(sim, CAPI, "MachineDeployment", &ns, &md_name)?;
                (md["spec"]["template"]["spec"]["version"] == "v1.32.1").then_some(md)
            })
            .await;
            for (component, o, r) in [
                (
                    kcp_name.clone(),
                    &kcp,
                    "/spec/machineTemplate/spec/infrastructureRef/name",
                ),
                (
                    md_name.clone(),
                    &md,
                    "/spec/template/spec/infrastructureRef/name",
                ),
            ] {
                valid_against_the_crds(std::slice::from_ref(o));
                let name = o.pointer(r).and_then(Value::as_str).unwrap();
                let suffix = name.strip_prefix(&format!("{component}-")).unwrap();
                assert_eq!(suffix.len(), 8, "{name}");
                assert!(suffix.chars().all(|ch| ch.is_ascii_hexdigit()), "{name}");
                let mt = object(sim, INFRA, "OpenStackMachineTemplate", &ns, name).unwrap();
                valid_against_the_crds(std::slice::from_ref(&mt));
                assert_eq!(
                    mt["spec"]["template"]["spec"]["image"],
                    json!({"id": image})
                );
                assert!(
                    mt["metadata"]["annotations"]["capi.stackhpc.com/template-checksum"]
                        .as_str()
                        .unwrap()
                        .starts_with(suffix)
                );
            }
        }
    }
    sim.resume();

    // CAPI rolls every machine; the watchers complete the upgrade.
    until("every machine replaced", || async {
        let now = machines(sim, &ns, stack);
        (running(sim, &ns, stack, 2) && now.keys().all(|n| !machines_before.contains_key(n)))
            .then_some(())
    })
    .await;
    let done = t.wait_cluster(&TENANT, &c, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["cluster_template_id"], next.as_str(), "{done}");
    assert_eq!(done["coe_version"], "v1.32.1", "{done}");
    assert_eq!(done["labels"]["kube_tag"], "v1.32.1", "{done}");
}

#[tokio::test]
async fn an_adopted_magnum_capi_helm_cluster_upgrades_on_new_chart_machine_templates() {
    upgrade_of(Driver::CapiHelm, "live-1-0a1b2c3d4e5f").await;
}

#[tokio::test]
async fn an_adopted_magnum_cluster_api_cluster_upgrades_through_its_topology() {
    upgrade_of(Driver::ClusterApi, "kube-x7k2p").await;
}

async fn creds_of(user_id: &str) -> Vec<String> {
    keystone()
        .app_credentials_of(user_id)
        .await
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_string())
        .collect()
}

fn text_of(secret: &Value, key: &str) -> String {
    let b = secret["data"][key].as_str().unwrap_or_default();
    String::from_utf8(STANDARD.decode(b).unwrap()).unwrap()
}

fn put_secret(sim: &SimCluster, mut secret: Value, key: &str, text: &str) {
    secret["data"][key] = json!(STANDARD.encode(text));
    sim.store().put(&Resource::core("secrets"), secret).unwrap();
}

/// The driver's credential Secret of `stack` and the name the driver gives the credential of
/// cluster `c`.
fn drivers_names(driver: Driver, stack: &str, c: &str) -> (String, String) {
    match driver {
        Driver::ClusterApi => (format!("{stack}-cloud-config"), c.to_string()),
        _ => (
            format!("{stack}-cloud-credentials"),
            format!("magnum-{c}-0a1b2c3d"),
        ),
    }
}

/// The cluster-api-addon-provider's checksum annotation value for Secret `s` (sha256 of its
/// sorted `key=base64` pairs joined by `;`), computed here as the provider does.
fn providers_checksum(s: &Value) -> Value {
    let mut pairs: Vec<String> = s["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect();
    pairs.sort();
    json!(hex::encode(Sha256::digest(pairs.join(";").as_bytes())))
}

/// Puts the real credential `(id, secret)` into the driver's Secret of `stack` in `ns`, where
/// the fixture has placeholders.
fn with_credential(sim: &SimCluster, ns: &str, name: &str, (id, secret): (&str, &str)) {
    let s = object(sim, "v1", "Secret", ns, name).unwrap();
    let clouds = text_of(&s, "clouds.yaml")
        .replace("ac-id", id)
        .replace("ac-secret", secret);
    put_secret(sim, s, "clouds.yaml", &clouds);
}

/// Rotates cluster `c`'s credential as the holder of `token` (`PATCH /v1/credentials`, 202)
/// and waits for status `want`; the cluster as it then shows.
async fn rotate_as(t: &TestApp, token: &str, c: &str, want: &str) -> Value {
    let r = t
        .call_token(
            Some(token),
            "PATCH",
            &format!("/v1/credentials/{c}"),
            Some("1.12"),
            None,
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    t.wait_cluster_token(token, c, want).await.body
}

/// magnum-capi-helm's `<stack>-cloud-config` add-on, which uses the credential Secret
/// `secret_name` (how the credential reaches the workload cluster).
fn credentials_addon(sim: &SimCluster, ns: &str, stack: &str, secret_name: &str) {
    sim.store()
        .put(
            &Resource::of("addons.stackhpc.com/v1alpha1", "Manifests"),
            json!({"apiVersion": "addons.stackhpc.com/v1alpha1", "kind": "Manifests",
                "metadata": {"name": format!("{stack}-cloud-config"), "namespace": ns, "labels": {
                    format!("{secret_name}.secret.addons.stackhpc.com/uses"): ""}},
                "spec": {"clusterName": stack, "releaseName": "cloud-config",
                         "targetNamespace": "openstack-system"}}),
        )
        .unwrap();
}

/// An adopted cluster of `driver` on `app` whose driver's Secret holds a real credential of
/// its owner, and carol, another member of the project who will rotate it.
struct Rotating {
    c: String,
    ns: String,
    secret_name: String,
    owner_id: String,
    owner_token: String,
    carol_id: String,
    carol_token: String,
    old_id: String,
    old_secret: String,
    who: As,
}

async fn rotating(app: &CapiApp, driver: Driver, stack: &str) -> Rotating {
    let ks = keystone();
    let (owner_id, owner_token) = ks.new_user_token("owner", "member", "alpha").await;
    let (carol_id, carol_token) = ks.new_user_token("carol", "member", "alpha").await;
    let who = As {
        user: Box::leak(owner_id.clone().into_boxed_str()),
        project: Box::leak(ks.project_id("alpha").to_string().into_boxed_str()),
        roles: "member",
    };
    let Adopted { c, ns, .. } = adopted_on(app, driver, 1, stack, &who).await;
    let (secret_name, cred_name) = drivers_names(driver, stack, &c);
    let (old_id, old_secret) = keystone()
        .app_credential(&owner_id, &owner_token, &cred_name)
        .await;
    with_credential(&app.sim, &ns, &secret_name, (&old_id, &old_secret));
    Rotating {
        c,
        ns,
        secret_name,
        owner_id,
        owner_token,
        carol_id,
        carol_token,
        old_id,
        old_secret,
        who,
    }
}

async fn rotation_of(driver: Driver, stacks: [&str; 2]) {
    let _env = env_shared().await;
    // Credentials made here live four days and renew themselves two days ahead.
    let app = capi_app_on(None, None, true, |cfg| {
        cfg.capi.app_cred_expiry_days = 4;
        cfg.capi.app_cred_renew_before_days = 2;
    })
    .await;
    let (t, sim) = (&app.t, &app.sim);
    let stack = stacks[0];
    let Rotating {
        c,
        ns,
        secret_name,
        owner_id,
        owner_token,
        carol_id,
        carol_token,
        old_id,
        old_secret,
        who,
    } = rotating(&app, driver, stack).await;
    let before = object(sim, "v1", "Secret", &ns, &secret_name).unwrap();
    // What delivers it into the workload cluster: magnum-cluster-api's ClusterResourceSet
    // Secret embeds it in cloud.conf; magnum-capi-helm's addons read the Secret itself.
    let provider = format!("{stack}-cloud-provider");
    let conf = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         stringData:\n  cloud.conf: |\n    [Global]\n    application-credential-id={old_id}\n    \
         application-credential-secret={old_secret}\n"
    );
    let addon = format!("{stack}-cloud-config");
    let annotation = format!("secret.addons.stackhpc.com/{secret_name}");
    let addon_annotation = || {
        let a = object(
            sim,
            "addons.stackhpc.com/v1alpha1",
            "Manifests",
            &ns,
            &addon,
        )
        .unwrap();
        a["metadata"]["annotations"][&annotation].clone()
    };
    match driver {
        Driver::ClusterApi => put_secret(
            sim,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "addons.cluster.x-k8s.io/resource-set",
                "metadata": {"name": provider, "namespace": ns},
                "data": {"calico.yaml": STANDARD.encode("kind: List\n")}}),
            "cloud-config-secret.yaml",
            &conf,
        ),
        _ => credentials_addon(sim, &ns, stack, &secret_name),
    }

    // Another member of the project rotates: the credential is hers, in the driver's Secret
    // and format, delivered, and the driver's one is deleted.
    let body = rotate_as(t, &carol_token, &c, "UPDATE_COMPLETE").await;
    assert_eq!(body["user_id"], carol_id.as_str(), "{body}");
    let after = object(sim, "v1", "Secret", &ns, &secret_name).unwrap();
    let doc: Value = yaml_serde::from_str(&text_of(&after, "clouds.yaml")).unwrap();
    let cloud = doc["clouds"].as_object().unwrap().values().next().unwrap();
    let new_id = cloud["auth"]["application_credential_id"]
        .as_str()
        .unwrap()
        .to_string();
    let new_secret = cloud["auth"]["application_credential_secret"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_id, old_id);
    let mut want: Value = yaml_serde::from_str(&text_of(&before, "clouds.yaml")).unwrap();
    let key = want["clouds"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    want["clouds"][&key]["auth"]["application_credential_id"] = json!(new_id);
    want["clouds"][&key]["auth"]["application_credential_secret"] = json!(new_secret);
    assert_eq!(
        doc, want,
        "only the credential changed in the driver's clouds.yaml"
    );
    assert_eq!(after["data"]["cacert"], before["data"]["cacert"]);
    assert!(authenticates(&new_id, &new_secret).await);
    assert!(!authenticates(&old_id, &old_secret).await);
    assert!(!creds_of(&owner_id).await.contains(&old_id));
    assert!(creds_of(&carol_id).await.contains(&new_id));
    match driver {
        Driver::ClusterApi => {
            let p = object(sim, "v1", "Secret", &ns, &provider).unwrap();
            let conf = text_of(&p, "cloud-config-secret.yaml");
            assert!(
                conf.contains(&format!("application-credential-id={new_id}"))
                    && conf.contains(&format!("application-credential-secret={new_secret}"))
                    && !conf.contains(&old_id)
                    && !conf.contains(&old_secret),
                "{conf}"
            );
            assert_eq!(text_of(&p, "calico.yaml"), "kind: List\n");
        }
        _ => assert_eq!(addon_annotation(), providers_checksum(&after)),
    }
    assert!(
        object(
            sim,
            "v1",
            "Secret",
            &ns,
            &format!("{stack}-credential-rotation")
        )
        .is_none()
    );
    let dump = postgres_text(&t.state.pool).await;
    for s in [&new_secret, &old_secret] {
        assert!(!dump.contains(s.as_str()) && !body.to_string().contains(s.as_str()));
    }

    // A day before its expiry it renews itself as ours does: read from the driver's Secret,
    // its successor written there (and delivered), itself deleted.
    crate::common::credential_due_in_a_day(&t.state.pool, &c).await;
    let journal = magnum_capi::service::journal::PgJournal::new(t.state.pool.clone());
    assert_eq!(
        magnum_capi::maintenance::renew_expiring(&t.state.pool, &app.capi, &journal)
            .await
            .unwrap(),
        1,
        "the adopted cluster's credential is due"
    );
    let (renewed, renewed_secret) =
        until("the renewed credential in the driver's Secret", || async {
            let s = object(sim, "v1", "Secret", &ns, &secret_name)?;
            let doc: Value = yaml_serde::from_str(&text_of(&s, "clouds.yaml")).ok()?;
            let cloud = doc["clouds"].as_object()?.values().next()?;
            let id = cloud["auth"]["application_credential_id"].as_str()?;
            (id != new_id).then(|| (id.to_string(), s.clone()))
        })
        .await;
    until("the renewed one deleted, its staging gone", || async {
        let staging = object(
            sim,
            "v1",
            "Secret",
            &ns,
            &format!("{stack}-credential-rotation"),
        );
        (staging.is_none() && !creds_of(&carol_id).await.contains(&new_id)).then_some(())
    })
    .await;
    assert!(creds_of(&carol_id).await.contains(&renewed));
    match driver {
        Driver::ClusterApi => {
            let p = object(sim, "v1", "Secret", &ns, &provider).unwrap();
            let conf = text_of(&p, "cloud-config-secret.yaml");
            assert!(
                conf.contains(&format!("application-credential-id={renewed}")),
                "{conf}"
            );
        }
        _ => assert_eq!(addon_annotation(), providers_checksum(&renewed_secret)),
    }

    // Delete: the credential rotated here goes as ours does.
    let r = t
        .call_token(
            Some(&carol_token),
            "DELETE",
            &format!("/v1/clusters/{c}"),
            Some("latest"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    t.wait_cluster_token(&carol_token, &c, "GONE").await;
    assert!(!creds_of(&carol_id).await.contains(&renewed));

    // An adopted cluster never rotated here: its delete deletes the driver's credential, and
    // leaves alone another credential of its owner's.
    let stack = stacks[1];
    let Adopted { c: c2, .. } = adopted_on(&app, driver, 2, stack, &who).await;
    let (secret_name, cred_name) = drivers_names(driver, stack, &c2);
    let (id, secret) = keystone()
        .app_credential(&owner_id, &owner_token, &cred_name)
        .await;
    let (other, _) = keystone()
        .app_credential(&owner_id, &owner_token, "the-owners-own")
        .await;
    with_credential(sim, &ns, &secret_name, (&id, &secret));
    let r = t
        .call_token(
            Some(&owner_token),
            "DELETE",
            &format!("/v1/clusters/{c2}"),
            Some("latest"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    t.wait_cluster_token(&owner_token, &c2, "GONE").await;
    let left = creds_of(&owner_id).await;
    assert!(!left.contains(&id), "the driver's credential is deleted");
    assert!(
        left.contains(&other),
        "another credential of the owner stays"
    );
}

/// The CRD schemas, and while `on`, a refusal of every write that annotates an add-on with a
/// Secret's checksum (how the service delivers a credential into a magnum-capi-helm cluster).
struct RefusesDelivery {
    crds: magnum_capi::simkube::Validator,
    on: Arc<std::sync::atomic::AtomicBool>,
}

impl magnum_capi::simkube::store::Admission for RefusesDelivery {
    fn validate(
        &self,
        new: &Value,
        old: Option<&Value>,
    ) -> Result<(), Vec<magnum_capi::simkube::store::FieldError>> {
        let delivers = new["metadata"]["annotations"].as_object().is_some_and(|a| {
            a.keys()
                .any(|k| k.starts_with("secret.addons.stackhpc.com/"))
        });
        if delivers && self.on.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(vec![magnum_capi::simkube::store::FieldError::from_message(
                "metadata.annotations: the add-on refuses this write".into(),
            )]);
        }
        self.crds.validate(new, old)
    }

    fn default(&self, obj: &mut Value) {
        self.crds.default(obj);
    }

    fn schema(&self, api_version: &str, kind: &str) -> Option<&Value> {
        self.crds.schema(api_version, kind)
    }
}

/// An adoption never sets this service's own credential (`app_cred_id`); the driver's
/// credential Secret is the cluster's. Gone, the delete cannot clean up what the workload left
/// in the project and says so, as for a cluster this service made (`[capi]
/// cleanup_without_credential = "fail"`), instead of deleting the cluster with no cleanup.
#[tokio::test]
async fn an_adopted_cluster_without_its_drivers_credential_secret_fails_its_delete_naming_what_it_could_not_clean()
 {
    let _env = env_shared().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let ks = keystone();
    let (owner_id, token) = ks.new_user_token("adopter", "member", "alpha").await;
    let project = ks.project_id("alpha").to_string();
    let who = As {
        user: Box::leak(owner_id.into_boxed_str()),
        project: Box::leak(project.clone().into_boxed_str()),
        roles: "member",
    };
    let stack = "live-1-0a1b2c3d4e5f";
    let Adopted { c, ns, .. } = adopted_on(&app, Driver::CapiHelm, 1, stack, &who).await;
    let (secret_name, _) = drivers_names(Driver::CapiHelm, stack, &c);
    app.sim
        .store()
        .delete(&Resource::core("secrets"), &ns, &secret_name)
        .expect("the driver's credential Secret");

    let r = app
        .t
        .call_token(
            Some(&token),
            "DELETE",
            &format!("/v1/clusters/{c}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let failed = app
        .t
        .wait_cluster_token(&token, &c, "DELETE_FAILED")
        .await
        .body;
    let reason = failed["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("its credential Secret is gone")
            && reason.contains(&project)
            && reason.contains("load balancers, floating IPs, security groups and volumes"),
        "{reason}"
    );
}

/// A rotation that fails after its credential was applied (the add-on refuses the annotation
/// that delivers it, a permanent 422): the driver's Secret carries the new credential, so it
/// stays the cluster's and works, the previous one is kept too (the workload was not given the
/// new one), and the failure says both.
#[tokio::test]
async fn a_rotation_that_fails_after_its_credential_is_applied_keeps_both_credentials() {
    let _env = env_shared().await;
    let refuse = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let validator: magnum_capi::simkube::Validator = Arc::new(RefusesDelivery {
        crds: magnum_capi::server::crd_validator(&crate::common::capi::crd_dir()).unwrap(),
        on: refuse.clone(),
    });
    let sim = SimCluster::start(magnum_capi::simkube::SimOptions {
        validator: Some(validator),
        ..crate::common::capi::sim_options(crate::common::wait::SIM_STEP_MS)
    })
    .await
    .unwrap();
    let app = capi_app_on(None, Some(Arc::new(sim)), true, |_| {}).await;
    let (t, sim) = (&app.t, &app.sim);
    let stack = "live-3-0a1b2c3d4e5f";
    let Rotating {
        c,
        ns,
        secret_name,
        carol_id,
        carol_token,
        old_id,
        old_secret,
        ..
    } = rotating(&app, Driver::CapiHelm, stack).await;
    credentials_addon(sim, &ns, stack, &secret_name);
    refuse.store(true, std::sync::atomic::Ordering::SeqCst);

    let body = rotate_as(t, &carol_token, &c, "UPDATE_FAILED").await;
    let live = object(sim, "v1", "Secret", &ns, &secret_name).unwrap();
    let doc: Value = yaml_serde::from_str(&text_of(&live, "clouds.yaml")).unwrap();
    let auth = &doc["clouds"].as_object().unwrap().values().next().unwrap()["auth"];
    let new_id = auth["application_credential_id"].as_str().unwrap();
    let new_secret = auth["application_credential_secret"].as_str().unwrap();
    assert_ne!(
        new_id, old_id,
        "the driver's Secret took the new credential"
    );
    let reason = body["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("{new_id} is in force"))
            && reason.contains(&format!("previous credential {old_id} was kept")),
        "{body}"
    );
    assert!(authenticates(new_id, new_secret).await, "the new one works");
    assert!(
        authenticates(&old_id, &old_secret).await,
        "the old one was kept"
    );
    assert!(creds_of(&carol_id).await.contains(&new_id.to_string()));
    let recorded: Option<String> =
        sqlx::query_scalar("SELECT app_cred_id FROM cluster WHERE uuid = $1::uuid")
            .bind(&c)
            .fetch_one(&t.state.pool)
            .await
            .unwrap();
    assert_eq!(
        recorded.as_deref(),
        Some(new_id),
        "the cluster records the one in force"
    );
    assert!(
        object(
            sim,
            "v1",
            "Secret",
            &ns,
            &format!("{stack}-credential-rotation")
        )
        .is_none(),
        "the staged Secret is gone"
    );
}

#[tokio::test]
async fn an_adopted_magnum_capi_helm_clusters_credential_rotates_in_its_drivers_secret_and_goes_at_delete()
 {
    rotation_of(
        Driver::CapiHelm,
        ["live-1-0a1b2c3d4e5f", "live-2-0a1b2c3d4e5f"],
    )
    .await;
}

#[tokio::test]
async fn an_adopted_magnum_cluster_api_clusters_credential_rotates_in_its_drivers_secret_and_goes_at_delete()
 {
    rotation_of(Driver::ClusterApi, ["kube-x7k2p", "kube-a2b3c"]).await;
}
