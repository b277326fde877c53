//! The devstack plugin outside devstack: the config file `magnum_capi_write_config` writes loads
//! with the service's own loader and says what devstack/settings and devstack's globals say; the
//! pinned versions agree with README.md and the `[capi]` defaults; the download cache, the
//! clusterctl and template arguments. Only bash runs here (no devstack, no network); shellcheck
//! runs in `.ci/run`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use magnum_capi::config::{CapiConfig, Config, DriverKind};
use secrecy::ExposeSecret;
use sqlx::postgres::PgConnectOptions;

type Env = Vec<(String, String)>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `script` after sourcing devstack/settings and devstack/lib/magnum-capi under
/// `set -euo pipefail`, with nothing but PATH and `env` in the environment: no devstack function
/// or global exists, so anything the script needs from devstack must come from `env`.
fn plugin_bash(env: &Env, script: &str) -> Output {
    let full = format!(
        "set -euo pipefail\nsource devstack/settings\nsource devstack/lib/magnum-capi\n{script}"
    );
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(full)
        .current_dir(root())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("bash runs")
}

fn stdout_ok(env: &Env, script: &str) -> String {
    let out = plugin_bash(env, script);
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Devstack's globals as stack.sh has them after lib/keystone and lib/database (http, no tls-proxy),
/// plus what configure_magnum_capi derives from devstack's `database_connection_url`.
fn devstack() -> Env {
    [
        ("DEST", "/opt/stack"),
        ("SERVICE_HOST", "10.0.0.5"),
        ("SERVICE_PROTOCOL", "http"),
        ("KEYSTONE_SERVICE_URI", "http://10.0.0.5/identity"),
        ("SERVICE_PASSWORD", "s3cret"),
        ("SERVICE_PROJECT_NAME", "service"),
        ("SERVICE_DOMAIN_NAME", "Default"),
        ("REGION_NAME", "RegionOne"),
        (
            "MAGNUM_CAPI_DATABASE_URL",
            "postgresql://root:dbpass@127.0.0.1/magnum_capi?client_encoding=utf8",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn with(mut env: Env, overrides: &[(&str, &str)]) -> Env {
    for (k, v) in overrides {
        env.retain(|(key, _)| key != k);
        env.push((k.to_string(), v.to_string()));
    }
    env
}

fn without(mut env: Env, key: &str) -> Env {
    env.retain(|(k, _)| k != key);
    env
}

/// Writes the config file with `env` and loads it with the service's loader (which refuses
/// unknown keys and wrong types) and the checks `serve` makes.
fn render(env: &Env) -> (Config, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("etc/magnum-capi.toml");
    let env = with(env.clone(), &[("OUT", out.to_str().unwrap())]);
    stdout_ok(&env, r#"magnum_capi_write_config "$OUT""#);
    let text = std::fs::read_to_string(&out).unwrap();
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the file holds the service password");
    let cfg = Config::load(Some(&out)).unwrap_or_else(|e| panic!("{e}\n{text}"));
    cfg.validate_for_serve(false)
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    (cfg, text)
}

/// The value of a devstack/settings variable under `env`.
fn setting(env: &Env, name: &str) -> String {
    stdout_ok(env, &format!("printf '%s' \"${name}\""))
}

fn minor(version: &str) -> String {
    let v = version.trim_start_matches('v');
    let mut parts = v.split('.');
    format!("{}.{}", parts.next().unwrap(), parts.next().unwrap())
}

#[test]
fn defaults_give_a_config_the_service_loads() {
    let (cfg, text) = render(&devstack());
    assert_eq!(cfg.http.bind.to_string(), "10.0.0.5:9511");
    let url = cfg.database.url.as_deref().unwrap();
    assert_eq!(url, "postgresql://root:dbpass@127.0.0.1/magnum_capi");
    let pg: PgConnectOptions = url.parse().expect("sqlx accepts the database URL");
    assert_eq!(pg.get_database(), Some("magnum_capi"));
    assert_eq!(pg.get_host(), "127.0.0.1");
    assert!(!cfg.database.migrate_on_start, "stack.sh runs `migrate`");
    assert_eq!(cfg.driver.kind, DriverKind::Capi);

    let ks = &cfg.keystone;
    assert!(ks.active());
    assert_eq!(ks.auth_url.as_deref(), Some("http://10.0.0.5/identity/v3"));
    assert_eq!(ks.username.as_deref(), Some("magnum"));
    assert_eq!(ks.password.as_ref().unwrap().expose_secret(), "s3cret");
    assert_eq!(ks.project_name.as_deref(), Some("service"));
    assert_eq!(ks.user_domain_name, "Default");
    assert_eq!(ks.project_domain_name, "Default");
    assert_eq!(ks.region_name.as_deref(), Some("RegionOne"));
    assert_eq!(ks.interface, "public");
    assert_eq!(ks.cafile, None, "plain http needs no CA");

    let capi = &cfg.capi;
    let defaults = CapiConfig::default();
    assert_eq!(
        capi.kubeconfig.as_deref(),
        Some(Path::new("/etc/magnum-capi/kubeconfig"))
    );
    assert_eq!(
        capi.default_kube_version,
        setting(&devstack(), "MAGNUM_CAPI_KUBE_VERSION")
    );
    assert_eq!(capi.calico_chart_repo, defaults.calico_chart_repo);
    assert_eq!(capi.calico_chart_version, defaults.calico_chart_version);
    assert_eq!(capi.cilium_chart_repo, defaults.cilium_chart_repo);
    assert_eq!(capi.cilium_chart_version, defaults.cilium_chart_version);
    assert_eq!(capi.openstack_chart_repo, defaults.openstack_chart_repo);
    assert_eq!(capi.ccm_chart_version, defaults.ccm_chart_version);
    assert_eq!(
        capi.cinder_csi_chart_version,
        defaults.cinder_csi_chart_version
    );
    assert_eq!(capi.octavia_provider, defaults.octavia_provider);
    assert_eq!(capi.pod_cidr, defaults.pod_cidr);
    // Not the [capi] default: 172.24.0.0/13 holds devstack's FLOATING_RANGE.
    assert_eq!(capi.service_cidr, "10.96.0.0/12");
    assert_eq!(capi.app_cred_expiry_days, 0);
    assert_eq!(capi.cloud_ca_file, None);
    assert_eq!(cfg.openstack.default_boot_volume_size, 0);
    assert_eq!(capi.default_boot_volume_size, 0);
    assert!(!text.contains("client_encoding"), "{text}");
}

#[test]
fn tls_proxy_puts_the_listener_behind_apache_and_trusts_devstacks_ca() {
    let env = with(
        devstack(),
        &[
            ("SERVICE_PROTOCOL", "https"),
            ("KEYSTONE_SERVICE_URI", "https://10.0.0.5/identity"),
            ("MAGNUM_CAPI_TLS_PROXY", "True"),
            ("MAGNUM_CAPI_SERVICE_PROTOCOL", "https"),
            ("SSL_BUNDLE_FILE", "/opt/stack/data/ca-bundle.pem"),
        ],
    );
    let (cfg, _) = render(&env);
    assert_eq!(cfg.http.bind.to_string(), "10.0.0.5:19511");
    assert_eq!(
        cfg.keystone.auth_url.as_deref(),
        Some("https://10.0.0.5/identity/v3")
    );
    let bundle = Some(Path::new("/opt/stack/data/ca-bundle.pem"));
    assert_eq!(cfg.keystone.cafile.as_deref(), bundle);
    assert_eq!(cfg.capi.cloud_ca_file.as_deref(), bundle);
    // Keystone's catalog keeps the public port: Apache terminates TLS there.
    assert_eq!(
        stdout_ok(&env, "magnum_capi_endpoint_url"),
        "https://10.0.0.5:9511/v1\n"
    );
    assert_eq!(
        stdout_ok(&devstack(), "magnum_capi_endpoint_url"),
        "http://10.0.0.5:9511/v1\n"
    );
}

#[test]
fn local_conf_overrides_reach_the_file() {
    let env = with(
        devstack(),
        &[
            ("MAGNUM_CAPI_SERVICE_HOST", "192.0.2.10"),
            ("MAGNUM_CAPI_SERVICE_PORT", "9600"),
            ("MAGNUM_CAPI_KUBE_VERSION", "v1.34.8"),
            ("MAGNUM_CAPI_CALICO_CHART_VERSION", "v3.30.0"),
            ("MAGNUM_CAPI_CILIUM_CHART_VERSION", "1.18.0"),
            ("MAGNUM_CAPI_CCM_CHART_VERSION", "2.34.1"),
            ("MAGNUM_CAPI_CINDER_CSI_CHART_VERSION", "2.34.2"),
            ("MAGNUM_CAPI_APP_CRED_EXPIRY_DAYS", "30"),
            ("MAGNUM_CAPI_OCTAVIA_PROVIDER", "ovn"),
            ("MAGNUM_CAPI_KUBECONFIG", "/srv/mgmt/kubeconfig"),
            ("MAGNUM_CAPI_SERVICE_USER", "magnum-capi"),
            ("MAGNUM_CAPI_DRIVER_KIND", "simulated"),
            ("MAGNUM_CAPI_POLICY_FILE", "/etc/magnum-capi/policy.yaml"),
            ("MAGNUM_CAPI_BOOT_VOLUME_SIZE", "20"),
            (
                "MAGNUM_CAPI_KEYSTONE_AUTH_URL",
                "http://keystone.example:5000/v3",
            ),
            ("REGION_NAME", "RegionTwo"),
            ("SERVICE_PROJECT_NAME", "services"),
            ("SERVICE_DOMAIN_NAME", "Service"),
        ],
    );
    let (cfg, _) = render(&env);
    assert_eq!(cfg.http.bind.to_string(), "192.0.2.10:9600");
    assert_eq!(cfg.capi.default_kube_version, "v1.34.8");
    assert_eq!(cfg.capi.calico_chart_version, "v3.30.0");
    assert_eq!(cfg.capi.cilium_chart_version, "1.18.0");
    assert_eq!(cfg.capi.ccm_chart_version, "2.34.1");
    assert_eq!(cfg.capi.cinder_csi_chart_version, "2.34.2");
    assert_eq!(cfg.capi.app_cred_expiry_days, 30);
    assert_eq!(cfg.capi.octavia_provider, "ovn");
    assert_eq!(
        cfg.capi.kubeconfig.as_deref(),
        Some(Path::new("/srv/mgmt/kubeconfig"))
    );
    assert_eq!(cfg.capi.default_boot_volume_size, 20);
    assert_eq!(cfg.openstack.default_boot_volume_size, 20);
    assert_eq!(cfg.driver.kind, DriverKind::Simulated);
    assert_eq!(
        cfg.policy.file.as_deref(),
        Some(Path::new("/etc/magnum-capi/policy.yaml"))
    );
    assert_eq!(cfg.keystone.username.as_deref(), Some("magnum-capi"));
    assert_eq!(
        cfg.keystone.auth_url.as_deref(),
        Some("http://keystone.example:5000/v3")
    );
    assert_eq!(cfg.keystone.region_name.as_deref(), Some("RegionTwo"));
    assert_eq!(cfg.keystone.project_name.as_deref(), Some("services"));
    assert_eq!(cfg.keystone.user_domain_name, "Service");
    assert_eq!(cfg.keystone.project_domain_name, "Service");
    assert_eq!(
        stdout_ok(&env, "magnum_capi_endpoint_url"),
        "http://192.0.2.10:9600/v1\n"
    );
}

#[test]
fn ipv6_hosts_are_bracketed() {
    // devstack brackets SERVICE_HOST itself when SERVICE_IP_VERSION=6; a bare override is not.
    let env = with(
        devstack(),
        &[
            ("SERVICE_HOST", "[2001:db8::5]"),
            ("KEYSTONE_SERVICE_URI", "http://[2001:db8::5]/identity"),
        ],
    );
    assert_eq!(render(&env).0.http.bind.to_string(), "[2001:db8::5]:9511");
    assert_eq!(
        stdout_ok(&env, "magnum_capi_endpoint_url"),
        "http://[2001:db8::5]:9511/v1\n"
    );
    let env = with(env, &[("MAGNUM_CAPI_SERVICE_HOST", "2001:db8::7")]);
    assert_eq!(render(&env).0.http.bind.to_string(), "[2001:db8::7]:9511");
}

#[test]
fn passwords_with_toml_and_shell_metacharacters_round_trip() {
    let password = r#"p"a\ss'w$rd # [x] = ü"#;
    let (cfg, _) = render(&with(devstack(), &[("SERVICE_PASSWORD", password)]));
    assert_eq!(
        cfg.keystone.password.as_ref().unwrap().expose_secret(),
        password
    );
}

#[test]
fn missing_or_malformed_inputs_fail_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.toml");
    let fails = |env: Env, needle: &str| {
        let env = with(env, &[("OUT", out.to_str().unwrap())]);
        let o = plugin_bash(&env, r#"magnum_capi_write_config "$OUT""#);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "expected a failure naming {needle}");
        assert!(err.contains(needle), "{err}");
        assert!(!out.exists(), "nothing is written on failure");
    };
    fails(without(devstack(), "SERVICE_PASSWORD"), "SERVICE_PASSWORD");
    fails(
        without(devstack(), "MAGNUM_CAPI_DATABASE_URL"),
        "MAGNUM_CAPI_DATABASE_URL",
    );
    fails(without(devstack(), "SERVICE_HOST"), "SERVICE_HOST");
    fails(
        with(devstack(), &[("MAGNUM_CAPI_APP_CRED_EXPIRY_DAYS", "soon")]),
        "MAGNUM_CAPI_APP_CRED_EXPIRY_DAYS",
    );
    fails(
        with(devstack(), &[("SERVICE_PASSWORD", "line\nbreak")]),
        "control character",
    );
}

#[test]
fn the_loader_rejects_what_a_broken_writer_would_produce() {
    // The checks above mean something only if the loader refuses unknown keys and wrong types.
    let (_, text) = render(&devstack());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        text.replace("[capi]\n", "[capi]\nkube_tag = \"v1\"\n"),
    )
    .unwrap();
    let err = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(err.contains("kube_tag"), "{err}");
    std::fs::write(
        &path,
        text.replace(
            "app_cred_expiry_days = 0",
            "app_cred_expiry_days = \"never\"",
        ),
    )
    .unwrap();
    assert!(Config::load(Some(&path)).is_err());
}

#[test]
fn pinned_versions_match_the_readme_and_the_capi_defaults() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let sentence = readme
        .lines()
        .find(|l| l.starts_with("Targets **Cluster API v"))
        .expect("README.md names the Cluster API version it targets");
    let grab = |marker: &str| -> String {
        let rest =
            &readme[readme.find(marker).unwrap_or_else(|| panic!("{marker}")) + marker.len()..];
        rest[..rest.find("**").unwrap()].to_string()
    };
    let capi_minor = grab("Targets **Cluster API ");
    let capo_minor = grab("**CAPO ");
    assert!(sentence.contains(&capi_minor), "{sentence}");
    assert!(
        readme.contains("Cluster API Addon\nProvider Helm")
            || readme.contains("Cluster API Addon Provider Helm")
    );

    let env = devstack();
    let capi = setting(&env, "MAGNUM_CAPI_CLUSTER_API_VERSION");
    let capo = setting(&env, "MAGNUM_CAPI_CAPO_VERSION");
    assert_eq!(format!("v{}", minor(&capi)), capi_minor, "CAPI {capi}");
    assert_eq!(format!("v{}", minor(&capo)), capo_minor, "CAPO {capo}");
    for name in [
        "MAGNUM_CAPI_CAAPH_VERSION",
        "MAGNUM_CAPI_ORC_VERSION",
        "MAGNUM_CAPI_CERT_MANAGER_VERSION",
        "MAGNUM_CAPI_SONOBUOY_VERSION",
    ] {
        let v = setting(&env, name);
        assert!(
            v.starts_with('v') && v[1..].split('.').count() == 3,
            "{name}={v} is pinned to a patch release"
        );
    }
    let k3s = setting(&env, "MAGNUM_CAPI_K3S_VERSION");
    assert!(k3s.contains("+k3s"), "{k3s}");
    // CAPI v1.14 supports management clusters of Kubernetes v1.33 to v1.36.
    let k3s_minor: u32 = minor(&k3s)[2..].parse().unwrap();
    assert!((33..=36).contains(&k3s_minor), "{k3s}");

    // The workload Kubernetes version: the [capi] default's minor, and that of the CCM/CSI charts
    // (chart 2.33.x is cloud-provider-openstack 1.33).
    let defaults = CapiConfig::default();
    let kube = setting(&env, "MAGNUM_CAPI_KUBE_VERSION");
    assert_eq!(minor(&kube), minor(&defaults.default_kube_version));
    for chart in [
        &defaults.ccm_chart_version,
        &defaults.cinder_csi_chart_version,
    ] {
        assert_eq!(
            minor(chart)[2..],
            minor(&kube)[2..],
            "chart {chart} vs {kube}"
        );
    }
    for (name, default) in [
        (
            "MAGNUM_CAPI_CALICO_CHART_VERSION",
            &defaults.calico_chart_version,
        ),
        (
            "MAGNUM_CAPI_CILIUM_CHART_VERSION",
            &defaults.cilium_chart_version,
        ),
        ("MAGNUM_CAPI_CCM_CHART_VERSION", &defaults.ccm_chart_version),
        (
            "MAGNUM_CAPI_CINDER_CSI_CHART_VERSION",
            &defaults.cinder_csi_chart_version,
        ),
        ("MAGNUM_CAPI_CALICO_CHART_REPO", &defaults.calico_chart_repo),
        ("MAGNUM_CAPI_CILIUM_CHART_REPO", &defaults.cilium_chart_repo),
        (
            "MAGNUM_CAPI_OPENSTACK_CHART_REPO",
            &defaults.openstack_chart_repo,
        ),
    ] {
        assert_eq!(&setting(&env, name), default, "{name}");
    }
    // The image carries the version the template's kube_tag names.
    let image = setting(&env, "MAGNUM_CAPI_IMAGE_URL");
    assert!(image.ends_with(&format!("-{kube}.qcow2")), "{image}");
}

#[test]
fn every_setting_can_be_overridden_from_local_conf() {
    let text = std::fs::read_to_string(root().join("devstack/settings")).unwrap();
    let mut seen = 0;
    for line in text.lines().map(str::trim_start) {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        if !name.starts_with("MAGNUM_CAPI_") || name.contains(' ') {
            continue;
        }
        assert!(
            value.starts_with(&format!("${{{name}:-")),
            "{name} is not overridable: {line}"
        );
        seen += 1;
    }
    assert!(seen > 40, "{seen} settings");
    // Versions feed the URLs at source time, so a version from local.conf moves the URL too.
    let env = with(
        devstack(),
        &[("MAGNUM_CAPI_CLUSTER_API_VERSION", "v1.14.9")],
    );
    assert!(setting(&env, "MAGNUM_CAPI_CLUSTERCTL_URL").contains("/v1.14.9/clusterctl-linux-"));
    let env = with(devstack(), &[("MAGNUM_CAPI_K3S_VERSION", "v1.35.1+k3s2")]);
    assert!(setting(&env, "MAGNUM_CAPI_K3S_BINARY_URL").contains("/v1.35.1%2Bk3s2/"));
}

#[test]
fn the_service_command_is_absolute_and_names_the_config() {
    // devstack's run_process refuses commands without an absolute path.
    assert_eq!(
        stdout_ok(&devstack(), "magnum_capi_service_command"),
        "/usr/local/bin/magnum-capi serve --config /etc/magnum-capi/magnum-capi.toml\n"
    );
}

#[test]
fn the_template_is_public_kubernetes_on_the_external_network() {
    let args = |env: &Env| -> Vec<String> {
        stdout_ok(env, "magnum_capi_template_create_args")
            .lines()
            .map(String::from)
            .collect()
    };
    let pair = |a: &[String], flag: &str| -> String {
        let i = a
            .iter()
            .position(|x| x == flag)
            .unwrap_or_else(|| panic!("{flag} in {a:?}"));
        a[i + 1].clone()
    };
    let a = args(&devstack());
    assert_eq!(a[..4], ["coe", "cluster", "template", "create"]);
    assert!(a.contains(&"--public".to_string()));
    assert!(a.contains(&"--master-lb-enabled".to_string()));
    assert_eq!(pair(&a, "--coe"), "kubernetes");
    assert_eq!(pair(&a, "--external-network"), "public");
    assert_eq!(pair(&a, "--network-driver"), "calico");
    assert_eq!(pair(&a, "--image"), "ubuntu-2404-kube-v1.33.12");
    assert_eq!(pair(&a, "--labels"), "kube_tag=v1.33.12");
    assert_eq!(pair(&a, "--flavor"), "m1.medium");
    assert_eq!(pair(&a, "--master-flavor"), "m1.medium");
    assert_eq!(a.last().unwrap(), "k8s-v1.33.12");

    let a = args(&with(
        devstack(),
        &[
            ("PUBLIC_NETWORK_NAME", "ext-net"),
            ("MAGNUM_CAPI_TEMPLATE_LABELS", "octavia_provider=ovn"),
            ("MAGNUM_CAPI_FLAVOR", "ds4G"),
            ("MAGNUM_CAPI_TEMPLATE_MASTER_LB", "False"),
            ("MAGNUM_CAPI_DNS_NAMESERVER", "192.0.2.53"),
            ("MAGNUM_CAPI_TEMPLATE_NAME", "capi"),
        ],
    ));
    assert_eq!(pair(&a, "--external-network"), "ext-net");
    assert_eq!(
        pair(&a, "--labels"),
        "kube_tag=v1.33.12,octavia_provider=ovn"
    );
    assert_eq!(pair(&a, "--flavor"), "ds4G");
    assert_eq!(pair(&a, "--dns-nameserver"), "192.0.2.53");
    assert!(!a.contains(&"--master-lb-enabled".to_string()));
    assert_eq!(a.last().unwrap(), "capi");
}

#[test]
fn clusterctl_installs_the_pinned_providers_from_a_local_repository() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clusterctl.yaml");
    let env = with(devstack(), &[("OUT", file.to_str().unwrap())]);
    stdout_ok(&env, r#"magnum_capi_write_clusterctl_config "$OUT" /repo"#);
    let doc: serde_json::Value =
        yaml_serde::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let urls: Vec<(String, String, String)> = doc["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap().to_string();
            (s("name"), s("type"), s("url"))
        })
        .collect();
    let expect = [
        (
            "cluster-api",
            "CoreProvider",
            "/repo/cluster-api/v1.14.0/core-components.yaml",
        ),
        (
            "kubeadm",
            "BootstrapProvider",
            "/repo/bootstrap-kubeadm/v1.14.0/bootstrap-components.yaml",
        ),
        (
            "kubeadm",
            "ControlPlaneProvider",
            "/repo/control-plane-kubeadm/v1.14.0/control-plane-components.yaml",
        ),
        (
            "openstack",
            "InfrastructureProvider",
            "/repo/infrastructure-openstack/v0.14.7/infrastructure-components.yaml",
        ),
        (
            "helm",
            "AddonProvider",
            "/repo/addon-helm/v0.6.4/addon-components.yaml",
        ),
    ];
    let expect: Vec<_> = expect
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(urls, expect);
    assert_eq!(doc["cert-manager"]["version"], "v1.21.1");
    assert_eq!(
        doc["cert-manager"]["url"],
        "/repo/cert-manager/v1.21.1/cert-manager.yaml"
    );

    let init = stdout_ok(&devstack(), "magnum_capi_clusterctl_init_args").replace('\n', " ");
    for want in [
        "--core cluster-api:v1.14.0",
        "--bootstrap kubeadm:v1.14.0",
        "--control-plane kubeadm:v1.14.0",
        "--infrastructure openstack:v0.14.7",
        "--addon helm:v0.6.4",
        "--wait-providers",
    ] {
        assert!(init.contains(want), "{want} in {init}");
    }
    // Every provider file comes from the release of its pinned version (metadata.yaml included,
    // which clusterctl's local repositories need).
    let assets = stdout_ok(&devstack(), "_magnum_capi_provider_assets");
    assert!(assets.contains(
        "infrastructure-openstack v0.14.7 metadata.yaml https://github.com/kubernetes-sigs/cluster-api-provider-openstack/releases/download/v0.14.7/metadata.yaml"
    ));
    assert_eq!(
        assets
            .lines()
            .filter(|l| l.contains(" metadata.yaml "))
            .count(),
        5
    );
}

#[test]
fn downloads_come_from_the_cache_and_offline_mode_never_downloads() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache_s = cache.to_str().unwrap();
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("k3s-v1"), "cached").unwrap();
    // A cached file is used as is: this URL would refuse the connection.
    let env = with(devstack(), &[("MAGNUM_CAPI_CACHE_DIR", cache_s)]);
    let got = stdout_ok(&env, "magnum_capi_fetch http://127.0.0.1:9/k3s k3s-v1");
    assert_eq!(got.trim(), cache.join("k3s-v1").to_str().unwrap());

    // Offline, a missing file is an error naming it and its URL.
    let offline = with(env.clone(), &[("MAGNUM_CAPI_OFFLINE", "True")]);
    let o = plugin_bash(&offline, "magnum_capi_fetch http://127.0.0.1:9/x x-v1");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("x-v1") && err.contains("http://127.0.0.1:9/x"),
        "{err}"
    );
    // devstack's own OFFLINE=True means the same.
    let o = plugin_bash(
        &with(env.clone(), &[("OFFLINE", "True")]),
        "magnum_capi_fetch http://127.0.0.1:9/x x-v1",
    );
    assert!(!o.status.success());

    // A file:// URL (a local mirror) is copied into the cache once.
    let src = dir.path().join("image.qcow2");
    std::fs::write(&src, "qcow2").unwrap();
    let url = format!("file://{}", src.display());
    let got = stdout_ok(&env, &format!("magnum_capi_fetch {url} img.qcow2"));
    assert_eq!(std::fs::read_to_string(got.trim()).unwrap(), "qcow2");
    std::fs::remove_file(&src).unwrap();
    stdout_ok(&env, &format!("magnum_capi_fetch {url} img.qcow2"));
}

