//! Keystone authentication of the workload cluster (`keystone_auth_enabled`): k8s-keystone-auth
//! on every control-plane node as the API server's token webhook and, unless
//! `keystone_auth_authz_enabled=false`, its authorization webhook with a default policy that maps
//! the cluster project's roles (docs/templates-and-labels.md "Add-ons").

use serde_json::{Value, json};

use super::cx::Cx;
use super::document::{HostPathMount, KeystoneAuth, NameValue, NodeFile, nv};
use super::error::{ValuesError, bad};
use super::labels::LabelView;
use super::versions::tag_for_minor;
use crate::k8s::schema::dns1123_subdomain_error;

/// Directory of the webhook kubeconfig on the control-plane nodes (mounted into the API server).
const WEBHOOK_DIR: &str = "/etc/kubernetes/keystone-auth";
const WEBHOOK_CONFIG: &str = "/etc/kubernetes/keystone-auth/webhook.kubeconfig";
/// Where k8s-keystone-auth listens: host network, loopback only, so only the API server on the
/// same node reaches it. It serves the API server's own certificate (which gets this SAN).
const LISTEN_ADDRESS: &str = "127.0.0.1";
const LISTEN_PORT: u16 = 8443;
/// Where the Keystone CA ConfigMap is mounted in the k8s-keystone-auth container.
const CA_DIR: &str = "/etc/keystone-auth-ca";
/// The ConfigMap (kube-system) the default policy is written to.
const DEFAULT_POLICY_CONFIG_MAP: &str = "k8s-keystone-auth-policy";

/// What Keystone authentication adds to the API server and the control-plane nodes.
pub(super) struct ApiServerParts {
    pub args: Vec<NameValue>,
    pub volume: HostPathMount,
    pub file: NodeFile,
    pub cert_san: String,
}

impl Cx<'_> {
    /// The k8s-keystone-auth add-on, or `None` when `keystone_auth_enabled` is off. Its labels
    /// are checked either way.
    pub(super) fn keystone_auth(&self) -> Result<Option<KeystoneAuth>, ValuesError> {
        let Some((authorization, policy_config_map)) = labels(&self.view)? else {
            return Ok(None);
        };
        let auth_url = self.config.keystone_auth_url.clone().ok_or_else(|| {
            bad(
                "keystone_auth_enabled",
                "true",
                "this service has no Keystone URL to give the cluster ([capi] keystone_auth_url \
                 or [keystone] auth_url)",
            )
        })?;
        if !(auth_url.starts_with("https://") || auth_url.starts_with("http://")) {
            return Err(ValuesError::Invalid(format!(
                "[capi] keystone_auth_url {auth_url:?} is not an http(s) URL"
            )));
        }
        let policy_config_map =
            policy_config_map.unwrap_or_else(|| DEFAULT_POLICY_CONFIG_MAP.to_owned());
        let ca = self.config.keystone_auth_ca.clone();
        let mut args = vec![
            format!("--listen={LISTEN_ADDRESS}:{LISTEN_PORT}"),
            "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt".to_owned(),
            "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key".to_owned(),
            format!("--keystone-url={auth_url}"),
        ];
        if authorization {
            args.push(format!("--policy-configmap-name={policy_config_map}"));
        }
        if ca.is_some() {
            args.push(format!("--keystone-ca-file={CA_DIR}/ca.crt"));
        }
        let tag = tag_for_minor(&self.config.keystone_auth_image_tags, &self.kube_version);
        Ok(Some(KeystoneAuth {
            resource_set_name: format!("{}-keystone-auth", self.cluster_name),
            // In the workload cluster like the charts' images: under `container_infra_prefix`.
            image: match super::images::prefix(&self.view)? {
                Some(prefix) => format!(
                    "{}:{tag}",
                    super::images::under_prefix(&prefix, &self.config.keystone_auth_image)
                ),
                None => format!("{}:{tag}", self.config.keystone_auth_image),
            },
            auth_url,
            ca,
            args,
            authorization,
            policy_config_map,
            default_policy_config_map: DEFAULT_POLICY_CONFIG_MAP.to_owned(),
            default_policy: serde_json::to_string_pretty(&default_policy(&self.c.project_id))
                .map_err(|e| ValuesError::Invalid(format!("keystone policy: {e}")))?,
        }))
    }
}

/// The Keystone-auth labels, checked: `None` when `keystone_auth_enabled` is off, else whether
/// the authorization webhook is on and the policy ConfigMap a label names.
pub(super) fn labels(view: &LabelView<'_>) -> Result<Option<(bool, Option<String>)>, ValuesError> {
    let authorization = view.bool(&["keystone_auth_authz_enabled"], true)?;
    let policy_config_map = view.parsed(&["keystone_auth_policy_configmap"], |v| {
        if let Some(e) = dns1123_subdomain_error(v) {
            return Err(format!("must be a ConfigMap name: {e}"));
        }
        if !authorization {
            return Err(
                "needs keystone_auth_authz_enabled (the policy is for authorization)".into(),
            );
        }
        Ok(v.to_owned())
    })?;
    Ok(view
        .bool(&["keystone_auth_enabled"], false)?
        .then_some((authorization, policy_config_map)))
}

