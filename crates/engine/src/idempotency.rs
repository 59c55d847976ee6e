//! Idempotency keys: exactly-once writes across lost answers.
//!
//! A write whose answer is lost (the connection reset after the API server committed
//! it) leaves the writer unable to tell "applied" from "not applied". Re-reading does
//! not help by itself: the fresh object may carry this write or someone else's. So a
//! request may carry a key, and safewrite records it in the object itself, in the
//! `safewrite.dev/applied-keys` annotation, in the same write as the change: the key is
//! committed if and only if the change is. Before every attempt the fresh object is
//! searched for the key; when it is there the change was made, and the loop ends without
//! writing again. A group commit records the keys of all its members in its one write.
//!
//! The annotation holds a digest of each key (the first 64 bits of its SHA-256, 11
//! characters of base64url), oldest first, separated by spaces: 1,024 keys take 12 KiB.
//! Objects written by earlier versions hold a JSON array of the keys themselves; it is
//! read as well and rewritten as digests by the next keyed write.
//!
//! Guarantees and limits:
//! - Exactly once per key for as long as the key is among the object's [`REMEMBERED`]
//!   most recent keys: a retry that comes after 1,024 other keyed changes to the same
//!   object may apply the change again. That is 16 group commits of the largest size
//!   (`MAX_MEMBERS` writes each), or 60 s of 17 keyed writes per second.
//! - The object must keep its annotations: a writer that replaces them wholesale erases
//!   the record. Deleting and re-creating the object forgets every key.
//! - Only the main resource: a status subresource write cannot change annotations.
//! - Keys are chosen by the caller and must be unique per intended change; the same key
//!   with a different mutation is treated as the same change (the first one wins). Two
//!   keys share a digest with probability 2^-64 per pair.

use base64::Engine as _;
use serde_json::Value;

use safewrite_api::target::FieldViolation;

/// The annotation that holds the recent keys' digests, oldest first.
pub const ANNOTATION: &str = "safewrite.dev/applied-keys";

/// How many keys an object remembers.
pub const REMEMBERED: usize = 1024;

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

/// The digest recorded for `key`.
pub fn digest(key: &str) -> String {
    let sha = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&sha.as_ref()[..8])
}

/// The digests recorded on `object`, oldest first; none when the annotation is missing
/// or garbled.
fn recorded(object: &Value) -> Vec<String> {
    let Some(text) = object["metadata"]["annotations"][ANNOTATION].as_str() else {
        return Vec::new();
    };
    if text.starts_with('[') {
        // Written by an earlier version: the keys themselves, as a JSON array.
        return serde_json::from_str::<Vec<String>>(text)
            .map(|keys| keys.iter().map(|k| digest(k)).collect())
            .unwrap_or_default();
    }
    let digest_like = |d: &&str| {
        d.len() == 11
            && d.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    text.split(' ')
        .filter(digest_like)
        .map(str::to_string)
        .collect()
}

/// True when `key` was recorded on `object` by an earlier write.
pub fn applied(object: &Value, key: &str) -> bool {
    let key = digest(key);
    recorded(object).contains(&key)
}

/// Records `keys` on `object` (the body about to be written), in order, keeping the
/// most recent [`REMEMBERED`].
pub fn record<'k>(object: &mut Value, keys: impl IntoIterator<Item = &'k str>) {
    let mut digests = recorded(object);
    for key in keys {
        let key = digest(key);
        digests.retain(|d| *d != key);
        digests.push(key);
    }
    let excess = digests.len().saturating_sub(REMEMBERED);
    digests.drain(..excess);
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
    annotations[ANNOTATION] = Value::String(digests.join(" "));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recorded_key_is_found_and_others_are_not() {
        let mut object = json!({"metadata": {"name": "a"}, "data": {"n": "1"}});
        assert!(!applied(&object, "k1"));
        record(&mut object, ["k1"]);
        assert!(applied(&object, "k1"));
        assert!(!applied(&object, "k2"));
        assert_eq!(object["data"], json!({"n": "1"}), "only metadata changes");
        assert_eq!(
            object["metadata"]["annotations"][ANNOTATION],
            json!(digest("k1"))
        );
    }

    #[test]
    fn only_the_most_recent_keys_are_remembered() {
        let mut object = json!({"metadata": {"annotations": {"other": "kept"}}});
        for i in 0..REMEMBERED + 5 {
            record(&mut object, [format!("k{i}").as_str()]);
        }
        assert_eq!(recorded(&object).len(), REMEMBERED);
        assert!(!applied(&object, "k4"), "the oldest are forgotten");
        assert!(applied(&object, "k5"));
        assert!(applied(&object, &format!("k{}", REMEMBERED + 4)));
        assert_eq!(object["metadata"]["annotations"]["other"], "kept");
        // Recording a key again moves it to the end instead of duplicating it.
        record(&mut object, ["k5"]);
        let keys = recorded(&object);
        assert_eq!(keys.last(), Some(&digest("k5")));
        assert_eq!(keys.iter().filter(|k| **k == digest("k5")).count(), 1);
        let size = object["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .unwrap()
            .len();
        assert!(size < 12 * 1024, "{size} bytes");
    }

    #[test]
    fn a_batch_records_every_member_in_order() {
        let mut object = json!({});
        record(&mut object, ["a", "b", "c"]);
        assert_eq!(
            recorded(&object),
            vec![digest("a"), digest("b"), digest("c")]
        );
    }

    #[test]
    fn keys_written_by_earlier_versions_are_still_found() {
        let mut object = json!({"metadata": {"annotations": {ANNOTATION: r#"["job-6","job-7"]"#}}});
        assert!(applied(&object, "job-7"));
        assert!(!applied(&object, "job-8"));
        record(&mut object, ["job-8"]);
        assert!(applied(&object, "job-6") && applied(&object, "job-7"));
        assert!(applied(&object, "job-8"));
    }

    #[test]
    fn a_garbled_annotation_counts_as_no_keys() {
        let mut object = json!({"metadata": {"annotations": {ANNOTATION: "not json"}}});
        assert!(!applied(&object, "k"));
        record(&mut object, ["k"]);
        assert_eq!(recorded(&object), vec![digest("k")]);
        let mut object = json!({"metadata": {"annotations": {ANNOTATION: "[broken"}}});
        assert!(!applied(&object, "k"));
        record(&mut object, ["k"]);
        assert_eq!(recorded(&object), vec![digest("k")]);
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
