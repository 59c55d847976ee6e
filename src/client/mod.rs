//! The API-server client stack: every request safewrite sends to the API server (reads,
//! writes, discovery, readiness probes) goes through one tower stack, in this order:
//!
//! ```text
//! kube::Client
//!   -> trace         (observe.rs)   one client span per request, the request metrics
//!   -> rate limit    (ratelimit.rs) a FIFO of reserved slots; refuses a wait past the deadline
//!   -> breaker       (breaker.rs)   fails fast while open; accounts every admitted request once
//!   -> timeout       (timeout.rs)   bounds the exchange after the request left the layers above
//!   -> HTTP          (transport.rs) HTTP/2 over one TLS connection (or a capped HTTP/1.1 pool)
//! ```
//!
//! Whether an outcome is a fault of the API server (or of the path to it) is decided in
//! one place, [`fault::is_fault`]; the breaker, the metrics and the engine's retry
//! decision all ask it. Every error the stack returns is a [`RequestError`], so a caller
//! knows for each failure whether the request may have reached the API server
//! ([`RequestError::maybe_sent`]); a request that never left the process (limiter,
//! breaker, connect failure) never counts as "maybe sent".
//!
//! Requests carry their context in extensions: the RPC's [`Deadline`], a per-request
//! [`RequestTimeout`], and [`Readiness`] for the readiness probe (which bypasses the rate
//! limit and the breaker, see [`readiness`]).

pub mod answer;
pub mod apiserver;
pub mod breaker;
pub mod connect;
pub mod discovery;
pub mod fault;
pub mod observe;
pub mod ratelimit;
pub mod readiness;
pub mod timeout;
pub mod transport;

use std::num::NonZeroU32;
use std::time::Duration;

use kube::client::{ClientBuilder, ConfigExt as _};
use tokio::time::Instant;
use tower::ServiceBuilder;

pub use answer::{Answer, CircuitOpen, RequestError, WouldExceedDeadline};
pub use connect::{ConnectError, connect};

use breaker::{Breaker, BreakerConfig, CircuitBreakerLayer};
use observe::ObserveLayer;
use ratelimit::RateLimitLayer;
use timeout::TimeoutLayer;

/// The deadline of the RPC a request serves, carried in the request's extensions. The
/// rate limiter refuses a wait past it; the timeout layer ends the request at it.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

/// The longest a request may take once it has passed the rate limit and the breaker,
/// when it should differ from the stack's default (`--request-timeout`).
#[derive(Debug, Clone, Copy)]
pub struct RequestTimeout(pub Duration);

/// Marks the readiness probe: it takes no rate-limit slot and is not breaker traffic
/// (neither refused by an open breaker nor counted by it). See [`readiness`].
#[derive(Debug, Clone, Copy)]
pub struct Readiness;

/// The service a layer's `call` was made on, for the call's future to own; a clone
/// stays behind for the next `poll_ready` (tower: only the service polled ready may be
/// called).
fn take_ready<S: Clone>(service: &mut S) -> S {
    let clone = service.clone();
    std::mem::replace(service, clone)
}

/// A layer stepping aside for `request` (the readiness probe): `inner`'s answer as is.
fn pass<S, Req>(
    mut inner: S,
    request: Req,
) -> futures::future::BoxFuture<'static, Result<S::Response, tower::BoxError>>
where
    S: tower::Service<Req>,
    S::Future: Send + 'static,
    S::Error: Into<tower::BoxError>,
{
    let answer = inner.call(request);
    Box::pin(async move { answer.await.map_err(Into::into) })
}

/// Settings of the stack, from the serve flags.
#[derive(Debug, Clone, Copy)]
pub struct StackConfig {
    /// Requests per second on average.
    pub qps: NonZeroU32,
    /// Requests allowed at once above the average.
    pub burst: NonZeroU32,
    /// The limit steps aside while the API server answers with API Priority and Fairness
    /// headers (the rate was not set explicitly).
    pub server_paces: bool,
    /// The circuit breaker's settings.
    pub breaker: BreakerConfig,
    /// The default bound of one request below the breaker.
    pub request_timeout: Duration,
}

/// Builds the kube client over the stack described in the module header.
///
/// # Errors
/// [`ConnectError::Client`] when the configuration's TLS or credentials cannot be used,
/// [`ConnectError::Proxy`] when it names a proxy (not supported).
pub fn build(config: kube::Config, settings: StackConfig) -> Result<kube::Client, ConnectError> {
    let http = transport::Http::new(&config)?;
    let auth = config.auth_layer().map_err(ConnectError::Client)?;
    let headers = config.extra_headers_layer().map_err(ConnectError::Client)?;
    // Below the timeout: what kube's own stack does to every request.
    let connection = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(auth)
        .layer(headers)
        .service(http);
    Ok(over(connection, settings, config.default_namespace))
}

/// The stack of the module header over `connection`, the service that exchanges one
/// request with the API server (HTTP in [`build`], an in-process fake in tests).
pub fn over<S, R>(connection: S, settings: StackConfig, namespace: String) -> kube::Client
where
    S: tower::Service<
            http::Request<timeout::Handoff<kube::client::Body>>,
            Response = http::Response<R>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: Into<tower::BoxError>,
    R: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    R::Error: Into<tower::BoxError>,
{
    let service = ServiceBuilder::new()
        .layer(ObserveLayer)
        .layer(
            RateLimitLayer::new(settings.qps, settings.burst)
                .stepping_aside_for_the_server(settings.server_paces),
        )
        .layer(CircuitBreakerLayer::new(Breaker::new(settings.breaker)))
        .layer(TimeoutLayer::new(settings.request_timeout))
        .service(connection);
    ClientBuilder::new(service, namespace).build()
}

/// The deadline the engine works to, given the caller's: a little earlier (a tenth of
/// the time left, at least 1 ms and at most 50 ms), so that the sidecar's own
/// DEADLINE_EXCEEDED, with its attempt records, reaches the caller before the caller's
/// deadline passes and its gRPC library answers with a bare one, and before the gRPC
/// server's own timeout does. Less than 1 ms left is no time at all (the timers tick in
/// milliseconds): the engine's deadline is then now.
pub fn answer_by(deadline: Option<Instant>) -> Option<Instant> {
    let deadline = deadline?;
    let left = deadline.saturating_duration_since(Instant::now());
    Some(deadline - (left / 10).clamp(MIN_ANSWER_MARGIN.min(left), ANSWER_MARGIN))
}

/// The most time kept back from the caller's deadline by [`answer_by`].
pub const ANSWER_MARGIN: Duration = Duration::from_millis(50);

/// The least time kept back by [`answer_by`]: one tick of the timers.
pub const MIN_ANSWER_MARGIN: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_engine_answers_before_the_callers_deadline() {
        let now = Instant::now();
        let at = |ms| Some(now + Duration::from_millis(ms));
        // 10% of a short deadline, 50 ms of a long one.
        assert_eq!(answer_by(at(100)), at(90));
        assert_eq!(answer_by(at(500)), at(450));
        assert_eq!(answer_by(at(10_000)), at(9_950));
        assert_eq!(answer_by(None), None);
        // At least a tick of a very short one; all of one shorter than a tick.
        assert_eq!(answer_by(at(5)), at(4));
        let soon = Some(now + Duration::from_micros(500));
        assert_eq!(answer_by(soon), Some(now));
        // A deadline already past stays where it is.
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(answer_by(at(100)), at(100));
    }
}
