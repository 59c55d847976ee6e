//! Histories of real calls for the linearizability checker (`tests/linearizability`, Go,
//! porcupine): concurrent writers on ConfigMaps that model a counter, a register, a set
//! and a set of finalizers, and on objects of a test CRD whose status conditions model
//! a register per condition type, through real sidecars and the real API server, while
//! faults are injected in turn; every call is recorded with its call and return time
//! (one monotonic clock), what it asked and what it was answered, in the JSON the
//! checker reads.
//!
//! A run starts a control plane of its own (it stops the API server and etcd), a fault
//! proxy in front of it for the sidecars (live reads go straight to the API server), and
//! for each workload its sidecars (1 or 3, group commit on or off). It goes through
//! rounds: each round gets fresh objects, so that what a fault leaves open (answers that
//! may or may not have been applied) stays within one round's objects, and one
//! schedule of faults runs while every workload writes. The histories are written to
//! `<target dir>/linearizability/<name>.json` and [`check`] runs the checker on them.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use prost::Message;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

use safewrite_api::pb;
use safewrite_api::pb::transact_proposal::Change as Proposed;
use safewrite_api::pb::transact_request::Message as Req;
use safewrite_api::pb::transact_response::Message as Resp;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use super::faults::{Fault, HttpFaultProxy};
use super::{ControlPlane, Sidecar};

/// Set to a path, the sidecars run that binary instead of the one this build made (to
/// show the checker failing against an older sidecar).
pub const BINARY_ENV: &str = "SAFEWRITE_LINEARIZABILITY_BIN";

/// The sidecar binary the workloads run.
pub fn sidecar_binary() -> PathBuf {
    match std::env::var_os(BINARY_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_safewrite")),
    }
}

/// `<target dir>/linearizability`: the histories, the checker's HTML, the checker.
pub fn out_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().unwrap_or(tmp);
    target.join("linearizability")
}

/// What an object models, and where in the object its value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Model {
    /// A ConfigMap's `data.n`, a decimal count: `inc` (+1) and `read`.
    Counter,
    /// A ConfigMap's `data.v`: `write`, `cas`, `cas_rv` and `read`.
    Register,
    /// A ConfigMap's `data.items`, comma-separated (empty = empty): keyed `append` and
    /// `read`.
    Set,
    /// A test CRD object's `status.conditions` (through its status subresource):
    /// `set_condition` and `read`.
    Conditions,
    /// A ConfigMap's `metadata.finalizers`: `add`, `remove` and `read`.
    Finalizers,
}

/// The test CRD whose objects hold the conditions (namespaced, with a status
/// subresource).
const CRD_PLURAL: &str = "linwidgets";
const CRD_KIND: &str = "LinWidget";
const CRD_GROUP: &str = "test.safewrite.dev";

/// The condition types, statuses and reasons the writers set.
const CONDITION_TYPES: [&str; 3] = ["Ready", "Synced", "Degraded"];
const CONDITION_STATUSES: [&str; 2] = ["True", "False"];
const CONDITION_REASONS: [&str; 2] = ["Reconciled", "Waiting"];

/// The finalizers the writers add and remove.
const FINALIZERS: [&str; 4] = [
    "lin.safewrite.dev/a",
    "lin.safewrite.dev/b",
    "lin.safewrite.dev/c",
    "lin.safewrite.dev/d",
];

impl Model {
    pub const ALL: [Model; 5] = [
        Model::Counter,
        Model::Register,
        Model::Set,
        Model::Conditions,
        Model::Finalizers,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Model::Counter => "counter",
            Model::Register => "register",
            Model::Set => "set",
            Model::Conditions => "conditions",
            Model::Finalizers => "finalizers",
        }
    }

    /// The ConfigMap `data` field of the models that keep their value there.
    fn field(self) -> Option<&'static str> {
        match self {
            Model::Counter => Some("n"),
            Model::Register => Some("v"),
            Model::Set => Some("items"),
            Model::Conditions | Model::Finalizers => None,
        }
    }

    fn initial(self) -> &'static str {
        match self {
            Model::Counter => "0",
            Model::Register => "init",
            Model::Set | Model::Conditions | Model::Finalizers => "",
        }
    }

    /// The kind of object the model's writers write.
    fn resource(self) -> ApiResource {
        match self {
            Model::Conditions => ApiResource {
                group: CRD_GROUP.into(),
                version: "v1".into(),
                api_version: format!("{CRD_GROUP}/v1"),
                kind: CRD_KIND.into(),
                plural: CRD_PLURAL.into(),
            },
            _ => ApiResource::erase::<ConfigMap>(&()),
        }
    }

    /// A fresh object of the model, named `name`.
    fn object(self, name: &str) -> DynamicObject {
        let r = self.resource();
        let mut object = json!({
            "apiVersion": r.api_version, "kind": r.kind,
            "metadata": {"name": name},
        });
        match self.field() {
            Some(field) => object["data"] = json!({field: self.initial()}),
            None if self == Model::Conditions => object["spec"] = json!({}),
            None => {}
        }
        serde_json::from_value(object).expect("an object")
    }

    /// The model's value in an object, as the checker reads it: a `data` field; the
    /// conditions as `type=status/reason@lastTransitionTime` joined by `;`; the
    /// finalizers joined by `,`.
    fn value_of(self, object: &Value) -> String {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        match self.field() {
            Some(field) => text(&object["data"][field]),
            None if self == Model::Conditions => object["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{}={}/{}@{}",
                        text(&c["type"]),
                        text(&c["status"]),
                        text(&c["reason"]),
                        text(&c["lastTransitionTime"])
                    )
                })
                .collect::<Vec<_>>()
                .join(";"),
            None => object["metadata"]["finalizers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// One workload: its sidecars and whether they commit in groups.
#[derive(Debug, Clone)]
pub struct Workload {
    pub name: String,
    pub sidecars: usize,
    pub group_commit: bool,
}

impl Workload {
    pub fn new(prefix: &str, sidecars: usize, group_commit: bool) -> Workload {
        let plural = if sidecars == 1 { "" } else { "s" };
        let group = if group_commit { "group" } else { "nogroup" };
        Workload {
            name: format!("{prefix}-{sidecars}sidecar{plural}-{group}"),
            sidecars,
            group_commit,
        }
    }
}

/// One step of a round's fault schedule.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// Nothing injected for this long.
    Healthy(Duration),
    /// The fault proxy injects `fault` into every `every`-th request (writes only when
    /// `writes_only`) for this long, then passes again.
    Proxy {
        fault: Fault,
        every: u64,
        writes_only: bool,
        hold: Duration,
    },
    /// kube-apiserver stopped, down this long, started again (returns when ready).
    StopApiServer(Duration),
    /// etcd stopped, down this long, started again.
    StopEtcd(Duration),
}

