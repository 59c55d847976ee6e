//! The write engine through the real sidecar against the real kube-apiserver: no lost
//! update under contention, spec/status separation, every mutation kind, preconditions,
//! create-if-missing, dry run, requeue mode, deadlines, and one test per row of the
//! classification table the real server (or a real socket fault) can produce.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use prost::Message;
use serde_json::{Value, json};
use support::{ControlPlane, FaultProxy, Sidecar, install_crd};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::pb as rpc;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

struct Env {
    ns: String,
    sidecar: Sidecar,
    kube: kube::Client,
}

impl Env {
    async fn new(prefix: &str) -> Env {
        Self::with_kubeconfig(prefix, None).await
    }

    async fn with_kubeconfig(prefix: &str, kubeconfig: Option<&str>) -> Env {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await;
        let admin = cp.admin_kubeconfig().display().to_string();
        // These tests are about the loop's own retries: keep the circuit breaker (tested
        // in tests/breaker.rs) from opening under the transport-fault test.
        let sidecar = Sidecar::start(&[
            "--kubeconfig",
            kubeconfig.unwrap_or(&admin),
            "--breaker-failures",
            "1000",
        ]);
        Env {
            ns,
            sidecar,
            kube: cp.admin_client().await,
        }
    }

    async fn writer(&self) -> WriterServiceClient<Channel> {
        WriterServiceClient::new(self.sidecar.channel().await)
    }

    fn configmap(&self, name: &str) -> pb::ObjectRef {
        pb::ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: self.ns.clone(),
            name: name.into(),
        }
    }

    fn widget(&self, name: &str) -> pb::ObjectRef {
        pb::ObjectRef {
            api_version: "test.safewrite.dev/v1".into(),
            kind: "Widget".into(),
            namespace: self.ns.clone(),
            name: name.into(),
        }
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    fn widgets(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("test.safewrite.dev", "v1", "Widget");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
        Api::namespaced_with(self.kube.clone(), &self.ns, &resource)
    }

    async fn create_configmap(&self, name: &str, data: Value) -> ConfigMap {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
        self.configmaps()
            .create(&PostParams::default(), &cm)
            .await
            .expect("create configmap")
    }

    async fn create_widget(&self, name: &str, spec: Value, status: Value) {
        install_widget_crd(&self.kube).await;
        let widget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.safewrite.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        self.widgets()
            .create(&PostParams::default(), &widget)
            .await
            .expect("create widget");
        self.widgets()
            .patch_status(
                name,
                &Default::default(),
                &kube::api::Patch::Merge(json!({ "status": status })),
            )
            .await
            .expect("set status");
    }
}

fn cel(expression: &str) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
            expression: expression.into(),
        })),
    })
}

fn merge(patch: Value) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
            patch_json: patch.to_string(),
        })),
    })
}

fn json_patch(patch: Value) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::JsonPatch(pb::JsonPatch {
            patch_json: patch.to_string(),
        })),
    })
}

fn apply(configuration: Value, force: bool) -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::Apply(pb::ServerSideApply {
            configuration_json: configuration.to_string(),
            force,
        })),
    })
}

const INCREMENT: &str = r#"{"data": {"n": string(int(object.data.n) + 1)}}"#;

fn update(target: pb::ObjectRef, mutation: Option<pb::Mutation>) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        target: Some(target),
        mutation,
        ..Default::default()
    }
}

/// The rich details of an error status.
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

async fn install_widget_crd(client: &kube::Client) {
    install_crd(client, "widgets", "Widget").await;
}

