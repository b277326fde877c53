//! Images other than Ubuntu, chosen by the image's `os_distro`: Flatcar boots Ignition (CABPK
//! `format: ignition` with every node setting in a Container Linux Config, validated here
//! against a schema of the CLC fields we write), Rocky and Debian boot cloud-init with their own
//! package manager; a distro we cannot boot is refused naming the ones we can.

use std::collections::BTreeMap;

use magnum_capi::capi::values::{FLATCAR_KUBEADM_COMMANDS, MAX_ADDITIONAL_CONFIG, mount_unit_name};
use magnum_capi::config::CapiConfig;
use serde_json::{Value, json};

use crate::render::{assert_valid, build_values, find, node_settings_body, one, renderer, rows};

/// A cluster with every node setting on: proxies, registry mirrors, an insecure registry, a
/// registry CA, `container_infra_prefix`, the audit log, Keystone authentication, server groups,
/// kubelet flags, containerd and etcd volumes, node labels and taints.
fn every_node_setting() -> (Value, Value, Value) {
    let (mut t, c) = node_settings_body();
    let labels = t["labels"].as_object_mut().unwrap();
    for (k, v) in [
        ("etcd_volume_size", "10"),
        ("etcd_volume_type", "fast"),
        ("docker_volume_type", "ssd"),
        ("keystone_auth_enabled", "true"),
        (
            "kubelet_tls_cipher_suites",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ),
    ] {
        labels.insert(k.into(), json!(v));
    }
    t["docker_volume_size"] = json!(20);
    let ngs = json!({"nodegroups": [
        {"uuid": "11111111-1111-4111-8111-111111111111", "name": "default-master",
         "role": "master", "node_count": 3, "is_default": true, "docker_volume_size": 20},
        {"uuid": "22222222-2222-4222-8222-222222222222", "name": "default-worker",
         "role": "worker", "node_count": 2, "is_default": true, "docker_volume_size": 20,
         "node_labels": {"tier": "web"},
         "node_taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]}
    ]});
    (t, c, ngs)
}

fn config() -> CapiConfig {
    CapiConfig {
        keystone_auth_url: Some("https://keystone.example.com:5000/v3".into()),
        ..CapiConfig::default()
    }
}

/// The objects of the every-setting cluster on an image of `os_distro`.
fn render_on(os_distro: &str) -> Vec<Value> {
    let (t, c, ngs) = every_node_setting();
    let mut r = rows(t, c, Some(ngs));
    r.template.resolved.os_distro = Some(os_distro.into());
    r.cluster.resolved.os_distro = Some(os_distro.into());
    let v = build_values(&r, &config()).unwrap();
    renderer().render(&v).unwrap()
}

/// The bootstrap specs (KubeadmControlPlane's `kubeadmConfigSpec`, each KubeadmConfigTemplate's
/// `spec.template.spec`), by machine: `control-plane` or the nodegroup uuid.
fn bootstrap_specs(objects: &[Value]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    out.insert(
        "control-plane".to_owned(),
        one(objects, "KubeadmControlPlane")["spec"]["kubeadmConfigSpec"].clone(),
    );
    for kct in find(objects, "KubeadmConfigTemplate") {
        let uuid = kct["metadata"]["labels"]["magnum.openstack.org/nodegroup-uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        out.insert(uuid, kct["spec"]["template"]["spec"].clone());
    }
    out
}

/// A machine's Container Linux Config, parsed.
fn clc(spec: &Value) -> Value {
    assert_eq!(spec["format"], "ignition", "{spec:#}");
    let text = spec["ignition"]["containerLinuxConfig"]["additionalConfig"]
        .as_str()
        .unwrap_or_else(|| panic!("no additionalConfig in {spec:#}"));
    assert!(text.len() <= MAX_ADDITIONAL_CONFIG);
    yaml_serde::from_str(text).unwrap()
}

/// The Container Linux Config fields we write, as the CLC spec for Ignition 2.3 (what CABPK's
/// transpiler targets) defines them; every object closed, so a misspelt or misplaced field is
/// an error, not a setting Flatcar silently ignores.
fn clc_schema() -> Value {
    let closed = |required: Value, properties: Value| {
        json!({"type": "object", "additionalProperties": false,
               "required": required, "properties": properties})
    };
    let named = closed(
        json!(["name"]),
        json!({"name": {"type": "string", "minLength": 1}}),
    );
    let filesystem = closed(
        json!(["name", "mount"]),
        json!({
            "name": {"type": "string", "minLength": 1},
            "mount": closed(json!(["device", "format"]), json!({
                "device": {"type": "string", "pattern": "^/dev/"},
                "format": {"enum": ["ext4", "btrfs", "xfs", "vfat", "swap"]},
                // ext4 labels hold at most 16 bytes.
                "label": {"type": "string", "minLength": 1, "maxLength": 16},
                "wipe_filesystem": {"type": "boolean"},
                "options": {"type": "array", "items": {"type": "string"}}
            }))
        }),
    );
    let file = closed(
        json!(["filesystem", "path", "contents"]),
        json!({
            "filesystem": {"type": "string", "minLength": 1},
            "path": {"type": "string", "pattern": "^/.*[^/]$"},
            "mode": {"type": "integer", "minimum": 0, "maximum": 0o7777},
            "overwrite": {"type": "boolean"},
            "user": named,
            "group": named,
            "contents": closed(json!(["inline"]), json!({"inline": {"type": "string"}}))
        }),
    );
    let unit = closed(
        json!(["name"]),
        json!({
            "name": {"type": "string",
                     "pattern": "^[^/]+\\.(service|socket|device|mount|automount|swap|target|path|timer|slice|scope)$"},
            "enabled": {"type": "boolean"},
            "mask": {"type": "boolean"},
            "contents": {"type": "string", "minLength": 1},
            "dropins": {"type": "array", "items": closed(
                json!(["name", "contents"]),
                json!({"name": {"type": "string", "pattern": "^[^/]+\\.conf$"},
                       "contents": {"type": "string", "minLength": 1}}))}
        }),
    );
    closed(
        json!([]),
        json!({
            "storage": closed(json!([]), json!({
                "filesystems": {"type": "array", "items": filesystem},
                "files": {"type": "array", "items": file}
            })),
            "systemd": closed(json!(["units"]), json!({
                "units": {"type": "array", "items": unit}
            }))
        }),
    )
}

fn clc_errors(config: &Value) -> Vec<String> {
    let validator = jsonschema::draft7::new(&clc_schema()).unwrap();
    validator
        .iter_errors(config)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn units(clc: &Value) -> &Vec<Value> {
    clc["systemd"]["units"].as_array().unwrap()
}

fn unit<'a>(clc: &'a Value, name: &str) -> &'a Value {
    units(clc)
        .iter()
        .find(|u| u["name"] == name)
        .unwrap_or_else(|| panic!("no unit {name} in {clc:#}"))
}

/// The contents of the drop-in `name` of `unit`.
fn dropin(clc: &Value, unit_name: &str, name: &str) -> String {
    unit(clc, unit_name)["dropins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no drop-in {name} of {unit_name}"))["contents"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// What the CLC writes at `path`: a file's contents and mode, or a drop-in's contents (mode
/// `None`: Ignition writes drop-ins 0644).
fn clc_path(clc: &Value, path: &str) -> Option<(String, Option<u64>)> {
    let files = clc["storage"]["files"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(f) = files.iter().find(|f| f["path"] == path) {
        return Some((
            f["contents"]["inline"].as_str().unwrap().to_owned(),
            f["mode"].as_u64(),
        ));
    }
    let rest = path.strip_prefix("/etc/systemd/system/")?;
    let (unit_name, name) = rest.split_once(".d/")?;
    let u = units(clc).iter().find(|u| u["name"] == unit_name)?;
    let d = u["dropins"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == name)?;
    Some((d["contents"].as_str().unwrap().to_owned(), None))
}

#[test]
fn flatcar_rocky_and_debian_render_every_node_setting_valid_against_the_crds() {
    for distro in ["flatcar", "rocky", "debian"] {
        let objects = render_on(distro);
        assert_valid(&objects);
        insta::assert_json_snapshot!(format!("distro_{distro}"), objects);
    }
}

#[test]
fn flatcars_ignition_settings_are_a_valid_container_linux_config() {
    let objects = render_on("flatcar");
    let specs = bootstrap_specs(&objects);
    assert_eq!(specs.len(), 2);
    for (machine, spec) in &specs {
        let config = clc(spec);
        let errors = clc_errors(&config);
        assert!(errors.is_empty(), "{machine}: {errors:#?}\n{config:#}");
        // Each data volume: an Ignition file system, a mount unit of it by label, and containerd,
        // the kubelet and kubeadm requiring the mount (kubeadm never runs on the root disk).
        let filesystems = config["storage"]["filesystems"].as_array().unwrap();
        let mut paths = Vec::new();
        for fs in filesystems {
            let label = fs["mount"]["label"].as_str().unwrap();
            assert_eq!(fs["mount"]["wipe_filesystem"], false, "{machine}");
            let mount = units(&config)
                .iter()
                .find(|u| {
                    u["contents"]
                        .as_str()
                        .is_some_and(|c| c.contains(&format!("What=/dev/disk/by-label/{label}\n")))
                })
                .unwrap_or_else(|| panic!("{machine}: no mount unit of {label}"));
            let contents = mount["contents"].as_str().unwrap();
            let path = contents
                .lines()
                .find_map(|l| l.strip_prefix("Where="))
                .unwrap();
            assert_eq!(mount["name"], mount_unit_name(path));
            assert_eq!(mount["enabled"], true);
            paths.push(path.to_owned());
        }
        let kubeadm = dropin(&config, "kubeadm.service", "10-magnum.conf");
        let required = |text: &str| -> Vec<String> {
            text.lines()
                .find_map(|l| l.strip_prefix("RequiresMountsFor="))
                .map(|l| l.split(' ').map(str::to_owned).collect())
                .unwrap_or_default()
        };
        assert_eq!(required(&kubeadm), paths, "{machine}");
        assert_eq!(
            required(&dropin(
                &config,
                "kubelet.service",
                "10-magnum-volumes.conf"
            )),
            paths
        );
        assert_eq!(
            required(&dropin(
                &config,
                "containerd.service",
                "10-magnum-volume.conf"
            )),
            ["/var/lib/containerd"]
        );
        assert!(kubeadm.contains("EnvironmentFile=/run/metadata/flatcar"));
        // Machines are replaced, not updated in place: no reboot behind Kubernetes' back.
        for updater in ["update-engine.service", "locksmithd.service"] {
            assert_eq!(unit(&config, updater)["mask"], true, "{machine}");
        }
        assert_eq!(unit(&config, "kubeadm.service")["enabled"], true);
        assert_eq!(
            unit(&config, "coreos-metadata-sshkeys@core.service")["enabled"],
            true,
            "the cluster has a keypair"
        );
        // The node's name and id come from coreos-metadata, substituted before kubeadm runs.
        let commands: Vec<&str> = spec["preKubeadmCommands"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(commands[..3], FLATCAR_KUBEADM_COMMANDS);
    }
    let kcp = &specs["control-plane"];
    for registration in [
        &kcp["initConfiguration"]["nodeRegistration"],
        &kcp["joinConfiguration"]["nodeRegistration"],
    ] {
        assert_eq!(registration["name"], "${COREOS_OPENSTACK_HOSTNAME}");
        assert!(
            registration["kubeletExtraArgs"]
                .as_array()
                .unwrap()
                .contains(&json!({"name": "provider-id",
                        "value": "openstack:///${COREOS_OPENSTACK_INSTANCE_UUID}"}))
        );
    }
    // The schema is no formality: a misspelt field, a relative path or a bad mode is refused.
    let mut config = clc(kcp);
    for (pointer, bad) in [
        ("/storage/filesystems/0/mount/wipeFilesystem", json!(false)),
        ("/storage/files/0/path", json!("etc/x")),
        ("/storage/files/0/mode", json!("0644")),
        ("/systemd/units/0/dropins/0/name", json!("10-x")),
    ] {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let mut broken = config.clone();
        broken.pointer_mut(parent).unwrap()[key] = bad;
        assert!(!clc_errors(&broken).is_empty(), "{pointer} was accepted");
    }
    config["passwd"] = json!({});
    assert!(!clc_errors(&config).is_empty());
}

/// Every node setting the cloud-init images get (files, file systems, mounts, commands, kubelet
/// flags, taints, kubeadm configuration) is in the Flatcar render of the same cluster, in
/// Ignition form: a setting added later to the Ubuntu render alone fails here.
#[test]
fn no_node_setting_is_missing_from_the_flatcar_render() {
    let ubuntu = bootstrap_specs(&render_on("ubuntu"));
    let flatcar = bootstrap_specs(&render_on("flatcar"));
    assert_eq!(
        ubuntu.keys().collect::<Vec<_>>(),
        flatcar.keys().collect::<Vec<_>>()
    );
    for (machine, u) in &ubuntu {
        let f = &flatcar[machine];
        let config = clc(f);
        for absent in ["diskSetup", "mounts"] {
            assert!(f.get(absent).is_none(), "{machine}: {absent} on Flatcar");
        }
        // Only the files kubeadm reads from Secrets (the etcd encryption configuration).
        assert!(
            f["files"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|file| file.get("contentFrom").is_some()),
            "{machine}: files on Flatcar"
        );
        let files = u["files"].as_array().unwrap();
        assert!(files.len() > 5, "{machine}: {files:#?}");
        for file in files {
            let path = file["path"].as_str().unwrap();
            // apt's proxy settings: Flatcar has no package manager; a file read from a Secret
            // stays in kubeadm's `files` (checked above).
            if path.starts_with("/etc/apt/") || file.get("contentFrom").is_some() {
                continue;
            }
            let (contents, mode) =
                clc_path(&config, path).unwrap_or_else(|| panic!("{machine}: {path} missing"));
            let want = file["content"].as_str().unwrap();
            if path == "/etc/kubernetes/magnum/no-proxy-api-endpoint.sh" {
                // Reads kubeadm's configuration where Ignition's bootstrap writes it.
                assert_eq!(
                    contents,
                    want.replace("/run/kubeadm/kubeadm*.yaml", "/etc/kubeadm.yml")
                );
            } else {
                assert_eq!(contents, want, "{machine}: {path}");
            }
            let permissions = u64::from_str_radix(file["permissions"].as_str().unwrap(), 8);
            assert!(
                mode.is_none() || mode == permissions.ok(),
                "{machine}: {path}"
            );
        }
        let filesystems = config["storage"]["filesystems"].as_array().unwrap();
        let disks = u["diskSetup"]["filesystems"].as_array().unwrap();
        assert_eq!(filesystems.len(), disks.len(), "{machine}");
        for d in disks {
            assert!(
                filesystems
                    .iter()
                    .any(|fs| fs["mount"]["device"] == d["device"]
                        && fs["mount"]["label"] == d["label"]
                        && fs["mount"]["format"] == d["filesystem"]),
                "{machine}: {d}"
            );
        }
        for m in u["mounts"].as_array().unwrap() {
            let path = m[1].as_str().unwrap();
            let mount = unit(&config, &mount_unit_name(path));
            assert!(
                mount["contents"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("Where={path}\n")),
                "{machine}: {path}"
            );
        }
        let commands = |spec: &Value| -> Vec<String> {
            spec["preKubeadmCommands"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_owned())
                .collect()
        };
        let mut want = FLATCAR_KUBEADM_COMMANDS.map(str::to_owned).to_vec();
        want.extend(commands(u));
        assert_eq!(commands(f), want, "{machine}");
        // Everything else kubeadm is given is the same, but the node's name and provider id.
        let mut u = u.clone();
        let mut f = f.clone();
        for spec in [&mut u, &mut f] {
            let spec = spec.as_object_mut().unwrap();
            for key in [
                "files",
                "diskSetup",
                "mounts",
                "preKubeadmCommands",
                "format",
                "ignition",
            ] {
                spec.remove(key);
            }
            for config in ["initConfiguration", "joinConfiguration"] {
                if let Some(reg) = spec
                    .get_mut(config)
                    .and_then(|c| c.get_mut("nodeRegistration"))
                {
                    reg["name"] = json!("<node>");
                    for arg in reg["kubeletExtraArgs"].as_array_mut().unwrap() {
                        if arg["name"] == "provider-id" {
                            arg["value"] = json!("<server>");
                        }
                    }
                }
            }
        }
        assert_eq!(u, f, "{machine}");
    }
}

#[test]
fn rocky_and_debian_boot_the_same_cloud_init_as_ubuntu() {
    let ubuntu = bootstrap_specs(&render_on("ubuntu"));
    for distro in ["debian", "rocky"] {
        let specs = bootstrap_specs(&render_on(distro));
        assert_eq!(specs.len(), ubuntu.len(), "{distro}");
        for (machine, spec) in specs {
            assert!(spec.get("format").is_none() && spec.get("ignition").is_none());
            // No package-manager proxy anywhere: only containerd and the kubelet are proxied.
            let text = spec.to_string();
            assert!(
                !text.contains("/etc/apt/") && !text.contains("dnf.conf"),
                "{distro} {machine}"
            );
            assert_eq!(spec, ubuntu[&machine], "{distro} {machine}");
        }
    }
}

#[test]
fn an_os_distro_the_driver_cannot_boot_is_refused_naming_the_supported_ones() {
    let (t, c, ngs) = every_node_setting();
    for distro in ["fedora-coreos", "windows", "centos"] {
        let mut r = rows(t.clone(), c.clone(), Some(ngs.clone()));
        r.template.resolved.os_distro = Some(distro.into());
        let err = build_values(&r, &config()).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "Cluster type (vm, {distro}, kubernetes) is not supported by any loaded cluster \
                 driver. Loaded drivers support: "
            )) && err.contains("(vm, rockylinux, kubernetes), (vm, ubuntu, kubernetes)"),
            "{err}"
        );
    }
    // magnum-cluster-api's name for Rocky is taken too.
    let mut r = rows(t, c, Some(ngs));
    r.template.resolved.os_distro = Some("rockylinux".into());
    assert_eq!(
        build_values(&r, &config()).unwrap().bootstrap.os_distro,
        "rocky"
    );
}

/// An API on a virtual IP (`kube_vip_enabled`, issue 46 item 3) on every distro: valid against
/// the CRDs, kube-vip's static pod written on the control plane only (Flatcar: by Ignition, as
/// a valid Container Linux Config), the super-admin swap around kubeadm.
#[test]
fn a_virtual_ip_renders_on_every_distro_with_kube_vips_pod_on_the_control_plane() {
    let path = magnum_capi::capi::values::KUBE_VIP_MANIFEST_PATH;
    for distro in ["ubuntu", "flatcar", "rocky", "debian"] {
        let (mut t, c, ngs) = every_node_setting();
        t["labels"]["kube_vip_enabled"] = json!("true");
        let mut r = rows(t, c, Some(ngs));
        r.template.resolved.os_distro = Some(distro.into());
        r.cluster.resolved.os_distro = Some(distro.into());
        let objects = renderer()
            .render(&build_values(&r, &config()).unwrap())
            .unwrap();
        assert_valid(&objects);
        for (machine, spec) in bootstrap_specs(&objects) {
            let written = if distro == "flatcar" {
                let config = clc(&spec);
                let errors = clc_errors(&config);
                assert!(errors.is_empty(), "{distro} {machine}: {errors:#?}");
                clc_path(&config, path).is_some()
            } else {
                spec["files"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f["path"] == path))
            };
            assert_eq!(written, machine == "control-plane", "{distro} {machine}");
            if machine == "control-plane" {
                let commands = spec["postKubeadmCommands"].to_string();
                assert!(commands.contains("super-admin.conf"), "{distro}: {spec:#}");
            }
        }
    }
}
