//! The simulated management cluster's apply and admission against the real CAPI/CAPO CRDs:
//! server-side apply with field ownership (removal of what a manager stops applying, other
//! managers' fields kept, 409 conflicts unless forced), structural defaults and the CRDs'
//! `x-kubernetes-validations` CEL rules, and the inventory of rules the evaluator cannot run.

use crate::common::capi::crd_dir;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use magnum_capi::simkube::SimCluster;
use magnum_capi::simkube::admission::CrdAdmission;
use serde_json::{Value, json};

const NS: &str = "magnum-p1";
const KCT: (&str, &str) = (
    "bootstrap.cluster.x-k8s.io/v1beta2",
    "KubeadmConfigTemplate",
);
const OSMT: (&str, &str) = (
    "infrastructure.cluster.x-k8s.io/v1beta1",
    "OpenStackMachineTemplate",
);

/// A bare (no controllers) simulated API server validating with the CRDs, with namespace `NS`.
async fn start() -> SimCluster {
    crate::common::capi::bare_sim(NS).await
}

fn api(sim: &SimCluster, (av, kind): (&str, &str)) -> Api<DynamicObject> {
    let (group, version) = av.rsplit_once('/').unwrap();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(sim.client(), NS, &ar)
}

/// Server-side apply over HTTP, returning the status code and the JSON body (object or
/// Kubernetes `Status`).
async fn apply_raw(sim: &SimCluster, manager: &str, force: bool, obj: &Value) -> (u16, Value) {
    let av = obj["apiVersion"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap();
    let plural = magnum_capi::capi::apply::resource(av, kind).plural;
    let url = format!(
        "{}/apis/{av}/namespaces/{NS}/{plural}/{name}?fieldManager={manager}&force={force}",
        sim.url()
    );
    let resp = crate::common::http()
        .patch(url)
        .header("content-type", "application/apply-patch+yaml")
        .body(serde_json::to_vec(obj).unwrap())
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap())
}

/// Applies as `manager` (forced, as the driver does) and returns the stored object.
async fn apply(sim: &SimCluster, manager: &str, obj: &Value) -> Value {
    let (code, body) = apply_raw(sim, manager, true, obj).await;
    assert!(code == 200 || code == 201, "{code}: {body:#}");
    body
}

