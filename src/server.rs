//! The gRPC server: the `safewrite.v1.WriterService` service, `grpc.health.v1` and server
//! reflection, on a loopback TCP address and optionally a unix socket, with readiness
//! tracking and two-stage graceful shutdown.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;

use std::sync::Arc;
use tokio::net::{TcpListener, UnixListener};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::transport::server::{Router, TcpIncoming};
use tonic::{Request, Response, Status, Streaming};
use tonic_health::ServingStatus;
use tonic_types::StatusExt as _;
use tracing::{Instrument as _, Span, info, warn};

use crate::backoff::Backoff;
use crate::config::{MetricsListen, ServeArgs};
use crate::engine::{
    self, Engine, EngineConfig, Policy, Preconditions, Subresource, Target, WriteSpec, Written,
};
use crate::idempotency;
use crate::kube_client::{self, ConnectError};
use crate::metrics;
use crate::mutation::{self, Cel, FieldViolation, Mutation};
use crate::pb;
use crate::pb::writer_service_server::WriterServiceServer;
use crate::readiness;
use crate::respond;
use crate::shutdown::Signals;
use crate::telemetry;
use crate::transact;

/// Why the server could not start or stopped with an error. Each is a configuration or
/// environment problem reported in one line by `main`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No Kubernetes client could be configured.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The TCP address could not be bound (in use, not local, no permission).
    #[error("failed to listen on {addr} (choose another address with --listen)")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The unix socket could not be bound.
    #[error("failed to listen on unix socket {}", path.display())]
    UnixSocket {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The path given for the unix socket is served by another live process.
    #[error("unix socket {} is in use by another process", path.display())]
    UnixSocketInUse { path: PathBuf },
    /// Signal handlers could not be installed.
    #[error("failed to install signal handlers")]
    Signals(#[source] io::Error),
    /// The reflection service could not be built from the embedded descriptors.
    #[error("failed to build the reflection service")]
    Reflection(#[source] tonic_reflection::server::Error),
    /// The metrics address could not be bound.
    #[error(
        "failed to listen for metrics on {addr} (choose another address with --metrics-listen, or off)"
    )]
    MetricsListen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// A listener failed while serving.
    #[error("failed to serve gRPC")]
    Transport(#[source] tonic::transport::Error),
}

/// The `safewrite.v1.WriterService` implementation.
#[derive(Clone)]
pub struct WriterService {
    engine: Engine,
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
}

type TransactStream = Pin<Box<dyn Stream<Item = Result<pb::TransactResponse, Status>> + Send>>;

impl WriterService {
    /// A service that runs at most `max_in_flight` RPCs at once.
    pub fn new(engine: Engine, max_in_flight: usize) -> Self {
        Self {
            engine,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
        }
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
            _gauge: metrics::get().in_flight(),
        })
    }

    /// Runs a unary RPC in its span: validates the request, runs the engine, maps the
    /// result, and records the RPC in its span and the metrics.
    async fn run(
        &self,
        method: &'static str,
        metadata: &tonic::metadata::MetadataMap,
        parts: RequestParts<'_>,
        subresource: Subresource,
    ) -> Result<pb::WriteResult, Status> {
        let span = telemetry::rpc_span(method, metadata);
        record_target(&span, parts.target);
        let started = std::time::Instant::now();
        let result = async {
            let _admission = self.admit()?;
            let spec = validate(parts, subresource, self.engine.config())
                .map_err(|v| respond::invalid_request(&v))?;
            let deadline = grpc_timeout(metadata).map(|t| tokio::time::Instant::now() + t);
            self.engine
                .write(&spec, deadline)
                .await
                .map(|written| write_result(written, &span))
                .map_err(|err| respond::to_status(&err))
        }
        .instrument(span.clone())
        .await;
        finish_rpc(&span, method, started, result.as_ref());
        result
    }
}

/// An RPC's place among those in flight; it is given back when dropped.
pub struct Admission {
    _permit: OwnedSemaphorePermit,
    _gauge: metrics::InFlight,
}

