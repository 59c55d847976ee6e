//! Leader election on the node: a Deployment of 2 replicas from deploy/kubernetes/
//! sidecar.yaml, each pod a sidecar and the node controller in LEASE mode (it campaigns
//! through its sidecar's Lead and makes fenced increments only while it leads). The
//! leader's pod is deleted mid-load: its controller stops, its stream ends, its sidecar
//! releases the Lease, and the other replica leads and writes within the lease duration
//! plus a retry period. Scaled to zero, every pod reports the writes it was told landed:
//! their sum is the count, exactly.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::{Node, count, create_counter, installed, pod_spec};
use crate::deploy::submit;

const LEASE: &str = "counter-leader";
/// The campaign's timings (the controller's LEASE_* variables): lease, renew, retry.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);

/// The Lease's holder and the epoch on it.
async fn holder(leases: &Api<Lease>) -> Option<(String, u64)> {
    let lease = leases.get_opt(LEASE).await.expect("get the Lease")?;
    let epoch = lease
        .metadata
        .annotations
        .unwrap_or_default()
        .get("safewrite.dev/epoch")
        .and_then(|e| e.parse().ok())?;
    let holder = lease.spec?.holder_identity.filter(|h| !h.is_empty())?;
    Some((holder, epoch))
}

/// The epoch of the Lease recorded on the counter by its last fenced write.
async fn counter_epoch(configmaps: &Api<ConfigMap>, lease: &str) -> u64 {
    let cm = configmaps.get("counter").await.expect("get the counter");
    let fence = cm
        .metadata
        .annotations
        .unwrap_or_default()
        .get("safewrite.dev/fence")
        .cloned()
        .unwrap_or_default();
    serde_json::from_str::<BTreeMap<String, u64>>(&fence)
        .ok()
        .and_then(|f| f.get(lease).copied())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_leaders_pod_hands_over_fenced_and_the_count_is_exact() {
    let Some(node) = Node::shared() else { return };
    let (client, ns, deployment) = installed(node, "node-leader").await;
    create_counter(&client, &ns, "counter").await;
    create_counter(&client, &ns, "report").await;
    let controller_image = node.env["CONTROLLER_IMAGE"].clone();
    let mut spec = pod_spec(&deployment, node.image(), 1, |c, _| {
        c["image"] = json!(controller_image);
        let env = c["env"].as_array_mut().expect("the controller's env");
        env.push(json!({"name": "POD_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}));
        for (name, value) in [
            ("LEASE", LEASE),
            ("LEASE_DURATION", "3s"),
            ("RENEW_DEADLINE", "2s"),
            ("RETRY_PERIOD", "500ms"),
            ("WORKERS", "4"),
            ("WRITES", "1000000"),
            ("REPORT", "report"),
            ("HOLD", "1"),
        ] {
            env.push(json!({"name": name, "value": value}));
        }
    });
    // A Deployment's pods restart their containers.
    spec["restartPolicy"] = json!("Always");
    let mut leaders = deployment.clone();
    leaders["metadata"] = json!({"name": "leaders"});
    leaders["spec"]["replicas"] = json!(2);
    leaders["spec"]["template"]["spec"] = spec;
    leaders.as_object_mut().unwrap().remove("status");
    let answer = submit(&client, &ns, &leaders, false).await;
    assert_eq!(answer.status, http::StatusCode::CREATED, "{}", answer.body);

    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let lease = format!("{ns}/{LEASE}");
    // Both replicas running, one leading and writing.
    let deadline = Instant::now() + Duration::from_secs(180);
    let (leader, epoch) = loop {
        let running = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == 2
            && count(&client, &ns, "counter").await >= 100
            && let Some(held) = holder(&leases).await
        {
            break held;
        }
        assert!(Instant::now() < deadline, "the replicas never got going");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(counter_epoch(&configmaps, &lease).await, epoch);

    // Delete the leader's pod mid-load: the other replica leads and writes, fenced.
    let deleted = Instant::now();
    pods.delete(&leader, &Default::default())
        .await
        .expect("delete the leader's pod");
    let (next, next_epoch) = loop {
        if let Some((holder, e)) = holder(&leases).await
            && holder != leader
        {
            break (holder, e);
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(60),
            "nobody took over from {leader}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let led = deleted.elapsed();
    assert!(
        next_epoch > epoch,
        "{next} leads under {next_epoch}, not above {epoch}"
    );
    while counter_epoch(&configmaps, &lease).await < next_epoch {
        assert!(
            deleted.elapsed() < Duration::from_secs(60),
            "{next} never wrote the counter"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wrote = deleted.elapsed();
    let at_handover = count(&client, &ns, "counter").await;
    while count(&client, &ns, "counter").await < at_handover + 100 {
        assert!(
            deleted.elapsed() < Duration::from_secs(90),
            "{next} stopped writing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Scale to zero: every pod stops, reports what was acknowledged to it, and goes.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .patch(
            "leaders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale to zero");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the pods did not go");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let report = configmaps
        .get("report")
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    let acked: BTreeMap<String, u64> = report
        .iter()
        .filter(|(k, _)| k.as_str() != "n")
        .map(|(k, v)| (k.clone(), v.parse().expect("a number")))
        .collect();
    let counted = count(&client, &ns, "counter").await;
    assert!(
        acked.contains_key(&leader) && acked.contains_key(&next),
        "{acked:?}"
    );
    assert_eq!(
        acked.values().sum::<u64>(),
        counted,
        "every acknowledged write landed, and no other: {acked:?}"
    );
    eprintln!(
        "node leader: {leader} (epoch {epoch}) deleted; {next} led after {:.2}s (epoch \
         {next_epoch}) and wrote after {:.2}s (lease {LEASE_DURATION:?} + retry \
         {RETRY_PERIOD:?}); {counted} writes counted, acknowledged per pod: {acked:?}",
        led.as_secs_f64(),
        wrote.as_secs_f64()
    );
}
