//! The decisions of the loop, as functions of what happened: how an attempt ended
//! ([`Step`], and [`Failed`] for one that failed) and whether to go on after a retryable one and how long to wait first
//! ([`after`]). Nothing here sends, sleeps or reads the clock.

use std::time::Duration;

use tokio::time::Instant;

use safewrite_api::deadline::AnswerBy;
use safewrite_client::apiserver::Answer;

use super::error::{Failure, Fault};
use super::result::Done;
use super::spec::{RetryPolicy, WriteSpec};
use crate::classify::{Decision, INTERNAL_ERROR_RETRIES};

/// What one attempt decided: it finished the write, or it failed ([`Failed`]'s two
/// arms).
pub(super) enum Step {
    Done(Done),
    Retry(Decision, Failure),
    Fail(Failure),
}

// === impl Step ===

impl From<Failed> for Step {
    fn from(failed: Failed) -> Step {
        match failed {
            Failed::Retry(decision, failure) => Step::Retry(decision, failure),
            Failed::End(failure) => Step::Fail(failure),
        }
    }
}

/// What an attempt that failed decided: retry after the decision's backoff, or end the
/// write with the failure. A failure never finishes a write, so there is no third arm.
pub(super) enum Failed {
    Retry(Decision, Failure),
    End(Failure),
}

// === impl Failed ===

impl Failed {
    pub(super) fn from_failure(failure: Failure, decision: Decision) -> Failed {
        if decision.is_retryable() {
            Failed::Retry(decision, failure)
        } else {
            Failed::End(failure)
        }
    }

    /// The failure, retryable or not, for a caller that does not retry it itself.
    pub(super) fn into_failure(self) -> Failure {
        match self {
            Failed::Retry(_, failure) | Failed::End(failure) => failure,
        }
    }

    /// A non-success answer: retry it or end with it. With `strict` (the caller's exact
    /// resourceVersion) a conflict is a compare-and-swap failure, never retried.
    pub(super) fn from_answer(answer: &Answer, strict: Option<&str>) -> Failed {
        let decision = crate::classify::decision(answer);
        if let Some(expected) = strict
            && decision == Decision::Conflict
        {
            return Failed::End(Failure::ResourceVersionMismatch {
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
            status: answer.status().map(Box::new),
        };
        Failed::from_failure(failure, decision)
    }

    /// A write (PUT or POST) that got no answer. When it may have reached the API
    /// server and the request cannot be retried safely (no idempotency key), whether it
    /// was applied is unknown and a retry could apply a read-dependent change twice: the
    /// loop stops. With a key (or a dry run) the next attempt's read tells, and the fault
    /// is retried.
    pub(super) fn unanswered_write(
        spec: &WriteSpec,
        failure: Failure,
        decision: Decision,
        maybe_sent: bool,
    ) -> Failed {
        let safe = spec.retry_is_safe();
        match failure {
            Failure::Unreachable { last } if maybe_sent && !safe => {
                Failed::End(Failure::OutcomeUnknown { last: last.into() })
            }
            Failure::Deadline { attempts, last } => {
                let in_doubt = if maybe_sent {
                    InDoubt::Maybe
                } else {
                    InDoubt::No
                };
                Failed::End(deadline(spec, in_doubt, attempts, last))
            }
            failure => Failed::from_failure(failure, decision),
        }
    }

    /// A write the API server answered with an error. A timeout answer (504, reason
    /// Timeout) to a write may come after the change was stored, so without an
    /// idempotency key it is not retried either.
    pub(super) fn write_refused(spec: &WriteSpec, answer: &Answer) -> Failed {
        if is_ambiguous(answer) && !spec.retry_is_safe() {
            return Failed::End(Failure::OutcomeUnknown {
                last: Fault::Answer {
                    code: answer.code,
                    message: answer.message(),
                },
            });
        }
        Failed::from_answer(answer, spec.preconditions.resource_version.as_deref())
    }
}

/// Whether a write of a request may have been sent and not answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum InDoubt {
    /// A write may have reached the API server without its answer reaching us.
    Maybe,
    /// Every write sent was answered (or none was sent).
    No,
}

/// The failure of a write whose deadline passed. When a write of it may have been sent
/// and not answered (`in_doubt`) and it carries no idempotency key, its outcome is what
/// the caller must act on, not the deadline: DEADLINE_EXCEEDED means no write is in
/// doubt (see the proto's retry options). The one place this rule is made.
pub(super) fn deadline(
    spec: &WriteSpec,
    in_doubt: InDoubt,
    attempts: u32,
    last: Option<Fault>,
) -> Failure {
    let deadline = Failure::Deadline { attempts, last };
    if in_doubt == InDoubt::Maybe && !spec.retry_is_safe() {
        Failure::OutcomeUnknown {
            last: deadline.into(),
        }
    } else {
        deadline
    }
}

/// An answer to a write that may come after the change was stored.
pub(super) fn is_ambiguous(answer: &Answer) -> bool {
    answer.code == 504 || answer.reason() == "Timeout"
}

/// Where a request's loop stands when an attempt ended retryably.
pub(super) struct Progress<'a> {
    pub policy: &'a RetryPolicy,
    pub deadline: AnswerBy,
    /// AttemptLog made so far, the one that just ended included.
    pub made: u32,
    /// Retries of internal errors made so far.
    pub internal_retries: u32,
}

