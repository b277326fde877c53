//! Prometheus metrics: the one process-wide recorder, every metric's name and help text, and the
//! small helpers the layers call to count what they do. Rendering happens in `api` (`/metrics`);
//! gauges that are facts of the database (queue depth, clusters by status) are set just before.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const HTTP_REQUESTS: &str = "magnum_capi_http_requests_total";
pub const HTTP_DURATION: &str = "magnum_capi_http_request_duration_seconds";
pub const OPERATIONS: &str = "magnum_capi_operations_total";
pub const OPERATION_ATTEMPTS: &str = "magnum_capi_operation_attempts_total";
pub const QUEUE_DEPTH: &str = "magnum_capi_operation_queue_depth";
pub const QUEUE_OLDEST: &str = "magnum_capi_operation_oldest_pending_seconds";
pub const CLUSTERS: &str = "magnum_capi_clusters";
pub const CLUSTERS_HEALTH: &str = "magnum_capi_clusters_health";
pub const WATCH_EVENTS: &str = "magnum_capi_watch_events_total";
pub const WATCH_RESYNCS: &str = "magnum_capi_watch_resyncs_total";
pub const STATUS_DELAY: &str = "magnum_capi_status_write_delay_seconds";
pub const STATUS_WRITER: &str = "magnum_capi_status_writer_leader";
pub const OPENSTACK_REQUESTS: &str = "magnum_capi_openstack_requests_total";
pub const OPENSTACK_DURATION: &str = "magnum_capi_openstack_request_duration_seconds";
pub const CREATE_STAGE: &str = "magnum_capi_create_stage_seconds";
pub const TOKEN_CACHE: &str = "magnum_capi_token_cache_total";
pub const VIEW_CACHE: &str = "magnum_capi_view_cache_total";
pub const APP_CREDENTIALS: &str = "magnum_capi_app_credentials_total";
pub const APP_CREDENTIALS_LEFTOVER: &str = "magnum_capi_app_credentials_leftover";
pub const READY: &str = "magnum_capi_ready";
pub const MANAGEMENT_CLUSTER_UP: &str = "magnum_capi_management_cluster_up";
pub const MANAGEMENT_CLUSTER_CLUSTERS: &str = "magnum_capi_management_cluster_clusters";
/// openstack-exporter's container-infra families ([`container_infra`]).
pub const INFRA_UP: &str = "openstack_container_infra_up";
pub const INFRA_TOTAL: &str = "openstack_container_infra_total_clusters";
pub const INFRA_MASTERS: &str = "openstack_container_infra_cluster_masters";
pub const INFRA_NODES: &str = "openstack_container_infra_cluster_nodes";
pub const INFRA_STATUS: &str = "openstack_container_infra_cluster_status";

/// Every family `/metrics` may serve: ours, then openstack-exporter's container-infra ones
/// ([`container_infra`]). Histograms add `_bucket`, `_sum` and `_count`.
pub const FAMILIES: [&str; 27] = [
    HTTP_REQUESTS,
    HTTP_DURATION,
    OPERATIONS,
    OPERATION_ATTEMPTS,
    QUEUE_DEPTH,
    QUEUE_OLDEST,
    CLUSTERS,
    CLUSTERS_HEALTH,
    WATCH_EVENTS,
    WATCH_RESYNCS,
    STATUS_DELAY,
    STATUS_WRITER,
    OPENSTACK_REQUESTS,
    OPENSTACK_DURATION,
    CREATE_STAGE,
    TOKEN_CACHE,
    VIEW_CACHE,
    APP_CREDENTIALS,
    APP_CREDENTIALS_LEFTOVER,
    READY,
    MANAGEMENT_CLUSTER_UP,
    MANAGEMENT_CLUSTER_CLUSTERS,
    INFRA_UP,
    INFRA_TOTAL,
    INFRA_MASTERS,
    INFRA_NODES,
    INFRA_STATUS,
];
/// The families of [`FAMILIES`] that are histograms.
pub const HISTOGRAMS: [&str; 4] = [
    HTTP_DURATION,
    STATUS_DELAY,
    OPENSTACK_DURATION,
    CREATE_STAGE,
];

/// Request-latency buckets (seconds): API calls are milliseconds; OpenStack calls up to seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];
/// Create stages (seconds): most take well under a millisecond.
const STAGE_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];
/// Status-write delays (seconds): the target is well under one second.
const DELAY_BUCKETS: [f64; 9] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 30.0];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's recorder, installed on first use (every metric call before that is dropped,
/// as the `metrics` facade does without a recorder). `None` if another recorder was installed.
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(STATUS_DELAY.into()), &DELAY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(CREATE_STAGE.into()), &STAGE_BUCKETS)
                })
                .and_then(|b| b.set_buckets(&BUCKETS));
            let recorder = match builder {
                Ok(b) => b.build_recorder(),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics disabled");
                    return None;
                }
            };
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics is empty");
                return None;
            }
            describe();
            Some(handle)
        })
        .as_ref()
}

