//! CEL for mutations and conditions, compiled and evaluated where no expression can hurt
//! the process: not its stack, its memory, its threads or other callers' time.
//!
//! - **Stack.** No parse runs on an async worker: [`Cel::compile`] parses on one of a few
//!   compile threads with a [`COMPILE_STACK`] stack. Evaluation runs on a small pool of
//!   threads with an [`EVAL_STACK`] stack, except for a program at most
//!   [`INLINE_MAX_DEPTH`] deep whose estimate for the object at hand is at most
//!   [`INLINE_MAX_COST`]: that one is evaluated on the caller's own task, within the same
//!   estimate, step, time and deadline bounds, because the hand-off to a pool thread and
//!   back costs more CPU than such an evaluation (an uncontended write's CEL increment
//!   is one). Before parsing, one pass over
//!   the tokens refuses sources whose nesting (brackets, chained `?:`), postfix chains
//!   (`.f` / `[i]`) or operator runs are longer than the parser or the evaluator should
//!   recurse (so even a refused AST is a few hundred levels at most); the
//!   parser (cel's Pratt parser, not the recursive ANTLR one) has its own recursion
//!   limit; then the AST depth is measured iteratively and an AST deeper than
//!   [`CEL_MAX_DEPTH`] is refused (and dropped on the compile thread). Every later walk
//!   (checks, rewrite, estimate, evaluation) is over an AST at most that deep.
//! - **Cost and memory.** Before every evaluation an estimated cost is computed from the
//!   AST, as Kubernetes does for CEL: anything read from `object` is bounded by the
//!   actual fresh object (exactly, for a static path such as `object.spec.items`),
//!   literals by their size, a comprehension costs its iterations times its body,
//!   `+` costs (and yields) the sum of its operands, and every function has a size
//!   rule; a function without one is refused at compile time. Units approximate bytes
//!   allocated plus a few per node evaluated; above [`CEL_MAX_COST`] the expression is
//!   refused ([`CelError::TooCostly`]). An expression over the limit even for an
//!   empty object is refused at compile time. Nested comprehensions are refused.
//! - **Time.** Every comprehension is rewritten at compile time to read a variable that
//!   only the evaluation's resolver serves, and only while the step budget
//!   ([`CEL_MAX_STEPS`]) and the time limit hold; map/filter keep cel's in-place append
//!   (the read is placed in their guard and appended element, not their loop
//!   condition). So every loop stops within one step of its limit, whether or not it
//!   reads `object`. The time limit is [`CEL_TIME_LIMIT`] (counted once the fresh
//!   object is converted to CEL) or the caller's deadline, whichever comes first.
//! - **Threads.** At most [`cel_concurrency`] evaluations run at once on the pool (one
//!   per thread); waiting for a slot honours the caller's deadline
//!   ([`CelError::Busy`]). A cheap program evaluated inline takes no slot: its cost
//!   bound is its bound.
//! - **Messages** quote at most a short excerpt of the source or of a value.
//!
//! By file: `program` (the [`Cel`] itself), `limits` (every bound), `source` (the token
//! pass and excerpts), `ast` (walks and shapes of the AST), `compile` (the parse, the
//! checks and the rewrite), `bound` and `cost` (the units of the estimate), `estimate`
//! (the cost model), `eval` (the threads, the resolver and one evaluation's run),
//! `error` ([`CelError`]).

mod ast;
mod bound;
mod compile;
mod cost;
mod error;
mod estimate;
mod eval;
mod limits;
mod program;
mod source;
#[cfg(test)]
mod tests;

pub use self::error::{COMPILER_PANICKED, CelError, EVALUATOR_PANICKED};
pub use self::eval::cel_concurrency;
pub use self::limits::{
    CEL_MAX_COST, CEL_MAX_DEPTH, CEL_MAX_RESULT, CEL_MAX_SOURCE, CEL_MAX_STEPS, CEL_TIME_LIMIT,
    COMPILE_STACK, COMPILED_KEPT, CelLimits, EVAL_STACK, INLINE_MAX_COST, INLINE_MAX_DEPTH,
};
pub use self::program::Cel;
