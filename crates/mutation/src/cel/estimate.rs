//! Estimating: the cost and result size of evaluating an AST on one fresh object, before
//! evaluating it.

use std::collections::HashMap;

use cel::IdedExpr;
use cel::common::ast::{
    CallExpr, ComprehensionExpr, Expr, ListExpr, LiteralValue, MapExpr, SelectExpr, operators,
};
use serde_json::Value;

use super::ast::{Comprehension, comprehension_kind, entry_exprs, is_object, optional_call};
use super::bound::Bound;
use super::cost::{Estimate, Operands, builds, function, sum};
use super::limits::{EXACT_VISITS, NODE, VALUE};

/// Estimates the cost of evaluating an AST on one fresh object (or on the smallest
/// object, when there is none: a lower bound of every later estimate).
pub(super) struct Estimator<'j> {
    fresh: Option<&'j Value>,
    sizes: HashMap<*const Value, Bound>,
    /// Nodes of the fresh object followed so far; past [`EXACT_VISITS`], reads are
    /// bounded coarsely instead (so estimating stays cheap whatever the expression).
    visits: u64,
    /// The comprehension variables in scope, innermost last.
    scope: Vec<(String, Bound, Vec<&'j Value>)>,
}

// === impl Estimator ===

impl<'j> Estimator<'j> {
    pub(super) fn new(fresh: Option<&'j Value>) -> Self {
        Estimator {
            fresh,
            sizes: HashMap::new(),
            visits: 0,
            scope: Vec::new(),
        }
    }

    /// The whole cost of evaluating `expr` (the estimate, plus converting the result to
    /// JSON), and the size of its result.
    pub(super) fn whole(&mut self, expr: &IdedExpr) -> (u64, u64) {
        let estimate = self.estimate(expr);
        let cost = estimate
            .cost
            .saturating_add(estimate.bound.size.saturating_mul(2));
        (cost, estimate.bound.size)
    }

