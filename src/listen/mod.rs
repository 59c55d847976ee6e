//! Listeners: the accepted connections of the gRPC API (TCP and unix socket) and of
//! `/metrics`, and what keeps many, idle or half-open connections from exhausting the
//! sidecar.
//!
//! - A cap on open connections per [`Pool`]. When it is reached, an idle connection (no
//!   request in flight) is closed to make room: the oldest of those that never completed
//!   their handshake, else the one idle the longest. So a flood of idle or half-sent
//!   connections cannot lock a real caller out. When every connection is busy, accepting
//!   waits for one to end.
//! - A handshake timeout: a connection that has not sent its opening bytes (the HTTP/2
//!   preface; for HTTP/1, a whole request head) within it is closed.
//! - An idle timeout: a connection with no request in flight for that long is closed.
//! - Accept errors that are about the process, not the peer (EMFILE, ENFILE, ENOBUFS,
//!   ENOMEM) close the longest-idle connection to free its descriptor and back off from
//!   10 ms to 1 s instead of spinning; they are logged at most once a minute.
//!
//! A closed connection is closed at the transport (its reads fail): it has no request in
//! flight, so nothing is lost but a request racing the close.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::task::AtomicWaker;
use futures::{Stream, StreamExt as _};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::{debug, warn};

mod conn;
mod limits;

pub use conn::{Active, Activity, Closed, Conn, ConnInfo, Track, TrackLayer, Tracked};
use conn::{ConnState, Seats};
pub use limits::{ConnectionLimits, FIRST_REQUEST, HTTP2_PREFACE_LEN};

/// The connections of one kind (gRPC, metrics), however many listeners feed them.
pub struct Pool {
    seats: Arc<Seats>,
    slots: Arc<Semaphore>,
    next_id: AtomicU64,
}

// === impl Pool ===

impl Pool {
    /// A pool named `name` in logs (e.g. "grpc", "metrics").
    pub fn new(name: &'static str, limits: ConnectionLimits) -> Arc<Pool> {
        Arc::new(Pool {
            seats: Arc::new(Seats {
                name,
                limits,
                open: Mutex::new(HashMap::new()),
            }),
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            next_id: AtomicU64::new(0),
        })
    }

    /// The pool's bounds.
    pub fn limits(&self) -> ConnectionLimits {
        self.seats.limits
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.seats.open.lock().expect("pool lock").len()
    }

