//! A circuit breaker in front of the API server, as a tower layer under the rate limit
//! and above the per-request timeout, so that timeouts reach it as faults.
//!
//! Closed: requests pass; consecutive faults ([`super::fault::is_fault`]: transport
//! errors, timeouts, 429, 500, 502-504) are counted and any other answer resets the
//! count. After `failures` consecutive faults it opens: requests fail at once with
//! [`CircuitOpen`] (nothing is sent) until a cool-down passes. Then it is half-open: one
//! probe goes through; its success closes the breaker and resets the cool-down, its
//! fault opens it again with the cool-down doubled (up to a cap).
//!
//! Every request the breaker admits holds a ticket that records its outcome exactly
//! once, when the request ends or when its future is dropped unfinished (the caller went
//! away, a `select!` chose another branch):
//!
//! - a dropped probe releases half-open: the next request becomes the probe at once, so
//!   no lost probe can hold the breaker half-open;
//! - a dropped request admitted while closed counts as nothing: a caller giving up says
//!   nothing about the server. Time running out is not a drop: the timeout layer below
//!   ends the request with a timeout, which is a fault;
//! - a ticket from an earlier period (admitted before the breaker last changed state)
//!   changes nothing: only what happened since counts.
//!
//! The readiness probe ([`super::context::Readiness`]) is not breaker traffic: it is neither
//! refused nor counted (see [`super::readiness`]); nor is a Lease campaign's request
//! ([`super::context::LeaseTraffic`]), which an open breaker must not delay. A read that waits for a resourceVersion
//! the caller named ([`super::context::AwaitsVersion`]) is admitted as any request, but its
//! 500, 504 or timeout is no verdict: it says the minimum was not reached (or not
//! representable), not that the server is unwell, so no caller can open the breaker for
//! everyone by asking for a version from the future.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};
use tracing::{debug, info, warn};

pub use super::answer::CircuitOpen;
use super::answer::RequestError;
use super::context::{AwaitsVersion, pass, steps_aside, take_ready};
use super::fault;
use super::metrics::{BreakerState, ClientMetrics};

/// How long a request refused while the probe is under way is told to wait.
pub const PROBE_RETRY_AFTER: Duration = Duration::from_millis(100);

/// Settings of the breaker.
#[derive(Debug, Clone, Copy)]
pub struct BreakerConfig {
    /// Consecutive faults that open the breaker.
    pub failures: u32,
    /// The first cool-down; doubled after each failed probe.
    pub cooldown: Duration,
    /// The longest cool-down.
    pub max_cooldown: Duration,
}

/// The breaker's state, as the textbook names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Requests pass; consecutive faults are counted.
    Closed { faults: u32 },
    /// Requests fail fast until `until`.
    Open { until: Instant, cooldown: Duration },
    /// At most one probe at a time; others fail fast. `probing` is false after a probe
    /// was dropped unfinished: the next request becomes the probe.
    HalfOpen { cooldown: Duration, probing: bool },
}

/// How an admitted request ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// An answer that is not a fault.
    Success,
    /// A fault ([`fault::is_fault`]).
    Fault,
    /// Dropped before it ended: no verdict on the server.
    Cancelled,
}

/// What the breaker let a request do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    Pass,
    Probe,
}

struct Inner {
    state: State,
    /// Bumped on every state change and every probe admitted: a ticket of another
    /// epoch is stale.
    epoch: u64,
}

/// The shared state machine; cheap to clone.
#[derive(Clone)]
pub struct Breaker {
    config: BreakerConfig,
    inner: Arc<Mutex<Inner>>,
    metrics: ClientMetrics,
}

/// An admitted request's claim on the breaker: settled once with its outcome, or, when
/// dropped unsettled, recorded as [`CallOutcome::Cancelled`].
pub struct Ticket {
    breaker: Breaker,
    admit: Admit,
    epoch: u64,
    settled: bool,
}

// === impl Ticket ===

impl Ticket {
    /// Records how the request ended.
    pub fn settle(mut self, outcome: CallOutcome) {
        self.settled = true;
        self.breaker.record(self.admit, self.epoch, outcome);
    }

    /// Whether this request is the half-open probe.
    pub fn is_probe(&self) -> bool {
        self.admit == Admit::Probe
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.settled {
            self.breaker
                .record(self.admit, self.epoch, CallOutcome::Cancelled);
        }
    }
}

