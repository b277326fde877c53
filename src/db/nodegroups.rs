//! `nodegroup` rows: insert, lookups within a cluster, paginated lists, counts and status writes.

use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgArguments;
use sqlx::postgres::PgRow;
use sqlx::query::QueryAs;
use sqlx::types::Json;
use sqlx::{FromRow, PgExecutor, Postgres, Row};
use uuid::Uuid;

use super::DbResult;
use super::clusters::Scope;
use super::page::PageQuery;
use crate::domain::labels::Labels;

#[derive(Debug, Clone, FromRow, PartialEq)]
pub struct NodegroupRow {
    pub id: i64,
    pub uuid: Uuid,
    pub name: String,
    pub cluster_id: Uuid,
    pub project_id: String,
    pub docker_volume_size: Option<i32>,
    pub labels: Json<Labels>,
    pub flavor_id: Option<String>,
    pub image_id: Option<String>,
    pub node_addresses: Json<Vec<String>>,
    pub node_count: i32,
    pub role: String,
    pub max_node_count: Option<i32>,
    pub min_node_count: i32,
    pub is_default: bool,
    pub stack_id: Option<String>,
    pub status: Option<String>,
    pub status_reason: Option<String>,
    pub version: Option<String>,
    pub node_labels: Option<Json<serde_json::Value>>,
    pub node_taints: Option<Json<serde_json::Value>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl NodegroupRow {
    pub fn is_master(&self) -> bool {
        self.role == "master"
    }
}

impl NodegroupRow {
    /// The row a create records for the default nodegroup `plan` of `cluster`, as `uuid`: in
    /// `CREATE_IN_PROGRESS`, created with the cluster.
    pub fn from_plan(
        plan: &crate::domain::new_cluster::NodegroupPlan,
        uuid: Uuid,
        cluster: &super::clusters::ClusterRow,
    ) -> Self {
        let cluster = crate::domain::spec::Cluster::from(cluster.clone());
        crate::domain::spec::Nodegroup::from_plan(plan, uuid, &cluster).into()
    }
}

pub const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "name",
    "cluster_id",
    "project_id",
    "docker_volume_size",
    "labels",
    "flavor_id",
    "image_id",
    "node_addresses",
    "node_count",
    "role",
    "max_node_count",
    "min_node_count",
    "is_default",
    "stack_id",
    "status",
    "status_reason",
    "version",
    "created_at",
    "updated_at",
];

pub async fn insert<'e>(ex: impl PgExecutor<'e>, n: &NodegroupRow) -> DbResult<NodegroupRow> {
    let q = sqlx::query_as::<_, NodegroupRow>(
        "INSERT INTO nodegroup (uuid, name, cluster_id, project_id, docker_volume_size, labels,
            flavor_id, image_id, node_addresses, node_count, role, max_node_count, min_node_count,
            is_default, stack_id, status, status_reason, version, node_labels, node_taints)
         VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20)
         RETURNING *",
    );
    Ok(bind_columns(q, n).fetch_one(ex).await?)
}

/// Binds the twenty columns an insert of `n` writes, in [`insert`]'s order.
fn bind_columns<'q, O>(
    q: QueryAs<'q, Postgres, O, PgArguments>,
    n: &'q NodegroupRow,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    q.bind(n.uuid)
        .bind(&n.name)
        .bind(n.cluster_id)
        .bind(&n.project_id)
        .bind(n.docker_volume_size)
        .bind(&n.labels)
        .bind(&n.flavor_id)
        .bind(&n.image_id)
        .bind(&n.node_addresses)
        .bind(n.node_count)
        .bind(&n.role)
        .bind(n.max_node_count)
        .bind(n.min_node_count)
        .bind(n.is_default)
        .bind(&n.stack_id)
        .bind(&n.status)
        .bind(&n.status_reason)
        .bind(&n.version)
        .bind(&n.node_labels)
        .bind(&n.node_taints)
}

