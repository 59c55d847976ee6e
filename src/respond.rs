//! Every gRPC status the Writer service returns is chosen here: a write failure ->
//! code, a plain message saying what happened and what to do, and rich details
//! (google.rpc ErrorInfo, BadRequest, RetryInfo, plus safewrite.v1.WriteFailure with the
//! attempts made and, for precondition failures, the current object).

use std::time::Duration;

use prost::Message;
use prost_types::Any;
use tonic::Code;
use tonic_types::pb as rpc;

use crate::classify::Decision;
use crate::discovery::DiscoveryError;
use crate::engine::{Failure, WriteError};
use crate::mutation::{ApplyError, FieldViolation};
use crate::pb;

/// The ErrorInfo domain of every error safewrite returns.
pub const DOMAIN: &str = "safewrite.dev";

/// The details to attach, beside code and message.
#[derive(Default)]
struct Details {
    reason: String,
    metadata: Vec<(String, String)>,
    violations: Vec<FieldViolation>,
    retry_after: Option<Duration>,
    current_object: Option<serde_json::Value>,
}

/// Maps a failed write to its gRPC status. The one place codes are chosen for writes.
pub fn to_status(err: &WriteError) -> tonic::Status {
    let attempts = err.attempts.len();
    let mut details = Details::default();
    let (code, message) = match &err.failure {
        Failure::Invalid(violation) => {
            details.reason = "INVALID_REQUEST".into();
            details.violations.push(violation.clone());
            (
                Code::InvalidArgument,
                format!("invalid request: {violation}; nothing was sent"),
            )
        }
        Failure::UnknownKind(DiscoveryError::BadApiVersion(v)) => {
            details.reason = "INVALID_REQUEST".into();
            details.violations.push(FieldViolation::new(
                "target.api_version",
                format!("{v:?} is not of the form \"v1\" or \"group/version\""),
            ));
            (
                Code::InvalidArgument,
                format!("invalid request: apiVersion {v:?} does not parse; nothing was sent"),
            )
        }
        Failure::UnknownKind(e) => {
            details.reason = "UNKNOWN_KIND".into();
            (
                Code::NotFound,
                format!(
                    "{e}: check target.api_version and target.kind (is its CRD installed?); nothing was sent"
                ),
            )
        }
        Failure::Discovery(e) => {
            details.reason = "DISCOVERY_FAILED".into();
            details.retry_after = Some(Duration::from_secs(1));
            (Code::Unavailable, format!("{e}; retry later"))
        }
        Failure::PreconditionFailed { reason, current } => {
            details.reason = "PRECONDITION_FAILED".into();
            details.current_object = Some(current.clone());
            (
                Code::FailedPrecondition,
                format!(
                    "precondition failed: {reason}; nothing was written (the current object is in the WriteFailure detail)"
                ),
            )
        }
        Failure::Mutation { error, current } => match error {
            ApplyError::CelNotAMap(_) | ApplyError::CelNotABool(_) | ApplyError::CelTooSlow(_) => {
                details.reason = "INVALID_CEL".into();
                let field = if matches!(error, ApplyError::CelNotABool(_)) {
                    "preconditions.cel"
                } else {
                    "mutation.cel.expression"
                };
                details
                    .violations
                    .push(FieldViolation::new(field, error.to_string()));
                (
                    Code::InvalidArgument,
                    format!("{error}; nothing was written"),
                )
            }
            _ => {
                details.reason = "MUTATION_DOES_NOT_APPLY".into();
                details.current_object = Some(current.clone());
                (
                    Code::FailedPrecondition,
                    format!(
                        "{error}; nothing was written (the current object is in the WriteFailure detail)"
                    ),
                )
            }
        },
        Failure::ResourceVersionMismatch { current, .. } => {
            details.reason = "RESOURCE_VERSION_MISMATCH".into();
            details.current_object = current.clone();
            (
                Code::Aborted,
                format!("{}; nothing was written", err.failure),
            )
        }
        Failure::Api {
            decision,
            code,
            reason,
            message,
            status,
            ..
        } => {
            details.reason = if reason.is_empty() {
                format!("HTTP_{code}")
            } else {
                reason.clone()
            };
            details
                .metadata
                .push(("http_status".into(), code.to_string()));
            api_status(
                decision,
                *code,
                reason,
                message,
                status.as_deref(),
                attempts,
                &mut details,
            )
        }
        Failure::Transport { error } => {
            details.reason = "API_SERVER_UNREACHABLE".into();
            details.retry_after = Some(Duration::from_secs(1));
            (
                Code::Unavailable,
                format!("{error} (after {attempts} attempt(s)); retry later"),
            )
        }
        Failure::Deadline { .. } => {
            details.reason = "DEADLINE_EXCEEDED".into();
            (
                Code::DeadlineExceeded,
                format!("{}; give the call a longer deadline", err.failure),
            )
        }
        Failure::OutcomeUnknown { .. } => {
            details.reason = "WRITE_OUTCOME_UNKNOWN".into();
            (
                Code::Unknown,
                format!("{} (attempt {attempts})", err.failure),
            )
        }
        Failure::RetryBudget { .. } => {
            details.reason = "RETRY_BUDGET_EXHAUSTED".into();
            details.retry_after = Some(Duration::from_secs(1));
            (
                Code::Unavailable,
                format!("{} (after {attempts} attempt(s)); retry later", err.failure),
            )
        }
        Failure::CircuitOpen { retry_after } => {
            details.reason = "CIRCUIT_OPEN".into();
            details.retry_after = Some(*retry_after);
            (
                Code::Unavailable,
                format!(
                    "{}; nothing was sent; retry after the RetryInfo delay",
                    err.failure
                ),
            )
        }
        Failure::RateLimited { wait } => {
            details.reason = "RATE_LIMITED".into();
            details.retry_after = Some(*wait);
            (
                Code::ResourceExhausted,
                format!(
                    "{}; nothing more was sent; retry after the RetryInfo delay, or give the call a longer deadline",
                    err.failure
                ),
            )
        }
        Failure::Cancelled(why) => {
            details.reason = "TRANSACTION_CANCELLED".into();
            (
                Code::Cancelled,
                format!("{why}; nothing was written after that point"),
            )
        }
        Failure::BadAnswer(e) => {
            details.reason = "BAD_ANSWER".into();
            (Code::Internal, e.to_string())
        }
    };
    details
        .metadata
        .push(("attempts".into(), attempts.to_string()));
    build(code, message, details, &err.attempts)
}

