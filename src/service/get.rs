//! rpc Get: an object read at least as new as a resourceVersion the caller names, from
//! the sidecar's remembered copy or with one GET (see `WriterService.Get` in the proto).

use tonic::{Request, Response, Status};
use tracing::Instrument as _;

use safewrite_api::deadline::CallDeadline;
use safewrite_api::pb;
use safewrite_engine::Subresource;

use super::edge::Reached;
use super::policy::Operation;
use super::rpc::permit;
use super::{RequestParts, WriterService, end_rpc, record_target, respond, send, validate_parts};
use crate::telemetry;

// === impl WriterService ===

impl WriterService {
    /// rpc Get: reads an object at least as new as the caller's minimum.
    pub(super) async fn read(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let (metadata, extensions, body) = request.into_parts();
        Reached::mark(&extensions);
        let deadline = CallDeadline::of(&extensions);
        let span = telemetry::rpc_span("Get", &metadata);
        let started = std::time::Instant::now();
        let result = async {
            let _admission = self.admit()?;
            if body.target.is_none() {
                let required = safewrite_api::target::FieldViolation::new(
                    "target",
                    "required: the object to read (api_version, kind, namespace, name)",
                );
                return Err(respond::invalid_request(&required));
            }
            let parts = RequestParts {
                target: body.target.as_ref(),
                mutation: None,
                preconditions: None,
                retry_policy: None,
                options: None,
            };
            let spec = validate_parts(parts, Subresource::Main, self.engine.config(), false)
                .map_err(|v| respond::invalid_request(&v))?;
            let min = match body.min_resource_version.as_str() {
                "" => None,
                given => Some(
                    safewrite_api::target::opaque("min_resource_version", given)
                        .map_err(|v| respond::invalid_request(&v))?,
                ),
            };
            record_target(&span, &spec.target);
            permit(&self.policy, &spec, Operation::Get)?;
            let got = self
                .engine
                .get(&spec, min.as_deref(), deadline)
                .await
                .map_err(|err| respond::read_to_status(&err))?;
            let share = self
                .sending
                .share(
                    safewrite_engine::json_len(&got.object),
                    deadline.answer_by().instant(),
                )
                .await;
            let answer = pb::GetResponse {
                resource_version: safewrite_engine::resource_version(&got.object),
                object_json: got.object.to_string(),
                remembered: got.remembered,
                trace_id: telemetry::trace_id(&span),
            };
            Ok((answer, share))
        }
        .instrument(span.clone())
        .await;
        let ended = result.as_ref().map(|(got, _)| {
            let outcome = if got.remembered { "remembered" } else { "read" };
            (outcome, u32::from(!got.remembered))
        });
        end_rpc(
            &self.metrics,
            &span,
            "Get",
            Some(Subresource::Main),
            started,
            ended,
        );
        result.map(|(answer, share)| send::answer(answer, share))
    }
}
