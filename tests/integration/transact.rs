//! The interactive Transact RPC against the real sidecar and API server: the caller's
//! own code as the mutation, with the same loop as UpdateWithRetry; abort, unchanged,
//! protocol errors, and callers that go away (no write after that point, nothing left
//! behind in the sidecar).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::{ControlPlane, Sidecar};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

use safewrite_api::pb;
use safewrite_api::pb::transact_proposal::Change as Proposed;
use safewrite_api::pb::transact_request::Message as Req;
use safewrite_api::pb::transact_response::Message as Resp;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn begin(ns: &str, name: &str, status: bool) -> pb::TransactRequest {
    pb::TransactRequest {
        message: Some(Req::Begin(pb::TransactBegin {
            target: Some(pb::ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: ns.into(),
                name: name.into(),
            }),
            status,
            ..Default::default()
        })),
    }
}

fn propose(attempt: u32, change: Proposed) -> pb::TransactRequest {
    pb::TransactRequest {
        message: Some(Req::Proposal(pb::TransactProposal {
            attempt,
            change: Some(change),
        })),
    }
}

/// Runs one transaction whose code is `f` (fresh object -> proposal) to its end.
async fn transact(
    client: &mut WriterServiceClient<Channel>,
    opening: pb::TransactRequest,
    mut f: impl FnMut(u32, Value) -> Proposed,
) -> Result<pb::WriteResult, tonic::Status> {
    let (tx, rx) = mpsc::channel(2);
    tx.send(opening).await.unwrap();
    let mut answers = client.transact(ReceiverStream::new(rx)).await?.into_inner();
    while let Some(answer) = answers.message().await? {
        match answer.message {
            Some(Resp::Fresh(fresh)) => {
                let object: Value = serde_json::from_str(&fresh.object_json).unwrap();
                let change = f(fresh.attempt, object);
                tx.send(propose(fresh.attempt, change)).await.unwrap();
            }
            Some(Resp::Result(result)) => return Ok(result),
            None => panic!("empty answer"),
        }
    }
    panic!("the stream ended without a result")
}

