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

/// The uuid of the fixture cluster `n`.
pub fn cluster_uuid(n: u32) -> String {
    format!("c1a5e700-{n:04}-4000-8000-00000000a000")
}

/// The Magnum rows of a cluster `n` of `who` made by `driver` (its `stack_id` `stack`) with a
/// master and a worker ([`WORKER`]) nodegroup, `CREATE_COMPLETE`; and its uuid.
fn magnum_rows(
    n: u32,
    driver: Driver,
    stack: &str,
    who: &As,
) -> (magnum_capi::domain::imported::Tables, String) {
    use magnum_capi::domain::imported::Tables;
    let row = |v: Value| v.as_object().cloned().unwrap_or_default();
    let tpl = format!("7e1f0d7a-{n:04}-4000-8000-00000000a000");
    let c = cluster_uuid(n);
    let id = 9000 + i64::from(n) * 10;
    let tables = Tables {
        templates: vec![row(json!({"id": id, "uuid": tpl, "project_id": who.project,
            "user_id": who.user, "name": format!("t-{n}"), "coe": "kubernetes",
            "driver": driver.entry_point(), "labels": "{}"}))],
        clusters: vec![row(json!({"id": id, "uuid": c, "project_id": who.project,
            "user_id": who.user, "name": format!("live-{n}"), "cluster_template_id": tpl,
            "stack_id": stack, "status": "CREATE_COMPLETE", "labels": "{}",
            "api_address": "https://203.0.113.7:6443"}))],
        nodegroups: ["default-master", WORKER]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                row(json!({"id": id + i as i64, "uuid": format!("9e000000-{n:04}-4000-8000-00000000a00{i}"),
                    "name": name, "cluster_id": c, "project_id": who.project,
                    "role": if i == 0 { "master" } else { "worker" }, "node_count": 1, "is_default": 1,
                    "status": "CREATE_COMPLETE"}))
            })
            .collect(),
        quotas: Vec::new(),
    };
    (tables, c)
}

/// Writes, as `magnum-capi import` does without a management cluster to look on, a cluster
/// `n` of `who` made by `driver` (see `magnum_rows`): imported read-only; its uuid.
pub async fn imported_cluster(
    t: &TestApp,
    n: u32,
    driver: Driver,
    stack: &str,
    who: &As,
) -> String {
    let (tables, c) = magnum_rows(n, driver, stack, who);
    let plan =
        magnum_capi::domain::imported::plan(&tables, chrono::Utc::now()).expect("importable rows");
    let mut tx = t.state.pool.begin().await.expect("begin");
    magnum_capi::db::imports::write(&mut tx, &plan)
        .await
        .expect("import");
    tx.commit().await.expect("commit");
    c
}

/// Imports, as `magnum-capi import` does with `fleet` as its management clusters, the cluster
/// `n` of `who` made by `driver` (see `magnum_rows`); its uuid and where it was found (empty:
/// nowhere, so it is read-only).
pub async fn import_with(
    t: &TestApp,
    fleet: &[std::sync::Arc<magnum_capi::capi::driver::Capi>],
    n: u32,
    driver: Driver,
    stack: &str,
    who: &As,
) -> (String, magnum_capi::import::Found) {
    import_into(&t.state.pool, fleet, n, driver, stack, who).await
}

/// [`import_with`] into the magnum-capi database `pool` (another process's, say).
pub async fn import_into(
    pool: &sqlx::PgPool,
    fleet: &[std::sync::Arc<magnum_capi::capi::driver::Capi>],
    n: u32,
    driver: Driver,
    stack: &str,
    who: &As,
) -> (String, magnum_capi::import::Found) {
    let (tables, c) = magnum_rows(n, driver, stack, who);
    let mut plan =
        magnum_capi::domain::imported::plan(&tables, chrono::Utc::now()).expect("importable rows");
    let mut tx = pool.begin().await.expect("begin");
    let (_, found) = magnum_capi::import::write(&mut tx, &mut plan, fleet, false)
        .await
        .expect("import");
    tx.commit().await.expect("commit");
    (c, found)
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
    let secrets = Resource::core("secrets");
    for s in driver_secrets(driver, uuid, stack, project, ca) {
        store.put(&secrets, s).expect("a driver's Secret");
    }
    for (gvk, obj) in capi_objects(driver, &ns, stack, uuid) {
        store
            .put(&Resource::of(gvk.0, gvk.1), obj)
            .expect("a driver's Cluster API object");
    }
}