    /// The connections accepted from `accept`, each holding a place in the pool until it
    /// is dropped. Accept errors never end the stream: a failed connection is skipped, a
    /// process limit (file descriptors, buffers) backs off. The stream ends only when
    /// `accept` does.
    pub fn incoming<S, IO>(
        self: &Arc<Self>,
        accept: S,
    ) -> impl Stream<Item = io::Result<Conn<IO>>> + Send + 'static
    where
        S: Stream<Item = io::Result<IO>> + Send + Unpin + 'static,
        IO: Send + 'static,
    {
        let state = (accept, self.clone(), AcceptErrors::default());
        futures::stream::unfold(state, |(mut accept, pool, mut errors)| async move {
            loop {
                match accept.next().await? {
                    Ok(io) => {
                        errors.recovered(pool.seats.name);
                        let conn = pool.admit(io).await;
                        return Some((Ok(conn), (accept, pool, errors)));
                    }
                    // The peer's problem (it reset before we accepted): next one.
                    Err(error) if peer_error(&error) => continue,
                    // Out of descriptors (or buffers): free one if a connection is idle,
                    // and wait before trying again rather than spin.
                    Err(error) => {
                        let wait = errors.failed(pool.seats.name, &error);
                        pool.evict_idlest();
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        })
    }

    /// Gives `io` a place in the pool, first closing the longest-idle connection when the
    /// pool is full, or waiting for a connection to end when none is idle.
    async fn admit<IO>(self: &Arc<Self>, io: IO) -> Conn<IO> {
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if !self.evict_idlest() {
                    debug!(
                        listener = self.seats.name,
                        max = self.seats.limits.max_connections,
                        "every connection is busy; waiting for one to end"
                    );
                }
                self.slots
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the pool's semaphore is never closed")
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Activity(Arc::new(ConnState {
            active: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            handshaken: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        }));
        self.seats
            .open
            .lock()
            .expect("pool lock")
            .insert(id, activity.clone());
        Conn {
            io,
            activity,
            seats: self.seats.clone(),
            id,
            _permit: permit,
            accepted: Instant::now(),
            read: 0,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            timer_at: None,
        }
    }

    /// Marks the connection idle the longest for closing and wakes it, one that never
    /// completed its handshake first; false when every connection has a request in
    /// flight.
    fn evict_idlest(&self) -> bool {
        let open = self.seats.open.lock().expect("pool lock");
        let idlest = open
            .values()
            .filter(|a| !a.0.evicted.load(Ordering::Acquire))
            .filter(|a| a.0.active.load(Ordering::Acquire) == 0)
            .min_by_key(|a| {
                (
                    a.0.handshaken.load(Ordering::Acquire),
                    *a.0.idle_since.lock().expect("idle lock"),
                )
            });
        match idlest {
            Some(victim) => {
                victim.0.evicted.store(true, Ordering::Release);
                victim.0.waker.wake();
                true
            }
            None => false,
        }
    }
}

/// Accept failures that concern one connection only; everything else (EMFILE, ENFILE,
/// ENOBUFS, ENOMEM) concerns the process and is backed off.
fn peer_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// The backoff of accept errors, and their log.
#[derive(Default)]
struct AcceptErrors {
    /// Errors since the last successful accept.
    failing: u64,
    backoff: Duration,
    /// Errors not logged yet, and when the last was logged.
    unlogged: u64,
    logged: Option<Instant>,
}

// === impl AcceptErrors ===

impl AcceptErrors {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);
    const LOG_EVERY: Duration = Duration::from_secs(60);

    /// Records a failed accept and returns how long to wait before the next.
    fn failed(&mut self, listener: &'static str, error: &io::Error) -> Duration {
        self.failing += 1;
        self.unlogged += 1;
        if self.logged.is_none_or(|at| at.elapsed() >= Self::LOG_EVERY) {
            warn!(
                listener,
                %error,
                failures = self.unlogged,
                "failed to accept connections (raise the open-file limit, ulimit -n, or lower --max-connections); closing idle connections and backing off"
            );
            self.logged = Some(Instant::now());
            self.unlogged = 0;
        }
        self.backoff = (self.backoff * 2).clamp(Self::FIRST, Self::MAX);
        self.backoff
    }

    /// Records a successful accept: the backoff starts over.
    fn recovered(&mut self, listener: &'static str) {
        if self.failing > 0 {
            debug!(
                listener,
                failed = self.failing,
                "accepting connections again"
            );
            self.failing = 0;
            self.backoff = Duration::ZERO;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;

    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};

    fn limits(max: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: max,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            handshake_bytes: 4,
        }
    }

    type Accepts = tokio::sync::mpsc::UnboundedSender<io::Result<DuplexStream>>;
    type Admitted = Pin<Box<dyn Stream<Item = io::Result<Conn<DuplexStream>>> + Send>>;

    /// A pool fed by a channel of in-memory connections; returns the pool, the sender
    /// and the stream of admitted connections.
    fn pool(max: usize) -> (Arc<Pool>, Accepts, Admitted) {
        let pool = Pool::new("test", limits(max));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let incoming = pool.incoming(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
        (pool, tx, Box::pin(incoming))
    }

    async fn read_err(conn: &mut Conn<DuplexStream>) -> io::Error {
        let mut buf = [0u8; 16];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) => panic!("EOF instead of a close"),
                Ok(_) => continue,
                Err(e) => return e,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn silent_connections_close_at_the_handshake_timeout() {
        let (_pool, tx, mut incoming) = pool(4);
        let (server, _client) = tokio::io::duplex(64);
        tx.send(Ok(server)).unwrap();
        let mut conn = incoming.next().await.unwrap().unwrap();
        let started = Instant::now();
        let err = read_err(&mut conn).await;
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn busy_connections_stay_and_idle_ones_close_after_the_idle_timeout() {
        let (_pool, tx, mut incoming) = pool(4);
        let (server, mut client) = tokio::io::duplex(64);
        tx.send(Ok(server)).unwrap();
        let mut conn = incoming.next().await.unwrap().unwrap();
        client.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf).await.unwrap();
        let active = conn.activity().start();
        // Busy for longer than both timeouts: not closed.
        let read = tokio::time::timeout(Duration::from_secs(120), conn.read(&mut buf)).await;
        assert!(read.is_err(), "a busy connection was closed");
        drop(active);
        let idle = Instant::now();
        let err = read_err(&mut conn).await;
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(idle.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_pool_evicts_a_silent_connection_first_then_the_longest_idle() {
        let (pool, tx, mut incoming) = pool(3);
        let mut clients = Vec::new();
        let mut conns = Vec::new();
        for _ in 0..3 {
            let (server, client) = tokio::io::duplex(64);
            clients.push(client);
            tx.send(Ok(server)).unwrap();
            conns.push(incoming.next().await.unwrap().unwrap());
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        // The oldest has shaken hands and is idle, the second is silent, the third busy.
        clients[0].write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        conns[0].read_exact(&mut buf).await.unwrap();
        let _busy = conns[2].activity().start();

        let mut admit_one = async |conns: &mut Vec<Conn<DuplexStream>>, victim: usize| {
            let (server, client) = tokio::io::duplex(64);
            clients.push(client);
            tx.send(Ok(server)).unwrap();
            let mut evicted = conns.remove(victim);
            let reader = tokio::spawn(async move { read_err(&mut evicted).await });
            let admitted = incoming.next().await.unwrap().unwrap();
            assert_eq!(reader.await.unwrap().kind(), io::ErrorKind::TimedOut);
            admitted
        };
        // The silent one goes first, though younger.
        let fourth = admit_one(&mut conns, 1).await;
        assert_eq!(pool.open(), 3);
        // With the newcomer busy, the idle one that shook hands goes next.
        let _fourth_busy = fourth.activity().start();
        let _fifth = admit_one(&mut conns, 0).await;
        assert_eq!(pool.open(), 3);
        drop(fourth);
        assert_eq!(pool.open(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn accept_errors_back_off_and_peer_errors_do_not() {
        let (_pool, tx, mut incoming) = pool(4);
        for _ in 0..20 {
            tx.send(Err(io::Error::from_raw_os_error(24))).unwrap(); // EMFILE
        }
        tx.send(Err(io::ErrorKind::ConnectionAborted.into()))
            .unwrap();
        let (server, _client) = tokio::io::duplex(64);
        tx.send(Ok(server)).unwrap();
        let started = Instant::now();
        incoming.next().await.unwrap().unwrap();
        // 10 + 20 + 40 + ... ms, capped at 1 s: about 14 s for 20 errors, not a spin.
        let waited = started.elapsed();
        assert!(waited > Duration::from_secs(10), "{waited:?}");
        assert!(waited < Duration::from_secs(20), "{waited:?}");
    }
}
