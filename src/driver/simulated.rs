//! The simulated driver: completes every operation after a configurable delay (a first step
//! requeued for that long), writing the statuses and facts a real cluster would produce. Used by `serve --dev` and the tests.

use std::time::Duration;

use sqlx::PgPool;

use super::{Backend, DriverError, DriverFuture, Outcome};
use crate::db::DbError;
use crate::db::clusters::{self as cdb, DriverFacts};
use crate::db::nodegroups as ndb;
use crate::db::operations::OperationRow;
use crate::domain::operation::OperationKind as K;
use crate::domain::status::Status;

#[derive(Debug, Clone)]
pub struct SimulatedDriver {
    /// How long the simulated world takes to carry an operation out (the operation is parked).
    pub delay: Duration,
    /// How long each run itself takes, holding its worker (a slow management-cluster API).
    pub run: Duration,
}

fn transient(e: DbError) -> DriverError {
    DriverError::Transient(Box::new(e))
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

impl SimulatedDriver {
    /// Writes the facts a real cluster would report (addresses, versions, nodegroup statuses);
    /// the worker records the outcome (the cluster's status, deleted rows).
    async fn run(&self, pool: &PgPool, op: &OperationRow) -> Result<Outcome, DbError> {
        let mut tx = pool.begin().await?;
        let Some(cluster) = cdb::lock(&mut *tx, op.cluster_uuid).await? else {
            // The cluster is gone: nothing left to do.
            return Ok(Outcome::Done);
        };
        let Ok(kind) = op.op_kind() else {
            return Ok(Outcome::Done); // a kind of a newer version: nothing this driver can do
        };
        let done = Outcome::Completed(Status::UpdateComplete);
        let outcome = match kind {
            K::Create => {
                for ng in ndb::of_cluster(&mut *tx, cluster.uuid).await? {
                    let prefix = if ng.is_master() { 10 } else { 100 };
                    ndb::set_addresses(&mut *tx, ng.uuid, &addresses(prefix, ng.node_count))
                        .await?;
                    ndb::set_status(&mut *tx, ng.uuid, Status::CreateComplete.as_str(), None)
                        .await?;
                }
                let facts = DriverFacts {
                    api_address: Some("https://127.0.0.1:6443".into()),
                    coe_version: Some(
                        cluster
                            .labels
                            .0
                            .get("kube_tag")
                            .cloned()
                            .unwrap_or_else(|| "v1.31.4".into()),
                    ),
                    container_version: Some("containerd 1.7".into()),
                };
                cdb::set_driver_facts(&mut *tx, cluster.uuid, &facts).await?;
                Outcome::Completed(Status::CreateComplete)
            }
            K::Delete => Outcome::ClusterDeleted,
            K::Resize | K::NodegroupCreate | K::NodegroupUpdate | K::Upgrade => {
                if let Some(ng_uuid) = op.nodegroup_uuid
                    && let Some(ng) = ndb::of_cluster(&mut *tx, cluster.uuid)
                        .await?
                        .into_iter()
                        .find(|n| n.uuid == ng_uuid)
                {
                    let prefix = if ng.is_master() { 10 } else { 100 };
                    ndb::set_addresses(&mut *tx, ng.uuid, &addresses(prefix, ng.node_count))
                        .await?;
                    let st = if kind == K::NodegroupCreate {
                        Status::CreateComplete
                    } else {
                        Status::UpdateComplete
                    };
                    ndb::set_status(&mut *tx, ng.uuid, st.as_str(), None).await?;
                    if kind == K::Upgrade {
                        let image = op.payload.0.get("image_id").and_then(|v| v.as_str());
                        ndb::set_image(&mut *tx, ng.uuid, image).await?;
                        if ng.is_default
                            && let Some(ct) = op
                                .payload
                                .0
                                .get("cluster_template")
                                .and_then(|v| v.as_str())
                                .and_then(|s| uuid::Uuid::parse_str(s).ok())
                        {
                            cdb::set_template(&mut *tx, cluster.uuid, ct).await?;
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
        tx.commit().await?;
        Ok(outcome)
    }
}

impl Backend for SimulatedDriver {
    fn name(&self) -> &'static str {
        "simulated"
    }
    fn execute<'a>(
        &'a self,
        pool: &'a PgPool,
        op: &'a OperationRow,
        _caller: Option<&'a secrecy::SecretString>,
    ) -> DriverFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(self.run).await;
            // The simulated world takes `delay` to do anything: a first run records that it
            // started and comes back after the delay, holding no worker meanwhile.
            if !self.delay.is_zero() && op.step().get("started").is_none() {
                return Ok(Outcome::Requeue {
                    after: self.delay,
                    progress: None,
                    step: Some(serde_json::json!({ "started": true })),
                });
            }
            self.run(pool, op).await.map_err(transient)
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
