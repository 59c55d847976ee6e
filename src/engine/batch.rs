//! Group commit. Writes to one object (same path, subresource, field manager and dry
//! run) that arrive while a write to it is in flight wait in that object's queue; when
//! the write in flight ends, the queue becomes the next batch: one read, each member's
//! idempotency key, preconditions and mutation applied in arrival order to the running
//! result ([`fold`]), one write. Every member gets its own answer, the one it would have
//! got had the members been written one after another in that order:
//!
//! - a member whose change is already made by those before it is UNCHANGED;
//! - a false precondition or a mutation that does not apply fails that member alone,
//!   and it is left out of the write;
//! - a conflict re-reads and re-applies the whole batch;
//! - a write the API server refuses for what it contains (422, a webhook's denial) is
//!   retried one member at a time, so that only the offender fails;
//! - when the object does not exist, the members before the first create-if-missing
//!   fail NotFound, and that one goes alone (a create cannot be shared).
//!
//! There is no timer: a lone write starts at once, and company only forms while a write
//! is in flight. A batch holds at most [`MAX_MEMBERS`]. Each object with a queue has one
//! driver task, so a caller that goes away (its RPC dropped) cannot stop the others'
//! writes; a member whose caller went away or whose deadline passed leaves before the
//! next attempt, and nothing is written on its behalf after that point.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::TraceContextExt as _;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::retry::budget::Budget as _;
use tracing::{Instrument as _, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::Engine;
use super::attempt::{
    AfterWrite, Read, Sent, attempt_span, check_preconditions, note_answer, record_failure,
    stale_copy,
};
use super::attempts::Attempts;
use super::body::{main_body, resource_version, status_body};
use super::decide::{Step, is_ambiguous};
use super::error::{Failure, WriteError, mutation_failure};
use super::memory::Source;
use super::result::{Done, Outcome, Written};
use super::spec::{Declarative, Subresource, WriteSpec};
use crate::classify::Decision;
use crate::client::discovery::Resolved;
use crate::idempotency;
use crate::target::{ObjectPath, Verb};

/// The most requests one write carries. The idempotency window
/// ([`idempotency::REMEMBERED`]) holds 16 batches of this size.
pub const MAX_MEMBERS: usize = 64;

const _: () = assert!(idempotency::REMEMBERED >= 16 * MAX_MEMBERS);

/// Which writes may share a batch: the same request path and the same query.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    path: String,
    subresource: Subresource,
    field_manager: String,
    dry_run: bool,
}

/// One request waiting in, or carried by, a batch.
struct Member {
    spec: WriteSpec,
    resolved: Arc<Resolved>,
    request: ObjectPath,
    attempts: Attempts,
    /// The member's RPC span: the batch's attempt spans are children of the first
    /// member's and link the others'.
    span: Span,
    answer: oneshot::Sender<Result<Written, WriteError>>,
    /// Must be written on its own (a create, or isolating an offender).
    alone: bool,
}

impl Member {
    fn gone(&self) -> bool {
        self.answer.is_closed()
    }

    fn finish(self, result: Result<Done, Failure>) {
        let result = match result {
            Ok(done) => Ok(self.attempts.finish(done)),
            Err(failure) => Err(self.attempts.fail(failure)),
        };
        // A caller that went away no longer listens; nothing to do then.
        let _ = self.answer.send(result);
    }
}

/// The queues of the objects being written.
#[derive(Default)]
pub(super) struct Batcher {
    queues: Mutex<HashMap<Key, VecDeque<Member>>>,
}

