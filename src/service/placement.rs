//! Placement of a new cluster on one of several management clusters (`[[capi.management_clusters]]`):
//! the configured entries and their current cluster counts fed to `domain::placement`.

use crate::app::App;
use crate::config::DriverKind;
use crate::db::clusters as cdb;
use crate::domain::error::DomainError;
use crate::domain::labels::Labels;
use crate::domain::placement::{self, Candidate, Request};

use super::Result;

/// The management cluster a new cluster of `project` goes to; `None` when there is only the
/// unnamed one (no `[[capi.management_clusters]]`, or another driver). A template label naming
/// an unknown or draining one is the caller's 400.
pub async fn place(
    app: &App,
    template_labels: &Labels,
    cluster_labels: &Labels,
    project: &str,
    region: Option<&str>,
) -> Result<Option<String>> {
    let entries = &app.config.capi.management_clusters;
    if app.config.driver.kind != DriverKind::Capi || entries.is_empty() {
        return Ok(None);
    }
    let counts = cdb::count_by_management_cluster(&app.reads).await?;
    let candidates: Vec<Candidate> = entries
        .iter()
        .map(|m| Candidate {
            name: &m.name,
            region: m.region.as_deref(),
            availability_zones: &m.availability_zones,
            projects: &m.projects,
            weight: m.weight,
            enabled: m.enabled,
            clusters: counts
                .iter()
                .find(|(n, _)| *n == m.name)
                .map_or(0, |(_, c)| *c),
        })
        .collect();
    let req = Request {
        label: template_labels.get(placement::LABEL).map(String::as_str),
        project,
        availability_zone: cluster_labels.get("availability_zone").map(String::as_str),
        region,
    };
    placement::place(&candidates, &req)
        .map(|n| Some(n.to_string()))
        .map_err(|e| DomainError::BadRequest(e.to_string()).into())
}
