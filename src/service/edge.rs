//! The edge of the Writer service: requests refused before a safewrite handler runs are
//! answered like every other error — rich details from `respond`, an RPC span, and a
//! count in `safewrite_rpcs_total`. They are calls without the shared token (when
//! `--token-file` is set: checked here first, so nothing else runs for them), calls
//! whose deadline is shorter than the sidecar needs to answer (under
//! [`safewrite_api::deadline::MIN_ANSWER_MARGIN`]: DEADLINE_EXCEEDED at once, ahead of the gRPC
//! server's own timeout and its bare CANCELLED), and what tonic refuses: a message over `--max-request-bytes` or one that does not decode (unary
//! RPCs decode their message before the handler is called; INVALID_ARGUMENT, not
//! tonic's INTERNAL, for a malformed message), an unknown method, an unsupported
//! encoding.
//!
//! A handler marks its request [`Reached`]; a request that ends with an error status
//! and was never reached is one tonic refused.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tonic_types::StatusExt as _;

use safewrite_api::deadline::CallDeadline;

use super::receive;
use super::respond;
use super::rpc::grpc_timeout_of;
use crate::auth::Token;
use crate::metrics::Metrics;
use crate::telemetry;

/// Wraps the tonic service of `safewrite.v1.WriterService`; see the module docs.
#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    max_request_bytes: usize,
    token: Option<Token>,
    metrics: Arc<Metrics>,
}

// === impl Edge ===

impl<S> Edge<S> {
    /// `inner`, whose decoder refuses messages over `max_request_bytes`; with `token`,
    /// calls must carry it; refusals counted in `metrics`.
    pub fn new(
        inner: S,
        max_request_bytes: usize,
        token: Option<Token>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            inner,
            max_request_bytes,
            token,
            metrics,
        }
    }
}

impl<S: NamedService> NamedService for Edge<S> {
    const NAME: &'static str = S::NAME;
}

/// Put in every request's extensions; the handler marks it when it takes the request
/// over (and so answers and counts it itself).
#[derive(Clone, Default)]
pub struct Reached(Arc<AtomicBool>);

// === impl Reached ===

impl Reached {
    /// Marks the request whose extensions these are as reached by its handler.
    pub fn mark(extensions: &http::Extensions) {
        if let Some(reached) = extensions.get::<Reached>() {
            reached.0.store(true, Ordering::Release);
        }
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The method's name, as the RPC metrics and spans name it.
fn method(path: &str) -> &'static str {
    match path.rsplit('/').next() {
        Some("UpdateWithRetry") => "UpdateWithRetry",
        Some("PatchStatus") => "PatchStatus",
        Some("Transact") => "Transact",
        Some("Get") => "Get",
        Some("Lead") => "Lead",
        Some("Delete") => "Delete",
        _ => "unknown",
    }
}

/// The subresource a method writes, as the metrics label it; a Transact says which only
/// in its begin.
pub fn method_subresource(method: &str) -> &'static str {
    match method {
        "UpdateWithRetry" => "main",
        "PatchStatus" => "status",
        "Get" | "Delete" => "main",
        _ => "unknown",
    }
}

/// The W3C trace context of a request's headers, for the span of a refusal.
fn trace_context(headers: &http::HeaderMap) -> MetadataMap {
    let mut trace = http::HeaderMap::new();
    for name in ["traceparent", "tracestate"] {
        if let Some(value) = headers.get(name) {
            trace.insert(name, value.clone());
        }
    }
    MetadataMap::from_headers(trace)
}

