//! `safewrite serve`: everything built from the flags (the API-server client, the engine,
//! the policy, the token, the listeners) and run until a termination signal: the gRPC
//! server (`safewrite.v1.WriterService`, `grpc.health.v1` and server reflection) on a
//! loopback TCP address and optionally a unix socket (its mode and group set before it
//! accepts a connection), with readiness tracking and two-stage graceful shutdown.
//! Connections are bounded by `listen` (cap, handshake and idle timeouts, accept backoff)
//! and HTTP/2 and TCP keepalive.
//!
//! Its parts: `config` (the flags of `safewrite serve`), `startup` (what is logged and
//! checked before serving), `unix_socket` (the socket's mode and group) and `shutdown`
//! (the signals).

pub mod config;
pub mod shutdown;
pub mod startup;
pub mod unix_socket;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use config::{MetricsListen, ServeArgs};
use shutdown::Signals;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::{TcpConnectInfo, TcpIncoming, UdsConnectInfo};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tower::layer::util::{Identity, Stack};
use tracing::{info, warn};
use unix_socket::SocketError;

use safewrite_api::backoff::Backoff;
use safewrite_api::pb;
use safewrite_api::pb::writer_service_server::WriterServiceServer;
use safewrite_client::ConnectError;
use safewrite_client::readiness;
use safewrite_engine::{Engine, EngineConfig};

use crate::auth::{Token, TokenError};
use crate::listen::{self, ConnectionLimits, Pool, TrackLayer};
use crate::metrics::{self, Metrics};
use crate::service::WriterService;
use crate::service::edge::Edge;
use crate::service::policy::{AllowList, PolicyError};
use crate::service::receive::{self, ReceiveLayer};
use crate::service::send::{self, SendLayer};
use crate::service::transact;

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
        /// The address given with `--listen`.
        addr: SocketAddr,
        /// Why it could not be bound.
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
        /// The address given with `--metrics-listen`.
        addr: SocketAddr,
        /// Why it could not be bound.
        #[source]
        source: io::Error,
    },
    /// A listener failed while serving.
    #[error("failed to serve gRPC")]
    Transport(#[source] tonic::transport::Error),
}

/// Configuration problems (kubeconfig, listen address, unix socket) before serving; a
/// transport failure while serving.
pub async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let mut signals = Signals::new().map_err(ServeError::Signals)?;
    let policy = AllowList::load(&args.allow, args.policy.as_deref())?;
    let token = args.token_file.as_deref().map(Token::load).transpose()?;
    let socket_group = args
        .unix_socket_group
        .as_deref()
        .map(unix_socket::resolve_group)
        .transpose()?;
    let metrics = Arc::new(Metrics::new());
    let client = safewrite_client::connect(&args.client, metrics.client().clone()).await?;
    let listeners = Listeners::bind(&args, socket_group).await?;

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

    let engine = Engine::new(client, engine_config(&args), metrics.engine().clone());
    let served = Served {
        engine,
        policy,
        token: token.clone(),
        metrics: metrics.clone(),
    };
    let routes = grpc_routes(&args, served, Routes::new(health), stop_rx.clone())?;
    if let Some(token) = token {
        tokio::spawn(token.reload(stop_rx.clone()));
    }
    let servers = start_servers(&args, listeners, routes, &reporter, metrics, &stop_rx);
    drain(&args, &mut signals, servers, &reporter, stop_tx).await
}

/// The listeners of `safewrite serve`, bound before it logs its settings.
struct Listeners {
    tcp: TcpListener,
    /// The address `tcp` is bound to (the port chosen when `--listen` said 0).
    local: SocketAddr,
    unix: Option<(UnixListener, PathBuf)>,
    metrics: Option<(TcpListener, SocketAddr)>,
}

// === impl Listeners ===

impl Listeners {
    /// Binds `--listen`, `--unix-socket` (with its mode and `group`) and
    /// `--metrics-listen`.
    async fn bind(args: &ServeArgs, group: Option<u32>) -> Result<Listeners, ServeError> {
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
                unix_socket::bind(path, args.unix_socket_mode, group).await?,
                path.clone(),
            )),
            None => None,
        };
        let metrics = match args.metrics_listen {
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
        Ok(Listeners {
            tcp,
            local,
            unix,
            metrics,
        })
    }
}

/// What the writer service is built from.
struct Served {
    engine: Engine,
    policy: AllowList,
    /// The shared token calls must carry, if one was given.
    token: Option<Token>,
    metrics: Arc<Metrics>,
}

/// The gRPC services added to `routes` (which holds grpc.health.v1): the writer
/// service behind its edge (the token, refusals before a handler), whose Lead campaigns
/// end when `stop` turns true, and server reflection.
fn grpc_routes(
    args: &ServeArgs,
    served: Served,
    routes: Routes,
    stop: watch::Receiver<bool>,
) -> Result<Routes, ServeError> {
    let Served {
        engine,
        policy,
        token,
        metrics,
    } = served;
    let writer = WriterService::new(
        engine,
        args.max_in_flight as usize,
        transact::TransactLimits {
            idle: args.transact_idle_timeout,
            max_request_bytes: args.max_request_bytes as usize,
        },
        policy,
        send::SendingBudget::new(args.max_sending_bytes as usize, metrics.clone()),
        metrics.clone(),
    )
    .campaigning_at_most(args.max_campaigns as usize)
    .stopping_on(stop);
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
    Ok(routes
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(Edge::new(
            WriterServiceServer::new(writer).max_decoding_message_size(max_request_bytes),
            max_request_bytes,
            token,
            metrics,
        ))
        .prepare())
}

