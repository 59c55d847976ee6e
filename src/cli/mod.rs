//! `safewrite update` and `safewrite patch-status`: a conflict-safe read-modify-write
//! from the shell. One request is built from the flags ([`request::build`]) and written by the
//! same engine either way: through a sidecar over gRPC when `SAFEWRITE_ADDRESS` (or
//! `--address`) says where one is ([`sidecar`]), else in-process against the API server
//! ([`local`]). `--exec CMD` is a Transact mutation: CMD gets each fresh object on stdin
//! and prints the new one ([`exec`]). Every answer ends as a `tonic::Status` or a
//! `WriteResult`, so both modes print the same lines and exit with the same codes
//! ([`Class`], [`fail`]).

mod args;
mod candidate;
mod change;
mod child;
mod delete;
mod exec;
mod fail;
pub(crate) mod kinds;
mod lead;
mod local;
mod output;
mod request;
mod sidecar;
mod turns;

use std::process::ExitCode;

use serde_json::Value;

use safewrite_api::pb;

pub use args::{ChangeFlags, ChangeOptions, ConnectArgs, FenceArgs, WriteArgs};
pub use delete::{DeleteArgs, run as delete};
pub(crate) use fail::{Class, Fail};
pub use lead::{LeadArgs, run as lead};
pub(crate) use output::Output;
pub(crate) use request::Request;
pub use request::WriteKind;

/// Runs `safewrite update` / `safewrite patch-status` and returns its exit code.
pub fn run(verb: WriteKind, args: WriteArgs) -> ExitCode {
    let Some(flag) = change::flag(&args.change) else {
        return fail(&Fail::invalid(
            "no change given: pass one of --cel, --merge, --json-patch, --apply, --exec, --set-condition, --remove-condition, --add-finalizer, --remove-finalizer, --add-owner, --remove-owner, --upsert-entry or --remove-entry (see safewrite update --help)",
        ));
    };
    if let Err(failure) = change::check_options(flag, &args.change_options) {
        return fail(&failure);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&Fail::unavailable(format!("failed to start: {error}"))),
    };
    // Logs and traces only when asked for: a shell command prints its result and, on
    // failure, one line.
    let telemetry = if wants_telemetry() {
        let log = crate::telemetry::LogArgs {
            log_filter: std::env::var("SAFEWRITE_LOG").unwrap_or_else(|_| "warn".into()),
            log_format: crate::telemetry::LogFormat::Text,
        };
        match runtime.block_on(async { crate::telemetry::init(&log) }) {
            Ok(telemetry) => Some(telemetry),
            Err(error) => return fail(&Fail::invalid(error.to_string())),
        }
    } else {
        None
    };
    let output = args.output.clone();
    let result = runtime.block_on(write(verb, args, flag));
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    match result {
        Ok((request, result)) => print(&request, output.as_ref(), &result),
        Err(failure) => fail(&failure),
    }
}

fn wants_telemetry() -> bool {
    std::env::vars_os().any(|(name, _)| {
        let name = name.to_string_lossy();
        name == "SAFEWRITE_LOG"
            || name.starts_with("OTEL_EXPORTER_OTLP")
            || name == "OTEL_TRACES_EXPORTER"
    })
}

