//! The cluster CAs on the management cluster: read for `GET /v1/certificates`, used to sign
//! CSRs for `POST /v1/certificates`, and rotated (`PATCH /v1/certificates`) in three phases,
//! each rolled out to every machine (docs/clients.md, "CA rotation", explains the mechanism and limits).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::apply::ObjectRef;
use super::driver::{Capi, CapiError, name_of, namespace_of};
use super::encryption;
use super::pki::{self, ClusterCas, KeyPairPem};
use super::status::Observed;
use super::{LABEL_ROLE, kinds, secret_data};

use crate::domain::spec::{Cluster, ClusterSpec, Operation};
use crate::domain::status::Status;
use crate::driver::{Journal, Outcome};

pub use crate::domain::certificates::CaKind;

/// The suffix of a CA's Secret (`<cluster>-<suffix>`), also the key prefix in the rotation Secret.
pub fn suffix(kind: CaKind) -> &'static str {
    match kind {
        CaKind::Kubernetes => "ca",
        CaKind::Etcd => "etcd",
        CaKind::FrontProxy => "proxy",
    }
}

/// Whether a rotation replaces CA `kind`. The etcd CA is kept: KCP caches the etcd client
/// certificate it signs with it for a day per cluster, "assuming the etcd CA is not rotated
/// during the lifetime of a Cluster" (cluster-api v1.14 `controlplane/kubeadm/pkg/cluster.go`),
/// so once the last phase left the members trusting only a new etcd CA, KCP could no longer
/// reach etcd — no health check, no rollout, no remediation — until its cache expired (seen on
/// the real stack: `a_clusters_ca_and_credential_rotate_on_real_cluster_api`). Old kubeconfigs
/// still stop working; a certificate a tenant had the etcd CA sign (`ca sign` with
/// `ca_cert_type: etcd`) keeps working — docs/clients.md says so.
pub fn rotated(kind: CaKind) -> bool {
    kind != CaKind::Etcd
}

/// `<cluster>-ca-rotation`: the old and new CAs of a rotation under way.
fn rotation_secret(cluster: &str) -> String {
    format!("{cluster}-ca-rotation")
}

/// `magnum.openstack.org/role` of the rotation Secret.
const ROLE_CA_ROTATION: &str = "ca-rotation";

/// What a CA Secret holds in `phase` (1: sign old, trust both; 2: sign new, trust both; 3: new
/// only). The first certificate is the signer, and the key is its key, as kubeadm requires.
pub fn phase_pair(phase: i16, old: &KeyPairPem, new: &KeyPairPem) -> KeyPairPem {
    match phase {
        1 => KeyPairPem {
            cert_pem: pki::bundle(&[&old.cert_pem, &new.cert_pem]),
            key_pem: old.key_pem.clone(),
        },
        2 => KeyPairPem {
            cert_pem: pki::bundle(&[&new.cert_pem, &old.cert_pem]),
            key_pem: new.key_pem.clone(),
        },
        _ => KeyPairPem {
            cert_pem: pki::bundle(&[&new.cert_pem]),
            key_pem: new.key_pem.clone(),
        },
    }
}

/// The rollout marker of a phase: the next whole second (`rollout.after` has second precision;
/// a machine created in the current second is replaced too, never one created after).
fn marker(now: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(now.timestamp() + 1, 0).unwrap_or(now)
}

/// Every machine of the cluster was created at or after `after`, the expected number exist and
/// all are ready: the phase has reached every node.
pub fn rolled_out(o: &Observed, after: DateTime<Utc>, expected: usize) -> bool {
    let created = |m: &Value| {
        m.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.to_utc())
    };
    let ready = |m: &Value| {
        m.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                matches!(
                    c.get("type").and_then(Value::as_str),
                    Some("Ready" | "NodeReady")
                ) && c.get("status").and_then(Value::as_str) == Some("True")
            })
    };
    o.machines.len() == expected
        && o.machines
            .iter()
            .all(|m| created(m).is_some_and(|t| t >= after) && ready(m))
}

