//! The machines of the values document: the control plane and the worker nodegroups (sizes,
//! images and flavors, volumes, node labels and taints) and their object names.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use uuid::Uuid;

use super::cx::{Cx, given_and_resolved, label_map};
use super::document::{
    Autoscale, BlockDevice, BlockDeviceStorage, BlockDeviceVolume, ControlPlane, DataVolume,
    DiskSetup, Filesystem, FlavorRef, ImageRef, Kubeadm, Machine, NameRef, NodeGroup, ResourceRef,
    RootVolume, Taint, nv,
};
use super::error::{ValuesError, bad};
use super::labels::{LabelView, any_item};
use crate::capi::{LABEL_CAPI_CLUSTER_NAME, LABEL_CLUSTER_UUID, LABEL_NODEGROUP_UUID, LABEL_ROLE};
use crate::config::CapiConfig;
use crate::domain::resources::FlavorSize;
use crate::domain::spec::Nodegroup;
use crate::k8s::schema::{label_key_error, label_value_error};

/// Autoscaler bounds on a MachineDeployment.
pub const ANNOTATION_AUTOSCALER_MIN: &str =
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
pub const ANNOTATION_AUTOSCALER_MAX: &str =
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
/// Prefix of the capacity annotations cluster-autoscaler's `clusterapi` provider reads on a
/// MachineDeployment to build a node of a group scaled to zero (`cpu`, `memory`,
/// `ephemeral-disk`, `maxPods`).
pub const ANNOTATION_CAPACITY_PREFIX: &str = "capacity.cluster-autoscaler.kubernetes.io/";
/// Pods per node the kubelet allows by default (we set no `max-pods`).
const KUBELET_MAX_PODS: u32 = 110;

/// `s` lower-cased with every run of other characters than `[a-z0-9]` turned into one `-`,
/// trimmed of `-`, and cut to at most `max` characters.
pub fn sanitise_fragment(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.trim_matches('-').chars().take(max).collect();
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// Object name of a worker nodegroup: `<cluster>-<fragment>-<first 8 hex of its uuid>`, the
/// fragment sized so that `<name>-<hash8>` (its templates) stays within 63 characters.
pub fn nodegroup_object_name(cluster_name: &str, ng_name: &str, ng_uuid: Uuid) -> String {
    let hex = ng_uuid.simple().to_string();
    let short = &hex[..8];
    // 63 = cluster + '-' + fragment + '-' + 8 + '-' + 8
    let budget = 63usize.saturating_sub(cluster_name.len() + 1 + 1 + 8 + 9);
    let fragment = sanitise_fragment(ng_name, budget);
    if fragment.is_empty() {
        format!("{cluster_name}-{short}")
    } else {
        format!("{cluster_name}-{fragment}-{short}")
    }
}

/// Bad input in a nodegroup's own fields, naming the nodegroup.
fn ng_invalid(ng: &Nodegroup, what: impl std::fmt::Display) -> ValuesError {
    ValuesError::Invalid(format!("nodegroup {}: {what}", ng.name))
}

pub(super) fn master_nodegroup(nodegroups: &[Nodegroup]) -> Result<&Nodegroup, ValuesError> {
    let masters: Vec<&Nodegroup> = nodegroups.iter().filter(|n| n.is_master()).collect();
    let master = match masters.as_slice() {
        [m] => *m,
        [] => {
            return Err(ValuesError::Invalid(
                "the cluster has no master nodegroup".into(),
            ));
        }
        _ => {
            return Err(ValuesError::Invalid(
                "the cluster has more than one master nodegroup".into(),
            ));
        }
    };
    if master.node_count < 1 || master.node_count % 2 == 0 {
        return Err(ValuesError::Invalid(format!(
            "master count {} is invalid: the control plane needs an odd number of masters \
             (1, 3, 5…) to keep etcd quorum",
            master.node_count
        )));
    }
    Ok(master)
}

/// The machine image and flavors the cluster's rows name, paired with what they resolved to.
pub(super) struct MachineRefs<'a> {
    image: ImageRef,
    /// The template's image reference (nodegroups naming it get the resolved image).
    template_image: Option<&'a String>,
    master_flavor: (Option<&'a String>, Option<&'a String>),
    worker_flavor: (Option<&'a String>, Option<&'a String>),
    /// Flavor sizes by id (the template's and the cluster's resolutions).
    sizes: BTreeMap<String, FlavorSize>,
}

