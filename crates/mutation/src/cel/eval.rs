//! Evaluating: the compile and evaluation threads, the resolver that serves `object` and
//! the step checks within the limits, and the run of one evaluation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, mpsc};

use cel::IdedExpr;
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::ast::Reads;
use super::error::CelError;
use super::estimate::Estimator;
use super::limits::{COMPILE_STACK, CelLimits, EVAL_STACK, STEP};
use super::source::bounded_display;

pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The standard library, shared by every evaluation.
static CEL_ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(cel::Env::stdlib()));

/// How many evaluations may run at once: twice the cores, at least 4.
pub fn cel_concurrency() -> usize {
    POOL.size
}

/// The evaluation threads and their slots: one slot per thread, so a job never waits
/// for a thread once it holds a slot.
pub(super) struct EvalPool {
    pub(super) jobs: mpsc::Sender<Job>,
    pub(super) slots: Arc<Semaphore>,
    pub(super) size: usize,
}

pub(super) static POOL: LazyLock<EvalPool> = LazyLock::new(|| {
    let size = (2 * cores()).max(4);
    EvalPool {
        jobs: threads("cel", size, EVAL_STACK),
        slots: Arc::new(Semaphore::new(size)),
        size,
    }
});

/// The compile threads: as many as cores (at least 2). A compile is short, and its
/// caller waits for it.
pub(super) static COMPILERS: LazyLock<mpsc::Sender<Job>> =
    LazyLock::new(|| threads("cel-compile", cores().max(2), COMPILE_STACK));

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Starts `size` threads with a `stack` stack running the jobs sent to the returned
/// sender, one at a time each.
fn threads(name: &str, size: usize, stack: usize) -> mpsc::Sender<Job> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    for n in 0..size {
        let queue = queue.clone();
        std::thread::Builder::new()
            .name(format!("{name}-{n}"))
            .stack_size(stack)
            .spawn(move || {
                loop {
                    let job = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            })
            .expect("the CEL threads start");
    }
    jobs
}

/// Why the resolver stopped serving: the evaluation is then over.
const RUNNING: u8 = 0;
const OUT_OF_TIME: u8 = 1;
const OUT_OF_STEPS: u8 = 2;

/// Serves `object`, and [`STEP`] while the evaluation is within its limits.
struct Resolver {
    object: Box<dyn Val>,
    yes: Box<dyn Val>,
    steps: AtomicU64,
    max_steps: u64,
    stop_at: std::time::Instant,
    stopped: AtomicU8,
}

// === impl Resolver ===

impl Resolver {
    fn within_limits(&self) -> bool {
        if self.stopped.load(Ordering::Relaxed) != RUNNING {
            return false;
        }
        if std::time::Instant::now() >= self.stop_at {
            self.stopped.store(OUT_OF_TIME, Ordering::Relaxed);
            return false;
        }
        true
    }
}

impl VariableResolver for Resolver {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        match variable {
            "object" => self
                .within_limits()
                .then(|| CowVal::Borrowed(self.object.as_ref())),
            STEP => {
                if self.steps.fetch_add(1, Ordering::Relaxed) >= self.max_steps {
                    self.stopped.store(OUT_OF_STEPS, Ordering::Relaxed);
                    return None;
                }
                self.within_limits()
                    .then(|| CowVal::Borrowed(self.yes.as_ref()))
            }
            _ => None,
        }
    }
}

/// The estimated cost of evaluating `program` on `fresh`, when it is within `limits`
/// (cost, and result size beside twice the object's).
pub(super) fn estimate(
    program: &IdedExpr,
    fresh: &Value,
    limits: CelLimits,
) -> Result<u64, CelError> {
    let mut estimator = Estimator::new(Some(fresh));
    let (cost, result) = estimator.whole(program);
    if cost > limits.max_cost {
        return Err(CelError::TooCostly {
            cost,
            limit: limits.max_cost,
        });
    }
    if result > limits.max_result {
        let most = limits
            .max_result
            .saturating_add(estimator.json(fresh).size.saturating_mul(2));
        if result > most {
            return Err(CelError::ResultTooLarge {
                size: result,
                limit: most,
            });
        }
    }
    Ok(cost)
}

/// Evaluates `program` on `fresh`, once [`estimate`] has found it within `limits`: on an
/// evaluation thread, or on the caller's task for a cheap, shallow program. Only what
/// the program `reads` of `fresh` is converted for it. The time limit counts from the
/// end of the object's conversion; the caller's deadline (`caller_at`) stops it in any
/// case.
pub(super) fn evaluate(
    program: &IdedExpr,
    reads: &Reads,
    fresh: &Value,
    limits: CelLimits,
    caller_at: Option<std::time::Instant>,
) -> Result<Value, CelError> {
    let object: Box<dyn Val> = read_to_cel(fresh, reads)
        .try_into()
        .map_err(|_| CelError::Failed("the object is not a CEL value".into()))?;
    let yes: Box<dyn Val> = cel::Value::Bool(true)
        .try_into()
        .map_err(|_| CelError::Failed("no CEL bool".into()))?;
    let own = std::time::Instant::now() + limits.time;
    let (stop_at, by_caller) = match caller_at {
        Some(caller_at) if caller_at < own => (caller_at, true),
        _ => (own, false),
    };
    let resolver = Resolver {
        object,
        yes,
        steps: AtomicU64::new(0),
        max_steps: limits.max_steps,
        stop_at,
        stopped: AtomicU8::new(RUNNING),
    };
    let mut context = cel::Context::with_env(CEL_ENV.clone());
    context.set_variable_resolver(&resolver);
    let result = cel::Value::resolve(program, &context);
    let late = std::time::Instant::now() >= stop_at;
    match resolver.stopped.load(Ordering::Relaxed) {
        OUT_OF_STEPS => return Err(CelError::TooManySteps(limits.max_steps)),
        OUT_OF_TIME => {}
        _ if late => {}
        _ => {
            let value = result.map_err(|e| CelError::Failed(bounded_display(&e, 200)))?;
            return value.json().map_err(|e| {
                CelError::Failed(format!(
                    "the result is not JSON: {}",
                    bounded_display(&e, 200)
                ))
            });
        }
    }
    Err(if by_caller {
        CelError::Deadline
    } else {
        CelError::TooSlow(limits.time)
    })
}

/// [`json_to_cel`] of the parts of `value` in `reads`. A field of `reads` that `value`
/// lacks stays absent, and a value that is not a map is converted whole, so a program
/// that reads only `reads` sees exactly what it would in the whole object.
fn read_to_cel(value: &Value, reads: &Reads) -> cel::Value {
    match value {
        Value::Object(map) if !reads.whole => cel::Value::from(
            reads
                .fields
                .iter()
                .filter_map(|(field, reads)| {
                    let value = map.get(field)?;
                    Some((field.clone(), read_to_cel(value, reads)))
                })
                .collect::<HashMap<String, cel::Value>>(),
        ),
        _ => json_to_cel(value),
    }
}

/// Converts JSON to a CEL value the way Kubernetes CEL does: every integer that fits is
/// an `int` (so `object.status.count + 1` works), larger ones `uint`, others `double`.
pub(super) fn json_to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(json_to_cel).collect())),
        Value::Object(map) => cel::Value::from(
            map.iter()
                .map(|(k, v)| (k.clone(), json_to_cel(v)))
                .collect::<HashMap<String, cel::Value>>(),
        ),
    }
}
