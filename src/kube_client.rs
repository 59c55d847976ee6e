//! Finding the API server and building the kube client, the way Kubernetes tools do:
//! an explicit kubeconfig, else `$KUBECONFIG` / `~/.kube/config`, else the in-cluster
//! service account. Nothing here talks to the API server, so the sidecar can start while
//! the server is unreachable.

use std::path::PathBuf;

use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

use crate::config::ServeArgs;

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

/// Builds the client described by the serve flags.
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
    Client::try_from(config).map_err(ConnectError::Client)
}
