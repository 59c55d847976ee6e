//! The metrics of the requests to the API server and the layers they pass. Built by
//! whoever builds the stack (the sidecar registers them in its registry, the in-process
//! CLI keeps them unregistered) and handed to each layer that records.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// A label set of static names and values, made per request without allocating.
type Labels<const N: usize> = [(&'static str, &'static str); N];

/// `safewrite_api_requests`' labels: `verb`, then `code`.
type RequestLabels = (Labels<1>, [(&'static str, RequestCode); 1]);

/// How an API request ended, as the `code` label of `safewrite_api_requests`: the HTTP
/// code, or why there was none (`error`, `circuit_open`, ...).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RequestCode {
    /// The API server answered with this HTTP code.
    Http(u16),
    /// No answer: the kind of failure (`connect`, `timeout`, `circuit_open`, ...).
    Failed(&'static str),
}

impl EncodeLabelValue for RequestCode {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        match self {
            RequestCode::Http(code) => code.encode(encoder),
            RequestCode::Failed(kind) => kind.encode(encoder),
        }
    }
}

fn latency() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

/// The client stack's metric families; clones record into the same families.
#[derive(Clone, Debug)]
pub struct ClientMetrics(Arc<ClientFamilies>);

#[derive(Debug)]
struct ClientFamilies {
    api_requests: Family<RequestLabels, Counter>,
    api_duration: Family<Labels<1>, Histogram, fn() -> Histogram>,
    breaker_state: Gauge,
    breaker_transitions: Family<Labels<1>, Counter>,
    ratelimit_wait: Histogram,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        Self(Arc::new(ClientFamilies {
            api_requests: Family::default(),
            api_duration: Family::new_with_constructor(latency),
            breaker_state: Gauge::default(),
            breaker_transitions: Family::default(),
            ratelimit_wait: latency(),
        }))
    }
}

impl ClientMetrics {
    /// Registers every family in `registry`, in the order of the exposition.
    pub fn register(&self, registry: &mut Registry) {
        let families = &self.0;
        registry.register(
            "safewrite_api_requests",
            "Requests to the API server by verb and HTTP code",
            families.api_requests.clone(),
        );
        registry.register_with_unit(
            "safewrite_api_request_duration",
            "API request latency by verb (rate-limit waits excluded)",
            Unit::Seconds,
            families.api_duration.clone(),
        );
        registry.register(
            "safewrite_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open",
            families.breaker_state.clone(),
        );
        registry.register(
            "safewrite_breaker_transitions",
            "Circuit breaker state changes, by the state entered",
            families.breaker_transitions.clone(),
        );
        registry.register_with_unit(
            "safewrite_ratelimit_wait",
            "Time requests waited for the shared rate limiter (waits > 0 only)",
            Unit::Seconds,
            families.ratelimit_wait.clone(),
        );
    }

    /// A request to the API server ended with `code`.
    pub fn api_request(&self, verb: &'static str, code: RequestCode, took: Duration) {
        self.0
            .api_requests
            .get_or_create(&([("verb", verb)], [("code", code)]))
            .inc();
        self.0
            .api_duration
            .get_or_create(&[("verb", verb)])
            .observe(took.as_secs_f64());
    }

    /// The breaker entered `state`.
    pub fn breaker(&self, state: BreakerState) {
        let (value, name) = match state {
            BreakerState::Closed => (0, "closed"),
            BreakerState::HalfOpen => (1, "half_open"),
            BreakerState::Open => (2, "open"),
        };
        self.0.breaker_state.set(value);
        self.0
            .breaker_transitions
            .get_or_create(&[("to", name)])
            .inc();
    }

    /// A request waited `wait` for the rate limiter.
    pub fn ratelimit_wait(&self, wait: Duration) {
        self.0.ratelimit_wait.observe(wait.as_secs_f64());
    }
}

/// A state of the circuit breaker, as its metrics name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests pass.
    Closed,
    /// One probe passes.
    HalfOpen,
    /// Requests fail fast.
    Open,
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
}
