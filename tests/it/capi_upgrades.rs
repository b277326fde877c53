//! Upgrades that cannot strand a cluster (issue 46), on the simulated management cluster: what
//! an upgrade checks before anything changes (kubelet skew from the machines, the image in
//! Glance, the flavors and the quota in Nova), a failed upgrade kept on its previous template,
//! retried or rolled back from `UPDATE_FAILED`, the upstream-support entry of the health
//! reason; and the nodegroup flavor change extension, which rolls the nodegroup's machines
//! (Magnum's refusal, the default, is `api_nodegroups::patch_of_an_internal_path_is_400`).

use crate::common;

use crate::common::capi::{capi_app_on, objects, template};
use crate::common::fakecloud::{IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT, NETWORK_PUBLIC};
use crate::common::keystone::keystone;
use crate::common::stack::{env_shared, parts};
use crate::common::wait::until;
use crate::common::*;

use magnum_capi::simkube::Resource;
use serde_json::{Value, json};

/// Creates a cluster as ALICE on template `ct` and waits for it; its uuid.
async fn complete_cluster(t: &TestApp, ct: &str) -> String {
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"name": "up", "cluster_template_id": ct, "node_count": 1}),
        )
        .await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await;
    c
}

async fn upgrade(t: &TestApp, c: &str, ct: &str) -> Resp {
    t.post_v(
        &ALICE,
        &format!("/v1/clusters/{c}/actions/upgrade"),
        "1.8",
        json!({"cluster_template": ct}),
    )
    .await
}

#[tokio::test]
async fn kubelets_too_far_behind_the_new_version_refuse_the_upgrade() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let next = template(t, "k134", "ubuntu-2404-kube-v1.34.1", "v1.34.1").await;
    let c = complete_cluster(t, &ct).await;
    // A worker left on v1.30 (a nodegroup an earlier upgrade did not roll), the controllers
    // stopped so that nothing rolls it meanwhile.
    app.sim.pause();
    let av = "cluster.x-k8s.io/v1beta2";
    let mut worker = objects(&app, av, "Machine", &c)
        .into_iter()
        .find(|m| m["metadata"]["labels"]["magnum.openstack.org/role"] == "worker")
        .expect("a worker machine");
    let name = worker["metadata"]["name"].as_str().unwrap().to_string();
    worker["spec"]["version"] = json!("v1.30.9");
    app.sim
        .store()
        .put(&Resource::of(av, "Machine"), worker)
        .unwrap();
    let uuid = uuid::Uuid::parse_str(&c).unwrap();
    until("the watchers to see the old kubelet", || async {
        let obs = app.capi.observer().observed(uuid);
        obs.machines
            .iter()
            .any(|m| m["spec"]["version"] == "v1.30.9")
            .then_some(())
    })
    .await;
    let r = upgrade(t, &c, &next).await;
    let detail = assert_magnum_error(&r, 400, "more than 3 minor versions behind v1.34.1");
    assert!(
        detail.contains(&format!(
            "nodegroup default-worker (machine {name}) runs kubelet v1.30.9"
        )),
        "{detail}"
    );
    // Nothing changed.
    let shown = t.get(&ALICE, &format!("/v1/clusters/{c}")).await.body;
    assert_eq!(shown["status"], "CREATE_COMPLETE", "{shown}");
    assert_eq!(shown["cluster_template_id"], ct.as_str());
    app.sim.resume();
}

#[tokio::test]
async fn a_failed_upgrade_keeps_its_previous_template_and_is_retried_from_update_failed() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let broken = template(t, "k134-broken", "sim-fail-image", "v1.34.1").await;
    let fixed = template(t, "k134", "ubuntu-2404-kube-v1.34.1", "v1.34.1").await;
    let c = complete_cluster(t, &ct).await;
    upgrade(t, &c, &broken).await.assert_status(202);
    let failed = t.wait_cluster(&ALICE, &c, "UPDATE_FAILED").await.body;
    assert_eq!(failed["cluster_template_id"], ct.as_str(), "{failed}");
    let reason = failed["status_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("No valid host was found"), "{reason}");
    // The same call again, to a template that works: accepted from UPDATE_FAILED.
    upgrade(t, &c, &fixed).await.assert_status(202);
    let done = t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["cluster_template_id"], fixed.as_str(), "{done}");
    assert_eq!(done["coe_version"], "v1.34.1", "{done}");
}

