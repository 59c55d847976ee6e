//! Fenced writes under faults, checked from what every writer was told: three replicas,
//! each a sidecar of its own and a `safewrite lead` on one Lease whose command makes
//! read-dependent `safewrite update`s (n + 1, with the writer's epoch) to 8 ConfigMaps in
//! a bounded loop and logs every answer. Faults come one after another while the writes
//! run: the leader's sidecar paused past the lease (SIGSTOP), the leader's controller
//! paused (the sidecar keeps renewing for it, by design), the leader's sidecar cut off
//! from the API server (a hung proxy), the leader's sidecar killed, the API server
//! restarted. A watch records every version of every object. The checker then fails on
//! a decreasing epoch in resourceVersion order, an acknowledged write lost or counted
//! twice, or a version nobody may have written (a refused write applied). The same pause
//! with the fence off (`--no-fence`) must fail the checker: that is what shows the
//! checker can see what the fence prevents. Timings: 2 s lease, 1.5 s renew deadline,
//! 0.3 s retry period, 2 s grace.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use support::faults::HttpFaultProxy;
use support::{ControlPlane, Sidecar};

const BIN: &str = env!("CARGO_BIN_EXE_safewrite");
const OBJECTS: usize = 8;
const LEASE: &str = "fence";
const TIMINGS: [&str; 8] = [
    "--lease-duration",
    "2s",
    "--renew-deadline",
    "1500ms",
    "--retry-period",
    "300ms",
    "--grace",
    "2s",
];
/// Longer than the lease duration (2 s): a pause the Lease does not survive.
const PAUSE: Duration = Duration::from_secs(3);
/// How long a takeover may take before the run fails: a bound on liveness on a busy
/// machine (eight writes of about 0.3 s each after it), not a figure; the run reports
/// the real ones.
const TAKEOVER: Duration = Duration::from_secs(60);

/// The controller: bounded in writes and in time ($END, epoch seconds). Each write runs
/// in a subshell that ignores SIGTERM, so a write the controller has started is finished
/// and logged even when `safewrite lead` stops the command: a deposed leader's write
/// already in flight, which no signal recalls, is exactly what the fence must refuse.
/// The loop itself stops after that write. One `begin` line before each write, one line
/// after: WHO EPOCH OBJECT CODE RV N MILLIS MESSAGE.
const LOOP: &str = r#"echo $$ > "$PIDFILE"
stop=0
trap 'stop=1' TERM
# The change is the caller's own code (--exec, a Transact stream through the sidecar),
# which takes a while: a sidecar stopped mid-write is almost always waiting for it, with
# its read made and its write not yet sent, so the write lands after the pause.
EXEC="sleep 0.25; jq -c '.data.n |= (tonumber + 1 | tostring) | .data.epoch = \"$SAFEWRITE_LEASE_EPOCH\" | .data.by = \"$WHO\"'"
i=0
while [ "$stop" = 0 ] && [ "$i" -lt "$MAX" ]; do
  (
    trap '' TERM
    [ "$(date +%s)" -lt "$END" ] || exit 1
    o=o$((i % 8))
    echo "begin $WHO $SAFEWRITE_LEASE_EPOCH $o $(date +%s%3N)" >> "$LOG"
    out=$("$BIN" update "configmap/$o" -n "$NS" $FENCE_FLAG --timeout 20s --exec "$EXEC" \
      -o jsonpath='{.metadata.resourceVersion} {.data.n}' 2> "$ERR.$$")
    code=$?
    [ -n "$out" ] || out="- -"
    said=$(head -n 1 "$ERR.$$" | tr -d '\r')
    echo "$WHO $SAFEWRITE_LEASE_EPOCH $o $code $out $(date +%s%3N) ${said:--}" >> "$LOG"
  ) || break
  i=$((i + 1))
done"#;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

fn signal(signal: &str, target: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), "--", target])
        .stderr(Stdio::null())
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {target}");
}

/// What every replica's controller shares.
struct Setup {
    ns: String,
    dir: PathBuf,
    fence: bool,
    end: u64,
}

