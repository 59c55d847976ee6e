//! `safewrite health`: a probe of a running sidecar for Kubernetes exec probes. It
//! calls `grpc.health.v1.Health/Check` at the sidecar's address (`--address`, else
//! `SAFEWRITE_ADDRESS`, else `127.0.0.1:50051`) within `--timeout`, prints one line and
//! exits 0 when the answer is SERVING, 1 otherwise (NOT_SERVING, unknown service, no
//! answer). With a token file it sends the token too, though health needs none.
//!
//! Addresses, the one convention every reader of `SAFEWRITE_ADDRESS` follows:
//! `host:port`, `http://host:port`, `unix:///absolute/path` (or `unix:path`), or a bare
//! absolute path to a unix socket.

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Options of `safewrite health`.
#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// The sidecar's address: host:port, http://host:port or unix:///path/to/socket.
    #[arg(long, env = "SAFEWRITE_ADDRESS", default_value = "127.0.0.1:50051", value_parser = Address::parse)]
    pub address: Address,

    /// The service whose health to check; empty for the whole server.
    #[arg(long, default_value = "")]
    pub service: String,

    /// How long to wait for the connection and the answer together.
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration)]
    pub timeout: Duration,

    /// File holding the sidecar's shared token, sent as `authorization: Bearer` (health
    /// needs none; the same variable as `serve` so one setting serves both).
    #[arg(long, env = "SAFEWRITE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

