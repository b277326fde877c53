//! The domain values a backend works on (`domain::spec`), read from and written as rows: the
//! conversions between rows and domain types, and [`load`], which resolves a cluster's whole
//! [`ClusterSpec`] for the worker.

use sqlx::PgPool;
use sqlx::types::Json;
use uuid::Uuid;

use super::DbResult;
use super::clusters::{self as cdb, ClusterRow};
use super::nodegroups::{self as ndb, NodegroupRow};
use super::operations::OperationRow;
use super::templates::{self as tdb, TemplateRow};
use crate::domain::spec::{Cluster, ClusterSpec, Day2, Nodegroup, Operation, Template};

impl From<TemplateRow> for Template {
    fn from(r: TemplateRow) -> Self {
        Self {
            uuid: r.uuid,
            project_id: r.project_id,
            user_id: r.user_id,
            name: r.name,
            image_id: r.image_id,
            flavor_id: r.flavor_id,
            master_flavor_id: r.master_flavor_id,
            keypair_id: r.keypair_id,
            external_network_id: r.external_network_id,
            fixed_network: r.fixed_network,
            fixed_subnet: r.fixed_subnet,
            network_driver: r.network_driver,
            volume_driver: r.volume_driver,
            dns_nameserver: r.dns_nameserver,
            apiserver_port: r.apiserver_port,
            docker_volume_size: r.docker_volume_size,
            docker_storage_driver: r.docker_storage_driver,
            cluster_distro: r.cluster_distro,
            coe: r.coe,
            http_proxy: r.http_proxy,
            https_proxy: r.https_proxy,
            no_proxy: r.no_proxy,
            registry_enabled: r.registry_enabled,
            labels: r.labels.0,
            tls_disabled: r.tls_disabled,
            public: r.public,
            server_type: r.server_type,
            insecure_registry: r.insecure_registry,
            master_lb_enabled: r.master_lb_enabled,
            floating_ip_enabled: r.floating_ip_enabled,
            hidden: r.hidden,
            tags: r.tags,
            driver: r.driver,
            resolved: r.resolved.0,
        }
    }
}

impl From<ClusterRow> for Cluster {
    fn from(r: ClusterRow) -> Self {
        Self {
            uuid: r.uuid,
            project_id: r.project_id,
            user_id: r.user_id,
            name: r.name,
            cluster_template_id: r.cluster_template_id,
            keypair: r.keypair,
            docker_volume_size: r.docker_volume_size,
            labels: r.labels.0,
            master_flavor_id: r.master_flavor_id,
            flavor_id: r.flavor_id,
            stack_id: r.stack_id,
            api_address: r.api_address,
            status: r.status,
            status_reason: r.status_reason,
            health_status: r.health_status,
            health_status_reason: r.health_status_reason.0,
            create_timeout: r.create_timeout,
            discovery_url: r.discovery_url,
            coe_version: r.coe_version,
            container_version: r.container_version,
            fixed_network: r.fixed_network,
            fixed_subnet: r.fixed_subnet,
            floating_ip_enabled: r.floating_ip_enabled,
            master_lb_enabled: r.master_lb_enabled,
            resolved: r.resolved.0,
            created_at: r.created_at,
            management_cluster: r.management_cluster,
            objects_at: None,
        }
    }
}

/// The row a new cluster is recorded as (not inserted yet: no id, no certificate references).
impl From<Cluster> for ClusterRow {
    fn from(c: Cluster) -> Self {
        Self {
            id: 0,
            uuid: c.uuid,
            project_id: c.project_id,
            user_id: c.user_id,
            name: c.name,
            cluster_template_id: c.cluster_template_id,
            keypair: c.keypair,
            docker_volume_size: c.docker_volume_size,
            labels: Json(c.labels),
            master_flavor_id: c.master_flavor_id,
            flavor_id: c.flavor_id,
            stack_id: c.stack_id,
            api_address: c.api_address,
            status: c.status,
            status_reason: c.status_reason,
            health_status: c.health_status,
            health_status_reason: Json(c.health_status_reason),
            create_timeout: c.create_timeout,
            discovery_url: c.discovery_url,
            coe_version: c.coe_version,
            container_version: c.container_version,
            ca_cert_ref: None,
            magnum_cert_ref: None,
            etcd_ca_cert_ref: None,
            front_proxy_ca_cert_ref: None,
            fixed_network: c.fixed_network,
            fixed_subnet: c.fixed_subnet,
            floating_ip_enabled: c.floating_ip_enabled,
            master_lb_enabled: c.master_lb_enabled,
            resolved: Json(c.resolved),
            created_at: c.created_at,
            updated_at: None,
            management_cluster: c.management_cluster,
        }
    }
}

impl From<NodegroupRow> for Nodegroup {
    fn from(r: NodegroupRow) -> Self {
        Self {
            id: r.id,
            uuid: r.uuid,
            name: r.name,
            cluster_id: r.cluster_id,
            project_id: r.project_id,
            docker_volume_size: r.docker_volume_size,
            labels: r.labels.0,
            flavor_id: r.flavor_id,
            image_id: r.image_id,
            node_addresses: r.node_addresses.0,
            node_count: r.node_count,
            role: r.role,
            max_node_count: r.max_node_count,
            min_node_count: r.min_node_count,
            is_default: r.is_default,
            stack_id: r.stack_id,
            status: r.status,
            status_reason: r.status_reason,
            version: r.version,
            node_labels: r.node_labels.map(|j| j.0),
            node_taints: r.node_taints.map(|j| j.0),
            created_at: r.created_at,
        }
    }
}

