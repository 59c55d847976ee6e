//! A client-side rate limit on every request safewrite sends to the API server (reads,
//! writes, retries, discovery alike), shared by all callers: a rate and a burst, like
//! client-go's QPS and Burst.
//!
//! It is the GCRA of governor with reservations, which governor lacks: each request
//! takes the next free slot in line (a ticket) when it arrives, so the slots of callers
//! already waiting are accounted for. A request that carries its RPC's [`Deadline`] and
//! whose slot comes after it fails at once with [`WouldExceedDeadline`] and takes no
//! slot, as does a write whose slot would leave less time than the API server's answers
//! to writes lately need ([`AnswerTime`]: sent that late, its answer would likely be
//! lost and its outcome left in doubt); one that is dropped while it waits gives its slot back when no later slot has
//! been handed out since. Waiters are served in arrival order.
//!
//! The readiness probe ([`super::context::Readiness`]) takes no slot: the sidecar's own
//! load must not make it look unhealthy. Nor does a Lease campaign's request
//! ([`super::context::LeaseTraffic`]): writes queued here must not delay a renewal. The
//! API server sees at most `qps` x t + `burst` requests from the RPCs, plus one probe per
//! readiness interval and at most two requests per campaign per retry period.
//!
//! Built [stepping aside for the server](RateLimitLayer::stepping_aside_for_the_server)
//! (the rate was not set explicitly), the limit lets requests through untouched while
//! the API server's last answer carried API Priority and Fairness headers: the server
//! then paces its clients itself, with 429 and Retry-After (which the engine honours),
//! as controller-runtime and Flux let it. An answer without them brings the limit back.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};
use tracing::debug;

use super::answer::RequestError;
pub use super::answer::WouldExceedDeadline;
use super::answer_time::{AnswerTime, is_write};
use super::context::{Deadline, pass, steps_aside, take_ready};
use super::metrics::ClientMetrics;

/// Where a request's wait for the limiter is noted for the layer above (the trace
/// layer), which keeps it out of the request's latency.
#[derive(Debug, Clone, Default)]
pub struct Waited(pub Arc<std::sync::atomic::AtomicU64>);

// === impl Waited ===

