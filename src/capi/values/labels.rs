//! Reading Magnum labels: [`LabelView`] (nodegroup over cluster scope, aliases, empty as unset,
//! typed parsers whose errors name the label) and the CIDR and version helpers they use.

use std::net::IpAddr;

use super::error::{ValuesError, bad};
use crate::domain::fields::bool_from_string;
use crate::domain::kube_version::normalise_version;
use crate::domain::labels::Labels;

/// Label look-up over a nodegroup's labels (first) and the cluster's (second), with aliases:
/// the first alias present wins, and two aliases present with different values are an error.
/// Empty values count as absent (Magnum templates often carry `key: ""`).
#[derive(Clone, Copy)]
pub(super) struct LabelView<'a> {
    scopes: [Option<&'a Labels>; 2],
}

impl<'a> LabelView<'a> {
    pub(super) fn cluster(labels: &'a Labels) -> Self {
        Self {
            scopes: [Some(labels), None],
        }
    }
    pub(super) fn nodegroup(ng: &'a Labels, cluster: &'a Labels) -> Self {
        Self {
            scopes: [Some(ng), Some(cluster)],
        }
    }

    pub(super) fn raw(
        &self,
        names: &[&'static str],
    ) -> Result<Option<(&'static str, &'a str)>, ValuesError> {
        for scope in self.scopes.iter().flatten() {
            let found: Vec<(&'static str, &'a str)> = names
                .iter()
                .filter_map(|n| scope.get(*n).map(|v| (*n, v.trim())))
                .filter(|(_, v)| !v.is_empty())
                .collect();
            if let Some(&(first, fv)) = found.first() {
                if let Some(&(second, sv)) = found.iter().find(|(_, v)| *v != fv) {
                    return Err(ValuesError::LabelConflict {
                        first: first.into(),
                        first_value: fv.into(),
                        second: second.into(),
                        second_value: sv.into(),
                    });
                }
                return Ok(Some((first, fv)));
            }
        }
        Ok(None)
    }

    /// The value of the first alias set, through `parse`; its error is a
    /// [`ValuesError::BadLabel`] naming the label.
    pub(super) fn parsed<T>(
        &self,
        names: &[&'static str],
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ValuesError> {
        match self.raw(names)? {
            None => Ok(None),
            Some((label, v)) => parse(v).map(Some).map_err(|reason| bad(label, v, reason)),
        }
    }

    /// A value that must be one token (no spaces or quotes): names, zones, ids.
    pub(super) fn token(&self, names: &[&'static str]) -> Result<Option<String>, ValuesError> {
        self.parsed(names, |v| {
            if v.chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\' | '{' | '}'))
            {
                Ok(v.to_owned())
            } else {
                Err("must be a single word without quotes or braces".into())
            }
        })
    }

    pub(super) fn bool(&self, names: &[&'static str], default: bool) -> Result<bool, ValuesError> {
        let b = self.parsed(names, |v| {
            bool_from_string(v).ok_or_else(|| "must be true or false".into())
        })?;
        Ok(b.unwrap_or(default))
    }

    pub(super) fn u32(&self, names: &[&'static str]) -> Result<Option<u32>, ValuesError> {
        self.parsed(names, |v| {
            v.parse::<u32>()
                .map_err(|_| "must be a non-negative integer".into())
        })
    }

    pub(super) fn one_of(
        &self,
        names: &[&'static str],
        allowed: &[&str],
        default: &str,
    ) -> Result<String, ValuesError> {
        let v = self.parsed(names, |v| {
            allowed
                .iter()
                .find(|a| a.eq_ignore_ascii_case(v))
                .map(|a| (*a).to_owned())
                .ok_or_else(|| format!("must be one of {}", allowed.join(", ")))
        })?;
        Ok(v.unwrap_or_else(|| default.to_owned()))
    }

    pub(super) fn cidr(&self, names: &[&'static str]) -> Result<Option<String>, ValuesError> {
        self.parsed(names, |v| parse_cidr(v).map(|_| v.to_owned()))
    }

    /// A list split on any of `seps`, empty items dropped, each item through `check` (its error
    /// is a [`ValuesError::BadLabel`] naming the label and the item).
    pub(super) fn list(
        &self,
        names: &[&'static str],
        seps: &[char],
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Result<Vec<String>, ValuesError> {
        let Some((label, v)) = self.raw(names)? else {
            return Ok(vec![]);
        };
        v.split(|c| seps.contains(&c))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                check(s)
                    .map(|()| s.to_owned())
                    .map_err(|reason| bad(label, s, reason))
            })
            .collect()
    }
}

/// For [`LabelView::list`]: every item is fine.
pub(super) fn any_item(_: &str) -> Result<(), String> {
    Ok(())
}

/// An IPv4 or IPv6 CIDR as (address, prefix length).
pub(super) fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = s
        .split_once('/')
        .ok_or_else(|| "must be a CIDR like 10.0.0.0/24".to_owned())?;
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    let len: u8 = len
        .parse()
        .map_err(|_| format!("{len:?} is not a prefix length"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(format!("prefix length {len} exceeds {max}"));
    }
    Ok((addr, len))
}

/// Whether two CIDRs share addresses (different families never do).
pub(super) fn cidrs_overlap(a: (IpAddr, u8), b: (IpAddr, u8)) -> bool {
    let to_u128 = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32u32),
        IpAddr::V6(v6) => (u128::from(v6), 128u32),
    };
    let ((x, bits_a), (y, bits_b)) = (to_u128(a.0), to_u128(b.0));
    if bits_a != bits_b {
        return false;
    }
    let len = u32::from(a.1.min(b.1));
    let shift = bits_a - len;
    let mask = if shift >= 128 { 0 } else { u128::MAX << shift };
    (x & mask) == (y & mask)
}

/// Chart versions and similar values end up inside HelmChartProxy value templates (Go
/// templates): keep them to plain version syntax.
pub(super) fn chart_version_label(
    view: &LabelView<'_>,
    label: &'static str,
    default: &str,
    leading_v: bool,
) -> Result<String, ValuesError> {
    let version = view.parsed(&[label], |v| {
        normalise_version(v).ok_or_else(|| "must be a version like v1.2.3".into())
    })?;
    Ok(match version {
        None => default.to_owned(),
        Some(v) if leading_v => v,
        Some(v) => v.trim_start_matches('v').to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::capi::values::cx::label_map as l;

    #[test]
    fn aliases_agree_or_fail() {
        let labels = l(&[("etcd_volume_size", "5"), ("etcd_blockdevice_size", "5")]);
        let v = LabelView::cluster(&labels);
        assert_eq!(
            v.u32(&["etcd_blockdevice_size", "etcd_volume_size"])
                .unwrap(),
            Some(5)
        );
        let labels = l(&[("etcd_volume_size", "5"), ("etcd_blockdevice_size", "6")]);
        let v = LabelView::cluster(&labels);
        assert!(matches!(
            v.u32(&["etcd_blockdevice_size", "etcd_volume_size"]),
            Err(ValuesError::LabelConflict { .. })
        ));
    }

    #[test]
    fn nodegroup_labels_win_over_cluster_labels() {
        let ng = l(&[("availability_zone", "az2")]);
        let cl = l(&[("availability_zone", "az1"), ("boot_volume_size", "")]);
        let v = LabelView::nodegroup(&ng, &cl);
        assert_eq!(
            v.token(&["availability_zone"]).unwrap().as_deref(),
            Some("az2")
        );
        assert_eq!(v.u32(&["boot_volume_size"]).unwrap(), None);
    }

    #[test]
    fn bools_are_strict() {
        let labels = l(&[("a", "True"), ("b", "off"), ("c", "maybe")]);
        let v = LabelView::cluster(&labels);
        assert!(v.bool(&["a"], false).unwrap());
        assert!(!v.bool(&["b"], true).unwrap());
        assert!(
            v.bool(&["c"], true)
                .unwrap_err()
                .to_string()
                .contains("label c")
        );
    }

    #[test]
    fn cidrs_parse_and_overlap() {
        let a = parse_cidr("10.0.0.0/8").unwrap();
        let b = parse_cidr("10.1.0.0/16").unwrap();
        let c = parse_cidr("172.16.0.0/13").unwrap();
        let d = parse_cidr("fd00::/64").unwrap();
        assert!(cidrs_overlap(a, b));
        assert!(!cidrs_overlap(a, c));
        assert!(!cidrs_overlap(a, d));
        assert!(cidrs_overlap(parse_cidr("0.0.0.0/0").unwrap(), c));
        assert!(parse_cidr("10.0.0.0").is_err());
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("nope/8").is_err());
    }
}