/// Records a refusal made at the edge on `span` and in the metrics.
fn record_refusal(
    metrics: &Metrics,
    span: &tracing::Span,
    method: &'static str,
    status: &tonic::Status,
    started: std::time::Instant,
) {
    let reason = status.get_details_error_info().map(|info| info.reason);
    telemetry::record_rpc_end(span, status.code(), reason.as_deref());
    span.record("safewrite.attempts", 0i64);
    metrics.rpc_done(
        method,
        method_subresource(method),
        status.code(),
        reason.as_deref(),
        0,
        started.elapsed(),
    );
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How much of a refused call's first message is read before its answer, and for how
/// long at most (see [`receive::read_first_message`]).
const REFUSED_READ_BYTES: usize = 64 * 1024;
const REFUSED_READ_TIME: std::time::Duration = std::time::Duration::from_secs(1);

// === impl Edge ===

impl<S> tower::Service<http::Request<Body>> for Edge<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let method = method(request.uri().path());
        let started = std::time::Instant::now();
        if let Some(Err(refusal)) = self.token.as_ref().map(|t| t.check(request.headers())) {
            let span = telemetry::rpc_span(method, &trace_context(request.headers()));
            let status = span.in_scope(|| respond::unauthenticated(refusal));
            record_refusal(&self.metrics, &span, method, &status, started);
            // Answered once the first message is in (a begin, at most 64 KiB of it, within
            // a second): grpc.aio reports a Transact whose begin is cut off by the answer
            // as INTERNAL instead of the answer.
            let body = request.into_body();
            return Box::pin(async move {
                receive::read_first_message(body, REFUSED_READ_BYTES, REFUSED_READ_TIME).await;
                Ok(status.into_http())
            });
        }
        let timeout = grpc_timeout_of(request.headers());
        if let Some(timeout) = timeout
            && timeout < safewrite_api::deadline::MIN_ANSWER_MARGIN
        {
            let span = telemetry::rpc_span(method, &trace_context(request.headers()));
            let status = span.in_scope(|| respond::no_time(timeout));
            record_refusal(&self.metrics, &span, method, &status, started);
            return Box::pin(std::future::ready(Ok(status.into_http())));
        }
        let reached = Reached::default();
        request.extensions_mut().insert(reached.clone());
        request
            .extensions_mut()
            .insert(CallDeadline::after(timeout));
        // Only the trace context is needed, and only for a refusal.
        let trace = trace_context(request.headers());
        let max_request_bytes = self.max_request_bytes;
        let metrics = self.metrics.clone();
        // The clone that was made ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let response = inner.call(request).await?;
            if reached.get() {
                return Ok(response);
            }
            // A trailers-only response: tonic keeps the status (with its source) in the
            // extensions, and writes it into the headers.
            let refused = response
                .extensions()
                .get::<tonic::Status>()
                .cloned()
                .or_else(|| tonic::Status::from_header_map(response.headers()));
            let Some(refused) = refused else {
                return Ok(response);
            };
            if refused.code() == tonic::Code::Ok {
                return Ok(response);
            }
            let span = telemetry::rpc_span(method, &trace);
            let status = span.in_scope(|| {
                respond::unread_message(&refused, max_request_bytes, &[])
                    .unwrap_or_else(|| respond::refused_request(&refused))
            });
            record_refusal(&metrics, &span, method, &status, started);
            Ok(status.into_http())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_named_like_the_rpc_metrics() {
        assert_eq!(
            method("/safewrite.v1.WriterService/UpdateWithRetry"),
            "UpdateWithRetry"
        );
        assert_eq!(method("/safewrite.v1.WriterService/Transact"), "Transact");
        assert_eq!(method("/safewrite.v1.WriterService/Lead"), "Lead");
        assert_eq!(method("/safewrite.v1.WriterService/Nope"), "unknown");
    }

    #[test]
    fn decoder_refusals_get_safewrite_codes_and_details() {
        let too_large = tonic::Status::out_of_range(
            "Error, decoded message length too large: found 100027 bytes, the limit is: 65536 bytes",
        );
        let status = respond::unread_message(&too_large, 65536, &[]).expect("a refusal");
        assert_eq!(status.code(), tonic::Code::OutOfRange);
        assert!(status.message().contains("100027 bytes"), "{status:?}");
        assert!(
            status.message().contains("--max-request-bytes"),
            "{status:?}"
        );
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "REQUEST_TOO_LARGE");
        assert_eq!(info.domain, respond::DOMAIN);
        assert_eq!(info.metadata["limit_bytes"], "65536");

        let garbage = tonic::Status::internal(
            "failed to decode Protobuf message: invalid wire type value: 7",
        );
        let status = respond::unread_message(&garbage, 65536, &[]).expect("a refusal");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.get_details_error_info().expect("ErrorInfo").reason,
            "MALFORMED_REQUEST"
        );

        // A transport failure is not about the message.
        let reset = tonic::Status::from_error(Box::new(h2_like_error()));
        assert!(respond::unread_message(&reset, 65536, &[]).is_none());
        let status = respond::refused_request(&reset);
        assert_eq!(status.code(), reset.code());
        assert_eq!(
            status.get_details_error_info().expect("ErrorInfo").reason,
            "REQUEST_NOT_READ"
        );
    }

    /// An error tonic cannot map: it becomes UNKNOWN with a source.
    fn h2_like_error() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stream reset")
    }
}
