//! The API-server client stack: every request safewrite sends to the API server (reads,
//! writes, discovery, readiness probes) goes through one tower stack, in this order:
//!
//! ```text
//! kube::Client
//!   -> trace         (observe.rs)   one client span per request, the request metrics
//!   -> rate limit    (ratelimit.rs) a FIFO of reserved slots; refuses a wait past the deadline
//!   -> breaker       (breaker.rs)   fails fast while open; accounts every admitted request once
//!   -> timeout       (timeout.rs)   bounds the exchange after the request left the layers above
//!   -> HTTP          (transport.rs) HTTP/2 over one TLS connection (or a capped HTTP/1.1 pool)
//! ```
//!
//! Whether an outcome is a fault of the API server (or of the path to it) is decided in
//! one place, [`fault::is_fault`]; the breaker, the metrics and the engine's retry
//! decision all ask it. Every error the stack returns is a [`RequestError`], so a caller
//! knows for each failure whether the request may have reached the API server
//! ([`RequestError::maybe_sent`]); a request that never left the process (limiter,
//! breaker, connect failure) never counts as "maybe sent".
//!
//! Requests carry their context in extensions: the RPC's [`Deadline`], a per-request
//! [`RequestTimeout`], and [`Readiness`] for the readiness probe (which bypasses the rate
//! limit and the breaker, see [`readiness`]).

pub mod answer;
pub mod apiserver;
pub mod breaker;
pub mod connect;
mod context;
pub mod discovery;
mod error;
pub mod fault;
pub mod observe;
pub mod ratelimit;
pub mod readiness;
mod stack;
pub mod timeout;
pub mod transport;

use std::time::Duration;

use tokio::time::Instant;

pub use answer::{Answer, CircuitOpen, RequestError, WouldExceedDeadline};
pub use connect::connect;
pub use context::{Deadline, Readiness, RequestTimeout};
pub use error::ConnectError;
pub use stack::{StackConfig, build, over};

/// The deadline the engine works to, given the caller's: a little earlier (a tenth of
/// the time left, at least 1 ms and at most 50 ms), so that the sidecar's own
/// DEADLINE_EXCEEDED, with its attempt records, reaches the caller before the caller's
/// deadline passes and its gRPC library answers with a bare one, and before the gRPC
/// server's own timeout does. Less than 1 ms left is no time at all (the timers tick in
/// milliseconds): the engine's deadline is then now.
pub fn answer_by(deadline: Option<Instant>) -> Option<Instant> {
    let deadline = deadline?;
    let left = deadline.saturating_duration_since(Instant::now());
    Some(deadline - (left / 10).clamp(MIN_ANSWER_MARGIN.min(left), ANSWER_MARGIN))
}

/// The most time kept back from the caller's deadline by [`answer_by`].
pub const ANSWER_MARGIN: Duration = Duration::from_millis(50);

/// The least time kept back by [`answer_by`]: one tick of the timers.
pub const MIN_ANSWER_MARGIN: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_engine_answers_before_the_callers_deadline() {
        let now = Instant::now();
        let at = |ms| Some(now + Duration::from_millis(ms));
        // 10% of a short deadline, 50 ms of a long one.
        assert_eq!(answer_by(at(100)), at(90));
        assert_eq!(answer_by(at(500)), at(450));
        assert_eq!(answer_by(at(10_000)), at(9_950));
        assert_eq!(answer_by(None), None);
        // At least a tick of a very short one; all of one shorter than a tick.
        assert_eq!(answer_by(at(5)), at(4));
        let soon = Some(now + Duration::from_micros(500));
        assert_eq!(answer_by(soon), Some(now));
        // A deadline already past stays where it is.
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(answer_by(at(100)), at(100));
    }
}
