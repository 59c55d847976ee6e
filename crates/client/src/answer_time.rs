//! How long the API server takes to answer a write, learnt from the writes it answered:
//! the smoothed time and its mean deviation, as TCP estimates a round trip (RFC 6298,
//! gains 1/8 and 1/4). A write is worth sending only while the time left before its
//! deadline covers [`AnswerTime::needed`], the smoothed time plus four deviations: one
//! sent with less is likely to lose its answer, and a write whose answer is lost without
//! an idempotency key ends WRITE_OUTCOME_UNKNOWN, where a write not sent ends with a
//! definite answer. The timeout layer measures and refuses (`RequestError::TooLate`),
//! the rate limit refuses a slot that would leave too little (nothing waits for a send
//! that would not be made).
//!
//! Only writes are measured and held to it: a read sent late costs nothing but itself,
//! and a read may wait on the server (a "not older than" read) for reasons that say
//! nothing of how fast a write is answered.
//!
//! The estimate fades: what it asks halves with every [`HALF_LIFE`] since the last write
//! was answered. Refusing writes takes away the answers that would bring it down, so
//! without fading one slow answer (a pause of this process counts in it: SIGSTOP, a
//! throttled CPU) would hold back every write with less time than it forever; with it,
//! the next write is sent within a few half-lives and its answer sets the estimate again.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long after the last answered write the estimate asks half as much.
pub const HALF_LIFE: Duration = Duration::from_secs(2);

/// The estimate, shared by the layers of one stack. Before the first write is answered
/// nothing is known and nothing is refused.
#[derive(Debug, Default)]
pub struct AnswerTime {
    estimate: Mutex<Option<AnswerEstimate>>,
}

#[derive(Debug, Clone, Copy)]
struct AnswerEstimate {
    smoothed: Duration,
    deviation: Duration,
    /// When the last answer was taken in.
    at: Instant,
}

impl AnswerTime {
    /// Takes in the time one answered write took.
    pub fn record(&self, took: Duration) {
        let mut estimate = self.estimate.lock().unwrap_or_else(|e| e.into_inner());
        let at = Instant::now();
        *estimate = Some(match *estimate {
            None => AnswerEstimate {
                smoothed: took,
                deviation: took / 2,
                at,
            },
            Some(AnswerEstimate {
                smoothed,
                deviation,
                ..
            }) => {
                let gap = smoothed.abs_diff(took);
                AnswerEstimate {
                    smoothed: smoothed - smoothed / 8 + took / 8,
                    deviation: deviation - deviation / 4 + gap / 4,
                    at,
                }
            }
        });
    }

    /// The least time a write should have left when it is sent: zero until a write has
    /// been answered; faded by the time since the last answer (see [`HALF_LIFE`]).
    pub fn needed(&self) -> Duration {
        let estimate = *self.estimate.lock().unwrap_or_else(|e| e.into_inner());
        estimate.map_or(Duration::ZERO, |e| {
            let halvings = e.at.elapsed().as_secs_f64() / HALF_LIFE.as_secs_f64();
            (e.smoothed + 4 * e.deviation).mul_f64(0.5f64.powf(halvings))
        })
    }
}

/// Whether a request of `method` is a write, held to [`AnswerTime::needed`].
pub fn is_write(method: &http::Method) -> bool {
    !matches!(*method, http::Method::GET | http::Method::HEAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_needed_before_the_first_answer() {
        assert_eq!(AnswerTime::default().needed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_answer_needs_three_times_its_time_and_steady_answers_need_their_own() {
        let time = AnswerTime::default();
        time.record(10 * MS);
        assert_eq!(time.needed(), 30 * MS);
        for _ in 0..60 {
            time.record(10 * MS);
        }
        let needed = time.needed();
        assert!(needed >= 10 * MS && needed < 11 * MS, "{needed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn one_slow_answer_raises_the_need_and_fast_ones_bring_it_back() {
        let time = AnswerTime::default();
        for _ in 0..60 {
            time.record(5 * MS);
        }
        time.record(500 * MS);
        let raised = time.needed();
        assert!(raised > 500 * MS, "{raised:?}");
        for _ in 0..30 {
            time.record(5 * MS);
        }
        let back = time.needed();
        assert!(back < 20 * MS, "{back:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_fades_without_answers_so_writes_are_sent_again() {
        let time = AnswerTime::default();
        for _ in 0..60 {
            time.record(5 * MS);
        }
        // This process stopped for 4 s with a write in flight: its answer took 4 s.
        time.record(4000 * MS);
        let raised = time.needed();
        assert!(raised > 4000 * MS, "{raised:?}");
        // No write is sent with less time left, so no answer comes to bring it down:
        // it fades by itself, to half every HALF_LIFE.
        tokio::time::advance(HALF_LIFE).await;
        let faded = time.needed();
        assert!(
            faded <= raised / 2 + MS && faded + MS >= raised / 2,
            "{faded:?}"
        );
        tokio::time::advance(5 * HALF_LIFE).await;
        assert!(time.needed() < raised / 32 + MS, "{:?}", time.needed());
        // The next answer takes over again.
        time.record(5 * MS);
        assert!(
            time.needed() > 100 * MS,
            "one fast answer does not erase the slow one"
        );
    }

    #[test]
    fn only_writes_are_held_to_it() {
        assert!(!is_write(&http::Method::GET));
        assert!(!is_write(&http::Method::HEAD));
        for method in [
            http::Method::POST,
            http::Method::PUT,
            http::Method::PATCH,
            http::Method::DELETE,
        ] {
            assert!(is_write(&method), "{method}");
        }
    }
}
