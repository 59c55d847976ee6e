//! Sidecar mode: the write goes to the sidecar at `--address` / `SAFEWRITE_ADDRESS` as an
//! UpdateWithRetry or PatchStatus call, or, for `--exec`, as a Transact stream whose
//! proposals come from the command. The sidecar's answer is the command's.

use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;
use safewrite_client::{ApiClient, ClientMetrics};

use super::args::{ConnectArgs, WriteArgs};
use super::exec::{self, Proposal};
use super::fail::{Class, Fail, one_line};
use super::kinds;
use super::local::serve_settings;
use super::request::{Request, WriteKind};
use crate::health::Address;

/// A client for discovery, when a kubeconfig (or in-cluster configuration) is at hand:
/// for kinds the built-in table does not know, and for the default namespace.
async fn discovery_client(args: &ConnectArgs) -> Option<ApiClient> {
    let serve = serve_settings(args).ok()?;
    if serve.client.kubeconfig.is_none()
        && std::env::var_os("KUBECONFIG").is_none()
        && std::env::var_os("KUBERNETES_SERVICE_HOST").is_none()
        && !std::env::var_os("HOME")
            .is_some_and(|home| std::path::Path::new(&home).join(".kube/config").exists())
    {
        return None;
    }
    safewrite_client::connect(&serve.client, ClientMetrics::default())
        .await
        .ok()
}

/// The discovery client, made at most once and only when first needed.
pub struct LazyDiscovery<'a> {
    args: &'a ConnectArgs,
    client: Option<Option<ApiClient>>,
}

// === impl LazyDiscovery ===

impl<'a> LazyDiscovery<'a> {
    pub fn new(args: &'a ConnectArgs) -> Self {
        LazyDiscovery { args, client: None }
    }

    /// The client of [`discovery_client`], or `None` without a kubeconfig.
    pub async fn client(&mut self) -> Option<&ApiClient> {
        if self.client.is_none() {
            self.client = Some(discovery_client(self.args).await);
        }
        self.client.as_ref().and_then(Option::as_ref)
    }

    /// Resolves `typed` from the built-in names (or as a Kind of `api_version`, which
    /// `version_flag` gives), else through discovery when a kubeconfig is at hand.
    ///
    /// # Errors
    /// As [`kinds::offline`] without a kubeconfig, as [`kinds::discover`] with one.
    pub async fn kind(
        &mut self,
        typed: &kinds::Typed,
        api_version: Option<&str>,
        version_flag: &str,
    ) -> Result<kinds::Kind, Fail> {
        match kinds::offline(typed, api_version, version_flag) {
            Ok(kind) => Ok(kind),
            Err(offline) => match self.client().await {
                Some(client) => kinds::discover(client, typed, api_version).await,
                None => Err(offline),
            },
        }
    }
}

/// Sends `request` to the sidecar at `address`, answering by `deadline`.
///
/// # Errors
/// The sidecar's refusal; an unreachable sidecar; an --exec abort.
pub async fn write(
    address: &Address,
    args: &WriteArgs,
    request: &Request,
    deadline: Instant,
) -> Result<pb::WriteResult, Fail> {
    let (mut client, call) = connect(address, &args.connect, deadline).await?;
    if let Some(command) = &request.exec {
        return transact(&mut client, call, request, command).await;
    }
    // The two requests carry the same fields.
    let fields = pb::PatchStatusRequest {
        target: Some(request.target.clone()),
        mutation: request.mutation.clone(),
        preconditions: Some(request.preconditions.clone()),
        retry_policy: Some(request.retry_policy),
        options: Some(request.options.clone()),
    };
    let answer = match request.verb {
        WriteKind::Update => client
            .update_with_retry(call.of(pb::UpdateWithRetryRequest::from(fields)))
            .await
            .map(|answer| answer.into_inner().result),
        WriteKind::PatchStatus => client
            .patch_status(call.of(fields))
            .await
            .map(|answer| answer.into_inner().result),
    };
    match answer {
        Ok(Some(result)) => Ok(result),
        Ok(None) => Err(Fail::unavailable("the sidecar answered without a result")),
        Err(status) => Err(Fail::status(&status, request.flag)),
    }
}

