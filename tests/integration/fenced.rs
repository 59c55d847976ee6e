//! Fenced writes against the real API server: a write under a leadership records its
//! epoch on the object; a caller whose sidecar does not lead under its epoch is refused
//! NOT_LEADER and a write to an object that records a later epoch is refused FENCED,
//! with nothing written either way; a fenced status write records its epoch through the
//! main resource first; a fenced delete is refused like a write; and a process with no
//! campaign of its own (`safewrite update` inside `safewrite lead`, in-process) checks
//! the Lease as read. The checker of the guarantee under pauses is `fence.rs`.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{ControlPlane, Sidecar, error_reason};
use tonic::Code;
use tonic::Streaming;
use tonic::transport::Channel;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support;

const BIN: &str = env!("CARGO_BIN_EXE_safewrite");
const LEASE: &str = "fenced";

fn lead_request(ns: &str, identity: &str) -> pb::LeadRequest {
    pb::LeadRequest {
        namespace: ns.into(),
        name: LEASE.into(),
        identity: identity.into(),
        // Long enough that a busy machine does not lose a renewal mid-test.
        lease_duration: Some(Duration::from_secs(8).try_into().unwrap()),
        renew_deadline: Some(Duration::from_secs(6).try_into().unwrap()),
        retry_period: Some(Duration::from_millis(400).try_into().unwrap()),
    }
}

/// Campaigns through `channel` until leading; the stream and the epoch.
async fn leading(channel: Channel, ns: &str, identity: &str) -> (Streaming<pb::LeadResponse>, u64) {
    let mut stream = WriterServiceClient::new(channel)
        .lead(lead_request(ns, identity))
        .await
        .expect("the campaign starts")
        .into_inner();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("leading in time")
            .expect("the stream goes on")
            .expect("an event");
        if event.state() == pb::LeadState::Leading {
            return (stream, event.epoch);
        }
    }
}

fn fence(ns: &str, epoch: u64) -> Option<pb::Fence> {
    Some(pb::Fence {
        lease_namespace: ns.into(),
        lease_name: LEASE.into(),
        epoch,
    })
}

fn configmap(ns: &str, name: &str) -> Option<pb::ObjectRef> {
    Some(pb::ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: ns.into(),
        name: name.into(),
    })
}

fn increment() -> Option<pb::Mutation> {
    Some(pb::Mutation {
        kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
            expression: r#"{"data": {"n": string(int(object.data.n) + 1)}}"#.into(),
        })),
    })
}

