//! Application-credential rotation use cases: `PATCH /v1/credentials/{cluster}` and the
//! implicit rotation of a credential that no longer works, done before the next operation a
//! project member asks for (so that e.g. a delete never strands on a departed owner).

use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    Result, authorize_cluster as authorize, cluster_scope, commit_with_operation, find_cluster,
};
use crate::app::App;
use crate::db::clusters::ClusterRow;
use crate::db::day2;
use crate::db::operations::{self as odb, NewOperation};
use crate::db::spec::Loaded;
use crate::db::status::{self as status, Transition};
use crate::domain::error::DomainError;
use crate::domain::operation::OperationKind;
use crate::domain::policy::{self, Caller};
use crate::domain::spec::Cluster;
use crate::domain::status::Status;
use crate::driver::Credentials;
use crate::openstack::UserSession;
use crate::service::journal::PgJournal;

const KIND: OperationKind = OperationKind::RotateCredential;

/// `PATCH /v1/credentials/{cluster}`: a new credential is created as the caller, and the worker
/// makes it the cluster's (the caller becomes the owner) before deleting the old one.
pub async fn rotate(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    ident: &str,
    request_id: &str,
) -> Result<Uuid> {
    // Magnum checks the rule against the caller's own project before looking the cluster up.
    policy::enforce("credential:rotate", caller, None)?;
    let c = find_cluster(app, &cluster_scope(caller, true), ident).await?;
    if c.project_id != caller.project_id {
        // An admin of another project sees the cluster, but a credential created with their
        // token would belong to their project: CAPO could not act on the cluster's resources.
        return Err(DomainError::Forbidden(format!(
            "Only a member of project {} can rotate the credential of cluster {}.",
            c.project_id, c.uuid
        ))
        .into());
    }
    authorize(caller, "credential:rotate", &c)?;
    super::refuse_if_read_only(app, &c, "rotate_credential").await?;
    if c.status == Status::DeleteInProgress.as_str() {
        return Err(DomainError::BadRequest(format!(
            "Rotating the credential of a cluster when status is \"{}\" is not supported.",
            c.status
        ))
        .into());
    }
    if app.backend.credentials() == Credentials::None {
        // Nothing to stage: the backend completes the recorded operation.
        super::certificates::record_op(app, &c, KIND, json!({}), request_id).await?;
        return Ok(c.uuid);
    }
    let Some(session) = cloud else {
        return Err(DomainError::BadRequest(
            "Rotating the credential needs Keystone: this service runs without it (--dev), so the cluster has no application credential.".into(),
        )
        .into());
    };
    // One staged credential per cluster at a time.
    if odb::has_open(&app.pool, c.uuid, KIND).await? {
        return Err(DomainError::Conflict(format!(
            "The credential of cluster {} is already being rotated.",
            c.uuid
        ))
        .into());
    }
    let payload = match stage(app, &c, session, caller, false).await {
        Ok(p) => p,
        Err(e) => {
            // Nothing changed on the management cluster: the old credential is in force.
            let reason = format!(
                "Rotating the application credential failed: {e}. The previous credential stays in force."
            );
            tracing::warn!(cluster = %c.uuid, error = %e, "credential rotation refused");
            crate::telemetry::app_credential("rotation_failed", 1);
            let op = NewOperation {
                cluster_uuid: c.uuid,
                nodegroup_uuid: None,
                kind: KIND,
                payload: json!({}),
                request_id: Some(request_id),
            };
            crate::db::retry(|| async {
                let mut tx = app.pool.begin().await?;
                status::write(
                    &mut tx,
                    c.uuid,
                    Transition::Failed {
                        status: Status::UpdateFailed,
                        reason: &reason,
                        nodegroup: None,
                    },
                )
                .await?;
                odb::record_failed(&mut *tx, &op, &reason).await?;
                tx.commit().await?;
                Ok::<_, crate::service::Error>(())
            })
            .await?;
            return Err(e);
        }
    };
    record_staged(app, &c, payload, Some(Status::UpdateInProgress), request_id).await?;
    Ok(c.uuid)
}

/// A new credential for `c` created as `caller` with `session` and staged by the backend (the
/// cluster's spec as Postgres has it now); returns the rotation operation's payload.
async fn stage(
    app: &App,
    c: &ClusterRow,
    session: &UserSession,
    caller: &Caller,
    implicit: bool,
) -> Result<Value> {
    let spec = match crate::db::spec::load(&app.pool, c.uuid).await? {
        Loaded::Spec(spec) => spec,
        Loaded::ClusterGone => {
            return Err(
                DomainError::NotFound(format!("Cluster {} could not be found.", c.uuid)).into(),
            );
        }
        Loaded::TemplateGone => {
            return Err(crate::service::Error::Invariant(
                "the cluster's template no longer exists",
            ));
        }
    };
    let journal = PgJournal::new(app.pool.clone());
    Ok(app
        .backend
        .stage_credential(
            &journal,
            &spec,
            session,
            &caller.user_id,
            &caller.roles,
            implicit,
        )
        .await?)
}

/// Records the rotation of a staged credential (with `status`, e.g. `UPDATE_IN_PROGRESS` for a
/// requested one); when that fails the staged credential is discarded.
async fn record_staged(
    app: &App,
    c: &ClusterRow,
    payload: Value,
    begin: Option<Status>,
    request_id: &str,
) -> Result<()> {
    let op = NewOperation {
        cluster_uuid: c.uuid,
        nodegroup_uuid: None,
        kind: KIND,
        payload,
        request_id: Some(request_id),
    };
    let recorded = crate::db::retry(|| async {
        let mut tx = app.pool.begin().await?;
        if let Some(st) = begin {
            status::write(&mut tx, c.uuid, Transition::Begin(st)).await?;
        }
        commit_with_operation(app, tx, &op).await
    })
    .await;
    if let Err(e) = recorded {
        let journal = PgJournal::new(app.pool.clone());
        let cluster = Cluster::from(c.clone());
        if let Err(d) = app
            .backend
            .discard_staged(&journal, &cluster, &op.payload)
            .await
        {
            tracing::warn!(cluster = %c.uuid, error = %d, "could not discard the staged credential; the janitor will");
        }
        return Err(e);
    }
    Ok(())
}

/// Before an operation a project member asked for: when the periodic check found the cluster's
/// credential unusable, a new one is created as this caller and committed first (the queue runs
/// a cluster's operations in order). Best effort: a failure is logged and the operation goes on.
pub async fn rotate_if_unusable(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    c: &ClusterRow,
    request_id: &str,
) {
    let Some(session) = cloud else {
        return;
    };
    if app.backend.credentials() == Credentials::None || c.project_id != caller.project_id {
        return; // nothing to rotate, or a credential created with this token would belong to another project
    }
    let unusable = match day2::credential(&app.pool, c.uuid).await {
        Ok(Some(r)) => r.app_cred_id.is_some() && r.credential_problem.is_some(),
        _ => false,
    };
    if !unusable || odb::has_open(&app.pool, c.uuid, KIND).await.unwrap_or(true) {
        return;
    }
    let payload = match stage(app, c, session, caller, true).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(cluster = %c.uuid, error = %e, "could not rotate the unusable credential before the operation");
            return;
        }
    };
    match record_staged(app, c, payload, None, request_id).await {
        Ok(()) => {
            tracing::info!(cluster = %c.uuid, user = %caller.user_id, "unusable credential rotated to the acting project member")
        }
        Err(e) => {
            tracing::warn!(cluster = %c.uuid, error = %e, "could not record the implicit rotation")
        }
    }
}
