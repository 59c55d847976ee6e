//! The loop's retry decisions in paused time, against an in-process fake API server
//! under the real client stack (rate limit, breaker, timeout): a conflict, a refusal, an
//! unanswered write, the deadline and an open breaker, for each way a write runs (group
//! commit, alone, the caller's own code). Time only moves when the loop sleeps, so the
//! time a write took is exactly the backoff it planned. The same behaviours against the
//! real API server are in `tests/integration/`.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};
use tokio::time::Instant;

use safewrite_api::backoff::Backoff;
use safewrite_api::deadline::CallDeadline;
use safewrite_api::target::FieldManager;
use safewrite_client::breaker::BreakerConfig;
use safewrite_client::timeout::Handoff;
use safewrite_client::{ClientMetrics, StackConfig, over};
use safewrite_mutation::{Cel, Mutation};

use super::*;

const OBJECT: &str = "/api/v1/namespaces/default/configmaps/o";

/// What the next request to the object meets.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Another writer changes the object just before this write arrives: a real
    /// conflict.
    Outside,
    /// Refused with this code and reason.
    Refuse(u16, &'static str),
    /// The write is stored, then the connection drops before the answer.
    StoredUnanswered,
    /// The request is read and never answered.
    Hang,
}

#[derive(Default)]
struct State {
    object: Option<Value>,
    version: u64,
    /// Faults of the next writes (PUT, POST), in order.
    writes: VecDeque<Fault>,
    /// A fault every request to the object meets while set.
    every: Option<Fault>,
    /// "METHOD status" of every request to the object.
    log: Vec<String>,
}

/// A ConfigMap API server for one object, `default/o`, with optimistic concurrency.
#[derive(Clone, Default)]
struct FakeApi(Arc<Mutex<State>>);

type Response = http::Response<Full<Bytes>>;

// === impl FakeApi ===

impl FakeApi {
    fn with_counter(n: u64) -> Self {
        let fake = FakeApi::default();
        fake.outside(|object| object["data"]["n"] = json!(n.to_string()));
        fake
    }

    /// A change made by another writer, straight to the store.
    fn outside(&self, change: impl FnOnce(&mut Value)) {
        let mut state = self.0.lock().unwrap();
        state.version += 1;
        let version = state.version.to_string();
        let object = state.object.get_or_insert_with(
            || json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "o", "namespace": "default"}, "data": {}}),
        );
        change(object);
        object["metadata"]["resourceVersion"] = json!(version);
    }

    fn writes(&self, faults: &[Fault]) {
        self.0.lock().unwrap().writes.extend(faults);
    }

    fn every(&self, fault: Option<Fault>) {
        self.0.lock().unwrap().every = fault;
    }

    fn object(&self) -> Value {
        self.0.lock().unwrap().object.clone().unwrap_or_default()
    }

    fn log(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap().log)
    }

    async fn serve(
        &self,
        request: http::Request<Handoff<kube::client::Body>>,
    ) -> Result<Response, tower::BoxError> {
        let (parts, body) = request.into_parts();
        // Reading the body hands the request to the "connection": it may have been sent.
        let body = body.collect().await?.to_bytes();
        let path = parts.uri.path().to_string();
        if path == "/api/v1" {
            return Ok(answer(200, discovery()));
        }
        assert!(path == OBJECT, "a request to {path}");
        let write = parts.method != http::Method::GET;
        let fault = {
            let mut state = self.0.lock().unwrap();
            match state.every {
                Some(fault) => Some(fault),
                None if write => state.writes.pop_front(),
                None => None,
            }
        };
        let result = match fault {
            Some(Fault::Outside) => {
                self.outside(|object| {
                    let n = object["data"]["outside"].as_str().unwrap_or("0");
                    let n: u64 = n.parse().unwrap();
                    object["data"]["outside"] = json!((n + 1).to_string());
                });
                self.exchange(&parts.method, &body)
            }
            Some(Fault::Refuse(code, reason)) => Ok(status(code, reason)),
            Some(Fault::StoredUnanswered) => {
                let _ = self.exchange(&parts.method, &body);
                Err("connection reset by peer".into())
            }
            Some(Fault::Hang) => std::future::pending().await,
            None => self.exchange(&parts.method, &body),
        };
        let code = result
            .as_ref()
            .map_or("reset".to_string(), |r| r.status().as_u16().to_string());
        let mut state = self.0.lock().unwrap();
        state.log.push(format!("{} {code}", parts.method));
        result
    }

    /// The API server's own answer: a read, a create, or a replace at the version read.
    fn exchange(&self, method: &http::Method, body: &[u8]) -> Result<Response, tower::BoxError> {
        let mut state = self.0.lock().unwrap();
        match *method {
            http::Method::GET => Ok(match &state.object {
                Some(object) => answer(200, object.clone()),
                None => status(404, "NotFound"),
            }),
            http::Method::PUT | http::Method::POST => {
                let mut object: Value = serde_json::from_slice(body)?;
                let creating = *method == http::Method::POST;
                match (&state.object, creating) {
                    (None, false) => return Ok(status(404, "NotFound")),
                    (Some(_), true) => return Ok(status(409, "AlreadyExists")),
                    (Some(current), false)
                        if current["metadata"]["resourceVersion"]
                            != object["metadata"]["resourceVersion"] =>
                    {
                        return Ok(status(409, "Conflict"));
                    }
                    _ => {}
                }
                state.version += 1;
                object["metadata"]["resourceVersion"] = json!(state.version.to_string());
                state.object = Some(object.clone());
                Ok(answer(if creating { 201 } else { 200 }, object))
            }
            _ => Ok(status(405, "MethodNotAllowed")),
        }
    }
}

