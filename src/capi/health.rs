//! What the driver needs of the management cluster to work, checked on demand (`/readyz`,
//! `magnum-capi check`): its API answers, and every CAPI/CAPO/CAAPH kind the driver writes is
//! served at the version the driver writes it in.

use std::collections::BTreeMap;
use std::time::Duration;

use super::driver::Capi;
use super::kinds::{self, Gvk};
use crate::driver::Check;

/// How long one question to the management cluster may take (the client's own retries of a
/// 503 would otherwise outlast a probe).
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// The custom resources the driver writes or reads, at the versions it uses (CAPI v1.14
/// `v1beta2`, CAPO v0.14 `v1beta1`, CAAPH v0.6 `v1alpha1`): every kind of the kinds table that
/// is not built into Kubernetes (the `*.x-k8s.io` groups; `apps` and `rbac` are built in).
pub fn required() -> impl Iterator<Item = Gvk> {
    kinds::ALL.into_iter().filter(|(av, _)| {
        av.split_once('/')
            .is_some_and(|(g, _)| g.ends_with(".x-k8s.io"))
    })
}

impl Capi {
    /// The management cluster answers (its version), and serves every [`required`] kind.
    pub async fn readiness(&self) -> Vec<Check> {
        let client = self.mgmt.client();
        let version = match tokio::time::timeout(ASK_TIMEOUT, client.apiserver_version()).await {
            Ok(Ok(v)) => v.git_version,
            answer => {
                let why = match answer {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {}s", ASK_TIMEOUT.as_secs()),
                };
                return vec![
                    Check::new("management_cluster", Err(format!("unreachable: {why}"))),
                    Check::new("crds", Err("not checked: the API is unreachable".into())),
                ];
            }
        };
        let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (gv, kind) in required() {
            by_group.entry(gv).or_default().push(kind);
        }
        // One question per API group, asked at once (a probe waits for the slowest only).
        let answers = futures::future::join_all(by_group.iter().map(|(gv, wanted)| async move {
            match tokio::time::timeout(ASK_TIMEOUT, client.list_api_group_resources(gv)).await {
                Ok(Ok(list)) => wanted
                    .iter()
                    .filter(|k| !list.resources.iter().any(|r| r.kind == **k))
                    .map(|k| format!("{k} ({gv})"))
                    .collect::<Vec<_>>(),
                _ => wanted.iter().map(|k| format!("{k} ({gv})")).collect(),
            }
        }))
        .await;
        let missing: Vec<String> = answers.into_iter().flatten().collect();
        let crds = if missing.is_empty() {
            Ok(format!("{} kinds served", required().count()))
        } else {
            Err(format!("not served: {}", missing.join(", ")))
        };
        vec![
            Check::new("management_cluster", Ok(format!("Kubernetes {version}"))),
            Check::new("crds", crds),
        ]
    }
}
