//! What this build of the contract knows, read from its own descriptor set: the RPCs,
//! every field and enum value of `safewrite.v1`, and a check of a request's wire bytes
//! for a field or an enum value outside them.
//!
//! prost drops what it does not know, so a request from a newer client that sets a field
//! this sidecar lacks would be served as if the field were absent: a fenced write
//! written unfenced. [`Schema::unknown_in`] walks the encoded request before it is
//! decoded (the codec of the generated service does, for each request message it receives)
//! and names the first field or enum value it does not know; rpc Capabilities lists what
//! it knows, so that a client can refuse before sending.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::LazyLock;

use prost::Message as _;
use prost::bytes::Buf as _;
use prost::encoding::{WireType, decode_key, decode_varint};
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet};

use crate::pb;

/// The contract's package.
const PACKAGE: &str = "safewrite.v1";

/// This build's contract, read once from [`pb::FILE_DESCRIPTOR_SET`].
pub static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    let set =
        FileDescriptorSet::decode(pb::FILE_DESCRIPTOR_SET).expect("the embedded descriptor set");
    Schema::of(&set)
});

/// The RPCs, messages, fields and enum values of `safewrite.v1` this build knows.
#[derive(Debug)]
pub struct Schema {
    messages: HashMap<String, Fields>,
    enums: HashMap<String, HashSet<i32>>,
    requests: HashSet<String>,
    methods: Vec<String>,
    enum_values: Vec<String>,
}

/// A message's fields by number.
#[derive(Debug, Default)]
struct Fields(HashMap<u32, Field>);

#[derive(Debug)]
struct Field {
    name: String,
    /// The full name of its type when that is a message or an enum of the contract.
    nested: Option<Nested>,
}

#[derive(Debug)]
enum Nested {
    Message(String),
    Enum(String),
}

/// What [`Schema::unknown_in`] found: a field or an enum value this build does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unknown {
    /// A field number the message does not define.
    #[error(
        "{} sets field {number} of {message}, which this sidecar does not know",
        where_(within)
    )]
    Field {
        /// The known fields leading to the message holding it ("options"), empty for the
        /// request itself.
        within: String,
        /// The full name of the message holding it.
        message: String,
        /// Its field number.
        number: u32,
    },
    /// A value its enum does not define.
    #[error("{field} is {value}, a value of {enum_name} this sidecar does not know")]
    EnumValue {
        /// The known fields leading to it ("propagation_policy").
        field: String,
        /// The full name of the enum.
        enum_name: String,
        /// The value sent.
        value: i32,
    },
}

fn where_(within: &str) -> String {
    if within.is_empty() {
        "the request".to_string()
    } else {
        format!("the request's `{within}`")
    }
}

// === impl Schema ===

impl Schema {
    fn of(set: &FileDescriptorSet) -> Schema {
        let mut schema = Schema {
            messages: HashMap::new(),
            enums: HashMap::new(),
            requests: HashSet::new(),
            methods: Vec::new(),
            enum_values: Vec::new(),
        };
        for file in set.file.iter().filter(|f| f.package() == PACKAGE) {
            for message in &file.message_type {
                schema.add_message(PACKAGE, message);
            }
            for e in &file.enum_type {
                schema.add_enum(&format!("{PACKAGE}.{}", e.name()), e);
            }
            for service in &file.service {
                for method in &service.method {
                    schema
                        .methods
                        .push(format!("{PACKAGE}.{}/{}", service.name(), method.name()));
                    let input = method.input_type().trim_start_matches('.');
                    schema.requests.insert(input.to_string());
                }
            }
        }
        schema.enum_values.sort();
        schema
    }

