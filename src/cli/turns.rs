//! In-process writers on one machine take turns per object: each holds an advisory lock
//! on a file named after the object while it reads, mutates and writes, so that shell
//! loops writing one object at once do not spend their time conflicting and backing off
//! (the sidecar orders its writers to one object the same way, in memory). The lock is only a
//! courtesy: correctness still comes from the resourceVersion of every write, a writer
//! that waited half its time goes ahead without its turn, and a writer elsewhere (another
//! machine, a sidecar) is not asked.

use std::fs::{File, TryLockError};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

/// A turn: the object's lock, released when dropped (or when the process ends).
pub struct TurnLock(#[allow(dead_code)] Option<File>);

/// Waits for the turn at `key` (the object and the cluster it is in), for at most half
/// of the time until `deadline`; without one when no lock file can be had.
pub async fn take(key: &str, deadline: Instant) -> TurnLock {
    let Some(file) = open(key) else {
        return TurnLock(None);
    };
    let until = Instant::now() + deadline.saturating_duration_since(Instant::now()) / 2;
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return TurnLock(Some(file)),
            Err(TryLockError::WouldBlock) if Instant::now() + pause < until => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(10));
            }
            Err(_) => return TurnLock(None),
        }
    }
}

/// The lock file of `key`, in a directory of this user's.
fn open(key: &str) -> Option<File> {
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("safewrite-turns-{uid}"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .ok()?;
    // Only a directory of our own: another user's could be used to stall us.
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    if !meta.is_dir() || meta.uid() != uid {
        return None;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let name: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(name))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_turn_at_a_time_and_none_past_half_the_deadline() {
        let key = format!(
            "test-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        );
        let first = take(&key, Instant::now() + Duration::from_secs(5)).await;
        assert!(first.0.is_some());
        let started = Instant::now();
        let second = take(&key, Instant::now() + Duration::from_millis(200)).await;
        assert!(second.0.is_none(), "took a held turn");
        assert!(started.elapsed() >= Duration::from_millis(80));
        drop(first);
        let third = take(&key, Instant::now() + Duration::from_secs(5)).await;
        assert!(third.0.is_some());
    }
}
