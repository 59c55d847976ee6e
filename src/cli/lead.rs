//! `safewrite lead --lease NAMESPACE/NAME -- COMMAND [ARGS...]`: campaign for the Lease
//! ([`candidate`](super::candidate), through a sidecar or in-process), run COMMAND while
//! leading with the Lease and its epoch in its environment ([`child`](super::child)),
//! stop it as soon as leadership is lost, and exit. The flags are checked by the `Lead`
//! RPC's own validation, so both modes refuse the same values. See docs/shell.md.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};

use safewrite_api::pb;

use super::args::ConnectArgs;
use super::candidate::{Candidate, Mode};
use super::child::{self, Running};
use super::fail::{Class, Fail};
use crate::lease::{LeaseEvent, NotLeading};
use crate::service::lead::{LeadSpec, validate};

/// The help text after the flags: exit codes, environment and an example.
const AFTER_HELP: &str = "\
Exit codes:
  N    COMMAND exited by itself with N while leading (128+S when killed by signal S);
       the Lease was released. After SIGTERM/SIGINT to safewrite lead: COMMAND's own end
       (usually 143/130), or 128+S when COMMAND was not running.
  2    invalid: a bad flag or value (nothing was sent)
  6    denied: the Lease may not be read, or the sidecar's policy refuses `lead`
  7    the sidecar or the API server cannot be reached, or the sidecar ended the
       campaign before it led
  8    leadership was lost (another holder, no renewal within --renew-deadline, the
       sidecar released it or went away); COMMAND was stopped
  127  COMMAND could not be started; the Lease was released

Lost leadership is not campaigned for again: safewrite lead exits 8, and its
supervisor (the kubelet, systemd) restarts it as a new candidate.

Environment of COMMAND: SAFEWRITE_LEASE=NAMESPACE/NAME and SAFEWRITE_LEASE_EPOCH=N (the
epoch of this leadership, larger at every acquisition). `safewrite update` and
`patch-status` read them and fence their writes: refused (exit 3) once a later leader
wrote the object or this leadership is lost; --no-fence writes unfenced.

Signals: SIGTERM or SIGINT is passed to COMMAND's process group; after --grace the group
is killed; then the Lease is released. COMMAND runs in a process group of its own, which
gets SIGTERM, then SIGKILL after --grace, when leadership is lost. Each transition
(waiting, leading, lost, released) is one line on stderr; stdout is COMMAND's.

Example:
  safewrite lead --lease ops/reconciler -- ./reconcile.sh --loop";

/// Options of `safewrite lead`.
#[derive(Debug, Clone, Args)]
#[command(after_help = AFTER_HELP)]
pub struct LeadArgs {
    /// The Lease to campaign for (coordination.k8s.io/v1), created when missing.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub lease: String,

    /// The Lease's holderIdentity while leading [default: the host's name and 64 random
    /// bits].
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,

    /// How long the Lease lasts after its last renewal (whole seconds) [default: 15s].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub lease_duration: Option<Duration>,

    /// How long the leader leads without a successful renewal [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub renew_deadline: Option<Duration>,

    /// How often the campaign acquires or renews [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub retry_period: Option<Duration>,

    /// How long COMMAND has to end after SIGTERM before its process group is killed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,

    #[command(flatten)]
    pub(crate) connect: ConnectArgs,

    /// The command to run while leading, and its arguments (after `--`).
    #[arg(value_name = "COMMAND", required = true, last = true)]
    pub command: Vec<String>,
}

/// The flags as the `Lead` RPC takes them, and as its validation accepts them.
///
/// # Errors
/// Exit 2, naming the flag.
pub fn check(args: &LeadArgs) -> Result<(LeadSpec, pb::LeadRequest), Fail> {
    let Some((namespace, name)) = args.lease.split_once('/') else {
        return Err(Fail::invalid(format!(
            "--lease {:?}: give NAMESPACE/NAME, e.g. --lease default/my-controller",
            args.lease
        )));
    };
    let duration = |d: Option<Duration>| d.and_then(|d| prost_types::Duration::try_from(d).ok());
    let mut request = pb::LeadRequest {
        namespace: namespace.to_string(),
        name: name.to_string(),
        identity: args.identity.clone().unwrap_or_default(),
        lease_duration: duration(args.lease_duration),
        renew_deadline: duration(args.renew_deadline),
        retry_period: duration(args.retry_period),
    };
    let spec = validate(&request).map_err(|violation| {
        let flag = match violation.field.as_str() {
            "namespace" | "name" => "--lease",
            "identity" => "--identity",
            "lease_duration" => "--lease-duration",
            "renew_deadline" => "--renew-deadline",
            "retry_period" => "--retry-period",
            other => other,
        };
        // The RPC's words name its fields; here they are flags.
        let why = violation
            .description
            .replace("renew_deadline", "--renew-deadline")
            .replace("retry_period", "--retry-period");
        Fail::invalid(format!("{flag}: {why}"))
    })?;
    // The sidecar holds the Lease under the identity printed here.
    request.identity.clone_from(&spec.identity);
    Ok((spec, request))
}

