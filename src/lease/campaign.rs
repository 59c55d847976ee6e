//! One campaign for one Lease, with client-go's leader-election semantics: every retry
//! period, read the Lease and acquire it when it is free, expired (its renew time plus
//! duration passed, measured on this process's clock from when it last saw the record
//! change) or already this campaign's; renew it while leading; stop leading when no
//! renewal succeeded within the renew deadline. Each acquisition writes the epoch (one
//! more than the Lease's) in the same conditional write. When the receiver of its events
//! goes away (the caller closed the stream), or the sidecar shuts down, the campaign
//! releases the Lease and ends.
//!
//! Its requests are [`LeaseTraffic`]: they bypass the rate limit and the breaker, and
//! each is bounded by its own timeout within the renew deadline.
//!
//! Each round is a root span `lease`, named `acquire` or `renew` in OpenTelemetry
//! (whether the campaign led when it started), with the Lease, the epoch written and
//! what the round found; the release is one named `release`. Every change between
//! leading and not leading is counted (`safewrite_lease_leading`,
//! `safewrite_lease_transitions_total`), the end of a leading campaign included.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument as _, Span};

use safewrite_api::deadline::AnswerBy;
use safewrite_api::target::{ObjectPath, ResourcePath, Verb, WriteParams};
use safewrite_client::{ApiClient, LeaseTraffic, apiserver};
use safewrite_engine::fence::{Holding, Holdings};

use super::record::{self, Claim};
use super::timing::{LeaseName, LeaseTimings};
use crate::metrics::Metrics;

/// Why the caller does not lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotLeading {
    /// Another holder holds the Lease, unexpired.
    OtherHolder,
    /// No renewal succeeded within the renew deadline.
    LostRenewal,
    /// The sidecar released the Lease on its own.
    Released,
}

/// What a campaign reports, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEvent {
    /// The campaign acquired the Lease under this epoch.
    Leading {
        /// The Lease's epoch, which grows by one with every acquisition.
        epoch: u64,
    },
    /// The campaign does not lead; `holder` is the Lease's holder as last read.
    NotLeading {
        /// Why it does not lead.
        reason: NotLeading,
        /// The Lease's holder as last read.
        holder: String,
    },
}

/// One campaign: the Lease, the identity it is held under, the timings.
#[derive(Clone)]
pub struct Campaign {
    client: ApiClient,
    /// Where this campaign publishes its leadership for fenced writes, under `id`.
    holdings: Option<(Arc<Holdings>, u64)>,
    /// Where its changes between leading and not are counted (none in the CLI).
    metrics: Option<Arc<Metrics>>,
    lease: LeaseName,
    path: ObjectPath,
    identity: String,
    timings: LeaseTimings,
}

/// What one round of the campaign found.
#[derive(Debug)]
enum Round {
    Acquired { epoch: u64 },
    Renewed,
    Held { holder: String },
    Failed,
}

// === impl Round ===

impl Round {
    /// The round's `safewrite.lease.result`.
    fn name(&self) -> &'static str {
        match self {
            Round::Acquired { .. } => "acquired",
            Round::Renewed => "renewed",
            Round::Held { .. } => "held",
            Round::Failed => "failed",
        }
    }
}

/// The campaign's state between rounds.
#[derive(Debug, Default)]
struct CampaignState {
    /// The epoch this campaign leads under, and when its last successful write started.
    leading: Option<(u64, Instant)>,
    /// The epoch this campaign last wrote onto the Lease.
    written_epoch: Option<u64>,
    /// The Lease as last read or written, and when this process first saw that version.
    observed: Option<(Value, Instant)>,
    /// The holder last reported to the caller.
    reported: Option<String>,
}

// === impl Campaign ===

