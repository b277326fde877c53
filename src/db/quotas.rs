//! `quotas` rows: one hard limit per (project, resource).

use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;
use sqlx::{FromRow, PgExecutor, PgPool};

use super::DbResult;
use super::page::PageQuery;

#[derive(Debug, Clone, FromRow, PartialEq)]
pub struct QuotaRow {
    pub id: i64,
    pub project_id: String,
    pub resource: String,
    pub hard_limit: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

pub const SORT_KEYS: &[&str] = &[
    "id",
    "project_id",
    "resource",
    "hard_limit",
    "created_at",
    "updated_at",
];

pub async fn insert(
    pool: &PgPool,
    project_id: &str,
    resource: &str,
    hard_limit: i32,
) -> DbResult<QuotaRow> {
    Ok(sqlx::query_as::<_, QuotaRow>(
        "INSERT INTO quotas (project_id, resource, hard_limit) VALUES ($1, $2, $3) RETURNING *",
    )
    .bind(project_id)
    .bind(resource)
    .bind(hard_limit)
    .fetch_one(pool)
    .await?)
}

pub async fn get<'e>(
    ex: impl PgExecutor<'e>,
    project_id: &str,
    resource: &str,
) -> DbResult<Option<QuotaRow>> {
    Ok(sqlx::query_as::<_, QuotaRow>(
        "SELECT * FROM quotas WHERE project_id = $1 AND resource = $2",
    )
    .bind(project_id)
    .bind(resource)
    .fetch_optional(ex)
    .await?)
}

pub async fn exists_id(pool: &PgPool, id: i64, project: Option<&str>) -> DbResult<bool> {
    let (b,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM quotas WHERE id = $1 AND ($2::text IS NULL OR project_id = $2))",
    )
    .bind(id)
    .bind(project)
    .fetch_one(pool)
    .await?;
    Ok(b)
}

pub async fn list(
    pool: &PgPool,
    project: Option<&str>,
    page: &PageQuery,
) -> DbResult<Vec<QuotaRow>> {
    let mut sql =
        String::from("SELECT * FROM quotas t WHERE ($1::text IS NULL OR t.project_id = $1)");
    if let Some(after) = page.after_marker_sql("quotas", 2) {
        sql.push_str(" AND ");
        sql.push_str(&after);
    }
    sql.push(' ');
    sql.push_str(&page.order_sql());
    sql.push_str(" LIMIT $3");
    Ok(sqlx::query_as::<_, QuotaRow>(AssertSqlSafe(sql))
        .bind(project)
        .bind(page.marker_id.unwrap_or(0))
        .bind(page.limit)
        .fetch_all(pool)
        .await?)
}

pub async fn update(
    pool: &PgPool,
    project_id: &str,
    resource: &str,
    hard_limit: i32,
) -> DbResult<Option<QuotaRow>> {
    Ok(sqlx::query_as::<_, QuotaRow>(
        "UPDATE quotas SET hard_limit = $3, updated_at = now()
          WHERE project_id = $1 AND resource = $2 RETURNING *",
    )
    .bind(project_id)
    .bind(resource)
    .bind(hard_limit)
    .fetch_optional(pool)
    .await?)
}

pub async fn delete(pool: &PgPool, project_id: &str, resource: &str) -> DbResult<bool> {
    let r = sqlx::query("DELETE FROM quotas WHERE project_id = $1 AND resource = $2")
        .bind(project_id)
        .bind(resource)
        .execute(pool)
        .await?;
    Ok(r.rows_affected() == 1)
}
