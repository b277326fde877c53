//! The Helm chart (deploy/helm/magnum-capi), rendered by the Helm engine with its default values
//! and with every option set: each object passes a strict schema check of its kind (the
//! Kubernetes API types of k8s-openapi, where any field they drop is an unknown field; the
//! ServiceMonitor against the prometheus-operator fields it uses), `helm lint --strict` passes,
//! the configuration it renders is one `serve` accepts, values that cannot work are refused by
//! the render naming them, and the plain manifests of deploy/kubernetes are exactly its render.
//! What the replicas it configures do is tests/it/replicas.rs.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use magnum_capi::config::Config;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::common::chart::{self, existing_secret, find, objects, pod, render, try_render};

/// The prometheus-operator `monitoring.coreos.com/v1` ServiceMonitor, only the fields the chart
/// may set (names as in its API reference); anything else is refused. No CRD schema of it is
/// available here.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitor {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: ServiceMonitorSpec,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitorSpec {
    selector: LabelSelector,
    endpoints: Vec<ServiceMonitorEndpoint>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitorEndpoint {
    port: String,
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scrape_timeout: Option<String>,
}

/// Where `back` (the typed round trip) lost or changed something of `original`.
fn differences(original: &Value, back: &Value, path: &str, out: &mut Vec<String>) {
    match (original, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let here = format!("{path}.{k}");
                match b.get(k) {
                    None if !v.is_null() => out.push(format!("{here}: unknown field")),
                    None => {}
                    Some(w) => differences(v, w, &here, out),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                differences(v, w, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: {a} became {b}")),
    }
}

/// `object` as a `T`: every field known to the type, of the right type.
fn strictly<T: DeserializeOwned + Serialize>(object: &Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    differences(object, &back, "", &mut out);
    if out.is_empty() {
        Ok(())
    } else {
        Err(out.join("; "))
    }
}

/// The schema check of every rendered object, by kind; returns the kinds seen.
fn check_every_object(objects: &[Value]) -> BTreeSet<String> {
    let mut kinds = BTreeSet::new();
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or_default();
        let result = match (o["apiVersion"].as_str().unwrap_or_default(), kind) {
            ("v1", "Namespace") => strictly::<Namespace>(o),
            ("v1", "ConfigMap") => strictly::<ConfigMap>(o),
            ("v1", "Secret") => strictly::<Secret>(o),
            ("v1", "ServiceAccount") => strictly::<ServiceAccount>(o),
            ("v1", "Service") => strictly::<Service>(o),
            ("apps/v1", "Deployment") => strictly::<Deployment>(o),
            ("apps/v1", "DaemonSet") => strictly::<DaemonSet>(o),
            ("batch/v1", "Job") => strictly::<Job>(o),
            ("policy/v1", "PodDisruptionBudget") => strictly::<PodDisruptionBudget>(o),
            ("networking.k8s.io/v1", "NetworkPolicy") => strictly::<NetworkPolicy>(o),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => strictly::<ClusterRole>(o),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                strictly::<ClusterRoleBinding>(o)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
                strictly::<ValidatingAdmissionPolicy>(o)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
                strictly::<ValidatingAdmissionPolicyBinding>(o)
            }
            ("monitoring.coreos.com/v1", "ServiceMonitor") => strictly::<ServiceMonitor>(o),
            (v, k) => Err(format!("{v} {k}: a kind this test does not know")),
        };
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        if let Err(e) = result {
            panic!("{kind} {name}: {e}");
        }
        if !chart::CLUSTER_SCOPED.contains(&kind) {
            assert_eq!(o["metadata"]["namespace"], chart::RELEASE, "{kind} {name}");
        }
        kinds.insert(kind.to_string());
    }
    kinds
}

const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
/// `apiProxy.key`.
const PROXY_KEY: &str = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=";

