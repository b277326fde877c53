//! The views of every resource (what the API returns), field for field and in Magnum's order:
//! full and short forms, links, RFC 3339 timestamps with offset, version-dependent fields.
//!
//! Each view is a struct whose field order is the key order of the JSON object; a field is
//! skipped only where Magnum leaves the key out (`Option<Option<_>>` with `skip_serializing_if`
//! where the key may be absent but, when present, may be null). The `ToSchema` derives make them
//! the response schemas of the OpenAPI document.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::db::clusters::{ClusterRow, ClusterWithNodes};
use crate::db::nodegroups::NodegroupRow;
use crate::db::quotas::QuotaRow;
use crate::db::services::ServiceRow;
use crate::db::templates::TemplateRow;
use crate::domain::labels::{self, Labels};
use crate::domain::status::Status;
use crate::domain::version::Version;

/// An RFC 3339 timestamp with an explicit offset, whole seconds (`2016-08-29T06:51:31+00:00`).
pub fn ts(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, false)
}

pub fn ts_opt(t: &Option<DateTime<Utc>>) -> Option<String> {
    t.as_ref().map(ts)
}

/// A link of a resource or document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Link {
    pub href: String,
    /// `self`, `bookmark` or `describedby`.
    pub rel: String,
    /// The media type, on `describedby` only.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Link {
    pub fn new(href: String, rel: &str) -> Self {
        Link {
            href,
            rel: rel.into(),
            media_type: None,
        }
    }
}

/// `[{self}, {bookmark}]` for `resource/id` under `base`.
pub fn links(base: &str, path: &str) -> Vec<Link> {
    vec![
        Link::new(format!("{base}/v1/{path}"), "self"),
        Link::new(format!("{base}/{path}"), "bookmark"),
    ]
}

/// A view as the JSON object a JSON-PATCH applies to (its keys in the view's order).
pub fn document(view: &impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(view) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// A cluster template (every form: templates have no short view).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterTemplate {
    pub uuid: Uuid,
    pub name: Option<String>,
    pub coe: Option<String>,
    pub image_id: Option<String>,
    pub flavor_id: Option<String>,
    pub master_flavor_id: Option<String>,
    pub dns_nameserver: Option<String>,
    pub keypair_id: Option<String>,
    pub external_network_id: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub network_driver: Option<String>,
    pub apiserver_port: Option<i32>,
    pub docker_volume_size: Option<i32>,
    pub cluster_distro: Option<String>,
    pub links: Vec<Link>,
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
    pub volume_driver: Option<String>,
    pub registry_enabled: bool,
    #[schema(value_type = HashMap<String, String>)]
    pub labels: Labels,
    pub tls_disabled: bool,
    pub public: bool,
    pub server_type: Option<String>,
    pub insecure_registry: Option<String>,
    pub docker_storage_driver: Option<String>,
    pub master_lb_enabled: bool,
    pub floating_ip_enabled: bool,
    pub project_id: String,
    pub user_id: String,
    pub hidden: bool,
    pub tags: Option<String>,
    pub driver: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
}

pub fn template(t: &TemplateRow, base: &str) -> ClusterTemplate {
    template_owned(t.clone(), base)
}