    /// The bound of a node of the fresh object, each node measured once.
    pub(super) fn json(&mut self, value: &Value) -> Bound {
        let key = value as *const Value;
        if let Some(bound) = self.sizes.get(&key) {
            return *bound;
        }
        let bound = match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => Bound::SCALAR,
            Value::String(s) => Bound::text(s.len() as u64),
            Value::Array(items) => {
                let mut bound = Bound {
                    size: VALUE,
                    len: items.len() as u64,
                    elem: 0,
                };
                for item in items {
                    let item = self.json(item);
                    bound.size = bound.size.saturating_add(item.size);
                    bound.elem = bound.elem.max(item.size);
                }
                bound
            }
            Value::Object(map) => {
                let mut bound = Bound {
                    size: VALUE,
                    len: map.len() as u64,
                    elem: 0,
                };
                for (key, item) in map {
                    let key = Bound::text(key.len() as u64).size;
                    let item = self.json(item);
                    bound.size = bound.size.saturating_add(key).saturating_add(item.size);
                    bound.elem = bound.elem.max(item.size).max(key);
                }
                bound
            }
        };
        self.sizes.insert(key, bound);
        bound
    }

    /// Whether following `n` more nodes of the fresh object is within budget.
    fn follow(&mut self, n: usize) -> bool {
        self.visits = self.visits.saturating_add(n as u64);
        self.visits <= EXACT_VISITS
    }

    /// An estimate of a value that is one of `nodes` (when there are none, every
    /// evaluation fails before producing it, and any bound holds).
    fn exact(&mut self, cost: u64, nodes: Vec<&'j Value>) -> Estimate<'j> {
        let mut bound = Bound {
            size: 0,
            len: 0,
            elem: 0,
        };
        for node in &nodes {
            bound = bound.join(self.json(node));
        }
        if nodes.is_empty() {
            bound = Bound::SCALAR;
        }
        Estimate {
            cost,
            bound,
            exact: nodes,
        }
    }

    fn estimate(&mut self, expr: &IdedExpr) -> Estimate<'j> {
        match &expr.expr {
            Expr::Unspecified | Expr::Struct(_) => Estimate::of(u64::MAX, Bound::SCALAR),
            Expr::Literal(literal) => Estimate::of(
                NODE,
                match literal {
                    LiteralValue::String(s) => Bound::text(s.inner().len() as u64),
                    LiteralValue::Bytes(b) => Bound::text(b.inner().len() as u64),
                    _ => Bound::SCALAR,
                },
            ),
            Expr::Ident(name) => self.ident(name),
            Expr::Select(select) => self.select(select),
            Expr::List(list) => self.list(list),
            Expr::Map(map) => self.map(map),
            Expr::Call(call) => self.call(call),
            Expr::Comprehension(c) => self.comprehension(c),
        }
    }

    /// A variable: a comprehension's (innermost first), `object`, or an unknown one.
    fn ident(&mut self, name: &str) -> Estimate<'j> {
        if let Some((_, bound, exact)) = self.scope.iter().rev().find(|(n, ..)| n == name) {
            let (bound, exact) = (*bound, exact.clone());
            let exact = if self.follow(exact.len()) {
                exact
            } else {
                Vec::new()
            };
            return Estimate {
                cost: NODE,
                bound,
                exact,
            };
        }
        if is_object(name) {
            return match self.fresh {
                Some(fresh) => self.exact(NODE, vec![fresh]),
                None => Estimate::of(NODE, Bound::SCALAR),
            };
        }
        Estimate::of(NODE, Bound::SCALAR)
    }

    /// `operand.field`, or `has(operand.field)` (a test).
    fn select(&mut self, select: &SelectExpr) -> Estimate<'j> {
        let operand = self.estimate(&select.operand);
        let cost = operand
            .cost
            .saturating_add(NODE)
            .saturating_add(select.field.len() as u64);
        if select.test {
            return Estimate::of(cost, Bound::SCALAR);
        }
        if operand.exact.is_empty() || !self.follow(operand.exact.len()) {
            return Estimate::of(cost, operand.bound.element());
        }
        // A node without the field fails the evaluation there.
        let children = operand
            .exact
            .iter()
            .filter_map(|node| node.as_object()?.get(&select.field))
            .collect();
        self.exact(cost, children)
    }

    /// A literal list: its elements, each copied unless built for it.
    fn list(&mut self, list: &ListExpr) -> Estimate<'j> {
        let mut cost = NODE;
        let mut bound = Bound {
            size: VALUE,
            len: list.elements.len() as u64,
            elem: 0,
        };
        for element in &list.elements {
            let estimate = self.estimate(element);
            cost = cost.saturating_add(estimate.cost);
            if !builds(element) {
                cost = cost.saturating_add(estimate.bound.size);
            }
            bound.size = bound.size.saturating_add(estimate.bound.size);
            bound.elem = bound.elem.max(estimate.bound.size);
        }
        Estimate::of(cost.saturating_add(VALUE), bound)
    }

    /// A literal map: its keys, hashed and copied, and its values, copied unless built
    /// for it.
    fn map(&mut self, map: &MapExpr) -> Estimate<'j> {
        let mut cost = NODE.saturating_add(VALUE);
        let mut bound = Bound {
            size: VALUE,
            len: map.entries.len() as u64,
            elem: 0,
        };
        for entry in &map.entries {
            for (n, part) in entry_exprs(&entry.expr).into_iter().enumerate() {
                let estimate = self.estimate(part);
                cost = cost.saturating_add(estimate.cost);
                // Keys are hashed (and copied); borrowed values are copied.
                if n == 0 || !builds(part) {
                    cost = cost.saturating_add(estimate.bound.size);
                }
                bound.size = bound.size.saturating_add(estimate.bound.size);
                bound.elem = bound.elem.max(estimate.bound.size);
            }
        }
        Estimate::of(cost, bound)
    }

    /// A call: `?:` costs its condition and its costlier branch; `optional.<f>` its
    /// arguments; an index follows the fresh object where it can; any other function
    /// has its rule in `cost` ([`function`]).
    fn call(&mut self, call: &CallExpr) -> Estimate<'j> {
        let name = call.func_name.as_str();
        if name == operators::CONDITIONAL && call.args.len() == 3 && call.target.is_none() {
            return self.conditional(call);
        }
        if optional_call(call) {
            return self.optional(call);
        }
        let operands = Operands::new(
            call.target
                .iter()
                .map(|t| t.as_ref())
                .chain(&call.args)
                .map(|a| self.estimate(a))
                .collect(),
        );
        if name == operators::INDEX && operands.each.len() == 2 {
            return self.index(call, &operands);
        }
        function(name, call.target.is_some(), operands)
    }

    /// `cond ? yes : no`.
    fn conditional(&mut self, call: &CallExpr) -> Estimate<'j> {
        let cond = self.estimate(&call.args[0]);
        let yes = self.estimate(&call.args[1]);
        let no = self.estimate(&call.args[2]);
        let cost = cond
            .cost
            .saturating_add(yes.cost.max(no.cost))
            .saturating_add(NODE);
        Estimate::of(cost, yes.bound.join(no.bound))
    }

    /// `optional.of(x)`, `optional.ofNonZeroValue(x)`, `optional.none()`.
    fn optional(&mut self, call: &CallExpr) -> Estimate<'j> {
        let args: Vec<Estimate> = call.args.iter().map(|a| self.estimate(a)).collect();
        let cost = sum(args.iter().map(|a| a.cost)).saturating_add(NODE);
        let size = sum(args.iter().map(|a| a.bound.size));
        match call.func_name.as_str() {
            "none" => Estimate::of(cost, Bound::SCALAR),
            _ => Estimate::of(cost.saturating_add(size), Bound::within(size).optional()),
        }
    }

    /// `container[key]`: with a literal key into nodes of the fresh object, exactly
    /// those children; else any element of the container.
    fn index(&mut self, call: &CallExpr, operands: &Operands<'j>) -> Estimate<'j> {
        // The container is not copied.
        let cost = operands.reading().saturating_sub(operands.first.size);
        let container = &operands.each[0].exact;
        let container = if self.follow(container.len()) {
            container
        } else {
            &Vec::new()
        };
        let key = &call.args[1].expr;
        let children = match key {
            Expr::Literal(LiteralValue::String(k)) if !container.is_empty() => Some(
                container
                    .iter()
                    .filter_map(|node| node.as_object()?.get(k.inner()))
                    .collect(),
            ),
            Expr::Literal(LiteralValue::Int(i)) if !container.is_empty() => {
                let i = usize::try_from(*i.inner()).ok();
                Some(
                    container
                        .iter()
                        .filter_map(|node| node.as_array()?.get(i?))
                        .collect(),
                )
            }
            _ => None,
        };
        match children {
            Some(children) => self.exact(cost, children),
            None => Estimate::of(cost, operands.first.element()),
        }
    }

    /// The bound of a loop variable over `range`, and the nodes it is one of.
    fn loop_variable(&mut self, range: &Estimate<'j>) -> (Bound, Vec<&'j Value>) {
        if !range.exact.is_empty() && self.follow(range.exact.len()) {
            if range.exact.iter().all(|node| node.is_array()) {
                let elements: Vec<&'j Value> = range
                    .exact
                    .iter()
                    .filter_map(|node| node.as_array())
                    .flatten()
                    .collect();
                let followed = self.follow(elements.len());
                let estimate = self.exact(0, elements);
                let exact = if followed { estimate.exact } else { Vec::new() };
                return (estimate.bound, exact);
            }
            if range.exact.iter().all(|node| node.is_object()) {
                let longest = range
                    .exact
                    .iter()
                    .filter_map(|node| node.as_object())
                    .flat_map(|map| map.keys())
                    .map(|key| key.len() as u64)
                    .max()
                    .unwrap_or(0);
                return (Bound::text(longest), Vec::new());
            }
        }
        (range.bound.element(), Vec::new())
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> Estimate<'j> {
        let range = self.estimate(&c.iter_range);
        let init = self.estimate(&c.accu_init);
        let steps = range.bound.iterations();
        let (element, nodes) = self.loop_variable(&range);
        // Each step binds a copy of the element.
        let before = range.cost.saturating_add(init.cost).saturating_add(NODE);
        match comprehension_kind(c) {
            Some(Comprehension::Append { guard, items }) => {
                self.scope.push((c.iter_var.clone(), element, nodes));
                let guard = guard.map_or(0, |g| self.estimate(g).cost);
                let items = self.estimate(items);
                self.scope.pop();
                let per_step = guard
                    .saturating_add(items.cost)
                    .saturating_add(items.bound.size)
                    .saturating_add(element.size)
                    .saturating_add(NODE);
                let bound = Bound {
                    size: VALUE.saturating_add(steps.saturating_mul(items.bound.size)),
                    len: steps.saturating_mul(items.bound.len),
                    elem: items.bound.elem,
                };
                let cost = before.saturating_add(steps.saturating_mul(per_step));
                Estimate::of(cost, bound)
            }
            Some(Comprehension::Scalar) => {
                let accu = init.bound.join(Bound::SCALAR);
                self.scope.push((c.accu_var.clone(), accu, Vec::new()));
                self.scope.push((c.iter_var.clone(), element, nodes));
                let cond = self.estimate(&c.loop_cond);
                let step = self.estimate(&c.loop_step);
                self.scope.pop();
                let result = self.estimate(&c.result);
                self.scope.pop();
                if !step.bound.is_scalar() {
                    return Estimate::of(u64::MAX, Bound::SCALAR);
                }
                let per_step = cond
                    .cost
                    .saturating_add(step.cost)
                    .saturating_add(element.size)
                    .saturating_add(NODE);
                let cost = before
                    .saturating_add(steps.saturating_mul(per_step))
                    .saturating_add(result.cost)
                    .saturating_add(result.bound.size);
                Estimate::of(cost, result.bound)
            }
            None => Estimate::of(u64::MAX, Bound::SCALAR),
        }
    }
}
