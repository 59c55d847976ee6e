//! The sidecar in real pods, on a real node: tests/harness/node.sh starts a control plane
//! of its own (with kube-controller-manager and kube-scheduler), containerd, runc, a
//! kubelet and kube-proxy, all in a network namespace of its own, and imports the image
//! deploy/image/build.sh makes. Then:
//!
//! - deploy/kubernetes/sidecar.yaml's objects, in a namespace that enforces PodSecurity
//!   `restricted`, and its Deployment's pod template run as a Pod (to completion) whose
//!   controller writes through the sidecar on loopback: the kubelet starts the sidecar
//!   first, its startup probe (`safewrite health`, in the scratch image) passes before
//!   any controller starts, it runs as 65532 with a read-only root filesystem and the
//!   pod's projected service-account token, reaches the API server with the in-cluster
//!   configuration the kubelet gives it, every increment lands exactly once, and it is
//!   stopped after the last controller has exited;
//! - a Job whose containers make their writes and exit completes, and its sidecar stops
//!   after them;
//! - with the sidecar's allow-list opened to Secrets, a write the manifest's Role does not
//!   grant is refused by the API server, in the pod's service account's name (exit 6);
//! - injection for real (`inject.rs`): a Deployment with no sidecar in a namespace
//!   labelled for it runs with the injected sidecar and writes through it; a Pod labelled
//!   `disabled` runs without it; a Pod the policy fails on is refused, never started bare;
//! - the Helm chart's Deployment (`helm.rs`) in a restricted namespace;
//! - leader election (`leader.rs`): a Deployment of 2 replicas campaigning through their
//!   sidecars, the leader's pod deleted mid-load, the other leading and writing fenced,
//!   the count exact;
//! - a Pod deleted mid-load, its writes keyed: the controller stops first and its last
//!   writes and its report still go through the sidecar, every acknowledged write is
//!   counted, and no other;
//! - the sidecar's overhead against writing directly (`overhead.rs`): latency, CPU per
//!   1,000 writes of the sidecar, the controller, kube-apiserver and etcd and their sum,
//!   RSS;
//! - upgrading the sidecar (`upgrade.rs`) to a second image (another digest): changed in
//!   place on a running pod mid-load, the kubelet restarts it alone, the pod stays
//!   Running and every keyed write is applied exactly once; and the injection policy
//!   pointed at it injects it into new Pods while old ones keep theirs;
//! - the node runs in a network namespace of the harness's own with no link out of it;
//!   the pod range leads only to its bridge, the Service address is kube-proxy's, and
//!   nothing else routes anywhere.
//!
//! The pod's controller is tests/harness/node-controller, a static program of the Go
//! client: 16 goroutines × 50 read-dependent increments through the sidecar; the Job's
//! controllers are the image's own CLI (`safewrite update --cel`, one write each).
//!
//! The node needs root (a container runtime does). Without it these tests say so loudly
//! and pass without running; everything else they need is built by the harness and
//! cached outside the checkout.

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

mod helm;
mod inject;
mod leader;
mod overhead;
mod upgrade;

use crate::deploy::submit;
use crate::support::{self, INCREMENT, repo_root, run_script};

/// A running node (tests/harness/node.sh), shared by the tests of this module. It stops
/// when this process ends: the pipe to the script's stdin closes.
struct Node {
    env: HashMap<String, String>,
    _child: Mutex<Child>,
    _control: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
}

