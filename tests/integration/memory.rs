//! The remembered copy against the real API server: a write to an object the sidecar
//! read or wrote before sends one request (the write, conditional on the copy's
//! resourceVersion), and the copy never decides an answer it should not. A copy made
//! stale by another writer costs one 409 and a live read, never a lost update; an answer
//! that writes nothing (UNCHANGED, FAILED_PRECONDITION, already applied, a Transact
//! abort) decided on a stale copy is caught by the live read that confirms it; Secrets,
//! dry runs and `--no-memory` keep reading first.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{ControlPlane, INCREMENT, Sidecar};
use tonic::Code;
use tonic::transport::Channel;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

struct Env {
    ns: String,
    sidecar: Sidecar,
    kube: kube::Client,
}

impl Env {
    async fn new(prefix: &str, flags: &[&str]) -> Env {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await;
        let admin = cp.admin_kubeconfig().display().to_string();
        // The readiness probe's GETs would blur the count of the writes' own.
        let mut args = vec!["--kubeconfig", admin.as_str(), "--readiness-interval", "1h"];
        args.extend_from_slice(flags);
        Env {
            ns,
            sidecar: Sidecar::start(&args),
            kube: cp.admin_client().await,
        }
    }

    async fn writer(&self) -> WriterServiceClient<Channel> {
        WriterServiceClient::new(self.sidecar.channel().await)
    }

    fn target(&self, kind: &str, name: &str) -> pb::ObjectRef {
        pb::ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: self.ns.clone(),
            name: name.into(),
        }
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    async fn create_configmap(&self, name: &str, data: Value) {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
        self.configmaps()
            .create(&PostParams::default(), &cm)
            .await
            .expect("create configmap");
    }

    /// Another writer, straight to the API server.
    async fn outside(&self, name: &str, data: Value) {
        self.configmaps()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": data })),
            )
            .await
            .expect("outside write");
    }

    async fn data(&self, name: &str) -> BTreeMap<String, String> {
        self.configmaps().get(name).await.unwrap().data.unwrap()
    }

    /// The sidecar's requests to the API server so far, by verb (from its metrics).
    fn requests(&self) -> BTreeMap<String, f64> {
        let mut by_verb = BTreeMap::new();
        for line in self.sidecar.metrics().lines() {
            let Some(rest) = line.strip_prefix("safewrite_api_requests_total{") else {
                continue;
            };
            let verb = rest
                .split("verb=\"")
                .nth(1)
                .and_then(|v| v.split('"').next())
                .unwrap_or_default();
            let count: f64 = rest.rsplit(' ').next().unwrap().parse().unwrap();
            *by_verb.entry(verb.to_string()).or_insert(0.0) += count;
        }
        by_verb
    }

    fn count(&self, verb: &str) -> f64 {
        self.requests().get(verb).copied().unwrap_or(0.0)
    }
}

fn update(target: pb::ObjectRef, mutation: pb::mutation::Kind) -> pb::UpdateWithRetryRequest {
    pb::UpdateWithRetryRequest {
        target: Some(target),
        mutation: Some(pb::Mutation {
            kind: Some(mutation),
        }),
        ..Default::default()
    }
}

fn cel(expression: &str) -> pb::mutation::Kind {
    pb::mutation::Kind::Cel(pb::CelMutation {
        expression: expression.into(),
    })
}

fn merge(patch: Value) -> pb::mutation::Kind {
    pb::mutation::Kind::MergePatch(pb::MergePatch {
        patch_json: patch.to_string(),
    })
}

