//! An administrator finishes a delete that cannot finish (`magnum-capi cluster forget`): first
//! what forgetting the cluster leaves in its tenant project ([`plan`], nothing changes), then,
//! confirmed, its records and its objects on the management cluster ([`forget`], best effort,
//! finalizers dropped), recorded as an audit event in the log. Nothing in the tenant's cloud is
//! touched: what the plan lists stays for the tenant or an operator to remove.
//!
//! A cluster imported read-only from Magnum (issue 25) was never managed here: forgetting it
//! removes its records only. Its Heat stack or the Cluster API objects its Magnum driver made
//! (magnum-capi-helm's namespace and names are the ones this driver uses by default) are never
//! looked up or touched.

use uuid::Uuid;

use super::Result;
use crate::app::App;
use crate::db::clusters::{self as cdb, ClusterRow, Scope};
use crate::domain::error::DomainError;
use crate::domain::imported::ImportState;
use crate::domain::spec::Cluster;
use crate::domain::status::Status;
use crate::driver::Forgotten;

/// What forgetting a cluster would do and leave.
#[derive(Debug, Clone)]
pub struct Plan {
    pub cluster: ClusterRow,
    /// What stays in the tenant project (and where to find it).
    pub leftovers: Vec<String>,
    /// Why forgetting needs `--force`: the cluster is not being deleted.
    pub refusal: Option<String>,
    /// The cluster was imported read-only from Magnum: only its records go, nothing on a
    /// management cluster is touched (the driver that made it, for the plan's words).
    pub imported_from: Option<String>,
}

/// What forgetting `uuid` would leave behind, read from the management cluster and the
/// database; changes nothing.
pub async fn plan(app: &App, uuid: Uuid) -> Result<Plan> {
    let cluster = cdb::by_uuid(&app.pool, &Scope::All, uuid)
        .await?
        .ok_or_else(|| DomainError::NotFound(format!("Cluster {uuid} could not be found.")))?;
    let imported_from = crate::db::imports::of_cluster(&app.pool, uuid)
        .await?
        .filter(|i| i.state().is_none_or(|s| s == ImportState::ReadOnly))
        .map(|i| i.source_driver);
    let mut leftovers = match &imported_from {
        Some(driver) => vec![format!(
            "everything {driver} made for it in Magnum ({}), and its servers, networks, load \
             balancers and volumes: it was imported read-only, magnum-capi never managed it \
             and touches none of it",
            cluster
                .stack_id
                .as_deref()
                .map_or_else(|| "no stack_id".to_string(), |s| format!("stack_id {s}"))
        )],
        None => match app.backend.leftovers(&Cluster::from(cluster.clone())).await {
            Ok(l) => l,
            Err(e) => vec![format!(
                "whatever Cluster API made for it (the management cluster could not be read: {e})"
            )],
        },
    };
    if let Some(id) = cdb::app_cred(&app.pool, uuid).await? {
        leftovers.push(format!(
            "Keystone application credential {id} of user {}",
            cluster.user_id
        ));
    }
    let deleting = matches!(
        cluster.status.parse::<Status>(),
        Ok(Status::DeleteFailed | Status::DeleteInProgress)
    );
    let refusal = (!deleting).then(|| {
        format!(
            "cluster {uuid} is {}, not DELETE_FAILED or DELETE_IN_PROGRESS",
            cluster.status
        )
    });
    Ok(Plan {
        cluster,
        leftovers,
        refusal,
        imported_from,
    })
}

/// Forgets the planned cluster for `operator`: its open operations closed and its records
/// dropped (first, so no worker acts for it again), then its objects removed from the management
/// cluster (what could not be is reported, not fatal). Logged as an audit event naming what was
/// left in the tenant project.
pub async fn forget(app: &App, plan: &Plan, operator: &str) -> Result<Forgotten> {
    let c = &plan.cluster;
    let reason = format!("The cluster was forgotten by an administrator ({operator})");
    let mut tx = app.pool.begin().await?;
    cdb::lock(&mut *tx, c.uuid).await?;
    cdb::forget(&mut tx, c.uuid, &reason).await?;
    tx.commit().await?;
    let done = if plan.imported_from.is_some() {
        // Never ours: what its Magnum driver made stays where it is.
        Forgotten::default()
    } else {
        match app.backend.forget(&Cluster::from(c.clone())).await {
            Ok(done) => done,
            Err(e) => Forgotten {
                removed: Vec::new(),
                failed: vec![format!(
                    "the cluster's objects on its management cluster: {e}"
                )],
            },
        }
    };
    tracing::warn!(
        audit = "cluster.forget",
        cluster = %c.uuid,
        project = %c.project_id,
        status = %c.status,
        operator,
        left_in_project = %plan.leftovers.join("; "),
        objects_removed = done.removed.len(),
        objects_not_removed = %done.failed.join("; "),
        "cluster forgotten by an administrator: its records are gone; what it left in the \
         tenant project stays"
    );
    Ok(done)
}
