//! The OpenAPI contract beyond the resource views: Magnum's error bodies (the types `error.rs`
//! serialises), the request bodies (derived from the domain's WSME declarations, so they
//! describe exactly what the request parser accepts), the query and header parameters, and the
//! documents of the operators' endpoints.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, KnownFormat, Object, ObjectBuilder, OneOfBuilder, Schema,
    SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{RefOr, Required};
use utoipa::{IntoParams, IntoResponses, PartialSchema, ToSchema};

use crate::domain::fields::{CLUSTER_NAME_PATTERN, Field, Kind, Schema as Declaration};
use crate::domain::nodegroup_rules::TAINT_EFFECTS;
use crate::domain::schemas;
use crate::service::views::Link;

// ---------------------------------------------------------------------------------------------
// Error bodies

/// Who raised a Magnum error: the API on a client error, the service on a server error, or the
/// web framework (no route, method not allowed, version not acceptable): empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ErrorCode {
    #[serde(rename = "client")]
    Client,
    #[serde(rename = "server")]
    Server,
    #[serde(rename = "")]
    Framework,
}

// By hand: the derive does not carry the empty name over.
impl PartialSchema for ErrorCode {
    fn schema() -> RefOr<Schema> {
        Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["client", "server", ""]))
                .description(Some(
                    "Who raised the error: `client` (the API, on a client error), `server` (a \
                     server error) or empty (routing and version negotiation)",
                ))
                .build(),
        )
        .into()
    }
}

impl ToSchema for ErrorCode {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ErrorCode")
    }
}

/// Magnum's error body.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MagnumError {
    #[schema(min_items = 1, max_items = 1)]
    pub errors: Vec<MagnumErrorItem>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MagnumErrorItem {
    /// Always empty, as Magnum sends it (the id is in `x-openstack-request-id`).
    pub request_id: String,
    pub code: ErrorCode,
    /// The HTTP status.
    pub status: u16,
    /// `detail` up to its first `.`, or the status' reason.
    pub title: String,
    pub detail: String,
    /// Always empty.
    #[schema(max_items = 0)]
    pub links: Vec<Link>,
}

impl MagnumError {
    pub fn new(status: u16, code: ErrorCode, title: &str, detail: &str) -> Self {
        MagnumError {
            errors: vec![MagnumErrorItem {
                request_id: String::new(),
                code,
                status,
                title: title.into(),
                detail: detail.into(),
                links: Vec::new(),
            }],
        }
    }
}

/// The 406 of a well-formed `OpenStack-API-Version` outside the supported range.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MicroversionError {
    #[schema(min_items = 1, max_items = 1)]
    pub errors: Vec<MicroversionErrorItem>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MicroversionErrorItem {
    /// `magnum.microversion-unsupported`.
    pub code: String,
    pub title: String,
    pub description: String,
    pub max_version: String,
    pub min_version: String,
    pub links: Vec<HelpLink>,
}

/// A link to documentation (`rel` before `href`, as Magnum orders it).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HelpLink {
    /// `help`.
    pub rel: String,
    pub href: String,
}

/// keystonemiddleware's error body (it answers before Magnum's error handling: 401, and 503
/// when Keystone cannot be reached).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuthError {
    pub error: AuthErrorItem,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuthErrorItem {
    /// The HTTP status.
    pub code: u16,
    /// The status' reason.
    pub title: String,
    pub message: String,
}

/// What a 406 carries: Magnum's error body (malformed version header, or an API the requested
/// version does not have) or the microversion body (a version outside the supported range).
#[derive(ToSchema)]
#[serde(untagged)]
pub enum NotAcceptableBody {
    Magnum(MagnumError),
    Microversion(MicroversionError),
}

/// What a 503 carries: keystonemiddleware's body (Keystone unreachable) or Magnum's (the
/// database or the management cluster unreachable). A request that outlives `[http]
/// request_timeout_secs` gets a 503 without a body.
#[derive(ToSchema)]
#[serde(untagged)]
pub enum UnavailableBody {
    Auth(AuthError),
    Magnum(MagnumError),
}

/// The answer of an accepted asynchronous cluster operation: the cluster's uuid.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UuidBody {
    pub uuid: uuid::Uuid,
}

// ---------------------------------------------------------------------------------------------
// Responses every operation of a kind shares