/// Parses a duration longer than zero (`--timeout` here, and serve's timeouts).
pub fn parse_positive_duration(value: &str) -> Result<Duration, String> {
    match humantime::parse_duration(value) {
        Ok(d) if d.is_zero() => Err("must be longer than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// Where a sidecar serves gRPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// `host:port` (an IP address or a name).
    Tcp(String),
    /// The path of a unix socket.
    Unix(PathBuf),
}

// === impl Address ===

impl Address {
    /// Parses an address in any of the forms of the module docs.
    ///
    /// # Errors
    /// A message saying which forms are accepted.
    pub fn parse(text: &str) -> Result<Address, String> {
        let text = text.trim();
        let forms = "use host:port, http://host:port or unix:///path/to/socket";
        if let Some(rest) = text.strip_prefix("unix:") {
            let path = match rest.strip_prefix("//") {
                Some(absolute) if absolute.starts_with('/') => absolute,
                Some(_) => {
                    return Err(format!(
                        "{text:?}: unix:// takes an absolute path (unix:///path); {forms}"
                    ));
                }
                None => rest,
            };
            if path.is_empty() {
                return Err(format!("{text:?} names no socket path; {forms}"));
            }
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        if text.starts_with('/') {
            return Ok(Address::Unix(PathBuf::from(text)));
        }
        if text.starts_with("https://") {
            return Err(format!(
                "{text:?}: safewrite serves plaintext gRPC; {forms}"
            ));
        }
        let authority = text.strip_prefix("http://").unwrap_or(text);
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        match authority.parse::<http::uri::Authority>() {
            Ok(a) if a.port_u16().is_some() && a.as_str() == authority && !a.host().is_empty() => {
                Ok(Address::Tcp(authority.to_string()))
            }
            _ => Err(format!("{text:?} is not an address with a port; {forms}")),
        }
    }

    /// A channel to the address, connecting within `timeout`.
    ///
    /// # Errors
    /// The transport error of a failed connection.
    pub async fn connect(&self, timeout: Duration) -> Result<Channel, tonic::transport::Error> {
        match self {
            Address::Tcp(authority) => {
                Endpoint::from_shared(format!("http://{authority}"))?
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    .connect()
                    .await
            }
            Address::Unix(path) => {
                let path = path.clone();
                Endpoint::from_static("http://localhost")
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    .connect_with_connector(tower::service_fn(move |_| {
                        let path = path.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                        }
                    }))
                    .await
            }
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(authority) => f.write_str(authority),
            Address::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The answer: SERVING, NOT_SERVING, ...
    Status(ServingStatus),
    /// The sidecar does not know the service.
    UnknownService,
    /// No answer within the timeout.
    TimedOut,
    /// The connection or the call failed.
    Failed(String),
}

/// Probes the sidecar at `address` for `service`, within `timeout`, sending `token` as
/// `authorization: Bearer` when there is one.
pub async fn probe(
    address: &Address,
    service: &str,
    timeout: Duration,
    token: Option<&[u8]>,
) -> Probe {
    let call = async {
        let channel = address.connect(timeout).await.map_err(|e| describe(&e))?;
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: service.to_string(),
        });
        request.set_timeout(timeout);
        if let Some(value) = token.and_then(crate::auth::bearer)
            && let Ok(value) = tonic::metadata::MetadataValue::try_from(value.as_bytes())
        {
            request.metadata_mut().insert("authorization", value);
        }
        match HealthClient::new(channel).check(request).await {
            Ok(answer) => Ok(Probe::Status(answer.into_inner().status())),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(Probe::UnknownService),
            Err(status) if status.code() == tonic::Code::DeadlineExceeded => Ok(Probe::TimedOut),
            Err(status) => Err(format!("{:?}: {}", status.code(), status.message())),
        }
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(probe)) => probe,
        Ok(Err(failed)) => Probe::Failed(failed),
        Err(_) => Probe::TimedOut,
    }
}

/// An error with its causes, in one line.
pub(crate) fn describe(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// Runs `safewrite health`: one line on stdout (SERVING) or stderr (anything else), and
/// the exit code.
pub fn run(args: HealthArgs) -> ExitCode {
    let token = match &args.token_file {
        Some(path) => match crate::auth::read(path) {
            Ok(token) => Some(token),
            Err(error) => {
                eprintln!("safewrite health: {}", describe(&error));
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("safewrite health: failed to start: {error}");
            return ExitCode::FAILURE;
        }
    };
    let probe = runtime.block_on(probe(
        &args.address,
        &args.service,
        args.timeout,
        token.as_deref(),
    ));
    let service = if args.service.is_empty() {
        String::new()
    } else {
        format!(" service {:?}", args.service)
    };
    let address = &args.address;
    match probe {
        Probe::Status(ServingStatus::Serving) => {
            println!("safewrite health: {address}{service}: SERVING");
            ExitCode::SUCCESS
        }
        Probe::Status(status) => {
            eprintln!(
                "safewrite health: {address}{service}: {}",
                status.as_str_name()
            );
            ExitCode::FAILURE
        }
        Probe::UnknownService => {
            eprintln!("safewrite health: {address}{service}: unknown service");
            ExitCode::FAILURE
        }
        Probe::TimedOut => {
            eprintln!(
                "safewrite health: {address}{service}: no answer within {}",
                humantime::format_duration(args.timeout)
            );
            ExitCode::FAILURE
        }
        Probe::Failed(why) => {
            eprintln!("safewrite health: {address}{service}: {why}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_follow_one_convention() {
        let tcp = |s: &str| Address::Tcp(s.to_string());
        let unix = |s: &str| Address::Unix(PathBuf::from(s));
        for (text, want) in [
            ("127.0.0.1:50051", tcp("127.0.0.1:50051")),
            (" http://127.0.0.1:50051/ ", tcp("127.0.0.1:50051")),
            ("localhost:7000", tcp("localhost:7000")),
            ("[::1]:50051", tcp("[::1]:50051")),
            (
                "unix:///run/safewrite/s.sock",
                unix("/run/safewrite/s.sock"),
            ),
            ("unix:relative.sock", unix("relative.sock")),
            ("/run/s.sock", unix("/run/s.sock")),
        ] {
            assert_eq!(Address::parse(text), Ok(want), "{text}");
        }
        for bad in [
            "127.0.0.1",
            "",
            "unix://",
            "unix://relative",
            "https://a:1",
            "http://a:1/path",
            "a b:1",
        ] {
            let err = Address::parse(bad).unwrap_err();
            assert!(err.contains("host:port"), "{bad:?}: {err}");
        }
        assert_eq!(unix("/run/s.sock").to_string(), "unix:///run/s.sock");
    }

    #[tokio::test]
    async fn nothing_listening_fails_fast() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = Address::Tcp(free.local_addr().unwrap().to_string());
        drop(free);
        let started = std::time::Instant::now();
        let probe = probe(&address, "", Duration::from_secs(2), None).await;
        assert!(matches!(probe, Probe::Failed(_)), "{probe:?}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let missing = Address::Unix(PathBuf::from("/nonexistent/safewrite.sock"));
        assert!(matches!(probe_of(&missing).await, Probe::Failed(_)));
    }

    async fn probe_of(address: &Address) -> Probe {
        probe(address, "", Duration::from_millis(500), None).await
    }
}