#[tokio::test]
async fn a_failed_upgrade_is_rolled_back_to_its_previous_template_but_never_downgraded() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let broken = template(t, "k134-broken", "sim-fail-image", "v1.34.1").await;
    let next = template(t, "k134", "ubuntu-2404-kube-v1.34.1", "v1.34.1").await;
    let c = complete_cluster(t, &ct).await;
    upgrade(t, &c, &broken).await.assert_status(202);
    t.wait_cluster(&ALICE, &c, "UPDATE_FAILED").await;
    // Back to the template it left: its version is older than the failed one's, and allowed as
    // the rollback of that upgrade.
    upgrade(t, &c, &ct).await.assert_status(202);
    let done = t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["cluster_template_id"], ct.as_str(), "{done}");
    assert_eq!(done["coe_version"], "v1.33.5", "{done}");
    until(
        "the failed upgrade's machine templates to be removed",
        || async {
            let infra = "infrastructure.cluster.x-k8s.io/v1beta1";
            let failed = json!({"filter": {"name": "sim-fail-image"}});
            objects(&app, infra, "OpenStackMachineTemplate", &c)
                .iter()
                .all(|o| o["spec"]["template"]["spec"]["image"] != failed)
                .then_some(())
        },
    )
    .await;
    // Once upgraded for good, going back is a downgrade.
    upgrade(t, &c, &next).await.assert_status(202);
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
    assert_magnum_error(
        &upgrade(t, &c, &ct).await,
        400,
        "downgrades are not supported",
    );
}

#[tokio::test]
async fn a_cluster_out_of_upstream_support_says_so_in_its_health_reason() {
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.upgrades.kubernetes_end_of_life = [("1.33", "2020-01-31"), ("1.34", "2999-01-31")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    })
    .await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let next = template(t, "k134", "ubuntu-2404-kube-v1.34.1", "v1.34.1").await;
    let c = complete_cluster(t, &ct).await;
    let path = format!("/v1/clusters/{c}");
    let shown = until("the support entry of the health reason", || async {
        let b = t.get(&ALICE, &path).await.body;
        b["health_status_reason"]["kubernetes"]
            .is_string()
            .then_some(b)
    })
    .await;
    let why = shown["health_status_reason"]["kubernetes"]
        .as_str()
        .unwrap();
    assert!(
        why.contains("v1.33.5 is out of upstream support since 2020-01-31"),
        "{why}"
    );
    // Informational: the cluster is still healthy.
    assert_eq!(shown["health_status"], "HEALTHY", "{shown}");
    upgrade(t, &c, &next).await.assert_status(202);
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
    until("the support entry to go", || async {
        let b = t.get(&ALICE, &path).await.body;
        (b["health_status_reason"].get("kubernetes").is_none() && b["coe_version"] == "v1.34.1")
            .then_some(())
    })
    .await;
}

/// As `token`, through the API.
async fn call(t: &TestApp, token: &str, method: &str, path: &str, body: Value) -> common::Resp {
    t.call_token(Some(token), method, path, Some("latest"), Some(body))
        .await
}

