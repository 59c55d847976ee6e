//! A bound on the request bytes the sidecar holds while they arrive, across every
//! connection and stream (`--max-receiving-bytes`), and on how long one request message
//! may take to arrive once it has begun (`--receive-timeout`).
//!
//! tonic reads a request message whole before its handler runs, and HTTP/2 flow control
//! does not bound what it holds meanwhile: every byte read opens the window for the next.
//! Without a bound, a caller that opens many streams and sends each message but its last
//! byte holds connections × streams × `--max-request-bytes` of memory. Here each byte of
//! a message in progress holds a share of one budget until the message is whole and the
//! decoder has taken it; a frame that does not fit ends its request at once, and so does
//! a message that has not arrived whole within the receive timeout. [`ReceiveRefusal`] says
//! which; `respond` turns it into the answer. A message that arrived whole is its
//! handler's, bounded by `--max-in-flight`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use hyper::body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::body::Body;

/// The length of a gRPC message's prefix: a compression flag and a 32-bit length.
const PREFIX: usize = 5;

/// Why a request was ended while its message arrived.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub enum ReceiveRefusal {
    /// Messages in progress already hold `limit` bytes.
    #[error("request messages being received already hold {limit} bytes (--max-receiving-bytes)")]
    Budget {
        /// The budget, in bytes.
        limit: usize,
    },
    /// The message began but did not arrive whole within `after`.
    #[error("the request message did not arrive whole within {after:?} (--receive-timeout)")]
    Timeout {
        /// The receive timeout.
        after: Duration,
    },
}

// === impl ReceiveRefusal ===

impl ReceiveRefusal {
    /// The `ReceiveRefusal` among a status's causes, if a request ended here.
    pub fn of(status: &tonic::Status) -> Option<ReceiveRefusal> {
        let mut source = std::error::Error::source(status);
        while let Some(err) = source {
            if let Some(refused) = err.downcast_ref::<ReceiveRefusal>() {
                return Some(*refused);
            }
            source = err.source();
        }
        None
    }
}

/// The budget shared by every request; see the module docs.
#[derive(Clone, Debug)]
pub struct ReceivingBudget {
    bytes: Arc<Semaphore>,
    limit: usize,
    timeout: Duration,
}

// === impl ReceivingBudget ===

impl ReceivingBudget {
    /// A budget of `limit` bytes; a message must arrive within `timeout` of its first
    /// byte.
    pub fn new(limit: usize, timeout: Duration) -> ReceivingBudget {
        ReceivingBudget {
            bytes: Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))),
            limit,
            timeout,
        }
    }

    /// Bytes of the budget not held now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// `body`, metered against this budget.
    pub fn meter(&self, body: Body) -> Body {
        Body::new(Metered {
            inner: body,
            budget: self.clone(),
            framing: Framing::default(),
            held: None,
            timer: None,
        })
    }
}

/// Meters the body of every request; see [`ReceivingBudget`].
#[derive(Clone)]
pub struct ReceiveLayer(pub ReceivingBudget);

// === impl ReceiveLayer ===

impl<S> tower::Layer<S> for ReceiveLayer {
    type Service = Receive<S>;

    fn layer(&self, inner: S) -> Receive<S> {
        Receive {
            inner,
            budget: self.0.clone(),
        }
    }
}

/// See [`ReceiveLayer`].
#[derive(Clone)]
pub struct Receive<S> {
    inner: S,
    budget: ReceivingBudget,
}

// === impl Receive ===

impl<S> tower::Service<http::Request<Body>> for Receive<S>
where
    S: tower::Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> S::Future {
        self.inner.call(request.map(|body| self.budget.meter(body)))
    }
}

/// Reads `body` until its first message has ended, `max` bytes have come, the body has
/// ended or failed, or `within` has passed, whichever is first; what is read is dropped.
///
/// For a call refused before its handler runs: a client still sending its first message
/// when the refusal arrives may report its failed send instead of the answer (grpc.aio
/// does, for a stream), so the answer waits until the message is in, within bounds.
pub async fn read_first_message(mut body: Body, max: usize, within: Duration) {
    use http_body_util::BodyExt as _;
    let mut framing = Framing::default();
    let mut read = 0;
    let _ = tokio::time::timeout(within, async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                read += data.len();
                if framing.advance(data) > 0 || read >= max {
                    return;
                }
            }
        }
    })
    .await;
}

/// Where a stream of length-prefixed gRPC messages is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Framing {
    /// Bytes of the current message's prefix seen so far (0 to 5).
    prefix: [u8; PREFIX],
    prefix_seen: usize,
    /// Bytes of the current message's body still to come, once its prefix is whole.
    remaining: usize,
}

