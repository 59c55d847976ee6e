//! Telemetry set-up: logs through tracing-subscriber (human-readable or JSON lines on
//! stderr, filtered by `--log-filter` / `SAFEWRITE_LOG`) and traces through
//! tracing-opentelemetry, exported over OTLP when the standard `OTEL_*` variables ask for
//! it. Also the span of each RPC, continued from the caller's W3C `traceparent`.
//!
//! Spans are always made (so every log line of an RPC carries its trace id, and results
//! report it); they leave the process only when an exporter is configured:
//! - `OTEL_SDK_DISABLED=true`: no OpenTelemetry at all (no trace ids).
//! - `OTEL_TRACES_EXPORTER`: `otlp` exports, `none` does not; unset, export happens
//!   when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set.
//! - `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`: `grpc` or
//!   `http/protobuf` (the default, as the specification says).
//! - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`,
//!   `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS` / `_TIMEOUT` are read by the SDK; the
//!   service name defaults to `safewrite`.
//!
//! Export runs in a background task with a bounded queue: an unreachable collector
//! drops spans, never slows or fails an RPC, and is logged once per outage.
//! Object contents never go into spans or logs: only names, versions, codes, reasons.
//!
//! Text lines are short: time, level, message and the event's own fields, then the
//! `trace_id` of the RPC the line belongs to, and nothing else of the spans (no target,
//! no span names, no span fields). JSON lines carry everything, spans included.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};
use opentelemetry_sdk::{Resource, runtime};
use tracing::field::{Empty, Field, Visit};
use tracing::{Event, Level, Span, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime as _, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use clap::{Args, ValueEnum};

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

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Why telemetry could not be set up. Each is a configuration problem.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// An `OTEL_*` variable holds a value safewrite does not support.
    #[error("{name}={value:?} is not supported: {hint}")]
    Unsupported {
        /// The variable's name.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is supported instead.
        hint: &'static str,
    },
    /// The OTLP exporter could not be built from the configuration.
    #[error("failed to build the OTLP trace exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// The installed telemetry; [`Telemetry::shutdown`] flushes what is left to export.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    /// Whether spans leave the process.
    pub exporting: bool,
}

// === impl Telemetry ===

impl Telemetry {
    /// Flushes queued spans (bounded by the exporter's timeout) and stops the exporter.
    /// Call it outside the runtime's worker threads, with the runtime still alive.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = provider.shutdown_with_timeout(Duration::from_secs(5));
        }
    }
}

/// How traces leave the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Export {
    None,
    Grpc,
    HttpProtobuf,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Reads the OTEL_* variables that decide whether and how traces are exported.
fn export_from_env() -> Result<Export, TelemetryError> {
    let wanted = match env("OTEL_TRACES_EXPORTER").as_deref() {
        Some("none") => false,
        Some("otlp") => true,
        Some(other) => {
            return Err(TelemetryError::Unsupported {
                name: "OTEL_TRACES_EXPORTER",
                value: other.into(),
                hint: "use otlp or none",
            });
        }
        None => {
            env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
                || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        }
    };
    if !wanted {
        return Ok(Export::None);
    }
    let (name, protocol) = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(p) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", p),
        None => (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            env("OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_or_else(|| "http/protobuf".into()),
        ),
    };
    match protocol.as_str() {
        "grpc" => Ok(Export::Grpc),
        "http/protobuf" => Ok(Export::HttpProtobuf),
        _ => Err(TelemetryError::Unsupported {
            name,
            value: protocol,
            hint: "use grpc or http/protobuf",
        }),
    }
}

/// The resource: the SDK's detectors (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES),
/// with `service.name` defaulting to `safewrite`.
fn resource() -> Resource {
    let named = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("safewrite").build()
    }
}

/// An exporter that says once when export starts failing and once when it works
/// again, instead of once per batch.
#[derive(Debug)]
struct Quiet<E> {
    inner: E,
    failing: Arc<AtomicBool>,
}

// === impl opentelemetry_sdk ===

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for Quiet<E>
{
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        match &result {
            Err(error) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                target: "safewrite::telemetry",
                %error,
                "trace export failing; spans are dropped until the collector answers (logged once)"
            ),
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!(target: "safewrite::telemetry", "trace export works again")
            }
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

