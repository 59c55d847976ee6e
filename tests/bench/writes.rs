//! `cargo bench --bench writes`: safewrite against the peer a Rust user would pick
//! instead (kube-rs, GET + PUT with a hand-written conflict-retry loop), in one run, on
//! the local control plane from tests/harness. Prints figures and ratios; asserts
//! nothing about time (speed is measured, not asserted).
//!
//! 1. Uncontended latency: one read-modify-write of one object, through the sidecar
//!    vs. direct from this process.
//! 2. Contended goodput: 1, 4 and 16 writers incrementing one counter.
//! 3. The sidecar's peak RSS after 10,000 writes.

#[path = "../support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use safewrite::pb;
use safewrite::pb::writer_service_client::WriterServiceClient;
use serde_json::json;
use support::{ControlPlane, Sidecar};
use tonic::transport::Channel;

/// An increment that retries conflicts as long as it takes (the contention is the point).
fn increment(ns: &str, name: &str) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        retry_policy: Some(pb::RetryPolicy {
            max_attempts: 1000,
            ..Default::default()
        }),
        ..support::keyed_increment(ns, name, None)
    }
}

/// The peer: kube-rs GET, change, PUT; on 409 Conflict re-read and retry with jittered
/// exponential backoff (what client-go's RetryOnConflict does for Go).
async fn direct_increment(api: &Api<ConfigMap>, name: &str, rng: &mut fastrand::Rng) -> u32 {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let mut cm = api.get(name).await.expect("get");
        let data = cm.data.get_or_insert_with(Default::default);
        let n: u64 = data.get("n").map(|v| v.parse().unwrap()).unwrap_or(0);
        data.insert("n".into(), (n + 1).to_string());
        match api.replace(name, &PostParams::default(), &cm).await {
            Ok(_) => return attempt,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let ceiling = Duration::from_millis(10)
                    .saturating_mul(1 << attempt.min(7))
                    .min(Duration::from_secs(1));
                tokio::time::sleep(ceiling.mul_f64(rng.f64())).await;
            }
            Err(e) => panic!("direct PUT: {e}"),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
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

async fn uncontended(client: &WriterServiceClient<Channel>, api: &Api<ConfigMap>, ns: &str) {
    const N: usize = 500;
    make_counter(api, "lat-sidecar").await;
    make_counter(api, "lat-direct").await;
    let mut client = client.clone();
    let mut rng = fastrand::Rng::with_seed(1);
    // Warm both paths (connections, discovery).
    for _ in 0..20 {
        client
            .update_with_retry(increment(ns, "lat-sidecar"))
            .await
            .unwrap();
        direct_increment(api, "lat-direct", &mut rng).await;
    }
    let (mut via, mut direct) = (Vec::with_capacity(N), Vec::with_capacity(N));
    for _ in 0..N {
        let t = Instant::now();
        client
            .update_with_retry(increment(ns, "lat-sidecar"))
            .await
            .unwrap();
        via.push(t.elapsed());
        let t = Instant::now();
        direct_increment(api, "lat-direct", &mut rng).await;
        direct.push(t.elapsed());
    }
    via.sort();
    direct.sort();
    let (vp50, vp99) = (percentile(&via, 0.5), percentile(&via, 0.99));
    let (dp50, dp99) = (percentile(&direct, 0.5), percentile(&direct, 0.99));
    println!("uncontended read-modify-write, {N} sequential increments of one object");
    println!(
        "  safewrite UpdateWithRetry (CEL)  p50 {:6.3} ms  p99 {:6.3} ms",
        ms(vp50),
        ms(vp99)
    );
    println!(
        "  kube-rs GET+PUT direct           p50 {:6.3} ms  p99 {:6.3} ms",
        ms(dp50),
        ms(dp99)
    );
    println!(
        "  added p50 {:+.3} ms (target <= 0.3 ms); ratio p50 {:.2}x, p99 {:.2}x",
        ms(vp50) - ms(dp50),
        vp50.as_secs_f64() / dp50.as_secs_f64(),
        vp99.as_secs_f64() / dp99.as_secs_f64()
    );
}

async fn contended(client: &WriterServiceClient<Channel>, api: &Api<ConfigMap>, ns: &str) {
    const TOTAL: usize = 320;
    println!("contended goodput: {TOTAL} increments of one counter split across W writers");
    for writers in [1usize, 4, 16] {
        let each = TOTAL / writers;
        let via_name = format!("goodput-sidecar-{writers}");
        let direct_name = format!("goodput-direct-{writers}");
        make_counter(api, &via_name).await;
        make_counter(api, &direct_name).await;

        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..writers {
            let mut client = client.clone();
            let (ns, name) = (ns.to_string(), via_name.clone());
            tasks.push(tokio::spawn(async move {
                let mut attempts = 0;
                for _ in 0..each {
                    let r = client
                        .update_with_retry(increment(&ns, &name))
                        .await
                        .unwrap();
                    attempts += r.into_inner().result.unwrap().attempts;
                }
                attempts
            }));
        }
        let mut via_attempts = 0;
        for t in tasks {
            via_attempts += t.await.unwrap();
        }
        let via = started.elapsed();

        let started = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let (api, name) = (api.clone(), direct_name.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(w as u64);
                let mut attempts = 0;
                for _ in 0..each {
                    attempts += direct_increment(&api, &name, &mut rng).await;
                }
                attempts
            }));
        }
        let mut direct_attempts = 0;
        for t in tasks {
            direct_attempts += t.await.unwrap();
        }
        let direct = started.elapsed();

        let done = (each * writers) as f64;
        assert_eq!(
            counter(api, &via_name).await as f64,
            done,
            "sidecar lost an update"
        );
        assert_eq!(
            counter(api, &direct_name).await as f64,
            done,
            "direct lost an update"
        );
        let (gv, gd) = (done / via.as_secs_f64(), done / direct.as_secs_f64());
        println!(
            "  W={writers:2}  safewrite {gv:7.1} writes/s ({:.2} attempts/write)   kube-rs direct {gd:7.1} writes/s ({:.2} attempts/write)   ratio {:.2}x",
            via_attempts as f64 / done,
            direct_attempts as f64 / done,
            gv / gd
        );
    }
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn memory(
    sidecar: &Sidecar,
    client: &WriterServiceClient<Channel>,
    api: &Api<ConfigMap>,
    ns: &str,
) {
    const WRITES: usize = 10_000;
    const WRITERS: usize = 8;
    for w in 0..WRITERS {
        make_counter(api, &format!("rss-{w}")).await;
    }
    let before = rss_kib(sidecar.pid(), "VmRSS:");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut client = client.clone();
        let (ns, name) = (ns.to_string(), format!("rss-{w}"));
        tasks.push(tokio::spawn(async move {
            for _ in 0..WRITES / WRITERS {
                client
                    .update_with_retry(increment(&ns, &name))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let took = started.elapsed();
    let peak = rss_kib(sidecar.pid(), "VmHWM:");
    let now = rss_kib(sidecar.pid(), "VmRSS:");
    println!(
        "sidecar memory over {WRITES} writes ({WRITERS} writers, {:.0} writes/s)",
        WRITES as f64 / took.as_secs_f64()
    );
    println!(
        "  RSS before {:.1} MiB, after {:.1} MiB, peak (VmHWM) {:.1} MiB (target <= 30 MiB)",
        before as f64 / 1024.0,
        now as f64 / 1024.0,
        peak as f64 / 1024.0
    );
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; `cargo test` builds benches but must not run this.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let cp = ControlPlane::shared();
    let ns = cp.namespace("bench").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().unwrap(),
        "--log-filter",
        "warn,safewrite::server=info",
    ]);
    let client = WriterServiceClient::new(sidecar.channel().await);
    println!(
        "safewrite benchmark: sidecar (release build) vs kube-rs direct, same process, same control plane\n"
    );
    uncontended(&client, &api, &ns).await;
    println!();
    contended(&client, &api, &ns).await;
    println!();
    memory(&sidecar, &client, &api, &ns).await;
}
