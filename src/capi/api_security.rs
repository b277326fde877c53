//! The machines' security groups of a cluster whose API `api_master_lb_allowed_cidrs`
//! restricts. CAPO's managed control-plane group always opens the API port to everyone, and
//! groups only add up, so such a cluster renders without `managedSecurityGroups` and the driver
//! makes the two groups itself (before the machines that name them are applied): CAPO's rules
//! with `allowAllInClusterTraffic`, except that the API port admits only the listener's list
//! (the allowed CIDRs and the management cluster's egress addresses) and the node subnet
//! (Octavia's amphorae reach their members from there). Found by name on every apply, their
//! rules set to exactly these; the delete cleanup removes them after the machines.

use super::driver::{Capi, CapiError};
use super::values::{ApiSecurityGroups, ResourceRef, Values};
use crate::domain::spec::Cluster;
use crate::openstack::UserSession;
use crate::openstack::workload::{self, SecurityGroupRule};

pub use super::values::{control_plane_group, worker_group};

const NODE_PORTS: (u16, u16) = (30000, 32767);

/// Whether security group `group` is one the driver makes for cluster `capi_name`.
pub fn drivers_group(capi_name: &str, group: &str) -> bool {
    group == control_plane_group(capi_name) || group == worker_group(capi_name)
}

/// Whether cluster `c` asks for allowed CIDRs (so may have the driver's groups).
pub fn may_have_groups(c: &Cluster) -> bool {
    ["api_master_lb_allowed_cidrs", "master_lb_allowed_cidrs"]
        .iter()
        .any(|k| c.labels.get(*k).is_some_and(|v| !v.trim().is_empty()))
}

fn ethertype(cidr: &str) -> &'static str {
    if cidr.contains(':') { "IPv6" } else { "IPv4" }
}

fn rule(direction: &str, ethertype: &str, description: &str) -> SecurityGroupRule {
    SecurityGroupRule {
        id: String::new(),
        direction: direction.into(),
        ethertype: ethertype.into(),
        protocol: None,
        port_range_min: None,
        port_range_max: None,
        remote_ip_prefix: None,
        remote_group_id: None,
        description: description.into(),
    }
}

fn from_group(group: &str, description: &str) -> SecurityGroupRule {
    SecurityGroupRule {
        remote_group_id: Some(group.into()),
        ..rule("ingress", "IPv4", description)
    }
}

fn tcp_from(cidr: &str, protocol: &str, ports: (u16, u16), description: &str) -> SecurityGroupRule {
    SecurityGroupRule {
        protocol: Some(protocol.into()),
        port_range_min: Some(ports.0),
        port_range_max: Some(ports.1),
        remote_ip_prefix: Some(cidr.into()),
        ..rule("ingress", ethertype(cidr), description)
    }
}

/// The rules of the control-plane group `own` (workers in `other`): all egress, everything
/// from the cluster's machines, the API port from `api_cidrs` and `node_cidrs` only.
pub fn control_plane_rules(
    own: &str,
    other: &str,
    api_port: u16,
    api_cidrs: &[String],
    node_cidrs: &[String],
) -> Vec<SecurityGroupRule> {
    let mut rules = common_rules(own, other);
    let mut seen = Vec::new();
    for cidr in api_cidrs.iter().chain(node_cidrs) {
        if !seen.contains(cidr) {
            seen.push(cidr.clone());
            rules.push(tcp_from(
                cidr,
                "tcp",
                (api_port, api_port),
                "Kubernetes API (api_master_lb_allowed_cidrs)",
            ));
        }
    }
    rules
}

/// The rules of the workers' group `own` (control plane in `other`): all egress, everything
/// from the cluster's machines, NodePorts from the node subnet (Octavia's members).
pub fn worker_rules(own: &str, other: &str, node_cidrs: &[String]) -> Vec<SecurityGroupRule> {
    let mut rules = common_rules(own, other);
    for cidr in node_cidrs {
        for protocol in ["tcp", "udp"] {
            rules.push(tcp_from(cidr, protocol, NODE_PORTS, "Node Port Services"));
        }
    }
    rules
}

fn common_rules(own: &str, other: &str) -> Vec<SecurityGroupRule> {
    vec![
        rule("egress", "IPv4", "Full open"),
        rule("egress", "IPv6", "Full open"),
        from_group(own, "In-cluster Ingress"),
        from_group(other, "In-cluster Ingress"),
    ]
}

/// What to delete from `observed` and add to it so that it admits exactly `desired`.
pub fn rule_changes(
    desired: &[SecurityGroupRule],
    observed: &[SecurityGroupRule],
) -> (Vec<String>, Vec<SecurityGroupRule>) {
    let stale = observed
        .iter()
        .filter(|o| !desired.iter().any(|d| d.same_traffic(o)))
        .map(|o| o.id.clone())
        .collect();
    let missing = desired
        .iter()
        .filter(|d| !observed.iter().any(|o| o.same_traffic(d)))
        .cloned()
        .collect();
    (stale, missing)
}

