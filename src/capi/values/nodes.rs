//! Node settings that are not kubeadm's: the template's proxies (systemd drop-ins for containerd
//! and the kubelet, env of the cloud-facing addons), containerd registry mirrors, insecure
//! registries and a private-registry CA (`hosts.toml` files), the API server's audit log, and
//! Nova server groups. Each parser reads only labels and template fields, so a template can be
//! checked before any cluster exists ([`super::check_template`]).

use super::document::{
    AuditLog, HostPathMount, NameValue, NodeFile, NodeSettings, Proxy, Registries, RegistryMirrors,
    ServerGroup, nv,
};
use super::error::ValuesError;
use super::labels::LabelView;
use crate::domain::os_distro::OsDistro;
use crate::domain::spec::Template;

/// Where containerd (with image-builder's `config_path`) reads per-registry settings.
const CERTS_D: &str = "/etc/containerd/certs.d";
/// The private-registry CA on every node.
const REGISTRY_CA_PATH: &str = "/etc/containerd/certs.d/magnum-registry-ca.crt";
/// The proxy drop-ins, and the boot-time script that adds the API endpoint to their NO_PROXY.
const PROXY_DROP_INS: [&str; 2] = [
    "/etc/systemd/system/containerd.service.d/http-proxy.conf",
    "/etc/systemd/system/kubelet.service.d/http-proxy.conf",
];
const NO_PROXY_SCRIPT: &str = "/etc/kubernetes/magnum/no-proxy-api-endpoint.sh";
const AUDIT_POLICY_PATH: &str = "/etc/kubernetes/audit-policy.yaml";
const AUDIT_LOG_DIR: &str = "/var/log/kubernetes/audit";

/// Nova's server-group policies.
pub const SERVER_GROUP_POLICIES: [&str; 4] = [
    "affinity",
    "anti-affinity",
    "soft-affinity",
    "soft-anti-affinity",
];

/// Labels naming the server-group policy (magnum-cluster-api's name).
pub(super) const SERVER_GROUP_LABEL: &[&str] = &["server_group_policies"];
const MIRRORS_LABEL: &[&str] = &["containerd_registry_mirrors"];
const INSECURE_LABEL: &[&str] = &["insecure_registries"];
const REGISTRY_CA_LABEL: &[&str] = &["containerd_registry_ca"];

/// A value that lands in a systemd `Environment=` line, a TOML string and a Helm values
/// template: no whitespace, quotes, backslashes, braces or `%` (systemd specifiers).
fn plain(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Err("must not be empty".into());
    }
    match v.chars().find(|c| {
        !c.is_ascii_graphic() || matches!(c, '"' | '\'' | '\\' | '{' | '}' | '%' | '`' | '$')
    }) {
        None => Ok(()),
        Some(c) => Err(format!("must not contain {c:?}")),
    }
}

/// An `http://` or `https://` URL with a host.
fn http_url(v: &str) -> Result<(), String> {
    plain(v)?;
    let u = url::Url::parse(v).map_err(|e| format!("is not a URL ({e})"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err("must be an http:// or https:// URL".into());
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("has no host".into());
    }
    Ok(())
}

/// A registry as containerd names it: `host` or `host:port`, no scheme or path.
fn registry_host(v: &str) -> Result<(), String> {
    plain(v)?;
    if v.contains("://") || v.contains('/') {
        return Err(format!(
            "{v:?} must be a registry host (host or host:port), without scheme or path"
        ));
    }
    let host = match v.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') => {
            port.parse::<u16>()
                .map_err(|_| format!("{v:?} has an invalid port"))?;
            h
        }
        _ => v,
    };
    let ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'));
    if ok {
        Ok(())
    } else {
        Err(format!("{v:?} is not a registry host"))
    }
}

/// The host (with port) of an http(s) URL, as containerd's `hosts.toml` keys compare them.
fn url_host(u: &str) -> String {
    url::Url::parse(u)
        .ok()
        .and_then(|p| {
            p.host_str().map(|h| match p.port() {
                Some(port) => format!("{h}:{port}"),
                None => h.to_owned(),
            })
        })
        .unwrap_or_default()
}

