//! Rendering Magnum clusters into CAPI/CAPO objects: snapshots of representative clusters, every
//! object validated against the CAPI/CAPO CRD schemas, and the rules of the values document.

use crate::common::capi::crd_dir;
use std::collections::BTreeSet;
use std::sync::OnceLock;

use magnum_capi::capi::render::{Renderer, referenced_templates, to_yaml};
use magnum_capi::capi::values::{
    self, ApiRows, Inputs, Values, ValuesError, placeholder_cas, placeholder_credentials,
    rows_from_api,
};
use magnum_capi::config::CapiConfig;
use magnum_capi::domain::resources::{FlavorSize, Resolved};
use magnum_capi::k8s::schema::{CrdSchemas, check_metadata};
use secrecy::SecretString;
use serde_json::{Value, json};

const IMAGE_ID: &str = "0d7f3b6e-5f0c-4b55-9b1e-2f6a4c1d9e01";
const EXTERNAL_NET_ID: &str = "6a1c2f3e-8b7d-4e5f-a1b2-c3d4e5f60718";
const FIXED_NET_ID: &str = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
const FIXED_SUBNET_ID: &str = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9";
const CLUSTER_UUID: &str = "5d12f6fd-a196-4bf0-ae4c-1f639a523a52";
const PROJECT: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";
const USER: &str = "f9e8d7c6b5a4938271605f4e3d2c1b0a";

// ---------------------------------------------------------------------------------------------
// Fixtures

/// The CRDs, compiled once for the whole binary. Missing CRDs fail the tests (never skip them).
fn schemas() -> &'static CrdSchemas {
    static SCHEMAS: OnceLock<CrdSchemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let dir = crd_dir();
        CrdSchemas::load(&dir).unwrap_or_else(|e| {
            panic!(
                "the CAPI/CAPO CRDs are needed to validate rendered objects: {e} \
                 (set MAGNUM_CAPI_CRD_DIR to a directory of CRD files)"
            )
        })
    })
}

pub(crate) fn renderer() -> &'static Renderer {
    static RENDERER: OnceLock<Renderer> = OnceLock::new();
    RENDERER.get_or_init(|| Renderer::new(None).unwrap())
}

fn template_body() -> Value {
    json!({
        "uuid": "3e0c3a0e-1b7a-4a43-9f6c-0d2b8f1c2a11",
        "name": "k8s-v1.33",
        "image_id": "ubuntu-2204-kube-v1.33.5",
        "flavor_id": "m1.medium",
        "master_flavor_id": "m1.large",
        "keypair_id": "ops-key",
        "external_network_id": "public",
        "dns_nameserver": "8.8.8.8,1.1.1.1",
        "network_driver": "calico",
        "coe": "kubernetes",
        "labels": {}
    })
}

fn cluster_body() -> Value {
    json!({
        "uuid": CLUSTER_UUID,
        "name": "demo",
        "project_id": PROJECT,
        "user_id": USER,
        "master_count": 1,
        "node_count": 2,
        "stack_id": "c5d12f6fda1964bf0ae4c1f639a523a52"
    })
}

/// Rows as the API would store them, with what Glance/Nova/Neutron resolved.
pub(crate) fn rows(template: Value, cluster: Value, nodegroups: Option<Value>) -> ApiRows {
    let mut r = rows_from_api(&template, &cluster, nodegroups.as_ref()).unwrap();
    r.template.resolved = Resolved {
        image_id: Some(IMAGE_ID.into()),
        os_distro: Some("ubuntu".into()),
        kube_version: Some("v1.33.5".into()),
        flavor_id: Some("3".into()),
        master_flavor_id: Some("4".into()),
        external_network_id: Some(EXTERNAL_NET_ID.into()),
        fixed_network_id: None,
        fixed_subnet_id: None,
        gpu_flavor_ids: Vec::new(),
        flavor_sizes: [("3", (2, 4096, 40)), ("4", (4, 8192, 80))]
            .into_iter()
            .map(|(id, (vcpus, ram_mib, disk_gib))| {
                (
                    id.to_string(),
                    FlavorSize {
                        vcpus,
                        ram_mib,
                        disk_gib,
                    },
                )
            })
            .collect(),
        load_balancer_service: None,
    };
    r.cluster.resolved = r.template.resolved.clone();
    r
}

pub(crate) fn with_labels(labels: Value) -> (Value, Value) {
    let mut t = template_body();
    t["labels"] = labels;
    (t, cluster_body())
}

/// The operator settings renders use: the defaults, with the management cluster's egress
/// addresses said (`api_master_lb_allowed_cidrs` is refused without them).
pub(crate) fn render_config() -> CapiConfig {
    CapiConfig {
        egress_cidrs: vec![MGMT_EGRESS.into()],
        ..CapiConfig::default()
    }
}

/// The management cluster's egress addresses of [`render_config`].
pub(crate) const MGMT_EGRESS: &str = "198.51.100.0/28";

pub(crate) fn build_values(r: &ApiRows, config: &CapiConfig) -> Result<Values, ValuesError> {
    values::build(Inputs {
        template: &r.template,
        cluster: &r.cluster,
        nodegroups: &r.nodegroups,
        config,
        credentials: None,
        cas: None,
        rollout_after: None,
        etcd_encryption: None,
    })
}

/// Values as at create: with a credential and (placeholder) CAs.
fn build_for_create(r: &ApiRows, credentials: values::CloudCredentials) -> Values {
    let cas = placeholder_cas();
    values::build(Inputs {
        template: &r.template,
        cluster: &r.cluster,
        nodegroups: &r.nodegroups,
        config: &render_config(),
        credentials: Some(credentials),
        cas: Some(&cas),
        rollout_after: None,
        etcd_encryption: None,
    })
    .unwrap()
}

pub(crate) fn render_rows(r: &ApiRows) -> Vec<Value> {
    let v = build_values(r, &render_config()).unwrap();
    renderer().render(&v).unwrap()
}

fn credentials() -> values::CloudCredentials {
    values::CloudCredentials {
        auth_url: "https://keystone.example.com:5000/v3".into(),
        region_name: Some("RegionOne".into()),
        interface: "public".into(),
        application_credential_id: "appcred-id-123".into(),
        application_credential_secret: SecretString::from("s3cr3t-app-cred".to_owned()),
        cacert: Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into()),
        verify: true,
    }
}

/// Every object validates against its CRD (CAPI/CAPO kinds) or is one of the kinds we know have
/// none here; and passes the apiserver's metadata rules.
pub(crate) fn assert_valid(objects: &[Value]) {
    // Built-in kinds; every CAPI/CAPO/CAAPH kind we render (HelmChartProxy and
    // ClusterResourceSet included) is checked against its CRD.
    let no_crd: BTreeSet<&str> = [
        "Namespace",
        "Secret",
        "ConfigMap",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
    ]
    .into_iter()
    .collect();
    for obj in objects {
        let kind = obj["kind"].as_str().unwrap();
        let name = obj["metadata"]["name"].as_str().unwrap();
        match schemas().validate(obj) {
            Ok(true) => assert!(!no_crd.contains(kind), "{kind} unexpectedly has a CRD"),
            Ok(false) => assert!(no_crd.contains(kind), "no CRD for {kind}/{name}"),
            Err(errors) => panic!("{kind}/{name} is invalid:\n{}", errors.join("\n")),
        }
        let problems = check_metadata(obj);
        assert!(problems.is_empty(), "{problems:#?}");
    }
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn find<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The k8s-keystone-auth manifests' ConfigMap (beside the etcd defragmentation's).
fn keystone_config_map(objects: &[Value]) -> &Value {
    find(objects, "ConfigMap")
        .into_iter()
        .find(|c| {
            c["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-keystone-auth")
        })
        .expect("the keystone-auth ConfigMap")
}

pub(crate) fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = find(objects, kind);
    assert_eq!(found.len(), 1, "expected one {kind}");
    found[0]
}

