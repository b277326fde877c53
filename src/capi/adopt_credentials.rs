//! The application credential of a cluster adopted from Magnum's Cluster API drivers (issue 25
//! item 2), by the rules our own clusters follow (`capi::credentials`: staged at the request,
//! committed by the worker, the old one deleted last), in the driver's own Secret and format,
//! read from their sources: magnum-cluster-api's `<stack_id>-cloud-config` (`clouds.yaml`, cloud
//! `default`, `cacert`), delivered into the workload cluster by the ClusterResourceSet Secret
//! `<stack_id>-cloud-provider` (and, for clusters older than it, the legacy `<uuid>` one) whose
//! `cloud.conf` embeds the credential; magnum-capi-helm's `<release>-cloud-credentials`
//! (`clouds.yaml`, cloud `openstack`, `cacert`), delivered by the cluster-api-addon-provider's
//! addons, which it re-renders when their `secret.addons.stackhpc.com/<secret>` checksum
//! annotation changes. And, at delete, the driver's credential in Keystone (verified by the
//! driver's name for it before it is deleted).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::apply::ObjectRef;
use super::credentials::clouds_yaml_credential;
use super::driver::{Capi, CapiError};
use super::{driver_credentials_secret, kinds, secret_data};
use crate::domain::imported::DriverFamily;
use crate::domain::spec::{Cluster, ClusterSpec, ObjectsAt};
use crate::driver::Journal;

/// The cluster-api-addon-provider's addon kinds (capi-helm-charts' `cluster-addons`).
const ADDON_KINDS: [kinds::Gvk; 2] = [
    ("addons.stackhpc.com/v1alpha1", "HelmRelease"),
    ("addons.stackhpc.com/v1alpha1", "Manifests"),
];
/// The addon provider's `secret_annotation_prefix` (`secret.` + its API group).
const ADDON_SECRET_PREFIX: &str = "secret.addons.stackhpc.com";

/// The Secrets magnum-cluster-api's ClusterResourceSets apply into the workload cluster, which
/// embed the credential (`cloud.conf`, Manila's secret): the current one and the legacy one.
fn mcapi_delivery_secrets(at: &ObjectsAt, cluster: &Cluster) -> [String; 2] {
    [
        format!("{}-cloud-provider", at.name),
        cluster.uuid.to_string(),
    ]
}

/// Whether `name` is what the driver called its credential for cluster `uuid`:
/// magnum-cluster-api the cluster's uuid, magnum-capi-helm `magnum-<uuid>-<8 hex>`.
pub fn is_drivers_credential(at: &ObjectsAt, uuid: &str, name: &str) -> bool {
    match at.driver {
        DriverFamily::ClusterApi => name == uuid,
        DriverFamily::CapiHelm => name.starts_with(&format!("magnum-{uuid}-")),
        DriverFamily::Heat | DriverFamily::Unknown => false,
    }
}

/// The driver's `clouds.yaml` with the application credential `id`/`secret` in place of the one
/// it has (its one cloud, every other field as it was); `Err` when it is not one.
pub fn rewrite_clouds_yaml(text: &str, id: &str, secret: &str) -> Result<String, String> {
    let mut doc: Value =
        yaml_serde::from_str(text).map_err(|e| format!("clouds.yaml is not YAML: {e}"))?;
    let clouds = doc
        .get_mut("clouds")
        .and_then(Value::as_object_mut)
        .filter(|c| c.len() == 1)
        .ok_or("clouds.yaml has not exactly one cloud")?;
    let auth = clouds
        .values_mut()
        .next()
        .and_then(|c| c.get_mut("auth"))
        .and_then(Value::as_object_mut)
        .filter(|a| a.contains_key("application_credential_id"))
        .ok_or("clouds.yaml has no application credential")?;
    auth.insert("application_credential_id".into(), json!(id));
    auth.insert("application_credential_secret".into(), json!(secret));
    yaml_serde::to_string(&doc).map_err(|e| e.to_string())
}

/// `text` (one entry of a Secret) with every occurrence of the old credential replaced by the
/// new one; `None` when it does not carry the old id.
pub fn rewrite_embedded(text: &str, old: (&str, &str), new: (&str, &str)) -> Option<String> {
    if old.0.is_empty() || !text.contains(old.0) {
        return None;
    }
    let out = text.replace(old.0, new.0);
    Some(if old.1.is_empty() {
        out
    } else {
        out.replace(old.1, new.1)
    })
}

/// The cluster-api-addon-provider's checksum of a Secret's `data` (`compute_checksum`: sha256 of
/// the sorted `key=value` pairs joined by `;`, values as base64 as the API serves them).
pub fn addon_checksum(data: &Map<String, Value>) -> String {
    let mut pairs: Vec<String> = data
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    hex::encode(Sha256::digest(pairs.join(";").as_bytes()))
}

/// `live` as an object to apply with `data` instead of its own: its identity, labels,
/// annotations and type, nothing the server owns.
fn secret_with(live: &Value, data: Map<String, Value>) -> Value {
    let meta = &live["metadata"];
    let mut out = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "data": data});
    for k in ["labels", "annotations"] {
        if let Some(v) = meta.get(k) {
            out["metadata"][k] = v.clone();
        }
    }
    if let Some(t) = live.get("type") {
        out["type"] = t.clone();
    }
    out
}

