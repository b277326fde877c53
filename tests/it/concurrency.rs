//! Concurrent changes of one cluster: requests, the worker and the status writer take the
//! cluster's row lock first (the lock order of `db`), so no request ever meets a deadlock, and
//! every answer is one Magnum would give (2xx, or 400/404/409 with Magnum's error body). And
//! concurrent creates in one project: the quota is never exceeded, and each project's cluster
//! count (what the quota check reads) follows every write.

use crate::common::capi::{CapiApp, capi_app_on, template};
use crate::common::wait::until;
use crate::common::*;

use futures::future::join_all;
use magnum_capi::db::{self, Violation};
use magnum_capi::domain::status::Status;
use serde_json::{Value, json};
use uuid::Uuid;

/// A request of a round, answering what it was and the response.
type Labelled<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = (String, Resp)> + Send + 'a>>;

/// A Magnum error body for `status`: `errors[0]` with that status, a code, a title and a detail.
fn is_magnum_error(status: u16, body: &Value) -> bool {
    let e = &body["errors"][0];
    e["status"] == status
        && e["code"].is_string()
        && e["title"].is_string()
        && e["detail"].as_str().is_some_and(|d| !d.is_empty())
}

/// Asserts `r` is an answer Magnum gives to a change of a cluster under concurrent changes.
#[track_caller]
fn assert_magnum_answer(what: &str, r: &Resp) {
    let status = r.status.as_u16();
    assert!(
        r.status.is_success()
            || (matches!(status, 400 | 404 | 409) && is_magnum_error(status, &r.body)),
        "{what}: {status} {}",
        r.body
    );
}

/// Waits until PostgreSQL has a backend of this database waiting for a lock (a request blocked
/// behind the transaction the test holds).
async fn lock_waiter(pool: &sqlx::PgPool) {
    lock_waiters(pool, 1).await
}

/// Waits until PostgreSQL has `at_least` backends of this database waiting for a lock.
async fn lock_waiters(pool: &sqlx::PgPool, at_least: i64) {
    until("requests waiting for a lock", || async {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        (n >= at_least).then_some(())
    })
    .await
}

/// A transaction that ran `sql` with Alice's project as `$1`, holding what it locked.
async fn holding_alices(
    pool: &sqlx::PgPool,
    sql: &'static str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = pool.begin().await.unwrap();
    sqlx::query(sql)
        .bind(ALICE.project)
        .execute(&mut *holder)
        .await
        .unwrap();
    holder
}

/// The status writer's transaction (cluster row lock, then its nodegroups' rows) interleaved
/// with a resize: the resize waits for the cluster's lock instead of holding its nodegroup's
/// row while it waits, so both commit and the resize is a 202 (in the opposite order
/// PostgreSQL detects a deadlock and one of them fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_and_the_status_writer_lock_in_one_order() {
    let t = app().await;
    let ct = t.template(&ADMIN, "ct").await;
    let w = start_worker(&t);
    let c = t.cluster(&ADMIN, "c", &ct).await;
    t.wait_cluster(&ADMIN, &c, "CREATE_COMPLETE").await;
    w.stop().await;
    let cluster = Uuid::parse_str(&c).unwrap();

    // What the status writer does: the cluster's row lock first, held while it concludes.
    let mut writer = t.state.pool.begin().await.unwrap();
    db::clusters::lock(&mut *writer, cluster)
        .await
        .unwrap()
        .unwrap();
    let path = format!("/v1/clusters/{c}/actions/resize");
    let resize = t.post_v(&ADMIN, &path, "1.7", json!({"node_count": 3}));
    let status_writer = async {
        lock_waiter(&t.state.pool).await;
        // … then its nodegroups' rows, while the resize waits.
        let ngs = db::nodegroups::of_cluster(&mut *writer, cluster)
            .await
            .unwrap();
        for ng in &ngs {
            db::nodegroups::set_status(
                &mut *writer,
                ng.uuid,
                Status::UpdateComplete.as_str(),
                None,
            )
            .await
            .expect("the status writer's nodegroup write");
        }
        writer.commit().await.expect("the status writer's commit");
    };
    let (r, ()) = tokio::join!(resize, status_writer);
    r.assert_status(202);
    assert_eq!(
        t.sql_i64(&format!(
            "SELECT count(*) FROM operation WHERE cluster_uuid = '{c}' AND kind = 'cluster_resize'"
        ))
        .await,
        1
    );
}

/// Many resizes, cluster PATCHes and nodegroup creates, updates and deletes on one cluster at
/// once, while the worker runs their operations and the status writer lands what the
/// management cluster reports: never a 500, every answer one Magnum gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_changes_of_one_cluster_are_answered_as_magnum_would() {
    let app = capi_app_on(None, None, false, |cfg| cfg.database.max_connections = 20).await;
    let t = &app.t;
    let ct = template(t, "k", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "busy", "cluster_template_id": ct, "node_count": 1}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    let cluster = format!("/v1/clusters/{c}");
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    let (c, cluster) = (&c, &cluster);

    let ngs = format!("/v1/clusters/{c}/nodegroups");
    let mut answers = 0;
    for round in 0..8 {
        let mut requests: Vec<Labelled<'_>> = Vec::new();
        for i in 0..3 {
            let n = 1 + (round + i) % 3;
            requests.push(Box::pin(async move {
                let r = t
                    .post_v(
                        &ALICE,
                        &format!("/v1/clusters/{c}/actions/resize"),
                        "1.7",
                        json!({"node_count": n}),
                    )
                    .await;
                (format!("resize to {n}"), r)
            }));
        }
        for i in 0..2 {
            let n = 1 + (round + i + 1) % 3;
            requests.push(Box::pin(async move {
                let r = t
                    .patch(
                        &ALICE,
                        cluster,
                        json!([{"op": "replace", "path": "/node_count", "value": n}]),
                    )
                    .await;
                (format!("PATCH node_count {n}"), r)
            }));
        }
        // Two creates of one name: one of them is the other's 409.
        for name in [
            format!("ng{round}"),
            format!("ng{round}"),
            format!("extra{round}"),
        ] {
            let ngs = &ngs;
            requests.push(Box::pin(async move {
                let r = t
                    .post_v(&ALICE, ngs, "1.9", json!({"name": name, "node_count": 1}))
                    .await;
                (format!("create nodegroup {name}"), r)
            }));
        }
        if round > 0 {
            let prev = round - 1;
            let ngs = &ngs;
            requests.push(Box::pin(async move {
                let r = t
                    .patch_v(
                        &ALICE,
                        &format!("{ngs}/ng{prev}"),
                        "1.9",
                        json!([{"op": "replace", "path": "/max_node_count", "value": 5 + round}]),
                    )
                    .await;
                (format!("PATCH nodegroup ng{prev}"), r)
            }));
            requests.push(Box::pin(async move {
                let r = t
                    .delete_v(&ALICE, &format!("{ngs}/extra{prev}"), "1.9")
                    .await;
                (format!("delete nodegroup extra{prev}"), r)
            }));
        }
        for (what, r) in join_all(requests).await {
            assert_magnum_answer(&format!("round {round}: {what}"), &r);
            answers += 1;
        }
    }
    assert!(answers >= 8 * 8, "{answers} answers");
    // Everything the requests recorded was accepted by the queue and the cluster still reads.
    let r = t.get(&ALICE, cluster).await;
    r.assert_status(200);
    assert!(
        r.body["status"].as_str().unwrap().parse::<Status>().is_ok(),
        "{}",
        r.body
    );
}

