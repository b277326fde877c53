//! `cluster_template` rows: insert, visibility-scoped lookups, paginated lists, update, delete.

use std::collections::HashMap;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;
use sqlx::types::Json;
use sqlx::{FromRow, PgExecutor, PgPool};
use uuid::Uuid;

use super::DbResult;
use super::kept::KeptPool;
use crate::coalesce::Batch;
use crate::domain::labels::Labels;
use crate::domain::resources::Resolved;

#[derive(Debug, Clone, FromRow, PartialEq)]
pub struct TemplateRow {
    pub id: i64,
    pub uuid: Uuid,
    pub project_id: String,
    pub user_id: String,
    pub name: Option<String>,
    pub image_id: Option<String>,
    pub flavor_id: Option<String>,
    pub master_flavor_id: Option<String>,
    pub keypair_id: Option<String>,
    pub external_network_id: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub network_driver: Option<String>,
    pub volume_driver: Option<String>,
    pub dns_nameserver: Option<String>,
    pub apiserver_port: Option<i32>,
    pub docker_volume_size: Option<i32>,
    pub docker_storage_driver: Option<String>,
    pub cluster_distro: Option<String>,
    pub coe: Option<String>,
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
    pub registry_enabled: bool,
    pub labels: Json<Labels>,
    pub tls_disabled: bool,
    pub public: bool,
    pub server_type: Option<String>,
    pub insecure_registry: Option<String>,
    pub master_lb_enabled: bool,
    pub floating_ip_enabled: bool,
    pub hidden: bool,
    pub tags: Option<String>,
    pub driver: Option<String>,
    /// OpenStack ids the template resolved to (Glance/Nova/Neutron).
    pub resolved: Json<Resolved>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// Columns a client may sort templates by (Magnum accepts any model column): the keys, who
/// owns it, what the owner sets (but our own resolved look-ups) and the timestamps.
pub static SORT_KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    ["id", "uuid", "project_id", "user_id"]
        .into_iter()
        .chain(SETTABLE.into_iter().filter(|c| *c != "resolved"))
        .chain(["created_at", "updated_at"])
        .collect()
});

/// Which templates a caller can see.
#[derive(Debug, Clone)]
pub enum Visibility {
    /// Admin: every template.
    All,
    /// The project's own templates plus public, non-hidden ones.
    Project(String),
}

impl Visibility {
    pub(super) fn sql(&self, param: usize) -> String {
        self.sql_of("t", param)
    }

    /// [`Self::sql`] for the table aliased `alias`.
    pub(super) fn sql_of(&self, alias: &str, param: usize) -> String {
        match self {
            Visibility::All => "TRUE".into(),
            Visibility::Project(_) => {
                format!(
                    "({alias}.project_id = ${param} OR ({alias}.public AND NOT {alias}.hidden))"
                )
            }
        }
    }
    pub(super) fn project(&self) -> &str {
        match self {
            Visibility::All => "",
            Visibility::Project(p) => p,
        }
    }

    /// Whether template `t` is visible ([`Self::sql`]'s condition).
    fn holds(&self, t: &TemplateRow) -> bool {
        match self {
            Visibility::All => true,
            Visibility::Project(p) => t.project_id == *p || (t.public && !t.hidden),
        }
    }
}

/// The columns a template's owner sets, in the order [`bind_settable`] binds them: the one list
/// both `insert` and `update` are written from.
const SETTABLE: [&str; 31] = [
    "name",
    "image_id",
    "flavor_id",
    "master_flavor_id",
    "keypair_id",
    "external_network_id",
    "fixed_network",
    "fixed_subnet",
    "network_driver",
    "volume_driver",
    "dns_nameserver",
    "apiserver_port",
    "docker_volume_size",
    "docker_storage_driver",
    "cluster_distro",
    "coe",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "registry_enabled",
    "labels",
    "tls_disabled",
    "public",
    "server_type",
    "insecure_registry",
    "master_lb_enabled",
    "floating_ip_enabled",
    "hidden",
    "tags",
    "driver",
    "resolved",
];

type TemplateQuery<'q> =
    sqlx::query::QueryAs<'q, sqlx::Postgres, TemplateRow, sqlx::postgres::PgArguments>;

