//! `cargo bench --bench writes`: safewrite against the peers a controller author would
//! use instead, in one run, on one local control plane (tests/harness), for
//! read-dependent increments of counters in ConfigMaps:
//!
//! - client-go `retry.RetryOnConflict` (Get, change, Update) with `DefaultRetry` and
//!   with `DefaultBackoff`: tests/bench/clientgo, built by this bench with `go build`;
//! - kube-rs direct: GET, change, PUT, re-read and retry on 409 with jittered backoff;
//! - safewrite UpdateWithRetry with a CEL increment, each write alone
//!   (`options.write_alone`) and with group commit (the default).
//!
//! For K = 1, 4, 16 and 64 writers on one object and 16 writers on 16 objects, each
//! contender writes for a fixed time; the bench prints goodput, failures (increments a
//! contender gave up on), API requests per successful increment (the API server's own
//! `apiserver_request_total` for configmaps), p50/p99 latency, the final counters against
//! the successes counted, and each safewrite row's ratio to the best peer. It asserts
//! only correctness (no lost update); speed is measured and printed, never asserted.
//!
//! `SAFEWRITE_BENCH_SECONDS` sets the time per run (default 4);
//! `SAFEWRITE_BENCH_RUNS="16/1,16/16"` picks scenarios (writers/objects).

#[path = "../support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use safewrite::pb;
use safewrite::pb::writer_service_client::WriterServiceClient;
use serde_json::json;
use support::{ControlPlane, Sidecar};
use tonic::transport::Channel;

/// Who writes.
#[derive(Clone, Copy, PartialEq)]
enum Contender {
    ClientGoRetry,
    ClientGoBackoff,
    KubeDirect,
    SafewriteAlone,
    SafewriteGrouped,
}

impl Contender {
    const ALL: [Contender; 5] = [
        Contender::ClientGoRetry,
        Contender::ClientGoBackoff,
        Contender::KubeDirect,
        Contender::SafewriteAlone,
        Contender::SafewriteGrouped,
    ];

    fn label(self) -> &'static str {
        match self {
            Contender::ClientGoRetry => "client-go DefaultRetry",
            Contender::ClientGoBackoff => "client-go DefaultBackoff",
            Contender::KubeDirect => "kube-rs direct",
            Contender::SafewriteAlone => "safewrite, each alone",
            Contender::SafewriteGrouped => "safewrite, group commit",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Contender::ClientGoRetry => "cgr",
            Contender::ClientGoBackoff => "cgb",
            Contender::KubeDirect => "kube",
            Contender::SafewriteAlone => "swa",
            Contender::SafewriteGrouped => "swg",
        }
    }

    fn is_peer(self) -> bool {
        !matches!(
            self,
            Contender::SafewriteAlone | Contender::SafewriteGrouped
        )
    }
}

/// What one run counted.
struct Run {
    successes: u64,
    failures: u64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Everything a run needs.
struct Bench {
    cp: &'static ControlPlane,
    ns: String,
    api: Api<ConfigMap>,
    client: WriterServiceClient<Channel>,
    clientgo: PathBuf,
    seconds: f64,
}

/// A CEL increment, retried as long as the deadline allows (the contention is the point).
fn increment(ns: &str, name: &str, alone: bool) -> tonic::Request<pb::UpdateWithRetryRequest> {
    let mut request = tonic::Request::new(pb::UpdateWithRetryRequest {
        retry_policy: Some(pb::RetryPolicy {
            max_attempts: 1000,
            ..Default::default()
        }),
        options: Some(pb::WriteOptions {
            write_alone: alone,
            ..Default::default()
        }),
        ..support::keyed_increment(ns, name, None)
    });
    request.set_timeout(Duration::from_secs(30));
    request
}

/// kube-rs: GET, change, PUT; on 409 Conflict re-read and retry with jittered
/// exponential backoff (10 ms doubling to 1 s), at most 50 attempts.
async fn direct_increment(api: &Api<ConfigMap>, name: &str, rng: &mut fastrand::Rng) -> bool {
    for attempt in 1..=50u32 {
        let Ok(mut cm) = api.get(name).await else {
            return false;
        };
        let data = cm.data.get_or_insert_with(Default::default);
        let n: u64 = data.get("n").map(|v| v.parse().unwrap()).unwrap_or(0);
        data.insert("n".into(), (n + 1).to_string());
        match api.replace(name, &PostParams::default(), &cm).await {
            Ok(_) => return true,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let ceiling = Duration::from_millis(10)
                    .saturating_mul(1 << attempt.min(7))
                    .min(Duration::from_secs(1));
                tokio::time::sleep(ceiling.mul_f64(rng.f64())).await;
            }
            Err(_) => return false,
        }
    }
    false
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
}

