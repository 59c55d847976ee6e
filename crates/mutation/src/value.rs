//! Small helpers on values and text that every file of the wing uses: a value's type
//! name, a short excerpt of a text, JSON parsed from a request field. They depend on
//! nothing else of the wing.

use serde_json::Value;

use safewrite_api::target::FieldViolation;

/// The longest excerpt of the request a message quotes (a message is sent back in gRPC
/// metadata, which has a size limit).
pub(super) const EXCERPT: usize = 160;

/// A short name of the JSON type of `value`, for messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Parses JSON text from a request field.
pub fn parse_json(field: &str, text: &str) -> Result<Value, FieldViolation> {
    if text.trim().is_empty() {
        return Err(FieldViolation::new(field, "required JSON text is empty"));
    }
    serde_json::from_str(text).map_err(|e| {
        FieldViolation::new(
            field,
            format!("not valid JSON: {}", short(&e.to_string(), EXCERPT)),
        )
    })
}

/// At most `max` bytes of `text`, whitespace collapsed, with `…` when cut.
pub fn short(text: &str, max: usize) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.len() > max {
            out.truncate(floor_char(&out, max));
            out.push('…');
            break;
        }
    }
    out
}

/// The largest char boundary of `text` at or before `index`.
pub(super) fn floor_char(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}