impl Node {
    /// The node, started on first use; `None` (said loudly) where it cannot run.
    fn shared() -> Option<&'static Node> {
        static NODE: OnceLock<Option<Node>> = OnceLock::new();
        NODE.get_or_init(|| {
            if !is_root() {
                eprintln!(
                    "\n*** SKIPPED: the node tests (tests/integration/node.rs) need root, as a \
                     container runtime does; they did not run ***\n"
                );
                return None;
            }
            let started = Instant::now();
            let (child, stdin, stdout, dir, env) = run_script("tests/harness/node.sh", &[]);
            eprintln!(
                "node {} ready in {:.1}s at {}",
                env["NODE_NAME"],
                started.elapsed().as_secs_f64(),
                dir.display()
            );
            Some(Node {
                env,
                _child: Mutex::new(child),
                _control: Mutex::new((stdin, stdout)),
            })
        })
        .as_ref()
    }

    fn image(&self) -> &str {
        &self.env["SAFEWRITE_IMAGE"]
    }

    async fn admin_client(&self) -> kube::Client {
        support::client_from(&PathBuf::from(&self.env["ADMIN_KUBECONFIG"])).await
    }

    /// `ctr` against this node's containerd, in the kubelet's namespace.
    fn ctr(&self, args: &[&str]) -> String {
        let out = Command::new(self.dir_tool("ctr"))
            .args([
                "--address",
                &self.env["CONTAINERD_ADDRESS"],
                "--namespace",
                "k8s.io",
            ])
            .args(args)
            .output()
            .expect("run ctr");
        assert!(out.status.success(), "ctr {args:?}: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    }

    fn dir_tool(&self, name: &str) -> PathBuf {
        PathBuf::from(&self.env["NODE_BIN"]).join(name)
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|ids| ids.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A namespace that enforces, warns about and audits PodSecurity `restricted`.
async fn restricted_namespace(client: &kube::Client, prefix: &str) -> String {
    labelled_namespace(client, prefix, &[]).await
}

/// Like `restricted_namespace`, with more labels.
async fn labelled_namespace(client: &kube::Client, prefix: &str, more: &[(&str, &str)]) -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!(
        "{prefix}-{}",
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut labels = BTreeMap::new();
    for mode in ["enforce", "warn", "audit"] {
        labels.insert(format!("pod-security.kubernetes.io/{mode}"), "restricted");
        labels.insert(
            format!("pod-security.kubernetes.io/{mode}-version"),
            "latest",
        );
    }
    for (key, value) in more {
        labels.insert(key.to_string(), value);
    }
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

/// Creates `object` in `namespace` and asserts it was created without warnings; returns
/// it as the API server stored it.
async fn create_clean(client: &kube::Client, namespace: &str, object: &Value) -> Value {
    let answer = submit(client, namespace, object, false).await;
    assert_eq!(
        answer.status,
        http::StatusCode::CREATED,
        "{}: {}",
        object["kind"],
        answer.body
    );
    assert!(
        answer.warnings.is_empty(),
        "{}: {:?}",
        object["kind"],
        answer.warnings
    );
    answer.body
}

/// deploy/kubernetes/sidecar.yaml's documents, each put into `namespace`.
fn manifest(namespace: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join("deploy/kubernetes/sidecar.yaml"))
        .expect("read sidecar.yaml");
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .map(|mut d| {
            d["metadata"]["namespace"] = json!(namespace);
            if d["kind"] == "RoleBinding" {
                for subject in d["subjects"].as_array_mut().expect("subjects") {
                    subject["namespace"] = json!(namespace);
                }
            }
            d
        })
        .collect()
}

/// Creates sidecar.yaml's ServiceAccount, Role and RoleBinding in `namespace`, and
/// returns its Deployment as the API server defaults it (a server-side dry run).
/// The admin client, a new restricted namespace named from `prefix`, and sidecar.yaml
/// installed in it (its Deployment returned): where each pod test starts.
async fn installed(node: &Node, prefix: &str) -> (kube::Client, String, Value) {
    let client = node.admin_client().await;
    let ns = restricted_namespace(&client, prefix).await;
    let deployment = install_manifest(&client, &ns).await;
    (client, ns, deployment)
}

async fn install_manifest(client: &kube::Client, namespace: &str) -> Value {
    let mut deployment = None;
    for object in manifest(namespace) {
        let kind = object["kind"].as_str().unwrap().to_string();
        let dry_run = kind == "Deployment";
        let answer = submit(client, namespace, &object, dry_run).await;
        assert_eq!(
            answer.status,
            http::StatusCode::CREATED,
            "{kind}: {}",
            answer.body
        );
        assert!(answer.warnings.is_empty(), "{kind}: {:?}", answer.warnings);
        if dry_run {
            deployment = Some(answer.body);
        }
    }
    deployment.expect("sidecar.yaml has a Deployment")
}

/// The Deployment's pod spec, run to completion (`restartPolicy: Never`): the sidecar
/// from the image under test, and `controllers` in place of the example controller, each
/// made from it (its securityContext and SAFEWRITE_ADDRESS kept) by `make(controller, i)`.
fn pod_spec(
    deployment: &Value,
    image: &str,
    controllers: usize,
    make: impl Fn(&mut Value, usize),
) -> Value {
    let mut spec = deployment["spec"]["template"]["spec"].clone();
    spec["restartPolicy"] = json!("Never");
    let sidecar = &mut spec["initContainers"][0];
    assert_eq!(sidecar["name"], "safewrite");
    sidecar["image"] = json!(image);
    sidecar["imagePullPolicy"] = json!("Never");
    let template = spec["containers"][0].clone();
    let containers: Vec<Value> = (0..controllers)
        .map(|i| {
            let mut c = template.clone();
            c["imagePullPolicy"] = json!("Never");
            make(&mut c, i);
            c
        })
        .collect();
    spec["containers"] = json!(containers);
    spec
}

/// `writers` controllers that each run the image's own CLI once, `safewrite update
/// cm/COUNTER --cel INCREMENT`, through the sidecar (the image has no shell).
fn cli_writers(deployment: &Value, image: &str, counter: &str, writers: usize) -> Value {
    pod_spec(deployment, image, writers, |c, i| {
        c["name"] = json!(format!("controller-{i}"));
        c["image"] = json!(image);
        c["command"] = json!(["/safewrite"]);
        c["args"] = json!(["update", format!("cm/{counter}"), "--cel", INCREMENT]);
        // Small writers side by side: ask for little.
        c["resources"] = json!({"requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"memory": "64Mi"}});
    })
}

async fn create_counter(client: &kube::Client, namespace: &str, name: &str) {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the counter");
}

async fn count(client: &kube::Client, namespace: &str, name: &str) -> u64 {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .expect("get the counter");
    cm.data.unwrap_or_default()["n"].parse().expect("a number")
}

/// What the test saw of a pod while polling it every 50 ms.
#[derive(Default, Debug)]
struct Watched {
    /// From the create request to the sidecar's `started` (its startup probe passed).
    sidecar_started: Option<Duration>,
    /// From the create request to the sidecar's `ready`.
    sidecar_ready: Option<Duration>,
    /// The highest memory use the sidecar's cgroup recorded (memory.max_usage_in_bytes,
    /// page cache included), and the sidecar process's peak RSS (VmHWM).
    peak_memory: u64,
    rss: u64,
    /// The sidecar's container id.
    sidecar_id: String,
}

/// The cgroup (v1) directory of container `id` under the node's cgroup root, in the
/// hierarchy of `controller` (memory, cpuacct, ...).
fn find_cgroup(node: &Node, controller: &str, id: &str) -> Option<PathBuf> {
    fn find(dir: &Path, id: &str, depth: usize) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if entry.file_name().to_string_lossy() == id {
                return Some(path);
            }
            if depth > 0
                && let Some(found) = find(&path, id, depth - 1)
            {
                return Some(found);
            }
        }
        None
    }
    let root = PathBuf::from("/sys/fs/cgroup")
        .join(controller)
        .join(node.env["CGROUP_ROOT"].trim_start_matches('/'));
    find(&root, id, 4)
}

/// The peak RSS (VmHWM, bytes) of the processes in the cgroup at `dir`.
fn peak_rss(dir: &Path) -> u64 {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    procs
        .split_whitespace()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .max()
        .unwrap_or(0)
        * 1024
}

/// Polls pod `name` until it has finished (Succeeded or Failed) or `timeout` passes,
/// noting when the sidecar started and became ready, and its memory.
async fn watch_pod(
    node: &Node,
    pods: &Api<Pod>,
    name: &str,
    created: Instant,
    timeout: Duration,
) -> (Pod, Watched) {
    let mut watched = Watched::default();
    let deadline = Instant::now() + timeout;
    loop {
        let pod = pods.get(name).await.expect("get pod");
        let status = pod.status.clone().unwrap_or_default();
        if let Some(sidecar) = status
            .init_container_statuses
            .as_ref()
            .and_then(|s| s.iter().find(|c| c.name == "safewrite"))
        {
            if sidecar.started == Some(true) && watched.sidecar_started.is_none() {
                watched.sidecar_started = Some(created.elapsed());
            }
            if sidecar.ready && watched.sidecar_ready.is_none() {
                watched.sidecar_ready = Some(created.elapsed());
            }
            if let Some(id) = sidecar.container_id.as_deref() {
                watched.sidecar_id = id.trim_start_matches("containerd://").to_string();
                if let Some(dir) = find_cgroup(node, "memory", &watched.sidecar_id) {
                    let peak = std::fs::read_to_string(dir.join("memory.max_usage_in_bytes"))
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(0);
                    watched.peak_memory = watched.peak_memory.max(peak);
                    watched.rss = watched.rss.max(peak_rss(&dir));
                }
            }
        }
        let phase = status.phase.clone().unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            return (pod, watched);
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} still {phase} after {timeout:?}: {:#?}",
            status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn time_of(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no {pointer} in {value:#}"))
        .to_string()
}

/// Asserts the order a native sidecar promises, from the pod's own status: the sidecar
/// started before every controller, and exited 0 after every controller exited.
fn assert_sidecar_order(pod: &Value) {
    let sidecar = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(sidecar["name"], "safewrite");
    let sidecar_started = time_of(sidecar, "/state/terminated/startedAt");
    let sidecar_finished = time_of(sidecar, "/state/terminated/finishedAt");
    assert_eq!(
        sidecar["state"]["terminated"]["exitCode"], 0,
        "the sidecar's exit: {sidecar:#}"
    );
    for controller in pod["status"]["containerStatuses"]
        .as_array()
        .expect("container statuses")
    {
        let terminated = &controller["state"]["terminated"];
        assert_eq!(terminated["exitCode"], 0, "{controller:#}");
        // RFC 3339 in UTC with whole seconds: text order is time order.
        assert!(
            sidecar_started <= time_of(controller, "/state/terminated/startedAt"),
            "{} started before the sidecar: {pod:#}",
            controller["name"]
        );
        assert!(
            time_of(controller, "/state/terminated/finishedAt") <= sidecar_finished,
            "the sidecar stopped before {} finished: {pod:#}",
            controller["name"]
        );
    }
}

/// The OCI spec containerd gave runc for the sidecar: its user, root and mounts.
fn assert_restricted_runtime(node: &Node, container_id: &str) {
    let info: Value =
        serde_json::from_str(&node.ctr(&["containers", "info", container_id])).expect("JSON");
    let spec = &info["Spec"];
    assert_eq!(spec["process"]["user"]["uid"], 65532, "{spec:#}");
    assert_eq!(spec["process"]["user"]["gid"], 65532, "{spec:#}");
    assert_eq!(spec["root"]["readonly"], true, "read-only root: {spec:#}");
    assert_eq!(spec["process"]["noNewPrivileges"], true, "{spec:#}");
    assert_eq!(
        spec["process"]["capabilities"]["effective"]
            .as_array()
            .map_or(0, Vec::len),
        0,
        "no capabilities: {spec:#}"
    );
    assert!(
        spec["linux"]["seccomp"].is_object(),
        "RuntimeDefault seccomp: {spec:#}"
    );
    let mounts = spec["mounts"].as_array().expect("mounts");
    assert!(
        mounts.iter().any(|m| {
            m["destination"] == "/var/run/secrets/kubernetes.io/serviceaccount"
                && m["options"]
                    .as_array()
                    .is_some_and(|o| o.iter().any(|x| x == "ro"))
        }),
        "the projected service-account token, read-only: {mounts:#?}"
    );
    // No kubeconfig: the sidecar found the API server the in-cluster way.
    let env = spec["process"]["env"].as_array().expect("env");
    assert!(
        env.iter().any(|e| e
            .as_str()
            .is_some_and(|e| e.starts_with("KUBERNETES_SERVICE_HOST="))),
        "{env:?}"
    );
    assert!(
        !env.iter().any(|e| e.as_str().is_some_and(
            |e| e.contains("KUBECONFIG=") || e.starts_with("KUBERNETES_SERVICE_HOST=127.")
        )),
        "{env:?}"
    );
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_runs_first_and_stops_last_in_a_restricted_pod() {
    let Some(node) = Node::shared() else { return };
    let (client, ns, deployment) = installed(node, "node-pod").await;
    create_counter(&client, &ns, "counter").await;

    // The controller: the Go client in a static program, 16 goroutines × 50
    // read-dependent increments through the sidecar on loopback.
    const WORKERS: u64 = 16;
    const WRITES: u64 = 50;
    let controller_image = node.env["CONTROLLER_IMAGE"].clone();
    let spec = pod_spec(&deployment, node.image(), 1, |c, _| {
        c["image"] = json!(controller_image);
        let env = c["env"].as_array_mut().expect("the controller's env");
        env.push(json!({"name": "POD_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}));
        env.push(json!({"name": "WORKERS", "value": WORKERS.to_string()}));
        env.push(json!({"name": "WRITES", "value": WRITES.to_string()}));
        env.push(json!({"name": "COUNTER", "value": "counter"}));
    });
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "my-controller", "labels": {"app.kubernetes.io/name": "my-controller"}},
        "spec": spec});
    let created = Instant::now();
    create_clean(&client, &ns, &pod).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (pod, watched) = watch_pod(
        node,
        &pods,
        "my-controller",
        created,
        Duration::from_secs(240),
    )
    .await;
    let finished = created.elapsed();
    let pod = serde_json::to_value(&pod).unwrap();
    assert_eq!(pod["status"]["phase"], "Succeeded", "{pod:#}");
    assert_sidecar_order(&pod);
    assert_restricted_runtime(node, &watched.sidecar_id);
    assert_eq!(count(&client, &ns, "counter").await, WORKERS * WRITES);
    let figures: Value = serde_json::from_str(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
            .as_str()
            .expect("the controller's figures"),
    )
    .expect("JSON figures");
    eprintln!(
        "node pod: sidecar started (startup probe passed) {:.1}s after the create, seen \
         ready: {:?}; controller (Go client): {} writes in {:.1}s, {} attempts, p50 {} ms, p99 {} \
         ms, count {}; pod Succeeded {:.1}s after the create; sidecar memory peak {:.1} MiB \
         (cgroup max usage, page cache included), peak RSS {:.1} MiB (VmHWM, the \
         largest process in its cgroup)",
        watched
            .sidecar_started
            .map_or(f64::NAN, |d| d.as_secs_f64()),
        watched.sidecar_ready,
        figures["writes"],
        figures["seconds"].as_f64().unwrap_or(f64::NAN),
        figures["attempts"],
        figures["p50_ms"],
        figures["p99_ms"],
        WORKERS * WRITES,
        finished.as_secs_f64(),
        mib(watched.peak_memory),
        mib(watched.rss),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_completes_and_its_sidecar_stops_after_the_writes() {
    let Some(node) = Node::shared() else { return };
    let (client, ns, deployment) = installed(node, "node-job").await;
    create_counter(&client, &ns, "counter").await;

    const WRITERS: usize = 3;
    let spec = cli_writers(&deployment, node.image(), "counter", WRITERS);
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "writes"},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": "my-controller"}},
            "spec": spec}}});
    let created = Instant::now();
    create_clean(&client, &ns, &job).await;

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(180);
    let job = loop {
        let job = jobs.get("writes").await.expect("get job");
        let conditions = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        if conditions
            .iter()
            .any(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
        {
            break job;
        }
        assert!(Instant::now() < deadline, "job not finished: {job:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let completed = created.elapsed();
    let job = serde_json::to_value(&job).unwrap();
    let complete = job["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Complete" && c["status"] == "True");
    assert!(complete, "{job:#}");
    assert_eq!(count(&client, &ns, "counter").await, WRITERS as u64);

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels("job-name=writes"))
        .await
        .expect("list the job's pods");
    assert_eq!(list.items.len(), 1, "one pod, no retry");
    let pod = serde_json::to_value(&list.items[0]).unwrap();
    assert_eq!(pod["status"]["phase"], "Succeeded", "{pod:#}");
    assert_sidecar_order(&pod);
    eprintln!(
        "node job: {WRITERS} writers, count {WRITERS}; Complete {:.1}s after the create \
         (status: {} to {})",
        completed.as_secs_f64(),
        job["status"]["startTime"],
        job["status"]["completionTime"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_outside_the_role_is_denied_by_the_api_server() {
    let Some(node) = Node::shared() else { return };
    let (client, ns, deployment) = installed(node, "node-rbac").await;
    create_counter(&client, &ns, "counter").await;
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the secret");

    // The sidecar's allow-list lets Secrets through, so the refusal can only be the
    // API server's: the manifest's Role grants no Secrets.
    let image = node.image().to_string();
    let mut spec = pod_spec(&deployment, &image, 2, |c, i| {
        c["name"] = json!(["secret", "configmap"][i]);
        c["image"] = json!(image);
        c["command"] = json!(["/safewrite"]);
        c["args"] = if i == 0 {
            json!([
                "update",
                "secret/s",
                "--merge",
                r#"{"metadata": {"labels": {"touched": "yes"}}}"#
            ])
        } else {
            json!(["update", "cm/counter", "--cel", INCREMENT])
        };
        c["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
        c["resources"] = json!({"requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"memory": "64Mi"}});
    });
    for var in spec["initContainers"][0]["env"].as_array_mut().unwrap() {
        if var["name"] == "SAFEWRITE_ALLOW" {
            let allow = format!(
                "{} core/Secret:$(POD_NAMESPACE):main:update",
                var["value"].as_str().unwrap()
            );
            var["value"] = json!(allow);
        }
    }
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rbac"}, "spec": spec});
    let created = Instant::now();
    let answer = submit(&client, &ns, &pod, false).await;
    assert_eq!(answer.status, http::StatusCode::CREATED, "{}", answer.body);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (pod, _) = watch_pod(node, &pods, "rbac", created, Duration::from_secs(180)).await;
    let pod = serde_json::to_value(&pod).unwrap();
    let statuses = pod["status"]["containerStatuses"].as_array().unwrap();
    let terminated = |name: &str| {
        statuses.iter().find(|c| c["name"] == name).unwrap()["state"]["terminated"].clone()
    };
    // Exit 6: denied (PERMISSION_DENIED), in the service account's name.
    let denied = terminated("secret");
    assert_eq!(denied["exitCode"], 6, "{pod:#}");
    let message = denied["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("system:serviceaccount:{ns}:my-controller")),
        "the refusal names the pod's service account: {message}"
    );
    assert_eq!(terminated("configmap")["exitCode"], 0, "{pod:#}");
    assert_eq!(count(&client, &ns, "counter").await, 1);
    let labels = secrets
        .get("s")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert!(labels.is_empty(), "the secret was changed: {labels:?}");
    eprintln!(
        "node rbac: the write outside the Role exited 6: {}",
        message.trim()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_mid_load_stops_the_controller_first_and_loses_no_write() {
    let Some(node) = Node::shared() else { return };
    let (client, ns, deployment) = installed(node, "node-delete").await;
    create_counter(&client, &ns, "counter").await;
    create_counter(&client, &ns, "report").await;

    // Far more writes than can happen before the delete: SIGTERM ends them.
    let controller_image = node.env["CONTROLLER_IMAGE"].clone();
    let spec = pod_spec(&deployment, node.image(), 1, |c, _| {
        c["image"] = json!(controller_image);
        let env = c["env"].as_array_mut().expect("the controller's env");
        env.push(json!({"name": "POD_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}));
        env.push(json!({"name": "WORKERS", "value": "16"}));
        env.push(json!({"name": "WRITES", "value": "100000"}));
        env.push(json!({"name": "REPORT", "value": "report"}));
        // Every write keyed, and sent again with its key while that is safe: a write
        // whose answer the delete cut off is applied once or not at all.
        env.push(json!({"name": "KEYED", "value": "1"}));
    });
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy"}, "spec": spec});
    let answer = submit(&client, &ns, &pod, false).await;
    assert_eq!(answer.status, http::StatusCode::CREATED, "{}", answer.body);
    let deadline = Instant::now() + Duration::from_secs(120);
    while count(&client, &ns, "counter").await < 200 {
        assert!(Instant::now() < deadline, "the controller never got going");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let deleted = Instant::now();
    pods.delete("busy", &Default::default())
        .await
        .expect("delete the pod");
    // Watch it go: the controller's and the sidecar's last states, as the kubelet
    // reports them before the pod is removed.
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match pods.get_opt("busy").await.expect("get pod") {
            Some(pod) => last = serde_json::to_value(&pod).unwrap(),
            None => break,
        }
        assert!(
            Instant::now() < deadline,
            "the pod was not gone in 90 s: {last:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gone = deleted.elapsed();
    let acked: u64 = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("report")
        .await
        .unwrap()
        .data
        .unwrap_or_default()
        .get("acked")
        .expect("the controller reported through the sidecar after its SIGTERM")
        .parse()
        .unwrap();
    let counted = count(&client, &ns, "counter").await;
    assert_eq!(
        counted, acked,
        "every acknowledged write landed, and no other"
    );
    let controller = &last["status"]["containerStatuses"][0]["state"]["terminated"];
    let sidecar = &last["status"]["initContainerStatuses"][0]["state"]["terminated"];
    if let (Some(c), Some(s)) = (
        controller["finishedAt"].as_str(),
        sidecar["finishedAt"].as_str(),
    ) {
        assert!(
            c <= s,
            "the sidecar stopped before the controller: {last:#}"
        );
    }
    eprintln!(
        "node delete: {acked} writes acknowledged and counted; pod gone {:.1}s after the \
         delete; last seen: controller {}, sidecar {}",
        gone.as_secs_f64(),
        controller,
        sidecar
    );
}

/// `ip route get ADDRESS` in the node's network namespace: whether a route exists, and
/// what it says.
fn route(node: &Node, address: &str) -> (bool, String) {
    let out = Command::new("ip")
        .args(["-n", &node.env["NETNS"], "route", "get", address])
        .output()
        .expect("run ip route get");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn the_node_and_its_pods_reach_nothing_outside_their_namespaces() {
    let Some(node) = Node::shared() else { return };
    let netns = &node.env["NETNS"];
    let bridge = &node.env["BRIDGE"];
    // The node's namespace has loopback, the bridge and the pods' veths on it: no link
    // into the machine's own network.
    let out = Command::new("ip")
        .args(["-n", netns, "-o", "link", "show"])
        .output()
        .expect("run ip link show");
    let links = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{links}");
    for line in links.lines() {
        let name = line.split(':').nth(1).unwrap_or_default().trim();
        let name = name.split('@').next().unwrap_or_default();
        assert!(
            name == "lo" || name == bridge || line.contains(&format!("master {bridge} ")),
            "a link in the node's namespace that is not loopback, the bridge or a pod's: {line}"
        );
    }
    let pods = node.env["POD_CIDR"].trim_end_matches(".0/24").to_string();
    let (found, text) = route(node, &format!("{pods}.200"));
    assert!(
        found && text.contains(&format!("dev {bridge} ")),
        "{pods}.200 should lead to {bridge}: {text}"
    );
    // Another node's pods, the Service range (kube-proxy DNATs the Services it knows
    // before routing), and any other address: no route.
    let other = if pods == "10.244.1" {
        "10.244.2.9"
    } else {
        "10.244.1.9"
    };
    for address in [other, "10.96.255.254", "192.0.2.1", "8.8.8.8"] {
        let (found, text) = route(node, address);
        assert!(!found, "{address} routes somewhere: {text}");
    }
    // And the `kubernetes` Service address is kube-proxy's: DNATed to the endpoint the
    // API server published (an address of the node's bridge).
    let out = Command::new("nsenter")
        .args([
            &format!("--net=/run/netns/{netns}"),
            "--",
            "iptables",
            "-w",
            "5",
            "-t",
            "nat",
            "-S",
        ])
        .output()
        .expect("run iptables -S in the node's namespace");
    let rules = String::from_utf8_lossy(&out.stdout).into_owned();
    let gateway = format!("{pods}.1:");
    assert!(
        rules
            .lines()
            .any(|l| l.contains("KUBE-SEP") && l.contains("DNAT") && l.contains(&gateway)),
        "no kube-proxy DNAT to the API server's endpoint {gateway}: {rules}"
    );
    assert!(
        rules.contains(&format!("-d {}/32", node.env["SERVICE_HOST"])),
        "{rules}"
    );
}
