//! Cluster creates recorded in one statement each, alone or together: every create's project
//! quota checked under the project's lock, then its cluster, two default nodegroups and create
//! operation inserted — one round trip to PostgreSQL and one commit for all the creates of a
//! batch (the statement is its transaction).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use crate::coalesce::{Batch, BatchRead};

use super::clusters::ClusterRow;
use super::nodegroups::NodegroupRow;
use super::operations::NewOperation;
use super::{DbError, DbResult};
use crate::domain::labels::Labels;
use crate::domain::resources::Resolved;

/// What recording a create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The rows and the operation are committed.
    Created,
    /// The project holds `limit` clusters already: nothing was written.
    QuotaReached { limit: i64 },
}

/// Whether `project` is at its cluster quota (its `quotas` row, else `default_limit`), asked
/// under the project's lock as [`record_all`] asks it: the limit when it is reached.
async fn quota_reached(pool: &PgPool, project: &str, default_limit: i64) -> DbResult<Option<i64>> {
    let (reached,): (Option<i64>,) =
        sqlx::query_as("SELECT magnum_capi_cluster_quota_reached($1, $2)")
            .bind(project)
            .bind(default_limit)
            .fetch_one(pool)
            .await?;
    Ok(reached)
}

/// A create waiting to be recorded: the rows the statement writes, as one JSON document (the
/// columns by name), identified by its cluster's uuid.
#[derive(Debug, Clone)]
pub struct NewCluster {
    uuid: Uuid,
    doc: Arc<str>,
}

impl NewCluster {
    /// Cluster `c` with its master and worker nodegroups `ngs` and its create operation `op`.
    pub fn new(c: &ClusterRow, ngs: [&NodegroupRow; 2], op: &NewOperation<'_>) -> DbResult<Self> {
        let doc = Document {
            cluster: ClusterColumns {
                uuid: c.uuid,
                project_id: &c.project_id,
                user_id: &c.user_id,
                name: c.name.as_deref(),
                cluster_template_id: c.cluster_template_id,
                keypair: c.keypair.as_deref(),
                docker_volume_size: c.docker_volume_size,
                labels: &c.labels.0,
                master_flavor_id: c.master_flavor_id.as_deref(),
                flavor_id: c.flavor_id.as_deref(),
                stack_id: c.stack_id.as_deref(),
                status: &c.status,
                status_reason: c.status_reason.as_deref(),
                health_status: c.health_status.as_deref(),
                health_status_reason: &c.health_status_reason.0,
                create_timeout: c.create_timeout,
                discovery_url: c.discovery_url.as_deref(),
                fixed_network: c.fixed_network.as_deref(),
                fixed_subnet: c.fixed_subnet.as_deref(),
                floating_ip_enabled: c.floating_ip_enabled,
                master_lb_enabled: c.master_lb_enabled,
                resolved: &c.resolved.0,
                // The unnamed management cluster is NULL.
                management_cluster: c.management_cluster.as_deref().filter(|m| !m.is_empty()),
            },
            nodegroups: ngs.map(|n| NodegroupColumns::of(n, &c.labels.0)),
            operation: OperationColumns {
                cluster_uuid: op.cluster_uuid,
                nodegroup_uuid: op.nodegroup_uuid,
                kind: op.kind.as_str(),
                payload: &op.payload,
                request_id: op.request_id,
            },
        };
        // Written once, as text: a batch's statement is the documents joined.
        let doc = serde_json::to_string(&doc).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        Ok(Self {
            uuid: c.uuid,
            doc: doc.into(),
        })
    }
}

/// The rows of one create, by column name (`jsonb_populate_record` reads them so). A NULL is
/// left out (a missing key is NULL to `jsonb_populate_record`): the document is parsed by
/// PostgreSQL in the statement, where parsing was a fifth of its time (docs/benchmarks.md, "What a
/// create waits for").
#[derive(Serialize)]
struct Document<'a> {
    cluster: ClusterColumns<'a>,
    nodegroups: [NodegroupColumns<'a>; 2],
    operation: OperationColumns<'a>,
}

