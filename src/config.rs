//! Command-line and environment configuration. Every flag can also be set from the
//! environment variable named in `--help`; flags win over the environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// A gRPC sidecar that makes Kubernetes writes safe under concurrency.
#[derive(Debug, Parser)]
#[command(name = "safewrite", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the safewrite.v1.WriterService gRPC API (plus grpc.health.v1 and reflection).
    Serve(ServeArgs),
}

/// Logging options, shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log filter in tracing-subscriber's EnvFilter syntax, e.g. "info,safewrite=debug".
    #[arg(long, env = "SAFEWRITE_LOG", default_value = "info", global = true)]
    pub log_filter: String,
    /// Log line format.
    #[arg(long, env = "SAFEWRITE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Options of `safewrite serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TCP address for the gRPC API. Loopback by default: a sidecar serves its own pod;
    /// listen on another interface only on purpose. Port 0 picks a free port (logged).
    #[arg(long, env = "SAFEWRITE_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    /// Address of the Prometheus/OpenMetrics endpoint (`GET /metrics`), separate from
    /// the gRPC API; `off` serves none. Port 0 picks a free port (logged).
    #[arg(long, env = "SAFEWRITE_METRICS_LISTEN", default_value = "127.0.0.1:9464", value_parser = parse_metrics_listen)]
    pub metrics_listen: MetricsListen,

    /// Also serve the gRPC API on this unix socket path (created at start, removed at exit).
    #[arg(long, env = "SAFEWRITE_UNIX_SOCKET")]
    pub unix_socket: Option<PathBuf>,

    /// Kubeconfig file to use. Without it the API server is found the way Kubernetes
    /// tools find it: $KUBECONFIG, ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "SAFEWRITE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current context.
    #[arg(long, env = "SAFEWRITE_CONTEXT")]
    pub context: Option<String>,

    /// How long in-flight RPCs may take to finish after SIGTERM/SIGINT before they are
    /// cut off. A second signal cuts them off at once.
    #[arg(long, env = "SAFEWRITE_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Requests per second to the API server, on average, shared by all callers (reads,
    /// writes, retries and discovery alike).
    #[arg(long, env = "SAFEWRITE_QPS", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub qps: u32,

    /// Requests to the API server allowed at once above the average rate.
    #[arg(long, env = "SAFEWRITE_BURST", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,

    /// Most RPCs in flight at once; past it, new RPCs are refused at once with
    /// RESOURCE_EXHAUSTED instead of queueing without bound.
    #[arg(long, env = "SAFEWRITE_MAX_IN_FLIGHT", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,

    /// Largest request message accepted, in bytes (a Kubernetes object is at most about
    /// 1.5 MiB).
    #[arg(long, env = "SAFEWRITE_MAX_REQUEST_BYTES", default_value_t = 4 * 1024 * 1024, value_parser = clap::value_parser!(u32).range(1024..))]
    pub max_request_bytes: u32,

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

    /// Share of requests that retries of faults (429, 5xx, transport) may add, across
    /// all callers over a 10 s window (0.2 = 20%). Conflict retries are not counted.
    #[arg(long, env = "SAFEWRITE_RETRY_BUDGET_PERCENT", default_value_t = 0.2)]
    pub retry_budget_percent: f32,

    /// Retries of faults always allowed per second, whatever the share.
    #[arg(
        long,
        env = "SAFEWRITE_RETRY_BUDGET_MIN_PER_SECOND",
        default_value_t = 10
    )]
    pub retry_budget_min_per_second: u32,

    /// Attempts per write (the first included) when the request's retry policy does not say.
    #[arg(long, env = "SAFEWRITE_MAX_ATTEMPTS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_attempts: u32,

    /// Ceiling of the first backoff; each later one doubles, with full jitter.
    #[arg(long, env = "SAFEWRITE_INITIAL_BACKOFF", default_value = "10ms", value_parser = humantime::parse_duration)]
    pub initial_backoff: Duration,

    /// Cap on any single backoff.
    #[arg(long, env = "SAFEWRITE_MAX_BACKOFF", default_value = "1s", value_parser = humantime::parse_duration)]
    pub max_backoff: Duration,

    /// The longest any single request to the API server may take.
    #[arg(long, env = "SAFEWRITE_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,

    /// Field manager recorded for writes whose request names none.
    #[arg(long, env = "SAFEWRITE_FIELD_MANAGER", default_value = "safewrite")]
    pub field_manager: String,

    /// How often to check that the API server is ready (health is NOT_SERVING until it is).
    #[arg(long, env = "SAFEWRITE_READINESS_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub readiness_interval: Duration,
}

/// Where the metrics endpoint listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    /// No metrics endpoint.
    Off,
    /// `GET /metrics` on this address.
    At(SocketAddr),
}

fn parse_metrics_listen(value: &str) -> Result<MetricsListen, String> {
    if value == "off" {
        return Ok(MetricsListen::Off);
    }
    value
        .parse()
        .map(MetricsListen::At)
        .map_err(|_| format!("{value:?} is neither host:port nor off"))
}
