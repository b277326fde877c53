//! Nodegroup use cases (API ≥ 1.9): list, show, create, patch, delete.

use bytes::Bytes;
use serde_json::{Value, json};
use sqlx::types::Json;
use uuid::Uuid;

use super::clusters::{find_nodegroup, nodegroup_ident, one_nodegroup};
use super::{
    Error, Result, authorize_target, begin_operation, cluster_scope, cluster_target, find_cluster,
    lock_cluster, parse_uuid, views,
};
use crate::app::App;
use crate::db::Violation;
use crate::db::clusters::ClusterRow;
use crate::db::nodegroups::{self as ndb, NgIdent, NodegroupRow};
use crate::db::operations::NewOperation;
use crate::db::templates as tdb;
use crate::domain::error::DomainError;
use crate::domain::fields::Body;
use crate::domain::labels;
use crate::domain::listing::ListQuery;
use crate::domain::nodegroup_rules as rules;
use crate::domain::operation::OperationKind;
use crate::domain::policy::{self, Caller, Target};
use crate::domain::spec::{ObjectsAt, Template};
use crate::domain::status::Status;
use crate::domain::{names, patch, schemas};
use crate::openstack::UserSession;
use crate::view_cache::{Owner, Unreused};

/// The columns a nodegroup list may be sorted by.
pub use crate::db::nodegroups::SORT_KEYS;

fn ng_project(caller: &Caller) -> Option<&str> {
    if caller.is_admin() {
        None
    } else {
        Some(caller.project_id.as_str())
    }
}

pub async fn list_json(
    app: &App,
    caller: &Caller,
    cluster: &str,
    params: &ListQuery,
    role: Option<&str>,
    base: &str,
) -> Result<Bytes> {
    let scope = cluster_scope(caller, true);
    // Debug-quoted strings: no two requests can spell the same key.
    let key = || format!("nodegroups {scope:?} {base:?} {cluster:?} {params:?} {role:?}");
    cluster_view(app, caller, "nodegroup:get_all", key, || async {
        let rule = "nodegroup:get_all";
        let project = ng_project(caller);
        let (uuid, rows, owner) = match (parse_uuid(cluster), params.marker) {
            // The cluster's owner and its page in one statement.
            (Some(uuid), None) => {
                let page = super::page(params, None);
                let of = ndb::list_of_cluster(&app.reads, &scope, uuid, project, role, &page)
                    .await?
                    .ok_or_else(|| DomainError::cluster_not_found(cluster))?;
                let (owner, _, nodegroups) = allowed_of(caller, rule, of)?;
                (uuid, nodegroups, owner)
            }
            _ => {
                let c = find_cluster(app, &scope, cluster).await?;
                let owner = allowed(caller, rule, owner_of(&c))?;
                let rows = list(app, &c, project, params, role).await?;
                (c.uuid, rows, owner)
            }
        };
        let path = format!("clusters/{uuid}/nodegroups");
        let next = params.next_if_full(rows.len(), || {
            rows.last()
                .map(|n| params.next_url(base, &path, &n.uuid.to_string()))
        });
        let list = views::NodeGroupList {
            nodegroups: rows.iter().map(views::nodegroup_short).collect(),
            next,
        };
        Ok((serde_json::to_vec(&list)?, owner))
    })
    .await
}

/// Show: the nodegroup (by integer id, uuid or name) of a cluster, serialised, and reused while
/// nothing under it changed (`view_cache`).
pub async fn show_json(
    app: &App,
    caller: &Caller,
    cluster: &str,
    ident: &str,
    base: &str,
) -> Result<Bytes> {
    let scope = cluster_scope(caller, true);
    let key = || format!("nodegroup {scope:?} {base:?} {cluster:?} {ident:?}");
    cluster_view(app, caller, "nodegroup:get", key, || async {
        let rule = "nodegroup:get";
        let project = ng_project(caller);
        let (ng, labels, owner) = match parse_uuid(cluster) {
            // The cluster's owner and labels and the nodegroup in one statement.
            Some(uuid) => {
                let named = nodegroup_ident(ident);
                let of = ndb::find_of_cluster(&app.reads, &scope, uuid, project, &named)
                    .await?
                    .ok_or_else(|| DomainError::cluster_not_found(cluster))?;
                let (owner, labels, nodegroups) = allowed_of(caller, rule, of)?;
                (one_nodegroup(nodegroups, ident)?, labels, owner)
            }
            None => {
                let c = find_cluster(app, &scope, cluster).await?;
                let owner = allowed(caller, rule, owner_of(&c))?;
                let ng = find_nodegroup(app, &c, project, ident).await?;
                (ng, c.labels, owner)
            }
        };
        let view = views::nodegroup_full(&ng, &labels.0, base);
        Ok((serde_json::to_vec(&view)?, owner))
    })
    .await
}