fn data_of(secret: &Value) -> Map<String, Value> {
    secret
        .get("data")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// An adopted cluster's credential as its driver's Secret has it, read before a rotation
/// creates the new one.
pub(super) struct DriversCredential {
    /// The driver's Secret.
    live: Value,
    /// The credential in its `clouds.yaml`.
    id: String,
    secret: SecretString,
    /// The credential the commit deletes once the new one is delivered: the one rotated here
    /// last, else the one in the Secret when it is verifiably the driver's (its name).
    pub to_delete: Option<String>,
}

impl Capi {
    /// The credential a rotation of the adopted cluster at `at` replaces, from its driver's
    /// Secret (read once per rotation: [`Self::adopted_staged_objects`] rewrites that read).
    pub(super) async fn drivers_credential_to_rotate(
        &self,
        spec: &ClusterSpec,
        at: &ObjectsAt,
    ) -> Result<DriversCredential, CapiError> {
        let (ns, name) = (at.namespace.as_str(), driver_credentials_secret(at));
        let live = self
            .mgmt
            .get_value(&ObjectRef::new(kinds::SECRET, ns, &name))
            .await?
            .ok_or_else(|| {
                CapiError::Invalid(format!(
                    "the driver's credential Secret {ns}/{name} is missing"
                ))
            })?;
        let (id, secret) = clouds_yaml_credential(&live).ok_or_else(|| {
            CapiError::Invalid(format!(
                "{ns}/{name} has no application credential in clouds.yaml"
            ))
        })?;
        let to_delete = match &spec.day2.app_cred_id {
            Some(id) => Some(id.clone()),
            None => self.drivers_credential(&spec.cluster, at, &id).await?,
        };
        Ok(DriversCredential {
            live,
            id,
            secret,
            to_delete,
        })
    }

    /// The Secrets of adopted cluster `c` (at `at`) as they will be with the new credential
    /// `(id, secret)` in place of `old`, for the staging Secret: the driver's, and, for
    /// magnum-cluster-api, the ClusterResourceSet Secrets that embed it.
    pub(super) async fn adopted_staged_objects(
        &self,
        c: &Cluster,
        at: &ObjectsAt,
        old: &DriversCredential,
        (id, new_secret): (&str, &str),
    ) -> Result<Vec<Value>, CapiError> {
        let ns = at.namespace.as_str();
        let clouds = secret_data(&old.live, "clouds.yaml").unwrap_or_default();
        let text = rewrite_clouds_yaml(&clouds, id, new_secret).map_err(|why| {
            CapiError::Invalid(format!("{ns}/{}: {why}", driver_credentials_secret(at)))
        })?;
        let mut data = data_of(&old.live);
        data.insert("clouds.yaml".into(), json!(STANDARD.encode(text)));
        let mut objects = vec![secret_with(&old.live, data)];
        if at.driver == DriverFamily::ClusterApi {
            for s in mcapi_delivery_secrets(at, c) {
                let r = ObjectRef::new(kinds::SECRET, ns, &s);
                let Some(live) = self.mgmt.get_value(&r).await? else {
                    continue;
                };
                let mut data = data_of(&live);
                let mut changed = false;
                for v in data.values_mut() {
                    let text = v
                        .as_str()
                        .and_then(|b| STANDARD.decode(b).ok())
                        .and_then(|b| String::from_utf8(b).ok());
                    if let Some(t) = text.and_then(|t| {
                        rewrite_embedded(
                            &t,
                            (&old.id, old.secret.expose_secret()),
                            (id, new_secret),
                        )
                    }) {
                        *v = json!(STANDARD.encode(t));
                        changed = true;
                    }
                }
                if changed {
                    objects.push(secret_with(&live, data));
                }
            }
        }
        Ok(objects)
    }

    /// `id` when it is the driver's credential of cluster `c` (one of its owner's, with the
    /// name the driver gives it); `None` otherwise (then it is left alone: nothing here made
    /// it or knows it is the cluster's), or without Keystone.
    async fn drivers_credential(
        &self,
        c: &Cluster,
        at: &ObjectsAt,
        id: &str,
    ) -> Result<Option<String>, CapiError> {
        let Some(k) = &self.keystone else {
            return Ok(None);
        };
        let uuid = c.uuid.to_string();
        let found = k
            .app_credentials_of(&c.user_id)
            .await?
            .into_iter()
            .any(|(i, name)| i == id && is_drivers_credential(at, &uuid, &name));
        if !found {
            tracing::warn!(cluster = %c.uuid, app_cred = %id, "the driver's credential is not one its owner has under the driver's name; it is left alone");
        }
        Ok(found.then(|| id.to_string()))
    }

    /// After the driver's Secret carries the new credential (`secret`, as applied): make what
    /// delivers it into the workload cluster pick it up. magnum-capi-helm: the addons that use
    /// the Secret get the addon provider's checksum annotation of its new data (the provider
    /// re-renders them, as it does when a watched Secret changes). magnum-cluster-api: its
    /// ClusterResourceSet Secrets were rewritten with the driver's Secret (CAPI re-applies a
    /// `Reconcile` set whose Secret changed).
    pub(super) async fn deliver_adopted_credential(
        &self,
        at: &ObjectsAt,
        secret: &Value,
    ) -> Result<(), CapiError> {
        if at.driver != DriverFamily::CapiHelm {
            return Ok(());
        }
        let name = driver_credentials_secret(at);
        let ns = at.namespace.as_str();
        let sum = addon_checksum(&data_of(secret));
        let mut ann = Map::new();
        ann.insert(format!("{ADDON_SECRET_PREFIX}/{name}"), json!(sum));
        let sel = format!("{name}.{ADDON_SECRET_PREFIX}/uses");
        for gvk in ADDON_KINDS {
            for o in self.mgmt.list(gvk, ns, &sel).await? {
                let current = o
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(&format!("{ADDON_SECRET_PREFIX}/{name}")));
                if current.map(String::as_str) != Some(sum.as_str()) {
                    let addon = o.metadata.name.clone().unwrap_or_default();
                    self.mgmt
                        .annotate(&ObjectRef::new(gvk, ns, &addon), &ann)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// At the delete of an adopted cluster whose credential was never rotated here: the
    /// driver's credential (its id in the driver's `clouds.yaml`, verified by its name),
    /// deleted with the service's credentials as ours is; a failure is recorded for the
    /// leftover sweep. Done before the driver's Secret goes, so a replay still finds it.
    pub(super) async fn delete_drivers_credential(
        &self,
        journal: &dyn Journal,
        c: &Cluster,
        at: &ObjectsAt,
    ) -> Result<(), CapiError> {
        let Some((id, _)) = self.credential_of(c).await? else {
            return Ok(());
        };
        if let Some(id) = self.drivers_credential(c, at, &id).await? {
            self.delete_credential(journal, c.uuid, &c.user_id, &id)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MCAPI: &str = "clouds:\n  default:\n    region_name: RegionOne\n    endpoint_type: public\n    identity_api_version: 3\n    verify: true\n    auth:\n      auth_url: https://keystone.example.com/v3\n      application_credential_id: old-id\n      application_credential_secret: old-secret\n";

    #[test]
    fn the_drivers_clouds_yaml_gets_the_new_credential_and_keeps_everything_else() {
        let out = rewrite_clouds_yaml(MCAPI, "new-id", "new-secret").unwrap();
        let doc: Value = yaml_serde::from_str(&out).unwrap();
        let before: Value = yaml_serde::from_str(MCAPI).unwrap();
        let mut want = before.clone();
        want["clouds"]["default"]["auth"]["application_credential_id"] = json!("new-id");
        want["clouds"]["default"]["auth"]["application_credential_secret"] = json!("new-secret");
        assert_eq!(doc, want);
        assert!(rewrite_clouds_yaml("clouds: {}", "a", "b").is_err());
        assert!(rewrite_clouds_yaml("clouds:\n  x:\n    auth: {}\n", "a", "b").is_err());
    }

    #[test]
    fn an_embedded_credential_is_replaced_only_where_the_old_one_is() {
        let conf = "[Global]\napplication-credential-id=old-id\napplication-credential-secret=old-secret\n";
        assert_eq!(
            rewrite_embedded(conf, ("old-id", "old-secret"), ("new-id", "new-secret")).unwrap(),
            "[Global]\napplication-credential-id=new-id\napplication-credential-secret=new-secret\n"
        );
        assert_eq!(
            rewrite_embedded("calico: x", ("old-id", "old-secret"), ("n", "s")),
            None
        );
    }

    #[test]
    fn the_addon_checksum_is_the_providers() {
        // sha256("a=QQ==;b=Qg==") as the provider computes it from the sorted pairs.
        let mut data = Map::new();
        data.insert("b".into(), json!("Qg=="));
        data.insert("a".into(), json!("QQ=="));
        assert_eq!(
            addon_checksum(&data),
            hex::encode(Sha256::digest(b"a=QQ==;b=Qg=="))
        );
    }

    #[test]
    fn each_driver_names_its_credential_its_own_way() {
        let at = |driver| ObjectsAt {
            namespace: "ns".into(),
            name: "r".into(),
            driver,
        };
        let u = "c1a5e700-0001-4000-8000-00000000a000";
        assert!(is_drivers_credential(&at(DriverFamily::ClusterApi), u, u));
        assert!(!is_drivers_credential(
            &at(DriverFamily::ClusterApi),
            u,
            "magnum-x"
        ));
        assert!(is_drivers_credential(
            &at(DriverFamily::CapiHelm),
            u,
            &format!("magnum-{u}-0a1b2c3d")
        ));
        assert!(!is_drivers_credential(&at(DriverFamily::CapiHelm), u, u));
        assert_eq!(
            driver_credentials_secret(&at(DriverFamily::ClusterApi)),
            "r-cloud-config"
        );
        assert_eq!(
            driver_credentials_secret(&at(DriverFamily::CapiHelm)),
            "r-cloud-credentials"
        );
    }
}