/// Reads the change (`flag`), resolves the kinds, builds the request and writes it in
/// the mode the flags choose.
async fn write(
    verb: WriteKind,
    args: WriteArgs,
    flag: &'static str,
) -> Result<(Request, pb::WriteResult), Fail> {
    let deadline = tokio::time::Instant::now() + args.timeout;
    let typed = kinds::parse(&args.object)?;
    if args.change.apply.as_deref() == Some("-") && args.create_if_missing.as_deref() == Some("-") {
        return Err(Fail::invalid(
            "--apply - and --create-if-missing - cannot both read stdin: give one of them a file",
        ));
    }
    let mut mutation = change::mutation(&args.change, &args.change_options)?;
    let owner = change::owner(&args.change)?;
    let owner_api_version = args.change_options.owner_api_version.as_deref();
    // A failure to resolve the owner's kind names the flag that named it.
    let of_owner = |fail: Fail| Fail::new(fail.class, format!("{flag}: {}", fail.message));
    match &args.connect.address {
        Some(address) => {
            let api_version = args.api_version.as_deref();
            let mut discovery = sidecar::LazyDiscovery::new(&args.connect);
            let kind = discovery.kind(&typed, api_version, "--api-version").await?;
            if let Some(owner) = &owner {
                let kind = discovery
                    .kind(owner, owner_api_version, "--owner-api-version")
                    .await
                    .map_err(of_owner)?;
                change::resolve_owner(&mut mutation, kind);
            }
            let default_namespace = match args.namespace {
                Some(_) => None,
                None => discovery
                    .client()
                    .await
                    .map(|c| c.default_namespace().to_string()),
            };
            let request = request::build(
                verb,
                flag,
                &args,
                &typed,
                kind,
                default_namespace.as_deref(),
                mutation,
            )?;
            let result = sidecar::write(address, &args, &request, deadline).await?;
            Ok((request, result))
        }
        None => {
            let (client, engine) = local::engine(&args.connect).await?;
            let kind = kinds::discover(&client, &typed, args.api_version.as_deref()).await?;
            if let Some(owner) = &owner {
                let kind = kinds::discover(&client, owner, owner_api_version)
                    .await
                    .map_err(of_owner)?;
                change::resolve_owner(&mut mutation, kind);
            }
            let default_namespace = client.default_namespace().to_string();
            let request = request::build(
                verb,
                flag,
                &args,
                &typed,
                kind,
                Some(&default_namespace),
                mutation,
            )?;
            let result = local::write(&engine, &request, &args.connect, deadline).await?;
            Ok((request, result))
        }
    }
}

/// Prints the result as asked and returns exit code 0, or 1 when --exec aborted.
fn print(request: &Request, output: Option<&Output>, result: &pb::WriteResult) -> ExitCode {
    let outcome = result.outcome();
    if outcome == pb::Outcome::Aborted {
        return fail(&Fail::new(
            Class::ExecFailed,
            "the --exec command aborted the write; nothing was written",
        ));
    }
    let object: Value = serde_json::from_str(&result.object_json).unwrap_or(Value::Null);
    let name = format!("{}/{}", request.display, request.target.name);
    match output {
        // An object that was gone before this command has nothing to print but its name.
        Some(output) if object.is_null() && *output != Output::Name => {}
        Some(output) => match output.render(&object, &name) {
            Ok(text) => println!("{text}"),
            Err(message) => return fail(&Fail::invalid(message)),
        },
        None => {
            let what = match (outcome, result.already_applied) {
                (_, true) => "unchanged (already applied)",
                (pb::Outcome::Created, _) => "created",
                (pb::Outcome::Unchanged, _) => "unchanged",
                (pb::Outcome::Gone, _) => "gone",
                _ => "updated",
            };
            let status = if request.verb == WriteKind::PatchStatus && outcome != pb::Outcome::Gone {
                " status"
            } else {
                ""
            };
            let dry = if request.options.dry_run {
                " (dry run)"
            } else {
                ""
            };
            println!("{name}{status} {what}{dry}");
        }
    }
    ExitCode::SUCCESS
}

/// One line on stderr, and the class's exit code.
fn fail(failure: &Fail) -> ExitCode {
    let line = failure
        .message
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("safewrite: error: {line}");
    ExitCode::from(failure.class as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: WriteArgs,
    }

    fn parse(flags: &[&str]) -> Result<WriteArgs, clap::Error> {
        let argv = ["safewrite", "cm/x"].iter().chain(flags);
        Command::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn one_change_per_command_and_remove_condition_repeats() {
        let args = parse(&["--remove-condition", "A", "--remove-condition", "B"]).unwrap();
        assert_eq!(args.change.remove_condition, ["A", "B"]);
        assert_eq!(change::flag(&args.change), Some("--remove-condition"));
        for two in [
            &["--add-finalizer", "a/b", "--merge", "{}"][..],
            &["--set-condition", "A=True", "--remove-condition", "A"],
            &["--add-owner", "cm/y", "--remove-owner", "cm/y"],
            &["--upsert-entry", "l[k=v]", "--remove-entry", "l[k=v]"],
        ] {
            let error = parse(two).expect_err("two changes");
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{two:?}"
            );
        }
        let args = parse(&[
            "--set-condition",
            "A=True",
            "--reason",
            "R",
            "--observed-generation",
            "2",
        ])
        .unwrap();
        assert_eq!(args.change_options.observed_generation, Some(2));
        assert!(parse(&["--set-condition", "A=True", "--observed-generation", "-1"]).is_err());
    }
}
