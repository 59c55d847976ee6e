//! `cargo bench --bench writes`: safewrite against the peers a controller author would
//! use instead, in one run, on one local control plane (tests/harness), for
//! read-dependent increments of counters in ConfigMaps:
//!
//! - client-go `retry.RetryOnConflict` (Get, change, Update) with `DefaultRetry` and
//!   with `DefaultBackoff`: tests/bench/clientgo, built by this bench with `go build`;
//! - controller-runtime style: the same program reading from a shared informer's lister
//!   on the namespace's ConfigMaps (the cache controller-runtime's client reads from),
//!   then Update inside `RetryOnConflict(DefaultRetry)`;
//! - kube-rs direct: GET, change, PUT, re-read and retry on 409 with jittered backoff;
//! - client-go DefaultBackoff again with Kubernetes' protobuf encoding for requests and
//!   answers (`ContentType`), to show what the API server spends on JSON;
//! - safewrite UpdateWithRetry with a CEL increment, each write alone
//!   (`options.write_alone`) and with group commit (the default), on a sidecar that
//!   remembers objects (the default) and on one started with `--no-memory`; and the
//!   first two again with the caller on the sidecar's unix socket instead of loopback
//!   TCP;
//! - safewrite Transact: the increment as the caller's own code (the whole object,
//!   `data.n` plus one, proposed for every fresh object offered);
//! - safewrite merge patch, each alone: not an increment but the other common write,
//!   a JSON merge patch setting the writer's own key `data.p<w>` to its count of calls
//!   (so the sidecar's CPU per uncontended merge patch is measured beside the CEL
//!   increment's).
//!
//! For K = 1, 4, 16 and 64 writers on one object, 16 writers on 16 objects, K = 1
//! and 4 writers on one object while an outside writer (kube-rs, straight to the API
//! server) increments another key of it every 50 ms, and K = 64 writers on one huge
//! object (a ConfigMap holding 900 KB in `data.blob`), each contender writes for a
//! fixed time; and K = 36 writers on one object spread over three sidecars (12 each: three
//! controllers, each with its own sidecar, writing one hot object) beside the same 36 on
//! one sidecar. On the huge object the bench also checks every safewrite answer: the
//! blob intact and each increment told its own number (no two answers alike). The bench prints goodput, failures (increments a contender gave up on), API
//! requests per successful increment (the API server's own `apiserver_request_total`
//! for configmaps, less the outside writer's own), attempts per increment (mean and
//! most, for kube-rs and safewrite), p50/p99 latency, CPU time per
//! successful increment and peak RSS (the sidecar's for safewrite, the caller process's
//! for the others), the sidecar's memory hit rate and stale copies, the final
//! counters against the successes counted, and each safewrite row's ratio to the best
//! client-go variant and to the controller-runtime style. It asserts only correctness
//! (no lost or doubled update, the outside writer's key included); speed is measured
//! and printed, never asserted.
//!
//! Under each scenario a second table gives the whole system's CPU time per successful
//! write, process by process: the caller, the sidecar(s), kube-apiserver, etcd, and
//! their sum ("system"), with each safewrite row's system over the lowest of the two
//! client-go variants' (DefaultRetry, DefaultBackoff). How each is measured:
//!
//! - the caller is always a process of its own, so its CPU is its own: the Go program
//!   measures itself (getrusage over its writing); the kube-rs and safewrite contenders
//!   run in this bench's binary started again as `<bench> --caller <spec>` (a small
//!   Rust caller: a tokio runtime, a tonic channel per sidecar or a kube client, the same
//!   writer tasks), which reads its own /proc/self/stat over its writing. Both leave out
//!   their setup (the Rust caller's gRPC connections to the sidecars; the Go informer's
//!   sync) and count the first API request's TLS handshake (client-go, kube-rs);
//! - the sidecars, kube-apiserver and etcd: utime + stime from /proc/<pid>/stat just
//!   before and after the run (the control plane's pids read afresh from the harness's
//!   env file, which it rewrites on every restart). kube-apiserver's and etcd's idle CPU
//!   (measured before each scenario over the longer of the run time and 10 s, with
//!   every sidecar up and nothing written: their own loops and the sidecars' readiness
//!   checks; printed with the scenario's table, and once more after the last) times the
//!   window is subtracted, so that a row is charged only for what its writes cost. That
//!   background drifts (it fell from 247 to 125 ms/s over one run of five scenarios on
//!   a busy 2-core machine) and comes in bursts, so in a row with few writes the API
//!   server's share per write is noisy (and ticks are 10 ms): longer runs
//!   (`SAFEWRITE_BENCH_SECONDS`) steady it. In the +outside rows the API server's and
//!   etcd's share includes the outside writer's patches (20 a second, the same for every
//!   contender).
//!
//! `SAFEWRITE_BENCH_SECONDS` sets the time per run (default 4);
//! `SAFEWRITE_BENCH_RUNS="16/1,16/16,1/1+outside,64/1+huge,36/1,36/1+3sidecars"` picks scenarios
//! (writers/objects);
//! `SAFEWRITE_BENCH_CONTENDERS="cgr,swg"` picks contenders by the short names of
//! [`Contender::slug`]; `SAFEWRITE_BENCH_SIDECAR_ENV="NAME=VALUE ..."` is given to every
//! sidecar (e.g. `OTEL_TRACES_SAMPLER=always_off`, to measure what a setting costs);
//! `SAFEWRITE_BENCH_APISERVER_FLAGS="--profiling=true"` is added to kube-apiserver's flags
//! (that one serves `/debug/pprof`, to profile the API server during a run).

#[path = "../support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{ControlPlane, Sidecar, cpu_seconds};
use tonic::transport::Channel;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

/// Who writes.
#[derive(Clone, Copy, PartialEq)]
enum Contender {
    ClientGoRetry,
    ClientGoBackoff,
    /// client-go DefaultBackoff with Kubernetes' protobuf encoding instead of JSON.
    ClientGoProtobuf,
    ControllerRuntime,
    KubeDirect,
    SafewriteAlone,
    SafewriteGrouped,
    /// The same two, the caller on the sidecar's unix socket instead of loopback TCP.
    UnixAlone,
    UnixGrouped,
    NoMemoryAlone,
    NoMemoryGrouped,
    SafewriteTransact,
    SafewriteMerge,
}

