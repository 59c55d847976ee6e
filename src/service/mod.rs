//! The `safewrite.v1.WriterService` service: requests validated at the boundary
//! (`validate`), checked against the `policy`, run by the engine (`transact` for the
//! interactive stream, `lead` the Lease campaign's), every failure answered by `respond`;
//! what tonic refuses before a
//! handler runs, and calls without the shared token, are answered by `edge`.

pub mod capabilities;
pub mod delete;
pub mod edge;
mod get;
pub mod lead;
pub mod policy;
pub mod receive;
pub mod respond;
mod rpc;
pub mod send;
pub mod transact;
pub mod validate;

pub use rpc::{
    Admission, RpcSpan, end_rpc, finish_rpc, grpc_timeout_of, outcome_name, record_target,
    subresource_label, write_result,
};
pub use validate::{RequestParts, validate, validate_parts};

use std::pin::Pin;

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;

use crate::metrics::Metrics;
use crate::service::edge::Reached;
use crate::service::policy::{AllowList, Operation};
use crate::telemetry;
use rpc::permit;
use safewrite_api::deadline::CallDeadline;
use safewrite_api::pb;
use safewrite_engine::{Engine, Subresource};

/// Lead campaigns at once when the service is not told (`--max-campaigns`'s default).
const DEFAULT_MAX_CAMPAIGNS: usize = 64;

/// The `safewrite.v1.WriterService` implementation.
#[derive(Clone)]
pub struct WriterService {
    engine: Engine,
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    transact: transact::TransactLimits,
    policy: Arc<AllowList>,
    sending: send::SendingBudget,
    /// Turns true when the sidecar drains: Lead campaigns release and end.
    stop: Option<tokio::sync::watch::Receiver<bool>>,
    /// A place for each Lead campaign running; none left refuses a new Lead.
    campaigns: Arc<Semaphore>,
    max_campaigns: usize,
    metrics: Arc<Metrics>,
}

type TransactStream = Pin<Box<dyn Stream<Item = Result<pb::TransactResponse, Status>> + Send>>;

// === impl WriterService ===

impl WriterService {
    /// A service that runs at most `max_in_flight` RPCs at once, holds transactions'
    /// callers to `transact`, writes only what `policy` allows, makes large answers
    /// within the `sending` budget, and counts its RPCs in `metrics`.
    pub fn new(
        engine: Engine,
        max_in_flight: usize,
        transact: transact::TransactLimits,
        policy: AllowList,
        sending: send::SendingBudget,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            engine,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            transact,
            policy: Arc::new(policy),
            sending,
            stop: None,
            campaigns: Arc::new(Semaphore::new(DEFAULT_MAX_CAMPAIGNS)),
            max_campaigns: DEFAULT_MAX_CAMPAIGNS,
            metrics,
        }
    }

    /// The service that runs at most `max` Lead campaigns at once.
    pub fn campaigning_at_most(mut self, max: usize) -> Self {
        self.campaigns = Arc::new(Semaphore::new(max));
        self.max_campaigns = max;
        self
    }

    /// The service whose Lead campaigns release their Leases and end their streams when
    /// `stop` turns true (the sidecar drains).
    pub fn stopping_on(mut self, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// A place among the RPCs in flight, or RESOURCE_EXHAUSTED at once (load shedding).
    fn admit(&self) -> Result<Admission, Status> {
        let permit = self
            .in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| respond::overloaded(self.max_in_flight))?;
        Ok(Admission {
            _permit: permit,
            _gauge: self.metrics.in_flight(),
            metrics: self.metrics.clone(),
        })
    }

    /// Runs a unary RPC (its metadata and the caller's deadline) in its span: validates
    /// the request, checks it against the policy, runs the engine, maps the result, and
    /// records the RPC in its span and the metrics.
    async fn run(
        &self,
        method: &'static str,
        metadata: &tonic::metadata::MetadataMap,
        deadline: CallDeadline,
        parts: RequestParts<'_>,
        subresource: Subresource,
        operation: Operation,
    ) -> Result<(pb::WriteResult, Option<send::Share>), Status> {
        let span = telemetry::rpc_span(method, metadata);
        let started = std::time::Instant::now();
        let result = async {
            let _admission = self.admit()?;
            let spec = validate(parts, subresource, self.engine.config())
                .map_err(|v| respond::invalid_request(&v))?;
            record_target(&span, &spec.target);
            permit(&self.policy, &spec, operation)?;
            let written = self
                .engine
                .write(&spec, deadline)
                .await
                .map_err(|err| respond::to_status(&err))?;
            // The object is made into the answer only once the answer has its share.
            let share = self
                .sending
                .share(written.object.json_len(), deadline.answer_by().instant())
                .await;
            Ok((write_result(written, &span), share))
        }
        .instrument(span.clone())
        .await;
        let answered = result.as_ref().map(|(answer, _)| answer);
        finish_rpc(
            &self.metrics,
            &span,
            method,
            Some(subresource),
            started,
            answered,
        );
        result
    }
}

