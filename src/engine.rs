//! The get-mutate-update loop. One attempt is: read the fresh object, check the
//! preconditions, apply the mutation, compare, write with the resourceVersion that was
//! read, classify the answer. Conflicts re-read and retry with jittered backoff, bounded
//! by the policy's attempts and by the caller's deadline (never slept past); answers no
//! retry can fix end the loop at once. A mutation that changes nothing writes nothing.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tower::retry::budget::{Budget, TpsBudget};
use tracing::field::Empty;
use tracing::{Instrument as _, Span, debug};

use crate::backoff::Backoff;
use crate::classify::{self, Decision, INTERNAL_ERROR_RETRIES};
use crate::client::apiserver::{self, Answer, RequestError};
use crate::client::discovery::{self, Discovery, DiscoveryError, Resolved};
use crate::idempotency;
use crate::mutation::{ApplyError, Cel, FieldViolation, Mutation};
use crate::pb;
pub use crate::target::Target;
use crate::target::{FieldManager, ObjectPath, ResourcePath, Verb, WriteParams};

/// Server-wide defaults, overridable per request where the API allows.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Attempts per RPC when the request does not say.
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
}

/// How long requests count toward the retry budget.
pub const RETRY_BUDGET_WINDOW: Duration = Duration::from_secs(10);

/// Which part of the object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The main resource (`PUT .../name`): status is never changed.
    Main,
    /// The status subresource (`PUT .../name/status`): only status is changed.
    Status,
}

/// Conditions checked on the fresh object before every write.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    /// Strict compare-and-swap: must equal the fresh object's resourceVersion.
    pub resource_version: Option<String>,
    pub cel: Option<Cel>,
}

impl WriteSpec {
    /// The query parameters of this request's writes; `force` for server-side apply.
    fn write_params(&self, force: bool) -> WriteParams<'_> {
        WriteParams {
            dry_run: self.dry_run,
            field_manager: Some(&self.field_manager),
            force,
        }
    }
}

impl Preconditions {
    fn any(&self) -> bool {
        self.uid.is_some() || self.resource_version.is_some() || self.cel.is_some()
    }
}

/// The retry policy of one request.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub max_attempts: u32,
    pub backoff: Backoff,
}

/// A validated write request.
#[derive(Debug, Clone)]
pub struct WriteSpec {
    pub target: Target,
    pub subresource: Subresource,
    /// The declarative mutation; `None` when a [`Mutator`] of the caller's supplies
    /// each attempt's change (Transact).
    pub mutation: Option<Mutation>,
    pub preconditions: Preconditions,
    pub policy: Policy,
    pub field_manager: FieldManager,
    pub dry_run: bool,
    /// Created (after the mutation is applied to it) when the target is missing.
    pub create_if_missing: Option<Value>,
    /// Recorded on the object with the change, so that the change is made at most once
    /// (see [`crate::idempotency`]); only for the main resource.
    pub idempotency_key: Option<String>,
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
struct Declarative<'a>(&'a Mutation, Option<Instant>);

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

/// A finished write.
#[derive(Debug, Clone)]
pub struct Written {
    pub outcome: pb::Outcome,
    pub object: Value,
    pub resource_version: String,
    pub attempts: Vec<pb::AttemptRecord>,
    /// The idempotency key was already on the object: nothing was written.
    pub already_applied: bool,
}

/// A failed write: why, and the attempts made.
#[derive(Debug)]
pub struct WriteError {
    pub failure: Failure,
    pub attempts: Vec<pb::AttemptRecord>,
}

