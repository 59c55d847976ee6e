//! The demo tells the truth: the API requests its summary counts for the writes through
//! the sidecar (the API server's own `apiserver_request_total`, through
//! `safewrite::requests`) are the requests the sidecar says it sent
//! (`safewrite_api_requests_total`).

use crate::support;

use std::process::Command;

use support::{ControlPlane, Sidecar};

/// The sidecar's own count of its requests for objects (discovery left out).
fn sidecar_requests(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("safewrite_api_requests_total{"))
        .filter(|l| !l.contains("verb=\"discovery\""))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

// Its own control plane: the API server's counts are of every client's requests.
#[tokio::test]
async fn the_demos_request_count_is_the_sidecars_own() {
    let cp = ControlPlane::start();
    let admin = cp.admin_kubeconfig().display().to_string();
    // The readiness probe's requests would count on the sidecar's side only.
    let sidecar = Sidecar::start(&["--kubeconfig", admin.as_str(), "--readiness-interval", "1h"]);
    let contend = support::repo_root().join("target/debug/examples/contend");
    if !contend.exists() {
        let built = Command::new("cargo")
            .args(["build", "--quiet", "--example", "contend"])
            .current_dir(support::repo_root())
            .status()
            .expect("run cargo");
        assert!(built.success(), "build the demo's writers");
    }
    // The readiness probe's first request is made as the sidecar starts: count after it.
    sidecar.wait_ready(std::time::Duration::from_secs(30));
    let before = sidecar_requests(&sidecar.metrics());
    let addr = sidecar.endpoint().trim_start_matches("http://").to_string();
    let out = Command::new(&contend)
        .args([addr.as_str(), "default", admin.as_str(), "4", "10"])
        .output()
        .expect("run the demo's writers");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = sidecar_requests(&sidecar.metrics());
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("API requests"))
        .unwrap_or_else(|| panic!("no API requests line: {stdout}"));
    let counted: f64 = line
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"));
    // The demo reads the final value back through the sidecar after its count: a
    // remembered copy confirmed by one live read.
    let sent = after - before;
    assert!(counted >= 1.0, "{line}");
    assert!(
        (sent - 1.0..=sent).contains(&counted),
        "the demo counted {counted}, the sidecar sent {sent}: {stdout}"
    );
    println!("demo: {line}; the sidecar's own count {sent} (one of them the read-back)");
}
