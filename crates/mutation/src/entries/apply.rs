//! Applying a list-entry change to the fresh object, with the semantics of the Go
//! helpers it stands for; what does not fit the object is an [`ApplyError`].

use std::time::SystemTime;

use serde_json::{Map, Value};

use super::change::{Condition, EntryChange, FieldPath};
use crate::error::ApplyError;
use crate::value::{short, type_name};

// === impl EntryChange ===

impl EntryChange {
    /// Applies the change to a copy of `fresh`; `now` is the time of the write.
    pub fn apply(&self, fresh: &Value, now: SystemTime) -> Result<Value, ApplyError> {
        let mut doc = fresh.clone();
        match self {
            EntryChange::SetConditions { path, conditions } => {
                let generation = fresh["metadata"]["generation"].as_i64();
                let list = list_at(&mut doc, path, "mutation.set_condition.path", true)?
                    .expect("created when missing");
                let now = humantime::format_rfc3339_seconds(now).to_string();
                for condition in conditions {
                    set_condition(list, condition, generation, &now);
                }
            }
            EntryChange::RemoveConditions { path, types } => {
                if let Some(list) =
                    list_at(&mut doc, path, "mutation.remove_condition.path", false)?
                {
                    list.retain(|entry| {
                        !entry["type"]
                            .as_str()
                            .is_some_and(|t| types.iter().any(|x| x == t))
                    });
                }
            }
            EntryChange::Finalizer { value, remove } => {
                finalizer(metadata(&mut doc)?, value, *remove)?;
            }
            EntryChange::Owner { owner, remove } => {
                let metadata = metadata(&mut doc)?;
                if *remove {
                    owner.remove_from(metadata);
                } else {
                    owner.ensure_in(metadata)?;
                }
            }
            EntryChange::ListEntry {
                path,
                keys,
                entry,
                remove,
            } => {
                if let Some(list) = list_at(&mut doc, path, "mutation.list_entry.path", !remove)? {
                    list_entry(list, keys, entry, *remove);
                }
            }
        }
        Ok(doc)
    }
}

/// AddFinalizer / RemoveFinalizer; none is added to an object being deleted.
fn finalizer(
    metadata: &mut Map<String, Value>,
    value: &str,
    remove: bool,
) -> Result<(), ApplyError> {
    let present = metadata
        .get("finalizers")
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|f| f.as_str() == Some(value)));
    match (remove, present) {
        (false, true) | (true, false) => {}
        (false, false) => {
            if metadata
                .get("deletionTimestamp")
                .is_some_and(|t| !t.is_null())
            {
                return Err(ApplyError::Deleting(value.to_string()));
            }
            push(metadata, "finalizers", Value::String(value.to_string()));
        }
        (true, true) => {
            remove_where(metadata, "finalizers", |f| f.as_str() == Some(value));
        }
    }
    Ok(())
}

/// Upserts (RFC 7386) or removes the entry of `list` whose `keys` match `entry`'s.
fn list_entry(list: &mut Vec<Value>, keys: &[String], entry: &Map<String, Value>, remove: bool) {
    let matches = |e: &Value| {
        keys.iter()
            .all(|k| e.get(k).is_some_and(|v| Some(v) == entry.get(k)))
    };
    let found = list.iter().position(matches);
    match (found, remove) {
        (Some(at), true) => {
            list.remove(at);
        }
        (None, true) => {}
        (Some(at), false) => json_patch::merge(&mut list[at], &Value::Object(entry.clone())),
        (None, false) => {
            let mut new = Value::Object(Map::new());
            json_patch::merge(&mut new, &Value::Object(entry.clone()));
            list.push(new);
        }
    }
}

