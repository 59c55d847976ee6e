//! How an attempt's end becomes each member's answer or retry: a write's success or a
//! fold that changed nothing (each member's own serial answer, [`answer_each`]), a stale
//! copy, a read that ended the attempt, a missing object, a refused write, a write
//! without an answer.

use std::sync::Arc;

use serde_json::Value;
use tracing::Span;

use safewrite_client::apiserver::Answer;
use safewrite_mutation::{Mutation, entries};

use super::fold::{Verdict, verdict_of_the_object};
use super::member::{Member, MemberMutator, OwnCode};
use super::unfolded;
use crate::api::{Api, Confirmed, stale_copy};
use crate::body::resource_version;
use crate::classify::Decision;
use crate::decide::{Failed, Step, is_ambiguous};
use crate::error::Failure;
use crate::result::{Done, Object, Outcome, Serial};
use crate::spec::WriteSpec;

/// What becomes of a batch's members after one attempt: all answered, some sent back,
/// or some to retry.
pub(crate) enum Disposition {
    /// Every member has its answer.
    Answered,
    /// These members go after the others (a create, isolation).
    SendBack(Vec<Member>),
    /// These members retry after the decision's backoff; the rest have their answers.
    Retry(Decision, Failure, Vec<Member>),
}

/// How an attempt ended, before it means anything for each member.
pub(crate) enum End {
    /// The attempt of a member written on its own (server-side apply) ended so.
    Single(Step),
    /// It was decided on a remembered copy that turned out stale.
    Stale,
    /// A read ended it (refused or unanswered; its answer is noted in the records of
    /// the members it answered).
    Read(Failed),
    /// The object does not exist: the read's 404.
    Missing(Answer),
    /// Nothing changed, so nothing was written; `confirmed` is what a live read made of
    /// the remembered copy the fold was made on (`None`: the object was read live).
    Unwritten {
        verdicts: Vec<Verdict>,
        fresh: Arc<Value>,
        confirmed: Option<Confirmed>,
    },
    /// The write was made: `written` is the object as the API server answered it.
    Written {
        verdicts: Vec<Verdict>,
        fresh: Arc<Value>,
        body: Value,
        written: Arc<Value>,
    },
    /// The write was made, but its answer could not be used.
    BadAnswer(Failure),
    /// The API server refused the write (`changed`: the members whose change it carried).
    Refused {
        verdicts: Vec<Verdict>,
        changed: usize,
        answer: Answer,
    },
    /// The write got no answer.
    Unanswered {
        verdicts: Vec<Verdict>,
        failure: Failure,
        decision: Decision,
        maybe_sent: bool,
    },
}

/// What the attempt's `end` makes of each member: its answer, its retry, or a place
/// after the others.
pub(crate) async fn conclude(api: &Api, members: Vec<Member>, end: End) -> Disposition {
    match end {
        End::Single(step) => single(members, step),
        End::Stale => stale(members),
        End::Read(step) => end_all(members, step),
        End::Missing(answer) => missing(api, members, &answer).await,
        End::Unwritten {
            verdicts,
            fresh,
            confirmed,
        } => unwritten(members, verdicts, &fresh, confirmed),
        End::Written {
            verdicts,
            fresh,
            body,
            written,
        } => {
            Span::current().record(
                "safewrite.resource_version.written",
                resource_version(&written).as_str(),
            );
            answer_each(members, verdicts, &fresh, Some((body, written)));
            Disposition::Answered
        }
        End::BadAnswer(failure) => {
            for member in members {
                member.answer(Err(failure.clone()));
            }
            Disposition::Answered
        }
        End::Unanswered {
            verdicts,
            failure,
            decision,
            maybe_sent,
        } => unanswered(members, &verdicts, failure, decision, maybe_sent),
        End::Refused {
            verdicts,
            changed,
            answer,
        } => refused(members, &verdicts, changed, &answer),
    }
}

