//! Logging set-up through tracing-subscriber: human-readable or JSON lines on stderr,
//! filtered by `--log-filter` / `SAFEWRITE_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogArgs, LogFormat};

/// Installs the global subscriber. A filter that does not parse falls back to `info` and
/// says so, rather than silencing the sidecar.
pub fn init_logging(args: &LogArgs) {
    let (filter, bad_filter) = match EnvFilter::try_new(&args.log_filter) {
        Ok(filter) => (filter, None),
        Err(err) => (EnvFilter::new("info"), Some(err)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    if let Some(err) = bad_filter {
        tracing::warn!(filter = %args.log_filter, error = %err, "log filter does not parse; using info");
    }
}
