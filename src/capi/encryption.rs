//! etcd encryption at rest for a cluster made here: its `EncryptionConfiguration` in the
//! `<cluster>-etcd-encryption` Secret on the management cluster (beside the CAs; the
//! control-plane nodes read it through their KubeadmConfig `files`), written when a cluster is
//! made with `etcd_encryption_enabled` (default true) or when a later render asks for it; a
//! cluster that has it keeps it (Secrets written encrypted could not be read without it).
//!
//! Its key is rotated with the CA rotation, whose three phases each roll every machine: phase 1
//! adds a new key after the current one (every API server can read with it before any writes
//! with it), phase 2 puts it first (new writes use it), and before phase 3 drops the old key
//! every Secret of the workload cluster is written again (the API server re-encrypts what it
//! read with a key that is not the first).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use super::apply::ObjectRef;
use super::driver::{Capi, CapiError, name_of, namespace_of};
use super::values::{ENCRYPTION_KEY, ENCRYPTION_LABEL, encryption_secret_name};
use super::{LABEL_CLUSTER_UUID, LABEL_ROLE, kinds, secret_data};
use crate::domain::spec::ClusterSpec;

/// `magnum.openstack.org/role` of the encryption Secret.
const ROLE_ETCD_ENCRYPTION: &str = "etcd-encryption";

/// A named AES-CBC key (32 random bytes, base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    pub secret: String,
}

impl Key {
    /// A new key named `key-<n>`.
    pub fn generate(n: u32) -> Self {
        let bytes: [u8; 32] = rand::random();
        Self {
            name: format!("key-{n}"),
            secret: STANDARD.encode(bytes),
        }
    }
}

/// The `EncryptionConfiguration` for Secrets with `keys` (the first encrypts, all decrypt),
/// and `identity` last so that Secrets written before encryption was on stay readable.
pub fn config(keys: &[&Key]) -> String {
    let keys: Vec<Value> = keys
        .iter()
        .map(|k| json!({"name": k.name, "secret": k.secret}))
        .collect();
    let doc = json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets"],
                       "providers": [{"aescbc": {"keys": keys}}, {"identity": {}}]}],
    });
    // JSON is YAML: the API server reads it as it is.
    doc.to_string()
}

/// The keys of a configuration [`config`] wrote, in order.
pub fn keys_of(config: &str) -> Vec<Key> {
    let doc: Value = serde_json::from_str(config).unwrap_or_default();
    doc.pointer("/resources/0/providers/0/aescbc/keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|k| {
            Some(Key {
                name: k.get("name")?.as_str()?.to_string(),
                secret: k.get("secret")?.as_str()?.to_string(),
            })
        })
        .collect()
}

/// The keys of a rotation phase: 1 reads with the new key, 2 writes with it, 3 has it alone.
pub fn phase_keys<'a>(phase: i16, old: &'a Key, new: &'a Key) -> Vec<&'a Key> {
    match phase {
        1 => vec![old, new],
        2 => vec![new, old],
        _ => vec![new],
    }
}

