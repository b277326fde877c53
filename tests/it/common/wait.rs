//! Waiting in tests: one poll loop ([`until`]) with one deadline, and the status wait built on
//! it ([`status`]), which fails at once when the resource lands in a `*_FAILED` status it was not
//! waiting for (nor already in), and for a quiet database ([`until_left_alone`]). Tests wait
//! through these, never by sleeping.

use std::future::Future;
use std::time::Duration;

use super::Answer;

/// The simulated management cluster's step in tests (`[capi] sim_step_ms`, `SimOptions::step`).
pub const SIM_STEP_MS: u64 = 50;

/// How often a probe runs.
const POLL: Duration = Duration::from_millis(20);

/// How long any wait may take before the test fails. A create or a delete is tens of simulated
/// steps; on a loaded 2-core CI machine a step can take many times its nominal length, so the
/// bound is thousands of steps and never below 120 s. A wait that succeeds returns as soon as its
/// probe holds: the deadline only bounds how long a failing test takes to say so.
pub fn deadline() -> Duration {
    Duration::from_millis(SIM_STEP_MS * 2400).max(Duration::from_secs(120))
}

/// Runs `probe` until it returns `Some`, and returns that; panics naming `what` at the deadline.
pub async fn until<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    until_within(deadline(), what, probe).await
}

/// [`until`] with its own bound: for what real controllers take minutes to do (the real
/// stack's rollouts: a CA rotation rolls every machine three times), where [`deadline`] is
/// sized for the simulator. The probe runs about 2,000 times over the bound (every 20 ms for
/// the simulator's, every 240 ms for the real stack's 480 s), so a minutes-long wait does not
/// take the cores the controllers it waits for need.
pub async fn until_within<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + limit;
    let poll = POLL.max(limit / 2000);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after {}s waiting for {what}",
            limit.as_secs()
        );
        tokio::time::sleep(poll).await;
    }
}

/// GETs `what` (a cluster or a nodegroup) through `get` until its `status` is one of `want`
/// (`"GONE"`: until a 404); returns that answer. A `*_FAILED` status that is not wanted fails
/// the test at once, with its `status_reason` — unless the resource was already in it when the
/// wait began (a wait for it to recover, e.g. a failed create that completes once CAPI
/// converges).
pub async fn status<F, Fut, R>(what: &str, want: &[&str], mut get: F) -> R
where
    F: FnMut() -> Fut,
    Fut: Future<Output = R>,
    R: Answer,
{
    let first: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
    until(&format!("{what} to reach {want:?}"), || {
        let r = get();
        let first = &first;
        async move {
            let r = r.await;
            if r.code() == 404 {
                return want.contains(&"GONE").then_some(r);
            }
            let st = r.json()["status"].as_str().unwrap_or_default();
            if want.contains(&st) {
                return Some(r);
            }
            let mut first = first.borrow_mut();
            let began_in = first.get_or_insert_with(|| st.to_string());
            assert!(
                !st.ends_with("_FAILED") || st == began_in.as_str(),
                "{what} is {st} while waiting for {want:?}: {}",
                r.json()["status_reason"]
            );
            None
        }
    })
    .await
}

/// Waits until no other session of the database at `url` started a statement for `secs`
/// seconds, but each LISTEN follower's heartbeat (one `pg_notify` per `[database]
/// listen_heartbeat_ms`, how a dead listener is noticed, by design). It looks through a
/// connection of its own, closed when it returns.
pub async fn until_left_alone(url: &str, secs: f64) {
    use sqlx::Connection;
    let probe = tokio::sync::Mutex::new(sqlx::PgConnection::connect(url).await.unwrap());
    until(
        &format!("PostgreSQL to be left alone for {secs} s"),
        || async {
            let mut last: Vec<String> = sqlx::query_scalar(
                "SELECT left(query, 120) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()
                AND query_start > now() - make_interval(secs => $1)",
            )
            .bind(secs)
            .fetch_all(&mut *probe.lock().await)
            .await
            .unwrap();
            last.retain(|q| !q.starts_with("SELECT pg_notify($1, '')"));
            // Shown if the wait times out: what kept it busy.
            println!("statements in the last {secs} s: {last:?}");
            last.is_empty().then_some(())
        },
    )
    .await;
}
