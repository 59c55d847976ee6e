//! The demo's writers: N concurrent callers each apply M read-dependent increments
//! (a CEL mutation) to one ConfigMap through the safewrite sidecar, then a summary:
//! mutations applied, conflicts met and resolved, attempts per write, latency
//! percentiles, and a check that the final value is exact.
//!
//! Run by deploy/local/demo.sh:
//!   cargo run --release --example contend -- ADDR NAMESPACE [WRITERS] [INCREMENTS]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use safewrite::pb;
use safewrite::pb::writer_service_client::WriterServiceClient;
use serde_json::Value;

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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: contend ADDR NAMESPACE [WRITERS] [INCREMENTS]");
        std::process::exit(2);
    }
    let (addr, namespace) = (args[1].clone(), args[2].clone());
    let writers: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(16);
    let increments: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(25);
    let client = WriterServiceClient::connect(format!("http://{addr}")).await?;

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
    let total = writers * increments;
    println!();
    println!("summary");
    println!(
        "  mutations applied     {ok} of {total} ({failed} failed), {created} by creating the object"
    );
    println!(
        "  conflicts met         {conflicts}, every one resolved by re-reading and re-applying"
    );
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
        "  throughput            {:.0} writes/s over {:.2} s",
        ok as f64 / wall.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!("  read back (no write)  outcome {:?}", read.outcome());
    if final_count == ok && failed == 0 {
        println!(
            "  final value           {final_count} = {ok} successful increments: exact, no update lost"
        );
        Ok(())
    } else {
        println!("  final value           {final_count}, but {ok} increments succeeded: MISMATCH");
        std::process::exit(1);
    }
}
