//! The request boundary: a write request is parsed here, once, into a validated
//! [`WriteSpec`] of typed values before anything runs. Everything that can be known to
//! be wrong without the API server is refused here with INVALID_ARGUMENT naming the
//! field: identities that break Kubernetes' naming rules (see [`safewrite_api::target`]),
//! over-long strings, malformed JSON, CEL that does not compile, option combinations
//! that cannot work. Nothing downstream sees the request's raw strings.

use std::time::Duration;

use serde_json::Value;

use safewrite_api::backoff::Backoff;
use safewrite_api::pb;
use safewrite_api::target::FieldViolation;
use safewrite_api::target::{self, ApiVersion, FieldManager, Kind, Name, Namespace, Target};
use safewrite_engine::idempotency;
use safewrite_engine::{EngineConfig, Preconditions, RetryPolicy, Subresource, WriteSpec};
use safewrite_mutation::{Cel, Mutation};

/// The most attempts a request's retry policy may ask for.
pub const MAX_ATTEMPTS: u32 = 1000;

/// The fields every write request has.
pub struct RequestParts<'a> {
    /// The object to write (`target`).
    pub target: Option<&'a pb::ObjectRef>,
    /// The change (`mutation`); absent in a Transact begin.
    pub mutation: Option<&'a pb::Mutation>,
    /// Checked on the fresh object before every write (`preconditions`).
    pub preconditions: Option<&'a pb::Preconditions>,
    /// Attempts and backoff (`retry_policy`).
    pub retry_policy: Option<&'a pb::RetryPolicy>,
    /// Field manager, dry run, create-if-missing, idempotency key, write-alone (`options`).
    pub options: Option<&'a pb::WriteOptions>,
}

// === impl RequestParts ===

impl<'a> From<&'a pb::UpdateWithRetryRequest> for RequestParts<'a> {
    fn from(body: &'a pb::UpdateWithRetryRequest) -> Self {
        RequestParts {
            target: body.target.as_ref(),
            mutation: body.mutation.as_ref(),
            preconditions: body.preconditions.as_ref(),
            retry_policy: body.retry_policy.as_ref(),
            options: body.options.as_ref(),
        }
    }
}

/// Checks a request and compiles it into a `WriteSpec`.
///
/// # Errors
/// The first field that does not validate, as a [`FieldViolation`] naming it.
pub fn validate(
    parts: RequestParts<'_>,
    subresource: Subresource,
    config: &EngineConfig,
) -> Result<WriteSpec, FieldViolation> {
    validate_parts(parts, subresource, config, true)
}

/// `validate`, with the mutation optional when `require_mutation` is false (Transact,
/// where the caller's code supplies each change).
///
/// # Errors
/// As [`validate`].
pub fn validate_parts(
    parts: RequestParts<'_>,
    subresource: Subresource,
    config: &EngineConfig,
    require_mutation: bool,
) -> Result<WriteSpec, FieldViolation> {
    let target = parse_target(parts.target)?;
    let mut mutation = match parts.mutation {
        None if !require_mutation => None,
        given => Some(Mutation::from_proto("mutation", given)?),
    };
    if let Some(Mutation::Apply { configuration, .. }) = &mut mutation {
        fill_identity("mutation.apply.configuration_json", configuration, &target)?;
    }
    let preconditions = parse_preconditions(parts.preconditions)?;
    let policy = parse_policy(parts.retry_policy, config)?;

    let options = parts.options.cloned().unwrap_or_default();
    let create_if_missing = match options.create_if_missing_json.as_str() {
        "" => None,
        _ if subresource == Subresource::Status => {
            return Err(FieldViolation::new(
                "options.create_if_missing_json",
                "PatchStatus cannot create: create the object with UpdateWithRetry first",
            ));
        }
        text => {
            let field = "options.create_if_missing_json";
            let mut object = safewrite_mutation::parse_json(field, text)?;
            if !object.is_object() {
                return Err(FieldViolation::new(field, "must be a JSON object"));
            }
            fill_identity(field, &mut object, &target)?;
            Some(object)
        }
    };
    let idempotency_key = match options.idempotency_key.as_str() {
        "" => None,
        key => {
            let field = "options.idempotency_key";
            idempotency::validate(key, field)?;
            if subresource == Subresource::Status {
                return Err(FieldViolation::new(
                    field,
                    "not supported for the status subresource: a status write cannot record the key; leave it empty",
                ));
            }
            if matches!(mutation, Some(Mutation::Apply { .. })) {
                return Err(FieldViolation::new(
                    field,
                    "not needed with server-side apply, which is idempotent already; leave it empty",
                ));
            }
            Some(key.to_string())
        }
    };
    let fence = parse_fence("options.fence", options.fence.as_ref())?;
    let field_manager = match options.field_manager.as_str() {
        "" => config.field_manager.clone(),
        text => FieldManager::parse("options.field_manager", text)?,
    };
    Ok(WriteSpec {
        target,
        subresource,
        mutation,
        preconditions,
        policy,
        field_manager,
        dry_run: options.dry_run,
        create_if_missing,
        idempotency_key,
        write_alone: options.write_alone,
        fence,
    })
}