fn kct(labels: Value, args: Value, node_name: Option<&str>) -> Value {
    let mut reg = json!({"kubeletExtraArgs": args});
    if let Some(n) = node_name {
        reg["name"] = json!(n);
    }
    json!({"apiVersion": KCT.0, "kind": KCT.1,
           "metadata": {"name": "k1-md-0", "namespace": NS, "labels": labels},
           "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": reg}}}}})
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["fieldsType"], "FieldsV1");
            (
                e["manager"].as_str().unwrap().to_string(),
                e["operation"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn arg(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

#[tokio::test]
async fn reapplying_without_a_field_removes_it_and_other_managers_fields_survive() {
    let sim = start().await;
    let first = kct(
        json!({"a": "1", "b": "2"}),
        json!([arg("cloud-provider", "external"), arg("provider-id", "x")]),
        Some("{{ local_hostname }}"),
    );
    let created = apply(&sim, "magnum-capi", &first).await;
    let spec = &created["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:template"];
    let args = &spec["f:spec"]["f:joinConfiguration"]["f:nodeRegistration"]["f:kubeletExtraArgs"];
    assert_eq!(
        args["k:{\"name\":\"provider-id\",\"value\":\"x\"}"],
        json!({".": {}, "f:name": {}, "f:value": {}})
    );

    // Another manager adds a label (merge patch: an Update entry) and an argument (apply).
    let kcts = api(&sim, KCT);
    let ops = PatchParams {
        field_manager: Some("ops".into()),
        ..PatchParams::default()
    };
    kcts.patch(
        "k1-md-0",
        &ops,
        &Patch::Merge(json!({"metadata": {"labels": {"ops": "yes"}}})),
    )
    .await
    .unwrap();
    let theirs = kct(json!({}), json!([arg("v", "2")]), None);
    apply(&sim, "ops", &theirs).await;

    // The driver's next rendering drops a label, an argument and a nested field.
    let second = kct(
        json!({"a": "1"}),
        json!([arg("cloud-provider", "external")]),
        None,
    );
    let now = apply(&sim, "magnum-capi", &second).await;
    assert_eq!(now["metadata"]["labels"], json!({"a": "1", "ops": "yes"}));
    let reg = &now["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"];
    assert_eq!(
        reg["kubeletExtraArgs"],
        json!([arg("cloud-provider", "external"), arg("v", "2")])
    );
    assert!(reg.get("name").is_none(), "{reg:#}");
    assert_eq!(
        managers(&now),
        [
            ("magnum-capi".into(), "Apply".into()),
            ("ops".into(), "Update".into()),
            ("ops".into(), "Apply".into())
        ]
    );
    // Replaying the same rendering changes nothing.
    let again = apply(&sim, "magnum-capi", &second).await;
    assert_eq!(
        again["metadata"]["resourceVersion"],
        now["metadata"]["resourceVersion"]
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_conflict_with_another_manager_is_a_409_unless_forced() {
    let sim = start().await;
    let args = json!([arg("cloud-provider", "external")]);
    apply(
        &sim,
        "magnum-capi",
        &kct(json!({"a": "1"}), args.clone(), None),
    )
    .await;

    // The same value is shared ownership, not a conflict.
    let (code, body) =
        apply_raw(&sim, "ops", false, &kct(json!({"a": "1"}), json!([]), None)).await;
    assert_eq!(code, 200, "{body:#}");

    let (code, status) =
        apply_raw(&sim, "ops", false, &kct(json!({"a": "2"}), json!([]), None)).await;
    assert_eq!(code, 409, "{status:#}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "field": ".metadata.labels.a",
                "message": format!("conflict with \"magnum-capi\" using {}", KCT.0)}])
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("Apply failed with 1 conflict"),
        "{status:#}"
    );

    let (code, forced) =
        apply_raw(&sim, "ops", true, &kct(json!({"a": "2"}), json!([]), None)).await;
    assert_eq!(code, 200, "{forced:#}");
    assert_eq!(forced["metadata"]["labels"]["a"], "2");
    let driver = &forced["metadata"]["managedFields"][0];
    assert_eq!(driver["manager"], "magnum-capi");
    assert!(driver["fieldsV1"]["f:metadata"].is_null(), "{driver:#}");

    // The driver applies with force as well: its value wins back.
    let back = apply(&sim, "magnum-capi", &kct(json!({"a": "1"}), args, None)).await;
    assert_eq!(back["metadata"]["labels"]["a"], "1");
    sim.shutdown().await;
}

fn osmt(region: &str, flavor: Option<&str>) -> Value {
    let mut spec = json!({"image": {"filter": {"name": "ubuntu-2404"}},
        "identityRef": {"cloudName": "openstack", "name": "k1-cloud-credentials",
                        "region": region}});
    if let Some(f) = flavor {
        spec["flavor"] = json!(f);
    }
    json!({"apiVersion": OSMT.0, "kind": OSMT.1,
           "metadata": {"name": "k1-md-0", "namespace": NS},
           "spec": {"template": {"spec": spec}}})
}

#[tokio::test]
async fn cel_rules_of_the_crds_refuse_immutable_changes_and_missing_fields() {
    let sim = start().await;
    // A cross-field rule: `(has(self.flavor) || has(self.flavorID))`.
    let (code, status) = apply_raw(&sim, "magnum-capi", true, &osmt("RegionOne", None)).await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        status["details"]["causes"][0]["field"], "spec.template.spec",
        "{status:#}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("at least one of flavor or flavorID must be set"),
        "{status:#}"
    );

    let created = apply(&sim, "magnum-capi", &osmt("RegionOne", Some("m1.small"))).await;
    // Structural default: identityRef.type.
    assert_eq!(
        created["spec"]["template"]["spec"]["identityRef"]["type"],
        "Secret"
    );

    // A transition rule: the region is immutable, by apply or by any other write.
    let (code, status) = apply_raw(
        &sim,
        "magnum-capi",
        true,
        &osmt("RegionTwo", Some("m1.small")),
    )
    .await;
    assert_eq!(code, 422, "{status:#}");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "field": "spec.template.spec.identityRef",
                "message": "Invalid value: \"object\": region is immutable"}])
    );
    assert_eq!(
        status["message"],
        "OpenStackMachineTemplate.infrastructure.cluster.x-k8s.io \"k1-md-0\" is invalid: \
         spec.template.spec.identityRef: Invalid value: \"object\": region is immutable"
    );
    let err = api(&sim, OSMT)
        .patch(
            "k1-md-0",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"spec": {"identityRef": {"region": null}}}}}),
            ),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (422, "Invalid")),
        other => panic!("{other:?}"),
    }
    // Other fields stay mutable.
    apply(&sim, "magnum-capi", &osmt("RegionOne", Some("m1.large"))).await;

    // A list rule with `all`/`exists_one`: argument names are unique (the list-map keys are
    // name and value, so apply alone would accept both).
    let dup = kct(
        json!({}),
        json!([
            arg("cloud-provider", "external"),
            arg("cloud-provider", "none")
        ]),
        None,
    );
    let (code, status) = apply_raw(&sim, "magnum-capi", true, &dup).await;
    assert_eq!(code, 422, "{status:#}");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.template.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("kubeletExtraArgs name must be unique")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn schema_defaults_are_stored_on_create_and_update() {
    let sim = start().await;
    let hcp = |options: Value| {
        json!({"apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "HelmChartProxy",
               "metadata": {"name": "k1-cni", "namespace": NS},
               "spec": {"chartName": "cilium", "repoURL": "https://helm.cilium.io/",
                        "clusterSelector": {"matchLabels": {"c": "k1"}}, "options": options}})
    };
    let created = apply(&sim, "magnum-capi", &hcp(json!({"install": {}}))).await;
    assert_eq!(
        created["spec"]["options"],
        json!({"enableClientCache": false, "install": {"createNamespace": true}})
    );
    // The applied `install` goes with its defaulted field; the new `upgrade` gets its default.
    let updated = apply(&sim, "magnum-capi", &hcp(json!({"upgrade": {}}))).await;
    assert_eq!(
        updated["spec"]["options"],
        json!({"enableClientCache": false, "upgrade": {"maxHistory": 10}})
    );
    sim.shutdown().await;
}

