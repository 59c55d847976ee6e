//! The state one request threads through its loop: the record of every attempt, the
//! retries of internal errors made, its random source, deadline and policy.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{Span, debug};

use safewrite_api::deadline::AnswerBy;

use super::decide::{self, Progress};
use super::error::{Failure, WriteError};
use super::result::{AttemptRecord, Done, Written};
use super::spec::RetryPolicy;
use crate::classify::Decision;

/// One request's log of its attempts: their records, and the policy and deadline that
/// bound how many more it may make.
pub(crate) struct AttemptLog {
    pub records: Vec<AttemptRecord>,
    internal_retries: u32,
    rng: fastrand::Rng,
    pub deadline: AnswerBy,
    policy: RetryPolicy,
    /// The next attempt reads the object live rather than from memory: the remembered
    /// copy has just turned out stale, and the live copy is what to decide on.
    pub read_live: bool,
}

impl AttemptLog {
    pub fn new(policy: RetryPolicy, deadline: AnswerBy) -> Self {
        AttemptLog {
            records: Vec::new(),
            internal_retries: 0,
            rng: fastrand::Rng::new(),
            deadline,
            policy,
            read_live: false,
        }
    }

    /// The number of attempts begun.
    pub fn made(&self) -> u32 {
        self.records.len() as u32
    }

    pub fn current(&mut self) -> &mut AttemptRecord {
        self.records.last_mut().expect("an attempt is open")
    }

    /// Opens the next attempt; its number.
    pub fn begin(&mut self) -> u32 {
        let number = self.made() + 1;
        self.records.push(AttemptRecord {
            number,
            ..Default::default()
        });
        number
    }

    /// DEADLINE_EXCEEDED when the deadline has passed before the first attempt (the
    /// caller left less time than the answer margin): answered at once, without waiting
    /// for anything, so that it comes before the gRPC server's own timeout (a bare
    /// CANCELLED "Timeout expired").
    pub fn late_from_the_start(&self) -> Option<Failure> {
        let deadline = self.deadline.instant()?;
        (self.records.is_empty() && Instant::now() >= deadline).then_some(Failure::Deadline {
            attempts: 0,
            last: None,
        })
    }

    /// The failed write.
    pub fn fail(self, failure: Failure) -> WriteError {
        WriteError {
            failure,
            attempts: self.records,
        }
    }

    /// The finished write.
    pub fn finish(self, done: Done) -> Written {
        Written::new(done, self.records)
    }

    /// Plans the wait after a retryable outcome ([`decide::after`]), records it in the
    /// attempt's record and span, and ends the span (its duration is the attempt's own).
    /// `withdraw` asks the shared retry budget, for faults.
    pub fn plan(
        &mut self,
        decision: &Decision,
        last: Failure,
        span: &Span,
        withdraw: &mut dyn FnMut() -> bool,
    ) -> Result<Duration, Failure> {
        let standing = Progress {
            policy: &self.policy,
            deadline: self.deadline,
            made: self.made(),
            internal_retries: self.internal_retries,
        };
        let wait = decide::after(
            decision,
            last,
            &standing,
            Instant::now(),
            &mut self.rng,
            withdraw,
        )?;
        if matches!(decision, Decision::Internal) {
            self.internal_retries += 1;
        }
        self.current().backoff = Some(wait);
        let backoff_ms = wait.as_millis() as u64;
        span.record("safewrite.backoff_ms", backoff_ms as i64);
        debug!(parent: span, attempt = self.made(), backoff_ms, ?decision, "backing off");
        Ok(wait)
    }
}