/// A template proxy field, checked: `None` when unset or empty.
fn proxy_field(name: &str, v: Option<&String>) -> Result<Option<String>, ValuesError> {
    let Some(v) = v.map(|v| v.trim()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    http_url(v).map_err(|e| ValuesError::Invalid(format!("{name} {v:?} is invalid: {e}")))?;
    Ok(Some(v.to_owned()))
}

/// The template's own `no_proxy` entries, checked.
fn no_proxy_entries(t: &Template) -> Result<Vec<String>, ValuesError> {
    t.no_proxy
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            plain(s)
                .map(|()| s.to_owned())
                .map_err(|e| ValuesError::Invalid(format!("no_proxy entry {s:?} is invalid: {e}")))
        })
        .collect()
}

/// The proxy of every node, when the template sets `http_proxy` or `https_proxy`: `no_proxy`
/// completed with `always_direct` (what must never go through a proxy).
pub(super) fn proxy(t: &Template, always_direct: &[String]) -> Result<Option<Proxy>, ValuesError> {
    let http_proxy = proxy_field("http_proxy", t.http_proxy.as_ref())?;
    let https_proxy = proxy_field("https_proxy", t.https_proxy.as_ref())?;
    let mut no_proxy = no_proxy_entries(t)?;
    if http_proxy.is_none() && https_proxy.is_none() {
        return Ok(None);
    }
    for d in always_direct {
        if !no_proxy.contains(d) {
            no_proxy.push(d.clone());
        }
    }
    let no_proxy = no_proxy.join(",");
    let mut env = Vec::new();
    for (upper, lower, v) in [
        ("HTTP_PROXY", "http_proxy", &http_proxy),
        ("HTTPS_PROXY", "https_proxy", &https_proxy),
        ("NO_PROXY", "no_proxy", &Some(no_proxy.clone())),
    ] {
        if let Some(v) = v {
            env.push(nv(upper, v.clone()));
            env.push(nv(lower, v.clone()));
        }
    }
    Ok(Some(Proxy {
        http_proxy,
        https_proxy,
        no_proxy,
        env,
    }))
}

/// The registry labels, checked; the CA is the template's, else the operator's.
pub(super) fn registries(
    view: &LabelView<'_>,
    config_ca: Option<&str>,
) -> Result<(Registries, Option<String>), ValuesError> {
    let mut mirrors: Vec<RegistryMirrors> = Vec::new();
    let pairs = view.list(MIRRORS_LABEL, &[','], |item| {
        let (registry, mirror) = item.split_once('=').ok_or(
            "each entry must be registry=mirror-url, e.g. docker.io=https://mirror.example.com",
        )?;
        registry_host(registry.trim())?;
        http_url(mirror.trim()).map_err(|e| format!("mirror {:?} {e}", mirror.trim()))
    })?;
    for pair in pairs {
        let (registry, mirror) = pair.split_once('=').unwrap_or_default();
        let (registry, mirror) = (registry.trim().to_owned(), mirror.trim().to_owned());
        match mirrors.iter_mut().find(|m| m.registry == registry) {
            Some(m) if !m.mirrors.contains(&mirror) => m.mirrors.push(mirror),
            Some(_) => {}
            None => mirrors.push(RegistryMirrors {
                registry,
                mirrors: vec![mirror],
            }),
        }
    }
    let mut insecure = Vec::new();
    for r in view.list(INSECURE_LABEL, &[','], registry_host)? {
        if !insecure.contains(&r) {
            insecure.push(r);
        }
    }
    let ca = match view.parsed(REGISTRY_CA_LABEL, |v| {
        use base64::Engine as _;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(v)
            .map_err(|_| "must be a base64-encoded PEM certificate bundle".to_owned())?;
        let pem =
            String::from_utf8(pem).map_err(|_| "is not a PEM certificate bundle".to_owned())?;
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err("is not a PEM certificate bundle".into());
        }
        Ok(pem)
    })? {
        Some(pem) => Some(pem),
        None => config_ca
            .map(str::to_owned)
            .filter(|c| !c.trim().is_empty()),
    };
    Ok((
        Registries {
            mirrors,
            insecure,
            ca: ca.is_some(),
        },
        ca,
    ))
}

/// One `[host."…"]` table of a `hosts.toml`.
fn host_entry(url: &str, registries: &Registries) -> String {
    let mut out = format!("[host.\"{url}\"]\n  capabilities = [\"pull\", \"resolve\"]\n");
    if url.starts_with("https://") {
        if registries.insecure.contains(&url_host(url)) {
            out.push_str("  skip_verify = true\n");
        } else if registries.ca {
            out.push_str(&format!("  ca = \"{REGISTRY_CA_PATH}\"\n"));
        }
    }
    out
}