/// The status writer asks for the next in-progress deadline after every pass: with 10,000
/// clusters that reads the clusters in progress through an index, not every cluster's row.
#[tokio::test]
async fn the_status_writers_next_deadline_reads_only_the_clusters_in_progress() {
    let t = app().await;
    let pool = &t.state.pool;
    sqlx::query(
        "INSERT INTO cluster_template (uuid, project_id, user_id, name, image_id, coe)
         VALUES (gen_random_uuid(), 'p', 'u', 'k', 'img', 'kubernetes')",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, status)
         SELECT gen_random_uuid(), 'p', 'u', 'c' || g, (SELECT uuid FROM cluster_template),
                CASE WHEN g % 1000 = 0 THEN 'UPDATE_IN_PROGRESS' ELSE 'CREATE_COMPLETE' END
           FROM generate_series(1, 10000) g",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE cluster").execute(pool).await.unwrap();
    let explain = format!(
        "EXPLAIN {}",
        magnum_capi::status_writer::NEXT_DEADLINE.replace("$1", "3600")
    );
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .fetch_all(pool)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan on cluster"), "{plan}");
    assert!(plan.contains("cluster_in_progress"), "{plan}");
}

/// The constraints the service maps to Magnum's errors by name exist under those names.
#[tokio::test]
async fn every_mapped_constraint_exists_in_the_schema() {
    let t = app().await;
    for (violation, name) in Violation::NAMED {
        let n = t
            .sql_i64(&format!(
                "SELECT count(*) FROM pg_constraint WHERE conname = '{name}'"
            ))
            .await;
        assert_eq!(n, 1, "{violation:?}: constraint {name} not in the schema");
        assert_eq!(Violation::of(name), violation);
    }
}

/// A template deleted while a cluster is created on it: the create is the template's 404 (a
/// 400 before 1.10) or the delete is the template's "in use" 400, never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_deleted_during_a_cluster_create_is_a_client_error() {
    let t = app().await;
    for i in 0..10 {
        let ct = t.template(&ADMIN, &format!("ct{i}")).await;
        let template = format!("/v1/clustertemplates/{ct}");
        let (create, delete) = tokio::join!(
            t.post_v(
                &ADMIN,
                "/v1/clusters",
                "1.10",
                json!({"name": format!("c{i}"), "cluster_template_id": ct}),
            ),
            t.delete(&ADMIN, &template),
        );
        assert_magnum_answer("cluster create", &create);
        assert_magnum_answer("template delete", &delete);
        assert!(
            create.status.is_success() != delete.status.is_success(),
            "one of them wins: create {} {}, delete {} {}",
            create.status,
            create.body,
            delete.status,
            delete.body
        );
    }
}

/// `clients` creates in ALICE's project at once, spread over the replicas `on` (each records
/// its own in its own statements: the quota holds across replicas only by its lock in
/// PostgreSQL); the answers.
async fn racing_creates(on: &[&TestApp], template: &str, clients: usize) -> Vec<Resp> {
    join_all((0..clients).map(|i| {
        on[i % on.len()].post(
            &ALICE,
            "/v1/clusters",
            json!({"name": format!("racer-{i}"), "cluster_template_id": template}),
        )
    }))
    .await
}

/// Asserts `answers` are `accepted` 202s and, for the rest, Magnum's quota 403 (`limit`), and
/// that the project holds `limit` clusters.
#[track_caller]
fn assert_quota_held(answers: &[Resp], accepted: usize, limit: i64) {
    let ok = answers.iter().filter(|r| r.status.as_u16() == 202).count();
    assert_eq!(ok, accepted, "accepted creates");
    for r in answers.iter().filter(|r| r.status.as_u16() != 202) {
        assert_magnum_error(r, 403, &quota_message(limit));
    }
}

/// Stores ALICE's project's cluster quota: `limit`.
async fn store_alices_quota(t: &TestApp, limit: i64) {
    t.post(
        &ADMIN,
        "/v1/quotas",
        json!({"project_id": ALICE.project, "resource": "Cluster", "hard_limit": limit}),
    )
    .await
    .assert_status(201);
}

async fn clusters_of_alice(t: &TestApp) -> i64 {
    t.sql_i64("SELECT count(*) FROM cluster WHERE project_id = 'p-alice'")
        .await
}

/// Thirty clients create at once through two replicas in a project whose quota is the default
/// 20: exactly twenty are accepted and ten get Magnum's quota 403 — the check cannot be raced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_creates_racing_for_a_quota_of_twenty_create_exactly_twenty() {
    let t = app().await;
    let other = t.twin(|_| {}).await;
    let ct = t.template(&ALICE, "ct").await;
    let answers = racing_creates(&[&t, &other], &ct, 30).await;
    assert_quota_held(&answers, 20, 20);
    assert_eq!(clusters_of_alice(&t).await, 20);
}

/// Two replicas' creates race for a project's last place, each replica's statement having read
/// the project's count before the other's commits: the project's count row is held here, so
/// both statements are in flight at once (one waiting for the row, the other for the project's
/// lock — without that lock, both would have read 19 and both written). Exactly one of twenty
/// is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_racing_for_a_projects_last_place_take_it_once() {
    let t = app().await;
    let other = t.twin(|_| {}).await;
    let ct = t.template(&ALICE, "ct").await;
    t.write_sql(&insert_clusters(ALICE.project, "old", 19, &ct))
        .await;
    let holder = holding_alices(
        &t.state.pool,
        "SELECT FROM cluster_project_count WHERE project_id = $1 FOR UPDATE",
    )
    .await;
    let replicas = [&t, &other];
    let race = racing_creates(&replicas, &ct, 20);
    let release = async {
        // Both replicas' statements in flight.
        lock_waiters(&t.state.pool, 2).await;
        holder.commit().await.unwrap();
    };
    let (answers, ()) = futures::join!(race, release);
    assert_quota_held(&answers, 1, 20);
    assert_eq!(clusters_of_alice(&t).await, 20);
}

/// Twenty clients race through two replicas for the last five places of a stored quota of 20
/// (fifteen clusters exist): five are accepted, fifteen refused; a finished delete frees a place for exactly one
/// of five more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_racing_for_the_last_places_of_a_stored_quota_fill_it_exactly() {
    let t = app_with_worker().await;
    let other = t.twin(|_| {}).await;
    store_alices_quota(&t, 20).await;
    let ct = t.template(&ALICE, "ct").await;
    let first = t.cluster(&ALICE, "c0", &ct).await;
    for i in 1..15 {
        t.cluster(&ALICE, &format!("c{i}"), &ct).await;
    }
    let answers = racing_creates(&[&t, &other], &ct, 20).await;
    assert_quota_held(&answers, 5, 20);
    assert_eq!(clusters_of_alice(&t).await, 20);
    t.delete(&ALICE, &format!("/v1/clusters/{first}"))
        .await
        .assert_status(204);
    t.wait_cluster(&ALICE, &first, "GONE").await;
    let answers = racing_creates(&[&t, &other], &ct, 5).await;
    assert_quota_held(&answers, 1, 20);
    assert_eq!(clusters_of_alice(&t).await, 20);
}

