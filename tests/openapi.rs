#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `openapi.yaml` is generated from the code; this fails when the committed file is stale.
//! Regenerate with `cargo run -q -- openapi > openapi.yaml`.

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

#[test]
fn every_v1_route_is_documented() {
    let spec = magnum_capi::api::openapi::yaml_text().expect("spec renders");
    for path in [
        "/v1/clustertemplates/{ident}",
        "/v1/clusters/{ident}/actions/resize",
        "/v1/clusters/{ident}/actions/upgrade",
        "/v1/clusters/{ident}/nodegroups/{ng}",
        "/v1/certificates/{ident}",
        "/v1/credentials/{ident}",
        "/v1/quotas/{project_id}/{resource}",
        "/v1/mservices",
        "/v1/stats",
    ] {
        assert!(
            spec.contains(&format!("{path}:")),
            "{path} is not documented"
        );
    }
}