#[derive(Serialize)]
struct ClusterColumns<'a> {
    uuid: Uuid,
    project_id: &'a str,
    user_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    cluster_template_id: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    keypair: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    docker_volume_size: Option<i32>,
    labels: &'a Labels,
    #[serde(skip_serializing_if = "Option::is_none")]
    master_flavor_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flavor_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stack_id: Option<&'a str>,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    health_status: Option<&'a str>,
    health_status_reason: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    create_timeout: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    discovery_url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fixed_network: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fixed_subnet: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floating_ip_enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    master_lb_enabled: Option<bool>,
    resolved: &'a Resolved,
    #[serde(skip_serializing_if = "Option::is_none")]
    management_cluster: Option<&'a str>,
}

#[derive(Serialize)]
struct NodegroupColumns<'a> {
    uuid: Uuid,
    name: &'a str,
    cluster_id: Uuid,
    project_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    docker_volume_size: Option<i32>,
    /// Left out when they are the cluster's, as a create's nodegroups' are: the statement takes
    /// the cluster's then.
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<&'a Labels>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flavor_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_id: Option<&'a str>,
    node_addresses: &'a [String],
    node_count: i32,
    role: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_node_count: Option<i32>,
    min_node_count: i32,
    is_default: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stack_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_labels: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_taints: Option<&'a Value>,
}

impl<'a> NodegroupColumns<'a> {
    /// Nodegroup `n` of a cluster labelled `cluster_labels`.
    fn of(n: &'a NodegroupRow, cluster_labels: &Labels) -> Self {
        Self {
            uuid: n.uuid,
            name: &n.name,
            cluster_id: n.cluster_id,
            project_id: &n.project_id,
            docker_volume_size: n.docker_volume_size,
            labels: (n.labels.0 != *cluster_labels).then_some(&n.labels.0),
            flavor_id: n.flavor_id.as_deref(),
            image_id: n.image_id.as_deref(),
            node_addresses: &n.node_addresses.0,
            node_count: n.node_count,
            role: &n.role,
            max_node_count: n.max_node_count,
            min_node_count: n.min_node_count,
            is_default: n.is_default,
            stack_id: n.stack_id.as_deref(),
            status: n.status.as_deref(),
            status_reason: n.status_reason.as_deref(),
            version: n.version.as_deref(),
            node_labels: n.node_labels.as_ref().map(|j| &j.0),
            node_taints: n.node_taints.as_ref().map(|j| &j.0),
        }
    }
}

#[derive(Serialize)]
struct OperationColumns<'a> {
    cluster_uuid: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodegroup_uuid: Option<Uuid>,
    kind: &'a str,
    payload: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
}

/// A create is its cluster: two with one uuid are one create (a batch records it once).
impl PartialEq for NewCluster {
    fn eq(&self, other: &Self) -> bool {
        self.uuid == other.uuid
    }
}

impl Eq for NewCluster {}

impl Hash for NewCluster {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.uuid.hash(state);
    }
}

/// Records `creates` in one statement run as its own transaction (`ex` must not be inside one
/// that outlives it, or the projects' locks would be held longer); their outcomes in their
/// order. Each create's project quota (its `quotas` row, else `default_limit`) is checked under
/// the project's lock: `magnum_capi_cluster_quota_rooms` takes the projects' advisory locks in
/// the order of their keys and reads each one's cluster count (`cluster_project_count`, kept by
/// `cluster`'s triggers in the writing transaction) with a snapshot taken after its lock, so no
/// two concurrent statements can both take a project's last place. A project's creates take its
/// room in their order; the rest are refused with its limit and write nothing. The foreign keys
/// are checked when the statement ends, after all the inserts: one failure (a template deleted
/// meanwhile) fails them all.
pub async fn record_all<'e>(
    ex: impl PgExecutor<'e>,
    creates: &[NewCluster],
    default_limit: i64,
) -> DbResult<Vec<Recorded>> {
    // The documents joined into one JSON array (each is JSON text already).
    let mut docs =
        String::with_capacity(2 + creates.iter().map(|c| c.doc.len() + 1).sum::<usize>());
    docs.push('[');
    for (i, c) in creates.iter().enumerate() {
        if i > 0 {
            docs.push(',');
        }
        docs.push_str(&c.doc);
    }
    docs.push(']');
    // The statement is a function (migration 20261128120000) so that it is planned once per
    // connection: as a prepared statement it was planned again for every batch.
    let rows: Vec<(i64, Option<i64>)> = sqlx::query_as(
        "SELECT create_ord, quota_limit FROM magnum_capi_record_creates($1::jsonb, $2)",
    )
    .bind(docs)
    .bind(default_limit)
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(_, reached)| match reached {
            None => Recorded::Created,
            Some(limit) => Recorded::QuotaReached { limit },
        })
        .collect())
}