/// 400: a query argument or body the operation does not accept.
#[derive(IntoResponses)]
#[response(
    status = 400,
    description = "Invalid input: an unknown or invalid query argument, or a body the request \
                   parser or the operation's rules refuse"
)]
#[expect(dead_code, reason = "a response schema only")]
pub struct BadRequest(MagnumError);

/// 403: refused by policy.
#[derive(IntoResponses)]
#[response(status = 403, description = "Not allowed by policy")]
#[expect(dead_code, reason = "a response schema only")]
pub struct Forbidden(MagnumError);

/// 404: the resource (or a resource the request names) does not exist for the caller.
#[derive(IntoResponses)]
#[response(status = 404, description = "Not found")]
#[expect(dead_code, reason = "a response schema only")]
pub struct NotFound(MagnumError);

/// 409: a name matching several resources, or a state the operation conflicts with.
#[derive(IntoResponses)]
#[response(
    status = 409,
    description = "Conflict: the name matches several resources, or the resource's state does \
                   not allow the operation"
)]
#[expect(dead_code, reason = "a response schema only")]
pub struct Conflict(MagnumError);

// ---------------------------------------------------------------------------------------------
// Request bodies, from the domain's declarations

/// The largest integer a JSON body may carry (an `i64`).
const I64_MAX: i64 = i64::MAX;
/// The largest integer of the fields stored as 32-bit integers that refuse larger values.
const I32_MAX: i64 = i32::MAX as i64;
/// The largest integer a string form is documented up to: every 18-digit number fits an `i64`.
const STRING_INT_MAX: u64 = 999_999_999_999_999_999;

/// The integer fields, by body, whose values must fit 32 bits ("Value is too large" beyond).
const I32_FIELDS: &[(&str, &[&str])] = &[
    ("cluster", &["node_count", "master_count"]),
    ("cluster_resize_req", &["node_count"]),
    (
        "nodegroup",
        &["node_count", "min_node_count", "max_node_count"],
    ),
    ("quota", &["hard_limit"]),
];

fn nullable(t: Type, nullable: bool) -> SchemaType {
    if nullable {
        SchemaType::from_iter([t, Type::Null])
    } else {
        SchemaType::new(t)
    }
}

fn null_schema() -> Schema {
    Schema::Object(ObjectBuilder::new().schema_type(Type::Null).build())
}

/// `value` or null (as `oneOf`), for the fields whose schema is itself a `oneOf`.
fn one_of(variants: Vec<Schema>, nullable: bool, description: Option<String>) -> Schema {
    let mut b = OneOfBuilder::new().description(description);
    for v in variants {
        b = b.item(v);
    }
    if nullable {
        b = b.item(null_schema());
    }
    Schema::OneOf(b.build())
}

