//! Traces of the real sidecar in a real tracing backend (Jaeger v2 from
//! tests/harness/jaeger.sh), exported over OTLP gRPC and OTLP HTTP/protobuf and read
//! back through Jaeger's own query API: one span per RPC under the caller's span (from
//! the `traceparent` it sent), one span per attempt with the attempt's attributes, HTTP
//! client spans under the attempts; and no secret value anywhere in the exported data.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::jaeger::{Jaeger, parent_span_id, service_of, tag};
use support::{ControlPlane, Sidecar};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use safewrite_api::pb;
use safewrite_api::pb::transact_proposal::Change as Proposed;
use safewrite_api::pb::transact_request::Message as Req;
use safewrite_api::pb::transact_response::Message as Resp;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

/// A sidecar exporting to the shared Jaeger over `protocol`, as `service`.
fn traced_sidecar(cp: &ControlPlane, jaeger: &Jaeger, protocol: &str, service: &str) -> Sidecar {
    let endpoint = match protocol {
        "grpc" => jaeger.otlp_grpc.as_str(),
        _ => jaeger.otlp_http.as_str(),
    };
    // Secrets are written only where a rule names them (here: everywhere).
    Sidecar::start_with_env(
        &[
            "--kubeconfig",
            cp.admin_kubeconfig().to_str().unwrap(),
            "--allow",
            "*",
            "--allow",
            "core/Secret",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
            ("OTEL_SERVICE_NAME", service),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
}

fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", fastrand::u8(..)))
        .collect()
}

fn spans(trace: &Value) -> &Vec<Value> {
    trace["spans"].as_array().expect("spans")
}

fn tag_str<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    tag(span, key).and_then(Value::as_str)
}

fn tag_i64(span: &Value, key: &str) -> Option<i64> {
    tag(span, key).and_then(Value::as_i64)
}

