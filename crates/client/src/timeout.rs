//! The per-request timeout, at the bottom of the stack: under the rate limit and the
//! breaker, so its clock starts when the request has passed them (a wait for the limiter
//! is never "the API server did not answer"), and the breaker sees its timeouts as
//! faults.
//!
//! One exchange is the request and the whole answer, body included (answers are small
//! JSON documents; nothing here streams), bounded by the request's [`RequestTimeout`]
//! (the layer's default otherwise) and the RPC's [`Deadline`], whichever comes first.
//!
//! A write the caller's deadline bounds is sent only while the time left covers what the
//! API server's answers to writes have lately taken ([`AnswerTime`], which this layer
//! measures); with less it fails with [`RequestError::TooLate`] and nothing is sent. A
//! write bounded by its own timeout instead (no deadline, or a later one) is always sent,
//! and Lease traffic is not held to it (a campaign's writes are conditional).
//!
//! It also tells whether a request may have reached the API server. The request body is
//! watched: the connection polls it only once the request is its to send, so a request
//! whose body was never polled never left the process, whatever ended it (connect
//! failure, TLS failure, no stream free in time). Every error of this layer is a
//! [`RequestError`] saying so.

use std::error::Error as StdError;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use super::answer::RequestError;
use super::answer_time::{AnswerTime, is_write};
use super::context::{Deadline, LeaseTraffic, RequestTimeout, take_ready};

/// Builds [`Timeout`] services.
#[derive(Debug, Clone)]
pub struct TimeoutLayer {
    default: Duration,
    answer_time: Arc<AnswerTime>,
}

// === impl TimeoutLayer ===

impl TimeoutLayer {
    /// `default` bounds requests that carry no [`RequestTimeout`].
    pub fn new(default: Duration) -> Self {
        Self {
            default,
            answer_time: Arc::default(),
        }
    }

    /// Measures writes into `answer_time` (shared with the rate limit) instead of an
    /// estimate of its own.
    pub fn measuring(mut self, answer_time: Arc<AnswerTime>) -> Self {
        self.answer_time = answer_time;
        self
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Timeout {
            inner,
            default: self.default,
            answer_time: self.answer_time.clone(),
        }
    }
}

/// Bounds each exchange and reads the whole answer.
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    default: Duration,
    answer_time: Arc<AnswerTime>,
}

/// When an exchange must end, and whether the caller's deadline (not the request's own
/// timeout) is what ends it.
struct Ends {
    until: Instant,
    by_deadline: bool,
}

// === impl Timeout ===

impl<S> Timeout<S> {
    /// The end of an exchange starting `now`: its [`RequestTimeout`] (this layer's default
    /// otherwise), or the caller's [`Deadline`] when that comes first.
    fn ends(&self, extensions: &http::Extensions, now: Instant) -> Ends {
        let bound = extensions
            .get::<RequestTimeout>()
            .map_or(self.default, |t| t.0);
        let until = now + bound;
        match extensions.get::<Deadline>().copied() {
            Some(Deadline(deadline)) if deadline < until => Ends {
                until: deadline,
                by_deadline: true,
            },
            _ => Ends {
                until,
                by_deadline: false,
            },
        }
    }
}