/// containerd `hosts.toml` files: one per registry with mirrors, per insecure registry, and for
/// the `container_infra_prefix` registry when a CA is installed.
fn hosts_files(registries: &Registries, prefix_host: Option<&str>) -> Vec<NodeFile> {
    let mut hosts: Vec<(String, Vec<String>)> = registries
        .mirrors
        .iter()
        .map(|m| (m.registry.clone(), m.mirrors.clone()))
        .collect();
    let mut extra: Vec<&str> = registries.insecure.iter().map(String::as_str).collect();
    if registries.ca {
        extra.extend(prefix_host);
    }
    for r in extra {
        if !hosts.iter().any(|(h, _)| h == r) {
            hosts.push((r.to_owned(), vec![]));
        }
    }
    hosts
        .into_iter()
        .map(|(registry, mirrors)| {
            // docker.io's API lives at registry-1.docker.io.
            let server = match registry.as_str() {
                "docker.io" => "https://registry-1.docker.io".to_owned(),
                r => format!("https://{r}"),
            };
            let mut content = format!("server = \"{server}\"\n");
            if registries.ca && !registries.insecure.contains(&registry) {
                // The registry itself trusts the CA too (system roots are kept).
                content.push_str(&format!("ca = \"{REGISTRY_CA_PATH}\"\n"));
            }
            for m in &mirrors {
                content.push('\n');
                content.push_str(&host_entry(m.trim_end_matches('/'), registries));
            }
            if registries.insecure.contains(&registry) {
                content.push('\n');
                content.push_str(&host_entry(&server, registries));
                // Plain HTTP when the registry does not speak TLS at all.
                content.push('\n');
                content.push_str(&host_entry(&format!("http://{registry}"), registries));
            }
            NodeFile {
                path: format!("{CERTS_D}/{registry}/hosts.toml"),
                owner: "root:root".into(),
                permissions: "0644".into(),
                content,
            }
        })
        .collect()
}

/// The systemd drop-in giving a service the proxy environment.
fn proxy_drop_in(p: &Proxy) -> String {
    let mut out = String::from("[Service]\n");
    for e in &p.env {
        out.push_str(&format!("Environment=\"{}={}\"\n", e.name, e.value));
    }
    out
}

/// Adds the API endpoint's host (known only at boot, from kubeadm's configuration at
/// `kubeadm_config`) to NO_PROXY of the drop-ins: the kubelet must reach the API directly.
fn no_proxy_script(kubeadm_config: &str) -> String {
    let mut s = format!(
        "#!/bin/sh\n\
         set -eu\n\
         ep=$(sed -n -E 's/^[[:space:]]*(controlPlaneEndpoint|apiServerEndpoint):[[:space:]]*\"?([^\"[:space:]]+)\"?.*/\\2/p' \
         {kubeadm_config} 2>/dev/null | head -n 1)\n\
         host=${{ep%:*}}\n\
         [ -n \"$host\" ] || exit 0\n",
    );
    for f in PROXY_DROP_INS {
        s.push_str(&format!(
            "sed -i -E \"s/^(Environment=\\\"(NO_PROXY|no_proxy)=[^\\\"]*)\\\"/\\1,$host\\\"/\" {f}\n"
        ));
    }
    s
}

/// The commands that complete CABPK's `/etc/kubeadm.yml` on Flatcar, where there is no
/// cloud-init Jinja: the node name (the short host name, as cloud-init's `local_hostname`) and
/// the server id from coreos-metadata's environment (`/run/metadata/flatcar`, which the
/// kubeadm unit reads). Only these two variables are substituted: nothing else in the file
/// can be taken for one.
pub const FLATCAR_KUBEADM_COMMANDS: [&str; 3] = [
    "export COREOS_OPENSTACK_HOSTNAME=${COREOS_OPENSTACK_HOSTNAME%%.*}",
    "envsubst '$COREOS_OPENSTACK_HOSTNAME $COREOS_OPENSTACK_INSTANCE_UUID' < /etc/kubeadm.yml > /etc/kubeadm.yml.tmp",
    "mv /etc/kubeadm.yml.tmp /etc/kubeadm.yml",
];