impl Waited {
    /// The wait noted, if any.
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// The shared limiter: the theoretical arrival time of the next request (GCRA).
#[derive(Debug)]
pub struct Limiter {
    /// Time between two requests at the average rate.
    interval: Duration,
    /// How far ahead of the average rate requests may run (the burst).
    tolerance: Duration,
    /// When the next request would be due at the average rate; `None` before the first.
    next: Mutex<Option<Instant>>,
}

/// A reserved slot: the request may go at `at`. Dropped before then, it gives the slot
/// back if it is still the last one reserved.
#[derive(Debug)]
pub struct Slot {
    limiter: Arc<Limiter>,
    /// When the request may go.
    pub at: Instant,
    /// The limiter's `next` right after this reservation.
    next_after: Instant,
    used: bool,
}

// === impl Slot ===

impl Slot {
    /// Waits until the slot's time and uses it. A slot that is due already is used at
    /// once: a timer, even for a time past, fires only on the timer's next
    /// millisecond tick, which would add up to a millisecond to every request.
    pub async fn wait(mut self) {
        if Instant::now() < self.at {
            tokio::time::sleep_until(self.at).await;
        }
        self.used = true;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.used || Instant::now() >= self.at {
            return;
        }
        let mut next = self.limiter.lock();
        if *next == Some(self.next_after) {
            *next = Some(self.next_after - self.limiter.interval);
        }
    }
}

// === impl Limiter ===

impl Limiter {
    /// `qps` requests per second on average, up to `burst` at once.
    pub fn new(qps: NonZeroU32, burst: NonZeroU32) -> Self {
        let interval = Duration::from_secs(1) / qps.get();
        Self {
            interval,
            tolerance: interval * (burst.get() - 1),
            next: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.next.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves the first free slot for a request arriving now, unless it comes after
    /// `deadline`, or leaves less than `needed` before it: then nothing is reserved and
    /// the error says how long the wait would be.
    pub fn reserve(
        self: &Arc<Self>,
        deadline: Option<Instant>,
        needed: Duration,
    ) -> Result<Slot, WouldExceedDeadline> {
        let now = Instant::now();
        let mut next = self.lock();
        let due = next.unwrap_or(now);
        // The earliest conforming time: the due time less the burst tolerance.
        let at = due
            .checked_sub(self.tolerance)
            .map_or(now, |earliest| earliest.max(now));
        if let Some(deadline) = deadline
            && at > now
            && at + needed >= deadline
        {
            return Err(WouldExceedDeadline { wait: at - now });
        }
        let next_after = due.max(now) + self.interval;
        *next = Some(next_after);
        Ok(Slot {
            limiter: self.clone(),
            at,
            next_after,
            used: false,
        })
    }
}

/// What the limit reads of an answer: whether the API server paces its clients with
/// API Priority and Fairness (the answer carries the flow schema or priority level it
/// was classified into).
pub trait PacedByServer {
    /// Whether the answer says the API server paces its clients (for an HTTP answer: an
    /// `X-Kubernetes-PF-FlowSchema-UID` or `X-Kubernetes-PF-PriorityLevel-UID` header).
    fn paced_by_server(&self) -> bool;
}

// === impl http ===

impl<T> PacedByServer for http::Response<T> {
    fn paced_by_server(&self) -> bool {
        let headers = self.headers();
        headers.contains_key("x-kubernetes-pf-flowschema-uid")
            || headers.contains_key("x-kubernetes-pf-prioritylevel-uid")
    }
}

/// Whether the API server paces requests now, as its last answer said.
#[derive(Debug, Default)]
struct ServerPacing {
    /// The limit may step aside at all (no explicit rate).
    allowed: bool,
    paced: AtomicBool,
}

// === impl ServerPacing ===

impl ServerPacing {
    fn steps_aside(&self) -> bool {
        self.allowed && self.paced.load(Ordering::Relaxed)
    }

    fn saw(&self, answer: &impl PacedByServer) {
        if self.allowed {
            self.paced
                .store(answer.paced_by_server(), Ordering::Relaxed);
        }
    }
}

/// Builds [`RateLimit`] services sharing one limiter.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<Limiter>,
    pacing: Arc<ServerPacing>,
    answer_time: Arc<AnswerTime>,
    metrics: ClientMetrics,
}

// === impl RateLimitLayer ===

impl RateLimitLayer {
    /// `qps` requests per second on average, up to `burst` at once; waits recorded in
    /// `metrics`.
    pub fn new(qps: NonZeroU32, burst: NonZeroU32, metrics: ClientMetrics) -> Self {
        Self {
            limiter: Arc::new(Limiter::new(qps, burst)),
            pacing: Arc::new(ServerPacing::default()),
            answer_time: Arc::default(),
            metrics,
        }
    }

    /// Holds writes to `answer_time` (measured by the timeout layer below) instead of
    /// an estimate that learns nothing.
    pub fn holding_writes_to(mut self, answer_time: Arc<AnswerTime>) -> Self {
        self.answer_time = answer_time;
        self
    }

    /// With `yes`, the limit steps aside while the API server paces requests itself
    /// (see the module header); without, it always holds.
    pub fn stepping_aside_for_the_server(mut self, yes: bool) -> Self {
        self.pacing = Arc::new(ServerPacing {
            allowed: yes,
            paced: AtomicBool::new(false),
        });
        self
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
            pacing: self.pacing.clone(),
            answer_time: self.answer_time.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// Waits for a slot of the shared limiter before each request.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    limiter: Arc<Limiter>,
    pacing: Arc<ServerPacing>,
    answer_time: Arc<AnswerTime>,
    metrics: ClientMetrics,
}

// === impl RateLimit ===

impl<S, B> Service<http::Request<B>> for RateLimit<S>
where
    S: Service<http::Request<B>> + Clone + Send + 'static,
    S::Response: PacedByServer,
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
        let mut inner = take_ready(&mut self.inner);
        if steps_aside(request.extensions()) {
            return pass(inner, request);
        }
        let pacing = self.pacing.clone();
        if pacing.steps_aside() {
            let answer = inner.call(request);
            return Box::pin(async move {
                let answer = answer.await.map_err(Into::into)?;
                pacing.saw(&answer);
                Ok(answer)
            });
        }
        let limiter = self.limiter.clone();
        let metrics = self.metrics.clone();
        let needed = if is_write(request.method()) {
            self.answer_time.needed()
        } else {
            Duration::ZERO
        };
        Box::pin(async move {
            let deadline = request.extensions().get::<Deadline>().map(|d| d.0);
            let slot = limiter
                .reserve(deadline, needed)
                .map_err(RequestError::RateLimited)?;
            let wait = slot.at.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                debug!(
                    wait_ms = wait.as_millis() as u64,
                    "waiting for the rate limiter"
                );
                metrics.ratelimit_wait(wait);
                tracing::Span::current()
                    .record("safewrite.ratelimit.wait_ms", wait.as_millis() as i64);
                if let Some(waited) = request.extensions().get::<Waited>() {
                    waited.0.store(
                        u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                }
            }
            slot.wait().await;
            let answer = inner.call(request).await.map_err(Into::into)?;
            pacing.saw(&answer);
            Ok(answer)
        })
    }
}

#[cfg(test)]
impl PacedByServer for () {
    fn paced_by_server(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Readiness;
    use std::pin::pin;
    use tower::ServiceExt as _;

    fn limited(
        qps: u32,
        burst: u32,
    ) -> impl Service<
        http::Request<()>,
        Response = (),
        Error = BoxError,
        Future = impl Future<Output = Result<(), BoxError>> + Send,
    > + Clone
    + Send
    + 'static {
        RateLimitLayer::new(
            NonZeroU32::new(qps).unwrap(),
            NonZeroU32::new(burst).unwrap(),
            ClientMetrics::default(),
        )
        .layer(tower::service_fn(|_: http::Request<()>| {
            std::future::ready(Ok::<(), BoxError>(()))
        }))
    }

