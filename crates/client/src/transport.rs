//! The bottom of the stack: HTTP to the API server.
//!
//! Over TLS the API server speaks HTTP/2 (negotiated by ALPN), so every request is a
//! stream on one multiplexed connection: a thousand requests in flight share one
//! socket, and the pool's "connecting" lock makes concurrent first requests wait for that
//! one connection instead of each dialling its own. If the server does not negotiate
//! HTTP/2 (a proxy that speaks only HTTP/1.1), or the cluster URL is plain `http`, the
//! sidecar falls back, for the rest of its life, to HTTP/1.1 with at most
//! [`MAX_HTTP1_CONNECTIONS`] requests in flight and as many connections (each connection
//! holds a permit until it closes): a request waits for a free one. The connection that
//! revealed the missing HTTP/2 fails as a connect failure (nothing was sent).
//!
//! Connecting (TCP and TLS) is bounded by the configuration's connect timeout.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper::body::{Body, Frame, SizeHint};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use kube::client::ConfigExt as _;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{BoxError, Service};
use tracing::warn;

use super::error::ConnectError;
use super::timeout::Handoff;

/// The most HTTP/1.1 connections to the API server when it does not speak HTTP/2.
pub const MAX_HTTP1_CONNECTIONS: usize = 32;

/// How often an idle HTTP/2 connection is pinged, so that a dead one is noticed.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The connect timeout when the configuration has none.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The request body below the timeout layer.
pub type RequestBody = Handoff<kube::client::Body>;

type Connector = Checked<HttpsConnector<HttpConnector>>;

/// HTTP/2 to the API server, or a capped HTTP/1.1 pool when it does not speak HTTP/2.
#[derive(Clone)]
pub struct Http {
    h2: Client<Connector, RequestBody>,
    h1: Client<Connector, RequestBody>,
    /// Set once the server is known not to speak HTTP/2.
    http1_only: Arc<AtomicBool>,
    /// HTTP/1.1 requests in flight.
    requests: Arc<Semaphore>,
}

// === impl Http ===

impl Http {
    /// The HTTP clients for `config`'s cluster, TLS settings and connect timeout.
    ///
    /// # Errors
    /// [`ConnectError::Client`] for unusable TLS data, [`ConnectError::ServerName`] for
    /// a bad `tls-server-name`, [`ConnectError::Proxy`] when a proxy is configured.
    pub fn new(config: &kube::Config) -> Result<Self, ConnectError> {
        if let Some(proxy) = &config.proxy_url {
            return Err(ConnectError::Proxy(proxy.to_string()));
        }
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let tls = config
            .rustls_client_config()
            .map_err(ConnectError::Client)?;
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let builder = match &config.tls_server_name {
            Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(
                name.clone()
                    .try_into()
                    .map_err(|_| ConnectError::ServerName(name.clone()))?,
            )),
            None => builder,
        };
        // ALPN offers both, so that a server without HTTP/2 says so.
        let https = builder.enable_all_versions().wrap_connector(tcp);
        let plain = config.cluster_url.scheme() != Some(&http::uri::Scheme::HTTPS);
        let http1_only = Arc::new(AtomicBool::new(plain));
        let timeout = config.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let h2_connector = Checked {
            inner: https.clone(),
            timeout,
            fallback: Some(http1_only.clone()),
            connections: None,
        };
        let h1_connector = Checked {
            inner: https,
            timeout,
            fallback: None,
            connections: Some(Arc::new(Semaphore::new(MAX_HTTP1_CONNECTIONS))),
        };
        let h2 = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(h2_connector);
        let h1 = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(MAX_HTTP1_CONNECTIONS)
            .build(h1_connector);
        Ok(Self {
            h2,
            h1,
            http1_only,
            requests: Arc::new(Semaphore::new(MAX_HTTP1_CONNECTIONS)),
        })
    }
}

impl Service<http::Request<RequestBody>> for Http {
    type Response = http::Response<ResponseBody>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        if !self.http1_only.load(Ordering::Relaxed) {
            let answer = self.h2.request(request);
            return Box::pin(async move {
                let response = answer.await?;
                Ok(response.map(|body| ResponseBody {
                    inner: body,
                    _connection: None,
                }))
            });
        }
        let (client, requests) = (self.h1.clone(), self.requests.clone());
        Box::pin(async move {
            // A connection is the request's until its answer's body is read.
            let connection = requests.acquire_owned().await?;
            let response = client.request(request).await?;
            Ok(response.map(|body| ResponseBody {
                inner: body,
                _connection: Some(connection),
            }))
        })
    }
}

/// An answer's body; on HTTP/1.1 it holds the request's place among the connections.
#[derive(Debug)]
pub struct ResponseBody {
    inner: Incoming,
    _connection: Option<OwnedSemaphorePermit>,
}

// === impl ResponseBody ===

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connector that bounds connecting by a timeout and, for the HTTP/2 client, checks
/// that the server negotiated HTTP/2 (else it switches the sidecar to HTTP/1.1); for the
/// HTTP/1.1 client, each connection holds one of a fixed number of permits until closed.
#[derive(Clone)]
struct Checked<C> {
    inner: C,
    timeout: Duration,
    fallback: Option<Arc<AtomicBool>>,
    connections: Option<Arc<Semaphore>>,
}

// === impl Checked ===

impl<C> Service<http::Uri> for Checked<C>
where
    C: Service<http::Uri, Response = MaybeHttpsStream<TokioIo<TcpStream>>>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = Stream;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let (timeout, fallback) = (self.timeout, self.fallback.clone());
        let connections = self.connections.clone();
        Box::pin(async move {
            let permit = match connections {
                Some(connections) => Some(connections.acquire_owned().await?),
                None => None,
            };
            let io = tokio::time::timeout(timeout, connecting)
                .await
                .map_err(|_| format!("connecting took longer than {timeout:?}"))?
                .map_err(Into::into)?;
            if let Some(fallback) = fallback
                && !io.connected().is_negotiated_h2()
            {
                if !fallback.swap(true, Ordering::Relaxed) {
                    warn!(
                        max_connections = MAX_HTTP1_CONNECTIONS,
                        "the API server did not negotiate HTTP/2; using HTTP/1.1 from now on"
                    );
                }
                return Err("the API server does not speak HTTP/2; switched to HTTP/1.1".into());
            }
            Ok(Stream {
                io,
                _permit: permit,
            })
        })
    }
}

/// A connection to the API server, holding its permit (HTTP/1.1) until it is closed.
pub struct Stream {
    io: MaybeHttpsStream<TokioIo<TcpStream>>,
    _permit: Option<OwnedSemaphorePermit>,
}

// === impl Stream ===

impl Connection for Stream {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl Read for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}
