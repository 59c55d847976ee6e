//! The write loop, one for every write: a batch of members (one, for a write made
//! alone) is read once (or from the remembered copy), folded ([`super::fold`]), written
//! once, and every member gets its own answer; a retryable end plans each member's
//! backoff and goes again. Conflicts re-read and retry with jittered backoff, bounded by
//! the policy's attempts and by each member's deadline (never slept past); answers no
//! retry can fix end the member at once. A fold that changes nothing writes nothing.

use std::sync::Arc;

use opentelemetry::trace::TraceContextExt as _;
use serde_json::Value;
use tokio::time::Instant;
use tracing::{Instrument as _, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::alone;
use super::ends::{Attempted, End, conclude, is_own_failure};
use super::fold::{Verdict, fold};
use super::member::Member;
use super::resolve::Start;
use super::retry::{Waiting, back_off};
use crate::engine::api::{AfterWrite, Api, Confirmed, Read, Sent, note_answer};
use crate::engine::attempts::Attempts;
use crate::engine::body::resource_version;
use crate::engine::decide::is_ambiguous;
use crate::engine::error::{Failure, WriteError};
use crate::engine::memory::Source;
use crate::engine::result::Written;
use crate::engine::spans::{attempt_span, record_failure};
use crate::engine::spec::{Subresource, WriteSpec};
use crate::mutation::Mutation;
use crate::target::{ObjectPath, Verb};

/// Where a batch's members come from between attempts, and where those sent back go.
pub(crate) trait Company: Sync {
    /// Adds the members that arrived since the batch was taken.
    fn top_up(&self, members: &mut Vec<Member>);
    /// Takes back members that go after the others (a create, isolating an offender);
    /// those it cannot take go again at once.
    fn send_back(&self, members: Vec<Member>) -> Vec<Member>;
}

/// A write made alone: nobody joins it.
pub(crate) struct Alone;

impl Company for Alone {
    fn top_up(&self, _: &mut Vec<Member>) {}

    fn send_back(&self, members: Vec<Member>) -> Vec<Member> {
        members
    }
}

/// Runs one batch until every member has its answer, has gone back to `company`, or
/// has left.
pub(crate) async fn run(api: &Api, mut members: Vec<Member>, company: &dyn Company) {
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
        let attempted = async {
            let end = attempt(api, &mut members).await;
            conclude(api, members, end).await
        };
        match attempted.instrument(span.clone()).await {
            Attempted::Answered => return,
            Attempted::SendBack(back) => {
                drop(span);
                members = company.send_back(back);
            }
            Attempted::Retry(decision, failure, carried) => {
                record_failure(&span, decision.name(), &failure);
                let (going_on, ended) =
                    back_off(&api.budget, carried, &decision, &failure, span).await;
                for (member, last) in ended {
                    member.finish(Err(last));
                }
                members = going_on;
            }
        }
    }
}

/// One attempt of a batch: one read (or the remembered copy), the fold, one write (or
/// none, when nothing changed), and the live read that confirms a decision taken on a
/// remembered copy. How it ended; [`conclude`] makes that each member's answer or retry.
async fn attempt(api: &Api, members: &mut [Member]) -> End {
    // Server-side apply is merged by the API server: always alone, its own attempt.
    if let [member] = members
        && let Some(Mutation::Apply {
            configuration,
            force,
        }) = &member.spec.mutation
    {
        let step = alone::apply(
            api,
            &member.spec,
            &member.request,
            configuration,
            *force,
            &mut member.attempts,
        )
        .await;
        return End::Single(step);
    }
    let started = match start(api, members).await {
        Ok(started) => started,
        Err(end) => return end,
    };
    let has_status = members[0].resolved.has_status;
    let (body, verdicts) = {
        let mut turns: Vec<_> = members.iter_mut().map(Member::turn).collect();
        fold(&started.fresh, has_status, &mut turns).await
    };
    let changed = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Changed(_)))
        .count();
    if changed == 0 {
        return unwritten(api, members, started, verdicts).await;
    }
    write(api, members, started, (body, verdicts, changed)).await
}

/// What an attempt starts from: the object (read live or remembered) and the request's
/// place in the loop.
struct Started {
    request: ObjectPath,
    deadline: Option<Instant>,
    made: u32,
    fresh: Arc<Value>,
    source: Source,
    version: String,
}

