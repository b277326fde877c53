//! Cluster template use cases: create, show, list, patch, delete.

use serde_json::{Map, Value};
use sqlx::types::Json;

use super::{Result, cloud, find_template, stored_views, template_visibility, views};
use crate::app::App;
use crate::db::Violation;
use crate::db::template_views as tvdb;
use crate::db::templates::{self as tdb, TemplateRow, Visibility};
use crate::domain::error::DomainError;
use crate::domain::fields::{Body, string_map};
use crate::domain::listing::ListQuery;
use crate::domain::os_distro::OsDistro;
use crate::domain::policy::{self, Caller, Target};
use crate::domain::spec::Template;
use crate::domain::{names, patch, schemas};
use crate::openstack::UserSession;

/// The columns a template list may be sorted by.
pub use crate::db::templates::SORT_KEYS;

/// Network drivers any template may name.
pub const SUPPORTED_NETWORK_DRIVERS: [&str; 3] = ["flannel", "calico", "cilium"];

fn check_network_driver(app: &App, driver: &str) -> Result<()> {
    if !SUPPORTED_NETWORK_DRIVERS.contains(&driver) {
        return Err(DomainError::BadRequest(format!(
            "Network driver type {driver} is not supported, expecting a {}/unspecified network driver.",
            SUPPORTED_NETWORK_DRIVERS.join("/")
        ))
        .into());
    }
    let allowed = &app.config.api.allowed_network_drivers;
    if !allowed.iter().any(|a| a == "all" || a == driver) {
        return Err(DomainError::BadRequest(format!(
            // Magnum's message ends with ". " (a trailing space) — kept byte for byte.
            "Network driver type {driver} is not allowed, expecting a {}/unspecified network driver. ",
            allowed.join("/")
        ))
        .into());
    }
    Ok(())
}

fn check_volume_driver(driver: Option<&str>) -> Result<()> {
    match driver {
        None | Some("cinder") => Ok(()),
        Some(d) => Err(DomainError::BadRequest(format!(
            "Volume driver type {d} is not supported, expecting a cinder/unspecified volume driver."
        ))
        .into()),
    }
}

/// `docker_storage_driver=devicemapper` needs at least 3 GB.
pub fn check_devicemapper(storage: Option<&str>, size: Option<i64>) -> Result<()> {
    if storage == Some("devicemapper")
        && let Some(s) = size.filter(|s| *s < 3)
    {
        return Err(DomainError::BadRequest(format!(
                "docker volume size {s} GB is not valid, expecting minimum value 3GB for devicemapper storage driver."
            ))
            .into());
    }
    Ok(())
}

fn check_dns(dns: Option<&str>) -> Result<()> {
    if let Some(d) = dns
        && d.split(',')
            .any(|ip| ip.trim().parse::<std::net::Ipv4Addr>().is_err())
    {
        return Err(DomainError::invalid_field("dns_nameserver", d, "Invalid DNS format").into());
    }
    Ok(())
}

fn check_publish(caller: &Caller) -> Result<()> {
    if policy::enforce("clustertemplate:publish", caller, None).is_err() {
        return Err(DomainError::Forbidden(
            "Not authorized to set public or hidden flag for cluster template.".into(),
        )
        .into());
    }
    Ok(())
}

/// The template's image must be one the driver boots (Magnum's `enforce_driver_supported`, a
/// 400 naming the supported `os_distro` values): the image's `os_distro` as Glance resolved it
/// (a PATCH may bring another image), else the `cluster_distro` the template has.
pub(super) fn check_distro(t: &TemplateRow) -> Result<()> {
    let distro = t
        .resolved
        .os_distro
        .as_deref()
        .or(t.cluster_distro.as_deref());
    OsDistro::from_image(distro)
        .map(drop)
        .map_err(|e| DomainError::BadRequest(e.to_string()).into())
}

