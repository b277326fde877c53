//! Importing a Magnum database (issue 25), the pure rules: how a Magnum row (of any release from
//! 2023.1 on, as `import::reader` reads it) becomes one of ours, which rows are bad, which driver
//! made each cluster, what magnum-capi may do with an imported cluster, and the report's lines.
//!
//! Every value `GET` shows is kept as Magnum stored it (UUIDs, names, owners, timestamps,
//! statuses, reasons, health, labels), so an imported object answers what Magnum answered.
//! Secrets Magnum kept in its tables (trustee passwords, `x509keypair` private keys) are never
//! read.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::labels::Labels;
use super::status::Status;

/// A Magnum column and how the reader must select it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// VARCHAR / TEXT (JSON columns are TEXT in Magnum).
    Text,
    /// INTEGER and BOOLEAN (TINYINT(1)): read as a signed integer.
    Int,
    /// DATETIME (naive UTC).
    Time,
}

/// One column the import reads: its name, kind, and whether every release from 2023.1 to the
/// newest has it (a missing required column means the database is not Magnum's).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
}

const fn req(name: &'static str, kind: Kind) -> Column {
    Column {
        name,
        kind,
        required: true,
    }
}

/// Columns that come and go between releases: `cluster_template.driver` (2024.1), nodegroup
/// `node_labels`/`node_taints` (newest), `stack_id` (dropped on Magnum's master).
const fn opt(name: &'static str, kind: Kind) -> Column {
    Column {
        name,
        kind,
        required: false,
    }
}

use Kind::{Int, Text, Time};

/// `cluster_template`: every column the API shows.
pub const TEMPLATE_COLUMNS: &[Column] = &[
    req("id", Int),
    req("uuid", Text),
    req("project_id", Text),
    req("user_id", Text),
    req("name", Text),
    req("image_id", Text),
    req("flavor_id", Text),
    req("master_flavor_id", Text),
    req("keypair_id", Text),
    req("external_network_id", Text),
    req("fixed_network", Text),
    req("fixed_subnet", Text),
    req("network_driver", Text),
    req("volume_driver", Text),
    req("dns_nameserver", Text),
    req("apiserver_port", Int),
    req("docker_volume_size", Int),
    req("docker_storage_driver", Text),
    req("cluster_distro", Text),
    req("coe", Text),
    req("http_proxy", Text),
    req("https_proxy", Text),
    req("no_proxy", Text),
    req("registry_enabled", Int),
    req("labels", Text),
    req("tls_disabled", Int),
    req("public", Int),
    req("server_type", Text),
    req("insecure_registry", Text),
    req("master_lb_enabled", Int),
    req("floating_ip_enabled", Int),
    req("hidden", Int),
    req("tags", Text),
    opt("driver", Text),
    req("created_at", Time),
    req("updated_at", Time),
];

/// `cluster`: every column the API shows (never the trust columns: a trustee's password is a
/// secret, and nothing here uses Magnum's trusts).
pub const CLUSTER_COLUMNS: &[Column] = &[
    req("id", Int),
    req("uuid", Text),
    req("project_id", Text),
    req("user_id", Text),
    req("name", Text),
    req("cluster_template_id", Text),
    req("keypair", Text),
    req("docker_volume_size", Int),
    req("labels", Text),
    req("master_flavor_id", Text),
    req("flavor_id", Text),
    opt("stack_id", Text),
    req("api_address", Text),
    req("status", Text),
    req("status_reason", Text),
    req("health_status", Text),
    req("health_status_reason", Text),
    req("create_timeout", Int),
    req("discovery_url", Text),
    req("coe_version", Text),
    req("container_version", Text),
    req("ca_cert_ref", Text),
    req("magnum_cert_ref", Text),
    opt("etcd_ca_cert_ref", Text),
    opt("front_proxy_ca_cert_ref", Text),
    req("fixed_network", Text),
    req("fixed_subnet", Text),
    req("floating_ip_enabled", Int),
    req("master_lb_enabled", Int),
    req("created_at", Time),
    req("updated_at", Time),
];

/// `nodegroup`.
pub const NODEGROUP_COLUMNS: &[Column] = &[
    req("id", Int),
    req("uuid", Text),
    req("name", Text),
    req("cluster_id", Text),
    req("project_id", Text),
    req("docker_volume_size", Int),
    req("labels", Text),
    req("flavor_id", Text),
    req("image_id", Text),
    req("node_addresses", Text),
    req("node_count", Int),
    req("role", Text),
    req("max_node_count", Int),
    req("min_node_count", Int),
    req("is_default", Int),
    opt("stack_id", Text),
    req("status", Text),
    req("status_reason", Text),
    req("version", Text),
    opt("node_labels", Text),
    opt("node_taints", Text),
    req("created_at", Time),
    req("updated_at", Time),
];

