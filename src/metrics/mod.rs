//! Metrics: one process-wide registry, rendered in the OpenMetrics text format on a
//! separate port (`--metrics-listen`, path `/metrics`) for Prometheus to scrape. RPCs
//! that tonic refuses before a handler runs (too large, malformed, unauthenticated) are
//! counted too. The same port answers `/livez` (200 while the process serves) and
//! `/readyz` (200 while grpc.health.v1 says SERVING, else 503), for HTTP probes.
//!
//! Every metric is registered in `Metrics::new`; `docs/metrics.md` lists them (name,
//! type, labels, help), generated from this registry's own rendering by `tests/docs.rs`,
//! which fails when the page is stale. What each label's values are is told in
//! `docs/observability.md`: `reason` is bounded by [`reason_label`], `subresource` is
//! `main` or `status`, or `unknown` for an RPC refused before it named one; `lease` (of
//! the leadership metrics, `leadership`) is `namespace/name` for the first 64 Leases
//! campaigned for, then `other`.

use std::sync::OnceLock;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

mod endpoint;
mod leadership;

use leadership::LeadershipMetrics;

pub use endpoint::serve;

fn latency() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

fn attempts() -> Histogram {
    Histogram::new([1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 50.0, 100.0])
}

fn batch_sizes() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
}

/// Every metric safewrite keeps.
pub struct Metrics {
    registry: Registry,
    batch_size: Histogram,
    rpcs: Family<Labels, Counter>,
    rpc_duration: Histograms,
    rpc_attempts: Histograms,
    outcomes: Family<Labels, Counter>,
    conflicts: Counter,
    memory_lookups: Family<Labels, Counter>,
    memory_stale: Counter,
    api_requests: Family<Labels, Counter>,
    api_duration: Histograms,
    breaker_state: Gauge,
    breaker_transitions: Family<Labels, Counter>,
    ratelimit_wait: Histogram,
    in_flight: Gauge<i64, AtomicI64>,
    large_answers: Family<Labels, Counter>,
    sending_bytes: Gauge<i64, AtomicI64>,
    leadership: LeadershipMetrics,
}

