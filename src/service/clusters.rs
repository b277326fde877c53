//! Cluster use cases: create (rows + default nodegroups + operation in one transaction), show,
//! list, patch, delete, resize, upgrade.

use bytes::Bytes;
use serde_json::{Value, json};
use sqlx::types::Json;
use uuid::Uuid;

use super::stored_views::{self, Ask, Form};
use super::{
    Error, Result, authorize_cluster as authorize, authorize_target, begin_operation, cloud,
    cluster_scope, cluster_target as target, find_cluster, find_template, find_template_known,
    lock_cluster, template_visibility, views,
};
use crate::app::App;
use crate::db::Violation;
use crate::db::cluster_views as cvdb;
use crate::db::clusters::{self as cdb, ClusterRow, Scope};
use crate::db::creates::{self as crdb, Recorded};
use crate::db::nodegroups::{self as ndb, NgIdent, NodegroupRow};
use crate::db::operations::NewOperation;
use crate::db::operations::SEALED_TOKEN;
use crate::db::templates as tdb;
use crate::domain::error::DomainError;
use crate::domain::fields::Body;
use crate::domain::labels::Labels;
use crate::domain::listing::ListQuery;
use crate::domain::names::parse_uuid;
use crate::domain::new_cluster::{self, ClusterRequest};
use crate::domain::operation::OperationKind;
use crate::domain::policy::{self, Caller, Target};
use crate::domain::spec::Template;
use crate::domain::status::Status;
use crate::domain::version::{MIN_VERSION, Version};
use crate::domain::{patch, schemas};
use crate::openstack::UserSession;
use crate::view_cache::{Owner, Unreused};

/// The columns a cluster list may be sorted by.
pub use crate::db::clusters::SORT_KEYS;

fn zero_nodes_unsupported() -> DomainError {
    DomainError::BadRequest(
        "Resizing a nodegroup to zero is not supported in the provided microversion.".into(),
    )
}

/// The cluster's template is not found: a 404, a 400 before 1.10 (as in Magnum).
fn template_gone(mv: Version, ident: &str) -> Error {
    let e = DomainError::template_not_found(ident);
    if mv.at_least(10) {
        e.into()
    } else {
        DomainError::BadRequest(e.message().to_string()).into()
    }
}

fn upgrade_refused(status: &str) -> DomainError {
    DomainError::BadRequest(format!(
        "Upgrading a cluster when status is \"{status}\" is not supported."
    ))
}

/// An upgrade starts from a stable cluster, or retries (or rolls back) a failed update: Magnum
/// refuses `UPDATE_FAILED`, which strands a cluster whose upgrade failed.
fn allows_upgrade(s: Status) -> bool {
    s.is_stable_complete() || s == Status::UpdateFailed
}

fn status_of(c: &ClusterRow) -> Option<Status> {
    c.status.parse().ok()
}

pub async fn create(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    mv: Version,
    body: &Value,
    request_id: &str,
) -> Result<Uuid> {
    // First with the template as this replica knows it, confirmed beside the look-ups (or
    // before an error is answered) instead of a round trip before them; when it was not the
    // committed one (a change through another replica not received yet), again from a fresh read.
    let started = std::time::Instant::now();
    let asked = Asked {
        caller,
        cloud,
        mv,
        body,
        request_id,
    };
    let mut unconfirmed = None;
    match create_once(app, asked, Some(&mut unconfirmed)).await {
        Ok(Some(uuid)) => return Ok(uuid),
        Ok(None) => {}
        Err(e) => match unconfirmed {
            Some(g) if !app.views.template_generation_held(g).await => {}
            _ => return Err(e),
        },
    }
    next_stage("moved", started);
    create_once(app, asked, None).await?.ok_or(Error::Invariant(
        "a create reading its template fresh found it moved",
    ))
}

/// A create's request as [`create`] was called with it, for each of its tries.
#[derive(Clone, Copy)]
struct Asked<'a> {
    caller: &'a Caller,
    cloud: Option<&'a UserSession>,
    mv: Version,
    body: &'a Value,
    request_id: &'a str,
}

