//! The bodies the engine sends: the object to PUT for the main resource or for the
//! status subresource, built from the fresh object and the mutated one.

use serde_json::Value;

/// The object's metadata.resourceVersion, or empty.
pub fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The DELETE body: `DeleteOptions` whose preconditions are the uid and resourceVersion
/// of the object the delete was decided on, so that the API server deletes that object
/// or answers 409; with `propagation` when the caller chose one. Dry run goes in the
/// body too: the API server reads a DELETE's options from its body when it has one,
/// and then ignores the query's.
pub fn delete_options(decided_on: &Value, propagation: Option<&str>, dry_run: bool) -> Vec<u8> {
    let mut options = serde_json::json!({
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {
            "uid": decided_on["metadata"]["uid"],
            "resourceVersion": decided_on["metadata"]["resourceVersion"],
        },
    });
    if let Some(policy) = propagation {
        options["propagationPolicy"] = Value::String(policy.into());
    }
    if dry_run {
        options["dryRun"] = serde_json::json!(["All"]);
    }
    serde_json::to_vec(&options).expect("a JSON value serializes")
}

/// The PUT body for the main resource: the mutated object at the version read, with the
/// fresh status (the main resource never writes status when a subresource owns it).
pub fn main_body(fresh: &Value, mut mutated: Value, has_status: bool, version: &str) -> Value {
    if let Some(metadata) = mutated.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("resourceVersion".into(), Value::String(version.into()));
    }
    if has_status && let Some(object) = mutated.as_object_mut() {
        match fresh.get("status") {
            Some(status) => object.insert("status".into(), status.clone()),
            None => object.remove("status"),
        };
    }
    mutated
}

/// The PUT body for the status subresource: the fresh object with the mutated status.
pub fn status_body(fresh: &Value, mutated: &Value) -> Value {
    let mut body = fresh.clone();
    if let Some(object) = body.as_object_mut() {
        match mutated.get("status") {
            Some(status) => object.insert("status".into(), status.clone()),
            None => object.remove("status"),
        };
    }
    body
}

/// The bytes of a PUT of `body` over `fresh`, the object it was made from.
///
/// `metadata.managedFields` is left out of a write to the main resource when `body`
/// holds them as `fresh` does: an update that carries none keeps the live object's
/// (apimachinery's field manager decodes the live object's when the request's are empty,
/// "to prevent clients who don't understand managedFields from deleting it"), and the
/// PUT is conditioned on `fresh`'s resourceVersion, so the live object's are `fresh`'s.
/// The API server writes and answers the same object, without decoding a list that is
/// often most of a small object's bytes. A change to them (a reset to `[]`, say) is
/// sent. The status subresource takes its managedFields from the live object however
/// the request sets them, so its bodies are sent whole.
pub fn put_bytes(fresh: &Value, body: &Value, main: bool) -> Vec<u8> {
    let unchanged = main
        && body["metadata"].get("managedFields").is_some()
        && body["metadata"]["managedFields"] == fresh["metadata"]["managedFields"];
    let written = if unchanged {
        serde_json::to_vec(&WithoutManagedFields(body))
    } else {
        serde_json::to_vec(body)
    };
    written.expect("a JSON value serializes")
}

/// An object serialized without `metadata.managedFields`, and not copied to be.
struct WithoutManagedFields<'a>(&'a Value);

impl serde::Serialize for WithoutManagedFields<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Object(fields) = self.0 else {
            return self.0.serialize(serializer);
        };
        serializer.collect_map(fields.iter().map(|(key, value)| match value {
            Value::Object(metadata) if key == "metadata" => (key, TopLevel::Metadata(metadata)),
            _ => (key, TopLevel::Value(value)),
        }))
    }
}

/// A top-level field of [`WithoutManagedFields`].
enum TopLevel<'a> {
    Metadata(&'a serde_json::Map<String, Value>),
    Value(&'a Value),
}

impl serde::Serialize for TopLevel<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            TopLevel::Metadata(metadata) => {
                serializer.collect_map(metadata.iter().filter(|(k, _)| *k != "managedFields"))
            }
            TopLevel::Value(value) => value.serialize(serializer),
        }
    }
}

