//! Leadership as a service against the real API server: callers campaign for one Lease
//! through one sidecar or through two; exactly one leads, its epoch and identity are on
//! the Lease as read back; closing its stream releases the Lease and the other leads
//! within a retry period under a higher epoch; a leader whose sidecar is cut off from the
//! API server is told it lost within the renew deadline, and the other takes over once
//! the Lease expired; bad input and a policy without `lead` are refused before anything
//! is sent. Timings: 2 s lease, 1.5 s renew deadline, 0.3 s retry period.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use support::faults::HttpFaultProxy;
use support::{ControlPlane, Sidecar};
use tonic::Code;
use tonic::Streaming;
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

const RETRY_PERIOD: Duration = Duration::from_millis(300);
const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
const LEASE_DURATION: Duration = Duration::from_secs(2);
/// Room for a round trip to the API server and the stream on a busy machine.
const SLACK: Duration = Duration::from_millis(700);

fn request(ns: &str, name: &str, identity: &str) -> pb::LeadRequest {
    pb::LeadRequest {
        namespace: ns.into(),
        name: name.into(),
        identity: identity.into(),
        lease_duration: Some(LEASE_DURATION.try_into().unwrap()),
        renew_deadline: Some(RENEW_DEADLINE.try_into().unwrap()),
        retry_period: Some(RETRY_PERIOD.try_into().unwrap()),
    }
}

async fn lead(channel: Channel, request: pb::LeadRequest) -> Streaming<pb::LeadResponse> {
    WriterServiceClient::new(channel)
        .lead(request)
        .await
        .expect("the campaign starts")
        .into_inner()
}

/// The next event, within `within`.
async fn next(stream: &mut Streaming<pb::LeadResponse>, within: Duration) -> pb::LeadResponse {
    tokio::time::timeout(within, stream.message())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
        .expect("an event")
}

/// The Lease's holder and epoch as the API server has them.
async fn read_back(cp: &ControlPlane, ns: &str, name: &str) -> (String, u64) {
    let leases: Api<Lease> = Api::namespaced(cp.admin_client().await, ns);
    let lease = leases.get(name).await.expect("the Lease exists");
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    let epoch = lease
        .metadata
        .annotations
        .and_then(|a| a.get("safewrite.dev/epoch").cloned())
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    (holder, epoch)
}

fn is_leading(event: &pb::LeadResponse) -> bool {
    event.state() == pb::LeadState::Leading
}