/// One try of [`create`]. With `assumed`, the template is the row this replica knows (its
/// generation, until confirmed, left in `assumed`), and `None` is answered, with nothing
/// recorded, when the check beside the look-ups finds it was not the committed one; without,
/// the template is read from PostgreSQL (after that check failed: fresh).
async fn create_once(
    app: &App,
    asked: Asked<'_>,
    mut assumed: Option<&mut Option<u64>>,
) -> Result<Option<Uuid>> {
    let Asked {
        caller,
        cloud,
        mv,
        body,
        request_id,
    } = asked;
    let stage = std::time::Instant::now();
    let b = schemas::CLUSTER.parse_body(body)?;
    let ct_ident = b.str("cluster_template_id").unwrap_or_default();
    let vis = template_visibility(caller);
    let ct = match find_template_known(app, &vis, &ct_ident, true, assumed.as_deref_mut()).await {
        Ok(ct) => ct,
        Err(Error::Domain(DomainError::NotFound(_))) => return Err(template_gone(mv, &ct_ident)),
        Err(e) => return Err(e),
    };
    // Magnum's `enforce_cluster_type_supported`: a template made before the rule, or whose
    // image changed since, cannot start a cluster this driver cannot boot.
    super::templates::check_distro(&ct)?;
    let docker_volume_size = b
        .int("docker_volume_size")
        .or(ct.docker_volume_size.map(i64::from));
    super::templates::check_devicemapper(ct.docker_storage_driver.as_deref(), docker_volume_size)?;
    let master_count = b.int("master_count").unwrap_or(1);
    if master_count % 2 == 0 {
        return Err(DomainError::BadRequest(format!(
            "master nodegroup size of {master_count} is invalid, size cannot be an even number."
        ))
        .into());
    }
    let node_count = b.int("node_count").unwrap_or(1);
    if node_count == 0 && !mv.at_least(10) {
        return Err(zero_nodes_unsupported().into());
    }
    policy::enforce("cluster:create", caller, None)?;
    let request = ClusterRequest {
        name: b.str("name"),
        labels: b.labels("labels"),
        merge_labels: b.bool("merge_labels").unwrap_or(false),
        keypair: b.str("keypair"),
        flavor: b.str("flavor_id"),
        master_flavor: b.str("master_flavor_id"),
        fixed_network: b.str("fixed_network"),
        fixed_subnet: b.str("fixed_subnet"),
        docker_volume_size: b.int("docker_volume_size"),
        master_count: b.int("master_count"),
        node_count: b.int("node_count"),
        discovery_url: b.str("discovery_url"),
        create_timeout: b.has("create_timeout").then(|| b.int("create_timeout")),
        master_lb_enabled: b
            .has("master_lb_enabled")
            .then(|| b.bool("master_lb_enabled")),
        floating_ip_enabled: b
            .has("floating_ip_enabled")
            .then(|| b.bool("floating_ip_enabled")),
    };
    // The template's domain view, made once: its defaults plan the cluster, the backend
    // validates against it.
    let template = Template::from(ct.clone());
    let plan = new_cluster::plan(&template.defaults(), &request, Uuid::new_v4())?;
    // Checked after the quota, in Magnum's order: hidden template, then the master/LB rule.
    let late_error = if ct.hidden && !caller.is_admin() {
        Some(DomainError::not_authorized())
    } else if master_count > 1 && plan.master_lb_enabled != Some(true) {
        Some(DomainError::BadRequest(
            "master_count must be 1 when master_lb_enabled is False".into(),
        ))
    } else {
        None
    };
    let mut row = ClusterRow::from_plan(&plan, &caller.project_id, &caller.user_id);
    let master = NodegroupRow::from_plan(&plan.master, Uuid::new_v4(), &row);
    let worker = NodegroupRow::from_plan(&plan.worker, Uuid::new_v4(), &row);
    let (uuid, labels) = (plan.uuid, plan.labels);
    let stage = next_stage("template", stage);

    // Outside the transaction (remote calls must not hold the project's quota lock), and side by
    // side: the look-ups in Glance, Nova and Neutron, and placement's read of the counts.
    let looked_up = async {
        let (Some(s), None) = (cloud, &late_error) else {
            return Ok(None);
        };
        let boot = cloud::boot_volume_size(&labels, app.config.openstack.default_boot_volume_size)?;
        let wanted = cloud::Wanted {
            flavor: row.flavor_id.as_deref(),
            master_flavor: row.master_flavor_id.as_deref(),
            fixed_network: row.fixed_network.as_deref(),
            fixed_subnet: row.fixed_subnet.as_deref(),
            keypair: row.keypair.as_deref(),
            ..cloud::Wanted::template(&ct, boot)
        };
        let mut resolved = cloud::validate(s, &wanted).await?;
        resolved.load_balancer_service = Some(
            s.catalog_url(crate::openstack::catalog::LOAD_BALANCER)
                .is_some(),
        );
        Ok::<_, Error>(Some(resolved))
    };
    let placed = async {
        if late_error.is_some() {
            return Ok(None);
        }
        // Recorded with the row and never changed implicitly afterwards.
        let region = cloud.and_then(UserSession::region);
        super::placement::place(app, &ct.labels.0, &row.labels.0, &caller.project_id, region)
            .await
            .map(Some)
    };
    // The assumed template confirmed meanwhile (one position read shared by the creates
    // waiting for it).
    let confirmed = async {
        match assumed.as_deref().copied().flatten() {
            Some(g) => app.views.template_generation_held(g).await,
            None => true,
        }
    };
    // A look-up's error comes first, as when they ran one after the other.
    let (looked_up, placed, confirmed) = tokio::join!(looked_up, placed, confirmed);
    let stage = next_stage("lookups", stage);
    if !confirmed {
        return Ok(None);
    }
    if let Some(generation) = assumed {
        *generation = None;
    }
    if let Some(resolved) = looked_up? {
        row.resolved = Json(resolved);
    }
    if let Some(management_cluster) = placed? {
        row.management_cluster = management_cluster;
        // Bad labels are the caller's 400 now, never a failure on the management cluster.
        let (cluster, ngs) = crate::db::spec::cluster_and_nodegroups(&row, [&master, &worker]);
        app.backend.validate_cluster(&template, &cluster, &ngs)?;
    }
    let stage = next_stage("validate", stage);
    // The application credential is created by the operation, as the caller: their token goes
    // with it, sealed (never in clear in Postgres; dropped when the operation ends), so the 202
    // does not wait for Keystone.
    let payload = match cloud {
        Some(s) => {
            let sealed = app
                .sealer
                .as_ref()
                .ok_or(crate::seal::SealError::BadKey)
                .and_then(|k| k.seal(s.token()))
                .map_err(Error::from)?;
            json!({ SEALED_TOKEN: sealed })
        }
        None => json!({}),
    };
    let stage = next_stage("seal", stage);
    let (row, master, worker) = (&row, &master, &worker);
    let (late_error, payload) = (&late_error, &payload);
    crate::db::retry(|| async move {
        record_create(
            app,
            caller,
            row,
            master,
            worker,
            late_error.clone(),
            payload.clone(),
            request_id,
        )
        .await
    })
    .await
    .map_err(|e| match &e {
        // The template was deleted since it was read.
        Error::Db(d) if d.violation() == Some(&Violation::ClusterTemplate) => {
            template_gone(mv, &ct_ident)
        }
        _ => e,
    })?;
    next_stage("record", stage);
    Ok(Some(uuid))
}