/// [`template`] consuming the row (a list moves its fields instead of copying them).
pub fn template_owned(t: TemplateRow, base: &str) -> ClusterTemplate {
    ClusterTemplate {
        uuid: t.uuid,
        name: t.name,
        coe: t.coe,
        image_id: t.image_id,
        flavor_id: t.flavor_id,
        master_flavor_id: t.master_flavor_id,
        dns_nameserver: t.dns_nameserver,
        keypair_id: t.keypair_id,
        external_network_id: t.external_network_id,
        fixed_network: t.fixed_network,
        fixed_subnet: t.fixed_subnet,
        network_driver: t.network_driver,
        apiserver_port: t.apiserver_port,
        docker_volume_size: t.docker_volume_size,
        cluster_distro: t.cluster_distro,
        links: links(base, &format!("clustertemplates/{}", t.uuid)),
        http_proxy: t.http_proxy,
        https_proxy: t.https_proxy,
        no_proxy: t.no_proxy,
        volume_driver: t.volume_driver,
        registry_enabled: t.registry_enabled,
        labels: t.labels.0,
        tls_disabled: t.tls_disabled,
        public: t.public,
        server_type: t.server_type,
        insecure_registry: t.insecure_registry,
        docker_storage_driver: t.docker_storage_driver,
        master_lb_enabled: t.master_lb_enabled,
        floating_ip_enabled: t.floating_ip_enabled,
        project_id: t.project_id,
        user_id: t.user_id,
        hidden: t.hidden,
        tags: t.tags,
        driver: t.driver,
        created_at: ts(&t.created_at),
        updated_at: ts_opt(&t.updated_at),
    }
}

/// `GET /v1/clustertemplates` and `/detail`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterTemplateList {
    pub clustertemplates: Vec<ClusterTemplate>,
    /// The next page, when this one is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Aggregates of a cluster's nodegroups.
#[derive(Debug, Default, Clone)]
pub struct NgSummary {
    pub node_count: i64,
    pub master_count: i64,
    pub node_addresses: Vec<String>,
    pub master_addresses: Vec<String>,
    /// Failed nodegroup name → its status reason, in nodegroup order.
    pub faults: Map<String, Value>,
}

pub fn summarize<'a>(ngs: impl IntoIterator<Item = &'a NodegroupRow>) -> NgSummary {
    let mut s = NgSummary::default();
    for ng in ngs {
        if ng.is_master() {
            s.master_count += i64::from(ng.node_count);
            s.master_addresses
                .extend(ng.node_addresses.0.iter().cloned());
        } else {
            s.node_count += i64::from(ng.node_count);
            s.node_addresses.extend(ng.node_addresses.0.iter().cloned());
        }
        if ng
            .status
            .as_deref()
            .is_some_and(|st| st.ends_with("FAILED"))
        {
            s.faults.insert(
                ng.name.clone(),
                ng.status_reason
                    .clone()
                    .map(Value::String)
                    .unwrap_or(Value::Null),
            );
        }
    }
    s
}

/// The Heat-era `stack_id` (below 1.13) or its 1.13 name `cluster_id`, at the same position: the
/// other key is absent. The value is the Cluster API cluster's name.
fn stack_keys(c: &ClusterRow, mv: Version) -> (Option<Option<String>>, Option<Option<String>>) {
    if mv.at_least(13) {
        (None, Some(c.stack_id.clone()))
    } else {
        (Some(c.stack_id.clone()), None)
    }
}

/// The short form used by `GET /v1/clusters`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterSummary {
    pub uuid: Uuid,
    pub name: Option<String>,
    pub cluster_template_id: Uuid,
    pub keypair: Option<String>,
    pub node_count: i64,
    pub master_count: i64,
    pub docker_volume_size: Option<i32>,
    #[schema(value_type = HashMap<String, String>)]
    pub labels: Labels,
    pub master_flavor_id: Option<String>,
    pub flavor_id: Option<String>,
    pub create_timeout: Option<i32>,
    pub links: Vec<Link>,
    /// Below 1.13 only (then `cluster_id` is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub stack_id: Option<Option<String>>,
    /// From 1.13 only (then `stack_id` is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub cluster_id: Option<Option<String>>,
    pub status: String,
    pub health_status: Option<String>,
    /// Always false in views (a create-time flag).
    pub merge_labels: bool,
}

/// The short form of a cluster, consuming the row (a list moves its fields instead of copying
/// them).
pub fn cluster_short(mut c: ClusterRow, s: &NgSummary, base: &str, mv: Version) -> ClusterSummary {
    take_summary(&mut c, s, base, mv)
}

