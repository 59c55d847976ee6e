//! The bounds, each shown on the inputs that used to hurt the process.
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use safewrite_api::deadline::AnswerBy;
use safewrite_api::target::FieldViolation;

use super::eval::POOL;
use super::limits::VALUE;
use super::*;

/// A limit that only the runtime bounds enforce.
fn unbounded_cost(time: Duration) -> CelLimits {
    CelLimits {
        max_cost: u64::MAX,
        max_steps: u64::MAX,
        time,
        max_result: u64::MAX,
    }
}

fn refused(source: &str) -> FieldViolation {
    Cel::compile("mutation.cel.expression", source).expect_err("refused")
}

/// `n` copies of `part` after `head`.
fn repeat(head: &str, part: &str, n: usize) -> String {
    format!("{head}{}", part.repeat(n))
}

fn nested(open: &str, inner: &str, close: &str, n: usize) -> String {
    format!("{}{inner}{}", open.repeat(n), close.repeat(n))
}

fn literal_list(n: usize) -> String {
    format!("[{}]", vec!["0"; n].join(","))
}

#[test]
fn deep_selections_are_refused_not_a_crash() {
    // 5,000 selections (10 KB): used to overflow the stack of a tokio worker.
    let err = refused(&repeat("object", ".a", 5_000));
    assert_eq!(err.field, "mutation.cel.expression");
    assert!(err.description.contains("chains more than"), "{err}");
    // The same through the precondition field, and 100 KB variants.
    let err = Cel::compile("preconditions.cel", &repeat("object", ".a", 5_000)).unwrap_err();
    assert_eq!(err.field, "preconditions.cel");
    let err = refused(&repeat("object", ".a", 50_000));
    assert!(err.description.contains("longer than"), "{err}");
    let err = refused(&repeat("object", "[0]", 4_000));
    assert!(err.description.contains("chains more than"), "{err}");
    let err = refused(&repeat("object", ".f()", 3_000));
    assert!(err.description.contains("chains more than"), "{err}");
    // Within the limit, a long chain is fine.
    Cel::compile("c", &format!("has({})", repeat("object", ".a", 50))).unwrap();
}

#[test]
fn long_operator_chains_are_refused_not_a_crash() {
    for source in [
        repeat("1", "+1", 8_000),
        repeat("1", "*1", 8_000),
        repeat("'a'", "+'a'", 3_000),
        repeat("1", " - 1", 4_000),
        repeat("1", "+1", 50_000),
    ] {
        let err = refused(&source);
        assert!(
            err.description.contains("too deeply built") || err.description.contains("longer than"),
            "{err}"
        );
        assert!(err.description.len() < 400, "{err}");
    }
    // `&&` / `||` chains are balanced: long ones are fine.
    Cel::compile("c", &repeat("true", " && true", 1_000)).unwrap();
}

#[test]
fn deep_nesting_of_every_kind_is_refused_not_a_crash() {
    let n = 5_000;
    for source in [
        nested("(", "1", ")", n),
        nested("(1+", "1", ")", n),
        nested("[", "1", "]", n),
        nested("{1:", "1", "}", n),
        nested("size(", "'a'", ")", n),
        nested("object.f(", "1", ")", n),
        repeat("", "true ? 1 : ", n) + "1",
        repeat("", "!-", n) + "1",
        repeat("", "-!", n) + "true",
        nested("[{(", "1", ")}]", n),
        nested("(", "1", ")", 50_000),
    ] {
        let err = refused(&source);
        assert!(err.description.len() < 400, "{err}");
    }
    for source in [
        repeat("", "!", 8_000) + "true",
        repeat("", "-", 8_000) + "1",
    ] {
        let err = refused(&source);
        assert!(err.description.contains("too deeply built"), "{err}");
    }
    // Short runs are fine.
    Cel::compile("c", &(repeat("", "!", 50) + "true")).unwrap();
}

#[test]
fn a_costly_loop_over_a_literal_list_is_refused_at_compile_time() {
    // `L.map(x, L)` with 2,600 elements (10 KB): used to take hundreds of MB.
    let list = literal_list(2_600);
    let err = refused(&format!("{list}.map(x, {list})"));
    assert!(err.description.contains("too costly"), "{err}");
    assert!(err.description.len() < 400, "{err}");
    for source in [
        format!("{list}.filter(x, {list}.size() > 0)"),
        format!("{list}.all(x, {list}.size() > 0)"),
        format!("{list}.exists_one(x, {list} == [])"),
        format!("{{'a': {list} + {list}}}.a.map(x, [x, x, x, x])"),
    ] {
        let err = refused(&source);
        assert!(err.description.contains("too costly"), "{err}");
    }
    // A loop over a small literal is fine.
    Cel::compile("c", &format!("{}.map(x, x + 1)", literal_list(100))).unwrap();
}

