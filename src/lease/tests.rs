//! The campaign in paused time against an in-process fake Lease API under the real
//! client stack, with its rate limit saturated and its breaker opened by a write's fault
//! (Lease traffic must pass both): acquire, renew, wait out another holder, take an expired Lease, re-acquire,
//! lose renewals past the renew deadline, release when the caller goes away. The same
//! behaviours against the real API server are in `tests/integration/lead.rs`.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use safewrite_api::deadline::AnswerBy;
use safewrite_client::breaker::BreakerConfig;
use safewrite_client::timeout::Handoff;
use safewrite_client::{ClientMetrics, StackConfig, apiserver, over};

use super::*;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/l";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

#[derive(Default)]
struct Store {
    lease: Option<Value>,
    version: u64,
    /// Every request is read and never answered while set.
    hang: bool,
    /// "METHOD code" of every request.
    log: Vec<String>,
}

/// A Lease API server for one Lease, `default/l`, with optimistic concurrency.
#[derive(Clone, Default)]
struct FakeLeases(Arc<Mutex<Store>>);

type Response = http::Response<Full<Bytes>>;

// === impl FakeLeases ===

impl FakeLeases {
    /// Another candidate's write, straight to the store.
    fn outside(&self, holder: &str, epoch: u64, seconds: u64) {
        let mut store = self.0.lock().unwrap();
        store.version += 1;
        store.lease = Some(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default",
                         "resourceVersion": store.version.to_string(),
                         "annotations": {EPOCH_ANNOTATION: epoch.to_string()}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds}
        }));
    }

    fn lease(&self) -> Value {
        self.0.lock().unwrap().lease.clone().unwrap_or_default()
    }

    fn hang(&self, hang: bool) {
        self.0.lock().unwrap().hang = hang;
    }

    fn log(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap().log)
    }

    async fn serve(
        &self,
        request: http::Request<Handoff<kube::client::Body>>,
    ) -> Result<Response, tower::BoxError> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await?.to_bytes();
        if self.0.lock().unwrap().hang {
            return std::future::pending().await;
        }
        let path = parts.uri.path();
        if path == "/fault" {
            return Ok(answer(503, json!({"kind": "Status", "code": 503})));
        }
        let creating = parts.method == http::Method::POST;
        assert!(
            path == if creating { LEASES } else { LEASE },
            "a request to {path}"
        );
        let mut store = self.0.lock().unwrap();
        let answer = match (parts.method.as_str(), &store.lease) {
            ("GET", Some(lease)) => answer(200, lease.clone()),
            ("GET" | "PUT", None) => answer(404, json!({"kind": "Status", "code": 404})),
            ("POST", Some(_)) => answer(409, json!({"kind": "Status", "reason": "AlreadyExists"})),
            ("PUT", Some(lease))
                if lease["metadata"]["resourceVersion"]
                    != json!(record::resource_version(&serde_json::from_slice::<Value>(
                        &body
                    )?)) =>
            {
                answer(409, json!({"kind": "Status", "reason": "Conflict"}))
            }
            _ => {
                let mut lease: Value = serde_json::from_slice(&body)?;
                store.version += 1;
                lease["metadata"]["resourceVersion"] = json!(store.version.to_string());
                store.lease = Some(lease.clone());
                answer(if creating { 201 } else { 200 }, lease)
            }
        };
        store
            .log
            .push(format!("{} {}", parts.method, answer.status().as_u16()));
        Ok(answer)
    }
}

