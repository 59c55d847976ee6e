//! `cargo bench --bench floor`: what the sidecar's stack costs with none of safewrite in it,
//! so that the sidecar's CPU per write is read against a floor measured on the same
//! machine, not against a guess.
//!
//! The floor is this bench's own binary started again as a server: a tonic server of
//! `WriterService` (the sidecar's proto, the same tonic, prost and tokio, one worker
//! thread like the sidecar's runtime) whose `UpdateWithRetry` increments `data.n` of the
//! ConfigMap it names with one PUT over HTTP/2 and TLS (hyper-util's client and
//! hyper-rustls, as the sidecar's connection to the API server), starting from the object
//! as it last wrote it (re-read on a 409), and answers the object written. No CEL, no
//! spans, no metrics, no policy, no rate limit, no breaker, no grouping. Its `Get` answers
//! the remembered object with no request: one gRPC exchange alone.
//!
//! Beside it, a real sidecar (release build, the flags of `cargo bench --bench writes`)
//! does the same: `UpdateWithRetry` with the CEL increment, a merge patch, and
//! `Get(min_resource_version)` answered from its memory. One writer at a time (K = 1),
//! each process's CPU seconds (user + system, from /proc) over the run divided by its
//! answers. `SAFEWRITE_BENCH_SECONDS` sets the time per row (default 5),
//! `SAFEWRITE_FLOOR_ROUNDS` the rounds of all rows (default 2). Prints, never asserts
//! speed; it checks that every increment was counted once.

#[path = "../support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::client::ConfigExt as _;
use serde_json::{Value, json};
use support::{ControlPlane, Sidecar, cpu_seconds};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

/// The environment variable that makes this binary the floor server, naming the kubeconfig.
const SERVE: &str = "SAFEWRITE_FLOOR_SERVE";
/// Set (to anything) for a floor server that speaks HTTP/1.1 to the API server.
const HTTP1: &str = "SAFEWRITE_FLOOR_HTTP1";

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// The floor server: one PUT per increment, nothing else.
struct Floor {
    http: Client<Https, Full<Bytes>>,
    server: String,
    authorization: String,
    /// The object as last written, by namespace/name.
    memory: Mutex<HashMap<String, Value>>,
}

impl Floor {
    /// The path of the ConfigMap `target` names, and the object as last written there.
    fn recall(&self, target: Option<pb::ObjectRef>) -> Result<(String, Option<Value>), Status> {
        let target = target.ok_or_else(|| Status::invalid_argument("target"))?;
        let path = format!(
            "/api/v1/namespaces/{}/configmaps/{}",
            target.namespace, target.name
        );
        let remembered = self.memory.lock().unwrap().get(&path).cloned();
        Ok((path, remembered))
    }

    async fn send(
        &self,
        method: http::Method,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(http::StatusCode, Bytes), Status> {
        let request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.server))
            .header(http::header::AUTHORIZATION, &self.authorization)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Status::internal(e.to_string()))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?
            .to_bytes();
        Ok((status, body))
    }

    async fn read(&self, path: &str) -> Result<Value, Status> {
        let (status, body) = self.send(http::Method::GET, path, Vec::new()).await?;
        if status != http::StatusCode::OK {
            return Err(Status::unknown(format!("GET answered {status}")));
        }
        serde_json::from_slice(&body).map_err(|e| Status::internal(e.to_string()))
    }
}

#[tonic::async_trait]
impl pb::writer_service_server::WriterService for Floor {
    async fn capabilities(
        &self,
        _: Request<pb::CapabilitiesRequest>,
    ) -> Result<Response<pb::CapabilitiesResponse>, Status> {
        Err(Status::unimplemented("the floor serves writes only"))
    }

    async fn update_with_retry(
        &self,
        request: Request<pb::UpdateWithRetryRequest>,
    ) -> Result<Response<pb::UpdateWithRetryResponse>, Status> {
        let (path, remembered) = self.recall(request.into_inner().target)?;
        let mut object = match remembered {
            Some(object) => object,
            None => self.read(&path).await?,
        };
        for attempt in 1..=1000u32 {
            let n: u64 = object["data"]["n"]
                .as_str()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| Status::failed_precondition("data.n is not a number"))?;
            object["data"]["n"] = Value::String((n + 1).to_string());
            let body = serde_json::to_vec(&object).map_err(|e| Status::internal(e.to_string()))?;
            let (status, answer) = self.send(http::Method::PUT, &path, body).await?;
            if status == http::StatusCode::CONFLICT {
                object = self.read(&path).await?;
                continue;
            }
            if status != http::StatusCode::OK {
                return Err(Status::unknown(format!("PUT answered {status}")));
            }
            let written: Value =
                serde_json::from_slice(&answer).map_err(|e| Status::internal(e.to_string()))?;
            let resource_version = written["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let object_json = written.to_string();
            self.memory.lock().unwrap().insert(path, written);
            return Ok(Response::new(pb::UpdateWithRetryResponse {
                result: Some(pb::WriteResult {
                    object_json,
                    resource_version,
                    attempts: attempt,
                    ..Default::default()
                }),
            }));
        }
        Err(Status::aborted("1000 conflicts"))
    }