/// A pattern letter-case-insensitively matching `word` (`[Tt][Rr][Uu][Ee]`), without relying on
/// inline flags, which not every JSON Schema regex dialect has.
fn any_case(word: &str) -> String {
    word.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
            } else if c == '.' {
                // (`-` stays bare: an ECMA-262 pattern in Unicode mode refuses `\-` outside a class.)
                "\\.".to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The strings `oslo_utils.strutils.bool_from_string` reads (strict), any letter case.
pub fn bool_string_pattern() -> String {
    let words = [
        "1", "t", "true", "on", "y", "yes", "0", "f", "false", "off", "n", "no",
    ];
    let alternatives: Vec<String> = words.iter().map(|w| any_case(w)).collect();
    format!("^(?:{})$", alternatives.join("|"))
}

/// An exact regular expression (alternatives, no anchors) for the decimal numbers `lo..=hi`
/// written without leading zeros.
pub fn decimal_range(lo: u64, hi: u64) -> String {
    let mut alternatives = Vec::new();
    let mut lo = lo;
    while lo <= hi {
        let digits = lo.to_string().len();
        let top = if digits >= 20 {
            u64::MAX
        } else {
            10u64.pow(u32::try_from(digits).unwrap_or(19)) - 1
        };
        let end = top.min(hi);
        alternatives.extend(same_length(&lo.to_string(), &end.to_string()));
        if end == u64::MAX {
            break;
        }
        lo = end + 1;
    }
    alternatives.join("|")
}

/// Alternatives for the numbers between two decimal strings of the same length.
fn same_length(a: &str, b: &str) -> Vec<String> {
    let n = a.len();
    if n == 0 {
        return vec![String::new()];
    }
    if a == b {
        return vec![a.to_string()];
    }
    let (a0, ar) = a.split_at(1);
    let (b0, br) = b.split_at(1);
    let (a0, b0) = (a0.as_bytes()[0], b0.as_bytes()[0]);
    let any = |k: usize| match k {
        0 => String::new(),
        1 => "[0-9]".to_string(),
        k => format!("[0-9]{{{k}}}"),
    };
    let class = |lo: u8, hi: u8| {
        if lo == hi {
            (lo as char).to_string()
        } else {
            format!("[{}-{}]", lo as char, hi as char)
        }
    };
    if a0 == b0 {
        return same_length(ar, br)
            .into_iter()
            .map(|s| format!("{}{s}", a0 as char))
            .collect();
    }
    let rest = n - 1;
    let a_floor = ar.bytes().all(|c| c == b'0');
    let b_ceiling = br.bytes().all(|c| c == b'9');
    let mut out = Vec::new();
    let mid_lo = if a_floor { a0 } else { a0 + 1 };
    let mid_hi = if b_ceiling { b0 } else { b0 - 1 };
    if !a_floor {
        out.extend(
            same_length(ar, &"9".repeat(rest))
                .into_iter()
                .map(|s| format!("{}{s}", a0 as char)),
        );
    }
    if mid_lo <= mid_hi {
        out.push(format!("{}{}", class(mid_lo, mid_hi), any(rest)));
    }
    if !b_ceiling {
        out.extend(
            same_length(&"0".repeat(rest), br)
                .into_iter()
                .map(|s| format!("{}{s}", b0 as char)),
        );
    }
    out
}

/// An integer field of a JSON body: WSME converts with `int()`, so besides JSON integers it
/// takes decimal strings and booleans (as 0 and 1), each within the field's range.
fn int_schema(min: i64, max: i64, nullable: bool) -> Schema {
    let integer = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(min))
        .maximum(Some(max))
        .description(Some(
            "Written as an integer: `2.0` is refused, as WSME refuses it".to_string(),
        ))
        .build();
    let lo = u64::try_from(min.max(0)).unwrap_or(0);
    let hi = u64::try_from(max).unwrap_or(0).min(STRING_INT_MAX);
    let string = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!("^(?:{})$", decimal_range(lo, hi))))
        .description(Some("The integer in decimal".to_string()))
        .build();
    let mut variants = vec![Schema::Object(integer), Schema::Object(string)];
    let booleans: Vec<serde_json::Value> = [false, true]
        .into_iter()
        .filter(|b| (min..=max).contains(&i64::from(*b)))
        .map(serde_json::Value::Bool)
        .collect();
    if !booleans.is_empty() {
        variants.push(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::Boolean)
                .enum_values(Some(booleans))
                .description(Some("Read as 0 (false) and 1 (true)".to_string()))
                .build(),
        ));
    }
    one_of(variants, nullable, None)
}

/// A boolean field of a JSON body: a JSON boolean or a string `bool_from_string` reads.
fn bool_schema(nullable: bool) -> Schema {
    let string = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(bool_string_pattern()))
        .description(Some(
            "yes/no, true/false, on/off, y/n, t/f, 1/0 in any letter case".to_string(),
        ))
        .build();
    one_of(
        vec![
            Schema::Object(ObjectBuilder::new().schema_type(Type::Boolean).build()),
            Schema::Object(string),
        ],
        nullable,
        None,
    )
}

/// Text without U+0000, which PostgreSQL cannot store (such a request is refused with 400).
pub const NO_NUL: &str = "^[^\\u0000]*$";

/// A string without NUL.
fn text() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(NO_NUL))
}

fn string_schema(min: usize, max: usize, nullable_: bool) -> ObjectBuilder {
    text()
        .schema_type(nullable(Type::String, nullable_))
        .min_length(Some(min))
        .max_length(Some(max))
}

/// A taint as the nodegroup rules accept it.
fn taint_schema() -> Schema {
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("key", string_schema(1, usize::MAX, false).max_length(None))
            .required("key")
            .property("value", text().schema_type(nullable(Type::String, true)))
            .property(
                "effect",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(TAINT_EFFECTS)),
            )
            .required("effect")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .build(),
    )
}