impl Metrics {
    fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::default(),
            batch_size: batch_sizes(),
            rpcs: Family::default(),
            rpc_duration: Family::new_with_constructor(latency),
            rpc_attempts: Family::new_with_constructor(attempts),
            outcomes: Family::default(),
            conflicts: Counter::default(),
            memory_lookups: Family::default(),
            memory_stale: Counter::default(),
            api_requests: Family::default(),
            api_duration: Family::new_with_constructor(latency),
            breaker_state: Gauge::default(),
            breaker_transitions: Family::default(),
            ratelimit_wait: latency(),
            in_flight: Gauge::default(),
            large_answers: Family::default(),
            sending_bytes: Gauge::default(),
            leadership: LeadershipMetrics::default(),
        };
        // In this order, which is the order of the exposition and of docs/metrics.md.
        metrics.register_writes();
        metrics.leadership.register(&mut metrics.registry);
        metrics.register_api_client();
        metrics.register_process();
        metrics
    }

    /// The RPCs and the writes they make.
    fn register_writes(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "safewrite_rpcs",
            "RPCs finished, by method and gRPC code",
            self.rpcs.clone(),
        );
        registry.register_with_unit(
            "safewrite_rpc_duration",
            "RPC latency, by method",
            Unit::Seconds,
            self.rpc_duration.clone(),
        );
        registry.register(
            "safewrite_rpc_attempts",
            "Attempts per finished RPC, by method",
            self.rpc_attempts.clone(),
        );
        registry.register(
            "safewrite_write_outcomes",
            "Successful RPCs by outcome",
            self.outcomes.clone(),
        );
        registry.register(
            "safewrite_batch_size",
            "Requests carried by each write of a group commit",
            self.batch_size.clone(),
        );
        registry.register(
            "safewrite_conflicts",
            "409 Conflict answers met (one for each write refused, however many requests it carried)",
            self.conflicts.clone(),
        );
        registry.register(
            "safewrite_memory_lookups",
            "Writes that looked for a remembered copy of their object, by result",
            self.memory_lookups.clone(),
        );
        registry.register(
            "safewrite_memory_stale",
            "Remembered copies that turned out stale",
            self.memory_stale.clone(),
        );
    }

    /// The requests to the API server and the layers they pass.
    fn register_api_client(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "safewrite_api_requests",
            "Requests to the API server by verb and HTTP code",
            self.api_requests.clone(),
        );
        registry.register_with_unit(
            "safewrite_api_request_duration",
            "API request latency by verb (rate-limit waits excluded)",
            Unit::Seconds,
            self.api_duration.clone(),
        );
        registry.register(
            "safewrite_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open",
            self.breaker_state.clone(),
        );
        registry.register(
            "safewrite_breaker_transitions",
            "Circuit breaker state changes, by the state entered",
            self.breaker_transitions.clone(),
        );
        registry.register_with_unit(
            "safewrite_ratelimit_wait",
            "Time requests waited for the shared rate limiter (waits > 0 only)",
            Unit::Seconds,
            self.ratelimit_wait.clone(),
        );
    }

    /// The process: its RPCs in flight, its build and the standard `process_*` metrics.
    fn register_process(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "safewrite_rpcs_in_flight",
            "RPCs in flight, open transactions included",
            self.in_flight.clone(),
        );
        registry.register(
            "safewrite_large_answers",
            "Answers of 64 KiB or more, by whether they got a share of --max-sending-bytes or waited it out",
            self.large_answers.clone(),
        );
        registry.register_with_unit(
            "safewrite_sending",
            "Bytes of --max-sending-bytes held by answers leaving now",
            Unit::Bytes,
            self.sending_bytes.clone(),
        );
        registry.register(
            "safewrite_build",
            "The running build: version, compiler and source revision",
            Info::new(build_labels()),
        );
        registry.register_collector(Box::new(crate::process::ProcessCollector));
    }

    /// An RPC on `subresource` (`main`, `status`, `unknown`) finished with `code` and
    /// the ErrorInfo `reason` (none on success) after `attempts` attempts.
    pub fn rpc_done(
        &self,
        method: &'static str,
        subresource: &'static str,
        code: tonic::Code,
        reason: Option<&str>,
        attempts: u32,
        took: Duration,
    ) {
        let label = vec![
            ("method", method.to_string()),
            ("subresource", subresource.to_string()),
        ];
        self.rpcs
            .get_or_create(&vec![
                ("method", method.to_string()),
                ("code", code_name(code).to_string()),
                ("reason", reason_label(reason).to_string()),
                ("subresource", subresource.to_string()),
            ])
            .inc();
        self.rpc_duration
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        self.rpc_attempts
            .get_or_create(&label)
            .observe(f64::from(attempts));
    }

    /// A successful RPC's outcome, on `subresource` (`main` or `status`).
    pub fn outcome(&self, outcome: &'static str, subresource: &'static str) {
        self.outcomes
            .get_or_create(&vec![
                ("outcome", outcome.to_string()),
                ("subresource", subresource.to_string()),
            ])
            .inc();
    }

    /// A group commit's write carried `members` requests.
    pub fn batch(&self, members: usize) {
        self.batch_size.observe(members as f64);
    }

    /// A 409 Conflict was met.
    pub fn conflict(&self) {
        self.conflicts.inc();
    }

    /// A write looked for a remembered copy of its object.
    pub fn memory(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.memory_lookups
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    /// A remembered copy turned out stale.
    pub fn memory_stale(&self) {
        self.memory_stale.inc();
    }

    /// A campaign for `lease` (`namespace/name`) started (`true`) or stopped leading.
    /// Called once per change of a campaign's state, so that `safewrite_lease_leading`
    /// counts the campaigns leading each Lease: 1 or 0, 2 for a moment at most (a
    /// campaign that lost its renewal and has not noticed yet, and its successor).
    pub fn leadership(&self, lease: &str, leading: bool) {
        self.leadership.changed(lease, leading);
    }

    /// A fenced write was refused before it was sent: `fenced` (the object carries a
    /// newer epoch than the caller's) or `not_leader` (the caller's campaign does not
    /// lead the Lease now). Counted once per refused RPC where it ends
    /// (`service::rpc::end_rpc`), from the reason it ended with; any other `reason`
    /// counts as `other`, so that the label stays a bounded set.
    pub fn fence_refused(&self, reason: &str) {
        self.leadership.fence_refused(reason);
    }

    /// A request to the API server ended; `code` is the HTTP code, `error` or
    /// `circuit_open`.
    pub fn api_request(&self, verb: &'static str, code: &str, took: Duration) {
        self.api_requests
            .get_or_create(&vec![
                ("verb", verb.to_string()),
                ("code", code.to_string()),
            ])
            .inc();
        self.api_duration
            .get_or_create(&vec![("verb", verb.to_string())])
            .observe(took.as_secs_f64());
    }

    /// The breaker entered `state` (0 closed, 1 half-open, 2 open).
    pub fn breaker(&self, state: i64, name: &'static str) {
        self.breaker_state.set(state);
        self.breaker_transitions
            .get_or_create(&vec![("to", name.to_string())])
            .inc();
    }

    /// A request waited `wait` for the rate limiter.
    pub fn ratelimit_wait(&self, wait: Duration) {
        self.ratelimit_wait.observe(wait.as_secs_f64());
    }

    /// A large answer got its share of the send budget (`true`) or waited it out.
    pub fn large_answer(&self, shared: bool) {
        let share = if shared { "held" } else { "waited_out" };
        self.large_answers
            .get_or_create(&vec![("share", share.to_string())])
            .inc();
    }

    /// `bytes` of the send budget were taken (positive) or given back (negative).
    pub fn sending(&self, bytes: i64) {
        self.sending_bytes.inc_by(bytes);
    }

    /// One more RPC in flight; the guard counts it out when dropped.
    pub fn in_flight(&'static self) -> InFlight {
        self.in_flight.inc();
        InFlight(self)
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

/// Counts an RPC as in flight until dropped.
pub struct InFlight(&'static Metrics);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}

/// The gRPC code's canonical name, e.g. `NOT_FOUND`.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The `reason` label of an ErrorInfo reason: the reason itself when it is one the
/// sidecar sends ([`crate::reasons::REASONS`]: its own, the Kubernetes Status reasons,
/// `HTTP_<code>` for common codes), `none` when there is none (success, or a status
/// without details), `other` for anything else, so that the label's values stay a
/// bounded set whatever an API server or a proxy answers.
pub fn reason_label(reason: Option<&str>) -> &'static str {
    match reason {
        None | Some("") => "none",
        Some(reason) => crate::reasons::REASONS
            .iter()
            .find(|known| **known == reason)
            .copied()
            .unwrap_or("other"),
    }
}

/// The labels of `safewrite_build_info`.
fn build_labels() -> Vec<(&'static str, String)> {
    vec![
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        (
            "rustc",
            option_env!("SAFEWRITE_RUSTC_VERSION")
                .unwrap_or("unknown")
                .to_string(),
        ),
        (
            "git_sha",
            option_env!("SAFEWRITE_GIT_SHA")
                .unwrap_or("unknown")
                .to_string(),
        ),
    ]
}

/// The process-wide metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// The Kubernetes verb of a request, from its method and path.
pub fn verb(method: &http::Method, path: &str) -> &'static str {
    match *method {
        http::Method::GET if is_discovery(path) => "discovery",
        http::Method::GET if path.starts_with("/api") && is_collection(path) => "list",
        http::Method::GET => "get",
        http::Method::PUT => "update",
        http::Method::POST => "create",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Discovery documents: `/api`, `/api/v1`, `/apis`, `/apis/group`, `/apis/group/version`.
fn is_discovery(path: &str) -> bool {
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let first = segments.next();
    let n = 1 + segments.count();
    match first {
        Some("api") => n <= 2,
        Some("apis") => n <= 3,
        _ => false,
    }
}

/// Collections are lists.
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let n = segments.len();
    match segments.first() {
        // /api, /api/v1, /api/v1/nodes, /api/v1/namespaces/a/configmaps
        Some(&"api") => n <= 3 || (n == 5 && segments[2] == "namespaces"),
        // /apis, /apis/g, /apis/g/v, /apis/g/v/widgets, /apis/g/v/namespaces/a/widgets
        Some(&"apis") => n <= 4 || (n == 6 && segments[3] == "namespaces"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_kubernetes() {
        let get = http::Method::GET;
        assert_eq!(verb(&get, "/api/v1/namespaces/a/configmaps/b"), "get");
        assert_eq!(verb(&get, "/api/v1/namespaces/a/configmaps"), "list");
        assert_eq!(
            verb(&get, "/apis/apps/v1/namespaces/a/deployments/d"),
            "get"
        );
        assert_eq!(verb(&get, "/apis/apps/v1"), "discovery");
        assert_eq!(verb(&get, "/api/v1"), "discovery");
        assert_eq!(verb(&get, "/apis/apps/v1/deployments"), "list");
        assert_eq!(verb(&get, "/api/v1/nodes/n"), "get");
        assert_eq!(
            verb(&http::Method::PUT, "/api/v1/namespaces/a/configmaps/b"),
            "update"
        );
        assert_eq!(
            verb(&http::Method::POST, "/api/v1/namespaces/a/configmaps"),
            "create"
        );
    }

    #[test]
    fn rendering_names_every_metric() {
        // Its own metrics: other tests count requests in the process-wide ones.
        let m = &Metrics::new();
        m.rpc_done(
            "UpdateWithRetry",
            "main",
            tonic::Code::Aborted,
            Some("Conflict"),
            3,
            Duration::from_millis(5),
        );
        m.rpc_done(
            "Transact",
            "status",
            tonic::Code::Unavailable,
            Some("ServiceUnavailable"),
            2,
            Duration::from_millis(5),
        );
        m.outcome("updated", "status");
        m.api_request("update", "409", Duration::from_millis(1));
        m.breaker(2, "open");
        let text = m.render();
        for name in [
            "safewrite_rpcs_total{method=\"UpdateWithRetry\",code=\"ABORTED\",reason=\"Conflict\",subresource=\"main\"} 1",
            "safewrite_rpcs_total{method=\"Transact\",code=\"UNAVAILABLE\",reason=\"ServiceUnavailable\",subresource=\"status\"} 1",
            "safewrite_rpc_attempts_bucket{le=\"2.0\",method=\"Transact\",subresource=\"status\"} 1",
            "safewrite_write_outcomes_total{outcome=\"updated\",subresource=\"status\"} 1",
            "safewrite_api_requests_total{verb=\"update\",code=\"409\"} 1",
            "safewrite_breaker_state 2",
            "safewrite_rpcs_in_flight 0",
            "safewrite_build_info{version=\"",
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "# EOF",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }

    #[test]
    fn reasons_are_a_bounded_set() {
        for reason in [
            "CIRCUIT_OPEN",
            "RETRY_BUDGET_EXHAUSTED",
            "POLICY_DENIED",
            "ServiceUnavailable",
            "HTTP_503",
        ] {
            assert_eq!(reason_label(Some(reason)), reason);
        }
        assert_eq!(reason_label(None), "none");
        assert_eq!(reason_label(Some("")), "none");
        assert_eq!(reason_label(Some("SomethingAProxySaid")), "other");
        assert_eq!(reason_label(Some("HTTP_418")), "other");
    }
}
