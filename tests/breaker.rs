//! The circuit breaker with real faults: a proxy in front of the real API server resets
//! every connection (the server is gone, as far as the sidecar can tell), then lets
//! traffic through again.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use prost::Message;
use safewrite::pb;
use safewrite::pb::writer_service_client::WriterServiceClient;
use serde_json::json;
use support::{ControlPlane, FaultProxy, Sidecar};
use tonic::Code;

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
    let (mut transport, mut open) = (0, 0);
    while outage.elapsed() < Duration::from_secs(3) {
        let started = Instant::now();
        let err = client.update_with_retry(increment(&ns)).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        match reason(&err).as_str() {
            "CIRCUIT_OPEN" => {
                open += 1;
                assert!(started.elapsed() < Duration::from_millis(100), "not fast");
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
    assert_eq!(
        n, oks,
        "every OK applied exactly once, every failure not at all"
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
