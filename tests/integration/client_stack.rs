//! The API-server client stack against the real kube-apiserver: requests that wait for
//! the rate limit are never reported "outcome unknown", a thousand RPCs in flight share
//! one HTTP/2 connection (a capped pool without HTTP/2), and discovery notices a CRD that
//! changed under it without a restart.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use support::faults::{Fault, HttpFaultProxy};
use support::{ControlPlane, Sidecar, error_reason};
use tonic::Code;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn target(api_version: &str, kind: &str, ns: &str, name: &str) -> Option<pb::ObjectRef> {
    Some(pb::ObjectRef {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: ns.into(),
        name: name.into(),
    })
}

fn cel(expression: &str) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
            expression: expression.into(),
        })),
    })
}

/// Established TCP connections from process `pid` to 127.0.0.1:`port`, as `ss` sees them.
fn connections(pid: u32, port: u16) -> usize {
    let out = Command::new("ss")
        .args([
            "-tnpH",
            "state",
            "established",
            "dport",
            "=",
            &format!(":{port}"),
        ])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.contains(&format!("pid={pid},")))
        .count()
}

/// The sidecar's `safewrite_rpcs_in_flight`.
fn rpcs_in_flight(sidecar: &Sidecar) -> f64 {
    sidecar
        .metrics()
        .lines()
        .find_map(|l| l.strip_prefix("safewrite_rpcs_in_flight "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_default()
}

/// Starts 1,024 RPCs at once, holds every request at the proxy until all 1,024 are in
/// flight in the sidecar (however slowly a loaded machine starts them), and returns the
/// most connections the sidecar had open to the proxy meanwhile. Then lets them through:
/// every RPC is answered.
async fn connections_at_1024_in_flight(
    proxy: &HttpFaultProxy,
    sidecar: &Sidecar,
    ns: &str,
) -> usize {
    // Discovery first, so that every request held below is an RPC's read.
    let mut warm = WriterServiceClient::new(sidecar.channel().await);
    let missing = warm
        .update_with_retry(pb::UpdateWithRetryRequest {
            target: target("v1", "ConfigMap", ns, "absent"),
            mutation: cel("{}"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
    proxy.inject(Fault::Gate, 1, false);
    let before = proxy.count(|c| &c.requests);
    // 16 channels of 64 streams: past the sidecar's per-connection stream limit.
    let mut tasks = Vec::new();
    for i in 0..16 {
        let client = WriterServiceClient::new(sidecar.channel().await);
        for j in 0..64 {
            let mut client = client.clone();
            let request = pb::UpdateWithRetryRequest {
                // Each RPC its own object (writes to one object take turns), which does
                // not exist: one read per RPC, answered NOT_FOUND, no write.
                target: target("v1", "ConfigMap", ns, &format!("absent-{i}-{j}")),
                mutation: cel("{}"),
                ..Default::default()
            };
            tasks.push(tokio::spawn(async move {
                client.update_with_retry(request).await
            }));
        }
    }
    let (mut most, mut rpcs) = (0, 0.0f64);
    let started = Instant::now();
    let mut all_in_since = None::<Instant>;
    // Once all are in, a little longer: connections the pool would add come now.
    while started.elapsed() < Duration::from_secs(60)
        && all_in_since.is_none_or(|since| since.elapsed() < Duration::from_millis(500))
    {
        most = most.max(connections(sidecar.pid(), proxy.port));
        rpcs = rpcs.max(rpcs_in_flight(sidecar));
        if rpcs >= 1024.0 && all_in_since.is_none() {
            all_in_since = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = proxy.count(|c| &c.requests) - before;
    proxy.pass();
    let mut ok = 0;
    for task in tasks {
        let answer = task
            .await
            .expect("caller")
            .expect_err("a held read still answers, NOT_FOUND");
        assert_eq!(answer.code(), tonic::Code::NotFound, "{answer:?}");
        ok += 1;
    }
    let reached = proxy.count(|c| &c.requests) - before;
    eprintln!(
        "{rpcs} RPCs in flight at most, {held} requests held at the proxy, {reached} reached it in all, {ok} RPCs answered; at most {most} connections from the sidecar ({} accepted by the proxy in all)",
        proxy.count(|c| &c.connections)
    );
    assert!(rpcs >= 1024.0, "only {rpcs} RPCs were in flight at once");
    assert!(reached >= 1024, "only {reached} requests reached the proxy");
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_rpcs_in_flight_share_one_http2_connection() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("h2").await;
    let proxy = HttpFaultProxy::start(cp).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8"),
        "--request-timeout",
        "20s",
        // Every RPC its own request: the connections under 1,024 requests are the point.
        "--no-group-commit",
    ]);
    let most = connections_at_1024_in_flight(&proxy, &sidecar, &ns).await;
    assert_eq!(most, 1, "1,024 RPCs in flight over {most} connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_http2_a_thousand_rpcs_in_flight_use_a_capped_pool() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("h1").await;
    let proxy = HttpFaultProxy::start_http1(cp).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8"),
        "--request-timeout",
        "60s",
        "--no-group-commit",
    ]);
    // The first connection finds no HTTP/2; the sidecar says so and falls back.
    assert!(
        support::wait_until(Duration::from_secs(10), || sidecar
            .log()
            .contains("did not negotiate HTTP/2")),
        "no fallback logged:\n{}",
        sidecar.log()
    );
    let most = connections_at_1024_in_flight(&proxy, &sidecar, &ns).await;
    assert!(
        most <= safewrite_client::transport::MAX_HTTP1_CONNECTIONS,
        "1,024 RPCs in flight over {most} HTTP/1.1 connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_waiting_for_the_rate_limit_are_never_reported_unknown() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("qps1").await;
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().expect("utf-8"),
        "--qps",
        "1",
        "--burst",
        "1",
        "--request-timeout",
        "2s",
    ]);
    let client = WriterServiceClient::new(sidecar.channel().await);
    // Discovery first, so that every slot below is a create's read or write.
    let mut warm = client.clone();
    let mut request = tonic::Request::new(pb::UpdateWithRetryRequest {
        target: target("v1", "ConfigMap", &ns, "absent"),
        mutation: cel("{}"),
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(10));
    let missing = warm.update_with_retry(request).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");

    // Ten creates at once: a read and a write each, 20 slots at 1/s. With 15 s each,
    // about half fit; the rest must be refused before anything is written: by the rate
    // limit, or (a read whose slot came just before the deadline) with DEADLINE_EXCEEDED,
    // which says no write is in doubt. A write is never sent too late for its answer.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..10 {
        let mut client = client.clone();
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            let mut request = tonic::Request::new(pb::UpdateWithRetryRequest {
                target: target("v1", "ConfigMap", &ns, &format!("c{i}")),
                mutation: cel(r#"{"data": {"n": "1"}}"#),
                options: Some(pb::WriteOptions {
                    create_if_missing_json: json!({"data": {}}).to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            });
            request.set_timeout(Duration::from_secs(15));
            client.update_with_retry(request).await
        }));
    }
    let (mut ok, mut exhausted, mut unavailable, mut late) = (0, 0, 0, 0);
    for task in tasks {
        match task.await.expect("caller") {
            Ok(answer) => {
                let result = answer.into_inner().result.expect("result");
                assert_eq!(result.outcome, pb::Outcome::Created as i32);
                ok += 1;
            }
            Err(err) => match err.code() {
                Code::ResourceExhausted => {
                    assert_eq!(error_reason(&err), "RATE_LIMITED", "{err:?}");
                    exhausted += 1;
                }
                Code::Unavailable => {
                    assert_eq!(error_reason(&err), "CIRCUIT_OPEN", "{err:?}");
                    unavailable += 1;
                }
                Code::DeadlineExceeded => {
                    assert_eq!(error_reason(&err), "DEADLINE_EXCEEDED", "{err:?}");
                    late += 1;
                }
                _ => panic!("neither created nor refused before sending: {err:?}"),
            },
        }
    }
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let created = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .filter(|cm| {
            cm.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with('c'))
        })
        .count();
    eprintln!(
        "--qps 1 --burst 1 --request-timeout 2s, 10 creates with 15 s deadlines: {ok} OK, {exhausted} RESOURCE_EXHAUSTED, {unavailable} UNAVAILABLE, {late} DEADLINE_EXCEEDED, 0 UNKNOWN; {created} objects created, in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(ok + exhausted + unavailable + late, 10);
    assert!(ok >= 1, "no create fitted in 15 s at 1/s");
    assert_eq!(
        created, ok,
        "the API server has exactly the creates answered OK"
    );
}

const GROUP: &str = "stack.safewrite.dev";

/// A namespaced CRD `gizmos.stack.safewrite.dev` without a status subresource.
async fn install_crd_without_status(client: &kube::Client) -> Api<CustomResourceDefinition> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("gizmos.{GROUP}")},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": "gizmos", "kind": "Gizmo"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    }))
    .expect("crd");
    api.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    api
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_subresource_added_to_a_live_crd_is_used_without_a_restart() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("stale").await;
    let admin = cp.admin_client().await;
    let crds = install_crd_without_status(&admin).await;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Gizmo"), "gizmos");
    let gizmos: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &resource);
    let gizmo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Gizmo",
        "metadata": {"name": "g"}, "spec": {"size": 1}
    }))
    .expect("gizmo");
    // The CRD is served a moment after it is created.
    let mut created = false;
    for _ in 0..100 {
        if gizmos.create(&PostParams::default(), &gizmo).await.is_ok() {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(created, "the CRD was never served");

    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().expect("utf-8"),
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let patch_status = || pb::PatchStatusRequest {
        target: target(&format!("{GROUP}/v1"), "Gizmo", &ns, "g"),
        mutation: cel(r#"{"status": {"ready": true}}"#),
        ..Default::default()
    };
    let refused = client.patch_status(patch_status()).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("no status subresource"),
        "{refused:?}"
    );

    // The CRD gains a status subresource while the sidecar runs.
    crds.patch(
        &format!("gizmos.{GROUP}"),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"versions": [{
            "name": "v1", "served": true, "storage": true,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}}
        }]}})),
    )
    .await
    .expect("add the status subresource");
    let changed = Instant::now();
    let written = loop {
        match client.patch_status(patch_status()).await {
            Ok(answer) => break answer.into_inner(),
            Err(err) => {
                assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
                assert!(
                    changed.elapsed() < Duration::from_secs(15),
                    "PatchStatus still refused 15 s after the subresource was added: {err:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    eprintln!(
        "PatchStatus works {:?} after the status subresource was added, no restart",
        changed.elapsed()
    );
    let result = written.result.expect("result");
    assert_eq!(result.outcome, pb::Outcome::Updated as i32);
    let object = gizmos.get("g").await.expect("get");
    assert_eq!(object.data["status"]["ready"], json!(true));
    let _ = crds
        .delete(&format!("gizmos.{GROUP}"), &Default::default())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kind_is_remembered_for_a_few_seconds() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("unknown").await;
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        cp.admin_kubeconfig().to_str().expect("utf-8"),
    ]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let lists = |text: &str| -> f64 {
        text.lines()
            .filter(|l| {
                l.starts_with("safewrite_api_requests_total{") && l.contains("verb=\"discovery\"")
            })
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    };
    let request = || pb::UpdateWithRetryRequest {
        target: target("v1", "NoSuchKind", &ns, "x"),
        mutation: cel("{}"),
        ..Default::default()
    };
    let started = Instant::now();
    for _ in 0..20 {
        let err = client.update_with_retry(request()).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{err:?}");
        assert_eq!(error_reason(&err), "UNKNOWN_KIND", "{err:?}");
    }
    let asked = lists(&sidecar.metrics());
    let within = started.elapsed();
    eprintln!("20 calls for an unknown kind in {within:?}: {asked} discovery reads");
    assert!(
        within >= Duration::from_secs(3) || asked <= 1.0,
        "{asked} discovery reads for one unknown kind in {within:?}"
    );
    // After the few seconds, it is asked about again (a CRD may have been installed).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let _ = client.update_with_retry(request()).await.unwrap_err();
    assert_eq!(lists(&sidecar.metrics()), asked + 1.0);
}
