//! The writes controllers most often get wrong, each a read-dependent change to one entry
//! of a list, applied to the fresh object on every attempt with exact semantics:
//!
//! - status conditions, as apimachinery's `meta.SetStatusCondition` and
//!   `meta.RemoveStatusCondition` (an entry per `type`; `lastTransitionTime` moves only
//!   with `status`);
//! - finalizers, as `controllerutil.AddFinalizer` / `RemoveFinalizer`, with no new
//!   finalizer on an object being deleted;
//! - owner references, as `controllerutil.SetOwnerReference` /
//!   `SetControllerReference` / `RemoveOwnerReference`: matched by API group, kind and
//!   name (not uid, not version), replaced in place, with at most one controller
//!   (`AlreadyOwnedError`);
//! - entries of a list keyed by some of their fields (a `listType=map` list, or one that
//!   should have been), merged with RFC 7386.
//!
//! Every other entry, every field this code does not name, and the order of all of them
//! are kept. The request is checked here, once, before anything is sent; what depends on
//! the object (a path through a value that is not an object, a second controller, an
//! object being deleted) is an [`ApplyError`](crate::ApplyError).
//!
//! By file: `change` (what a change is), `parse` (the request's change, checked),
//! `apply` (the change applied to the fresh object), `owner` (owner references, matched
//! and written).

mod apply;
mod change;
mod owner;
mod parse;
#[cfg(test)]
mod tests;

pub use self::apply::is_gone;
pub use self::change::{CONDITIONS, Condition, EntryChange, FieldPath, Owner};
