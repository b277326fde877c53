//! `magnum-capi import --magnum-db URL [--dry-run]` (issue 25): reads a Magnum database
//! (`reader`), maps and checks every row (`domain::imported`), writes templates, clusters,
//! nodegroups and quotas into PostgreSQL in ONE transaction (`db::imports`) and reports, per
//! object, what was (or, with `--dry-run`, would be) imported and why. A bad row, a clash with a
//! cluster made here or any database error rolls the whole run back. A dry run does all of it
//! and rolls back at the end, so its report is exactly what a real run would do.

pub mod reader;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use sqlx::types::Json;
use uuid::Uuid;

use crate::capi::adopt::AdoptedNodegroup;
use crate::capi::driver::{Capi, CapiError};
use crate::config::CapiConfig;
use crate::db::DbError;
use crate::db::imports::{Counts, Written};
use crate::db::templates::TemplateRow;
use crate::domain::driver_labels;
use crate::domain::imported::{self, BadRow, DriverFamily, ImportState, Plan, TemplateRecord};
use reader::ReadError;

/// What an import can fail with; nothing of the run is written in every case.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("the Magnum database has a row that cannot be imported: {0}; nothing was written")]
    BadRow(#[from] BadRow),
    #[error(
        "cluster {0} exists in magnum-capi and was not imported from Magnum (an import never \
         overwrites it); nothing was written"
    )]
    NotImported(Uuid),
    #[error("PostgreSQL: {0}")]
    Db(#[from] DbError),
    #[error(
        "management cluster {name:?}: {source} (looking for the Cluster API objects of Magnum's \
         Cluster API drivers); nothing was written"
    )]
    Capi {
        name: String,
        #[source]
        source: CapiError,
    },
}

impl From<sqlx::Error> for ImportError {
    fn from(e: sqlx::Error) -> Self {
        ImportError::Db(DbError::from(e))
    }
}

/// An import run's outcome: the report's text and the counts.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub report: String,
    pub written: Written,
}

/// Where an adoptable cluster's objects were found: the management cluster's name and the
/// nodegroups whose objects were not (reported).
pub type Found = BTreeMap<Uuid, (String, Vec<String>)>;

/// Imports the Magnum database at `magnum_url` into `pool` (rolled back with `dry_run`). The
/// clusters of Magnum's Cluster API drivers whose `Cluster` is on one of `fleet` (the configured
/// management clusters) are adopted: their objects get our labels (metadata only) before the
/// run commits; the others stay read-only until a later run finds them.
pub async fn run(
    magnum_url: &str,
    pool: &PgPool,
    dry_run: bool,
    capi: &CapiConfig,
    fleet: &[Arc<Capi>],
) -> Result<Outcome, ImportError> {
    let mut conn = reader::connect(magnum_url, Duration::from_secs(10)).await?;
    let (tables, skipped) = reader::read(&mut conn).await?;
    let _ = sqlx::Connection::close(conn).await;
    let mut plan = imported::plan(&tables, Utc::now())?;
    let mut tx = pool.begin().await?;
    let (written, found) = write(&mut tx, &mut plan, fleet, dry_run).await?;
    if dry_run {
        tx.rollback().await?;
    } else {
        tx.commit().await?;
    }
    let report = report(magnum_url, dry_run, &plan, &skipped, &written, capi, &found);
    Ok(Outcome { report, written })
}

/// Writes `plan` in the caller's transaction `conn`, after finding (and unless `dry_run`,
/// labelling) the Cluster API drivers' clusters on `fleet` (see [`run`]); what was written and
/// where the adopted clusters were found.
pub async fn write(
    conn: &mut sqlx::PgConnection,
    plan: &mut Plan,
    fleet: &[Arc<Capi>],
    dry_run: bool,
) -> Result<(Written, Found), ImportError> {
    let uuids: Vec<Uuid> = plan.clusters.iter().map(|c| c.uuid).collect();
    if let Some(u) = crate::db::imports::clusters_not_imported(&mut *conn, &uuids)
        .await?
        .first()
    {
        return Err(ImportError::NotImported(*u));
    }
    let found = adopt(plan, fleet, dry_run).await?;
    // Adopted stays adopted (the write keeps the state; the report says so), and one changed
    // here since keeps its records.
    let adopted = crate::db::imports::adopted_among(&mut *conn, &uuids).await?;
    for c in &mut plan.clusters {
        if let Some((_, changed_here)) = adopted.iter().find(|(u, _)| *u == c.uuid) {
            c.state = ImportState::Adopted;
            if *changed_here {
                plan.managed_here.insert(c.uuid);
            }
        }
    }
    let written = crate::db::imports::write(&mut *conn, plan).await?;
    for (uuid, (member, _)) in &found {
        crate::db::imports::place(&mut *conn, *uuid, member).await?;
    }
    Ok((written, found))
}

