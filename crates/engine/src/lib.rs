//! The get-mutate-update loop. One attempt is: read the fresh object, check the
//! preconditions, apply the mutation, compare, write with the resourceVersion that was
//! read, classify the answer. Conflicts re-read and retry with jittered backoff, bounded
//! by the policy's attempts and by the caller's deadline (never slept past); answers no
//! retry can fix end the loop at once. A mutation that changes nothing writes nothing.
//!
//! The pieces, by file:
//! - `spec`: what a write asks for ([`WriteSpec`]), validated and free of protobuf.
//! - `write/`: the loop's wing: every write a member of one loop, alone or in a group
//!   commit with concurrent writes to the object (see there).
//! - `api`: the requests an attempt makes (send, read, confirm), through the client
//!   stack, discovery, the retry budget and the memory the loop shares.
//! - `memory`: the objects remembered from earlier reads and writes, written from
//!   without a GET; it alone decides what it keeps, refreshes or forgets.
//! - `decide`: how an attempt ended and whether to retry, as pure functions;
//!   `classify`: an API answer -> a decision.
//! - `attempt_log`: each request's log of its attempts (records, policy, deadline),
//!   threaded through the loop; `spans`: each
//!   attempt's span.
//! - `owner`: an owner's uid, read before the loop; `get`: read your own writes;
//!   `delete`: a delete conditioned on the object it was decided on, retried as writes.
//! - `body`: the bodies sent for the main resource and the status subresource.
//! - `idempotency`: keys recorded with the change.
//! - `result`: what a finished write returns ([`Written`]), built in one place.
//! - `error`: why a write failed ([`Failure`], [`WriteError`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod api;
mod attempt_log;
mod body;
pub mod classify;
mod decide;
mod delete;
mod error;
pub mod fence;
mod get;
pub mod idempotency;
mod memory;
pub mod metrics;
mod owner;
mod result;
mod spans;
mod spec;
#[cfg(test)]
mod tests;
mod write;

use std::sync::Arc;
use std::time::Duration;

use safewrite_api::deadline::CallDeadline;
use tower::retry::budget::TpsBudget;

use self::api::Api;
use self::memory::Memory;
use self::write::{Batcher, OwnCode, Sharing};
use safewrite_api::target::FieldViolation;
use safewrite_client::ApiClient;
use safewrite_client::discovery::Discovery;

pub use self::body::{json_len, resource_version};
pub use self::delete::{DeleteOutcome, Deleted};
pub use self::error::{Cancel, Failure, Fault, WriteError, mutation_failure};
pub use self::get::Got;
pub use self::metrics::EngineMetrics;
pub use self::result::{AttemptRecord, Outcome, Written};
pub use self::spec::{
    Change, EngineConfig, Mutator, Preconditions, Propagation, RetryPolicy, Subresource, Target,
    WriteSpec,
};
pub use self::write::MAX_MEMBERS;

/// How long requests count toward the retry budget.
pub const RETRY_BUDGET_WINDOW: Duration = Duration::from_secs(10);

/// The write engine, shared by every RPC.
#[derive(Clone)]
pub struct Engine {
    api: Api,
    batcher: Arc<Batcher>,
}

// === impl Engine ===

impl Engine {
    /// The engine over `client`, recording in `metrics`.
    pub fn new(client: ApiClient, config: EngineConfig, metrics: EngineMetrics) -> Self {
        let api = Api {
            discovery: Discovery::new(client.clone()),
            client,
            budget: Arc::new(TpsBudget::new(
                RETRY_BUDGET_WINDOW,
                config.retry_budget_min_per_second,
                config.retry_budget_percent,
            )),
            memory: Arc::new(Memory::new(
                config.memory_bytes,
                config.remember_secrets,
                metrics.clone(),
            )),
            metrics,
            holdings: Arc::default(),
            config: Arc::new(config),
        };
        Self {
            api,
            batcher: Arc::new(Batcher::default()),
        }
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.api.config
    }

    /// The client stack the engine sends through, for traffic of its own kind (a Lease
    /// campaign marks its requests to bypass the rate limit and the breaker).
    pub fn client(&self) -> &ApiClient {
        &self.api.client
    }

    /// What this process's Lease campaigns hold: each campaign publishes its leadership
    /// here, and fenced writes check it (see [`fence`]).
    pub fn holdings(&self) -> &Arc<fence::Holdings> {
        &self.api.holdings
    }

    /// Runs the loop for `spec` and its declarative mutation, ending by `deadline` at
    /// the latest: in a group commit with concurrent writes to the same object when the
    /// write may share one, else alone.
    pub async fn write(
        &self,
        spec: &WriteSpec,
        deadline: CallDeadline,
    ) -> Result<Written, WriteError> {
        // Without a declarative mutation (refused there) or when it may not share.
        if !(self.api.config.group_commit && spec.may_group()) {
            return self.write_unshared(spec, deadline).await;
        }
        let with_owner = self.api.with_owner_uid(spec, deadline).await?;
        let spec = with_owner.as_ref().unwrap_or(spec);
        let start = write::begin(&self.api, spec, deadline).await?;
        self.batcher
            .join(&self.api, spec, None, Sharing::Grouped, start)
            .await
    }

    /// Runs the loop for `spec`'s declarative mutation alone: a batch of one.
    pub(crate) async fn write_unshared(
        &self,
        spec: &WriteSpec,
        deadline: CallDeadline,
    ) -> Result<Written, WriteError> {
        if spec.mutation.is_none() {
            return Err(WriteError {
                failure: Failure::Invalid(FieldViolation::new("mutation", "required")),
                attempts: Vec::new(),
            });
        }
        let with_owner = self.api.with_owner_uid(spec, deadline).await?;
        let spec = with_owner.as_ref().unwrap_or(spec);
        let start = write::begin(&self.api, spec, deadline).await?;
        write::write_unshared(&self.api, spec, start).await
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
        deadline: CallDeadline,
    ) -> Result<Written, WriteError> {
        let sharing = if !self.api.config.group_commit
            || spec.write_alone
            || spec.preconditions.resource_version.is_some()
        {
            Sharing::Isolated
        } else {
            Sharing::Grouped
        };
        let start = write::begin(&self.api, spec, deadline).await?;
        let own: Box<dyn OwnCode> = Box::new(mutator);
        self.batcher
            .join(&self.api, spec, Some(own), sharing, start)
            .await
    }

    /// Reads `spec.target` at least as new as `min_version`, by `deadline` (see
    /// [`get`]).
    pub async fn get(
        &self,
        spec: &WriteSpec,
        min_version: Option<&str>,
        deadline: CallDeadline,
    ) -> Result<Got, WriteError> {
        let start = write::begin(&self.api, spec, deadline).await?;
        get::get(&self.api, start.request, start.attempts, min_version).await
    }

    /// Deletes `spec.target` with `propagation` by `deadline`: read live, the
    /// preconditions checked, one DELETE conditioned on the object read, retried on
    /// conflict as writes are (see [`delete`]).
    pub async fn delete(
        &self,
        spec: &WriteSpec,
        propagation: Option<Propagation>,
        deadline: CallDeadline,
    ) -> Result<Deleted, WriteError> {
        let start = write::begin(&self.api, spec, deadline).await?;
        delete::delete(&self.api, spec, propagation, start).await
    }
}