/// The code and message for an API server answer that ended the loop.
fn api_status(
    decision: &Decision,
    code: u16,
    reason: &str,
    message: &str,
    status: Option<&kube::core::Status>,
    attempts: usize,
    details: &mut Details,
) -> (Code, String) {
    let said = format!("{code} {reason}: {message}");
    match decision {
        Decision::Conflict => (
            Code::Aborted,
            format!(
                "the object kept changing: {attempts} attempt(s) each met a conflict ({said}); raise retry_policy.max_attempts, or requeue and try later"
            ),
        ),
        Decision::AlreadyExists => (
            Code::Aborted,
            format!(
                "the object was created and deleted concurrently {attempts} time(s) ({said}); try again"
            ),
        ),
        Decision::FieldManagerConflict { fields } => {
            details.reason = "FieldManagerConflict".into();
            (
                Code::Aborted,
                format!(
                    "server-side apply conflicts with other field managers on: {}; set apply.force to take these fields over, or leave them out of the configuration; nothing was written",
                    fields.join(", ")
                ),
            )
        }
        Decision::Throttled { retry_after } => {
            details.retry_after = Some(retry_after.unwrap_or(Duration::from_secs(1)));
            (
                Code::Unavailable,
                format!(
                    "the API server kept throttling after {attempts} attempt(s) ({said}); retry after the RetryInfo delay"
                ),
            )
        }
        Decision::Unavailable { retry_after } => {
            details.retry_after = Some(retry_after.unwrap_or(Duration::from_secs(1)));
            (
                Code::Unavailable,
                format!(
                    "the API server is unavailable after {attempts} attempt(s) ({said}); retry later"
                ),
            )
        }
        Decision::Internal => (
            Code::Internal,
            format!(
                "the API server failed internally ({said}), e.g. an admission webhook; it was retried a few times"
            ),
        ),
        Decision::Invalid => {
            if let Some(causes) = status.and_then(|s| s.details.as_ref()).map(|d| &d.causes) {
                for cause in causes {
                    let violation = FieldViolation::new(
                        if cause.field.is_empty() {
                            "object"
                        } else {
                            cause.field.as_str()
                        },
                        if cause.message.is_empty() {
                            cause.reason.clone()
                        } else {
                            cause.message.clone()
                        },
                    );
                    // The API server may repeat a cause; say each once.
                    if !details.violations.contains(&violation) {
                        details.violations.push(violation);
                    }
                }
            }
            (
                Code::InvalidArgument,
                format!(
                    "the API server refused the object as invalid ({said}); fix the fields named in the BadRequest detail; not retried"
                ),
            )
        }
        Decision::BadRequest => (
            Code::InvalidArgument,
            format!("the API server refused the request ({said}); not retried"),
        ),
        Decision::Unauthenticated => (
            Code::Unauthenticated,
            format!(
                "the API server did not accept the sidecar's credentials ({said}); check its kubeconfig or service account"
            ),
        ),
        Decision::Forbidden => (
            Code::PermissionDenied,
            format!(
                "the sidecar's identity may not do this ({said}); grant it the verb on this resource with RBAC"
            ),
        ),
        Decision::NotFound => (
            Code::NotFound,
            format!(
                "the object does not exist ({said}); set options.create_if_missing_json to create it"
            ),
        ),
        Decision::Success | Decision::Unexpected => (
            Code::Internal,
            format!("unexpected answer from the API server ({said})"),
        ),
    }
}

