//! Mutations and CEL conditions: validated and compiled once per request, then applied
//! to the fresh object on every attempt.
//!
//! - JSON Patch (RFC 6902): a failing `test` operation is a precondition failure.
//! - JSON merge patch (RFC 7386).
//! - CEL: an expression over `object` (the fresh object) returning a map that is merged
//!   into it, so read-dependent changes ("increment", "append if absent") work from any
//!   language. Evaluation is bounded three ways, so a pathological expression can
//!   neither wedge the sidecar nor exhaust its threads: nested comprehensions (whose
//!   cost is the product of list sizes) are refused at compile time; every read of
//!   `object` checks the time limit and aborts the evaluation once it has passed (so
//!   one comprehension over the object stops within one step); and at most
//!   [`CEL_CONCURRENCY`] evaluations run at once, off the async threads.
//! - Server-side apply: carried as a configuration; the API server merges it.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::pb;

/// The longest CEL source accepted.
pub const CEL_MAX_SOURCE: usize = 16 * 1024;
/// How long one CEL evaluation may run.
pub const CEL_TIME_LIMIT: Duration = Duration::from_millis(250);
/// How many CEL evaluations may run at once (each on a blocking thread).
pub const CEL_CONCURRENCY: usize = 32;

static CEL_SLOTS: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(CEL_CONCURRENCY)));
static CEL_ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(cel::Env::stdlib()));

/// A request field that does not validate: becomes INVALID_ARGUMENT with a BadRequest
/// field violation, before any request reaches the API server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {description}")]
pub struct FieldViolation {
    /// The request field, as a path (`mutation.cel.expression`).
    pub field: String,
    /// What is wrong and what to do.
    pub description: String,
}

impl FieldViolation {
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
        }
    }
}

/// Why a mutation could not be applied to the fresh object. Depends on the object, not
/// only on the request: reported as FAILED_PRECONDITION with the current object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// A JSON Patch `test` operation did not hold.
    #[error("JSON Patch test operation {index} ({path}) does not hold on the current object")]
    TestFailed { index: usize, path: String },
    /// A JSON Patch operation cannot apply to the current object (e.g. a missing path).
    #[error("JSON Patch operation {index} ({path}) does not apply to the current object: {reason}")]
    PatchDoesNotApply {
        index: usize,
        path: String,
        reason: String,
    },
    /// The CEL expression failed on the current object (e.g. a missing key).
    #[error("CEL expression failed on the current object: {0}")]
    CelFailed(String),
    /// The CEL mutation did not return a map.
    #[error("CEL mutation must return a map (a merge patch), returned {0}")]
    CelNotAMap(String),
    /// The CEL condition did not return a bool.
    #[error("CEL condition must return a bool, returned {0}")]
    CelNotABool(String),
    /// The CEL evaluation ran past its time bound.
    #[error("CEL evaluation took longer than {0:?}; simplify the expression")]
    CelTooSlow(Duration),
}

/// A compiled CEL program with its source (for messages).
#[derive(Clone)]
pub struct Cel {
    program: Arc<cel::Program>,
}

impl std::fmt::Debug for Cel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cel")
    }
}

impl Cel {
    /// Compiles `source`; `field` names it in errors.
    pub fn compile(field: &str, source: &str) -> Result<Cel, FieldViolation> {
        if source.trim().is_empty() {
            return Err(FieldViolation::new(field, "the CEL expression is empty"));
        }
        if source.len() > CEL_MAX_SOURCE {
            return Err(FieldViolation::new(
                field,
                format!("the CEL expression is longer than {CEL_MAX_SOURCE} bytes"),
            ));
        }
        let program = CEL_ENV.compile(source).map_err(|err| {
            let text = err.to_string();
            FieldViolation::new(
                field,
                format!(
                    "the CEL expression does not compile: {}",
                    text.split_whitespace().collect::<Vec<_>>().join(" ")
                ),
            )
        })?;
        if comprehension_depth(program.expression()) > 1 {
            return Err(FieldViolation::new(
                field,
                "nested comprehensions (map/filter/all/exists inside another) are not allowed: \
                 their cost grows with the product of list sizes",
            ));
        }
        Ok(Cel {
            program: Arc::new(program),
        })
    }

