//! Refusals made outside the write loop: a deadline too short to answer, overload, an
//! invalid request, a message tonic could not read or that carries a field this sidecar
//! does not know, an idle transaction, a write the
//! policy denies, a call without the shared token.

use std::time::Duration;

use tonic::Code;

use safewrite_api::pb::Reason;
use safewrite_api::schema::Unknown;
use safewrite_api::target::FieldViolation;
use safewrite_engine::AttemptRecord;

use super::Reply;
use crate::service::receive::ReceiveRefusal;

/// DEADLINE_EXCEEDED (no attempts) for a call whose deadline, `timeout`, is shorter than
/// the sidecar needs to answer it ([`safewrite_api::deadline::MIN_ANSWER_MARGIN`]): answered before
/// anything else, so that the gRPC server's own timeout (a bare CANCELLED "Timeout
/// expired") does not come first.
pub fn no_time(timeout: Duration) -> tonic::Status {
    Reply::new(
        Code::DeadlineExceeded,
        Reason::DeadlineExceeded,
        format!(
            "the call's deadline ({timeout:?}) is shorter than the {:?} safewrite needs to answer; nothing was sent; give the call a longer deadline",
            safewrite_api::deadline::MIN_ANSWER_MARGIN
        ),
    )
    .status(&[])
}

/// RESOURCE_EXHAUSTED when `max` RPCs are already in flight (load shedding).
pub fn overloaded(max: usize) -> tonic::Status {
    Reply::new(
        Code::ResourceExhausted,
        Reason::Overloaded,
        format!(
            "safewrite already has {max} RPCs in flight (--max-in-flight); nothing was sent; retry after the RetryInfo delay"
        ),
    )
    .retry_after(Duration::from_millis(100))
    .status(&[])
}

/// RESOURCE_EXHAUSTED (reason `OVERLOADED`) for a Lead past `--max-campaigns`: no
/// campaign was started.
pub fn too_many_campaigns(max: usize) -> tonic::Status {
    Reply::new(
        Code::ResourceExhausted,
        Reason::Overloaded,
        format!(
            "safewrite already runs {max} Lead campaigns (--max-campaigns); no campaign was started; close a Lead stream no longer needed, or raise --max-campaigns"
        ),
    )
    .retry_after(Duration::from_secs(1))
    .status(&[])
}

/// PERMISSION_DENIED (reason `POLICY_DENIED`) for a write the sidecar's policy does not
/// allow: nothing was sent. The message and the ErrorInfo metadata name what was denied
/// and the `--allow` flag that would allow it.
pub fn policy_denied(denied: &crate::service::policy::Denied) -> tonic::Status {
    let place = if denied.namespace.is_empty() {
        "cluster-scoped".to_string()
    } else {
        format!("in namespace {}", denied.namespace)
    };
    Reply::new(
        Code::PermissionDenied,
        Reason::PolicyDenied,
        format!(
            "the sidecar's policy does not allow {} of {} {:?} {place} ({} resource): {}; nothing was sent; to allow it, start safewrite with {} (or add the rule to its --policy file)",
            denied.operation.name(),
            denied.kind,
            denied.name,
            denied.subresource,
            denied.why,
            denied.allow,
        ),
    )
    .metadata("operation", denied.operation.name())
    .metadata("kind", &denied.kind)
    .metadata("namespace", &denied.namespace)
    .metadata("subresource", denied.subresource)
    .metadata("rule", &denied.rule)
    .metadata("allow", &denied.allow)
    .status(&[])
}

/// UNAUTHENTICATED (reason `TOKEN_REQUIRED` or `TOKEN_INVALID`) for a call without the
/// sidecar's shared token: nothing was read or sent.
pub fn unauthenticated(refusal: crate::auth::Refusal) -> tonic::Status {
    let said = match refusal {
        crate::auth::Refusal::Missing => "this sidecar requires a token and the call carries none",
        crate::auth::Refusal::Invalid => "the call's token is not this sidecar's",
    };
    let reason = match refusal {
        crate::auth::Refusal::Missing => Reason::TokenRequired,
        crate::auth::Refusal::Invalid => Reason::TokenInvalid,
    };
    Reply::new(
        Code::Unauthenticated,
        reason,
        format!(
            "{said}: send gRPC metadata `authorization: Bearer <token>` with the token of the sidecar's --token-file; nothing was sent"
        ),
    )
    .status(&[])
}

/// INVALID_ARGUMENT for a request that fails validation before anything is sent.
pub fn invalid_request(violation: &FieldViolation) -> tonic::Status {
    // A CEL expression that does not compile is INVALID_CEL, as one that fails to
    // evaluate is: the proto's Reason says so, and clients tell the two apart by it.
    let cel = violation.field.ends_with(".cel") || violation.field.ends_with(".cel.expression");
    let reason = if cel {
        Reason::InvalidCel
    } else {
        Reason::InvalidRequest
    };
    Reply::new(
        Code::InvalidArgument,
        reason,
        format!("invalid request: {violation}; nothing was sent"),
    )
    .violation(violation.clone())
    .status(&[])
}