fn answer(code: u16, body: Value) -> Response {
    http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn status(code: u16, reason: &str) -> Response {
    answer(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("the fake says {reason}"), "reason": reason, "code": code}),
    )
}

fn discovery() -> Value {
    json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "configmaps", "singularName": "configmap", "namespaced": true,
         "kind": "ConfigMap", "verbs": ["create", "get", "update"]}
    ]})
}

/// An engine over `fake`, under the real client stack; the breaker opens after
/// `breaker_failures` faults in a row.
fn engine_over(fake: &FakeApi, breaker_failures: u32) -> Engine {
    let connection = {
        let fake = fake.clone();
        tower::service_fn(move |request| {
            let fake = fake.clone();
            async move { fake.serve(request).await }
        })
    };
    let settings = StackConfig {
        qps: NonZeroU32::new(10_000).unwrap(),
        burst: NonZeroU32::new(10_000).unwrap(),
        server_paces: false,
        breaker: BreakerConfig {
            failures: breaker_failures,
            cooldown: Duration::from_secs(5),
            max_cooldown: Duration::from_secs(30),
        },
        request_timeout: Duration::from_secs(10),
    };
    let client = over(connection, settings, ClientMetrics::default(), "default");
    Engine::new(
        client,
        EngineConfig {
            max_attempts: 10,
            backoff: BACKOFF,
            request_timeout: Duration::from_secs(10),
            field_manager: FieldManager::parse("f", "safewrite").unwrap(),
            retry_budget_percent: 20.0,
            retry_budget_min_per_second: 10,
            group_commit: true,
            memory_bytes: 1 << 20,
            remember_secrets: false,
        },
        EngineMetrics::default(),
    )
}

const BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(2),
};

