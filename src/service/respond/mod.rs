//! Every gRPC status the Writer service returns is chosen here: a write failure ->
//! code, a plain message saying what happened and what to do, and rich details
//! (google.rpc ErrorInfo, BadRequest, RetryInfo, plus safewrite.v1.WriteFailure with the
//! attempts made and, for precondition failures, the current object). One small
//! constructor per failure class: `write` for failed writes, `refusal` for refusals made
//! outside the write loop (overload, invalid requests, messages tonic could not read,
//! idle transactions, writes the policy denies, calls without the shared token).
//!
//! What to do is said here only: the engine's errors say what happened (with their causes
//! as sources, said on one line by [`one_line`]), and where the proto gives a reason a
//! retry option, the advice a message ends with is that option's ([`Reply::advised`]).
//!
//! [`REASONS`] (in `safewrite_api::reasons`) lists every ErrorInfo reason an answer can carry:
//! the bounded set of the `reason` label of `safewrite_rpcs_total`.

use std::time::Duration;

use prost::Message;
use prost_types::Any;
use tonic::Code;
use tonic_types::pb as rpc;

use safewrite_api::pb;
use safewrite_api::target::FieldViolation;
use safewrite_engine::{AttemptRecord, Outcome};

mod api_answer;
mod refusal;
mod write;

pub use refusal::{
    invalid_request, no_time, overloaded, policy_denied, refused_request, too_many_campaigns,
    transact_idle, unauthenticated, unread_message,
};
pub use write::{read_to_status, to_status};

/// The ErrorInfo domain of every error safewrite returns.
pub const DOMAIN: &str = "safewrite.dev";

pub use safewrite_api::reasons::REASONS;

/// The details to attach, beside code and message.
#[derive(Default)]
struct Details {
    reason: String,
    metadata: Vec<(String, String)>,
    violations: Vec<FieldViolation>,
    retry_after: Option<Duration>,
    current_object: Option<serde_json::Value>,
}

/// A status being chosen: its code, its message (what happened and what to do) and its
/// details.
struct Reply {
    code: Code,
    message: String,
    details: Details,
}

// === impl Reply ===

impl Reply {
    /// An answer with one of safewrite's own reasons: a value of the proto's `Reason`, so
    /// that every reason the sidecar chooses is one its clients know, by type.
    fn new(code: Code, reason: pb::Reason, message: String) -> Self {
        let name = reason.as_str_name();
        Reply::passed_on(code, name.strip_prefix("REASON_").unwrap_or(name), message)
    }

    /// An answer whose reason the API server chose (its Status reason, or `HTTP_<code>`).
    fn passed_on(code: Code, reason: &str, message: String) -> Self {
        Reply {
            code,
            message,
            details: Details {
                reason: reason.into(),
                ..Details::default()
            },
        }
    }

    /// A field at fault, said once however often it is named.
    fn violation(mut self, violation: FieldViolation) -> Self {
        if !self.details.violations.contains(&violation) {
            self.details.violations.push(violation);
        }
        self
    }

    fn retry_after(mut self, wait: Duration) -> Self {
        self.details.retry_after = Some(wait);
        self
    }

    /// The object as it stood when the write was refused.
    fn current(mut self, object: Option<serde_json::Value>) -> Self {
        self.details.current_object = object;
        self
    }

    /// The message followed by what the proto's `retry` option for the reason and code
    /// advises (nothing for `RETRY_NEVER`, whose advice depends on the failure): to call
    /// after a RetryInfo given before this, or later, or with an idempotency key.
    fn advised(mut self) -> Self {
        let advice = match safewrite_api::reasons::advice(
            reason_of(&self.details.reason),
            self.code,
        ) {
            pb::Retry::Later if self.details.retry_after.is_some() => {
                "; retry after the RetryInfo delay"
            }
            pb::Retry::Later => "; retry later",
            pb::Retry::WithIdempotencyKey => {
                ". Read the object to find out, or set options.idempotency_key so that safewrite retries such writes safely"
            }
            _ => "",
        };
        self.message.push_str(advice);
        self
    }

    fn metadata(mut self, key: &str, value: impl ToString) -> Self {
        self.details.metadata.push((key.into(), value.to_string()));
        self
    }

