//! Read your own writes against the real API server: an informer's cache, fed by a
//! watch, can still hold the object from before a controller's own write when the
//! controller reads it back; `Get` with the write's resourceVersion never does. It
//! answers from the sidecar's remembered copy when that copy is at or past the version
//! (no request), else with the API server's "not older than" read (a GET carrying
//! `resourceVersion=<min>`), which refuses a minimum its watch cache does not reach;
//! without a minimum (or with one that is not well formed) it reads live. The policy's
//! `get` operation governs it, and Secrets are refused by default.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prost::Message;
use serde_json::{Value, json};
use support::{ControlPlane, INCREMENT, Sidecar, error_reason};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::pb as rpc;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn target(ns: &str, kind: &str, name: &str) -> pb::ObjectRef {
    pb::ObjectRef {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

fn get(target: pb::ObjectRef, min: &str) -> pb::GetRequest {
    pb::GetRequest {
        target: Some(target),
        min_resource_version: min.into(),
    }
}

/// An informer-style cache: the object as a watch last delivered it, applied by a
/// consumer that runs behind (here: it has not yet applied the event of our write).
/// Reading the object back from it after the write shows the old state; `Get` with the
/// write's resourceVersion shows the write, from the remembered copy, without a request.
#[tokio::test]
async fn a_get_after_a_write_never_returns_the_state_before_it() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("get").await;
    let admin = cp.admin_kubeconfig().display().to_string();
    let sidecar = Sidecar::start(&["--kubeconfig", admin.as_str()]);
    let mut writer = WriterServiceClient::new(sidecar.channel().await);
    let kube = cp.admin_client().await;
    let api: Api<ConfigMap> = Api::namespaced(kube, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"n": "0"}})).unwrap();
    let cached = api.create(&PostParams::default(), &cm).await.unwrap();

    let written = writer
        .update_with_retry(pb::UpdateWithRetryRequest {
            target: Some(target(&ns, "ConfigMap", "c")),
            mutation: Some(pb::Mutation {
                kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                    expression: INCREMENT.into(),
                })),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    // The cache still holds what the watch delivered before the write: stale.
    assert_eq!(cached.data.as_ref().unwrap()["n"], "0");
    let got = writer
        .get(get(
            target(&ns, "ConfigMap", "c"),
            &written.resource_version,
        ))
        .await
        .unwrap()
        .into_inner();
    let object: Value = serde_json::from_str(&got.object_json).unwrap();
    assert_eq!(object["data"]["n"], "1", "the caller's own write");
    assert_eq!(got.resource_version, written.resource_version);
    assert!(got.remembered, "answered from the copy the write left");

    // Another writer moves the object on; a Get at our version may answer the copy (our
    // state or newer is the contract), and one without a minimum reads live.
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"n": "7"}})),
    )
    .await
    .unwrap();
    let live = writer
        .get(get(target(&ns, "ConfigMap", "c"), ""))
        .await
        .unwrap()
        .into_inner();
    assert!(!live.remembered);
    let object: Value = serde_json::from_str(&live.object_json).unwrap();
    assert_eq!(object["data"]["n"], "7");
    // Asking for that newer version: the copy (from the live read just made) has it.
    let newer = writer
        .get(get(target(&ns, "ConfigMap", "c"), &live.resource_version))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(newer.resource_version, live.resource_version);

    let missing = writer
        .get(get(target(&ns, "ConfigMap", "absent"), ""))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(error_reason(&missing), "NotFound");
    assert!(
        !missing.message().contains("create"),
        "{}",
        missing.message()
    );
    let secret = writer
        .get(get(target(&ns, "Secret", "s"), ""))
        .await
        .unwrap_err();
    assert_eq!(secret.code(), Code::PermissionDenied);
    assert_eq!(error_reason(&secret), "POLICY_DENIED");
    let bad = writer
        .get(get(target(&ns, "ConfigMap", "c"), "1 OR 1"))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
}