/// Why a write failed. `respond::to_status` maps each to its gRPC code.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The request does not fit the resolved kind (namespace, subresource, object).
    #[error("{0}")]
    Invalid(FieldViolation),
    /// The kind is not served, or its apiVersion does not parse.
    #[error(transparent)]
    UnknownKind(DiscoveryError),
    /// A precondition (uid, CEL condition, JSON Patch test) is false on the fresh object.
    #[error("precondition failed: {reason}; nothing was written")]
    PreconditionFailed { reason: String, current: Value },
    /// The mutation could not be applied to the fresh object.
    #[error("{error}; nothing was written")]
    Mutation { error: ApplyError, current: Value },
    /// Strict compare-and-swap failed: the object is no longer at the expected version.
    #[error(
        "the object is at resourceVersion {actual}, not {expected}: it changed since you read it; re-read and decide again"
    )]
    ResourceVersionMismatch {
        expected: String,
        actual: String,
        current: Option<Value>,
    },
    /// The API server's final answer (or the last one, when retries ran out).
    #[error("{message}")]
    Api {
        decision: Decision,
        code: u16,
        reason: String,
        message: String,
        status: Option<Box<kube::core::Status>>,
    },
    /// No answer from the API server, and retries ran out.
    #[error("{error}")]
    Transport { error: RequestError },
    /// A write was sent but its answer was lost, and the request has no idempotency
    /// key: retrying could apply the change twice, so the loop stopped.
    #[error(
        "the write was sent but its answer was lost ({last}): it may or may not have been applied. Read the object to find out, or set options.idempotency_key so that safewrite retries such writes safely"
    )]
    OutcomeUnknown { last: String },
    /// The caller's deadline came before the write could be completed.
    #[error("the deadline passed after {attempts} attempt(s); last: {last}")]
    Deadline { attempts: u32, last: String },
    /// A 2xx answer whose body could not be used.
    #[error("{0}")]
    BadAnswer(RequestError),
    /// Retrying this fault would exceed the shared retry budget.
    #[error(
        "not retried: the sidecar's retry budget is spent (too many retries across all callers); last: {last}"
    )]
    RetryBudget { last: String },
    /// The circuit breaker to the API server is open: the RPC fails fast.
    #[error("{}", crate::client::breaker::CircuitOpen { retry_after: *retry_after })]
    CircuitOpen { retry_after: Duration },
    /// The local rate limit would have delayed a request past the caller's deadline.
    #[error("{}", crate::client::ratelimit::WouldExceedDeadline { wait: *wait })]
    RateLimited { wait: Duration },
    /// The caller went away or broke the Transact protocol mid-transaction; nothing
    /// was written after that point.
    #[error("{0}")]
    Cancelled(String),
}

impl Failure {
    /// A short name of the failure for spans and metrics: the Kubernetes reason for an
    /// API answer, else the kind of failure. Never the message (it may quote contents).
    pub fn kind(&self) -> &str {
        match self {
            Failure::Invalid(_) => "invalid_request",
            Failure::UnknownKind(_) => "unknown_kind",
            Failure::PreconditionFailed { .. } => "precondition_failed",
            Failure::Mutation { .. } => "mutation_failed",
            Failure::ResourceVersionMismatch { .. } => "resource_version_mismatch",
            Failure::Api { reason, .. } if !reason.is_empty() => reason,
            Failure::Api { .. } => "api_error",
            Failure::Transport { .. } => "transport",
            Failure::OutcomeUnknown { .. } => "write_outcome_unknown",
            Failure::Deadline { .. } => "deadline_exceeded",
            Failure::BadAnswer(_) => "bad_answer",
            Failure::RetryBudget { .. } => "retry_budget_exhausted",
            Failure::CircuitOpen { .. } => "circuit_open",
            Failure::RateLimited { .. } => "rate_limited",
            Failure::Cancelled(_) => "cancelled",
        }
    }
}

/// The write engine, shared by every RPC.
#[derive(Clone)]
pub struct Engine {
    client: kube::Client,
    discovery: Discovery,
    config: Arc<EngineConfig>,
    /// Bounds retries of faults (not conflicts) to a share of all RPCs in a sliding
    /// window, so that many callers cannot multiply an outage.
    budget: Arc<TpsBudget>,
}

/// Per-attempt state the loop threads through.
struct Attempts {
    budget: Arc<TpsBudget>,
    records: Vec<pb::AttemptRecord>,
    internal_retries: u32,
    rng: fastrand::Rng,
    deadline: Option<Instant>,
    policy: Policy,
}

impl Attempts {
    fn current(&mut self) -> &mut pb::AttemptRecord {
        self.records.last_mut().expect("an attempt is open")
    }

    fn begin(&mut self) -> u32 {
        let number = self.records.len() as u32 + 1;
        self.records.push(pb::AttemptRecord {
            number,
            ..Default::default()
        });
        number
    }

    fn fail(self, failure: Failure) -> WriteError {
        WriteError {
            failure,
            attempts: self.records,
        }
    }

