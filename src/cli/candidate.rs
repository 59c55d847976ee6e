//! The campaign of `safewrite lead`, in either mode, as one stream of [`LeaseEvent`]s:
//! through the sidecar at `--address` / `SAFEWRITE_ADDRESS` (an `rpc Lead` stream), or
//! in-process (the same [`Campaign`] against the API server of the kubeconfig). Releasing
//! ends the campaign either way: the stream is closed (the sidecar releases the Lease) or
//! the campaign releases it before it ends.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use safewrite_api::deadline::AnswerBy;
use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;
use safewrite_api::target::ResourcePath;
use safewrite_client::ClientMetrics;

use super::fail::{Fail, one_line};
use crate::health::Address;
use crate::lease::{Campaign, LeaseEvent, NotLeading};
use crate::service::lead::LeadSpec;

/// How long reaching the sidecar or the API server may take before the campaign starts.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the campaign runs.
pub enum Mode<'a> {
    /// Through the sidecar at this address, with this token file.
    Sidecar(&'a Address, Option<&'a PathBuf>),
    /// In-process, with this kubeconfig and context.
    Local(Option<&'a PathBuf>, Option<&'a String>),
}

/// A running campaign: its events, and the task that ends it.
pub struct Candidate {
    events: mpsc::Receiver<LeaseEvent>,
    task: JoinHandle<()>,
}

// === impl Candidate ===

impl Candidate {
    /// Starts the campaign of `spec` (`request` as the sidecar takes it) in `mode`.
    ///
    /// # Errors
    /// Exit 7 when the sidecar or the API server cannot be reached, 6 when the Lease may
    /// not be read (or the sidecar's policy refuses `lead`), 2 for a bad kubeconfig.
    pub async fn start(
        mode: Mode<'_>,
        spec: LeadSpec,
        request: pb::LeadRequest,
    ) -> Result<Candidate, Fail> {
        let (sender, events) = mpsc::channel(16);
        let task = match mode {
            Mode::Sidecar(address, token) => {
                let stream = lead_call(address, token, request).await?;
                tokio::spawn(forward(stream, sender))
            }
            Mode::Local(kubeconfig, context) => {
                let serve = super::local::settings(kubeconfig, context)?;
                let client = safewrite_client::connect(&serve.client, ClientMetrics::default())
                    .await
                    .map_err(|e| Fail::invalid(one_line(&e)))?;
                may_read(&client, &spec).await?;
                let campaign = Campaign::new(client, spec.lease, spec.identity, spec.timings);
                // The campaign ends, releasing the Lease, when `events` is dropped.
                tokio::spawn(campaign.run(sender, std::future::pending()))
            }
        };
        Ok(Candidate { events, task })
    }

    /// The next event; `None` when the campaign ended (the sidecar closed the stream).
    pub async fn next(&mut self) -> Option<LeaseEvent> {
        self.events.recv().await
    }

    /// Ends the campaign and waits until it released the Lease (in-process, within the
    /// renew deadline) or closed its stream (the sidecar then releases it).
    pub async fn release(self) {
        drop(self.events);
        let _ = self.task.await;
    }
}

/// Opens the Lead stream.
async fn lead_call(
    address: &Address,
    token: Option<&PathBuf>,
    request: pb::LeadRequest,
) -> Result<tonic::Streaming<pb::LeadResponse>, Fail> {
    let channel = address.connect(CONNECT_TIMEOUT).await.map_err(|e| {
        Fail::unavailable(format!(
            "cannot reach the sidecar at {address} ({}); is it running? Unset SAFEWRITE_ADDRESS to campaign in-process instead",
            one_line(&e)
        ))
    })?;
    let mut call = tonic::Request::new(request);
    if let Some(path) = token {
        let token = crate::auth::read(path)
            .map_err(|e| Fail::invalid(format!("--token-file {}: {e}", path.display())))?;
        if let Some(value) = crate::auth::bearer(&token)
            && let Ok(value) = tonic::metadata::MetadataValue::try_from(value.as_bytes())
        {
            call.metadata_mut().insert("authorization", value);
        }
    }
    WriterServiceClient::new(channel)
        .lead(call)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| Fail::status(&status, "--lease"))
}

/// Passes the stream's events on until it ends or the receiver is dropped; dropping the
/// stream then closes it, and the sidecar releases the Lease.
async fn forward(mut stream: tonic::Streaming<pb::LeadResponse>, sender: mpsc::Sender<LeaseEvent>) {
    loop {
        let message = tokio::select! {
            message = stream.message() => message,
            () = sender.closed() => return,
        };
        let Ok(Some(answer)) = message else { return };
        if sender.send(event(&answer)).await.is_err() {
            return;
        }
    }
}

/// The event a Lead answer says.
fn event(answer: &pb::LeadResponse) -> LeaseEvent {
    if answer.state() == pb::LeadState::Leading {
        return LeaseEvent::Leading {
            epoch: answer.epoch,
        };
    }
    let reason = match answer.reason() {
        pb::NotLeadingReason::LostRenewal => NotLeading::LostRenewal,
        pb::NotLeadingReason::Released => NotLeading::Released,
        _ => NotLeading::OtherHolder,
    };
    LeaseEvent::NotLeading {
        reason,
        holder: answer.holder.clone(),
    }
}

/// Reads the Lease once before campaigning, so that missing permissions and an
/// unreachable API server end the command (exit 6, 7) instead of a campaign that never
/// leads.
async fn may_read(client: &safewrite_client::ApiClient, spec: &LeadSpec) -> Result<(), Fail> {
    let path = ResourcePath::new("coordination.k8s.io", "v1", "leases")
        .expect("a well-formed resource path")
        .object(&spec.lease.namespace, &spec.lease.name);
    let lease = format!("{}/{}", spec.lease.namespace, spec.lease.name);
    let answer = safewrite_client::apiserver::send(
        client,
        path.get(None),
        Some(CONNECT_TIMEOUT),
        AnswerBy::NONE,
    )
    .await
    .map_err(|e| {
        Fail::unavailable(format!(
            "cannot read the Lease {lease} from the API server: {}",
            one_line(&e)
        ))
    })?;
    match answer.code {
        200 | 404 => Ok(()),
        401 | 403 => Err(Fail::denied(format!(
            "the API server refused to read the Lease {lease} (HTTP {}): the identity needs get, create and update on coordination.k8s.io leases in {}",
            answer.code, spec.lease.namespace
        ))),
        code => Err(Fail::unavailable(format!(
            "reading the Lease {lease} answered HTTP {code}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lead_answers_become_the_campaign_events() {
        let mut answer = pb::LeadResponse {
            epoch: 4,
            holder: "b".into(),
            ..Default::default()
        };
        answer.set_state(pb::LeadState::Leading);
        assert_eq!(event(&answer), LeaseEvent::Leading { epoch: 4 });
        answer.set_state(pb::LeadState::NotLeading);
        answer.set_reason(pb::NotLeadingReason::LostRenewal);
        assert_eq!(
            event(&answer),
            LeaseEvent::NotLeading {
                reason: NotLeading::LostRenewal,
                holder: "b".into()
            }
        );
    }
}
