//! The test harness itself, proven against the real kube-apiserver it starts: objects can
//! be created, custom resources with a status subresource work, a stale write is refused
//! with 409 Conflict, the restricted identity gets 403, and teardown leaves nothing behind
//! however the test process ends.

use crate::support;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::json;
use support::{ControlPlane, install_crd, process_alive, wait_until};

fn configmap(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("configmap")
}

#[tokio::test]
async fn stale_resource_version_put_is_refused_with_conflict() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("harness").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let created = api
        .create(
            &PostParams::default(),
            &configmap("counter", json!({"n": "0"})),
        )
        .await
        .expect("create");
    let stale = created.clone();

    let mut fresh = created;
    fresh.data = Some([("n".to_string(), "1".to_string())].into());
    api.replace("counter", &PostParams::default(), &fresh)
        .await
        .expect("first update");

    let mut from_stale = stale;
    from_stale.data = Some([("n".to_string(), "2".to_string())].into());
    let err = api
        .replace("counter", &PostParams::default(), &from_stale)
        .await
        .expect_err("a write with a stale resourceVersion must be refused");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert_eq!(status.reason, "Conflict", "{status:?}");
        }
        other => panic!("expected an API error, got {other}"),
    }
    let now = api.get("counter").await.expect("get");
    assert_eq!(
        now.data.unwrap()["n"],
        "1",
        "the stale write changed nothing"
    );
}

#[tokio::test]
async fn custom_resource_with_status_subresource_is_served() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = cp.namespace("harness-crd").await;
    install_crd(&client, "widgets", "Widget").await;

    let gvk = GroupVersionKind::gvk("test.safewrite.dev", "v1", "Widget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.safewrite.dev/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 1}
    }))
    .expect("widget");
    api.create(&PostParams::default(), &widget)
        .await
        .expect("create widget");

    api.patch_status(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"count": 5}})),
    )
    .await
    .expect("patch status");
    // Through the main resource, status is ignored: the subresource is real.
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 2}, "status": {"count": 99}})),
    )
    .await
    .expect("patch main resource");
    let now = api.get("w1").await.expect("get");
    assert_eq!(now.data["spec"]["size"], 2);
    assert_eq!(now.data["status"]["count"], 5);
}

#[tokio::test]
async fn restricted_identity_may_read_but_not_write() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("harness-rbac").await;
    let admin: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    admin
        .create(&PostParams::default(), &configmap("readable", json!({})))
        .await
        .expect("create");

    let restricted: Api<ConfigMap> = Api::namespaced(cp.restricted_client().await, &ns);
    restricted
        .get("readable")
        .await
        .expect("restricted can get");
    let err = restricted
        .create(&PostParams::default(), &configmap("forbidden", json!({})))
        .await
        .expect_err("restricted cannot create");
    match err {
        kube::Error::Api(status) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403, got {other}"),
    }
}

#[tokio::test]
async fn each_test_gets_its_own_namespace() {
    let cp = ControlPlane::shared();
    let a = cp.namespace("harness-ns").await;
    let b = cp.namespace("harness-ns").await;
    assert_ne!(a, b);
    let client = cp.admin_client().await;
    for ns in [&a, &b] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        api.create(&PostParams::default(), &configmap("same-name", json!({})))
            .await
            .expect("the same name in two namespaces does not collide");
    }
}

/// What a child test process reports about the control plane it started.
struct Started {
    dir: PathBuf,
    pids: Vec<u32>,
    ports: Vec<u16>,
}

/// Runs `harness_child` in a child copy of this test binary, which starts a control plane
/// and then either panics or hangs; the parent ends it as `how` says and checks that
/// nothing of the control plane is left.
fn child_control_plane_leaves_nothing(how: &str) {
    let report = tempfile::NamedTempFile::new().expect("temp file");
    let go = tempfile::tempdir().expect("temp dir");
    let go_file = go.path().join("go");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "harness::harness_child",
            "--ignored",
            "--nocapture",
        ])
        .env("SAFEWRITE_CHILD_REPORT", report.path())
        .env("SAFEWRITE_CHILD_END", how)
        .env("SAFEWRITE_CHILD_GO", &go_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child test");

    let text = || std::fs::read_to_string(report.path()).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(180), || text().ends_with('\n')),
        "the child never reported a running control plane"
    );
    let started = parse_report(&text());
    assert!(started.dir.exists());
    assert!(started.pids.iter().all(|&pid| process_alive(pid)));

    // Only now may the child end: it waits for this file before panicking.
    std::fs::write(&go_file, "go").expect("write go file");
    if how == "sigkill" {
        child.kill().expect("SIGKILL the child");
    }
    let status = child.wait().expect("wait child");
    assert!(!status.success(), "the child test ended by {how}");

    assert_left_nothing(&started, how);
}

