//! [`PgJournal`]: the backend's [`Journal`] port over PostgreSQL — the durable writes a backend
//! makes in the middle of a run or a request (credential intents and records, leftovers, the CA
//! rotation's phase), each one statement or one transaction.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::db::clusters as cdb;
use crate::db::{DbError, DbResult, day2, janitor};
use crate::driver::{Journal, JournalError, JournalFuture};

/// The [`Journal`] of the worker and the services.
#[derive(Debug, Clone)]
pub struct PgJournal {
    pool: PgPool,
}

impl PgJournal {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

/// `write`'s outcome as the journal reports it, naming `what` was being recorded.
fn journaled<'a>(
    what: &'static str,
    write: impl std::future::Future<Output = DbResult<()>> + Send + 'a,
) -> JournalFuture<'a> {
    Box::pin(async move {
        write.await.map_err(|e| JournalError {
            what,
            source: Box::new(e),
        })
    })
}

impl Journal for PgJournal {
    fn credential_intent<'a>(&'a self, cluster: Uuid, user_id: &'a str) -> JournalFuture<'a> {
        journaled(
            "the intent to create an application credential",
            janitor::record_intent(&self.pool, cluster, user_id),
        )
    }

    fn credential_created<'a>(
        &'a self,
        cluster: Uuid,
        id: &'a str,
        expires_at: Option<DateTime<Utc>>,
    ) -> JournalFuture<'a> {
        journaled("the cluster's application credential", async move {
            let mut tx = self.pool.begin().await.map_err(DbError::from)?;
            cdb::set_app_cred(&mut *tx, cluster, Some(id)).await?;
            day2::set_expiry(&mut *tx, cluster, expires_at).await?;
            tx.commit().await.map_err(DbError::from)?;
            Ok(())
        })
    }

    fn credential_rotated<'a>(
        &'a self,
        cluster: Uuid,
        user_id: &'a str,
        id: &'a str,
        expires_at: Option<DateTime<Utc>>,
    ) -> JournalFuture<'a> {
        journaled(
            "the rotated application credential",
            day2::set_credential(&self.pool, cluster, user_id, id, expires_at),
        )
    }

    fn credential_problem<'a>(
        &'a self,
        cluster: Uuid,
        problem: Option<&'a str>,
    ) -> JournalFuture<'a> {
        journaled(
            "the credential's problem",
            day2::set_problem(&self.pool, cluster, problem),
        )
    }

    fn leftover_credential<'a>(
        &'a self,
        cluster: Uuid,
        user_id: &'a str,
        id: &'a str,
        error: &'a str,
    ) -> JournalFuture<'a> {
        journaled(
            "a leftover application credential",
            cdb::add_leftover_cred(&self.pool, id, user_id, cluster, error),
        )
    }

    fn ca_rotation<'a>(
        &'a self,
        cluster: Uuid,
        phase: Option<i16>,
        rollout_after: Option<DateTime<Utc>>,
    ) -> JournalFuture<'a> {
        journaled(
            "the CA rotation's phase",
            day2::set_ca_rotation(&self.pool, cluster, phase, rollout_after),
        )
    }
}
