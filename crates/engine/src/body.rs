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
    fn json_len_is_the_compact_length_but_for_escapes_and_digits() {
        let object = json!({"metadata": {"name": "a", "labels": {}}, "data": {"blob": "x".repeat(1000)}, "list": [true, false, null, "s"]});
        assert_eq!(json_len(&object), object.to_string().len());
        assert_eq!(json_len(&json!(7)), 20);
    }
}