impl MachineRefs<'_> {
    /// A nodegroup's image: the template's (resolved) unless the nodegroup names another.
    fn image_for(&self, ng_image: Option<&String>) -> ImageRef {
        match ng_image.filter(|i| !i.is_empty()) {
            Some(i) if Some(i) != self.template_image => ResourceRef::from_ident(i),
            _ => self.image.clone(),
        }
    }

    /// The size of a flavor (by the id it resolved to), when Nova told it at create.
    fn size_of(&self, flavor: &FlavorRef) -> Option<FlavorSize> {
        let id = flavor.id.as_ref()?;
        self.sizes.get(id).copied()
    }

    /// A nodegroup's flavor: resolved when it is the cluster's worker or master flavor.
    fn flavor_for(&self, ng_flavor: Option<&String>) -> Option<FlavorRef> {
        match ng_flavor.filter(|f| !f.is_empty()) {
            Some(f) if Some(f) == self.worker_flavor.0 => flavor_ref(self.worker_flavor),
            Some(f) if Some(f) == self.master_flavor.0 => flavor_ref(self.master_flavor),
            Some(f) => flavor_ref((Some(f), None)),
            None => flavor_ref(self.worker_flavor),
        }
    }
}

/// A flavor from (given, resolved): by the resolved id, else by what was given, as a name.
fn flavor_ref((given, resolved): (Option<&String>, Option<&String>)) -> Option<FlavorRef> {
    resolved
        .map(|id| ResourceRef::id(id))
        .or_else(|| given.map(|g| ResourceRef::name(g)))
}

