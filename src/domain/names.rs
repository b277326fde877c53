//! Generated names and derived identifiers: Magnum's `<greek>-<n>-<suffix>` default names and the
//! stable, collision-proof name the CAPI objects of a cluster use.

use rand::Rng;
use uuid::Uuid;

const GREEK: [&str; 24] = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
    "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi",
    "psi", "omega",
];

/// Magnum's default name for an unnamed resource, e.g. `zeta-22-cluster`.
pub fn generate(suffix: &str) -> String {
    let mut rng = rand::rng();
    let word = GREEK[rng.random_range(0..GREEK.len())];
    let n: u32 = rng.random_range(1..=24);
    format!("{word}-{n}-{suffix}")
}

/// The name of the cluster's objects on the management cluster (stored as `stack_id`):
/// derived from the uuid, so it is unique, DNS-1123 compliant and unaffected by renames.
pub fn capi_cluster_name(uuid: Uuid) -> String {
    format!("c{}", uuid.simple())
}

/// `oslo_utils.uuidutils.is_uuid_like`: hyphenated or not, any case, braces/urn tolerated.
pub fn parse_uuid(s: &str) -> Option<Uuid> {
    Uuid::try_parse(s.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_are_valid_cluster_names() {
        for _ in 0..50 {
            let n = generate("cluster");
            assert!(crate::domain::fields::is_cluster_name(&n), "{n}");
            assert!(n.ends_with("-cluster"));
        }
    }

    #[test]
    fn capi_names_are_dns_labels_derived_from_the_uuid() {
        let u = Uuid::new_v4();
        let n = capi_cluster_name(u);
        assert_eq!(n.len(), 33);
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_eq!(n, capi_cluster_name(u));
    }
}
