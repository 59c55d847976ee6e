//! The get-mutate-update loop. One attempt is: read the fresh object, check the
//! preconditions, apply the mutation, compare, write with the resourceVersion that was
//! read, classify the answer. Conflicts re-read and retry with jittered backoff, bounded
//! by the policy's attempts and by the caller's deadline (never slept past); answers no
//! retry can fix end the loop at once. A mutation that changes nothing writes nothing.
//!
//! The pieces, by file:
//! - `spec`: what a write asks for ([`WriteSpec`]), validated and free of protobuf.
//! - `run`: the loop, one for every write: a batch of members (one, for a write made
//!   alone) read once, folded, written once, each member answered or retried.
//! - `fold`: what a batch's members make of the object read, and each one's answer.
//! - `ends`: how an attempt's end (refused, unanswered, missing, stale) becomes each
//!   member's answer or retry.
//! - `batch`: group commit: concurrent writes to one object queue to share a batch.
//! - `attempt`: the requests an attempt makes (read, write, create, server-side apply)
//!   and its span.
//! - `memory`: the objects remembered from earlier reads and writes, written from
//!   without a GET.
//! - `decide`: how an attempt ended and whether to retry, as pure functions.
//! - `attempts`: the per-request state the loop threads through.
//! - `body`: the bodies sent for the main resource and the status subresource.
//! - `result`: what a finished write returns ([`Written`]), built in one place.
//! - `error`: why a write failed ([`Failure`], [`WriteError`]).

mod attempt;
mod attempts;
mod batch;
mod body;
pub mod classify;
mod decide;
mod ends;
mod error;
mod fold;
mod get;
pub mod idempotency;
mod memory;
mod owner;
mod result;
mod run;
mod spec;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower::retry::budget::{Budget, TpsBudget};

use self::attempt::{attempt_span, record_failure};
use self::attempts::Attempts;
use self::batch::Batcher;
use self::error::{Unresolved, unresolved};
use self::memory::Memory;
use crate::client::discovery::{Discovery, Resolved};
use crate::mutation::{FieldViolation, Mutation};
use crate::target::{ObjectPath, ResourcePath};

pub use self::batch::MAX_MEMBERS;
pub use self::body::resource_version;
pub use self::error::{Failure, WriteError, mutation_failure};
pub use self::get::Got;
pub use self::result::{AttemptRecord, Outcome, Written};
pub use self::spec::{
    Change, EngineConfig, Mutator, Preconditions, RetryPolicy, Subresource, Target, WriteSpec,
};

/// How long requests count toward the retry budget.
pub const RETRY_BUDGET_WINDOW: Duration = Duration::from_secs(10);

/// How long a cached discovery answer is trusted before an answer that contradicts it
/// (a status write to a kind listed without status) makes the engine read it again.
const STALE_AFTER: Duration = Duration::from_secs(1);

/// The write engine, shared by every RPC.
#[derive(Clone)]
pub struct Engine {
    client: kube::Client,
    discovery: Discovery,
    config: Arc<EngineConfig>,
    /// Bounds retries of faults (not conflicts) to a share of all RPCs in a sliding
    /// window, so that many callers cannot multiply an outage.
    budget: Arc<TpsBudget>,
    batcher: Arc<Batcher>,
    memory: Arc<Memory>,
}

