//! The requests every attempt makes (send, read, the remembered copy, a live read that
//! confirms it), through one [`Api`]: the client stack, discovery, the retry budget
//! and the memory the loop shares. The loop that uses them is in `write/`.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;
use tower::retry::budget::TpsBudget;

use safewrite_api::deadline::AnswerBy;
use safewrite_api::resource_version::WellFormed;
use safewrite_api::target::ObjectPath;
use safewrite_client::apiserver::{self, Answer};
use safewrite_client::discovery::{self, Discovery};
use safewrite_client::{ApiClient, AwaitsVersion};

use super::body::resource_version;
use super::decide::Failed;
use super::error::{Failure, request_failure};
use super::memory::{Event, Learned, Memory, Source};
use super::metrics::EngineMetrics;
use super::spec::{EngineConfig, WriteSpec};
use crate::classify::Decision;

/// The API server as the loop sees it: the client stack and discovery, the shared
/// retry budget, and the memory of the objects written. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Api {
    pub client: ApiClient,
    pub discovery: Discovery,
    pub config: Arc<EngineConfig>,
    /// Bounds retries of faults (not conflicts) to a share of all RPCs in a sliding
    /// window, so that many callers cannot multiply an outage.
    pub budget: Arc<TpsBudget>,
    pub memory: Arc<Memory>,
    /// What this process's Lease campaigns hold, for fenced writes.
    pub holdings: Arc<super::fence::Holdings>,
    pub metrics: EngineMetrics,
}

/// The outcome of one API request inside the loop.
pub(crate) enum Sent {
    Answer(Answer),
    /// No answer: why, the decision, and whether the request may have reached the API
    /// server (for a write, whether its outcome is unknown).
    Failed(Failure, Decision, bool),
}

/// What a write's answer made of the object's remembered copy.
pub(crate) enum AfterWrite {
    /// 2xx: the object as written, shared with the memory (or why its body could not
    /// be used).
    Written(Result<Arc<Value>, Failure>),
    /// The write was made from a remembered copy that was stale: the next attempt
    /// reads live, at once.
    Stale,
    /// Any other answer.
    Refused,
    /// No answer.
    Unanswered,
}

/// The result of reading the target.
pub(crate) enum Read {
    /// The object, shared with the memory (it is not copied to be remembered).
    Found(Arc<Value>),
    Missing(Answer),
    /// The read ended the attempt: refused (with the answer, for the record) or
    /// unanswered.
    Ended(Option<Answer>, Failed),
}

/// What a live read made of a decision taken on the remembered copy.
pub(crate) enum Confirmed {
    /// The copy was current: the decision stands.
    Current,
    /// The copy was stale: decide again on a live read.
    Stale,
    /// The read ended the attempt: refused (with the answer) or unanswered.
    Ended(Option<Answer>, Failed),
}

// === impl Api ===

impl Api {
    /// NOT_LEADER unless this process leads under `fence` now: from its own campaign's
    /// state when one is for the Lease, else from the Lease read live (see
    /// [`super::fence`]). Checked right before every fenced write is sent.
    pub async fn held(
        &self,
        fence: &super::fence::Fence,
        deadline: AnswerBy,
        made: u32,
    ) -> Result<(), Failure> {
        let not_leader = |why: String| Failure::NotLeader {
            lease: fence.lease(),
            epoch: fence.epoch,
            why,
        };
        let why = match self.holdings.check(fence, Instant::now()) {
            super::fence::Leads::Yes => return Ok(()),
            super::fence::Leads::No(why) => format!("this sidecar's campaign for it: {why}"),
            super::fence::Leads::Unknown => {
                let path =
                    safewrite_api::target::ResourcePath::new("coordination.k8s.io", "v1", "leases")
                        .expect("a well-formed resource path")
                        .object(&fence.namespace, &fence.name);
                match self.read(&path, deadline, made).await {
                    Read::Found(lease) => match super::fence::lease_holds(
                        &lease,
                        fence.epoch,
                        std::time::SystemTime::now(),
                    ) {
                        Ok(()) => return Ok(()),
                        Err(why) => why,
                    },
                    Read::Missing(_) => "the Lease does not exist".to_string(),
                    Read::Ended(_, failed) => return Err(failed.into_failure()),
                }
            }
        };
        Err(not_leader(why))
    }

    /// Sends one request through the client stack; a request that got no answer becomes
    /// its failure and decision ([`request_failure`]). A 409 is counted here, once
    /// however many requests a batch's write carried. A 404 saying the resource path
    /// itself is not served makes discovery forget the kind's group-version, so that the
    /// next request for it resolves it afresh.
    pub async fn send(
        &self,
        request: http::Request<Vec<u8>>,
        deadline: AnswerBy,
        made: u32,
    ) -> Sent {
        let group_version = discovery::group_version_of(request.uri().path());
        let timeout = Some(self.config.request_timeout);
        match apiserver::send(&self.client, request, timeout, deadline).await {
            Ok(answer) => {
                if answer.code == 409 {
                    self.metrics.conflict();
                }
                if discovery::is_unserved_path(&answer)
                    && let Some(group_version) = group_version
                {
                    self.discovery.forget(&group_version);
                }
                Sent::Answer(answer)
            }
            Err(error) => {
                let maybe_sent = error.maybe_sent();
                let (failure, decision) = request_failure(error, deadline.instant(), made);
                Sent::Failed(failure, decision, maybe_sent)
            }
        }
    }

