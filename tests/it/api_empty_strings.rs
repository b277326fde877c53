//! `""` and `null` for every string field of every request body are taken or refused as Magnum
//! 23's WSME types take or refuse them (issue 44: Horizon's cluster dialog sends
//! `"discovery_url": ""`). One table, written from Magnum's declarations
//! (`magnum/api/controllers/v1/*.py`), is checked twice: against Magnum's own types
//! (tests/it/magnum/magnum_types.py parses each body as Magnum's API does) and against our answers.

use serde_json::{Value, json};

use crate::common::capi::{admin_csr, capi_app_on};
use crate::common::{self, ADMIN, ALICE, TestApp, magnum, wait};

/// What Magnum does with a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Magnum {
    /// Its type takes it and the request succeeds.
    Takes,
    /// Its type refuses it: a 400 that names the field.
    Refuses,
    /// Its type takes it, then the handler refuses the request (a mandatory field given `null`,
    /// a look-up of `""`): a 4xx.
    Later,
}
use Magnum::{Later, Refuses, Takes};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Req {
    TemplateCreate,
    TemplatePatch,
    ClusterCreate,
    NodegroupCreate,
    Resize,
    Upgrade,
    Certificate,
    QuotaCreate,
    QuotaUpdate,
}
use Req::*;

impl Req {
    /// Magnum's type of the body (a PATCH re-validates the patched document with it).
    fn wsme_type(self) -> &'static str {
        match self {
            TemplateCreate | TemplatePatch => "ClusterTemplate",
            ClusterCreate => "Cluster",
            NodegroupCreate => "NodeGroup",
            Resize => "ClusterResizeRequest",
            Upgrade => "ClusterUpgradeRequest",
            Certificate => "Certificate",
            QuotaCreate | QuotaUpdate => "Quota",
        }
    }
}

