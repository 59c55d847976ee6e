//! A failed write's status: one constructor per failure class, each with its message
//! beside it: what the failure says happened (with its causes), then what to do.

use std::time::Duration;

use serde_json::Value;
use tonic::Code;

use safewrite_api::pb::Reason;
use safewrite_api::target::FieldViolation;
use safewrite_client::apiserver::RequestError;
use safewrite_engine::classify::Decision;
use safewrite_engine::{Cancel, Failure, WriteError};
use safewrite_mutation::{ApplyError, CelError};

use super::api_answer::api;
use super::{Reply, one_line};

/// Maps a failed write to its gRPC status. The one place codes are chosen for writes.
pub fn to_status(err: &WriteError) -> tonic::Status {
    let attempts = err.attempts.len();
    let failure = &err.failure;
    let answer = match failure {
        Failure::Invalid(violation) => invalid(violation),
        Failure::BadApiVersion(api_version) => bad_api_version(api_version),
        unknown @ Failure::UnknownKind { .. } => unknown_kind(unknown),
        Failure::PreconditionFailed { reason, current } => precondition_failed(reason, current),
        Failure::Mutation { error, current } => mutation_failed(error, current),
        Failure::ResourceVersionMismatch { current, .. } => Reply::new(
            Code::Aborted,
            Reason::ResourceVersionMismatch,
            format!(
                "{failure}: it changed since you read it; re-read and decide again; nothing was written"
            ),
        )
        .current(current.clone()),
        Failure::Api {
            decision,
            code,
            reason,
            message,
            status,
        } => api(decision, *code, reason, message, status.as_deref(), attempts),
        Failure::Unreachable { last } => unreachable(last, attempts),
        Failure::Deadline { attempts, last } => deadline(failure, *attempts, last.is_some()),
        Failure::OutcomeUnknown { .. } => Reply::new(
            Code::Unknown,
            Reason::WriteOutcomeUnknown,
            format!("{} (attempt {attempts})", one_line(failure)),
        )
        .advised(),
        Failure::RetryBudget { .. } => Reply::new(
            Code::Unavailable,
            Reason::RetryBudgetExhausted,
            format!("{} (after {attempts} attempt(s))", one_line(failure)),
        )
        .retry_after(Duration::from_secs(1))
        .advised(),
        Failure::CircuitOpen { retry_after } => Reply::new(
            Code::Unavailable,
            Reason::CircuitOpen,
            format!("{failure}; nothing was sent"),
        )
        .retry_after(*retry_after)
        .advised(),
        Failure::RateLimited { wait } => Reply::new(
            Code::ResourceExhausted,
            Reason::RateLimited,
            format!(
                "{failure}; nothing more was sent; retry after the RetryInfo delay, or give the call a longer deadline"
            ),
        )
        .retry_after(*wait),
        Failure::Cancelled(why) => cancelled(why),
        Failure::BadAnswer(_) => {
            Reply::new(Code::Internal, Reason::BadAnswer, one_line(failure)).advised()
        }
        Failure::Fenced { current, .. } => Reply::new(
            Code::FailedPrecondition,
            Reason::Fenced,
            format!(
                "{failure} (the current object is in the WriteFailure detail); do not retry: stop acting as the leader"
            ),
        )
        .current(Some(current.clone())),
        Failure::NotLeader { .. } => Reply::new(
            Code::FailedPrecondition,
            Reason::NotLeader,
            format!("{failure}; do not retry: stop acting as the leader, and campaign again with rpc Lead"),
        ),
    };
    answer.status(&err.attempts)
}

/// Maps a failed Get to its gRPC status: as a write's, but a missing object is only
/// that (a write's advice to create it does not apply to a read).
pub fn read_to_status(err: &WriteError) -> tonic::Status {
    match &err.failure {
        Failure::Api {
            decision: Decision::NotFound,
            code,
            reason,
            message,
            ..
        } => Reply::passed_on(
            Code::NotFound,
            reason,
            format!("the object does not exist ({code} {reason}: {message})"),
        )
        .metadata("http_status", code.to_string())
        .status(&err.attempts),
        _ => to_status(err),
    }
}

/// A request that does not fit the resolved kind.
fn invalid(violation: &FieldViolation) -> Reply {
    Reply::new(
        Code::InvalidArgument,
        Reason::InvalidRequest,
        format!("invalid request: {violation}; nothing was sent"),
    )
    .violation(violation.clone())
}

/// An apiVersion that does not parse.
fn bad_api_version(v: &str) -> Reply {
    Reply::new(
        Code::InvalidArgument,
        Reason::InvalidRequest,
        format!("invalid request: apiVersion {v:?} does not parse; nothing was sent"),
    )
    .violation(FieldViolation::new(
        "target.api_version",
        format!("{v:?} is not of the form \"v1\" or \"group/version\""),
    ))
}

/// A kind that is not served.
fn unknown_kind(error: &Failure) -> Reply {
    Reply::new(
        Code::NotFound,
        Reason::UnknownKind,
        format!(
            "{error}: check target.api_version and target.kind (is its CRD installed?); nothing was sent"
        ),
    )
}

/// A precondition false on the fresh object.
fn precondition_failed(reason: &str, current: &Value) -> Reply {
    Reply::new(
        Code::FailedPrecondition,
        Reason::PreconditionFailed,
        format!(
            "precondition failed: {reason}; nothing was written (the current object is in the WriteFailure detail)"
        ),
    )
    .current(Some(current.clone()))
}