/// Builds the row a (validated) document describes.
fn apply_doc(row: &mut TemplateRow, d: &Body) {
    let s = |k: &str| d.str(k);
    let i = |k: &str| d.int(k).and_then(|v| i32::try_from(v).ok());
    row.name = s("name");
    row.image_id = s("image_id");
    row.flavor_id = s("flavor_id");
    row.master_flavor_id = s("master_flavor_id");
    row.keypair_id = s("keypair_id");
    row.external_network_id = s("external_network_id");
    row.fixed_network = s("fixed_network");
    row.fixed_subnet = s("fixed_subnet");
    row.network_driver = s("network_driver");
    row.volume_driver = s("volume_driver");
    row.dns_nameserver = s("dns_nameserver");
    row.apiserver_port = i("apiserver_port");
    row.docker_volume_size = i("docker_volume_size");
    row.docker_storage_driver = s("docker_storage_driver");
    row.cluster_distro = s("cluster_distro");
    row.coe = s("coe");
    row.http_proxy = s("http_proxy");
    row.https_proxy = s("https_proxy");
    row.no_proxy = s("no_proxy");
    row.registry_enabled = d.bool("registry_enabled").unwrap_or(false);
    row.labels = Json(d.get("labels").and_then(string_map).unwrap_or_default());
    row.tls_disabled = d.bool("tls_disabled").unwrap_or(false);
    row.public = d.bool("public").unwrap_or(false);
    row.server_type = Some(s("server_type").unwrap_or_else(|| "vm".into()));
    row.insecure_registry = s("insecure_registry");
    row.master_lb_enabled = d.bool("master_lb_enabled").unwrap_or(false);
    row.floating_ip_enabled = d.bool("floating_ip_enabled").unwrap_or(true);
    row.hidden = d.bool("hidden").unwrap_or(false);
    row.tags = s("tags");
    row.driver = s("driver");
}

fn empty_row(caller: &Caller) -> TemplateRow {
    TemplateRow {
        id: 0,
        uuid: uuid::Uuid::new_v4(),
        project_id: caller.project_id.clone(),
        user_id: caller.user_id.clone(),
        name: None,
        image_id: None,
        flavor_id: None,
        master_flavor_id: None,
        keypair_id: None,
        external_network_id: None,
        fixed_network: None,
        fixed_subnet: None,
        network_driver: None,
        volume_driver: None,
        dns_nameserver: None,
        apiserver_port: None,
        docker_volume_size: None,
        docker_storage_driver: None,
        cluster_distro: None,
        coe: None,
        http_proxy: None,
        https_proxy: None,
        no_proxy: None,
        registry_enabled: false,
        labels: Json(Default::default()),
        tls_disabled: false,
        public: false,
        server_type: None,
        insecure_registry: None,
        master_lb_enabled: false,
        floating_ip_enabled: true,
        hidden: false,
        tags: None,
        driver: None,
        resolved: Json(Default::default()),
        created_at: chrono::Utc::now(),
        updated_at: None,
    }
}

/// Checks the template's image, flavors and networks with the caller's token (when there is a
/// cloud to ask) and records what they resolved to.
async fn resolve(app: &App, cloud: Option<&UserSession>, row: &mut TemplateRow) -> Result<()> {
    let Some(s) = cloud else {
        return Ok(());
    };
    let boot =
        cloud::boot_volume_size(&row.labels.0, app.config.openstack.default_boot_volume_size)?;
    row.resolved = Json(cloud::validate(s, &cloud::Wanted::template(row, boot)).await?);
    Ok(())
}