/// `quotas`.
pub const QUOTA_COLUMNS: &[Column] = &[
    req("id", Int),
    req("project_id", Text),
    req("resource", Text),
    req("hard_limit", Int),
    req("created_at", Time),
    req("updated_at", Time),
];

/// Magnum tables the import does not carry over, and why (the report says so).
pub const SKIPPED_TABLES: &[(&str, &str)] = &[
    (
        "federation",
        "federations are not part of magnum-capi's API (Magnum never implemented them)",
    ),
    (
        "x509keypair",
        "certificates of Heat-driver clusters (private keys are never copied); CAPI clusters keep \
         their CAs in management-cluster Secrets",
    ),
    (
        "magnum_service",
        "Magnum's own conductor heartbeats; magnum-capi replicas register themselves",
    ),
];

/// A row as the reader found it: column name → value (absent columns are missing keys).
pub type RawRow = Map<String, Value>;

/// A row that cannot be imported: the run stops and nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{table} row id {id}: {problem}")]
pub struct BadRow {
    pub table: &'static str,
    pub id: i64,
    pub problem: String,
}

/// A template to write, every column as Magnum had it (`NULL` booleans take Magnum's model
/// defaults).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateRecord {
    /// Magnum's row id, kept: the API shows nodegroup ids and takes integer ids as idents.
    #[serde(rename = "id")]
    pub magnum_id: i64,
    pub uuid: Uuid,
    pub project_id: String,
    pub user_id: String,
    pub name: Option<String>,
    pub image_id: Option<String>,
    pub flavor_id: Option<String>,
    pub master_flavor_id: Option<String>,
    pub keypair_id: Option<String>,
    pub external_network_id: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub network_driver: Option<String>,
    pub volume_driver: Option<String>,
    pub dns_nameserver: Option<String>,
    pub apiserver_port: Option<i32>,
    pub docker_volume_size: Option<i32>,
    pub docker_storage_driver: Option<String>,
    pub cluster_distro: Option<String>,
    pub coe: Option<String>,
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
    pub registry_enabled: bool,
    pub labels: Labels,
    pub tls_disabled: bool,
    pub public: bool,
    pub server_type: Option<String>,
    pub insecure_registry: Option<String>,
    pub master_lb_enabled: bool,
    pub floating_ip_enabled: bool,
    pub hidden: bool,
    pub tags: Option<String>,
    pub driver: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// A cluster to write, and what the import decided about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterRecord {
    /// Magnum's row id, kept: the API shows nodegroup ids and takes integer ids as idents.
    #[serde(rename = "id")]
    pub magnum_id: i64,
    pub uuid: Uuid,
    pub project_id: String,
    pub user_id: String,
    pub name: Option<String>,
    pub cluster_template_id: Uuid,
    pub keypair: Option<String>,
    pub docker_volume_size: Option<i32>,
    pub labels: Labels,
    pub master_flavor_id: Option<String>,
    pub flavor_id: Option<String>,
    pub stack_id: Option<String>,
    pub api_address: Option<String>,
    pub status: String,
    pub status_reason: Option<String>,
    pub health_status: Option<String>,
    pub health_status_reason: Value,
    pub create_timeout: Option<i32>,
    pub discovery_url: Option<String>,
    pub coe_version: Option<String>,
    pub container_version: Option<String>,
    pub ca_cert_ref: Option<String>,
    pub magnum_cert_ref: Option<String>,
    pub etcd_ca_cert_ref: Option<String>,
    pub front_proxy_ca_cert_ref: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub floating_ip_enabled: Option<bool>,
    pub master_lb_enabled: Option<bool>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The driver that made it in Magnum and how that was found.
    #[serde(skip)]
    pub source: SourceDriver,
    #[serde(skip)]
    pub state: ImportState,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodegroupRecord {
    /// Magnum's row id, kept: the API shows nodegroup ids and takes integer ids as idents.
    #[serde(rename = "id")]
    pub magnum_id: i64,
    pub uuid: Uuid,
    pub name: String,
    pub cluster_id: Uuid,
    pub project_id: String,
    pub docker_volume_size: Option<i32>,
    pub labels: Labels,
    pub flavor_id: Option<String>,
    pub image_id: Option<String>,
    pub node_addresses: Vec<String>,
    pub node_count: i32,
    pub role: String,
    pub max_node_count: Option<i32>,
    pub min_node_count: i32,
    pub is_default: bool,
    pub stack_id: Option<String>,
    pub status: Option<String>,
    pub status_reason: Option<String>,
    pub version: Option<String>,
    pub node_labels: Option<Value>,
    pub node_taints: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuotaRecord {
    #[serde(rename = "id")]
    pub magnum_id: i64,
    pub project_id: String,
    pub resource: String,
    pub hard_limit: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// What magnum-capi may do with an imported cluster (`imported_cluster.state`), decided from
/// [`SourceDriver`], `stack_id` and whether its Cluster API objects were found ([`decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportState {
    /// Listed and shown as Magnum showed it; every change is refused.
    ReadOnly,
    /// Made by a Magnum Cluster API driver whose `Cluster` was found on a management cluster:
    /// its status comes from those objects and the operations [`adopted_refusal`] allows act on
    /// them where they are.
    Adopted,
}

impl ImportState {
    pub fn as_str(self) -> &'static str {
        match self {
            ImportState::ReadOnly => "read_only",
            ImportState::Adopted => "adopted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read_only" => Some(ImportState::ReadOnly),
            "adopted" => Some(ImportState::Adopted),
            _ => None,
        }
    }
}

