//! The write loop's wing: every write is a [`member`] carried by one loop ([`run`]),
//! alone or in a batch with concurrent writes to the same object ([`queue`], group
//! commit). Around the member and the loop:
//!
//! - `resolve`: the start of every write, its target resolved through discovery;
//! - `queue`: group commit's queues, one per object, and their drivers;
//! - `run`: the loop, one for every write: an attempt, its end, a retry;
//! - `attempt`: one attempt of a batch: read once (or the remembered copy), folded,
//!   written once (or not at all, when nothing changed);
//! - `fold`: what a batch's members make of the object read;
//! - `ends`: how an attempt's end (written, refused, unanswered, missing, stale) becomes
//!   each member's answer or retry;
//! - `alone`: the writes that carry one request alone (a create, a server-side apply);
//! - `retry`: the one place the loop waits before it goes again;
//! - `member`: one request in the loop, and how its change is made.
//!
//! Imports run one way: queue → run → attempt → ends → fold → member, and each of them
//! down to `alone`, `retry`, `resolve` and the engine's rooms below (`api`, `memory`,
//! `decide`).

mod attempt;
mod ends;
mod fold;
mod member;
mod queue;
mod resolve;
mod retry;
mod run;
mod unfolded;

pub(super) use member::OwnCode;
pub use queue::MAX_MEMBERS;
pub(super) use queue::{Batcher, Sharing};
pub(super) use resolve::{Start, begin};
pub(super) use retry::back_off;
pub(super) use run::write_unshared;