/// The status writer drops the queued clusters it has nothing to write for (here another
/// management cluster's) in one statement before it locks any row: a change of such a
/// cluster's objects, whose row its own writer holds locked, does not hold up this management
/// cluster's changes behind that lock.
#[tokio::test]
async fn a_change_is_not_held_behind_another_management_clusters_locked_row() {
    a_change_is_written_while_another_clusters_row_is_held(true).await;
}

/// The status writer does not wait for a row another transaction holds (an API write, here held
/// open): its cluster stays queued, the other clusters' changes are written meanwhile, and its
/// own is written once the row is free.
#[tokio::test]
async fn a_change_is_not_held_behind_a_row_another_transaction_holds() {
    a_change_is_written_while_another_clusters_row_is_held(false).await;
}

/// Two clusters; `theirs` (moved to another management cluster when `elsewhere`) has its row
/// held while a Machine of each reports a new address, `theirs` first: ours is written while
/// theirs is held; when it stays on this management cluster, theirs is written once released.
async fn a_change_is_written_while_another_clusters_row_is_held(elsewhere: bool) {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "k", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let ours = t.cluster(&ALICE, "ours", &ct).await;
    let theirs = t.cluster(&ALICE, "theirs", &ct).await;
    t.wait_cluster(&ALICE, &ours, "CREATE_COMPLETE").await;
    t.wait_cluster(&ALICE, &theirs, "CREATE_COMPLETE").await;
    let pool = &t.state.pool;
    let theirs_uuid = Uuid::parse_str(&theirs).unwrap();
    if elsewhere {
        sqlx::query("UPDATE cluster SET management_cluster = 'elsewhere' WHERE uuid = $1")
            .bind(theirs_uuid)
            .execute(pool)
            .await
            .unwrap();
    }
    // Another writer (the other management cluster's, or an API write) holds its row.
    let mut their_writer = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM cluster WHERE uuid = $1 FOR UPDATE")
        .bind(theirs_uuid)
        .execute(&mut *their_writer)
        .await
        .unwrap();
    // A worker Machine of each reports a new address: theirs first, then ours.
    let readdress = |c: &str, ip: &str| readdress_worker(&app, c, ip);
    readdress(&theirs, "198.51.100.1");
    // The writer is woken by theirs alone (it would lock theirs' row before ours changed).
    until("their new address in the watchers' index", || async {
        let seen = app.capi.observer().observed(theirs_uuid);
        seen.machines
            .iter()
            .any(|m| m.pointer("/status/addresses/0/address") == Some(&json!("198.51.100.1")))
            .then_some(())
    })
    .await;
    readdress(&ours, "198.51.100.2");
    let written = |uuid: String, ip: &'static str| address_shown(t, uuid, ip);
    until("our cluster's new address written", || {
        written(ours.clone(), "198.51.100.2")
    })
    .await;
    their_writer.rollback().await.unwrap();
    if !elsewhere {
        until("their new address written once their row is free", || {
            written(theirs.clone(), "198.51.100.1")
        })
        .await;
    }
}

/// The first worker Machine of cluster `c` (its uuid) in `app`'s simulator reports address `ip`.
fn readdress_worker(app: &CapiApp, c: &str, ip: &str) {
    use magnum_capi::simkube::Resource;
    let machines = Resource::of("cluster.x-k8s.io/v1beta2", "Machine");
    let found = app
        .sim
        .store()
        .list(
            &machines,
            None,
            &format!("magnum.openstack.org/cluster-uuid={c},magnum.openstack.org/role=worker"),
        )
        .unwrap();
    let m = found.first().expect("a worker Machine");
    app.sim
        .store()
        .patch_status(
            &machines,
            m["metadata"]["namespace"].as_str().unwrap(),
            m["metadata"]["name"].as_str().unwrap(),
            &json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}),
        )
        .unwrap();
}

/// `Some` once cluster `uuid`'s show lists `ip` among its node addresses.
async fn address_shown(t: &TestApp, uuid: String, ip: &'static str) -> Option<()> {
    let r = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    r.body["node_addresses"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == ip))
        .then_some(())
}

/// A change the watchers see is written at once, even while other transactions' notifications
/// are being gathered: with the gather as long as it may be (`[capi] status_gather_ms`, the
/// status writer's safety poll: 60 s) and one just begun, a worker Machine's new address
/// reaches the cluster long before. Gathered like a notification, it would wait for the gather
/// to end, past this wait's bound.
#[tokio::test]
async fn a_watchers_change_is_written_at_once_while_notifications_are_gathered() {
    let (app, _, ours) =
        one_created(|cfg| cfg.capi.status_gather_ms = magnum_capi::config::STATUS_SAFETY_POLL_MS)
            .await;
    let t = &app.t;
    // Another transaction's commit is notified (the gather begins), and delivered: this
    // session hears it as the status writer's listening session does.
    let mut heard = sqlx::postgres::PgListener::connect_with(&t.state.pool)
        .await
        .unwrap();
    heard.listen("magnum_capi_clusters").await.unwrap();
    sqlx::query("SELECT pg_notify('magnum_capi_clusters', $1)")
        .bind(&ours)
        .execute(&t.state.pool)
        .await
        .unwrap();
    let delivered = async { while heard.recv().await.unwrap().payload() != ours {} };
    tokio::time::timeout(crate::common::wait::deadline(), delivered)
        .await
        .expect("the notification delivered");
    readdress_worker(&app, &ours, "198.51.100.7");
    crate::common::wait::until_within(
        std::time::Duration::from_secs(30),
        "the new address written while notifications are gathered",
        || address_shown(t, ours.clone(), "198.51.100.7"),
    )
    .await;
}

