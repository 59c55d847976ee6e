//! The ErrorInfo reasons safewrite's answers carry, and what a caller may do after each:
//! a leaf, so that the metrics (which bound their `reason` label by it) and the service
//! (which chooses them) both read it without importing each other.
//!
//! The advice is the proto's: the `retry` option of each `Reason` value and the enum's
//! `retry_by_code` option, read from the file descriptor set the build embeds (prost
//! generates no extensions, so the few descriptor fields needed are declared below). The
//! four client libraries read the same options from their generated code.

use std::collections::HashMap;
use std::sync::LazyLock;

use prost::Message;

use crate::pb;

/// Every ErrorInfo reason safewrite sends: its own (chosen in this module and in
/// `auth`), the Kubernetes Status reasons it passes on, and `HTTP_<code>` for the
/// answers without a reason that it classifies. Any other reason (an answer of an odd
/// proxy) is counted as `other` in the metrics.
pub const REASONS: &[&str] = &[
    // safewrite's own
    "INVALID_REQUEST",
    "UNKNOWN_KIND",
    "PRECONDITION_FAILED",
    "INVALID_CEL",
    "CEL_BUSY",
    "DEADLINE_EXCEEDED",
    "MUTATION_DOES_NOT_APPLY",
    "RESOURCE_VERSION_MISMATCH",
    "API_SERVER_UNREACHABLE",
    "WRITE_OUTCOME_UNKNOWN",
    "RETRY_BUDGET_EXHAUSTED",
    "CIRCUIT_OPEN",
    "RATE_LIMITED",
    "TRANSACTION_CANCELLED",
    "TRANSACTION_IDLE",
    "BAD_ANSWER",
    "OVERLOADED",
    "REQUEST_TOO_LARGE",
    "MALFORMED_REQUEST",
    "UNIMPLEMENTED",
    "REQUEST_NOT_READ",
    "POLICY_DENIED",
    "TOKEN_REQUIRED",
    "TOKEN_INVALID",
    "FIELD_MANAGER_CONFLICT",
    "OBJECT_DELETING",
    "ALREADY_OWNED",
    "RESOURCE_VERSION_TOO_LARGE",
    "FENCED",
    "NOT_LEADER",
    "UNKNOWN_FIELD",
    // the API server's Status reasons (metav1.StatusReason)
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
    // answers without a reason
    "HTTP_400",
    "HTTP_401",
    "HTTP_403",
    "HTTP_404",
    "HTTP_409",
    "HTTP_422",
    "HTTP_429",
    "HTTP_500",
    "HTTP_502",
    "HTTP_503",
    "HTTP_504",
];

/// What a caller may do after a failure with `reason` and gRPC `code`: the reason's
/// `retry` option, or for the reasons that leave it to the code (`REASON_API_SERVER`,
/// `REASON_UNSPECIFIED`) the enum's `retry_by_code` option. A code in neither of its
/// lists is [`pb::Retry::Never`].
pub fn advice(reason: pb::Reason, code: tonic::Code) -> pb::Retry {
    let table = &*ADVICE;
    match table.by_reason.get(&(reason as i32)) {
        Some(pb::Retry::ByCode) | None => {
            let code = code as i32;
            if table.by_code.with_idempotency_key.contains(&code) {
                pb::Retry::WithIdempotencyKey
            } else if table.by_code.later.contains(&code) {
                pb::Retry::Later
            } else {
                pb::Retry::Never
            }
        }
        Some(advice) => *advice,
    }
}

/// The proto's advice, read once.
struct Advice {
    by_reason: HashMap<i32, pb::Retry>,
    by_code: pb::RetryByCode,
}

static ADVICE: LazyLock<Advice> = LazyLock::new(|| {
    let set = FileSet::decode(pb::FILE_DESCRIPTOR_SET).expect("the embedded descriptor set");
    let reason = set
        .file
        .iter()
        .filter(|file| file.package.as_deref() == Some("safewrite.v1"))
        .flat_map(|file| &file.enum_type)
        .find(|e| e.name.as_deref() == Some("Reason"))
        .expect("safewrite.v1.Reason in the descriptor set");
    let by_reason = reason
        .value
        .iter()
        .map(|value| {
            let retry = value.options.as_ref().and_then(|o| o.retry);
            let retry = retry.and_then(|r| pb::Retry::try_from(r).ok());
            let name = value.name.as_deref().unwrap_or_default();
            (
                value.number.unwrap_or_default(),
                retry.unwrap_or_else(|| panic!("{name} has no retry option")),
            )
        })
        .collect();
    let by_code = reason
        .options
        .as_ref()
        .and_then(|o| o.retry_by_code.clone());
    Advice {
        by_reason,
        by_code: by_code.expect("Reason has a retry_by_code option"),
    }
});

