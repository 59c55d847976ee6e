//! The `safewrite serve` process against the real control plane: health follows the API
//! server's readiness, reflection lets grpcurl list and describe the API, unix sockets
//! work, SIGTERM drains and exits cleanly, and bad configuration fails with one line.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{ControlPlane, Sidecar, run_safewrite, tool_dir};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

async fn health(channel: tonic::transport::Channel, service: &str) -> ServingStatus {
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_string(),
        })
        .await
        .expect("health check");
    answer.into_inner().status()
}

/// Asserts that `service` of `sidecar` (through `channel`) turns SERVING within
/// `within`, showing the sidecar's log when it does not.
async fn assert_serving(
    sidecar: &Sidecar,
    channel: &tonic::transport::Channel,
    service: &str,
    within: Duration,
) {
    assert!(
        wait_for_health(channel, service, ServingStatus::Serving, within).await,
        "{service:?} never became SERVING; log:\n{}",
        sidecar.log()
    );
}

async fn wait_for_health(
    channel: &tonic::transport::Channel,
    service: &str,
    want: ServingStatus,
    within: Duration,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if health(channel.clone(), service).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn kubeconfig_arg(cp: &ControlPlane) -> String {
    cp.admin_kubeconfig().display().to_string()
}

/// The sidecar's runtime threads (tokio names them `tokio-rt-worker`).
fn runtime_workers(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the sidecar's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "tokio-rt-worker")
        .count()
}

#[tokio::test]
async fn the_runtime_runs_on_the_worker_threads_asked_for() {
    let cp = ControlPlane::shared();
    let kubeconfig = kubeconfig_arg(cp);
    for (args, workers) in [(vec![], 1), (vec!["--worker-threads", "3"], 3)] {
        let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
        all.extend(args);
        let sidecar = Sidecar::start(&all);
        // Serving: the runtime and its workers are up.
        let channel = sidecar.channel().await;
        assert_serving(&sidecar, &channel, "", Duration::from_secs(10)).await;
        assert_eq!(runtime_workers(sidecar.pid()), workers, "{all:?}");
    }
    let (status, output) = run_safewrite(&["serve", "--worker-threads", "0"]);
    assert_eq!(status.code(), Some(2), "a usage error: {output}");
    assert!(output.contains("--worker-threads"), "{output}");
}

#[tokio::test]
async fn health_turns_serving_once_the_api_server_is_ready() {
    let cp = ControlPlane::shared();
    let sidecar = Sidecar::start(&["--kubeconfig", &kubeconfig_arg(cp)]);
    let channel = sidecar.channel().await;
    for service in ["", "safewrite.v1.WriterService"] {
        assert_serving(&sidecar, &channel, service, Duration::from_secs(10)).await;
    }
}

#[tokio::test]
async fn grpcurl_lists_and_describes_the_api_through_reflection() {
    let cp = ControlPlane::shared();
    let sidecar = Sidecar::start(&["--kubeconfig", &kubeconfig_arg(cp)]);
    let grpcurl = tool_dir().join("grpcurl");
    let addr = sidecar.addr.to_string();
    let run = |args: &[&str]| {
        let out = Command::new(&grpcurl)
            .arg("-plaintext")
            .args(args)
            .output()
            .expect("run grpcurl");
        assert!(
            out.status.success(),
            "grpcurl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let list = run(&[&addr, "list"]);
    for service in ["safewrite.v1.WriterService", "grpc.health.v1.Health"] {
        assert!(
            list.lines().any(|l| l == service),
            "{service} not in {list}"
        );
    }
    let described = run(&[&addr, "describe", "safewrite.v1.WriterService"]);
    for rpc in ["UpdateWithRetry", "PatchStatus", "Transact"] {
        assert!(described.contains(rpc), "{rpc} not in {described}");
    }
    let message = run(&[&addr, "describe", "safewrite.v1.RetryPolicy"]);
    assert!(message.contains("max_attempts"), "{message}");
}

#[tokio::test]
async fn empty_requests_are_refused_before_anything_is_sent() {
    let cp = ControlPlane::shared();
    let sidecar = Sidecar::start(&["--kubeconfig", &kubeconfig_arg(cp)]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let status = client
        .update_with_retry(pb::UpdateWithRetryRequest::default())
        .await
        .expect_err("an empty request names no object");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("target"), "{status:?}");
    assert!(status.message().contains("nothing was sent"), "{status:?}");
    let status = client
        .patch_status(pb::PatchStatusRequest::default())
        .await
        .expect_err("an empty request names no object");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // A transaction that never opens is refused the same way.
    let status = client
        .transact(tokio_stream::iter(Vec::<pb::TransactRequest>::new()))
        .await
        .expect_err("a Transact stream must open with begin");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("begin"), "{status:?}");
}

/// A TCP forwarder from `listener` to `target`, started late to play an API server that
/// becomes reachable after the sidecar started.
fn forward(listener: TcpListener, target: u16) {
    listener.set_nonblocking(true).expect("nonblocking");
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

#[tokio::test]
async fn starts_not_serving_while_the_api_server_is_unreachable_then_recovers() {
    let cp = ControlPlane::shared();
    // A kubeconfig whose server is a loopback port nobody serves yet.
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr").port()
    };
    let config = std::fs::read_to_string(cp.admin_kubeconfig())
        .expect("kubeconfig")
        .replace(cp.server(), &format!("https://127.0.0.1:{port}"));
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("late.kubeconfig");
    std::fs::write(&kubeconfig, config).expect("write kubeconfig");

    let sidecar = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().expect("utf-8")]);
    let channel = sidecar.channel().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        health(channel.clone(), "").await,
        ServingStatus::NotServing,
        "log:\n{}",
        sidecar.log()
    );
    assert!(sidecar.log().contains("not ready"), "{}", sidecar.log());

    forward(
        TcpListener::bind(("127.0.0.1", port)).expect("bind the late port"),
        cp.api_port(),
    );
    assert_serving(&sidecar, &channel, "", Duration::from_secs(15)).await;
}

