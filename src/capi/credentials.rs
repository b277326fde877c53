//! Application-credential rotation on the management cluster. The request stages a new
//! credential (created with the caller's token, kept in a staging Secret); the worker commits it
//! (checks it authenticates, applies the Secrets, moves ownership, deletes the old one). Also
//! what the periodic chores (`crate::maintenance`) need of the management cluster: whether a
//! credential still works, and the staged credentials nobody committed.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::apply::ObjectRef;
use super::driver::{Capi, CapiError, NewCredential, cluster_name, name_of, namespace_of};
use super::{
    LABEL_CLUSTER_UUID, LABEL_PROJECT_ID, LABEL_ROLE, LABEL_USER_ID, credentials_secret_name,
    kinds, secret_data, values,
};
use crate::domain::spec::{Cluster, ClusterSpec, ObjectsAt, Operation};
use crate::domain::status::Status;
use crate::driver::{Journal, Outcome};
use crate::openstack::UserSession;

/// Annotation of the staging Secret: the id of the credential it carries.
pub const ANN_APP_CRED_ID: &str = "magnum.openstack.org/app-cred-id";
/// `magnum.openstack.org/role` of staging Secrets (the janitor finds them by it).
pub const ROLE_STAGED: &str = "credential-rotation";
/// Attempts an implicit rotation makes before it gives way.
const IMPLICIT_ATTEMPTS: i32 = 3;
/// Staged credentials older than this without an open rotation are discarded by the janitor.
pub const STAGED_GRACE: Duration = Duration::from_secs(600);

/// What a rotation operation carries (no secret: that is in the staging Secret).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RotationPayload {
    pub app_cred_id: String,
    pub user_id: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub old_app_cred_id: Option<String>,
    pub old_user_id: String,
    /// Started by the service (before another operation, or before an expiry), not by a
    /// `PATCH /v1/credentials`: it never changes the cluster's status.
    pub implicit: bool,
}

/// A staging Secret found on the management cluster: whose credential it carries, and where.
#[derive(Debug, Clone)]
pub struct StagedSecret {
    pub cluster: Uuid,
    pub user_id: String,
    pub app_cred_id: String,
    pub namespace: String,
    pub name: String,
}

/// A credential staged for a cluster, to record in a rotation operation.
#[derive(Debug)]
pub struct Staged {
    pub payload: RotationPayload,
}

fn staging_name(cluster: &str) -> String {
    format!("{cluster}-credential-rotation")
}

/// The staging Secret of cluster `cluster` in `ns` (its `labels`, plus the staged role): the
/// `objects` the commit applies, carrying credential `id`.
fn staging_secret(
    ns: &str,
    cluster: &str,
    mut labels: Map<String, Value>,
    id: &str,
    objects: &[Value],
) -> Result<Value, CapiError> {
    labels.insert(LABEL_ROLE.into(), json!(ROLE_STAGED));
    let body = serde_json::to_vec(objects).map_err(|e| CapiError::Invalid(e.to_string()))?;
    Ok(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": staging_name(cluster), "namespace": ns,
                     "labels": labels, "annotations": {ANN_APP_CRED_ID: id}},
        "type": "Opaque",
        "data": {"objects.json": STANDARD.encode(body)},
    }))
}

/// The application credential in the `clouds.yaml` of a rendered or live credentials Secret.
pub fn clouds_yaml_credential(secret: &Value) -> Option<(String, SecretString)> {
    let doc: Value = yaml_serde::from_str(&secret_data(secret, "clouds.yaml")?).ok()?;
    let cloud = doc.get("clouds")?.as_object()?.values().next()?;
    let auth = cloud.get("auth")?;
    Some((
        auth.get("application_credential_id")?.as_str()?.to_string(),
        SecretString::from(
            auth.get("application_credential_secret")?
                .as_str()?
                .to_string(),
        ),
    ))
}

/// The Secret with cluster `c`'s `clouds.yaml`: ours (named after its CAPI cluster), or, for a
/// cluster adopted from Magnum, its driver's. The one place that tells them apart, so that
/// every reader (the commit, the renewal, the delete's clean-up) reads the same Secret.
fn cluster_credentials_secret(c: &Cluster) -> String {
    match &c.objects_at {
        Some(at) => super::driver_credentials_secret(at),
        None => credentials_secret_name(&name_of(c)),
    }
}

fn decode_staged(secret: &Value) -> Result<Vec<Value>, CapiError> {
    secret_data(secret, "objects.json")
        .and_then(|text| serde_json::from_str(&text).ok())
        .ok_or_else(|| CapiError::Invalid("the staged credential Secret is unreadable".into()))
}