/// Records one create alone ([`record_all`] of one).
pub async fn record<'e>(
    ex: impl PgExecutor<'e>,
    create: &NewCluster,
    default_limit: i64,
) -> DbResult<Recorded> {
    let mut all = record_all(ex, std::slice::from_ref(create), default_limit).await?;
    all.pop().ok_or_else(|| {
        sqlx::Error::Protocol("the create's statement returned no outcome".into()).into()
    })
}

/// Whether a failed statement is known to have written nothing on a connection still usable:
/// PostgreSQL answered it with an error (a constraint, a lock, a cast), not with the end of the
/// connection (SQLSTATE classes 08 and 57: the session was cut or is going away).
fn refused(e: &DbError) -> bool {
    let source = match e {
        DbError::Constraint { source, .. }
        | DbError::Contention(source)
        | DbError::Other(source) => source,
        DbError::Unavailable(_) | DbError::Migrate(_) => return false,
    };
    source.as_database_error().is_some_and(|d| {
        !d.code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57"))
    })
}

/// `run` again, up to three times in all, while it fails on its connection rather than on
/// PostgreSQL's word: the pool drops a connection that broke, and the next try takes another
/// (after a cut, every idle connection of the pool may be broken at once).
async fn again<T, F, Fut>(run: F) -> DbResult<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = DbResult<T>>,
{
    let mut tries = 1;
    loop {
        match run().await {
            Err(e) if tries < 3 && !refused(&e) => {
                tracing::debug!(error = %e, "a statement's connection broke; trying another");
                tries += 1;
            }
            done => return done,
        }
    }
}

/// The uuids of `uuids` whose clusters exist.
async fn existing(pool: &PgPool, uuids: &[Uuid]) -> DbResult<Vec<Uuid>> {
    Ok(
        sqlx::query_scalar("SELECT uuid FROM cluster WHERE uuid = ANY($1)")
            .bind(uuids)
            .fetch_all(pool)
            .await?,
    )
}

/// The connection batches of creates are recorded on, and its backend (to end it when a reply
/// was lost): its process id and start, which no other backend shares.
struct Kept {
    conn: PgConnection,
    pid: i32,
    started: chrono::DateTime<chrono::Utc>,
}

/// How the kept connection is made and bounded.
#[derive(Debug, Clone)]
struct Keeping {
    pool: PgPool,
    default_limit: i64,
    /// The pool's connect options with the statement timeout and keepalive of a batch.
    options: PgConnectOptions,
    /// How long a batch (or the connection's making) is waited for: the statement timeout and
    /// half as much again for the network, after which the connection is counted lost.
    wait: Duration,
}

impl Keeping {
    fn new(pool: PgPool, default_limit: i64, timeout: Duration) -> Self {
        let timeout = timeout.max(Duration::from_millis(100));
        let ms = timeout.as_millis().to_string();
        // Settings of the session, given when it starts: PostgreSQL ends a statement (and a
        // transaction left open) that runs past the timeout, and probes an idle client's
        // socket (TCP; ignored on a Unix socket) so a backend whose client vanished goes. sqlx
        // sets no socket option on its own side; the wait below bounds it there.
        let options = (*pool.connect_options()).clone().options([
            ("statement_timeout", ms.as_str()),
            ("idle_in_transaction_session_timeout", ms.as_str()),
            ("tcp_keepalives_idle", "10"),
            ("tcp_keepalives_interval", "5"),
            ("tcp_keepalives_count", "3"),
        ]);
        Self {
            pool,
            default_limit,
            options,
            wait: timeout + timeout / 2,
        }
    }

