//! Raw requests to the API server through the client stack, keeping what classification
//! needs: the HTTP code, the Status body and the `Retry-After` header. Typed helpers
//! would drop the header and blur reasons, so the engine speaks HTTP through the kube
//! client's service directly.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use kube::core::Status;
use serde_json::Value;
use tokio::time::Instant;

use super::breaker::CircuitOpen;
use super::ratelimit::WouldExceedDeadline;
use super::{Deadline, RequestTimeout};

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
        serde_json::from_slice(&self.body).map_err(|e| RequestError::Decode(e.to_string()))
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

/// A request that got no usable answer. Every error of the client stack is one of these;
/// each says whether the request may have reached the API server.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RequestError {
    /// The request never left the process: no connection could be made (refused, TLS
    /// handshake failed, credentials could not be refreshed) or it failed before it was
    /// handed to a connection.
    #[error("failed to connect to the API server: {0}; nothing was sent")]
    Connect(String),
    /// The connection failed after the request was handed to it (reset, closed before
    /// the answer, or the answer's body cut short): it may have been received.
    #[error("failed to reach the API server: {0}")]
    Transport(String),
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
    /// The local rate limit would have delayed the request past the RPC's deadline;
    /// nothing was sent.
    #[error("{0}")]
    RateLimited(WouldExceedDeadline),
    /// The circuit breaker is open; nothing was sent.
    #[error("{0}")]
    CircuitOpen(CircuitOpen),
    /// A 2xx answer whose body is not the JSON object expected.
    #[error("failed to decode the API server's answer: {0}")]
    Decode(String),
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

impl RequestError {
    /// True when the request may have reached the API server although no answer came
    /// back: for a write, whether it was applied is unknown. False for every request
    /// that never left the process.
    pub fn maybe_sent(&self) -> bool {
        match self {
            RequestError::Transport(_) => true,
            RequestError::Timeout { sent, .. } => *sent,
            RequestError::Connect(_)
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
            RequestError::RateLimited(_) => "rate_limited",
            RequestError::CircuitOpen(_) => "circuit_open",
            RequestError::Decode(_) => "decode",
        }
    }

    /// The `RequestError` in a boxed error of the stack, or a connect failure for an
    /// error from outside it (the kube client's buffer closed: nothing was sent).
    pub fn from_boxed(error: &(dyn std::error::Error + 'static)) -> RequestError {
        let mut source = Some(error);
        while let Some(err) = source {
            if let Some(found) = err.downcast_ref::<RequestError>() {
                return found.clone();
            }
            source = err.source();
        }
        RequestError::Connect(error.to_string())
    }
}

/// Sends `request` through the stack. `timeout` bounds it below the rate limit and the
/// breaker (the stack's default when `None`); `deadline` (the RPC's) bounds the whole
/// request, limiter wait included. Extensions already on the request (e.g.
/// [`super::Readiness`]) ride along.
///
/// # Errors
/// A [`RequestError`] when no whole answer came back; any answer, whatever its code, is
/// an `Ok`.
pub async fn send(
    client: &kube::Client,
    mut request: http::Request<Vec<u8>>,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
) -> Result<Answer, RequestError> {
    if let Some(deadline) = deadline {
        request.extensions_mut().insert(Deadline(deadline));
    }
    if let Some(timeout) = timeout {
        request.extensions_mut().insert(RequestTimeout(timeout));
    }
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .map_err(|error| match &error {
            kube::Error::Service(inner) => RequestError::from_boxed(inner.as_ref()),
            other => RequestError::from_boxed(other),
        })?;
    let code = response.status().as_u16();
    let (parts, body) = response.into_parts();
    // The stack has read the whole body already (under the timeout); this only moves it.
    let body = body
        .collect()
        .await
        .map_err(|e| RequestError::Transport(e.to_string()))?
        .to_bytes();
    Ok(Answer::new(code, &parts.headers, body))
}