/// Every option of values.yaml away from its default.
fn every_option() -> Value {
    json!({
        "image": {"repository": "registry.internal/magnum-capi", "tag": "1.2.3"},
        "imagePullSecrets": [{"name": "pull"}],
        "replicaCount": 3,
        "namespace": {"create": true},
        "database": {"url": "postgres://magnum:secret@db.example.com/magnum"},
        "sealKeys": {"current": KEY_B, "previous": [KEY_A]},
        "keystone": {"password": "s3cret", "regionName": "RegionTwo",
            "wwwAuthenticateUri": "https://keystone.example.com/v3", "cafile": "/etc/ssl/ca.pem"},
        "keystoneRegistration": {"enabled": true,
            "endpoints": {"public": "https://magnum.example.com/v1"}},
        "managementCluster": {"kubeconfig": "apiVersion: v1\nkind: Config\n"},
        "managementClusters": [
            {"name": "east", "existingSecret": "east-kubeconfig",
             "config": {"weight": 2, "region": "RegionTwo", "availability_zones": ["az1"]}},
            {"name": "west", "kubeconfig": "apiVersion: v1\nkind: Config\n"}
        ],
        "tls": {"enabled": true},
        "trustedProxies": ["10.0.0.0/8", "192.0.2.1"],
        "config": {"operations": {"concurrency": 8}, "capi": {"namespace_prefix": "mc"}},
        "service": {"type": "LoadBalancer"},
        "serviceMonitor": {"enabled": true, "labels": {"release": "prometheus"}},
        "podDisruptionBudget": {"minAvailable": 2},
        "podAnnotations": {"example.com/a": "b"},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "extraEnv": [{"name": "RUST_LOG", "value": "debug"}],
        "extraVolumes": [{"name": "ca", "secret": {"secretName": "openstack-ca"}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/openstack", "readOnly": true}],
        "apiProxy": {"enabled": true, "port": 3129, "dialFromHost": true, "key": PROXY_KEY,
            "maxDials": 8, "namespaces": ["qdhcp-{network_id}"],
            "networkPolicy": {"controllerNamespaces": ["capi-system", "caaph-system"],
                "extraFrom": [{"ipBlock": {"cidr": "192.0.2.0/24"}}]},
            "nodeSelector": {"openstack-network-node": "enabled"},
            "tolerations": [{"key": "network", "effect": "NoSchedule"}]},
    })
}

#[test]
fn every_object_of_the_default_render_passes_its_kinds_schema() {
    let objects = objects(&render(&json!({})));
    let kinds = check_every_object(&objects);
    let want: BTreeSet<String> = [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Job",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds, want);
    assert_eq!(chart::lint(&json!({})), Vec::<String>::new());
}

#[test]
fn every_object_with_every_option_set_passes_its_kinds_schema() {
    let values = every_option();
    let objects = objects(&render(&values));
    let kinds = check_every_object(&objects);
    for kind in [
        "Namespace",
        "Secret",
        "ServiceMonitor",
        "DaemonSet",
        "NetworkPolicy",
    ] {
        assert!(kinds.contains(kind), "{kind} not rendered: {kinds:?}");
    }
    let jobs: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Job")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        jobs,
        [
            "magnum-capi-migrate",
            "magnum-capi-ks-user",
            "magnum-capi-ks-service",
            "magnum-capi-ks-endpoints",
        ]
    );
    assert_eq!(chart::lint(&values), Vec::<String>::new());
}

/// The ConfigMap's magnum-capi.toml loads as the service's configuration, its files (key ring,
/// kubeconfigs, certificate) are where it says, the Secrets reach the process as environment and
/// never through the ConfigMap, and it does not migrate: the Job does.
#[test]
fn the_rendered_configuration_is_one_serve_accepts_without_migrating() {
    let objects = objects(&render(&every_option()));
    let east = existing_secret(
        "east-kubeconfig",
        &[("config", "apiVersion: v1\nkind: Config\n")],
    );
    let tls = existing_secret("magnum-capi-tls", &[("tls.crt", "-"), ("tls.key", "-")]);
    let ca = existing_secret("openstack-ca", &[("ca.pem", "-")]);
    let p = pod(&objects, &[east, tls, ca]);
    assert_eq!(p.args[..2], ["serve", "--config"]);
    let file = std::path::Path::new(&p.args[2]);
    let cfg = Config::load(Some(file)).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // (The Secrets are the process's environment, which `Config::load` here does not see; that
    // `serve` starts on all of it is tests/it/replicas.rs.)
    assert_eq!(cfg.keystone.username.as_deref(), Some("magnum"));
    assert!(!cfg.database.migrate_on_start);
    assert_eq!(cfg.operations.concurrency, 8);
    assert_eq!(cfg.capi.namespace_prefix, "mc");
    assert_eq!(cfg.keystone.region_name.as_deref(), Some("RegionTwo"));
    assert_eq!(
        cfg.capi.api_proxy_url.as_deref(),
        Some("http://magnum-capi-api-proxy.magnum-capi.svc:3129"),
        "the api-proxy's Service"
    );
    let ring = cfg.operations.sealer().expect("the key ring");
    assert_eq!(ring.key_ids().len(), 2, "current and previous");
    // Every kubeconfig it names is a file of the pod.
    let named: BTreeMap<&str, &std::path::Path> = cfg
        .capi
        .management_clusters
        .iter()
        .map(|m| (m.name.as_str(), m.kubeconfig.as_deref().unwrap()))
        .collect();
    assert_eq!(named.keys().copied().collect::<Vec<_>>(), ["east", "west"]);
    assert_eq!(cfg.capi.management_clusters[0].weight, 2);
    for path in named
        .values()
        .chain([&cfg.capi.kubeconfig.as_deref().unwrap()])
    {
        assert!(path.is_file(), "{} is not mounted", path.display());
    }
    // Secrets reach the process as environment, never through the ConfigMap.
    assert_eq!(
        p.env("MAGNUM_CAPI__DATABASE__URL"),
        Some("postgres://magnum:secret@db.example.com/magnum")
    );
    assert_eq!(p.env("MAGNUM_CAPI__KEYSTONE__PASSWORD"), Some("s3cret"));
    assert_eq!(p.env("MAGNUM_CAPI__CAPI__API_PROXY_KEY"), Some(PROXY_KEY));
    let cm = serde_json::to_string(find(&objects, "ConfigMap", None)).unwrap();
    for secret in ["s3cret", "magnum:secret", KEY_A, KEY_B, PROXY_KEY] {
        assert!(!cm.contains(secret), "{secret} in the ConfigMap");
    }
    assert_eq!(
        p.env("MAGNUM_CAPI__HTTP__TRUSTED_PROXIES"),
        Some("10.0.0.0/8,192.0.2.1")
    );
    let cert = p.env("MAGNUM_CAPI__HTTP__TLS_CERT_FILE").expect("TLS cert");
    assert!(std::path::Path::new(cert).is_file(), "{cert}");
    // With TLS the probes speak HTTPS.
    let d = find(&objects, "Deployment", None);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
}

/// `apiProxy.enabled` (docs/private-clusters.md): `magnum-capi api-proxy` as a DaemonSet on the
/// selected nodes, root with CAP_SYS_ADMIN alone (every other capability dropped, not privileged,
/// no privilege escalation, read-only root, RuntimeDefault seccomp, nothing of the host's but
/// /run/netns, propagated so namespaces made later appear), reading nothing but
/// OpenStackClusters, holding the proxy key the replicas hold (from the one Secret), behind the
/// Service the service's configuration names (the previous test); its namespace no longer
/// `restricted`.
#[test]
fn the_api_proxy_is_a_daemonset_with_only_what_it_needs() {
    let objects = objects(&render(&every_option()));
    let ds = find(&objects, "DaemonSet", Some("magnum-capi-api-proxy"));
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(
        spec["nodeSelector"],
        json!({"openstack-network-node": "enabled"})
    );
    assert_eq!(spec["serviceAccountName"], "magnum-capi-api-proxy");
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(spec.get(host).is_none(), "{host}: {spec}");
    }
    assert_eq!(spec["enableServiceLinks"], false);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &spec["containers"][0];
    assert_eq!(c["args"], json!(["api-proxy"]));
    assert_eq!(
        c["securityContext"],
        json!({"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": false, "privileged": false,
               "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
               "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]},
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "netns", "mountPath": "/run/netns", "readOnly": true,
                "mountPropagation": "HostToContainer"}])
    );
    assert_eq!(spec["volumes"].as_array().unwrap().len(), 1);
    assert_eq!(spec["volumes"][0]["hostPath"]["path"], "/run/netns");
    let env: BTreeMap<&str, &Value> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e))
        .collect();
    let value = |name: &str| env[name]["value"].as_str().unwrap();
    assert_eq!(value("MAGNUM_CAPI__API_PROXY__BIND"), "0.0.0.0:3129");
    assert_eq!(
        value("MAGNUM_CAPI__API_PROXY__NAMESPACES"),
        "qdhcp-{network_id}"
    );
    assert_eq!(value("MAGNUM_CAPI__API_PROXY__DIAL_FROM_HOST"), "true");
    assert_eq!(value("MAGNUM_CAPI__API_PROXY__MAX_DIALS"), "8");
    // The key comes from the Secret the replicas read it from, never from the values inline.
    let key_ref = &env["MAGNUM_CAPI__API_PROXY__KEY"]["valueFrom"]["secretKeyRef"];
    assert_eq!(key_ref["name"], "magnum-capi-api-proxy-key");
    let secret = chart::secret_data(find(&objects, "Secret", Some("magnum-capi-api-proxy-key")));
    assert_eq!(secret[key_ref["key"].as_str().unwrap()], PROXY_KEY);
    assert!(!ds.to_string().contains(PROXY_KEY));
    // A new key rolls the proxies.
    assert!(
        ds["spec"]["template"]["metadata"]["annotations"]["checksum/secrets"].is_string(),
        "{ds}"
    );
    let role = find(&objects, "ClusterRole", Some("magnum-capi-api-proxy"));
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["infrastructure.cluster.x-k8s.io"],
                "resources": ["openstackclusters"], "verbs": ["get", "list", "watch"]}])
    );
    let binding = find(
        &objects,
        "ClusterRoleBinding",
        Some("magnum-capi-api-proxy"),
    );
    assert_eq!(binding["subjects"][0]["name"], "magnum-capi-api-proxy");
    let svc = find(&objects, "Service", Some("magnum-capi-api-proxy"));
    assert_eq!(svc["spec"]["ports"][0]["port"], 3129);
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&ds["spec"]["template"]["metadata"]["labels"][k], v, "{k}");
    }
    let api = find(&objects, "Service", Some("magnum-capi"));
    assert_ne!(api["spec"]["selector"], svc["spec"]["selector"]);
    let ns = find(&objects, "Namespace", None);
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    let default = objects_of_default_namespace();
    assert_eq!(
        default["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
}

/// The proxy port admits only the controllers that read workload clusters through their
/// kubeconfig (the namespaces of `apiProxy.networkPolicy.controllerNamespaces`), the service's
/// own replicas, each cluster's autoscaler in the namespaces the service manages, and the
/// configured extra peers; nothing else reaches the proxy's pods.
#[test]
fn a_network_policy_admits_only_the_controllers_to_the_proxy() {
    let objects = objects(&render(&every_option()));
    let ds = find(&objects, "DaemonSet", Some("magnum-capi-api-proxy"));
    let np = find(&objects, "NetworkPolicy", Some("magnum-capi-api-proxy"));
    let spec = &np["spec"];
    assert_eq!(spec["policyTypes"], json!(["Ingress"]));
    for (k, v) in spec["podSelector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&ds["spec"]["template"]["metadata"]["labels"][k], v, "{k}");
    }
    let rules = spec["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{spec}");
    assert_eq!(
        rules[0]["ports"],
        json!([{"port": "proxy", "protocol": "TCP"}])
    );
    let port_name = &ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"];
    assert_eq!(port_name, "proxy");
    let api = find(&objects, "Deployment", None);
    assert_eq!(
        rules[0]["from"],
        json!([
            {"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "In", "values": ["capi-system", "caaph-system"]}]}},
            {"podSelector": {"matchLabels": api["spec"]["selector"]["matchLabels"]}},
            {"namespaceSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "magnum-capi"}},
             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "cluster-autoscaler"}}},
            {"ipBlock": {"cidr": "192.0.2.0/24"}},
        ])
    );
    // By default: the Cluster API Operator's namespaces of the providers that read workload
    // clusters (not CAPO's: it never does).
    let default = chart::objects(&render(&json!({"apiProxy": {"enabled": true}})));
    let np = find(&default, "NetworkPolicy", Some("magnum-capi-api-proxy"));
    assert_eq!(
        np["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!([
            "capi-system",
            "capi-kubeadm-bootstrap-system",
            "capi-kubeadm-control-plane-system",
            "caaph-system"
        ])
    );
    // (The service's namespaces carry `app.kubernetes.io/managed-by: magnum-capi`: the render
    // snapshots pin it, e.g. snapshots/it__render__autoscaling.snap.)
}

