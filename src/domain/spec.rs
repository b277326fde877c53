//! What a backend works on: a cluster template, a cluster, its nodegroups, its day-2 state and
//! the operation being run, as plain values. The worker resolves them from PostgreSQL (`db::spec`)
//! and hands them to the driver, so the driver and the render code never read the database.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::labels::Labels;
use super::new_cluster::{ClusterPlan, NodegroupPlan, TemplateDefaults};
use super::operation::{OperationKind, UnknownKind};
use super::resources::Resolved;
use super::status::Status;

/// A cluster template as the driver reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub uuid: Uuid,
    pub project_id: String,
    pub user_id: String,
    pub name: Option<String>,
    pub image_id: Option<String>,
    pub flavor_id: Option<String>,
    pub master_flavor_id: Option<String>,
    pub keypair_id: Option<String>,
    pub external_network_id: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub network_driver: Option<String>,
    pub volume_driver: Option<String>,
    pub dns_nameserver: Option<String>,
    pub apiserver_port: Option<i32>,
    pub docker_volume_size: Option<i32>,
    pub docker_storage_driver: Option<String>,
    pub cluster_distro: Option<String>,
    pub coe: Option<String>,
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
    pub registry_enabled: bool,
    pub labels: Labels,
    pub tls_disabled: bool,
    pub public: bool,
    pub server_type: Option<String>,
    pub insecure_registry: Option<String>,
    pub master_lb_enabled: bool,
    pub floating_ip_enabled: bool,
    pub hidden: bool,
    pub tags: Option<String>,
    pub driver: Option<String>,
    /// OpenStack ids the template resolved to (Glance/Nova/Neutron).
    pub resolved: Resolved,
}

impl Template {
    /// What this template gives a new cluster.
    pub fn defaults(&self) -> TemplateDefaults {
        TemplateDefaults {
            uuid: self.uuid,
            labels: self.labels.clone(),
            image: self.image_id.clone(),
            keypair: self.keypair_id.clone(),
            flavor: self.flavor_id.clone(),
            master_flavor: self.master_flavor_id.clone(),
            fixed_network: self.fixed_network.clone(),
            fixed_subnet: self.fixed_subnet.clone(),
            docker_volume_size: self.docker_volume_size,
            master_lb_enabled: self.master_lb_enabled,
            floating_ip_enabled: self.floating_ip_enabled,
        }
    }
}

/// A cluster as the driver reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub uuid: Uuid,
    pub project_id: String,
    pub user_id: String,
    pub name: Option<String>,
    pub cluster_template_id: Uuid,
    pub keypair: Option<String>,
    pub docker_volume_size: Option<i32>,
    pub labels: Labels,
    pub master_flavor_id: Option<String>,
    pub flavor_id: Option<String>,
    /// The CAPI `Cluster` name.
    pub stack_id: Option<String>,
    pub api_address: Option<String>,
    pub status: String,
    pub status_reason: Option<String>,
    pub health_status: Option<String>,
    pub health_status_reason: serde_json::Value,
    pub create_timeout: Option<i32>,
    pub discovery_url: Option<String>,
    pub coe_version: Option<String>,
    pub container_version: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub floating_ip_enabled: Option<bool>,
    pub master_lb_enabled: Option<bool>,
    /// OpenStack ids the cluster resolved to at create (image, flavors, networks).
    pub resolved: Resolved,
    pub created_at: DateTime<Utc>,
    /// The management cluster it was placed on; `None`: the unnamed one.
    pub management_cluster: Option<String>,
    /// Where another driver left its Cluster API objects (a cluster imported from Magnum that
    /// magnum-cluster-api or magnum-capi-helm made): the driver reads them there instead of in
    /// its own namespace and names. `None` for a cluster made here.
    pub objects_at: Option<ObjectsAt>,
}

/// A namespace and CAPI `Cluster` name on a management cluster; its CA Secrets are
/// `<name>-ca`, `-etcd`, `-proxy` and `-sa` beside it (both Magnum CAPI drivers and ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectsAt {
    pub namespace: String,
    pub name: String,
    /// The Magnum driver that left them (its objects' names and labels are its own).
    pub driver: DriverFamily,
}

/// The driver families an import tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverFamily {
    /// StackHPC's magnum-capi-helm (`stack_id` = its Helm release and CAPI Cluster name).
    CapiHelm,
    /// Vexxhost's magnum-cluster-api (`stack_id` = its CAPI Cluster name, `kube-xxxxx`).
    ClusterApi,
    /// The removed Heat driver (`stack_id` = the Heat stack's UUID).
    Heat,
    Unknown,
}