/// A round: fresh objects, writers on them, and a fault schedule; the writers stop when
/// the schedule ends.
#[derive(Debug, Clone)]
pub struct Round {
    pub name: &'static str,
    pub steps: Vec<Step>,
}

/// Keep cycling through the rounds until both are reached (and fail past `limit`).
#[derive(Debug, Clone, Copy)]
pub struct Cycle {
    pub min_duration: Duration,
    pub min_operations: u64,
    pub limit: Duration,
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub workloads: Vec<Workload>,
    pub rounds: Vec<Round>,
    pub cycle: Option<Cycle>,
    /// Objects of each model per workload and round.
    pub objects_per_model: usize,
    /// Concurrent writers per object (each also reads the object live now and then).
    pub writers_per_object: usize,
    /// Concurrent writers per conditions or finalizers object; 0: `writers_per_object`.
    pub writers_per_list: usize,
    /// Mean pause between one writer's calls (exponentially distributed: bursts form).
    pub think: Duration,
    /// The deadline of every call.
    pub deadline: Duration,
    /// Extra flags for every sidecar.
    pub sidecar_args: Vec<String>,
}

impl Plan {
    /// Concurrent writers per object of the model.
    pub fn writers(&self, model: Model) -> usize {
        match model {
            Model::Conditions | Model::Finalizers if self.writers_per_list > 0 => {
                self.writers_per_list
            }
            _ => self.writers_per_object,
        }
    }

    /// The four workloads: 1 and 3 sidecars, group commit on and off.
    pub fn four_workloads(prefix: &str) -> Vec<Workload> {
        vec![
            Workload::new(prefix, 1, true),
            Workload::new(prefix, 1, false),
            Workload::new(prefix, 3, true),
            Workload::new(prefix, 3, false),
        ]
    }

    /// Every fault kind once: the proxy hanging, resetting requests before forwarding
    /// them and dropping answers after the commit; the API server stopped; etcd stopped.
    pub fn every_fault_once() -> Vec<Round> {
        let s = Duration::from_secs_f64;
        vec![
            Round {
                name: "proxy: hang, reset before forwarding, drop answers after the commit",
                steps: vec![
                    Step::Healthy(s(0.5)),
                    Step::Proxy {
                        fault: Fault::Hang,
                        every: 1,
                        writes_only: false,
                        hold: s(1.5),
                    },
                    Step::Healthy(s(0.5)),
                    Step::Proxy {
                        fault: Fault::ResetBeforeForward,
                        every: 3,
                        writes_only: false,
                        hold: s(1.5),
                    },
                    Step::Healthy(s(0.5)),
                    Step::Proxy {
                        fault: Fault::DropAnswer,
                        every: 4,
                        writes_only: true,
                        hold: s(2.0),
                    },
                    Step::Healthy(s(1.0)),
                ],
            },
            Round {
                name: "kube-apiserver stopped and started",
                steps: vec![
                    Step::Healthy(s(0.5)),
                    Step::StopApiServer(s(1.0)),
                    Step::Healthy(s(1.5)),
                ],
            },
            Round {
                name: "etcd stopped and started",
                steps: vec![
                    Step::Healthy(s(0.5)),
                    Step::StopEtcd(s(0.5)),
                    Step::Healthy(s(2.0)),
                ],
            },
        ]
    }
}

/// What one call asked.
#[derive(Debug, Clone, Default)]
struct Input {
    from: String,
    to: String,
    value: String,
    rv: String,
    /// A set_condition's condition (`ltt` empty: the time of the write).
    condition: Option<ConditionInput>,
}

#[derive(Debug, Clone)]
struct ConditionInput {
    type_: String,
    status: String,
    reason: String,
    ltt: String,
}

/// One call and its answer, as the checker reads it.
#[derive(Debug, Clone)]
pub struct Op {
    pub client: usize,
    pub object: String,
    pub call: u64,
    pub ret: u64,
    pub kind: &'static str,
    pub via: &'static str,
    input: Input,
    pub result: &'static str,
    pub code: String,
    pub reason: String,
    pub value: String,
    pub rv: String,
}

impl Op {
    fn to_json(&self) -> Value {
        let mut input = json!({
            "from": self.input.from, "to": self.input.to,
            "value": self.input.value, "rv": self.input.rv,
        });
        if let Some(c) = &self.input.condition {
            input["type"] = json!(c.type_);
            input["status"] = json!(c.status);
            input["reason"] = json!(c.reason);
            input["ltt"] = json!(c.ltt);
        }
        json!({
            "client": self.client, "object": self.object,
            "call": self.call, "return": self.ret,
            "kind": self.kind, "via": self.via,
            "input": input,
            "result": self.result, "code": self.code, "reason": self.reason,
            "value": self.value, "rv": self.rv,
        })
    }
}

/// An object of a history.
#[derive(Debug, Clone)]
pub struct Object {
    pub key: String,
    pub model: Model,
    pub initial_rv: String,
}

/// The gRPC name of a code.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The `safewrite.v1.WriteFailure` detail of a failed RPC.
pub fn write_failure(status: &tonic::Status) -> Option<pb::WriteFailure> {
    let details = tonic_types::pb::Status::decode(status.details()).ok()?;
    details
        .details
        .iter()
        .find(|d| d.type_url.ends_with("safewrite.v1.WriteFailure"))
        .and_then(|d| pb::WriteFailure::decode(d.value.as_slice()).ok())
}

/// The `google.rpc.RetryInfo` delay of a failed RPC.
pub fn retry_delay(status: &tonic::Status) -> Option<Duration> {
    let details = tonic_types::pb::Status::decode(status.details()).ok()?;
    let info = details
        .details
        .iter()
        .find(|d| d.type_url.ends_with("google.rpc.RetryInfo"))
        .and_then(|d| tonic_types::pb::RetryInfo::decode(d.value.as_slice()).ok())?;
    let delay = info.retry_delay?;
    Some(Duration::new(
        delay.seconds.max(0) as u64,
        delay.nanos.max(0) as u32,
    ))
}