/// Records the time since `started` as create stage `stage`'s; when the next one starts.
fn next_stage(stage: &'static str, started: std::time::Instant) -> std::time::Instant {
    let now = std::time::Instant::now();
    crate::telemetry::create_stage(stage, now - started);
    now
}

/// The create's statement (`db::creates`, shared with concurrent creates): quota under the
/// project's lock, rows, operation.
/// A `late_error` (Magnum checks it after the quota) is answered once the quota has room.
#[allow(clippy::too_many_arguments)]
async fn record_create(
    app: &App,
    caller: &Caller,
    row: &ClusterRow,
    master: &NodegroupRow,
    worker: &NodegroupRow,
    late_error: Option<DomainError>,
    payload: Value,
    request_id: &str,
) -> Result<()> {
    let recorded = match late_error {
        Some(e) => match app.creates.quota_reached(&caller.project_id).await? {
            Some(limit) => Recorded::QuotaReached { limit },
            None => return Err(e.into()),
        },
        None => {
            let op = NewOperation {
                cluster_uuid: row.uuid,
                nodegroup_uuid: None,
                kind: OperationKind::Create,
                payload,
                request_id: Some(request_id),
            };
            let create = crdb::NewCluster::new(row, [master, worker], &op)?;
            app.creates.record(create).await?
        }
    };
    match recorded {
        Recorded::Created => {
            app.work_ready.notify_one();
            Ok(())
        }
        Recorded::QuotaReached { limit } => Err(DomainError::Forbidden(format!(
            "Resource limit exceeded: You have reached the maximum clusters per project, {limit}. You may delete a cluster to make room for a new one."
        ))
        .into()),
    }
}

