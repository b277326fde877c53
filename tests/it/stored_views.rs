//! Each cluster's view stored beside it in PostgreSQL (src/service/stored_views.rs): answers
//! byte for byte those built from the rows (every form, microversion and caller, awkward
//! strings), any change under a view retires it in the writing transaction (triggers on even
//! with replication's role), and a view built from rows older than a change is never stored.

use crate::common::*;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use magnum_capi::db::clusters::{self as cdb, Scope};
use magnum_capi::db::page::PageQuery;
use magnum_capi::domain::version::Version;
use magnum_capi::service::views;
use tower::ServiceExt;

/// The answer's bytes, as `who` asks at microversion `v`.
async fn bytes(t: &TestApp, who: &As, path: &str, v: &str) -> Vec<u8> {
    let req = Request::get(path)
        .header("host", "127.0.0.1:9511")
        .header("accept", "application/json")
        .header("x-user-id", who.user)
        .header("x-project-id", who.project)
        .header("x-roles", who.roles)
        .header("openstack-api-version", format!("container-infra {v}"))
        .body(Body::empty())
        .unwrap();
    let resp = magnum_capi::api::service(t.state.clone())
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{path} at {v}");
    resp.into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec()
}

const BASE: &str = "http://127.0.0.1:9511";

fn version(v: &str) -> Version {
    match v {
        "latest" => Version::new(1, 14),
        v => Version::new(1, v.trim_start_matches("1.").parse().unwrap()),
    }
}

async fn stored(t: &TestApp) -> i64 {
    t.sql_i64("SELECT count(*) FROM cluster_view WHERE body IS NOT NULL")
        .await
}

/// A template and four clusters of Alice's: plain; failed with a failed nodegroup (faults);
/// placed on a named management cluster (shown to admins); with a name and labels whose bytes
/// look like the members a stored view cuts out.
async fn clusters(t: &TestApp) -> Vec<String> {
    let tpl = t.template(&ALICE, "tpl").await;
    let mut out = Vec::new();
    for name in ["plain", "failed", "placed", "awkward"] {
        out.push(t.cluster(&ALICE, name, &tpl).await);
    }
    for sql in [
        format!(
            "UPDATE cluster SET status = 'CREATE_FAILED', status_reason = 'no' WHERE uuid = '{}'",
            out[1]
        ),
        format!(
            "UPDATE nodegroup SET status = 'CREATE_FAILED', status_reason = 'quota \"x\"'
              WHERE cluster_id = '{}' AND role = 'worker'",
            out[1]
        ),
        format!(
            "UPDATE cluster SET management_cluster = 'east' WHERE uuid = '{}'",
            out[2]
        ),
        format!(
            "UPDATE cluster SET name = E'a\",\"links\":[{{\"}}],\"cluster_id\":\\\\\u{1}☃',
                    labels = labels || '{{\"links\": \"[\\\"}}\", \"cluster_id\": \"x\", \"faults\": \"{{\"}}'
              WHERE uuid = '{}'",
            out[3]
        ),
    ] {
        assert_eq!(t.write_sql(&sql).await, 1, "{sql}");
    }
    out
}

#[tokio::test]
async fn stored_views_answer_byte_for_byte_as_views_built_from_the_rows() {
    let t = app().await;
    let uuids = clusters(&t).await;
    let pool = &t.state.pool;
    for round in ["built", "stored"] {
        for v in ["1.1", "1.12", "1.13", "latest"] {
            let mv = version(v);
            for who in [&ALICE, &ADMIN] {
                let admin = who.roles.contains("admin");
                for u in &uuids {
                    let row = cdb::one_with_nodes(pool, &Scope::All, u.parse().unwrap())
                        .await
                        .unwrap()
                        .unwrap();
                    let want = serde_json::to_vec(&views::cluster_aggregated(row, admin, BASE, mv))
                        .unwrap();
                    let got = bytes(&t, who, &format!("/v1/clusters/{u}"), v).await;
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want),
                        "{round} show of {u} at {v} as {}",
                        who.user
                    );
                }
                for (query, sort_key, desc) in [
                    ("", "id", false),
                    ("?sort_key=name&sort_dir=desc", "name", true),
                ] {
                    for detail in [false, true] {
                        let scope = if admin {
                            Scope::All
                        } else {
                            Scope::Project(who.project.into())
                        };
                        let page = PageQuery {
                            sort_key,
                            desc,
                            marker_id: None,
                            limit: 1000,
                        };
                        let rows = cdb::page_with_nodes(pool, &scope, &page, detail)
                            .await
                            .unwrap();
                        let want = serde_json::to_vec(&views::ClusterList {
                            clusters: rows
                                .into_iter()
                                .map(|r| views::cluster_entry(r, detail, admin, BASE, mv))
                                .collect(),
                            next: None,
                        })
                        .unwrap();
                        let path = if detail {
                            "/v1/clusters/detail"
                        } else {
                            "/v1/clusters"
                        };
                        let got = bytes(&t, who, &format!("{path}{query}"), v).await;
                        assert_eq!(
                            String::from_utf8_lossy(&got),
                            String::from_utf8_lossy(&want),
                            "{round} {path}{query} at {v} as {}",
                            who.user
                        );
                    }
                }
            }
        }
        assert_eq!(stored(&t).await, 4, "after the {round} round");
    }
    // A page with a `next` link ends with it, as serde writes the list.
    let page = bytes(&t, &ALICE, "/v1/clusters?limit=2", "latest").await;
    let text = String::from_utf8(page).unwrap();
    assert!(
        text.ends_with(&format!(
            "],\"next\":\"{BASE}/v1/clusters?sort_key=id&sort_dir=asc&limit=2&marker={}\"}}",
            uuids[1]
        )),
        "{text}"
    );
}

