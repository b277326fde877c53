//! What Magnum's two Cluster API drivers leave behind, for the import tests: the records
//! `magnum-capi import` writes for one of their clusters, and the objects each driver leaves on
//! its management cluster, written from the drivers' sources (magnum-cluster-api 0.38
//! `resources.py`/`utils.py`; magnum-capi-helm 1.4 `driver.py`/`driver_utils.py` and the
//! capi-helm-charts `openstack-cluster` chart), not copied from them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use magnum_capi::capi::pki::KeyPairPem;
use magnum_capi::simkube::{Resource, SimCluster};
use serde_json::{Value, json};

use super::{As, TestApp};

/// A tenant whose project id is what Keystone makes (32 hex digits): magnum-capi-helm's namespace
/// for it is the one this driver uses.
pub const TENANT: As = As {
    user: "u-import",
    project: "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    roles: "member,reader",
};

/// Which driver made a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// magnum-cluster-api: everything in `magnum-system`, named by `stack_id` (`kube-xxxxx`).
    ClusterApi,
    /// magnum-capi-helm: the project's namespace, named by the Helm release (`stack_id`).
    CapiHelm,
    /// The Heat driver: a Heat stack, no Cluster API objects.
    Heat,
}

impl Driver {
    /// The template `driver` column Magnum records.
    pub fn entry_point(self) -> &'static str {
        match self {
            Driver::ClusterApi => "k8s_cluster_api_ubuntu",
            Driver::CapiHelm => "k8s_capi_helm_v1",
            Driver::Heat => "k8s_fedora_coreos_v1",
        }
    }

    /// The namespace its objects are in, for `project`.
    pub fn namespace(self, project: &str) -> String {
        match self {
            Driver::ClusterApi => "magnum-system".into(),
            Driver::CapiHelm => {
                let id: String = project
                    .to_ascii_lowercase()
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .collect();
                format!("magnum-{id}")
            }
            Driver::Heat => String::new(),
        }
    }
}

/// Writes, as `magnum-capi import` does, a cluster `n` of `who` made by `driver` (its `stack_id`
/// `stack`) with a master and a worker nodegroup, `CREATE_COMPLETE`; its uuid.
pub async fn imported_cluster(
    t: &TestApp,
    n: u32,
    driver: Driver,
    stack: &str,
    who: &As,
) -> String {
    use magnum_capi::domain::imported::{Tables, plan};
    let row = |v: Value| v.as_object().cloned().unwrap_or_default();
    let tpl = format!("7e1f0d7a-{n:04}-4000-8000-00000000a000");
    let c = format!("c1a5e700-{n:04}-4000-8000-00000000a000");
    let id = 9000 + i64::from(n) * 10;
    let tables = Tables {
        templates: vec![row(json!({"id": id, "uuid": tpl, "project_id": who.project,
            "user_id": who.user, "name": format!("t-{n}"), "coe": "kubernetes",
            "driver": driver.entry_point(), "labels": "{}"}))],
        clusters: vec![row(json!({"id": id, "uuid": c, "project_id": who.project,
            "user_id": who.user, "name": format!("live-{n}"), "cluster_template_id": tpl,
            "stack_id": stack, "status": "CREATE_COMPLETE", "labels": "{}",
            "api_address": "https://203.0.113.7:6443"}))],
        nodegroups: ["default-master", "default-worker"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                row(json!({"id": id + i as i64, "uuid": format!("9e000000-{n:04}-4000-8000-00000000a00{i}"),
                    "name": name, "cluster_id": c, "project_id": who.project,
                    "role": if i == 0 { "master" } else { "worker" }, "node_count": 1,
                    "status": "CREATE_COMPLETE"}))
            })
            .collect(),
        quotas: Vec::new(),
    };
    let plan = plan(&tables, chrono::Utc::now()).expect("importable rows");
    let mut tx = t.state.pool.begin().await.expect("begin");
    magnum_capi::db::imports::write(&mut tx, &plan)
        .await
        .expect("import");
    tx.commit().await.expect("commit");
    c
}

