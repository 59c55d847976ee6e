//! `safewrite update` / `safewrite patch-status` from the shell, against the real API
//! server: many shell processes incrementing one counter end exact, in-process and
//! through a sidecar, with `--exec jq` (Transact) and with `--cel`; every exit code; the
//! shell-operator style example hook; conditions, finalizers, owners and keyed entries
//! in both modes. Needs jq on PATH.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::{ControlPlane, Sidecar};

const BIN: &str = env!("CARGO_BIN_EXE_safewrite");

/// The jq increment of docs/shell.md and README.md.
const JQ: &str = r#"jq ".data.n |= (tonumber + 1 | tostring)""#;

/// Shell processes writing at once, and the increments each makes.
const PROCESSES: usize = 16;
const INCREMENTS: usize = 20;

/// Where the command writes: in-process with a kubeconfig, or through a sidecar.
#[derive(Clone, Copy)]
enum Mode<'a> {
    Local(&'a Path),
    Sidecar(&'a str),
}

/// A `safewrite` command in `mode`, with nothing of the test's own environment that
/// would choose the other mode (no home directory kubeconfig either).
fn safewrite(mode: Mode<'_>, home: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .env_remove("SAFEWRITE_ADDRESS")
        .env_remove("SAFEWRITE_TOKEN_FILE")
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

fn run(mut command: Command) -> Output {
    command.output().expect("run safewrite")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn create_counter(cp: &ControlPlane, ns: &str, name: &str, n: &str) -> Api<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name}, "data": {"n": n}
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api
}

async fn counter(api: &Api<ConfigMap>, name: &str) -> String {
    api.get(name).await.unwrap().data.unwrap()["n"].clone()
}

/// Runs PROCESSES shell loops at once, each running `safewrite update cm/NAME -n NS
/// <change...>` INCREMENTS times and stopping at the first failure; returns the time
/// per command. Each command may take 2 minutes: the answer is checked, not the speed,
/// and the suite's other tests share the cores.
fn parallel_shells(mode: Mode<'_>, home: &Path, ns: &str, name: &str, change: &[&str]) -> Duration {
    let script = r#"i=0
while [ "$i" -lt "$INCREMENTS" ]; do
  "$SAFEWRITE" update "cm/$NAME" -n "$NS" --timeout 2m "$@" >/dev/null || exit $?
  i=$((i + 1))
done"#;
    let started = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let template = safewrite(mode, home);
            let mut shell = Command::new("sh");
            for (key, value) in template.get_envs() {
                match value {
                    Some(value) => shell.env(key, value),
                    None => shell.env_remove(key),
                };
            }
            shell
                .env("SAFEWRITE", BIN)
                .env("INCREMENTS", INCREMENTS.to_string())
                .env("NAME", name)
                .env("NS", ns)
                .args(["-c", script, "sh"])
                .args(change)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn sh")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait for sh");
        assert!(
            out.status.success(),
            "a shell loop failed: {}",
            text(&out.stderr)
        );
    }
    let elapsed = started.elapsed();
    elapsed * PROCESSES as u32 / (PROCESSES * INCREMENTS) as u32
}

