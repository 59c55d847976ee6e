//! The writes controllers get wrong, against the real API server, checking every
//! caller's answer and not only the end state: status conditions set at once by 16
//! writers on a CRD whose conditions list is a plain list and on one where it is
//! `listType=map` (each answer its own serial state), one condition toggled by 16 writers
//! (`lastTransitionTime` moves exactly when `status` did), a condition set again (no
//! write), finalizers added and removed by 8 controllers at once around a deletion (the
//! object gone, every answer precise, no 422 loop), a second controller owner refused, an
//! owner deleted and recreated under its name adopting the object in place, and
//! route-parent entries upserted by 8 controllers while an outside writer replaces the
//! list (every entry in the stored version its OK named).

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use support::{ControlPlane, Sidecar, error_reason};
use tonic::Code;
use tonic::transport::Channel;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

struct Env {
    ns: String,
    _sidecar: Sidecar,
    writer: WriterServiceClient<Channel>,
    kube: kube::Client,
}

impl Env {
    async fn new(prefix: &str) -> Env {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await;
        let admin = cp.admin_kubeconfig().display().to_string();
        let sidecar = Sidecar::start(&["--kubeconfig", admin.as_str()]);
        let writer = WriterServiceClient::new(sidecar.channel().await);
        let kube = cp.admin_client().await;
        support::install_crd(&kube, "gadgets", "Gadget").await;
        install_crd_with_condition_map(&kube).await;
        Env {
            ns,
            _sidecar: sidecar,
            writer,
            kube,
        }
    }

    fn target(&self, api_version: &str, kind: &str, name: &str) -> pb::ObjectRef {
        pb::ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: self.ns.clone(),
            name: name.into(),
        }
    }

    fn resource(&self, kind: &str, plural: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("test.safewrite.dev", "v1", kind);
        Api::namespaced_with(
            self.kube.clone(),
            &self.ns,
            &ApiResource::from_gvk_with_plural(&gvk, plural),
        )
    }

    async fn create(&self, kind: &str, plural: &str, name: &str, spec: Value) -> Value {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.safewrite.dev/v1", "kind": kind,
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        let made = self
            .resource(kind, plural)
            .create(&PostParams::default(), &object)
            .await
            .expect("create");
        serde_json::to_value(made).unwrap()
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    async fn update(&self, target: &pb::ObjectRef, kind: pb::mutation::Kind) -> Answer {
        let request = pb::UpdateWithRetryRequest {
            target: Some(target.clone()),
            mutation: Some(pb::Mutation { kind: Some(kind) }),
            ..Default::default()
        };
        self.writer
            .clone()
            .update_with_retry(request)
            .await
            .map(|r| Written::of(r.into_inner().result.unwrap()))
    }

    async fn patch_status(&self, target: &pb::ObjectRef, kind: pb::mutation::Kind) -> Answer {
        let request = pb::PatchStatusRequest {
            target: Some(target.clone()),
            mutation: Some(pb::Mutation { kind: Some(kind) }),
            ..Default::default()
        };
        self.writer
            .clone()
            .patch_status(request)
            .await
            .map(|r| Written::of(r.into_inner().result.unwrap()))
    }
}

type Answer = Result<Written, tonic::Status>;

/// A successful answer, parsed.
#[derive(Debug, Clone)]
struct Written {
    outcome: pb::Outcome,
    object: Value,
    version: u64,
    batch: u32,
}