impl Batcher {
    /// Queues the write and waits for its answer. The first write to an object starts
    /// the object's driver, which takes its first batch at once.
    pub(super) async fn join(
        &self,
        engine: &Engine,
        spec: &WriteSpec,
        resolved: Arc<Resolved>,
        request: ObjectPath,
        attempts: Attempts,
    ) -> Result<Written, WriteError> {
        let deadline = attempts.deadline;
        let key = Key {
            path: request.as_str().to_string(),
            subresource: spec.subresource,
            field_manager: spec.field_manager.to_string(),
            dry_run: spec.dry_run,
        };
        let (answer, answered) = oneshot::channel();
        let member = Member {
            spec: spec.clone(),
            resolved,
            request,
            attempts,
            span: Span::current(),
            answer,
            alone: false,
        };
        let start = {
            let mut queues = self.queues.lock().expect("batch queues");
            match queues.get_mut(&key) {
                Some(queue) => {
                    queue.push_back(member);
                    false
                }
                None => {
                    queues.insert(key.clone(), VecDeque::from([member]));
                    true
                }
            }
        };
        if start {
            // Nobody else is writing the object: this write goes at once, on the RPC's
            // own task (no hand-off to a driver). Writes that arrive meanwhile queue, and
            // a driver task takes them over when it ends, or when this RPC is dropped.
            let handoff = Handoff { engine, key: &key };
            let own = self.next_own(&key);
            group(engine, self, &key, own, false).await;
            drop(handoff);
        }
        let answered = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, answered).await,
            None => Ok(answered.await),
        };
        match answered {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(WriteError {
                failure: Failure::Cancelled(
                    "the group commit carrying this write ended without an answer; read the object to find out whether it was applied".into(),
                ),
                attempts: Vec::new(),
            }),
            Err(_) => Err(WriteError {
                failure: Failure::Deadline {
                    attempts: 0,
                    last: "the write carrying this request was still in flight with others (group commit); its outcome is unknown: read the object".into(),
                },
                attempts: Vec::new(),
            }),
        }
    }

    /// The next batch of `key`'s queue: one member that must go alone, or the members
    /// up to the next such one, at most [`MAX_MEMBERS`]. `None` (and the queue removed)
    /// when it is empty.
    fn next(&self, key: &Key) -> Option<Vec<Member>> {
        let mut queues = self.queues.lock().expect("batch queues");
        let queue = queues.get_mut(key)?;
        let Some(first) = queue.pop_front() else {
            queues.remove(key);
            return None;
        };
        let mut batch = vec![first];
        if !batch[0].alone {
            self.top_up_locked(queue, &mut batch);
        }
        Some(batch)
    }

    /// The write that created `key`'s queue, alone: the first member.
    fn next_own(&self, key: &Key) -> Vec<Member> {
        let mut queues = self.queues.lock().expect("batch queues");
        let queue = queues.get_mut(key).expect("the queue this write created");
        vec![queue.pop_front().expect("the write that created the queue")]
    }

    /// After the write that created `key`'s queue: a driver takes over the writes queued
    /// meanwhile, or the queue goes when there are none.
    fn hand_off(&self, engine: &Engine, key: &Key) {
        let mut queues = self.queues.lock().expect("batch queues");
        match queues.get(key) {
            Some(queue) if !queue.is_empty() => {
                tokio::spawn(drive(engine.clone(), key.clone()));
            }
            _ => {
                queues.remove(key);
            }
        }
    }

    /// Adds the members that arrived since `batch` was taken (up to the cap).
    fn top_up(&self, key: &Key, batch: &mut Vec<Member>) {
        let mut queues = self.queues.lock().expect("batch queues");
        if let Some(queue) = queues.get_mut(key) {
            self.top_up_locked(queue, batch);
        }
    }

    fn top_up_locked(&self, queue: &mut VecDeque<Member>, batch: &mut Vec<Member>) {
        while batch.len() < MAX_MEMBERS && queue.front().is_some_and(|m| !m.alone) {
            batch.extend(queue.pop_front());
        }
    }

    /// Puts members back at the front of `key`'s queue, in order.
    fn requeue(&self, key: &Key, members: Vec<Member>) {
        let mut queues = self.queues.lock().expect("batch queues");
        let queue = queues.entry(key.clone()).or_default();
        for member in members.into_iter().rev() {
            queue.push_front(member);
        }
    }

    /// Drops `key`'s queue: its members' callers get an answer saying so.
    fn abandon(&self, key: &Key) {
        self.queues.lock().expect("batch queues").remove(key);
    }
}

/// Removes the object's queue if its driver ends by a panic, so that later writes to
/// the object start a new driver instead of waiting for a dead one.
struct DriverGuard<'a> {
    batcher: &'a Batcher,
    key: &'a Key,
    done: bool,
}

impl Drop for DriverGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.batcher.abandon(self.key);
        }
    }
}

/// Hands `key`'s queue to a driver when the write on the RPC's task ends, however it
/// ends (answered, or its RPC dropped mid-write).
struct Handoff<'a> {
    engine: &'a Engine,
    key: &'a Key,
}

impl Drop for Handoff<'_> {
    fn drop(&mut self) {
        self.engine.batcher.hand_off(self.engine, self.key);
    }
}

/// The driver of one object's queue: takes batches until the queue is empty.
async fn drive(engine: Engine, key: Key) {
    let batcher = engine.batcher.clone();
    let mut guard = DriverGuard {
        batcher: &batcher,
        key: &key,
        done: false,
    };
    while let Some(mut batch) = batcher.next(&key) {
        if batch[0].alone {
            alone(&engine, batch.pop().expect("one member")).await;
        } else {
            group(&engine, &batcher, &key, batch, true).await;
        }
    }
    guard.done = true;
}

/// Writes one member on its own, going on from the attempts it made in batches.
async fn alone(engine: &Engine, member: Member) {
    if member.gone() {
        return;
    }
    let Member {
        spec,
        attempts,
        span,
        answer,
        ..
    } = member;
    let Some(mutation) = &spec.mutation else {
        return;
    };
    let mut mutator = Declarative(mutation, attempts.deadline);
    let result = engine
        .write_with_attempts(&spec, &mut mutator, attempts, false)
        .instrument(span)
        .await;
    let _ = answer.send(result);
}