#[tokio::test]
async fn an_upgrade_is_checked_against_glance_and_nova_before_anything_changes() {
    let _env = env_shared().await;
    let (_, cloud) = parts().await;
    let app = capi_app_on(None, None, true, |cfg| {
        cfg.upgrades.nodegroup_flavor_change = true;
    })
    .await;
    let t = &app.t;
    let member = keystone().new_project("upgrades").await;
    let token = member.token.as_str();
    // The fake cloud keeps Nova's limits per project (the token's, as Keystone says).
    cloud.set_token_project(token, &member.project);
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let flavor = format!("upg-{tag}");
    let flavor_item = json!({"id": flavor, "name": flavor, "ram": 2048, "disk": 20, "vcpus": 2});
    cloud.add_flavor(flavor_item.clone());
    let image = |name: &str, distro: &str, version: &str| {
        json!({"id": uuid::Uuid::new_v4().to_string(), "name": format!("{name}-{tag}"),
               "os_distro": distro, "kube_version": version})
    };
    let flatcar = image("flatcar-kube-v1.31.2", "flatcar", "v1.31.2");
    let ubuntu = image("ubuntu-kube-v1.31.2", "ubuntu", "v1.31.2");
    let changing = image("ubuntu-changing-v1.31.2", "ubuntu", "v1.31.2");
    for i in [&flatcar, &ubuntu, &changing] {
        cloud.add_image(i.clone());
    }
    let new_template = |name: &str, image: &Value, kube_tag: &str| {
        json!({"name": name, "image_id": image["id"], "coe": "kubernetes",
               "flavor_id": flavor, "master_flavor_id": "m1.medium", "keypair_id": KEYPAIR_DEFAULT,
               "external_network_id": NETWORK_PUBLIC, "labels": {"kube_tag": kube_tag}})
    };
    let mut templates = Vec::new();
    for body in [
        new_template("k130", &json!({"id": IMAGE_UBUNTU_KUBE}), "v1.30.4"),
        new_template("flatcar", &flatcar, "v1.31.2"),
        new_template("changing", &changing, "v1.31.2"),
        new_template("k131", &ubuntu, "v1.31.2"),
    ] {
        let r = call(t, token, "POST", "/v1/clustertemplates", body).await;
        assert_eq!(r.status, 201, "{}", r.body);
        templates.push(r.body["uuid"].as_str().unwrap().to_string());
    }
    let [ct, flatcar_ct, changing_ct, next] = <[String; 4]>::try_from(templates).unwrap();
    let r = call(
        t,
        token,
        "POST",
        "/v1/clusters",
        json!({"name": "c1", "cluster_template_id": ct, "node_count": 1}),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    t.wait_cluster_token(token, &c, "CREATE_COMPLETE").await;
    let action = format!("/v1/clusters/{c}/actions/upgrade");
    let up = |to: &str| call(t, token, "POST", &action, json!({"cluster_template": to}));

    // Another distro.
    assert_magnum_error(
        &up(&flatcar_ct).await,
        400,
        "is os_distro flatcar, the cluster runs ubuntu",
    );
    // The image's version changed in Glance since the template was made; then it is gone.
    cloud.remove(changing["id"].as_str().unwrap());
    let mut changed = changing.clone();
    changed["kube_version"] = json!("v1.32.0");
    cloud.add_image(changed);
    assert_magnum_error(
        &up(&changing_ct).await,
        400,
        "has kube_version v1.32.0, the template's kube_tag is v1.31.2",
    );
    cloud.remove(changing["id"].as_str().unwrap());
    assert_magnum_error(&up(&changing_ct).await, 400, "could not be found");
    // No room in the quota for the control plane's and the worker's extra machine.
    cloud.set_compute_limits(
        &member.project,
        json!({"maxTotalInstances": 3, "totalInstancesUsed": 2}),
    );
    assert_magnum_error(
        &up(&next).await,
        400,
        "instances: 2 more needed, 2 of 3 used",
    );
    cloud.set_compute_limits(&member.project, json!({}));
    // The worker's flavor is gone from Nova.
    cloud.remove(&flavor);
    assert_magnum_error(
        &up(&next).await,
        400,
        &format!("Unable to find flavor {flavor}"),
    );
    cloud.add_flavor(flavor_item);
    let shown = call(t, token, "GET", &format!("/v1/clusters/{c}"), Value::Null).await;
    assert_eq!(shown.body["status"], "CREATE_COMPLETE", "{}", shown.body);
    assert_eq!(shown.body["cluster_template_id"], ct.as_str());

    // With everything in place, it goes.
    let r = up(&next).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let done = t
        .wait_cluster_token(token, &c, "UPDATE_COMPLETE")
        .await
        .body;
    assert_eq!(done["cluster_template_id"], next.as_str(), "{done}");
    // A nodegroup's new flavor is looked up in Nova as at create.
    let r = call(
        t,
        token,
        "PATCH",
        &format!("/v1/clusters/{c}/nodegroups/default-worker"),
        json!([{"op": "replace", "path": "/flavor_id", "value": "no-such-flavor"}]),
    )
    .await;
    assert_magnum_error(&r, 400, "Unable to find flavor no-such-flavor");
}

/// The names of the cluster's `kind` objects whose role label is `worker`.
fn workers(app: &common::capi::CapiApp, av: &str, kind: &str, c: &str) -> Vec<String> {
    objects(app, av, kind, c)
        .iter()
        .filter(|o| o["metadata"]["labels"]["magnum.openstack.org/role"] == "worker")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_nodegroup_flavor_change_replaces_its_machines_when_enabled() {
    let app = capi_app_on(None, None, false, |cfg| {
        cfg.upgrades.nodegroup_flavor_change = true;
    })
    .await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let c = complete_cluster(t, &ct).await;
    let (capi, infra) = (
        "cluster.x-k8s.io/v1beta2",
        "infrastructure.cluster.x-k8s.io/v1beta1",
    );
    let machines = workers(&app, capi, "Machine", &c);
    let md = objects(&app, capi, "MachineDeployment", &c).remove(0);
    let old_template = md["spec"]["template"]["spec"]["infrastructureRef"]["name"].clone();
    let path = format!("/v1/clusters/{c}/nodegroups/default-worker");
    let r = t
        .patch_v(
            &ALICE,
            &path,
            "1.9",
            json!([{"op": "replace", "path": "/flavor_id", "value": "m1.large"}]),
        )
        .await;
    r.assert_status(202);
    assert_eq!(r.body["flavor_id"], "m1.large", "{}", r.body);
    assert_eq!(r.body["status"], "UPDATE_IN_PROGRESS", "{}", r.body);
    until("the nodegroup's rollout to complete", || async {
        let ng = t.get_v(&ALICE, &path, "1.9").await.body;
        (ng["status"] == "UPDATE_COMPLETE").then_some(())
    })
    .await;
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
    // A new machine template of the new flavor, the MachineDeployment moved to it, and every
    // machine replaced.
    let md = objects(&app, capi, "MachineDeployment", &c).remove(0);
    let new_template = md["spec"]["template"]["spec"]["infrastructureRef"]["name"].clone();
    assert_ne!(new_template, old_template);
    let osmt = objects(&app, infra, "OpenStackMachineTemplate", &c)
        .into_iter()
        .find(|o| o["metadata"]["name"] == new_template)
        .expect("the new machine template");
    assert_eq!(
        osmt["spec"]["template"]["spec"]["flavor"], "m1.large",
        "{osmt}"
    );
    until("the old machines to be replaced", || async {
        let now = workers(&app, capi, "Machine", &c);
        (now.len() == machines.len() && now.iter().all(|m| !machines.contains(m))).then_some(())
    })
    .await;
}

/// A template like [`template`]'s with `labels` besides its `kube_tag` and the given flavor.
async fn template_with(
    t: &TestApp,
    name: &str,
    image: &str,
    flavor: &str,
    labels: Value,
) -> String {
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"name": name, "image_id": image, "coe": "kubernetes",
                   "flavor_id": flavor, "master_flavor_id": "m1.medium",
                   "external_network_id": "public", "dns_nameserver": "8.8.8.8",
                   "labels": labels}),
        )
        .await;
    r.assert_status(201);
    r.body["uuid"].as_str().unwrap().to_string()
}