/// The schema of one field of a POST body, as `domain::fields::check` accepts it.
fn field_schema(f: &Field, max_int: i64) -> Schema {
    let n = !f.mandatory;
    match f.kind {
        Kind::Str { min, max } => Schema::Object(string_schema(min, max, n).build()),
        Kind::ClusterName => Schema::Object(
            string_schema(1, 242, n)
                .pattern(Some(CLUSTER_NAME_PATTERN))
                .build(),
        ),
        Kind::Int { min, max } => int_schema(
            min.unwrap_or(i64::MIN),
            max.unwrap_or(I64_MAX).min(max_int),
            n,
        ),
        Kind::Bool => bool_schema(n),
        Kind::Enum(values) => {
            let mut v: Vec<serde_json::Value> = values.iter().map(|s| (*s).into()).collect();
            if n {
                v.push(serde_json::Value::Null);
            }
            Schema::Object(
                ObjectBuilder::new()
                    .schema_type(nullable(Type::String, n))
                    .enum_values(Some(v))
                    .build(),
            )
        }
        Kind::Labels => Schema::Object(
            ObjectBuilder::new()
                .schema_type(nullable(Type::Object, n))
                .property_names(Some(text().build()))
                .additional_properties(Some(Schema::Object(
                    text()
                        .schema_type(SchemaType::from_iter([
                            Type::String,
                            Type::Number,
                            Type::Boolean,
                        ]))
                        .build(),
                )))
                .description(Some(
                    "Values are stored as strings (numbers and booleans as Python prints them)"
                        .to_string(),
                ))
                .build(),
        ),
        Kind::StrDict => Schema::Object(
            ObjectBuilder::new()
                .schema_type(nullable(Type::Object, n))
                .property_names(Some(text().build()))
                .additional_properties(Some(Schema::Object(text().build())))
                .build(),
        ),
        Kind::StrList => Schema::Array(
            ArrayBuilder::new()
                .schema_type(nullable(Type::Array, n))
                .items(text())
                .build(),
        ),
        Kind::Taints => Schema::Array(
            ArrayBuilder::new()
                .schema_type(nullable(Type::Array, n))
                .items(RefOr::T(taint_schema()))
                .build(),
        ),
        Kind::Ignored => Schema::Object(
            ObjectBuilder::new()
                .schema_type(SchemaType::AnyValue)
                .description(Some("Accepted and ignored".to_string()))
                .build(),
        ),
    }
}

/// A POST body: the declaration's writable fields (read-only and unknown ones are refused),
/// its mandatory fields required and non-null.
pub fn body_schema(d: &Declaration, description: &str) -> Schema {
    let i32_fields = I32_FIELDS
        .iter()
        .find(|(arg, _)| *arg == d.arg)
        .map_or(&[][..], |(_, f)| *f);
    let mut object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
        .additional_properties(Some(AdditionalProperties::FreeForm(false)));
    for f in d.fields.iter().filter(|f| !f.readonly) {
        let max = if i32_fields.contains(&f.name) {
            I32_MAX
        } else {
            I64_MAX
        };
        object = object.property(f.name, field_schema(f, max));
        if f.mandatory {
            object = object.required(f.name);
        }
    }
    Schema::Object(object.build())
}

/// Declares a request-body schema type whose schema is derived from a domain declaration.
macro_rules! request_body {
    ($(#[doc = $doc:literal])* $name:ident, $decl:expr) => {
        $(#[doc = $doc])*
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                body_schema(&$decl, concat!($($doc, "\n"),*).trim()).into()
            }
        }

        impl ToSchema for $name {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
        }
    };
}

request_body!(
    /// A new cluster template. Besides the types below: `network_driver` must be one of
    /// flannel, calico, cilium (and allowed by `[api] allowed_network_drivers`), `volume_driver`
    /// cinder, `dns_nameserver` comma-separated IPv4 addresses, `devicemapper` storage needs a
    /// `docker_volume_size` of at least 3, `public`/`hidden` need the publish permission, and
    /// the backend checks the labels (e.g. `kube_tag`) and the image.
    ClusterTemplateCreate,
    schemas::TEMPLATE
);

request_body!(
    /// A new cluster. Besides the types below: the template must exist (400 below 1.10, 404
    /// from 1.10), `master_count` must be odd and 1 unless the load balancer is enabled,
    /// `node_count` 0 needs 1.10, and the project's quota must allow one more cluster (403).
    ClusterCreate,
    schemas::CLUSTER
);