/// What the running result of a batch made of one member.
#[derive(Debug)]
pub(super) enum Verdict {
    /// Its change is in the body to write. The patch undoes it: applied to the running
    /// result right after this member's turn, it gives the result right before, so each
    /// member's own state can be produced from the written object when it is answered
    /// ([`answer_each`]) instead of being kept.
    Changed(json_patch::Patch),
    /// Its change was already made (by the members before it, or before the read).
    Unchanged,
    /// Its idempotency key is on the object: made by an earlier write.
    AlreadyApplied,
    /// It fails alone and is left out of the write. Its current object is filled in
    /// when it is answered ([`answer_each`]).
    Failed(Failure),
}

/// Applies each member's idempotency check, preconditions and mutation, in order, to
/// the running result that starts as `fresh`: each member sees the effect of those
/// before it, exactly as if each had been written in turn. The body to write (with the
/// keys of the members that changed it) and each member's verdict. A failure's current
/// object is left empty here: [`answer_each`] gives it the state at the member's turn.
pub(super) async fn fold(
    fresh: &Value,
    has_status: bool,
    members: &[(&WriteSpec, Option<Instant>)],
) -> (Value, Vec<Verdict>) {
    let version = resource_version(fresh);
    let mut running = fresh.clone();
    let mut verdicts = Vec::new();
    for (index, &(spec, deadline)) in members.iter().enumerate() {
        // The first member's change is never undone: no member before it needs a state.
        let undo = index > 0;
        let mut verdict =
            apply_member(spec, deadline, &mut running, has_status, &version, undo).await;
        if let Verdict::Failed(failure) = &mut verdict
            && let Some(current) = failure.current_mut()
        {
            *current = Value::Null;
        }
        verdicts.push(verdict);
    }
    (running, verdicts)
}

async fn apply_member(
    spec: &WriteSpec,
    deadline: Option<Instant>,
    running: &mut Value,
    has_status: bool,
    version: &str,
    undo: bool,
) -> Verdict {
    if let Some(key) = &spec.idempotency_key
        && idempotency::applied(running, key)
    {
        return Verdict::AlreadyApplied;
    }
    if let Err(failure) = check_preconditions(&spec.preconditions, running, deadline).await {
        return Verdict::Failed(failure);
    }
    let Some(mutation) = &spec.mutation else {
        return Verdict::Failed(Failure::Cancelled("no mutation".into()));
    };
    let mutated = match mutation.apply(running, deadline).await {
        Ok(mutated) => mutated,
        Err(error) => return Verdict::Failed(mutation_failure(error, running.clone())),
    };
    let mut body = match spec.subresource {
        Subresource::Main => main_body(running, mutated, has_status, version),
        Subresource::Status => status_body(running, &mutated),
    };
    if body == *running {
        return Verdict::Unchanged;
    }
    if let Some(key) = &spec.idempotency_key {
        idempotency::record(&mut body, [key.as_str()]);
    }
    let undo = if undo {
        json_patch::diff(&body, running)
    } else {
        json_patch::Patch::default()
    };
    *running = body;
    Verdict::Changed(undo)
}

/// The latest of the members' deadlines (none if one has none): the batch's requests
/// may take that long; each member's own wait ends at its own deadline.
fn latest_deadline(members: &[Member]) -> Option<Instant> {
    let mut latest = None;
    for member in members {
        match (latest, member.attempts.deadline) {
            (_, None) => return None,
            (None, Some(d)) => latest = Some(d),
            (Some(l), Some(d)) => latest = Some(d.max(l)),
        }
    }
    latest
}