/// The result message of a finished write.
pub fn write_result(written: Written, span: &Span) -> pb::WriteResult {
    pb::WriteResult {
        outcome: written.outcome as i32,
        object_json: written.object.to_string(),
        resource_version: written.resource_version,
        attempts: written.attempts.len() as u32,
        attempt_records: written.attempts,
        trace_id: telemetry::trace_id(span),
        already_applied: written.already_applied,
    }
}

/// Records the target's identity (never its contents) on the RPC span.
pub fn record_target(span: &Span, target: Option<&pb::ObjectRef>) {
    if let Some(target) = target {
        if !target.namespace.is_empty() {
            span.record("k8s.namespace.name", target.namespace.as_str());
        }
        span.record("safewrite.target.api_version", target.api_version.as_str());
        span.record("safewrite.target.kind", target.kind.as_str());
        span.record("safewrite.target.name", target.name.as_str());
    }
}

/// Records a finished RPC: its code, outcome and attempts on its span, and in the
/// metrics.
pub fn finish_rpc(
    span: &Span,
    method: &'static str,
    started: std::time::Instant,
    result: Result<&pb::WriteResult, &Status>,
) {
    let metrics = metrics::get();
    let (code, attempts) = match result {
        Ok(result) => {
            let outcome = engine::outcome_name(result.outcome(), result.already_applied);
            span.record("safewrite.outcome", outcome);
            span.record("safewrite.already_applied", result.already_applied);
            metrics.outcome(outcome);
            telemetry::record_rpc_end(span, tonic::Code::Ok, None);
            (tonic::Code::Ok, result.attempts)
        }
        Err(status) => {
            let info = status.get_details_error_info();
            let attempts = info
                .as_ref()
                .and_then(|i| i.metadata.get("attempts"))
                .and_then(|a| a.parse().ok())
                .unwrap_or(0);
            telemetry::record_rpc_end(
                span,
                status.code(),
                info.as_ref().map(|i| i.reason.as_str()),
            );
            (status.code(), attempts)
        }
    };
    span.record("safewrite.attempts", i64::from(attempts));
    metrics.rpc_done(method, code, attempts, started.elapsed());
}

/// The fields every write request has.
pub struct RequestParts<'a> {
    pub target: Option<&'a pb::ObjectRef>,
    pub mutation: Option<&'a pb::Mutation>,
    pub preconditions: Option<&'a pb::Preconditions>,
    pub retry_policy: Option<&'a pb::RetryPolicy>,
    pub options: Option<&'a pb::WriteOptions>,
}

/// Checks a request and compiles it into a `WriteSpec`. Everything that can be known to
/// be wrong without the API server is refused here, naming the field.
pub fn validate(
    parts: RequestParts<'_>,
    subresource: Subresource,
    config: &EngineConfig,
) -> Result<WriteSpec, FieldViolation> {
    validate_parts(parts, subresource, config, true)
}

