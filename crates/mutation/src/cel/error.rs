//! Why a CEL program could not be evaluated on the fresh object, or was stopped. The
//! mutation wing converts it into its own error (`ApplyError::Cel`), the one the engine
//! maps; this file imports nothing of the wing.

/// Why a CEL evaluation failed or was stopped. Depends on the object, not only on the
/// request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    /// The CEL expression failed on the current object (e.g. a missing key). The
    /// message is short: it never quotes more than an excerpt of a value.
    #[error("CEL expression failed on the current object: {0}")]
    Failed(String),
    /// The CEL condition did not return a bool.
    #[error("CEL condition must return a bool, returned {0}")]
    NotABool(String),
    /// The CEL evaluation ran past its time bound and was stopped.
    #[error("CEL evaluation took longer than {0:?} and was stopped; simplify the expression")]
    TooSlow(std::time::Duration),
    /// The estimated cost of the CEL expression on the current object is over the
    /// limit: nothing was evaluated.
    #[error(
        "CEL expression too costly on the current object: estimated cost {cost} exceeds the limit of {limit} (about bytes allocated); iterate over less, or build smaller values"
    )]
    TooCostly {
        /// The estimated cost, in the evaluator's units (about bytes allocated).
        cost: u64,
        /// The largest cost allowed, in the same units.
        limit: u64,
    },
    /// The estimated result of the CEL expression on the current object is larger than
    /// allowed: nothing was evaluated.
    #[error(
        "CEL result too large: its estimated size {size} exceeds the limit of {limit} (about bytes; the limit grows with the object)"
    )]
    ResultTooLarge {
        /// The estimated size of the result, in about bytes.
        size: u64,
        /// The largest size allowed, in about bytes; it grows with the object.
        limit: u64,
    },
    /// The CEL evaluation took more comprehension steps than allowed and was stopped.
    #[error("CEL evaluation took more than {0} comprehension steps and was stopped")]
    TooManySteps(u64),
    /// No CEL evaluation slot became free before the caller's deadline: the sidecar is
    /// busy evaluating other callers' expressions.
    #[error(
        "no CEL evaluation slot became free before the deadline (the sidecar is busy evaluating CEL); retry later or give the call a longer deadline"
    )]
    Busy,
    /// The caller's deadline came while the CEL expression was being evaluated.
    #[error("the deadline passed while the CEL expression was being evaluated")]
    Deadline,
}

/// Said when the compiler panicked (a bug): the fuzz targets look for it.
pub const COMPILER_PANICKED: &str = "the CEL compiler failed on this expression";
/// Said when the evaluator panicked (a bug): the fuzz targets look for it.
pub const EVALUATOR_PANICKED: &str = "the CEL evaluator failed on this expression";
