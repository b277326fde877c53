//! The `render` command's hypothetical cluster: rows from API bodies (the cluster and its
//! default nodegroups planned as a create would), and placeholder credentials and CAs.

use secrecy::SecretString;
use serde_json::Value;
use uuid::Uuid;

use super::document::CloudCredentials;
use super::error::ValuesError;
use crate::capi::pki::ClusterCas;
use crate::domain::fields::bool_from_string;
use crate::domain::labels::Labels;
use crate::domain::new_cluster::{self, ClusterRequest, NodegroupPlan};
use crate::domain::resources::Resolved;
use crate::domain::spec::Cluster;
use crate::domain::spec::Nodegroup;
use crate::domain::spec::Template;

/// The rows of a hypothetical cluster, built from API bodies.
#[derive(Debug, Clone)]
pub struct ApiRows {
    pub template: Template,
    pub cluster: Cluster,
    pub nodegroups: Vec<Nodegroup>,
}

fn field_str(v: &Value, key: &str) -> Option<String> {
    match v.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

fn field_bool(v: &Value, key: &str) -> Result<Option<bool>, ValuesError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) => bool_from_string(s)
            .map(Some)
            .ok_or_else(|| ValuesError::Invalid(format!("{key} must be a boolean"))),
        Some(_) => Err(ValuesError::Invalid(format!("{key} must be a boolean"))),
    }
}

fn field_int(v: &Value, key: &str) -> Result<Option<i64>, ValuesError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_i64()
            .or_else(|| x.as_str().and_then(|s| s.trim().parse().ok()))
            .map(Some)
            .ok_or_else(|| ValuesError::Invalid(format!("{key} must be an integer"))),
    }
}

fn field_i32(v: &Value, key: &str) -> Result<Option<i32>, ValuesError> {
    field_int(v, key)?
        .map(|n| {
            i32::try_from(n).map_err(|_| ValuesError::Invalid(format!("{key} must be an integer")))
        })
        .transpose()
}

/// `read` of a field whose absence differs from null: `None` when absent, `Some(None)` when null.
fn field_given<T>(
    v: &Value,
    key: &str,
    read: impl Fn(&Value, &str) -> Result<Option<T>, ValuesError>,
) -> Result<Option<Option<T>>, ValuesError> {
    match v.get(key) {
        None => Ok(None),
        Some(_) => read(v, key).map(Some),
    }
}

fn field_uuid(v: &Value, key: &str) -> Result<Option<Uuid>, ValuesError> {
    field_str(v, key)
        .map(|s| {
            Uuid::parse_str(&s)
                .map_err(|_| ValuesError::Invalid(format!("{key} {s:?} is not a uuid")))
        })
        .transpose()
}

fn field_labels(v: &Value, key: &str) -> Result<Option<Labels>, ValuesError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        )),
        Some(_) => Err(ValuesError::Invalid(format!("{key} must be a dict"))),
    }
}

/// What a cluster body asks for, read as a create request would be.
fn cluster_request(body: &Value) -> Result<ClusterRequest, ValuesError> {
    Ok(ClusterRequest {
        name: field_str(body, "name"),
        labels: field_labels(body, "labels")?,
        merge_labels: field_bool(body, "merge_labels")?.unwrap_or(false),
        keypair: field_str(body, "keypair"),
        flavor: field_str(body, "flavor_id"),
        master_flavor: field_str(body, "master_flavor_id"),
        fixed_network: field_str(body, "fixed_network"),
        fixed_subnet: field_str(body, "fixed_subnet"),
        docker_volume_size: field_int(body, "docker_volume_size")?,
        master_count: field_int(body, "master_count")?,
        node_count: field_int(body, "node_count")?,
        discovery_url: field_str(body, "discovery_url"),
        create_timeout: field_given(body, "create_timeout", field_int)?,
        master_lb_enabled: field_given(body, "master_lb_enabled", field_bool)?,
        floating_ip_enabled: field_given(body, "floating_ip_enabled", field_bool)?,
    })
}

