//! The start of every write: the deadline the loop works to, the request's deposit in
//! the retry budget, and its target resolved through discovery into the object's
//! request path. Discovery is a read like any other: a failed discovery request is an
//! attempt, retried through the loop's one back-off ([`back_off`]) as a read's would be.

use std::sync::Arc;

use tower::retry::budget::Budget as _;

use safewrite_api::deadline::CallDeadline;
use safewrite_api::target::FieldViolation;
use safewrite_api::target::{ObjectPath, ResourcePath};
use safewrite_client::discovery::Resolved;
use safewrite_mutation::Mutation;

use super::retry::back_off;
use crate::api::Api;
use crate::attempt_log::AttemptLog;
use crate::error::{Failure, Unresolved, WriteError, unresolved};
use crate::spans::{attempt_span, record_failure};
use crate::spec::{Subresource, WriteSpec};

/// How long a cached discovery answer is trusted before an answer that contradicts it
/// (a status write to a kind listed without status) makes the engine read it again.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A write resolved and ready for its loop.
pub(crate) struct Start {
    pub resolved: Arc<Resolved>,
    pub request: ObjectPath,
    pub attempts: AttemptLog,
}

/// The start of `spec`'s write: the deadline the engine works to (a little before the
/// caller's `deadline`, so that the caller gets this loop's DEADLINE_EXCEEDED, with the
/// attempts, rather than its own bare one), its deposit in the retry budget, and the
/// target resolved.
pub(crate) async fn begin(
    api: &Api,
    spec: &WriteSpec,
    deadline: CallDeadline,
) -> Result<Start, WriteError> {
    let deadline = deadline.answer_by();
    api.budget.deposit();
    let mut attempts = AttemptLog::new(spec.policy, deadline);
    if let Some(late) = attempts.late_from_the_start() {
        return Err(attempts.fail(late));
    }
    let resolved = loop {
        match resolve(api, spec, &attempts).await {
            Ok(resolved) => break resolved,
            Err(Unresolved::Invalid(failure)) => return Err(attempts.fail(failure)),
            Err(Unresolved::Request(decision, failure)) => {
                let span = attempt_span(attempts.begin());
                if let Failure::Api { code, reason, .. } = &failure {
                    let record = attempts.current();
                    record.http_status = *code;
                    record.reason = reason.clone();
                }
                record_failure(&span, decision.name(), &failure);
                let (mut going_on, ended) =
                    back_off(&api.budget, vec![attempts], &decision, &failure, span).await;
                if let Some((ended, last)) = ended.into_iter().next() {
                    return Err(ended.fail(last));
                }
                attempts = going_on.pop().expect("one request goes on or ends");
            }
        }
    };
    let resource = &resolved.resource;
    let Some(resource_path) =
        ResourcePath::new(&resource.group, &resource.version, &resource.plural)
    else {
        return Err(attempts.fail(Failure::Invalid(FieldViolation::new(
            "target.kind",
            format!(
                "discovery answered a resource path that is not a DNS name ({:?}); nothing was sent",
                resource.plural
            ),
        ))));
    };
    let request = resource_path.object(&spec.target.namespace, &spec.target.name);
    Ok(Start {
        resolved,
        request,
        attempts,
    })
}

/// Resolves the kind and checks the request against what discovery says. A status
/// write to a kind listed without a status subresource re-reads its discovery once
/// (at most once per [`STALE_AFTER`]) before refusing: the subresource may have been
/// added to the CRD since it was cached.
pub(crate) async fn resolve(
    api: &Api,
    spec: &WriteSpec,
    attempts: &AttemptLog,
) -> Result<Arc<Resolved>, Unresolved> {
    let (api_version, kind) = (&spec.target.api_version, &spec.target.kind);
    let deadline = attempts.deadline;
    // A failed discovery request becomes the next attempt.
    let attempt = attempts.made() + 1;
    let mut resolved = api
        .discovery
        .resolve(api_version, kind, deadline)
        .await
        .map_err(|error| unresolved(error, deadline.instant(), attempt))?;
    if spec.subresource == Subresource::Status && !resolved.has_status {
        resolved = api
            .discovery
            .refresh(api_version, kind, deadline, STALE_AFTER)
            .await
            .map_err(|error| unresolved(error, deadline.instant(), attempt))?;
    }
    let invalid = |field, message: String| {
        Err(Unresolved::Invalid(Failure::Invalid(FieldViolation::new(
            field, message,
        ))))
    };
    if resolved.namespaced && spec.target.namespace.is_empty() {
        return invalid(
            "target.namespace",
            format!("{kind} is namespaced: set target.namespace"),
        );
    }
    if !resolved.namespaced && !spec.target.namespace.is_empty() {
        return invalid(
            "target.namespace",
            format!("{kind} is cluster-scoped: leave target.namespace empty"),
        );
    }
    if spec.subresource == Subresource::Status && !resolved.has_status {
        return invalid(
            "target.kind",
            format!("{kind} has no status subresource: use UpdateWithRetry"),
        );
    }
    // A change the subresource written would silently drop is refused, not UNCHANGED.
    if let Some(Mutation::Entry(change)) = &spec.mutation {
        match spec.subresource {
            Subresource::Main if resolved.has_status => {
                if let Some(field) = change.status_field() {
                    return invalid(
                        field,
                        format!(
                            "{kind} has a status subresource, and UpdateWithRetry never writes status: use PatchStatus"
                        ),
                    );
                }
            }
            Subresource::Status => {
                if let Some(field) = change.outside_status_field() {
                    return invalid(
                        field,
                        "PatchStatus writes only status: use UpdateWithRetry for metadata and spec"
                            .to_string(),
                    );
                }
            }
            Subresource::Main => {}
        }
    }
    Ok(resolved)
}