/// An --exec command that, before proposing its change, has another in-process
/// safewrite write the object (a new resourceVersion every time): every attempt of the
/// outer write conflicts.
fn conflicting_exec(kubeconfig: &Path, ns: &str) -> String {
    format!(
        r#"env -u SAFEWRITE_ADDRESS KUBECONFIG='{}' '{BIN}' update cm/c -n {ns} --timeout 1s --cel '{{"data": {{"b": object.metadata.resourceVersion}}}}' >/dev/null && jq '.data.x = "y"'"#,
        kubeconfig.display()
    )
}

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The sum of `safewrite_api_requests_total` of the sidecar's metrics, by verb.
fn api_requests(sidecar: &Sidecar, verb: &str) -> f64 {
    sidecar
        .metrics()
        .lines()
        .filter(|l| l.starts_with("safewrite_api_requests_total{"))
        .filter(|l| l.contains(&format!("verb=\"{verb}\"")) || verb.is_empty())
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_shell_increments_in_process_end_exact() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-local").await;
    let home = home();
    let kubeconfig = cp.admin_kubeconfig();
    let mode = Mode::Local(&kubeconfig);
    for (name, change) in [
        ("by-jq", ["--exec", JQ]),
        ("by-cel", ["--cel", support::INCREMENT]),
    ] {
        let api = create_counter(cp, &ns, name, "0").await;
        let per_command = parallel_shells(mode, home.path(), &ns, name, &change);
        assert_eq!(
            counter(&api, name).await,
            (PROCESSES * INCREMENTS).to_string()
        );
        eprintln!(
            "in-process, {}: {PROCESSES} shells x {INCREMENTS} increments exact; {per_command:?} per command",
            change[0]
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_shell_increments_through_a_sidecar_end_exact() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-sidecar").await;
    let kubeconfig = cp.admin_kubeconfig();
    let sidecar = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let address = sidecar.addr.to_string();
    // No kubeconfig at all on this side: the kind comes from the built-in table.
    let home = home();
    let mode = Mode::Sidecar(&address);
    for (name, change) in [
        ("by-jq", ["--exec", JQ]),
        ("by-cel", ["--cel", support::INCREMENT]),
    ] {
        let api = create_counter(cp, &ns, name, "0").await;
        let (gets, puts) = (
            api_requests(&sidecar, "get"),
            api_requests(&sidecar, "update"),
        );
        let all = api_requests(&sidecar, "");
        let per_command = parallel_shells(mode, home.path(), &ns, name, &change);
        assert_eq!(
            counter(&api, name).await,
            (PROCESSES * INCREMENTS).to_string()
        );
        let writes = (PROCESSES * INCREMENTS) as f64;
        eprintln!(
            "through a sidecar, {}: {PROCESSES} shells x {INCREMENTS} increments exact; {per_command:?} per command; API requests per write: {:.2} ({:.2} GET, {:.2} PUT (update))",
            change[0],
            (api_requests(&sidecar, "") - all) / writes,
            (api_requests(&sidecar, "get") - gets) / writes,
            (api_requests(&sidecar, "update") - puts) / writes,
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_exit_code_in_process() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-codes").await;
    let home = home();
    let kubeconfig = cp.admin_kubeconfig();
    let mode = Mode::Local(&kubeconfig);
    let api = create_counter(cp, &ns, "c", "1").await;
    let update = |args: &[&str]| {
        let mut command = safewrite(mode, home.path());
        command.args(["update", "-n", &ns]).args(args);
        run(command)
    };

    // 0: written, with the object printed as asked; then unchanged.
    let out = update(&[
        "configmaps/c",
        "--merge",
        r#"{"data": {"n": "2"}}"#,
        "-o",
        "jsonpath={.data.n}",
    ]);
    assert_eq!(
        (code(&out), text(&out.stdout).trim()),
        (0, "2"),
        "{}",
        text(&out.stderr)
    );
    let out = update(&["ConfigMap/c", "--merge", r#"{"data": {"n": "2"}}"#]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "configmap/c unchanged");
    let out = update(&["cm/c", "--exec", "cat", "-o", "name"]);
    assert_eq!((code(&out), text(&out.stdout).trim()), (0, "configmap/c"));

    // 1: the --exec command exits non-zero; nothing is written.
    let out = update(&["cm/c", "--exec", "cat >/dev/null; exit 3"]);
    assert_eq!(code(&out), 1, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("status 3"),
        "{}",
        text(&out.stderr)
    );

    // 2: no change, two changes, a change that does not parse.
    assert_eq!(code(&update(&["cm/c"])), 2);
    assert_eq!(code(&update(&["cm/c", "--cel", "{}", "--merge", "{}"])), 2);
    let out = update(&["cm/c", "--merge", "{not json"]);
    assert_eq!(code(&out), 2, "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out.stderr)
    );
    assert_eq!(code(&update(&["cm", "--merge", "{}"])), 2);

    // 3: a false precondition.
    let out = update(&[
        "cm/c",
        "--if",
        r#"object.data.n == "9""#,
        "--cel",
        support::INCREMENT,
    ]);
    assert_eq!(code(&out), 3, "{}", text(&out.stderr));

    // 4: every attempt conflicts (another writer, here one that waits half its second
    // for the turn this write holds), up to --max-attempts.
    let exec = conflicting_exec(&kubeconfig, &ns);
    let out = update(&["cm/c", "--max-attempts", "2", "--exec", &exec]);
    assert_eq!(code(&out), 4, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("raise --max-attempts"),
        "{}",
        text(&out.stderr)
    );
    // 4: not at the named resourceVersion (a lost compare-and-swap: ABORTED).
    let out = update(&[
        "cm/c",
        "--resource-version",
        "1",
        "--merge",
        r#"{"data": {"x": "y"}}"#,
    ]);
    assert_eq!(code(&out), 4, "{}", text(&out.stderr));

    // 5: no such object, no such kind.
    assert_eq!(code(&update(&["cm/missing", "--merge", "{}"])), 5);
    let out = update(&["widgets.nope.example/x", "--merge", "{}"]);
    assert_eq!(code(&out), 5, "{}", text(&out.stderr));

    // 6: RBAC lets this identity read ConfigMaps, not write them.
    let restricted = cp.restricted_kubeconfig();
    let mut command = safewrite(Mode::Local(&restricted), home.path());
    command.args([
        "update",
        "-n",
        &ns,
        "cm/c",
        "--merge",
        r#"{"data": {"x": "y"}}"#,
    ]);
    let out = run(command);
    assert_eq!(code(&out), 6, "{}", text(&out.stderr));

    // 7: no API server there.
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone.kubeconfig");
    let admin = std::fs::read_to_string(&kubeconfig).unwrap();
    std::fs::write(&gone, admin.replace(cp.server(), "https://127.0.0.1:1")).unwrap();
    let mut command = safewrite(Mode::Local(&gone), home.path());
    command.args([
        "update",
        "-n",
        &ns,
        "cm/c",
        "--merge",
        "{}",
        "--timeout",
        "3s",
    ]);
    let out = run(command);
    assert_eq!(code(&out), 7, "{}", text(&out.stderr));

    // None of the failures wrote: n is still 2, and x was never set (b is the other
    // writer's).
    let data = api.get("c").await.unwrap().data.unwrap();
    assert_eq!((data["n"].as_str(), data.get("x")), ("2", None));

    // Create-or-update, from stdin, then the status subresource is refused for a kind
    // without one (invalid).
    let mut command = safewrite(mode, home.path());
    command
        .args(["update", "-n", &ns, "cm/made", "--create-if-missing", "-"])
        .args(["--cel", support::INCREMENT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = command.spawn().unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"apiVersion: v1\nkind: ConfigMap\ndata:\n  n: \"41\"\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "configmap/made created");
    assert_eq!(counter(&api, "made").await, "42");
    let mut command = safewrite(mode, home.path());
    command.args([
        "patch-status",
        "-n",
        &ns,
        "cm/made",
        "--merge",
        r#"{"status": {}}"#,
    ]);
    assert_eq!(code(&run(command)), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_through_a_sidecar() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-sidecar-codes").await;
    let home = home();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token-for-the-cli-test").unwrap();
    let kubeconfig = cp.admin_kubeconfig();
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--token-file",
        token.to_str().unwrap(),
    ]);
    let address = sidecar.addr.to_string();
    let api = create_counter(cp, &ns, "c", "1").await;
    let update = |token_file: Option<&Path>, args: &[&str]| {
        let mut command = safewrite(Mode::Sidecar(&address), home.path());
        if let Some(token_file) = token_file {
            command.env("SAFEWRITE_TOKEN_FILE", token_file);
        }
        command.args(["update", "-n", &ns]).args(args);
        run(command)
    };
    let with = Some(token.as_path());

    // 0, through Transact: jq's change is written and printed.
    let out = update(with, &["cm/c", "--exec", JQ, "-o", "json"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["data"]["n"], "2");
    // 0: a command that prints the object as it is writes nothing.
    let out = update(with, &["cm/c", "--exec", "cat"]);
    assert_eq!(
        text(&out.stdout).trim(),
        "configmap/c unchanged",
        "{}",
        text(&out.stderr)
    );
    // 1: the command aborts the transaction.
    assert_eq!(code(&update(with, &["cm/c", "--exec", "exit 1"])), 1);
    // 2: the sidecar refuses CEL that does not compile.
    assert_eq!(
        code(&update(with, &["cm/c", "--cel", "object.data.n +"])),
        2
    );
    // 3, 4, 5 as the sidecar answers them.
    assert_eq!(
        code(&update(with, &["cm/c", "--if", "false", "--merge", "{}"])),
        3
    );
    assert_eq!(
        code(&update(
            with,
            &["cm/c", "--resource-version", "1", "--merge", "{}"]
        )),
        4
    );
    // 4 also when every attempt conflicts, up to --max-attempts.
    let exec = conflicting_exec(&kubeconfig, &ns);
    let out = update(with, &["cm/c", "--max-attempts", "2", "--exec", &exec]);
    assert_eq!(code(&out), 4, "{}", text(&out.stderr));
    assert_eq!(code(&update(with, &["cm/missing", "--merge", "{}"])), 5);
    // 6: no token.
    let out = update(None, &["cm/c", "--merge", "{}"]);
    assert_eq!(code(&out), 6, "{}", text(&out.stderr));
    // 7: no sidecar there.
    let mut command = safewrite(Mode::Sidecar("127.0.0.1:1"), home.path());
    command.args([
        "update",
        "-n",
        &ns,
        "cm/c",
        "--merge",
        "{}",
        "--timeout",
        "2s",
    ]);
    let out = run(command);
    assert_eq!(code(&out), 7, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("SAFEWRITE_ADDRESS"),
        "{}",
        text(&out.stderr)
    );
    // Without a kubeconfig, a kind outside the built-in table needs its Kind and
    // --api-version.
    assert_eq!(
        code(&update(with, &["widgets.example.com/w", "--merge", "{}"])),
        2
    );

    let data = api.get("c").await.unwrap().data.unwrap();
    assert_eq!((data["n"].as_str(), data.get("x")), ("2", None));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_hook_counts_every_event() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-hook").await;
    let home = home();
    let dir = tempfile::tempdir().unwrap();
    let context = dir.path().join("binding-context.json");
    // One Synchronization of two objects and one event: three events per run.
    std::fs::write(
        &context,
        json!([
            {"binding": "counted-configmaps", "type": "Synchronization",
             "objects": [{"object": {}}, {"object": {}}]},
            {"binding": "counted-configmaps", "type": "Event", "watchEvent": "Added", "object": {}}
        ])
        .to_string(),
    )
    .unwrap();
    let hook: PathBuf = support::repo_root().join("examples/shell/counter-hook.sh");
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubeconfig = cp.admin_kubeconfig();

    let config = Command::new("sh")
        .arg(&hook)
        .arg("--config")
        .output()
        .unwrap();
    assert!(text(&config.stdout).contains("kind: ConfigMap"));

    let runs: Vec<_> = (0..4)
        .map(|_| {
            let mut command = safewrite(Mode::Local(&kubeconfig), home.path());
            let mut shell = Command::new("sh");
            for (key, value) in command.get_envs() {
                match value {
                    Some(value) => shell.env(key, value),
                    None => shell.env_remove(key),
                };
            }
            let _ = &mut command;
            shell
                .arg(&hook)
                .env("PATH", &path)
                .env("BINDING_CONTEXT_PATH", &context)
                .env("COUNTER_NAMESPACE", &ns)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the hook failed: {}",
            text(&out.stderr)
        );
    }
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    assert_eq!(counter(&api, "hook-counter").await, "12");
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_kinds_by_plural_group_and_status_in_both_modes() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-crd").await;
    let client = cp.admin_client().await;
    support::install_crd(&client, "clithings", "CliThing").await;
    let home = home();
    let kubeconfig = cp.admin_kubeconfig();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("safewrite.sock");
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--unix-socket",
        socket.to_str().unwrap(),
    ]);
    let address = sidecar.addr.to_string();
    let object = |name: &str| {
        json!({"apiVersion": "test.safewrite.dev/v1", "kind": "CliThing",
               "metadata": {"name": name}, "spec": {"n": 0}})
        .to_string()
    };
    let manifest = dir.path().join("thing.json");
    std::fs::write(&manifest, object("t1")).unwrap();

    // In-process: created by plural.group, its status written by singular name.
    let mut command = safewrite(Mode::Local(&kubeconfig), home.path());
    command.args([
        "update",
        "-n",
        &ns,
        "clithings.test.safewrite.dev/t1",
        "--merge",
        "{}",
    ]);
    command.arg("--create-if-missing").arg(&manifest);
    let out = run(command);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "clithing.test.safewrite.dev/t1 created"
    );
    let mut command = safewrite(Mode::Local(&kubeconfig), home.path());
    command.args(["patch-status", "-n", &ns, "clithing/t1"]);
    command.args(["--cel", r#"{"status": {"seen": object.spec.n + 1}}"#]);
    command.args(["-o", "jsonpath={.status.seen}"]);
    let out = run(command);
    assert_eq!(
        (code(&out), text(&out.stdout).trim()),
        (0, "1"),
        "{}",
        text(&out.stderr)
    );

    // Through the sidecar with a kubeconfig at hand: discovery resolves the Kind.
    let mut command = safewrite(Mode::Sidecar(&address), home.path());
    command.env("KUBECONFIG", &kubeconfig);
    command.args(["patch-status", "-n", &ns, "CliThing/t1"]);
    command.args(["--merge", r#"{"status": {"seen": 2}}"#, "-o", "name"]);
    let out = run(command);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "clithing.test.safewrite.dev/t1");
    // Without one: the Kind and --api-version (here over the sidecar's unix socket).
    let unix = format!("unix://{}", socket.display());
    let mut command = safewrite(Mode::Sidecar(&unix), home.path());
    command.args([
        "update",
        "-n",
        &ns,
        "CliThing/t1",
        "--api-version",
        "test.safewrite.dev/v1",
    ]);
    command.args([
        "--exec",
        r#"jq ".spec.n = 5""#,
        "-o",
        "jsonpath={.spec.n}/{.status.seen}",
    ]);
    let out = run(command);
    assert_eq!(
        (code(&out), text(&out.stdout).trim()),
        (0, "5/2"),
        "{}",
        text(&out.stderr)
    );
}

/// The test CRD's objects, `CliThing` of test.safewrite.dev/v1, in `ns`.
fn things(client: kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "test.safewrite.dev".into(),
        version: "v1".into(),
        api_version: "test.safewrite.dev/v1".into(),
        kind: "CliThing".into(),
        plural: "clithings".into(),
    };
    Api::namespaced_with(client, ns, &resource)
}

/// The stdout of a command that must have exited 0, trimmed.
fn ok(out: &Output) -> String {
    assert_eq!(code(out), 0, "{}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

/// How a mode can name the custom resource t1: as the object written, and as an owner.
struct Thing<'a> {
    object: &'a [&'a str],
    owner: &'a [&'a str],
}

/// The list changes as a user makes them in `mode`: conditions and keyed entries on the
/// status of the custom resource t1, finalizers (with an object deleted under them) and
/// owners (ConfigMaps and t1) on ConfigMaps, and values that do not parse (exit 2,
/// nothing written).
async fn list_changes(cp: &ControlPlane, ns: &str, mode: Mode<'_>, names: Thing<'_>) {
    let thing = names.object;
    let client = cp.admin_client().await;
    support::install_crd(&client, "clithings", "CliThing").await;
    let things = things(client.clone(), ns);
    let t1: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.safewrite.dev/v1", "kind": "CliThing",
        "metadata": {"name": "t1"}, "spec": {"n": 0}
    }))
    .unwrap();
    things.create(&PostParams::default(), &t1).await.unwrap();
    let status = async || things.get("t1").await.unwrap().data["status"].clone();
    let home = home();
    let sw = |verb: &str, target: &[&str], args: &[&str]| {
        let mut command = safewrite(mode, home.path());
        command.args([verb, "-n", ns]).args(target).args(args);
        run(command)
    };
    let thing_is = |what: &str| format!("clithing.test.safewrite.dev/t1 status {what}");

    // A condition, with the object's generation; set again as it is, nothing is written.
    let ready = [
        "--set-condition",
        "Ready=True",
        "--reason",
        "Reconciled",
        "--message",
        "all good",
    ];
    let printed: Value = serde_json::from_str(&ok(&sw(
        "patch-status",
        thing,
        &[&ready[..], &["-o", "json"]].concat(),
    )))
    .unwrap();
    let condition = &printed["status"]["conditions"][0];
    assert_eq!(
        (
            &condition["type"],
            &condition["status"],
            &condition["reason"],
            &condition["message"]
        ),
        (
            &json!("Ready"),
            &json!("True"),
            &json!("Reconciled"),
            &json!("all good")
        )
    );
    assert_eq!(
        condition["observedGeneration"],
        printed["metadata"]["generation"]
    );
    assert!(condition["lastTransitionTime"].is_string(), "{condition}");
    assert_eq!(
        ok(&sw("patch-status", thing, &ready)),
        thing_is("unchanged")
    );
    // A second one, then the first removed: the second stays as it was set.
    let synced = [
        "--set-condition",
        "Synced=false",
        "--reason",
        "Waiting",
        "--observed-generation",
        "7",
    ];
    assert_eq!(ok(&sw("patch-status", thing, &synced)), thing_is("updated"));
    let removed = ok(&sw("patch-status", thing, &["--remove-condition", "Ready"]));
    assert_eq!(removed, thing_is("updated"));
    let conditions = status().await["conditions"].clone();
    assert_eq!(conditions.as_array().map(Vec::len), Some(1), "{conditions}");
    assert_eq!(
        (
            &conditions[0]["type"],
            &conditions[0]["status"],
            &conditions[0]["observedGeneration"]
        ),
        (&json!("Synced"), &json!("False"), &json!(7))
    );
    // Through update, whose kind has a status subresource: refused, naming the flag and
    // the command to use.
    let out = sw("update", thing, &ready);
    assert_eq!(code(&out), 2, "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("--set-condition") && said.contains("use safewrite patch-status"),
        "{said}"
    );

    // Keyed entries: appended, merged in place, removed; the others kept in order.
    for (entry, what) in [
        (
            r#"status.parents[controllerName=example.com/gw]={"accepted": false}"#,
            "updated",
        ),
        (
            r#"status.parents[controllerName=example.com/b]={"accepted": true}"#,
            "updated",
        ),
        (
            r#"status.parents[controllerName=example.com/gw]={"accepted": true}"#,
            "updated",
        ),
        (
            r#"status.parents[controllerName=example.com/gw]={"accepted": true}"#,
            "unchanged",
        ),
    ] {
        let out = sw("patch-status", thing, &["--upsert-entry", entry]);
        assert_eq!(ok(&out), thing_is(what), "{entry}");
    }
    assert_eq!(
        status().await["parents"],
        json!([
            {"controllerName": "example.com/gw", "accepted": true},
            {"controllerName": "example.com/b", "accepted": true}
        ])
    );
    let gw = "status.parents[controllerName=example.com/gw]";
    assert_eq!(
        ok(&sw("patch-status", thing, &["--remove-entry", gw])),
        thing_is("updated")
    );
    assert_eq!(
        ok(&sw("patch-status", thing, &["--remove-entry", gw])),
        thing_is("unchanged")
    );
    assert_eq!(
        status().await["parents"],
        json!([{"controllerName": "example.com/b", "accepted": true}])
    );

    // Finalizers: added once, removed.
    let cms = create_counter(cp, ns, "f", "0").await;
    let finalizers = async || cms.get("f").await.unwrap().metadata.finalizers;
    let hold = ["--add-finalizer", "example.com/hold"];
    assert_eq!(ok(&sw("update", &["cm/f"], &hold)), "configmap/f updated");
    assert_eq!(ok(&sw("update", &["cm/f"], &hold)), "configmap/f unchanged");
    assert_eq!(
        finalizers().await,
        Some(vec!["example.com/hold".to_string()])
    );
    let release = ["--remove-finalizer", "example.com/hold"];
    assert_eq!(
        ok(&sw("update", &["cm/f"], &release)),
        "configmap/f updated"
    );
    assert_eq!(finalizers().await, None);
    // Held and deleted: no new finalizer; removing the last one lets it go, and -o json
    // prints it as last written.
    ok(&sw("update", &["cm/f"], &hold));
    cms.delete("f", &DeleteParams::default()).await.unwrap();
    let out = sw(
        "update",
        &["cm/f"],
        &["--add-finalizer", "example.com/late"],
    );
    assert_eq!(code(&out), 3, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("deleted"),
        "{}",
        text(&out.stderr)
    );
    let last: Value = serde_json::from_str(&ok(&sw(
        "update",
        &["cm/f"],
        &[&release[..], &["-o", "json"]].concat(),
    )))
    .unwrap();
    assert_eq!(last["metadata"]["name"], "f");
    assert!(last["metadata"]["deletionTimestamp"].is_string(), "{last}");
    assert!(cms.get_opt("f").await.unwrap().is_none());
    // Already gone: done, with nothing to print but the line (or the name).
    assert_eq!(ok(&sw("update", &["cm/f"], &release)), "configmap/f gone");
    assert_eq!(
        ok(&sw(
            "update",
            &["cm/f"],
            &[&release[..], &["-o", "json"]].concat()
        )),
        ""
    );
    assert_eq!(
        ok(&sw(
            "update",
            &["cm/f"],
            &[&release[..], &["-o", "name"]].concat()
        )),
        "configmap/f"
    );

    // Owners, named by KIND/NAME; their uid read by the write.
    for name in ["parent", "other", "child"] {
        create_counter(cp, ns, name, "0").await;
    }
    let uid = cms.get("parent").await.unwrap().metadata.uid.unwrap();
    let owners = async || cms.get("child").await.unwrap().metadata.owner_references;
    let own = [
        "--add-owner",
        "cm/parent",
        "--controller",
        "--block-owner-deletion",
    ];
    assert_eq!(
        ok(&sw("update", &["cm/child"], &own)),
        "configmap/child updated"
    );
    assert_eq!(
        ok(&sw("update", &["cm/child"], &own)),
        "configmap/child unchanged"
    );
    let references = serde_json::to_value(owners().await).unwrap();
    assert_eq!(
        references,
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": uid,
                "controller": true, "blockOwnerDeletion": true}])
    );
    // A second controller is refused, naming the first; a second owner is not.
    let out = sw(
        "update",
        &["cm/child"],
        &["--add-owner", "configmap/other", "--controller"],
    );
    assert_eq!(code(&out), 3, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("parent"),
        "{}",
        text(&out.stderr)
    );
    ok(&sw(
        "update",
        &["cm/child"],
        &["--add-owner", "ConfigMap/other"],
    ));
    assert_eq!(
        ok(&sw(
            "update",
            &["cm/child"],
            &["--remove-owner", "cm/parent"]
        )),
        "configmap/child updated"
    );
    let references = owners().await.unwrap();
    assert_eq!(
        references
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["other"]
    );
    // An owner that does not exist: a precondition.
    let out = sw("update", &["cm/child"], &["--add-owner", "cm/missing"]);
    assert_eq!(code(&out), 3, "{}", text(&out.stderr));
    // An owner of a custom kind.
    ok(&sw("update", &["cm/child"], names.owner));
    let t1_uid = things.get("t1").await.unwrap().metadata.uid.unwrap();
    let reference = serde_json::to_value(&owners().await.unwrap()[1]).unwrap();
    assert_eq!(
        reference,
        json!({"apiVersion": "test.safewrite.dev/v1", "kind": "CliThing", "name": "t1",
               "uid": t1_uid})
    );

    // Values that cannot be read: exit 2 in one line, nothing written.
    let before = cms.get("child").await.unwrap().metadata.resource_version;
    for bad in [
        &["--set-condition", "Ready"][..],
        &["--set-condition", "Ready=maybe", "--reason", "R"],
        &["--set-condition", "Ready=True"],
        &["--upsert-entry", "data.list"],
        &["--upsert-entry", "data.list[k=v]=[1]"],
        &["--remove-entry", "data.list[k]"],
        &["--add-finalizer", "example.com/x", "--merge", "{}"],
        &["--add-finalizer", "example.com/x", "--reason", "R"],
        &["--add-owner", "cm"],
    ] {
        let out = sw("update", &["cm/child"], bad);
        assert_eq!(code(&out), 2, "{bad:?}: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stderr).lines().count(),
            1,
            "{}",
            text(&out.stderr)
        );
    }
    // A finalizer is not status: patch-status refuses it, naming the flag.
    let out = sw("patch-status", thing, &["--add-finalizer", "example.com/x"]);
    assert_eq!(code(&out), 2, "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("--add-finalizer") && said.contains("safewrite update"),
        "{said}"
    );
    let after = cms.get("child").await.unwrap().metadata.resource_version;
    assert_eq!(before, after);
    assert!(
        things
            .get("t1")
            .await
            .unwrap()
            .metadata
            .finalizers
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn conditions_finalizers_owners_and_entries_in_process() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-lists").await;
    let kubeconfig = cp.admin_kubeconfig();
    let thing = Thing {
        object: &["clithing/t1"],
        owner: &["--add-owner", "clithings.test.safewrite.dev/t1"],
    };
    list_changes(cp, &ns, Mode::Local(&kubeconfig), thing).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn conditions_finalizers_owners_and_entries_through_a_sidecar() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-lists-sidecar").await;
    let kubeconfig = cp.admin_kubeconfig();
    let sidecar = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let address = sidecar.addr.to_string();
    // No kubeconfig on this side: the owners' kinds come from the built-in table, the
    // custom kind by its Kind and apiVersion.
    let version = "test.safewrite.dev/v1";
    let thing = Thing {
        object: &["CliThing/t1", "--api-version", version],
        owner: &["--add-owner", "CliThing/t1", "--owner-api-version", version],
    };
    list_changes(cp, &ns, Mode::Sidecar(&address), thing).await;
    // Without its apiVersion, the owner's Kind cannot be resolved here.
    let home = home();
    let mut command = safewrite(Mode::Sidecar(&address), home.path());
    command.args([
        "update",
        "-n",
        &ns,
        "cm/child",
        "--add-owner",
        "CliThing/t1",
    ]);
    let out = run(command);
    assert_eq!(code(&out), 2, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--owner-api-version"),
        "{}",
        text(&out.stderr)
    );
}
