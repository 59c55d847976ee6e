//! Metrics: one registry, built by `safewrite serve` and handed to what records, rendered in the OpenMetrics text format on a
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

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

/// A label set of static names and values, made per RPC without allocating.
type Labels<const N: usize> = [(&'static str, &'static str); N];
type Histograms = Family<Labels<2>, Histogram, fn() -> Histogram>;

mod endpoint;
mod leadership;

use leadership::LeadershipMetrics;
use safewrite_client::ClientMetrics;
use safewrite_engine::EngineMetrics;

pub use endpoint::serve;

fn latency() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

fn attempts() -> Histogram {
    Histogram::new([1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 50.0, 100.0])
}

/// Every metric safewrite keeps.
pub struct Metrics {
    registry: Registry,
    rpcs: Family<Labels<4>, Counter>,
    rpc_duration: Histograms,
    rpc_attempts: Histograms,
    outcomes: Family<Labels<2>, Counter>,
    in_flight: Gauge<i64, AtomicI64>,
    large_answers: Family<Labels<1>, Counter>,
    sending_bytes: Gauge<i64, AtomicI64>,
    leadership: LeadershipMetrics,
    engine: EngineMetrics,
    client: ClientMetrics,
}

// === impl Metrics ===

impl Metrics {
    /// Every metric, registered once; the process's registry.
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::default(),
            rpcs: Family::default(),
            rpc_duration: Family::new_with_constructor(latency),
            rpc_attempts: Family::new_with_constructor(attempts),
            outcomes: Family::default(),
            in_flight: Gauge::default(),
            large_answers: Family::default(),
            sending_bytes: Gauge::default(),
            leadership: LeadershipMetrics::default(),
            engine: EngineMetrics::default(),
            client: ClientMetrics::default(),
        };
        // In this order, which is the order of the exposition and of docs/metrics.md.
        metrics.register_writes();
        metrics.leadership.register(&mut metrics.registry);
        metrics.client.register(&mut metrics.registry);
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
        self.engine.register(registry);
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
        let label = [("method", method), ("subresource", subresource)];
        self.rpcs
            .get_or_create(&[
                ("method", method),
                ("code", code_name(code)),
                ("reason", reason_label(reason)),
                ("subresource", subresource),
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
            .get_or_create(&[("outcome", outcome), ("subresource", subresource)])
            .inc();
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

    /// A large answer got its share of the send budget (`true`) or waited it out.
    pub fn large_answer(&self, shared: bool) {
        let share = if shared { "held" } else { "waited_out" };
        self.large_answers.get_or_create(&[("share", share)]).inc();
    }

    /// `bytes` of the send budget were taken (positive) or given back (negative).
    pub fn sending(&self, bytes: i64) {
        self.sending_bytes.inc_by(bytes);
    }

    /// One more RPC in flight; the guard counts it out when dropped.
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// The client stack's metrics, to hand to the stack.
    pub fn client(&self) -> &ClientMetrics {
        &self.client
    }

    /// The write loop's metrics, to hand to the engine.
    pub fn engine(&self) -> &EngineMetrics {
        &self.engine
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts an RPC as in flight until dropped.
pub struct InFlight(Gauge<i64, AtomicI64>);

// === impl InFlight ===

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
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
/// sidecar sends ([`safewrite_api::reasons::REASONS`]: its own, the Kubernetes Status reasons,
/// `HTTP_<code>` for common codes), `none` when there is none (success, or a status
/// without details), `other` for anything else, so that the label's values stay a
/// bounded set whatever an API server or a proxy answers.
pub fn reason_label(reason: Option<&str>) -> &'static str {
    match reason {
        None | Some("") => "none",
        Some(reason) => safewrite_api::reasons::REASONS
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_names_every_metric() {
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
        m.client.api_request(
            "update",
            safewrite_client::metrics::RequestCode::Http(409),
            Duration::from_millis(1),
        );
        let text = m.render();
        for name in [
            "safewrite_rpcs_total{method=\"UpdateWithRetry\",code=\"ABORTED\",reason=\"Conflict\",subresource=\"main\"} 1",
            "safewrite_rpcs_total{method=\"Transact\",code=\"UNAVAILABLE\",reason=\"ServiceUnavailable\",subresource=\"status\"} 1",
            "safewrite_rpc_attempts_bucket{le=\"2.0\",method=\"Transact\",subresource=\"status\"} 1",
            "safewrite_write_outcomes_total{outcome=\"updated\",subresource=\"status\"} 1",
            "safewrite_api_requests_total{verb=\"update\",code=\"409\"} 1",
            "safewrite_breaker_state 0",
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
