//! The interactive transaction (`Transact`): the caller's own code is the mutation.
//! safewrite streams each fresh object to the caller and waits for its proposal (a new
//! object, a mutation, or abort); the engine's loop does the rest, so the caller gets
//! the same preconditions, compare, classification, backoff and deadline as the unary
//! RPCs. A caller that disconnects, times out or sends a malformed message ends the
//! transaction with no write after that point, and its task and buffers are freed.
//!
//! A caller that sends nothing for `--transact-idle-timeout` — no `begin` after opening
//! the stream, or no proposal after a fresh object — ends it with DEADLINE_EXCEEDED
//! (reason `TRANSACTION_IDLE`), so that a silent stream cannot hold a place among the
//! RPCs in flight. The place is taken only once `begin` has arrived.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use tracing::Instrument as _;

use safewrite_api::deadline::{AnswerBy, CallDeadline};
use safewrite_api::pb;
use safewrite_api::target::FieldViolation;
use safewrite_engine::{
    Cancel, Change, Engine, Failure, Fault, Mutator, WriteSpec, mutation_failure,
};
use safewrite_mutation::Mutation;

use super::rpc::{Admission, RpcSpan, finish_rpc, write_result};
use crate::service::respond;

/// The bounds a transaction's caller must keep.
#[derive(Debug, Clone, Copy)]
pub struct TransactLimits {
    /// The longest wait for the caller's next message (`--transact-idle-timeout`).
    pub idle: Duration,
    /// The largest message accepted (`--max-request-bytes`), for the refusal's message.
    pub max_request_bytes: usize,
}

/// Reads the opening `begin` message, waiting at most `limits.idle` for it.
pub async fn begin(
    inbound: &mut Streaming<pb::TransactRequest>,
    limits: TransactLimits,
) -> Result<pb::TransactBegin, Status> {
    let violation = |d: &str| respond::invalid_request(&FieldViolation::new("begin", d));
    let message = match tokio::time::timeout(limits.idle, inbound.message()).await {
        Ok(message) => message,
        Err(_) => return Err(respond::transact_idle("begin", limits.idle, &[])),
    };
    let message = message.map_err(|status| {
        respond::unread_message(&status, limits.max_request_bytes, &[])
            .unwrap_or_else(|| respond::refused_request(&status))
    })?;
    match message {
        Some(pb::TransactRequest {
            message: Some(pb::transact_request::Message::Begin(begin)),
        }) => Ok(begin),
        Some(_) => Err(violation("the first message must be a begin")),
        None => Err(violation("the stream ended before a begin")),
    }
}

/// Runs the transaction on its own task and returns the stream of answers to the
/// caller. The task ends when the loop ends or the caller goes away.
pub fn run(
    engine: Engine,
    spec: WriteSpec,
    inbound: Streaming<pb::TransactRequest>,
    deadline: CallDeadline,
    limits: TransactLimits,
    admission: Admission,
    rpc: RpcSpan,
) -> impl Stream<Item = Result<pb::TransactResponse, Status>> + Send + 'static {
    let RpcSpan { span, started } = rpc;
    let (tx, rx) = mpsc::channel(1);
    let closed = tx.clone();
    let task_span = span.clone();
    let task = async move {
        let admission = admission; // the transaction counts as in flight until its task ends
        let refused = Arc::new(Mutex::new(None));
        let mutator = StreamMutator {
            inbound,
            outbound: tx.clone(),
            deadline: deadline.caller(),
            limits,
            refused: refused.clone(),
        };
        let outcome = tokio::select! {
            outcome = engine.write_with(&spec, mutator, deadline) => outcome,
            // The caller is gone: stop wherever the loop is (reading, backing off).
            _ = closed.closed() => {
                let gone = Status::cancelled("the caller went away; nothing was written after that");
                finish_rpc(admission.metrics(), &span, "Transact", Some(spec.subresource), started, Err(&gone));
                return;
            }
        };
        let refused = refused.lock().expect("refused").take();
        let result =
            outcome
                .map(|written| write_result(written, &span))
                .map_err(|err| match refused {
                    Some(StreamEnded::Idle) => {
                        respond::transact_idle("proposal", limits.idle, &err.attempts)
                    }
                    Some(StreamEnded::Stream(status)) => {
                        respond::unread_message(&status, limits.max_request_bytes, &err.attempts)
                            .unwrap_or_else(|| respond::to_status(&err))
                    }
                    None => respond::to_status(&err),
                });
        finish_rpc(
            admission.metrics(),
            &span,
            "Transact",
            Some(spec.subresource),
            started,
            result.as_ref(),
        );
        let message = result.map(|result| pb::TransactResponse {
            message: Some(pb::transact_response::Message::Result(result)),
        });
        let _ = tx.send(message).await;
    };
    tokio::spawn(task.instrument(task_span));
    ReceiverStream::new(rx)
}