/// The Secrets `driver` leaves for cluster `uuid` (`stack`) of `project` (see
/// [`load_driver_objects`]): the four CAs (`<stack>-{ca,etcd,proxy,sa}`, the Kubernetes one
/// `ca`) and the application credential's `clouds.yaml` (Keystone at
/// `https://keystone.example.com/v3`, credential `ac-id`/`ac-secret`: placeholders a test
/// replaces with a real one).
pub fn driver_secrets(
    driver: Driver,
    uuid: &str,
    stack: &str,
    project: &str,
    ca: &KeyPairPem,
) -> Vec<Value> {
    let ns = driver.namespace(project);
    let capi_name = json!({"cluster.x-k8s.io/cluster-name": stack});
    // magnum-capi-helm labels what its driver applies with the Magnum owner and uuid, and
    // CAPI's cluster name; magnum-cluster-api labels its CA Secrets with the cluster name only.
    let driver_labels = match driver {
        Driver::CapiHelm => json!({"magnum.openstack.org/project-id": project,
            "magnum.openstack.org/user-id": "u-import", "magnum.openstack.org/cluster-uuid": uuid,
            "cluster.x-k8s.io/cluster-name": stack}),
        _ => capi_name.clone(),
    };
    let mut out = Vec::new();
    for suffix in ["ca", "etcd", "proxy", "sa"] {
        let pair = if suffix == "ca" {
            ca.clone()
        } else {
            magnum_capi::capi::pki::generate_ca(suffix).expect("a CA")
        };
        out.push(secret(
            &ns,
            &format!("{stack}-{suffix}"),
            &driver_labels,
            Some("cluster.x-k8s.io/secret"),
            json!({"tls.crt": b64(&pair.cert_pem), "tls.key": b64(&pair.key_pem)}),
        ));
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
    out.push(secret(
        &ns,
        &cred_name,
        &cred_labels,
        None,
        json!({"clouds.yaml": b64(&clouds), "cacert": b64("")}),
    ));
    out
}

/// The Glance id of the image the fixture clusters' machines boot.
pub const DRIVER_IMAGE: &str = "0b7a4c1e-5d2f-4e8a-9c3b-1a2b3c4d5e6f";

/// The worker nodegroup every fixture cluster has (one machine), beside its control plane.
pub const WORKER: &str = "default-worker";

const CAPI: &str = "cluster.x-k8s.io/v1beta2";

/// magnum-cluster-api's topology entry of the default worker nodegroup, as its
/// `mutate_machine_deployment` writes it (served as CAPI v1beta2: `machineHealthCheck.enable` is
/// `healthCheck.enabled`, `nodeVolumeDetachTimeout: 300s` is `deletion`).
pub fn mcapi_worker_entry() -> Value {
    json!({"class": "default-worker", "name": WORKER, "replicas": 1,
        "metadata": {"labels": {"node-role.kubernetes.io/worker": "",
                                "node.cluster.x-k8s.io/nodegroup": WORKER}},
        "healthCheck": {"enabled": true},
        "deletion": {"nodeVolumeDetachTimeoutSeconds": 300},
        "variables": {"overrides": [
            {"name": "bootVolume", "value": {"size": 0, "type": "__DEFAULT__"}},
            {"name": "flavor", "value": "m1.small"},
            {"name": "imageRepository", "value": ""},
            {"name": "imageUUID", "value": DRIVER_IMAGE},
            {"name": "hardwareDiskBus", "value": ""},
            {"name": "serverGroupId", "value": "5e6f7a8b-0000-4000-8000-00000000000b"},
            {"name": "isServerGroupDiffFailureDomain", "value": false}]}})
}
const KCP: &str = "controlplane.cluster.x-k8s.io/v1beta2";
const KCT: &str = "bootstrap.cluster.x-k8s.io/v1beta2";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

fn r(group: &str, kind: &str, name: &str) -> Value {
    json!({"apiGroup": group, "kind": kind, "name": name})
}

/// The Cluster API objects `driver` leaves for a running cluster `stack` (one control-plane
/// machine, one machine in [`WORKER`]), as the management cluster serves them (CAPI's
/// v1beta2): names and labels are the driver's. magnum-capi-helm (the `openstack-cluster`
/// chart): `<release>`, `<release>-control-plane`, `<release>-<nodegroup>`, labelled
/// `capi.stackhpc.com/{cluster,component,node-group}`. magnum-cluster-api: a ClusterClass
/// topology (`spec.topology`, the nodegroup's replicas there) whose objects CAPI's topology
/// controller names `<cluster>-<random>` and labels `topology.cluster.x-k8s.io/*`.
pub fn capi_objects(
    driver: Driver,
    ns: &str,
    stack: &str,
    uuid: &str,
) -> Vec<((&'static str, &'static str), Value)> {
    let helm = driver == Driver::CapiHelm;
    let (osc, kcp, md) = if helm {
        (
            stack.to_string(),
            format!("{stack}-control-plane"),
            format!("{stack}-{WORKER}"),
        )
    } else {
        (
            format!("{stack}-b7rd9"),
            format!("{stack}-k2x8v"),
            format!("{stack}-{WORKER}-p4x9z"),
        )
    };
    let component = |c: &str| -> Value {
        if helm {
            json!({"capi.stackhpc.com/cluster": stack, "capi.stackhpc.com/component": c,
                   "capi.stackhpc.com/managed-by": "Helm",
                   "capi.stackhpc.com/infrastructure-provider": "openstack",
                   "helm.sh/chart": "openstack-cluster-0.27.0"})
        } else {
            json!({"cluster.x-k8s.io/cluster-name": stack, "topology.cluster.x-k8s.io/owned": ""})
        }
    };
    let mut cluster_labels = if helm {
        component("cluster")
    } else {
        json!({"cluster-uuid": uuid, "cni": "calico-v3.29.3"})
    };
    if helm {
        cluster_labels
            .as_object_mut()
            .map(|m| m.remove("capi.stackhpc.com/component"));
    }
    let mut md_labels = component("worker");
    let mut template_labels = md_labels.clone();
    if helm {
        md_labels["capi.stackhpc.com/node-group"] = json!(WORKER);
        template_labels = json!({"capi.stackhpc.com/cluster": stack,
            "capi.stackhpc.com/component": "worker", "capi.stackhpc.com/node-group": WORKER});
    } else {
        md_labels["topology.cluster.x-k8s.io/deployment-name"] = json!(WORKER);
        template_labels["topology.cluster.x-k8s.io/deployment-name"] = json!(WORKER);
        template_labels["node-role.kubernetes.io/worker"] = json!("");
        template_labels["node.cluster.x-k8s.io/nodegroup"] = json!(WORKER);
    }
    let identity = json!({"cloudName": if helm { "openstack" } else { "default" },
        "name": if helm { format!("{stack}-cloud-credentials") } else { format!("{stack}-cloud-config") }});
    let machine_template = |name: &str, flavor: &str| {
        json!({"apiVersion": INFRA, "kind": "OpenStackMachineTemplate",
            "metadata": {"name": name, "namespace": ns, "labels": component("machine-template")},
            "spec": {"template": {"spec": {"identityRef": identity, "flavor": flavor,
                "image": {"filter": {"name": "ubuntu-2204-kube-v1.31.4"}}, "sshKeyName": "ops-key"}}}})
    };
    let node_registration = json!({"name": "{{ local_hostname }}", "kubeletExtraArgs": [
        {"name": "cloud-provider", "value": "external"},
        {"name": "provider-id", "value": "openstack:///'{{ instance_id }}'"}]});
    // The chart labels a node group's nodes with it (`nodeRegistration.nodeLabels`).
    let mut worker_registration = node_registration.clone();
    if helm && let Some(args) = worker_registration["kubeletExtraArgs"].as_array_mut() {
        args.push(json!({"name": "node-labels",
            "value": format!("capi.stackhpc.com/node-group={WORKER}")}));
    }
    let cp_template = format!("{kcp}-9a8b7c6d");
    let md_template = format!("{md}-1f2e3d4c");
    let md_bootstrap = format!("{md}-5a6b7c8d");
    let mut cluster = json!({"apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": stack, "namespace": ns, "labels": cluster_labels},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.100.0.0/16"]},
                               "services": {"cidrBlocks": ["10.254.0.0/16"]},
                               "serviceDomain": "cluster.local"},
            "controlPlaneRef": r("controlplane.cluster.x-k8s.io", "KubeadmControlPlane", &kcp),
            "infrastructureRef": r("infrastructure.cluster.x-k8s.io", "OpenStackCluster", &osc)}});
    if !helm {
        // The variables of the objects it makes (the others `resources.py` writes have
        // defaults in the class) and each entry's override, as `resources.py` writes them.
        cluster["spec"]["topology"] = json!({"classRef": {"name": MCAPI_CLASS},
            "version": "v1.31.4",
            "controlPlane": {"replicas": 1},
            "variables": [
                {"name": "apiServerLoadBalancer", "value": {"enabled": true}},
                {"name": "imageUUID", "value": DRIVER_IMAGE},
                {"name": "clusterIdentityRefName", "value": format!("{stack}-cloud-config")},
                {"name": "controlPlaneFlavor", "value": "m1.medium"},
                {"name": "externalNetworkId", "value": super::fakecloud::NETWORK_PUBLIC},
                {"name": "flavor", "value": "m1.small"},
                {"name": "nodeCidr", "value": "10.0.0.0/24"},
                {"name": "sshKeyName", "value": "ops-key"}],
            "workers": {"machineDeployments": [mcapi_worker_entry()]}});
    }
    vec![
        (
            (
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackCluster",
            ),
            json!({
            "apiVersion": INFRA, "kind": "OpenStackCluster",
            "metadata": {"name": osc, "namespace": ns, "labels": component("cluster")},
            // Both drivers write the external network's id (CAPO's schema takes only a uuid):
            // the fake cloud's `public`.
            "spec": {"identityRef": identity,
                     "externalNetwork": {"id": super::fakecloud::NETWORK_PUBLIC},
                     "managedSubnets": [{"cidr": "10.0.0.0/24"}],
                     "apiServerLoadBalancer": {"enabled": true},
                     "managedSecurityGroups": {"allowAllInClusterTraffic": true}}}),
        ),
        (
            (
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackMachineTemplate",
            ),
            machine_template(&cp_template, "m1.medium"),
        ),
        (
            (
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackMachineTemplate",
            ),
            machine_template(&md_template, "m1.small"),
        ),
        (
            (
                "bootstrap.cluster.x-k8s.io/v1beta2",
                "KubeadmConfigTemplate",
            ),
            json!({
            "apiVersion": KCT, "kind": "KubeadmConfigTemplate",
            "metadata": {"name": md_bootstrap, "namespace": ns, "labels": component("worker")},
            "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": worker_registration}}}}}),
        ),
        (
            (
                "controlplane.cluster.x-k8s.io/v1beta2",
                "KubeadmControlPlane",
            ),
            json!({
            "apiVersion": KCP, "kind": "KubeadmControlPlane",
            "metadata": {"name": kcp, "namespace": ns, "labels": component("control-plane")},
            "spec": {"version": "v1.31.4", "replicas": 1,
                "machineTemplate": {"spec": {"infrastructureRef":
                    r("infrastructure.cluster.x-k8s.io", "OpenStackMachineTemplate", &cp_template)}},
                "kubeadmConfigSpec": {
                    "clusterConfiguration": {"controllerManager": {"extraArgs": [
                        {"name": "cloud-provider", "value": "external"}]}},
                    "initConfiguration": {"nodeRegistration": node_registration},
                    "joinConfiguration": {"nodeRegistration": node_registration}}}}),
        ),
        (
            ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
            json!({
            "apiVersion": CAPI, "kind": "MachineDeployment",
            "metadata": {"name": md, "namespace": ns, "labels": md_labels},
            "spec": {"clusterName": stack, "replicas": 1,
                "selector": {"matchLabels": template_labels},
                "template": {"metadata": {"labels": template_labels},
                    "spec": {"clusterName": stack, "version": "v1.31.4",
                        "bootstrap": {"configRef": r("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate", &md_bootstrap)},
                        "infrastructureRef": r("infrastructure.cluster.x-k8s.io", "OpenStackMachineTemplate", &md_template)}}}}),
        ),
        (("cluster.x-k8s.io/v1beta2", "Cluster"), cluster),
    ]
}

