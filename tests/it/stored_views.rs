//! Each cluster's and each template's view stored beside it in PostgreSQL
//! (src/service/stored_views.rs): answers byte for byte those built from the rows (every form,
//! microversion and caller, awkward strings), any change under a view retires it in the writing
//! transaction (triggers on even with replication's role), and a view built from rows older than
//! a change is never stored.

use crate::common::*;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use magnum_capi::db::clusters as cdb;
use magnum_capi::db::template_views as tvdb;
use magnum_capi::db::templates::{self as tdb, Visibility};
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

/// Asserts that `who` asking for `path` at microversion `v` gets `want` as serde writes it, byte
/// for byte (`what`: the case, for the failure message).
async fn assert_answers(
    t: &TestApp,
    who: &As,
    path: &str,
    v: &str,
    want: &impl serde::Serialize,
    what: &str,
) {
    let got = bytes(t, who, path, v).await;
    let want = serde_json::to_vec(want).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want),
        "{what} {path} at {v} as {}",
        who.user
    );
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

async fn stored_templates(t: &TestApp) -> i64 {
    t.sql_i64("SELECT count(*) FROM template_view WHERE body IS NOT NULL")
        .await
}

/// The uuids `sql` (a `SELECT uuid …`) returns, in order: the reference order of a page.
async fn uuids_of(t: &TestApp, sql: &str) -> Vec<uuid::Uuid> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_all(&t.state.pool)
        .await
        .unwrap()
}