    fn add_message(&mut self, scope: &str, message: &DescriptorProto) {
        let full = format!("{scope}.{}", message.name());
        let prefix = format!(".{PACKAGE}.");
        let fields = message
            .field
            .iter()
            .map(|field| {
                let in_package = field.type_name().starts_with(&prefix);
                let type_name = field.type_name().trim_start_matches('.').to_string();
                let nested = match field.r#type() {
                    Type::Message if in_package => Some(Nested::Message(type_name)),
                    Type::Enum if in_package => Some(Nested::Enum(type_name)),
                    _ => None,
                };
                let name = field.name().to_string();
                (field.number() as u32, Field { name, nested })
            })
            .collect();
        for nested in &message.nested_type {
            self.add_message(&full, nested);
        }
        for e in &message.enum_type {
            self.add_enum(&format!("{full}.{}", e.name()), e);
        }
        self.messages.insert(full, Fields(fields));
    }

    fn add_enum(&mut self, full: &str, e: &prost_types::EnumDescriptorProto) {
        for value in &e.value {
            self.enum_values.push(format!("{full}.{}", value.name()));
        }
        let numbers = e.value.iter().map(|v| v.number()).collect();
        self.enums.insert(full.to_string(), numbers);
    }

    /// The sidecar's RPCs, as method paths without the leading slash.
    pub fn methods(&self) -> &[String] {
        &self.methods
    }

    /// Every field of the contract's messages, by full name, sorted.
    pub fn fields(&self) -> Vec<String> {
        let names: BTreeSet<String> = self
            .messages
            .iter()
            .flat_map(|(message, fields)| {
                fields
                    .0
                    .values()
                    .map(move |f| format!("{message}.{}", f.name))
            })
            .collect();
        names.into_iter().collect()
    }

    /// Every value of the contract's enums, by full name, sorted.
    pub fn enum_values(&self) -> &[String] {
        &self.enum_values
    }

    /// The first field or enum value in `bytes`, an encoded `message` (a full name), that
    /// this build does not know; None when it knows everything in it, when `message` is
    /// not a request the service receives (answers from a newer sidecar are read as
    /// protobuf reads them), and when the bytes are malformed (prost's decoding refuses
    /// those, with its own message).
    pub fn unknown_in(&self, message: &str, bytes: &[u8]) -> Option<Unknown> {
        if !self.requests.contains(message) {
            return None;
        }
        self.walk(message, bytes, None).unwrap_or(None)
    }

    /// Err when the bytes are malformed. Allocates nothing unless it finds something
    /// unknown: the path to a field is made only to be reported.
    fn walk(
        &self,
        message: &str,
        mut bytes: &[u8],
        within: Option<&WalkedPath<'_>>,
    ) -> Result<Option<Unknown>, ()> {
        let Some(fields) = self.messages.get(message) else {
            return Ok(None);
        };
        while bytes.has_remaining() {
            let (number, wire) = decode_key(&mut bytes).map_err(drop)?;
            let Some(field) = fields.0.get(&number) else {
                return Ok(Some(Unknown::Field {
                    within: within.map(WalkedPath::render).unwrap_or_default(),
                    message: message.to_string(),
                    number,
                }));
            };
            let path = WalkedPath {
                parent: within,
                name: &field.name,
            };
            match wire {
                WireType::Varint => {
                    let value = decode_varint(&mut bytes).map_err(drop)?;
                    if let Some(Nested::Enum(enum_name)) = &field.nested {
                        let value = value as i32;
                        if !self
                            .enums
                            .get(enum_name)
                            .is_some_and(|known| known.contains(&value))
                        {
                            return Ok(Some(Unknown::EnumValue {
                                field: path.render(),
                                enum_name: enum_name.clone(),
                                value,
                            }));
                        }
                    }
                }
                WireType::SixtyFourBit => skip(&mut bytes, 8)?,
                WireType::ThirtyTwoBit => skip(&mut bytes, 4)?,
                WireType::LengthDelimited => {
                    let len =
                        usize::try_from(decode_varint(&mut bytes).map_err(drop)?).map_err(drop)?;
                    if bytes.len() < len {
                        return Err(());
                    }
                    let (inner, rest) = bytes.split_at(len);
                    bytes = rest;
                    if let Some(Nested::Message(nested)) = &field.nested
                        && let Some(found) = self.walk(nested, inner, Some(&path))?
                    {
                        return Ok(Some(found));
                    }
                }
                // Groups are not in proto3: prost refuses them.
                WireType::StartGroup | WireType::EndGroup => return Err(()),
            }
        }
        Ok(None)
    }
}

/// The known fields leading to one, innermost last, on the walk's stack.
struct WalkedPath<'a> {
    parent: Option<&'a WalkedPath<'a>>,
    name: &'a str,
}

// === impl WalkedPath ===

impl WalkedPath<'_> {
    /// "options.fence.lease".
    fn render(&self) -> String {
        match self.parent {
            Some(parent) => format!("{}.{}", parent.render(), self.name),
            None => self.name.to_string(),
        }
    }
}