request_body!(
    /// A new worker nodegroup (API ≥ 1.9). Besides the types below: `min_node_count` ≤
    /// `node_count` ≤ `max_node_count`, no `kubernetes.io`/`k8s.io` node labels, a unique name,
    /// and a cluster whose API is up (409 otherwise); `role: master` is refused.
    NodeGroupCreate,
    schemas::NODEGROUP
);

request_body!(
    /// A project's quota (admin). The project must exist in Keystone (404).
    QuotaCreate,
    schemas::QUOTA
);

request_body!(
    /// The new hard limit of a quota (admin).
    QuotaUpdate,
    schemas::QUOTA_UPDATE
);

request_body!(
    /// A resize of the default worker nodegroup, or of `nodegroup` (API ≥ 1.7).
    ClusterResize,
    schemas::RESIZE
);

request_body!(
    /// An upgrade to `cluster_template` (API ≥ 1.7).
    ClusterUpgrade,
    schemas::UPGRADE
);

request_body!(
    /// A CSR to sign with the cluster's CA. `ca_cert_type` is one of kubernetes (default),
    /// etcd, front_proxy, front-proxy; the cluster must exist (400 otherwise) and the CSR be a
    /// valid PEM certificate request.
    CertificateSign,
    schemas::CERTIFICATE
);

/// One RFC 6902 operation of Magnum's JSON-PATCH dialect.
pub struct PatchOperation;

impl PartialSchema for PatchOperation {
    fn schema() -> RefOr<Schema> {
        let path = || {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^(/[\\w-]+)+$"))
        };
        let value = || {
            text()
                .schema_type(SchemaType::from_iter([
                    Type::String,
                    Type::Integer,
                    Type::Boolean,
                    Type::Null,
                ]))
                .description(Some(
                    "On dict attributes (labels, node_labels, ...) a string holding a Python dict \
                     literal",
                ))
        };
        let add_or_replace = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "op",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["add", "replace"])),
            )
            .required("op")
            .property("path", path())
            .required("path")
            .property("value", value())
            .required("value")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)));
        let remove = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "op",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["remove"])),
            )
            .required("op")
            .property("path", path())
            .required("path")
            .property("value", value())
            .additional_properties(Some(AdditionalProperties::FreeForm(false)));
        Schema::OneOf(
            OneOfBuilder::new()
                .item(add_or_replace)
                .item(remove)
                .description(Some("add and replace need a `value`; remove ignores it"))
                .build(),
        )
        .into()
    }
}

impl ToSchema for PatchOperation {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("PatchOperation")
    }
}

/// A JSON-PATCH document: which paths an operation may touch and what the patched resource must
/// satisfy is the operation's rule (400, or 409 for nodegroups).
pub struct JsonPatch;

impl PartialSchema for JsonPatch {
    fn schema() -> RefOr<Schema> {
        Schema::Array(
            ArrayBuilder::new()
                .items(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "PatchOperation",
                )))
                .description(Some(
                    "RFC 6902 operations: add, replace, remove; internal attributes (uuid, \
                     links, timestamps, ...) cannot be patched",
                ))
                .build(),
        )
        .into()
    }

    // The referenced item schema.
}

impl ToSchema for JsonPatch {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("JsonPatch")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((PatchOperation::name().into(), PatchOperation::schema()));
    }
}

// ---------------------------------------------------------------------------------------------
// Parameters

/// The microversion header pattern: `container-infra 1.N` (any of the service's three names, any
/// letter case) for `min_minor` ≤ N ≤ the maximum, or `latest` after any service name.
pub fn version_pattern(min_minor: u32) -> String {
    let service = format!(
        "{}(?:{}(?:{})?)?",
        any_case("container-infra"),
        any_case("structure"),
        any_case("-management")
    );
    let max = crate::domain::version::MAX_VERSION.minor;
    format!(
        "^(?:[!-~]+[ \\t]+{}|{service}[ \\t]+1\\.(?:{}))$",
        any_case("latest"),
        decimal_range(u64::from(min_minor), u64::from(max))
    )
}

/// The `OpenStack-API-Version` request header of an operation available from `1.MIN` (required
/// when above 1.1: without it the request is 1.1).
pub struct MinVersion<const MIN: u32>;

