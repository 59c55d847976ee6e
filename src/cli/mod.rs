//! `safewrite update` and `safewrite patch-status`: a conflict-safe read-modify-write
//! from the shell. One request is built from the flags ([`request`]) and written by the
//! same engine either way: through a sidecar over gRPC when `SAFEWRITE_ADDRESS` (or
//! `--address`) says where one is ([`sidecar`]), else in-process against the API server
//! ([`local`]). `--exec CMD` is a Transact mutation: CMD gets each fresh object on stdin
//! and prints the new one ([`exec`]). Every answer ends as a `tonic::Status` or a
//! `WriteResult`, so both modes print the same lines and exit with the same codes
//! ([`Class`]).

mod args;
mod exec;
pub mod kinds;
mod local;
mod output;
mod sidecar;
mod turns;

use std::process::ExitCode;

use serde_json::Value;

use crate::pb;

pub use args::{Change, WriteArgs};
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

    /// A refused write, as the sidecar (or the engine through `respond`) answered it.
    pub fn status(status: &tonic::Status) -> Fail {
        let class = Class::of(status.code());
        // The current object of a refusal is in the gRPC details, which a shell does not
        // see; the request's fields are this command's flags.
        let mut message = status
            .message()
            .replace(" (the current object is in the WriteFailure detail)", "");
        for (field, flag) in FLAGS {
            message = message.replace(field, flag);
        }
        Fail::new(class, message)
    }
}

/// The request fields an answer may name, and the flags that set them.
const FLAGS: &[(&str, &str)] = &[
    ("retry_policy.max_attempts", "--max-attempts"),
    ("preconditions.cel", "--if"),
    ("preconditions.uid", "--uid"),
    ("preconditions.resource_version", "--resource-version"),
    ("mutation.cel.expression", "--cel"),
    ("mutation.merge_patch.patch_json", "--merge"),
    ("mutation.json_patch.patch_json", "--json-patch"),
    ("mutation.apply.configuration_json", "--apply"),
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
}

/// Runs `safewrite update` / `safewrite patch-status` and returns its exit code.
pub fn run(verb: Verb, args: WriteArgs) -> ExitCode {
    let change = &args.change;
    if change.cel.is_none()
        && change.merge.is_none()
        && change.json_patch.is_none()
        && change.apply.is_none()
        && change.exec.is_none()
    {
        return fail(&Fail::invalid(
            "no change given: pass one of --cel, --merge, --json-patch, --apply or --exec (see safewrite update --help)",
        ));
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
    let result = runtime.block_on(write(verb, args));
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

/// Resolves the kind, builds the request and writes it in the mode the flags choose.
async fn write(verb: Verb, args: WriteArgs) -> Result<(Request, pb::WriteResult), Fail> {
    let deadline = tokio::time::Instant::now() + args.timeout;
    let typed = kinds::parse(&args.object)?;
    match &args.address {
        Some(address) => {
            let api_version = args.api_version.as_deref();
            let (kind, client) = match kinds::offline(&typed, api_version) {
                Ok(kind) if args.namespace.is_some() => (kind, None),
                Ok(kind) => (kind, sidecar::discovery_client(&args).await),
                Err(offline) => match sidecar::discovery_client(&args).await {
                    Some(client) => (
                        kinds::discover(&client, &typed, api_version).await?,
                        Some(client),
                    ),
                    None => return Err(offline),
                },
            };
            let default_namespace = client.map(|c| c.default_namespace().to_string());
            let request = request(verb, &args, &typed, kind, default_namespace.as_deref())?;
            let result = sidecar::write(address, &args, &request, deadline).await?;
            Ok((request, result))
        }
        None => {
            let (client, engine) = local::engine(&args).await?;
            let kind = kinds::discover(&client, &typed, args.api_version.as_deref()).await?;
            let default_namespace = client.default_namespace().to_string();
            let request = request(verb, &args, &typed, kind, Some(&default_namespace))?;
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

/// Builds the request from the flags.
fn request(
    verb: Verb,
    args: &WriteArgs,
    typed: &kinds::Typed,
    kind: kinds::Kind,
    default_namespace: Option<&str>,
) -> Result<Request, Fail> {
    let namespace = match (kind.namespaced, &args.namespace) {
        (Some(false), _) => String::new(),
        (_, Some(namespace)) => namespace.clone(),
        (_, None) => default_namespace.unwrap_or("default").to_string(),
    };
    let change = &args.change;
    if change.apply.as_deref() == Some("-") && args.create_if_missing.as_deref() == Some("-") {
        return Err(Fail::invalid(
            "--apply - and --create-if-missing - cannot both read stdin: give one of them a file",
        ));
    }
    use pb::mutation::Kind as M;
    let mutation = if let Some(expression) = &change.cel {
        Some(M::Cel(pb::CelMutation {
            expression: expression.clone(),
        }))
    } else if let Some(patch) = &change.merge {
        Some(M::MergePatch(pb::MergePatch {
            patch_json: patch.clone(),
        }))
    } else if let Some(patch) = &change.json_patch {
        Some(M::JsonPatch(pb::JsonPatch {
            patch_json: patch.clone(),
        }))
    } else if let Some(file) = &change.apply {
        Some(M::Apply(pb::ServerSideApply {
            configuration_json: read_object("--apply", file)?.to_string(),
            force: true,
        }))
    } else {
        None
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
        exec: change.exec.clone(),
        display: kind.display,
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
            crate::engine::mutation::type_name(&value)
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
        Some(output) => match output.render(&object, &name) {
            Ok(text) => println!("{text}"),
            Err(message) => return fail(&Fail::invalid(message)),
        },
        None => {
            let what = match (outcome, result.already_applied) {
                (_, true) => "unchanged (already applied)",
                (pb::Outcome::Created, _) => "created",
                (pb::Outcome::Unchanged, _) => "unchanged",
                _ => "updated",
            };
            let status = if request.verb == Verb::PatchStatus {
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
