//! Server-side printing: the `meta.k8s.io/v1` `Table` kubectl asks for (`Accept: …;as=Table`)
//! when it lists or gets objects, with kube-apiserver's columns for Nodes and Pods and `Name`,
//! `Age` for everything else.

use std::sync::Arc;

use axum::http::{HeaderMap, header};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// Whether the client asked for a Table (kubectl's `get` does, with JSON as its fallback).
pub fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=Table"))
}

struct Column {
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    description: &'static str,
    /// 0: always shown; 1: `-o wide` only.
    priority: u8,
}

const fn column(name: &'static str, description: &'static str, priority: u8) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        description,
        priority,
    }
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};
const AGE: Column = column(
    "Age",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
    0,
);

fn columns(kind: &str) -> Vec<Column> {
    match kind {
        "Node" => vec![
            NAME,
            column("Status", "The status of the node", 0),
            column("Roles", "The roles of the node", 0),
            AGE,
            column("Version", "Kubelet Version reported by the node.", 0),
            column("Internal-IP", "List of addresses reachable to the node.", 1),
            column("External-IP", "List of addresses reachable to the node.", 1),
            column("OS-Image", "OS Image reported by the node.", 1),
            column("Kernel-Version", "Kernel Version reported by the node.", 1),
            column(
                "Container-Runtime",
                "Container Runtime Version reported by the node.",
                1,
            ),
        ],
        "Pod" => vec![
            NAME,
            column(
                "Ready",
                "The aggregate readiness state of this pod for accepting traffic.",
                0,
            ),
            column(
                "Status",
                "The aggregate status of the containers in this pod.",
                0,
            ),
            Column {
                kind: "integer",
                ..column(
                    "Restarts",
                    "The number of times the containers in this pod have been restarted.",
                    0,
                )
            },
            AGE,
            column("IP", "The IP address assigned to the pod.", 1),
            column("Node", "The name of the node the pod is assigned to.", 1),
        ],
        _ => vec![NAME, AGE],
    }
}

fn text<'a>(obj: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(obj, |v, k| v.get(*k))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn or_none(s: String) -> String {
    if s.is_empty() { "<none>".into() } else { s }
}

fn node_cells(obj: &Value) -> Vec<Value> {
    let ready = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    let mut status = match ready.map(|c| &c["status"]) {
        Some(s) if s == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if obj.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .collect();
    roles.sort_unstable();
    let address = |kind: &str| {
        or_none(
            obj.pointer("/status/addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|a| a["type"] == kind)
                .map(|a| text(a, &["address"]).to_string())
                .unwrap_or_default(),
        )
    };
    let info = |k: &str| or_none(text(obj, &["status", "nodeInfo", k]).to_string());
    vec![
        json!(status),
        json!(or_none(roles.join(","))),
        json!(age(obj)),
        json!(text(obj, &["status", "nodeInfo", "kubeletVersion"])),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

fn pod_cells(obj: &Value) -> Vec<Value> {
    let statuses: Vec<&Value> = obj
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let containers = obj
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(statuses.len(), Vec::len);
    let ready = statuses.iter().filter(|s| s["ready"] == true).count();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|s| s["restartCount"].as_i64())
        .sum();
    let phase = text(obj, &["status", "phase"]);
    vec![
        json!(format!("{ready}/{containers}")),
        json!(if phase.is_empty() { "Pending" } else { phase }),
        json!(restarts),
        json!(age(obj)),
        json!(or_none(text(obj, &["status", "podIP"]).to_string())),
        json!(or_none(text(obj, &["spec", "nodeName"]).to_string())),
    ]
}

/// kube-apiserver's Age: the time since `creationTimestamp`, as `duration.HumanDuration`.
fn age(obj: &Value) -> String {
    let Ok(created) = DateTime::parse_from_rfc3339(text(obj, &["metadata", "creationTimestamp"]))
    else {
        return "<unknown>".into();
    };
    human_duration(
        (Utc::now() - created.with_timezone(&Utc))
            .num_seconds()
            .max(0),
    )
}

fn human_duration(secs: i64) -> String {
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86_400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        match secs % 60 {
            0 => format!("{m}m"),
            s => format!("{m}m{s}s"),
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            mm => format!("{h}h{mm}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        match h % 24 {
            0 => format!("{d}d"),
            hh => format!("{d}d{hh}h"),
        }
    } else if d < 730 {
        format!("{d}d")
    } else if d < 2920 {
        match d % 365 {
            0 => format!("{}y", d / 365),
            dd => format!("{}y{dd}d", d / 365),
        }
    } else {
        format!("{}y", d / 365)
    }
}

/// The Table of `items` (objects of `kind`).
pub fn render(kind: &str, items: &[Arc<Value>], resource_version: u64) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let mut cells = vec![json!(text(obj, &["metadata", "name"]))];
            cells.extend(match kind {
                "Node" => node_cells(obj),
                "Pod" => pod_cells(obj),
                _ => vec![json!(age(obj))],
            });
            json!({
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata").cloned().unwrap_or_default(),
                },
            })
        })
        .collect();
    let columns: Vec<Value> = columns(kind)
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": c.format,
                   "description": c.description, "priority": c.priority})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_kube_apiserver_does() {
        for (secs, want) in [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (3 * 86_400 + 3600, "3d1h"),
            (40 * 86_400, "40d"),
            (800 * 86_400, "2y70d"),
        ] {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

    #[test]
    fn node_rows_show_status_roles_and_version() {
        let node = json!({
            "metadata": {"name": "n1", "creationTimestamp": "2020-01-01T00:00:00Z",
                         "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.1"},
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}]},
        });
        let t = render("Node", &[Arc::new(node)], 7);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "n1");
        assert_eq!(cells[1], "Ready");
        assert_eq!(cells[2], "control-plane");
        assert_eq!(cells[4], "v1.33.1");
        assert_eq!(cells[5], "10.0.0.10");
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 10);
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "n1");
    }
}
