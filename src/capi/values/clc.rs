//! Flatcar's node settings in Ignition form: the Container Linux Config (CLC) that CABPK merges
//! into the Ignition config it generates (`ignition.containerLinuxConfig.additionalConfig`; CAPI
//! v1.14 transpiles CLC into Ignition spec 2.3, the spec Flatcar boots). What cloud-init images
//! get as KubeadmConfig `files`, `diskSetup` and `mounts` is written here as Ignition files,
//! systemd drop-ins and units, file systems, and mount units that containerd, the kubelet and
//! kubeadm require, so kubeadm never runs before the data volumes are mounted.
//!
//! Written by hand (a few serde structs) rather than with an Ignition crate: CLC is not the
//! Ignition JSON spec (its own field names, e.g. `wipe_filesystem`, `dropins`), and no
//! maintained Rust crate models it.

use serde::Serialize;

use super::document::{DataVolume, NodeFile};
use super::error::ValuesError;

/// CABPK's limit on `additionalConfig` (the CRD's `maxLength`).
pub const MAX_ADDITIONAL_CONFIG: usize = 32768;

/// Where systemd reads drop-ins (`/etc/systemd/system/<unit>.d/<name>.conf`).
const SYSTEMD_DIR: &str = "/etc/systemd/system/";

#[derive(Debug, Default, Serialize)]
struct Config {
    #[serde(skip_serializing_if = "Storage::is_empty")]
    storage: Storage,
    systemd: Systemd,
}

#[derive(Debug, Default, Serialize)]
struct Storage {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    filesystems: Vec<Filesystem>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files: Vec<File>,
}

impl Storage {
    fn is_empty(&self) -> bool {
        self.filesystems.is_empty() && self.files.is_empty()
    }
}

#[derive(Debug, Serialize)]
struct Filesystem {
    name: String,
    mount: Mount,
}

#[derive(Debug, Serialize)]
struct Mount {
    device: String,
    format: String,
    label: String,
    /// Never reformat: a volume that has a file system keeps it.
    wipe_filesystem: bool,
}

#[derive(Debug, Serialize)]
struct File {
    /// Ignition 2.x names the file system a file is on; `root` is the machine's own.
    filesystem: &'static str,
    path: String,
    /// Decimal: YAML 1.1 reads `0644` as octal, YAML 1.2 as decimal; a plain number means the
    /// same to both.
    mode: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<Named>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<Named>,
    contents: Contents,
}

#[derive(Debug, Serialize)]
struct Named {
    name: String,
}

#[derive(Debug, Serialize)]
struct Contents {
    inline: String,
}

#[derive(Debug, Default, Serialize)]
struct Systemd {
    units: Vec<Unit>,
}

#[derive(Debug, Serialize)]
struct Unit {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mask: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    contents: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dropins: Vec<Dropin>,
}

#[derive(Debug, Serialize)]
struct Dropin {
    name: String,
    contents: String,
}

impl Systemd {
    /// The unit named `name`, added (empty) when not there yet.
    fn unit(&mut self, name: &str) -> &mut Unit {
        let i = match self.units.iter().position(|u| u.name == name) {
            Some(i) => i,
            None => {
                self.units.push(Unit {
                    name: name.to_owned(),
                    enabled: None,
                    mask: None,
                    contents: None,
                    dropins: Vec::new(),
                });
                self.units.len() - 1
            }
        };
        &mut self.units[i]
    }

    fn dropin(&mut self, unit: &str, name: &str, contents: String) {
        self.unit(unit).dropins.push(Dropin {
            name: name.to_owned(),
            contents,
        });
    }
}

