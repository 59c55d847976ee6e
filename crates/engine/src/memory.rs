//! What the sidecar remembers of the objects it read or wrote, so that the next write to
//! an object can skip its GET: the mutation is applied to the remembered copy and the
//! write carries the copy's resourceVersion.
//!
//! The loop tells the memory what happened to an object ([`Event`], through
//! [`Memory::learn`]) and the memory alone decides what it keeps, refreshes or forgets.
//! The rules, each enforced in [`Memory::learn`]:
//!
//! - **Only what the API server said is kept.** A live read's object and a successful
//!   write's answer become the object's copy; a dry run's answer is not the object's and
//!   leaves the copy as it was; a write that let the object go (deleted on its last
//!   finalizer) leaves nothing to keep.
//! - **Never older.** A copy is not replaced by an object older than it by KEP-5504's
//!   comparison ([`safewrite_api::resource_version`]): a read answered after a newer write's
//!   answer was remembered (a "not older than" read from the API server's watch cache
//!   may lag it) leaves the newer copy. Versions that do not compare replace as before.
//! - **Doubt forgets.** A refused write, a write without an answer, or an answer whose
//!   body could not be used leaves the object's state unknown: its copy is forgotten, so
//!   the next write reads live.
//! - **A stale copy costs one 409 (or 404), never a wrong answer.** Every write made from
//!   a copy is conditional on its resourceVersion; a 409 or 404 to it proves the copy
//!   stale ([`Learned::CopyWasStale`]) and the retry reads live at once. A write with the
//!   caller's exact resourceVersion or a create that lost its race proves nothing about
//!   the copy.
//! - **No answer but a successful write is given on a copy alone.** UNCHANGED,
//!   FAILED_PRECONDITION, a failed JSON Patch `test`, a mutation that does not apply,
//!   already applied, a Transact abort: each is confirmed on a live read first
//!   ([`Event::Contradicted`] when the read shows the copy was stale; the write loop in
//!   `write/attempt.rs` asks for that read).
//! - **Copies that keep going stale are not used for a while.** An object written by
//!   others between our writes is read first again after two stale copies in a row
//!   (for [`READ_FIRST_AFTER_STALE`] writes, doubling up to [`READ_FIRST_MAX`]), so the
//!   memory never costs more requests than reading first always would, give or take one
//!   409 now and then. A successful write from a copy ends the streak.
//!
//! Copies are bounded by bytes, least recently used first out. Secrets are remembered
//! only when configured.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use safewrite_api::resource_version::older;

use super::body::resource_version;
use super::metrics::EngineMetrics;

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
    metrics: EngineMetrics,
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

/// What happened to an object, as the loop tells the memory.
pub enum Event<'a> {
    /// A live read found the object; its answer's body was `size` bytes.
    Read(&'a Arc<Value>, usize),
    /// A live read found no object.
    Missing,
    /// A live read contradicted a decision taken on the remembered copy: the object
    /// had changed since (or was gone).
    Contradicted,
    /// A write made from `from` was answered 2xx with `object` (`None`: its body could
    /// not be used), `size` bytes long. The object is kept shared, not copied.
    Written {
        from: Source,
        object: Option<&'a Arc<Value>>,
        size: usize,
        dry_run: bool,
    },
    /// A write made from `from` was refused with HTTP `code`.
    Refused {
        from: Source,
        code: u16,
        /// A create that found the object there (409 AlreadyExists).
        already_exists: bool,
        /// The write carried the caller's exact resourceVersion, not the copy's.
        strict: bool,
    },
    /// A write got no answer: whether it was applied is unknown.
    AnswerLost,
}

/// What the memory learned from an [`Event`] that the loop must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    Noted,
    /// The write was made from a copy that was stale: the next attempt reads live, at
    /// once.
    CopyWasStale,
}

// === impl Memory ===

impl Memory {
    /// A memory of at most `bound` bytes of objects (0: off), its lookups counted in
    /// `metrics`.
    pub fn new(bound: usize, remember_secrets: bool, metrics: EngineMetrics) -> Self {
        Memory {
            bound,
            remember_secrets,
            inner: Mutex::new(Lru::default()),
            metrics,
        }
    }

