//! The deployment artifacts: the Kubernetes manifests of deploy/kubernetes (the Helm chart's
//! render, tests/it/chart.rs) parsed into k8s-openapi types (RBAC derived from
//! `capi::kinds::ALL` and the driver's verbs, probes, replicas, selectors, the migration Job),
//! the Cluster API Operator manifests of deploy/capi-operator, the systemd unit, and the
//! Containerfile through `.ci/containerfile-check.sh`. No cluster, registry or systemd is
//! involved.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Namespace, Probe, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use magnum_capi::capi::access::DRIVER_VERBS;
use magnum_capi::capi::kinds;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// One single-document manifest as a typed object.
fn load<T: DeserializeOwned>(rel: &str) -> T {
    yaml_serde::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every document of a (multi-document) YAML file.
fn documents(rel: &str) -> Vec<Value> {
    let text = read(rel);
    yaml_serde::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn yaml_files(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect()
}

/// The `resources` of a kustomization.yaml.
fn kustomize_resources(dir: &str) -> Vec<String> {
    let k: Value = load(&format!("{dir}/kustomization.yaml"));
    k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// deploy/kubernetes

const K8S: &str = "deploy/kubernetes";
const NAMESPACE: &str = "magnum-capi";
const CONFIG: &str = "/etc/magnum-capi/magnum-capi.toml";

fn k8s<T: DeserializeOwned>(file: &str) -> T {
    load(&format!("{K8S}/{file}"))
}

fn deployment() -> Deployment {
    k8s("deployment.yaml")
}

fn pod_labels(d: &Deployment) -> BTreeMap<String, String> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap()
}

/// `selector` is non-empty and every one of its labels is on the Deployment's pods.
fn selects_the_pods(what: &str, selector: &BTreeMap<String, String>) {
    let pods = pod_labels(&deployment());
    assert!(!selector.is_empty(), "{what} selects nothing");
    for (k, v) in selector {
        assert_eq!(
            pods.get(k),
            Some(v),
            "{what} selects {k}={v}, the pods have {pods:?}"
        );
    }
}

fn pod_spec(d: &Deployment) -> &k8s_openapi::api::core::v1::PodSpec {
    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn container<'a>(d: &'a Deployment, name: &str) -> &'a Container {
    pod_spec(d)
        .containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn migrate_job_container() -> Container {
    let job: Job = k8s("job-migrate.yaml");
    job.spec.unwrap().template.spec.unwrap().containers[0].clone()
}

#[test]
fn the_kustomization_lists_every_manifest_and_each_names_the_namespace() {
    let listed: BTreeSet<String> = kustomize_resources(K8S).into_iter().collect();
    let mut files = yaml_files(K8S);
    files.remove("kustomization.yaml");
    // The chart's values the manifests are rendered with (deploy/kubernetes/generate.sh).
    files.remove("values.yaml");
    assert_eq!(listed, files, "kustomization.yaml resources vs the files");

    let ns: Namespace = k8s("namespace.yaml");
    assert_eq!(ns.metadata.name.as_deref(), Some(NAMESPACE));
    let sa: ServiceAccount = k8s("serviceaccount.yaml");
    assert_eq!(sa.metadata.namespace.as_deref(), Some(NAMESPACE));
    for file in &files {
        let v: Value = k8s(file);
        if !crate::common::chart::CLUSTER_SCOPED.contains(&v["kind"].as_str().unwrap_or_default()) {
            assert_eq!(v["metadata"]["namespace"], NAMESPACE, "{file}");
        }
    }
}

/// Names of the `Gvk` constants of src/capi/mod.rs's `kinds` module, and those `ALL` lists.
fn kinds_module_constants() -> (BTreeSet<String>, BTreeSet<String>) {
    let text = read("src/capi/mod.rs");
    let module = &text[text.find("pub mod kinds {").unwrap()..];
    let module = &module[..module.find("\n}\n").unwrap()];
    let declared = module
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": Gvk ="))
        .map(|(name, _)| name.to_string())
        .collect();
    let all = &module[module.find("pub const ALL").unwrap()..];
    let all = &all[all.find("= [").unwrap() + 3..all.find("];").unwrap()];
    let listed = all
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    (declared, listed)
}