impl<'a> Cx<'a> {
    pub(super) fn machine_refs(&self) -> Result<MachineRefs<'a>, ValuesError> {
        let (t, c, tr, cr) = (self.t, self.c, self.tr, self.cr);
        let image = ResourceRef::resolve(
            tr.image_id.as_ref().or(cr.image_id.as_ref()),
            t.image_id.as_ref().filter(|i| !i.is_empty()),
        )
        .ok_or_else(|| ValuesError::Invalid("the cluster template has no image".into()))?;
        Ok(MachineRefs {
            image,
            template_image: t.image_id.as_ref(),
            master_flavor: given_and_resolved(
                (c.master_flavor_id.as_ref(), cr.master_flavor_id.as_ref()),
                (t.master_flavor_id.as_ref(), tr.master_flavor_id.as_ref()),
            ),
            worker_flavor: given_and_resolved(
                (c.flavor_id.as_ref(), cr.flavor_id.as_ref()),
                (t.flavor_id.as_ref(), tr.flavor_id.as_ref()),
            ),
            sizes: tr
                .flavor_sizes
                .iter()
                .chain(&cr.flavor_sizes)
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        })
    }

    pub(super) fn control_plane(
        &self,
        master: &Nodegroup,
        machines: &MachineRefs<'_>,
        pre_kubeadm_commands: &[String],
    ) -> Result<ControlPlane, ValuesError> {
        let view = &self.view;
        let mut availability_zones = Vec::new();
        for az in view.list(&["control_plane_availability_zones"], &[','], any_item)? {
            if !availability_zones.contains(&az) {
                availability_zones.push(az);
            }
        }
        if availability_zones.is_empty()
            && let Some(az) = view.token(&["availability_zone"])?
        {
            availability_zones.push(az);
        }
        let mut data_volumes: Vec<DataVolume> = etcd_volume(view)?.into_iter().collect();
        data_volumes.extend(containerd_volume(
            view,
            master
                .docker_volume_size
                .or(self.c.docker_volume_size)
                .or(self.t.docker_volume_size),
        )?);
        let uuid = master.uuid.to_string();
        let name = format!("{}-control-plane", self.cluster_name);
        let mut labels = self.common_labels.clone();
        labels.insert(LABEL_NODEGROUP_UUID.into(), uuid.clone());
        labels.insert(LABEL_ROLE.into(), "master".into());
        let flavor = flavor_ref(machines.master_flavor)
            .ok_or_else(|| ValuesError::Invalid("no master flavor (master_flavor_id)".into()))?;
        Ok(ControlPlane {
            machine_template_name: name.clone(),
            name,
            labels,
            machine_labels: label_map(&[
                (LABEL_CLUSTER_UUID, &self.cluster_uuid),
                (LABEL_NODEGROUP_UUID, &uuid),
                (LABEL_ROLE, "master"),
            ]),
            selector: label_map(&[(LABEL_NODEGROUP_UUID, &uuid)]),
            nodegroup_uuid: uuid,
            machine_count: master.node_count,
            machine: machine(
                flavor,
                machines.image_for(master.image_id.as_ref()),
                root_volume(view, self.config)?,
                vec![],
                pre_kubeadm_commands,
                data_volumes,
            ),
            availability_zones,
            health_check: view.bool(&["auto_healing_enabled"], true)?,
            files: Vec::new(),
            kubeadm_files: Vec::new(),
            server_group: super::nodes::server_group(
                view,
                &format!("{}-control-plane", self.cluster_name),
            )?,
        })
    }

    /// The worker nodegroups, ordered by creation.
    pub(super) fn node_groups(
        &self,
        nodegroups: &[Nodegroup],
        machines: &MachineRefs<'_>,
        kubeadm: &Kubeadm,
        pre_kubeadm_commands: &[String],
    ) -> Result<Vec<NodeGroup>, ValuesError> {
        let mut workers: Vec<&Nodegroup> = nodegroups.iter().filter(|n| !n.is_master()).collect();
        workers.sort_by_key(|n| (n.id, n.uuid));
        let mut names = BTreeSet::new();
        let mut out = Vec::new();
        for ng in workers {
            let group = self.node_group(ng, machines, kubeadm, pre_kubeadm_commands)?;
            if !names.insert(group.name.clone()) {
                return Err(ValuesError::Invalid(format!(
                    "nodegroups of this cluster would share the object name {}; recreate one of \
                     them",
                    group.name
                )));
            }
            out.push(group);
        }
        Ok(out)
    }

    fn node_group(
        &self,
        ng: &Nodegroup,
        machines: &MachineRefs<'_>,
        kubeadm: &Kubeadm,
        pre_kubeadm_commands: &[String],
    ) -> Result<NodeGroup, ValuesError> {
        let view = LabelView::nodegroup(&ng.labels, &self.c.labels);
        let uuid = ng.uuid.to_string();
        let role = match sanitise_fragment(&ng.role, 63) {
            r if r.is_empty() => "worker".to_owned(),
            r => r,
        };
        let mut labels = self.common_labels.clone();
        labels.insert(LABEL_NODEGROUP_UUID.into(), uuid.clone());
        labels.insert(LABEL_ROLE.into(), "worker".into());
        let selector = label_map(&[
            (LABEL_CAPI_CLUSTER_NAME, &self.cluster_name),
            (LABEL_NODEGROUP_UUID, &uuid),
        ]);
        let mut machine_labels = selector.clone();
        machine_labels.insert(LABEL_CLUSTER_UUID.into(), self.cluster_uuid.clone());
        machine_labels.insert(LABEL_ROLE.into(), "worker".into());
        machine_labels.insert(format!("node-role.kubernetes.io/{role}"), String::new());
        machine_labels.insert(
            "node.cluster.x-k8s.io/nodegroup".into(),
            sanitise_fragment(&ng.name, 63),
        );
        let (replicas, autoscale) = size(ng, &view)?;
        let flavor = machines
            .flavor_for(ng.flavor_id.as_ref())
            .ok_or_else(|| ValuesError::Invalid(format!("nodegroup {} has no flavor", ng.name)))?;
        let root_volume = root_volume(&view, self.config)?;
        let annotations = match &autoscale {
            Some(a) => {
                let mut ann = label_map(&[
                    (ANNOTATION_AUTOSCALER_MIN, &a.min.to_string()),
                    (ANNOTATION_AUTOSCALER_MAX, &a.max.to_string()),
                ]);
                match machines.size_of(&flavor) {
                    Some(size) => ann.extend(capacity(size, root_volume.as_ref())),
                    // Without them the autoscaler cannot build a node of an empty group.
                    None if a.min == 0 => {
                        return Err(ng_invalid(
                            ng,
                            format!(
                                "min_node_count 0 (scaling from zero) needs the size of the \
                                 nodegroup's flavor {}, which was not looked up in Nova; set \
                                 min_node_count to 1 or more",
                                flavor
                                    .id
                                    .as_ref()
                                    .or(flavor.name.as_ref())
                                    .map_or("", |f| f)
                            ),
                        ));
                    }
                    None => {}
                }
                ann
            }
            None => BTreeMap::new(),
        };
        let extra_networks = view.list(
            &["extra_network_names", "extra_network_name"],
            &[' ', ','],
            any_item,
        )?;
        let mut kubelet_extra_args = kubeadm.kubelet_extra_args.clone();
        let node_labels = node_labels(ng)?;
        if !node_labels.is_empty() {
            let joined: Vec<String> = node_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            kubelet_extra_args.push(nv("node-labels", joined.join(",")));
        }
        let cluster_auto_healing = self.view.bool(&["auto_healing_enabled"], true)?;
        let data_volumes: Vec<DataVolume> = containerd_volume(
            &view,
            ng.docker_volume_size
                .or(self.c.docker_volume_size)
                .or(self.t.docker_volume_size),
        )?
        .into_iter()
        .collect();
        let name = nodegroup_object_name(&self.cluster_name, &ng.name, ng.uuid);
        Ok(NodeGroup {
            server_group: super::nodes::server_group(&view, &name)?,
            name,
            uuid,
            magnum_name: ng.name.clone(),
            labels,
            annotations,
            selector,
            machine_labels,
            replicas,
            autoscale,
            machine: machine(
                flavor,
                machines.image_for(ng.image_id.as_ref()),
                root_volume,
                extra_networks,
                pre_kubeadm_commands,
                data_volumes,
            ),
            failure_domain: view.token(&["availability_zone"])?,
            kubelet_extra_args,
            node_taints: node_taints(ng)?,
            health_check: view.bool(&["auto_healing_enabled"], cluster_auto_healing)?,
        })
    }
}

