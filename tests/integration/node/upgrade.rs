//! Upgrading the sidecar on the node, to a second image (`SAFEWRITE_NEXT_IMAGE`: tests/
//! harness/node.sh imports deploy/image/build.sh's image once more, the same binary under
//! a config labelled `VERSION-next`, so with another config and manifest digest, as a
//! next release's):
//!
//! - in a running pod: the sidecar's image is changed in place (a patch of
//!   `spec.initContainers[0].image`, which the API server allows on a running Pod) while
//!   the controller makes keyed writes through it. The kubelet restarts the sidecar alone
//!   (its restartCount goes up by one, the controller's stays 0), the pod never leaves
//!   Running, the controller's writes wait out the restart (sent again with their keys
//!   while nothing listens) and every key is applied exactly once: each write records its
//!   value of the counter under a data key of its own, so the final object shows a
//!   doubled write (a value missing, the count above the keys) or a lost one (a key
//!   missing);
//! - by injection: the injection policy pointed at the new image (its default image
//!   replaced, as deploy/kubernetes/kustomize/overlays/injection does) injects it into
//!   new Pods, while a Pod injected before keeps the old image and its running sidecar.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::inject::{create_all, injected, policy_documents};
use super::{
    Node, count, create_counter, install_manifest, installed, labelled_namespace, pod_spec,
};
use crate::deploy::submit;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// The status of the pod's sidecar (`safewrite` among its init containers), or Null.
fn sidecar_status(pod: &Value) -> Value {
    pod["status"]["initContainerStatuses"]
        .as_array()
        .and_then(|s| s.iter().find(|c| c["name"] == "safewrite"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Whether the runtime's `image_id` for a container names the image of manifest
/// `digest` and ID (config digest) `id`: by its ID, or by a repo digest.
fn is_image(image_id: &Value, digest: &str, id: &str) -> bool {
    image_id
        .as_str()
        .is_some_and(|i| i == id || i.ends_with(&format!("@{digest}")))
}

/// What container `name` of `pod` has written to stdout and stderr so far (its first
/// run), read from the kubelet's log file (the CRI format: time, stream, tag, line).
fn container_log(node: &Node, pod: &Value, name: &str) -> String {
    let path = format!(
        "{}/{}_{}_{}/{name}/0.log",
        node.env["POD_LOGS"],
        pod["metadata"]["namespace"].as_str().expect("namespace"),
        pod["metadata"]["name"].as_str().expect("name"),
        pod["metadata"]["uid"].as_str().expect("uid"),
    );
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// One write's answer, as the controller printed it (RECORD mode).
#[derive(Debug)]
struct Answer {
    write: String,
    value: u64,
    already_applied: bool,
    resent: u64,
    sent_ms: i64,
    answered_ms: i64,
    error: String,
}

impl Answer {
    /// From the controller's JSON line.
    fn parse(line: &str) -> Answer {
        let v: Value = serde_json::from_str(line).expect("an answer line");
        let int = |key: &str| {
            v[key]
                .as_i64()
                .unwrap_or_else(|| panic!("no {key}: {line}"))
        };
        Answer {
            write: v["write"].as_str().expect("write").to_string(),
            value: int("value") as u64,
            already_applied: v["already_applied"] == true,
            resent: int("resent") as u64,
            sent_ms: int("sent_ms"),
            answered_ms: int("answered_ms"),
            error: v["error"].as_str().unwrap_or_default().to_string(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_pods_sidecar_upgraded_in_place_loses_no_keyed_write() {
    let Some(node) = Node::shared() else { return };
    let (old_image, new_image) = (node.image(), &node.env["SAFEWRITE_NEXT_IMAGE"]);
    let (old_digest, new_digest) = (
        &node.env["SAFEWRITE_IMAGE_DIGEST"],
        &node.env["SAFEWRITE_NEXT_IMAGE_DIGEST"],
    );
    let (old_id, new_id) = (
        &node.env["SAFEWRITE_IMAGE_ID"],
        &node.env["SAFEWRITE_NEXT_IMAGE_ID"],
    );
    assert_ne!(old_digest, new_digest, "the two builds are one image");
    let (client, ns, deployment) = installed(node, "node-upgrade").await;
    create_counter(&client, &ns, "counter").await;

    // 4 workers, each write keyed and recorded, 50 ms apart, for 12 s: the sidecar is
    // upgraded about a second in, and the writes go on well after it is back.
    const WORKERS: usize = 4;
    let controller_image = node.env["CONTROLLER_IMAGE"].clone();
    let spec = pod_spec(&deployment, old_image, 1, |c, _| {
        c["image"] = json!(controller_image);
        let env = c["env"].as_array_mut().expect("the controller's env");
        env.push(json!({"name": "POD_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}));
        for (name, value) in [
            ("WORKERS", WORKERS.to_string().as_str()),
            ("WRITES", "1000"),
            ("KEYED", "1"),
            ("RECORD", "1"),
            ("PACE", "50ms"),
            ("DURATION", "12s"),
            ("HOLD", "1"),
        ] {
            env.push(json!({"name": name, "value": value}));
        }
    });
    let controller = spec["containers"][0]["name"]
        .as_str()
        .expect("the controller's name")
        .to_string();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "upgraded"},
        "spec": spec});
    let created = Instant::now();
    let answer = submit(&client, &ns, &pod, false).await;
    assert_eq!(answer.status, http::StatusCode::CREATED, "{}", answer.body);

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let get = || async {
        serde_json::to_value(pods.get("upgraded").await.expect("get the pod")).unwrap()
    };
    // Running, its sidecar started, and writes landing.
    let deadline = Instant::now() + Duration::from_secs(120);
    let before = loop {
        let pod = get().await;
        if pod["status"]["phase"] == "Running"
            && sidecar_status(&pod)["started"] == true
            && count(&client, &ns, "counter").await >= 40
        {
            break pod;
        }
        assert!(
            Instant::now() < deadline,
            "the pod never got going: {pod:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let old_sidecar = sidecar_status(&before);
    assert_eq!(old_sidecar["restartCount"], 0, "{before:#}");
    assert!(
        is_image(&old_sidecar["imageID"], old_digest, old_id),
        "{old_sidecar:#}"
    );

    // The upgrade: the sidecar's image changed on the running Pod, as `kubectl set
    // image` does it (a strategic merge patch, init containers merged by name).
    let patched_ms = now_ms();
    let patched = Instant::now();
    pods.patch(
        "upgraded",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"initContainers": [
            {"name": "safewrite", "image": new_image}]}})),
    )
    .await
    .expect("change the sidecar's image");

    // Watch the pod until the controller has made its writes and printed their answers:
    // Running at every look, the sidecar restarted once, the controller never.
    let mut looks = 0u32;
    let mut restarted = None; // the new sidecar running, since the patch
    let mut started = None; // its startup probe passed
    let mut ready = None;
    let mut last_log = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (pod, log) = loop {
        let pod = get().await;
        looks += 1;
        assert_eq!(
            pod["status"]["phase"],
            "Running",
            "the pod left Running {:.2}s after the patch: {pod:#}",
            patched.elapsed().as_secs_f64()
        );
        let sidecar = sidecar_status(&pod);
        let restarts = sidecar["restartCount"].as_u64().unwrap_or(0);
        assert!(restarts <= 1, "the sidecar restarted twice: {pod:#}");
        if restarts == 1 && sidecar["state"]["running"].is_object() {
            restarted.get_or_insert(patched.elapsed());
            if sidecar["started"] == true {
                started.get_or_insert(patched.elapsed());
            }
            if sidecar["ready"] == true {
                ready.get_or_insert(patched.elapsed());
            }
        }
        assert_eq!(
            pod["status"]["containerStatuses"][0]["restartCount"], 0,
            "the controller restarted: {pod:#}"
        );
        // Its answers are printed once DURATION is over.
        if started.is_some() && last_log.elapsed() > Duration::from_secs(1) {
            last_log = Instant::now();
            let log = container_log(node, &pod, &controller);
            if log.lines().any(|l| l.contains("\"workers\"")) {
                break (pod, log);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no report from the controller 60 s after the patch (sidecar restarted: \
             {restarted:?}, started: {started:?}): {pod:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let restarted = restarted.expect("seen before it started");
    let started = started.expect("the loop waits for it");

    // The pod as it runs now: the sidecar on the new image, restarted once, the old
    // container stopped cleanly (it drained on SIGTERM).
    assert_eq!(
        pod["spec"]["initContainers"][0]["image"],
        new_image.as_str()
    );
    assert_eq!(pod["spec"]["containers"][0]["image"], controller_image);
    let sidecar = sidecar_status(&pod);
    assert_eq!(sidecar["restartCount"], 1, "{sidecar:#}");
    assert_eq!(sidecar["image"], new_image.as_str(), "{sidecar:#}");
    assert!(
        is_image(&sidecar["imageID"], new_digest, new_id),
        "the new sidecar runs another image: {sidecar:#}"
    );
    assert_ne!(sidecar["containerID"], old_sidecar["containerID"]);
    let stopped = &sidecar["lastState"]["terminated"];
    assert_eq!(
        stopped["containerID"], old_sidecar["containerID"],
        "{sidecar:#}"
    );
    assert_eq!(
        stopped["exitCode"], 0,
        "the old sidecar's exit: {sidecar:#}"
    );

    // Every write answered OK, once per key, and the final object agrees with every
    // answer.
    let answers: Vec<Answer> = log
        .lines()
        .filter(|l| l.starts_with("{\"write\""))
        .map(Answer::parse)
        .collect();
    let failed: Vec<&Answer> = answers.iter().filter(|a| !a.error.is_empty()).collect();
    assert!(failed.is_empty(), "writes failed: {failed:#?}");
    let data = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("counter")
        .await
        .expect("get the counter")
        .data
        .unwrap_or_default();
    let n: u64 = data["n"].parse().expect("a number");
    let mut keys: BTreeMap<&str, u64> = BTreeMap::new();
    for a in &answers {
        assert!(
            keys.insert(&a.write, a.value).is_none(),
            "{} answered twice",
            a.write
        );
        let recorded = data
            .get(&a.write)
            .map(|v| v.parse::<u64>().expect("a number"));
        assert_eq!(
            recorded,
            Some(a.value),
            "write {} was answered {a:?}, the object records {recorded:?}",
            a.write
        );
    }
    assert_eq!(
        data.len() - 1,
        answers.len(),
        "the object records writes no answer names"
    );
    assert_eq!(n, answers.len() as u64, "the count is not the keys applied");
    let mut values: Vec<u64> = keys.values().copied().collect();
    values.sort_unstable();
    assert!(
        values.iter().copied().eq(1..=n),
        "a key applied twice leaves a value out: {values:?}"
    );

    // The restart as the controller saw it: the longest time without an answer after
    // the patch, and the writes that waited through it.
    let mut times: Vec<i64> = answers.iter().map(|a| a.answered_ms).collect();
    times.sort_unstable();
    let (gap_from, gap_to) = times
        .windows(2)
        .filter(|w| w[1] >= patched_ms)
        .map(|w| (w[0], w[1]))
        .max_by_key(|(a, b)| b - a)
        .expect("answers after the patch");
    let waited: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.sent_ms < gap_to && a.answered_ms >= gap_to)
        .collect();
    let resent: u64 = answers.iter().map(|a| a.resent).sum();
    let already = answers.iter().filter(|a| a.already_applied).count();
    let after = answers.iter().filter(|a| a.answered_ms > gap_to).count();
    assert!(
        resent > 0,
        "no write was sent again: the controller never saw the sidecar go"
    );
    assert!(
        after >= 40,
        "only {after} writes answered after the restart"
    );
    let during = answers
        .iter()
        .filter(|a| a.answered_ms >= patched_ms && a.answered_ms <= gap_to)
        .count();
    eprintln!(
        "node upgrade: sidecar {old_image} -> {new_image} ({} -> {}) on a running pod \
         ({} writers, keyed, 50 ms apart): the pod Running at all {looks} looks (every \
         50 ms), sidecar restartCount 0 -> 1 (the controller's 0), the old one exited {} \
         ({} to {}), the new one running {:.2}s after the patch (started {}), startup \
         probe passed {:.2}s after, ready {}; no answer for {} ms (last answer {} ms \
         after the patch, first after the restart {} ms after); {during} writes answered \
         from the patch to the first after the restart, {} waited through the restart \
         ({resent} sends again in all, {already} answered already-applied); {} writes, \
         each key applied once (count {n}), {after} after the restart; {:.1}s from the \
         create",
        &old_digest[..19],
        &new_digest[..19],
        WORKERS,
        stopped["exitCode"],
        stopped["startedAt"].as_str().unwrap_or("?"),
        stopped["finishedAt"].as_str().unwrap_or("?"),
        restarted.as_secs_f64(),
        sidecar["state"]["running"]["startedAt"]
            .as_str()
            .unwrap_or("?"),
        started.as_secs_f64(),
        ready.map_or("not seen".into(), |d| format!(
            "{:.2}s after",
            d.as_secs_f64()
        )),
        gap_to - gap_from,
        gap_from - patched_ms,
        gap_to - patched_ms,
        waited.len(),
        answers.len(),
        created.elapsed().as_secs_f64(),
    );
}

/// The controller of a Pod the injection policy is to give a sidecar: `writes`
/// increments of `counter` through it, then it stays up (the Pod stays Running).
fn uninjected_pod(node: &Node, name: &str, counter: &str, writes: u64) -> Value {
    let restricted = json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
        "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"serviceAccountName": "my-controller", "enableServiceLinks": false,
            "containers": [{"name": "controller",
                "image": node.env["CONTROLLER_IMAGE"], "imagePullPolicy": "Never",
                "env": [
                    {"name": "POD_NAMESPACE",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "WORKERS", "value": "2"},
                    {"name": "WRITES", "value": (writes / 2).to_string()},
                    {"name": "COUNTER", "value": counter},
                    {"name": "HOLD", "value": "1"}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "securityContext": restricted}]}})
}

/// The injection policy's `image` variable with `default` as its default, the way
/// deploy/kubernetes/kustomize/overlays/injection writes it.
fn image_variable(default: &str) -> Value {
    json!({"name": "image", "expression": format!(
        "object.metadata.?annotations[?'safewrite.dev/image'].orValue('{default}')")})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injection_policy_pointed_at_a_new_image_injects_it_into_new_pods_only() {
    let Some(node) = Node::shared() else { return };
    let (old_image, new_image) = (node.image(), &node.env["SAFEWRITE_NEXT_IMAGE"]);
    let client = node.admin_client().await;
    // The policy as the file writes it, its default image set the way the kustomize
    // overlay sets it, bound only to a namespace labelled for this test (the policy is
    // cluster-wide; other tests' Pods keep the file's).
    const NAME: &str = "safewrite-inject-upgrade";
    const LABEL: &str = "safewrite.test/upgrade-injection";
    let mut objects = Vec::new();
    for mut doc in policy_documents() {
        match doc["kind"].as_str() {
            Some("MutatingAdmissionPolicy") => {
                doc["metadata"]["name"] = json!(NAME);
                let variables = doc["spec"]["variables"].as_array_mut().expect("variables");
                assert_eq!(variables[0]["name"], "image", "the overlay's path");
                variables[0] = image_variable(old_image);
                objects.push(doc);
            }
            Some("MutatingAdmissionPolicyBinding")
                if doc["spec"]["matchResources"]["namespaceSelector"].is_object() =>
            {
                doc["metadata"]["name"] = json!(NAME);
                doc["spec"]["policyName"] = json!(NAME);
                doc["spec"]["matchResources"]["namespaceSelector"] =
                    json!({"matchLabels": {LABEL: "yes"}});
                objects.push(doc);
            }
            _ => {}
        }
    }
    assert_eq!(objects.len(), 2, "a policy and its namespace binding");
    let ns = labelled_namespace(&client, "node-reinject", &[(LABEL, "yes")]).await;
    install_manifest(&client, &ns).await;
    create_counter(&client, &ns, "old").await;
    create_counter(&client, &ns, "new").await;
    create_all(&client, &ns, &objects).await;

    // Until a policy (or its change) is in force, a Pod may be admitted without it:
    // dry runs until one comes out with `image`.
    let injects = |image: String| {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            let probe = uninjected_pod(node, "probe", "old", 2);
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let dry = submit(&client, &ns, &probe, true).await;
                if injected(&dry.body) && dry.body["spec"]["initContainers"][0]["image"] == image {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "the policy never injected {image}: {:#}",
                    dry.body
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // Running with its sidecar started, its writes landed.
    let running = |name: &'static str, counter: &'static str| {
        let (client, ns, pods) = (client.clone(), ns.clone(), pods.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let pod = serde_json::to_value(pods.get(name).await.expect("get pod")).unwrap();
                if pod["status"]["phase"] == "Running"
                    && sidecar_status(&pod)["started"] == true
                    && count(&client, &ns, counter).await == 20
                {
                    return pod;
                }
                assert!(Instant::now() < deadline, "{name} never wrote: {pod:#}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };

    let began = Instant::now();
    injects(old_image.to_string()).await;
    let answer = submit(&client, &ns, &uninjected_pod(node, "old", "old", 20), false).await;
    assert_eq!(answer.status, http::StatusCode::CREATED, "{}", answer.body);
    let old_before = running("old", "old").await;

    // Pointed at the new image: the variable replaced, as applying the overlay with a
    // new image does.
    let policies: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingAdmissionPolicy",
        )),
    );
    let mut variables = objects[0]["spec"]["variables"].clone();
    variables[0] = image_variable(new_image);
    let pointed = Instant::now();
    policies
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"variables": variables}})),
        )
        .await
        .expect("point the policy at the new image");
    injects(new_image.to_string()).await;
    let in_force = pointed.elapsed();
    let answer = submit(&client, &ns, &uninjected_pod(node, "new", "new", 20), false).await;
    assert_eq!(answer.status, http::StatusCode::CREATED, "{}", answer.body);
    let new = running("new", "new").await;
    let old = serde_json::to_value(pods.get("old").await.expect("get pod")).unwrap();

    // The new Pod runs the new image; the old one still the old, its sidecar the same
    // container as before the change, never restarted.
    let images = |pod: &Value| {
        let sidecar = sidecar_status(pod);
        (
            pod["spec"]["initContainers"][0]["image"].clone(),
            sidecar["imageID"].clone(),
        )
    };
    let (new_spec, new_running) = images(&new);
    let (old_spec, old_running) = images(&old);
    assert_eq!(new_spec, new_image.as_str(), "{new:#}");
    assert_eq!(old_spec, old_image, "{old:#}");
    assert!(
        is_image(
            &new_running,
            &node.env["SAFEWRITE_NEXT_IMAGE_DIGEST"],
            &node.env["SAFEWRITE_NEXT_IMAGE_ID"]
        ),
        "{new:#}"
    );
    assert!(
        is_image(
            &old_running,
            &node.env["SAFEWRITE_IMAGE_DIGEST"],
            &node.env["SAFEWRITE_IMAGE_ID"]
        ),
        "{old:#}"
    );
    assert_eq!(
        sidecar_status(&old)["containerID"],
        sidecar_status(&old_before)["containerID"],
        "{old:#}"
    );
    assert_eq!(sidecar_status(&old)["restartCount"], 0, "{old:#}");
    assert_eq!(old["status"]["phase"], "Running", "{old:#}");
    assert_eq!(count(&client, &ns, "old").await, 20);

    // The policy is cluster-wide: gone with the test, its binding first.
    let bindings: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingAdmissionPolicyBinding",
        )),
    );
    bindings
        .delete(NAME, &Default::default())
        .await
        .expect("delete the binding");
    policies
        .delete(NAME, &Default::default())
        .await
        .expect("delete the policy");
    eprintln!(
        "node upgrade by injection: the policy's default image changed from {old_image} to \
         {new_image}, in force for new Pods {:.2}s after the change; the new Pod runs \
         {new_spec} ({new_running}), the old one still {old_spec} ({old_running}), its \
         sidecar not restarted; both wrote 20 times through their own; {:.1}s in all",
        in_force.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
}
