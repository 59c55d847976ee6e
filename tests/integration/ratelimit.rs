//! The sidecar's rate limit to the real API server, measured with the server's own
//! request counters, on a control plane of its own, so no other test's traffic moves them.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use prost::Message;
use serde_json::json;
use support::{ControlPlane, Sidecar, apiserver_requests};
use tonic::Code;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

const ALL_VERBS: &[&str] = &["GET", "PUT", "POST", "PATCH", "LIST", "WATCH", "DELETE"];

/// An increment that retries conflicts as long as it takes (the contention is the point).
fn increment(ns: &str, name: &str) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        retry_policy: Some(pb::RetryPolicy {
            max_attempts: 1000,
            ..Default::default()
        }),
        ..support::keyed_increment(ns, name, None)
    }
}

async fn make(api: &Api<ConfigMap>, name: &str) {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_never_sees_more_than_the_configured_rate() {
    let cp: &'static ControlPlane = Box::leak(Box::new(ControlPlane::start()));
    let ns = cp.namespace("ratelimit").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    make(&api, "paced").await;
    let kubeconfig = cp.admin_kubeconfig().display().to_string();

    // 1. Under a load far above the limit, the server sees at most rate x time + burst.
    let (qps, burst) = (20.0, 5.0);
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig,
        "--qps",
        "20",
        "--burst",
        "5",
        "--readiness-interval",
        "1h",
    ]);
    let client = WriterServiceClient::new(sidecar.channel().await);
    let before = apiserver_requests(cp, ALL_VERBS, "configmaps").await;
    let started = Instant::now();
    let run_for = Duration::from_secs(4);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut client = client.clone();
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0u64;
            while started.elapsed() < run_for {
                client
                    .update_with_retry(increment(&ns, "paced"))
                    .await
                    .expect("a paced write still succeeds");
                ok += 1;
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let sent = apiserver_requests(cp, ALL_VERBS, "configmaps").await - before;
    let allowed = qps * elapsed + burst;
    eprintln!(
        "{ok} increments in {elapsed:.2}s: the API server saw {sent} configmap requests, limit {allowed:.1} ({qps}/s + burst {burst})"
    );
    assert!(sent <= allowed, "{sent} requests > {allowed:.1} allowed");
    assert!(
        sent >= qps * elapsed * 0.5,
        "the load never reached the limit: {sent}"
    );
    let n: u64 = api.get("paced").await.unwrap().data.unwrap()["n"]
        .parse()
        .unwrap();
    assert_eq!(n, ok, "every OK applied exactly once");
    drop(sidecar);

    // 2. A wait past the caller's deadline fails at once: RESOURCE_EXHAUSTED, nothing sent.
    make(&api, "starved").await;
    let slow = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig,
        "--qps",
        "1",
        "--burst",
        "1",
        "--readiness-interval",
        "1h",
    ]);
    let mut client = WriterServiceClient::new(slow.channel().await);
    client
        .update_with_retry(increment(&ns, "starved"))
        .await
        .expect("without a deadline the call waits its turn");
    let version = api.get("starved").await.unwrap().metadata.resource_version;
    let mut request = tonic::Request::new(increment(&ns, "starved"));
    request.set_timeout(Duration::from_millis(300));
    let err = client.update_with_retry(request).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    // Refused at once, not after a wait that would pass the deadline (the decision is
    // tested in paused time in crates/client/src/ratelimit.rs): the sidecar's own answer.
    assert_eq!(support::error_reason(&err), "RATE_LIMITED", "{err:?}");
    let details = tonic_types::pb::Status::decode(err.details()).unwrap();
    let retry = details
        .details
        .iter()
        .find(|d| d.type_url.ends_with("google.rpc.RetryInfo"))
        .map(|d| tonic_types::pb::RetryInfo::decode(d.value.as_slice()).unwrap())
        .expect("RetryInfo");
    assert!(retry.retry_delay.is_some());
    assert_eq!(
        api.get("starved").await.unwrap().metadata.resource_version,
        version,
        "nothing was written"
    );
}