/// systemd's name of the mount unit for `path` (`/var/lib/etcd` → `var-lib-etcd.mount`): `/`
/// becomes `-`, and a `-` or any byte outside `[A-Za-z0-9:_.]` its `\xNN` escape.
pub fn mount_unit_name(path: &str) -> String {
    let mut out = String::new();
    for (i, part) in path.trim_matches('/').split('/').enumerate() {
        if i > 0 {
            out.push('-');
        }
        for (j, b) in part.bytes().enumerate() {
            let plain = b.is_ascii_alphanumeric() || b == b':' || b == b'_' || (b == b'.' && j > 0);
            if plain {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    format!("{out}.mount")
}

/// A cloud-init file in Ignition form: a systemd drop-in (`/etc/systemd/system/<unit>.d/<name>`)
/// becomes the unit's drop-in, anything else a file with its owner and mode.
fn add_file(config: &mut Config, f: &NodeFile) -> Result<(), ValuesError> {
    if let Some((unit, name)) = f
        .path
        .strip_prefix(SYSTEMD_DIR)
        .and_then(|rest| rest.split_once(".d/"))
        .filter(|(unit, name)| !unit.contains('/') && !name.contains('/'))
    {
        config.systemd.dropin(unit, name, f.content.clone());
        return Ok(());
    }
    let mode = u32::from_str_radix(&f.permissions, 8).map_err(|_| {
        ValuesError::Invalid(format!(
            "file {}: permissions {:?} are not octal",
            f.path, f.permissions
        ))
    })?;
    let (user, group) = match f.owner.split_once(':') {
        Some((u, g)) => (u, g),
        None => (f.owner.as_str(), ""),
    };
    let named = |n: &str| {
        let n = n.trim();
        (!n.is_empty()).then(|| Named { name: n.to_owned() })
    };
    config.storage.files.push(File {
        filesystem: "root",
        path: f.path.clone(),
        mode,
        user: named(user),
        group: named(group),
        contents: Contents {
            inline: f.content.clone(),
        },
    });
    Ok(())
}

/// The CLC of a machine: its files, its data volumes (file system, mount unit, and the
/// `RequiresMountsFor=` that keeps containerd, the kubelet and kubeadm off the root disk), the
/// coreos-metadata environment kubeadm's configuration is completed from (the node name and
/// the server's id, see [`super::Bootstrap`]), SSH keys from the metadata service when the
/// cluster has a keypair, and Flatcar's own updates masked.
pub(super) fn config(
    files: &[NodeFile],
    volumes: &[DataVolume],
    ssh_key: bool,
) -> Result<String, ValuesError> {
    let mut c = Config::default();
    let mounts: Vec<&str> = volumes.iter().map(|v| v.mount_path.as_str()).collect();
    let requires_mounts =
        |paths: &[&str]| format!("[Unit]\nRequiresMountsFor={}\n", paths.join(" "));
    let mut kubeadm = String::from(
        "[Unit]\n\
         Requires=containerd.service coreos-metadata.service\n\
         After=containerd.service coreos-metadata.service\n",
    );
    if !mounts.is_empty() {
        kubeadm.push_str(&format!("RequiresMountsFor={}\n", mounts.join(" ")));
    }
    kubeadm.push_str("[Service]\nEnvironmentFile=/run/metadata/flatcar\n");
    let unit = c.systemd.unit("kubeadm.service");
    unit.enabled = Some(true);
    c.systemd
        .dropin("kubeadm.service", "10-magnum.conf", kubeadm);
    let sshkeys = c.systemd.unit("coreos-metadata-sshkeys@core.service");
    // Without a keypair the unit would retry forever: masked.
    if ssh_key {
        sshkeys.enabled = Some(true);
    } else {
        sshkeys.mask = Some(true);
    }
    // The OS is replaced with the machines (an image upgrade rolls them), as on every other
    // image: Flatcar's own updates would reboot nodes behind Kubernetes' back.
    for updater in ["update-engine.service", "locksmithd.service"] {
        c.systemd.unit(updater).mask = Some(true);
    }
    for v in volumes {
        c.storage.filesystems.push(Filesystem {
            name: v.label.clone(),
            mount: Mount {
                device: v.device.clone(),
                format: "ext4".into(),
                label: v.label.clone(),
                wipe_filesystem: false,
            },
        });
        let unit = c.systemd.unit(&mount_unit_name(&v.mount_path));
        unit.enabled = Some(true);
        unit.contents = Some(format!(
            "[Unit]\n\
             Description=the {name} data volume\n\
             Before=local-fs.target\n\
             [Mount]\n\
             What=/dev/disk/by-label/{label}\n\
             Where={path}\n\
             Type=ext4\n\
             [Install]\n\
             WantedBy=local-fs.target\n",
            name = v.name,
            label = v.label,
            path = v.mount_path,
        ));
        if v.name == "containerd" {
            c.systemd.dropin(
                "containerd.service",
                "10-magnum-volume.conf",
                requires_mounts(&[v.mount_path.as_str()]),
            );
        }
    }
    if !mounts.is_empty() {
        c.systemd.dropin(
            "kubelet.service",
            "10-magnum-volumes.conf",
            requires_mounts(&mounts),
        );
    }
    for f in files {
        add_file(&mut c, f)?;
    }
    let yaml = yaml_serde::to_string(&c)
        .map_err(|e| ValuesError::Invalid(format!("cannot write the Ignition config: {e}")))?;
    if yaml.len() > MAX_ADDITIONAL_CONFIG {
        return Err(ValuesError::Invalid(format!(
            "the Flatcar nodes' Ignition settings take {} bytes, more than the {} Cluster API \
             takes (a large containerd_registry_ca?)",
            yaml.len(),
            MAX_ADDITIONAL_CONFIG
        )));
    }
    Ok(yaml)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_past_cabpks_limit_are_refused() {
        let big = NodeFile {
            path: "/etc/containerd/certs.d/magnum-registry-ca.crt".into(),
            owner: "root:root".into(),
            permissions: "0644".into(),
            content: "x".repeat(MAX_ADDITIONAL_CONFIG),
        };
        let err = config(&[big], &[], true).unwrap_err().to_string();
        assert!(err.contains("more than the 32768"), "{err}");
    }

    #[test]
    fn mount_unit_names_are_systemds() {
        assert_eq!(mount_unit_name("/var/lib/etcd"), "var-lib-etcd.mount");
        assert_eq!(
            mount_unit_name("/var/lib/containerd"),
            "var-lib-containerd.mount"
        );
        assert_eq!(mount_unit_name("/srv/my-data"), "srv-my\\x2ddata.mount");
    }

    #[test]
    fn drop_ins_become_the_units_and_other_files_keep_owner_and_mode() {
        let file = |path: &str| NodeFile {
            path: path.into(),
            owner: "root:root".into(),
            permissions: "0600".into(),
            content: "x\n".into(),
        };
        let yaml = config(
            &[
                file("/etc/systemd/system/containerd.service.d/http-proxy.conf"),
                file("/etc/kubernetes/audit-policy.yaml"),
            ],
            &[],
            false,
        )
        .unwrap();
        let v: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
        let units = v["systemd"]["units"].as_array().unwrap();
        let containerd = units
            .iter()
            .find(|u| u["name"] == "containerd.service")
            .unwrap();
        assert_eq!(containerd["dropins"][0]["name"], "http-proxy.conf");
        let files = v["storage"]["files"].as_array().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0]["mode"], 0o600);
        assert_eq!(files[0]["user"]["name"], "root");
        assert!(v["storage"].get("filesystems").is_none());
        let sshkeys = units
            .iter()
            .find(|u| u["name"] == "coreos-metadata-sshkeys@core.service")
            .unwrap();
        assert_eq!(sshkeys["mask"], true);
    }
}
