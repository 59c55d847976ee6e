//! `safewrite update` and `safewrite patch-status`: a conflict-safe read-modify-write
//! from the shell. One request is built from the flags ([`request`]) and written by the
//! same engine either way: through a sidecar over gRPC when `SAFEWRITE_ADDRESS` (or
//! `--address`) says where one is ([`sidecar`]), else in-process against the API server
//! ([`local`]). `--exec CMD` is a Transact mutation: CMD gets each fresh object on stdin
//! and prints the new one ([`exec`]). Every answer ends as a `tonic::Status` or a
//! `WriteResult`, so both modes print the same lines and exit with the same codes
//! ([`Class`]).

mod args;
mod change;
mod exec;
pub mod kinds;
mod local;
mod output;
mod sidecar;
mod turns;

use std::process::ExitCode;

use serde_json::Value;

use crate::pb;

pub use args::{Change, ChangeOptions, WriteArgs};
pub use output::Output;

/// Which write: the main resource or the status subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Update,
    PatchStatus,
}

/// The class of a failure, and its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    ExecFailed = 1,
    Invalid = 2,
    Precondition = 3,
    Conflict = 4,
    NotFound = 5,
    Denied = 6,
    Unavailable = 7,
}

impl Class {
    /// The class of a gRPC code (as the sidecar answers, or the in-process engine would).
    pub fn of(code: tonic::Code) -> Class {
        use tonic::Code;
        match code {
            Code::InvalidArgument | Code::OutOfRange | Code::Unimplemented => Class::Invalid,
            Code::FailedPrecondition => Class::Precondition,
            Code::Aborted | Code::AlreadyExists => Class::Conflict,
            Code::NotFound => Class::NotFound,
            Code::PermissionDenied | Code::Unauthenticated => Class::Denied,
            _ => Class::Unavailable,
        }
    }
}

/// A failure of the command: its class and one line saying what happened and what to do.
#[derive(Debug, Clone)]
pub struct Fail {
    pub class: Class,
    pub message: String,
}

