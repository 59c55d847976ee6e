//! The metrics of the write loop: group commit's batch sizes, conflicts met and the
//! memory's lookups. Built by whoever builds the engine and handed to
//! it; the sidecar registers them in its registry.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The write loop's metric families; clones record into the same families.
#[derive(Clone, Debug)]
pub struct EngineMetrics(Arc<EngineFamilies>);

#[derive(Debug)]
struct EngineFamilies {
    batch_size: Histogram,
    conflicts: Counter,
    memory_lookups: Family<Labels, Counter>,
    memory_stale: Counter,
}

impl Default for EngineMetrics {
    fn default() -> Self {
        Self(Arc::new(EngineFamilies {
            batch_size: Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            conflicts: Counter::default(),
            memory_lookups: Family::default(),
            memory_stale: Counter::default(),
        }))
    }
}

impl EngineMetrics {
    /// Registers every family in `registry`, in the order of the exposition.
    pub fn register(&self, registry: &mut Registry) {
        let families = &self.0;
        registry.register(
            "safewrite_batch_size",
            "Requests carried by each write of a group commit",
            families.batch_size.clone(),
        );
        registry.register(
            "safewrite_conflicts",
            "409 Conflict answers met (one for each write refused, however many requests it carried)",
            families.conflicts.clone(),
        );
        registry.register(
            "safewrite_memory_lookups",
            "Writes that looked for a remembered copy of their object, by result",
            families.memory_lookups.clone(),
        );
        registry.register(
            "safewrite_memory_stale",
            "Remembered copies that turned out stale",
            families.memory_stale.clone(),
        );
    }

    /// A group commit's write carried `members` requests.
    pub fn batch(&self, members: usize) {
        self.0.batch_size.observe(members as f64);
    }

    /// A 409 Conflict was met.
    pub fn conflict(&self) {
        self.0.conflicts.inc();
    }

    /// A write looked for a remembered copy of its object.
    pub fn memory(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.0
            .memory_lookups
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    /// A remembered copy turned out stale.
    pub fn memory_stale(&self) {
        self.0.memory_stale.inc();
    }
}