#[test]
fn the_sonobuoy_job_refuses_an_unknown_mode_before_touching_openstack() {
    let out = Command::new("bash")
        .arg(root().join("devstack/tests/sonobuoy.sh"))
        .current_dir(root())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SONOBUOY_MODE", "everything")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SONOBUOY_MODE"));
}

#[test]
fn ci_runs_shellcheck_over_every_script_before_the_rust_checks() {
    // shellcheck is slow to install and not always present: .ci/run owns it, over every script
    // git knows (new ones included), before the Rust checks.
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let check = ci
        .find("shellcheck \"${scripts[@]}\"")
        .expect(".ci/run runs shellcheck");
    let fmt = ci.find("cargo fmt --check").unwrap();
    assert!(check < fmt, "shellcheck runs before cargo fmt --check");
    assert!(ci.contains("git ls-files"));
    for pattern in [
        ".ci/run",
        "'.ci/*.sh'",
        "devstack/plugin.sh",
        "devstack/settings",
        "'devstack/lib/*'",
        "'devstack/tests/*.sh'",
    ] {
        assert!(ci.contains(pattern), "{pattern}");
    }
}

#[test]
fn providers_install_with_clusterctl_unless_the_operator_is_chosen() {
    assert_eq!(
        stdout_ok(&devstack(), "magnum_capi_provider_install_mode"),
        "clusterctl\n"
    );
    let operator = with(devstack(), &[("MAGNUM_CAPI_PROVIDER_INSTALL", "Operator")]);
    assert_eq!(
        stdout_ok(&operator, "magnum_capi_provider_install_mode"),
        "operator\n"
    );
    let o = plugin_bash(
        &with(devstack(), &[("MAGNUM_CAPI_PROVIDER_INSTALL", "helm")]),
        "magnum_capi_provider_install_mode",
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("MAGNUM_CAPI_PROVIDER_INSTALL"));
    assert!(
        setting(&devstack(), "MAGNUM_CAPI_OPERATOR_URL")
            .ends_with("/cluster-api-operator/releases/download/v0.28.0/operator-components.yaml")
    );
}

