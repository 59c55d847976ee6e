//! The gRPC server: the `safewrite.v1.WriterService` service, `grpc.health.v1` and server
//! reflection, on a loopback TCP address and optionally a unix socket (its mode and group
//! set before it accepts a connection), with readiness tracking and two-stage graceful
//! shutdown. Connections are bounded by `listen` (cap, handshake and idle timeouts,
//! accept backoff) and HTTP/2 and TCP keepalive; calls without the shared token and what
//! tonic refuses before a handler runs are answered by `edge`. Every validated write is
//! checked against the `policy` before anything is sent.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use std::sync::Arc;
use tokio::net::TcpListener;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::{TcpConnectInfo, TcpIncoming, UdsConnectInfo};
use tonic::{Request, Response, Status, Streaming};
use tonic_health::ServingStatus;
use tonic_types::StatusExt as _;
use tower::layer::util::{Identity, Stack};
use tracing::{Instrument as _, Span, info, warn};

use crate::auth::{Token, TokenError};
use crate::backoff::Backoff;
use crate::client::readiness;
use crate::client::{self as kube_client, ConnectError};
use crate::config::{MetricsListen, ServeArgs};
use crate::edge::{Edge, Reached};
use crate::engine::{self, Engine, EngineConfig, Subresource, Written};
use crate::listen::{self, Limits, Pool, TrackLayer};
use crate::metrics;
use crate::pb;
use crate::pb::writer_service_server::WriterServiceServer;
use crate::policy::{Operation, Policy, PolicyError};
use crate::receive::{self, ReceiveLayer};
use crate::respond;
use crate::shutdown::Signals;
use crate::startup;
use crate::telemetry;
use crate::transact;
use crate::unix_socket::{self, SocketError};

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
    /// The unix socket could not be bound, is in use, or could not get its mode or group.
    #[error(transparent)]
    UnixSocket(#[from] SocketError),
    /// The policy (`--policy`) could not be loaded.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The token file (`--token-file`) could not be used.
    #[error(transparent)]
    Token(#[from] TokenError),
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
    transact: transact::Limits,
    policy: Arc<Policy>,
}

type TransactStream = Pin<Box<dyn Stream<Item = Result<pb::TransactResponse, Status>> + Send>>;

impl WriterService {
    /// A service that runs at most `max_in_flight` RPCs at once, holds transactions'
    /// callers to `transact`, and writes only what `policy` allows.
    pub fn new(
        engine: Engine,
        max_in_flight: usize,
        transact: transact::Limits,
        policy: Policy,
    ) -> Self {
        Self {
            engine,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            transact,
            policy: Arc::new(policy),
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

    /// Runs a unary RPC in its span: validates the request, checks it against the
    /// policy, runs the engine, maps the result, and records the RPC in its span and the
    /// metrics.
    async fn run(
        &self,
        method: &'static str,
        metadata: &tonic::metadata::MetadataMap,
        parts: RequestParts<'_>,
        subresource: Subresource,
        operation: Operation,
    ) -> Result<pb::WriteResult, Status> {
        let span = telemetry::rpc_span(method, metadata);
        let started = std::time::Instant::now();
        let result = async {
            let _admission = self.admit()?;
            let spec = validate(parts, subresource, self.engine.config())
                .map_err(|v| respond::invalid_request(&v))?;
            record_target(&span, &spec.target);
            self.permit(&spec, operation)?;
            let deadline = grpc_timeout(metadata).map(|t| tokio::time::Instant::now() + t);
            self.engine
                .write(&spec, deadline)
                .await
                .map(|written| write_result(written, &span))
                .map_err(|err| respond::to_status(&err))
        }
        .instrument(span.clone())
        .await;
        finish_rpc(&span, method, Some(subresource), started, result.as_ref());
        result
    }

    /// Whether the policy allows `operation` of the validated write; PERMISSION_DENIED
    /// (reason `POLICY_DENIED`) before anything is sent when it does not.
    fn permit(&self, spec: &engine::WriteSpec, operation: Operation) -> Result<(), Status> {
        self.policy.check(spec, operation).map_err(|denied| {
            tracing::debug!(
                operation = denied.operation.name(),
                kind = %denied.kind,
                rule = %denied.rule,
                "write denied by the policy"
            );
            respond::policy_denied(&denied)
        })
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
        outcome: respond::outcome(written.outcome) as i32,
        object_json: written.object.to_string(),
        resource_version: written.resource_version,
        attempts: written.attempts.len() as u32,
        attempt_records: respond::records(&written.attempts),
        trace_id: telemetry::trace_id(span),
        already_applied: written.already_applied,
    }
}

/// A short lowercase name of a result's outcome, for spans and metrics.
/// The names are the engine's ([`engine::Outcome::name`]).
pub fn outcome_name(outcome: pb::Outcome, already_applied: bool) -> &'static str {
    let outcome = match outcome {
        pb::Outcome::Updated => engine::Outcome::Updated,
        pb::Outcome::Unchanged => engine::Outcome::Unchanged,
        pb::Outcome::Created => engine::Outcome::Created,
        pb::Outcome::Aborted => engine::Outcome::Aborted,
        pb::Outcome::Unspecified => return "unspecified",
    };
    outcome.name(already_applied)
}

/// Records the target's identity (never its contents) on the RPC span. Only a validated
/// target is recorded: a caller's raw strings never reach spans or logs.
pub fn record_target(span: &Span, target: &crate::target::Target) {
    if !target.namespace.is_empty() {
        span.record("k8s.namespace.name", &*target.namespace);
    }
    span.record("safewrite.target.api_version", &*target.api_version);
    span.record("safewrite.target.kind", &*target.kind);
    span.record("safewrite.target.name", &*target.name);
}

/// The metrics label of a subresource; `unknown` before the request named one.
pub fn subresource_label(subresource: Option<Subresource>) -> &'static str {
    match subresource {
        Some(Subresource::Main) => "main",
        Some(Subresource::Status) => "status",
        None => "unknown",
    }
}

/// Records a finished RPC on `subresource` (when it is known): its code, outcome and
/// attempts on its span, and in the metrics.
pub fn finish_rpc(
    span: &Span,
    method: &'static str,
    subresource: Option<Subresource>,
    started: std::time::Instant,
    result: Result<&pb::WriteResult, &Status>,
) {
    let metrics = metrics::get();
    let subresource = subresource_label(subresource);
    let (code, reason, attempts) = match result {
        Ok(result) => {
            let outcome = outcome_name(result.outcome(), result.already_applied);
            span.record("safewrite.outcome", outcome);
            span.record("safewrite.already_applied", result.already_applied);
            metrics.outcome(outcome, subresource);
            telemetry::record_rpc_end(span, tonic::Code::Ok, None);
            (tonic::Code::Ok, None, result.attempts)
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
            (status.code(), info.map(|i| i.reason), attempts)
        }
    };
    span.record("safewrite.attempts", i64::from(attempts));
    metrics.rpc_done(
        method,
        subresource,
        code,
        reason.as_deref(),
        attempts,
        started.elapsed(),
    );
}

pub use crate::validate::{RequestParts, validate, validate_parts};

/// The caller's deadline from the `grpc-timeout` header (e.g. "1500m" = 1.5 s).
pub fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    grpc_timeout_of(metadata.as_ref())
}

