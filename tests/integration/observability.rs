//! Metrics and logs of the real sidecar against the real API server: the /metrics
//! endpoint counts RPCs, attempts, conflicts, API requests and the breaker; JSON logs
//! carry the trace id of the RPC they belong to; object contents (a Secret) never reach
//! the logs; and an unreachable trace collector neither fails an RPC nor floods the log.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::{ControlPlane, Sidecar};

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn cel(ns: &str, kind: &str, name: &str, expression: &str) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        target: Some(pb::ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                expression: expression.into(),
            })),
        }),
        ..Default::default()
    }
}

const INCREMENT: &str = r#"{"data": {"n": string(int(object.data.n) + 1)}}"#;

/// The value of the first sample of `metric` whose line contains every one of `labels`.
fn sample(text: &str, metric: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(metric))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .find_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()))
        .unwrap_or_else(|| panic!("no {metric} {labels:?} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_rpcs_attempts_conflicts_and_api_requests() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("metrics").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "m"}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    // Every RPC its own write, so that the writers conflict (group commit is counted in
    // tests/integration/engine.rs).
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().unwrap(),
        "--no-group-commit",
    ]);

    // 8 writers x 10 increments: the sidecar orders them, one write each.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut client = WriterServiceClient::new(sidecar.channel().await);
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                client
                    .update_with_retry(cel(&ns, "ConfigMap", "m", INCREMENT))
                    .await
                    .expect("increment");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Then another writer changes the object behind the sidecar's back, so that the
    // next increment, written from the sidecar's remembered copy, certainly conflicts.
    let mut cm = api.get("m").await.unwrap();
    cm.data
        .get_or_insert_with(Default::default)
        .insert("outside".into(), "1".into());
    api.replace("m", &PostParams::default(), &cm).await.unwrap();
    WriterServiceClient::new(sidecar.channel().await)
        .update_with_retry(cel(&ns, "ConfigMap", "m", INCREMENT))
        .await
        .expect("increment after the outside write");

    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let missing = client
        .update_with_retry(cel(&ns, "ConfigMap", "absent", INCREMENT))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    let text = sidecar.metrics();
    let ok = sample(
        &text,
        "safewrite_rpcs_total",
        &["method=\"UpdateWithRetry\"", "code=\"OK\""],
    );
    assert_eq!(ok, 81.0);
    let not_found = sample(
        &text,
        "safewrite_rpcs_total",
        &["method=\"UpdateWithRetry\"", "code=\"NOT_FOUND\""],
    );
    assert_eq!(not_found, 1.0);
    let conflicts = sample(&text, "safewrite_conflicts_total", &[]);
    let conflict_answers = sample(
        &text,
        "safewrite_api_requests_total",
        &["verb=\"update\"", "code=\"409\""],
    );
    assert!(conflicts > 0.0, "the outside write made no conflict");
    assert_eq!(conflicts, conflict_answers, "every 409 counted once");
    let updates = sample(
        &text,
        "safewrite_api_requests_total",
        &["verb=\"update\"", "code=\"200\""],
    );
    assert_eq!(updates, 81.0, "one successful PUT per increment");
    let attempts = sample(
        &text,
        "safewrite_rpc_attempts_sum",
        &["method=\"UpdateWithRetry\""],
    );
    assert_eq!(
        attempts,
        82.0 + conflicts,
        "attempts = one per RPC plus one per conflict"
    );
    assert_eq!(
        sample(
            &text,
            "safewrite_write_outcomes_total",
            &["outcome=\"updated\""]
        ),
        81.0
    );
    assert_eq!(sample(&text, "safewrite_rpcs_in_flight", &[]), 0.0);
    assert_eq!(sample(&text, "safewrite_breaker_state", &[]), 0.0);
    assert!(text.contains("safewrite_rpc_duration_seconds_bucket"));
    assert!(text.contains("safewrite_api_request_duration_seconds_bucket"));
    assert!(
        text.trim_end().ends_with("# EOF"),
        "OpenMetrics text ends with # EOF"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_the_trace_id_and_never_a_secret() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("logs").await;
    let secrets: Api<Secret> = Api::namespaced(cp.admin_client().await, &ns);
    let secret_value = format!("hunter2-{}", std::process::id());
    let encoded = {
        use std::io::Write;
        let mut out = Vec::new();
        let mut child = std::process::Command::new("base64")
            .arg("-w0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(secret_value.as_bytes())
            .unwrap();
        out.extend(child.wait_with_output().unwrap().stdout);
        String::from_utf8(out).unwrap()
    };
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"}, "data": {"password": encoded, "n": "MA=="}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    // Everything at debug, in JSON: the most a log could say. Secrets are written only
    // where a rule names them.
    let secrets_rule = format!("core/Secret:{ns}");
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().unwrap(),
        "--log-filter",
        "debug",
        "--log-format",
        "json",
        "--allow",
        "*",
        "--allow",
        &secrets_rule,
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    // Read-dependent writes to the Secret: one that changes it, one that fails on a
    // precondition (its error carries the current object to the caller, not the log).
    let rotate = r#"{"data": {"rotated": object.data.password}}"#.to_string();
    let result = client
        .update_with_retry(cel(&ns, "Secret", "creds", &rotate))
        .await
        .expect("update the secret")
        .into_inner()
        .result
        .unwrap();
    assert_eq!(result.trace_id.len(), 32, "a W3C trace id: {result:?}");
    let mut failing = cel(&ns, "Secret", "creds", &rotate);
    failing.preconditions = Some(pb::Preconditions {
        cel: "object.data.password == 'nope'".into(),
        ..Default::default()
    });
    let err = client.update_with_retry(failing).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    drop(client);

    let log = sidecar.log();
    assert!(
        !log.contains(&secret_value) && !log.contains(&encoded),
        "the secret's value reached the log"
    );
    // Every line logged inside the RPC carries its trace id (in the span list).
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(!lines.is_empty(), "JSON lines expected:\n{log}");
    let in_rpc: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["spans"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["name"] == "rpc"))
        })
        .collect();
    assert!(
        !in_rpc.is_empty(),
        "no line was logged inside an RPC:\n{log}"
    );
    for line in &in_rpc {
        let rpc = line["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "rpc")
            .unwrap();
        assert_eq!(
            rpc["trace_id"].as_str().map(str::len),
            Some(32),
            "a line without the trace id: {line}"
        );
    }
    assert!(
        in_rpc
            .iter()
            .any(|l| l.to_string().contains(&result.trace_id)),
        "the result's trace id is the one in the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_neither_fails_rpcs_nor_floods_the_log() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("nocollector").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    // A port with nothing behind it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    for protocol in ["grpc", "http/protobuf"] {
        let endpoint = format!("http://127.0.0.1:{port}");
        let sidecar = Sidecar::start_with_env(
            &["--kubeconfig", cp.admin_kubeconfig().to_str().unwrap()],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ],
        );
        let mut client = WriterServiceClient::new(sidecar.channel().await);
        for _ in 0..40 {
            client
                .update_with_retry(cel(&ns, "ConfigMap", "c", INCREMENT))
                .await
                .expect("an RPC never fails for want of a collector");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let log = sidecar.log();
        let complaints = log.matches("trace export failing").count();
        assert!(
            complaints <= 1,
            "{protocol}: {complaints} complaints about the collector:\n{log}"
        );
        assert!(
            log.lines().count() < 20,
            "{protocol}: the log grew with the RPCs:\n{log}"
        );
    }
    let n: u64 = api.get("c").await.unwrap().data.unwrap()["n"]
        .parse()
        .unwrap();
    assert_eq!(n, 80);
}
