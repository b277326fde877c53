//! The API endpoint on the simulated management cluster (issue 46 items 3 and 4): a control plane
//! that holds its API's virtual IP itself (kube-vip, no Octavia load balancer), and
//! `api_master_lb_allowed_cidrs` that either restrict the API load balancer, the management
//! cluster's egress addresses admitted, or are refused.

use serde_json::{Value, json};

use crate::capi_cleanup::running_cluster_with;
use crate::common::capi::{CapiApp, capi_app_on, objects, template_with};
use crate::common::*;

const MGMT_EGRESS: &str = "203.0.113.0/29";

async fn app() -> CapiApp {
    capi_app_on(None, None, false, |cfg| {
        cfg.capi.egress_cidrs = vec![MGMT_EGRESS.into()];
    })
    .await
}

/// A template with `labels` (besides `kube_tag`) and `master_lb_enabled`; its uuid.
async fn template(t: &TestApp, name: &str, lb: bool, labels: Value) -> String {
    template_with(t, name, json!({"master_lb_enabled": lb, "labels": labels})).await
}

/// Creates cluster `name` of template `ct` with `fields` (`202`); its uuid once
/// `CREATE_COMPLETE`, and its body.
async fn created(t: &TestApp, name: &str, ct: &str, fields: Value) -> (String, Value) {
    let mut body = json!({"name": name, "cluster_template_id": ct, "node_count": 1});
    for (k, v) in fields.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let r = t.post(&ALICE, "/v1/clusters", body).await;
    r.assert_status(202);
    let c = r.body["uuid"].as_str().unwrap().to_string();
    let done = t.wait_cluster(&ALICE, &c, "CREATE_COMPLETE").await.body;
    (c, done)
}

/// What a create of one cluster of template `ct` answers.
async fn refused(t: &TestApp, ct: &str) -> Resp {
    let body = json!({"name": "refused", "cluster_template_id": ct, "node_count": 1});
    t.post(&ALICE, "/v1/clusters", body).await
}

async fn deleted(t: &TestApp, c: &str) {
    t.delete(&ALICE, &format!("/v1/clusters/{c}"))
        .await
        .assert_status(204);
    t.wait_cluster(&ALICE, c, "GONE").await;
}

fn one(app: &CapiApp, (api_version, kind): (&str, &str), cluster: &str) -> Value {
    let mut all = objects(app, api_version, kind, cluster);
    assert_eq!(all.len(), 1, "{kind}: {all:?}");
    all.pop().unwrap()
}

