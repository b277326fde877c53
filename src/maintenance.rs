//! The periodic chores of a management cluster (every few minutes, see `server::spawn_capi`):
//! leftover credentials deleted again, credentials checked, expiring ones renewed, abandoned
//! staged ones discarded, orphaned ones (of clusters that do not exist) deleted; delete reports
//! past their retention removed. What they read and record is Postgres; what they do on the
//! management cluster and in Keystone goes through the driver (`capi::driver::Capi`) and its
//! Keystone client.

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use crate::capi::cleanup::credential_cluster;
use crate::capi::credentials::{RotationPayload, STAGED_GRACE, Staged};
use crate::capi::driver::{Capi, CapiError};
use crate::db::clusters as cdb;
use crate::db::operations::{self as odb, NewOperation};
use crate::db::spec::Loaded;
use crate::db::{DbError, day2, janitor};
use crate::domain::operation::{OperationKind, backoff_ms};
use crate::driver::Journal;
use crate::openstack::OpenStackError;

/// Seconds a credential creation may take before its intent counts as abandoned.
const INTENT_GRACE_SECS: u64 = 600;
/// Recorded creations the janitor looks at per sweep.
const JANITOR_BATCH: i64 = 50;
/// Advisory-lock key of the janitor (one replica sweeps at a time).
const JANITOR_LOCK: i64 = 0x6d61_676e_756d_0002;

