//! What the sidecar remembers of the objects it read or wrote, so that the next write to
//! an object can skip its GET: the mutation is applied to the remembered copy and the
//! write carries the copy's resourceVersion. Sound because:
//!
//! - every write made from a copy is conditional on its resourceVersion: a stale copy
//!   costs one 409 (or 404), which forgets it, and the retry reads live;
//! - every answer that is not a successful write (UNCHANGED, FAILED_PRECONDITION, a failed
//!   JSON Patch `test`, a mutation that does not apply, already applied, a Transact
//!   abort) is confirmed on a live read before it is given (the engine does that; see
//!   `attempt.rs` and `batch.rs`).
//!
//! An object whose copies keep turning out stale (written by others between our writes)
//! is read first again for a while, so the memory never costs more requests than reading
//! first always would, give or take one 409 now and then. Copies are bounded by bytes,
//! least recently used first out. Secrets are remembered only when configured.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// How many writes read first after an object's copy went stale twice in a row; doubles
/// with each further stale copy, up to [`READ_FIRST_MAX`].
const READ_FIRST_AFTER_STALE: u32 = 8;
const READ_FIRST_MAX: u32 = 256;

/// What each entry costs besides its object's bytes.
const ENTRY_OVERHEAD: usize = 256;

/// The remembered objects, shared by every RPC.
pub struct Memory {
    /// The most bytes of objects kept; 0 turns the memory off.
    bound: usize,
    remember_secrets: bool,
    inner: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    entries: HashMap<String, Entry>,
    /// Entries by last use, oldest first.
    order: BTreeMap<u64, String>,
    tick: u64,
    bytes: usize,
}

struct Entry {
    object: Option<Arc<Value>>,
    size: usize,
    tick: u64,
    /// Copies of this object that turned out stale in a row.
    stale_streak: u32,
    /// Writes left that read first instead of using a copy.
    read_first: u32,
}

/// Where a write's starting object comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A live read.
    Live,
    /// The remembered copy: an answer that is not a successful write must be confirmed
    /// on a live read.
    Remembered,
}

impl Memory {
    /// A memory of at most `bound` bytes of objects (0: off).
    pub fn new(bound: usize, remember_secrets: bool) -> Self {
        Memory {
            bound,
            remember_secrets,
            inner: Mutex::new(Lru::default()),
        }
    }

    /// Whether objects at `key` (an object's request path) may be kept at all.
    fn keeps(&self, key: &str) -> bool {
        self.bound > 0 && (self.remember_secrets || !is_secret(key))
    }

    /// The copy to write from, unless there is none or the object is being read first
    /// for now (which counts one such write down).
    pub fn recall(&self, key: &str) -> Option<Arc<Value>> {
        if !self.keeps(key) {
            return None;
        }
        let mut lru = self.inner.lock().expect("memory");
        let lru = &mut *lru;
        let tick = lru.next_tick();
        let Some(entry) = lru.entries.get_mut(key) else {
            crate::metrics::get().memory(false);
            return None;
        };
        if entry.read_first > 0 {
            entry.read_first -= 1;
            crate::metrics::get().memory(false);
            return None;
        }
        let object = entry.object.clone();
        lru.order.remove(&entry.tick);
        entry.tick = tick;
        lru.order.insert(tick, key.to_string());
        crate::metrics::get().memory(object.is_some());
        object
    }

    /// The copy of `key`, if there is one, for a read: unlike [`Memory::recall`] it
    /// counts nothing down and moves nothing, so reads leave the writes' choices alone.
    pub fn peek(&self, key: &str) -> Option<Arc<Value>> {
        if !self.keeps(key) {
            return None;
        }
        let lru = self.inner.lock().expect("memory");
        lru.entries.get(key).and_then(|entry| entry.object.clone())
    }

    /// Remembers `object` as the latest state of `key` (read live, or as a write's
    /// answer); `size` is its length as JSON.
    pub fn remember(&self, key: &str, object: Arc<Value>, size: usize) {
        if !self.keeps(key) {
            return;
        }
        let size = size + key.len() + ENTRY_OVERHEAD;
        if size > self.bound {
            self.forget(key);
            return;
        }
        let mut lru = self.inner.lock().expect("memory");
        let tick = lru.next_tick();
        let (streak, read_first) = match lru.entries.remove(key) {
            Some(old) => {
                lru.order.remove(&old.tick);
                lru.bytes -= old.size;
                (old.stale_streak, old.read_first)
            }
            None => (0, 0),
        };
        lru.entries.insert(
            key.to_string(),
            Entry {
                object: Some(object),
                size,
                tick,
                stale_streak: streak,
                read_first,
            },
        );
        lru.order.insert(tick, key.to_string());
        lru.bytes += size;
        while lru.bytes > self.bound {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            if let Some(evicted) = lru.entries.remove(&oldest) {
                lru.bytes -= evicted.size;
            }
        }
    }

    /// Forgets `key`'s copy (the object is gone, or its state is unknown).
    pub fn forget(&self, key: &str) {
        let mut lru = self.inner.lock().expect("memory");
        if let Some(entry) = lru.entries.get_mut(key)
            && entry.object.take().is_some()
        {
            let freed = entry.size - ENTRY_OVERHEAD - key.len();
            entry.size -= freed;
            lru.bytes -= freed;
        }
    }