/// How long a rotation waits for the workload cluster to get the new credential before it
/// deletes the old one anyway (the ClusterResourceSet re-applies it within seconds).
const READERS_WAIT: chrono::Duration = chrono::Duration::minutes(10);

impl Capi {
    /// Request side of a rotation: a new credential created with `session` (the caller's
    /// token) for `user_id`, with the cluster's Secrets as they will be once it is the owner
    /// (rendered; an adopted cluster's driver's Secrets rewritten: `capi::adopt_credentials`)
    /// kept in the staging Secret until the worker commits it. On failure nothing is left
    /// behind.
    pub async fn stage_rotation(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        session: &UserSession,
        user_id: &str,
        roles: &[String],
        implicit: bool,
    ) -> Result<Staged, CapiError> {
        let cluster = &spec.cluster;
        // An adopted cluster's is in its driver's Secret: read before anything is created.
        let adopted = match &cluster.objects_at {
            Some(at) => Some((at, self.drivers_credential_to_rotate(spec, at).await?)),
            None => None,
        };
        let old_id = match &adopted {
            Some((_, old)) => old.to_delete.clone(),
            None => spec.day2.app_cred_id.clone(),
        };
        let mut owned = cluster.clone();
        owned.user_id = user_id.to_string();
        let NewCredential {
            id,
            expires_at,
            creds,
        } = self
            .new_credentials(journal, &owned, Some(session), roles)
            .await?;
        let id = id.ok_or_else(|| CapiError::Invalid("no credential was created".into()))?;
        let staged = async {
            let (ns, name, labels, objects) = match &adopted {
                Some((at, old)) => {
                    let new = (
                        id.as_str(),
                        creds.application_credential_secret.expose_secret(),
                    );
                    let objects = self.adopted_staged_objects(cluster, at, old, new).await?;
                    // What the janitor reads of a staging Secret: the cluster, the new owner.
                    let mut labels = Map::new();
                    labels.insert(LABEL_CLUSTER_UUID.into(), json!(cluster.uuid.to_string()));
                    labels.insert(LABEL_PROJECT_ID.into(), json!(cluster.project_id));
                    labels.insert(LABEL_USER_ID.into(), json!(user_id));
                    (at.namespace.clone(), at.name.clone(), labels, objects)
                }
                None => {
                    let v = values::build(self.inputs(
                        &spec.template,
                        &owned,
                        &spec.nodegroups,
                        Some(creds),
                        None,
                    ))?;
                    let secrets: Vec<Value> = self
                        .renderer
                        .render_credentials(&v)?
                        .into_iter()
                        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Secret"))
                        .collect();
                    let labels: Map<String, Value> = v
                        .common_labels
                        .iter()
                        .map(|(k, v)| (k.clone(), json!(v)))
                        .collect();
                    (v.namespace, v.cluster_name, labels, secrets)
                }
            };
            let staging = staging_secret(&ns, &name, labels, &id, &objects)?;
            self.mgmt.apply(&staging).await?;
            Ok::<_, CapiError>(())
        }
        .await;
        if let Err(e) = staged {
            if let Err(d) =
                crate::openstack::appcred::delete(session, session.timeout(), user_id, &id).await
            {
                tracing::warn!(app_cred = %id, error = %d, "could not delete an unused application credential");
            }
            return Err(e);
        }
        Ok(Staged {
            payload: RotationPayload {
                app_cred_id: id,
                user_id: user_id.to_string(),
                expires_at,
                old_app_cred_id: old_id,
                old_user_id: cluster.user_id.clone(),
                implicit,
            },
        })
    }

    /// [`Self::discard_staged`] for a rotation operation's payload as recorded.
    pub async fn discard_staged_payload(
        &self,
        journal: &dyn Journal,
        c: &Cluster,
        payload: &Value,
    ) -> Result<(), CapiError> {
        let p: RotationPayload = serde_json::from_value(payload.clone())
            .map_err(|e| CapiError::Invalid(format!("malformed rotation payload: {e}")))?;
        self.discard_staged(journal, c, &p).await
    }

    /// Removes a staged credential that will not be committed (the Secret, and the credential
    /// with the service's credentials, recorded as a leftover when Keystone is unreachable).
    pub async fn discard_staged(
        &self,
        journal: &dyn Journal,
        c: &Cluster,
        p: &RotationPayload,
    ) -> Result<(), CapiError> {
        self.mgmt.delete(&self.staging_ref(c)).await?;
        self.delete_credential(journal, c.uuid, &p.user_id, &p.app_cred_id)
            .await
    }

