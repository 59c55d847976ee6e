//! `safewrite delete KIND/NAME`: a conditional delete from the shell. The flags make one
//! `Delete` request, sent to the sidecar at `SAFEWRITE_ADDRESS` (or `--address`), or
//! decided in-process by the same engine (validated by the sidecar's own validation), so
//! both modes answer alike: the object read live, the preconditions checked on it, one
//! DELETE conditioned on its uid and resourceVersion, retried on conflict. See
//! docs/shell.md.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::Value;
use tokio::time::Instant;

use safewrite_api::deadline::CallDeadline;
use safewrite_api::pb;

use super::args::{ConnectArgs, FenceArgs};
use super::fail::{Fail, one_line};
use super::output::Output;
use super::{kinds, local, sidecar};
use crate::service::respond;

/// The help text after the flags: exit codes and examples.
const AFTER_HELP: &str = "\
Exit codes:
  0  deleted, deleting (the object has finalizers, or dependents in foreground
     deletion: it is gone once they are done), or gone (it was not there)
  2  invalid: a bad flag or value, KIND/NAME or CEL (INVALID_ARGUMENT)
  3  precondition failed: --if or --uid is false on the object, or the fence refused
     (FENCED: a later leader wrote it; NOT_LEADER: this leadership is over); nothing
     was deleted
  4  conflict: still conflicting after --max-attempts, or --resource-version is not the
     object's (ABORTED); nothing was deleted
  5  not found: the kind (NOT_FOUND); a missing object is exit 0, gone
  6  denied: RBAC or the sidecar's policy refused, or credentials/token are wrong
  7  unavailable, or the outcome is unknown: API server or sidecar unreachable, deadline
     passed, overloaded

Every attempt reads the object live, checks --uid, --resource-version and --if on it,
and sends one DELETE conditioned on that object's uid and resourceVersion: a writer
that changed it in between makes the API server refuse, and the object is read and
checked again. An object deleted and recreated under the same name has a new uid, so
--uid never deletes the newcomer. Inside `safewrite lead` the delete is fenced like a
write (--no-fence to delete unfenced).

Examples:
  # Delete a Job only once it has succeeded
  safewrite delete jobs.batch/migrate --if 'has(object.status.succeeded) && object.status.succeeded > 0'

  # Delete exactly the object this uid names, and wait for nothing: prints configmap/x deleted
  safewrite delete cm/x --uid 6f1c0a9e-...

  # Delete a Deployment and its ReplicaSets and Pods before it goes (foreground)
  safewrite delete deployments.apps/web --cascade foreground";

/// Options of `safewrite delete`.
#[derive(Debug, Clone, Args)]
#[command(after_help = AFTER_HELP)]
pub struct DeleteArgs {
    /// The object, as kubectl names it: KIND/NAME (e.g. cm/old, jobs.batch/migrate).
    #[arg(value_name = "KIND/NAME")]
    pub object: String,

    /// Namespace of the object [default: the kubeconfig context's, else "default"].
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,

    /// apiVersion of the kind (e.g. apps/v1); needed for kinds named by Kind without
    /// discovery.
    #[arg(long)]
    pub api_version: Option<String>,

    /// Precondition: a CEL expression over `object` that must be true on the fresh
    /// object (else exit 3, nothing deleted).
    #[arg(long = "if", value_name = "CEL")]
    pub precondition: Option<String>,

    /// Precondition: the object's metadata.uid must be this (else exit 3).
    #[arg(long)]
    pub uid: Option<String>,

    /// Strict compare-and-swap: the object must be at this resourceVersion (else exit 4).
    #[arg(long)]
    pub resource_version: Option<String>,

    /// What happens to the object's dependents [default: the API server's for the kind,
    /// usually background].
    #[arg(long, value_enum)]
    pub cascade: Option<Cascade>,

    /// Send the DELETE with dryRun=All: validated and admitted, nothing deleted.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub(crate) fence: FenceArgs,

    /// How long the whole command may take (attempts and backoff included).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// Attempts (the first included) before a conflict is given up [default: 50].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_attempts: Option<u32>,

    /// Print the object as the API server answered the DELETE: json, yaml, name or
    /// jsonpath=TEMPLATE (with its deletionTimestamp while it is deleting). Nothing when
    /// it answered without the object, or the object was gone (name: the name).
    #[arg(short = 'o', long, value_parser = Output::parse)]
    pub(crate) output: Option<Output>,

    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// `--cascade`: the propagation policy of the DELETE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Cascade {
    /// The object goes now; the garbage collector deletes its dependents after.
    Background,
    /// The object stays (deleting) until the garbage collector deleted its dependents.
    Foreground,
    /// Its dependents are kept, their owner reference to it removed.
    Orphan,
}

/// Runs `safewrite delete` and returns its exit code.
pub fn run(args: DeleteArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return super::fail(&Fail::unavailable(format!("failed to start: {error}"))),
    };
    let (output, dry_run) = (args.output.clone(), args.dry_run);
    match runtime.block_on(delete(args)) {
        Ok((name, answer)) => print(&name, output.as_ref(), dry_run, &answer),
        Err(failure) => super::fail(&failure),
    }
}

