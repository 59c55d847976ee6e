//! The requests every attempt makes (read, send, create, server-side apply), what an
//! answer makes of the remembered copy, and the attempt's span. The loop that uses them
//! is [`super::run`].

use serde_json::Value;
use tokio::time::Instant;
use tracing::Span;
use tracing::field::Empty;

use super::Engine;
use super::attempts::Attempts;
use super::body::resource_version;
use super::decide::Step;
use super::error::{Failure, mutation_failure, request_failure};
use super::memory::Source;
use super::result::{AttemptRecord, Done, Outcome};
use super::spec::{Change, Mutator, Preconditions, Subresource, WriteSpec};
use crate::client::apiserver::{self, Answer};
use crate::client::discovery;
use crate::engine::classify::Decision;
use crate::engine::idempotency;
use crate::target::{ObjectPath, Verb, WriteParams};

/// The outcome of one API request inside the loop.
pub(super) enum Sent {
    Answer(Answer),
    /// No answer: why, the decision, and whether the request may have reached the API
    /// server (for a write, whether its outcome is unknown).
    Failed(Failure, Decision, bool),
}

/// What a write's answer made of the object's remembered copy.
pub(super) enum AfterWrite {
    /// 2xx: the object as written (or why its body could not be used).
    Written(Result<Value, apiserver::RequestError>),
    /// The write was made from a remembered copy that was stale: the next attempt
    /// reads live, at once.
    Stale,
    /// Any other answer.
    Refused,
    /// No answer.
    Unanswered,
}

/// The result of reading the target.
pub(super) enum Read {
    /// The object, shared with the memory (it is not copied to be remembered).
    Found(std::sync::Arc<Value>),
    Missing(Answer),
    /// The read ended the attempt: refused (with the answer, for the record) or
    /// unanswered.
    Ended(Option<Answer>, Step),
}

/// What a live read made of a decision taken on the remembered copy.
pub(super) enum Confirmed {
    /// The copy was current: the decision stands.
    Current,
    /// The copy was stale: decide again on a live read.
    Stale,
    /// The read ended the attempt: refused (with the answer) or unanswered.
    Ended(Option<Answer>, Step),
}

impl Engine {
    /// Sends one request through the client stack; a request that got no answer becomes
    /// its failure and decision ([`request_failure`]). A 404 saying the resource path
    /// itself is not served makes discovery forget the kind's group-version, so that the
    /// next request for it resolves it afresh.
    pub(super) async fn send(
        &self,
        request: http::Request<Vec<u8>>,
        deadline: Option<Instant>,
        made: u32,
    ) -> Sent {
        let group_version = discovery::group_version_of(request.uri().path());
        let timeout = Some(self.config.request_timeout);
        match apiserver::send(&self.client, request, timeout, deadline).await {
            Ok(answer) => {
                if discovery::is_unserved_path(&answer)
                    && let Some(group_version) = group_version
                {
                    self.discovery.forget(&group_version);
                }
                Sent::Answer(answer)
            }
            Err(error) => {
                let maybe_sent = error.maybe_sent();
                let (failure, decision) = request_failure(error, deadline, made);
                Sent::Failed(failure, decision, maybe_sent)
            }
        }
    }

    /// Sends `body` as `verb` (a create, replace or apply; to the status subresource when
    /// the spec writes status), a write that carries this request alone, and notes the
    /// answer in the attempt's record.
    async fn send_alone(
        &self,
        spec: &WriteSpec,
        request: &ObjectPath,
        verb: Verb,
        force: bool,
        body: &Value,
        attempts: &mut Attempts,
    ) -> Sent {
        let data = serde_json::to_vec(body).expect("a JSON value serializes");
        let http = request.request(
            verb,
            spec.subresource == Subresource::Status,
            &spec.write_params(force),
            data,
        );
        attempts.current().batch_size = 1;
        let sent = self.send(http, attempts.deadline, attempts.made()).await;
        if let Sent::Answer(answer) = &sent {
            note_answer(attempts.current(), answer);
        }
        sent
    }