    /// Plans the wait after a retryable outcome, ends the attempt's span (its duration
    /// is the attempt's own; the wait is its `safewrite.backoff_ms`), then sleeps.
    /// Returns the failure to end with when the loop must stop.
    async fn back_off(
        &mut self,
        decision: &Decision,
        last: Failure,
        span: Span,
    ) -> Result<(), Failure> {
        let wait = self.plan_backoff(decision, last, &span);
        drop(span);
        tokio::time::sleep(wait?).await;
        Ok(())
    }

    /// Decides whether to go on after a retryable outcome and how long to wait first,
    /// recording the wait in the attempt's record and span. Returns the failure to end
    /// with when the loop must stop.
    fn plan_backoff(
        &mut self,
        decision: &Decision,
        last: Failure,
        span: &Span,
    ) -> Result<Duration, Failure> {
        let attempt = self.records.len() as u32;
        if !decision.is_retryable() {
            return Err(last);
        }
        if matches!(decision, Decision::Internal) {
            if self.internal_retries >= INTERNAL_ERROR_RETRIES {
                return Err(last);
            }
            self.internal_retries += 1;
        }
        if attempt >= self.policy.max_attempts {
            return Err(last);
        }
        // Faults draw on the shared retry budget; conflicts are contention, not
        // amplification, and are bounded by the policy alone.
        let fault = matches!(
            decision,
            Decision::Throttled { .. } | Decision::Unavailable { .. } | Decision::Internal
        );
        if fault && !self.budget.withdraw() {
            return Err(Failure::RetryBudget {
                last: last.to_string(),
            });
        }
        let wait = match decision {
            // The object appeared between our read and our create: read it at once.
            Decision::AlreadyExists => Duration::ZERO,
            _ => self
                .policy
                .backoff
                .delay(attempt, decision.retry_after(), &mut self.rng),
        };
        if let Some(deadline) = self.deadline
            && Instant::now() + wait >= deadline
        {
            return Err(Failure::Deadline {
                attempts: attempt,
                last: last.to_string(),
            });
        }
        self.current().backoff = Some(prost_types::Duration {
            seconds: wait.as_secs() as i64,
            nanos: wait.subsec_nanos() as i32,
        });
        let backoff_ms = wait.as_millis() as u64;
        span.record("safewrite.backoff_ms", backoff_ms as i64);
        debug!(parent: span, attempt, backoff_ms, ?decision, "backing off");
        Ok(wait)
    }
}

/// The outcome of one API request inside the loop.
enum Sent {
    Answer(Answer),
    /// No answer: why, the decision, and whether the request may have reached the API
    /// server (for a write, whether its outcome is unknown).
    Failed(Failure, Decision, bool),
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
            config: Arc::new(config),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Runs the loop for `spec` and its declarative mutation, ending by `deadline` at
    /// the latest.
    pub async fn write(
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
        self.write_with(spec, &mut Declarative(mutation, deadline), deadline)
            .await
    }

