//! The `safewrite` binary: parse the command line, build the sidecar, run it.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

use safewrite::health::HealthArgs;
use safewrite::runtime::config::ServeArgs;
use safewrite::telemetry::LogArgs;

/// A gRPC sidecar that makes Kubernetes writes safe under concurrency.
#[derive(Debug, Parser)]
#[command(name = "safewrite", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the safewrite.v1.WriterService gRPC API (plus grpc.health.v1 and reflection).
    Serve(ServeArgs),
    /// Add the safewrite native sidecar to the pod templates of manifests (files,
    /// directories or `-`), as the injection policy would; writes them to stdout. For
    /// Kubernetes before 1.36, whose MutatingAdmissionPolicy is not GA, and for manifests
    /// kept in git (docs/versions.md).
    Inject(safewrite::inject::InjectArgs),
    /// Check a running sidecar's grpc.health.v1 status, for exec probes: prints one line,
    /// exits 0 when it is SERVING and 1 otherwise.
    Health(HealthArgs),
    /// Read-modify-write one object from the shell, conflict-safe: re-read and re-apply
    /// the change on every conflict (through the sidecar at SAFEWRITE_ADDRESS, or
    /// in-process). Exit codes and examples: safewrite update --help.
    Update(safewrite::cli::WriteArgs),
    /// Like update, for the status subresource: only .status is written.
    PatchStatus(safewrite::cli::WriteArgs),
    /// Campaign for a Lease and run COMMAND while leading, with the Lease and its epoch
    /// in its environment; stop it when leadership is lost (through the sidecar at
    /// SAFEWRITE_ADDRESS, or in-process). Exit codes: safewrite lead --help.
    Lead(safewrite::cli::LeadArgs),
    /// Delete one object from the shell, conditioned on the object it decided on (uid,
    /// resourceVersion, a CEL condition), retried on conflict, fenced inside `safewrite
    /// lead`; an object already gone is exit 0. Exit codes: safewrite delete --help.
    Delete(safewrite::cli::DeleteArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage(&err),
    };
    if let Command::Serve(args) = &cli.command
        && let Err(message) = args.check()
    {
        let err = Cli::command().error(clap::error::ErrorKind::ArgumentConflict, message);
        return usage(&err);
    }
    // A probe logs nothing and needs no more than one thread.
    let cli = match cli.command {
        Command::Health(args) => return safewrite::health::run(args),
        Command::Inject(args) => return safewrite::inject::run(args),
        Command::Update(args) => {
            return safewrite::cli::run(safewrite::cli::WriteKind::Update, args);
        }
        Command::PatchStatus(args) => {
            return safewrite::cli::run(safewrite::cli::WriteKind::PatchStatus, args);
        }
        Command::Lead(args) => return safewrite::cli::lead(args),
        Command::Delete(args) => return safewrite::cli::delete(args),
        Command::Serve(args) => (cli.log, args),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(cli.1.worker_threads))
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => return fail(&err),
    };
    // Inside the runtime: the trace exporter's task is spawned on it.
    let (log, args) = cli;
    let telemetry = match runtime.block_on(async { safewrite::telemetry::init(&log) }) {
        Ok(telemetry) => telemetry,
        Err(err) => return fail(&err),
    };
    let result = runtime.block_on(safewrite::runtime::serve(args));
    // From this thread, with the runtime alive: the last spans are flushed.
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

/// `--help` and `--version` print as usual; any other command-line error (a bad flag or
/// value, from the command line or the environment) prints one line and exits 2.
fn usage(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = err.print();
        return ExitCode::SUCCESS;
    }
    let help = match std::env::args().skip(1).find(|a| {
        [
            "serve",
            "health",
            "update",
            "patch-status",
            "inject",
            "lead",
            "delete",
        ]
        .contains(&a.as_str())
    }) {
        Some(command) => format!("safewrite {command} --help"),
        None => "safewrite --help".to_string(),
    };
    let line = match err.kind() {
        // clap would print the whole help here.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            "error: no subcommand given: `safewrite serve` runs the sidecar, `safewrite health` probes it, `safewrite update` writes from the shell, `safewrite lead` runs a command while leading a Lease, `safewrite inject` adds the sidecar to manifests".to_string()
        }
        _ => one_line(&err.render().to_string()),
    };
    eprintln!("safewrite: {line} (see {help})");
    ExitCode::from(2)
}

/// clap's rendered error in one line: its first line, with the tip or the possible values
/// that follow it, but not the usage.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut line = lines
        .next()
        .unwrap_or("error: invalid command line")
        .to_string();
    // A line ending in ':' (e.g. the required arguments not provided) takes what it lists.
    let lists = line.ends_with(':');
    for more in lines {
        if lists && (more.starts_with('<') || more.starts_with("--")) {
            line.push(' ');
            line.push_str(more);
        } else if more.starts_with("tip:") || more.starts_with('[') {
            line.push_str("; ");
            line.push_str(more);
        }
    }
    line
}

/// Prints one line naming the cause (with its sources) and returns a failing exit code.
fn fail(err: &dyn std::error::Error) -> ExitCode {
    let mut line = format!("safewrite: error: {err}");
    let mut source = err.source();
    while let Some(cause) = source {
        // Some libraries repeat their source in their own message: say each thing once.
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(&format!(": {text}"));
        }
        source = cause.source();
    }
    // One line, whatever the causes' own formatting (YAML errors span several).
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    eprintln!("{line}");
    ExitCode::FAILURE
}
