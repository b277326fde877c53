//! Serialised views reused until PostgreSQL reports a change (src/view_cache.rs): what is
//! reused, what retires it, who may be served a reused view, and that a reused answer is the
//! answer an instance without reuse gives.

use crate::common::served::Server;
use crate::common::wait::until;
use crate::common::*;

use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};

const NOBODY: As = As {
    user: "nobody",
    project: "p-alice",
    roles: "observer",
};

/// A change PostgreSQL does not announce (triggers off for the transaction): only a view that
/// is really reused still shows the old value afterwards.
async fn unannounced(t: &TestApp, sql: &str) {
    let n = write_unannounced(&t.state.pool, sql).await;
    assert!(n > 0, "{sql} changed nothing");
}

/// The PostgreSQL backend listening for this database's view changes.
async fn listener_pid(t: &TestApp) -> i32 {
    let (pid,): (i32,) = sqlx::query_as(
        "SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'LISTEN%magnum_capi_views%'",
    )
    .fetch_one(&t.state.pool)
    .await
    .expect("a listening backend");
    pid
}

/// Stops a backend until dropped (also when the test fails half-way).
struct Stopped(i32);

impl Stopped {
    fn new(pid: i32) -> Self {
        assert!(signal(pid, "-STOP"), "kill -STOP {pid}");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // No assertion here: a panic while a failed test unwinds would abort the run.
        signal(self.0, "-CONT");
    }
}

/// Whether `kill <sig> <pid>` succeeded (the shell's builtin: no procps needed).
fn signal(pid: i32, sig: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("kill {sig} {pid}")])
        .status()
        .is_ok_and(|s| s.success())
}

/// Long enough that no heartbeat notices a stopped listener while a test wants it unnoticed.
const QUIET_HEARTBEAT_MS: u64 = 3_600_000;

async fn setup() -> (TestApp, String, String) {
    setup_beating(QUIET_HEARTBEAT_MS).await
}

/// An instance reusing views whose listener beats every `heartbeat_ms`, with a template and a
/// cluster whose notifications have arrived.
async fn setup_beating(heartbeat_ms: u64) -> (TestApp, String, String) {
    let t = app_with(|c| c.database.listen_heartbeat_ms = heartbeat_ms)
        .await
        .with_view_cache()
        .await;
    let tpl = t.template(&ALICE, "tpl").await;
    let c = t.cluster(&ALICE, "one", &tpl).await;
    settle(&t).await;
    (t, tpl, c)
}

/// Alice renames the template `patched` (a successful write through this replica).
async fn rename_template(t: &TestApp, tpl: &str) {
    t.patch(
        &ALICE,
        &format!("/v1/clustertemplates/{tpl}"),
        json!([{"op": "replace", "path": "/name", "value": "patched"}]),
    )
    .await
    .assert_status(200);
}

/// `field` of the first item of the list at `path`, as Alice reads it.
async fn first(t: &TestApp, path: &str, field: &str) -> Value {
    let list = path
        .trim_start_matches("/v1/")
        .split(['/', '?'])
        .next()
        .unwrap();
    t.get(&ALICE, path).await.body[list][0][field].clone()
}

/// Waits until the notifications of the writes so far have arrived (none for 200 ms), so that
/// what the test stores next is not retired by them. Quiet is the absence of an event, so this
/// one wait pauses rather than polls for a state.
async fn settle(t: &TestApp) {
    let mut last = t.state.views.peek();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let now = t.state.views.peek();
        if now == last {
            return;
        }
        last = now;
    }
}