/// An answer, reduced to what a history records.
#[derive(Debug, Clone)]
struct Answer {
    result: &'static str,
    code: String,
    reason: String,
    object: Option<Value>,
    rv: String,
    /// When to try again (RetryInfo), for a failure.
    retry_after: Option<Duration>,
}

impl Answer {
    fn of_result(result: &pb::WriteResult) -> Answer {
        let kind = match result.outcome() {
            pb::Outcome::Updated | pb::Outcome::Created if result.already_applied => {
                "already_applied"
            }
            pb::Outcome::Updated | pb::Outcome::Created => "ok",
            pb::Outcome::Unchanged => "unchanged",
            pb::Outcome::Aborted => "aborted",
            // No workload deletes its objects: a model that meets it rejects it.
            pb::Outcome::Gone => "gone",
            pb::Outcome::Unspecified => "unknown",
        };
        let object: Option<Value> = serde_json::from_str(&result.object_json).ok();
        let rv = if result.resource_version.is_empty() {
            object.as_ref().map(resource_version).unwrap_or_default()
        } else {
            result.resource_version.clone()
        };
        Answer {
            result: kind,
            code: "OK".into(),
            reason: String::new(),
            object,
            rv,
            retry_after: None,
        }
    }

    /// A failed RPC. `keyed`: the call carried an idempotency key.
    fn of_status(status: &tonic::Status, keyed: bool) -> Answer {
        let failure = write_failure(status);
        let nothing_sent = failure
            .as_ref()
            .is_some_and(|f| f.attempt_records.is_empty());
        let result = match status.code() {
            Code::FailedPrecondition => "precondition_failed",
            Code::Aborted | Code::InvalidArgument | Code::NotFound | Code::PermissionDenied => {
                "aborted"
            }
            // Refused before anything reached the API server, and no key whose earlier
            // lost attempt could have been committed: no effect.
            Code::ResourceExhausted if !keyed && nothing_sent => "aborted",
            _ => "unknown",
        };
        let object: Option<Value> = failure
            .as_ref()
            .filter(|f| !f.current_object_json.is_empty())
            .and_then(|f| serde_json::from_str(&f.current_object_json).ok());
        let rv = object.as_ref().map(resource_version).unwrap_or_default();
        Answer {
            result,
            code: code_name(status.code()).into(),
            reason: super::error_reason(status),
            object,
            rv,
            retry_after: retry_delay(status),
        }
    }

    /// The caller's own deadline guard fired: no answer at all.
    fn no_answer(reason: &str) -> Answer {
        Answer {
            result: "unknown",
            code: "DEADLINE_EXCEEDED".into(),
            reason: reason.into(),
            object: None,
            rv: String::new(),
            retry_after: None,
        }
    }
}

fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn target(model: Model, ns: &str, name: &str) -> Option<pb::ObjectRef> {
    let r = model.resource();
    Some(pb::ObjectRef {
        api_version: r.api_version,
        kind: r.kind,
        namespace: ns.into(),
        name: name.into(),
    })
}

fn cel(expression: String) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::Cel(pb::CelMutation { expression })),
    })
}

fn merge(patch: Value) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
            patch_json: patch.to_string(),
        })),
    })
}

fn json_patch(patch: Value) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::JsonPatch(pb::JsonPatch {
            patch_json: patch.to_string(),
        })),
    })
}

/// A small retry policy: conflicts are retried, not for long.
fn retry_policy() -> Option<pb::RetryPolicy> {
    Some(pb::RetryPolicy {
        max_attempts: 20,
        initial_backoff: Some(prost_types::Duration {
            seconds: 0,
            nanos: 10_000_000,
        }),
        max_backoff: Some(prost_types::Duration {
            seconds: 0,
            nanos: 250_000_000,
        }),
        requeue: false,
    })
}

/// The CEL expression appending `item` to `data.items`.
fn append_expression(item: &str) -> String {
    format!(
        r#"{{"data": {{"items": object.data.items == "" ? "{item}" : object.data.items + ",{item}"}}}}"#
    )
}

/// The idempotency key of an append: derived from the item, so a re-sent append
/// carries the same key.
fn append_key(name: &str, item: &str) -> String {
    format!("lin-{name}-{item}")
}

/// Runs one Transact whose code is `f` (fresh object -> proposal) to its end.
async fn transact(
    client: &mut WriterServiceClient<Channel>,
    begin: pb::TransactBegin,
    deadline: Duration,
    mut f: impl FnMut(&Value) -> Proposed,
) -> Result<pb::WriteResult, tonic::Status> {
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::TransactRequest {
        message: Some(Req::Begin(begin)),
    })
    .await
    .map_err(|_| tonic::Status::internal("the request stream closed"))?;
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request.set_timeout(deadline);
    let mut answers = client.transact(request).await?.into_inner();
    while let Some(answer) = answers.message().await? {
        match answer.message {
            Some(Resp::Fresh(fresh)) => {
                let object: Value = serde_json::from_str(&fresh.object_json).unwrap_or_default();
                let change = f(&object);
                // A closed stream shows in the answers.
                let _ = tx
                    .send(pb::TransactRequest {
                        message: Some(Req::Proposal(pb::TransactProposal {
                            attempt: fresh.attempt,
                            change: Some(change),
                        })),
                    })
                    .await;
            }
            Some(Resp::Result(result)) => return Ok(result),
            None => return Err(tonic::Status::internal("an empty answer")),
        }
    }
    Err(tonic::Status::unknown("the stream ended without a result"))
}

/// Where in a run a writer works and how it records.
struct Writer {
    client_id: usize,
    client: WriterServiceClient<Channel>,
    api: Api<DynamicObject>,
    ns: String,
    name: String,
    key: String,
    model: Model,
    origin: Instant,
    deadline: Duration,
    think: Duration,
    last_value: String,
    last_rv: String,
    seq: u64,
    /// Appends answered `unknown`, to be sent again with the same key.
    pending: VecDeque<String>,
    rng: fastrand::Rng,
    ops: Vec<Op>,
    /// Consecutive calls that ended without a definite answer.
    failures: u32,
}

impl Writer {
    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn fresh_value(&mut self) -> String {
        self.seq += 1;
        format!("c{}-{}", self.client_id, self.seq)
    }

