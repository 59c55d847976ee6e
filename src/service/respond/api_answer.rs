//! The status of a write the API server's answer ended: its own reason (or a reason of
//! safewrite's for a field manager conflict, an object being deleted, a read's minimum
//! resourceVersion), the code the decision maps to, and the causes of an invalid object.

use std::time::Duration;

use tonic::Code;

use safewrite_api::pb::Reason;
use safewrite_api::target::FieldViolation;
use safewrite_engine::classify::Decision;

use super::Reply;

/// The API server's answer that ended the loop. Its reason is the answer's own (or
/// `HTTP_<code>` without one), but for a field manager conflict, an object being
/// deleted and a read's minimum resourceVersion the server has not reached or cannot
/// represent.
pub(super) fn api(
    decision: &Decision,
    code: u16,
    reason: &str,
    message: &str,
    status: Option<&kube::core::Status>,
    attempts: usize,
) -> Reply {
    let said = format!("{code} {reason}: {message}");
    if let Some(answer) = own_reason(decision, &said) {
        return answer.metadata("http_status", code.to_string());
    }
    let passed_on = if reason.is_empty() {
        format!("HTTP_{code}")
    } else {
        reason.to_string()
    };
    let (grpc, text) = passed_on_message(decision, &said, attempts);
    let answer = Reply::passed_on(grpc, &passed_on, text).metadata("http_status", code.to_string());
    match decision {
        Decision::Throttled { retry_after } | Decision::Unavailable { retry_after } => {
            answer.retry_after(retry_after.unwrap_or(Duration::from_secs(1)))
        }
        Decision::Invalid => with_causes(answer, status),
        _ => answer,
    }
}

/// The answers of the API server that safewrite gives a reason of its own.
fn own_reason(decision: &Decision, said: &str) -> Option<Reply> {
    match decision {
        Decision::FieldManagerConflict { fields } => Some(Reply::new(
            Code::Aborted,
            Reason::FieldManagerConflict,
            format!(
                "server-side apply conflicts with other field managers on: {}; set apply.force to take these fields over, or leave them out of the configuration; nothing was written",
                fields.join(", ")
            ),
        )),
        Decision::ResourceVersionTooLarge { retry_after } => Some(
            Reply::new(
                Code::Unavailable,
                Reason::ResourceVersionTooLarge,
                format!(
                    "the API server has not reached min_resource_version yet ({said}): its watch cache did not catch up within its wait; nothing was read. Retry after the RetryInfo delay, or check that the minimum is a resourceVersion this API server answered"
                ),
            )
            .retry_after(retry_after.unwrap_or(Duration::from_secs(1))),
        ),
        Decision::ResourceVersionOutOfRange => Some(
            Reply::new(
                Code::InvalidArgument,
                Reason::InvalidRequest,
                format!(
                    "invalid request: min_resource_version is past any resourceVersion this API server can reach ({said}); nothing was read, not retried"
                ),
            )
            .violation(FieldViolation::new(
                "min_resource_version",
                "past any resourceVersion this API server can reach: pass one it answered",
            )),
        ),
        Decision::ObjectDeleting => Some(Reply::new(
            Code::FailedPrecondition,
            Reason::ObjectDeleting,
            format!(
                "a finalizer cannot be added: the object is being deleted ({said}); nothing was written, not retried"
            ),
        )),
        _ => None,
    }
}

/// The code and message of an answer whose reason is passed on as the API server said
/// it (`said`), after `attempts` attempts.
fn passed_on_message(decision: &Decision, said: &str, attempts: usize) -> (Code, String) {
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
        Decision::DisruptionBudget => (
            Code::FailedPrecondition,
            format!(
                "the API server refused it to protect a PodDisruptionBudget ({said}); this is not throttling: try again once the budget allows a disruption"
            ),
        ),
        Decision::Throttled { .. } => (
            Code::Unavailable,
            format!(
                "the API server kept throttling after {attempts} attempt(s) ({said}); retry after the RetryInfo delay"
            ),
        ),
        Decision::Unavailable { .. } => (
            Code::Unavailable,
            format!(
                "the API server is unavailable after {attempts} attempt(s) ({said}); retry later"
            ),
        ),
        Decision::Internal => (
            Code::Internal,
            format!(
                "the API server failed internally ({said}), e.g. an admission webhook; it was retried a few times"
            ),
        ),
        Decision::Invalid => (
            Code::InvalidArgument,
            format!(
                "the API server refused the object as invalid ({said}); fix the fields named in the BadRequest detail; not retried"
            ),
        ),
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
        // A field manager conflict, an object being deleted and a minimum the server
        // has not reached (or cannot represent) have their own reason (`own_reason`); success and the
        // unexpected are not failures the loop ends on.
        Decision::FieldManagerConflict { .. }
        | Decision::ObjectDeleting
        | Decision::ResourceVersionTooLarge { .. }
        | Decision::ResourceVersionOutOfRange
        | Decision::Success
        | Decision::Unexpected => (
            Code::Internal,
            format!("unexpected answer from the API server ({said})"),
        ),
    }
}

/// `answer` with the causes of the API server's Status as field violations.
fn with_causes(mut answer: Reply, status: Option<&kube::core::Status>) -> Reply {
    let causes = status.and_then(|s| s.details.as_ref()).map(|d| &d.causes);
    for cause in causes.into_iter().flatten() {
        let field = if cause.field.is_empty() {
            "object"
        } else {
            cause.field.as_str()
        };
        let why = if cause.message.is_empty() {
            &cause.reason
        } else {
            &cause.message
        };
        // The API server may repeat a cause; say each once.
        answer = answer.violation(FieldViolation::new(field, why.clone()));
    }
    answer
}
