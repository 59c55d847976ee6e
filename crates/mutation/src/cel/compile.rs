//! Compiling: the parse, the checks and the rewrite that puts a step check in every
//! comprehension (the token pass before the parse is in `source`).

use cel::IdedExpr;
use cel::common::ast::{CallExpr, EntryExpr, Expr, LiteralValue, operators};
use cel::parser::PrattParser;

use super::ast::{Comprehension, children, comprehension_kind, depth, optional_call};
use super::cost::has_rule;
use super::estimate::Estimator;
use super::limits::{
    CEL_MAX_DEPTH, CelLimits, EXCERPT, MAX_PATTERN, PARSER_MAX_RECURSION, PATTERN_SIZE_LIMIT, STEP,
    VALUE,
};
use super::source::{bounded_display, parse_error, scan_tokens};
use crate::value::short;

/// Parses, checks and rewrites `source`, on a thread with a
/// [`COMPILE_STACK`](super::limits::COMPILE_STACK) stack.
pub(super) fn compile_here(source: &str, limits: CelLimits) -> Result<IdedExpr, String> {
    scan_tokens(source)?;
    let mut expr = PrattParser::new()
        .max_recursion_depth(PARSER_MAX_RECURSION)
        .enable_optional_syntax(true)
        .parse(source)
        .map_err(|errors| parse_error(source, &errors))?;
    let depth = depth(&expr);
    if depth > CEL_MAX_DEPTH {
        return Err(format!(
            "the CEL expression nests {depth} levels deep, more than {CEL_MAX_DEPTH}: \
             split long chains of operators, selections or conditions"
        ));
    }
    check(&expr, false)?;
    rewrite(&mut expr);
    let (cost, result) = Estimator::new(None).whole(&expr);
    if cost > limits.max_cost {
        return Err(format!(
            "the CEL expression is too costly: its estimated cost is {cost} even on an \
             empty object, over the limit of {} (about bytes allocated); use smaller \
             literals or fewer steps",
            limits.max_cost
        ));
    }
    let most = limits.max_result.saturating_add(2 * VALUE);
    if result > most {
        return Err(format!(
            "the CEL expression's result is too large: about {result} bytes even on an empty \
             object, over the limit of {most}"
        ));
    }
    Ok(expr)
}

/// Refuses what has no cost rule, nested comprehensions and unbounded regexes.
fn check(expr: &IdedExpr, in_comprehension: bool) -> Result<(), String> {
    match &expr.expr {
        Expr::Unspecified => return Err("the CEL expression is incomplete".into()),
        Expr::Struct(st) => {
            return Err(format!(
                "message construction ({}{{...}}) is not supported",
                short(&st.type_name, 64)
            ));
        }
        Expr::Call(call) if optional_call(call) => {
            for arg in &call.args {
                check(arg, in_comprehension)?;
            }
            return Ok(());
        }
        Expr::Call(call) => {
            if !has_rule(&call.func_name) {
                return Err(format!(
                    "the function {}() is not supported",
                    short(&call.func_name, 64)
                ));
            }
            if call.func_name == "matches" {
                check_pattern(call)?;
            }
        }
        Expr::Comprehension(c) => {
            if in_comprehension {
                return Err(
                    "nested comprehensions (map/filter/all/exists inside another) are not \
                     allowed: their cost grows with the product of list sizes"
                        .into(),
                );
            }
            if comprehension_kind(c).is_none() {
                return Err("this comprehension is not supported".into());
            }
            check(&c.iter_range, in_comprehension)?;
            for part in [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                check(part, true)?;
            }
            return Ok(());
        }
        _ => {}
    }
    for child in children(expr) {
        check(child, in_comprehension)?;
    }
    Ok(())
}

/// `matches` needs a literal pattern, short, whose compiled form is small: its cost is
/// then bounded by the text's length.
fn check_pattern(call: &CallExpr) -> Result<(), String> {
    let pattern = match (&call.target, call.args.as_slice()) {
        (Some(_), [pattern]) | (None, [_, pattern]) => pattern,
        _ => return Err("matches() takes a string and a pattern".into()),
    };
    let Expr::Literal(LiteralValue::String(pattern)) = &pattern.expr else {
        return Err("the pattern of matches() must be a string literal".into());
    };
    let pattern = pattern.inner();
    if pattern.len() > MAX_PATTERN {
        return Err(format!(
            "the pattern of matches() is longer than {MAX_PATTERN} bytes"
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map(drop)
        .map_err(|e| {
            format!(
                "the pattern of matches() is not a valid regular expression small enough to run: {}",
                bounded_display(&e, EXCERPT)
            )
        })
}

/// Makes every comprehension step read [`STEP`], which the evaluation's resolver serves
/// only within its limits: `e` becomes `@step ? e : null`. map/filter keep a literal
/// loop condition (cel then appends in place) and check in their guard and appended
/// element; the others check in their loop condition.
fn rewrite(expr: &mut IdedExpr) {
    if let Expr::Comprehension(c) = &mut expr.expr {
        let append = matches!(comprehension_kind(c), Some(Comprehension::Append { .. }));
        if append {
            if let Expr::Call(call) = &mut c.loop_step.expr
                && call.func_name == operators::CONDITIONAL
            {
                guard_step(&mut call.args[0]);
                if let Expr::Call(add) = &mut call.args[1].expr
                    && let Expr::List(list) = &mut add.args[1].expr
                {
                    list.elements.iter_mut().for_each(guard_step);
                }
            } else if let Expr::Call(add) = &mut c.loop_step.expr
                && let Expr::List(list) = &mut add.args[1].expr
            {
                list.elements.iter_mut().for_each(guard_step);
            }
        } else {
            guard_step(&mut c.loop_cond);
        }
    }
    match &mut expr.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                rewrite(target);
            }
            call.args.iter_mut().for_each(rewrite);
        }
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                rewrite(part);
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(rewrite),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                match &mut entry.expr {
                    EntryExpr::MapEntry(m) => {
                        rewrite(&mut m.key);
                        rewrite(&mut m.value);
                    }
                    EntryExpr::StructField(f) => rewrite(&mut f.value),
                }
            }
        }
        Expr::Struct(_) => {}
        Expr::Select(select) => rewrite(&mut select.operand),
    }
}

/// `e` -> `@step ? e : null`.
fn guard_step(expr: &mut IdedExpr) {
    if is_step_guard(expr) {
        return;
    }
    let inner = std::mem::take(expr);
    *expr = IdedExpr {
        id: inner.id,
        expr: Expr::Call(CallExpr {
            func_name: operators::CONDITIONAL.into(),
            target: None,
            args: vec![
                IdedExpr {
                    id: inner.id,
                    expr: Expr::Ident(STEP.into()),
                },
                inner,
                IdedExpr {
                    id: 0,
                    expr: Expr::Literal(LiteralValue::Null),
                },
            ],
        }),
    };
}

fn is_step_guard(expr: &IdedExpr) -> bool {
    matches!(&expr.expr, Expr::Call(call)
        if call.func_name == operators::CONDITIONAL
            && matches!(call.args.first().map(|a| &a.expr), Some(Expr::Ident(n)) if n == STEP))
}