    /// Evaluates the program with `object` bound to `fresh`, bounded in time.
    pub async fn evaluate(&self, fresh: &Value) -> Result<Value, ApplyError> {
        let permit = CEL_SLOTS
            .clone()
            .acquire_owned()
            .await
            .expect("the CEL semaphore is never closed");
        let program = self.program.clone();
        let object = fresh.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit; // held until the evaluation really ends
            let object: Box<dyn Val> = json_to_cel(&object)
                .try_into()
                .map_err(|_| ApplyError::CelFailed("the object is not a CEL value".into()))?;
            let resolver = ObjectResolver {
                object,
                deadline: std::time::Instant::now() + CEL_TIME_LIMIT,
            };
            let mut context = cel::Context::with_env(CEL_ENV.clone());
            context.set_variable_resolver(&resolver);
            let result = program.execute(&context);
            if std::time::Instant::now() > resolver.deadline {
                return Err(ApplyError::CelTooSlow(CEL_TIME_LIMIT));
            }
            let value = result.map_err(|e| ApplyError::CelFailed(e.to_string()))?;
            value
                .json()
                .map_err(|e| ApplyError::CelFailed(format!("result is not JSON: {e}")))
        });
        match tokio::time::timeout(CEL_TIME_LIMIT, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(ApplyError::CelFailed(format!(
                "evaluation panicked: {join}"
            ))),
            Err(_) => Err(ApplyError::CelTooSlow(CEL_TIME_LIMIT)),
        }
    }

    /// Evaluates a condition: it must return a bool.
    pub async fn holds(&self, fresh: &Value) -> Result<bool, ApplyError> {
        match self.evaluate(fresh).await? {
            Value::Bool(b) => Ok(b),
            other => Err(ApplyError::CelNotABool(type_name(&other).into())),
        }
    }
}

/// Converts JSON to a CEL value the way Kubernetes CEL does: every integer that fits is
/// an `int` (so `object.status.count + 1` works), larger ones `uint`, others `double`.
fn json_to_cel(value: &Value) -> cel::Value {
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
                .collect::<std::collections::HashMap<String, cel::Value>>(),
        ),
    }
}

/// Serves `object` to the evaluation, and refuses it once the time limit has passed:
/// the evaluation then fails at its next read of the object.
struct ObjectResolver {
    object: Box<dyn Val>,
    deadline: std::time::Instant,
}

impl VariableResolver for ObjectResolver {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        if variable != "object" || std::time::Instant::now() > self.deadline {
            return None;
        }
        Some(CowVal::Borrowed(self.object.as_ref()))
    }
}

/// The deepest nesting of comprehensions (map, filter, all, exists...) in `expr`.
fn comprehension_depth(expr: &cel::IdedExpr) -> usize {
    use cel::common::ast::{EntryExpr, Expr};
    let max = |exprs: &mut dyn Iterator<Item = &cel::IdedExpr>| {
        exprs.map(comprehension_depth).max().unwrap_or(0)
    };
    match &expr.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => 0,
        Expr::Call(call) => max(&mut call.target.iter().map(|t| t.as_ref()).chain(&call.args)),
        Expr::Comprehension(c) => {
            let inner = [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result];
            let body = max(&mut inner.into_iter());
            comprehension_depth(&c.iter_range).max(1 + body)
        }
        Expr::List(list) => max(&mut list.elements.iter()),
        Expr::Map(map) => max(&mut map.entries.iter().flat_map(|e| match &e.expr {
            EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
            EntryExpr::StructField(f) => vec![&f.value],
        })),
        Expr::Struct(st) => max(&mut st.entries.iter().flat_map(|e| match &e.expr {
            EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
            EntryExpr::StructField(f) => vec![&f.value],
        })),
        Expr::Select(select) => comprehension_depth(&select.operand),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// A validated mutation.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// RFC 6902.
    JsonPatch(json_patch::Patch),
    /// RFC 7386.
    MergePatch(Value),
    /// Server-side apply; `configuration` is a JSON object.
    Apply { configuration: Value, force: bool },
    /// A CEL expression returning a merge patch.
    Cel(Cel),
}

