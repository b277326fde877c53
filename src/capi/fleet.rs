//! Several management clusters behind one backend (issue 19): [`Fleet`] routes each operation
//! and request-time call to the `Capi` of the cluster's management cluster; [`Reach`] (`reach.rs`) is what
//! the probes found out about each one's API, so that an unreachable one only defers its own
//! clusters' operations; [`versions`] finds the CAPI/CAPO versions a management cluster runs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::driver::{Capi, CapiDriver};
use super::kinds;
use crate::domain::certificates::CaKind;
use crate::domain::spec::{Cluster, ClusterSpec, Nodegroup, Operation, Template};
use crate::driver::{
    Backend, BackendError, BackendFuture, Check, Credentials, DriverError, DriverFuture, Forgotten,
    Journal, Report, Run,
};
use crate::openstack::UserSession;

/// How long one probe of a management cluster's API may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Asks the management cluster's API for its version.
pub async fn probe(capi: &Capi) -> Result<String, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, capi.mgmt.client().apiserver_version()).await {
        Ok(Ok(v)) => Ok(v.git_version),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {}s", PROBE_TIMEOUT.as_secs())),
    }
}

pub use crate::domain::placement::shown;

/// Probes `capi` every `every` until `stop`, recording the outcome (and the
/// `magnum_capi_management_cluster_up` gauge).
pub async fn watch_reachability(capi: Arc<Capi>, every: Duration, mut stop: watch::Receiver<bool>) {
    loop {
        let outcome = probe(&capi).await.map(drop);
        crate::telemetry::management_cluster_up(shown(&capi.name), outcome.is_ok());
        if let Err(why) = &outcome
            && capi.reach.down().is_none()
        {
            tracing::warn!(management_cluster = shown(&capi.name), error = %why, "management cluster unreachable; its clusters' operations wait");
        }
        if capi.reach.record(outcome) && capi.reach.down().is_none() {
            tracing::info!(
                management_cluster = shown(&capi.name),
                "management cluster reachable again"
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
    }
}

/// How long a deferred operation waits: longer the longer its management cluster has been
/// unreachable (a quarter of that), between half a second and 30 s.
fn defer_ms(down_for: Duration) -> i64 {
    i64::try_from(down_for.as_millis() / 4)
        .unwrap_or(i64::MAX)
        .clamp(500, 30_000)
}

fn unreachable_reason(name: &str, why: &str) -> String {
    format!(
        "The management cluster {} is unreachable ({why}); the operation waits for it",
        shown(name)
    )
}

/// The backend over several management clusters: each cluster's calls go to the one recorded
/// on its row (`management_cluster`; none: the unnamed one).
#[derive(Debug, Clone)]
pub struct Fleet {
    members: Vec<CapiDriver>,
}

impl Fleet {
    /// The fleet of `members` (at least one); their observers are linked so that a cluster
    /// touched through any of them reaches its own status writer.
    pub fn new(members: &[Arc<Capi>]) -> Self {
        let observers: Vec<_> = members.iter().map(|m| m.observer.clone()).collect();
        super::watch::Observer::link(&observers);
        Self {
            members: members.iter().cloned().map(CapiDriver).collect(),
        }
    }

    pub fn members(&self) -> impl Iterator<Item = &Arc<Capi>> {
        self.members.iter().map(|d| &d.0)
    }

    fn member(&self, name: &str) -> Option<&CapiDriver> {
        self.members.iter().find(|d| d.0.name == name)
    }

    /// The driver of `c`'s management cluster, if it is configured.
    fn configured(&self, c: &Cluster) -> Result<&CapiDriver, BackendError> {
        let name = c.management_cluster_name();
        self.member(name).ok_or_else(|| {
            BackendError::Unavailable(format!(
                "the cluster's management cluster {} is not configured",
                shown(name)
            ))
        })
    }

    /// The driver of `c`'s management cluster, if it is configured and reachable now.
    fn serving(&self, c: &Cluster) -> Result<&CapiDriver, BackendError> {
        let name = c.management_cluster_name();
        let d = self.configured(c)?;
        match d.0.reach.down() {
            Some((why, _)) => Err(BackendError::Unavailable(format!(
                "the cluster's management cluster {} is unreachable: {why}",
                shown(name)
            ))),
            None => Ok(d),
        }
    }

    fn any(&self) -> &CapiDriver {
        &self.members[0]
    }

    async fn execute_routed(&self, run: Run<'_>) -> Result<Report, DriverError> {
        let name = run.spec.placement.as_str();
        let Some(d) = self.member(name) else {
            tracing::error!(
                management_cluster = shown(name),
                "the cluster's management cluster is not configured"
            );
            return Err(DriverError::Deferred {
                reason: format!(
                    "The management cluster {} is not configured; the operation waits for it",
                    shown(name)
                ),
                retry_ms: 30_000,
            });
        };
        if let Some((why, down_for)) = d.0.reach.down() {
            return Err(DriverError::Deferred {
                reason: unreachable_reason(name, &why),
                retry_ms: defer_ms(down_for),
            });
        }
        match d.0.run(run).await {
            Ok(outcome) => Ok(outcome),
            Err(e) if e.is_transient() => {
                // Unreachable since the last probe: wait for it instead of spending attempts.
                if let Err(why) = probe(&d.0).await {
                    d.0.reach.record(Err(why.clone()));
                    return Err(DriverError::Deferred {
                        reason: unreachable_reason(name, &why),
                        retry_ms: defer_ms(Duration::ZERO),
                    });
                }
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl Backend for Fleet {
    fn name(&self) -> &'static str {
        "capi"
    }
    fn execute<'a>(&'a self, run: Run<'a>) -> DriverFuture<'a> {
        Box::pin(self.execute_routed(run))
    }
    fn changes(&self) -> Vec<tokio::sync::broadcast::Receiver<uuid::Uuid>> {
        self.members.iter().flat_map(|m| m.changes()).collect()
    }
    fn finished(&self, op: &Operation) {
        // Linked observers: the cluster's own writer re-evaluates it.
        self.any().finished(op);
    }
    fn kubelet_versions(&self, cluster: &Cluster) -> Vec<crate::driver::KubeletVersion> {
        self.configured(cluster)
            .map(|d| d.kubelet_versions(cluster))
            .unwrap_or_default()
    }
    fn ca_certificate<'a>(
        &'a self,
        cluster: &'a Cluster,
        kind: CaKind,
    ) -> BackendFuture<'a, Option<String>> {
        match self.serving(cluster) {
            Ok(d) => d.ca_certificate(cluster, kind),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn sign_certificate<'a>(
        &'a self,
        cluster: &'a Cluster,
        kind: CaKind,
        csr: &'a str,
        validity: Duration,
    ) -> BackendFuture<'a, Option<String>> {
        match self.serving(cluster) {
            Ok(d) => d.sign_certificate(cluster, kind, csr, validity),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn validate_template(&self, template: &Template) -> Result<(), BackendError> {
        self.any().validate_template(template)
    }
    // An administrator's command: the cluster's own management cluster, reachable or not by the
    // last probe (its answer is the test).
    fn leftovers<'a>(&'a self, cluster: &'a Cluster) -> BackendFuture<'a, Vec<String>> {
        match self.configured(cluster) {
            Ok(d) => d.leftovers(cluster),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn forget<'a>(&'a self, cluster: &'a Cluster) -> BackendFuture<'a, Forgotten> {
        match self.configured(cluster) {
            Ok(d) => d.forget(cluster),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn validate_cluster(
        &self,
        template: &Template,
        cluster: &Cluster,
        nodegroups: &[Nodegroup],
    ) -> Result<(), BackendError> {
        // The placed one's settings (its egress addresses) judge what it will render.
        let d = self.member(cluster.management_cluster_name());
        d.unwrap_or_else(|| self.any())
            .validate_cluster(template, cluster, nodegroups)
    }
    fn readiness(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Check>> + Send + '_>> {
        Box::pin(async move {
            let several = self.members.len() > 1;
            let all = futures::future::join_all(self.members.iter().map(|d| async move {
                let name = shown(&d.0.name).to_string();
                (name, d.0.readiness().await)
            }))
            .await;
            let mut checks = Vec::new();
            let mut reachable = Vec::new();
            let mut unreachable = Vec::new();
            for (name, found) in all {
                let up = found.iter().all(|c| c.ok);
                if up {
                    reachable.push(name.clone());
                } else {
                    unreachable.push(name.clone());
                }
                for mut c in found {
                    c.name = format!("{}:{name}", c.name);
                    c.optional = several;
                    checks.push(c);
                }
            }
            if several {
                let detail = format!(
                    "{} of {} usable{}",
                    reachable.len(),
                    reachable.len() + unreachable.len(),
                    if unreachable.is_empty() {
                        String::new()
                    } else {
                        format!("; not: {}", unreachable.join(", "))
                    }
                );
                // Ready while any can take clusters: the others' clusters wait, reads go on.
                let result = if reachable.is_empty() {
                    Err(detail)
                } else {
                    Ok(detail)
                };
                checks.insert(0, Check::new("management_clusters", result));
            }
            checks
        })
    }
    fn permissions(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Check>> + Send + '_>> {
        Box::pin(async move {
            futures::future::join_all(self.members.iter().map(|d| async move {
                let mut c = d.0.permissions().await;
                c.name = format!("{}:{}", c.name, shown(&d.0.name));
                c
            }))
            .await
        })
    }
    fn credentials(&self) -> Credentials {
        Credentials::Staged
    }
    fn stage_credential<'a>(
        &'a self,
        journal: &'a dyn Journal,
        spec: &'a ClusterSpec,
        session: &'a UserSession,
        user_id: &'a str,
        roles: &'a [String],
        implicit: bool,
    ) -> BackendFuture<'a, Value> {
        match self.serving(&spec.cluster) {
            Ok(d) => d.stage_credential(journal, spec, session, user_id, roles, implicit),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn discard_staged<'a>(
        &'a self,
        journal: &'a dyn Journal,
        cluster: &'a Cluster,
        payload: &'a Value,
    ) -> BackendFuture<'a, ()> {
        match self.serving(cluster) {
            Ok(d) => d.discard_staged(journal, cluster, payload),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
}

/// The provider versions a management cluster runs, for `magnum-capi management-clusters`:
/// `(provider, version)` from clusterctl's provider Deployments (their image tags), else the
/// API version served for the provider's group.
pub async fn versions(capi: &Capi) -> Vec<(&'static str, String)> {
    let providers = [
        ("CAPI", "cluster-api", "cluster.x-k8s.io"),
        (
            "CAPO",
            "infrastructure-openstack",
            "infrastructure.cluster.x-k8s.io",
        ),
    ];
    let deployments = tokio::time::timeout(
        PROBE_TIMEOUT,
        capi.mgmt
            .list_all(kinds::DEPLOYMENT, "cluster.x-k8s.io/provider"),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default();
    let groups = tokio::time::timeout(PROBE_TIMEOUT, capi.mgmt.client().list_api_groups())
        .await
        .ok()
        .and_then(Result::ok);
    let mut out = Vec::new();
    for (shown, provider, group) in providers {
        let image = deployments
            .iter()
            .filter(|d| {
                d.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("cluster.x-k8s.io/provider"))
                    .is_some_and(|p| p == provider)
            })
            .find_map(|d| {
                d.data
                    .pointer("/spec/template/spec/containers/0/image")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
        let found = match image {
            Some(i) => i
                .rsplit_once(':')
                .map_or(i.clone(), |(_, tag)| tag.to_string()),
            None => match groups
                .as_ref()
                .and_then(|g| g.groups.iter().find(|g| g.name == group))
            {
                Some(g) => format!(
                    "unknown (API {})",
                    g.preferred_version
                        .as_ref()
                        .map_or_else(|| "?".to_string(), |v| v.group_version.clone())
                ),
                None => "not installed".to_string(),
            },
        };
        out.push((shown, found));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferral_grows_with_the_outage() {
        assert_eq!(defer_ms(Duration::ZERO), 500);
        assert_eq!(defer_ms(Duration::from_secs(8)), 2000);
        assert_eq!(defer_ms(Duration::from_secs(3600)), 30_000);
    }
}
