//! The request types of every resource (WSME's declarations) and their PATCH rules.

use super::fields::{Default as D, Field, Kind, Schema};
use super::patch::PatchRules;
use super::status::NAMES as STATUS_NAMES;

const fn s255(name: &'static str) -> Field {
    Field::new(name, Kind::Str { min: 1, max: 255 })
}
/// An integer with a lower bound. The upper bound is the column's: every integer Magnum
/// stores is a 32-bit `Integer`, so a larger value is a 400 rather than silently lost.
const fn int_min(name: &'static str, min: i64) -> Field {
    Field::new(
        name,
        Kind::Int {
            min: Some(min),
            max: Some(i32::MAX as i64),
        },
    )
}
/// Magnum's plain `wtypes.text`: any string, the empty one included (Horizon's cluster dialog
/// sends `discovery_url: ""`); 255 is the column's width, so a longer one is a 400, not lost.
const fn text(name: &'static str) -> Field {
    Field::new(name, Kind::Str { min: 0, max: 255 })
}
const fn boolean(name: &'static str, d: bool) -> Field {
    Field::new(name, Kind::Bool).default(D::Bool(d))
}
const fn ro(name: &'static str) -> Field {
    Field::new(name, Kind::Ignored).readonly()
}

pub const COE: &[&str] = &["kubernetes"];
pub const SERVER_TYPES: &[&str] = &["vm", "bm"];
pub const HEALTH: &[&str] = &["HEALTHY", "UNHEALTHY", "UNKNOWN"];
pub const QUOTA_RESOURCES: &[&str] = &["Cluster"];

static TEMPLATE_FIELDS: [Field; 38] = [
    Field::new("uuid", Kind::Str { min: 36, max: 36 }),
    s255("name"),
    Field::new("coe", Kind::Enum(COE)).mandatory(),
    s255("image_id").mandatory(),
    s255("flavor_id"),
    s255("master_flavor_id"),
    s255("keypair_id"),
    s255("dns_nameserver"),
    s255("external_network_id"),
    s255("fixed_network"),
    s255("fixed_subnet"),
    s255("network_driver"),
    s255("volume_driver"),
    Field::new(
        "apiserver_port",
        Kind::Int {
            min: Some(1024),
            max: Some(65535),
        },
    ),
    int_min("docker_volume_size", 1),
    s255("docker_storage_driver"),
    s255("cluster_distro"),
    s255("http_proxy"),
    s255("https_proxy"),
    s255("no_proxy"),
    boolean("registry_enabled", false),
    Field::new("labels", Kind::Labels).default(D::EmptyDict),
    boolean("tls_disabled", false),
    boolean("public", false),
    Field::new("server_type", Kind::Enum(SERVER_TYPES)).default(D::Str("vm")),
    s255("insecure_registry"),
    boolean("master_lb_enabled", false),
    boolean("floating_ip_enabled", true),
    boolean("hidden", false),
    Field::new("tags", Kind::Str { min: 0, max: 255 }),
    s255("driver"),
    ro("project_id"),
    ro("user_id"),
    ro("links"),
    ro("created_at"),
    ro("updated_at"),
    ro("id"),
    ro("bay_count"),
];

pub static TEMPLATE: Schema = Schema {
    arg: "cluster_template",
    fields: &TEMPLATE_FIELDS,
};

pub const TEMPLATE_PATCH: PatchRules = PatchRules {
    internal: &[],
    non_removable: &[
        "/coe",
        "/image_id",
        "/network_driver",
        "/external_network_id",
        "/tls_disabled",
        "/public",
        "/server_type",
        "/registry_enabled",
        "/cluster_distro",
        "/hidden",
    ],
    literal_paths: &["/labels"],
};

static CLUSTER_FIELDS: [Field; 40] = [
    Field::new("uuid", Kind::Str { min: 36, max: 36 }),
    Field::new("name", Kind::ClusterName),
    s255("cluster_template_id").mandatory(),
    s255("keypair"),
    int_min("node_count", 0).default(D::Int(1)),
    int_min("master_count", 1).default(D::Int(1)),
    int_min("docker_volume_size", 1),
    Field::new("labels", Kind::Labels),
    boolean("merge_labels", false),
    s255("master_flavor_id"),
    s255("flavor_id"),
    int_min("create_timeout", 0).default(D::Int(60)),
    text("discovery_url"),
    s255("fixed_network"),
    s255("fixed_subnet"),
    Field::new("floating_ip_enabled", Kind::Bool),
    Field::new("master_lb_enabled", Kind::Bool),
    // Typed as Magnum types them (an unknown status is a 400), then ignored.
    Field::new("status", Kind::Enum(&STATUS_NAMES)),
    Field::new("status_reason", Kind::Ignored),
    Field::new("health_status", Kind::Enum(HEALTH)),
    Field::new("health_status_reason", Kind::StrDict),
    Field::new("faults", Kind::Ignored),
    Field::new("labels_overridden", Kind::Ignored),
    Field::new("labels_added", Kind::Ignored),
    Field::new("labels_skipped", Kind::Ignored),
    ro("stack_id"),
    ro("cluster_id"),
    ro("api_address"),
    ro("coe_version"),
    ro("container_version"),
    ro("node_addresses"),
    ro("master_addresses"),
    ro("project_id"),
    ro("user_id"),
    ro("links"),
    ro("created_at"),
    ro("updated_at"),
    ro("id"),
    ro("bay_create_timeout"),
    ro("baymodel_id"),
];

pub static CLUSTER: Schema = Schema {
    arg: "cluster",
    fields: &CLUSTER_FIELDS,
};

