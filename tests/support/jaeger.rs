//! A real tracing backend for tests: Jaeger v2 (the OpenTelemetry Collector based
//! `jaeger` binary) with in-memory storage, from `tests/harness/jaeger.sh`. Send spans to
//! its OTLP receivers ([`Jaeger::otlp_grpc`], [`Jaeger::otlp_http`]) and read them back
//! through Jaeger's own HTTP query API ([`Jaeger::query`]).
//!
//! # What the query API returns
//!
//! `GET /api/traces/{id}` and `GET /api/traces?service=...` answer with Jaeger's v1 JSON
//! model (the one its UI reads), not OTLP JSON:
//!
//! ```json
//! {"data": [{
//!    "traceID": "5b8efff798038103d269b633813fc60c",
//!    "spans": [{
//!      "traceID": "5b8efff798038103d269b633813fc60c",
//!      "spanID": "eee19b7ec3c1b174",
//!      "operationName": "child",
//!      "references": [{"refType": "CHILD_OF",
//!                       "traceID": "5b8efff798038103d269b633813fc60c",
//!                       "spanID": "eee19b7ec3c1b173"}],
//!      "startTime": 1700000000000000,        // microseconds since the epoch
//!      "duration": 1000,                     // microseconds
//!      "tags": [{"key": "span.kind", "type": "string", "value": "internal"}],
//!      "logs": [],                           // span events: {"timestamp", "fields": [tags]}
//!      "processID": "p1",
//!      "warnings": null
//!    }],
//!    "processes": {"p1": {"serviceName": "harness-smoke", "tags": [...]}},
//!    "warnings": null
//! }], "total": 0, "limit": 0, "offset": 0, "errors": null}
//! ```
//!
//! * Ids are lowercase hex: 32 digits for a trace, 16 for a span.
//! * The parent link is the span's `references` entry with `refType` `CHILD_OF` (OTLP
//!   span links appear as further entries with `refType` `FOLLOWS_FROM`); a root span
//!   has `references: []`. [`parent_span_id`] reads it.
//! * The service is not on the span: the span's `processID` keys the trace's `processes`
//!   map, whose entry has `serviceName` and the other resource attributes as `tags`.
//!   [`service_of`] reads it.
//! * Attributes are `tags`: `{"key", "type", "value"}` with `type` one of `string`,
//!   `bool`, `int64`, `float64`, `binary`; the span kind is the tag `span.kind`, the OTLP
//!   status the tags `otel.status_code` / `otel.status_description` (and `error: true`
//!   for an error status), the instrumentation scope `otel.scope.name`.
//!
//! [`Jaeger::trace`] and [`Jaeger::wait_for_trace`] give one element of `data` (a trace
//! object); [`Jaeger::traces_of_service`] gives the `data` array. An unknown trace id
//! answers 404 (`{"data": null, "errors": [{"code": 404, "msg": "trace not found"}]}`).
//! The same port also serves the API v3, `GET /api/v3/traces/{id}`, which answers OTLP
//! JSON (`{"result": {"resourceSpans": [...]}}`) for a test that wants OTLP's own shape.
//!
//! As with the control plane, teardown does not depend on destructors: the script lives
//! until its stdin closes, which happens when this process ends however it ends.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::run_script;

/// A running Jaeger. Dropping it (or ending the process) stops it.
pub struct Jaeger {
    /// OTLP/gRPC receiver, `http://127.0.0.1:PORT` (an OTLP exporter's endpoint).
    pub otlp_grpc: String,
    /// OTLP/HTTP receiver, `http://127.0.0.1:PORT`; traces are POSTed to `/v1/traces`.
    pub otlp_http: String,
    /// The query API (and Jaeger's UI page), `http://127.0.0.1:PORT`.
    pub query: String,
    /// The jaeger_query extension's gRPC API, `127.0.0.1:PORT`.
    pub query_grpc: String,
    /// The pid of the jaeger process itself.
    pub pid: u32,
    /// The script's directory: config.yaml, jaeger.log, env.
    pub dir: PathBuf,
    pub env: HashMap<String, String>,
    child: Mutex<Child>,
    // Closing it is the stop signal.
    _stdin: ChildStdin,
}

impl Jaeger {
    /// Starts a fresh Jaeger and waits until its query API and receivers answer.
    pub fn start() -> Jaeger {
        let started = Instant::now();
        let (child, stdin, _stdout, dir, env) = run_script("tests/harness/jaeger.sh", &[]);
        eprintln!(
            "jaeger ready in {:.1}s, query API at {}",
            started.elapsed().as_secs_f64(),
            env["QUERY_URL"]
        );
        Jaeger {
            otlp_grpc: env["OTLP_GRPC_ENDPOINT"].clone(),
            otlp_http: env["OTLP_HTTP_ENDPOINT"].clone(),
            query: env["QUERY_URL"].clone(),
            query_grpc: env["QUERY_GRPC_ENDPOINT"].clone(),
            pid: env["JAEGER_PID"].parse().expect("pid"),
            dir,
            env,
            child: Mutex::new(child),
            _stdin: stdin,
        }
    }