/// What every node gets: files and the commands that apply them.
pub(super) fn node_settings(
    distro: OsDistro,
    proxy: Option<Proxy>,
    registries: Registries,
    registry_ca: Option<String>,
    prefix_host: Option<&str>,
) -> NodeSettings {
    let file = |path: &str, permissions: &str, content: String| NodeFile {
        path: path.to_owned(),
        owner: "root:root".into(),
        permissions: permissions.into(),
        content,
    };
    let mut files = Vec::new();
    let mut pre_kubeadm_commands = Vec::new();
    if distro.ignition() {
        pre_kubeadm_commands.extend(FLATCAR_KUBEADM_COMMANDS.map(str::to_owned));
    }
    if let Some(p) = &proxy {
        // Only the container runtime and the kubelet are proxied, on every distro: Cluster API
        // images install nothing at boot, and a package-manager proxy file would change every
        // proxied cluster's bootstrap (rolling its machines) for no gain.
        for path in PROXY_DROP_INS {
            files.push(file(path, "0644", proxy_drop_in(p)));
        }
        // cloud-init writes kubeadm's configuration under /run/kubeadm, CABPK's Ignition to
        // /etc/kubeadm.yml.
        let kubeadm_config = if distro.ignition() {
            "/etc/kubeadm.yml"
        } else {
            "/run/kubeadm/kubeadm*.yaml"
        };
        files.push(file(
            NO_PROXY_SCRIPT,
            "0755",
            no_proxy_script(kubeadm_config),
        ));
        pre_kubeadm_commands.extend([
            NO_PROXY_SCRIPT.to_owned(),
            "systemctl daemon-reload".to_owned(),
            "systemctl restart containerd".to_owned(),
        ]);
    }
    if let Some(ca) = registry_ca {
        files.push(file(REGISTRY_CA_PATH, "0644", ca));
    }
    files.extend(hosts_files(&registries, prefix_host));
    NodeSettings {
        proxy,
        registries,
        files,
        pre_kubeadm_commands,
    }
}

/// What `audit_log_enabled` adds: its settings, the apiserver flags and volumes, and the policy
/// file of control-plane nodes.
pub(super) type AuditParts = (AuditLog, Vec<NameValue>, Vec<HostPathMount>, NodeFile);

/// The audit log when `audit_log_enabled`.
pub(super) fn audit_log(view: &LabelView<'_>) -> Result<Option<AuditParts>, ValuesError> {
    let limit = |names: &[&'static str], default: u32| -> Result<u32, ValuesError> {
        Ok(view.u32(names)?.unwrap_or(default))
    };
    // Read (and so checked) even when disabled: a bad value is a mistake either way.
    let max_age = limit(&["audit_log_maxage", "audit_log_max_age"], 30)?;
    let max_backup = limit(&["audit_log_maxbackup", "audit_log_max_backup"], 10)?;
    let max_size = limit(&["audit_log_maxsize", "audit_log_max_size"], 100)?;
    if !view.bool(&["audit_log_enabled"], false)? {
        return Ok(None);
    }
    let log = AuditLog {
        policy_path: AUDIT_POLICY_PATH.into(),
        log_path: format!("{AUDIT_LOG_DIR}/audit.log"),
        max_age,
        max_backup,
        max_size,
    };
    let args = vec![
        nv("audit-policy-file", AUDIT_POLICY_PATH),
        nv("audit-log-path", log.log_path.clone()),
        nv("audit-log-maxage", max_age.to_string()),
        nv("audit-log-maxbackup", max_backup.to_string()),
        nv("audit-log-maxsize", max_size.to_string()),
    ];
    let volumes = vec![
        HostPathMount {
            name: "audit-policy".into(),
            host_path: AUDIT_POLICY_PATH.into(),
            mount_path: AUDIT_POLICY_PATH.into(),
            read_only: true,
            path_type: "File".into(),
        },
        HostPathMount {
            name: "audit-logs".into(),
            host_path: AUDIT_LOG_DIR.into(),
            mount_path: AUDIT_LOG_DIR.into(),
            read_only: false,
            path_type: "DirectoryOrCreate".into(),
        },
    ];
    let policy = NodeFile {
        path: AUDIT_POLICY_PATH.into(),
        owner: "root:root".into(),
        permissions: "0600".into(),
        content: AUDIT_POLICY.into(),
    };
    Ok(Some((log, args, volumes, policy)))
}

