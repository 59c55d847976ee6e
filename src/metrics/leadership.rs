//! The metrics of leadership (`rpc Lead`, `src/lease/`) and of the writes fenced by it:
//! which Leases this sidecar's campaigns lead, their transitions, and fenced writes
//! refused. [`LeadershipMetrics`] registers itself into the process's registry; the
//! `lease` label is bounded by [`LeaseLabels`].

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// How many distinct Leases get a `lease` label of their own.
const MAX_LEASE_LABELS: usize = 64;

/// The leadership metrics, registered once by [`LeadershipMetrics::register`].
#[derive(Default)]
pub(super) struct LeadershipMetrics {
    leases: LeaseLabels,
    leading: Family<Labels, Gauge>,
    transitions: Family<Labels, Counter>,
    fence_refusals: Family<Labels, Counter>,
}

impl LeadershipMetrics {
    /// Registers every leadership metric into `registry`.
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "safewrite_lease_leading",
            "Campaigns of this sidecar that lead the Lease, by Lease (1 while one leads)",
            self.leading.clone(),
        );
        registry.register(
            "safewrite_lease_transitions",
            "Campaigns that started or stopped leading, by Lease and the state entered",
            self.transitions.clone(),
        );
        registry.register(
            "safewrite_fence_refusals",
            "Fenced writes refused before they were sent, by reason",
            self.fence_refusals.clone(),
        );
    }

    /// What `Metrics::leadership` says.
    pub(super) fn changed(&self, lease: &str, leading: bool) {
        let label = self.leases.label(lease);
        let to = {
            let gauge = self.leading.get_or_create(&vec![("lease", label.clone())]);
            if leading {
                gauge.inc();
                "leading"
            } else {
                gauge.dec();
                "not_leading"
            }
        };
        self.transitions
            .get_or_create(&vec![("lease", label), ("to", to.to_string())])
            .inc();
    }

    /// What `Metrics::fence_refused` says.
    pub(super) fn fence_refused(&self, reason: &str) {
        let reason = match reason {
            "fenced" => "fenced",
            "not_leader" => "not_leader",
            _ => "other",
        };
        self.fence_refusals
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }
}

/// The `lease` label's values: `namespace/name` for the first [`MAX_LEASE_LABELS`]
/// Leases this process campaigned for, `other` for any later one. Callers name Leases, so
/// without a bound a caller campaigning for one Lease per object would make one series
/// per object; a sidecar normally campaigns for one or two.
#[derive(Default)]
struct LeaseLabels(Mutex<HashSet<String>>);

impl LeaseLabels {
    /// The label of `lease`; remembers it while fewer than [`MAX_LEASE_LABELS`] are.
    fn label(&self, lease: &str) -> String {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if known.contains(lease) {
            return lease.to_string();
        }
        if known.len() < MAX_LEASE_LABELS {
            known.insert(lease.to_string());
            return lease.to_string();
        }
        "other".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(metrics: &LeadershipMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn lease_labels_are_a_bounded_set() {
        let labels = LeaseLabels::default();
        for i in 0..MAX_LEASE_LABELS {
            assert_eq!(labels.label(&format!("ns/l{i}")), format!("ns/l{i}"));
        }
        assert_eq!(labels.label("ns/one-too-many"), "other");
        assert_eq!(labels.label("ns/l0"), "ns/l0");
    }

    #[test]
    fn the_gauge_follows_the_transitions() {
        let m = LeadershipMetrics::default();
        m.changed("team-a/ctl", true);
        m.changed("team-a/ctl", false);
        m.changed("team-a/ctl", true);
        let text = render(&m);
        for line in [
            "safewrite_lease_leading{lease=\"team-a/ctl\"} 1",
            "safewrite_lease_transitions_total{lease=\"team-a/ctl\",to=\"leading\"} 2",
            "safewrite_lease_transitions_total{lease=\"team-a/ctl\",to=\"not_leading\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn fence_reasons_are_a_bounded_set() {
        let m = LeadershipMetrics::default();
        m.fence_refused("fenced");
        m.fence_refused("not_leader");
        m.fence_refused("SomethingElse");
        let text = render(&m);
        for reason in ["fenced", "not_leader", "other"] {
            let line = format!("safewrite_fence_refusals_total{{reason=\"{reason}\"}} 1");
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
    }
}