fn describe() {
    describe_counter!(
        HTTP_REQUESTS,
        "API requests by route template, method and status."
    );
    describe_histogram!(
        HTTP_DURATION,
        metrics::Unit::Seconds,
        "API request latency."
    );
    describe_counter!(
        OPERATIONS,
        "Cluster operations ended, by kind and outcome (done, retry, failed, lease_lost, interrupted)."
    );
    describe_counter!(
        OPERATION_ATTEMPTS,
        "Cluster operation attempts started, by kind."
    );
    describe_gauge!(QUEUE_DEPTH, "Operations pending or running.");
    describe_gauge!(
        QUEUE_OLDEST,
        metrics::Unit::Seconds,
        "Age of the oldest pending operation."
    );
    describe_gauge!(CLUSTERS, "Clusters by status.");
    describe_gauge!(CLUSTERS_HEALTH, "Clusters by health status.");
    describe_counter!(WATCH_EVENTS, "Management-cluster watch events, by kind.");
    describe_counter!(WATCH_RESYNCS, "Watch restarts (relists), by kind.");
    describe_histogram!(
        STATUS_DELAY,
        metrics::Unit::Seconds,
        "Delay from a management-cluster change to the status written in PostgreSQL."
    );
    describe_gauge!(
        STATUS_WRITER,
        "1 while this replica holds the status-writer lock."
    );
    describe_counter!(
        OPENSTACK_REQUESTS,
        "Keystone, Glance, Nova, Neutron, Octavia and Cinder calls, by service and outcome."
    );
    describe_histogram!(
        OPENSTACK_DURATION,
        metrics::Unit::Seconds,
        "OpenStack call latency."
    );
    describe_histogram!(
        CREATE_STAGE,
        metrics::Unit::Seconds,
        "Time of each stage of a cluster create's request, by stage (template, lookups, validate, seal, record; moved: a try discarded because its template had changed meanwhile, tried again)."
    );
    describe_counter!(
        TOKEN_CACHE,
        "Keystone token validations by cache result (hit, miss)."
    );
    describe_counter!(
        VIEW_CACHE,
        "Cluster and template reads by serialised-view cache result (hit, miss, bypass, behind: the listener had not caught up with the committed change position)."
    );
    describe_counter!(
        APP_CREDENTIALS,
        "Application-credential events: created, rotated, rotation_failed, leftover, orphan_deleted."
    );
    describe_gauge!(
        APP_CREDENTIALS_LEFTOVER,
        "Credentials waiting to be deleted again."
    );
    describe_gauge!(READY, "1 when the last readiness check passed, by check.");
    describe_gauge!(
        MANAGEMENT_CLUSTER_UP,
        "1 when the management cluster's API answered its last probe."
    );
    describe_gauge!(
        MANAGEMENT_CLUSTER_CLUSTERS,
        "Clusters by management cluster and status."
    );
}

pub fn http_request(method: &str, route: &str, status: u16, took: Duration) {
    let labels = [
        ("method", method.to_string()),
        ("route", route.to_string()),
        ("status", status.to_string()),
    ];
    counter!(HTTP_REQUESTS, &labels).increment(1);
    histogram!(HTTP_DURATION, "method" => method.to_string(), "route" => route.to_string())
        .record(took.as_secs_f64());
}

pub fn operation_attempt(kind: &str) {
    counter!(OPERATION_ATTEMPTS, "kind" => kind.to_string()).increment(1);
}

pub fn operation_outcome(kind: &str, outcome: &'static str) {
    counter!(OPERATIONS, "kind" => kind.to_string(), "outcome" => outcome).increment(1);
}

pub fn queue(depth: i64, oldest_secs: f64) {
    gauge!(QUEUE_DEPTH).set(depth as f64);
    gauge!(QUEUE_OLDEST).set(oldest_secs);
}

/// Sets `family{label=value}` for every value, zeroing the values seen before that are gone.
pub fn by_label(
    family: &'static str,
    label: &'static str,
    counts: &[(String, i64)],
    known: &[&str],
) {
    for k in known {
        if !counts.iter().any(|(v, _)| v == k) {
            gauge!(family, label => k.to_string()).set(0.0);
        }
    }
    for (v, n) in counts {
        gauge!(family, label => v.clone()).set(*n as f64);
    }
}

pub fn watch_event(kind: &'static str) {
    counter!(WATCH_EVENTS, "kind" => kind).increment(1);
}

pub fn watch_resync(kind: &'static str) {
    counter!(WATCH_RESYNCS, "kind" => kind).increment(1);
}

pub fn status_delay(took: Duration) {
    histogram!(STATUS_DELAY).record(took.as_secs_f64());
}

