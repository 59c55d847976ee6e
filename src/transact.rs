//! The interactive transaction (`Transact`): the caller's own code is the mutation.
//! safewrite streams each fresh object to the caller and waits for its proposal (a new
//! object, a mutation, or abort); the engine's loop does the rest, so the caller gets
//! the same preconditions, compare, classification, backoff and deadline as the unary
//! RPCs. A caller that disconnects, times out or sends a malformed message ends the
//! transaction with no write after that point, and its task and buffers are freed.

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::engine::{Change, Engine, Failure, Mutator, WriteSpec, mutation_failure};
use crate::mutation::{self, FieldViolation, Mutation};
use crate::pb;
use crate::respond;
use crate::server::{Admission, finish_rpc, write_result};
use tracing::{Instrument as _, Span};

/// Reads the opening `begin` message.
pub async fn begin(
    inbound: &mut Streaming<pb::TransactRequest>,
) -> Result<pb::TransactBegin, Status> {
    let violation = |d: &str| respond::invalid_request(&FieldViolation::new("begin", d));
    match inbound.message().await? {
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
    deadline: Option<Instant>,
    admission: Admission,
    (span, started): (Span, std::time::Instant),
) -> impl Stream<Item = Result<pb::TransactResponse, Status>> + Send + 'static {
    let (tx, rx) = mpsc::channel(1);
    let closed = tx.clone();
    let task_span = span.clone();
    let task = async move {
        let _admission = admission; // the transaction counts as in flight until its task ends
        let mut mutator = StreamMutator {
            inbound,
            outbound: tx.clone(),
            deadline,
        };
        let outcome = tokio::select! {
            outcome = engine.write_with(&spec, &mut mutator, deadline) => outcome,
            // The caller is gone: stop wherever the loop is (reading, backing off).
            _ = closed.closed() => {
                let gone = Status::cancelled("the caller went away; nothing was written after that");
                finish_rpc(&span, "Transact", started, Err(&gone));
                return;
            }
        };
        let result = outcome
            .map(|written| write_result(written, &span))
            .map_err(|err| respond::to_status(&err));
        finish_rpc(&span, "Transact", started, result.as_ref());
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
}

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
                resource_version: crate::engine::resource_version(fresh),
                creating,
            })),
        };
        if self.outbound.send(Ok(offer)).await.is_err() {
            return Err(Failure::Cancelled("the caller went away".into()));
        }
        let answer = match self.deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, self.inbound.message()).await
            {
                Ok(answer) => answer,
                Err(_) => {
                    return Err(Failure::Deadline {
                        attempts: attempt,
                        last: "the caller did not answer the fresh object in time".into(),
                    });
                }
            },
            None => self.inbound.message().await,
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
                return Err(Failure::Cancelled(
                    "the caller closed its stream without answering the fresh object".into(),
                ));
            }
            Err(status) => {
                return Err(Failure::Cancelled(format!(
                    "the caller's stream failed: {}",
                    status.message()
                )));
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
        use pb::transact_proposal::Change as Proposed;
        match proposal.change {
            Some(Proposed::ObjectJson(text)) => {
                let object = mutation::parse_json("proposal.object_json", &text)
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
                let mutation = Mutation::from_proto("proposal.mutation", Some(&m))
                    .map_err(Failure::Invalid)?;
                if matches!(mutation, Mutation::Apply { .. }) {
                    return Err(Failure::Invalid(FieldViolation::new(
                        "proposal.mutation.apply",
                        "server-side apply is not a Transact proposal: use UpdateWithRetry",
                    )));
                }
                let current = if creating { Value::Null } else { fresh.clone() };
                mutation
                    .apply(fresh)
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
}
