//! The row "one hot object, 3 sidecars × 12 writers vs 1 sidecar × 36": the same 36
//! writers incrementing one counter (CEL, group commit, remembered objects: the
//! defaults), first all through one sidecar, then 12 through each of three (three
//! controllers, each with its own sidecar). Printed: goodput, the ratio of the two, API
//! requests per increment (the API server's own counts, reads among them), the
//! sidecars' conflicts (409 answers) per increment, p50/p99, the sidecars' CPU per
//! increment, and the final counter against the successes; and 3 × 12 again on sidecars
//! started with `--no-hot-pacing` (as the sidecar was before it paced hot objects). Asserted, as in
//! the other rows, only that no update was lost or doubled, and that every caller was
//! told a different number.
//!
//! Selected by `SAFEWRITE_BENCH_RUNS` containing `hot3` (or by no selection).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use safewrite::pb::writer_service_client::WriterServiceClient;
use support::{ControlPlane, Sidecar};

use super::{apiserver_requests, counter, cpu_seconds, increment, make_counter, metric};
use super::{failed, percentile, support};

/// What one arrangement of the 36 writers did.
struct Hot {
    goodput: f64,
    successes: u64,
    failures: u64,
    per_write: f64,
    reads_per_write: f64,
    conflicts_per_write: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_us: f64,
    total: u64,
}

/// Writes for `seconds` with `writers` callers on each of `sidecars`, all on the new
/// counter `name`.
async fn hot_run(
    cp: &ControlPlane,
    api: &Api<ConfigMap>,
    ns: &str,
    name: &str,
    sidecars: &[&Sidecar],
    writers: usize,
    seconds: f64,
) -> Hot {
    make_counter(api, name, false, false).await;
    let conflicts_of =
        |s: &Sidecar| metric(&s.metrics(), "safewrite_api_requests_total", "code=\"409\"");
    let conflicts_before: f64 = sidecars.iter().map(|s| conflicts_of(s)).sum();
    let before = apiserver_requests(cp).await;
    let cpu_before: f64 = sidecars.iter().map(|s| cpu_seconds(s.pid())).sum();
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for sidecar in sidecars {
        let channel = sidecar.channel().await;
        for _ in 0..writers {
            let mut client = WriterServiceClient::new(channel.clone());
            let (ns, name) = (ns.to_string(), name.to_string());
            tasks.push(tokio::spawn(async move {
                let (mut latencies, mut told, mut failures) = (Vec::new(), Vec::new(), 0u64);
                while Instant::now() < until {
                    let started = Instant::now();
                    match client.update_with_retry(increment(&ns, &name, false)).await {
                        Ok(answer) => {
                            latencies.push(started.elapsed());
                            let result = answer.into_inner().result.expect("a result");
                            let object: serde_json::Value =
                                serde_json::from_str(&result.object_json).expect("its object");
                            let n = object["data"]["n"].as_str().expect("data.n");
                            told.push(n.parse::<u64>().expect("a number"));
                        }
                        Err(status) => {
                            failed::<()>(&status);
                            failures += 1;
                        }
                    }
                }
                (latencies, told, failures)
            }));
        }
    }
    let (mut latencies, mut told, mut failures) = (Vec::new(), Vec::new(), 0);
    for task in tasks {
        let (l, t, f) = task.await.expect("a writer");
        latencies.extend(l);
        told.extend(t);
        failures += f;
    }
    let cpu_after: f64 = sidecars.iter().map(|s| cpu_seconds(s.pid())).sum();
    let conflicts_after: f64 = sidecars.iter().map(|s| conflicts_of(s)).sum();
    let after = apiserver_requests(cp).await;
    let total = counter(api, name, "n").await;
    latencies.sort();
    let successes = latencies.len() as u64;
    let per = successes.max(1) as f64;
    let distinct: HashSet<u64> = told.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        told.len(),
        "{name}: two callers were told the same number"
    );
    assert!(
        total >= successes && total <= successes + failures,
        "{name}: lost or doubled update: counter {total}, successes {successes}, failures {failures}"
    );
    Hot {
        goodput: successes as f64 / seconds,
        successes,
        failures,
        per_write: (after.0 + after.1 - before.0 - before.1) / per,
        reads_per_write: (after.0 - before.0) / per,
        conflicts_per_write: (conflicts_after - conflicts_before) / per,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        cpu_us: (cpu_after - cpu_before) * 1e6 / per,
        total,
    }
}

/// The row: 1 sidecar × 36 writers, then 3 sidecars × 12, on one counter each, on
/// sidecars started with `flags`.
pub async fn hot_across_sidecars(
    cp: &ControlPlane,
    api: &Api<ConfigMap>,
    ns: &str,
    flags: &[&str],
    seconds: f64,
) {
    let sidecars: Vec<Sidecar> = (0..3).map(|_| Sidecar::start(flags)).collect();
    let unpaced_flags = [flags, &["--no-hot-pacing"][..]].concat();
    let unpaced: Vec<Sidecar> = (0..3).map(|_| Sidecar::start(&unpaced_flags)).collect();
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let all_unpaced: Vec<&Sidecar> = unpaced.iter().collect();
    // Warm each sidecar's connections and discovery.
    for (i, sidecar) in all.iter().chain(&all_unpaced).enumerate() {
        let name = format!("hot-warm-{i}");
        hot_run(cp, api, ns, &name, &[sidecar], 1, 0.5).await;
    }
    println!(
        "\none hot object, 36 writers (CEL increments, group commit): 1 sidecar × 36 vs 3 sidecars × 12"
    );
    println!(
        "  {:<25} {:>9} {:>7} {:>9} {:>6} {:>6} {:>8} {:>8} {:>13} {:>8} {:>8}",
        "arrangement",
        "writes/s",
        "failed",
        "req/write",
        "GET/w",
        "409/w",
        "p50 ms",
        "p99 ms",
        "final/expect",
        "CPU µs/w",
        "vs 1×36"
    );
    let one = hot_run(cp, api, ns, "hot-1x36", &all[..1], 36, seconds).await;
    let three = hot_run(cp, api, ns, "hot-3x12", &all, 12, seconds).await;
    let before = hot_run(cp, api, ns, "hot-3x12-unpaced", &all_unpaced, 12, seconds).await;
    for (label, hot) in [
        ("1 sidecar × 36", &one),
        ("3 sidecars × 12", &three),
        ("3 × 12 --no-hot-pacing", &before),
    ] {
        println!(
            "  {:<25} {:>9.1} {:>7} {:>9.3} {:>6.3} {:>6.3} {:>8.1} {:>8.1} {:>13} {:>8.0} {:>8.2}",
            label,
            hot.goodput,
            hot.failures,
            hot.per_write,
            hot.reads_per_write,
            hot.conflicts_per_write,
            hot.p50_ms,
            hot.p99_ms,
            format!("{}/{}", hot.total, hot.successes),
            hot.cpu_us,
            hot.goodput / one.goodput.max(f64::MIN_POSITIVE),
        );
    }
}