impl Capi {
    /// The CA `kind` of cluster `c` as its Secret holds it (a bundle while a rotation is under
    /// way); `None` when the Secret does not exist.
    pub async fn cluster_ca(
        &self,
        c: &Cluster,
        kind: CaKind,
    ) -> Result<Option<KeyPairPem>, CapiError> {
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        let Some(v) = self
            .mgmt
            .get_value(&ObjectRef::new(
                kinds::SECRET,
                &ns,
                &format!("{name}-{}", suffix(kind)),
            ))
            .await?
        else {
            return Ok(None);
        };
        match (secret_data(&v, "tls.crt"), secret_data(&v, "tls.key")) {
            (Some(cert_pem), Some(key_pem)) => Ok(Some(KeyPairPem { cert_pem, key_pem })),
            _ => Err(CapiError::Invalid(format!(
                "the {} CA Secret of cluster {} is incomplete",
                suffix(kind),
                c.uuid
            ))),
        }
    }

    fn ca_secret(&self, c: &Cluster, kind: CaKind, pair: &KeyPairPem, labels: &Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": format!("{}-{}", name_of(c), suffix(kind)),
                         "namespace": namespace_of(&self.config, c), "labels": labels},
            "data": {"tls.crt": STANDARD.encode(&pair.cert_pem), "tls.key": STANDARD.encode(&pair.key_pem)},
        })
    }

    /// The old and new CAs of the rotation: from the rotation Secret when it exists (a replay),
    /// else the current CAs and freshly generated ones, written to it first.
    async fn rotation_cas(
        &self,
        c: &Cluster,
        started: bool,
    ) -> Result<(Vec<KeyPairPem>, Vec<KeyPairPem>, Value), CapiError> {
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        let r = ObjectRef::new(kinds::SECRET, &ns, &rotation_secret(&name));
        let ca_ref = ObjectRef::new(kinds::SECRET, &ns, &format!("{name}-ca"));
        let labels = self
            .mgmt
            .get(&ca_ref)
            .await?
            .and_then(|s| s.metadata.labels)
            .map(|l| json!(l))
            .ok_or_else(|| CapiError::Invalid("the cluster has no CA Secret".into()))?;
        if let Some(v) = self.mgmt.get_value(&r).await? {
            let mut old = Vec::new();
            let mut new = Vec::new();
            for k in CaKind::ALL {
                let get = |f: &str| {
                    secret_data(&v, &format!("{}.{f}", suffix(k))).ok_or_else(|| {
                        CapiError::Invalid("the CA rotation Secret is incomplete".into())
                    })
                };
                old.push(KeyPairPem {
                    cert_pem: get("old.crt")?,
                    key_pem: get("old.key")?,
                });
                new.push(KeyPairPem {
                    cert_pem: get("new.crt")?,
                    key_pem: get("new.key")?,
                });
            }
            return Ok((old, new, labels));
        }
        if started {
            return Err(CapiError::Invalid(
                "the CA rotation's new CAs are gone from the management cluster; the rotation cannot finish"
                    .into(),
            ));
        }
        let fresh = ClusterCas::generate()?;
        let mut old = Vec::new();
        for k in CaKind::ALL {
            let cur = self.cluster_ca(c, k).await?.ok_or_else(|| {
                CapiError::Invalid(format!("the cluster has no {} CA", suffix(k)))
            })?;
            // After an earlier rotation the Secret holds one certificate; take the signer only.
            let signer = pki::pem_certs(&cur.cert_pem)
                .into_iter()
                .next()
                .unwrap_or_default();
            old.push(KeyPairPem {
                cert_pem: signer,
                key_pem: cur.key_pem,
            });
        }
        let mut new = vec![fresh.ca, fresh.etcd, fresh.front_proxy];
        for (i, k) in CaKind::ALL.into_iter().enumerate() {
            if !rotated(k) {
                new[i] = old[i].clone();
            }
        }
        let mut data = serde_json::Map::new();
        for (i, k) in CaKind::ALL.into_iter().enumerate() {
            for (f, text) in [
                ("old.crt", &old[i].cert_pem),
                ("old.key", &old[i].key_pem),
                ("new.crt", &new[i].cert_pem),
                ("new.key", &new[i].key_pem),
            ] {
                data.insert(format!("{}.{f}", suffix(k)), json!(STANDARD.encode(text)));
            }
        }
        let mut rot_labels = labels.clone();
        rot_labels[LABEL_ROLE] = json!(ROLE_CA_ROTATION);
        self.mgmt
            .apply(&json!({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": rotation_secret(&name), "namespace": ns, "labels": rot_labels},
                "data": data,
            }))
            .await?;
        Ok((old, new, labels))
    }

    /// Writes the CA data of `kube-public/cluster-info` in the workload cluster (what joining
    /// nodes trust and check the discovery pin against), through the admin kubeconfig CAPI keeps
    /// in `<cluster>-kubeconfig`.
    async fn set_cluster_info_ca(&self, c: &Cluster, ca_pem: &str) -> Result<(), CapiError> {
        let waiting = |what: String| {
            CapiError::Waiting(format!(
                "updating the workload cluster's cluster-info: {what}"
            ))
        };
        let client = self.workload_client(c).await.map_err(waiting)?;
        let api: Api<ConfigMap> = Api::namespaced(client, "kube-public");
        let cm = api
            .get("cluster-info")
            .await
            .map_err(|e| waiting(format!("reading kube-public/cluster-info: {e}")))?;
        let doc = cm
            .data
            .as_ref()
            .and_then(|d| d.get("kubeconfig"))
            .ok_or_else(|| waiting("cluster-info has no kubeconfig".into()))?;
        let mut info =
            kube::config::Kubeconfig::from_yaml(doc).map_err(|e| waiting(e.to_string()))?;
        for cl in &mut info.clusters {
            if let Some(cluster) = cl.cluster.as_mut() {
                cluster.certificate_authority_data = Some(STANDARD.encode(ca_pem));
            }
        }
        let yaml = yaml_serde::to_string(&info).map_err(|e| CapiError::Invalid(e.to_string()))?;
        api.patch(
            "cluster-info",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"kubeconfig": yaml}})),
        )
        .await
        .map_err(|e| waiting(format!("writing kube-public/cluster-info: {e}")))?;
        Ok(())
    }

    /// `rotate_ca`: three phases, each written to the CA Secrets (and cluster-info), then rolled
    /// out to every machine. One run does what can be done now — start the next phase, or find
    /// the current one rolled out — and requeues while machines are replaced (no worker waits
    /// for a rollout). The phase and its marker are durable (the journal), so replays resume there.
    pub(super) async fn rotate_ca(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        op: &Operation,
    ) -> Result<Outcome, CapiError> {
        let c = &spec.cluster;
        let mut step: CaStep = serde_json::from_value(op.step.clone()).unwrap_or_default();
        let (phase, after) = (spec.day2.ca_rotation_phase, spec.day2.ca_rollout_after);
        let (ph, after) = match (phase, after) {
            (Some(p), Some(a)) => (p, a),
            _ => return self.start_phase(journal, spec, 1, false, step).await,
        };
        if step.applied != Some(ph) {
            // A replay of a phase whose objects may not all be written: write them again.
            let cas = self.rotation_cas(c, true).await?;
            self.apply_phase(journal, spec, ph, after, cas).await?;
            step.applied = Some(ph);
            return Ok(step.requeue(ROLLOUT_POLL));
        }
        let expected: usize = spec
            .nodegroups
            .iter()
            .map(|n| usize::try_from(n.node_count).unwrap_or(0))
            .sum();
        let timeout = Duration::from_secs(self.config.update_timeout_mins.max(1) * 60);
        if !(self.observer.synced() && rolled_out(&self.observer.observed(c.uuid), after, expected))
        {
            let deadline = after + chrono::Duration::from_std(timeout).unwrap_or_default();
            let left = (deadline - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Err(CapiError::Waiting(format!(
                    "CA rotation phase {ph}: not every machine was replaced within {} minutes",
                    timeout.as_secs() / 60
                )));
            }
            return Ok(step.requeue(ROLLOUT_POLL.min(left)));
        }
        if ph < 3 {
            return self.start_phase(journal, spec, ph + 1, true, step).await;
        }
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        self.mgmt
            .delete(&ObjectRef::new(kinds::SECRET, &ns, &rotation_secret(&name)))
            .await?;
        journal.ca_rotation(c.uuid, None, None).await?;
        tracing::info!(cluster = %c.uuid, "CA rotation complete");
        Ok(Outcome::Completed(Status::UpdateComplete))
    }

    /// Records phase `ph` with a new marker (durable first: a replay keeps it and starts no
    /// second rollout), writes it, and requeues to watch its rollout. `started`: an earlier
    /// phase exists (the rotation's CAs must be there already).
    async fn start_phase(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        ph: i16,
        started: bool,
        mut step: CaStep,
    ) -> Result<Outcome, CapiError> {
        let c = &spec.cluster;
        // The rotation Secret first, so the recorded phase always has its CAs.
        let cas = self.rotation_cas(c, started).await?;
        let after = marker(Utc::now());
        journal.ca_rotation(c.uuid, Some(ph), Some(after)).await?;
        self.apply_phase(journal, spec, ph, after, cas).await?;
        step.applied = Some(ph);
        Ok(step.requeue(ROLLOUT_POLL))
    }

    /// Writes phase `ph` of the rotation's CAs (`old`, `new`, the CA Secrets' `labels`) to the CA
    /// Secrets and cluster-info and rolls it out (`after`: the phase's marker, for the log).
    async fn apply_phase(
        &self,
        journal: &dyn Journal,
        spec: &ClusterSpec,
        ph: i16,
        after: DateTime<Utc>,
        (old, new, labels): (Vec<KeyPairPem>, Vec<KeyPairPem>, Value),
    ) -> Result<(), CapiError> {
        let c = &spec.cluster;
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        let mut objs = Vec::new();
        for (i, k) in CaKind::ALL.into_iter().enumerate() {
            if rotated(k) {
                objs.push(self.ca_secret(c, k, &phase_pair(ph, &old[i], &new[i]), &labels));
            }
        }
        self.mgmt.apply_all(&objs).await?;
        self.rotate_encryption_key(spec, ph).await?;
        match ph {
            1 => {
                self.set_cluster_info_ca(c, &pki::bundle(&[&old[0].cert_pem, &new[0].cert_pem]))
                    .await?
            }
            3 => self.set_cluster_info_ca(c, &new[0].cert_pem).await?,
            _ => {}
        }
        if ph >= 2 {
            // CAPI regenerates the admin kubeconfig with the key now in force.
            self.mgmt
                .delete(&ObjectRef::new(
                    kinds::SECRET,
                    &ns,
                    &format!("{name}-kubeconfig"),
                ))
                .await?;
        }
        tracing::info!(cluster = %c.uuid, phase = ph, after = %after, "CA rotation phase rolling out");
        // Rendered with the phase's marker, as recorded.
        let mut marked = spec.clone();
        marked.day2.ca_rotation_phase = Some(ph);
        marked.day2.ca_rollout_after = Some(after);
        self.apply_cluster(journal, &marked, None, false).await?;
        Ok(())
    }
}

