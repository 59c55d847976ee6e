//! `safewrite delete` from the shell, against the real API server, in-process and
//! through a sidecar: every outcome (deleted, deleting, gone, dry run) and exit code
//! (a false --if or --uid keeps the object: 3; a stale --resource-version: 4; bad flags:
//! 2), the object printed with -o, and fencing: a delete fenced by a Lease nobody holds
//! is refused (NOT_LEADER), inside `safewrite lead` the delete is fenced without a flag,
//! and an object recording a later epoch of the Lease is kept (FENCED).

use crate::support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::{ControlPlane, Sidecar};

const BIN: &str = env!("CARGO_BIN_EXE_safewrite");

/// Where the command deletes: in-process with a kubeconfig, or through a sidecar.
#[derive(Clone, Copy)]
enum Mode<'a> {
    Local(&'a Path),
    Sidecar(&'a str),
}

/// `safewrite ARGS...` in `mode`, with nothing of the test's environment that would
/// choose the other mode, and its output.
fn safewrite(mode: Mode<'_>, home: &Path, args: &[&str]) -> Output {
    let mut command = command(mode, home);
    command.args(args).output().expect("run safewrite")
}

/// The `safewrite` command of [`safewrite`], without its arguments.
fn command(mode: Mode<'_>, home: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .env_remove("SAFEWRITE_ADDRESS")
        .env_remove("SAFEWRITE_TOKEN_FILE")
        .env_remove("SAFEWRITE_LEASE")
        .env_remove("SAFEWRITE_LEASE_EPOCH")
        .env_remove("KUBECONFIG")
        .env_remove("SAFEWRITE_LOG")
        .env("HOME", home)
        .stdin(Stdio::null());
    match mode {
        Mode::Local(kubeconfig) => command.env("KUBECONFIG", kubeconfig),
        Mode::Sidecar(address) => command.env("SAFEWRITE_ADDRESS", address),
    };
    command
}

/// Exit code, stdout and stderr.
fn said(output: &Output) -> (i32, String, String) {
    (
        output.status.code().expect("exited"),
        String::from_utf8_lossy(&output.stdout).trim().to_string(),
        String::from_utf8_lossy(&output.stderr).trim().to_string(),
    )
}

async fn create(api: &Api<ConfigMap>, name: &str, metadata: serde_json::Value) -> ConfigMap {
    let mut object = json!({"metadata": metadata, "data": {"phase": "Running"}});
    object["metadata"]["name"] = json!(name);
    let cm: ConfigMap = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap()
}

async fn exists(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_some()
}

/// Every outcome and refusal of `safewrite delete` in `mode`, in namespace `ns`.
async fn outcomes(cp: &ControlPlane, ns: &str, mode: Mode<'_>) {
    let home = tempfile::tempdir().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, ns);
    let delete = |args: &[&str]| {
        let mut all = vec!["delete"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-n", ns]);
        said(&safewrite(mode, home.path(), &all))
    };

    // Deleted, then gone (exit 0 both times).
    create(&api, "plain", json!({})).await;
    assert_eq!(
        delete(&["cm/plain"]),
        (0, "configmap/plain deleted".into(), String::new())
    );
    assert!(!exists(&api, "plain").await);
    assert_eq!(
        delete(&["cm/plain"]),
        (0, "configmap/plain gone".into(), String::new())
    );
    assert_eq!(
        delete(&["cm/plain", "-o", "name"]),
        (0, "configmap/plain".into(), String::new())
    );

    // A uid that is not the object's: the object is kept (exit 3), and the right one
    // deletes it.
    let made = create(&api, "by-uid", json!({})).await;
    let uid = made.metadata.uid.unwrap();
    let (code, _, stderr) = delete(&["cm/by-uid", "--uid", "00000000-0000-0000-0000-000000000000"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("uid"), "{stderr}");
    assert!(exists(&api, "by-uid").await);
    assert_eq!(delete(&["cm/by-uid", "--uid", &uid]).0, 0);
    assert!(!exists(&api, "by-uid").await);

    // A CEL condition: false keeps it (exit 3), true deletes it.
    create(&api, "by-cel", json!({})).await;
    let (code, _, stderr) = delete(&["cm/by-cel", "--if", "object.data.phase == 'Done'"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("CEL condition is false"), "{stderr}");
    assert!(exists(&api, "by-cel").await);
    assert_eq!(
        delete(&["cm/by-cel", "--if", "object.data.phase == 'Running'"]).0,
        0
    );
    assert!(!exists(&api, "by-cel").await);

    // An exact resourceVersion that is not the object's: exit 4, kept.
    let made = create(&api, "by-rv", json!({})).await;
    let rv = made.metadata.resource_version.unwrap();
    let stale = (rv.parse::<u64>().unwrap() - 1).to_string();
    let (code, _, stderr) = delete(&["cm/by-rv", "--resource-version", &stale]);
    assert_eq!(code, 4, "{stderr}");
    assert!(exists(&api, "by-rv").await);
    assert_eq!(delete(&["cm/by-rv", "--resource-version", &rv]).0, 0);

    // Dry run: said, and nothing deleted.
    create(&api, "dry", json!({})).await;
    assert_eq!(
        delete(&["cm/dry", "--dry-run"]),
        (0, "configmap/dry deleted (dry run)".into(), String::new())
    );
    assert!(exists(&api, "dry").await);

    // A finalizer keeps it deleting; -o prints the object with its deletionTimestamp.
    create(&api, "held", json!({"finalizers": ["example.com/hold"]})).await;
    let (code, stdout, stderr) = delete(&[
        "cm/held",
        "--cascade",
        "foreground",
        "-o",
        "jsonpath={.metadata.deletionTimestamp}",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.ends_with('Z') && stdout.len() >= 20, "{stdout:?}");
    assert_eq!(
        delete(&["cm/held"]),
        (0, "configmap/held deleting".into(), String::new())
    );
    let patch = json!({"metadata": {"finalizers": null}});
    api.patch("held", &Default::default(), &kube::api::Patch::Merge(patch))
        .await
        .unwrap();

    // Bad flags: exit 2 with one line, nothing sent.
    for bad in [
        &["cm/x", "--cascade", "sideways"][..],
        &["nothing-here"],
        &["cm/x", "--if", "object.data.("],
        &["cm/x", "--fence", "no-slash", "--fence-epoch", "1"],
        &["cm/x", "--fence", "default/lease"],
    ] {
        let (code, stdout, stderr) = delete(bad);
        assert_eq!(code, 2, "{bad:?}: {stderr}");
        assert!(
            stdout.is_empty() && stderr.lines().count() == 1,
            "{bad:?}: {stderr}"
        );
    }
}

/// Fenced deletes in `mode`: refused without leadership, made inside `safewrite lead`,
/// refused on an object a later leader wrote.
async fn fenced(cp: &ControlPlane, ns: &str, mode: Mode<'_>) {
    let home = tempfile::tempdir().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, ns);
    let lease = format!("{ns}/deleter");

    // Nobody leads: NOT_LEADER, exit 3, kept.
    create(&api, "unled", json!({})).await;
    let args = [
        "delete",
        "cm/unled",
        "-n",
        ns,
        "--fence",
        &lease,
        "--fence-epoch",
        "1",
    ];
    let (code, _, stderr) = said(&safewrite(mode, home.path(), &args));
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("lead"), "{stderr}");
    assert!(exists(&api, "unled").await);

    // Inside `safewrite lead`: fenced by its environment, and made.
    let lead = |script: &str| {
        let args = [
            "lead",
            "--lease",
            &lease,
            "--lease-duration",
            "2s",
            "--renew-deadline",
            "1.5s",
            "--retry-period",
            "300ms",
            "--",
            "sh",
            "-c",
            script,
        ];
        let mut lead = command(mode, home.path());
        lead.env("SAFEWRITE", BIN).env("NS", ns).args(args);
        said(&lead.output().expect("run safewrite lead"))
    };
    let (code, stdout, stderr) =
        lead(r#""$SAFEWRITE" delete cm/unled -n "$NS" && echo "epoch $SAFEWRITE_LEASE_EPOCH""#);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("configmap/unled deleted\nepoch "),
        "{stdout}"
    );
    assert!(!exists(&api, "unled").await);

    // An object that records a later epoch of the Lease: FENCED, kept, even while
    // leading.
    create(
        &api,
        "later",
        json!({"annotations": {"safewrite.dev/fence": json!({ &lease: 1000 }).to_string()}}),
    )
    .await;
    let (code, stdout, stderr) = lead(r#""$SAFEWRITE" delete cm/later -n "$NS"; echo "exit $?""#);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "exit 3", "{stderr}");
    assert!(stderr.contains("1000"), "{stderr}");
    assert!(exists(&api, "later").await);
    api.delete("later", &DeleteParams::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_in_process() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-delete").await;
    let kubeconfig = cp.admin_kubeconfig();
    outcomes(cp, &ns, Mode::Local(&kubeconfig)).await;
    fenced(cp, &ns, Mode::Local(&kubeconfig)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_through_a_sidecar() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-delete-sidecar").await;
    let kubeconfig = cp.admin_kubeconfig();
    let sidecar = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let address = sidecar.addr.to_string();
    outcomes(cp, &ns, Mode::Sidecar(&address)).await;
    fenced(cp, &ns, Mode::Sidecar(&address)).await;
}
