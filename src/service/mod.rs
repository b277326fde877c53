//! Use cases behind the handlers: each public function is one API operation, combining the
//! pure rules of `domain` with `db` (one transaction where it writes) and the cluster backend
//! (`driver::Backend`). Services take domain types (the caller, the API version, a list query)
//! and return rows or the typed views of `views`; they know nothing of HTTP.

pub mod certificates;
pub mod cloud;
pub mod clusters;
pub mod credentials;
pub mod error;
pub mod forget;
pub mod journal;
pub mod misc;
pub mod nodegroups;
pub mod operating;
pub mod placement;
pub mod stored_views;
pub mod templates;
pub mod upgrades;
pub mod views;

pub use error::{Error, Result};

use bytes::Bytes;

use crate::app::App;
use crate::db::clusters::{self as cdb, ClusterRow, Scope};
use crate::db::operations::NewOperation;
use crate::db::page::PageQuery;
use crate::db::status::{self as status, Transition};
use crate::db::templates::{self as tdb, TemplateRow, Visibility};
use crate::domain::error::DomainError;
use crate::domain::listing::ListQuery;
use crate::domain::names::parse_uuid;
use crate::domain::policy::{self, Caller, Target};
use crate::domain::status::Status;
use crate::view_cache::{Owner, Unreused};

/// A response body: the view stored under the key `key` makes (only when views are reused)
/// while the data under it is unchanged (see `view_cache`), else the one `build` makes, stored
/// for the next request. The owner travels with the body, so the caller authorises a reuse
/// exactly like the first read.
pub async fn cached_view<F, Fut>(
    app: &App,
    key: impl FnOnce() -> String,
    unreused: Unreused,
    build: F,
) -> Result<(Bytes, Option<Owner>)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(Bytes, Option<Owner>)>>,
{
    let v = app.views.get_or_build(key, unreused, build).await?;
    Ok((v.body.clone(), v.owner.clone()))
}

/// A list page: the serialised page stored under the key `key` makes (which names the
/// collection, the caller's visibility and `params`), else the one `build` makes. Pages have no
/// owner: their policy is checked before.
pub async fn cached_page<F, Fut>(app: &App, key: impl FnOnce() -> String, build: F) -> Result<Bytes>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Bytes>>,
{
    let (body, _) = cached_view(app, key, Unreused::Shared, || async {
        Ok((build().await?, None))
    })
    .await?;
    Ok(body)
}

/// Clusters the caller can see: everything for an admin (when `widen`), else the own project.
pub fn cluster_scope(caller: &Caller, widen: bool) -> Scope {
    if widen && caller.is_admin() {
        Scope::All
    } else {
        Scope::Project(caller.project_id.clone())
    }
}

pub fn template_visibility(caller: &Caller) -> Visibility {
    if caller.is_admin() {
        Visibility::All
    } else {
        Visibility::Project(caller.project_id.clone())
    }
}

/// A cluster named by uuid or (unique) name within `scope`.
pub async fn find_cluster(app: &App, scope: &Scope, ident: &str) -> Result<ClusterRow> {
    if let Some(u) = parse_uuid(ident) {
        return cdb::by_uuid(&app.reads, scope, u)
            .await?
            .ok_or_else(|| DomainError::cluster_not_found(ident).into());
    }
    let mut rows = cdb::by_name(&app.reads, scope, ident).await?;
    match rows.len() {
        0 => Err(DomainError::cluster_not_found(ident).into()),
        1 => Ok(rows.remove(0)),
        _ => Err(DomainError::ambiguous_name("clusters", "cluster").into()),
    }
}