    fn record(
        &mut self,
        kind: &'static str,
        via: &'static str,
        input: Input,
        call: u64,
        a: &Answer,
    ) {
        let ret = self.now().max(call);
        let value = a
            .object
            .as_ref()
            .map(|o| self.model.value_of(o))
            .unwrap_or_default();
        if a.object.is_some() && a.result != "unknown" {
            self.last_value = value.clone();
            if !a.rv.is_empty() {
                self.last_rv = a.rv.clone();
            }
        }
        self.ops.push(Op {
            client: self.client_id,
            object: self.key.clone(),
            call,
            ret,
            kind,
            via,
            input,
            result: a.result,
            code: a.code.clone(),
            reason: a.reason.clone(),
            value,
            rv: a.rv.clone(),
        });
        // Live reads go straight to the API server: only the sidecar's answers pace
        // the writer.
        if kind != "read" {
            if a.result == "unknown" {
                self.failures += 1;
            } else {
                self.failures = 0;
            }
        }
    }

    /// UpdateWithRetry, its answer classified.
    async fn update(&mut self, request: pb::UpdateWithRetryRequest) -> Answer {
        let keyed = request
            .options
            .as_ref()
            .is_some_and(|o| !o.idempotency_key.is_empty());
        let mut request = tonic::Request::new(request);
        request.set_timeout(self.deadline);
        let guard = self.deadline + Duration::from_secs(2);
        match tokio::time::timeout(guard, self.client.update_with_retry(request)).await {
            Ok(Ok(response)) => match response.into_inner().result {
                Some(result) => Answer::of_result(&result),
                None => Answer::no_answer("NO_RESULT"),
            },
            Ok(Err(status)) => Answer::of_status(&status, keyed),
            Err(_) => Answer::no_answer("CLIENT_DEADLINE"),
        }
    }

    /// PatchStatus, its answer classified.
    async fn patch_status(&mut self, request: pb::PatchStatusRequest) -> Answer {
        let mut request = tonic::Request::new(request);
        request.set_timeout(self.deadline);
        let guard = self.deadline + Duration::from_secs(2);
        match tokio::time::timeout(guard, self.client.patch_status(request)).await {
            Ok(Ok(response)) => match response.into_inner().result {
                Some(result) => Answer::of_result(&result),
                None => Answer::no_answer("NO_RESULT"),
            },
            Ok(Err(status)) => Answer::of_status(&status, false),
            Err(_) => Answer::no_answer("CLIENT_DEADLINE"),
        }
    }

    /// Transact with the caller's code `f`, its answer classified.
    async fn transact(&mut self, f: impl FnMut(&Value) -> Proposed) -> Answer {
        let begin = pb::TransactBegin {
            target: target(self.model, &self.ns, &self.name),
            retry_policy: retry_policy(),
            ..Default::default()
        };
        let guard = self.deadline + Duration::from_secs(2);
        let deadline = self.deadline;
        match tokio::time::timeout(guard, transact(&mut self.client, begin, deadline, f)).await {
            Ok(Ok(result)) => Answer::of_result(&result),
            Ok(Err(status)) => Answer::of_status(&status, false),
            Err(_) => Answer::no_answer("CLIENT_DEADLINE"),
        }
    }

    fn request(&self, mutation: Option<pb::Mutation>) -> pb::UpdateWithRetryRequest {
        pb::UpdateWithRetryRequest {
            target: target(self.model, &self.ns, &self.name),
            mutation,
            retry_policy: retry_policy(),
            ..Default::default()
        }
    }

    /// A live GET straight from the API server.
    async fn read(&mut self) {
        let call = self.now();
        let answer = match tokio::time::timeout(self.deadline, self.api.get(&self.name)).await {
            Ok(Ok(got)) => {
                let object = serde_json::to_value(&got).unwrap_or_default();
                Answer {
                    result: "ok",
                    code: "OK".into(),
                    reason: String::new(),
                    rv: resource_version(&object),
                    object: Some(object),
                    retry_after: None,
                }
            }
            // A read that got no object changes nothing and shows nothing.
            Ok(Err(kube::Error::Api(status))) => Answer {
                result: "unknown",
                code: format!("HTTP_{}", status.code),
                reason: status.reason.clone(),
                object: None,
                rv: String::new(),
                retry_after: None,
            },
            Ok(Err(_)) => Answer {
                result: "unknown",
                code: "TRANSPORT".into(),
                reason: "kube client error".into(),
                object: None,
                rv: String::new(),
                retry_after: None,
            },
            Err(_) => Answer::no_answer("CLIENT_DEADLINE"),
        };
        self.record("read", "live_read", Input::default(), call, &answer);
    }

    async fn inc_cel(&mut self) -> Answer {
        let request = self.request(cel(super::INCREMENT.into()));
        let call = self.now();
        let answer = self.update(request).await;
        self.record("inc", "cel", Input::default(), call, &answer);
        answer
    }

    async fn inc_transact(&mut self) -> Answer {
        let call = self.now();
        let answer = self
            .transact(|fresh| {
                let mut object = fresh.clone();
                let n: i64 = object["data"]["n"]
                    .as_str()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_default();
                object["data"]["n"] = json!((n + 1).to_string());
                Proposed::ObjectJson(object.to_string())
            })
            .await;
        self.record("inc", "transact", Input::default(), call, &answer);
        answer
    }

    async fn write_merge(&mut self) -> Answer {
        // One write in four sets the value this writer last saw: UNCHANGED when nobody
        // changed it since, so that answers which write nothing are checked too.
        let value = if self.rng.usize(..4) == 0 && !self.last_value.is_empty() {
            self.last_value.clone()
        } else {
            self.fresh_value()
        };
        let request = self.request(merge(json!({"data": {"v": value}})));
        let call = self.now();
        let answer = self.update(request).await;
        let input = Input {
            value,
            ..Default::default()
        };
        self.record("write", "merge", input, call, &answer);
        answer
    }

