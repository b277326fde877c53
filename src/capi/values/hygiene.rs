//! Cluster hygiene the drivers lack (issue 46): etcd encryption at rest for Secrets (the
//! kube-apiserver reads an `EncryptionConfiguration` the control-plane nodes get from the
//! `<cluster>-etcd-encryption` Secret on the management cluster, written by the driver, never
//! rendered) and the periodic defragmentation of etcd (a CronJob on a control-plane node,
//! delivered by the cloud-config ClusterResourceSet).

use super::document::{HostPathMount, NameValue, nv};
use super::error::{ValuesError, bad};
use super::labels::LabelView;

/// The label that switches encryption at rest on (default on for a new cluster).
pub const ENCRYPTION_LABEL: &str = "etcd_encryption_enabled";
/// The label with the defragmentation's cron schedule (`off`: none).
pub const DEFRAG_LABEL: &str = "etcd_defrag_schedule";
/// Sundays at 03:17, off the hour most jobs run at.
pub const DEFAULT_DEFRAG_SCHEDULE: &str = "17 3 * * 0";
/// The etcd image whose `etcdctl` defragments (any 3.5+ client speaks to the members).
pub const ETCD_IMAGE: &str = "registry.k8s.io/etcd:3.6.4-0";

const ENCRYPTION_DIR: &str = "/etc/kubernetes/encryption";
/// The key of the configuration in the Secret.
pub const ENCRYPTION_KEY: &str = "config.yaml";

/// `<cluster>-etcd-encryption`: the Secret with the cluster's `EncryptionConfiguration`.
pub fn encryption_secret_name(cluster: &str) -> String {
    format!("{cluster}-etcd-encryption")
}

/// What encryption at rest adds: the API server's flag and mount, and the file every
/// control-plane node gets from the Secret (KubeadmConfig `files` `contentFrom`).
pub(super) fn encryption_parts(cluster: &str) -> (NameValue, HostPathMount, serde_json::Value) {
    let path = format!("{ENCRYPTION_DIR}/{ENCRYPTION_KEY}");
    (
        nv("encryption-provider-config", path.clone()),
        HostPathMount {
            name: "etcd-encryption".into(),
            host_path: ENCRYPTION_DIR.into(),
            mount_path: ENCRYPTION_DIR.into(),
            read_only: true,
            path_type: "DirectoryOrCreate".into(),
        },
        serde_json::json!({
            "path": path, "owner": "root:root", "permissions": "0600",
            "contentFrom": {"secret": {"name": encryption_secret_name(cluster),
                                       "key": ENCRYPTION_KEY}},
        }),
    )
}

/// Whether the labels ask for encryption at rest (`default`: what a cluster without the label
/// gets — a new one on, an existing one what it has).
pub(super) fn encryption_wanted(view: &LabelView<'_>, default: bool) -> Result<bool, ValuesError> {
    view.bool(&[ENCRYPTION_LABEL], default)
}

/// The defragmentation's schedule (`None`: off), checked as a five-field cron expression.
pub(super) fn defrag_schedule(view: &LabelView<'_>) -> Result<Option<String>, ValuesError> {
    let Some(v) = view.raw(&[DEFRAG_LABEL])? else {
        return Ok(Some(DEFAULT_DEFRAG_SCHEDULE.into()));
    };
    let v = v.1.trim();
    if matches!(v.to_ascii_lowercase().as_str(), "off" | "false" | "none") {
        return Ok(None);
    }
    let fields: Vec<&str> = v.split_whitespace().collect();
    let ok = fields.len() == 5
        && fields.iter().all(|f| {
            f.chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '*' | '/' | ',' | '-'))
        });
    if !ok {
        return Err(bad(
            DEFRAG_LABEL,
            v,
            "must be a five-field cron schedule like \"17 3 * * 0\", or off",
        ));
    }
    Ok(Some(fields.join(" ")))
}

/// The defragmentation CronJob's manifest (a document of the cloud-config ClusterResourceSet):
/// on a control-plane node's host network, `etcdctl defrag --cluster` defragments every member
/// in turn with the etcd health-check client certificate kubeadm made there.
pub fn defrag_manifest(schedule: &str, image: &str) -> String {
    let doc = serde_json::json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "etcd-defrag", "namespace": "kube-system"},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {"backoffLimit": 1, "activeDeadlineSeconds": 1800,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "hostNetwork": true,
                    "priorityClassName": "system-cluster-critical",
                    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                    "tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                                     "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "defrag",
                        "image": image,
                        "command": ["etcdctl", "--endpoints=https://127.0.0.1:2379",
                            "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
                            "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
                            "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
                            "--command-timeout=10m", "defrag", "--cluster"],
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                      "limits": {"memory": "128Mi"}},
                        "volumeMounts": [{"name": "etcd-pki", "mountPath": "/etc/kubernetes/pki/etcd",
                                          "readOnly": true}],
                    }],
                    "volumes": [{"name": "etcd-pki",
                                 "hostPath": {"path": "/etc/kubernetes/pki/etcd", "type": "Directory"}}],
                }}}},
        },
    });
    doc.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::values::cx::label_map as l;

    #[test]
    fn the_defrag_schedule_is_a_cron_expression_or_off() {
        let s = |v: &str| defrag_schedule(&LabelView::cluster(&l(&[(DEFRAG_LABEL, v)])));
        assert_eq!(
            defrag_schedule(&LabelView::cluster(&l(&[]))).unwrap(),
            Some(DEFAULT_DEFRAG_SCHEDULE.into())
        );
        assert_eq!(s("0  4 * * 1-5").unwrap(), Some("0 4 * * 1-5".into()));
        assert_eq!(s("off").unwrap(), None);
        for wrong in ["weekly", "0 4 * *", "0 4 * * 1; rm -rf /"] {
            assert!(s(wrong).is_err(), "{wrong}");
        }
    }
}