/// Opens a transaction and reads the fresh object it is offered first: the caller's half
/// of the stream and the sidecar's, for tests that then answer it wrongly or not at all.
async fn opened(
    client: &mut WriterServiceClient<Channel>,
    opening: pb::TransactRequest,
) -> (
    mpsc::Sender<pb::TransactRequest>,
    tonic::Streaming<pb::TransactResponse>,
) {
    let (tx, rx) = mpsc::channel(2);
    tx.send(opening).await.unwrap();
    let mut answers = client
        .transact(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let fresh = answers.message().await.unwrap().unwrap();
    assert!(matches!(fresh.message, Some(Resp::Fresh(_))));
    (tx, answers)
}

/// Opens a transaction and answers its first fresh object for the wrong attempt: the
/// status the transaction ends with.
async fn answer_the_wrong_attempt(
    client: &mut WriterServiceClient<Channel>,
    opening: pb::TransactRequest,
) -> tonic::Status {
    let (tx, mut answers) = opened(client, opening).await;
    tx.send(propose(9, Proposed::ObjectJson("{}".into())))
        .await
        .unwrap();
    answers.message().await.unwrap_err()
}

/// The caller's own read-dependent code: increment data.n.
fn increment(_: u32, mut object: Value) -> Proposed {
    let n: u64 = object["data"]["n"].as_str().unwrap().parse().unwrap();
    object["data"]["n"] = json!((n + 1).to_string());
    Proposed::ObjectJson(object.to_string())
}

async fn setup(prefix: &str) -> (Sidecar, String, Api<ConfigMap>) {
    let cp = ControlPlane::shared();
    let ns = cp.namespace(prefix).await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let sidecar = Sidecar::start(&["--kubeconfig", cp.admin_kubeconfig().to_str().unwrap()]);
    (sidecar, ns, api)
}

async fn make(api: &Api<ConfigMap>, name: &str) -> ConfigMap {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap()
}

async fn value(api: &Api<ConfigMap>, name: &str) -> u64 {
    api.get(name).await.unwrap().data.unwrap()["n"]
        .parse()
        .unwrap()
}

/// `callers` concurrent callers x `each` transactions incrementing one counter, spread
/// over `sidecars`; every answer's read-back value and attempt count.
async fn increments(
    sidecars: &[&Sidecar],
    ns: &str,
    callers: usize,
    each: usize,
) -> Vec<(u64, u32)> {
    let mut tasks = Vec::new();
    for i in 0..callers {
        let mut client = WriterServiceClient::new(sidecars[i % sidecars.len()].channel().await);
        let ns = ns.to_string();
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for _ in 0..each {
                let result = transact(&mut client, begin(&ns, "counter", false), increment)
                    .await
                    .expect("every transaction succeeds");
                assert_eq!(result.outcome(), pb::Outcome::Updated);
                let object: Value = serde_json::from_str(&result.object_json).unwrap();
                let n = object["data"]["n"].as_str().unwrap().parse().unwrap();
                answers.push((n, result.attempts));
            }
            answers
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.extend(t.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_from_one_sidecar_are_committed_together_and_lose_no_update() {
    let (sidecar, ns, api) = setup("tx-lost-update").await;
    make(&api, "counter").await;
    let answers = increments(&[&sidecar], &ns, 8, 25).await;
    assert_eq!(value(&api, "counter").await, 200);
    let mut told: Vec<u64> = answers.iter().map(|(n, _)| *n).collect();
    told.sort_unstable();
    assert_eq!(
        told,
        (1..=200).collect::<Vec<_>>(),
        "each caller is told its own"
    );
    // They are committed together, each offered the object as the ones before it left
    // it: no transaction met a conflict.
    let retried: Vec<_> = answers
        .iter()
        .filter(|(_, attempts)| *attempts > 1)
        .collect();
    assert!(
        retried.is_empty(),
        "transactions that went again: {retried:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_from_two_sidecars_conflict_and_lose_no_update() {
    let (sidecar, ns, api) = setup("tx-two-sidecars").await;
    let cp = ControlPlane::shared();
    let other = Sidecar::start(&["--kubeconfig", cp.admin_kubeconfig().to_str().unwrap()]);
    make(&api, "counter").await;
    // Each sidecar orders its own callers; the two meet in conflicts, re-read and
    // offer the object again.
    let answers = increments(&[&sidecar, &other], &ns, 8, 25).await;
    assert_eq!(value(&api, "counter").await, 200);
    let mut told: Vec<u64> = answers.iter().map(|(n, _)| *n).collect();
    told.sort_unstable();
    assert_eq!(
        told,
        (1..=200).collect::<Vec<_>>(),
        "each caller is told its own"
    );
}

#[tokio::test]
async fn abort_unchanged_and_mutation_proposals() {
    let (sidecar, ns, api) = setup("tx-outcomes").await;
    let before = make(&api, "c").await;
    let mut client = WriterServiceClient::new(sidecar.channel().await);

    let r = transact(&mut client, begin(&ns, "c", false), |_, _| {
        Proposed::Abort(pb::TransactAbort {
            reason: "not today".into(),
        })
    })
    .await
    .unwrap();
    assert_eq!(r.outcome(), pb::Outcome::Aborted);
    let r = transact(&mut client, begin(&ns, "c", false), |_, fresh| {
        Proposed::ObjectJson(fresh.to_string())
    })
    .await
    .unwrap();
    assert_eq!(r.outcome(), pb::Outcome::Unchanged);
    let now = api.get("c").await.unwrap();
    assert_eq!(
        now.metadata.resource_version,
        before.metadata.resource_version
    );

    let r = transact(&mut client, begin(&ns, "c", false), |_, _| {
        Proposed::Mutation(pb::Mutation {
            kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: r#"{"data": {"n": "7"}}"#.into(),
            })),
        })
    })
    .await
    .unwrap();
    assert_eq!(r.outcome(), pb::Outcome::Updated);
    assert_eq!(value(&api, "c").await, 7);
}

#[tokio::test]
async fn protocol_errors_write_nothing() {
    let (sidecar, ns, api) = setup("tx-errors").await;
    let before = make(&api, "e").await;
    let mut client = WriterServiceClient::new(sidecar.channel().await);

    // A proposal for the wrong attempt.
    let err = answer_the_wrong_attempt(&mut client, begin(&ns, "e", false)).await;
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("proposal.attempt"), "{err:?}");

    // Garbage instead of an object.
    let err = transact(&mut client, begin(&ns, "e", false), |_, _| {
        Proposed::ObjectJson("{not json".into())
    })
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("proposal.object_json"), "{err:?}");

    // A stream that opens with a proposal.
    let err = transact(
        &mut client,
        propose(1, Proposed::ObjectJson("{}".into())),
        increment,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // The status subresource of a kind without one.
    let err = transact(&mut client, begin(&ns, "e", true), increment)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let now = api.get("e").await.unwrap();
    assert_eq!(
        now.metadata.resource_version,
        before.metadata.resource_version
    );
}

fn proc_count(pid: u32, what: &str) -> u64 {
    match what {
        "fds" => std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count() as u64,
        field => std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_transactions_write_nothing_and_leave_nothing_behind() {
    let (sidecar, ns, api) = setup("tx-abandoned").await;
    let before = make(&api, "a").await;
    let channel = sidecar.channel().await;
    let mut client = WriterServiceClient::new(channel.clone());
    // Warm up at the same concurrency as below, so that the baseline already holds
    // discovery and a connection pool sized for 10 concurrent requests.
    let mut warm = Vec::new();
    for _ in 0..10 {
        let mut client = WriterServiceClient::new(channel.clone());
        let ns = ns.clone();
        warm.push(tokio::spawn(async move {
            for _ in 0..10 {
                transact(&mut client, begin(&ns, "a", false), |_, f| {
                    Proposed::ObjectJson(f.to_string())
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in warm {
        t.await.unwrap();
    }
    let pid = sidecar.pid();
    let (rss0, fds0, threads0) = (
        proc_count(pid, "VmRSS:"),
        proc_count(pid, "fds"),
        proc_count(pid, "Threads:"),
    );

    let mut tasks = Vec::new();
    for w in 0..10 {
        let mut client = WriterServiceClient::new(channel.clone());
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..100 {
                let (tx, mut answers) = opened(&mut client, begin(&ns, "a", false)).await;
                if (w + i) % 2 == 0 {
                    // Walk away: drop both halves without answering.
                    drop(answers);
                    drop(tx);
                } else {
                    // Close our side without answering.
                    drop(tx);
                    let err = answers.message().await.unwrap_err();
                    assert_eq!(err.code(), Code::Cancelled, "{err:?}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss1, fds1, threads1) = (
        proc_count(pid, "VmRSS:"),
        proc_count(pid, "fds"),
        proc_count(pid, "Threads:"),
    );
    eprintln!(
        "1000 abandoned transactions: RSS {rss0} -> {rss1} KiB, fds {fds0} -> {fds1}, threads {threads0} -> {threads1}"
    );
    assert!(rss1 < rss0 + 8 * 1024, "RSS grew by {} KiB", rss1 - rss0);
    assert!(fds1 <= fds0 + 2, "fds grew {fds0} -> {fds1}");
    assert!(
        threads1 <= threads0 + 4,
        "threads grew {threads0} -> {threads1}"
    );
    let now = api.get("a").await.unwrap();
    assert_eq!(
        now.metadata.resource_version, before.metadata.resource_version,
        "an abandoned transaction wrote"
    );
    // And the sidecar still serves.
    let r = transact(&mut client, begin(&ns, "a", false), increment)
        .await
        .unwrap();
    assert_eq!(r.outcome(), pb::Outcome::Updated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_caller_holds_the_others_no_longer_than_the_idle_timeout() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("tx-stall").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().unwrap(),
        "--transact-idle-timeout",
        "1s",
    ]);
    make(&api, "counter").await;
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    // The stalled caller: begins, is offered the object, never answers.
    let (tx, mut stalled) = opened(&mut client, begin(&ns, "counter", false)).await;
    // The next caller waits in the queue, then goes once the stalled one has ended.
    let result = transact(&mut client, begin(&ns, "counter", false), increment)
        .await
        .expect("the next caller is written once the stalled one has ended");
    assert_eq!(result.outcome(), pb::Outcome::Updated);
    let err = stalled.message().await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert_eq!(support::error_reason(&err), "TRANSACTION_IDLE");
    assert_eq!(value(&api, "counter").await, 1);
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_error_on_a_stale_copy_ends_the_transaction() {
    let (sidecar, ns, api) = setup("tx-stale-error").await;
    make(&api, "s").await;
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    // The sidecar remembers the object as it wrote it; another writer then changes it.
    transact(&mut client, begin(&ns, "s", false), increment)
        .await
        .unwrap();
    let mut cm = api.get("s").await.unwrap();
    cm.data.as_mut().unwrap().insert("n".into(), "10".into());
    api.replace("s", &PostParams::default(), &cm).await.unwrap();

    // Offered the stale copy, the caller answers the wrong attempt: that ends it. It is
    // not offered the live object again, and nothing more is written.
    let err = answer_the_wrong_attempt(&mut client, begin(&ns, "s", false)).await;
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(value(&api, "s").await, 10);
}
