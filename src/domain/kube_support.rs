//! Upstream support of Kubernetes minors (pure): from the operator's table of each minor's end of
//! life (`[upgrades] kubernetes_end_of_life`), whether a cluster's version is still supported —
//! what its `health_status_reason` says under [`REASON_KEY`].

use std::collections::BTreeMap;

use chrono::NaiveDate;

/// The `health_status_reason` entry that says a cluster's Kubernetes is out of upstream support.
pub const REASON_KEY: &str = "kubernetes";

/// `"1.<minor>"` → the day upstream support ends, parsed from the configuration's table (entries
/// that are not a minor and a `YYYY-MM-DD` date are refused when the configuration is read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndOfLife(BTreeMap<(u64, u64), NaiveDate>);

impl EndOfLife {
    /// The table from `"1.<minor>" = "YYYY-MM-DD"` entries; the first entry that is not one.
    pub fn parse<'a>(
        entries: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Self, String> {
        let mut out = BTreeMap::new();
        for (k, v) in entries {
            let minor = k
                .split_once('.')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                .ok_or_else(|| format!("{k:?} is not a Kubernetes minor like \"1.33\""))?;
            let day = NaiveDate::parse_from_str(v, "%Y-%m-%d")
                .map_err(|_| format!("{k} = {v:?} is not a date like \"2026-06-28\""))?;
            out.insert(minor, day);
        }
        Ok(Self(out))
    }

    /// Why `version` is out of upstream support on `today`: its minor's end of life has passed,
    /// or it is older than every minor the table lists. `None` while supported, for a minor newer
    /// than the table or a version that cannot be read, and with an empty table.
    pub fn out_of_support(&self, version: &str, today: NaiveDate) -> Option<String> {
        let (major, minor, _) = super::upgrade::parse(version)?;
        let oldest = self.0.keys().next()?;
        match self.0.get(&(major, minor)) {
            Some(end) if *end < today => Some(format!(
                "{version} is out of upstream support since {end}; upgrade to a supported minor"
            )),
            None if (major, minor) < *oldest => Some(format!(
                "{version} is out of upstream support (older than {}.{}); upgrade to a supported \
                 minor",
                oldest.0, oldest.1
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> EndOfLife {
        let t: BTreeMap<String, String> = [("1.32", "2026-02-28"), ("1.33", "2026-06-28")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EndOfLife::parse(&t).unwrap()
    }

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn a_minor_past_its_end_of_life_is_out_of_support() {
        let t = table();
        assert_eq!(t.out_of_support("v1.33.5", day("2026-06-28")), None);
        let why = t.out_of_support("v1.33.5", day("2026-06-29")).unwrap();
        assert!(why.contains("since 2026-06-28"), "{why}");
        assert!(
            t.out_of_support("v1.31.9", day("2025-01-01"))
                .unwrap()
                .contains("older than 1.32")
        );
        assert_eq!(t.out_of_support("v1.36.0", day("2030-01-01")), None);
        assert_eq!(t.out_of_support("latest", day("2030-01-01")), None);
        assert_eq!(
            EndOfLife::default().out_of_support("v1.2.0", day("2030-01-01")),
            None
        );
    }

    #[test]
    fn entries_must_be_minors_and_dates() {
        let bad = |k: &str, v: &str| {
            let t: BTreeMap<String, String> = [(k.to_string(), v.to_string())].into();
            EndOfLife::parse(&t).unwrap_err()
        };
        assert!(bad("one", "2026-01-01").contains("not a Kubernetes minor"));
        assert!(bad("1.33", "June").contains("not a date"));
    }
}