// === impl Framing ===

impl Framing {
    /// True between messages: no message has begun and not ended.
    fn between(&self) -> bool {
        self.prefix_seen == 0 && self.remaining == 0
    }

    /// Moves over `data`; returns how many messages ended in it.
    fn advance(&mut self, mut data: &[u8]) -> usize {
        let mut ended = 0;
        while !data.is_empty() {
            if self.prefix_seen < PREFIX {
                let take = (PREFIX - self.prefix_seen).min(data.len());
                self.prefix[self.prefix_seen..self.prefix_seen + take]
                    .copy_from_slice(&data[..take]);
                self.prefix_seen += take;
                data = &data[take..];
                if self.prefix_seen < PREFIX {
                    break;
                }
                let length = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]);
                self.remaining = length as usize;
            } else {
                let take = self.remaining.min(data.len());
                self.remaining -= take;
                data = &data[take..];
            }
            if self.prefix_seen == PREFIX && self.remaining == 0 {
                self.prefix_seen = 0;
                ended += 1;
            }
        }
        ended
    }
}

/// A request body whose bytes hold a share of the budget while their message arrives.
struct Metered {
    inner: Body,
    budget: ReceivingBudget,
    framing: Framing,
    /// The bytes of the message in progress (and of any that ended in the same frame).
    held: Option<OwnedSemaphorePermit>,
    /// When the message in progress must have arrived whole.
    timer: Option<Pin<Box<Sleep>>>,
}

// === impl Metered ===

impl Metered {
    fn take(&mut self, data: &Bytes) -> Result<(), ReceiveRefusal> {
        let refused = ReceiveRefusal::Budget {
            limit: self.budget.limit,
        };
        let n = u32::try_from(data.remaining()).map_err(|_| refused)?;
        let permit = self
            .budget
            .bytes
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| refused)?;
        match &mut self.held {
            Some(held) => held.merge(permit),
            None => self.held = Some(permit),
        }
        let began = self.framing.between();
        let ended = self.framing.advance(data);
        if self.framing.between() {
            self.timer = None;
        } else if began || ended > 0 {
            let until = Instant::now() + self.budget.timeout;
            self.timer = Some(Box::pin(tokio::time::sleep_until(until)));
        }
        Ok(())
    }

    fn late(&mut self, cx: &mut Context<'_>) -> Result<(), ReceiveRefusal> {
        let Some(timer) = &mut self.timer else {
            return Ok(());
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Err(ReceiveRefusal::Timeout {
                after: self.budget.timeout,
            }),
            Poll::Pending => Ok(()),
        }
    }
}

impl hyper::body::Body for Metered {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        // Asked for more: the messages that ended have been taken by the decoder.
        if this.framing.between() {
            this.held = None;
        }
        let refuse = |refused: ReceiveRefusal| {
            Poll::Ready(Some(Err(tonic::Status::from_error(Box::new(refused)))))
        };
        if let Err(refused) = this.late(cx) {
            return refuse(refused);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(refused) = this.take(data)
                {
                    this.held = None;
                    return refuse(refused);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.held = None;
                Poll::Ready(None)
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// A gRPC message of `n` body bytes.
    fn message(n: usize) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&(n as u32).to_be_bytes());
        m.extend(std::iter::repeat_n(7, n));
        m
    }

    #[test]
    fn framing_finds_message_ends_across_any_split() {
        let stream: Vec<u8> = [message(3), message(0), message(300)].concat();
        for chunk in [1, 2, 4, 5, 6, 7, 64, stream.len()] {
            let mut framing = Framing::default();
            let ended: usize = stream.chunks(chunk).map(|c| framing.advance(c)).sum();
            assert_eq!(ended, 3, "chunks of {chunk}");
            assert!(framing.between(), "chunks of {chunk}");
        }
        let mut framing = Framing::default();
        assert_eq!(framing.advance(&message(10)[..12]), 0);
        assert!(!framing.between());
    }

    #[test]
    fn framing_of_random_streams_cut_at_random_points() {
        let mut rng = fastrand::Rng::with_seed(7);
        for case in 0..500 {
            let messages: Vec<Vec<u8>> = (0..rng.usize(1..8))
                .map(|_| message(rng.usize(0..70_000)))
                .collect();
            let stream = messages.concat();
            let mut framing = Framing::default();
            let (mut at, mut ended) = (0, 0);
            while at < stream.len() {
                let cut = (at + rng.usize(1..=20_000)).min(stream.len());
                ended += framing.advance(&stream[at..cut]);
                at = cut;
                // Between messages exactly when a whole number of them has been seen.
                let whole = messages
                    .iter()
                    .scan(0, |end, m| {
                        *end += m.len();
                        Some(*end)
                    })
                    .any(|end| end == at);
                assert_eq!(framing.between(), whole, "case {case} at {at}");
            }
            assert_eq!(ended, messages.len(), "case {case}");
        }
    }

