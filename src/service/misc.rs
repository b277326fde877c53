//! Quotas, stats and mservices use cases (the admin-ish surfaces behind `api/misc.rs`).

use serde_json::Value;

use super::{Result, views};
use crate::app::App;
use crate::db::page::PageQuery;
use crate::db::{Violation, clusters as cdb, quotas as qdb, services as sdb};
use crate::domain::error::DomainError;
use crate::domain::policy::{self, Caller};
use crate::domain::schemas;

/// The columns a quota list may be sorted by.
pub use crate::db::quotas::SORT_KEYS as QUOTA_SORT_KEYS;

/// What a quota list asks for: the page (its marker is a quota's integer id) and whether every
/// project's quotas (admins only).
#[derive(Debug, Clone)]
pub struct QuotaQuery {
    pub limit: i64,
    pub sort_key: &'static str,
    pub desc: bool,
    pub marker: Option<i64>,
    pub all_tenants: bool,
}

pub async fn list(
    app: &App,
    caller: &Caller,
    q: &QuotaQuery,
    base: &str,
) -> Result<views::QuotaList> {
    let QuotaQuery {
        limit,
        sort_key,
        desc,
        marker,
        all_tenants: all,
    } = q.clone();
    policy::enforce("quota:get_all", caller, None)?;
    let project = if all && caller.is_admin() {
        None
    } else {
        Some(caller.project_id.as_str())
    };
    if let Some(m) = marker
        && !qdb::exists_id(&app.pool, m, project).await?
    {
        return Err(DomainError::NotFound(format!("Quota {m} could not be found.")).into());
    }
    let page = PageQuery {
        sort_key,
        desc,
        marker_id: marker,
        limit,
    };
    let rows = qdb::list(&app.pool, project, &page).await?;
    let full = i64::try_from(rows.len()).is_ok_and(|l| l == limit);
    let next = rows.last().filter(|_| full).map(|q| {
        format!(
            "{base}/v1/quotas?sort_key={sort_key}&sort_dir={}&limit={limit}&marker={}",
            if desc { "desc" } else { "asc" },
            q.id
        )
    });
    Ok(views::QuotaList {
        quotas: rows.iter().map(views::quota).collect(),
        next,
    })
}

fn check_own(caller: &Caller, project_id: &str) -> Result<()> {
    if !caller.is_admin() && caller.project_id != project_id {
        return Err(DomainError::not_authorized().into());
    }
    Ok(())
}

pub async fn get(
    app: &App,
    caller: &Caller,
    project_id: &str,
    resource: &str,
) -> Result<views::Quota> {
    policy::enforce("quota:get", caller, None)?;
    check_own(caller, project_id)?;
    Ok(match qdb::get(&app.pool, project_id, resource).await? {
        Some(q) => views::quota(&q),
        None => views::default_quota(project_id, app.config.quotas.max_clusters_per_project),
    })
}

pub async fn create(app: &App, caller: &Caller, body: &Value) -> Result<views::Quota> {
    let b = schemas::QUOTA.parse_body(body)?;
    let project_id = b.str("project_id").unwrap_or_default();
    // Magnum checks the project in Keystone before the policy (a decorator around the handler).
    if let Some(ks) = app.auth.keystone()
        && !ks.project_exists(&project_id).await?
    {
        return Err(DomainError::NotFound(format!(
            "The project_id {project_id} could not be found."
        ))
        .into());
    }
    policy::enforce("quota:create", caller, None)?;
    let resource = b.str("resource").unwrap_or_else(|| "Cluster".into());
    let hard_limit = i32::try_from(b.int("hard_limit").unwrap_or(1))
        .map_err(|_| DomainError::invalid_field("hard_limit", "", "Value is too large"))?;
    match qdb::insert(&app.pool, &project_id, &resource, hard_limit).await {
        Ok(q) => Ok(views::quota(&q)),
        Err(e) if e.violation() == Some(&Violation::QuotaProjectResource) => {
            Err(DomainError::Conflict(format!(
                "Quota for project {project_id} already exists for resource {resource}."
            ))
            .into())
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn update(
    app: &App,
    caller: &Caller,
    project_id: &str,
    resource: &str,
    body: &Value,
) -> Result<views::Quota> {
    let b = schemas::QUOTA_UPDATE.parse_body(body)?;
    policy::enforce("quota:update", caller, None)?;
    let hard_limit = i32::try_from(b.int("hard_limit").unwrap_or(0))
        .map_err(|_| DomainError::invalid_field("hard_limit", "", "Value is too large"))?;
    qdb::update(&app.pool, project_id, resource, hard_limit)
        .await?
        .map(|q| views::quota(&q))
        .ok_or_else(|| DomainError::quota_not_found(project_id, resource).into())
}

pub async fn delete(app: &App, caller: &Caller, project_id: &str, resource: &str) -> Result<()> {
    policy::enforce("quota:delete", caller, None)?;
    if qdb::delete(&app.pool, project_id, resource).await? {
        Ok(())
    } else {
        Err(DomainError::quota_not_found(project_id, resource).into())
    }
}

/// `GET /v1/stats`: `kind` is the `type` argument (only `cluster`), `requested` the project.
pub async fn stats(
    app: &App,
    caller: &Caller,
    kind: Option<&str>,
    requested: Option<&str>,
) -> Result<views::Stats> {
    if let Some(t) = kind
        && !t.eq_ignore_ascii_case("cluster")
    {
        return Err(DomainError::BadRequest(format!(
            "Invalid parameter value for type: {t}. Acceptable values are 'cluster'"
        ))
        .into());
    }
    policy::enforce("stats:get_all", caller, None)?;
    let project = match (caller.is_admin(), requested) {
        (true, p) => p.map(str::to_string),
        (false, Some(p)) if p != caller.project_id => {
            return Err(DomainError::not_authorized().into());
        }
        (false, _) => Some(caller.project_id.clone()),
    };
    let (clusters, nodes) = cdb::stats(&app.pool, project.as_deref()).await?;
    Ok(views::Stats { clusters, nodes })
}

pub async fn mservices(app: &App, caller: &Caller) -> Result<views::MServiceList> {
    policy::enforce("magnum-service:get_all", caller, None)?;
    let rows = sdb::list(&app.pool).await?;
    let now = chrono::Utc::now();
    let down = app.config.service.service_down_time_secs;
    Ok(views::MServiceList {
        mservices: rows.iter().map(|s| views::service(s, now, down)).collect(),
    })
}
