//! What a write asks for, as the engine sees it: validated, typed, free of protobuf.

use std::time::Duration;

use serde_json::Value;

use super::body::resource_version;
use super::error::{Failure, mutation_failure};
use safewrite_api::backoff::Backoff;
use safewrite_api::deadline::AnswerBy;
pub use safewrite_api::target::Target;
use safewrite_api::target::{FieldManager, WriteParams};
use safewrite_mutation::{Cel, Mutation};

/// Server-wide defaults, overridable per request where the API allows.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// AttemptLog per RPC when the request does not say.
    pub max_attempts: u32,
    /// Backoff shape when the request does not say.
    pub backoff: Backoff,
    /// The longest any single API request may take.
    pub request_timeout: Duration,
    /// Field manager when the request does not say.
    pub field_manager: FieldManager,
    /// The share of requests that retries of faults may add, across all callers.
    pub retry_budget_percent: f32,
    /// Retries of faults always allowed per second, whatever the share.
    pub retry_budget_min_per_second: u32,
    /// Concurrent writes to one object are committed together (group commit); off
    /// with `--no-group-commit`.
    pub group_commit: bool,
    /// The most bytes of remembered objects, written from without a GET first
    /// ([`super::memory`]); 0 turns the memory off (`--no-memory`).
    pub memory_bytes: usize,
    /// Secrets are remembered too (`--remember-secrets`).
    pub remember_secrets: bool,
}

/// Which part of the object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subresource {
    /// The main resource (`PUT .../name`): status is never changed.
    Main,
    /// The status subresource (`PUT .../name/status`): only status is changed.
    Status,
}

/// What happens to a deleted object's dependents (`DeleteOptions.propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The object goes at once; the garbage collector deletes its dependents after.
    Background,
    /// The object stays (with a deletionTimestamp) until its blocking dependents are
    /// deleted.
    Foreground,
    /// The dependents are kept, their owner references to the object removed.
    Orphan,
}

// === impl Propagation ===

impl Propagation {
    /// The policy's name as the API server spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
            Propagation::Orphan => "Orphan",
        }
    }
}

/// Conditions checked on the fresh object before every write.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// Must equal the fresh object's `metadata.uid`.
    pub uid: Option<String>,
    /// Strict compare-and-swap: must equal the fresh object's resourceVersion.
    pub resource_version: Option<String>,
    /// A CEL condition that must return true on the fresh object.
    pub cel: Option<Cel>,
}

// === impl Preconditions ===

impl Preconditions {
    pub(super) fn any(&self) -> bool {
        self.uid.is_some() || self.resource_version.is_some() || self.cel.is_some()
    }

    /// Checks uid, exact resourceVersion and the CEL condition on the fresh object (the
    /// condition evaluated no later than `deadline`).
    pub async fn check(&self, fresh: &Value, deadline: AnswerBy) -> Result<(), Failure> {
        if let Some(uid) = &self.uid {
            let actual = fresh["metadata"]["uid"].as_str().unwrap_or_default();
            if actual != uid {
                return Err(Failure::PreconditionFailed {
                    reason: format!("metadata.uid is {actual:?}, not {uid:?}"),
                    current: fresh.clone(),
                });
            }
        }
        if let Some(expected) = &self.resource_version {
            let actual = resource_version(fresh);
            if &actual != expected {
                return Err(Failure::ResourceVersionMismatch {
                    expected: expected.clone(),
                    actual,
                    current: Some(fresh.clone()),
                });
            }
        }
        if let Some(cel) = &self.cel {
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
}

/// The retry policy of one request.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// The most attempts made, the first included.
    pub max_attempts: u32,
    /// The waits between attempts.
    pub backoff: Backoff,
}

/// A validated write request.
#[derive(Debug, Clone)]
pub struct WriteSpec {
    /// The object written.
    pub target: Target,
    /// The part of the object written.
    pub subresource: Subresource,
    /// The declarative mutation; `None` when a [`Mutator`] of the caller's supplies
    /// each attempt's change (Transact).
    pub mutation: Option<Mutation>,
    /// Checked on the fresh object before every write.
    pub preconditions: Preconditions,
    /// How many attempts, and the waits between them.
    pub policy: RetryPolicy,
    /// Sent as every write's `fieldManager`.
    pub field_manager: FieldManager,
    /// Writes are sent with `dryRun=All`: validated and admitted, nothing persisted.
    pub dry_run: bool,
    /// Created (after the mutation is applied to it) when the target is missing.
    pub create_if_missing: Option<Value>,
    /// Recorded on the object with the change, so that the change is made at most once
    /// (see [`crate::idempotency`]); only for the main resource.
    pub idempotency_key: Option<String>,
    /// The caller asked for this write to go on its own, never in a group commit.
    pub write_alone: bool,
    /// The leadership the write is made under: see [`crate::fence`].
    pub fence: Option<super::fence::Fence>,
}

// === impl WriteSpec ===

impl WriteSpec {
    /// The query parameters of this request's writes; `force` for server-side apply.
    pub(super) fn write_params(&self, force: bool) -> WriteParams<'_> {
        WriteParams {
            dry_run: self.dry_run,
            field_manager: Some(&self.field_manager),
            force,
        }
    }

