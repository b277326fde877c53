//! PostgreSQL `LISTEN` followers: one dedicated connection per follower, reconnected with
//! backoff, telling its owner when it listens, when a notification arrives and when
//! notifications may have been missed.
//!
//! A connection can also die without a word (a PostgreSQL failover without a reset, a firewall
//! dropping packets): nothing arrives and nothing fails. Every follower therefore sends itself
//! a heartbeat notification through the pool each `heartbeat` and counts the connection lost
//! when nothing (heartbeat or other) has arrived for two heartbeats, so missed notifications
//! are noticed within three. TCP keepalive would be the other half of this, but sqlx exposes
//! no socket options for its connections; the heartbeat bounds the silence without them.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

/// The channel of cluster, nodegroup and template changes (migration
/// `20261125090000_view_change_events.sql`; payload: the table), and of the change position
/// each changing transaction moves (migration `20261129100000_change_positions.sql`; payload:
/// `position <n>`, after the transaction's other announcements).
pub const VIEWS_CHANNEL: &str = "magnum_capi_views";

/// The channel of the followers' heartbeats (any replica's heartbeat proves a connection
/// delivers; none is reported to the owner).
pub const HEARTBEAT_CHANNEL: &str = "magnum_capi_heartbeat";

/// What a follower reports to its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// Listening (again): anything sent while nobody listened was missed. With the change
    /// position read once listening (see [`position`]): every change up to it had committed
    /// before, every later one will be announced.
    Listening { position: i64 },
    /// A notification on one of the channels, with its payload.
    Notified(&'a str),
    /// The connection broke: notifications are being missed until the next `Listening`.
    Lost,
}

/// Follows `channels` until `shutdown` flips to true; `what` names the follower in the log.
/// A connection on which nothing arrived for two `heartbeat`s is counted lost.
pub async fn follow(
    pool: &PgPool,
    channels: &[&str],
    what: &str,
    heartbeat: Duration,
    mut shutdown: watch::Receiver<bool>,
    mut on: impl FnMut(Event<'_>),
) {
    let mut backoff = Duration::from_millis(500);
    loop {
        if *shutdown.borrow() {
            return;
        }
        let connected = async {
            let mut l = sqlx::postgres::PgListener::connect_with(pool).await?;
            l.listen_all(channels.iter().copied().chain([HEARTBEAT_CHANNEL]))
                .await?;
            // Through the pool: the listening backend's last statement stays its LISTEN (what
            // an operator finds it by in `pg_stat_activity`).
            let at = position(pool).await?;
            Ok::<_, sqlx::Error>((l, at))
        }
        .await;
        match connected {
            Ok((mut l, at)) => {
                backoff = Duration::from_millis(500);
                on(Event::Listening { position: at });
                let mut beat = tokio::time::interval(heartbeat);
                beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut heard = tokio::time::Instant::now();
                loop {
                    // `try_recv`, not `recv`: `recv` reconnects by itself and hides that
                    // notifications were missed meanwhile.
                    let error = tokio::select! {
                        n = l.try_recv() => match n {
                            Ok(Some(n)) => {
                                heard = tokio::time::Instant::now();
                                if n.channel() != HEARTBEAT_CHANNEL {
                                    on(Event::Notified(n.payload()));
                                }
                                continue;
                            }
                            Ok(None) => "connection closed".to_string(),
                            Err(e) => e.to_string(),
                        },
                        _ = beat.tick() => {
                            if heard.elapsed() <= heartbeat * 2 {
                                send_heartbeat(pool, heartbeat);
                                continue;
                            }
                            format!("nothing arrived for {:?} (heartbeats included)", heard.elapsed())
                        }
                        _ = shutdown.changed() => return,
                    };
                    on(Event::Lost);
                    tracing::warn!(%error, "{what}: notifications lost; reconnecting");
                    break;
                }
            }
            Err(e) => tracing::warn!(error = %e, "{what}: cannot listen; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// The change position committed now (migration `20261129100000_change_positions.sql`): every
/// transaction that changed a cluster, a nodegroup or a template and committed before this read
/// started has a position up to it, announced on [`VIEWS_CHANNEL`] as `position <n>` in the
/// order of the positions.
pub async fn position<'e>(ex: impl sqlx::PgExecutor<'e>) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT position FROM change_position")
        .fetch_one(ex)
        .await
}

/// The change position a [`VIEWS_CHANNEL`] payload announces, if it is one.
pub fn announced_position(payload: &str) -> Option<i64> {
    payload.strip_prefix("position ")?.parse().ok()
}

/// Sends one heartbeat through another connection of the pool, without holding up the
/// follower (a pool that cannot reach PostgreSQL either shows as a missing heartbeat).
fn send_heartbeat(pool: &PgPool, within: Duration) {
    let pool = pool.clone();
    tokio::spawn(async move {
        let sent = tokio::time::timeout(
            within,
            sqlx::query("SELECT pg_notify($1, '')")
                .bind(HEARTBEAT_CHANNEL)
                .execute(&pool),
        )
        .await;
        if let Ok(Err(e)) = sent {
            tracing::debug!(error = %e, "heartbeat not sent");
        }
    });
}