/// Runs one batch until every member has its answer, has gone back to the queue, or
/// has left; with `top_up`, members queued since join it before each attempt.
async fn group(
    engine: &Engine,
    batcher: &Batcher,
    key: &Key,
    mut members: Vec<Member>,
    top_up: bool,
) {
    loop {
        // Those whose caller went away or whose deadline passed leave now: nothing is
        // written on their behalf after this point.
        let now = Instant::now();
        let mut staying = Vec::with_capacity(members.len());
        for member in members {
            if member.gone() {
                continue;
            }
            if member.attempts.deadline.is_some_and(|d| now >= d) {
                let attempts = member.attempts.made();
                member.finish(Err(Failure::Deadline {
                    attempts,
                    last: "the deadline passed while the write waited to be retried with others (group commit)".into(),
                }));
                continue;
            }
            staying.push(member);
        }
        members = staying;
        if members.is_empty() {
            return;
        }
        if top_up {
            batcher.top_up(key, &mut members);
        }
        let size = members.len();
        for member in &mut members {
            member.attempts.begin();
        }
        let span = members[0]
            .span
            .in_scope(|| attempt_span(members[0].attempts.made()));
        span.record("safewrite.batch_size", size as i64);
        for member in &members[1..] {
            span.add_link(member.span.context().span().span_context().clone());
        }
        let outcome = attempt(engine, members).instrument(span.clone()).await;
        match outcome {
            Attempted::Answered => return,
            Attempted::Requeue(back) => {
                drop(span);
                batcher.requeue(key, back);
                return;
            }
            Attempted::Retry(decision, failure, carried) => {
                record_failure(&span, decision.name(), &failure);
                let mut asked = None;
                let mut withdraw = || *asked.get_or_insert_with(|| engine.budget.withdraw());
                let mut wait: Option<Duration> = None;
                let mut retrying = Vec::with_capacity(carried.len());
                for mut member in carried {
                    match member
                        .attempts
                        .plan(&decision, failure.clone(), &span, &mut withdraw)
                    {
                        Ok(planned) => {
                            wait = Some(wait.map_or(planned, |w| w.min(planned)));
                            retrying.push(member);
                        }
                        Err(last) => member.finish(Err(last)),
                    }
                }
                drop(span);
                let wait = wait.unwrap_or_default();
                for member in &mut retrying {
                    member.attempts.current().backoff = Some(wait);
                }
                tokio::time::sleep(wait).await;
                members = retrying;
            }
        }
    }
}

/// How one attempt of a batch ended.
enum Attempted {
    /// Every member has its answer.
    Answered,
    /// These members go back to the front of the queue (a create, isolation).
    Requeue(Vec<Member>),
    /// These members retry after the decision's backoff; the rest have their answers.
    Retry(Decision, Failure, Vec<Member>),
}

/// One attempt of a batch: one read (or the remembered copy), the fold, one write.
async fn attempt(engine: &Engine, mut members_now: Vec<Member>) -> Attempted {
    let deadline = latest_deadline(&members_now);
    let made = members_now[0].attempts.made();
    let request = members_now[0].request.clone();
    let mut read_live = false;
    for member in &mut members_now {
        read_live |= std::mem::take(&mut member.attempts.read_live);
    }
    let (read, source) = engine.start_from(&request, deadline, made, read_live).await;
    let fresh = match read {
        Read::Found(object) => object,
        Read::Ended(answer, step) => {
            let mut members = members_now;
            if let Some(answer) = &answer {
                for member in &mut members {
                    note_answer(member.attempts.current(), answer);
                }
            }
            return end_all(members, step);
        }
        Read::Missing(answer) => return missing(engine, members_now, &answer).await,
    };
    let version = resource_version(&fresh);
    Span::current().record("safewrite.resource_version.read", version.as_str());
    let mut members = members_now;
    for member in &mut members {
        member.attempts.current().resource_version_read = version.clone();
    }
    let has_status = members[0].resolved.has_status;
    let specs: Vec<_> = members
        .iter()
        .map(|m| (&m.spec, m.attempts.deadline))
        .collect();
    let (body, verdicts) = fold(&fresh, has_status, &specs).await;
    let changed = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Changed(_)))
        .count();
    if changed == 0 {
        // Nothing to write: every answer is decided by the read, once a live read
        // confirms a remembered copy.
        if source == Source::Remembered {
            match engine.read(&request, deadline, made).await {
                Read::Found(live) if resource_version(&live) == version => {}
                Read::Found(_) | Read::Missing(_) => {
                    engine.memory.stale(request.as_str());
                    return stale(members);
                }
                Read::Ended(answer, step) => {
                    if let Some(answer) = &answer {
                        for member in &mut members {
                            note_answer(member.attempts.current(), answer);
                        }
                    }
                    return end_all(members, step);
                }
            }
        }
        answer_each(members, verdicts, &fresh, None);
        return Attempted::Answered;
    }
    let size = members.len() as u32;
    for member in &mut members {
        member.attempts.current().batch_size = size;
    }
    crate::metrics::get().batch(members.len());
    let first = &members[0].spec;
    let data = serde_json::to_vec(&body).expect("a JSON value serializes");
    let put = request.request(
        Verb::Replace,
        first.subresource == Subresource::Status,
        &first.write_params(false),
        data,
    );
    let sent = engine.send(put, deadline, made).await;
    if let Sent::Answer(answer) = &sent {
        for member in &mut members {
            note_answer(member.attempts.current(), answer);
        }
    }
    let after = engine.after_write(&members[0].spec, &request, source, &sent);
    if let AfterWrite::Stale = after {
        return stale(members);
    }
    match sent {
        Sent::Answer(answer) if answer.code == 200 => {
            let AfterWrite::Written(written) = after else {
                unreachable!("a 200 answer is a written object")
            };
            let written = match written {
                Ok(object) => object,
                Err(error) => {
                    let failure = Failure::BadAnswer(error);
                    for member in members {
                        member.finish(Err(failure.clone()));
                    }
                    return Attempted::Answered;
                }
            };
            Span::current().record(
                "safewrite.resource_version.written",
                resource_version(&written).as_str(),
            );
            answer_each(members, verdicts, &fresh, Some((body, written)));
            Attempted::Answered
        }
        Sent::Answer(answer) => refused(members, &verdicts, changed, &answer),
        Sent::Failed(failure, decision, maybe_sent) => {
            unanswered(members, &verdicts, failure, decision, maybe_sent)
        }
    }
}