/// The status for a request message that tonic's decoder refused (`status`) before
/// safewrite could read it: OUT_OF_RANGE (reason `REQUEST_TOO_LARGE`) for a message over
/// `--max-request-bytes`, INVALID_ARGUMENT (reason `MALFORMED_REQUEST`) for one that does
/// not decode (bad protobuf, bad compression flag, truncated, missing);
/// RESOURCE_EXHAUSTED (reason `OVERLOADED`) for one that did not fit in
/// `--max-receiving-bytes`, and DEADLINE_EXCEEDED (reason `REQUEST_NOT_READ`) for one
/// that did not arrive within `--receive-timeout` (see [`crate::service::receive`]). None when
/// `status` is not about the message but about its transport (the caller's stream
/// failed): see [`refused_request`]. `attempts` are those of a transaction in progress.
pub fn unread_message(
    status: &tonic::Status,
    max_request_bytes: usize,
    attempts: &[AttemptRecord],
) -> Option<tonic::Status> {
    let outcome = if attempts.is_empty() {
        "nothing was sent"
    } else {
        "nothing was written after that point"
    };
    if let Some(unknown) = safewrite_api::codec::unknown_of(status) {
        return Some(unknown_field(unknown, outcome).status(attempts));
    }
    if let Some(refused) = ReceiveRefusal::of(status) {
        let answer = match refused {
            ReceiveRefusal::Budget { limit } => Reply::new(
                Code::ResourceExhausted,
                Reason::Overloaded,
                format!("{refused}; {outcome}; retry after the RetryInfo delay"),
            )
            .retry_after(Duration::from_millis(100))
            .metadata("limit_bytes", limit),
            ReceiveRefusal::Timeout { .. } => Reply::new(
                Code::DeadlineExceeded,
                Reason::RequestNotRead,
                format!("{refused}; {outcome}"),
            ),
        };
        return Some(answer.status(attempts));
    }
    match status.code() {
        // tonic: "... found {len} bytes, the limit is: {limit} bytes"; decompression:
        // "... size limit, of {limit} bytes, exceeded ...".
        Code::OutOfRange | Code::ResourceExhausted => {
            let found = status
                .message()
                .split_once("found ")
                .and_then(|(_, rest)| rest.split_once(' '))
                .and_then(|(n, _)| n.parse::<u64>().ok());
            let size = match found {
                Some(found) => format!("the request message has {found} bytes"),
                None => "the request message is too large".to_string(),
            };
            let mut answer = Reply::new(
                Code::OutOfRange,
                Reason::RequestTooLarge,
                format!(
                    "{size}, over the limit of {max_request_bytes} bytes (--max-request-bytes); {outcome}"
                ),
            )
            .metadata("limit_bytes", max_request_bytes);
            if let Some(found) = found {
                answer = answer.metadata("found_bytes", found);
            }
            Some(answer.status(attempts))
        }
        // The decoder's own refusals carry no source; a failed transport (an HTTP/2
        // error, a reset) does.
        Code::Internal if std::error::Error::source(status).is_none() => Some(
            Reply::new(
                Code::InvalidArgument,
                Reason::MalformedRequest,
                format!(
                    "malformed request: {} (is the client built from the same safewrite.v1 proto?); {outcome}",
                    status.message()
                ),
            )
            .status(attempts),
        ),
        _ => None,
    }
}

/// FAILED_PRECONDITION (reason `UNKNOWN_FIELD`) for a request carrying a field or an
/// enum value this sidecar does not know: a client newer than the sidecar, whose request
/// would otherwise be served as if that field were absent.
fn unknown_field(unknown: &Unknown, outcome: &str) -> Reply {
    let version = crate::service::capabilities::VERSION;
    let answer = Reply::new(
        Code::FailedPrecondition,
        Reason::UnknownField,
        format!(
            "{unknown} (safewrite {version}): the client is newer than this sidecar; upgrade the sidecar, or leave that feature unused (docs/compatibility.md); {outcome}"
        ),
    )
    .metadata("sidecar_version", version);
    match unknown {
        Unknown::Field {
            within,
            message,
            number,
        } => answer
            .metadata("field", within)
            .metadata("message", message)
            .metadata("number", number),
        Unknown::EnumValue {
            field,
            enum_name,
            value,
        } => answer
            .metadata("field", field)
            .metadata("enum", enum_name)
            .metadata("value", value),
    }
}

/// A refusal tonic made before safewrite read the request that is not about the message
/// itself (unknown method, unsupported encoding, a failed transport): the same code and
/// message, with the rich details every error carries (reason `UNIMPLEMENTED` or
/// `REQUEST_NOT_READ`).
pub fn refused_request(status: &tonic::Status) -> tonic::Status {
    let answer = match status.code() {
        Code::Unimplemented => Reply::new(
            Code::Unimplemented,
            Reason::Unimplemented,
            format!(
                "not implemented by safewrite: {}; nothing was sent",
                match status.message() {
                    "" => "unknown method",
                    said => said,
                }
            ),
        ),
        code => Reply::new(
            code,
            Reason::RequestNotRead,
            format!(
                "the request could not be read: {}; nothing was sent",
                status.message()
            ),
        ),
    };
    answer.status(&[])
}

/// DEADLINE_EXCEEDED (reason `TRANSACTION_IDLE`) for a transaction whose caller sent
/// nothing for `bound` (`--transact-idle-timeout`) while safewrite waited for its
/// `waiting_for` (the begin, or a proposal answering a fresh object). The caller's own
/// deadline, when it comes first, is reported as DEADLINE_EXCEEDED with reason
/// `DEADLINE_EXCEEDED` instead.
pub fn transact_idle(
    waiting_for: &str,
    bound: Duration,
    attempts: &[AttemptRecord],
) -> tonic::Status {
    let outcome = if attempts.is_empty() {
        "nothing was sent"
    } else {
        "nothing was written after that point"
    };
    let bound = humantime::format_duration(bound);
    Reply::new(
        Code::DeadlineExceeded,
        Reason::TransactionIdle,
        format!(
            "the transaction's caller sent no {waiting_for} within {bound} (--transact-idle-timeout); {outcome}"
        ),
    )
    .metadata("waiting_for", waiting_for)
    .metadata("idle_timeout", bound)
    .status(attempts)
}
