//! Finding the API server and building the kube client, the way Kubernetes tools do:
//! an explicit kubeconfig, else `$KUBECONFIG` / `~/.kube/config`, else the in-cluster
//! service account. Nothing here talks to the API server, so the sidecar can start while
//! the server is unreachable.

use std::path::PathBuf;

use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use std::num::NonZeroU32;

use kube::client::ClientBuilder;
use kube::{Client, Config};
use tower::buffer::BufferLayer;

use crate::breaker::{Breaker, BreakerConfig, CircuitBreakerLayer};
use crate::config::ServeArgs;
use crate::observe::ObserveLayer;
use crate::ratelimit::RateLimitLayer;

/// Why no client could be built. Each variant is a configuration problem: the sidecar
/// exits with it instead of retrying.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig named by `--kubeconfig` could not be read or parsed.
    #[error("failed to read kubeconfig {}", path.display())]
    ReadKubeconfig {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    /// The kubeconfig was read but names no usable cluster, user or context.
    #[error("failed to use kubeconfig {}", path.display())]
    UseKubeconfig {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    /// `--context` was given without `--kubeconfig`, and the default kubeconfig failed.
    #[error("failed to load context {context:?} from the default kubeconfig")]
    Context {
        context: String,
        #[source]
        source: KubeconfigError,
    },
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error(
        "failed to find the Kubernetes API server (pass --kubeconfig, set KUBECONFIG, or run in a pod with a service account)"
    )]
    Infer(#[source] InferConfigError),
    /// The configuration was found but a client could not be built from it (bad TLS data).
    #[error("failed to build the Kubernetes client")]
    Client(#[source] kube::Error),
}

/// Builds the client described by the serve flags: kube's default HTTP stack behind the
/// circuit breaker, behind the shared rate limit.
pub async fn connect(args: &ServeArgs) -> Result<Client, ConnectError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ConnectError::ReadKubeconfig {
                    path: path.clone(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|source| ConnectError::UseKubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        (None, Some(context)) => {
            Config::from_kubeconfig(&options)
                .await
                .map_err(|source| ConnectError::Context {
                    context: context.clone(),
                    source,
                })?
        }
        (None, None) => Config::infer().await.map_err(ConnectError::Infer)?,
    };
    // kube retries 429/503/504 itself by default, below everything here: hidden from
    // classification, attempt records, the rate limit, the breaker and the retry budget,
    // and never bounded by the caller's deadline. safewrite owns retries.
    let mut config = config;
    config.default_retry = false;
    let qps = NonZeroU32::new(args.qps).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(args.burst).unwrap_or(NonZeroU32::MIN);
    Ok(ClientBuilder::try_from(config)
        .map_err(ConnectError::Client)?
        // kube's stack is a boxed service; a buffer makes it cloneable for the limiter.
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&CircuitBreakerLayer::new(Breaker::new(BreakerConfig {
            failures: args.breaker_failures,
            cooldown: args.breaker_cooldown,
            max_cooldown: args.breaker_max_cooldown.max(args.breaker_cooldown),
        })))
        // Under the rate limit: a request's span and latency exclude its wait for it.
        .with_layer(&ObserveLayer)
        .with_layer(&RateLimitLayer::new(qps, burst))
        .build())
}
