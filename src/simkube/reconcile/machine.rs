//! The Machine and OpenStackMachine controllers: waits for bootstrap data, provisions the
//! instance (or injects `InstanceCreateFailed` on its OpenStackServer, as CAPO v0.14 reports
//! Nova's refusal), runs kubeadm (see `kubeadm`) and reports the Machine Running or Failed.

use serde_json::{Value, json};

use super::ctx::{Ctx, failed_condition_message};
use super::kubeadm::{
    KUBEADM_INIT_FAILED, KUBEADM_JOIN_FAILED, Kubeadm, capture_bootstrap, kubeadm, kubeadm_failure,
};
use crate::simkube::objects::*;
use crate::simkube::store::{ObjectKey, Resource, StoreError, Target, now_rfc3339};
use crate::simkube::{kubeconfig, workload};

/// The injected failure of an OpenStackMachine whose image or flavor carries a marker.
fn instance_failure(cx: &Ctx<'_>, osm: &Value) -> Option<String> {
    let image = str_at(osm, &["spec", "image", "filter", "name"])
        .or_else(|| str_at(osm, &["spec", "image", "id"]))
        .or_else(|| str_at(osm, &["spec", "image", "imageRef", "name"]))
        .unwrap_or_default();
    let flavor = str_at(osm, &["spec", "flavor"])
        .or_else(|| str_at(osm, &["spec", "flavorID"]))
        .unwrap_or_default();
    (cx.fails(image) || cx.fails(flavor)).then(|| {
        format!(
            "Failed to create server: No valid host was found. There are not enough hosts \
             available. (image {image}, flavor {flavor})"
        )
    })
}

/// CAPO's OpenStackServers (`infrastructure.cluster.x-k8s.io/v1alpha1`): one per
/// OpenStackMachine, named after it.
fn servers() -> Resource {
    Resource::new(INFRA_GROUP, "openstackservers")
}

