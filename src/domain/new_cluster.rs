//! A new cluster and its default nodegroups from a template: what a cluster create inherits from
//! its template and what it defaults, as a plan the API stores and the `render` command renders.

use uuid::Uuid;

use super::error::{DomainError, DomainResult};
use super::labels::{self, Labels};
use super::names;

/// Minutes a create may take when the request does not say.
pub const DEFAULT_CREATE_TIMEOUT: i64 = 60;

/// What a cluster template contributes to a new cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateDefaults {
    pub uuid: Uuid,
    pub labels: Labels,
    pub image: Option<String>,
    pub keypair: Option<String>,
    pub flavor: Option<String>,
    pub master_flavor: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub docker_volume_size: Option<i32>,
    pub master_lb_enabled: bool,
    pub floating_ip_enabled: bool,
}

/// What a create request gave. `None` is absent; for the `Option<Option<_>>` fields
/// `Some(None)` is "given as null", which differs from absent (null keeps no value, absent takes
/// the template's or the default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterRequest {
    pub name: Option<String>,
    pub labels: Option<Labels>,
    pub merge_labels: bool,
    pub keypair: Option<String>,
    pub flavor: Option<String>,
    pub master_flavor: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub docker_volume_size: Option<i64>,
    pub master_count: Option<i64>,
    pub node_count: Option<i64>,
    pub discovery_url: Option<String>,
    pub create_timeout: Option<Option<i64>>,
    pub master_lb_enabled: Option<Option<bool>>,
    pub floating_ip_enabled: Option<Option<bool>>,
}

/// The cluster a create records, before any lookup in OpenStack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPlan {
    pub uuid: Uuid,
    pub name: String,
    pub template_uuid: Uuid,
    /// The name of the cluster's CAPI objects (stored as `stack_id`).
    pub stack_id: String,
    pub labels: Labels,
    pub keypair: Option<String>,
    pub flavor: Option<String>,
    pub master_flavor: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub docker_volume_size: Option<i32>,
    pub discovery_url: Option<String>,
    pub create_timeout: Option<i32>,
    pub master_lb_enabled: Option<bool>,
    pub floating_ip_enabled: Option<bool>,
    /// `default-master`.
    pub master: NodegroupPlan,
    /// `default-worker`.
    pub worker: NodegroupPlan,
}

/// A default nodegroup of a new cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodegroupPlan {
    pub name: String,
    pub role: String,
    pub flavor: Option<String>,
    pub image: Option<String>,
    pub labels: Labels,
    pub docker_volume_size: Option<i32>,
    pub node_count: i32,
    pub min_node_count: i32,
}

/// The cluster `request` asks for from `template`, with its default master and worker
/// nodegroups. Labels follow [`labels::inherit`]; keypair, flavors and networks come from the
/// template when not given (or given empty); the flags from the template only when absent.
pub fn plan(
    template: &TemplateDefaults,
    request: &ClusterRequest,
    uuid: Uuid,
) -> DomainResult<ClusterPlan> {
    let labels = labels::inherit(
        &template.labels,
        request.labels.clone(),
        request.merge_labels,
    );
    let inherit = |given: &Option<String>, from: &Option<String>| {
        given
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| from.clone())
    };
    // Out-of-range sizes are stored as unset rather than refused, as Magnum does.
    let docker_volume_size = request
        .docker_volume_size
        .or(template.docker_volume_size.map(i64::from))
        .and_then(|v| i32::try_from(v).ok());
    let flavor = inherit(&request.flavor, &template.flavor);
    let master_flavor = inherit(&request.master_flavor, &template.master_flavor);
    let default_ng = |name: &str, role: &str, flavor: &Option<String>, count: Option<i64>| {
        let min_node_count = match role {
            "master" => 0,
            _ => labels
                .get("min_node_count")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        };
        Ok::<_, DomainError>(NodegroupPlan {
            name: name.into(),
            role: role.into(),
            flavor: flavor.clone(),
            image: template.image.clone(),
            labels: labels.clone(),
            docker_volume_size,
            node_count: count_i32(count.unwrap_or(1))?,
            min_node_count,
        })
    };
    let master = default_ng(
        "default-master",
        "master",
        &master_flavor,
        request.master_count,
    )?;
    let worker = default_ng("default-worker", "worker", &flavor, request.node_count)?;
    Ok(ClusterPlan {
        uuid,
        name: request
            .name
            .clone()
            .unwrap_or_else(|| names::generate("cluster")),
        template_uuid: template.uuid,
        stack_id: names::capi_cluster_name(uuid),
        keypair: inherit(&request.keypair, &template.keypair),
        fixed_network: inherit(&request.fixed_network, &template.fixed_network),
        fixed_subnet: inherit(&request.fixed_subnet, &template.fixed_subnet),
        flavor,
        master_flavor,
        docker_volume_size,
        discovery_url: request.discovery_url.clone(),
        create_timeout: request
            .create_timeout
            .unwrap_or(Some(DEFAULT_CREATE_TIMEOUT))
            .and_then(|v| i32::try_from(v).ok()),
        master_lb_enabled: request
            .master_lb_enabled
            .unwrap_or(Some(template.master_lb_enabled)),
        floating_ip_enabled: request
            .floating_ip_enabled
            .unwrap_or(Some(template.floating_ip_enabled)),
        labels,
        master,
        worker,
    })
}

