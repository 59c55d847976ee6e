//! The span of each attempt and what is recorded on it: the attempt's number and batch,
//! the resourceVersions read and written, the answer, the decision and the outcome.

use tracing::Span;
use tracing::field::Empty;

use super::error::Failure;
use super::result::{Done, Outcome};

/// The span of one attempt, a child of the current span; its fields are recorded as
/// the attempt goes.
pub(crate) fn attempt_span(number: u32) -> Span {
    tracing::info_span!(
        "attempt",
        otel.name = "attempt",
        otel.status_code = Empty,
        safewrite.attempt = i64::from(number),
        safewrite.batch_size = Empty,
        safewrite.resource_version.read = Empty,
        safewrite.resource_version.written = Empty,
        http.response.status_code = Empty,
        safewrite.k8s.reason = Empty,
        safewrite.decision = Empty,
        safewrite.outcome = Empty,
        safewrite.backoff_ms = Empty,
        error.type = Empty,
    )
}

/// Records a finished attempt's outcome on its span.
pub(crate) fn record_done(span: &Span, done: &Done) {
    span.record("safewrite.outcome", done.outcome.name(done.already_applied));
    if matches!(done.outcome, Outcome::Updated | Outcome::Created) && !done.already_applied {
        span.record(
            "safewrite.resource_version.written",
            done.object.resource_version().as_str(),
        );
    }
}

/// Records a failed attempt on its span.
pub(crate) fn record_failure(span: &Span, decision: &str, failure: &Failure) {
    span.record("safewrite.decision", decision);
    span.record("error.type", failure.kind());
    span.record("otel.status_code", "ERROR");
}