async fn fenced_increment(
    channel: Channel,
    ns: &str,
    name: &str,
    epoch: u64,
) -> Result<pb::WriteResult, tonic::Status> {
    WriterServiceClient::new(channel)
        .update_with_retry(pb::UpdateWithRetryRequest {
            target: configmap(ns, name),
            mutation: increment(),
            options: Some(pb::WriteOptions {
                fence: fence(ns, epoch),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().result.expect("a result"))
}

fn recorded(object: &Value, ns: &str) -> Option<u64> {
    let text = object["metadata"]["annotations"]["safewrite.dev/fence"].as_str()?;
    serde_json::from_str::<Value>(text).ok()?[format!("{ns}/{LEASE}")].as_u64()
}

async fn data_n(cp: &ControlPlane, ns: &str, name: &str) -> String {
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, ns);
    let cm = api.get(name).await.expect("read back");
    cm.data
        .unwrap_or_default()
        .get("n")
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_writes_are_refused_and_the_leaders_record_their_epoch() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("fenced").await;
    let admin = cp.admin_client().await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    for name in ["a", "b"] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}}))
                .unwrap();
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let kubeconfig = cp.admin_kubeconfig();
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let (one, two) = (Sidecar::start(&args), Sidecar::start(&args));

    // The first leader writes under its epoch, which the object records.
    let (stream, first) = leading(one.channel().await, &ns, "one").await;
    let written = fenced_increment(one.channel().await, &ns, "a", first)
        .await
        .expect("the leader writes");
    let object: Value = serde_json::from_str(&written.object_json).unwrap();
    assert_eq!(recorded(&object, &ns), Some(first));
    assert_eq!(object["data"]["n"], "1");

    // A wrong epoch through the leading sidecar: NOT_LEADER, nothing written.
    let refused = fenced_increment(one.channel().await, &ns, "a", first + 7)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(error_reason(&refused), "NOT_LEADER");
    assert!(refused.message().contains("do not retry"), "{refused:?}");

    // The first leader steps down; the second leads under a later epoch and writes.
    drop(stream);
    let (_second_stream, second) = leading(two.channel().await, &ns, "two").await;
    assert!(second > first, "{second} after {first}");
    fenced_increment(two.channel().await, &ns, "a", second)
        .await
        .expect("the new leader writes");

    // The deposed leader's sidecar no longer leads: refused before anything is sent.
    let deposed = fenced_increment(one.channel().await, &ns, "a", first)
        .await
        .unwrap_err();
    assert_eq!(error_reason(&deposed), "NOT_LEADER", "{deposed:?}");
    assert_eq!(data_n(cp, &ns, "a").await, "2");

    // An object recording a later epoch than the writer's fences it, whoever leads.
    let later = json!({"metadata": {"annotations": {
        "safewrite.dev/fence": json!({format!("{ns}/{LEASE}"): second + 5}).to_string()
    }}});
    cms.patch("b", &PatchParams::default(), &Patch::Merge(&later))
        .await
        .expect("annotate");
    let fenced = fenced_increment(two.channel().await, &ns, "b", second)
        .await
        .unwrap_err();
    assert_eq!(fenced.code(), Code::FailedPrecondition, "{fenced:?}");
    assert_eq!(error_reason(&fenced), "FENCED");
    assert!(
        fenced.message().contains(&format!("epoch {}", second + 5)),
        "{fenced:?}"
    );
    assert_eq!(data_n(cp, &ns, "b").await, "0", "nothing was written");

    // Deletes are fenced the same way.
    let delete = |channel: Channel, epoch: u64| {
        let ns = ns.clone();
        async move {
            WriterServiceClient::new(channel)
                .delete(pb::DeleteRequest {
                    target: configmap(&ns, "b"),
                    fence: fence(&ns, epoch),
                    ..Default::default()
                })
                .await
        }
    };
    let refused = delete(two.channel().await, second).await.unwrap_err();
    assert_eq!(error_reason(&refused), "FENCED", "{refused:?}");
    let refused = delete(one.channel().await, first).await.unwrap_err();
    assert_eq!(error_reason(&refused), "NOT_LEADER", "{refused:?}");
    assert!(cms.get_opt("b").await.expect("read").is_some());

    // A missing epoch is refused at the boundary, naming the field.
    let status = fenced_increment(two.channel().await, &ns, "a", 0)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("options.fence.epoch"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_status_write_records_its_epoch_through_the_main_resource() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("fencedstatus").await;
    let admin = cp.admin_client().await;
    support::install_crd(&admin, "fencedwidgets", "FencedWidget").await;
    let widgets: Api<kube::core::DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &kube::discovery::ApiResource {
            group: "test.safewrite.dev".into(),
            version: "v1".into(),
            api_version: "test.safewrite.dev/v1".into(),
            kind: "FencedWidget".into(),
            plural: "fencedwidgets".into(),
        },
    );
    let widget = serde_json::from_value(json!({
        "apiVersion": "test.safewrite.dev/v1", "kind": "FencedWidget",
        "metadata": {"name": "w"}, "spec": {}
    }))
    .unwrap();
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .expect("create");
    let kubeconfig = cp.admin_kubeconfig();
    let sidecar = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let (_stream, epoch) = leading(sidecar.channel().await, &ns, "one").await;
    let target = Some(pb::ObjectRef {
        api_version: "test.safewrite.dev/v1".into(),
        kind: "FencedWidget".into(),
        namespace: ns.clone(),
        name: "w".into(),
    });
    let patch_status = |phase: &str| pb::PatchStatusRequest {
        target: target.clone(),
        mutation: Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: json!({"status": {"phase": phase}}).to_string(),
            })),
        }),
        options: Some(pb::WriteOptions {
            fence: fence(&ns, epoch),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let result = client
        .patch_status(patch_status("Ready"))
        .await
        .expect("the leader writes status")
        .into_inner()
        .result
        .unwrap();
    let object: Value = serde_json::from_str(&result.object_json).unwrap();
    assert_eq!(object["status"]["phase"], "Ready");
    assert_eq!(recorded(&object, &ns), Some(epoch), "{object}");
    let live = widgets.get("w").await.expect("read back");
    let live = serde_json::to_value(&live).unwrap();
    assert_eq!(recorded(&live, &ns), Some(epoch));
    assert_eq!(live["status"]["phase"], "Ready");

    // A later epoch recorded (by a later leader): the status write is fenced.
    let later = json!({"metadata": {"annotations": {
        "safewrite.dev/fence": json!({format!("{ns}/{LEASE}"): epoch + 1}).to_string()
    }}});
    widgets
        .patch("w", &PatchParams::default(), &Patch::Merge(&later))
        .await
        .expect("annotate");
    let fenced = client.patch_status(patch_status("Late")).await.unwrap_err();
    assert_eq!(error_reason(&fenced), "FENCED", "{fenced:?}");
    let live = serde_json::to_value(widgets.get("w").await.unwrap()).unwrap();
    assert_eq!(live["status"]["phase"], "Ready", "nothing was written");
}

/// `safewrite lead` in-process runs a `safewrite update` that has no campaign of its own:
/// it reads the Lease, so its fenced write goes through while the Lease is held under
/// its epoch, and one with another epoch is refused (exit 3, NOT_LEADER).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safewrite_update_inside_safewrite_lead_is_fenced_without_a_flag() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("fencedcli").await;
    let cms: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"n": "0"}})).unwrap();
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let kubeconfig = cp.admin_kubeconfig();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let script = format!(
        r#"{BIN} update configmap/c -n {ns} --kubeconfig {kubeconfig} --cel '{{"data": {{"n": string(int(object.data.n) + 1)}}}}' || exit 20
{BIN} update configmap/c -n {ns} --kubeconfig {kubeconfig} --fence-epoch 999 --cel '{{"data": {{"x": "late"}}}}' 2> "$ERR"
echo $? > "$CODE""#
    );
    let dir = tempfile::tempdir().unwrap();
    let (err, code) = (dir.path().join("err"), dir.path().join("code"));
    let output = Command::new(BIN)
        .args([
            "lead",
            "--lease",
            &format!("{ns}/{LEASE}"),
            "--kubeconfig",
            kubeconfig,
        ])
        .args([
            "--lease-duration",
            "8s",
            "--renew-deadline",
            "6s",
            "--retry-period",
            "400ms",
        ])
        .args(["--", "sh", "-c", &script])
        .env_remove("SAFEWRITE_ADDRESS")
        .env("ERR", &err)
        .env("CODE", &code)
        .output()
        .expect("safewrite lead runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let object = serde_json::to_value(cms.get("c").await.unwrap()).unwrap();
    assert_eq!(object["data"]["n"], "1", "{object}");
    assert!(recorded(&object, &ns).is_some_and(|e| e > 0), "{object}");
    assert!(
        object["data"].get("x").is_none(),
        "the refused write was not made"
    );
    let refused = std::fs::read_to_string(&err).unwrap();
    assert_eq!(
        std::fs::read_to_string(&code).unwrap().trim(),
        "3",
        "{refused}"
    );
    assert!(refused.contains("not the leader"), "{refused}");
}