fn tracer_provider(export: Export) -> Result<SdkTracerProvider, TelemetryError> {
    let builder = SdkTracerProvider::builder().with_resource(resource());
    let exporter = match export {
        Export::None => return Ok(builder.build()),
        Export::Grpc => SpanExporter::builder().with_tonic().build(),
        Export::HttpProtobuf => SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build(),
    }
    .map_err(TelemetryError::Exporter)?;
    let exporter = Quiet {
        inner: exporter,
        failing: Arc::default(),
    };
    let processor =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            runtime::Tokio,
        )
        .build();
    Ok(builder.with_span_processor(processor).build())
}

/// Installs logging and tracing. Must run inside the tokio runtime (the exporter's
/// task is spawned on it). A log filter that does not parse falls back to `info` and
/// says so, rather than silencing the sidecar.
///
/// # Errors
/// An unsupported `OTEL_*` value, or an exporter that cannot be built from them.
pub fn init(args: &LogArgs) -> Result<Telemetry, TelemetryError> {
    let (filter, bad_filter) = match EnvFilter::try_new(&args.log_filter) {
        Ok(filter) => (filter, None),
        Err(err) => (EnvFilter::new("info"), Some(err)),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = match args.log_format {
        LogFormat::Text => fmt
            .fmt_fields(TraceIdOnly)
            .event_format(ShortLines)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => fmt
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .with_filter(filter)
            .boxed(),
    };

    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let (otel, telemetry) = if disabled {
        (
            None,
            Telemetry {
                provider: None,
                exporting: false,
            },
        )
    } else {
        let export = export_from_env()?;
        let provider = tracer_provider(export)?;
        // Only safewrite's own spans and events: kube, hyper and tonic spans would add
        // nothing the attempt and HTTP spans do not say. And none of the layer's extras,
        // which it pays for on every span, sampled or not (each costs per span, or per
        // poll of the future a span is entered for): source locations and thread names
        // (attributes nobody reads here), busy and idle times (two clock reads each time
        // a span is entered), and the OpenTelemetry context made current on entry (trace
        // ids are read from the span itself, and nothing downstream reads the current
        // context). What spans cost per write, with and without these: docs/overhead.md.
        let layer = tracing_opentelemetry::layer()
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .with_tracer(provider.tracer("safewrite"))
            .with_filter(Targets::new().with_target("safewrite", Level::DEBUG))
            .boxed();
        (
            Some(layer),
            Telemetry {
                provider: Some(provider),
                exporting: export != Export::None,
            },
        )
    };
    tracing_subscriber::registry().with(fmt).with(otel).init();
    if let Some(err) = bad_filter {
        tracing::warn!(filter = %args.log_filter, error = %err, "log filter does not parse; using info");
    }
    Ok(telemetry)
}

/// The text line format: `<time> <LEVEL> <message> <fields> [trace_id=<id>]`.
struct ShortLines;

// === impl ShortLines ===

impl<S, N> FormatEvent<S, N> for ShortLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        SystemTime.format_time(&mut writer)?;
        write!(writer, " {:>5} ", event.metadata().level())?;
        DefaultFields::new().format_fields(writer.by_ref(), event)?;
        // The spans' fields as `TraceIdOnly` kept them: the RPC's trace id.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.fields.is_empty()
                {
                    write!(writer, " {}", fields.fields)?;
                }
            }
        }
        writeln!(writer)
    }
}

/// Keeps only the `trace_id` of a span's fields for text lines.
struct TraceIdOnly;

/// Finds the `trace_id` field.
#[derive(Default)]
struct TraceIdVisitor(Option<String>);

// === impl TraceIdVisitor ===

