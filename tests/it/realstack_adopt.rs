//! Adoption of the clusters Magnum's two Cluster API drivers made, on the real management stack
//! (`common::realstack`): each driver's objects (`common::capi_drivers`, and for
//! magnum-cluster-api its ClusterClass) applied to the real apiserver, in a project of their own,
//! with the credential Secret holding a real application credential of the project's user; the
//! real CAPI, KCP, CABPK and CAPO controllers build the cluster on the fake cloud and the node
//! agent plays its servers. `magnum-capi import` (its `import::write`, as the simulated adoption
//! tests call it) then adopts it into `magnum-capi serve` in production mode under the chart's
//! RBAC, and through the API it is resized, upgraded to the next Kubernetes minor and deleted
//! while the real controllers run. Adoption itself rolls no Machine: the same Machines (names
//! and uids), MachineSets and specs before and after.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::api::{Api, DynamicObject, ListParams};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::As;
use crate::common::capi_drivers::{
    DRIVER_IMAGE, Driver, WORKER, capi_objects, cluster_uuid, driver_secrets, import_into,
    mcapi_cluster_class,
};
use crate::common::fakecloud::{FakeCloud, IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT};
use crate::common::keystone::ProjectMember;
use crate::common::realstack::{
    Production, REAL_DEADLINE, RealStack, chart_identity, client_of, config_of, server_side_apply,
    stack,
};
use crate::common::wait::until_within;
use crate::realstack::{
    KUBE_IMAGE, LOOPBACK_CHARTS, UPGRADE_IMAGE, realstack_template, wait_for_status,
};
use magnum_capi::domain::imported::ImportState;

const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const KCP: &str = "controlplane.cluster.x-k8s.io/v1beta2";
const KCT: &str = "bootstrap.cluster.x-k8s.io/v1beta2";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The Kubernetes version of the fake Glance's [`KUBE_IMAGE`] (the fixtures' v1.31.4 becomes it).
const KUBE_VERSION: &str = "v1.30.4";
/// The version of [`UPGRADE_IMAGE`], the next minor.
const UPGRADE_VERSION: &str = "v1.31.6";

/// What `driver` leaves for cluster `uuid` (`stack`) of `owner`, made buildable on the real stack
/// and the fake cloud: the image the fake Glance has ([`KUBE_IMAGE`], so [`KUBE_VERSION`]), its
/// keypair, the real Keystone and application credential `(id, secret)` in the credential
/// Secret. magnum-capi-helm: every object the chart leaves. magnum-cluster-api: its ClusterClass
/// and templates and the topology Cluster as the driver writes it (no refs: CAPI's topology
/// controller makes and names the control plane, the infrastructure and the MachineDeployments,
/// which the simulated fixture holds as the controller made them).
fn objects_for_real(
    driver: Driver,
    stack: &str,
    uuid: &str,
    owner: &ProjectMember,
    keystone: &str,
    (id, secret): (&str, &str),
    ca: &magnum_capi::capi::pki::KeyPairPem,
) -> Vec<Value> {
    let ns = &driver.namespace(&owner.project);
    let mut out = Vec::new();
    if driver == Driver::ClusterApi {
        out.extend(mcapi_cluster_class(ns));
    }
    for mut s in driver_secrets(driver, uuid, stack, &owner.project, ca) {
        if let Some(clouds) = s["data"]["clouds.yaml"].as_str() {
            let text = String::from_utf8(STANDARD.decode(clouds).unwrap()).unwrap();
            let text = text
                .replace("https://keystone.example.com/v3", keystone)
                .replace("ac-id", id)
                .replace("ac-secret", secret);
            s["data"]["clouds.yaml"] = json!(STANDARD.encode(text));
        }
        out.push(s);
    }
    for (_, mut obj) in capi_objects(driver, ns, stack, uuid) {
        if driver == Driver::ClusterApi {
            if obj["kind"] != "Cluster" {
                continue;
            }
            if let Some(spec) = obj["spec"].as_object_mut() {
                spec.remove("controlPlaneRef");
                spec.remove("infrastructureRef");
            }
        }
        let text = obj
            .to_string()
            .replace("ubuntu-2204-kube-v1.31.4", KUBE_IMAGE)
            .replace(DRIVER_IMAGE, IMAGE_UBUNTU_KUBE)
            .replace("v1.31.4", KUBE_VERSION)
            .replace("\"ops-key\"", &format!("\"{KEYPAIR_DEFAULT}\""));
        out.push(serde_json::from_str(&text).unwrap());
    }
    out
}