impl Capi {
    /// The etcd encryption key's part of CA rotation phase `ph` (`super::encryption`): the new
    /// key recorded in the rotation Secret first, every Secret of the workload cluster written
    /// again before phase 3 drops the old key, then the phase's keys written (new machines read
    /// them; every machine is replaced each phase).
    async fn rotate_encryption_key(&self, spec: &ClusterSpec, ph: i16) -> Result<(), CapiError> {
        let c = &spec.cluster;
        let (ns, name) = (namespace_of(&self.config, c), name_of(c));
        let r = ObjectRef::new(kinds::SECRET, &ns, &rotation_secret(&name));
        let rotation = self.mgmt.get_value(&r).await?.unwrap_or_default();
        let Some((old, new)) = self.encryption_rotation(spec, &rotation).await? else {
            return Ok(());
        };
        if secret_data(&rotation, "etcd-encryption.new").is_none() {
            self.mgmt
                .merge_patch(
                    &r,
                    &json!({"data": {
                        "etcd-encryption.old": STANDARD.encode(encryption::recorded(&old)),
                        "etcd-encryption.new": STANDARD.encode(encryption::recorded(&new)),
                    }}),
                )
                .await?;
        }
        if ph >= 3 {
            let n = self.rewrite_workload_secrets(spec).await?;
            tracing::info!(cluster = %c.uuid, secrets = n, "Secrets re-encrypted with the new key");
        }
        self.write_encryption(spec, &encryption::phase_keys(ph, &old, &new))
            .await
    }
}