/// A template named by uuid or (unique) name; with `allow_int_id`, an integer id too.
pub async fn find_template(
    app: &App,
    vis: &Visibility,
    ident: &str,
    allow_int_id: bool,
) -> Result<TemplateRow> {
    let not_found = || DomainError::template_not_found(ident);
    if allow_int_id && let Ok(id) = ident.parse::<i64>() {
        return tdb::by_id(&app.reads, vis, id)
            .await?
            .ok_or_else(|| not_found().into());
    }
    if let Some(u) = parse_uuid(ident) {
        return app
            .templates
            .get(vis, u, app.views.template_generation_for_read().await)
            .await?
            .ok_or_else(|| not_found().into());
    }
    let mut rows = tdb::by_name(&app.reads, vis, ident).await?;
    match rows.len() {
        0 => Err(not_found().into()),
        1 => Ok(rows.remove(0)),
        _ => Err(DomainError::ambiguous_name("ClusterTemplates", "ClusterTemplate").into()),
    }
}

/// [`find_template`] by uuid without waiting for the committed position: with `known`, the row
/// as this replica knows it, and the template generation it is taken in is left in `known`
/// (before the read, so also when the row is not found); without, or when nothing is reused
/// now, the row read from PostgreSQL after the call began (fresh; generation `None`). The
/// caller confirms a generation with `ViewCache::template_generation_held` before it relies on
/// what it decided from the row. An identifier that is not a uuid is read as [`find_template`]
/// reads it (from PostgreSQL).
pub async fn find_template_known(
    app: &App,
    vis: &Visibility,
    ident: &str,
    allow_int_id: bool,
    known: Option<&mut Option<u64>>,
) -> Result<TemplateRow> {
    let Some(u) = parse_uuid(ident) else {
        return find_template(app, vis, ident, allow_int_id).await;
    };
    let g = known.and_then(|slot| {
        *slot = app.views.template_generation();
        *slot
    });
    app.templates
        .get(vis, u, g)
        .await?
        .ok_or_else(|| DomainError::template_not_found(ident).into())
}

/// The database page of a list query whose marker resolved to row `marker_id`.
pub fn page(q: &ListQuery, marker_id: Option<i64>) -> PageQuery {
    PageQuery {
        sort_key: q.sort_key,
        desc: q.desc,
        marker_id,
        limit: q.limit,
    }
}

/// Records `op` in `tx`, commits the state change and the operation together, and wakes the
/// worker. Every acknowledged cluster operation goes through here; `tx` holds the cluster's
/// row lock already, or this takes it before the operation's row (`db`'s lock order).
pub async fn commit_with_operation(
    app: &App,
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    op: &NewOperation<'_>,
) -> Result<()> {
    cdb::lock(&mut *tx, op.cluster_uuid).await?;
    crate::db::operations::enqueue(&mut *tx, op).await?;
    tx.commit().await?;
    app.work_ready.notify_one();
    Ok(())
}

/// Begins the transaction of a request that changes an existing cluster, its nodegroups or
/// its operations: the cluster's row lock is its first lock (`db`'s lock order), and the cluster
/// read under it is what the request decides on. A cluster deleted meanwhile is `ident`'s 404.
/// Callers run the whole transaction in `db::retry`, so a rollback on contention re-runs it.
pub async fn lock_cluster(
    app: &App,
    cluster: uuid::Uuid,
    ident: &str,
) -> Result<(sqlx::Transaction<'static, sqlx::Postgres>, ClusterRow)> {
    let mut tx = app.pool.begin().await?;
    let locked = cdb::lock(&mut *tx, cluster)
        .await?
        .ok_or_else(|| DomainError::cluster_not_found(ident))?;
    Ok((tx, locked))
}

/// Records `op` with the cluster starting `status` (an `*_IN_PROGRESS`), in `tx` (from
/// [`lock_cluster`]), and commits.
pub async fn begin_operation(
    app: &App,
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    status: Status,
    op: &NewOperation<'_>,
) -> Result<()> {
    status::write(&mut tx, op.cluster_uuid, Transition::Begin(status)).await?;
    commit_with_operation(app, tx, op).await
}

/// The cluster as the driver reads it. A cluster imported from Magnum that magnum-cluster-api or
/// magnum-capi-helm made carries where that driver left its Cluster API objects (its CA Secrets
/// among them), so the driver reads them there.
pub async fn driver_cluster(app: &App, c: &ClusterRow) -> Result<crate::domain::spec::Cluster> {
    let mut spec = crate::domain::spec::Cluster::from(c.clone());
    if let Some(i) = crate::db::imports::of_cluster(&app.pool, c.uuid).await? {
        spec.objects_at = crate::domain::imported::objects_at(
            &i.source_driver,
            i.stack_id.as_deref(),
            &c.project_id,
        );
    }
    Ok(spec)
}