    /// Runs the loop with `mutator` supplying each attempt's change (server-side apply,
    /// when `spec.mutation` is one, goes to the API server instead).
    pub async fn write_with<M: Mutator>(
        &self,
        spec: &WriteSpec,
        mutator: &mut M,
        deadline: Option<Instant>,
    ) -> Result<Written, WriteError> {
        // Answer a little before the caller's deadline, so that it gets this loop's
        // DEADLINE_EXCEEDED (with the attempts) rather than its own bare one.
        let deadline = crate::client::answer_by(deadline);
        self.budget.deposit();
        let mut attempts = Attempts {
            budget: self.budget.clone(),
            records: Vec::new(),
            internal_retries: 0,
            rng: fastrand::Rng::new(),
            deadline,
            policy: spec.policy,
        };
        // Discovery is a read like any other: its request failures and refusals are
        // classified as a read's (a throttled or unreachable API server is a fault to back
        // off from; an open breaker or a rate limit past the deadline ends the loop), and
        // each failed one is an attempt.
        let resolved = loop {
            match self.resolve(spec, &attempts).await {
                Ok(resolved) => break resolved,
                Err(Unresolved::Invalid(failure)) => return Err(attempts.fail(failure)),
                Err(Unresolved::Request(decision, failure)) => {
                    let span = attempt_span(attempts.begin());
                    if let Failure::Api { code, reason, .. } = &failure {
                        let record = attempts.current();
                        record.http_status = u32::from(*code);
                        record.reason = reason.clone();
                    }
                    span.record("error.type", failure.kind());
                    span.record("otel.status_code", "ERROR");
                    if let Err(failure) = attempts.back_off(&decision, failure, span).await {
                        return Err(attempts.fail(failure));
                    }
                }
            }
        };
        let resource = &resolved.resource;
        let Some(resource_path) =
            ResourcePath::new(&resource.group, &resource.version, &resource.plural)
        else {
            return Err(attempts.fail(Failure::Invalid(FieldViolation::new(
                "target.kind",
                format!(
                    "discovery answered a resource path that is not a DNS name ({:?}); nothing was sent",
                    resource.plural
                ),
            ))));
        };
        let request = resource_path.object(&spec.target.namespace, &spec.target.name);
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
                Step::Done(written) => {
                    return Ok(Written {
                        attempts: attempts.records,
                        ..written
                    });
                }
                Step::Fail(failure) => return Err(attempts.fail(failure)),
                Step::Retry(decision, failure) => {
                    if let Err(failure) = attempts.back_off(&decision, failure, span).await {
                        return Err(attempts.fail(failure));
                    }
                }
            }
        }
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
        let attempt = attempts.records.len() as u32 + 1;
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

    /// Sends one request through the client stack; a request that got no answer becomes
    /// its failure and decision ([`request_failure`]). A 404 saying the resource path
    /// itself is not served makes discovery forget the kind's group-version, so that the
    /// next request for it resolves it afresh.
    async fn send(&self, request: http::Request<Vec<u8>>, attempts: &Attempts) -> Sent {
        let group_version = discovery::group_version_of(request.uri().path());
        let timeout = Some(self.config.request_timeout);
        match apiserver::send(&self.client, request, timeout, attempts.deadline).await {
            Ok(answer) => {
                if discovery::is_unserved_path(&answer)
                    && let Some(group_version) = group_version
                {
                    self.discovery.forget(&group_version);
                }
                Sent::Answer(answer)
            }
            Err(error) => {
                let maybe_sent = error.maybe_sent();
                let (failure, decision) =
                    request_failure(error, attempts.deadline, attempts.records.len() as u32);
                Sent::Failed(failure, decision, maybe_sent)
            }
        }
    }

    /// One read-mutate-write attempt for JSON Patch, merge patch and CEL.
    async fn attempt<M: Mutator>(
        &self,
        spec: &WriteSpec,
        resolved: &Resolved,
        request: &ObjectPath,
        mutator: &mut M,
        attempts: &mut Attempts,
    ) -> Step {
        let fresh = match self.read(request, attempts).await {
            Err(step) => return step,
            Ok(Read::Found(object)) => object,
            Ok(Read::Missing(answer)) => {
                return match &spec.create_if_missing {
                    Some(template) => {
                        self.create(spec, request, template, mutator, attempts)
                            .await
                    }
                    None => Step::from_answer(&answer, None),
                };
            }
        };
        let read_version = resource_version(&fresh);
        attempts.current().resource_version_read = read_version.clone();
        Span::current().record("safewrite.resource_version.read", read_version.as_str());
        if let Some(key) = &spec.idempotency_key
            && idempotency::applied(&fresh, key)
        {
            debug!(
                attempt = attempts.records.len(),
                "idempotency key already recorded; no write"
            );
            return Step::Done(Written {
                outcome: pb::Outcome::Updated,
                resource_version: read_version,
                object: fresh,
                attempts: Vec::new(),
                already_applied: true,
            });
        }

        if let Err(failure) =
            check_preconditions(&spec.preconditions, &fresh, attempts.deadline).await
        {
            return Step::Fail(failure);
        }
        let number = attempts.records.len() as u32;
        let mutated = match mutator.mutate(number, &fresh, false).await {
            Ok(Change::Object(object)) => object,
            Ok(Change::Abort) => return aborted(fresh, read_version),
            Err(failure) => return Step::Fail(failure),
        };
        let mut body = match spec.subresource {
            Subresource::Main => main_body(&fresh, mutated, resolved.has_status, &read_version),
            Subresource::Status => status_body(&fresh, &mutated),
        };
        if body == fresh {
            debug!(
                attempt = attempts.records.len(),
                "mutation changes nothing; no write"
            );
            return Step::Done(Written {
                outcome: pb::Outcome::Unchanged,
                resource_version: read_version,
                object: fresh,
                attempts: Vec::new(),
                already_applied: false,
            });
        }
        if let Some(key) = &spec.idempotency_key {
            idempotency::record(&mut body, [key.as_str()]);
        }
        let data = serde_json::to_vec(&body).expect("a JSON value serializes");
        let put = request.request(
            Verb::Replace,
            spec.subresource == Subresource::Status,
            &spec.write_params(false),
            data,
        );
        let answer = match self.send(put, attempts).await {
            Sent::Failed(failure, decision, maybe_sent) => {
                return unanswered_write(spec, failure, decision, maybe_sent);
            }
            Sent::Answer(answer) => answer,
        };
        self.record_write(attempts, &answer);
        if answer.code == 200 {
            return written(pb::Outcome::Updated, &answer);
        }
        write_refused(spec, &answer)
    }

    /// The create-if-missing path: apply the mutation to the supplied object, create it.
    async fn create<M: Mutator>(
        &self,
        spec: &WriteSpec,
        request: &ObjectPath,
        template: &Value,
        mutator: &mut M,
        attempts: &mut Attempts,
    ) -> Step {
        if spec.preconditions.uid.is_some() || spec.preconditions.resource_version.is_some() {
            return Step::Fail(Failure::PreconditionFailed {
                reason: "the object does not exist, so its uid/resourceVersion cannot match".into(),
                current: Value::Null,
            });
        }
        if let Some(cel) = &spec.preconditions.cel {
            match cel.holds(template, attempts.deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    return Step::Fail(Failure::PreconditionFailed {
                        reason: "the CEL condition is false on the object to create".into(),
                        current: Value::Null,
                    });
                }
                Err(error) => return Step::Fail(mutation_failure(error, Value::Null)),
            }
        }
        let number = attempts.records.len() as u32;
        let mut object = match mutator.mutate(number, template, true).await {
            Ok(Change::Object(object)) => object,
            Ok(Change::Abort) => return aborted(template.clone(), String::new()),
            Err(failure) => return Step::Fail(failure),
        };
        if let Some(key) = &spec.idempotency_key {
            idempotency::record(&mut object, [key.as_str()]);
        }
        let data = serde_json::to_vec(&object).expect("a JSON value serializes");
        let post = request.request(Verb::Create, false, &spec.write_params(false), data);
        let answer = match self.send(post, attempts).await {
            Sent::Failed(failure, decision, maybe_sent) => {
                return unanswered_write(spec, failure, decision, maybe_sent);
            }
            Sent::Answer(answer) => answer,
        };
        self.record_write(attempts, &answer);
        match answer.code {
            200 | 201 => written(pb::Outcome::Created, &answer),
            _ => write_refused(spec, &answer),
        }
    }

    /// One server-side apply attempt. The object is read first, to check preconditions
    /// and to tell UNCHANGED (the server's no-op keeps the resourceVersion) from UPDATED;
    /// with preconditions the apply carries the version read, so a concurrent change
    /// makes it conflict and the loop re-checks on the fresh object.
    async fn apply_attempt(
        &self,
        spec: &WriteSpec,
        request: &ObjectPath,
        configuration: &Value,
        force: bool,
        attempts: &mut Attempts,
    ) -> Step {
        let fresh = match self.read(request, attempts).await {
            Err(step) => return step,
            Ok(Read::Found(object)) => Some(object),
            Ok(Read::Missing(_)) => None,
        };
        let read_version = fresh.as_ref().map(resource_version).unwrap_or_default();
        attempts.current().resource_version_read = read_version.clone();
        Span::current().record("safewrite.resource_version.read", read_version.as_str());
        let mut configuration = configuration.clone();
        if spec.preconditions.any() {
            let Some(fresh) = &fresh else {
                return Step::Fail(Failure::PreconditionFailed {
                    reason: "the object does not exist".into(),
                    current: Value::Null,
                });
            };
            if let Err(failure) =
                check_preconditions(&spec.preconditions, fresh, attempts.deadline).await
            {
                return Step::Fail(failure);
            }
            configuration["metadata"]["resourceVersion"] = Value::String(read_version.clone());
        }
        let data = serde_json::to_vec(&configuration).expect("a JSON value serializes");
        let sent = request.request(
            Verb::Apply,
            spec.subresource == Subresource::Status,
            &spec.write_params(force),
            data,
        );
        let answer = match self.send(sent, attempts).await {
            Sent::Failed(failure, decision, _) => return Step::from_failure(failure, decision),
            Sent::Answer(answer) => answer,
        };
        self.record_write(attempts, &answer);
        match answer.code {
            201 => written(pb::Outcome::Created, &answer),
            200 => {
                let object = match answer.object() {
                    Ok(object) => object,
                    Err(err) => return Step::Fail(Failure::BadAnswer(err)),
                };
                let outcome = if fresh.is_some() && resource_version(&object) == read_version {
                    pb::Outcome::Unchanged
                } else {
                    pb::Outcome::Updated
                };
                Step::Done(Written {
                    outcome,
                    resource_version: resource_version(&object),
                    object,
                    attempts: Vec::new(),
                    already_applied: false,
                })
            }
            _ => Step::from_answer(&answer, spec.preconditions.resource_version.as_deref()),
        }
    }

    /// Reads the fresh object: found, missing (with the 404 answer), or the step that
    /// ends this attempt (a retryable or final failure).
    async fn read(&self, request: &ObjectPath, attempts: &mut Attempts) -> Result<Read, Step> {
        let get = request.request(Verb::Get, false, &WriteParams::default(), Vec::new());
        match self.send(get, attempts).await {
            Sent::Failed(failure, decision, _) => Err(Step::from_failure(failure, decision)),
            Sent::Answer(answer) if answer.code == 404 => Ok(Read::Missing(answer)),
            Sent::Answer(answer) if answer.code != 200 => {
                // The read itself was refused (429, 5xx, 403...): the record says so.
                self.record_write(attempts, &answer);
                Err(Step::from_answer(&answer, None))
            }
            Sent::Answer(answer) => answer
                .object()
                .map(Read::Found)
                .map_err(|err| Step::Fail(Failure::BadAnswer(err))),
        }
    }

    /// Records an answer's HTTP status and reason in the current attempt.
    fn record_write(&self, attempts: &mut Attempts, answer: &Answer) {
        let record = attempts.current();
        record.http_status = u32::from(answer.code);
        record.reason = answer.reason();
        let span = Span::current();
        span.record("http.response.status_code", i64::from(answer.code));
        if !record.reason.is_empty() {
            span.record("safewrite.k8s.reason", record.reason.as_str());
        }
        if answer.code == 409 {
            crate::metrics::get().conflict();
        }
    }
}

