//! One attempt of a batch: the object to start from (the remembered copy, or a live
//! read), the fold of every member's change over it ([`super::fold`]), and one write of
//! the result, or none when nothing changed. How the attempt ended ([`End`]) is what
//! [`super::ends`] makes each member's answer or retry from. A decision taken on a
//! remembered copy stands only once the object is shown current: by the write's
//! success, or by a live read.

use std::sync::Arc;

use serde_json::Value;
use tracing::Span;

use safewrite_api::deadline::AnswerBy;
use safewrite_api::target::{ObjectPath, Verb};
use safewrite_mutation::Mutation;

use super::ends::{End, is_own_failure};
use super::fold::{Verdict, fold};
use super::member::Member;
use super::unfolded;
use crate::api::{AfterWrite, Api, Confirmed, Read, Sent};
use crate::body::{put_bytes, resource_version};
use crate::decide::{Failed, is_ambiguous};
use crate::memory::Source;
use crate::spec::Subresource;

/// One attempt of a batch: one read (or the remembered copy), the fold, one write (or
/// none, when nothing changed), and the live read that confirms a decision taken on a
/// remembered copy. How it ended; [`conclude`](super::ends::conclude) makes that each
/// member's answer or retry.
pub(super) async fn attempt(api: &Api, members: &mut [Member]) -> End {
    // A batch carries one fence: this process must lead under it before anything is
    // read or written (the object's own check is in the fold, decided with the write).
    if let Some(fence) = &members[0].spec.fence {
        let deadline = latest_deadline(members.iter());
        let made = members[0].attempts.made();
        if let Err(failure) = api.held(fence, deadline, made).await {
            return End::Read(Failed::End(failure));
        }
    }
    // Server-side apply is merged by the API server: always alone, its own attempt.
    if let [member] = members
        && let Some(Mutation::Apply {
            configuration,
            force,
        }) = &member.spec.mutation
    {
        let step = unfolded::apply(
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
    let mut started = match start(api, members).await {
        Ok(started) => started,
        Err(end) => return end,
    };
    if let Err(end) = record_epoch_first(api, members, &mut started).await {
        return end;
    }
    let has_status = members[0].resolved.has_status;
    let (body, verdicts) = {
        let mut entries: Vec<_> = members.iter_mut().map(Member::fold_entry).collect();
        fold(&started.fresh, has_status, &mut entries).await
    };
    let changed = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Changed(_)))
        .count();
    if changed == 0 {
        return unwritten(api, members, started, verdicts).await;
    }
    let folded = Folded {
        body,
        verdicts,
        changed,
    };
    write(api, members, started, folded).await
}

/// What the fold made of the members' changes: the body to write, each member's
/// verdict (in the members' order), and how many of them changed the object.
struct Folded {
    body: Value,
    verdicts: Vec<Verdict>,
    changed: usize,
}

/// What an attempt starts from: the object (read live or remembered) and the request's
/// place in the loop.
struct AttemptInput {
    request: ObjectPath,
    deadline: AnswerBy,
    made: u32,
    fresh: Arc<Value>,
    source: Source,
    version: String,
}

/// The object the batch's attempt starts from: the remembered copy unless a member
/// must read live, else a live read; or the end of the attempt when the read ends it.
async fn start(api: &Api, members: &mut [Member]) -> Result<AttemptInput, End> {
    let deadline = latest_deadline(members.iter());
    let made = members[0].attempts.made();
    let request = members[0].request.clone();
    let mut read_live = false;
    for member in members.iter_mut() {
        read_live |= std::mem::take(&mut member.attempts.read_live);
    }
    let copy = match read_live {
        true => None,
        false => api.memory.recall(request.as_str()),
    };
    let (read, source) = match copy {
        Some(copy) => (Read::Found(copy), Source::Remembered),
        None => (api.read(&request, deadline, made).await, Source::Live),
    };
    let fresh = match read {
        Read::Found(object) => object,
        Read::Ended(answer, step) => {
            if let Some(answer) = &answer {
                members.iter_mut().for_each(|member| member.note(answer));
            }
            return Err(End::Read(step));
        }
        Read::Missing(answer) => {
            // The 404 answers the members before the first that may create the object.
            let creates = |member: &&mut Member| member.spec.create_if_missing.is_some();
            for member in members.iter_mut().take_while(|m| !creates(m)) {
                member.note(&answer);
            }
            return Err(End::Missing(answer));
        }
    };
    let version = resource_version(&fresh);
    Span::current().record("safewrite.resource_version.read", version.as_str());
    for member in members.iter_mut() {
        member.attempts.current().resource_version_read = version.clone();
    }
    Ok(AttemptInput {
        request,
        deadline,
        made,
        fresh,
        source,
        version,
    })
}

