//! A bound on the answer bytes the sidecar holds while they leave
//! (`--max-sending-bytes`), the counterpart of `receive` for answers.
//!
//! An answer carries the object, and HTTP/2 takes a response's data whole into its
//! send buffer, where it waits for the caller's flow-control window: 64 callers of one
//! group-committed write on a 900 KB object would hold 64 answers of 900 KB at once,
//! each made from the batch's one write as soon as the write ended. Here an answer of
//! [`PIECE`] bytes or more first takes a share of one budget (as many bytes as the
//! object is long, at most the whole budget), is made only then, and leaves in pieces
//! of at most [`PIECE`] bytes, each handed to HTTP/2 once the caller's window has room;
//! the share is given back when the last piece has gone (or the caller has gone). A
//! share waits at most half the time left before the answer is due (a little before the
//! caller's deadline, [`safewrite_api::deadline::CallDeadline::answer_by`]), so that the answer
//! still has time to leave, and never longer than [`MAX_WAIT`]: a caller that stops
//! reading its answers delays the others by no more than that, and an answer that could
//! not get a share goes without one.
//!
//! Smaller answers take no share: they are bounded by `--max-in-flight` already.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::TryFutureExt as _;
use futures::future::MapOk;
use hyper::body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::body::Body;

use crate::metrics::Metrics;

/// The largest piece of an answer handed to HTTP/2 at once, and the smallest answer
/// that takes a share of the budget.
pub const PIECE: usize = 64 * 1024;

/// The longest an answer waits for its share.
pub const MAX_WAIT: Duration = Duration::from_secs(5);

/// The budget shared by every answer; see the module docs.
#[derive(Clone, Debug)]
pub struct SendingBudget {
    bytes: Arc<Semaphore>,
    limit: usize,
    metrics: Arc<Metrics>,
}

/// An answer's share of the [`SendingBudget`], carried in the response's extensions from the
/// handler to [`SendLayer`], which holds it until the answer has left.
#[derive(Clone, Debug)]
pub struct Share {
    _held: Arc<Held>,
}

/// The bytes a [`Share`] holds, counted in the metrics until they are given back.
#[derive(Debug)]
struct Held {
    _permit: OwnedSemaphorePermit,
    bytes: i64,
    metrics: Arc<Metrics>,
}

// === impl Held ===

impl Held {
    fn new(permit: OwnedSemaphorePermit, metrics: Arc<Metrics>) -> Held {
        let bytes = i64::try_from(permit.num_permits()).unwrap_or(i64::MAX);
        metrics.sending(bytes);
        Held {
            _permit: permit,
            bytes,
            metrics,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics.sending(-self.bytes);
    }
}

// === impl SendingBudget ===

impl SendingBudget {
    /// A budget of `limit` bytes, its use counted in `metrics`.
    pub fn new(limit: usize, metrics: Arc<Metrics>) -> SendingBudget {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        SendingBudget {
            bytes: Arc::new(Semaphore::new(limit)),
            limit,
            metrics,
        }
    }

    /// Bytes of the budget not held now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// A share for an answer of about `len` bytes, once the budget has that much free
    /// (at most the whole budget): `None` for an answer under [`PIECE`] bytes, and for
    /// one that waited in vain for half the time left before `due`, or for [`MAX_WAIT`].
    pub async fn share(&self, len: usize, due: Option<Instant>) -> Option<Share> {
        if len < PIECE {
            return None;
        }
        let wanted = u32::try_from(len.min(self.limit)).unwrap_or(u32::MAX);
        let now = Instant::now();
        let wait = match due {
            Some(due) => MAX_WAIT.min(due.saturating_duration_since(now) / 2),
            None => MAX_WAIT,
        };
        let until = now + wait;
        let acquire = self.bytes.clone().acquire_many_owned(wanted);
        let share = match tokio::time::timeout_at(until, acquire).await {
            Ok(Ok(permit)) => Some(Share {
                _held: Arc::new(Held::new(permit, self.metrics.clone())),
            }),
            Ok(Err(_)) | Err(_) => None,
        };
        self.metrics.large_answer(share.is_some());
        share
    }
}

/// The response of `message`, carrying `share` to [`SendLayer`].
pub fn answer<T>(message: T, share: Option<Share>) -> tonic::Response<T> {
    let mut response = tonic::Response::new(message);
    if let Some(share) = share {
        response.extensions_mut().insert(share);
    }
    response
}

/// Sends every answer that holds a [`Share`] in pieces, holding the share until the
/// last piece has gone.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendLayer;

// === impl SendLayer ===

impl<S> tower::Layer<S> for SendLayer {
    type Service = InPieces<S>;

