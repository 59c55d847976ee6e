//! The demo's writers. First the bug this product exists to prevent: N naive writers
//! each apply M increments to one ConfigMap directly (read, change, write back with no
//! resourceVersion and no retry), and the updates they lose are counted. Then N callers
//! each apply M read-dependent increments (a CEL mutation) to another ConfigMap through
//! the safewrite sidecar, and a summary: mutations applied, conflicts met and resolved,
//! attempts per write, the API requests each write cost (the API server's own count;
//! group commit makes it less than one), latency percentiles, and a check that the final
//! value is exact.
//!
//! Run by deploy/local/demo.sh:
//!   cargo run --release --example contend -- ADDR NAMESPACE KUBECONFIG [WRITERS] [INCREMENTS]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;
use serde_json::Value;

// An API server's own request count, shared with the tests and the bench.
#[path = "../../tests/support/requests.rs"]
mod requests;

const INCREMENT: &str = r#"{"data": {"count": string(int(object.data.count) + 1)}}"#;

fn target(namespace: &str) -> pb::ObjectRef {
    pb::ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: namespace.into(),
        name: "demo-counter".into(),
    }
}

fn increment(namespace: &str) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        target: Some(target(namespace)),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                expression: INCREMENT.into(),
            })),
        }),
        options: Some(pb::WriteOptions {
            create_if_missing_json: r#"{"data": {"count": "0"}}"#.into(),
            field_manager: "demo".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The API server's own count of requests for configmaps, reads and writes.
async fn configmap_requests(kube: &kube::Client) -> Result<f64, Box<dyn std::error::Error>> {
    use requests::{READS, WRITES, count};
    let text = kube
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    Ok(count(&text, "configmaps", READS) + count(&text, "configmaps", WRITES))
}

/// The same count once it has settled: the API server counts a request when its handler
/// returns, which may be a moment after the client has the answer, so the count is read
/// until two reads 50 ms apart agree (at most 2 s).
async fn settled_configmap_requests(
    kube: &kube::Client,
) -> Result<f64, Box<dyn std::error::Error>> {
    let mut last = configmap_requests(kube).await?;
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = configmap_requests(kube).await?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

/// The naive writers: read, change, write back with no resourceVersion (an
/// unconditional update) and no retry. Returns the final count of `total` increments.
async fn naive(
    kube: &kube::Client,
    namespace: &str,
    writers: usize,
    increments: usize,
) -> Result<usize, Box<dyn std::error::Error>> {
    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), namespace);
    let _ = api.delete("demo-naive", &Default::default()).await;
    let fresh: ConfigMap = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "demo-naive"}, "data": {"count": "0"}}),
    )?;
    for _ in 0..50 {
        match api.create(&PostParams::default(), &fresh).await {
            Ok(_) => break,
            // The old one is still being deleted.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..increments {
                let Ok(mut cm) = api.get("demo-naive").await else {
                    continue;
                };
                let data = cm.data.get_or_insert_with(Default::default);
                let n: usize = data.get("count").and_then(|v| v.parse().ok()).unwrap_or(0);
                data.insert("count".into(), (n + 1).to_string());
                cm.metadata.resource_version = None;
                let _ = api.replace("demo-naive", &PostParams::default(), &cm).await;
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let cm = api.get("demo-naive").await?;
    Ok(cm.data.unwrap_or_default()["count"].parse()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: contend ADDR NAMESPACE KUBECONFIG [WRITERS] [INCREMENTS]");
        std::process::exit(2);
    }
    let (addr, namespace) = (args[1].clone(), args[2].clone());
    let kubeconfig = kube::config::Kubeconfig::read_from(&args[3])?;
    let kube = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?,
    )?;
    let writers: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(16);
    let increments: usize = args.get(5).map(|s| s.parse()).transpose()?.unwrap_or(25);
    let client = WriterServiceClient::connect(format!("http://{addr}")).await?;

    println!(
        "naive writers: {writers} x {increments} increments of ConfigMap {namespace}/demo-naive, read and written back with no resourceVersion and no retry"
    );
    let naive_count = naive(&kube, &namespace, writers, increments).await?;
    let total = writers * increments;
    println!(
        "  final value {naive_count} of {total}: {} updates lost ({:.0}%)",
        total - naive_count.min(total),
        100.0 * (total - naive_count.min(total)) as f64 / total as f64
    );
    println!();
    let requests_before = settled_configmap_requests(&kube).await?;

    println!(
        "{writers} writers x {increments} increments of ConfigMap {namespace}/demo-counter, all at once"
    );
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let mut client = client.clone();
        let namespace = namespace.clone();
        tasks.push(tokio::spawn(async move {
            let mut runs = Vec::with_capacity(increments);
            for _ in 0..increments {
                let t = Instant::now();
                let answer = client.update_with_retry(increment(&namespace)).await;
                runs.push((
                    t.elapsed(),
                    answer.map(|r| r.into_inner().result.unwrap_or_default()),
                ));
            }
            runs
        }));
    }
    let mut latencies = Vec::new();
    let mut attempts_histogram: BTreeMap<u32, usize> = BTreeMap::new();
    let (mut ok, mut failed, mut conflicts, mut created) = (0usize, 0usize, 0usize, 0usize);
    for task in tasks {
        for (latency, answer) in task.await? {
            latencies.push(latency);
            match answer {
                Ok(result) => {
                    ok += 1;
                    if result.outcome() == pb::Outcome::Created {
                        created += 1;
                    }
                    *attempts_histogram.entry(result.attempts).or_default() += 1;
                    conflicts += result
                        .attempt_records
                        .iter()
                        .filter(|a| a.reason == "Conflict" || a.reason == "AlreadyExists")
                        .count();
                }
                Err(status) => {
                    failed += 1;
                    eprintln!("  failed: {:?} {}", status.code(), status.message());
                }
            }
        }
    }
    let wall = started.elapsed();
    let requests = settled_configmap_requests(&kube).await? - requests_before;

    // Read the final value through the sidecar too: an empty merge patch is a no-op,
    // answered UNCHANGED with the current object and no write.
    let mut reader = client.clone();
    let read = reader
        .update_with_retry(pb::UpdateWithRetryRequest {
            target: Some(target(&namespace)),
            mutation: Some(pb::Mutation {
                kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                    patch_json: "{}".into(),
                })),
            }),
            ..Default::default()
        })
        .await?
        .into_inner()
        .result
        .unwrap_or_default();
    let object: Value = serde_json::from_str(&read.object_json)?;
    let final_count: usize = object["data"]["count"].as_str().unwrap_or("0").parse()?;

    latencies.sort();
    let pct =
        |p: f64| -> Duration { latencies[((latencies.len() as f64 - 1.0) * p).round() as usize] };
    println!();
    println!("summary");
    println!(
        "  mutations applied     {ok} of {total} ({failed} failed), {created} by creating the object"
    );
    if conflicts == 0 {
        println!(
            "  conflicts met         none: concurrent writes to the object were committed together"
        );
    } else {
        println!(
            "  conflicts met         {conflicts}, every one resolved by re-reading and re-applying"
        );
    }
    println!(
        "  attempts per write    {}",
        attempts_histogram
            .iter()
            .map(|(a, n)| format!("{a}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  latency               p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        pct(1.0).as_secs_f64() * 1e3
    );
    println!(
        "  API requests          {requests:.0} for {ok} writes: {:.2} per write (group commit: one read and one write carry every write waiting for the object)",
        requests / ok.max(1) as f64
    );
    println!(
        "  throughput            {:.0} writes/s over {:.2} s",
        ok as f64 / wall.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!("  read back (no write)  outcome {:?}", read.outcome());
    if final_count == ok && failed == 0 {
        println!(
            "  final value           {final_count} = {ok} successful increments: exact, no update lost"
        );
        println!();
        println!(
            "side by side: naive writers lost {} of {total} updates; safewrite lost none, at {:.2} API requests per write, p99 {:.1} ms",
            total - naive_count.min(total),
            requests / ok.max(1) as f64,
            pct(0.99).as_secs_f64() * 1e3
        );
        Ok(())
    } else {
        println!("  final value           {final_count}, but {ok} increments succeeded: MISMATCH");
        std::process::exit(1);
    }
}