#[tokio::test]
async fn every_change_under_a_view_retires_it_even_with_triggers_off() {
    let t = app().await;
    let uuids = clusters(&t).await;
    let c = &uuids[0];
    let show = format!("/v1/clusters/{c}");
    let read = |field: &'static str| {
        let (t, show) = (&t, show.clone());
        async move { t.get_v(&ALICE, &show, "latest").await.body[field].clone() }
    };
    read("status").await;
    assert_eq!(stored(&t).await, 1);
    // The row itself, written as a logical replication subscriber writes (user triggers off).
    let mut tx = t.state.pool.begin().await.unwrap();
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE cluster SET status = 'UPDATE_COMPLETE' WHERE uuid = '{c}'"
    )))
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(stored(&t).await, 0);
    assert_eq!(read("status").await, "UPDATE_COMPLETE");
    // A nodegroup.
    t.write_sql(&format!(
        "UPDATE nodegroup SET node_count = 7 WHERE cluster_id = '{c}' AND role = 'worker'"
    ))
    .await;
    assert_eq!(read("node_count").await, 7);
    // The template's labels (the parent of the label diffs; the cluster's kube_tag was the
    // template's).
    assert_eq!(read("labels_overridden").await, serde_json::json!({}));
    t.write_sql("UPDATE cluster_template SET labels = '{\"kube_tag\": \"v1.99.0\"}'")
        .await;
    assert_eq!(
        read("labels_overridden").await,
        serde_json::json!({"kube_tag": "v1.99.0"})
    );
    // A deleted cluster leaves nothing stored behind.
    assert_eq!(stored(&t).await, 1);
    t.write_sql(&format!("DELETE FROM cluster WHERE uuid = '{c}'"))
        .await;
    assert_eq!(
        t.sql_i64(&format!(
            "SELECT count(*) FROM cluster_view WHERE cluster_uuid = '{c}'"
        ))
        .await,
        0
    );
    t.get_v(&ALICE, &show, "latest").await.assert_status(404);
}

#[tokio::test]
async fn a_view_built_from_rows_older_than_a_change_is_not_stored() {
    let t = app().await;
    let uuids = clusters(&t).await;
    let c: uuid::Uuid = uuids[0].parse().unwrap();
    let pool = &t.state.pool;
    let old = cdb::one_with_nodes(pool, &Scope::All, c)
        .await
        .unwrap()
        .unwrap();
    let version = old.view_version.unwrap();
    // A change commits after the rows were read and before their view is stored.
    t.write_sql(&format!(
        "UPDATE cluster SET status = 'UPDATE_COMPLETE' WHERE uuid = '{c}'"
    ))
    .await;
    let body = magnum_capi::service::stored_views::build(old).unwrap();
    magnum_capi::db::cluster_views::store(pool, &[(c, version, body)])
        .await
        .unwrap();
    assert_eq!(stored(&t).await, 0, "the older view is not stored");
    let now = cdb::one_with_nodes(pool, &Scope::All, c)
        .await
        .unwrap()
        .unwrap();
    let version = now.view_version.unwrap();
    let body = magnum_capi::service::stored_views::build(now).unwrap();
    magnum_capi::db::cluster_views::store(pool, &[(c, version, body)])
        .await
        .unwrap();
    assert_eq!(stored(&t).await, 1, "stored at the version it was read at");
}