fn objects_of_default_namespace() -> Value {
    find(
        &objects(&render(&json!({"namespace": {"create": true}}))),
        "Namespace",
        None,
    )
    .clone()
}

/// The migration runs once, as a hook before the release's replicas start or are replaced, with
/// only the database (its Secret a hook too, so it exists before the Job).
#[test]
fn migrations_are_a_pre_install_and_pre_upgrade_job_not_the_replicas() {
    let objects = objects(&render(&every_option()));
    let job = find(&objects, "Job", Some("magnum-capi-migrate"));
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"],
        "pre-install,pre-upgrade"
    );
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"], json!(["migrate"]));
    assert_eq!(
        job["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );
    let db_secret = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "MAGNUM_CAPI__DATABASE__URL")
        .unwrap()["valueFrom"]["secretKeyRef"]["name"]
        .clone();
    let secret = find(&objects, "Secret", db_secret.as_str());
    let hook: i64 = secret["metadata"]["annotations"]["helm.sh/hook-weight"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let job_weight: i64 = job["metadata"]["annotations"]["helm.sh/hook-weight"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(hook < job_weight, "the Secret before the Job");
    assert!(
        secret["metadata"]["annotations"]["helm.sh/hook"]
            .as_str()
            .unwrap()
            .contains("pre-install")
    );
    // The replicas' image is the Job's: the same release migrates and serves.
    let d = find(&objects, "Deployment", None);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        c["image"]
    );
    assert_eq!(c["image"], "registry.internal/magnum-capi:1.2.3");
}

#[test]
fn values_that_cannot_work_are_refused_by_the_render_naming_them() {
    for (values, needle) in [
        (
            json!({"sealKeys": {"previous": [KEY_A]}}),
            "sealKeys.previous needs sealKeys.current",
        ),
        (
            json!({"managementClusters": [{"name": "east"}]}),
            "managementClusters east: a kubeconfig or an existingSecret is required",
        ),
        (
            json!({"managementClusters": [{"kubeconfig": "x"}]}),
            "every entry needs a name",
        ),
        (
            json!({"keystoneRegistration": {"enabled": true}}),
            "keystoneRegistration.endpoints.public is required",
        ),
        (
            json!({"keystone": {"authUrl": ""}}),
            "keystone.authUrl is required",
        ),
    ] {
        let err = try_render(&values).expect_err(&values.to_string());
        assert!(err.contains(needle), "{values}: {err}");
    }
}

/// The generated files of a plain-manifest directory (not its values or kustomization).
fn generated_files(dir: &std::path::Path) -> BTreeMap<String, String> {
    let mut have = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") && name != "values.yaml" && name != "kustomization.yaml" {
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            have.insert(name, text);
        }
    }
    have
}

