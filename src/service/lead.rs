//! `rpc Lead`: the request checked at the boundary (the Lease's name, the identity, the
//! durations), the policy's `lead` operation on the Lease's namespace, then a campaign
//! (`lease/`) on a task of its own whose events become the stream. The campaign ends,
//! releasing the Lease, when the stream is dropped: the caller closed it or went away.

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use safewrite_api::pb;
use safewrite_api::target::FieldViolation;

use crate::lease::{self, Campaign, LeaseEvent, LeaseName, LeaseTimings, NotLeading};

/// The stream a Lead call answers with.
pub type LeadStream = Pin<Box<dyn Stream<Item = Result<pb::LeadResponse, Status>> + Send>>;

/// A Lead request as validated values.
#[derive(Debug)]
pub struct LeadSpec {
    pub(crate) lease: LeaseName,
    /// The identity given, or one made unique to this call.
    pub identity: String,
    pub(crate) timings: LeaseTimings,
}

/// Checks `request`; the violation names the field.
///
/// # Errors
/// The first [`FieldViolation`].
pub fn validate(request: &pb::LeadRequest) -> Result<LeadSpec, FieldViolation> {
    let lease = LeaseName::parse(&request.namespace, &request.name)?;
    let identity = match request.identity.as_str() {
        "" => made_identity(),
        given => lease::identity(given)?,
    };
    let duration = |field: &str, d: Option<prost_types::Duration>| match d {
        None => Ok(None),
        Some(d) => Duration::try_from(d)
            .map(Some)
            .map_err(|_| FieldViolation::new(field, "must be a positive duration")),
    };
    let timings = LeaseTimings::new(
        duration("lease_duration", request.lease_duration)?,
        duration("renew_deadline", request.renew_deadline)?,
        duration("retry_period", request.retry_period)?,
    )?;
    Ok(LeadSpec {
        lease,
        identity,
        timings,
    })
}

/// An identity unique to one call: the host's name (the pod's, in a cluster) and 64
/// random bits, as client-go's examples make one from the hostname and a UUID.
fn made_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty() && lease::identity(h).is_ok() && h.len() <= 200)
        .unwrap_or_else(|| "safewrite".to_string());
    format!("{host}_{:016x}", fastrand::u64(..))
}

/// Starts the campaign of `spec` through the engine's client, publishing its leadership
/// in the engine's holdings for fenced writes, and answers its events as a stream.
/// The campaign ends when the stream is dropped, or when `stop` turns true (the sidecar
/// drains): it then releases the Lease, says RELEASED and ends the stream, so that a
/// drain does not wait for callers to close their streams.
pub fn start(spec: LeadSpec, with: Campaigning<'_>) -> LeadStream {
    let Campaigning {
        engine,
        metrics,
        place,
        stop,
    } = with;
    let identity = spec.identity.clone();
    let campaign = Campaign::new(
        engine.client().clone(),
        spec.lease,
        spec.identity,
        spec.timings,
    )
    .publishing_to(engine.holdings().clone())
    .recording_to(metrics);
    let (events, received) = mpsc::channel(16);
    let stop = async move {
        let stopping = match stop {
            Some(mut stop) => stop.wait_for(|stopping| *stopping).await.is_ok(),
            None => false,
        };
        if !stopping {
            // No drain will come (no signal, or its sender is gone): campaign on.
            std::future::pending::<()>().await;
        }
    };
    // The campaign holds its place until it ended (and released the Lease).
    tokio::spawn(async move {
        campaign.run(events, stop).await;
        drop(place);
    });
    let stream = ReceiverStream::new(received).map(move |event| Ok(answer(event, &identity)));
    Box::pin(stream)
}

/// What a campaign runs with, besides its spec: the engine whose client it sends
/// through and whose fenced writes it answers for, where it is counted, its place among
/// the campaigns, and the drain that ends it.
pub struct Campaigning<'a> {
    /// The engine: its client stack and the holdings fenced writes check.
    pub engine: &'a safewrite_engine::Engine,
    /// Where its changes between leading and not are counted.
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Its place among the campaigns (`--max-campaigns`), held until it ended.
    pub place: tokio::sync::OwnedSemaphorePermit,
    /// Turns true when the sidecar drains.
    pub stop: Option<watch::Receiver<bool>>,
}

/// The message of one event.
fn answer(event: LeaseEvent, identity: &str) -> pb::LeadResponse {
    let mut answer = pb::LeadResponse {
        identity: identity.to_string(),
        ..Default::default()
    };
    match event {
        LeaseEvent::Leading { epoch } => {
            answer.set_state(pb::LeadState::Leading);
            answer.epoch = epoch;
            answer.holder = identity.to_string();
        }
        LeaseEvent::NotLeading { reason, holder } => {
            answer.set_state(pb::LeadState::NotLeading);
            answer.set_reason(match reason {
                NotLeading::OtherHolder => pb::NotLeadingReason::OtherHolder,
                NotLeading::LostRenewal => pb::NotLeadingReason::LostRenewal,
                NotLeading::Released => pb::NotLeadingReason::Released,
            });
            answer.holder = holder;
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<prost_types::Duration> {
        Some(Duration::from_millis(n).try_into().unwrap())
    }

    fn request() -> pb::LeadRequest {
        pb::LeadRequest {
            namespace: "ns".into(),
            name: "l".into(),
            identity: String::new(),
            lease_duration: ms(2000),
            renew_deadline: ms(1500),
            retry_period: ms(300),
        }
    }

    #[test]
    fn each_call_without_an_identity_gets_its_own() {
        let (a, b) = (validate(&request()).unwrap(), validate(&request()).unwrap());
        assert_ne!(a.identity, b.identity);
        let given = pb::LeadRequest {
            identity: "pod-1".into(),
            ..request()
        };
        assert_eq!(validate(&given).unwrap().identity, "pod-1");
    }

    #[test]
    fn bad_fields_are_named() {
        let field = |request: pb::LeadRequest| validate(&request).unwrap_err().field;
        let negative = Some(prost_types::Duration {
            seconds: -1,
            nanos: 0,
        });
        assert_eq!(
            field(pb::LeadRequest {
                namespace: "N".into(),
                ..request()
            }),
            "namespace"
        );
        assert_eq!(
            field(pb::LeadRequest {
                name: "a_b".into(),
                ..request()
            }),
            "name"
        );
        assert_eq!(
            field(pb::LeadRequest {
                identity: "a b".into(),
                ..request()
            }),
            "identity"
        );
        assert_eq!(
            field(pb::LeadRequest {
                retry_period: negative,
                ..request()
            }),
            "retry_period"
        );
        assert_eq!(
            field(pb::LeadRequest {
                renew_deadline: ms(3000),
                ..request()
            }),
            "lease_duration"
        );
    }

    #[test]
    fn events_carry_state_epoch_reason_and_holder() {
        let leading = answer(LeaseEvent::Leading { epoch: 3 }, "me");
        assert_eq!(
            (leading.state(), leading.epoch, leading.holder.as_str()),
            (pb::LeadState::Leading, 3, "me")
        );
        let lost = answer(
            LeaseEvent::NotLeading {
                reason: NotLeading::OtherHolder,
                holder: "b".into(),
            },
            "me",
        );
        assert_eq!(lost.state(), pb::LeadState::NotLeading);
        assert_eq!(lost.reason(), pb::NotLeadingReason::OtherHolder);
        assert_eq!(
            (lost.holder.as_str(), lost.identity.as_str(), lost.epoch),
            ("b", "me", 0)
        );
    }
}
