//! Versions that follow the cluster's Kubernetes minor (add-on charts, image tags): one
//! lookup in the operator's `"1.<minor>"` tables, with its fallback.

use crate::config::MinorTable;

/// The minor of a `v1.N.x` Kubernetes version.
fn kube_minor(kube_version: &str) -> u32 {
    kube_version
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0)
}

/// `table`'s entry for the minor of `kube_version` (keys `"1.<minor>"`).
fn for_minor(table: &MinorTable, kube_version: &str) -> Option<String> {
    table
        .get(&format!("1.{}", kube_minor(kube_version)))
        .cloned()
}

/// An image tag for `kube_version` from `table`, else `v1.<minor>.0`.
pub(super) fn tag_for_minor(table: &MinorTable, kube_version: &str) -> String {
    for_minor(table, kube_version).unwrap_or_else(|| format!("v1.{}.0", kube_minor(kube_version)))
}

/// A chart version that follows the Kubernetes minor: `table`'s, else `fallback`.
pub(super) fn chart_for_minor(table: &MinorTable, fallback: &str, kube_version: &str) -> String {
    for_minor(table, kube_version).unwrap_or_else(|| fallback.to_owned())
}
