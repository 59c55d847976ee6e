//! The writes that carry one request alone: a create (the object did not exist) and a
//! server-side apply (merged by the API server, so never shared with others).

use std::sync::Arc;

use serde_json::Value;
use tracing::Span;

use safewrite_api::target::{ObjectPath, Verb};

use crate::api::{AfterWrite, Api, Read, Sent};
use crate::attempt_log::AttemptLog;
use crate::body::resource_version;
use crate::decide::{Failed, Step};
use crate::error::{Failure, mutation_failure};
use crate::idempotency;
use crate::memory::Source;
use crate::result::{Done, Outcome};
use crate::spec::{Change, Mutator, Subresource, WriteSpec};

/// Sends `body` as `verb` (a create, replace or apply; to the status subresource when
/// the spec writes status), a write that carries this request alone, and notes the
/// answer in the attempt's record.
async fn send_unfolded(
    api: &Api,
    spec: &WriteSpec,
    request: &ObjectPath,
    verb: Verb,
    force: bool,
    body: &Value,
    attempts: &mut AttemptLog,
) -> Sent {
    let data = serde_json::to_vec(body).expect("a JSON value serializes");
    let http = request.request(
        verb,
        spec.subresource == Subresource::Status,
        &spec.write_params(force),
        data,
    );
    attempts.current().batch_size = 1;
    let sent = api.send(http, attempts.deadline, attempts.made()).await;
    if let Sent::Answer(answer) = &sent {
        attempts.current().note(answer);
    }
    sent
}

/// The create-if-missing path: apply the mutation to the supplied object, create it.
pub(crate) async fn create<M: Mutator>(
    api: &Api,
    spec: &WriteSpec,
    request: &ObjectPath,
    template: &Value,
    mutator: &mut M,
    attempts: &mut AttemptLog,
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
    if let Some(fence) = &spec.fence {
        if let Err(failure) = api.held(fence, attempts.deadline, attempts.made()).await {
            return Step::Fail(failure);
        }
        fence.record(&mut object);
    }
    let sent = send_unfolded(api, spec, request, Verb::Create, false, &object, attempts).await;
    if let AfterWrite::Written(object) = api.after_write(spec, request, Source::Live, &sent) {
        return done(Outcome::Created, object);
    }
    match sent {
        Sent::Failed(failure, decision, maybe_sent) => {
            Failed::unanswered_write(spec, failure, decision, maybe_sent).into()
        }
        Sent::Answer(answer) => Failed::write_refused(spec, &answer).into(),
    }
}

/// One server-side apply attempt. The object is read first, to check preconditions
/// and to tell UNCHANGED (the server's no-op keeps the resourceVersion) from UPDATED;
/// with preconditions the apply carries the version read, so a concurrent change
/// makes it conflict and the loop re-checks on the fresh object.
pub(crate) async fn apply(
    api: &Api,
    spec: &WriteSpec,
    request: &ObjectPath,
    configuration: &Value,
    force: bool,
    attempts: &mut AttemptLog,
) -> Step {
    let fresh = match api.read(request, attempts.deadline, attempts.made()).await {
        Read::Ended(answer, failed) => {
            if let Some(answer) = answer {
                attempts.current().note(&answer);
            }
            return failed.into();
        }
        Read::Found(object) => Some(Arc::unwrap_or_clone(object)),
        Read::Missing(_) => None,
    };
    let read_version = fresh.as_ref().map(resource_version).unwrap_or_default();
    attempts.current().resource_version_read = read_version.clone();
    Span::current().record("safewrite.resource_version.read", read_version.as_str());
    let mut configuration = configuration.clone();
    if let Some(fence) = &spec.fence {
        // Fenced: conditioned on the version checked, the epoch in the configuration.
        if let Some(fresh) = &fresh {
            if let Err(failure) = fence.admits(fresh) {
                return Step::Fail(failure);
            }
            configuration["metadata"]["resourceVersion"] = Value::String(read_version.clone());
        }
        fence.record(&mut configuration);
    }
    if spec.preconditions.any() {
        let Some(fresh) = &fresh else {
            return Step::Fail(Failure::PreconditionFailed {
                reason: "the object does not exist".into(),
                current: Value::Null,
            });
        };
        if let Err(failure) = spec.preconditions.check(fresh, attempts.deadline).await {
            return Step::Fail(failure);
        }
        configuration["metadata"]["resourceVersion"] = Value::String(read_version.clone());
    }
    let sent = send_unfolded(
        api,
        spec,
        request,
        Verb::Apply,
        force,
        &configuration,
        attempts,
    )
    .await;
    let after = api.after_write(spec, request, Source::Live, &sent);
    let answer = match sent {
        Sent::Failed(failure, decision, _) => {
            return Failed::from_failure(failure, decision).into();
        }
        Sent::Answer(answer) => answer,
    };
    let AfterWrite::Written(object) = after else {
        return Failed::from_answer(&answer, spec.preconditions.resource_version.as_deref()).into();
    };
    let object = match object {
        Ok(object) => object,
        Err(failure) => return Step::Fail(failure),
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

/// A successful write's object (or why its answer could not be used) as the attempt's
/// end.
fn done(outcome: Outcome, object: Result<Arc<Value>, Failure>) -> Step {
    match object {
        Ok(object) => Step::Done(Done::new(outcome, object)),
        Err(failure) => Step::Fail(failure),
    }
}
