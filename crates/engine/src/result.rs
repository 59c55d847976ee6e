//! What a write ends with: its outcome, the object, and a record of every attempt. A
//! [`Written`] is built in one place, [`Written::new`], from what the last attempt
//! decided ([`Done`]) and the records of all of them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use safewrite_client::apiserver::Answer;

use super::body::{json_len, resource_version};

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

// === impl Outcome ===

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

// === impl AttemptRecord ===

impl AttemptRecord {
    /// Notes an answer's HTTP status and reason here and on the current span (the
    /// attempt's).
    pub(crate) fn note(&mut self, answer: &Answer) {
        self.http_status = answer.code;
        self.reason = answer.reason();
        let span = tracing::Span::current();
        span.record("http.response.status_code", i64::from(answer.code));
        if !self.reason.is_empty() {
            span.record("safewrite.k8s.reason", self.reason.as_str());
        }
    }
}

/// The object a write answers with. A member of a batch holds its serial state as a
/// place in the batch's one write ([`Serial`]) until its answer is built, so that the
/// members of a batch on a large object do not each hold a parsed copy at once.
#[derive(Debug, Clone)]
pub enum Object {
    /// The object itself.
    Own(Value),
    /// The object shared: as read, answered to several members, or as written and
    /// remembered.
    Shared(Arc<Value>),
    /// The state right after a member's turn in a batch's write.
    Serial(Arc<Serial>, usize),
}

// === impl Object ===

impl Object {
    /// The object's resourceVersion, without making the object.
    pub fn resource_version(&self) -> String {
        match self {
            Object::Own(object) => resource_version(object),
            Object::Shared(object) => resource_version(object),
            Object::Serial(serial, _) => serial.version.clone(),
        }
    }

    /// About how many bytes the object takes as JSON ([`json_len`]), without making it:
    /// a member's serial state is taken to be as large as the object written.
    pub fn json_len(&self) -> usize {
        match self {
            Object::Own(object) => json_len(object),
            Object::Shared(object) => json_len(object),
            Object::Serial(serial, _) => json_len(&serial.written),
        }
    }

    /// No object at all (a finalizer removal that found the object gone).
    pub fn is_null(&self) -> bool {
        matches!(self, Object::Own(Value::Null))
    }

    /// The object as JSON, made without a copy of the object when it is the one shared
    /// or written.
    pub fn into_json(self) -> String {
        match self {
            Object::Own(object) => object.to_string(),
            Object::Shared(object) => object.to_string(),
            Object::Serial(serial, at) if serial.is_written(at) => serial.written.to_string(),
            serial @ Object::Serial(..) => serial.into_value().to_string(),
        }
    }

    /// The object, made now: moved out when nothing else shares it.
    pub fn into_value(self) -> Value {
        match self {
            Object::Own(object) => object,
            Object::Shared(object) => Arc::unwrap_or_clone(object),
            Object::Serial(serial, at) => match Arc::try_unwrap(serial) {
                Ok(serial) => serial.into_state(at),
                Err(shared) => shared.state(at),
            },
        }
    }
}

impl From<Value> for Object {
    fn from(object: Value) -> Self {
        Object::Own(object)
    }
}

impl From<Arc<Value>> for Object {
    fn from(object: Arc<Value>) -> Self {
        Object::Shared(object)
    }
}

/// The serial states of a batch's members after its one write: the object the API server
/// answered with, with the changes of the members after each one undone. Should an undo
/// not apply to the server's object (the server normalised a field a member set), the
/// body sent stands in for it, with the written resourceVersion.
#[derive(Debug)]
pub struct Serial {
    /// Shared with the memory, which remembers it.
    written: Arc<Value>,
    sent: Value,
    version: String,
    /// Each member's undo: applied to the state right after its turn, it gives the state
    /// right before (`None` for a member that changed nothing).
    undos: Vec<Option<json_patch::Patch>>,
}

// === impl Serial ===

impl Serial {
    pub fn new(written: Arc<Value>, sent: Value, undos: Vec<Option<json_patch::Patch>>) -> Self {
        Serial {
            version: resource_version(&written),
            written,
            sent,
            undos,
        }
    }

    /// Whether the object was being deleted: then a member's state may be the object
    /// gone.
    pub fn deleting(&self) -> bool {
        !self.written["metadata"]["deletionTimestamp"].is_null()
    }

    /// Whether the state right after member `at`'s turn is the object written: no member
    /// after it changed the object.
    fn is_written(&self, at: usize) -> bool {
        self.undos[at + 1..].iter().all(Option::is_none)
    }

    /// The state right after member `at`'s turn.
    pub fn state(&self, at: usize) -> Value {
        let mut state = Value::clone(&self.written);
        if self.undo_after(at, &mut state) {
            return state;
        }
        self.made_from_sent(at)
    }

    fn into_state(mut self, at: usize) -> Value {
        let written = std::mem::replace(&mut self.written, Arc::new(Value::Null));
        let mut state = Arc::unwrap_or_clone(written);
        if self.undo_after(at, &mut state) {
            return state;
        }
        self.made_from_sent(at)
    }

    /// Undoes the changes of the members after `at` on `state`, the last first; false
    /// when one does not apply.
    fn undo_after(&self, at: usize, state: &mut Value) -> bool {
        let later = &self.undos[at + 1..];
        later
            .iter()
            .rev()
            .flatten()
            .all(|undo| json_patch::patch(state, undo).is_ok())
    }

    fn made_from_sent(&self, at: usize) -> Value {
        let mut state = self.sent.clone();
        for undo in self.undos[at + 1..].iter().rev().flatten() {
            json_patch::patch(&mut state, undo)
                .expect("an undo applies to the body it was taken from");
        }
        state["metadata"]["resourceVersion"] = Value::String(self.version.clone());
        state
    }
}

/// How the last attempt ended a successful write.
#[derive(Debug, Clone)]
pub struct Done {
    pub outcome: Outcome,
    /// The object as written, or as read when nothing was written.
    pub object: Object,
    /// The idempotency key was already on the object: nothing was written.
    pub already_applied: bool,
}

// === impl Done ===

impl Done {
    pub fn new(outcome: Outcome, object: impl Into<Object>) -> Self {
        Done {
            outcome,
            object: object.into(),
            already_applied: false,
        }
    }

    /// The request's key was found on `object`: the change was made before.
    pub fn already_applied(object: impl Into<Object>) -> Self {
        Done {
            outcome: Outcome::Updated,
            object: object.into(),
            already_applied: true,
        }
    }
}

/// A finished write.
#[derive(Debug, Clone)]
pub struct Written {
    /// What the write did.
    pub outcome: Outcome,
    /// The object as written, or as read when nothing was written.
    pub object: Object,
    /// `object`'s resourceVersion.
    pub resource_version: String,
    /// One record per attempt, in order.
    pub attempts: Vec<AttemptRecord>,
    /// The idempotency key was already on the object: nothing was written.
    pub already_applied: bool,
}

// === impl Written ===

impl Written {
    /// The result of a write that ended with `done` after `attempts`.
    pub fn new(done: Done, attempts: Vec<AttemptRecord>) -> Self {
        Written {
            outcome: done.outcome,
            resource_version: done.object.resource_version(),
            object: done.object,
            attempts,
            already_applied: done.already_applied,
        }
    }
}
