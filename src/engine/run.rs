//! The write loop, one for every write: a batch of members (one, for a write made
//! alone) is read once (or from the remembered copy), folded ([`super::fold`]), written
//! once, and every member gets its own answer; a retryable end plans each member's
//! backoff and goes again. Conflicts re-read and retry with jittered backoff, bounded by
//! the policy's attempts and by each member's deadline (never slept past); answers no
//! retry can fix end the member at once. A fold that changes nothing writes nothing.

use std::time::Duration;

use opentelemetry::trace::TraceContextExt as _;
use serde_json::Value;
use tokio::time::Instant;
use tower::retry::budget::Budget as _;
use tracing::{Instrument as _, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::Engine;
use super::attempt::{
    AfterWrite, Confirmed, Read, Sent, attempt_span, note_answer, record_failure, stale_copy,
};
use super::batch::{Batcher, Key, Member};
use super::body::resource_version;
use super::decide::{Step, is_ambiguous};
use super::error::Failure;
use super::fold::{Maker, OwnCode, Verdict, answer_each, fold, verdict_of_the_object};
use super::memory::Source;
use super::spec::{Subresource, WriteSpec};
use crate::classify::Decision;
use crate::client::apiserver::Answer;
use crate::engine::mutation::Mutation;
use crate::target::Verb;

/// Where a batch's members come from between attempts, and where those sent back go.
pub(super) trait Company: Sync {
    /// Adds the members that arrived since the batch was taken.
    fn top_up(&self, members: &mut Vec<Member>);
    /// Takes back members that go after the others (a create, isolating an offender);
    /// those it cannot take go again at once.
    fn send_back(&self, members: Vec<Member>) -> Vec<Member>;
}

/// An object's queue of group commit.
pub(super) struct Queue<'a> {
    pub batcher: &'a Batcher,
    pub key: &'a Key,
    /// Members queued since the batch was taken join it before each attempt.
    pub top_up: bool,
}

impl Company for Queue<'_> {
    fn top_up(&self, members: &mut Vec<Member>) {
        if self.top_up {
            self.batcher.top_up(self.key, members);
        }
    }

    fn send_back(&self, members: Vec<Member>) -> Vec<Member> {
        self.batcher.requeue(self.key, members);
        Vec::new()
    }
}

/// A write made alone: nobody joins it.
pub(super) struct Alone;

impl Company for Alone {
    fn top_up(&self, _: &mut Vec<Member>) {}

    fn send_back(&self, members: Vec<Member>) -> Vec<Member> {
        members
    }
}

