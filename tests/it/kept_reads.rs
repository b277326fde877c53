//! `db::kept`: the API's reads hand their connection back to a set kept beside the pool,
//! without the pool's release (and its round trip); a read that does not run to its end closes
//! its connection, and a read finding the set busy uses the pool. A replica under load opens no
//! more connections than the pool's, the set's and the creates' one (docs/operate.md's budget).
use crate::common::wait::until;
use crate::common::*;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::TryStreamExt;
use magnum_capi::db::kept::KeptPool;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// A pool on a fresh database that counts the connections handed back to it (its release,
/// where sqlx also sends its round trip), and another pool to watch the database with.
async fn counting_pool() -> (PgPool, Arc<AtomicUsize>, PgPool) {
    let url = fresh_database().await;
    let released = Arc::new(AtomicUsize::new(0));
    let count = released.clone();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .after_release(move |_, _| {
            let count = count.clone();
            Box::pin(async move {
                count.fetch_add(1, Ordering::SeqCst);
                Ok(true)
            })
        })
        .connect(&url)
        .await
        .expect("pool");
    let watch = PgPool::connect(&url).await.expect("watching pool");
    (pool, released, watch)
}

async fn pid(ex: impl sqlx::PgExecutor<'_>) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(ex)
        .await
        .expect("pid")
}

/// Waits until the backend `pid` has ended (its connection was closed), watching with `pool`.
async fn gone(pool: &PgPool, pid: i32) {
    until("the backend gone", || async {
        let there: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)")
                .bind(pid)
                .fetch_one(pool)
                .await
                .expect("pg_stat_activity");
        (!there).then_some(())
    })
    .await;
}

fn released_now(released: &AtomicUsize) -> usize {
    released.load(Ordering::SeqCst)
}

#[tokio::test]
async fn reads_hand_their_connection_back_to_the_set_not_to_the_pool() {
    let (pool, released, _) = counting_pool().await;
    // The count sees the pool's releases.
    let pooled = pid(&pool).await;
    until("the pool's release", || async {
        (released_now(&released) == 1).then_some(())
    })
    .await;

    let kept = KeptPool::new(pool.clone(), 2);
    let first = pid(&kept).await;
    assert_ne!(first, pooled, "a kept connection is not one of the pool's");
    for _ in 0..20 {
        // Both ways a statement runs: one row (fetch_optional) and all rows (fetch_many).
        assert_eq!(pid(&kept).await, first);
        let all: Vec<i32> =
            sqlx::query_scalar("SELECT pg_backend_pid() FROM generate_series(1, 3)")
                .fetch_all(&kept)
                .await
                .expect("rows");
        assert_eq!(all, vec![first; 3]);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(released_now(&released), 1, "a kept read went to the pool");
    assert_eq!(
        (pool.size(), pool.num_idle()),
        (1, 1),
        "the pool keeps its own connections"
    );
}

#[tokio::test]
async fn a_read_that_does_not_run_to_its_end_closes_its_connection() {
    let (pool, released, watch) = counting_pool().await;
    let kept = KeptPool::new(pool.clone(), 1);
    let mut last = pid(&kept).await;

    // Its rows left unread: the stream dropped after the first.
    {
        let mut rows =
            sqlx::query_scalar::<_, i32>("SELECT g FROM generate_series(1, 100000) g").fetch(&kept);
        assert_eq!(rows.try_next().await.expect("a row"), Some(1));
    }
    gone(&watch, last).await;
    let n: i64 = sqlx::query_scalar("SELECT 42::bigint")
        .fetch_one(&kept)
        .await
        .expect("the read after a half-read one");
    assert_eq!(n, 42);
    let next = pid(&kept).await;
    assert_ne!(next, last);
    last = next;

    // Cancelled while PostgreSQL runs it.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        sqlx::query("SELECT pg_sleep(0.5)").execute(&kept),
    )
    .await;
    assert!(cancelled.is_err());
    gone(&watch, last).await;
    let next = pid(&kept).await;
    assert_ne!(next, last);
    last = next;

    // Refused by PostgreSQL.
    let refused = sqlx::query_scalar::<_, i32>("SELECT 1 / 0")
        .fetch_one(&kept)
        .await;
    assert!(refused.is_err());
    gone(&watch, last).await;
    let next = pid(&kept).await;
    assert_ne!(next, last);
    assert_eq!(pid(&kept).await, next, "kept again after a read done");

    assert_eq!(released_now(&released), 0, "none of these were the pool's");
}