/// [`status_writer`] of management cluster `name` (labelled unless it is the unnamed one).
pub fn status_writer_of(name: &str, leader: bool) {
    if name.is_empty() {
        return status_writer(leader);
    }
    gauge!(STATUS_WRITER, "management_cluster" => name.to_string()).set(if leader {
        1.0
    } else {
        0.0
    });
}

/// Whether management cluster `name` answered its last probe.
pub fn management_cluster_up(name: &str, up: bool) {
    gauge!(MANAGEMENT_CLUSTER_UP, "management_cluster" => name.to_string()).set(if up {
        1.0
    } else {
        0.0
    });
}

/// Clusters per management cluster and status.
pub fn management_cluster_clusters(counts: &[(String, String, i64)]) {
    for (name, status, n) in counts {
        gauge!(MANAGEMENT_CLUSTER_CLUSTERS, "management_cluster" => crate::domain::placement::shown(name).to_string(),
               "status" => status.clone())
        .set(*n as f64);
    }
}

pub fn status_writer(leader: bool) {
    gauge!(STATUS_WRITER).set(if leader { 1.0 } else { 0.0 });
}

pub fn openstack_call(service: &str, ok: bool, took: Duration) {
    let outcome = if ok { "ok" } else { "error" };
    counter!(OPENSTACK_REQUESTS, "service" => service.to_string(), "outcome" => outcome)
        .increment(1);
    histogram!(OPENSTACK_DURATION, "service" => service.to_string()).record(took.as_secs_f64());
}

/// One stage of a cluster create's request (`service::clusters::create`): `template` (the body
/// checked, the template read, the cluster planned), `lookups` (Glance, Nova and Neutron, beside
/// placement), `validate` (the driver's values document), `seal` (the caller's token) or
/// `record` (the rows and the operation committed).
pub fn create_stage(stage: &'static str, took: Duration) {
    histogram!(CREATE_STAGE, "stage" => stage).record(took.as_secs_f64());
}

pub fn token_cache(hit: bool) {
    counter!(TOKEN_CACHE, "result" => if hit { "hit" } else { "miss" }).increment(1);
}

pub fn view_cache(result: &'static str) {
    counter!(VIEW_CACHE, "result" => result).increment(1);
}

pub fn app_credential(event: &'static str, n: u64) {
    counter!(APP_CREDENTIALS, "event" => event).increment(n);
}

pub fn leftover_credentials(n: i64) {
    gauge!(APP_CREDENTIALS_LEFTOVER).set(n as f64);
}

/// The JSON log subscriber of `[log] format = "json"`: one object per line, with the fields of
/// the current span and its parents (the request id; the operation, its cluster and request id).
pub fn json_subscriber<W>(
    filter: tracing_subscriber::EnvFilter,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_writer(writer)
        .finish()
}

pub fn ready(check: &str, ok: bool) {
    gauge!(READY, "check" => check.to_string()).set(if ok { 1.0 } else { 0.0 });
}

/// One cluster as [`container_infra`] exports it.
#[derive(Debug, Clone, Copy)]
pub struct InfraCluster<'a> {
    pub uuid: uuid::Uuid,
    pub name: &'a str,
    pub stack_id: &'a str,
    pub status: &'a str,
    pub project_id: &'a str,
    pub node_count: i64,
    pub master_count: i64,
}

/// The number openstack-exporter's `openstack_container_infra_cluster_status` gives each Magnum
/// status (its position in this list; -1 for a status not in it), so its dashboards' and alerts'
/// thresholds mean the same here.
const EXPORTER_STATUS_CODES: [&str; 18] = [
    "CREATE_COMPLETE",
    "CREATE_FAILED",
    "CREATE_IN_PROGRESS",
    "UPDATE_IN_PROGRESS",
    "UPDATE_FAILED",
    "UPDATE_COMPLETE",
    "DELETE_IN_PROGRESS",
    "DELETE_FAILED",
    "DELETE_COMPLETE",
    "RESUME_COMPLETE",
    "RESUME_FAILED",
    "RESTORE_COMPLETE",
    "ROLLBACK_IN_PROGRESS",
    "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE",
    "SNAPSHOT_COMPLETE",
    "CHECK_COMPLETE",
    "ADOPT_COMPLETE",
];

/// The status code of `status` under openstack-exporter's numbering.
pub fn exporter_status_code(status: &str) -> i64 {
    EXPORTER_STATUS_CODES
        .iter()
        .position(|s| *s == status)
        .and_then(|i| i64::try_from(i).ok())
        .unwrap_or(-1)
}