/// How a safewrite contender writes.
#[derive(Clone, Copy, PartialEq)]
struct Safewrite {
    /// The sidecar remembers objects (not `--no-memory`).
    memory: bool,
    /// Every write carries `options.write_alone`.
    alone: bool,
    /// The increment is the caller's own code, through `Transact`.
    transact: bool,
    /// Not an increment: a merge patch of the writer's own key.
    merge: bool,
    /// The caller reaches the sidecar on its unix socket, not on loopback TCP.
    unix: bool,
}

impl Contender {
    const ALL: [Contender; 13] = [
        Contender::ClientGoRetry,
        Contender::ClientGoBackoff,
        Contender::ClientGoProtobuf,
        Contender::ControllerRuntime,
        Contender::KubeDirect,
        Contender::SafewriteAlone,
        Contender::SafewriteGrouped,
        Contender::UnixAlone,
        Contender::UnixGrouped,
        Contender::NoMemoryAlone,
        Contender::NoMemoryGrouped,
        Contender::SafewriteTransact,
        Contender::SafewriteMerge,
    ];

    fn label(self) -> &'static str {
        match self {
            Contender::ClientGoRetry => "client-go DefaultRetry",
            Contender::ClientGoBackoff => "client-go DefaultBackoff",
            Contender::ClientGoProtobuf => "client-go Backoff, protobuf",
            Contender::ControllerRuntime => "ctrl-runtime cache+Update",
            Contender::KubeDirect => "kube-rs direct",
            Contender::SafewriteAlone => "safewrite, each alone",
            Contender::SafewriteGrouped => "safewrite, group commit",
            Contender::UnixAlone => "safewrite alone, unix socket",
            Contender::UnixGrouped => "safewrite group, unix socket",
            Contender::NoMemoryAlone => "sw --no-memory, alone",
            Contender::NoMemoryGrouped => "sw --no-memory, group",
            Contender::SafewriteTransact => "safewrite Transact",
            Contender::SafewriteMerge => "safewrite merge, alone",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Contender::ClientGoRetry => "cgr",
            Contender::ClientGoBackoff => "cgb",
            Contender::ClientGoProtobuf => "cgp",
            Contender::ControllerRuntime => "ctrl",
            Contender::KubeDirect => "kube",
            Contender::SafewriteAlone => "swa",
            Contender::SafewriteGrouped => "swg",
            Contender::UnixAlone => "swau",
            Contender::UnixGrouped => "swgu",
            Contender::NoMemoryAlone => "nma",
            Contender::NoMemoryGrouped => "nmg",
            Contender::SafewriteTransact => "swt",
            Contender::SafewriteMerge => "swm",
        }
    }

    /// The Go program's `-backoff`, `-read` and `-protobuf` flags, for the Go contenders.
    fn go_flags(self) -> Option<(&'static str, &'static str, bool)> {
        match self {
            Contender::ClientGoRetry => Some(("retry", "live", false)),
            Contender::ClientGoBackoff => Some(("backoff", "live", false)),
            Contender::ClientGoProtobuf => Some(("backoff", "live", true)),
            Contender::ControllerRuntime => Some(("retry", "cache", false)),
            _ => None,
        }
    }

    fn safewrite(self) -> Option<Safewrite> {
        let (memory, alone, transact, merge, unix) = match self {
            Contender::SafewriteAlone => (true, true, false, false, false),
            Contender::SafewriteGrouped => (true, false, false, false, false),
            Contender::UnixAlone => (true, true, false, false, true),
            Contender::UnixGrouped => (true, false, false, false, true),
            Contender::NoMemoryAlone => (false, true, false, false, false),
            Contender::NoMemoryGrouped => (false, false, false, false, false),
            Contender::SafewriteTransact => (true, true, true, false, false),
            Contender::SafewriteMerge => (true, true, false, true, false),
            _ => return None,
        };
        Some(Safewrite {
            memory,
            alone,
            transact,
            merge,
            unix,
        })
    }
}

/// A row of the table: `writers` on `objects`, with or without the outside writer.
#[derive(Clone, Copy)]
struct Scenario {
    writers: usize,
    objects: usize,
    outside: bool,
    /// The object holds [`HUGE_BLOB`] bytes beside its counter.
    huge: bool,
    /// The safewrite contenders' writers are spread over this many sidecars (the
    /// others do not run in such a row).
    sidecars: usize,
}

/// The size of the huge object's `data.blob`.
const HUGE_BLOB: usize = 900 * 1000;

impl Scenario {
    const ALL: [Scenario; 10] = [
        Scenario::new(1, 1, false),
        Scenario::new(4, 1, false),
        Scenario::new(16, 1, false),
        Scenario::new(64, 1, false),
        Scenario::new(16, 16, false),
        Scenario::new(1, 1, true),
        Scenario::new(4, 1, true),
        Scenario {
            huge: true,
            ..Scenario::new(64, 1, false)
        },
        Scenario::new(36, 1, false),
        Scenario {
            sidecars: 3,
            ..Scenario::new(36, 1, false)
        },
    ];

    const fn new(writers: usize, objects: usize, outside: bool) -> Scenario {
        Scenario {
            writers,
            objects,
            outside,
            huge: false,
            sidecars: 1,
        }
    }

    /// Its name in `SAFEWRITE_BENCH_RUNS`.
    fn name(self) -> String {
        let outside = if self.outside { "+outside" } else { "" };
        let huge = if self.huge { "+huge" } else { "" };
        let spread = match self.sidecars {
            1 => String::new(),
            n => format!("+{n}sidecars"),
        };
        format!("{}/{}{outside}{huge}{spread}", self.writers, self.objects)
    }

    fn title(self) -> String {
        let outside = if self.outside {
            ", another key of it set every 50 ms by an outside writer (merge patch)"
        } else {
            ""
        };
        let huge = if self.huge {
            ", 900 KB in data.blob (answers checked: blob intact, every number told once)"
        } else {
            ""
        };
        let spread = match self.sidecars {
            1 => String::new(),
            n => format!(
                ", spread over {n} sidecars ({} each; safewrite only)",
                self.writers / n
            ),
        };
        format!(
            "K={} writers on {} object(s){outside}{huge}{spread}",
            self.writers, self.objects
        )
    }
}