/// The short form, its fields taken out of the row (what the full form adds stays in it).
fn take_summary(c: &mut ClusterRow, s: &NgSummary, base: &str, mv: Version) -> ClusterSummary {
    let (stack_id, cluster_id) = stack_keys(c, mv);
    ClusterSummary {
        uuid: c.uuid,
        name: c.name.take(),
        cluster_template_id: c.cluster_template_id,
        keypair: c.keypair.take(),
        node_count: s.node_count,
        master_count: s.master_count,
        docker_volume_size: c.docker_volume_size,
        labels: std::mem::take(&mut c.labels.0),
        master_flavor_id: c.master_flavor_id.take(),
        flavor_id: c.flavor_id.take(),
        create_timeout: c.create_timeout,
        links: links(base, &format!("clusters/{}", c.uuid)),
        stack_id,
        cluster_id,
        status: std::mem::take(&mut c.status),
        health_status: c.health_status.take(),
        merge_labels: false,
    }
}

/// The full form (`GET /v1/clusters/{id}`, `/detail`): the short form and the rest.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Cluster {
    #[serde(flatten)]
    pub summary: ClusterSummary,
    pub status_reason: Option<String>,
    /// What the health monitor found (`api`, `<node>.Ready`, `credential`), as strings.
    #[schema(value_type = HashMap<String, String>)]
    pub health_status_reason: Value,
    pub discovery_url: Option<String>,
    pub api_address: Option<String>,
    pub coe_version: Option<String>,
    pub container_version: Option<String>,
    pub project_id: String,
    pub user_id: String,
    pub node_addresses: Vec<String>,
    pub master_addresses: Vec<String>,
    /// Failed nodegroup → its reason; only on clusters in a `*_FAILED` status.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<HashMap<String, Option<String>>>)]
    pub faults: Option<Map<String, Value>>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub floating_ip_enabled: Option<bool>,
    /// Labels whose value differs from the template's.
    #[schema(value_type = HashMap<String, String>)]
    pub labels_overridden: Labels,
    /// Labels the template does not have.
    #[schema(value_type = HashMap<String, String>)]
    pub labels_added: Labels,
    /// Template labels the cluster does not have.
    #[schema(value_type = HashMap<String, String>)]
    pub labels_skipped: Labels,
    pub master_lb_enabled: Option<bool>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
    /// Admins only, with several management clusters: the one the cluster was placed on
    /// (not part of Magnum's API; absent for everyone else).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub management_cluster: Option<String>,
}

pub fn cluster_full(
    c: &ClusterRow,
    s: &NgSummary,
    parent: &Labels,
    base: &str,
    mv: Version,
) -> Cluster {
    cluster_full_owned(c.clone(), s.clone(), parent, base, mv)
}

/// [`cluster_full`] consuming the row and the summary (a list moves their fields).
pub fn cluster_full_owned(
    mut c: ClusterRow,
    s: NgSummary,
    parent: &Labels,
    base: &str,
    mv: Version,
) -> Cluster {
    let failed = c.status.parse::<Status>().is_ok_and(Status::is_failed);
    let d = labels::diff(parent, &c.labels.0);
    let summary = take_summary(&mut c, &s, base, mv);
    Cluster {
        summary,
        status_reason: c.status_reason,
        health_status_reason: c.health_status_reason.0,
        discovery_url: c.discovery_url,
        api_address: c.api_address,
        coe_version: c.coe_version,
        container_version: c.container_version,
        project_id: c.project_id,
        user_id: c.user_id,
        node_addresses: s.node_addresses,
        master_addresses: s.master_addresses,
        faults: failed.then_some(s.faults),
        fixed_network: c.fixed_network,
        fixed_subnet: c.fixed_subnet,
        floating_ip_enabled: c.floating_ip_enabled,
        labels_overridden: d.overridden,
        labels_added: d.added,
        labels_skipped: d.skipped,
        master_lb_enabled: c.master_lb_enabled,
        created_at: ts(&c.created_at),
        updated_at: ts_opt(&c.updated_at),
        management_cluster: None,
    }
}