async fn write(
    client: &mut WriterServiceClient<Channel>,
    request: pb::UpdateWithRetryRequest,
) -> Result<pb::WriteResult, tonic::Status> {
    client
        .update_with_retry(request)
        .await
        .map(|r| r.into_inner().result.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_write_sends_one_request() {
    let env = Env::new("memory-one", &[]).await;
    env.create_configmap("c", json!({"n": "0"})).await;
    let mut client = env.writer().await;
    let target = env.target("ConfigMap", "c");
    // The first write reads (nothing remembered yet); every later one is one PUT.
    write(&mut client, update(target.clone(), cel(INCREMENT)))
        .await
        .unwrap();
    let (gets, puts) = (env.count("get"), env.count("update"));
    for i in 2..=20 {
        let result = write(&mut client, update(target.clone(), cel(INCREMENT)))
            .await
            .unwrap();
        assert_eq!(result.outcome(), pb::Outcome::Updated);
        let object: Value = serde_json::from_str(&result.object_json).unwrap();
        assert_eq!(object["data"]["n"], i.to_string());
        assert_eq!(result.attempts, 1);
    }
    assert_eq!(env.count("get"), gets, "no GET after the first write");
    assert_eq!(env.count("update"), puts + 19.0, "one PUT per write");
    assert_eq!(env.data("c").await["n"], "20");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_made_stale_by_another_writer_costs_a_conflict_never_an_update() {
    let env = Env::new("memory-stale", &[]).await;
    env.create_configmap("c", json!({"n": "0"})).await;
    let mut client = env.writer().await;
    let target = env.target("ConfigMap", "c");
    let mut expected = 0;
    for round in 0..5 {
        write(&mut client, update(target.clone(), cel(INCREMENT)))
            .await
            .unwrap();
        expected += 1;
        // Another writer increments behind the sidecar's back.
        let n: u32 = env.data("c").await["n"].parse().unwrap();
        env.outside("c", json!({"n": (n + 1).to_string()})).await;
        expected += 1;
        let result = write(&mut client, update(target.clone(), cel(INCREMENT)))
            .await
            .unwrap();
        expected += 1;
        let object: Value = serde_json::from_str(&result.object_json).unwrap();
        assert_eq!(object["data"]["n"], expected.to_string(), "round {round}");
        // From the stale copy: a 409, then a live read and a write that succeeds.
        let reasons: Vec<_> = result
            .attempt_records
            .iter()
            .map(|a| a.reason.as_str())
            .collect();
        assert_eq!(
            reasons.first(),
            Some(&"Conflict"),
            "round {round}: {reasons:?}"
        );
    }
    assert_eq!(env.data("c").await["n"], expected.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_write_nothing_are_confirmed_on_a_live_read() {
    let env = Env::new("memory-confirm", &[]).await;
    env.create_configmap("c", json!({"a": "x"})).await;
    let mut client = env.writer().await;
    let target = env.target("ConfigMap", "c");
    let set = |v: &str| update(target.clone(), merge(json!({"data": {"a": v}})));

    // UNCHANGED on the copy (a is x there), but another writer set y: written.
    write(&mut client, set("x")).await.unwrap();
    env.outside("c", json!({"a": "y"})).await;
    let result = write(&mut client, set("x")).await.unwrap();
    assert_eq!(result.outcome(), pb::Outcome::Updated, "not UNCHANGED");
    assert_eq!(env.data("c").await["a"], "x");

    // UNCHANGED that really is: confirmed, one GET more, no write.
    let puts = env.count("update");
    let result = write(&mut client, set("x")).await.unwrap();
    assert_eq!(result.outcome(), pb::Outcome::Unchanged);
    assert_eq!(env.count("update"), puts);

    // A precondition false on the copy but true on the object: written.
    env.outside("c", json!({"a": "y"})).await;
    let mut guarded = set("z");
    guarded.preconditions = Some(pb::Preconditions {
        cel: r#"object.data.a == "y""#.into(),
        ..Default::default()
    });
    let result = write(&mut client, guarded.clone()).await.unwrap();
    assert_eq!(
        result.outcome(),
        pb::Outcome::Updated,
        "not FAILED_PRECONDITION"
    );
    assert_eq!(env.data("c").await["a"], "z");
    // And one false on the object too: FAILED_PRECONDITION with the live object.
    let error = write(&mut client, guarded).await.unwrap_err();
    assert_eq!(error.code(), Code::FailedPrecondition);

    // A JSON Patch `test` failing on the copy, passing on the object: written.
    env.outside("c", json!({"a": "w"})).await;
    let tested = update(
        target.clone(),
        pb::mutation::Kind::JsonPatch(pb::JsonPatch {
            patch_json: json!([
                {"op": "test", "path": "/data/a", "value": "w"},
                {"op": "replace", "path": "/data/a", "value": "v"}
            ])
            .to_string(),
        }),
    );
    let result = write(&mut client, tested).await.unwrap();
    assert_eq!(result.outcome(), pb::Outcome::Updated);
    assert_eq!(env.data("c").await["a"], "v");

    // An idempotency key on the copy that the object no longer has (another writer
    // replaced the annotations): not "already applied", applied.
    let mut keyed = update(target.clone(), merge(json!({"data": {"k": "1"}})));
    keyed.options = Some(pb::WriteOptions {
        idempotency_key: "key-1".into(),
        ..Default::default()
    });
    write(&mut client, keyed.clone()).await.unwrap();
    let mut cm = env.configmaps().get("c").await.unwrap();
    cm.metadata.annotations = None;
    cm.data.as_mut().unwrap().remove("k");
    env.configmaps()
        .replace("c", &PostParams::default(), &cm)
        .await
        .unwrap();
    let result = write(&mut client, keyed).await.unwrap();
    assert!(!result.already_applied, "the key is gone from the object");
    assert_eq!(env.data("c").await["k"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_object_is_written_not_its_predecessor() {
    let env = Env::new("memory-recreate", &[]).await;
    env.create_configmap("c", json!({"n": "0"})).await;
    let mut client = env.writer().await;
    let target = env.target("ConfigMap", "c");
    write(&mut client, update(target.clone(), cel(INCREMENT)))
        .await
        .unwrap();
    env.configmaps()
        .delete("c", &DeleteParams::default())
        .await
        .unwrap();
    env.create_configmap("c", json!({"n": "10"})).await;
    let result = write(&mut client, update(target.clone(), cel(INCREMENT)))
        .await
        .unwrap();
    let object: Value = serde_json::from_str(&result.object_json).unwrap();
    assert_eq!(object["data"]["n"], "11");
    // And a deleted one is NOT_FOUND, not written from the copy.
    env.configmaps()
        .delete("c", &DeleteParams::default())
        .await
        .unwrap();
    let error = write(&mut client, update(target, cel(INCREMENT)))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_dry_runs_and_no_memory_read_first() {
    let env = Env::new("memory-off", &["--allow", "*", "--allow", "core/Secret"]).await;
    let secrets: Api<Secret> = Api::namespaced(env.kube.clone(), &env.ns);
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"n": "0"}}))
            .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let mut client = env.writer().await;
    let gets = env.count("get");
    for i in 0..3 {
        let target = env.target("Secret", "s");
        write(
            &mut client,
            update(target, merge(json!({"data": {"n": format!("{i}A==")}}))),
        )
        .await
        .unwrap();
    }
    assert_eq!(
        env.count("get"),
        gets + 3.0,
        "a Secret is read before every write"
    );

    // A dry run's answer is not the object: the next write does not start from it.
    env.create_configmap("c", json!({"n": "0"})).await;
    let target = env.target("ConfigMap", "c");
    write(&mut client, update(target.clone(), cel(INCREMENT)))
        .await
        .unwrap();
    let mut dry = update(target.clone(), cel(INCREMENT));
    dry.options = Some(pb::WriteOptions {
        dry_run: true,
        ..Default::default()
    });
    write(&mut client, dry).await.unwrap();
    let result = write(&mut client, update(target, cel(INCREMENT)))
        .await
        .unwrap();
    assert_eq!(result.attempts, 1, "no conflict with a dry run's version");
    assert_eq!(env.data("c").await["n"], "2");

    // --no-memory: every write reads first.
    let off = Env::new("memory-no", &["--no-memory"]).await;
    off.create_configmap("c", json!({"n": "0"})).await;
    let mut client = off.writer().await;
    let target = off.target("ConfigMap", "c");
    let gets = off.count("get");
    for _ in 0..5 {
        write(&mut client, update(target.clone(), cel(INCREMENT)))
            .await
            .unwrap();
    }
    assert_eq!(off.count("get"), gets + 5.0);
}