/// A nodegroup size as stored; Magnum names `node_count` for the master count too.
fn count_i32(v: i64) -> DomainResult<i32> {
    i32::try_from(v)
        .map_err(|_| DomainError::invalid_field("node_count", &v.to_string(), "Value is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn template() -> TemplateDefaults {
        TemplateDefaults {
            uuid: Uuid::from_u128(7),
            labels: l(&[("a", "1"), ("min_node_count", "2")]),
            image: Some("img".into()),
            keypair: Some("key".into()),
            flavor: Some("small".into()),
            master_flavor: Some("large".into()),
            fixed_network: Some("net".into()),
            fixed_subnet: None,
            docker_volume_size: Some(10),
            master_lb_enabled: true,
            floating_ip_enabled: false,
        }
    }

    #[test]
    fn an_empty_request_inherits_the_template_and_the_defaults() {
        let uuid = Uuid::from_u128(1);
        let p = plan(&template(), &ClusterRequest::default(), uuid).unwrap();
        assert!(p.name.ends_with("-cluster"), "{}", p.name);
        assert_eq!(p.stack_id, names::capi_cluster_name(uuid));
        assert_eq!(p.template_uuid, Uuid::from_u128(7));
        assert_eq!(p.labels, template().labels);
        assert_eq!(p.keypair.as_deref(), Some("key"));
        assert_eq!(p.fixed_network.as_deref(), Some("net"));
        assert_eq!(p.docker_volume_size, Some(10));
        assert_eq!(p.create_timeout, Some(60));
        assert_eq!(p.master_lb_enabled, Some(true));
        assert_eq!(p.floating_ip_enabled, Some(false));
        assert_eq!(
            (p.master.name.as_str(), p.master.role.as_str()),
            ("default-master", "master")
        );
        assert_eq!(p.master.flavor.as_deref(), Some("large"));
        assert_eq!((p.master.node_count, p.master.min_node_count), (1, 0));
        assert_eq!(p.worker.flavor.as_deref(), Some("small"));
        assert_eq!((p.worker.node_count, p.worker.min_node_count), (1, 2));
        assert_eq!(p.worker.image.as_deref(), Some("img"));
        assert_eq!(p.worker.docker_volume_size, Some(10));
    }

    #[test]
    fn given_values_win_empty_strings_do_not_and_null_flags_stay_null() {
        let request = ClusterRequest {
            name: Some("mine".into()),
            labels: Some(l(&[("b", "2")])),
            merge_labels: true,
            keypair: Some(String::new()),
            flavor: Some("big".into()),
            docker_volume_size: Some(i64::from(i32::MAX) + 1),
            master_count: Some(3),
            node_count: Some(0),
            create_timeout: Some(None),
            master_lb_enabled: Some(None),
            floating_ip_enabled: Some(Some(true)),
            ..ClusterRequest::default()
        };
        let p = plan(&template(), &request, Uuid::from_u128(1)).unwrap();
        assert_eq!(p.name, "mine");
        assert_eq!(
            p.labels,
            l(&[("a", "1"), ("b", "2"), ("min_node_count", "2")])
        );
        assert_eq!(p.keypair.as_deref(), Some("key"));
        assert_eq!(p.worker.flavor.as_deref(), Some("big"));
        assert_eq!(p.docker_volume_size, None);
        assert_eq!(p.create_timeout, None);
        assert_eq!(p.master_lb_enabled, None);
        assert_eq!(p.floating_ip_enabled, Some(true));
        assert_eq!((p.master.node_count, p.worker.node_count), (3, 0));
    }

    #[test]
    fn too_large_counts_are_refused_naming_node_count() {
        for request in [
            ClusterRequest {
                master_count: Some(1 << 40),
                ..ClusterRequest::default()
            },
            ClusterRequest {
                node_count: Some(1 << 40),
                ..ClusterRequest::default()
            },
        ] {
            let err = plan(&template(), &request, Uuid::from_u128(1)).unwrap_err();
            assert_eq!(
                err.message(),
                "Invalid input for field/attribute node_count. Value: '1099511627776'. Value is \
                 too large"
            );
        }
    }
}