/// Show: the cluster (by uuid or unique name) in full, read in one statement with its
/// nodegroups' aggregates and its template's labels; serialised, and reused while nothing
/// under it changed (`view_cache`).
pub async fn get_json(
    app: &App,
    caller: &Caller,
    ident: &str,
    base: &str,
    mv: Version,
) -> Result<Bytes> {
    let scope = cluster_scope(caller, true);
    let admin = caller.is_admin();
    // Debug-quoted strings: no two requests can spell the same key.
    let key = || format!("cluster {scope:?} {admin} {base:?} {mv:?} {ident:?}");
    // Without reuse each show builds its own: its read goes out with every concurrent one's.
    let (body, owner) = super::cached_view(app, key, Unreused::Own, || async {
        let uuid = match parse_uuid(ident) {
            Some(u) => u,
            None => find_cluster(app, &scope, ident).await?.uuid,
        };
        let head = cvdb::one_of(&app.shows, &app.reads, &scope, uuid)
            .await?
            .ok_or_else(|| DomainError::cluster_not_found(ident))?;
        let owner = Owner {
            project_id: head.project_id.clone(),
            user_id: head.user_id.clone(),
        };
        let mut out = Vec::new();
        let ask = Ask {
            form: Form::Show,
            base,
            mv,
            admin,
        };
        if stored_views::write_all(app, &mut out, vec![head], ask).await? == 0 {
            return Err(DomainError::cluster_not_found(ident).into());
        }
        Ok((Bytes::from(out), Some(owner)))
    })
    .await?;
    let owner = owner.ok_or(Error::Invariant("a cluster view without its owner"))?;
    authorize_target(
        caller,
        "cluster:get",
        Target {
            project_id: &owner.project_id,
            user_id: &owner.user_id,
        },
    )?;
    Ok(body)
}

fn authorize_list(caller: &Caller, detail: bool) -> Result<()> {
    let rule = if detail {
        "cluster:detail"
    } else {
        "cluster:get_all"
    };
    policy::enforce(rule, caller, None)?;
    if caller.is_admin() {
        policy::enforce(
            &crate::domain::policy::all_projects_rule(rule),
            caller,
            None,
        )?;
    }
    Ok(())
}

/// A page of clusters serialised, reused while nothing under it changed (`view_cache`).
pub async fn list_json(
    app: &App,
    caller: &Caller,
    mv: Version,
    params: &ListQuery,
    detail: bool,
    base: &str,
) -> Result<Bytes> {
    authorize_list(caller, detail)?;
    // The key is made of exactly what the page is built from.
    let scope = cluster_scope(caller, true);
    let admin = caller.is_admin();
    let key = || format!("clusters {scope:?} {admin} {detail} {base:?} {mv:?} {params:?}");
    super::cached_page(app, key, || {
        page(app, &scope, admin, mv, params, detail, base)
    })
    .await
}

