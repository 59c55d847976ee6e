//! The sidecar's own figures in a pod, as Dapr and Linkerd publish theirs: the same
//! controller program (tests/harness/node-controller), one worker making 2,000
//! read-dependent increments, once straight to the API server (DIRECT=1: GET, change,
//! PUT, as a controller without safewrite does, through the same in-cluster address)
//! and once through the sidecar (a CEL update, one request per write). Printed: each
//! run's p50/p99 per write and the difference, the sidecar's CPU per 1,000 writes (its
//! container's cpuacct, sampled while the counter moves from 10 % to 90 % of the run, so
//! start-up and shutdown are not counted), the controller's CPU per 1,000 writes in
//! each mode, and the sidecar's peak RSS. Only the counts are asserted.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};

use super::{
    Node, count, create_clean, create_counter, find_cgroup, installed, mib, peak_rss, pod_spec,
};

const WRITES: u64 = 2000;

/// cpuacct.usage (ns) of the cgroup at `dir`.
fn cpu_ns(dir: &Option<PathBuf>) -> Option<u64> {
    std::fs::read_to_string(dir.as_ref()?.join("cpuacct.usage"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// One run's figures.
struct Run {
    figures: Value,
    /// CPU per 1,000 writes in the measured window, sidecar and controller (ms).
    sidecar_cpu: Option<f64>,
    controller_cpu: Option<f64>,
    rss: u64,
}

/// Runs the controller once in a pod beside the sidecar, `direct` or through it, and
/// samples both containers' CPU while the counter moves.
async fn run(
    node: &Node,
    client: &kube::Client,
    ns: &str,
    deployment: &Value,
    direct: bool,
) -> Run {
    let name = if direct { "direct" } else { "through" };
    create_counter(client, ns, name).await;
    let controller_image = node.env["CONTROLLER_IMAGE"].clone();
    let spec = pod_spec(deployment, node.image(), 1, |c, _| {
        c["image"] = json!(controller_image);
        c["resources"] = json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
        let env = c["env"].as_array_mut().expect("the controller's env");
        env.push(json!({"name": "POD_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}));
        env.push(json!({"name": "WORKERS", "value": "1"}));
        env.push(json!({"name": "WRITES", "value": WRITES.to_string()}));
        env.push(json!({"name": "COUNTER", "value": name}));
        env.push(json!({"name": "DIRECT", "value": if direct { "1" } else { "0" }}));
    });
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec});
    create_clean(client, ns, &pod).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (low, high) = (WRITES / 10, WRITES * 9 / 10);
    let mut first: Option<(u64, u64, u64)> = None; // (count, sidecar ns, controller ns)
    let mut last: Option<(u64, u64, u64)> = None;
    let mut rss = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    let pod = loop {
        let pod = serde_json::to_value(pods.get(name).await.expect("get pod")).unwrap();
        let id = |statuses: &str| {
            pod["status"][statuses][0]["containerID"]
                .as_str()
                .map(|id| id.trim_start_matches("containerd://").to_string())
        };
        let phase = pod["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if phase == "Succeeded" || phase == "Failed" {
            break pod;
        }
        if let (Some(sidecar), Some(controller)) =
            (id("initContainerStatuses"), id("containerStatuses"))
        {
            let sidecar_dir = find_cgroup(node, "cpuacct", &sidecar);
            let controller_dir = find_cgroup(node, "cpuacct", &controller);
            if let Some(dir) = find_cgroup(node, "memory", &sidecar) {
                rss = rss.max(peak_rss(&dir));
            }
            let n = count(client, ns, name).await;
            if let (Some(s), Some(c)) = (cpu_ns(&sidecar_dir), cpu_ns(&controller_dir)) {
                if n >= low && first.is_none() {
                    first = Some((n, s, c));
                }
                if n <= high {
                    last = Some((n, s, c));
                }
            }
        }
        assert!(Instant::now() < deadline, "pod {name} still {phase}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(pod["status"]["phase"], "Succeeded", "{pod:#}");
    assert_eq!(
        count(client, ns, name).await,
        WRITES,
        "every write landed once"
    );
    let figures: Value = serde_json::from_str(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
            .as_str()
            .expect("the controller's figures"),
    )
    .expect("JSON figures");
    let per_thousand = |pick: fn(&(u64, u64, u64)) -> u64| match (first, last) {
        (Some(a), Some(b)) if b.0 > a.0 + WRITES / 4 => {
            Some((pick(&b) - pick(&a)) as f64 / 1e6 / (b.0 - a.0) as f64 * 1000.0)
        }
        _ => None,
    };
    Run {
        figures,
        sidecar_cpu: per_thousand(|s| s.1),
        controller_cpu: per_thousand(|s| s.2),
        rss,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecars_overhead_in_a_pod_against_writing_directly() {
    let Some(node) = Node::shared() else { return };
    let (client, ns, deployment) = installed(node, "node-overhead").await;

    let direct = run(node, &client, &ns, &deployment, true).await;
    let through = run(node, &client, &ns, &deployment, false).await;
    let ms = |run: &Run, q: &str| run.figures[q].as_f64().unwrap_or(f64::NAN);
    let opt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0} ms"));
    eprintln!(
        "node overhead: {WRITES} writes by one worker; direct (GET+PUT) p50 {:.2} ms p99 {:.2} \
         ms, {} requests' worth of attempts; through the sidecar p50 {:.2} ms p99 {:.2} ms \
         (added: p50 {:+.2} ms, p99 {:+.2} ms); sidecar CPU per 1,000 writes {}, controller \
         CPU per 1,000 writes {} direct and {} through the sidecar; sidecar peak RSS {:.1} MiB",
        ms(&direct, "p50_ms"),
        ms(&direct, "p99_ms"),
        direct.figures["attempts"],
        ms(&through, "p50_ms"),
        ms(&through, "p99_ms"),
        ms(&through, "p50_ms") - ms(&direct, "p50_ms"),
        ms(&through, "p99_ms") - ms(&direct, "p99_ms"),
        opt(through.sidecar_cpu),
        opt(direct.controller_cpu),
        opt(through.controller_cpu),
        mib(through.rss),
    );
}