    /// The status, with the `attempts` made so far.
    fn status(self, attempts: &[AttemptRecord]) -> tonic::Status {
        let answer = self.metadata("attempts", attempts.len());
        build(answer.code, answer.message, answer.details, attempts)
    }
}

/// The `Reason` enum value of an ErrorInfo reason: safewrite's own reasons are the
/// value's name without its `REASON_` prefix; any other reason was the API server's.
pub fn reason_of(reason: &str) -> pb::Reason {
    pb::Reason::from_str_name(&format!("REASON_{reason}"))
        .filter(|r| !matches!(r, pb::Reason::Unspecified | pb::Reason::ApiServer))
        .unwrap_or(pb::Reason::ApiServer)
}

/// An error and its causes on one line ("a: b: c"), each said once; a gRPC status (a
/// caller's failed stream) by its message alone.
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut next = Some(error);
    while let Some(error) = next {
        let said = match error.downcast_ref::<tonic::Status>() {
            Some(status) => status.message().to_string(),
            None => error.to_string(),
        };
        if !said.is_empty() && !line.contains(&said) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&said);
        }
        next = error.source();
    }
    line
}

/// The attempt records as the proto sends them.
pub fn records(attempts: &[AttemptRecord]) -> Vec<pb::AttemptRecord> {
    attempts
        .iter()
        .map(|record| pb::AttemptRecord {
            number: record.number,
            resource_version_read: record.resource_version_read.clone(),
            http_status: u32::from(record.http_status),
            reason: record.reason.clone(),
            backoff: record.backoff.map(|wait| prost_types::Duration {
                seconds: wait.as_secs() as i64,
                nanos: wait.subsec_nanos() as i32,
            }),
            batch_size: record.batch_size,
        })
        .collect()
}

/// The outcome as the proto sends it.
pub fn outcome(outcome: Outcome) -> pb::Outcome {
    match outcome {
        Outcome::Updated => pb::Outcome::Updated,
        Outcome::Unchanged => pb::Outcome::Unchanged,
        Outcome::Created => pb::Outcome::Created,
        Outcome::Aborted => pb::Outcome::Aborted,
        Outcome::Gone => pb::Outcome::Gone,
    }
}

fn any<M: Message>(type_name: &str, message: &M) -> Any {
    Any {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: message.encode_to_vec(),
    }
}