/// What CAPO v0.14 leaves when Nova refuses a machine's server: the OpenStackServer (named
/// after the OpenStackMachine, owned by it, labelled with the cluster's name) in `ERROR` with
/// `InstanceReady` False `InstanceCreateFailed` and Nova's message. CAPO never retries it; the
/// OpenStackMachine and the Machine only keep waiting for it.
fn refuse_server(
    cx: &Ctx<'_>,
    osm: &Value,
    cluster: &str,
    message: &str,
    now: &str,
) -> Result<(), StoreError> {
    let (res, ns) = (servers(), namespace(osm));
    if cx.store.get(&res, ns, name(osm)).is_none() {
        let obj = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "OpenStackServer",
            "metadata": {"name": name(osm), "namespace": ns,
                "labels": {LABEL_CLUSTER_NAME: cluster},
                "ownerReferences": [owner_ref(INFRA_VERSION, "OpenStackMachine", osm, true)]},
            "spec": {},
        });
        match cx.store.create(&res, ns, obj) {
            Ok(_) | Err(StoreError::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let failed = Cond::new(
        "InstanceReady",
        CondStatus::False,
        "InstanceCreateFailed",
        format!("create OpenStack instance: {message}"),
    );
    cx.store
        .update(&res, ns, name(osm), Target::Status, |o| {
            let prev = o.get("status").cloned();
            o["status"] = json!({
                "ready": false,
                "instanceState": "ERROR",
                "conditions": conditions_v1beta1(prev.as_ref(), &[failed], now),
            });
        })
        .map(|_| ())
}

pub(super) fn machine(cx: &Ctx<'_>, m: &Value) -> Result<(), StoreError> {
    if is_deleting(m) {
        if has_finalizer(m, FINALIZER_MACHINE) {
            // CAPI deletes the Node before it lets the Machine go.
            cx.sim.remove_node(m);
            cx.edit(Kind::Machine, m, |o| remove_finalizer(o, FINALIZER_MACHINE))?;
        }
        return Ok(());
    }
    let phase = str_at(m, &["status", "phase"]);
    if phase == Some("Running") || kubeadm_failure(m).is_some() {
        return Ok(());
    }
    let (ns, observed, now) = (namespace(m), generation(m), now_rfc3339());
    let key = ObjectKey::new(&Kind::Machine.resource(), ns, name(m));
    let prev = m.get("status");
    let osm = str_at(m, &["spec", "infrastructureRef", "name"])
        .and_then(|n| cx.get(Kind::InfraMachine, ns, n));
    let cluster_name = str_at(m, &["spec", "clusterName"]).unwrap_or_default();
    let cluster = cx.get(Kind::Cluster, ns, cluster_name);
    let is_control_plane = label(m, LABEL_CONTROL_PLANE).is_some();
    let not_deleting = Cond::new("Deleting", CondStatus::False, "NotDeleting", "");
    let node_missing = |k: &'static str| {
        Cond::new(
            k,
            CondStatus::Unknown,
            "NodeDoesNotExist",
            "Waiting for a Node to exist",
        )
    };
    let pending = |bootstrap: Cond, infra: Cond, phase: &str, bootstrapped: bool| {
        let ready = Cond::new(
            "Ready",
            CondStatus::False,
            "NotReady",
            failed_condition_message(&[&bootstrap, &infra]),
        );
        json!({
            "observedGeneration": observed,
            "phase": phase,
            "initialization": {"bootstrapDataSecretCreated": bootstrapped, "infrastructureProvisioned": false},
            "conditions": conditions_v1beta2(prev, &[
                Cond::new("Available", CondStatus::False, "NotReady", "* Ready: not ready"),
                ready,
                bootstrap,
                infra,
                node_missing("NodeReady"),
                node_missing("NodeHealthy"),
                not_deleting.clone(),
            ], observed, &now),
        })
    };
    let bootstrap_ok = Cond::new("BootstrapConfigReady", CondStatus::True, "Ready", "");
    let Some(osm) = osm else {
        let infra = Cond::new(
            "InfrastructureReady",
            CondStatus::False,
            "InfrastructureDoesNotExist",
            "OpenStackMachine does not exist",
        );
        cx.set_status(
            Kind::Machine,
            m,
            pending(bootstrap_ok, infra, "Pending", false),
        )?;
        return Ok(());
    };
    if matches!(phase, None | Some("Pending")) {
        let cp_ready = cluster
            .as_deref()
            .is_some_and(|c| bool_at(c, &["status", "initialization", "controlPlaneInitialized"]));
        if !is_control_plane && !cp_ready {
            let bootstrap = Cond::new(
                "BootstrapConfigReady",
                CondStatus::False,
                "NotReady",
                "Waiting for the control plane to be initialized",
            );
            let infra = Cond::new(
                "InfrastructureReady",
                CondStatus::False,
                "NotReady",
                "Waiting for bootstrap data",
            );
            cx.set_status(
                Kind::Machine,
                m,
                pending(bootstrap, infra, "Pending", false),
            )?;
            return Ok(());
        }
        // The bootstrap data is rendered now, with the CA Secrets as they are.
        cx.sim.set_bootstrap(
            &key,
            capture_bootstrap(cx, ns, cluster_name, is_control_plane),
        );
        let infra = Cond::new(
            "InfrastructureReady",
            CondStatus::False,
            "NotReady",
            "Waiting for the OpenStack instance to become ACTIVE",
        );
        cx.set_status(
            Kind::Machine,
            m,
            pending(bootstrap_ok, infra, "Provisioning", true),
        )?;
        return Ok(());
    }

    if let Some(message) = instance_failure(cx, &osm) {
        // The Machine stays as provisioning left it: waiting for the instance.
        return refuse_server(cx, &osm, cluster_name, &message, &now);
    }
    // The marker was lifted: the simulator retries the server (CAPO would not; see docs/development.md,
    // "What the simulator does not do").
    cx.delete(&ObjectKey::new(&servers(), ns, name(&osm)))?;

    let Some(Kubeadm { init, result }) = kubeadm(cx, &key, cluster_name, is_control_plane) else {
        cx.sim.mark(key);
        return Ok(());
    };
    let instance_id = uuid::Uuid::new_v4().to_string();
    let provider_id = format!("openstack:///{instance_id}");
    let address = cx.sim.next_node_address(ns, cluster_name);
    let addresses = json!([{"type": "InternalIP", "address": address}]);
    let pid = provider_id.clone();
    let osm = cx.edit(Kind::InfraMachine, &osm, move |o| {
        set_at(o, &["spec"], "providerID", json!(pid))
    })?;
    cx.set_status(
        Kind::InfraMachine,
        &osm,
        json!({
            "ready": true,
            "initialization": {"provisioned": true},
            "instanceID": instance_id,
            "instanceState": "ACTIVE",
            "addresses": addresses,
            "conditions": conditions_v1beta1(osm.get("status"), &[
                Cond::new("Ready", CondStatus::True, "Ready", ""),
                Cond::new("InstanceReady", CondStatus::True, "Ready", ""),
            ], &now),
        }),
    )?;
    let pid = provider_id.clone();
    let m = cx.edit(Kind::Machine, m, move |o| {
        set_at(o, &["spec"], "providerID", json!(pid))
    })?;
    let ok = |k: &'static str, reason: &'static str| Cond::new(k, CondStatus::True, reason, "");
    let installed = match result {
        Ok(installed) => installed,
        Err(message) => {
            let reason = if init {
                KUBEADM_INIT_FAILED
            } else {
                KUBEADM_JOIN_FAILED
            };
            let health = Cond::new("NodeHealthy", CondStatus::False, reason, message.clone());
            let status = json!({
                "observedGeneration": generation(&m),
                "phase": "Failed",
                "addresses": addresses,
                "lastUpdated": now,
                "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
                "deprecated": {"v1beta1": {"failureReason": "JoinClusterTimeoutError", "failureMessage": message}},
                "conditions": conditions_v1beta2(m.get("status"), &[
                    Cond::new("Available", CondStatus::False, "NotReady", "* Ready: not ready"),
                    Cond::new("Ready", CondStatus::False, "NotReady", failed_condition_message(&[&health])),
                    ok("BootstrapConfigReady", "Ready"),
                    ok("InfrastructureReady", "Ready"),
                    node_missing("NodeReady"),
                    health,
                    not_deleting,
                ], generation(&m), &now),
            });
            cx.set_status(Kind::Machine, &m, status)?;
            return Ok(());
        }
    };
    let kubelet = str_at(&m, &["spec", "version"])
        .unwrap_or("v0.0.0")
        .to_string();
    let status = json!({
        "observedGeneration": generation(&m),
        "phase": "Running",
        "addresses": addresses,
        "nodeRef": {"name": name(&m)},
        "lastUpdated": now,
        "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": uuid::Uuid::new_v4().to_string(),
            "containerRuntimeVersion": "containerd://1.7.27",
            "kernelVersion": "6.1.0-simkube",
            "kubeProxyVersion": kubelet,
            "kubeletVersion": kubelet,
            "machineID": uuid::Uuid::new_v4().simple().to_string(),
            "operatingSystem": "linux",
            "osImage": str_at(&osm, &["spec", "image", "filter", "name"]).unwrap_or("simulated"),
            "systemUUID": instance_id,
        },
        "conditions": conditions_v1beta2(m.get("status"), &[
            ok("Available", "Available"),
            ok("Ready", "Ready"),
            ok("BootstrapConfigReady", "Ready"),
            ok("InfrastructureReady", "Ready"),
            ok("NodeReady", "NodeReady"),
            ok("NodeHealthy", "NodeHealthy"),
            not_deleting,
        ], generation(&m), &now),
    });
    cx.set_status(Kind::Machine, &m, status)?;
    if init {
        // `kubeadm init` publishes cluster-info with the CA it installed.
        let server = cluster
            .as_deref()
            .and_then(kubeconfig::endpoint)
            .unwrap_or_else(|| "https://127.0.0.1:6443".to_string());
        let ca_pem = installed.ca_trust.as_ref().map(|c| c.pem.as_str());
        cx.sim.workloads().init(ns, cluster_name, &server, ca_pem)?;
    }
    cx.sim.set_installed(&key, installed);
    if let Some(workload) = cx.sim.workloads().get(ns, cluster_name) {
        let m = cx.get(Kind::Machine, ns, name(&m)).unwrap_or(m);
        workload::put_node(&workload, &m, is_control_plane)?;
        if is_control_plane {
            workload::record_kubernetes_version(&workload, &kubelet)?;
        }
    }
    Ok(())
}