/// A supervisor for one replica's `safewrite lead`: starts it again whenever it exits
/// (as the kubelet would), until stopped.
struct Controller {
    stop: Arc<AtomicBool>,
    lead_pid: Arc<Mutex<Option<u32>>>,
    exits: Arc<Mutex<Vec<i32>>>,
    pid_file: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Controller {
    fn start(setup: &Setup, who: &str, address: &str) -> Controller {
        let stop = Arc::new(AtomicBool::new(false));
        let lead_pid = Arc::new(Mutex::new(None));
        let exits = Arc::new(Mutex::new(Vec::new()));
        let pid_file = setup.dir.join(format!("{who}.pid"));
        let lead_log = setup.dir.join(format!("{who}.lead"));
        let mut command = Command::new(BIN);
        command
            .env_remove("SAFEWRITE_TOKEN_FILE")
            .env_remove("KUBECONFIG")
            .env("HOME", &setup.dir)
            .env("SAFEWRITE_ADDRESS", address)
            .env("BIN", BIN)
            .env("NS", &setup.ns)
            .env("WHO", who)
            .env("LOG", setup.dir.join(format!("{who}.log")))
            .env("ERR", setup.dir.join(format!("{who}.err")))
            .env("PIDFILE", &pid_file)
            .env("MAX", "3000")
            .env("END", setup.end.to_string())
            .env("FENCE_FLAG", if setup.fence { "" } else { "--no-fence" })
            .args([
                "lead",
                "--lease",
                &format!("{}/{LEASE}", setup.ns),
                "--identity",
                who,
            ])
            .args(TIMINGS)
            .args(["--", "sh", "-c", LOOP])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // Its own process group, so that a fault can pause it with all it runs.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let (s, p, e) = (stop.clone(), lead_pid.clone(), exits.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let said = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&lead_log)
                    .expect("the lead log");
                command.stderr(said);
                let mut child: Child = command.spawn().expect("spawn safewrite lead");
                *p.lock().unwrap() = Some(child.id());
                let mut termed = false;
                let status = loop {
                    if let Some(status) = child.try_wait().expect("wait") {
                        break status;
                    }
                    if s.load(Ordering::SeqCst) && !termed {
                        let _ = Command::new("kill")
                            .args(["-TERM", &child.id().to_string()])
                            .status();
                        termed = true;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                *p.lock().unwrap() = None;
                e.lock().unwrap().push(status.code().unwrap_or(-1));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Controller {
            stop,
            lead_pid,
            exits,
            pid_file,
            thread: Some(thread),
        }
    }

    /// Stops `safewrite lead` (SIGTERM: the command stops, the Lease is released) for good.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the supervisor");
        }
    }

    /// The process groups of `safewrite lead` and of its command.
    fn groups(&self) -> Vec<String> {
        let lead = self.lead_pid.lock().unwrap().expect("safewrite lead runs");
        let command = std::fs::read_to_string(&self.pid_file).expect("the command's pid");
        vec![format!("-{lead}"), format!("-{}", command.trim())]
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(pid) = *self.lead_pid.lock().unwrap() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}

/// One replica: a sidecar reaching the API server through a fault proxy of its own, and
/// a controller campaigning through that sidecar.
struct Replica {
    who: String,
    sidecar: Sidecar,
    proxy: HttpFaultProxy,
    controller: Controller,
}

impl Replica {
    async fn start(cp: &ControlPlane, setup: &Setup, who: &str) -> Replica {
        let proxy = HttpFaultProxy::start(cp).await;
        let home = setup.dir.join(who);
        std::fs::create_dir_all(&home).unwrap();
        let kubeconfig = proxy.kubeconfig(cp, &home);
        let sidecar = Sidecar::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
        let controller = Controller::start(setup, who, &sidecar.addr.to_string());
        Replica {
            who: who.to_string(),
            sidecar,
            proxy,
            controller,
        }
    }
}

/// What each replica said last: its `safewrite lead` exits and lines, its sidecar's log,
/// for a failure to show.
fn last_words(setup: &Setup, replicas: &[Replica]) -> String {
    let tail = |text: &str, n: usize| {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n    ")
    };
    let mut said = String::new();
    for r in replicas {
        let lead =
            std::fs::read_to_string(setup.dir.join(format!("{}.lead", r.who))).unwrap_or_default();
        let _ = write!(
            said,
            "\n{}: exits {:?}\n  safewrite lead:\n    {}\n  sidecar:\n    {}",
            r.who,
            r.controller.exits.lock().unwrap(),
            tail(&lead, 8),
            tail(&r.sidecar.log(), 12)
        );
    }
    said
}

/// One write as its controller logged it.
#[derive(Debug, Clone)]
struct Write {
    who: String,
    epoch: u64,
    object: String,
    code: i32,
    rv: Option<u64>,
    n: Option<i64>,
    at: u64,
    said: String,
}

/// Every logged write of every replica, and how many were begun.
fn read_logs(dir: &Path) -> (Vec<Write>, Vec<(String, u64, String)>) {
    let mut writes = Vec::new();
    let mut begun = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let fields: Vec<&str> = line.splitn(8, ' ').collect();
            if fields[0] == "begin" {
                begun.push((
                    fields[1].to_string(),
                    fields[2].parse().unwrap_or(0),
                    fields[3].to_string(),
                ));
                continue;
            }
            assert!(fields.len() >= 7, "a log line: {line:?}");
            writes.push(Write {
                who: fields[0].to_string(),
                epoch: fields[1].parse().expect("an epoch"),
                object: fields[2].to_string(),
                code: fields[3].parse().expect("an exit code"),
                rv: fields[4].parse().ok(),
                n: fields[5].parse().ok(),
                at: fields[6].parse().expect("a time"),
                said: fields.get(7).unwrap_or(&"-").to_string(),
            });
        }
    }
    writes.sort_by_key(|w| w.at);
    (writes, begun)
}