    /// A new kept connection and its backend's identity.
    async fn connect(&self) -> DbResult<Kept> {
        let made = tokio::time::timeout(self.wait, async {
            let mut conn = PgConnection::connect_with(&self.options).await?;
            let (pid, started) = sqlx::query_as(
                "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()",
            )
            .fetch_one(&mut conn)
            .await?;
            Ok::<_, sqlx::Error>(Kept { conn, pid, started })
        })
        .await;
        match made {
            Ok(kept) => Ok(kept?),
            Err(_) => Err(DbError::Unavailable(sqlx::Error::PoolTimedOut)),
        }
    }

    /// Records `creates` on the kept connection (made when there is none): their outcomes in
    /// `out`. A statement PostgreSQL refused wrote nothing: its creates are recorded again in
    /// two halves, so one failing create costs the others a few statements, not their batch;
    /// alone, it is left out (its caller records it alone and gets its own error). A statement
    /// whose answer never came (the connection cut, or silent past the wait) may have
    /// committed: the connection is dropped and its outcome settled ([`Self::settle`]).
    async fn record(
        &self,
        kept: &mut Option<Kept>,
        creates: Vec<NewCluster>,
        out: &mut HashMap<NewCluster, Recorded>,
    ) {
        let mut parts = vec![creates];
        while let Some(part) = parts.pop() {
            let conn = match kept {
                Some(k) => k,
                None => match self.connect().await {
                    Ok(k) => kept.insert(k),
                    Err(e) => {
                        tracing::debug!(error = %e, "no connection for a batch of creates; each is recorded alone");
                        return;
                    }
                },
            };
            let recorded = tokio::time::timeout(
                self.wait,
                record_all(&mut conn.conn, &part, self.default_limit),
            )
            .await;
            match recorded {
                Ok(Ok(outcomes)) if outcomes.len() == part.len() => {
                    out.extend(part.into_iter().zip(outcomes));
                }
                Ok(Err(e)) if refused(&e) => {
                    if part.len() > 1 {
                        tracing::debug!(error = %e, creates = part.len(), "a batch of creates was refused; recorded again in halves");
                        let mut first = part;
                        let second = first.split_off(first.len() / 2);
                        parts.push(second);
                        parts.push(first);
                    }
                }
                lost => {
                    let error = match lost {
                        Ok(Err(e)) => e.to_string(),
                        Ok(Ok(_)) => "an outcome per create missing".to_string(),
                        Err(_) => format!("no answer within {:?}", self.wait),
                    };
                    tracing::warn!(%error, creates = part.len(), "the connection recording creates is lost; settling what it wrote");
                    if let Some(lost) = kept.take() {
                        self.settle(lost, &part, out).await;
                    }
                }
            }
        }
    }

    /// Settles the outcome of `part`'s statement on `lost`, whose answer never came: ends its
    /// backend if it is still there, waiting (bounded) until it is gone — it has then committed
    /// or rolled back for good — and counts as created those of `part` whose clusters exist
    /// (the statement is one transaction: all of them, or none; the rest were refused by their
    /// quota or never written). The others are left out: each caller records its own alone,
    /// looking first whether it exists ([`Recorder::record`]).
    async fn settle(
        &self,
        lost: Kept,
        part: &[NewCluster],
        out: &mut HashMap<NewCluster, Recorded>,
    ) {
        let Kept { conn, pid, started } = lost;
        // Dropped, not closed: a close would wait on the socket that failed.
        drop(conn);
        let wait_ms = i64::try_from(self.wait.as_millis()).unwrap_or(i64::MAX);
        let ended = tokio::time::timeout(
            self.wait * 2,
            again(|| async {
                sqlx::query(
                    "SELECT pg_terminate_backend(pid, $3) FROM pg_stat_activity
                      WHERE pid = $1 AND backend_start = $2",
                )
                .bind(pid)
                .bind(started)
                .bind(wait_ms)
                .execute(&self.pool)
                .await?;
                Ok(())
            }),
        )
        .await;
        if !matches!(ended, Ok(Ok(()))) {
            tracing::warn!(
                pid,
                "the backend of a lost create connection could not be ended"
            );
        }
        let uuids: Vec<Uuid> = part.iter().map(|c| c.uuid).collect();
        let found = again(|| existing(&self.pool, &uuids));
        match tokio::time::timeout(self.wait, found).await {
            Ok(Ok(found)) => {
                for c in part.iter().filter(|c| found.contains(&c.uuid)) {
                    out.insert(c.clone(), Recorded::Created);
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "what a lost batch of creates wrote is unknown")
            }
            Err(_) => tracing::warn!("what a lost batch of creates wrote is unknown (no answer)"),
        }
    }
}