impl Campaign {
    /// A campaign for `lease` under `identity`, sending through `client`.
    pub fn new(
        client: ApiClient,
        lease: LeaseName,
        identity: String,
        timings: LeaseTimings,
    ) -> Self {
        let leases = ResourcePath::new("coordination.k8s.io", "v1", "leases")
            .expect("a well-formed resource path");
        let path = leases.object(&lease.namespace, &lease.name);
        Self {
            client,
            holdings: None,
            metrics: None,
            lease,
            path,
            identity,
            timings,
        }
    }

    /// Publishes this campaign's leadership in `holdings`, which fenced writes check.
    pub fn publishing_to(mut self, holdings: Arc<Holdings>) -> Self {
        self.holdings = Some((holdings, fastrand::u64(..)));
        self
    }

    /// Counts this campaign's changes between leading and not in `metrics`.
    pub fn recording_to(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Publishes whether this campaign leads, and until when without a renewal.
    fn publish(&self, state: &CampaignState) {
        if let Some((holdings, id)) = &self.holdings {
            let holding = state.leading.map(|(epoch, renewed)| Holding {
                epoch,
                until: renewed + self.timings.renew_deadline,
            });
            holdings.publish(
                &format!("{}/{}", self.lease.namespace, self.lease.name),
                *id,
                holding,
            );
        }
    }

    /// The identity the Lease is held under.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Campaigns until `events`' receiver is dropped or `stop` resolves (the sidecar is
    /// shutting down), then releases the Lease when this campaign holds it and returns.
    /// On `stop`, the last event says so: [`NotLeading::Released`].
    pub async fn run(self, events: mpsc::Sender<LeaseEvent>, stop: impl Future<Output = ()>) {
        let mut state = CampaignState::default();
        let mut stop = std::pin::pin!(stop);
        let stopped = loop {
            let started = Instant::now();
            let span = self.round_span(&state);
            let round = tokio::select! {
                round = self.round(&mut state, started).instrument(span.clone()) => round,
                () = events.closed() => break false,
                () = &mut stop => break true,
            };
            span.record("safewrite.lease.result", round.name());
            if matches!(round, Round::Failed) {
                span.record("otel.status_code", "ERROR");
            }
            let was_leading = state.leading.is_some();
            let reported = self.report(&mut state, round, started);
            self.publish(&state);
            self.count_leadership(was_leading, state.leading.is_some());
            if let Some(event) = reported
                && events.send(event).await.is_err()
            {
                break false;
            }
            tokio::select! {
                () = tokio::time::sleep(self.timings.retry_period) => {}
                () = events.closed() => break false,
                () = &mut stop => break true,
            }
        };
        if let Some((holdings, id)) = &self.holdings {
            holdings.withdraw(
                &format!("{}/{}", self.lease.namespace, self.lease.name),
                *id,
            );
        }
        let held = self
            .release(&state)
            .instrument(self.span("release", state.written_epoch))
            .await;
        self.count_leadership(state.leading.is_some(), false);
        if stopped {
            let holder = match (held, state.reported) {
                (true, _) | (false, None) => String::new(),
                (false, Some(holder)) => holder,
            };
            let released = LeaseEvent::NotLeading {
                reason: NotLeading::Released,
                holder,
            };
            let _ = events.send(released).await;
        }
    }

    /// The state after `round`, which started at `started`, and the event it makes, if
    /// any. A successful write counts from when its round started, so the renew deadline
    /// is never measured from later than the API server may have seen the renewal.
    fn report(
        &self,
        state: &mut CampaignState,
        round: Round,
        started: Instant,
    ) -> Option<LeaseEvent> {
        let now = Instant::now();
        match round {
            Round::Acquired { epoch } => {
                state.leading = Some((epoch, started));
                state.reported = Some(self.identity.clone());
                Some(LeaseEvent::Leading { epoch })
            }
            Round::Renewed => {
                if let Some((_, renewed)) = &mut state.leading {
                    *renewed = started;
                }
                None
            }
            Round::Held { holder } => {
                let was_leading = state.leading.take().is_some();
                let news = state.reported.as_deref() != Some(holder.as_str());
                state.reported = Some(holder.clone());
                (was_leading || news).then_some(LeaseEvent::NotLeading {
                    reason: NotLeading::OtherHolder,
                    holder,
                })
            }
            Round::Failed => {
                let (_, renewed) = state.leading?;
                if now < renewed + self.timings.renew_deadline {
                    return None;
                }
                state.leading = None;
                state.reported = None;
                let holder = state
                    .observed
                    .as_ref()
                    .map(|(lease, _)| record::holder(lease).to_string())
                    .unwrap_or_default();
                Some(LeaseEvent::NotLeading {
                    reason: NotLeading::LostRenewal,
                    holder,
                })
            }
        }
    }

    /// The span of a round that starts in `state`: `renew` while leading, else `acquire`.
    fn round_span(&self, state: &CampaignState) -> Span {
        match state.leading {
            Some((epoch, _)) => self.span("renew", Some(epoch)),
            None => self.span("acquire", None),
        }
    }

    /// A root span for this campaign's Lease, named `name` in OpenTelemetry (a campaign
    /// outlives the RPC that started it); `epoch`, when not known yet, is recorded once
    /// written.
    fn span(&self, name: &'static str, epoch: Option<u64>) -> Span {
        let span = tracing::info_span!(
            parent: None,
            "lease",
            otel.name = name,
            otel.status_code = Empty,
            k8s.namespace.name = &*self.lease.namespace,
            safewrite.lease.name = &*self.lease.name,
            safewrite.lease.epoch = Empty,
            safewrite.lease.result = Empty,
        );
        if let Some(epoch) = epoch {
            span.record("safewrite.lease.epoch", epoch as i64);
        }
        span
    }

    /// Counts a change of this campaign between leading and not leading, if there was one.
    fn count_leadership(&self, was_leading: bool, leading: bool) {
        if let Some(metrics) = &self.metrics
            && was_leading != leading
        {
            let lease = format!("{}/{}", &*self.lease.namespace, &*self.lease.name);
            metrics.leadership(&lease, leading);
        }
    }

    /// The bound of a request sent now: within the renew deadline while leading (`None`
    /// once it passed: send nothing), else the renew deadline.
    fn bound(&self, state: &CampaignState) -> Option<Duration> {
        match state.leading {
            Some((_, renewed)) => {
                let left = (renewed + self.timings.renew_deadline)
                    .saturating_duration_since(Instant::now());
                (!left.is_zero()).then_some(left)
            }
            None => Some(self.timings.renew_deadline),
        }
    }

    /// One try to acquire or renew: read the Lease, then write it when this campaign may.
    async fn round(&self, state: &mut CampaignState, started: Instant) -> Round {
        let Some(read) = self.send(self.path.get(None), state).await else {
            return Round::Failed;
        };
        let lease = match read.code {
            200 => match serde_json::from_slice::<Value>(&read.body) {
                Ok(lease) => lease,
                Err(_) => return Round::Failed,
            },
            404 => return self.create(state, started).await,
            _ => return Round::Failed,
        };
        self.observe(state, &lease, started);
        let holder = record::holder(&lease);
        let ours = holder == self.identity && state.written_epoch == Some(record::epoch(&lease));
        if !holder.is_empty() && !ours && self.unexpired(state) {
            return Round::Held {
                holder: holder.to_string(),
            };
        }
        let renewal = ours && state.leading.is_some();
        let epoch = if renewal {
            record::epoch(&lease)
        } else {
            record::epoch(&lease) + 1
        };
        Span::current().record("safewrite.lease.epoch", epoch as i64);
        let body = record::claimed(&lease, self.claim(epoch));
        if self.write(state, Verb::Replace, &body, started).await {
            if renewal {
                Round::Renewed
            } else {
                Round::Acquired { epoch }
            }
        } else {
            Round::Failed
        }
    }

    /// Creates the missing Lease under epoch 1; another candidate's create may win.
    async fn create(&self, state: &mut CampaignState, started: Instant) -> Round {
        Span::current().record("safewrite.lease.epoch", 1i64);
        let body = record::created(&self.lease, self.claim(1));
        if self.write(state, Verb::Create, &body, started).await {
            Round::Acquired { epoch: 1 }
        } else {
            Round::Failed
        }
    }

    fn claim(&self, epoch: u64) -> Claim<'_> {
        Claim {
            identity: &self.identity,
            epoch,
            lease_seconds: self.timings.lease_seconds(),
        }
    }

