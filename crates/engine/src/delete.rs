//! Deletes are writes too: every attempt reads the object live (never the remembered
//! copy alone), checks the caller's preconditions on it, and sends one DELETE whose
//! `DeleteOptions` are preconditioned on that object's uid and resourceVersion, so the
//! API server deletes exactly the object the decision was made on. A writer that changed
//! it in between makes the DELETE a 409: the attempt is retried like a write's (backoff,
//! a fresh read, the preconditions checked again). An object that is not there is an
//! answer ([`DeleteOutcome::Gone`]); every other answer is classified as a write's.

use serde_json::Value;
use tracing::Instrument as _;

use safewrite_api::target::{ObjectPath, Verb};
use safewrite_client::apiserver::Answer;

use super::api::{Api, Read, Sent};
use super::attempt_log::AttemptLog;
use super::body::{delete_options, resource_version};
use super::decide::Failed;
use super::error::{Failure, WriteError};
use super::memory::Event;
use super::result::AttemptRecord;
use super::spans::{attempt_span, record_failure};
use super::spec::{Propagation, WriteSpec};
use super::write::{Start, back_off};
use crate::classify::Decision;

/// What a successful delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The API server accepted the delete and the object is gone (or would be, dry run).
    Deleted,
    /// The API server accepted the delete; the object is only marked for deletion (a
    /// deletionTimestamp), kept until its finalizers are removed.
    Deleting,
    /// The object was not there.
    Gone,
}

// === impl DeleteOutcome ===

impl DeleteOutcome {
    /// A short lowercase name, for spans and metrics.
    pub fn name(self) -> &'static str {
        match self {
            DeleteOutcome::Deleted => "deleted",
            DeleteOutcome::Deleting => "deleting",
            DeleteOutcome::Gone => "gone",
        }
    }
}

/// A finished delete.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// What the delete did.
    pub outcome: DeleteOutcome,
    /// The object as the API server answered the DELETE; `None` when it answered a
    /// Status (or nothing was deleted).
    pub object: Option<Value>,
    /// One record per attempt, in order.
    pub attempts: Vec<AttemptRecord>,
}

/// How one attempt of a delete ended.
enum Ended {
    Done(DeleteOutcome, Option<Value>),
    Retry(Decision, Failure),
    Fail(Failure),
}

// === impl Ended ===

impl From<Failed> for Ended {
    fn from(failed: Failed) -> Self {
        match failed {
            Failed::Retry(decision, failure) => Ended::Retry(decision, failure),
            Failed::End(failure) => Ended::Fail(failure),
        }
    }
}

/// Deletes `spec.target` (resolved in `start`) with `propagation`, retrying as writes
/// do until it is deleted, found gone, or the loop ends with a failure.
pub(super) async fn delete(
    api: &Api,
    spec: &WriteSpec,
    propagation: Option<Propagation>,
    start: Start,
) -> Result<Deleted, WriteError> {
    let (request, mut attempts) = (start.request, start.attempts);
    loop {
        let span = attempt_span(attempts.begin());
        let ended = attempt(api, spec, propagation, &request, &mut attempts)
            .instrument(span.clone())
            .await;
        match ended {
            Ended::Done(outcome, object) => {
                span.record("safewrite.outcome", outcome.name());
                return Ok(Deleted {
                    outcome,
                    object,
                    attempts: attempts.records,
                });
            }
            Ended::Fail(failure) => {
                record_failure(&span, "fail", &failure);
                return Err(attempts.fail(failure));
            }
            Ended::Retry(decision, failure) => {
                record_failure(&span, decision.name(), &failure);
                let (mut going_on, ended) =
                    back_off(&api.budget, vec![attempts], &decision, &failure, span).await;
                if let Some((ended, last)) = ended.into_iter().next() {
                    return Err(ended.fail(last));
                }
                attempts = going_on.pop().expect("one request goes on or ends");
            }
        }
    }
}

