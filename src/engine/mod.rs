//! The get-mutate-update loop. One attempt is: read the fresh object, check the
//! preconditions, apply the mutation, compare, write with the resourceVersion that was
//! read, classify the answer. Conflicts re-read and retry with jittered backoff, bounded
//! by the policy's attempts and by the caller's deadline (never slept past); answers no
//! retry can fix end the loop at once. A mutation that changes nothing writes nothing.
//!
//! The pieces, by file:
//! - `spec`: what a write asks for ([`WriteSpec`]), validated and free of protobuf.
//! - `attempt`: one attempt of a write made alone, and the requests it makes.
//! - `batch`: group commit: concurrent writes to one object share a read and a write.
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
mod memory;
mod result;
mod spec;
mod turns;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower::retry::budget::{Budget, TpsBudget};
use tracing::Instrument as _;

use self::attempt::{attempt_span, record_failure, record_step};
use self::attempts::Attempts;
use self::batch::Batcher;
use self::decide::Step;
use self::error::{Unresolved, unresolved};
use self::memory::Memory;
use self::spec::Declarative;
use self::turns::Turns;
use crate::client::discovery::{Discovery, Resolved};
use crate::mutation::{FieldViolation, Mutation};
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
        let Some(mutation) = &spec.mutation else {
            return Err(WriteError {
                failure: Failure::Invalid(FieldViolation::new("mutation", "required")),
                attempts: Vec::new(),
            });
        };
        self.write_alone_with(spec, &mut Declarative(mutation, deadline), deadline, false)
            .await
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
        self.write_alone_with(spec, mutator, deadline, true).await
    }

    /// Runs the loop alone with `mutator` supplying each attempt's change (server-side
    /// apply, when `spec.mutation` is one, goes to the API server instead); with
    /// `take_turn`, in turn with the other such writes to the object.
    async fn write_alone_with<M: Mutator>(
        &self,
        spec: &WriteSpec,
        mutator: &mut M,
        deadline: Option<Instant>,
        take_turn: bool,
    ) -> Result<Written, WriteError> {
        // Answer a little before the caller's deadline, so that it gets this loop's
        // DEADLINE_EXCEEDED (with the attempts) rather than its own bare one.
        let deadline = crate::client::answer_by(deadline);
        self.budget.deposit();
        let attempts = Attempts::new(self.budget.clone(), spec.policy, deadline);
        if let Some(late) = attempts.late_from_the_start() {
            return Err(attempts.fail(late));
        }
        self.write_with_attempts(spec, mutator, attempts, take_turn)
            .await
    }

    /// The loop of a write made alone, going on from `attempts` (those already made for
    /// this request, e.g. in a group commit it left). With `take_turn`, it first waits
    /// for its turn among the writes made alone to the same object ([`turns`]); a
    /// group commit's driver, which orders its object's writes already, does not.
    async fn write_with_attempts<M: Mutator>(
        &self,
        spec: &WriteSpec,
        mutator: &mut M,
        mut attempts: Attempts,
        take_turn: bool,
    ) -> Result<Written, WriteError> {
        let (resolved, request) = match self.resolve_target(spec, &mut attempts).await {
            Ok(found) => found,
            Err(failure) => return Err(attempts.fail(failure)),
        };
        let _turn = if take_turn {
            match self.turns.take(request.as_str(), attempts.deadline).await {
                Some(turn) => Some(turn),
                None => {
                    let made = attempts.made();
                    return Err(attempts.fail(Failure::Deadline {
                        attempts: made,
                        last: "the deadline passed while the write waited for the writes to the same object before it".into(),
                    }));
                }
            }
        } else {
            None
        };
        loop {
            let span = attempt_span(attempts.begin());
            let step = match &spec.mutation {
                Some(Mutation::Apply {
                    configuration,
                    force,
                }) => {
                    self.apply_attempt(spec, &request, configuration, *force, &mut attempts)
                        .instrument(span.clone())
                        .await
                }
                _ => {
                    self.attempt(spec, &resolved, &request, mutator, &mut attempts)
                        .instrument(span.clone())
                        .await
                }
            };
            record_step(&span, &step);
            match step {
                Step::Done(done) => return Ok(attempts.finish(done)),
                Step::Fail(failure) => return Err(attempts.fail(failure)),
                Step::Retry(decision, failure) => {
                    if let Err(failure) = attempts.back_off(&decision, failure, span).await {
                        return Err(attempts.fail(failure));
                    }
                }
            }
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
        Ok(resolved)
    }
}
