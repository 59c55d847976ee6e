//! The one place the loop waits before it goes again. After an attempt ended retryably
//! each waiting write plans its own wait from the decision, its policy and its deadline
//! ([`AttemptLog::plan`], which asks the shared retry budget for faults, once for all of
//! them); those that may not go on end with their failure, the rest sleep the shortest
//! wait planned. A batch's members and a target's resolution come through here alike.

use std::time::Duration;

use tower::retry::budget::{Budget as _, TpsBudget};
use tracing::Span;

use crate::attempt_log::AttemptLog;
use crate::classify::Decision;
use crate::error::Failure;

/// What waits for the next attempt: a batch's member, or a request still resolving its
/// target.
pub(crate) trait Waiting {
    fn attempts(&mut self) -> &mut AttemptLog;
}

impl Waiting for AttemptLog {
    fn attempts(&mut self) -> &mut AttemptLog {
        self
    }
}

/// Those of `waiting` that go on after `decision` (the attempt failed with `failure`;
/// its span ends here, its duration the attempt's own), once the wait is over; and
/// those that end, each with its failure.
pub(crate) async fn back_off<W: Waiting>(
    budget: &TpsBudget,
    waiting: Vec<W>,
    decision: &Decision,
    failure: &Failure,
    span: Span,
) -> (Vec<W>, Vec<(W, Failure)>) {
    let mut asked = None;
    let mut withdraw = || *asked.get_or_insert_with(|| budget.withdraw());
    let mut wait: Option<Duration> = None;
    let (mut going_on, mut ended) = (Vec::with_capacity(waiting.len()), Vec::new());
    for mut one in waiting {
        match one
            .attempts()
            .plan(decision, failure.clone(), &span, &mut withdraw)
        {
            Ok(planned) => {
                wait = Some(wait.map_or(planned, |w| w.min(planned)));
                going_on.push(one);
            }
            Err(last) => ended.push((one, last)),
        }
    }
    drop(span);
    let wait = wait.unwrap_or_default();
    for one in &mut going_on {
        one.attempts().current().backoff = Some(wait);
    }
    if !going_on.is_empty() {
        tokio::time::sleep(wait).await;
    }
    (going_on, ended)
}