const ADDONS: &str = "addons.cluster.x-k8s.io/v1alpha1";

/// The cluster's HelmChartProxy `<cluster>-<key>`.
fn proxy(app: &common::capi::CapiApp, c: &str, key: &str) -> Value {
    objects(app, ADDONS, "HelmChartProxy", c)
        .into_iter()
        .find(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(&format!("-{key}")))
        })
        .unwrap_or_else(|| panic!("no {key} proxy"))
}

fn control_plane(app: &common::capi::CapiApp, c: &str) -> Value {
    objects(
        app,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        c,
    )
    .remove(0)
}

/// Templates of v1.33.5 with Calico v3.30.2 and of v1.34.1 with Calico v3.31.5 and the cloud
/// provider's v1.34.1 image: (old, new).
async fn calico_upgrade(t: &TestApp) -> (String, String) {
    let old = template_with(
        t,
        "k133",
        "ubuntu-2404-kube-v1.33.5",
        "m1.small",
        json!({"kube_tag": "v1.33.5", "calico_tag": "v3.30.2"}),
    )
    .await;
    let new = template_with(
        t,
        "k134",
        "ubuntu-2404-kube-v1.34.1",
        "m1.small",
        json!({"kube_tag": "v1.34.1", "calico_tag": "v3.31.5", "cloud_provider_tag": "v1.34.1"}),
    )
    .await;
    (old, new)
}

