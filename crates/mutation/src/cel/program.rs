//! A compiled CEL program ([`Cel`]): compiled once per source on a compile thread, then
//! evaluated on the caller's task or on the pool, within its limits.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock, Mutex, mpsc};

use cel::IdedExpr;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use safewrite_api::deadline::AnswerBy;
use safewrite_api::target::FieldViolation;

use super::ast::{Reads, depth, object_reads};
use super::compile::compile_here;
use super::error::{COMPILER_PANICKED, CelError, EVALUATOR_PANICKED};
use super::estimate::Estimator;
use super::eval::{COMPILERS, Job, POOL, estimate, evaluate};
use super::limits::{
    CEL_MAX_SOURCE, COMPILED_KEPT, CelLimits, GRACE, INLINE_MAX_COST, INLINE_MAX_DEPTH,
};
use crate::value::type_name;

/// Compiled programs by source (compiled within [`CelLimits::DEFAULT`]).
static COMPILED: LazyLock<Mutex<HashMap<String, Cel>>> = LazyLock::new(Default::default);

/// A compiled CEL program: checked, rewritten with its step checks, shallow.
#[derive(Clone)]
pub struct Cel {
    pub(super) program: Arc<IdedExpr>,
    /// What it can see of `object`: only that is converted for an evaluation (and when
    /// it reads none of it, the object is neither copied nor converted).
    pub(super) reads: Arc<Reads>,
    /// Shallow enough to be evaluated on the caller's task when its estimate is small.
    pub(super) inline: bool,
}

// === impl Cel ===

impl std::fmt::Debug for Cel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cel")
    }
}

impl Cel {
    /// Compiles `source`; `field` names it in errors. Fails with a field violation when
    /// the source does not parse, is too long or too deep, calls a function that is not
    /// supported, nests comprehensions, or costs more than [`CEL_MAX_COST`](super::limits::CEL_MAX_COST) even for an
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
                reads: Arc::new(object_reads(&program)),
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
    /// Errors: [`CelError::Busy`] when no evaluation slot frees up before the
    /// deadline (pool only); [`CelError::TooCostly`] when the estimate for this object is over
    /// the limit (nothing is evaluated); [`CelError::TooSlow`] /
    /// [`CelError::Deadline`] / [`CelError::TooManySteps`] when the evaluation
    /// was stopped; [`CelError::Failed`] when it failed on the object.
    pub async fn evaluate(&self, fresh: &Value, deadline: AnswerBy) -> Result<Value, CelError> {
        self.evaluate_within(fresh, deadline, CelLimits::DEFAULT)
            .await
    }

    /// [`Cel::evaluate`] within other limits.
    pub async fn evaluate_within(
        &self,
        fresh: &Value,
        deadline: AnswerBy,
        limits: CelLimits,
    ) -> Result<Value, CelError> {
        let deadline = deadline.instant();
        let fresh = if self.reads.any() {
            fresh
        } else {
            &Value::Null
        };
        // A cheap, shallow program runs here, on the caller's task: the same estimate,
        // the same step and time limits and the caller's deadline bound it, and its cost
        // bound keeps it to microseconds, less than the hand-off to a pool thread.
        if self.inline {
            if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
                return Err(CelError::Deadline);
            }
            let estimated = estimate(&self.program, fresh, limits)?;
            if estimated <= INLINE_MAX_COST {
                let caller_at = deadline.map(|deadline| {
                    std::time::Instant::now() + deadline.saturating_duration_since(Instant::now())
                });
                return std::panic::catch_unwind(AssertUnwindSafe(|| {
                    evaluate(&self.program, &self.reads, fresh, limits, caller_at)
                }))
                .unwrap_or_else(|_| Err(CelError::Failed(EVALUATOR_PANICKED.into())));
            }
        }
        let pool = &*POOL;
        let acquire = pool.slots.clone().acquire_owned();
        let permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, acquire)
                .await
                .map_err(|_| CelError::Busy)?,
            None => acquire.await,
        }
        .expect("the CEL semaphore is never closed");
        let now = Instant::now();
        if deadline.is_some_and(|deadline| deadline <= now) {
            return Err(CelError::Deadline);
        }
        let caller_at = deadline
            .map(|deadline| std::time::Instant::now() + deadline.saturating_duration_since(now));
        let (tx, rx) = oneshot::channel();
        let (program, reads) = (self.program.clone(), self.reads.clone());
        let fresh = fresh.clone();
        let job: Job = Box::new(move || {
            let _permit = permit; // the slot is busy until the evaluation really ends
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                estimate(&program, &fresh, limits)
                    .and_then(|_| evaluate(&program, &reads, &fresh, limits, caller_at))
            }))
            .unwrap_or_else(|_| Err(CelError::Failed(EVALUATOR_PANICKED.into())));
            let _ = tx.send(result);
            // `fresh`, the program's clone and every value are dropped here, on this
            // thread's stack.
        });
        if pool.jobs.send(job).is_err() {
            return Err(CelError::Failed("the CEL evaluator is gone".into()));
        }
        // The job ends by itself (estimating and converting are bounded by the object,
        // evaluating by the time limit); the caller's deadline is not waited past.
        let answer = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline + GRACE, rx).await,
            None => Ok(rx.await),
        };
        match answer {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(CelError::Failed(EVALUATOR_PANICKED.into())),
            Err(_) => Err(CelError::Deadline),
        }
    }

    /// Evaluates a condition: it must return a bool.
    pub async fn holds(&self, fresh: &Value, deadline: AnswerBy) -> Result<bool, CelError> {
        match self.evaluate(fresh, deadline).await? {
            Value::Bool(b) => Ok(b),
            other => Err(CelError::NotABool(type_name(&other).into())),
        }
    }

    /// The same program given the whole object, not only the fields it selects: what it
    /// answers must not differ (the cel fuzz target compares the two).
    pub fn given_whole_object(&self) -> Cel {
        Cel {
            reads: Arc::new(Reads::whole()),
            ..self.clone()
        }
    }

    /// The estimated cost of evaluating this program on `fresh`.
    pub fn estimated_cost(&self, fresh: Option<&Value>) -> u64 {
        Estimator::new(fresh).whole(&self.program).0
    }
}
