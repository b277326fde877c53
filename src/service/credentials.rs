//! Application-credential rotation use cases: `PATCH /v1/credentials/{cluster}` and the
//! implicit rotation of a credential that no longer works, done before the next operation a
//! project member asks for (so that e.g. a delete never strands on a departed owner).

use serde_json::json;
use uuid::Uuid;

use super::clusters::{authorize, kind};
use super::{cluster_scope, find_cluster};
use crate::api::error::ApiResult;
use crate::api::microversion::Mv;
use crate::app::App;
use crate::db::clusters::{self as cdb, ClusterRow};
use crate::db::day2;
use crate::db::operations::{self as odb, NewOperation};
use crate::domain::error::DomainError;
use crate::domain::policy::{self, Caller};
use crate::domain::status::Status;
use crate::openstack::UserSession;

/// `PATCH /v1/credentials/{cluster}`: a new credential is created as the caller, and the worker
/// makes it the cluster's (the caller becomes the owner) before deleting the old one.
pub async fn rotate(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    mv: Mv,
    ident: &str,
    request_id: &str,
) -> ApiResult<Uuid> {
    mv.require(12, "rotate")?;
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
    if c.status == Status::DeleteInProgress.as_str() {
        return Err(DomainError::BadRequest(format!(
            "Rotating the credential of a cluster when status is \"{}\" is not supported.",
            c.status
        ))
        .into());
    }
    let (Some(capi), Some(session)) = (&app.capi, cloud) else {
        if app.capi.is_some() {
            return Err(DomainError::BadRequest(
                "Rotating the credential needs Keystone: this service runs without it (--dev), so the cluster has no application credential.".into(),
            )
            .into());
        }
        // Another driver (the simulated one): it records and completes the operation.
        super::certificates::record_op(
            app,
            &c,
            kind::ROTATE_CREDENTIAL,
            Some(Status::UpdateInProgress),
            request_id,
        )
        .await?;
        return Ok(c.uuid);
    };
    // One staged credential per cluster at a time.
    if odb::has_open(&app.pool, c.uuid, kind::ROTATE_CREDENTIAL).await? {
        return Err(DomainError::Conflict(format!(
            "The credential of cluster {} is already being rotated.",
            c.uuid
        ))
        .into());
    }
    let staged = match capi
        .stage_rotation(
            &app.pool,
            &c,
            session,
            &caller.user_id,
            &caller.roles,
            false,
        )
        .await
    {
        Ok(s) => s,
        Err(e) => {
            // Nothing changed on the management cluster: the old credential is in force.
            let reason = format!(
                "Rotating the application credential failed: {e}. The previous credential stays in force."
            );
            tracing::warn!(cluster = %c.uuid, error = %e, "credential rotation refused");
            let mut tx = app.pool.begin().await?;
            cdb::set_status(
                &mut *tx,
                c.uuid,
                Status::UpdateFailed.as_str(),
                Some(&reason),
            )
            .await?;
            let op = NewOperation {
                cluster_uuid: c.uuid,
                nodegroup_uuid: None,
                kind: kind::ROTATE_CREDENTIAL,
                payload: json!({}),
                request_id: Some(request_id),
            };
            odb::record_failed(&mut *tx, &op, &reason).await?;
            tx.commit().await?;
            return Err(e.into());
        }
    };
    capi.record_rotation(
        &app.pool,
        &c,
        &staged,
        Some(Status::UpdateInProgress),
        Some(request_id),
    )
    .await?;
    app.work_ready.notify_one();
    Ok(c.uuid)
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
    let (Some(capi), Some(session)) = (&app.capi, cloud) else {
        return;
    };
    if c.project_id != caller.project_id {
        return; // a credential created with this token would belong to another project
    }
    let unusable = match day2::credential(&app.pool, c.uuid).await {
        Ok(Some(r)) => r.app_cred_id.is_some() && r.credential_problem.is_some(),
        _ => false,
    };
    if !unusable
        || odb::has_open(&app.pool, c.uuid, kind::ROTATE_CREDENTIAL)
            .await
            .unwrap_or(true)
    {
        return;
    }
    let staged = match capi
        .stage_rotation(&app.pool, c, session, &caller.user_id, &caller.roles, true)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(cluster = %c.uuid, error = %e, "could not rotate the unusable credential before the operation");
            return;
        }
    };
    match capi
        .record_rotation(&app.pool, c, &staged, None, Some(request_id))
        .await
    {
        Ok(()) => {
            app.work_ready.notify_one();
            tracing::info!(cluster = %c.uuid, user = %caller.user_id, "unusable credential rotated to the acting project member")
        }
        Err(e) => {
            tracing::warn!(cluster = %c.uuid, error = %e, "could not record the implicit rotation")
        }
    }
}