    async fn cas(&mut self, via: &'static str) -> Answer {
        let (from, to) = (self.last_value.clone(), self.fresh_value());
        let call;
        let answer = match via {
            "cel_precondition" => {
                let mut request = self.request(merge(json!({"data": {"v": to}})));
                request.preconditions = Some(pb::Preconditions {
                    cel: format!(r#"object.data.v == "{from}""#),
                    ..Default::default()
                });
                call = self.now();
                self.update(request).await
            }
            "json_patch_test" => {
                let request = self.request(json_patch(json!([
                    {"op": "test", "path": "/data/v", "value": from},
                    {"op": "replace", "path": "/data/v", "value": to},
                ])));
                call = self.now();
                self.update(request).await
            }
            _ => {
                call = self.now();
                let (from, to) = (from.clone(), to.clone());
                self.transact(move |fresh| {
                    if fresh["data"]["v"].as_str() == Some(from.as_str()) {
                        let mut object = fresh.clone();
                        object["data"]["v"] = json!(to);
                        Proposed::ObjectJson(object.to_string())
                    } else {
                        Proposed::Abort(pb::TransactAbort {
                            reason: "data.v is not the value expected".into(),
                        })
                    }
                })
                .await
            }
        };
        let input = Input {
            from,
            to,
            ..Default::default()
        };
        self.record("cas", via, input, call, &answer);
        answer
    }

    async fn cas_rv(&mut self) -> Answer {
        let (rv, to) = (self.last_rv.clone(), self.fresh_value());
        let mut request = self.request(merge(json!({"data": {"v": to}})));
        request.preconditions = Some(pb::Preconditions {
            resource_version: rv.clone(),
            ..Default::default()
        });
        let call = self.now();
        let answer = self.update(request).await;
        let input = Input {
            to,
            rv,
            ..Default::default()
        };
        self.record("cas_rv", "rv_precondition", input, call, &answer);
        answer
    }

    async fn append(&mut self, item: String) -> Answer {
        let mut request = self.request(cel(append_expression(&item)));
        request.options = Some(pb::WriteOptions {
            idempotency_key: append_key(&self.name, &item),
            ..Default::default()
        });
        let call = self.now();
        let answer = self.update(request).await;
        let input = Input {
            value: item.clone(),
            ..Default::default()
        };
        self.record("append", "cel", input, call, &answer);
        if answer.result == "unknown" {
            self.pending.push_front(item);
        }
        answer
    }

    /// Sets one condition through the status subresource: a type, status and reason
    /// at random, and in one call of two a lastTransitionTime of its own (a time in
    /// 2001 no other call asks for), else the time of the write.
    async fn set_condition(&mut self) -> Answer {
        let pick =
            |rng: &mut fastrand::Rng, from: &[&str]| from[rng.usize(..from.len())].to_string();
        self.seq += 1;
        let ltt = if self.rng.bool() {
            let secs = 978_307_200 + self.client_id as u64 * 100_000 + self.seq;
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
            humantime::format_rfc3339_seconds(at).to_string()
        } else {
            String::new()
        };
        let condition = ConditionInput {
            type_: pick(&mut self.rng, &CONDITION_TYPES),
            status: pick(&mut self.rng, &CONDITION_STATUSES),
            reason: pick(&mut self.rng, &CONDITION_REASONS),
            ltt,
        };
        let request = pb::PatchStatusRequest {
            target: target(self.model, &self.ns, &self.name),
            mutation: Some(pb::Mutation {
                kind: Some(pb::mutation::Kind::SetCondition(pb::SetCondition {
                    conditions: vec![pb::Condition {
                        r#type: condition.type_.clone(),
                        status: condition.status.clone(),
                        reason: condition.reason.clone(),
                        last_transition_time: condition.ltt.clone(),
                        ..Default::default()
                    }],
                    path: String::new(),
                })),
            }),
            retry_policy: retry_policy(),
            ..Default::default()
        };
        let call = self.now();
        let answer = self.patch_status(request).await;
        let input = Input {
            condition: Some(condition),
            ..Default::default()
        };
        self.record("set_condition", "patch_status", input, call, &answer);
        answer
    }

    /// Adds or removes one finalizer, at random.
    async fn finalizer(&mut self) -> Answer {
        let value = FINALIZERS[self.rng.usize(..FINALIZERS.len())].to_string();
        let remove = self.rng.bool();
        let request = self.request(Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Finalizer(pb::FinalizerChange {
                finalizer: value.clone(),
                remove,
            })),
        }));
        let call = self.now();
        let answer = self.update(request).await;
        let input = Input {
            value,
            ..Default::default()
        };
        let kind = if remove { "remove" } else { "add" };
        self.record(kind, "finalizer", input, call, &answer);
        answer
    }

    /// One operation of this writer's model, chosen at random; its answer, or None for
    /// a read.
    async fn step(&mut self) -> Option<Answer> {
        let r = self.rng.f64();
        if r < 0.2 {
            self.read().await;
            return None;
        }
        Some(match self.model {
            Model::Counter if r < 0.6 => self.inc_cel().await,
            Model::Counter => self.inc_transact().await,
            Model::Register if r < 0.36 => self.write_merge().await,
            Model::Register if r < 0.52 => self.cas("cel_precondition").await,
            Model::Register if r < 0.68 => self.cas("json_patch_test").await,
            Model::Register if r < 0.84 => self.cas("transact").await,
            Model::Register => self.cas_rv().await,
            Model::Conditions => self.set_condition().await,
            Model::Finalizers => self.finalizer().await,
            // An append left open is sent again, with its key, before any new one, as a
            // controller retries the work item it has not finished.
            Model::Set => {
                let item = match self.pending.pop_front() {
                    Some(item) => item,
                    None => self.fresh_value(),
                };
                self.append(item).await
            }
        })
    }

    /// The pause before the next call: a think time, or after a call that got no
    /// definite answer, a backoff (the RetryInfo's delay when there is one), as a
    /// controller's work queue would wait.
    fn pause(&mut self, answer: Option<&Answer>) -> Duration {
        if self.failures > 0 {
            // 250 ms doubling to 3 s, and never sooner than the sidecar said.
            let exp = Duration::from_millis(250) * (1 << (self.failures - 1).min(4));
            let hint = answer.and_then(|a| a.retry_after).unwrap_or_default();
            let wait = exp.max(hint).min(Duration::from_secs(3));
            return wait.mul_f64(0.75 + 0.5 * self.rng.f64());
        }
        let u = self.rng.f64().max(1e-9);
        self.think.mul_f64((-u.ln()).min(5.0))
    }

    /// Calls until the round ends (a pause is cut short by the end), then sends again
    /// what was left open.
    async fn run(mut self, mut stop: watch::Receiver<bool>, ops: Arc<AtomicU64>) -> Writer {
        let first = self.think.mul_f64(self.rng.f64());
        let _ = tokio::time::timeout(first, stop.wait_for(|stop| *stop)).await;
        while !*stop.borrow() {
            let answer = self.step().await;
            ops.fetch_add(1, Ordering::Relaxed);
            let pause = self.pause(answer.as_ref());
            let _ = tokio::time::timeout(pause, stop.wait_for(|stop| *stop)).await;
        }
        // What was left open is sent again with the same key, as a controller would.
        for tries in 0..3 {
            let Some(item) = self.pending.pop_front() else {
                break;
            };
            if tries > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            self.append(item).await;
            ops.fetch_add(1, Ordering::Relaxed);
        }
        self
    }
}