/// The row a new nodegroup is recorded as.
impl From<Nodegroup> for NodegroupRow {
    fn from(n: Nodegroup) -> Self {
        Self {
            id: n.id,
            uuid: n.uuid,
            name: n.name,
            cluster_id: n.cluster_id,
            project_id: n.project_id,
            docker_volume_size: n.docker_volume_size,
            labels: Json(n.labels),
            flavor_id: n.flavor_id,
            image_id: n.image_id,
            node_addresses: Json(n.node_addresses),
            node_count: n.node_count,
            role: n.role,
            max_node_count: n.max_node_count,
            min_node_count: n.min_node_count,
            is_default: n.is_default,
            stack_id: n.stack_id,
            status: n.status,
            status_reason: n.status_reason,
            version: n.version,
            node_labels: n.node_labels.map(Json),
            node_taints: n.node_taints.map(Json),
            created_at: n.created_at,
            updated_at: None,
        }
    }
}

impl From<&OperationRow> for Operation {
    fn from(r: &OperationRow) -> Self {
        Self {
            id: r.id,
            cluster_uuid: r.cluster_uuid,
            nodegroup_uuid: r.nodegroup_uuid,
            kind: r.kind.clone(),
            payload: r.payload.0.clone(),
            attempts: r.attempts,
            step: r.step().clone(),
            created_at: r.created_at,
            earlier_steps: Vec::new(),
        }
    }
}

/// The domain view of a cluster row and its nodegroup rows.
pub fn cluster_and_nodegroups<'a>(
    c: &ClusterRow,
    ngs: impl IntoIterator<Item = &'a NodegroupRow>,
) -> (Cluster, Vec<Nodegroup>) {
    (
        Cluster::from(c.clone()),
        ngs.into_iter().cloned().map(Nodegroup::from).collect(),
    )
}

/// What [`load`] found of a cluster.
#[derive(Debug)]
pub enum Loaded {
    Spec(Box<ClusterSpec>),
    ClusterGone,
    /// The cluster exists but its template does not (templates in use cannot be deleted).
    TemplateGone,
}

/// Everything a backend needs of `cluster`, as Postgres has it now.
pub async fn load(pool: &PgPool, cluster: Uuid) -> DbResult<Loaded> {
    let Some(c) = cdb::by_uuid(pool, &cdb::Scope::All, cluster).await? else {
        return Ok(Loaded::ClusterGone);
    };
    let Some(t) = template(pool, c.cluster_template_id).await? else {
        return Ok(Loaded::TemplateGone);
    };
    let ngs = ndb::of_cluster(pool, cluster).await?;
    let day2 = day2(pool, cluster).await?;
    let mut cluster = Cluster::from(c);
    // Imported from a Magnum Cluster API driver: its objects are where that driver left them.
    if let Some(i) = super::imports::of_cluster(pool, cluster.uuid).await? {
        cluster.objects_at = crate::domain::imported::objects_at(
            &i.source_driver,
            i.stack_id.as_deref(),
            &cluster.project_id,
        );
    }
    Ok(Loaded::Spec(Box::new(ClusterSpec {
        placement: cluster.management_cluster_name().to_string(),
        template: t,
        cluster,
        nodegroups: ngs.into_iter().map(Nodegroup::from).collect(),
        day2,
    })))
}

/// The steps recorded by the earlier operations of `op`'s kind on its cluster, latest first.
pub async fn earlier_steps(pool: &PgPool, op: &Operation) -> DbResult<Vec<serde_json::Value>> {
    Ok(super::operations::of_cluster(pool, op.cluster_uuid)
        .await?
        .into_iter()
        .rev()
        .filter(|o| o.id != op.id && o.kind == op.kind)
        .map(|o| o.step().clone())
        .collect())
}

/// The template `uuid`, whoever owns it.
pub async fn template(pool: &PgPool, uuid: Uuid) -> DbResult<Option<Template>> {
    Ok(tdb::by_uuid(pool, &tdb::Visibility::All, uuid)
        .await?
        .map(Template::from))
}

/// The day-2 columns of a cluster row.
#[derive(sqlx::FromRow)]
struct Day2Row {
    app_cred_id: Option<String>,
    app_cred_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    credential_problem: Option<String>,
    ca_rotation_phase: Option<i16>,
    ca_rollout_after: Option<chrono::DateTime<chrono::Utc>>,
}

/// The day-2 state of `cluster` (defaults when it is gone).
pub async fn day2(pool: &PgPool, cluster: Uuid) -> DbResult<Day2> {
    let row: Option<Day2Row> = sqlx::query_as(
        "SELECT app_cred_id, app_cred_expires_at, credential_problem, ca_rotation_phase,
                ca_rollout_after
           FROM cluster WHERE uuid = $1",
    )
    .bind(cluster)
    .fetch_optional(pool)
    .await?;
    Ok(row.map_or_else(Day2::default, |r| Day2 {
        app_cred_id: r.app_cred_id,
        app_cred_expires_at: r.app_cred_expires_at,
        credential_problem: r.credential_problem,
        ca_rotation_phase: r.ca_rotation_phase,
        ca_rollout_after: r.ca_rollout_after,
    }))
}