/// The object the batch's attempt starts from: the remembered copy unless a member
/// must read live, else a live read; or the end of the attempt when the read ends it.
async fn start(api: &Api, members: &mut [Member]) -> Result<Started, End> {
    let deadline = latest_deadline(members.iter());
    let made = members[0].attempts.made();
    let request = members[0].request.clone();
    let mut read_live = false;
    for member in members.iter_mut() {
        read_live |= std::mem::take(&mut member.attempts.read_live);
    }
    let (read, source) = api.start_from(&request, deadline, made, read_live).await;
    let fresh = match read {
        Read::Found(object) => object,
        Read::Ended(answer, step) => return Err(End::Read(answer, step)),
        Read::Missing(answer) => return Err(End::Missing(answer)),
    };
    let version = resource_version(&fresh);
    Span::current().record("safewrite.resource_version.read", version.as_str());
    for member in members.iter_mut() {
        member.attempts.current().resource_version_read = version.clone();
    }
    Ok(Started {
        request,
        deadline,
        made,
        fresh,
        source,
        version,
    })
}

/// Nothing to write: every answer is decided by the object read, once a live read
/// confirms a remembered copy (for the members whose answer the object decides; a
/// failure of a member's own is answered as it is).
async fn unwritten(
    api: &Api,
    members: &mut [Member],
    started: Started,
    verdicts: Vec<Verdict>,
) -> End {
    let Started {
        request,
        made,
        fresh,
        source,
        version,
        ..
    } = started;
    let (confirm, deadline) = deciding(members, &verdicts, source);
    let confirmed = match confirm {
        true => Some(api.confirm(&request, &version, deadline, made).await),
        false => None,
    };
    End::Unwritten {
        verdicts,
        fresh,
        confirmed,
    }
}

/// Writes the fold's body (`changed` members' changes) in one PUT and says how that
/// ended. A refusal of what a remembered copy made (a 422 on a field since changed)
/// stands only once a live read shows the copy current.
async fn write(
    api: &Api,
    members: &mut [Member],
    started: Started,
    (body, verdicts, changed): (Value, Vec<Verdict>, usize),
) -> End {
    let Started {
        request,
        deadline,
        made,
        fresh,
        source,
        version,
    } = started;
    let size = members.len() as u32;
    for member in members.iter_mut() {
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
    let sent = api.send(put, deadline, made).await;
    if let Sent::Answer(answer) = &sent {
        for member in members.iter_mut() {
            note_answer(member.attempts.current(), answer);
        }
    }
    let after = api.after_write(&members[0].spec, &request, source, &sent);
    match (after, sent) {
        (AfterWrite::Stale, _) => End::Stale,
        (AfterWrite::Written(Ok(written)), _) => End::Written {
            verdicts,
            fresh,
            body,
            written,
        },
        (AfterWrite::Written(Err(failure)), _) => End::BadAnswer(failure),
        (_, Sent::Answer(answer)) => {
            let final_refusal = !is_ambiguous(&answer)
                && !crate::engine::classify::decision(&answer).is_retryable();
            if source == Source::Remembered && final_refusal {
                match api.confirm(&request, &version, deadline, made).await {
                    Confirmed::Current => {}
                    Confirmed::Stale => return End::Stale,
                    Confirmed::Ended(read, step) => return End::Read(read, step),
                }
            }
            End::Refused {
                verdicts,
                changed,
                answer,
            }
        }
        (_, Sent::Failed(failure, decision, maybe_sent)) => End::Unanswered {
            verdicts,
            failure,
            decision,
            maybe_sent,
        },
    }
}

/// Whether a fold that changed nothing must be confirmed on a live read (it was made
/// on the remembered copy, and some member's answer depends on the object), and the
/// latest deadline of the members whose answer does.
fn deciding(members: &[Member], verdicts: &[Verdict], source: Source) -> (bool, Option<Instant>) {
    let mut deciding = members
        .iter()
        .zip(verdicts)
        .filter(|(_, verdict)| !is_own_failure(verdict))
        .map(|(member, _)| member)
        .peekable();
    let confirm = source == Source::Remembered && deciding.peek().is_some();
    (confirm, latest_deadline(deciding))
}

/// The latest of the members' deadlines (none if one has none): the batch's requests
/// may take that long; each member's own wait ends at its own deadline.
fn latest_deadline<'a>(members: impl Iterator<Item = &'a Member>) -> Option<Instant> {
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

impl Waiting for Member {
    fn attempts(&mut self) -> &mut Attempts {
        &mut self.attempts
    }
}

/// Writes one request on its own: a batch of one that nothing joins.
pub(crate) async fn write_alone(
    api: &Api,
    spec: &WriteSpec,
    start: Start,
) -> Result<Written, WriteError> {
    let (member, answered) = Member::new(spec.clone(), None, start);
    run(api, vec![member], &Alone).await;
    answered.await.unwrap_or_else(|_| {
        Err(WriteError {
            failure: Failure::Cancelled(
                "the write ended without an answer; read the object to find out whether it was applied".into(),
            ),
            attempts: Vec::new(),
        })
    })
}