/// A CAPI service configured by `tweak` with one cluster, `ours`, created through it (so its
/// status writer leads): the service, the template's uuid and the cluster's.
async fn one_created(
    tweak: impl FnOnce(&mut magnum_capi::config::Config),
) -> (CapiApp, String, String) {
    let app = capi_app_on(None, None, false, tweak).await;
    let ct = template(&app.t, "k", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let ours = app.t.cluster(&ALICE, "ours", &ct).await;
    app.t.wait_cluster(&ALICE, &ours, "CREATE_COMPLETE").await;
    (app, ct, ours)
}

/// The projects whose `cluster_project_count` differs from their clusters' `count(*)` (a
/// missing row is 0), as `project: counted/held` — empty when every count is right.
async fn miscounted_projects(t: &TestApp) -> String {
    let (m,): (String,) = sqlx::query_as(
        "SELECT COALESCE(string_agg(format('%s: %s/%s', project_id, k.clusters, c.n), ', '), '')
           FROM (SELECT project_id, count(*) AS n FROM cluster GROUP BY project_id) c
           FULL JOIN cluster_project_count k USING (project_id)
          WHERE COALESCE(c.n, 0) <> COALESCE(k.clusters, 0)",
    )
    .fetch_one(&t.state.pool)
    .await
    .unwrap();
    m
}

/// `n` clusters of `project` on `template`, named `<prefix><i>`, in one INSERT.
fn insert_clusters(project: &str, prefix: &str, n: u32, template: &str) -> String {
    format!(
        "INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, status)
         SELECT gen_random_uuid(), '{project}', 'u', '{prefix}' || g, '{template}',
                'CREATE_COMPLETE'
           FROM generate_series(1, {n}) g"
    )
}

/// Each project's cluster count (what the quota check reads) is its clusters' `count(*)` after
/// every kind of write: creates, multi-project inserts and deletes, a move to another project,
/// the same with triggers off (`session_replication_role = replica`), and a TRUNCATE.
#[tokio::test]
async fn each_projects_cluster_count_follows_every_write_of_its_clusters() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let count = |p: &'static str| {
        let t = &t;
        async move {
            t.sql_i64(&format!(
                "SELECT COALESCE((SELECT clusters FROM cluster_project_count
                                   WHERE project_id = '{p}'), -1)"
            ))
            .await
        }
    };
    for i in 0..3 {
        t.cluster(&ALICE, &format!("c{i}"), &ct).await;
    }
    assert_eq!(count("p-alice").await, 3);
    // One statement writing two projects: a1..a5 in p1, b1..b4 in p2.
    t.write_sql(&format!(
        "INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, status)
         SELECT gen_random_uuid(), p, 'u', n, '{ct}', 'CREATE_COMPLETE'
           FROM (SELECT 'p1', 'a' || g FROM generate_series(1, 5) g
                 UNION ALL SELECT 'p2', 'b' || g FROM generate_series(1, 4) g) AS v (p, n)"
    ))
    .await;
    assert_eq!((count("p1").await, count("p2").await), (5, 4));
    t.write_sql("DELETE FROM cluster WHERE name IN ('a1', 'a2', 'b1', 'c0')")
        .await;
    t.write_sql("UPDATE cluster SET project_id = 'p3' WHERE name IN ('a3', 'b2')")
        .await;
    // A project change that changes nothing, and other columns' updates: no count moves.
    t.write_sql("UPDATE cluster SET project_id = project_id, status = 'UPDATE_COMPLETE'")
        .await;
    assert_eq!(
        (
            count("p-alice").await,
            count("p1").await,
            count("p2").await,
            count("p3").await
        ),
        (2, 2, 2, 2)
    );
    assert_eq!(miscounted_projects(&t).await, "");

    write_unannounced(&t.state.pool, &insert_clusters("p4", "d", 3, &ct)).await;
    write_unannounced(&t.state.pool, "DELETE FROM cluster WHERE name = 'a4'").await;
    write_unannounced(
        &t.state.pool,
        "UPDATE cluster SET project_id = 'p4' WHERE name = 'a5'",
    )
    .await;
    assert_eq!((count("p1").await, count("p4").await), (0, 4));
    assert_eq!(miscounted_projects(&t).await, "");

    write_unannounced(&t.state.pool, "TRUNCATE cluster CASCADE").await;
    assert_eq!(count("p4").await, -1, "no row: 0 clusters");
    assert_eq!(miscounted_projects(&t).await, "");
    t.cluster(&ALICE, "again", &ct).await;
    assert_eq!(count("p-alice").await, 1);
}

/// Each management cluster's cluster count (what placement reads, `''` the unnamed one) is its
/// clusters' `count(*)` after every kind of write: inserts placing on several management
/// clusters, deletes, a move to another management cluster, the same with triggers off
/// (`session_replication_role = replica`), and a TRUNCATE.
#[tokio::test]
async fn each_management_clusters_cluster_count_follows_every_write_of_its_clusters() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let miscounted = || async {
        let (m,): (String,) = sqlx::query_as(
            "SELECT COALESCE(string_agg(format('%s: %s/%s', m, k.clusters, c.n), ', '), '')
               FROM (SELECT COALESCE(management_cluster, '') AS m, count(*) AS n
                       FROM cluster GROUP BY 1) c
               FULL JOIN cluster_management_count k ON k.management_cluster = c.m
              WHERE COALESCE(c.n, 0) <> COALESCE(k.clusters, 0)",
        )
        .fetch_one(&t.state.pool)
        .await
        .unwrap();
        m
    };
    let counts = || async {
        magnum_capi::db::clusters::count_by_management_cluster(&t.state.pool)
            .await
            .unwrap()
            .into_iter()
            .filter(|(_, n)| *n != 0)
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    t.cluster(&ALICE, "c0", &ct).await;
    // One statement placing on two management clusters (and one unplaced).
    t.write_sql(&format!(
        "INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, status,
                              management_cluster)
         SELECT gen_random_uuid(), 'p1', 'u', n, '{ct}', 'CREATE_COMPLETE', m
           FROM (SELECT 'east', 'e' || g FROM generate_series(1, 5) g
                 UNION ALL SELECT 'west', 'w' || g FROM generate_series(1, 4) g) AS v (m, n)"
    ))
    .await;
    assert_eq!(
        counts().await,
        [("".to_string(), 1), ("east".into(), 5), ("west".into(), 4)].into()
    );
    t.write_sql("DELETE FROM cluster WHERE name IN ('e1', 'w1', 'c0')")
        .await;
    t.write_sql("UPDATE cluster SET management_cluster = 'west' WHERE name IN ('e2', 'e3')")
        .await;
    t.write_sql("UPDATE cluster SET management_cluster = NULL WHERE name = 'w2'")
        .await;
    // Other columns' updates move nothing.
    t.write_sql("UPDATE cluster SET status = 'UPDATE_COMPLETE'")
        .await;
    assert_eq!(
        counts().await,
        [("".to_string(), 1), ("east".into(), 2), ("west".into(), 4)].into()
    );
    assert_eq!(miscounted().await, "");

    write_unannounced(&t.state.pool, &insert_clusters("p4", "d", 3, &ct)).await;
    write_unannounced(&t.state.pool, "DELETE FROM cluster WHERE name = 'e4'").await;
    write_unannounced(
        &t.state.pool,
        "UPDATE cluster SET management_cluster = 'north' WHERE name = 'e5'",
    )
    .await;
    assert_eq!(
        counts().await,
        [("".to_string(), 4), ("north".into(), 1), ("west".into(), 4)].into()
    );
    assert_eq!(miscounted().await, "");

    write_unannounced(&t.state.pool, "TRUNCATE cluster CASCADE").await;
    assert_eq!(counts().await, Default::default());
    assert_eq!(miscounted().await, "");
}

