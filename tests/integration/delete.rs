//! rpc Delete against the real API server: deletes are writes too. Every attempt reads
//! the object live, checks the caller's preconditions on it, and sends a DELETE whose
//! `DeleteOptions` are preconditioned on the uid and resourceVersion read, so a writer
//! that changed the object in between makes the DELETE a conflict, and the sidecar
//! decides again on the fresh object. An object that is not there is an answer (GONE).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use prost::Message;
use serde_json::{Value, json};
use support::faults::{Fault, HttpFaultProxy};
use support::{ControlPlane, Sidecar, error_reason};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::pb as rpc;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

fn target(ns: &str, name: &str) -> pb::ObjectRef {
    pb::ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

fn delete(ns: &str, name: &str) -> pb::DeleteRequest {
    pb::DeleteRequest {
        target: Some(target(ns, name)),
        ..Default::default()
    }
}

fn when_cel(mut request: pb::DeleteRequest, cel: &str) -> pb::DeleteRequest {
    request.preconditions = Some(pb::Preconditions {
        cel: cel.into(),
        ..Default::default()
    });
    request
}

/// A namespace, the admin's view of its ConfigMaps, and a sidecar with `args`.
struct Rig {
    ns: String,
    api: Api<ConfigMap>,
    sidecar: Sidecar,
}

impl Rig {
    async fn new(args: &[&str]) -> Rig {
        let cp = ControlPlane::shared();
        let ns = cp.namespace("delete").await;
        let api = Api::namespaced(cp.admin_client().await, &ns);
        let admin = cp.admin_kubeconfig().display().to_string();
        let mut all = vec!["--kubeconfig", admin.as_str()];
        all.extend_from_slice(args);
        let sidecar = Sidecar::start(&all);
        Rig { ns, api, sidecar }
    }

    async fn client(&self) -> WriterServiceClient<Channel> {
        WriterServiceClient::new(self.sidecar.channel().await)
    }

    async fn create(&self, object: Value) -> ConfigMap {
        let cm: ConfigMap = serde_json::from_value(object).unwrap();
        self.api.create(&PostParams::default(), &cm).await.unwrap()
    }
}

/// The WriteFailure detail of a failed RPC.
fn write_failure(status: &tonic::Status) -> pb::WriteFailure {
    let decoded = rpc::Status::decode(status.details()).expect("google.rpc.Status details");
    let any = decoded
        .details
        .iter()
        .find(|d| d.type_url.ends_with("safewrite.v1.WriteFailure"))
        .expect("a WriteFailure detail");
    pb::WriteFailure::decode(any.value.as_slice()).unwrap()
}

#[tokio::test]
async fn an_existing_object_is_deleted_and_a_missing_one_is_gone() {
    let rig = Rig::new(&[]).await;
    let mut client = rig.client().await;
    rig.create(json!({"metadata": {"name": "c"}, "data": {"k": "v"}}))
        .await;
    // The sidecar remembers the object as it wrote it.
    let written = client
        .update_with_retry(pb::UpdateWithRetryRequest {
            target: Some(target(&rig.ns, "c")),
            mutation: Some(pb::Mutation {
                kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                    patch_json: r#"{"data": {"k": "w"}}"#.into(),
                })),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();

    let deleted = client
        .delete(delete(&rig.ns, "c"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.outcome(), pb::DeleteOutcome::Deleted, "{deleted:?}");
    assert_eq!(deleted.attempts, 1);
    assert_eq!(deleted.attempt_records[0].http_status, 200);
    assert!(!deleted.attempt_records[0].resource_version_read.is_empty());
    assert!(deleted.deletion_timestamp.is_empty());
    assert!(
        rig.api.get_opt("c").await.unwrap().is_none(),
        "gone on read-back"
    );
    // The delete forgot the remembered copy: reading back the write's version does not
    // answer the deleted object from memory.
    let read_back = client
        .get(pb::GetRequest {
            target: Some(target(&rig.ns, "c")),
            min_resource_version: written.resource_version,
        })
        .await
        .unwrap_err();
    assert_eq!(read_back.code(), Code::NotFound, "{read_back:?}");

    // Already gone is an answer, not an error.
    let gone = client
        .delete(delete(&rig.ns, "c"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(gone.outcome(), pb::DeleteOutcome::Gone, "{gone:?}");
    assert_eq!(gone.attempts, 1);
    assert_eq!(gone.attempt_records[0].http_status, 404);
    assert!(gone.object_json.is_empty());
}

#[tokio::test]
async fn a_false_condition_deletes_nothing_and_answers_the_current_object() {
    let rig = Rig::new(&[]).await;
    let mut client = rig.client().await;
    rig.create(json!({"metadata": {"name": "c"}, "data": {"phase": "Running"}}))
        .await;

    let refused = client
        .delete(when_cel(
            delete(&rig.ns, "c"),
            "object.data.phase == 'Done'",
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(error_reason(&refused), "PRECONDITION_FAILED");
    let failure = write_failure(&refused);
    let current: Value = serde_json::from_str(&failure.current_object_json).unwrap();
    assert_eq!(current["data"]["phase"], "Running");
    assert_eq!(failure.attempt_records.len(), 1, "not retried");
    assert!(rig.api.get_opt("c").await.unwrap().is_some(), "still there");

    // A stale exact resourceVersion is a compare-and-swap failure, not retried.
    let mut strict = delete(&rig.ns, "c");
    strict.preconditions = Some(pb::Preconditions {
        resource_version: "1".into(),
        ..Default::default()
    });
    let mismatch = client.delete(strict).await.unwrap_err();
    assert_eq!(mismatch.code(), Code::Aborted, "{mismatch:?}");
    assert_eq!(error_reason(&mismatch), "RESOURCE_VERSION_MISMATCH");
    assert!(rig.api.get_opt("c").await.unwrap().is_some(), "still there");
}

/// A controller whose cache still holds an object deleted and recreated under the same
/// name passes the old uid: the new object is not deleted.
#[tokio::test]
async fn a_recreated_object_of_the_same_name_survives_the_old_uid() {
    let rig = Rig::new(&[]).await;
    let mut client = rig.client().await;
    let old = rig.create(json!({"metadata": {"name": "c"}})).await;
    let old_uid = old.metadata.uid.unwrap();
    rig.api.delete("c", &DeleteParams::default()).await.unwrap();
    let new = rig
        .create(json!({"metadata": {"name": "c"}, "data": {"generation": "2"}}))
        .await;

    let mut request = delete(&rig.ns, "c");
    request.preconditions = Some(pb::Preconditions {
        uid: old_uid.clone(),
        ..Default::default()
    });
    let refused = client.delete(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    let current: Value =
        serde_json::from_str(&write_failure(&refused).current_object_json).unwrap();
    assert_eq!(
        current["metadata"]["uid"],
        new.metadata.uid.clone().unwrap()
    );
    let survivor = rig.api.get("c").await.unwrap();
    assert_eq!(survivor.metadata.uid, new.metadata.uid);
    assert_ne!(survivor.metadata.uid.unwrap(), old_uid);
}

/// A writer changes the object between the sidecar's read and its DELETE (held at a
/// proxy meanwhile): the DELETE, conditioned on the version read, is refused by the API
/// server, and the sidecar decides again on the fresh object. When the writer made the
/// condition false the object is kept; when it did not, the retry deletes it.
#[tokio::test]
async fn a_concurrent_write_makes_the_delete_decide_again_on_the_fresh_object() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("delete-race").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let proxy = HttpFaultProxy::start(cp).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8"),
        "--max-backoff",
        "100ms",
    ]);
    let client = WriterServiceClient::new(sidecar.channel().await);

    for (name, flip, want) in [
        ("flipped", "Running", Err(Code::FailedPrecondition)),
        ("touched", "Done", Ok(pb::DeleteOutcome::Deleted)),
    ] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": {"phase": "Done"}}))
                .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
        // Discovery and the read pass; the DELETE is held until the writer has written.
        proxy.inject(Fault::Gate, 1, true);
        let held = proxy.count(|c| &c.injected);
        let mut caller = client.clone();
        let request = when_cel(delete(&ns, name), "object.data.phase == 'Done'");
        let call = tokio::spawn(async move { caller.delete(request).await });
        let started = std::time::Instant::now();
        while proxy.count(|c| &c.injected) == held {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the DELETE reached the proxy"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let patch = json!({"data": {"phase": flip, "writer": "was here"}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        proxy.pass();
        let answer = call.await.unwrap();
        match want {
            Err(code) => {
                let refused = answer.unwrap_err();
                assert_eq!(refused.code(), code, "{refused:?}");
                let failure = write_failure(&refused);
                let records = &failure.attempt_records;
                assert_eq!(records.len(), 2, "{records:?}");
                assert_eq!(records[0].http_status, 409, "the stale DELETE was refused");
                let current: Value = serde_json::from_str(&failure.current_object_json).unwrap();
                assert_eq!(current["data"]["phase"], "Running");
                assert!(api.get_opt(name).await.unwrap().is_some(), "kept");
            }
            Ok(outcome) => {
                let deleted = answer.unwrap().into_inner();
                assert_eq!(deleted.outcome(), outcome, "{deleted:?}");
                assert_eq!(deleted.attempts, 2);
                assert_eq!(deleted.attempt_records[0].http_status, 409);
                assert_ne!(
                    deleted.attempt_records[0].resource_version_read,
                    deleted.attempt_records[1].resource_version_read,
                    "the retry read the writer's version"
                );
                assert!(api.get_opt(name).await.unwrap().is_none(), "deleted");
            }
        }
    }
}

/// The propagation policy travels in the DeleteOptions: with Orphan the API server marks
/// the owner with the `orphan` finalizer (this control plane runs no garbage collector,
/// so it stays marked) and the dependent is untouched.
#[tokio::test]
async fn the_propagation_policy_is_the_callers() {
    let rig = Rig::new(&[]).await;
    let mut client = rig.client().await;
    let owner = rig.create(json!({"metadata": {"name": "owner"}})).await;
    rig.create(
        json!({"metadata": {"name": "dependent", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid.unwrap(),
        }]}}),
    )
    .await;

    let mut request = delete(&rig.ns, "owner");
    request.propagation_policy = pb::PropagationPolicy::Orphan as i32;
    let answer = client.delete(request).await.unwrap().into_inner();
    assert_eq!(answer.outcome(), pb::DeleteOutcome::Deleting, "{answer:?}");
    let object: Value = serde_json::from_str(&answer.object_json).unwrap();
    assert_eq!(object["metadata"]["finalizers"], json!(["orphan"]));
    assert!(!answer.deletion_timestamp.is_empty());
    let dependent = rig.api.get("dependent").await.unwrap();
    assert_eq!(dependent.metadata.owner_references.unwrap().len(), 1);
}

/// An object with a finalizer is only marked for deletion: the answer says so, and the
/// object is still readable, with its deletionTimestamp.
#[tokio::test]
async fn an_object_with_a_finalizer_is_being_deleted() {
    let rig = Rig::new(&[]).await;
    let mut client = rig.client().await;
    rig.create(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}))
        .await;

    let answer = client
        .delete(delete(&rig.ns, "held"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.outcome(), pb::DeleteOutcome::Deleting, "{answer:?}");
    let still = rig.api.get("held").await.unwrap();
    let since = still.metadata.deletion_timestamp.expect("being deleted");
    assert!(!answer.deletion_timestamp.is_empty());
    let object: Value = serde_json::from_str(&answer.object_json).unwrap();
    assert_eq!(
        object["metadata"]["deletionTimestamp"],
        serde_json::to_value(&since).unwrap()
    );
    // Let the namespace go.
    let release = json!({"metadata": {"finalizers": null}});
    rig.api
        .patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_dry_run_deletes_nothing() {
    let rig = Rig::new(&[]).await;
    let mut client = rig.client().await;
    rig.create(json!({"metadata": {"name": "c"}})).await;

    let mut request = delete(&rig.ns, "c");
    request.dry_run = true;
    let answer = client.delete(request).await.unwrap().into_inner();
    assert_eq!(answer.outcome(), pb::DeleteOutcome::Deleted, "{answer:?}");
    assert!(rig.api.get_opt("c").await.unwrap().is_some(), "still there");
}

/// A policy that does not grant `delete` refuses before anything is sent, naming the
/// flag that would allow it.
#[tokio::test]
async fn a_delete_the_policy_denies_sends_nothing() {
    let rig = Rig::new(&["--allow", "core/ConfigMap:*:*:update,get"]).await;
    let mut client = rig.client().await;
    rig.create(json!({"metadata": {"name": "c"}})).await;

    let denied = client.delete(delete(&rig.ns, "c")).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert_eq!(error_reason(&denied), "POLICY_DENIED");
    assert!(
        denied.message().contains(":delete'"),
        "{}",
        denied.message()
    );
    assert!(
        write_failure(&denied).attempt_records.is_empty(),
        "nothing sent"
    );
    assert!(rig.api.get_opt("c").await.unwrap().is_some(), "still there");
    let metrics = rig.sidecar.metrics();
    assert!(
        !metrics
            .lines()
            .any(|l| l.contains("verb=\"delete\"") && !l.starts_with('#')),
        "no DELETE was sent"
    );
}

/// A Delete is traced as writes are: one RPC span under the caller's, one span per
/// attempt with the resourceVersion it read, and its GET and DELETE as HTTP client spans
/// under the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_is_one_rpc_span_with_an_attempt_span_over_its_read_and_delete() {
    use support::jaeger::{Jaeger, parent_span_id, span_named, tag};

    let cp = ControlPlane::shared();
    let jaeger = Jaeger::shared();
    let ns = cp.namespace("delete-traced").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let sidecar = Sidecar::start_with_env(
        &["--kubeconfig", cp.admin_kubeconfig().to_str().unwrap()],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_grpc.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "safewrite-delete"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let trace_id: String = (0..16)
        .map(|_| format!("{:02x}", fastrand::u8(..)))
        .collect();
    let mut request = tonic::Request::new(delete(&ns, "c"));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-00f067aa0ba902b7-01")
            .parse()
            .unwrap(),
    );
    let answer = client.delete(request).await.unwrap().into_inner();
    assert_eq!(answer.outcome(), pb::DeleteOutcome::Deleted);
    assert_eq!(
        answer.trace_id, trace_id,
        "the RPC continued the caller's trace"
    );

    // rpc + attempt + GET + DELETE (+ discovery).
    let trace = jaeger
        .wait_for_trace(&trace_id, 4, Duration::from_secs(20))
        .await;
    let rpc = span_named(&trace, "safewrite.v1.WriterService/Delete")
        .unwrap_or_else(|| panic!("no RPC span in {trace}"));
    assert_eq!(parent_span_id(rpc), Some("00f067aa0ba902b7"));
    assert_eq!(tag(rpc, "safewrite.outcome"), Some(&json!("deleted")));
    assert_eq!(tag(rpc, "safewrite.attempts"), Some(&json!(1)));
    let attempt = span_named(&trace, "attempt").expect("an attempt span");
    assert_eq!(parent_span_id(attempt), rpc["spanID"].as_str());
    assert!(
        tag(attempt, "safewrite.resource_version.read").is_some(),
        "{attempt}"
    );
    assert_eq!(tag(attempt, "http.response.status_code"), Some(&json!(200)));
    let id = attempt["spanID"].as_str();
    let methods: Vec<&str> = trace["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| parent_span_id(s) == id)
        .filter_map(|s| tag(s, "http.request.method").and_then(Value::as_str))
        .collect();
    assert!(
        methods.contains(&"GET") && methods.contains(&"DELETE"),
        "{methods:?}"
    );
}
