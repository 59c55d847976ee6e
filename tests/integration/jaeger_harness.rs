//! The tracing harness itself, proven without safewrite: a real Jaeger v2 from
//! tests/harness/jaeger.sh accepts an OTLP/HTTP JSON trace, gives it back through its own
//! query API with the parent/child link and the service name, two instances run side by
//! side, and teardown leaves no process or directory behind.

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use support::jaeger::{Jaeger, parent_span_id, service_of, span_named, tag};
use support::{process_alive, wait_until};

fn hex_id(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", fastrand::u8(..)))
        .collect()
}

#[tokio::test]
async fn an_otlp_http_trace_reads_back_through_the_query_api() {
    let jaeger = Jaeger::start();
    let trace_id = hex_id(16);
    let parent_id = hex_id(8);
    let child_id = hex_id(8);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    jaeger
        .send_otlp_json(&json!({"resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "harness-smoke"}}
            ]},
            "scopeSpans": [{
                "scope": {"name": "jaeger-harness-test"},
                "spans": [
                    {
                        "traceId": trace_id, "spanId": parent_id,
                        "name": "smoke-parent", "kind": 2,
                        "startTimeUnixNano": now.to_string(),
                        "endTimeUnixNano": (now + 3_000_000).to_string()
                    },
                    {
                        "traceId": trace_id, "spanId": child_id, "parentSpanId": parent_id,
                        "name": "smoke-child", "kind": 1,
                        "startTimeUnixNano": (now + 1_000_000).to_string(),
                        "endTimeUnixNano": (now + 2_000_000).to_string(),
                        "attributes": [{"key": "smoke.step", "value": {"stringValue": "one"}}]
                    }
                ]
            }]
        }]}))
        .await;

    let trace = jaeger
        .wait_for_trace(&trace_id, 2, Duration::from_secs(10))
        .await;
    assert_eq!(trace["traceID"], trace_id.as_str());
    assert_eq!(trace["spans"].as_array().expect("spans").len(), 2);
    let parent = span_named(&trace, "smoke-parent").expect("the parent span");
    let child = span_named(&trace, "smoke-child").expect("the child span");
    assert_eq!(parent["spanID"], parent_id.as_str());
    assert_eq!(child["spanID"], child_id.as_str());
    assert_eq!(
        parent_span_id(parent),
        None,
        "the parent is the root: {parent}"
    );
    assert_eq!(parent_span_id(child), Some(parent_id.as_str()), "{child}");
    assert_eq!(service_of(&trace, parent), Some("harness-smoke"));
    assert_eq!(service_of(&trace, child), Some("harness-smoke"));
    assert_eq!(tag(child, "smoke.step"), Some(&json!("one")));
    assert_eq!(tag(parent, "span.kind"), Some(&json!("server")));
    assert_eq!(child["duration"], 1000, "microseconds: {child}");

    // The same trace through the search by service, and the service list.
    let traces = jaeger.traces_of_service("harness-smoke").await;
    let ids: Vec<&str> = traces
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|t| t["traceID"].as_str())
        .collect();
    assert_eq!(ids, [trace_id.as_str()]);
    assert!(
        jaeger
            .services()
            .await
            .contains(&"harness-smoke".to_string())
    );
    assert_eq!(
        jaeger
            .traces_of_service("no-such-service")
            .await
            .as_array()
            .map(Vec::len),
        Some(0)
    );

    // An unknown trace is None, not an error.
    assert_eq!(jaeger.trace(&hex_id(16)).await, None);
}

#[tokio::test]
async fn two_instances_run_side_by_side_and_leave_nothing_behind() {
    let a = Jaeger::start();
    let b = Jaeger::start();
    for url in [&a.otlp_grpc, &a.otlp_http, &a.query] {
        assert!(![&b.otlp_grpc, &b.otlp_http, &b.query].contains(&url));
    }
    assert!(a.services().await.is_empty() && b.services().await.is_empty());
    let (pids, dirs) = ([a.pid, b.pid], [a.dir.clone(), b.dir.clone()]);
    drop(a);
    drop(b);
    for (pid, dir) in pids.into_iter().zip(dirs) {
        assert!(
            wait_until(Duration::from_secs(10), || !process_alive(pid)),
            "jaeger {pid} still runs"
        );
        assert!(!dir.exists(), "{} was not removed", dir.display());
    }
}
