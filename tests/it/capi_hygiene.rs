//! Cluster hygiene on the simulated management cluster (issue 46 item 5): Secrets encrypted at
//! rest in etcd (`etcd_encryption_enabled`, on for a new cluster; the key in a Secret beside the
//! CAs, read by the control-plane nodes' KubeadmConfig `files`), its key rotated with the CA
//! rotation, the etcd defragmentation CronJob (`etcd_defrag_schedule`), and the autoscaler
//! restarted by a CA rotation (its kubeconfig changes).

use crate::common::capi::{capi_app_on, objects, secret_text, template_with};
use crate::common::*;

use magnum_capi::capi::encryption::keys_of;
use serde_json::{Value, json};

/// A complete cluster of ALICE with `labels` on a template of Kubernetes v1.33.5; its uuid.
async fn cluster(t: &TestApp, labels: Value) -> String {
    let ct = template_with(t, "k", json!({ "labels": labels })).await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "c", "cluster_template_id": ct, "node_count": 1}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    c
}

fn named(
    app: &crate::common::capi::CapiApp,
    av: &str,
    kind: &str,
    c: &str,
    suffix: &str,
) -> Option<Value> {
    let (_, name) = crate::common::capi::capi_names(c);
    objects(app, av, kind, c)
        .into_iter()
        .find(|o| o["metadata"]["name"] == format!("{name}-{suffix}").as_str())
}

fn kcp(app: &crate::common::capi::CapiApp, c: &str) -> Value {
    named(
        app,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        c,
        "control-plane",
    )
    .expect("the control plane")
}

/// The key names of the cluster's encryption configuration.
fn key_names(app: &crate::common::capi::CapiApp, c: &str) -> Vec<String> {
    let s = named(app, "v1", "Secret", c, "etcd-encryption").expect("the encryption Secret");
    keys_of(&secret_text(&s, "config.yaml"))
        .into_iter()
        .map(|k| format!("{}:{}", k.name, k.secret))
        .collect()
}

#[tokio::test]
async fn a_new_cluster_encrypts_secrets_at_rest_and_defragments_etcd_weekly() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let c = cluster(t, json!({})).await;
    let keys = key_names(&app, &c);
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys[0].starts_with("key-1:"), "{keys:?}");
    let (_, name) = crate::common::capi::capi_names(&c);
    let spec = &kcp(&app, &c)["spec"]["kubeadmConfigSpec"];
    let file = spec["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/etc/kubernetes/encryption/config.yaml")
        .expect("the encryption configuration file");
    assert_eq!(
        file["contentFrom"],
        json!({"secret": {"name": format!("{name}-etcd-encryption"), "key": "config.yaml"}})
    );
    assert!(file.get("content").is_none(), "{file}");
    let args = &spec["clusterConfiguration"]["apiServer"]["extraArgs"];
    assert!(
        args.as_array().unwrap().iter().any(|a| a
            == &json!({"name": "encryption-provider-config",
                       "value": "/etc/kubernetes/encryption/config.yaml"})),
        "{args}"
    );
    // The defragmentation: a CronJob the cloud-config ClusterResourceSet applies.
    let cm = named(&app, "v1", "ConfigMap", &c, "etcd-defrag").expect("the defrag ConfigMap");
    let job: Value =
        serde_json::from_str(cm["data"]["etcd-defrag.json"].as_str().unwrap()).unwrap();
    assert_eq!(job["kind"], "CronJob");
    assert_eq!(job["spec"]["schedule"], "17 3 * * 0");
    let command =
        job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
            .to_string();
    assert!(command.contains("\"defrag\",\"--cluster\""), "{command}");
    let crs = named(
        &app,
        "addons.cluster.x-k8s.io/v1beta2",
        "ClusterResourceSet",
        &c,
        "cloud-config",
    )
    .expect("the ClusterResourceSet");
    assert!(
        crs["spec"]["resources"]
            .as_array()
            .unwrap()
            .contains(&json!({"kind": "ConfigMap", "name": format!("{name}-etcd-defrag")})),
        "{crs}"
    );
}

#[tokio::test]
async fn encryption_and_defragmentation_follow_their_labels_and_bad_values_are_400() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let c = cluster(
        t,
        json!({"etcd_encryption_enabled": "false", "etcd_defrag_schedule": "off"}),
    )
    .await;
    assert!(named(&app, "v1", "Secret", &c, "etcd-encryption").is_none());
    assert!(named(&app, "v1", "ConfigMap", &c, "etcd-defrag").is_none());
    let spec = kcp(&app, &c)["spec"]["kubeadmConfigSpec"].to_string();
    assert!(!spec.contains("encryption-provider-config"), "{spec}");
    let ct = template_with(
        t,
        "k",
        json!({"labels": {"etcd_defrag_schedule": "weekly"}}),
    )
    .await;
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "bad", "cluster_template_id": ct, "node_count": 1}),
        )
        .await;
    assert_magnum_error(&r, 400, "etcd_defrag_schedule");
}