#[tokio::test]
async fn an_upgrade_rolls_the_addons_after_the_control_plane_the_cni_first() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let (old, new) = calico_upgrade(t).await;
    let c = complete_cluster(t, &old).await;
    let (cni, ccm) = (proxy(&app, &c, "cni"), proxy(&app, &c, "ccm"));
    assert_eq!(cni["spec"]["version"], "v3.30.2");
    // The controllers stopped: the machines are applied, the add-ons wait for the control plane.
    app.sim.pause();
    // Helm's upgrade of the CNI hangs until the marker goes.
    app.sim
        .set_fail_markers(vec!["sim-fail".into(), "pending:tigera-operator".into()]);
    upgrade(t, &c, &new).await.assert_status(202);
    until("the new control plane to be applied", || async {
        (control_plane(&app, &c)["spec"]["version"] == "v1.34.1").then_some(())
    })
    .await;
    assert_eq!(proxy(&app, &c, "cni")["spec"], cni["spec"], "held");
    assert_eq!(proxy(&app, &c, "ccm")["spec"], ccm["spec"], "held");
    app.sim.resume();
    // The control plane runs v1.34.1: the CNI rolls, the cloud provider waits for it.
    let path = format!("/v1/clusters/{c}");
    let shown = until("the CNI's upgrade under way", || async {
        let b = t.get(&ALICE, &path).await.body;
        b["status_reason"]
            .as_str()
            .is_some_and(|r| r.contains("the CNI roll out: cni: upgrading"))
            .then_some(b)
    })
    .await;
    assert_eq!(shown["status"], "UPDATE_IN_PROGRESS", "{shown}");
    let cp = control_plane(&app, &c);
    assert_eq!(cp["status"]["version"], "v1.34.1", "{cp}");
    assert_eq!(proxy(&app, &c, "cni")["spec"]["version"], "v3.31.5");
    assert_eq!(proxy(&app, &c, "ccm")["spec"], ccm["spec"], "still held");
    let health = until("the CNI's health to say so", || async {
        let b = t.get(&ALICE, &path).await.body;
        b["health_status_reason"]["addon.cni"]
            .as_str()
            .is_some_and(|r| r.starts_with("Progressing: upgrading"))
            .then_some(b)
    })
    .await;
    assert_eq!(
        health["health_status_reason"]["addon.ccm"], "Ready",
        "{health}"
    );
    // Helm is done: the cloud provider, the storage and the rest follow; the upgrade completes.
    app.sim.set_fail_markers(vec!["sim-fail".into()]);
    let done = t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await.body;
    assert_eq!(done["cluster_template_id"], new.as_str(), "{done}");
    assert_eq!(done["labels"]["calico_tag"], "v3.31.5", "{done}");
    let rolled = proxy(&app, &c, "ccm");
    assert_ne!(rolled["spec"], ccm["spec"]);
    assert!(
        rolled["spec"]["valuesTemplate"]
            .as_str()
            .unwrap()
            .contains("v1.34.1"),
        "{rolled}"
    );
    let reason = &done["health_status_reason"];
    for key in ["addon.cni", "addon.ccm", "addon.csi-cinder"] {
        assert_eq!(reason[key], "Ready", "{reason}");
    }
}