#[test]
fn kinds_all_is_every_kind_the_driver_reads_or_writes() {
    let (declared, listed) = kinds_module_constants();
    assert_eq!(
        declared, listed,
        "capi::kinds::ALL lists every Gvk constant"
    );
    assert_eq!(listed.len(), kinds::ALL.len());
    let all: BTreeSet<&str> = kinds::ALL.iter().map(|g| g.1).collect();
    assert_eq!(all.len(), kinds::ALL.len(), "no kind twice");
    // Whatever the built-in templates render is among them.
    for entry in std::fs::read_dir(root().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for kind in text.lines().filter_map(|l| l.strip_prefix("kind: ")) {
            assert!(
                all.contains(kind.trim()),
                "{} renders {kind}, which capi::kinds::ALL lacks",
                path.display()
            );
        }
    }
    // And the verbs table covers exactly them.
    let table: BTreeSet<&str> = DRIVER_VERBS.iter().map(|(g, _)| g.1).collect();
    assert_eq!(table, all, "DRIVER_VERBS vs capi::kinds::ALL");
}

type Grant = (String, String, String);

/// (apiGroup, resource, verb) the driver needs: the verbs of `capi::access::DRIVER_VERBS` on
/// the kinds of `capi::kinds::ALL`, mapped to their resources by the rule the driver itself
/// uses (`capi::apply::resource`) — what `magnum-capi check` asks the management cluster about.
fn required() -> BTreeSet<Grant> {
    let role = magnum_capi::config::CapiConfig::default().autoscaler_cluster_role;
    magnum_capi::capi::access::required(&role)
        .into_iter()
        .filter(|g| g.name.is_none())
        .map(|g| (g.group, g.resource, g.verb))
        .collect()
}

/// The one named grant: `bind` on the ClusterRole the autoscalers' RoleBindings refer to.
fn named_grants(role: &ClusterRole) -> Vec<(String, String, String, Vec<String>)> {
    role.rules
        .iter()
        .flatten()
        .filter_map(|r| {
            let names = r.resource_names.clone()?;
            Some((
                r.api_groups.clone().unwrap_or_default().join(","),
                r.resources.clone().unwrap_or_default().join(","),
                r.verbs.join(","),
                names,
            ))
        })
        .collect()
}

fn granted(role: &ClusterRole) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in role
        .rules
        .iter()
        .flatten()
        .filter(|r| r.resource_names.is_none())
    {
        assert!(
            rule.non_resource_urls.is_none(),
            "{rule:?}: the driver calls no URL"
        );
        let groups = rule.api_groups.clone().unwrap_or_default();
        let resources = rule.resources.clone().unwrap_or_default();
        for g in &groups {
            for r in &resources {
                for v in &rule.verbs {
                    assert!(g != "*" && r != "*" && v != "*", "no wildcards: {rule:?}");
                    out.insert((g.clone(), r.clone(), v.clone()));
                }
            }
        }
    }
    out
}

