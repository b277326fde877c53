//! Nodegroup input rules: count bounds, Kubernetes node label namespaces, taints. All 409s.

use serde_json::Value;

use super::error::DomainError;

fn invalid(attr: &str, ng: &str, why: &str) -> DomainError {
    DomainError::Conflict(format!("{attr} for {ng} is invalid ({why})."))
}

/// `min <= node_count <= max` (max optional) and `min <= max`, with Magnum's texts
/// (`_validate_node_count`, the values included).
pub fn check_counts(
    ng: &str,
    node_count: i64,
    min: i64,
    max: Option<i64>,
) -> Result<(), DomainError> {
    if let Some(max) = max {
        if max < min {
            return Err(invalid(
                "max_node_count",
                ng,
                &format!(
                    "min_node_count ({min}) should be less or equal to max_node_count ({max})"
                ),
            ));
        }
        if node_count > max {
            return Err(invalid(
                "max_node_count",
                ng,
                &format!(
                    "node_count ({node_count}) should be less or equal to max_node_count ({max})"
                ),
            ));
        }
    }
    if min > node_count {
        return Err(invalid(
            "min_node_count",
            ng,
            &format!("min_node_count ({min}) should be less or equal to node_count ({node_count})"),
        ));
    }
    Ok(())
}

/// Labels in `kubernetes.io`/`k8s.io` that kubelet may still set on itself.
const ALLOWED_KUBE_LABELS: [&str; 7] = [
    "kubernetes.io/hostname",
    "kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "node.kubernetes.io/instance-type",
];

fn restricted_label(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    let kube = |d: &str| prefix == d || prefix.ends_with(&format!(".{d}"));
    if !(kube("kubernetes.io") || kube("k8s.io")) {
        return false;
    }
    let allowed_ns = ["kubelet.kubernetes.io", "node.kubernetes.io"]
        .iter()
        .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")));
    !(allowed_ns || ALLOWED_KUBE_LABELS.contains(&key))
}

pub fn check_node_labels(ng: &str, labels: Option<&Value>) -> Result<(), DomainError> {
    let Some(Value::Object(map)) = labels else {
        return match labels {
            None | Some(Value::Null) => Ok(()),
            Some(_) => Err(invalid("node_labels", ng, "node_labels must be a dict")),
        };
    };
    if let Some(k) = map.keys().find(|k| restricted_label(k)) {
        return Err(invalid(
            "node_labels",
            ng,
            &format!("label {k} uses a restricted kubernetes.io/k8s.io namespace"),
        ));
    }
    if map.values().any(|v| !v.is_string()) {
        return Err(invalid("node_labels", ng, "label values must be strings"));
    }
    Ok(())
}

pub const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

pub fn check_node_taints(ng: &str, taints: Option<&Value>) -> Result<(), DomainError> {
    let items = match taints {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(invalid("node_taints", ng, "node_taints must be a list")),
    };
    for t in items {
        let Value::Object(obj) = t else {
            return Err(invalid("node_taints", ng, "each taint must be an object"));
        };
        if let Some(k) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "key" | "value" | "effect"))
        {
            return Err(invalid(
                "node_taints",
                ng,
                &format!("unknown taint field {k}"),
            ));
        }
        if obj
            .get("key")
            .is_none_or(|k| k.as_str().is_none_or(|s| s.is_empty()))
        {
            return Err(invalid("node_taints", ng, "taint key is required"));
        }
        if obj
            .get("value")
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            return Err(invalid("node_taints", ng, "taint value must be a string"));
        }
        let effect = obj.get("effect").and_then(Value::as_str).unwrap_or("");
        if !TAINT_EFFECTS.contains(&effect) {
            return Err(invalid(
                "node_taints",
                ng,
                &format!("taint effect must be one of {}", TAINT_EFFECTS.join(", ")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn count_bounds_are_conflicts() {
        assert!(check_counts("ng", 1, 0, None).is_ok());
        assert!(matches!(
            check_counts("ng", 1, 2, None),
            Err(DomainError::Conflict(_))
        ));
        assert!(matches!(
            check_counts("ng", 5, 0, Some(3)),
            Err(DomainError::Conflict(_))
        ));
        assert!(matches!(
            check_counts("ng", 2, 3, Some(1)),
            Err(DomainError::Conflict(_))
        ));
    }

    #[test]
    fn count_bounds_say_what_magnum_says() {
        let text = |r: Result<(), DomainError>| match r {
            Err(DomainError::Conflict(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            text(check_counts("ng", 1, 4, None)),
            "min_node_count for ng is invalid (min_node_count (4) should be less or equal to \
             node_count (1))."
        );
        assert_eq!(
            text(check_counts("ng", 5, 0, Some(3))),
            "max_node_count for ng is invalid (node_count (5) should be less or equal to \
             max_node_count (3))."
        );
        assert_eq!(
            text(check_counts("ng", 2, 3, Some(1))),
            "max_node_count for ng is invalid (min_node_count (3) should be less or equal to \
             max_node_count (1))."
        );
    }

    #[test]
    fn kubernetes_label_namespaces_are_restricted_except_kubelets_own() {
        assert!(check_node_labels("ng", Some(&json!({"node-role.kubernetes.io/x": "y"}))).is_err());
        assert!(check_node_labels("ng", Some(&json!({"foo.k8s.io/x": "y"}))).is_err());
        assert!(check_node_labels("ng", Some(&json!({"node.kubernetes.io/pool": "a"}))).is_ok());
        assert!(
            check_node_labels("ng", Some(&json!({"topology.kubernetes.io/zone": "a"}))).is_ok()
        );
        assert!(
            check_node_labels("ng", Some(&json!({"example.com/team": "a", "plain": "b"}))).is_ok()
        );
    }

    #[test]
    fn taints_need_a_key_and_a_known_effect() {
        assert!(
            check_node_taints(
                "ng",
                Some(&json!([{"key": "a", "value": "b", "effect": "NoSchedule"}]))
            )
            .is_ok()
        );
        assert!(
            check_node_taints("ng", Some(&json!([{"value": "b", "effect": "NoSchedule"}])))
                .is_err()
        );
        assert!(
            check_node_taints("ng", Some(&json!([{"key": "a", "effect": "Sometimes"}]))).is_err()
        );
        assert!(
            check_node_taints(
                "ng",
                Some(&json!([{"key": "a", "effect": "NoSchedule", "x": 1}]))
            )
            .is_err()
        );
        assert!(check_node_taints("ng", Some(&json!(["a"]))).is_err());
    }
}
