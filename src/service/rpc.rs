//! Per-RPC bookkeeping shared by the unary RPCs, Transact and the edge: an RPC's place
//! in flight, the policy's word on it, its span's fields, its metrics when it ends, its
//! result message, and the caller's deadline from `grpc-timeout`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tonic::Status;
use tonic_types::StatusExt as _;
use tracing::Span;

use safewrite_api::pb;
use safewrite_engine::{Subresource, Written};

use super::policy::{AllowList, Operation};
use super::respond;
use crate::metrics::{InFlight, Metrics};
use crate::telemetry;

/// An RPC being served: its span, and when it started (what its end is recorded with).
pub struct RpcSpan {
    /// The RPC's span.
    pub span: Span,
    /// When the RPC arrived.
    pub started: std::time::Instant,
}

/// An RPC's place among those in flight; it is given back when dropped.
pub struct Admission {
    pub(super) _permit: OwnedSemaphorePermit,
    pub(super) _gauge: InFlight,
    /// Where the RPC is counted when it ends.
    pub(super) metrics: Arc<Metrics>,
}

impl Admission {
    /// Where the RPC is counted when it ends.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Whether `policy` allows `operation` of the validated write; PERMISSION_DENIED
/// (reason `POLICY_DENIED`) before anything is sent when it does not.
pub(super) fn permit(
    policy: &AllowList,
    spec: &safewrite_engine::WriteSpec,
    operation: Operation,
) -> Result<(), Status> {
    policy.check(spec, operation).map_err(|denied| {
        tracing::debug!(
            operation = denied.operation.name(),
            kind = %denied.kind,
            rule = %denied.rule,
            "write denied by the policy"
        );
        respond::policy_denied(&denied)
    })
}

/// The result message of a finished write.
pub fn write_result(written: Written, span: &Span) -> pb::WriteResult {
    pb::WriteResult {
        outcome: respond::outcome(written.outcome) as i32,
        // No object (a finalizer removal that found it gone) is no JSON at all.
        object_json: if written.object.is_null() {
            String::new()
        } else {
            written.object.into_json()
        },
        resource_version: written.resource_version,
        attempts: written.attempts.len() as u32,
        attempt_records: respond::records(&written.attempts),
        trace_id: telemetry::trace_id(span),
        already_applied: written.already_applied,
    }
}

/// A short lowercase name of a result's outcome, for spans and metrics.
/// The names are the engine's ([`safewrite_engine::Outcome::name`]).
pub fn outcome_name(outcome: pb::Outcome, already_applied: bool) -> &'static str {
    let outcome = match outcome {
        pb::Outcome::Updated => safewrite_engine::Outcome::Updated,
        pb::Outcome::Unchanged => safewrite_engine::Outcome::Unchanged,
        pb::Outcome::Created => safewrite_engine::Outcome::Created,
        pb::Outcome::Aborted => safewrite_engine::Outcome::Aborted,
        pb::Outcome::Gone => safewrite_engine::Outcome::Gone,
        pb::Outcome::Unspecified => return "unspecified",
    };
    outcome.name(already_applied)
}

/// Records the target's identity (never its contents) on the RPC span. Only a validated
/// target is recorded: a caller's raw strings never reach spans or logs.
pub fn record_target(span: &Span, target: &safewrite_api::target::Target) {
    if !target.namespace.is_empty() {
        span.record("k8s.namespace.name", &*target.namespace);
    }
    span.record("safewrite.target.api_version", &*target.api_version);
    span.record("safewrite.target.kind", &*target.kind);
    span.record("safewrite.target.name", &*target.name);
}

/// The metrics label of a subresource; `unknown` before the request named one.
pub fn subresource_label(subresource: Option<Subresource>) -> &'static str {
    match subresource {
        Some(Subresource::Main) => "main",
        Some(Subresource::Status) => "status",
        None => "unknown",
    }
}

/// Records a finished write RPC on `subresource` (when it is known): its code, outcome
/// and attempts on its span, and in the metrics.
pub fn finish_rpc(
    metrics: &Metrics,
    span: &Span,
    method: &'static str,
    subresource: Option<Subresource>,
    started: std::time::Instant,
    result: Result<&pb::WriteResult, &Status>,
) {
    let result = result.map(|result| {
        let outcome = outcome_name(result.outcome(), result.already_applied);
        span.record("safewrite.already_applied", result.already_applied);
        metrics.outcome(outcome, subresource_label(subresource));
        (outcome, result.attempts)
    });
    end_rpc(metrics, span, method, subresource, started, result);
}

/// Records a finished RPC: its code, outcome (`Ok`: its name and the attempts made) and
/// attempts on its span, and in the metrics.
pub fn end_rpc(
    metrics: &Metrics,
    span: &Span,
    method: &'static str,
    subresource: Option<Subresource>,
    started: std::time::Instant,
    result: Result<(&'static str, u32), &Status>,
) {
    let subresource = subresource_label(subresource);
    let (code, reason, attempts) = match result {
        Ok((outcome, attempts)) => {
            span.record("safewrite.outcome", outcome);
            telemetry::record_rpc_end(span, tonic::Code::Ok, None);
            (tonic::Code::Ok, None, attempts)
        }
        Err(status) => {
            let info = status.get_details_error_info();
            let attempts = info
                .as_ref()
                .and_then(|i| i.metadata.get("attempts"))
                .and_then(|a| a.parse().ok())
                .unwrap_or(0);
            telemetry::record_rpc_end(
                span,
                status.code(),
                info.as_ref().map(|i| i.reason.as_str()),
            );
            (status.code(), info.map(|i| i.reason), attempts)
        }
    };
    span.record("safewrite.attempts", i64::from(attempts));
    match reason.as_deref() {
        Some("FENCED") => metrics.fence_refused("fenced"),
        Some("NOT_LEADER") => metrics.fence_refused("not_leader"),
        _ => {}
    }
    metrics.rpc_done(
        method,
        subresource,
        code,
        reason.as_deref(),
        attempts,
        started.elapsed(),
    );
}

/// The caller's timeout from a request's `grpc-timeout` header (e.g. "1500m" = 1.5 s).
pub fn grpc_timeout_of(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}