/// Binds `t`'s [`SETTABLE`] columns, in that order.
fn bind_settable<'q>(q: TemplateQuery<'q>, t: &'q TemplateRow) -> TemplateQuery<'q> {
    q.bind(&t.name)
        .bind(&t.image_id)
        .bind(&t.flavor_id)
        .bind(&t.master_flavor_id)
        .bind(&t.keypair_id)
        .bind(&t.external_network_id)
        .bind(&t.fixed_network)
        .bind(&t.fixed_subnet)
        .bind(&t.network_driver)
        .bind(&t.volume_driver)
        .bind(&t.dns_nameserver)
        .bind(t.apiserver_port)
        .bind(t.docker_volume_size)
        .bind(&t.docker_storage_driver)
        .bind(&t.cluster_distro)
        .bind(&t.coe)
        .bind(&t.http_proxy)
        .bind(&t.https_proxy)
        .bind(&t.no_proxy)
        .bind(t.registry_enabled)
        .bind(&t.labels)
        .bind(t.tls_disabled)
        .bind(t.public)
        .bind(&t.server_type)
        .bind(&t.insecure_registry)
        .bind(t.master_lb_enabled)
        .bind(t.floating_ip_enabled)
        .bind(t.hidden)
        .bind(&t.tags)
        .bind(&t.driver)
        .bind(&t.resolved)
}

/// `INSERT … (uuid, project_id, user_id, SETTABLE…) VALUES ($1, …) RETURNING *`.
static INSERT: LazyLock<String> = LazyLock::new(|| {
    let params: Vec<String> = (1..=SETTABLE.len() + 3).map(|i| format!("${i}")).collect();
    format!(
        "INSERT INTO cluster_template (uuid, project_id, user_id, {}) VALUES ({}) RETURNING *",
        SETTABLE.join(", "),
        params.join(", ")
    )
});

/// `UPDATE … SET SETTABLE=$2…, updated_at=now() WHERE uuid=$1 RETURNING *`.
static UPDATE: LazyLock<String> = LazyLock::new(|| {
    let sets: Vec<String> = SETTABLE
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c}=${}", i + 2))
        .collect();
    format!(
        "UPDATE cluster_template SET {}, updated_at=now() WHERE uuid=$1 RETURNING *",
        sets.join(", ")
    )
});

pub async fn insert(pool: &PgPool, t: &TemplateRow) -> DbResult<TemplateRow> {
    let q = sqlx::query_as::<_, TemplateRow>(AssertSqlSafe(INSERT.as_str()))
        .bind(t.uuid)
        .bind(&t.project_id)
        .bind(&t.user_id);
    Ok(bind_settable(q, t).fetch_one(pool).await?)
}

/// Writes every mutable column of `t` (matched by uuid) and bumps `updated_at`.
pub async fn update(pool: &PgPool, t: &TemplateRow) -> DbResult<TemplateRow> {
    let q = sqlx::query_as::<_, TemplateRow>(AssertSqlSafe(UPDATE.as_str())).bind(t.uuid);
    Ok(bind_settable(q, t).fetch_one(pool).await?)
}

pub async fn by_uuid<'e>(
    ex: impl PgExecutor<'e>,
    vis: &Visibility,
    uuid: Uuid,
) -> DbResult<Option<TemplateRow>> {
    let sql = format!(
        "SELECT * FROM cluster_template t WHERE t.uuid = $1 AND {}",
        vis.sql(2)
    );
    Ok(sqlx::query_as::<_, TemplateRow>(AssertSqlSafe(sql))
        .bind(uuid)
        .bind(vis.project())
        .fetch_optional(ex)
        .await?)
}

/// Templates looked up by uuid, as every create and nodegroup create does: a row read in the
/// caller's template generation (`view_cache::ViewCache::template_generation`, which only a
/// template change moves) is reused within it, without a statement; otherwise concurrent
/// look-ups waiting for a statement are read in the next one (`coalesce::Batch`; at most
/// `in_flight` at once). Each caller's visibility is checked on the row it gets.
#[derive(Debug)]
pub struct ByUuid {
    batch: Batch<Uuid, TemplateRow>,
    /// For a look-up alone when the batch's statement failed.
    reads: KeptPool,
    /// Rows by uuid with the generation they were read in. Templates are few (one per
    /// offering, not per cluster); past [`ByUuid::MAX_ROWS`] the rows go and are read again.
    reused: std::sync::Mutex<HashMap<Uuid, (u64, TemplateRow)>>,
}

