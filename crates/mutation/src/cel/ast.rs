//! Walks and shapes of a parsed AST that compiling and estimating share: its children,
//! its depth, whether it reads `object` and which of its fields, the shape of a
//! comprehension, and whether a call is `optional.<f>(...)`.

use std::collections::BTreeMap;

use cel::IdedExpr;
use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, LiteralValue, operators};

/// The children of `expr`, in no particular order.
pub(super) fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => Vec::new(),
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| t.as_ref())
            .chain(&call.args)
            .collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => map
            .entries
            .iter()
            .flat_map(|e| entry_exprs(&e.expr))
            .collect(),
        Expr::Struct(st) => st
            .entries
            .iter()
            .flat_map(|e| entry_exprs(&e.expr))
            .collect(),
        Expr::Select(select) => vec![&select.operand],
    }
}

pub(super) fn entry_exprs(entry: &EntryExpr) -> Vec<&IdedExpr> {
    match entry {
        EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
        EntryExpr::StructField(f) => vec![&f.value],
    }
}

/// Whether identifier `name` is the variable `object`: `object`, or `.object`, the same
/// name made absolute (which cel resolves the same way).
pub(super) fn is_object(name: &str) -> bool {
    name.strip_prefix('.').unwrap_or(name) == "object"
}

/// The parts of `object` a program can see: the whole of it, or only some of its fields
/// (and of those, the whole or again some fields). A program sees only what it selects,
/// so the object it is given can leave the rest out: `object.data.n` needs `data.n` of
/// the object, not its `metadata.managedFields`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Reads {
    /// The whole value is read.
    pub(super) whole: bool,
    /// Else, the fields selected from it (a field absent from the object stays absent).
    pub(super) fields: BTreeMap<String, Reads>,
}

// === impl Reads ===

impl Reads {
    pub(super) fn whole() -> Reads {
        Reads {
            whole: true,
            fields: BTreeMap::new(),
        }
    }

    /// Whether any of the object is read (else it need be neither copied nor converted).
    pub(super) fn any(&self) -> bool {
        self.whole || !self.fields.is_empty()
    }

    /// Marks `path` read: its last field whole, the fields before it as far as selected.
    fn add(&mut self, path: &[&str]) {
        let mut reads = self;
        for field in path {
            if reads.whole {
                return;
            }
            reads = reads.fields.entry((*field).to_owned()).or_default();
        }
        *reads = Reads::whole();
    }
}

/// What `expr` reads of `object`: the fields of every chain of selects that starts at
/// `object` (`object.a.b`, `has(object.a.b)`); the whole object when `object` is used
/// any other way (alone, indexed, passed to a function, iterated). Comprehension
/// variables named `object` only make it read more than it needs.
pub(super) fn object_reads(expr: &IdedExpr) -> Reads {
    let mut reads = Reads::default();
    let mut stack = vec![expr];
    while let Some(expr) = stack.pop() {
        match &expr.expr {
            Expr::Ident(name) if is_object(name) => return Reads::whole(),
            Expr::Select(select) => {
                let mut path = vec![select.field.as_str()];
                let mut operand = &*select.operand;
                while let Expr::Select(inner) = &operand.expr {
                    path.push(inner.field.as_str());
                    operand = &inner.operand;
                }
                if matches!(&operand.expr, Expr::Ident(name) if is_object(name)) {
                    path.reverse();
                    reads.add(&path);
                } else {
                    stack.push(operand);
                }
            }
            _ => stack.extend(children(expr)),
        }
    }
    reads
}

/// The depth of `expr`, measured without recursion (the AST may be thousands deep).
pub(super) fn depth(expr: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(expr, 1usize)];
    while let Some((expr, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        stack.extend(children(expr).into_iter().map(|child| (child, depth + 1)));
    }
    deepest
}

/// The functions of the `optional` namespace (`optional.of(x)`).
const OPTIONAL_FUNCTIONS: &[&str] = &["of", "ofNonZeroValue", "none"];

/// Whether `call` is `optional.<f>(...)`.
pub(super) fn optional_call(call: &CallExpr) -> bool {
    OPTIONAL_FUNCTIONS.contains(&call.func_name.as_str())
        && call
            .target
            .as_deref()
            .is_some_and(|t| matches!(&t.expr, Expr::Ident(name) if name == "optional"))
}

/// The two shapes of comprehension the standard macros produce.
pub(super) enum Comprehension<'a> {
    /// map / filter: `@result + [e]`, optionally guarded by `g ? ... : @result`, from
    /// an empty list; cel appends in place.
    Append {
        guard: Option<&'a IdedExpr>,
        items: &'a IdedExpr,
    },
    /// all / exists / exists_one: a scalar accumulator.
    Scalar,
}

/// The shape of `c`, matching cel's own test for the in-place append.
pub(super) fn comprehension_kind(c: &ComprehensionExpr) -> Option<Comprehension<'_>> {
    let accu = c.accu_var.as_str();
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(name) if name == accu);
    fn appended<'a>(e: &'a IdedExpr, accu: &str) -> Option<&'a IdedExpr> {
        let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(name) if name == accu);
        match &e.expr {
            Expr::Call(call) if call.func_name == operators::ADD && call.target.is_none() => {
                match call.args.as_slice() {
                    [lhs, rhs] if is_accu(lhs) && matches!(rhs.expr, Expr::List(_)) => Some(rhs),
                    _ => None,
                }
            }
            _ => None,
        }
    }
    let empty_init = matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
    let literal_cond = matches!(c.loop_cond.expr, Expr::Literal(_));
    if empty_init && literal_cond && is_accu(&c.result) {
        if let Some(items) = appended(&c.loop_step, accu) {
            return Some(Comprehension::Append { guard: None, items });
        }
        if let Expr::Call(call) = &c.loop_step.expr
            && call.func_name == operators::CONDITIONAL
            && call.target.is_none()
            && let [guard, step, otherwise] = call.args.as_slice()
            && is_accu(otherwise)
            && let Some(items) = appended(step, accu)
        {
            return Some(Comprehension::Append {
                guard: Some(guard),
                items,
            });
        }
        return None;
    }
    let scalar_init = matches!(
        &c.accu_init.expr,
        Expr::Literal(
            LiteralValue::Boolean(_)
                | LiteralValue::Int(_)
                | LiteralValue::UInt(_)
                | LiteralValue::Double(_)
                | LiteralValue::Null
        )
    );
    scalar_init.then_some(Comprehension::Scalar)
}
