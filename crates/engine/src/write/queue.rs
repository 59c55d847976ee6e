//! Group commit. Writes to one object (same path, subresource, field manager and dry
//! run) that arrive while a write to it is in flight wait in that object's queue; when
//! the write in flight ends, the queue becomes the next batch: one read, each member's
//! idempotency key, preconditions and mutation applied in arrival order to the running
//! result ([`fold`]), one write. Every member gets its own answer, the one it would have
//! got had the members been written one after another in that order:
//!
//! - a member whose change is already made by those before it is UNCHANGED;
//! - a false precondition or a mutation that does not apply fails that member alone,
//!   and it is left out of the write;
//! - a conflict re-reads and re-applies the whole batch;
//! - a write the API server refuses for what it contains (422, a webhook's denial) is
//!   retried one member at a time, so that only the offender fails;
//! - when the object does not exist, the members before the first create-if-missing
//!   fail NotFound, and that one goes alone (a create cannot be shared).
//!
//! A member may be the caller's own code (Transact, `--exec`) instead of a declarative
//! mutation: it is offered the running result and its proposal joins the fold like any
//! other change, so K transactions on one object cost about one write, not K racing
//! ones. Those queue apart from declarative writes to the object (the [`Key`] says
//! which), because a transaction's code may itself make a declarative write to the
//! object while its batch holds it.
//!
//! There is no timer: a lone write starts at once, and company only forms while a write
//! is in flight. A batch holds at most [`MAX_MEMBERS`]. Each object with a queue has one
//! driver task, so a caller that goes away (its RPC dropped) cannot stop the others'
//! writes; a member whose caller went away or whose deadline passed leaves before the
//! next attempt, and nothing is written on its behalf after that point.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::member::{Member, OwnCode};
use super::resolve::Start;
use super::run::{BatchSource, Unshared, run};
use crate::api::Api;
use crate::error::{Failure, WriteError};
use crate::fence::Fence;
use crate::idempotency;
use crate::result::Written;
use crate::spec::{Subresource, WriteSpec};

/// The most requests one write carries. The idempotency window
/// ([`idempotency::REMEMBERED`]) holds 16 batches of this size.
pub const MAX_MEMBERS: usize = 64;

const _: () = assert!(idempotency::REMEMBERED >= 16 * MAX_MEMBERS);

/// Which writes may share a batch: the same request path and the same query.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    path: String,
    /// Writes of the caller's own code, which queue apart (see the module header).
    own_code: bool,
    subresource: Subresource,
    field_manager: String,
    dry_run: bool,
    /// A batch carries one fence (or none): its epoch is recorded with its write.
    fence: Option<Fence>,
}

/// An object's queue of group commit.
struct Queue<'a> {
    pub batcher: &'a Batcher,
    pub key: &'a Key,
}

// === impl Queue ===

impl BatchSource for Queue<'_> {
    fn top_up(&self, members: &mut Vec<Member>) {
        self.batcher.top_up(self.key, members);
    }

    fn send_back(&self, members: Vec<Member>) -> Vec<Member> {
        self.batcher.requeue(self.key, members);
        Vec::new()
    }
}

/// The queues of the objects being written.
#[derive(Default)]
pub(crate) struct Batcher {
    queues: Mutex<HashMap<Key, VecDeque<Member>>>,
}

/// Whether a write may share a batch with concurrent writes to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// It may: group commit.
    Grouped,
    /// It may not: group commit is off, or the write asked to be written alone
    /// (`write_alone`, or an exact resourceVersion).
    Isolated,
}

// === impl Batcher ===

impl Batcher {
    /// Queues the write (made by the caller's `own` code, or by the spec's mutation)
    /// and waits for its answer, in a batch with others or in one of its own as
    /// `sharing` says. The first write to an object goes at once, on the caller's task.
    pub(crate) async fn join(
        self: &Arc<Self>,
        api: &Api,
        spec: &WriteSpec,
        own: Option<Box<dyn OwnCode>>,
        sharing: Sharing,
        start: Start,
    ) -> Result<Written, WriteError> {
        let deadline = start.attempts.deadline;
        let key = Key {
            path: start.request.as_str().to_string(),
            own_code: own.is_some(),
            subresource: spec.subresource,
            field_manager: spec.field_manager.to_string(),
            dry_run: spec.dry_run,
            fence: spec.fence.clone(),
        };
        let (mut member, answered) = Member::new(spec.clone(), own, start);
        member.isolated = sharing == Sharing::Isolated;
        let start = {
            let mut queues = self.queues.lock().expect("batch queues");
            match queues.get_mut(&key) {
                Some(queue) => {
                    queue.push_back(member);
                    false
                }
                None => {
                    queues.insert(key.clone(), VecDeque::from([member]));
                    true
                }
            }
        };
        if start {
            // Nobody else is writing the object: this write goes at once, on the RPC's
            // own task (no hand-off to a driver). Writes that arrive meanwhile queue, and
            // a driver task takes them over when it ends, or when this RPC is dropped.
            // Unshared: a batch of one is never sent back (only a batch of several is split).
            let handoff = DriverOnDrop {
                api,
                batcher: self,
                key: &key,
            };
            let own = self.next_own(&key);
            run(api, own, &Unshared).await;
            drop(handoff);
        }
        let answered = match deadline.instant() {
            Some(deadline) => tokio::time::timeout_at(deadline, answered).await,
            None => Ok(answered.await),
        };
        match answered {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(WriteError {
                failure: Failure::OutcomeUnknown {
                    last: crate::error::Fault::BatchUnanswered,
                },
                attempts: Vec::new(),
            }),
            // The deadline passed while the write was queued or in flight with others:
            // it may have been sent.
            Err(_) => Err(WriteError {
                failure: crate::decide::deadline(
                    spec,
                    crate::decide::InDoubt::Maybe,
                    0,
                    Some(crate::error::Fault::BatchPending),
                ),
                attempts: Vec::new(),
            }),
        }
    }