/// A cache holding every provider release file `_magnum_capi_provider_assets` names, each with
/// recognisable content, in `dir`/cache; returns label-version-name → content.
fn seeded_cache(env: &Env, dir: &Path) -> BTreeMap<String, String> {
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let mut files = BTreeMap::new();
    for line in stdout_ok(env, "_magnum_capi_provider_assets").lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let name = format!("{}-{}-{}", f[0], f[1], f[2]);
        // Several lines, a leading space and YAML-looking text, as metadata.yaml has.
        let content = format!(
            "# {name}\napiVersion: v1\n  indented: {}\nend: true\n",
            f[3]
        );
        std::fs::write(cache.join(&name), &content).unwrap();
        files.insert(name, content);
    }
    files
}

fn gunzip_base64(b64: &str) -> String {
    use base64::Engine;
    let gz = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &gz).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// Devstack's globals for the operator path: this checkout as the plugin's directory, the cache
/// under `dir` (offline: everything must come from it), `OUT` = `dir`/capi-operator.
fn operator_env(dir: &Path, overrides: &[(&str, &str)]) -> (Env, PathBuf) {
    let out = dir.join("capi-operator");
    let env = with(
        devstack(),
        &[
            ("MAGNUM_CAPI_DIR", root().to_str().unwrap()),
            ("MAGNUM_CAPI_CACHE_DIR", dir.join("cache").to_str().unwrap()),
            ("MAGNUM_CAPI_OFFLINE", "True"),
            ("OUT", out.to_str().unwrap()),
        ],
    );
    (with(env, overrides), out)
}