impl Capi {
    /// Makes the cluster's security groups when its API is restricted (`v.api_server`
    /// `security_groups`), with the cluster's credential, and sets their rules; before the
    /// machines that name them are applied. Idempotent.
    pub(super) async fn ensure_api_security_groups(
        &self,
        c: &Cluster,
        v: &Values,
    ) -> Result<(), CapiError> {
        let Some(groups) = &v.api_server.security_groups else {
            return Ok(());
        };
        let Some(s) = self.cluster_session(c).await? else {
            // Nothing to act with (development without Keystone).
            return Ok(());
        };
        let node_cidrs = node_cidrs(&s, v).await?;
        let ApiSecurityGroups {
            control_plane,
            worker,
            api_cidrs,
        } = groups;
        let cp = self
            .security_group(c, &s, control_plane, "control-plane")
            .await?;
        let w = self.security_group(c, &s, worker, "worker").await?;
        let port = v.api_server.port.unwrap_or(6443);
        for (id, desired) in [
            (
                &cp,
                control_plane_rules(&cp, &w, port, api_cidrs, &node_cidrs),
            ),
            (&w, worker_rules(&w, &cp, &node_cidrs)),
        ] {
            let observed = workload::security_group_rules(&s, id).await?;
            let (stale, missing) = rule_changes(&desired, &observed);
            for r in &stale {
                workload::delete_security_group_rule(&s, r).await?;
            }
            for r in &missing {
                workload::create_security_group_rule(&s, id, r).await?;
            }
            if !stale.is_empty() || !missing.is_empty() {
                tracing::info!(cluster = %c.uuid, security_group = %id, added = missing.len(), removed = stale.len(), "security group rules set");
            }
        }
        Ok(())
    }

    /// The id of the cluster's group `name`, made when missing.
    async fn security_group(
        &self,
        c: &Cluster,
        s: &UserSession,
        name: &str,
        machines: &str,
    ) -> Result<String, CapiError> {
        if let Some(g) = workload::security_groups_named(s, &c.project_id, name)
            .await?
            .into_iter()
            .next()
        {
            return Ok(g.id);
        }
        let description = format!(
            "Kubernetes {machines} machines of cluster {}: its API port only from \
             api_master_lb_allowed_cidrs (magnum-capi)",
            c.uuid
        );
        let id = workload::create_security_group(s, name, &description).await?;
        tracing::info!(cluster = %c.uuid, security_group = %id, name, "security group created");
        Ok(id)
    }
}

/// The CIDRs of the cluster's node subnet: the one CAPO makes, else the given subnet's, else
/// those of the given network.
async fn node_cidrs(s: &UserSession, v: &Values) -> Result<Vec<String>, CapiError> {
    let n = &v.networking;
    if let Some(m) = &n.managed_subnet {
        return Ok(vec![m.cidr.clone()]);
    }
    let by = |r: &ResourceRef| match (&r.id, &r.name) {
        (Some(id), _) => ("id", id.clone()),
        (None, name) => ("name", name.clone().unwrap_or_default()),
    };
    if let Some(subnet) = &n.subnet {
        let (key, value) = by(subnet);
        return Ok(workload::subnet_cidrs(s, &[(key, &value)]).await?);
    }
    let Some(network) = &n.network else {
        return Ok(Vec::new());
    };
    let networks = match by(network) {
        ("id", id) => vec![id],
        (_, name) => workload::network_ids(s, &[("name", &name)]).await?,
    };
    let mut cidrs = Vec::new();
    for id in &networks {
        cidrs.extend(workload::subnet_cidrs(s, &[("network_id", id)]).await?);
    }
    Ok(cidrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_sources(rules: &[SecurityGroupRule], port: u16) -> Vec<Option<&str>> {
        rules
            .iter()
            .filter(|r| r.direction == "ingress" && r.port_range_min == Some(port))
            .map(|r| r.remote_ip_prefix.as_deref())
            .collect()
    }

    #[test]
    fn the_api_port_admits_only_the_allowed_egress_and_node_cidrs() {
        let allowed = vec!["192.0.2.0/24".to_string(), "203.0.113.0/29".to_string()];
        let nodes = vec!["10.0.0.0/24".to_string(), "192.0.2.0/24".to_string()];
        let rules = control_plane_rules("cp", "w", 6443, &allowed, &nodes);
        assert_eq!(
            api_sources(&rules, 6443),
            vec![
                Some("192.0.2.0/24"),
                Some("203.0.113.0/29"),
                Some("10.0.0.0/24")
            ]
        );
        // No rule with a port range and no source: the cluster's own machines by group only.
        assert!(
            rules
                .iter()
                .filter(|r| r.direction == "ingress")
                .all(|r| r.remote_ip_prefix.is_some() || r.remote_group_id.is_some())
        );
        let groups: Vec<_> = rules
            .iter()
            .filter_map(|r| r.remote_group_id.as_deref())
            .collect();
        assert_eq!(groups, vec!["cp", "w"]);
    }

    #[test]
    fn workers_admit_node_ports_from_the_node_subnet_and_the_cluster() {
        let rules = worker_rules("w", "cp", &["10.0.0.0/24".to_string()]);
        assert_eq!(api_sources(&rules, 6443), Vec::<Option<&str>>::new());
        assert_eq!(api_sources(&rules, 30000).len(), 2);
        assert_eq!(rules.iter().filter(|r| r.direction == "egress").count(), 2);
    }

    #[test]
    fn rules_are_set_to_exactly_the_desired_ones() {
        let desired = worker_rules("w", "cp", &["10.0.0.0/24".to_string()]);
        // Neutron's own egress rules on a new group, and an open API port someone added.
        let mut observed: Vec<SecurityGroupRule> = desired[..2]
            .iter()
            .enumerate()
            .map(|(i, r)| SecurityGroupRule {
                id: format!("r{i}"),
                description: String::new(),
                ..r.clone()
            })
            .collect();
        observed.push(SecurityGroupRule {
            id: "open".into(),
            ..tcp_from("0.0.0.0/0", "tcp", (6443, 6443), "")
        });
        let (stale, missing) = rule_changes(&desired, &observed);
        assert_eq!(stale, vec!["open".to_string()]);
        assert_eq!(missing, desired[2..].to_vec());
        assert!(drivers_group("c1", &control_plane_group("c1")));
        assert!(!drivers_group("c1", &worker_group("c10")));
    }
}
