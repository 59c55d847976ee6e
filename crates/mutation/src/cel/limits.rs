//! The bounds of compiling and evaluating: source length, depth, cost, result size,
//! steps, time, stacks, and the constants of the token pass and the cost model.

use std::time::Duration;

/// The longest CEL source accepted.
pub const CEL_MAX_SOURCE: usize = 16 * 1024;
/// The deepest AST accepted (each operator, call, selection, literal list or map, and
/// `?:` is one level).
pub const CEL_MAX_DEPTH: usize = 100;
/// How long one CEL evaluation may run (less when the caller's deadline is nearer).
pub const CEL_TIME_LIMIT: Duration = Duration::from_millis(250);
/// The largest estimated cost of one evaluation (units: about one byte allocated; each
/// node evaluated costs 8 more). Bounds the memory of an evaluation to a few MiB.
pub const CEL_MAX_COST: u64 = 10_000_000;
/// The largest estimated size of a result (same units) beyond twice the size of the
/// fresh object it is merged into.
pub const CEL_MAX_RESULT: u64 = 512 * 1024;
/// The most comprehension steps one evaluation may take (a runtime bound beside the
/// estimate).
pub const CEL_MAX_STEPS: u64 = 1_000_000;
/// The stack of the thread that parses and checks an expression.
pub const COMPILE_STACK: usize = 64 << 20;
/// The stack of each evaluation thread.
pub const EVAL_STACK: usize = 32 << 20;

/// The deepest bracket / `?:` nesting accepted by the token pass (the parser recurses
/// once per level).
pub(super) const MAX_NESTING: usize = 64;
/// The parser's own recursion limit.
pub(super) const PARSER_MAX_RECURSION: u16 = 64;
/// The longest chain of `.f` / `[i]` after one operand (the parser copies the chain at
/// every call on it, so a longer one costs quadratic time to parse).
pub(super) const MAX_CHAIN: usize = CEL_MAX_DEPTH;
/// The most operators, selections, conditions and brackets inside one another the token
/// pass accepts (an upper bound of the AST depth, before the exact check).
pub(super) const MAX_SCANNED_DEPTH: usize = 4 * CEL_MAX_DEPTH;
/// The longest excerpt of a source or value quoted in a message.
pub(super) const EXCERPT: usize = 120;
/// The longest pattern of `matches`, and the most memory its compiled form may take.
pub(super) const MAX_PATTERN: usize = 512;
pub(super) const PATTERN_SIZE_LIMIT: usize = 32 * 1024;

/// Cost units of one value (its box and header) and of evaluating one node.
pub(super) const VALUE: u64 = 32;
pub(super) const NODE: u64 = 8;

/// How many nodes of the fresh object one estimate may follow precisely.
pub(super) const EXACT_VISITS: u64 = 1 << 20;

/// The variable the compile-time rewrite reads at every comprehension step.
pub(super) const STEP: &str = "@step";

/// The largest estimated cost evaluated on the caller's own task instead of a pool
/// thread: at most this many bytes allocated (about), a few microseconds of work, so the
/// hand-off to a thread and back would cost more than the evaluation.
pub const INLINE_MAX_COST: u64 = 64 * 1024;
/// The deepest AST (after the rewrite) evaluated on the caller's own task: its recursion
/// stays far within an async worker's stack (see the test
/// `cheap_expressions_fit_a_worker_stack`). Deeper programs go to the pool's
/// [`EVAL_STACK`].
pub const INLINE_MAX_DEPTH: usize = 24;

/// How long past the caller's deadline the async side waits for an evaluation to say it
/// stopped before answering without it (the evaluation keeps its slot until it ends).
pub(super) const GRACE: Duration = Duration::from_millis(20);

/// The bounds of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CelLimits {
    /// The largest estimated cost.
    pub max_cost: u64,
    /// The most comprehension steps.
    pub max_steps: u64,
    /// The longest run.
    pub time: Duration,
    /// The largest estimated result, beside twice the fresh object's size (a result is
    /// held until the write ends, outside the evaluation slots).
    pub max_result: u64,
}

impl CelLimits {
    /// The limits of every request.
    pub const DEFAULT: CelLimits = CelLimits {
        max_cost: CEL_MAX_COST,
        max_steps: CEL_MAX_STEPS,
        time: CEL_TIME_LIMIT,
        max_result: CEL_MAX_RESULT,
    };
}

/// How many compiled programs are kept by source; when full, the cache starts over.
pub const COMPILED_KEPT: usize = 256;