    /// Cluster `c`'s staging Secret (what a rotation stages before it commits).
    fn staging_ref(&self, c: &Cluster) -> ObjectRef {
        ObjectRef::new(
            kinds::SECRET,
            &namespace_of(&self.config, c),
            &staging_name(&name_of(c)),
        )
    }

    /// The application credential in the `clouds.yaml` of Secret `ns`/`secret`.
    async fn secret_credential(
        &self,
        ns: &str,
        secret: &str,
    ) -> Result<Option<(String, SecretString)>, CapiError> {
        Ok(self
            .mgmt
            .get_value(&ObjectRef::new(kinds::SECRET, ns, secret))
            .await?
            .as_ref()
            .and_then(clouds_yaml_credential))
    }

    /// The application credential in cluster `c`'s live Secret
    /// ([`cluster_credentials_secret`]).
    pub async fn credential_of(
        &self,
        c: &Cluster,
    ) -> Result<Option<(String, SecretString)>, CapiError> {
        self.secret_credential(
            &namespace_of(&self.config, c),
            &cluster_credentials_secret(c),
        )
        .await
    }

    /// Deletes a credential this service created with its own credentials; a failure is
    /// recorded for the leftover sweep.
    pub async fn delete_credential(
        &self,
        journal: &dyn Journal,
        cluster: Uuid,
        user_id: &str,
        id: &str,
    ) -> Result<(), CapiError> {
        let Some(k) = &self.keystone else {
            return Ok(());
        };
        match k.delete_app_credential(user_id, id).await {
            Ok(()) => {
                tracing::info!(%cluster, app_cred = %id, "application credential deleted");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(%cluster, app_cred = %id, error = %e, "application credential not deleted yet; will retry");
                journal
                    .leftover_credential(cluster, user_id, id, &e.to_string())
                    .await?;
                crate::telemetry::app_credential("leftover", 1);
                Ok(())
            }
        }
    }

    /// Worker side: commits a staged credential. Idempotent: a replay after the ownership moved
    /// only finishes the clean-up. Until the Secrets are written the old credential is in
    /// force; a permanent failure discards the new one.
    pub(super) async fn commit_rotation(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        op: &Operation,
    ) -> Result<Outcome, CapiError> {
        let c = &spec.cluster;
        let p: RotationPayload = serde_json::from_value(op.payload.clone())
            .map_err(|e| CapiError::Invalid(format!("malformed rotation operation: {e}")))?;
        let result = self.commit_inner(journal, spec, &p, op.created_at).await;
        match result {
            // An implicit rotation retries a transient failure twice, then gives way to the
            // operation it precedes (whose status a given-up rotation must not overwrite).
            Err(e) if !e.is_transient() || (p.implicit && op.attempts >= IMPLICIT_ATTEMPTS) => {
                // The failure came after the new credential was applied (delivering it into an
                // adopted cluster, relabelling, deleting the old one): the live Secret names
                // it, so discarding it would leave the cluster with a credential that is gone.
                if self
                    .credential_of(c)
                    .await?
                    .is_some_and(|(id, _)| id == p.app_cred_id)
                {
                    return self.keep_applied(journal, spec, &p, &e).await;
                }
                tracing::warn!(cluster = %c.uuid, error = %e, "credential rotation failed; the old credential stays in force");
                if let Err(d) = self.discard_staged(journal, c, &p).await {
                    tracing::warn!(cluster = %c.uuid, error = %d, "could not discard the staged credential; the janitor will");
                }
                if p.implicit {
                    // Best effort before another operation: report, never block it.
                    let current = spec
                        .day2
                        .credential_problem
                        .as_deref()
                        .unwrap_or("The application credential does not work");
                    journal
                        .credential_problem(
                            c.uuid,
                            Some(&format!("{current}; rotating it failed: {e}")),
                        )
                        .await?;
                    self.observer.touch(c.uuid);
                    return Ok(Outcome::Done);
                }
                Err(CapiError::Invalid(format!(
                    "Rotating the application credential failed: {e}. The previous credential stays in force."
                )))
            }
            other => other,
        }
    }

