//! The request boundary against the real kube-apiserver: no request can address anything
//! but its target. The strings a reviewer used to rewrite a Secret through a ConfigMap
//! request, to persist a dry run and to inject query parameters are refused with
//! INVALID_ARGUMENT naming the field, and the objects they aimed at are untouched; a
//! hostile string in any identity field is refused the same way and the sidecar lives on.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{ControlPlane, Sidecar};
use tonic::Code;
use tonic_types::StatusExt as _;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn merge(patch: serde_json::Value) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
            patch_json: patch.to_string(),
        })),
    })
}

fn configmap(namespace: &str, name: &str) -> pb::ObjectRef {
    pb::ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: namespace.into(),
        name: name.into(),
    }
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
async fn hostile_targets_cannot_reach_any_other_resource() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("boundary").await;
    let kube = cp.admin_client().await;
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), &ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let victim = secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("victim".into()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(
                    "password".to_string(),
                    ByteString(b"hunter2".to_vec()),
                )])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let x = configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"v": "0"}}))
                .unwrap(),
        )
        .await
        .unwrap();

    let sidecar = Sidecar::start(&["--kubeconfig", &cp.admin_kubeconfig().display().to_string()]);
    let mut writer = WriterServiceClient::new(sidecar.channel().await);
    let write = |target: pb::ObjectRef, dry_run: bool| pb::UpdateWithRetryRequest {
        target: Some(target),
        mutation: merge(json!({"data": {"v": "pwned"}})),
        options: Some(pb::WriteOptions {
            dry_run,
            ..Default::default()
        }),
        ..Default::default()
    };
    let cases = [
        // The namespace ended the path at a Secret, and `#` cut the rest off.
        (
            configmap(&format!("{ns}/secrets/victim#"), "x"),
            false,
            "target.namespace",
        ),
        // `#` dropped the query string, dryRun with it: the "dry run" persisted.
        (configmap(&ns, "x#"), true, "target.name"),
        // `?` injected query parameters.
        (configmap(&ns, "x?dryRun=All"), false, "target.name"),
        (configmap(&ns, "../secrets/victim"), false, "target.name"),
        (configmap(&ns, "x%23"), false, "target.name"),
    ];
    for (target, dry_run, field) in cases {
        let status = writer
            .update_with_retry(write(target.clone(), dry_run))
            .await
            .expect_err(&target.name);
        assert_eq!(violated_field(&status), field, "{target:?}");
    }

    let after = secrets.get("victim").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        victim.metadata.resource_version
    );
    assert_eq!(after.data, victim.data);
    let after = configmaps.get("x").await.unwrap();
    assert_eq!(after.metadata.resource_version, x.metadata.resource_version);
    assert_eq!(after.data.unwrap()["v"], "0");

    // The same target, spelled right, is written: the boundary refuses only what it must.
    let ok = writer
        .update_with_retry(write(configmap(&ns, "x"), false))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(ok.outcome(), pb::Outcome::Updated);
}

