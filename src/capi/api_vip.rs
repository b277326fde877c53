//! The floating IP of an API on a virtual IP (`kube_vip_enabled` with a floating IP, see
//! `values::vip`). CAPO makes the floating IP and makes it the endpoint, but without a load
//! balancer it associates it with the first control-plane machine's port, where it would stay
//! with that machine (and go with it). The create puts it on a port of its own that holds the
//! virtual IP, so Neutron forwards it to whichever machine kube-vip elected; CAPO leaves an
//! associated floating IP alone. The port is named after the cluster, so CAPO deletes it with a
//! network it made; the delete cleanup deletes the floating IP, and the port on a fixed network.

use serde_json::Value;

use super::driver::{Capi, CapiError, name_of, namespace_of};
use crate::domain::spec::Cluster;
use crate::openstack::UserSession;
use crate::openstack::workload;

/// The label that puts the API on a virtual IP.
const KUBE_VIP: &str = "kube_vip_enabled";

/// The name of the port holding the virtual IP: the cluster's CAPI name first, as CAPO's
/// cleanup of a network it made wants it.
pub fn vip_port_name(capi_name: &str) -> String {
    format!("{capi_name}-api-vip")
}

/// Whether the cluster's API is on a virtual IP of its control-plane machines.
pub fn on_virtual_ip(c: &Cluster) -> bool {
    virtual_ip_label(&c.labels)
}

fn virtual_ip_label(labels: &crate::domain::labels::Labels) -> bool {
    labels
        .get(KUBE_VIP)
        .and_then(|v| crate::domain::fields::bool_from_string(v.trim()))
        .unwrap_or(false)
}

/// What moving the API's floating IP to the virtual IP needs, read from the OpenStackCluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FloatingVip {
    /// No virtual IP, or no floating IP: nothing to move.
    NotWanted,
    /// CAPO has not made what it needs yet.
    Waiting(&'static str),
    Ready {
        vip: String,
        floating_ip: String,
        network: String,
        subnet: String,
    },
}

/// [`FloatingVip`] of cluster `c` whose OpenStackCluster is `osc` (as the watcher keeps it).
pub fn floating_vip(c: &Cluster, osc: Option<&Value>) -> FloatingVip {
    floating_vip_of(&c.labels, osc)
}

fn floating_vip_of(labels: &crate::domain::labels::Labels, osc: Option<&Value>) -> FloatingVip {
    if !virtual_ip_label(labels) {
        return FloatingVip::NotWanted;
    }
    let Some(osc) = osc else {
        return FloatingVip::Waiting("the OpenStackCluster");
    };
    let s = |p: &str| osc.pointer(p).and_then(Value::as_str).map(str::to_owned);
    // A failed OpenStackCluster makes no network: the create ends, its status says why.
    if osc.pointer("/spec/disableAPIServerFloatingIP") != Some(&Value::Bool(false))
        || s("/status/failureMessage").is_some()
    {
        return FloatingVip::NotWanted;
    }
    let Some(vip) = s("/spec/apiServerFixedIP") else {
        return FloatingVip::NotWanted;
    };
    let Some(floating_ip) = s("/spec/controlPlaneEndpoint/host") else {
        return FloatingVip::Waiting("CAPO's floating IP for the API");
    };
    let Some(network) = s("/status/network/id") else {
        return FloatingVip::Waiting("the cluster's network");
    };
    let subnets = osc
        .pointer("/status/network/subnets")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let holds = |sn: &Value| {
        sn.get("cidr")
            .and_then(Value::as_str)
            .and_then(|c| c.parse::<ipnet::IpNet>().ok())
            .zip(vip.parse::<std::net::IpAddr>().ok())
            .is_some_and(|(net, ip)| net.contains(&ip))
    };
    let Some(subnet) = subnets
        .iter()
        .find(|sn| holds(sn))
        .and_then(|sn| sn.get("id").and_then(Value::as_str))
    else {
        return FloatingVip::Waiting("the cluster's subnet");
    };
    FloatingVip::Ready {
        vip,
        floating_ip,
        network,
        subnet: subnet.to_owned(),
    }
}

/// CAPO's description of what it makes for the cluster (`names.GetDescription` of its cluster
/// resource name `<namespace>-<name>`): its floating IP for the API has it.
pub fn capo_description(namespace: &str, capi_name: &str) -> String {
    format!("Created by cluster-api-provider-openstack cluster {namespace}-{capi_name}")
}

