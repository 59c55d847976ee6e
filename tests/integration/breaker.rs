//! The circuit breaker with real faults: a proxy in front of the real API server resets
//! every connection (the server is gone, as far as the sidecar can tell), or accepts
//! requests and never answers them (a hung server), then lets traffic through again.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use prost::Message;
use serde_json::json;
use support::faults::HttpFaultProxy;
use support::{ControlPlane, FaultProxy, Sidecar};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn increment(ns: &str) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        target: Some(pb::ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: ns.into(),
            name: "b".into(),
        }),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                expression: r#"{"data": {"n": string(int(object.data.n) + 1)}}"#.into(),
            })),
        }),
        retry_policy: Some(pb::RetryPolicy {
            max_attempts: 2,
            initial_backoff: Some(prost_types::Duration {
                seconds: 0,
                nanos: 10_000_000,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn reason(status: &tonic::Status) -> String {
    let details = tonic_types::pb::Status::decode(status.details()).unwrap();
    let info = details
        .details
        .iter()
        .find(|d| d.type_url.ends_with("google.rpc.ErrorInfo"))
        .expect("ErrorInfo");
    tonic_types::pb::ErrorInfo::decode(info.value.as_slice())
        .unwrap()
        .reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_opens_the_breaker_and_recovery_closes_it() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("breaker").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "b"}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();

    let proxy = FaultProxy::start(cp.api_port()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--breaker-failures",
        "3",
        "--breaker-cooldown",
        "1s",
        "--readiness-interval",
        "1h",
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let mut oks = 0;
    client
        .update_with_retry(increment(&ns))
        .await
        .expect("healthy");
    oks += 1;

    proxy.reset_all();
    let before = proxy.accepted();
    let outage = Instant::now();
    let (mut transport, mut open, mut unknown) = (0, 0, 0u64);
    while outage.elapsed() < Duration::from_secs(3) {
        let err = client.update_with_retry(increment(&ns)).await.unwrap_err();
        // The proxy tears down the connection already open asynchronously: a write sent
        // on it just before is reset after it left, so its outcome is open (no key).
        if err.code() == Code::Unknown {
            assert_eq!(reason(&err), "WRITE_OUTCOME_UNKNOWN", "{err:?}");
            unknown += 1;
            continue;
        }
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        match reason(&err).as_str() {
            "CIRCUIT_OPEN" => {
                // Failed fast: nothing was sent (that it takes no time is tested in
                // paused time in crates/engine/src/tests.rs).
                assert!(err.message().contains("nothing was sent"), "{err:?}");
                open += 1;
            }
            _ => transport += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reached = proxy.accepted() - before;
    eprintln!(
        "3 s outage: {transport} RPCs met the fault, {open} failed fast on the open breaker; {reached} connections reached the proxy"
    );
    assert!(open > 20, "the breaker never failed fast ({open})");
    let metrics = sidecar.metrics();
    assert!(
        metrics.contains("safewrite_breaker_state 2"),
        "the open breaker is observable:\n{metrics}"
    );
    assert!(metrics.contains("safewrite_breaker_transitions_total{to=\"open\"}"));
    assert!(metrics.contains("safewrite_api_requests_total{verb=\"get\",code=\"circuit_open\"}"));
    // 3 faults open it; then one probe per cool-down (1 s, then 2 s): a handful, not a storm.
    assert!(reached <= 8, "{reached} requests reached a dead API server");

    proxy.pass();
    let recovery = Instant::now();
    loop {
        match client.update_with_retry(increment(&ns)).await {
            Ok(_) => {
                oks += 1;
                break;
            }
            Err(err) => assert_eq!(err.code(), Code::Unavailable, "{err:?}"),
        }
        assert!(
            recovery.elapsed() < Duration::from_secs(6),
            "no recovery within the cool-down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("recovered {:?} after the fault cleared", recovery.elapsed());
    let metrics = sidecar.metrics();
    assert!(
        metrics.contains("safewrite_breaker_state 0"),
        "closed again:\n{metrics}"
    );
    assert!(metrics.contains("safewrite_breaker_transitions_total{to=\"closed\"}"));
    for _ in 0..5 {
        client
            .update_with_retry(increment(&ns))
            .await
            .expect("closed again");
        oks += 1;
    }
    let n: u64 = api.get("b").await.unwrap().data.unwrap()["n"]
        .parse()
        .unwrap();
    assert!(
        (oks..=oks + unknown).contains(&n),
        "every OK applied exactly once, a write of unknown outcome at most once, every other failure not at all: {n} for {oks} OKs and {unknown} unknown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budget_bounds_retries_of_faults_across_callers() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("budget").await;
    let proxy = FaultProxy::start(cp.api_port()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--breaker-failures",
        "100000",
        "--retry-budget-percent",
        "0",
        "--retry-budget-min-per-second",
        "1",
        "--readiness-interval",
        "1h",
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    // Warm discovery while the path is healthy (the object need not exist).
    let _ = client.update_with_retry(increment(&ns)).await;

    proxy.reset_all();
    let before = proxy.accepted();
    let mut exhausted = 0;
    for _ in 0..20 {
        let mut request = increment(&ns);
        request.retry_policy = Some(pb::RetryPolicy {
            max_attempts: 10,
            initial_backoff: Some(prost_types::Duration {
                seconds: 0,
                nanos: 1_000_000,
            }),
            max_backoff: Some(prost_types::Duration {
                seconds: 0,
                nanos: 5_000_000,
            }),
            ..Default::default()
        });
        let err = client.update_with_retry(request).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        if reason(&err) == "RETRY_BUDGET_EXHAUSTED" {
            exhausted += 1;
        }
    }
    let reached = proxy.accepted() - before;
    eprintln!(
        "20 RPCs x up to 10 attempts against a dead path: {reached} connections, {exhausted} RPCs stopped by the retry budget"
    );
    assert!(exhausted >= 10, "the budget stopped only {exhausted} RPCs");
    // Unbounded, this would be 200 attempts; the budget allows the 20 first attempts
    // and about 10 retries (hyper may dial twice for one attempt).
    assert!(reached <= 80, "{reached} requests reached a dead path");
}

/// The sidecar's health for the whole server.
async fn health(channel: &tonic::transport::Channel) -> ServingStatus {
    HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check")
        .into_inner()
        .status()
}

/// Waits (at most `within`) for the sidecar's health to be `want`; how long it took.
async fn health_becomes(
    channel: &tonic::transport::Channel,
    want: ServingStatus,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if health(channel).await == want {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// `request` with a caller deadline of `timeout`.
fn with_deadline<T>(request: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(request);
    request.set_timeout(timeout);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_api_server_opens_the_breaker_and_writes_resume_within_a_cooldown_after() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("hang").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "b"}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();

    let proxy = HttpFaultProxy::start(cp).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let failures = 3;
    let max_cooldown = Duration::from_secs(2);
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--breaker-failures",
        "3",
        "--breaker-cooldown",
        "1s",
        "--breaker-max-cooldown",
        "2s",
        "--request-timeout",
        "500ms",
        "--readiness-interval",
        "200ms",
    ]);
    let channel = sidecar.channel().await;
    let mut client = WriterServiceClient::new(channel.clone());
    assert!(
        health_becomes(&channel, ServingStatus::Serving, Duration::from_secs(10))
            .await
            .is_some()
    );
    let mut oks = 0;
    client
        .update_with_retry(increment(&ns))
        .await
        .expect("healthy");
    oks += 1;

    // The server accepts and reads every request and answers none.
    proxy.hang();
    let one_attempt = || pb::UpdateWithRetryRequest {
        retry_policy: Some(pb::RetryPolicy {
            max_attempts: 1,
            ..Default::default()
        }),
        ..increment(&ns)
    };
    let mut timeouts = 0;
    loop {
        let err = client.update_with_retry(one_attempt()).await.unwrap_err();
        // The first write after the healthy one is sent from the remembered copy, so
        // the hang swallows a PUT (its outcome unknown); the copy is then forgotten and
        // the next ones hang on their GET (unavailable).
        let unknown_write = err.code() == Code::Unknown && reason(&err) == "WRITE_OUTCOME_UNKNOWN";
        assert!(err.code() == Code::Unavailable || unknown_write, "{err:?}");
        if reason(&err) == "CIRCUIT_OPEN" {
            // Not a timeout (500 ms): nothing was sent.
            assert!(err.message().contains("nothing was sent"), "{err:?}");
            break;
        }
        assert!(err.message().contains("did not answer within"), "{err:?}");
        timeouts += 1;
        assert!(
            timeouts <= failures,
            "still closed after {timeouts} timeouts"
        );
    }
    assert_eq!(
        timeouts, failures,
        "opened after --breaker-failures timeouts"
    );
    assert!(sidecar.metrics().contains("safewrite_breaker_state 2"));
    let unready = health_becomes(&channel, ServingStatus::NotServing, Duration::from_secs(5))
        .await
        .expect("health follows the hung server");

    // Callers with 0.5 s deadlines keep coming while it hangs: the probes after each
    // cool-down meet the hang and are cut short; none may wedge the breaker. The sidecar
    // answers them itself, before their deadline, with its attempt records.
    let hung = Instant::now();
    let (mut open, mut deadline) = (0, 0);
    while hung.elapsed() < Duration::from_secs(4) {
        let request = with_deadline(increment(&ns), Duration::from_millis(500));
        let err = client.update_with_retry(request).await.unwrap_err();
        match err.code() {
            Code::Unavailable => {
                assert_eq!(reason(&err), "CIRCUIT_OPEN", "{err:?}");
                open += 1;
            }
            Code::DeadlineExceeded => {
                assert_eq!(
                    reason(&err),
                    "DEADLINE_EXCEEDED",
                    "the sidecar's own: {err:?}"
                );
                deadline += 1;
            }
            // A write (made from the remembered copy) that met the hang: without an
            // idempotency key its outcome is what the deadline left unknown.
            Code::Unknown => {
                assert_eq!(reason(&err), "WRITE_OUTCOME_UNKNOWN", "{err:?}");
                deadline += 1;
            }
            _ => panic!("{err:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(deadline >= 1, "no probe met the hang");

    proxy.pass();
    let resumed = Instant::now();
    loop {
        let request = with_deadline(increment(&ns), Duration::from_millis(500));
        match client.update_with_retry(request).await {
            Ok(_) => {
                oks += 1;
                break;
            }
            Err(err) => assert!(
                matches!(
                    err.code(),
                    Code::Unavailable | Code::DeadlineExceeded | Code::Unknown
                ),
                "{err:?}"
            ),
        }
        assert!(
            resumed.elapsed() < max_cooldown + Duration::from_secs(1),
            "no write within a cool-down of the hang ending"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wrote_after = resumed.elapsed();
    let serving = health_becomes(&channel, ServingStatus::Serving, Duration::from_secs(3))
        .await
        .expect("health returns to SERVING");
    eprintln!(
        "hang: breaker open after {timeouts} timeouts; NOT_SERVING {unready:?} later; in 4 s of hang {open} RPCs failed fast, {deadline} probes met the hang; after it ended, written again in {wrote_after:?}, SERVING in {serving:?}"
    );
    assert!(sidecar.metrics().contains("safewrite_breaker_state 0"));
    for _ in 0..3 {
        client
            .update_with_retry(increment(&ns))
            .await
            .expect("closed again");
        oks += 1;
    }
    let n: u64 = api.get("b").await.unwrap().data.unwrap()["n"]
        .parse()
        .unwrap();
    assert_eq!(n, oks, "every OK applied once, every failure not at all");
}
