//! Injection for real: deploy/kubernetes/injection/policy.yaml on the node's control
//! plane, and what it does to Pods that the kubelet then runs.
//!
//! - A Deployment with no sidecar, in a namespace labelled for injection: its
//!   ReplicaSet's Pod runs with the injected sidecar and writes through it.
//! - A Pod labelled `safewrite.dev/inject: disabled` in that namespace runs as written,
//!   without the sidecar.
//! - Fails closed: the policy takes no parameters (so none can be missing); when its
//!   expression fails on a Pod, the Pod is refused at admission, never created without
//!   the sidecar. Shown with the policy as the file writes it (its `failurePolicy`
//!   included) but one variable's expression made to fail, bound to a namespace of its
//!   own.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::{Node, count, create_clean, create_counter, install_manifest, labelled_namespace};
use crate::deploy::submit;
use crate::support::repo_root;

/// deploy/kubernetes/injection/policy.yaml's documents.
pub(super) fn policy_documents() -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join("deploy/kubernetes/injection/policy.yaml"))
        .expect("read policy.yaml");
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

pub(super) async fn create_all(client: &kube::Client, namespace: &str, objects: &[Value]) {
    for object in objects {
        let answer = submit(client, namespace, object, false).await;
        assert_eq!(answer.status, http::StatusCode::CREATED, "{}", answer.body);
    }
}