impl Written {
    fn of(result: pb::WriteResult) -> Written {
        Written {
            outcome: result.outcome(),
            object: if result.object_json.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&result.object_json).unwrap()
            },
            version: result.resource_version.parse().unwrap_or(0),
            batch: result
                .attempt_records
                .iter()
                .map(|r| r.batch_size)
                .max()
                .unwrap_or(0),
        }
    }

    fn conditions(&self) -> Vec<Value> {
        self.object["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// The Cog CRD: its conditions list is what controller-gen makes of []metav1.Condition
/// (`listType=map` keyed by type, every field typed and the required ones required).
async fn install_crd_with_condition_map(client: &kube::Client) {
    let name = "cogs.test.safewrite.dev";
    let condition = json!({"type": "object",
        "required": ["lastTransitionTime", "message", "reason", "status", "type"],
        "properties": {
            "type": {"type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "reason": {"type": "string", "maxLength": 1024, "minLength": 1},
            "message": {"type": "string", "maxLength": 32768}}});
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"group": "test.safewrite.dev", "scope": "Namespaced",
            "names": {"plural": "cogs", "kind": "Cog"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "properties": {"conditions": {
                        "type": "array", "items": condition,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"]}}}}}}}]}}))
    .unwrap();
    support::create_crd(client, crd).await;
}

fn set(type_: &str, status: &str, reason: &str, time: Option<&str>) -> pb::mutation::Kind {
    pb::mutation::Kind::SetCondition(pb::SetCondition {
        conditions: vec![pb::Condition {
            r#type: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("set by {reason}"),
            observed_generation: None,
            last_transition_time: time.unwrap_or_default().into(),
        }],
        path: String::new(),
    })
}

/// Runs `calls` at once and returns their answers in call order.
async fn at_once<F: Future<Output = Answer>>(calls: impl IntoIterator<Item = F>) -> Vec<Answer> {
    futures::future::join_all(calls).await
}

/// Writes and the largest batch among answers, for the report.
fn report(name: &str, answers: &[&Written]) {
    let writes: BTreeSet<u64> = answers.iter().map(|w| w.version).collect();
    let largest = answers.iter().map(|w| w.batch).max().unwrap_or(0);
    println!(
        "{name}: {} answers checked, {} writes, largest batch {largest}",
        answers.len(),
        writes.len()
    );
}

/// 16 writers each set a condition of their own type on one object at once: all 16 are
/// there, and each answer is its own serial state: the list as it stood right after its
/// own append, so the answers' lists are the 16 prefixes of the stored list.
#[tokio::test]
async fn sixteen_writers_set_sixteen_condition_types_at_once() {
    let env = Env::new("cond16").await;
    for (kind, plural) in [("Gadget", "gadgets"), ("Cog", "cogs")] {
        env.create(kind, plural, "o", json!({})).await;
        let target = env.target("test.safewrite.dev/v1", kind, "o");
        let types: Vec<String> = (0..16).map(|i| format!("example.com/C{i}")).collect();
        let answers = at_once(types.iter().enumerate().map(|(i, t)| {
            let (env, target) = (&env, &target);
            async move {
                env.patch_status(target, set(t, "True", &format!("W{i}"), None))
                    .await
            }
        }))
        .await;
        let answers: Vec<Written> = answers.into_iter().map(|a| a.expect("set")).collect();
        let stored = env.resource(kind, plural).get("o").await.unwrap();
        let stored = serde_json::to_value(stored).unwrap()["status"]["conditions"].clone();
        let stored = stored.as_array().unwrap().clone();
        let stored_types: BTreeSet<&str> =
            stored.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(stored_types.len(), 16, "{kind}: all 16 there: {stored:?}");
        let mut lengths = BTreeSet::new();
        for (answer, own) in answers.iter().zip(&types) {
            assert_eq!(answer.outcome, pb::Outcome::Updated);
            let list = answer.conditions();
            assert_eq!(
                list.last().unwrap()["type"],
                own.as_str(),
                "{kind}: own entry last"
            );
            assert_eq!(
                list[..],
                stored[..list.len()],
                "{kind}: a prefix of the stored list"
            );
            assert_eq!(list.last().unwrap()["observedGeneration"], 1);
            lengths.insert(list.len());
        }
        assert_eq!(
            lengths.len(),
            16,
            "{kind}: each answer its own serial state"
        );
        report(
            &format!("16 types on {kind}"),
            &answers.iter().collect::<Vec<_>>(),
        );
    }
}

/// 16 writers set one condition at once, half to True and half to False, each giving a
/// lastTransitionTime of its own: an answer carries its own time exactly when its own
/// set changed the status, else the time of the set that last did (one of the same
/// status, written no later); the stored object carries the time of a set of its status.
/// Then the same condition set again writes nothing: the resourceVersion stays.
#[tokio::test]
async fn sixteen_writers_toggling_one_condition_move_its_time_only_with_its_status() {
    let env = Env::new("toggle").await;
    for (kind, plural) in [("Gadget", "gadgets"), ("Cog", "cogs")] {
        env.create(kind, plural, "t", json!({})).await;
        let target = env.target("test.safewrite.dev/v1", kind, "t");
        let start = "2026-01-01T00:00:00Z";
        env.patch_status(&target, set("Ready", "False", "Start", Some(start)))
            .await
            .unwrap();
        let time = |i: usize| format!("2026-01-01T00:{:02}:00Z", i + 1);
        let status = |i: usize| if i.is_multiple_of(2) { "True" } else { "False" };
        let answers = at_once((0..16).map(|i| {
            let (env, target) = (&env, &target);
            let when = time(i);
            async move {
                env.patch_status(
                    target,
                    set("Ready", status(i), &format!("W{i}"), Some(&when)),
                )
                .await
            }
        }))
        .await;
        let answers: Vec<Written> = answers.into_iter().map(|a| a.expect("set")).collect();
        let ready = |w: &Written| w.conditions()[0].clone();
        let changers: BTreeMap<String, (usize, u64)> = answers
            .iter()
            .enumerate()
            .filter(|(i, w)| ready(w)["lastTransitionTime"] == time(*i).as_str())
            .map(|(i, w)| (time(i), (i, w.version)))
            .collect();
        for (i, answer) in answers.iter().enumerate() {
            let entry = ready(answer);
            assert_eq!(entry["status"], status(i), "{kind} W{i}: its own status");
            assert_eq!(entry["reason"], format!("W{i}"));
            let at = entry["lastTransitionTime"].as_str().unwrap();
            if at == start {
                assert_eq!(
                    status(i),
                    "False",
                    "{kind} W{i}: kept the start time only unchanged"
                );
                continue;
            }
            let (j, version) = changers
                .get(at)
                .unwrap_or_else(|| panic!("{kind} W{i}: {at} is no changer's time: {answers:#?}"));
            assert_eq!(
                status(*j),
                status(i),
                "{kind} W{i}: kept the time of W{j}, same status"
            );
            assert!(*version <= answer.version, "{kind} W{i}: after W{j}");
            assert_eq!(answer.outcome, pb::Outcome::Updated);
        }
        let stored = env.resource(kind, plural).get("t").await.unwrap();
        let stored = serde_json::to_value(stored).unwrap()["status"]["conditions"][0].clone();
        let at = stored["lastTransitionTime"].as_str().unwrap();
        let same = if at == start {
            stored["status"] == "False"
        } else {
            changers
                .get(at)
                .is_some_and(|(j, _)| stored["status"] == status(*j))
        };
        assert!(
            same,
            "{kind}: the stored time belongs to its status: {stored}"
        );
        report(
            &format!("16 toggles on {kind}"),
            &answers.iter().collect::<Vec<_>>(),
        );

        // Set again to exactly what it is: nothing written.
        let before = env.resource(kind, plural).get("t").await.unwrap();
        let (status_now, reason_now) = (
            stored["status"].as_str().unwrap(),
            stored["reason"].as_str().unwrap(),
        );
        let again = env
            .patch_status(
                &target,
                set(
                    "Ready",
                    status_now,
                    reason_now,
                    Some("2030-01-01T00:00:00Z"),
                ),
            )
            .await
            .unwrap();
        assert_eq!(again.outcome, pb::Outcome::Unchanged, "{kind}");
        let after = env.resource(kind, plural).get("t").await.unwrap();
        assert_eq!(
            before.metadata.resource_version, after.metadata.resource_version,
            "{kind}: no write"
        );
        assert_eq!(ready(&again)["lastTransitionTime"], at);
    }
}

fn finalizer(value: &str, remove: bool) -> pb::mutation::Kind {
    pb::mutation::Kind::Finalizer(pb::FinalizerChange {
        finalizer: value.into(),
        remove,
    })
}

/// 8 controllers add their finalizers at once (each answer its own serial state), the
/// object is deleted, an addition is refused before anything is sent, and the 8 remove
/// theirs at once: every answer is OK, exactly one says the write let the server delete
/// the object, and the object is gone.
#[tokio::test]
async fn eight_controllers_add_then_remove_finalizers_around_a_deletion() {
    let env = Env::new("fin8").await;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "f"}})).unwrap();
    env.configmaps()
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let target = env.target("v1", "ConfigMap", "f");
    let values: Vec<String> = (0..8)
        .map(|i| format!("c{i}.example.com/cleanup"))
        .collect();
    let added = at_once(
        values
            .iter()
            .map(|v| env.update(&target, finalizer(v, false))),
    )
    .await;
    let added: Vec<Written> = added.into_iter().map(|a| a.expect("add")).collect();
    let stored = env
        .configmaps()
        .get("f")
        .await
        .unwrap()
        .metadata
        .finalizers
        .unwrap();
    assert_eq!(stored.len(), 8);
    let mut lengths = BTreeSet::new();
    for (answer, own) in added.iter().zip(&values) {
        let list: Vec<String> =
            serde_json::from_value(answer.object["metadata"]["finalizers"].clone()).unwrap();
        assert_eq!(list.last(), Some(own));
        assert_eq!(list[..], stored[..list.len()]);
        lengths.insert(list.len());
    }
    assert_eq!(lengths.len(), 8, "each answer its own serial state");
    report("8 finalizers added", &added.iter().collect::<Vec<_>>());

    env.configmaps()
        .delete("f", &DeleteParams::default())
        .await
        .unwrap();
    let refused = env
        .update(&target, finalizer("late.example.com/x", false))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(error_reason(&refused), "OBJECT_DELETING");

    let removed = at_once(
        values
            .iter()
            .map(|v| env.update(&target, finalizer(v, true))),
    )
    .await;
    let removed: Vec<Written> = removed.into_iter().map(|a| a.expect("remove")).collect();
    let mut deleted_it = 0;
    for (answer, own) in removed.iter().zip(&values) {
        let list = answer.object["metadata"]["finalizers"].as_array().cloned();
        assert!(
            !list.unwrap_or_default().iter().any(|f| f == own.as_str()),
            "{own} removed in its own answer"
        );
        match answer.outcome {
            pb::Outcome::Gone if !answer.object.is_null() => deleted_it += 1,
            pb::Outcome::Gone | pb::Outcome::Updated => {}
            other => panic!("{own}: {other:?}"),
        }
    }
    assert_eq!(
        deleted_it, 1,
        "one removal let the server delete it: {removed:#?}"
    );
    assert!(
        env.configmaps().get_opt("f").await.unwrap().is_none(),
        "gone"
    );
    // Removing again: gone, nothing written, exit clean.
    let again = env
        .update(&target, finalizer(&values[0], true))
        .await
        .unwrap();
    assert_eq!(again.outcome, pb::Outcome::Gone);
    assert!(again.object.is_null());
    report("8 finalizers removed", &removed.iter().collect::<Vec<_>>());
}

/// A second controller owner is refused, naming the controller; an owner named without
/// a uid is read and its uid taken.
#[tokio::test]
async fn a_second_controller_owner_is_refused() {
    let env = Env::new("owner").await;
    for name in ["owner-a", "owner-b", "owned"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        env.configmaps()
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let uid_a = env
        .configmaps()
        .get("owner-a")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let target = env.target("v1", "ConfigMap", "owned");
    let owner = |name: &str, controller: bool| {
        pb::mutation::Kind::OwnerReference(pb::OwnerReferenceChange {
            owner: Some(pb::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: name.into(),
                controller,
                block_owner_deletion: true,
                ..Default::default()
            }),
            remove: false,
        })
    };
    let first = env.update(&target, owner("owner-a", true)).await.unwrap();
    assert_eq!(first.outcome, pb::Outcome::Updated);
    assert_eq!(
        first.object["metadata"]["ownerReferences"][0]["uid"],
        uid_a.as_str()
    );
    let same = env.update(&target, owner("owner-a", true)).await.unwrap();
    assert_eq!(same.outcome, pb::Outcome::Unchanged);
    let refused = env
        .update(&target, owner("owner-b", true))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(error_reason(&refused), "ALREADY_OWNED");
    assert!(
        refused.message().contains("ConfigMap/owner-a"),
        "{}",
        refused.message()
    );
    // As a plain owner it is welcome.
    let second = env.update(&target, owner("owner-b", false)).await.unwrap();
    assert_eq!(
        second.object["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let missing = env
        .update(&target, owner("nobody", false))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::FailedPrecondition);
    assert!(
        missing.message().contains("does not exist"),
        "{}",
        missing.message()
    );
}

fn controller_reference(name: &str) -> pb::mutation::Kind {
    pb::mutation::Kind::OwnerReference(pb::OwnerReferenceChange {
        owner: Some(pb::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: name.into(),
            controller: true,
            block_owner_deletion: true,
            ..Default::default()
        }),
        remove: false,
    })
}

/// An owner deleted and recreated under its name is the same owner (API group, kind and
/// name, as controllerutil matches it): SetControllerReference with the new one adopts
/// the object, its reference taking the new uid where it was; another owner asking to be
/// the controller is refused, naming the controller as it is now. (The control plane runs
/// no garbage collector, so the object outlives its first owner.)
#[tokio::test]
async fn a_recreated_owner_adopts_its_object_in_place() {
    let env = Env::new("adopt").await;
    let make = |name: &'static str| {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        let configmaps = env.configmaps();
        async move {
            let made = configmaps
                .create(&PostParams::default(), &cm)
                .await
                .unwrap();
            made.metadata.uid.unwrap()
        }
    };
    let old_uid = make("boss").await;
    make("bystander").await;
    make("owned").await;
    let target = env.target("v1", "ConfigMap", "owned");
    let mut bystander = controller_reference("bystander");
    if let pb::mutation::Kind::OwnerReference(change) = &mut bystander {
        change.owner.as_mut().unwrap().controller = false;
    }
    env.update(&target, bystander).await.unwrap();
    let first = env
        .update(&target, controller_reference("boss"))
        .await
        .unwrap();
    assert_eq!(first.outcome, pb::Outcome::Updated);
    assert_eq!(
        first.object["metadata"]["ownerReferences"][1]["uid"],
        old_uid.as_str()
    );

    env.configmaps()
        .delete("boss", &DeleteParams::default())
        .await
        .unwrap();
    let new_uid = make("boss").await;
    assert_ne!(new_uid, old_uid);

    let adopted = env
        .update(&target, controller_reference("boss"))
        .await
        .unwrap();
    assert_eq!(adopted.outcome, pb::Outcome::Updated);
    let references = json!([
        first.object["metadata"]["ownerReferences"][0].clone(),
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "boss", "uid": new_uid,
         "controller": true, "blockOwnerDeletion": true},
    ]);
    assert_eq!(adopted.object["metadata"]["ownerReferences"], references);
    let stored = env.configmaps().get("owned").await.unwrap();
    assert_eq!(
        serde_json::to_value(stored.metadata.owner_references).unwrap(),
        references
    );
    assert_eq!(
        stored.metadata.resource_version,
        Some(adopted.version.to_string())
    );
    let again = env
        .update(&target, controller_reference("boss"))
        .await
        .unwrap();
    assert_eq!(again.outcome, pb::Outcome::Unchanged);
    assert_eq!(again.version, adopted.version);

    let refused = env
        .update(&target, controller_reference("bystander"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(error_reason(&refused), "ALREADY_OWNED");
    let named = format!("ConfigMap/boss (apiVersion v1, uid {new_uid})");
    assert!(refused.message().contains(&named), "{}", refused.message());
    let unchanged = env.configmaps().get("owned").await.unwrap();
    assert_eq!(
        unchanged.metadata.resource_version,
        stored.metadata.resource_version
    );
}

/// 8 controllers upsert their own route-parent entry, each several times, while an
/// outside writer keeps replacing the whole list (a merge patch of a list built from a
/// stale cache): each OK's answer holds the caller's entry as it wrote it, and so does
/// the stored version it names, seen through a watch of every version.
#[tokio::test]
async fn route_parents_of_eight_controllers_survive_an_outside_writer() {
    let env = Env::new("parents").await;
    env.create("Gadget", "gadgets", "r", json!({})).await;
    let api = env.resource("Gadget", "gadgets");
    let start = api
        .get("r")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    // The server ends the watch after a few seconds, well after the writes.
    let params = WatchParams::default().fields("metadata.name=r").timeout(8);
    let mut watch = api.watch(&params, &start).await.unwrap().boxed();
    let versions = tokio::spawn(async move {
        let mut seen: BTreeMap<u64, Value> = BTreeMap::new();
        while let Some(Ok(event)) = watch.next().await {
            if let WatchEvent::Modified(object) = event {
                let object = serde_json::to_value(object).unwrap();
                let rv = object["metadata"]["resourceVersion"].as_str().unwrap();
                seen.insert(rv.parse().unwrap(), object["status"]["parents"].clone());
            }
        }
        seen
    });
    let target = env.target("test.safewrite.dev/v1", "Gadget", "r");
    let outside = async {
        for round in 0..20 {
            let parents = json!([{"controllerName": "outside", "round": round}]);
            let patch = Patch::Merge(json!({"status": {"parents": parents}}));
            api.patch_status("r", &PatchParams::default(), &patch)
                .await
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(15)).await;
        }
    };
    let controllers = futures::future::join_all((0..8).map(|c| {
        let (env, target) = (&env, &target);
        async move {
            let mut calls = Vec::new();
            for round in 0..5 {
                let entry = json!({"controllerName": format!("c{c}.example.com"), "round": round});
                let kind = pb::mutation::Kind::ListEntry(pb::ListEntryChange {
                    path: "status.parents".into(),
                    keys: vec!["controllerName".into()],
                    entry_json: entry.to_string(),
                    remove: false,
                });
                let answer = env.patch_status(target, kind).await.expect("upsert");
                calls.push((entry, answer));
            }
            calls
        }
    }));
    let ((), calls) = tokio::join!(outside, controllers);
    let seen = versions.await.expect("the watch");
    let holds = |parents: &Value, entry: &Value| {
        parents
            .as_array()
            .is_some_and(|list| list.iter().any(|p| p == entry))
    };
    let calls: Vec<(Value, Written)> = calls.into_iter().flatten().collect();
    for (entry, answer) in &calls {
        assert_eq!(answer.outcome, pb::Outcome::Updated);
        assert!(
            holds(&answer.object["status"]["parents"], entry),
            "the answer holds {entry}: {:?}",
            answer.object
        );
        let stored = seen
            .get(&answer.version)
            .unwrap_or_else(|| panic!("version {} not seen by the watch", answer.version));
        assert!(
            holds(stored, entry),
            "version {} holds {entry}: {stored}",
            answer.version
        );
    }
    report(
        "route parents beside an outside writer",
        &calls.iter().map(|(_, w)| w).collect::<Vec<_>>(),
    );
}

/// Conditions of a kind without a status subresource go through UpdateWithRetry; a
/// condition set on a remembered copy that another writer made stale is not answered
/// UNCHANGED from it: the live read that confirms it finds the change and the set is
/// written.
#[tokio::test]
async fn conditions_without_a_status_subresource_and_a_stale_remembered_copy() {
    let env = Env::new("nostatus").await;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "sprockets.test.safewrite.dev"},
        "spec": {"group": "test.safewrite.dev", "scope": "Namespaced",
            "names": {"plural": "sprockets", "kind": "Sprocket"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}}))
    .unwrap();
    support::create_crd(&env.kube, crd).await;
    let target = env.target("test.safewrite.dev/v1", "Sprocket", "s");
    let mut made = false;
    for _ in 0..100 {
        let object: Result<DynamicObject, _> = serde_json::from_value(json!({
            "apiVersion": "test.safewrite.dev/v1", "kind": "Sprocket", "metadata": {"name": "s"}}));
        if env
            .resource("Sprocket", "sprockets")
            .create(&PostParams::default(), &object.unwrap())
            .await
            .is_ok()
        {
            made = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(made, "the Sprocket kind is served");
    let first = env
        .update(&target, set("Ready", "True", "Up", None))
        .await
        .unwrap();
    assert_eq!(first.outcome, pb::Outcome::Updated);
    assert_eq!(first.conditions()[0]["status"], "True");
    // Another writer, straight to the API server, turns it False.
    let outside = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
        "reason": "Down", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    env.resource("Sprocket", "sprockets")
        .patch("s", &PatchParams::default(), &Patch::Merge(outside))
        .await
        .unwrap();
    // The sidecar's copy still says True/Up: the same set must still be written.
    let again = env
        .update(&target, set("Ready", "True", "Up", None))
        .await
        .unwrap();
    assert_eq!(again.outcome, pb::Outcome::Updated, "{again:?}");
    assert_eq!(again.conditions()[0]["status"], "True");
    assert_ne!(
        again.conditions()[0]["lastTransitionTime"],
        "2026-01-01T00:00:00Z",
        "a status change moves the time"
    );
}