pub const CLUSTER_PATCH: PatchRules = PatchRules {
    internal: &[
        "/api_address",
        "/node_addresses",
        "/master_addresses",
        "/stack_id",
        "/cluster_id",
        "/ca_cert_ref",
        "/magnum_cert_ref",
        "/etcd_ca_cert_ref",
        "/front_proxy_ca_cert_ref",
    ],
    non_removable: &["/cluster_template_id"],
    literal_paths: &["/labels", "/health_status_reason"],
};

static NODEGROUP_FIELDS: [Field; 28] = [
    ro("id"),
    Field::new("uuid", Kind::Str { min: 36, max: 36 }),
    s255("name"),
    // Magnum types it as a uuid and then overwrites it with the path's cluster: accepted, ignored.
    Field::new("cluster_id", Kind::Str { min: 36, max: 36 }),
    ro("project_id"),
    int_min("docker_volume_size", 1),
    Field::new("labels", Kind::Labels),
    ro("labels_overridden"),
    ro("labels_added"),
    ro("labels_skipped"),
    ro("links"),
    s255("flavor_id"),
    s255("image_id"),
    ro("node_addresses"),
    int_min("node_count", 0).default(D::Int(1)),
    s255("role").default(D::Str("worker")),
    int_min("min_node_count", 0).default(D::Int(0)),
    int_min("max_node_count", 0),
    ro("is_default"),
    ro("stack_id"),
    // Writable in Magnum's type (`status` an enum, the others plain text), set by the service.
    Field::new("status", Kind::Enum(&STATUS_NAMES)),
    Field::new("status_reason", Kind::Ignored),
    text("version"),
    ro("created_at"),
    ro("updated_at"),
    boolean("merge_labels", false),
    Field::new("node_labels", Kind::StrDict),
    Field::new("node_taints", Kind::Taints),
];

pub static NODEGROUP: Schema = Schema {
    arg: "nodegroup",
    fields: &NODEGROUP_FIELDS,
};

/// The nodegroup paths a PATCH may not touch; `/flavor_id` last (see [`NODEGROUP_PATCH_FLAVOR`]).
const NODEGROUP_INTERNAL: [&str; 14] = [
    "/name",
    "/cluster_id",
    "/docker_volume_size",
    "/labels",
    "/image_id",
    "/node_addresses",
    "/node_count",
    "/role",
    "/is_default",
    "/stack_id",
    "/status",
    "/status_reason",
    "/version",
    "/flavor_id",
];

/// `paths` without its last entry.
const fn all_but_last(paths: &'static [&'static str]) -> &'static [&'static str] {
    match paths.split_last() {
        Some((_, rest)) => rest,
        None => paths,
    }
}

pub const NODEGROUP_PATCH: PatchRules = PatchRules {
    internal: &NODEGROUP_INTERNAL,
    non_removable: &[],
    literal_paths: &["/node_labels", "/node_taints"],
};

/// [`NODEGROUP_PATCH`] with `/flavor_id` replaceable (`[upgrades] nodegroup_flavor_change`, an
/// extension: Magnum refuses it as an internal attribute) and not removable.
pub const NODEGROUP_PATCH_FLAVOR: PatchRules = PatchRules {
    internal: all_but_last(&NODEGROUP_INTERNAL),
    non_removable: &["/flavor_id"],
    literal_paths: NODEGROUP_PATCH.literal_paths,
};

static QUOTA_FIELDS: [Field; 6] = [
    ro("id"),
    s255("project_id").mandatory(),
    Field::new("resource", Kind::Enum(QUOTA_RESOURCES)).default(D::Str("Cluster")),
    int_min("hard_limit", 0).default(D::Int(1)),
    ro("created_at"),
    ro("updated_at"),
];

pub static QUOTA: Schema = Schema {
    arg: "quota",
    fields: &QUOTA_FIELDS,
};

static QUOTA_UPDATE_FIELDS: [Field; 6] = [
    ro("id"),
    s255("project_id"),
    Field::new("resource", Kind::Enum(QUOTA_RESOURCES)),
    int_min("hard_limit", 0).mandatory(),
    ro("created_at"),
    ro("updated_at"),
];

pub static QUOTA_UPDATE: Schema = Schema {
    arg: "quota",
    fields: &QUOTA_UPDATE_FIELDS,
};

static RESIZE_FIELDS: [Field; 3] = [
    int_min("node_count", 0).mandatory(),
    Field::new("nodes_to_remove", Kind::StrList),
    s255("nodegroup"),
];

pub static RESIZE: Schema = Schema {
    arg: "cluster_resize_req",
    fields: &RESIZE_FIELDS,
};

static UPGRADE_FIELDS: [Field; 3] = [
    s255("cluster_template").mandatory(),
    int_min("max_batch_size", 1).default(D::Int(1)),
    s255("nodegroup"),
];

pub static UPGRADE: Schema = Schema {
    arg: "cluster_upgrade_req",
    fields: &UPGRADE_FIELDS,
};

static CERTIFICATE_FIELDS: [Field; 7] = [
    s255("cluster_uuid").mandatory(),
    Field::new(
        "csr",
        Kind::Str {
            min: 1,
            max: 1 << 20,
        },
    ),
    Field::new("pem", Kind::Ignored),
    // `wtypes.StringType()`: "" is taken and signs with the Kubernetes CA, as Magnum's conductor does.
    text("ca_cert_type"),
    ro("links"),
    ro("created_at"),
    ro("updated_at"),
];

pub static CERTIFICATE: Schema = Schema {
    arg: "certificate",
    fields: &CERTIFICATE_FIELDS,
};