/// (request, string field, what Magnum does with `""`, with `null`). Read-only fields are
/// refused whatever their value; `wtypes.text` takes `""`; `StringType(min_length=1)`, enums,
/// uuids and the DNS list refuse it; every type takes `null` (WSME checks `mandatory` only for
/// an absent attribute, so the handler refuses a mandatory `null`).
const TABLE: &[(Req, &str, Magnum, Magnum)] = &[
    (TemplateCreate, "uuid", Refuses, Takes),
    (TemplateCreate, "name", Refuses, Takes),
    (TemplateCreate, "coe", Refuses, Later),
    (TemplateCreate, "image_id", Refuses, Later),
    (TemplateCreate, "flavor_id", Refuses, Takes),
    (TemplateCreate, "master_flavor_id", Refuses, Takes),
    (TemplateCreate, "dns_nameserver", Refuses, Takes),
    (TemplateCreate, "keypair_id", Refuses, Takes),
    (TemplateCreate, "external_network_id", Refuses, Takes),
    (TemplateCreate, "fixed_network", Refuses, Takes),
    (TemplateCreate, "fixed_subnet", Refuses, Takes),
    (TemplateCreate, "network_driver", Refuses, Takes),
    (TemplateCreate, "cluster_distro", Refuses, Takes),
    (TemplateCreate, "http_proxy", Refuses, Takes),
    (TemplateCreate, "https_proxy", Refuses, Takes),
    (TemplateCreate, "no_proxy", Refuses, Takes),
    (TemplateCreate, "volume_driver", Refuses, Takes),
    // `null` finds no driver for (None, distro, coe).
    (TemplateCreate, "server_type", Refuses, Later),
    (TemplateCreate, "insecure_registry", Refuses, Takes),
    (TemplateCreate, "docker_storage_driver", Refuses, Takes),
    (TemplateCreate, "tags", Takes, Takes),
    (TemplateCreate, "driver", Refuses, Takes),
    (TemplateCreate, "project_id", Refuses, Refuses),
    (TemplateCreate, "user_id", Refuses, Refuses),
    (TemplatePatch, "name", Refuses, Takes),
    (TemplatePatch, "coe", Refuses, Later),
    (TemplatePatch, "image_id", Refuses, Later),
    (TemplatePatch, "flavor_id", Refuses, Takes),
    (TemplatePatch, "master_flavor_id", Refuses, Takes),
    (TemplatePatch, "dns_nameserver", Refuses, Takes),
    (TemplatePatch, "keypair_id", Refuses, Takes),
    (TemplatePatch, "http_proxy", Refuses, Takes),
    (TemplatePatch, "no_proxy", Refuses, Takes),
    (TemplatePatch, "insecure_registry", Refuses, Takes),
    (TemplatePatch, "tags", Takes, Takes),
    (ClusterCreate, "uuid", Refuses, Takes),
    (ClusterCreate, "name", Refuses, Takes),
    (ClusterCreate, "cluster_template_id", Later, Later),
    (ClusterCreate, "keypair", Refuses, Takes),
    (ClusterCreate, "master_flavor_id", Refuses, Takes),
    (ClusterCreate, "flavor_id", Refuses, Takes),
    (ClusterCreate, "discovery_url", Takes, Takes),
    (ClusterCreate, "fixed_network", Refuses, Takes),
    (ClusterCreate, "fixed_subnet", Refuses, Takes),
    (ClusterCreate, "status", Refuses, Takes),
    (ClusterCreate, "status_reason", Takes, Takes),
    (ClusterCreate, "health_status", Refuses, Takes),
    (ClusterCreate, "stack_id", Refuses, Refuses),
    (ClusterCreate, "cluster_id", Refuses, Refuses),
    (ClusterCreate, "api_address", Refuses, Refuses),
    (ClusterCreate, "coe_version", Refuses, Refuses),
    (ClusterCreate, "container_version", Refuses, Refuses),
    (ClusterCreate, "project_id", Refuses, Refuses),
    (ClusterCreate, "user_id", Refuses, Refuses),
    (NodegroupCreate, "uuid", Refuses, Takes),
    (NodegroupCreate, "cluster_id", Refuses, Takes),
    (NodegroupCreate, "flavor_id", Refuses, Takes),
    (NodegroupCreate, "image_id", Refuses, Takes),
    (NodegroupCreate, "role", Refuses, Takes),
    (NodegroupCreate, "status", Refuses, Takes),
    (NodegroupCreate, "status_reason", Takes, Takes),
    (NodegroupCreate, "version", Takes, Takes),
    (NodegroupCreate, "project_id", Refuses, Refuses),
    (NodegroupCreate, "stack_id", Refuses, Refuses),
    (Resize, "nodegroup", Refuses, Takes),
    (Upgrade, "nodegroup", Refuses, Takes),
    (Upgrade, "cluster_template", Refuses, Later),
    // `""` sets no cluster (the property's setter skips a false value): nothing to sign for.
    (Certificate, "cluster_uuid", Later, Later),
    (Certificate, "csr", Refuses, Later),
    (Certificate, "pem", Takes, Takes),
    // `""` signs with the Kubernetes CA (Magnum's conductor's default).
    (Certificate, "ca_cert_type", Takes, Takes),
    (QuotaCreate, "project_id", Refuses, Later),
    (QuotaCreate, "resource", Refuses, Takes),
    (QuotaUpdate, "project_id", Refuses, Takes),
    (QuotaUpdate, "resource", Refuses, Takes),
];

/// The valid body each row changes one field of (`i` keeps names unique).
fn base(req: Req, i: usize, template: &str, cluster: &str) -> Value {
    match req {
        TemplateCreate | TemplatePatch => json!({"coe": "kubernetes", "image_id": "ubuntu-jammy"}),
        ClusterCreate => json!({"cluster_template_id": template, "name": format!("c{i}")}),
        NodegroupCreate => json!({"name": format!("ng{i}"), "node_count": 1}),
        Resize => json!({"node_count": 1}),
        Upgrade => json!({"cluster_template": template}),
        Certificate => json!({"cluster_uuid": cluster, "csr": admin_csr()}),
        QuotaCreate => {
            json!({"project_id": format!("q{i}"), "resource": "Cluster", "hard_limit": 3})
        }
        QuotaUpdate => json!({"project_id": "q-upd", "resource": "Cluster", "hard_limit": 4}),
    }
}