/// A page of the clusters in `scope` (the caller passed [`authorize_list`]; `admin`: the
/// caller is one): the clusters' stored views (`stored_views`) in the page's order.
async fn page(
    app: &App,
    scope: &Scope,
    admin: bool,
    mv: Version,
    params: &ListQuery,
    detail: bool,
    base: &str,
) -> Result<Bytes> {
    let heads = cvdb::page(&app.reads, scope, &super::page(params, None), params.marker).await?;
    // The marker is looked up apart only when nothing follows it: it may be gone.
    if let Some(m) = params.marker
        && heads.is_empty()
        && cvdb::marker_missing(&app.reads, scope, m).await?
    {
        return Err(DomainError::cluster_not_found(&m.to_string()).into());
    }
    let path = if detail {
        "clusters/detail"
    } else {
        "clusters"
    };
    let next = params.next_if_full(heads.len(), || {
        heads
            .last()
            .map(|c| params.next_url(base, path, &c.uuid.to_string()))
    });
    let ask = Ask {
        form: if detail { Form::Detail } else { Form::Short },
        base,
        mv,
        admin,
    };
    // `views::ClusterList` as serde writes it.
    let mut out = Vec::with_capacity(heads.len() * if detail { 1600 } else { 1000 });
    out.extend_from_slice(b"{\"clusters\":[");
    stored_views::write_all(app, &mut out, heads, ask).await?;
    out.push(b']');
    if let Some(next) = next {
        out.extend_from_slice(b",\"next\":");
        serde_json::to_writer(&mut out, &next)?;
    }
    out.push(b'}');
    Ok(Bytes::from(out))
}

fn default_worker(ngs: &[NodegroupRow]) -> Option<&NodegroupRow> {
    ngs.iter().find(|n| n.is_default && !n.is_master())
}

/// Records a resize of `ng` to `count`: counts, statuses and the operation in one transaction,
/// while the cluster (under its row lock) is still in a status that `allows` it (else, as
/// Magnum's conductor does, nothing happens and the API still answers 202).
async fn record_resize(
    app: &App,
    c: &ClusterRow,
    ng: &NodegroupRow,
    count: i64,
    nodes_to_remove: Vec<String>,
    request_id: &str,
    allows: fn(Status) -> bool,
) -> Result<()> {
    let count = i32::try_from(count).map_err(|_| {
        DomainError::invalid_field("node_count", &count.to_string(), "Value is too large")
    })?;
    let op = NewOperation {
        cluster_uuid: c.uuid,
        nodegroup_uuid: Some(ng.uuid),
        kind: OperationKind::Resize,
        payload: json!({"node_count": count, "previous_node_count": ng.node_count, "nodes_to_remove": nodes_to_remove}),
        request_id: Some(request_id),
    };
    let (op, ident) = (&op, &c.uuid.to_string());
    let recorded = crate::db::retry(|| async move {
        let (mut tx, locked) = lock_cluster(app, op.cluster_uuid, ident).await?;
        if !status_of(&locked).is_some_and(allows) {
            return Ok(None);
        }
        ndb::set_node_count(&mut *tx, ng.uuid, count).await?;
        ndb::set_status(&mut *tx, ng.uuid, Status::UpdateInProgress.as_str(), None).await?;
        begin_operation(app, tx, Status::UpdateInProgress, op).await?;
        Ok::<_, Error>(Some(()))
    })
    .await?;
    if recorded.is_none() {
        tracing::warn!(cluster = %c.uuid, "resize ignored: the cluster's status changed meanwhile");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)] // one per request part; a struct would only rename them
