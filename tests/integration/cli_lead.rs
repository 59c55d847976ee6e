//! `safewrite lead` against the real API server, in-process and through a sidecar: two
//! processes on one Lease, each running a shell command that notes its start and stop
//! with its SAFEWRITE_LEASE_EPOCH; exactly one runs at a time; SIGTERM to the leader stops
//! its command, releases the Lease, and the other starts within about a retry period
//! under a higher epoch. A command that exits by itself gives its code and releases the
//! Lease (one that cannot be started: 127); a candidate stopped while it waits exits 143
//! and never runs its command; a Lease taken by another holder stops the command (exit
//! 8); a sidecar whose policy refuses `lead` exits 6, a missing one 7; bad flags exit 2
//! with one line. Timings: 2 s lease, 1.5 s renew deadline, 0.3 s retry period.

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use support::{ControlPlane, Sidecar};

const BIN: &str = env!("CARGO_BIN_EXE_safewrite");
const TIMINGS: [&str; 8] = [
    "--lease-duration",
    "2s",
    "--renew-deadline",
    "1.5s",
    "--retry-period",
    "300ms",
    "--grace",
    "3s",
];
/// Notes its start and its stop (on SIGTERM) in $NOTES, as `start|stop WHO EPOCH`.
const NOTING: &str = r#"echo "start $WHO $SAFEWRITE_LEASE_EPOCH" >> "$NOTES"
trap 'echo "stop $WHO $SAFEWRITE_LEASE_EPOCH" >> "$NOTES"; exit 0' TERM
sleep 60 & wait"#;

