//! Compiles arbitrary CEL source and evaluates it against a small fixed object: nothing
//! may crash, overflow a stack, run away or answer with a long message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use safewrite::mutation::cel::Cel;
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
            if let Err(error) = common::block_on(cel.evaluate(&OBJECT, None)) {
                common::check_apply_error(&error.into());
            }
        }
    }
});
