//! The options of `safewrite serve` (the command line itself is parsed in `main.rs`;
//! each piece's own options live with it: `telemetry::LogArgs`, `health::HealthArgs`).
//! Every flag can also be set from the environment variable named in `--help`; flags
//! win over the environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

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

    /// Permissions of the unix socket (octal), set before it accepts connections. Callers
    /// need write permission to connect.
    #[arg(long, env = "SAFEWRITE_UNIX_SOCKET_MODE", default_value = "0660", value_parser = crate::runtime::unix_socket::parse_mode)]
    pub unix_socket_mode: crate::runtime::unix_socket::SocketMode,

    /// Group owning the unix socket (a name from /etc/group, or a numeric gid), set before
    /// it accepts connections, e.g. the pod's fsGroup.
    #[arg(long, env = "SAFEWRITE_UNIX_SOCKET_GROUP")]
    pub unix_socket_group: Option<String>,

    /// Allow callers to write what this rule names:
    /// GROUP/KIND[:NAMESPACES[:SUBRESOURCES[:OPERATIONS]]], e.g.
    /// 'apps/Deployment:ns1,ns2:main,status' (operations: update, patch-status, transact,
    /// create-if-missing, get, lead, delete). Repeatable; in the environment, rules are separated by spaces.
    /// Without --allow and --policy every kind but Secrets may be written; a wildcard
    /// never matches Secrets, only a rule naming core/Secret does.
    #[arg(long = "allow", env = "SAFEWRITE_ALLOW", value_name = "RULE", value_delimiter = ' ', value_parser = parse_rule)]
    pub allow: Vec<crate::service::policy::Rule>,

    /// YAML or JSON file of allow rules (`allow:` list), added to those of --allow.
    #[arg(long, env = "SAFEWRITE_POLICY", value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// File holding a shared token that callers of the Writer service must send as gRPC
    /// metadata `authorization: Bearer <token>` (health and reflection stay open). Read
    /// again every few seconds, so a rotated Secret takes effect without a restart.
    #[arg(long, env = "SAFEWRITE_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// How the API server is reached and paced.
    #[command(flatten)]
    pub client: safewrite_client::connect::ClientArgs,

    /// How long in-flight RPCs may take to finish after SIGTERM/SIGINT before they are
    /// cut off. A second signal cuts them off at once.
    #[arg(long, env = "SAFEWRITE_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Threads that run the sidecar's tasks (RPCs, requests to the API server,
    /// listeners). One is the default: a sidecar's work per write is small, and more
    /// threads mostly add wake-ups between them (measured in docs/overhead.md: one thread
    /// cost 10 to 25 % less CPU per write than two on a 2-core node, at the same or
    /// better goodput up to 64 writers). CEL evaluations too large to run inline, and
    /// compiles, have threads of their own either way.
    #[arg(long, env = "SAFEWRITE_WORKER_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub worker_threads: u16,

    /// Most RPCs in flight at once; past it, new RPCs are refused at once with
    /// RESOURCE_EXHAUSTED instead of queueing without bound.
    #[arg(long, env = "SAFEWRITE_MAX_IN_FLIGHT", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,

    /// Most Lead campaigns at once (one per open Lead stream, each reading its Lease every
    /// retry period); past it, a new Lead is refused at once with RESOURCE_EXHAUSTED
    /// (reason OVERLOADED). A controller needs one per Lease it leads.
    #[arg(long, env = "SAFEWRITE_MAX_CAMPAIGNS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_campaigns: u32,

    /// Largest request message accepted, in bytes (a Kubernetes object is at most about
    /// 1.5 MiB). A larger one is refused with OUT_OF_RANGE (reason REQUEST_TOO_LARGE)
    /// before anything is sent.
    #[arg(long, env = "SAFEWRITE_MAX_REQUEST_BYTES", default_value_t = 4 * 1024 * 1024, value_parser = clap::value_parser!(u32).range(1024..))]
    pub max_request_bytes: u32,

    /// Most bytes of request messages being received at once, over every connection and
    /// stream: each byte of a message that has begun but not ended holds a share until
    /// it ends. A request whose next frame does not fit is refused at once with
    /// RESOURCE_EXHAUSTED (reason OVERLOADED). At least --max-request-bytes + 5.
    #[arg(long, env = "SAFEWRITE_MAX_RECEIVING_BYTES", default_value_t = 64 * 1024 * 1024, value_parser = clap::value_parser!(u32).range(1029..))]
    pub max_receiving_bytes: u32,

    /// Most bytes of large answers (64 KiB or more: an answer carries the object) being
    /// sent at once, over every connection: such an answer is made only once it has a
    /// share, and gives it back when it has left. An answer waits for its share at most
    /// half the time left before its caller's deadline, and at most 5 s, then goes
    /// without one.
    #[arg(long, env = "SAFEWRITE_MAX_SENDING_BYTES", default_value_t = 8 * 1024 * 1024, value_parser = clap::value_parser!(u32).range(65536..))]
    pub max_sending_bytes: u32,

    /// How long a request message may take to arrive whole once its first byte came;
    /// past it the request is ended (reason REQUEST_NOT_READ) and its bytes freed.
    #[arg(long, env = "SAFEWRITE_RECEIVE_TIMEOUT", default_value = "10s", value_parser = crate::health::parse_positive_duration)]
    pub receive_timeout: Duration,

    /// Most gRPC connections open at once (TCP and unix socket together). When the cap is
    /// reached, the connection idle the longest (no RPC in flight) is closed to make
    /// room; when every connection is busy, new ones wait. Keep it under the open-file
    /// limit (ulimit -n): past that, accepting closes idle connections and backs off.
    #[arg(long, env = "SAFEWRITE_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Most connections to the metrics endpoint open at once, made room for the same way.
    #[arg(long, env = "SAFEWRITE_METRICS_MAX_CONNECTIONS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub metrics_max_connections: u32,

    /// How long a new connection may take to open: to send the HTTP/2 preface (gRPC) or a
    /// whole request head (metrics). Slower ones are closed.
    #[arg(long, env = "SAFEWRITE_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = crate::health::parse_positive_duration)]
    pub handshake_timeout: Duration,

    /// How long a connection may stay open with no request in flight before it is closed.
    #[arg(long, env = "SAFEWRITE_IDLE_TIMEOUT", default_value = "5m", value_parser = crate::health::parse_positive_duration)]
    pub idle_timeout: Duration,

    /// Interval of HTTP/2 PINGs and TCP keepalive probes on gRPC connections, which find
    /// peers that are gone without closing their connection; 0s turns them off.
    #[arg(long, env = "SAFEWRITE_KEEPALIVE_INTERVAL", default_value = "60s", value_parser = humantime::parse_duration)]
    pub keepalive_interval: Duration,

    /// How long a PING may go unanswered before its connection is closed.
    #[arg(long, env = "SAFEWRITE_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = crate::health::parse_positive_duration)]
    pub keepalive_timeout: Duration,

    /// How long a Transact stream may keep safewrite waiting: for its begin after it
    /// opened, and for each proposal after a fresh object. Past it the transaction ends
    /// with DEADLINE_EXCEEDED (reason TRANSACTION_IDLE) and frees its place in flight.
    #[arg(long, env = "SAFEWRITE_TRANSACT_IDLE_TIMEOUT", default_value = "10s", value_parser = crate::health::parse_positive_duration)]
    pub transact_idle_timeout: Duration,

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

    /// Write every request on its own instead of committing concurrent writes to the same
    /// object together (group commit; a request can also ask with options.write_alone).
    #[arg(long, env = "SAFEWRITE_NO_GROUP_COMMIT")]
    pub no_group_commit: bool,

    /// The most bytes of objects remembered from earlier reads and writes, so that the
    /// next write to an object skips its GET (written conditionally on the copy's
    /// resourceVersion; least recently used first out).
    #[arg(long, env = "SAFEWRITE_MEMORY_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub memory_bytes: u64,

    /// Read every object before writing it instead of writing from a remembered copy.
    #[arg(long, env = "SAFEWRITE_NO_MEMORY")]
    pub no_memory: bool,

    /// Remember Secrets too (by default they are read before every write and never kept).
    #[arg(long, env = "SAFEWRITE_REMEMBER_SECRETS")]
    pub remember_secrets: bool,

    /// Attempts per write (the first included) when the request's retry policy does not say.
    #[arg(long, env = "SAFEWRITE_MAX_ATTEMPTS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_attempts: u32,

    /// Ceiling of the first backoff; each later one doubles, with full jitter.
    #[arg(long, env = "SAFEWRITE_INITIAL_BACKOFF", default_value = "10ms", value_parser = humantime::parse_duration)]
    pub initial_backoff: Duration,

    /// Cap on any single backoff.
    #[arg(long, env = "SAFEWRITE_MAX_BACKOFF", default_value = "1s", value_parser = humantime::parse_duration)]
    pub max_backoff: Duration,

    /// Field manager recorded for writes whose request names none.
    #[arg(long, env = "SAFEWRITE_FIELD_MANAGER", default_value = "safewrite", value_parser = parse_field_manager)]
    pub field_manager: safewrite_api::target::FieldManager,

    /// How often to check that the API server is ready (health is NOT_SERVING until it is).
    #[arg(long, env = "SAFEWRITE_READINESS_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub readiness_interval: Duration,
}

// === impl ServeArgs ===

impl ServeArgs {
    /// Checks what no single flag can: the receive budget must hold one whole message.
    ///
    /// # Errors
    /// A one-line message naming the flags and what to change.
    pub fn check(&self) -> Result<(), String> {
        let needed = u64::from(self.max_request_bytes) + 5;
        if u64::from(self.max_receiving_bytes) < needed {
            return Err(format!(
                "--max-receiving-bytes {} cannot hold one message of --max-request-bytes {} (that needs {needed}); raise it or lower --max-request-bytes",
                self.max_receiving_bytes, self.max_request_bytes
            ));
        }
        Ok(())
    }
}

/// Where the metrics endpoint listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    /// No metrics endpoint.
    Off,
    /// `GET /metrics` on this address.
    At(SocketAddr),
}

fn parse_rule(value: &str) -> Result<crate::service::policy::Rule, String> {
    crate::service::policy::Rule::parse(value).map_err(|e| e.to_string())
}

fn parse_field_manager(value: &str) -> Result<safewrite_api::target::FieldManager, String> {
    safewrite_api::target::FieldManager::parse("--field-manager", value).map_err(|v| v.description)
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