// === impl Breaker ===

impl Breaker {
    /// A closed breaker with `config`, recording its changes of state in `metrics`.
    pub fn new(config: BreakerConfig, metrics: ClientMetrics) -> Self {
        Self {
            config,
            metrics,
            inner: Arc::new(Mutex::new(Inner {
                state: State::Closed { faults: 0 },
                epoch: 0,
            })),
        }
    }

    /// The current state.
    #[cfg(test)]
    pub(crate) fn state(&self) -> State {
        self.lock().state
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state stays consistent under a panic elsewhere: every update is one store.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a request (a ticket to settle) or refuses it.
    pub fn admit(&self) -> Result<Ticket, CircuitOpen> {
        let mut inner = self.lock();
        let admit = match inner.state {
            State::Closed { .. } => Admit::Pass,
            State::Open { until, cooldown } => {
                let now = Instant::now();
                if now < until {
                    return Err(CircuitOpen {
                        retry_after: until - now,
                    });
                }
                inner.state = State::HalfOpen {
                    cooldown,
                    probing: true,
                };
                inner.epoch += 1;
                self.metrics.breaker(BreakerState::HalfOpen);
                info!(?cooldown, "circuit breaker half-open: sending one probe");
                Admit::Probe
            }
            State::HalfOpen { probing: true, .. } => {
                return Err(CircuitOpen {
                    retry_after: PROBE_RETRY_AFTER,
                });
            }
            State::HalfOpen {
                cooldown,
                probing: false,
            } => {
                inner.state = State::HalfOpen {
                    cooldown,
                    probing: true,
                };
                inner.epoch += 1;
                debug!("circuit breaker half-open: the last probe was dropped, sending another");
                Admit::Probe
            }
        };
        Ok(Ticket {
            breaker: self.clone(),
            admit,
            epoch: inner.epoch,
            settled: false,
        })
    }

    fn open(&self, inner: &mut Inner, cooldown: Duration) {
        inner.state = State::Open {
            until: Instant::now() + cooldown,
            cooldown,
        };
        inner.epoch += 1;
        self.metrics.breaker(BreakerState::Open);
    }

    fn record(&self, admit: Admit, epoch: u64, outcome: CallOutcome) {
        let mut inner = self.lock();
        if epoch != inner.epoch {
            // Admitted before the last change of state: it says nothing about now.
            return;
        }
        match (admit, inner.state, outcome) {
            (Admit::Probe, State::HalfOpen { cooldown, .. }, CallOutcome::Fault) => {
                let cooldown = (cooldown * 2).min(self.config.max_cooldown);
                self.open(&mut inner, cooldown);
                warn!(?cooldown, "circuit breaker probe failed: open again");
            }
            (Admit::Probe, State::HalfOpen { .. }, CallOutcome::Success) => {
                inner.state = State::Closed { faults: 0 };
                inner.epoch += 1;
                self.metrics.breaker(BreakerState::Closed);
                info!("circuit breaker closed: the API server answers again");
            }
            (Admit::Probe, State::HalfOpen { cooldown, .. }, CallOutcome::Cancelled) => {
                inner.state = State::HalfOpen {
                    cooldown,
                    probing: false,
                };
                inner.epoch += 1;
                debug!("circuit breaker probe dropped unfinished: the next request probes");
            }
            (Admit::Pass, State::Closed { .. }, CallOutcome::Success) => {
                inner.state = State::Closed { faults: 0 };
            }
            (Admit::Pass, State::Closed { faults }, CallOutcome::Fault) => {
                let faults = faults + 1;
                if faults >= self.config.failures {
                    let cooldown = self.config.cooldown;
                    self.open(&mut inner, cooldown);
                    warn!(faults, ?cooldown, "circuit breaker open: failing fast");
                } else {
                    inner.state = State::Closed { faults };
                }
            }
            // A caller gave up on a request admitted while closed: no verdict.
            (Admit::Pass, State::Closed { .. }, CallOutcome::Cancelled) => {}
            // Unreachable with matching epochs (a probe exists only in half-open, a pass
            // only in closed); nothing to do either way.
            _ => {}
        }
    }
}

/// Builds [`CircuitBreaker`] services sharing one [`Breaker`].
#[derive(Clone)]
pub struct CircuitBreakerLayer {
    breaker: Breaker,
}

// === impl CircuitBreakerLayer ===

impl CircuitBreakerLayer {
    pub(crate) fn new(breaker: Breaker) -> Self {
        Self { breaker }
    }
}

impl<S> Layer<S> for CircuitBreakerLayer {
    type Service = CircuitBreaker<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker {
            inner,
            breaker: self.breaker.clone(),
        }
    }
}

