//! An API server's own count of the requests it served, read from its `/metrics`
//! (`apiserver_request_total`): one place, for the demo, the bench and the tests, that
//! knows the metric's `verb` label holds HTTP methods (`PUT`, `POST`), not the Kubernetes
//! verbs (`update`, `create`) that safewrite's own `safewrite_api_requests_total` uses.

/// The `verb` values of the reads.
pub const READS: &[&str] = &["GET", "LIST", "WATCH"];

/// The `verb` values of the writes (server-side apply is `APPLY`).
pub const WRITES: &[&str] = &["PUT", "POST", "PATCH", "APPLY", "DELETE"];

/// The requests for `resource` (e.g. `configmaps`) with one of `verbs`, summed over every
/// other label, in the API server's metrics text `metrics`.
pub fn count(metrics: &str, resource: &str, verbs: &[&str]) -> f64 {
    let resource = format!("resource=\"{resource}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains(&resource))
        .filter(|l| verbs.iter().any(|v| l.contains(&format!("verb=\"{v}\""))))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_http_methods_of_one_resource() {
        use super::{READS, WRITES, count};
        let text = r#"
# HELP apiserver_request_total
apiserver_request_total{code="200",component="apiserver",resource="configmaps",verb="GET"} 9
apiserver_request_total{code="200",component="apiserver",resource="configmaps",verb="PUT"} 55
apiserver_request_total{code="409",component="apiserver",resource="configmaps",verb="PUT"} 3
apiserver_request_total{code="201",component="apiserver",resource="configmaps",verb="POST"} 1
apiserver_request_total{code="200",component="apiserver",resource="secrets",verb="PUT"} 7
apiserver_request_total{code="200",component="apiserver",resource="configmaps",verb="UPDATE"} 100
"#;
        assert_eq!(count(text, "configmaps", READS), 9.0);
        assert_eq!(count(text, "configmaps", WRITES), 59.0);
        assert_eq!(count(text, "secrets", WRITES), 7.0);
    }
}
