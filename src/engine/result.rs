//! What a write ends with: its outcome, the object, and a record of every attempt. A
//! [`Written`] is built in one place, [`Written::new`], from what the last attempt
//! decided ([`Done`]) and the records of all of them.

use std::time::Duration;

use serde_json::Value;

use super::body::resource_version;

/// What a successful write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The object was changed and written.
    Updated,
    /// The mutation left the object as it was: nothing was written.
    Unchanged,
    /// The object did not exist and was created.
    Created,
    /// The caller's code aborted: nothing was written.
    Aborted,
    /// The object does not exist any more: a finalizer removal found it gone, or the
    /// write removed the last finalizer of an object being deleted and the API server
    /// deleted it.
    Gone,
}

impl Outcome {
    /// A short lowercase name, for spans and metrics.
    pub fn name(self, already_applied: bool) -> &'static str {
        match self {
            _ if already_applied => "already_applied",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Created => "created",
            Outcome::Aborted => "aborted",
            Outcome::Gone => "gone",
        }
    }
}

/// A short record of one attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptRecord {
    /// From 1.
    pub number: u32,
    /// The resourceVersion of the fresh object this attempt read.
    pub resource_version_read: String,
    /// The HTTP status of the write, or of the read when the read was refused; 0 when
    /// no write was sent or no answer came.
    pub http_status: u16,
    /// The Kubernetes Status reason of that answer; empty on success.
    pub reason: String,
    /// The wait after this attempt before the next one.
    pub backoff: Option<Duration>,
    /// How many requests shared this attempt (group commit); 0 when no write was sent.
    pub batch_size: u32,
}

/// How the last attempt ended a successful write.
#[derive(Debug, Clone)]
pub struct Done {
    pub outcome: Outcome,
    /// The object as written, or as read when nothing was written.
    pub object: Value,
    /// The idempotency key was already on the object: nothing was written.
    pub already_applied: bool,
}

impl Done {
    pub fn new(outcome: Outcome, object: Value) -> Self {
        Done {
            outcome,
            object,
            already_applied: false,
        }
    }

    /// The request's key was found on `object`: the change was made before.
    pub fn already_applied(object: Value) -> Self {
        Done {
            outcome: Outcome::Updated,
            object,
            already_applied: true,
        }
    }
}

/// A finished write.
#[derive(Debug, Clone)]
pub struct Written {
    pub outcome: Outcome,
    pub object: Value,
    pub resource_version: String,
    pub attempts: Vec<AttemptRecord>,
    /// The idempotency key was already on the object: nothing was written.
    pub already_applied: bool,
}

impl Written {
    /// The result of a write that ended with `done` after `attempts`.
    pub fn new(done: Done, attempts: Vec<AttemptRecord>) -> Self {
        Written {
            outcome: done.outcome,
            resource_version: resource_version(&done.object),
            object: done.object,
            attempts,
            already_applied: done.already_applied,
        }
    }
}