fn decode(b64: &Value) -> String {
    use base64::Engine as _;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap(),
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Representative clusters: snapshot + schema validation

#[test]
fn single_master_cluster_with_credentials_and_cas() {
    let r = rows(template_body(), cluster_body(), None);
    let v = build_for_create(&r, credentials());
    let objects = renderer().render(&v).unwrap();
    assert_valid(&objects);
    assert_eq!(
        kinds(&objects),
        [
            "Namespace",
            "Secret",
            "Secret",
            "Secret",
            "Secret",
            "Secret",
            "Secret",
            // The etcd defragmentation CronJob, a ClusterResourceSet resource.
            "ConfigMap",
            "OpenStackMachineTemplate",
            "OpenStackMachineTemplate",
            "KubeadmConfigTemplate",
            "OpenStackCluster",
            "KubeadmControlPlane",
            "Cluster",
            "MachineDeployment",
            "MachineHealthCheck",
            "MachineHealthCheck",
            "ClusterResourceSet",
            "HelmChartProxy",
            "HelmChartProxy",
            "HelmChartProxy",
            // metrics-server, on by default.
            "HelmChartProxy",
        ]
    );
    // Single master: no load balancer, the API gets a floating IP.
    let osc = one(&objects, "OpenStackCluster");
    assert_eq!(osc["spec"]["apiServerLoadBalancer"]["enabled"], false);
    assert_eq!(osc["spec"]["disableAPIServerFloatingIP"], false);
    assert_eq!(osc["spec"]["managedSubnets"][0]["cidr"], "10.0.0.0/24");
    assert_eq!(
        osc["spec"]["identityRef"],
        json!({"cloudName": "openstack", "name": "c5d12f6fda1964bf0ae4c1f639a523a52-cloud-credentials"})
    );
    // The credential reaches CAPO and, through the resource-set Secret, the workload cluster.
    let secrets = find(&objects, "Secret");
    let creds = secrets
        .iter()
        .find(|s| {
            s["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-cloud-credentials")
        })
        .unwrap();
    let clouds: Value = yaml_serde::from_str(&decode(&creds["data"]["clouds.yaml"])).unwrap();
    assert_eq!(
        clouds["clouds"]["openstack"]["auth"]["application_credential_secret"],
        "s3cr3t-app-cred"
    );
    assert_eq!(
        clouds["clouds"]["openstack"]["auth_type"],
        "v3applicationcredential"
    );
    assert_eq!(clouds["clouds"]["openstack"]["region_name"], "RegionOne");
    assert!(decode(&creds["data"]["cacert"]).starts_with("-----BEGIN CERTIFICATE-----"));
    let rs = secrets
        .iter()
        .find(|s| s["type"] == "addons.cluster.x-k8s.io/resource-set")
        .unwrap();
    let inner: Value = yaml_serde::from_str(&decode(&rs["data"]["cloud-config.yaml"])).unwrap();
    assert_eq!(
        inner["metadata"],
        json!({"name": "cloud-config", "namespace": "kube-system"})
    );
    let conf = decode(&inner["data"]["cloud.conf"]);
    assert!(
        conf.contains("application-credential-secret=\"s3cr3t-app-cred\""),
        "{conf}"
    );
    assert!(conf.contains("ca-file=/etc/config/ca.crt"), "{conf}");
    assert!(
        conf.contains(&format!("floating-network-id=\"{EXTERNAL_NET_ID}\"")),
        "{conf}"
    );
    // No HelmChartProxy carries the credential.
    for hcp in find(&objects, "HelmChartProxy") {
        assert!(!hcp.to_string().contains("s3cr3t"));
    }
    let ca = secrets
        .iter()
        .find(|s| s["metadata"]["name"].as_str().unwrap().ends_with("-ca"))
        .unwrap();
    assert_eq!(ca["type"], "cluster.x-k8s.io/secret");
    assert!(decode(&ca["data"]["tls.key"]).starts_with("PLACEHOLDER"));
    insta::assert_json_snapshot!("single_master", objects);
}

#[test]
fn ha_cluster_with_load_balancer_and_allowed_cidrs() {
    let (t, mut c) = with_labels(json!({
        "api_master_lb_allowed_cidrs": "10.0.0.0/8, 192.168.10.0/24",
        "octavia_provider": "amphora",
        "api_server_lb_flavor": "lb-small",
        "api_server_lb_availability_zone": "az-lb",
        "control_plane_availability_zones": "az1,az2,az3",
        "etcd_volume_size": "10",
        "etcd_volume_type": "ssd",
        "api_server_cert_sans": "api.example.com,203.0.113.10",
        "oidc_issuer_url": "https://idp.example.com",
        "oidc_client_id": "kubernetes",
        "oidc_groups_claim": "groups",
        "admission_control_list": "PodSecurity,NodeRestriction"
    }));
    c["master_count"] = json!(3);
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    let osc = one(&objects, "OpenStackCluster");
    assert_eq!(
        osc["spec"]["apiServerLoadBalancer"],
        json!({"enabled": true, "provider": "amphora",
               "allowedCIDRs": ["10.0.0.0/8", "192.168.10.0/24", MGMT_EGRESS],
               "flavor": "lb-small", "availabilityZone": "az-lb"})
    );
    assert_eq!(
        osc["spec"]["controlPlaneAvailabilityZones"],
        json!(["az1", "az2", "az3"])
    );
    let kcp = one(&objects, "KubeadmControlPlane");
    assert_eq!(kcp["spec"]["replicas"], 3);
    assert_eq!(
        kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"][0],
        json!({"name": "enable-admission-plugins", "value": "NodeRestriction,PodSecurity"})
    );
    insta::assert_json_snapshot!("ha", objects);
}

#[test]
fn extra_nodegroups_with_their_own_flavor_image_zone_labels_and_taints() {
    let ngs = json!({"nodegroups": [
        {"uuid": "11111111-1111-4111-8111-111111111111", "name": "default-master",
         "role": "master", "node_count": 1, "is_default": true},
        {"uuid": "22222222-2222-4222-8222-222222222222", "name": "default-worker",
         "role": "worker", "node_count": 2, "is_default": true},
        {"uuid": "33333333-3333-4333-8333-333333333333", "name": "GPU Nodes (A100)",
         "role": "gpu", "node_count": 1, "flavor_id": "g1.xlarge",
         "image_id": "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d",
         "labels": {"availability_zone": "az2", "boot_volume_size": "100"},
         "node_labels": {"nvidia.com/gpu.present": "true", "team": "ml"},
         "node_taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                          {"key": "dedicated", "effect": "NoExecute"}]},
        {"uuid": "44444444-4444-4444-8444-444444444444", "name": "infra",
         "role": "infra", "node_count": 0, "labels": {"extra_network_names": "storage-net mgmt-net"}}
    ]});
    let (t, c) = with_labels(json!({"availability_zone": "az1"}));
    let objects = render_rows(&rows(t, c, Some(ngs)));
    assert_valid(&objects);
    let mds = find(&objects, "MachineDeployment");
    assert_eq!(mds.len(), 3);
    let gpu = mds
        .iter()
        .find(|m| {
            m["metadata"]["name"]
                .as_str()
                .unwrap()
                .contains("-gpu-nodes-a-33333333")
        })
        .expect("gpu MachineDeployment named after the nodegroup");
    assert_eq!(gpu["spec"]["template"]["spec"]["failureDomain"], "az2");
    assert_eq!(
        gpu["spec"]["template"]["metadata"]["labels"]["node-role.kubernetes.io/gpu"],
        ""
    );
    let default_md = mds
        .iter()
        .find(|m| {
            m["metadata"]["name"]
                .as_str()
                .unwrap()
                .contains("-22222222")
        })
        .unwrap();
    assert_eq!(
        default_md["spec"]["template"]["spec"]["failureDomain"],
        "az1"
    );
    let infra = mds
        .iter()
        .find(|m| {
            m["metadata"]["name"]
                .as_str()
                .unwrap()
                .contains("-infra-44444444")
        })
        .unwrap();
    assert_eq!(infra["spec"]["replicas"], 0);
    insta::assert_json_snapshot!("extra_nodegroups", objects);
}

#[test]
fn boot_from_volume_with_etcd_volume() {
    let (t, c) = with_labels(json!({
        "boot_volume_size": "50",
        "boot_volume_type": "ssd",
        "boot_volume_availability_zone": "nova",
        "etcd_blockdevice_size": "20",
        "etcd_blockdevice_volume_type": "fast",
        "etcd_blockdevice_volume_az": "nova"
    }));
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    for osmt in find(&objects, "OpenStackMachineTemplate") {
        assert_eq!(
            osmt["spec"]["template"]["spec"]["rootVolume"],
            json!({"sizeGiB": 50, "type": "ssd", "availabilityZone": {"name": "nova"}})
        );
    }
    let kcp = one(&objects, "KubeadmControlPlane");
    assert_eq!(
        kcp["spec"]["kubeadmConfigSpec"]["mounts"],
        json!([["LABEL=etcd_data", "/var/lib/etcd"]])
    );
    insta::assert_json_snapshot!("boot_from_volume", objects);
}

#[test]
fn existing_network_and_subnet() {
    let mut t = template_body();
    t["fixed_network"] = json!("private");
    t["fixed_subnet"] = json!("private-subnet");
    let mut r = rows(t, cluster_body(), None);
    r.cluster.resolved.fixed_network_id = Some(FIXED_NET_ID.into());
    r.cluster.resolved.fixed_subnet_id = Some(FIXED_SUBNET_ID.into());
    let objects = render_rows(&r);
    assert_valid(&objects);
    let osc = one(&objects, "OpenStackCluster");
    assert_eq!(osc["spec"]["network"], json!({"id": FIXED_NET_ID}));
    assert_eq!(osc["spec"]["subnets"], json!([{"id": FIXED_SUBNET_ID}]));
    assert!(osc["spec"].get("managedSubnets").is_none());
    insta::assert_json_snapshot!("existing_network", objects);
}

#[test]
fn cilium_cluster() {
    let (mut t, c) = with_labels(json!({
        "cilium_ipv4pool": "10.100.0.0/16",
        "cilium_tag": "v1.18.2",
        "cilium_hubble_ui_enabled": "true"
    }));
    t["network_driver"] = json!("cilium");
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    let cluster = one(&objects, "Cluster");
    assert_eq!(
        cluster["spec"]["clusterNetwork"]["pods"]["cidrBlocks"],
        json!(["10.100.0.0/16"])
    );
    let cni = find(&objects, "HelmChartProxy")
        .into_iter()
        .find(|h| h["spec"]["chartName"] == "cilium")
        .unwrap();
    assert_eq!(cni["spec"]["version"], "1.18.2");
    let values: Value =
        yaml_serde::from_str(cni["spec"]["valuesTemplate"].as_str().unwrap()).unwrap();
    assert_eq!(
        values["ipam"]["operator"]["clusterPoolIPv4PodCIDRList"],
        json!(["10.100.0.0/16"])
    );
    insta::assert_json_snapshot!("cilium", objects);
}

#[test]
fn autoscaling_nodegroups() {
    let (t, mut c) = with_labels(json!({
        "auto_scaling_enabled": "true",
        "min_node_count": "2",
        "max_node_count": "5"
    }));
    c["node_count"] = json!(3);
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    let md = one(&objects, "MachineDeployment");
    assert!(
        md["spec"].get("replicas").is_none(),
        "the autoscaler owns replicas"
    );
    assert_eq!(
        md["metadata"]["annotations"],
        json!({"cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5",
               "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "2",
               "capacity.cluster-autoscaler.kubernetes.io/cpu": "2",
               "capacity.cluster-autoscaler.kubernetes.io/memory": "4096Mi",
               "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk": "40Gi",
               "capacity.cluster-autoscaler.kubernetes.io/maxPods": "110"})
    );
    // One autoscaler on the management cluster, in the cluster's namespace, scoped to it.
    let stack = "c5d12f6fda1964bf0ae4c1f639a523a52";
    let ns = format!("magnum-{PROJECT}");
    let d = one(&objects, "Deployment");
    assert_eq!(d["metadata"]["name"], format!("{stack}-autoscaler"));
    assert_eq!(d["metadata"]["namespace"], ns.as_str());
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"], "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.0",
        "the tag follows the Kubernetes minor"
    );
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--cloud-provider=clusterapi"), "{args:?}");
    assert!(
        args.contains(
            &format!("--node-group-auto-discovery=clusterapi:namespace={ns},clusterName={stack}")
                .as_str()
        ),
        "{args:?}"
    );
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        format!("{stack}-kubeconfig")
    );
    assert_eq!(pod["serviceAccountName"], format!("{stack}-autoscaler"));
    // No Role: the RoleBinding grants the ClusterRole installed with the service, in this
    // namespace only (the service holds `bind` on that name and no `escalate`).
    assert!(find(&objects, "Role").is_empty());
    let binding = one(&objects, "RoleBinding");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
               "name": "magnum-capi-cluster-autoscaler"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": format!("{stack}-autoscaler"), "namespace": ns}])
    );
    for kind in ["ServiceAccount", "RoleBinding"] {
        let o = one(&objects, kind);
        assert_eq!(o["metadata"]["namespace"], ns.as_str(), "{kind}");
        assert_eq!(
            o["metadata"]["labels"]["magnum.openstack.org/cluster-uuid"],
            CLUSTER_UUID
        );
    }
    insta::assert_json_snapshot!("autoscaling", objects);
}

