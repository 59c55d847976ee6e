//! The real kube-apiserver stopped in the middle of a run and started again: while it
//! is down the sidecar fails fast (the breaker is open) and sends only a few probes, and
//! after it is back the sidecar recovers by itself within the breaker's cool-down, with
//! no OK lost and no increment applied twice. Half the callers use short deadlines
//! (0.5 s), whose probes are cut short: they must not wedge the breaker, and their
//! callers get the sidecar's own DEADLINE_EXCEEDED. Health follows the server down and up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{ControlPlane, FaultProxy, Sidecar};
use tokio::sync::Mutex;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn increment(ns: &str, key: String) -> pb::UpdateWithRetryRequest {
    support::keyed_increment(ns, "r", Some(key))
}

fn reason(status: &tonic::Status) -> String {
    support::error_reason(status)
}

/// Waits (at most `within`) for the sidecar's health to be `want`; how long it took.
async fn health_becomes(
    channel: &tonic::transport::Channel,
    want: ServingStatus,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        let status = HealthClient::new(channel.clone())
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("health check")
            .into_inner()
            .status();
        if status == want {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// One RPC's end, for the timeline.
struct Event {
    at: Instant,
    ok: bool,
    reason: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_api_server_is_waited_out_without_a_storm_and_nothing_is_lost() {
    // Its own control plane: this test stops the API server.
    let cp = Arc::new(ControlPlane::start());
    let ns = cp.namespace("restart").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "r"}, "data": {"n": "0"}}))
            .expect("configmap");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");

    // A pass-through TCP proxy counts every connection the sidecar opens to the server.
    let proxy = FaultProxy::start(cp.api_port()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = proxy.kubeconfig(&cp, dir.path());
    let max_cooldown = Duration::from_secs(2);
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8"),
        "--breaker-failures",
        "3",
        "--breaker-cooldown",
        "500ms",
        "--breaker-max-cooldown",
        "2s",
        "--readiness-interval",
        "1s",
    ]);
    let readiness = Duration::from_secs(1);
    let channel = sidecar.channel().await;
    assert!(
        health_becomes(&channel, ServingStatus::Serving, Duration::from_secs(10))
            .await
            .is_some()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let oks = Arc::new(AtomicU64::new(0));
    // A short-deadline caller's own timer may fire before the sidecar's answer arrives
    // when the machine is starved (the API server's start takes the cores): counted and
    // retried like an UNAVAILABLE, and reported; every answer the sidecar gave is checked.
    let client_timeouts = Arc::new(AtomicU64::new(0));
    let mut callers = Vec::new();
    for caller in 0..8 {
        let mut client = WriterServiceClient::new(sidecar.channel().await);
        let (ns, stop, events, oks) = (ns.clone(), stop.clone(), events.clone(), oks.clone());
        let client_timeouts = client_timeouts.clone();
        callers.push(tokio::spawn(async move {
            let mut i = 0;
            // A key in progress is finished (answered OK) even after the stop signal.
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let key = format!("c{caller}-{i}");
                loop {
                    let mut request = tonic::Request::new(increment(&ns, key.clone()));
                    // Odd callers are controllers with short deadlines.
                    if caller % 2 == 1 {
                        request.set_timeout(Duration::from_millis(500));
                    }
                    let result = client.update_with_retry(request).await;
                    let event = Event {
                        at: Instant::now(),
                        ok: result.is_ok(),
                        reason: result.as_ref().err().map(reason).unwrap_or_default(),
                    };
                    events.lock().await.push(event);
                    match result {
                        Ok(_) => {
                            oks.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Err(err)
                            if caller % 2 == 1
                                && err.code() == Code::Cancelled
                                && err.message() == "Timeout expired" =>
                        {
                            client_timeouts.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(err) => {
                            assert!(
                                matches!(err.code(), Code::Unavailable | Code::DeadlineExceeded),
                                "{err:?}"
                            );
                            if err.code() == Code::DeadlineExceeded {
                                assert_eq!(
                                    reason(&err),
                                    "DEADLINE_EXCEEDED",
                                    "the sidecar answers before the caller's deadline: {err:?}"
                                );
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        oks.load(Ordering::Relaxed) > 0,
        "writes flow before the outage"
    );
    let control = cp.clone();
    tokio::task::spawn_blocking(move || control.stop_apiserver())
        .await
        .expect("stop");
    let down = Instant::now();
    let accepted_at_stop = proxy.accepted();
    let unready = health_becomes(&channel, ServingStatus::NotServing, Duration::from_secs(4))
        .await
        .expect("health follows the server down");
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(down.elapsed())).await;
    let accepted_while_down = proxy.accepted() - accepted_at_stop;
    let control = cp.clone();
    tokio::task::spawn_blocking(move || control.start_apiserver())
        .await
        .expect("start");
    let up = Instant::now();
    let serving = health_becomes(&channel, ServingStatus::Serving, readiness * 3)
        .await
        .expect("health returns to SERVING without a restart");
    tokio::time::sleep((max_cooldown + Duration::from_secs(2)).saturating_sub(up.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.expect("caller");
    }

    let events = events.lock().await;
    // While down (from 1 s after the stop, when in-flight RPCs have met the fault, until
    // the restart began), every RPC failed, and failed fast on the open breaker.
    let outage: Vec<&Event> = events
        .iter()
        .filter(|e| e.at > down + Duration::from_secs(1) && e.at < down + Duration::from_secs(4))
        .collect();
    let fast_fails = outage.iter().filter(|e| e.reason == "CIRCUIT_OPEN").count();
    let first_ok_after_up = events
        .iter()
        .filter(|e| e.ok && e.at >= up)
        .map(|e| e.at - up)
        .min();
    let n: u64 = api.get("r").await.expect("get").data.expect("data")["n"]
        .parse()
        .expect("a number");
    let oks = oks.load(Ordering::Relaxed);
    eprintln!(
        "outage: {} RPCs in 3 s, {fast_fails} failed fast on the open breaker; {accepted_while_down} connections reached the stopped server's port in 4 s; NOT_SERVING {unready:?} after the stop, SERVING {serving:?} after the restart; first OK {:?} after the server was ready; {oks} OKs, final {n}; {} calls timed out on the caller's own timer",
        outage.len(),
        first_ok_after_up,
        client_timeouts.load(Ordering::Relaxed)
    );
    assert!(
        outage.iter().all(|e| !e.ok),
        "no RPC succeeded against a stopped server"
    );
    assert!(
        fast_fails * 10 >= outage.len() * 9,
        "at least 90% of RPCs during the outage failed fast on the open breaker"
    );
    // 8 callers retrying every 50 ms would be ~640 attempts in 4 s; the breaker lets a
    // probe through per cool-down (0.5 s, 1 s, 2 s, 2 s) plus the requests in flight,
    // and readiness probes once a second.
    assert!(
        accepted_while_down <= 25,
        "{accepted_while_down} connections: a storm against a stopped server"
    );
    let recovered = first_ok_after_up.expect("writes recovered after the restart");
    assert!(
        recovered <= max_cooldown + Duration::from_secs(1),
        "recovered only {recovered:?} after the server was back"
    );
    assert_eq!(n, oks, "every OK applied exactly once; no OK lost");
}