    /// Takes in what happened to the object at `key` (its request path): the one place
    /// that decides what the memory keeps, refreshes or forgets (the rules are in the
    /// module's header).
    pub fn learn(&self, key: &str, event: Event<'_>) -> Learned {
        match event {
            Event::Read(object, size) => self.remember(key, object.clone(), size),
            Event::Missing | Event::AnswerLost => self.forget(key),
            Event::Contradicted => self.stale(key),
            Event::Written {
                from,
                object,
                size,
                dry_run,
            } => {
                if from == Source::Remembered {
                    self.current(key);
                }
                match object {
                    // A dry run changed nothing: the copy, if any, stays what it was.
                    Some(_) if dry_run => {}
                    // The write let the API server delete the object: nothing to keep.
                    Some(object) if safewrite_mutation::entries::is_gone(object) => {
                        self.forget(key)
                    }
                    Some(object) => self.remember(key, object.clone(), size),
                    None => self.forget(key),
                }
            }
            Event::Refused {
                from,
                code,
                already_exists,
                strict,
            } => {
                self.forget(key);
                let proves_stale = matches!(code, 404 | 409) && !already_exists && !strict;
                if from == Source::Remembered && proves_stale {
                    self.stale(key);
                    return Learned::CopyWasStale;
                }
            }
        }
        Learned::Noted
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
            self.metrics.memory(false);
            return None;
        };
        if entry.read_first > 0 {
            entry.read_first -= 1;
            self.metrics.memory(false);
            return None;
        }
        let object = entry.object.clone();
        lru.order.remove(&entry.tick);
        entry.tick = tick;
        lru.order.insert(tick, key.to_string());
        self.metrics.memory(object.is_some());
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

