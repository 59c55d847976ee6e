//! The tower stack of the client, in the order the module header of `client/` draws it
//! (trace, rate limit, breaker, timeout, HTTP), and the handle that calls it.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use kube::client::ConfigExt as _;
use tower::ServiceBuilder;

use super::answer_time::AnswerTime;
use super::breaker::{Breaker, BreakerConfig, CircuitBreakerLayer};
use super::error::ConnectError;
use super::handle::ApiClient;
use super::metrics::ClientMetrics;
use super::observe::ObserveLayer;
use super::ratelimit::RateLimitLayer;
use super::timeout::{self, TimeoutLayer};
use super::transport;

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

/// Builds the client over the stack described in the module header, its requests
/// counted in `metrics`.
///
/// # Errors
/// [`ConnectError::Client`] when the configuration's TLS or credentials cannot be used,
/// [`ConnectError::Proxy`] when it names a proxy (not supported).
pub fn build(
    config: kube::Config,
    settings: StackConfig,
    metrics: ClientMetrics,
) -> Result<ApiClient, ConnectError> {
    let http = transport::Http::new(&config)?;
    let auth = config.auth_layer().map_err(ConnectError::Client)?;
    let headers = config.extra_headers_layer().map_err(ConnectError::Client)?;
    // Below the timeout: what kube's own stack does to every request.
    let connection = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(auth)
        .layer(headers)
        .service(http);
    Ok(over(
        connection,
        settings,
        metrics,
        &config.default_namespace,
    ))
}

/// The stack of the module header over `connection`, the service that exchanges one
/// request with the API server (HTTP in [`build`], an in-process fake in tests).
pub fn over<S, R>(
    connection: S,
    settings: StackConfig,
    metrics: ClientMetrics,
    namespace: &str,
) -> ApiClient
where
    S: tower::Service<
            http::Request<timeout::Handoff<kube::client::Body>>,
            Response = http::Response<R>,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    S::Error: Into<tower::BoxError>,
    R: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    R::Error: Into<tower::BoxError>,
{
    let answer_time = Arc::new(AnswerTime::default());
    let service = ServiceBuilder::new()
        .layer(ObserveLayer::new(metrics.clone()))
        .layer(
            RateLimitLayer::new(settings.qps, settings.burst, metrics.clone())
                .stepping_aside_for_the_server(settings.server_paces)
                .holding_writes_to(answer_time.clone()),
        )
        .layer(CircuitBreakerLayer::new(Breaker::new(
            settings.breaker,
            metrics,
        )))
        .layer(TimeoutLayer::new(settings.request_timeout).measuring(answer_time))
        .service(connection);
    ApiClient::new(service, namespace)
}