/// A minimum of 0 is kept (not raised to 1) and the MachineDeployment carries the capacity
/// cluster-autoscaler's clusterapi provider needs to scale it up from zero: the flavor's vCPUs
/// and memory, the root disk (the boot volume when the nodes boot from one), the pod limit.
#[test]
fn autoscaling_from_zero_carries_the_capacity_annotations() {
    let (t, c) = with_labels(
        json!({"auto_scaling_enabled": "true", "min_node_count": "0",
                                    "max_node_count": "4"}),
    );
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    let md = one(&objects, "MachineDeployment");
    let ann = &md["metadata"]["annotations"];
    assert_eq!(
        ann["cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"],
        "0"
    );
    assert_eq!(
        ann["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"],
        "4"
    );
    assert_eq!(ann["capacity.cluster-autoscaler.kubernetes.io/cpu"], "2");
    assert_eq!(
        ann["capacity.cluster-autoscaler.kubernetes.io/memory"],
        "4096Mi"
    );
    assert_eq!(
        ann["capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk"],
        "40Gi"
    );
    assert_eq!(
        ann["capacity.cluster-autoscaler.kubernetes.io/maxPods"],
        "110"
    );
    assert!(
        md["spec"].get("replicas").is_none(),
        "the autoscaler owns replicas"
    );
    // Booting from a volume: the volume is the node's disk.
    let (t, c) = with_labels(
        json!({"auto_scaling_enabled": "true", "min_node_count": "0",
                                    "max_node_count": "4", "boot_volume_size": "100"}),
    );
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    assert_eq!(
        one(&objects, "MachineDeployment")["metadata"]["annotations"]["capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk"],
        "100Gi"
    );
    // A flavor whose size Nova did not give (nothing looked up): scaling from zero is refused,
    // saying what to do.
    let (t, c) = with_labels(
        json!({"auto_scaling_enabled": "true", "min_node_count": "0",
                                    "max_node_count": "4"}),
    );
    let mut r = rows(t, c, None);
    r.template.resolved.flavor_sizes.clear();
    r.cluster.resolved.flavor_sizes.clear();
    let err = build_values(&r, &CapiConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("min_node_count 0") && err.contains("set min_node_count to 1"),
        "{err}"
    );
}