pub async fn update(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    mv: Version,
    ident: &str,
    body: &Value,
    request_id: &str,
) -> Result<Uuid> {
    let c = find_cluster(app, &cluster_scope(caller, true), ident).await?;
    authorize(caller, "cluster:update", &c)?;
    super::refuse_if_read_only(app, &c, "update").await?;
    super::credentials::rotate_if_unusable(app, caller, cloud, &c, request_id).await;
    let ops = patch::parse(body, &schemas::CLUSTER_PATCH)?;
    let ngs = ndb::of_cluster(&app.pool, c.uuid).await?;
    let worker = default_worker(&ngs);
    let mut doc = views::document(&views::cluster_full(
        &c,
        &views::summarize(ngs.iter()),
        &Labels::new(),
        "",
        MIN_VERSION,
    ));
    doc.insert(
        "node_count".into(),
        json!(worker.map(|w| w.node_count).unwrap_or(0)),
    );
    for k in [
        "labels_overridden",
        "labels_added",
        "labels_skipped",
        "links",
        "faults",
    ] {
        doc.remove(k);
    }
    doc.insert("cluster_id".into(), json!(c.stack_id));
    let patched = patch::apply(&doc, &ops, &schemas::CLUSTER_PATCH)?;
    let before = schemas::CLUSTER.revalidate(&doc)?;
    let after = schemas::CLUSTER.revalidate(&patched)?;
    let mut changed: Vec<&str> = schemas::CLUSTER
        .fields
        .iter()
        .filter(|f| !f.readonly && before.get(f.name) != after.get(f.name))
        .map(|f| f.name)
        .collect();
    changed.retain(|f| {
        !matches!(
            *f,
            "status"
                | "status_reason"
                | "faults"
                | "labels_overridden"
                | "labels_added"
                | "labels_skipped"
                | "merge_labels"
        )
    });
    let disallowed: Vec<&str> = changed
        .iter()
        .copied()
        .filter(|f| !matches!(*f, "node_count" | "health_status" | "health_status_reason"))
        .collect();
    if !disallowed.is_empty() {
        return Err(DomainError::BadRequest(format!(
            "cannot change cluster property(ies) {}.",
            disallowed.join(", ")
        ))
        .into());
    }
    let after = Body(after);
    let new_count = after.int("node_count").unwrap_or(1);
    if new_count == 0 && !mv.at_least(10) {
        return Err(zero_nodes_unsupported().into());
    }
    if changed.contains(&"health_status") || changed.contains(&"health_status_reason") {
        // Magnum checks this rule against the caller's own project and user, not the cluster's.
        policy::enforce("cluster:update_health_status", caller, None)?;
        let reason = after
            .get("health_status_reason")
            .cloned()
            .unwrap_or_else(|| json!({}));
        cdb::set_health(
            &app.pool,
            c.uuid,
            after.str("health_status").as_deref(),
            &reason,
        )
        .await?;
    }
    if changed.contains(&"node_count") {
        match (worker, status_of(&c)) {
            (Some(w), Some(st)) if st.is_stable_complete() => {
                record_resize(
                    app,
                    &c,
                    w,
                    new_count,
                    vec![],
                    request_id,
                    Status::is_stable_complete,
                )
                .await?;
            }
            // Magnum's conductor silently ignores updates in other states; the API still says 202.
            _ => {
                tracing::warn!(cluster = %c.uuid, status = %c.status, "node_count update ignored in this status")
            }
        }
    }
    Ok(c.uuid)
}

pub async fn delete(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    ident: &str,
    request_id: &str,
) -> Result<()> {
    let c = find_cluster(app, &cluster_scope(caller, true), ident).await?;
    authorize(caller, "cluster:delete", &c)?;
    super::refuse_if_read_only(app, &c, "delete").await?;
    super::credentials::rotate_if_unusable(app, caller, cloud, &c, request_id).await;
    let op = NewOperation {
        cluster_uuid: c.uuid,
        nodegroup_uuid: None,
        kind: OperationKind::Delete,
        payload: json!({}),
        request_id: Some(request_id),
    };
    let op = &op;
    crate::db::retry(|| async move {
        let (mut tx, locked) = lock_cluster(app, op.cluster_uuid, ident).await?;
        // Already being deleted: one operation is enough.
        if locked.status == Status::DeleteInProgress.as_str() {
            return Ok(());
        }
        ndb::set_status_of_cluster(
            &mut *tx,
            op.cluster_uuid,
            Status::DeleteInProgress.as_str(),
            None,
        )
        .await?;
        begin_operation(app, tx, Status::DeleteInProgress, op).await
    })
    .await
}

