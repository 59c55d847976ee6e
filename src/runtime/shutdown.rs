//! Two-stage shutdown: the first SIGTERM or SIGINT stops accepting RPCs and lets the ones
//! in flight finish within the grace period; a second signal cuts them off at once.

use std::io;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The process's termination signals, registered once so none is missed between stages.
pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Registers handlers for SIGTERM and SIGINT.
    ///
    /// # Errors
    /// Fails only if the signal driver cannot be set up.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT and returns its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
