//! The sidecar's own figures in a pod, as Dapr and Linkerd publish theirs: the same
//! controller program (tests/harness/node-controller), one worker making 2,000
//! read-dependent increments, once straight to the API server (DIRECT=1: GET, change,
//! PUT, as a controller without safewrite does, through the same in-cluster address)
//! and once through the sidecar (a CEL update, one request per write). Printed: each
//! run's p50/p99 per write and the difference, the sidecar's CPU per 1,000 writes (its
//! container's cpuacct, sampled while the counter moves from 10 % to 90 % of the run, so
//! start-up and shutdown are not counted), the controller's CPU per 1,000 writes in
//! each mode, kube-apiserver's and etcd's over the same window (their /proc/<pid>/stat,
//! less their CPU over 3 s before the pod starts, polled the same way with nothing
//! written: the node's own controllers and this test's reads), the whole system's sum,
//! and the sidecar's peak RSS. Only the counts are asserted.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};

use super::{
    Node, count, create_clean, create_counter, find_cgroup, installed, mib, peak_rss, pod_spec,
};
use crate::support::cpu_seconds;

const WRITES: u64 = 2000;

/// cpuacct.usage (ns) of the cgroup at `dir`.
fn cpu_ns(dir: &Option<PathBuf>) -> Option<u64> {
    std::fs::read_to_string(dir.as_ref()?.join("cpuacct.usage"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// kube-apiserver's and etcd's CPU so far (ns), from the pids the node's env names.
fn control_plane_ns(node: &Node) -> (u64, u64) {
    let ns = |key: &str| {
        let pid = node.env[key].parse().expect("a pid");
        (cpu_seconds(pid) * 1e9) as u64
    };
    (ns("APISERVER_PID"), ns("ETCD_PID"))
}

/// One sample in the measured window: the counter, the sidecar's, the controller's,
/// kube-apiserver's and etcd's CPU (ns), and when.
#[derive(Clone, Copy)]
struct Sample {
    count: u64,
    cpu: [u64; 4],
    at: Instant,
}

/// One run's figures.
struct Run {
    figures: Value,
    /// CPU per 1,000 writes in the measured window (ms): sidecar, controller,
    /// kube-apiserver and etcd (less their idle CPU).
    cpu: Option<[f64; 4]>,
    rss: u64,
}

impl Run {
    fn sidecar_cpu(&self) -> Option<f64> {
        self.cpu.map(|c| c[0])
    }
    fn controller_cpu(&self) -> Option<f64> {
        self.cpu.map(|c| c[1])
    }
    /// Everything the write cost: the controller, the sidecar (none when direct), the
    /// API server and etcd, per 1,000 writes (ms).
    fn system_cpu(&self) -> Option<f64> {
        self.cpu.map(|c| c.iter().sum())
    }
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
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // The control plane's CPU with nothing written, polled as below (ns per second).
    let idle = {
        let (before, started) = (control_plane_ns(node), Instant::now());
        while started.elapsed() < Duration::from_secs(3) {
            let _ = pods.get_opt(name).await;
            count(client, ns, name).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let after = control_plane_ns(node);
        let seconds = started.elapsed().as_secs_f64();
        (
            (after.0 - before.0) as f64 / seconds,
            (after.1 - before.1) as f64 / seconds,
        )
    };
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec});
    create_clean(client, ns, &pod).await;

    let (low, high) = (WRITES / 10, WRITES * 9 / 10);
    let mut first: Option<Sample> = None;
    let mut last: Option<Sample> = None;
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
                let (apiserver, etcd) = control_plane_ns(node);
                let sample = Sample {
                    count: n,
                    cpu: [s, c, apiserver, etcd],
                    at: Instant::now(),
                };
                if n >= low && first.is_none() {
                    first = Some(sample);
                }
                if n <= high {
                    last = Some(sample);
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
    let cpu = match (first, last) {
        (Some(a), Some(b)) if b.count > a.count + WRITES / 4 => {
            let seconds = (b.at - a.at).as_secs_f64();
            let idle = [0.0, 0.0, idle.0 * seconds, idle.1 * seconds];
            let writes = (b.count - a.count) as f64;
            // A controller that writes directly has no sidecar: the idle one in its pod
            // is not charged to it.
            let sidecar = if direct { 0.0 } else { 1.0 };
            let scale = [sidecar, 1.0, 1.0, 1.0];
            // ns per write = ms per 1,000 writes.
            Some(std::array::from_fn(|i| {
                scale[i] * ((b.cpu[i] - a.cpu[i]) as f64 - idle[i]).max(0.0) / writes / 1e3
            }))
        }
        _ => None,
    };
    Run { figures, cpu, rss }
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
         CPU per 1,000 writes {} direct and {} through the sidecar; the whole system's (controller, \
         sidecar, kube-apiserver, etcd) per 1,000 writes {} direct (apiserver {}, etcd {}) and {} \
         through the sidecar (apiserver {}, etcd {}); sidecar peak RSS {:.1} MiB",
        ms(&direct, "p50_ms"),
        ms(&direct, "p99_ms"),
        direct.figures["attempts"],
        ms(&through, "p50_ms"),
        ms(&through, "p99_ms"),
        ms(&through, "p50_ms") - ms(&direct, "p50_ms"),
        ms(&through, "p99_ms") - ms(&direct, "p99_ms"),
        opt(through.sidecar_cpu()),
        opt(direct.controller_cpu()),
        opt(through.controller_cpu()),
        opt(direct.system_cpu()),
        opt(direct.cpu.map(|c| c[2])),
        opt(direct.cpu.map(|c| c[3])),
        opt(through.system_cpu()),
        opt(through.cpu.map(|c| c[2])),
        opt(through.cpu.map(|c| c[3])),
        mib(through.rss),
    );
}