impl Fail {
    pub fn new(class: Class, message: impl Into<String>) -> Fail {
        Fail {
            class,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Fail {
        Fail::new(Class::Invalid, message)
    }
    pub fn not_found(message: impl Into<String>) -> Fail {
        Fail::new(Class::NotFound, message)
    }
    pub fn denied(message: impl Into<String>) -> Fail {
        Fail::new(Class::Denied, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Fail {
        Fail::new(Class::Unavailable, message)
    }

    /// A refused write, as the sidecar (or the engine through `respond`) answered it;
    /// `change` is the flag of the command's change (e.g. `--add-finalizer`).
    pub fn status(status: &tonic::Status, change: &str) -> Fail {
        let class = Class::of(status.code());
        // The current object of a refusal is in the gRPC details, which a shell does not
        // see; the request's fields are this command's flags, its RPCs its commands.
        let mut message = status
            .message()
            .replace(" (the current object is in the WriteFailure detail)", "");
        for (field, flag) in FLAGS {
            message = name_flag(&message, field, &flag.replace(CHANGE, change));
        }
        for (rpc, command) in COMMANDS {
            message = message.replace(rpc, command);
        }
        Fail::new(class, message)
    }
}

/// `message` with `field` (and the `[index]` that may follow it) named as `flag`.
fn name_flag(message: &str, field: &str, flag: &str) -> String {
    let mut named = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(field) {
        named.push_str(&rest[..at]);
        named.push_str(flag);
        rest = &rest[at + field.len()..];
        if let Some(index) = rest.strip_prefix('[')
            && let Some(end) = index.find(']')
            && end > 0
            && index[..end].bytes().all(|b| b.is_ascii_digit())
        {
            rest = &index[end + 1..];
        }
    }
    named.push_str(rest);
    named
}

/// Stands for the flag of the command's change in [`FLAGS`].
const CHANGE: &str = "{change}";

/// The RPCs an answer may name, and the commands that call them.
const COMMANDS: &[(&str, &str)] = &[
    ("UpdateWithRetry", "safewrite update"),
    ("PatchStatus", "safewrite patch-status"),
];

/// The request fields an answer may name, and the flags that set them; a field that
/// contains another comes before it.
const FLAGS: &[(&str, &str)] = &[
    ("retry_policy.max_attempts", "--max-attempts"),
    ("preconditions.cel", "--if"),
    ("preconditions.uid", "--uid"),
    ("preconditions.resource_version", "--resource-version"),
    ("mutation.cel.expression", "--cel"),
    ("mutation.merge_patch.patch_json", "--merge"),
    ("mutation.json_patch.patch_json", "--json-patch"),
    ("mutation.apply.configuration_json", "--apply"),
    (
        "mutation.set_condition.conditions[0].type",
        "--set-condition TYPE",
    ),
    (
        "mutation.set_condition.conditions[0].status",
        "--set-condition STATUS",
    ),
    ("mutation.set_condition.conditions[0].reason", "--reason"),
    ("mutation.set_condition.conditions[0].message", "--message"),
    (
        "mutation.set_condition.conditions[0].observed_generation",
        "--observed-generation",
    ),
    ("mutation.set_condition.path", "--set-condition"),
    ("mutation.remove_condition.types", "--remove-condition"),
    ("mutation.remove_condition.path", "--remove-condition"),
    ("mutation.finalizer.finalizer", CHANGE),
    ("mutation.finalizer", CHANGE),
    (
        "mutation.owner_reference.owner.api_version",
        "{change} KIND",
    ),
    ("mutation.owner_reference.owner.kind", "{change} KIND"),
    ("mutation.owner_reference.owner.name", "{change} NAME"),
    ("mutation.owner_reference.owner", CHANGE),
    ("mutation.owner_reference", CHANGE),
    ("mutation.list_entry.path", "{change} PATH"),
    ("mutation.list_entry.keys", "{change} KEY"),
    ("mutation.list_entry.entry_json", "{change} JSON"),
    ("mutation.list_entry", CHANGE),
    ("options.create_if_missing_json", "--create-if-missing"),
    ("options.idempotency_key", "--idempotency-key"),
    ("options.field_manager", "--field-manager"),
    ("target.api_version", "--api-version"),
    ("target.namespace", "--namespace"),
    ("target.name", "NAME"),
    ("target.kind", "KIND"),
];

/// The request both modes send: UpdateWithRetry / PatchStatus fields, or a Transact begin
/// when `exec` is set.
#[derive(Debug, Clone)]
pub struct Request {
    pub verb: Verb,
    pub target: pb::ObjectRef,
    /// None for --exec.
    pub mutation: Option<pb::Mutation>,
    pub preconditions: pb::Preconditions,
    pub retry_policy: pb::RetryPolicy,
    pub options: pb::WriteOptions,
    pub exec: Option<String>,
    /// What `-o name` prints before the slash.
    pub display: String,
    /// The flag of the change, which refusals name for the field that carries it.
    pub flag: &'static str,
}

/// Runs `safewrite update` / `safewrite patch-status` and returns its exit code.
pub fn run(verb: Verb, args: WriteArgs) -> ExitCode {
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
    verb: Verb,
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
    match &args.address {
        Some(address) => {
            let api_version = args.api_version.as_deref();
            let mut discovery = sidecar::Discovery::new(&args);
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
            let request = request(
                (verb, flag),
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
            let (client, engine) = local::engine(&args).await?;
            let kind = kinds::discover(&client, &typed, args.api_version.as_deref()).await?;
            if let Some(owner) = &owner {
                let kind = kinds::discover(&client, owner, owner_api_version)
                    .await
                    .map_err(of_owner)?;
                change::resolve_owner(&mut mutation, kind);
            }
            let default_namespace = client.default_namespace().to_string();
            let request = request(
                (verb, flag),
                &args,
                &typed,
                kind,
                Some(&default_namespace),
                mutation,
            )?;
            let result = local::write(
                &engine,
                &request,
                (&args.kubeconfig, &args.context),
                deadline,
            )
            .await?;
            Ok((request, result))
        }
    }
}

/// The serve settings (`SAFEWRITE_*` variables and defaults) with this command's
/// kubeconfig and context: the in-process engine and its client stack are built from them
/// as the sidecar's are.
fn serve_settings(args: &WriteArgs) -> Result<crate::runtime::config::ServeArgs, Fail> {
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        serve: crate::runtime::config::ServeArgs,
    }
    let mut serve = <Defaults as clap::Parser>::try_parse_from(["safewrite"])
        .map_err(|e| {
            let text = e.render().to_string();
            Fail::invalid(
                text.lines()
                    .next()
                    .unwrap_or("bad SAFEWRITE_* setting")
                    .to_string(),
            )
        })?
        .serve;
    if args.kubeconfig.is_some() {
        serve.client.kubeconfig = args.kubeconfig.clone();
    }
    if args.context.is_some() {
        serve.client.context = args.context.clone();
    }
    Ok(serve)
}

/// An error with its causes, in one line (as `safewrite health` says it).
fn one_line(error: &dyn std::error::Error) -> String {
    crate::health::describe(error)
}

/// Builds the request from the flags and the change's `mutation` (of the change `flag`).
fn request(
    (verb, flag): (Verb, &'static str),
    args: &WriteArgs,
    typed: &kinds::Typed,
    kind: kinds::Kind,
    default_namespace: Option<&str>,
    mutation: Option<pb::mutation::Kind>,
) -> Result<Request, Fail> {
    let namespace = match (kind.namespaced, &args.namespace) {
        (Some(false), _) => String::new(),
        (_, Some(namespace)) => namespace.clone(),
        (_, None) => default_namespace.unwrap_or("default").to_string(),
    };
    let create_if_missing_json = match &args.create_if_missing {
        Some(file) => read_object("--create-if-missing", file)?.to_string(),
        None => String::new(),
    };
    Ok(Request {
        verb,
        target: pb::ObjectRef {
            api_version: kind.api_version,
            kind: kind.kind,
            namespace,
            name: typed.name.clone(),
        },
        mutation: mutation.map(|kind| pb::Mutation { kind: Some(kind) }),
        preconditions: pb::Preconditions {
            uid: args.uid.clone().unwrap_or_default(),
            resource_version: args.resource_version.clone().unwrap_or_default(),
            cel: args.precondition.clone().unwrap_or_default(),
        },
        retry_policy: pb::RetryPolicy {
            max_attempts: args.max_attempts.unwrap_or(0),
            ..Default::default()
        },
        options: pb::WriteOptions {
            field_manager: args.field_manager.clone().unwrap_or_default(),
            dry_run: args.dry_run,
            create_if_missing_json,
            idempotency_key: args.idempotency_key.clone().unwrap_or_default(),
            write_alone: false,
        },
        exec: args.change.exec.clone(),
        display: kind.display,
        flag,
    })
}

/// An object from a JSON or YAML file, or stdin for `-`.
fn read_object(flag: &str, file: &str) -> Result<Value, Fail> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| Fail::invalid(format!("{flag} -: cannot read stdin: {e}")))?
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| Fail::invalid(format!("{flag} {file}: cannot read it: {e}")))?
    };
    let value: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(_) => serde_saphyr::from_str(&text).map_err(|e| {
            let line = e.to_string();
            let line = line.lines().next().unwrap_or("").to_string();
            Fail::invalid(format!("{flag} {file}: neither JSON nor YAML: {line}"))
        })?,
    };
    if !value.is_object() {
        return Err(Fail::invalid(format!(
            "{flag} {file}: must hold one object (a mapping), not {}",
            crate::mutation::type_name(&value)
        )));
    }
    Ok(value)
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
            let status = if request.verb == Verb::PatchStatus && outcome != pb::Outcome::Gone {
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

    #[test]
    fn refusals_name_the_flags_and_commands() {
        let said = |message: &str, flag: &str| {
            Fail::status(&tonic::Status::invalid_argument(message), flag).message
        };
        assert_eq!(
            said(
                "invalid request: mutation.set_condition.path: Widget has a status subresource, and UpdateWithRetry never writes status: use PatchStatus; nothing was sent",
                "--set-condition"
            ),
            "invalid request: --set-condition: Widget has a status subresource, and safewrite update never writes status: use safewrite patch-status; nothing was sent"
        );
        assert_eq!(
            said(
                "mutation.set_condition.conditions[0].reason: required",
                "--set-condition"
            ),
            "--reason: required"
        );
        assert_eq!(
            said(
                "mutation.remove_condition.types[12]: bad",
                "--remove-condition"
            ),
            "--remove-condition: bad"
        );
        assert_eq!(
            said(
                "mutation.finalizer.finalizer: bad; mutation.finalizer: no",
                "--add-finalizer"
            ),
            "--add-finalizer: bad; --add-finalizer: no"
        );
        assert_eq!(
            said(
                "mutation.owner_reference.owner.kind: unknown",
                "--remove-owner"
            ),
            "--remove-owner KIND: unknown"
        );
        assert_eq!(
            said("mutation.list_entry.keys[1]: twice", "--upsert-entry"),
            "--upsert-entry KEY: twice"
        );
        // An index that is not one stays.
        assert_eq!(name_flag("a.b[x]", "a.b", "--f"), "--f[x]");
    }
}