    /// A rotation that failed once its credential was applied: the new credential stays the
    /// cluster's (the live Secret carries it) and the previous one is not deleted (what was not
    /// delivered may still use it; the message names it, for its owner to delete once nothing
    /// does). Reported as the failure of an explicit rotation, or as the credential's problem
    /// beside the operation an implicit one precedes.
    async fn keep_applied(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        p: &RotationPayload,
        e: &CapiError,
    ) -> Result<Outcome, CapiError> {
        let c = &spec.cluster;
        if spec.day2.app_cred_id.as_deref() != Some(p.app_cred_id.as_str()) {
            journal
                .credential_rotated(c.uuid, &p.user_id, &p.app_cred_id, p.expires_at)
                .await?;
        }
        if let Err(d) = self.mgmt.delete(&self.staging_ref(c)).await {
            tracing::warn!(cluster = %c.uuid, error = %d, "could not delete the staged credential's Secret");
        }
        let kept = match p.old_app_cred_id.as_deref() {
            Some(old) if old != p.app_cred_id => {
                format!(
                    " The previous credential {old} was kept (what was not delivered may still use it)."
                )
            }
            _ => String::new(),
        };
        let message = format!(
            "The new application credential {} is in force, but completing its rotation failed: {e}.{kept}",
            p.app_cred_id
        );
        tracing::warn!(cluster = %c.uuid, app_cred = %p.app_cred_id, error = %e, "credential rotation failed after the new credential was applied; both credentials kept");
        self.observer.touch(c.uuid);
        if p.implicit {
            journal.credential_problem(c.uuid, Some(&message)).await?;
            return Ok(Outcome::Done);
        }
        Err(CapiError::Invalid(message))
    }

    async fn commit_inner(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        p: &RotationPayload,
        asked: chrono::DateTime<chrono::Utc>,
    ) -> Result<Outcome, CapiError> {
        let c = &spec.cluster;
        let ns = namespace_of(&self.config, c);
        let staging_ref = self.staging_ref(c);
        if spec.day2.app_cred_id.as_deref() != Some(p.app_cred_id.as_str()) {
            let staged = self.mgmt.get_value(&staging_ref).await?.ok_or_else(|| {
                CapiError::Invalid("the staged credential is gone; rotate again".into())
            })?;
            let objects = decode_staged(&staged)?;
            let creds_name = cluster_credentials_secret(c);
            let creds = objects
                .iter()
                .find(|o| {
                    o.pointer("/metadata/name").and_then(Value::as_str) == Some(creds_name.as_str())
                })
                .ok_or_else(|| {
                    CapiError::Invalid("the staged credential has no clouds.yaml".into())
                })?;
            // A test token first: a credential Keystone refuses never replaces a working one.
            if let Some(k) = &self.keystone {
                let (id, secret) = clouds_yaml_credential(creds).ok_or_else(|| {
                    CapiError::Invalid(
                        "the staged clouds.yaml has no application credential".into(),
                    )
                })?;
                if let Some(why) = k.check_app_credential(&id, &secret).await? {
                    return Err(CapiError::Invalid(format!(
                        "the new application credential does not authenticate: {why}"
                    )));
                }
            }
            self.mgmt.apply_all(&objects).await?;
            // Applied: the live Secret carries the new credential.
            let live = self
                .mgmt
                .get_value(&ObjectRef::new(kinds::SECRET, &ns, &creds_name))
                .await?;
            if live.as_ref().and_then(|l| l.get("data")) != creds.get("data") {
                return Err(CapiError::Waiting(
                    "the cloud-credentials Secret does not show the new credential yet".into(),
                ));
            }
            // An adopted cluster's driver delivers the credential into the workload cluster
            // its own way: that picks the new one up before the old one is deleted below.
            if let Some(at) = &c.objects_at {
                self.deliver_adopted_credential(at, creds).await?;
            }
            journal
                .credential_rotated(c.uuid, &p.user_id, &p.app_cred_id, p.expires_at)
                .await?;
            tracing::info!(cluster = %c.uuid, app_cred = %p.app_cred_id, user = %p.user_id, "application credential rotated");
        }
        // What reads the credential in the workload cluster restarts on the new one before the
        // old one goes (a cluster made here: ours deliver it; an adopted one's driver, its own).
        // Waited for as a reconciler, for at most `READERS_WAIT`.
        if c.objects_at.is_none() && !self.restart_credential_readers(c, &p.app_cred_id).await? {
            if chrono::Utc::now() < asked + READERS_WAIT {
                return Ok(Outcome::Requeue {
                    after: std::time::Duration::from_secs(5),
                    progress: None,
                    step: None,
                });
            }
            tracing::warn!(cluster = %c.uuid, "the workload cluster did not get the new credential in time; its readers were not restarted");
        }
        // Everything else of the cluster now carries the new owner.
        if p.user_id != p.old_user_id {
            self.relabel_owner(&ns, c.uuid, &p.user_id).await?;
        }
        if let Some(old) = &p.old_app_cred_id
            && *old != p.app_cred_id
        {
            self.delete_credential(journal, c.uuid, &p.old_user_id, old)
                .await?;
        }
        self.mgmt.delete(&staging_ref).await?;
        crate::telemetry::app_credential("rotated", 1);
        self.observer.touch(c.uuid);
        // An implicit rotation precedes another operation, whose status it must not touch.
        Ok(if p.implicit {
            Outcome::Done
        } else {
            Outcome::Completed(Status::UpdateComplete)
        })
    }

