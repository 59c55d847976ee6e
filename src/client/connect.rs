//! Finding the API server and building the client, the way Kubernetes tools do: an
//! explicit kubeconfig, else `$KUBECONFIG` / `~/.kube/config`, else the in-cluster
//! service account. Nothing here talks to the API server, so the sidecar can start while
//! the server is unreachable.

use std::num::NonZeroU32;
use std::path::PathBuf;

use kube::Config;
use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};

use super::StackConfig;
use super::breaker::BreakerConfig;
use crate::config::ServeArgs;

/// The rate limit when `--qps` is not given (client-go's is 5; a sidecar serves many).
pub const DEFAULT_QPS: u32 = 100;
/// The burst when `--burst` is not given.
pub const DEFAULT_BURST: u32 = 200;

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
    /// The configuration was found but a client could not be built from it (bad TLS data,
    /// unusable credentials).
    #[error("failed to build the Kubernetes client")]
    Client(#[source] kube::Error),
    /// The TLS server name of the configuration is not a valid DNS name or IP address.
    #[error("failed to use tls-server-name {0:?}: not a DNS name or IP address")]
    ServerName(String),
    /// The configuration names a proxy (`proxy-url`), which safewrite does not support.
    #[error(
        "the kubeconfig names a proxy ({0}); safewrite connects to the API server directly: remove proxy-url"
    )]
    Proxy(String),
}

/// Builds the client described by the serve flags over the stack of [`super`].
///
/// # Errors
/// A [`ConnectError`] for a kubeconfig that cannot be found, read or used.
pub async fn connect(args: &ServeArgs) -> Result<kube::Client, ConnectError> {
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
    // kube's own stack (and its retries of 429/503/504) is not used: safewrite owns
    // retries, and its stack is built in `super::build`.
    super::build(
        config,
        StackConfig {
            qps: NonZeroU32::new(args.qps.unwrap_or(DEFAULT_QPS)).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(args.burst.unwrap_or(DEFAULT_BURST)).unwrap_or(NonZeroU32::MIN),
            server_paces: args.qps.is_none() && args.burst.is_none(),
            breaker: BreakerConfig {
                failures: args.breaker_failures,
                cooldown: args.breaker_cooldown,
                max_cooldown: args.breaker_max_cooldown.max(args.breaker_cooldown),
            },
            request_timeout: args.request_timeout,
        },
    )
}