/// What serves: the gRPC servers on the TCP listener and the unix socket, and
/// `/metrics`; each logs its address once it is served (the metrics one first: a
/// supervisor that waits for the gRPC address then knows both).
fn start_servers(
    args: &ServeArgs,
    listeners: Listeners,
    routes: Routes,
    reporter: &HealthReporter,
    metrics: Arc<Metrics>,
    stop_rx: &watch::Receiver<bool>,
) -> JoinSet<Result<(), tonic::transport::Error>> {
    // One budget for the request bytes in flight on both gRPC listeners.
    let receiving =
        receive::ReceivingBudget::new(args.max_receiving_bytes as usize, args.receive_timeout);
    // One pool for the gRPC listeners (TCP and unix socket), one for /metrics.
    let (grpc_limits, metrics_limits) = connection_limits(args);
    let grpc = Pool::new("grpc", grpc_limits);
    if let Some((listener, address)) = listeners.metrics {
        let pool = Pool::new("metrics", metrics_limits);
        let health = tonic_health::server::HealthService::from_health_reporter(reporter.clone());
        tokio::spawn(metrics::serve(
            listener,
            pool,
            health,
            metrics,
            stop_rx.clone(),
        ));
        info!(%address, transport = "http", path = "/metrics", "metrics listening");
    }
    let mut servers = JoinSet::new();
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    servers.spawn(
        grpc_server::<TcpConnectInfo>(args, &receiving).serve_with_incoming_shutdown(
            routes.clone(),
            grpc.incoming(
                // No Nagle: a unary RPC is one small write each way, and waiting for the
                // peer's delayed ACK would add ~40 ms to every call.
                TcpIncoming::from(listeners.tcp)
                    .with_nodelay(Some(true))
                    .with_keepalive(keepalive(args)),
            ),
            stopped(stop_rx.clone()),
        ),
    );
    info!(address = %listeners.local, transport = "tcp", "listening");
    if let Some((listener, path)) = listeners.unix {
        servers.spawn(
            grpc_server::<UdsConnectInfo>(args, &receiving).serve_with_incoming_shutdown(
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
    servers
}

/// Serves until a signal, or until a listener fails on its own; then reports not
/// serving, stops the listeners and drains in-flight RPCs within `--shutdown-grace` (a
/// second signal cuts them off). The error of a listener that failed first is returned.
async fn drain(
    args: &ServeArgs,
    signals: &mut Signals,
    mut servers: JoinSet<Result<(), tonic::transport::Error>>,
    reporter: &HealthReporter,
    stop_tx: watch::Sender<bool>,
) -> Result<(), ServeError> {
    let early = tokio::select! {
        name = signals.recv() => {
            info!(signal = name, grace = ?args.shutdown_grace, "draining in-flight RPCs");
            None
        }
        Some(result) = servers.join_next() => Some(result),
    };
    readiness::set_all(reporter, ServingStatus::NotServing).await;
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

/// The layers of [`grpc_server`], from the routes out: answers in pieces within the
/// send budget, requests metered against the receive budget, requests counted on their
/// connection.
type GrpcLayers<I> = Stack<SendLayer, Stack<ReceiveLayer, Stack<TrackLayer<I>, Identity>>>;

/// A tonic server for connections whose info is `I`: HTTP/2 keepalive (a peer that does
/// not answer a PING within the timeout is dropped), a bound on the streams of one
/// connection (tonic would otherwise allow any number; it is above `--max-in-flight`, so
/// that callers past that are refused with RESOURCE_EXHAUSTED rather than queued unseen
/// in their HTTP/2 client), every request counted on its connection for the idle
/// timeout, every request message metered against the receive budget while it arrives
/// (`crate::service::receive`), and large answers sent in pieces while they hold their
/// share of the send budget (`crate::service::send`).
fn grpc_server<I>(args: &ServeArgs, receiving: &receive::ReceivingBudget) -> Server<GrpcLayers<I>> {
    Server::builder()
        .http2_keepalive_interval(keepalive(args))
        .http2_keepalive_timeout(Some(args.keepalive_timeout))
        .max_concurrent_streams(args.max_in_flight.saturating_mul(2).max(200))
        .layer(TrackLayer::new())
        .layer(ReceiveLayer(receiving.clone()))
        .layer(SendLayer)
}

/// The bounds of the gRPC and metrics connections.
fn connection_limits(args: &ServeArgs) -> (ConnectionLimits, ConnectionLimits) {
    let limits = |max_connections: u32, handshake_bytes| ConnectionLimits {
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
