//! Why no client could be built: a leaf of `client/`, read by `connect` (the
//! configuration) and `transport` (its TLS and proxy settings).

use std::path::PathBuf;

use kube::config::{InferConfigError, KubeconfigError};

/// Why no client could be built. Each variant is a configuration problem: the sidecar
/// exits with it instead of retrying.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig named by `--kubeconfig` could not be read or parsed.
    #[error("failed to read kubeconfig {}", path.display())]
    ReadKubeconfig {
        /// The kubeconfig's path.
        path: PathBuf,
        /// Why it could not be read or parsed.
        #[source]
        source: KubeconfigError,
    },
    /// The kubeconfig was read but names no usable cluster, user or context.
    #[error("failed to use kubeconfig {}", path.display())]
    UseKubeconfig {
        /// The kubeconfig's path.
        path: PathBuf,
        /// What in it could not be used.
        #[source]
        source: KubeconfigError,
    },
    /// `--context` was given without `--kubeconfig`, and the default kubeconfig failed.
    #[error("failed to load context {context:?} from the default kubeconfig")]
    Context {
        /// The context `--context` named.
        context: String,
        /// Why the default kubeconfig failed.
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