/// A fence as the engine takes it: the Lease's name checked as `rpc Lead` checks it,
/// and an epoch (0 is no epoch: rpc Lead never answers it). `field` is where it sits.
///
/// # Errors
/// A [`FieldViolation`] naming `field.lease_namespace`, `.lease_name` or `.epoch`.
pub fn parse_fence(
    field: &str,
    fence: Option<&pb::Fence>,
) -> Result<Option<safewrite_engine::fence::Fence>, FieldViolation> {
    let Some(fence) = fence else {
        return Ok(None);
    };
    let lease = crate::lease::LeaseName::parse(&fence.lease_namespace, &fence.lease_name)
        .map_err(|v| FieldViolation::new(format!("{field}.lease_{}", v.field), v.description))?;
    if fence.epoch == 0 {
        return Err(FieldViolation::new(
            format!("{field}.epoch"),
            "required: the epoch rpc Lead answered (LeadResponse.epoch)",
        ));
    }
    Ok(Some(safewrite_engine::fence::Fence {
        namespace: lease.namespace,
        name: lease.name,
        epoch: fence.epoch,
    }))
}

/// The target's identity, each part checked against Kubernetes' rules.
fn parse_target(target: Option<&pb::ObjectRef>) -> Result<Target, FieldViolation> {
    let target =
        target.ok_or_else(|| FieldViolation::new("target", "required: the object to write"))?;
    for (field, value) in [
        ("target.api_version", &target.api_version),
        ("target.kind", &target.kind),
        ("target.name", &target.name),
    ] {
        if value.is_empty() {
            return Err(FieldViolation::new(field, "required"));
        }
    }
    Ok(Target {
        api_version: ApiVersion::parse("target.api_version", &target.api_version)?,
        kind: Kind::parse("target.kind", &target.kind)?,
        namespace: Namespace::parse("target.namespace", &target.namespace)?,
        name: Name::parse("target.name", &target.name)?,
    })
}

fn parse_preconditions(pre: Option<&pb::Preconditions>) -> Result<Preconditions, FieldViolation> {
    let Some(pre) = pre else {
        return Ok(Preconditions::default());
    };
    let token = |field: &str, text: &str| match text {
        "" => Ok(None),
        text => target::opaque(field, text).map(Some),
    };
    Ok(Preconditions {
        uid: token("preconditions.uid", &pre.uid)?,
        resource_version: token("preconditions.resource_version", &pre.resource_version)?,
        cel: match pre.cel.as_str() {
            "" => None,
            source => Some(Cel::compile("preconditions.cel", source)?),
        },
    })
}

fn parse_policy(
    policy: Option<&pb::RetryPolicy>,
    config: &EngineConfig,
) -> Result<RetryPolicy, FieldViolation> {
    let policy = policy.cloned().unwrap_or_default();
    let duration = |field: &str, d: Option<prost_types::Duration>, default: Duration| match d {
        None => Ok(default),
        Some(d) => Duration::try_from(d)
            .map_err(|_| FieldViolation::new(field, "must be a non-negative duration")),
    };
    let max_attempts = match (policy.requeue, policy.max_attempts) {
        (true, _) => 1,
        (false, 0) => config.max_attempts,
        (false, n) if n > MAX_ATTEMPTS => {
            return Err(FieldViolation::new(
                "retry_policy.max_attempts",
                format!("at most {MAX_ATTEMPTS}"),
            ));
        }
        (false, n) => n,
    };
    Ok(RetryPolicy {
        max_attempts,
        backoff: Backoff {
            initial: duration(
                "retry_policy.initial_backoff",
                policy.initial_backoff,
                config.backoff.initial,
            )?,
            max: duration(
                "retry_policy.max_backoff",
                policy.max_backoff,
                config.backoff.max,
            )?,
        },
    })
}