    /// Reads the fresh object live: found (and remembered), missing (with the 404
    /// answer; forgotten), or the step that ends this attempt (a retryable or final
    /// failure).
    pub(super) async fn read(
        &self,
        request: &ObjectPath,
        deadline: Option<Instant>,
        made: u32,
    ) -> Read {
        let get = request.request(Verb::Get, false, &WriteParams::default(), Vec::new());
        match self.send(get, deadline, made).await {
            Sent::Failed(failure, decision, _) => {
                Read::Ended(None, Step::from_failure(failure, decision))
            }
            Sent::Answer(answer) if answer.code == 404 => {
                self.memory.forget(request.as_str());
                Read::Missing(answer)
            }
            Sent::Answer(answer) if answer.code != 200 => {
                // The read itself was refused (429, 5xx, 403...): the record says so.
                let step = Step::from_answer(&answer, None);
                Read::Ended(Some(answer), step)
            }
            Sent::Answer(answer) => match answer.object() {
                Ok(object) => {
                    let object = std::sync::Arc::new(object);
                    self.memory
                        .remember(request.as_str(), object.clone(), answer.body.len());
                    Read::Found(object)
                }
                Err(err) => Read::Ended(None, Step::Fail(Failure::BadAnswer(err))),
            },
        }
    }

    /// Remembers `object`, read live or written (the body of `answer`), as the object's
    /// latest state.
    pub(super) fn remember(&self, request: &ObjectPath, object: &Value, answer: &Answer) {
        self.memory.remember(
            request.as_str(),
            std::sync::Arc::new(object.clone()),
            answer.body.len(),
        );
    }

    /// The object to start an attempt from: the remembered copy, when there is one and
    /// the attempt may use it, else a live read.
    pub(super) async fn start_from(
        &self,
        request: &ObjectPath,
        deadline: Option<Instant>,
        made: u32,
        read_live: bool,
    ) -> (Read, Source) {
        if !read_live && let Some(copy) = self.memory.recall(request.as_str()) {
            return (Read::Found(copy), Source::Remembered);
        }
        (self.read(request, deadline, made).await, Source::Live)
    }

    /// Confirms on a live read what was decided on the remembered copy at `version`
    /// without a successful write: it stands when the object is still at that version;
    /// otherwise the copy was stale (and is marked so), and the next attempt decides
    /// again on a live read.
    pub(super) async fn confirm(
        &self,
        request: &ObjectPath,
        version: &str,
        deadline: Option<Instant>,
        made: u32,
    ) -> Confirmed {
        match self.read(request, deadline, made).await {
            Read::Found(live) if resource_version(&live) == version => Confirmed::Current,
            Read::Found(_) | Read::Missing(_) => {
                self.memory.stale(request.as_str());
                Confirmed::Stale
            }
            Read::Ended(answer, step) => Confirmed::Ended(answer, step),
        }
    }

    /// After a write from `source` was answered: a success makes its answer the object's
    /// latest state (a dry run's is not the object's) and is returned parsed; a 409 or
    /// 404 on a write from the remembered copy proves the copy stale, and the next attempt
    /// reads live at once; any other answer, or none, leaves the object's state unknown.
    pub(super) fn after_write(
        &self,
        spec: &WriteSpec,
        request: &ObjectPath,
        source: Source,
        sent: &Sent,
    ) -> AfterWrite {
        let key = request.as_str();
        match sent {
            Sent::Answer(answer) if matches!(answer.code, 200 | 201) => {
                if source == Source::Remembered {
                    self.memory.current(key);
                }
                let object = answer.object();
                match &object {
                    // A dry run changed nothing: the copy, if any, stays what it was.
                    Ok(_) if spec.dry_run => {}
                    // The write let the API server delete the object: nothing to remember.
                    Ok(object) if crate::mutation::entries::is_gone(object) => {
                        self.memory.forget(key)
                    }
                    Ok(object) => self.remember(request, object, answer),
                    Err(_) => self.memory.forget(key),
                }
                AfterWrite::Written(object)
            }
            Sent::Answer(answer) if matches!(answer.code, 404 | 409) => {
                self.memory.forget(key);
                let strict = spec.preconditions.resource_version.is_some();
                if source == Source::Remembered && !strict && answer.reason() != "AlreadyExists" {
                    self.memory.stale(key);
                    return AfterWrite::Stale;
                }
                AfterWrite::Refused
            }
            Sent::Answer(_) => {
                self.memory.forget(key);
                AfterWrite::Refused
            }
            Sent::Failed(..) => {
                self.memory.forget(key);
                AfterWrite::Unanswered
            }
        }
    }