// Multi-threaded: the client must answer the server's GOAWAY while the test blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_on_a_unix_socket_and_removes_it_on_exit() {
    let cp = ControlPlane::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("safewrite.sock");
    let socket_arg = socket.to_str().expect("utf-8").to_string();
    let mut sidecar = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig_arg(cp),
        "--unix-socket",
        &socket_arg,
    ]);
    let channel = sidecar.unix_channel().await;
    assert_serving(&sidecar, &channel, "", Duration::from_secs(10)).await;

    // A second sidecar refuses the live socket instead of stealing it.
    let (status, stderr) = run_safewrite(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--kubeconfig",
        &kubeconfig_arg(cp),
        "--unix-socket",
        &socket_arg,
    ]);
    assert!(!status.success());
    assert!(stderr.contains("in use by another process"), "{stderr}");

    let status = sidecar.terminate(Duration::from_secs(10)).expect("exited");
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "the socket file is removed at exit");
}

// Multi-threaded: the client must answer the server's GOAWAY while the test blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_exits_zero() {
    let cp = ControlPlane::shared();
    let mut sidecar = Sidecar::start(&["--kubeconfig", &kubeconfig_arg(cp)]);
    let channel = sidecar.channel().await;
    assert_serving(&sidecar, &channel, "", Duration::from_secs(10)).await;
    drop(channel);
    let started = Instant::now();
    let status = sidecar
        .terminate(Duration::from_secs(15))
        .expect("safewrite exits after SIGTERM");
    assert!(status.success(), "{status:?}; log:\n{}", sidecar.log());
    assert!(started.elapsed() < Duration::from_secs(15));
    let log = sidecar.log();
    assert!(log.contains("draining in-flight RPCs"), "{log}");
    assert!(log.contains("drained; exiting"), "{log}");
}

/// Asserts a failed start: non-zero exit and exactly one stderr line naming the cause.
fn assert_one_line_failure(args: &[&str], cause: &str) {
    let (status, stderr) = run_safewrite(args);
    assert!(!status.success(), "{args:?} should fail");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: expected one line, got:\n{stderr}"
    );
    assert!(
        lines[0].contains(cause),
        "{args:?}: {:?} lacks {cause:?}",
        lines[0]
    );
}

