//! Metrics: one process-wide registry, rendered in the OpenMetrics text format on a
//! separate port (`--metrics-listen`, path `/metrics`) for Prometheus to scrape.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `safewrite_rpcs_total` | method, code | RPCs finished, by gRPC code |
//! | `safewrite_rpc_duration_seconds` | method | RPC latency |
//! | `safewrite_rpc_attempts` | method | attempts per finished RPC |
//! | `safewrite_write_outcomes_total` | outcome | successful RPCs by outcome (updated, unchanged, created, aborted, already_applied) |
//! | `safewrite_conflicts_total` | | 409 Conflict answers met (each one retried or final) |
//! | `safewrite_api_requests_total` | verb, code | requests to the API server by verb and HTTP code (`error` when no answer, `circuit_open` when the breaker refused) |
//! | `safewrite_api_request_duration_seconds` | verb | API request latency (rate-limit waits excluded) |
//! | `safewrite_breaker_state` | | 0 closed, 1 half-open, 2 open |
//! | `safewrite_breaker_transitions_total` | to | state changes of the breaker |
//! | `safewrite_ratelimit_wait_seconds` | | time requests waited for the rate limiter (only waits > 0) |
//! | `safewrite_rpcs_in_flight` | | RPCs in flight (open transactions included) |

use std::convert::Infallible;
use std::sync::OnceLock;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::debug;

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

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
    rpcs: Family<Labels, Counter>,
    rpc_duration: Histograms,
    rpc_attempts: Histograms,
    outcomes: Family<Labels, Counter>,
    conflicts: Counter,
    api_requests: Family<Labels, Counter>,
    api_duration: Histograms,
    breaker_state: Gauge,
    breaker_transitions: Family<Labels, Counter>,
    ratelimit_wait: Histogram,
    in_flight: Gauge<i64, AtomicI64>,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let rpcs = Family::<Labels, Counter>::default();
        registry.register(
            "safewrite_rpcs",
            "RPCs finished, by method and gRPC code",
            rpcs.clone(),
        );
        let rpc_duration: Histograms = Family::new_with_constructor(latency);
        registry.register_with_unit(
            "safewrite_rpc_duration",
            "RPC latency, by method",
            Unit::Seconds,
            rpc_duration.clone(),
        );
        let rpc_attempts: Histograms = Family::new_with_constructor(attempts);
        registry.register(
            "safewrite_rpc_attempts",
            "Attempts per finished RPC, by method",
            rpc_attempts.clone(),
        );
        let outcomes = Family::<Labels, Counter>::default();
        registry.register(
            "safewrite_write_outcomes",
            "Successful RPCs by outcome",
            outcomes.clone(),
        );
        let conflicts = Counter::default();
        registry.register(
            "safewrite_conflicts",
            "409 Conflict answers met",
            conflicts.clone(),
        );
        let api_requests = Family::<Labels, Counter>::default();
        registry.register(
            "safewrite_api_requests",
            "Requests to the API server by verb and HTTP code",
            api_requests.clone(),
        );
        let api_duration: Histograms = Family::new_with_constructor(latency);
        registry.register_with_unit(
            "safewrite_api_request_duration",
            "API request latency by verb (rate-limit waits excluded)",
            Unit::Seconds,
            api_duration.clone(),
        );
        let breaker_state = Gauge::default();
        registry.register(
            "safewrite_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open",
            breaker_state.clone(),
        );
        let breaker_transitions = Family::<Labels, Counter>::default();
        registry.register(
            "safewrite_breaker_transitions",
            "Circuit breaker state changes, by the state entered",
            breaker_transitions.clone(),
        );
        let ratelimit_wait = latency();
        registry.register_with_unit(
            "safewrite_ratelimit_wait",
            "Time requests waited for the shared rate limiter (waits > 0 only)",
            Unit::Seconds,
            ratelimit_wait.clone(),
        );
        let in_flight = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "safewrite_rpcs_in_flight",
            "RPCs in flight, open transactions included",
            in_flight.clone(),
        );
        Self {
            registry,
            rpcs,
            rpc_duration,
            rpc_attempts,
            outcomes,
            conflicts,
            api_requests,
            api_duration,
            breaker_state,
            breaker_transitions,
            ratelimit_wait,
            in_flight,
        }
    }

    /// An RPC finished with `code` after `attempts` attempts.
    pub fn rpc_done(&self, method: &'static str, code: tonic::Code, attempts: u32, took: Duration) {
        let label = vec![("method", method.to_string())];
        self.rpcs
            .get_or_create(&vec![
                ("method", method.to_string()),
                ("code", code_name(code).to_string()),
            ])
            .inc();
        self.rpc_duration
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        self.rpc_attempts
            .get_or_create(&label)
            .observe(f64::from(attempts));
    }

    /// A successful RPC's outcome.
    pub fn outcome(&self, outcome: &'static str) {
        self.outcomes
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .inc();
    }

    /// A 409 Conflict was met.
    pub fn conflict(&self) {
        self.conflicts.inc();
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

/// The process-wide metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// The Kubernetes verb of a request, from its method and path.
pub fn verb(method: &http::Method, path: &str) -> &'static str {
    match *method {
        http::Method::GET if path.starts_with("/api") && is_collection(path) => "list",
        http::Method::GET => "get",
        http::Method::PUT => "update",
        http::Method::POST => "create",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Discovery documents (`/api`, `/apis/group/version`) and collections are lists.
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

/// Serves `GET /metrics` on `listener` until `stop` turns true.
pub async fn serve(listener: TcpListener, mut stop: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok((tcp, _)) = accepted else { continue };
        tokio::spawn(async move {
            let service = service_fn(|request: http::Request<hyper::body::Incoming>| async move {
                let response = if request.uri().path() == "/metrics" {
                    http::Response::builder()
                        .header(
                            http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )
                        .body(Full::new(Bytes::from(get().render())))
                } else {
                    http::Response::builder()
                        .status(http::StatusCode::NOT_FOUND)
                        .body(Full::new(Bytes::from_static(b"metrics are at /metrics\n")))
                };
                Ok::<_, Infallible>(response.expect("static response parts"))
            });
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await
            {
                debug!(%error, "metrics connection ended");
            }
        });
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
        assert_eq!(verb(&get, "/apis/apps/v1"), "list");
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
        let m = get();
        m.rpc_done(
            "UpdateWithRetry",
            tonic::Code::Aborted,
            3,
            Duration::from_millis(5),
        );
        m.api_request("update", "409", Duration::from_millis(1));
        m.breaker(2, "open");
        let text = m.render();
        for name in [
            "safewrite_rpcs_total{method=\"UpdateWithRetry\",code=\"ABORTED\"} 1",
            "safewrite_rpc_attempts_bucket{",
            "safewrite_api_requests_total{verb=\"update\",code=\"409\"} 1",
            "safewrite_breaker_state 2",
            "safewrite_rpcs_in_flight 0",
            "# EOF",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
