//! Why a write failed ([`Failure`]) and the failed write with its attempts
//! ([`WriteError`]). `respond::to_status` maps each failure to its gRPC code.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use safewrite_client::apiserver::RequestError;
use safewrite_client::discovery::DiscoveryError;
use safewrite_mutation::{ApplyError, FieldViolation};

use super::result::AttemptRecord;
use crate::classify::{self, Decision};

/// A failed write: why, and the attempts made.
#[derive(Debug, thiserror::Error)]
#[error("{failure}")]
pub struct WriteError {
    #[source]
    pub failure: Failure,
    pub attempts: Vec<AttemptRecord>,
}

/// Why a write failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// The request does not fit the resolved kind (namespace, subresource, object).
    #[error("{0}")]
    Invalid(FieldViolation),
    /// The apiVersion does not parse.
    #[error("apiVersion {0:?} is not of the form \"v1\" or \"group/version\"")]
    BadApiVersion(String),
    /// The API server serves no such kind at that apiVersion.
    #[error("the API server serves no kind {kind:?} in {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    /// A precondition (uid, CEL condition, JSON Patch test) is false on the fresh object.
    #[error("precondition failed: {reason}; nothing was written")]
    PreconditionFailed { reason: String, current: Value },
    /// The mutation could not be applied to the fresh object.
    #[error("{error}; nothing was written")]
    Mutation {
        #[source]
        error: ApplyError,
        current: Value,
    },
    /// Strict compare-and-swap failed: the object is no longer at the expected version.
    #[error(
        "the object is at resourceVersion {actual}, not {expected}: it changed since you read it; re-read and decide again"
    )]
    ResourceVersionMismatch {
        expected: String,
        actual: String,
        current: Option<Value>,
    },
    /// The API server's final answer (or the last one, when retries ran out).
    #[error("{message}")]
    Api {
        decision: Decision,
        code: u16,
        reason: String,
        message: String,
        status: Option<Box<kube::core::Status>>,
    },
    /// No answer from the API server (`last`: why), and retries ran out.
    #[error("{last}")]
    Unreachable { last: String },
    /// A write was sent but its answer was lost, and the request has no idempotency
    /// key: retrying could apply the change twice, so the loop stopped.
    #[error(
        "the write was sent but its answer was lost ({last}): it may or may not have been applied. Read the object to find out, or set options.idempotency_key so that safewrite retries such writes safely"
    )]
    OutcomeUnknown { last: String },
    /// The caller's deadline came before the write could be completed.
    #[error("the deadline passed after {attempts} attempt(s); last: {last}")]
    Deadline { attempts: u32, last: String },
    /// A 2xx answer whose body could not be used.
    #[error("{0}")]
    BadAnswer(String),
    /// Retrying this fault would exceed the shared retry budget.
    #[error(
        "not retried: the sidecar's retry budget is spent (too many retries across all callers); last: {last}"
    )]
    RetryBudget { last: String },
    /// The circuit breaker to the API server is open: the RPC fails fast.
    #[error("{}", safewrite_client::breaker::CircuitOpen { retry_after: *retry_after })]
    CircuitOpen { retry_after: Duration },
    /// The local rate limit would have delayed a request past the caller's deadline.
    #[error("{}", safewrite_client::ratelimit::WouldExceedDeadline { wait: *wait })]
    RateLimited { wait: Duration },
    /// A fenced write: the object records a later epoch of the fence's Lease.
    #[error(
        "fenced: the object records epoch {recorded} of Lease {lease}, later than this write's epoch {epoch}: a later leader has written it; nothing was written"
    )]
    Fenced {
        lease: String,
        recorded: u64,
        epoch: u64,
        current: Value,
    },
    /// A fenced write: this process does not lead under the fence's epoch.
    #[error(
        "not the leader: this write's fence is epoch {epoch} of Lease {lease}, and {why}; nothing was written"
    )]
    NotLeader {
        lease: String,
        epoch: u64,
        why: String,
    },
    /// The caller went away or broke the Transact protocol mid-transaction; nothing
    /// was written after that point.
    #[error("{0}")]
    Cancelled(String),
}