/// The operator path writes deploy/capi-operator/air-gapped, one ConfigMap per provider from the
/// download cache and the versions of devstack/settings into one directory for
/// `kubectl apply --server-side -k`; then waits for each provider to be Ready.
#[test]
fn the_operator_installs_the_pinned_providers_from_configmaps_of_the_cache() {
    use k8s_openapi::api::core::v1::ConfigMap;

    let dir = tempfile::tempdir().unwrap();
    let (env, out) = operator_env(dir.path(), &[]);
    let cached = seeded_cache(&env, dir.path());
    stdout_ok(&env, r#"magnum_capi_write_operator_kustomization "$OUT""#);

    // The manifests of deploy/capi-operator, unchanged, pinned to what devstack/settings pins.
    for rel in [
        "online/kustomization.yaml",
        "online/namespaces.yaml",
        "online/providers.yaml",
        "air-gapped/kustomization.yaml",
    ] {
        assert_eq!(
            std::fs::read_to_string(out.join(rel)).unwrap(),
            std::fs::read_to_string(root().join("deploy/capi-operator").join(rel)).unwrap(),
            "{rel}"
        );
    }
    let capi = setting(&env, "MAGNUM_CAPI_CLUSTER_API_VERSION");
    let capo = setting(&env, "MAGNUM_CAPI_CAPO_VERSION");
    let caaph = setting(&env, "MAGNUM_CAPI_CAAPH_VERSION");
    let pinned: Vec<(String, String)> = yaml_serde::Deserializer::from_str(
        &std::fs::read_to_string(root().join("deploy/capi-operator/online/providers.yaml"))
            .unwrap(),
    )
    .map(|d| {
        let v = <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap();
        (
            v["kind"].as_str().unwrap().to_string(),
            v["spec"]["version"].as_str().unwrap().to_string(),
        )
    })
    .collect();
    let expected = [
        ("CoreProvider", &capi),
        ("BootstrapProvider", &capi),
        ("ControlPlaneProvider", &capi),
        ("InfrastructureProvider", &capo),
        ("AddonProvider", &caaph),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        pinned, expected,
        "deploy/capi-operator vs devstack/settings"
    );

    // The air-gapped selectors: (namespace, label value) per provider.
    let air: serde_json::Value = yaml_serde::from_str(
        &std::fs::read_to_string(out.join("air-gapped/kustomization.yaml")).unwrap(),
    )
    .unwrap();
    let selectors: BTreeMap<String, String> = air["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let p: serde_json::Value = yaml_serde::from_str(p["patch"].as_str().unwrap()).unwrap();
            (
                p["metadata"]["namespace"].as_str().unwrap().to_string(),
                p["spec"]["fetchConfig"]["selector"]["matchLabels"]
                    ["magnum.openstack.org/provider-components"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(selectors.len(), 5);

    // One ConfigMap per provider, in its namespace, matching its selector; the components
    // gzipped (a release's exceed a ConfigMap's 1 MiB), metadata.yaml verbatim.
    let k: serde_json::Value =
        yaml_serde::from_str(&std::fs::read_to_string(out.join("kustomization.yaml")).unwrap())
            .unwrap();
    let resources: Vec<&str> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(resources[0], "air-gapped");
    assert_eq!(resources.len(), 6);
    for (ns, label) in &selectors {
        let rel = format!("configmaps/{label}.yaml");
        assert!(resources.contains(&rel.as_str()), "{rel}");
        let cm: ConfigMap =
            yaml_serde::from_str(&std::fs::read_to_string(out.join(&rel)).unwrap()).unwrap();
        assert_eq!(cm.metadata.namespace.as_ref(), Some(ns), "{rel}");
        let labels = cm.metadata.labels.clone().unwrap();
        assert_eq!(
            labels.get("magnum.openstack.org/provider-components"),
            Some(label)
        );
        let version = labels["provider.cluster.x-k8s.io/version"].clone();
        assert_eq!(cm.metadata.name, Some(format!("{label}-{version}")));
        assert_eq!(
            cm.metadata.annotations.as_ref().unwrap()["provider.cluster.x-k8s.io/compressed"],
            "true"
        );
        let components_file = match label.as_str() {
            "cluster-api" => "core-components.yaml",
            "bootstrap-kubeadm" => "bootstrap-components.yaml",
            "control-plane-kubeadm" => "control-plane-components.yaml",
            "infrastructure-openstack" => "infrastructure-components.yaml",
            "addon-helm" => "addon-components.yaml",
            other => panic!("{other}"),
        };
        let metadata = &cm.data.as_ref().unwrap()["metadata"];
        assert_eq!(
            metadata,
            &cached[&format!("{label}-{version}-metadata.yaml")]
        );
        let components = &cm.binary_data.as_ref().unwrap()["components"];
        let b64 = serde_json::to_value(components).unwrap();
        assert_eq!(
            gunzip_base64(b64.as_str().unwrap()),
            cached[&format!("{label}-{version}-{components_file}")]
        );
    }

    // The versions of devstack/settings are patched over the pinned ones.
    let patches: Vec<(String, String)> = k["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ops: serde_json::Value =
                serde_json::from_str(p["patch"].as_str().unwrap()).unwrap();
            assert_eq!(ops[0]["op"], "replace");
            assert_eq!(ops[0]["path"], "/spec/version");
            (
                p["target"]["kind"].as_str().unwrap().to_string(),
                ops[0]["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(patches, expected);

    // kubectl's own kustomize, when there is one, builds it into what the operator gets.
    if let Ok(built) = Command::new("kubectl").arg("kustomize").arg(&out).output() {
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let text = String::from_utf8(built.stdout).unwrap();
        let docs: Vec<serde_json::Value> = yaml_serde::Deserializer::from_str(&text)
            .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap())
            .collect();
        let count = |kind: &str| docs.iter().filter(|d| d["kind"] == kind).count();
        assert_eq!((count("Namespace"), count("ConfigMap")), (5, 5));
        for (kind, version) in &expected {
            let p = docs.iter().find(|d| d["kind"] == kind.as_str()).unwrap();
            assert_eq!(&p["spec"]["version"], version.as_str(), "{kind}");
            assert!(p["spec"]["fetchConfig"]["selector"].is_object(), "{kind}");
        }
    }

    // The command lines: one server-side apply of that directory, then a wait per provider.
    assert_eq!(
        stdout_ok(&env, r#"magnum_capi_operator_apply_args "$OUT""#),
        format!(
            "apply\n--server-side\n--force-conflicts\n-k\n{}\n",
            out.display()
        )
    );
    let waits = stdout_ok(&env, "magnum_capi_operator_wait_commands");
    assert_eq!(
        waits.lines().collect::<Vec<_>>(),
        [
            "-n capi-system wait --for=condition=Ready coreprovider/cluster-api --timeout=600s",
            "-n capi-kubeadm-bootstrap-system wait --for=condition=Ready bootstrapprovider/kubeadm --timeout=600s",
            "-n capi-kubeadm-control-plane-system wait --for=condition=Ready controlplaneprovider/kubeadm --timeout=600s",
            "-n capo-system wait --for=condition=Ready infrastructureprovider/openstack --timeout=600s",
            "-n caaph-system wait --for=condition=Ready addonprovider/helm --timeout=600s",
        ]
    );
}

#[test]
fn the_operator_path_follows_version_overrides_and_never_downloads_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (env, out) = operator_env(dir.path(), &[("MAGNUM_CAPI_CAPO_VERSION", "v0.14.9")]);
    // Nothing cached: the error names the file and where it comes from.
    let o = plugin_bash(&env, r#"magnum_capi_write_operator_kustomization "$OUT""#);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cluster-api-v1.14.0-core-components.yaml")
            && err.contains("/cluster-api/releases/download/v1.14.0/core-components.yaml"),
        "{err}"
    );

    seeded_cache(&env, dir.path());
    stdout_ok(&env, r#"magnum_capi_write_operator_kustomization "$OUT""#);
    let k = std::fs::read_to_string(out.join("kustomization.yaml")).unwrap();
    assert!(
        k.contains(r#"{"op": "replace", "path": "/spec/version", "value": "v0.14.9"}"#),
        "{k}"
    );
    let cm = std::fs::read_to_string(out.join("configmaps/infrastructure-openstack.yaml")).unwrap();
    assert!(
        cm.contains("name: infrastructure-openstack-v0.14.9"),
        "{cm}"
    );
    assert!(
        cm.contains("provider.cluster.x-k8s.io/version: v0.14.9"),
        "{cm}"
    );
}