/// Every `x-kubernetes-validations` rule of the CRDs, as (kind, version, rule), read directly
/// from the YAML.
fn all_rules() -> Vec<(String, String, String)> {
    fn walk(s: &Value, kind: &str, version: &str, out: &mut Vec<(String, String, String)>) {
        for r in s["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            out.push((
                kind.into(),
                version.into(),
                r["rule"].as_str().unwrap().into(),
            ));
        }
        for sub in s["properties"]
            .as_object()
            .into_iter()
            .flat_map(|p| p.values())
        {
            walk(sub, kind, version, out);
        }
        for key in ["items", "additionalProperties"] {
            if s[key].is_object() {
                walk(&s[key], kind, version, out);
            }
        }
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(crd_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let crd: Value = yaml_serde::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if crd["kind"] != "CustomResourceDefinition" {
            continue;
        }
        for v in crd["spec"]["versions"].as_array().unwrap() {
            if v["served"] == false {
                continue;
            }
            walk(
                &v["schema"]["openAPIV3Schema"],
                crd["spec"]["names"]["kind"].as_str().unwrap(),
                v["name"].as_str().unwrap(),
                &mut out,
            );
        }
    }
    out
}

/// The rules the simulated apiserver does not evaluate, as (kind, schema path, reason). Keep
/// this list exact: a rule is either evaluated or named here.
const UNSUPPORTED: &[(&str, &str, &str)] = &[];

#[test]
fn every_cel_rule_of_the_crds_is_evaluated_or_listed_as_unsupported() {
    let admission = CrdAdmission::load(&crd_dir()).unwrap();
    let unsupported: Vec<(&str, &str, &str)> = admission
        .unsupported()
        .iter()
        .map(|u| (u.kind.as_str(), u.path.as_str(), u.reason.as_str()))
        .collect();
    assert_eq!(unsupported, UNSUPPORTED);
    let rules = all_rules();
    assert!(rules.len() >= 60, "{} rules", rules.len());
    assert_eq!(
        admission.rule_count() + admission.unsupported().len(),
        rules.len()
    );
}