pub async fn create(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    body: &Value,
) -> Result<TemplateRow> {
    let mut b = schemas::TEMPLATE.parse_body(body)?;
    // WSME takes an explicit `null`, then Magnum's server-type check refuses it.
    if b.has("server_type") && b.str("server_type").is_none() {
        return Err(DomainError::BadRequest(format!(
            "Server type None is not supported, expecting a {}/unspecified server type.",
            schemas::SERVER_TYPES.join("/")
        ))
        .into());
    }
    let network_driver = b
        .str("network_driver")
        .unwrap_or_else(|| app.config.api.default_network_driver.clone());
    check_network_driver(app, &network_driver)?;
    b.0.insert("network_driver".into(), Value::String(network_driver));
    check_volume_driver(b.str("volume_driver").as_deref())?;
    check_devicemapper(
        b.str("docker_storage_driver").as_deref(),
        b.int("docker_volume_size"),
    )?;
    check_dns(b.str("dns_nameserver").as_deref())?;
    if b.str("driver").is_none() {
        b.0.insert(
            "driver".into(),
            Value::String(app.config.api.default_driver.clone()),
        );
    }
    policy::enforce("clustertemplate:create", caller, None)?;
    if b.bool("public") == Some(true) || b.bool("hidden") == Some(true) {
        check_publish(caller)?;
    }
    if b.str("name").is_none() {
        b.0.insert("name".into(), Value::String(names::generate("template")));
    }
    let mut row = empty_row(caller);
    if let Some(u) = b.str("uuid").and_then(|u| uuid::Uuid::try_parse(&u).ok()) {
        row.uuid = u;
    }
    apply_doc(&mut row, &b);
    resolve(app, cloud, &mut row).await?;
    check_distro(&row)?;
    // What the backend needs of a template, e.g. for the Cluster API driver `kube_tag` and the
    // image's `kube_version` agreeing, well-formed proxies and node-setting labels (checked at
    // create and on every PATCH).
    app.backend
        .validate_template(&Template::from(row.clone()))?;
    if cloud.is_some() {
        // Magnum takes the distro from the image, whatever the client sent.
        row.cluster_distro = row.resolved.os_distro.clone();
    }
    let created = tdb::insert(&app.pool, &row)
        .await
        .map_err(|e| -> super::Error {
            match e.violation() {
                Some(Violation::TemplateUuid) => DomainError::Conflict(format!(
                    "A ClusterTemplate with UUID {} already exists.",
                    row.uuid
                ))
                .into(),
                _ => e.into(),
            }
        })?;
    app.views.templates_changed();
    Ok(created)
}

fn target(t: &TemplateRow) -> Target<'_> {
    Target {
        project_id: &t.project_id,
        user_id: &t.user_id,
    }
}

pub async fn get(app: &App, caller: &Caller, ident: &str) -> Result<TemplateRow> {
    let t = find_template(app, &template_visibility(caller), ident, false).await?;
    if !t.public {
        policy::enforce("clustertemplate:get", caller, Some(target(&t)))?;
    }
    Ok(t)
}

/// A page of templates serialised, reused while no template changed (`view_cache`).
pub async fn list_json(
    app: &App,
    caller: &Caller,
    params: &ListQuery,
    detail: bool,
    base: &str,
) -> Result<bytes::Bytes> {
    authorize_list(caller, detail)?;
    let vis = template_visibility(caller);
    let key = || format!("templates {vis:?} {detail} {base:?} {params:?}");
    super::cached_page(app, key, || page(app, &vis, params, detail, base)).await
}

fn authorize_list(caller: &Caller, detail: bool) -> Result<()> {
    policy::enforce(
        if detail {
            "clustertemplate:detail"
        } else {
            "clustertemplate:get_all"
        },
        caller,
        None,
    )?;
    Ok(())
}

/// A page of templates the caller sees (`vis`; the caller passed [`authorize_list`]): their
/// stored views (`stored_views`) in the page's order, as serde writes a
/// [`views::ClusterTemplateList`].
async fn page(
    app: &App,
    vis: &Visibility,
    params: &ListQuery,
    detail: bool,
    base: &str,
) -> Result<bytes::Bytes> {
    // The marker is found in the page's statement; looked up apart only when the page is
    // empty, to tell a marker the caller cannot see (404) from the last template.
    let heads = tvdb::page(&app.reads, vis, &super::page(params, None), params.marker).await?;
    if let Some(m) = params.marker
        && heads.is_empty()
        && tvdb::marker_missing(&app.reads, vis, m).await?
    {
        return Err(DomainError::template_not_found(&m.to_string()).into());
    }
    let path = if detail {
        "clustertemplates/detail"
    } else {
        "clustertemplates"
    };
    let next = params.next_if_full(heads.len(), || {
        heads
            .last()
            .map(|t| params.next_url(base, path, &t.uuid.to_string()))
    });
    let mut out = Vec::with_capacity(16 + heads.len() * 1500);
    out.extend_from_slice(b"{\"clustertemplates\":[");
    stored_views::write_templates(app, &mut out, heads, &stored_views::Links::new(base)?).await?;
    out.push(b']');
    if let Some(next) = next {
        out.extend_from_slice(b",\"next\":");
        serde_json::to_writer(&mut out, &next)?;
    }
    out.push(b'}');
    Ok(bytes::Bytes::from(out))
}