/// The nodegroups of one cluster, ordered by id.
pub async fn of_cluster<'e>(ex: impl PgExecutor<'e>, cluster: Uuid) -> DbResult<Vec<NodegroupRow>> {
    Ok(sqlx::query_as::<_, NodegroupRow>(
        "SELECT * FROM nodegroup WHERE cluster_id = $1 ORDER BY id",
    )
    .bind(cluster)
    .fetch_all(ex)
    .await?)
}

/// The nodegroups of every one of `clusters`, by cluster then in nodegroup order.
pub async fn of_clusters<'e>(
    ex: impl PgExecutor<'e>,
    clusters: &[Uuid],
) -> DbResult<Vec<NodegroupRow>> {
    Ok(sqlx::query_as::<_, NodegroupRow>(
        "SELECT * FROM nodegroup WHERE cluster_id = ANY($1) ORDER BY cluster_id, id",
    )
    .bind(clusters)
    .fetch_all(ex)
    .await?)
}

/// How a nodegroup is named in a path.
#[derive(Debug, Clone)]
pub enum NgIdent {
    Id(i64),
    Uuid(Uuid),
    Name(String),
}

/// Up to two nodegroups of `cluster` matching `ident` (visible to `project`, or to all if `None`).
pub async fn find<'e>(
    ex: impl PgExecutor<'e>,
    cluster: Uuid,
    project: Option<&str>,
    ident: &NgIdent,
) -> DbResult<Vec<NodegroupRow>> {
    let query = sqlx::query_as::<_, NodegroupRow>(AssertSqlSafe(find_sql(ident)));
    Ok(bind_ident(query.bind(cluster).bind(project), ident)
        .fetch_all(ex)
        .await?)
}

/// [`find`]'s statement: the cluster `$1`, the project `$2`, the nodegroup's `ident` `$3`.
fn find_sql(ident: &NgIdent) -> String {
    let cond = match ident {
        NgIdent::Id(_) => "id = $3",
        NgIdent::Uuid(_) => "uuid = $3",
        NgIdent::Name(_) => "name = $3",
    };
    format!(
        "SELECT * FROM nodegroup t WHERE cluster_id = $1 AND ($2::text IS NULL OR project_id = $2)
           AND {cond} ORDER BY t.id LIMIT 2"
    )
}

fn bind_ident<'q, O>(
    q: QueryAs<'q, Postgres, O, PgArguments>,
    ident: &NgIdent,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    match ident {
        NgIdent::Id(i) => q.bind(*i),
        NgIdent::Uuid(u) => q.bind(*u),
        NgIdent::Name(n) => q.bind(n.clone()),
    }
}

pub async fn list<'e>(
    ex: impl PgExecutor<'e>,
    cluster: Uuid,
    project: Option<&str>,
    role: Option<&str>,
    page: &PageQuery,
) -> DbResult<Vec<NodegroupRow>> {
    let query = sqlx::query_as::<_, NodegroupRow>(AssertSqlSafe(list_sql(page)));
    Ok(bind_list(query, cluster, project, role, page)
        .fetch_all(ex)
        .await?)
}

/// [`list`]'s statement: the cluster `$1`, the project `$2`, the role `$3`, the marker's id `$4`
/// (when the page has one), the page's size `$5`.
fn list_sql(page: &PageQuery) -> String {
    let mut sql = String::from(
        "SELECT * FROM nodegroup t WHERE t.cluster_id = $1 AND ($2::text IS NULL OR t.project_id = $2)
           AND ($3::text IS NULL OR t.role = $3)",
    );
    if let Some(after) = page.after_marker_sql("nodegroup", 4) {
        sql.push_str(" AND ");
        sql.push_str(&after);
    }
    sql.push(' ');
    sql.push_str(&page.order_sql());
    sql.push_str(" LIMIT $5");
    sql
}