/// The Magnum driver that made a cluster, as far as the database tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceDriver {
    /// The driver's entry-point name (`k8s_capi_helm_v1`, `k8s_cluster_api_ubuntu`,
    /// `k8s_fedora_coreos_v1`, …) or `unknown`.
    pub name: String,
    /// How it was found (the report shows it).
    pub basis: &'static str,
}

impl SourceDriver {
    pub fn family(&self) -> DriverFamily {
        family_of(&self.name)
    }
}

pub use super::spec::DriverFamily;

/// The family of the Magnum driver entry point `name` (a template's `driver` column).
pub fn family_of(name: &str) -> DriverFamily {
    if name == "k8s_capi_helm_v1" {
        DriverFamily::CapiHelm
    } else if name.starts_with("k8s_cluster_api") {
        DriverFamily::ClusterApi
    } else if name.starts_with("k8s_fedora") || name.starts_with("k8s_coreos") || name == "heat" {
        DriverFamily::Heat
    } else {
        DriverFamily::Unknown
    }
}

/// Which driver made a cluster: the template's `driver` column when Magnum recorded one
/// (2024.1 on); otherwise the shape of `stack_id`, which each driver fills its own way (a Heat
/// stack UUID; `kube-` and five characters for magnum-cluster-api; a sanitised name, `-` and a
/// 12-character short id for magnum-capi-helm).
pub fn source_driver(
    template_driver: Option<&str>,
    cluster_distro: Option<&str>,
    stack_id: Option<&str>,
) -> SourceDriver {
    if let Some(d) = template_driver.filter(|d| !d.is_empty()) {
        return SourceDriver {
            name: d.to_string(),
            basis: "the template's driver column",
        };
    }
    let distro = cluster_distro.unwrap_or("");
    let Some(stack) = stack_id.filter(|s| !s.is_empty()) else {
        return SourceDriver {
            name: "unknown".into(),
            basis: "no driver column and no stack_id",
        };
    };
    let by_stack = |name: String| SourceDriver {
        name,
        basis: "the shape of stack_id",
    };
    if Uuid::parse_str(stack).is_ok() {
        return by_stack(if distro.starts_with("fedora-coreos") {
            "k8s_fedora_coreos_v1".into()
        } else {
            "heat".into()
        });
    }
    let lowercase_dns = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if let Some(rest) = stack.strip_prefix("kube-")
        && rest.len() == 5
        && lowercase_dns(rest)
    {
        let os = if distro.is_empty() { "ubuntu" } else { distro };
        return by_stack(format!("k8s_cluster_api_{}", os.replace('-', "_")));
    }
    if let Some((_, short)) = stack.rsplit_once('-')
        && short.len() == 12
        && lowercase_dns(stack)
    {
        return by_stack("k8s_capi_helm_v1".into());
    }
    SourceDriver {
        name: "unknown".into(),
        basis: "stack_id matches no known driver's names",
    }
}

/// The namespace magnum-cluster-api puts every cluster's objects in (fixed in its code).
pub const CLUSTER_API_NAMESPACE: &str = "magnum-system";
/// magnum-capi-helm's `[capi_helm] namespace_prefix` default.
pub const CAPI_HELM_NAMESPACE_PREFIX: &str = "magnum";