/// CPU seconds the process `pid` has used (user + system), from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap().split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// The cost of a fenced write against an unfenced one, through one sidecar that leads
/// (its own campaign) and one that runs none (it reads the Lease): latency, the sidecar's
/// CPU and the API server's requests per write. A measurement, not a check: run by hand
/// with `cargo test --test integration fenced::cost -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn cost_of_a_fenced_write() {
    const WRITES: usize = 300;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("fencedcost").await;
    let cms: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"n": "0"}})).unwrap();
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let kubeconfig = cp.admin_kubeconfig();
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let (leader, reader) = (Sidecar::start(&args), Sidecar::start(&args));
    let (_stream, epoch) = leading(leader.channel().await, &ns, "one").await;
    for (label, sidecar, fenced) in [
        ("unfenced", &leader, false),
        ("fenced, own campaign", &leader, true),
        ("fenced, Lease read", &reader, true),
    ] {
        let channel = sidecar.channel().await;
        // Warm: discovery and the remembered copy.
        fenced_increment(channel.clone(), &ns, "c", epoch)
            .await
            .unwrap();
        let before = (
            support::apiserver_requests(cp, &["GET", "PUT"], "configmaps").await,
            support::apiserver_requests(cp, &["GET"], "leases").await,
            cpu_seconds(sidecar.pid()),
        );
        let mut took = Vec::with_capacity(WRITES);
        for _ in 0..WRITES {
            let started = std::time::Instant::now();
            let mut client = WriterServiceClient::new(channel.clone());
            client
                .update_with_retry(pb::UpdateWithRetryRequest {
                    target: configmap(&ns, "c"),
                    mutation: increment(),
                    options: Some(pb::WriteOptions {
                        fence: if fenced { fence(&ns, epoch) } else { None },
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .expect("written");
            took.push(started.elapsed());
        }
        let configmaps =
            support::apiserver_requests(cp, &["GET", "PUT"], "configmaps").await - before.0;
        let leases = support::apiserver_requests(cp, &["GET"], "leases").await - before.1;
        let cpu = cpu_seconds(sidecar.pid()) - before.2;
        took.sort();
        eprintln!(
            "{label}: {WRITES} writes, median {:?}, p99 {:?}; configmap requests/write {:.2}, Lease reads/write {:.2} (the campaign's own included); sidecar CPU {:.0} µs/write",
            took[WRITES / 2],
            took[WRITES * 99 / 100],
            configmaps / WRITES as f64,
            leases / WRITES as f64,
            cpu * 1e6 / WRITES as f64
        );
    }
}
