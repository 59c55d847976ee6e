//! The soak, run by hand (`bash tests/soak.sh`, not part of the test command): 100,000
//! read-dependent increments with idempotency keys from 3 sidecars on a few hot
//! ConfigMaps, while the API server is stopped and started, etcd is stopped and started,
//! and the fault proxy in front of the API server hangs (accepts, reads, never answers)
//! and resets connections. Every caller resends the same key until it is answered OK,
//! as a controller would; at the end every object's count must equal the increments
//! intended for it: every OK applied exactly once, nothing lost, nothing doubled.
//!
//! Size and length: `SOAK_INCREMENTS` (100000), `SOAK_OBJECTS` (4), `SOAK_CALLERS` per
//! sidecar (8), `SOAK_LIMIT_SECS` (3600, after which the soak fails).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::faults::{Fault, HttpFaultProxy};
use support::{ControlPlane, Sidecar};

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    already_applied: AtomicU64,
    resent: AtomicU64,
    by_code: std::sync::Mutex<BTreeMap<String, u64>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak of many minutes: run it with tests/soak.sh"]
async fn soak_every_ok_is_applied_exactly_once_through_outages() {
    let increments = env("SOAK_INCREMENTS", 100_000);
    let objects = env("SOAK_OBJECTS", 4);
    let callers_per_sidecar = env("SOAK_CALLERS", 8);
    let limit = Duration::from_secs(env("SOAK_LIMIT_SECS", 3600));

    // Its own control plane: this soak stops and starts it.
    let cp: &'static ControlPlane = Box::leak(Box::new(ControlPlane::start()));
    let ns = cp.namespace("soak").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    for o in 0..objects {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("hot-{o}")}, "data": {"n": "0"}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let proxy = Arc::new(HttpFaultProxy::start(cp).await);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let kubeconfig = kubeconfig.to_str().unwrap();
    let sidecars: Vec<Sidecar> = (0..3)
        .map(|_| {
            Sidecar::start(&[
                "--kubeconfig",
                kubeconfig,
                "--qps",
                "2000",
                "--burst",
                "4000",
                "--request-timeout",
                "2s",
                "--breaker-cooldown",
                "500ms",
                "--breaker-max-cooldown",
                "2s",
            ])
        })
        .collect();

    let tally = Arc::new(Tally::default());
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    // The chaos: one fault at a time, each a few seconds, with healthy gaps between.
    let chaos = {
        let done = done.clone();
        let proxy_counters = proxy.clone();
        tokio::spawn(async move {
            let mut log = Vec::new();
            let mut round = 0u64;
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(8)).await;
                if done.load(Ordering::Relaxed) {
                    break;
                }
                let what = match round % 4 {
                    0 => {
                        tokio::task::spawn_blocking(|| cp.stop_apiserver())
                            .await
                            .unwrap();
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        tokio::task::spawn_blocking(|| cp.start_apiserver())
                            .await
                            .unwrap();
                        "apiserver stopped 3s"
                    }
                    1 => {
                        tokio::task::spawn_blocking(|| cp.stop_etcd())
                            .await
                            .unwrap();
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        tokio::task::spawn_blocking(|| cp.start_etcd())
                            .await
                            .unwrap();
                        "etcd stopped 3s"
                    }
                    2 => {
                        proxy_counters.inject(Fault::Hang, 1, false);
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        proxy_counters.pass();
                        "proxy hung 5s"
                    }
                    _ => {
                        proxy_counters.inject(Fault::ResetBeforeForward, 3, false);
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        proxy_counters.inject(Fault::DropAnswer, 5, true);
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        proxy_counters.pass();
                        "proxy reset every 3rd request 5s, dropped every 5th answer 5s"
                    }
                };
                eprintln!("soak: {:>6.1}s {what}", started.elapsed().as_secs_f64());
                log.push(what);
                round += 1;
            }
            log
        })
    };

    let mut tasks = Vec::new();
    for (s, sidecar) in sidecars.iter().enumerate() {
        for c in 0..callers_per_sidecar {
            let mut client = WriterServiceClient::new(sidecar.channel().await);
            let (ns, tally, next) = (ns.clone(), tally.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut applied = vec![0u64; objects as usize];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= increments {
                        return applied;
                    }
                    let object = (i % objects) as usize;
                    let name = format!("hot-{object}");
                    let key = format!("soak-{s}-{c}-{i}");
                    loop {
                        let mut request = support::keyed_increment(&ns, &name, Some(key.clone()));
                        request.retry_policy = Some(pb::RetryPolicy {
                            max_attempts: 100,
                            ..Default::default()
                        });
                        let mut request = tonic::Request::new(request);
                        request.set_timeout(Duration::from_secs(5));
                        match client.update_with_retry(request).await {
                            Ok(response) => {
                                let result = response.into_inner().result.unwrap();
                                assert_eq!(result.outcome(), pb::Outcome::Updated);
                                if result.already_applied {
                                    tally.already_applied.fetch_add(1, Ordering::Relaxed);
                                }
                                tally.ok.fetch_add(1, Ordering::Relaxed);
                                applied[object] += 1;
                                break;
                            }
                            Err(status) => {
                                assert!(
                                    !matches!(
                                        status.code(),
                                        tonic::Code::InvalidArgument
                                            | tonic::Code::NotFound
                                            | tonic::Code::PermissionDenied
                                            | tonic::Code::FailedPrecondition
                                    ),
                                    "a final error no resend can fix: {status:?}"
                                );
                                let label = format!(
                                    "{:?}/{}",
                                    status.code(),
                                    support::error_reason(&status)
                                );
                                *tally.by_code.lock().unwrap().entry(label).or_default() += 1;
                                tally.resent.fetch_add(1, Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                }
            }));
        }
    }
    let progress = {
        let (tally, done) = (tally.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(10)).await;
                eprintln!(
                    "soak: {:>6.1}s {} OK",
                    started.elapsed().as_secs_f64(),
                    tally.ok.load(Ordering::Relaxed)
                );
            }
        })
    };
    let joined = tokio::time::timeout(limit, futures::future::join_all(tasks))
        .await
        .expect("the soak finished within its limit");
    done.store(true, Ordering::Relaxed);
    let chaos_log = chaos.await.unwrap();
    progress.abort();
    let took = started.elapsed();

    let mut intended = vec![0u64; objects as usize];
    for applied in joined {
        for (o, n) in applied.unwrap().into_iter().enumerate() {
            intended[o] += n;
        }
    }
    let mut finals = Vec::new();
    for o in 0..objects {
        let cm = api.get(&format!("hot-{o}")).await.unwrap();
        finals.push(cm.data.unwrap()["n"].parse::<u64>().unwrap());
    }
    let ok = tally.ok.load(Ordering::Relaxed);
    eprintln!(
        "soak: {increments} increments, 3 sidecars x {callers_per_sidecar} callers, {objects} objects, {:.0}s, {:.0} writes/s",
        took.as_secs_f64(),
        ok as f64 / took.as_secs_f64()
    );
    eprintln!(
        "soak: OK {ok}, of them already applied (found by key after a lost answer) {}, resent {}",
        tally.already_applied.load(Ordering::Relaxed),
        tally.resent.load(Ordering::Relaxed)
    );
    eprintln!(
        "soak: resends by code/reason: {:?}",
        tally.by_code.lock().unwrap()
    );
    eprintln!(
        "soak: faults: {} rounds ({:?}), proxy injected {}, committed-and-dropped {}",
        chaos_log.len(),
        chaos_log
            .iter()
            .fold(BTreeMap::<&str, u32>::new(), |mut m, w| {
                *m.entry(w).or_default() += 1;
                m
            }),
        proxy.count(|c| &c.injected),
        proxy.count(|c| &c.committed_and_dropped)
    );
    eprintln!("soak: final counts {finals:?}, intended {intended:?}");
    assert_eq!(ok, increments);
    assert_eq!(finals, intended, "every OK applied exactly once");
    for sidecar in &sidecars {
        let metrics = sidecar.metrics();
        let rss = std::fs::read_to_string(format!("/proc/{}/status", sidecar.pid()))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("VmHWM"))
            .unwrap_or_default()
            .to_string();
        eprintln!(
            "soak: sidecar {} peak RSS {rss}; breaker opened {} times",
            sidecar.pid(),
            metrics
                .lines()
                .filter(|l| l.starts_with("safewrite_breaker_transitions_total")
                    && l.contains("open\""))
                .map(|l| l.rsplit(' ').next().unwrap_or("0").to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
}