    /// Remembers `object` as the latest state of `key` (read, or as a write's answer),
    /// unless the copy kept is newer; `size` is its length as JSON.
    fn remember(&self, key: &str, object: Arc<Value>, size: usize) {
        if !self.keeps(key) {
            return;
        }
        let size = size + key.len() + ENTRY_OVERHEAD;
        if size > self.bound {
            self.forget(key);
            return;
        }
        let mut lru = self.inner.lock().expect("memory");
        let kept = lru.entries.get(key).and_then(|entry| entry.object.as_ref());
        if kept.is_some_and(|kept| older(&resource_version(&object), &resource_version(kept))) {
            return;
        }
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
    fn forget(&self, key: &str) {
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
    fn stale(&self, key: &str) {
        self.metrics.memory_stale();
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
    fn current(&self, key: &str) {
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

// === impl Lru ===

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
        let memory = Memory::new(1 << 20, false, EngineMetrics::default());
        assert!(memory.recall(CM).is_none());
        memory.remember(CM, object(1), 10);
        memory.remember(CM, object(2), 10);
        assert_eq!(memory.recall(CM).unwrap()["data"]["n"], 2);
        memory.forget(CM);
        assert!(memory.recall(CM).is_none());
    }

    #[test]
    fn a_copy_is_never_replaced_by_an_older_object() {
        let memory = Memory::new(1 << 20, false, EngineMetrics::default());
        // A write's answer at 12 is remembered; a read answered at 9 (a watch cache
        // behind the write) comes after it: the copy stays the write's.
        memory.learn(CM, written(Source::Live, Some(&object(12)), false));
        memory.learn(CM, Event::Read(&object(9), 10));
        assert_eq!(memory.peek(CM).unwrap()["data"]["n"], 12);
        // Shorter is older whatever the digits say: 9 is older than 10.
        memory.learn(CM, Event::AnswerLost);
        memory.learn(CM, Event::Read(&object(9), 10));
        memory.learn(CM, Event::Read(&object(10), 10));
        assert_eq!(memory.peek(CM).unwrap()["data"]["n"], 10, "newer replaces");
        memory.learn(CM, Event::Read(&object(9), 10));
        assert_eq!(memory.peek(CM).unwrap()["data"]["n"], 10);
        // The same version is the same state: it replaces (and refreshes the entry).
        memory.learn(CM, Event::Read(&object(10), 10));
        assert_eq!(memory.peek(CM).unwrap()["data"]["n"], 10);
        // Versions that do not compare replace as before.
        let odd = Arc::new(json!({"metadata": {"resourceVersion": "007"}, "data": {"n": 0}}));
        memory.learn(CM, Event::Read(&odd, 10));
        assert_eq!(memory.peek(CM).unwrap()["data"]["n"], 0);
        // Once forgotten (doubt), any object is remembered.
        memory.learn(CM, Event::Read(&object(20), 10));
        memory.learn(CM, Event::AnswerLost);
        memory.learn(CM, Event::Read(&object(3), 10));
        assert_eq!(memory.peek(CM).unwrap()["data"]["n"], 3);
    }

    #[test]
    fn is_bounded_by_bytes_least_recently_used_first_out() {
        let each = 1000;
        let bound = 3 * (each + CM.len() + ENTRY_OVERHEAD);
        let memory = Memory::new(bound, false, EngineMetrics::default());
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
        let memory = Memory::new(1 << 20, false, EngineMetrics::default());
        memory.remember(secret, object(1), 10);
        assert!(memory.recall(secret).is_none());
        // A ConfigMap named "secrets" or a CRD's "secrets" in another group is no Secret.
        let named = "/api/v1/namespaces/secrets/configmaps/secrets";
        memory.remember(named, object(1), 10);
        assert!(memory.recall(named).is_some());
        let crd = "/apis/example.com/v1/namespaces/n/secrets/s";
        memory.remember(crd, object(1), 10);
        assert!(memory.recall(crd).is_some());
        let with = Memory::new(1 << 20, true, EngineMetrics::default());
        with.remember(secret, object(1), 10);
        assert!(with.recall(secret).is_some());
    }

    #[test]
    fn off_at_zero_bytes() {
        let memory = Memory::new(0, true, EngineMetrics::default());
        memory.remember(CM, object(1), 10);
        assert!(memory.recall(CM).is_none());
    }

    #[test]
    fn copies_that_keep_going_stale_make_the_object_read_first_for_a_while() {
        let memory = Memory::new(1 << 20, false, EngineMetrics::default());
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

    fn written(from: Source, object: Option<&Arc<Value>>, dry_run: bool) -> Event<'_> {
        Event::Written {
            from,
            object,
            size: 10,
            dry_run,
        }
    }

    fn refused(from: Source, code: u16, already_exists: bool, strict: bool) -> Event<'static> {
        Event::Refused {
            from,
            code,
            already_exists,
            strict,
        }
    }

    #[test]
    fn what_the_api_server_said_is_kept_and_doubt_forgets() {
        let memory = Memory::new(1 << 20, false, EngineMetrics::default());
        assert_eq!(
            memory.learn(CM, Event::Read(&object(1), 10)),
            Learned::Noted
        );
        assert_eq!(memory.recall(CM).unwrap()["data"]["n"], 1);
        memory.learn(CM, written(Source::Remembered, Some(&object(2)), false));
        assert_eq!(
            memory.recall(CM).unwrap()["data"]["n"],
            2,
            "the write's answer"
        );
        memory.learn(CM, written(Source::Remembered, Some(&object(9)), true));
        assert_eq!(
            memory.recall(CM).unwrap()["data"]["n"],
            2,
            "a dry run is not kept"
        );
        let gone = Arc::new(
            json!({"metadata": {"resourceVersion": "3", "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        );
        memory.learn(CM, written(Source::Live, Some(&gone), false));
        assert!(
            memory.recall(CM).is_none(),
            "a write that let the object go"
        );
        for doubt in [
            written(Source::Live, None, false),
            refused(Source::Live, 422, false, false),
            Event::AnswerLost,
            Event::Missing,
        ] {
            memory.learn(CM, Event::Read(&object(4), 10));
            memory.learn(CM, doubt);
            assert!(memory.recall(CM).is_none(), "forgotten after doubt");
        }
    }

    #[test]
    fn only_a_conflict_on_the_copy_itself_proves_it_stale() {
        let memory = Memory::new(1 << 20, false, EngineMetrics::default());
        let cases = [
            (
                refused(Source::Remembered, 409, false, false),
                Learned::CopyWasStale,
            ),
            (
                refused(Source::Remembered, 404, false, false),
                Learned::CopyWasStale,
            ),
            (refused(Source::Live, 409, false, false), Learned::Noted),
            (
                refused(Source::Remembered, 409, true, false),
                Learned::Noted,
            ),
            (
                refused(Source::Remembered, 409, false, true),
                Learned::Noted,
            ),
            (
                refused(Source::Remembered, 422, false, false),
                Learned::Noted,
            ),
        ];
        for (event, lesson) in cases {
            memory.learn(CM, Event::Read(&object(1), 10));
            assert_eq!(memory.learn(CM, event), lesson);
            assert!(memory.recall(CM).is_none());
        }
    }
}