/// `validate`, with the mutation optional when `require_mutation` is false (Transact,
/// where the caller's code supplies each change).
pub fn validate_parts(
    parts: RequestParts<'_>,
    subresource: Subresource,
    config: &EngineConfig,
    require_mutation: bool,
) -> Result<WriteSpec, FieldViolation> {
    let target = parts
        .target
        .ok_or_else(|| FieldViolation::new("target", "required: the object to write"))?;
    for (field, value) in [
        ("target.api_version", &target.api_version),
        ("target.kind", &target.kind),
        ("target.name", &target.name),
    ] {
        if value.trim().is_empty() {
            return Err(FieldViolation::new(field, "required"));
        }
    }
    let target = Target {
        api_version: target.api_version.clone(),
        kind: target.kind.clone(),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
    };
    let mut mutation = match parts.mutation {
        None if !require_mutation => None,
        given => Some(Mutation::from_proto("mutation", given)?),
    };
    if let Some(Mutation::Apply { configuration, .. }) = &mut mutation {
        fill_identity("mutation.apply.configuration_json", configuration, &target)?;
    }

    let pre = parts.preconditions.cloned().unwrap_or_default();
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    let preconditions = Preconditions {
        uid: non_empty(pre.uid),
        resource_version: non_empty(pre.resource_version),
        cel: match pre.cel.as_str() {
            "" => None,
            source => Some(Cel::compile("preconditions.cel", source)?),
        },
    };

    let policy = parts.retry_policy.cloned().unwrap_or_default();
    let duration = |field: &str, d: Option<prost_types::Duration>, default: Duration| match d {
        None => Ok(default),
        Some(d) => Duration::try_from(d)
            .map_err(|_| FieldViolation::new(field, "must be a non-negative duration")),
    };
    let max_attempts = match (policy.requeue, policy.max_attempts) {
        (true, _) => 1,
        (false, 0) => config.max_attempts,
        (false, n) if n > 1000 => {
            return Err(FieldViolation::new(
                "retry_policy.max_attempts",
                "at most 1000",
            ));
        }
        (false, n) => n,
    };
    let policy = Policy {
        max_attempts,
        backoff: Backoff {
            initial: duration(
                "retry_policy.initial_backoff",
                policy.initial_backoff,
                config.backoff.initial,
            )?,
            max: duration(
                "retry_policy.max_backoff",
                policy.max_backoff,
                config.backoff.max,
            )?,
        },
    };

    let options = parts.options.cloned().unwrap_or_default();
    let create_if_missing = match options.create_if_missing_json.as_str() {
        "" => None,
        _ if subresource == Subresource::Status => {
            return Err(FieldViolation::new(
                "options.create_if_missing_json",
                "PatchStatus cannot create: create the object with UpdateWithRetry first",
            ));
        }
        text => {
            let field = "options.create_if_missing_json";
            let mut object = mutation::parse_json(field, text)?;
            if !object.is_object() {
                return Err(FieldViolation::new(field, "must be a JSON object"));
            }
            fill_identity(field, &mut object, &target)?;
            Some(object)
        }
    };
    let idempotency_key = match options.idempotency_key.as_str() {
        "" => None,
        key => {
            let field = "options.idempotency_key";
            idempotency::validate(key, field)?;
            if subresource == Subresource::Status {
                return Err(FieldViolation::new(
                    field,
                    "not supported for the status subresource: a status write cannot record the key; leave it empty",
                ));
            }
            if matches!(mutation, Some(Mutation::Apply { .. })) {
                return Err(FieldViolation::new(
                    field,
                    "not needed with server-side apply, which is idempotent already; leave it empty",
                ));
            }
            Some(key.to_string())
        }
    };
    Ok(WriteSpec {
        target,
        subresource,
        mutation,
        preconditions,
        policy,
        field_manager: non_empty(options.field_manager)
            .unwrap_or_else(|| config.field_manager.clone()),
        dry_run: options.dry_run,
        create_if_missing,
        idempotency_key,
    })
}

/// Sets apiVersion, kind, metadata.name and metadata.namespace of `object` from the
/// target, refusing an object that names a different one.
fn fill_identity(field: &str, object: &mut Value, target: &Target) -> Result<(), FieldViolation> {
    let mut set = |path: &[&str], want: &str| -> Result<(), FieldViolation> {
        if want.is_empty() {
            return Ok(());
        }
        let mut node = &mut *object;
        for key in &path[..path.len() - 1] {
            node = node
                .as_object_mut()
                .ok_or_else(|| FieldViolation::new(field, "must be a JSON object"))?
                .entry(key.to_string())
                .or_insert_with(|| Value::Object(Default::default()));
        }
        let map = node
            .as_object_mut()
            .ok_or_else(|| FieldViolation::new(field, format!("{} must be an object", path[0])))?;
        let last = path[path.len() - 1];
        match map.get(last) {
            Some(Value::String(have)) if have != want => Err(FieldViolation::new(
                field,
                format!(
                    "{} is {have:?} but the target says {want:?}",
                    path.join(".")
                ),
            )),
            _ => {
                map.insert(last.to_string(), Value::String(want.to_string()));
                Ok(())
            }
        }
    };
    set(&["apiVersion"], &target.api_version)?;
    set(&["kind"], &target.kind)?;
    set(&["metadata", "name"], &target.name)?;
    set(&["metadata", "namespace"], &target.namespace)
}