/// The capacity annotations of a nodegroup's MachineDeployment (cluster-autoscaler's
/// `clusterapi` provider builds the node of a group scaled to zero from them): the flavor's
/// vCPUs and memory, the root disk (the boot volume when there is one, else the flavor's disk)
/// and the kubelet's pod limit.
fn capacity(size: FlavorSize, root_volume: Option<&RootVolume>) -> BTreeMap<String, String> {
    let disk = root_volume.map_or(size.disk_gib, |v| u64::from(v.size_gib));
    [
        ("cpu", size.vcpus.to_string()),
        ("memory", format!("{}Mi", size.ram_mib)),
        ("ephemeral-disk", format!("{disk}Gi")),
        ("maxPods", KUBELET_MAX_PODS.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("{ANNOTATION_CAPACITY_PREFIX}{k}"), v))
    .collect()
}

/// A worker nodegroup's fixed replicas, or its autoscaler bounds, by [`size`]'s rules with its
/// labels over the cluster's `cluster_labels` (what a nodegroup added to a cluster adopted from
/// Magnum gets too).
pub fn worker_size(
    ng: &Nodegroup,
    cluster_labels: &crate::domain::labels::Labels,
) -> Result<(Option<i32>, Option<Autoscale>), ValuesError> {
    size(ng, &LabelView::nodegroup(&ng.labels, cluster_labels))
}

/// Fixed replicas, or autoscaler bounds (`auto_scaling_enabled`): min from the nodegroup (else
/// the `min_node_count` label, else 0: a minimum of 0 lets the group scale to zero, with the
/// capacity annotations); max from the nodegroup, else the `max_node_count` label, and one of
/// them is required (equal bounds would mean no autoscaling at all). Equal bounds mean fixed.
fn size(
    ng: &Nodegroup,
    view: &LabelView<'_>,
) -> Result<(Option<i32>, Option<Autoscale>), ValuesError> {
    if !view.bool(&["auto_scaling_enabled"], false)? {
        if ng.node_count < 0 {
            return Err(ng_invalid(
                ng,
                format!("node_count {} is negative", ng.node_count),
            ));
        }
        return Ok((Some(ng.node_count), None));
    }
    let label_count = |label: &'static str| -> Result<Option<i32>, ValuesError> {
        view.u32(&[label])?
            .map(|m| i32::try_from(m).map_err(|_| bad(label, &m.to_string(), "too large")))
            .transpose()
    };
    let min = match ng.min_node_count {
        m if m > 0 => m,
        m => label_count("min_node_count")?.unwrap_or(m.max(0)),
    };
    let max = match ng.max_node_count {
        Some(m) => m,
        None => label_count("max_node_count")?.ok_or_else(|| {
            ng_invalid(
                ng,
                "auto_scaling_enabled is true but no max_node_count is set: give the nodegroup \
                 a max_node_count (or the cluster the max_node_count label) above its \
                 min_node_count",
            )
        })?,
    };
    if max < min {
        return Err(ng_invalid(
            ng,
            format!("max_node_count {max} is below min_node_count {min}"),
        ));
    }
    Ok(if min == max {
        (Some(min), None)
    } else {
        (None, Some(Autoscale { min, max }))
    })
}