/// A mutation that could not be applied: a CEL expression past its bounds is the
/// request's fault; anything else depends on the object.
fn mutation_failed(error: &ApplyError, current: &Value) -> Reply {
    match error {
        ApplyError::CelNotAMap(_)
        | ApplyError::Cel(
            CelError::NotABool(_)
            | CelError::TooSlow(_)
            | CelError::TooCostly { .. }
            | CelError::ResultTooLarge { .. }
            | CelError::TooManySteps(_),
        ) => {
            let field = if matches!(error, ApplyError::Cel(CelError::NotABool(_))) {
                "preconditions.cel"
            } else {
                "mutation.cel.expression"
            };
            Reply::new(
                Code::InvalidArgument,
                Reason::InvalidCel,
                format!("{error}; nothing was written"),
            )
            .violation(FieldViolation::new(field, error.to_string()))
        }
        ApplyError::Cel(CelError::Busy) => Reply::new(
            Code::ResourceExhausted,
            Reason::CelBusy,
            format!("{error}; nothing was written"),
        )
        .retry_after(Duration::from_secs(1)),
        ApplyError::Cel(CelError::Deadline) => Reply::new(
            Code::DeadlineExceeded,
            Reason::DeadlineExceeded,
            format!("{error}; nothing was written; give the call a longer deadline"),
        ),
        ApplyError::Deleting(_) => Reply::new(
            Code::FailedPrecondition,
            Reason::ObjectDeleting,
            format!(
                "{error}; nothing was written (the current object is in the WriteFailure detail)"
            ),
        )
        .current(Some(current.clone())),
        ApplyError::AlreadyOwned(_) => Reply::new(
            Code::FailedPrecondition,
            Reason::AlreadyOwned,
            format!(
                "{error}; nothing was written (the current object is in the WriteFailure detail)"
            ),
        )
        .current(Some(current.clone())),
        ApplyError::PathDoesNotFit { field, reason } => {
            invalid(&FieldViolation::new(field.clone(), reason.clone()))
        }
        _ => Reply::new(
            Code::FailedPrecondition,
            Reason::MutationDoesNotApply,
            format!(
                "{error}; nothing was written (the current object is in the WriteFailure detail)"
            ),
        )
        .current(Some(current.clone())),
    }
}

/// No answer from the API server, and retries ran out: said as the last request's
/// error.
fn unreachable(last: &RequestError, attempts: usize) -> Reply {
    let unsent = if matches!(last, RequestError::Connect(_)) {
        "; nothing was sent"
    } else {
        ""
    };
    Reply::new(
        Code::Unavailable,
        Reason::ApiServerUnreachable,
        format!("{}{unsent} (after {attempts} attempt(s))", one_line(last)),
    )
    .retry_after(Duration::from_secs(1))
    .advised()
}

/// The deadline passed after `attempts` attempts (with a `last` fault or not).
fn deadline(failure: &Failure, attempts: u32, last: bool) -> Reply {
    let said = if attempts == 0 && !last {
        format!("{failure}; nothing was sent")
    } else {
        one_line(failure)
    };
    Reply::new(
        Code::DeadlineExceeded,
        Reason::DeadlineExceeded,
        format!("{said}; give the call a longer deadline"),
    )
}

/// A write given up before it ended.
fn cancelled(why: &Cancel) -> Reply {
    let message = match why {
        Cancel::Unanswered => {
            format!("{why}; read the object to find out whether it was applied")
        }
        why => format!("{}; nothing was written after that point", one_line(why)),
    };
    Reply::new(Code::Cancelled, Reason::TransactionCancelled, message)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use safewrite_engine::Fault;

    use super::*;

    fn said(failure: Failure) -> tonic::Status {
        to_status(&WriteError {
            failure,
            attempts: Vec::new(),
        })
    }

    fn reset() -> RequestError {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        RequestError::Transport(Arc::new(io))
    }

    /// The engine says what happened and keeps its causes; the answer says them on one
    /// line, then what to do, from the proto's retry option.
    #[test]
    fn an_answer_says_the_causes_then_what_to_do() {
        let unknown = said(Failure::OutcomeUnknown {
            last: Fault::Request(reset()),
        });
        assert_eq!(unknown.code(), Code::Unknown);
        assert_eq!(
            unknown.message(),
            "the write was sent and may or may not have been applied: connection to the API server failed: connection reset (attempt 0). Read the object to find out, or set options.idempotency_key so that safewrite retries such writes safely"
        );

        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let unreachable = said(Failure::Unreachable {
            last: RequestError::Connect(Arc::new(refused)),
        });
        assert_eq!(unreachable.code(), Code::Unavailable);
        assert_eq!(
            unreachable.message(),
            "failed to connect to the API server: refused; nothing was sent (after 0 attempt(s)); retry after the RetryInfo delay"
        );

        let late = said(Failure::Deadline {
            attempts: 2,
            last: Some(Fault::Request(reset())),
        });
        assert_eq!(late.code(), Code::DeadlineExceeded);
        assert_eq!(
            late.message(),
            "the deadline passed after 2 attempt(s): connection to the API server failed: connection reset; give the call a longer deadline"
        );

        let budget = said(Failure::RetryBudget {
            last: Box::new(Failure::Unreachable { last: reset() }),
        });
        assert!(
            budget.message().ends_with(
                ": connection reset (after 0 attempt(s)); retry after the RetryInfo delay"
            ),
            "{}",
            budget.message()
        );
    }
}