#[tokio::test]
async fn the_encryption_key_rotates_with_the_ca_and_the_autoscaler_restarts() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let c = cluster(
        t,
        json!({"auto_scaling_enabled": "true", "min_node_count": "1", "max_node_count": "3"}),
    )
    .await;
    let before = key_names(&app, &c);
    let r = t
        .patch(&ALICE, &format!("/v1/certificates/{c}"), json!(null))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    // Phase by phase: the new key read first, then written with, then alone.
    let seen = std::sync::Mutex::new(Vec::<usize>::new());
    let restarted = std::sync::Mutex::new(std::collections::BTreeSet::new());
    crate::common::wait::until("UPDATE_COMPLETE after the rotation", || async {
        let keys = key_names(&app, &c);
        let shape = match keys.as_slice() {
            [a] if *a == before[0] => 0,
            [a, _] if *a == before[0] => 1,
            [_, b] if *b == before[0] => 2,
            [_] => 3,
            _ => 9,
        };
        {
            let mut s = seen.lock().unwrap();
            if s.last() != Some(&shape) {
                s.push(shape);
            }
        }
        if let Some(d) = named(&app, "apps/v1", "Deployment", &c, "autoscaler")
            && let Some(a) = d["spec"]["template"]["metadata"]["annotations"]
                ["magnum.openstack.org/ca-rollout-after"]
                .as_str()
        {
            restarted.lock().unwrap().insert(a.to_string());
        }
        let r = t.get(&ALICE, &format!("/v1/clusters/{c}")).await;
        assert_ne!(r.body["status"], "UPDATE_FAILED", "{}", r.body);
        (r.body["status"] == "UPDATE_COMPLETE").then_some(())
    })
    .await;
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen, [0, 1, 2, 3], "key shapes seen");
    let after = key_names(&app, &c);
    assert_eq!(after.len(), 1);
    assert!(
        after[0].starts_with("key-2:") && after[0] != before[0],
        "{after:?}"
    );
    assert_eq!(
        restarted.into_inner().unwrap().len(),
        3,
        "one restart per phase"
    );
}

/// A credential rotation restarts what reads the credential in the workload cluster (the
/// Reloader pattern): the rotation waits until the workload's `kube-system/cloud-config` (which
/// the ClusterResourceSet re-applies; played here) carries the new credential, then annotates
/// the pod template of every `kube-system` workload mounting it with the credential's id, and
/// only then deletes the old credential.
#[tokio::test]
async fn a_credential_rotation_restarts_what_reads_it_once_the_workload_has_it() {
    use crate::common::capi::{authenticates, secret_credential};
    use magnum_capi::simkube::Resource;
    let _env = crate::common::stack::env_shared().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let t = &app.t;
    let ks = crate::common::keystone::keystone();
    let (_, token) = ks.new_user_token("reloaded", "member", "alpha").await;
    let c = crate::capi_credentials::cluster(t, &token).await;
    let (old_id, old_secret) = secret_credential(&app, &c);
    let capi_cluster = objects(&app, "cluster.x-k8s.io/v1beta2", "Cluster", &c).remove(0);
    let meta = |k: &str| capi_cluster["metadata"][k].as_str().unwrap().to_string();
    let workload = app
        .sim
        .workload_store(&meta("namespace"), &meta("name"))
        .expect("the workload API");
    let cloud_config = |id: &str| {
        use base64::Engine;
        let conf = format!("[Global]\napplication-credential-id={id}\n");
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "cloud-config", "namespace": "kube-system"},
               "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(conf)}})
    };
    let secrets = Resource::of("v1", "Secret");
    workload.put(&secrets, cloud_config(&old_id)).unwrap();
    // The readers of the credential (the cloud provider's Deployment, the Cinder CSI node
    // plugin's DaemonSet) and a workload that does not mount it.
    let workloads = [
        ("Deployment", "openstack-cloud-controller-manager", true),
        ("DaemonSet", "csi-cinder-nodeplugin", true),
        ("Deployment", "coredns", false),
    ];
    for (kind, name, mounts) in workloads {
        let volumes = if mounts {
            json!([{"name": "cloud-config", "secret": {"secretName": "cloud-config"}}])
        } else {
            json!([])
        };
        workload
            .put(
                &Resource::of("apps/v1", kind),
                json!({"apiVersion": "apps/v1", "kind": kind,
                       "metadata": {"name": name, "namespace": "kube-system"},
                       "spec": {"selector": {"matchLabels": {"app": name}},
                                "template": {"metadata": {"labels": {"app": name}},
                                             "spec": {"containers": [{"name": name, "image": name}],
                                                      "volumes": volumes}}}}),
            )
            .unwrap();
    }
    // The credential each workload's pods were restarted for (null: never).
    let restarted_for = || {
        workloads.map(|(kind, name, _)| {
            let o = workload
                .get(&Resource::of("apps/v1", kind), "kube-system", name)
                .unwrap();
            o["spec"]["template"]["metadata"]["annotations"]
                ["magnum.openstack.org/cloud-credential"]
                .clone()
        })
    };
    let r = t
        .call_token(
            Some(&token),
            "PATCH",
            &format!("/v1/credentials/{c}"),
            Some("1.12"),
            None,
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    // The new credential reaches the management cluster; the workload still has the old one,
    // so nothing restarted and the old credential still works.
    let new_id = crate::common::wait::until("the new credential applied", || async {
        let (id, _) = secret_credential(&app, &c);
        (id != old_id).then_some(id)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(restarted_for(), [Value::Null, Value::Null, Value::Null]);
    assert!(authenticates(&old_id, &old_secret).await);
    // The ClusterResourceSet delivers it: the reader restarts, the rotation completes.
    workload.put(&secrets, cloud_config(&new_id)).unwrap();
    crate::common::wait::until("the rotation to complete", || async {
        let path = format!("/v1/clusters/{c}");
        let b = t
            .call_token(Some(&token), "GET", &path, Some("latest"), None)
            .await
            .body;
        (b["status"] == "UPDATE_COMPLETE").then_some(())
    })
    .await;
    assert_eq!(
        restarted_for(),
        [json!(new_id), json!(new_id), Value::Null],
        "the readers restart for the new credential, the rest not"
    );
    assert!(!authenticates(&old_id, &old_secret).await);
}
