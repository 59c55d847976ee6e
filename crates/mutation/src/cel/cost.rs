//! The estimate of one node and the cost rules of the functions an expression may call:
//! pure functions of the operands' estimates (the estimator in `estimate` walks the AST
//! and the fresh object).

use cel::IdedExpr;
use cel::common::ast::{Expr, operators};
use serde_json::Value;

use super::bound::Bound;
use super::limits::{NODE, PATTERN_SIZE_LIMIT};

/// The estimate of one node: what evaluating it may cost, a bound of its value, and,
/// when it is read from `object` by a static path, the nodes of the fresh object it is
/// one of (one node for `object.spec`; every element for the variable of a loop over
/// `object.spec.items`). Empty when unknown.
#[derive(Clone)]
pub(super) struct Estimate<'j> {
    pub(super) cost: u64,
    pub(super) bound: Bound,
    pub(super) exact: Vec<&'j Value>,
}

// === impl Estimate ===

impl Estimate<'_> {
    pub(super) fn of(cost: u64, bound: Bound) -> Self {
        Estimate {
            cost,
            bound,
            exact: Vec::new(),
        }
    }
}

/// Whether evaluating `expr` builds a new value (so putting it in a list or map moves
/// it) rather than borrowing one (which is then copied).
pub(super) fn builds(expr: &IdedExpr) -> bool {
    matches!(
        expr.expr,
        Expr::List(_) | Expr::Map(_) | Expr::Comprehension(_)
    )
}

pub(super) fn sum(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

/// The operands of a call (its target first), estimated.
pub(super) struct Operands<'j> {
    pub(super) each: Vec<Estimate<'j>>,
    /// Evaluating every operand, and the call's own node.
    pub(super) cost: u64,
    /// The sum of the operands' sizes.
    pub(super) sizes: u64,
    pub(super) first: Bound,
    pub(super) second: Bound,
}

// === impl Operands ===

impl<'j> Operands<'j> {
    pub(super) fn new(each: Vec<Estimate<'j>>) -> Self {
        Operands {
            cost: sum(each.iter().map(|a| a.cost)).saturating_add(NODE),
            sizes: sum(each.iter().map(|a| a.bound.size)),
            first: each.first().map_or(Bound::SCALAR, |a| a.bound),
            second: each.get(1).map_or(Bound::SCALAR, |a| a.bound),
            each,
        }
    }

    /// Most operations read (and may copy, into an error) their operands once.
    pub(super) fn reading(&self) -> u64 {
        self.cost.saturating_add(self.sizes)
    }
}

/// The functions with a rule of their own: in [`function`], or, for `?:` and an index,
/// in the estimator itself. With [`READ_TO_SCALAR`], every function with a cost rule.
const OWN_RULES: &[&str] = &[
    operators::CONDITIONAL,
    operators::LOGICAL_AND,
    operators::LOGICAL_OR,
    operators::LOGICAL_NOT,
    operators::NOT_STRICTLY_FALSE,
    operators::ADD,
    operators::INDEX,
    operators::OPT_INDEX,
    operators::OPT_SELECT,
    "matches",
    "string",
    "bytes",
    "dyn",
    "value",
    "or",
    "orValue",
];

/// Whether `name` has a cost rule. The compile-time check refuses a call of any other
/// function, so what it lets through and the rules are one decision (a test checks that
/// every such name gets a rule from [`function`]).
pub(super) fn has_rule(name: &str) -> bool {
    READ_TO_SCALAR.contains(&name) || OWN_RULES.contains(&name)
}

/// The functions that read their operands once and return a scalar.
const READ_TO_SCALAR: &[&str] = &[
    operators::EQUALS,
    operators::NOT_EQUALS,
    operators::LESS,
    operators::LESS_EQUALS,
    operators::GREATER,
    operators::GREATER_EQUALS,
    operators::IN,
    operators::SUBSTRACT,
    operators::MULTIPLY,
    operators::DIVIDE,
    operators::MODULO,
    operators::NEGATE,
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "int",
    "uint",
    "double",
    "bool",
    "type",
    "timestamp",
    "duration",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    "hasValue",
];

/// The estimate of calling `name` on `operands` (`method`: called on a target), for
/// every function but `?:`, `optional.<f>` and an index, which the estimator follows
/// itself. A function without a rule is refused by the compile-time check, never
/// evaluated: its cost is the largest.
pub(super) fn function<'j>(name: &str, method: bool, mut operands: Operands<'j>) -> Estimate<'j> {
    let reading = operands.reading();
    let (first, second) = (operands.first, operands.second);
    match name {
        operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::NOT_STRICTLY_FALSE => Estimate::of(operands.cost, Bound::SCALAR),
        _ if READ_TO_SCALAR.contains(&name) => Estimate::of(reading, Bound::SCALAR),
        operators::ADD => Estimate::of(reading, sum_bound(&operands)),
        "string" | "bytes" => {
            // A number or a time as text is short; text stays the same length.
            let len = operands.sizes.saturating_add(64);
            Estimate::of(reading.saturating_add(len), Bound::text(len))
        }
        "dyn" if operands.each.len() == 1 => {
            let mut operand = operands.each.remove(0);
            operand.cost = operands.cost;
            operand
        }
        "matches" => {
            let (text, pattern) = if method {
                (first, second)
            } else {
                (second, first)
            };
            Estimate::of(
                reading
                    .saturating_add(PATTERN_SIZE_LIMIT as u64)
                    .saturating_add(match_steps(text, pattern)),
                Bound::SCALAR,
            )
        }
        operators::OPT_INDEX | operators::OPT_SELECT => {
            let element = first.element();
            Estimate::of(reading.saturating_add(element.size), element.optional())
        }
        "value" => {
            let element = first.element();
            Estimate::of(reading.saturating_add(element.size), element)
        }
        "or" => Estimate::of(reading, first.join(second)),
        "orValue" => Estimate::of(reading, first.element().join(second)),
        _ => Estimate::of(u64::MAX, Bound::SCALAR),
    }
}

/// The bound of `a + b + ...`: a scalar for numbers, else (strings, lists) the
/// concatenation.
fn sum_bound(operands: &Operands) -> Bound {
    if operands.each.iter().all(|a| a.bound.is_scalar()) {
        Bound::SCALAR
    } else {
        Bound {
            size: operands.sizes,
            len: sum(operands.each.iter().map(|a| a.bound.len)),
            elem: operands
                .each
                .iter()
                .map(|a| a.bound.elem)
                .max()
                .unwrap_or(0),
        }
    }
}

/// The steps of matching a regex of `pattern`'s length against `text`.
fn match_steps(text: Bound, pattern: Bound) -> u64 {
    text.size
        .saturating_add(1)
        .saturating_mul(16)
        .saturating_mul(pattern.len.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_the_check_lets_through_has_a_cost_rule_and_no_other_does() {
        let operand = || Estimate::of(1, Bound::SCALAR);
        let followed_by_the_estimator = [operators::CONDITIONAL, operators::INDEX];
        let ruled = READ_TO_SCALAR.iter().chain(OWN_RULES);
        for name in ruled.filter(|n| !followed_by_the_estimator.contains(n)) {
            assert!(has_rule(name));
            let estimate = function(name, false, Operands::new(vec![operand()]));
            assert!(estimate.cost < u64::MAX, "{name} has no cost rule");
        }
        let unknown = function("noSuchFunction", false, Operands::new(vec![operand()]));
        assert_eq!(unknown.cost, u64::MAX);
        assert!(!has_rule("noSuchFunction"));
    }
}