/// A Transact whose first two proposals meet a conflict (the test changes the object
/// behind the caller's back after each of the first two reads), sent with a W3C
/// `traceparent` naming the caller's span.
async fn transact_with_two_conflicts(
    sidecar: &Sidecar,
    api: &Api<ConfigMap>,
    ns: &str,
    traceparent: &str,
) -> pb::WriteResult {
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let (tx, rx) = mpsc::channel(2);
    tx.send(pb::TransactRequest {
        message: Some(Req::Begin(pb::TransactBegin {
            target: Some(pb::ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: ns.into(),
                name: "traced".into(),
            }),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let mut answers = client.transact(request).await.unwrap().into_inner();
    while let Some(answer) = answers.message().await.unwrap() {
        match answer.message {
            Some(Resp::Fresh(fresh)) => {
                let mut object: Value = serde_json::from_str(&fresh.object_json).unwrap();
                if fresh.attempt <= 2 {
                    // Another writer gets there first.
                    let patch = json!({"data": {"other": fresh.attempt.to_string()}});
                    api.patch("traced", &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .unwrap();
                }
                let n: u64 = object["data"]["n"].as_str().unwrap().parse().unwrap();
                object["data"]["n"] = json!((n + 1).to_string());
                tx.send(pb::TransactRequest {
                    message: Some(Req::Proposal(pb::TransactProposal {
                        attempt: fresh.attempt,
                        change: Some(Proposed::ObjectJson(object.to_string())),
                    })),
                })
                .await
                .unwrap();
            }
            Some(Resp::Result(result)) => return result,
            None => panic!("empty answer"),
        }
    }
    panic!("no result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_met_two_conflicts_is_one_rpc_span_with_three_attempt_spans_under_the_callers_span()
 {
    let cp = ControlPlane::shared();
    let jaeger = Jaeger::shared();
    for protocol in ["grpc", "http/protobuf"] {
        let ns = cp.namespace("traced").await;
        let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "traced"}, "data": {"n": "0"}}))
                .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
        let service = format!("safewrite-{}", protocol.replace('/', "-"));
        let sidecar = traced_sidecar(cp, jaeger, protocol, &service);

        let (trace_id, caller_span) = (random_hex(16), random_hex(8));
        let traceparent = format!("00-{trace_id}-{caller_span}-01");
        let result = transact_with_two_conflicts(&sidecar, &api, &ns, &traceparent).await;
        assert_eq!(result.outcome(), pb::Outcome::Updated);
        assert_eq!(result.attempts, 3, "two conflicts, then the write");
        assert_eq!(
            result.trace_id, trace_id,
            "the RPC continued the caller's trace"
        );

        // rpc + 3 attempts + 3 reads + 3 writes (+ discovery, the sidecar's first call).
        let trace = jaeger
            .wait_for_trace(&trace_id, 10, Duration::from_secs(20))
            .await;
        let all = spans(&trace);
        let rpc = all
            .iter()
            .find(|s| s["operationName"] == "safewrite.v1.WriterService/Transact")
            .unwrap_or_else(|| panic!("{protocol}: no RPC span in {trace}"));
        assert_eq!(
            parent_span_id(rpc),
            Some(caller_span.as_str()),
            "{protocol}: the RPC span is a child of the caller's span"
        );
        assert_eq!(service_of(&trace, rpc), Some(service.as_str()));
        assert_eq!(tag_str(rpc, "rpc.system"), Some("grpc"));
        assert_eq!(tag_str(rpc, "rpc.method"), Some("Transact"));
        assert_eq!(tag_str(rpc, "k8s.namespace.name"), Some(ns.as_str()));
        assert_eq!(tag_i64(rpc, "safewrite.attempts"), Some(3), "{rpc}");
        assert_eq!(tag_str(rpc, "safewrite.outcome"), Some("updated"));
        assert_eq!(tag_i64(rpc, "rpc.grpc.status_code"), Some(0));
        assert_eq!(tag_str(rpc, "span.kind"), Some("server"));

        let rpc_id = rpc["spanID"].as_str().unwrap();
        let mut attempts: Vec<&Value> = all
            .iter()
            .filter(|s| s["operationName"] == "attempt")
            .collect();
        attempts.sort_by_key(|s| tag_i64(s, "safewrite.attempt"));
        assert_eq!(attempts.len(), 3, "{protocol}: one span per attempt");
        for (i, attempt) in attempts.iter().enumerate() {
            let number = i as i64 + 1;
            assert_eq!(parent_span_id(attempt), Some(rpc_id), "under the RPC span");
            assert_eq!(tag_i64(attempt, "safewrite.attempt"), Some(number));
            assert!(
                tag_str(attempt, "safewrite.resource_version.read").is_some_and(|v| !v.is_empty()),
                "attempt {number} records the resourceVersion it read: {attempt}"
            );
            // Each attempt has its own read and write as HTTP client spans under it.
            let id = attempt["spanID"].as_str().unwrap();
            let methods: Vec<&str> = all
                .iter()
                .filter(|s| parent_span_id(s) == Some(id))
                .filter_map(|s| tag_str(s, "http.request.method"))
                .collect();
            assert!(
                methods.contains(&"GET") && methods.contains(&"PUT"),
                "attempt {number}: HTTP spans {methods:?}"
            );
        }
        for conflicted in &attempts[..2] {
            assert_eq!(tag_i64(conflicted, "http.response.status_code"), Some(409));
            assert_eq!(
                tag_str(conflicted, "safewrite.k8s.reason"),
                Some("Conflict")
            );
            assert_eq!(
                tag_str(conflicted, "safewrite.decision"),
                Some("retry_conflict")
            );
            assert!(tag(conflicted, "safewrite.backoff_ms").is_some());
            assert!(
                conflicted["logs"].to_string().contains("backing off"),
                "the backoff is a span event: {conflicted}"
            );
        }
        let last = attempts[2];
        assert_eq!(tag_i64(last, "http.response.status_code"), Some(200));
        assert_eq!(tag_str(last, "safewrite.outcome"), Some("updated"));
        assert_eq!(
            tag_str(last, "safewrite.resource_version.written"),
            Some(result.resource_version.as_str())
        );
        let puts_409 = all
            .iter()
            .filter(|s| tag_str(s, "http.request.method") == Some("PUT"))
            .filter(|s| tag_i64(s, "http.response.status_code") == Some(409))
            .count();
        assert_eq!(puts_409, 2, "{protocol}: two refused writes");
        eprintln!(
            "{protocol}: trace {trace_id} has {} spans: rpc, 3 attempts, HTTP spans",
            all.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_value_reaches_the_exported_traces() {
    let cp = ControlPlane::shared();
    let jaeger = Jaeger::shared();
    let ns = cp.namespace("secret-traces").await;
    let secrets: Api<Secret> = Api::namespaced(cp.admin_client().await, &ns);
    let value = format!("correct-horse-{}", random_hex(6));
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db"}, "stringData": {"password": value}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let encoded = secrets.get("db").await.unwrap().data.unwrap()["password"].clone();
    let encoded = serde_json::to_value(&encoded).unwrap();
    let encoded = encoded.as_str().unwrap().to_string();

    let service = format!("safewrite-secret-{}", random_hex(4));
    let sidecar = traced_sidecar(cp, jaeger, "grpc", &service);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let target = pb::ObjectRef {
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: ns.clone(),
        name: "db".into(),
    };
    let copy = |precondition: &str| pb::UpdateWithRetryRequest {
        target: Some(target.clone()),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                expression: r#"{"data": {"copy": object.data.password}}"#.into(),
            })),
        }),
        preconditions: Some(pb::Preconditions {
            cel: precondition.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let written = client
        .update_with_retry(copy("has(object.data.password)"))
        .await
        .expect("copy the secret")
        .into_inner()
        .result
        .unwrap();
    // A failing precondition: the current object (with the secret) goes to the caller.
    let err = client
        .update_with_retry(copy("object.data.password == 'x'"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    // An invalid write: the API server's message may quote values; it is not exported.
    let mut invalid = copy("true");
    invalid.mutation = Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
            patch_json: format!(r#"{{"data": {{"{value}/not-a-key": "MA=="}}}}"#),
        })),
    });
    let err = client.update_with_retry(invalid).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    drop(client);

    let trace = jaeger
        .wait_for_trace(&written.trace_id, 4, Duration::from_secs(20))
        .await;
    assert!(!spans(&trace).is_empty());
    // Wait until all three RPCs' traces are in, then search everything exported.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let everything = loop {
        let traces = jaeger.traces_of_service(&service).await;
        if traces.as_array().map_or(0, Vec::len) >= 3 || std::time::Instant::now() > deadline {
            break traces;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        everything.as_array().map(Vec::len),
        Some(3),
        "three RPCs, three traces"
    );
    let text = everything.to_string();
    assert!(
        text.contains("db"),
        "the export names the object (a sanity check of the search)"
    );
    for needle in [value.as_str(), encoded.as_str()] {
        assert!(
            !text.contains(needle),
            "a secret value reached the tracing backend"
        );
    }
    let log = sidecar.log();
    assert!(!log.contains(&value) && !log.contains(&encoded));
}

/// Concurrent writes to one object, each from its own trace: the attempt that carried
/// several of them (group commit) is in the first one's trace, says how many it carried,
/// and links the RPC span of every other member, in their own traces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_commit_links_the_rpc_spans_of_every_member() {
    let cp = ControlPlane::shared();
    let jaeger = Jaeger::shared();
    let ns = cp.namespace("trace-group").await;
    let service = format!("safewrite-group-{}", random_hex(4));
    let sidecar = traced_sidecar(cp, jaeger, "grpc", &service);
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "g"}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let client = WriterServiceClient::new(sidecar.channel().await);

    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut client = client.clone();
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            let trace_id = random_hex(16);
            let mut request = tonic::Request::new(support::keyed_increment(&ns, "g", None));
            let traceparent = format!("00-{trace_id}-{}-01", random_hex(8));
            request
                .metadata_mut()
                .insert("traceparent", traceparent.parse().unwrap());
            let result = client.update_with_retry(request).await.expect("increment");
            let result = result.into_inner().result.unwrap();
            let carried = result.attempt_records.last().unwrap().batch_size;
            (trace_id, carried)
        }));
    }
    let mut members = Vec::new();
    for task in tasks {
        members.push(task.await.unwrap());
    }
    assert!(
        members.iter().any(|(_, carried)| *carried > 1),
        "16 concurrent writes to one object were never committed together"
    );
    let ours: std::collections::HashSet<&str> = members.iter().map(|(t, _)| t.as_str()).collect();
    let mut linked = 0;
    for (trace_id, _) in &members {
        let trace = jaeger
            .wait_for_trace(trace_id, 1, Duration::from_secs(20))
            .await;
        for span in spans(&trace) {
            let Some(size) = tag_i64(span, "safewrite.batch_size") else {
                continue;
            };
            let links: Vec<&Value> = span["references"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter(|r| r["refType"] == "FOLLOWS_FROM")
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(
                links.len() as i64,
                size - 1,
                "an attempt carrying {size} links the other members: {span}"
            );
            for link in links {
                let linked_trace = link["traceID"].as_str().unwrap();
                assert!(ours.contains(linked_trace), "a link to {linked_trace}");
                linked += 1;
            }
        }
    }
    assert!(linked > 0, "no attempt span linked another member");
}