/// Sets apiVersion, kind, metadata.name and metadata.namespace of `object` from the
/// target, refusing an object that names a different one.
fn fill_identity(field: &str, object: &mut Value, target: &Target) -> Result<(), FieldViolation> {
    let mut set = |path: &[&str], want: &str| -> Result<(), FieldViolation> {
        if want.is_empty() {
            return Ok(());
        }
        let mut node = &mut *object;
        for key in &path[..path.len() - 1] {
            node = node
                .as_object_mut()
                .ok_or_else(|| FieldViolation::new(field, "must be a JSON object"))?
                .entry(key.to_string())
                .or_insert_with(|| Value::Object(Default::default()));
        }
        let map = node
            .as_object_mut()
            .ok_or_else(|| FieldViolation::new(field, format!("{} must be an object", path[0])))?;
        let last = path[path.len() - 1];
        match map.get(last) {
            Some(Value::String(have)) if have != want => Err(FieldViolation::new(
                field,
                format!(
                    "{} is {:?} but the target says {want:?}",
                    path.join("."),
                    excerpt(have)
                ),
            )),
            _ => {
                map.insert(last.to_string(), Value::String(want.to_string()));
                Ok(())
            }
        }
    };
    set(&["apiVersion"], &target.api_version)?;
    set(&["kind"], &target.kind)?;
    set(&["metadata", "name"], &target.name)?;
    set(&["metadata", "namespace"], &target.namespace)
}

/// At most the first 64 characters of `text`, for quoting a caller's value in a message.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> EngineConfig {
        EngineConfig {
            max_attempts: 5,
            backoff: Backoff {
                initial: Duration::from_millis(10),
                max: Duration::from_secs(1),
            },
            request_timeout: Duration::from_secs(5),
            field_manager: FieldManager::parse("f", "safewrite").unwrap(),
            retry_budget_percent: 0.2,
            retry_budget_min_per_second: 10,
            group_commit: true,
            memory_bytes: 0,
            remember_secrets: false,
        }
    }

    fn request(
        target: pb::ObjectRef,
        options: pb::WriteOptions,
    ) -> Result<WriteSpec, FieldViolation> {
        let mutation = pb::Mutation {
            kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: r#"{"data": {"a": "1"}}"#.into(),
            })),
        };
        validate(
            RequestParts {
                target: Some(&target),
                mutation: Some(&mutation),
                preconditions: None,
                retry_policy: None,
                options: Some(&options),
            },
            Subresource::Main,
            &config(),
        )
    }

    fn configmap(namespace: &str, name: &str) -> pb::ObjectRef {
        pb::ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn the_reviewers_redirections_are_refused_naming_the_field() {
        for (target, field) in [
            (configmap("acl/secrets/victim#", "x"), "target.namespace"),
            (configmap("default", "x#"), "target.name"),
            (configmap("default", "x?dryRun=All"), "target.name"),
        ] {
            let err = request(target, Default::default()).unwrap_err();
            assert_eq!(err.field, field);
        }
        let long = pb::WriteOptions {
            field_manager: "m".repeat(129),
            ..Default::default()
        };
        let err = request(configmap("default", "x"), long).unwrap_err();
        assert_eq!(err.field, "options.field_manager");
    }

    #[test]
    fn a_valid_request_keeps_its_typed_identity() {
        let spec = request(configmap("default", "x"), Default::default()).unwrap();
        assert_eq!(&*spec.target.name, "x");
        assert_eq!(&*spec.field_manager, "safewrite");
    }

    #[test]
    fn a_mismatched_identity_quotes_only_an_excerpt() {
        let create = pb::WriteOptions {
            create_if_missing_json: serde_json::json!({"metadata": {"name": "y".repeat(10_000)}})
                .to_string(),
            ..Default::default()
        };
        let err = request(configmap("default", "x"), create).unwrap_err();
        assert_eq!(err.field, "options.create_if_missing_json");
        assert!(err.description.len() < 200, "{}", err.description.len());
    }
}