impl Failure {
    /// A short name of the failure for spans and metrics: the Kubernetes reason for an
    /// API answer, else the kind of failure. Never the message (it may quote contents).
    pub fn kind(&self) -> &str {
        match self {
            Failure::Invalid(_) => "invalid_request",
            Failure::BadApiVersion(_) | Failure::UnknownKind { .. } => "unknown_kind",
            Failure::PreconditionFailed { .. } => "precondition_failed",
            Failure::Mutation { .. } => "mutation_failed",
            Failure::ResourceVersionMismatch { .. } => "resource_version_mismatch",
            Failure::Api { reason, .. } if !reason.is_empty() => reason,
            Failure::Api { .. } => "api_error",
            Failure::Unreachable { .. } => "transport",
            Failure::OutcomeUnknown { .. } => "write_outcome_unknown",
            Failure::Deadline { .. } => "deadline_exceeded",
            Failure::BadAnswer(_) => "bad_answer",
            Failure::RetryBudget { .. } => "retry_budget_exhausted",
            Failure::CircuitOpen { .. } => "circuit_open",
            Failure::RateLimited { .. } => "rate_limited",
            Failure::Cancelled(_) => "cancelled",
            Failure::Fenced { .. } => "fenced",
            Failure::NotLeader { .. } => "not_leader",
        }
    }

    /// The object a failure reports as current (`WriteFailure.current_object_json`),
    /// for those that carry one.
    pub fn current_mut(&mut self) -> Option<&mut Value> {
        match self {
            Failure::PreconditionFailed { current, .. }
            | Failure::Mutation { current, .. }
            | Failure::Fenced { current, .. } => Some(current),
            Failure::ResourceVersionMismatch { current, .. } => current.as_mut(),
            _ => None,
        }
    }
}

/// A mutation's error (or a CEL condition's) as the failure it is: a failed JSON Patch
/// `test` is a false precondition, anything else a mutation that does not apply.
pub fn mutation_failure(error: impl Into<ApplyError>, current: Value) -> Failure {
    let error = error.into();
    match error {
        ApplyError::TestFailed { .. } => Failure::PreconditionFailed {
            reason: error.to_string(),
            current,
        },
        error => Failure::Mutation { error, current },
    }
}

/// Why a kind could not be resolved.
pub(super) enum Unresolved {
    /// The request does not fit what the API server serves (unknown kind, bad
    /// apiVersion, wrong scope, no status subresource): final, and no attempt.
    Invalid(Failure),
    /// Discovery's own request failed: an attempt, retried or not as a read's would be.
    Request(Decision, Failure),
}

/// A discovery failure as the loop treats it: a refused or unanswered discovery request
/// is what the same answer to a read would be.
pub(super) fn unresolved(
    error: DiscoveryError,
    deadline: Option<Instant>,
    attempt: u32,
) -> Unresolved {
    match error {
        DiscoveryError::Refused { answer, .. } => {
            let decision = crate::classify::decision(&answer);
            let failure = Failure::Api {
                decision: decision.clone(),
                code: answer.code,
                reason: answer.reason(),
                message: format!("discovery failed: {}", answer.message()),
                status: answer.status().map(Box::new),
            };
            Unresolved::Request(decision, failure)
        }
        DiscoveryError::Request { source, .. } => {
            let (failure, decision) = request_failure(source, deadline, attempt);
            Unresolved::Request(decision, failure)
        }
        DiscoveryError::BadApiVersion(api_version) => {
            Unresolved::Invalid(Failure::BadApiVersion(api_version))
        }
        DiscoveryError::UnknownKind { api_version, kind } => {
            Unresolved::Invalid(Failure::UnknownKind { api_version, kind })
        }
    }
}

/// The failure and decision of a request that got no answer: the breaker and the rate
/// limit end the loop at once (nothing was sent); time running out at the deadline, or
/// too little of it left to send a write, is a deadline failure; anything else is classified by [`classify::classify_error`].
pub(super) fn request_failure(
    error: RequestError,
    deadline: Option<Instant>,
    attempts: u32,
) -> (Failure, Decision) {
    match error {
        RequestError::CircuitOpen(open) => (
            Failure::CircuitOpen {
                retry_after: open.retry_after,
            },
            Decision::Unexpected,
        ),
        RequestError::RateLimited(limited) => (
            Failure::RateLimited { wait: limited.wait },
            Decision::Unexpected,
        ),
        error @ RequestError::TooLate { .. } => (
            Failure::Deadline {
                attempts,
                last: error.to_string(),
            },
            Decision::Unexpected,
        ),
        error if deadline.is_some_and(|d| Instant::now() >= d) => (
            Failure::Deadline {
                attempts,
                last: error.to_string(),
            },
            Decision::Unexpected,
        ),
        error => {
            let decision = classify::classify_error(&error);
            (
                Failure::Unreachable {
                    last: error.to_string(),
                },
                decision,
            )
        }
    }
}