/// Sends each fresh object to the caller and turns its proposal into a change.
struct StreamMutator {
    inbound: Streaming<pb::TransactRequest>,
    outbound: mpsc::Sender<Result<pb::TransactResponse, Status>>,
    deadline: Option<Instant>,
    limits: TransactLimits,
    /// Why the caller's stream ended the loop, when that is not a write failure: the
    /// loop fails with `Failure::Cancelled`, and this says what to answer instead.
    refused: Arc<Mutex<Option<StreamEnded>>>,
}

/// A transaction ended by its caller's stream rather than by the write.
enum StreamEnded {
    /// No proposal within the idle bound.
    Idle,
    /// The stream failed with this status: a message tonic could not read (too large,
    /// malformed) is refused as such; a failed transport is a cancellation.
    Stream(Status),
}

// === impl StreamMutator ===

impl Mutator for StreamMutator {
    async fn mutate(
        &mut self,
        attempt: u32,
        fresh: &Value,
        creating: bool,
    ) -> Result<Change, Failure> {
        let offer = pb::TransactResponse {
            message: Some(pb::transact_response::Message::Fresh(pb::FreshObject {
                attempt,
                object_json: fresh.to_string(),
                resource_version: safewrite_engine::resource_version(fresh),
                creating,
            })),
        };
        if self.outbound.send(Ok(offer)).await.is_err() {
            return Err(Failure::Cancelled(Cancel::CallerGone));
        }
        let proposal = self.proposal(attempt).await?;
        proposed_change(proposal.change, fresh, creating, self.deadline).await
    }
}

impl StreamMutator {
    /// The caller's proposal for the fresh object of `attempt`, waited for until the
    /// caller's deadline or the idle bound, whichever comes first.
    async fn proposal(&mut self, attempt: u32) -> Result<pb::TransactProposal, Failure> {
        let idle_until = Instant::now() + self.limits.idle;
        let until = self.deadline.map_or(idle_until, |d| d.min(idle_until));
        let answer = match tokio::time::timeout_at(until, self.inbound.message()).await {
            Ok(answer) => answer,
            Err(_) if until < idle_until => {
                return Err(Failure::Deadline {
                    attempts: attempt,
                    last: Some(Fault::CallerSilent),
                });
            }
            Err(_) => {
                *self.refused.lock().expect("refused") = Some(StreamEnded::Idle);
                return Err(Failure::Cancelled(Cancel::CallerIdle));
            }
        };
        let proposal = match answer {
            Ok(Some(pb::TransactRequest {
                message: Some(pb::transact_request::Message::Proposal(p)),
            })) => p,
            Ok(Some(_)) => {
                return Err(Failure::Invalid(FieldViolation::new(
                    "proposal",
                    "expected a proposal answering the fresh object (begin may be sent only once)",
                )));
            }
            Ok(None) => {
                return Err(Failure::Cancelled(Cancel::CallerClosed));
            }
            Err(status) => {
                let failure = Failure::Cancelled(Cancel::CallerStream(Arc::new(status.clone())));
                *self.refused.lock().expect("refused") = Some(StreamEnded::Stream(status));
                return Err(failure);
            }
        };
        if proposal.attempt != attempt {
            return Err(Failure::Invalid(FieldViolation::new(
                "proposal.attempt",
                format!(
                    "answers attempt {} but the current fresh object is attempt {attempt}",
                    proposal.attempt
                ),
            )));
        }
        Ok(proposal)
    }
}

/// The change a proposal makes to `fresh` (`creating` when there is no object yet): a
/// whole object, a mutation applied within `deadline`, or an abort.
async fn proposed_change(
    change: Option<pb::transact_proposal::Change>,
    fresh: &Value,
    creating: bool,
    deadline: Option<Instant>,
) -> Result<Change, Failure> {
    use pb::transact_proposal::Change as Proposed;
    match change {
        Some(Proposed::ObjectJson(text)) => {
            let object = safewrite_mutation::parse_json("proposal.object_json", &text)
                .map_err(Failure::Invalid)?;
            if !object.is_object() {
                return Err(Failure::Invalid(FieldViolation::new(
                    "proposal.object_json",
                    "must be a JSON object",
                )));
            }
            Ok(Change::Object(object))
        }
        Some(Proposed::Mutation(m)) => {
            let mutation =
                Mutation::from_proto("proposal.mutation", Some(&m)).map_err(Failure::Invalid)?;
            if matches!(mutation, Mutation::Apply { .. }) {
                return Err(Failure::Invalid(FieldViolation::new(
                    "proposal.mutation.apply",
                    "server-side apply is not a Transact proposal: use UpdateWithRetry",
                )));
            }
            let current = if creating { Value::Null } else { fresh.clone() };
            mutation
                .apply(fresh, AnswerBy::at(deadline))
                .await
                .map(Change::Object)
                .map_err(|e| mutation_failure(e, current))
        }
        Some(Proposed::Abort(_)) => Ok(Change::Abort),
        None => Err(Failure::Invalid(FieldViolation::new(
            "proposal.change",
            "set one of object_json, mutation or abort",
        ))),
    }
}