#[tokio::test]
async fn a_read_finding_every_kept_connection_busy_takes_the_pools_rather_than_wait_for_one() {
    let (pool, released, _) = counting_pool().await;
    let kept = KeptPool::new(pool.clone(), 1);
    let mut held = kept.acquire().await.expect("the kept connection");
    let other = tokio::time::timeout(Duration::from_secs(5), pid(&kept))
        .await
        .expect("not waiting for the busy set");
    until("the pool's connection back in the pool", || async {
        (released_now(&released) == 1).then_some(())
    })
    .await;
    let mine = pid(&mut *held).await;
    assert_ne!(mine, other);
    held.done();
    assert_eq!(pid(&kept).await, mine);
    assert_eq!(released_now(&released), 1);
}

#[tokio::test]
async fn a_closed_set_closes_its_connections_and_its_reads_use_the_pool() {
    let (pool, released, watch) = counting_pool().await;
    let kept = KeptPool::new(pool.clone(), 2);
    let (mut a, mut b) = tokio::join!(kept.acquire(), kept.acquire());
    let (a_pid, b_pid) = (
        pid(&mut **a.as_mut().expect("one")).await,
        pid(&mut **b.as_mut().expect("two")).await,
    );
    a.expect("one").done();
    kept.close();
    // Idle when the set closed, and in use then.
    gone(&watch, a_pid).await;
    b.expect("two").done();
    gone(&watch, b_pid).await;
    pid(&kept).await;
    until("the read after closing back in the pool", || async {
        (released_now(&released) == 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn closing_the_pool_stops_the_kept_reads_too() {
    let (pool, _, _) = counting_pool().await;
    let kept = KeptPool::new(pool.clone(), 2);
    pid(&kept).await;
    pool.close().await;
    let after = sqlx::query("SELECT 1").execute(&kept).await;
    assert!(matches!(after, Err(sqlx::Error::PoolClosed)), "{after:?}");
}

/// Ends the backends `pids` (as a failover or a cut does) and waits until they are gone.
async fn end_backends(watch: &PgPool, pids: &[i32]) {
    for p in pids {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(p)
            .execute(watch)
            .await
            .expect("terminate");
        gone(watch, *p).await;
    }
}

#[tokio::test]
async fn a_read_whose_kept_connection_was_lost_runs_again_on_a_new_one() {
    let (pool, released, watch) = counting_pool().await;
    let kept = KeptPool::new(pool.clone(), 2);
    // The backends end while their connections are in use, and the connections go back to the
    // set just before the next read: it uses one at once, without the check an idle one gets
    // after a second, so only running again answers it.
    let (mut a, mut b) = tokio::join!(kept.acquire(), kept.acquire());
    let ended = [
        pid(&mut **a.as_mut().expect("one")).await,
        pid(&mut **b.as_mut().expect("two")).await,
    ];
    end_backends(&watch, &ended).await;
    a.expect("one").done();
    b.expect("two").done();

    // One row: answered on a new connection; the other idle one, lost alike, is not used.
    let one = pid(&kept).await;
    assert!(!ended.contains(&one), "{one} was ended");
    assert_eq!(pid(&kept).await, one, "the new one is kept");

    // All rows: the same.
    let mut c = kept.acquire().await.expect("the new one");
    assert_eq!(pid(&mut *c).await, one);
    end_backends(&watch, &[one]).await;
    c.done();
    let all: Vec<i32> = sqlx::query_scalar("SELECT pg_backend_pid() FROM generate_series(1, 3)")
        .fetch_all(&kept)
        .await
        .expect("rows after the loss");
    assert!(
        !all.contains(&one) && all.iter().all(|p| *p == all[0]),
        "{all:?}"
    );
    assert_eq!(released_now(&released), 0, "none of these were the pool's");
}

/// A replica with the shipped defaults (the binary's `serve --dev` on a database of its own,
/// the pool's and the kept set's default sizes, the worker on) under many more concurrent
/// requests than it has connections opens at most the pool's, the kept set's and the one that
/// records creates: the 29 docs/operate.md gives, which sizes PostgreSQL for the chart's
/// replicas during a rolling update.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_under_load_opens_no_more_connections_than_its_budget() {
    use crate::common::served::{Server, WORKER_ON};
    use reqwest::Method;
    use std::sync::atomic::{AtomicBool, AtomicI64};

    let d = magnum_capi::config::Config::default().database;
    let budget = i64::from(d.max_connections + d.kept_read_connections + 1);
    assert_eq!(budget, 29, "docs/operate.md gives a replica's budget as 29");
    let url = fresh_database().await;
    let pooled = d.max_connections.to_string();
    let server = Arc::new(
        Server::start(
            &url,
            &[
                WORKER_ON,
                ("MAGNUM_CAPI__DATABASE__MAX_CONNECTIONS", pooled.as_str()),
                ("MAGNUM_CAPI__QUOTAS__MAX_CLUSTERS_PER_PROJECT", "100000"),
            ],
        )
        .await,
    );
    let template = server.create_template().await;
    let create = {
        let (server, template) = (server.clone(), template.clone());
        move |name: String| {
            let (server, template) = (server.clone(), template.clone());
            async move {
                let body = serde_json::json!({"name": name, "cluster_template_id": template});
                server.call(Method::POST, "/v1/clusters", Some(body)).await
            }
        }
    };
    let made = futures::future::join_all((0..40).map(|i| create(format!("c{i}")))).await;
    let clusters: Vec<String> = made
        .iter()
        .map(|(st, c)| {
            assert_eq!(*st, 202, "{c}");
            c["uuid"].as_str().expect("uuid").to_string()
        })
        .collect();

    // The database's backends other than the watcher's own, sampled throughout.
    let watch = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("watching connection");
    let (stop, peak) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicI64::new(0)),
    );
    let sampler = tokio::spawn({
        let (stop, peak) = (stop.clone(), peak.clone());
        async move {
            while !stop.load(Ordering::SeqCst) {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .fetch_one(&watch)
                .await
                .expect("pg_stat_activity");
                peak.fetch_max(n, Ordering::SeqCst);
            }
        }
    });

    // 120 clients for 3 s: shows, pages, nodegroups and templates of many clusters, and creates
    // beside them (the worker and the status writer busy with them).
    let clients = 120;
    let end = tokio::time::Instant::now() + Duration::from_secs(3);
    let answers = futures::future::join_all((0..clients).map(|i| {
        let (server, clusters, template) = (server.clone(), clusters.clone(), template.clone());
        let create = create.clone();
        async move {
            let mut codes = Vec::new();
            let mut n = i;
            while tokio::time::Instant::now() < end {
                let c = &clusters[n % clusters.len()];
                let (code, _) = if n % 8 == 0 {
                    create(format!("load{i}-{n}")).await
                } else {
                    let path = match n % 8 {
                        1 => format!("/v1/clusters/detail?limit=20&marker={c}"),
                        2 => format!("/v1/clusters/{c}/nodegroups"),
                        3 => format!("/v1/clustertemplates/{template}"),
                        4 => format!("/v1/clusters?limit=5&marker={c}"),
                        _ => format!("/v1/clusters/{c}"),
                    };
                    server.call(Method::GET, &path, None).await
                };
                codes.push(code);
                n += clients;
            }
            codes
        }
    }))
    .await;
    stop.store(true, Ordering::SeqCst);
    sampler.await.expect("sampler");
    let codes: Vec<u16> = answers.into_iter().flatten().collect();
    let failed: Vec<&u16> = codes.iter().filter(|c| **c >= 300).collect();
    assert!(
        failed.is_empty(),
        "{} of {} failed: {failed:?}",
        failed.len(),
        codes.len()
    );
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        peak <= budget,
        "{peak} connections at once, the budget is {budget}"
    );
    // The load reached past the kept set and the creates' connection into the pool, so the
    // bound above held with all three in use.
    assert!(
        peak > i64::from(d.kept_read_connections + 1),
        "only {peak} connections at once: the load did not reach the pool"
    );
    eprintln!("peak {peak} of {budget}, {} requests", codes.len());
}
