//! An HTTP fault proxy between safewrite and the real kube-apiserver. It terminates TLS
//! with the control plane's own serving certificate and, like the API server, speaks
//! HTTP/2 when the client offers it by ALPN (HTTP/1.1 otherwise, or always with
//! [`HttpFaultProxy::start_http1`]). It forwards each request to the real API server and
//! injects one kind of fault into every Nth request (optionally writes only): a 429 with
//! Retry-After, a 503, latency, the request cut before it is forwarded, the answer
//! dropped after the API server has committed the write, or a hang (the request is read
//! and never answered, like a server that accepts and then stalls) or a gate (requests held
//! until the fault is switched). The fault can be
//! switched at any time; requests already hanging stay hung until their client gives
//! up. The counters say exactly what was done, so a test can account for every write.
//!
//! A request "cut" ends its HTTP/2 stream (RST_STREAM) or, on HTTP/1.1, its connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;

use super::ControlPlane;

/// The fault injected into a chosen request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything untouched.
    Pass,
    /// Answer 429 TooManyRequests with `Retry-After: 1`, without forwarding.
    TooManyRequests,
    /// Answer 503 ServiceUnavailable, without forwarding.
    Unavailable,
    /// Wait this long, then forward.
    Latency(Duration),
    /// Read the whole request, then cut it without forwarding it. The request was sent in
    /// full, so the sidecar cannot tell this from an answer lost after a commit.
    ResetBeforeForward,
    /// Forward the request, let the API server answer, then cut the request without
    /// passing the answer on.
    DropAnswer,
    /// Read the request and never answer it (nothing is forwarded).
    Hang,
    /// Hold the request until the fault is switched to another, then forward it: a server
    /// that answers nothing for as long as a test needs to look at what waits on it.
    Gate,
}

/// Which requests get the fault.
#[derive(Debug, Clone, Copy)]
struct Plan {
    fault: Fault,
    /// Every `every`-th eligible request (1 = all of them).
    every: u64,
    /// Only PUT, POST, PATCH and DELETE are eligible.
    writes_only: bool,
}

/// What the proxy did, by count.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests received.
    pub requests: AtomicU64,
    /// Requests forwarded to the API server.
    pub forwarded: AtomicU64,
    /// Requests that got the fault.
    pub injected: AtomicU64,
    /// Writes the API server accepted (2xx) whose answer was dropped.
    pub committed_and_dropped: AtomicU64,
    /// Writes whose connection was reset before they were forwarded.
    pub writes_reset: AtomicU64,
    /// Requests read and never answered (the `Hang` fault).
    pub hung: AtomicU64,
    /// TCP connections accepted.
    pub connections: AtomicU64,
}

/// A running fault proxy; it stops with the test process.
pub struct HttpFaultProxy {
    pub port: u16,
    plan: Arc<watch::Sender<Plan>>,
    pub counters: Arc<Counters>,
}

fn is_write(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::PUT | http::Method::POST | http::Method::PATCH | http::Method::DELETE
    )
}

/// A Kubernetes Status body.
fn status_answer(code: u16, reason: &str, retry_after: Option<u32>) -> http::Response<Full<Bytes>> {
    let mut details = serde_json::Map::new();
    if let Some(seconds) = retry_after {
        details.insert("retryAfterSeconds".into(), seconds.into());
    }
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected by the fault proxy: {reason}"),
        "reason": reason, "details": details, "code": code,
    });
    let mut response = http::Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if let Some(seconds) = retry_after {
        response = response.header("retry-after", seconds.to_string());
    }
    response
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

