//! Applies an arbitrary JSON Patch, merge patch, apply configuration, CEL expression,
//! condition, finalizer, owner reference or keyed list entry to an arbitrary JSON object,
//! through `Mutation::from_proto` and `apply`.
//!
//! Input: one byte choosing the kind (its top bit: remove instead of add), then the
//! object's JSON and the mutation's text separated by the first NUL byte (a missing or
//! invalid object is `{}`); the structured kinds split the text into fields at '|'.
#![no_main]

use libfuzzer_sys::fuzz_target;
use safewrite_api::deadline::AnswerBy;
use safewrite_api::pb;
use safewrite_mutation::Mutation;

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
    // The structured kinds take their fields from the text split at '|'.
    let fields: Vec<String> = text.split('|').map(str::to_string).collect();
    let field = |i: usize| fields.get(i).cloned().unwrap_or_default();
    let remove = kind & 0x80 != 0;
    let kind = match (kind & 0x7f) % 9 {
        0 => Kind::JsonPatch(pb::JsonPatch { patch_json: text }),
        1 => Kind::MergePatch(pb::MergePatch { patch_json: text }),
        2 => Kind::Cel(pb::CelMutation { expression: text }),
        3 => Kind::Apply(pb::ServerSideApply {
            configuration_json: text,
            ..Default::default()
        }),
        4 => Kind::SetCondition(pb::SetCondition {
            conditions: vec![pb::Condition {
                r#type: field(0),
                status: field(1),
                reason: field(2),
                message: field(3),
                observed_generation: field(4).parse().ok(),
                last_transition_time: field(5),
            }],
            path: field(6),
        }),
        5 => Kind::RemoveCondition(pb::RemoveCondition {
            types: field(0).split(',').map(str::to_string).collect(),
            path: field(1),
        }),
        6 => Kind::Finalizer(pb::FinalizerChange {
            finalizer: text,
            remove,
        }),
        7 => Kind::OwnerReference(pb::OwnerReferenceChange {
            owner: Some(pb::OwnerReference {
                api_version: field(0),
                kind: field(1),
                name: field(2),
                uid: field(3),
                controller: !remove,
                block_owner_deletion: remove,
            }),
            remove,
        }),
        _ => Kind::ListEntry(pb::ListEntryChange {
            path: field(0),
            keys: field(1).split(',').map(str::to_string).collect(),
            entry_json: field(2),
            remove,
        }),
    };
    let mutation = pb::Mutation { kind: Some(kind) };
    match Mutation::from_proto("mutation", Some(&mutation)) {
        Err(violation) => common::check_violation(&violation),
        Ok(mutation) => {
            if let Err(error) = common::block_on(mutation.apply(&object, AnswerBy::NONE)) {
                common::check_apply_error(&error);
            }
        }
    }
});