/// Runs `safewrite lead` and returns its exit code.
pub fn run(args: LeadArgs) -> ExitCode {
    let (spec, request) = match check(&args) {
        Ok(checked) => checked,
        Err(failure) => return super::fail(&failure),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return super::fail(&Fail::unavailable(format!("failed to start: {error}")));
        }
    };
    match runtime.block_on(lead(&args, spec, request)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => super::fail(&failure),
    }
}

/// The transitions, each said in one line on stderr.
fn say(line: &str) {
    eprintln!("safewrite lead: {line}");
}

/// Campaigns, runs the command while leading, and returns the exit code.
async fn lead(args: &LeadArgs, spec: LeadSpec, request: pb::LeadRequest) -> Result<u8, Fail> {
    let signals = Interrupts::new()?;
    let lease = format!("{}/{}", spec.lease.namespace, spec.lease.name);
    let identity = spec.identity.clone();
    let connect = &args.connect;
    let mode = match &connect.address {
        Some(address) => Mode::Sidecar(address, connect.token_file.as_ref()),
        None => Mode::Local(connect.kubeconfig.as_ref(), connect.context.as_ref()),
    };
    let mut candidate = Candidate::start(mode, spec, request).await?;
    say(&format!("campaigning for {lease} as {identity}"));
    let epoch = match wait_to_lead(&mut candidate, &signals, &lease).await {
        Ok(epoch) => epoch,
        Err(Unled::Signal(signal)) => {
            candidate.release().await;
            say(&format!(
                "stopped by a signal before leading {lease}; the command never ran"
            ));
            return Ok(child::exit_code_of_signal(signal));
        }
        Err(Unled::Campaign) => {
            candidate.release().await;
            return Err(Fail::unavailable(format!(
                "the campaign for {lease} ended before it led: the sidecar closed the stream"
            )));
        }
    };
    let running = match Running::start(&args.command, &lease, epoch) {
        Ok(running) => running,
        Err(error) => {
            candidate.release().await;
            say(&format!(
                "released {lease}: {:?} could not be started: {error}",
                args.command[0]
            ));
            return Ok(127);
        }
    };
    say(&format!(
        "leading {lease} as {identity} (epoch {epoch}): started {:?}",
        args.command[0]
    ));
    lead_while_running(candidate, running, signals, &lease, args.grace).await
}

/// Why the wait to lead ended without leading.
enum Unled {
    Signal(Signal),
    Campaign,
}

/// Waits until the campaign leads, saying who holds the Lease meanwhile.
async fn wait_to_lead(
    candidate: &mut Candidate,
    signals: &Interrupts,
    lease: &str,
) -> Result<u64, Unled> {
    let mut said = String::new();
    loop {
        let event = tokio::select! {
            event = candidate.next() => event,
            signal = signals.next() => return Err(Unled::Signal(signal)),
        };
        match event {
            Some(LeaseEvent::Leading { epoch }) => return Ok(epoch),
            Some(LeaseEvent::NotLeading { holder, .. }) if !holder.is_empty() && holder != said => {
                say(&format!("waiting: {lease} is held by {holder}"));
                said = holder;
            }
            Some(LeaseEvent::NotLeading { .. }) => {}
            None => return Err(Unled::Campaign),
        }
    }
}

/// While the command runs: its own end, lost leadership or a signal ends it all.
async fn lead_while_running(
    candidate: Candidate,
    mut running: Running,
    signals: Interrupts,
    lease: &str,
    grace: Duration,
) -> Result<u8, Fail> {
    let mut candidate = candidate;
    let lost = async {
        loop {
            match candidate.next().await {
                Some(LeaseEvent::Leading { .. }) => {}
                Some(LeaseEvent::NotLeading { reason, holder }) => {
                    return match reason {
                        NotLeading::OtherHolder => format!("now held by {holder}"),
                        NotLeading::LostRenewal => "no renewal within the renew deadline".into(),
                        NotLeading::Released => "the sidecar released it".into(),
                    };
                }
                None => return "the sidecar ended the campaign".to_string(),
            }
        }
    };
    let end = tokio::select! {
        status = running.wait() => RunEnd::Exited(status),
        why = lost => RunEnd::Lost(why),
        signal = signals.next() => RunEnd::Signal(signal),
    };
    match end {
        RunEnd::Exited(status) => {
            candidate.release().await;
            let code = child::exit_code(status);
            say(&format!("released {lease}: the command exited with {code}"));
            Ok(code)
        }
        RunEnd::Lost(why) => {
            say(&format!("lost {lease} ({why}): stopping the command"));
            let status = running.stop(Signal::TERM, grace).await;
            candidate.release().await;
            say(&format!(
                "stopped the command (it ended with {}): exit {}",
                child::exit_code(status),
                Class::Lost as u8
            ));
            Ok(Class::Lost as u8)
        }
        RunEnd::Signal(signal) => {
            let name = if signal == Signal::INT {
                "SIGINT"
            } else {
                "SIGTERM"
            };
            say(&format!("{name}: stopping the command"));
            let status = running.stop(signal, grace).await;
            candidate.release().await;
            let code = child::exit_code(status);
            say(&format!("released {lease}: the command ended with {code}"));
            Ok(code)
        }
    }
}