    /// The Jaeger shared by every test of this test binary.
    pub fn shared() -> &'static Jaeger {
        static SHARED: OnceLock<Jaeger> = OnceLock::new();
        SHARED.get_or_init(Jaeger::start)
    }

    /// The trace with this id (32 hex digits) as a trace object of the v1 JSON model
    /// (`traceID`, `spans`, `processes`; see the module docs), or `None` while Jaeger
    /// has no span of it.
    pub async fn trace(&self, trace_id_hex: &str) -> Option<Value> {
        let url = format!("{}/api/traces/{}", self.query, trace_id_hex.to_lowercase());
        let (status, body) = http(hyper::Method::GET, &url, None).await;
        if status == hyper::StatusCode::NOT_FOUND {
            return None;
        }
        let mut answer = expect_json(status, &body, &url);
        match answer["data"].as_array_mut().map(std::mem::take) {
            Some(traces) => traces.into_iter().next(),
            None => None,
        }
    }

    /// Waits until the trace has at least `min_spans` spans and returns it (see
    /// [`Jaeger::trace`]); panics after `timeout`. Exporters batch, so spans of one
    /// trace may arrive over some time: ask for as many as the test expects.
    pub async fn wait_for_trace(
        &self,
        trace_id_hex: &str,
        min_spans: usize,
        timeout: Duration,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let trace = self.trace(trace_id_hex).await;
            let spans = trace
                .as_ref()
                .and_then(|t| t["spans"].as_array())
                .map_or(0, Vec::len);
            if spans >= min_spans {
                return trace.expect("a trace");
            }
            if Instant::now() >= deadline {
                panic!(
                    "trace {trace_id_hex} has {spans} of {min_spans} spans after {timeout:?}; \
                     last seen: {}",
                    trace.map_or_else(|| "nothing".to_string(), |t| t.to_string())
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The most recent traces (up to 1000, from the last two days) with a span of
    /// `service`: the `data` array of `GET /api/traces?service=...`, each element a
    /// trace object as from [`Jaeger::trace`]. Empty if the service has sent nothing.
    pub async fn traces_of_service(&self, service: &str) -> Value {
        let url = format!(
            "{}/api/traces?service={}&limit=1000",
            self.query,
            percent_encode(service)
        );
        let (status, body) = http(hyper::Method::GET, &url, None).await;
        // An unknown service is not an error to Jaeger's memory store, but be lenient.
        if status == hyper::StatusCode::NOT_FOUND {
            return Value::Array(Vec::new());
        }
        let mut answer = expect_json(status, &body, &url);
        match answer["data"].take() {
            Value::Null => Value::Array(Vec::new()),
            data => data,
        }
    }

    /// The services Jaeger has seen spans of (`GET /api/services`).
    pub async fn services(&self) -> Vec<String> {
        let url = format!("{}/api/services", self.query);
        let (status, body) = http(hyper::Method::GET, &url, None).await;
        let answer = expect_json(status, &body, &url);
        answer["data"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| n.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// POSTs an OTLP/JSON `ExportTraceServiceRequest` (`{"resourceSpans": [...]}`) to the
    /// OTLP/HTTP receiver and panics unless it is accepted. Ids in OTLP/JSON are hex.
    pub async fn send_otlp_json(&self, request: &Value) {
        let url = format!("{}/v1/traces", self.otlp_http);
        let (status, body) =
            http(hyper::Method::POST, &url, Some(request.to_string().into())).await;
        assert!(
            status.is_success(),
            "POST {url} answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        // Closing stdin happens when the fields drop; wait so the teardown is finished.
        let child = self.child.get_mut().expect("lock");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let _ = child.wait();
    }
}

/// The span of `trace` with this operation name (the first, if several).
pub fn span_named<'a>(trace: &'a Value, operation: &str) -> Option<&'a Value> {
    trace["spans"]
        .as_array()?
        .iter()
        .find(|s| s["operationName"] == operation)
}

/// The span id (hex) of the span's parent: its `CHILD_OF` reference. `None` for a root.
pub fn parent_span_id(span: &Value) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")?["spanID"]
        .as_str()
}

/// The service name of a span of `trace`, from the trace's `processes` map.
pub fn service_of<'a>(trace: &'a Value, span: &Value) -> Option<&'a str> {
    let process = span["processID"].as_str()?;
    trace["processes"][process]["serviceName"].as_str()
}

/// The value of the span's tag (attribute) `key`.
pub fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

/// One plain-HTTP request; JSON body when given. A client per request: tests run on
/// separate runtimes, and a pooled connection must not outlive the one it was made on.
async fn http(method: hyper::Method, url: &str, body: Option<Bytes>) -> (hyper::StatusCode, Bytes) {
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http();
    let mut request = hyper::Request::builder().method(method).uri(url);
    if body.is_some() {
        request = request.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(Full::new(body.unwrap_or_default()))
        .expect("request");
    let response = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .unwrap_or_else(|_| panic!("{url} did not answer within 30s"))
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{url}: reading the body: {e}"))
        .to_bytes();
    (status, body)
}

fn expect_json(status: hyper::StatusCode, body: &[u8], url: &str) -> Value {
    assert!(
        status.is_success(),
        "GET {url} answered {status}: {}",
        String::from_utf8_lossy(body)
    );
    serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "{url} answered no JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    })
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
