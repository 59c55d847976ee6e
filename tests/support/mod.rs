//! Test support: a real control plane (etcd + kube-apiserver) from
//! `tests/harness/controlplane.sh`, one per test binary, a namespace per test, and the
//! safewrite binary run as a child process.
//!
//! Teardown does not depend on destructors (statics are never dropped): the script lives
//! until its stdin closes, and the pipe to it closes when this process ends, whether it
//! returns, panics or is killed.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding kube-apiserver, etcd, grpcurl and buf (built on first use).
pub fn tool_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo_root().join("tests/harness/binaries.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/harness/binaries.sh");
        assert!(out.status.success(), "tests/harness/binaries.sh failed");
        let text = String::from_utf8(out.stdout).expect("utf-8 path");
        PathBuf::from(text.lines().last().expect("a path line").trim())
    })
    .clone()
}

/// What `run_script` hands back: the child, its stdin (closing it stops the script),
/// its stdout past the ready line, the directory it named and that directory's `env`.
pub type Started = (
    Child,
    ChildStdin,
    BufReader<ChildStdout>,
    PathBuf,
    HashMap<String, String>,
);

/// Runs a harness script (`<script> run`) that prints `ready <dir>` when it is up and
/// lives until its stdin closes, and reads `<dir>/env` (KEY=VALUE lines).
pub fn run_script(script: &str, vars: &[(&str, &str)]) -> Started {
    let mut child = Command::new("bash")
        .arg(repo_root().join(script))
        .arg("run")
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {script}: {e}"));
    let stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read the ready line");
    let dir = match line.trim().strip_prefix("ready ") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "{script} did not start (exit: {:?}); see its stderr above",
            child.wait()
        ),
    };
    let env = std::fs::read_to_string(dir.join("env"))
        .expect("read env")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (child, stdin, stdout, dir, env)
}

/// A running control plane. Dropping it (or ending the process) tears it down.
pub struct ControlPlane {
    pub dir: PathBuf,
    /// `<dir>/env` as it was at start; the pids in it are the first processes'
    /// ([`Self::apiserver_pid`] and [`Self::etcd_pid`] read the running ones).
    pub env: HashMap<String, String>,
    child: Mutex<Child>,
    // Closing stdin is the stop signal; lines on it are the script's commands, each
    // answered with a line on stdout.
    control: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
}

impl ControlPlane {
    /// Starts a fresh control plane and waits until it is ready.
    pub fn start() -> ControlPlane {
        Self::start_with_flags("")
    }

    /// Like `start`, with extra kube-apiserver flags (e.g. max-inflight limits).
    pub fn start_with_flags(apiserver_flags: &str) -> ControlPlane {
        let started = Instant::now();
        let (child, stdin, stdout, dir, env) = run_script(
            "tests/harness/controlplane.sh",
            &[("SAFEWRITE_APISERVER_FLAGS", apiserver_flags)],
        );
        eprintln!(
            "control plane ready in {:.1}s at {}",
            started.elapsed().as_secs_f64(),
            dir.display()
        );
        ControlPlane {
            dir,
            env,
            child: Mutex::new(child),
            control: Mutex::new((stdin, stdout)),
        }
    }

    /// Sends a command to tests/harness/controlplane.sh and waits for its answer line.
    fn command(&self, command: &str, answer: &str) {
        use std::io::Write;
        let mut control = self.control.lock().expect("control pipes");
        writeln!(control.0, "{command}").expect("send a command to the control plane");
        control.0.flush().expect("flush");
        let mut line = String::new();
        control.1.read_line(&mut line).expect("read the answer");
        assert_eq!(line.trim(), answer, "control plane answered {command:?}");
    }

    /// Stops kube-apiserver (etcd and its data stay): connections are refused.
    pub fn stop_apiserver(&self) {
        self.command("stop-apiserver", "apiserver stopped");
    }

    /// Starts kube-apiserver again on the same port and waits until it is ready.
    pub fn start_apiserver(&self) {
        self.command("start-apiserver", "apiserver started");
    }

    /// Stops etcd (its data stays): the API server answers errors until it is back.
    pub fn stop_etcd(&self) {
        self.command("stop-etcd", "etcd stopped");
    }

    /// Starts etcd again on the same ports and waits until it is healthy.
    pub fn start_etcd(&self) {
        self.command("start-etcd", "etcd started");
    }