impl Mutation {
    /// Validates and compiles the request's mutation; `field` is its path in the request.
    pub fn from_proto(
        field: &str,
        mutation: Option<&pb::Mutation>,
    ) -> Result<Self, FieldViolation> {
        use pb::mutation::Kind;
        let kind = mutation.and_then(|m| m.kind.as_ref()).ok_or_else(|| {
            FieldViolation::new(
                field,
                "a mutation is required: set one of json_patch, merge_patch, apply or cel",
            )
        })?;
        match kind {
            Kind::JsonPatch(p) => {
                let field = format!("{field}.json_patch.patch_json");
                let value = parse_json(&field, &p.patch_json)?;
                let patch: json_patch::Patch = serde_json::from_value(value).map_err(|e| {
                    FieldViolation::new(
                        &field,
                        format!("not an RFC 6902 JSON Patch (an array of operations): {e}"),
                    )
                })?;
                Ok(Mutation::JsonPatch(patch))
            }
            Kind::MergePatch(p) => {
                let field = format!("{field}.merge_patch.patch_json");
                let value = parse_json(&field, &p.patch_json)?;
                if !value.is_object() {
                    return Err(FieldViolation::new(
                        &field,
                        format!(
                            "a merge patch must be a JSON object, got {}",
                            type_name(&value)
                        ),
                    ));
                }
                Ok(Mutation::MergePatch(value))
            }
            Kind::Apply(a) => {
                let field = format!("{field}.apply.configuration_json");
                let value = parse_json(&field, &a.configuration_json)?;
                if !value.is_object() {
                    return Err(FieldViolation::new(
                        &field,
                        "an apply configuration must be a JSON object",
                    ));
                }
                Ok(Mutation::Apply {
                    configuration: value,
                    force: a.force,
                })
            }
            Kind::Cel(c) => Ok(Mutation::Cel(Cel::compile(
                &format!("{field}.cel.expression"),
                &c.expression,
            )?)),
        }
    }

    /// Applies the mutation to a copy of `fresh` and returns the new object. Not for
    /// server-side apply, which the API server performs.
    pub async fn apply(&self, fresh: &Value) -> Result<Value, ApplyError> {
        match self {
            Mutation::JsonPatch(patch) => {
                let mut doc = fresh.clone();
                json_patch::patch(&mut doc, patch).map_err(|err| {
                    let index = err.operation;
                    let path = patch
                        .0
                        .get(index)
                        .map(|op| op.path().to_string())
                        .unwrap_or_default();
                    match err.kind {
                        json_patch::PatchErrorKind::TestFailed => {
                            ApplyError::TestFailed { index, path }
                        }
                        kind => ApplyError::PatchDoesNotApply {
                            index,
                            path,
                            reason: kind.to_string(),
                        },
                    }
                })?;
                Ok(doc)
            }
            Mutation::MergePatch(patch) => {
                let mut doc = fresh.clone();
                json_patch::merge(&mut doc, patch);
                Ok(doc)
            }
            Mutation::Cel(cel) => {
                let patch = cel.evaluate(fresh).await?;
                if !patch.is_object() {
                    return Err(ApplyError::CelNotAMap(type_name(&patch).into()));
                }
                let mut doc = fresh.clone();
                json_patch::merge(&mut doc, &patch);
                Ok(doc)
            }
            Mutation::Apply { configuration, .. } => {
                let mut doc = fresh.clone();
                json_patch::merge(&mut doc, configuration);
                Ok(doc)
            }
        }
    }
}

