//! Certificate and credential use cases: CA show, CSR signing, CA rotation, credential rotation.
//!
//! The CAs live in the cluster's Secrets on the management cluster (the CAPI driver writes them
//! at create); with another driver a cluster has none and show/sign say so.

use serde_json::{Value, json};
use uuid::Uuid;

use super::views::{self, links};
use super::{
    Error, Result, begin_operation, cluster_scope, cluster_target, find_cluster, lock_cluster,
};
use crate::app::App;
use crate::db::clusters::ClusterRow;
use crate::db::operations::NewOperation;
use crate::db::templates as tdb;
use crate::domain::certificates::CaKind;
use crate::domain::error::DomainError;
use crate::domain::operation::OperationKind;
use crate::domain::policy::{self, Caller};
use crate::domain::schemas;
use crate::domain::spec::Cluster;
use crate::domain::status::Status;

/// The CA `ca_cert_type` names (absent: kubernetes); anything else is a 400.
pub fn ca_kind(t: Option<&str>) -> Result<CaKind> {
    CaKind::parse(t).ok_or_else(|| {
        DomainError::invalid_field(
            "ca_cert_type",
            t.unwrap_or_default(),
            "Value should be one of: kubernetes, etcd, front_proxy, front-proxy",
        )
        .into()
    })
}

fn no_ca(c: &ClusterRow, spec: &Cluster) -> DomainError {
    DomainError::BadRequest(match &spec.objects_at {
        Some(at) => format!(
            "Cluster {} was imported from Magnum and its CA Secret {}/{}-ca is not on the \
             management cluster: this service's management cluster must be the one its Magnum \
             driver used.",
            c.uuid, at.namespace, at.name
        ),
        None => format!(
            "Cluster {} has no CA certificate yet: it is issued when the cluster is created.",
            c.uuid
        ),
    })
}

/// `GET /v1/certificates/{cluster}?ca_cert_type=`: the CA certificate from the backend.
pub async fn show(
    app: &App,
    caller: &Caller,
    base: &str,
    ident: &str,
    kind: CaKind,
) -> Result<views::Certificate> {
    let c = find_cluster(app, &cluster_scope(caller, false), ident).await?;
    policy::enforce("certificate:get", caller, Some(cluster_target(&c)))?;
    let spec = super::driver_cluster(app, &c).await?;
    let pem = app
        .backend
        .ca_certificate(&spec, kind)
        .await?
        .ok_or_else(|| no_ca(&c, &spec))?;
    Ok(views::Certificate {
        cluster_uuid: c.uuid,
        pem,
        links: links(base, &format!("certificates/{}", c.uuid)),
    })
}

pub async fn sign(
    app: &App,
    caller: &Caller,
    base: &str,
    body: &Value,
) -> Result<views::SignedCertificate> {
    let b = schemas::CERTIFICATE.parse_body(body)?;
    let kind = ca_kind(b.str("ca_cert_type").as_deref())?;
    let ident = b.str("cluster_uuid").unwrap_or_default();
    let c = match find_cluster(app, &cluster_scope(caller, false), &ident).await {
        Ok(c) => c,
        Err(Error::Domain(DomainError::NotFound(m))) => {
            return Err(DomainError::BadRequest(m).into());
        }
        Err(e) => return Err(e),
    };
    policy::enforce("certificate:create", caller, Some(cluster_target(&c)))?;
    let spec = super::driver_cluster(app, &c).await?;
    // Signing changes nothing of the cluster: a cluster imported from a Magnum Cluster API
    // driver signs with the CA its driver left (`coe cluster config` keeps working); only
    // clusters without one (Heat's) are refused with the read-only reason.
    if spec.objects_at.is_none() {
        super::refuse_if_read_only(app, &c, "sign").await?;
    }
    let csr = b.str("csr").unwrap_or_default();
    let validity = std::time::Duration::from_secs(
        u64::from(app.config.capi.client_cert_validity_days.max(1)) * 86400,
    );
    let pem = app
        .backend
        .sign_certificate(&spec, kind, &csr, validity)
        .await?
        .ok_or_else(|| no_ca(&c, &spec))?;
    Ok(views::SignedCertificate {
        cluster_uuid: c.uuid,
        csr,
        pem,
        links: links(base, &format!("certificates/{}", c.uuid)),
        ca_cert_type: b.str("ca_cert_type"),
    })
}

/// Records an operation of the whole cluster, which turns `UPDATE_IN_PROGRESS`.
pub(super) async fn record_op(
    app: &App,
    c: &ClusterRow,
    op_kind: OperationKind,
    payload: Value,
    request_id: &str,
) -> Result<()> {
    let op = NewOperation {
        cluster_uuid: c.uuid,
        nodegroup_uuid: None,
        kind: op_kind,
        payload,
        request_id: Some(request_id),
    };
    let (op, ident) = (&op, &c.uuid.to_string());
    crate::db::retry(|| async move {
        let (tx, _) = lock_cluster(app, op.cluster_uuid, ident).await?;
        begin_operation(app, tx, Status::UpdateInProgress, op).await
    })
    .await
}

pub async fn rotate_ca(app: &App, caller: &Caller, ident: &str, request_id: &str) -> Result<Uuid> {
    let c = find_cluster(app, &cluster_scope(caller, false), ident).await?;
    policy::enforce("certificate:rotate_ca", caller, Some(cluster_target(&c)))?;
    super::refuse_if_read_only(app, &c, "rotate_ca").await?;
    let ct = tdb::by_uuid(&app.pool, &tdb::Visibility::All, c.cluster_template_id).await?;
    if ct.is_some_and(|t| t.tls_disabled) {
        return Err(DomainError::BadRequest(
            "Rotating the CA certificate on a non-TLS cluster is not supported".into(),
        )
        .into());
    }
    match c.status.parse::<Status>() {
        Ok(st) if st.is_stable_complete() => {}
        _ => {
            return Err(DomainError::BadRequest(format!(
                "Rotating the CA certificate of a cluster when status is \"{}\" is not supported.",
                c.status
            ))
            .into());
        }
    }
    record_op(app, &c, OperationKind::RotateCa, json!({}), request_id).await?;
    Ok(c.uuid)
}