/// The cluster's rows as its views are built from them (nodegroups aggregated, template labels).
async fn cluster_rows(t: &TestApp, uuid: uuid::Uuid) -> cdb::ClusterWithNodes {
    cdb::with_nodes_by_uuids(&t.state.pool, &[uuid])
        .await
        .unwrap()
        .pop()
        .unwrap()
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
    for round in ["built", "stored"] {
        for v in ["1.1", "1.12", "1.13", "latest"] {
            let mv = version(v);
            for who in [&ALICE, &ADMIN] {
                let admin = who.roles.contains("admin");
                for u in &uuids {
                    let row = cluster_rows(&t, u.parse().unwrap()).await;
                    let want = views::cluster_aggregated(row, admin, BASE, mv);
                    let path = format!("/v1/clusters/{u}");
                    assert_answers(&t, who, &path, v, &want, round).await;
                }
                for (query, order) in [
                    ("", "id"),
                    (
                        "?sort_key=name&sort_dir=desc",
                        "name DESC NULLS FIRST, id DESC",
                    ),
                ] {
                    let visible = if admin {
                        "TRUE".to_string()
                    } else {
                        format!("project_id = '{}'", who.project)
                    };
                    let order = uuids_of(
                        &t,
                        &format!("SELECT uuid FROM cluster WHERE {visible} ORDER BY {order}"),
                    )
                    .await;
                    for detail in [false, true] {
                        let mut clusters = Vec::new();
                        for u in &order {
                            let row = cluster_rows(&t, *u).await;
                            clusters.push(views::cluster_entry(row, detail, admin, BASE, mv));
                        }
                        let want = views::ClusterList {
                            clusters,
                            next: None,
                        };
                        let path = if detail {
                            "/v1/clusters/detail"
                        } else {
                            "/v1/clusters"
                        };
                        let path = format!("{path}{query}");
                        assert_answers(&t, who, &path, v, &want, round).await;
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
    write_unannounced(
        &t.state.pool,
        &format!("UPDATE cluster SET status = 'UPDATE_COMPLETE' WHERE uuid = '{c}'"),
    )
    .await;
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
    let old = cluster_rows(&t, c).await;
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
    let now = cluster_rows(&t, c).await;
    let version = now.view_version.unwrap();
    let body = magnum_capi::service::stored_views::build(now).unwrap();
    magnum_capi::db::cluster_views::store(pool, &[(c, version, body)])
        .await
        .unwrap();
    assert_eq!(stored(&t).await, 1, "stored at the version it was read at");
}

/// A view is retired once per writing transaction: the create's one statement takes one version
/// for its cluster's view (the nodegroups it inserts do not retire the row the cluster's insert
/// just made), more writes in one transaction leave the version its first write set (but retire
/// a body the transaction stored meanwhile), and a write in a later transaction moves it again.
#[tokio::test]
async fn a_view_is_retired_once_per_writing_transaction() {
    let t = app().await;
    let tpl = t.template(&ALICE, "tpl").await;
    let before = t.sql_i64("SELECT nextval('cluster_view_version')").await;
    let c = t.cluster(&ALICE, "c", &tpl).await;
    let version = format!("SELECT version FROM cluster_view WHERE cluster_uuid = '{c}'");
    assert_eq!(
        t.sql_i64(&version).await,
        before + 1,
        "the create took one version"
    );
    let mut tx = t.state.pool.begin().await.unwrap();
    let mut versions = Vec::new();
    for sql in [
        format!("UPDATE nodegroup SET status = 'UPDATE_IN_PROGRESS' WHERE cluster_id = '{c}'"),
        format!("UPDATE cluster SET status = 'UPDATE_IN_PROGRESS' WHERE uuid = '{c}'"),
        format!("UPDATE nodegroup SET node_count = 3 WHERE cluster_id = '{c}' AND role = 'worker'"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .unwrap();
        let (v,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(version.clone()))
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        versions.push(v);
    }
    assert!(
        versions[0] > before + 1,
        "the first write retired it: {versions:?}"
    );
    assert!(
        versions.iter().all(|&v| v == versions[0]),
        "later writes of the transaction left it: {versions:?}"
    );
    // A body the transaction stores for itself does not outlive its next write (of a nodegroup
    // or of the cluster).
    let mut v = versions[0];
    for write in [
        format!("UPDATE nodegroup SET node_count = 5 WHERE cluster_id = '{c}' AND role = 'worker'"),
        format!("UPDATE cluster SET status = 'UPDATE_FAILED' WHERE uuid = '{c}'"),
    ] {
        for sql in [
            format!("UPDATE cluster_view SET body = '\\x00' WHERE cluster_uuid = '{c}'"),
            write.clone(),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut *tx)
                .await
                .unwrap();
        }
        let (now, body): (i64, Option<Vec<u8>>) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT version, body FROM cluster_view WHERE cluster_uuid = '{c}'"
        )))
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        assert_eq!(
            body, None,
            "{write}: a body stored in the transaction is retired"
        );
        assert!(now > v, "{write}: and its version moved");
        v = now;
    }
    tx.commit().await.unwrap();
    t.write_sql(&format!(
        "UPDATE nodegroup SET node_count = 4 WHERE cluster_id = '{c}' AND role = 'worker'"
    ))
    .await;
    assert!(
        t.sql_i64(&version).await > v,
        "a later transaction moved it"
    );
}

#[tokio::test]
async fn a_view_from_a_clusters_earlier_life_is_not_stored_under_its_new_one() {
    let t = app().await;
    let uuids = clusters(&t).await;
    let c: uuid::Uuid = uuids[0].parse().unwrap();
    for status in [
        "UPDATE_IN_PROGRESS",
        "UPDATE_COMPLETE",
        "UPDATE_IN_PROGRESS",
    ] {
        t.write_sql(&format!(
            "UPDATE cluster SET status = '{status}' WHERE uuid = '{c}'"
        ))
        .await;
    }
    let old = cluster_rows(&t, c).await;
    let version = old.view_version.unwrap();
    // Deleted and made again with the same uuid (a forget and a re-import do that), before the
    // view of the earlier life's rows is stored.
    for sql in [
        format!("CREATE TABLE c0 AS SELECT * FROM cluster WHERE uuid = '{c}'"),
        format!("CREATE TABLE n0 AS SELECT * FROM nodegroup WHERE cluster_id = '{c}'"),
        format!("DELETE FROM nodegroup WHERE cluster_id = '{c}'"),
        format!("DELETE FROM cluster WHERE uuid = '{c}'"),
        "UPDATE c0 SET status = 'CREATE_IN_PROGRESS'".to_string(),
        "INSERT INTO cluster SELECT * FROM c0".to_string(),
        "INSERT INTO nodegroup SELECT * FROM n0".to_string(),
        "DROP TABLE c0, n0".to_string(),
    ] {
        t.write_sql(&sql).await;
    }
    let now = cluster_rows(&t, c).await;
    assert!(
        now.view_version.unwrap() > version,
        "the new life's version {:?} is past every version of the earlier one ({version})",
        now.view_version
    );
    let body = magnum_capi::service::stored_views::build(old).unwrap();
    magnum_capi::db::cluster_views::store(&t.state.pool, &[(c, version, body)])
        .await
        .unwrap();
    assert_eq!(stored(&t).await, 0, "the earlier life's view is not stored");
    let shown = t
        .get_v(&ALICE, &format!("/v1/clusters/{c}"), "latest")
        .await;
    assert_eq!(shown.body["status"], "CREATE_IN_PROGRESS");
}

/// Templates seen differently by Alice and an admin: Alice's own, one whose name and labels
/// look like the members a stored view cuts out, Bob's private one (admin only), an admin's
/// public one (both) and a public hidden one (admin only).
async fn templates(t: &TestApp) -> Vec<String> {
    let mut out = vec![
        t.template(&ALICE, "plain").await,
        t.template(&ALICE, "awkward").await,
        t.template(&BOB, "bobs").await,
        t.template(&ADMIN, "shared").await,
        t.template(&ADMIN, "hidden").await,
    ];
    for sql in [
        format!(
            "UPDATE cluster_template SET name = E'a\",\"links\":[{{\"}}],\"uuid\":\\\\\u{1}☃',
                    labels = labels || '{{\"links\": \"[\\\"}}\", \"uuid\": \"x\"}}'
              WHERE uuid = '{}'",
            out[1]
        ),
        format!(
            "UPDATE cluster_template SET public = true WHERE uuid IN ('{}', '{}')",
            out[3], out[4]
        ),
        format!(
            "UPDATE cluster_template SET hidden = true WHERE uuid = '{}'",
            out[4]
        ),
    ] {
        assert!(t.write_sql(&sql).await > 0, "{sql}");
    }
    out.sort();
    out
}

#[tokio::test]
async fn stored_template_views_answer_byte_for_byte_as_views_built_from_the_rows() {
    let t = app().await;
    templates(&t).await;
    for round in ["built", "stored"] {
        for v in ["1.1", "1.12", "1.13", "latest"] {
            for who in [&ALICE, &ADMIN] {
                let visible = if who.roles.contains("admin") {
                    "TRUE".to_string()
                } else {
                    format!(
                        "(project_id = '{}' OR (public AND NOT hidden))",
                        who.project
                    )
                };
                for (query, order, limit) in [
                    ("", "id", 1000),
                    (
                        "?sort_key=name&sort_dir=desc",
                        "name DESC NULLS FIRST, id DESC",
                        1000,
                    ),
                    ("?limit=2", "id", 2),
                ] {
                    let order = uuids_of(
                        &t,
                        &format!(
                            "SELECT uuid FROM cluster_template WHERE {visible} ORDER BY {order} LIMIT {limit}"
                        ),
                    )
                    .await;
                    for path in ["/v1/clustertemplates", "/v1/clustertemplates/detail"] {
                        let mut rows = Vec::new();
                        for u in &order {
                            let row = tdb::by_uuid(&t.state.pool, &Visibility::All, *u)
                                .await
                                .unwrap()
                                .unwrap();
                            rows.push(views::template_owned(row, BASE));
                        }
                        let next = (limit == 2).then(|| {
                            format!(
                                "{BASE}{path}?sort_key=id&sort_dir=asc&limit=2&marker={}",
                                order[1]
                            )
                        });
                        let want = views::ClusterTemplateList {
                            clustertemplates: rows,
                            next,
                        };
                        let path = format!("{path}{query}");
                        assert_answers(&t, who, &path, v, &want, round).await;
                    }
                }
            }
        }
        assert_eq!(stored_templates(&t).await, 5, "after the {round} round");
    }
}

#[tokio::test]
async fn every_change_of_a_template_retires_its_view_even_with_triggers_off() {
    let t = app().await;
    let uuids = templates(&t).await;
    let tpl = &uuids[0];
    let name = || {
        let t = &t;
        async move {
            let page = t.get(&ADMIN, "/v1/clustertemplates").await.body;
            page["clustertemplates"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["uuid"] == tpl.as_str())
                .map(|v| v["name"].clone())
        }
    };
    name().await;
    assert_eq!(stored_templates(&t).await, 5);
    // Written as a logical replication subscriber writes (user triggers off).
    write_unannounced(
        &t.state.pool,
        &format!("UPDATE cluster_template SET name = 'renamed' WHERE uuid = '{tpl}'"),
    )
    .await;
    assert_eq!(stored_templates(&t).await, 4);
    assert_eq!(name().await, Some(serde_json::json!("renamed")));
    // Through the API.
    let patch = serde_json::json!([{"op": "replace", "path": "/name", "value": "patched"}]);
    t.patch(&ADMIN, &format!("/v1/clustertemplates/{tpl}"), patch)
        .await
        .assert_status(200);
    assert_eq!(stored_templates(&t).await, 4);
    assert_eq!(name().await, Some(serde_json::json!("patched")));
    // A deleted template leaves nothing stored behind, and one made again under its uuid is
    // not shown as the old one was.
    t.write_sql(&format!(
        "DELETE FROM cluster_template WHERE uuid = '{tpl}'"
    ))
    .await;
    let left = format!("SELECT count(*) FROM template_view WHERE template_uuid = '{tpl}'");
    assert_eq!(t.sql_i64(&left).await, 0);
    assert_eq!(name().await, None);
    // Every stored view goes with a TRUNCATE (no cluster uses these templates).
    name().await;
    assert_eq!(stored_templates(&t).await, 4);
    t.write_sql("TRUNCATE cluster_template CASCADE").await;
    assert_eq!(t.sql_i64("SELECT count(*) FROM template_view").await, 0);
}

#[tokio::test]
async fn a_template_view_built_from_a_row_older_than_a_change_is_not_stored() {
    let t = app().await;
    let uuids = templates(&t).await;
    let u: uuid::Uuid = uuids[0].parse().unwrap();
    let pool = &t.state.pool;
    let old = tvdb::by_uuids(pool, &[u]).await.unwrap().pop().unwrap();
    // A change commits after the row was read and before its view is stored.
    t.write_sql(&format!(
        "UPDATE cluster_template SET name = 'later' WHERE uuid = '{u}'"
    ))
    .await;
    let version = old.view_version.unwrap();
    let body = magnum_capi::service::stored_views::build_template(old.row).unwrap();
    tvdb::store(pool, &[(u, version, body)]).await.unwrap();
    assert_eq!(
        stored_templates(&t).await,
        0,
        "the older view is not stored"
    );
    // Deleted and made again with the same uuid: the old row's version is not the new one's.
    t.write_sql(&format!("DELETE FROM cluster_template WHERE uuid = '{u}'"))
        .await;
    let again = t
        .post(
            &ALICE,
            "/v1/clustertemplates",
            serde_json::json!({"uuid": u, "name": "again", "image_id": "ubuntu-jammy",
                               "coe": "kubernetes", "flavor_id": "m1.small"}),
        )
        .await;
    again.assert_status(201);
    let body = magnum_capi::service::stored_views::build_template(
        tdb::by_uuid(pool, &Visibility::All, u)
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    tvdb::store(pool, &[(u, version, body)]).await.unwrap();
    assert_eq!(
        stored_templates(&t).await,
        0,
        "stored under an older life's version"
    );
    let now = tvdb::by_uuids(pool, &[u]).await.unwrap().pop().unwrap();
    let version = now.view_version.unwrap();
    let body = magnum_capi::service::stored_views::build_template(now.row).unwrap();
    tvdb::store(pool, &[(u, version, body)]).await.unwrap();
    assert_eq!(
        stored_templates(&t).await,
        1,
        "stored at the version it was read at"
    );
}
