//! Why a write failed ([`Failure`]), the fault an ending loop saw last ([`Fault`]), why a
//! write was cancelled ([`Cancel`]) and the failed write with its attempts
//! ([`WriteError`]). Each says what happened, in a short message, and keeps its cause as
//! the typed error it was; what a caller should do about it is written once, in the
//! service's answers (`respond::to_status` maps each failure to its gRPC code and
//! message).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use safewrite_api::target::FieldViolation;
use safewrite_client::apiserver::RequestError;
use safewrite_client::discovery::DiscoveryError;
use safewrite_mutation::ApplyError;

use super::result::AttemptRecord;
use crate::classify::{self, Decision};

/// A failed write: why, and the attempts made. Its message and source are its
/// failure's.
#[derive(Debug)]
pub struct WriteError {
    /// Why the write failed.
    pub failure: Failure,
    /// The attempts made, in order.
    pub attempts: Vec<AttemptRecord>,
}

// === impl WriteError ===

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.failure.fmt(f)
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.failure.source()
    }
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
    UnknownKind {
        /// The apiVersion asked for.
        api_version: String,
        /// The kind asked for.
        kind: String,
    },
    /// A precondition (uid, CEL condition, JSON Patch test) is false on the fresh object;
    /// nothing was written.
    #[error("precondition failed: {reason}")]
    PreconditionFailed {
        /// Which precondition is false, and how.
        reason: String,
        /// The object it is false on.
        current: Value,
    },
    /// The mutation could not be applied to the fresh object; nothing was written.
    #[error("the mutation does not apply to the object")]
    Mutation {
        /// Why it does not apply.
        #[source]
        error: ApplyError,
        /// The object it was applied to.
        current: Value,
    },
    /// Strict compare-and-swap failed: the object is no longer at the expected version.
    #[error("the object is at resourceVersion {actual}, not {expected}")]
    ResourceVersionMismatch {
        /// The resourceVersion the caller required.
        expected: String,
        /// The resourceVersion the object is at (or "newer than" the expected one).
        actual: String,
        /// The object as it stands, when it was read.
        current: Option<Value>,
    },
    /// The API server's final answer (or the last one, when retries ran out).
    #[error("{message}")]
    Api {
        /// What the answer decided.
        decision: Decision,
        /// The HTTP status code.
        code: u16,
        /// The Status reason, or empty.
        reason: String,
        /// The Status message, or the body's first bytes.
        message: String,
        /// The Status object, when the body is one.
        status: Option<Box<kube::core::Status>>,
    },
    /// No answer from the API server, and retries ran out.
    #[error("no answer from the API server")]
    Unreachable {
        /// Why the last request got no answer.
        #[source]
        last: RequestError,
    },
    /// A write was sent but its answer was lost, and the request has no idempotency
    /// key: retrying could apply the change twice, so the loop stopped. Whether it was
    /// applied is unknown.
    #[error("the write was sent and may or may not have been applied")]
    OutcomeUnknown {
        /// What ended the write in doubt.
        #[source]
        last: Fault,
    },
    /// The caller's deadline came before the write could be completed.
    #[error("the deadline passed after {attempts} attempt(s)")]
    Deadline {
        /// AttemptLog made before the deadline.
        attempts: u32,
        /// The last fault seen, if any.
        #[source]
        last: Option<Fault>,
    },
    /// A 2xx answer whose body could not be used (its message and source are the
    /// request error's).
    #[error(transparent)]
    BadAnswer(RequestError),
    /// Retrying this fault would exceed the shared retry budget (too many retries across
    /// all callers): it was not retried.
    #[error("not retried: the sidecar's retry budget, shared by all callers, is spent")]
    RetryBudget {
        /// The failure that was not retried.
        #[source]
        last: Box<Failure>,
    },
    /// The circuit breaker to the API server is open: the RPC fails fast.
    #[error("{}", safewrite_client::breaker::CircuitOpen { retry_after: *retry_after })]
    CircuitOpen {
        /// When the next probe may go through.
        retry_after: Duration,
    },
    /// The local rate limit would have delayed a request past the caller's deadline.
    #[error("{}", safewrite_client::ratelimit::WouldExceedDeadline { wait: *wait })]
    RateLimited {
        /// How long the request would have had to wait.
        wait: Duration,
    },
    /// A fenced write: the object records a later epoch of the fence's Lease.
    #[error(
        "fenced: the object records epoch {recorded} of Lease {lease}, later than this write's epoch {epoch}: a later leader has written it; nothing was written"
    )]
    Fenced {
        /// The fence's Lease (`namespace/name`).
        lease: String,
        /// The epoch the object records.
        recorded: u64,
        /// This write's epoch.
        epoch: u64,
        /// The object as it stands.
        current: Value,
    },
    /// A fenced write: this process does not lead under the fence's epoch.
    #[error(
        "not the leader: this write's fence is epoch {epoch} of Lease {lease}, and {why}; nothing was written"
    )]
    NotLeader {
        /// The fence's Lease (`namespace/name`).
        lease: String,
        /// This write's epoch.
        epoch: u64,
        /// Why this process does not lead under it.
        why: String,
    },
    /// The write was given up before it ended (its caller went away, or the loop ended
    /// without an answer for it); nothing was written after that point.
    #[error(transparent)]
    Cancelled(Cancel),
}

