//! The port of a sidecar in a pod: the allow-list checked before any request (proven
//! with the API server's own request counters), the default that keeps Secrets out, the
//! shared token, `safewrite health` for exec probes, the unix socket's mode and group,
//! and what operators read: reasons and subresources in the metrics, process metrics,
//! build info, `/livez` and `/readyz`, short log lines that start with the version and
//! the API server.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{ControlPlane, FaultProxy, Sidecar, apiserver_requests, install_crd, tool_dir};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

/// Every verb the API server counts.
const ALL_VERBS: &[&str] = &[
    "GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE", "APPLY",
];
/// The verbs that change something (the API server's own controllers read configmaps).
const WRITE_VERBS: &[&str] = &["POST", "PUT", "PATCH", "DELETE", "APPLY"];

fn target(api_version: &str, kind: &str, ns: &str, name: &str) -> pb::ObjectRef {
    pb::ObjectRef {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

fn merge(patch: serde_json::Value) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
            patch_json: patch.to_string(),
        })),
    })
}

fn update(target: pb::ObjectRef, patch: serde_json::Value) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        target: Some(target),
        mutation: merge(patch),
        ..Default::default()
    }
}

fn create(target: pb::ObjectRef, patch: serde_json::Value) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        options: Some(pb::WriteOptions {
            create_if_missing_json: "{}".into(),
            ..Default::default()
        }),
        ..update(target, patch)
    }
}

fn patch_status(target: pb::ObjectRef, patch: serde_json::Value) -> pb::PatchStatusRequest {
    pb::PatchStatusRequest {
        target: Some(target),
        mutation: merge(patch),
        ..Default::default()
    }
}