/// Runs one batch until every member has its answer, has gone back to `company`, or
/// has left.
pub(super) async fn run(engine: &Engine, mut members: Vec<Member>, company: &dyn Company) {
    loop {
        // Those whose caller went away or whose deadline passed leave now: nothing is
        // written on their behalf after this point.
        let now = Instant::now();
        members.retain(|member| !member.gone());
        let (late, staying): (Vec<_>, Vec<_>) = members
            .into_iter()
            .partition(|member| member.attempts.deadline.is_some_and(|d| now >= d));
        for member in late {
            let attempts = member.attempts.made();
            member.finish(Err(Failure::Deadline {
                attempts,
                last: "the deadline passed before the write could be tried again".into(),
            }));
        }
        members = staying;
        if members.is_empty() {
            return;
        }
        company.top_up(&mut members);
        let size = members.len();
        for member in &mut members {
            member.attempts.begin();
        }
        let span = members[0]
            .span
            .in_scope(|| attempt_span(members[0].attempts.made()));
        if size > 1 {
            span.record("safewrite.batch_size", size as i64);
        }
        for member in &members[1..] {
            span.add_link(member.span.context().span().span_context().clone());
        }
        match attempt(engine, members).instrument(span.clone()).await {
            Attempted::Answered => return,
            Attempted::SendBack(back) => {
                drop(span);
                members = company.send_back(back);
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
    /// These members go after the others (a create, isolation).
    SendBack(Vec<Member>),
    /// These members retry after the decision's backoff; the rest have their answers.
    Retry(Decision, Failure, Vec<Member>),
}

/// The end of an attempt of one member, as the batch's.
fn single(member: Member, step: Step) -> Attempted {
    match step {
        Step::Done(done) => member.answer(Ok(done)),
        Step::Fail(failure) => member.answer(Err(failure)),
        Step::Retry(decision, failure) => {
            return Attempted::Retry(decision, failure, vec![member]);
        }
    }
    Attempted::Answered
}

/// One attempt of a batch: one read (or the remembered copy), the fold, one write.
async fn attempt(engine: &Engine, mut members: Vec<Member>) -> Attempted {
    // Server-side apply is merged by the API server: always alone, its own attempt.
    if let [member] = &mut members[..]
        && let Some(Mutation::Apply {
            configuration,
            force,
        }) = &member.spec.mutation
    {
        let step = engine
            .apply_attempt(
                &member.spec,
                &member.request,
                configuration,
                *force,
                &mut member.attempts,
            )
            .await;
        return single(members.pop().expect("one member"), step);
    }
    let deadline = latest_deadline(&members);
    let made = members[0].attempts.made();
    let request = members[0].request.clone();
    let mut read_live = false;
    for member in &mut members {
        read_live |= std::mem::take(&mut member.attempts.read_live);
    }
    let (read, source) = engine.start_from(&request, deadline, made, read_live).await;
    let fresh = match read {
        Read::Found(object) => object,
        Read::Ended(answer, step) => return end_all(members, answer.as_ref(), step),
        Read::Missing(answer) => return missing(engine, members, &answer).await,
    };
    let version = resource_version(&fresh);
    Span::current().record("safewrite.resource_version.read", version.as_str());
    for member in &mut members {
        member.attempts.current().resource_version_read = version.clone();
    }
    let has_status = members[0].resolved.has_status;
    let (body, verdicts) = {
        let mut turns: Vec<_> = members.iter_mut().map(Member::turn).collect();
        fold(&fresh, has_status, &mut turns).await
    };
    let changed = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Changed(_)))
        .count();
    if changed == 0 {
        return unwritten(engine, members, verdicts, &fresh, source).await;
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
    match (after, sent) {
        (AfterWrite::Stale, _) => stale(members),
        (AfterWrite::Written(Ok(written)), _) => {
            Span::current().record(
                "safewrite.resource_version.written",
                resource_version(&written).as_str(),
            );
            answer_each(members, verdicts, &fresh, Some((body, written)));
            Attempted::Answered
        }
        (AfterWrite::Written(Err(error)), _) => {
            let failure = Failure::BadAnswer(error);
            for member in members {
                member.answer(Err(failure.clone()));
            }
            Attempted::Answered
        }
        (_, Sent::Answer(answer)) => {
            // A refusal of what a remembered copy made (a 422 on a field since changed)
            // stands only once a live read shows the copy current.
            if source == Source::Remembered && !is_ambiguous(&answer) {
                let final_refusal = !crate::classify::decision(&answer).is_retryable();
                if final_refusal {
                    match engine.confirm(&request, &version, deadline, made).await {
                        Confirmed::Current => {}
                        Confirmed::Stale => return stale(members),
                        Confirmed::Ended(answer, step) => {
                            return end_all(members, answer.as_ref(), step);
                        }
                    }
                }
            }
            refused(members, &verdicts, changed, &answer)
        }
        (_, Sent::Failed(failure, decision, maybe_sent)) => {
            unanswered(members, &verdicts, failure, decision, maybe_sent)
        }
    }
}

/// The fold changed nothing, so nothing is written: every answer is decided by the
/// object read, once a live read confirms a remembered copy. A member's failure of its
/// own (see [`Verdict::decided_by_the_object`]) is answered at once.
async fn unwritten(
    engine: &Engine,
    members: Vec<Member>,
    verdicts: Vec<Verdict>,
    fresh: &Value,
    source: Source,
) -> Attempted {
    if source == Source::Live {
        answer_each(members, verdicts, fresh, None);
        return Attempted::Answered;
    }
    let (mut deciding, mut decided) = (Vec::new(), Vec::new());
    for (member, verdict) in members.into_iter().zip(verdicts) {
        match verdict {
            Verdict::Failed(failure) if !verdict_of_the_object(&failure) => {
                member.answer(Err(failure));
            }
            verdict => {
                deciding.push(member);
                decided.push(verdict);
            }
        }
    }
    if deciding.is_empty() {
        return Attempted::Answered;
    }
    let request = deciding[0].request.clone();
    let (deadline, made) = (latest_deadline(&deciding), deciding[0].attempts.made());
    let version = resource_version(fresh);
    match engine.confirm(&request, &version, deadline, made).await {
        Confirmed::Current => {
            answer_each(deciding, decided, fresh, None);
            Attempted::Answered
        }
        Confirmed::Stale => stale(deciding),
        Confirmed::Ended(answer, step) => end_all(deciding, answer.as_ref(), step),
    }
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

/// The batch was decided on a remembered copy that turned out stale: every member goes
/// again at once, from a live read.
fn stale(mut members: Vec<Member>) -> Attempted {
    for member in &mut members {
        member.attempts.read_live = true;
    }
    Attempted::Retry(Decision::Stale, stale_copy(), members)
}

/// A read that ended the attempt (refused, with its answer, or unanswered): every
/// member retries or fails with it.
fn end_all(mut members: Vec<Member>, answer: Option<&Answer>, step: Step) -> Attempted {
    if let Some(answer) = answer {
        for member in &mut members {
            note_answer(member.attempts.current(), answer);
        }
    }
    match step {
        Step::Retry(decision, failure) => Attempted::Retry(decision, failure, members),
        Step::Fail(failure) => {
            for member in members {
                member.answer(Err(failure.clone()));
            }
            Attempted::Answered
        }
        Step::Done(_) => unreachable!("a read does not finish a write"),
    }
}

/// The object does not exist: the members before the first that may create it fail
/// with the 404, as they would have one at a time; that one creates the object on its
/// own (a create is not shared), and the rest go back to be written to the object it
/// created.
async fn missing(engine: &Engine, members: Vec<Member>, answer: &Answer) -> Attempted {
    let mut members = members.into_iter();
    let mut creator = None;
    for mut member in members.by_ref() {
        if member.spec.create_if_missing.is_some() {
            creator = Some(member);
            break;
        }
        note_answer(member.attempts.current(), answer);
        match Step::from_answer(answer, None) {
            Step::Fail(failure) | Step::Retry(_, failure) => member.answer(Err(failure)),
            Step::Done(_) => unreachable!("a 404 does not finish a write"),
        }
    }
    let Some(mut creator) = creator else {
        return Attempted::Answered;
    };
    let rest: Vec<Member> = members.collect();
    creator.attempts.current().batch_size = 1;
    let step = {
        let Member {
            spec,
            own,
            request,
            attempts,
            ..
        } = &mut creator;
        let spec: &WriteSpec = spec;
        let template = spec
            .create_if_missing
            .as_ref()
            .expect("a creator has a template");
        let mut maker = Maker {
            spec,
            own: own.as_deref_mut().map(|own| own as &mut dyn OwnCode),
            deadline: attempts.deadline,
        };
        engine
            .create(spec, request, template, &mut maker, attempts)
            .await
    };
    match step {
        Step::Done(done) => creator.answer(Ok(done)),
        Step::Fail(failure) => creator.answer(Err(failure)),
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
        Attempted::SendBack(rest)
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
    answer: &Answer,
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
    // Only a member written alone may name an exact resourceVersion.
    let strict = match &members[..] {
        [member] => member.spec.preconditions.resource_version.clone(),
        _ => None,
    };
    match Step::from_answer(answer, strict.as_deref()) {
        Step::Retry(decision, failure) => Attempted::Retry(decision, failure, members),
        Step::Done(_) => unreachable!("a refusal does not finish a write"),
        Step::Fail(failure) if changed == 1 => {
            let mut back = Vec::new();
            for (member, verdict) in members.into_iter().zip(verdicts) {
                if matches!(verdict, Verdict::Changed(_)) {
                    member.answer(Err(failure.clone()));
                } else {
                    back.push(member);
                }
            }
            if back.is_empty() {
                Attempted::Answered
            } else {
                Attempted::SendBack(back)
            }
        }
        Step::Fail(_) => Attempted::SendBack(
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
            Step::Fail(failure) => member.answer(Err(failure)),
            Step::Done(_) => unreachable!("a failure does not finish a write"),
        }
    }
    match retry {
        Some((decision, failure)) => Attempted::Retry(decision, failure, going_on),
        None => Attempted::Answered,
    }
}
