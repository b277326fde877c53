//! PostgreSQL `LISTEN` followers: one dedicated connection per follower, reconnected with
//! backoff, telling its owner when it listens, when a notification arrives and when
//! notifications may have been missed.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

/// The channel of cluster, nodegroup and template changes (migration
/// `20261125090000_view_change_events.sql`; payload: the table).
pub const VIEWS_CHANNEL: &str = "magnum_capi_views";

/// What a follower reports to its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Listening (again): anything sent while nobody listened was missed.
    Listening,
    /// A notification on one of the channels.
    Notified,
    /// The connection broke: notifications are being missed until the next `Listening`.
    Lost,
}

/// Follows `channels` until `shutdown` flips to true; `what` names the follower in the log.
pub async fn follow(
    pool: &PgPool,
    channels: &[&str],
    what: &str,
    mut shutdown: watch::Receiver<bool>,
    mut on: impl FnMut(Event),
) {
    let mut backoff = Duration::from_millis(500);
    loop {
        if *shutdown.borrow() {
            return;
        }
        let connected = async {
            let mut l = sqlx::postgres::PgListener::connect_with(pool).await?;
            l.listen_all(channels.iter().copied()).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        match connected {
            Ok(mut l) => {
                backoff = Duration::from_millis(500);
                on(Event::Listening);
                loop {
                    // `try_recv`, not `recv`: `recv` reconnects by itself and hides that
                    // notifications were missed meanwhile.
                    tokio::select! {
                        n = l.try_recv() => {
                            let error = match n {
                                Ok(Some(_)) => {
                                    on(Event::Notified);
                                    continue;
                                }
                                Ok(None) => "connection closed".to_string(),
                                Err(e) => e.to_string(),
                            };
                            on(Event::Lost);
                            tracing::warn!(%error, "{what}: notifications lost; reconnecting");
                            break;
                        }
                        _ = shutdown.changed() => return,
                    }
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
