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
//!   refused ([`ApplyError::CelTooCostly`]). An expression over the limit even for an
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
//!   ([`ApplyError::CelBusy`]). A cheap program evaluated inline takes no slot: its cost
//!   bound is its bound.
//! - **Messages** quote at most a short excerpt of the source or of a value.
//!
//! `compile` has the token pass, the parse, the checks and the rewrite; `estimate` the
//! cost model; `eval` the threads, the resolver and one evaluation's run.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock, Mutex, mpsc};
use std::time::Duration;

use cel::IdedExpr;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::mutation::{ApplyError, FieldViolation};

mod bound;
mod compile;
mod estimate;
mod eval;
mod source;
#[cfg(test)]
mod tests;

use compile::{compile_here, depth, names_object};
use estimate::Estimator;
use eval::{COMPILERS, Job, POOL, estimate, evaluate};
pub use source::short;

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
const MAX_NESTING: usize = 64;
/// The parser's own recursion limit.
const PARSER_MAX_RECURSION: u16 = 64;
/// The longest chain of `.f` / `[i]` after one operand (the parser copies the chain at
/// every call on it, so a longer one costs quadratic time to parse).
const MAX_CHAIN: usize = CEL_MAX_DEPTH;
/// The most operators, selections, conditions and brackets inside one another the token
/// pass accepts (an upper bound of the AST depth, before the exact check).
const MAX_SCANNED_DEPTH: usize = 4 * CEL_MAX_DEPTH;
/// The longest excerpt of a source or value quoted in a message.
const EXCERPT: usize = 120;
/// The longest pattern of `matches`, and the most memory its compiled form may take.
const MAX_PATTERN: usize = 512;
const PATTERN_SIZE_LIMIT: usize = 32 * 1024;

/// Cost units of one value (its box and header) and of evaluating one node.
const VALUE: u64 = 32;
const NODE: u64 = 8;

/// How many nodes of the fresh object one estimate may follow precisely.
const EXACT_VISITS: u64 = 1 << 20;

/// The variable the compile-time rewrite reads at every comprehension step.
const STEP: &str = "@step";

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
const GRACE: Duration = Duration::from_millis(20);

/// How many evaluations may run at once: twice the cores, at least 4.
pub fn cel_concurrency() -> usize {
    POOL.size
}

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

/// Compiled programs by source (compiled within [`CelLimits::DEFAULT`]).
static COMPILED: LazyLock<Mutex<HashMap<String, Cel>>> = LazyLock::new(Default::default);

static CEL_ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(cel::Env::stdlib()));

/// A compiled CEL program: checked, rewritten with its step checks, shallow.
#[derive(Clone)]
pub struct Cel {
    program: Arc<IdedExpr>,
    /// Whether it names `object` at all (else the object is neither copied nor
    /// converted for it).
    reads_object: bool,
    /// Shallow enough to be evaluated on the caller's task when its estimate is small.
    inline: bool,
}

impl std::fmt::Debug for Cel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cel")
    }
}

impl Cel {
    /// Compiles `source`; `field` names it in errors. Fails with a field violation when
    /// the source does not parse, is too long or too deep, calls a function that is not
    /// supported, nests comprehensions, or costs more than [`CEL_MAX_COST`] even for an
    /// empty object. Runs on one of the compile threads; the caller blocks for it (well
    /// under a millisecond for ordinary expressions).
    ///
    /// Programs are kept by source ([`COMPILED_KEPT`] of them), so the many requests of
    /// a controller that sends the same expression compile it once.
    pub fn compile(field: &str, source: &str) -> Result<Cel, FieldViolation> {
        if let Some(cel) = COMPILED.lock().expect("compiled CEL").get(source) {
            return Ok(cel.clone());
        }
        let cel = Cel::compile_within(field, source, CelLimits::DEFAULT)?;
        let mut compiled = COMPILED.lock().expect("compiled CEL");
        if compiled.len() >= COMPILED_KEPT {
            compiled.clear();
        }
        compiled.insert(source.to_owned(), cel.clone());
        Ok(cel)
    }

