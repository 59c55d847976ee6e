//! Idempotency keys: exactly-once writes across lost answers.
//!
//! A write whose answer is lost (the connection reset after the API server committed
//! it) leaves the writer unable to tell "applied" from "not applied". Re-reading does
//! not help by itself: the fresh object may carry this write or someone else's. So a
//! request may carry a key, and safewrite records it in the object itself, in the
//! `safewrite.dev/applied-keys` annotation, in the same write as the change: the key is
//! committed if and only if the change is. Before every attempt the fresh object is
//! searched for the key; when it is there the change was made, and the loop ends without
//! writing again.
//!
//! Guarantees and limits:
//! - Exactly once per key for as long as the key is among the object's
//!   [`REMEMBERED`] most recent keys: a retry that comes after that many other keyed
//!   writes to the same object may apply the change again.
//! - The object must keep its annotations: a writer that replaces them wholesale erases
//!   the record. Deleting and re-creating the object forgets every key.
//! - Only the main resource: a status subresource write cannot change annotations.
//! - Keys are chosen by the caller and must be unique per intended change; the same key
//!   with a different mutation is treated as the same change (the first one wins).

use serde_json::Value;

use crate::mutation::FieldViolation;

/// The annotation that holds the recent keys, a JSON array, oldest first.
pub const ANNOTATION: &str = "safewrite.dev/applied-keys";

/// How many keys an object remembers.
pub const REMEMBERED: usize = 32;

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 128;

/// Checks a key's shape: 1 to [`MAX_KEY_LEN`] characters of `[A-Za-z0-9._:-]`.
pub fn validate(key: &str, field: &str) -> Result<(), FieldViolation> {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.chars().all(fits) {
        return Err(FieldViolation::new(
            field,
            format!(
                "must be 1 to {MAX_KEY_LEN} characters of [A-Za-z0-9._:-] (a UUID works), got {} characters",
                key.chars().count()
            ),
        ));
    }
    Ok(())
}

/// The keys recorded on `object`, oldest first; none when the annotation is missing or
/// not a JSON array of strings.
fn recorded(object: &Value) -> Vec<String> {
    object["metadata"]["annotations"][ANNOTATION]
        .as_str()
        .and_then(|text| serde_json::from_str::<Vec<String>>(text).ok())
        .unwrap_or_default()
}

/// True when `key` was recorded on `object` by an earlier write.
pub fn applied(object: &Value, key: &str) -> bool {
    recorded(object).iter().any(|k| k == key)
}

/// Records `key` on `object` (the body about to be written), keeping the most recent
/// [`REMEMBERED`] keys.
pub fn record(object: &mut Value, key: &str) {
    let mut keys = recorded(object);
    keys.retain(|k| k != key);
    keys.push(key.to_string());
    let excess = keys.len().saturating_sub(REMEMBERED);
    keys.drain(..excess);
    let Some(object) = object.as_object_mut() else {
        return;
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(metadata) = metadata.as_object_mut() else {
        return;
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if !annotations.is_object() {
        *annotations = Value::Object(Default::default());
    }
    let text = serde_json::to_string(&keys).expect("strings serialize");
    annotations[ANNOTATION] = Value::String(text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recorded_key_is_found_and_others_are_not() {
        let mut object = json!({"metadata": {"name": "a"}, "data": {"n": "1"}});
        assert!(!applied(&object, "k1"));
        record(&mut object, "k1");
        assert!(applied(&object, "k1"));
        assert!(!applied(&object, "k2"));
        assert_eq!(object["data"], json!({"n": "1"}), "only metadata changes");
    }

    #[test]
    fn only_the_most_recent_keys_are_remembered() {
        let mut object = json!({"metadata": {"annotations": {"other": "kept"}}});
        for i in 0..REMEMBERED + 5 {
            record(&mut object, &format!("k{i}"));
        }
        assert_eq!(recorded(&object).len(), REMEMBERED);
        assert!(!applied(&object, "k4"), "the oldest are forgotten");
        assert!(applied(&object, "k5"));
        assert!(applied(&object, &format!("k{}", REMEMBERED + 4)));
        assert_eq!(object["metadata"]["annotations"]["other"], "kept");
        // Recording a key again moves it to the end instead of duplicating it.
        record(&mut object, "k5");
        let keys = recorded(&object);
        assert_eq!(keys.last().map(String::as_str), Some("k5"));
        assert_eq!(keys.iter().filter(|k| *k == "k5").count(), 1);
    }

    #[test]
    fn a_garbled_annotation_counts_as_no_keys() {
        let mut object = json!({"metadata": {"annotations": {ANNOTATION: "not json"}}});
        assert!(!applied(&object, "k"));
        record(&mut object, "k");
        assert_eq!(recorded(&object), vec!["k".to_string()]);
    }

    #[test]
    fn keys_are_validated() {
        for good in [
            "a",
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "job:42.retry_1",
        ] {
            assert!(validate(good, "f").is_ok(), "{good}");
        }
        let long = "x".repeat(MAX_KEY_LEN + 1);
        for bad in ["", "has space", "quote\"", "ü", long.as_str()] {
            assert!(validate(bad, "f").is_err(), "{bad}");
        }
    }
}