/// Fails fast while the breaker is open; feeds it each admitted request's outcome.
#[derive(Clone)]
pub struct CircuitBreaker<S> {
    inner: S,
    breaker: Breaker,
}

// === impl CircuitBreaker ===

impl<S, B, R> Service<http::Request<B>> for CircuitBreaker<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
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
        let breaker = self.breaker.clone();
        let awaits_version = request.extensions().get::<AwaitsVersion>().is_some();
        Box::pin(async move {
            // Admitted when first polled: a future never polled holds no ticket.
            let ticket = match breaker.admit() {
                Ok(ticket) => ticket,
                Err(open) => {
                    debug!(
                        retry_after_ms = open.retry_after.as_millis() as u64,
                        "circuit breaker refused the request"
                    );
                    return Err(RequestError::CircuitOpen(open).into());
                }
            };
            if ticket.is_probe() {
                debug!("circuit breaker let this request through as its probe");
            }
            let result = inner.call(request).await.map_err(Into::into);
            ticket.settle(if never_sent(&result) {
                CallOutcome::Cancelled
            } else if !fault::is_fault_response(&result) {
                CallOutcome::Success
            } else if awaits_version && about_the_minimum(&result) {
                CallOutcome::Cancelled
            } else {
                CallOutcome::Fault
            });
            result
        })
    }
}

/// Whether the layer below refused to send the request (a write too late for its
/// answer): the server was not asked, so the outcome says nothing of it.
fn never_sent<B>(result: &Result<http::Response<B>, BoxError>) -> bool {
    result.as_ref().is_err_and(|error| {
        matches!(
            RequestError::find(error.as_ref()),
            Some(RequestError::TooLate { .. })
        )
    })
}