// `cluster_entry`, `ClusterEntry` and `ClusterList` are what a page is from its rows through the
// typed views as serde writes them: the pages themselves are concatenations of stored views
// (`stored_views`), and these are the reference tests/it/stored_views.rs holds them to byte for
// byte (kept for that: a reference that shares no code with the splicing it checks).

/// A cluster of a page as the statement returned it (nodegroups aggregated in SQL): the short
/// form, or with `detail` the full one against its template's labels — without `faults`, which
/// Magnum adds to its show only (the real Magnum's detail list has none: tests/it/import_magnum.rs).
pub fn cluster_entry(
    row: ClusterWithNodes,
    detail: bool,
    caller_is_admin: bool,
    base: &str,
    mv: Version,
) -> ClusterEntry {
    if detail {
        let mut full = cluster_aggregated(row, caller_is_admin, base, mv);
        full.faults = None;
        ClusterEntry::Detail(Box::new(full))
    } else {
        let (c, s, _) = split_aggregated(row);
        ClusterEntry::Summary(Box::new(cluster_short(c, &s, base, mv)))
    }
}

/// The full form of a cluster fetched with its nodegroups' aggregates.
/// Admins (`caller_is_admin`) also see its management cluster.
pub fn cluster_aggregated(
    row: ClusterWithNodes,
    caller_is_admin: bool,
    base: &str,
    mv: Version,
) -> Cluster {
    let (c, s, parent) = split_aggregated(row);
    let placed = if caller_is_admin {
        c.management_cluster.clone()
    } else {
        None
    };
    let mut view = cluster_full_owned(c, s, &parent, base, mv);
    view.management_cluster = placed;
    view
}

fn split_aggregated(row: ClusterWithNodes) -> (ClusterRow, NgSummary, Labels) {
    let flat = |v: Vec<Vec<String>>| v.into_iter().flatten().collect();
    let s = NgSummary {
        node_count: row.ng_node_count,
        master_count: row.ng_master_count,
        node_addresses: flat(row.ng_node_addresses.0),
        master_addresses: flat(row.ng_master_addresses.0),
        faults: row
            .ng_faults
            .0
            .into_iter()
            .map(|(name, reason)| (name, reason.map_or(Value::Null, Value::String)))
            .collect(),
    };
    let parent = row.template_labels.map(|l| l.0).unwrap_or_default();
    (row.cluster, s, parent)
}

/// One cluster of a list: the short form (`/v1/clusters`) or the full one (`/detail`).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ClusterEntry {
    Summary(Box<ClusterSummary>),
    Detail(Box<Cluster>),
}

/// `GET /v1/clusters` and `/detail`: summaries or full clusters.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterList {
    pub clusters: Vec<ClusterEntry>,
    /// The next page, when this one is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// The schema of `GET /v1/clusters`' [`ClusterList`].
#[derive(ToSchema)]
#[expect(dead_code, reason = "a schema only: the list is a ClusterList")]
pub struct ClusterSummaryList {
    clusters: Vec<ClusterSummary>,
    /// The next page, when this one is full.
    next: Option<String>,
}

/// The schema of `GET /v1/clusters/detail`'s [`ClusterList`].
#[derive(ToSchema)]
#[expect(dead_code, reason = "a schema only: the list is a ClusterList")]
pub struct ClusterDetailList {
    clusters: Vec<Cluster>,
    /// The next page, when this one is full.
    next: Option<String>,
}

fn ng_links(base: &str, ng: &NodegroupRow) -> Vec<Link> {
    links(
        base,
        &format!("clusters/{}/nodegroups/{}", ng.cluster_id, ng.uuid),
    )
}

/// Nodegroup list item.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeGroupSummary {
    pub uuid: Uuid,
    pub name: String,
    pub flavor_id: Option<String>,
    pub image_id: Option<String>,
    pub node_count: i32,
    pub role: String,
    /// Always 0 in list items (Magnum re-emits the default).
    pub min_node_count: i32,
    /// Always null in list items (Magnum re-emits the default).
    pub max_node_count: Option<i32>,
    pub is_default: bool,
    pub stack_id: Option<String>,
    pub status: Option<String>,
    /// Always false in views (a create-time flag).
    pub merge_labels: bool,
}