fn owner_of(c: &ClusterRow) -> Owner {
    Owner {
        project_id: c.project_id.clone(),
        user_id: c.user_id.clone(),
    }
}

/// The owner, labels and nodegroups a nodegroup read found, once `rule` allows the caller
/// their cluster.
fn allowed_of(
    caller: &Caller,
    rule: &str,
    of: ndb::OfCluster,
) -> Result<(Owner, Json<labels::Labels>, Vec<NodegroupRow>)> {
    let owner = Owner {
        project_id: of.project_id,
        user_id: of.user_id,
    };
    Ok((allowed(caller, rule, owner)?, of.labels, of.nodegroups))
}

/// `owner`, once `rule` allows the caller the cluster it owns.
fn allowed(caller: &Caller, rule: &str, owner: Owner) -> Result<Owner> {
    authorize_target(
        caller,
        rule,
        Target {
            project_id: &owner.project_id,
            user_id: &owner.user_id,
        },
    )?;
    Ok(owner)
}

/// A view of (something of) one cluster: stored under the key `key` makes (only when views are
/// reused), else the one `build` makes with the owner of the cluster it read (once allowed to
/// the caller). The owner travels with the body, so a reuse is authorised by `rule` like the
/// first read.
async fn cluster_view<F, Fut>(
    app: &App,
    caller: &Caller,
    rule: &str,
    key: impl FnOnce() -> String,
    build: F,
) -> Result<Bytes>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<u8>, Owner)>>,
{
    // Without reuse each request builds its own, as before views were stored.
    let (body, owner) = super::cached_view(app, key, Unreused::Own, || async {
        let (body, owner) = build().await?;
        Ok((Bytes::from(body), Some(owner)))
    })
    .await?;
    let owner = owner.ok_or(Error::Invariant(
        "a nodegroup view without its cluster's owner",
    ))?;
    allowed(caller, rule, owner)?;
    Ok(body)
}

/// A page of cluster `c`'s nodegroups visible to `project`, optionally by `role`, after the
/// page's marker (a nodegroup of `c`).
async fn list(
    app: &App,
    c: &ClusterRow,
    project: Option<&str>,
    params: &ListQuery,
    role: Option<&str>,
) -> Result<Vec<NodegroupRow>> {
    let marker_id = match params.marker {
        Some(m) => Some(
            ndb::find(&app.reads, c.uuid, project, &NgIdent::Uuid(m))
                .await?
                .first()
                .ok_or_else(|| DomainError::nodegroup_not_found(&m.to_string()))?
                .id,
        ),
        None => None,
    };
    Ok(ndb::list(
        &app.reads,
        c.uuid,
        project,
        role,
        &super::page(params, marker_id),
    )
    .await?)
}

/// The operation of a nodegroup request on cluster `c`.
fn nodegroup_op<'a>(
    c: &ClusterRow,
    nodegroup: Uuid,
    kind: OperationKind,
    request_id: &'a str,
) -> NewOperation<'a> {
    NewOperation {
        cluster_uuid: c.uuid,
        nodegroup_uuid: Some(nodegroup),
        kind,
        payload: json!({}),
        request_id: Some(request_id),
    }
}

