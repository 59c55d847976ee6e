//! Classification: the API server's answer to one request -> what the engine does next.
//!
//! Reason first: `409` alone does not say whether to re-read and retry (`Conflict`),
//! update instead of create (`AlreadyExists`) or give up (a server-side apply
//! `FieldManagerConflict`), so the Status `reason` and its causes decide, and the HTTP
//! code only where the reason is missing or unknown. Pure: no I/O, no clock.

use std::time::Duration;

use kube::core::Status;

use safewrite_client::fault;
use safewrite_client::{Answer, RequestError};

/// What the engine does with an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// 2xx: the request did what it asked.
    Success,
    /// 409 Conflict (stale resourceVersion): re-read, re-apply, retry.
    Conflict,
    /// 409 AlreadyExists on create: re-read and update instead.
    AlreadyExists,
    /// The object remembered from an earlier read or write was stale (a write from it
    /// met a 409 or 404, or a live read confirming an answer found the object changed):
    /// read it live at once and try again. Never an API server's answer.
    Stale,
    /// 409 Conflict from server-side apply with FieldManagerConflict causes: final
    /// unless the caller forces; lists the contested fields.
    FieldManagerConflict {
        /// The contested fields, one per FieldManagerConflict cause.
        fields: Vec<String>,
    },
    /// 429: wait at least `retry_after`, then retry.
    Throttled {
        /// The API server's hint: the larger of `Retry-After` and
        /// `details.retryAfterSeconds`, when it gave one.
        retry_after: Option<Duration>,
    },
    /// 429 with a DisruptionBudget cause: an eviction refused by a PodDisruptionBudget.
    /// Not throttling (no wait helps within one call): final, a precondition of the
    /// cluster's state.
    DisruptionBudget,
    /// 503/504, 500 ServerTimeout, transport failure or client timeout: back off and
    /// retry; a fault of the API server or the path to it.
    Unavailable {
        /// The API server's hint: the larger of `Retry-After` and
        /// `details.retryAfterSeconds`, when it gave one.
        retry_after: Option<Duration>,
    },
    /// 504 Timeout with a `ResourceVersionTooLarge` cause: a read's "not older than"
    /// minimum that the API server's watch cache did not reach within its wait (about
    /// 3 s). The caller's to retry after `retry_after` (the answer's
    /// `details.retryAfterSeconds`), never retried by the sidecar, and no fault of the
    /// API server.
    ResourceVersionTooLarge {
        /// The API server's hint: the larger of `Retry-After` and
        /// `details.retryAfterSeconds`, when it gave one.
        retry_after: Option<Duration>,
    },
    /// 500 without a reason saying that the `resourceVersion` a read named does not
    /// parse (`resourceVersion: Invalid value: ...`): for a well-formed minimum, one past
    /// what the API server can represent (2^64-1), which no wait reaches. Final.
    ResourceVersionOutOfRange,
    /// 500 InternalError (e.g. a failing admission webhook): a few retries.
    Internal,
    /// 422 Invalid: the object is refused; never retried.
    Invalid,
    /// 422 Invalid because the write adds a finalizer to an object being deleted (its
    /// deletion began after it was read): final, as safewrite's own refusal of such an
    /// addition is; a retry would only meet the same answer.
    ObjectDeleting,
    /// 400 BadRequest (and other malformed-request answers): never retried.
    BadRequest,
    /// 401: never retried.
    Unauthenticated,
    /// 403: never retried.
    Forbidden,
    /// 404: never retried (the engine may create instead, if asked).
    NotFound,
    /// Anything else (e.g. 405, 410): never retried.
    Unexpected,
}

// === impl Decision ===