// The fields of google.protobuf.descriptor.proto that carry the options, by their numbers.

#[derive(Clone, PartialEq, Message)]
struct FileSet {
    #[prost(message, repeated, tag = "1")]
    file: Vec<File>,
}

#[derive(Clone, PartialEq, Message)]
struct File {
    #[prost(string, optional, tag = "2")]
    package: Option<String>,
    #[prost(message, repeated, tag = "5")]
    enum_type: Vec<EnumType>,
}

#[derive(Clone, PartialEq, Message)]
struct EnumType {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(message, repeated, tag = "2")]
    value: Vec<EnumValue>,
    #[prost(message, optional, tag = "3")]
    options: Option<EnumOptions>,
}

#[derive(Clone, PartialEq, Message)]
struct EnumOptions {
    /// `(safewrite.v1.retry_by_code)`
    #[prost(message, optional, tag = "50001")]
    retry_by_code: Option<pb::RetryByCode>,
}

#[derive(Clone, PartialEq, Message)]
struct EnumValue {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(int32, optional, tag = "2")]
    number: Option<i32>,
    #[prost(message, optional, tag = "3")]
    options: Option<EnumValueOptions>,
}

#[derive(Clone, PartialEq, Message)]
struct EnumValueOptions {
    /// `(safewrite.v1.retry)`
    #[prost(enumeration = "pb::Retry", optional, tag = "50001")]
    retry: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The conformance suite's advice table, which every client library is checked
    /// against, says what the proto's options say: row by row, and with a row for every
    /// Reason value.
    #[test]
    fn the_conformance_advice_is_the_protos() {
        let text = include_str!("../../../clients/conformance/cases.json");
        let cases: serde_json::Value = serde_json::from_str(text).unwrap();
        let rows = cases["advice"]["cases"].as_array().unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for row in rows {
            let reason = pb::Reason::from_str_name(row["reason"].as_str().unwrap()).unwrap();
            let code = code_named(row["code"].as_str().unwrap());
            let advice = advice(reason, code);
            let (alone, with_key) = match advice {
                pb::Retry::Later => (true, true),
                pb::Retry::WithIdempotencyKey => (false, true),
                pb::Retry::Never => (false, false),
                other => panic!("{reason:?}: advice {other:?}"),
            };
            assert_eq!(row["retryable"], alone, "{row}");
            assert_eq!(row["retryable_with_key"], with_key, "{row}");
            seen.insert(reason as i32);
        }
        let every: Vec<i32> = (0..)
            .take_while(|n| pb::Reason::try_from(*n).is_ok())
            .collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), every);
    }

    #[test]
    fn every_reason_has_its_own_advice_or_defers_to_the_code() {
        assert_eq!(
            advice(pb::Reason::WriteOutcomeUnknown, tonic::Code::Unavailable),
            pb::Retry::WithIdempotencyKey
        );
        assert_eq!(
            advice(pb::Reason::ResourceVersionMismatch, tonic::Code::Aborted),
            pb::Retry::Never
        );
        assert_eq!(
            advice(pb::Reason::ApiServer, tonic::Code::Aborted),
            pb::Retry::Later
        );
        assert_eq!(
            advice(pb::Reason::Unspecified, tonic::Code::DeadlineExceeded),
            pb::Retry::WithIdempotencyKey
        );
        assert_eq!(
            advice(pb::Reason::ApiServer, tonic::Code::InvalidArgument),
            pb::Retry::Never
        );
    }

    fn code_named(name: &str) -> tonic::Code {
        (0..=16)
            .map(tonic::Code::from_i32)
            .find(|code| {
                format!("{code:?}")
                    .chars()
                    .flat_map(|c| {
                        let upper = c.is_ascii_uppercase();
                        [upper.then_some('_'), Some(c.to_ascii_uppercase())]
                    })
                    .flatten()
                    .collect::<String>()
                    .trim_start_matches('_')
                    == name
            })
            .unwrap_or_else(|| panic!("gRPC code {name}"))
    }
}