    /// Reads the fresh object live: found (and remembered), missing (with the 404
    /// answer), or the step that ends this attempt (a retryable or final failure).
    pub async fn read(&self, request: &ObjectPath, deadline: AnswerBy, made: u32) -> Read {
        self.read_with(request, request.get(None), deadline, made)
            .await
    }

    /// Reads the object at least as new as `min` with the API server's "not older than"
    /// read (from its watch cache): as [`Api::read`], but a minimum the server's cache
    /// does not reach in time is refused (the answer decides, see `classify`).
    pub async fn read_not_older_than(
        &self,
        request: &ObjectPath,
        min: &WellFormed,
        deadline: AnswerBy,
        made: u32,
    ) -> Read {
        let mut get = request.get(Some(min));
        get.extensions_mut().insert(AwaitsVersion);
        self.read_with(request, get, deadline, made).await
    }

    /// Sends the read `get` of `request` and tells the memory what it found.
    async fn read_with(
        &self,
        request: &ObjectPath,
        get: http::Request<Vec<u8>>,
        deadline: AnswerBy,
        made: u32,
    ) -> Read {
        let key = request.as_str();
        match self.send(get, deadline, made).await {
            Sent::Failed(failure, decision, _) => {
                Read::Ended(None, Failed::from_failure(failure, decision))
            }
            Sent::Answer(answer) if answer.code == 404 => {
                self.memory.learn(key, Event::Missing);
                Read::Missing(answer)
            }
            Sent::Answer(answer) if answer.code != 200 => {
                // The read itself was refused (429, 5xx, 403...): the record says so.
                let failed = Failed::from_answer(&answer, None);
                Read::Ended(Some(answer), failed)
            }
            Sent::Answer(answer) => match answer.object() {
                Ok(object) => {
                    let object = Arc::new(object);
                    self.memory
                        .learn(key, Event::Read(&object, answer.body.len()));
                    Read::Found(object)
                }
                Err(err) => Read::Ended(None, Failed::End(Failure::BadAnswer(err))),
            },
        }
    }

    /// Confirms on a live read what was decided on the remembered copy at `version`
    /// without a successful write: it stands when the object is still at that version;
    /// otherwise the copy was stale, and the next attempt decides again on a live read.
    pub async fn confirm(
        &self,
        request: &ObjectPath,
        version: &str,
        deadline: AnswerBy,
        made: u32,
    ) -> Confirmed {
        match self.read(request, deadline, made).await {
            Read::Found(live) if resource_version(&live) == version => Confirmed::Current,
            Read::Found(_) | Read::Missing(_) => {
                self.memory.learn(request.as_str(), Event::Contradicted);
                Confirmed::Stale
            }
            Read::Ended(answer, step) => Confirmed::Ended(answer, step),
        }
    }

    /// What a write made from `source` was answered, told to the memory: a success is
    /// returned parsed; a write from a copy that proved stale goes again from a live
    /// read, at once.
    pub fn after_write(
        &self,
        spec: &WriteSpec,
        request: &ObjectPath,
        source: Source,
        sent: &Sent,
    ) -> AfterWrite {
        let key = request.as_str();
        match sent {
            Sent::Answer(answer) if matches!(answer.code, 200 | 201) => {
                let object = answer.object().map(Arc::new);
                self.memory.learn(
                    key,
                    Event::Written {
                        from: source,
                        object: object.as_ref().ok(),
                        size: answer.body.len(),
                        dry_run: spec.dry_run,
                    },
                );
                AfterWrite::Written(object.map_err(Failure::BadAnswer))
            }
            Sent::Answer(answer) => {
                let refused = Event::Refused {
                    from: source,
                    code: answer.code,
                    already_exists: answer.reason() == "AlreadyExists",
                    strict: spec.preconditions.resource_version.is_some(),
                };
                match self.memory.learn(key, refused) {
                    Learned::CopyWasStale => AfterWrite::Stale,
                    Learned::Noted => AfterWrite::Refused,
                }
            }
            Sent::Failed(..) => {
                self.memory.learn(key, Event::AnswerLost);
                AfterWrite::Unanswered
            }
        }
    }
}

/// Why an attempt decided on a remembered copy goes again: the copy was stale.
pub(crate) fn stale_copy() -> Failure {
    Failure::Api {
        decision: Decision::Stale,
        code: 409,
        reason: "Conflict".into(),
        message: "the object changed since safewrite last read or wrote it".into(),
        status: None,
    }
}