/// One version of an object, as the watch saw it.
#[derive(Debug, Clone)]
struct Version {
    rv: u64,
    n: i64,
    epoch: Option<u64>,
    by: String,
    /// The epoch the object's safewrite.dev/fence annotation records for the Lease.
    fenced: Option<u64>,
}

fn version(cm: &ConfigMap, lease: &str) -> Version {
    let data = cm.data.clone().unwrap_or_default();
    let fenced = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("safewrite.dev/fence"))
        .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .and_then(|v| v[lease].as_u64());
    Version {
        rv: cm
            .metadata
            .resource_version
            .as_ref()
            .unwrap()
            .parse()
            .unwrap(),
        n: data.get("n").and_then(|n| n.parse().ok()).unwrap_or(-1),
        epoch: data.get("epoch").and_then(|e| e.parse().ok()),
        by: data.get("by").cloned().unwrap_or_default(),
        fenced,
    }
}

type History = Arc<Mutex<BTreeMap<String, Vec<Version>>>>;

/// Records every version of every ConfigMap of `ns` from resourceVersion `from` on,
/// watching again where a watch ends; a gap it cannot close is recorded as "lost".
fn record(api: Api<ConfigMap>, lease: String, from: String) -> (History, Arc<AtomicBool>) {
    let history: History = Arc::default();
    let lost = Arc::new(AtomicBool::new(false));
    let (h, l) = (history.clone(), lost.clone());
    tokio::spawn(async move {
        let mut rv = from;
        loop {
            let params = WatchParams::default().timeout(60);
            let Ok(stream) = api.watch(&params, &rv).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut stream = stream.boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(WatchEvent::Added(cm)) | Ok(WatchEvent::Modified(cm)) => {
                        let v = version(&cm, &lease);
                        rv = v.rv.to_string();
                        let name = cm.metadata.name.clone().unwrap();
                        h.lock().unwrap().entry(name).or_default().push(v);
                    }
                    Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    Ok(WatchEvent::Error(e)) if e.code == 410 => {
                        // Too old to resume (an API server restart empties the watch
                        // cache): nothing is lost if no object moved past what we saw.
                        let Ok(list) = api.list(&ListParams::default()).await else {
                            break;
                        };
                        let seen = h.lock().unwrap();
                        for cm in &list.items {
                            let v = version(cm, &lease);
                            let last = seen
                                .get(cm.metadata.name.as_deref().unwrap())
                                .and_then(|vs| vs.last().map(|l| l.rv));
                            if last.is_some_and(|last| last != v.rv) {
                                l.store(true, Ordering::SeqCst);
                            }
                        }
                        rv = list.metadata.resource_version.unwrap();
                        break;
                    }
                    _ => {}
                }
            }
        }
    });
    (history, lost)
}

/// A fault as injected.
#[derive(Debug, Clone)]
struct Injected {
    name: &'static str,
    at: u64,
    leader: String,
    epoch: u64,
}