/// Answers each member of a batch whose attempt ended with a read (`write` is `None`:
/// nothing changed) or a successful write (`write` holds the body sent and the object
/// the API server answered with). Each member's answer is what it would have got
/// written alone in batch order ([`serial_states`]).
fn answer_each(
    members: Vec<Member>,
    verdicts: Vec<Verdict>,
    fresh: &Value,
    write: Option<(Value, Value)>,
) {
    let mut states = serial_states(fresh, &verdicts, write);
    for (member, verdict) in members.into_iter().zip(verdicts).rev() {
        let state = states.next_back(&verdict);
        let result = match verdict {
            Verdict::Changed(_) => Ok(Done::new(Outcome::Updated, state)),
            Verdict::Unchanged => Ok(Done::new(Outcome::Unchanged, state)),
            Verdict::AlreadyApplied => Ok(Done::already_applied(state)),
            Verdict::Failed(mut failure) => {
                if let Some(current) = failure.current_mut() {
                    *current = state;
                }
                Err(failure)
            }
        };
        member.finish(result);
    }
}

/// Each member's own state, produced from the last member back: the object as it stood
/// right after that member's turn in the fold. Members before the first change see the
/// object as read. From the first change on, a state is the object the API server wrote
/// with the changes of the members after it undone, so it carries the write's
/// resourceVersion and the server's own fields; should an undo not apply to the
/// server's object (the server normalised a field a member set), the body sent stands
/// in for it, with the written resourceVersion. One state is held at a time.
struct SerialStates<'a> {
    fresh: &'a Value,
    first_change: usize,
    /// The members from this index on have had their states.
    next: usize,
    /// The running result of the fold as sent, undone back to the member before `next`.
    sent: Value,
    /// The same from the object the API server answered with, while undoing applies.
    written: Option<Value>,
    /// The resourceVersion of the write.
    version: String,
}

fn serial_states<'a>(
    fresh: &'a Value,
    verdicts: &[Verdict],
    write: Option<(Value, Value)>,
) -> SerialStates<'a> {
    let (first_change, sent, written) = match write {
        Some((sent, written)) => {
            let first = verdicts
                .iter()
                .position(|v| matches!(v, Verdict::Changed(_)))
                .unwrap_or(verdicts.len());
            (first, sent, Some(written))
        }
        None => (verdicts.len(), Value::Null, None),
    };
    SerialStates {
        fresh,
        first_change,
        next: verdicts.len(),
        version: written.as_ref().map(resource_version).unwrap_or_default(),
        sent,
        written,
    }
}

impl SerialStates<'_> {
    /// The state of the member before the one last given, whose verdict is `verdict`.
    fn next_back(&mut self, verdict: &Verdict) -> Value {
        self.next = self.next.checked_sub(1).expect("one state per member");
        let at = self.next;
        if at < self.first_change {
            return self.fresh.clone();
        }
        let state = match &self.written {
            Some(written) => written.clone(),
            None => {
                let mut state = self.sent.clone();
                state["metadata"]["resourceVersion"] = Value::String(self.version.clone());
                state
            }
        };
        // Step back over this member's own change, for the member before it.
        if let Verdict::Changed(undo) = verdict {
            json_patch::patch(&mut self.sent, undo)
                .expect("an undo applies to the body it was taken from");
            if let Some(written) = &mut self.written
                && json_patch::patch(written, undo).is_err()
            {
                self.written = None;
            }
        }
        state
    }
}

/// The batch was decided on a remembered copy that turned out stale: every member goes
/// again at once, from a live read.
fn stale(mut members: Vec<Member>) -> Attempted {
    for member in &mut members {
        member.attempts.read_live = true;
    }
    Attempted::Retry(Decision::Stale, stale_copy(), members)
}

/// A read that ended the attempt: every member retries or fails with it.
fn end_all(members: Vec<Member>, step: Step) -> Attempted {
    match step {
        Step::Retry(decision, failure) => Attempted::Retry(decision, failure, members),
        Step::Fail(failure) => {
            for member in members {
                member.finish(Err(failure.clone()));
            }
            Attempted::Answered
        }
        Step::Done(_) => unreachable!("a read does not finish a write"),
    }
}

