//! The views of every resource (what the API returns), field for field and in Magnum's order:
//! full and short forms, links, RFC 3339 timestamps with offset, version-dependent fields.

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::db::clusters::ClusterRow;
use crate::db::nodegroups::NodegroupRow;
use crate::db::quotas::QuotaRow;
use crate::db::services::ServiceRow;
use crate::db::templates::TemplateRow;
use crate::domain::labels::{self, Labels};
use crate::domain::status::Status;
use crate::domain::version::Version;

pub fn ts(t: &DateTime<Utc>) -> Value {
    Value::String(t.to_rfc3339_opts(SecondsFormat::Secs, false))
}

pub fn ts_opt(t: &Option<DateTime<Utc>>) -> Value {
    t.as_ref().map(ts).unwrap_or(Value::Null)
}

/// `[{self}, {bookmark}]` for `resource/id` under `base`.
pub fn links(base: &str, path: &str) -> Value {
    json!([
        {"href": format!("{base}/v1/{path}"), "rel": "self"},
        {"href": format!("{base}/{path}"), "rel": "bookmark"},
    ])
}

fn labels_json(l: &Labels) -> Value {
    Value::Object(
        l.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

pub fn template(t: &TemplateRow, base: &str) -> Value {
    json!({
        "uuid": t.uuid,
        "name": t.name,
        "coe": t.coe,
        "image_id": t.image_id,
        "flavor_id": t.flavor_id,
        "master_flavor_id": t.master_flavor_id,
        "dns_nameserver": t.dns_nameserver,
        "keypair_id": t.keypair_id,
        "external_network_id": t.external_network_id,
        "fixed_network": t.fixed_network,
        "fixed_subnet": t.fixed_subnet,
        "network_driver": t.network_driver,
        "apiserver_port": t.apiserver_port,
        "docker_volume_size": t.docker_volume_size,
        "cluster_distro": t.cluster_distro,
        "links": links(base, &format!("clustertemplates/{}", t.uuid)),
        "http_proxy": t.http_proxy,
        "https_proxy": t.https_proxy,
        "no_proxy": t.no_proxy,
        "volume_driver": t.volume_driver,
        "registry_enabled": t.registry_enabled,
        "labels": labels_json(&t.labels.0),
        "tls_disabled": t.tls_disabled,
        "public": t.public,
        "server_type": t.server_type,
        "insecure_registry": t.insecure_registry,
        "docker_storage_driver": t.docker_storage_driver,
        "master_lb_enabled": t.master_lb_enabled,
        "floating_ip_enabled": t.floating_ip_enabled,
        "project_id": t.project_id,
        "user_id": t.user_id,
        "hidden": t.hidden,
        "tags": t.tags,
        "driver": t.driver,
        "created_at": ts(&t.created_at),
        "updated_at": ts_opt(&t.updated_at),
    })
}

/// Aggregates of a cluster's nodegroups.
#[derive(Debug, Default)]
pub struct NgSummary {
    pub node_count: i64,
    pub master_count: i64,
    pub node_addresses: Vec<String>,
    pub master_addresses: Vec<String>,
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

/// Groups nodegroups by cluster uuid.
pub fn by_cluster(ngs: Vec<NodegroupRow>) -> HashMap<Uuid, Vec<NodegroupRow>> {
    let mut map: HashMap<Uuid, Vec<NodegroupRow>> = HashMap::new();
    for ng in ngs {
        map.entry(ng.cluster_id).or_default().push(ng);
    }
    map
}

fn put_stack_id(m: &mut Map<String, Value>, c: &ClusterRow, mv: Version) {
    let key = if mv.at_least(13) {
        "cluster_id"
    } else {
        "stack_id"
    };
    m.insert(key.into(), json!(c.stack_id));
}

/// The fields the short and the full cluster views share, in Magnum's order.
fn cluster_common(c: &ClusterRow, s: &NgSummary, base: &str, mv: Version) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("uuid".into(), json!(c.uuid));
    m.insert("name".into(), json!(c.name));
    m.insert("cluster_template_id".into(), json!(c.cluster_template_id));
    m.insert("keypair".into(), json!(c.keypair));
    m.insert("node_count".into(), json!(s.node_count));
    m.insert("master_count".into(), json!(s.master_count));
    m.insert("docker_volume_size".into(), json!(c.docker_volume_size));
    m.insert("labels".into(), labels_json(&c.labels.0));
    m.insert("master_flavor_id".into(), json!(c.master_flavor_id));
    m.insert("flavor_id".into(), json!(c.flavor_id));
    m.insert("create_timeout".into(), json!(c.create_timeout));
    m.insert("links".into(), links(base, &format!("clusters/{}", c.uuid)));
    put_stack_id(&mut m, c, mv);
    m.insert("status".into(), json!(c.status));
    m
}

/// The short form used by `GET /v1/clusters`.
pub fn cluster_short(c: &ClusterRow, s: &NgSummary, base: &str, mv: Version) -> Value {
    let mut m = cluster_common(c, s, base, mv);
    m.insert("health_status".into(), json!(c.health_status));
    m.insert("merge_labels".into(), json!(false));
    Value::Object(m)
}

/// The full form (`GET /v1/clusters/{id}`, `/detail`).
pub fn cluster_full(
    c: &ClusterRow,
    s: &NgSummary,
    parent: &Labels,
    base: &str,
    mv: Version,
) -> Value {
    let mut m = cluster_common(c, s, base, mv);
    m.insert("status_reason".into(), json!(c.status_reason));
    m.insert("health_status".into(), json!(c.health_status));
    m.insert(
        "health_status_reason".into(),
        c.health_status_reason.0.clone(),
    );
    m.insert("discovery_url".into(), json!(c.discovery_url));
    m.insert("api_address".into(), json!(c.api_address));
    m.insert("coe_version".into(), json!(c.coe_version));
    m.insert("container_version".into(), json!(c.container_version));
    m.insert("project_id".into(), json!(c.project_id));
    m.insert("user_id".into(), json!(c.user_id));
    m.insert("node_addresses".into(), json!(s.node_addresses));
    m.insert("master_addresses".into(), json!(s.master_addresses));
    let failed = c.status.parse::<Status>().is_ok_and(Status::is_failed);
    if failed {
        m.insert("faults".into(), Value::Object(s.faults.clone()));
    }
    m.insert("fixed_network".into(), json!(c.fixed_network));
    m.insert("fixed_subnet".into(), json!(c.fixed_subnet));
    m.insert("floating_ip_enabled".into(), json!(c.floating_ip_enabled));
    m.insert("merge_labels".into(), json!(false));
    let d = labels::diff(parent, &c.labels.0);
    m.insert("labels_overridden".into(), labels_json(&d.overridden));
    m.insert("labels_added".into(), labels_json(&d.added));
    m.insert("labels_skipped".into(), labels_json(&d.skipped));
    m.insert("master_lb_enabled".into(), json!(c.master_lb_enabled));
    m.insert("created_at".into(), ts(&c.created_at));
    m.insert("updated_at".into(), ts_opt(&c.updated_at));
    Value::Object(m)
}

fn ng_links(base: &str, ng: &NodegroupRow) -> Value {
    links(
        base,
        &format!("clusters/{}/nodegroups/{}", ng.cluster_id, ng.uuid),
    )
}

/// Nodegroup list item.
pub fn nodegroup_short(ng: &NodegroupRow) -> Value {
    json!({
        "uuid": ng.uuid,
        "name": ng.name,
        "flavor_id": ng.flavor_id,
        "image_id": ng.image_id,
        "node_count": ng.node_count,
        "role": ng.role,
        "min_node_count": ng.min_node_count,
        "max_node_count": ng.max_node_count,
        "is_default": ng.is_default,
        "stack_id": ng.stack_id,
        "status": ng.status,
        "merge_labels": false,
    })
}

/// Nodegroup GET/POST/PATCH body; label diffs against the cluster's labels.
pub fn nodegroup_full(ng: &NodegroupRow, cluster_labels: &Labels, base: &str) -> Value {
    let d = labels::diff(cluster_labels, &ng.labels.0);
    json!({
        "id": ng.id,
        "uuid": ng.uuid,
        "name": ng.name,
        "cluster_id": ng.cluster_id,
        "project_id": ng.project_id,
        "docker_volume_size": ng.docker_volume_size,
        "labels": labels_json(&ng.labels.0),
        "labels_overridden": labels_json(&d.overridden),
        "labels_added": labels_json(&d.added),
        "labels_skipped": labels_json(&d.skipped),
        "links": ng_links(base, ng),
        "flavor_id": ng.flavor_id,
        "image_id": ng.image_id,
        "node_addresses": ng.node_addresses.0,
        "node_count": ng.node_count,
        "role": ng.role,
        "min_node_count": ng.min_node_count,
        "max_node_count": ng.max_node_count,
        "is_default": ng.is_default,
        "stack_id": ng.stack_id,
        "status": ng.status,
        "status_reason": ng.status_reason,
        "version": ng.version,
        "node_labels": ng.node_labels.as_ref().map(|j| j.0.clone()),
        "node_taints": ng.node_taints.as_ref().map(|j| j.0.clone()),
        "merge_labels": false,
        "created_at": ts(&ng.created_at),
        "updated_at": ts_opt(&ng.updated_at),
    })
}

pub fn quota(q: &QuotaRow) -> Value {
    json!({
        "id": q.id,
        "hard_limit": q.hard_limit,
        "project_id": q.project_id,
        "resource": q.resource,
        "created_at": ts(&q.created_at),
        "updated_at": ts_opt(&q.updated_at),
    })
}

pub fn service(s: &ServiceRow, now: DateTime<Utc>, down_after_secs: i64) -> Value {
    let last = s.last_seen_up.or(s.updated_at).unwrap_or(s.created_at);
    let up = !s.forced_down && (now - last).num_seconds() <= down_after_secs;
    json!({
        "host": s.host,
        "binary": s.binary,
        "state": if up { "up" } else { "down" },
        "id": s.id,
        "report_count": s.report_count,
        "disabled": s.disabled,
        "disabled_reason": s.disabled_reason,
        "created_at": ts(&s.created_at),
        "updated_at": ts_opt(&s.updated_at),
    })
}

/// Appends the `next` link of a full page.
pub fn with_next(mut body: Map<String, Value>, next: Option<String>) -> Value {
    if let Some(url) = next {
        body.insert("next".into(), Value::String(url));
    }
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn timestamps_carry_an_explicit_offset() {
        let t = Utc.with_ymd_and_hms(2016, 8, 29, 6, 51, 31).unwrap();
        assert_eq!(ts(&t), json!("2016-08-29T06:51:31+00:00"));
    }

    #[test]
    fn links_are_self_and_bookmark() {
        assert_eq!(
            links("http://h:9511", "clusters/x"),
            json!([{"href": "http://h:9511/v1/clusters/x", "rel": "self"},
                   {"href": "http://h:9511/clusters/x", "rel": "bookmark"}])
        );
    }
}