/// Finds each Cluster API driver's cluster of `plan` on `fleet`, marks the found ones adopted
/// and (unless `dry_run`) labels their objects.
async fn adopt(plan: &mut Plan, fleet: &[Arc<Capi>], dry_run: bool) -> Result<Found, ImportError> {
    let mut found = Found::new();
    for c in &mut plan.clusters {
        let Some(at) = imported::objects_at(&c.source.name, c.stack_id.as_deref(), &c.project_id)
        else {
            continue;
        };
        for member in fleet {
            let failed = |source| ImportError::Capi {
                name: crate::domain::placement::shown(member.name()).to_string(),
                source,
            };
            let Some(cluster) = member.find_adoptable(&at).await.map_err(failed)? else {
                continue;
            };
            let ngs: Vec<AdoptedNodegroup> = plan
                .nodegroups
                .iter()
                .filter(|n| n.cluster_id == c.uuid)
                .map(|n| AdoptedNodegroup {
                    uuid: n.uuid,
                    name: n.name.clone(),
                    is_master: n.role == "master",
                })
                .collect();
            let missing = if dry_run {
                Vec::new()
            } else {
                member
                    .adopt(c.uuid, &at, &cluster, &ngs)
                    .await
                    .map_err(failed)?
            };
            c.state = ImportState::Adopted;
            found.insert(c.uuid, (member.name().to_string(), missing));
            break;
        }
    }
    Ok(found)
}

/// The report: one line per object (and its notes), the skipped tables, the counts.
fn report(
    url: &str,
    dry_run: bool,
    plan: &Plan,
    skipped: &reader::Skipped,
    w: &Written,
    capi: &CapiConfig,
    found: &Found,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "magnum-capi import from {}{}",
        reader::shown(url),
        if dry_run {
            " (dry run: nothing was written)"
        } else {
            ""
        }
    );
    for t in &plan.templates {
        let _ = writeln!(
            out,
            "template {} {:?} (project {}{}): import",
            t.uuid,
            t.name.as_deref().unwrap_or(""),
            t.project_id,
            if t.hidden { ", hidden" } else { "" }
        );
        for note in template_notes(t, plan, capi) {
            let _ = writeln!(out, "  note: {note}");
        }
    }
    for c in &plan.clusters {
        let at_found = found.get(&c.uuid);
        let (state, why) = imported::decide(&c.source, c.state == ImportState::Adopted);
        let ngs: Vec<&str> = plan
            .nodegroups
            .iter()
            .filter(|n| n.cluster_id == c.uuid)
            .map(|n| n.name.as_str())
            .collect();
        let _ = writeln!(
            out,
            "cluster {} {:?} (project {}, {}): import {} — {why} (driver found by {})",
            c.uuid,
            c.name.as_deref().unwrap_or(""),
            c.project_id,
            c.status,
            state.as_str().replace('_', "-"),
            c.source.basis,
        );
        if plan.managed_here.contains(&c.uuid) {
            let _ = writeln!(
                out,
                "  note: changed through magnum-capi since its adoption: its record and \
                 nodegroups here are kept, Magnum's are not written over them"
            );
        }
        if let Some(at) = imported::objects_at(&c.source.name, c.stack_id.as_deref(), &c.project_id)
        {
            let _ = writeln!(
                out,
                "  Cluster API objects: {}/{} on {}; its CA Secret {}/{}-ca serves ca show and \
                 ca sign",
                at.namespace,
                at.name,
                match at_found {
                    Some((m, _)) =>
                        format!("management cluster {}", crate::domain::placement::shown(m)),
                    None => "the management cluster its driver used".to_string(),
                },
                at.namespace,
                at.name
            );
            if let Some((_, missing)) = at_found
                && !missing.is_empty()
            {
                let _ = writeln!(
                    out,
                    "  note: no object of nodegroups {} was found: their status is not watched",
                    missing.join(", ")
                );
            }
        }
        let _ = writeln!(out, "  nodegroups: {}", ngs.join(", "));
    }
    for q in &plan.quotas {
        let _ = writeln!(
            out,
            "quota {} {} = {}: import",
            q.project_id, q.resource, q.hard_limit
        );
    }
    for (table, n) in skipped {
        let why = imported::SKIPPED_TABLES
            .iter()
            .find(|(t, _)| t == table)
            .map_or("", |(_, w)| w);
        let _ = writeln!(out, "skip table {table} ({n} rows): {why}");
    }
    let line = |kind: &str, total: usize, c: &Counts| {
        format!(
            "{kind} {total}: {} created, {} updated, {} unchanged{}",
            c.created,
            c.updated,
            c.unchanged,
            if c.removed > 0 {
                format!(", {} removed (gone from Magnum)", c.removed)
            } else {
                String::new()
            }
        )
    };
    let _ = writeln!(
        out,
        "{}{}; {}; {}; {}",
        if dry_run {
            "would write: "
        } else {
            "written: "
        },
        line("templates", plan.templates.len(), &w.templates),
        line("clusters", plan.clusters.len(), &w.clusters),
        line("nodegroups", plan.nodegroups.len(), &w.nodegroups),
        line("quotas", plan.quotas.len(), &w.quotas),
    );
    out
}