/// RESOURCE_EXHAUSTED when `max` RPCs are already in flight (load shedding).
pub fn overloaded(max: usize) -> tonic::Status {
    let details = Details {
        reason: "OVERLOADED".into(),
        metadata: vec![("attempts".into(), "0".into())],
        retry_after: Some(Duration::from_millis(100)),
        ..Details::default()
    };
    build(
        Code::ResourceExhausted,
        format!(
            "safewrite already has {max} RPCs in flight (--max-in-flight); nothing was sent; retry after the RetryInfo delay"
        ),
        details,
        &[],
    )
}

/// INVALID_ARGUMENT for a request that fails validation before anything is sent.
pub fn invalid_request(violation: &FieldViolation) -> tonic::Status {
    let details = Details {
        reason: "INVALID_REQUEST".into(),
        metadata: vec![("attempts".into(), "0".into())],
        violations: vec![violation.clone()],
        ..Details::default()
    };
    build(
        Code::InvalidArgument,
        format!("invalid request: {violation}; nothing was sent"),
        details,
        &[],
    )
}

fn any<M: Message>(type_name: &str, message: &M) -> Any {
    Any {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: message.encode_to_vec(),
    }
}

fn build(
    code: Code,
    message: String,
    details: Details,
    attempts: &[pb::AttemptRecord],
) -> tonic::Status {
    let mut anys = vec![any(
        "google.rpc.ErrorInfo",
        &rpc::ErrorInfo {
            reason: details.reason,
            domain: DOMAIN.into(),
            metadata: details.metadata.into_iter().collect(),
        },
    )];
    if !details.violations.is_empty() {
        anys.push(any(
            "google.rpc.BadRequest",
            &rpc::BadRequest {
                field_violations: details
                    .violations
                    .into_iter()
                    .map(|v| rpc::bad_request::FieldViolation {
                        field: v.field,
                        description: v.description,
                        ..Default::default()
                    })
                    .collect(),
            },
        ));
    }
    if let Some(delay) = details.retry_after {
        anys.push(any(
            "google.rpc.RetryInfo",
            &rpc::RetryInfo {
                retry_delay: Some(prost_types::Duration {
                    seconds: delay.as_secs() as i64,
                    nanos: delay.subsec_nanos() as i32,
                }),
            },
        ));
    }
    anys.push(any(
        "safewrite.v1.WriteFailure",
        &pb::WriteFailure {
            attempt_records: attempts.to_vec(),
            current_object_json: details
                .current_object
                .filter(|v| !v.is_null())
                .map(|v| v.to_string())
                .unwrap_or_default(),
            // Built inside the RPC's span: its trace id, so the caller can find the trace.
            trace_id: crate::telemetry::trace_id(&tracing::Span::current()),
        },
    ));
    let status = rpc::Status {
        code: code as i32,
        message: message.clone(),
        details: anys,
    };
    tonic::Status::with_details(code, message, status.encode_to_vec().into())
}