/// Fields whose change is still allowed while clusters use the template.
fn change_allowed_in_use(changed: &[&str], doc: &Map<String, Value>) -> bool {
    match changed {
        [] | ["name"] | ["hidden"] => true,
        ["public"] => doc.get("public") == Some(&Value::Bool(true)),
        ["tags"] => doc.get("tags").is_some_and(|v| !v.is_null()),
        _ => false,
    }
}

pub async fn update(
    app: &App,
    caller: &Caller,
    cloud: Option<&UserSession>,
    ident: &str,
    body: &Value,
) -> Result<TemplateRow> {
    let ops = patch::parse(body, &schemas::TEMPLATE_PATCH)?;
    let vis = template_visibility(caller);
    let t = find_template(app, &vis, ident, false).await?;
    let before_map = views::document(&views::template(&t, ""));
    let patched = patch::apply(&before_map, &ops, &schemas::TEMPLATE_PATCH)?;
    let after = schemas::TEMPLATE.revalidate(&patched)?;
    let before = schemas::TEMPLATE.revalidate(&before_map)?;
    let changed: Vec<&str> = schemas::TEMPLATE
        .fields
        .iter()
        .filter(|f| !f.readonly && before.get(f.name) != after.get(f.name))
        .map(|f| f.name)
        .collect();
    let b = Body(after);
    if let Some(nd) = b.str("network_driver") {
        check_network_driver(app, &nd)?;
    }
    check_volume_driver(b.str("volume_driver").as_deref())?;
    check_devicemapper(
        b.str("docker_storage_driver").as_deref(),
        b.int("docker_volume_size"),
    )?;
    check_dns(b.str("dns_nameserver").as_deref())?;
    if tdb::in_use(&app.pool, t.uuid).await? && !change_allowed_in_use(&changed, &b.0) {
        return Err(DomainError::template_referenced(&t.uuid.to_string()).into());
    }
    policy::enforce("clustertemplate:update", caller, Some(target(&t)))?;
    if matches!(vis, Visibility::All) && t.project_id != caller.project_id {
        policy::enforce("clustertemplate:update_all_projects", caller, None)?;
    }
    if changed.contains(&"public") || changed.contains(&"hidden") {
        check_publish(caller)?;
    }
    if changed.is_empty() {
        return Ok(t);
    }
    let mut row = t.clone();
    apply_doc(&mut row, &b);
    // Magnum re-validates every reference on PATCH; cluster_distro stays as created.
    row.cluster_distro = t.cluster_distro.clone();
    resolve(app, cloud, &mut row).await?;
    check_distro(&row)?;
    // The patched template must hold what a created one must (labels, proxies, kube_tag
    // against the image): a bad value is a 400 now, not a failure at the next cluster create.
    app.backend
        .validate_template(&Template::from(row.clone()))?;
    let updated = tdb::update(&app.pool, &row).await?;
    // This replica's next read of the template is this one (`view_cache`).
    app.views.templates_changed();
    Ok(updated)
}

pub async fn delete(app: &App, caller: &Caller, ident: &str) -> Result<()> {
    let t = find_template(app, &template_visibility(caller), ident, false).await?;
    policy::enforce("clustertemplate:delete", caller, Some(target(&t)))?;
    // A cluster created meanwhile on it: its reference stops the delete (the foreign key).
    let deleted = match tdb::delete(&app.pool, t.uuid).await {
        Err(e) if e.violation() == Some(&Violation::ClusterTemplate) => false,
        other => other?,
    };
    if !deleted {
        // Magnum names the uuid whatever the client used to address the template.
        return Err(DomainError::template_referenced(&t.uuid.to_string()).into());
    }
    app.views.templates_changed();
    Ok(())
}