/// A client of the sidecar at `address`, and what every call to it carries.
///
/// # Errors
/// An unreadable --token-file; an unreachable sidecar.
pub async fn connect(
    address: &Address,
    args: &ConnectArgs,
    deadline: Instant,
) -> Result<(WriterServiceClient<tonic::transport::Channel>, Call), Fail> {
    let token = match &args.token_file {
        Some(path) => Some(
            crate::auth::read(path)
                .map_err(|e| Fail::invalid(format!("--token-file {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let channel = address.connect(left).await.map_err(|e| {
        Fail::unavailable(format!(
            "cannot reach the sidecar at {address} ({}); is it running? Unset SAFEWRITE_ADDRESS to run in-process instead",
            one_line(&e)
        ))
    })?;
    let call = Call {
        deadline,
        token: token.as_deref().and_then(crate::auth::bearer),
    };
    Ok((WriterServiceClient::new(channel), call))
}

/// The Transact stream: each fresh object goes to the command, its output back as the
/// proposal.
async fn transact(
    client: &mut WriterServiceClient<tonic::transport::Channel>,
    call: Call,
    request: &Request,
    command: &str,
) -> Result<pb::WriteResult, Fail> {
    use pb::transact_request::Message as Out;
    use pb::transact_response::Message as In;
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let begin = pb::TransactBegin {
        target: Some(request.target.clone()),
        status: request.verb == WriteKind::PatchStatus,
        preconditions: Some(request.preconditions.clone()),
        retry_policy: Some(request.retry_policy),
        options: Some(request.options.clone()),
    };
    let _ = tx
        .send(pb::TransactRequest {
            message: Some(Out::Begin(begin)),
        })
        .await;
    let mut inbound = client
        .transact(call.of(ReceiverStream::new(rx)))
        .await
        .map_err(|status| Fail::status(&status, request.flag))?
        .into_inner();
    let mut ended: Option<Fail> = None;
    loop {
        let message = inbound
            .message()
            .await
            .map_err(|status| Fail::status(&status, request.flag))?;
        match message.and_then(|m| m.message) {
            Some(In::Fresh(fresh)) => {
                let proposal = exec::run(command, fresh.object_json).await;
                let change = match proposal {
                    Proposal::Object(object) => {
                        pb::transact_proposal::Change::ObjectJson(object.to_string())
                    }
                    Proposal::Abort(why) => {
                        ended = Some(Fail::new(Class::ExecFailed, why.clone()));
                        pb::transact_proposal::Change::Abort(pb::TransactAbort { reason: why })
                    }
                    Proposal::Invalid(why) => {
                        ended = Some(Fail::invalid(why.clone()));
                        pb::transact_proposal::Change::Abort(pb::TransactAbort { reason: why })
                    }
                };
                let proposal = pb::TransactProposal {
                    attempt: fresh.attempt,
                    change: Some(change),
                };
                if tx
                    .send(pb::TransactRequest {
                        message: Some(Out::Proposal(proposal)),
                    })
                    .await
                    .is_err()
                {
                    return Err(Fail::unavailable("the sidecar closed the transaction"));
                }
            }
            Some(In::Result(result)) => {
                return match ended {
                    Some(fail) if result.outcome() == pb::Outcome::Aborted => Err(fail),
                    _ => Ok(result),
                };
            }
            None => {
                return Err(Fail::unavailable(
                    "the sidecar ended the transaction without a result; the write may or may not have been made",
                ));
            }
        }
    }
}

/// What every call carries: the time left, and the token.
pub struct Call {
    deadline: Instant,
    token: Option<http::HeaderValue>,
}

// === impl Call ===

impl Call {
    pub fn of<T>(&self, message: T) -> tonic::Request<T> {
        let mut call = tonic::Request::new(message);
        call.set_timeout(self.deadline.saturating_duration_since(Instant::now()));
        if let Some(value) = &self.token
            && let Ok(value) = tonic::metadata::MetadataValue::try_from(value.as_bytes())
        {
            call.metadata_mut().insert("authorization", value);
        }
        call
    }
}