async fn make_counter(api: &Api<ConfigMap>, name: &str) {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
}

async fn counter(api: &Api<ConfigMap>, name: &str) -> u64 {
    api.get(name).await.unwrap().data.unwrap()["n"]
        .parse()
        .unwrap()
}

/// The CPU time (user + system) process `pid` has used so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command's closing parenthesis; utime and stime are the 12th and
    // 13th of them, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Builds the client-go contender (tests/bench/clientgo) into target/bench.
fn build_clientgo() -> PathBuf {
    let root = support::repo_root();
    let out = root.join("target/bench/clientgo-bench");
    eprintln!("bench: building tests/bench/clientgo (client-go; the first build takes minutes)");
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(root.join("tests/bench/clientgo"))
        .status()
        .expect("run go (Go is needed for the client-go contender)");
    assert!(status.success(), "go build of tests/bench/clientgo failed");
    out
}

impl Bench {
    async fn run(&self, contender: Contender, names: &[String], writers: usize) -> Run {
        match contender {
            Contender::ClientGoRetry | Contender::ClientGoBackoff => {
                self.clientgo(contender, names, writers)
            }
            _ => self.in_process(contender, names, writers).await,
        }
    }

    fn clientgo(&self, contender: Contender, names: &[String], writers: usize) -> Run {
        let backoff = if contender == Contender::ClientGoRetry {
            "retry"
        } else {
            "backoff"
        };
        let output = Command::new(&self.clientgo)
            .arg("-kubeconfig")
            .arg(self.cp.admin_kubeconfig())
            .args(["-namespace", &self.ns, "-names", &names.join(",")])
            .args(["-writers", &writers.to_string(), "-backoff", backoff])
            .args([
                "-duration",
                &format!("{}ms", (self.seconds * 1000.0) as u64),
            ])
            .output()
            .expect("run clientgo-bench");
        assert!(
            output.status.success(),
            "clientgo-bench: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(&output.stdout).expect("its JSON");
        Run {
            successes: line["successes"].as_u64().unwrap(),
            failures: line["failures"].as_u64().unwrap(),
            p50_ms: line["p50_ms"].as_f64().unwrap(),
            p99_ms: line["p99_ms"].as_f64().unwrap(),
        }
    }

    async fn in_process(&self, contender: Contender, names: &[String], writers: usize) -> Run {
        let until = Instant::now() + Duration::from_secs_f64(self.seconds);
        let mut tasks = Vec::new();
        for w in 0..writers {
            let name = names[w % names.len()].clone();
            let (api, mut client, ns) = (self.api.clone(), self.client.clone(), self.ns.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(w as u64);
                let (mut latencies, mut failures) = (Vec::new(), 0u64);
                while Instant::now() < until {
                    let started = Instant::now();
                    let ok = match contender {
                        Contender::KubeDirect => direct_increment(&api, &name, &mut rng).await,
                        _ => {
                            let alone = contender == Contender::SafewriteAlone;
                            client
                                .update_with_retry(increment(&ns, &name, alone))
                                .await
                                .is_ok()
                        }
                    };
                    if ok {
                        latencies.push(started.elapsed());
                    } else {
                        failures += 1;
                    }
                }
                (latencies, failures)
            }));
        }
        let (mut latencies, mut failures) = (Vec::new(), 0);
        for task in tasks {
            let (l, f) = task.await.unwrap();
            latencies.extend(l);
            failures += f;
        }
        latencies.sort();
        Run {
            successes: latencies.len() as u64,
            failures,
            p50_ms: percentile(&latencies, 0.5),
            p99_ms: percentile(&latencies, 0.99),
        }
    }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; `cargo test` builds benches but must not run this.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let seconds: f64 = std::env::var("SAFEWRITE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4.0);
    let clientgo = build_clientgo();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("bench").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().unwrap(),
        // Limits no contender reaches: the client-side rate limiters are not the subject
        // (at --qps 1000, 16 writers on 16 objects drained the burst and were paced).
        "--qps",
        "5000",
        "--burst",
        "10000",
        "--log-filter",
        "warn,safewrite::server=info",
    ]);
    let client = WriterServiceClient::new(sidecar.channel().await);
    let bench = Arc::new(Bench {
        cp,
        ns,
        api,
        client,
        clientgo,
        seconds,
    });
    // Warm every path (connections, discovery, the Go runtime's first start).
    for contender in Contender::ALL {
        let name = format!("warm-{}", contender.slug());
        make_counter(&bench.api, &name).await;
        bench.run(contender, &[name], 1).await;
    }

    println!(
        "safewrite benchmark: read-dependent increments, {seconds} s per run, one control plane, sidecar release build with --qps 5000 --burst 10000 (client-go the same)\n"
    );
    println!(
        "{:<26} {:>10} {:>8} {:>9} {:>9} {:>9} {:>16} {:>9}",
        "contender",
        "writes/s",
        "failed",
        "req/write",
        "p50 ms",
        "p99 ms",
        "final/expected",
        "vs best"
    );
    // SAFEWRITE_BENCH_RUNS="16/1,16/16" picks scenarios (writers/objects); all by default.
    let chosen = std::env::var("SAFEWRITE_BENCH_RUNS").ok();
    let scenarios = [(1usize, 1usize), (1, 4), (1, 16), (1, 64), (16, 16)]
        .into_iter()
        .filter(|(objects, writers)| {
            chosen.as_deref().is_none_or(|runs| {
                runs.split(',')
                    .any(|run| run.trim() == format!("{writers}/{objects}"))
            })
        });
    for (objects, writers) in scenarios {
        println!("K={writers} writers on {objects} object(s)");
        let mut best_peer = 0.0f64;
        for contender in Contender::ALL {
            let names: Vec<String> = (0..objects)
                .map(|o| format!("{}-k{writers}-o{objects}-{o}", contender.slug()))
                .collect();
            for name in &names {
                make_counter(&bench.api, name).await;
            }
            // apiserver_request_total's verbs are HTTP methods: an update is PUT.
            let verbs = ["GET", "PUT", "PATCH", "POST"];
            let before = support::apiserver_requests(bench.cp, &verbs, "configmaps").await;
            let cpu_before = cpu_seconds(sidecar.pid());
            let run = bench.run(contender, &names, writers).await;
            let cpu = cpu_seconds(sidecar.pid()) - cpu_before;
            let after = support::apiserver_requests(bench.cp, &verbs, "configmaps").await;
            let mut total = 0;
            for name in &names {
                total += counter(&bench.api, name).await;
            }
            let goodput = run.successes as f64 / seconds;
            let per_write = (after - before) / run.successes.max(1) as f64;
            let (versus, cpu) = if contender.is_peer() {
                best_peer = best_peer.max(goodput);
                (String::new(), String::new())
            } else {
                let per_write = cpu * 1e6 / run.successes.max(1) as f64;
                (
                    format!("{:.2}x", goodput / best_peer),
                    format!("{per_write:.0}"),
                )
            };
            println!(
                "  {:<24} {:>10.1} {:>8} {:>9.2} {:>9.1} {:>9.1} {:>16} {:>9} {:>10}",
                contender.label(),
                goodput,
                run.failures,
                per_write,
                run.p50_ms,
                run.p99_ms,
                format!("{total}/{}", run.successes),
                versus,
                cpu,
            );
            // A failed increment may have been applied before its caller gave up (an
            // answer lost to a timeout): never fewer than the successes, never more
            // than all attempts made.
            assert!(
                total >= run.successes && total <= run.successes + run.failures,
                "{}: lost update: counters {total}, successes {}",
                contender.label(),
                run.successes
            );
        }
    }
    drop(sidecar);
}
