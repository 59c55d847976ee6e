//! Objects that others write too: pacing group commit on them. When several sidecars
//! (several controllers, each with its own) write one object, each group-commits its own
//! callers and their batches conflict with each other. Left to the ordinary retry, a
//! batch that lost backs off exponentially by its members' attempts (10 ms doubling to
//! 1 s), and its callers, all inside it, wait idle; the sidecar that won writes its
//! next caller's increment alone at once, from its own fresh copy, and wins again with
//! a batch of one. Measured (tests/bench/hot_sidecars.rs; docs/hot-objects.md has the
//! figures and the choices tried), 3 sidecars × 12 writers reached 0.31-0.36× of 1
//! sidecar × 36, with a p99 of 0.6 to 1 s; paced as below, 0.38-0.52×, p99 0.1-0.2 s.
//!
//! An object is hot here for [`HOT_FOR`] after a write of ours to it met a `409
//! Conflict` (someone else wrote it since we read it). While it is hot, for group
//! commit's batches (a write made alone keeps the exponential backoff):
//!
//! - a batch that met a conflict goes again after a short jittered pause, growing
//!   linearly with the conflicts it met in a row (`pace × streak`, at most
//!   [`MAX_STREAK`] paces), instead of the exponential backoff: the conflict says
//!   another writer has just written, so the object is worth reading now;
//! - a write to it starts after one pace instead of at once (and the next batch after
//!   each write the same): the callers whose answers just went out send their next
//!   write meanwhile and share one batch, and the other sidecars, who have just read the
//!   new object, get their turn instead of losing it to a write of one.
//!
//! The pace is the object's recent attempt time (read and write), clamped to
//! [`MIN_PACE`]..=[`MAX_PACE`]. Nothing else changes: every write is still conditional
//! on the resourceVersion it was made from, every answer is still its own serial
//! result, and the retries still count toward each request's attempts and stop at its
//! deadline. The table is bounded ([`MAX_OBJECTS`]; cooled objects go first).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long an object stays hot after a write of ours to it met a conflict.
pub const HOT_FOR: Duration = Duration::from_secs(2);
/// The shortest and longest pace.
pub const MIN_PACE: Duration = Duration::from_micros(500);
pub const MAX_PACE: Duration = Duration::from_millis(10);
/// The most paces a batch waits after conflicts in a row.
pub const MAX_STREAK: u32 = 8;
/// The most objects tracked at once.
pub const MAX_OBJECTS: usize = 1024;

/// The hot objects, by request path.
pub struct Hot {
    on: bool,
    /// Whether any object is tracked: the common case (none) takes no lock.
    any: AtomicBool,
    objects: Mutex<HashMap<String, Heat>>,
}

struct Heat {
    /// When a write of ours to it last met a conflict.
    conflicted: Instant,
    /// Conflicts since our last successful write to it.
    streak: u32,
    /// The recent attempt time, smoothed.
    pace: Duration,
}

impl Hot {
    /// A table that paces hot objects when `on` (else it tracks nothing).
    pub fn new(on: bool) -> Self {
        Hot {
            on,
            any: AtomicBool::new(false),
            objects: Mutex::new(HashMap::new()),
        }
    }