/// The header parameter of [`MinVersion`].
pub fn version_header(min_minor: u32) -> Parameter {
    let max = crate::domain::version::MAX_VERSION;
    let description = if min_minor > 1 {
        format!(
            "`container-infra 1.N` with {min_minor} ≤ N ≤ {}, or `container-infra latest`. \
             The operation does not exist before 1.{min_minor} (406).",
            max.minor
        )
    } else {
        format!(
            "`container-infra 1.N` with 1 ≤ N ≤ {}, or `container-infra latest`; without it, 1.1. \
             The other accepted service names are `container-infrastructure` and \
             `container-infrastructure-management`.",
            max.minor
        )
    };
    ParameterBuilder::new()
        .name("OpenStack-API-Version")
        .parameter_in(ParameterIn::Header)
        .required(if min_minor > 1 {
            Required::True
        } else {
            Required::False
        })
        .description(Some(description))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(version_pattern(min_minor)))
                .examples([format!("container-infra 1.{}", max.minor)]),
        ))
        .build()
}

impl<const MIN: u32> IntoParams for MinVersion<MIN> {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![version_header(MIN)]
    }
}

fn query(name: &str, description: &str, schema: impl Into<RefOr<Schema>>) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

fn int_param(min: i64) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(min))
        .maximum(Some(I64_MAX))
        .build()
}

fn enum_param(values: &[&str]) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

/// A query argument `bool_from_string` reads.
pub fn bool_param(name: &str, description: &str) -> Parameter {
    query(
        name,
        description,
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(bool_string_pattern()))
            .examples(["true", "false"]),
    )
}

/// `limit`, `sort_key`, `sort_dir` of every collection.
fn page_params(sort_keys: &[&str]) -> Vec<Parameter> {
    vec![
        query(
            "limit",
            "Page size, capped at `[api] max_limit`",
            int_param(1),
        ),
        query(
            "sort_key",
            "Column to sort by (default `id`)",
            enum_param(sort_keys),
        ),
        query(
            "sort_dir",
            "Sort direction (default `asc`)",
            enum_param(&["asc", "desc"]),
        ),
    ]
}

/// The query of a collection paged by a uuid marker.
fn uuid_page_params(what: &str, sort_keys: &[&str]) -> Vec<Parameter> {
    let mut p = vec![query(
        "marker",
        &format!("UUID of the last {what} of the previous page (404 when there is none)"),
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid))),
    )];
    p.extend(page_params(sort_keys));
    p
}

/// The query of `GET /v1/clustertemplates` and `/detail`.
pub struct TemplateListQuery;

impl IntoParams for TemplateListQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        uuid_page_params("template", &crate::service::templates::SORT_KEYS)
    }
}

/// The query of `GET /v1/clusters` and `/detail`.
pub struct ClusterListQuery;

impl IntoParams for ClusterListQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        uuid_page_params("cluster", crate::service::clusters::SORT_KEYS)
    }
}

/// The query of `GET /v1/clusters/{ident}/nodegroups`.
pub struct NodegroupListQuery;

impl IntoParams for NodegroupListQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let mut p = uuid_page_params("nodegroup", crate::service::nodegroups::SORT_KEYS);
        p.push(query(
            "role",
            "Only nodegroups of this role",
            ObjectBuilder::new().schema_type(Type::String),
        ));
        p
    }
}

/// The query of `GET /v1/quotas`.
pub struct QuotaListQuery;

impl IntoParams for QuotaListQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let mut p = vec![query(
            "marker",
            "Integer id of the last quota of the previous page (404 when there is none)",
            int_param(i64::MIN),
        )];
        p.extend(page_params(crate::service::misc::QUOTA_SORT_KEYS));
        p.push(bool_param(
            "all_tenants",
            "Every project's quotas (admins; others see their own)",
        ));
        p
    }
}

/// `ca_cert_type` of `GET /v1/certificates/{ident}`.
pub struct CaCertTypeQuery;

impl IntoParams for CaCertTypeQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![query(
            "ca_cert_type",
            "Which CA (default kubernetes)",
            enum_param(&["kubernetes", "etcd", "front_proxy", "front-proxy"]),
        )]
    }
}

/// The query of `GET /v1/stats`.
pub struct StatsQuery;

impl IntoParams for StatsQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            query(
                "project_id",
                "The project to count (admins: any; others: their own)",
                ObjectBuilder::new().schema_type(Type::String),
            ),
            query(
                "type",
                "Only `cluster` (any letter case)",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(format!("^{}$", any_case("cluster")))),
            ),
        ]
    }
}