    /// The create-if-missing path: apply the mutation to the supplied object, create it.
    pub(super) async fn create<M: Mutator>(
        &self,
        spec: &WriteSpec,
        request: &ObjectPath,
        template: &Value,
        mutator: &mut M,
        attempts: &mut Attempts,
    ) -> Step {
        if spec.preconditions.uid.is_some() || spec.preconditions.resource_version.is_some() {
            return Step::Fail(Failure::PreconditionFailed {
                reason: "the object does not exist, so its uid/resourceVersion cannot match".into(),
                current: Value::Null,
            });
        }
        if let Some(cel) = &spec.preconditions.cel {
            match cel.holds(template, attempts.deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    return Step::Fail(Failure::PreconditionFailed {
                        reason: "the CEL condition is false on the object to create".into(),
                        current: Value::Null,
                    });
                }
                Err(error) => return Step::Fail(mutation_failure(error, Value::Null)),
            }
        }
        let mut object = match mutator.mutate(attempts.made(), template, true).await {
            Ok(Change::Object(object)) => object,
            Ok(Change::Abort) => return Step::Done(Done::new(Outcome::Aborted, template.clone())),
            Err(failure) => return Step::Fail(failure),
        };
        if let Some(key) = &spec.idempotency_key {
            idempotency::record(&mut object, [key.as_str()]);
        }
        let sent = self
            .send_alone(spec, request, Verb::Create, false, &object, attempts)
            .await;
        if let AfterWrite::Written(object) = self.after_write(spec, request, Source::Live, &sent) {
            return done(Outcome::Created, object);
        }
        match sent {
            Sent::Failed(failure, decision, maybe_sent) => {
                Step::unanswered_write(spec, failure, decision, maybe_sent)
            }
            Sent::Answer(answer) => Step::write_refused(spec, &answer),
        }
    }

    /// One server-side apply attempt. The object is read first, to check preconditions
    /// and to tell UNCHANGED (the server's no-op keeps the resourceVersion) from UPDATED;
    /// with preconditions the apply carries the version read, so a concurrent change
    /// makes it conflict and the loop re-checks on the fresh object.
    pub(super) async fn apply_attempt(
        &self,
        spec: &WriteSpec,
        request: &ObjectPath,
        configuration: &Value,
        force: bool,
        attempts: &mut Attempts,
    ) -> Step {
        let fresh = match self.read(request, attempts.deadline, attempts.made()).await {
            Read::Ended(answer, step) => {
                if let Some(answer) = answer {
                    note_answer(attempts.current(), &answer);
                }
                return step;
            }
            Read::Found(object) => Some(std::sync::Arc::unwrap_or_clone(object)),
            Read::Missing(_) => None,
        };
        let read_version = fresh.as_ref().map(resource_version).unwrap_or_default();
        attempts.current().resource_version_read = read_version.clone();
        Span::current().record("safewrite.resource_version.read", read_version.as_str());
        let mut configuration = configuration.clone();
        if spec.preconditions.any() {
            let Some(fresh) = &fresh else {
                return Step::Fail(Failure::PreconditionFailed {
                    reason: "the object does not exist".into(),
                    current: Value::Null,
                });
            };
            if let Err(failure) =
                check_preconditions(&spec.preconditions, fresh, attempts.deadline).await
            {
                return Step::Fail(failure);
            }
            configuration["metadata"]["resourceVersion"] = Value::String(read_version.clone());
        }
        let sent = self
            .send_alone(spec, request, Verb::Apply, force, &configuration, attempts)
            .await;
        let after = self.after_write(spec, request, Source::Live, &sent);
        let answer = match sent {
            Sent::Failed(failure, decision, _) => return Step::from_failure(failure, decision),
            Sent::Answer(answer) => answer,
        };
        let AfterWrite::Written(object) = after else {
            return Step::from_answer(&answer, spec.preconditions.resource_version.as_deref());
        };
        let object = match object {
            Ok(object) => object,
            Err(err) => return Step::Fail(Failure::BadAnswer(err)),
        };
        let outcome = if answer.code == 201 {
            Outcome::Created
        } else if fresh.is_some() && resource_version(&object) == read_version {
            Outcome::Unchanged
        } else {
            Outcome::Updated
        };
        Step::Done(Done::new(outcome, object))
    }
}