#[test]
fn rbac_grants_exactly_what_the_driver_does() {
    let role: ClusterRole = k8s("clusterrole.yaml");
    let need = required();
    let have = granted(&role);
    let missing: Vec<_> = need.difference(&have).collect();
    let extra: Vec<_> = have.difference(&need).collect();
    assert!(missing.is_empty(), "the ClusterRole lacks {missing:?}");
    assert!(
        extra.is_empty(),
        "the ClusterRole grants more than the driver uses: {extra:?}"
    );
    // No verb that lets the account grant itself more than it holds; `bind` only on the
    // ClusterRole the autoscalers are bound to, which the kustomization installs.
    for (_, resource, verb) in &have {
        assert!(
            !["escalate", "bind", "impersonate"].contains(&verb.as_str()),
            "{resource}: {verb}"
        );
    }
    let autoscaler_role = magnum_capi::config::CapiConfig::default().autoscaler_cluster_role;
    assert_eq!(
        named_grants(&role),
        [(
            "rbac.authorization.k8s.io".to_string(),
            "clusterroles".to_string(),
            "bind".to_string(),
            vec![autoscaler_role.clone()]
        )]
    );
    let installed: ClusterRole = k8s("clusterrole-autoscaler.yaml");
    assert_eq!(
        installed.metadata.name.as_deref(),
        Some(autoscaler_role.as_str())
    );
    let scales = granted(&installed);
    for verb in ["get", "update", "patch"] {
        assert!(
            scales.contains(&(
                "cluster.x-k8s.io".into(),
                "machinedeployments/scale".into(),
                verb.into()
            )),
            "the autoscaler's ClusterRole lacks machinedeployments/scale {verb}"
        );
    }
    // The plural rule is kube's: spot-check the irregular one.
    assert!(need.contains(&(
        "addons.cluster.x-k8s.io".into(),
        "helmchartproxies".into(),
        "create".into()
    )));

    let binding: ClusterRoleBinding = k8s("clusterrolebinding.yaml");
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(Some(binding.role_ref.name), role.metadata.name);
    let subjects = binding.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    let sa: ServiceAccount = k8s("serviceaccount.yaml");
    assert_eq!(Some(&subjects[0].name), sa.metadata.name.as_ref());
    assert_eq!(subjects[0].namespace.as_deref(), Some(NAMESPACE));
    let pod = deployment().spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name, sa.metadata.name);
    assert_ne!(pod.automount_service_account_token, Some(false));
}

fn http_get(probe: Option<&Probe>, what: &str) -> (String, IntOrString) {
    let get = probe
        .unwrap_or_else(|| panic!("no {what}"))
        .http_get
        .as_ref()
        .unwrap_or_else(|| panic!("{what} is not an HTTP GET"));
    (get.path.clone().unwrap_or_default(), get.port.clone())
}

#[test]
fn the_deployment_runs_two_probed_non_root_replicas() {
    let d = deployment();
    let spec = d.spec.as_ref().unwrap();
    assert!(
        spec.replicas.unwrap_or(1) >= 2,
        "replicas {:?}",
        spec.replicas
    );
    selects_the_pods(
        "the Deployment",
        spec.selector.match_labels.as_ref().unwrap(),
    );
    let http = IntOrString::String("http".into());

    let c = container(&d, "magnum-capi");
    let port = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("http"))
        .expect("a port named http");
    assert_eq!(port.container_port, 9511);
    assert_eq!(
        http_get(c.liveness_probe.as_ref(), "liveness probe"),
        ("/healthz".into(), http.clone())
    );
    assert_eq!(
        http_get(c.startup_probe.as_ref(), "startup probe"),
        ("/healthz".into(), http.clone())
    );
    assert_eq!(
        http_get(c.readiness_probe.as_ref(), "readiness probe"),
        ("/readyz".into(), http)
    );
    assert_eq!(
        c.args.as_deref().unwrap(),
        ["serve", "--config", CONFIG],
        "the image's default command, spelled out"
    );
    // The probes reach the pod's address: the listener must not be loopback.
    let bind = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "MAGNUM_CAPI__HTTP__BIND")
        .and_then(|e| e.value.as_deref())
        .expect("MAGNUM_CAPI__HTTP__BIND");
    let bind: std::net::SocketAddr = bind.parse().unwrap();
    assert_eq!(bind.port(), 9511);
    assert!(!bind.ip().is_loopback());

    // The replicas do not migrate: the Job does, once (a Helm pre-install/pre-upgrade hook; in
    // the plain manifests, a Job `kubectl apply` runs).
    assert!(
        pod_spec(&d).init_containers.is_none(),
        "no init container: the migration is a Job"
    );
    let job: Job = k8s("job-migrate.yaml");
    let migrate = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(migrate.args.as_deref().unwrap(), ["migrate"]);
    assert_eq!(migrate.image, c.image);

    let pod = spec.template.spec.as_ref().unwrap();
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    // The image's numeric USER.
    let user = read("Containerfile")
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .map(|u| u.split(':').next().unwrap().parse::<i64>().unwrap())
        .expect("the Containerfile's USER");
    assert_eq!(psc.run_as_user, Some(user));
    assert!(read("Containerfile").lines().any(|l| l == "EXPOSE 9511"));
    let job_container = migrate_job_container();
    for c in pod.containers.iter().chain(std::iter::once(&job_container)) {
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        let drop = sc.capabilities.as_ref().unwrap().drop.as_deref().unwrap();
        assert_eq!(drop, ["ALL"], "{}", c.name);
        let res = c.resources.as_ref().unwrap();
        for (what, set) in [("requests", &res.requests), ("limits", &res.limits)] {
            let memory = set.as_ref().and_then(|r| r.get("memory"));
            assert!(memory.is_some(), "{}: no memory {what}", c.name);
        }
    }
    // The configuration comes from the ConfigMap, mounted read-only where --config points; the
    // key ring from its Secret, readable by the pod's group only.
    let mounted = |path: &str| {
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == path)
            .unwrap_or_else(|| panic!("nothing mounted at {path}"));
        assert_eq!(mount.read_only, Some(true), "{path}");
        pod.volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .unwrap()
            .clone()
    };
    let config = mounted("/etc/magnum-capi");
    assert_eq!(
        config.config_map.as_ref().map(|m| m.name.as_str()),
        Some("magnum-capi"),
        "the configuration is the ConfigMap"
    );
    let keys = mounted("/etc/magnum-capi/seal-keys");
    let secret = keys.secret.as_ref().expect("the key ring is a Secret");
    assert_eq!(secret.secret_name.as_deref(), Some("magnum-capi-seal-keys"));
    assert_eq!(secret.default_mode, Some(0o440));
    assert_eq!(psc.fs_group, Some(user), "the files' group is the user's");
}

