//! What the driver may do on a management cluster: the verbs it uses on each kind (what the
//! service account's ClusterRole must grant) and `magnum-capi check`'s question to the
//! management cluster, one `SelfSubjectAccessReview` per verb, naming every one denied.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::apply::resource;
use super::driver::Capi;
use super::kinds::{self, Gvk};
use crate::driver::Check;

/// How long one review may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// Reviews in flight at once (about eighty in all).
const IN_FLIGHT: usize = 8;

/// The verbs the driver uses on each kind it touches on the management cluster (`capi::apply::
/// Mgmt`): `get` (get/get_value), `list` (list, list_all, delete_labelled), `watch` (the
/// watchers of `capi::watch`, which list too), `create` + `patch` (server-side apply, which
/// creates missing objects), `patch` (annotate/label), `delete`. `magnum-capi cluster forget`
/// (`Mgmt::remove`) deletes and patches away the finalizers of every kind a cluster has objects
/// of (the namespace excepted). `deploy/kubernetes/clusterrole.yaml` grants exactly these
/// (`tests/it/deploy.rs`).
pub const DRIVER_VERBS: [(Gvk, &[&str]); 20] = [
    // templates/namespace.yaml.hbs, applied with every cluster.
    (kinds::NAMESPACE, &["create", "patch"]),
    // CA, credential and rotation Secrets (read, applied, deleted); CAPI's kubeconfig (read,
    // deleted during a CA rotation; watched and patched with `[capi] api_proxy_url`:
    // capi::private); the staged-credential janitor lists every namespace.
    (
        kinds::SECRET,
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    // Watched, applied, relabelled; deleted to delete the cluster.
    (
        kinds::CLUSTER,
        &["list", "watch", "create", "patch", "delete"],
    ),
    // Watched, applied, relabelled; deleted with a nodegroup.
    (
        kinds::MACHINE_DEPLOYMENT,
        &["list", "watch", "create", "patch", "delete"],
    ),
    // Read by collect_templates; removed by forget.
    (kinds::MACHINE_SET, &["list", "patch", "delete"]),
    // Watched; annotated for resize's nodes_to_remove; removed by forget.
    (kinds::MACHINE, &["list", "watch", "patch", "delete"]),
    (
        kinds::MACHINE_HEALTH_CHECK,
        &["list", "create", "patch", "delete"],
    ),
    // Watched and applied; CAPI deletes it with the Cluster (forget does without CAPI).
    (
        kinds::CONTROL_PLANE,
        &["list", "watch", "create", "patch", "delete"],
    ),
    (
        kinds::KUBEADM_CONFIG_TEMPLATE,
        &["list", "create", "patch", "delete"],
    ),
    // Watched; read before each apply (the fields CAPO's webhook made immutable).
    (
        kinds::OPENSTACK_CLUSTER,
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (
        kinds::OPENSTACK_MACHINE_TEMPLATE,
        &["list", "create", "patch", "delete"],
    ),
    // Watched: Nova's refusal of a machine's server (CAPO creates them); removed by forget.
    (
        kinds::OPENSTACK_SERVER,
        &["list", "watch", "patch", "delete"],
    ),
    (
        kinds::HELM_CHART_PROXY,
        &["list", "create", "patch", "delete"],
    ),
    (
        kinds::CLUSTER_RESOURCE_SET,
        &["list", "create", "patch", "delete"],
    ),
    // Watched: add-on health (CAAPH creates them); removed by forget.
    (
        kinds::HELM_RELEASE_PROXY,
        &["list", "watch", "patch", "delete"],
    ),
    // The cluster autoscaler (templates/autoscaler.yaml.hbs): applied, pruned when no
    // nodegroup autoscales, deleted with the cluster. Its RoleBinding grants the ClusterRole
    // installed with the service (`bind` on that one name: AUTOSCALER_BINDING); Roles an
    // earlier version made are only pruned and deleted — no `escalate`, no Role written.
    (
        kinds::SERVICE_ACCOUNT,
        &["list", "create", "patch", "delete"],
    ),
    (kinds::ROLE, &["list", "delete"]),
    (kinds::ROLE_BINDING, &["list", "create", "patch", "delete"]),
    (kinds::DEPLOYMENT, &["list", "create", "patch", "delete"]),
    // The k8s-keystone-auth manifests (a ClusterResourceSet resource): applied, pruned when
    // keystone_auth_enabled goes off, deleted with the cluster.
    (kinds::CONFIG_MAP, &["list", "create", "patch", "delete"]),
];

/// One permission: `verb` on `resource` of API group `group` in every namespace, or only on
/// the object `name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub name: Option<String>,
}

impl std::fmt::Display for Grant {
    /// As `kubectl auth can-i` takes it: `create clusters.cluster.x-k8s.io`, `bind
    /// clusterroles.rbac.authorization.k8s.io/magnum-capi-cluster-autoscaler`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(name) = &self.name {
            write!(f, "/{name}")?;
        }
        Ok(())
    }
}