/// Two callers start at once; exactly one leads, the other is told who holds it; closing
/// the leader's stream hands the Lease over within a retry period, under a higher epoch.
async fn exactly_one_leads_and_a_closed_stream_hands_over(a: Channel, b: Channel, ns: &str) {
    let cp = ControlPlane::shared();
    let (mut first, mut second) =
        tokio::join!(lead(a, request(ns, "l", "")), lead(b, request(ns, "l", "")),);
    let within = RETRY_PERIOD * 2 + SLACK;
    let (one, two) = tokio::join!(next(&mut first, within), next(&mut second, within));
    assert_ne!(
        one.identity, two.identity,
        "each caller gets its own identity"
    );
    assert_eq!(
        is_leading(&one) as u8 + is_leading(&two) as u8,
        1,
        "{one:?} {two:?}"
    );
    let (mut leader, leading, mut follower, following) = if is_leading(&one) {
        (first, one, second, two)
    } else {
        (second, two, first, one)
    };
    assert_eq!(following.state(), pb::LeadState::NotLeading);
    assert_eq!(following.reason(), pb::NotLeadingReason::OtherHolder);
    assert_eq!(following.holder, leading.identity);
    assert_eq!(leading.holder, leading.identity);
    assert!(leading.epoch >= 1);
    assert_eq!(
        read_back(cp, ns, "l").await,
        (leading.identity.clone(), leading.epoch)
    );

    // Renewals go on: no event for a while, on either side.
    let quiet = tokio::time::timeout(LEASE_DURATION, async {
        tokio::select! {
            e = leader.message() => e,
            e = follower.message() => e,
        }
    });
    assert!(quiet.await.is_err(), "no event while the leader renews");

    let closed = Instant::now();
    drop(leader);
    let took_over = next(&mut follower, RETRY_PERIOD + SLACK).await;
    assert!(is_leading(&took_over), "{took_over:?}");
    assert!(
        took_over.epoch > leading.epoch,
        "{took_over:?} after {leading:?}"
    );
    assert!(
        closed.elapsed() <= RETRY_PERIOD + SLACK,
        "{:?}",
        closed.elapsed()
    );
    assert_eq!(
        read_back(cp, ns, "l").await,
        (took_over.identity, took_over.epoch)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_one_sidecar_exactly_one_caller_leads_and_a_closed_stream_hands_over() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("lead-one").await;
    let admin = cp.admin_kubeconfig().display().to_string();
    let sidecar = Sidecar::start(&["--kubeconfig", admin.as_str()]);
    let channel = sidecar.channel().await;
    exactly_one_leads_and_a_closed_stream_hands_over(channel.clone(), channel, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_two_sidecars_exactly_one_caller_leads_and_a_closed_stream_hands_over() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("lead-two").await;
    let admin = cp.admin_kubeconfig().display().to_string();
    let one = Sidecar::start(&["--kubeconfig", admin.as_str()]);
    let two = Sidecar::start(&["--kubeconfig", admin.as_str()]);
    let (a, b) = (one.channel().await, two.channel().await);
    exactly_one_leads_and_a_closed_stream_hands_over(a, b, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_loses_in_time_and_the_other_takes_over() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("lead-cut").await;
    let admin = cp.admin_kubeconfig().display().to_string();
    let proxy = HttpFaultProxy::start(cp).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let cut_off = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let direct = Sidecar::start(&["--kubeconfig", admin.as_str()]);

    let mut leader = lead(cut_off.channel().await, request(&ns, "l", "first")).await;
    let leading = next(&mut leader, RETRY_PERIOD + SLACK * 3).await;
    assert!(is_leading(&leading), "{leading:?}");
    let mut other = lead(direct.channel().await, request(&ns, "l", "second")).await;
    let waiting = next(&mut other, RETRY_PERIOD + SLACK).await;
    assert_eq!(
        waiting.reason(),
        pb::NotLeadingReason::OtherHolder,
        "{waiting:?}"
    );
    assert_eq!(waiting.holder, "first");

    proxy.hang();
    let cut = Instant::now();
    let lost = next(&mut leader, RENEW_DEADLINE + SLACK).await;
    assert_eq!(lost.state(), pb::LeadState::NotLeading, "{lost:?}");
    assert_eq!(lost.reason(), pb::NotLeadingReason::LostRenewal, "{lost:?}");
    assert!(
        cut.elapsed() <= RENEW_DEADLINE + SLACK,
        "{:?}",
        cut.elapsed()
    );
    let lost_at = cut.elapsed();

    let took_over = next(&mut other, LEASE_DURATION + RETRY_PERIOD * 2 + SLACK).await;
    let took_over_at = cut.elapsed();
    assert!(is_leading(&took_over), "{took_over:?}");
    assert_eq!(took_over.epoch, leading.epoch + 1);
    assert!(lost_at < took_over_at, "the old leader was told first");
    assert!(
        took_over_at <= LEASE_DURATION + RETRY_PERIOD * 2 + SLACK,
        "{took_over_at:?}"
    );
    assert_eq!(
        read_back(cp, &ns, "l").await,
        ("second".to_string(), took_over.epoch)
    );
}

/// The field the INVALID_ARGUMENT names.
fn violated_field(status: &tonic::Status) -> String {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let bad = status
        .get_details_bad_request()
        .expect("a BadRequest detail");
    bad.field_violations[0].field.clone()
}

#[tokio::test]
async fn bad_input_and_a_policy_without_lead_are_refused_before_anything_is_sent() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("lead-bad").await;
    let admin = cp.admin_kubeconfig().display().to_string();
    let sidecar = Sidecar::start(&["--kubeconfig", admin.as_str()]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let ms = |n: u64| Some(Duration::from_millis(n).try_into().unwrap());
    let cases = [
        (request("Not_A_Label", "l", ""), "namespace"),
        (request(&ns, "Has/Slash", ""), "name"),
        (request(&ns, "l", "has space"), "identity"),
        (
            pb::LeadRequest {
                renew_deadline: ms(2000),
                ..request(&ns, "l", "")
            },
            "lease_duration",
        ),
        (
            pb::LeadRequest {
                retry_period: ms(1300),
                ..request(&ns, "l", "")
            },
            "renew_deadline",
        ),
        (
            pb::LeadRequest {
                lease_duration: ms(2500),
                ..request(&ns, "l", "")
            },
            "lease_duration",
        ),
    ];
    for (bad, field) in cases {
        let status = client.lead(bad).await.map(|_| ()).unwrap_err();
        assert_eq!(violated_field(&status), field, "{status:?}");
    }
    let leases: Api<Lease> = Api::namespaced(cp.admin_client().await, &ns);
    assert!(
        leases.get_opt("l").await.unwrap().is_none(),
        "nothing was written"
    );

    let configmaps_only = Sidecar::start(&[
        "--kubeconfig",
        admin.as_str(),
        "--allow",
        "core/ConfigMap",
        "--allow",
        "coordination.k8s.io/Lease:other-ns:main:lead",
    ]);
    let mut denied = WriterServiceClient::new(configmaps_only.channel().await);
    let status = denied
        .lead(request(&ns, "l", ""))
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(support::error_reason(&status), "POLICY_DENIED");
    assert!(
        leases.get_opt("l").await.unwrap().is_none(),
        "nothing was written"
    );
}

/// A sidecar that drains releases its callers' Leases and ends their streams, saying so
/// last, instead of holding the drain until they close: the other caller leads within a
/// retry period, and the sidecar exits well before its grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_sidecar_releases_the_lease_and_ends_the_stream() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("lead-drain").await;
    let admin = cp.admin_kubeconfig().display().to_string();
    let mut draining = Sidecar::start(&["--kubeconfig", admin.as_str(), "--shutdown-grace", "20s"]);
    let staying = Sidecar::start(&["--kubeconfig", admin.as_str()]);
    let mut leader = lead(draining.channel().await, request(&ns, "l", "first")).await;
    let leading = next(&mut leader, RETRY_PERIOD + SLACK * 3).await;
    assert!(is_leading(&leading), "{leading:?}");
    let mut other = lead(staying.channel().await, request(&ns, "l", "second")).await;
    let waiting = next(&mut other, RETRY_PERIOD + SLACK).await;
    assert_eq!(waiting.holder, "first", "{waiting:?}");

    let signalled = Instant::now();
    let exited = tokio::task::spawn_blocking(move || {
        let status = draining.terminate(Duration::from_secs(10));
        (status, signalled.elapsed())
    });
    let released = next(&mut leader, RETRY_PERIOD + SLACK).await;
    assert_eq!(released.state(), pb::LeadState::NotLeading, "{released:?}");
    assert_eq!(
        released.reason(),
        pb::NotLeadingReason::Released,
        "{released:?}"
    );
    assert!(
        leader.message().await.expect("ends with OK").is_none(),
        "the stream ends"
    );
    let took_over = next(&mut other, RETRY_PERIOD + SLACK).await;
    assert!(is_leading(&took_over), "{took_over:?}");
    assert_eq!(took_over.epoch, leading.epoch + 1);
    let (status, took) = exited.await.unwrap();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(
        took < Duration::from_secs(10),
        "the drain did not wait for the stream: {took:?}"
    );
}

/// Two thousand callers open Lead streams at once and sit on them: the sidecar runs at
/// most --max-campaigns (here 16) campaigns, refuses the others at once with
/// RESOURCE_EXHAUSTED (OVERLOADED), keeps writing for other callers, and a place freed
/// by a closed stream is taken by the next Lead.
#[tokio::test(flavor = "multi_thread")]
async fn thousands_of_idle_lead_streams_are_capped_and_the_sidecar_serves_on() {
    const CALLERS: usize = 2000;
    const MAX: usize = 16;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("lead-idle").await;
    let kubeconfig = cp.admin_kubeconfig().display().to_string();
    let sidecar = Sidecar::start(&["--kubeconfig", &kubeconfig, "--max-campaigns", "16"]);
    // Client-go's default timings: an idle campaign reads its Lease every 2 s.
    let idle = |i: usize| pb::LeadRequest {
        namespace: ns.clone(),
        name: format!("idle-{}", i % 4),
        identity: format!("caller-{i}"),
        ..Default::default()
    };
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(sidecar.channel().await);
    }
    let started = Instant::now();
    let opened = futures::future::join_all((0..CALLERS).map(|i| {
        let mut client = WriterServiceClient::new(channels[i % 4].clone());
        let request = idle(i);
        async move { client.lead(request).await.map(tonic::Response::into_inner) }
    }))
    .await;
    let answered = started.elapsed();
    let (mut streams, mut refused) = (Vec::new(), Vec::new());
    let mut leases = std::collections::BTreeSet::new();
    for (i, result) in opened.into_iter().enumerate() {
        match result {
            Ok(stream) => {
                streams.push(stream);
                leases.insert(idle(i).name);
            }
            Err(status) => refused.push(status),
        }
    }
    assert_eq!(streams.len(), MAX, "campaigns started");
    assert_eq!(refused.len(), CALLERS - MAX);
    for status in &refused {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert_eq!(
            status.get_details_error_info().unwrap().reason,
            "OVERLOADED"
        );
        assert!(
            status.message().contains("--max-campaigns"),
            "{}",
            status.message()
        );
    }
    eprintln!("{CALLERS} Lead calls answered in {answered:?}: {MAX} campaigns, the rest refused");
    // Every campaign says where it stands: one leader per Lease.
    let mut leaders = 0;
    for stream in &mut streams {
        leaders += usize::from(is_leading(&next(stream, Duration::from_secs(20)).await));
    }
    assert_eq!(leaders, leases.len(), "one leader per Lease campaigned for");
    // Writes go on beside them.
    let mut writer = WriterServiceClient::new(sidecar.channel().await);
    let write = pb::UpdateWithRetryRequest {
        target: Some(pb::ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: ns.clone(),
            name: "beside".into(),
        }),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: r#"{"data": {"n": "1"}}"#.into(),
            })),
        }),
        options: Some(pb::WriteOptions {
            create_if_missing_json: r#"{"data": {}}"#.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let written = writer
        .update_with_retry(write)
        .await
        .expect("a write beside the campaigns");
    assert_eq!(
        written.into_inner().result.unwrap().outcome(),
        pb::Outcome::Created
    );
    // A closed stream frees its place: the next Lead starts a campaign.
    drop(streams.pop());
    let mut client = WriterServiceClient::new(channels[0].clone());
    let mut again = None;
    for _ in 0..100 {
        match client.lead(idle(CALLERS)).await {
            Ok(stream) => {
                again = Some(stream);
                break;
            }
            Err(status) => assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(again.is_some(), "a freed place is taken within 10 s");
}