/// What an operator should know about a template before clusters are created from it here.
fn template_notes(t: &TemplateRecord, plan: &Plan, capi: &CapiConfig) -> Vec<String> {
    let mut notes = Vec::new();
    match t.coe.as_deref() {
        Some("kubernetes") | None => {}
        Some(other) => {
            notes.push(format!(
                "coe {other}: shown as in Magnum; magnum-capi creates only kubernetes clusters"
            ));
            return notes;
        }
    }
    if let Some(d) = &t.driver {
        notes.push(format!(
            "driver {d} (Magnum's): new clusters from it are built by magnum-capi's Cluster API \
             driver"
        ));
    }
    notes.extend(driver_labels::template_notes(
        &t.labels,
        &template_families(t, plan),
    ));
    if let Err(e) = crate::capi::values::check_template(
        &crate::domain::spec::Template::from(template_row(t)),
        capi,
    ) {
        notes.push(format!(
            "labels or fields this driver rejects ({e}): new clusters from it are refused until \
             the template is updated"
        ));
    }
    notes
}

/// The drivers whose defaults a template's clusters had: its `driver` column's, else those of
/// the drivers that made its clusters, else both Cluster API drivers (the defaults of either may
/// be what its tenants expect).
fn template_families(t: &TemplateRecord, plan: &Plan) -> Vec<DriverFamily> {
    if let Some(d) = t.driver.as_deref().filter(|d| !d.is_empty()) {
        return vec![
            imported::SourceDriver {
                name: d.to_string(),
                basis: "the template's driver column",
            }
            .family(),
        ];
    }
    let mut of_clusters: Vec<DriverFamily> = Vec::new();
    for f in plan
        .clusters
        .iter()
        .filter(|c| c.cluster_template_id == t.uuid)
        .map(|c| c.source.family())
    {
        if !of_clusters.contains(&f) {
            of_clusters.push(f);
        }
    }
    if of_clusters.is_empty() {
        vec![DriverFamily::CapiHelm, DriverFamily::ClusterApi]
    } else {
        of_clusters
    }
}

fn template_row(t: &TemplateRecord) -> TemplateRow {
    TemplateRow {
        id: 0,
        uuid: t.uuid,
        project_id: t.project_id.clone(),
        user_id: t.user_id.clone(),
        name: t.name.clone(),
        image_id: t.image_id.clone(),
        flavor_id: t.flavor_id.clone(),
        master_flavor_id: t.master_flavor_id.clone(),
        keypair_id: t.keypair_id.clone(),
        external_network_id: t.external_network_id.clone(),
        fixed_network: t.fixed_network.clone(),
        fixed_subnet: t.fixed_subnet.clone(),
        network_driver: t.network_driver.clone(),
        volume_driver: t.volume_driver.clone(),
        dns_nameserver: t.dns_nameserver.clone(),
        apiserver_port: t.apiserver_port,
        docker_volume_size: t.docker_volume_size,
        docker_storage_driver: t.docker_storage_driver.clone(),
        cluster_distro: t.cluster_distro.clone(),
        coe: t.coe.clone(),
        http_proxy: t.http_proxy.clone(),
        https_proxy: t.https_proxy.clone(),
        no_proxy: t.no_proxy.clone(),
        registry_enabled: t.registry_enabled,
        labels: Json(t.labels.clone()),
        tls_disabled: t.tls_disabled,
        public: t.public,
        server_type: t.server_type.clone(),
        insecure_registry: t.insecure_registry.clone(),
        master_lb_enabled: t.master_lb_enabled,
        floating_ip_enabled: t.floating_ip_enabled,
        hidden: t.hidden,
        tags: t.tags.clone(),
        driver: t.driver.clone(),
        resolved: Json(Default::default()),
        created_at: t.created_at,
        updated_at: t.updated_at,
    }
}
