//! What a request carries through the stack in its extensions (the RPC's [`Deadline`], a
//! per-request [`RequestTimeout`], the [`Readiness`], [`LeaseTraffic`] and [`AwaitsVersion`]
//! marks) and the helpers every layer shares. A leaf of `client/`: the layers and the request helpers read it.

use std::time::Duration;

use tokio::time::Instant;

/// The deadline of the RPC a request serves, carried in the request's extensions. The
/// rate limiter refuses a wait past it; the timeout layer ends the request at it.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

/// The longest a request may take once it has passed the rate limit and the breaker,
/// when it should differ from the stack's default (`--request-timeout`).
#[derive(Debug, Clone, Copy)]
pub struct RequestTimeout(pub Duration);

/// Marks the readiness probe: it takes no rate-limit slot and is not breaker traffic
/// (neither refused by an open breaker nor counted by it). See `client/readiness.rs`.
#[derive(Debug, Clone, Copy)]
pub struct Readiness;

/// Marks a request of a Lease campaign (`lease/`): like [`Readiness`], it takes no
/// rate-limit slot and is not breaker traffic, so that no load or fault of the write path
/// can delay a renewal. Its bound is its own [`RequestTimeout`], within the renew deadline.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTraffic;

/// Whether a request bypasses the rate limit and the breaker: the readiness probe and
/// Lease traffic.
pub(super) fn steps_aside(extensions: &http::Extensions) -> bool {
    extensions.get::<Readiness>().is_some() || extensions.get::<LeaseTraffic>().is_some()
}

/// Marks a read that asks the API server to wait for a resourceVersion the caller named
/// (`resourceVersion=<min>`, "not older than"): its 504 (the server's cache did not reach
/// the minimum within its wait), its 500 (a minimum the server cannot parse) and its
/// timeout (the caller's deadline cut the wait short) are about that minimum, not about
/// the server's health, so the breaker gives them no verdict. See `client/breaker.rs`.
#[derive(Debug, Clone, Copy)]
pub struct AwaitsVersion;

/// The service a layer's `call` was made on, for the call's future to own; a clone
/// stays behind for the next `poll_ready` (tower: only the service polled ready may be
/// called).
pub(super) fn take_ready<S: Clone>(service: &mut S) -> S {
    let clone = service.clone();
    std::mem::replace(service, clone)
}

/// A layer stepping aside for `request` (the readiness probe): `inner`'s answer as is.
pub(super) fn pass<S, Req>(
    mut inner: S,
    request: Req,
) -> futures::future::BoxFuture<'static, Result<S::Response, tower::BoxError>>
where
    S: tower::Service<Req>,
    S::Future: Send + 'static,
    S::Error: Into<tower::BoxError>,
{
    let answer = inner.call(request);
    Box::pin(async move { answer.await.map_err(Into::into) })
}
