//! The top of the stack: one OpenTelemetry client span per request to the API server (a
//! child of the attempt that sent it; the rate limiter's wait and the breaker's decision
//! are recorded in it) and the API request metrics. The span covers the whole request,
//! limiter wait included; the latency metric leaves that wait out. The outcome is
//! labelled with the HTTP code, or the kind of [`RequestError`] when there was no answer
//! (`timeout`, `connect`, `transport`, `circuit_open`, `rate_limited`), and the span
//! says whether it was a fault ([`fault::is_fault`]).

use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use tower::{BoxError, Layer, Service};
use tracing::Instrument as _;
use tracing::field::Empty;

use super::answer::RequestError;
use super::context::take_ready;
use super::fault;
use super::ratelimit::Waited;
use crate::metrics::{self, ClientMetrics, RequestCode};

/// Builds [`Observe`] services.
#[derive(Clone)]
pub struct ObserveLayer {
    metrics: ClientMetrics,
}

impl ObserveLayer {
    /// Counts requests in `metrics`.
    pub fn new(metrics: ClientMetrics) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Observe {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// Wraps each request in a client span and counts it.
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    metrics: ClientMetrics,
}

impl<S, B, R> Service<http::Request<B>> for Observe<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let method = request.method().clone();
        let verb = metrics::verb(&method, request.uri().path());
        // The path names the object (namespace, resource, name), never its contents.
        // Only requests made for an RPC get a span: background ones (the readiness
        // probe) would be a root trace every few seconds.
        let span = if tracing::Span::current().is_none() {
            tracing::Span::none()
        } else {
            tracing::info_span!(
                "http",
                otel.name = method.as_str(),
                otel.kind = "client",
                otel.status_code = Empty,
                http.request.method = method.as_str(),
                url.path = request.uri().path(),
                k8s.verb = verb,
                http.response.status_code = Empty,
                error.type = Empty,
                safewrite.fault = Empty,
                safewrite.ratelimit.wait_ms = Empty,
            )
        };
        let waited = Waited::default();
        request.extensions_mut().insert(waited.clone());
        let recorder = span.clone();
        let metrics = self.metrics.clone();
        Box::pin(
            async move {
                let started = Instant::now();
                let result = inner.call(request).await.map_err(Into::into);
                let took = started.elapsed().saturating_sub(waited.get());
                let fault = fault::is_fault_response(&result);
                recorder.record("safewrite.fault", fault);
                let code = match &result {
                    Ok(response) => {
                        let code = response.status().as_u16();
                        recorder.record("http.response.status_code", i64::from(code));
                        if code >= 400 {
                            recorder.record("error.type", code.to_string().as_str());
                            recorder.record("otel.status_code", "ERROR");
                        }
                        RequestCode::Http(code)
                    }
                    Err(error) => {
                        let kind = RequestError::kind_of(error.as_ref());
                        recorder.record("error.type", kind);
                        recorder.record("otel.status_code", "ERROR");
                        RequestCode::Failed(kind)
                    }
                };
                metrics.api_request(verb, code, took);
                result
            }
            .instrument(span),
        )
    }
}
