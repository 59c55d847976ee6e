//! In-process mode: the sidecar's engine, built as `safewrite serve` builds it (the same
//! client stack, `SAFEWRITE_*` settings and defaults), runs this one write against the
//! API server. The request is validated into a `WriteSpec` by the sidecar's validation,
//! and failures become the statuses the sidecar would answer.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::time::Instant;

use safewrite_api::deadline::CallDeadline;
use safewrite_api::pb;
use safewrite_api::target::FieldViolation;
use safewrite_client::{ApiClient, ClientMetrics};
use safewrite_engine::{Change, Engine, EngineMetrics, Failure, Mutator, Subresource};

use super::args::ConnectArgs;
use super::exec::{self, Proposal};
use super::fail::{Class, Fail, one_line};
use super::request::{Request, WriteKind};
use crate::service::respond;
use crate::service::validate::{RequestParts, validate_parts};

/// The serve settings (`SAFEWRITE_*` variables and defaults) with this command's
/// kubeconfig and context: the in-process engine and its client stack are built from them
/// as the sidecar's are.
pub fn serve_settings(args: &ConnectArgs) -> Result<crate::runtime::config::ServeArgs, Fail> {
    settings(args.kubeconfig.as_ref(), args.context.as_ref())
}

/// The serve settings with this `kubeconfig` and `context` (as [`serve_settings`]).
///
/// # Errors
/// A bad `SAFEWRITE_*` setting.
pub fn settings(
    kubeconfig: Option<&std::path::PathBuf>,
    context: Option<&String>,
) -> Result<crate::runtime::config::ServeArgs, Fail> {
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
    if kubeconfig.is_some() {
        serve.client.kubeconfig = kubeconfig.cloned();
    }
    if context.is_some() {
        serve.client.context = context.cloned();
    }
    Ok(serve)
}

/// The client (for discovery) and the engine over it.
///
/// # Errors
/// A kubeconfig that cannot be found or used, or a bad `SAFEWRITE_*` setting.
pub async fn engine(args: &ConnectArgs) -> Result<(ApiClient, Engine), Fail> {
    let serve = serve_settings(args)?;
    let client = safewrite_client::connect(&serve.client, ClientMetrics::default())
        .await
        .map_err(|e| Fail::invalid(one_line(&e)))?;
    let engine = Engine::new(
        client.clone(),
        crate::runtime::engine_config(&serve),
        EngineMetrics::default(),
    );
    Ok((client, engine))
}

/// Writes `request` with `engine`, by `deadline`.
///
/// # Errors
/// The status the sidecar would have answered, as a [`Fail`]; an --exec abort.
pub async fn write(
    engine: &Engine,
    request: &Request,
    connect: &ConnectArgs,
    deadline: Instant,
) -> Result<pb::WriteResult, Fail> {
    let subresource = match request.verb {
        WriteKind::Update => Subresource::Main,
        WriteKind::PatchStatus => Subresource::Status,
    };
    let parts = RequestParts {
        target: Some(&request.target),
        mutation: request.mutation.as_ref(),
        preconditions: Some(&request.preconditions),
        retry_policy: Some(&request.retry_policy),
        options: Some(&request.options),
    };
    let spec = validate_parts(parts, subresource, engine.config(), request.exec.is_none())
        .map_err(|v| Fail::status(&respond::invalid_request(&v), request.flag))?;
    // Writers of this machine take turns at the object (see `turns`).
    let key = format!(
        "{:?}|{:?}|{:?}|{}|{}|{}|{}",
        std::env::var_os("KUBECONFIG"),
        connect.kubeconfig,
        connect.context,
        request.target.api_version,
        request.target.kind,
        request.target.namespace,
        request.target.name
    );
    let _turn = super::turns::take(&key, deadline).await;
    let written = match &request.exec {
        None => engine.write(&spec, CallDeadline::at(Some(deadline))).await,
        Some(command) => {
            let aborted = Arc::new(Mutex::new(None));
            let mutator = ExecMutator {
                command: command.clone(),
                aborted: aborted.clone(),
            };
            let written = engine
                .write_with(&spec, mutator, CallDeadline::at(Some(deadline)))
                .await;
            if let Some(why) = aborted.lock().expect("aborted").take() {
                return Err(Fail::new(Class::ExecFailed, why));
            }
            written
        }
    };
    match written {
        Ok(written) => Ok(crate::service::write_result(
            written,
            &tracing::Span::none(),
        )),
        Err(error) => Err(Fail::status(&respond::to_status(&error), request.flag)),
    }
}

/// `--exec` as the engine's mutator: the model is the Transact stream's, with a process
/// in place of the caller.
struct ExecMutator {
    command: String,
    /// How the command ended when it aborted the write.
    aborted: Arc<Mutex<Option<String>>>,
}

impl Mutator for ExecMutator {
    async fn mutate(&mut self, _: u32, fresh: &Value, _: bool) -> Result<Change, Failure> {
        match exec::run(&self.command, fresh.to_string()).await {
            Proposal::Object(object) => Ok(Change::Object(object)),
            Proposal::Abort(why) => {
                *self.aborted.lock().expect("aborted") = Some(why);
                Ok(Change::Abort)
            }
            Proposal::Invalid(why) => Err(Failure::Invalid(FieldViolation::new("--exec", why))),
        }
    }
}