/// The result of reading the target.
enum Read {
    Found(Value),
    Missing(Answer),
}

/// What one attempt decided.
enum Step {
    Done(Written),
    Retry(Decision, Failure),
    Fail(Failure),
}

impl Step {
    fn from_failure(failure: Failure, decision: Decision) -> Step {
        if decision.is_retryable() {
            Step::Retry(decision, failure)
        } else {
            Step::Fail(failure)
        }
    }

    /// A non-success answer: retry it or end with it. With `strict` (the caller's exact
    /// resourceVersion) a conflict is a compare-and-swap failure, never retried.
    fn from_answer(answer: &Answer, strict: Option<&str>) -> Step {
        let decision = answer.decision();
        let status = answer.status();
        if let Some(expected) = strict
            && decision == Decision::Conflict
        {
            return Step::Fail(Failure::ResourceVersionMismatch {
                expected: expected.to_string(),
                actual: format!("newer than {expected}"),
                current: None,
            });
        }
        let failure = Failure::Api {
            decision: decision.clone(),
            code: answer.code,
            reason: answer.reason(),
            message: answer.message(),
            status: status.map(Box::new),
        };
        Step::from_failure(failure, decision)
    }
}

/// The span of one attempt; its fields are recorded as the attempt goes.
fn attempt_span(number: u32) -> Span {
    tracing::info_span!(
        "attempt",
        otel.name = "attempt",
        otel.status_code = Empty,
        safewrite.attempt = i64::from(number),
        safewrite.resource_version.read = Empty,
        safewrite.resource_version.written = Empty,
        http.response.status_code = Empty,
        safewrite.k8s.reason = Empty,
        safewrite.decision = Empty,
        safewrite.outcome = Empty,
        safewrite.backoff_ms = Empty,
        error.type = Empty,
    )
}