impl<S, B, R> Service<http::Request<B>> for Timeout<S>
where
    S: Service<http::Request<Handoff<B>>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + Unpin + 'static,
    R: Body<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    type Response = http::Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let now = Instant::now();
        let Ends { until, by_deadline } = self.ends(request.extensions(), now);
        let allowed = until.saturating_duration_since(now);
        if allowed.is_zero() {
            // The deadline has passed: not even one poll of the connection.
            return Box::pin(std::future::ready(Err(RequestError::Timeout {
                after: allowed,
                sent: false,
            }
            .into())));
        }
        let write = is_write(request.method());
        // Held back only for the caller's deadline: a write whose own timeout is the
        // bound is sent (refusing it would fail a call that set no deadline at all), and
        // a campaign's Lease write is bounded by its own timeout and conditional (one
        // whose answer comes too late is read again at the next round, never in doubt).
        let held = write && by_deadline && request.extensions().get::<LeaseTraffic>().is_none();
        if held {
            let needed = self.answer_time.needed();
            if allowed < needed {
                return Box::pin(std::future::ready(Err(RequestError::TooLate {
                    left: allowed,
                    needed,
                }
                .into())));
            }
        }
        let answer_time = self.answer_time.clone();
        // A request without a body gives no sign of being sent: count it as maybe sent.
        let bodyless = request.body().is_end_stream();
        let handed = Arc::new(AtomicBool::new(false));
        let request = request.map(|body| Handoff {
            inner: body,
            handed: handed.clone(),
        });
        Box::pin(async move {
            let sent = || bodyless || handed.load(Ordering::Acquire);
            let exchange = async {
                let response = inner
                    .call(request)
                    .await
                    .map_err(|e| failed(e.into(), sent()))?;
                let (parts, body) = response.into_parts();
                let body = body
                    .collect()
                    .await
                    .map_err(|e| {
                        let e: BoxError = e.into();
                        RequestError::Transport(Arc::from(e))
                    })?
                    .to_bytes();
                Ok::<_, RequestError>(http::Response::from_parts(parts, Full::new(body)))
            };
            match tokio::time::timeout_at(until, exchange).await {
                Ok(result) => {
                    if write && result.is_ok() {
                        answer_time.record(now.elapsed());
                    }
                    result.map_err(Into::into)
                }
                Err(_) => Err(RequestError::Timeout {
                    after: allowed,
                    sent: sent(),
                }
                .into()),
            }
        })
    }
}

/// The error of an exchange that ended without an answer.
fn failed(error: BoxError, sent: bool) -> RequestError {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error.as_ref());
    let mut connect = !sent;
    while let Some(err) = source {
        if let Some(client) = err.downcast_ref::<hyper_util::client::legacy::Error>()
            && client.is_connect()
        {
            connect = true;
            break;
        }
        source = err.source();
    }
    if connect {
        RequestError::Connect(Arc::from(error))
    } else {
        RequestError::Transport(Arc::from(error))
    }
}

/// A request body that notes when the connection first polls it: from then on the
/// request may have reached the API server.
#[derive(Debug)]
pub struct Handoff<B> {
    inner: B,
    handed: Arc<AtomicBool>,
}

// === impl Handoff ===