    async fn patch_status(
        &self,
        _: Request<pb::PatchStatusRequest>,
    ) -> Result<Response<pb::PatchStatusResponse>, Status> {
        Err(Status::unimplemented(
            "the floor writes only UpdateWithRetry",
        ))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let (_, remembered) = self.recall(request.into_inner().target)?;
        let object = remembered.ok_or_else(|| Status::not_found("not remembered"))?;
        Ok(Response::new(pb::GetResponse {
            resource_version: object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            object_json: object.to_string(),
            remembered: true,
            trace_id: String::new(),
        }))
    }

    type TransactStream = futures::stream::Empty<Result<pb::TransactResponse, Status>>;

    async fn transact(
        &self,
        _: Request<tonic::Streaming<pb::TransactRequest>>,
    ) -> Result<Response<Self::TransactStream>, Status> {
        Err(Status::unimplemented(
            "the floor writes only UpdateWithRetry",
        ))
    }

    type LeadStream = futures::stream::Empty<Result<pb::LeadResponse, Status>>;

    async fn lead(
        &self,
        _: Request<pb::LeadRequest>,
    ) -> Result<Response<Self::LeadStream>, Status> {
        Err(Status::unimplemented(
            "the floor writes only UpdateWithRetry",
        ))
    }

    async fn delete(
        &self,
        _: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        Err(Status::unimplemented(
            "the floor writes only UpdateWithRetry",
        ))
    }
}

/// Runs the floor server for the kubeconfig at `kubeconfig`, printing its port.
fn serve(kubeconfig: &str) {
    // One worker thread, as the sidecar's runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
        let token = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("token: "))
            .expect("a token in the kubeconfig")
            .trim_matches('"')
            .to_owned();
        let parsed = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(
            parsed,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("config");
        let tls = config.rustls_client_config().expect("tls");
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only();
        let http = if std::env::var_os(HTTP1).is_some() {
            Client::builder(TokioExecutor::new()).build(https.enable_http1().wrap_connector(tcp))
        } else {
            Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build(https.enable_http2().wrap_connector(tcp))
        };
        let floor = Floor {
            http,
            server: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_owned(),
            authorization: format!("Bearer {token}"),
            memory: Mutex::new(HashMap::new()),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("port {}", listener.local_addr().expect("addr").port());
        tonic::transport::Server::builder()
            .add_service(pb::writer_service_server::WriterServiceServer::new(floor))
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            )
            .await
            .expect("serve");
    });
}

/// The floor server, started from this binary; killed when dropped.
struct FloorProcess {
    child: Child,
    port: u16,
}

impl FloorProcess {
    fn start(kubeconfig: &std::path::Path, http1: bool) -> FloorProcess {
        let mut command = Command::new(std::env::current_exe().expect("this binary"));
        command.env(SERVE, kubeconfig).stdout(Stdio::piped());
        if http1 {
            command.env(HTTP1, "1");
        }
        let mut child = command.spawn().expect("start the floor server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the floor server's port");
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .expect("port N");
        FloorProcess { child, port }
    }
}

impl Drop for FloorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The task switches of process `pid`'s threads so far (voluntary and not), from /proc.
fn switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

#[derive(Clone, Copy, PartialEq)]
enum Call {
    Increment,
    Merge,
    Get,
}

/// One writer calling `call` on `name` for `seconds`: answers, CPU µs per answer of
/// process `pid`, p50 in ms, its task switches per answer. `written` is the
/// resourceVersion of the last write to `name`, which a `Get` asks for at least.
async fn row(
    (client, pid): (&mut WriterServiceClient<Channel>, u32),
    (ns, name): (&str, &str),
    call: Call,
    seconds: f64,
    written: &mut String,
) -> (u64, f64, f64, f64) {
    let mut latencies = Vec::new();
    let switched = switches(pid);
    let before = cpu_seconds(pid);
    let started = Instant::now();
    let mut count = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        let sent = Instant::now();
        match call {
            Call::Increment | Call::Merge => {
                let mut request = support::keyed_increment(ns, name, None);
                if call == Call::Merge {
                    let patch = json!({"data": {"p": count.to_string()}});
                    request.mutation = Some(pb::Mutation {
                        kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                            patch_json: patch.to_string(),
                        })),
                    });
                }
                let result = client
                    .update_with_retry(request)
                    .await
                    .expect("write")
                    .into_inner()
                    .result
                    .expect("result");
                *written = result.resource_version;
            }
            Call::Get => {
                let got = client
                    .get(pb::GetRequest {
                        target: support::keyed_increment(ns, name, None).target,
                        min_resource_version: written.clone(),
                    })
                    .await
                    .expect("get")
                    .into_inner();
                assert!(got.remembered, "a Get at the written version is remembered");
            }
        }
        latencies.push(sent.elapsed());
        count += 1;
    }
    let cpu = cpu_seconds(pid) - before;
    let switched = (switches(pid) - switched) as f64 / count as f64;
    latencies.sort();
    let p50 = latencies[latencies.len() / 2].as_secs_f64() * 1e3;
    (count, cpu * 1e6 / count as f64, p50, switched)
}