impl Decision {
    /// Whether another attempt can succeed (bounded by the retry policy elsewhere).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Decision::Conflict
                | Decision::AlreadyExists
                | Decision::Stale
                | Decision::Throttled { .. }
                | Decision::Unavailable { .. }
                | Decision::Internal
        )
    }

    /// A short name of the decision, for spans (what the loop did with the answer).
    pub fn name(&self) -> &'static str {
        match self {
            Decision::Success => "success",
            Decision::Conflict => "retry_conflict",
            Decision::AlreadyExists => "reread_already_exists",
            Decision::Stale => "reread_stale_copy",
            Decision::FieldManagerConflict { .. } => "field_manager_conflict",
            Decision::Throttled { .. } => "retry_throttled",
            Decision::DisruptionBudget => "disruption_budget",
            Decision::Unavailable { .. } => "retry_unavailable",
            Decision::ResourceVersionTooLarge { .. } => "resource_version_too_large",
            Decision::ResourceVersionOutOfRange => "resource_version_out_of_range",
            Decision::Internal => "retry_internal",
            Decision::Invalid => "invalid",
            Decision::ObjectDeleting => "object_deleting",
            Decision::BadRequest => "bad_request",
            Decision::Unauthenticated => "unauthenticated",
            Decision::Forbidden => "forbidden",
            Decision::NotFound => "not_found",
            Decision::Unexpected => "unexpected",
        }
    }

    /// A server hint for the next wait, used as a floor for the backoff.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Decision::Throttled { retry_after }
            | Decision::Unavailable { retry_after }
            | Decision::ResourceVersionTooLarge { retry_after } => *retry_after,
            _ => None,
        }
    }
}

/// The API server's words for a write that adds a finalizer to an object being deleted.
const NO_NEW_FINALIZERS: &str = "no new finalizers can be added if the object is being deleted";

/// Whether a 422's causes (or, without causes, its message) say the write added a
/// finalizer to an object being deleted.
fn adds_a_finalizer_to_a_deleting_object(status: Option<&Status>) -> bool {
    let Some(status) = status else {
        return false;
    };
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    causes.iter().any(|c| c.message.contains(NO_NEW_FINALIZERS))
        || (causes.is_empty() && status.message.contains(NO_NEW_FINALIZERS))
}

/// How the API server's message begins when the `resourceVersion` query parameter of a
/// read does not parse (a 500 without a reason).
const UNPARSABLE_RESOURCE_VERSION: &str = "resourceVersion: Invalid value:";

/// The most retries an `Internal` answer gets, whatever the policy allows: a failing
/// webhook rarely heals within one request's lifetime.
pub const INTERNAL_ERROR_RETRIES: u32 = 2;

/// Classifies an HTTP answer from its code, its Status body (when it has one) and its
/// `Retry-After` header. The larger of the header and `details.retryAfterSeconds` wins.
pub fn classify(
    code: u16,
    status: Option<&Status>,
    retry_after_header: Option<Duration>,
) -> Decision {
    if (200..300).contains(&code) {
        return Decision::Success;
    }
    let details_hint = status
        .and_then(|s| s.details.as_ref())
        .map(|d| d.retry_after_seconds)
        .filter(|&s| s > 0)
        .map(|s| Duration::from_secs(u64::from(s)));
    let retry_after = retry_after_header.max(details_hint);
    let reason = status.map(|s| s.reason.as_str()).unwrap_or_default();
    match reason {
        "Conflict" => {
            let fields = field_manager_conflicts(status);
            if fields.is_empty() {
                Decision::Conflict
            } else {
                Decision::FieldManagerConflict { fields }
            }
        }
        "AlreadyExists" => Decision::AlreadyExists,
        "TooManyRequests" if has_cause(status, "DisruptionBudget") => Decision::DisruptionBudget,
        "TooManyRequests" => Decision::Throttled { retry_after },
        "Timeout" if has_cause(status, "ResourceVersionTooLarge") => {
            Decision::ResourceVersionTooLarge { retry_after }
        }
        "ServerTimeout" | "Timeout" | "ServiceUnavailable" => Decision::Unavailable { retry_after },
        "InternalError" => Decision::Internal,
        "Invalid" if adds_a_finalizer_to_a_deleting_object(status) => Decision::ObjectDeleting,
        "Invalid" => Decision::Invalid,
        "BadRequest" | "RequestEntityTooLarge" | "UnsupportedMediaType" | "NotAcceptable" => {
            Decision::BadRequest
        }
        "Unauthorized" => Decision::Unauthenticated,
        "Forbidden" => Decision::Forbidden,
        "NotFound" => Decision::NotFound,
        "Gone" | "Expired" | "MethodNotAllowed" => Decision::Unexpected,
        "" if code == 500
            && status.is_some_and(|s| s.message.starts_with(UNPARSABLE_RESOURCE_VERSION)) =>
        {
            Decision::ResourceVersionOutOfRange
        }
        _ => by_code(code, retry_after),
    }
}

