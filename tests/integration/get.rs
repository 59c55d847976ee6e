//! Read your own writes against the real API server: an informer's cache, fed by a
//! watch, can still hold the object from before a controller's own write when the
//! controller reads it back; `Get` with the write's resourceVersion never does. It
//! answers from the sidecar's remembered copy when that copy is at or past the version
//! (no request), and from a live read otherwise; the policy's `get` operation governs
//! it, and Secrets are refused by default.

use crate::support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use safewrite::pb;
use safewrite::pb::writer_service_client::WriterServiceClient;
use serde_json::{Value, json};
use support::{ControlPlane, INCREMENT, Sidecar, error_reason};
use tonic::Code;

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

    // A version past the object's own (another object's later write): the object as it
    // is now is at least that new, read live.
    let ahead = writer
        .get(get(target(&ns, "ConfigMap", "c"), "999999999999"))
        .await
        .unwrap()
        .into_inner();
    assert!(!ahead.remembered);
    assert_eq!(ahead.resource_version, live.resource_version);
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