/// What one run counted.
struct Run {
    successes: u64,
    failures: u64,
    /// Attempts per successful increment, mean and most, where the contender tells.
    attempts: Option<(f64, u32)>,
    p50_ms: f64,
    p99_ms: f64,
    /// The caller process's CPU time over its writing (seconds), and its peak RSS (KiB).
    caller: (f64, u64),
    /// On the huge object: the answers that were not their serial result (a blob not
    /// intact, a number told twice), and the answers checked.
    answers: Option<(u64, u64)>,
}

/// The counters of one safewrite sidecar at a moment.
struct SidecarSample {
    cpu_seconds: f64,
    hits: f64,
    misses: f64,
    stale: f64,
}

/// What the outside writer did.
#[derive(Default)]
struct Outside {
    successes: u64,
    failures: u64,
    /// Requests it sent to the API server (subtracted from the contender's).
    requests: u64,
}

/// Everything a run needs.
struct Bench {
    cp: &'static ControlPlane,
    ns: String,
    api: Api<ConfigMap>,
    /// The sidecar that remembers objects, and the one started with `--no-memory`.
    remembering: Sidecar,
    forgetting: Sidecar,
    /// More sidecars that remember, for the rows spread over several.
    more: Vec<Sidecar>,
    clientgo: PathBuf,
    seconds: f64,
    /// kube-apiserver's and etcd's CPU seconds per second with nothing written (the
    /// sidecars' readiness checks, the API server's own loops), subtracted from theirs.
    idle: (f64, f64),
}

/// What a caller process writes through: the API server (kube-rs direct, no sidecars) or
/// the sidecars (writer `w` through the `w % len`-th).
struct Callers {
    api: Api<ConfigMap>,
    ns: String,
    clients: Vec<WriterServiceClient<Channel>>,
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

/// A merge patch setting writer `writer`'s own key `data.p<writer>` to `call` (its
/// count of calls): a change every time, never a conflict with the other writers' keys.
fn merge_patch(
    ns: &str,
    name: &str,
    writer: usize,
    call: u64,
) -> tonic::Request<pb::UpdateWithRetryRequest> {
    let patch = json!({"data": {format!("p{writer}"): call.to_string()}});
    let mut request = increment(ns, name, true);
    request.get_mut().mutation = Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
            patch_json: patch.to_string(),
        })),
    });
    request
}

/// Whether an answer on the huge object is a serial result: its blob intact. Its
/// counter, when it has one.
fn huge_answer(object_json: &str) -> (bool, Option<u64>) {
    let object: serde_json::Value = serde_json::from_str(object_json).unwrap_or_default();
    let blob = object["data"]["blob"].as_str().map_or(0, str::len);
    let n = object["data"]["n"].as_str().and_then(|n| n.parse().ok());
    (blob == HUGE_BLOB, n)
}

/// The same increment as the caller's own code, through `Transact`: every fresh object
/// offered is answered with the whole object, `data.n` plus one (as a controller in
/// another language would, with no CEL).
async fn transact_increment(
    client: &mut WriterServiceClient<Channel>,
    ns: &str,
    name: &str,
) -> Option<u32> {
    use pb::transact_proposal::Change;
    use pb::transact_request::Message as Req;
    use pb::transact_response::Message as Resp;
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let begin = pb::TransactRequest {
        message: Some(Req::Begin(pb::TransactBegin {
            target: support::keyed_increment(ns, name, None).target,
            retry_policy: Some(pb::RetryPolicy {
                max_attempts: 1000,
                ..Default::default()
            }),
            ..Default::default()
        })),
    };
    if tx.send(begin).await.is_err() {
        return None;
    }
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    request.set_timeout(Duration::from_secs(30));
    let answers = match client.transact(request).await {
        Ok(answers) => answers,
        Err(status) => return failed(&status),
    };
    let mut answers = answers.into_inner();
    loop {
        let answer = match answers.message().await {
            Ok(Some(answer)) => answer,
            Ok(None) => return None,
            Err(status) => return failed(&status),
        };
        match answer.message {
            Some(Resp::Fresh(fresh)) => {
                let mut object: serde_json::Value =
                    serde_json::from_str(&fresh.object_json).unwrap();
                let n: u64 = object["data"]["n"].as_str().unwrap().parse().unwrap();
                object["data"]["n"] = json!((n + 1).to_string());
                let proposal = pb::TransactRequest {
                    message: Some(Req::Proposal(pb::TransactProposal {
                        attempt: fresh.attempt,
                        change: Some(Change::ObjectJson(object.to_string())),
                    })),
                };
                if tx.send(proposal).await.is_err() {
                    return None;
                }
            }
            Some(Resp::Result(result)) => {
                // Close this side and read the stream to its end (its status), as a
                // gRPC client does: a stream dropped before its trailers is reset.
                drop(tx);
                while let Ok(Some(_)) = answers.message().await {}
                return (result.outcome() == pb::Outcome::Updated).then_some(result.attempts);
            }
            None => return None,
        }
    }
}

/// Prints the first failed call's status (once per bench), so that a row's failures
/// say what they were; none.
fn failed<T>(status: &tonic::Status) -> Option<T> {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "bench: a call failed: {:?}: {}",
            status.code(),
            status.message()
        );
    }
    None
}

/// kube-rs: GET, change, PUT; on 409 Conflict re-read and retry with jittered
/// exponential backoff (10 ms doubling to 1 s), at most 50 attempts.
async fn direct_increment(
    api: &Api<ConfigMap>,
    name: &str,
    rng: &mut fastrand::Rng,
) -> Option<u32> {
    for attempt in 1..=50u32 {
        let Ok(mut cm) = api.get(name).await else {
            return None;
        };
        let data = cm.data.get_or_insert_with(Default::default);
        let n: u64 = data.get("n").map(|v| v.parse().unwrap()).unwrap_or(0);
        data.insert("n".into(), (n + 1).to_string());
        match api.replace(name, &PostParams::default(), &cm).await {
            Ok(_) => return Some(attempt),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let ceiling = Duration::from_millis(10)
                    .saturating_mul(1 << attempt.min(7))
                    .min(Duration::from_secs(1));
                tokio::time::sleep(ceiling.mul_f64(rng.f64())).await;
            }
            Err(_) => return None,
        }
    }
    None
}

