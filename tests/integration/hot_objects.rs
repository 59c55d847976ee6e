//! One hot object written through several sidecars (three controllers, each with its
//! own sidecar), against the real API server: each sidecar group-commits its own
//! callers, the sidecars' batches conflict with each other, and still every increment
//! is applied exactly once and every caller is told its own serial result: the numbers
//! told are all different, together they are exactly 1..=N, each caller's grow, and the
//! object each answer carries is the one its own write left. The object is hot for
//! each sidecar (its writes met conflicts), so a batch that lost a conflict goes again
//! after a short pause, never the exponential backoff (src/engine/hot.rs).

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use safewrite::pb;
use safewrite::pb::writer_service_client::WriterServiceClient;
use serde_json::json;
use support::{ControlPlane, Sidecar, keyed_increment};

const SIDECARS: usize = 3;
const WRITERS: usize = 8;
const EACH: u64 = 15;
/// The longest pause after a conflict on a hot object: `MAX_PACE × MAX_STREAK` of
/// src/engine/hot.rs (the exponential backoff reaches 1 s).
const MOST_AFTER_CONFLICT: Duration = Duration::from_millis(80);

/// What one caller was told: the counter after its increment, and that write's
/// resourceVersion, in the order of its calls.
type Told = Vec<(u64, String)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_sidecars_on_one_counter_answer_each_increment_serially() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("hot").await;
    let admin = cp.admin_kubeconfig().display().to_string();
    let sidecars: Vec<Sidecar> = (0..SIDECARS)
        .map(|_| Sidecar::start(&["--kubeconfig", admin.as_str()]))
        .collect();
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "hot"}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();

    let mut callers = Vec::new();
    for sidecar in &sidecars {
        let channel = sidecar.channel().await;
        for _ in 0..WRITERS {
            let mut writer = WriterServiceClient::new(channel.clone());
            let ns = ns.clone();
            callers.push(tokio::spawn(async move {
                let mut told: Told = Vec::new();
                let (mut batched, mut conflicts) = (0u32, 0u32);
                for _ in 0..EACH {
                    let mut request = tonic::Request::new(pb::UpdateWithRetryRequest {
                        retry_policy: Some(pb::RetryPolicy {
                            max_attempts: 1000,
                            ..Default::default()
                        }),
                        ..keyed_increment(&ns, "hot", None)
                    });
                    request.set_timeout(Duration::from_secs(60));
                    let result = writer
                        .update_with_retry(request)
                        .await
                        .expect("an increment")
                        .into_inner()
                        .result
                        .expect("a result");
                    assert_eq!(result.outcome(), pb::Outcome::Updated);
                    let object: serde_json::Value =
                        serde_json::from_str(&result.object_json).unwrap();
                    let n: u64 = object["data"]["n"].as_str().unwrap().parse().unwrap();
                    let version = object["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    assert_eq!(version, result.resource_version, "the answer's object");
                    batched += result
                        .attempt_records
                        .last()
                        .is_some_and(|r| r.batch_size > 1) as u32;
                    for record in &result.attempt_records {
                        if record.http_status == 409 && record.reason == "Conflict" {
                            conflicts += 1;
                            let slept = record.backoff.unwrap_or_default();
                            let slept = Duration::new(slept.seconds as u64, slept.nanos as u32);
                            assert!(
                                slept <= MOST_AFTER_CONFLICT,
                                "a conflict on the hot object was followed by {slept:?}: {record:?}"
                            );
                        }
                    }
                    told.push((n, version));
                }
                (told, batched, conflicts)
            }));
        }
    }
    let (mut all, mut batched, mut conflicts) = (Vec::new(), 0, 0);
    for caller in callers {
        let (told, b, c) = caller.await.expect("a caller");
        conflicts += c;
        // A caller's next call starts after its last was answered: it must see more.
        assert!(
            told.windows(2).all(|w| w[0].0 < w[1].0),
            "one caller's numbers went back: {told:?}"
        );
        all.extend(told);
        batched += b;
    }
    let total = SIDECARS as u64 * WRITERS as u64 * EACH;
    let numbers: BTreeSet<u64> = all.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        numbers,
        (1..=total).collect::<BTreeSet<u64>>(),
        "the numbers told are not exactly 1..={total}, one each"
    );
    let live = api.get("hot").await.unwrap();
    assert_eq!(live.data.unwrap()["n"], total.to_string(), "the counter");
    // The sidecars' batches did meet each other's writes (else this showed nothing).
    assert!(conflicts > 0, "no write met a conflict");
    // Those told the same resourceVersion shared a write: group commit did its part.
    let versions: BTreeSet<&str> = all.iter().map(|(_, v)| v.as_str()).collect();
    assert!(
        versions.len() < all.len() && batched > 0,
        "no two increments shared a write ({} versions for {} increments)",
        versions.len(),
        all.len()
    );
}
