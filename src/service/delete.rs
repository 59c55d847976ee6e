//! rpc Delete at the boundary: the request validated into the engine's terms (the
//! target, preconditions and retry policy exactly as a write's), and a finished delete
//! made into its answer.

use safewrite_api::pb;
use safewrite_api::target::FieldViolation;
use safewrite_engine::{DeleteOutcome, Deleted, EngineConfig, Propagation, Subresource};

use crate::service::respond;
use crate::service::validate::{RequestParts, validate_parts};

/// A validated Delete: the target and its conditions as a write's, dry run, and the
/// propagation policy when the caller chose one.
///
/// # Errors
/// The first field that does not validate.
pub fn validate(
    body: &pb::DeleteRequest,
    config: &EngineConfig,
) -> Result<(safewrite_engine::WriteSpec, Option<Propagation>), FieldViolation> {
    if body.target.is_none() {
        return Err(FieldViolation::new(
            "target",
            "required: the object to delete (api_version, kind, namespace, name)",
        ));
    }
    let parts = RequestParts {
        target: body.target.as_ref(),
        mutation: None,
        preconditions: body.preconditions.as_ref(),
        retry_policy: body.retry_policy.as_ref(),
        options: None,
    };
    let mut spec = validate_parts(parts, Subresource::Main, config, false)?;
    spec.dry_run = body.dry_run;
    spec.fence = crate::service::validate::parse_fence("fence", body.fence.as_ref())?;
    let propagation = match pb::PropagationPolicy::try_from(body.propagation_policy) {
        Ok(pb::PropagationPolicy::Unspecified) => None,
        Ok(pb::PropagationPolicy::Background) => Some(Propagation::Background),
        Ok(pb::PropagationPolicy::Foreground) => Some(Propagation::Foreground),
        Ok(pb::PropagationPolicy::Orphan) => Some(Propagation::Orphan),
        Err(_) => {
            return Err(FieldViolation::new(
                "propagation_policy",
                format!(
                    "{} is not a PropagationPolicy: use BACKGROUND, FOREGROUND or ORPHAN",
                    body.propagation_policy
                ),
            ));
        }
    };
    Ok((spec, propagation))
}

/// The answer to a finished delete; `trace_id` is the RPC span's.
pub fn response(deleted: Deleted, trace_id: String) -> pb::DeleteResponse {
    let outcome = match deleted.outcome {
        DeleteOutcome::Deleted => pb::DeleteOutcome::Deleted,
        DeleteOutcome::Deleting => pb::DeleteOutcome::Deleting,
        DeleteOutcome::Gone => pb::DeleteOutcome::Gone,
    };
    let object = deleted.object.unwrap_or_default();
    let deletion_timestamp = object["metadata"]["deletionTimestamp"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    pb::DeleteResponse {
        outcome: outcome as i32,
        object_json: if object.is_null() {
            String::new()
        } else {
            object.to_string()
        },
        deletion_timestamp,
        attempts: deleted.attempts.len() as u32,
        attempt_records: respond::records(&deleted.attempts),
        trace_id,
    }
}