impl Capi {
    /// Puts the API's floating IP on the virtual IP's port (made when missing), with the
    /// cluster's credential; what it still waits for, if anything. Idempotent.
    pub(super) async fn float_api_vip(&self, c: &Cluster) -> Result<Option<String>, CapiError> {
        if self.keystone.is_none() {
            // Nothing to act with (development without Keystone).
            return Ok(None);
        }
        let observed = self.observer.observed(c.uuid);
        let (vip, floating_ip, network, subnet) =
            match floating_vip(c, observed.openstack_cluster.as_deref()) {
                FloatingVip::NotWanted => return Ok(None),
                FloatingVip::Waiting(what) => return Ok(Some(what.to_owned())),
                FloatingVip::Ready {
                    vip,
                    floating_ip,
                    network,
                    subnet,
                } => (vip, floating_ip, network, subnet),
            };
        let Some(s) = self.cluster_session(c).await? else {
            return Ok(None);
        };
        let name = vip_port_name(&name_of(c));
        let port = match workload::ports_named(&s, &c.project_id, &name, Some(&network))
            .await?
            .into_iter()
            .next()
        {
            Some(id) => id,
            None => {
                let description = format!("Kubernetes API virtual IP of cluster {}", c.uuid);
                let id =
                    workload::create_port(&s, &network, &subnet, &vip, &name, &description).await?;
                tracing::info!(cluster = %c.uuid, port = %id, address = %vip, "API virtual IP port created");
                id
            }
        };
        let Some(fip) = workload::floating_ips(&s, &c.project_id)
            .await?
            .unwrap_or_default()
            .into_iter()
            .find(|f| f.address == floating_ip)
        else {
            return Ok(Some("CAPO's floating IP for the API".into()));
        };
        if fip.port_id.as_deref() != Some(port.as_str()) {
            workload::associate_floating_ip(&s, &fip.id, &port, &vip).await?;
            tracing::info!(cluster = %c.uuid, floating_ip = %fip.address, address = %vip, "API floating IP moved to the virtual IP");
        }
        Ok(None)
    }

    /// After the machines: the API's floating IP (CAPO deletes it only with the machine it was
    /// on) and the virtual IP's port (CAPO deletes it only on a network it made).
    pub(super) async fn cleanup_api_vip(
        &self,
        c: &Cluster,
        s: &UserSession,
        fips: &[workload::FloatingIp],
    ) -> Result<(), CapiError> {
        if !on_virtual_ip(c) {
            return Ok(());
        }
        let name = name_of(c);
        let description = capo_description(&namespace_of(&self.config, c), &name);
        for f in fips.iter().filter(|f| f.description == description) {
            workload::delete_floating_ip(s, &f.id).await?;
            tracing::info!(cluster = %c.uuid, floating_ip = %f.id, address = %f.address, "API floating IP deleted");
        }
        for id in workload::ports_named(s, &c.project_id, &vip_port_name(&name), None).await? {
            workload::delete_port(s, &id).await?;
            tracing::info!(cluster = %c.uuid, port = %id, "API virtual IP port deleted");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn osc(fip: bool) -> Value {
        json!({"spec": {"disableAPIServerFloatingIP": !fip, "apiServerFixedIP": "10.0.0.254",
                        "controlPlaneEndpoint": {"host": "203.0.113.7", "port": 6443}},
               "status": {"network": {"id": "n", "subnets": [
                   {"id": "other", "cidr": "10.9.0.0/24"}, {"id": "s", "cidr": "10.0.0.0/24"}]}}})
    }

    #[test]
    fn the_floating_ip_moves_once_capo_made_it_and_the_subnet_of_the_virtual_ip() {
        let labels: crate::domain::labels::Labels =
            [("kube_vip_enabled".to_string(), "true".to_string())].into();
        let wanted = |o: Option<&Value>| floating_vip_of(&labels, o);
        assert_eq!(
            wanted(Some(&osc(true))),
            FloatingVip::Ready {
                vip: "10.0.0.254".into(),
                floating_ip: "203.0.113.7".into(),
                network: "n".into(),
                subnet: "s".into()
            }
        );
        assert_eq!(wanted(Some(&osc(false))), FloatingVip::NotWanted);
        assert_eq!(wanted(None), FloatingVip::Waiting("the OpenStackCluster"));
        let mut pending = osc(true);
        pending["status"] = json!({});
        assert_eq!(
            wanted(Some(&pending)),
            FloatingVip::Waiting("the cluster's network")
        );
        pending["status"] = json!({"failureMessage": "no external network"});
        assert_eq!(wanted(Some(&pending)), FloatingVip::NotWanted);
        let plain = crate::domain::labels::Labels::new();
        assert_eq!(
            floating_vip_of(&plain, Some(&osc(true))),
            FloatingVip::NotWanted
        );
    }

    #[test]
    fn capos_description_names_its_cluster_resource() {
        assert_eq!(
            capo_description("magnum-p", "c0123"),
            "Created by cluster-api-provider-openstack cluster magnum-p-c0123"
        );
        assert!(vip_port_name("c0123").starts_with("c0123"));
    }
}
