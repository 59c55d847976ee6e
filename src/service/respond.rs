//! Every gRPC status the Writer service returns is chosen here: a write failure ->
//! code, a plain message saying what happened and what to do, and rich details
//! (google.rpc ErrorInfo, BadRequest, RetryInfo, plus safewrite.v1.WriteFailure with the
//! attempts made and, for precondition failures, the current object). Refusals made
//! outside the write loop are chosen here too: overload, invalid requests, messages tonic
//! could not read (too large, malformed), idle transactions, writes the policy denies and
//! calls without the shared token.
//!
//! [`REASONS`] (in `crate::reasons`) lists every ErrorInfo reason an answer can carry:
//! the bounded set of the `reason` label of `safewrite_rpcs_total`.

use std::time::Duration;

use prost::Message;
use prost_types::Any;
use tonic::Code;
use tonic_types::pb as rpc;

use crate::classify::Decision;
use crate::client::discovery::DiscoveryError;
use crate::engine::mutation::{ApplyError, FieldViolation};
use crate::engine::{AttemptRecord, Failure, Outcome, WriteError};
use crate::pb;
use crate::receive::Refused;

/// The ErrorInfo domain of every error safewrite returns.
pub const DOMAIN: &str = "safewrite.dev";

pub use crate::reasons::REASONS;

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
            ApplyError::CelNotAMap(_)
            | ApplyError::CelNotABool(_)
            | ApplyError::CelTooSlow(_)
            | ApplyError::CelTooCostly { .. }
            | ApplyError::CelResultTooLarge { .. }
            | ApplyError::CelTooManySteps(_) => {
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
            ApplyError::CelBusy => {
                details.reason = "CEL_BUSY".into();
                details.retry_after = Some(Duration::from_secs(1));
                (
                    Code::ResourceExhausted,
                    format!("{error}; nothing was written"),
                )
            }
            ApplyError::CelDeadline => {
                details.reason = "DEADLINE_EXCEEDED".into();
                (
                    Code::DeadlineExceeded,
                    format!("{error}; nothing was written; give the call a longer deadline"),
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
        Decision::Conflict | Decision::Stale => (
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
            details.reason = "FIELD_MANAGER_CONFLICT".into();
            (
                Code::Aborted,
                format!(
                    "server-side apply conflicts with other field managers on: {}; set apply.force to take these fields over, or leave them out of the configuration; nothing was written",
                    fields.join(", ")
                ),
            )
        }
        Decision::DisruptionBudget => (
            Code::FailedPrecondition,
            format!(
                "the API server refused it to protect a PodDisruptionBudget ({said}); this is not throttling: try again once the budget allows a disruption"
            ),
        ),
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

/// DEADLINE_EXCEEDED (no attempts) for a call whose deadline, `timeout`, is shorter than
/// the sidecar needs to answer it ([`crate::client::MIN_ANSWER_MARGIN`]): answered before
/// anything else, so that the gRPC server's own timeout (a bare CANCELLED "Timeout
/// expired") does not come first.
pub fn no_time(timeout: Duration) -> tonic::Status {
    to_status(&WriteError {
        failure: Failure::Deadline {
            attempts: 0,
            last: format!(
                "the call's deadline ({timeout:?}) is shorter than the {:?} safewrite needs to answer; nothing was sent",
                crate::client::MIN_ANSWER_MARGIN
            ),
        },
        attempts: Vec::new(),
    })
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

/// PERMISSION_DENIED (reason `POLICY_DENIED`) for a write the sidecar's policy does not
/// allow: nothing was sent. The message and the ErrorInfo metadata name what was denied
/// and the `--allow` flag that would allow it.
pub fn policy_denied(denied: &crate::policy::Denied) -> tonic::Status {
    let place = if denied.namespace.is_empty() {
        "cluster-scoped".to_string()
    } else {
        format!("in namespace {}", denied.namespace)
    };
    let details = Details {
        reason: "POLICY_DENIED".into(),
        metadata: vec![
            ("attempts".into(), "0".into()),
            ("operation".into(), denied.operation.name().into()),
            ("kind".into(), denied.kind.clone()),
            ("namespace".into(), denied.namespace.clone()),
            ("subresource".into(), denied.subresource.into()),
            ("rule".into(), denied.rule.clone()),
            ("allow".into(), denied.allow.clone()),
        ],
        ..Details::default()
    };
    build(
        Code::PermissionDenied,
        format!(
            "the sidecar's policy does not allow {} of {} {:?} {place} ({} resource): {}; nothing was sent; to allow it, start safewrite with {} (or add the rule to its --policy file)",
            denied.operation.name(),
            denied.kind,
            denied.name,
            denied.subresource,
            denied.why,
            denied.allow,
        ),
        details,
        &[],
    )
}

/// UNAUTHENTICATED (reason `TOKEN_REQUIRED` or `TOKEN_INVALID`) for a call without the
/// sidecar's shared token: nothing was read or sent.
pub fn unauthenticated(refusal: crate::auth::Refusal) -> tonic::Status {
    let said = match refusal {
        crate::auth::Refusal::Missing => "this sidecar requires a token and the call carries none",
        crate::auth::Refusal::Invalid => "the call's token is not this sidecar's",
    };
    let details = Details {
        reason: refusal.reason().into(),
        metadata: vec![("attempts".into(), "0".into())],
        ..Details::default()
    };
    build(
        Code::Unauthenticated,
        format!(
            "{said}: send gRPC metadata `authorization: Bearer <token>` with the token of the sidecar's --token-file; nothing was sent"
        ),
        details,
        &[],
    )
}

/// INVALID_ARGUMENT for a request that fails validation before anything is sent.
pub fn invalid_request(violation: &FieldViolation) -> tonic::Status {
    // A CEL expression that does not compile is INVALID_CEL, as one that fails to
    // evaluate is: the proto's Reason says so, and clients tell the two apart by it.
    let cel = violation.field.ends_with(".cel") || violation.field.ends_with(".cel.expression");
    let details = Details {
        reason: if cel {
            "INVALID_CEL"
        } else {
            "INVALID_REQUEST"
        }
        .into(),
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

/// The status for a request message that tonic's decoder refused (`status`) before
/// safewrite could read it: OUT_OF_RANGE (reason `REQUEST_TOO_LARGE`) for a message over
/// `--max-request-bytes`, INVALID_ARGUMENT (reason `MALFORMED_REQUEST`) for one that does
/// not decode (bad protobuf, bad compression flag, truncated, missing);
/// RESOURCE_EXHAUSTED (reason `OVERLOADED`) for one that did not fit in
/// `--max-receiving-bytes`, and DEADLINE_EXCEEDED (reason `REQUEST_NOT_READ`) for one
/// that did not arrive within `--receive-timeout` (see [`crate::receive`]). None when
/// `status` is not about the message but about its transport (the caller's stream
/// failed): see [`refused_request`]. `attempts` are those of a transaction in progress.
pub fn unread_message(
    status: &tonic::Status,
    max_request_bytes: usize,
    attempts: &[AttemptRecord],
) -> Option<tonic::Status> {
    let outcome = if attempts.is_empty() {
        "nothing was sent"
    } else {
        "nothing was written after that point"
    };
    let mut details = Details {
        metadata: vec![("attempts".into(), attempts.len().to_string())],
        ..Details::default()
    };
    if let Some(refused) = Refused::of(status) {
        let code = match refused {
            Refused::Budget { limit } => {
                details.reason = "OVERLOADED".into();
                details.retry_after = Some(Duration::from_millis(100));
                details
                    .metadata
                    .push(("limit_bytes".into(), limit.to_string()));
                Code::ResourceExhausted
            }
            Refused::Timeout { .. } => {
                details.reason = "REQUEST_NOT_READ".into();
                Code::DeadlineExceeded
            }
        };
        let retry = if details.retry_after.is_some() {
            "; retry after the RetryInfo delay"
        } else {
            ""
        };
        return Some(build(
            code,
            format!("{refused}; {outcome}{retry}"),
            details,
            attempts,
        ));
    }
    match status.code() {
        // tonic: "... found {len} bytes, the limit is: {limit} bytes"; decompression:
        // "... size limit, of {limit} bytes, exceeded ...".
        Code::OutOfRange | Code::ResourceExhausted => {
            let found = status
                .message()
                .split_once("found ")
                .and_then(|(_, rest)| rest.split_once(' '))
                .and_then(|(n, _)| n.parse::<u64>().ok());
            details.reason = "REQUEST_TOO_LARGE".into();
            details
                .metadata
                .push(("limit_bytes".into(), max_request_bytes.to_string()));
            let size = match found {
                Some(found) => {
                    details
                        .metadata
                        .push(("found_bytes".into(), found.to_string()));
                    format!("the request message has {found} bytes")
                }
                None => "the request message is too large".to_string(),
            };
            Some(build(
                Code::OutOfRange,
                format!(
                    "{size}, over the limit of {max_request_bytes} bytes (--max-request-bytes); {outcome}"
                ),
                details,
                attempts,
            ))
        }
        // The decoder's own refusals carry no source; a failed transport (an HTTP/2
        // error, a reset) does.
        Code::Internal if std::error::Error::source(status).is_none() => {
            details.reason = "MALFORMED_REQUEST".into();
            Some(build(
                Code::InvalidArgument,
                format!(
                    "malformed request: {} (is the client built from the same safewrite.v1 proto?); {outcome}",
                    status.message()
                ),
                details,
                attempts,
            ))
        }
        _ => None,
    }
}

/// A refusal tonic made before safewrite read the request that is not about the message
/// itself (unknown method, unsupported encoding, a failed transport): the same code and
/// message, with the rich details every error carries (reason `UNIMPLEMENTED` or
/// `REQUEST_NOT_READ`).
pub fn refused_request(status: &tonic::Status) -> tonic::Status {
    let (reason, message) = match status.code() {
        Code::Unimplemented => (
            "UNIMPLEMENTED",
            format!(
                "not implemented by safewrite: {}; nothing was sent",
                match status.message() {
                    "" => "unknown method",
                    said => said,
                }
            ),
        ),
        _ => (
            "REQUEST_NOT_READ",
            format!(
                "the request could not be read: {}; nothing was sent",
                status.message()
            ),
        ),
    };
    let details = Details {
        reason: reason.into(),
        metadata: vec![("attempts".into(), "0".into())],
        ..Details::default()
    };
    build(status.code(), message, details, &[])
}

/// DEADLINE_EXCEEDED (reason `TRANSACTION_IDLE`) for a transaction whose caller sent
/// nothing for `bound` (`--transact-idle-timeout`) while safewrite waited for its
/// `waiting_for` (the begin, or a proposal answering a fresh object). The caller's own
/// deadline, when it comes first, is reported as DEADLINE_EXCEEDED with reason
/// `DEADLINE_EXCEEDED` instead.
pub fn transact_idle(
    waiting_for: &str,
    bound: Duration,
    attempts: &[AttemptRecord],
) -> tonic::Status {
    let details = Details {
        reason: "TRANSACTION_IDLE".into(),
        metadata: vec![
            ("attempts".into(), attempts.len().to_string()),
            ("waiting_for".into(), waiting_for.into()),
            (
                "idle_timeout".into(),
                humantime::format_duration(bound).to_string(),
            ),
        ],
        ..Details::default()
    };
    let outcome = if attempts.is_empty() {
        "nothing was sent"
    } else {
        "nothing was written after that point"
    };
    build(
        Code::DeadlineExceeded,
        format!(
            "the transaction's caller sent no {waiting_for} within {} (--transact-idle-timeout); {outcome}",
            humantime::format_duration(bound)
        ),
        details,
        attempts,
    )
}

/// The `Reason` enum value of an ErrorInfo reason: safewrite's own reasons are the
/// value's name without its `REASON_` prefix; any other reason was the API server's.
pub fn reason_of(reason: &str) -> pb::Reason {
    pb::Reason::from_str_name(&format!("REASON_{reason}"))
        .filter(|r| !matches!(r, pb::Reason::Unspecified | pb::Reason::ApiServer))
        .unwrap_or(pb::Reason::ApiServer)
}

/// The attempt records as the proto sends them.
pub fn records(attempts: &[AttemptRecord]) -> Vec<pb::AttemptRecord> {
    attempts
        .iter()
        .map(|record| pb::AttemptRecord {
            number: record.number,
            resource_version_read: record.resource_version_read.clone(),
            http_status: u32::from(record.http_status),
            reason: record.reason.clone(),
            backoff: record.backoff.map(|wait| prost_types::Duration {
                seconds: wait.as_secs() as i64,
                nanos: wait.subsec_nanos() as i32,
            }),
            batch_size: record.batch_size,
        })
        .collect()
}

/// The outcome as the proto sends it.
pub fn outcome(outcome: Outcome) -> pb::Outcome {
    match outcome {
        Outcome::Updated => pb::Outcome::Updated,
        Outcome::Unchanged => pb::Outcome::Unchanged,
        Outcome::Created => pb::Outcome::Created,
        Outcome::Aborted => pb::Outcome::Aborted,
    }
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
    attempts: &[AttemptRecord],
) -> tonic::Status {
    let reason = reason_of(&details.reason);
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
            attempt_records: records(attempts),
            current_object_json: details
                .current_object
                .filter(|v| !v.is_null())
                .map(|v| v.to_string())
                .unwrap_or_default(),
            // Built inside the RPC's span: its trace id, so the caller can find the trace.
            trace_id: crate::telemetry::trace_id(&tracing::Span::current()),
            reason: reason as i32,
        },
    ));
    let status = rpc::Status {
        code: code as i32,
        message: message.clone(),
        details: anys,
    };
    tonic::Status::with_details(code, message, status.encode_to_vec().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cel_expression_that_does_not_compile_is_invalid_cel() {
        for (field, reason) in [
            ("mutation.cel.expression", "INVALID_CEL"),
            ("preconditions.cel", "INVALID_CEL"),
            ("proposal.mutation.cel.expression", "INVALID_CEL"),
            ("target.name", "INVALID_REQUEST"),
        ] {
            let status = invalid_request(&FieldViolation::new(field, "no"));
            assert_eq!(status.code(), Code::InvalidArgument);
            let info = tonic_types::StatusExt::get_details_error_info(&status).unwrap();
            assert_eq!(info.reason, reason, "{field}");
        }
    }

    /// Every reason literal chosen in this file is in [`REASONS`], so that the metrics'
    /// `reason` label names it rather than `other`.
    #[test]
    fn every_reason_chosen_here_is_listed() {
        let source = include_str!("respond.rs");
        // All of the file before its tests, which are its last item.
        let code = source.split("\n#[cfg(test)]").next().unwrap();
        assert_eq!(
            source.matches("\n#[cfg(test)]").count(),
            1,
            "a test outside `mod tests` would hide the code after it"
        );
        let literal = regex::Regex::new(r#""([A-Z][A-Z_]{3,})""#).unwrap();
        let mut found = 0;
        for reason in literal.captures_iter(code) {
            found += 1;
            assert!(
                REASONS.contains(&&reason[1]),
                "{} is not in REASONS",
                &reason[1]
            );
        }
        assert!(found > 20, "only {found} reasons found");
        for refusal in [crate::auth::Refusal::Missing, crate::auth::Refusal::Invalid] {
            assert!(REASONS.contains(&refusal.reason()));
        }
    }

    /// safewrite's own reasons in [`REASONS`] are exactly the proto's `Reason` values, so
    /// a client generated from the proto knows every reason the sidecar can choose.
    #[test]
    fn own_reasons_are_the_proto_enum() {
        let own: Vec<&str> = REASONS
            .iter()
            .copied()
            .take_while(|r| *r != "Unauthorized")
            .collect();
        let mut from_proto = Vec::new();
        for number in 1.. {
            let Some(value) = pb::Reason::try_from(number).ok() else {
                break;
            };
            if value != pb::Reason::ApiServer {
                from_proto.push(value.as_str_name().strip_prefix("REASON_").unwrap());
            }
        }
        assert_eq!(own, from_proto);
        for reason in &own {
            assert_ne!(reason_of(reason), pb::Reason::ApiServer, "{reason}");
        }
        for passed_on in ["NotFound", "Conflict", "HTTP_503", "Invalid"] {
            assert_eq!(reason_of(passed_on), pb::Reason::ApiServer);
        }
    }

    #[test]
    fn a_policy_denial_names_what_and_the_flag() {
        let denied = crate::policy::Denied {
            operation: crate::policy::Operation::Update,
            kind: "core/Secret".into(),
            namespace: "ns1".into(),
            name: "db".into(),
            subresource: "main",
            why: "no rule names core/Secret".into(),
            rule: "core/Secret:ns1:main:update".into(),
            allow: "--allow 'core/Secret:ns1:main:update'".into(),
        };
        let status = policy_denied(&denied);
        assert_eq!(status.code(), Code::PermissionDenied);
        assert!(
            status
                .message()
                .contains("update of core/Secret \"db\" in namespace ns1"),
            "{}",
            status.message()
        );
        assert!(status.message().contains("nothing was sent"));
        assert!(
            status
                .message()
                .contains("--allow 'core/Secret:ns1:main:update'")
        );
        use tonic_types::StatusExt as _;
        let info = status.get_details_error_info().unwrap();
        assert_eq!(info.reason, "POLICY_DENIED");
        assert_eq!(info.metadata["rule"], "core/Secret:ns1:main:update");
        assert_eq!(info.metadata["operation"], "update");
    }
}