/// What the checker found, with the figures it prints.
#[derive(Debug, Default)]
struct Verdict {
    violations: Vec<String>,
    figures: String,
}

impl Verdict {
    fn has(&self, kind: &str) -> bool {
        self.violations.iter().any(|v| v.starts_with(kind))
    }
}

fn reason_of(said: &str) -> &'static str {
    if said.contains("FENCED") || said.contains("fenced") {
        "FENCED"
    } else if said.contains("NOT_LEADER")
        || said.contains("not lead")
        || said.contains("no longer lead")
    {
        "NOT_LEADER"
    } else {
        "other"
    }
}

/// The checker: every acknowledged write, every version the watch saw, and each
/// object's final state read back.
fn check(
    writes: &[Write],
    begun: &[(String, u64, String)],
    history: &BTreeMap<String, Vec<Version>>,
    finals: &BTreeMap<String, Version>,
    injected: &[Injected],
    fence: bool,
) -> Verdict {
    let mut verdict = Verdict::default();
    let mut fail = |s: String| verdict.violations.push(s);
    let acked: Vec<&Write> = writes.iter().filter(|w| w.code == 0).collect();
    for object in (0..OBJECTS).map(|i| format!("o{i}")) {
        // (1) Epochs in resourceVersion order never decrease: the acknowledged writes,
        // then every version the watch saw.
        let mut mine: Vec<&&Write> = acked.iter().filter(|w| w.object == object).collect();
        mine.sort_by_key(|w| w.rv.unwrap_or(0));
        for pair in mine.windows(2) {
            if pair[1].epoch < pair[0].epoch {
                fail(format!(
                    "decreasing epoch on {object}: {} wrote n={:?} at rv {:?} under epoch {} after {} wrote n={:?} at rv {:?} under epoch {}",
                    pair[1].who,
                    pair[1].n,
                    pair[1].rv,
                    pair[1].epoch,
                    pair[0].who,
                    pair[0].n,
                    pair[0].rv,
                    pair[0].epoch
                ));
            }
        }
        let versions = history.get(&object).cloned().unwrap_or_default();
        let written: Vec<&Version> = versions.iter().filter(|v| v.n > 0).collect();
        for pair in written.windows(2) {
            if pair[1].epoch < pair[0].epoch {
                fail(format!(
                    "decreasing epoch on {object} (watch): n={} by {} epoch {:?} after n={} by {} epoch {:?}",
                    pair[1].n, pair[1].by, pair[1].epoch, pair[0].n, pair[0].by, pair[0].epoch
                ));
            }
            if pair[1].n != pair[0].n + 1 {
                fail(format!(
                    "lost or repeated increment on {object} (watch): n={} at rv {} follows n={} at rv {}",
                    pair[1].n, pair[1].rv, pair[0].n, pair[0].rv
                ));
            }
        }
        if fence {
            for v in &written {
                if v.fenced != v.epoch {
                    fail(format!(
                        "fence not recorded on {object}: n={} epoch {:?}, annotation {:?}",
                        v.n, v.epoch, v.fenced
                    ));
                }
            }
        }
        // (2) No acknowledged write lost: the acknowledged n are distinct, each is a
        // version the watch saw with the same resourceVersion, and the object ends at
        // the largest.
        let final_n = finals.get(&object).map(|v| v.n).unwrap_or(-1);
        let mut ns = BTreeSet::new();
        for w in &mine {
            let n = w.n.unwrap_or(-1);
            if !ns.insert(n) {
                fail(format!("n={n} acknowledged twice on {object}"));
            }
            if !versions.iter().any(|v| Some(v.rv) == w.rv && v.n == n) {
                fail(format!(
                    "acknowledged write lost on {object}: {} got n={n} at rv {:?}, not in the history",
                    w.who, w.rv
                ));
            }
        }
        let top = ns.last().copied().unwrap_or(0);
        if final_n < top || written.last().map_or(0, |v| v.n) != final_n {
            fail(format!(
                "{object} ends at n={final_n}; acknowledged up to {top}; the watch saw {:?}",
                written.last().map(|v| v.n)
            ));
        }
        // (3) No refused write applied: a version nobody was acknowledged for must come
        // from a write whose outcome its writer does not know (exit 7, or never logged
        // because its controller was killed), by that writer, under that epoch.
        let mut unknown: BTreeMap<(String, u64), i64> = BTreeMap::new();
        for (who, epoch, _) in begun.iter().filter(|b| b.2 == object) {
            *unknown.entry((who.clone(), *epoch)).or_default() += 1;
        }
        // Exit 7 is an unknown outcome; any other answer says what happened.
        for w in writes.iter().filter(|w| w.object == object && w.code != 7) {
            *unknown.entry((w.who.clone(), w.epoch)).or_default() -= 1;
        }
        for v in &written {
            if mine.iter().any(|w| w.rv == Some(v.rv)) {
                continue;
            }
            let key = (v.by.clone(), v.epoch.unwrap_or(0));
            match unknown.get_mut(&key) {
                Some(left) if *left > 0 => *left -= 1,
                _ => fail(format!(
                    "a write nobody may have made is applied on {object}: n={} at rv {} by {} epoch {:?} (refused, or acknowledged to no one)",
                    v.n, v.rv, v.by, v.epoch
                )),
            }
        }
    }

    // Figures.
    let f = &mut verdict.figures;
    let refused: Vec<&Write> = writes.iter().filter(|w| w.code != 0).collect();
    let _ = writeln!(
        f,
        "fence {}: {} writes logged, {} acknowledged, {} begun without a logged answer",
        if fence { "on" } else { "off" },
        writes.len(),
        acked.len(),
        begun.len().saturating_sub(writes.len())
    );
    let mut by_code: BTreeMap<(i32, &str), usize> = BTreeMap::new();
    for w in &refused {
        *by_code.entry((w.code, reason_of(&w.said))).or_default() += 1;
    }
    let _ = writeln!(f, "refusals by exit code and reason: {by_code:?}");
    let mut said: BTreeSet<&str> = BTreeSet::new();
    for w in &refused {
        said.insert(&w.said);
    }
    for s in said.iter().take(6) {
        let _ = writeln!(f, "  said: {}", s.chars().take(160).collect::<String>());
    }
    let mut epochs: BTreeMap<u64, (BTreeSet<&str>, usize)> = BTreeMap::new();
    for w in &acked {
        let e = epochs.entry(w.epoch).or_default();
        e.0.insert(&w.who);
        e.1 += 1;
    }
    let _ = writeln!(f, "epochs (writers, acknowledged writes): {epochs:?}");
    let finals: Vec<i64> = finals.values().map(|v| v.n).collect();
    let _ = writeln!(f, "final n per object: {finals:?}");
    for fault in injected {
        let next = acked
            .iter()
            .find(|w| w.at > fault.at && w.epoch > fault.epoch);
        let same = acked
            .iter()
            .find(|w| w.at > fault.at && w.epoch == fault.epoch);
        let _ = writeln!(
            f,
            "fault {} on {} (epoch {}): next leader's first acknowledged write after {}; same leader's after {}",
            fault.name,
            fault.leader,
            fault.epoch,
            next.map_or("none".into(), |w| format!(
                "{} ms ({} epoch {})",
                w.at - fault.at,
                w.who,
                w.epoch
            )),
            same.map_or("none".into(), |w| format!("{} ms", w.at - fault.at)),
        );
    }
    let _ = writeln!(f, "violations: {}", verdict.violations.len());
    for v in verdict.violations.iter().take(10) {
        let _ = writeln!(f, "  {v}");
    }
    verdict
}