/// A label value in the text exposition format (backslash, double quote and newline escaped).
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The container-infra families of openstack-exporter, with its names, label sets and values, for
/// every cluster (Prometheus text): `openstack_container_infra_up` (0 when the clusters could not
/// be read), `…_total_clusters`, and per cluster `…_cluster_status` (the status code),
/// `…_cluster_masters` and `…_cluster_nodes`. Dashboards and alerts written for openstack-exporter
/// in front of Magnum work unchanged on magnum-capi's `/metrics`.
pub fn container_infra(clusters: Option<&[InfraCluster<'_>]>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    // One family: its HELP and TYPE lines, then a sample per (labels, value).
    let mut family = |name: &str, help: &str, samples: &mut dyn Iterator<Item = (String, i64)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in samples {
            let braces = if labels.is_empty() {
                String::new()
            } else {
                format!("{{{labels}}}")
            };
            let _ = writeln!(out, "{name}{braces} {value}");
        }
    };
    family(
        INFRA_UP,
        "1 when the clusters were read for this scrape (openstack-exporter's name).",
        &mut std::iter::once((String::new(), i64::from(clusters.is_some()))),
    );
    let Some(clusters) = clusters else {
        return out;
    };
    family(
        INFRA_TOTAL,
        "Clusters, every project's.",
        &mut std::iter::once((
            String::new(),
            i64::try_from(clusters.len()).unwrap_or(i64::MAX),
        )),
    );
    // openstack-exporter's label set of each per-cluster family: the four every one has, then
    // the other count (or both, for the status), then the project.
    let labels = |c: &InfraCluster<'_>, counts: &str| {
        format!(
            "uuid=\"{}\",name=\"{}\",stack_id=\"{}\",status=\"{}\",{counts}project_id=\"{}\"",
            c.uuid,
            label_value(c.name),
            label_value(c.stack_id),
            label_value(c.status),
            label_value(c.project_id)
        )
    };
    family(
        INFRA_MASTERS,
        "A cluster's control-plane node count.",
        &mut clusters.iter().map(|c| {
            (
                labels(c, &format!("node_count=\"{}\",", c.node_count)),
                c.master_count,
            )
        }),
    );
    family(
        INFRA_NODES,
        "A cluster's worker node count.",
        &mut clusters.iter().map(|c| {
            (
                labels(c, &format!("master_count=\"{}\",", c.master_count)),
                c.node_count,
            )
        }),
    );
    family(
        INFRA_STATUS,
        "A cluster's status as openstack-exporter numbers it (CREATE_COMPLETE 0, CREATE_FAILED 1, CREATE_IN_PROGRESS 2, UPDATE_IN_PROGRESS 3, UPDATE_FAILED 4, UPDATE_COMPLETE 5, DELETE_IN_PROGRESS 6, DELETE_FAILED 7, …; -1 for others); the status is also a label.",
        &mut clusters.iter().map(|c| {
            let counts = format!(
                "node_count=\"{}\",master_count=\"{}\",",
                c.node_count, c.master_count
            );
            (labels(c, &counts), exporter_status_code(c.status))
        }),
    );
    out
}

#[cfg(test)]
mod container_infra_tests {
    use super::*;

    #[test]
    fn exporter_families_labels_and_codes() {
        let c = InfraCluster {
            uuid: "273c39d5-fa17-4372-b6b1-93a572de2cef".parse().unwrap(),
            name: "k8s \"a\"\\b\nc",
            stack_id: "31c1",
            status: "CREATE_FAILED",
            project_id: "p1",
            node_count: 3,
            master_count: 1,
        };
        let text = container_infra(Some(&[c]));
        assert!(text.contains("openstack_container_infra_up 1\n"), "{text}");
        assert!(
            text.contains("openstack_container_infra_total_clusters 1\n"),
            "{text}"
        );
        let labels = "uuid=\"273c39d5-fa17-4372-b6b1-93a572de2cef\",name=\"k8s \\\"a\\\"\\\\b\\nc\",stack_id=\"31c1\",status=\"CREATE_FAILED\"";
        assert!(
            text.contains(&format!(
                "openstack_container_infra_cluster_status{{{labels},node_count=\"3\",master_count=\"1\",project_id=\"p1\"}} 1\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "openstack_container_infra_cluster_masters{{{labels},node_count=\"3\",project_id=\"p1\"}} 1\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "openstack_container_infra_cluster_nodes{{{labels},master_count=\"1\",project_id=\"p1\"}} 3\n"
            )),
            "{text}"
        );
        assert_eq!(exporter_status_code("CREATE_COMPLETE"), 0);
        assert_eq!(exporter_status_code("ADOPT_COMPLETE"), 17);
        assert_eq!(exporter_status_code("NOT_A_STATUS"), -1);
        assert_eq!(
            container_infra(None),
            "# HELP openstack_container_infra_up 1 when the clusters were read for this scrape (openstack-exporter's name).\n# TYPE openstack_container_infra_up gauge\nopenstack_container_infra_up 0\n"
        );
    }
}
