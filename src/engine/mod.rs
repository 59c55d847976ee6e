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
//! - `batch`: group commit: concurrent writes to one object queue to share a batch.
//! - `attempt`: the requests an attempt makes (read, write, create, server-side apply)
//!   and its span.
//! - `memory`: the objects remembered from earlier reads and writes, written from
//!   without a GET.
//! - `turns`: writes made alone to one object take turns instead of racing.
//! - `decide`: how an attempt ended and whether to retry, as pure functions.
//! - `attempts`: the per-request state the loop threads through.
//! - `body`: the bodies sent for the main resource and the status subresource.
//! - `result`: what a finished write returns ([`Written`]), built in one place.
//! - `error`: why a write failed ([`Failure`], [`WriteError`]).

mod attempt;
mod attempts;
mod batch;
mod body;
mod decide;
mod error;
mod fold;
mod memory;
mod result;
mod run;
mod spec;
#[cfg(test)]
mod tests;
mod turns;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower::retry::budget::{Budget, TpsBudget};

use self::attempt::{attempt_span, record_failure};
use self::attempts::Attempts;
use self::batch::Batcher;
use self::error::{Unresolved, unresolved};
use self::fold::OwnCode;
use self::memory::Memory;
use self::turns::Turns;
use crate::client::discovery::{Discovery, Resolved};
use crate::mutation::FieldViolation;
use crate::target::{ObjectPath, ResourcePath};

pub use self::batch::MAX_MEMBERS;
pub use self::body::resource_version;
pub use self::error::{Failure, WriteError, mutation_failure};
pub use self::result::{AttemptRecord, Outcome, Written};
pub use self::spec::{
    Change, EngineConfig, Mutator, Policy, Preconditions, Subresource, Target, WriteSpec,
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
    turns: Arc<Turns>,
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
            turns: Arc::new(Turns::default()),
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
        // Without a declarative mutation (refused there) or when it may not be shared.
        if !(self.config.group_commit && spec.may_group()) {
            return self.write_alone(spec, deadline).await;
        }
        let deadline = crate::client::answer_by(deadline);
        self.budget.deposit();
        let mut attempts = Attempts::new(self.budget.clone(), spec.policy, deadline);
        if let Some(late) = attempts.late_from_the_start() {
            return Err(attempts.fail(late));
        }
        let (resolved, request) = match self.resolve_target(spec, &mut attempts).await {
            Ok(found) => found,
            Err(failure) => return Err(attempts.fail(failure)),
        };
        self.batcher
            .join(self, spec, resolved, request, attempts)
            .await
    }

    /// Runs the loop for `spec`'s declarative mutation alone.
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
        self.write_alone_with(spec, None, deadline).await
    }

    /// Runs the loop alone with `mutator`, the caller's own code (Transact, `--exec`),
    /// supplying each attempt's change, after waiting for its turn among the others to
    /// the same object ([`turns`]).
    pub async fn write_with<M: Mutator>(
        &self,
        spec: &WriteSpec,
        mutator: &mut M,
        deadline: Option<Instant>,
    ) -> Result<Written, WriteError> {
        self.write_alone_with(spec, Some(mutator), deadline).await
    }

    /// Runs the loop for `spec` alone, a batch of one, with the caller's own code
    /// (`own`) or the spec's mutation making each attempt's change (server-side apply
    /// goes to the API server instead). The caller's own code waits first for its turn
    /// among the others to the same object: declarative writes made alone do not (a
    /// Transact's code may make one to the object its turn holds).
    async fn write_alone_with<'m>(
        &self,
        spec: &'m WriteSpec,
        own: Option<&'m mut (dyn OwnCode + 'm)>,
        deadline: Option<Instant>,
    ) -> Result<Written, WriteError> {
        // Answer a little before the caller's deadline, so that it gets this loop's
        // DEADLINE_EXCEEDED (with the attempts) rather than its own bare one.
        let deadline = crate::client::answer_by(deadline);
        self.budget.deposit();
        let mut attempts = Attempts::new(self.budget.clone(), spec.policy, deadline);
        if let Some(late) = attempts.late_from_the_start() {
            return Err(attempts.fail(late));
        }
        let (resolved, request) = match self.resolve_target(spec, &mut attempts).await {
            Ok(found) => found,
            Err(failure) => return Err(attempts.fail(failure)),
        };
        let _turn = match own {
            Some(_) => match self.turns.take(request.as_str(), attempts.deadline).await {
                Some(turn) => Some(turn),
                None => {
                    let made = attempts.made();
                    return Err(attempts.fail(Failure::Deadline {
                        attempts: made,
                        last: "the deadline passed while the write waited for the writes to the same object before it".into(),
                    }));
                }
            },
            None => None,
        };
        batch::alone(self, spec, own, resolved, request, attempts).await
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
        Ok(resolved)
    }
}
