//! The `safewrite` binary: parse the command line, build the sidecar, run it.

use std::process::ExitCode;

use clap::Parser;
use safewrite::config::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => return fail(&err),
    };
    // Inside the runtime: the trace exporter's task is spawned on it.
    let telemetry = match runtime.block_on(async { safewrite::telemetry::init(&cli.log) }) {
        Ok(telemetry) => telemetry,
        Err(err) => return fail(&err),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => safewrite::server::serve(args).await,
        }
    });
    // From this thread, with the runtime alive: the last spans are flushed.
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

/// Prints one line naming the cause (with its sources) and returns a failing exit code.
fn fail(err: &dyn std::error::Error) -> ExitCode {
    let mut line = format!("safewrite: error: {err}");
    let mut source = err.source();
    while let Some(cause) = source {
        // Some libraries repeat their source in their own message: say each thing once.
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(&format!(": {text}"));
        }
        source = cause.source();
    }
    // One line, whatever the causes' own formatting (YAML errors span several).
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    eprintln!("{line}");
    ExitCode::FAILURE
}