/// One workload's sidecars and what it recorded.
struct Running {
    spec: Workload,
    ns: String,
    client: kube::Client,
    sidecars: Vec<Sidecar>,
    channels: Vec<Channel>,
    objects: Vec<Object>,
    ops: Vec<Op>,
    next_client: usize,
}

/// What a run recorded.
pub struct Run {
    /// Per workload: its name, history file, objects and operations.
    pub histories: Vec<History>,
    /// Faults injected, by kind (proxy counters, and API server / etcd stops).
    pub faults: BTreeMap<String, u64>,
    pub rounds: usize,
    pub took: Duration,
}

pub struct History {
    pub name: String,
    pub file: PathBuf,
    pub objects: Vec<Object>,
    pub ops: Vec<Op>,
}

fn block<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> tokio::task::JoinHandle<T> {
    tokio::task::spawn_blocking(f)
}

/// Runs one fault step; records what was injected.
async fn fault_step(
    step: Step,
    cp: &Arc<ControlPlane>,
    proxy: &HttpFaultProxy,
    faults: &mut BTreeMap<String, u64>,
    started: Instant,
) {
    let at = started.elapsed().as_secs_f64();
    match step {
        Step::Healthy(d) => tokio::time::sleep(d).await,
        Step::Proxy {
            fault,
            every,
            writes_only,
            hold,
        } => {
            let before = (
                proxy.count(|c| &c.injected),
                proxy.count(|c| &c.writes_reset),
                proxy.count(|c| &c.committed_and_dropped),
            );
            proxy.inject(fault, every, writes_only);
            tokio::time::sleep(hold).await;
            proxy.pass();
            let injected = proxy.count(|c| &c.injected) - before.0;
            let name = match fault {
                Fault::Hang => "proxy hang (requests hung)",
                Fault::ResetBeforeForward => "proxy reset before forwarding",
                Fault::DropAnswer => "proxy answer dropped after forwarding",
                Fault::TooManyRequests => "proxy 429",
                Fault::Unavailable => "proxy 503",
                Fault::Latency(_) => "proxy latency",
                Fault::Gate => "proxy gate (requests held)",
                Fault::Pass => "proxy pass",
            };
            *faults.entry(name.into()).or_default() += injected;
            match fault {
                Fault::ResetBeforeForward => {
                    *faults
                        .entry("  of them writes reset before forwarding".into())
                        .or_default() += proxy.count(|c| &c.writes_reset) - before.1;
                }
                Fault::DropAnswer => {
                    *faults
                        .entry("  of them writes committed and answer dropped".into())
                        .or_default() += proxy.count(|c| &c.committed_and_dropped) - before.2;
                }
                _ => {}
            }
            eprintln!(
                "linearizability: {at:>6.1}s proxy {fault:?} every {every}{} for {hold:?}: {injected} injected",
                if writes_only { " write" } else { "" }
            );
        }
        Step::StopApiServer(down) => {
            let c = cp.clone();
            block(move || c.stop_apiserver()).await.expect("stop");
            tokio::time::sleep(down).await;
            let c = cp.clone();
            block(move || c.start_apiserver()).await.expect("start");
            *faults.entry("kube-apiserver stopped".into()).or_default() += 1;
            eprintln!(
                "linearizability: {at:>6.1}s kube-apiserver stopped, down {down:?}, ready again after {:.1}s",
                started.elapsed().as_secs_f64() - at
            );
        }
        Step::StopEtcd(down) => {
            let c = cp.clone();
            block(move || c.stop_etcd()).await.expect("stop");
            tokio::time::sleep(down).await;
            let c = cp.clone();
            block(move || c.start_etcd()).await.expect("start");
            *faults.entry("etcd stopped".into()).or_default() += 1;
            eprintln!(
                "linearizability: {at:>6.1}s etcd stopped, down {down:?}, healthy again after {:.1}s",
                started.elapsed().as_secs_f64() - at
            );
        }
    }
}

