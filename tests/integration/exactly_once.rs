//! Exactly-once writes through real faults. An HTTP fault proxy (tests/support/faults.rs)
//! sits between the sidecar and the real kube-apiserver and injects 429s with
//! Retry-After, 503s, latency, resets before forwarding, and answers dropped after the
//! API server committed the write. 16 callers x 50 read-dependent increments run under
//! each fault; every increment that was answered OK is applied exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use prost::Message;
use serde_json::json;
use support::faults::{Fault, HttpFaultProxy};
use support::{ControlPlane, Sidecar};
use tonic::Code;
use tonic::transport::Channel;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn increment(ns: &str, name: &str, key: Option<String>) -> pb::UpdateWithRetryRequest {
    support::keyed_increment(ns, name, key)
}

fn reason(status: &tonic::Status) -> String {
    support::error_reason(status)
}

async fn make(api: &Api<ConfigMap>, name: &str) {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}}))
            .expect("configmap");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
}

async fn value(api: &Api<ConfigMap>, name: &str) -> u64 {
    api.get(name).await.expect("get").data.expect("data")["n"]
        .parse()
        .expect("a number")
}

/// A sidecar behind the fault proxy. Its breaker and retry budget are out of the way:
/// the faults here are steady, and this test is about what each write does.
struct Rig {
    ns: String,
    api: Api<ConfigMap>,
    proxy: HttpFaultProxy,
    sidecar: Sidecar,
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn new(prefix: &str) -> Rig {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await;
        let api = Api::namespaced(cp.admin_client().await, &ns);
        let proxy = HttpFaultProxy::start(cp).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = proxy.kubeconfig(cp, dir.path());
        let sidecar = Sidecar::start(&[
            "--kubeconfig",
            kubeconfig.to_str().expect("utf-8"),
            "--breaker-failures",
            "1000",
            "--retry-budget-min-per-second",
            "1000",
            "--max-backoff",
            "200ms",
        ]);
        Rig {
            ns,
            api,
            proxy,
            sidecar,
            _dir: dir,
        }
    }

    async fn client(&self) -> WriterServiceClient<Channel> {
        WriterServiceClient::new(self.sidecar.channel().await)
    }
}

/// What a run of callers saw.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    already_applied: AtomicU64,
    unknown: AtomicU64,
    rpc_retries: AtomicU64,
}

