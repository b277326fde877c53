//! Horizon's cluster dialog (magnum-ui 19 through python-magnumclient) with its defaults makes a
//! working cluster (issue 44): `discovery_url` `""`, `master_lb_enabled` `"False"` and the label
//! `master_lb_floating_ip_enabled=false` (the floating-IP choice is hidden unless the load
//! balancer is ticked) give the API load balancer magnum-capi-helm always built, private on its
//! fixed IP. Only a cloud without a load balancer service refuses them, naming the dialog's fields.

use serde_json::{Value, json};

use crate::common::capi::{assert_private_api_load_balancer, capi_app_on};
use crate::common::fakecloud::{IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT, NETWORK_PUBLIC};
use crate::common::keystone::keystone;
use crate::common::stack::{env_shared, parts};
use crate::common::{ALICE, assert_magnum_error};

/// The body magnum-ui's create dialog makes with its defaults, as python-magnumclient sends it:
/// magnum-ui `str()`s every attribute (`null` becomes `""`), labels stay a JSON object with the
/// template's labels and the dialog's own.
fn dialog_body(template: &str, template_labels: &Value) -> Value {
    let mut labels = template_labels.clone();
    for (k, v) in [
        ("availability_zone", json!("nova")),
        ("auto_scaling_enabled", json!(false)),
        ("auto_healing_enabled", json!(true)),
        ("master_lb_floating_ip_enabled", json!(false)),
    ] {
        labels[k] = v;
    }
    json!({
        "discovery_url": "",
        "create_timeout": "60",
        "name": "dialog",
        "cluster_template_id": template,
        "keypair": KEYPAIR_DEFAULT,
        "labels": labels,
        "master_lb_enabled": "False",
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_dialogs_defaults_make_a_cluster_with_a_private_api_load_balancer() {
    // As `serve --dev` runs: the CAPI driver on a simulated management cluster.
    let app = capi_app_on(None, None, false, |_| {}).await;
    let t = &app.t;
    let labels = json!({"kube_tag": "v1.33.5"});
    let r = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            json!({"name": "k8s", "image_id": "ubuntu-2404-kube-v1.33.5", "coe": "kubernetes",
                   "external_network_id": "public", "flavor_id": "m1.small",
                   "master_flavor_id": "m1.medium", "labels": labels}),
        )
        .await;
    r.assert_status(201);
    let template = r.body["uuid"].as_str().unwrap_or_default().to_string();
    let r = t
        .post(&ALICE, "/v1/clusters", dialog_body(&template, &labels))
        .await;
    r.assert_status(202);
    let uuid = r.body["uuid"].as_str().unwrap_or_default().to_string();
    let body = t.wait_cluster(&ALICE, &uuid, "CREATE_COMPLETE").await.body;
    assert_eq!(body["discovery_url"], json!(""), "{body}");
    assert_eq!(body["master_lb_enabled"], json!(false), "{body}");

    assert_private_api_load_balancer(&app, &uuid);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_load_balancer_service_the_dialogs_defaults_are_a_400_naming_its_fields() {
    let _env = env_shared().await;
    let (ks, _) = parts().await;
    // A region whose catalog has Glance, Nova and Neutron but no Octavia.
    const REGION: &str = "RegionWithoutOctavia";
    ks.region_with(REGION, &["identity", "image", "compute", "network"])
        .await;
    let app = capi_app_on(None, None, true, |cfg| {
        cfg.keystone.region_name = Some(REGION.into());
    })
    .await;
    let t = &app.t;
    let token = keystone().token("alice", "alpha").await;
    let labels = json!({"kube_tag": "v1.30.4"});
    let r = t
        .call_token(
            Some(&token),
            "POST",
            "/v1/clustertemplates",
            None,
            Some(
                json!({"name": "k8s", "image_id": IMAGE_UBUNTU_KUBE, "coe": "kubernetes",
                        "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                        "external_network_id": NETWORK_PUBLIC, "labels": labels}),
            ),
        )
        .await;
    r.assert_status(201);
    let template = r.body["uuid"].as_str().unwrap_or_default().to_string();
    let r = t
        .call_token(
            Some(&token),
            "POST",
            "/v1/clusters",
            None,
            Some(dialog_body(&template, &labels)),
        )
        .await;
    let detail = assert_magnum_error(&r, 400, "no load balancer service (Octavia)");
    for field in [
        "master_lb_floating_ip_enabled=true",
        "Additional Labels",
        "I do want to override Template and Workflow Labels",
    ] {
        assert!(detail.contains(field), "{field}: {detail}");
    }
    // With a floating IP for the API it needs none.
    let mut body = dialog_body(&template, &labels);
    body["labels"]["master_lb_floating_ip_enabled"] = json!(true);
    body["name"] = json!("with-fip");
    let r = t
        .call_token(Some(&token), "POST", "/v1/clusters", None, Some(body))
        .await;
    r.assert_status(202);
}