/// About how many bytes `value` takes as compact JSON, without writing it: exact but for
/// escapes in strings and the digits of numbers (taken as 20). Counts nodes, not bytes,
/// so it costs little even for a large object.
pub fn json_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(b) => 4 + usize::from(!b),
        Value::Number(_) => 20,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => {
            let commas = items.len().saturating_sub(1);
            2 + commas + items.iter().map(json_len).sum::<usize>()
        }
        Value::Object(fields) => {
            let commas = fields.len().saturating_sub(1);
            2 + commas
                + fields
                    .iter()
                    .map(|(key, value)| key.len() + 3 + json_len(value))
                    .sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn main_body_keeps_the_fresh_status_and_version() {
        let fresh =
            json!({"metadata": {"resourceVersion": "5"}, "spec": {"a": 1}, "status": {"s": 1}});
        let mutated =
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"a": 2}, "status": {"s": 9}});
        let body = main_body(&fresh, mutated, true, "5");
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "5"}, "spec": {"a": 2}, "status": {"s": 1}})
        );
        // A change to status alone is no change to the main resource.
        let only_status =
            json!({"metadata": {"resourceVersion": "5"}, "spec": {"a": 1}, "status": {"s": 2}});
        assert_eq!(main_body(&fresh, only_status, true, "5"), fresh);
    }

    #[test]
    fn status_body_changes_only_status() {
        let fresh = json!({"spec": {"a": 1}, "status": {"s": 1}});
        let mutated = json!({"spec": {"a": 2}, "status": {"s": 2}});
        assert_eq!(
            status_body(&fresh, &mutated),
            json!({"spec": {"a": 1}, "status": {"s": 2}})
        );
    }

    #[test]
    fn unchanged_managed_fields_are_not_sent_to_the_main_resource() {
        let fields = json!([{"manager": "a", "operation": "Update"}]);
        let fresh = json!({"metadata": {"name": "n", "managedFields": fields, "resourceVersion": "5"}, "data": {"k": "1"}});
        let body = json!({"metadata": {"name": "n", "managedFields": fields, "resourceVersion": "5"}, "data": {"k": "2"}});
        let sent: Value = serde_json::from_slice(&put_bytes(&fresh, &body, true)).unwrap();
        assert_eq!(
            sent,
            json!({"metadata": {"name": "n", "resourceVersion": "5"}, "data": {"k": "2"}})
        );
        // The same bytes as the object without them, in the same order.
        let mut without = body.clone();
        without["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(
            put_bytes(&fresh, &body, true),
            serde_json::to_vec(&without).unwrap()
        );
        // To the status subresource, or changed (a reset), they are sent.
        assert_eq!(
            put_bytes(&fresh, &body, false),
            serde_json::to_vec(&body).unwrap()
        );
        let mut reset = body.clone();
        reset["metadata"]["managedFields"] = json!([]);
        assert_eq!(
            put_bytes(&fresh, &reset, true),
            serde_json::to_vec(&reset).unwrap()
        );
        // An object without them, or not an object, is sent as it is.
        let bare = json!({"metadata": {"name": "n"}});
        assert_eq!(
            put_bytes(&bare, &bare, true),
            serde_json::to_vec(&bare).unwrap()
        );
        assert_eq!(put_bytes(&json!(null), &json!([1]), true), b"[1]".to_vec());
    }

    #[test]
    fn json_len_is_the_compact_length_but_for_escapes_and_digits() {
        let object = json!({"metadata": {"name": "a", "labels": {}}, "data": {"blob": "x".repeat(1000)}, "list": [true, false, null, "s"]});
        assert_eq!(json_len(&object), object.to_string().len());
        assert_eq!(json_len(&json!(7)), 20);
    }
}