/// Every permission the driver needs: the verbs of [`DRIVER_VERBS`] on each kind, and `bind`
/// on the ClusterRole each cluster's autoscaler is bound to (`[capi] autoscaler_cluster_role`).
pub fn required(autoscaler_cluster_role: &str) -> Vec<Grant> {
    let mut out: Vec<Grant> = DRIVER_VERBS
        .iter()
        .flat_map(|((api_version, kind), verbs)| {
            let ar = resource(api_version, kind);
            verbs.iter().map(move |verb| Grant {
                group: ar.group.clone(),
                resource: ar.plural.clone(),
                verb: verb.to_string(),
                name: None,
            })
        })
        .collect();
    let role = resource(kinds::ROLE_BINDING.0, "ClusterRole");
    out.push(Grant {
        group: role.group,
        resource: role.plural,
        verb: "bind".into(),
        name: Some(autoscaler_cluster_role.to_string()),
    });
    out
}

impl Capi {
    /// Asks the management cluster, for each permission the driver needs, whether this
    /// service's account holds it (`SelfSubjectAccessReview`, cluster-wide): `Ok` with how
    /// many, or `Err` naming every one denied or left unanswered.
    pub async fn permissions(&self) -> Check {
        let api: Api<SelfSubjectAccessReview> = Api::all(self.mgmt().client().clone());
        let needed = required(&self.config().autoscaler_cluster_role);
        let total = needed.len();
        let answers: Vec<(Grant, Result<bool, String>)> = futures::stream::iter(needed)
            .map(|g| {
                let api = api.clone();
                async move {
                    let answer = review(&api, &g).await;
                    (g, answer)
                }
            })
            .buffered(IN_FLIGHT)
            .collect()
            .await;
        let denied: Vec<String> = answers
            .iter()
            .filter(|(_, a)| *a == Ok(false))
            .map(|(g, _)| g.to_string())
            .collect();
        let unanswered: Vec<String> = answers
            .iter()
            .filter_map(|(g, a)| a.as_ref().err().map(|e| format!("{g} ({e})")))
            .collect();
        let mut problems = Vec::new();
        if !denied.is_empty() {
            problems.push(format!("denied: {}", denied.join(", ")));
        }
        if !unanswered.is_empty() {
            problems.push(format!("not answered: {}", unanswered.join(", ")));
        }
        let outcome = if problems.is_empty() {
            Ok(format!("all {total} the driver needs are granted"))
        } else {
            Err(problems.join("; "))
        };
        Check::new("permissions", outcome)
    }
}

async fn review(api: &Api<SelfSubjectAccessReview>, g: &Grant) -> Result<bool, String> {
    let asked = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(g.group.clone()),
                resource: Some(g.resource.clone()),
                verb: Some(g.verb.clone()),
                name: g.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answered = tokio::time::timeout(ASK_TIMEOUT, api.create(&PostParams::default(), &asked))
        .await
        .map_err(|_| format!("no answer within {}s", ASK_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    Ok(answered.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_verbs_and_grants_read_as_kubectl_takes_them() {
        let listed: Vec<Gvk> = DRIVER_VERBS.iter().map(|(g, _)| *g).collect();
        assert_eq!(
            listed,
            kinds::ALL.to_vec(),
            "DRIVER_VERBS follows capi::kinds::ALL"
        );
        let shown: Vec<String> = required("autoscaler")
            .iter()
            .map(Grant::to_string)
            .collect();
        assert!(shown.contains(&"delete secrets".to_string()), "{shown:?}");
        assert!(shown.contains(&"create helmchartproxies.addons.cluster.x-k8s.io".to_string()));
        assert_eq!(
            shown.last().map(String::as_str),
            Some("bind clusterroles.rbac.authorization.k8s.io/autoscaler")
        );
    }
}