/// How often a rollout is looked at when no change of the cluster woke it sooner.
const ROLLOUT_POLL: Duration = Duration::from_secs(30);

/// Where a CA rotation is between its runs: the phase whose objects are written.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct CaStep {
    #[serde(default)]
    applied: Option<i16>,
}

impl CaStep {
    fn requeue(&self, after: Duration) -> Outcome {
        Outcome::Requeue {
            after,
            progress: None,
            step: serde_json::to_value(self).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(n: &str) -> KeyPairPem {
        pki::generate_ca(n).unwrap()
    }

    #[test]
    fn phases_sign_with_the_first_certificate_and_trust_what_they_must() {
        let (old, new) = (pair("old"), pair("new"));
        let certs = |p: &KeyPairPem| pki::pem_certs(&p.cert_pem);
        let (o, n) = (certs(&old)[0].clone(), certs(&new)[0].clone());
        let p1 = phase_pair(1, &old, &new);
        assert_eq!(certs(&p1), [o.clone(), n.clone()]);
        assert!(pki::key_matches(&p1.cert_pem, &p1.key_pem));
        assert_eq!(p1.key_pem, old.key_pem);
        let p2 = phase_pair(2, &old, &new);
        assert_eq!(certs(&p2), [n.clone(), o]);
        assert_eq!(p2.key_pem, new.key_pem);
        let p3 = phase_pair(3, &old, &new);
        assert_eq!(certs(&p3), [n]);
        assert!(pki::key_matches(&p3.cert_pem, &p3.key_pem));
    }

    #[test]
    fn a_phase_is_rolled_out_when_every_machine_is_new_and_ready() {
        let after = DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
            .unwrap()
            .to_utc();
        let m = |created: &str, ready: &str| {
            json!({"metadata": {"creationTimestamp": created},
                   "status": {"conditions": [{"type": "Ready", "status": ready}]}})
        };
        let obs = |ms: Vec<Value>| Observed {
            machines: ms.into_iter().map(std::sync::Arc::new).collect(),
            ..Observed::default()
        };
        let new_ready = m("2026-11-22T10:00:00Z", "True");
        assert!(rolled_out(&obs(vec![new_ready.clone()]), after, 1));
        // An old machine, a machine not ready, or one missing: not yet.
        assert!(!rolled_out(
            &obs(vec![new_ready.clone(), m("2026-11-22T09:59:59Z", "True")]),
            after,
            2
        ));
        assert!(!rolled_out(
            &obs(vec![m("2026-11-22T10:00:05Z", "False")]),
            after,
            1
        ));
        assert!(!rolled_out(&obs(vec![new_ready]), after, 2));
        // The marker is the next whole second: a machine created in the current one is replaced.
        let now = DateTime::parse_from_rfc3339("2026-11-22T10:00:00.400Z")
            .unwrap()
            .to_utc();
        assert_eq!(marker(now).to_rfc3339(), "2026-11-22T10:00:01+00:00");
    }
}