/// The API server's webhook flags, the kubeconfig file they name, its mount and the SAN the
/// webhook's serving certificate (the API server's) needs.
pub(super) fn api_server_parts(k: &KeystoneAuth) -> ApiServerParts {
    let mut args = vec![nv(
        "authentication-token-webhook-config-file",
        WEBHOOK_CONFIG,
    )];
    if k.authorization {
        // RBAC first: system components and RBAC bindings keep working when the webhook is
        // down; the webhook decides only what RBAC does not allow.
        args.push(nv("authorization-mode", "Node,RBAC,Webhook"));
        args.push(nv("authorization-webhook-config-file", WEBHOOK_CONFIG));
    }
    ApiServerParts {
        args,
        volume: HostPathMount {
            name: "keystone-auth".into(),
            host_path: WEBHOOK_DIR.into(),
            mount_path: WEBHOOK_DIR.into(),
            read_only: true,
            path_type: "DirectoryOrCreate".into(),
        },
        file: NodeFile {
            path: WEBHOOK_CONFIG.into(),
            owner: "root:root".into(),
            permissions: "0600".into(),
            content: format!(
                "apiVersion: v1
kind: Config
clusters:
- name: k8s-keystone-auth
  cluster:
    server: https://{LISTEN_ADDRESS}:{LISTEN_PORT}/webhook
    certificate-authority: /etc/kubernetes/pki/ca.crt
users:
- name: kube-apiserver
  user: {{}}
contexts:
- name: webhook
  context:
    cluster: k8s-keystone-auth
    user: kube-apiserver
current-context: webhook
"
            ),
        },
        cert_san: LISTEN_ADDRESS.into(),
    }
}

/// Namespaced kinds of the `edit`/`view` ClusterRoles (k8s-keystone-auth matches the resource
/// without its subresource, so `pods` covers `pods/log` and `pods/exec`).
const WORKLOAD_RESOURCES: &[&str] = &[
    "pods",
    "services",
    "endpoints",
    "endpointslices",
    "configmaps",
    "persistentvolumeclaims",
    "serviceaccounts",
    "deployments",
    "replicasets",
    "statefulsets",
    "daemonsets",
    "replicationcontrollers",
    "jobs",
    "cronjobs",
    "ingresses",
    "networkpolicies",
    "horizontalpodautoscalers",
    "poddisruptionbudgets",
    "podtemplates",
    "controllerrevisions",
    "events",
];
/// Namespaced kinds `edit` may only read.
const NAMESPACE_POLICY_RESOURCES: &[&str] = &["limitranges", "resourcequotas"];
/// Cluster-scoped kinds members and readers may read.
const CLUSTER_READ_RESOURCES: &[&str] = &[
    "namespaces",
    "nodes",
    "persistentvolumes",
    "storageclasses",
    "ingressclasses",
    "priorityclasses",
];
const READ: &[&str] = &["get", "list", "watch"];

/// k8s-keystone-auth's list syntax, `['a', 'b']`.
fn one_of(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The default policy (k8s-keystone-auth's v2 format) for tokens scoped to `project_id`:
/// `admin` ≈ cluster-admin, `member` ≈ edit outside kube-system, `reader` ≈ view.
pub fn default_policy(project_id: &str) -> Value {
    let workload = one_of(WORKLOAD_RESOURCES);
    let mut readable: Vec<&str> = WORKLOAD_RESOURCES.to_vec();
    readable.extend(NAMESPACE_POLICY_RESOURCES);
    let cluster_read = format!("*/{}", one_of(CLUSTER_READ_RESOURCES));
    let users = |role: &str| json!({"projects": [project_id], "roles": [role]});
    json!([
        {
            "users": users("admin"),
            "resource_permissions": {"*/*": ["*"]},
            "nonresource_permissions": {
                "/healthz": ["get"], "/livez": ["get"], "/readyz": ["get"], "/metrics": ["get"]
            }
        },
        {
            "users": users("member"),
            "resource_permissions": {
                format!("!kube-system/{workload}"): ["*"],
                "!kube-system/secrets": ["*"],
                format!("!kube-system/{}", one_of(NAMESPACE_POLICY_RESOURCES)): READ,
                cluster_read.clone(): READ,
            }
        },
        {
            "users": users("reader"),
            "resource_permissions": {
                format!("*/{}", one_of(&readable)): READ,
                cluster_read: READ,
            }
        }
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_scopes_every_rule_to_the_project() {
        let p = default_policy("p1");
        let rules = p.as_array().unwrap();
        assert_eq!(rules.len(), 3);
        for (rule, role) in rules.iter().zip(["admin", "member", "reader"]) {
            assert_eq!(rule["users"]["projects"], json!(["p1"]));
            assert_eq!(rule["users"]["roles"], json!([role]));
        }
        // Readers never see Secrets; members do, outside kube-system.
        assert!(!rules[2].to_string().contains("secrets"));
        assert_eq!(
            rules[1]["resource_permissions"]["!kube-system/secrets"],
            json!(["*"])
        );
    }
}