    /// Notes `lease` as read at `at`: its observed time moves only when its version did.
    fn observe(&self, state: &mut CampaignState, lease: &Value, at: Instant) {
        let seen = state.observed.as_ref().is_some_and(|(known, _)| {
            record::resource_version(known) == record::resource_version(lease)
        });
        if !seen {
            state.observed = Some((lease.clone(), at));
        }
    }

    /// Whether the observed Lease is still within its duration, by this process's clock.
    fn unexpired(&self, state: &CampaignState) -> bool {
        state.observed.as_ref().is_some_and(|(lease, seen)| {
            let seconds = record::lease_seconds(lease).unwrap_or(self.timings.lease_seconds());
            Instant::now() < *seen + Duration::from_secs(seconds)
        })
    }

    /// Writes `body` (a conditional replace, or a create); true when the API server took
    /// it, which then becomes the observed Lease.
    async fn write(
        &self,
        state: &mut CampaignState,
        verb: Verb,
        body: &Value,
        started: Instant,
    ) -> bool {
        let request = self.path.request(
            verb,
            false,
            &WriteParams::default(),
            body.to_string().into_bytes(),
        );
        let Some(answer) = self.send(request, state).await else {
            return false;
        };
        let written = matches!(answer.code, 200 | 201)
            .then(|| serde_json::from_slice::<Value>(&answer.body).ok())
            .flatten();
        let Some(lease) = written else {
            return false;
        };
        state.written_epoch = Some(record::epoch(&lease));
        state.observed = Some((lease, started));
        true
    }

