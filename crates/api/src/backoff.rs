//! Backoff between attempts: exponential with full jitter, capped, with a server's
//! Retry-After hint as a floor. Pure apart from the random source passed in.

use std::time::Duration;

/// The shape of the waits between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the wait before the second attempt.
    pub initial: Duration,
    /// No wait is longer than this, server hints included (capped to `max_hint`).
    pub max: Duration,
}

/// The longest server hint honoured; a larger Retry-After is capped to it.
pub const MAX_HINT: Duration = Duration::from_secs(30);

impl Backoff {
    /// The wait after the `retry`-th failed attempt (1 = after the first attempt): a
    /// uniform draw from `[0, min(max, initial * 2^(retry-1))]` ("full jitter"), raised
    /// to the server's hint when there is one.
    pub fn delay(&self, retry: u32, hint: Option<Duration>, rng: &mut fastrand::Rng) -> Duration {
        let exp = retry.saturating_sub(1).min(30);
        let ceiling = self.initial.saturating_mul(1u32 << exp).min(self.max);
        let jittered = ceiling.mul_f64(rng.f64());
        match hint {
            Some(hint) => jittered.max(hint.min(MAX_HINT)),
            None => jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(500),
    };

    #[test]
    fn ceiling_doubles_then_caps() {
        let mut rng = fastrand::Rng::with_seed(7);
        for (retry, ceiling_ms) in [(1, 10), (2, 20), (3, 40), (6, 320), (7, 500), (40, 500)] {
            for _ in 0..200 {
                let d = B.delay(retry, None, &mut rng);
                assert!(
                    d <= Duration::from_millis(ceiling_ms),
                    "retry {retry}: {d:?}"
                );
            }
        }
    }

    #[test]
    fn jitter_spreads_the_waits() {
        let mut rng = fastrand::Rng::with_seed(1);
        let waits: Vec<Duration> = (0..100).map(|_| B.delay(5, None, &mut rng)).collect();
        let min = waits.iter().min().unwrap();
        let max = waits.iter().max().unwrap();
        assert!(*max - *min > Duration::from_millis(80), "{min:?}..{max:?}");
    }

    #[test]
    fn a_server_hint_is_a_floor_capped_sensibly() {
        let mut rng = fastrand::Rng::with_seed(3);
        let hint = Some(Duration::from_secs(2));
        for _ in 0..50 {
            assert!(B.delay(1, hint, &mut rng) >= Duration::from_secs(2));
        }
        let huge = Some(Duration::from_secs(3600));
        assert_eq!(B.delay(1, huge, &mut rng), MAX_HINT);
    }
}