/// A policy that grants only writes does not grant reads: `get` is an operation of its
/// own.
#[tokio::test]
async fn get_is_an_operation_of_the_policy() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("getpolicy").await;
    let admin = cp.admin_kubeconfig().display().to_string();
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        admin.as_str(),
        "--allow",
        "core/ConfigMap:*:*:update",
    ]);
    let mut writer = WriterServiceClient::new(sidecar.channel().await);
    let denied = writer
        .get(get(target(&ns, "ConfigMap", "c"), ""))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(denied.message().contains("get"), "{}", denied.message());
}

/// The rich details of a refused Get: ErrorInfo, BadRequest, RetryInfo, WriteFailure.
#[derive(Default, Debug)]
struct Details {
    info: Option<rpc::ErrorInfo>,
    bad_request: Option<rpc::BadRequest>,
    retry: Option<rpc::RetryInfo>,
    failure: Option<pb::WriteFailure>,
}

fn details(status: &tonic::Status) -> Details {
    let decoded = rpc::Status::decode(status.details()).expect("google.rpc.Status details");
    let mut d = Details::default();
    for any in decoded.details {
        let value = any.value.as_slice();
        match any.type_url.rsplit('/').next().unwrap_or_default() {
            "google.rpc.ErrorInfo" => d.info = Some(Message::decode(value).unwrap()),
            "google.rpc.BadRequest" => d.bad_request = Some(Message::decode(value).unwrap()),
            "google.rpc.RetryInfo" => d.retry = Some(Message::decode(value).unwrap()),
            "safewrite.v1.WriteFailure" => d.failure = Some(Message::decode(value).unwrap()),
            other => panic!("unexpected detail {other}"),
        }
    }
    d
}