/// Whether the fault that ended a read waiting for a resourceVersion is about the minimum
/// it named ([`AwaitsVersion`]): a 500 or 504 answer, or a timeout.
fn about_the_minimum<B>(result: &Result<http::Response<B>, BoxError>) -> bool {
    match result {
        Ok(response) => matches!(response.status().as_u16(), 500 | 504),
        Err(error) => matches!(
            RequestError::find(error.as_ref()),
            Some(RequestError::Timeout { .. })
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use bytes::Bytes;
    use http_body_util::Full;
    use tower::ServiceExt as _;

    use super::*;
    use crate::context::Readiness;
    use crate::timeout::TimeoutLayer;

    const CONFIG: BreakerConfig = BreakerConfig {
        failures: 3,
        cooldown: Duration::from_secs(1),
        max_cooldown: Duration::from_secs(4),
    };

    fn fail(b: &Breaker) {
        b.admit().expect("admitted").settle(CallOutcome::Fault);
    }

    fn succeed(b: &Breaker) {
        b.admit().expect("admitted").settle(CallOutcome::Success);
    }

    fn open(b: &Breaker) {
        (0..CONFIG.failures).for_each(|_| fail(b));
        assert!(matches!(b.state(), State::Open { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_faults_only() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        fail(&b);
        fail(&b);
        succeed(&b); // an answer resets the count
        fail(&b);
        fail(&b);
        assert_eq!(b.state(), State::Closed { faults: 2 });
        fail(&b);
        assert!(matches!(b.state(), State::Open { .. }));
        let open = b.admit().err().expect("fails fast");
        assert_eq!(open.retry_after, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_after_the_cooldown_closes_on_success() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        open(&b);
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(b.admit().is_err());
        tokio::time::advance(Duration::from_millis(1)).await;
        let probe = b.admit().expect("the probe goes through");
        assert!(probe.is_probe());
        let refused = b.admit().err().expect("exactly one probe in half-open");
        assert_eq!(refused.retry_after, PROBE_RETRY_AFTER);
        probe.settle(CallOutcome::Success);
        assert_eq!(b.state(), State::Closed { faults: 0 });
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probes_grow_the_cooldown_up_to_the_cap() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        open(&b);
        for expected in [2, 4, 4] {
            tokio::time::advance(Duration::from_secs(5)).await;
            fail(&b); // the probe fails
            match b.state() {
                State::Open { cooldown, .. } => assert_eq!(cooldown, Duration::from_secs(expected)),
                other => panic!("{other:?}"),
            }
        }
        tokio::time::advance(Duration::from_secs(4)).await;
        succeed(&b);
        assert_eq!(b.state(), State::Closed { faults: 0 });
        // Closed again: the next opening starts from the first cool-down.
        open(&b);
        assert!(
            matches!(b.state(), State::Open { cooldown, .. } if cooldown == Duration::from_secs(1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_probe_releases_half_open() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        open(&b);
        tokio::time::advance(CONFIG.cooldown).await;
        let probe = b.admit().expect("probe");
        drop(probe); // the caller went away mid-probe
        assert_eq!(
            b.state(),
            State::HalfOpen {
                cooldown: CONFIG.cooldown,
                probing: false
            }
        );
        // The next request is the probe at once, and decides as a probe does.
        let next = b.admit().expect("the next request probes");
        assert!(next.is_probe());
        assert!(b.admit().is_err(), "still one probe at a time");
        next.settle(CallOutcome::Success);
        assert_eq!(b.state(), State::Closed { faults: 0 });
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_request_while_closed_is_no_fault() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        fail(&b);
        fail(&b);
        drop(b.admit().expect("admitted"));
        assert_eq!(b.state(), State::Closed { faults: 2 }, "no verdict");
        fail(&b);
        assert!(matches!(b.state(), State::Open { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_ticket_from_before_a_change_of_state_changes_nothing() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        let slow = b.admit().expect("admitted while closed");
        open(&b);
        tokio::time::advance(CONFIG.cooldown).await;
        succeed(&b); // the probe closes it
        slow.settle(CallOutcome::Fault); // ends late: admitted in an earlier period
        assert_eq!(b.state(), State::Closed { faults: 0 });
    }

    type Response = http::Response<Full<Bytes>>;

    /// The breaker over the timeout over `inner`, as in the stack.
    fn stack<F>(
        breaker: &Breaker,
        inner: impl Fn() -> F + Clone + Send + 'static,
    ) -> impl Service<
        http::Request<kube::client::Body>,
        Response = Response,
        Error = BoxError,
        Future = impl Future<Output = Result<Response, BoxError>> + Send,
    > + Clone
    where
        F: Future<Output = Result<Response, BoxError>> + Send + 'static,
    {
        let service = tower::service_fn(move |_: http::Request<_>| inner());
        let service = TimeoutLayer::new(Duration::from_secs(2)).layer(service);
        CircuitBreakerLayer::new(breaker.clone()).layer(service)
    }

    fn get() -> http::Request<kube::client::Body> {
        http::Request::get("/api/v1/namespaces/a/configmaps/b")
            .body(kube::client::Body::empty())
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_server_opens_it_with_timeouts() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        let hung = stack(&b, std::future::pending::<Result<Response, BoxError>>);
        for n in 1..=CONFIG.failures {
            let started = Instant::now();
            let err = hung.clone().oneshot(get()).await.unwrap_err();
            let err = RequestError::from_boxed(err);
            assert!(matches!(err, RequestError::Timeout { .. }), "{err:?}");
            assert_eq!(started.elapsed(), Duration::from_secs(2));
            if n < CONFIG.failures {
                assert_eq!(b.state(), State::Closed { faults: n });
            }
        }
        assert!(matches!(b.state(), State::Open { .. }));
        let err = hung.clone().oneshot(get()).await.unwrap_err();
        assert!(matches!(
            RequestError::from_boxed(err),
            RequestError::CircuitOpen(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_too_late_to_send_gives_no_verdict() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        open(&b);
        tokio::time::advance(CONFIG.cooldown).await;
        let answer_time = Arc::new(crate::answer_time::AnswerTime::default());
        answer_time.record(Duration::from_millis(100)); // writes need 300 ms
        let service = TimeoutLayer::new(Duration::from_secs(2))
            .measuring(answer_time)
            .layer(tower::service_fn(|_: http::Request<_>| {
                std::future::pending::<Result<Response, BoxError>>()
            }));
        let service = CircuitBreakerLayer::new(b.clone()).layer(service);
        let mut write = http::Request::put("/api/v1/namespaces/a/configmaps/b")
            .body(kube::client::Body::from(b"{}".to_vec()))
            .unwrap();
        write
            .extensions_mut()
            .insert(crate::Deadline(Instant::now() + Duration::from_millis(50)));
        let err = service.oneshot(write).await.unwrap_err();
        assert!(matches!(
            RequestError::from_boxed(err),
            RequestError::TooLate { .. }
        ));
        assert_eq!(
            b.state(),
            State::HalfOpen {
                cooldown: CONFIG.cooldown,
                probing: false
            },
            "the server was not asked: neither closed nor opened again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_dropped_by_its_caller_does_not_wedge_the_breaker() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        open(&b);
        tokio::time::advance(CONFIG.cooldown).await;
        let hung = stack(&b, std::future::pending::<Result<Response, BoxError>>);
        {
            // The caller's select! picks another branch while the probe is under way.
            let probe = pin!(hung.clone().oneshot(get()));
            tokio::select! {
                _ = probe => unreachable!("a hung server answers nothing"),
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        assert_eq!(
            b.state(),
            State::HalfOpen {
                cooldown: CONFIG.cooldown,
                probing: false
            }
        );
        // The server is healthy again: the very next request probes and closes it.
        let healthy = stack(&b, || async {
            Ok::<_, BoxError>(http::Response::new(Full::new(Bytes::from_static(b"{}"))))
        });
        healthy.oneshot(get()).await.expect("answered");
        assert_eq!(b.state(), State::Closed { faults: 0 });
    }

    #[tokio::test(start_paused = true)]
    async fn the_readiness_probe_is_neither_refused_nor_counted() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        open(&b);
        let healthy = stack(&b, || async {
            Ok::<_, BoxError>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
        let mut probe = get();
        probe.extensions_mut().insert(Readiness);
        healthy.oneshot(probe).await.expect("not refused");
        assert!(matches!(b.state(), State::Open { .. }), "not counted");
    }

    /// An open breaker (other requests' faults) does not delay a renewal, nor does the
    /// renewal close it.
    #[tokio::test(start_paused = true)]
    async fn lease_traffic_is_neither_refused_nor_counted() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        open(&b);
        let healthy = stack(&b, || async {
            Ok::<_, BoxError>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
        let mut renewal = get();
        renewal
            .extensions_mut()
            .insert(crate::context::LeaseTraffic);
        healthy.oneshot(renewal).await.expect("not refused");
        assert!(matches!(b.state(), State::Open { .. }), "not counted");
    }

    /// A caller asking for a version from the future cannot open the breaker for everyone:
    /// the 504 (or 500, or timeout) of a read waiting for its minimum is no verdict, while
    /// the same answer to any other request is a fault.
    #[tokio::test(start_paused = true)]
    async fn a_read_waiting_for_a_version_gives_no_verdict_on_its_504_500_or_timeout() {
        let b = Breaker::new(CONFIG, ClientMetrics::default());
        let answering = |code: u16| {
            stack(&b, move || async move {
                let mut response = http::Response::new(Full::new(Bytes::from_static(b"{}")));
                *response.status_mut() = http::StatusCode::from_u16(code).unwrap();
                Ok::<_, BoxError>(response)
            })
        };
        let awaiting = || {
            let mut request = get();
            request.extensions_mut().insert(AwaitsVersion);
            request
        };
        fail(&b);
        for code in [504, 500, 504, 500, 504, 500] {
            answering(code).oneshot(awaiting()).await.expect("answered");
        }
        let hung = stack(&b, std::future::pending::<Result<Response, BoxError>>);
        hung.oneshot(awaiting()).await.expect_err("timed out");
        assert_eq!(b.state(), State::Closed { faults: 1 }, "no verdict");
        // Throttling is still a fault, and so is a 504 to a plain read.
        answering(429).oneshot(awaiting()).await.expect("answered");
        assert_eq!(b.state(), State::Closed { faults: 2 });
        answering(504).oneshot(get()).await.expect("answered");
        assert!(matches!(b.state(), State::Open { .. }), "the third fault");
    }
}