/// Parses JSON text from a request field.
pub fn parse_json(field: &str, text: &str) -> Result<Value, FieldViolation> {
    if text.trim().is_empty() {
        return Err(FieldViolation::new(field, "required JSON text is empty"));
    }
    serde_json::from_str(text)
        .map_err(|e| FieldViolation::new(field, format!("not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cel(expression: &str) -> Option<pb::Mutation> {
        Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                expression: expression.into(),
            })),
        })
    }

    fn json_patch(patch: &str) -> Option<pb::Mutation> {
        Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::JsonPatch(pb::JsonPatch {
                patch_json: patch.into(),
            })),
        })
    }

    #[tokio::test]
    async fn cel_increments_a_counter_read_from_the_fresh_object() {
        let m = Mutation::from_proto(
            "mutation",
            cel(r#"{"data": {"n": string(int(object.data.n) + 1)}}"#).as_ref(),
        )
        .unwrap();
        let fresh = json!({"data": {"n": "41", "keep": "x"}});
        let new = m.apply(&fresh).await.unwrap();
        assert_eq!(new, json!({"data": {"n": "42", "keep": "x"}}));
    }

    #[tokio::test]
    async fn cel_appends_to_a_list_only_if_absent() {
        let expr = r#"{"spec": {"items": "b" in object.spec.items ? object.spec.items : object.spec.items + ["b"]}}"#;
        let m = Mutation::from_proto("mutation", cel(expr).as_ref()).unwrap();
        let once = m.apply(&json!({"spec": {"items": ["a"]}})).await.unwrap();
        assert_eq!(once, json!({"spec": {"items": ["a", "b"]}}));
        let twice = m.apply(&once).await.unwrap();
        assert_eq!(twice, once);
    }

    #[tokio::test]
    async fn json_integers_are_cel_ints() {
        let m = Mutation::from_proto(
            "mutation",
            cel(r#"{"status": {"count": object.status.count + 1}}"#).as_ref(),
        )
        .unwrap();
        let new = m.apply(&json!({"status": {"count": 0}})).await.unwrap();
        assert_eq!(new, json!({"status": {"count": 1}}));
    }

    #[test]
    fn bad_cel_is_a_field_violation_naming_the_field() {
        let err = Mutation::from_proto("mutation", cel("{{{").as_ref()).unwrap_err();
        assert_eq!(err.field, "mutation.cel.expression");
        assert!(err.description.contains("does not compile"), "{err}");
    }

    #[tokio::test]
    async fn cel_that_is_not_a_map_or_fails_on_the_object_is_an_apply_error() {
        let m = Mutation::from_proto("m", cel("1 + 1").as_ref()).unwrap();
        assert!(matches!(
            m.apply(&json!({})).await,
            Err(ApplyError::CelNotAMap(_))
        ));
        let m = Mutation::from_proto("m", cel("{'a': object.missing.key}").as_ref()).unwrap();
        assert!(matches!(
            m.apply(&json!({})).await,
            Err(ApplyError::CelFailed(_))
        ));
    }

    #[tokio::test]
    async fn json_patch_test_failure_is_a_precondition_failure() {
        let m = Mutation::from_proto(
            "mutation",
            json_patch(r#"[{"op": "test", "path": "/a", "value": 1}, {"op": "replace", "path": "/a", "value": 2}]"#).as_ref(),
        )
        .unwrap();
        assert_eq!(m.apply(&json!({"a": 1})).await.unwrap(), json!({"a": 2}));
        assert_eq!(
            m.apply(&json!({"a": 5})).await.unwrap_err(),
            ApplyError::TestFailed {
                index: 0,
                path: "/a".into()
            }
        );
    }

    #[test]
    fn malformed_patches_name_their_field() {
        let err = Mutation::from_proto("mutation", json_patch("{not json").as_ref()).unwrap_err();
        assert_eq!(err.field, "mutation.json_patch.patch_json");
        let err =
            Mutation::from_proto("mutation", json_patch(r#"{"op": "add"}"#).as_ref()).unwrap_err();
        assert!(err.description.contains("RFC 6902"), "{err}");
        let merge = Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: "[1, 2]".into(),
            })),
        });
        let err = Mutation::from_proto("mutation", merge.as_ref()).unwrap_err();
        assert_eq!(err.field, "mutation.merge_patch.patch_json");
        assert!(err.description.contains("must be a JSON object"), "{err}");
        let err = Mutation::from_proto("mutation", None).unwrap_err();
        assert_eq!(err.field, "mutation");
    }

    #[tokio::test]
    async fn cel_conditions_must_return_bool() {
        let c = Cel::compile("c", "object.spec.size > 2").unwrap();
        assert!(c.holds(&json!({"spec": {"size": 3}})).await.unwrap());
        assert!(!c.holds(&json!({"spec": {"size": 1}})).await.unwrap());
        let c = Cel::compile("c", "'yes'").unwrap();
        assert!(matches!(
            c.holds(&json!({})).await,
            Err(ApplyError::CelNotABool(_))
        ));
    }

    #[test]
    fn nested_comprehensions_are_refused_at_compile_time() {
        let expr = "{'n': object.xs.map(a, object.xs.filter(b, a == b).size())}";
        let err = Cel::compile("c", expr).unwrap_err();
        assert!(err.description.contains("nested comprehensions"), "{err}");
        // One level is fine.
        Cel::compile("c", "{'n': object.xs.filter(a, a > 1).size()}").unwrap();
    }

    #[tokio::test]
    async fn a_quadratic_cel_expression_is_cut_off_at_the_time_limit() {
        // One comprehension whose every step rebuilds the whole list: quadratic work,
        // far over the time bound, stopped at the next read of `object`.
        let expr = "{'n': object.xs.map(a, size(object.xs + object.xs + object.xs)).size()}";
        let c = Cel::compile("c", expr).unwrap();
        let xs: Vec<i64> = (0..200_000).collect();
        let started = std::time::Instant::now();
        let result = c.evaluate(&json!({"xs": xs})).await;
        assert_eq!(result.unwrap_err(), ApplyError::CelTooSlow(CEL_TIME_LIMIT));
        // The evaluation itself ended too: its slot is free again soon after.
        let permits = CEL_SLOTS.clone();
        let freed = async {
            while permits.available_permits() < CEL_CONCURRENCY {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(2), freed)
            .await
            .expect("the runaway evaluation stopped");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
