//! Readiness: probes the API server's `/readyz` and mirrors the answer into the
//! `grpc.health.v1` service, for the whole server ("") and for `safewrite.v1.WriterService`.
//! The sidecar starts NOT_SERVING and turns SERVING once the API server is ready, so a
//! pod's readiness probe holds traffic back instead of the sidecar crash-looping.

use std::time::Duration;

use tokio::sync::watch;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tracing::{info, warn};

/// The gRPC service names whose health this module reports.
const SERVICES: [&str; 2] = ["", "safewrite.v1.WriterService"];

/// Sets every reported service to `status`.
pub async fn set_all(reporter: &HealthReporter, status: ServingStatus) {
    for service in SERVICES {
        reporter.set_service_status(service, status).await;
    }
}

/// Probes `/readyz` every `interval` until `stop` turns true, logging only transitions.
pub async fn run(
    client: kube::Client,
    reporter: HealthReporter,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ready: Option<bool> = None;
    loop {
        let probe = probe(&client, interval.max(Duration::from_secs(1))).await;
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
async fn probe(client: &kube::Client, timeout: Duration) -> Result<(), String> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|err| err.to_string())?;
    match tokio::time::timeout(timeout, client.request_text(request)).await {
        Err(_) => Err(format!("/readyz did not answer within {timeout:?}")),
        Ok(Err(err)) => Err(err.to_string()),
        Ok(Ok(body)) if body.trim() == "ok" => Ok(()),
        Ok(Ok(body)) => Err(format!("/readyz answered {:?}", body.trim())),
    }
}