    /// A write of ours to `key` met a 409 Conflict: it is hot from now.
    pub fn conflicted(&self, key: &str) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        let mut objects = self.objects.lock().expect("hot objects");
        if !objects.contains_key(key) && objects.len() >= MAX_OBJECTS {
            objects.retain(|_, heat| now.duration_since(heat.conflicted) < HOT_FOR);
            if objects.len() >= MAX_OBJECTS {
                return;
            }
        }
        self.any.store(true, Ordering::Relaxed);
        let heat = objects.entry(key.to_string()).or_insert(Heat {
            conflicted: now,
            streak: 0,
            pace: MIN_PACE,
        });
        if now.duration_since(heat.conflicted) >= HOT_FOR {
            heat.streak = 0;
        }
        heat.conflicted = now;
        heat.streak = heat.streak.saturating_add(1);
    }

    /// A write of ours to `key` succeeded.
    pub fn written(&self, key: &str) {
        if !self.on || !self.any.load(Ordering::Relaxed) {
            return;
        }
        if let Some(heat) = self.objects.lock().expect("hot objects").get_mut(key) {
            heat.streak = 0;
        }
    }

    /// An attempt on `key` took `took` (noted only while it is hot).
    pub fn took(&self, key: &str, took: Duration) {
        if !self.on || !self.any.load(Ordering::Relaxed) {
            return;
        }
        if let Some(heat) = self.objects.lock().expect("hot objects").get_mut(key) {
            let took = took.clamp(MIN_PACE, MAX_PACE);
            heat.pace = (heat.pace * 3 + took) / 4;
        }
    }

    /// The pace of `key` while it is hot; `None` when it is not (it is then forgotten).
    pub fn pace(&self, key: &str) -> Option<Duration> {
        if !self.on || !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let mut objects = self.objects.lock().expect("hot objects");
        let heat = objects.get(key)?;
        if heat.conflicted.elapsed() >= HOT_FOR {
            objects.remove(key);
            if objects.is_empty() {
                self.any.store(false, Ordering::Relaxed);
            }
            return None;
        }
        Some(heat.pace)
    }

    /// How long a batch on `key` waits after a conflict, while it is hot: jittered,
    /// up to one pace for each conflict in a row (at most [`MAX_STREAK`]).
    pub fn after_conflict(&self, key: &str, rng: &mut fastrand::Rng) -> Option<Duration> {
        let pace = self.pace(key)?;
        let streak = self
            .objects
            .lock()
            .expect("hot objects")
            .get(key)
            .map_or(1, |heat| heat.streak.clamp(1, MAX_STREAK));
        Some((pace * streak).mul_f64(rng.f64()))
    }

    /// Objects tracked now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.objects.lock().expect("hot objects").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_object_is_hot_for_a_while_after_a_conflict_only() {
        let hot = Hot::new(true);
        assert_eq!(hot.pace("a"), None, "never conflicted");
        hot.conflicted("a");
        assert_eq!(hot.pace("a"), Some(MIN_PACE));
        hot.took("a", Duration::from_millis(4));
        let pace = hot.pace("a").unwrap();
        assert!(
            pace > MIN_PACE && pace < Duration::from_millis(4),
            "{pace:?}"
        );
        hot.took("a", Duration::from_secs(5));
        assert!(hot.pace("a").unwrap() <= MAX_PACE);
        tokio::time::advance(HOT_FOR).await;
        assert_eq!(hot.pace("a"), None, "cooled");
        assert_eq!(hot.len(), 0, "and forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_after_a_conflict_grows_with_the_streak_and_is_bounded() {
        let hot = Hot::new(true);
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(hot.after_conflict("a", &mut rng), None);
        for _ in 0..100 {
            hot.conflicted("a");
        }
        let most = MIN_PACE * MAX_STREAK;
        for _ in 0..100 {
            assert!(hot.after_conflict("a", &mut rng).unwrap() <= most);
        }
        hot.written("a");
        for _ in 0..100 {
            assert!(hot.after_conflict("a", &mut rng).unwrap() <= MIN_PACE);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_table_is_bounded_and_off_tracks_nothing() {
        let hot = Hot::new(true);
        for i in 0..MAX_OBJECTS + 10 {
            hot.conflicted(&i.to_string());
        }
        assert_eq!(hot.len(), MAX_OBJECTS);
        tokio::time::advance(HOT_FOR).await;
        hot.conflicted("new");
        assert_eq!(hot.len(), 1, "cooled objects went first");
        let off = Hot::new(false);
        off.conflicted("a");
        assert_eq!(off.pace("a"), None);
    }
}