/// The name of magnum-cluster-api 0.38.1's ClusterClass, and of each of its templates
/// (`src/resources.rs` names them all after the class).
pub const MCAPI_CLASS: &str = "magnum-v0.38.1";

/// magnum-cluster-api's ClusterClass in `ns` and its templates, as its `src/resources.rs` and
/// `src/features/*.rs` write them, reduced to the variables the fixture's Cluster sets and the
/// patches that make its OpenStack objects from them (the flavors, the image, the identity, the
/// external network, the API load balancer, the node CIDR, the SSH key); its other variables
/// (boot volume, server group, disk bus, image repository) are declared, and patch nothing
/// here. What CAPI's topology controller builds a fixture Cluster's control plane, infrastructure
/// and MachineDeployments from on a real management cluster.
pub fn mcapi_cluster_class(ns: &str) -> Vec<Value> {
    let template_ref = |api_version: &str, kind: &str| json!({"templateRef": {"apiVersion": api_version, "kind": kind, "name": MCAPI_CLASS}});
    let meta = json!({"name": MCAPI_CLASS, "namespace": ns});
    // Magnum's machine health check of the class: Ready False or Unknown for five minutes.
    let health_check = json!({
        "checks": {"unhealthyNodeConditions": [
            {"type": "Ready", "status": "False", "timeoutSeconds": 300},
            {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300}]},
        "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "80%"}}});
    let string = json!({"openAPIV3Schema": {"type": "string"}});
    let variable = |name: &str, required: bool, schema: &Value| json!({"name": name, "required": required, "schema": schema});
    let mut variables = vec![variable(
        "apiServerLoadBalancer",
        true,
        &json!({"openAPIV3Schema": {"type": "object", "required": ["enabled"],
            "properties": {"enabled": {"type": "boolean"},
                           "provider": {"type": "string"}}}}),
    )];
    for name in [
        "clusterIdentityRefName",
        "controlPlaneFlavor",
        "externalNetworkId",
        "flavor",
        "imageUUID",
        "nodeCidr",
        "sshKeyName",
    ] {
        variables.push(variable(name, true, &string));
    }
    for name in ["hardwareDiskBus", "imageRepository", "serverGroupId"] {
        variables.push(variable(name, false, &string));
    }
    variables.push(variable(
        "isServerGroupDiffFailureDomain",
        false,
        &json!({"openAPIV3Schema": {"type": "boolean"}}),
    ));
    variables.push(variable(
        "bootVolume",
        false,
        &json!({"openAPIV3Schema": {"type": "object",
            "properties": {"size": {"type": "integer"}, "type": {"type": "string"}}}}),
    ));
    let select = |kind: &str, matching: Value| json!({"apiVersion": INFRA, "kind": kind, "matchResources": matching});
    let cluster = json!({"infrastructureCluster": true});
    let control_plane = json!({"controlPlane": true});
    let workers = json!({"machineDeploymentClass": {"names": ["default-worker"]}});
    let machines = json!({"controlPlane": true,
        "machineDeploymentClass": {"names": ["default-worker"]}});
    let from = |op: &str, path: &str, variable: &str| json!({"op": op, "path": path, "valueFrom": {"variable": variable}});
    let patch =
        |name: &str, definitions: Vec<Value>| json!({"name": name, "definitions": definitions});
    let patches = vec![
        patch(
            "apiServerLoadBalancer",
            vec![
                json!({"selector": select("OpenStackClusterTemplate", cluster.clone()),
                "jsonPatches": [from("add", "/spec/template/spec/apiServerLoadBalancer",
                                     "apiServerLoadBalancer")]}),
            ],
        ),
        patch(
            "clusterIdentityRefName",
            vec![
                json!({"selector": select("OpenStackMachineTemplate", machines.clone()),
                    "jsonPatches": [from("replace", "/spec/template/spec/identityRef/name",
                                         "clusterIdentityRefName")]}),
                json!({"selector": select("OpenStackClusterTemplate", cluster.clone()),
                    "jsonPatches": [from("add", "/spec/template/spec/identityRef/name",
                                         "clusterIdentityRefName")]}),
            ],
        ),
        patch(
            "externalNetworkId",
            vec![
                json!({"selector": select("OpenStackClusterTemplate", cluster.clone()),
                "jsonPatches": [{"op": "add", "path": "/spec/template/spec/externalNetwork",
                    "valueFrom": {"template": "id: {{ .externalNetworkId }}\n"}}]}),
            ],
        ),
        patch(
            "nodeCidr",
            vec![
                json!({"selector": select("OpenStackClusterTemplate", cluster),
                "jsonPatches": [{"op": "add", "path": "/spec/template/spec/managedSubnets",
                    "valueFrom": {"template": "- cidr: {{ .nodeCidr }}\n"}}]}),
            ],
        ),
        patch(
            "flavors",
            vec![
                json!({"selector": select("OpenStackMachineTemplate", control_plane),
                    "jsonPatches": [from("add", "/spec/template/spec/flavor",
                                         "controlPlaneFlavor")]}),
                json!({"selector": select("OpenStackMachineTemplate", workers),
                    "jsonPatches": [from("add", "/spec/template/spec/flavor", "flavor")]}),
            ],
        ),
        patch(
            "images",
            vec![
                json!({"selector": select("OpenStackMachineTemplate", machines.clone()),
                "jsonPatches": [from("add", "/spec/template/spec/image/id", "imageUUID")]}),
            ],
        ),
        json!({"name": "sshKeyName",
            "enabledIf": "{{ if ne .sshKeyName \"\" }}true{{ end }}",
            "definitions": [{"selector": select("OpenStackMachineTemplate", machines),
                "jsonPatches": [from("add", "/spec/template/spec/sshKeyName", "sshKeyName")]}]}),
    ];
    let node_registration = json!({"name": "{{ local_hostname }}", "kubeletExtraArgs": [
        {"name": "cloud-provider", "value": "external"},
        {"name": "provider-id", "value": "openstack:///'{{ instance_id }}'"}]});
    // Placeholders the patches replace: CAPO's schema needs an image, a flavor and an identity
    // on every machine template.
    let identity = json!({"cloudName": "default", "name": "set-by-the-cluster"});
    vec![
        json!({"apiVersion": INFRA, "kind": "OpenStackClusterTemplate", "metadata": meta,
            "spec": {"template": {"spec": {"identityRef": identity,
                "managedSecurityGroups": {"allowAllInClusterTraffic": true}}}}}),
        json!({"apiVersion": KCP, "kind": "KubeadmControlPlaneTemplate", "metadata": meta,
            "spec": {"template": {"spec": {"kubeadmConfigSpec": {
                "clusterConfiguration": {"controllerManager": {"extraArgs": [
                    {"name": "cloud-provider", "value": "external"}]}},
                "initConfiguration": {"nodeRegistration": node_registration},
                "joinConfiguration": {"nodeRegistration": node_registration}}}}}}),
        json!({"apiVersion": INFRA, "kind": "OpenStackMachineTemplate", "metadata": meta,
            "spec": {"template": {"spec": {"identityRef": identity, "flavor": "set-by-the-cluster",
                "image": {"id": "00000000-0000-0000-0000-000000000000"}}}}}),
        json!({"apiVersion": KCT, "kind": "KubeadmConfigTemplate", "metadata": meta,
            "spec": {"template": {"spec": {"joinConfiguration": {
                "nodeRegistration": node_registration}}}}}),
        json!({"apiVersion": CAPI, "kind": "ClusterClass", "metadata": meta,
            "spec": {
                "controlPlane": {
                    "templateRef": template_ref(KCP, "KubeadmControlPlaneTemplate")["templateRef"],
                    "machineInfrastructure": template_ref(INFRA, "OpenStackMachineTemplate"),
                    "healthCheck": health_check,
                    "deletion": {"nodeVolumeDetachTimeoutSeconds": 300}},
                "infrastructure": template_ref(INFRA, "OpenStackClusterTemplate"),
                "workers": {"machineDeployments": [{"class": "default-worker",
                    "bootstrap": template_ref(KCT, "KubeadmConfigTemplate"),
                    "infrastructure": template_ref(INFRA, "OpenStackMachineTemplate"),
                    "healthCheck": health_check,
                    "deletion": {"nodeVolumeDetachTimeoutSeconds": 300}}]},
                "variables": variables,
                "patches": patches}}),
    ]
}
