//! `cluster_view`: each cluster's serialised view stored beside it (the bytes and their
//! version; migrations/20261127100000_stored_cluster_views.sql retires them on every change):
//! the heads of a page or a show with their stored bodies, and storing bodies built for a version.

use sqlx::{AssertSqlSafe, FromRow, PgExecutor, PgPool};
use uuid::Uuid;

use crate::coalesce::Batch;

use super::DbResult;
use super::clusters::Scope;
use super::kept::KeptPool;
use super::page::PageQuery;

/// A cluster of a page (or a show): what a stored view does not carry, and the view.
#[derive(Debug, Clone, FromRow)]
pub struct ViewHead {
    pub id: i64,
    pub uuid: Uuid,
    pub project_id: String,
    pub user_id: String,
    pub management_cluster: Option<String>,
    /// `None`: not built yet, or retired since.
    pub body: Option<Vec<u8>>,
}

/// The heads' select list and join, as a literal (the show's statements are made from it at
/// compile time).
macro_rules! head_sql {
    () => {
        "SELECT t.id, t.uuid, t.project_id, t.user_id, t.management_cluster, v.body
           FROM cluster t LEFT JOIN cluster_view v ON v.cluster_uuid = t.uuid
          WHERE "
    };
}
const HEAD_SQL: &str = head_sql!();

/// A page of clusters in `scope`, in the page's order, after the cluster `marker` when there is
/// one (found in the same statement; none when `scope` does not hold it: see
/// [`marker_missing`]).
pub async fn page<'e>(
    ex: impl PgExecutor<'e>,
    scope: &Scope,
    page: &PageQuery,
    marker: Option<Uuid>,
) -> DbResult<Vec<ViewHead>> {
    if let (Scope::Project(project), "id") = (scope, page.sort_key) {
        // One range of `cluster (project_id, id)`, planned once per connection (its migration
        // says why).
        return Ok(sqlx::query_as::<_, ViewHead>(
            "SELECT * FROM magnum_capi_project_cluster_page($1, $2, $3, $4)",
        )
        .bind(project)
        .bind(marker)
        .bind(page.desc)
        .bind(page.limit)
        .fetch_all(ex)
        .await?);
    }
    let mut sql = format!("{HEAD_SQL}{}", scope.sql(1));
    let found = match scope {
        Scope::All => "(SELECT m.id FROM cluster m WHERE m.uuid = $2)",
        Scope::Project(_) => "(SELECT m.id FROM cluster m WHERE m.uuid = $2 AND m.project_id = $1)",
    };
    let after = marker.map(|_| page.after_sql("cluster", found));
    page.push_after(&mut sql, after.as_deref());
    // In another order, or for an admin, planned for the project at hand each time (not a
    // generic plan): one large project among many small ones would otherwise get the small
    // ones' plan (fetch the project's clusters through its index and sort them all), and with
    // few projects, a small one the large one's (walk the primary key past every other
    // project's rows).
    Ok(sqlx::query_as::<_, ViewHead>(AssertSqlSafe(sql))
        .persistent(false)
        .bind(scope.project())
        .bind(marker)
        .fetch_all(ex)
        .await?)
}

/// Whether the marker of a [`page`] that came back empty is missing from `scope` (the caller's
/// 404) rather than the last of the clusters.
pub async fn marker_missing<'e>(
    ex: impl PgExecutor<'e>,
    scope: &Scope,
    marker: Uuid,
) -> DbResult<bool> {
    Ok(one(ex, scope, marker).await?.is_none())
}

/// One visible cluster by uuid.
pub async fn one<'e>(
    ex: impl PgExecutor<'e>,
    scope: &Scope,
    uuid: Uuid,
) -> DbResult<Option<ViewHead>> {
    // One statement per scope, written once (`Scope::sql`'s conditions): a show, the hottest
    // read, makes no SQL per request.
    let sql = match scope {
        Scope::All => concat!(head_sql!(), "t.uuid = $2"),
        Scope::Project(_) => concat!(head_sql!(), "t.project_id = $1 AND t.uuid = $2"),
    };
    Ok(sqlx::query_as::<_, ViewHead>(sql)
        .bind(scope.project())
        .bind(uuid)
        .fetch_optional(ex)
        .await?)
}

/// Shows read together: concurrent shows of any clusters, in any scope, waiting for a statement
/// are read in the next one (`coalesce::Batch`; at most `in_flight` at once, on `reads`, so a
/// flood of shows leaves the other connections to everything else).
pub fn shows(reads: KeptPool, in_flight: usize) -> Batch<Uuid, ViewHead> {
    // The function's statement is planned once per connection (its migration says why).
    super::batched_by_uuid(
        reads,
        in_flight,
        "SELECT * FROM magnum_capi_cluster_heads($1)",
        |h| h.uuid,
    )
}

/// [`one`] read with the concurrent shows of `shows` (alone when their statement failed).
pub async fn one_of<'e>(
    shows: &Batch<Uuid, ViewHead>,
    ex: impl PgExecutor<'e>,
    scope: &Scope,
    uuid: Uuid,
) -> DbResult<Option<ViewHead>> {
    match shows.get(uuid).await {
        Ok(head) => Ok(head.filter(|h| scope.holds(&h.project_id))),
        Err(()) => one(ex, scope, uuid).await,
    }
}

/// Stores `body` as the view of `uuid` at `version`: only while no change moved the version
/// since the rows it was built from were read, and without waiting for a writer holding the
/// row (its change retires it anyway) or another reader storing it.
pub async fn store(pool: &PgPool, built: &[(Uuid, i64, Vec<u8>)]) -> DbResult<()> {
    store_in(pool, "cluster_view", "cluster_uuid", built).await
}

/// [`store`] into `table` (`cluster_view` or `template_view`) keyed by `key`.
pub(super) async fn store_in(
    pool: &PgPool,
    table: &'static str,
    key: &'static str,
    built: &[(Uuid, i64, Vec<u8>)],
) -> DbResult<()> {
    let uuids: Vec<Uuid> = built.iter().map(|b| b.0).collect();
    let versions: Vec<i64> = built.iter().map(|b| b.1).collect();
    let bodies: Vec<&[u8]> = built.iter().map(|b| b.2.as_slice()).collect();
    let sql = format!(
        "UPDATE {table} v SET body = n.body
           FROM unnest($1::uuid[], $2::bigint[], $3::bytea[]) AS n(uuid, version, body)
          WHERE v.{key} = n.uuid AND v.version = n.version AND v.body IS NULL
            AND v.{key} IN (SELECT {key} FROM {table} WHERE {key} = ANY($1) FOR UPDATE SKIP LOCKED)"
    );
    sqlx::query(AssertSqlSafe(sql))
        .bind(&uuids)
        .bind(&versions)
        .bind(&bodies)
        .execute(pool)
        .await?;
    Ok(())
}
