//! `metadata.managedFields` through the sidecar. A write that leaves them as they are
//! does not send them (the API server keeps the live object's; see
//! crates/engine/src/body.rs `put_bytes`), and a write that changes them sends them; in
//! both cases the object written must be the one a PUT carrying the whole object writes.
//! Each change is made twice, on two objects alike: through the sidecar, and by a
//! GET + PUT of the whole object straight to the API server under the same field
//! manager. Their managed fields (managers, operations and fields owned; not the times)
//! must be equal, and the sidecar's answer must be what the API server then holds.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{ControlPlane, Sidecar};

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

const MANAGER: &str = "writer";

/// The object's managed fields without their times, in order.
fn owners(object: &Value) -> Vec<Value> {
    object["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut entry| {
            entry.as_object_mut().unwrap().remove("time");
            entry
        })
        .collect()
}

/// A ConfigMap `name` whose `data.a` is its creator's and `data.b` another manager's
/// (applied), so that its managed fields name two managers before the change.
async fn two_owners(api: &Api<ConfigMap>, name: &str) {
    let created = PostParams {
        field_manager: Some("creator".into()),
        ..Default::default()
    };
    let cm = serde_json::from_value(json!({"metadata": {"name": name}, "data": {"a": "1"}}));
    api.create(&created, &cm.unwrap()).await.expect("create");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": {"b": "1"}});
    api.patch(name, &PatchParams::apply("applier"), &Patch::Apply(applied))
        .await
        .expect("apply");
}

/// The change made both ways: `mutation` through the sidecar on `<name>-through`, and
/// `change` on a GET of `<name>-direct` PUT back whole. Returns both objects written.
async fn both(
    api: &Api<ConfigMap>,
    writer: &mut WriterServiceClient<tonic::transport::Channel>,
    ns: &str,
    name: &str,
    mutation: pb::mutation::Kind,
    change: impl Fn(&mut Value),
) -> (Value, Value) {
    let (through, direct) = (format!("{name}-through"), format!("{name}-direct"));
    two_owners(api, &through).await;
    two_owners(api, &direct).await;

    let result = writer
        .update_with_retry(pb::UpdateWithRetryRequest {
            target: Some(pb::ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: ns.into(),
                name: through.clone(),
            }),
            mutation: Some(pb::Mutation {
                kind: Some(mutation),
            }),
            options: Some(pb::WriteOptions {
                field_manager: MANAGER.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("the write through the sidecar")
        .into_inner()
        .result
        .expect("a result");
    assert_eq!(result.outcome(), pb::Outcome::Updated);
    let answer: Value = serde_json::from_str(&result.object_json).expect("JSON");
    let held = serde_json::to_value(api.get(&through).await.unwrap()).unwrap();
    assert_eq!(
        answer, held,
        "the answer is the object the API server holds"
    );

    let mut object = serde_json::to_value(api.get(&direct).await.unwrap()).unwrap();
    change(&mut object);
    let put = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    let written = api
        .replace(&direct, &put, &serde_json::from_value(object).unwrap())
        .await
        .expect("the PUT of the whole object");
    (answer, serde_json::to_value(written).unwrap())
}

#[tokio::test]
async fn managed_fields_are_those_a_put_of_the_whole_object_makes() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("managed-fields").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let admin = cp.admin_kubeconfig().display().to_string();
    let sidecar = Sidecar::start(&["--kubeconfig", &admin]);
    let mut writer = WriterServiceClient::new(sidecar.channel().await);

    // Left as they are (not sent): the writer takes data.a from its creator and adds
    // data.c; the applier's data.b stays the applier's.
    let (through, direct) = both(
        &api,
        &mut writer,
        &ns,
        "kept",
        pb::mutation::Kind::MergePatch(pb::MergePatch {
            patch_json: json!({"data": {"a": "2", "c": "3"}}).to_string(),
        }),
        |object| {
            object["data"]["a"] = json!("2");
            object["data"]["c"] = json!("3");
        },
    )
    .await;
    assert_eq!(owners(&through), owners(&direct));
    let managers: Vec<String> = owners(&through)
        .iter()
        .map(|e| e["manager"].as_str().unwrap().to_string())
        .collect();
    assert!(
        managers.iter().any(|m| m == "applier") && managers.iter().any(|m| m == MANAGER),
        "{managers:?}"
    );
    assert_eq!(through["data"], json!({"a": "2", "b": "1", "c": "3"}));

    // Reset by the caller (sent): the same object as the PUT that resets them.
    let (through, direct) = both(
        &api,
        &mut writer,
        &ns,
        "reset",
        pb::mutation::Kind::JsonPatch(pb::JsonPatch {
            patch_json: json!([
                {"op": "replace", "path": "/metadata/managedFields", "value": []},
                {"op": "add", "path": "/data/d", "value": "4"},
            ])
            .to_string(),
        }),
        |object| {
            object["metadata"]["managedFields"] = json!([]);
            object["data"]["d"] = json!("4");
        },
    )
    .await;
    assert_eq!(owners(&through), owners(&direct));
    assert!(
        !owners(&through)
            .iter()
            .any(|e| e["manager"] == "applier" || e["manager"] == "creator"),
        "a reset drops the other managers: {:?}",
        owners(&through)
    );
}