pub async fn create(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    cluster: &str,
    body: &Value,
    request_id: &str,
) -> Result<(NodegroupRow, ClusterRow)> {
    let b = schemas::NODEGROUP.parse_body(body)?;
    let c = find_cluster(app, &cluster_scope(caller, false), cluster).await?;
    policy::enforce("nodegroup:create", caller, Some(cluster_target(&c)))?;
    let at = super::refuse_if_read_only_at(app, &c, "nodegroup").await?;
    super::credentials::rotate_if_unusable(app, caller, cloud, &c, request_id).await;
    if c.api_address.is_none() {
        return Err(
            DomainError::Conflict("Cluster API address is not available yet".into()).into(),
        );
    }
    let role = b.str("role").unwrap_or_else(|| "worker".into());
    let name = b
        .str("name")
        .unwrap_or_else(|| names::generate("nodegroup"));
    if role == "master" {
        if b.get("node_labels").is_some() || b.get("node_taints").is_some() {
            return Err(invalid_master(&name).into());
        }
        return Err(DomainError::BadRequest(
            "Creating master nodegroups is currently not supported.".into(),
        )
        .into());
    }
    let node_count = b.int("node_count").unwrap_or(1);
    let min = b.int("min_node_count").unwrap_or(0);
    let max = b.int("max_node_count");
    rules::check_counts(&name, node_count, min, max)?;
    rules::check_node_labels(&name, b.get("node_labels"))?;
    rules::check_node_taints(&name, b.get("node_taints"))?;
    let ct = tdb::by_uuid(&app.pool, &tdb::Visibility::All, c.cluster_template_id).await?;
    let merged = labels::inherit(
        &c.labels.0,
        b.labels("labels"),
        b.bool("merge_labels").unwrap_or(false),
    );
    let to_i32 = |v: i64, f: &str| {
        i32::try_from(v)
            .map_err(|_| DomainError::invalid_field(f, &v.to_string(), "Value is too large"))
    };
    let ng = NodegroupRow {
        id: 0,
        uuid: Uuid::new_v4(),
        name: name.clone(),
        cluster_id: c.uuid,
        project_id: c.project_id.clone(),
        docker_volume_size: b
            .int("docker_volume_size")
            .and_then(|v| i32::try_from(v).ok())
            .or(c.docker_volume_size),
        labels: Json(merged),
        flavor_id: b.str("flavor_id").or_else(|| c.flavor_id.clone()),
        image_id: b
            .str("image_id")
            .or_else(|| ct.as_ref().and_then(|t| t.image_id.clone())),
        node_addresses: Json(vec![]),
        node_count: to_i32(node_count, "node_count")?,
        role,
        max_node_count: max.map(|m| to_i32(m, "max_node_count")).transpose()?,
        min_node_count: to_i32(min, "min_node_count")?,
        is_default: false,
        stack_id: None,
        status: Some(Status::CreateInProgress.as_str().into()),
        status_reason: None,
        version: None,
        node_labels: b.get("node_labels").cloned().map(Json),
        node_taints: b.get("node_taints").cloned().map(Json),
        created_at: chrono::Utc::now(),
        updated_at: None,
    };
    if let Some(t) = &ct {
        // The new nodegroup's labels (server group policy, autoscaling bounds, …) are refused
        // now if bad.
        let mut all = ndb::of_cluster(&app.pool, c.uuid).await?;
        all.push(NodegroupRow {
            id: i64::MAX,
            ..ng.clone()
        });
        validate(app, &c, at, t.clone(), &all, ng.uuid)?;
    }
    let op = nodegroup_op(&c, ng.uuid, OperationKind::NodegroupCreate, request_id);
    let (op, ng, name, ident) = (&op, &ng, &name, &c.uuid.to_string());
    let inserted = crate::db::retry(|| async move {
        let (mut tx, _) = lock_cluster(app, op.cluster_uuid, ident).await?;
        let inserted = ndb::insert(&mut *tx, ng)
            .await
            .map_err(|e| match e.violation() {
                Some(Violation::NodegroupName) => DomainError::Conflict(format!(
                    "A node group with name {name} already exists in the cluster {ident}."
                ))
                .into(),
                _ => Error::from(e),
            })?;
        begin_operation(app, tx, Status::UpdateInProgress, op).await?;
        Ok::<_, Error>(inserted)
    })
    .await?;
    Ok((inserted, c))
}