#[tokio::test]
async fn a_view_is_reused_until_a_change_is_announced() {
    let (t, _tpl, c) = setup().await;
    let show = format!("/v1/clusters/{c}");
    let pages = [
        "/v1/clusters",
        "/v1/clusters/detail",
        "/v1/clustertemplates",
    ];
    let shown = t.get(&ALICE, &show).await;
    shown.assert_status(200);
    assert_eq!(shown.body["status"], "CREATE_IN_PROGRESS");
    for p in pages {
        t.get(&ALICE, p).await.assert_status(200);
    }
    unannounced(
        &t,
        &format!("UPDATE cluster SET status = 'CREATE_COMPLETE' WHERE uuid = '{c}'"),
    )
    .await;
    unannounced(&t, "UPDATE cluster_template SET name = 'renamed'").await;
    // Nothing was announced: every view is served as stored.
    assert_eq!(t.get(&ALICE, &show).await.body, shown.body);
    assert_eq!(
        first(&t, "/v1/clusters", "status").await,
        "CREATE_IN_PROGRESS"
    );
    assert_eq!(first(&t, "/v1/clustertemplates", "name").await, "tpl");
    // Any announced change (another replica, the status writer) retires them all.
    t.write_sql(&format!(
        "UPDATE nodegroup SET status_reason = 'x' WHERE cluster_id = '{c}' AND role = 'worker'"
    ))
    .await;
    assert_eq!(t.get(&ALICE, &show).await.body["status"], "CREATE_COMPLETE");
    assert_eq!(
        first(&t, "/v1/clusters/detail", "status").await,
        "CREATE_COMPLETE"
    );
    assert_eq!(first(&t, "/v1/clustertemplates", "name").await, "renamed");
}