    /// Sets the owner label on every object of the cluster we created.
    async fn relabel_owner(&self, ns: &str, cluster: Uuid, user_id: &str) -> Result<(), CapiError> {
        let sel = format!("{LABEL_CLUSTER_UUID}={cluster}");
        let mut labels = Map::new();
        labels.insert(LABEL_USER_ID.into(), json!(user_id));
        for gvk in super::driver::LABELLED_KINDS {
            for o in self.mgmt.list(gvk, ns, &sel).await? {
                let name = o.metadata.name.clone().unwrap_or_default();
                let has = o
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_USER_ID))
                    .map(String::as_str);
                if has != Some(user_id) {
                    self.mgmt
                        .label(&ObjectRef::new(gvk, ns, &name), &labels)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Why the credential `app_cred_id` of cluster `cluster` (owned by `user_id` in
    /// `project_id`, its CAPI cluster named after `stack_id`, or its objects `at` where a Magnum
    /// driver left them) does not work; `None` when it does, as its live Secret shows it to
    /// Keystone.
    pub async fn credential_problem(
        &self,
        k: &crate::openstack::Keystone,
        cluster: Uuid,
        owner: (&str, &str),
        (stack_id, at): (Option<&str>, Option<&ObjectsAt>),
        app_cred_id: &str,
    ) -> Result<Option<String>, CapiError> {
        let (user_id, project_id) = owner;
        let live = match at {
            Some(at) => {
                self.secret_credential(&at.namespace, &super::driver_credentials_secret(at))
                    .await?
            }
            None => {
                let ns = super::namespace(&self.config.namespace_prefix, project_id);
                let name = credentials_secret_name(&cluster_name(stack_id, cluster));
                self.secret_credential(&ns, &name).await?
            }
        };
        let refused = match live {
            None => "the cloud-credentials Secret is missing or unreadable".to_string(),
            Some((sid, secret)) => match k.check_app_credential(&sid, &secret).await? {
                None => return Ok(None),
                Some(why) => why,
            },
        };
        let why = k
            .credential_owner_problem(user_id, project_id, app_cred_id)
            .await?
            .unwrap_or(refused);
        Ok(Some(format!(
            "Application credential {app_cred_id} no longer authenticates: {why}. The next project member \
             who updates, resizes, upgrades or deletes the cluster rotates it (or run `openstack coe \
             credential rotate`)."
        )))
    }

    /// The staged credentials older than `grace` on this management cluster.
    pub async fn staged_credentials(
        &self,
        grace: Duration,
    ) -> Result<Vec<StagedSecret>, CapiError> {
        let sel = format!("{LABEL_ROLE}={ROLE_STAGED}");
        let mut out = Vec::new();
        for o in self.mgmt.list_all(kinds::SECRET, &sel).await? {
            let age = o
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| Utc::now().timestamp() - t.0.as_second());
            if age.is_none_or(|a| a < grace.as_secs() as i64) {
                continue;
            }
            let labels = o.metadata.labels.clone().unwrap_or_default();
            let ann = o.metadata.annotations.clone().unwrap_or_default();
            let (Some(cluster), Some(user_id), Some(app_cred_id)) = (
                labels
                    .get(LABEL_CLUSTER_UUID)
                    .and_then(|u| Uuid::parse_str(u).ok()),
                labels.get(LABEL_USER_ID),
                ann.get(ANN_APP_CRED_ID),
            ) else {
                continue;
            };
            out.push(StagedSecret {
                cluster,
                user_id: user_id.clone(),
                app_cred_id: app_cred_id.clone(),
                namespace: o.metadata.namespace.clone().unwrap_or_default(),
                name: o.metadata.name.clone().unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// Deletes a staging Secret (its credential is the caller's business).
    pub async fn delete_staging_secret(&self, s: &StagedSecret) -> Result<(), CapiError> {
        self.mgmt
            .delete(&ObjectRef::new(kinds::SECRET, &s.namespace, &s.name))
            .await?;
        Ok(())
    }
}