/// The fallback when the Status reason is missing or unknown (e.g. a proxy's answer).
fn by_code(code: u16, retry_after: Option<Duration>) -> Decision {
    match code {
        409 => Decision::Conflict,
        429 => Decision::Throttled { retry_after },
        500 => Decision::Internal,
        502..=504 => Decision::Unavailable { retry_after },
        422 => Decision::Invalid,
        400 | 413 | 415 => Decision::BadRequest,
        401 => Decision::Unauthenticated,
        403 => Decision::Forbidden,
        404 => Decision::NotFound,
        _ => Decision::Unexpected,
    }
}

/// Whether the Status names a cause with this reason.
fn has_cause(status: Option<&Status>, reason: &str) -> bool {
    status
        .and_then(|s| s.details.as_ref())
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == reason))
}

/// The fields named by FieldManagerConflict causes (server-side apply).
fn field_manager_conflicts(status: Option<&Status>) -> Vec<String> {
    status
        .and_then(|s| s.details.as_ref())
        .map(|d| {
            d.causes
                .iter()
                .filter(|c| c.reason == "FieldManagerConflict")
                .map(|c| {
                    if c.field.is_empty() {
                        c.message.clone()
                    } else {
                        format!("{} ({})", c.field, c.message)
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Classifies a request that got no HTTP answer. A fault of the path to the API server
/// ([`fault::is_fault`]: connect or transport failure, timeout) is retried with backoff;
/// anything else (the sidecar refused it itself, or its answer did not decode) is not.
pub fn classify_error(error: &RequestError) -> Decision {
    if fault::is_fault(Err(error)) {
        Decision::Unavailable { retry_after: None }
    } else {
        Decision::Unexpected
    }
}

/// The decision for an API server's answer.
pub fn decision(answer: &Answer) -> Decision {
    classify(answer.code, answer.status().as_ref(), answer.retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn status(code: u16, reason: &str) -> Status {
        Status::failure("m", reason).with_code(code)
    }

    fn with_causes(mut s: Status, causes: &[(&str, &str)], retry: u32) -> Status {
        s.details = Some(StatusDetails {
            causes: causes
                .iter()
                .map(|(reason, field)| StatusCause {
                    reason: reason.to_string(),
                    message: "conflict with \"other\"".into(),
                    field: field.to_string(),
                })
                .collect(),
            retry_after_seconds: retry,
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
        });
        s
    }

    /// One row per line of the classification table (docs/contract.md, "What is retried,
    /// what is not").
    #[test]
    fn every_row_of_the_classification_table() {
        let secs = |s| Some(Duration::from_secs(s));
        let rows: Vec<(Status, Option<Duration>, Decision)> = vec![
            (status(409, "Conflict"), None, Decision::Conflict),
            (status(409, "AlreadyExists"), None, Decision::AlreadyExists),
            (
                with_causes(
                    status(409, "Conflict"),
                    &[("FieldManagerConflict", ".data.a")],
                    0,
                ),
                None,
                Decision::FieldManagerConflict {
                    fields: vec![".data.a (conflict with \"other\")".into()],
                },
            ),
            (
                status(429, "TooManyRequests"),
                secs(3),
                Decision::Throttled {
                    retry_after: secs(3),
                },
            ),
            (
                with_causes(
                    status(429, "TooManyRequests"),
                    &[("DisruptionBudget", "")],
                    0,
                ),
                None,
                Decision::DisruptionBudget,
            ),
            (
                with_causes(status(429, "TooManyRequests"), &[], 5),
                secs(1),
                Decision::Throttled {
                    retry_after: secs(5),
                },
            ),
            (
                status(500, "ServerTimeout"),
                None,
                Decision::Unavailable { retry_after: None },
            ),
            (
                status(503, "ServiceUnavailable"),
                None,
                Decision::Unavailable { retry_after: None },
            ),
            (
                status(504, "Timeout"),
                None,
                Decision::Unavailable { retry_after: None },
            ),
            (
                with_causes(status(504, "Timeout"), &[("ResourceVersionTooLarge", "")], 1),
                None,
                Decision::ResourceVersionTooLarge {
                    retry_after: secs(1),
                },
            ),
            (
                with_causes(status(504, "Timeout"), &[("ResourceVersionTooLarge", "")], 0),
                secs(2),
                Decision::ResourceVersionTooLarge {
                    retry_after: secs(2),
                },
            ),
            (
                with_causes(status(504, "Timeout"), &[("SomethingElse", "")], 1),
                None,
                Decision::Unavailable {
                    retry_after: secs(1),
                },
            ),
            (
                Status::failure(
                    "resourceVersion: Invalid value: \"18446744073709551616\": strconv.ParseUint: parsing \"18446744073709551616\": value out of range",
                    "",
                )
                .with_code(500),
                None,
                Decision::ResourceVersionOutOfRange,
            ),
            (status(500, ""), None, Decision::Internal),
            (status(500, "InternalError"), None, Decision::Internal),
            (status(422, "Invalid"), None, Decision::Invalid),
            (status(400, "BadRequest"), None, Decision::BadRequest),
            (status(401, "Unauthorized"), None, Decision::Unauthenticated),
            (status(403, "Forbidden"), None, Decision::Forbidden),
            (status(404, "NotFound"), None, Decision::NotFound),
            (status(405, "MethodNotAllowed"), None, Decision::Unexpected),
            (status(200, ""), None, Decision::Success),
        ];
        for (s, header, want) in rows {
            assert_eq!(classify(s.code, Some(&s), header), want, "{s:?}");
        }
    }

    /// The faults of the breaker are the answers the loop backs off from as faults
    /// (throttled, unavailable, internal): one notion of "fault".
    #[test]
    fn the_breakers_faults_are_the_decisions_retried_as_faults() {
        for code in [
            200, 400, 401, 403, 404, 405, 409, 410, 422, 429, 500, 502, 503, 504,
        ] {
            let decision = classify(code, None, None);
            let backs_off_as_fault = matches!(
                decision,
                Decision::Throttled { .. } | Decision::Unavailable { .. } | Decision::Internal
            );
            assert_eq!(fault::is_fault(Ok(code)), backs_off_as_fault, "{code}");
        }
        let timeout = RequestError::Timeout {
            after: Duration::from_secs(1),
            sent: false,
        };
        assert!(fault::is_fault(Err(&timeout)));
        assert_eq!(
            classify_error(&timeout),
            Decision::Unavailable { retry_after: None }
        );
    }

    #[test]
    fn the_reason_decides_before_the_code() {
        // A 409 whose reason says AlreadyExists is not a conflict to re-read.
        assert_eq!(
            classify(409, Some(&status(409, "AlreadyExists")), None),
            Decision::AlreadyExists
        );
        // A 500 that is a server timeout is a fault to back off from, not InternalError.
        assert_eq!(
            classify(500, Some(&status(500, "ServerTimeout")), None),
            Decision::Unavailable { retry_after: None }
        );
    }

    #[test]
    fn answers_without_a_status_fall_back_to_the_code() {
        assert_eq!(
            classify(503, None, None),
            Decision::Unavailable { retry_after: None }
        );
        assert_eq!(
            classify(502, None, None),
            Decision::Unavailable { retry_after: None }
        );
        assert_eq!(
            classify(429, None, Some(Duration::from_secs(2))).retry_after(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(classify(409, None, None), Decision::Conflict);
        assert_eq!(classify(418, None, None), Decision::Unexpected);
    }

    #[test]
    fn only_retryable_decisions_are_retried() {
        assert!(Decision::Conflict.is_retryable());
        let reset = RequestError::Transport(tower::BoxError::from("connection reset").into());
        assert!(classify_error(&reset).is_retryable());
        for final_decision in [
            Decision::Invalid,
            Decision::BadRequest,
            Decision::Forbidden,
            Decision::Unauthenticated,
            Decision::NotFound,
            Decision::FieldManagerConflict { fields: vec![] },
            Decision::ResourceVersionTooLarge {
                retry_after: Some(Duration::from_secs(1)),
            },
            Decision::ResourceVersionOutOfRange,
            Decision::Unexpected,
        ] {
            assert!(!final_decision.is_retryable(), "{final_decision:?}");
        }
    }

    #[test]
    fn retry_after_header_parses_seconds_only() {
        use safewrite_client::apiserver::parse_retry_after;
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