    /// Whether this write may share a read and a write with concurrent writes to the
    /// same object. Server-side apply is merged by the API server, an exact
    /// resourceVersion must meet exactly the version it names, and the caller may have
    /// asked to go alone; those always go alone (as do Transact and creates).
    pub(super) fn may_group(&self) -> bool {
        !self.write_alone
            && self.preconditions.resource_version.is_none()
            && matches!(
                self.mutation,
                Some(
                    Mutation::JsonPatch(_)
                        | Mutation::MergePatch(_)
                        | Mutation::Cel(_)
                        | Mutation::Entry(_)
                )
            )
    }

    /// Whether a write whose answer was lost may be retried: with an idempotency key
    /// the next read tells whether it was applied, and a dry run changes nothing.
    pub(super) fn retry_is_safe(&self) -> bool {
        self.idempotency_key.is_some() || self.dry_run
    }
}

/// What the caller's code wants done with one fresh object.
#[derive(Debug, Clone)]
pub enum Change {
    /// Write this object (the whole new object).
    Object(Value),
    /// Write nothing and end with OUTCOME_ABORTED.
    Abort,
}

/// Supplies the change for each attempt, given the fresh object. The engine does the
/// rest: preconditions, compare, write, classify, backoff.
pub trait Mutator: Send {
    /// The change for attempt `attempt` (from 1) of `fresh`; `creating` when `fresh` is
    /// the create-if-missing object rather than one read from the API server.
    fn mutate(
        &mut self,
        attempt: u32,
        fresh: &Value,
        creating: bool,
    ) -> impl Future<Output = Result<Change, Failure>> + Send;
}

/// A declarative mutation as a [`Mutator`], evaluated no later than the deadline.
pub(super) struct Declarative<'a>(pub &'a Mutation, pub AnswerBy);

// === impl Declarative ===

impl Mutator for Declarative<'_> {
    async fn mutate(&mut self, _: u32, fresh: &Value, creating: bool) -> Result<Change, Failure> {
        let current = if creating { Value::Null } else { fresh.clone() };
        self.0
            .apply(fresh, self.1)
            .await
            .map(Change::Object)
            .map_err(|error| mutation_failure(error, current))
    }
}

/// A write of `mutation` to ConfigMap `default/o`, for tests.
#[cfg(test)]
pub(crate) fn configmap_write(mutation: Mutation, policy: RetryPolicy) -> WriteSpec {
    use safewrite_api::target::{ApiVersion, Kind, Name, Namespace};
    WriteSpec {
        target: Target {
            api_version: ApiVersion::parse("v", "v1").unwrap(),
            kind: Kind::parse("k", "ConfigMap").unwrap(),
            namespace: Namespace::parse("n", "default").unwrap(),
            name: Name::parse("n", "o").unwrap(),
        },
        subresource: Subresource::Main,
        mutation: Some(mutation),
        preconditions: Preconditions::default(),
        policy,
        field_manager: FieldManager::parse("f", "safewrite").unwrap(),
        dry_run: false,
        create_if_missing: None,
        idempotency_key: None,
        write_alone: false,
        fence: None,
    }
}
