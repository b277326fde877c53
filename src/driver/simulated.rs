//! The simulated driver: completes every operation after a configurable delay (a first step
//! requeued for that long), reporting the statuses and facts a real cluster would produce. Used
//! by `serve --dev` and the tests.

use std::time::Duration;

use super::{Backend, DriverFuture, Fact, Outcome, Report, Run};
use crate::domain::operation::OperationKind as K;
use crate::domain::spec::{ClusterSpec, Nodegroup, Operation};
use crate::domain::status::Status;

#[derive(Debug, Clone)]
pub struct SimulatedDriver {
    /// How long the simulated world takes to carry an operation out (the operation is parked).
    pub delay: Duration,
    /// How long each run itself takes, holding its worker (a slow management-cluster API).
    pub run: Duration,
}

/// Most addresses a simulated nodegroup lists: a schema-valid `node_count` goes up to 2^31−1,
/// and the simulator must not try to hold that many in memory (a real cloud's quota would stop
/// such a cluster long before).
const MAX_SIM_ADDRESSES: i32 = 4096;

/// Loopback addresses for simulated nodes (development mode hands out nothing a client could
/// follow off the machine): `127.<prefix>.<n / 256>.<n % 256>` for the n-th node from 1, at most [`MAX_SIM_ADDRESSES`].
fn addresses(prefix: u8, n: i32) -> Vec<String> {
    (0..n.clamp(0, MAX_SIM_ADDRESSES))
        .map(|i| i + 1)
        .map(|i| format!("127.{prefix}.{}.{}", (i >> 8) & 0xff, i & 0xff))
        .collect()
}

/// The addresses a real nodegroup of that size would report.
fn addresses_of(ng: &Nodegroup) -> Fact {
    let prefix = if ng.is_master() { 10 } else { 100 };
    Fact::NodegroupAddresses {
        nodegroup: ng.uuid,
        addresses: addresses(prefix, ng.node_count),
    }
}

/// The facts a real cluster would report (addresses, versions, nodegroup statuses) and the
/// outcome; the worker records both (the cluster's status, deleted rows).
fn report(spec: &ClusterSpec, op: &Operation) -> Report {
    let Ok(kind) = op.op_kind() else {
        // A kind of a newer version: nothing this driver can do.
        return Outcome::Done.into();
    };
    let cluster = &spec.cluster;
    let done = Outcome::Completed(Status::UpdateComplete);
    let mut facts = Vec::new();
    let outcome = match kind {
        K::Create => {
            for ng in &spec.nodegroups {
                facts.push(addresses_of(ng));
                facts.push(Fact::NodegroupStatus {
                    nodegroup: ng.uuid,
                    status: Status::CreateComplete,
                });
            }
            facts.push(Fact::Cluster {
                api_address: Some("https://127.0.0.1:6443".into()),
                coe_version: Some(
                    cluster
                        .labels
                        .get("kube_tag")
                        .cloned()
                        .unwrap_or_else(|| "v1.31.4".into()),
                ),
                container_version: Some("containerd 1.7".into()),
            });
            Outcome::Completed(Status::CreateComplete)
        }
        K::Delete => Outcome::ClusterDeleted,
        K::Resize | K::NodegroupCreate | K::NodegroupUpdate | K::Upgrade => {
            if let Some(ng) = op
                .nodegroup_uuid
                .and_then(|u| spec.nodegroups.iter().find(|n| n.uuid == u))
            {
                facts.push(addresses_of(ng));
                let status = if kind == K::NodegroupCreate {
                    Status::CreateComplete
                } else {
                    Status::UpdateComplete
                };
                facts.push(Fact::NodegroupStatus {
                    nodegroup: ng.uuid,
                    status,
                });
                if kind == K::Upgrade {
                    let image = op.payload.get("image_id").and_then(|v| v.as_str());
                    facts.push(Fact::NodegroupImage {
                        nodegroup: ng.uuid,
                        image: image.map(str::to_string),
                    });
                    if ng.is_default
                        && let Some(ct) = op
                            .payload
                            .get("cluster_template")
                            .and_then(|v| v.as_str())
                            .and_then(|s| uuid::Uuid::parse_str(s).ok())
                    {
                        facts.push(Fact::Template(ct));
                    }
                }
            }
            done
        }
        K::NodegroupDelete => match op.nodegroup_uuid {
            Some(ng) => Outcome::NodegroupDeleted(ng),
            None => done,
        },
        K::RotateCa | K::RotateCredential => done,
    };
    Report { outcome, facts }
}

impl Backend for SimulatedDriver {
    fn name(&self) -> &'static str {
        "simulated"
    }
    fn execute<'a>(&'a self, run: Run<'a>) -> DriverFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(self.run).await;
            // The simulated world takes `delay` to do anything: a first run records that it
            // started and comes back after the delay, holding no worker meanwhile.
            if !self.delay.is_zero() && run.op.step.get("started").is_none() {
                return Ok(Outcome::Requeue {
                    after: self.delay,
                    progress: None,
                    step: Some(serde_json::json!({ "started": true })),
                }
                .into());
            }
            Ok(report(run.spec, run.op))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_loopback_and_bounded() {
        assert_eq!(addresses(10, 2), ["127.10.0.1", "127.10.0.2"]);
        assert_eq!(addresses(100, 300)[299], "127.100.1.44");
        assert!(addresses(100, -1).is_empty());
        let many = addresses(100, i32::MAX);
        assert_eq!(many.len(), MAX_SIM_ADDRESSES as usize);
        assert!(many.iter().all(|a| {
            a.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
        }));
    }
}