#[test]
fn the_pdb_and_the_service_select_the_deployments_pods() {
    let pdb: PodDisruptionBudget = k8s("poddisruptionbudget.yaml");
    let spec = pdb.spec.unwrap();
    assert_eq!(spec.min_available, Some(IntOrString::Int(1)));
    assert!(spec.max_unavailable.is_none());
    selects_the_pods(
        "the PodDisruptionBudget",
        spec.selector.unwrap().match_labels.as_ref().unwrap(),
    );
    assert!(
        deployment().spec.unwrap().replicas.unwrap() > 1,
        "minAvailable 1 with one replica would block every drain"
    );

    let svc: Service = k8s("service.yaml");
    let spec = svc.spec.unwrap();
    selects_the_pods("the Service", spec.selector.as_ref().unwrap());
    let ports: Vec<(Option<&str>, i32, Option<&IntOrString>)> = spec
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| (p.name.as_deref(), p.port, p.target_port.as_ref()))
        .collect();
    let named = |n: &str| IntOrString::String(n.into());
    assert_eq!(
        ports,
        [
            (Some("http"), 9511, Some(&named("http"))),
            (Some("metrics"), 9512, Some(&named("metrics")))
        ]
    );
}

#[test]
fn the_servicemonitor_scrapes_metrics_from_the_service() {
    let sm: Value = k8s("servicemonitor.yaml");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["kind"], "ServiceMonitor");
    let svc: Service = k8s("service.yaml");
    let svc_labels = svc.metadata.labels.unwrap();
    let selector = sm["spec"]["selector"]["matchLabels"].as_object().unwrap();
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(svc_labels.get(k).map(String::as_str), v.as_str(), "{k}");
    }
    let endpoints = sm["spec"]["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0]["path"], "/metrics");
    // The endpoint's port leads (Service port → container port) to the listener the Deployment
    // opens with `[http] metrics_bind`, which answers without a token — not to the API port,
    // whose /metrics is a 401 for a scraper.
    let port_name = endpoints[0]["port"].as_str().unwrap();
    let svc_port = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(port_name))
        .unwrap_or_else(|| panic!("the Service has no port {port_name}"));
    let d = deployment();
    let c = container(&d, "magnum-capi");
    let container_port = c
        .ports
        .iter()
        .flatten()
        .find(|p| match &svc_port.target_port {
            Some(IntOrString::String(n)) => p.name.as_deref() == Some(n.as_str()),
            Some(IntOrString::Int(n)) => p.container_port == *n,
            None => p.container_port == svc_port.port,
        })
        .expect("the Service's target port is a port of the container")
        .container_port;
    let metrics_bind: std::net::SocketAddr = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "MAGNUM_CAPI__HTTP__METRICS_BIND")
        .and_then(|e| e.value.as_deref())
        .expect("MAGNUM_CAPI__HTTP__METRICS_BIND")
        .parse()
        .unwrap();
    assert_eq!(i32::from(metrics_bind.port()), container_port);
    assert!(
        !metrics_bind.ip().is_loopback(),
        "Prometheus reaches the pod's address"
    );
    assert!(
        sm["spec"].get("namespaceSelector").is_none(),
        "same namespace as the Service"
    );
}

