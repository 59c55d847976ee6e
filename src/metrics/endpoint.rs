//! The metrics port: `GET /metrics` (OpenMetrics text), `/livez` and `/readyz`, for
//! Prometheus and HTTP probes.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health as _;
use tonic_health::server::HealthService;
use tracing::debug;

use crate::listen::{Pool, Tracked};

use super::Metrics;

/// Serves `GET /metrics` (`metrics`), `/livez` and `/readyz` (from `health`, the server's
/// grpc.health.v1 status) on `listener` until `stop` turns true, over HTTP/1
/// connections held to `pool`'s cap and timeouts; hyper also bounds the time to read
/// each request head (the pool's handshake timeout).
pub async fn serve(
    listener: TcpListener,
    pool: Arc<Pool>,
    health: HealthService,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let health = Arc::new(health);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(pool.limits().handshake_timeout);
    let incoming = pool.incoming(TcpIncoming::from(listener).with_nodelay(Some(true)));
    let mut incoming = std::pin::pin!(incoming);
    loop {
        let conn = tokio::select! {
            conn = incoming.next() => conn,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Some(Ok(conn)) = conn else { return };
        let activity = conn.activity();
        let builder = builder.clone();
        let health = health.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                // In flight until the response body is written.
                let active = Some(activity.start());
                let health = health.clone();
                let metrics = metrics.clone();
                async move {
                    let text = |status: http::StatusCode, body: &'static str| {
                        http::Response::builder()
                            .status(status)
                            .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                            .body(Full::new(Bytes::from_static(body.as_bytes())))
                    };
                    let response = match request.uri().path() {
                        "/metrics" => http::Response::builder()
                            .header(
                                http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )
                            .body(Full::new(Bytes::from(metrics.render()))),
                        "/livez" => text(http::StatusCode::OK, "ok\n"),
                        "/readyz" => {
                            if serving(&health).await {
                                text(http::StatusCode::OK, "ok\n")
                            } else {
                                text(
                                    http::StatusCode::SERVICE_UNAVAILABLE,
                                    "not ready: the API server is not ready (or the sidecar is draining)\n",
                                )
                            }
                        }
                        _ => text(
                            http::StatusCode::NOT_FOUND,
                            "metrics are at /metrics; probes at /livez and /readyz\n",
                        ),
                    };
                    let response = response.expect("static response parts");
                    Ok::<_, Infallible>(response.map(|body| Tracked::new(body, active)))
                }
            });
            if let Err(error) = builder.serve_connection(TokioIo::new(conn), service).await {
                debug!(%error, "metrics connection ended");
            }
        });
    }
}

/// Whether grpc.health.v1 says the whole server ("") is SERVING.
async fn serving(health: &HealthService) -> bool {
    let request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    health
        .check(request)
        .await
        .is_ok_and(|answer| answer.into_inner().status() == ServingStatus::Serving)
}