impl<B: Body + Unpin> Body for Handoff<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.handed.store(true, Ordering::Release);
        Pin::new(&mut self.inner).poll_frame(cx)
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
    use tower::ServiceExt as _;

    type Response = http::Response<Full<Bytes>>;

    fn put() -> http::Request<kube::client::Body> {
        http::Request::put("/api/v1/namespaces/a/configmaps/b")
            .body(kube::client::Body::from(b"{}".to_vec()))
            .unwrap()
    }

    fn error(result: Result<Response, BoxError>) -> RequestError {
        RequestError::from_boxed(result.unwrap_err())
    }

    /// A connection that takes `connect` to be ready, then reads the body and never
    /// answers.
    fn hung(
        connect: Duration,
    ) -> impl Service<
        http::Request<Handoff<kube::client::Body>>,
        Response = Response,
        Error = BoxError,
        Future = impl Future<Output = Result<Response, BoxError>> + Send,
    > + Clone {
        tower::service_fn(
            move |request: http::Request<Handoff<kube::client::Body>>| async move {
                tokio::time::sleep(connect).await;
                let _ = request.into_body().collect().await;
                std::future::pending::<Result<Response, BoxError>>().await
            },
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_never_reached_a_connection_was_not_sent() {
        let service = TimeoutLayer::new(Duration::from_secs(1)).layer(hung(Duration::from_secs(5)));
        let err = error(service.oneshot(put()).await);
        assert!(
            matches!(err, RequestError::Timeout { sent: false, .. }),
            "{err:?}"
        );
        assert!(!err.maybe_sent());
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_handed_to_the_connection_may_have_been_sent() {
        let service =
            TimeoutLayer::new(Duration::from_secs(1)).layer(hung(Duration::from_millis(10)));
        let started = Instant::now();
        let err = error(service.oneshot(put()).await);
        assert!(
            matches!(err, RequestError::Timeout { sent: true, after } if after == Duration::from_secs(1)),
            "{err:?}"
        );
        assert!(err.maybe_sent());
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_ends_the_request_when_it_comes_first() {
        let service =
            TimeoutLayer::new(Duration::from_secs(10)).layer(hung(Duration::from_millis(10)));
        let mut request = put();
        request
            .extensions_mut()
            .insert(Deadline(Instant::now() + Duration::from_millis(300)));
        let started = Instant::now();
        let err = error(service.oneshot(request).await);
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        assert!(matches!(err, RequestError::Timeout { sent: true, .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_before_the_handoff_is_a_connect_failure() {
        let refused = tower::service_fn(|_: http::Request<Handoff<kube::client::Body>>| async {
            Err::<Response, BoxError>("connection refused".into())
        });
        let err = error(
            TimeoutLayer::new(Duration::from_secs(1))
                .layer(refused)
                .oneshot(put())
                .await,
        );
        assert!(matches!(err, RequestError::Connect(_)), "{err:?}");
        let reset = tower::service_fn(
            |request: http::Request<Handoff<kube::client::Body>>| async move {
                let _ = request.into_body().collect().await;
                Err::<Response, BoxError>("connection reset".into())
            },
        );
        let err = error(
            TimeoutLayer::new(Duration::from_secs(1))
                .layer(reset)
                .oneshot(put())
                .await,
        );
        assert!(matches!(err, RequestError::Transport(_)), "{err:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_whole_answer_is_read_under_the_timeout() {
        let ok = tower::service_fn(|_: http::Request<Handoff<kube::client::Body>>| async {
            Ok::<_, BoxError>(
                http::Response::builder()
                    .status(201)
                    .body(Full::new(Bytes::from_static(b"{\"a\":1}")))
                    .unwrap(),
            )
        });
        let response = TimeoutLayer::new(Duration::from_secs(1))
            .layer(ok)
            .oneshot(put())
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{\"a\":1}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_too_late_for_its_answer_is_not_sent_and_a_read_is() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        // Answers take 40 ms.
        let slow = tower::service_fn(move |_: http::Request<Handoff<kube::client::Body>>| {
            counted.fetch_add(1, Ordering::Relaxed);
            async {
                tokio::time::sleep(Duration::from_millis(40)).await;
                Ok::<_, BoxError>(http::Response::new(Full::new(Bytes::new())))
            }
        });
        let answer_time = Arc::new(AnswerTime::default());
        let layer = TimeoutLayer::new(Duration::from_secs(1)).measuring(answer_time.clone());
        let by = |mut request: http::Request<kube::client::Body>, ms| {
            request
                .extensions_mut()
                .insert(Deadline(Instant::now() + Duration::from_millis(ms)));
            request
        };
        // Nothing learnt yet: a write with 20 ms left is sent (and times out).
        let err = error(layer.layer(slow.clone()).oneshot(by(put(), 20)).await);
        assert!(matches!(err, RequestError::Timeout { .. }), "{err:?}");
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        // An answered write teaches 40 ms (needing 120 ms at first).
        layer.layer(slow.clone()).oneshot(put()).await.unwrap();
        assert_eq!(answer_time.needed(), Duration::from_millis(120));
        // Now a write with 100 ms left is refused unsent, ...
        let err = error(layer.layer(slow.clone()).oneshot(by(put(), 100)).await);
        assert!(
            matches!(err, RequestError::TooLate { left, needed }
                if left == Duration::from_millis(100) && needed == Duration::from_millis(120)),
            "{err:?}"
        );
        assert!(!err.maybe_sent());
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        // ... one with 200 ms is sent, and so is a read with 100 ms: reads are not held.
        layer
            .layer(slow.clone())
            .oneshot(by(put(), 200))
            .await
            .unwrap();
        let get = http::Request::get("/api/v1/namespaces/a/configmaps/b")
            .body(kube::client::Body::empty())
            .unwrap();
        layer
            .layer(slow.clone())
            .oneshot(by(get, 100))
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 4);
        // A campaign's Lease write is not held either: it is bounded by its own timeout.
        let mut lease = by(put(), 100);
        lease.extensions_mut().insert(LeaseTraffic);
        layer.layer(slow.clone()).oneshot(lease).await.unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 5);
        // Nor a write whose own timeout, not a caller's deadline, is the bound: the call
        // set no deadline, and refusing would fail it for nothing.
        let mut own = put();
        own.extensions_mut()
            .insert(RequestTimeout(Duration::from_millis(100)));
        layer.layer(slow).oneshot(own).await.unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 6);
    }
}