    /// A body fed frame by frame from the test.
    fn fed() -> (tokio::sync::mpsc::Sender<Bytes>, Body) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            let data = rx.recv().await?;
            Some((Ok::<_, tonic::Status>(Frame::data(data)), rx))
        });
        (tx, Body::new(http_body_util::StreamBody::new(stream)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_calls_first_message_is_read_within_bounds() {
        // Up to the end of the first message, not the rest of the stream.
        let (tx, body) = fed();
        let whole = message(100);
        tx.send(Bytes::copy_from_slice(&whole[..60])).await.unwrap();
        tx.send(Bytes::copy_from_slice(&whole[60..])).await.unwrap();
        let started = Instant::now();
        read_first_message(body, 1000, Duration::from_secs(1)).await;
        assert_eq!(started.elapsed(), Duration::ZERO, "ended with the message");

        // No further than `max` bytes of a large one.
        let (tx, body) = fed();
        tx.send(Bytes::copy_from_slice(&message(5000)[..2000]))
            .await
            .unwrap();
        read_first_message(body, 1000, Duration::from_secs(1)).await;
        assert_eq!(started.elapsed(), Duration::ZERO, "ended at the byte bound");
        drop(tx);

        // No longer than `within` for one that stalls.
        let (tx, body) = fed();
        tx.send(Bytes::copy_from_slice(&whole[..10])).await.unwrap();
        read_first_message(body, 1000, Duration::from_secs(1)).await;
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "ended at the time bound"
        );
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn partial_messages_hold_the_budget_until_they_end() {
        let budget = ReceivingBudget::new(1000, Duration::from_secs(10));
        let (tx, body) = fed();
        let mut body = budget.meter(body);
        let whole = message(600);
        tx.send(Bytes::copy_from_slice(&whole[..400]))
            .await
            .unwrap();
        body.frame().await.unwrap().unwrap();
        assert_eq!(
            budget.available(),
            600,
            "the partial message holds its bytes"
        );

        // A second request does not fit beside it.
        let (tx2, body2) = fed();
        let mut body2 = budget.meter(body2);
        tx2.send(Bytes::from(message(700))).await.unwrap();
        let err = body2.frame().await.unwrap().unwrap_err();
        assert!(
            matches!(
                ReceiveRefusal::of(&err),
                Some(ReceiveRefusal::Budget { limit: 1000 })
            ),
            "{err:?}"
        );
        assert_eq!(budget.available(), 600, "the refused frame holds nothing");

        // The first ends; its bytes are given back once the decoder asks for more.
        tx.send(Bytes::copy_from_slice(&whole[400..]))
            .await
            .unwrap();
        body.frame().await.unwrap().unwrap();
        assert_eq!(budget.available(), 1000 - whole.len());
        drop(tx);
        assert!(body.frame().await.is_none());
        assert_eq!(budget.available(), 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_body_gives_its_bytes_back() {
        let budget = ReceivingBudget::new(1000, Duration::from_secs(10));
        let (tx, body) = fed();
        let mut body = budget.meter(body);
        tx.send(Bytes::copy_from_slice(&message(600)[..300]))
            .await
            .unwrap();
        body.frame().await.unwrap().unwrap();
        assert_eq!(budget.available(), 700);
        drop(body);
        assert_eq!(budget.available(), 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_that_stalls_is_ended_at_the_receive_timeout() {
        let budget = ReceivingBudget::new(1000, Duration::from_secs(10));
        let (tx, body) = fed();
        let mut body = budget.meter(body);
        let whole = message(100);
        tx.send(Bytes::copy_from_slice(&whole[..50])).await.unwrap();
        body.frame().await.unwrap().unwrap();
        let started = Instant::now();
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert!(
            matches!(
                ReceiveRefusal::of(&err),
                Some(ReceiveRefusal::Timeout { .. })
            ),
            "{err:?}"
        );
        drop(body);
        assert_eq!(budget.available(), 1000);

        // Between messages (a Transact waiting for its caller), no timer runs.
        let (tx, body) = fed();
        let mut body = budget.meter(body);
        tx.send(Bytes::from(message(10))).await.unwrap();
        body.frame().await.unwrap().unwrap();
        let next = tokio::spawn(async move { body.frame().await.map(|f| f.is_ok()) });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            !next.is_finished(),
            "waiting for a message is not receiving one"
        );
        tx.send(Bytes::from(message(10))).await.unwrap();
        assert_eq!(next.await.unwrap(), Some(true));
    }
}
