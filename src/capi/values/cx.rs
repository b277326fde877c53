//! [`Cx`]: what the parts of the values build share (the rows, the cluster's label view, the
//! names and common labels), made once per build, and the small helpers those parts use.

use std::collections::BTreeMap;

use super::error::ValuesError;
use super::labels::LabelView;
use crate::capi::{LABEL_CAPI_CLUSTER_NAME, LABEL_CLUSTER_UUID, LABEL_PROJECT_ID, LABEL_USER_ID};
use crate::config::CapiConfig;
use crate::domain::resources::Resolved;
use crate::domain::spec::Cluster;
use crate::domain::spec::Template;
use crate::k8s::schema::{dns1123_label_error, label_value_error};

/// Longest CAPI cluster name: leaves room for `-control-plane-<hash8>` within 63 characters.
pub const MAX_CLUSTER_NAME: usize = 40;

/// What the parts of the build share: the rows, the cluster's label view, the names.
pub(super) struct Cx<'a> {
    pub(super) t: &'a Template,
    pub(super) c: &'a Cluster,
    pub(super) tr: &'a Resolved,
    pub(super) cr: &'a Resolved,
    pub(super) view: LabelView<'a>,
    pub(super) config: &'a CapiConfig,
    pub(super) cluster_name: String,
    pub(super) cluster_uuid: String,
    pub(super) common_labels: BTreeMap<String, String>,
    /// The cluster's Kubernetes version (set once known): add-on versions follow its minor.
    pub(super) kube_version: String,
}

impl<'a> Cx<'a> {
    pub(super) fn new(
        t: &'a Template,
        c: &'a Cluster,
        config: &'a CapiConfig,
    ) -> Result<Self, ValuesError> {
        let cluster_name = c
            .stack_id
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| crate::capi::capi_name(c.uuid));
        if let Some(e) = dns1123_label_error(&cluster_name) {
            return Err(ValuesError::Invalid(format!(
                "CAPI cluster name {cluster_name:?} {e}"
            )));
        }
        if cluster_name.len() > MAX_CLUSTER_NAME {
            return Err(ValuesError::Invalid(format!(
                "CAPI cluster name {cluster_name:?} is longer than {MAX_CLUSTER_NAME} characters"
            )));
        }
        check_label_value("project id", &c.project_id)?;
        check_label_value("user id", &c.user_id)?;
        let cluster_uuid = c.uuid.to_string();
        let common_labels = label_map(&[
            (LABEL_CLUSTER_UUID, &cluster_uuid),
            (LABEL_PROJECT_ID, &c.project_id),
            (LABEL_USER_ID, &c.user_id),
            (LABEL_CAPI_CLUSTER_NAME, &cluster_name),
        ]);
        Ok(Self {
            t,
            c,
            tr: &t.resolved,
            cr: &c.resolved,
            view: LabelView::cluster(&c.labels),
            config,
            cluster_name,
            cluster_uuid,
            common_labels,
            kube_version: config.default_kube_version.clone(),
        })
    }
}

pub(super) fn label_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn check_label_value(what: &str, v: &str) -> Result<(), ValuesError> {
    match label_value_error(v) {
        None => Ok(()),
        Some(e) => Err(ValuesError::Invalid(format!(
            "{what} {v:?} cannot be a Kubernetes label value: {e}"
        ))),
    }
}

/// A reference the cluster gives (with what it resolved to), else the template's: never one's
/// name paired with the other's id.
pub(super) fn given_and_resolved<'a>(
    cluster: (Option<&'a String>, Option<&'a String>),
    template: (Option<&'a String>, Option<&'a String>),
) -> (Option<&'a String>, Option<&'a String>) {
    match cluster.0.filter(|s| !s.is_empty()) {
        Some(given) => (Some(given), cluster.1),
        None => (template.0.filter(|s| !s.is_empty()), template.1),
    }
}