/// Where the Magnum driver `source_driver` left an imported cluster's Cluster API objects, read
/// from the drivers' sources: magnum-cluster-api names its CAPI `Cluster` `stack_id` in
/// `magnum-system`; magnum-capi-helm names it (the Helm release) `stack_id` in
/// `magnum-<project id, lower-cased, without what is not [a-z0-9]>`. Both keep the cluster's CAs
/// in `<name>-ca`, `-etcd`, `-proxy`, `-sa` there. `None` for other drivers (Heat: no CAPI
/// objects) or without a `stack_id`.
pub fn objects_at(
    source_driver: &str,
    stack_id: Option<&str>,
    project_id: &str,
) -> Option<super::spec::ObjectsAt> {
    let name = stack_id.filter(|s| !s.is_empty())?.to_string();
    let driver = family_of(source_driver);
    let namespace = match driver {
        DriverFamily::ClusterApi => CLUSTER_API_NAMESPACE.to_string(),
        DriverFamily::CapiHelm => {
            let id: String = project_id
                .to_ascii_lowercase()
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect();
            format!("{CAPI_HELM_NAMESPACE_PREFIX}-{id}")
        }
        DriverFamily::Heat | DriverFamily::Unknown => return None,
    };
    Some(super::spec::ObjectsAt {
        namespace,
        name,
        driver,
    })
}