impl Engine {
    pub fn new(client: kube::Client, config: EngineConfig) -> Self {
        Self {
            discovery: Discovery::new(client.clone()),
            client,
            budget: Arc::new(TpsBudget::new(
                RETRY_BUDGET_WINDOW,
                config.retry_budget_min_per_second,
                config.retry_budget_percent,
            )),
            memory: Arc::new(Memory::new(config.memory_bytes, config.remember_secrets)),
            config: Arc::new(config),
            batcher: Arc::new(Batcher::default()),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Runs the loop for `spec` and its declarative mutation, ending by `deadline` at
    /// the latest: in a group commit with concurrent writes to the same object when the
    /// write may share one, else alone.
    pub async fn write(
        &self,
        spec: &WriteSpec,
        deadline: Option<Instant>,
    ) -> Result<Written, WriteError> {
        let with_owner = self.with_owner_uid(spec, deadline).await?;
        let spec = with_owner.as_ref().unwrap_or(spec);
        // Without a declarative mutation (refused there) or when it may not be shared.
        if !(self.config.group_commit && spec.may_group()) {
            return self.write_alone(spec, deadline).await;
        }
        let (resolved, request, attempts) = self.begin(spec, deadline).await?;
        self.batcher
            .join(self, spec, None, false, resolved, request, attempts)
            .await
    }

    /// Runs the loop for `spec`'s declarative mutation alone: a batch of one.
    pub(crate) async fn write_alone(
        &self,
        spec: &WriteSpec,
        deadline: Option<Instant>,
    ) -> Result<Written, WriteError> {
        if spec.mutation.is_none() {
            return Err(WriteError {
                failure: Failure::Invalid(FieldViolation::new("mutation", "required")),
                attempts: Vec::new(),
            });
        }
        let with_owner = self.with_owner_uid(spec, deadline).await?;
        let spec = with_owner.as_ref().unwrap_or(spec);
        let (resolved, request, attempts) = self.begin(spec, deadline).await?;
        batch::alone(self, spec, resolved, request, attempts).await
    }

    /// Runs the loop with `mutator`, the caller's own code (Transact, `--exec`),
    /// supplying each attempt's change. Such writes to one object queue in arrival order
    /// and share a batch (each offered the object as the ones before it left it) unless
    /// the write may not share: group commit off, `write_alone`, an exact
    /// resourceVersion.
    pub async fn write_with<M: Mutator + 'static>(
        &self,
        spec: &WriteSpec,
        mutator: M,
        deadline: Option<Instant>,
    ) -> Result<Written, WriteError> {
        let alone = !self.config.group_commit
            || spec.write_alone
            || spec.preconditions.resource_version.is_some();
        let (resolved, request, attempts) = self.begin(spec, deadline).await?;
        self.batcher
            .join(
                self,
                spec,
                Some(Box::new(mutator)),
                alone,
                resolved,
                request,
                attempts,
            )
            .await
    }

    /// The start of every write: the deadline the engine works to (a little before the
    /// caller's, so that it gets this loop's DEADLINE_EXCEEDED, with the attempts,
    /// rather than its own bare one), its deposit in the retry budget, and the target
    /// resolved.
    async fn begin(
        &self,
        spec: &WriteSpec,
        deadline: Option<Instant>,
    ) -> Result<(Arc<Resolved>, ObjectPath, Attempts), WriteError> {
        let deadline = crate::client::answer_by(deadline);
        self.budget.deposit();
        let mut attempts = Attempts::new(self.budget.clone(), spec.policy, deadline);
        if let Some(late) = attempts.late_from_the_start() {
            return Err(attempts.fail(late));
        }
        match self.resolve_target(spec, &mut attempts).await {
            Ok((resolved, request)) => Ok((resolved, request, attempts)),
            Err(failure) => Err(attempts.fail(failure)),
        }
    }

    /// Resolves the kind through discovery and builds the object's request path.
    /// Discovery is a read like any other: its request failures and refusals are
    /// classified as a read's (a throttled or unreachable API server is a fault to back
    /// off from; an open breaker or a rate limit past the deadline ends the loop), and
    /// each failed one is an attempt.
    async fn resolve_target(
        &self,
        spec: &WriteSpec,
        attempts: &mut Attempts,
    ) -> Result<(Arc<Resolved>, ObjectPath), Failure> {
        let resolved = loop {
            match self.resolve(spec, attempts).await {
                Ok(resolved) => break resolved,
                Err(Unresolved::Invalid(failure)) => return Err(failure),
                Err(Unresolved::Request(decision, failure)) => {
                    let span = attempt_span(attempts.begin());
                    if let Failure::Api { code, reason, .. } = &failure {
                        let record = attempts.current();
                        record.http_status = *code;
                        record.reason = reason.clone();
                    }
                    record_failure(&span, decision.name(), &failure);
                    attempts.back_off(&decision, failure, span).await?;
                }
            }
        };
        let resource = &resolved.resource;
        let Some(resource_path) =
            ResourcePath::new(&resource.group, &resource.version, &resource.plural)
        else {
            return Err(Failure::Invalid(FieldViolation::new(
                "target.kind",
                format!(
                    "discovery answered a resource path that is not a DNS name ({:?}); nothing was sent",
                    resource.plural
                ),
            )));
        };
        let request = resource_path.object(&spec.target.namespace, &spec.target.name);
        Ok((resolved, request))
    }

    /// Resolves the kind and checks the request against what discovery says. A status
    /// write to a kind listed without a status subresource re-reads its discovery once
    /// (at most once per [`STALE_AFTER`]) before refusing: the subresource may have been
    /// added to the CRD since it was cached.
    async fn resolve(
        &self,
        spec: &WriteSpec,
        attempts: &Attempts,
    ) -> Result<Arc<Resolved>, Unresolved> {
        let (api_version, kind) = (&spec.target.api_version, &spec.target.kind);
        let deadline = attempts.deadline;
        // A failed discovery request becomes the next attempt.
        let attempt = attempts.made() + 1;
        let mut resolved = self
            .discovery
            .resolve(api_version, kind, deadline)
            .await
            .map_err(|error| unresolved(error, deadline, attempt))?;
        if spec.subresource == Subresource::Status && !resolved.has_status {
            resolved = self
                .discovery
                .refresh(api_version, kind, deadline, STALE_AFTER)
                .await
                .map_err(|error| unresolved(error, deadline, attempt))?;
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
}
