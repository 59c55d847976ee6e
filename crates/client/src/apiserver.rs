//! Raw requests to the API server through the client stack, keeping what classification
//! needs: the HTTP code, the Status body and the `Retry-After` header. Typed helpers
//! would drop the header and blur reasons, so the engine speaks HTTP through the stack
//! directly.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use safewrite_api::deadline::AnswerBy;

pub use super::answer::{Answer, RequestError, parse_retry_after};
use super::context::{Deadline, RequestTimeout};
use super::handle::ApiClient;

/// Sends `request` through the stack. `timeout` bounds it below the rate limit and the
/// breaker (the stack's default when `None`); `deadline` (the RPC's) bounds the whole
/// request, limiter wait included. Extensions already on the request (e.g.
/// [`super::context::Readiness`]) ride along.
///
/// # Errors
/// A [`RequestError`] when no whole answer came back; any answer, whatever its code, is
/// an `Ok`.
pub async fn send(
    client: &ApiClient,
    mut request: http::Request<Vec<u8>>,
    timeout: Option<Duration>,
    deadline: AnswerBy,
) -> Result<Answer, RequestError> {
    if let Some(deadline) = deadline.instant() {
        request.extensions_mut().insert(Deadline(deadline));
    }
    if let Some(timeout) = timeout {
        request.extensions_mut().insert(RequestTimeout(timeout));
    }
    let response = client
        .exchange(request.map(kube::client::Body::from))
        .await
        .map_err(RequestError::from_boxed)?;
    let code = response.status().as_u16();
    let (parts, body) = response.into_parts();
    // The stack has read the whole body already (under the timeout); this only moves it.
    let body = body
        .collect()
        .await
        .map_err(|e| RequestError::Transport(Arc::new(e)))?
        .to_bytes();
    Ok(Answer::new(code, &parts.headers, body))
}