/// The last fault a loop saw before it stopped, as the typed error it was.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Fault {
    /// A request that got no answer.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// An answer of the API server that may come after a write was stored (a 504, reason
    /// Timeout).
    #[error("the API server answered HTTP {code}: {message}")]
    Answer {
        /// The HTTP status code.
        code: u16,
        /// The Status message, or the body's first bytes.
        message: String,
    },
    /// An earlier failure that ended a step of the loop.
    #[error(transparent)]
    Failure(Box<Failure>),
    /// The caller's own code did not answer the fresh object it was sent (Transact).
    #[error("the caller did not answer the fresh object")]
    CallerSilent,
    /// The group commit that carried the write ended without an answer for it.
    #[error("the group commit carrying this write ended without an answer")]
    BatchUnanswered,
    /// The write carrying the request was still queued or in flight with others (group
    /// commit).
    #[error("the write carrying this request was still queued or in flight with others")]
    BatchPending,
}

// === impl Fault ===

impl From<Failure> for Fault {
    /// A failure as the fault it holds: a request's own error when it got no answer.
    fn from(failure: Failure) -> Fault {
        match failure {
            Failure::Unreachable { last } => Fault::Request(last),
            failure => Fault::Failure(Box::new(failure)),
        }
    }
}

/// Why a write was given up before it ended.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Cancel {
    /// The caller went away: its stream no longer takes the fresh object.
    #[error("the caller went away")]
    CallerGone,
    /// The caller sent nothing within the idle bound (`--transact-idle-timeout`).
    #[error("the caller did not answer the fresh object within --transact-idle-timeout")]
    CallerIdle,
    /// The caller closed its stream without answering the fresh object.
    #[error("the caller closed its stream without answering the fresh object")]
    CallerClosed,
    /// The caller's stream failed.
    #[error("the caller's stream failed")]
    CallerStream(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// The write's loop ended without an answer for it: whether it was applied is
    /// unknown.
    #[error("the write ended without an answer")]
    Unanswered,
    /// The write carries no mutation and no caller to ask for one.
    #[error("the write has no mutation")]
    NoMutation,
}

// === impl Failure ===

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
                last: Some(error.into()),
            },
            Decision::Unexpected,
        ),
        error if deadline.is_some_and(|d| Instant::now() >= d) => (
            Failure::Deadline {
                attempts,
                last: Some(error.into()),
            },
            Decision::Unexpected,
        ),
        error => {
            let decision = classify::classify_error(&error);
            (Failure::Unreachable { last: error }, decision)
        }
    }
}