/// A write through this replica is read back at once (its own retiring), and so is another
/// replica's: the read finds this replica's listener behind the committed change position and
/// builds from PostgreSQL, although the notification cannot arrive.
#[tokio::test]
async fn a_write_through_this_replica_or_another_is_read_back_at_once() {
    let (t, tpl, c) = setup().await;
    t.get(&ALICE, "/v1/clusters").await.assert_status(200);
    t.get(&ALICE, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(200);
    t.get(&ALICE, "/v1/clustertemplates")
        .await
        .assert_status(200);
    // No notification reaches this instance while its listening backend is stopped.
    let stopped = Stopped::new(listener_pid(&t).await);
    let second = t.cluster(&ALICE, "two", &tpl).await;
    let names: Vec<Value> = t.get(&ALICE, "/v1/clusters").await.body["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("one"), json!("two")]);
    t.delete(&ALICE, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(204);
    assert_eq!(
        t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body["status"],
        "DELETE_IN_PROGRESS"
    );
    rename_template(&t, &tpl).await;
    assert_eq!(first(&t, "/v1/clustertemplates", "name").await, "patched");
    let show = format!("/v1/clusters/{second}");
    assert_eq!(
        t.get(&ALICE, &show).await.body["status"],
        "CREATE_IN_PROGRESS"
    );
    let other = t.twin(|_| {}).await;
    other
        .write_sql(&format!(
            "UPDATE cluster SET status = 'CREATE_FAILED' WHERE uuid = '{second}'"
        ))
        .await;
    assert_eq!(t.get(&ALICE, &show).await.body["status"], "CREATE_FAILED");
    drop(stopped);
}

/// A replica reading views (`b`, reuse on) and the one without reuse (`plain`) answer `path`
/// alike for Alice: `None`, else what differs.
async fn stale(b: &TestApp, plain: &TestApp, path: &str) -> Option<String> {
    let (got, want) = (b.get(&ALICE, path).await, plain.get(&ALICE, path).await);
    let same = got.status == want.status && (!want.status.is_success() || got.body == want.body);
    (!same).then(|| {
        format!(
            "{path}: {} {} / {} {}",
            got.status, got.body, want.status, want.body
        )
    })
}

/// Writes on replica `a` (`n`-th of the test): what `b` reads right after a write answered on
/// `a` is what PostgreSQL holds, 1,000 times, creates, updates and deletes of clusters,
/// nodegroups and templates mixed — with `b`'s listener alive, then stopped (a half-open
/// listening connection: no notification arrives, and its heartbeat has not noticed yet).
/// Every answer of `b` is compared with one built from PostgreSQL by an instance without reuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_one_replica_sees_every_write_answered_on_another() {
    const WRITES: usize = 1_000;
    let a = app_with(|c| {
        c.database.listen_heartbeat_ms = QUIET_HEARTBEAT_MS;
        c.quotas.max_clusters_per_project = 10_000;
    })
    .await;
    let plain = a.twin(|c| c.api.view_cache_mib = 0).await;
    let tpl = a.template(&ALICE, "tpl").await;
    let renamed = a.template(&ALICE, "renamed").await;
    // Clusters in CREATE_COMPLETE that the updates and nodegroup writes take turns on (each
    // write's operation is marked done after it, so the next can start).
    let ready: Vec<String> = {
        let w = start_worker(&a);
        let mut ready = Vec::new();
        for i in 0..3 {
            ready.push(a.cluster(&ALICE, &format!("ready{i}"), &tpl).await);
        }
        for c in &ready {
            a.wait_cluster(&ALICE, c, "CREATE_COMPLETE").await;
        }
        w.stop().await;
        ready
    };
    let b = a.twin(|_| {}).await.with_view_cache().await;
    let mut stopped = None;
    let (mut templates, mut clusters): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let mut nodegroups: Vec<(String, String)> = Vec::new();
    let mut stale_reads = Vec::new();
    let clusters_page = || "/v1/clusters/detail?limit=5&sort_dir=desc".to_string();
    let templates_page = || "/v1/clustertemplates?limit=5&sort_dir=desc".to_string();
    for n in 0..WRITES {
        if n == WRITES / 2 {
            stopped = Some(Stopped::new(listener_pid(&b).await));
        }
        let r = ready[n % ready.len()].clone();
        let cluster_reads = |c: &str| vec![format!("/v1/clusters/{c}"), clusters_page()];
        let nodegroup_reads = |c: &str| {
            vec![
                format!("/v1/clusters/{c}"),
                format!("/v1/clusters/{c}/nodegroups"),
            ]
        };
        // What the write changes, read by `b` before it (so `b` has it to reuse).
        let mut reads = match n % 10 {
            0 | 9 => vec![clusters_page(), "/v1/clusters?limit=5&sort_dir=desc".into()],
            1 => cluster_reads(clusters.last().unwrap()),
            2 => cluster_reads(&r),
            3 => nodegroup_reads(&r),
            4 | 5 => nodegroup_reads(&nodegroups[0].0),
            6 => vec![templates_page()],
            7 => vec![templates_page(), format!("/v1/clustertemplates/{renamed}")],
            _ => vec![
                templates_page(),
                format!("/v1/clustertemplates/{}", templates.last().unwrap()),
            ],
        };
        for path in &reads {
            b.get(&ALICE, path).await;
        }
        // The write, answered by `a`; `done`: the cluster whose operation it began.
        let done = match n % 10 {
            0 | 9 => {
                let c = a.cluster(&ALICE, &format!("c{n}"), &tpl).await;
                reads.push(format!("/v1/clusters/{c}"));
                clusters.push(c);
                None
            }
            1 => {
                let c = clusters.pop().unwrap();
                a.delete(&ALICE, &format!("/v1/clusters/{c}"))
                    .await
                    .assert_status(204);
                None
            }
            2 => {
                let count = 2 + (n / 10) % 3;
                a.patch(
                    &ALICE,
                    &format!("/v1/clusters/{r}"),
                    json!([{"op": "replace", "path": "/node_count", "value": count}]),
                )
                .await
                .assert_status(202);
                Some(r)
            }
            3 => {
                let name = format!("ng{n}");
                a.post_v(
                    &ALICE,
                    &format!("/v1/clusters/{r}/nodegroups"),
                    "latest",
                    json!({"name": name}),
                )
                .await
                .assert_status(202);
                nodegroups.push((r.clone(), name));
                Some(r)
            }
            4 => {
                let (c, ng) = nodegroups[0].clone();
                a.patch_v(
                    &ALICE,
                    &format!("/v1/clusters/{c}/nodegroups/{ng}"),
                    "latest",
                    json!([{"op": "replace", "path": "/max_node_count", "value": 4}]),
                )
                .await
                .assert_status(202);
                Some(c)
            }
            5 => {
                let (c, ng) = nodegroups.remove(0);
                a.delete_v(
                    &ALICE,
                    &format!("/v1/clusters/{c}/nodegroups/{ng}"),
                    "latest",
                )
                .await
                .assert_status(204);
                Some(c)
            }
            6 => {
                templates.push(a.template(&ALICE, &format!("t{n}")).await);
                None
            }
            7 => {
                a.patch(
                    &ALICE,
                    &format!("/v1/clustertemplates/{renamed}"),
                    json!([{"op": "replace", "path": "/name", "value": format!("r{n}")}]),
                )
                .await
                .assert_status(200);
                None
            }
            _ => {
                let t = templates.pop().unwrap();
                a.delete(&ALICE, &format!("/v1/clustertemplates/{t}"))
                    .await
                    .assert_status(204);
                None
            }
        };
        // Right after the write was answered.
        for path in &reads {
            stale_reads.extend(stale(&b, &plain, path).await);
        }
        // The write's operation marked done (more writes on `a`, by SQL), and read again.
        if let Some(c) = done {
            a.write_sql(&format!(
                "WITH d AS (UPDATE operation SET state = 'done'
                             WHERE cluster_uuid = '{c}' AND state IN ('pending', 'running'))
                 UPDATE cluster SET status = 'UPDATE_COMPLETE' WHERE uuid = '{c}'"
            ))
            .await;
            a.write_sql(&format!(
                "DELETE FROM nodegroup WHERE cluster_id = '{c}' AND status = 'DELETE_IN_PROGRESS'"
            ))
            .await;
            a.write_sql(&format!(
                "UPDATE nodegroup SET status = 'UPDATE_COMPLETE'
                  WHERE cluster_id = '{c}' AND status <> 'UPDATE_COMPLETE'"
            ))
            .await;
            for path in &reads {
                stale_reads.extend(stale(&b, &plain, path).await);
            }
        }
    }
    drop(stopped);
    assert!(
        stale_reads.is_empty(),
        "{} stale answers, the first: {:?}",
        stale_reads.len(),
        stale_reads.first()
    );
}
/// The labels of a cluster `name` created on `tpl` (the template's: the request names none).
async fn created_labels(t: &TestApp, name: &str, tpl: &str) -> Value {
    let c = t.cluster(&ALICE, name, tpl).await;
    t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body["labels"].clone()
}

/// Waits until a change of templates has reached this instance since `before`.
async fn templates_moved(t: &TestApp, before: Option<u64>) {
    until("the template generation to move", || async {
        (t.state.views.template_generation() != before).then_some(())
    })
    .await;
}

#[tokio::test]
async fn creates_reuse_their_template_until_a_template_changes() {
    let (t, tpl, _c) = setup().await;
    let marker = |labels: Value| labels["reuse_marker"].clone();
    let templates = t.state.views.template_generation();
    assert!(templates.is_some(), "reused while listening");
    // Creates retire every view, not the template rows they read.
    let views = t.state.views.peek();
    assert_eq!(marker(created_labels(&t, "two", &tpl).await), Value::Null);
    settle(&t).await;
    assert_ne!(t.state.views.peek(), views);
    assert_eq!(t.state.views.template_generation(), templates);
    // Reused: a change nobody announced is not read by the next create...
    unannounced(
        &t,
        r#"UPDATE cluster_template SET labels = labels || '{"reuse_marker": "unannounced"}'"#,
    )
    .await;
    assert_eq!(marker(created_labels(&t, "three", &tpl).await), Value::Null);
    // ...another replica's announced write is, once its notification arrives...
    let other = t.twin(|_| {}).await;
    other
        .write_sql(
            r#"UPDATE cluster_template SET labels = labels || '{"reuse_marker": "announced"}'"#,
        )
        .await;
    templates_moved(&t, templates).await;
    assert_eq!(marker(created_labels(&t, "four", &tpl).await), "announced");
    // ...and a write through this replica at once, with no notification arriving: the admin
    // hides the template (allowed while clusters use it), so Alice may not create on it.
    let _stopped = Stopped::new(listener_pid(&t).await);
    admin_sets(&t, &tpl, "/hidden").await;
    assert_magnum_error(&create_on(&t, "five", &tpl).await, 403, "Not authorized.");
}

/// The admin sets `tpl`'s boolean `field` (a JSON pointer) through `t`.
async fn admin_sets(t: &TestApp, tpl: &str, field: &str) {
    t.patch(
        &ADMIN,
        &format!("/v1/clustertemplates/{tpl}"),
        json!([{"op": "replace", "path": field, "value": true}]),
    )
    .await
    .assert_status(200);
}

/// Alice's create on `tpl` through `t`, answered.
async fn create_on(t: &TestApp, name: &str, tpl: &str) -> Resp {
    t.post(
        &ALICE,
        "/v1/clusters",
        json!({"name": name, "cluster_template_id": tpl}),
    )
    .await
}

/// How many creates of this process tried again with a fresh template, their own having moved
/// (`magnum_capi_create_stage_seconds{stage="moved"}`; the recorder is installed by the first
/// call). Other tests' creates only add to it.
fn creates_moved() -> u64 {
    let text = magnum_capi::telemetry::handle()
        .expect("the metrics recorder")
        .render();
    series_count(
        &text,
        "magnum_capi_create_stage_seconds_count{stage=\"moved\"}",
    )
}

/// The value of `series` in Prometheus text `metrics` (0 when it has none yet).
fn series_count(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

#[tokio::test]
async fn a_create_decides_on_the_template_as_committed_through_another_replica() {
    let moved = creates_moved();
    let (t, tpl, _c) = setup().await;
    let other = t.twin(|_| {}).await;
    let template = |set: &str| format!("UPDATE cluster_template SET {set} WHERE uuid = '{tpl}'");
    let devicemapper = "docker volume size 2 GB is not valid, expecting minimum value 3GB for \
                        devicemapper storage driver.";
    let private = t.template(&ADMIN, "private").await;
    // What `t` knows of the template (received, then read by a create) refuses it early (the
    // storage driver) and late (hidden from Alice)...
    let before = t.state.views.template_generation();
    other
        .write_sql(&template(
            "hidden = true, docker_storage_driver = 'devicemapper', docker_volume_size = 2",
        ))
        .await;
    templates_moved(&t, before).await;
    settle(&t).await;
    assert_magnum_error(&create_on(&t, "early", &tpl).await, 400, devicemapper);
    // ...and does not show Alice the admin's own template at all (a 400 at the first
    // microversion, as Magnum answers it).
    assert_magnum_error(
        &create_on(&t, "unseen", &private).await,
        400,
        &format!("ClusterTemplate {private} could not be found."),
    );
    // `t` receives nothing more: each create below decides on a row `t` knows that is not
    // the committed one, and must answer as the committed one says.
    let stopped = Stopped::new(listener_pid(&t).await);
    other
        .write_sql(&template("docker_storage_driver = NULL"))
        .await;
    assert_magnum_error(&create_on(&t, "late", &tpl).await, 403, "Not authorized.");
    other
        .write_sql(&template(
            r#"hidden = false, labels = labels || '{"reuse_marker": "committed"}'"#,
        ))
        .await;
    assert_eq!(
        created_labels(&t, "committed", &tpl).await["reuse_marker"],
        "committed"
    );
    admin_sets(&other, &private, "/public").await;
    t.cluster(&ALICE, "public", &private).await;
    // The three creates since `t` stopped receiving ("late", "committed", "public") decided on
    // a row `t` knew that was not the committed one, and again on a fresh read (`moved`).
    assert!(
        creates_moved() >= moved + 3,
        "{} creates tried again with a fresh template, at least 3 expected",
        creates_moved() - moved
    );
    // Received again, and read by a create: now a row `t` knows lets Alice create, and the
    // committed one (hidden through the other replica) does not.
    let before = t.state.views.template_generation();
    drop(stopped);
    templates_moved(&t, before).await;
    settle(&t).await;
    t.cluster(&ALICE, "known", &tpl).await;
    let _stopped = Stopped::new(listener_pid(&t).await);
    admin_sets(&other, &tpl, "/hidden").await;
    assert_magnum_error(&create_on(&t, "hidden", &tpl).await, 403, "Not authorized.");
    let mut names = Resp::names(&other.get(&ALICE, "/v1/clusters").await, "clusters");
    names.sort();
    assert_eq!(
        names,
        ["committed", "known", "one", "public"],
        "the refused creates recorded nothing"
    );
}

#[tokio::test]
async fn nothing_stored_before_notifications_were_lost_is_served_after() {
    let (t, _tpl, c) = setup().await;
    let show = format!("/v1/clusters/{c}");
    t.get(&ALICE, &show).await.assert_status(200);
    let before = t.state.views.peek().expect("listening");
    unannounced(
        &t,
        &format!("UPDATE cluster SET status = 'CREATE_COMPLETE' WHERE uuid = '{c}'"),
    )
    .await;
    let pid = listener_pid(&t).await;
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(&t.state.pool)
        .await
        .unwrap();
    // Listening again on a new connection, with everything from before retired.
    until("the follower to come back", || async {
        matches!(t.state.views.peek(), Some(g) if g != before).then_some(())
    })
    .await;
    assert_ne!(listener_pid(&t).await, pid);
    assert_eq!(t.get(&ALICE, &show).await.body["status"], "CREATE_COMPLETE");
}

#[tokio::test]
async fn a_reused_view_is_authorised_like_the_first_read() {
    let (t, _tpl, c) = setup().await;
    let show = format!("/v1/clusters/{c}");
    t.get(&ALICE, &show).await.assert_status(200);
    // Same project, same stored view: the policy still decides.
    t.get(&NOBODY, &show).await.assert_status(403);
    t.get(&NOBODY, "/v1/clusters").await.assert_status(403);
    t.get(&READER, &show).await.assert_status(200);
    t.get(&BOB, &show).await.assert_status(404);
    assert_eq!(
        t.get(&BOB, "/v1/clusters").await.body["clusters"],
        json!([])
    );
}

/// Every variant of a read, asked of this instance after its views were stored and of an
/// instance that never reuses one: byte-for-byte the same answers.
#[tokio::test]
async fn reused_answers_are_the_answers_without_reuse() {
    let (t, tpl, c) = setup().await;
    let _other = t
        .cluster(&BOB, "bobs", &t.template(&BOB, "btpl").await)
        .await;
    let plain = t.twin(|cfg| cfg.api.view_cache_mib = 0).await;
    let paths = [
        format!("/v1/clusters/{c}"),
        "/v1/clusters/one".to_string(),
        "/v1/clusters".to_string(),
        "/v1/clusters/detail".to_string(),
        "/v1/clusters?limit=1".to_string(),
        format!("/v1/clusters?marker={c}"),
        "/v1/clusters?sort_key=name&sort_dir=desc".to_string(),
        "/v1/clustertemplates".to_string(),
        "/v1/clustertemplates/detail".to_string(),
        "/v1/clustertemplates?limit=1".to_string(),
        format!("/v1/clustertemplates/{tpl}"),
        "/v1/clusters/nosuch".to_string(),
    ];
    let versions = ["1.1", "1.9", "1.10", "latest"];
    let callers = [&ALICE, &READER, &ADMIN, &BOB, &NOBODY];
    for round in 0..2 {
        for p in &paths {
            for v in versions {
                for who in callers {
                    let a = t.get_v(who, p, v).await;
                    let b = plain.get_v(who, p, v).await;
                    assert_eq!(
                        (a.status, &a.body),
                        (b.status, &b.body),
                        "round {round}: {} {p} at {v}",
                        who.user
                    );
                }
            }
        }
    }
}

/// A listening connection that dies without a word (its backend stopped: nothing arrives,
/// nothing fails, as with a failover that sends no reset) is noticed by its heartbeat: another
/// replica's change is served within three heartbeats instead of never.
#[tokio::test]
async fn a_silently_dead_listener_stops_reuse_within_three_heartbeats() {
    const HEARTBEAT_MS: u64 = 300;
    let (t, _tpl, c) = setup_beating(HEARTBEAT_MS).await;
    let show = format!("/v1/clusters/{c}");
    assert_eq!(
        t.get(&ALICE, &show).await.body["status"],
        "CREATE_IN_PROGRESS"
    );
    let _stopped = Stopped::new(listener_pid(&t).await);
    let stopped_at = std::time::Instant::now();
    let other = t.twin(|_| {}).await;
    other
        .write_sql(&format!(
            "UPDATE cluster SET status = 'CREATE_FAILED' WHERE uuid = '{c}'"
        ))
        .await;
    until(
        "the change to be served although its notification never arrives",
        || async { (t.get(&ALICE, &show).await.body["status"] == "CREATE_FAILED").then_some(()) },
    )
    .await;
    let took = stopped_at.elapsed();
    // Three heartbeats bound it; the slack is for a loaded machine, not for the mechanism.
    let bound = std::time::Duration::from_millis(3 * HEARTBEAT_MS + 10_000);
    assert!(took < bound, "stale for {took:?}");
}

/// Only a successful write retires the stored views: a request refused before it wrote (bad
/// input, no such cluster, not allowed; 401 goes the same way) leaves them, so nobody can keep
/// the cache empty.
#[tokio::test]
async fn refused_writes_do_not_retire_views_and_successful_ones_do() {
    let (t, tpl, c) = setup().await;
    let before = t.state.views.peek().expect("listening");
    let headerless = Request::builder()
        .method("POST")
        .uri("/v1/clusters")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    t.raw(headerless).await.assert_status(400);
    t.delete(&ALICE, "/v1/clusters/nosuch")
        .await
        .assert_status(404);
    t.delete(&NOBODY, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(403);
    assert_eq!(t.state.views.peek(), Some(before), "nothing was written");
    rename_template(&t, &tpl).await;
    assert_ne!(t.state.views.peek(), Some(before), "a write retires them");
}

#[tokio::test]
async fn what_this_replicas_worker_finishes_is_read_back_at_once() {
    let t = app().await.with_view_cache().await.with_worker();
    let tpl = t.template(&ALICE, "tpl").await;
    settle(&t).await;
    // No notification arrives while the listening backend is stopped: only the worker's own
    // retiring can make the outcome visible.
    let _stopped = Stopped::new(listener_pid(&t).await);
    let c = t.cluster(&ALICE, "one", &tpl).await;
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    t.delete(&ALICE, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(204);
    t.wait_cluster(&ALICE, &c, "GONE").await;
}

/// `magnum-capi serve` itself follows the change notifications (the tests above start the
/// follower the way `serve` does; this checks that `serve` does): a second read of a cluster is
/// served from the stored view, counted as a hit, and an announced change is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reuses_views_until_a_change() {
    let url = fresh_database().await;
    let s = Server::start(
        &url,
        &[
            ("MAGNUM_CAPI__HTTP__METRICS_PUBLIC", "true"),
            ("MAGNUM_CAPI__OPERATIONS__WORKER_ENABLED", "false"),
        ],
    )
    .await;
    let metrics = || async {
        reqwest::get(s.url("/metrics"))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    };
    let hits = || async {
        series_count(
            &metrics().await,
            "magnum_capi_view_cache_total{result=\"hit\"}",
        )
    };
    let c = s.create_cluster().await;
    // The create's request timed each of its stages (`magnum_capi_create_stage_seconds`).
    let metrics = metrics().await;
    for stage in ["template", "lookups", "validate", "seal", "record"] {
        let line = format!("magnum_capi_create_stage_seconds_count{{stage=\"{stage}\"}} 1");
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    // The create's own notifications arrive within milliseconds: let them, so that what is
    // stored next stays current; then read until a view is reused.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    until("serve to reuse a view", || async {
        assert_eq!(s.cluster_status(c).await, "CREATE_IN_PROGRESS");
        (hits().await > 0).then_some(())
    })
    .await;
    let pool = sqlx::PgPool::connect(&url).await.expect("database");
    write_unannounced(
        &pool,
        &format!("UPDATE cluster SET status = 'CREATE_FAILED' WHERE uuid = '{c}'"),
    )
    .await;
    assert_eq!(
        s.cluster_status(c).await,
        "CREATE_IN_PROGRESS",
        "unannounced: the stored view"
    );
    sqlx::query("UPDATE cluster SET status = 'CREATE_COMPLETE' WHERE uuid = $1")
        .bind(c)
        .execute(&pool)
        .await
        .unwrap();
    s.wait_status(c, "CREATE_COMPLETE").await;
}

/// Without reuse, concurrent requests share reads (src/coalesce.rs): shows of any clusters go
/// out together and identical requests share a build. Each caller still gets only what its own
/// scope holds, and every answer shows what was written before the request: while shows of the
/// cluster keep running, each write is seen by the next show.
#[tokio::test]
async fn shared_reads_keep_each_callers_scope_and_show_every_earlier_write() {
    let t = app().await;
    let tpl = t.template(&ALICE, "tpl").await;
    let c = t.cluster(&ALICE, "one", &tpl).await;
    let bobs = t.template(&BOB, "tpl").await;
    let other = t.cluster(&BOB, "two", &bobs).await;
    let show = |who: &'static As, uuid: String| {
        let t = &t;
        async move { t.get(who, &format!("/v1/clusters/{uuid}")).await }
    };
    // Alice's and Bob's shows of both clusters at once, several times over.
    let mut asks = Vec::new();
    for _ in 0..10 {
        for who in [&ALICE, &BOB] {
            for uuid in [&c, &other] {
                asks.push((who, uuid, show(who, uuid.clone())));
            }
        }
    }
    let answers = futures::future::join_all(
        asks.into_iter()
            .map(|(who, uuid, f)| async move { (who, uuid, f.await) }),
    )
    .await;
    for (who, uuid, r) in answers {
        let own = (who.project == ALICE.project) == (*uuid == c);
        if own {
            r.assert_status(200);
            assert_eq!(r.json()["uuid"], uuid.as_str());
        } else {
            assert_magnum_error(&r, 404, &format!("Cluster {uuid} could not be found."));
        }
    }
    // Shows keep going while each write lands; the show asked after a write has returned sees
    // it (a build in flight when it arrived is not its answer).
    let stop = std::sync::atomic::AtomicBool::new(false);
    let background = async {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let batch: Vec<_> = (0..8).map(|_| show(&ALICE, c.clone())).collect();
            futures::future::join_all(batch).await;
            // The writes go on beside it even should every show be ready at once.
            tokio::task::yield_now().await;
        }
    };
    let writes = async {
        for i in 0..30 {
            t.write_sql(&format!(
                "UPDATE cluster SET health_status_reason = '{{\"write\": \"{i}\"}}' WHERE uuid = '{c}'"
            ))
            .await;
            let r = show(&ALICE, c.clone()).await;
            assert_eq!(
                r.json()["health_status_reason"],
                json!({"write": i.to_string()}),
                "write {i} not seen by the show after it"
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    futures::join!(background, writes);
}
