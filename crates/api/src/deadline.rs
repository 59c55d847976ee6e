//! The caller's deadline, one type from the edge to the requests: parsed once from the
//! call's `grpc-timeout` when the call arrives (or set by the CLI), carried in the
//! request's extensions to the handler, and handed down to the engine as it is. It
//! also owns the answer margin, taken once when the call arrives: the engine and every
//! request it sends work to [`AnswerBy`], a little before the caller's deadline, so that the sidecar's own DEADLINE_EXCEEDED,
//! with its attempt records, reaches the caller before the caller's gRPC library
//! answers with a bare one, and before the gRPC server's own timeout does.
//!
//! It stands on the ground floor so that the service, the engine and the CLI can all
//! carry it; only the service's edge and the CLI make one from a timeout.

use std::time::Duration;

use tokio::time::Instant;

/// The most time kept back from the caller's deadline by [`CallDeadline::answer_by`].
pub const ANSWER_MARGIN: Duration = Duration::from_millis(50);

/// The least time kept back by [`CallDeadline::answer_by`]: one tick of the timers. A
/// call with less time than this left is answered DEADLINE_EXCEEDED at the edge.
pub const MIN_ANSWER_MARGIN: Duration = Duration::from_millis(1);

/// When the caller stops waiting for its answer, and the moment the sidecar answers by;
/// `NONE` when it waits as long as it takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallDeadline {
    caller: Option<Instant>,
    answer_by: AnswerBy,
}

impl CallDeadline {
    /// No deadline.
    pub const NONE: CallDeadline = CallDeadline {
        caller: None,
        answer_by: AnswerBy::NONE,
    };

    /// A deadline at `at` (none without one); the answer margin is taken now: a tenth of
    /// the time left, at least [`MIN_ANSWER_MARGIN`] and at most [`ANSWER_MARGIN`]. Less
    /// than 1 ms left is no time at all (the timers tick in milliseconds): the sidecar
    /// then answers by now.
    pub fn at(at: Option<Instant>) -> Self {
        let answer_by = at.map(|deadline| {
            let left = deadline.saturating_duration_since(Instant::now());
            deadline - (left / 10).clamp(MIN_ANSWER_MARGIN.min(left), ANSWER_MARGIN)
        });
        CallDeadline {
            caller: at,
            answer_by: AnswerBy(answer_by),
        }
    }

    /// The deadline of a call arriving now with `timeout` (none without one).
    pub fn after(timeout: Option<Duration>) -> Self {
        Self::at(timeout.map(|t| Instant::now() + t))
    }

    /// The deadline the edge put in `extensions` (none when no edge did).
    pub fn of(extensions: &http::Extensions) -> Self {
        extensions
            .get::<CallDeadline>()
            .copied()
            .unwrap_or_default()
    }

    /// When the caller stops waiting.
    pub fn caller(self) -> Option<Instant> {
        self.caller
    }

    /// The moment the sidecar answers by, a little before the caller's deadline (taken
    /// when the deadline was made, see [`CallDeadline::at`]).
    pub fn answer_by(self) -> AnswerBy {
        self.answer_by
    }
}

/// The moment the engine, and every request it sends, works to: the caller's deadline
/// less the answer margin ([`CallDeadline::answer_by`]), or none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnswerBy(Option<Instant>);

impl AnswerBy {
    /// No deadline: as long as it takes.
    pub const NONE: AnswerBy = AnswerBy(None);

    /// The moment `at` (none without one), for work that sets its own bound (a Lease
    /// campaign's requests, tests).
    pub fn at(at: Option<Instant>) -> Self {
        AnswerBy(at)
    }

    /// The moment, if there is one.
    pub fn instant(self) -> Option<Instant> {
        self.0
    }

    /// Whether the moment has come.
    pub fn passed(self) -> bool {
        self.0.is_some_and(|at| Instant::now() >= at)
    }

    /// The latest of `all` (none when one has none, or there are none): what work done
    /// for all of them may take.
    pub fn latest(all: impl IntoIterator<Item = AnswerBy>) -> AnswerBy {
        let mut latest = None;
        for AnswerBy(at) in all {
            match (latest, at) {
                (_, None) => return AnswerBy::NONE,
                (None, Some(at)) => latest = Some(at),
                (Some(l), Some(at)) => latest = Some(at.max(l)),
            }
        }
        AnswerBy(latest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_engine_answers_before_the_callers_deadline() {
        let now = Instant::now();
        let at = |ms| CallDeadline::at(Some(now + Duration::from_millis(ms)));
        let by = |ms| AnswerBy::at(Some(now + Duration::from_millis(ms)));
        // 10% of a short deadline, 50 ms of a long one.
        assert_eq!(at(100).answer_by(), by(90));
        assert_eq!(at(500).answer_by(), by(450));
        assert_eq!(at(10_000).answer_by(), by(9_950));
        assert_eq!(CallDeadline::NONE.answer_by(), AnswerBy::NONE);
        // At least a tick of a very short one; all of one shorter than a tick.
        assert_eq!(at(5).answer_by(), by(4));
        let soon = CallDeadline::at(Some(now + Duration::from_micros(500)));
        assert_eq!(soon.answer_by(), AnswerBy::at(Some(now)));
        // A deadline already past stays where it is.
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(at(100).answer_by(), by(100));
    }
}