/// etcd's own disk on the control plane (`etcd_blockdevice_size` | `etcd_volume_size` > 0):
/// a Cinder volume (`etcd_blockdevice_type=volume`, the default) or the flavor's ephemeral disk.
fn etcd_volume(view: &LabelView<'_>) -> Result<Option<DataVolume>, ValuesError> {
    let size = view
        .u32(&["etcd_blockdevice_size", "etcd_volume_size"])?
        .unwrap_or(0);
    if size == 0 {
        return Ok(None);
    }
    let storage_type = view.one_of(&["etcd_blockdevice_type"], &["Volume", "Local"], "Volume")?;
    let volume = storage_type == "Volume";
    Ok(Some(DataVolume {
        name: "etcd".into(),
        size_gib: size,
        volume_type: match volume {
            true => view.token(&["etcd_blockdevice_volume_type", "etcd_volume_type"])?,
            false => None,
        },
        availability_zone: match volume {
            true => view.token(&["etcd_blockdevice_volume_az"])?,
            false => None,
        },
        storage_type,
        device: "/dev/disk/openstack/by-tag/etcd".into(),
        label: "etcd_data".into(),
        mount_path: "/var/lib/etcd".into(),
    }))
}

/// containerd's own Cinder volume (the nodegroup's `docker_volume_size` > 0, else the
/// cluster's, else the template's), of the `docker_volume_type` label's type. A volume type
/// Cinder does not know is not looked up beforehand (as for `boot_volume_type` and
/// `etcd_volume_type`): CAPO's volume create fails and the machine's failure becomes the
/// cluster's `status_reason`.
fn containerd_volume(
    view: &LabelView<'_>,
    size: Option<i32>,
) -> Result<Option<DataVolume>, ValuesError> {
    let size = match size {
        None | Some(0) => return Ok(None),
        Some(s) => u32::try_from(s).map_err(|_| {
            ValuesError::Invalid(format!("docker_volume_size {s} must be a positive size"))
        })?,
    };
    Ok(Some(DataVolume {
        name: "containerd".into(),
        size_gib: size,
        storage_type: "Volume".into(),
        volume_type: view.token(&["docker_volume_type"])?,
        availability_zone: None,
        device: "/dev/disk/openstack/by-tag/containerd".into(),
        label: "containerd_data".into(),
        mount_path: "/var/lib/containerd".into(),
    }))
}

/// A machine: with its data volumes as block devices, file systems, mounts and the commands
/// that check them before kubeadm.
fn machine(
    flavor: FlavorRef,
    image: ImageRef,
    root_volume: Option<RootVolume>,
    extra_networks: Vec<String>,
    node_commands: &[String],
    data_volumes: Vec<DataVolume>,
) -> Machine {
    Machine {
        flavor,
        image,
        root_volume,
        extra_networks,
        pre_kubeadm_commands: machine_commands(node_commands, &data_volumes),
        block_devices: data_volumes.iter().map(block_device).collect(),
        disk_setup: disk_setup(&data_volumes),
        mounts: data_volumes
            .iter()
            .map(|v| [format!("LABEL={}", v.label), v.mount_path.clone()])
            .collect(),
        data_volumes,
        ignition: None,
    }
}

fn block_device(v: &DataVolume) -> BlockDevice {
    let volume = (v.storage_type == "Volume"
        && (v.volume_type.is_some() || v.availability_zone.is_some()))
    .then(|| BlockDeviceVolume {
        volume_type: v.volume_type.clone(),
        availability_zone: v.availability_zone.clone().map(|name| NameRef { name }),
    });
    BlockDevice {
        name: v.name.clone(),
        size_gib: v.size_gib,
        storage: BlockDeviceStorage {
            storage_type: v.storage_type.clone(),
            volume,
        },
    }
}

/// ext4 on each data disk, labelled for its mount; an existing file system is kept.
fn disk_setup(volumes: &[DataVolume]) -> Option<DiskSetup> {
    (!volumes.is_empty()).then(|| DiskSetup {
        filesystems: volumes
            .iter()
            .map(|v| Filesystem {
                device: v.device.clone(),
                filesystem: "ext4".into(),
                label: v.label.clone(),
                overwrite: false,
            })
            .collect(),
    })
}