    fn layer(&self, inner: S) -> InPieces<S> {
        InPieces { inner }
    }
}

/// See [`SendLayer`].
#[derive(Clone, Debug)]
pub struct InPieces<S> {
    inner: S,
}

// === impl InPieces ===

impl<S, R> tower::Service<R> for InPieces<S>
where
    S: tower::Service<R, Response = http::Response<Body>>,
    S::Future: std::marker::Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = MapOk<S::Future, fn(http::Response<Body>) -> http::Response<Body>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.inner.call(request).map_ok(in_pieces)
    }
}

/// `response`, sent in pieces while it holds its share, when it has one.
fn in_pieces(mut response: http::Response<Body>) -> http::Response<Body> {
    match response.extensions_mut().remove::<Share>() {
        Some(share) => response.map(|body| {
            Body::new(Pieces {
                inner: body,
                rest: Bytes::new(),
                share: Some(share),
            })
        }),
        None => response,
    }
}

/// A response body handed on in pieces of at most [`PIECE`] bytes, holding its share
/// of the budget until its last piece has gone.
struct Pieces {
    inner: Body,
    /// What is left of the data frame being handed on.
    rest: Bytes,
    share: Option<Share>,
}

// === impl Pieces ===

impl hyper::body::Body for Pieces {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        if this.rest.is_empty() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.rest = data,
                    Err(trailers) => {
                        this.share = None;
                        return Poll::Ready(Some(Ok(trailers)));
                    }
                },
                Poll::Ready(None) => {
                    this.share = None;
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
        let piece = this.rest.split_to(this.rest.len().min(PIECE));
        if this.rest.is_empty() && this.inner.is_end_stream() {
            this.share = None;
        }
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        hint.set_lower(hint.lower().saturating_add(rest));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    /// The HTTP response tonic makes of `answer`'s: the message, with its extensions.
    fn http(answer: tonic::Response<Body>) -> http::Response<Body> {
        let (_, body, extensions) = answer.into_parts();
        let mut response = http::Response::new(body);
        *response.extensions_mut() = extensions;
        response
    }

    fn body_of(bytes: usize) -> Body {
        Body::new(http_body_util::Full::new(Bytes::from(vec![7u8; bytes])))
    }

    #[tokio::test]
    async fn an_answer_leaves_in_pieces_and_gives_its_share_back_after_the_last() {
        let budget = SendingBudget::new(1 << 20, Arc::new(Metrics::new()));
        let share = budget.share(300_000, None).await.expect("a share");
        assert_eq!(budget.available(), (1 << 20) - 300_000);
        let response = in_pieces(http(answer(body_of(300_000), Some(share))));
        assert!(response.extensions().get::<Share>().is_none(), "taken out");
        let mut body = response.into_body();
        let mut pieces = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.expect("frame").into_data().expect("data");
            pieces.push(data.len());
            if pieces.iter().sum::<usize>() < 300_000 {
                assert!(budget.available() < 1 << 20, "held while pieces are left");
            }
        }
        assert_eq!(pieces.iter().sum::<usize>(), 300_000);
        assert!(pieces.iter().all(|&n| n <= PIECE), "{pieces:?}");
        assert_eq!(
            budget.available(),
            1 << 20,
            "given back after the last piece"
        );
    }

    #[tokio::test]
    async fn a_caller_that_leaves_gives_the_share_back() {
        let budget = SendingBudget::new(1 << 20, Arc::new(Metrics::new()));
        let share = budget.share(300_000, None).await;
        let response = in_pieces(http(answer(body_of(300_000), share)));
        let mut body = response.into_body();
        let _first = body.frame().await;
        assert!(budget.available() < 1 << 20);
        drop(body);
        assert_eq!(budget.available(), 1 << 20);
    }

    #[tokio::test]
    async fn small_answers_take_no_share_and_large_ones_at_most_the_budget() {
        let budget = SendingBudget::new(1 << 20, Arc::new(Metrics::new()));
        assert!(budget.share(PIECE - 1, None).await.is_none());
        let whole = budget
            .share(10 << 20, None)
            .await
            .expect("the whole budget");
        assert_eq!(budget.available(), 0);
        drop(whole);
        assert_eq!(budget.available(), 1 << 20);
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_waits_half_the_time_left_or_max_wait_then_the_answer_goes_without() {
        let budget = SendingBudget::new(1 << 20, Arc::new(Metrics::new()));
        let held = budget.share(1 << 20, None).await.expect("all of it");
        let started = Instant::now();
        let due = started + Duration::from_secs(2);
        assert!(budget.share(PIECE, Some(due)).await.is_none());
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        let started = Instant::now();
        assert!(budget.share(PIECE, None).await.is_none());
        assert_eq!(started.elapsed(), MAX_WAIT);
        // Given back, the next answer gets its share at once.
        drop(held);
        assert!(budget.share(PIECE, None).await.is_some());
    }
}