/// `callers` x `each` keyed increments; a caller sends the same request (same key) again
/// after any failure that a retry may fix, as a controller would, until it is answered OK.
async fn keyed_run(rig: &Rig, name: &str, callers: usize, each: usize) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let mut client = rig.client().await;
        let (ns, name, tally) = (rig.ns.clone(), name.to_string(), tally.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..each {
                let key = format!("{name}-{caller}-{i}");
                let mut tries = 0;
                loop {
                    tries += 1;
                    match client
                        .update_with_retry(increment(&ns, &name, Some(key.clone())))
                        .await
                    {
                        Ok(response) => {
                            let result = response.into_inner().result.expect("result");
                            assert_eq!(result.outcome(), pb::Outcome::Updated);
                            if result.already_applied {
                                tally.already_applied.fetch_add(1, Ordering::Relaxed);
                            }
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Err(err) => {
                            assert!(
                                // ABORTED: the attempts ran out on conflicts (a busy
                                // machine); the same key makes sending again safe.
                                matches!(
                                    err.code(),
                                    Code::Unavailable
                                        | Code::Unknown
                                        | Code::DeadlineExceeded
                                        | Code::Aborted
                                ),
                                "a failure no retry can fix: {err:?}"
                            );
                            assert!(tries < 20, "{key}: still failing after 20 tries: {err:?}");
                            tally.rpc_retries.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("caller");
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_fault_type_applies_each_keyed_increment_exactly_once() {
    let rig = Rig::new("exactly-once").await;
    let (callers, each) = (16, 50);
    let faults = [
        ("429 with Retry-After", Fault::TooManyRequests, 9, false),
        ("503", Fault::Unavailable, 7, false),
        (
            "latency 30ms",
            Fault::Latency(Duration::from_millis(30)),
            3,
            false,
        ),
        (
            "reset before forwarding",
            Fault::ResetBeforeForward,
            7,
            false,
        ),
        ("answer dropped after commit", Fault::DropAnswer, 4, true),
    ];
    for (label, fault, every, writes_only) in faults {
        let name = format!("n{}", label.len());
        make(&rig.api, &name).await;
        let injected = rig.proxy.count(|c| &c.injected);
        let committed_dropped = rig.proxy.count(|c| &c.committed_and_dropped);
        rig.proxy.inject(fault, every, writes_only);
        let started = Instant::now();
        let tally = keyed_run(&rig, &name, callers, each).await;
        rig.proxy.pass();
        let n = value(&rig.api, &name).await;
        let ok = tally.ok.load(Ordering::Relaxed);
        eprintln!(
            "{label}: {ok} OK ({} already applied), {} RPC retries, {} faults injected, {} committed answers dropped, final {n}, in {:.1}s",
            tally.already_applied.load(Ordering::Relaxed),
            tally.rpc_retries.load(Ordering::Relaxed),
            rig.proxy.count(|c| &c.injected) - injected,
            rig.proxy.count(|c| &c.committed_and_dropped) - committed_dropped,
            started.elapsed().as_secs_f64(),
        );
        assert!(
            rig.proxy.count(|c| &c.injected) > injected,
            "{label}: the fault was never injected"
        );
        assert_eq!(
            ok,
            (callers * each) as u64,
            "{label}: every key answered OK"
        );
        assert_eq!(n, ok, "{label}: every OK increment applied exactly once");
    }
    // The dropped answers were of writes the server had committed: the sidecar found its
    // own key on the re-read instead of incrementing again.
    assert!(rig.proxy.count(|c| &c.committed_and_dropped) > 0);
}

/// Without keys, every RPC whose write's answer was lost is answered UNKNOWN and never
/// retried blindly. Written alone, that is exactly one RPC per lost answer; in a group
/// commit, every member whose change the lost write carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_key_a_lost_answer_is_reported_unknown_and_never_retried_blindly() {
    let rig = Rig::new("no-key").await;
    for alone in [true, false] {
        for (label, fault) in [
            ("answer dropped after commit", Fault::DropAnswer),
            ("reset before forwarding", Fault::ResetBeforeForward),
        ] {
            let label = format!("{label}{}", if alone { ", alone" } else { ", grouped" });
            let name = format!("k{}", label.len());
            make(&rig.api, &name).await;
            let injected = rig.proxy.count(|c| &c.injected);
            let committed = rig.proxy.count(|c| &c.committed_and_dropped);
            rig.proxy.inject(fault, 5, true);
            let tally = Arc::new(Tally::default());
            let mut tasks = Vec::new();
            for _ in 0..16 {
                let mut client = rig.client().await;
                let (ns, name, tally) = (rig.ns.clone(), name.clone(), tally.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..20 {
                        let mut request = increment(&ns, &name, None);
                        request.options.get_or_insert_default().write_alone = alone;
                        match client.update_with_retry(request).await {
                            Ok(_) => {
                                tally.ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(err) => {
                                assert_eq!(err.code(), Code::Unknown, "{err:?}");
                                assert_eq!(reason(&err), "WRITE_OUTCOME_UNKNOWN", "{err:?}");
                                assert!(
                                    err.message().contains("idempotency_key"),
                                    "the message says what to do: {}",
                                    err.message()
                                );
                                tally.unknown.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }));
            }
            for task in tasks {
                task.await.expect("caller");
            }
            rig.proxy.pass();
            let n = value(&rig.api, &name).await;
            let (ok, unknown) = (
                tally.ok.load(Ordering::Relaxed),
                tally.unknown.load(Ordering::Relaxed),
            );
            let injected = rig.proxy.count(|c| &c.injected) - injected;
            let committed = rig.proxy.count(|c| &c.committed_and_dropped) - committed;
            eprintln!(
                "{label}, no key: {ok} OK, {unknown} WRITE_OUTCOME_UNKNOWN, {injected} write faults, {committed} of them committed, final {n}"
            );
            assert_eq!(ok + unknown, 320, "{label}: every RPC answered");
            assert!(injected > 0, "{label}: the fault was never injected");
            if alone {
                assert_eq!(
                    unknown, injected,
                    "{label}: every write whose answer was lost, and only those, is reported unknown"
                );
                assert_eq!(
                    n,
                    ok + committed,
                    "{label}: each OK applied once, each unknown write at most once (as the server committed it)"
                );
            } else {
                assert!(
                    unknown >= injected,
                    "{label}: each lost answer is reported unknown to every member it carried"
                );
                assert!(
                    n >= ok && n <= ok + unknown,
                    "{label}: each OK applied once, each unknown at most once"
                );
                if committed == 0 {
                    assert_eq!(n, ok, "{label}: nothing lost was committed");
                }
            }
        }
    }
}

/// Callers that leave a group commit in the middle (the caller drops its RPC, or its
/// deadline passes) cost no one else their write, and their own change is applied at
/// most once: every key on the object was applied once, every OK key is on it, and the
/// count equals the keys found. 10 ms of latency on every request keeps writes in
/// flight long enough for callers to leave while queued, while their batch reads and
/// while it writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callers_that_leave_a_group_cost_no_one_else_their_write() {
    let rig = Rig::new("leave").await;
    make(&rig.api, "g").await;
    rig.proxy
        .inject(Fault::Latency(Duration::from_millis(10)), 1, false);
    let each = 40;
    let (ok, dropped, ended) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut tasks = Vec::new();
    for caller in 0..12_u64 {
        let mut client = rig.client().await;
        let ns = rig.ns.clone();
        let (ok, dropped, ended) = (ok.clone(), dropped.clone(), ended.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(caller);
            let mut keys = Vec::new();
            for i in 0..each {
                let key = format!("g-{caller}-{i}");
                let mut request = tonic::Request::new(increment(&ns, "g", Some(key.clone())));
                // Callers 0-3 stay; 4-7 drop their RPC after 0-150 ms; 8-11 send a
                // 1-150 ms deadline, which the sidecar meets with its own answer.
                let leave_after = Duration::from_millis(rng.u64(0..150));
                if caller >= 8 {
                    request.set_timeout(leave_after + Duration::from_millis(1));
                }
                let call = client.update_with_retry(request);
                let answer = if (4..8).contains(&caller) {
                    match tokio::time::timeout(leave_after, call).await {
                        Ok(answer) => answer,
                        Err(_) => {
                            dropped.fetch_add(1, Ordering::Relaxed);
                            keys.push((key, false));
                            continue;
                        }
                    }
                } else {
                    call.await
                };
                match answer {
                    Ok(response) => {
                        let result = response.into_inner().result.expect("result");
                        assert_eq!(result.outcome(), pb::Outcome::Updated);
                        ok.fetch_add(1, Ordering::Relaxed);
                        keys.push((key, true));
                    }
                    Err(err) => {
                        assert!(caller >= 8, "a caller that stays gets its write: {err:?}");
                        // The sidecar's answer, UNKNOWN when the deadline passed with
                        // the write in flight, or the caller's own timeout when the
                        // answer came too close to it.
                        assert!(
                            matches!(
                                err.code(),
                                Code::DeadlineExceeded | Code::Unknown | Code::Cancelled
                            ),
                            "{err:?}"
                        );
                        ended.fetch_add(1, Ordering::Relaxed);
                        keys.push((key, false));
                    }
                }
            }
            keys
        }));
    }
    let mut keys = Vec::new();
    for task in tasks {
        keys.extend(task.await.expect("caller"));
    }
    rig.proxy.pass();
    let object = serde_json::to_value(rig.api.get("g").await.expect("get")).expect("json");
    let n: u64 = object["data"]["n"]
        .as_str()
        .and_then(|n| n.parse().ok())
        .expect("a number");
    let applied = keys
        .iter()
        .filter(|(key, _)| safewrite_engine::idempotency::applied(&object, key))
        .count() as u64;
    let (ok, dropped, ended) = (
        ok.load(Ordering::Relaxed),
        dropped.load(Ordering::Relaxed),
        ended.load(Ordering::Relaxed),
    );
    eprintln!(
        "{ok} OK, {dropped} dropped by their callers, {ended} ended by their deadlines; {applied} keys on the object, final {n}"
    );
    for (key, answered_ok) in &keys {
        if *answered_ok {
            assert!(
                safewrite_engine::idempotency::applied(&object, key),
                "{key} was answered OK but is not on the object"
            );
        }
    }
    assert_eq!(
        n, applied,
        "every change on the object applied exactly once"
    );
    assert!(ok >= 4 * each, "the callers that stayed were all answered");
    assert!(
        dropped > 0 && ended > 0,
        "no caller left: the test tests nothing"
    );

    // Nothing is left holding the object: a write goes through at once.
    let mut client = rig.client().await;
    let mut request = tonic::Request::new(increment(&rig.ns, "g", Some("after".into())));
    request.set_timeout(Duration::from_secs(5));
    client
        .update_with_retry(request)
        .await
        .expect("a write after");
    assert_eq!(value(&rig.api, "g").await, n + 1);
}

#[tokio::test]
async fn a_repeated_key_writes_nothing_and_bad_keys_are_refused() {
    let rig = Rig::new("keys").await;
    make(&rig.api, "r").await;
    let mut client = rig.client().await;
    let key = Some("job-7".to_string());
    let first = client
        .update_with_retry(increment(&rig.ns, "r", key.clone()))
        .await
        .expect("first")
        .into_inner()
        .result
        .expect("result");
    assert!(!first.already_applied);
    let second = client
        .update_with_retry(increment(&rig.ns, "r", key.clone()))
        .await
        .expect("second")
        .into_inner()
        .result
        .expect("result");
    assert!(second.already_applied, "the key was found on the object");
    assert_eq!(second.outcome(), pb::Outcome::Updated);
    assert_eq!(second.resource_version, first.resource_version, "no write");
    assert_eq!(value(&rig.api, "r").await, 1);
    let annotations = rig
        .api
        .get("r")
        .await
        .expect("get")
        .metadata
        .annotations
        .expect("annotations");
    assert_eq!(
        annotations["safewrite.dev/applied-keys"], "w3vRqEYtetY",
        "the key is recorded with the change"
    );

    let refused = |request: pb::UpdateWithRetryRequest| {
        let mut client = client.clone();
        async move { client.update_with_retry(request).await.unwrap_err() }
    };
    let err = refused(increment(&rig.ns, "r", Some("has space".into()))).await;
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("options.idempotency_key"), "{err:?}");

    let mut apply = increment(&rig.ns, "r", key.clone());
    apply.mutation = Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::Apply(pb::ServerSideApply {
            configuration_json: r#"{"data": {"x": "1"}}"#.into(),
            force: false,
        })),
    });
    let err = refused(apply).await;
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("server-side apply"), "{err:?}");

    let err = client
        .patch_status(pb::PatchStatusRequest {
            target: increment(&rig.ns, "r", None).target,
            mutation: Some(pb::Mutation {
                kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                    patch_json: r#"{"status": {"a": 1}}"#.into(),
                })),
            }),
            options: Some(pb::WriteOptions {
                idempotency_key: "s-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(value(&rig.api, "r").await, 1, "nothing written by refusals");
}

#[tokio::test]
async fn a_retry_after_is_a_floor_for_the_wait_and_the_final_error_says_when_to_return() {
    let rig = Rig::new("retry-after").await;
    make(&rig.api, "t").await;
    let mut client = rig.client().await;
    // Every write is throttled with Retry-After: 1 (the backoff alone would be < 200 ms).
    rig.proxy.inject(Fault::TooManyRequests, 1, true);
    let mut request = increment(&rig.ns, "t", None);
    request.retry_policy = Some(pb::RetryPolicy {
        max_attempts: 3,
        ..Default::default()
    });
    let started = Instant::now();
    let err = client.update_with_retry(request).await.unwrap_err();
    let took = started.elapsed();
    rig.proxy.pass();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(reason(&err), "TooManyRequests");
    let details = tonic_types::pb::Status::decode(err.details()).expect("details");
    let any = |suffix: &str| {
        details
            .details
            .iter()
            .find(|d| d.type_url.ends_with(suffix))
            .unwrap_or_else(|| panic!("no {suffix} in {err:?}"))
            .value
            .clone()
    };
    let retry = tonic_types::pb::RetryInfo::decode(any("google.rpc.RetryInfo").as_slice())
        .expect("RetryInfo")
        .retry_delay
        .expect("a delay");
    assert!(
        retry.seconds >= 1,
        "RetryInfo carries the server's hint: {retry:?}"
    );
    let failure = pb::WriteFailure::decode(any("safewrite.v1.WriteFailure").as_slice())
        .expect("WriteFailure");
    let records = failure.attempt_records;
    assert_eq!(records.len(), 3);
    for record in &records[..2] {
        assert_eq!(record.http_status, 429);
        let backoff = record.backoff.expect("a backoff");
        assert!(
            backoff.seconds >= 1,
            "waited at least Retry-After: {record:?}"
        );
    }
    assert!(
        took >= Duration::from_secs(2),
        "two waits of at least 1 s: {took:?}"
    );
    assert_eq!(value(&rig.api, "t").await, 0, "nothing written");
}