/// Opens a Transact on `target` and returns what the sidecar answers first.
async fn transact(
    client: &mut WriterServiceClient<Channel>,
    target: pb::ObjectRef,
) -> Result<pb::TransactResponse, tonic::Status> {
    use pb::transact_request::Message;
    let begin = pb::TransactRequest {
        message: Some(Message::Begin(pb::TransactBegin {
            target: Some(target),
            ..Default::default()
        })),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(begin).await.unwrap();
    let mut answers = client
        .transact(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let first = answers.message().await?.expect("an answer");
    drop(tx);
    Ok(first)
}

/// Asserts a POLICY_DENIED refusal whose suggested rule is `rule`, and that nothing of
/// `secret` (a Secret's value) is in it.
fn assert_denied(status: &tonic::Status, rule: &str, allow: &str, secret: &str) {
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let info = status.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "POLICY_DENIED", "{status:?}");
    assert_eq!(info.metadata["rule"], rule, "{status:?}");
    assert_eq!(info.metadata["allow"], allow, "{status:?}");
    assert!(status.message().contains("nothing was sent"), "{status:?}");
    assert!(status.message().contains(allow), "{status:?}");
    let details = String::from_utf8_lossy(status.details());
    assert!(
        !status.message().contains(secret) && !details.contains(secret),
        "a Secret's data in a refusal: {status:?}"
    );
}

/// The sum of the samples whose line starts with `prefix`.
fn sum(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// What the API server has received for `resource`, with `verbs`.
async fn received(cp: &ControlPlane, resources: &[(&str, &[&str])]) -> Vec<f64> {
    let mut counts = Vec::new();
    for (resource, verbs) in resources {
        counts.push(apiserver_requests(cp, verbs, resource).await);
    }
    counts
}

async fn create_secret(cp: &ControlPlane, ns: &str, name: &str, value: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(cp.admin_client().await, ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name}, "stringData": {"password": value}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let data = secrets.get(name).await.unwrap().data.unwrap();
    let encoded = serde_json::to_value(&data["password"]).unwrap();
    encoded.as_str().unwrap().to_string()
}

async fn create_configmap(cp: &ControlPlane, ns: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"a": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_writes_send_nothing_and_name_the_flag_that_allows_them() {
    // Its own control plane: the API server's counters must see this test's requests
    // alone.
    let cp: &'static ControlPlane = Box::leak(Box::new(ControlPlane::start()));
    let ns = cp.namespace("policy").await;
    let other = cp.namespace("policy-other").await;
    install_crd(&cp.admin_client().await, "widgets", "Widget").await;
    let value = format!("hunter2-{}", std::process::id());
    let encoded = create_secret(cp, &ns, "db", &value).await;
    create_configmap(cp, &ns, "cm").await;
    create_configmap(cp, &other, "cm").await;
    let widget = |name: &str| target("test.safewrite.dev/v1", "Widget", &ns, name);
    let configmap = |ns: &str, name: &str| target("v1", "ConfigMap", ns, name);
    let secret = target("v1", "Secret", &ns, "db");

    let kubeconfig = cp.admin_kubeconfig().display().to_string();
    let default = Sidecar::start(&["--kubeconfig", &kubeconfig]);
    let strict = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig,
        "--allow",
        &format!("core/ConfigMap:{ns}:main:update"),
        "--allow",
        &format!("test.safewrite.dev/Widget:{ns}:main"),
    ]);
    let mut open = WriterServiceClient::new(default.channel().await);
    let mut narrow = WriterServiceClient::new(strict.channel().await);
    // Allowed writes first: they work, and discovery is warm for what follows.
    open.update_with_retry(update(configmap(&ns, "cm"), json!({"data": {"a": "1"}})))
        .await
        .expect("the default policy allows ConfigMaps");
    narrow
        .update_with_retry(update(configmap(&ns, "cm"), json!({"data": {"a": "2"}})))
        .await
        .expect("a rule allows this ConfigMap");
    narrow
        .update_with_retry(create(widget("w"), json!({"spec": {"size": 1}})))
        .await
        .expect("a rule allows this Widget, creation included");

    let counted: &[(&str, &[&str])] = &[
        ("secrets", ALL_VERBS),
        ("widgets", ALL_VERBS),
        ("configmaps", WRITE_VERBS),
    ];
    let before = received(cp, counted).await;

    // The `{}` merge patch that used to answer with a Secret's data.
    let err = open
        .update_with_retry(update(secret.clone(), json!({})))
        .await
        .unwrap_err();
    let rule = format!("core/Secret:{ns}:main:update");
    assert_denied(
        &err,
        &rule,
        &format!("--allow '*' --allow '{rule}'"),
        &encoded,
    );
    assert!(
        err.message()
            .contains("Secrets are denied unless allowed explicitly"),
        "{err:?}"
    );
    let err = transact(&mut open, secret.clone()).await.unwrap_err();
    let rule = format!("core/Secret:{ns}:main:transact");
    assert_denied(
        &err,
        &rule,
        &format!("--allow '*' --allow '{rule}'"),
        &encoded,
    );

    let refusals: Vec<(tonic::Status, String)> = vec![
        (
            narrow
                .update_with_retry(update(secret.clone(), json!({})))
                .await
                .unwrap_err(),
            format!("core/Secret:{ns}:main:update"),
        ),
        (
            narrow
                .update_with_retry(update(configmap(&other, "cm"), json!({"data": {"a": "x"}})))
                .await
                .unwrap_err(),
            format!("core/ConfigMap:{other}:main:update"),
        ),
        (
            narrow
                .update_with_retry(create(configmap(&ns, "new"), json!({"data": {"a": "x"}})))
                .await
                .unwrap_err(),
            format!("core/ConfigMap:{ns}:main:create-if-missing"),
        ),
        (
            narrow
                .patch_status(patch_status(widget("w"), json!({"status": {"n": 1}})))
                .await
                .unwrap_err(),
            format!("test.safewrite.dev/Widget:{ns}:status:patch-status"),
        ),
        (
            transact(&mut narrow, configmap(&ns, "cm"))
                .await
                .unwrap_err(),
            format!("core/ConfigMap:{ns}:main:transact"),
        ),
    ];
    for (err, rule) in &refusals {
        assert_denied(err, rule, &format!("--allow '{rule}'"), &encoded);
    }
    let (namespace_err, _) = &refusals[1];
    assert!(
        namespace_err
            .message()
            .contains(&format!("'core/ConfigMap:{ns}:main:update' (--allow)")),
        "the denial names the closest rule: {namespace_err:?}"
    );

    let after = received(cp, counted).await;
    eprintln!(
        "API server requests (secrets all verbs, widgets all verbs, configmaps writes): before {before:?}, after 7 denied writes {after:?}"
    );
    assert_eq!(before, after, "a denied write sent a request");

    // Counted, by reason and subresource.
    let metrics = strict.metrics();
    let denied = "safewrite_rpcs_total{method=\"UpdateWithRetry\",code=\"PERMISSION_DENIED\",reason=\"POLICY_DENIED\",subresource=\"main\"}";
    assert_eq!(sum(&metrics, denied), 3.0, "{metrics}");
    let denied = "safewrite_rpcs_total{method=\"PatchStatus\",code=\"PERMISSION_DENIED\",reason=\"POLICY_DENIED\",subresource=\"status\"}";
    assert_eq!(sum(&metrics, denied), 1.0, "{metrics}");
    let denied = "safewrite_rpcs_total{method=\"Transact\",code=\"PERMISSION_DENIED\",reason=\"POLICY_DENIED\",subresource=\"main\"}";
    assert_eq!(sum(&metrics, denied), 1.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_written_and_echoed_only_once_a_rule_names_them() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("policy-secrets").await;
    let value = format!("correct-horse-{}", std::process::id());
    let encoded = create_secret(cp, &ns, "db", &value).await;
    let secret = target("v1", "Secret", &ns, "db");
    let kubeconfig = cp.admin_kubeconfig().display().to_string();

    let default = Sidecar::start(&["--kubeconfig", &kubeconfig]);
    let mut client = WriterServiceClient::new(default.channel().await);
    let err = client
        .update_with_retry(update(secret.clone(), json!({})))
        .await
        .unwrap_err();
    let rule = format!("core/Secret:{ns}:main:update");
    assert_denied(
        &err,
        &rule,
        &format!("--allow '*' --allow '{rule}'"),
        &encoded,
    );
    let log = default.log();
    assert!(
        log.contains("EXCEPT Secrets") && log.contains("WARN"),
        "the default policy is said loudly at start:\n{log}"
    );

    // Rules from the environment (space-separated), the Secret named explicitly.
    let allowed = Sidecar::start_with_env(
        &["--kubeconfig", &kubeconfig],
        &[(
            "SAFEWRITE_ALLOW",
            &format!("* core/Secret:{ns}:main:update"),
        )],
    );
    let mut client = WriterServiceClient::new(allowed.channel().await);
    let read = client
        .update_with_retry(update(secret.clone(), json!({})))
        .await
        .expect("an explicitly allowed Secret")
        .into_inner()
        .result
        .unwrap();
    assert_eq!(read.outcome(), pb::Outcome::Unchanged);
    assert!(
        read.object_json.contains(&encoded),
        "allowed: the data is there"
    );
    client
        .update_with_retry(create(
            target("v1", "ConfigMap", &ns, "still"),
            json!({"data": {"a": "1"}}),
        ))
        .await
        .expect("`*` still allows the rest");
    let err = transact(&mut client, secret.clone()).await.unwrap_err();
    assert_eq!(
        err.code(),
        Code::PermissionDenied,
        "update only, not transact"
    );
    assert!(
        allowed.log().contains("allows writing Secrets"),
        "{}",
        allowed.log()
    );

    // A policy file: YAML, with rules as maps and in the flag syntax.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(
        &file,
        format!(
            "allow:\n  - kinds: [core/ConfigMap]\n    namespaces: [{ns}]\n    operations: [update, create-if-missing]\n  - \"apps/*:{ns}\"\n"
        ),
    )
    .unwrap();
    let filed = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig,
        "--policy",
        file.to_str().unwrap(),
    ]);
    let mut client = WriterServiceClient::new(filed.channel().await);
    client
        .update_with_retry(create(
            target("v1", "ConfigMap", &ns, "filed"),
            json!({"data": {"a": "1"}}),
        ))
        .await
        .expect("the file allows it");
    let err = client
        .update_with_retry(update(secret, json!({})))
        .await
        .unwrap_err();
    assert_denied(&err, &rule, &format!("--allow '{rule}'"), &encoded);
    assert!(
        err.message().contains("no rule names core/Secret"),
        "{err:?}"
    );
    let log = filed.log();
    assert!(log.contains("policy allows"), "{log}");
    assert!(
        log.contains(&format!("core/ConfigMap:{ns}:*:update,create-if-missing")),
        "{log}"
    );
}