/// `rollback` of `PATCH /v1/clusters/{ident}`.
pub struct RollbackQuery;

impl IntoParams for RollbackQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![bool_param(
            "rollback",
            "Accepted from 1.3 and ignored (below 1.3 an unknown argument: 400)",
        )]
    }
}

// ---------------------------------------------------------------------------------------------
// Operators' documents

/// `/readyz`: every dependency check and its outcome (`service::operating::Readiness`).
#[derive(ToSchema)]
#[schema(as = Readiness)]
#[expect(dead_code, reason = "a schema only: the service serialises Readiness")]
pub struct ReadinessSchema {
    /// `ok` or `failed`.
    status: String,
    checks: Vec<CheckSchema>,
}

/// One readiness check (`driver::Check`).
#[derive(ToSchema)]
#[schema(as = Check)]
#[expect(dead_code, reason = "a schema only: the service serialises Check")]
pub struct CheckSchema {
    name: String,
    ok: bool,
    /// What was found, or why it failed.
    detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, s: &str) -> bool {
        jsonschema::is_valid(
            &serde_json::json!({"type": "string", "pattern": pattern}),
            &serde_json::json!(s),
        )
    }

    #[test]
    fn decimal_ranges_are_exact() {
        for (lo, hi) in [
            (0, 14),
            (1, 14),
            (9, 14),
            (1024, 65535),
            (0, 2147483647),
            (7, 7),
        ] {
            let p = format!("^(?:{})$", decimal_range(lo, hi));
            for n in [
                0, 1, 5, 9, 10, 13, 14, 15, 99, 1023, 1024, 1099, 65535, 65536,
            ] {
                assert_eq!(
                    matches(&p, &n.to_string()),
                    (lo..=hi).contains(&n),
                    "{n} in {lo}..={hi}: {p}"
                );
            }
            for s in ["", "01", "1a", "-1", " 1"] {
                assert!(!matches(&p, s), "{s:?} matched {p}");
            }
        }
    }

    #[test]
    fn the_version_pattern_is_what_the_header_parser_accepts() {
        let any = version_pattern(1);
        let from_9 = version_pattern(9);
        // (header, accepted by an operation available from 1.9)
        for (header, gated_ok) in [
            ("container-infra 1.9", true),
            ("container-infra 1.14", true),
            ("container-infra 1.1", false),
            ("Container-Infrastructure-Management 1.8", false),
            ("CONTAINER-INFRASTRUCTURE\t1.10", true),
            ("whatever latest", true),
            ("x LaTeSt", true),
        ] {
            assert!(
                crate::api::microversion::parse(Some(header)).is_ok(),
                "{header}"
            );
            assert!(matches(&any, header), "{header}");
            assert_eq!(matches(&from_9, header), gated_ok, "{header}");
        }
        for header in [
            "container-infra 1.15",
            "container-infra 1.0",
            "container-infra 2.1",
            "compute 1.2",
            "1.2",
            "container-infra",
            "container-infra 1.2 x",
        ] {
            assert!(
                crate::api::microversion::parse(Some(header)).is_err(),
                "{header}"
            );
            assert!(!matches(&any, header), "{header}");
        }
    }

    #[test]
    fn the_bool_pattern_is_what_bool_from_string_reads() {
        let p = bool_string_pattern();
        for s in ["true", "FALSE", "Yes", "n", "1", "0", "oN", "OFF", "t", "F"] {
            assert!(crate::domain::fields::bool_from_string(s).is_some());
            assert!(matches(&p, s), "{s}");
        }
        for s in ["2", "yess", "", "nope", "tru"] {
            assert!(crate::domain::fields::bool_from_string(s).is_none());
            assert!(!matches(&p, s), "{s}");
        }
    }

    #[test]
    fn request_bodies_require_the_mandatory_fields_and_refuse_read_only_ones() {
        let RefOr::T(Schema::Object(o)) = ClusterCreate::schema() else {
            panic!("an object schema")
        };
        assert_eq!(o.required, vec!["cluster_template_id".to_string()]);
        assert!(o.properties.contains_key("node_count"));
        assert!(!o.properties.contains_key("api_address"));
        assert!(matches!(
            o.additional_properties.as_deref(),
            Some(AdditionalProperties::FreeForm(false))
        ));
    }
}
