//! One accepted connection as the pool and its requests see it: its state (requests in
//! flight, idle since, handshaken, evicted), the requests counted on it ([`TrackLayer`]
//! and [`Tracked`] response bodies), and its transport ([`Conn`]), closed at the pool's
//! word.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;
use tracing::debug;

use super::limits::ConnectionLimits;

/// What a pool shares with its connections: its name (for logs), its bounds, and its
/// open connections, which a connection leaves when it is dropped.
pub(super) struct Seats {
    pub(super) name: &'static str,
    pub(super) limits: ConnectionLimits,
    pub(super) open: Mutex<HashMap<u64, Activity>>,
}

/// Why the sidecar closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// It did not complete its handshake in time.
    Handshake,
    /// It had no request in flight for the idle timeout.
    Idle,
    /// It was the longest idle when the connection cap was reached.
    Evicted,
}

// === impl Closed ===

impl Closed {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Closed::Handshake => "no handshake within the handshake timeout",
            Closed::Idle => "idle for the idle timeout",
            Closed::Evicted => "idle the longest when the connection cap was reached",
        }
    }
}

/// What a connection shares with the requests on it.
pub(super) struct ConnState {
    /// Requests in flight.
    pub(super) active: AtomicUsize,
    /// When the last request ended (or the connection was accepted).
    pub(super) idle_since: Mutex<Instant>,
    pub(super) handshaken: AtomicBool,
    pub(super) evicted: AtomicBool,
    /// The task reading the connection, woken when it may have to close.
    pub(super) waker: AtomicWaker,
}

/// A connection's request count, shared with its requests: see [`Activity::start`].
#[derive(Clone)]
pub struct Activity(pub(super) Arc<ConnState>);

// === impl Activity ===

impl Activity {
    /// Counts a request in flight on the connection until the guard is dropped. The
    /// first request also completes the handshake of an HTTP/1 connection.
    pub fn start(&self) -> Active {
        self.0.active.fetch_add(1, Ordering::AcqRel);
        self.0.handshaken.store(true, Ordering::Release);
        Active(self.0.clone())
    }
}

/// A request in flight; see [`Activity::start`].
pub struct Active(Arc<ConnState>);

// === impl Active ===

impl Drop for Active {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.0.idle_since.lock().expect("idle lock") = Instant::now();
            // The connection's reader arms its idle timer.
            self.0.waker.wake();
        }
    }
}

/// An accepted connection holding its place in its pool; reads fail once it must
/// close (handshake or idle timeout, evicted).
pub struct Conn<IO> {
    pub(super) io: IO,
    pub(super) activity: Activity,
    pub(super) seats: Arc<Seats>,
    pub(super) id: u64,
    pub(super) _permit: OwnedSemaphorePermit,
    pub(super) accepted: Instant,
    pub(super) read: u64,
    pub(super) timer: Pin<Box<Sleep>>,
    pub(super) timer_at: Option<Instant>,
}

// === impl Conn ===

impl<IO> Conn<IO> {
    /// The connection's request count, for the service that serves it.
    pub fn activity(&self) -> Activity {
        self.activity.clone()
    }

    /// Why the connection must close now, if it must; else arms the timer of the next
    /// deadline so that the reading task is woken by it.
    fn must_close(&mut self, cx: &mut Context<'_>) -> Option<Closed> {
        let state = &self.activity.0;
        if state.evicted.load(Ordering::Acquire) {
            return Some(Closed::Evicted);
        }
        let limits = &self.seats.limits;
        let (deadline, reason) = if !state.handshaken.load(Ordering::Acquire) {
            (self.accepted + limits.handshake_timeout, Closed::Handshake)
        } else if state.active.load(Ordering::Acquire) == 0 {
            let since = *state.idle_since.lock().expect("idle lock");
            (since + limits.idle_timeout, Closed::Idle)
        } else {
            return None; // a request's end wakes the reader
        };
        if Instant::now() >= deadline {
            return Some(reason);
        }
        if self.timer_at != Some(deadline) {
            self.timer.as_mut().reset(deadline);
            self.timer_at = Some(deadline);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Some(reason),
            Poll::Pending => None,
        }
    }
}

impl<IO> Drop for Conn<IO> {
    fn drop(&mut self) {
        self.seats.open.lock().expect("pool lock").remove(&self.id);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Conn<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.read += (buf.filled().len() - before) as u64;
                if this.read >= this.seats.limits.handshake_bytes {
                    this.activity.0.handshaken.store(true, Ordering::Release);
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
            Poll::Pending => {}
        }
        this.activity.0.waker.register(cx.waker());
        match this.must_close(cx) {
            Some(reason) => {
                debug!(
                    listener = this.seats.name,
                    reason = reason.describe(),
                    "closing connection"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    reason.describe(),
                )))
            }
            None => Poll::Pending,
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Conn<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// What tonic puts in each request's extensions for a [`Conn`]: the inner connection's
/// own info (e.g. the peer address) and the connection's [`Activity`].
#[derive(Clone)]
pub struct ConnInfo<I> {
    /// The info of the inner connection (`TcpConnectInfo`, `UdsConnectInfo`).
    pub inner: I,
    activity: Activity,
}

// === impl Conn ===

impl<IO: Connected> Connected for Conn<IO> {
    type ConnectInfo = ConnInfo<IO::ConnectInfo>;

    fn connect_info(&self) -> Self::ConnectInfo {
        ConnInfo {
            inner: self.io.connect_info(),
            activity: self.activity.clone(),
        }
    }
}

/// A tower layer that counts every request of a tonic server as in flight on its
/// connection until its response body is done, so that the idle timeout and eviction
/// spare connections that are busy. `I` is the inner connection's info type.
pub struct TrackLayer<I>(PhantomData<fn() -> I>);

// === impl TrackLayer ===

impl<I> TrackLayer<I> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<I> Default for TrackLayer<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I> Clone for TrackLayer<I> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<S, I> tower::Layer<S> for TrackLayer<I> {
    type Service = Track<S, I>;

    fn layer(&self, inner: S) -> Self::Service {
        Track {
            inner,
            _info: PhantomData,
        }
    }
}

/// See [`TrackLayer`].
pub struct Track<S, I> {
    inner: S,
    _info: PhantomData<fn() -> I>,
}

// === impl Track ===

impl<S: Clone, I> Clone for Track<S, I> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _info: PhantomData,
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

// === impl Track ===

impl<S, I, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for Track<S, I>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    I: Clone + Send + Sync + 'static,
{
    type Response = http::Response<Tracked<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let active = request
            .extensions()
            .get::<ConnInfo<I>>()
            .map(|info| info.activity.start());
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Tracked::new(body, active)))
        })
    }
}

/// A response body that keeps its request counted as in flight until it is done.
pub struct Tracked<B> {
    inner: B,
    active: Option<Active>,
}

// === impl Tracked ===

impl<B> Tracked<B> {
    /// `inner`, counted in flight by `active` until it ends or is dropped.
    pub fn new(inner: B, active: Option<Active>) -> Self {
        Self { inner, active }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.active = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