/// Whether to go on after an attempt ended with `decision` (its failure `last`), and how
/// long to wait first: `Ok(wait)`, or the failure to end with. Faults (throttling,
/// unavailability, internal errors) draw on the shared retry budget through `withdraw`;
/// conflicts are contention, not amplification, and are bounded by the policy alone.
/// Never plans a wait that ends at or past the deadline.
pub(super) fn after(
    decision: &Decision,
    last: Failure,
    standing: &Progress<'_>,
    now: Instant,
    rng: &mut fastrand::Rng,
    withdraw: &mut dyn FnMut() -> bool,
) -> Result<Duration, Failure> {
    if !decision.is_retryable() {
        return Err(last);
    }
    if matches!(decision, Decision::Internal) && standing.internal_retries >= INTERNAL_ERROR_RETRIES
    {
        return Err(last);
    }
    if standing.made >= standing.policy.max_attempts {
        return Err(last);
    }
    let fault = matches!(
        decision,
        Decision::Throttled { .. } | Decision::Unavailable { .. } | Decision::Internal
    );
    if fault && !withdraw() {
        return Err(Failure::RetryBudget {
            last: Box::new(last),
        });
    }
    let wait = match decision {
        // The object appeared between our read and our create, or the remembered copy
        // was stale: read it at once.
        Decision::AlreadyExists | Decision::Stale => Duration::ZERO,
        _ => standing
            .policy
            .backoff
            .delay(standing.made, decision.retry_after(), rng),
    };
    if let Some(deadline) = standing.deadline.instant()
        && now + wait >= deadline
    {
        return Err(Failure::Deadline {
            attempts: standing.made,
            last: Some(last.into()),
        });
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safewrite_api::backoff::Backoff;

    const POLICY: RetryPolicy = RetryPolicy {
        max_attempts: 5,
        backoff: Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        },
    };

    fn conflict() -> Failure {
        Failure::Cancelled(crate::Cancel::CallerGone)
    }

    fn standing(made: u32, deadline: AnswerBy) -> Progress<'static> {
        Progress {
            policy: &POLICY,
            deadline,
            made,
            internal_retries: 0,
        }
    }

    fn decide(decision: Decision, standing: &Progress<'_>) -> Result<Duration, Failure> {
        let mut rng = fastrand::Rng::with_seed(3);
        after(
            &decision,
            conflict(),
            standing,
            Instant::now(),
            &mut rng,
            &mut || true,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_waits_within_the_backoff_ceiling() {
        let wait = decide(Decision::Conflict, &standing(1, AnswerBy::NONE)).unwrap();
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        let wait = decide(Decision::Conflict, &standing(4, AnswerBy::NONE)).unwrap();
        assert!(wait <= Duration::from_millis(800), "{wait:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_run_out_at_the_policy() {
        let stop = decide(Decision::Conflict, &standing(5, AnswerBy::NONE)).unwrap_err();
        assert!(matches!(stop, Failure::Cancelled(_)), "the last failure");
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_answer_is_not_retried() {
        assert!(decide(Decision::NotFound, &standing(1, AnswerBy::NONE)).is_err());
        assert!(decide(Decision::Unexpected, &standing(1, AnswerBy::NONE)).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn no_wait_reaches_the_deadline() {
        let deadline = Instant::now() + Duration::from_millis(5);
        let throttled = Decision::Throttled {
            retry_after: Some(Duration::from_secs(2)),
        };
        let stop = decide(throttled, &standing(1, AnswerBy::at(Some(deadline)))).unwrap_err();
        assert!(
            matches!(stop, Failure::Deadline { attempts: 1, .. }),
            "{stop:?}"
        );
        // Time passing brings the deadline closer: the same plan later is refused.
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(
            decide(
                Decision::Conflict,
                &standing(1, AnswerBy::at(Some(deadline)))
            )
            .is_ok()
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        let mut rng = fastrand::Rng::with_seed(3);
        let late = after(
            &Decision::Conflict,
            conflict(),
            &standing(1, AnswerBy::at(Some(deadline))),
            Instant::now(),
            &mut rng,
            &mut || true,
        );
        assert!(matches!(late, Err(Failure::Deadline { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_hint_is_a_floor() {
        let throttled = Decision::Throttled {
            retry_after: Some(Duration::from_secs(2)),
        };
        let wait = decide(throttled, &standing(1, AnswerBy::NONE)).unwrap();
        assert!(wait >= Duration::from_secs(1), "{wait:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn faults_draw_on_the_budget_and_conflicts_do_not() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut asked = 0;
        let mut empty = || {
            asked += 1;
            false
        };
        let unavailable = Decision::Unavailable { retry_after: None };
        let stop = after(
            &unavailable,
            conflict(),
            &standing(1, AnswerBy::NONE),
            Instant::now(),
            &mut rng,
            &mut empty,
        );
        assert!(matches!(stop, Err(Failure::RetryBudget { .. })));
        let go_on = after(
            &Decision::Conflict,
            conflict(),
            &standing(1, AnswerBy::NONE),
            Instant::now(),
            &mut rng,
            &mut empty,
        );
        assert!(go_on.is_ok());
        assert_eq!(asked, 1, "only the fault asked the budget");
    }

    #[tokio::test(start_paused = true)]
    async fn internal_errors_are_retried_a_few_times_only() {
        let mut s = standing(1, AnswerBy::NONE);
        assert!(decide(Decision::Internal, &s).is_ok());
        s.internal_retries = INTERNAL_ERROR_RETRIES;
        assert!(decide(Decision::Internal, &s).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_race_to_create_reads_again_at_once() {
        let wait = decide(Decision::AlreadyExists, &standing(1, AnswerBy::NONE)).unwrap();
        assert_eq!(wait, Duration::ZERO);
    }
}
