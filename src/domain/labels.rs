//! Label rules: inheritance from the parent (template → cluster → nodegroup) and the
//! `labels_overridden` / `labels_added` / `labels_skipped` views.

use std::collections::BTreeMap;

pub type Labels = BTreeMap<String, String>;

/// The three label diffs Magnum reports against the parent's labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelDiff {
    /// Keys in both with different values, mapped to the **parent's** value.
    pub overridden: Labels,
    /// Keys only in the child, with the child's value.
    pub added: Labels,
    /// Keys only in the parent, with the parent's value.
    pub skipped: Labels,
}

pub fn diff(parent: &Labels, labels: &Labels) -> LabelDiff {
    let mut d = LabelDiff::default();
    for (k, v) in labels {
        match parent.get(k) {
            Some(pv) if pv != v => {
                d.overridden.insert(k.clone(), pv.clone());
            }
            Some(_) => {}
            None => {
                d.added.insert(k.clone(), v.clone());
            }
        }
    }
    for (k, v) in parent {
        if !labels.contains_key(k) {
            d.skipped.insert(k.clone(), v.clone());
        }
    }
    d
}

/// Labels a child gets on create: the parent's when none (or `{}`) are given, the given ones
/// verbatim, or parent ∪ given (given wins) with `merge_labels`.
pub fn inherit(parent: &Labels, given: Option<Labels>, merge: bool) -> Labels {
    match given {
        None => parent.clone(),
        Some(g) if g.is_empty() => parent.clone(),
        Some(g) if merge => {
            let mut out = parent.clone();
            out.extend(g);
            out
        }
        Some(g) => g,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn overridden_reports_the_parent_value() {
        let d = diff(&l(&[("a", "1"), ("b", "2")]), &l(&[("a", "9"), ("c", "3")]));
        assert_eq!(d.overridden, l(&[("a", "1")]));
        assert_eq!(d.added, l(&[("c", "3")]));
        assert_eq!(d.skipped, l(&[("b", "2")]));
    }

    #[test]
    fn empty_labels_inherit_and_merge_lets_the_child_win() {
        let parent = l(&[("a", "1"), ("b", "2")]);
        assert_eq!(inherit(&parent, Some(Labels::new()), false), parent);
        assert_eq!(
            inherit(&parent, Some(l(&[("a", "9")])), false),
            l(&[("a", "9")])
        );
        assert_eq!(
            inherit(&parent, Some(l(&[("a", "9")])), true),
            l(&[("a", "9"), ("b", "2")])
        );
    }
}