async fn counter(api: &Api<ConfigMap>, name: &str) -> u64 {
    let cm = api.get(name).await.expect("get counter");
    cm.data
        .and_then(|d| d.get("n").cloned())
        .unwrap_or_default()
        .parse()
        .expect("n")
}

fn main() {
    if let Ok(kubeconfig) = std::env::var(SERVE) {
        return serve(&kubeconfig);
    }
    // `cargo bench` passes --bench; `cargo test` builds benches but must not run this.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(measure());
}

/// Runs every row against the floor server and a sidecar, and prints the table.
async fn measure() {
    let seconds: f64 = std::env::var("SAFEWRITE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let rounds: u32 = std::env::var("SAFEWRITE_FLOOR_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);

    let cp = ControlPlane::shared();
    let ns = cp.namespace("floor").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    // Each server writes its own counter, named after it.
    let servers = ["floor", "floor-h1", "sidecar"];
    for name in servers {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}}))
                .expect("configmap");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create counter");
    }
    let kubeconfig = cp.admin_kubeconfig();
    let floors = [
        FloorProcess::start(&kubeconfig, false),
        FloorProcess::start(&kubeconfig, true),
    ];
    let sidecar = Sidecar::start(
        &[
            &["--kubeconfig", kubeconfig.to_str().unwrap()][..],
            &support::BENCH_FLAGS,
        ]
        .concat(),
    );
    let mut clients = HashMap::new();
    for (name, floor) in servers.into_iter().zip(&floors) {
        let channel = Channel::from_shared(format!("http://127.0.0.1:{}", floor.port))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect to the floor");
        clients.insert(name, (WriterServiceClient::new(channel), floor.child.id()));
    }
    let channel = sidecar.channel().await;
    clients.insert(
        "sidecar",
        (WriterServiceClient::new(channel), sidecar.pid()),
    );

    println!(
        "one writer at a time, {seconds} s per row; CPU: the serving process's user + system time per answer; switches: its threads' task switches per answer"
    );
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>14} {:>9}",
        "row", "answers", "per s", "p50 ms", "CPU µs/answer", "switches"
    );
    let mut increments: HashMap<&str, u64> = servers.iter().map(|&s| (s, 0)).collect();
    let mut written: HashMap<&str, String> = servers.iter().map(|&s| (s, String::new())).collect();
    let rows: [(&str, &str, Call); 6] = [
        ("floor: gRPC + one PUT (HTTP/2)", "floor", Call::Increment),
        (
            "floor: gRPC + one PUT (HTTP/1.1)",
            "floor-h1",
            Call::Increment,
        ),
        (
            "sidecar: UpdateWithRetry, CEL increment",
            "sidecar",
            Call::Increment,
        ),
        (
            "sidecar: UpdateWithRetry, merge patch",
            "sidecar",
            Call::Merge,
        ),
        ("floor: Get from memory (gRPC only)", "floor", Call::Get),
        (
            "sidecar: Get(min_resource_version), memory",
            "sidecar",
            Call::Get,
        ),
    ];
    // Warm all rows first (connections, discovery, the first CEL program), then measure.
    for round in 0..=rounds {
        if round > 0 {
            println!("round {round}");
        }
        for (label, name, call) in rows {
            let (client, pid) = clients.get_mut(name).expect("a server per row");
            let last = written.get_mut(name).expect("a counter per server");
            let time = if round == 0 { 0.5 } else { seconds };
            let (count, cpu, p50, switched) =
                row((client, *pid), (&ns, name), call, time, last).await;
            if call == Call::Increment {
                *increments.get_mut(name).expect("a counter per server") += count;
            }
            if round > 0 {
                println!(
                    "{label:<44} {count:>9} {:>9.0} {p50:>9.2} {cpu:>14.0} {switched:>9.1}",
                    count as f64 / seconds
                );
            }
        }
    }
    for (name, expected) in increments {
        let n = counter(&api, name).await;
        assert_eq!(n, expected, "{name}: every increment counted once");
    }
}