    /// [`Cel::compile`], refusing at compile time what costs more than
    /// `limits.max_cost` on an empty object.
    pub fn compile_within(
        field: &str,
        source: &str,
        limits: CelLimits,
    ) -> Result<Cel, FieldViolation> {
        if source.trim().is_empty() {
            return Err(FieldViolation::new(field, "the CEL expression is empty"));
        }
        if source.len() > CEL_MAX_SOURCE {
            return Err(FieldViolation::new(
                field,
                format!("the CEL expression is longer than {CEL_MAX_SOURCE} bytes"),
            ));
        }
        let owned = source.to_owned();
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let compiled =
                std::panic::catch_unwind(AssertUnwindSafe(|| compile_here(&owned, limits)))
                    .unwrap_or_else(|_| Err(COMPILER_PANICKED.to_string()));
            let _ = tx.send(compiled);
        });
        // The caller blocks for the compile: well under a millisecond for ordinary
        // expressions, a few for the largest.
        let compiled = COMPILERS
            .send(job)
            .ok()
            .and_then(|()| rx.recv().ok())
            .unwrap_or_else(|| Err(COMPILER_PANICKED.to_string()));
        compiled
            .map(|program| Cel {
                reads_object: names_object(&program),
                inline: depth(&program) <= INLINE_MAX_DEPTH,
                program: Arc::new(program),
            })
            .map_err(|description| FieldViolation::new(field, description))
    }

    /// Evaluates the program with `object` bound to `fresh`, within [`CelLimits::DEFAULT`]
    /// and the caller's `deadline`.
    ///
    /// A program at most [`INLINE_MAX_DEPTH`] deep whose estimate on `fresh` is at most
    /// [`INLINE_MAX_COST`] is evaluated on the caller's task; any other on the pool.
    ///
    /// Errors: [`ApplyError::CelBusy`] when no evaluation slot frees up before the
    /// deadline (pool only); [`ApplyError::CelTooCostly`] when the estimate for this object is over
    /// the limit (nothing is evaluated); [`ApplyError::CelTooSlow`] /
    /// [`ApplyError::CelDeadline`] / [`ApplyError::CelTooManySteps`] when the evaluation
    /// was stopped; [`ApplyError::CelFailed`] when it failed on the object.
    pub async fn evaluate(
        &self,
        fresh: &Value,
        deadline: Option<Instant>,
    ) -> Result<Value, ApplyError> {
        self.evaluate_within(fresh, deadline, CelLimits::DEFAULT)
            .await
    }

    /// [`Cel::evaluate`] within other limits.
    pub async fn evaluate_within(
        &self,
        fresh: &Value,
        deadline: Option<Instant>,
        limits: CelLimits,
    ) -> Result<Value, ApplyError> {
        let fresh = if self.reads_object {
            fresh
        } else {
            &Value::Null
        };
        // A cheap, shallow program runs here, on the caller's task: the same estimate,
        // the same step and time limits and the caller's deadline bound it, and its cost
        // bound keeps it to microseconds, less than the hand-off to a pool thread.
        if self.inline {
            if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
                return Err(ApplyError::CelDeadline);
            }
            let estimated = estimate(&self.program, fresh, limits)?;
            if estimated <= INLINE_MAX_COST {
                let caller_at = deadline.map(|deadline| {
                    std::time::Instant::now() + deadline.saturating_duration_since(Instant::now())
                });
                return std::panic::catch_unwind(AssertUnwindSafe(|| {
                    evaluate(&self.program, fresh, limits, caller_at)
                }))
                .unwrap_or_else(|_| Err(ApplyError::CelFailed(EVALUATOR_PANICKED.into())));
            }
        }
        let pool = &*POOL;
        let acquire = pool.slots.clone().acquire_owned();
        let permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, acquire)
                .await
                .map_err(|_| ApplyError::CelBusy)?,
            None => acquire.await,
        }
        .expect("the CEL semaphore is never closed");
        let now = Instant::now();
        if deadline.is_some_and(|deadline| deadline <= now) {
            return Err(ApplyError::CelDeadline);
        }
        let caller_at = deadline
            .map(|deadline| std::time::Instant::now() + deadline.saturating_duration_since(now));
        let (tx, rx) = oneshot::channel();
        let program = self.program.clone();
        let fresh = fresh.clone();
        let job: Job = Box::new(move || {
            let _permit = permit; // the slot is busy until the evaluation really ends
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                estimate(&program, &fresh, limits)
                    .and_then(|_| evaluate(&program, &fresh, limits, caller_at))
            }))
            .unwrap_or_else(|_| Err(ApplyError::CelFailed(EVALUATOR_PANICKED.into())));
            let _ = tx.send(result);
            // `fresh`, the program's clone and every value are dropped here, on this
            // thread's stack.
        });
        if pool.jobs.send(job).is_err() {
            return Err(ApplyError::CelFailed("the CEL evaluator is gone".into()));
        }
        // The job ends by itself (estimating and converting are bounded by the object,
        // evaluating by the time limit); the caller's deadline is not waited past.
        let answer = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline + GRACE, rx).await,
            None => Ok(rx.await),
        };
        match answer {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ApplyError::CelFailed(EVALUATOR_PANICKED.into())),
            Err(_) => Err(ApplyError::CelDeadline),
        }
    }

    /// Evaluates a condition: it must return a bool.
    pub async fn holds(
        &self,
        fresh: &Value,
        deadline: Option<Instant>,
    ) -> Result<bool, ApplyError> {
        match self.evaluate(fresh, deadline).await? {
            Value::Bool(b) => Ok(b),
            other => Err(ApplyError::CelNotABool(
                crate::mutation::type_name(&other).into(),
            )),
        }
    }

    /// The estimated cost of evaluating this program on `fresh`.
    pub fn estimated_cost(&self, fresh: Option<&Value>) -> u64 {
        Estimator::new(fresh).whole(&self.program).0
    }
}

/// Said when the compiler panicked (a bug): the fuzz targets look for it.
pub const COMPILER_PANICKED: &str = "the CEL compiler failed on this expression";
/// Said when the evaluator panicked (a bug): the fuzz targets look for it.
pub const EVALUATOR_PANICKED: &str = "the CEL evaluator failed on this expression";