pub fn nodegroup_short(ng: &NodegroupRow) -> NodeGroupSummary {
    NodeGroupSummary {
        uuid: ng.uuid,
        name: ng.name.clone(),
        flavor_id: ng.flavor_id.clone(),
        image_id: ng.image_id.clone(),
        node_count: ng.node_count,
        role: ng.role.clone(),
        // Magnum's list items carry only their own fields, and WSME re-emits the defaults of
        // these two whatever the nodegroup's values (the real Magnum's answers:
        // tests/it/import_magnum.rs).
        min_node_count: 0,
        max_node_count: None,
        is_default: ng.is_default,
        stack_id: ng.stack_id.clone(),
        status: ng.status.clone(),
        merge_labels: false,
    }
}

/// `GET /v1/clusters/{ident}/nodegroups`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeGroupList {
    pub nodegroups: Vec<NodeGroupSummary>,
    /// The next page, when this one is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A Kubernetes taint of a nodegroup's nodes.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// Nodegroup GET/POST/PATCH body; label diffs against the cluster's labels.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeGroup {
    pub id: i64,
    pub uuid: Uuid,
    pub name: String,
    pub cluster_id: Uuid,
    pub project_id: String,
    pub docker_volume_size: Option<i32>,
    #[schema(value_type = HashMap<String, String>)]
    pub labels: Labels,
    /// Labels whose value differs from the cluster's.
    #[schema(value_type = HashMap<String, String>)]
    pub labels_overridden: Labels,
    /// Labels the cluster does not have.
    #[schema(value_type = HashMap<String, String>)]
    pub labels_added: Labels,
    /// Cluster labels the nodegroup does not have.
    #[schema(value_type = HashMap<String, String>)]
    pub labels_skipped: Labels,
    pub links: Vec<Link>,
    pub flavor_id: Option<String>,
    pub image_id: Option<String>,
    pub node_addresses: Vec<String>,
    pub node_count: i32,
    pub role: String,
    pub min_node_count: i32,
    pub max_node_count: Option<i32>,
    pub is_default: bool,
    pub stack_id: Option<String>,
    pub status: Option<String>,
    pub status_reason: Option<String>,
    pub version: Option<String>,
    /// Kubernetes labels of the nodes.
    #[schema(value_type = Option<HashMap<String, String>>)]
    pub node_labels: Option<Value>,
    #[schema(value_type = Option<Vec<Taint>>)]
    pub node_taints: Option<Value>,
    /// Always false in views (a create-time flag).
    pub merge_labels: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
}

pub fn nodegroup_full(ng: &NodegroupRow, cluster_labels: &Labels, base: &str) -> NodeGroup {
    let d = labels::diff(cluster_labels, &ng.labels.0);
    NodeGroup {
        id: ng.id,
        uuid: ng.uuid,
        name: ng.name.clone(),
        cluster_id: ng.cluster_id,
        project_id: ng.project_id.clone(),
        docker_volume_size: ng.docker_volume_size,
        labels: ng.labels.0.clone(),
        labels_overridden: d.overridden,
        labels_added: d.added,
        labels_skipped: d.skipped,
        links: ng_links(base, ng),
        flavor_id: ng.flavor_id.clone(),
        image_id: ng.image_id.clone(),
        node_addresses: ng.node_addresses.0.clone(),
        node_count: ng.node_count,
        role: ng.role.clone(),
        min_node_count: ng.min_node_count,
        max_node_count: ng.max_node_count,
        is_default: ng.is_default,
        stack_id: ng.stack_id.clone(),
        status: ng.status.clone(),
        status_reason: ng.status_reason.clone(),
        version: ng.version.clone(),
        node_labels: ng.node_labels.as_ref().map(|j| j.0.clone()),
        node_taints: ng.node_taints.as_ref().map(|j| j.0.clone()),
        merge_labels: false,
        created_at: ts(&ng.created_at),
        updated_at: ts_opt(&ng.updated_at),
    }
}