    /// The control plane shared by every test of this test binary.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(ControlPlane::start)
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    pub fn restricted_kubeconfig(&self) -> PathBuf {
        self.dir.join("restricted.kubeconfig")
    }

    pub fn server(&self) -> &str {
        &self.env["SERVER"]
    }

    pub fn api_port(&self) -> u16 {
        self.env["API_PORT"].parse().expect("port")
    }

    /// The running kube-apiserver's process id, read afresh from `<dir>/env` (`env`
    /// holds the first one's: a restart starts another); none while it is stopped.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.current_pid("APISERVER_PID")
    }

    /// The running etcd's process id, read afresh like [`Self::apiserver_pid`].
    pub fn etcd_pid(&self) -> Option<u32> {
        self.current_pid("ETCD_PID")
    }

    /// Pid `key` of `<dir>/env` as it is now: the script rewrites it (by a rename) after
    /// each stop and start, before answering, so under the control lock no command is
    /// half done.
    fn current_pid(&self, key: &str) -> Option<u32> {
        let _control = self.control.lock().expect("control pipes");
        let env = std::fs::read_to_string(self.dir.join("env")).expect("read env");
        env.lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.parse().ok())
    }

    /// A client for the admin identity (group system:masters).
    pub async fn admin_client(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig()).await
    }

    /// A client for the restricted identity (RBAC: get/list/watch configmaps only).
    pub async fn restricted_client(&self) -> kube::Client {
        client_from(&self.restricted_kubeconfig()).await
    }

    /// Creates a namespace no other test uses and returns its name.
    pub async fn namespace(&self, prefix: &str) -> String {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let api: Api<Namespace> = Api::all(self.admin_client().await);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}
        }))
        .expect("namespace");
        api.create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        name
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Closing stdin happens when the fields drop; wait so the teardown is finished.
        let child = self.child.get_mut().expect("lock");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let _ = child.wait();
    }
}

/// Builds a kube client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    kube::Client::try_from(config).expect("client")
}

/// The flags of the benches' sidecars after `--kubeconfig <file>`: limits no contender
/// reaches, since the client-side rate limiters are not the subject (at --qps 1000, 16
/// writers on 16 objects drained the burst and were paced), and quiet logs.
pub const BENCH_FLAGS: [&str; 6] = [
    "--qps",
    "5000",
    "--burst",
    "10000",
    "--log-filter",
    "warn,safewrite::runtime=info",
];

/// The CPU time (user + system) process `pid` has used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command's closing parenthesis; utime and stime are the 12th and
    // 13th of them, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// True while a process with this pid exists (and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Polls `condition` every 100 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    condition()
}

/// The transport and address of a "listening" log line, text or JSON.
fn listening(line: &str) -> Option<(&'static str, SocketAddr)> {
    let (message, transport, address) = if line.starts_with('{') {
        let json: serde_json::Value = serde_json::from_str(line).ok()?;
        let fields = &json["fields"];
        (
            fields["message"].as_str()?.to_string(),
            fields["transport"].as_str()?.to_string(),
            fields["address"].as_str()?.to_string(),
        )
    } else {
        let message = if line.contains("metrics listening") {
            "metrics listening"
        } else if line.contains("listening") {
            "listening"
        } else {
            return None;
        };
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .map(|v| v.trim_matches('"').to_string())
        };
        (
            message.to_string(),
            field("transport=")?,
            field("address=")?,
        )
    };
    let address = address.parse().ok()?;
    match (message.as_str(), transport.as_str()) {
        ("listening", "tcp") => Some(("tcp", address)),
        ("metrics listening", "http") => Some(("http", address)),
        _ => None,
    }
}

/// A gRPC channel over the unix socket at `path` (the probe's connector: `safewrite
/// health`), with no deadline of its own worth the name.
pub async fn unix_channel(
    path: &Path,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    safewrite::health::Address::Unix(path.to_path_buf())
        .connect(Duration::from_secs(3600))
        .await
}

/// The safewrite binary, running as a child process with captured logs.
pub struct Sidecar {
    child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
    metrics_addr: Arc<Mutex<Option<SocketAddr>>>,
    /// The path of `--unix-socket`, when it was given.
    unix_socket: Option<PathBuf>,
}

impl Sidecar {
    /// Starts `safewrite serve --listen 127.0.0.1:0 <args>` and waits for its TCP address.
    pub fn start(args: &[&str]) -> Sidecar {
        Self::start_with_env(args, &[])
    }

