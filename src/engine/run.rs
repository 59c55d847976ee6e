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
    AfterWrite, Confirmed, Read, Sent, attempt_span, note_answer, record_failure,
};
use super::batch::{Batcher, Key, Member};
use super::body::resource_version;
use super::decide::{Step, is_ambiguous};
use super::ends::{end_all, missing, refused, stale, unanswered};
use super::error::Failure;
use super::fold::{Verdict, answer_each, fold, verdict_of_the_object};
use super::memory::Source;
use super::spec::Subresource;
use crate::engine::classify::Decision;
use crate::mutation::Mutation;
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
pub(super) enum Attempted {
    /// Every member has its answer.
    Answered,
    /// These members go after the others (a create, isolation).
    SendBack(Vec<Member>),
    /// These members retry after the decision's backoff; the rest have their answers.
    Retry(Decision, Failure, Vec<Member>),
}

/// The end of an attempt of one member, as the batch's.
pub(super) fn single(member: Member, step: Step) -> Attempted {
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
                let final_refusal = !crate::engine::classify::decision(&answer).is_retryable();
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
/// own (see [`verdict_of_the_object`]) is answered at once.
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