    /// The next batch of `key`'s queue: one member that must go alone, or the members
    /// up to the next such one, at most [`MAX_MEMBERS`]. `None` (and the queue removed)
    /// when it is empty.
    fn next(&self, key: &Key) -> Option<Vec<Member>> {
        let mut queues = self.queues.lock().expect("batch queues");
        let queue = queues.get_mut(key)?;
        let Some(first) = queue.pop_front() else {
            queues.remove(key);
            return None;
        };
        let mut batch = vec![first];
        if !batch[0].isolated {
            self.top_up_locked(queue, &mut batch);
        }
        Some(batch)
    }

    /// The write that created `key`'s queue, alone: the first member.
    fn next_own(&self, key: &Key) -> Vec<Member> {
        let mut queues = self.queues.lock().expect("batch queues");
        let queue = queues.get_mut(key).expect("the queue this write created");
        vec![queue.pop_front().expect("the write that created the queue")]
    }

    /// After the write that created `key`'s queue: a driver takes over the writes queued
    /// meanwhile, or the queue goes when there are none.
    fn hand_off(self: &Arc<Self>, api: &Api, key: &Key) {
        let mut queues = self.queues.lock().expect("batch queues");
        match queues.get(key) {
            Some(queue) if !queue.is_empty() => {
                tokio::spawn(drive(api.clone(), self.clone(), key.clone()));
            }
            _ => {
                queues.remove(key);
            }
        }
    }

    /// Adds the members that arrived since `batch` was taken (up to the cap).
    fn top_up(&self, key: &Key, batch: &mut Vec<Member>) {
        let mut queues = self.queues.lock().expect("batch queues");
        if let Some(queue) = queues.get_mut(key) {
            self.top_up_locked(queue, batch);
        }
    }

    fn top_up_locked(&self, queue: &mut VecDeque<Member>, batch: &mut Vec<Member>) {
        while batch.len() < MAX_MEMBERS && queue.front().is_some_and(|m| !m.isolated) {
            batch.extend(queue.pop_front());
        }
    }

    /// Puts members back at the front of `key`'s queue, in order.
    fn requeue(&self, key: &Key, members: Vec<Member>) {
        let mut queues = self.queues.lock().expect("batch queues");
        let queue = queues.entry(key.clone()).or_default();
        for member in members.into_iter().rev() {
            queue.push_front(member);
        }
    }

    /// Drops `key`'s queue: its members' callers get an answer saying so.
    fn abandon(&self, key: &Key) {
        self.queues.lock().expect("batch queues").remove(key);
    }
}

/// Removes the object's queue if its driver ends by a panic, so that later writes to
/// the object start a new driver instead of waiting for a dead one.
struct DriverGuard<'a> {
    batcher: &'a Batcher,
    key: &'a Key,
    done: bool,
}

// === impl DriverGuard ===

impl Drop for DriverGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.batcher.abandon(self.key);
        }
    }
}

/// Hands `key`'s queue to a driver when the write on the RPC's task ends, however it
/// ends (answered, or its RPC dropped mid-write).
struct DriverOnDrop<'a> {
    api: &'a Api,
    batcher: &'a Arc<Batcher>,
    key: &'a Key,
}

// === impl DriverOnDrop ===

impl Drop for DriverOnDrop<'_> {
    fn drop(&mut self) {
        self.batcher.hand_off(self.api, self.key);
    }
}

/// The driver of one object's queue: takes batches until the queue is empty.
async fn drive(api: Api, batcher: Arc<Batcher>, key: Key) {
    let mut guard = DriverGuard {
        batcher: &batcher,
        key: &key,
        done: false,
    };
    while let Some(batch) = batcher.next(&key) {
        if batch[0].isolated {
            run(&api, batch, &Unshared).await;
        } else {
            let queue = Queue {
                batcher: &batcher,
                key: &key,
            };
            run(&api, batch, &queue).await;
        }
    }
    guard.done = true;
}