/// The admin's view of one namespace of the real stack.
struct Ns {
    admin: kube::Client,
    ns: String,
}

impl Ns {
    fn api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        let ar = magnum_capi::capi::apply::resource(api_version, kind);
        Api::namespaced_with(self.admin.clone(), &self.ns, &ar)
    }

    async fn list(&self, api_version: &str, kind: &str, selector: &str) -> Vec<Value> {
        self.api(api_version, kind)
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap_or_else(|e| panic!("listing {kind} in {}: {e}", self.ns))
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.api(api_version, kind)
            .get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("reading {kind} {name}: {e}"))
            .map(|o| serde_json::to_value(o).unwrap())
    }

    /// The Machines of CAPI cluster `stack`: name → (uid, phase).
    async fn machines(&self, stack: &str) -> BTreeMap<String, (String, String)> {
        self.list(CAPI, "Machine", &format!("{CLUSTER_NAME_LABEL}={stack}"))
            .await
            .iter()
            .map(|m| {
                let s = |p: &str| m.pointer(p).and_then(Value::as_str).unwrap_or_default();
                (
                    s("/metadata/name").to_string(),
                    (
                        s("/metadata/uid").to_string(),
                        s("/status/phase").to_string(),
                    ),
                )
            })
            .collect()
    }

    /// The names of the MachineSets of `stack`.
    async fn machine_sets(&self, stack: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .list(CAPI, "MachineSet", &format!("{CLUSTER_NAME_LABEL}={stack}"))
            .await
            .iter()
            .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    }

    /// The specs of everything of `stack` that rolls machines when it changes: its control
    /// plane, its MachineDeployments and the machine and bootstrap templates they point at.
    async fn rolling_specs(&self, stack: &str) -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        let cluster = self.get(CAPI, "Cluster", stack).await.unwrap();
        let kcp_name = cluster["spec"]["controlPlaneRef"]["name"].as_str().unwrap();
        let kcp = self
            .get(KCP, "KubeadmControlPlane", kcp_name)
            .await
            .unwrap();
        let mut templates = vec![(
            INFRA,
            "OpenStackMachineTemplate",
            kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"].clone(),
        )];
        out.insert(
            format!("KubeadmControlPlane/{kcp_name}"),
            kcp["spec"].clone(),
        );
        for md in self
            .list(
                CAPI,
                "MachineDeployment",
                &format!("{CLUSTER_NAME_LABEL}={stack}"),
            )
            .await
        {
            let spec = &md["spec"]["template"]["spec"];
            templates.push((
                INFRA,
                "OpenStackMachineTemplate",
                spec["infrastructureRef"]["name"].clone(),
            ));
            templates.push((
                KCT,
                "KubeadmConfigTemplate",
                spec["bootstrap"]["configRef"]["name"].clone(),
            ));
            out.insert(
                format!("MachineDeployment/{}", md["metadata"]["name"]),
                md["spec"].clone(),
            );
        }
        for (av, kind, name) in templates {
            let name = name.as_str().unwrap();
            let t = self.get(av, kind, name).await.unwrap();
            out.insert(format!("{kind}/{name}"), t["spec"].clone());
        }
        out
    }
}

/// Everything the fake cloud still holds of `project` (or naming `words`).
fn left_in_the_cloud(cloud: &FakeCloud, project: &str, words: &[&str]) -> Vec<Value> {
    let of = |v: &Value| {
        ["project_id", "tenant_id", "os-vol-tenant-attr:tenant_id"]
            .iter()
            .any(|k| v[*k] == project)
            || ["name", "description"].iter().any(|k| {
                v[*k]
                    .as_str()
                    .is_some_and(|s| words.iter().any(|w| s.contains(w)))
            })
    };
    cloud.resources_where(of)
}

