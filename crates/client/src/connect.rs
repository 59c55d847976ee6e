//! Finding the API server and building the client, the way Kubernetes tools do: an
//! explicit kubeconfig, else `$KUBECONFIG` / `~/.kube/config`, else the in-cluster
//! service account. Nothing here talks to the API server, so the sidecar can start while
//! the server is unreachable.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use kube::Config;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::breaker::BreakerConfig;
pub use super::error::ConnectError;
use super::handle::ApiClient;
use super::metrics::ClientMetrics;
use super::stack::{StackConfig, build};

/// The rate limit when `--qps` is not given (client-go's is 5; a sidecar serves many).
pub const DEFAULT_QPS: u32 = 100;
/// The burst when `--burst` is not given.
pub const DEFAULT_BURST: u32 = 200;

/// The options of the API-server client (`safewrite serve` and the in-process CLI).
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Kubeconfig file to use. Without it the API server is found the way Kubernetes
    /// tools find it: $KUBECONFIG, ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "SAFEWRITE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current context.
    #[arg(long, env = "SAFEWRITE_CONTEXT")]
    pub context: Option<String>,

    /// Requests per second to the API server, on average, shared by all callers (reads,
    /// writes, retries and discovery alike) [default: 100]. Unless --qps or --burst is
    /// given, the limit steps aside while the API server answers with API Priority and
    /// Fairness headers: its own 429s and Retry-After pace the sidecar then.
    #[arg(long, env = "SAFEWRITE_QPS", value_parser = clap::value_parser!(u32).range(1..))]
    pub qps: Option<u32>,

    /// Requests to the API server allowed at once above the average rate [default: 200].
    #[arg(long, env = "SAFEWRITE_BURST", value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: Option<u32>,

    /// Consecutive faults (transport errors, timeouts, 429, 5xx) that open the circuit
    /// breaker; while open, requests fail fast and nothing is sent.
    #[arg(long, env = "SAFEWRITE_BREAKER_FAILURES", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub breaker_failures: u32,

    /// How long the breaker stays open before one probe; doubled after a failed probe.
    #[arg(long, env = "SAFEWRITE_BREAKER_COOLDOWN", default_value = "1s", value_parser = humantime::parse_duration)]
    pub breaker_cooldown: Duration,

    /// The longest cool-down of the breaker.
    #[arg(long, env = "SAFEWRITE_BREAKER_MAX_COOLDOWN", default_value = "30s", value_parser = humantime::parse_duration)]
    pub breaker_max_cooldown: Duration,

    /// The longest any single request to the API server may take, counted from when it
    /// passed the rate limit and the circuit breaker (never the wait in line).
    #[arg(long, env = "SAFEWRITE_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
}

/// Builds the client these options describe over the stack of [`crate`], its requests
/// counted in `metrics`.
///
/// # Errors
/// A [`ConnectError`] for a kubeconfig that cannot be found, read or used.
pub async fn connect(args: &ClientArgs, metrics: ClientMetrics) -> Result<ApiClient, ConnectError> {
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
    // retries, and its stack is built in `build`.
    build(
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
        metrics,
    )
}