/// How a chore failed: what it read or recorded, the management cluster, or Keystone.
#[derive(Debug, thiserror::Error)]
pub enum ChoreError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Capi(#[from] CapiError),
    #[error(transparent)]
    OpenStack(#[from] OpenStackError),
    #[error("encoding the rotation: {0}")]
    Encode(#[from] serde_json::Error),
}

/// One round of the chores of `capi`'s management cluster; failures are logged.
pub async fn run(pool: &PgPool, capi: &Capi, journal: &dyn Journal) {
    if capi.shared_duties() {
        if let Err(e) = sweep_leftover_credentials(pool, capi).await {
            tracing::warn!(error = %e, "sweeping leftover application credentials failed");
        }
        if let Err(e) = check_credentials(pool, capi).await {
            tracing::warn!(error = %e, "checking cluster credentials failed");
        }
        if let Err(e) = sweep_orphan_credentials(pool, capi).await {
            tracing::warn!(error = %e, "sweeping orphaned application credentials failed");
        }
    }
    // The rest needs this management cluster.
    if capi.reach().down().is_some() {
        return;
    }
    if let Err(e) = renew_expiring(pool, capi, journal).await {
        tracing::warn!(error = %e, "renewing expiring credentials failed");
    }
    if let Err(e) = sweep_staged(pool, capi, journal, STAGED_GRACE).await {
        tracing::warn!(error = %e, "discarding abandoned staged credentials failed");
    }
    if let Err(e) = capi.expire_delete_reports(chrono::Utc::now()).await {
        tracing::warn!(error = %e, "removing expired delete reports failed");
    }
}

/// Retries deleting credentials that could not be deleted when their cluster went away.
pub async fn sweep_leftover_credentials(pool: &PgPool, capi: &Capi) -> Result<usize, ChoreError> {
    let Some(k) = capi.keystone() else {
        return Ok(0);
    };
    let mut done = 0;
    for (id, user, attempts) in cdb::due_leftover_creds(pool).await? {
        match k.delete_app_credential(&user, &id).await {
            Ok(()) => {
                cdb::leftover_cred_result(pool, &id, true, None, 0.0).await?;
                tracing::info!(app_cred = %id, "leftover application credential deleted");
                done += 1;
            }
            Err(e) => {
                let delay = backoff_ms(5000, attempts + 1) as f64 / 1000.0;
                tracing::warn!(app_cred = %id, error = %e, attempts, "leftover application credential still not deleted");
                cdb::leftover_cred_result(pool, &id, false, Some(&e.to_string()), delay).await?;
            }
        }
    }
    Ok(done)
}

/// Checks the credentials due for it: each must still authenticate; when one does not, the
/// cluster's health says why (owner deleted/disabled/without a role, credential deleted or
/// expired). Returns how many were checked.
pub async fn check_credentials(pool: &PgPool, capi: &Capi) -> Result<usize, ChoreError> {
    let interval = capi.config().credential_check_interval_secs;
    let Some(k) = capi.keystone() else {
        return Ok(0);
    };
    if interval == 0 {
        return Ok(0);
    }
    let due = day2::due_checks(pool, interval, 200).await?;
    let mut checked = 0;
    for row in &due {
        let Some(id) = &row.app_cred_id else {
            continue;
        };
        // An adopted cluster's credential is in its Magnum driver's Secret.
        let at = match crate::db::imports::of_cluster(pool, row.uuid).await? {
            Some(i) if i.state() == Some(crate::domain::imported::ImportState::Adopted) => {
                crate::domain::imported::objects_at(
                    &i.source_driver,
                    row.stack_id.as_deref(),
                    &row.project_id,
                )
            }
            _ => None,
        };
        let found = capi
            .credential_problem(
                k,
                row.uuid,
                (&row.user_id, &row.project_id),
                (row.stack_id.as_deref(), at.as_ref()),
                id,
            )
            .await;
        match found {
            Ok(problem) => {
                if problem != row.credential_problem {
                    match &problem {
                        Some(p) => {
                            tracing::warn!(cluster = %row.uuid, problem = %p, "cluster credential does not work")
                        }
                        None => {
                            tracing::info!(cluster = %row.uuid, "cluster credential works again")
                        }
                    }
                }
                day2::set_problem(pool, row.uuid, problem.as_deref()).await?;
                if problem != row.credential_problem {
                    capi.observer().touch(row.uuid);
                }
                checked += 1;
            }
            Err(e) => {
                tracing::warn!(cluster = %row.uuid, error = %e, "cannot check the cluster credential now");
            }
        }
    }
    Ok(checked)
}

/// Credentials close to their expiry renew themselves: the old one (created unrestricted for
/// this) obtains a token, creates its successor, and a rotation is recorded. Each management
/// cluster renews the credentials of its own clusters.
pub async fn renew_expiring(
    pool: &PgPool,
    capi: &Capi,
    journal: &dyn Journal,
) -> Result<usize, ChoreError> {
    let cfg = capi.config();
    let Some(k) = capi.keystone() else {
        return Ok(0);
    };
    if cfg.app_cred_expiry_days == 0 {
        return Ok(0);
    }
    // Never more than half the lifetime ahead, or a renewed credential would be due again.
    let before = u64::from(
        cfg.app_cred_renew_before_days
            .min(cfg.app_cred_expiry_days / 2),
    ) * 86400;
    let before = before.max(3600);
    let mut renewed = 0;
    for uuid in day2::expiring(pool, before, 50).await? {
        if odb::has_open(pool, uuid, OperationKind::RotateCredential).await? {
            continue;
        }
        let Loaded::Spec(spec) = crate::db::spec::load(pool, uuid).await? else {
            continue;
        };
        let c = &spec.cluster;
        if !capi.owns(c) {
            continue;
        }
        let Some((id, secret)) = capi.credential_of(c).await? else {
            continue;
        };
        let outcome = async {
            let (token, identity) = k.token_for_app_credential(&id, &secret).await?;
            let session = k.user_session(&token, identity.clone());
            let staged = capi
                .stage_rotation(journal, &spec, &session, &c.user_id, &identity.roles, true)
                .await?;
            record_rotation(pool, capi, journal, c, &staged).await
        }
        .await;
        match outcome {
            Ok(()) => {
                tracing::info!(cluster = %c.uuid, app_cred = %id, "expiring application credential renews itself");
                renewed += 1;
            }
            Err(e) => {
                tracing::warn!(cluster = %c.uuid, app_cred = %id, error = %e, "cannot renew an expiring application credential");
            }
        }
    }
    Ok(renewed)
}

/// Records the implicit rotation of a staged credential; when that fails the staged credential
/// is discarded.
async fn record_rotation(
    pool: &PgPool,
    capi: &Capi,
    journal: &dyn Journal,
    c: &crate::domain::spec::Cluster,
    staged: &Staged,
) -> Result<(), ChoreError> {
    let recorded = async {
        let payload = serde_json::to_value(&staged.payload)?;
        let mut tx = pool.begin().await.map_err(DbError::from)?;
        // Lock order (`db`): the cluster's row before its operations.
        cdb::lock(&mut *tx, c.uuid).await?;
        odb::enqueue(
            &mut *tx,
            &NewOperation {
                cluster_uuid: c.uuid,
                nodegroup_uuid: None,
                kind: OperationKind::RotateCredential,
                payload,
                request_id: None,
            },
        )
        .await?;
        tx.commit().await.map_err(DbError::from)?;
        Ok::<_, ChoreError>(())
    }
    .await;
    if let Err(e) = recorded {
        discard(capi, journal, c, &staged.payload).await;
        return Err(e);
    }
    Ok(())
}

/// Discards a staged credential that will not be committed (best effort: the janitor retries).
async fn discard(
    capi: &Capi,
    journal: &dyn Journal,
    c: &crate::domain::spec::Cluster,
    p: &RotationPayload,
) {
    if let Err(d) = capi.discard_staged(journal, c, p).await {
        tracing::warn!(cluster = %c.uuid, error = %d, "could not discard the staged credential; the janitor will");
    }
}

/// Staged credentials whose rotation is no longer open (the request died before recording
/// it, or the operation was given up) are discarded after a grace period.
pub async fn sweep_staged(
    pool: &PgPool,
    capi: &Capi,
    journal: &dyn Journal,
    grace: Duration,
) -> Result<usize, ChoreError> {
    let mut swept = 0;
    for s in capi.staged_credentials(grace).await? {
        if odb::has_open(pool, s.cluster, OperationKind::RotateCredential).await? {
            continue;
        }
        if cdb::app_cred(pool, s.cluster).await?.as_deref() != Some(s.app_cred_id.as_str()) {
            capi.delete_credential(journal, s.cluster, &s.user_id, &s.app_cred_id)
                .await?;
        }
        capi.delete_staging_secret(&s).await?;
        tracing::info!(cluster = %s.cluster, app_cred = %s.app_cred_id, "discarded a staged credential nobody committed");
        swept += 1;
    }
    Ok(swept)
}

/// The credentials janitor: for each credential creation recorded past its grace time whose
/// cluster does not exist, deletes that user's credentials named `magnum-<cluster>-…`.
/// Only recorded creations count — never a name alone: another deployment sharing the
/// Keystone (another region's database) has clusters this database does not know. One
/// replica at a time, a bounded batch per sweep; returns how many it deleted.
pub async fn sweep_orphan_credentials(pool: &PgPool, capi: &Capi) -> Result<usize, ChoreError> {
    let Some(k) = capi.keystone() else {
        return Ok(0);
    };
    let mut tx = pool.begin().await.map_err(DbError::from)?;
    if !janitor::try_lock(&mut tx, JANITOR_LOCK).await? {
        return Ok(0);
    }
    let mut deleted = 0;
    for (cluster, user) in janitor::due_intents(pool, INTENT_GRACE_SECS, JANITOR_BATCH).await? {
        if !janitor::cluster_exists(pool, cluster).await? {
            deleted += delete_orphans(k, cluster, &user).await?;
        }
        janitor::drop_intent(pool, cluster, &user).await?;
    }
    tx.commit().await.map_err(DbError::from)?;
    capi.note_orphans_deleted(deleted);
    crate::telemetry::app_credential("orphan_deleted", deleted as u64);
    Ok(deleted)
}

/// Deletes `user`'s credentials named after `cluster`; how many.
async fn delete_orphans(
    k: &crate::openstack::Keystone,
    cluster: Uuid,
    user: &str,
) -> Result<usize, OpenStackError> {
    let mut deleted = 0;
    for (id, name) in k.app_credentials_of(user).await? {
        if credential_cluster(&name) == Some(cluster) {
            k.delete_app_credential(user, &id).await?;
            tracing::info!(app_cred = %id, cluster = %cluster, user = %user, "orphaned application credential deleted");
            deleted += 1;
        }
    }
    Ok(deleted)
}