/// 16 writers x 50 read-dependent increments of one object: `alone` sends each write on
/// its own (`options.write_alone`), else concurrent writes are committed together.
/// Every answer must be the caller's own: the 800 answers read back 800 distinct
/// values, 1 to 800, each carrying the resourceVersion of the write that carried it.
/// Returns the conflicts met and the largest group a write carried.
async fn sixteen_by_fifty(
    env: &Env,
    name: &str,
    alone: bool,
    clients: &[WriterServiceClient<Channel>],
) -> (usize, u32) {
    env.create_configmap(name, json!({"n": "0"})).await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let mut client = clients[i % clients.len()].clone();
        let target = env.configmap(name);
        tasks.push(tokio::spawn(async move {
            let (mut conflicts, mut largest, mut told) = (0, 0, Vec::new());
            for _ in 0..50 {
                let mut request = update(target.clone(), cel(INCREMENT));
                request.options = Some(pb::WriteOptions {
                    write_alone: alone,
                    ..Default::default()
                });
                let result = client
                    .update_with_retry(request)
                    .await
                    .expect("every increment succeeds")
                    .into_inner()
                    .result
                    .unwrap();
                assert_eq!(result.outcome(), pb::Outcome::Updated);
                assert_eq!(result.attempts as usize, result.attempt_records.len());
                conflicts += result
                    .attempt_records
                    .iter()
                    .filter(|a| a.reason == "Conflict")
                    .count();
                let last = result.attempt_records.last().unwrap();
                assert!(
                    last.batch_size >= 1,
                    "the write that carried it is recorded"
                );
                largest = largest.max(last.batch_size);
                let object: Value = serde_json::from_str(&result.object_json).unwrap();
                assert_eq!(
                    object["metadata"]["resourceVersion"], result.resource_version,
                    "the answer carries the version of its own object"
                );
                told.push(
                    object["data"]["n"]
                        .as_str()
                        .unwrap()
                        .parse::<u32>()
                        .unwrap(),
                );
            }
            (conflicts, largest, told)
        }));
    }
    let (mut conflicts, mut largest, mut told) = (0, 0, Vec::new());
    for task in tasks {
        let (c, l, t) = task.await.unwrap();
        conflicts += c;
        largest = largest.max(l);
        told.extend(t);
    }
    let cm = env.configmaps().get(name).await.unwrap();
    assert_eq!(cm.data.unwrap()["n"], "800", "no increment lost or doubled");
    told.sort_unstable();
    let distinct = {
        let mut d = told.clone();
        d.dedup();
        d.len()
    };
    assert_eq!(
        told,
        (1..=800).collect::<Vec<_>>(),
        "each caller is told its own increment ({distinct} distinct values in 800 answers)"
    );
    (conflicts, largest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_writers_lose_no_update() {
    let env = Env::new("lost-update").await;
    // Writes made alone are not ordered by the sidecar: through one or two, they conflict.
    let other = Sidecar::start(&[
        "--kubeconfig",
        ControlPlane::shared().admin_kubeconfig().to_str().unwrap(),
    ]);
    let clients = [
        env.writer().await,
        WriterServiceClient::new(other.channel().await),
    ];
    let (conflicts, largest) = sixteen_by_fifty(&env, "alone", true, &clients).await;
    assert!(
        conflicts > 0,
        "16 writers through two sidecars met no conflict at all"
    );
    assert_eq!(largest, 1, "write_alone writes went alone");
    eprintln!("800 increments written alone, {conflicts} conflicts resolved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_carries_concurrent_writers_in_one_write() {
    let env = Env::new("group-commit").await;
    let (conflicts, largest) =
        sixteen_by_fifty(&env, "grouped", false, &[env.writer().await]).await;
    assert!(largest > 1, "no write carried more than one request");
    let metrics = env.sidecar.metrics();
    let count: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("safewrite_batch_size_count "))
        .and_then(|v| v.trim().parse().ok())
        .expect("safewrite_batch_size_count");
    assert!(
        count < 800.0,
        "800 increments took {count} writes: nothing was committed together"
    );
    eprintln!("800 increments in {count} writes (largest group {largest}), {conflicts} conflicts");
}

/// Fires `requests` at once and returns their answers in order.
async fn all_at_once(
    client: &WriterServiceClient<Channel>,
    requests: Vec<pb::UpdateWithRetryRequest>,
) -> Vec<Result<pb::WriteResult, tonic::Status>> {
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|request| {
            let mut client = client.clone();
            tokio::spawn(async move {
                client
                    .update_with_retry(request)
                    .await
                    .map(|r| r.into_inner().result.unwrap())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_group_write_fails_only_the_offender() {
    let env = Env::new("group-offender").await;
    env.create_configmap("c", json!({"n": "0"})).await;
    let client = env.writer().await;
    let (rounds, each) = (6, 24);
    let mut isolated = 0;
    for _ in 0..rounds {
        let mut requests: Vec<_> = (0..each)
            .map(|_| update(env.configmap("c"), cel(INCREMENT)))
            .collect();
        // A value the API server refuses (ConfigMap data values are strings).
        requests[each / 2] = update(env.configmap("c"), merge(json!({"data": {"bad": 5}})));
        let answers = all_at_once(&client, requests).await;
        for (i, answer) in answers.into_iter().enumerate() {
            if i == each / 2 {
                let status = answer.expect_err("the offender fails");
                assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
                let failure = details(&status).failure.unwrap();
                if failure.attempt_records.iter().any(|a| a.batch_size > 1) {
                    isolated += 1;
                }
            } else {
                let result = answer.expect("every other member succeeds");
                assert_eq!(result.outcome(), pb::Outcome::Updated);
            }
        }
    }
    let cm = env.configmaps().get("c").await.unwrap();
    let data = cm.data.unwrap();
    assert_eq!(data["n"], ((each - 1) * rounds).to_string());
    assert!(!data.contains_key("bad"));
    assert!(
        isolated > 0,
        "the offender never shared a write: isolation was not exercised"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_precondition_is_false_fails_alone() {
    let env = Env::new("group-precondition").await;
    env.create_configmap("c", json!({"n": "0"})).await;
    let client = env.writer().await;
    let mut requests: Vec<_> = (0..16)
        .map(|_| update(env.configmap("c"), cel(INCREMENT)))
        .collect();
    requests[8].preconditions = Some(pb::Preconditions {
        cel: r#"object.data.n == "-1""#.into(),
        ..Default::default()
    });
    let answers = all_at_once(&client, requests).await;
    for (i, answer) in answers.into_iter().enumerate() {
        if i == 8 {
            let status = answer.expect_err("its precondition is false");
            assert_eq!(status.code(), Code::FailedPrecondition);
        } else {
            answer.expect("the others succeed");
        }
    }
    let cm = env.configmaps().get("c").await.unwrap();
    assert_eq!(cm.data.unwrap()["n"], "15");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_records_every_key_and_resent_keys_are_already_applied() {
    let env = Env::new("group-keys").await;
    env.create_configmap("c", json!({"n": "0"})).await;
    let client = env.writer().await;
    let keyed = |i: usize| {
        let mut request = update(env.configmap("c"), cel(INCREMENT));
        request.options = Some(pb::WriteOptions {
            idempotency_key: format!("key-{i}"),
            ..Default::default()
        });
        request
    };
    let first = all_at_once(&client, (0..32).map(keyed).collect()).await;
    assert!(
        first
            .iter()
            .all(|a| a.as_ref().is_ok_and(|r| !r.already_applied))
    );
    let again = all_at_once(&client, (0..32).map(keyed).collect()).await;
    for answer in again {
        let result = answer.expect("a resent key succeeds");
        assert!(
            result.already_applied,
            "applied once, recorded with the change"
        );
    }
    let cm = env.configmaps().get("c").await.unwrap();
    assert_eq!(cm.data.unwrap()["n"], "32");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_a_missing_object_create_it_once() {
    let env = Env::new("group-create").await;
    let client = env.writer().await;
    let requests: Vec<_> = (0..12)
        .map(|_| {
            let mut request = update(env.configmap("fresh"), cel(INCREMENT));
            request.options = Some(pb::WriteOptions {
                create_if_missing_json: r#"{"data": {"n": "0"}}"#.into(),
                ..Default::default()
            });
            request
        })
        .collect();
    let answers = all_at_once(&client, requests).await;
    let created = answers
        .iter()
        .filter(|a| a.as_ref().unwrap().outcome() == pb::Outcome::Created)
        .count();
    assert_eq!(created, 1, "one create, the rest updates");
    let cm = env.configmaps().get("fresh").await.unwrap();
    assert_eq!(cm.data.unwrap()["n"], "12");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_status_writers_lose_no_update() {
    let env = Env::new("lost-status").await;
    env.create_widget("w", json!({"size": 1}), json!({"count": 0}))
        .await;
    let client = env.writer().await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut client = client.clone();
        let target = env.widget("w");
        tasks.push(tokio::spawn(async move {
            let mut told = Vec::new();
            for _ in 0..50 {
                let result = client
                    .patch_status(pb::PatchStatusRequest {
                        target: Some(target.clone()),
                        mutation: cel(r#"{"status": {"count": object.status.count + 1}}"#),
                        ..Default::default()
                    })
                    .await
                    .expect("every status increment succeeds")
                    .into_inner()
                    .result
                    .unwrap();
                let object: Value = serde_json::from_str(&result.object_json).unwrap();
                told.push(object["status"]["count"].as_u64().unwrap());
            }
            told
        }));
    }
    let mut told = Vec::new();
    for task in tasks {
        told.extend(task.await.unwrap());
    }
    told.sort_unstable();
    assert_eq!(
        told,
        (1..=800).collect::<Vec<_>>(),
        "each status writer is told its own count"
    );
    let w = env.widgets().get("w").await.unwrap();
    assert_eq!(w.data["status"]["count"], 800);
    assert_eq!(w.data["spec"]["size"], 1);
}

#[tokio::test]
async fn patch_status_never_changes_spec_and_update_never_changes_status() {
    let env = Env::new("separation").await;
    env.create_widget("w", json!({"size": 1}), json!({"phase": "old"}))
        .await;
    let mut client = env.writer().await;
    let both = json!({"spec": {"size": 2}, "status": {"phase": "new"}});

    client
        .patch_status(pb::PatchStatusRequest {
            target: Some(env.widget("w")),
            mutation: merge(both.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let w = env.widgets().get("w").await.unwrap();
    assert_eq!(w.data["spec"]["size"], 1, "PatchStatus changed spec");
    assert_eq!(w.data["status"]["phase"], "new");

    let both = json!({"spec": {"size": 3}, "status": {"phase": "newer"}});
    client
        .update_with_retry(update(env.widget("w"), merge(both)))
        .await
        .unwrap();
    let w = env.widgets().get("w").await.unwrap();
    assert_eq!(w.data["spec"]["size"], 3);
    assert_eq!(
        w.data["status"]["phase"], "new",
        "UpdateWithRetry changed status"
    );

    // PatchStatus on a kind without a status subresource names the field to fix.
    let err = client
        .patch_status(pb::PatchStatusRequest {
            target: Some(env.configmap("x")),
            mutation: merge(json!({"status": {}})),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("no status subresource"), "{err:?}");
}

#[tokio::test]
async fn json_patch_merge_patch_and_cel_apply_to_the_fresh_object() {
    let env = Env::new("mutations").await;
    env.create_configmap("m", json!({"a": "1", "list": "x"}))
        .await;
    let mut client = env.writer().await;
    let target = env.configmap("m");

    let r = client
        .update_with_retry(update(
            target.clone(),
            json_patch(json!([
                {"op": "test", "path": "/data/a", "value": "1"},
                {"op": "replace", "path": "/data/a", "value": "2"},
                {"op": "add", "path": "/data/b", "value": "new"}
            ])),
        ))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.outcome(), pb::Outcome::Updated);
    let written: Value = serde_json::from_str(&r.object_json).unwrap();
    assert_eq!(written["data"]["a"], "2");
    assert_eq!(r.resource_version, written["metadata"]["resourceVersion"]);

    client
        .update_with_retry(update(
            target.clone(),
            merge(json!({"data": {"b": null, "c": "3"}})),
        ))
        .await
        .unwrap();
    let append = r#"{"data": {"list": object.data.list.contains("y") ? object.data.list : object.data.list + ",y"}}"#;
    for _ in 0..2 {
        client
            .update_with_retry(update(target.clone(), cel(append)))
            .await
            .unwrap();
    }
    let data = env.configmaps().get("m").await.unwrap().data.unwrap();
    assert_eq!(data.get("b"), None, "merge patch null removes");
    assert_eq!(data["c"], "3");
    assert_eq!(data["list"], "x,y", "append-if-absent applied once");
}

#[tokio::test]
async fn built_in_and_cluster_scoped_kinds_work_and_new_crds_are_discovered() {
    let env = Env::new("kinds").await;
    let mut client = env.writer().await;

    // A Deployment (apps/v1), created if missing.
    let deployment = json!({
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}},
                         "spec": {"containers": [{"name": "c", "image": "example.invalid/c"}]}}
        }
    });
    let target = pb::ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: env.ns.clone(),
        name: "d".into(),
    };
    let mut request = update(target.clone(), merge(json!({"spec": {"replicas": 3}})));
    request.options = Some(pb::WriteOptions {
        create_if_missing_json: deployment.to_string(),
        ..Default::default()
    });
    let r = client
        .update_with_retry(request.clone())
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.outcome(), pb::Outcome::Created);
    let created: Value = serde_json::from_str(&r.object_json).unwrap();
    assert_eq!(
        created["spec"]["replicas"], 3,
        "the mutation applies to the created object"
    );
    let r = client
        .update_with_retry(request)
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.outcome(), pb::Outcome::Unchanged);

    // A cluster-scoped kind: the test's own Namespace.
    let ns_target = pb::ObjectRef {
        api_version: "v1".into(),
        kind: "Namespace".into(),
        namespace: String::new(),
        name: env.ns.clone(),
    };
    let r = client
        .update_with_retry(update(
            ns_target.clone(),
            merge(json!({"metadata": {"labels": {"team": "a"}}})),
        ))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.outcome(), pb::Outcome::Updated);
    let mut wrong = ns_target;
    wrong.namespace = "default".into();
    let err = client
        .update_with_retry(update(wrong, merge(json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("cluster-scoped"), "{err:?}");

    // A CRD installed after the sidecar started is found without a restart, once the
    // few seconds an unknown kind is remembered have passed.
    let gadget = pb::ObjectRef {
        api_version: "test.safewrite.dev/v1".into(),
        kind: "Gadget".into(),
        namespace: env.ns.clone(),
        name: "g".into(),
    };
    let mut request = update(gadget.clone(), merge(json!({"spec": {"on": true}})));
    request.options = Some(pb::WriteOptions {
        create_if_missing_json: "{}".into(),
        ..Default::default()
    });
    let before = client.update_with_retry(request.clone()).await.unwrap_err();
    assert_eq!(before.code(), Code::NotFound, "{before:?}");
    install_crd(&env.kube, "gadgets", "Gadget").await;
    let installed = Instant::now();
    let r = loop {
        match client.update_with_retry(request.clone()).await {
            Ok(response) => break response.into_inner().result.unwrap(),
            Err(status) if status.code() == Code::NotFound => {
                assert!(
                    installed.elapsed() < Duration::from_secs(10),
                    "the new kind is still unknown 10 s after its CRD was installed: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    };
    eprintln!(
        "the new kind was found {:?} after its CRD was installed",
        installed.elapsed()
    );
    assert_eq!(r.outcome(), pb::Outcome::Created);
}

#[tokio::test]
async fn server_side_apply_reports_changes_and_field_manager_conflicts() {
    let env = Env::new("apply").await;
    let mut client = env.writer().await;
    let target = env.configmap("a");
    let first = client
        .update_with_retry(update(
            target.clone(),
            apply(json!({"data": {"x": "1"}}), false),
        ))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(first.outcome(), pb::Outcome::Created);
    let again = client
        .update_with_retry(update(
            target.clone(),
            apply(json!({"data": {"x": "1"}}), false),
        ))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(again.outcome(), pb::Outcome::Unchanged);
    assert_eq!(again.resource_version, first.resource_version);

    let mut other = update(target.clone(), apply(json!({"data": {"x": "2"}}), false));
    other.options = Some(pb::WriteOptions {
        field_manager: "other-controller".into(),
        ..Default::default()
    });
    let err = client.update_with_retry(other.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err:?}");
    assert!(err.message().contains(".data.x"), "{err:?}");
    assert!(err.message().contains("apply.force"), "{err:?}");
    let d = details(&err);
    assert_eq!(d.info.unwrap().reason, "FIELD_MANAGER_CONFLICT");
    assert_eq!(d.failure.unwrap().attempt_records.len(), 1, "not retried");

    other.mutation = apply(json!({"data": {"x": "2"}}), true);
    let forced = client
        .update_with_retry(other)
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(forced.outcome(), pb::Outcome::Updated);
    assert_eq!(
        env.configmaps().get("a").await.unwrap().data.unwrap()["x"],
        "2"
    );
}

#[tokio::test]
async fn preconditions_are_checked_on_the_fresh_object() {
    let env = Env::new("preconditions").await;
    let cm = env.create_configmap("p", json!({"n": "1"})).await;
    let uid = cm.metadata.uid.clone().unwrap();
    let version = cm.metadata.resource_version.clone().unwrap();
    let mut client = env.writer().await;
    let target = env.configmap("p");
    let with = |pre: pb::Preconditions| {
        let mut r = update(target.clone(), cel(INCREMENT));
        r.preconditions = Some(pre);
        r
    };

    // Wrong uid: FAILED_PRECONDITION with the current object, nothing written.
    let err = client
        .update_with_retry(with(pb::Preconditions {
            uid: "not-the-uid".into(),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let current: Value =
        serde_json::from_str(&details(&err).failure.unwrap().current_object_json).unwrap();
    assert_eq!(current["data"]["n"], "1");

    // A CEL condition that is false.
    let err = client
        .update_with_retry(with(pb::Preconditions {
            cel: "object.data.n == '9'".into(),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");

    // A JSON Patch test that fails is a precondition failure, not retried.
    let err = client
        .update_with_retry(update(
            target.clone(),
            json_patch(json!([{"op": "test", "path": "/data/n", "value": "7"}])),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(details(&err).failure.unwrap().attempt_records.len(), 1);

    // The right uid, condition and exact resourceVersion: written.
    client
        .update_with_retry(with(pb::Preconditions {
            uid: uid.clone(),
            resource_version: version.clone(),
            cel: "object.data.n == '1'".into(),
        }))
        .await
        .unwrap();
    // The same exact resourceVersion again is stale now: ABORTED at once, no retry.
    let err = client
        .update_with_retry(with(pb::Preconditions {
            resource_version: version,
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err:?}");
    assert_eq!(details(&err).failure.unwrap().attempt_records.len(), 1);
    assert_eq!(
        env.configmaps().get("p").await.unwrap().data.unwrap()["n"],
        "2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_if_missing_races_fall_back_to_update() {
    let env = Env::new("create-race").await;
    let client = env.writer().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut client = client.clone();
        let mut request = update(env.configmap("born"), cel(INCREMENT));
        request.options = Some(pb::WriteOptions {
            create_if_missing_json: json!({"data": {"n": "0"}}).to_string(),
            ..Default::default()
        });
        tasks.push(tokio::spawn(async move {
            client
                .update_with_retry(request)
                .await
                .expect("ok")
                .into_inner()
                .result
                .unwrap()
                .outcome()
        }));
    }
    let mut created = 0;
    for task in tasks {
        if task.await.unwrap() == pb::Outcome::Created {
            created += 1;
        }
    }
    assert_eq!(created, 1, "exactly one caller created the object");
    assert_eq!(
        env.configmaps().get("born").await.unwrap().data.unwrap()["n"],
        "8"
    );
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let env = Env::new("dry-run").await;
    env.create_configmap("d", json!({"n": "1"})).await;
    let mut client = env.writer().await;
    let mut request = update(env.configmap("d"), cel(INCREMENT));
    request.options = Some(pb::WriteOptions {
        dry_run: true,
        ..Default::default()
    });
    let r = client
        .update_with_retry(request)
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    let would: Value = serde_json::from_str(&r.object_json).unwrap();
    assert_eq!(would["data"]["n"], "2");
    assert_eq!(
        env.configmaps().get("d").await.unwrap().data.unwrap()["n"],
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_mode_answers_conflicts_at_once_with_aborted() {
    let env = Env::new("requeue").await;
    env.create_configmap("q", json!({"n": "0"})).await;
    let client = env.writer().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut client = client.clone();
        let target = env.configmap("q");
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut aborted) = (0, 0);
            for _ in 0..10 {
                let mut request = update(target.clone(), cel(INCREMENT));
                request.retry_policy = Some(pb::RetryPolicy {
                    requeue: true,
                    ..Default::default()
                });
                match client.update_with_retry(request).await {
                    Ok(r) => {
                        assert_eq!(r.into_inner().result.unwrap().attempts, 1);
                        ok += 1;
                    }
                    Err(status) => {
                        assert_eq!(status.code(), Code::Aborted, "{status:?}");
                        assert_eq!(details(&status).failure.unwrap().attempt_records.len(), 1);
                        aborted += 1;
                    }
                }
            }
            (ok, aborted)
        }));
    }
    let (mut ok, mut aborted) = (0, 0);
    for task in tasks {
        let (o, a) = task.await.unwrap();
        ok += o;
        aborted += a;
    }
    let n: u32 = env.configmaps().get("q").await.unwrap().data.unwrap()["n"]
        .parse()
        .unwrap();
    assert_eq!(
        n, ok,
        "every OK applied exactly once, every ABORTED not at all"
    );
    eprintln!("requeue mode: {ok} ok, {aborted} aborted");
}

#[tokio::test]
async fn classification_422_invalid_is_invalid_argument_with_field_violations() {
    let env = Env::new("c422").await;
    env.create_configmap("v", json!({})).await;
    let mut client = env.writer().await;
    let err = client
        .update_with_retry(update(
            env.configmap("v"),
            merge(json!({"metadata": {"labels": {"x": "-bad-"}}})),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let d = details(&err);
    assert_eq!(d.info.unwrap().reason, "Invalid");
    let violations = d.bad_request.unwrap().field_violations;
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].field, "metadata.labels");
    assert_eq!(
        d.failure.unwrap().attempt_records[0].http_status,
        422,
        "sent once, not retried"
    );
}

#[tokio::test]
async fn classification_400_bad_request_is_invalid_argument() {
    let env = Env::new("c400").await;
    env.create_configmap("b", json!({})).await;
    let mut client = env.writer().await;
    // A body whose name differs from the URL's: the API server answers 400 BadRequest.
    let err = client
        .update_with_retry(update(
            env.configmap("b"),
            json_patch(json!([{"op": "replace", "path": "/metadata/name", "value": "other"}])),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let d = details(&err);
    assert_eq!(d.info.unwrap().reason, "BadRequest");
    assert_eq!(d.failure.unwrap().attempt_records.len(), 1);
}

#[tokio::test]
async fn classification_403_forbidden_is_permission_denied() {
    let cp = ControlPlane::shared();
    let restricted = cp.restricted_kubeconfig().display().to_string();
    let env = Env::with_kubeconfig("c403", Some(&restricted)).await;
    env.create_configmap("f", json!({"n": "1"})).await;
    let mut client = env.writer().await;
    let err = client
        .update_with_retry(update(env.configmap("f"), cel(INCREMENT)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("RBAC"), "{err:?}");
    let failure = details(&err).failure.unwrap();
    assert_eq!(failure.attempt_records.len(), 1);
    assert_eq!(failure.attempt_records[0].http_status, 403);
    assert_eq!(
        env.configmaps().get("f").await.unwrap().data.unwrap()["n"],
        "1"
    );
}

#[tokio::test]
async fn classification_404_is_not_found_unless_asked_to_create() {
    let env = Env::new("c404").await;
    let mut client = env.writer().await;
    let err = client
        .update_with_retry(update(env.configmap("missing"), cel(INCREMENT)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(err.message().contains("create_if_missing_json"), "{err:?}");
    assert_eq!(details(&err).failure.unwrap().attempt_records.len(), 1);
}

#[tokio::test]
async fn transport_faults_are_retried_then_unavailable_and_deadlines_are_never_slept_past() {
    let cp = ControlPlane::shared();
    let proxy = FaultProxy::start(cp.api_port()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(cp, dir.path());
    let env = Env::with_kubeconfig("faults", Some(kubeconfig.to_str().unwrap())).await;
    env.create_configmap("t", json!({"n": "0"})).await;
    let mut client = env.writer().await;
    client
        .update_with_retry(update(env.configmap("t"), cel(INCREMENT)))
        .await
        .expect("through the proxy");

    proxy.reset_all();
    // The proxy cuts the sidecar's open connection as it pleases: a write sent on it
    // before the sidecar sees the cut may have reached the API server (its outcome is
    // unknown, rightly). A read first, which may be retried whatever happened, lets the
    // sidecar see the cut; from then on every connection is reset as it is made, and
    // nothing is sent.
    let mut read = tonic::Request::new(pb::GetRequest {
        target: Some(env.configmap("t")),
        ..Default::default()
    });
    read.set_timeout(Duration::from_secs(2));
    let cut = client
        .get(read)
        .await
        .expect_err("no read through a proxy that resets");
    assert!(
        matches!(cut.code(), Code::Unavailable | Code::DeadlineExceeded),
        "{cut:?}"
    );
    // Resets are retried with backoff, then answered UNAVAILABLE with RetryInfo.
    let mut request = update(env.configmap("t"), cel(INCREMENT));
    request.retry_policy = Some(pb::RetryPolicy {
        max_attempts: 3,
        initial_backoff: Some(prost_types::Duration {
            seconds: 0,
            nanos: 20_000_000,
        }),
        ..Default::default()
    });
    let err = client.update_with_retry(request).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let d = details(&err);
    assert!(d.retry.is_some(), "RetryInfo says when to come back");
    assert_eq!(d.failure.unwrap().attempt_records.len(), 3);

    // With long backoffs and a short deadline: DEADLINE_EXCEEDED, not a late answer.
    let mut request = tonic::Request::new(update(env.configmap("t"), cel(INCREMENT)));
    request.get_mut().retry_policy = Some(pb::RetryPolicy {
        max_attempts: 50,
        initial_backoff: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
        max_backoff: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
        ..Default::default()
    });
    request.set_timeout(Duration::from_millis(1500));
    let err = client.update_with_retry(request).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    // The sidecar's own answer, before the caller's deadline (a late one would be the
    // caller's bare DEADLINE_EXCEEDED, without the attempts); that no backoff passes the
    // deadline is tested in paused time in crates/engine/src/tests.rs.
    assert!(
        !details(&err).failure.unwrap().attempt_records.is_empty(),
        "attempts so far are reported"
    );

    proxy.pass();
    let r = client
        .update_with_retry(update(env.configmap("t"), cel(INCREMENT)))
        .await
        .expect("recovers once the path is back");
    assert_eq!(
        r.into_inner().result.unwrap().outcome(),
        pb::Outcome::Updated
    );
    assert_eq!(
        env.configmaps().get("t").await.unwrap().data.unwrap()["n"],
        "2",
        "failed RPCs wrote nothing"
    );
}