/// Request metadata for everything, without the noise of health checks and the kube-proxy's
/// watches; no request bodies (they may hold Secrets).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
- RequestReceived
rules:
- level: None
  users: [\"system:kube-proxy\"]
  verbs: [\"watch\"]
  resources:
  - group: \"\"
    resources: [\"endpoints\", \"services\", \"services/status\"]
- level: None
  nonResourceURLs: [\"/healthz*\", \"/livez*\", \"/readyz*\", \"/version\"]
- level: None
  users: [\"system:apiserver\"]
- level: Metadata
";

/// The server-group policy of a scope (`server_group_policies`; one policy, as Nova takes since
/// microversion 2.64), for a group named `name`.
pub(super) fn server_group(
    view: &LabelView<'_>,
    name: &str,
) -> Result<Option<ServerGroup>, ValuesError> {
    let policy = view.parsed(SERVER_GROUP_LABEL, |v| {
        let items: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        match items.as_slice() {
            [one] => SERVER_GROUP_POLICIES
                .iter()
                .find(|p| p.eq_ignore_ascii_case(one))
                .map(|p| (*p).to_owned())
                .ok_or_else(|| format!("must be one of {}", SERVER_GROUP_POLICIES.join(", "))),
            _ => Err(format!(
                "must be one policy of {}",
                SERVER_GROUP_POLICIES.join(", ")
            )),
        }
    })?;
    Ok(policy.map(|policy| ServerGroup {
        name: name.to_owned(),
        policy,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::values::cx::label_map as l;

    #[test]
    fn registry_hosts_and_urls() {
        assert!(registry_host("docker.io").is_ok());
        assert!(registry_host("registry.example.com:5000").is_ok());
        assert!(registry_host("https://docker.io").is_err());
        assert!(registry_host("docker.io/library").is_err());
        assert!(registry_host("host:port").is_err());
        assert!(http_url("http://proxy.example.com:3128").is_ok());
        assert!(http_url("proxy.example.com:3128").is_err());
        assert!(http_url("ftp://proxy").is_err());
        assert!(http_url("http://a%20b").is_err());
        assert_eq!(
            url_host("https://m.example.com:5000/v2"),
            "m.example.com:5000"
        );
    }

    #[test]
    fn mirrors_group_by_registry_and_insecure_hosts_skip_verification() {
        let labels = l(&[
            (
                "containerd_registry_mirrors",
                "docker.io=https://m1.example.com, docker.io=https://m2.example.com,quay.io=https://m1.example.com",
            ),
            ("insecure_registries", "m2.example.com,registry.local:5000"),
        ]);
        let view = LabelView::cluster(&labels);
        let (r, ca) = registries(&view, None).unwrap();
        assert!(ca.is_none());
        assert_eq!(r.mirrors.len(), 2);
        assert_eq!(r.mirrors[0].mirrors.len(), 2);
        let files = hosts_files(&r, None);
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/etc/containerd/certs.d/docker.io/hosts.toml",
                "/etc/containerd/certs.d/quay.io/hosts.toml",
                // An insecure mirror is also insecure when pulled from directly.
                "/etc/containerd/certs.d/m2.example.com/hosts.toml",
                "/etc/containerd/certs.d/registry.local:5000/hosts.toml",
            ]
        );
        assert!(
            files[0]
                .content
                .starts_with("server = \"https://registry-1.docker.io\"")
        );
        assert!(files[0].content.contains("[host.\"https://m2.example.com\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true"));
        assert!(
            files[3]
                .content
                .contains("[host.\"http://registry.local:5000\"]")
        );
        for bad in [
            ("containerd_registry_mirrors", "docker.io"),
            (
                "containerd_registry_mirrors",
                "docker.io=mirror.example.com",
            ),
            ("insecure_registries", "http://r.example.com"),
            ("containerd_registry_ca", "not base64!"),
        ] {
            let labels = l(&[bad]);
            let err = registries(&LabelView::cluster(&labels), None).unwrap_err();
            assert!(err.to_string().contains(bad.0), "{err}");
        }
    }

    #[test]
    fn server_group_policies_are_nova_policies() {
        let labels = l(&[("server_group_policies", "Anti-Affinity")]);
        let sg = server_group(&LabelView::cluster(&labels), "g")
            .unwrap()
            .unwrap();
        assert_eq!(sg.policy, "anti-affinity");
        for v in ["spread", "affinity,anti-affinity"] {
            let labels = l(&[("server_group_policies", v)]);
            assert!(server_group(&LabelView::cluster(&labels), "g").is_err());
        }
    }
}