/// The outside writer: every 50 ms, a JSON merge patch (kube-rs, straight to the API
/// server, unconditional: it never conflicts) setting `data.outside` to the number of
/// patches it has made, until `stop`. Every contender's next write from what it read
/// before is then stale; and a contender that wrote from a stale copy without its
/// resourceVersion would set the key back, which the final check sees.
async fn outside_writer(api: Api<ConfigMap>, name: String, stop: Arc<AtomicBool>) -> Outside {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut outside = Outside::default();
    loop {
        tick.tick().await;
        if stop.load(Ordering::Relaxed) {
            return outside;
        }
        let value = (outside.successes + 1).to_string();
        let patch = Patch::Merge(json!({"data": {"outside": value}}));
        outside.requests += 1;
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => outside.successes += 1,
            // Perhaps applied: the check allows it, and the next patch sets the key anyway.
            Err(_) => outside.failures += 1,
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
}

async fn make_counter(api: &Api<ConfigMap>, name: &str, outside: bool, huge: bool) {
    let mut data = if outside {
        json!({"n": "0", "outside": "0"})
    } else {
        json!({"n": "0"})
    };
    if huge {
        data["blob"] = json!("x".repeat(HUGE_BLOB));
    }
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
}

async fn counter(api: &Api<ConfigMap>, name: &str, key: &str) -> u64 {
    api.get(name).await.unwrap().data.unwrap()[key]
        .parse()
        .unwrap()
}

/// The sum of the merge-patch writers' keys `data.p<w>` of the object: the calls
/// applied, when each writer's last applied call is its last successful one.
async fn merged(api: &Api<ConfigMap>, name: &str) -> u64 {
    let data = api.get(name).await.unwrap().data.unwrap_or_default();
    data.iter()
        .filter(|(k, _)| k.starts_with('p'))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum()
}

/// Resets process `pid`'s peak RSS to its current RSS (Linux 4.0+); false when refused,
/// and the peak read later is then the process's lifetime peak.
fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// Process `pid`'s peak RSS (VmHWM) in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// The sum of the samples of metric `name` whose labels contain `label` (all when empty).
fn metric(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

fn sample(sidecar: &Sidecar) -> SidecarSample {
    let text = sidecar.metrics();
    let lookups = "safewrite_memory_lookups_total";
    SidecarSample {
        cpu_seconds: cpu_seconds(sidecar.pid()),
        hits: metric(&text, lookups, "result=\"hit\""),
        misses: metric(&text, lookups, "result=\"miss\""),
        stale: metric(&text, "safewrite_memory_stale_total", ""),
    }
}

/// The samples of `sidecars` added together (none without a sidecar).
fn sampled(sidecars: &[&Sidecar]) -> Option<SidecarSample> {
    let samples: Vec<SidecarSample> = sidecars.iter().map(|s| sample(s)).collect();
    (!samples.is_empty()).then(|| SidecarSample {
        cpu_seconds: samples.iter().map(|s| s.cpu_seconds).sum(),
        hits: samples.iter().map(|s| s.hits).sum(),
        misses: samples.iter().map(|s| s.misses).sum(),
        stale: samples.iter().map(|s| s.stale).sum(),
    })
}

/// The API server's own counts of requests for configmaps, reads (GET, LIST, WATCH) and
/// writes (the verbs of `apiserver_request_total` are HTTP methods: PUT, POST, PATCH).
async fn apiserver_requests(cp: &ControlPlane) -> (f64, f64) {
    use support::requests::{READS, WRITES};
    (
        support::apiserver_requests(cp, READS, "configmaps").await,
        support::apiserver_requests(cp, WRITES, "configmaps").await,
    )
}

/// Builds the Go contenders (tests/bench/clientgo) into target/bench.
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
        .expect("run go (Go is needed for the client-go contenders)");
    assert!(status.success(), "go build of tests/bench/clientgo failed");
    out
}

/// `value` with `decimals`, or "-" when it is not a number (nothing to divide by).
fn or_dash(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "-".into(),
    }
}

/// The numerator over the denominator, when the denominator is not zero.
fn ratio(numerator: f64, denominator: f64) -> Option<f64> {
    (denominator > 0.0).then(|| numerator / denominator)
}

/// kube-apiserver's and etcd's CPU seconds so far (the running processes': a restart
/// starts others).
fn control_plane_cpu(cp: &ControlPlane) -> (f64, f64) {
    let apiserver = cp.apiserver_pid().expect("kube-apiserver running");
    let etcd = cp.etcd_pid().expect("etcd running");
    (cpu_seconds(apiserver), cpu_seconds(etcd))
}

/// kube-apiserver's and etcd's CPU seconds per second while nothing is written (every
/// sidecar up: their readiness checks are in it), over the longer of `seconds` and 10 s:
/// the API server's own loops come in bursts (36 to 176 ms/s in 3 s slices of an idle
/// control plane on the 2-core machine, about 80 on average), so a short window is noisy.
async fn idle(cp: &ControlPlane, seconds: f64) -> (f64, f64) {
    let (started, before) = (Instant::now(), control_plane_cpu(cp));
    tokio::time::sleep(Duration::from_secs_f64(seconds.max(10.0))).await;
    let after = control_plane_cpu(cp);
    let elapsed = started.elapsed().as_secs_f64();
    (
        (after.0 - before.0) / elapsed,
        (after.1 - before.1) / elapsed,
    )
}

/// One contender's row of a scenario's CPU table: CPU seconds over its run.
struct CpuRow {
    contender: Contender,
    /// Successful writes (at least one, to divide by).
    successes: f64,
    /// The caller process's CPU seconds and peak RSS (KiB).
    caller: (f64, u64),
    /// The sidecars' (summed), for safewrite.
    sidecar: Option<f64>,
    /// kube-apiserver's and etcd's, less their idle CPU over the same time.
    apiserver: f64,
    etcd: f64,
}

