//! The OpenStackCluster controller (CAPO): network, router, security groups, optional load
//! balancer and the API endpoint (a loopback TLS listener, see `endpoint`), or an injected
//! external-network failure.

use std::sync::Arc;

use serde_json::{Value, json};

use super::ctx::Ctx;
use crate::simkube::objects::*;
use crate::simkube::store::{StoreError, now_rfc3339};

/// `cidr`'s network with the last octet replaced (`10.6.0.0/24`, 10 → `10.6.0.10`).
fn host_in(cidr: &str, host: u8) -> String {
    let net = cidr.split('/').next().unwrap_or_default();
    match net.rsplit_once('.') {
        Some((prefix, _)) if net.split('.').count() == 4 => format!("{prefix}.{host}"),
        _ => format!("10.6.0.{host}"),
    }
}

pub(super) fn infra_cluster(cx: &Ctx<'_>, osc: &Value) -> Result<(), StoreError> {
    if is_deleting(osc) || bool_at(osc, &["status", "ready"]) {
        return Ok(());
    }
    // CAPO waits until the CAPI cluster controller has set the owner reference.
    let Some((cluster_name, _)) = owners(osc, "Cluster").into_iter().next() else {
        return Ok(());
    };
    let (ns, now) = (namespace(osc), now_rfc3339());
    let prev = osc.get("status");
    let external = str_at(osc, &["spec", "externalNetwork", "id"])
        .or_else(|| str_at(osc, &["spec", "externalNetwork", "filter", "name"]));
    if let Some(ext) = external.filter(|e| cx.fails(e)) {
        let message = format!(
            "failed to reconcile external network: failed to get external network: no external \
             network found matching {ext}"
        );
        let status = json!({
            "ready": false,
            "failureReason": "UpdateError",
            "failureMessage": message,
            "conditions": conditions_v1beta1(prev, &[Cond::new("Ready", CondStatus::False, "UpdateError", message.clone())], &now),
        });
        cx.set_status(Kind::InfraCluster, osc, status)?;
        return Ok(());
    }
    // The load balancer / floating IP in front of the API is a loopback TLS listener (whatever
    // `apiServerFloatingIP` or `apiServerPort` asked for): a client that follows the endpoint
    // reaches the simulated workload API, never another machine.
    let port = cx
        .sim
        .open_endpoint(ns, &cluster_name)
        // Conflict: the step loop retries it.
        .map_err(|e| StoreError::Conflict(format!("cannot open the workload API endpoint: {e}")))?;
    let host = std::net::Ipv4Addr::LOCALHOST.to_string();
    let current = (
        str_at(osc, &["spec", "controlPlaneEndpoint", "host"]),
        i64_at(osc, &["spec", "controlPlaneEndpoint", "port"]),
    );
    let osc = if current != (Some(host.as_str()), Some(i64::from(port))) {
        let endpoint = json!({"host": host, "port": port});
        cx.edit(Kind::InfraCluster, osc, |o| {
            set_at(o, &["spec"], "controlPlaneEndpoint", endpoint)
        })?
    } else {
        Arc::new(osc.clone())
    };
    let cidr = at(&osc, &["spec", "managedSubnets"])
        .and_then(Value::as_array)
        .and_then(|s| s.first())
        .and_then(|s| str_at(s, &["cidr"]))
        .unwrap_or("10.6.0.0/24")
        .to_string();
    let base = format!("k8s-clusterapi-cluster-{ns}-{cluster_name}");
    let id = || uuid::Uuid::new_v4().to_string();
    let (network_id, subnet_id) = (id(), id());
    let mut status = json!({
        "ready": true,
        "initialization": {"provisioned": true},
        "externalNetwork": {"id": external.map(str::to_string).unwrap_or_else(id), "name": "public"},
        "network": {
            "id": network_id,
            "name": base,
            "subnets": [{"cidr": cidr, "id": subnet_id, "name": base}],
        },
        "router": {"id": id(), "name": base, "ips": [cx.sim.next_floating_ip()]},
        "controlPlaneSecurityGroup": {"id": id(), "name": format!("{base}-secgroup-controlplane")},
        "workerSecurityGroup": {"id": id(), "name": format!("{base}-secgroup-worker")},
        "failureDomains": {"nova": {"controlPlane": true}},
        "conditions": conditions_v1beta1(prev, &[Cond::new("Ready", CondStatus::True, "Ready", "")], &now),
    });
    if bool_at(&osc, &["spec", "apiServerLoadBalancer", "enabled"]) {
        status["apiServerLoadBalancer"] = json!({
            "id": id(),
            "name": format!("{base}-kubeapi"),
            "ip": host,
            "internalIP": host_in(&cidr, 250),
            "loadBalancerNetwork": {"id": network_id, "name": base, "subnets": [{"cidr": cidr, "id": subnet_id, "name": base}]},
        });
    }
    cx.set_status(Kind::InfraCluster, &osc, status)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet_hosts() {
        assert_eq!(host_in("10.6.0.0/24", 250), "10.6.0.250");
        assert_eq!(host_in("garbage", 7), "10.6.0.7");
    }
}