/// Creates an object of a round, waiting (at most 30 s) for an API server that is
/// still recovering from the last round's fault.
async fn create(api: &Api<DynamicObject>, object: &DynamicObject) -> DynamicObject {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let started = Instant::now();
    loop {
        let error = match api.create(&PostParams::default(), object).await {
            Ok(created) => return created,
            // An earlier try was created though its answer was lost; no writer has
            // started on it yet.
            Err(kube::Error::Api(status)) if status.code == 409 => match api.get(name).await {
                Ok(existing) => return existing,
                Err(e) => e,
            },
            Err(e) => e,
        };
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "create {name} for a round: {error}"
        );
        eprintln!("linearizability: creating {name}: {error}; trying again");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs the plan against a control plane of its own and writes the histories.
pub async fn run(plan: &Plan) -> Run {
    let cp = Arc::new(ControlPlane::start());
    let proxy = HttpFaultProxy::start(&cp).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = proxy.kubeconfig(&cp, dir.path());
    let kubeconfig = kubeconfig.to_str().expect("utf-8").to_string();
    let binary = sidecar_binary();
    eprintln!("linearizability: sidecar binary {}", binary.display());
    let admin = cp.admin_client().await;
    super::install_crd(&admin, CRD_PLURAL, CRD_KIND).await;

    let mut workloads = Vec::new();
    for spec in &plan.workloads {
        let ns = cp.namespace("lin").await;
        let mut args: Vec<&str> = vec![
            "--kubeconfig",
            &kubeconfig,
            "--request-timeout",
            "2s",
            "--breaker-cooldown",
            "500ms",
            "--breaker-max-cooldown",
            "2s",
        ];
        if !spec.group_commit {
            args.push("--no-group-commit");
        }
        args.extend(plan.sidecar_args.iter().map(String::as_str));
        let sidecars: Vec<Sidecar> = (0..spec.sidecars)
            .map(|_| Sidecar::start_binary(&binary, &args))
            .collect();
        let mut channels = Vec::new();
        for sidecar in &sidecars {
            channels.push(sidecar.channel().await);
        }
        workloads.push(Running {
            spec: spec.clone(),
            client: admin.clone(),
            ns,
            sidecars,
            channels,
            objects: Vec::new(),
            ops: Vec::new(),
            next_client: 0,
        });
    }

    let origin = Instant::now();
    let ops_done = Arc::new(AtomicU64::new(0));
    let mut faults = BTreeMap::new();
    let mut rounds = 0usize;
    loop {
        let round = &plan.rounds[rounds % plan.rounds.len()];
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        // The round's objects, created all at once.
        let mut creating = Vec::new();
        for (w, workload) in workloads.iter().enumerate() {
            for model in Model::ALL {
                for i in 0..plan.objects_per_model {
                    let name = format!("r{rounds}-{}-{i}", model.name());
                    let api: Api<DynamicObject> = Api::namespaced_with(
                        workload.client.clone(),
                        &workload.ns,
                        &model.resource(),
                    );
                    creating.push(async move {
                        let created = create(&api, &model.object(&name)).await;
                        (w, model, name, api, created)
                    });
                }
            }
        }
        for (w, model, name, api, created) in futures::future::join_all(creating).await {
            let workload = &mut workloads[w];
            let rv = created.metadata.resource_version.unwrap_or_default();
            let key = format!("{}/{name}", workload.ns);
            workload.objects.push(Object {
                key: key.clone(),
                model,
                initial_rv: rv.clone(),
            });
            for _ in 0..plan.writers(model) {
                let client_id = workload.next_client;
                workload.next_client += 1;
                let channel = workload.channels[client_id % workload.channels.len()].clone();
                let writer = Writer {
                    client_id,
                    client: WriterServiceClient::new(channel),
                    api: api.clone(),
                    ns: workload.ns.clone(),
                    name: name.clone(),
                    key: key.clone(),
                    model,
                    origin,
                    deadline: plan.deadline,
                    think: plan.think,
                    last_value: model.initial().into(),
                    last_rv: rv.clone(),
                    seq: 0,
                    pending: VecDeque::new(),
                    rng: fastrand::Rng::with_seed(
                        (rounds as u64) << 32 | (w as u64) << 24 | client_id as u64,
                    ),
                    ops: Vec::new(),
                    failures: 0,
                };
                tasks.push((
                    w,
                    tokio::spawn(writer.run(stopped.clone(), ops_done.clone())),
                ));
            }
        }
        let at = origin.elapsed().as_secs_f64();
        eprintln!(
            "linearizability: {at:>6.1}s round {rounds}: {} ({} writers)",
            round.name,
            tasks.len()
        );
        for step in &round.steps {
            fault_step(*step, &cp, &proxy, &mut faults, origin).await;
        }
        let _ = stop.send(true);
        for (w, task) in tasks {
            let writer = task.await.expect("a writer");
            workloads[w].ops.extend(writer.ops);
        }
        rounds += 1;
        let done = ops_done.load(Ordering::Relaxed);
        eprintln!(
            "linearizability: {:>6.1}s round {} done, {done} operations so far",
            origin.elapsed().as_secs_f64(),
            rounds - 1
        );
        let more = match plan.cycle {
            None => rounds < plan.rounds.len(),
            Some(cycle) => {
                assert!(
                    origin.elapsed() < cycle.limit,
                    "the run did not reach {} operations within {:?}",
                    cycle.min_operations,
                    cycle.limit
                );
                origin.elapsed() < cycle.min_duration || done < cycle.min_operations
            }
        };
        if !more {
            break;
        }
    }
    let took = origin.elapsed();

    let out = out_dir();
    std::fs::create_dir_all(&out).expect("create the histories' directory");
    let mut histories = Vec::new();
    for mut workload in workloads {
        workload.ops.sort_by_key(|op| (op.call, op.ret, op.client));
        let file = out.join(format!("{}.json", workload.spec.name));
        write_history(&file, &workload.spec.name, &workload.objects, &workload.ops);
        for sidecar in &mut workload.sidecars {
            sidecar.terminate(Duration::from_secs(5));
        }
        histories.push(History {
            name: workload.spec.name,
            file,
            objects: workload.objects,
            ops: workload.ops,
        });
    }
    Run {
        histories,
        faults,
        rounds,
        took,
    }
}

fn write_history(file: &Path, name: &str, objects: &[Object], ops: &[Op]) {
    use std::io::Write;
    let objects: Vec<Value> = objects
        .iter()
        .map(|o| {
            json!({
                "key": o.key, "model": o.model.name(),
                "initial": o.model.initial(), "initial_rv": o.initial_rv,
            })
        })
        .collect();
    let f = std::fs::File::create(file).expect("create a history file");
    let mut w = std::io::BufWriter::new(f);
    // One operation a line: the file stays readable and diffable at any size.
    write!(
        w,
        "{{\n\"name\": {},\n\"objects\": {},\n\"operations\": [",
        json!(name),
        Value::Array(objects)
    )
    .expect("write");
    for (i, op) in ops.iter().enumerate() {
        let sep = if i == 0 { "\n" } else { ",\n" };
        write!(w, "{sep}{}", op.to_json()).expect("write");
    }
    writeln!(w, "\n]\n}}").expect("write");
    w.flush().expect("flush");
}

impl Run {
    pub fn operations(&self) -> usize {
        self.histories.iter().map(|h| h.ops.len()).sum()
    }

    pub fn unknowns(&self) -> usize {
        self.histories
            .iter()
            .flat_map(|h| &h.ops)
            .filter(|op| op.result == "unknown" && op.kind != "read")
            .count()
    }

    pub fn files(&self) -> Vec<PathBuf> {
        self.histories.iter().map(|h| h.file.clone()).collect()
    }

    /// Prints the figures: operations and results per workload, every code/reason met
    /// (with the ways of calling that met it), and the faults injected.
    pub fn print(&self) {
        eprintln!(
            "linearizability: {} rounds, {:.1}s, {} operations ({} writes without a definite answer)",
            self.rounds,
            self.took.as_secs_f64(),
            self.operations(),
            self.unknowns()
        );
        for h in &self.histories {
            let mut results: BTreeMap<(&str, &str), u64> = BTreeMap::new();
            let mut codes: BTreeMap<(&str, &str, &str), BTreeMap<&str, u64>> = BTreeMap::new();
            for op in &h.ops {
                *results.entry((op.kind, op.result)).or_default() += 1;
                *codes
                    .entry((op.code.as_str(), op.reason.as_str(), op.result))
                    .or_default()
                    .entry(op.via)
                    .or_default() += 1;
            }
            eprintln!(
                "linearizability: {} ({} objects, {} operations) -> {}",
                h.name,
                h.objects.len(),
                h.ops.len(),
                h.file.display()
            );
            let results: Vec<String> = results
                .iter()
                .map(|((kind, result), n)| format!("{kind}/{result} {n}"))
                .collect();
            eprintln!("    by kind/result: {}", results.join(", "));
            eprintln!(
                "    {:<22} {:<26} {:<20} {:>7}  by way of calling",
                "code", "reason", "result", "count"
            );
            for ((code, reason, result), vias) in &codes {
                let total: u64 = vias.values().sum();
                let vias: Vec<String> = vias.iter().map(|(v, n)| format!("{v} {n}")).collect();
                eprintln!(
                    "    {code:<22} {:<26} {result:<20} {total:>7}  {}",
                    if reason.is_empty() { "-" } else { reason },
                    vias.join(", ")
                );
            }
        }
        eprintln!("linearizability: faults injected:");
        for (kind, n) in &self.faults {
            eprintln!("    {kind:<50} {n:>6}");
        }
    }

    /// Counts of (code, reason) over every workload.
    pub fn codes(&self) -> BTreeMap<(String, String), u64> {
        let mut codes = BTreeMap::new();
        for op in self.histories.iter().flat_map(|h| &h.ops) {
            *codes
                .entry((op.code.clone(), op.reason.clone()))
                .or_default() += 1;
        }
        codes
    }

    /// The sanity of the recording itself, before the checker: every way of calling was
    /// answered definitely at least once in every workload, nothing was refused as
    /// malformed or not allowed (that would be this recorder's bug), and every fault
    /// kind of the plan was injected.
    pub fn assert_recorded(&self) {
        for h in &self.histories {
            for (kind, via) in [
                ("inc", "cel"),
                ("inc", "transact"),
                ("write", "merge"),
                ("cas", "cel_precondition"),
                ("cas", "json_patch_test"),
                ("cas", "transact"),
                ("cas_rv", "rv_precondition"),
                ("append", "cel"),
                ("set_condition", "patch_status"),
                ("add", "finalizer"),
                ("remove", "finalizer"),
                ("read", "live_read"),
            ] {
                let definite = h
                    .ops
                    .iter()
                    .filter(|op| op.kind == kind && op.via == via && op.result != "unknown")
                    .count();
                assert!(
                    definite > 0,
                    "{}: no {kind} via {via} got a definite answer",
                    h.name
                );
            }
            for kind in ["inc", "write", "append", "set_condition", "add", "remove"] {
                assert!(
                    h.ops.iter().any(|op| op.kind == kind && op.result == "ok"),
                    "{}: no {kind} succeeded",
                    h.name
                );
            }
            let refused: Vec<&Op> = h
                .ops
                .iter()
                .filter(|op| {
                    matches!(
                        op.code.as_str(),
                        "INVALID_ARGUMENT" | "NOT_FOUND" | "PERMISSION_DENIED"
                    )
                })
                .collect();
            assert!(
                refused.is_empty(),
                "{}: requests refused as malformed or not allowed: {:?}",
                h.name,
                refused.first()
            );
        }
        for (kind, n) in &self.faults {
            if !kind.starts_with(' ') {
                assert!(*n > 0, "the fault {kind:?} was never injected");
            }
        }
    }
}

/// The checker, built once per process: `go build` in `tests/linearizability` (Go's
/// build cache keeps a rebuild fast).
pub fn checker() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = out_dir();
            std::fs::create_dir_all(&out).expect("create the output directory");
            let binary = out.join("linearizability-check");
            let started = Instant::now();
            let status = Command::new("go")
                .args(["build", "-o"])
                .arg(&binary)
                .arg("./cmd/check")
                .current_dir(super::repo_root().join("tests/linearizability"))
                .status()
                .expect("run go build (is Go installed?)");
            assert!(status.success(), "go build ./cmd/check failed");
            eprintln!(
                "linearizability: checker built in {:.1}s",
                started.elapsed().as_secs_f64()
            );
            binary
        })
        .clone()
}