/// Resolves a nodegroup ident (integer id, uuid or name) within a cluster.
pub async fn find_nodegroup(
    app: &App,
    c: &ClusterRow,
    project: Option<&str>,
    ident: &str,
) -> Result<NodegroupRow> {
    one_nodegroup(
        ndb::find(&app.reads, c.uuid, project, &nodegroup_ident(ident)).await?,
        ident,
    )
}

/// How a path names a nodegroup: its integer id, its uuid or its name.
pub fn nodegroup_ident(ident: &str) -> NgIdent {
    if let Ok(i) = ident.parse::<i64>() {
        NgIdent::Id(i)
    } else if let Some(u) = parse_uuid(ident) {
        NgIdent::Uuid(u)
    } else {
        NgIdent::Name(ident.to_string())
    }
}

/// The one nodegroup of `rows` (those [`ndb::find`] found for `ident`).
pub fn one_nodegroup(mut rows: Vec<NodegroupRow>, ident: &str) -> Result<NodegroupRow> {
    match rows.len() {
        0 => Err(DomainError::nodegroup_not_found(ident).into()),
        1 => Ok(rows.remove(0)),
        _ => Err(DomainError::ambiguous_name("nodegroups", "nodegroup").into()),
    }
}

pub async fn resize(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    mv: Version,
    ident: &str,
    body: &Value,
    request_id: &str,
) -> Result<Uuid> {
    let b = schemas::RESIZE.parse_body(body)?;
    let c = find_cluster(app, &cluster_scope(caller, false), ident).await?;
    policy::enforce("cluster:resize", caller, Some(target(&c)))?;
    super::refuse_if_read_only(app, &c, "resize").await?;
    super::credentials::rotate_if_unusable(app, caller, cloud, &c, request_id).await;
    let node_count = b.int("node_count").unwrap_or(0);
    if node_count == 0 && !mv.at_least(10) {
        return Err(zero_nodes_unsupported().into());
    }
    let ngs = ndb::of_cluster(&app.pool, c.uuid).await?;
    let ng = match b.str("nodegroup") {
        Some(n) => find_nodegroup(app, &c, None, &n).await?,
        None => default_worker(&ngs)
            .cloned()
            .ok_or_else(|| DomainError::nodegroup_not_found("default-worker"))?,
    };
    if ng.is_master() {
        return Err(DomainError::BadRequest(
            "Resizing the master nodegroup is not supported by this driver.".into(),
        )
        .into());
    }
    let min = i64::from(ng.min_node_count);
    let max = ng.max_node_count.map(i64::from);
    if node_count < min || max.is_some_and(|m| node_count > m) {
        return Err(DomainError::BadRequest(format!(
            "Resizing {} outside the allowed range: min_node_count = {}, max_node_count = {}",
            ng.name,
            min,
            max.map(|m| m.to_string()).unwrap_or_else(|| "None".into())
        ))
        .into());
    }
    // Magnum casts the resize to the conductor, which refuses other statuses without telling the
    // client: the API still answers 202 and nothing changes.
    if !status_of(&c).is_some_and(Status::allows_resize) {
        tracing::warn!(cluster = %c.uuid, status = %c.status, "resize ignored in this status");
        return Ok(c.uuid);
    }
    let nodes_to_remove = crate::domain::fields::string_list(b.get("nodes_to_remove"));
    record_resize(
        app,
        &c,
        &ng,
        node_count,
        nodes_to_remove,
        request_id,
        Status::allows_resize,
    )
    .await?;
    Ok(c.uuid)
}