/// The caller's deadline from the `grpc-timeout` header (e.g. "1500m" = 1.5 s).
pub fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl pb::writer_service_server::WriterService for WriterService {
    async fn update_with_retry(
        &self,
        request: Request<pb::UpdateWithRetryRequest>,
    ) -> Result<Response<pb::UpdateWithRetryResponse>, Status> {
        let (metadata, _, body) = request.into_parts();
        let parts = RequestParts {
            target: body.target.as_ref(),
            mutation: body.mutation.as_ref(),
            preconditions: body.preconditions.as_ref(),
            retry_policy: body.retry_policy.as_ref(),
            options: body.options.as_ref(),
        };
        let result = self
            .run("UpdateWithRetry", &metadata, parts, Subresource::Main)
            .await?;
        Ok(Response::new(pb::UpdateWithRetryResponse {
            result: Some(result),
        }))
    }

    async fn patch_status(
        &self,
        request: Request<pb::PatchStatusRequest>,
    ) -> Result<Response<pb::PatchStatusResponse>, Status> {
        let (metadata, _, body) = request.into_parts();
        let parts = RequestParts {
            target: body.target.as_ref(),
            mutation: body.mutation.as_ref(),
            preconditions: body.preconditions.as_ref(),
            retry_policy: body.retry_policy.as_ref(),
            options: body.options.as_ref(),
        };
        let result = self
            .run("PatchStatus", &metadata, parts, Subresource::Status)
            .await?;
        Ok(Response::new(pb::PatchStatusResponse {
            result: Some(result),
        }))
    }

    type TransactStream = TransactStream;

    async fn transact(
        &self,
        request: Request<Streaming<pb::TransactRequest>>,
    ) -> Result<Response<Self::TransactStream>, Status> {
        let span = telemetry::rpc_span("Transact", request.metadata());
        let started = std::time::Instant::now();
        let opened = async {
            let admission = self.admit()?;
            let deadline =
                grpc_timeout(request.metadata()).map(|t| tokio::time::Instant::now() + t);
            let mut inbound = request.into_inner();
            let begin = transact::begin(&mut inbound).await?;
            record_target(&span, begin.target.as_ref());
            let parts = RequestParts {
                target: begin.target.as_ref(),
                mutation: None,
                preconditions: begin.preconditions.as_ref(),
                retry_policy: begin.retry_policy.as_ref(),
                options: begin.options.as_ref(),
            };
            let subresource = if begin.status {
                Subresource::Status
            } else {
                Subresource::Main
            };
            let spec = validate_parts(parts, subresource, self.engine.config(), false)
                .map_err(|v| respond::invalid_request(&v))?;
            Ok::<_, Status>((spec, inbound, deadline, admission))
        }
        .instrument(span.clone())
        .await;
        let (spec, inbound, deadline, admission) = match opened {
            Ok(opened) => opened,
            Err(status) => {
                finish_rpc(&span, "Transact", started, Err(&status));
                return Err(status);
            }
        };
        let stream = transact::run(
            self.engine.clone(),
            spec,
            inbound,
            deadline,
            admission,
            (span, started),
        );
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Runs `safewrite serve` until a termination signal, then drains.
///
/// # Errors
/// Configuration problems (kubeconfig, listen address, unix socket) before serving; a
/// transport failure while serving.
pub async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let mut signals = Signals::new().map_err(ServeError::Signals)?;
    let client = kube_client::connect(&args).await?;

    let tcp = TcpListener::bind(args.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: args.listen,
            source,
        })?;
    let local = tcp.local_addr().map_err(|source| ServeError::Listen {
        addr: args.listen,
        source,
    })?;
    let unix = match &args.unix_socket {
        Some(path) => Some(bind_unix(path).await?),
        None => None,
    };

    let metrics_listener = match args.metrics_listen {
        MetricsListen::Off => None,
        MetricsListen::At(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::MetricsListen { addr, source })?;
            let local = listener
                .local_addr()
                .map_err(|source| ServeError::MetricsListen { addr, source })?;
            Some((listener, local))
        }
    };

    let (reporter, health) = tonic_health::server::health_reporter();
    readiness::set_all(&reporter, ServingStatus::NotServing).await;
    let readiness_client = client.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(readiness::run(
        readiness_client,
        reporter.clone(),
        args.readiness_interval,
        stop_rx.clone(),
    ));

    let writer = WriterService::new(
        Engine::new(
            client,
            EngineConfig {
                max_attempts: args.max_attempts,
                backoff: Backoff {
                    initial: args.initial_backoff,
                    max: args.max_backoff,
                },
                request_timeout: args.request_timeout,
                field_manager: args.field_manager.clone(),
                retry_budget_percent: args.retry_budget_percent,
                retry_budget_min_per_second: args.retry_budget_min_per_second,
            },
        ),
        args.max_in_flight as usize,
    );
    let router = || -> Result<Router, ServeError> {
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(ServeError::Reflection)?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()
            .map_err(ServeError::Reflection)?;
        Ok(Server::builder()
            .add_service(health.clone())
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(
                WriterServiceServer::new(writer.clone())
                    .max_decoding_message_size(args.max_request_bytes as usize),
            ))
    };

    let mut servers = tokio::task::JoinSet::new();
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    servers.spawn(router()?.serve_with_incoming_shutdown(
        // No Nagle: a unary RPC is one small write each way, and waiting for the
        // peer's delayed ACK would add ~40 ms to every call.
        TcpIncoming::from(tcp).with_nodelay(Some(true)),
        stopped(stop_rx.clone()),
    ));
    info!(address = %local, transport = "tcp", "listening");
    if let Some((listener, address)) = metrics_listener {
        tokio::spawn(metrics::serve(listener, stop_rx.clone()));
        info!(%address, transport = "http", path = "/metrics", "metrics listening");
    }
    if let Some((listener, path)) = unix {
        servers.spawn(router()?.serve_with_incoming_shutdown(
            UnixListenerStream::new(listener),
            stopped(stop_rx.clone()),
        ));
        info!(address = %path.display(), transport = "unix", "listening");
    }

    // Serve until a signal, or until a listener fails on its own.
    let early = tokio::select! {
        name = signals.recv() => {
            info!(signal = name, grace = ?args.shutdown_grace, "draining in-flight RPCs");
            None
        }
        Some(result) = servers.join_next() => Some(result),
    };
    readiness::set_all(&reporter, ServingStatus::NotServing).await;
    let _ = stop_tx.send(true);

    let mut outcome = Ok(());
    if let Some(Ok(Err(err))) = early {
        outcome = Err(ServeError::Transport(err));
    }
    let drain = async {
        while let Some(result) = servers.join_next().await {
            if let Ok(Err(err)) = result {
                warn!(error = %err, "listener failed while draining");
            }
        }
    };
    tokio::select! {
        _ = drain => info!("drained; exiting"),
        _ = tokio::time::sleep(args.shutdown_grace) => {
            warn!(grace = ?args.shutdown_grace, "grace period over; cutting off in-flight RPCs");
        }
        name = signals.recv() => warn!(signal = name, "second signal; cutting off in-flight RPCs"),
    }
    if let Some(path) = &args.unix_socket {
        let _ = std::fs::remove_file(path);
    }
    outcome
}

/// Binds a unix socket at `path`, replacing a stale socket file left by a process that
/// died, but never one a live process is serving.
async fn bind_unix(path: &Path) -> Result<(UnixListener, PathBuf), ServeError> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(ServeError::UnixSocketInUse {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(|source| ServeError::UnixSocket {
            path: path.to_path_buf(),
            source,
        })?;
    }
    let listener = UnixListener::bind(path).map_err(|source| ServeError::UnixSocket {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((listener, path.to_path_buf()))
}
