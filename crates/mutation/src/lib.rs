//! Mutations and CEL conditions: validated and compiled once per request, then applied
//! to the fresh object on every attempt.
//!
//! - JSON Patch (RFC 6902): a failing `test` operation is a precondition failure.
//! - JSON merge patch (RFC 7386).
//! - CEL: an expression over `object` (the fresh object) returning a map that is merged
//!   into it, so read-dependent changes ("increment", "append if absent") work from any
//!   language. Compiled and evaluated by [`cel`], which bounds stack, cost, memory, time
//!   and concurrency (see there).
//! - Server-side apply: carried as a configuration; the API server merges it.
//! - List entries (conditions, finalizers, owner references, keyed entries): [`entries`].
//!
//! The wing imports nothing of the engine, the service or the clients; the engine
//! imports it. By file: `kinds` (the [`Mutation`] itself), `error` ([`ApplyError`]),
//! `value` (type names, excerpts, JSON from a request field), `cel/`, `entries/`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cel;
pub mod entries;
mod error;
mod kinds;
mod value;

pub use self::cel::{CEL_MAX_SOURCE, CEL_TIME_LIMIT, Cel, CelError};
pub use self::entries::EntryChange;
pub use self::error::ApplyError;
pub use self::kinds::Mutation;
pub use self::value::{parse_json, short, type_name};