#[test]
fn bad_configuration_fails_with_one_clear_line() {
    let cp = ControlPlane::shared();
    let kubeconfig = kubeconfig_arg(cp);
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_addr = taken.local_addr().expect("addr").to_string();
    assert_one_line_failure(
        &[
            "serve",
            "--kubeconfig",
            &kubeconfig,
            "--listen",
            &taken_addr,
        ],
        &format!("failed to listen on {taken_addr}"),
    );
    assert_one_line_failure(
        &["serve", "--kubeconfig", "/nonexistent/kubeconfig"],
        "failed to read kubeconfig /nonexistent/kubeconfig",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.kubeconfig");
    std::fs::write(&garbage, "this: is: not: a kubeconfig").expect("write");
    assert_one_line_failure(
        &["serve", "--kubeconfig", garbage.to_str().expect("utf-8")],
        "failed to read kubeconfig",
    );
    assert_one_line_failure(
        &[
            "serve",
            "--kubeconfig",
            &kubeconfig,
            "--context",
            "no-such-context",
        ],
        "failed to use kubeconfig",
    );
    // The policy, the token file and the socket's group are checked before serving.
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "allow:\n  - kinds: apps/Deployment\n    namespace: a\n",
    )
    .expect("write");
    let socket = dir.path().join("s.sock");
    for (args, cause) in [
        (
            vec!["--policy", "/nonexistent/policy.yaml"],
            "failed to read policy file /nonexistent/policy.yaml".to_string(),
        ),
        (
            vec!["--policy", policy.to_str().expect("utf-8")],
            "rule 1: unknown key \"namespace\"".to_string(),
        ),
        (
            vec!["--token-file", "/nonexistent/token"],
            "failed to read token file /nonexistent/token".to_string(),
        ),
        (
            vec![
                "--unix-socket",
                socket.to_str().expect("utf-8"),
                "--unix-socket-group",
                "no-such-group-anywhere",
            ],
            "unix socket group \"no-such-group-anywhere\"".to_string(),
        ),
    ] {
        let mut all = vec!["serve", "--kubeconfig", &kubeconfig];
        all.extend(args);
        assert_one_line_failure(&all, &cause);
    }
    // Command-line errors: one line too, and exit code 2 (a usage error).
    for (args, cause) in [
        (
            &["serve", "--shutdown-grace", "soon"][..],
            "--shutdown-grace",
        ),
        (&["serve", "--bogus"][..], "--bogus"),
        (&["serve", "--allow", "Deployment"][..], "GROUP/KIND"),
        (&["serve", "--unix-socket-mode", "0999"][..], "octal mode"),
        (&["health", "--address", "nowhere"][..], "host:port"),
    ] {
        assert_one_line_failure(args, cause);
        assert_eq!(run_safewrite(args).0.code(), Some(2), "{args:?}");
    }
}

#[test]
fn every_flag_can_be_set_from_the_environment() {
    let out = Command::new(env!("CARGO_BIN_EXE_safewrite"))
        .args(["serve", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8(out.stdout).expect("utf-8");
    let flags = help
        .lines()
        .filter(|l| l.trim_start().starts_with("--") && !l.contains("--help"))
        .count();
    let envs = help.matches("[env: SAFEWRITE_").count();
    assert!(flags >= 7, "{help}");
    assert_eq!(flags, envs, "a flag lacks an environment variable:\n{help}");
    assert!(help.contains("[default: 127.0.0.1:50051]"), "{help}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_in_flight_rpcs_are_shed_and_oversized_requests_refused() {
    use safewrite_api::pb::transact_request::Message as Req;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("shed").await;
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig_arg(cp),
        "--max-in-flight",
        "2",
        "--max-request-bytes",
        "65536",
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let target = pb::ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: ns.clone(),
        name: "shed".into(),
    };
    let create = |patch: String| pb::UpdateWithRetryRequest {
        target: Some(target.clone()),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: patch,
            })),
        }),
        options: Some(pb::WriteOptions {
            create_if_missing_json: "{}".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    client
        .update_with_retry(create(r#"{"data": {"a": "1"}}"#.into()))
        .await
        .unwrap();

    // Two transactions held open (waiting for our proposal) fill the sidecar; each on
    // its own object, since transactions to one object queue behind one another.
    let mut held = Vec::new();
    for i in 0..2 {
        let own = pb::ObjectRef {
            name: format!("held-{i}"),
            ..target.clone()
        };
        client
            .update_with_retry(pb::UpdateWithRetryRequest {
                target: Some(own.clone()),
                ..create(r#"{"data": {"a": "1"}}"#.into())
            })
            .await
            .unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(pb::TransactRequest {
            message: Some(Req::Begin(pb::TransactBegin {
                target: Some(own),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
        let mut answers = client
            .transact(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        answers.message().await.unwrap().expect("a fresh object");
        held.push((tx, answers));
    }
    let err = client
        .update_with_retry(create(r#"{"data": {"b": "2"}}"#.into()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("--max-in-flight"), "{err:?}");

    // Freeing one place lets the next RPC in.
    drop(held.pop());
    let mut admitted = false;
    for _ in 0..50 {
        if client
            .update_with_retry(create(r#"{"data": {"b": "2"}}"#.into()))
            .await
            .is_ok()
        {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(admitted, "a freed place was never reused");
    drop(held);

    // A request over --max-request-bytes is refused before anything is sent.
    let big = format!(r#"{{"data": {{"big": "{}"}}}}"#, "x".repeat(100_000));
    let err = client.update_with_retry(create(big)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
}