/// Why a connection was cut on purpose (hyper closes it without answering).
#[derive(Debug)]
struct Cut(&'static str);

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Cut {}

type Upstream = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl HttpFaultProxy {
    /// Starts a proxy in front of `cp`'s API server on a free port, passing traffic and
    /// speaking HTTP/2 to clients that offer it, as the API server does.
    pub async fn start(cp: &ControlPlane) -> HttpFaultProxy {
        Self::start_with(cp, true).await
    }

    /// Like `start`, but speaking HTTP/1.1 only (no ALPN), like a proxy without HTTP/2.
    pub async fn start_http1(cp: &ControlPlane) -> HttpFaultProxy {
        Self::start_with(cp, false).await
    }

    async fn start_with(cp: &ControlPlane, http2: bool) -> HttpFaultProxy {
        let pki = cp.dir.join("pki");
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(pki.join("serving.crt"))
                .expect("serving.crt")
                .collect::<Result<_, _>>()
                .expect("parse serving.crt");
        let key = PrivateKeyDer::from_pem_file(pki.join("serving.key")).expect("serving.key");
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config");
        if http2 {
            server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));

        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(pki.join("ca.crt")).expect("ca.crt") {
            roots.add(ca.expect("parse ca.crt")).expect("add CA");
        }
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_root_certificates(roots)
            .with_no_client_auth();
        // HTTP/2 to the API server too: one connection, however many requests are held.
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client)
            .https_only()
            .enable_http2()
            .build();
        let upstream: Upstream = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(connector);
        let target = format!("https://127.0.0.1:{}", cp.api_port());

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let plan = Arc::new(watch::Sender::new(Plan {
            fault: Fault::Pass,
            every: 1,
            writes_only: false,
        }));
        let counters = Arc::new(Counters::default());
        let (p, c) = (plan.clone(), counters.clone());
        tokio::spawn(async move {
            let eligible = Arc::new(AtomicU64::new(0));
            while let Ok((tcp, _)) = listener.accept().await {
                c.connections.fetch_add(1, Ordering::Relaxed);
                let _ = tcp.set_nodelay(true);
                let (acceptor, upstream, target) =
                    (acceptor.clone(), upstream.clone(), target.clone());
                let (plan, counters, eligible) = (p.clone(), c.clone(), eligible.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let (upstream, target) = (upstream.clone(), target.clone());
                        let (plan, counters, eligible) =
                            (plan.clone(), counters.clone(), eligible.clone());
                        async move {
                            handle(request, &upstream, &target, &plan, &counters, &eligible).await
                        }
                    });
                    let io = TokioIo::new(tls);
                    if http2 {
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection(io, service)
                            .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, service)
                            .await;
                    }
                });
            }
        });
        HttpFaultProxy {
            port,
            plan,
            counters,
        }
    }

    /// Injects `fault` into every `every`-th request (writes only, when `writes_only`).
    pub fn inject(&self, fault: Fault, every: u64, writes_only: bool) {
        self.plan.send_replace(Plan {
            fault,
            every: every.max(1),
            writes_only,
        });
    }

    /// Passes everything again (requests already hanging stay hung; held ones go on).
    pub fn pass(&self) {
        self.inject(Fault::Pass, 1, false);
    }

    /// Hangs every request from now on: read, never answered.
    pub fn hang(&self) {
        self.inject(Fault::Hang, 1, false);
    }

    pub fn count(&self, counter: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        counter(&self.counters).load(Ordering::Relaxed)
    }

    /// A copy of `cp`'s admin kubeconfig whose server is this proxy, written into `dir`.
    pub fn kubeconfig(&self, cp: &ControlPlane, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(cp.admin_kubeconfig())
            .expect("kubeconfig")
            .replace(cp.server(), &format!("https://127.0.0.1:{}", self.port));
        let path = dir.join("faulty.kubeconfig");
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }
}

async fn handle(
    request: http::Request<Incoming>,
    upstream: &Upstream,
    target: &str,
    plans: &watch::Sender<Plan>,
    counters: &Counters,
    eligible: &AtomicU64,
) -> Result<http::Response<Full<Bytes>>, Cut> {
    counters.requests.fetch_add(1, Ordering::Relaxed);
    // Subscribed before the plan is read: a switch after the read is never missed.
    let mut switched = plans.subscribe();
    let plan = *switched.borrow_and_update();
    let write = is_write(request.method());
    let chosen = plan.fault != Fault::Pass
        && (!plan.writes_only || write)
        && eligible
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(plan.every);
    let fault = if chosen { plan.fault } else { Fault::Pass };
    if chosen {
        counters.injected.fetch_add(1, Ordering::Relaxed);
    }
    match fault {
        Fault::TooManyRequests => return Ok(status_answer(429, "TooManyRequests", Some(1))),
        Fault::Unavailable => return Ok(status_answer(503, "ServiceUnavailable", None)),
        Fault::ResetBeforeForward => {
            // Cut only once the body is in: a cut while the sidecar is still handing the
            // body over is one it may rightly retry (the server cannot have applied a
            // request it never received whole), which would make the count of injected
            // faults say nothing about the answers.
            let _ = request.into_body().collect().await;
            if write {
                counters.writes_reset.fetch_add(1, Ordering::Relaxed);
            }
            return Err(Cut("reset before forwarding"));
        }
        Fault::Latency(delay) => tokio::time::sleep(delay).await,
        Fault::Gate => {
            let _ = switched.wait_for(|plan| plan.fault != Fault::Gate).await;
        }
        Fault::Hang => {
            counters.hung.fetch_add(1, Ordering::Relaxed);
            let _ = request.into_body().collect().await;
            return std::future::pending().await;
        }
        Fault::Pass | Fault::DropAnswer => {}
    }
    let (mut parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Err(Cut("request body cut short"));
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    parts.uri = format!("{target}{path}").parse().expect("uri");
    parts.headers.remove(http::header::HOST);
    counters.forwarded.fetch_add(1, Ordering::Relaxed);
    let Ok(response) = upstream
        .request(http::Request::from_parts(parts, Full::new(body)))
        .await
    else {
        return Err(Cut("the API server did not answer"));
    };
    let (parts, body) = response.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Err(Cut("the API server's answer was cut short"));
    };
    if fault == Fault::DropAnswer {
        if write && parts.status.is_success() {
            counters
                .committed_and_dropped
                .fetch_add(1, Ordering::Relaxed);
        }
        return Err(Cut("answer dropped after the API server committed"));
    }
    Ok(http::Response::from_parts(parts, Full::new(body)))
}