/// `auto_scaling_enabled` without a maximum is refused (equal bounds would run no autoscaler).
#[test]
fn autoscaling_without_a_maximum_is_refused() {
    let (t, c) = with_labels(json!({"auto_scaling_enabled": "true", "min_node_count": "1"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("auto_scaling_enabled is true but no max_node_count is set"),
        "{err}"
    );
}

#[test]
fn no_autoscaler_without_an_autoscaled_nodegroup() {
    let objects = render_rows(&rows(template_body(), cluster_body(), None));
    for kind in ["Deployment", "ServiceAccount", "Role", "RoleBinding"] {
        assert!(find(&objects, kind).is_empty(), "{kind}");
    }
    // Equal bounds are a fixed size: no autoscaler either.
    let (t, mut c) = with_labels(
        json!({"auto_scaling_enabled": "true", "min_node_count": "2",
                                         "max_node_count": "2"}),
    );
    c["node_count"] = json!(2);
    assert!(find(&render_rows(&rows(t, c, None)), "Deployment").is_empty());
    // `[capi] autoscaler_image_tag` pins the tag.
    let (t, c) = with_labels(json!({"auto_scaling_enabled": "true", "max_node_count": "5"}));
    let config = CapiConfig {
        autoscaler_image_tag: Some("v1.33.9".into()),
        ..CapiConfig::default()
    };
    let v = build_values(&rows(t, c, None), &config).unwrap();
    let objects = renderer().render(&v).unwrap();
    assert!(
        one(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .ends_with(":v1.33.9")
    );
}

/// The HelmChartProxy of the add-on `key`, if rendered.
fn addon<'a>(objects: &'a [Value], key: &str) -> Option<&'a Value> {
    let name = format!("c5d12f6fda1964bf0ae4c1f639a523a52-{key}");
    find(objects, "HelmChartProxy")
        .into_iter()
        .find(|o| o["metadata"]["name"] == name.as_str())
}

#[test]
fn metrics_server_is_on_by_default_and_off_by_label() {
    let objects = render_rows(&rows(template_body(), cluster_body(), None));
    assert_valid(&objects);
    let ms = addon(&objects, "metrics-server").expect("metrics-server by default");
    assert_eq!(ms["spec"]["chartName"], "metrics-server");
    assert_eq!(
        ms["spec"]["version"],
        CapiConfig::default().metrics_server_chart_version
    );
    assert_eq!(
        ms["spec"]["clusterSelector"]["matchLabels"]["magnum.openstack.org/cluster-uuid"],
        CLUSTER_UUID
    );
    let (t, c) = with_labels(json!({"metrics_server_enabled": "false"}));
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    assert!(addon(&objects, "metrics-server").is_none());
    let (t, c) = with_labels(json!({"metrics_server_enabled": "maybe"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap_err();
    assert!(err.to_string().contains("metrics_server_enabled"), "{err}");
}

/// A template behind a proxy, with registry mirrors, an insecure registry, a registry CA, the
/// audit log and anti-affinity for the control plane and the workers.
pub(crate) fn node_settings_body() -> (Value, Value) {
    use base64::Engine as _;
    let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let (mut t, mut c) = with_labels(json!({
        "container_infra_prefix": "registry.example.com:5000/k8s",
        "containerd_registry_mirrors":
            "docker.io=https://mirror.example.com,quay.io=https://mirror.example.com",
        "insecure_registries": "registry.local:5000",
        "containerd_registry_ca": base64::engine::general_purpose::STANDARD.encode(ca),
        "audit_log_enabled": "true",
        "audit_log_maxage": "7",
        "audit_log_max_backup": "3",
        "server_group_policies": "anti-affinity",
        "api_server_cert_sans": "api.example.com"
    }));
    t["http_proxy"] = json!("http://proxy.example.com:3128");
    t["https_proxy"] = json!("http://proxy.example.com:3128");
    t["no_proxy"] = json!("10.1.0.0/16,.internal.example.com");
    t["master_lb_enabled"] = json!(true);
    c["master_count"] = json!(3);
    (t, c)
}

#[test]
fn proxied_mirrored_audited_anti_affinity_cluster() {
    let (t, c) = node_settings_body();
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    let kcp = one(&objects, "KubeadmControlPlane");
    let spec = &kcp["spec"]["kubeadmConfigSpec"];
    let files = spec["files"].as_array().unwrap();
    let file = |path: &str| {
        files
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("no {path} in {files:#?}"))["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let drop_in = file("/etc/systemd/system/containerd.service.d/http-proxy.conf");
    assert!(
        drop_in.contains("Environment=\"HTTPS_PROXY=http://proxy.example.com:3128\""),
        "{drop_in}"
    );
    let no_proxy = drop_in
        .lines()
        .find(|l| l.starts_with("Environment=\"NO_PROXY="))
        .unwrap();
    for must in [
        "10.1.0.0/16",
        ".internal.example.com",
        "localhost",
        "127.0.0.1",
        "172.16.0.0/13",
        "172.24.0.0/13",
        "10.0.0.0/24",
        ".svc",
        ".cluster.local",
        "api.example.com",
    ] {
        assert!(
            no_proxy.split(['=', ',', '"']).any(|e| e == must),
            "{must} not in {no_proxy}"
        );
    }
    assert_eq!(
        file("/etc/systemd/system/kubelet.service.d/http-proxy.conf"),
        drop_in
    );
    assert!(
        spec["preKubeadmCommands"]
            .as_array()
            .unwrap()
            .contains(&json!("systemctl restart containerd"))
    );
    let docker = file("/etc/containerd/certs.d/docker.io/hosts.toml");
    assert!(
        docker.contains("[host.\"https://mirror.example.com\"]"),
        "{docker}"
    );
    assert!(
        docker.contains("ca = \"/etc/containerd/certs.d/magnum-registry-ca.crt\""),
        "{docker}"
    );
    let insecure = file("/etc/containerd/certs.d/registry.local:5000/hosts.toml");
    assert!(insecure.contains("skip_verify = true"), "{insecure}");
    file("/etc/containerd/certs.d/registry.example.com:5000/hosts.toml");
    assert!(file("/etc/containerd/certs.d/magnum-registry-ca.crt").contains("BEGIN CERTIFICATE"));
    // The audit log: policy on the control plane only, flags and volumes on the apiserver.
    assert!(file("/etc/kubernetes/audit-policy.yaml").contains("kind: Policy"));
    let api = &spec["clusterConfiguration"]["apiServer"];
    for (flag, value) in [
        ("audit-policy-file", "/etc/kubernetes/audit-policy.yaml"),
        ("audit-log-maxage", "7"),
        ("audit-log-maxbackup", "3"),
        ("audit-log-maxsize", "100"),
    ] {
        assert!(
            api["extraArgs"]
                .as_array()
                .unwrap()
                .contains(&json!({"name": flag, "value": value})),
            "{flag}"
        );
    }
    // The audit policy and logs, and the etcd encryption configuration.
    assert_eq!(api["extraVolumes"].as_array().unwrap().len(), 3);
    // Workers get the node files, not the audit policy.
    let kct = one(&objects, "KubeadmConfigTemplate");
    let worker_files: Vec<&str> = kct["spec"]["template"]["spec"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(worker_files.contains(&"/etc/containerd/certs.d/docker.io/hosts.toml"));
    assert!(!worker_files.contains(&"/etc/kubernetes/audit-policy.yaml"));
    // Server groups by name, one for the control plane and one per nodegroup.
    let groups: Vec<&Value> = find(&objects, "OpenStackMachineTemplate")
        .iter()
        .map(|o| &o["spec"]["template"]["spec"]["serverGroup"]["filter"]["name"])
        .collect();
    assert_eq!(groups.len(), 2);
    assert!(groups.contains(&&json!("c5d12f6fda1964bf0ae4c1f639a523a52-control-plane")));
    // The cloud-facing addons get the proxy environment.
    for chart in ["openstack-cloud-controller-manager", "openstack-cinder-csi"] {
        let hcp = find(&objects, "HelmChartProxy")
            .into_iter()
            .find(|h| h["spec"]["chartName"] == chart)
            .unwrap();
        let values: Value =
            yaml_serde::from_str(hcp["spec"]["valuesTemplate"].as_str().unwrap()).unwrap();
        let env = if chart.contains("csi") {
            &values["csi"]["plugin"]["extraEnv"]
        } else {
            &values["extraEnv"]
        };
        assert!(
            env.as_array()
                .unwrap()
                .contains(&json!({"name": "HTTP_PROXY", "value": "http://proxy.example.com:3128"})),
            "{chart}: {env}"
        );
    }
    insta::assert_json_snapshot!("node_settings", objects);
}

#[test]
fn flannel_cluster() {
    let (mut t, c) = with_labels(json!({
        "flannel_network_cidr": "10.244.0.0/16",
        "flannel_backend": "host-gw"
    }));
    t["network_driver"] = json!("flannel");
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    let cluster = one(&objects, "Cluster");
    assert_eq!(
        cluster["spec"]["clusterNetwork"]["pods"]["cidrBlocks"],
        json!(["10.244.0.0/16"])
    );
    let cni = find(&objects, "HelmChartProxy")
        .into_iter()
        .find(|h| h["spec"]["chartName"] == "flannel")
        .unwrap();
    assert_eq!(
        cni["spec"]["version"],
        CapiConfig::default().flannel_chart_version
    );
    assert_eq!(cni["spec"]["namespace"], "kube-flannel");
    let values: Value =
        yaml_serde::from_str(cni["spec"]["valuesTemplate"].as_str().unwrap()).unwrap();
    assert_eq!(
        values,
        json!({"podCidr": "10.244.0.0/16", "flannel": {"backend": "host-gw"}})
    );
    insta::assert_json_snapshot!("flannel", objects);
}

/// What `magnum-capi render` prints for a template with these settings shows them.
#[test]
fn the_render_command_shows_node_settings() {
    let (t, c) = node_settings_body();
    let r = rows_from_api(&t, &c, None).unwrap();
    let v = build_for_create(&r, placeholder_credentials());
    let yaml = to_yaml(&renderer().render(&v).unwrap());
    for shown in [
        "HTTP_PROXY=http://proxy.example.com:3128",
        "/etc/containerd/certs.d/docker.io/hosts.toml",
        "https://mirror.example.com",
        "audit-log-maxage",
        "serverGroup",
        "-control-plane",
    ] {
        assert!(yaml.contains(shown), "{shown} not shown");
    }
}

// ---------------------------------------------------------------------------------------------
// Rules

#[test]
fn machines_carry_the_nodegroup_and_role_labels() {
    let objects = render_rows(&rows(template_body(), cluster_body(), None));
    let r = rows(template_body(), cluster_body(), None);
    let master = r.nodegroups.iter().find(|n| n.is_master()).unwrap();
    let worker = r.nodegroups.iter().find(|n| !n.is_master()).unwrap();
    let kcp = one(&objects, "KubeadmControlPlane");
    let labels = &kcp["spec"]["machineTemplate"]["metadata"]["labels"];
    assert_eq!(labels["magnum.openstack.org/cluster-uuid"], CLUSTER_UUID);
    assert_eq!(
        labels["magnum.openstack.org/nodegroup-uuid"],
        master.uuid.to_string()
    );
    assert_eq!(labels["magnum.openstack.org/role"], "master");
    assert_eq!(
        kcp["metadata"]["labels"]["magnum.openstack.org/role"],
        "master"
    );
    let md = one(&objects, "MachineDeployment");
    let labels = &md["spec"]["template"]["metadata"]["labels"];
    assert_eq!(
        labels["magnum.openstack.org/nodegroup-uuid"],
        worker.uuid.to_string()
    );
    assert_eq!(labels["magnum.openstack.org/role"], "worker");
    assert_eq!(
        md["metadata"]["labels"]["magnum.openstack.org/nodegroup-uuid"],
        worker.uuid.to_string()
    );
    for obj in &objects {
        let l = &obj["metadata"]["labels"];
        if obj["kind"] == "Namespace" {
            assert_eq!(l["magnum.openstack.org/project-id"], PROJECT);
            assert!(l.get("magnum.openstack.org/cluster-uuid").is_none());
            continue;
        }
        for key in [
            "magnum.openstack.org/cluster-uuid",
            "magnum.openstack.org/project-id",
            "magnum.openstack.org/user-id",
            "cluster.x-k8s.io/cluster-name",
        ] {
            assert!(l.get(key).is_some(), "{} lacks {key}", obj["kind"]);
        }
    }
}

#[test]
fn a_spec_change_renames_the_machine_template_and_a_count_change_does_not() {
    let base = rows(template_body(), cluster_body(), None);
    let names = |objects: &[Value]| {
        referenced_templates(objects)
            .into_iter()
            .map(|r| r.name)
            .collect::<Vec<_>>()
    };
    let before = names(&render_rows(&base));
    assert_eq!(before.len(), 3);

    let mut resized = base.clone();
    for ng in &mut resized.nodegroups {
        if !ng.is_master() {
            ng.node_count = 7;
        }
    }
    assert_eq!(names(&render_rows(&resized)), before);

    let mut reflavored = base.clone();
    for ng in &mut reflavored.nodegroups {
        if !ng.is_master() {
            ng.flavor_id = Some("m1.xlarge".into());
        }
    }
    let after = names(&render_rows(&reflavored));
    let changed: Vec<_> = after.iter().filter(|n| !before.contains(n)).collect();
    assert_eq!(
        changed.len(),
        1,
        "only the worker OpenStackMachineTemplate changes: {after:?}"
    );
    // The MachineDeployment points at the new name, which the renamed template carries.
    let objects = render_rows(&reflavored);
    let md = one(&objects, "MachineDeployment");
    let osmt_name = &md["spec"]["template"]["spec"]["infrastructureRef"]["name"];
    assert!(
        find(&objects, "OpenStackMachineTemplate")
            .iter()
            .any(|o| &o["metadata"]["name"] == osmt_name)
    );
    assert_eq!(osmt_name.as_str().unwrap(), changed[0].as_str());
}

#[test]
fn label_dialects_render_the_same_objects() {
    let pairs = [
        (
            json!({"etcd_blockdevice_size": "8", "etcd_blockdevice_volume_type": "ssd"}),
            json!({"etcd_volume_size": "8", "etcd_volume_type": "ssd"}),
        ),
        (
            json!({"calico_ipv4pool": "10.90.0.0/16"}),
            json!({"cilium_ipv4pool": "10.90.0.0/16"}),
        ),
        (
            json!({"extra_network_names": "n1"}),
            json!({"extra_network_name": "n1"}),
        ),
        (
            json!({"api_master_lb_allowed_cidrs": "10.0.0.0/8"}),
            json!({"master_lb_allowed_cidrs": "10.0.0.0/8"}),
        ),
        (
            json!({"audit_log_enabled": "true", "audit_log_maxage": "5",
                   "audit_log_maxbackup": "2", "audit_log_maxsize": "50"}),
            json!({"audit_log_enabled": "true", "audit_log_max_age": "5",
                   "audit_log_max_backup": "2", "audit_log_max_size": "50"}),
        ),
    ];
    let render = |labels: Value| {
        let (mut t, c) = with_labels(labels);
        t["master_lb_enabled"] = json!(true);
        render_rows(&rows(t, c, None))
    };
    let unlabelled = render(json!({}));
    for (a, b) in pairs {
        let (a_objects, b_objects) = (render(a.clone()), render(b));
        // Equal outputs would prove nothing if both spellings were ignored.
        assert_ne!(a_objects, unlabelled, "{a} changes nothing");
        assert_eq!(a_objects, b_objects, "{a}");
    }
    // Both spellings with different values: refused, naming both labels.
    let (t, c) = with_labels(json!({"etcd_blockdevice_size": "8", "etcd_volume_size": "9"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("etcd_blockdevice_size") && msg.contains("etcd_volume_size"),
        "{msg}"
    );
}

#[test]
fn bad_label_values_are_values_errors_naming_the_label() {
    let cases = [
        (json!({"boot_volume_size": "big"}), "boot_volume_size"),
        (json!({"etcd_volume_size": "-1"}), "etcd_volume_size"),
        (
            json!({"fixed_subnet_cidr": "10.0.0.0/40"}),
            "fixed_subnet_cidr",
        ),
        (json!({"calico_ipv4pool": "not-a-cidr"}), "calico_ipv4pool"),
        (
            json!({"service_cluster_ip_range": "10.0.0.0"}),
            "service_cluster_ip_range",
        ),
        (
            json!({"auto_healing_enabled": "perhaps"}),
            "auto_healing_enabled",
        ),
        (
            json!({"master_lb_floating_ip_enabled": "2"}),
            "master_lb_floating_ip_enabled",
        ),
        (
            json!({"api_master_lb_allowed_cidrs": "10.0.0.0/33"}),
            "api_master_lb_allowed_cidrs",
        ),
        (
            json!({"csi_cinder_reclaim_policy": "Keep"}),
            "csi_cinder_reclaim_policy",
        ),
        (json!({"calico_tag": "latest"}), "calico_tag"),
        (json!({"availability_zone": "a{{b}}"}), "availability_zone"),
        (
            json!({"api_server_floating_ip": "not-an-ip"}),
            "api_server_floating_ip",
        ),
        (
            json!({"containerd_registry_mirrors": "docker.io"}),
            "containerd_registry_mirrors",
        ),
        (
            json!({"insecure_registries": "https://r.example.com"}),
            "insecure_registries",
        ),
        (
            json!({"server_group_policies": "spread"}),
            "server_group_policies",
        ),
        (json!({"audit_log_maxage": "a week"}), "audit_log_maxage"),
        (
            json!({"audit_log_enabled": "yes please"}),
            "audit_log_enabled",
        ),
    ];
    for (labels, label) in cases {
        let (t, c) = with_labels(labels.clone());
        let err =
            build_values(&rows(t, c, None), &CapiConfig::default()).expect_err(&labels.to_string());
        assert!(
            matches!(&err, ValuesError::BadLabel { label: l, .. } if l == label),
            "{labels}: {err:?}"
        );
        assert!(err.to_string().contains(label));
    }
}

#[test]
fn other_bad_input_is_a_values_error() {
    let mut c = cluster_body();
    c["master_count"] = json!(2);
    let err = build_values(&rows(template_body(), c, None), &CapiConfig::default()).unwrap_err();
    assert!(err.to_string().contains("odd"), "{err}");

    let (t, c) = with_labels(json!({"calico_ipv4pool": "172.24.0.0/16"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap_err();
    assert!(err.to_string().contains("overlaps"), "{err}");

    let mut t = template_body();
    t["network_driver"] = json!("weave");
    let err = build_values(&rows(t, cluster_body(), None), &CapiConfig::default()).unwrap_err();
    assert!(err.to_string().contains("weave"), "{err}");

    // A malformed proxy names the field.
    let mut t = template_body();
    t["http_proxy"] = json!("proxy.example.com:3128");
    let err = build_values(&rows(t, cluster_body(), None), &CapiConfig::default()).unwrap_err();
    assert!(err.to_string().contains("http_proxy"), "{err}");
}

/// Horizon's cluster dialog sends `master_lb_enabled: false` with
/// `master_lb_floating_ip_enabled=false` (the floating-IP choice is hidden unless the load
/// balancer is ticked): the API gets the load balancer magnum-capi-helm always built, private on
/// its fixed IP. Only a cloud without a load balancer service refuses it, naming the dialog's
/// fields.
#[test]
fn an_api_without_a_floating_ip_gets_a_private_load_balancer_unless_the_cloud_has_none() {
    let (t, mut c) = with_labels(json!({"master_lb_floating_ip_enabled": "false"}));
    c["master_lb_enabled"] = json!(false);
    let mut r = rows(t, c, None);
    let v = build_values(&r, &CapiConfig::default()).unwrap();
    assert!(v.api_server.load_balancer.is_some(), "{:?}", v.api_server);
    assert!(!v.api_server.floating_ip, "{:?}", v.api_server);

    // The same without an external network in the template.
    let mut t = template_body();
    t.as_object_mut().unwrap().remove("external_network_id");
    let mut nr = rows(t, cluster_body(), None);
    nr.template.resolved.external_network_id = None;
    nr.cluster.resolved.external_network_id = None;
    let v = build_values(&nr, &CapiConfig::default()).unwrap();
    assert!(v.api_server.load_balancer.is_some() && !v.api_server.floating_ip);

    // No Octavia in the creator's catalog: no endpoint at all, a 400 saying what to change.
    r.cluster.resolved.load_balancer_service = Some(false);
    let err = build_values(&r, &CapiConfig::default())
        .unwrap_err()
        .to_string();
    for what in [
        "no load balancer service (Octavia)",
        "master_lb_floating_ip_enabled=true",
        "Additional Labels",
    ] {
        assert!(err.contains(what), "{what}: {err}");
    }
    // With a floating IP it needs no load balancer.
    let (t, c) = with_labels(json!({"master_lb_floating_ip_enabled": "true"}));
    let mut r = rows(t, c, None);
    r.cluster.resolved.load_balancer_service = Some(false);
    let v = build_values(&r, &CapiConfig::default()).unwrap();
    assert!(v.api_server.load_balancer.is_none() && v.api_server.floating_ip);
    // Asking for the load balancer there names the tick box to clear.
    let (t, mut c) = with_labels(json!({}));
    c["master_lb_enabled"] = json!(true);
    let mut r = rows(t, c, None);
    r.cluster.resolved.load_balancer_service = Some(false);
    let err = build_values(&r, &CapiConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Enable Load Balancer for Kubernetes API"),
        "{err}"
    );
}

#[test]
fn kube_tag_and_image_kube_version_must_agree() {
    let (t, c) = with_labels(json!({"kube_tag": "v1.34.1"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap_err();
    assert_eq!(
        err,
        ValuesError::KubeVersionMismatch {
            label: "v1.34.1".into(),
            image: "v1.33.5".into()
        }
    );
    let (t, c) = with_labels(json!({"kube_tag": "1.33.5"}));
    let v = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap();
    assert_eq!(v.kubernetes_version, "v1.33.5");
}

#[test]
fn names_are_dns_labels_of_at_most_63_characters() {
    let ngs = json!([
        {"name": "default-master", "role": "master", "node_count": 1},
        {"name": "a-very-long-nodegroup-name-that-goes-on-and-on-and-on-forever-and-more",
         "node_count": 1},
        {"name": "ÜBER_gröup!!", "node_count": 1}
    ]);
    let objects = render_rows(&rows(template_body(), cluster_body(), Some(ngs)));
    for obj in &objects {
        let name = obj["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 63, "{name}");
        assert!(
            magnum_capi::k8s::schema::dns1123_label_error(name).is_none(),
            "{name}"
        );
    }
    assert_valid(&objects);
}

/// A renderer with the templates of `dir`, and the default cluster's values.
fn renderer_and_values(dir: &std::path::Path) -> (Renderer, Values) {
    let v = build_values(
        &rows(template_body(), cluster_body(), None),
        &CapiConfig::default(),
    )
    .unwrap();
    (Renderer::new(Some(dir)).unwrap(), v)
}

#[test]
fn a_template_override_replaces_the_builtin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("namespace.yaml.hbs"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {{json namespace}}\n  labels:\n    site: overridden\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("README.md"), "not a template").unwrap();
    let (r, v) = renderer_and_values(dir.path());
    let objects = r.render(&v).unwrap();
    assert_eq!(
        one(&objects, "Namespace")["metadata"]["labels"],
        json!({"site": "overridden"})
    );
    // The other templates are still the built-in ones.
    assert_eq!(find(&objects, "MachineDeployment").len(), 1);

    std::fs::write(dir.path().join("namespaces.yaml.hbs"), "x").unwrap();
    let err = Renderer::new(Some(dir.path())).unwrap_err().to_string();
    assert!(err.contains("namespaces.yaml.hbs"), "{err}");
}

#[test]
fn operator_addon_templates_render_for_every_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let addons = dir.path().join("addons.d");
    std::fs::create_dir(&addons).unwrap();
    std::fs::write(
        addons.join("cert-manager.yaml.hbs"),
        r#"apiVersion: addons.cluster.x-k8s.io/v1alpha1
kind: HelmChartProxy
metadata:
  name: {{clusterName}}-cert-manager
  namespace: {{json namespace}}
  labels: {{json commonLabels}}
spec:
  clusterSelector:
    matchLabels: {{json addons.clusterSelector}}
  repoURL: https://charts.jetstack.io
  chartName: cert-manager
  version: v1.18.2
  namespace: cert-manager
  valuesTemplate: |
    crds:
      enabled: true
"#,
    )
    .unwrap();
    std::fs::write(addons.join("notes.txt"), "not a template").unwrap();
    let (r, v) = renderer_and_values(dir.path());
    let objects = r.render(&v).unwrap();
    assert_valid(&objects);
    let hcp = addon(&objects, "cert-manager").expect("the operator's add-on");
    assert_eq!(
        hcp["metadata"]["labels"]["magnum.openstack.org/cluster-uuid"],
        CLUSTER_UUID
    );
    // The built-in add-ons are still there.
    assert!(addon(&objects, "metrics-server").is_some());
    // Strict mode applies to them too.
    std::fs::write(addons.join("bad.yaml.hbs"), "kind: {{json nope}}\n").unwrap();
    let r = Renderer::new(Some(dir.path())).unwrap();
    let err = r.render(&v).unwrap_err().to_string();
    assert!(err.contains("addons.d/bad.yaml.hbs"), "{err}");
}

#[test]
fn strict_mode_reports_a_missing_value() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml.hbs"),
        "apiVersion: v1\nkind: Cluster\nmetadata:\n  name: {{json controlPlane.nmae}}\n",
    )
    .unwrap();
    let r = Renderer::new(Some(dir.path())).unwrap();
    let v = build_values(
        &rows(template_body(), cluster_body(), None),
        &CapiConfig::default(),
    )
    .unwrap();
    let err = r.render(&v).unwrap_err().to_string();
    assert!(
        err.contains("cluster.yaml.hbs") && err.contains("nmae"),
        "{err}"
    );

    // `nodeGroup` exists only while nodegroup.yaml.hbs renders: later templates cannot use the
    // last one by mistake.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("healthchecks.yaml.hbs"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{json nodeGroup.name}}\n",
    )
    .unwrap();
    let r = Renderer::new(Some(dir.path())).unwrap();
    let err = r.render(&v).unwrap_err().to_string();
    assert!(
        err.contains("healthchecks.yaml.hbs") && err.contains("nodeGroup"),
        "{err}"
    );
}

#[test]
fn credentials_render_alone_and_only_when_given() {
    let r = rows(template_body(), cluster_body(), None);
    let mut v = build_values(&r, &CapiConfig::default()).unwrap();
    assert!(renderer().render_credentials(&v).is_err());
    // Later applies carry neither credentials nor CAs: no Secret at all.
    assert!(find(&renderer().render(&v).unwrap(), "Secret").is_empty());
    v.credentials = Some(credentials());
    let objects = renderer().render_credentials(&v).unwrap();
    assert_eq!(kinds(&objects), ["Namespace", "Secret", "Secret"]);
}

#[test]
fn secrets_never_appear_in_debug_or_serialised_values() {
    let r = rows(template_body(), cluster_body(), None);
    let v = build_for_create(&r, credentials());
    let debug = format!("{v:?} {:?}", credentials());
    assert!(!debug.contains("s3cr3t"));
    assert!(!debug.contains("private key"));
    let json = serde_json::to_string(&v).unwrap();
    assert!(!json.contains("s3cr3t"));
    assert!(!json.contains("private key"));
    assert!(json.contains("appcred-id-123"));
}

#[test]
fn a_nodegroup_on_the_master_flavor_gets_its_resolved_id() {
    let ngs = json!([
        {"name": "default-master", "role": "master", "node_count": 1},
        {"name": "big", "node_count": 1, "flavor_id": "m1.large"},
        {"name": "other", "node_count": 1, "flavor_id": "m1.tiny"}
    ]);
    let objects = render_rows(&rows(template_body(), cluster_body(), Some(ngs)));
    let flavor_of = |ng: &str| {
        let osmt = find(&objects, "OpenStackMachineTemplate")
            .into_iter()
            .find(|o| o["metadata"]["name"].as_str().unwrap().contains(ng))
            .unwrap();
        let spec = &osmt["spec"]["template"]["spec"];
        (spec.get("flavorID").cloned(), spec.get("flavor").cloned())
    };
    // `rows` resolves the master flavor m1.large to "4"; m1.tiny was never looked up.
    assert_eq!(flavor_of("-big-"), (Some(json!("4")), None));
    assert_eq!(flavor_of("-other-"), (None, Some(json!("m1.tiny"))));
}

#[test]
fn the_ovn_provider_balances_by_source_ip_and_port_only() {
    let lb_method = |labels: Value| {
        let (t, c) = with_labels(labels);
        let v = build_values(&rows(t, c, None), &CapiConfig::default())?;
        Ok::<_, ValuesError>(v.addons.cloud_config.load_balancer.method)
    };
    assert_eq!(lb_method(json!({})).unwrap(), "ROUND_ROBIN");
    assert_eq!(
        lb_method(json!({"octavia_provider": "ovn"})).unwrap(),
        "SOURCE_IP_PORT"
    );
    let err = lb_method(json!({"octavia_provider": "ovn", "octavia_lb_algorithm": "round_robin"}))
        .unwrap_err();
    assert!(
        matches!(&err, ValuesError::BadLabel { label, .. } if label == "octavia_lb_algorithm"),
        "{err:?}"
    );
}

#[test]
fn nodegroups_whose_object_names_collide_are_refused() {
    // Same sanitised name, same first 8 hex digits of the uuid.
    let ngs = json!([
        {"name": "default-master", "role": "master", "node_count": 1},
        {"uuid": "55555555-0000-4000-8000-000000000001", "name": "gpu pool", "node_count": 1},
        {"uuid": "55555555-0000-4000-8000-000000000002", "name": "GPU-pool", "node_count": 1}
    ]);
    let err = build_values(
        &rows(template_body(), cluster_body(), Some(ngs)),
        &CapiConfig::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("share the object name"), "{err}");
}

#[test]
fn a_fixed_subnet_needs_its_fixed_network() {
    let mut t = template_body();
    t["fixed_subnet"] = json!("private-subnet");
    let err = build_values(&rows(t, cluster_body(), None), &CapiConfig::default()).unwrap_err();
    assert!(err.to_string().contains("fixed_network"), "{err}");
}

#[test]
fn api_bodies_take_the_api_defaults() {
    let r = rows_from_api(
        &json!({"image_id": "img", "labels": {"k": "v"}}),
        &json!({}),
        None,
    )
    .unwrap();
    assert_eq!(r.nodegroups.len(), 2);
    let master = r.nodegroups.iter().find(|n| n.is_master()).unwrap();
    assert_eq!(
        (master.name.as_str(), master.node_count),
        ("default-master", 1)
    );
    assert_eq!(r.cluster.labels.get("k").map(String::as_str), Some("v"));
    assert!(r.template.floating_ip_enabled);
    assert!(!r.template.master_lb_enabled);
    let again = rows_from_api(&json!({"image_id": "img"}), &json!({}), None).unwrap();
    assert_eq!(
        again.nodegroups[0].uuid, r.nodegroups[0].uuid,
        "stable uuids"
    );
}

#[test]
fn printed_yaml_parses_back_to_the_same_objects() {
    let r = rows(template_body(), cluster_body(), None);
    let v = build_for_create(&r, placeholder_credentials());
    let objects = renderer().render(&v).unwrap();
    let text = to_yaml(&objects);
    let all: Vec<Value> = yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(all, objects);
}

#[test]
fn schema_validation_catches_what_the_apiserver_would_reject() {
    let bad = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "OpenStackCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {
            "apiServerLoadBalancer": {"enabled": "yes"},
            "externalNetwork": {"idd": EXTERNAL_NET_ID},
            "identityRef": {"cloudName": "openstack"},
            "managedSubnets": null
        }
    });
    let errors = schemas().validate(&bad).unwrap_err();
    let text = errors.join("\n");
    assert!(
        text.contains("at /spec/apiServerLoadBalancer/enabled:"),
        "{text}"
    );
    assert!(
        text.contains("at /spec/externalNetwork:") && text.contains("idd"),
        "{text}"
    );
    assert!(
        text.contains("at /spec/identityRef:") && text.contains("name"),
        "{text}"
    );
    assert_eq!(
        errors.len(),
        3,
        "the null is dropped, identityRef.type defaulted: {text}"
    );
    // Built-in and other providers' kinds have no CRD here.
    assert_eq!(
        schemas().validate(&json!({"apiVersion": "v1", "kind": "Secret"})),
        Ok(false)
    );
    assert!(schemas().has("cluster.x-k8s.io/v1beta2", "MachineDeployment"));
    assert!(schemas().has("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy"));
    assert!(schemas().has("addons.cluster.x-k8s.io/v1beta2", "ClusterResourceSet"));
    // A missing CRD directory is an error, not an empty set.
    assert!(CrdSchemas::load(std::path::Path::new("/nonexistent/crds")).is_err());
}

#[test]
fn auto_healing_is_per_group_with_nodegroup_labels_winning() {
    let (t, c) = with_labels(json!({"auto_healing_enabled": "false"}));
    let ngs = json!([
        {"name": "default-master", "role": "master", "node_count": 1},
        {"name": "healed", "node_count": 1, "labels": {"auto_healing_enabled": "true"}},
        {"name": "left-alone", "node_count": 1}
    ]);
    let objects = render_rows(&rows(t, c, Some(ngs)));
    let checked: Vec<&str> = find(&objects, "MachineHealthCheck")
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(checked.len(), 1, "{checked:?}");
    assert!(checked[0].contains("-healed-"), "{checked:?}");
}

#[test]
fn the_ccm_and_csi_name_their_resources_after_the_capi_cluster_name() {
    let (t, c) = with_labels(json!({}));
    let r = rows(t, c, None);
    let capi = r.cluster.stack_id.clone().unwrap();
    let objects = render_rows(&r);
    let values = |name_part: &str| -> String {
        find(&objects, "HelmChartProxy")
            .into_iter()
            .find(|o| o["spec"]["chartName"].as_str().unwrap().contains(name_part))
            .unwrap()["spec"]["valuesTemplate"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // OCCM `cluster.name` → `--cluster-name`: load balancers kube_service_<capi>_<ns>_<svc>.
    let ccm: Value = yaml_serde::from_str(&values("cloud-controller-manager")).unwrap();
    assert_eq!(ccm["cluster"]["name"], capi.as_str());
    // CSI `clusterID` → `--cluster`: volume metadata cinder.csi.openstack.org/cluster=<capi>.
    let csi: Value = yaml_serde::from_str(&values("cinder-csi")).unwrap();
    assert_eq!(csi["clusterID"], capi.as_str());
}

#[test]
fn every_optional_addon_on() {
    let (t, c) = with_labels(json!({
        "monitoring_enabled": "true",
        "ingress_controller": "nginx",
        "manila_csi_enabled": "true",
        "manila_csi_share_network_id": "0f5b7c9e-3a1d-4e2f-8b6c-9d0e1f2a3b4c",
        "gpu_operator_enabled": "true",
        "metrics_server_enabled": "false",
    }));
    let r = rows(t, c, None);
    let objects = renderer()
        .render(&build_for_create(&r, credentials()))
        .unwrap();
    assert_valid(&objects);
    let config = CapiConfig::default();
    for (key, chart, version) in [
        (
            "monitoring",
            "kube-prometheus-stack",
            &config.monitoring_chart_version,
        ),
        (
            "ingress-nginx",
            "ingress-nginx",
            &config.ingress_nginx_chart_version,
        ),
        (
            "csi-manila",
            "openstack-manila-csi",
            &config.manila_csi_chart_version,
        ),
        ("csi-nfs", "csi-driver-nfs", &config.nfs_csi_chart_version),
        (
            "gpu-operator",
            "gpu-operator",
            &config.gpu_operator_chart_version,
        ),
    ] {
        let hcp = addon(&objects, key).unwrap_or_else(|| panic!("{key}"));
        assert_eq!(hcp["spec"]["chartName"], chart);
        assert_eq!(hcp["spec"]["version"], version.as_str());
    }
    assert!(addon(&objects, "metrics-server").is_none());
    // Manila's credentials and StorageClass travel with the cloud-config resource Secret.
    let rs = find(&objects, "Secret")
        .into_iter()
        .find(|s| s["type"] == "addons.cluster.x-k8s.io/resource-set")
        .unwrap();
    let manila = decode(&rs["data"]["csi-manila.yaml"]);
    let docs: Vec<Value> = yaml_serde::Deserializer::from_str(&manila)
        .map(|d| {
            use serde::Deserialize as _;
            Value::deserialize(d).unwrap()
        })
        .collect();
    assert_eq!(docs[0]["metadata"]["name"], "csi-manila-secrets");
    assert_eq!(
        docs[0]["stringData"]["os-applicationCredentialSecret"],
        "s3cr3t-app-cred"
    );
    assert_eq!(docs[1]["kind"], "StorageClass");
    assert_eq!(
        docs[1]["parameters"]["shareNetworkID"],
        "0f5b7c9e-3a1d-4e2f-8b6c-9d0e1f2a3b4c"
    );
    // Credentials never appear in a HelmChartProxy.
    for hcp in find(&objects, "HelmChartProxy") {
        assert!(!hcp.to_string().contains("s3cr3t"), "{hcp}");
    }
    let without_secrets: Vec<&Value> = objects.iter().filter(|o| o["kind"] != "Secret").collect();
    insta::assert_json_snapshot!("every_addon", without_secrets);
}

#[test]
fn ingress_is_nginx_or_traefik_with_the_delete_cleanup_and_octavia_is_refused() {
    let config = CapiConfig {
        delete_cleanup: false,
        ..CapiConfig::default()
    };
    for controller in ["nginx", "traefik"] {
        let (t, c) = with_labels(json!({"ingress_controller": controller}));
        let err = build_values(&rows(t, c, None), &config).unwrap_err();
        assert!(err.to_string().contains("delete_cleanup"), "{err}");
    }
    let (t, c) = with_labels(json!({"ingress_controller": "traefik"}));
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    assert!(addon(&objects, "ingress-nginx").is_none());
    let traefik = addon(&objects, "ingress-traefik").expect("traefik");
    assert_eq!(traefik["spec"]["chartName"], "traefik");
    assert_eq!(
        traefik["spec"]["version"],
        CapiConfig::default().traefik_chart_version
    );
    let values: Value =
        yaml_serde::from_str(traefik["spec"]["valuesTemplate"].as_str().unwrap()).unwrap();
    assert_eq!(values["service"]["type"], "LoadBalancer");
    assert_eq!(values["ingressClass"]["isDefaultClass"], true);
    // The Heat driver's octavia-ingress-controller: a 400 that says what to use instead.
    let (t, c) = with_labels(json!({"ingress_controller": "octavia"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("ingress_controller") && text.contains("use nginx or traefik"),
        "{text}"
    );
    let (t, c) = with_labels(json!({"ingress_controller": "haproxy"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap_err();
    assert!(
        err.to_string().contains("supported: nginx, traefik"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Add-on images: container_infra_prefix and the image tag labels

pub(crate) const PREFIX: &str = "registry.example.com:5000/mirror";

/// Every image reference in a chart's values or a manifest: the strings under the keys charts
/// name images by (`image`, `repository`, `registry`, `imageRegistry`), wherever they are.
fn image_refs(v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("image" | "repository" | "registry" | "imageRegistry", Value::String(s)) => {
                        out.push((k.clone(), s.clone()));
                    }
                    _ => image_refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| image_refs(v, out)),
        _ => {}
    }
}

/// The objects of clusters with `labels` and every add-on on, one per CNI (and ingress
/// controller), with Keystone authentication.
pub(crate) fn clusters_with_every_addon(labels: Value) -> Vec<Value> {
    let mut objects = Vec::new();
    for (driver, ingress) in [
        ("calico", "nginx"),
        ("cilium", "traefik"),
        ("flannel", "nginx"),
    ] {
        let mut l = json!({
            "monitoring_enabled": "true",
            "ingress_controller": ingress,
            "manila_csi_enabled": "true",
            "gpu_operator_enabled": "true",
            "keystone_auth_enabled": "true",
        });
        l.as_object_mut()
            .unwrap()
            .extend(labels.as_object().unwrap().clone());
        let (mut t, c) = with_labels(l);
        t["network_driver"] = json!(driver);
        let v = build_values(&rows(t, c, None), &keystone_config()).unwrap();
        let rendered = renderer().render(&v).unwrap();
        assert_valid(&rendered);
        objects.extend(rendered);
    }
    objects
}

pub(crate) fn chart_values(hcp: &Value) -> Value {
    yaml_serde::from_str(hcp["spec"]["valuesTemplate"].as_str().unwrap_or("{}")).unwrap()
}

#[test]
fn every_addon_image_comes_from_the_prefix() {
    let objects = clusters_with_every_addon(json!({
        "container_infra_prefix": format!("{PREFIX}/")
    }));
    let mut charts = BTreeSet::new();
    for hcp in find(&objects, "HelmChartProxy") {
        let chart = hcp["spec"]["chartName"].as_str().unwrap().to_owned();
        let mut refs = Vec::new();
        image_refs(&chart_values(hcp), &mut refs);
        // A chart whose images were left alone (a chart added without its row in
        // CHART_IMAGES) names none under the prefix.
        assert!(!refs.is_empty(), "{chart}: no image is under the prefix");
        for (key, r) in &refs {
            assert!(
                r.starts_with(PREFIX),
                "{chart}: {key} {r} is not under the prefix"
            );
        }
        charts.insert(chart);
    }
    // Every chart the table knows was rendered (so each row above was checked) and vice versa.
    let known: BTreeSet<String> = values::CHART_IMAGES
        .iter()
        .map(|(c, _)| (*c).to_owned())
        .collect();
    assert_eq!(charts, known);
    // The manifests of the workload cluster (k8s-keystone-auth) too.
    let cm = keystone_config_map(&objects);
    let mut refs = Vec::new();
    for doc in config_map_documents(cm, "keystone-auth.yaml") {
        image_refs(&doc, &mut refs);
    }
    assert!(!refs.is_empty());
    for (_, r) in refs {
        assert!(
            r.starts_with(&format!("{PREFIX}/provider-os/k8s-keystone-auth:")),
            "{r}"
        );
    }
    // kubeadm's images.
    let kcp = one(&objects[..objects.len() / 3], "KubeadmControlPlane");
    assert_eq!(
        kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["imageRepository"],
        PREFIX
    );
    // Without a prefix the charts' own registries stay.
    let plain = clusters_with_every_addon(json!({}));
    let ccm = find(&plain, "HelmChartProxy")
        .into_iter()
        .find(|h| h["spec"]["chartName"] == "openstack-cloud-controller-manager")
        .unwrap();
    assert!(chart_values(ccm).get("image").is_none());
}

#[test]
fn a_tag_label_changes_the_image_it_names() {
    let labels: Vec<&str> = values::tag_labels().collect();
    for name in [
        "cloud_provider_tag",
        "cinder_csi_plugin_tag",
        "manila_csi_plugin_tag",
        "csi_attacher_tag",
        "csi_provisioner_tag",
        "csi_snapshotter_tag",
        "csi_resizer_tag",
        "csi_liveness_probe_tag",
        "csi_node_driver_registrar_tag",
    ] {
        assert!(labels.contains(&name), "{name} is not mapped");
    }
    let tags: serde_json::Map<String, Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| ((*l).to_owned(), json!(format!("v9.{i}.1"))))
        .collect();
    let objects = clusters_with_every_addon(Value::Object(tags.clone()));
    for (chart, images) in values::CHART_IMAGES {
        for image in images.iter().filter(|i| i.tag_label.is_some()) {
            let label = image.tag_label.unwrap();
            let hcp = find(&objects, "HelmChartProxy")
                .into_iter()
                .find(|h| h["spec"]["chartName"] == *chart)
                .unwrap_or_else(|| panic!("{chart} not rendered"));
            let v = chart_values(hcp);
            let at = image.path.split('.').fold(&v, |v, part| &v[part]);
            assert_eq!(at["tag"], tags[label], "{label} → {chart} {}", image.path);
        }
    }
    // The CCM's image, concretely, and a bad tag is refused naming the label.
    let (t, c) = with_labels(json!({"cloud_provider_tag": "v1.33.9"}));
    let objects = render_rows(&rows(t, c, None));
    let ccm = addon(&objects, "ccm").unwrap();
    assert_eq!(chart_values(ccm)["image"]["tag"], "v1.33.9");
    let (t, c) = with_labels(json!({"cinder_csi_plugin_tag": "v1 && true"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap_err();
    assert!(err.to_string().contains("cinder_csi_plugin_tag"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Keystone authentication, GPUs by flavor, versions by Kubernetes minor

const KEYSTONE_URL: &str = "https://keystone.example.com:5000/v3";
const KEYSTONE_CA: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBkeystoneCA\n-----END CERTIFICATE-----\n";

pub(crate) fn keystone_config() -> CapiConfig {
    CapiConfig {
        keystone_auth_url: Some(KEYSTONE_URL.into()),
        keystone_auth_ca: Some(KEYSTONE_CA.into()),
        ..CapiConfig::default()
    }
}

/// The workload manifests a management-side ConfigMap carries for a ClusterResourceSet.
fn config_map_documents(cm: &Value, key: &str) -> Vec<Value> {
    let text = cm["data"][key].as_str().unwrap();
    yaml_serde::Deserializer::from_str(text)
        .map(|d| {
            use serde::Deserialize as _;
            Value::deserialize(d).unwrap()
        })
        .collect()
}

fn kcp_args(objects: &[Value]) -> Vec<(String, String)> {
    let kcp = one(objects, "KubeadmControlPlane");
    kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|nv| {
                    (
                        nv["name"].as_str().unwrap().to_owned(),
                        nv["value"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn keystone_auth_webhooks_and_default_policy() {
    // Off by default: no webhook, no ConfigMap (but the etcd defragmentation's).
    let objects = render_rows(&rows(template_body(), cluster_body(), None));
    assert!(find(&objects, "ConfigMap").iter().all(|c| {
        c["metadata"]["name"]
            .as_str()
            .unwrap()
            .ends_with("-etcd-defrag")
    }));
    assert!(
        kcp_args(&objects)
            .iter()
            .all(|(n, _)| !n.contains("webhook"))
    );

    let (t, c) = with_labels(json!({"keystone_auth_enabled": "true"}));
    let v = build_values(&rows(t, c, None), &keystone_config()).unwrap();
    let objects = renderer().render(&v).unwrap();
    assert_valid(&objects);
    let args = kcp_args(&objects);
    let webhook = "/etc/kubernetes/keystone-auth/webhook.kubeconfig";
    for (name, value) in [
        ("authentication-token-webhook-config-file", webhook),
        ("authorization-mode", "Node,RBAC,Webhook"),
        ("authorization-webhook-config-file", webhook),
    ] {
        assert!(
            args.contains(&(name.to_owned(), value.to_owned())),
            "{name}: {args:?}"
        );
    }
    let kcp = one(&objects, "KubeadmControlPlane");
    let spec = &kcp["spec"]["kubeadmConfigSpec"];
    let api = &spec["clusterConfiguration"]["apiServer"];
    assert!(
        api["certSANs"]
            .as_array()
            .unwrap()
            .contains(&json!("127.0.0.1"))
    );
    assert!(
        api["extraVolumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["hostPath"] == "/etc/kubernetes/keystone-auth" && v["readOnly"] == true)
    );
    let file = spec["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == webhook)
        .expect("the webhook kubeconfig");
    let kubeconfig: Value = yaml_serde::from_str(file["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["server"],
        "https://127.0.0.1:8443/webhook"
    );

    // The manifests travel with the cloud-config ClusterResourceSet.
    let crs = one(&objects, "ClusterResourceSet");
    let cm = keystone_config_map(&objects);
    assert!(
        crs["spec"]["resources"]
            .as_array()
            .unwrap()
            .contains(&json!({"kind": "ConfigMap", "name": cm["metadata"]["name"]}))
    );
    let docs = config_map_documents(cm, "keystone-auth.yaml");
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "ConfigMap",
            "ConfigMap",
            "DaemonSet"
        ]
    );
    let ds = docs.last().unwrap();
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    // The image follows the Kubernetes minor (v1.33.5 here).
    assert_eq!(
        container["image"],
        "registry.k8s.io/provider-os/k8s-keystone-auth:v1.33.1"
    );
    let cargs: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        cargs.contains(&format!("--keystone-url={KEYSTONE_URL}").as_str()),
        "{cargs:?}"
    );
    assert!(cargs.contains(&"--policy-configmap-name=k8s-keystone-auth-policy"));
    assert!(cargs.contains(&"--keystone-ca-file=/etc/keystone-auth-ca/ca.crt"));
    assert_eq!(docs[4]["data"]["ca.crt"], KEYSTONE_CA);
    // The default policy: the cluster's project, admin/member/reader.
    let policy: Value =
        serde_json::from_str(docs[3]["data"]["policies"].as_str().unwrap()).unwrap();
    assert_eq!(policy, values::keystone_default_policy(PROJECT));
    let roles: Vec<&Value> = policy
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["users"]["roles"][0])
        .collect();
    assert_eq!(roles, [&json!("admin"), &json!("member"), &json!("reader")]);
    insta::assert_json_snapshot!(
        "keystone_auth",
        json!({"kubeadmConfigSpec": spec, "clusterResourceSet": crs, "manifests": docs})
    );

    // Authentication only, or the operator's own policy ConfigMap.
    let (t, c) = with_labels(
        json!({"keystone_auth_enabled": "true", "keystone_auth_authz_enabled": "false"}),
    );
    let v = build_values(&rows(t, c, None), &keystone_config()).unwrap();
    let args = kcp_args(&renderer().render(&v).unwrap());
    assert!(
        args.iter()
            .any(|(n, _)| n == "authentication-token-webhook-config-file")
    );
    assert!(
        args.iter().all(|(n, _)| !n.starts_with("authorization")),
        "{args:?}"
    );
    let (t, c) = with_labels(
        json!({"keystone_auth_enabled": "true", "keystone_auth_policy_configmap": "my-policy"}),
    );
    let v = build_values(&rows(t, c, None), &keystone_config()).unwrap();
    let ka = v.addons.keystone_auth.unwrap();
    assert!(
        ka.args
            .contains(&"--policy-configmap-name=my-policy".to_owned())
    );
}

#[test]
fn bad_keystone_auth_labels_are_refused_naming_the_label() {
    for (labels, label) in [
        (
            json!({"keystone_auth_enabled": "sure"}),
            "keystone_auth_enabled",
        ),
        (
            json!({"keystone_auth_enabled": "true", "keystone_auth_authz_enabled": "2"}),
            "keystone_auth_authz_enabled",
        ),
        (
            json!({"keystone_auth_policy_configmap": "Not_A_Name"}),
            "keystone_auth_policy_configmap",
        ),
        (
            json!({"keystone_auth_authz_enabled": "false",
                   "keystone_auth_policy_configmap": "my-policy"}),
            "keystone_auth_policy_configmap",
        ),
    ] {
        let (t, c) = with_labels(labels.clone());
        let err =
            build_values(&rows(t, c, None), &keystone_config()).expect_err(&labels.to_string());
        assert!(
            matches!(&err, ValuesError::BadLabel { label: l, .. } if l == label),
            "{labels}: {err:?}"
        );
    }
    // Without a Keystone URL in the service's configuration the label cannot be honoured.
    let (t, c) = with_labels(json!({"keystone_auth_enabled": "true"}));
    let err = build_values(&rows(t, c, None), &CapiConfig::default()).unwrap_err();
    assert!(
        matches!(&err, ValuesError::BadLabel { label, .. } if label == "keystone_auth_enabled"),
        "{err:?}"
    );
}

#[test]
fn a_gpu_flavor_turns_the_gpu_operator_on_unless_the_label_says_no() {
    let gpu_rows = |labels: Value| {
        let (t, c) = with_labels(labels);
        let mut r = rows(t, c, None);
        // Nova's extra specs of the worker flavor ("3") asked for a GPU at validation.
        r.cluster.resolved.gpu_flavor_ids = vec!["3".into()];
        r
    };
    let objects = render_rows(&gpu_rows(json!({})));
    assert_valid(&objects);
    let hcp = addon(&objects, "gpu-operator").expect("GPU operator for a GPU flavor");
    assert_eq!(hcp["spec"]["chartName"], "gpu-operator");
    // The explicit label wins.
    let objects = render_rows(&gpu_rows(json!({"gpu_operator_enabled": "false"})));
    assert!(addon(&objects, "gpu-operator").is_none());
    // No GPU flavor: off unless asked.
    let objects = render_rows(&rows(template_body(), cluster_body(), None));
    assert!(addon(&objects, "gpu-operator").is_none());
    let (t, c) = with_labels(json!({"gpu_operator_enabled": "true"}));
    assert!(addon(&render_rows(&rows(t, c, None)), "gpu-operator").is_some());
}

/// What an upgrade from v1.32 to v1.33 changes in the add-ons: every version that follows the
/// Kubernetes minor moves with it (docs/templates-and-labels.md "Add-ons", `[capi] *_versions` tables).
#[test]
fn addon_versions_follow_the_kubernetes_minor_across_an_upgrade() {
    let render_at = |kube: &str| {
        let (t, c) = with_labels(json!({
            "kube_tag": kube, "auto_scaling_enabled": "true", "max_node_count": "4",
            "manila_csi_enabled": "true", "keystone_auth_enabled": "true"
        }));
        let mut r = rows(t, c, None);
        r.template.resolved.kube_version = None;
        r.cluster.resolved.kube_version = None;
        let v = build_values(&r, &keystone_config()).unwrap();
        let objects = renderer().render(&v).unwrap();
        assert_valid(&objects);
        let version = |key: &str| addon(&objects, key).unwrap()["spec"]["version"].clone();
        let autoscaler =
            one(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
                .clone();
        let keystone = config_map_documents(keystone_config_map(&objects), "keystone-auth.yaml")
            .last()
            .unwrap()["spec"]["template"]["spec"]["containers"][0]["image"]
            .clone();
        json!({
            "kubernetes": kube,
            "ccm": version("ccm"),
            "csi-cinder": version("csi-cinder"),
            "csi-manila": version("csi-manila"),
            "autoscaler": autoscaler,
            "k8s-keystone-auth": keystone,
        })
    };
    let before = render_at("v1.32.4");
    let after = render_at("v1.33.5");
    for key in [
        "ccm",
        "csi-cinder",
        "csi-manila",
        "autoscaler",
        "k8s-keystone-auth",
    ] {
        assert_ne!(before[key], after[key], "{key}");
    }
    insta::assert_json_snapshot!("versions_by_minor", json!([before, after]));
}

// ---------------------------------------------------------------------------------------------
// Data volumes

#[test]
fn containerd_and_etcd_get_their_own_volumes_mounted_before_kubeadm() {
    let ngs = json!({"nodegroups": [
        {"uuid": "11111111-1111-4111-8111-111111111111", "name": "default-master",
         "role": "master", "node_count": 1, "is_default": true, "docker_volume_size": 30},
        {"uuid": "22222222-2222-4222-8222-222222222222", "name": "default-worker",
         "role": "worker", "node_count": 2, "is_default": true, "docker_volume_size": 30},
        {"uuid": "33333333-3333-4333-8333-333333333333", "name": "big",
         "role": "worker", "node_count": 1, "docker_volume_size": 200,
         "labels": {"docker_volume_type": "bulk"}},
        {"uuid": "44444444-4444-4444-8444-444444444444", "name": "plain",
         "role": "worker", "node_count": 1, "docker_volume_size": 0}
    ]});
    let (mut t, c) = with_labels(json!({
        "docker_volume_type": "ssd",
        "etcd_volume_size": "10",
        "etcd_volume_type": "fast"
    }));
    t["docker_volume_size"] = json!(30);
    let objects = render_rows(&rows(t, c, Some(ngs)));
    assert_valid(&objects);
    let block_devices = |name_part: &str| {
        let osmt = find(&objects, "OpenStackMachineTemplate")
            .into_iter()
            .find(|o| o["metadata"]["name"].as_str().unwrap().contains(name_part))
            .unwrap_or_else(|| panic!("no machine template {name_part}"));
        osmt["spec"]["template"]["spec"]["additionalBlockDevices"].clone()
    };
    let containerd = |size: u32, volume_type: &str| {
        json!({"name": "containerd", "sizeGiB": size,
               "storage": {"type": "Volume", "volume": {"type": volume_type}}})
    };
    assert_eq!(
        block_devices("-control-plane"),
        json!([{"name": "etcd", "sizeGiB": 10, "storage": {"type": "Volume", "volume": {"type": "fast"}}},
               containerd(30, "ssd")])
    );
    assert_eq!(block_devices("-22222222-"), json!([containerd(30, "ssd")]));
    assert_eq!(
        block_devices("-33333333-"),
        json!([containerd(200, "bulk")])
    );
    assert_eq!(block_devices("-44444444-"), Value::Null);

    // The file systems and mounts are cloud-init's (disk_setup, mounts: before runcmd, where
    // kubeadm runs); the commands before kubeadm refuse to go on without the mount.
    let mount_check = "mountpoint -q /var/lib/containerd || { echo '/var/lib/containerd: its \
                       volume is not mounted' >&2; exit 1; }";
    let kcp = &one(&objects, "KubeadmControlPlane")["spec"]["kubeadmConfigSpec"];
    assert_eq!(
        kcp["diskSetup"]["filesystems"],
        json!([
            {"device": "/dev/disk/openstack/by-tag/etcd", "filesystem": "ext4",
             "label": "etcd_data", "overwrite": false},
            {"device": "/dev/disk/openstack/by-tag/containerd", "filesystem": "ext4",
             "label": "containerd_data", "overwrite": false}
        ])
    );
    assert_eq!(
        kcp["mounts"],
        json!([
            ["LABEL=etcd_data", "/var/lib/etcd"],
            ["LABEL=containerd_data", "/var/lib/containerd"]
        ])
    );
    assert_eq!(
        kcp["preKubeadmCommands"],
        json!([mount_check, "systemctl restart containerd"])
    );
    for kct in find(&objects, "KubeadmConfigTemplate") {
        let spec = &kct["spec"]["template"]["spec"];
        if kct["metadata"]["name"]
            .as_str()
            .unwrap()
            .contains("-44444444-")
        {
            assert!(spec.get("diskSetup").is_none() && spec.get("mounts").is_none());
            assert!(spec.get("preKubeadmCommands").is_none());
            continue;
        }
        assert_eq!(
            spec["mounts"],
            json!([["LABEL=containerd_data", "/var/lib/containerd"]])
        );
        assert_eq!(
            spec["diskSetup"]["filesystems"][0]["device"],
            "/dev/disk/openstack/by-tag/containerd"
        );
        assert_eq!(
            spec["preKubeadmCommands"],
            json!([mount_check, "systemctl restart containerd"])
        );
    }
    insta::assert_json_snapshot!("data_volumes", objects);
}

/// A template carrying every label `driver` honours, each with a value its working templates
/// carry (`domain::driver_labels`), builds a cluster's values and renders valid objects here.
fn every_label_of(honoured: impl Fn(&magnum_capi::domain::driver_labels::DriverLabel) -> bool) {
    use magnum_capi::domain::driver_labels::DRIVER_LABELS;
    let labels: serde_json::Map<String, Value> = DRIVER_LABELS
        .iter()
        .filter(|l| honoured(l))
        .map(|l| (l.name.to_string(), json!(l.sample)))
        .collect();
    let (t, c) = with_labels(Value::Object(labels.clone()));
    let r = rows(t, c, None);
    // A service with Keystone (keystone_auth_enabled gives the cluster its URL).
    let config = CapiConfig {
        keystone_auth_url: Some("https://keystone.example.com:5000/v3".into()),
        ..CapiConfig::default()
    };
    let v = build_values(&r, &config)
        .unwrap_or_else(|e| panic!("a label of a working template was refused: {e}\n{labels:?}"));
    assert_valid(&renderer().render(&v).unwrap());
}

#[test]
fn every_label_of_a_working_magnum_cluster_api_template_is_accepted() {
    every_label_of(|l| l.cluster_api);
}

#[test]
fn every_label_of_a_working_magnum_capi_helm_template_is_accepted() {
    every_label_of(|l| l.capi_helm);
}

#[test]
fn a_restricted_api_gets_the_drivers_security_groups_instead_of_capos() {
    // CAPO's managed control-plane group opens the API port to everyone, past the listener.
    let (t, c) = with_labels(json!({"api_master_lb_allowed_cidrs": "192.0.2.0/24"}));
    let objects = render_rows(&rows(t, c, None));
    assert_valid(&objects);
    let osc = one(&objects, "OpenStackCluster");
    assert!(osc["spec"].get("managedSecurityGroups").is_none(), "{osc}");
    let name = osc["metadata"]["name"].as_str().unwrap();
    let templates: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "OpenStackMachineTemplate")
        .collect();
    assert_eq!(templates.len(), 2);
    for m in templates {
        let role = if m["metadata"]["name"]
            .as_str()
            .unwrap()
            .contains("control-plane")
        {
            "controlplane"
        } else {
            "worker"
        };
        assert_eq!(
            m["spec"]["template"]["spec"]["securityGroups"],
            json!([{"filter": {"name": format!("{name}-secgroup-{role}")}}]),
            "{m}"
        );
    }
    // `0.0.0.0/0` restricts nothing: CAPO's groups.
    let (t, c) = with_labels(json!({"api_master_lb_allowed_cidrs": "0.0.0.0/0"}));
    let objects = render_rows(&rows(t, c, None));
    let osc = one(&objects, "OpenStackCluster");
    assert_eq!(
        osc["spec"]["managedSecurityGroups"],
        json!({"allowAllInClusterTraffic": true})
    );
    assert!(
        objects
            .iter()
            .all(|o| o.pointer("/spec/template/spec/securityGroups").is_none())
    );
}

#[test]
fn allowed_cidrs_give_a_single_master_cluster_its_api_load_balancer() {
    // magnum-capi-helm's templates carry the label without master_lb_enabled: it always made the
    // load balancer. The restriction is kept, never dropped.
    let (t, c) = with_labels(json!({"api_master_lb_allowed_cidrs": "10.0.0.0/8,192.0.2.0/24"}));
    let objects = render_rows(&rows(t, c, None));
    let osc = one(&objects, "OpenStackCluster");
    assert_eq!(
        osc["spec"]["apiServerLoadBalancer"]["allowedCIDRs"],
        json!(["10.0.0.0/8", "192.0.2.0/24", MGMT_EGRESS]),
        "{osc}"
    );
}
