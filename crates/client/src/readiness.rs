//! Readiness: probes the API server's `/readyz` and mirrors the answer into the
//! `grpc.health.v1` service, for the whole server ("") and for `safewrite.v1.WriterService`.
//! The sidecar starts NOT_SERVING and turns SERVING once the API server is ready, so a
//! pod's readiness probe holds traffic back instead of the sidecar crash-looping.
//!
//! The probe goes through the client stack like every request (same connection, same
//! timeout layer, traced and counted) but marked [`Readiness`]:
//!
//! - it takes no rate-limit slot, so the sidecar's own load (callers queued for the
//!   limiter) can never make the API server look unready;
//! - it is not breaker traffic: not refused while the breaker is open (health reports
//!   the API server's readiness, not the breaker's state, and returns to SERVING as soon
//!   as `/readyz` answers), and not counted (a probe every few seconds must neither reset
//!   the fault count of failing writes, nor become or hold the half-open probe, nor
//!   close the breaker on the strength of `/readyz` alone).

use std::time::Duration;

use tokio::sync::watch;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tracing::{info, warn};

use safewrite_api::deadline::AnswerBy;

use super::apiserver;
use super::context::Readiness;
use super::handle::ApiClient;

/// The gRPC service names whose health this module reports.
const SERVICES: [&str; 2] = ["", "safewrite.v1.WriterService"];

/// The bounds of one probe's timeout (it follows the interval between the two).
const PROBE_TIMEOUT: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(5));

/// Sets every reported service to `status`.
pub async fn set_all(reporter: &HealthReporter, status: ServingStatus) {
    for service in SERVICES {
        reporter.set_service_status(service, status).await;
    }
}

/// Probes `/readyz` every `interval` until `stop` turns true, logging only transitions.
pub async fn run(
    client: ApiClient,
    reporter: HealthReporter,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ready: Option<bool> = None;
    let timeout = interval.clamp(PROBE_TIMEOUT.0, PROBE_TIMEOUT.1);
    loop {
        let probe = probe(&client, timeout).await;
        if *stop.borrow() {
            return;
        }
        match (&probe, ready) {
            (Ok(()), Some(true)) | (Err(_), Some(false)) => {}
            (Ok(()), _) => {
                info!("API server is ready; serving");
                set_all(&reporter, ServingStatus::Serving).await;
            }
            (Err(reason), _) => {
                warn!(%reason, "API server is not ready; health is NOT_SERVING until it is");
                set_all(&reporter, ServingStatus::NotServing).await;
            }
        }
        ready = Some(probe.is_ok());
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One probe of `/readyz`, bounded by `timeout`. The error says why in a few words.
pub async fn probe(client: &ApiClient, timeout: Duration) -> Result<(), String> {
    let mut request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|err| err.to_string())?;
    request.extensions_mut().insert(Readiness);
    let answer = apiserver::send(client, request, Some(timeout), AnswerBy::NONE)
        .await
        .map_err(|err| err.to_string())?;
    let body = String::from_utf8_lossy(&answer.body);
    match (answer.code, body.trim()) {
        (200, "ok") => Ok(()),
        (code, body) => Err(format!(
            "/readyz answered {code}: {:?}",
            body.chars().take(200).collect::<String>()
        )),
    }
}
