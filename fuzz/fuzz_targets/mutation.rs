//! Applies an arbitrary JSON Patch, merge patch, apply configuration or CEL expression
//! to an arbitrary JSON object, through `Mutation::from_proto` and `apply`.
//!
//! Input: one byte choosing the kind, then the object's JSON and the mutation's text
//! separated by the first NUL byte (a missing or invalid object is `{}`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use safewrite::engine::mutation::Mutation;
use safewrite::pb;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let (object, text) = match rest.iter().position(|&b| b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&b""[..], rest),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let object: serde_json::Value =
        serde_json::from_slice(object).unwrap_or_else(|_| serde_json::json!({}));
    let text = text.to_string();
    use pb::mutation::Kind;
    let kind = match kind % 4 {
        0 => Kind::JsonPatch(pb::JsonPatch { patch_json: text }),
        1 => Kind::MergePatch(pb::MergePatch { patch_json: text }),
        2 => Kind::Cel(pb::CelMutation { expression: text }),
        _ => Kind::Apply(pb::ServerSideApply {
            configuration_json: text,
            ..Default::default()
        }),
    };
    let mutation = pb::Mutation { kind: Some(kind) };
    match Mutation::from_proto("mutation", Some(&mutation)) {
        Err(violation) => common::check_violation(&violation),
        Ok(mutation) => {
            if let Err(error) = common::block_on(mutation.apply(&object, None)) {
                common::check_apply_error(&error);
            }
        }
    }
});