/// Creates recorded together: concurrent creates waiting for a statement are recorded in the
/// next one (`coalesce::Batch`; one statement at a time, 256 creates each), so twenty clients
/// creating at once share a few statements, locks and commits instead of queueing for twenty. A
/// create alone goes out at once. One at a time: a second statement at once only waited on the
/// same quota locks and count rows, and split the queue between two longer waits (docs/benchmarks.md,
/// "What a create waits for"). The statements go out on one connection kept
/// between batches, made with the pool's options and outside it (one connection beyond
/// `[database] max_connections` once a create has been made): its backend has the statement
/// planned and its catalogs cached, where the pool's next idle connection would be whichever
/// backend ran something else last. Its statements are bounded (`[database]
/// creates_timeout_ms`, on the server and, with half as much again, here); one refused by
/// PostgreSQL is recorded again in halves ([`Keeping::record`]); one whose answer was lost is
/// settled by looking its clusters up once its backend is gone, and the connection replaced.
#[derive(Debug)]
pub struct Recorder {
    batch: Batch<NewCluster, Recorded>,
    keeping: Keeping,
}

impl Recorder {
    /// Records creates on `pool`'s database with `default_limit` as the quota of a project
    /// without its own, each batch's statement bounded by `timeout`.
    pub fn new(pool: PgPool, default_limit: i64, timeout: Duration) -> Self {
        let keeping = Keeping::new(pool, default_limit, timeout);
        let kept: Arc<tokio::sync::Mutex<Option<Kept>>> = Arc::default();
        let batch_keeping = keeping.clone();
        let read: BatchRead<NewCluster, Recorded> = Arc::new(move |creates: Vec<NewCluster>| {
            let (keeping, kept) = (batch_keeping.clone(), kept.clone());
            Box::pin(async move {
                // Uncontended: one statement at a time.
                let mut kept = kept.lock().await;
                let mut out = HashMap::with_capacity(creates.len());
                keeping.record(&mut kept, creates, &mut out).await;
                Some(out)
            })
        });
        Self {
            batch: Batch::new(1, 256, read),
            keeping,
        }
    }

    /// Records `create` with the concurrent creates, or alone when their statement did not
    /// record it ([`Self::record_alone`]).
    pub async fn record(&self, create: NewCluster) -> DbResult<Recorded> {
        match self.batch.get(create.clone()).await {
            Ok(Some(recorded)) => Ok(recorded),
            Ok(None) | Err(()) => self.record_alone(&create).await,
        }
    }

    /// Records `create` in a statement of its own. Its batch's may have committed without a
    /// word (a lost answer settled only as far as it could be): a cluster with its uuid, which
    /// was chosen for this create, is this create, recorded — looked up before, and after an
    /// answer that says it could not be written (its uuid taken, its project full).
    async fn record_alone(&self, create: &NewCluster) -> DbResult<Recorded> {
        let (pool, uuid) = (&self.keeping.pool, [create.uuid]);
        if !again(|| existing(pool, &uuid)).await?.is_empty() {
            return Ok(Recorded::Created);
        }
        match again(|| record(pool, create, self.keeping.default_limit)).await {
            Err(e) if e.violation() == Some(&super::Violation::ClusterUuid) => {
                Ok(Recorded::Created)
            }
            Ok(Recorded::QuotaReached { limit }) => {
                Ok(if again(|| existing(pool, &uuid)).await?.is_empty() {
                    Recorded::QuotaReached { limit }
                } else {
                    Recorded::Created
                })
            }
            other => other,
        }
    }

    /// Whether `project` is at its cluster quota (see [`quota_reached`]).
    pub async fn quota_reached(&self, project: &str) -> DbResult<Option<i64>> {
        quota_reached(&self.keeping.pool, project, self.keeping.default_limit).await
    }
}
