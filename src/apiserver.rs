//! Raw requests to the API server, keeping what classification needs: the HTTP code,
//! the Status body and the `Retry-After` header. Typed helpers would drop the header and
//! blur reasons, so the engine speaks HTTP through the kube client's service directly.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use kube::core::Status;
use serde_json::Value;

use crate::breaker::CircuitOpen;
use crate::classify::{self, Decision};
use crate::ratelimit::{Deadline, WouldExceedDeadline};

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

impl Answer {
    /// The Status object of a failed answer, if the body is one.
    pub fn status(&self) -> Option<Status> {
        if self.code < 300 {
            return None;
        }
        serde_json::from_slice::<Status>(&self.body).ok()
    }

    /// The decision for this answer.
    pub fn decision(&self) -> Decision {
        classify::classify(self.code, self.status().as_ref(), self.retry_after)
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

/// A request that got no usable answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RequestError {
    /// No connection could be made (refused, reset during the TLS handshake): the
    /// request was never sent.
    #[error("failed to connect to the API server: {0}")]
    Connect(String),
    /// The connection failed after the request may have been sent (reset, closed before
    /// the answer, or the answer's body cut short).
    #[error("failed to reach the API server: {0}")]
    Transport(String),
    /// No answer within the time allowed.
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
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

impl RequestError {
    /// True when the request may have reached the API server although no answer came
    /// back: for a write, whether it was applied is unknown.
    pub fn maybe_sent(&self) -> bool {
        matches!(self, RequestError::Transport(_) | RequestError::Timeout(_))
    }
}

/// Maps a transport failure: a failure to connect (anywhere in the error's chain) means
/// nothing was sent.
fn transport(error: &kube::Error) -> RequestError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(err) = source {
        if let Some(client) = err.downcast_ref::<hyper_util::client::legacy::Error>()
            && client.is_connect()
        {
            return RequestError::Connect(error.to_string());
        }
        source = err.source();
    }
    RequestError::Transport(error.to_string())
}

/// Sends `request`, waiting at most `timeout` for the whole answer; `deadline` (the
/// RPC's) rides along for the rate limiter.
pub async fn send(
    client: &kube::Client,
    mut request: http::Request<Vec<u8>>,
    timeout: Duration,
    deadline: Option<tokio::time::Instant>,
) -> Result<Answer, RequestError> {
    if let Some(deadline) = deadline {
        request.extensions_mut().insert(Deadline(deadline));
    }
    let exchange = async {
        let response = client
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(|e| match &e {
                kube::Error::Service(inner) => {
                    if let Some(limited) = inner.downcast_ref::<WouldExceedDeadline>() {
                        RequestError::RateLimited(*limited)
                    } else if let Some(open) = inner.downcast_ref::<CircuitOpen>() {
                        RequestError::CircuitOpen(*open)
                    } else {
                        transport(&e)
                    }
                }
                _ => transport(&e),
            })?;
        let code = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(classify::parse_retry_after);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| RequestError::Transport(e.to_string()))?
            .to_bytes();
        Ok(Answer {
            code,
            retry_after,
            body,
        })
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| RequestError::Timeout(timeout))?
}