pub async fn upgrade(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    mv: Version,
    ident: &str,
    body: &Value,
    request_id: &str,
) -> Result<Uuid> {
    if !mv.at_least(8) {
        return Err(DomainError::BadRequest(
            "Cluster upgrade is not supported in the provided microversion.".into(),
        )
        .into());
    }
    let b = schemas::UPGRADE.parse_body(body)?;
    let c = find_cluster(app, &cluster_scope(caller, true), ident).await?;
    authorize(caller, "cluster:upgrade", &c)?;
    super::refuse_if_read_only(app, &c, "upgrade").await?;
    super::credentials::rotate_if_unusable(app, caller, cloud, &c, request_id).await;
    let ct_ident = b.str("cluster_template").unwrap_or_default();
    let ct = find_template(app, &template_visibility(caller), &ct_ident, false).await?;
    let old_ct = tdb::by_uuid(&app.pool, &tdb::Visibility::All, c.cluster_template_id).await?;
    let version_of = |t: &tdb::TemplateRow| {
        t.labels
            .0
            .get("kube_tag")
            .cloned()
            .or_else(|| t.resolved.0.kube_version.clone())
    };
    let from = c
        .coe_version
        .clone()
        .or_else(|| old_ct.as_ref().and_then(version_of));
    // A failed upgrade may be rolled back to the template it left (the cluster shows that one
    // again), even to an older version: only as that rollback, never as a downgrade.
    let rollback = status_of(&c) == Some(Status::UpdateFailed)
        && cdb::upgrade_from(&app.pool, c.uuid)
            .await?
            .is_some_and(|u| u.template == ct.uuid && u.to != ct.uuid);
    if rollback {
        crate::domain::upgrade::check_rollback(
            c.coe_version.as_deref(),
            version_of(&ct).as_deref(),
        )?;
    } else {
        crate::domain::upgrade::check(
            old_ct
                .as_ref()
                .and_then(|t| t.coe.as_deref())
                .unwrap_or("kubernetes"),
            from.as_deref(),
            ct.coe.as_deref().unwrap_or("kubernetes"),
            version_of(&ct).as_deref(),
        )?;
    }
    super::check_adopted_upgrade(app, &c, old_ct.as_ref(), &ct, version_of(&ct).as_deref()).await?;
    let ngs = ndb::of_cluster(&app.pool, c.uuid).await?;
    let ng = match b.str("nodegroup") {
        Some(n) => find_nodegroup(app, &c, None, &n).await?,
        None => default_worker(&ngs)
            .cloned()
            .ok_or_else(|| DomainError::nodegroup_not_found("default-worker"))?,
    };
    if !ng.is_default && ct.uuid != c.cluster_template_id {
        return Err(DomainError::Conflict(format!(
            "Cluster Template is not valid for upgrade: Nodegroup {} can be upgraded only to match cluster's template ({}).",
            ng.name, c.cluster_template_id
        ))
        .into());
    }
    if !status_of(&c).is_some_and(allows_upgrade) {
        return Err(upgrade_refused(&c.status).into());
    }
    super::upgrades::preflight(app, cloud, &c, &ngs, &ct, version_of(&ct).as_deref()).await?;
    let op = NewOperation {
        cluster_uuid: c.uuid,
        nodegroup_uuid: Some(ng.uuid),
        kind: OperationKind::Upgrade,
        payload: json!({
            "cluster_template": ct.uuid,
            "max_batch_size": b.int("max_batch_size").unwrap_or(1),
            "image_id": ct.image_id,
            // From UPDATE_FAILED: the driver replaces the machines that failed.
            "retry": status_of(&c) == Some(Status::UpdateFailed),
        }),
        request_id: Some(request_id),
    };
    let (op, ng) = (&op, &ng);
    crate::db::retry(|| async move {
        let (mut tx, locked) = lock_cluster(app, op.cluster_uuid, ident).await?;
        // Another request may have started an operation since the check above.
        if !status_of(&locked).is_some_and(allows_upgrade) {
            return Err(upgrade_refused(&locked.status).into());
        }
        ndb::set_status(&mut *tx, ng.uuid, Status::UpdateInProgress.as_str(), None).await?;
        begin_operation(app, tx, Status::UpdateInProgress, op).await
    })
    .await?;
    Ok(c.uuid)
}