/// A Pod of one container that a restricted namespace admits.
fn plain_pod(name: &str, image: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"enableServiceLinks": false, "containers": [{"name": "c", "image": image,
            "imagePullPolicy": "Never",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"}}}]}})
}

pub(super) fn injected(pod: &Value) -> bool {
    pod["spec"]["initContainers"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["name"] == "safewrite"))
}

/// Installs deploy/kubernetes/injection/policy.yaml (cluster-wide; the node's control
/// plane is its own) once, and waits until it injects: a dry-run Pod in `namespace`
/// comes out with the sidecar.
async fn install_injection(client: &kube::Client, namespace: &str) {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async { create_all(client, namespace, &policy_documents()).await })
        .await;
    let probe = plain_pod("probe", "example.invalid/c:1", json!({}));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = submit(client, namespace, &probe, true).await;
        if injected(&answer.body) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the policy never injected: {}",
            answer.body
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_without_a_sidecar_gets_one_injected_and_writes_through_it() {
    let Some(node) = Node::shared() else { return };
    let client = node.admin_client().await;
    let ns = labelled_namespace(
        &client,
        "node-inject",
        &[("safewrite.dev/inject", "enabled")],
    )
    .await;
    // sidecar.yaml's service account and Role; its Deployment is not created.
    install_manifest(&client, &ns).await;
    create_counter(&client, &ns, "counter").await;
    install_injection(&client, &ns).await;

    const WORKERS: u64 = 4;
    const WRITES: u64 = 25;
    let restricted = json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
        "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "injected"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "injected"}},
            "template": {
                "metadata": {"labels": {"app": "injected"},
                    "annotations": {"safewrite.dev/image": node.image()}},
                "spec": {"serviceAccountName": "my-controller", "enableServiceLinks": false,
                    "containers": [{"name": "controller",
                        "image": node.env["CONTROLLER_IMAGE"], "imagePullPolicy": "Never",
                        "env": [
                            {"name": "POD_NAMESPACE",
                             "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "WORKERS", "value": WORKERS.to_string()},
                            {"name": "WRITES", "value": WRITES.to_string()},
                            {"name": "HOLD", "value": "1"}],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        "securityContext": restricted}]}}}});
    let created = Instant::now();
    create_clean(&client, &ns, &deployment).await;

    // The ReplicaSet's Pod runs with the injected sidecar, and every write lands.
    let deadline = Instant::now() + Duration::from_secs(180);
    while count(&client, &ns, "counter").await < WORKERS * WRITES {
        assert!(
            Instant::now() < deadline,
            "the injected pod's writes did not all land"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let landed = created.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(count(&client, &ns, "counter").await, WORKERS * WRITES);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels("app=injected"))
        .await
        .expect("list pods");
    assert_eq!(list.items.len(), 1);
    let pod = serde_json::to_value(&list.items[0]).unwrap();
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet",
        "{pod:#}"
    );
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "safewrite", "{pod:#}");
    assert_eq!(sidecar["restartPolicy"], "Always", "{pod:#}");
    assert_eq!(sidecar["image"], node.image(), "{pod:#}");
    assert_eq!(pod["status"]["phase"], "Running", "{pod:#}");
    eprintln!(
        "node injection: the Deployment's pod ran with the injected sidecar; {} writes \
         landed {:.1}s after the Deployment's create",
        WORKERS * WRITES,
        landed.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_labelled_disabled_runs_without_the_sidecar() {
    let Some(node) = Node::shared() else { return };
    let client = node.admin_client().await;
    let ns = labelled_namespace(
        &client,
        "node-optout",
        &[("safewrite.dev/inject", "enabled")],
    )
    .await;
    install_injection(&client, &ns).await;

    let pod = plain_pod(
        "opted-out",
        &node.env["PAUSE_IMAGE"],
        json!({"safewrite.dev/inject": "disabled"}),
    );
    let answer = submit(&client, &ns, &pod, false).await;
    assert_eq!(answer.status, http::StatusCode::CREATED, "{}", answer.body);
    assert!(
        !injected(&answer.body),
        "injected anyway: {:#}",
        answer.body
    );
    // The same Pod without the label, in the same namespace, would be injected.
    let mut other = plain_pod("opted-in", &node.env["PAUSE_IMAGE"], json!({}));
    other["metadata"]["name"] = json!("opted-in");
    let dry = submit(&client, &ns, &other, true).await;
    assert!(injected(&dry.body), "{:#}", dry.body);

    // And the kubelet runs it as written: one container, no sidecar, no address.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    let pod = loop {
        let pod = serde_json::to_value(pods.get("opted-out").await.expect("get pod")).unwrap();
        if pod["status"]["phase"] == "Running" {
            break pod;
        }
        assert!(Instant::now() < deadline, "not running: {pod:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(pod["spec"]["initContainers"].is_null(), "{pod:#}");
    assert_eq!(pod["spec"]["containers"].as_array().map(Vec::len), Some(1));
    assert!(pod["spec"]["containers"][0]["env"].is_null(), "{pod:#}");
    assert_eq!(
        pod["status"]["containerStatuses"][0]["ready"], true,
        "{pod:#}"
    );
    eprintln!("node injection: the Pod labelled disabled ran without the sidecar");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_the_policy_fails_on_is_refused_never_started_without_the_sidecar() {
    let Some(node) = Node::shared() else { return };
    let client = node.admin_client().await;
    // The policy as written, one variable made to fail on every Pod (a key no Pod has,
    // read without `?`), bound only to namespaces labelled for this test.
    const NAME: &str = "safewrite-inject-failing";
    let mut broken = Vec::new();
    for mut doc in policy_documents() {
        match doc["kind"].as_str() {
            Some("MutatingAdmissionPolicy") => {
                assert_eq!(
                    doc["spec"]["failurePolicy"], "Fail",
                    "the policy must fail closed: {doc:#}"
                );
                doc["metadata"]["name"] = json!(NAME);
                let image = doc["spec"]["variables"]
                    .as_array_mut()
                    .expect("variables")
                    .iter_mut()
                    .find(|v| v["name"] == "image")
                    .expect("the image variable");
                image["expression"] =
                    json!("object.metadata.annotations['safewrite.test/no-such-key']");
                broken.push(doc);
            }
            Some("MutatingAdmissionPolicyBinding")
                if doc["spec"]["matchResources"]["namespaceSelector"].is_object() =>
            {
                doc["metadata"]["name"] = json!(NAME);
                doc["spec"]["policyName"] = json!(NAME);
                doc["spec"]["matchResources"]["namespaceSelector"] =
                    json!({"matchLabels": {"safewrite.test/failing-injection": "yes"}});
                broken.push(doc);
            }
            _ => {}
        }
    }
    assert_eq!(broken.len(), 2, "a policy and its namespace binding");
    let ns = labelled_namespace(
        &client,
        "node-failclosed",
        &[("safewrite.test/failing-injection", "yes")],
    )
    .await;
    create_all(&client, &ns, &broken).await;

    // Until the new policy is in force a Pod may still be admitted: wait for the first
    // refusal with dry runs, then create for real.
    let pod = plain_pod("asked", &node.env["PAUSE_IMAGE"], json!({}));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dry = submit(&client, &ns, &pod, true).await;
        if dry.status != http::StatusCode::CREATED {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the failing policy never applied: {:#}",
            dry.body
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let answer = submit(&client, &ns, &pod, false).await;
    assert_ne!(
        answer.status,
        http::StatusCode::CREATED,
        "{:#}",
        answer.body
    );
    let message = answer.body["message"].as_str().unwrap_or_default();
    assert!(message.contains(NAME), "{:#}", answer.body);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert!(
        pods.get_opt("asked").await.expect("get pod").is_none(),
        "a Pod that asked for injection exists without it"
    );
    eprintln!(
        "node injection: a Pod the policy fails on is refused ({}): {}",
        answer.status,
        message.chars().take(200).collect::<String>()
    );
}