impl CpuRow {
    /// Whole-system CPU seconds per successful write: caller, sidecar, API server, etcd.
    fn system(&self) -> f64 {
        (self.caller.0 + self.sidecar.unwrap_or(0.0) + self.apiserver + self.etcd) / self.successes
    }
}

/// Prints a scenario's CPU table: per contender, the CPU per successful write of each
/// process on the write's path and their sum, and each safewrite row's sum over the
/// lowest client-go variant's (JSON or protobuf, reading live).
fn print_breakdown(rows: &[CpuRow], idle: (f64, f64)) {
    if rows.is_empty() {
        return;
    }
    let best_clientgo = rows
        .iter()
        .filter(|r| {
            r.contender
                .go_flags()
                .is_some_and(|(_, read, _)| read == "live")
        })
        .map(CpuRow::system)
        .min_by(f64::total_cmp);
    println!(
        "  {:<25} {:>8} {:>8} {:>9} {:>8} {:>8} {:>7} {:>10}",
        "CPU µs per write:",
        "caller",
        "sidecar",
        "apiserver",
        "etcd",
        "system",
        "vs cg",
        "caller MiB"
    );
    println!(
        "    (idle subtracted, measured before this scenario: kube-apiserver {:.1} ms/s, etcd {:.1} ms/s)",
        idle.0 * 1e3,
        idle.1 * 1e3
    );
    for row in rows {
        let micros = |seconds: f64| seconds * 1e6 / row.successes;
        let versus = match (row.contender.safewrite(), best_clientgo) {
            (Some(_), Some(best)) => ratio(row.system(), best),
            _ => None,
        };
        println!(
            "  {:<25} {:>8.0} {:>8} {:>9.0} {:>8.0} {:>8.0} {:>7} {:>10.1}",
            row.contender.label(),
            micros(row.caller.0),
            or_dash(row.sidecar.map(micros), 0),
            micros(row.apiserver),
            micros(row.etcd),
            row.system() * 1e6,
            or_dash(versus, 2),
            row.caller.1 as f64 / 1024.0,
        );
    }
}

impl Bench {
    /// The sidecars a safewrite contender writes through in `scenario`.
    fn sidecars(&self, memory: bool, scenario: Scenario) -> Vec<&Sidecar> {
        if !memory {
            return vec![&self.forgetting];
        }
        std::iter::once(&self.remembering)
            .chain(&self.more)
            .take(scenario.sidecars)
            .collect()
    }

    async fn run(&self, contender: Contender, names: &[String], scenario: Scenario) -> Run {
        match contender.go_flags() {
            Some((backoff, read, protobuf)) => {
                self.go(backoff, read, protobuf, names, scenario.writers)
                    .await
            }
            None => self.caller(contender, names, scenario).await,
        }
    }

    /// Runs a Rust contender (kube-rs direct, safewrite) in a caller process of its own:
    /// this bench's binary again, with `--caller <spec>` (see [`caller_main`]), so that
    /// its CPU and memory are its own, as the Go program's are.
    async fn caller(&self, contender: Contender, names: &[String], scenario: Scenario) -> Run {
        let endpoints: Vec<String> = match contender.safewrite() {
            Some(safewrite) => self
                .sidecars(safewrite.memory, scenario)
                .iter()
                .map(|s| match safewrite.unix {
                    true => format!(
                        "unix://{}",
                        s.unix_socket().expect("a unix socket").display()
                    ),
                    false => s.endpoint(),
                })
                .collect(),
            None => Vec::new(),
        };
        let spec = json!({
            "contender": contender.slug(),
            "kubeconfig": self.cp.admin_kubeconfig(),
            "namespace": self.ns,
            "names": names,
            "writers": scenario.writers,
            "huge": scenario.huge,
            "seconds": self.seconds,
            "endpoints": endpoints,
        });
        let mut command = Command::new(std::env::current_exe().expect("this bench's path"));
        command.arg("--caller").arg(spec.to_string());
        // On a blocking thread, so that the outside writer keeps its pace meanwhile.
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .expect("run the caller process");
        assert!(
            output.status.success(),
            "{} caller: {}",
            contender.label(),
            String::from_utf8_lossy(&output.stderr)
        );
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
        let line: serde_json::Value = serde_json::from_slice(&output.stdout).expect("its JSON");
        let pair = |key: &str| {
            let v = &line[key];
            v.as_array()
                .map(|a| (a[0].as_f64().unwrap(), a[1].as_u64().unwrap()))
        };
        Run {
            successes: line["successes"].as_u64().unwrap(),
            failures: line["failures"].as_u64().unwrap(),
            attempts: pair("attempts").map(|(mean, most)| (mean, most as u32)),
            p50_ms: line["p50_ms"].as_f64().unwrap(),
            p99_ms: line["p99_ms"].as_f64().unwrap(),
            caller: pair("caller").expect("the caller's CPU and RSS"),
            answers: line["answers"]
                .as_array()
                .map(|a| (a[0].as_u64().unwrap(), a[1].as_u64().unwrap())),
        }
    }

    async fn go(
        &self,
        backoff: &str,
        read: &str,
        protobuf: bool,
        names: &[String],
        writers: usize,
    ) -> Run {
        let mut command = Command::new(&self.clientgo);
        command
            .arg("-kubeconfig")
            .arg(self.cp.admin_kubeconfig())
            .args(["-namespace", &self.ns, "-names", &names.join(",")])
            .args(["-writers", &writers.to_string()])
            .args(["-backoff", backoff, "-read", read])
            .arg(format!("-protobuf={protobuf}"))
            .args([
                "-duration",
                &format!("{}ms", (self.seconds * 1000.0) as u64),
            ]);
        // On a blocking thread, so that the outside writer keeps its pace meanwhile.
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
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
            attempts: None,
            answers: None,
            caller: (
                line["cpu_seconds"].as_f64().unwrap(),
                line["max_rss_kib"].as_u64().unwrap(),
            ),
        }
    }
}

