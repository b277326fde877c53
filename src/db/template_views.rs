//! `template_view`: each template's serialised view stored beside it (the bytes and their
//! version; migrations/20261127130000_stored_template_views.sql retires them on every change):
//! the heads of a page with their stored bodies, the rows of those not stored, and storing.

use sqlx::{AssertSqlSafe, FromRow, PgExecutor, PgPool};
use uuid::Uuid;

use super::DbResult;
use super::page::PageQuery;
use super::templates::{TemplateRow, Visibility};

/// A template of a page: its uuid and its stored view (`None`: not built yet, or retired).
#[derive(Debug, FromRow)]
pub struct TemplateHead {
    pub uuid: Uuid,
    pub body: Option<Vec<u8>>,
}

/// A template's row with the version of its stored view the row is (read in one statement).
#[derive(Debug, FromRow)]
pub struct VersionedTemplate {
    #[sqlx(flatten)]
    pub row: TemplateRow,
    pub view_version: Option<i64>,
}

/// A page of the templates `vis` sees, in the page's order, after the template `marker` when
/// there is one (found in the same statement; none when `vis` does not see it: see
/// [`marker_missing`]).
pub async fn page<'e>(
    ex: impl PgExecutor<'e>,
    vis: &Visibility,
    page: &PageQuery,
    marker: Option<Uuid>,
) -> DbResult<Vec<TemplateHead>> {
    let mut sql = format!(
        "SELECT t.uuid, v.body
           FROM cluster_template t LEFT JOIN template_view v ON v.template_uuid = t.uuid
          WHERE {}",
        vis.sql(1)
    );
    let found = format!(
        "(SELECT m.id FROM cluster_template m WHERE m.uuid = $2 AND {})",
        vis.sql_of("m", 1)
    );
    let after = marker.map(|_| page.after_sql("cluster_template", &found));
    page.push_after(&mut sql, after.as_deref());
    Ok(sqlx::query_as::<_, TemplateHead>(AssertSqlSafe(sql))
        .bind(vis.project())
        .bind(marker)
        .fetch_all(ex)
        .await?)
}

/// Whether the marker of a [`page`] that came back empty is missing from what `vis` sees (the
/// caller's 404) rather than the last of the templates.
pub async fn marker_missing<'e>(
    ex: impl PgExecutor<'e>,
    vis: &Visibility,
    marker: Uuid,
) -> DbResult<bool> {
    Ok(super::templates::by_uuid(ex, vis, marker).await?.is_none())
}

/// The templates `uuids` (those still there), each with its view's version.
pub async fn by_uuids<'e>(
    ex: impl PgExecutor<'e>,
    uuids: &[Uuid],
) -> DbResult<Vec<VersionedTemplate>> {
    Ok(sqlx::query_as::<_, VersionedTemplate>(
        "SELECT t.*, v.version AS view_version
           FROM cluster_template t LEFT JOIN template_view v ON v.template_uuid = t.uuid
          WHERE t.uuid = ANY($1)",
    )
    .bind(uuids)
    .fetch_all(ex)
    .await?)
}

/// Stores views built from rows read at their versions (as `cluster_views::store`).
pub async fn store(pool: &PgPool, built: &[(Uuid, i64, Vec<u8>)]) -> DbResult<()> {
    super::cluster_views::store_in(pool, "template_view", "template_uuid", built).await
}