/// The Lease's holder and the epoch safewrite recorded on it.
async fn holder(api: &Api<Lease>) -> (String, u64) {
    let Ok(lease) = api.get(LEASE).await else {
        return (String::new(), 0);
    };
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    let epoch = lease
        .metadata
        .annotations
        .and_then(|a| a.get("safewrite.dev/epoch").cloned())
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    (holder, epoch)
}

/// The faults of a run, in order.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    PauseSidecar,
    PauseController,
    HangApi,
    KillSidecar,
    RestartApiServer,
}

/// Waits until `ready` holds for the logged writes (at most `within`); true if it did.
async fn until_logged(dir: &Path, within: Duration, ready: impl Fn(&[Write]) -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if ready(&read_logs(dir).0) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Waits for a leader, and its acknowledged write after `after`; the leader and epoch.
async fn leading(dir: &Path, leases: &Api<Lease>, after: u64, within: Duration) -> (String, u64) {
    assert!(
        until_logged(dir, within, |w| w
            .iter()
            .any(|w| w.code == 0 && w.at > after))
        .await,
        "no acknowledged write within {within:?}"
    );
    holder(leases).await
}

/// Runs the replicas under `faults`, one after another, again from the first until the
/// run has lasted `lasting` (each fault at least once), and checks what was written.
async fn run(cp: &ControlPlane, fence: bool, faults: &[Fault], lasting: Duration) -> Verdict {
    let started = Instant::now();
    let ns = cp
        .namespace(if fence { "fence-on" } else { "fence-off" })
        .await;
    let client = cp.admin_client().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client, &ns);
    for i in 0..OBJECTS {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("o{i}")}, "data": {"n": "0"}
        }))
        .unwrap();
        configmaps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let from = configmaps
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let lease = format!("{ns}/{LEASE}");
    let (history, lost) = record(configmaps.clone(), lease.clone(), from);
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup {
        ns: ns.clone(),
        dir: dir.path().to_path_buf(),
        fence,
        end: now_ms() / 1000 + 120 + lasting.as_secs(),
    };
    let mut replicas = Vec::new();
    for r in 0..3 {
        replicas.push(Replica::start(cp, &setup, &format!("r{r}")).await);
    }
    let mut injected = Vec::new();
    let mut fresh = 3;
    let (mut leader, mut epoch) = leading(&setup.dir, &leases, 0, TAKEOVER).await;
    for (round, &fault) in faults.iter().cycle().enumerate() {
        if round >= faults.len() && started.elapsed() >= lasting {
            break;
        }
        let at = now_ms();
        let index = replicas.iter().position(|r| r.who == leader);
        let index = index.unwrap_or_else(|| panic!("the leader {leader:?} is one of ours"));
        let name = match fault {
            Fault::PauseSidecar => "sidecar SIGSTOP",
            Fault::PauseController => "controller SIGSTOP",
            Fault::HangApi => "API connection hung",
            Fault::KillSidecar => "sidecar SIGKILL",
            Fault::RestartApiServer => "API server restart",
        };
        eprintln!("fence: {name} on {leader} (epoch {epoch})");
        injected.push(Injected {
            name,
            at,
            leader: leader.clone(),
            epoch,
        });
        let old = epoch;
        // A later leader has written every object: what a deposed one sends after it
        // comes back lands (unfenced) or is refused (fenced) after those writes.
        let all_taken_over = |w: &[Write]| {
            let objects: BTreeSet<&str> = w
                .iter()
                .filter(|w| w.code == 0 && w.epoch > old)
                .map(|w| w.object.as_str())
                .collect();
            objects.len() == OBJECTS
        };
        match fault {
            Fault::PauseSidecar => {
                let pid = replicas[index].sidecar.pid().to_string();
                signal("STOP", &pid);
                let taken = until_logged(&setup.dir, TAKEOVER, all_taken_over).await;
                tokio::time::sleep(PAUSE.saturating_sub(Duration::from_millis(now_ms() - at)))
                    .await;
                signal("CONT", &pid);
                assert!(
                    taken,
                    "no other replica took over while {leader}'s sidecar was stopped{}",
                    last_words(&setup, &replicas)
                );
            }
            Fault::PauseController => {
                // The sidecar keeps renewing for a paused controller: the Lease is the
                // sidecar's, the stream stays open, so this replica keeps leading. That
                // is the design; a paused controller writes nothing meanwhile, and the
                // checker still sees no split-brain.
                let groups = replicas[index].controller.groups();
                for g in &groups {
                    signal("STOP", g);
                }
                tokio::time::sleep(PAUSE).await;
                let (still, still_epoch) = holder(&leases).await;
                for g in &groups {
                    signal("CONT", g);
                }
                assert_eq!(
                    (still.as_str(), still_epoch),
                    (leader.as_str(), epoch),
                    "a paused controller's sidecar keeps leading"
                );
            }
            Fault::HangApi => {
                replicas[index].proxy.hang();
                let taken = until_logged(&setup.dir, TAKEOVER, all_taken_over).await;
                tokio::time::sleep(PAUSE.saturating_sub(Duration::from_millis(now_ms() - at)))
                    .await;
                replicas[index].proxy.pass();
                assert!(
                    taken,
                    "no other replica took over while {leader}'s API was hung (the Lease: {:?}){}",
                    holder(&leases).await,
                    last_words(&setup, &replicas)
                );
            }
            Fault::KillSidecar => {
                signal("KILL", &replicas[index].sidecar.pid().to_string());
                let mut gone = replicas.remove(index);
                gone.controller.stop();
                replicas.push(Replica::start(cp, &setup, &format!("r{fresh}")).await);
                fresh += 1;
                assert!(
                    until_logged(&setup.dir, TAKEOVER, all_taken_over).await,
                    "no other replica took over from the killed sidecar"
                );
            }
            Fault::RestartApiServer => {
                cp.stop_apiserver();
                tokio::time::sleep(PAUSE).await;
                cp.start_apiserver();
            }
        }
        (leader, epoch) = leading(&setup.dir, &leases, now_ms(), TAKEOVER).await;
        // Let the run settle before the next fault.
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    for replica in &mut replicas {
        replica.controller.stop();
    }
    let exits: Vec<(String, Vec<i32>)> = replicas
        .iter()
        .map(|r| (r.who.clone(), r.controller.exits.lock().unwrap().clone()))
        .collect();
    // Read back, and wait for the watch to have seen the final versions.
    let mut finals = BTreeMap::new();
    for cm in configmaps.list(&ListParams::default()).await.unwrap().items {
        finals.insert(cm.metadata.name.clone().unwrap(), version(&cm, &lease));
    }
    let caught_up = Instant::now();
    loop {
        let seen = history.lock().unwrap().clone();
        let done = finals.iter().all(|(o, v)| {
            v.n == 0 || seen.get(o).and_then(|h| h.last()).map(|l| l.rv) == Some(v.rv)
        });
        if done {
            break;
        }
        assert!(
            caught_up.elapsed() < Duration::from_secs(10),
            "the watch fell behind"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!lost.load(Ordering::SeqCst), "the watch lost versions");
    let (writes, begun) = read_logs(&setup.dir);
    let history = history.lock().unwrap().clone();
    let mut verdict = check(&writes, &begun, &history, &finals, &injected, fence);
    let _ = writeln!(
        verdict.figures,
        "safewrite lead exits per replica: {exits:?}; faults injected: {}; run took {:.1} s",
        injected.len(),
        started.elapsed().as_secs_f64()
    );
    eprintln!("{}", verdict.figures);
    verdict
}

/// Fenced: no fault makes a decreasing epoch, a lost acknowledged write, or a refused
/// write applied. Its own control plane, since the API server is restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_writes_survive_pauses_partitions_kills_and_restarts() {
    let cp = ControlPlane::start();
    let verdict = run(
        &cp,
        true,
        &[
            Fault::PauseSidecar,
            Fault::PauseController,
            Fault::HangApi,
            Fault::KillSidecar,
            Fault::RestartApiServer,
        ],
        Duration::ZERO,
    )
    .await;
    assert!(verdict.violations.is_empty(), "{}", verdict.figures);
}

/// The same faults again and again for SAFEWRITE_FENCE_MINUTES (default 10) minutes, by
/// hand: `cargo test --test integration fence::long -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a long run, by hand"]
async fn long_run_of_every_fault() {
    let minutes: u64 = std::env::var("SAFEWRITE_FENCE_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(10);
    let cp = ControlPlane::start();
    let verdict = run(
        &cp,
        true,
        &[
            Fault::PauseSidecar,
            Fault::PauseController,
            Fault::HangApi,
            Fault::KillSidecar,
            Fault::RestartApiServer,
        ],
        Duration::from_secs(minutes * 60),
    )
    .await;
    assert!(verdict.violations.is_empty(), "{}", verdict.figures);
}

/// Unfenced, one paused sidecar is enough: its write in flight lands after the next
/// leader's, under the older epoch, and the checker must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_fence_a_paused_leader_writes_under_an_older_epoch() {
    let cp = ControlPlane::shared();
    let verdict = run(cp, false, &[Fault::PauseSidecar], Duration::ZERO).await;
    assert!(
        verdict.has("decreasing epoch"),
        "the checker must catch the unfenced write: {}",
        verdict.figures
    );
}