#[tonic::async_trait]
impl pb::writer_service_server::WriterService for WriterService {
    async fn update_with_retry(
        &self,
        request: Request<pb::UpdateWithRetryRequest>,
    ) -> Result<Response<pb::UpdateWithRetryResponse>, Status> {
        let (metadata, extensions, body) = request.into_parts();
        Reached::mark(&extensions);
        let (result, share) = self
            .run(
                "UpdateWithRetry",
                &metadata,
                CallDeadline::of(&extensions),
                RequestParts::from(&body),
                Subresource::Main,
                Operation::Update,
            )
            .await?;
        Ok(send::answer(
            pb::UpdateWithRetryResponse {
                result: Some(result),
            },
            share,
        ))
    }

    async fn patch_status(
        &self,
        request: Request<pb::PatchStatusRequest>,
    ) -> Result<Response<pb::PatchStatusResponse>, Status> {
        let (metadata, extensions, body) = request.into_parts();
        Reached::mark(&extensions);
        // The same fields as UpdateWithRetry's, for the status subresource.
        let body = pb::UpdateWithRetryRequest::from(body);
        let (result, share) = self
            .run(
                "PatchStatus",
                &metadata,
                CallDeadline::of(&extensions),
                RequestParts::from(&body),
                Subresource::Status,
                Operation::PatchStatus,
            )
            .await?;
        Ok(send::answer(
            pb::PatchStatusResponse {
                result: Some(result),
            },
            share,
        ))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        self.read(request).await
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let (metadata, extensions, body) = request.into_parts();
        Reached::mark(&extensions);
        let deadline = CallDeadline::of(&extensions);
        let span = telemetry::rpc_span("Delete", &metadata);
        let started = std::time::Instant::now();
        let result = async {
            let _admission = self.admit()?;
            let (spec, propagation) = delete::validate(&body, self.engine.config())
                .map_err(|v| respond::invalid_request(&v))?;
            record_target(&span, &spec.target);
            permit(&self.policy, &spec, Operation::Delete)?;
            let deleted = self
                .engine
                .delete(&spec, propagation, deadline)
                .await
                .map_err(|err| respond::to_status(&err))?;
            let outcome = deleted.outcome.name();
            self.metrics
                .outcome(outcome, subresource_label(Some(Subresource::Main)));
            Ok((
                delete::response(deleted, telemetry::trace_id(&span)),
                outcome,
            ))
        }
        .instrument(span.clone())
        .await;
        let ended = result
            .as_ref()
            .map(|(answer, outcome)| (*outcome, answer.attempts));
        end_rpc(
            &self.metrics,
            &span,
            "Delete",
            Some(Subresource::Main),
            started,
            ended,
        );
        result.map(|(answer, _)| Response::new(answer))
    }