/// A fixed uuid for what the API would generate, so the same bodies render the same objects.
const PLACEHOLDER_CLUSTER_UUID: u128 = 0x0000_0000_0000_4000_8000_0000_0000_0001;

/// Rows for the cluster that `cluster` (a `GET /v1/clusters/{id}` body) would be when created
/// from `template` (a `GET /v1/clustertemplates/{id}` body), with `nodegroups` (a
/// `GET /v1/clusters/{id}/nodegroups` body, or a list of nodegroup bodies; the default master
/// and worker nodegroups are added when missing). Absent fields take the API's defaults and
/// the cluster inherits what the template gives, as on create. Nothing is looked up, so
/// images, flavors and networks are referenced as given.
pub fn rows_from_api(
    template: &Value,
    cluster: &Value,
    nodegroups: Option<&Value>,
) -> Result<ApiRows, ValuesError> {
    let epoch = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
    let t_labels = field_labels(template, "labels")?.unwrap_or_default();
    let project_id = field_str(cluster, "project_id")
        .or_else(|| field_str(template, "project_id"))
        .unwrap_or_else(|| "project".into());
    let user_id = field_str(cluster, "user_id")
        .or_else(|| field_str(template, "user_id"))
        .unwrap_or_else(|| "user".into());
    let t = Template {
        uuid: field_uuid(template, "uuid")?
            .unwrap_or(Uuid::from_u128(PLACEHOLDER_CLUSTER_UUID + 1)),
        project_id: project_id.clone(),
        user_id: user_id.clone(),
        name: field_str(template, "name"),
        image_id: field_str(template, "image_id"),
        flavor_id: field_str(template, "flavor_id"),
        master_flavor_id: field_str(template, "master_flavor_id"),
        keypair_id: field_str(template, "keypair_id"),
        external_network_id: field_str(template, "external_network_id"),
        fixed_network: field_str(template, "fixed_network"),
        fixed_subnet: field_str(template, "fixed_subnet"),
        network_driver: field_str(template, "network_driver"),
        volume_driver: field_str(template, "volume_driver"),
        dns_nameserver: field_str(template, "dns_nameserver").or_else(|| Some("8.8.8.8".into())),
        apiserver_port: field_i32(template, "apiserver_port")?,
        docker_volume_size: field_i32(template, "docker_volume_size")?,
        docker_storage_driver: field_str(template, "docker_storage_driver"),
        cluster_distro: field_str(template, "cluster_distro"),
        coe: field_str(template, "coe").or_else(|| Some("kubernetes".into())),
        http_proxy: field_str(template, "http_proxy"),
        https_proxy: field_str(template, "https_proxy"),
        no_proxy: field_str(template, "no_proxy"),
        registry_enabled: field_bool(template, "registry_enabled")?.unwrap_or(false),
        labels: t_labels,
        tls_disabled: field_bool(template, "tls_disabled")?.unwrap_or(false),
        public: field_bool(template, "public")?.unwrap_or(false),
        server_type: field_str(template, "server_type"),
        insecure_registry: field_str(template, "insecure_registry"),
        master_lb_enabled: field_bool(template, "master_lb_enabled")?.unwrap_or(false),
        floating_ip_enabled: field_bool(template, "floating_ip_enabled")?.unwrap_or(true),
        hidden: field_bool(template, "hidden")?.unwrap_or(false),
        tags: field_str(template, "tags"),
        driver: field_str(template, "driver"),
        resolved: Resolved::default(),
    };
    let uuid = field_uuid(cluster, "uuid")?.unwrap_or(Uuid::from_u128(PLACEHOLDER_CLUSTER_UUID));
    let plan = new_cluster::plan(&t.defaults(), &cluster_request(cluster)?, uuid)
        .map_err(|e| ValuesError::Invalid(e.to_string()))?;
    let c = Cluster {
        created_at: epoch,
        ..Cluster::from_plan(&plan, &project_id, &user_id)
    };
    // The i-th nodegroup's uuid when its body gives none: stable, and distinct per position.
    let ng_uuid = |i: usize| {
        let index = u128::try_from(i).unwrap_or(0) + 1;
        Uuid::from_u128(uuid.as_u128() ^ (index << 64))
    };
    let ng_id = |i: usize| i64::try_from(i).unwrap_or(0) + 1;

    let items: Vec<Value> = match nodegroups {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) => a.clone(),
        Some(v) => match v.get("nodegroups") {
            Some(Value::Array(a)) => a.clone(),
            _ => {
                return Err(ValuesError::Invalid(
                    "nodegroups must be a list or {\"nodegroups\": [...]}".into(),
                ));
            }
        },
    };
    let mut ngs = Vec::new();
    let ng_row = |i: usize, body: &Value| -> Result<Nodegroup, ValuesError> {
        let role = field_str(body, "role").unwrap_or_else(|| "worker".into());
        let name = field_str(body, "name")
            .ok_or_else(|| ValuesError::Invalid(format!("nodegroup #{} has no name", i + 1)))?;
        let master = role == "master";
        let fallback_flavor = if master {
            &c.master_flavor_id
        } else {
            &c.flavor_id
        };
        let node_labels = body.get("node_labels").filter(|v| !v.is_null()).cloned();
        let node_taints = body.get("node_taints").filter(|v| !v.is_null()).cloned();
        Ok(Nodegroup {
            id: ng_id(i),
            uuid: field_uuid(body, "uuid")?.unwrap_or(ng_uuid(i)),
            name,
            cluster_id: uuid,
            project_id: project_id.clone(),
            docker_volume_size: field_i32(body, "docker_volume_size")?,
            labels: field_labels(body, "labels")?
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| c.labels.clone()),
            flavor_id: field_str(body, "flavor_id").or_else(|| fallback_flavor.clone()),
            image_id: field_str(body, "image_id").or_else(|| t.image_id.clone()),
            node_addresses: vec![],
            node_count: field_i32(body, "node_count")?.unwrap_or(1),
            role,
            max_node_count: field_i32(body, "max_node_count")?,
            min_node_count: field_i32(body, "min_node_count")?.unwrap_or(0),
            is_default: field_bool(body, "is_default")?.unwrap_or(false),
            stack_id: None,
            status: None,
            status_reason: None,
            version: None,
            node_labels,
            node_taints,
            created_at: epoch,
        })
    };
    for (i, body) in items.iter().enumerate() {
        ngs.push(ng_row(i, body)?);
    }
    // The default nodegroups a create adds, where the bodies leave them out.
    let default_ng = |i: usize, plan: &NodegroupPlan| Nodegroup {
        id: ng_id(i),
        ..Nodegroup::from_plan(plan, ng_uuid(i), &c)
    };
    let base = ngs.len();
    if !ngs.iter().any(Nodegroup::is_master) {
        ngs.push(default_ng(base, &plan.master));
    }
    if items.is_empty() {
        ngs.push(default_ng(base + 1, &plan.worker));
    }
    Ok(ApiRows {
        template: t,
        cluster: c,
        nodegroups: ngs,
    })
}

/// A stand-in credential for printed manifests: obviously not a real one.
pub fn placeholder_credentials() -> CloudCredentials {
    CloudCredentials {
        auth_url: "https://keystone.example.invalid/v3".into(),
        region_name: None,
        interface: "public".into(),
        application_credential_id: "PLACEHOLDER-application-credential-id".into(),
        application_credential_secret: SecretString::from("PLACEHOLDER-not-a-secret".to_owned()),
        cacert: None,
        verify: true,
    }
}

/// Stand-in CAs for printed manifests: marked placeholders, not PEM.
pub fn placeholder_cas() -> ClusterCas {
    let pair = |what: &str| crate::capi::pki::KeyPairPem {
        cert_pem: format!(
            "PLACEHOLDER {what} certificate (generated when the cluster is created)\n"
        ),
        key_pem: format!(
            "PLACEHOLDER {what} private key (generated when the cluster is created)\n"
        ),
    };
    ClusterCas {
        ca: pair("cluster CA"),
        etcd: pair("etcd CA"),
        front_proxy: pair("front-proxy CA"),
        sa: pair("service-account key pair"),
    }
}