impl Visit for TraceIdVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "trace_id" {
            self.0 = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "trace_id" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

// === impl TraceIdOnly ===

impl<'writer> FormatFields<'writer> for TraceIdOnly {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut visitor = TraceIdVisitor::default();
        fields.record(&mut visitor);
        match visitor.0 {
            Some(id) if !id.is_empty() => write!(writer, "trace_id={id}"),
            _ => Ok(()),
        }
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> std::fmt::Result {
        let mut more = String::new();
        self.format_fields(Writer::new(&mut more), fields)?;
        if !more.is_empty() {
            if !current.fields.is_empty() {
                current.fields.push(' ');
            }
            current.fields.push_str(&more);
        }
        Ok(())
    }
}

/// Reads W3C trace context from gRPC metadata.
struct Metadata<'a>(&'a tonic::metadata::MetadataMap);

// === impl Metadata ===

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// The span of one RPC, a child of the caller's span when `metadata` carries a W3C
/// `traceparent`. Its `trace_id` field is recorded at once, so every log line of the
/// RPC carries it.
pub fn rpc_span(method: &'static str, metadata: &tonic::metadata::MetadataMap) -> Span {
    let span = tracing::info_span!(
        "rpc",
        otel.name = method_name(method),
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = "safewrite.v1.WriterService",
        rpc.method = method,
        rpc.grpc.status_code = Empty,
        k8s.namespace.name = Empty,
        safewrite.target.api_version = Empty,
        safewrite.target.kind = Empty,
        safewrite.target.name = Empty,
        safewrite.outcome = Empty,
        safewrite.attempts = Empty,
        safewrite.already_applied = Empty,
        error.type = Empty,
        trace_id = Empty,
    );
    let parent = TraceContextPropagator::new().extract(&Metadata(metadata));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    let id = trace_id(&span);
    if !id.is_empty() {
        span.record("trace_id", id.as_str());
    }
    span
}

fn method_name(method: &str) -> &'static str {
    match method {
        "UpdateWithRetry" => "safewrite.v1.WriterService/UpdateWithRetry",
        "PatchStatus" => "safewrite.v1.WriterService/PatchStatus",
        "Transact" => "safewrite.v1.WriterService/Transact",
        "Get" => "safewrite.v1.WriterService/Get",
        "Lead" => "safewrite.v1.WriterService/Lead",
        "Delete" => "safewrite.v1.WriterService/Delete",
        _ => "safewrite.v1.WriterService/unknown",
    }
}

/// The W3C trace id of `span`, hex encoded; empty when OpenTelemetry is off.
pub fn trace_id(span: &Span) -> String {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if span_context.is_valid() {
        span_context.trace_id().to_string()
    } else {
        String::new()
    }
}

/// Records the end of an RPC on its span: the gRPC code, and the error type when it
/// failed (the ErrorInfo reason, never the message, which may quote object contents).
pub fn record_rpc_end(span: &Span, code: tonic::Code, reason: Option<&str>) {
    span.record("rpc.grpc.status_code", code as i32);
    if code != tonic::Code::Ok {
        span.record("otel.status_code", "ERROR");
        span.record(
            "error.type",
            reason.unwrap_or_else(|| crate::metrics::code_name(code)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn text_lines_carry_the_trace_id_but_no_span_fields() {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .fmt_fields(TraceIdOnly)
            .event_format(ShortLines);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let rpc = tracing::info_span!(
                "rpc",
                otel.name = "safewrite.v1.WriterService/UpdateWithRetry",
                rpc.system = "grpc",
                k8s.namespace.name = "a-namespace",
                trace_id = Empty,
            );
            rpc.record("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736");
            rpc.record("k8s.namespace.name", "another-namespace");
            let _rpc = rpc.enter();
            let attempt = tracing::info_span!("attempt", safewrite.attempt = 2);
            let _attempt = attempt.enter();
            tracing::warn!(attempt = 2, reason = "Conflict", "conflict");
        });
        tracing::subscriber::with_default(tracing_subscriber::registry(), || {});
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let line = text.lines().next().expect("a line");
        assert!(
            line.ends_with(" WARN conflict attempt=2 reason=\"Conflict\" trace_id=4bf92f3577b34da6a3ce929d0e0e4736"),
            "{line}"
        );
        for absent in [
            "otel",
            "rpc.system",
            "namespace",
            "safewrite",
            "attempt{",
            "rpc{",
        ] {
            assert!(!line.contains(absent), "{absent} in {line}");
        }
        assert!(line.len() < 120, "{} characters: {line}", line.len());
    }
}
