//! What the client stack hands back for one request: the API server's [`Answer`], or a
//! [`RequestError`] saying why there is none and whether the request may have reached
//! the API server, with the refusals of the layers that wrap into it ([`CircuitOpen`],
//! [`WouldExceedDeadline`]). A leaf of `client/`: the layers, the fault rule and the
//! request helpers all read it, and it reads none of them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kube::core::Status;
use serde_json::Value;

/// The API server's answer to one request.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status code.
    pub code: u16,
    /// `Retry-After`, when present and in seconds.
    pub retry_after: Option<Duration>,
    /// The raw body.
    pub body: Bytes,
}

/// Parses a `Retry-After` header given in seconds (the HTTP-date form is not used by the
/// API server and is ignored).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

// === impl Answer ===

impl Answer {
    /// An answer from its HTTP code, headers and whole body.
    pub fn new(code: u16, headers: &http::HeaderMap, body: Bytes) -> Self {
        let retry_after = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        Self {
            code,
            retry_after,
            body,
        }
    }

    /// The Status object of a failed answer, if the body is one.
    pub fn status(&self) -> Option<Status> {
        if self.code < 300 {
            return None;
        }
        serde_json::from_slice::<Status>(&self.body).ok()
    }

    /// The body as a JSON object (for successful answers).
    pub fn object(&self) -> Result<Value, RequestError> {
        serde_json::from_slice(&self.body).map_err(|e| RequestError::Decode(Arc::new(e)))
    }

    /// The Kubernetes reason, or empty.
    pub fn reason(&self) -> String {
        self.status().map(|s| s.reason).unwrap_or_default()
    }

    /// The Status message, or the body's first bytes.
    pub fn message(&self) -> String {
        match self.status() {
            Some(s) if !s.message.is_empty() => s.message,
            _ => String::from_utf8_lossy(&self.body[..self.body.len().min(200)]).into_owned(),
        }
    }
}

/// The error below a [`RequestError`] (hyper's, rustls', an I/O error...), kept as the
/// typed value it is and shared, so that the request error stays `Clone` (the breaker
/// and the loop each keep it).
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A request that got no usable answer. Every error of the client stack is one of these;
/// each says whether the request may have reached the API server.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RequestError {
    /// The request never left the process: no connection could be made (refused, TLS
    /// handshake failed, credentials could not be refreshed) or it failed before it was
    /// handed to a connection.
    #[error("failed to connect to the API server")]
    Connect(#[source] Cause),
    /// The connection failed after the request was handed to it (reset, closed before
    /// the answer, or the answer's body cut short): it may have been received.
    #[error("connection to the API server failed")]
    Transport(#[source] Cause),
    /// No whole answer within the time allowed (the per-request bound or the RPC's
    /// deadline, whichever came first). `sent` tells whether the request had been handed
    /// to a connection by then.
    #[error("{}", timeout_message(*after, *sent))]
    Timeout {
        /// The time allowed.
        after: Duration,
        /// Whether the request may have reached the API server.
        sent: bool,
    },
    /// A write with less time left than the API server's answers to writes have lately
    /// taken (`super::answer_time`): it was not sent, so that its outcome is not left
    /// in doubt.
    #[error(
        "not sent: {left:?} was left before the deadline, and the API server's answers to writes lately need {needed:?}"
    )]
    TooLate {
        /// The time that was left.
        left: Duration,
        /// The time an answer lately needs.
        needed: Duration,
    },
    /// The local rate limit would have delayed the request past the RPC's deadline;
    /// nothing was sent.
    #[error("{0}")]
    RateLimited(WouldExceedDeadline),
    /// The circuit breaker is open; nothing was sent.
    #[error("{0}")]
    CircuitOpen(CircuitOpen),
    /// A 2xx answer whose body is not the JSON object expected.
    #[error("failed to decode the API server's answer")]
    Decode(#[source] Arc<serde_json::Error>),
}

fn timeout_message(after: Duration, sent: bool) -> String {
    if sent {
        format!("the API server did not answer within {after:?}")
    } else {
        format!(
            "no connection to the API server took the request within {after:?}; nothing was sent"
        )
    }
}

// === impl RequestError ===

impl RequestError {
    /// True when the request may have reached the API server although no answer came
    /// back: for a write, whether it was applied is unknown. False for every request
    /// that never left the process.
    pub fn maybe_sent(&self) -> bool {
        match self {
            RequestError::Transport(_) => true,
            RequestError::Timeout { sent, .. } => *sent,
            RequestError::Connect(_)
            | RequestError::TooLate { .. }
            | RequestError::RateLimited(_)
            | RequestError::CircuitOpen(_)
            | RequestError::Decode(_) => false,
        }
    }

    /// A short name of the error, for spans and metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            RequestError::Connect(_) => "connect",
            RequestError::Transport(_) => "transport",
            RequestError::Timeout { .. } => "timeout",
            RequestError::TooLate { .. } => "too_late",
            RequestError::RateLimited(_) => "rate_limited",
            RequestError::CircuitOpen(_) => "circuit_open",
            RequestError::Decode(_) => "decode",
        }
    }

    /// The `RequestError` in a boxed error of the stack, or a connect failure caused by
    /// `error` for an error of a layer below the timeout's that fails before sending
    /// (credentials).
    pub fn from_boxed(error: tower::BoxError) -> RequestError {
        match RequestError::find(error.as_ref()) {
            Some(found) => found.clone(),
            None => RequestError::Connect(Arc::from(error)),
        }
    }

    /// The `RequestError` in an error of the stack, if it holds one.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a RequestError> {
        let mut source = Some(error);
        while let Some(err) = source {
            if let Some(found) = err.downcast_ref::<RequestError>() {
                return Some(found);
            }
            source = err.source();
        }
        None
    }

    /// The [`kind`](Self::kind) of an error of the stack: a connect failure's for one
    /// that holds no `RequestError` (see [`from_boxed`](Self::from_boxed)).
    pub fn kind_of(error: &(dyn std::error::Error + 'static)) -> &'static str {
        RequestError::find(error).map_or("connect", RequestError::kind)
    }
}

/// The breaker is open (or its one probe is under way): nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the circuit breaker to the API server is open after repeated faults; next probe in {retry_after:?}"
)]
pub struct CircuitOpen {
    /// When the next probe may go through.
    pub retry_after: Duration,
}

/// The limiter would delay the request past its RPC's deadline; nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the sidecar's rate limit to the API server would delay this request by {wait:?}, too late for an answer before the caller's deadline"
)]
pub struct WouldExceedDeadline {
    /// How long the request would have had to wait.
    pub wait: Duration,
}