/// How the command's run ended.
enum RunEnd {
    Exited(std::process::ExitStatus),
    Lost(String),
    Signal(Signal),
}

/// SIGTERM and SIGINT to `safewrite lead`, registered before the campaign starts.
struct Interrupts {
    term: tokio::sync::Mutex<tokio::signal::unix::Signal>,
    int: tokio::sync::Mutex<tokio::signal::unix::Signal>,
}

// === impl Interrupts ===

impl Interrupts {
    fn new() -> Result<Self, Fail> {
        let register = |kind| {
            signal(kind)
                .map(tokio::sync::Mutex::new)
                .map_err(|e| Fail::unavailable(format!("cannot handle signals: {e}")))
        };
        Ok(Self {
            term: register(SignalKind::terminate())?,
            int: register(SignalKind::interrupt())?,
        })
    }

    /// The next SIGTERM or SIGINT.
    async fn next(&self) -> Signal {
        let (mut term, mut int) = (self.term.lock().await, self.int.lock().await);
        tokio::select! {
            _ = term.recv() => Signal::TERM,
            _ = int.recv() => Signal::INT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: LeadArgs,
    }

    fn parse(flags: &[&str]) -> Result<LeadArgs, clap::Error> {
        let argv = ["safewrite"].iter().chain(flags);
        Command::try_parse_from(argv).map(|c| c.args)
    }

    fn refusal(flags: &[&str]) -> String {
        let args = parse(flags).expect("parses");
        let failure = check(&args).expect_err("refused");
        assert_eq!(failure.class, Class::Invalid);
        failure.message
    }

    #[test]
    fn the_command_comes_after_two_dashes_and_is_required() {
        let args = parse(&["--lease", "ns/l", "--", "sh", "-c", "echo --x"]).unwrap();
        assert_eq!(args.command, ["sh", "-c", "echo --x"]);
        assert_eq!(args.grace, Duration::from_secs(10));
        assert!(parse(&["--lease", "ns/l"]).is_err());
        assert!(parse(&["--", "true"]).is_err());
        assert!(parse(&["--lease", "ns/l", "--grace", "soon", "--", "true"]).is_err());
    }

    #[test]
    fn flags_are_checked_as_the_rpc_checks_them_and_named() {
        let (spec, request) = check(&parse(&["--lease", "ns/l", "--", "true"]).unwrap()).unwrap();
        assert_eq!(spec.timings, crate::lease::LeaseTimings::default());
        assert_eq!(request.identity, spec.identity);
        let short = [
            "--lease-duration",
            "2s",
            "--renew-deadline",
            "1500ms",
            "--retry-period",
            "300ms",
        ];
        let args: Vec<&str> = ["--lease", "ns/l"]
            .iter()
            .chain(&short)
            .chain(&["--", "true"])
            .copied()
            .collect();
        assert!(check(&parse(&args).unwrap()).is_ok());
        assert!(
            refusal(&["--lease", "l", "--", "true"])
                .starts_with("--lease \"l\": give NAMESPACE/NAME")
        );
        assert!(refusal(&["--lease", "NS/l", "--", "true"]).starts_with("--lease: "));
        assert!(refusal(&["--lease", "ns/a_b", "--", "true"]).starts_with("--lease: "));
        assert!(
            refusal(&["--lease", "ns/l", "--identity", "a b", "--", "true"])
                .starts_with("--identity: ")
        );
        assert!(
            refusal(&[
                "--lease",
                "ns/l",
                "--lease-duration",
                "1500ms",
                "--",
                "true"
            ])
            .starts_with("--lease-duration: must be whole seconds")
        );
        let said = refusal(&["--lease", "ns/l", "--renew-deadline", "20s", "--", "true"]);
        assert!(
            said.starts_with("--lease-duration: must be longer than --renew-deadline"),
            "{said}"
        );
        let said = refusal(&["--lease", "ns/l", "--retry-period", "9s", "--", "true"]);
        assert!(
            said.starts_with("--renew-deadline: must be longer than 1.2 x --retry-period"),
            "{said}"
        );
        assert!(
            refusal(&["--lease", "ns/l", "--retry-period", "1ms", "--", "true"])
                .starts_with("--retry-period: ")
        );
    }
}