/// A fenced status write cannot record its epoch (the status subresource keeps metadata
/// as it is): when the object records an earlier epoch of the fence's Lease (or none),
/// the epoch is first recorded through the main resource, in a write conditioned on the
/// version read, and the status write starts from what that write left. So the
/// object records the epoch of every fenced status write at the version it is written
/// at, and a later leader's record fences it. A conflict re-reads and tries again.
async fn record_epoch_first(
    api: &Api,
    members: &mut [Member],
    started: &mut AttemptInput,
) -> Result<(), End> {
    let spec = &members[0].spec;
    let Some(fence) = spec.fence.as_ref() else {
        return Ok(());
    };
    if spec.subresource != Subresource::Status || !fence.behind(&started.fresh) || spec.dry_run {
        return Ok(());
    }
    let mut body = Value::clone(&started.fresh);
    fence.record(&mut body);
    let data = put_bytes(&started.fresh, &body, true);
    let put = started
        .request
        .request(Verb::Replace, false, &spec.write_params(false), data);
    let sent = api.send(put, started.deadline, started.made).await;
    if let Sent::Answer(answer) = &sent {
        for member in members.iter_mut() {
            member.note(answer);
        }
    }
    let main = crate::spec::WriteSpec {
        subresource: Subresource::Main,
        ..members[0].spec.clone()
    };
    match (
        api.after_write(&main, &started.request, started.source, &sent),
        sent,
    ) {
        (AfterWrite::Written(Ok(written)), _) => {
            started.version = resource_version(&written);
            started.fresh = written;
            started.source = Source::Live;
            for member in members.iter_mut() {
                member.attempts.current().resource_version_read = started.version.clone();
            }
            Ok(())
        }
        (AfterWrite::Written(Err(failure)), _) => Err(End::BadAnswer(failure)),
        (AfterWrite::Stale, _) => Err(End::Stale),
        (_, Sent::Answer(answer)) if answer.code == 409 => Err(End::Stale),
        (_, Sent::Answer(answer)) => Err(End::Read(Failed::from_answer(&answer, None))),
        (_, Sent::Failed(failure, decision, _)) => {
            Err(End::Read(Failed::from_failure(failure, decision)))
        }
    }
}

/// Nothing to write: every answer is decided by the object read, once a live read
/// confirms a remembered copy (for the members whose answer the object decides; a
/// failure of a member's own is answered as it is).
async fn unwritten(
    api: &Api,
    members: &mut [Member],
    started: AttemptInput,
    verdicts: Vec<Verdict>,
) -> End {
    let AttemptInput {
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
    if let Some(Confirmed::Ended(Some(answer), _)) = &confirmed {
        // The members whose answer the read was to decide.
        for (member, verdict) in members.iter_mut().zip(&verdicts) {
            if !is_own_failure(verdict) {
                member.note(answer);
            }
        }
    }
    End::Unwritten {
        verdicts,
        fresh,
        confirmed,
    }
}

/// Writes the fold's body (`changed` members' changes) in one PUT and says how that
/// ended. A refusal of what a remembered copy made (a 422 on a field since changed)
/// stands only once a live read shows the copy current.
async fn write(api: &Api, members: &mut [Member], started: AttemptInput, folded: Folded) -> End {
    let Folded {
        body,
        verdicts,
        changed,
    } = folded;
    let AttemptInput {
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
    api.metrics.batch(members.len());
    let first = &members[0].spec;
    let data = put_bytes(&fresh, &body, first.subresource == Subresource::Main);
    let put = request.request(
        Verb::Replace,
        first.subresource == Subresource::Status,
        &first.write_params(false),
        data,
    );
    let sent = api.send(put, deadline, made).await;
    if let Sent::Answer(answer) = &sent {
        for member in members.iter_mut() {
            member.note(answer);
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
            let final_refusal =
                !is_ambiguous(&answer) && !crate::classify::decision(&answer).is_retryable();
            if source == Source::Remembered && final_refusal {
                match api.confirm(&request, &version, deadline, made).await {
                    Confirmed::Current => {}
                    Confirmed::Stale => return End::Stale,
                    Confirmed::Ended(read, step) => {
                        if let Some(read) = &read {
                            members.iter_mut().for_each(|member| member.note(read));
                        }
                        return End::Read(step);
                    }
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
fn deciding(members: &[Member], verdicts: &[Verdict], source: Source) -> (bool, AnswerBy) {
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
fn latest_deadline<'a>(members: impl Iterator<Item = &'a Member>) -> AnswerBy {
    AnswerBy::latest(members.map(|member| member.attempts.deadline))
}