    /// Sends `request` as Lease traffic within [`Self::bound`]; `None` when no answer came.
    async fn send(
        &self,
        request: http::Request<Vec<u8>>,
        state: &CampaignState,
    ) -> Option<apiserver::Answer> {
        let timeout = self.bound(state)?;
        let mut request = request;
        request.extensions_mut().insert(LeaseTraffic);
        apiserver::send(&self.client, request, Some(timeout), AnswerBy::NONE)
            .await
            .ok()
    }

    /// Releases the Lease when this campaign wrote it last: holder cleared, conditional
    /// on the version last seen; after a 409, once more on a fresh read if it is still
    /// this campaign's. Bounded by the renew deadline. True when this campaign held it
    /// as last seen (whether or not the release got through).
    async fn release(&self, state: &CampaignState) -> bool {
        let Some((lease, _)) = state.observed.clone() else {
            return false;
        };
        let ours = |lease: &Value| {
            record::holder(lease) == self.identity
                && state.written_epoch == Some(record::epoch(lease))
        };
        if !ours(&lease) {
            return false;
        }
        let released = async {
            let mut lease = lease;
            for _ in 0..2 {
                if !ours(&lease) {
                    return;
                }
                let body = record::released(&lease).to_string().into_bytes();
                let put = self
                    .path
                    .request(Verb::Replace, false, &WriteParams::default(), body);
                let idle = CampaignState::default();
                match self.send(put, &idle).await {
                    Some(answer) if answer.code == 409 => {}
                    _ => return,
                }
                let Some(read) = self.send(self.path.get(None), &idle).await else {
                    return;
                };
                match serde_json::from_slice::<Value>(&read.body) {
                    Ok(fresh) if read.code == 200 => lease = fresh,
                    _ => return,
                }
            }
        };
        let _ = tokio::time::timeout(self.timings.renew_deadline, released).await;
        true
    }
}