impl Callers {
    /// `writers` writers of `contender` (not a Go one) on `names` for `seconds`, in this
    /// process; the caller's CPU and RSS are filled in by [`caller_main`].
    async fn write(
        &self,
        contender: Contender,
        names: &[String],
        writers: usize,
        huge: bool,
        seconds: f64,
    ) -> Run {
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let safewrite = contender.safewrite();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let name = names[w % names.len()].clone();
            // None for kube-rs direct, which writes to the API server.
            let mut client = match self.clients.len() {
                0 => None,
                n => Some(self.clients[w % n].clone()),
            };
            let (api, ns) = (self.api.clone(), self.ns.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(w as u64);
                let (mut latencies, mut failures) = (Vec::new(), 0u64);
                let mut attempts = Vec::new();
                // On the huge object: answers not intact, and the numbers told.
                let (mut broken, mut told) = (0u64, Vec::new());
                let mut calls = 0u64;
                while Instant::now() < until {
                    let started = Instant::now();
                    calls += 1;
                    let made = match safewrite {
                        None => direct_increment(&api, &name, &mut rng).await,
                        Some(Safewrite { transact: true, .. }) => {
                            let client = client.as_mut().expect("a sidecar");
                            transact_increment(client, &ns, &name).await
                        }
                        Some(Safewrite { alone, merge, .. }) => {
                            let request = if merge {
                                merge_patch(&ns, &name, w, calls)
                            } else {
                                increment(&ns, &name, alone)
                            };
                            let client = client.as_mut().expect("a sidecar");
                            client.update_with_retry(request).await.map_or_else(
                                |status| failed(&status),
                                |r| {
                                    let result = r.into_inner().result?;
                                    if huge {
                                        let (intact, n) = huge_answer(&result.object_json);
                                        broken += u64::from(!intact);
                                        // A merge patch leaves the counter as it is.
                                        if !merge {
                                            told.extend(n);
                                        }
                                    }
                                    Some(result.attempts)
                                },
                            )
                        }
                    };
                    match made {
                        Some(made) => {
                            latencies.push(started.elapsed());
                            attempts.push(made);
                        }
                        None => failures += 1,
                    }
                }
                (latencies, failures, attempts, broken, told)
            }));
        }
        let (mut latencies, mut failures, mut attempts) = (Vec::new(), 0, Vec::new());
        let (mut broken, mut told) = (0, Vec::new());
        for task in tasks {
            let (l, f, a, b, t) = task.await.unwrap();
            latencies.extend(l);
            failures += f;
            attempts.extend(a);
            broken += b;
            told.extend(t);
        }
        // Each increment is told its own number: no two answers alike.
        let checked = told.len() as u64;
        told.sort_unstable();
        told.dedup();
        broken += checked - told.len() as u64;
        latencies.sort();
        let most = attempts.iter().copied().max().unwrap_or(0);
        let mean =
            attempts.iter().map(|&a| f64::from(a)).sum::<f64>() / attempts.len().max(1) as f64;
        Run {
            successes: latencies.len() as u64,
            failures,
            attempts: Some((mean, most)),
            p50_ms: percentile(&latencies, 0.5),
            p99_ms: percentile(&latencies, 0.99),
            caller: (0.0, 0),
            answers: (huge && safewrite.is_some()).then_some((broken, checked)),
        }
    }
}

