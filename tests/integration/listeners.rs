//! The sidecar's listeners and streams under abuse, against the real sidecar and API
//! server: floods of idle connections and half-sent requests neither lock callers out
//! nor grow memory; running out of file descriptors backs off instead of spinning, and
//! the sidecar serves again once they are free; silent transactions hold no place in
//! flight and end at their idle bound; malformed and oversized messages are refused with
//! rich details and counted.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message as _;
use support::{ControlPlane, Sidecar};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

use safewrite_api::pb;
use safewrite_api::pb::transact_request::Message as Req;
use safewrite_api::pb::transact_response::Message as Resp;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

pub(crate) fn kubeconfig(cp: &ControlPlane) -> String {
    cp.admin_kubeconfig().display().to_string()
}

/// A field of /proc/<pid>/status in KiB (e.g. "VmRSS:").
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("read /proc status")
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("a field of /proc status")
}

/// User plus system CPU time of a process so far, in clock ticks (1/100 s on Linux).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    let (_, rest) = stat.rsplit_once(')').expect("comm");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3, utime 14 and stime 15 (1-based).
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The soft open-file limit of this test process.
fn file_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(1024)
}

fn target(ns: &str, name: &str) -> pb::ObjectRef {
    pb::ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

/// Create-or-merge of `data` into ConfigMap `ns/name`.
pub(crate) fn write(ns: &str, name: &str, data: &str) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        target: Some(target(ns, name)),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: format!(r#"{{"data": {data}}}"#),
            })),
        }),
        options: Some(pb::WriteOptions {
            create_if_missing_json: "{}".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn begin(ns: &str, name: &str) -> pb::TransactRequest {
    pb::TransactRequest {
        message: Some(Req::Begin(pb::TransactBegin {
            target: Some(target(ns, name)),
            ..Default::default()
        })),
    }
}

/// A fresh channel (its own connection) to the sidecar.
async fn connect(addr: std::net::SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect to safewrite")
}

/// The value of one sample of the sidecar's metrics, 0 when absent.
fn sample(metrics: &str, line_start: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

/// The sum of the samples whose line starts with `line_start` (every reason and
/// subresource of a method and code).
fn total(metrics: &str, line_start: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(line_start))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The type names of a status's rich details.
fn detail_types(status: &tonic::Status) -> Vec<String> {
    tonic_types::pb::Status::decode(status.details())
        .map(|s| s.details.into_iter().map(|d| d.type_url).collect())
        .unwrap_or_default()
}

/// Asserts the details every safewrite error carries, and returns the ErrorInfo.
pub(crate) fn assert_rich(
    status: &tonic::Status,
    code: Code,
    reason: &str,
) -> tonic_types::ErrorInfo {
    assert_eq!(status.code(), code, "{status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.domain, "safewrite.dev", "{status:?}");
    assert_eq!(info.reason, reason, "{status:?}");
    let types = detail_types(status);
    assert!(
        types
            .iter()
            .any(|t| t.ends_with("safewrite.v1.WriteFailure")),
        "no WriteFailure in {types:?}"
    );
    info
}

/// Reads a socket until the peer closes it; false if it is still open after `within`.
async fn closed_by_peer(socket: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}

// Multi-threaded: thousands of sockets and the RPCs beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_and_half_sent_requests_neither_lock_out_callers_nor_grow_memory() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("flood").await;
    let sidecar = Sidecar::start(&["--kubeconfig", &kubeconfig(cp), "--handshake-timeout", "3s"]);
    let pid = sidecar.pid();
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    client
        .update_with_retry(write(&ns, "c", r#"{"a": "1"}"#))
        .await
        .expect("a first write");
    sidecar.metrics();
    let rss_before = status_kib(pid, "VmRSS:");

    // 2,000 of each, or what this process's file limit allows.
    let n = 2000.min(file_limit().saturating_sub(200) / 2);
    let metrics_addr = sidecar.metrics_addr();
    let mut idle = Vec::with_capacity(n);
    let mut half_sent = Vec::with_capacity(n);
    for _ in 0..n {
        idle.push(TcpStream::connect(sidecar.addr).await.expect("connect"));
        let mut socket = TcpStream::connect(metrics_addr).await.expect("connect");
        socket
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: safewrite\r\n")
            .await
            .expect("half a request");
        half_sent.push(socket);
    }

    // A real caller and a real scrape get through at once.
    let started = Instant::now();
    let mut fresh = WriterServiceClient::new(connect(sidecar.addr).await);
    let written = tokio::time::timeout(
        Duration::from_secs(5),
        fresh.update_with_retry(write(&ns, "c", r#"{"b": "2"}"#)),
    )
    .await
    .expect("the write is not locked out")
    .expect("the write succeeds");
    assert_eq!(
        written.into_inner().result.unwrap().outcome(),
        pb::Outcome::Updated
    );
    let metrics = tokio::task::spawn_blocking({
        let addr = metrics_addr;
        move || {
            Command::new("curl")
                .args(["-fsS", "-m", "5", &format!("http://{addr}/metrics")])
                .output()
                .expect("curl")
        }
    })
    .await
    .unwrap();
    assert!(
        metrics.status.success(),
        "a scrape was locked out: {metrics:?}"
    );
    let served_in = started.elapsed();
    let rss_during = status_kib(pid, "VmRSS:");
    eprintln!(
        "{n} idle gRPC connections + {n} half-sent metrics requests: a write and a scrape in {served_in:?}; RSS {rss_before} -> {rss_during} KiB"
    );
    assert!(served_in < Duration::from_secs(3), "{served_in:?}");
    // Bounded by the caps (1,024 gRPC and 64 metrics connections), not by the flood.
    assert!(
        rss_during < rss_before + 48 * 1024,
        "RSS grew from {rss_before} to {rss_during} KiB"
    );

    // Whatever the flood left open is closed by the handshake timeout.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for socket in idle.iter_mut().chain(half_sent.iter_mut()) {
        assert!(
            closed_by_peer(socket, Duration::from_secs(3)).await,
            "a flood connection is still open past the handshake timeout"
        );
    }
    // And the caller's own connection, busy or idle within the timeouts, still works.
    fresh
        .update_with_retry(write(&ns, "c", r#"{"c": "3"}"#))
        .await
        .expect("the caller's connection survived");
}

/// The HTTP/2 client preface and an empty SETTINGS frame: a gRPC connection's opening.
const H2_OPENING: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_after_the_idle_timeout_and_busy_ones_stay() {
    let cp = ControlPlane::shared();
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig(cp),
        "--handshake-timeout",
        "10s",
        "--idle-timeout",
        "1s",
    ]);
    // A gRPC connection that opened and then does nothing.
    let mut grpc = TcpStream::connect(sidecar.addr).await.unwrap();
    grpc.write_all(H2_OPENING).await.unwrap();
    // A metrics connection kept alive after one scrape.
    let mut scrape = TcpStream::connect(sidecar.metrics_addr()).await.unwrap();
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: safewrite\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    scrape.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // A connection busy with a stream that stays open (a health watch).
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let mut watch = HealthClient::new(connect(sidecar.addr).await)
        .watch(HealthCheckRequest::default())
        .await
        .expect("a health watch")
        .into_inner();
    watch.message().await.expect("the first status");

    let started = Instant::now();
    assert!(closed_by_peer(&mut grpc, Duration::from_secs(5)).await);
    assert!(closed_by_peer(&mut scrape, Duration::from_secs(5)).await);
    let closed_in = started.elapsed();
    assert!(
        closed_in < Duration::from_secs(3),
        "idle connections closed after {closed_in:?}, not at the 1 s idle timeout"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The busy connection is still open: a closed one would fail the read at once.
    loop {
        match tokio::time::timeout(Duration::from_millis(300), watch.message()).await {
            Err(_) => break,      // nothing to read: open
            Ok(Ok(Some(_))) => {} // a status change (readiness): open
            Ok(ended) => panic!("the busy connection was closed: {ended:?}"),
        }
    }
}

/// A sidecar started under `ulimit -n <limit>`, with JSON logs read for its address.
struct Limited {
    child: Child,
    addr: std::net::SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Limited {
    fn start(limit: u32, args: &[&str]) -> Limited {
        use std::io::BufRead as _;
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_safewrite"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "off",
            ])
            .args(["--readiness-interval", "200ms", "--log-format", "json"])
            .args(args)
            .env("NO_COLOR", "1")
            .env("OTEL_SDK_DISABLED", "true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn safewrite under ulimit");
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) {
                    let fields = &json["fields"];
                    if fields["message"] == "listening" && fields["transport"] == "tcp" {
                        let _ = tx.send(fields["address"].as_str().unwrap().parse().unwrap());
                    }
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no listening line; log:\n{}", log.lock().unwrap()));
        Limited { child, addr, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn serving(channel: Channel) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_file_descriptors_backs_off_and_serves_again() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("emfile").await;
    let sidecar = Limited::start(64, &["--kubeconfig", &kubeconfig(cp)]);
    let pid = sidecar.child.id();
    assert!(serving(connect(sidecar.addr).await).await);

    // 100 connections, each busy with a health watch (a stream that stays open), so
    // that none can be closed to make room: past ~50 the sidecar has no descriptor left.
    let mut holders = Vec::new();
    for _ in 0..100 {
        let addr = sidecar.addr;
        holders.push(tokio::spawn(async move {
            use tonic_health::pb::HealthCheckRequest;
            use tonic_health::pb::health_client::HealthClient;
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect_lazy();
            if let Ok(watch) = HealthClient::new(channel)
                .watch(HealthCheckRequest::default())
                .await
            {
                let mut watch = watch.into_inner();
                while let Ok(Some(_)) = watch.message().await {}
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = sidecar.log();
    assert!(
        log.contains("failed to accept connections"),
        "no accept error logged; log:\n{log}"
    );
    let before = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = cpu_ticks(pid) - before;
    eprintln!("out of file descriptors: {used} ticks of CPU in 1 s (100 = one core)");
    assert!(used <= 10, "the sidecar spins: {used} ticks in 1 s");
    assert_eq!(
        sidecar
            .log()
            .matches("failed to accept connections")
            .count(),
        1,
        "accept errors are logged once, not per error"
    );

    for holder in &holders {
        holder.abort();
    }
    for holder in holders {
        let _ = holder.await;
    }
    // The descriptors come back: a new caller is served, writes included.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Ok(channel)) = tokio::time::timeout(
            Duration::from_secs(2),
            tonic::transport::Endpoint::from_shared(format!("http://{}", sidecar.addr))
                .unwrap()
                .connect(),
        )
        .await
            && serving(channel.clone()).await
        {
            WriterServiceClient::new(channel)
                .update_with_retry(write(&ns, "after", r#"{"a": "1"}"#))
                .await
                .expect("a write after the flood");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never served again; log:\n{}",
            sidecar.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_transactions_hold_no_place_in_flight_and_end_at_the_idle_bound() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("silent").await;
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig(cp),
        "--max-in-flight",
        "50",
        // Long enough that the 60 transactions below open one after another well within
        // it on a loaded 2-core machine, or the first would end before the last opens.
        "--transact-idle-timeout",
        "3s",
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    client
        .update_with_retry(write(&ns, "t", r#"{"n": "0"}"#))
        .await
        .unwrap();

    // 60 streams that never send begin: no place in flight is taken.
    let started = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..60 {
        let mut client = client.clone();
        let (tx, rx) = mpsc::channel::<pb::TransactRequest>(1);
        silent.push(tokio::spawn(async move {
            let result = client.transact(ReceiverStream::new(rx)).await;
            drop(tx);
            (result.map(|_| ()), Instant::now())
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    client
        .update_with_retry(write(&ns, "t", r#"{"n": "1"}"#))
        .await
        .expect("silent streams lock out no unary RPC");
    let mut last = Duration::ZERO;
    for task in silent {
        let (result, ended) = task.await.unwrap();
        last = last.max(ended - started);
        let status = result.expect_err("a silent stream is ended");
        let info = assert_rich(&status, Code::DeadlineExceeded, "TRANSACTION_IDLE");
        assert_eq!(info.metadata["waiting_for"], "begin");
        assert!(
            status.message().contains("--transact-idle-timeout"),
            "{status:?}"
        );
        let took = ended - started;
        assert!(took < Duration::from_secs(5), "ended after {took:?}");
    }
    eprintln!(
        "60 silent streams with --max-in-flight 50: a unary RPC served beside them; all ended by {last:?}"
    );

    // 60 that send begin and never answer: 50 hold a place, 10 are refused, and the
    // places come back at the bound. Each on its own object: transactions to one object
    // take turns, and only the first would be offered one.
    for i in 0..60 {
        client
            .update_with_retry(write(&ns, &format!("h{i}"), r#"{"n": "0"}"#))
            .await
            .unwrap();
    }
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..60 {
        let (tx, rx) = mpsc::channel(1);
        tx.send(begin(&ns, &format!("h{i}"))).await.unwrap();
        match client.transact(ReceiverStream::new(rx)).await {
            Ok(answers) => {
                let mut answers = answers.into_inner();
                match answers.message().await {
                    Ok(Some(pb::TransactResponse {
                        message: Some(Resp::Fresh(_)),
                    })) => held.push((tx, answers)),
                    other => panic!("expected a fresh object, got {other:?}"),
                }
            }
            Err(status) => {
                assert_rich(&status, Code::ResourceExhausted, "OVERLOADED");
                refused += 1;
            }
        }
    }
    assert_eq!((held.len(), refused), (50, 10));
    let status = client
        .update_with_retry(write(&ns, "t", r#"{"n": "2"}"#))
        .await
        .expect_err("50 open transactions fill --max-in-flight 50");
    assert_eq!(status.code(), Code::ResourceExhausted);
    let filled = Instant::now();
    for (tx, mut answers) in held {
        let status = answers.message().await.expect_err("ended at the bound");
        let info = assert_rich(&status, Code::DeadlineExceeded, "TRANSACTION_IDLE");
        assert_eq!(info.metadata["waiting_for"], "proposal");
        assert_eq!(info.metadata["attempts"], "1");
        drop(tx);
    }
    let freed = filled.elapsed();
    eprintln!("50 transactions that never answered held every place; freed after {freed:?}");
    assert!(freed < Duration::from_secs(5), "{freed:?}");
    client
        .update_with_retry(write(&ns, "t", r#"{"n": "3"}"#))
        .await
        .expect("the places came back");

    let metrics = sidecar.metrics();
    assert_eq!(
        total(
            &metrics,
            "safewrite_rpcs_total{method=\"Transact\",code=\"DEADLINE_EXCEEDED\","
        ),
        110.0,
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "safewrite_rpcs_in_flight "), 0.0);
}

/// A codec that sends and receives raw message bytes: what a broken client sends.
#[derive(Default, Clone)]
pub(crate) struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut as _;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf as _;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// A unary call of `method` with raw bytes.
pub(crate) async fn raw_unary(
    channel: Channel,
    method: &'static str,
    body: Vec<u8>,
) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static(method);
    grpc.unary(tonic::Request::new(body), path, Raw)
        .await
        .expect_err("refused")
}

/// Bytes that are no protobuf message: field 1 with wire type 7, which does not exist.
const GARBAGE: &[u8] = &[0x0f, 0xff, 0xff];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_messages_are_refused_with_details_and_counted() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("refused").await;
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig(cp),
        "--max-request-bytes",
        "65536",
    ]);
    let channel = sidecar.channel().await;
    let mut client = WriterServiceClient::new(channel.clone());
    client
        .update_with_retry(write(&ns, "r", r#"{"a": "1"}"#))
        .await
        .unwrap();

    // Malformed unary messages: INVALID_ARGUMENT, not tonic's INTERNAL.
    for method in [
        "/safewrite.v1.WriterService/UpdateWithRetry",
        "/safewrite.v1.WriterService/PatchStatus",
    ] {
        let status = raw_unary(channel.clone(), method, GARBAGE.to_vec()).await;
        let info = assert_rich(&status, Code::InvalidArgument, "MALFORMED_REQUEST");
        assert_eq!(info.metadata["attempts"], "0");
        assert!(status.message().contains("nothing was sent"), "{status:?}");
    }

    // Oversized unary messages: OUT_OF_RANGE with details, each one counted.
    let big = format!(r#"{{"big": "{}"}}"#, "x".repeat(100_000));
    for _ in 0..12 {
        let status = client
            .update_with_retry(write(&ns, "r", &big))
            .await
            .unwrap_err();
        let info = assert_rich(&status, Code::OutOfRange, "REQUEST_TOO_LARGE");
        assert_eq!(info.metadata["limit_bytes"], "65536");
        assert!(
            status.message().contains("--max-request-bytes"),
            "{status:?}"
        );
    }

    // A Transact that opens with an oversized or a malformed begin.
    let (tx, rx) = mpsc::channel(1);
    let mut huge = begin(&ns, "r");
    if let Some(Req::Begin(b)) = &mut huge.message {
        b.options = Some(pb::WriteOptions {
            create_if_missing_json: format!(r#"{{"data": {big}}}"#),
            ..Default::default()
        });
    }
    tx.send(huge).await.unwrap();
    let status = client
        .transact(ReceiverStream::new(rx))
        .await
        .expect_err("an oversized begin");
    assert_rich(&status, Code::OutOfRange, "REQUEST_TOO_LARGE");
    let transact = "/safewrite.v1.WriterService/Transact";
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let status = grpc
        .streaming(
            tonic::Request::new(tokio_stream::iter(vec![GARBAGE.to_vec()])),
            http::uri::PathAndQuery::from_static(transact),
            Raw,
        )
        .await
        .expect_err("a malformed begin");
    assert_rich(&status, Code::InvalidArgument, "MALFORMED_REQUEST");

    // A malformed proposal in the middle of a transaction.
    let (tx, rx) = mpsc::channel::<Vec<u8>>(1);
    tx.send(begin(&ns, "r").encode_to_vec()).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let mut answers = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            http::uri::PathAndQuery::from_static(transact),
            Raw,
        )
        .await
        .expect("the transaction opens")
        .into_inner();
    let fresh = answers.message().await.unwrap().expect("a fresh object");
    let fresh = pb::TransactResponse::decode(fresh.as_slice()).unwrap();
    assert!(matches!(fresh.message, Some(Resp::Fresh(_))));
    tx.send(GARBAGE.to_vec()).await.unwrap();
    let status = answers.message().await.expect_err("a malformed proposal");
    let info = assert_rich(&status, Code::InvalidArgument, "MALFORMED_REQUEST");
    assert_eq!(info.metadata["attempts"], "1");
    assert!(
        status
            .message()
            .contains("nothing was written after that point"),
        "{status:?}"
    );

    // An unknown method of the service.
    let status = raw_unary(
        channel.clone(),
        "/safewrite.v1.WriterService/Nope",
        Vec::new(),
    )
    .await;
    assert_rich(&status, Code::Unimplemented, "UNIMPLEMENTED");

    let metrics = sidecar.metrics();
    let count = |method: &str, code: &str| {
        total(
            &metrics,
            &format!("safewrite_rpcs_total{{method=\"{method}\",code=\"{code}\","),
        )
    };
    assert_eq!(count("UpdateWithRetry", "OUT_OF_RANGE"), 12.0, "{metrics}");
    assert_eq!(
        count("UpdateWithRetry", "INVALID_ARGUMENT"),
        1.0,
        "{metrics}"
    );
    assert_eq!(count("PatchStatus", "INVALID_ARGUMENT"), 1.0, "{metrics}");
    assert_eq!(count("Transact", "OUT_OF_RANGE"), 1.0, "{metrics}");
    assert_eq!(count("Transact", "INVALID_ARGUMENT"), 2.0, "{metrics}");
    assert_eq!(count("unknown", "UNIMPLEMENTED"), 1.0, "{metrics}");
}

/// A raw HTTP/2 connection to the sidecar, for calls no gRPC library would make.
async fn raw_http2<B>(addr: std::net::SocketAddr) -> hyper::client::conn::http2::SendRequest<B>
where
    B: hyper::body::Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (h2, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("an HTTP/2 connection");
    tokio::spawn(connection);
    h2
}

/// The answer to a raw HTTP/2 gRPC call: the status of its trailers-only response.
async fn raw_answer(
    answer: impl std::future::Future<Output = hyper::Result<http::Response<hyper::body::Incoming>>>,
) -> Option<tonic::Status> {
    let response = answer.await.ok()?;
    tonic::Status::from_header_map(response.headers())
}

/// Half-sent messages hold at most `--max-receiving-bytes`: 64 UpdateWithRetry calls on
/// one connection each send a 1 MiB message but its last byte. Three fit in the 4 MiB
/// budget and are held; every other is refused at once with RESOURCE_EXHAUSTED (reason
/// OVERLOADED) while a real caller still writes; the held ones end at the receive
/// timeout (5 s). Without the budget the sidecar would hold all 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_messages_hold_no_more_than_the_receive_budget() {
    use futures::FutureExt as _;
    use http_body_util::StreamBody;
    use hyper::body::{Bytes, Frame};

    let cp = ControlPlane::shared();
    let ns = cp.namespace("receiving").await;
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig(cp),
        "--max-request-bytes",
        "1048576",
        "--max-receiving-bytes",
        "4194304",
        "--receive-timeout",
        "5s",
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    client
        .update_with_retry(write(&ns, "h", r#"{"a": "1"}"#))
        .await
        .expect("a first write");
    let rss_before = status_kib(sidecar.pid(), "VmRSS:");

    let mut h2 = raw_http2(sidecar.addr).await;
    let length = 1024 * 1024;
    let mut message = vec![0u8];
    message.extend_from_slice(&(length as u32).to_be_bytes());
    message.resize(5 + length - 1, b'x');
    let message = Bytes::from(message);

    // Each call's answer, or its open stream (its sender kept, so it stays half-sent).
    let mut answered = Vec::new();
    let mut open = Vec::new();
    for _ in 0..64 {
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(1);
        let request = http::Request::post(format!(
            "http://{}/safewrite.v1.WriterService/UpdateWithRetry",
            sidecar.addr
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(StreamBody::new(ReceiverStream::new(rx)))
        .expect("request");
        h2.ready().await.expect("a stream");
        let mut answer = Box::pin(raw_answer(h2.send_request(request)));
        tx.send(Ok(Frame::data(message.clone())))
            .await
            .expect("send");
        // A refusal comes at once; give it the time to, so that the calls go one by one.
        match tokio::time::timeout(Duration::from_millis(200), &mut answer).await {
            Ok(status) => answered.push(status.expect("a trailers-only refusal")),
            Err(_) => open.push((tx, answer)),
        }
    }
    // What was sent has been read by now (without the budget, RSS grows by ~68 MiB).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_during = status_kib(sidecar.pid(), "VmRSS:");
    let mut held = Vec::new();
    for (tx, mut answer) in open {
        match (&mut answer).now_or_never() {
            Some(status) => answered.push(status.expect("a trailers-only refusal")),
            None => held.push((tx, answer)),
        }
    }
    eprintln!(
        "64 half-sent 1 MiB messages: {} held, {} answered; RSS {rss_before} -> {rss_during} KiB",
        held.len(),
        answered.len()
    );
    assert!(
        rss_during < rss_before + 32 * 1024,
        "RSS grew from {rss_before} to {rss_during} KiB"
    );

    // A real caller is not locked out.
    client
        .update_with_retry(write(&ns, "h", r#"{"b": "2"}"#))
        .await
        .expect("a write beside the held messages");

    // The held messages end at the receive timeout, and their bytes come back.
    for (_tx, answer) in held {
        let status = tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .expect("ended at the receive timeout")
            .expect("a trailers-only refusal");
        answered.push(status);
    }
    // Three messages of 1 MiB fit in 4 MiB and end at the receive timeout (on a slow
    // machine some may have ended before the check above); every other was refused.
    let (mut refused, mut timed_out) = (0, 0);
    for status in &answered {
        if status.code() == Code::ResourceExhausted {
            let info = assert_rich(status, Code::ResourceExhausted, "OVERLOADED");
            assert_eq!(info.metadata["limit_bytes"], "4194304");
            assert!(
                status.message().contains("--max-receiving-bytes"),
                "{status:?}"
            );
            assert!(status.get_details_retry_info().is_some(), "{status:?}");
            refused += 1;
        } else {
            assert_rich(status, Code::DeadlineExceeded, "REQUEST_NOT_READ");
            assert!(status.message().contains("--receive-timeout"), "{status:?}");
            timed_out += 1;
        }
    }
    assert_eq!(
        (refused, timed_out),
        (61, 3),
        "three held, the rest refused"
    );
    let metrics = sidecar.metrics();
    let count = |code: &str| {
        total(
            &metrics,
            &format!("safewrite_rpcs_total{{method=\"UpdateWithRetry\",code=\"{code}\","),
        )
    };
    assert_eq!(count("RESOURCE_EXHAUSTED"), 61.0, "{metrics}");
    assert_eq!(count("DEADLINE_EXCEEDED"), 3.0, "{metrics}");
}

/// A call whose deadline is shorter than anything the sidecar could do (a grpc-timeout
/// under 1 ms) is answered at once with the sidecar's own DEADLINE_EXCEEDED and its
/// details, never with the bare CANCELLED "Timeout expired" of the gRPC server's timeout,
/// which fires on the next millisecond tick (it did, one call in a few, before). A raw
/// HTTP/2 client sends them: a gRPC library would enforce so short a deadline itself and
/// never show the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_too_short_for_anything_gets_the_sidecars_own_answer() {
    use http_body_util::Full;
    use hyper::body::Bytes;

    let cp = ControlPlane::shared();
    let ns = cp.namespace("short-deadline").await;
    let sidecar = Sidecar::start(&["--kubeconfig", &kubeconfig(cp)]);
    let mut h2 = raw_http2(sidecar.addr).await;
    let message = write(&ns, "short", r#"{"a": "1"}"#).encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    let framed = Bytes::from(framed);
    for timeout in ["1u", "100u", "900u"].iter().cycle().take(60) {
        let request = http::Request::post(format!(
            "http://{}/safewrite.v1.WriterService/UpdateWithRetry",
            sidecar.addr
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", *timeout)
        .body(Full::new(framed.clone()))
        .expect("request");
        h2.ready().await.expect("a stream");
        let status = raw_answer(h2.send_request(request))
            .await
            .expect("a trailers-only answer");
        let info = assert_rich(&status, Code::DeadlineExceeded, "DEADLINE_EXCEEDED");
        assert_eq!(info.metadata["attempts"], "0", "{status:?}");
    }
}

#[test]
fn bad_flags_print_one_line_and_exit_2_and_help_still_works() {
    for (args, cause) in [
        (
            &["serve", "--qps", "x"][..],
            "invalid value 'x' for '--qps <QPS>'",
        ),
        (&["serve", "--bogus"][..], "unexpected argument '--bogus'"),
        (
            &["serve", "--transact-idle-timeout", "0s"][..],
            "must be longer than zero",
        ),
        (
            &[
                "serve",
                "--max-request-bytes",
                "1048576",
                "--max-receiving-bytes",
                "1048576",
            ][..],
            "--max-receiving-bytes 1048576 cannot hold one message",
        ),
        (&["nope"][..], "unrecognized subcommand 'nope'"),
        (&[][..], "no subcommand given"),
    ] {
        let (status, stderr) = support::run_safewrite(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: expected one line:\n{stderr}");
        assert!(lines[0].starts_with("safewrite: error: "), "{stderr}");
        assert!(lines[0].contains(cause), "{args:?}: {stderr}");
        assert!(lines[0].contains("--help)"), "{stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_safewrite"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--max-connections",
        "--metrics-max-connections",
        "--handshake-timeout",
        "--idle-timeout",
        "--keepalive-interval",
        "--keepalive-timeout",
        "--transact-idle-timeout",
        "--max-receiving-bytes",
        "--receive-timeout",
    ] {
        assert!(help.contains(flag), "{flag} not in:\n{help}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_safewrite"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .starts_with("safewrite ")
    );
}

/// A gRPC `Get` of `ns/name` sent over a raw HTTP/2 connection whose stream window is
/// HTTP/2's smallest default (64 KiB) and whose answer is never read: the answer cannot
/// leave whole. The connection lives as long as the returned request handle.
async fn get_never_read(
    addr: std::net::SocketAddr,
    ns: &str,
    name: &str,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Full<hyper::body::Bytes>>,
    http::Response<hyper::body::Incoming>,
) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut h2, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("an HTTP/2 connection");
    tokio::spawn(connection);
    let message = pb::GetRequest {
        target: Some(target(ns, name)),
        ..Default::default()
    }
    .encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    let request = http::Request::post(format!("http://{addr}/safewrite.v1.WriterService/Get"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::Full::new(hyper::body::Bytes::from(framed)))
        .expect("request");
    let response = h2.send_request(request).await.expect("answer headers");
    assert_eq!(response.status(), 200);
    (h2, response)
}

/// Large answers leave within `--max-sending-bytes`, and a caller that never reads its
/// answer delays the others by at most the wait bound (5 s), never past their deadline:
/// with the smallest budget (64 KiB), one 200 KB answer that cannot leave holds all of
/// it; the next answer waits 5 s, or half the time left before a short deadline, then
/// goes without a share, whole; once the stuck caller has gone, answers take the budget again
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_leave_within_the_send_budget_and_a_stuck_reader_holds_no_one_for_long() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("sending").await;
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        &kubeconfig(cp),
        "--max-sending-bytes",
        "65536",
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let blob = "x".repeat(200_000);
    let created = client
        .update_with_retry(write(&ns, "big", &format!(r#"{{"blob": "{blob}"}}"#)))
        .await
        .expect("the object")
        .into_inner()
        .result
        .expect("a result");
    assert!(
        created.object_json.contains(&blob),
        "the answer carries the object whole"
    );
    let get = |timeout: Option<Duration>| {
        let mut client = client.clone();
        let mut request = tonic::Request::new(pb::GetRequest {
            target: Some(target(&ns, "big")),
            ..Default::default()
        });
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        async move {
            let started = Instant::now();
            let got = client.get(request).await.map(|r| r.into_inner());
            (got, started.elapsed())
        }
    };

    let (stuck, _headers) = get_never_read(sidecar.addr, &ns, "big").await;
    let held = |metrics: &str| sample(metrics, "safewrite_sending_bytes ");
    assert!(
        support::wait_until(Duration::from_secs(10), || held(&sidecar.metrics())
            == 65536.0),
        "the stuck answer holds the whole budget:\n{}",
        sidecar.metrics()
    );
    // Its answer holds the budget: the next waits the bound, then goes whole.
    let (got, took) = get(None).await;
    let got = got.expect("answered without a share");
    assert!(got.object_json.contains(&blob), "whole");
    assert!(
        took >= Duration::from_millis(4_900),
        "waited for the budget: {took:?}"
    );
    assert!(
        took < Duration::from_secs(30),
        "not held past the bound: {took:?}"
    );
    // A caller with less time than that is answered before its deadline.
    let (got, took) = get(Some(Duration::from_secs(2))).await;
    let got = got.expect("answered before the deadline");
    assert!(got.object_json.contains(&blob), "whole");
    assert!(took < Duration::from_secs(2), "{took:?}");
    // The stuck caller goes; its share comes back, and answers leave at once again.
    drop(stuck);
    drop(_headers);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (got, took) = get(None).await;
        assert!(got.expect("answered").object_json.contains(&blob), "whole");
        if took < Duration::from_secs(2) {
            break;
        }
        assert!(Instant::now() < deadline, "the budget never came back");
    }
    let metrics = sidecar.metrics();
    let answers = |share: &str| {
        sample(
            &metrics,
            &format!("safewrite_large_answers_total{{share=\"{share}\"}}"),
        )
    };
    assert!(answers("waited_out") >= 2.0, "{metrics}");
    assert!(answers("held") >= 2.0, "{metrics}");
    assert!(
        support::wait_until(Duration::from_secs(10), || held(&sidecar.metrics()) == 0.0),
        "every share given back:\n{}",
        sidecar.metrics()
    );
}