/// The object does not exist: the members before the first that may create it fail
/// with the 404, as they would have one at a time; that one creates the object on its
/// own (a create is not shared), and the rest go back to the queue to be written to
/// the object it created.
async fn missing(
    engine: &Engine,
    members: Vec<Member>,
    answer: &crate::client::apiserver::Answer,
) -> Attempted {
    let mut members = members.into_iter();
    let mut creator = None;
    for mut member in members.by_ref() {
        if member.spec.create_if_missing.is_some() {
            creator = Some(member);
            break;
        }
        note_answer(member.attempts.current(), answer);
        match Step::from_answer(answer, None) {
            Step::Fail(failure) | Step::Retry(_, failure) => member.finish(Err(failure)),
            Step::Done(_) => unreachable!("a 404 does not finish a write"),
        }
    }
    let Some(mut creator) = creator else {
        return Attempted::Answered;
    };
    let rest: Vec<Member> = members.collect();
    let (spec, request) = (&creator.spec, &creator.request);
    let (Some(template), Some(mutation)) = (&spec.create_if_missing, &spec.mutation) else {
        unreachable!("a creator has a template and a mutation")
    };
    let mut mutator = Declarative(mutation, creator.attempts.deadline);
    creator.attempts.current().batch_size = 1;
    let step = engine
        .create(spec, request, template, &mut mutator, &mut creator.attempts)
        .await;
    match step {
        Step::Done(done) => creator.finish(Ok(done)),
        Step::Fail(failure) => creator.finish(Err(failure)),
        // Someone else created it first (AlreadyExists) or a fault: the creator goes
        // back with the others, to be retried as a member (the object may exist now).
        Step::Retry(decision, failure) => {
            let mut back = vec![creator];
            back.extend(rest);
            return Attempted::Retry(decision, failure, back);
        }
    }
    if rest.is_empty() {
        Attempted::Answered
    } else {
        Attempted::Requeue(rest)
    }
}

/// The API server refused the batch's write. Retryable answers (a conflict above all)
/// retry the whole batch. Otherwise the refusal may be one member's doing: with one
/// member changing the object, it fails and the others go back to be written without
/// it; with several, each is written alone so that only the offender fails.
fn refused(
    members: Vec<Member>,
    verdicts: &[Verdict],
    changed: usize,
    answer: &crate::client::apiserver::Answer,
) -> Attempted {
    if is_ambiguous(answer) {
        // A timeout answer may come after the write was stored: each member whose change
        // it carried is what the same answer would make of it alone.
        return settle(members, verdicts, |member, changed| {
            if changed {
                Step::write_refused(&member.spec, answer)
            } else {
                Step::from_answer(answer, None)
            }
        });
    }
    match Step::from_answer(answer, None) {
        Step::Retry(decision, failure) => Attempted::Retry(decision, failure, members),
        Step::Done(_) => unreachable!("a refusal does not finish a write"),
        Step::Fail(failure) if changed == 1 => {
            let mut back = Vec::new();
            for (member, verdict) in members.into_iter().zip(verdicts) {
                if matches!(verdict, Verdict::Changed(_)) {
                    member.finish(Err(failure.clone()));
                } else {
                    back.push(member);
                }
            }
            Attempted::Requeue(back)
        }
        Step::Fail(_) => Attempted::Requeue(
            members
                .into_iter()
                .map(|mut m| {
                    m.alone = true;
                    m
                })
                .collect(),
        ),
    }
}

/// The batch's write got no answer. If it may have reached the API server, each member
/// whose change it carried is what [`Step::unanswered_write`] makes of it alone (an
/// unknown outcome without an idempotency key); the rest retry when the failure is
/// retryable (the next read tells what was applied).
fn unanswered(
    members: Vec<Member>,
    verdicts: &[Verdict],
    failure: Failure,
    decision: Decision,
    maybe_sent: bool,
) -> Attempted {
    settle(members, verdicts, |member, changed| {
        Step::unanswered_write(
            &member.spec,
            failure.clone(),
            decision.clone(),
            maybe_sent && changed,
        )
    })
}

/// Each member's own step after a write that may or may not have been applied
/// (`changed`: the write carried its change): those whose step ends are answered, the
/// rest retry together.
fn settle(
    members: Vec<Member>,
    verdicts: &[Verdict],
    step_of: impl Fn(&Member, bool) -> Step,
) -> Attempted {
    let (mut retry, mut going_on) = (None, Vec::new());
    for (member, verdict) in members.into_iter().zip(verdicts) {
        match step_of(&member, matches!(verdict, Verdict::Changed(_))) {
            Step::Retry(decision, failure) => {
                retry.get_or_insert((decision, failure));
                going_on.push(member);
            }
            Step::Fail(failure) => member.finish(Err(failure)),
            Step::Done(_) => unreachable!("a failure does not finish a write"),
        }
    }
    match retry {
        Some((decision, failure)) => Attempted::Retry(decision, failure, going_on),
        None => Attempted::Answered,
    }
}