/// deploy/kubernetes is the chart rendered with deploy/kubernetes/values.yaml (regenerate with
/// deploy/kubernetes/generate.sh), and its kustomization lists exactly those files.
#[test]
fn the_plain_manifests_are_the_charts_render() {
    let dir = chart::root().join("deploy/kubernetes");
    let want = chart::plain_manifests("deploy/kubernetes/values.yaml");
    let have = generated_files(&dir);
    assert_eq!(
        have.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "run deploy/kubernetes/generate.sh"
    );
    for (name, text) in &want {
        assert!(
            have[name] == *text,
            "deploy/kubernetes/{name} is not the chart's render: run deploy/kubernetes/generate.sh"
        );
    }
    let k: Value =
        yaml_serde::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    let listed: Vec<&str> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(listed, want.keys().map(String::as_str).collect::<Vec<_>>());
}

/// deploy/kubernetes-api-proxy is deploy/kubernetes with `magnum-capi api-proxy` (its
/// NetworkPolicy included): the chart's templates that the overlay's values add as resources,
/// those they change as patches, and nothing else (regenerate with
/// deploy/kubernetes/generate.sh).
#[test]
fn the_api_proxy_overlay_is_the_charts_render() {
    let dir = chart::root().join("deploy/kubernetes-api-proxy");
    let want = chart::overlay_manifests(
        "deploy/kubernetes/values.yaml",
        "deploy/kubernetes-api-proxy/values.yaml",
    );
    let files: BTreeMap<String, String> = serde_json::from_value(want["files"].clone()).unwrap();
    assert_eq!(
        generated_files(&dir),
        files,
        "run deploy/kubernetes/generate.sh"
    );
    let proxy = objects(&BTreeMap::from([(
        "api-proxy.yaml".to_string(),
        files["api-proxy.yaml"].clone(),
    )]));
    for kind in ["DaemonSet", "Service", "NetworkPolicy"] {
        find(&proxy, kind, Some("magnum-capi-api-proxy"));
    }
    let k: Value =
        yaml_serde::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    let mut resources = vec![json!("../kubernetes")];
    resources.extend(want["resources"].as_array().unwrap().iter().cloned());
    assert_eq!(k["resources"], json!(resources));
    assert_eq!(
        want["patches"],
        json!(["configmap.yaml", "deployment.yaml", "namespace.yaml"])
    );
    let patches: Vec<Value> = want["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| json!({"path": p}))
        .collect();
    assert_eq!(k["patches"], json!(patches));
}

/// A release is one version everywhere: the crate's (`cargo pkgid`), the chart's `version` and
/// `appVersion` (the image tag the chart deploys by default), and an entry of CHANGELOG.md.
#[test]
fn the_charts_version_is_the_services() {
    let chart: Value = yaml_serde::from_str(
        &std::fs::read_to_string(chart::root().join(chart::CHART).join("Chart.yaml")).unwrap(),
    )
    .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["appVersion"], version);
    assert_eq!(chart["version"], version);
    let changelog = std::fs::read_to_string(chart::root().join("CHANGELOG.md")).unwrap();
    assert!(
        changelog
            .lines()
            .any(|l| l.starts_with(&format!("## [{version}] - "))),
        "CHANGELOG.md has no entry for {version}"
    );
}