// ---------------------------------------------------------------------------------------------
// deploy/capi-operator

const OPERATOR: &str = "operator.cluster.x-k8s.io/v1alpha2";

/// (kind, namespace, name, version) of the providers the driver needs, as README.md and
/// devstack/settings pin them.
const PROVIDERS: [(&str, &str, &str, &str); 5] = [
    ("CoreProvider", "capi-system", "cluster-api", "v1.14.0"),
    (
        "BootstrapProvider",
        "capi-kubeadm-bootstrap-system",
        "kubeadm",
        "v1.14.0",
    ),
    (
        "ControlPlaneProvider",
        "capi-kubeadm-control-plane-system",
        "kubeadm",
        "v1.14.0",
    ),
    (
        "InfrastructureProvider",
        "capo-system",
        "openstack",
        "v0.14.7",
    ),
    ("AddonProvider", "caaph-system", "helm", "v0.6.4"),
];

#[test]
fn the_operator_installs_the_pinned_providers_into_their_namespaces() {
    let dir = "deploy/capi-operator/online";
    let listed: BTreeSet<String> = kustomize_resources(dir).into_iter().collect();
    let mut files = yaml_files(dir);
    files.remove("kustomization.yaml");
    assert_eq!(listed, files);

    let namespaces: BTreeSet<String> = documents(&format!("{dir}/namespaces.yaml"))
        .into_iter()
        .map(|d| {
            let ns: Namespace = serde_json::from_value(d).unwrap();
            ns.metadata.name.unwrap()
        })
        .collect();
    let providers: Vec<(String, String, String, String)> =
        documents(&format!("{dir}/providers.yaml"))
            .iter()
            .map(|p| {
                assert_eq!(p["apiVersion"], OPERATOR);
                assert!(
                    p["spec"].get("fetchConfig").is_none(),
                    "online: the defaults"
                );
                let s = |v: &Value| v.as_str().unwrap().to_string();
                (
                    s(&p["kind"]),
                    s(&p["metadata"]["namespace"]),
                    s(&p["metadata"]["name"]),
                    s(&p["spec"]["version"]),
                )
            })
            .collect();
    let want: Vec<_> = PROVIDERS
        .iter()
        .map(|(k, ns, n, v)| (k.to_string(), ns.to_string(), n.to_string(), v.to_string()))
        .collect();
    assert_eq!(providers, want);
    let used: BTreeSet<String> = want.iter().map(|p| p.1.clone()).collect();
    assert_eq!(namespaces, used, "one namespace per provider, each created");
}

#[test]
fn the_air_gapped_variant_reads_each_provider_from_configmaps_in_its_namespace() {
    let dir = "deploy/capi-operator/air-gapped";
    assert_eq!(kustomize_resources(dir), ["../online"]);
    let k: Value = load(&format!("{dir}/kustomization.yaml"));
    let mut seen = Vec::new();
    for p in k["patches"].as_array().unwrap() {
        let patch: Value = yaml_serde::from_str(p["patch"].as_str().unwrap()).unwrap();
        assert_eq!(patch["apiVersion"], OPERATOR);
        let labels = patch["spec"]["fetchConfig"]["selector"]["matchLabels"]
            .as_object()
            .unwrap();
        let label = labels["magnum.openstack.org/provider-components"]
            .as_str()
            .unwrap();
        seen.push((
            patch["kind"].as_str().unwrap().to_string(),
            patch["metadata"]["namespace"].as_str().unwrap().to_string(),
            patch["metadata"]["name"].as_str().unwrap().to_string(),
            label.to_string(),
        ));
    }
    // The selector values are the cache labels the devstack plugin stores each release under.
    let want = [
        "cluster-api",
        "bootstrap-kubeadm",
        "control-plane-kubeadm",
        "infrastructure-openstack",
        "addon-helm",
    ];
    let want: Vec<_> = PROVIDERS
        .iter()
        .zip(want)
        .map(|((k, ns, n, _), l)| (k.to_string(), ns.to_string(), n.to_string(), l.to_string()))
        .collect();
    assert_eq!(seen, want);
}

