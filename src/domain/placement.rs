//! Where a new cluster goes when several management clusters are configured: the template's
//! `management_cluster` label, else the project mapping, else the availability zone, else the
//! region, else the enabled one with the fewest clusters relative to its weight. Pure.

/// The template label naming the management cluster its clusters go to.
pub const LABEL: &str = "management_cluster";

/// The name operators read: `"east"`, or `(unnamed)` for `[capi] kubeconfig`'s.
pub fn shown(name: &str) -> &str {
    if name.is_empty() { "(unnamed)" } else { name }
}

/// One management cluster as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub region: Option<&'a str>,
    pub availability_zones: &'a [String],
    pub projects: &'a [String],
    pub weight: u32,
    /// `false`: draining, never placed on.
    pub enabled: bool,
    /// Clusters it holds now.
    pub clusters: i64,
}

/// What decides a new cluster's place.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request<'a> {
    /// The template's `management_cluster` label.
    pub label: Option<&'a str>,
    pub project: &'a str,
    /// The cluster's `availability_zone` label.
    pub availability_zone: Option<&'a str>,
    /// The region of the request's service catalog.
    pub region: Option<&'a str>,
}

/// Why a cluster cannot be placed (the caller's 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("the cluster template's label {LABEL}={0} names no configured management cluster")]
    Unknown(String),
    #[error(
        "the cluster template's label {LABEL}={0} names a management cluster that is draining \
         (it takes no new clusters)"
    )]
    Draining(String),
    #[error("no management cluster takes new clusters (all are draining)")]
    NoneEnabled,
}

/// The least loaded of `from` relative to weight; the first of equals (configuration order).
fn least_loaded<'a, 'c>(
    from: impl Iterator<Item = &'c Candidate<'a>>,
) -> Option<&'c Candidate<'a>> {
    from.fold(None, |best: Option<&Candidate>, c| match best {
        // clusters/weight compared without division.
        Some(b)
            if i128::from(b.clusters) * i128::from(c.weight)
                <= i128::from(c.clusters) * i128::from(b.weight) =>
        {
            Some(b)
        }
        _ => Some(c),
    })
}

/// The management cluster a new cluster goes to.
pub fn place<'a>(
    candidates: &[Candidate<'a>],
    req: &Request<'_>,
) -> Result<&'a str, PlacementError> {
    if let Some(want) = req.label.map(str::trim).filter(|l| !l.is_empty()) {
        let c = candidates
            .iter()
            .find(|c| c.name == want)
            .ok_or_else(|| PlacementError::Unknown(want.into()))?;
        if !c.enabled {
            return Err(PlacementError::Draining(want.into()));
        }
        return Ok(c.name);
    }
    let enabled = || candidates.iter().filter(|c| c.enabled);
    let rules: [&dyn Fn(&Candidate) -> bool; 3] = [
        &|c| c.projects.iter().any(|p| p == req.project),
        &|c| {
            req.availability_zone
                .is_some_and(|az| c.availability_zones.iter().any(|z| z == az))
        },
        &|c| req.region.is_some_and(|r| c.region == Some(r)),
    ];
    for rule in rules {
        if let Some(c) = least_loaded(enabled().filter(|c| rule(c))) {
            return Ok(c.name);
        }
    }
    least_loaded(enabled())
        .map(|c| c.name)
        .ok_or(PlacementError::NoneEnabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand<'a>(name: &'a str, azs: &'a [String], weight: u32, clusters: i64) -> Candidate<'a> {
        Candidate {
            name,
            region: None,
            availability_zones: azs,
            projects: &[],
            weight,
            enabled: true,
            clusters,
        }
    }

    #[test]
    fn the_label_wins_and_must_name_an_enabled_one() {
        let east_az = ["az-east".to_string()];
        let mut cs = vec![cand("east", &east_az, 1, 10), cand("west", &[], 1, 0)];
        let req = Request {
            label: Some("east"),
            availability_zone: Some("az-west"),
            ..Request::default()
        };
        assert_eq!(place(&cs, &req), Ok("east"));
        let req = Request {
            label: Some("north"),
            ..Request::default()
        };
        assert_eq!(
            place(&cs, &req),
            Err(PlacementError::Unknown("north".into()))
        );
        cs[0].enabled = false;
        let req = Request {
            label: Some("east"),
            ..Request::default()
        };
        assert_eq!(
            place(&cs, &req),
            Err(PlacementError::Draining("east".into()))
        );
    }

    #[test]
    fn project_then_zone_then_region_then_weight() {
        let (east_az, projects) = (["az-east".to_string()], ["p1".to_string()]);
        let mut cs = vec![
            cand("east", &east_az, 1, 10),
            cand("west", &[], 1, 0),
            cand("south", &[], 1, 5),
        ];
        cs[2].projects = &projects;
        cs[2].region = Some("r2");
        let req = |project, az, region| Request {
            label: None,
            project,
            availability_zone: az,
            region,
        };
        assert_eq!(place(&cs, &req("p1", Some("az-east"), None)), Ok("south"));
        assert_eq!(place(&cs, &req("p2", Some("az-east"), None)), Ok("east"));
        assert_eq!(
            place(&cs, &req("p2", Some("az-x"), Some("r2"))),
            Ok("south")
        );
        assert_eq!(place(&cs, &req("p2", None, None)), Ok("west"));
        // A draining one is skipped by every rule.
        cs[0].enabled = false;
        assert_eq!(place(&cs, &req("p2", Some("az-east"), None)), Ok("west"));
        for c in &mut cs {
            c.enabled = false;
        }
        assert_eq!(
            place(&cs, &req("p2", None, None)),
            Err(PlacementError::NoneEnabled)
        );
    }

    #[test]
    fn weight_shares_new_clusters() {
        // east takes three clusters for each of west's.
        let mut cs = vec![cand("east", &[], 3, 0), cand("west", &[], 1, 0)];
        let mut got = Vec::new();
        for _ in 0..8 {
            let name = place(&cs, &Request::default()).unwrap();
            got.push(name);
            cs.iter_mut().find(|c| c.name == name).unwrap().clusters += 1;
        }
        assert_eq!(got.iter().filter(|n| **n == "east").count(), 6, "{got:?}");
        assert_eq!(got.iter().filter(|n| **n == "west").count(), 2, "{got:?}");
    }
}