    /// Like `start`, with extra environment variables (e.g. OTEL_*) for the sidecar.
    pub fn start_with_env(args: &[&str], vars: &[(&str, &str)]) -> Sidecar {
        Self::start_binary_with_env(Path::new(env!("CARGO_BIN_EXE_safewrite")), args, vars)
    }

    /// Like `start`, running the safewrite binary at `binary` (e.g. an older build).
    pub fn start_binary(binary: &Path, args: &[&str]) -> Sidecar {
        Self::start_binary_with_env(binary, args, &[])
    }

    /// Like `start_with_env`, running the safewrite binary at `binary`.
    pub fn start_binary_with_env(binary: &Path, args: &[&str], vars: &[(&str, &str)]) -> Sidecar {
        let mut child = Command::new(binary)
            .envs(vars.iter().copied())
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            // Fast readiness, and a rate limit out of the way, unless the test says.
            .args(if args.contains(&"--readiness-interval") {
                &[][..]
            } else {
                &["--readiness-interval", "200ms"][..]
            })
            .args(if args.contains(&"--qps") {
                &[][..]
            } else {
                &["--qps", "5000", "--burst", "5000"][..]
            })
            // Sidecars run side by side: metrics on a free port unless the test says.
            .args(if args.contains(&"--metrics-listen") {
                &[][..]
            } else {
                &["--metrics-listen", "127.0.0.1:0"][..]
            })
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn safewrite");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        let metrics_addr = Arc::new(Mutex::new(None));
        let metrics_sink = metrics_addr.clone();
        // SAFEWRITE_TEST_SIDECAR_LOG=1 echoes every sidecar's log, to debug a test.
        let echo = std::env::var_os("SAFEWRITE_TEST_SIDECAR_LOG").is_some();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("[sidecar] {line}");
                }
                match listening(&line) {
                    Some(("http", addr)) => {
                        *metrics_sink.lock().expect("metrics addr") = Some(addr)
                    }
                    Some(("tcp", addr)) => {
                        let _ = tx.send(addr);
                    }
                    _ => {}
                }
                let mut log = sink.lock().expect("log");
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(_) => {
                // No Sidecar is returned to stop it on drop: stop it here.
                let _ = child.kill();
                let _ = child.wait();
                let log = log.lock().map(|log| log.clone()).unwrap_or_default();
                panic!(
                    "safewrite did not start listening; log:
{log}"
                )
            }
        };
        let unix_socket = args
            .iter()
            .position(|a| *a == "--unix-socket")
            .and_then(|at| args.get(at + 1))
            .map(PathBuf::from);
        Sidecar {
            child,
            addr,
            log,
            metrics_addr,
            unix_socket,
        }
    }

    /// The address of the sidecar's metrics endpoint (logged before the gRPC address).
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
            .lock()
            .expect("metrics addr")
            .expect("the sidecar logged no metrics address")
    }

    /// The sidecar's `/metrics` text.
    pub fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args(["-fsS", &format!("http://{}/metrics", self.metrics_addr())])
            .output()
            .expect("run curl");
        assert!(out.status.success(), "GET /metrics: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// Waits (at most `within`) for `/readyz` to say 200: the readiness probe has
    /// answered, so its requests are behind whoever counts the sidecar's requests next.
    pub fn wait_ready(&self, within: std::time::Duration) {
        let until = std::time::Instant::now() + within;
        let url = format!("http://{}/readyz", self.metrics_addr());
        loop {
            let out = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &url])
                .output()
                .expect("run curl");
            if out.stdout == b"200" {
                return;
            }
            assert!(
                std::time::Instant::now() < until,
                "the sidecar was not ready within {within:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The unix socket it also serves on (`--unix-socket`), if any.
    pub fn unix_socket(&self) -> Option<&Path> {
        self.unix_socket.as_deref()
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn channel(&self) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_shared(self.endpoint())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect to safewrite")
    }

    /// A channel to the unix socket it serves on (`--unix-socket`).
    pub async fn unix_channel(&self) -> tonic::transport::Channel {
        let path = self
            .unix_socket()
            .expect("a sidecar started with --unix-socket");
        unix_channel(path)
            .await
            .expect("connect over the unix socket")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// Sends SIGTERM and waits (at most `timeout`) for the process to exit.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the safewrite binary to completion (for configuration errors) and returns its
/// exit status and stderr.
pub fn run_safewrite(args: &[&str]) -> (ExitStatus, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_safewrite"))
        .args(args)
        .env("NO_COLOR", "1")
        .env("SAFEWRITE_METRICS_LISTEN", "127.0.0.1:0")
        .stdin(Stdio::null())
        .output()
        .expect("run safewrite");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub mod faults;
pub mod jaeger;
pub mod linearizability;
pub mod requests;

/// A TCP proxy in front of the real API server that can pass traffic or reset every
/// connection (existing ones included): the transport faults of the classification
/// table, from a real socket.
pub struct FaultProxy {
    pub port: u16,
    reset: tokio::sync::watch::Sender<bool>,
    accepted: Arc<std::sync::atomic::AtomicU64>,
}

impl FaultProxy {
    /// Starts a proxy to `127.0.0.1:target` on a free port, passing traffic.
    pub async fn start(target: u16) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let (reset, watch) = tokio::sync::watch::channel(false);
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::Relaxed);
                let mut watch = watch.clone();
                tokio::spawn(async move {
                    if *watch.borrow() {
                        return; // dropped: the client sees the connection close
                    }
                    let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|reset| *reset) => {}
                    }
                });
            }
        });
        FaultProxy {
            port,
            reset,
            accepted,
        }
    }

    /// How many connections the proxy has accepted: with every connection reset, one
    /// per request that reached it.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Resets every connection, now and until `pass` is called.
    pub fn reset_all(&self) {
        let _ = self.reset.send(true);
    }

    /// Passes traffic again.
    pub fn pass(&self) {
        let _ = self.reset.send(false);
    }

    /// A copy of `kubeconfig` whose server is this proxy, written into `dir`.
    pub fn kubeconfig(&self, cp: &ControlPlane, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(cp.admin_kubeconfig())
            .expect("kubeconfig")
            .replace(cp.server(), &format!("https://127.0.0.1:{}", self.port));
        let path = dir.join("proxied.kubeconfig");
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }
}