/// The controllers' logs when a test fails (what they were waiting for).
struct LogsOnFailure(&'static RealStack);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for part in ["capi-core", "capi-controlplane", "capo", "node-agent"] {
                eprintln!("--- {part}:\n{}", self.0.log_tail(part, 25));
            }
        }
    }
}

/// A cluster `driver` made (fixture cluster `n`, `stack` derived from the project by
/// `stack_of`), running on real Cluster API, adopted by magnum-capi, resized, upgraded and
/// deleted through its API.
async fn adopted_on_the_real_stack(driver: Driver, n: u32, stack_of: fn(&str) -> String) {
    let t0 = Instant::now();
    let s = stack().await;
    let _logs = LogsOnFailure(s);
    let (ks, cloud) = crate::common::stack::parts().await;
    let kubeconfig = chart_identity(s).await;
    let served = Production::start(0, &kubeconfig, LOOPBACK_CHARTS, "").await;
    // A project of its own: a namespace of its own for magnum-capi-helm's objects, and its
    // own resources in the fake cloud.
    let owner = ks.new_project("adopt").await;
    let stack_name = stack_of(&owner.project);
    let stack = stack_name.as_str();
    let ns = driver.namespace(&owner.project);
    s.namespace(&ns).await;
    let uuid = cluster_uuid(n);
    let credential_name = match driver {
        Driver::ClusterApi => uuid.clone(),
        _ => format!("magnum-{uuid}"),
    };
    let (ac_id, ac_secret) = ks
        .app_credential(&owner.user, &owner.token, &credential_name)
        .await;
    let ca = magnum_capi::capi::pki::generate_ca("kubernetes").unwrap();
    let admin = s.admin().await;
    let field_manager = match driver {
        Driver::ClusterApi => "magnum-cluster-api",
        _ => "helm",
    };
    for obj in objects_for_real(
        driver,
        stack,
        &uuid,
        &owner,
        &ks.url,
        (&ac_id, &ac_secret),
        &ca,
    ) {
        server_side_apply(&admin, &obj, field_manager, false)
            .await
            .unwrap_or_else(|e| {
                panic!("applying {} {}: {e}", obj["kind"], obj["metadata"]["name"])
            });
    }
    let k = Ns {
        admin: admin.clone(),
        ns: ns.clone(),
    };
    if driver == Driver::ClusterApi {
        // The simulated fixture's Cluster as the topology controller leaves it (its refs set)
        // passes the real webhooks judging it against the real class.
        let (_, fixture) = capi_objects(driver, &ns, "kube-fx7q3", &cluster_uuid(8))
            .into_iter()
            .find(|(_, o)| o["kind"] == "Cluster")
            .unwrap();
        server_side_apply(&admin, &fixture, field_manager, true)
            .await
            .unwrap_or_else(|e| panic!("the fixture's Cluster against the real class: {e}"));
    }

    // The real controllers build it: two Machines Running, the control plane ready.
    until_within(
        REAL_DEADLINE,
        "the driver's cluster to run on real Cluster API",
        || async {
            let m = k.machines(stack).await;
            let cluster = k.get(CAPI, "Cluster", stack).await?;
            let kcp_name = cluster["spec"]["controlPlaneRef"]["name"].as_str()?;
            let kcp = k.get(KCP, "KubeadmControlPlane", kcp_name).await?;
            (m.len() == 2
                && m.values().all(|(_, phase)| phase == "Running")
                && kcp["status"]["readyReplicas"] == 1)
                .then_some(())
        },
    )
    .await;
    eprintln!(
        "{driver:?}: running on real Cluster API after {:.1?}",
        t0.elapsed()
    );
    if driver == Driver::ClusterApi {
        // What the simulated fixture holds as CAPI's topology controller made it is what the
        // real one made: the worker's MachineDeployment found by its topology labels, named
        // `<cluster>-<entry>-<random>`.
        let mds = k
            .list(
                CAPI,
                "MachineDeployment",
                &format!(
                    "{CLUSTER_NAME_LABEL}={stack},topology.cluster.x-k8s.io/owned,\
                     topology.cluster.x-k8s.io/deployment-name={WORKER}"
                ),
            )
            .await;
        assert_eq!(mds.len(), 1, "{mds:?}");
        let name = mds[0]["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with(&format!("{stack}-{WORKER}-")), "{name}");
    }
    let machines_before = k.machines(stack).await;
    let sets_before = k.machine_sets(stack).await;
    let specs_before = k.rolling_specs(stack).await;

    // `magnum-capi import` on the management cluster that has it, as the service's identity:
    // adopted.
    let cfg = magnum_capi::config::Config::load(Some(&served.config)).unwrap();
    let auth = magnum_capi::app::AuthMode::Keystone(Arc::new(
        magnum_capi::openstack::Keystone::new(&cfg.keystone, &cfg.openstack).unwrap(),
    ));
    let capi =
        magnum_capi::server::capi_runtime(&cfg, &auth, client_of(config_of(&kubeconfig).await))
            .unwrap();
    let pool = magnum_capi::db::connect(&served.database, &cfg.database)
        .await
        .unwrap();
    let who = As {
        user: Box::leak(owner.user.clone().into_boxed_str()),
        project: Box::leak(owner.project.clone().into_boxed_str()),
        roles: "member",
    };
    let (c, found) = import_into(&pool, &[capi], n, driver, stack, &who).await;
    assert_eq!(found.len(), 1, "{driver:?}: {found:?}");
    let imported = magnum_capi::db::imports::of_cluster(&pool, c.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(imported.state(), Some(ImportState::Adopted));

    // Its status, version, health and addresses from what the real controllers report.
    let path = format!("/v1/clusters/{c}");
    let token = &owner.token;
    let shown = until_within(
        REAL_DEADLINE,
        "the adopted cluster's health from the real objects",
        || async {
            let (_, b) = served.call(token, Method::GET, &path, None).await;
            (b["health_status"] == "HEALTHY"
                && b["coe_version"] == KUBE_VERSION
                && b["node_addresses"].as_array().is_some_and(|a| a.len() == 1))
            .then_some(b)
        },
    )
    .await;
    assert_eq!(shown["status"], "CREATE_COMPLETE", "{shown}");
    let api = shown["api_address"].as_str().unwrap_or_default();
    assert!(api.starts_with("https://127.100."), "{shown}");
    let (st, shown_ca) = served
        .call(token, Method::GET, &format!("/v1/certificates/{c}"), None)
        .await;
    assert_eq!(st, 200, "{shown_ca}");
    assert_eq!(shown_ca["pem"].as_str(), Some(ca.cert_pem.as_str()));

    // Adoption rolled nothing: the same Machines, MachineSets and specs, a while later too.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(k.machines(stack).await, machines_before, "{driver:?}");
    assert_eq!(k.machine_sets(stack).await, sets_before, "{driver:?}");
    assert_eq!(k.rolling_specs(stack).await, specs_before, "{driver:?}");
    eprintln!("{driver:?}: adopted after {:.1?}", t0.elapsed());

    // Resize: the driver's replicas, a third machine, the others kept.
    let (st, b) = served
        .call(
            token,
            Method::PATCH,
            &path,
            Some(json!([{"op": "replace", "path": "/node_count", "value": 2}])),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let body = wait_for_status(&served, token, &path, "UPDATE_COMPLETE").await;
    assert_eq!(body["node_count"], 2, "{body}");
    let after = until_within(REAL_DEADLINE, "three machines running", || async {
        let m = k.machines(stack).await;
        (m.len() == 3 && m.values().all(|(_, p)| p == "Running")).then_some(m)
    })
    .await;
    assert!(
        machines_before
            .iter()
            .all(|(n, (u, _))| after.get(n).map(|(au, _)| au) == Some(u)),
        "a resize adds a machine and keeps the others: {machines_before:?} → {after:?}"
    );
    assert_eq!(
        k.machine_sets(stack).await,
        sets_before,
        "a resize rolls nothing"
    );
    until_within(REAL_DEADLINE, "both workers' addresses", || async {
        let (_, b) = served.call(token, Method::GET, &path, None).await;
        (b["node_addresses"].as_array().map(Vec::len) == Some(2)).then_some(())
    })
    .await;
    eprintln!("{driver:?}: resized after {:.1?}", t0.elapsed());

    // Upgrade to the next minor: the driver's way, every Machine rolled by the real controllers.
    cloud.add_image(
        json!({"id": UPGRADE_IMAGE, "name": "ubuntu-2204-kube-v1.31.6",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": UPGRADE_VERSION,
        "created_at": "2024-09-01T12:00:00Z"}),
    );
    let next = realstack_template(&served, token, "adopt-v1.31", UPGRADE_IMAGE, "m1.large").await;
    let (st, b) = served
        .call(
            token,
            Method::POST,
            &format!("{path}/actions/upgrade"),
            Some(json!({"cluster_template": next})),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let body = wait_for_status(&served, token, &path, "UPDATE_COMPLETE").await;
    assert_eq!(body["coe_version"], UPGRADE_VERSION, "{body}");
    assert_eq!(body["cluster_template_id"], next.as_str(), "{body}");
    let upgraded = until_within(
        REAL_DEADLINE,
        "every machine replaced and running",
        || async {
            let m = k.machines(stack).await;
            (m.len() == 3
                && m.values().all(|(_, p)| p == "Running")
                && m.keys().all(|n| !after.contains_key(n)))
            .then_some(m)
        },
    )
    .await;
    assert_eq!(upgraded.len(), 3);
    eprintln!("{driver:?}: upgraded after {:.1?}", t0.elapsed());

    // Delete: the driver's Cluster (CAPI and CAPO take the rest down), its Secrets; nothing of
    // it left on the management cluster or in the fake cloud.
    let (st, b) = served.call(token, Method::DELETE, &path, None).await;
    assert_eq!(st, 204, "{b}");
    wait_for_status(&served, token, &path, "DELETE_COMPLETE").await;
    for (av, kind) in [
        (CAPI, "Cluster"),
        (CAPI, "Machine"),
        (CAPI, "MachineSet"),
        (CAPI, "MachineDeployment"),
        (KCP, "KubeadmControlPlane"),
        (INFRA, "OpenStackCluster"),
        (INFRA, "OpenStackMachine"),
    ] {
        let left: Vec<Value> = k
            .list(av, kind, "")
            .await
            .into_iter()
            .filter(|o| {
                o["metadata"]["name"] == stack
                    || o["metadata"]["labels"][CLUSTER_NAME_LABEL] == stack
            })
            .collect();
        assert!(left.is_empty(), "{driver:?}: {kind} left: {left:?}");
    }
    // Gone, not deleting: the credential-bearing ones are deleted in the background.
    let prefix = format!("{stack}-");
    let secrets: Vec<Value> = k
        .list("v1", "Secret", "")
        .await
        .into_iter()
        .filter(|s| {
            s["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|s| {
            let m = &s["metadata"];
            json!([
                m["name"],
                m["deletionTimestamp"],
                m["finalizers"],
                m["ownerReferences"]
            ])
        })
        .collect();
    // Said with the service's log about the cluster (its clean-up's and any rotation's lines).
    assert!(
        secrets.is_empty(),
        "{driver:?}: Secrets left (name, deleting since, finalizers, owners): {secrets:?}\n{}",
        crate::realstack::controllers_about(s, &served, &path, Some(stack))
    );
    let capo_name = format!("k8s-clusterapi-cluster-{ns}-{stack}");
    let left = until_within(
        REAL_DEADLINE,
        "the fake cloud emptied of the cluster",
        || async {
            let left = left_in_the_cloud(cloud, &owner.project, &[&capo_name]);
            left.is_empty().then_some(left)
        },
    )
    .await;
    assert!(left.is_empty());
    eprintln!("{driver:?}: the whole test took {:.1?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_magnum_capi_helm_made_is_adopted_resized_upgraded_and_deleted_on_real_cluster_api()
 {
    // The chart's release name: the Magnum cluster's name and the project's first 12 hex.
    adopted_on_the_real_stack(Driver::CapiHelm, 4101, |project| {
        format!("live-4101-{}", &project[..12])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_magnum_cluster_api_made_is_adopted_resized_upgraded_and_deleted_on_real_cluster_api()
 {
    // magnum-cluster-api's `kube-<5 random>`.
    adopted_on_the_real_stack(Driver::ClusterApi, 4102, |_| {
        let r = uuid::Uuid::new_v4().simple().to_string();
        format!("kube-{}", &r[..5])
    })
    .await;
}