/// Where the campaign runs.
#[derive(Clone, Copy)]
enum Mode<'a> {
    Local(&'a Path),
    Sidecar(&'a str),
}

/// A `safewrite lead` process, killed if a failed test leaves it running.
struct Leader(Child);

impl Drop for Leader {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Leader {
    fn pid(&self) -> String {
        self.0.id().to_string()
    }

    /// Its exit code and stderr, waiting at most `within`.
    fn end(&mut self, within: Duration) -> (i32, String) {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                break status;
            }
            assert!(
                started.elapsed() < within,
                "safewrite lead did not exit in time"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = self.0.stderr.take() {
            std::io::Read::read_to_string(&mut pipe, &mut stderr).expect("stderr");
        }
        (status.code().expect("exited"), stderr)
    }
}

fn lead(mode: Mode<'_>, home: &Path, lease: &str, who: &str, notes: &Path, script: &str) -> Leader {
    let mut command = lead_command(mode, home, lease, who, notes, script);
    Leader(command.spawn().expect("spawn safewrite lead"))
}

/// `safewrite lead` as [`lead`] starts it, not started yet.
fn lead_command(
    mode: Mode<'_>,
    home: &Path,
    lease: &str,
    who: &str,
    notes: &Path,
    script: &str,
) -> Command {
    let mut command = Command::new(BIN);
    command
        .env_remove("SAFEWRITE_ADDRESS")
        .env_remove("SAFEWRITE_TOKEN_FILE")
        .env_remove("KUBECONFIG")
        .env("HOME", home)
        .env("WHO", who)
        .env("NOTES", notes)
        .args(["lead", "--lease", lease, "--identity", who])
        .args(TIMINGS)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    match mode {
        Mode::Local(kubeconfig) => command.env("KUBECONFIG", kubeconfig),
        Mode::Sidecar(address) => command.env("SAFEWRITE_ADDRESS", address),
    };
    command
}

fn notes(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Waits until the notes have `count` lines, at most `within`; returns them.
fn until_notes(path: &Path, count: usize, within: Duration) -> Vec<String> {
    let started = Instant::now();
    loop {
        let lines = notes(path);
        if lines.len() >= count {
            return lines;
        }
        assert!(
            started.elapsed() < within,
            "{count} notes expected in {within:?}, got {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `start WHO EPOCH` as (WHO, EPOCH).
fn started(line: &str) -> (String, u64) {
    let parts: Vec<&str> = line.split(' ').collect();
    assert_eq!(parts.len(), 3, "{line}");
    (parts[1].to_string(), parts[2].parse().expect("an epoch"))
}

/// Waits until the Lease is released (its holder cleared), at most 5 s: through a
/// sidecar, the release follows the stream's close.
async fn until_released(cp: &ControlPlane, ns: &str, name: &str) {
    let started = Instant::now();
    while !holder(cp, ns, name).await.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the Lease was not released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn holder(cp: &ControlPlane, ns: &str, name: &str) -> String {
    let leases: Api<Lease> = Api::namespaced(cp.admin_client().await, ns);
    let lease = leases.get(name).await.expect("the Lease exists");
    lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

fn sigterm(pid: &str) {
    let status = Command::new("kill").args(["-TERM", pid]).status();
    assert!(status.expect("kill").success());
}

/// Two `safewrite lead` on one Lease: one runs its command, the other waits; SIGTERM to
/// the first stops its command and releases; the second starts within about a retry
/// period under a higher epoch; then a command that exits by itself.
async fn one_at_a_time_and_sigterm_hands_over(cp: &ControlPlane, ns: &str, mode: Mode<'_>) {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("notes");
    let lease = format!("{ns}/runner");
    let mut a = lead(mode, home.path(), &lease, "a", &file, NOTING);
    let mut b = lead(mode, home.path(), &lease, "b", &file, NOTING);
    let first = until_notes(&file, 1, Duration::from_secs(20));
    // The other keeps waiting while the first renews.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(notes(&file), first, "exactly one command runs");
    let (who, epoch) = started(&first[0]);
    assert_eq!(holder(cp, ns, "runner").await, who);
    // A third, stopped while it waits: 128 + SIGTERM, its command never ran.
    let mut third = lead(mode, home.path(), &lease, "c", &file, NOTING);
    std::thread::sleep(Duration::from_secs(1));
    sigterm(&third.pid());
    let (code, stderr) = third.end(Duration::from_secs(10));
    assert_eq!(code, 143, "{stderr}");
    assert!(
        stderr.contains(&format!("waiting: {lease} is held by {who}")),
        "{stderr}"
    );
    assert!(stderr.contains("the command never ran"), "{stderr}");
    assert_eq!(notes(&file), first);
    let (leader, other) = if who == "a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    sigterm(&leader.pid());
    let (code, stderr) = leader.end(Duration::from_secs(10));
    let exited = Instant::now();
    eprintln!("the first leader said:\n{stderr}");
    assert_eq!(code, 0, "the command's own exit (its trap): {stderr}");
    assert!(stderr.contains(&format!("released {lease}")), "{stderr}");
    assert!(
        !stderr.lines().any(|l| !l.starts_with("safewrite lead: ")),
        "{stderr}"
    );
    let lines = until_notes(&file, 3, Duration::from_secs(10));
    let handed_over = exited.elapsed();
    assert_eq!(
        lines[1],
        format!("stop {who} {epoch}"),
        "stopped before the next start: {lines:?}"
    );
    let (next, next_epoch) = started(&lines[2]);
    assert_ne!(next, who);
    assert!(next_epoch > epoch, "{lines:?}");
    // A retry period (0.3 s), and room for a busy machine.
    assert!(
        handed_over < Duration::from_secs(2),
        "handed over in {handed_over:?}"
    );
    sigterm(&other.pid());
    let (code, stderr) = other.end(Duration::from_secs(10));
    assert_eq!(code, 0, "{stderr}");
    until_released(cp, ns, "runner").await;
}

/// A command that exits by itself: its code, and the Lease released.
async fn its_own_exit_is_passed_on_and_releases(cp: &ControlPlane, ns: &str, mode: Mode<'_>) {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("notes");
    let lease = format!("{ns}/once");
    let script = r#"echo "start $WHO $SAFEWRITE_LEASE_EPOCH" >> "$NOTES"; [ "$SAFEWRITE_LEASE" = "$LEASE" ] && exit 3"#;
    let mut one = lead(
        mode,
        home.path(),
        &lease,
        "one",
        &file,
        &script.replace("$LEASE", &lease),
    );
    let (code, stderr) = one.end(Duration::from_secs(20));
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("leading") && stderr.contains("released"),
        "{stderr}"
    );
    assert_eq!(started(&notes(&file)[0]).0, "one");
    until_released(cp, ns, "once").await;
    // A command that cannot be started (no `sh` on an empty PATH): 127, released.
    let mut command = lead_command(mode, home.path(), &lease, "two", &file, "true");
    let mut missing = Leader(command.env("PATH", "").spawn().expect("spawn"));
    let (code, stderr) = missing.end(Duration::from_secs(20));
    assert_eq!(code, 127, "{stderr}");
    assert!(stderr.contains("could not be started"), "{stderr}");
    until_released(cp, ns, "once").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_one_command_runs_at_a_time_and_sigterm_hands_over() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-lead-local").await;
    let kubeconfig = cp.admin_kubeconfig();
    one_at_a_time_and_sigterm_hands_over(cp, &ns, Mode::Local(&kubeconfig)).await;
    its_own_exit_is_passed_on_and_releases(cp, &ns, Mode::Local(&kubeconfig)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_sidecar_one_command_runs_at_a_time_and_sigterm_hands_over() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-lead-sidecar").await;
    let kubeconfig = cp.admin_kubeconfig();
    let sidecar = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let address = sidecar.addr.to_string();
    one_at_a_time_and_sigterm_hands_over(cp, &ns, Mode::Sidecar(&address)).await;
    its_own_exit_is_passed_on_and_releases(cp, &ns, Mode::Sidecar(&address)).await;
}

/// Another holder takes the Lease: the command is stopped and `safewrite lead` exits 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_by_another_holder_stops_the_command() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-lead-lost").await;
    let kubeconfig = cp.admin_kubeconfig();
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("notes");
    let mut one = lead(
        Mode::Local(&kubeconfig),
        home.path(),
        &format!("{ns}/taken"),
        "one",
        &file,
        NOTING,
    );
    until_notes(&file, 1, Duration::from_secs(20));
    let leases: Api<Lease> = Api::namespaced(cp.admin_client().await, &ns);
    // A conditional write, again after a conflict with a renewal.
    for attempt in 1.. {
        let mut lease = leases.get("taken").await.unwrap();
        lease.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
        match leases
            .replace("taken", &PostParams::default(), &lease)
            .await
        {
            Ok(_) => break,
            Err(error) => assert!(attempt < 10, "{error}"),
        }
    }
    let (code, stderr) = one.end(Duration::from_secs(10));
    eprintln!("the leader that lost said:\n{stderr}");
    assert_eq!(code, 8, "{stderr}");
    assert!(stderr.contains("lost"), "{stderr}");
    assert_eq!(notes(&file)[1], "stop one 1");
    assert_eq!(
        holder(cp, &ns, "taken").await,
        "intruder",
        "not released: not ours"
    );
}

/// A sidecar whose policy refuses `lead`: exit 6; no sidecar there: exit 7; one line each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_or_missing_sidecar_exits_6_or_7() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cli-lead-refused").await;
    let kubeconfig = cp.admin_kubeconfig();
    let sidecar = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--allow",
        "core/ConfigMap",
    ]);
    let address = sidecar.addr.to_string();
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("notes");
    let lease = format!("{ns}/l");
    for (address, expected) in [(address.as_str(), 6), ("127.0.0.1:1", 7)] {
        let mut refused = lead(
            Mode::Sidecar(address),
            home.path(),
            &lease,
            "one",
            &file,
            NOTING,
        );
        let (code, stderr) = refused.end(Duration::from_secs(20));
        assert_eq!(code, expected, "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("safewrite: error: "), "{stderr}");
    }
    assert!(notes(&file).is_empty(), "the command never ran");
}

/// Bad flags: exit 2 and one line, before anything is sent.
#[test]
fn bad_flags_exit_2_with_one_line() {
    let home = tempfile::tempdir().unwrap();
    for (flags, said) in [
        (
            &["--lease", "runner"][..],
            "--lease \"runner\": give NAMESPACE/NAME",
        ),
        (
            &["--lease", "ns/l", "--lease-duration", "1500ms"],
            "--lease-duration: must be whole seconds",
        ),
        (
            &["--lease", "ns/l", "--retry-period", "soon"],
            "--retry-period",
        ),
    ] {
        let out = Command::new(BIN)
            .env("HOME", home.path())
            .env_remove("SAFEWRITE_ADDRESS")
            .env_remove("KUBECONFIG")
            .arg("lead")
            .args(flags)
            .args(["--", "true"])
            .stdin(Stdio::null())
            .output()
            .expect("run safewrite lead");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(said), "{flags:?}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}
