//! The long linearizability run, by hand (`bash tests/linearizability.sh`, not part of
//! the test command): the workloads of `tests/integration/linearizability.rs` (1 and 3
//! sidecars, group commit on and off; counters, registers and sets written every way the
//! sidecar offers, status conditions and finalizers, with live reads between) for at
//! least 20 minutes and 200,000 operations, in rounds of fresh objects, each round with
//! one fault in turn: none, the fault proxy hanging, resetting requests before
//! forwarding them, dropping answers after the commit, answering 429 / 503 / slowly,
//! kube-apiserver stopped and started, etcd stopped and started. Then the Go checker
//! (porcupine) must find every history linearizable.
//!
//! Tunables: `LIN_SECS` (1200) and `LIN_OPS` (200000), both reached before it stops;
//! `LIN_ROUND_SECS` (40) per round; `LIN_WRITERS` per object (12), `LIN_LIST_WRITERS`
//! per conditions or finalizers object (6); `LIN_OBJECTS` per model and workload in each
//! round (1); `LIN_THINK_MS` (300), each writer's mean pause; `LIN_DEADLINE_SECS` (10)
//! per call; `LIN_LIMIT_SECS` (3600), past which it fails; `LIN_CHECK_TIMEOUT` (600s).
//! `SAFEWRITE_LINEARIZABILITY_BIN` runs another sidecar binary.

mod support;

use std::time::{Duration, Instant};

use support::faults::Fault;
use support::linearizability::{self, Cycle, Plan, Round, Step};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The rounds, `r` long each: one fault kind each, after a healthy lead.
fn rounds(r: Duration) -> Vec<Round> {
    let part = |f: f64| r.mul_f64(f);
    let proxy = |fault, every, writes_only| Step::Proxy {
        fault,
        every,
        writes_only,
        hold: part(0.25),
    };
    let around = |name, fault: Step| Round {
        name,
        steps: vec![Step::Healthy(part(0.25)), fault, Step::Healthy(part(0.5))],
    };
    vec![
        Round {
            name: "healthy",
            steps: vec![Step::Healthy(r)],
        },
        around("proxy hangs", proxy(Fault::Hang, 1, false)),
        around(
            "proxy resets every 3rd request before forwarding it",
            proxy(Fault::ResetBeforeForward, 3, false),
        ),
        around(
            "proxy drops every 4th write's answer after the commit",
            proxy(Fault::DropAnswer, 4, true),
        ),
        around(
            "kube-apiserver stopped and started",
            Step::StopApiServer(part(0.1)),
        ),
        around("etcd stopped and started", Step::StopEtcd(part(0.1))),
        Round {
            name: "proxy answers 429, 503, and slowly",
            steps: vec![
                Step::Healthy(part(0.1)),
                proxy(Fault::TooManyRequests, 7, false),
                Step::Healthy(part(0.05)),
                proxy(Fault::Unavailable, 5, false),
                Step::Healthy(part(0.05)),
                proxy(Fault::Latency(Duration::from_millis(300)), 4, false),
                Step::Healthy(part(0.05)),
            ],
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a run of many minutes: run it with tests/linearizability.sh"]
async fn long_histories_through_every_fault_are_linearizable() {
    let plan = Plan {
        workloads: Plan::four_workloads("long"),
        rounds: rounds(Duration::from_secs(env("LIN_ROUND_SECS", 40))),
        cycle: Some(Cycle {
            min_duration: Duration::from_secs(env("LIN_SECS", 1200)),
            min_operations: env("LIN_OPS", 200_000),
            limit: Duration::from_secs(env("LIN_LIMIT_SECS", 3600)),
        }),
        objects_per_model: env("LIN_OBJECTS", 1) as usize,
        writers_per_object: env("LIN_WRITERS", 12) as usize,
        writers_per_list: env("LIN_LIST_WRITERS", 6) as usize,
        think: Duration::from_millis(env("LIN_THINK_MS", 300)),
        deadline: Duration::from_secs(env("LIN_DEADLINE_SECS", 10)),
        sidecar_args: Vec::new(),
    };
    let checker = std::thread::spawn(linearizability::checker);
    let run = linearizability::run(&plan).await;
    run.print();
    run.assert_recorded();
    checker.join().expect("the checker builds");
    let timeout = std::env::var("LIN_CHECK_TIMEOUT").unwrap_or_else(|_| "600s".into());
    let started = Instant::now();
    let verdict = linearizability::check(&run.files(), &timeout);
    eprintln!(
        "linearizability: {} operations ({} writes left open), {:.0}s of calls, checked in {:.1}s: {}",
        run.operations(),
        run.unknowns(),
        run.took.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        if verdict.linearizable() {
            "linearizable"
        } else {
            "NOT linearizable"
        }
    );
    assert!(verdict.linearizable(), "{}", verdict.explain());
}
