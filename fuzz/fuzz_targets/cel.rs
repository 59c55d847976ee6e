//! Compiles arbitrary CEL source and evaluates it against a small fixed object: nothing
//! may crash, overflow a stack, run away or answer with a long message, and the program
//! given only the fields of the object it selects answers as it does given all of it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use safewrite_api::deadline::AnswerBy;
use safewrite_mutation::CelError;
use safewrite_mutation::cel::Cel;
use std::sync::LazyLock;

#[path = "common.rs"]
mod common;

static OBJECT: LazyLock<serde_json::Value> = LazyLock::new(|| {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "ns", "labels": {"app": "x"}, "resourceVersion": "7"},
        "data": {"n": "41", "s": "hello"},
        "spec": {"items": ["a", "b", 3, 4.5, true, null, {"k": "v"}], "count": 2, "big": 9223372036854775807u64}
    })
});

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    match Cel::compile("mutation.cel.expression", source) {
        Err(violation) => common::check_violation(&violation),
        Ok(cel) => {
            let selected = common::block_on(cel.evaluate(&OBJECT, AnswerBy::NONE));
            if let Err(error) = &selected {
                common::check_apply_error(&error.clone().into());
            }
            let whole =
                common::block_on(cel.given_whole_object().evaluate(&OBJECT, AnswerBy::NONE));
            // Stopped by a time or step bound: when is not the program's answer.
            let stopped = |r: &Result<_, CelError>| {
                matches!(
                    r,
                    Err(CelError::TooSlow(_) | CelError::TooManySteps(_) | CelError::Deadline)
                )
            };
            if stopped(&selected) || stopped(&whole) {
                return;
            }
            // A message that shows a map lists its entries in no fixed order (each map
            // hashes its own way), so only its kind is compared.
            let shows_map = |r: &Result<_, CelError>| match r {
                Err(CelError::Failed(message)) => message.contains("Map {"),
                _ => false,
            };
            if shows_map(&selected) && shows_map(&whole) {
                return;
            }
            // A map's keys iterate in no fixed order either (CEL leaves it unspecified, and
            // each map hashes its own way), so a list built from them (`object.map(k, k)`,
            // `[..] + object`) may come out in another order: answers that differ only in
            // the order of some list's elements are the same answer.
            let canonical = |r: &Result<serde_json::Value, CelError>| match r {
                Ok(value) => format!("Ok({})", unordered(value)),
                Err(error) => format!("{error:?}"),
            };
            assert_eq!(
                canonical(&selected),
                canonical(&whole),
                "given only the fields it selects, {source:?} answers otherwise"
            );
        }
    }
});

/// `value` as text with every list's elements sorted (recursively): equal for two values
/// that differ only in the order of some list's elements.
fn unordered(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Array(items) => {
            let mut items: Vec<String> = items.iter().map(unordered).collect();
            items.sort();
            format!("[{}]", items.join(","))
        }
        serde_json::Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{k:?}:{}", unordered(v)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        other => other.to_string(),
    }
}
