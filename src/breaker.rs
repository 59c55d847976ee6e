//! A circuit breaker in front of the API server, as a tower layer under the rate limit.
//!
//! Closed: requests pass; consecutive faults (transport errors, timeouts, 429, 500,
//! 502-504) are counted and any other answer resets the count: 409, 422, 403, 404 are
//! answers, not faults. After `failures` consecutive faults it opens: requests fail at
//! once with [`CircuitOpen`] (nothing is sent) until a cool-down passes. Then it is
//! half-open: one probe goes through; its success closes the breaker and resets the
//! cool-down, its fault opens it again with the cool-down doubled (up to a cap).

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};
use tracing::{debug, info, warn};

/// The breaker is open (or its one probe is under way): nothing was sent.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error(
    "the circuit breaker to the API server is open after repeated faults; next probe in {retry_after:?}"
)]
pub struct CircuitOpen {
    /// When the next probe may go through.
    pub retry_after: Duration,
}

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
pub enum State {
    /// Requests pass; faults are counted.
    Closed { faults: u32 },
    /// Requests fail fast until `until`.
    Open { until: Instant, cooldown: Duration },
    /// One probe is under way; others fail fast.
    HalfOpen { cooldown: Duration },
}

/// The shared state machine; cheap to clone.
#[derive(Clone)]
pub struct Breaker {
    config: BreakerConfig,
    state: Arc<Mutex<State>>,
}

/// What the breaker lets a request do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    Pass,
    Probe,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: Arc::new(Mutex::new(State::Closed { faults: 0 })),
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        *self.state.lock().expect("breaker state")
    }

    fn admit(&self) -> Result<Admit, CircuitOpen> {
        let mut state = self.state.lock().expect("breaker state");
        match *state {
            State::Closed { .. } => Ok(Admit::Pass),
            State::Open { until, cooldown } => {
                let now = Instant::now();
                if now < until {
                    return Err(CircuitOpen {
                        retry_after: until - now,
                    });
                }
                *state = State::HalfOpen { cooldown };
                crate::metrics::get().breaker(1, "half_open");
                info!(?cooldown, "circuit breaker half-open: sending one probe");
                Ok(Admit::Probe)
            }
            State::HalfOpen { .. } => Err(CircuitOpen {
                retry_after: Duration::from_millis(100),
            }),
        }
    }

    fn record(&self, admitted: Admit, fault: bool) {
        let mut state = self.state.lock().expect("breaker state");
        match (admitted, *state) {
            (Admit::Probe, State::HalfOpen { cooldown }) => {
                if fault {
                    let cooldown = (cooldown * 2).min(self.config.max_cooldown);
                    *state = State::Open {
                        until: Instant::now() + cooldown,
                        cooldown,
                    };
                    crate::metrics::get().breaker(2, "open");
                    warn!(?cooldown, "circuit breaker probe failed: open again");
                } else {
                    *state = State::Closed { faults: 0 };
                    crate::metrics::get().breaker(0, "closed");
                    info!("circuit breaker closed: the API server answers again");
                }
            }
            (Admit::Pass, State::Closed { faults }) => {
                if !fault {
                    *state = State::Closed { faults: 0 };
                } else if faults + 1 >= self.config.failures {
                    let cooldown = self.config.cooldown;
                    *state = State::Open {
                        until: Instant::now() + cooldown,
                        cooldown,
                    };
                    crate::metrics::get().breaker(2, "open");
                    warn!(
                        faults = faults + 1,
                        ?cooldown,
                        "circuit breaker open: failing fast"
                    );
                } else {
                    *state = State::Closed { faults: faults + 1 };
                }
            }
            // A request admitted while closed that ends after the breaker changed state
            // does not move it: only the probe decides in half-open.
            _ => {}
        }
    }
}

/// Whether an HTTP status is a fault of the server or the path to it.
fn is_fault_status(code: u16) -> bool {
    matches!(code, 429 | 500 | 502..=504)
}

/// Builds [`CircuitBreaker`] services sharing one [`Breaker`].
#[derive(Clone)]
pub struct CircuitBreakerLayer {
    breaker: Breaker,
}

impl CircuitBreakerLayer {
    pub fn new(breaker: Breaker) -> Self {
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

/// Fails fast while the breaker is open; feeds it each request's outcome.
#[derive(Clone)]
pub struct CircuitBreaker<S> {
    inner: S,
    breaker: Breaker,
}

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
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let breaker = self.breaker.clone();
        Box::pin(async move {
            let admitted = match breaker.admit() {
                Ok(admitted) => admitted,
                Err(open) => {
                    debug!(
                        retry_after_ms = open.retry_after.as_millis() as u64,
                        "circuit breaker refused the request"
                    );
                    return Err(open.into());
                }
            };
            if admitted == Admit::Probe {
                debug!("circuit breaker let this request through as its probe");
            }
            let result = inner.call(request).await.map_err(Into::into);
            let fault = match &result {
                Ok(response) => is_fault_status(response.status().as_u16()),
                Err(_) => true,
            };
            breaker.record(admitted, fault);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: BreakerConfig = BreakerConfig {
        failures: 3,
        cooldown: Duration::from_secs(1),
        max_cooldown: Duration::from_secs(4),
    };

    fn fail(b: &Breaker) {
        let admitted = b.admit().expect("admitted");
        b.record(admitted, true);
    }

    fn succeed(b: &Breaker) {
        let admitted = b.admit().expect("admitted");
        b.record(admitted, false);
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_faults_only() {
        let b = Breaker::new(CONFIG);
        fail(&b);
        fail(&b);
        succeed(&b); // an answer resets the count
        fail(&b);
        fail(&b);
        assert!(matches!(b.state(), State::Closed { faults: 2 }));
        fail(&b);
        assert!(matches!(b.state(), State::Open { .. }));
        let open = b.admit().expect_err("fails fast");
        assert_eq!(open.retry_after, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_after_the_cooldown_closes_on_success() {
        let b = Breaker::new(CONFIG);
        (0..3).for_each(|_| fail(&b));
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(b.admit().is_err());
        tokio::time::advance(Duration::from_millis(1)).await;
        let probe = b.admit().expect("the probe goes through");
        assert!(b.admit().is_err(), "exactly one probe in half-open");
        b.record(probe, false);
        assert_eq!(b.state(), State::Closed { faults: 0 });
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probes_grow_the_cooldown_up_to_the_cap() {
        let b = Breaker::new(CONFIG);
        (0..3).for_each(|_| fail(&b));
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
        (0..3).for_each(|_| fail(&b));
        assert!(
            matches!(b.state(), State::Open { cooldown, .. } if cooldown == Duration::from_secs(1))
        );
    }

    #[test]
    fn answers_are_not_faults() {
        for code in [200, 201, 400, 401, 403, 404, 409, 422] {
            assert!(!is_fault_status(code), "{code}");
        }
        for code in [429, 500, 502, 503, 504] {
            assert!(is_fault_status(code), "{code}");
        }
    }
}
