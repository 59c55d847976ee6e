//! A client-side rate limit on every request safewrite sends to the API server (reads,
//! writes, retries, discovery, readiness probes alike), shared by all callers: a governor
//! GCRA limiter with a rate and a burst, like client-go's QPS and Burst. A request that
//! carries its RPC's [`Deadline`] and would have to wait past it fails at once with
//! [`WouldExceedDeadline`] instead of waiting for nothing.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};
use tracing::debug;

/// The deadline of the RPC a request serves, carried in the request's extensions.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

/// The limiter would delay the request past its RPC's deadline; nothing was sent.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error(
    "the sidecar's rate limit to the API server would delay this request by {wait:?}, past the caller's deadline"
)]
pub struct WouldExceedDeadline {
    /// How long the request would have had to wait.
    pub wait: Duration,
}

/// Builds [`RateLimit`] services sharing one limiter.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<DefaultDirectRateLimiter>,
}

impl RateLimitLayer {
    /// `qps` requests per second on average, up to `burst` at once.
    pub fn new(qps: NonZeroU32, burst: NonZeroU32) -> Self {
        let quota = Quota::per_second(qps).allow_burst(burst);
        Self {
            limiter: Arc::new(RateLimiter::direct(quota)),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

/// Waits for the shared limiter before each request.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    limiter: Arc<DefaultDirectRateLimiter>,
}

impl<S, B> Service<http::Request<B>> for RateLimit<S>
where
    S: Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The ready service goes into the future; a fresh clone stays behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.limiter.clone();
        Box::pin(async move {
            if let Err(not_until) = limiter.check() {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                if let Some(Deadline(deadline)) = request.extensions().get::<Deadline>().copied()
                    && Instant::now() + wait > deadline
                {
                    return Err(WouldExceedDeadline { wait }.into());
                }
                debug!(
                    wait_ms = wait.as_millis() as u64,
                    "waiting for the rate limiter"
                );
                crate::metrics::get().ratelimit_wait(wait);
                limiter.until_ready().await;
            }
            inner.call(request).await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn limited(
        qps: u32,
        burst: u32,
    ) -> impl Service<http::Request<()>, Response = (), Error = BoxError> {
        RateLimitLayer::new(
            NonZeroU32::new(qps).unwrap(),
            NonZeroU32::new(burst).unwrap(),
        )
        .layer(tower::service_fn(|_: http::Request<()>| {
            std::future::ready(Ok::<(), BoxError>(()))
        }))
    }

    #[tokio::test]
    async fn bursts_pass_then_requests_are_paced() {
        let mut service = limited(20, 5);
        let started = std::time::Instant::now();
        for _ in 0..15 {
            service
                .ready()
                .await
                .unwrap()
                .call(http::Request::new(()))
                .await
                .unwrap();
        }
        // 5 at once, then 10 more at 20/s: about half a second.
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test]
    async fn a_wait_past_the_deadline_fails_at_once() {
        let mut service = limited(1, 1);
        service
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(()))
            .await
            .unwrap();
        let mut request = http::Request::new(());
        request
            .extensions_mut()
            .insert(Deadline(Instant::now() + Duration::from_millis(100)));
        let started = std::time::Instant::now();
        let err = service
            .ready()
            .await
            .unwrap()
            .call(request)
            .await
            .unwrap_err();
        let would = err
            .downcast_ref::<WouldExceedDeadline>()
            .expect("WouldExceedDeadline");
        assert!(would.wait > Duration::from_millis(500), "{would:?}");
        assert!(started.elapsed() < Duration::from_millis(50));
    }
}