    /// `key`'s copy turned out stale (a write from it met a 409 or 404, or a live read
    /// found the object changed): after a second stale copy in a row the object is read
    /// first for a while. Forgetting the copy is the caller's (a live read replaces it).
    pub fn stale(&self, key: &str) {
        crate::metrics::get().memory_stale();
        let mut lru = self.inner.lock().expect("memory");
        if let Some(entry) = lru.entries.get_mut(key) {
            entry.stale_streak += 1;
            if entry.stale_streak >= 2 {
                let doublings = (entry.stale_streak - 2).min(5);
                entry.read_first = (READ_FIRST_AFTER_STALE << doublings).min(READ_FIRST_MAX);
            }
        }
    }

    /// A write from `key`'s copy succeeded: the copies are current again.
    pub fn current(&self, key: &str) {
        let mut lru = self.inner.lock().expect("memory");
        if let Some(entry) = lru.entries.get_mut(key) {
            entry.stale_streak = 0;
        }
    }

    /// Bytes held now (objects and entries).
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.inner.lock().expect("memory").bytes
    }
}

impl Lru {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

/// Whether a request path names a Secret (`/api/v1/namespaces/NS/secrets/NAME`).
fn is_secret(path: &str) -> bool {
    let mut segments = path.trim_start_matches('/').split('/');
    segments.next() == Some("api")
        && segments.next() == Some("v1")
        && path.split('/').rev().nth(1) == Some("secrets")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CM: &str = "/api/v1/namespaces/n/configmaps/a";

    fn object(n: u32) -> Arc<Value> {
        Arc::new(json!({"metadata": {"resourceVersion": n.to_string()}, "data": {"n": n}}))
    }

    #[test]
    fn remembers_the_latest_copy_and_forgets_it() {
        let memory = Memory::new(1 << 20, false);
        assert!(memory.recall(CM).is_none());
        memory.remember(CM, object(1), 10);
        memory.remember(CM, object(2), 10);
        assert_eq!(memory.recall(CM).unwrap()["data"]["n"], 2);
        memory.forget(CM);
        assert!(memory.recall(CM).is_none());
    }

    #[test]
    fn is_bounded_by_bytes_least_recently_used_first_out() {
        let each = 1000;
        let bound = 3 * (each + CM.len() + ENTRY_OVERHEAD);
        let memory = Memory::new(bound, false);
        let key = |i: u32| format!("/api/v1/namespaces/n/configmaps/{i:0>width$}", width = 1);
        for i in 0..3 {
            memory.remember(&key(i), object(i), each);
        }
        // Using 0 makes 1 the least recently used.
        assert!(memory.recall(&key(0)).is_some());
        memory.remember(&key(3), object(3), each);
        assert!(
            memory.recall(&key(1)).is_none(),
            "the least recently used went"
        );
        for i in [0, 2, 3] {
            assert!(memory.recall(&key(i)).is_some(), "{i} stays");
        }
        assert!(memory.bytes() <= bound);
        // An object larger than the bound is not kept at all.
        memory.remember(CM, object(9), bound);
        assert!(memory.recall(CM).is_none());
        assert!(memory.bytes() <= bound);
    }

    #[test]
    fn secrets_only_when_asked() {
        let secret = "/api/v1/namespaces/n/secrets/s";
        let memory = Memory::new(1 << 20, false);
        memory.remember(secret, object(1), 10);
        assert!(memory.recall(secret).is_none());
        // A ConfigMap named "secrets" or a CRD's "secrets" in another group is no Secret.
        let named = "/api/v1/namespaces/secrets/configmaps/secrets";
        memory.remember(named, object(1), 10);
        assert!(memory.recall(named).is_some());
        let crd = "/apis/example.com/v1/namespaces/n/secrets/s";
        memory.remember(crd, object(1), 10);
        assert!(memory.recall(crd).is_some());
        let with = Memory::new(1 << 20, true);
        with.remember(secret, object(1), 10);
        assert!(with.recall(secret).is_some());
    }

    #[test]
    fn off_at_zero_bytes() {
        let memory = Memory::new(0, true);
        memory.remember(CM, object(1), 10);
        assert!(memory.recall(CM).is_none());
    }

    #[test]
    fn copies_that_keep_going_stale_make_the_object_read_first_for_a_while() {
        let memory = Memory::new(1 << 20, false);
        memory.remember(CM, object(1), 10);
        memory.stale(CM);
        assert!(
            memory.recall(CM).is_some(),
            "kept until the caller forgets it"
        );
        // One stale copy: the next write still writes from memory.
        memory.remember(CM, object(2), 10);
        assert!(memory.recall(CM).is_some());
        memory.stale(CM);
        memory.remember(CM, object(3), 10);
        for _ in 0..READ_FIRST_AFTER_STALE {
            assert!(
                memory.recall(CM).is_none(),
                "reads first after two stale copies"
            );
        }
        assert!(memory.recall(CM).is_some(), "then tries its copy again");
        // A third stale copy in a row reads first twice as long; a current one resets.
        memory.stale(CM);
        memory.remember(CM, object(4), 10);
        for _ in 0..2 * READ_FIRST_AFTER_STALE {
            assert!(memory.recall(CM).is_none());
        }
        assert!(memory.recall(CM).is_some());
        memory.current(CM);
        memory.stale(CM);
        memory.remember(CM, object(5), 10);
        assert!(memory.recall(CM).is_some(), "the streak started again");
    }
}