#[tokio::test]
async fn a_costly_loop_over_the_object_is_refused_before_evaluating() {
    let cel = Cel::compile("c", "{'n': object.xs.map(x, object.xs)}").unwrap();
    let xs: Vec<i64> = (0..2_600).collect();
    let started = std::time::Instant::now();
    let err = cel
        .evaluate(&json!({"xs": xs}), AnswerBy::NONE)
        .await
        .unwrap_err();
    assert!(matches!(err, CelError::TooCostly { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // The quadratic shape over a big object too.
    let cel = Cel::compile(
        "c",
        "{'n': object.xs.map(a, size(object.xs + object.xs + object.xs)).size()}",
    )
    .unwrap();
    let xs: Vec<i64> = (0..200_000).collect();
    let err = cel
        .evaluate(&json!({"xs": xs}), AnswerBy::NONE)
        .await
        .unwrap_err();
    assert!(matches!(err, CelError::TooCostly { .. }), "{err}");
    // The same shape over a small object is fine.
    let xs: Vec<i64> = (0..20).collect();
    cel.evaluate(&json!({"xs": xs}), AnswerBy::NONE)
        .await
        .unwrap();
}

#[tokio::test]
async fn ordinary_loops_over_a_big_object_are_cheap_enough() {
    // Within the cost bound (the time limit of a busy debug build is not the point).
    let generous = CelLimits {
        time: Duration::from_secs(5),
        ..CelLimits::DEFAULT
    };
    let items: Vec<Value> = (0..5_000)
        .map(|i| json!({"name": format!("item-{i}"), "n": i}))
        .collect();
    let object = json!({"spec": {"items": items}, "metadata": {"name": "item-7"}});
    for source in [
        "{'names': object.spec.items.map(i, i.name)}",
        "{'big': object.spec.items.filter(i, i.n % 2 == 0).size()}",
        "{'any': object.spec.items.exists(i, i.name == object.metadata.name)}",
        "{'all': object.spec.items.all(i, i.n >= 0)}",
        "{'one': object.spec.items.exists_one(i, i.n == 3)}",
        "{'more': object.spec.items + [{'name': 'new', 'n': -1}]}",
    ] {
        let cel = Cel::compile("c", source).unwrap();
        let result = cel.evaluate_within(&object, AnswerBy::NONE, generous).await;
        assert!(result.is_ok(), "{source}: {result:?}");
    }
}

#[tokio::test]
async fn the_time_limit_stops_loops_that_do_not_read_object() {
    let list = literal_list(2_600);
    let limits = unbounded_cost(Duration::from_millis(50));
    for source in [
        format!("{list}.map(x, {list})"),
        format!("{list}.map(x, x >= 0, {list})"),
        format!("{list}.filter(x, {list}.size() == 0)"),
        format!("{list}.all(x, {list}.size() > 0)"),
        format!("{list}.exists(x, {list}.size() == 0)"),
        format!("{list}.exists_one(x, {list}.size() == 0)"),
    ] {
        let cel = Cel::compile_within("c", &source, limits).unwrap();
        let started = std::time::Instant::now();
        let err = cel
            .evaluate_within(&json!({}), AnswerBy::NONE, limits)
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert_eq!(err, CelError::TooSlow(limits.time), "{source}");
        // Stopped within one step (a step here builds a 2,600-element list).
        assert!(took < Duration::from_millis(500), "{source}: {took:?}");
    }
}

#[tokio::test]
async fn the_callers_deadline_stops_an_evaluation() {
    let list = literal_list(2_600);
    let limits = unbounded_cost(Duration::from_secs(10));
    let cel = Cel::compile_within("c", &format!("{list}.map(x, {list})"), limits).unwrap();
    let deadline = Instant::now() + Duration::from_millis(50);
    let started = std::time::Instant::now();
    let err = cel
        .evaluate_within(&json!({}), AnswerBy::at(Some(deadline)), limits)
        .await;
    assert_eq!(err.unwrap_err(), CelError::Deadline);
    assert!(started.elapsed() < Duration::from_millis(500));
}

#[tokio::test]
async fn the_step_budget_stops_a_loop() {
    let limits = CelLimits {
        max_cost: u64::MAX,
        max_steps: 1_000,
        time: Duration::from_secs(10),
        max_result: u64::MAX,
    };
    let cel =
        Cel::compile_within("c", &format!("{}.map(x, x)", literal_list(2_000)), limits).unwrap();
    let err = cel
        .evaluate_within(&json!({}), AnswerBy::NONE, limits)
        .await
        .unwrap_err();
    assert_eq!(err, CelError::TooManySteps(1_000));
    // Under the budget, the same loop runs.
    let cel =
        Cel::compile_within("c", &format!("{}.map(x, x)", literal_list(500)), limits).unwrap();
    cel.evaluate_within(&json!({}), AnswerBy::NONE, limits)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_slot_honours_the_deadline() {
    // Every slot busy with a runaway evaluation for 400 ms.
    let list = literal_list(2_600);
    let slow = unbounded_cost(Duration::from_millis(400));
    let hog = Cel::compile_within("c", &format!("{list}.all(x, {list}.size() > 0)"), slow).unwrap();
    let hogs: Vec<_> = (0..cel_concurrency())
        .map(|_| {
            let hog = hog.clone();
            tokio::spawn(async move { hog.evaluate_within(&json!({}), AnswerBy::NONE, slow).await })
        })
        .collect();
    // Let them take their slots.
    let slots = POOL.slots.clone();
    while slots.available_permits() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // A cheap program runs on the caller's task: no slot needed.
    let cheap = Cel::compile("c", "1 + 1").unwrap();
    let value = cheap
        .evaluate(
            &json!({}),
            AnswerBy::at(Some(Instant::now() + Duration::from_millis(50))),
        )
        .await;
    assert_eq!(value, Ok(json!(2)));
    // One deeper than that goes to the pool, and waits for a slot.
    let quick = Cel::compile("c", &repeat("1", " + 1", INLINE_MAX_DEPTH)).unwrap();
    assert!(!quick.inline);
    let started = std::time::Instant::now();
    let deadline = Instant::now() + Duration::from_millis(50);
    let err = quick
        .evaluate(&json!({}), AnswerBy::at(Some(deadline)))
        .await
        .unwrap_err();
    assert_eq!(err, CelError::Busy);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(45) && waited < Duration::from_millis(300));
    // Without a deadline, it waits for a slot and runs.
    let value = quick.evaluate(&json!({}), AnswerBy::NONE).await.unwrap();
    assert_eq!(value, json!(INLINE_MAX_DEPTH as i64 + 1));
    for hog in hogs {
        assert_eq!(hog.await.unwrap(), Err(CelError::TooSlow(slow.time)));
    }
}

#[test]
fn compile_errors_quote_a_short_excerpt() {
    // 16 KB with a syntax error in the middle: the message quotes around it only.
    let half = repeat("'abc'", ", 'abc'", 1_000);
    let source = format!("{{'a': [{half}, 'ok' ) ,{half}]}}");
    assert!(source.len() > 8_000);
    let err = refused(&source);
    assert!(
        err.description.len() <= 400,
        "{} bytes: {err}",
        err.description.len()
    );
    assert!(err.description.contains("'ok' )"), "{err}");
    assert!(err.description.contains("line 1, column"), "{err}");
    // A long token in the message is cut too.
    let err = refused(&format!("'{}' 'x'", "y".repeat(15_000)));
    assert!(
        err.description.len() <= 400,
        "{} bytes: {err}",
        err.description.len()
    );
}

#[tokio::test]
async fn evaluation_errors_quote_a_short_excerpt() {
    let cel = Cel::compile("c", "{'a': object.s + 1}").unwrap();
    let err = cel
        .evaluate(&json!({"s": "x".repeat(100_000)}), AnswerBy::NONE)
        .await
        .unwrap_err();
    assert!(matches!(err, CelError::Failed(_)), "{err}");
    assert!(
        err.to_string().len() <= 400,
        "{} bytes",
        err.to_string().len()
    );
}

#[tokio::test]
async fn results_are_bounded_by_the_object_they_are_merged_into() {
    // Cheap enough, but its result would be megabytes: refused at compile time.
    let list = literal_list(2_000);
    let err = refused(&format!(
        "{{'n': {list}.map(x, [x, x, x, x, x, x, x, x, x, x])}}"
    ));
    assert!(err.description.contains("result is too large"), "{err}");
    // Over the object: the limit grows with the object.
    let xs: Vec<i64> = (0..5_000).collect();
    let object = json!({"xs": xs});
    let cel = Cel::compile("c", "{'n': object.xs.map(x, [x, x, x, x, x, x, x, x])}").unwrap();
    let err = cel.evaluate(&object, AnswerBy::NONE).await.unwrap_err();
    assert!(matches!(err, CelError::ResultTooLarge { .. }), "{err}");
    let cel = Cel::compile("c", "{'xs': object.xs + object.xs}").unwrap();
    cel.evaluate(&object, AnswerBy::NONE).await.unwrap();
}

#[test]
fn nested_comprehensions_are_refused_at_compile_time() {
    let expr = "{'n': object.xs.map(a, object.xs.filter(b, a == b).size())}";
    let err = Cel::compile("c", expr).unwrap_err();
    assert!(err.description.contains("nested comprehensions"), "{err}");
    // One level is fine, and so are loops one after the other.
    Cel::compile("c", "{'n': object.xs.filter(a, a > 1).size()}").unwrap();
    Cel::compile("c", "{'n': object.xs.map(a, a + 1).filter(b, b > 1)}").unwrap();
}

#[test]
fn what_has_no_cost_rule_is_refused_at_compile_time() {
    let err = refused("{'a': object.name.lowerAscii()}");
    assert!(
        err.description.contains("lowerAscii() is not supported"),
        "{err}"
    );
    let err = refused("object.name.matches(object.pattern)");
    assert!(err.description.contains("string literal"), "{err}");
    let err = refused("object.name.matches('(a{1000}){1000}')");
    assert!(err.description.contains("small enough"), "{err}");
    let err = refused("google.protobuf.Int64Value{value: 1}");
    assert!(err.description.contains("not supported"), "{err}");
    Cel::compile("c", "object.name.matches('^[a-z0-9-]+$')").unwrap();
}

#[tokio::test]
async fn map_and_filter_still_append_in_place() {
    // Copying the accumulator at every step would be quadratic: 2e8 copies, tens of
    // seconds; appending in place takes milliseconds (more on a busy debug build).
    let xs: Vec<i64> = (0..20_000).collect();
    let object = json!({"xs": xs});
    let limits = CelLimits {
        time: Duration::from_secs(3),
        ..CelLimits::DEFAULT
    };
    for source in [
        "{'n': object.xs.map(x, x).size()}",
        "{'n': object.xs.filter(x, x % 2 == 0).size()}",
    ] {
        let cel = Cel::compile("c", source).unwrap();
        cel.evaluate_within(&object, AnswerBy::NONE, limits)
            .await
            .unwrap();
    }
}

#[test]
fn estimates_bound_reads_of_the_object_by_the_object() {
    let cel = Cel::compile("c", "object.spec.items + ['x']").unwrap();
    let small = json!({"spec": {"items": ["a"]}, "other": "y".repeat(10_000)});
    let big = json!({"spec": {"items": vec!["a"; 10_000]}});
    // A static path is bounded by what it reaches, not the whole object.
    assert!(cel.estimated_cost(Some(&small)) < 1_000);
    assert!(cel.estimated_cost(Some(&big)) > 10_000 * VALUE);
    // A dynamic one by the whole object.
    let cel = Cel::compile("c", "object[object.k] + ['x']").unwrap();
    assert!(cel.estimated_cost(Some(&small)) > 10_000);
}

/// The programs evaluated on the caller's task (at most [`INLINE_MAX_DEPTH`] deep, cheap)
/// fit an async worker's stack: tokio's default of 2 MiB, here in a debug build, whose
/// frames are larger than a release build's.
#[test]
fn cheap_expressions_fit_a_worker_stack() {
    let deep = INLINE_MAX_DEPTH - 1;
    let sources = [
        repeat("object.n", " + 1", deep - 1),
        format!(
            "{}1{}",
            "true ? (".repeat(deep / 2),
            ") : 0".repeat(deep / 2)
        ),
        format!("{}{}", "[".repeat(deep), "]".repeat(deep)),
        format!("object{}", ".a".repeat(deep - 1)),
        format!("{}object.n{}", "[".repeat(deep - 2), "]".repeat(deep - 2)),
    ];
    let mut object = json!({"n": 1});
    for _ in 0..deep {
        object = json!({"a": object, "n": 1});
    }
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            for source in &sources {
                let cel = Cel::compile("c", source).unwrap();
                assert!(cel.inline, "{source}");
                let estimated = cel.estimated_cost(Some(&object));
                assert!(estimated <= INLINE_MAX_COST, "{source}: {estimated}");
                let result = runtime.block_on(cel.evaluate(&object, AnswerBy::NONE));
                assert!(result.is_ok(), "{source}: {result:?}");
            }
        })
        .unwrap()
        .join()
        .expect("evaluated within a 2 MiB stack");
}

/// The fields of `object` that `source` reads, as paths (`"data.n"`), or `["*"]` for
/// the whole object.
fn reads_of(source: &str) -> Vec<String> {
    fn paths(reads: &super::ast::Reads, prefix: &str, out: &mut Vec<String>) {
        if reads.whole {
            out.push(if prefix.is_empty() { "*" } else { prefix }.to_owned());
            return;
        }
        for (field, inner) in &reads.fields {
            let path = if prefix.is_empty() {
                field.clone()
            } else {
                format!("{prefix}.{field}")
            };
            paths(inner, &path, out);
        }
    }
    let cel = Cel::compile("c", source).unwrap();
    let mut out = Vec::new();
    paths(&cel.reads, "", &mut out);
    out
}

#[test]
fn a_program_is_given_only_the_fields_it_selects() {
    assert_eq!(
        reads_of(r#"{"data": {"n": string(int(object.data.n) + 1)}}"#),
        ["data.n"]
    );
    assert_eq!(
        reads_of("has(object.metadata.labels) && object.spec.replicas > 1"),
        ["metadata.labels", "spec.replicas"]
    );
    // A field read whole covers every read below it, in either order.
    assert_eq!(
        reads_of("size(object.data) + size(object.data.n)"),
        ["data"]
    );
    assert_eq!(
        reads_of("size(object.data.n) + size(object.data)"),
        ["data"]
    );
    assert_eq!(reads_of(r#"object.data.all(k, k != "")"#), ["data"]);
    // Any other use of `object` reads all of it.
    for source in [
        "object",
        r#"object["data"]"#,
        "size(object) > 0",
        "[object][0].data",
        "object.data == object",
        r#"[1].map(object, object)"#,
    ] {
        assert_eq!(reads_of(source), ["*"], "{source}");
    }
    assert!(reads_of(r#"{"data": {"n": "1"}}"#).is_empty());
    // `.object` is `object` made absolute: the same variable.
    assert_eq!(reads_of(".object.data.n"), ["data.n"]);
    assert_eq!(reads_of(".object"), ["*"]);
}

#[tokio::test]
async fn an_absolute_object_is_the_object() {
    let object = json!({"data": {"n": "41"}, "spec": {"items": [1, 2, 3]}});
    for (absolute, plain) in [
        (".object.data.n", "object.data.n"),
        (".object", "object"),
        (
            "has(.object.data) && .object.data.n == '41'",
            "has(object.data) && object.data.n == '41'",
        ),
    ] {
        let absolute = Cel::compile("c", absolute).unwrap();
        let plain = Cel::compile("c", plain).unwrap();
        assert_eq!(
            absolute.evaluate(&object, AnswerBy::NONE).await,
            plain.evaluate(&object, AnswerBy::NONE).await
        );
    }
    // Estimated as the object, not as a scalar: the cost bound holds for both spellings.
    let plain = Cel::compile("c", "object.spec.items.map(x, [x, x, x])").unwrap();
    let absolute = Cel::compile("c", ".object.spec.items.map(x, [x, x, x])").unwrap();
    assert_eq!(
        absolute.estimated_cost(Some(&object)),
        plain.estimated_cost(Some(&object))
    );
    assert!(plain.estimated_cost(Some(&object)) > plain.estimated_cost(None));
}

#[tokio::test]
async fn a_program_answers_the_same_on_the_fields_it_selects_as_on_the_whole_object() {
    let objects = [
        json!({"metadata": {"name": "a", "labels": {"x": "1"}, "managedFields": [{"manager": "m"}]},
               "data": {"n": "41", "s": "text"}}),
        json!({"metadata": {"name": "b"}}),
        json!({"metadata": {"name": "c"}, "data": "not a map"}),
        json!({"metadata": {"name": "d"}, "data": {"n": 7}, "spec": null}),
    ];
    let sources = [
        r#"{"data": {"n": string(int(object.data.n) + 1)}}"#,
        "has(.object.metadata.labelk) && object.metadata.name == 'a'",
        "has(object.data.n)",
        "has(object.metadata.labels) ? object.metadata.labels : {}",
        "object.data",
        "size(object.data)",
        r#"object.data.all(k, k != "")"#,
        "object.spec.replicas",
        "has(object.spec)",
        "object.metadata.name + string(size(object.metadata))",
        r#"{"x": object.data.s}"#,
    ];
    let whole = super::ast::Reads::whole();
    for source in sources {
        let cel = Cel::compile("c", source).unwrap();
        assert!(!cel.reads.whole, "{source} reads only some fields");
        for object in &objects {
            let selected =
                super::eval::evaluate(&cel.program, &cel.reads, object, CelLimits::DEFAULT, None);
            let all = super::eval::evaluate(&cel.program, &whole, object, CelLimits::DEFAULT, None);
            assert_eq!(
                format!("{selected:?}"),
                format!("{all:?}"),
                "{source} on {object}"
            );
        }
    }
}
