//! "No write when nothing changed" and "no request on bad input", proven with the API
//! server's own request counters. The test starts a control plane of its own, so no other
//! test's traffic moves the counters it reads.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{ControlPlane, Sidecar, apiserver_requests};
use tonic::Code;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

const WRITE_VERBS: &[&str] = &["PUT", "POST", "PATCH", "DELETE"];

fn request(name: &str, ns: &str, kind: pb::mutation::Kind) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        target: Some(pb::ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: ns.into(),
            name: name.into(),
        }),
        mutation: Some(pb::Mutation { kind: Some(kind) }),
        ..Default::default()
    }
}

#[tokio::test]
async fn unchanged_and_invalid_requests_send_no_write() {
    // Its own control plane: the API server's request counters below must see this
    // test's requests alone, not those of the tests running beside it.
    let cp: &'static ControlPlane = Box::leak(Box::new(ControlPlane::start()));
    let ns = cp.namespace("no-write").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "same"}, "data": {"a": "1"}})).unwrap();
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let version = created.metadata.resource_version.unwrap();

    let sidecar = Sidecar::start(&["--kubeconfig", cp.admin_kubeconfig().to_str().unwrap()]);
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    // Warm discovery so that the counters below see only the writes in question.
    client
        .update_with_retry(request(
            "same",
            &ns,
            pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: "{}".into(),
            }),
        ))
        .await
        .unwrap();

    let writes_before = apiserver_requests(cp, WRITE_VERBS, "configmaps").await;

    // Mutations that leave the object as it is: UNCHANGED, no write, same version.
    let no_ops = [
        pb::mutation::Kind::MergePatch(pb::MergePatch {
            patch_json: json!({"data": {"a": "1"}}).to_string(),
        }),
        pb::mutation::Kind::JsonPatch(pb::JsonPatch {
            patch_json: json!([{"op": "replace", "path": "/data/a", "value": "1"}]).to_string(),
        }),
        pb::mutation::Kind::Cel(pb::CelMutation {
            expression: r#"{"data": {"a": object.data.a}}"#.into(),
        }),
    ];
    for kind in no_ops {
        let result = client
            .update_with_retry(request("same", &ns, kind))
            .await
            .unwrap()
            .into_inner()
            .result
            .unwrap();
        assert_eq!(result.outcome(), pb::Outcome::Unchanged);
        assert_eq!(result.resource_version, version);
        assert_eq!(result.attempt_records[0].http_status, 0, "no write sent");
    }

    // Bad input: refused before any request, naming the field.
    let bad: Vec<(pb::UpdateWithRetryRequest, Code, &str)> = vec![
        (
            request(
                "same",
                &ns,
                pb::mutation::Kind::JsonPatch(pb::JsonPatch {
                    patch_json: "[{\"op\": \"frobnicate\"}]".into(),
                }),
            ),
            Code::InvalidArgument,
            "mutation.json_patch.patch_json",
        ),
        (
            request(
                "same",
                &ns,
                pb::mutation::Kind::MergePatch(pb::MergePatch {
                    patch_json: "[1]".into(),
                }),
            ),
            Code::InvalidArgument,
            "mutation.merge_patch.patch_json",
        ),
        (
            request(
                "same",
                &ns,
                pb::mutation::Kind::Cel(pb::CelMutation {
                    expression: "{'a': ".into(),
                }),
            ),
            Code::InvalidArgument,
            "mutation.cel.expression",
        ),
        (
            request(
                "",
                &ns,
                pb::mutation::Kind::MergePatch(pb::MergePatch {
                    patch_json: "{}".into(),
                }),
            ),
            Code::InvalidArgument,
            "target.name",
        ),
        (
            {
                let mut r = request(
                    "same",
                    &ns,
                    pb::mutation::Kind::MergePatch(pb::MergePatch {
                        patch_json: "{}".into(),
                    }),
                );
                r.target.as_mut().unwrap().kind = "NoSuchKind".into();
                r
            },
            Code::NotFound,
            "NoSuchKind",
        ),
    ];
    for (req, code, names) in bad {
        let err = client.update_with_retry(req).await.unwrap_err();
        assert_eq!(err.code(), code, "{err:?}");
        assert!(err.message().contains(names), "{names} not in {err:?}");
        assert!(err.message().contains("nothing was sent"), "{err:?}");
    }

    let writes_after = apiserver_requests(cp, WRITE_VERBS, "configmaps").await;
    assert_eq!(
        writes_after, writes_before,
        "the API server received a write for an unchanged or invalid request"
    );
    let now = api.get("same").await.unwrap();
    assert_eq!(now.metadata.resource_version.unwrap(), version);

    // The counter does see a real write: the check above could have failed.
    let changed = client
        .update_with_retry(request(
            "same",
            &ns,
            pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: json!({"data": {"a": "2"}}).to_string(),
            }),
        ))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(changed.outcome(), pb::Outcome::Updated);
    let writes_final = apiserver_requests(cp, WRITE_VERBS, "configmaps").await;
    assert_eq!(writes_final, writes_after + 1.0);
}