/// Refuses a change to a cluster imported from Magnum (issue 25) with a 400 saying why and
/// what to do: every change of a read-only one, and of an adopted one what needs objects
/// rendered here (`action`: `resize`, `delete`, `sign`, `update`, `upgrade`, `nodegroup`,
/// `rotate_credential`, `rotate_ca`; see `domain::imported::adopted_refusal`). Every use case
/// that changes a cluster calls it after its policy check. A state this binary does not know
/// (written by a newer one) counts as read-only.
pub async fn refuse_if_read_only(app: &App, c: &ClusterRow, action: &str) -> Result<()> {
    refuse_if_read_only_at(app, c, action).await.map(drop)
}

/// [`refuse_if_read_only`], then where an adopted cluster's driver left its objects (what
/// [`driver_cluster`] sets; `None` for a cluster not imported), from the one read of its import
/// record: for a use case that hands the backend the cluster after refusing.
pub async fn refuse_if_read_only_at(
    app: &App,
    c: &ClusterRow,
    action: &str,
) -> Result<Option<crate::domain::spec::ObjectsAt>> {
    use crate::domain::imported::{ImportState, adopted_refusal, objects_at, refusal};
    match crate::db::imports::of_cluster(&app.pool, c.uuid).await? {
        Some(i) if i.state() == Some(ImportState::Adopted) => {
            match adopted_refusal(&c.uuid.to_string(), &i.source_driver, action) {
                Some(why) => Err(DomainError::BadRequest(why).into()),
                None => Ok(objects_at(
                    &i.source_driver,
                    i.stack_id.as_deref(),
                    &c.project_id,
                )),
            }
        }
        Some(i) => {
            Err(DomainError::BadRequest(refusal(&c.uuid.to_string(), &i.source_driver)).into())
        }
        None => Ok(None),
    }
}

/// An upgrade of a cluster adopted from Magnum: what its new template `to` (its Kubernetes
/// `version`) must give the driver's objects (`domain::adopted_upgrade`), from `from`, its
/// template now. Nothing for other clusters.
pub async fn check_adopted_upgrade(
    app: &App,
    c: &ClusterRow,
    from: Option<&TemplateRow>,
    to: &TemplateRow,
    version: Option<&str>,
) -> Result<()> {
    use crate::domain::adopted_upgrade::{Target, check};
    use crate::domain::imported::ImportState;
    match crate::db::imports::of_cluster(&app.pool, c.uuid).await? {
        Some(i) if i.state() == Some(ImportState::Adopted) => {
            let r = &to.resolved.0;
            check(
                &c.uuid.to_string(),
                &i.source_driver,
                from.and_then(|t| t.resolved.0.os_distro.as_deref()),
                Target {
                    version,
                    image_id: r.image_id.as_deref().or(to.image_id.as_deref()),
                    os_distro: r.os_distro.as_deref(),
                },
            )?;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The owner of cluster `c`, as policy rules see it.
pub fn cluster_target(c: &ClusterRow) -> Target<'_> {
    Target {
        project_id: &c.project_id,
        user_id: &c.user_id,
    }
}

/// Policy `rule` against the cluster, plus `rule_all_projects` when the cluster is someone else's.
pub fn authorize_cluster(caller: &Caller, rule: &str, c: &ClusterRow) -> Result<()> {
    authorize_target(caller, rule, cluster_target(c))
}

/// Policy `rule` against a cluster's owner `t` (see [`authorize_cluster`]).
pub fn authorize_target(caller: &Caller, rule: &str, t: Target<'_>) -> Result<()> {
    if t.project_id != caller.project_id {
        policy::enforce(&policy::all_projects_rule(rule), caller, None)?;
        return Ok(());
    }
    policy::enforce(rule, caller, Some(t))?;
    Ok(())
}