/// Whether the backend can build cluster `c` with `all` its nodegroups, `nodegroup` new or
/// changed among them; for a cluster adopted from Magnum (its driver's objects `at`, as
/// [`super::refuse_if_read_only_at`] found them), whether that nodegroup can be written beside
/// them (nothing else of it is rendered here).
fn validate(
    app: &App,
    c: &ClusterRow,
    at: Option<ObjectsAt>,
    t: tdb::TemplateRow,
    all: &[NodegroupRow],
    nodegroup: Uuid,
) -> Result<()> {
    let (mut cluster, all) = crate::db::spec::cluster_and_nodegroups(c, all);
    cluster.objects_at = at;
    if cluster.objects_at.is_some() {
        app.backend
            .validate_adopted_nodegroup(&cluster, &all, nodegroup)?;
    } else {
        app.backend
            .validate_cluster(&Template::from(t), &cluster, &all)?;
    }
    Ok(())
}

fn invalid_master(name: &str) -> DomainError {
    DomainError::Conflict(format!(
        "node_labels for {name} is invalid (node labels and taints are not supported for master nodegroups)."
    ))
}

#[allow(clippy::too_many_arguments)] // one per request part; a struct would only rename them
pub async fn update(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    cluster: &str,
    ident: &str,
    body: &Value,
    request_id: &str,
) -> Result<(NodegroupRow, ClusterRow)> {
    // Extension (off by default): `/flavor_id` replaced rolls the nodegroup's machines.
    let rules = if app.config.upgrades.nodegroup_flavor_change {
        &schemas::NODEGROUP_PATCH_FLAVOR
    } else {
        &schemas::NODEGROUP_PATCH
    };
    let ops = patch::parse(body, rules)?;
    let c = find_cluster(app, &cluster_scope(caller, false), cluster).await?;
    policy::enforce("nodegroup:update", caller, Some(cluster_target(&c)))?;
    let at = super::refuse_if_read_only_at(app, &c, "nodegroup").await?;
    super::credentials::rotate_if_unusable(app, caller, cloud, &c, request_id).await;
    let ng = find_nodegroup(app, &c, ng_project(caller), ident).await?;
    let doc = views::document(&views::nodegroup_full(&ng, &c.labels.0, ""));
    let patched = patch::apply(&doc, &ops, rules)?;
    let after = Body(schemas::NODEGROUP.revalidate(&patched)?);
    let min = after.int("min_node_count").unwrap_or(0);
    let max = after.int("max_node_count");
    rules::check_counts(&ng.name, i64::from(ng.node_count), min, max)?;
    let node_labels = after.get("node_labels").cloned();
    let node_taints = after.get("node_taints").cloned();
    if ng.is_master() && (node_labels.is_some() || node_taints.is_some()) {
        return Err(invalid_master(&ng.name).into());
    }
    rules::check_node_labels(&ng.name, node_labels.as_ref())?;
    rules::check_node_taints(&ng.name, node_taints.as_ref())?;
    let mut updated = ng.clone();
    updated.min_node_count = i32::try_from(min).unwrap_or(i32::MAX);
    updated.max_node_count = max.map(|m| i32::try_from(m).unwrap_or(i32::MAX));
    updated.node_labels = node_labels.map(Json);
    updated.node_taints = node_taints.map(Json);
    if let Some(f) = after
        .str("flavor_id")
        .filter(|f| ng.flavor_id.as_ref() != Some(f))
    {
        updated.flavor_id = Some(new_flavor(app, cloud, &ng, &f).await?);
    }
    if updated == ng {
        return Ok((ng, c));
    }
    // New bounds the driver cannot build (autoscaling without a maximum) are refused now.
    if let Some(t) = tdb::by_uuid(&app.pool, &tdb::Visibility::All, c.cluster_template_id).await? {
        let mut all = ndb::of_cluster(&app.pool, c.uuid).await?;
        for n in all.iter_mut().filter(|n| n.uuid == updated.uuid) {
            n.clone_from(&updated);
        }
        validate(app, &c, at, t, &all, updated.uuid)?;
    }
    let allowed = ng
        .status
        .as_deref()
        .and_then(|s| s.parse::<Status>().ok())
        .is_some_and(Status::allows_nodegroup_update);
    if !allowed {
        // Magnum's conductor ignores updates of a nodegroup in other states; the API still says 202.
        // Like Magnum, the response still shows the patched (unsaved) nodegroup.
        tracing::warn!(nodegroup = %ng.uuid, status = ?ng.status, "nodegroup update ignored in this status");
        return Ok((updated, c));
    }
    let op = nodegroup_op(&c, ng.uuid, OperationKind::NodegroupUpdate, request_id);
    let (op, updated_ref, ident, uuid) = (&op, &updated, &c.uuid.to_string(), ng.uuid);
    let recorded = crate::db::retry(|| async move {
        let (mut tx, _) = lock_cluster(app, op.cluster_uuid, ident).await?;
        // The nodegroup as it is now (the cluster's lock serialises every writer of it).
        let allowed = ndb::status_of(&mut *tx, uuid)
            .await?
            .and_then(|s| s.parse::<Status>().ok())
            .is_some_and(Status::allows_nodegroup_update);
        if !allowed {
            return Ok(None);
        }
        ndb::update_spec(&mut *tx, updated_ref).await?;
        ndb::set_status(&mut *tx, uuid, Status::UpdateInProgress.as_str(), None).await?;
        begin_operation(app, tx, Status::UpdateInProgress, op).await?;
        Ok::<_, Error>(Some(()))
    })
    .await?;
    if recorded.is_none() {
        tracing::warn!(nodegroup = %ng.uuid, "nodegroup update ignored: its status changed meanwhile");
        return Ok((updated, c));
    }
    let fresh = find_nodegroup(app, &c, None, &ng.uuid.to_string()).await?;
    Ok((fresh, c))
}

