//! The layering rules of the crate, checked on the source: dependencies point one way
//! (api → service → domain / db / driver backends), one writer of `cluster.status`, and every
//! module says what it owns.

use std::path::{Path, PathBuf};

fn sources(dir: &str) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir),
        &mut out,
    );
    assert!(!out.is_empty(), "no sources under src/{dir}");
    out
}

/// The lines of `text` outside its `#[cfg(test)]` module that mention `needle` as a path.
fn uses(text: &str, needle: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| {
            l.match_indices(needle).any(|(i, _)| {
                let rest = &l[i + needle.len()..];
                rest.starts_with("::") || rest.starts_with(';') || rest.starts_with(" as")
            })
        })
        .map(str::to_string)
        .collect()
}

fn assert_no_import(layer: &str, forbidden: &[&str]) {
    let mut found = Vec::new();
    for (path, text) in sources(layer) {
        for f in forbidden {
            for line in uses(&text, f) {
                found.push(format!("{}: {}", path.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "src/{layer} must not import {forbidden:?}:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_driver_never_reaches_up_into_the_service_or_the_worker() {
    assert_no_import("capi", &["crate::service", "crate::worker", "crate::api"]);
    assert_no_import("driver", &["crate::service", "crate::worker", "crate::api"]);
}

#[test]
fn http_reaches_the_driver_only_through_services() {
    assert_no_import("api", &["crate::capi", "crate::driver::simulated"]);
}

#[test]
fn services_know_no_http() {
    assert_no_import("service", &["crate::api", "crate::capi", "axum"]);
}

#[test]
fn the_domain_is_pure() {
    assert_no_import(
        "domain",
        &[
            "crate::api",
            "crate::service",
            "crate::db",
            "crate::capi",
            "crate::driver",
            "crate::openstack",
            "sqlx",
            "kube",
        ],
    );
}

#[test]
fn persistence_knows_no_upper_layer() {
    assert_no_import(
        "db",
        &[
            "crate::api",
            "crate::service",
            "crate::capi",
            "crate::driver",
        ],
    );
}

#[test]
fn only_the_status_writer_writes_cluster_statuses() {
    let writers: Vec<String> = sources("")
        .into_iter()
        .filter(|(_, text)| text.contains("UPDATE cluster SET status"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert_eq!(writers.len(), 1, "cluster.status writers: {writers:?}");
    assert!(writers[0].ends_with("db/status.rs"), "{writers:?}");
}

#[test]
fn every_module_says_what_it_owns() {
    let missing: Vec<String> = sources("")
        .into_iter()
        .filter(|(_, text)| {
            let first = text.lines().find(|l| !l.starts_with("#![")).unwrap_or("");
            !first.starts_with("//!")
        })
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a `//!` line: {missing:?}"
    );
}