fn bind_list<'q, O>(
    q: QueryAs<'q, Postgres, O, PgArguments>,
    cluster: Uuid,
    project: Option<&'q str>,
    role: Option<&'q str>,
    page: &PageQuery,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    q.bind(cluster)
        .bind(project)
        .bind(role)
        .bind(page.marker_id.unwrap_or(0))
        .bind(page.limit)
}

/// What a nodegroup read needs of its cluster (its owner and labels), read in the same statement
/// as the nodegroups it picks.
#[derive(Debug)]
pub struct OfCluster {
    pub project_id: String,
    pub user_id: String,
    pub labels: Json<Labels>,
    pub nodegroups: Vec<NodegroupRow>,
}

/// A nodegroup row read beside its cluster's columns ([`with_cluster`]): none when the
/// cluster has no nodegroup the read picks.
struct Picked {
    project_id: String,
    user_id: String,
    labels: Json<Labels>,
    nodegroup: Option<NodegroupRow>,
}

impl<'r> FromRow<'r, PgRow> for Picked {
    fn from_row(row: &'r PgRow) -> Result<Self, sqlx::Error> {
        let some: Option<i64> = row.try_get("id")?;
        Ok(Picked {
            project_id: row.try_get("of_project_id")?,
            user_id: row.try_get("of_user_id")?,
            labels: row.try_get("of_labels")?,
            nodegroup: some.map(|_| NodegroupRow::from_row(row)).transpose()?,
        })
    }
}

/// `inner` (a statement of nodegroups of the cluster `$1`, in the order `order`) with that
/// cluster's owner and labels when `scope` (its project: parameter `scope_param`) holds it.
fn with_cluster(inner: &str, scope: &Scope, scope_param: usize, order: &str) -> String {
    format!(
        "SELECT c.project_id AS of_project_id, c.user_id AS of_user_id, c.labels AS of_labels, t.*
           FROM cluster c LEFT JOIN ({inner}) t ON TRUE
          WHERE c.uuid = $1 AND {} {order}",
        scope.sql_on("c", scope_param)
    )
}

/// The rows of a [`with_cluster`] statement: none when the scope does not hold the cluster.
fn gathered(rows: Vec<Picked>) -> Option<OfCluster> {
    let mut rows = rows.into_iter();
    let first = rows.next()?;
    let nodegroups = first
        .nodegroup
        .into_iter()
        .chain(rows.filter_map(|r| r.nodegroup))
        .collect();
    Some(OfCluster {
        project_id: first.project_id,
        user_id: first.user_id,
        labels: first.labels,
        nodegroups,
    })
}

/// [`find`] with its cluster, in `scope`, in one statement (a nodegroup show by the cluster's
/// uuid): none when `scope` does not hold the cluster.
pub async fn find_of_cluster<'e>(
    ex: impl PgExecutor<'e>,
    scope: &Scope,
    cluster: Uuid,
    project: Option<&str>,
    ident: &NgIdent,
) -> DbResult<Option<OfCluster>> {
    let sql = with_cluster(&find_sql(ident), scope, 4, "ORDER BY t.id");
    let query = bind_ident(
        sqlx::query_as::<_, Picked>(AssertSqlSafe(sql))
            .bind(cluster)
            .bind(project),
        ident,
    );
    Ok(gathered(query.bind(scope.project()).fetch_all(ex).await?))
}

/// [`list`] with its cluster, in `scope`, in one statement (a page of nodegroups without a
/// marker, by the cluster's uuid): none when `scope` does not hold the cluster.
pub async fn list_of_cluster<'e>(
    ex: impl PgExecutor<'e>,
    scope: &Scope,
    cluster: Uuid,
    project: Option<&str>,
    role: Option<&str>,
    page: &PageQuery,
) -> DbResult<Option<OfCluster>> {
    let sql = with_cluster(&list_sql(page), scope, 6, &page.order_sql());
    let query = sqlx::query_as::<_, Picked>(AssertSqlSafe(sql));
    Ok(gathered(
        bind_list(query, cluster, project, role, page)
            .bind(scope.project())
            .fetch_all(ex)
            .await?,
    ))
}

