//! What an upgrade checks before anything changes (issue 46), between the request's rules
//! (`clusters::upgrade`) and the operation it records: the kubelets' skew against the new
//! version (what the management cluster reports), and — with the caller's token — the new image
//! in Glance, the nodegroups' flavors in Nova and the compute quota's room for the machines the
//! rollout adds. Every refusal is a 400 saying why; nothing is recorded before they pass.

use std::collections::HashMap;

use super::{Result, cloud};
use crate::app::App;
use crate::db::clusters::ClusterRow;
use crate::db::nodegroups::NodegroupRow;
use crate::db::templates::TemplateRow;
use crate::domain::upgrade::{self, Limits, Need};
use crate::openstack::UserSession;
use crate::openstack::lookups;

/// An upgrade of `c` (its nodegroups `ngs`) to template `to`, whose Kubernetes version is
/// `to_version`, checked against the cluster's machines and, when the caller's session reaches
/// the cloud, against Glance and Nova.
pub async fn preflight(
    app: &App,
    cloud: Option<&UserSession>,
    c: &ClusterRow,
    ngs: &[NodegroupRow],
    to: &TemplateRow,
    to_version: Option<&str>,
) -> Result<()> {
    let cluster = super::driver_cluster(app, c).await?;
    let names: HashMap<_, _> = ngs.iter().map(|n| (n.uuid, n.name.as_str())).collect();
    let running: Vec<(String, String)> = app
        .backend
        .kubelet_versions(&cluster)
        .into_iter()
        .map(|k| {
            let ng = k.nodegroup.and_then(|u| names.get(&u));
            let what = match ng {
                Some(n) => format!("nodegroup {n} (machine {})", k.machine),
                None => format!("machine {}", k.machine),
            };
            (what, k.version)
        })
        .collect();
    upgrade::check_kubelet_skew(to_version, &running, app.config.upgrades.max_kubelet_skew)?;
    let Some(s) = cloud else {
        return Ok(()); // no catalog to look in (development identity)
    };
    if let Some(ident) = to.image_id.as_deref() {
        let img = cloud::image(s, ident).await?;
        upgrade::check_image(
            ident,
            img.os_distro.as_deref(),
            img.kube_version.as_deref(),
            c.resolved.0.os_distro.as_deref(),
            to.labels.0.get("kube_tag").map(String::as_str),
        )?;
    }
    let flavors = cloud::Flavors::fetch(s).await?;
    let mut surge = Need::default();
    for ng in ngs {
        let Some(flavor) = ng.flavor_id.as_deref() else {
            continue;
        };
        let boot =
            cloud::boot_volume_size(&ng.labels.0, app.config.openstack.default_boot_volume_size)?;
        let id = flavors.check(flavor, boot)?;
        // One machine more per control plane and per nodegroup with machines (maxSurge 1).
        if ng.is_master() || ng.node_count > 0 {
            let size = flavors.size(&id).unwrap_or_default();
            surge.instances += 1;
            surge.cores += u64::from(size.vcpus);
            surge.ram += size.ram_mib;
        }
    }
    if app.config.upgrades.check_quota && surge.instances > 0 {
        match lookups::compute_limits(s).await {
            Ok(l) => upgrade::check_quota(
                &Limits {
                    max_instances: l.max_total_instances,
                    used_instances: l.total_instances_used,
                    max_cores: l.max_total_cores,
                    used_cores: l.total_cores_used,
                    max_ram: l.max_total_ram_size,
                    used_ram: l.total_ram_used,
                },
                surge,
            )?,
            Err(e) => {
                tracing::info!(error = %e, "compute quota not read; the upgrade goes on without its check")
            }
        }
    }
    Ok(())
}