fn build(
    code: Code,
    message: String,
    details: Details,
    attempts: &[AttemptRecord],
) -> tonic::Status {
    let reason = reason_of(&details.reason);
    // A RetryInfo says "the same call may succeed after this delay": only what the
    // proto's retry options call RETRY_LATER may carry one.
    debug_assert!(
        details.retry_after.is_none()
            || safewrite_api::reasons::advice(reason, code) == pb::Retry::Later,
        "a RetryInfo on {:?} ({code:?}), which no retry alone can fix",
        details.reason
    );
    let mut anys = vec![any(
        "google.rpc.ErrorInfo",
        &rpc::ErrorInfo {
            reason: details.reason,
            domain: DOMAIN.into(),
            metadata: details.metadata.into_iter().collect(),
        },
    )];
    if !details.violations.is_empty() {
        anys.push(any(
            "google.rpc.BadRequest",
            &rpc::BadRequest {
                field_violations: details
                    .violations
                    .into_iter()
                    .map(|v| rpc::bad_request::FieldViolation {
                        field: v.field,
                        description: v.description,
                        ..Default::default()
                    })
                    .collect(),
            },
        ));
    }
    if let Some(delay) = details.retry_after {
        anys.push(any(
            "google.rpc.RetryInfo",
            &rpc::RetryInfo {
                retry_delay: Some(prost_types::Duration {
                    seconds: delay.as_secs() as i64,
                    nanos: delay.subsec_nanos() as i32,
                }),
            },
        ));
    }
    anys.push(any(
        "safewrite.v1.WriteFailure",
        &pb::WriteFailure {
            attempt_records: records(attempts),
            current_object_json: details
                .current_object
                .filter(|v| !v.is_null())
                .map(|v| v.to_string())
                .unwrap_or_default(),
            // Built inside the RPC's span: its trace id, so the caller can find the trace.
            trace_id: crate::telemetry::trace_id(&tracing::Span::current()),
            reason: reason as i32,
        },
    ));
    let status = rpc::Status {
        code: code as i32,
        message: message.clone(),
        details: anys,
    };
    tonic::Status::with_details(code, message, status.encode_to_vec().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cel_expression_that_does_not_compile_is_invalid_cel() {
        for (field, reason) in [
            ("mutation.cel.expression", "INVALID_CEL"),
            ("preconditions.cel", "INVALID_CEL"),
            ("proposal.mutation.cel.expression", "INVALID_CEL"),
            ("target.name", "INVALID_REQUEST"),
        ] {
            let status = invalid_request(&FieldViolation::new(field, "no"));
            assert_eq!(status.code(), Code::InvalidArgument);
            let info = tonic_types::StatusExt::get_details_error_info(&status).unwrap();
            assert_eq!(info.reason, reason, "{field}");
        }
    }

    /// The reasons respond chooses are values of the proto's `Reason` (its constructors
    /// take nothing else), spelled as the enum's names; with `own_reasons_are_the_proto_enum`
    /// below, each is in [`REASONS`], so that the metrics' `reason` label names it rather
    /// than `other`.
    #[test]
    fn every_reason_chosen_here_is_listed() {
        for number in 1.. {
            let Some(reason) = pb::Reason::try_from(number).ok() else {
                break;
            };
            let status = Reply::new(Code::Internal, reason, String::new()).status(&[]);
            let info = tonic_types::StatusExt::get_details_error_info(&status).unwrap();
            assert_eq!(
                format!("REASON_{}", info.reason),
                reason.as_str_name(),
                "{reason:?}"
            );
            if reason != pb::Reason::ApiServer {
                assert!(REASONS.contains(&info.reason.as_str()), "{}", info.reason);
                assert_eq!(reason_of(&info.reason), reason);
            }
        }
        for (refusal, reason) in [
            (crate::auth::Refusal::Missing, pb::Reason::TokenRequired),
            (crate::auth::Refusal::Invalid, pb::Reason::TokenInvalid),
        ] {
            let status = unauthenticated(refusal);
            let info = tonic_types::StatusExt::get_details_error_info(&status).unwrap();
            assert_eq!(info.reason, refusal.reason());
            assert_eq!(reason_of(&info.reason), reason);
        }
    }

    /// safewrite's own reasons in [`REASONS`] are exactly the proto's `Reason` values, so
    /// a client generated from the proto knows every reason the sidecar can choose.
    #[test]
    fn own_reasons_are_the_proto_enum() {
        let own: Vec<&str> = REASONS
            .iter()
            .copied()
            .take_while(|r| *r != "Unauthorized")
            .collect();
        let mut from_proto = Vec::new();
        for number in 1.. {
            let Some(value) = pb::Reason::try_from(number).ok() else {
                break;
            };
            if value != pb::Reason::ApiServer {
                from_proto.push(value.as_str_name().strip_prefix("REASON_").unwrap());
            }
        }
        assert_eq!(own, from_proto);
        for reason in &own {
            assert_ne!(reason_of(reason), pb::Reason::ApiServer, "{reason}");
        }
        for passed_on in ["NotFound", "Conflict", "HTTP_503", "Invalid"] {
            assert_eq!(reason_of(passed_on), pb::Reason::ApiServer);
        }
    }

    #[test]
    fn a_policy_denial_names_what_and_the_flag() {
        let denied = crate::service::policy::Denied {
            operation: crate::service::policy::Operation::Update,
            kind: "core/Secret".into(),
            namespace: "ns1".into(),
            name: "db".into(),
            subresource: "main",
            why: "no rule names core/Secret".into(),
            rule: "core/Secret:ns1:main:update".into(),
            allow: "--allow 'core/Secret:ns1:main:update'".into(),
        };
        let status = policy_denied(&denied);
        assert_eq!(status.code(), Code::PermissionDenied);
        assert!(
            status
                .message()
                .contains("update of core/Secret \"db\" in namespace ns1"),
            "{}",
            status.message()
        );
        assert!(status.message().contains("nothing was sent"));
        assert!(
            status
                .message()
                .contains("--allow 'core/Secret:ns1:main:update'")
        );
        use tonic_types::StatusExt as _;
        let info = status.get_details_error_info().unwrap();
        assert_eq!(info.reason, "POLICY_DENIED");
        assert_eq!(info.metadata["rule"], "core/Secret:ns1:main:update");
        assert_eq!(info.metadata["operation"], "update");
    }
}