/// The number of a key name `key-<n>` (0 when it has none).
fn number(k: &Key) -> u32 {
    k.name
        .strip_prefix("key-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl Capi {
    fn encryption_ref(&self, spec: &ClusterSpec) -> ObjectRef {
        let c = &spec.cluster;
        ObjectRef::new(
            kinds::SECRET,
            &namespace_of(&self.config, c),
            &encryption_secret_name(&name_of(c)),
        )
    }

    /// The cluster's encryption keys as its Secret has them (`None`: no Secret).
    pub(super) async fn encryption_keys(
        &self,
        spec: &ClusterSpec,
    ) -> Result<Option<Vec<Key>>, CapiError> {
        Ok(self
            .mgmt
            .get_value(&self.encryption_ref(spec))
            .await?
            .map(|v| keys_of(&secret_data(&v, ENCRYPTION_KEY).unwrap_or_default())))
    }

    /// The cluster's encryption Secret with `keys`.
    fn encryption_secret(&self, spec: &ClusterSpec, keys: &[&Key]) -> Value {
        let c = &spec.cluster;
        let r = self.encryption_ref(spec);
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": r.name, "namespace": r.namespace,
                         "labels": {LABEL_CLUSTER_UUID: c.uuid.to_string(),
                                    super::LABEL_PROJECT_ID: c.project_id,
                                    super::LABEL_USER_ID: c.user_id,
                                    LABEL_ROLE: ROLE_ETCD_ENCRYPTION}},
            "data": {ENCRYPTION_KEY: STANDARD.encode(config(keys))},
        })
    }

    /// Writes the cluster's encryption Secret with `keys`.
    pub(super) async fn write_encryption(
        &self,
        spec: &ClusterSpec,
        keys: &[&Key],
    ) -> Result<(), CapiError> {
        self.mgmt.apply(&self.encryption_secret(spec, keys)).await?;
        Ok(())
    }

    /// Whether the cluster's API servers encrypt Secrets at rest: yes when its Secret exists
    /// (once on, it stays on: known without a read once this replica wrote or saw it), else as
    /// `etcd_encryption_enabled` says — defaulting to on for a cluster being created (`create`),
    /// off for one made before — with the Secret to write, with a first key, when it is to be
    /// on (applied with the cluster's objects, after its namespace).
    pub(super) async fn etcd_encryption(
        &self,
        spec: &ClusterSpec,
        create: bool,
    ) -> Result<(bool, Option<Value>), CapiError> {
        let uuid = spec.cluster.uuid;
        if self.encrypting.contains_key(&uuid) {
            return Ok((true, None));
        }
        if self.encryption_keys(spec).await?.is_some() {
            self.encrypting.insert(uuid, ()).await;
            return Ok((true, None));
        }
        let wanted = match spec
            .cluster
            .labels
            .get(ENCRYPTION_LABEL)
            .map(String::as_str)
        {
            Some(v) => v.trim().eq_ignore_ascii_case("true"),
            None => create,
        };
        Ok((
            wanted,
            wanted.then(|| self.encryption_secret(spec, &[&Key::generate(1)])),
        ))
    }

    /// The encryption keys of CA rotation phase `phase`: the new key generated at phase 1 (kept
    /// in the rotation Secret's `data` under `etcd-encryption.new`, read back on a replay), the
    /// old one the first of the Secret's. `None`: the cluster does not encrypt.
    pub(super) async fn encryption_rotation(
        &self,
        spec: &ClusterSpec,
        rotation: &Value,
    ) -> Result<Option<(Key, Key)>, CapiError> {
        let Some(keys) = self.encryption_keys(spec).await? else {
            return Ok(None);
        };
        let old = secret_data(rotation, "etcd-encryption.old");
        let new = secret_data(rotation, "etcd-encryption.new");
        let parse = |t: String| {
            let (name, secret) = t.split_once(':')?;
            Some(Key {
                name: name.to_string(),
                secret: secret.to_string(),
            })
        };
        match (old.and_then(parse), new.and_then(parse)) {
            (Some(o), Some(n)) => Ok(Some((o, n))),
            _ => {
                let Some(first) = keys.first() else {
                    return Ok(None);
                };
                let next = keys.iter().map(number).max().unwrap_or(0) + 1;
                Ok(Some((first.clone(), Key::generate(next))))
            }
        }
    }

    /// Writes every Secret of the workload cluster again, unchanged: the API server re-encrypts
    /// each with its first key (what it read with another one is stale). Before a rotation
    /// drops the old key.
    pub(super) async fn rewrite_workload_secrets(
        &self,
        spec: &ClusterSpec,
    ) -> Result<usize, CapiError> {
        let waiting = |what: String| {
            CapiError::Waiting(format!(
                "re-encrypting the workload cluster's Secrets: {what}"
            ))
        };
        let client = self.workload_client(&spec.cluster).await.map_err(waiting)?;
        let all: Api<Secret> = Api::all(client.clone());
        let list = all
            .list(&ListParams::default())
            .await
            .map_err(|e| waiting(e.to_string()))?;
        let mut n = 0;
        for s in list.items {
            let (Some(ns), Some(name)) = (s.metadata.namespace.clone(), s.metadata.name.clone())
            else {
                continue;
            };
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            match api.replace(&name, &PostParams::default(), &s).await {
                Ok(_) => n += 1,
                // Changed or gone meanwhile: written (or removed) since, with the first key.
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
                Err(e) => return Err(waiting(format!("{ns}/{name}: {e}"))),
            }
        }
        Ok(n)
    }
}

/// How the rotation Secret records a key (`name:secret`).
pub fn recorded(k: &Key) -> String {
    format!("{}:{}", k.name, k.secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_reads_with_the_new_key_then_writes_with_it_then_drops_the_old() {
        let (old, new) = (Key::generate(1), Key::generate(2));
        assert_ne!(old.secret, new.secret);
        assert_eq!(STANDARD.decode(&old.secret).unwrap().len(), 32);
        let names = |p| {
            keys_of(&config(&phase_keys(p, &old, &new)))
                .into_iter()
                .map(|k| k.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(1), ["key-1", "key-2"]);
        assert_eq!(names(2), ["key-2", "key-1"]);
        assert_eq!(names(3), ["key-2"]);
        let doc: Value = serde_json::from_str(&config(&[&old])).unwrap();
        assert_eq!(
            doc["resources"][0]["providers"][1],
            json!({"identity": {}}),
            "Secrets written before encryption stay readable"
        );
    }
}