    fn by(deadline: Instant) -> http::Request<()> {
        let mut request = http::Request::new(());
        request.extensions_mut().insert(Deadline(deadline));
        request
    }

    fn refused(result: Result<(), BoxError>) -> WouldExceedDeadline {
        match RequestError::from_boxed(result.unwrap_err()) {
            RequestError::RateLimited(would) => would,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn bursts_pass_then_requests_are_paced() {
        let service = limited(20, 5);
        let started = Instant::now();
        let mut went = Vec::new();
        for _ in 0..15 {
            service
                .clone()
                .oneshot(http::Request::new(()))
                .await
                .unwrap();
            went.push(started.elapsed());
        }
        // 5 at once, then 10 more at 20/s, 50 ms apart.
        assert!(went[..5].iter().all(|t| t.is_zero()), "{went:?}");
        for (i, t) in went[5..].iter().enumerate() {
            assert_eq!(*t, Duration::from_millis(50 * (i as u64 + 1)));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_limiter_refills_its_burst() {
        let service = limited(10, 3);
        for _ in 0..3 {
            service
                .clone()
                .oneshot(http::Request::new(()))
                .await
                .unwrap();
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        let started = Instant::now();
        for _ in 0..3 {
            service
                .clone()
                .oneshot(http::Request::new(()))
                .await
                .unwrap();
        }
        assert!(started.elapsed().is_zero());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_the_deadline_fails_at_once() {
        let service = limited(1, 1);
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        let started = Instant::now();
        let would = refused(
            service
                .clone()
                .oneshot(by(started + Duration::from_millis(100)))
                .await,
        );
        assert_eq!(would.wait, Duration::from_secs(1));
        assert!(started.elapsed().is_zero(), "it waited");
        // The refusal took no slot: the next request goes in 1 s, not 2.
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_whose_slot_leaves_too_little_for_its_answer_takes_none() {
        let answer_time = Arc::new(AnswerTime::default());
        answer_time.record(Duration::from_millis(100)); // needs 300 ms
        let service = RateLimitLayer::new(
            NonZeroU32::new(1).unwrap(),
            NonZeroU32::new(1).unwrap(),
            ClientMetrics::default(),
        )
        .holding_writes_to(answer_time)
        .layer(tower::service_fn(|_: http::Request<()>| {
            std::future::ready(Ok::<(), BoxError>(()))
        }));
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        let started = Instant::now();
        let write = |ms| {
            let mut request = by(started + Duration::from_millis(ms));
            *request.method_mut() = http::Method::PUT;
            request
        };
        // The slot in 1 s would leave 200 ms of a 1.2 s deadline: refused, no slot taken.
        let would = refused(service.clone().oneshot(write(1200)).await);
        assert_eq!(would.wait, Duration::from_secs(1));
        assert!(started.elapsed().is_zero(), "it waited");
        // A read with that deadline waits for the slot; the next write, with 1.4 s left
        // after the read's slot at 1 s and its own at 2 s, goes.
        service
            .clone()
            .oneshot(by(started + Duration::from_millis(1200)))
            .await
            .unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        service.clone().oneshot(write(2400)).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_check_counts_the_callers_already_in_line() {
        let service = limited(1, 1);
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        let start = Instant::now();
        // Two callers wait their turn (slots at +1 s and +2 s).
        let first = tokio::spawn(service.clone().oneshot(http::Request::new(())));
        let second = tokio::spawn(service.clone().oneshot(http::Request::new(())));
        tokio::task::yield_now().await;
        // The bucket alone would say 1 s; in line behind two callers it is 3 s.
        let would = refused(
            service
                .clone()
                .oneshot(by(start + Duration::from_millis(2500)))
                .await,
        );
        assert_eq!(would.wait, Duration::from_secs(3));
        // With a deadline after its place in line, a caller waits its turn.
        let third = service
            .clone()
            .oneshot(by(start + Duration::from_millis(3500)));
        third.await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_gives_up_gives_its_slot_back() {
        let service = limited(1, 1);
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        let start = Instant::now();
        {
            let waiting = pin!(service.clone().oneshot(http::Request::new(())));
            tokio::select! {
                _ = waiting => unreachable!("its slot is 1 s away"),
                _ = tokio::time::sleep(Duration::from_millis(300)) => {}
            }
        }
        // Its slot (+1 s) goes to the next caller, not +2 s.
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_readiness_probe_takes_no_slot() {
        let service = limited(1, 1);
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        let started = Instant::now();
        let mut probe = http::Request::new(());
        probe.extensions_mut().insert(Readiness);
        service.clone().oneshot(probe).await.unwrap();
        assert!(started.elapsed().is_zero(), "the probe waited");
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "and took nothing"
        );
    }

    /// A renewal never waits behind writes queued for the limiter.
    #[tokio::test(start_paused = true)]
    async fn lease_traffic_takes_no_slot() {
        let service = limited(1, 1);
        service
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        let started = Instant::now();
        let mut renewal = http::Request::new(());
        renewal
            .extensions_mut()
            .insert(crate::context::LeaseTraffic);
        service.clone().oneshot(renewal).await.unwrap();
        assert!(started.elapsed().is_zero(), "the renewal waited");
    }

    /// A service answering with or without API Priority and Fairness headers, as `apf`
    /// says at the time of the answer.
    fn answering(
        layer: RateLimitLayer,
        apf: Arc<AtomicBool>,
    ) -> impl Service<
        http::Request<()>,
        Response = http::Response<()>,
        Error = BoxError,
        Future = impl Future<Output = Result<http::Response<()>, BoxError>> + Send,
    > + Clone
    + Send
    + 'static {
        layer.layer(tower::service_fn(move |_: http::Request<()>| {
            let mut answer = http::Response::new(());
            if apf.load(Ordering::Relaxed) {
                answer
                    .headers_mut()
                    .insert("x-kubernetes-pf-flowschema-uid", "f".parse().unwrap());
            }
            std::future::ready(Ok::<_, BoxError>(answer))
        }))
    }

    /// How long `n` requests in a row take.
    async fn run(
        service: &(impl Service<http::Request<()>, Error = BoxError> + Clone),
        n: u32,
    ) -> Duration {
        let started = Instant::now();
        for _ in 0..n {
            service
                .clone()
                .oneshot(http::Request::new(()))
                .await
                .unwrap();
        }
        started.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_steps_aside_while_the_server_paces_unless_the_rate_was_set() {
        let layer = || {
            RateLimitLayer::new(
                NonZeroU32::new(10).unwrap(),
                NonZeroU32::new(1).unwrap(),
                ClientMetrics::default(),
            )
        };
        let apf = Arc::new(AtomicBool::new(true));

        // Stepping aside: the first request is limited (nothing said yet), the rest go
        // at once while the answers carry APF headers.
        let service = answering(layer().stepping_aside_for_the_server(true), apf.clone());
        assert_eq!(run(&service, 20).await, Duration::ZERO);
        // An answer without them brings the limit back: 10/s with a burst of 1.
        apf.store(false, Ordering::Relaxed);
        run(&service, 1).await;
        assert_eq!(run(&service, 5).await, Duration::from_millis(500));

        // An explicit rate always holds.
        apf.store(true, Ordering::Relaxed);
        let service = answering(layer(), apf.clone());
        assert_eq!(run(&service, 6).await, Duration::from_millis(500));
    }
}