/// A machine's commands before kubeadm: every node's, then, with containerd's own volume, a
/// check that it is mounted (else the bootstrap stops: kubeadm never runs on the root disk) and
/// a containerd restart, since containerd may have started on the root disk's directory before
/// cloud-init mounted the volume over it.
fn machine_commands(node: &[String], data_volumes: &[DataVolume]) -> Vec<String> {
    let mut out = node.to_vec();
    for v in data_volumes.iter().filter(|v| v.name == "containerd") {
        out.push(format!(
            "mountpoint -q {0} || {{ echo '{0}: its volume is not mounted' >&2; exit 1; }}",
            v.mount_path
        ));
        out.push("systemctl restart containerd".into());
    }
    out
}

fn root_volume(
    view: &LabelView<'_>,
    config: &CapiConfig,
) -> Result<Option<RootVolume>, ValuesError> {
    let size = view
        .u32(&["boot_volume_size"])?
        .unwrap_or(config.default_boot_volume_size);
    if size == 0 {
        return Ok(None);
    }
    Ok(Some(RootVolume {
        size_gib: size,
        volume_type: view.token(&["boot_volume_type"])?.or_else(|| {
            config
                .default_boot_volume_type
                .clone()
                .filter(|t| !t.is_empty())
        }),
        availability_zone: view.token(&["boot_volume_availability_zone"])?,
    }))
}

/// The nodegroup's `node_labels`, checked as Kubernetes labels (the kubelet refuses to start
/// with a bad one).
fn node_labels(ng: &Nodegroup) -> Result<BTreeMap<String, String>, ValuesError> {
    let mut out = BTreeMap::new();
    let Some(v) = &ng.node_labels else {
        return Ok(out);
    };
    let Some(map) = v.as_object() else {
        return match v {
            Value::Null => Ok(out),
            _ => Err(ng_invalid(ng, "node_labels must be a dict")),
        };
    };
    for (k, v) in map {
        let v = v
            .as_str()
            .ok_or_else(|| ng_invalid(ng, format!("node label {k} must have a string value")))?;
        if let Some(e) = label_key_error(k).or_else(|| label_value_error(v)) {
            return Err(ng_invalid(ng, format!("node label {k}={v}: {e}")));
        }
        out.insert(k.clone(), v.to_owned());
    }
    Ok(out)
}

fn node_taints(ng: &Nodegroup) -> Result<Vec<Taint>, ValuesError> {
    let Some(v) = &ng.node_taints else {
        return Ok(vec![]);
    };
    let items = match v {
        Value::Null => return Ok(vec![]),
        Value::Array(items) => items,
        _ => return Err(ng_invalid(ng, "node_taints must be a list")),
    };
    let mut out = Vec::new();
    for item in items {
        let key = item
            .get("key")
            .and_then(Value::as_str)
            .ok_or_else(|| ng_invalid(ng, "each taint needs a key"))?;
        let value = item
            .get("value")
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty());
        let effect = item.get("effect").and_then(Value::as_str).unwrap_or("");
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            return Err(ng_invalid(
                ng,
                format!("taint {key}: effect {effect:?} is invalid"),
            ));
        }
        if let Some(e) = label_key_error(key).or_else(|| value.and_then(label_value_error)) {
            return Err(ng_invalid(ng, format!("taint {key}: {e}")));
        }
        out.push(Taint {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.to_owned(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::capi::values::MAX_CLUSTER_NAME;
    #[test]
    fn fragments_and_nodegroup_names_fit() {
        assert_eq!(sanitise_fragment("My_Big  Group!", 63), "my-big-group");
        assert_eq!(sanitise_fragment("--x--", 63), "x");
        assert_eq!(sanitise_fragment("default-worker", 8), "default");
        let u = Uuid::parse_str("5d12f6fd-a196-4bf0-ae4c-1f639a523a52").unwrap();
        let cluster = "c0123456789abcdef0123456789abcdef";
        let name = nodegroup_object_name(cluster, "default-worker", u);
        assert_eq!(name, format!("{cluster}-default-wor-5d12f6fd"));
        assert!(name.len() + 9 <= 63);
        assert_eq!(
            nodegroup_object_name(cluster, "___", u),
            format!("{cluster}-5d12f6fd")
        );
        let long = "x".repeat(MAX_CLUSTER_NAME);
        assert!(nodegroup_object_name(&long, "anything", u).len() + 9 <= 63);
    }
}