#[cfg(test)]
mod tests {
    //! Group commit's semantics: a batch's fold equals writing its members one at a
    //! time, in order, for random members (merge patches, JSON Patches with `test`,
    //! patches that do not apply, CEL increments, CEL preconditions, idempotency keys).
    use serde_json::json;

    use super::*;
    use crate::backoff::Backoff;
    use crate::mutation::{Cel, Mutation};
    use crate::target::{ApiVersion, FieldManager, Kind, Name, Namespace, Target};

    fn spec(mutation: Mutation, cel: Option<Cel>, key: Option<&str>) -> WriteSpec {
        WriteSpec {
            target: Target {
                api_version: ApiVersion::parse("v", "v1").unwrap(),
                kind: Kind::parse("k", "ConfigMap").unwrap(),
                namespace: Namespace::parse("n", "default").unwrap(),
                name: Name::parse("n", "o").unwrap(),
            },
            subresource: Subresource::Main,
            mutation: Some(mutation),
            preconditions: super::super::Preconditions {
                cel,
                ..Default::default()
            },
            policy: super::super::Policy {
                max_attempts: 5,
                backoff: Backoff {
                    initial: Duration::from_millis(10),
                    max: Duration::from_secs(1),
                },
            },
            field_manager: FieldManager::parse("f", "safewrite").unwrap(),
            dry_run: false,
            create_if_missing: None,
            idempotency_key: key.map(str::to_string),
            write_alone: false,
        }
    }