/// The caller process of a Rust contender (`<this bench> --caller <spec>`, spawned by
/// [`Bench::caller`]): connects to the sidecars and the API server, writes, and prints
/// one JSON line, like the Go program: the run's counts and its own CPU time over the
/// writing (from /proc/self/stat, connecting excluded as the Go program's informer sync
/// is) and peak RSS.
async fn caller_main(spec: &str) {
    let spec: serde_json::Value = serde_json::from_str(spec).expect("a caller spec");
    let contender = Contender::ALL
        .into_iter()
        .find(|c| c.slug() == spec["contender"].as_str().unwrap())
        .expect("a contender's slug");
    let strings = |key: &str| -> Vec<String> {
        spec[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let kubeconfig = PathBuf::from(spec["kubeconfig"].as_str().unwrap());
    let mut clients = Vec::new();
    for endpoint in strings("endpoints") {
        let channel = match endpoint.strip_prefix("unix://") {
            Some(path) => support::unix_channel(std::path::Path::new(path)).await,
            None => {
                tonic::transport::Endpoint::from_shared(endpoint)
                    .expect("endpoint")
                    .connect()
                    .await
            }
        };
        clients.push(WriterServiceClient::new(
            channel.expect("connect to safewrite"),
        ));
    }
    let callers = Callers {
        api: Api::namespaced(
            support::client_from(&kubeconfig).await,
            spec["namespace"].as_str().unwrap(),
        ),
        ns: spec["namespace"].as_str().unwrap().to_string(),
        clients,
    };
    let me = std::process::id();
    let before = cpu_seconds(me);
    let run = callers
        .write(
            contender,
            &strings("names"),
            spec["writers"].as_u64().unwrap() as usize,
            spec["huge"].as_bool().unwrap(),
            spec["seconds"].as_f64().unwrap(),
        )
        .await;
    let cpu = cpu_seconds(me) - before;
    let line = json!({
        "successes": run.successes,
        "failures": run.failures,
        "attempts": run.attempts.map(|(mean, most)| json!([mean, most])),
        "p50_ms": run.p50_ms,
        "p99_ms": run.p99_ms,
        "caller": [cpu, peak_rss_kib(me)],
        "answers": run.answers.map(|(broken, checked)| json!([broken, checked])),
    });
    println!("{line}");
}

/// The comma-separated values of environment variable `var`, when it is set.
fn chosen(var: &str) -> Option<Vec<String>> {
    let value = std::env::var(var).ok()?;
    Some(value.split(',').map(|s| s.trim().to_string()).collect())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--caller") {
        return caller_main(&args[at + 1]).await;
    }
    // `cargo bench` passes --bench; `cargo test` builds benches but must not run this.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let seconds: f64 = std::env::var("SAFEWRITE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4.0);
    let runs = chosen("SAFEWRITE_BENCH_RUNS");
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| runs.as_ref().is_none_or(|r| r.contains(&s.name())))
        .collect();
    let picked = chosen("SAFEWRITE_BENCH_CONTENDERS");
    let contenders: Vec<Contender> = Contender::ALL
        .into_iter()
        .filter(|c| {
            picked
                .as_ref()
                .is_none_or(|p| p.iter().any(|s| s == c.slug()))
        })
        .collect();

    let clientgo = build_clientgo();
    // SAFEWRITE_BENCH_APISERVER_FLAGS="--profiling=true": kube-apiserver's extra flags
    // (that one serves /debug/pprof, to profile it during a run).
    let apiserver_flags = std::env::var("SAFEWRITE_BENCH_APISERVER_FLAGS").unwrap_or_default();
    let cp: &'static ControlPlane =
        Box::leak(Box::new(ControlPlane::start_with_flags(&apiserver_flags)));
    let ns = cp.namespace("bench").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let kubeconfig = cp.admin_kubeconfig();
    let flags = [
        &["--kubeconfig", kubeconfig.to_str().unwrap()][..],
        &support::BENCH_FLAGS,
    ]
    .concat();
    // SAFEWRITE_BENCH_SIDECAR_ENV="OTEL_TRACES_SAMPLER=always_off ...": the sidecars'
    // environment, to measure what a setting costs.
    let vars: Vec<(String, String)> = std::env::var("SAFEWRITE_BENCH_SIDECAR_ENV")
        .unwrap_or_default()
        .split_whitespace()
        .map(|pair| {
            let (name, value) = pair
                .split_once('=')
                .expect("SAFEWRITE_BENCH_SIDECAR_ENV holds NAME=VALUE pairs");
            (name.to_string(), value.to_string())
        })
        .collect();
    let vars: Vec<(&str, &str)> = vars.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    // Every sidecar that remembers serves on a unix socket too, for the unix contenders.
    let sockets = tempfile::tempdir().expect("a directory for the sidecars' sockets");
    let with_socket = |i: usize| {
        let socket = sockets.path().join(format!("safewrite-{i}.sock"));
        let socket = socket.to_str().expect("a UTF-8 path").to_string();
        Sidecar::start_with_env(
            &[&flags[..], &["--unix-socket", &socket][..]].concat(),
            &vars,
        )
    };
    let remembering = with_socket(0);
    let forgetting = Sidecar::start_with_env(&[&flags[..], &["--no-memory"][..]].concat(), &vars);
    let spread = scenarios.iter().map(|s| s.sidecars).max().unwrap_or(1);
    let more: Vec<Sidecar> = (1..spread).map(with_socket).collect();
    let mut bench = Bench {
        cp,
        ns,
        api,
        remembering,
        forgetting,
        more,
        clientgo,
        seconds,
        idle: (0.0, 0.0),
    };
    // Warm every path (connections, discovery, the Go runtime's first start).
    for &contender in &contenders {
        let name = format!("warm-{}", contender.slug());
        make_counter(&bench.api, &name, false, false).await;
        bench
            .run(contender, &[name], Scenario::new(1, 1, false))
            .await;
    }

    println!(
        "safewrite benchmark: read-dependent increments, {seconds} s per run, one control plane, sidecar release build with --qps 5000 --burst 10000 (client-go the same)"
    );
    println!(
        "req/write: the API server's configmap requests per successful increment (the outside writer's own excluded), GET/w the reads among them; att/max: attempts per successful increment, mean/most (where the contender tells); \
         CPU and RSS: the sidecar's for safewrite (RSS: its peak during the run), the caller process's for the others; \
         hit: the sidecar's memory hits / lookups; vs: goodput over the best client-go variant (cg) and the controller-runtime style (cr)"
    );
    println!(
        "CPU µs per write (the table under each scenario): CPU time per successful write of the caller (the Go program, or for kube-rs and safewrite a Rust caller process of its own), \
         the sidecar(s), kube-apiserver and etcd (less their idle CPU, measured before each scenario with every sidecar up), \
         their sum (system), and for safewrite its system over the lowest client-go variant's (vs cg); caller MiB: the caller's peak RSS\n"
    );
    println!(
        "{:<27} {:>9} {:>7} {:>9} {:>6} {:>8} {:>8} {:>8} {:>13} {:>7} {:>7} {:>8} {:>6} {:>6} {:>8} {:>9}",
        "contender",
        "writes/s",
        "failed",
        "req/write",
        "GET/w",
        "att/max",
        "p50 ms",
        "p99 ms",
        "final/expect",
        "vs cg",
        "vs cr",
        "CPU µs/w",
        "hit %",
        "stale",
        "RSS MiB",
        "outside"
    );
    let mut lifetime_rss = false;
    // Goodput by contender, writers and objects on one sidecar, for the rows spread over
    // several to be set against.
    let mut on_one = std::collections::HashMap::new();
    for scenario in scenarios {
        // The control plane's background drifts (it fell by half over one bench run):
        // measured again before each scenario.
        bench.idle = idle(bench.cp, seconds).await;
        println!("{}", scenario.title());
        let (mut best_clientgo, mut controller_runtime) = (0.0f64, 0.0f64);
        let mut breakdown: Vec<CpuRow> = Vec::new();
        for &contender in &contenders {
            // A row spread over sidecars is safewrite's own (the others write as in
            // the row with one), and the extra sidecars remember.
            let spread_out = scenario.sidecars > 1;
            if spread_out && contender.safewrite().is_none_or(|s| !s.memory) {
                continue;
            }
            // Every row its own objects: no two rows share a name.
            let outside_tag = match (scenario.outside, scenario.huge) {
                (true, _) => "-x",
                (false, true) => "-h",
                (false, false) => "",
            };
            let names: Vec<String> = (0..scenario.objects)
                .map(|o| {
                    format!(
                        "{}-k{}-o{}-s{}{outside_tag}-{o}",
                        contender.slug(),
                        scenario.writers,
                        scenario.objects,
                        scenario.sidecars
                    )
                })
                .collect();
            for name in &names {
                make_counter(&bench.api, name, scenario.outside, scenario.huge).await;
            }
            let sidecars = contender
                .safewrite()
                .map_or_else(Vec::new, |s| bench.sidecars(s.memory, scenario));
            let peak_reset =
                !sidecars.is_empty() && sidecars.iter().all(|s| reset_peak_rss(s.pid()));
            let before = apiserver_requests(bench.cp).await;
            let sidecar_before = sampled(&sidecars);
            let (window, control_before) = (Instant::now(), control_plane_cpu(bench.cp));
            let stop = Arc::new(AtomicBool::new(false));
            let outside = scenario.outside.then(|| {
                tokio::spawn(outside_writer(
                    bench.api.clone(),
                    names[0].clone(),
                    stop.clone(),
                ))
            });
            let run = bench.run(contender, &names, scenario).await;
            stop.store(true, Ordering::Relaxed);
            let outside = match outside {
                Some(task) => Some(task.await.unwrap()),
                None => None,
            };
            let control_after = control_plane_cpu(bench.cp);
            let window = window.elapsed().as_secs_f64();
            let sidecar_after = sampled(&sidecars);
            let after = apiserver_requests(bench.cp).await;

            let mut total = 0;
            for name in &names {
                total += if contender == Contender::SafewriteMerge {
                    merged(&bench.api, name).await
                } else {
                    counter(&bench.api, name, "n").await
                };
            }
            let successes = run.successes.max(1) as f64;
            let goodput = run.successes as f64 / seconds;
            let outside_requests = outside.as_ref().map_or(0, |o| o.requests) as f64;
            let reads_per_write = (after.0 - before.0) / successes;
            let per_write =
                (after.0 + after.1 - before.0 - before.1 - outside_requests) / successes;
            // Over several sidecars: their CPU summed, the highest peak.
            let sidecar_cpu = match (&sidecar_before, &sidecar_after) {
                (Some(b), Some(a)) => Some(a.cpu_seconds - b.cpu_seconds),
                _ => None,
            };
            let (cpu, rss_kib) = match sidecar_cpu {
                Some(cpu) => (cpu, sidecars.iter().map(|s| peak_rss_kib(s.pid())).max()),
                None => (run.caller.0, Some(run.caller.1)),
            };
            breakdown.push(CpuRow {
                contender,
                successes,
                caller: run.caller,
                sidecar: sidecar_cpu,
                apiserver: control_after.0 - control_before.0 - bench.idle.0 * window,
                etcd: control_after.1 - control_before.1 - bench.idle.1 * window,
            });
            let (hit, stale) = match (&sidecar_before, &sidecar_after) {
                (Some(b), Some(a)) => {
                    let hits = a.hits - b.hits;
                    (
                        ratio(100.0 * hits, hits + a.misses - b.misses),
                        Some(a.stale - b.stale),
                    )
                }
                _ => (None, None),
            };
            let (versus_clientgo, versus_cr) = match contender {
                Contender::ClientGoRetry
                | Contender::ClientGoBackoff
                | Contender::ClientGoProtobuf => {
                    best_clientgo = best_clientgo.max(goodput);
                    (None, None)
                }
                Contender::ControllerRuntime => {
                    controller_runtime = goodput;
                    (None, None)
                }
                Contender::KubeDirect => (None, None),
                _ => (
                    ratio(goodput, best_clientgo),
                    ratio(goodput, controller_runtime),
                ),
            };
            let mut outside_column = String::new();
            let mut outside_total = 0;
            if let Some(outside) = &outside {
                outside_total = counter(&bench.api, &names[0], "outside").await;
                outside_column = format!("{outside_total}/{}", outside.successes);
            }
            let rss_mib = rss_kib.map(|k| k as f64 / 1024.0);
            let rss = match rss_mib {
                Some(_) if !sidecars.is_empty() && !peak_reset => {
                    lifetime_rss = true;
                    format!("{}*", or_dash(rss_mib, 1))
                }
                _ => or_dash(rss_mib, 1),
            };
            println!(
                "  {:<25} {:>9.1} {:>7} {:>9.2} {:>6.2} {:>8} {:>8.1} {:>8.1} {:>13} {:>7} {:>7} {:>8} {:>6} {:>6} {:>8} {:>9}",
                contender.label(),
                goodput,
                run.failures,
                per_write,
                reads_per_write,
                run.attempts
                    .map_or("-".to_string(), |(mean, most)| format!("{mean:.2}/{most}")),
                run.p50_ms,
                run.p99_ms,
                format!("{total}/{}", run.successes),
                or_dash(versus_clientgo, 2),
                or_dash(versus_cr, 2),
                or_dash(Some(cpu * 1e6 / successes), 0),
                or_dash(hit, 1),
                or_dash(stale, 0),
                rss,
                outside_column,
            );
            let same = (contender.slug(), scenario.writers, scenario.objects);
            if scenario.sidecars == 1 {
                on_one.insert(same, goodput);
            } else if let Some(one) = on_one.get(&same) {
                println!(
                    "    over the same {} writers on one sidecar: {}x",
                    scenario.writers,
                    or_dash(ratio(goodput, *one), 2)
                );
            }
            if let Some((broken, checked)) = run.answers {
                println!("    answers checked: {checked}, not their serial result: {broken}");
                assert_eq!(
                    broken,
                    0,
                    "{}: answers on the huge object",
                    contender.label()
                );
            }
            // A failed increment may have been applied before its caller gave up (an
            // answer lost to a timeout): never fewer than the successes, never more
            // than all attempts made.
            assert!(
                total >= run.successes && total <= run.successes + run.failures,
                "{}: lost or doubled update: counters {total}, successes {}, failures {}",
                contender.label(),
                run.successes,
                run.failures
            );
            if let Some(outside) = outside {
                assert!(
                    outside_total >= outside.successes
                        && outside_total <= outside.successes + outside.failures,
                    "{}: the outside writer's key is {outside_total}, its successes {}, failures {}",
                    contender.label(),
                    outside.successes,
                    outside.failures
                );
            }
        }
        print_breakdown(&breakdown, bench.idle);
    }
    // Measured again, so that a drift of the control plane's background shows.
    let (apiserver_idle, etcd_idle) = idle(bench.cp, seconds).await;
    println!(
        "\nIdle CPU after the runs: kube-apiserver {:.1} ms/s, etcd {:.1} ms/s (before the last scenario: {:.1} and {:.1}).",
        apiserver_idle * 1e3,
        etcd_idle * 1e3,
        bench.idle.0 * 1e3,
        bench.idle.1 * 1e3,
    );
    if lifetime_rss {
        println!(
            "\nRSS marked * is the sidecar's lifetime peak (its peak could not be reset before the run)."
        );
    }
}