/// What a create and a show run in PostgreSQL is planned once per connection: each of these
/// functions carries `plan_cache_mode = force_generic_plan`. Without it their statements that
/// take a variable were planned again on every call (their migrations say why), and a later
/// `CREATE OR REPLACE FUNCTION` without the setting would drop it silently.
#[tokio::test]
async fn the_functions_a_create_and_a_show_run_are_planned_once_per_connection() {
    let t = app().await;
    let functions = [
        "magnum_capi_clusters_changed",
        "magnum_capi_nodegroups_changed",
        "magnum_capi_cluster_quota_rooms",
        "magnum_capi_cluster_quota_reached",
        "magnum_capi_record_creates",
        "magnum_capi_templates_by_uuid",
        "magnum_capi_cluster_heads",
    ];
    for f in functions {
        let config: Option<Vec<String>> =
            sqlx::query_scalar("SELECT proconfig FROM pg_proc WHERE proname = $1")
                .bind(f)
                .fetch_one(&t.state.pool)
                .await
                .unwrap();
        assert_eq!(
            config,
            Some(vec!["plan_cache_mode=force_generic_plan".to_string()]),
            "{f}"
        );
    }
}

/// A create's quota check reads its project's count, not its clusters: in a project of 1,000
/// clusters it starts no scan of `cluster` (the count it replaced read up to the limit's rows
/// under the project's lock, so every create of a big project queued behind it).
#[tokio::test]
async fn the_quota_check_of_a_create_reads_no_cluster_row() {
    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    t.write_sql(&insert_clusters("p-alice", "c", 1000, &ct))
        .await;
    let pool = &t.state.pool;
    let quota_check = |sql: &'static str, limit: i64| async move {
        let mut tx = pool.begin().await.unwrap();
        let scans = "SELECT COALESCE(seq_scan, 0) + COALESCE(idx_scan, 0)
                       FROM pg_stat_xact_user_tables WHERE relname = 'cluster'";
        let before: i64 = sqlx::query_scalar(scans).fetch_one(&mut *tx).await.unwrap();
        let reached: Option<i64> = sqlx::query_scalar(sql)
            .bind(limit)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        let after: i64 = sqlx::query_scalar(scans).fetch_one(&mut *tx).await.unwrap();
        tx.rollback().await.unwrap();
        (reached, after - before)
    };
    // A create alone (`late_error`'s check) and creates recorded together ask the same way.
    for sql in [
        "SELECT magnum_capi_cluster_quota_reached('p-alice', $1)",
        "SELECT CASE WHEN room = 0 THEN hard_limit END
           FROM magnum_capi_cluster_quota_rooms(ARRAY['p-alice'], $1)",
    ] {
        assert_eq!(
            quota_check(sql, 1020).await,
            (None, 0),
            "room: no scan of cluster ({sql})"
        );
        assert_eq!(
            quota_check(sql, 1000).await,
            (Some(1000), 0),
            "full: no scan of cluster ({sql})"
        );
    }
    store_alices_quota(&t, 1001).await;
    t.cluster(&ALICE, "last", &ct).await;
    let refused = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "over", "cluster_template_id": ct}),
        )
        .await;
    assert_magnum_error(&refused, 403, &quota_message(1001));
    assert_eq!(clusters_of_alice(&t).await, 1001);
}