/// Records how an attempt ended on its span.
fn record_step(span: &Span, step: &Step) {
    match step {
        Step::Done(written) => {
            span.record(
                "safewrite.outcome",
                outcome_name(written.outcome, written.already_applied),
            );
            if matches!(written.outcome, pb::Outcome::Updated | pb::Outcome::Created)
                && !written.already_applied
            {
                span.record(
                    "safewrite.resource_version.written",
                    written.resource_version.as_str(),
                );
            }
        }
        Step::Retry(decision, failure) => {
            span.record("safewrite.decision", decision.name());
            span.record("error.type", failure.kind());
            span.record("otel.status_code", "ERROR");
        }
        Step::Fail(failure) => {
            span.record("safewrite.decision", "final");
            span.record("error.type", failure.kind());
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// A short lowercase name of an outcome, for spans and metrics.
pub fn outcome_name(outcome: pb::Outcome, already_applied: bool) -> &'static str {
    match outcome {
        _ if already_applied => "already_applied",
        pb::Outcome::Updated => "updated",
        pb::Outcome::Unchanged => "unchanged",
        pb::Outcome::Created => "created",
        pb::Outcome::Aborted => "aborted",
        pb::Outcome::Unspecified => "unspecified",
    }
}

/// A write (PUT or POST) that got no answer. When it may have reached the API server
/// and the request has no idempotency key, whether it was applied is unknown and a retry
/// could apply a read-dependent change twice: the loop stops. With a key (or a dry run,
/// which changes nothing) the next attempt's read tells, and the fault is retried.
fn unanswered_write(
    spec: &WriteSpec,
    failure: Failure,
    decision: Decision,
    maybe_sent: bool,
) -> Step {
    let safe = spec.idempotency_key.is_some() || spec.dry_run;
    match failure {
        Failure::Transport { error } if maybe_sent && !safe => {
            Step::Fail(Failure::OutcomeUnknown {
                last: error.to_string(),
            })
        }
        Failure::Deadline { attempts, last } => Step::Fail(Failure::Deadline {
            attempts,
            last: if maybe_sent && !safe {
                format!("{last} (the last write's outcome is unknown: read the object)")
            } else {
                last
            },
        }),
        failure => Step::from_failure(failure, decision),
    }
}

/// A write the API server answered with an error. A timeout answer (504, reason
/// Timeout) to a write may come after the change was stored, so without an idempotency
/// key it is not retried either.
fn write_refused(spec: &WriteSpec, answer: &Answer) -> Step {
    let ambiguous = answer.code == 504 || answer.reason() == "Timeout";
    if ambiguous && spec.idempotency_key.is_none() && !spec.dry_run {
        return Step::Fail(Failure::OutcomeUnknown {
            last: format!("HTTP {}: {}", answer.code, answer.message()),
        });
    }
    Step::from_answer(answer, spec.preconditions.resource_version.as_deref())
}

/// How long a cached discovery answer is trusted before an answer that contradicts it
/// (a status write to a kind listed without status) makes the engine read it again.
const STALE_AFTER: Duration = Duration::from_secs(1);

/// Why a kind could not be resolved.
enum Unresolved {
    /// The request does not fit what the API server serves (unknown kind, bad
    /// apiVersion, wrong scope, no status subresource): final, and no attempt.
    Invalid(Failure),
    /// Discovery's own request failed: an attempt, retried or not as a read's would be.
    Request(Decision, Failure),
}

/// A discovery failure as the loop treats it: a refused or unanswered discovery request
/// is what the same answer to a read would be.
fn unresolved(error: DiscoveryError, deadline: Option<Instant>, attempt: u32) -> Unresolved {
    match error {
        DiscoveryError::Refused { answer, .. } => {
            let decision = answer.decision();
            let failure = Failure::Api {
                decision: decision.clone(),
                code: answer.code,
                reason: answer.reason(),
                message: format!("discovery failed: {}", answer.message()),
                status: answer.status().map(Box::new),
            };
            Unresolved::Request(decision, failure)
        }
        DiscoveryError::Request { source, .. } => {
            let (failure, decision) = request_failure(source, deadline, attempt);
            Unresolved::Request(decision, failure)
        }
        error @ (DiscoveryError::BadApiVersion(_) | DiscoveryError::UnknownKind { .. }) => {
            Unresolved::Invalid(Failure::UnknownKind(error))
        }
    }
}

/// The failure and decision of a request that got no answer: the breaker and the rate
/// limit end the loop at once (nothing was sent); time running out at the deadline is a
/// deadline failure; anything else is classified by [`classify::classify_error`].
fn request_failure(
    error: RequestError,
    deadline: Option<Instant>,
    attempts: u32,
) -> (Failure, Decision) {
    match error {
        RequestError::CircuitOpen(open) => (
            Failure::CircuitOpen {
                retry_after: open.retry_after,
            },
            Decision::Unexpected,
        ),
        RequestError::RateLimited(limited) => (
            Failure::RateLimited { wait: limited.wait },
            Decision::Unexpected,
        ),
        error if deadline.is_some_and(|d| Instant::now() >= d) => (
            Failure::Deadline {
                attempts,
                last: error.to_string(),
            },
            Decision::Unexpected,
        ),
        error => {
            let decision = classify::classify_error(&error);
            (Failure::Transport { error }, decision)
        }
    }
}

/// The caller's code aborted: nothing written.
fn aborted(object: Value, resource_version: String) -> Step {
    Step::Done(Written {
        outcome: pb::Outcome::Aborted,
        object,
        resource_version,
        attempts: Vec::new(),
        already_applied: false,
    })
}

fn written(outcome: pb::Outcome, answer: &Answer) -> Step {
    match answer.object() {
        Ok(object) => Step::Done(Written {
            outcome,
            resource_version: resource_version(&object),
            object,
            attempts: Vec::new(),
            already_applied: false,
        }),
        Err(err) => Step::Fail(Failure::BadAnswer(err)),
    }
}

/// The object's metadata.resourceVersion, or empty.
pub fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Checks uid, exact resourceVersion and the CEL condition on the fresh object (the
/// condition evaluated no later than `deadline`).
async fn check_preconditions(
    pre: &Preconditions,
    fresh: &Value,
    deadline: Option<Instant>,
) -> Result<(), Failure> {
    if let Some(uid) = &pre.uid {
        let actual = fresh["metadata"]["uid"].as_str().unwrap_or_default();
        if actual != uid {
            return Err(Failure::PreconditionFailed {
                reason: format!("metadata.uid is {actual:?}, not {uid:?}"),
                current: fresh.clone(),
            });
        }
    }
    if let Some(expected) = &pre.resource_version {
        let actual = resource_version(fresh);
        if &actual != expected {
            return Err(Failure::ResourceVersionMismatch {
                expected: expected.clone(),
                actual,
                current: Some(fresh.clone()),
            });
        }
    }
    if let Some(cel) = &pre.cel {
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

pub fn mutation_failure(error: ApplyError, current: Value) -> Failure {
    match error {
        ApplyError::TestFailed { .. } => Failure::PreconditionFailed {
            reason: error.to_string(),
            current,
        },
        error => Failure::Mutation { error, current },
    }
}

/// The PUT body for the main resource: the mutated object at the version read, with the
/// fresh status (the main resource never writes status when a subresource owns it).
fn main_body(fresh: &Value, mut mutated: Value, has_status: bool, version: &str) -> Value {
    if let Some(metadata) = mutated.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("resourceVersion".into(), Value::String(version.into()));
    }
    if has_status && let Some(object) = mutated.as_object_mut() {
        match fresh.get("status") {
            Some(status) => object.insert("status".into(), status.clone()),
            None => object.remove("status"),
        };
    }
    mutated
}

/// The PUT body for the status subresource: the fresh object with the mutated status.
fn status_body(fresh: &Value, mutated: &Value) -> Value {
    let mut body = fresh.clone();
    if let Some(object) = body.as_object_mut() {
        match mutated.get("status") {
            Some(status) => object.insert("status".into(), status.clone()),
            None => object.remove("status"),
        };
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn main_body_keeps_the_fresh_status_and_version() {
        let fresh =
            json!({"metadata": {"resourceVersion": "5"}, "spec": {"a": 1}, "status": {"s": 1}});
        let mutated =
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"a": 2}, "status": {"s": 9}});
        let body = main_body(&fresh, mutated, true, "5");
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "5"}, "spec": {"a": 2}, "status": {"s": 1}})
        );
        // A change to status alone is no change to the main resource.
        let only_status =
            json!({"metadata": {"resourceVersion": "5"}, "spec": {"a": 1}, "status": {"s": 2}});
        assert_eq!(main_body(&fresh, only_status, true, "5"), fresh);
    }

    #[test]
    fn status_body_changes_only_status() {
        let fresh = json!({"spec": {"a": 1}, "status": {"s": 1}});
        let mutated = json!({"spec": {"a": 2}, "status": {"s": 2}});
        assert_eq!(
            status_body(&fresh, &mutated),
            json!({"spec": {"a": 1}, "status": {"s": 2}})
        );
    }
}