    fn random_member(rng: &mut fastrand::Rng, increment: &Cel, guard: &Cel) -> WriteSpec {
        let pick = rng.u64(..);
        let mut values = fastrand::Rng::with_seed(pick);
        let mut value = || json!(["0", "1", "2"][values.usize(..3)]);
        let mutation = match rng.usize(..5) {
            0 => Mutation::MergePatch(json!({"data": {"a": value()}})),
            1 => {
                let b = if rng.bool() { Value::Null } else { value() };
                Mutation::MergePatch(json!({"data": {"b": b}}))
            }
            2 => Mutation::JsonPatch(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/data/a", "value": value()},
                    {"op": "replace", "path": "/data/a", "value": value()}
                ]))
                .unwrap(),
            ),
            3 => Mutation::JsonPatch(
                serde_json::from_value(json!([{"op": "remove", "path": "/data/b"}])).unwrap(),
            ),
            _ => Mutation::Cel(increment.clone()),
        };
        let precondition = rng.bool().then(|| guard.clone()).filter(|_| rng.bool());
        let key = ["k1", "k2", "k3", "k4"][rng.usize(..4)];
        spec(mutation, precondition, rng.bool().then_some(key))
    }

    /// A verdict's name, for comparing (failures by kind).
    fn name(verdict: &Verdict) -> String {
        match verdict {
            Verdict::Changed(_) => "changed".into(),
            Verdict::Unchanged => "unchanged".into(),
            Verdict::AlreadyApplied => "already_applied".into(),
            Verdict::Failed(failure) => format!("failed:{}", failure.kind()),
        }
    }

    fn without_version(mut object: Value) -> Value {
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        object
    }

    #[tokio::test]
    async fn a_batch_equals_its_members_written_one_at_a_time() {
        let increment =
            Cel::compile("c", r#"{"data": {"a": string(int(object.data.a) + 1)}}"#).unwrap();
        let guard = Cel::compile("p", r#"object.data.a != "2""#).unwrap();
        let mut rng = fastrand::Rng::with_seed(20261123);
        let mut seen = std::collections::BTreeSet::new();
        for case in 0..400 {
            let fresh = json!({
                "metadata": {"name": "o", "resourceVersion": "1"},
                "data": {"a": "0", "b": "0"}
            });
            let members: Vec<WriteSpec> = (0..rng.usize(1..10))
                .map(|_| random_member(&mut rng, &increment, &guard))
                .collect();

            // One at a time: each member reads what the one before it wrote.
            // One at a time: each member reads what the one before it wrote, and its
            // answer is the object right after its turn.
            let mut state = fresh.clone();
            let mut one_by_one = Vec::new();
            let mut own_states = Vec::new();
            for (version, member) in (2..).zip(&members) {
                let (body, mut verdicts) = fold(&state, false, &[(member, None)]).await;
                let verdict = verdicts.pop().unwrap();
                if matches!(verdict, Verdict::Changed(_)) {
                    state = body;
                    state["metadata"]["resourceVersion"] = json!(version.to_string());
                }
                one_by_one.push(name(&verdict));
                own_states.push(state.clone());
            }

            let specs: Vec<_> = members.iter().map(|m| (m, None)).collect();
            let (body, verdicts) = fold(&fresh, false, &specs).await;
            let batched: Vec<String> = verdicts.iter().map(name).collect();
            assert_eq!(batched, one_by_one, "case {case}: outcomes");
            assert_eq!(
                without_version(body.clone()),
                without_version(state),
                "case {case}: final object"
            );

            // Each member's answer is its own state: the server's object (its version
            // and its own fields) with the later members' changes undone.
            let mut written = body.clone();
            written["metadata"]["resourceVersion"] = json!("99");
            written["metadata"]["managedFields"] = json!([{"manager": "server"}]);
            let first_change = verdicts
                .iter()
                .position(|v| matches!(v, Verdict::Changed(_)))
                .unwrap_or(verdicts.len());
            let mut states = serial_states(&fresh, &verdicts, Some((body, written)));
            let mut answers: Vec<Value> =
                verdicts.iter().rev().map(|v| states.next_back(v)).collect();
            answers.reverse();
            for (i, (answer, own)) in answers.into_iter().zip(&own_states).enumerate() {
                let (version, server_fields) = if i < first_change {
                    ("1", false)
                } else {
                    ("99", true)
                };
                assert_eq!(
                    answer["metadata"]["resourceVersion"], version,
                    "case {case}: member {i}"
                );
                let mut answer = without_version(answer);
                let fields = answer["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("managedFields");
                assert_eq!(fields.is_some(), server_fields, "case {case}: member {i}");
                assert_eq!(
                    answer,
                    without_version(own.clone()),
                    "case {case}: member {i}'s state"
                );
            }
            seen.extend(batched);
        }
        // The generator reaches every kind of verdict.
        for kind in [
            "changed",
            "unchanged",
            "already_applied",
            "failed:precondition_failed",
            "failed:mutation_failed",
        ] {
            assert!(seen.contains(kind), "{kind} never happened: {seen:?}");
        }
    }

    #[tokio::test]
    async fn a_state_the_servers_object_cannot_give_comes_from_the_body_sent() {
        let fresh = json!({"metadata": {"name": "o", "resourceVersion": "7"}, "data": {"a": "0"}});
        let set =
            |k: &str, v: &str| spec(Mutation::MergePatch(json!({"data": {k: v}})), None, None);
        let (first, second) = (set("a", "1"), set("b", "2"));
        let (body, verdicts) = fold(&fresh, false, &[(&first, None), (&second, None)]).await;
        // The server dropped data.b (and added data.c), so undoing the second member's
        // change cannot apply to its object: the body sent stands in, at version 8.
        let written = json!({"metadata": {"name": "o", "resourceVersion": "8"}, "data": {"a": "1", "c": "s"}});
        let mut states = serial_states(&fresh, &verdicts, Some((body, written.clone())));
        assert_eq!(states.next_back(&verdicts[1]), written);
        assert_eq!(
            states.next_back(&verdicts[0]),
            json!({"metadata": {"name": "o", "resourceVersion": "8"}, "data": {"a": "1"}})
        );
    }

    #[tokio::test]
    async fn a_failing_member_is_left_out_and_the_others_see_each_other() {
        let fresh = json!({"metadata": {"name": "o", "resourceVersion": "7"}, "data": {"a": "0"}});
        let set = |v: &str| spec(Mutation::MergePatch(json!({"data": {"a": v}})), None, None);
        let missing = spec(
            Mutation::JsonPatch(
                serde_json::from_value(json!([{"op": "remove", "path": "/data/zzz"}])).unwrap(),
            ),
            None,
            None,
        );
        let (first, second, third) = (set("1"), missing, set("1"));
        let (body, verdicts) = fold(
            &fresh,
            false,
            &[(&first, None), (&second, None), (&third, None)],
        )
        .await;
        assert_eq!(body["data"]["a"], "1");
        assert_eq!(
            body["metadata"]["resourceVersion"], "7",
            "written at the version read"
        );
        let names: Vec<String> = verdicts.iter().map(name).collect();
        assert_eq!(names, ["changed", "failed:mutation_failed", "unchanged"]);
    }

    #[tokio::test]
    async fn every_member_key_is_recorded_in_the_one_write() {
        let fresh = json!({"metadata": {"name": "o", "resourceVersion": "7"}, "data": {"a": "0"}});
        let members: Vec<WriteSpec> = (0..MAX_MEMBERS)
            .map(|i| {
                spec(
                    Mutation::MergePatch(json!({"data": {format!("k{i}"): "x"}})),
                    None,
                    Some(&format!("key-{i}")),
                )
            })
            .collect();
        let specs: Vec<_> = members.iter().map(|m| (m, None)).collect();
        let (body, _) = fold(&fresh, false, &specs).await;
        for i in 0..MAX_MEMBERS {
            assert!(idempotency::applied(&body, &format!("key-{i}")), "key-{i}");
        }
    }
}
