//! Walks arbitrary bytes as each request message of the contract with the codec's check
//! (`safewrite_api::schema::SCHEMA.unknown_in`, which reads every request's wire bytes
//! before prost decodes them) and holds it to an independent decoder, prost-reflect's
//! `DynamicMessage`, which keeps what it does not know:
//!
//! - it never panics, whatever the bytes;
//! - for bytes the service's own prost types decode, whatever the dynamic message holds
//!   that the contract does not define (an unknown field, or an enum value its enum
//!   lacks, at any depth of the contract's messages: what prost would have dropped, or
//!   kept as a bare number) the walk finds; and in the message as prost-reflect encodes
//!   it again, the walk finds something exactly when there is something to find;
//! - the walk reads such bytes to their end: a field no message defines, appended to
//!   them, is found (a walk that stopped early, calling the bytes malformed, would let
//!   prost drop an unknown field after that point).
//!
//! The first byte picks the message; the rest is its encoding.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use prost::encoding::{WireType, encode_key, encode_varint};
use prost::{Message, Name};
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, Value};
use safewrite_api::pb;
use safewrite_api::schema::SCHEMA;

/// The contract's package: the walk checks its messages and enums, not google.protobuf's.
const PACKAGE: &str = "safewrite.v1";

/// The largest field number protobuf allows; no message of the contract defines it.
const LAST_FIELD_NUMBER: u32 = (1 << 29) - 1;

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET).expect("the embedded descriptor set")
});

/// Whether `message`, or a message of the contract inside it, holds an unknown field or
/// an enum value of the contract that its enum does not define.
fn holds_unknown(message: &DynamicMessage) -> bool {
    if message.unknown_fields().next().is_some() {
        return true;
    }
    message
        .fields()
        .any(|(field, value)| value_holds_unknown(&field.kind(), value))
}

fn value_holds_unknown(kind: &Kind, value: &Value) -> bool {
    match (kind, value) {
        (Kind::Message(m), Value::Message(inner)) if m.package_name() == PACKAGE => {
            holds_unknown(inner)
        }
        (Kind::Enum(e), Value::EnumNumber(n)) if e.package_name() == PACKAGE => {
            e.get_value(*n).is_none()
        }
        (kind, Value::List(items)) => items.iter().any(|item| value_holds_unknown(kind, item)),
        (Kind::Message(entry), Value::Map(map)) => {
            let value_kind = entry.map_entry_value_field().kind();
            map.values().any(|v| value_holds_unknown(&value_kind, v))
        }
        _ => false,
    }
}

fn check<M: Message + Default + Name>(bytes: &[u8]) {
    let full_name = M::full_name();
    let name = full_name.as_str();
    let found = SCHEMA.unknown_in(name, bytes);
    if M::decode(bytes).is_err() {
        return; // the codec refuses these bytes whatever the walk says
    }
    let descriptor = POOL
        .get_message_by_name(name)
        .expect("a message of the contract");
    let dynamic = DynamicMessage::decode(descriptor, bytes)
        .unwrap_or_else(|e| panic!("{name}: prost decodes, prost-reflect does not: {e}"));
    let holds = holds_unknown(&dynamic);
    // What the message keeps must be found in the bytes as sent. The walk may find more:
    // an unknown field inside a oneof member a later member replaced, or an unknown enum
    // value a later one overwrote, which prost drops too; refusing those is safe.
    assert!(
        found.is_some() || !holds,
        "{name}: the walk found nothing, but the message holds something unknown: {dynamic:?}"
    );
    // The message as prost-reflect encodes it, nothing replaced, unknown fields kept:
    // the walk finds something exactly when it holds something unknown.
    let canonical = dynamic.encode_to_vec();
    let found_canonical = SCHEMA.unknown_in(name, &canonical);
    assert_eq!(
        found_canonical.is_some(),
        holds,
        "{name}: the walk found {found_canonical:?} in {canonical:?}, whose message {} something unknown",
        if holds { "holds" } else { "holds nothing" }
    );
    let mut appended = bytes.to_vec();
    encode_key(LAST_FIELD_NUMBER, WireType::Varint, &mut appended);
    encode_varint(1, &mut appended);
    assert!(
        SCHEMA.unknown_in(name, &appended).is_some(),
        "{name}: prost decodes these bytes, but the walk missed field {LAST_FIELD_NUMBER} appended to them"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 7 {
        0 => check::<pb::UpdateWithRetryRequest>(bytes),
        1 => check::<pb::PatchStatusRequest>(bytes),
        2 => check::<pb::TransactRequest>(bytes),
        3 => check::<pb::GetRequest>(bytes),
        4 => check::<pb::LeadRequest>(bytes),
        5 => check::<pb::DeleteRequest>(bytes),
        _ => check::<pb::CapabilitiesRequest>(bytes),
    }
});