#[tokio::test]
async fn an_addon_the_upgrade_changed_that_fails_fails_the_upgrade_before_the_next_one() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let (old, new) = calico_upgrade(t).await;
    let c = complete_cluster(t, &old).await;
    let ccm = proxy(&app, &c, "ccm");
    app.sim
        .set_fail_markers(vec!["sim-fail".into(), "tigera-operator".into()]);
    upgrade(t, &c, &new).await.assert_status(202);
    let failed = t.wait_cluster(&ALICE, &c, "UPDATE_FAILED").await.body;
    let reason = failed["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("Upgrading the CNI: add-on cni: error installing tigera-operator"),
        "{reason}"
    );
    assert_eq!(failed["cluster_template_id"], old.as_str(), "{failed}");
    // The cloud provider was never touched; the health reason names the failed add-on.
    assert_eq!(proxy(&app, &c, "ccm")["spec"], ccm["spec"]);
    let path = format!("/v1/clusters/{c}");
    until("the failed add-on in the health reason", || async {
        let b = t.get(&ALICE, &path).await.body;
        b["health_status_reason"]["addon.cni"]
            .as_str()
            .is_some_and(|r| r.starts_with("Failed:"))
            .then_some(())
    })
    .await;
    // Fixed, the same call again completes it.
    app.sim.set_fail_markers(vec!["sim-fail".into()]);
    upgrade(t, &c, &new).await.assert_status(202);
    t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await;
}

#[tokio::test]
async fn a_template_of_the_same_version_with_another_image_or_flavor_rolls_the_machines() {
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let ct = template(t, "k133", "ubuntu-2404-kube-v1.33.5", "v1.33.5").await;
    let labels = json!({"kube_tag": "v1.33.5"});
    let rebuilt = template_with(
        t,
        "k133-b",
        "ubuntu-2404-kube-v1.33.5-b",
        "m1.small",
        labels.clone(),
    )
    .await;
    let bigger = template_with(
        t,
        "k133-c",
        "ubuntu-2404-kube-v1.33.5-b",
        "m1.large",
        labels,
    )
    .await;
    let c = complete_cluster(t, &ct).await;
    let (capi, infra) = (
        "cluster.x-k8s.io/v1beta2",
        "infrastructure.cluster.x-k8s.io/v1beta1",
    );
    let all_machines = || {
        let mut v: Vec<String> = objects(&app, capi, "Machine", &c)
            .iter()
            .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let worker_template = || {
        let md = objects(&app, capi, "MachineDeployment", &c).remove(0);
        let name = md["spec"]["template"]["spec"]["infrastructureRef"]["name"].clone();
        objects(&app, infra, "OpenStackMachineTemplate", &c)
            .into_iter()
            .find(|o| o["metadata"]["name"] == name)
            .expect("the worker machine template")
    };
    let worker_machines = || {
        let mut v = workers(&app, capi, "Machine", &c);
        v.sort();
        v
    };
    // A new image rolls every machine; a new worker flavor the workers.
    for (to, image, flavor, rolled) in [
        (
            &rebuilt,
            "ubuntu-2404-kube-v1.33.5-b",
            "m1.small",
            &all_machines as &dyn Fn() -> Vec<String>,
        ),
        (
            &bigger,
            "ubuntu-2404-kube-v1.33.5-b",
            "m1.large",
            &worker_machines,
        ),
    ] {
        let before = rolled();
        upgrade(t, &c, to).await.assert_status(202);
        let done = t.wait_cluster(&ALICE, &c, "UPDATE_COMPLETE").await.body;
        assert_eq!(done["cluster_template_id"], to.as_str(), "{done}");
        assert_eq!(done["coe_version"], "v1.33.5", "{done}");
        let spec = &worker_template()["spec"]["template"]["spec"];
        assert_eq!(spec["image"], json!({"filter": {"name": image}}), "{spec}");
        assert_eq!(spec["flavor"], flavor, "{spec}");
        until("the machines to be replaced", || async {
            let now = rolled();
            (now.len() == before.len() && now.iter().all(|m| !before.contains(m))).then_some(())
        })
        .await;
    }
    let ng = t
        .get_v(
            &ALICE,
            &format!("/v1/clusters/{c}/nodegroups/default-worker"),
            "1.9",
        )
        .await
        .body;
    assert_eq!(ng["flavor_id"], "m1.large", "{ng}");
}