/// The flavor a nodegroup's machines are replaced with (`/flavor_id` replaced): checked in Nova
/// as at create (it exists; it has a root disk unless the machines boot from a volume) and kept
/// by its name, which the machine templates name.
async fn new_flavor(
    app: &App,
    cloud: Option<&UserSession>,
    ng: &NodegroupRow,
    flavor: &str,
) -> Result<String> {
    let Some(s) = cloud else {
        return Ok(flavor.to_string()); // no catalog to look in (development identity)
    };
    let flavors = super::cloud::Flavors::fetch(s).await?;
    let boot = super::cloud::boot_volume_size(
        &ng.labels.0,
        app.config.openstack.default_boot_volume_size,
    )?;
    let id = flavors.check(flavor, boot)?;
    Ok(flavors.name(&id).unwrap_or(flavor).to_string())
}

pub async fn delete(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    cluster: &str,
    ident: &str,
    request_id: &str,
) -> Result<()> {
    let c = find_cluster(app, &cluster_scope(caller, false), cluster).await?;
    policy::enforce("nodegroup:delete", caller, Some(cluster_target(&c)))?;
    super::refuse_if_read_only(app, &c, "nodegroup").await?;
    super::credentials::rotate_if_unusable(app, caller, cloud, &c, request_id).await;
    let ng = find_nodegroup(app, &c, ng_project(caller), ident).await?;
    if ng.is_default {
        return Err(DomainError::BadRequest(
            "Deleting a default nodegroup is not supported.".into(),
        )
        .into());
    }
    if ng.status.as_deref() == Some(Status::DeleteInProgress.as_str()) {
        return Ok(());
    }
    let op = nodegroup_op(&c, ng.uuid, OperationKind::NodegroupDelete, request_id);
    let (op, ident, uuid) = (&op, &c.uuid.to_string(), ng.uuid);
    crate::db::retry(|| async move {
        let (mut tx, _) = lock_cluster(app, op.cluster_uuid, ident).await?;
        // Gone, or already being deleted, since it was read: one operation is enough.
        let now = ndb::status_of(&mut *tx, uuid).await?;
        if now.is_none_or(|s| s == Status::DeleteInProgress.as_str()) {
            return Ok(());
        }
        ndb::set_status(&mut *tx, uuid, Status::DeleteInProgress.as_str(), None).await?;
        begin_operation(app, tx, Status::UpdateInProgress, op).await
    })
    .await
}