/// The sum of the API server's `apiserver_request_total` for `verbs` on `resource`, read
/// from its own /metrics: what the server really received.
pub async fn apiserver_requests(cp: &ControlPlane, verbs: &[&str], resource: &str) -> f64 {
    let client = cp.admin_client().await;
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(request).await.expect("GET /metrics");
    requests::count(&text, resource, verbs)
}

/// Installs `<plural>.test.safewrite.dev` (namespaced, with a status subresource) and
/// waits until it is established.
pub async fn install_crd(client: &kube::Client, plural: &str, kind: &str) {
    let name = format!("{plural}.test.safewrite.dev");
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "group": "test.safewrite.dev", "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    }))
    .unwrap();
    create_crd(client, crd).await;
}

/// Creates `crd` (or finds it there) and waits until it is established.
pub async fn create_crd(client: &kube::Client, crd: CustomResourceDefinition) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().expect("a CRD has a name");
    match api.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create CRD: {e}"),
    }
    for _ in 0..100 {
        let crd = api.get(&name).await.unwrap();
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("CRD {name} not established");
}

/// The CEL expression of a read-dependent change: `data.n` of a ConfigMap plus one.
pub const INCREMENT: &str = r#"{"data": {"n": string(int(object.data.n) + 1)}}"#;

/// UpdateWithRetry of ConfigMap `ns/name` with [`INCREMENT`], carrying `key` as its
/// idempotency key when there is one.
pub fn keyed_increment(
    ns: &str,
    name: &str,
    key: Option<String>,
) -> safewrite_api::pb::UpdateWithRetryRequest {
    use safewrite_api::pb;
    pb::UpdateWithRetryRequest {
        target: Some(pb::ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: ns.into(),
            name: name.into(),
        }),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                expression: INCREMENT.into(),
            })),
        }),
        options: Some(pb::WriteOptions {
            idempotency_key: key.unwrap_or_default(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The ErrorInfo reason of a failed RPC, or empty when it has none.
pub fn error_reason(status: &tonic::Status) -> String {
    use prost::Message;
    let Ok(details) = tonic_types::pb::Status::decode(status.details()) else {
        return String::new();
    };
    details
        .details
        .iter()
        .find(|d| d.type_url.ends_with("google.rpc.ErrorInfo"))
        .and_then(|info| tonic_types::pb::ErrorInfo::decode(info.value.as_slice()).ok())
        .map(|info| info.reason)
        .unwrap_or_default()
}