/// Runs `safewrite health ARGS` with `vars`, and returns its output and how long it took.
fn health(args: &[&str], vars: &[(&str, &str)]) -> (Output, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_safewrite"))
        .arg("health")
        .args(args)
        .env_remove("SAFEWRITE_ADDRESS")
        .env_remove("SAFEWRITE_TOKEN_FILE")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run safewrite health");
    (out, started.elapsed())
}

fn one_line(out: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.lines().count(), 1, "one line expected: {text:?}");
    text.trim().to_string()
}

/// Waits until `safewrite health ARGS` exits 0.
fn wait_serving(args: &[&str], sidecar: &Sidecar) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if health(args, &[]).0.status.success() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("never SERVING; log:\n{}", sidecar.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_subcommand_exits_0_only_for_a_serving_sidecar() {
    let cp = ControlPlane::shared();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().unwrap(),
        "--unix-socket",
        socket.to_str().unwrap(),
    ]);
    let addr = sidecar.addr.to_string();
    wait_serving(&["--address", &addr], &sidecar);

    let unix = format!("unix://{}", socket.display());
    let http = format!("http://{addr}");
    for args in [
        &["--address", &addr][..],
        &["--address", &http],
        &["--address", &unix],
        &[
            "--address",
            &addr,
            "--service",
            "safewrite.v1.WriterService",
        ],
    ] {
        let (out, _) = health(args, &[]);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(one_line(&out).ends_with(": SERVING"), "{args:?}: {out:?}");
    }
    // The address from the environment, the one variable every client reads.
    let (out, _) = health(&[], &[("SAFEWRITE_ADDRESS", &unix)]);
    assert!(out.status.success(), "{out:?}");
    let (out, _) = health(&["--address", &addr, "--service", "nope"], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(one_line(&out).contains("unknown service"), "{out:?}");

    // A sidecar whose API server is unreachable: NOT_SERVING, exit 1.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let kubeconfig = dir.path().join("unreachable.kubeconfig");
    std::fs::write(
        &kubeconfig,
        std::fs::read_to_string(cp.admin_kubeconfig())
            .unwrap()
            .replace(cp.server(), &format!("https://127.0.0.1:{port}")),
    )
    .unwrap();
    let lonely = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (out, _) = health(&["--address", &lonely.addr.to_string()], &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{out:?}; log:\n{}",
        lonely.log()
    );
    assert!(one_line(&out).ends_with(": NOT_SERVING"), "{out:?}");

    // Nothing listening: exit 1 at once, not after the timeout.
    let (out, took) = health(
        &["--address", &format!("127.0.0.1:{port}"), "--timeout", "5s"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let missing = format!("unix://{}", dir.path().join("none.sock").display());
    let (out, took) = health(&["--address", &missing], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    one_line(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_token_guards_writes_but_not_health_or_reflection() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("token").await;
    let dir = tempfile::tempdir().unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let token = format!("tok-{}-{nanos:x}-shared-secret", std::process::id());
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().unwrap(),
        "--token-file",
        file.to_str().unwrap(),
    ]);
    let addr = sidecar.addr.to_string();
    // Health and reflection need no token.
    wait_serving(&["--address", &addr], &sidecar);
    let (out, _) = health(
        &["--address", &addr],
        &[("SAFEWRITE_TOKEN_FILE", file.to_str().unwrap())],
    );
    assert!(out.status.success(), "{out:?}");
    let list = Command::new(tool_dir().join("grpcurl"))
        .args(["-plaintext", &addr, "list"])
        .output()
        .expect("grpcurl");
    assert!(list.status.success(), "{list:?}");
    assert!(String::from_utf8_lossy(&list.stdout).contains("safewrite.v1.WriterService"));

    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let request = || {
        create(
            target("v1", "ConfigMap", &ns, "guarded"),
            json!({"data": {"a": "1"}}),
        )
    };
    let with = |value: &str| {
        let mut r = tonic::Request::new(request());
        r.metadata_mut()
            .insert("authorization", value.parse().unwrap());
        r
    };
    let err = client.update_with_retry(request()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert_eq!(
        err.get_details_error_info().unwrap().reason,
        "TOKEN_REQUIRED"
    );
    assert!(err.message().contains("authorization: Bearer"), "{err:?}");
    let err = client
        .update_with_retry(with(&format!("Bearer {token}x")))
        .await
        .unwrap_err();
    assert_eq!(
        err.get_details_error_info().unwrap().reason,
        "TOKEN_INVALID"
    );
    let err = transact(&mut client, target("v1", "ConfigMap", &ns, "guarded"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    // A refused transaction is answered once its begin is in, so that a client still
    // sending it gets the answer rather than a broken stream; one that sends nothing is
    // answered within a second all the same.
    for begin_after in [Some(Duration::from_millis(300)), None] {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let begin = pb::TransactRequest {
            message: Some(pb::transact_request::Message::Begin(pb::TransactBegin {
                target: Some(target("v1", "ConfigMap", &ns, "guarded")),
                ..Default::default()
            })),
        };
        let sender = tokio::spawn(async move {
            if let Some(after) = begin_after {
                tokio::time::sleep(after).await;
                tx.send(begin).await.unwrap();
            }
            // Held open: the answer must not wait for the end of the stream.
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(tx);
        });
        let started = Instant::now();
        let err = client
            .transact(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap_err();
        let took = started.elapsed();
        sender.abort();
        assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
        match begin_after {
            Some(after) => assert!(took >= after, "answered before the begin: {took:?}"),
            None => assert!(
                (Duration::from_secs(1)..Duration::from_secs(3)).contains(&took),
                "answered after {took:?}"
            ),
        }
    }
    let written = client
        .update_with_retry(with(&format!("Bearer {token}")))
        .await
        .expect("the right token")
        .into_inner()
        .result
        .unwrap();
    assert_eq!(written.outcome(), pb::Outcome::Created);

    let metrics = sidecar.metrics();
    assert_eq!(
        sum(
            &metrics,
            "safewrite_rpcs_total{method=\"UpdateWithRetry\",code=\"UNAUTHENTICATED\",reason=\"TOKEN_REQUIRED\",subresource=\"main\"}"
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        sum(
            &metrics,
            "safewrite_rpcs_total{method=\"Transact\",code=\"UNAUTHENTICATED\",reason=\"TOKEN_REQUIRED\",subresource=\"unknown\"}"
        ),
        3.0,
        "{metrics}"
    );
    assert!(!sidecar.log().contains(&token), "the token reached the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unix_socket_gets_the_mode_and_group_asked_for() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let cp = ControlPlane::shared();
    let dir = tempfile::tempdir().unwrap();
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let kubeconfig = cp.admin_kubeconfig().display().to_string();

    let default = dir.path().join("default.sock");
    let _a = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig,
        "--unix-socket",
        default.to_str().unwrap(),
    ]);
    assert_eq!(mode(&default), 0o660, "the default mode");

    let gid = std::fs::metadata(dir.path()).unwrap().gid().to_string();
    let narrow = dir.path().join("narrow.sock");
    let b = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig,
        "--unix-socket",
        narrow.to_str().unwrap(),
        "--unix-socket-mode",
        "0600",
        "--unix-socket-group",
        &gid,
    ]);
    assert_eq!(mode(&narrow), 0o600);
    assert_eq!(std::fs::metadata(&narrow).unwrap().gid().to_string(), gid);
    assert!(b.log().contains("mode=0600"), "{}", b.log());
    let unix = format!("unix://{}", narrow.display());
    wait_serving(&["--address", &unix], &b);
}

/// The HTTP status of `GET url`.
fn http_status(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", url])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_can_tell_failures_and_subresources_apart() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("operators").await;
    install_crd(&cp.admin_client().await, "widgets", "Widget").await;
    let proxy = FaultProxy::start(cp.api_port()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--breaker-failures",
        "2",
        "--breaker-cooldown",
        "30s",
        "--breaker-max-cooldown",
        "30s",
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let widget = target("test.safewrite.dev/v1", "Widget", &ns, "w");
    client
        .update_with_retry(create(widget.clone(), json!({"spec": {"size": 1}})))
        .await
        .unwrap();
    client
        .patch_status(patch_status(widget.clone(), json!({"status": {"n": 1}})))
        .await
        .unwrap();

    let base = format!("http://{}", sidecar.metrics_addr());
    assert_eq!(http_status(&format!("{base}/livez")), "200");
    assert_eq!(http_status(&format!("{base}/readyz")), "200");
    let metrics = sidecar.metrics();
    for (line, want) in [
        (
            "safewrite_rpcs_total{method=\"UpdateWithRetry\",code=\"OK\",reason=\"none\",subresource=\"main\"}",
            1.0,
        ),
        (
            "safewrite_rpcs_total{method=\"PatchStatus\",code=\"OK\",reason=\"none\",subresource=\"status\"}",
            1.0,
        ),
        (
            "safewrite_write_outcomes_total{outcome=\"created\",subresource=\"main\"}",
            1.0,
        ),
        (
            "safewrite_write_outcomes_total{outcome=\"updated\",subresource=\"status\"}",
            1.0,
        ),
        ("safewrite_build_info{version=\"", 1.0),
    ] {
        assert_eq!(sum(&metrics, line), want, "{line}:\n{metrics}");
    }
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_max_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(sum(&metrics, name) > 0.0, "{name}:\n{metrics}");
    }

    // The path to the API server breaks: the breaker opens, and its refusals are
    // counted as such, not as one more UNAVAILABLE.
    proxy.reset_all();
    let mut failed = Vec::new();
    for _ in 0..3 {
        let mut request = tonic::Request::new(update(widget.clone(), json!({"spec": {"size": 2}})));
        request.set_timeout(Duration::from_secs(5));
        let err = client.update_with_retry(request).await.unwrap_err();
        failed.push(
            err.get_details_error_info()
                .map(|i| i.reason)
                .unwrap_or_default(),
        );
    }
    assert_eq!(
        failed.last().map(String::as_str),
        Some("CIRCUIT_OPEN"),
        "{failed:?}"
    );
    let metrics = sidecar.metrics();
    let open = sum(
        &metrics,
        "safewrite_rpcs_total{method=\"UpdateWithRetry\",code=\"UNAVAILABLE\",reason=\"CIRCUIT_OPEN\",subresource=\"main\"}",
    );
    assert!(open >= 1.0, "{failed:?}:\n{metrics}");
    // Readiness follows the API server: /readyz turns 503.
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_status(&format!("{base}/readyz")) != "503" {
        assert!(Instant::now() < deadline, "/readyz never said 503");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy.pass();

    // The log starts with the version and the API server, and its lines are short.
    let log = sidecar.log();
    let start = log
        .lines()
        .find(|l| l.contains("safewrite starting"))
        .unwrap_or_else(|| panic!("no start line:\n{log}"));
    assert!(
        start.contains(&format!("version={}", env!("CARGO_PKG_VERSION"))),
        "{start}"
    );
    assert!(
        start.contains(&format!("api_server=https://127.0.0.1:{}", proxy.port)),
        "{start}"
    );
    assert!(
        log.contains("config: serving") && log.contains("config: writes"),
        "{log}"
    );
    for line in log.lines() {
        assert!(line.len() < 400, "{} characters: {line}", line.len());
        assert!(
            !line.contains("otel.") && !line.contains("rpc.system"),
            "{line}"
        );
    }
}