/// meta.SetStatusCondition on a list of entries: the entry of the condition's type is
/// updated in place (status, and with it lastTransitionTime; reason, message,
/// observedGeneration), or a new entry is appended.
fn set_condition(list: &mut Vec<Value>, condition: &Condition, generation: Option<i64>, now: &str) {
    let observed = condition
        .observed_generation
        .or(generation)
        .filter(|g| *g != 0);
    let transition = condition
        .last_transition_time
        .clone()
        .unwrap_or_else(|| now.to_string());
    let existing = list
        .iter_mut()
        .find(|entry| entry["type"].as_str() == Some(condition.type_.as_str()))
        .and_then(Value::as_object_mut);
    let entry = match existing {
        Some(entry) => entry,
        None => {
            let mut entry = Map::new();
            entry.insert("type".into(), Value::String(condition.type_.clone()));
            entry.insert("status".into(), Value::String(condition.status.clone()));
            entry.insert(
                "lastTransitionTime".into(),
                Value::String(transition.clone()),
            );
            list.push(Value::Object(entry));
            list.last_mut()
                .and_then(Value::as_object_mut)
                .expect("just pushed")
        }
    };
    if entry.get("status").and_then(Value::as_str) != Some(condition.status.as_str()) {
        entry.insert("status".into(), Value::String(condition.status.clone()));
        entry.insert("lastTransitionTime".into(), Value::String(transition));
    }
    entry.insert("reason".into(), Value::String(condition.reason.clone()));
    entry.insert("message".into(), Value::String(condition.message.clone()));
    match observed {
        Some(generation) => entry.insert("observedGeneration".into(), Value::from(generation)),
        None => entry.remove("observedGeneration"),
    };
}

/// The object's metadata, which every object has.
fn metadata(doc: &mut Value) -> Result<&mut Map<String, Value>, ApplyError> {
    doc.get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or(ApplyError::NoMetadata)
}

/// Appends `value` to the list at `metadata[key]`, creating it.
pub(super) fn push(metadata: &mut Map<String, Value>, key: &str, value: Value) {
    match metadata.get_mut(key).and_then(Value::as_array_mut) {
        Some(list) => list.push(value),
        None => {
            metadata.insert(key.into(), Value::Array(vec![value]));
        }
    }
}

/// Removes the entries of `metadata[key]` that `which` picks; an emptied list goes
/// (the API server drops an empty list of these, and `[]` in a patch would not).
fn remove_where(metadata: &mut Map<String, Value>, key: &str, which: impl Fn(&Value) -> bool) {
    if let Some(list) = metadata.get_mut(key).and_then(Value::as_array_mut) {
        list.retain(|entry| !which(entry));
        if list.is_empty() {
            metadata.remove(key);
        }
    }
}

/// The list at `path` in `doc`: created (with the objects on the way) when missing and
/// `create`, else `None`. A value on the way that is not an object, or at the end that
/// is not a list, is the request's fault: `field` names it.
fn list_at<'a>(
    doc: &'a mut Value,
    path: &FieldPath,
    field: &str,
    create: bool,
) -> Result<Option<&'a mut Vec<Value>>, ApplyError> {
    let mut at = doc;
    for (depth, segment) in path.segments.iter().enumerate() {
        if !at.is_object() {
            return Err(not_an_object(field, path, depth, at));
        }
        let object = at.as_object_mut().expect("an object");
        if object.get(segment).is_none_or(Value::is_null) {
            if !create {
                return Ok(None);
            }
            let last = depth + 1 == path.segments.len();
            let empty = if last {
                Value::Array(Vec::new())
            } else {
                Value::Object(Map::new())
            };
            object.insert(segment.clone(), empty);
        }
        at = object.get_mut(segment).expect("there or just made");
    }
    let list = at;
    let kind = type_name(list);
    list.as_array_mut()
        .map(Some)
        .ok_or_else(|| ApplyError::PathDoesNotFit {
            field: field.to_string(),
            reason: format!(
                "{} is {kind} on the current object, not a list",
                short(path.as_str(), 120)
            ),
        })
}

fn not_an_object(field: &str, path: &FieldPath, depth: usize, value: &Value) -> ApplyError {
    let prefix = path.segments[..depth].join(".");
    ApplyError::PathDoesNotFit {
        field: field.to_string(),
        reason: format!(
            "{} runs through {}, which is {} on the current object, not a map",
            short(path.as_str(), 120),
            if prefix.is_empty() {
                "the object".to_string()
            } else {
                short(&prefix, 120)
            },
            type_name(value)
        ),
    }
}

/// Whether `object`, as the API server answered a write, is gone: it was being deleted,
/// has no finalizer left and no grace period to wait out, so the server deleted it.
pub fn is_gone(object: &Value) -> bool {
    let metadata = &object["metadata"];
    !metadata["deletionTimestamp"].is_null()
        && metadata["finalizers"].as_array().is_none_or(Vec::is_empty)
        && metadata["deletionGracePeriodSeconds"].as_i64().unwrap_or(0) == 0
}