/// The GETs of objects the sidecar has sent to the API server so far, from its own
/// metrics (`safewrite_api_requests_total{verb="get"}`), whatever their answer.
fn gets_sent(sidecar: &Sidecar) -> f64 {
    sidecar
        .metrics()
        .lines()
        .filter(|l| l.starts_with("safewrite_api_requests_total{") && l.contains("verb=\"get\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A sidecar on the shared control plane, its client, and a namespace of its own.
async fn setup(
    prefix: &str,
) -> (
    Sidecar,
    WriterServiceClient<Channel>,
    Api<ConfigMap>,
    String,
) {
    let cp = ControlPlane::shared();
    let ns = cp.namespace(prefix).await;
    let admin = cp.admin_kubeconfig().display().to_string();
    // Readiness probes of the API server are GETs too: out of the way of the counts.
    let sidecar = Sidecar::start(&["--kubeconfig", admin.as_str(), "--readiness-interval", "1h"]);
    let writer = WriterServiceClient::new(sidecar.channel().await);
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    (sidecar, writer, api, ns)
}

/// Creates ConfigMap `name` with `{"n": "1"}` through the sidecar, which remembers the
/// object as its write answered it.
async fn written(
    writer: &mut WriterServiceClient<Channel>,
    ns: &str,
    name: &str,
) -> pb::WriteResult {
    let update = pb::UpdateWithRetryRequest {
        target: Some(target(ns, "ConfigMap", name)),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                expression: INCREMENT.into(),
            })),
        }),
        options: Some(pb::WriteOptions {
            create_if_missing_json: r#"{"data": {"n": "0"}}"#.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let result = writer.update_with_retry(update).await.unwrap().into_inner();
    result.result.unwrap()
}

/// A Get of `name` at least as new as `min`, with a call deadline of `timeout`.
fn get_within(
    ns: &str,
    name: &str,
    min: &str,
    timeout: Duration,
) -> tonic::Request<pb::GetRequest> {
    let mut request = tonic::Request::new(get(target(ns, "ConfigMap", name), min));
    request.set_timeout(timeout);
    request
}

/// A minimum far past anything the API server has written: its watch cache waits about
/// 3 s for it, then answers 504 with the cause ResourceVersionTooLarge. The sidecar
/// refuses (UNAVAILABLE, its own reason, RetryInfo with the server's delay), never
/// answers OK with the object as it is, and sends one request. A minimum past what the
/// server can represent (25 digits: it answers 500, the version does not parse) is
/// INVALID_ARGUMENT naming the field, at once.
#[tokio::test]
async fn a_minimum_the_api_server_has_not_reached_is_refused_never_answered() {
    let (sidecar, mut writer, _api, ns) = setup("getahead").await;
    let result = written(&mut writer, &ns, "c").await;
    let current: u64 = result.resource_version.parse().unwrap();
    let ahead = (current + 1_000_000).to_string();

    let before = gets_sent(&sidecar);
    let started = Instant::now();
    let refused = writer
        .get(get_within(&ns, "c", &ahead, Duration::from_secs(10)))
        .await
        .expect_err("a minimum the server has not reached is never answered OK");
    let took = started.elapsed();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(error_reason(&refused), "RESOURCE_VERSION_TOO_LARGE");
    let d = details(&refused);
    let failure = d.failure.expect("WriteFailure");
    assert_eq!(failure.reason, pb::Reason::ResourceVersionTooLarge as i32);
    assert_eq!(failure.attempt_records.len(), 1, "one request, not retried");
    assert_eq!(failure.attempt_records[0].http_status, 504);
    let delay = d.retry.expect("RetryInfo").retry_delay.expect("a delay");
    assert_eq!(
        (delay.seconds, delay.nanos),
        (1, 0),
        "the server's retryAfterSeconds"
    );
    assert!(
        refused.message().contains("Too large resource version"),
        "{}",
        refused.message()
    );
    assert_eq!(d.info.unwrap().metadata["http_status"], "504");
    // The server's own wait (about 3 s), and no retry past it.
    assert!(took >= Duration::from_millis(2500), "{took:?}");
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert_eq!(gets_sent(&sidecar) - before, 1.0);

    let past_u64 = "1234567890123456789012345";
    let started = Instant::now();
    let refused = writer
        .get(get_within(&ns, "c", past_u64, Duration::from_secs(10)))
        .await
        .expect_err("a minimum past what the server can represent is never answered OK");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert_eq!(error_reason(&refused), "INVALID_REQUEST");
    let d = details(&refused);
    let fields: Vec<_> = d
        .bad_request
        .unwrap()
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(fields, ["min_resource_version"]);
    assert!(d.retry.is_none(), "no wait reaches it");
    assert_eq!(d.failure.unwrap().attempt_records[0].http_status, 500);
    assert!(
        refused.message().contains("out of range"),
        "{}",
        refused.message()
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // Such refusals say nothing about the API server's health: more of them in a row
    // than the breaker's threshold (5) leave it closed for everyone else.
    for _ in 0..6 {
        let refused = writer
            .get(get_within(&ns, "c", past_u64, Duration::from_secs(10)))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument);
    }
    let live = writer.get(get(target(&ns, "ConfigMap", "c"), "")).await;
    assert!(live.is_ok(), "the breaker stayed closed: {live:?}");
    assert!(
        sidecar.metrics().contains("safewrite_breaker_state 0"),
        "closed"
    );
}

/// A caller whose deadline is shorter than the API server's wait gets DEADLINE_EXCEEDED
/// from the sidecar at its deadline, not an OK and not a late answer.
#[tokio::test]
async fn a_far_minimum_with_a_short_deadline_ends_at_the_deadline() {
    let (_sidecar, mut writer, _api, ns) = setup("getdeadline").await;
    let result = written(&mut writer, &ns, "c").await;
    let current: u64 = result.resource_version.parse().unwrap();
    let ahead = (current + 1_000_000).to_string();
    let started = Instant::now();
    let refused = writer
        .get(get_within(&ns, "c", &ahead, Duration::from_millis(1500)))
        .await
        .expect_err("never OK");
    let took = started.elapsed();
    assert_eq!(refused.code(), Code::DeadlineExceeded, "{refused:?}");
    assert_eq!(
        error_reason(&refused),
        "DEADLINE_EXCEEDED",
        "the sidecar's answer, with details"
    );
    assert!(
        took < Duration::from_millis(1500),
        "answered by the deadline: {took:?}"
    );
    assert!(took > Duration::from_millis(1000), "{took:?}");
}

/// A minimum at or below the remembered copy answers from it, without a request; one
/// newer than the copy that the API server has reached is answered by one "not older
/// than" read, with the object as of that version (another writer's change included);
/// one that is not well formed (leading zeros, "0") is never compared: a live read.
#[tokio::test]
async fn the_remembered_copy_the_not_older_than_read_and_the_live_read_each_answer_their_minimum() {
    let (sidecar, mut writer, api, ns) = setup("getmin").await;
    let result = written(&mut writer, &ns, "c").await;
    let ours = result.resource_version.clone();
    let before = gets_sent(&sidecar);
    let older = (ours.parse::<u64>().unwrap() - 1).to_string();
    for min in [ours.as_str(), older.as_str()] {
        let got = writer
            .get(get(target(&ns, "ConfigMap", "c"), min))
            .await
            .unwrap()
            .into_inner();
        assert!(got.remembered, "{min}");
        assert_eq!(got.resource_version, ours);
        let object: Value = serde_json::from_str(&got.object_json).unwrap();
        assert_eq!(object["data"]["n"], "1");
    }
    assert_eq!(
        gets_sent(&sidecar) - before,
        0.0,
        "no request for a copy new enough"
    );

    // Another object's write moves the cluster past our copy: the object has not
    // changed, and the not-older-than read says so (its own version is still ours).
    let other: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    let other = api.create(&PostParams::default(), &other).await.unwrap();
    let later = other.metadata.resource_version.unwrap();
    let before = gets_sent(&sidecar);
    let got = writer
        .get(get(target(&ns, "ConfigMap", "c"), &later))
        .await
        .unwrap()
        .into_inner();
    assert!(!got.remembered);
    assert_eq!(got.resource_version, ours, "unchanged since our write");
    assert_eq!(gets_sent(&sidecar) - before, 1.0, "one not-older-than read");

    // Another writer changes our object: asking for its version answers its change.
    let changed = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"n": "7"}})),
        )
        .await
        .unwrap();
    let theirs = changed.metadata.resource_version.unwrap();
    let got = writer
        .get(get(target(&ns, "ConfigMap", "c"), &theirs))
        .await
        .unwrap()
        .into_inner();
    assert!(!got.remembered);
    assert_eq!(got.resource_version, theirs);
    let object: Value = serde_json::from_str(&got.object_json).unwrap();
    assert_eq!(object["data"]["n"], "7", "the other writer's change");
    // ...and is remembered: the same minimum now answers without a request.
    let before = gets_sent(&sidecar);
    let again = writer
        .get(get(target(&ns, "ConfigMap", "c"), &theirs))
        .await
        .unwrap()
        .into_inner();
    assert!(again.remembered);
    assert_eq!(gets_sent(&sidecar) - before, 0.0);

    // Not well formed: never compared with the copy, read live (one request each), and
    // the API server is not asked for it (a leading zero would be read as a number).
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"n": "8"}})),
    )
    .await
    .unwrap();
    for min in [format!("0{theirs}"), "0".to_string(), "00".to_string()] {
        let before = gets_sent(&sidecar);
        let got = writer
            .get(get(target(&ns, "ConfigMap", "c"), &min))
            .await
            .unwrap()
            .into_inner();
        assert!(!got.remembered, "{min}");
        let object: Value = serde_json::from_str(&got.object_json).unwrap();
        assert_eq!(object["data"]["n"], "8", "{min}: the object as it is now");
        assert_eq!(gets_sent(&sidecar) - before, 1.0, "{min}");
    }
}