/// Waits (30 s at most) until `started`'s directory, processes and ports are gone, and
/// fails naming what was left after `how`.
fn assert_left_nothing(started: &Started, how: &str) {
    let gone = wait_until(Duration::from_secs(30), || {
        !started.dir.exists()
            && started.pids.iter().all(|&pid| !process_alive(pid))
            && started
                .ports
                .iter()
                .all(|&port| TcpStream::connect(("127.0.0.1", port)).is_err())
    });
    assert!(
        gone,
        "left behind after {how}: dir exists={}, live pids={:?}, open ports={:?}",
        started.dir.exists(),
        started
            .pids
            .iter()
            .filter(|&&p| process_alive(p))
            .collect::<Vec<_>>(),
        started
            .ports
            .iter()
            .filter(|&&p| TcpStream::connect(("127.0.0.1", p)).is_ok())
            .collect::<Vec<_>>()
    );
}

fn parse_report(text: &str) -> Started {
    let mut lines = text.lines();
    let dir = PathBuf::from(lines.next().expect("dir line"));
    let numbers = |line: Option<&str>| -> Vec<u32> {
        line.expect("line")
            .split_whitespace()
            .map(|n| n.parse().expect("number"))
            .collect()
    };
    let pids = numbers(lines.next());
    let ports = numbers(lines.next())
        .into_iter()
        .map(|p| p as u16)
        .collect();
    Started { dir, pids, ports }
}

#[test]
fn teardown_leaves_nothing_when_the_test_process_is_killed() {
    child_control_plane_leaves_nothing("sigkill");
}

/// A control plane a test owns (`ControlPlane::start`) is stopped with SIGTERM when it
/// is dropped; the script's teardown must run whole (it once ran from the signal's trap,
/// where bash's `read -t` cut it short and left the directory behind).
#[test]
fn teardown_leaves_nothing_when_a_control_plane_is_dropped() {
    let cp = ControlPlane::start();
    let started = Started {
        dir: cp.dir.clone(),
        pids: ["APISERVER_PID", "ETCD_PID"]
            .iter()
            .map(|k| cp.env[*k].parse().expect("pid"))
            .collect(),
        ports: ["API_PORT", "ETCD_PORT", "ETCD_PEER_PORT"]
            .iter()
            .map(|k| cp.env[*k].parse().expect("port"))
            .collect(),
    };
    assert!(started.dir.exists());
    assert!(started.pids.iter().all(|&pid| process_alive(pid)));
    // Let the script settle into its loop, where a signal once cut the teardown short.
    std::thread::sleep(Duration::from_millis(1500));
    drop(cp);
    assert_left_nothing(&started, "a drop (SIGTERM)");
}

#[test]
fn teardown_leaves_nothing_when_a_test_panics() {
    child_control_plane_leaves_nothing("panic");
}

/// Not a test of its own: the child half of the teardown tests above.
#[test]
#[ignore = "run by the teardown tests as a child process"]
fn harness_child() {
    let Ok(report) = std::env::var("SAFEWRITE_CHILD_REPORT") else {
        return;
    };
    // Leaked on purpose: like the shared control plane, it is never dropped, so only
    // the pipe closing at process exit can tear it down.
    let cp: &'static ControlPlane = Box::leak(Box::new(ControlPlane::start()));
    let env = &cp.env;
    let text = format!(
        "{}\n{} {}\n{} {} {}\n",
        cp.dir.display(),
        env["APISERVER_PID"],
        env["ETCD_PID"],
        env["API_PORT"],
        env["ETCD_PORT"],
        env["ETCD_PEER_PORT"],
    );
    std::fs::write(&report, text).expect("write report");
    if let Ok(go) = std::env::var("SAFEWRITE_CHILD_GO") {
        wait_until(Duration::from_secs(120), || {
            std::path::Path::new(&go).exists()
        });
    }
    if std::env::var("SAFEWRITE_CHILD_END").as_deref() == Ok("panic") {
        panic!("the child test panics with a control plane running");
    }
    std::thread::sleep(Duration::from_secs(600));
}
