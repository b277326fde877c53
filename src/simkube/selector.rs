//! Label and field selectors of the simulated API server: parsing the query-string syntax
//! (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`) and matching objects.

use serde_json::Value;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed selector: all requirements must hold (comma = AND). Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// Splits on commas that are not inside parentheses (`a in (x,y),b` → `a in (x,y)`, `b`).
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set, got {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_requirement(term: &str) -> Result<Requirement, String> {
    let term = term.trim();
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(k.trim().into(), v.trim().into()));
    }
    if let Some((k, rest)) = term.split_once(" notin ") {
        return Ok(Requirement::NotIn(k.trim().into(), parse_set(rest)?));
    }
    if let Some((k, rest)) = term.split_once(" in ") {
        return Ok(Requirement::In(k.trim().into(), parse_set(rest)?));
    }
    if let Some(k) = term.strip_prefix('!') {
        return Ok(Requirement::NotExists(k.trim().into()));
    }
    if term.contains(char::is_whitespace) || term.contains('(') {
        return Err(format!("unable to parse requirement {term:?}"));
    }
    Ok(Requirement::Exists(term.into()))
}

impl Selector {
    /// Parses a selector; an empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, String> {
        let requirements = split_top_level(s)
            .into_iter()
            .filter(|t| !t.trim().is_empty())
            .map(parse_requirement)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Selector { requirements })
    }

    /// True when the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Matches with a look-up function from key to value (absent = `None`).
    pub fn matches_with<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => lookup(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => lookup(k) != Some(v.as_str()),
            Requirement::In(k, vs) => lookup(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => !lookup(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => lookup(k).is_some(),
            Requirement::NotExists(k) => lookup(k).is_none(),
        })
    }

    /// Matches the object's `metadata.labels`.
    pub fn matches_labels(&self, obj: &Value) -> bool {
        if self.is_empty() {
            return true;
        }
        let labels = obj.get("metadata").and_then(|m| m.get("labels"));
        self.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    /// Matches dotted field paths of the object (`metadata.name`, `spec.clusterName`, …).
    pub fn matches_fields(&self, obj: &Value) -> bool {
        if self.is_empty() {
            return true;
        }
        self.matches_with(|path| {
            path.split('.')
                .try_fold(obj, |v, seg| v.get(seg))
                .and_then(Value::as_str)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "front", "magnum.openstack.org/cluster-uuid": "u1"}}})
    }

    #[test]
    fn equality_and_existence_requirements() {
        let o = obj();
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("magnum.openstack.org/cluster-uuid", true),
            ("!magnum.openstack.org/cluster-uuid", false),
            ("missing", false),
            ("!missing", true),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("missing!=x", true),
        ] {
            assert_eq!(
                Selector::parse(sel).unwrap().matches_labels(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn set_based_requirements() {
        let o = obj();
        for (sel, want) in [
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db, cache),tier=front", true),
            ("app notin (web)", false),
            ("missing notin (x)", true),
        ] {
            assert_eq!(
                Selector::parse(sel).unwrap().matches_labels(&o),
                want,
                "{sel}"
            );
        }
        assert!(Selector::parse("app in web").is_err());
    }

    #[test]
    fn field_selectors_follow_dotted_paths() {
        let o = obj();
        assert!(
            Selector::parse("metadata.name=a")
                .unwrap()
                .matches_fields(&o)
        );
        assert!(
            !Selector::parse("metadata.name=b")
                .unwrap()
                .matches_fields(&o)
        );
        assert!(
            Selector::parse("metadata.namespace!=x")
                .unwrap()
                .matches_fields(&o)
        );
    }
}