#[test]
fn the_table_is_what_magnums_own_types_do() {
    let bodies: Vec<(&str, Value)> = TABLE
        .iter()
        .flat_map(|(req, field, _, _)| {
            [json!(""), Value::Null].map(|v| {
                let mut b = base(*req, 0, "t", "c");
                b[*field] = v;
                (req.wsme_type(), b)
            })
        })
        .collect();
    let answers = magnum::types(&bodies);
    let mut wrong = Vec::new();
    for (row, pair) in TABLE.iter().zip(answers.chunks(2)) {
        let (req, field, empty, null) = row;
        for (value, want, got) in [("\"\"", empty, &pair[0]), ("null", null, &pair[1])] {
            if (*want == Refuses) != got.is_err() {
                wrong.push(format!(
                    "{req:?} {field}={value}: table {want:?}, Magnum {got:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_and_null_strings_are_taken_or_refused_as_magnum_takes_or_refuses_them() {
    // The CAPI driver on a simulated management cluster: clusters get their CA (certificates
    // are signed) and the values are built at create, as in `serve --dev`.
    let app = capi_app_on(None, None, false, |c| {
        c.quotas.max_clusters_per_project = 100
    })
    .await;
    let t = &app.t;
    let template = t.template(&ALICE, "t0").await;
    let patched = t.template(&ALICE, "t1").await;
    let cluster = t.cluster(&ALICE, "c0", &template).await;
    t.wait_cluster(&ALICE, &cluster, "CREATE_COMPLETE").await;
    t.post(&ADMIN, "/v1/quotas", base(QuotaUpdate, 0, "", ""))
        .await
        .assert_status(201);

    let mut wrong = Vec::new();
    for (i, (req, field, empty, null)) in TABLE.iter().enumerate() {
        for (k, (value, want)) in [(json!(""), empty), (Value::Null, null)]
            .into_iter()
            .enumerate()
        {
            let mut body = base(*req, 2 * i + k, &template, &cluster);
            body[*field] = value.clone();
            let r = send(t, *req, field, body, &patched, &cluster).await;
            let (code, detail) = (r.status.as_u16(), r.detail().to_string());
            let ok = match want {
                Takes => (200..300).contains(&code),
                Refuses => code == 400 && detail.contains(field),
                Later => (400..500).contains(&code),
            };
            if !ok {
                wrong.push(format!(
                    "{req:?} {field}={value}: Magnum {want:?}, we answered {code} {}",
                    r.body
                ));
            }
            if (200..300).contains(&code) && matches!(req, NodegroupCreate | Resize | Upgrade) {
                settle(t, &cluster).await;
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // What Magnum stores, we answer: the dialog's `""` comes back as `""`.
    let r = t
        .post(
            &ALICE,
            "/v1/clusters",
            json!({"cluster_template_id": template, "name": "dialog", "discovery_url": ""}),
        )
        .await;
    r.assert_status(202);
    let uuid = r.body["uuid"].as_str().unwrap_or_default().to_string();
    let r = t.get(&ALICE, &format!("/v1/clusters/{uuid}")).await;
    assert_eq!(r.body["discovery_url"], json!(""), "{}", r.body);
}

async fn send(
    t: &TestApp,
    req: Req,
    field: &str,
    body: Value,
    patched: &str,
    cluster: &str,
) -> common::Resp {
    match req {
        TemplateCreate => t.post(&ALICE, "/v1/clustertemplates", body).await,
        TemplatePatch => {
            let ops = json!([{"op": "replace", "path": format!("/{field}"), "value": body[field]}]);
            t.patch(&ALICE, &format!("/v1/clustertemplates/{patched}"), ops)
                .await
        }
        ClusterCreate => t.post(&ALICE, "/v1/clusters", body).await,
        NodegroupCreate => {
            let path = format!("/v1/clusters/{cluster}/nodegroups");
            t.post_v(&ALICE, &path, "1.9", body).await
        }
        Resize => {
            let path = format!("/v1/clusters/{cluster}/actions/resize");
            t.post_v(&ALICE, &path, "1.7", body).await
        }
        Upgrade => {
            let path = format!("/v1/clusters/{cluster}/actions/upgrade");
            t.post_v(&ALICE, &path, "1.8", body).await
        }
        Certificate => t.post(&ALICE, "/v1/certificates", body).await,
        QuotaCreate => t.post(&ADMIN, "/v1/quotas", body).await,
        QuotaUpdate => t.patch(&ADMIN, "/v1/quotas/q-upd/Cluster", body).await,
    }
}

/// Waits until the cluster and its nodegroups are at rest again after an accepted change.
async fn settle(t: &TestApp, cluster: &str) {
    let path = format!("/v1/clusters/{cluster}/nodegroups");
    wait::until("the cluster and its nodegroups to settle", || async {
        let c = t.get(&ALICE, &format!("/v1/clusters/{cluster}")).await;
        let ngs = t.get_v(&ALICE, &path, "1.9").await;
        let done = |v: &Value| {
            v["status"]
                .as_str()
                .is_some_and(|s| s.ends_with("_COMPLETE"))
        };
        (done(&c.body) && ngs.body["nodegroups"].as_array()?.iter().all(done)).then_some(())
    })
    .await;
}