// ---------------------------------------------------------------------------------------------
// deploy/systemd

/// `(section, key, value)` of a systemd unit, in order (keys may repeat).
fn unit_entries(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
            continue;
        }
        assert!(!line.ends_with('\\'), "line {}: no continuations", n + 1);
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("line {}: not key=value: {line}", n + 1));
        assert!(!section.is_empty(), "line {}: outside a section", n + 1);
        out.push((section.clone(), k.trim().to_string(), v.trim().to_string()));
    }
    out
}

#[test]
fn the_systemd_unit_migrates_then_serves_hardened() {
    let entries = unit_entries(&read("deploy/systemd/magnum-capi.service"));
    let all = |section: &str, key: &str| -> Vec<String> {
        entries
            .iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.clone())
            .collect()
    };
    let one = |section: &str, key: &str| -> String {
        let v = all(section, key);
        assert_eq!(v.len(), 1, "[{section}] {key}: {v:?}");
        v[0].clone()
    };
    let sections: BTreeSet<&str> = entries.iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(sections, BTreeSet::from(["Install", "Service", "Unit"]));

    assert!(one("Unit", "After").contains("network-online.target"));
    assert!(one("Unit", "Wants").contains("network-online.target"));
    assert_eq!(one("Service", "User"), "magnum-capi");
    assert_eq!(one("Service", "Group"), "magnum-capi");
    let bin = "/usr/local/bin/magnum-capi";
    assert_eq!(
        one("Service", "ExecStartPre"),
        format!("{bin} migrate --config {CONFIG}")
    );
    // What the image and devstack's run_process start, too.
    assert_eq!(
        one("Service", "ExecStart"),
        format!("{bin} serve --config {CONFIG}")
    );
    assert_eq!(one("Service", "Restart"), "on-failure");
    assert_eq!(one("Install", "WantedBy"), "multi-user.target");
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallArchitectures", "native"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
    ] {
        assert_eq!(one("Service", key), value, "[Service] {key}");
    }
    let families = one("Service", "RestrictAddressFamilies");
    for f in ["AF_INET", "AF_INET6", "AF_UNIX"] {
        assert!(families.split(' ').any(|x| x == f), "{f} in {families}");
    }
    assert!(all("Service", "SystemCallFilter").contains(&"@system-service".to_string()));
}

// ---------------------------------------------------------------------------------------------
// Containerfile