fn skip(bytes: &mut &[u8], n: usize) -> Result<(), ()> {
    if bytes.len() < n {
        return Err(());
    }
    bytes.advance(n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn write_request() -> pb::UpdateWithRetryRequest {
        pb::UpdateWithRetryRequest {
            target: Some(pb::ObjectRef {
                name: "a".into(),
                ..Default::default()
            }),
            options: Some(pb::WriteOptions {
                field_manager: "m".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Appends field `number` (a varint) to an encoded message.
    fn with_varint(mut bytes: Vec<u8>, number: u32, value: u64) -> Vec<u8> {
        prost::encoding::encode_key(number, WireType::Varint, &mut bytes);
        prost::encoding::encode_varint(value, &mut bytes);
        bytes
    }

    #[test]
    fn a_request_it_knows_passes() {
        let bytes = write_request().encode_to_vec();
        assert_eq!(
            SCHEMA.unknown_in("safewrite.v1.UpdateWithRetryRequest", &bytes),
            None
        );
    }

    #[test]
    fn an_unknown_top_level_field_is_named() {
        let bytes = with_varint(write_request().encode_to_vec(), 99, 1);
        assert_eq!(
            SCHEMA.unknown_in("safewrite.v1.UpdateWithRetryRequest", &bytes),
            Some(Unknown::Field {
                within: String::new(),
                message: "safewrite.v1.UpdateWithRetryRequest".into(),
                number: 99
            })
        );
    }

    #[test]
    fn an_unknown_nested_field_is_named_with_its_path() {
        // WriteOptions with an extra field 77, as a newer client's option would be.
        let options = with_varint(
            pb::WriteOptions {
                field_manager: "m".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            77,
            5,
        );
        let mut bytes = pb::UpdateWithRetryRequest {
            target: write_request().target,
            ..Default::default()
        }
        .encode_to_vec();
        prost::encoding::encode_key(5, WireType::LengthDelimited, &mut bytes);
        prost::encoding::encode_varint(options.len() as u64, &mut bytes);
        bytes.extend_from_slice(&options);
        let found = SCHEMA.unknown_in("safewrite.v1.UpdateWithRetryRequest", &bytes);
        assert_eq!(
            found,
            Some(Unknown::Field {
                within: "options".into(),
                message: "safewrite.v1.WriteOptions".into(),
                number: 77
            })
        );
        assert_eq!(
            found.unwrap().to_string(),
            "the request's `options` sets field 77 of safewrite.v1.WriteOptions, which this sidecar does not know"
        );
    }

    #[test]
    fn an_unknown_enum_value_is_named() {
        let mut request = pb::DeleteRequest {
            target: write_request().target,
            ..Default::default()
        };
        request.propagation_policy = 9;
        let bytes = request.encode_to_vec();
        assert_eq!(
            SCHEMA.unknown_in("safewrite.v1.DeleteRequest", &bytes),
            Some(Unknown::EnumValue {
                field: "propagation_policy".into(),
                enum_name: "safewrite.v1.PropagationPolicy".into(),
                value: 9
            })
        );
    }

    #[test]
    fn answers_and_malformed_bytes_are_left_to_prost() {
        let answer = with_varint(pb::GetResponse::default().encode_to_vec(), 99, 1);
        assert_eq!(SCHEMA.unknown_in("safewrite.v1.GetResponse", &answer), None);
        let truncated = [0x0a, 0x10, 0x01];
        assert_eq!(
            SCHEMA.unknown_in("safewrite.v1.UpdateWithRetryRequest", &truncated),
            None
        );
    }

    #[test]
    fn it_lists_what_it_knows() {
        assert!(
            SCHEMA
                .methods()
                .contains(&"safewrite.v1.WriterService/Lead".to_string())
        );
        assert!(
            SCHEMA
                .methods()
                .contains(&"safewrite.v1.WriterService/Capabilities".to_string())
        );
        let fields = SCHEMA.fields();
        assert!(fields.contains(&"safewrite.v1.WriteOptions.fence".to_string()));
        assert!(fields.contains(&"safewrite.v1.Mutation.json_patch".to_string()));
        assert!(
            SCHEMA
                .enum_values()
                .contains(&"safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN".to_string())
        );
    }
}