#[tokio::test]
async fn a_hostile_string_in_every_field_is_refused_and_the_sidecar_lives_on() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("boundary-fields").await;
    let sidecar = Sidecar::start(&["--kubeconfig", &cp.admin_kubeconfig().display().to_string()]);
    let mut writer = WriterServiceClient::new(sidecar.channel().await);
    let big = "a".repeat(100_000);
    let hostile = [
        big.as_str(),
        "a\u{0}b",
        "a\nb",
        "../..",
        "x?y=z",
        "x#y",
        "a/b/c",
        "%2e%2e",
        "é",
        " ",
    ];
    for text in hostile {
        let base = || pb::UpdateWithRetryRequest {
            target: Some(configmap(&ns, "x")),
            mutation: merge(json!({"data": {"v": "1"}})),
            ..Default::default()
        };
        let mut requests: Vec<(&str, pb::UpdateWithRetryRequest)> = Vec::new();
        let mut r = base();
        r.target.as_mut().unwrap().api_version = text.into();
        requests.push(("target.api_version", r));
        let mut r = base();
        r.target.as_mut().unwrap().kind = text.into();
        requests.push(("target.kind", r));
        let mut r = base();
        r.target.as_mut().unwrap().namespace = text.into();
        requests.push(("target.namespace", r));
        let mut r = base();
        r.target.as_mut().unwrap().name = text.into();
        requests.push(("target.name", r));
        let mut r = base();
        r.options = Some(pb::WriteOptions {
            idempotency_key: text.into(),
            ..Default::default()
        });
        requests.push(("options.idempotency_key", r));
        let mut r = base();
        r.preconditions = Some(pb::Preconditions {
            uid: text.into(),
            ..Default::default()
        });
        requests.push(("preconditions.uid", r));
        let mut r = base();
        r.preconditions = Some(pb::Preconditions {
            resource_version: text.into(),
            ..Default::default()
        });
        requests.push(("preconditions.resource_version", r));
        if text.len() > 128 || text.chars().any(|c| c.is_control() || !c.is_ascii()) {
            let mut r = base();
            r.options = Some(pb::WriteOptions {
                field_manager: text.into(),
                ..Default::default()
            });
            requests.push(("options.field_manager", r));
        }
        let fence = |namespace: &str, name: &str| pb::Fence {
            lease_namespace: namespace.into(),
            lease_name: name.into(),
            epoch: 1,
        };
        let mut r = base();
        r.options = Some(pb::WriteOptions {
            fence: Some(fence(text, "lease")),
            ..Default::default()
        });
        requests.push(("options.fence.lease_namespace", r));
        let mut r = base();
        r.options = Some(pb::WriteOptions {
            fence: Some(fence(&ns, text)),
            ..Default::default()
        });
        requests.push(("options.fence.lease_name", r));
        let mut refused = Vec::new();
        for (field, request) in requests {
            refused.push((
                field,
                writer.update_with_retry(request).await.expect_err(field),
            ));
        }
        // A delete's target and fence, and a campaign's Lease and identity, likewise.
        let delete = |target: pb::ObjectRef, fence: Option<pb::Fence>| pb::DeleteRequest {
            target: Some(target),
            fence,
            ..Default::default()
        };
        for (field, request) in [
            ("target.name", delete(configmap(&ns, text), None)),
            ("target.namespace", delete(configmap(text, "x"), None)),
            (
                "fence.lease_namespace",
                delete(configmap(&ns, "x"), Some(fence(text, "l"))),
            ),
            (
                "fence.lease_name",
                delete(configmap(&ns, "x"), Some(fence(&ns, text))),
            ),
        ] {
            refused.push((field, writer.delete(request).await.expect_err(field)));
        }
        let lead = |namespace: &str, name: &str, identity: &str| pb::LeadRequest {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            ..Default::default()
        };
        let mut campaigns = vec![
            ("namespace", lead(text, "l", "")),
            ("name", lead(&ns, text, "")),
        ];
        // An identity is any printable ASCII without spaces (it is only ever a value in
        // the Lease's body): the others are refused.
        if text.is_empty() || text.len() > 253 || text.chars().any(|c| !c.is_ascii_graphic()) {
            campaigns.push(("identity", lead(&ns, "l", text)));
        }
        for (field, request) in campaigns {
            refused.push((field, writer.lead(request).await.expect_err(field)));
        }
        for (field, status) in refused {
            assert_eq!(violated_field(&status), field, "{field} = {:.40?}", text);
            assert!(
                status.message().len() < 1024,
                "the message quotes at most an excerpt: {} bytes",
                status.message().len()
            );
        }
    }
    // An identity full of URL syntax is held verbatim, on the Lease named and no other.
    let identity = "../..?x=y#z%2e/a";
    let mut events = writer
        .lead(pb::LeadRequest {
            namespace: ns.clone(),
            name: "hostile-identity".into(),
            identity: identity.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = events.message().await.unwrap().unwrap();
    assert_eq!(first.state(), pb::LeadState::Leading);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(cp.admin_client().await, &ns);
    let held = leases.list(&Default::default()).await.unwrap();
    let holders: Vec<_> = held
        .items
        .iter()
        .map(|l| {
            (
                l.metadata.name.clone().unwrap(),
                l.spec.as_ref().unwrap().holder_identity.clone(),
            )
        })
        .collect();
    assert_eq!(
        holders,
        [("hostile-identity".to_string(), Some(identity.to_string()))]
    );
    drop(events);
    // Still serving.
    let ok = writer
        .update_with_retry(pb::UpdateWithRetryRequest {
            target: Some(configmap(&ns, "x")),
            mutation: merge(json!({"data": {"v": "1"}})),
            options: Some(pb::WriteOptions {
                create_if_missing_json: json!({"data": {}}).to_string(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(ok.outcome(), pb::Outcome::Created);
}