fn secret(namespace: &str, name: &str, labels: &Value, ty: Option<&str>, data: Value) -> Value {
    let mut s = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": data});
    if let Some(ty) = ty {
        s["type"] = json!(ty);
    }
    s
}

fn b64(s: &str) -> Value {
    json!(STANDARD.encode(s))
}

/// The objects `driver` leaves for cluster `uuid` (`stack`) of `project`, whose Kubernetes CA is
/// `ca` (the etcd, front-proxy and service-account CAs are other keys, as Magnum makes them):
/// the CA Secrets, the application-credential Secret and the CAPI `Cluster`. Loaded into `sim`
/// (with its controllers paused by the caller, so nothing acts on them).
pub fn load_driver_objects(
    sim: &SimCluster,
    driver: Driver,
    uuid: &str,
    stack: &str,
    project: &str,
    ca: &KeyPairPem,
) {
    let ns = driver.namespace(project);
    let store = sim.store();
    store.ensure_namespace(&ns).expect("namespace");
    let capi_name = json!({"cluster.x-k8s.io/cluster-name": stack});
    // magnum-capi-helm labels what its driver applies with the Magnum owner and uuid, and
    // CAPI's cluster name; magnum-cluster-api labels its CA Secrets with the cluster name only.
    let driver_labels = match driver {
        Driver::CapiHelm => json!({"magnum.openstack.org/project-id": project,
            "magnum.openstack.org/user-id": "u-import", "magnum.openstack.org/cluster-uuid": uuid,
            "cluster.x-k8s.io/cluster-name": stack}),
        _ => capi_name.clone(),
    };
    let secrets = Resource::core("secrets");
    for suffix in ["ca", "etcd", "proxy", "sa"] {
        let pair = if suffix == "ca" {
            ca.clone()
        } else {
            magnum_capi::capi::pki::generate_ca(suffix).expect("a CA")
        };
        store
            .put(
                &secrets,
                secret(
                    &ns,
                    &format!("{stack}-{suffix}"),
                    &driver_labels,
                    Some("cluster.x-k8s.io/secret"),
                    json!({"tls.crt": b64(&pair.cert_pem), "tls.key": b64(&pair.key_pem)}),
                ),
            )
            .expect("CA Secret");
    }
    let (cred_name, cred_labels, clouds) = match driver {
        Driver::ClusterApi => (
            format!("{stack}-cloud-config"),
            json!({"cluster-uuid": uuid}),
            "clouds:\n  default:\n    region_name: RegionOne\n    endpoint_type: public\n    \
             identity_api_version: 3\n    verify: true\n    auth:\n      auth_url: \
             https://keystone.example.com/v3\n      application_credential_id: ac-id\n      \
             application_credential_secret: ac-secret\n"
                .to_string(),
        ),
        _ => (
            format!("{stack}-cloud-credentials"),
            driver_labels.clone(),
            "clouds:\n  openstack:\n    identity_api_version: 3\n    region_name: RegionOne\n    \
             interface: public\n    verify: true\n    auth_type: v3applicationcredential\n    \
             auth:\n      auth_url: https://keystone.example.com/v3\n      \
             application_credential_id: ac-id\n      application_credential_secret: ac-secret\n"
                .to_string(),
        ),
    };
    store
        .put(
            &secrets,
            secret(
                &ns,
                &cred_name,
                &cred_labels,
                None,
                json!({"clouds.yaml": b64(&clouds), "cacert": b64("")}),
            ),
        )
        .expect("credential Secret");
    let cluster_labels = match driver {
        Driver::ClusterApi => json!({"cluster-uuid": uuid, "cni": "calico-v3.29.3"}),
        _ => json!({"capi.stackhpc.com/cluster": stack,
            "capi.stackhpc.com/managed-by": "Helm",
            "capi.stackhpc.com/infrastructure-provider": "openstack"}),
    };
    store
        .put(
            &Resource::of("cluster.x-k8s.io/v1beta1", "Cluster"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                "metadata": {"name": stack, "namespace": ns, "labels": cluster_labels},
                "spec": {"controlPlaneEndpoint": {"host": "203.0.113.7", "port": 6443}}}),
        )
        .expect("Cluster");
}