/// [`grpc_timeout`] of a request's HTTP headers.
pub fn grpc_timeout_of(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
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
        let (metadata, extensions, body) = request.into_parts();
        Reached::mark(&extensions);
        let parts = RequestParts {
            target: body.target.as_ref(),
            mutation: body.mutation.as_ref(),
            preconditions: body.preconditions.as_ref(),
            retry_policy: body.retry_policy.as_ref(),
            options: body.options.as_ref(),
        };
        let result = self
            .run(
                "UpdateWithRetry",
                &metadata,
                parts,
                Subresource::Main,
                Operation::Update,
            )
            .await?;
        Ok(Response::new(pb::UpdateWithRetryResponse {
            result: Some(result),
        }))
    }

    async fn patch_status(
        &self,
        request: Request<pb::PatchStatusRequest>,
    ) -> Result<Response<pb::PatchStatusResponse>, Status> {
        let (metadata, extensions, body) = request.into_parts();
        Reached::mark(&extensions);
        let parts = RequestParts {
            target: body.target.as_ref(),
            mutation: body.mutation.as_ref(),
            preconditions: body.preconditions.as_ref(),
            retry_policy: body.retry_policy.as_ref(),
            options: body.options.as_ref(),
        };
        let result = self
            .run(
                "PatchStatus",
                &metadata,
                parts,
                Subresource::Status,
                Operation::PatchStatus,
            )
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
        Reached::mark(request.extensions());
        let span = telemetry::rpc_span("Transact", request.metadata());
        let started = std::time::Instant::now();
        let opened = async {
            let deadline =
                grpc_timeout(request.metadata()).map(|t| tokio::time::Instant::now() + t);
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
            self.permit(&spec, Operation::Transact)
                .map_err(|status| (status, Some(subresource)))?;
            Ok::<_, (Status, Option<Subresource>)>((spec, inbound, deadline, admission))
        }
        .instrument(span.clone())
        .await;
        let (spec, inbound, deadline, admission) = match opened {
            Ok(opened) => opened,
            Err((status, subresource)) => {
                finish_rpc(&span, "Transact", subresource, started, Err(&status));
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
    let policy = Policy::load(&args.allow, args.policy.as_deref())?;
    let token = args.token_file.as_deref().map(Token::load).transpose()?;
    let socket_group = args
        .unix_socket_group
        .as_deref()
        .map(unix_socket::resolve_group)
        .transpose()?;
    let client = kube_client::connect(&args.client).await?;

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
        Some(path) => Some((
            unix_socket::bind(path, args.unix_socket_mode, socket_group).await?,
            path.clone(),
        )),
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

    // Configuration that fails ends the process with one line; from here on it serves.
    startup::log(&args, &policy, token.as_ref()).await;

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
        Engine::new(client, engine_config(&args)),
        args.max_in_flight as usize,
        transact::Limits {
            idle: args.transact_idle_timeout,
            max_request_bytes: args.max_request_bytes as usize,
        },
        policy,
    );
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
    let max_request_bytes = args.max_request_bytes as usize;
    let routes = Routes::new(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(Edge::new(
            WriterServiceServer::new(writer).max_decoding_message_size(max_request_bytes),
            max_request_bytes,
            token.clone(),
        ))
        .prepare();
    if let Some(token) = token {
        tokio::spawn(token.reload(stop_rx.clone()));
    }

    // One budget for the request bytes in flight on both gRPC listeners.
    let receiving = receive::Budget::new(args.max_receiving_bytes as usize, args.receive_timeout);
    // One pool for the gRPC listeners (TCP and unix socket), one for /metrics.
    let (grpc_limits, metrics_limits) = connection_limits(&args);
    let grpc = Pool::new("grpc", grpc_limits);
    // The metrics address is logged first: a supervisor that waits for the gRPC address
    // then knows both.
    if let Some((listener, address)) = metrics_listener {
        let pool = Pool::new("metrics", metrics_limits);
        let health = tonic_health::server::HealthService::from_health_reporter(reporter.clone());
        tokio::spawn(metrics::serve(listener, pool, health, stop_rx.clone()));
        info!(%address, transport = "http", path = "/metrics", "metrics listening");
    }
    let mut servers = tokio::task::JoinSet::new();
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    servers.spawn(
        grpc_server::<TcpConnectInfo>(&args, &receiving).serve_with_incoming_shutdown(
            routes.clone(),
            grpc.incoming(
                // No Nagle: a unary RPC is one small write each way, and waiting for the
                // peer's delayed ACK would add ~40 ms to every call.
                TcpIncoming::from(tcp)
                    .with_nodelay(Some(true))
                    .with_keepalive(keepalive(&args)),
            ),
            stopped(stop_rx.clone()),
        ),
    );
    info!(address = %local, transport = "tcp", "listening");
    if let Some((listener, path)) = unix {
        servers.spawn(
            grpc_server::<UdsConnectInfo>(&args, &receiving).serve_with_incoming_shutdown(
                routes,
                grpc.incoming(UnixListenerStream::new(listener)),
                stopped(stop_rx.clone()),
            ),
        );
        info!(
            address = %path.display(),
            transport = "unix",
            mode = %args.unix_socket_mode,
            "listening"
        );
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

/// The engine's settings from the serve flags (also those of an in-process
/// `safewrite update`, which reads the same `SAFEWRITE_*` variables).
pub fn engine_config(args: &ServeArgs) -> EngineConfig {
    EngineConfig {
        max_attempts: args.max_attempts,
        backoff: Backoff {
            initial: args.initial_backoff,
            max: args.max_backoff,
        },
        request_timeout: args.client.request_timeout,
        field_manager: args.field_manager.clone(),
        retry_budget_percent: args.retry_budget_percent,
        retry_budget_min_per_second: args.retry_budget_min_per_second,
        group_commit: !args.no_group_commit,
        memory_bytes: if args.no_memory {
            0
        } else {
            args.memory_bytes as usize
        },
        remember_secrets: args.remember_secrets,
    }
}

/// The interval of HTTP/2 PINGs and TCP keepalive probes; none when set to zero.
fn keepalive(args: &ServeArgs) -> Option<Duration> {
    (!args.keepalive_interval.is_zero()).then_some(args.keepalive_interval)
}

/// A tonic server for connections whose info is `I`: HTTP/2 keepalive (a peer that does
/// not answer a PING within the timeout is dropped), a bound on the streams of one
/// connection (tonic would otherwise allow any number; it is above `--max-in-flight`, so
/// that callers past that are refused with RESOURCE_EXHAUSTED rather than queued unseen
/// in their HTTP/2 client), every request counted on its connection for the idle
/// timeout, and every request message metered against the receive budget while it
/// arrives (`crate::receive`).
fn grpc_server<I>(
    args: &ServeArgs,
    receiving: &receive::Budget,
) -> Server<Stack<ReceiveLayer, Stack<TrackLayer<I>, Identity>>> {
    Server::builder()
        .http2_keepalive_interval(keepalive(args))
        .http2_keepalive_timeout(Some(args.keepalive_timeout))
        .max_concurrent_streams(args.max_in_flight.saturating_mul(2).max(200))
        .layer(TrackLayer::new())
        .layer(ReceiveLayer(receiving.clone()))
}

/// The bounds of the gRPC and metrics connections.
fn connection_limits(args: &ServeArgs) -> (Limits, Limits) {
    let limits = |max_connections: u32, handshake_bytes| Limits {
        max_connections: max_connections as usize,
        handshake_timeout: args.handshake_timeout,
        idle_timeout: args.idle_timeout,
        handshake_bytes,
    };
    (
        limits(args.max_connections, listen::HTTP2_PREFACE_LEN),
        limits(args.metrics_max_connections, listen::FIRST_REQUEST),
    )
}