/// A project's limit of one resource. A project without a stored quota is shown with the
/// configured default and without `id`, `created_at` and `updated_at`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Quota {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub hard_limit: i64,
    pub project_id: String,
    /// `Cluster`.
    pub resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub updated_at: Option<Option<String>>,
}

pub fn quota(q: &QuotaRow) -> Quota {
    Quota {
        id: Some(q.id),
        hard_limit: i64::from(q.hard_limit),
        project_id: q.project_id.clone(),
        resource: q.resource.clone(),
        created_at: Some(ts(&q.created_at)),
        updated_at: Some(ts_opt(&q.updated_at)),
    }
}

/// Magnum's synthesized `Quota(project_id=…, hard_limit=…)` of a project without one: `resource`
/// is the type's default, whatever the URL named.
pub fn default_quota(project_id: &str, hard_limit: i64) -> Quota {
    Quota {
        id: None,
        hard_limit,
        project_id: project_id.into(),
        resource: "Cluster".into(),
        created_at: None,
        updated_at: None,
    }
}

/// `GET /v1/quotas`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QuotaList {
    pub quotas: Vec<Quota>,
    /// The next page, when this one is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A replica of this service.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MService {
    pub host: String,
    pub binary: String,
    /// `up` or `down`.
    pub state: String,
    pub id: i64,
    pub report_count: i32,
    pub disabled: bool,
    pub disabled_reason: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
}

pub fn service(s: &ServiceRow, now: DateTime<Utc>, down_after_secs: i64) -> MService {
    let last = s.last_seen_up.or(s.updated_at).unwrap_or(s.created_at);
    let up = !s.forced_down && (now - last).num_seconds() <= down_after_secs;
    MService {
        host: s.host.clone(),
        binary: s.binary.clone(),
        state: if up { "up" } else { "down" }.into(),
        id: s.id,
        report_count: s.report_count,
        disabled: s.disabled,
        disabled_reason: s.disabled_reason.clone(),
        created_at: ts(&s.created_at),
        updated_at: ts_opt(&s.updated_at),
    }
}

/// `GET /v1/mservices`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MServiceList {
    pub mservices: Vec<MService>,
}

/// `GET /v1/stats`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Stats {
    pub clusters: i64,
    pub nodes: i64,
}

/// A cluster's CA certificate (`GET /v1/certificates/{cluster}`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Certificate {
    pub cluster_uuid: Uuid,
    /// PEM.
    pub pem: String,
    pub links: Vec<Link>,
}

/// A signed client certificate (`POST /v1/certificates`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SignedCertificate {
    pub cluster_uuid: Uuid,
    /// The request's CSR (PEM).
    pub csr: String,
    /// The certificate (PEM).
    pub pem: String,
    pub links: Vec<Link>,
    /// As sent, when sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_cert_type: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    #[test]
    fn timestamps_carry_an_explicit_offset() {
        let t = Utc.with_ymd_and_hms(2016, 8, 29, 6, 51, 31).unwrap();
        assert_eq!(ts(&t), "2016-08-29T06:51:31+00:00");
    }

    #[test]
    fn links_are_self_and_bookmark() {
        assert_eq!(
            serde_json::to_value(links("http://h:9511", "clusters/x")).unwrap(),
            json!([{"href": "http://h:9511/v1/clusters/x", "rel": "self"},
                   {"href": "http://h:9511/clusters/x", "rel": "bookmark"}])
        );
    }

    #[test]
    fn the_default_quota_has_no_id_and_no_timestamps() {
        assert_eq!(
            serde_json::to_value(default_quota("p", 20)).unwrap(),
            json!({"hard_limit": 20, "project_id": "p", "resource": "Cluster"})
        );
    }
}