/// Resolves the kind, builds the request and deletes in the mode the flags choose;
/// answers `kind[.group]/name` and the Delete answer.
async fn delete(args: DeleteArgs) -> Result<(String, pb::DeleteResponse), Fail> {
    let deadline = Instant::now() + args.timeout;
    let typed = kinds::parse(&args.object)?;
    let api_version = args.api_version.as_deref();
    match &args.connect.address {
        Some(address) => {
            let mut discovery = sidecar::LazyDiscovery::new(&args.connect);
            let kind = discovery.kind(&typed, api_version, "--api-version").await?;
            let default_namespace = match args.namespace {
                Some(_) => None,
                None => discovery
                    .client()
                    .await
                    .map(|c| c.default_namespace().to_string()),
            };
            let (name, request) = build(&args, &typed, kind, default_namespace.as_deref())?;
            let (mut client, call) = sidecar::connect(address, &args.connect, deadline).await?;
            let answer = client
                .delete(call.of(request))
                .await
                .map_err(|status| Fail::status(&status, "KIND/NAME"))?;
            Ok((name, answer.into_inner()))
        }
        None => {
            let (client, engine) = local::engine(&args.connect).await?;
            let kind = kinds::discover(&client, &typed, api_version).await?;
            let default_namespace = client.default_namespace().to_string();
            let (name, request) = build(&args, &typed, kind, Some(&default_namespace))?;
            let (spec, propagation) =
                crate::service::delete::validate(&request, engine.config())
                    .map_err(|v| Fail::status(&respond::invalid_request(&v), "KIND/NAME"))?;
            let deleted = engine
                .delete(&spec, propagation, CallDeadline::at(Some(deadline)))
                .await
                .map_err(|error| Fail::status(&respond::to_status(&error), "KIND/NAME"))?;
            Ok((
                name,
                crate::service::delete::response(deleted, String::new()),
            ))
        }
    }
}

/// The Delete request of the flags, and the object's `kind[.group]/name`.
fn build(
    args: &DeleteArgs,
    typed: &kinds::Typed,
    kind: kinds::Kind,
    default_namespace: Option<&str>,
) -> Result<(String, pb::DeleteRequest), Fail> {
    let namespace = match (kind.namespaced, &args.namespace) {
        (Some(false), _) => String::new(),
        (_, Some(namespace)) => namespace.clone(),
        (_, None) => default_namespace.unwrap_or("default").to_string(),
    };
    let propagation = match args.cascade {
        None => pb::PropagationPolicy::Unspecified,
        Some(Cascade::Background) => pb::PropagationPolicy::Background,
        Some(Cascade::Foreground) => pb::PropagationPolicy::Foreground,
        Some(Cascade::Orphan) => pb::PropagationPolicy::Orphan,
    };
    let request = pb::DeleteRequest {
        target: Some(pb::ObjectRef {
            api_version: kind.api_version,
            kind: kind.kind,
            namespace,
            name: typed.name.clone(),
        }),
        preconditions: Some(pb::Preconditions {
            uid: args.uid.clone().unwrap_or_default(),
            resource_version: args.resource_version.clone().unwrap_or_default(),
            cel: args.precondition.clone().unwrap_or_default(),
        }),
        propagation_policy: propagation as i32,
        dry_run: args.dry_run,
        retry_policy: Some(pb::RetryPolicy {
            max_attempts: args.max_attempts.unwrap_or(0),
            ..Default::default()
        }),
        fence: args.fence.fence()?,
    };
    Ok((format!("{}/{}", kind.display, typed.name), request))
}

/// Prints the answer as asked; every answer is exit 0.
fn print(
    name: &str,
    output: Option<&Output>,
    dry_run: bool,
    answer: &pb::DeleteResponse,
) -> ExitCode {
    let outcome = answer.outcome();
    let object: Value = if answer.object_json.is_empty() {
        Value::Null
    } else {
        match serde_json::from_str(&answer.object_json) {
            Ok(object) => object,
            Err(error) => {
                return super::fail(&Fail::unavailable(format!(
                    "the answer's object is not JSON: {}",
                    one_line(&error)
                )));
            }
        }
    };
    match output {
        Some(output) if object.is_null() && *output != Output::Name => {}
        Some(output) => match output.render(&object, name) {
            Ok(text) => println!("{text}"),
            Err(message) => return super::fail(&Fail::invalid(message)),
        },
        None => {
            let what = match outcome {
                pb::DeleteOutcome::Gone => "gone",
                pb::DeleteOutcome::Deleting => "deleting",
                _ => "deleted",
            };
            let dry = if dry_run && outcome != pb::DeleteOutcome::Gone {
                " (dry run)"
            } else {
                ""
            };
            println!("{name} {what}{dry}");
        }
    }
    ExitCode::SUCCESS
}
