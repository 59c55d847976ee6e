//! The write loop, one for every write: a batch of members (one, for a write made
//! alone) makes one attempt ([`super::attempt`]), whose end gives every member its own
//! answer ([`super::ends`]); a retryable end plans each member's backoff
//! ([`super::retry`]) and goes again. Conflicts re-read and retry with jittered backoff,
//! bounded by the policy's attempts and by each member's deadline (never slept past);
//! answers no retry can fix end the member at once.

use opentelemetry::trace::TraceContextExt as _;
use tokio::time::Instant;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::attempt::attempt;
use super::ends::{Disposition, conclude};
use super::member::Member;
use super::resolve::Start;
use super::retry::{Waiting, back_off};
use crate::api::Api;
use crate::attempt_log::AttemptLog;
use crate::error::{Failure, WriteError};
use crate::result::Written;
use crate::spans::{attempt_span, record_failure};
use crate::spec::WriteSpec;

/// Where a batch's members come from between attempts, and where those sent back go.
pub(crate) trait BatchSource: Sync {
    /// Adds the members that arrived since the batch was taken.
    fn top_up(&self, members: &mut Vec<Member>);
    /// Takes back members that go after the others (a create, isolating an offender);
    /// those it cannot take go again at once.
    fn send_back(&self, members: Vec<Member>) -> Vec<Member>;
}

/// A write made alone: nobody joins it.
pub(crate) struct Unshared;

impl BatchSource for Unshared {
    fn top_up(&self, _: &mut Vec<Member>) {}

    fn send_back(&self, members: Vec<Member>) -> Vec<Member> {
        members
    }
}

/// Runs one batch until every member has its answer, has gone back to `company`, or
/// has left.
pub(crate) async fn run(api: &Api, mut members: Vec<Member>, company: &dyn BatchSource) {
    loop {
        // Those whose caller went away or whose deadline passed leave now: nothing is
        // written on their behalf after this point.
        let now = Instant::now();
        members.retain(|member| !member.gone());
        let (late, staying): (Vec<_>, Vec<_>) = members
            .into_iter()
            .partition(|member| member.attempts.deadline.instant().is_some_and(|d| now >= d));
        for member in late {
            let attempts = member.attempts.made();
            member.finish(Err(Failure::Deadline {
                attempts,
                last: None,
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
            Disposition::Answered => return,
            Disposition::SendBack(back) => {
                drop(span);
                members = company.send_back(back);
            }
            Disposition::Retry(decision, failure, carried) => {
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

impl Waiting for Member {
    fn attempts(&mut self) -> &mut AttemptLog {
        &mut self.attempts
    }
}

/// Writes one request on its own: a batch of one that nothing joins.
pub(crate) async fn write_unshared(
    api: &Api,
    spec: &WriteSpec,
    start: Start,
) -> Result<Written, WriteError> {
    let (member, answered) = Member::new(spec.clone(), None, start);
    run(api, vec![member], &Unshared).await;
    answered.await.unwrap_or_else(|_| {
        Err(WriteError {
            failure: Failure::Cancelled(crate::error::Cancel::Unanswered),
            attempts: Vec::new(),
        })
    })
}