/// One attempt: a live read, the preconditions on what it found, one DELETE
/// conditioned on it.
async fn attempt(
    api: &Api,
    spec: &WriteSpec,
    propagation: Option<Propagation>,
    request: &ObjectPath,
    attempts: &mut AttemptLog,
) -> Ended {
    let (deadline, made) = (attempts.deadline, attempts.made());
    if let Some(fence) = &spec.fence
        && let Err(failure) = api.held(fence, deadline, made).await
    {
        return Ended::Fail(failure);
    }
    let fresh = match api.read(request, deadline, made).await {
        Read::Found(fresh) => fresh,
        Read::Missing(answer) => {
            attempts.current().note(&answer);
            return Ended::Done(DeleteOutcome::Gone, None);
        }
        Read::Ended(answer, step) => {
            if let Some(answer) = answer {
                attempts.current().note(&answer);
            }
            return step.into();
        }
    };
    let version = resource_version(&fresh);
    tracing::Span::current().record("safewrite.resource_version.read", version.as_str());
    attempts.current().resource_version_read = version;
    if let Some(fence) = &spec.fence
        && let Err(failure) = fence.admits(&fresh)
    {
        return Ended::Fail(failure);
    }
    if let Err(failure) = spec.preconditions.check(&fresh, deadline).await {
        return Ended::Fail(failure);
    }
    let body = delete_options(&fresh, propagation.map(Propagation::as_str), spec.dry_run);
    let params = spec.write_params(false);
    let params = safewrite_api::target::WriteParams {
        field_manager: None,
        ..params
    };
    let delete = request.request(Verb::Delete, false, &params, body);
    match api.send(delete, deadline, made).await {
        Sent::Answer(answer) => {
            attempts.current().note(&answer);
            answered(api, spec, request, &answer)
        }
        // A DELETE conditioned on the version read may be sent again safely: if the lost
        // one was applied, the next read finds the object gone or being deleted.
        Sent::Failed(failure, decision, _) => {
            api.memory.learn(request.as_str(), Event::AnswerLost);
            Failed::from_failure(failure, decision).into()
        }
    }
}

/// What the API server's answer to the DELETE makes of the attempt.
fn answered(api: &Api, spec: &WriteSpec, request: &ObjectPath, answer: &Answer) -> Ended {
    match answer.code {
        200 | 202 => {
            let object = answer
                .object()
                .ok()
                .filter(|body| body["kind"] != "Status" && body.get("metadata").is_some());
            if !spec.dry_run {
                api.memory.learn(request.as_str(), Event::Missing);
            }
            Ended::Done(outcome_of(object.as_ref()), object)
        }
        404 => {
            api.memory.learn(request.as_str(), Event::Missing);
            Ended::Done(DeleteOutcome::Gone, None)
        }
        code => {
            if code == 409 {
                // The object changed since the read that was just remembered.
                api.memory.learn(request.as_str(), Event::Contradicted);
            }
            Failed::from_answer(answer, spec.preconditions.resource_version.as_deref()).into()
        }
    }
}

/// Deleting when the answered object carries a deletionTimestamp, else deleted.
pub(super) fn outcome_of(answered: Option<&Value>) -> DeleteOutcome {
    match answered.map(|object| &object["metadata"]["deletionTimestamp"]) {
        Some(Value::String(_)) => DeleteOutcome::Deleting,
        _ => DeleteOutcome::Deleted,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_answer_with_a_deletion_timestamp_is_deleting() {
        let marked = json!({"metadata": {"deletionTimestamp": "2026-11-28T07:00:00Z"}});
        assert_eq!(outcome_of(Some(&marked)), DeleteOutcome::Deleting);
        let gone = json!({"metadata": {"name": "o"}});
        assert_eq!(outcome_of(Some(&gone)), DeleteOutcome::Deleted);
        assert_eq!(outcome_of(None), DeleteOutcome::Deleted);
    }

    #[test]
    fn the_delete_is_conditioned_on_the_object_read() {
        let read = json!({"metadata": {"uid": "u-1", "resourceVersion": "42"}});
        let body: Value =
            serde_json::from_slice(&delete_options(&read, Some("Orphan"), true)).unwrap();
        assert_eq!(body["kind"], "DeleteOptions");
        assert_eq!(body["preconditions"]["uid"], "u-1");
        assert_eq!(body["preconditions"]["resourceVersion"], "42");
        assert_eq!(body["propagationPolicy"], "Orphan");
        assert_eq!(
            body["dryRun"],
            json!(["All"]),
            "the body's options are the ones read"
        );
        let body: Value = serde_json::from_slice(&delete_options(&read, None, false)).unwrap();
        assert!(body.get("propagationPolicy").is_none());
        assert!(body.get("dryRun").is_none());
    }
}