/// Answers each member of a batch whose attempt ended with a read (`write` is `None`:
/// nothing changed) or a successful write (`write` holds the body sent and the object
/// the API server answered with). Each member's answer is what it would have got
/// written alone in batch order: the object as read for the members before the first
/// change, else its state in the write ([`Serial`]), which is made only when the
/// member's answer is built, so that no two members hold a copy of a large object at
/// once.
pub(crate) fn answer_each(
    members: Vec<Member>,
    mut verdicts: Vec<Verdict>,
    fresh: &Arc<Value>,
    write: Option<(Value, Arc<Value>)>,
) {
    let first_change = match write {
        Some(_) => verdicts
            .iter()
            .position(|v| matches!(v, Verdict::Changed(_)))
            .unwrap_or(verdicts.len()),
        None => verdicts.len(),
    };
    let serial = write.map(|(sent, written)| {
        let undos = verdicts
            .iter_mut()
            .map(|verdict| match verdict {
                Verdict::Changed(undo) => Some(std::mem::take(undo)),
                _ => None,
            })
            .collect();
        Arc::new(Serial::new(written, sent, undos))
    });
    for (at, (member, verdict)) in members.into_iter().zip(verdicts).enumerate() {
        let state = match &serial {
            Some(serial) if at >= first_change => Object::Serial(serial.clone(), at),
            _ => Object::Shared(fresh.clone()),
        };
        let result = match verdict {
            // The write may have removed the last finalizer of an object being deleted:
            // the API server deleted it. Only then is the state made here.
            Verdict::Changed(_) if serial.as_ref().is_some_and(|s| s.deleting()) => {
                let state = state.into_value();
                let outcome = if entries::is_gone(&state) {
                    Outcome::Gone
                } else {
                    Outcome::Updated
                };
                Ok(Done::new(outcome, state))
            }
            Verdict::Changed(_) => Ok(Done::new(Outcome::Updated, state)),
            Verdict::Unchanged => Ok(Done::new(Outcome::Unchanged, state)),
            Verdict::AlreadyApplied => Ok(Done::already_applied(state)),
            Verdict::Aborted => Ok(Done::new(Outcome::Aborted, state)),
            Verdict::Failed(mut failure) => {
                if let Some(current) = failure.current_mut() {
                    *current = state.into_value();
                }
                Err(failure)
            }
        };
        member.answer(result);
    }
}

/// Whether a member's verdict is a failure of its own (see [`verdict_of_the_object`]):
/// answered as it is, whatever a live read would say.
pub(crate) fn is_own_failure(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Failed(failure) if !verdict_of_the_object(failure))
}

/// The end of the attempt of a member written on its own.
fn single(mut members: Vec<Member>, step: Step) -> Disposition {
    let member = members.pop().expect("one member");
    match step {
        Step::Done(done) => member.answer(Ok(done)),
        Step::Fail(failure) => member.answer(Err(failure)),
        Step::Retry(decision, failure) => {
            return Disposition::Retry(decision, failure, vec![member]);
        }
    }
    Disposition::Answered
}

/// Nothing was written: every answer is decided by the object read, once a live read
/// confirmed a remembered copy. A member's failure of its own is answered at once.
fn unwritten(
    members: Vec<Member>,
    verdicts: Vec<Verdict>,
    fresh: &Arc<Value>,
    confirmed: Option<Confirmed>,
) -> Disposition {
    let Some(confirmed) = confirmed else {
        answer_each(members, verdicts, fresh, None);
        return Disposition::Answered;
    };
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
        return Disposition::Answered;
    }
    match confirmed {
        Confirmed::Current => {
            answer_each(deciding, decided, fresh, None);
            Disposition::Answered
        }
        Confirmed::Stale => stale(deciding),
        Confirmed::Ended(_, step) => end_all(deciding, step),
    }
}

/// The batch was decided on a remembered copy that turned out stale: every member goes
/// again at once, from a live read.
fn stale(mut members: Vec<Member>) -> Disposition {
    for member in &mut members {
        member.attempts.read_live = true;
    }
    Disposition::Retry(Decision::Stale, stale_copy(), members)
}

/// A read that ended the attempt (refused or unanswered): every
/// member retries or fails with it.
fn end_all(members: Vec<Member>, failed: Failed) -> Disposition {
    match failed {
        Failed::Retry(decision, failure) => Disposition::Retry(decision, failure, members),
        Failed::End(failure) => {
            for member in members {
                member.answer(Err(failure.clone()));
            }
            Disposition::Answered
        }
    }
}