impl ByUuid {
    const MAX_ROWS: usize = 4096;

    pub fn new(reads: KeptPool, in_flight: usize) -> Self {
        Self {
            // The function's statement is planned once per connection (its migration says why).
            batch: super::batched_by_uuid(
                reads.clone(),
                in_flight,
                "SELECT * FROM magnum_capi_templates_by_uuid($1)",
                |t| t.uuid,
            ),
            reads,
            reused: std::sync::Mutex::default(),
        }
    }

    /// [`by_uuid`]: the row read in `generation` when there is one (`None`: nothing is reused
    /// now), else read with the concurrent look-ups (alone when their statement failed) and
    /// kept for `generation`. The generation is the one taken before the read, so a change
    /// committed meanwhile leaves the row under a retired one.
    pub async fn get(
        &self,
        vis: &Visibility,
        uuid: Uuid,
        generation: Option<u64>,
    ) -> DbResult<Option<TemplateRow>> {
        if let Some(g) = generation
            && let Some((_, t)) = self.rows().get(&uuid).filter(|(at, _)| *at == g)
        {
            return Ok(Some(t.clone()).filter(|t| vis.holds(t)));
        }
        let row = match self.batch.get(uuid).await {
            Ok(t) => t,
            Err(()) => by_uuid(&self.reads, &Visibility::All, uuid).await?,
        };
        if let (Some(g), Some(t)) = (generation, &row) {
            let mut rows = self.rows();
            if rows.len() >= Self::MAX_ROWS {
                rows.clear();
            }
            rows.insert(uuid, (g, t.clone()));
        }
        Ok(row.filter(|t| vis.holds(t)))
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, (u64, TemplateRow)>> {
        self.reused.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub async fn by_id<'e>(
    ex: impl PgExecutor<'e>,
    vis: &Visibility,
    id: i64,
) -> DbResult<Option<TemplateRow>> {
    let sql = format!(
        "SELECT * FROM cluster_template t WHERE t.id = $1 AND {}",
        vis.sql(2)
    );
    Ok(sqlx::query_as::<_, TemplateRow>(AssertSqlSafe(sql))
        .bind(id)
        .bind(vis.project())
        .fetch_optional(ex)
        .await?)
}

/// Up to two visible templates called `name` (two are enough to detect ambiguity).
pub async fn by_name<'e>(
    ex: impl PgExecutor<'e>,
    vis: &Visibility,
    name: &str,
) -> DbResult<Vec<TemplateRow>> {
    let sql = format!(
        "SELECT * FROM cluster_template t WHERE t.name = $1 AND {} ORDER BY t.id LIMIT 2",
        vis.sql(2)
    );
    Ok(sqlx::query_as::<_, TemplateRow>(AssertSqlSafe(sql))
        .bind(name)
        .bind(vis.project())
        .fetch_all(ex)
        .await?)
}

/// Whether any cluster references the template.
pub async fn in_use<'e>(ex: impl PgExecutor<'e>, uuid: Uuid) -> DbResult<bool> {
    let (used,): (bool,) =
        sqlx::query_as("SELECT EXISTS (SELECT 1 FROM cluster WHERE cluster_template_id = $1)")
            .bind(uuid)
            .fetch_one(ex)
            .await?;
    Ok(used)
}

/// Deletes the template; `false` if it is (still) referenced, by a cluster on it or by an
/// upgrade in flight that left it (a failed one goes back to it).
pub async fn delete(pool: &PgPool, uuid: Uuid) -> DbResult<bool> {
    let res = sqlx::query(
        "DELETE FROM cluster_template WHERE uuid = $1
           AND NOT EXISTS (SELECT 1 FROM cluster WHERE cluster_template_id = $1
                              OR upgrade_from->>'template' = $1::text)",
    )
    .bind(uuid)
    .execute(pool)
    .await?;
    Ok(res.rows_affected() == 1)
}