/// A burst of change notifications with nothing to write (1,000 clusters notified by hand, as a
/// bulk insert or an import notifies them): the status writer takes in every notification that
/// has already arrived before it writes, evaluates its queue from a few statements per 1,000
/// clusters, and takes a transaction (locking the cluster's row) only for a cluster whose
/// evaluation changes something. Measured here 14 transactions in the database over the window,
/// background included (1,696 when tests' 50 ms worker poll was the background; 5,700 with it
/// when each notification was a pass of its own).
#[tokio::test]
async fn a_burst_of_notifications_with_nothing_to_write_costs_few_transactions() {
    let (_app, mut conn) = settled_rows(1000).await;
    let before = transactions(&mut conn).await;
    sqlx::query(
        "SELECT pg_notify('magnum_capi_clusters', uuid::text) FROM cluster
          WHERE project_id = 'rows'",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    let after = transactions(&mut conn).await;
    println!("{} transactions over the window", after - before);
    assert!(
        after - before < 500,
        "{} transactions for 1,000 queued clusters with nothing to write",
        after - before
    );
}

/// A stream of other transactions' commits (one notification each, a millisecond or so apart,
/// as creates at a few hundred a second commit): the status writer gathers them for a moment
/// (`[capi] status_gather_ms`, 50 ms by default), so they are a pass of a few statements per 50 ms
/// of the stream, not a pass each. 200 commits over at least 200 ms: measured here 249
/// transactions over the window (the 200 commits, the writer's passes, 8 of background); 1,009
/// when every commit woke a pass of its own (four statements each). The bound follows the
/// stream's length, which a loaded machine stretches.
#[tokio::test]
async fn a_stream_of_commits_is_read_in_a_few_passes_not_one_each() {
    let (_app, mut conn) = settled_rows(200).await;
    let uuids: Vec<Uuid> =
        sqlx::query_scalar("SELECT uuid FROM cluster WHERE project_id = 'rows' ORDER BY id")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    let before = transactions(&mut conn).await;
    let started = std::time::Instant::now();
    for u in &uuids {
        sqlx::query("SELECT pg_notify('magnum_capi_clusters', $1)")
            .bind(u.to_string())
            .execute(&mut *conn)
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let stream_ms = i64::try_from(started.elapsed().as_millis()).unwrap();
    let after = transactions(&mut conn).await;
    // The 200 commits, four statements a pass for each 50 ms of the stream (and a few more),
    // and the background.
    let bound = 200 + 4 * (stream_ms / 50 + 5) + 20;
    println!(
        "{} transactions over the window, the stream {stream_ms} ms long (bound {bound})",
        after - before
    );
    assert!(
        after - before < bound,
        "{} transactions for 200 commits notified one by one over {stream_ms} ms (200 of them the \
         commits; bound {bound})",
        after - before
    );
}

/// A CAPI service with one cluster created through it (so its status writer leads), and
/// `rows` settled clusters without objects in project `rows`, as the writer would conclude them
/// (nothing to write); with one connection for the test's own statements, whose counts it
/// reports at once. The worker's safety poll is production's (tests poll every 50 ms), so the
/// background is the service's, not a test's pace.
async fn settled_rows(rows: i64) -> (CapiApp, sqlx::pool::PoolConnection<sqlx::Postgres>) {
    let (app, ct, _) = one_created(|cfg| cfg.operations.poll_interval_ms = 30_000).await;
    let t = &app.t;
    let mut conn = t.state.pool.acquire().await.unwrap();
    sqlx::query(
        "INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, status,
                              create_timeout, health_status, health_status_reason)
         SELECT md5('row-' || g)::uuid, 'rows', 'u', 'row-' || g, $1::uuid, 'CREATE_COMPLETE', 60,
                'UNKNOWN', '{}'
           FROM generate_series(1, $2) g",
    )
    .bind(&ct)
    .bind(rows)
    .execute(&mut *conn)
    .await
    .unwrap();
    (app, conn)
}

/// The database's transactions as the statistics show them once every session has reported
/// its own: `conn`'s at once, the others when idle (PostgreSQL 15 flushes an idle session's
/// counts within 10 s).
async fn transactions(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    sqlx::query_scalar(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database
          WHERE datname = current_database()",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

/// The rows of a create made through the API on template `ct`: the model of [`like`].
async fn model_create(
    t: &TestApp,
    ct: &str,
) -> (db::clusters::ClusterRow, Vec<db::nodegroups::NodegroupRow>) {
    let pool = &t.state.pool;
    let model = Uuid::parse_str(&t.cluster(&ALICE, "model", ct).await).unwrap();
    let row = db::clusters::by_uuid(pool, &db::clusters::Scope::All, model)
        .await
        .unwrap()
        .expect("the model cluster");
    (row, db::nodegroups::of_cluster(pool, model).await.unwrap())
}

/// A create like `model`'s (new uuids) in `project` on `template`: its uuid and what records it.
fn like(
    model: &(db::clusters::ClusterRow, Vec<db::nodegroups::NodegroupRow>),
    project: &str,
    template: Uuid,
) -> (Uuid, magnum_capi::db::creates::NewCluster) {
    use magnum_capi::db::operations::NewOperation;
    use magnum_capi::domain::operation::OperationKind;
    let (row, ngs) = model;
    let mut c = row.clone();
    c.uuid = Uuid::new_v4();
    c.project_id = project.to_string();
    c.cluster_template_id = template;
    let [m, w] = [&ngs[0], &ngs[1]].map(|n| {
        let mut n = n.clone();
        n.uuid = Uuid::new_v4();
        n.cluster_id = c.uuid;
        n.project_id = c.project_id.clone();
        n
    });
    let op = NewOperation {
        cluster_uuid: c.uuid,
        nodegroup_uuid: None,
        kind: OperationKind::Create,
        payload: json!({}),
        request_id: Some("req-together"),
    };
    (
        c.uuid,
        magnum_capi::db::creates::NewCluster::new(&c, [&m, &w], &op).unwrap(),
    )
}

/// A create that fails its batch's statement (its template is gone) does not send the others
/// to be recorded alone: the statement is recorded again in halves on the kept connection, and
/// only the failing create goes alone. The pool's one connection is held meanwhile, so a
/// create recorded alone (through the pool) could not be answered before it is released.
#[tokio::test]
async fn a_create_failing_its_batch_leaves_the_others_recorded_together() {
    use magnum_capi::db::creates::{Recorded, Recorder};

    let t = app().await;
    let ct = t.template(&ALICE, "ct").await;
    let tpl = Uuid::parse_str(&ct).unwrap();
    let model = model_create(&t, &ct).await;
    let mut cfg = t.state.config.database.clone();
    (cfg.max_connections, cfg.min_connections) = (1, 0);
    let small = db::connect(&t.url, &cfg).await.unwrap();
    let recorder = Recorder::new(small.clone(), 20, std::time::Duration::from_secs(10));
    let held = small.acquire().await.unwrap();
    let mut creates: Vec<_> = (0..6).map(|_| like(&model, BOB.project, tpl).1).collect();
    creates.insert(3, like(&model, BOB.project, Uuid::new_v4()).1);
    let failing = creates.remove(3);
    let (failed, others) = {
        let failed = recorder.record(failing);
        let others = join_all(creates.into_iter().map(|c| recorder.record(c)));
        let others = async {
            let answered = tokio::time::timeout(std::time::Duration::from_secs(10), others)
                .await
                .expect("the others answered while the pool's connection is held");
            drop(held);
            answered
        };
        tokio::join!(failed, others)
    };
    for a in others {
        assert_eq!(a.unwrap(), Recorded::Created);
    }
    assert_eq!(
        failed.unwrap_err().violation(),
        Some(&Violation::ClusterTemplate)
    );
}

/// Creates recorded together (src/db/creates.rs): while one create's statement waits for its
/// project's lock (held here by another transaction), the creates arriving meanwhile queue and
/// go out in the next statement. Each still gets its own answer: a project's creates take its
/// room in arrival order and the rest get its limit, a refused create writes nothing, and a
/// create that fails the statement (its template does not exist) fails alone — the others of
/// its statement are then recorded again in halves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_recorded_together_each_get_their_own_answer() {
    use magnum_capi::db::creates::{self, NewCluster, Recorded};

    let t = app().await;
    let pool = &t.state.pool;
    let ct = t.template(&ALICE, "ct").await;
    let tpl = Uuid::parse_str(&ct).unwrap();
    let model = model_create(&t, &ct).await;
    let new = |project: &str, template: Uuid| like(&model, project, template);
    let recorder = creates::Recorder::new(pool.clone(), 20, std::time::Duration::from_secs(10));
    // Bob's creates wait for his lock; `creates` queue behind the first and are answered.
    let together = |creates: Vec<(Uuid, NewCluster)>| {
        let (recorder, new) = (&recorder, &new);
        async move {
            let mut holder = pool.begin().await.unwrap();
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext('quota:' || $1))")
                .bind(BOB.project)
                .execute(&mut *holder)
                .await
                .unwrap();
            let (_, first) = new(BOB.project, tpl);
            let first = recorder.record(first);
            let rest = async {
                lock_waiter(pool).await;
                let answers = join_all(creates.into_iter().map(|(_, c)| recorder.record(c)));
                // Released once the rest have queued (their futures run from the first poll).
                let release = async {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    holder.rollback().await.unwrap();
                };
                tokio::join!(answers, release).0
            };
            let (first, rest) = tokio::join!(first, rest);
            assert_eq!(first.unwrap(), Recorded::Created, "the first create");
            rest.iter()
                .map(|a| match a {
                    Ok(r) => format!("{r:?}"),
                    Err(e) => format!("{:?}", e.violation()),
                })
                .collect::<Vec<_>>()
        }
    };
    let written = |uuids: Vec<Uuid>| async move {
        let mut n = Vec::new();
        for (table, column) in [
            ("cluster", "uuid"),
            ("nodegroup", "cluster_id"),
            ("operation", "cluster_uuid"),
            ("cluster_view", "cluster_uuid"),
        ] {
            n.push(
                sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                    "SELECT count(*) FROM {table} WHERE {column} = ANY($1)"
                )))
                .bind(&uuids)
                .fetch_one(pool)
                .await
                .unwrap(),
            );
        }
        n
    };

    // One statement: Alice (a stored quota of 3, one cluster) has room for two of three.
    store_alices_quota(&t, 3).await;
    let creates = vec![
        new(ALICE.project, tpl),
        new(BOB.project, tpl),
        new(ALICE.project, tpl),
        new(ALICE.project, tpl),
        new(BOB.project, tpl),
    ];
    let uuids: Vec<Uuid> = creates.iter().map(|(u, _)| *u).collect();
    assert_eq!(
        together(creates).await,
        [
            "Created",
            "Created",
            "Created",
            "QuotaReached { limit: 3 }",
            "Created"
        ]
    );
    assert_eq!(written(uuids).await, [4, 8, 4, 4], "rows of the 4 recorded");

    // A create on a template that does not exist fails the statement: alone, it is its own
    // foreign-key error, and each of the others gets its own answer.
    let creates = vec![
        new(BOB.project, tpl),
        new(BOB.project, Uuid::new_v4()),
        new(ALICE.project, tpl),
    ];
    let uuids: Vec<Uuid> = creates.iter().map(|(u, _)| *u).collect();
    assert_eq!(
        together(creates).await,
        [
            "Created",
            "Some(ClusterTemplate)",
            "QuotaReached { limit: 3 }"
        ]
    );
    assert_eq!(
        written(uuids).await,
        [1, 2, 1, 1],
        "rows of the one recorded"
    );
    assert_eq!(clusters_of_alice(&t).await, 3);
    assert_eq!(miscounted_projects(&t).await, "");
}

