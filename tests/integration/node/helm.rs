//! The Helm chart's Deployment on the node: `helm template deploy/helm/safewrite` with
//! the image under test and the node's controller program as the chart's controller,
//! applied as rendered (ServiceAccount, Role, RoleBinding, Deployment) into a namespace
//! that enforces PodSecurity `restricted`. The Deployment's Pod runs the sidecar as a
//! native sidecar, started and ready before the controller starts, with the chart's
//! securityContext, and the controller's 16 × 50 read-dependent increments through it
//! land exactly.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::{
    Node, assert_restricted_runtime, count, create_clean, create_counter, restricted_namespace,
    time_of,
};
use crate::deploy::{deploy_tools, pinned, run};

/// `name:tag` split at the tag's colon.
fn split_image(image: &str) -> (&str, &str) {
    image.rsplit_once(':').expect("an image with a tag")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helm_charts_deployment_runs_with_its_sidecar_in_a_restricted_namespace() {
    let Some(node) = Node::shared() else { return };
    let client = node.admin_client().await;
    let ns = restricted_namespace(&client, "node-helm").await;
    create_counter(&client, &ns, "counter").await;

    const WORKERS: u64 = 16;
    const WRITES: u64 = 50;
    let (repository, tag) = split_image(node.image());
    let (controller_repository, controller_tag) = split_image(&node.env["CONTROLLER_IMAGE"]);
    let values = json!({
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "controller": {
            "image": {"repository": controller_repository, "tag": controller_tag,
                "pullPolicy": "Never"},
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                "limits": {"memory": "64Mi"}},
            "env": [
                {"name": "POD_NAMESPACE",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "WORKERS", "value": WORKERS.to_string()},
                {"name": "WRITES", "value": WRITES.to_string()},
                {"name": "HOLD", "value": "1"}]},
    });
    let file = tempfile::NamedTempFile::new().expect("values file");
    std::fs::write(file.path(), values.to_string()).expect("write values");
    let rendered = run(
        &deploy_tools().join("helm"),
        &[
            "template",
            "safewrite",
            "deploy/helm/safewrite",
            "--namespace",
            &ns,
            "--kube-version",
            &pinned("KUBERNETES_VERSION"),
            "--values",
            &file.path().display().to_string(),
        ],
    );
    let objects: Vec<Value> = serde_saphyr::from_multiple::<Value>(&rendered)
        .expect("helm's YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(kinds.contains(&"Deployment"), "{kinds:?}");
    let created = Instant::now();
    for object in &objects {
        create_clean(&client, &ns, object).await;
    }

    // Every increment lands through the sidecar of the Deployment's Pod.
    let deadline = Instant::now() + Duration::from_secs(180);
    while count(&client, &ns, "counter").await < WORKERS * WRITES {
        assert!(
            Instant::now() < deadline,
            "the chart's pod did not make its writes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let landed = created.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(count(&client, &ns, "counter").await, WORKERS * WRITES);

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods.list(&ListParams::default()).await.expect("list pods");
    assert_eq!(list.items.len(), 1, "one replica");
    let pod = serde_json::to_value(&list.items[0]).unwrap();
    assert_eq!(pod["status"]["phase"], "Running", "{pod:#}");
    let sidecar = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(sidecar["name"], "safewrite", "{pod:#}");
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(sidecar["started"], true, "{pod:#}");
    assert_eq!(sidecar["ready"], true, "{pod:#}");
    let controller = &pod["status"]["containerStatuses"][0];
    assert_eq!(controller["name"], "controller", "{pod:#}");
    assert_eq!(controller["restartCount"], 0, "{pod:#}");
    assert!(
        time_of(sidecar, "/state/running/startedAt")
            <= time_of(controller, "/state/running/startedAt"),
        "the controller started before the sidecar: {pod:#}"
    );
    let id = sidecar["containerID"].as_str().expect("the sidecar's id");
    assert_restricted_runtime(node, id.trim_start_matches("containerd://"));
    eprintln!(
        "node helm: the chart's Deployment ({}) ran its Pod with the sidecar; {} writes \
         landed {:.1}s after the create",
        kinds.join(", "),
        WORKERS * WRITES,
        landed.as_secs_f64()
    );
}