/// Why an attempt decided on a remembered copy goes again: the copy was stale.
pub(super) fn stale_copy() -> Failure {
    Failure::Api {
        decision: Decision::Stale,
        code: 409,
        reason: "Conflict".into(),
        message: "the object changed since safewrite last read or wrote it".into(),
        status: None,
    }
}

/// Records an answer's HTTP status and reason in an attempt's record and the current
/// span, and counts a conflict.
pub(super) fn note_answer(record: &mut AttemptRecord, answer: &Answer) {
    record.http_status = answer.code;
    record.reason = answer.reason();
    let span = Span::current();
    span.record("http.response.status_code", i64::from(answer.code));
    if !record.reason.is_empty() {
        span.record("safewrite.k8s.reason", record.reason.as_str());
    }
    if answer.code == 409 {
        crate::metrics::get().conflict();
    }
}

/// A successful write's object (or why its answer could not be used) as the attempt's
/// end.
pub(super) fn done(outcome: Outcome, object: Result<Value, apiserver::RequestError>) -> Step {
    match object {
        Ok(object) => Step::Done(Done::new(outcome, object)),
        Err(err) => Step::Fail(Failure::BadAnswer(err)),
    }
}

/// The span of one attempt, a child of the current span; its fields are recorded as
/// the attempt goes.
pub(super) fn attempt_span(number: u32) -> Span {
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
pub(super) fn record_done(span: &Span, done: &Done) {
    span.record("safewrite.outcome", done.outcome.name(done.already_applied));
    if matches!(done.outcome, Outcome::Updated | Outcome::Created) && !done.already_applied {
        span.record(
            "safewrite.resource_version.written",
            resource_version(&done.object).as_str(),
        );
    }
}

/// Records a failed attempt on its span.
pub(super) fn record_failure(span: &Span, decision: &str, failure: &Failure) {
    span.record("safewrite.decision", decision);
    span.record("error.type", failure.kind());
    span.record("otel.status_code", "ERROR");
}

/// Checks uid, exact resourceVersion and the CEL condition on the fresh object (the
/// condition evaluated no later than `deadline`).
pub(super) async fn check_preconditions(
    pre: &Preconditions,
    fresh: &Value,
    deadline: Option<Instant>,
) -> Result<(), Failure> {
    if let Some(uid) = &pre.uid {
        let actual = fresh["metadata"]["uid"].as_str().unwrap_or_default();
        if actual != uid {
            return Err(Failure::PreconditionFailed {
                reason: format!("metadata.uid is {actual:?}, not {uid:?}"),
                current: fresh.clone(),
            });
        }
    }
    if let Some(expected) = &pre.resource_version {
        let actual = resource_version(fresh);
        if &actual != expected {
            return Err(Failure::ResourceVersionMismatch {
                expected: expected.clone(),
                actual,
                current: Some(fresh.clone()),
            });
        }
    }
    if let Some(cel) = &pre.cel {
        match cel.holds(fresh, deadline).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(Failure::PreconditionFailed {
                    reason: "the CEL condition is false on the current object".into(),
                    current: fresh.clone(),
                });
            }
            Err(error) => return Err(mutation_failure(error, fresh.clone())),
        }
    }
    Ok(())
}