/// A create's document leaves out its NULL columns and its nodegroups' labels when they are
/// the cluster's (src/db/creates.rs): the rows written are still exactly the rows given — a
/// nodegroup labelled apart keeps its own labels, one labelled as the cluster gets the
/// cluster's, a value set where the API leaves NULL is kept and a NULL stays NULL.
#[tokio::test]
async fn a_recorded_create_writes_exactly_the_rows_given() {
    use magnum_capi::db::creates::{NewCluster, Recorded, Recorder};
    use magnum_capi::db::operations::NewOperation;
    use magnum_capi::domain::operation::OperationKind;

    let t = app().await;
    let pool = &t.state.pool;
    let ct = t.template(&ALICE, "ct").await;
    let model = Uuid::parse_str(&t.cluster(&ALICE, "model", &ct).await).unwrap();
    let mut c = db::clusters::by_uuid(pool, &db::clusters::Scope::All, model)
        .await
        .unwrap()
        .expect("the model cluster");
    let ngs = db::nodegroups::of_cluster(pool, model).await.unwrap();
    assert!(!c.labels.0.is_empty(), "the model's labels: {:?}", c.labels);
    c.uuid = Uuid::new_v4();
    c.name = Some("given".into());
    c.keypair = None;
    c.discovery_url = Some("https://discovery.example.org/x".into());
    let [mut m, mut w] = [ngs[0].clone(), ngs[1].clone()];
    for n in [&mut m, &mut w] {
        n.uuid = Uuid::new_v4();
        n.cluster_id = c.uuid;
    }
    assert_eq!(
        m.labels, c.labels,
        "a create's nodegroups carry the cluster's labels"
    );
    m.max_node_count = Some(3);
    m.node_labels = Some(sqlx::types::Json(json!({"tier": "control"})));
    w.labels.0.insert("only_the_workers".into(), "yes".into());
    w.image_id = None;
    let op = NewOperation {
        cluster_uuid: c.uuid,
        nodegroup_uuid: None,
        kind: OperationKind::Create,
        payload: json!({}),
        request_id: None,
    };
    let create = NewCluster::new(&c, [&m, &w], &op).unwrap();
    // The document (its `Debug` shows it) leaves out the NULLs and the master's labels, the
    // cluster's: each of the cluster's labels is in it twice (the cluster's, the worker's).
    let doc = format!("{create:?}");
    assert!(!doc.contains("null"), "{doc}");
    for key in c.labels.0.keys() {
        assert_eq!(
            doc.matches(&format!("\\\"{key}\\\":")).count(),
            2,
            "{key}: {doc}"
        );
    }
    let recorded = Recorder::new(pool.clone(), 20, std::time::Duration::from_secs(10))
        .record(create)
        .await
        .unwrap();
    assert_eq!(recorded, Recorded::Created);

    let mut got = db::clusters::by_uuid(pool, &db::clusters::Scope::All, c.uuid)
        .await
        .unwrap()
        .expect("the recorded cluster");
    (got.id, got.created_at, got.updated_at) = (c.id, c.created_at, c.updated_at);
    assert_eq!(got, c);
    let mut got = db::nodegroups::of_cluster(pool, c.uuid).await.unwrap();
    got.sort_by_key(|n| n.role != "master");
    for (got, given) in got.iter_mut().zip([&m, &w]) {
        (got.id, got.created_at, got.updated_at) = (given.id, given.created_at, given.updated_at);
        assert_eq!(got, given);
    }
    let (request_id,): (Option<String>,) =
        sqlx::query_as("SELECT request_id FROM operation WHERE cluster_uuid = $1")
            .bind(c.uuid)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(request_id, None);
}

/// Templates looked up together (src/db/templates.rs `batched`): concurrent creates of two
/// projects on one project's private template read it in shared statements, and each caller
/// still sees only what it may — Alice's creates are accepted, Bob's are her template's
/// not-found, as when each reads alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn templates_read_together_are_each_callers_own_to_see() {
    let t = app().await;
    let ct = t.template(&ALICE, "private").await;
    let create = |who: &'static As, i: usize| {
        let ct = ct.clone();
        let t = &t;
        async move {
            t.post_v(
                who,
                "/v1/clusters",
                "1.10",
                json!({"name": format!("c{i}"), "cluster_template_id": ct}),
            )
            .await
        }
    };
    let answers =
        join_all((0..16).map(|i| create(if i % 2 == 0 { &ALICE } else { &BOB }, i))).await;
    for (i, r) in answers.iter().enumerate() {
        if i % 2 == 0 {
            r.assert_status(202);
        } else {
            assert_magnum_error(r, 404, &format!("ClusterTemplate {ct} could not be found."));
        }
    }
}

/// Concurrent nodegroup shows and lists of Alice's cluster by Alice, Bob and an admin: each
/// caller gets what it would alone — Alice and the admin the nodegroup (by name, uuid and id)
/// and the list, Bob the cluster's not-found; a nodegroup name the cluster does not have is the
/// nodegroup's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_nodegroup_reads_are_each_callers_own_to_see() {
    let t = app().await;
    let ct = t.template(&ALICE, "ngs").await;
    let c = t.cluster(&ALICE, "ngs", &ct).await;
    let worker = t
        .get_v(
            &ALICE,
            &format!("/v1/clusters/{c}/nodegroups/default-worker"),
            "1.9",
        )
        .await;
    worker.assert_status(200);
    let (uuid, id) = (
        worker.body["uuid"].as_str().unwrap().to_string(),
        worker.body["id"].to_string(),
    );
    let idents = [
        "default-worker".to_string(),
        uuid.clone(),
        id,
        "nope".into(),
    ];
    let paths: Vec<String> = idents
        .iter()
        .map(|i| format!("/v1/clusters/{c}/nodegroups/{i}"))
        .chain([format!("/v1/clusters/{c}/nodegroups?role=worker")])
        .collect();
    let asks: Vec<(&As, &String)> = [&ALICE, &BOB, &ADMIN]
        .into_iter()
        .flat_map(|who| paths.iter().map(move |p| (who, p)))
        .cycle()
        .take(90)
        .collect();
    let answers = join_all(asks.iter().map(|(who, p)| t.get_v(who, p, "1.9"))).await;
    for ((who, path), r) in asks.iter().zip(&answers) {
        if who.user == BOB.user {
            assert_magnum_error(r, 404, &format!("Cluster {c} could not be found."));
        } else if path.ends_with("/nope") {
            assert_magnum_error(r, 404, "Nodegroup nope could not be found.");
        } else if path.contains('?') {
            r.assert_status(200);
            assert_eq!(
                r.names("nodegroups"),
                ["default-worker"],
                "{} {path}",
                who.user
            );
        } else {
            r.assert_status(200);
            assert_eq!(r.body["uuid"], uuid.as_str(), "{} {path}", who.user);
        }
    }
}

