//! The API-server client stack: every request safewrite sends to the API server (reads,
//! writes, discovery, readiness probes) goes through one tower stack, in this order:
//!
//! ```text
//! ApiClient       (handle.rs)    called on the caller's task, no buffer task between
//!   -> trace         (observe.rs)   one client span per request, the request metrics
//!   -> rate limit    (ratelimit.rs) a FIFO of reserved slots; refuses a wait past the deadline
//!                                   (for a write, past the time its answer needs: answer_time.rs)
//!   -> breaker       (breaker.rs)   fails fast while open; accounts every admitted request once
//!   -> timeout       (timeout.rs)   bounds the exchange after the request left the layers above;
//!                                   sends no write too late for its answer
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
//! [`RequestTimeout`], and [`Readiness`] for the readiness probe and [`LeaseTraffic`] for a
//! Lease campaign's requests (both bypass the rate limit and the breaker, see
//! [`readiness`] and `docs/client-stack.md`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod answer;
pub mod answer_time;
pub mod apiserver;
pub mod breaker;
pub mod connect;
mod context;
pub mod discovery;
mod error;
pub mod fault;
mod handle;
pub mod metrics;
pub mod observe;
pub mod ratelimit;
pub mod readiness;
mod stack;
pub mod timeout;
pub mod transport;

pub use answer::{Answer, CircuitOpen, RequestError, WouldExceedDeadline};
pub use connect::connect;
pub use context::{AwaitsVersion, Deadline, LeaseTraffic, Readiness, RequestTimeout};
pub use error::ConnectError;
pub use handle::ApiClient;
pub use metrics::ClientMetrics;
pub use stack::{StackConfig, build, over};
