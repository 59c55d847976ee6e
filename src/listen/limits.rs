//! The bounds of one pool of connections: a leaf of `listen/`, read by the pool and by
//! each connection.

use std::time::Duration;

/// Bytes of the HTTP/2 client connection preface: a gRPC connection has shaken hands once
/// it sent them.
pub const HTTP2_PREFACE_LEN: u64 = 24;

/// An HTTP/1 connection has shaken hands once its first request head is complete (a byte
/// count cannot tell).
pub const FIRST_REQUEST: u64 = u64::MAX;

/// The bounds of one pool of connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Time from accept to a completed handshake.
    pub handshake_timeout: Duration,
    /// Time a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// Bytes read that complete the handshake ([`HTTP2_PREFACE_LEN`], or
    /// [`FIRST_REQUEST`]: the first request).
    pub handshake_bytes: u64,
}