/// The backends that have recorded creates, as `pg_stat_activity` shows them idle after,
/// the latest first.
async fn recording_backends(t: &TestApp) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE '%magnum_capi_record_creates%'
            AND pid <> pg_backend_pid()
          ORDER BY query_start DESC",
    )
    .fetch_all(&t.state.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn creates_keep_one_connection_and_take_another_when_it_is_cut() {
    let t = app().await;
    let tpl = t.template(&ALICE, "tpl").await;
    t.cluster(&ALICE, "one", &tpl).await;
    // Reads in between go through the pool; the creates' statements stay on their connection.
    t.get(&ALICE, "/v1/clusters").await.assert_status(200);
    t.cluster(&ALICE, "two", &tpl).await;
    let kept = recording_backends(&t).await;
    assert_eq!(
        kept.len(),
        1,
        "one connection records the creates: {kept:?}"
    );
    let (cut,): (bool,) = sqlx::query_as("SELECT pg_terminate_backend($1)")
        .bind(kept[0])
        .fetch_one(&t.state.pool)
        .await
        .unwrap();
    assert!(cut);
    // The batch on the cut connection fails: the create is recorded alone, and the next batch
    // takes another connection, which is kept in turn.
    t.cluster(&ALICE, "three", &tpl).await;
    t.cluster(&ALICE, "four", &tpl).await;
    let again = recording_backends(&t).await[0];
    t.get(&ALICE, "/v1/clusters").await.assert_status(200);
    t.cluster(&ALICE, "five", &tpl).await;
    assert_eq!(recording_backends(&t).await[0], again, "kept in turn");
    assert_eq!(clusters_of_alice(&t).await, 5);
}

/// One round of [`creates_survive_their_connection_breaking_mid_batch`]: `n` creates named
/// `<prefix>-<i>` at once through `t`, each answered (or not) within `bound`; the answers with
/// how long each took.
async fn creates_at_once(
    t: &TestApp,
    tpl: &str,
    prefix: &str,
    n: usize,
    bound: std::time::Duration,
) -> Vec<(String, Resp, std::time::Duration)> {
    join_all((0..n).map(|i| async move {
        let name = format!("{prefix}-{i}");
        let started = std::time::Instant::now();
        let r = tokio::time::timeout(
            bound,
            t.post(
                &ALICE,
                "/v1/clusters",
                json!({"name": name, "cluster_template_id": tpl}),
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("create {name} hung past {bound:?}"));
        (name, r, started.elapsed())
    }))
    .await
}

/// Every create of `answers` answered 202 exists exactly once (under its uuid); one that
/// failed, with Magnum's error body, exists only if the client's retry finds it by name (then
/// exactly once). Returns how many failed.
async fn assert_each_create_once(
    a: &TestApp,
    t: &TestApp,
    answers: &[(String, Resp, std::time::Duration)],
) -> usize {
    let mut failed = 0;
    for (name, r, _) in answers {
        let (n, uuid): (i64, Option<String>) =
            sqlx::query_as("SELECT count(*), min(uuid::text) FROM cluster WHERE name = $1")
                .bind(name)
                .fetch_one(&a.state.pool)
                .await
                .unwrap();
        if r.status.as_u16() == 202 {
            assert_eq!(n, 1, "{name}: answered 202, {n} clusters");
            assert_eq!(r.body["uuid"].as_str(), uuid.as_deref(), "{name}");
        } else {
            failed += 1;
            // The database unreachable for the moment: nothing else.
            assert!(
                r.status.as_u16() == 503 && is_magnum_error(503, &r.body),
                "{name}: {} {}",
                r.status,
                r.body
            );
            let found = t.get(&ALICE, &format!("/v1/clusters/{name}")).await;
            match found.status.as_u16() {
                200 => assert_eq!(n, 1, "{name}: found by the client's retry, {n} clusters"),
                _ => assert_eq!(n, 0, "{name}: failed ({}), not found, yet exists", r.status),
            }
        }
    }
    failed
}

/// The connection that records creates (src/db/creates.rs) broken mid-batch, through a TCP
/// proxy between the service and PostgreSQL: the answer to a batch's statement lost after it
/// was delivered (and committed), the connection then cut, or left open and silent (a
/// half-open peer); and every connection cut while a batch waits for its project's lock. No
/// create waits past the statement timeout and a half; every create answered 202 exists
/// exactly once; where the answer was lost every create is still answered 202 (what it wrote
/// is looked up, not answered as an error nor written twice); where the connections were cut
/// a create that failed does not exist unless the client's retry finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_survive_their_connection_breaking_mid_batch() {
    use crate::common::tcp_proxy::{Proxy, Then};

    const TIMEOUT_MS: u64 = 1_000;
    const CREATES: usize = 20;
    // The statement timeout and half again, for the lost batch, then a create alone; the rest
    // is slack for a loaded machine.
    let bound = std::time::Duration::from_millis(3 * TIMEOUT_MS + 7_000);
    let a = app_with(|c| c.quotas.max_clusters_per_project = 1_000).await;
    let tpl = a.template(&ALICE, "tpl").await;
    let proxy = Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], pg().port()))).await;
    let t = a
        .twin_at(&proxy.url(&a.url, pg().port()), |c| {
            c.database.creates_timeout_ms = TIMEOUT_MS;
        })
        .await;
    t.cluster(&ALICE, "warm", &tpl).await;

    // The answer lost after the statement committed; the connection then cut.
    proxy.lose_answer_to(br#""name":"lost-"#, Then::Cut);
    let answers = creates_at_once(&t, &tpl, "lost", CREATES, bound).await;
    assert_eq!(proxy.lost(), 1, "a batch lost its answer");
    assert_eq!(assert_each_create_once(&a, &t, &answers).await, 0);

    // The same, the connection left open: nothing comes back until the timeout.
    proxy.lose_answer_to(br#""name":"silent-"#, Then::Silent);
    let answers = creates_at_once(&t, &tpl, "silent", CREATES, bound).await;
    assert_eq!(proxy.lost(), 2, "a batch lost its answer");
    assert_eq!(assert_each_create_once(&a, &t, &answers).await, 0);
    let slowest = answers.iter().map(|(_, _, took)| *took).max().unwrap();
    assert!(
        slowest >= std::time::Duration::from_millis(TIMEOUT_MS),
        "the silent batch was waited for ({slowest:?})"
    );

    // Every connection cut while a batch waits for Alice's project's lock (held here).
    let holder = holding_alices(
        &a.state.pool,
        "SELECT pg_advisory_xact_lock(hashtext('quota:' || $1))",
    )
    .await;
    let creates = creates_at_once(&t, &tpl, "cut", CREATES, bound);
    let cut = async {
        lock_waiter(&a.state.pool).await;
        proxy.cut_all();
        holder.commit().await.unwrap();
    };
    let (answers, ()) = futures::join!(creates, cut);
    assert_each_create_once(&a, &t, &answers).await;

    // And the connection replaced: creates go on.
    t.cluster(&ALICE, "after", &tpl).await;
}