/// magnum-capi-helm's `_sanitized_name`: lower-cased, every run of characters other than
/// `[a-z0-9]` replaced by one `-` (its MachineDeployment of nodegroup `ng` is
/// `<release>-<sanitized ng>`, its control plane `<release>-control-plane`).
pub fn capi_helm_sanitized(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for ch in name.to_lowercase().chars() {
        if ch.is_ascii_lowercase() || ch.is_ascii_digit() {
            out.push(ch);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

/// What an imported cluster becomes, and why (the report's words): a Cluster API driver's
/// cluster whose `Cluster` was `found` on a configured management cluster is adopted; one whose
/// objects are not there (yet) stays read-only until an import finds them; the others are
/// read-only.
pub fn decide(source: &SourceDriver, found: bool) -> (ImportState, String) {
    let why = match source.family() {
        DriverFamily::Heat => format!(
            "made by the Heat driver ({}): magnum-capi cannot manage Heat stacks",
            source.name
        ),
        DriverFamily::CapiHelm | DriverFamily::ClusterApi if found => {
            return (
                ImportState::Adopted,
                format!(
                    "made by {}: its Cluster API objects were found and are managed where they are",
                    source.name
                ),
            );
        }
        DriverFamily::CapiHelm | DriverFamily::ClusterApi => format!(
            "made by {}: its Cluster API objects were not found on a configured management \
             cluster (import again once they are, to adopt it)",
            source.name
        ),
        DriverFamily::Unknown => format!(
            "made by an unknown driver ({}): nothing here can manage it",
            source.name
        ),
    };
    (ImportState::ReadOnly, why)
}

/// The 400 a change to a read-only imported cluster gets: why, and what to do.
pub fn refusal(cluster: &str, source_driver: &str) -> String {
    let (_, why) = decide(
        &SourceDriver {
            name: source_driver.to_string(),
            basis: "the import",
        },
        false,
    );
    format!(
        "Cluster {cluster} was imported from Magnum and is read-only: {why}. It can be listed \
         and shown; to change it, use the Magnum that made it, or recreate it in magnum-capi (an \
         administrator can remove this record, and only the record, with `magnum-capi cluster \
         forget {cluster} --force --yes`)."
    )
}

/// What an adopted cluster cannot do (yet), as the 400 its request gets: `None` when `action`
/// works on the objects the Magnum driver left (resize, delete, certificates and config, an
/// upgrade and a credential rotation done as the driver would have done them:
/// `capi::adopt_upgrade`, `capi::adopt_credentials`) or beside them as the driver writes its
/// own (nodegroup create, update, delete: `capi::adopt_nodegroups`). Everything else would
/// need objects rendered by magnum-capi beside or instead of the driver's, which adoption
/// never does by itself (docs/moving-from-magnum.md).
pub fn adopted_refusal(cluster: &str, source_driver: &str, action: &str) -> Option<String> {
    let (what, instead) = match action {
        "resize" | "delete" | "sign" | "update" | "nodegroup" | "upgrade" | "rotate_credential" => {
            return None;
        }
        "rotate_ca" => (
            "rotating its CAs",
            "its CAs stay the ones its driver made; certificates they sign keep working",
        ),
        _ => (action, "use the Magnum that made it before the cut-over"),
    };
    Some(format!(
        "Cluster {cluster} was adopted from Magnum ({source_driver}): {what} is not available for \
         an adopted cluster, because it would need Cluster API objects rendered by magnum-capi in \
         place of the ones {source_driver} made, and would replace machines. Instead: {instead}."
    ))
}

fn text(row: &RawRow, key: &str) -> Option<String> {
    match row.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    }
}

fn int(row: &RawRow, key: &str) -> Option<i64> {
    row.get(key).and_then(Value::as_i64)
}

struct Cx<'a> {
    table: &'static str,
    id: i64,
    row: &'a RawRow,
}

impl Cx<'_> {
    fn bad(&self, problem: impl Into<String>) -> BadRow {
        BadRow {
            table: self.table,
            id: self.id,
            problem: problem.into(),
        }
    }

    fn text(&self, key: &str) -> Option<String> {
        text(self.row, key)
    }

    fn required_text(&self, key: &str) -> Result<String, BadRow> {
        self.text(key)
            .ok_or_else(|| self.bad(format!("{key} is NULL")))
    }

    fn uuid(&self, key: &str) -> Result<Uuid, BadRow> {
        let s = self.required_text(key)?;
        Uuid::parse_str(&s).map_err(|_| self.bad(format!("{key} {s:?} is not a UUID")))
    }

    fn i32(&self, key: &str) -> Result<Option<i32>, BadRow> {
        int(self.row, key)
            .map(|v| i32::try_from(v).map_err(|_| self.bad(format!("{key} {v} is out of range"))))
            .transpose()
    }

    fn flag(&self, key: &str) -> Option<bool> {
        int(self.row, key).map(|v| v != 0)
    }

    fn time(&self, key: &str) -> Result<Option<DateTime<Utc>>, BadRow> {
        self.text(key)
            .map(|s| {
                NaiveDateTime::parse_from_str(&s, "%Y-%m-%d %H:%M:%S%.f")
                    .map(|t| t.and_utc())
                    .map_err(|_| self.bad(format!("{key} {s:?} is not a timestamp")))
            })
            .transpose()
    }

    /// `created_at`: Magnum's models always set it; a NULL one (a hand-made row) becomes `now`.
    fn created(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>, BadRow> {
        Ok(self.time("created_at")?.unwrap_or(now))
    }

    fn json(&self, key: &str) -> Result<Option<Value>, BadRow> {
        self.text(key)
            .map(|s| {
                serde_json::from_str::<Value>(&s)
                    .map_err(|e| self.bad(format!("{key} is not JSON ({e})")))
            })
            .transpose()
    }

    /// A JSON dict of strings (Magnum's `DictOfStringsField` turns numbers and booleans into
    /// their Python `str`); NULL is `{}`.
    fn labels(&self, key: &str) -> Result<Labels, BadRow> {
        let Some(v) = self.json(key)? else {
            return Ok(Labels::new());
        };
        let Value::Object(m) = v else {
            return Err(self.bad(format!("{key} is not a JSON object")));
        };
        m.into_iter()
            .map(|(k, v)| {
                let s = match v {
                    Value::String(s) => s,
                    Value::Bool(true) => "True".into(),
                    Value::Bool(false) => "False".into(),
                    Value::Number(n) => n.to_string(),
                    other => {
                        return Err(self.bad(format!("{key}: label {k} has the value {other}")));
                    }
                };
                Ok((k, s))
            })
            .collect()
    }

    fn status(&self, key: &str, required: bool) -> Result<Option<String>, BadRow> {
        match self.text(key) {
            None if required => Err(self.bad(format!("{key} is NULL"))),
            None => Ok(None),
            Some(s) if s.parse::<Status>().is_ok() => Ok(Some(s)),
            Some(s) => Err(self.bad(format!("{key} {s:?} is not a Magnum status"))),
        }
    }
}

fn cx<'a>(table: &'static str, row: &'a RawRow) -> Cx<'a> {
    Cx {
        table,
        id: int(row, "id").unwrap_or(0),
        row,
    }
}

pub fn template(row: &RawRow, now: DateTime<Utc>) -> Result<TemplateRecord, BadRow> {
    let c = cx("cluster_template", row);
    Ok(TemplateRecord {
        magnum_id: c.id,
        uuid: c.uuid("uuid")?,
        project_id: c.required_text("project_id")?,
        user_id: c.required_text("user_id")?,
        name: c.text("name"),
        image_id: c.text("image_id"),
        flavor_id: c.text("flavor_id"),
        master_flavor_id: c.text("master_flavor_id"),
        keypair_id: c.text("keypair_id"),
        external_network_id: c.text("external_network_id"),
        fixed_network: c.text("fixed_network"),
        fixed_subnet: c.text("fixed_subnet"),
        network_driver: c.text("network_driver"),
        volume_driver: c.text("volume_driver"),
        dns_nameserver: c.text("dns_nameserver"),
        apiserver_port: c.i32("apiserver_port")?,
        docker_volume_size: c.i32("docker_volume_size")?,
        docker_storage_driver: c.text("docker_storage_driver"),
        cluster_distro: c.text("cluster_distro"),
        coe: c.text("coe"),
        http_proxy: c.text("http_proxy"),
        https_proxy: c.text("https_proxy"),
        no_proxy: c.text("no_proxy"),
        registry_enabled: c.flag("registry_enabled").unwrap_or(false),
        labels: c.labels("labels")?,
        tls_disabled: c.flag("tls_disabled").unwrap_or(false),
        public: c.flag("public").unwrap_or(false),
        server_type: c.text("server_type"),
        insecure_registry: c.text("insecure_registry"),
        master_lb_enabled: c.flag("master_lb_enabled").unwrap_or(false),
        floating_ip_enabled: c.flag("floating_ip_enabled").unwrap_or(true),
        hidden: c.flag("hidden").unwrap_or(false),
        tags: c.text("tags"),
        driver: c.text("driver"),
        created_at: c.created(now)?,
        updated_at: c.time("updated_at")?,
    })
}

/// A cluster of `templates` (uuid → its `driver` column and `cluster_distro`).
pub fn cluster(
    row: &RawRow,
    templates: &BTreeMap<Uuid, (Option<String>, Option<String>)>,
    now: DateTime<Utc>,
) -> Result<ClusterRecord, BadRow> {
    let c = cx("cluster", row);
    let template_ref = c.required_text("cluster_template_id")?;
    let template_uuid = Uuid::parse_str(&template_ref)
        .ok()
        .filter(|u| templates.contains_key(u))
        .ok_or_else(|| {
            c.bad(format!(
                "cluster_template_id {template_ref} names no template of this database"
            ))
        })?;
    let (t_driver, t_distro) = templates.get(&template_uuid).cloned().unwrap_or_default();
    let stack_id = c.text("stack_id");
    let source = source_driver(
        t_driver.as_deref(),
        t_distro.as_deref(),
        stack_id.as_deref(),
    );
    let (state, _) = decide(&source, false);
    let health_status_reason = match c.json("health_status_reason")? {
        None => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(c.bad("health_status_reason is not a JSON object")),
    };
    Ok(ClusterRecord {
        magnum_id: c.id,
        uuid: c.uuid("uuid")?,
        project_id: c.required_text("project_id")?,
        user_id: c.required_text("user_id")?,
        name: c.text("name"),
        cluster_template_id: template_uuid,
        keypair: c.text("keypair"),
        docker_volume_size: c.i32("docker_volume_size")?,
        labels: c.labels("labels")?,
        master_flavor_id: c.text("master_flavor_id"),
        flavor_id: c.text("flavor_id"),
        stack_id,
        api_address: c.text("api_address"),
        status: c.status("status", true)?.unwrap_or_default(),
        status_reason: c.text("status_reason"),
        health_status: c.text("health_status"),
        health_status_reason,
        create_timeout: c.i32("create_timeout")?,
        discovery_url: c.text("discovery_url"),
        coe_version: c.text("coe_version"),
        container_version: c.text("container_version"),
        ca_cert_ref: c.text("ca_cert_ref"),
        magnum_cert_ref: c.text("magnum_cert_ref"),
        etcd_ca_cert_ref: c.text("etcd_ca_cert_ref"),
        front_proxy_ca_cert_ref: c.text("front_proxy_ca_cert_ref"),
        fixed_network: c.text("fixed_network"),
        fixed_subnet: c.text("fixed_subnet"),
        floating_ip_enabled: c.flag("floating_ip_enabled"),
        master_lb_enabled: c.flag("master_lb_enabled"),
        created_at: c.created(now)?,
        updated_at: c.time("updated_at")?,
        source,
        state,
    })
}

/// A nodegroup of one of `clusters`.
pub fn nodegroup(
    row: &RawRow,
    clusters: &BTreeMap<Uuid, ()>,
    now: DateTime<Utc>,
) -> Result<NodegroupRecord, BadRow> {
    let c = cx("nodegroup", row);
    let cluster_id = c.uuid("cluster_id")?;
    if !clusters.contains_key(&cluster_id) {
        return Err(c.bad(format!(
            "cluster_id {cluster_id} names no cluster of this database"
        )));
    }
    let node_addresses = match c.json("node_addresses")? {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(c.bad(format!("node_addresses holds {other}"))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(c.bad("node_addresses is not a JSON list")),
    };
    let node_labels = match c.json("node_labels")? {
        v @ (None | Some(Value::Object(_))) => v,
        Some(_) => return Err(c.bad("node_labels is not a JSON object")),
    };
    let node_taints = match c.json("node_taints")? {
        v @ (None | Some(Value::Array(_))) => v,
        Some(_) => return Err(c.bad("node_taints is not a JSON list")),
    };
    Ok(NodegroupRecord {
        magnum_id: c.id,
        uuid: c.uuid("uuid")?,
        name: c.required_text("name")?,
        cluster_id,
        project_id: c.required_text("project_id")?,
        docker_volume_size: c.i32("docker_volume_size")?,
        labels: c.labels("labels")?,
        flavor_id: c.text("flavor_id"),
        image_id: c.text("image_id"),
        node_addresses,
        node_count: c.i32("node_count")?.unwrap_or(0),
        role: c.required_text("role")?,
        max_node_count: c.i32("max_node_count")?,
        min_node_count: c.i32("min_node_count")?.unwrap_or(0),
        is_default: c.flag("is_default").unwrap_or(false),
        stack_id: c.text("stack_id"),
        status: c.status("status", false)?,
        status_reason: c.text("status_reason"),
        version: c.text("version"),
        node_labels,
        node_taints,
        created_at: c.created(now)?,
        updated_at: c.time("updated_at")?,
    })
}

pub fn quota(row: &RawRow, now: DateTime<Utc>) -> Result<QuotaRecord, BadRow> {
    let c = cx("quotas", row);
    Ok(QuotaRecord {
        magnum_id: c.id,
        project_id: c.required_text("project_id")?,
        resource: c.required_text("resource")?,
        hard_limit: c
            .i32("hard_limit")?
            .ok_or_else(|| c.bad("hard_limit is NULL"))?,
        created_at: c.created(now)?,
        updated_at: c.time("updated_at")?,
    })
}

/// Every record of one Magnum database, checked as a whole: UUIDs unique, references resolved.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub templates: Vec<TemplateRecord>,
    pub clusters: Vec<ClusterRecord>,
    pub nodegroups: Vec<NodegroupRecord>,
    pub quotas: Vec<QuotaRecord>,
    /// Adopted clusters changed through magnum-capi since (an operation was accepted for them):
    /// this service is their authority now, so their records (and nodegroups) here are kept as
    /// they are and Magnum's older rows are not written over them.
    pub managed_here: BTreeSet<Uuid>,
}

/// The rows of each table, in Magnum's id order.
#[derive(Debug, Clone, Default)]
pub struct Tables {
    pub templates: Vec<RawRow>,
    pub clusters: Vec<RawRow>,
    pub nodegroups: Vec<RawRow>,
    pub quotas: Vec<RawRow>,
}

/// Maps every row; the first bad row stops the plan (nothing of a run with a bad row is written).
pub fn plan(tables: &Tables, now: DateTime<Utc>) -> Result<Plan, BadRow> {
    let templates = tables
        .templates
        .iter()
        .map(|r| template(r, now))
        .collect::<Result<Vec<_>, _>>()?;
    let by_uuid: BTreeMap<Uuid, (Option<String>, Option<String>)> = templates
        .iter()
        .map(|t| (t.uuid, (t.driver.clone(), t.cluster_distro.clone())))
        .collect();
    unique(
        "cluster_template",
        templates.iter().map(|t| (t.magnum_id, t.uuid)),
    )?;
    let clusters = tables
        .clusters
        .iter()
        .map(|r| cluster(r, &by_uuid, now))
        .collect::<Result<Vec<_>, _>>()?;
    unique("cluster", clusters.iter().map(|c| (c.magnum_id, c.uuid)))?;
    let cluster_ids: BTreeMap<Uuid, ()> = clusters.iter().map(|c| (c.uuid, ())).collect();
    let nodegroups = tables
        .nodegroups
        .iter()
        .map(|r| nodegroup(r, &cluster_ids, now))
        .collect::<Result<Vec<_>, _>>()?;
    unique(
        "nodegroup",
        nodegroups.iter().map(|n| (n.magnum_id, n.uuid)),
    )?;
    let quotas = tables
        .quotas
        .iter()
        .map(|r| quota(r, now))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Plan {
        templates,
        clusters,
        nodegroups,
        quotas,
        managed_here: BTreeSet::new(),
    })
}