/// The object does not exist: the members before the first that may create it fail
/// with the 404, as they would have one at a time; that one creates the object on its
/// own (a create is not shared), and the rest go back to be written to the object it
/// created.
async fn missing(api: &Api, members: Vec<Member>, answer: &Answer) -> Disposition {
    let mut members = members.into_iter();
    let mut creator = None;
    for member in members.by_ref() {
        if member.spec.create_if_missing.is_some() {
            creator = Some(member);
            break;
        }
        if let Some(Mutation::Entry(change)) = &member.spec.mutation
            && change.removes_a_finalizer()
        {
            // Nothing left to remove a finalizer from: done, and the caller learns the
            // object is gone.
            member.answer(Ok(Done::new(Outcome::Gone, Value::Null)));
            continue;
        }
        member.answer(Err(Failed::from_answer(answer, None).into_failure()));
    }
    let Some(mut creator) = creator else {
        return Disposition::Answered;
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
        let mut mutator = MemberMutator {
            spec,
            own: own.as_deref_mut().map(|own| own as &mut dyn OwnCode),
            deadline: attempts.deadline,
        };
        unfolded::create(api, spec, request, template, &mut mutator, attempts).await
    };
    match step {
        Step::Done(done) => creator.answer(Ok(done)),
        Step::Fail(failure) => creator.answer(Err(failure)),
        // Someone else created it first (AlreadyExists) or a fault: the creator goes
        // back with the others, to be retried as a member (the object may exist now).
        Step::Retry(decision, failure) => {
            let mut back = vec![creator];
            back.extend(rest);
            return Disposition::Retry(decision, failure, back);
        }
    }
    if rest.is_empty() {
        Disposition::Answered
    } else {
        Disposition::SendBack(rest)
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
) -> Disposition {
    if is_ambiguous(answer) {
        // A timeout answer may come after the write was stored: each member whose change
        // it carried is what the same answer would make of it alone.
        return settle(members, verdicts, |member, changed| {
            if changed {
                Failed::write_refused(&member.spec, answer)
            } else {
                Failed::from_answer(answer, None)
            }
        });
    }
    // Only a member written alone may name an exact resourceVersion.
    let strict = match &members[..] {
        [member] => member.spec.preconditions.resource_version.clone(),
        _ => None,
    };
    match Failed::from_answer(answer, strict.as_deref()) {
        Failed::Retry(decision, failure) => Disposition::Retry(decision, failure, members),
        Failed::End(failure) if changed == 1 => {
            let mut back = Vec::new();
            for (member, verdict) in members.into_iter().zip(verdicts) {
                if matches!(verdict, Verdict::Changed(_)) {
                    member.answer(Err(failure.clone()));
                } else {
                    back.push(member);
                }
            }
            if back.is_empty() {
                Disposition::Answered
            } else {
                Disposition::SendBack(back)
            }
        }
        Failed::End(_) => Disposition::SendBack(
            members
                .into_iter()
                .map(|mut m| {
                    m.isolated = true;
                    m
                })
                .collect(),
        ),
    }
}

/// The batch's write got no answer. If it may have reached the API server, each member
/// whose change it carried is what [`Failed::unanswered_write`] makes of it alone (an
/// unknown outcome without an idempotency key); the rest retry when the failure is
/// retryable (the next read tells what was applied).
fn unanswered(
    members: Vec<Member>,
    verdicts: &[Verdict],
    failure: Failure,
    decision: Decision,
    maybe_sent: bool,
) -> Disposition {
    settle(members, verdicts, |member, changed| {
        Failed::unanswered_write(
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
    failed_of: impl Fn(&Member, bool) -> Failed,
) -> Disposition {
    let (mut retry, mut going_on) = (None, Vec::new());
    for (member, verdict) in members.into_iter().zip(verdicts) {
        match failed_of(&member, matches!(verdict, Verdict::Changed(_))) {
            Failed::Retry(decision, failure) => {
                retry.get_or_insert((decision, failure));
                going_on.push(member);
            }
            Failed::End(failure) => member.answer(Err(failure)),
        }
    }
    match retry {
        Some((decision, failure)) => Disposition::Retry(decision, failure, going_on),
        None => Disposition::Answered,
    }
}