fn containerfile_check(containerfile: &Path) -> (bool, String) {
    let out = Command::new("bash")
        .arg(root().join(".ci/containerfile-check.sh"))
        .arg(env!("CARGO_BIN_EXE_magnum-capi"))
        .env("CONTAINERFILE", containerfile)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn the_containerfile_check_passes_and_catches_what_it_is_for() {
    let (ok, text) = containerfile_check(&root().join("Containerfile"));
    assert!(ok, "{text}");
    assert!(
        text.contains("links only"),
        "the binary's libraries were checked: {text}"
    );

    let original = read("Containerfile");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("Containerfile");
    for (from, to, needle) in [
        ("USER 10001:10001", "USER root", "runs as root"),
        ("USER 10001:10001\n", "", "sets no USER"),
        (
            "COPY etc/magnum-capi.toml.example",
            "ADD https://example.com/magnum-capi.toml",
            "ADD of a URL",
        ),
        ("rust:1.95.0-slim-bookworm", "rust:latest", "version tag"),
        (
            "rust:1.95.0-slim-bookworm",
            "rust:1.80.0-slim-bookworm",
            "rust-version",
        ),
        (" --no-default-features", "", "--no-default-features"),
        (
            "--no-install-recommends ca-certificates",
            "--no-install-recommends ca-certificates curl",
            "exactly ca-certificates",
        ),
        (
            "COPY benches benches",
            "COPY tests tests",
            "excluded by .dockerignore",
        ),
        ("COPY benches benches", "COPY bench bench", "does not exist"),
        ("EXPOSE 9511", "EXPOSE 8080", "EXPOSE 9511"),
        (
            "FROM docker.io/library/debian:bookworm-slim",
            "FROM build",
            "fresh base",
        ),
    ] {
        assert!(original.contains(from), "{from}");
        std::fs::write(&path, original.replacen(from, to, 1)).unwrap();
        let (ok, text) = containerfile_check(&path);
        assert!(!ok, "{from} → {to} passed:\n{text}");
        assert!(
            text.contains(needle),
            "{from} → {to}: {needle} not in\n{text}"
        );
    }
}

/// Every metric name an expression selects (its vector and matrix selectors).
fn selected_metrics(expr: &promql_parser::parser::Expr, out: &mut BTreeSet<String>) {
    use promql_parser::parser::Expr;
    match expr {
        Expr::Aggregate(a) => {
            selected_metrics(&a.expr, out);
            if let Some(p) = &a.param {
                selected_metrics(p, out);
            }
        }
        Expr::Unary(u) => selected_metrics(&u.expr, out),
        Expr::Binary(b) => {
            selected_metrics(&b.lhs, out);
            selected_metrics(&b.rhs, out);
        }
        Expr::Paren(p) => selected_metrics(&p.expr, out),
        Expr::Subquery(s) => selected_metrics(&s.expr, out),
        Expr::VectorSelector(v) => out.extend(v.name.clone()),
        Expr::MatrixSelector(m) => out.extend(m.vs.name.clone()),
        Expr::Call(c) => c.args.args.iter().for_each(|a| selected_metrics(a, out)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// The example alerting rules (deploy/prometheus/alerts.yaml): each expression is valid PromQL
/// and selects only metrics `/metrics` serves (a histogram by its `_bucket`/`_sum`/`_count`),
/// each alert has a `for`, a severity and a summary, and the cluster rules use
/// openstack-exporter's names (rules written for it in front of Magnum keep working).
#[test]
fn the_example_alerts_parse_and_name_only_metrics_we_serve() {
    let text = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yaml")).unwrap();
    let rules: serde_json::Value = yaml_serde::from_str(&text).unwrap();
    let served: BTreeSet<String> = magnum_capi::telemetry::FAMILIES
        .iter()
        .map(|f| f.to_string())
        .chain(
            magnum_capi::telemetry::HISTOGRAMS
                .iter()
                .flat_map(|h| ["_bucket", "_sum", "_count"].map(|s| format!("{h}{s}"))),
        )
        .collect();
    let mut alerts = BTreeSet::new();
    let mut used = BTreeSet::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("an alert name");
            assert!(alerts.insert(alert.to_string()), "{alert} twice");
            let expr = rule["expr"].as_str().expect("expr");
            let parsed = promql_parser::parser::parse(expr)
                .unwrap_or_else(|e| panic!("{alert}: {expr}: {e}"));
            let mut names = BTreeSet::new();
            selected_metrics(&parsed, &mut names);
            assert!(!names.is_empty(), "{alert} selects no metric");
            for name in &names {
                assert!(served.contains(name), "{alert}: {name} is not served");
            }
            used.extend(names);
            assert!(rule["for"].is_string(), "{alert} has no `for`");
            assert!(
                ["critical", "warning", "info"]
                    .contains(&rule["labels"]["severity"].as_str().unwrap_or("")),
                "{alert}: severity"
            );
            assert!(
                rule["annotations"]["summary"].is_string(),
                "{alert}: summary"
            );
        }
    }
    assert!(
        used.contains("openstack_container_infra_cluster_status"),
        "{used:?}"
    );
}