/// The checker's verdict on some history files.
pub struct Verdict {
    pub exit: Option<i32>,
    pub output: String,
    pub html_dir: PathBuf,
    pub took: Duration,
}

impl Verdict {
    pub fn linearizable(&self) -> bool {
        self.exit == Some(0)
    }

    /// What a failing test says: the checker's exit, its output and where the HTML is.
    pub fn explain(&self) -> String {
        let meaning = match self.exit {
            Some(1) => "a history is NOT linearizable",
            Some(2) => "the checker could not read a history",
            Some(3) => "the check timed out",
            _ => "the checker failed",
        };
        format!(
            "linearizability checker exit {:?}: {meaning}; visualisation under {}\n{}",
            self.exit,
            self.html_dir.display(),
            self.output
        )
    }
}

/// Runs the checker on `files` (built first if need be), printing its output.
pub fn check(files: &[PathBuf], timeout: &str) -> Verdict {
    let binary = checker();
    let html_dir = out_dir().join("html");
    std::fs::create_dir_all(&html_dir).expect("create the HTML directory");
    // An earlier run's visualisations of these histories would be taken for this one's.
    let stems: Vec<String> = files
        .iter()
        .filter_map(|f| f.file_stem())
        .map(|stem| format!("{}.", stem.to_string_lossy()))
        .collect();
    for entry in std::fs::read_dir(&html_dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if stems.iter().any(|stem| name.starts_with(stem.as_str())) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let started = Instant::now();
    let out = Command::new(&binary)
        .arg("--html-dir")
        .arg(&html_dir)
        .args(["--timeout", timeout])
        .args(files)
        .output()
        .expect("run the linearizability checker");
    let took = started.elapsed();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "linearizability: checker exit {:?} in {:.1}s:\n{output}",
        out.status.code(),
        took.as_secs_f64()
    );
    Verdict {
        exit: out.status.code(),
        output,
        html_dir,
        took,
    }
}