    async fn capabilities(
        &self,
        request: Request<pb::CapabilitiesRequest>,
    ) -> Result<Response<pb::CapabilitiesResponse>, Status> {
        Reached::mark(request.extensions());
        let (span, started) = (
            telemetry::rpc_span("Capabilities", request.metadata()),
            std::time::Instant::now(),
        );
        end_rpc(
            &self.metrics,
            &span,
            "Capabilities",
            None,
            started,
            Ok(("answered", 0)),
        );
        Ok(Response::new(capabilities::answer()))
    }

    type LeadStream = lead::LeadStream;

    async fn lead(
        &self,
        request: Request<pb::LeadRequest>,
    ) -> Result<Response<Self::LeadStream>, Status> {
        let (metadata, extensions, body) = request.into_parts();
        Reached::mark(&extensions);
        let span = telemetry::rpc_span("Lead", &metadata);
        let started = std::time::Instant::now();
        let opened = {
            let _entered = span.enter();
            lead::validate(&body)
                .map_err(|v| respond::invalid_request(&v))
                .and_then(|spec| {
                    span.record("k8s.namespace.name", &*spec.lease.namespace);
                    self.policy
                        .check_lead(&spec.lease.namespace, &spec.lease.name)
                        .map_err(|denied| respond::policy_denied(&denied))?;
                    let place = self
                        .campaigns
                        .clone()
                        .try_acquire_owned()
                        .map_err(|_| respond::too_many_campaigns(self.max_campaigns))?;
                    Ok((spec, place))
                })
        };
        // The RPC is recorded as it opens: the campaign's stream may last for hours.
        let ended = opened.as_ref().map(|_| ("campaigning", 0));
        end_rpc(&self.metrics, &span, "Lead", None, started, ended);
        let (spec, place) = opened?;
        tracing::info!(parent: &span, identity = %spec.identity, "campaign started");
        let campaign = lead::Campaigning {
            engine: &self.engine,
            metrics: self.metrics.clone(),
            place,
            stop: self.stop.clone(),
        };
        Ok(Response::new(lead::start(spec, campaign)))
    }

    type TransactStream = TransactStream;

    async fn transact(
        &self,
        request: Request<Streaming<pb::TransactRequest>>,
    ) -> Result<Response<Self::TransactStream>, Status> {
        Reached::mark(request.extensions());
        let span = telemetry::rpc_span("Transact", request.metadata());
        let started = std::time::Instant::now();
        let opened = async {
            let deadline = CallDeadline::of(request.extensions());
            let mut inbound = request.into_inner();
            // No place among the RPCs in flight until the caller has said what it wants:
            // a silent stream holds none, and is ended by the idle bound.
            let begin = transact::begin(&mut inbound, self.transact)
                .await
                .map_err(|status| (status, None))?;
            let subresource = if begin.status {
                Subresource::Status
            } else {
                Subresource::Main
            };
            let admission = self.admit().map_err(|status| (status, Some(subresource)))?;
            let parts = RequestParts {
                target: begin.target.as_ref(),
                mutation: None,
                preconditions: begin.preconditions.as_ref(),
                retry_policy: begin.retry_policy.as_ref(),
                options: begin.options.as_ref(),
            };
            let spec = validate_parts(parts, subresource, self.engine.config(), false)
                .map_err(|v| (respond::invalid_request(&v), Some(subresource)))?;
            record_target(&span, &spec.target);
            permit(&self.policy, &spec, Operation::Transact)
                .map_err(|status| (status, Some(subresource)))?;
            Ok::<_, (Status, Option<Subresource>)>((spec, inbound, deadline, admission))
        }
        .instrument(span.clone())
        .await;
        let (spec, inbound, deadline, admission) = match opened {
            Ok(opened) => opened,
            Err((status, subresource)) => {
                finish_rpc(
                    &self.metrics,
                    &span,
                    "Transact",
                    subresource,
                    started,
                    Err(&status),
                );
                return Err(status);
            }
        };
        let stream = transact::run(
            self.engine.clone(),
            spec,
            inbound,
            deadline,
            self.transact,
            admission,
            RpcSpan { span, started },
        );
        Ok(Response::new(Box::pin(stream)))
    }
}