impl Cluster {
    /// The cluster a create records for `plan`, owned by `project_id`/`user_id`: in
    /// `CREATE_IN_PROGRESS`, nothing resolved yet.
    pub fn from_plan(plan: &ClusterPlan, project_id: &str, user_id: &str) -> Self {
        Self {
            uuid: plan.uuid,
            project_id: project_id.into(),
            user_id: user_id.into(),
            name: Some(plan.name.clone()),
            cluster_template_id: plan.template_uuid,
            keypair: plan.keypair.clone(),
            docker_volume_size: plan.docker_volume_size,
            labels: plan.labels.clone(),
            master_flavor_id: plan.master_flavor.clone(),
            flavor_id: plan.flavor.clone(),
            stack_id: Some(plan.stack_id.clone()),
            api_address: None,
            status: Status::CreateInProgress.as_str().into(),
            status_reason: None,
            health_status: None,
            health_status_reason: serde_json::json!({}),
            create_timeout: plan.create_timeout,
            discovery_url: plan.discovery_url.clone(),
            coe_version: None,
            container_version: None,
            fixed_network: plan.fixed_network.clone(),
            fixed_subnet: plan.fixed_subnet.clone(),
            floating_ip_enabled: plan.floating_ip_enabled,
            master_lb_enabled: plan.master_lb_enabled,
            resolved: Resolved::default(),
            created_at: Utc::now(),
            management_cluster: None,
            objects_at: None,
        }
    }

    /// The name of its management cluster: `""` for the unnamed one.
    pub fn management_cluster_name(&self) -> &str {
        self.management_cluster.as_deref().unwrap_or("")
    }
}

/// A nodegroup as the driver reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Nodegroup {
    /// Its row id: the order nodegroups were added in.
    pub id: i64,
    pub uuid: Uuid,
    pub name: String,
    pub cluster_id: Uuid,
    pub project_id: String,
    pub docker_volume_size: Option<i32>,
    pub labels: Labels,
    pub flavor_id: Option<String>,
    pub image_id: Option<String>,
    pub node_addresses: Vec<String>,
    pub node_count: i32,
    pub role: String,
    pub max_node_count: Option<i32>,
    pub min_node_count: i32,
    pub is_default: bool,
    pub stack_id: Option<String>,
    pub status: Option<String>,
    pub status_reason: Option<String>,
    pub version: Option<String>,
    pub node_labels: Option<serde_json::Value>,
    pub node_taints: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
}

impl Nodegroup {
    pub fn is_master(&self) -> bool {
        self.role == "master"
    }

    /// The default nodegroup a create records for `plan` of `cluster`, as `uuid`: in
    /// `CREATE_IN_PROGRESS`.
    pub fn from_plan(plan: &NodegroupPlan, uuid: Uuid, cluster: &Cluster) -> Self {
        Self {
            id: 0,
            uuid,
            name: plan.name.clone(),
            cluster_id: cluster.uuid,
            project_id: cluster.project_id.clone(),
            docker_volume_size: plan.docker_volume_size,
            labels: plan.labels.clone(),
            flavor_id: plan.flavor.clone(),
            image_id: plan.image.clone(),
            node_addresses: Vec::new(),
            node_count: plan.node_count,
            role: plan.role.clone(),
            max_node_count: None,
            min_node_count: plan.min_node_count,
            is_default: true,
            stack_id: None,
            status: Some(Status::CreateInProgress.as_str().into()),
            status_reason: None,
            version: None,
            node_labels: None,
            node_taints: None,
            created_at: cluster.created_at,
        }
    }
}

/// The day-2 state of a cluster the driver reads: its application credential and CA rotation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Day2 {
    /// The application credential the cluster runs on (None: none recorded).
    pub app_cred_id: Option<String>,
    pub app_cred_expires_at: Option<DateTime<Utc>>,
    /// Why the credential does not work, as the last check found (None: it does).
    pub credential_problem: Option<String>,
    /// The CA rotation's phase (1..=3), None when none is under way.
    pub ca_rotation_phase: Option<i16>,
    /// The rollout marker last rendered (machines older than it are replaced).
    pub ca_rollout_after: Option<DateTime<Utc>>,
}

/// One recorded operation as its backend reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    pub id: i64,
    pub cluster_uuid: Uuid,
    pub nodegroup_uuid: Option<Uuid>,
    pub kind: String,
    pub payload: serde_json::Value,
    /// Failed runs so far.
    pub attempts: i32,
    /// Where the operation is, as its backend recorded it; `Null` before its first step.
    pub step: serde_json::Value,
    pub created_at: DateTime<Utc>,
    /// The steps this cluster's earlier operations of the same kind recorded, latest first
    /// (resolved for a delete: one asked again resumes from what a failed one found).
    pub earlier_steps: Vec<serde_json::Value>,
}

impl Operation {
    /// The operation's kind; an error for a kind this version does not know.
    pub fn op_kind(&self) -> Result<OperationKind, UnknownKind> {
        self.kind.parse()
    }
}

/// Everything a backend needs of one cluster: the template it is built from, the cluster, its
/// nodegroups (in the order they were added), its day-2 state and its placement.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSpec {
    pub template: Template,
    pub cluster: Cluster,
    pub nodegroups: Vec<Nodegroup>,
    pub day2: Day2,
    /// The management cluster the cluster lives on (`""`: the unnamed one).
    pub placement: String,
}