fn unique(table: &'static str, ids: impl Iterator<Item = (i64, Uuid)>) -> Result<(), BadRow> {
    let mut seen = BTreeMap::new();
    for (id, uuid) in ids {
        if let Some(first) = seen.insert(uuid, id) {
            return Err(BadRow {
                table,
                id,
                problem: format!("uuid {uuid} is also row id {first}'s"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> RawRow {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_driver_column_names_the_source_driver() {
        let d = source_driver(Some("k8s_capi_helm_v1"), Some("ubuntu"), Some("kube-abcde"));
        assert_eq!(d.name, "k8s_capi_helm_v1");
        assert_eq!(d.family(), DriverFamily::CapiHelm);
    }

    #[test]
    fn without_a_driver_column_the_stack_id_tells_the_driver() {
        let heat = source_driver(
            None,
            Some("fedora-coreos"),
            Some("5a1c2d3e-0000-4000-8000-000000000001"),
        );
        assert_eq!(heat.name, "k8s_fedora_coreos_v1");
        assert_eq!(heat.family(), DriverFamily::Heat);
        let mcapi = source_driver(None, Some("ubuntu"), Some("kube-x7k2p"));
        assert_eq!(mcapi.name, "k8s_cluster_api_ubuntu");
        let helm = source_driver(None, Some("ubuntu"), Some("demo-abcdef123456"));
        assert_eq!(helm.name, "k8s_capi_helm_v1");
        let unknown = source_driver(None, Some("ubuntu"), Some("Some Stack"));
        assert_eq!(unknown.family(), DriverFamily::Unknown);
    }

    #[test]
    fn a_capi_driver_cluster_is_adopted_once_its_objects_are_found_and_the_others_never() {
        for (name, found, want) in [
            ("k8s_capi_helm_v1", true, ImportState::Adopted),
            ("k8s_cluster_api_ubuntu", true, ImportState::Adopted),
            ("k8s_capi_helm_v1", false, ImportState::ReadOnly),
            ("k8s_fedora_coreos_v1", true, ImportState::ReadOnly),
            ("unknown", true, ImportState::ReadOnly),
        ] {
            let (state, why) = decide(
                &SourceDriver {
                    name: name.into(),
                    basis: "test",
                },
                found,
            );
            assert_eq!(state, want, "{name} {found}");
            assert!(why.contains(name), "{why}");
            assert_eq!(ImportState::parse(state.as_str()), Some(state));
        }
    }

    #[test]
    fn an_adopted_cluster_resizes_and_deletes_and_refuses_what_would_roll_its_machines() {
        assert_eq!(adopted_refusal("c", "k8s_capi_helm_v1", "resize"), None);
        assert_eq!(adopted_refusal("c", "k8s_capi_helm_v1", "delete"), None);
        assert_eq!(
            adopted_refusal("c", "k8s_cluster_api_ubuntu", "nodegroup"),
            None
        );
        assert_eq!(adopted_refusal("c", "k8s_capi_helm_v1", "upgrade"), None);
        assert_eq!(
            adopted_refusal("c", "k8s_capi_helm_v1", "rotate_credential"),
            None
        );
        let ca = adopted_refusal("c", "k8s_capi_helm_v1", "rotate_ca").unwrap();
        assert!(ca.contains("rotating its CAs is not available"), "{ca}");
        assert!(ca.contains("Instead:"), "{ca}");
    }

    #[test]
    fn each_capi_driver_left_its_objects_in_its_own_namespace_under_the_stack_id() {
        let mcapi = objects_at("k8s_cluster_api_flatcar", Some("kube-x7k2p"), "P-1").unwrap();
        assert_eq!(
            (mcapi.namespace.as_str(), mcapi.name.as_str()),
            ("magnum-system", "kube-x7k2p")
        );
        let helm = objects_at("k8s_capi_helm_v1", Some("demo-abcdef123456"), "Ab-12_cd").unwrap();
        assert_eq!(
            (helm.namespace.as_str(), helm.name.as_str()),
            ("magnum-ab12cd", "demo-abcdef123456")
        );
        assert_eq!(objects_at("k8s_fedora_coreos_v1", Some("x"), "p"), None);
        assert_eq!(objects_at("k8s_capi_helm_v1", None, "p"), None);
    }

    #[test]
    fn capi_helm_names_its_machine_deployments_after_the_sanitized_nodegroup() {
        assert_eq!(capi_helm_sanitized("Default_Worker"), "default-worker");
        assert_eq!(capi_helm_sanitized("gpu  nodes!"), "gpu-nodes-");
    }

    #[test]
    fn labels_keep_strings_and_turn_numbers_and_booleans_into_python_strings() {
        let r = row(json!({"id": 1, "labels": r#"{"a": "x", "n": 3, "b": true}"#}));
        let l = cx("cluster", &r).labels("labels").unwrap();
        assert_eq!(l["a"], "x");
        assert_eq!(l["n"], "3");
        assert_eq!(l["b"], "True");
    }

    #[test]
    fn a_cluster_of_a_missing_template_is_a_bad_row() {
        let r = row(json!({"id": 7, "uuid": Uuid::nil().to_string(),
            "cluster_template_id": "nope", "project_id": "p", "user_id": "u",
            "status": "CREATE_COMPLETE"}));
        let e = cluster(&r, &BTreeMap::new(), Utc::now()).unwrap_err();
        assert_eq!(e.id, 7);
        assert!(e.problem.contains("names no template"), "{e}");
    }

    #[test]
    fn an_unknown_status_is_a_bad_row() {
        let r = row(json!({"id": 2, "status": "WEIRD"}));
        assert!(cx("cluster", &r).status("status", true).is_err());
    }

    #[test]
    fn timestamps_are_naive_utc() {
        let r = row(json!({"id": 1, "created_at": "2024-03-01 10:11:12"}));
        let t = cx("quotas", &r).time("created_at").unwrap().unwrap();
        assert_eq!(t.to_rfc3339(), "2024-03-01T10:11:12+00:00");
    }
}
