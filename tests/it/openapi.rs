//! `openapi.yaml` is generated from the code; this fails when the committed file is stale.
//! Regenerate with `cargo run -q -- openapi > openapi.yaml`.

use utoipa::OpenApi;

#[test]
fn committed_openapi_yaml_matches_the_code() {
    let generated = magnum_capi::api::openapi::yaml_text().expect("spec renders");
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml exists");
    assert!(
        generated == committed,
        "openapi.yaml is stale: run `cargo run -q -- openapi > openapi.yaml`"
    );
}

/// The router's own table (recorded as the routes are added) against the document's operations,
/// both ways: nothing served undocumented, nothing documented that is not served.
#[test]
fn every_route_of_the_router_is_documented() {
    let doc = magnum_capi::api::openapi::ApiDoc::openapi();
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in &doc.paths.paths {
        let ops = [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("PATCH", &item.patch),
            ("DELETE", &item.delete),
            ("HEAD", &item.head),
            ("OPTIONS", &item.options),
            ("TRACE", &item.trace),
        ];
        for (method, op) in ops {
            if op.is_some() {
                documented.push((method.to_string(), path.clone()));
            }
        }
    }
    let mut routed: Vec<(String, String)> = magnum_capi::api::route_table()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert!(routed.len() > 30, "the route table looks empty: {routed:?}");
    routed.sort();
    documented.sort();
    let undocumented: Vec<_> = routed.iter().filter(|r| !documented.contains(r)).collect();
    let unrouted: Vec<_> = documented.iter().filter(|d| !routed.contains(d)).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routes without an operation in the document: {undocumented:?}\n\
         operations in the document without a route: {unrouted:?}"
    );
}