fn increment(key: Option<&str>) -> WriteSpec {
    let cel = Cel::compile("c", r#"{"data": {"n": string(int(object.data.n) + 1)}}"#).unwrap();
    let policy = RetryPolicy {
        max_attempts: 10,
        backoff: BACKOFF,
    };
    let mut spec = spec::configmap_write(Mutation::Cel(cel), policy);
    spec.idempotency_key = key.map(str::to_string);
    spec
}

/// A merge patch setting `data.m`: evaluated on the loop's task, where paused time
/// cannot run past it (a CEL program runs on a blocking thread, which paused time does
/// not wait for when a deadline is set).
fn set_m() -> WriteSpec {
    WriteSpec {
        mutation: Some(Mutation::MergePatch(json!({"data": {"m": "x"}}))),
        ..increment(None)
    }
}

/// The increment as the caller's own code (what a Transact caller does).
struct Own;

// === impl Own ===

impl Mutator for Own {
    async fn mutate(&mut self, _: u32, fresh: &Value, _: bool) -> Result<Change, Failure> {
        let mut object = fresh.clone();
        let n: u64 = object["data"]["n"].as_str().unwrap().parse().unwrap();
        object["data"]["n"] = json!((n + 1).to_string());
        Ok(Change::Object(object))
    }
}

/// The three ways a write runs: group commit, alone, the caller's own code.
#[derive(Debug, Clone, Copy)]
enum Way {
    Grouped,
    Unshared,
    Own,
}

const WAYS: [Way; 3] = [Way::Grouped, Way::Unshared, Way::Own];

async fn write(
    engine: &Engine,
    way: Way,
    spec: &WriteSpec,
    deadline: Option<Instant>,
) -> Result<Written, WriteError> {
    let deadline = CallDeadline::at(deadline);
    match way {
        Way::Grouped => engine.write(spec, deadline).await,
        Way::Unshared => engine.write_unshared(spec, deadline).await,
        Way::Own => {
            let mut spec = spec.clone();
            spec.mutation = None;
            engine.write_with(&spec, Own, deadline).await
        }
    }
}

fn counter(object: &Value, key: &str) -> String {
    object["data"][key].as_str().unwrap_or("0").to_string()
}

/// Asserts that the time a write took, `took`, is the backoff its attempts planned:
/// each sleep ends on the timer's next millisecond.
fn assert_took_its_backoff(took: Duration, attempts: &[AttemptRecord], what: &str) {
    let waits: Vec<Duration> = attempts.iter().filter_map(|a| a.backoff).collect();
    let planned: Duration = waits.iter().sum();
    let ticks = Duration::from_millis(waits.len() as u64);
    assert!(
        took >= planned && took <= planned + ticks,
        "{what}: took {took:?}, planned {planned:?} ({waits:?})"
    );
}

#[tokio::test(start_paused = true)]
async fn a_conflict_rereads_and_retries_after_exactly_the_planned_backoff() {
    for way in WAYS {
        let fake = FakeApi::with_counter(0);
        let engine = engine_over(&fake, 5);
        fake.writes(&[Fault::Outside, Fault::Outside]);
        let started = Instant::now();
        let written = write(&engine, way, &increment(None), None)
            .await
            .unwrap_or_else(|e| panic!("{way:?}: {e:?}"));
        assert_eq!(written.outcome, Outcome::Updated, "{way:?}");
        let codes: Vec<u16> = written.attempts.iter().map(|a| a.http_status).collect();
        assert_eq!(codes, [409, 409, 200], "{way:?}");
        // Each retry waited its jittered backoff, and nothing else took time.
        let waits: Vec<_> = written.attempts.iter().map(|a| a.backoff).collect();
        assert!(
            waits[..2]
                .iter()
                .all(|w| w.is_some_and(|w| w <= BACKOFF.max))
                && waits[2].is_none(),
            "{way:?}: {waits:?}"
        );
        assert_took_its_backoff(started.elapsed(), &written.attempts, &format!("{way:?}"));
        // Every retry re-read the object: the outside writer's changes are kept, and
        // the answer is the object as written.
        let stored = fake.object();
        assert_eq!(counter(&stored, "n"), "1", "{way:?}");
        assert_eq!(counter(&stored, "outside"), "2", "{way:?}");
        assert_eq!(written.object.into_value(), stored, "{way:?}");
        assert_eq!(
            fake.log(),
            [
                "GET 200", "PUT 409", "GET 200", "PUT 409", "GET 200", "PUT 200"
            ],
            "{way:?}"
        );
        // The next write starts from the object as written: one request.
        let next = write(&engine, way, &increment(None), None).await.unwrap();
        assert_eq!(counter(&next.object.into_value(), "n"), "2");
        assert_eq!(fake.log(), ["PUT 200"], "{way:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_no_retry_can_fix_ends_at_once_once_confirmed_live() {
    for way in WAYS {
        let fake = FakeApi::with_counter(0);
        let engine = engine_over(&fake, 5);
        fake.writes(&[Fault::Refuse(422, "Invalid")]);
        let started = Instant::now();
        let error = write(&engine, way, &increment(None), None)
            .await
            .unwrap_err();
        assert!(
            matches!(error.failure, Failure::Api { code: 422, .. }),
            "{way:?}: {error:?}"
        );
        assert_eq!(error.attempts.len(), 1, "{way:?}");
        assert_eq!(started.elapsed(), Duration::ZERO, "{way:?}");
        assert_eq!(fake.log(), ["GET 200", "PUT 422"], "{way:?}");

        // Made from a remembered copy, the refusal stands once a live read shows the
        // copy current...
        write(&engine, way, &increment(None), None).await.unwrap();
        fake.log();
        fake.writes(&[Fault::Refuse(422, "Invalid")]);
        let error = write(&engine, way, &increment(None), None)
            .await
            .unwrap_err();
        assert!(matches!(error.failure, Failure::Api { code: 422, .. }));
        assert_eq!(fake.log(), ["PUT 422", "GET 200"], "{way:?}");

        // ...and is decided again on the live object when the copy was stale.
        fake.outside(|object| object["data"]["other"] = json!("x"));
        fake.writes(&[Fault::Refuse(422, "Invalid")]);
        let written = write(&engine, way, &increment(None), None).await.unwrap();
        assert_eq!(counter(&written.object.into_value(), "n"), "2", "{way:?}");
        assert_eq!(written.attempts.len(), 2, "{way:?}");
        assert_eq!(
            fake.log(),
            ["PUT 422", "GET 200", "GET 200", "PUT 200"],
            "{way:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_write_is_unknown_without_a_key_and_applied_once_with_one() {
    for way in WAYS {
        let fake = FakeApi::with_counter(0);
        let engine = engine_over(&fake, 5);
        fake.writes(&[Fault::StoredUnanswered]);
        let error = write(&engine, way, &increment(None), None)
            .await
            .unwrap_err();
        assert!(
            matches!(error.failure, Failure::OutcomeUnknown { .. }),
            "{way:?}: {error:?}"
        );
        assert_eq!(error.attempts.len(), 1, "{way:?}: never retried blindly");
        assert_eq!(counter(&fake.object(), "n"), "1", "{way:?}");
        fake.log();

        // With a key, the next attempt's read finds the change made: applied once.
        fake.writes(&[Fault::StoredUnanswered]);
        let written = write(&engine, way, &increment(Some("k1")), None)
            .await
            .unwrap();
        assert!(written.already_applied, "{way:?}: {written:?}");
        assert_eq!(counter(&fake.object(), "n"), "2", "{way:?}");
        assert_eq!(fake.log(), ["GET 200", "PUT reset", "GET 200"], "{way:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_deadline_ends_the_loop_and_is_never_slept_past() {
    for way in WAYS {
        // A write that is never answered ends at the engine's deadline, a margin before
        // the caller's. Without an idempotency key its outcome is what is unknown; with
        // one, sending it again is safe and the answer is the deadline.
        let keyed_set_m = WriteSpec {
            idempotency_key: Some("k1".into()),
            ..set_m()
        };
        for (spec, keyed) in [(set_m(), false), (keyed_set_m, true)] {
            let fake = FakeApi::with_counter(0);
            let engine = engine_over(&fake, 5);
            fake.writes(&[Fault::Hang]);
            let deadline = Instant::now() + Duration::from_secs(2);
            let answer_by = CallDeadline::at(Some(deadline))
                .answer_by()
                .instant()
                .unwrap();
            let error = write(&engine, way, &spec, Some(deadline))
                .await
                .unwrap_err();
            if keyed {
                assert!(
                    matches!(error.failure, Failure::Deadline { .. }),
                    "{way:?}: {error:?}"
                );
            } else {
                assert!(
                    matches!(&error.failure, Failure::OutcomeUnknown { last: crate::Fault::Failure(f) } if matches!(**f, Failure::Deadline { .. })),
                    "{way:?}: {error:?}"
                );
            }
            assert_eq!(Instant::now(), answer_by, "{way:?}");
        }

        // Conflicts without end: the loop stops before a backoff would pass the
        // deadline, never after it.
        let fake = FakeApi::with_counter(0);
        let engine = engine_over(&fake, 5);
        fake.writes(&[Fault::Outside; 10]);
        let started = Instant::now();
        let deadline = started + Duration::from_millis(700);
        let answer_by = CallDeadline::at(Some(deadline))
            .answer_by()
            .instant()
            .unwrap();
        let error = write(&engine, way, &set_m(), Some(deadline))
            .await
            .unwrap_err();
        assert!(
            matches!(
                &error.failure,
                Failure::Api { code: 409, .. } | Failure::Deadline { .. }
            ),
            "{way:?}: {error:?}"
        );
        assert!(error.attempts.len() >= 2, "{way:?}: {error:?}");
        // By the answer time, never after it. A backoff that ends a fraction of a
        // millisecond before it wakes on it (tokio's timer ticks in milliseconds), and
        // the loop then answers at that time exactly (about one run in a hundred).
        assert!(
            Instant::now() <= answer_by,
            "{way:?}: answered at {:?}",
            started.elapsed()
        );
        assert_took_its_backoff(started.elapsed(), &error.attempts, &format!("{way:?}"));
    }
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_fails_fast_and_lets_nothing_through_until_it_cools() {
    for way in WAYS {
        let fake = FakeApi::with_counter(0);
        let engine = engine_over(&fake, 3);
        // Warm discovery first: only the object's requests meet the fault.
        write(&engine, way, &increment(None), None).await.unwrap();
        fake.log();
        fake.every(Some(Fault::Refuse(503, "ServiceUnavailable")));
        // The remembered copy is written (PUT 503), then read live twice (GET 503).
        let error = write(&engine, way, &increment(None), None)
            .await
            .unwrap_err();
        assert!(
            matches!(error.failure, Failure::CircuitOpen { .. }),
            "{way:?}: {error:?}"
        );
        assert_eq!(
            fake.log().len(),
            3,
            "{way:?}: three faults open the breaker"
        );

        // While open, nothing reaches the API server and the answer is at once.
        let started = Instant::now();
        let error = write(&engine, way, &increment(None), None)
            .await
            .unwrap_err();
        assert!(matches!(error.failure, Failure::CircuitOpen { .. }));
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert!(fake.log().is_empty(), "{way:?}");

        // Once it has cooled, a probe goes through and the write is made.
        fake.every(None);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let written = write(&engine, way, &increment(None), None).await.unwrap();
        assert_eq!(counter(&written.object.into_value(), "n"), "2", "{way:?}");
    }
}