#[tokio::test]
async fn a_control_plane_holds_its_apis_virtual_ip_without_an_octavia_load_balancer() {
    let app = app().await;
    let t = &app.t;
    // Three masters: Magnum wants master_lb_enabled for them; the virtual IP is their balancer.
    let ct = template(t, "vip", true, json!({"kube_vip_enabled": "true"})).await;
    let (c, done) = created(t, "vip", &ct, json!({"master_count": 3})).await;
    assert_eq!(done["master_lb_enabled"], true, "{done}");

    let vip = "10.0.0.254";
    let osc = one(&app, magnum_capi::capi::kinds::OPENSTACK_CLUSTER, &c);
    assert_eq!(
        osc["spec"]["apiServerLoadBalancer"]["enabled"], false,
        "{osc}"
    );
    assert!(
        osc["status"].get("apiServerLoadBalancer").is_none(),
        "{osc}"
    );
    assert_eq!(osc["spec"]["apiServerFixedIP"], vip, "{osc}");
    // With a floating IP (the template's external network): CAPO's, the API's public address.
    assert_eq!(osc["spec"]["disableAPIServerFloatingIP"], false, "{osc}");
    // Neutron never hands the virtual IP to a machine.
    assert_eq!(
        osc["spec"]["managedSubnets"][0]["allocationPools"],
        json!([{"start": "10.0.0.2", "end": "10.0.0.253"}]),
        "{osc}"
    );
    let kcp = one(&app, magnum_capi::capi::kinds::CONTROL_PLANE, &c);
    let spec = &kcp["spec"]["kubeadmConfigSpec"];
    let manifest = spec["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == magnum_capi::capi::values::KUBE_VIP_MANIFEST_PATH)
        .unwrap_or_else(|| panic!("no kube-vip static pod: {kcp}"));
    let content = manifest["content"].as_str().unwrap();
    assert!(content.contains(&format!("value: \"{vip}\"")), "{content}");
    assert!(content.contains("ghcr.io/kube-vip/kube-vip:"), "{content}");
    assert!(
        spec["clusterConfiguration"]["apiServer"]["certSANs"]
            .as_array()
            .unwrap()
            .contains(&json!(vip)),
        "{kcp}"
    );
    // kubeadm 1.33 initialises the first machine with kube-vip on super-admin.conf.
    assert!(
        spec["preKubeadmCommands"]
            .to_string()
            .contains("super-admin.conf")
            && spec["postKubeadmCommands"]
                .to_string()
                .contains("admin.conf"),
        "{kcp}"
    );
    let templates = objects(
        &app,
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachineTemplate",
        &c,
    );
    let cp = templates
        .iter()
        .find(|m| {
            m["metadata"]["name"]
                .as_str()
                .unwrap()
                .contains("control-plane")
        })
        .expect("the control plane's machine template");
    assert_eq!(
        cp["spec"]["template"]["spec"]["ports"],
        json!([{"allowedAddressPairs": [{"ipAddress": vip}]}]),
        "{cp}"
    );
    // Workers keep plain ports: only control-plane machines answer for the virtual IP.
    for w in templates.iter().filter(|m| *m != cp) {
        assert!(w["spec"]["template"]["spec"].get("ports").is_none(), "{w}");
    }
    deleted(t, &c).await;

    // Private (no floating IP), on an address the tenant chose.
    let ct = template(
        t,
        "vip-private",
        false,
        json!({"kube_vip_enabled": "true", "master_lb_floating_ip_enabled": "false",
               "api_server_fixed_ip": "10.0.0.10", "kube_vip_interface": "ens3"}),
    )
    .await;
    let (c, _) = created(t, "vip2", &ct, json!({})).await;
    let osc = one(&app, magnum_capi::capi::kinds::OPENSTACK_CLUSTER, &c);
    assert_eq!(osc["spec"]["disableAPIServerFloatingIP"], true, "{osc}");
    assert_eq!(
        osc["spec"]["apiServerLoadBalancer"]["enabled"], false,
        "{osc}"
    );
    assert_eq!(osc["spec"]["apiServerFixedIP"], "10.0.0.10", "{osc}");
    assert_eq!(
        osc["spec"]["managedSubnets"][0]["allocationPools"],
        json!([{"start": "10.0.0.2", "end": "10.0.0.9"}, {"start": "10.0.0.11", "end": "10.0.0.254"}]),
        "{osc}"
    );
    let kcp = one(&app, magnum_capi::capi::kinds::CONTROL_PLANE, &c);
    assert!(
        kcp["spec"]["kubeadmConfigSpec"]["files"]
            .to_string()
            .contains("ens3"),
        "{kcp}"
    );
    deleted(t, &c).await;

    // What cannot work is a 400 naming the label.
    for (fields, detail) in [
        (
            json!({"labels": {"kube_vip_enabled": "true", "api_server_fixed_ip": "10.0.1.5"}}),
            "api_server_fixed_ip=\"10.0.1.5\" is invalid: must be an address of the node subnet",
        ),
        (
            json!({"labels": {"kube_vip_enabled": "true"}, "fixed_network": "private"}),
            "kube_vip_enabled with a fixed network needs api_server_fixed_ip",
        ),
        (
            json!({"labels": {"kube_vip_enabled": "true",
                              "api_master_lb_allowed_cidrs": "192.0.2.0/24"}}),
            "cannot be enforced on an API without an Octavia load balancer",
        ),
        (
            json!({"labels": {"kube_vip_interface": "ens3"}}),
            "kube_vip_interface=\"ens3\" is invalid: needs kube_vip_enabled=true",
        ),
    ] {
        let ct = template_with(t, "bad", fields).await;
        assert_magnum_error(&refused(t, &ct).await, 400, detail);
    }
}

#[tokio::test]
async fn allowed_cidrs_admit_the_management_cluster_or_are_refused_where_nothing_enforces_them() {
    let app = app().await;
    let t = &app.t;
    let ct = template(
        t,
        "restricted",
        false,
        json!({"api_master_lb_allowed_cidrs": "192.0.2.0/24,198.51.100.7/32"}),
    )
    .await;
    let (c, _) = created(t, "r", &ct, json!({})).await;
    let osc = one(&app, magnum_capi::capi::kinds::OPENSTACK_CLUSTER, &c);
    // The restriction asks for the load balancer, and Cluster API keeps reaching the API.
    assert_eq!(
        osc["spec"]["apiServerLoadBalancer"]["enabled"], true,
        "{osc}"
    );
    assert_eq!(
        osc["spec"]["apiServerLoadBalancer"]["allowedCIDRs"],
        json!(["192.0.2.0/24", "198.51.100.7/32", MGMT_EGRESS]),
        "{osc}"
    );
    deleted(t, &c).await;

    // A provider that cannot enforce them (CAPO would drop them without a word): refused.
    let ct = template(
        t,
        "ovn",
        true,
        json!({"api_master_lb_allowed_cidrs": "192.0.2.0/24", "octavia_provider": "ovn"}),
    )
    .await;
    let r = refused(t, &ct).await;
    assert_magnum_error(
        &r,
        400,
        "cannot be enforced by the Octavia provider \"ovn\"",
    );

    // A management cluster whose egress addresses the operator did not give: refused, as
    // Cluster API would lock itself out.
    let bare = capi_app_on(None, None, false, |_| {}).await;
    let ct = template(
        &bare.t,
        "restricted",
        false,
        json!({"api_master_lb_allowed_cidrs": "192.0.2.0/24"}),
    )
    .await;
    let r = refused(&bare.t, &ct).await;
    assert_magnum_error(&r, 400, "egress_cidrs of the management cluster");
}

/// The fake Neutron's security group named `name` and its rules.
fn security_group(name: &str) -> Option<(Value, Vec<Value>)> {
    crate::common::stack::cloud().workload(|w| {
        let g = w
            .security_groups
            .iter()
            .find(|g| g["name"] == name)?
            .clone();
        let rules = w
            .security_group_rules
            .iter()
            .filter(|r| r["security_group_id"] == g["id"])
            .cloned()
            .collect();
        Some((g, rules))
    })
}

/// The remote prefixes of `rules` admitting TCP `port` (`None`: from anywhere).
fn sources_of(rules: &[Value], port: u64) -> Vec<Option<String>> {
    let mut v: Vec<Option<String>> = rules
        .iter()
        .filter(|r| r["direction"] == "ingress")
        .filter(|r| {
            // Any protocol and port admits it too.
            r["protocol"].is_null()
                || r["protocol"] == "tcp"
                    && r["port_range_min"].as_u64().is_none_or(|p| p <= port)
                    && r["port_range_max"].as_u64().is_none_or(|p| p >= port)
        })
        .filter(|r| r["remote_group_id"].is_null())
        .map(|r| r["remote_ip_prefix"].as_str().map(str::to_owned))
        .collect();
    v.sort();
    v
}

/// An API restricted by `api_master_lb_allowed_cidrs` is restricted on its machines too: CAPO's
/// managed groups (whose rule opens the API port to everyone) are off, the driver makes the
/// machines' groups with the cluster's credential before the machines, the API port admitting
/// only the allowed CIDRs, the management cluster's egress addresses and the node subnet, and
/// the delete removes them after the machines.
#[tokio::test]
async fn a_restricted_api_is_restricted_on_the_machines_security_groups_too() {
    let _env = crate::common::stack::env_shared().await;
    let app = capi_app_on(None, None, true, |cfg| {
        cfg.capi.egress_cidrs = vec![MGMT_EGRESS.into()];
        cfg.capi.cleanup_poll_secs = 1;
    })
    .await;
    let t = &app.t;
    let (ks, _) = crate::common::stack::parts().await;
    // What the driver makes belongs to the cluster's project, as in Neutron.
    crate::common::stack::cloud().set_identity(&ks.url);
    let token = ks.token("alice", "alpha").await;
    let labels = json!({"kube_tag": "v1.30.4", "api_master_lb_allowed_cidrs": "192.0.2.0/24,198.51.100.7/32"});
    let (uuid, capi) = running_cluster_with(t, &token, "restricted-sg", labels).await;

    let osc = one(&app, magnum_capi::capi::kinds::OPENSTACK_CLUSTER, &uuid);
    assert!(osc["spec"].get("managedSecurityGroups").is_none(), "{osc}");
    let (cp, cp_rules) = security_group(&format!("{capi}-secgroup-controlplane"))
        .expect("the control plane's security group");
    let (w, w_rules) =
        security_group(&format!("{capi}-secgroup-worker")).expect("the workers' security group");
    // The API port: the allowed CIDRs, Cluster API's egress, the node subnet (the amphorae).
    let api = [
        "10.0.0.0/24",
        "192.0.2.0/24",
        "198.51.100.7/32",
        MGMT_EGRESS,
    ];
    assert_eq!(
        sources_of(&cp_rules, 6443),
        api.iter().map(|c| Some(c.to_string())).collect::<Vec<_>>()
    );
    // The cluster's machines reach each other by group; nothing else is open on the workers
    // but NodePorts from the node subnet.
    for (rules, own, other) in [(&cp_rules, &cp, &w), (&w_rules, &w, &cp)] {
        for g in [own, other] {
            assert!(
                rules.iter().any(|r| r["direction"] == "ingress"
                    && r["protocol"].is_null()
                    && r["remote_group_id"] == g["id"]),
                "{rules:?}"
            );
        }
    }
    assert_eq!(sources_of(&w_rules, 6443), vec![]);
    assert_eq!(
        sources_of(&w_rules, 30080),
        vec![Some("10.0.0.0/24".to_string())]
    );
    // Every machine template names the group of its role.
    let templates = objects(
        &app,
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachineTemplate",
        &uuid,
    );
    assert_eq!(templates.len(), 2);
    for m in &templates {
        let group = m
            .pointer("/spec/template/spec/securityGroups/0/filter/name")
            .unwrap_or_else(|| panic!("no security group: {m}"));
        assert!([&cp["name"], &w["name"]].contains(&group), "{m}");
    }

    // Found again by name on the next apply (a resize), their rules set to exactly these: an
    // open API port added by hand is taken away.
    crate::common::stack::cloud().workload(|fake| {
        fake.security_group_rules
            .push(json!({"id": "open-api", "security_group_id": cp["id"],
            "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
            "port_range_min": 6443, "port_range_max": 6443, "remote_ip_prefix": null,
            "remote_group_id": null, "description": "", "project_id": cp["project_id"],
            "tenant_id": cp["project_id"]}));
    });
    assert!(
        sources_of(
            &security_group(cp["name"].as_str().unwrap()).unwrap().1,
            6443
        )
        .contains(&None)
    );
    let r = t
        .call_token(
            Some(&token),
            "POST",
            &format!("/v1/clusters/{uuid}/actions/resize"),
            Some("1.7"),
            Some(json!({"node_count": 2})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    t.wait_cluster_token(&token, &uuid, "UPDATE_COMPLETE").await;
    let groups = crate::common::stack::cloud().workload(|fake| {
        fake.security_groups
            .iter()
            .filter(|g| g["name"] == cp["name"] || g["name"] == w["name"])
            .count()
    });
    assert_eq!(groups, 2);
    let (_, again) = security_group(cp["name"].as_str().unwrap()).unwrap();
    assert_eq!(sources_of(&again, 6443), sources_of(&cp_rules, 6443));
    assert_eq!(again.len(), cp_rules.len());

    crate::capi_cleanup::delete(t, &token, &uuid).await;
    t.wait_cluster_token(&token, &uuid, "GONE").await;
    assert!(security_group(&format!("{capi}-secgroup-controlplane")).is_none());
    assert!(security_group(&format!("{capi}-secgroup-worker")).is_none());
}
