//! Leadership as a service: a campaign for a `coordination.k8s.io/v1` Lease on behalf of
//! a caller (`rpc Lead`), with client-go's leader-election semantics and an epoch kept on
//! the Lease that grows with every acquisition. `timing` holds the validated settings,
//! `record` the Lease's fields and the bodies of its writes, `campaign` the loop. See
//! `docs/leadership.md`.

pub mod campaign;
pub mod record;
pub mod timing;

#[cfg(test)]
mod tests;

pub use campaign::{Campaign, LeaseEvent, NotLeading};
pub use record::EPOCH_ANNOTATION;
pub use timing::{LeaseName, LeaseTimings, identity};