fn answer(code: u16, body: Value) -> Response {
    http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// 2 s lease, 1.5 s renew deadline, 0.3 s retry period.
fn timings() -> LeaseTimings {
    LeaseTimings::new(
        Some(Duration::from_secs(2)),
        Some(Duration::from_millis(1500)),
        Some(Duration::from_millis(300)),
    )
    .unwrap()
}

/// A campaign by `identity` over `fake` until `stop`, under a client stack whose rate
/// limit allows one request a second, already taken, and whose breaker was opened by a
/// write's fault (its cool-down is ten minutes): Lease traffic must pass both.
async fn campaign_until(
    fake: &FakeLeases,
    identity: &str,
    stop: impl Future<Output = ()> + Send + 'static,
) -> (mpsc::Receiver<LeaseEvent>, tokio::task::JoinHandle<()>) {
    let connection = {
        let fake = fake.clone();
        tower::service_fn(move |request| {
            let fake = fake.clone();
            async move { fake.serve(request).await }
        })
    };
    let settings = StackConfig {
        qps: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(1).unwrap(),
        server_paces: false,
        breaker: BreakerConfig {
            failures: 1,
            cooldown: Duration::from_secs(600),
            max_cooldown: Duration::from_secs(600),
        },
        request_timeout: Duration::from_secs(10),
    };
    let client = over(connection, settings, ClientMetrics::default(), "default");
    // A write's fault: it takes the limiter's one slot and opens the breaker.
    let write = http::Request::put("/fault").body(Vec::new()).unwrap();
    let answer = apiserver::send(&client, write, None, AnswerBy::NONE)
        .await
        .unwrap();
    assert_eq!(answer.code, 503);
    fake.log();
    let lease = LeaseName::parse("default", "l").unwrap();
    let campaign = Campaign::new(client, lease, identity.to_string(), timings());
    let (events, received) = mpsc::channel(8);
    (received, tokio::spawn(campaign.run(events, stop)))
}

/// A campaign that runs until its receiver is dropped.
async fn campaign(
    fake: &FakeLeases,
    identity: &str,
) -> (mpsc::Receiver<LeaseEvent>, tokio::task::JoinHandle<()>) {
    campaign_until(fake, identity, std::future::pending()).await
}

async fn next(events: &mut mpsc::Receiver<LeaseEvent>) -> (LeaseEvent, Duration) {
    let started = Instant::now();
    let event = events.recv().await.expect("the campaign goes on");
    (event, started.elapsed())
}

fn other_holder(holder: &str) -> LeaseEvent {
    LeaseEvent::NotLeading {
        reason: NotLeading::OtherHolder,
        holder: holder.into(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_free_lease_is_acquired_under_epoch_1_and_renewed_every_retry_period() {
    let fake = FakeLeases::default();
    let (mut events, _task) = campaign(&fake, "a").await;
    assert_eq!(next(&mut events).await.0, LeaseEvent::Leading { epoch: 1 });
    assert_eq!(fake.log(), ["GET 404", "POST 201"]);
    let acquired = fake.lease();
    assert_eq!(
        (record::holder(&acquired), record::epoch(&acquired)),
        ("a", 1)
    );
    tokio::time::sleep(Duration::from_millis(3100)).await;
    // Ten renewals (one each 0.3 s), none held back by the limiter (one a minute) or the breaker.
    assert_eq!(fake.log().len(), 20);
    assert_eq!(record::epoch(&fake.lease()), 1, "renewals keep the epoch");
    assert_ne!(
        fake.lease()["spec"]["renewTime"],
        acquired["spec"]["renewTime"]
    );
    assert!(events.try_recv().is_err(), "a renewal is no event");
}

#[tokio::test(start_paused = true)]
async fn another_holders_lease_is_waited_out_then_taken_with_the_next_epoch() {
    let fake = FakeLeases::default();
    fake.outside("b", 6, 2);
    let (mut events, _task) = campaign(&fake, "a").await;
    assert_eq!(next(&mut events).await.0, other_holder("b"));
    let (event, waited) = next(&mut events).await;
    assert_eq!(event, LeaseEvent::Leading { epoch: 7 });
    // Expired 2 s after this campaign first saw it, taken at the next try after that.
    assert!(waited >= Duration::from_millis(2000), "{waited:?}");
    assert!(waited <= Duration::from_millis(2300), "{waited:?}");
    let taken = fake.lease();
    assert_eq!((record::holder(&taken), record::epoch(&taken)), ("a", 7));
    assert_eq!(taken["spec"]["leaseTransitions"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_holder_that_keeps_renewing_is_never_taken_over() {
    let fake = FakeLeases::default();
    fake.outside("b", 1, 2);
    let (mut events, _task) = campaign(&fake, "a").await;
    assert_eq!(next(&mut events).await.0, other_holder("b"));
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        fake.outside("b", 1, 2);
    }
    assert!(events.try_recv().is_err());
    assert_eq!(record::holder(&fake.lease()), "b");
}

#[tokio::test(start_paused = true)]
async fn losing_renewals_past_the_renew_deadline_ends_leadership_then_reacquiring_increments() {
    let fake = FakeLeases::default();
    let (mut events, _task) = campaign(&fake, "a").await;
    assert_eq!(next(&mut events).await.0, LeaseEvent::Leading { epoch: 1 });
    fake.hang(true);
    let (event, took) = next(&mut events).await;
    let lost = LeaseEvent::NotLeading {
        reason: NotLeading::LostRenewal,
        holder: "a".into(),
    };
    assert_eq!(event, lost);
    assert!(
        took <= Duration::from_millis(1500),
        "within the renew deadline: {took:?}"
    );
    fake.hang(false);
    // The Lease is still this campaign's: it takes it again at once, as a new epoch.
    assert_eq!(next(&mut events).await.0, LeaseEvent::Leading { epoch: 2 });
    assert_eq!(record::epoch(&fake.lease()), 2);
}

#[tokio::test(start_paused = true)]
async fn a_lease_held_under_its_own_identity_by_another_campaign_is_waited_out() {
    let fake = FakeLeases::default();
    fake.outside("a", 3, 2);
    let (mut events, _task) = campaign(&fake, "a").await;
    assert_eq!(next(&mut events).await.0, other_holder("a"));
    let (event, waited) = next(&mut events).await;
    assert_eq!(
        event,
        LeaseEvent::Leading { epoch: 4 },
        "re-acquisition increments"
    );
    assert!(waited >= Duration::from_millis(1700), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn another_holder_taking_the_lease_ends_leadership() {
    let fake = FakeLeases::default();
    let (mut events, _task) = campaign(&fake, "a").await;
    assert_eq!(next(&mut events).await.0, LeaseEvent::Leading { epoch: 1 });
    fake.outside("b", 2, 2);
    assert_eq!(next(&mut events).await.0, other_holder("b"));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_receiver_releases_the_lease_at_once() {
    let fake = FakeLeases::default();
    let (mut events, task) = campaign(&fake, "a").await;
    assert_eq!(next(&mut events).await.0, LeaseEvent::Leading { epoch: 1 });
    tokio::time::sleep(Duration::from_millis(100)).await;
    fake.log();
    let dropped = Instant::now();
    drop(events);
    task.await.unwrap();
    assert!(dropped.elapsed().is_zero(), "no wait for the retry period");
    assert_eq!(fake.log(), ["PUT 200"]);
    let released = fake.lease();
    assert_eq!(record::holder(&released), "");
    assert_eq!(record::lease_seconds(&released), Some(1));
    assert_eq!(record::epoch(&released), 1, "the epoch stays");

    // The next candidate takes it at its first try, with the next epoch.
    let (mut next_events, _task) = campaign(&fake, "b").await;
    assert_eq!(
        next(&mut next_events).await.0,
        LeaseEvent::Leading { epoch: 2 }
    );
}

#[tokio::test(start_paused = true)]
async fn a_campaign_that_does_not_hold_the_lease_releases_nothing() {
    let fake = FakeLeases::default();
    fake.outside("b", 1, 2);
    let (mut events, task) = campaign(&fake, "a").await;
    assert_eq!(next(&mut events).await.0, other_holder("b"));
    drop(events);
    task.await.unwrap();
    assert_eq!(record::holder(&fake.lease()), "b");
    assert!(!fake.log().iter().any(|l| l.starts_with("PUT")));
}

#[tokio::test(start_paused = true)]
async fn a_sidecar_shutting_down_releases_and_says_so_last() {
    let fake = FakeLeases::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let until = async move {
        let _ = stopped.await;
    };
    let (mut events, task) = campaign_until(&fake, "a", until).await;
    assert_eq!(next(&mut events).await.0, LeaseEvent::Leading { epoch: 1 });
    stop.send(()).unwrap();
    let released = LeaseEvent::NotLeading {
        reason: NotLeading::Released,
        holder: String::new(),
    };
    assert_eq!(next(&mut events).await.0, released);
    assert!(events.recv().await.is_none(), "and the stream ends");
    task.await.unwrap();
    assert_eq!(record::holder(&fake.lease()), "");
}
