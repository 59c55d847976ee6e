//! The gRPC server: the `safewrite.v1.WriterService` service, `grpc.health.v1` and server
//! reflection, on a loopback TCP address and optionally a unix socket, with readiness
//! tracking and two-stage graceful shutdown.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio_stream::Stream;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::transport::Server;
use tonic::transport::server::Router;
use tonic::{Request, Response, Status, Streaming};
use tonic_health::ServingStatus;
use tracing::{info, warn};

use crate::config::ServeArgs;
use crate::kube_client::{self, ConnectError};
use crate::pb;
use crate::pb::writer_service_server::WriterServiceServer;
use crate::readiness;
use crate::shutdown::Signals;

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
    /// A listener failed while serving.
    #[error("failed to serve gRPC")]
    Transport(#[source] tonic::transport::Error),
}

/// The `safewrite.v1.WriterService` implementation.
#[derive(Clone)]
pub struct WriterService {
    #[allow(dead_code)] // used by the write engine
    client: kube::Client,
}

type TransactStream = Pin<Box<dyn Stream<Item = Result<pb::TransactResponse, Status>> + Send>>;

fn not_yet(rpc: &str) -> Status {
    Status::unimplemented(format!(
        "{rpc} is not implemented by this safewrite build yet; nothing was written"
    ))
}

#[tonic::async_trait]
impl pb::writer_service_server::WriterService for WriterService {
    async fn update_with_retry(
        &self,
        _request: Request<pb::UpdateWithRetryRequest>,
    ) -> Result<Response<pb::UpdateWithRetryResponse>, Status> {
        Err(not_yet("UpdateWithRetry"))
    }

    async fn patch_status(
        &self,
        _request: Request<pb::PatchStatusRequest>,
    ) -> Result<Response<pb::PatchStatusResponse>, Status> {
        Err(not_yet("PatchStatus"))
    }

    type TransactStream = TransactStream;

    async fn transact(
        &self,
        _request: Request<Streaming<pb::TransactRequest>>,
    ) -> Result<Response<Self::TransactStream>, Status> {
        Err(not_yet("Transact"))
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

    let (reporter, health) = tonic_health::server::health_reporter();
    readiness::set_all(&reporter, ServingStatus::NotServing).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(readiness::run(
        client.clone(),
        reporter.clone(),
        args.readiness_interval,
        stop_rx.clone(),
    ));

    let writer = WriterService { client };
    let router = || -> Result<Router, ServeError> {
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(ServeError::Reflection)?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()
            .map_err(ServeError::Reflection)?;
        Ok(Server::builder()
            .add_service(health.clone())
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(WriterServiceServer::new(writer.clone())))
    };

    let mut servers = tokio::task::JoinSet::new();
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    servers.spawn(
        router()?
            .serve_with_incoming_shutdown(TcpListenerStream::new(tcp), stopped(stop_rx.clone())),
    );
    info!(address = %local, transport = "tcp", "listening");
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