/// The nodegroup's status as it is now (`""` when it has none); `None` when it is gone.
pub async fn status_of<'e>(ex: impl PgExecutor<'e>, uuid: Uuid) -> DbResult<Option<String>> {
    Ok(
        sqlx::query_scalar("SELECT COALESCE(status, '') FROM nodegroup WHERE uuid = $1")
            .bind(uuid)
            .fetch_optional(ex)
            .await?,
    )
}

pub async fn set_status<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    status: &str,
    reason: Option<&str>,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE nodegroup SET status = $2, status_reason = $3, updated_at = now() WHERE uuid = $1",
    )
    .bind(uuid)
    .bind(status)
    .bind(reason)
    .execute(ex)
    .await?;
    Ok(())
}

/// Sets the status of every nodegroup of a cluster.
pub async fn set_status_of_cluster<'e>(
    ex: impl PgExecutor<'e>,
    cluster: Uuid,
    status: &str,
    reason: Option<&str>,
) -> DbResult<()> {
    sqlx::query(
        "UPDATE nodegroup SET status = $2, status_reason = $3, updated_at = now() WHERE cluster_id = $1",
    )
    .bind(cluster)
    .bind(status)
    .bind(reason)
    .execute(ex)
    .await?;
    Ok(())
}

pub async fn set_node_count<'e>(ex: impl PgExecutor<'e>, uuid: Uuid, count: i32) -> DbResult<()> {
    sqlx::query("UPDATE nodegroup SET node_count = $2, updated_at = now() WHERE uuid = $1")
        .bind(uuid)
        .bind(count)
        .execute(ex)
        .await?;
    Ok(())
}

/// Writes the PATCH-able fields (the flavor: `[upgrades] nodegroup_flavor_change`).
pub async fn update_spec<'e>(ex: impl PgExecutor<'e>, n: &NodegroupRow) -> DbResult<NodegroupRow> {
    Ok(sqlx::query_as::<_, NodegroupRow>(
        "UPDATE nodegroup SET min_node_count = $2, max_node_count = $3, node_labels = $4,
            node_taints = $5, flavor_id = $6, updated_at = now() WHERE uuid = $1 RETURNING *",
    )
    .bind(n.uuid)
    .bind(n.min_node_count)
    .bind(n.max_node_count)
    .bind(&n.node_labels)
    .bind(&n.node_taints)
    .bind(&n.flavor_id)
    .fetch_one(ex)
    .await?)
}

pub async fn set_image<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    image_id: Option<&str>,
) -> DbResult<()> {
    sqlx::query("UPDATE nodegroup SET image_id = COALESCE($2, image_id), updated_at = now() WHERE uuid = $1")
        .bind(uuid)
        .bind(image_id)
        .execute(ex)
        .await?;
    Ok(())
}

pub async fn set_flavor<'e>(ex: impl PgExecutor<'e>, uuid: Uuid, flavor_id: &str) -> DbResult<()> {
    sqlx::query("UPDATE nodegroup SET flavor_id = $2, updated_at = now() WHERE uuid = $1")
        .bind(uuid)
        .bind(flavor_id)
        .execute(ex)
        .await?;
    Ok(())
}

pub async fn delete<'e>(ex: impl PgExecutor<'e>, uuid: Uuid) -> DbResult<()> {
    sqlx::query("DELETE FROM nodegroup WHERE uuid = $1")
        .bind(uuid)
        .execute(ex)
        .await?;
    Ok(())
}

pub async fn set_addresses<'e>(
    ex: impl PgExecutor<'e>,
    uuid: Uuid,
    addresses: &[String],
) -> DbResult<()> {
    sqlx::query("UPDATE nodegroup SET node_addresses = $2, updated_at = now() WHERE uuid = $1")
        .bind(uuid)
        .bind(Json(addresses))
        .execute(ex)
        .await?;
    Ok(())
}
