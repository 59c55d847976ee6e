//! The writes controllers most often get wrong, each a read-dependent change to one entry
//! of a list, applied to the fresh object on every attempt with exact semantics:
//!
//! - status conditions, as apimachinery's `meta.SetStatusCondition` and
//!   `meta.RemoveStatusCondition` (an entry per `type`; `lastTransitionTime` moves only
//!   with `status`);
//! - finalizers, as `controllerutil.AddFinalizer` / `RemoveFinalizer`, with no new
//!   finalizer on an object being deleted;
//! - owner references, matched by uid, with at most one controller (as
//!   `controllerutil.SetControllerReference`'s `AlreadyOwnedError`);
//! - entries of a list keyed by some of their fields (a `listType=map` list, or one that
//!   should have been), merged with RFC 7386.
//!
//! Every other entry, every field this code does not name, and the order of all of them
//! are kept. The request is checked here, once, before anything is sent; what depends on
//! the object (a path through a value that is not an object, a second controller, an
//! object being deleted) is an [`ApplyError`].

use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::engine::mutation::{ApplyError, FieldViolation, type_name};
use crate::pb;
use crate::target::{ApiVersion, Kind, Name};

/// Where conditions are when the request names no path.
pub const CONDITIONS: &str = "status.conditions";

/// A change to one entry (or, for conditions, a few entries) of a list.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryChange {
    /// Upsert conditions by type, in order.
    SetConditions {
        path: FieldPath,
        conditions: Vec<Condition>,
    },
    /// Remove the conditions of these types.
    RemoveConditions { path: FieldPath, types: Vec<String> },
    /// Add or remove one finalizer.
    Finalizer { value: String, remove: bool },
    /// Ensure or remove one owner reference.
    Owner { owner: Owner, remove: bool },
    /// Upsert or remove one entry of a keyed list.
    ListEntry {
        path: FieldPath,
        keys: Vec<String>,
        entry: Map<String, Value>,
        remove: bool,
    },
}

/// One condition to set, validated as the API server validates `metav1.Condition`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    /// `None`: the generation of the object the change is applied to.
    pub observed_generation: Option<i64>,
    /// RFC 3339, UTC, in seconds; `None`: the time of the write.
    pub last_transition_time: Option<String>,
}

/// An owner, validated; its uid is `None` until read from the owner itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    pub api_version: ApiVersion,
    pub kind: Kind,
    pub name: Name,
    pub uid: Option<String>,
    pub controller: bool,
    pub block_owner_deletion: bool,
}

/// A path of field names, as the request spelled it (for messages) and split at dots.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldPath {
    text: String,
    segments: Vec<String>,
}

impl FieldPath {
    /// Parses `text` (`field` is its place in the request); empty takes `default`.
    fn parse(field: &str, text: &str, default: Option<&str>) -> Result<Self, FieldViolation> {
        let text = match (text, default) {
            ("", Some(default)) => default,
            ("", None) => {
                return Err(FieldViolation::new(
                    field,
                    "required: a path such as status.parents",
                ));
            }
            (text, _) => text,
        };
        let bad = |why: &str| {
            FieldViolation::new(
                field,
                format!("{why}: field names joined by dots, such as status.parents"),
            )
        };
        if text.len() > 512 {
            return Err(bad("longer than 512 characters"));
        }
        let segments: Vec<String> = text.split('.').map(str::to_string).collect();
        if segments.len() > 16 {
            return Err(bad("more than 16 field names"));
        }
        if segments.iter().any(|s| {
            s.is_empty()
                || !s
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$')
        }) {
            return Err(bad("not a path"));
        }
        Ok(FieldPath {
            text: text.to_string(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the path runs through `status`.
    pub fn in_status(&self) -> bool {
        self.segments[0] == "status"
    }
}

impl EntryChange {
    /// Validates one of the list-entry kinds of `pb::mutation::Kind`; `field` is the
    /// mutation's place in the request. `None` for the other kinds.
    pub fn from_proto(
        field: &str,
        kind: &pb::mutation::Kind,
    ) -> Option<Result<Self, FieldViolation>> {
        use pb::mutation::Kind;
        Some(match kind {
            Kind::SetCondition(set) => set_conditions(&format!("{field}.set_condition"), set),
            Kind::RemoveCondition(remove) => {
                remove_conditions(&format!("{field}.remove_condition"), remove)
            }
            Kind::Finalizer(change) => {
                let field = format!("{field}.finalizer.finalizer");
                qualified_name(&field, &change.finalizer, 253 + 1 + 63).map(|()| {
                    EntryChange::Finalizer {
                        value: change.finalizer.clone(),
                        remove: change.remove,
                    }
                })
            }
            Kind::OwnerReference(change) => owner(
                &format!("{field}.owner_reference.owner"),
                change.owner.as_ref(),
            )
            .map(|owner| EntryChange::Owner {
                owner,
                remove: change.remove,
            }),
            Kind::ListEntry(change) => list_entry(&format!("{field}.list_entry"), change),
            _ => return None,
        })
    }

    /// The request field of a path that lies in `status`, when the change touches only
    /// status: the main resource of a kind with a status subresource cannot write it.
    pub fn status_field(&self) -> Option<&'static str> {
        match self {
            EntryChange::SetConditions { path, .. } if path.in_status() => {
                Some("mutation.set_condition.path")
            }
            EntryChange::RemoveConditions { path, .. } if path.in_status() => {
                Some("mutation.remove_condition.path")
            }
            EntryChange::ListEntry { path, .. } if path.in_status() => {
                Some("mutation.list_entry.path")
            }
            _ => None,
        }
    }

    /// The request field of a change outside `status`, which the status subresource
    /// cannot write.
    pub fn outside_status_field(&self) -> Option<&'static str> {
        match self {
            EntryChange::Finalizer { .. } => Some("mutation.finalizer"),
            EntryChange::Owner { .. } => Some("mutation.owner_reference"),
            EntryChange::SetConditions { path, .. } if !path.in_status() => {
                Some("mutation.set_condition.path")
            }
            EntryChange::RemoveConditions { path, .. } if !path.in_status() => {
                Some("mutation.remove_condition.path")
            }
            EntryChange::ListEntry { path, .. } if !path.in_status() => {
                Some("mutation.list_entry.path")
            }
            _ => None,
        }
    }

    /// Whether this is the removal of a finalizer: an object that does not exist has
    /// none, so the removal is done (OUTCOME_GONE).
    pub fn removes_a_finalizer(&self) -> bool {
        matches!(self, EntryChange::Finalizer { remove: true, .. })
    }

    /// An owner named without a uid, which must be read before the change can apply.
    pub fn owner_to_resolve(&self) -> Option<&Owner> {
        match self {
            EntryChange::Owner {
                owner,
                remove: false,
            } if owner.uid.is_none() => Some(owner),
            _ => None,
        }
    }

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
                let metadata = metadata(&mut doc)?;
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
                            return Err(ApplyError::Deleting(value.clone()));
                        }
                        push(metadata, "finalizers", Value::String(value.clone()));
                    }
                    (true, true) => {
                        remove_where(metadata, "finalizers", |f| f.as_str() == Some(value));
                    }
                }
            }
            EntryChange::Owner { owner, remove } => {
                let metadata = metadata(&mut doc)?;
                if *remove {
                    remove_where(metadata, "ownerReferences", |r| owner.names(r));
                } else {
                    ensure_owner(metadata, owner)?;
                }
            }
            EntryChange::ListEntry {
                path,
                keys,
                entry,
                remove,
            } => {
                let Some(list) = list_at(&mut doc, path, "mutation.list_entry.path", !remove)?
                else {
                    return Ok(doc);
                };
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
                    (Some(at), false) => {
                        json_patch::merge(&mut list[at], &Value::Object(entry.clone()))
                    }
                    (None, false) => {
                        let mut new = Value::Object(Map::new());
                        json_patch::merge(&mut new, &Value::Object(entry.clone()));
                        list.push(new);
                    }
                }
            }
        }
        Ok(doc)
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

impl Owner {
    /// Whether `reference` names this owner: by uid, or without one by API group, kind
    /// and name.
    fn names(&self, reference: &Value) -> bool {
        match &self.uid {
            Some(uid) => reference["uid"].as_str() == Some(uid),
            None => {
                let group = |api_version: &str| {
                    api_version
                        .rsplit_once('/')
                        .map_or("", |(group, _)| group)
                        .to_string()
                };
                reference["kind"].as_str() == Some(&self.kind)
                    && reference["name"].as_str() == Some(&self.name)
                    && reference["apiVersion"].as_str().map(group) == Some(group(&self.api_version))
            }
        }
    }

    /// `Kind/name`, for messages.
    pub fn describe(&self) -> String {
        format!("{}/{}", &*self.kind, &*self.name)
    }
}

/// SetOwnerReference / SetControllerReference, matched by uid.
fn ensure_owner(metadata: &mut Map<String, Value>, owner: &Owner) -> Result<(), ApplyError> {
    // UpdateWithRetry reads the uid before the loop; a Transact proposal must give it.
    let Some(uid) = owner.uid.as_deref() else {
        return Err(ApplyError::PathDoesNotFit {
            field: "mutation.owner_reference.owner.uid".into(),
            reason: "required in a Transact proposal: give the owner's uid".into(),
        });
    };
    let references = metadata.get("ownerReferences").and_then(Value::as_array);
    if owner.controller
        && let Some(other) = references
            .into_iter()
            .flatten()
            .find(|r| r["controller"].as_bool() == Some(true) && r["uid"].as_str() != Some(uid))
    {
        return Err(ApplyError::AlreadyOwned(format!(
            "{}/{} (uid {})",
            other["kind"].as_str().unwrap_or_default(),
            other["name"].as_str().unwrap_or_default(),
            other["uid"].as_str().unwrap_or_default()
        )));
    }
    let at = references.and_then(|list| list.iter().position(|r| r["uid"].as_str() == Some(uid)));
    let Some(at) = at else {
        let mut reference = Map::new();
        reference.insert(
            "apiVersion".into(),
            Value::String(owner.api_version.to_string()),
        );
        reference.insert("kind".into(), Value::String(owner.kind.to_string()));
        reference.insert("name".into(), Value::String(owner.name.to_string()));
        reference.insert("uid".into(), Value::String(uid.to_string()));
        if owner.controller {
            reference.insert("controller".into(), Value::Bool(true));
        }
        if owner.block_owner_deletion {
            reference.insert("blockOwnerDeletion".into(), Value::Bool(true));
        }
        push(metadata, "ownerReferences", Value::Object(reference));
        return Ok(());
    };
    let list = metadata["ownerReferences"]
        .as_array_mut()
        .expect("found in it");
    let Some(reference) = list[at].as_object_mut() else {
        return Ok(());
    };
    reference.insert(
        "apiVersion".into(),
        Value::String(owner.api_version.to_string()),
    );
    reference.insert("kind".into(), Value::String(owner.kind.to_string()));
    reference.insert("name".into(), Value::String(owner.name.to_string()));
    for (flag, wanted) in [
        ("controller", owner.controller),
        ("blockOwnerDeletion", owner.block_owner_deletion),
    ] {
        let set = reference.get(flag).and_then(Value::as_bool) == Some(true);
        if wanted && !set {
            reference.insert(flag.into(), Value::Bool(true));
        } else if !wanted && set {
            reference.remove(flag);
        }
    }
    Ok(())
}

/// The object's metadata, which every object has.
fn metadata(doc: &mut Value) -> Result<&mut Map<String, Value>, ApplyError> {
    doc.get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ApplyError::CelFailed("the object has no metadata".into()))
}

/// Appends `value` to the list at `metadata[key]`, creating it.
fn push(metadata: &mut Map<String, Value>, key: &str, value: Value) {
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
                path.as_str()
            ),
        })
}

fn not_an_object(field: &str, path: &FieldPath, depth: usize, value: &Value) -> ApplyError {
    let prefix = path.segments[..depth].join(".");
    ApplyError::PathDoesNotFit {
        field: field.to_string(),
        reason: format!(
            "{} runs through {}, which is {} on the current object, not a map",
            path.as_str(),
            if prefix.is_empty() {
                "the object"
            } else {
                &prefix
            },
            type_name(value)
        ),
    }
}

fn set_conditions(field: &str, set: &pb::SetCondition) -> Result<EntryChange, FieldViolation> {
    let path = FieldPath::parse(&format!("{field}.path"), &set.path, Some(CONDITIONS))?;
    if set.conditions.is_empty() {
        return Err(FieldViolation::new(
            format!("{field}.conditions"),
            "at least one condition is required",
        ));
    }
    let mut conditions: Vec<Condition> = Vec::with_capacity(set.conditions.len());
    for (i, c) in set.conditions.iter().enumerate() {
        let field = format!("{field}.conditions[{i}]");
        let condition = condition(&field, c)?;
        if conditions.iter().any(|seen| seen.type_ == condition.type_) {
            return Err(FieldViolation::new(
                format!("{field}.type"),
                format!("{:?} is set twice in one request", condition.type_),
            ));
        }
        conditions.push(condition);
    }
    Ok(EntryChange::SetConditions { path, conditions })
}

fn remove_conditions(
    field: &str,
    remove: &pb::RemoveCondition,
) -> Result<EntryChange, FieldViolation> {
    let path = FieldPath::parse(&format!("{field}.path"), &remove.path, Some(CONDITIONS))?;
    if remove.types.is_empty() {
        return Err(FieldViolation::new(
            format!("{field}.types"),
            "at least one condition type is required",
        ));
    }
    for (i, t) in remove.types.iter().enumerate() {
        qualified_name(&format!("{field}.types[{i}]"), t, 316)?;
    }
    Ok(EntryChange::RemoveConditions {
        path,
        types: remove.types.clone(),
    })
}

/// A condition as the API server's validation of metav1.Condition accepts it.
fn condition(field: &str, c: &pb::Condition) -> Result<Condition, FieldViolation> {
    qualified_name(&format!("{field}.type"), &c.r#type, 316)?;
    if !matches!(c.status.as_str(), "True" | "False" | "Unknown") {
        return Err(FieldViolation::new(
            format!("{field}.status"),
            format!(
                "must be \"True\", \"False\" or \"Unknown\", not {:?}",
                crate::engine::cel::short(&c.status, 40)
            ),
        ));
    }
    let reason_field = format!("{field}.reason");
    if c.reason.is_empty() {
        return Err(FieldViolation::new(
            reason_field,
            "required: a CamelCase word, e.g. \"Reconciled\"",
        ));
    }
    if c.reason.len() > 1024 || !is_reason(&c.reason) {
        return Err(FieldViolation::new(
            reason_field,
            "must match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ and be at most 1024 characters, e.g. \"Reconciled\"",
        ));
    }
    if c.message.len() > 32768 {
        return Err(FieldViolation::new(
            format!("{field}.message"),
            format!("{} bytes: at most 32768", c.message.len()),
        ));
    }
    if let Some(generation) = c.observed_generation
        && generation < 0
    {
        return Err(FieldViolation::new(
            format!("{field}.observed_generation"),
            "must not be negative",
        ));
    }
    let last_transition_time = match c.last_transition_time.as_str() {
        "" => None,
        text => Some(rfc3339(&format!("{field}.last_transition_time"), text)?),
    };
    Ok(Condition {
        type_: c.r#type.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        observed_generation: c.observed_generation,
        last_transition_time,
    })
}

/// An RFC 3339 time in UTC, as the API server stores it: in seconds.
fn rfc3339(field: &str, text: &str) -> Result<String, FieldViolation> {
    humantime::parse_rfc3339(text)
        .map(|time| humantime::format_rfc3339_seconds(time).to_string())
        .map_err(|_| {
            FieldViolation::new(
                field,
                format!(
                    "{:?} is not an RFC 3339 time in UTC, e.g. \"2026-11-26T15:04:05Z\"",
                    crate::engine::cel::short(text, 40)
                ),
            )
        })
}

fn is_reason(text: &str) -> bool {
    let bytes = text.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    bytes[0].is_ascii_alphabetic()
        && bytes.iter().all(inner)
        && (bytes.len() == 1
            || bytes[bytes.len() - 1].is_ascii_alphanumeric()
            || bytes[bytes.len() - 1] == b'_')
}

/// A Kubernetes qualified name: `[prefix/]name`, the name at most 63 characters of
/// `[A-Za-z0-9-_.]` starting and ending alphanumeric, the prefix a DNS-1123 subdomain;
/// at most `max` characters in all.
fn qualified_name(field: &str, text: &str, max: usize) -> Result<(), FieldViolation> {
    let (prefix, name) = match text.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    let prefix_ok = prefix.is_none_or(crate::target::is_dns1123_subdomain);
    if text.len() <= max && name_ok && prefix_ok {
        return Ok(());
    }
    Err(FieldViolation::new(
        field,
        format!(
            "{:?} is not a qualified name ([prefix/]name: the name at most 63 characters of [A-Za-z0-9-_.] starting and ending alphanumeric, the prefix a DNS subdomain, e.g. \"example.com/cleanup\"; at most {max} in all)",
            crate::engine::cel::short(text, 60)
        ),
    ))
}

fn owner(field: &str, owner: Option<&pb::OwnerReference>) -> Result<Owner, FieldViolation> {
    let Some(o) = owner else {
        return Err(FieldViolation::new(
            field,
            "required: the owner's api_version, kind and name",
        ));
    };
    let required = |name: &str, value: &str| {
        if value.is_empty() {
            Err(FieldViolation::new(format!("{field}.{name}"), "required"))
        } else {
            Ok(())
        }
    };
    required("api_version", &o.api_version)?;
    required("kind", &o.kind)?;
    required("name", &o.name)?;
    let uid = match o.uid.as_str() {
        "" => None,
        uid => Some(crate::target::opaque(&format!("{field}.uid"), uid)?),
    };
    Ok(Owner {
        api_version: ApiVersion::parse(&format!("{field}.api_version"), &o.api_version)?,
        kind: Kind::parse(&format!("{field}.kind"), &o.kind)?,
        name: Name::parse(&format!("{field}.name"), &o.name)?,
        uid,
        controller: o.controller,
        block_owner_deletion: o.block_owner_deletion,
    })
}

fn list_entry(field: &str, change: &pb::ListEntryChange) -> Result<EntryChange, FieldViolation> {
    let path = FieldPath::parse(&format!("{field}.path"), &change.path, None)?;
    let keys_field = format!("{field}.keys");
    if change.keys.is_empty() {
        return Err(FieldViolation::new(
            keys_field,
            "at least one key field is required, e.g. controllerName",
        ));
    }
    for (i, key) in change.keys.iter().enumerate() {
        if key.is_empty() || key.len() > 253 || change.keys[..i].contains(key) {
            return Err(FieldViolation::new(
                format!("{keys_field}[{i}]"),
                "a key field's name: not empty, at most 253 characters, each named once",
            ));
        }
    }
    let entry_field = format!("{field}.entry_json");
    let entry = crate::engine::mutation::parse_json(&entry_field, &change.entry_json)?;
    let Value::Object(entry) = entry else {
        return Err(FieldViolation::new(
            entry_field,
            format!("an entry must be a JSON object, got {}", type_name(&entry)),
        ));
    };
    if let Some(missing) = change
        .keys
        .iter()
        .find(|k| entry.get(k.as_str()).is_none_or(Value::is_null))
    {
        return Err(FieldViolation::new(
            entry_field,
            format!(
                "the entry lacks its key field {:?}",
                crate::engine::cel::short(missing, 60)
            ),
        ));
    }
    Ok(EntryChange::ListEntry {
        path,
        keys: change.keys.clone(),
        entry,
        remove: change.remove,
    })
}

/// Whether `object`, as the API server answered a write, is gone: it was being deleted,
/// has no finalizer left and no grace period to wait out, so the server deleted it.
pub fn is_gone(object: &Value) -> bool {
    let metadata = &object["metadata"];
    !metadata["deletionTimestamp"].is_null()
        && metadata["finalizers"].as_array().is_none_or(Vec::is_empty)
        && metadata["deletionGracePeriodSeconds"].as_i64().unwrap_or(0) == 0
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use serde_json::json;

    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000 + seconds)
    }

    fn change(kind: pb::mutation::Kind) -> Result<EntryChange, FieldViolation> {
        EntryChange::from_proto("mutation", &kind).expect("a list-entry kind")
    }

    fn set(conditions: Vec<pb::Condition>) -> EntryChange {
        change(pb::mutation::Kind::SetCondition(pb::SetCondition {
            conditions,
            path: String::new(),
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str, reason: &str) -> pb::Condition {
        pb::Condition {
            r#type: type_.into(),
            status: status.into(),
            reason: reason.into(),
            ..Default::default()
        }
    }

    fn widget(conditions: Value) -> Value {
        json!({"metadata": {"name": "w", "generation": 3}, "status": {"conditions": conditions}})
    }

    #[test]
    fn a_new_condition_is_appended_with_the_time_of_the_write_and_the_generation() {
        let other = json!({"type": "Other", "status": "True", "reason": "Theirs", "lastTransitionTime": "2020-01-01T00:00:00Z", "x-unknown": 1});
        let new = set(vec![condition("Ready", "True", "Done")])
            .apply(&widget(json!([other.clone()])), at(0))
            .unwrap();
        assert_eq!(
            new["status"]["conditions"],
            json!([other, {"type": "Ready", "status": "True", "reason": "Done", "message": "",
                "observedGeneration": 3, "lastTransitionTime": "2026-09-21T14:13:20Z"}])
        );
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let ready = |status: &str, reason: &str| set(vec![condition("Ready", status, reason)]);
        let first = ready("True", "Done")
            .apply(&widget(json!([])), at(0))
            .unwrap();
        // Same status, new reason: the time stays; same everything: nothing changes.
        let second = ready("True", "StillDone").apply(&first, at(60)).unwrap();
        assert_eq!(
            second["status"]["conditions"][0]["lastTransitionTime"],
            first["status"]["conditions"][0]["lastTransitionTime"]
        );
        assert_eq!(second["status"]["conditions"][0]["reason"], "StillDone");
        assert_eq!(
            ready("True", "StillDone").apply(&second, at(120)).unwrap(),
            second
        );
        // A new status takes the time of the write, or the caller's.
        let third = ready("False", "Broken").apply(&second, at(180)).unwrap();
        assert_eq!(
            third["status"]["conditions"][0]["lastTransitionTime"],
            "2026-09-21T14:16:20Z"
        );
        let mut given = condition("Ready", "True", "Back");
        given.last_transition_time = "2026-01-02T03:04:05.678Z".into();
        let fourth = set(vec![given]).apply(&third, at(240)).unwrap();
        assert_eq!(
            fourth["status"]["conditions"][0]["lastTransitionTime"], "2026-01-02T03:04:05Z",
            "stored in seconds, as the API server stores it"
        );
    }

    #[test]
    fn observed_generation_is_the_fresh_objects_unless_given() {
        let mut given = condition("Ready", "True", "Done");
        given.observed_generation = Some(9);
        let new = set(vec![given]).apply(&widget(json!([])), at(0)).unwrap();
        assert_eq!(new["status"]["conditions"][0]["observedGeneration"], 9);
        // An object without a generation (a ConfigMap): no observedGeneration at all.
        let plain = json!({"metadata": {"name": "c"}});
        let new = set(vec![condition("Ready", "True", "Done")])
            .apply(&plain, at(0))
            .unwrap();
        assert!(
            new["status"]["conditions"][0]
                .get("observedGeneration")
                .is_none()
        );
    }

    #[test]
    fn conditions_are_removed_by_type_and_the_others_keep_their_order() {
        let list = json!([{"type": "A"}, {"type": "B"}, {"type": "C"}]);
        let remove = change(pb::mutation::Kind::RemoveCondition(pb::RemoveCondition {
            types: vec!["B".into(), "Z".into()],
            path: String::new(),
        }))
        .unwrap();
        let new = remove.apply(&widget(list), at(0)).unwrap();
        assert_eq!(
            new["status"]["conditions"],
            json!([{"type": "A"}, {"type": "C"}])
        );
        // No list: nothing to remove, nothing created.
        let bare = json!({"metadata": {"name": "w"}});
        assert_eq!(remove.apply(&bare, at(0)).unwrap(), bare);
    }

    #[test]
    fn a_condition_the_api_server_would_refuse_names_its_field() {
        let cases = [
            (condition("Ready", "Maybe", "Done"), "conditions[0].status"),
            (condition("Ready", "True", ""), "conditions[0].reason"),
            (
                condition("Ready", "True", "Not a word"),
                "conditions[0].reason",
            ),
            (condition("Ready", "True", "Ends,"), "conditions[0].reason"),
            (condition("a/b/c", "True", "Done"), "conditions[0].type"),
            (condition("-Ready", "True", "Done"), "conditions[0].type"),
            (
                condition(&"x".repeat(64), "True", "Done"),
                "conditions[0].type",
            ),
        ];
        for (bad, field) in cases {
            let err = change(pb::mutation::Kind::SetCondition(pb::SetCondition {
                conditions: vec![bad.clone()],
                path: String::new(),
            }))
            .unwrap_err();
            assert_eq!(
                err.field,
                format!("mutation.set_condition.{field}"),
                "{bad:?}"
            );
        }
        let mut long = condition("Ready", "True", "Done");
        long.message = "m".repeat(32769);
        let mut time = condition("Ready", "True", "Done");
        time.last_transition_time = "yesterday".into();
        let twice = vec![
            condition("Ready", "True", "A"),
            condition("Ready", "False", "B"),
        ];
        for (conditions, field) in [
            (vec![long], "conditions[0].message"),
            (vec![time], "conditions[0].last_transition_time"),
            (twice, "conditions[1].type"),
            (vec![], "conditions"),
        ] {
            let err = change(pb::mutation::Kind::SetCondition(pb::SetCondition {
                conditions,
                path: String::new(),
            }))
            .unwrap_err();
            assert_eq!(err.field, format!("mutation.set_condition.{field}"));
        }
        // The longest forms accepted: a 253-character prefix and a 63-character name.
        let prefix = ["a", "b", "c"].map(|l| l.repeat(63)).join(".") + "." + &"d".repeat(61);
        let long_type = format!("{prefix}/{}", "n".repeat(62));
        assert_eq!(long_type.len(), 316);
        assert!(
            change(pb::mutation::Kind::SetCondition(pb::SetCondition {
                conditions: vec![condition(&long_type, "Unknown", "A1_b,c:d")],
                path: String::new(),
            }))
            .is_ok()
        );
    }

    fn finalizer(value: &str, remove: bool) -> EntryChange {
        change(pb::mutation::Kind::Finalizer(pb::FinalizerChange {
            finalizer: value.into(),
            remove,
        }))
        .unwrap()
    }

    #[test]
    fn finalizers_are_added_and_removed_by_value() {
        let object = json!({"metadata": {"name": "c", "finalizers": ["a.io/x"]}});
        let added = finalizer("b.io/y", false).apply(&object, at(0)).unwrap();
        assert_eq!(added["metadata"]["finalizers"], json!(["a.io/x", "b.io/y"]));
        assert_eq!(
            finalizer("b.io/y", false).apply(&added, at(0)).unwrap(),
            added
        );
        let removed = finalizer("a.io/x", true).apply(&added, at(0)).unwrap();
        assert_eq!(removed["metadata"]["finalizers"], json!(["b.io/y"]));
        assert_eq!(
            finalizer("a.io/x", true).apply(&removed, at(0)).unwrap(),
            removed
        );
        // The last one removed takes the list with it.
        let none = finalizer("b.io/y", true).apply(&removed, at(0)).unwrap();
        assert_eq!(none, json!({"metadata": {"name": "c"}}));
    }

    #[test]
    fn no_new_finalizer_on_an_object_being_deleted() {
        let deleting = json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["a.io/x"]}});
        assert_eq!(
            finalizer("b.io/y", false).apply(&deleting, at(0)),
            Err(ApplyError::Deleting("b.io/y".into()))
        );
        // One already there is no addition; removing is always allowed.
        assert_eq!(
            finalizer("a.io/x", false).apply(&deleting, at(0)).unwrap(),
            deleting
        );
        let last = finalizer("a.io/x", true).apply(&deleting, at(0)).unwrap();
        assert!(is_gone(&last));
        assert!(!is_gone(&deleting));
        let grace =
            json!({"metadata": {"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30}});
        assert!(
            !is_gone(&grace),
            "a pod waiting out its grace period is not gone"
        );
    }

    #[test]
    fn a_finalizer_must_be_a_qualified_name() {
        for bad in ["", "a b", "/x", "x/", "a/b/c", "-x", "UPPER.example.com/x"] {
            let err = change(pb::mutation::Kind::Finalizer(pb::FinalizerChange {
                finalizer: bad.into(),
                remove: false,
            }))
            .unwrap_err();
            assert_eq!(err.field, "mutation.finalizer.finalizer", "{bad:?}");
        }
        finalizer("kubernetes", false);
        finalizer("foregroundDeletion", false);
    }

    fn owner(uid: &str, controller: bool) -> pb::OwnerReference {
        pb::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: format!("d-{uid}"),
            uid: uid.into(),
            controller,
            block_owner_deletion: false,
        }
    }

    fn ensure(owner: pb::OwnerReference, remove: bool) -> EntryChange {
        change(pb::mutation::Kind::OwnerReference(
            pb::OwnerReferenceChange {
                owner: Some(owner),
                remove,
            },
        ))
        .unwrap()
    }

    #[test]
    fn owner_references_are_ensured_by_uid_with_one_controller() {
        let object = json!({"metadata": {"name": "c"}});
        let one = ensure(owner("u1", true), false)
            .apply(&object, at(0))
            .unwrap();
        assert_eq!(
            one["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d-u1", "uid": "u1", "controller": true}])
        );
        assert_eq!(
            ensure(owner("u1", true), false).apply(&one, at(0)).unwrap(),
            one
        );
        let err = ensure(owner("u2", true), false)
            .apply(&one, at(0))
            .unwrap_err();
        assert_eq!(
            err,
            ApplyError::AlreadyOwned("Deployment/d-u1 (uid u1)".into())
        );
        let two = ensure(owner("u2", false), false)
            .apply(&one, at(0))
            .unwrap();
        assert_eq!(
            two["metadata"]["ownerReferences"].as_array().unwrap().len(),
            2
        );
        // Ensuring without controller updates the flag; removal by uid, or by name.
        let demoted = ensure(owner("u1", false), false)
            .apply(&two, at(0))
            .unwrap();
        assert!(
            demoted["metadata"]["ownerReferences"][0]
                .get("controller")
                .is_none()
        );
        let gone = ensure(owner("u1", false), true)
            .apply(&demoted, at(0))
            .unwrap();
        assert_eq!(gone["metadata"]["ownerReferences"][0]["uid"], "u2");
        let mut by_name = owner("", false);
        by_name.name = "d-u2".into();
        by_name.api_version = "apps/v1beta1".into();
        let none = ensure(by_name, true).apply(&gone, at(0)).unwrap();
        assert_eq!(none, json!({"metadata": {"name": "c"}}));
    }

    #[test]
    fn an_owner_needs_its_identity() {
        for (mut bad, field) in [
            (owner("u", false), "api_version"),
            (owner("u", false), "kind"),
            (owner("u", false), "name"),
        ] {
            match field {
                "api_version" => bad.api_version.clear(),
                "kind" => bad.kind.clear(),
                _ => bad.name.clear(),
            }
            let err = change(pb::mutation::Kind::OwnerReference(
                pb::OwnerReferenceChange {
                    owner: Some(bad),
                    remove: false,
                },
            ))
            .unwrap_err();
            assert_eq!(err.field, format!("mutation.owner_reference.owner.{field}"));
        }
        let without_uid = ensure(owner("", false), false);
        assert!(without_uid.owner_to_resolve().is_some());
        let err = without_uid
            .apply(&json!({"metadata": {}}), at(0))
            .unwrap_err();
        assert!(matches!(err, ApplyError::PathDoesNotFit { .. }), "{err:?}");
    }

    fn entry(
        path: &str,
        keys: &[&str],
        entry: Value,
        remove: bool,
    ) -> Result<EntryChange, FieldViolation> {
        change(pb::mutation::Kind::ListEntry(pb::ListEntryChange {
            path: path.into(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            entry_json: entry.to_string(),
            remove,
        }))
    }

    #[test]
    fn keyed_entries_are_merged_appended_and_removed_in_place() {
        let route = json!({"metadata": {}, "status": {"parents": [
            {"controllerName": "a", "ref": "x", "n": 1},
            {"controllerName": "b", "ref": "x"},
            {"controllerName": "a", "ref": "y"},
        ]}});
        let keys = ["controllerName", "ref"];
        let upsert = entry(
            "status.parents",
            &keys,
            json!({"controllerName": "a", "ref": "x", "n": null, "m": 2}),
            false,
        )
        .unwrap();
        let new = upsert.apply(&route, at(0)).unwrap();
        assert_eq!(
            new["status"]["parents"][0],
            json!({"controllerName": "a", "ref": "x", "m": 2})
        );
        assert_eq!(
            new["status"]["parents"].as_array().unwrap()[1..],
            route["status"]["parents"].as_array().unwrap()[1..]
        );
        assert_eq!(upsert.apply(&new, at(0)).unwrap(), new);
        let append = entry(
            "status.parents",
            &keys,
            json!({"controllerName": "c", "ref": "x", "gone": null}),
            false,
        )
        .unwrap();
        let new = append.apply(&route, at(0)).unwrap();
        assert_eq!(
            new["status"]["parents"][3],
            json!({"controllerName": "c", "ref": "x"})
        );
        let remove = entry(
            "status.parents",
            &keys,
            json!({"controllerName": "b", "ref": "x"}),
            true,
        )
        .unwrap();
        let new = remove.apply(&route, at(0)).unwrap();
        assert_eq!(new["status"]["parents"].as_array().unwrap().len(), 2);
        assert_eq!(new["status"]["parents"][1]["ref"], "y");
        // A missing list is made on upsert, and left alone by a removal.
        let bare = json!({"metadata": {}});
        assert_eq!(
            append.apply(&bare, at(0)).unwrap()["status"]["parents"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(remove.apply(&bare, at(0)).unwrap(), bare);
    }

    #[test]
    fn a_path_that_does_not_fit_the_object_names_the_field() {
        let upsert = entry("spec.size.parents", &["k"], json!({"k": 1}), false).unwrap();
        let err = upsert
            .apply(&json!({"spec": {"size": 1}}), at(0))
            .unwrap_err();
        let ApplyError::PathDoesNotFit { field, reason } = err else {
            panic!("{err:?}");
        };
        assert_eq!(field, "mutation.list_entry.path");
        assert!(reason.contains("spec.size"), "{reason}");
        let not_a_list = entry("spec.size", &["k"], json!({"k": 1}), false).unwrap();
        assert!(
            not_a_list
                .apply(&json!({"spec": {"size": 1}}), at(0))
                .is_err()
        );
        for (path, keys, value, field) in [
            ("spec.p", vec!["k"], json!({"other": 1}), "entry_json"),
            ("spec.p", vec!["k"], json!({"k": null}), "entry_json"),
            ("spec.p", vec!["k"], json!([1]), "entry_json"),
            ("spec.p", vec![], json!({"k": 1}), "keys"),
            ("spec.p", vec!["k", "k"], json!({"k": 1}), "keys[1]"),
            ("", vec!["k"], json!({"k": 1}), "path"),
            ("spec..p", vec!["k"], json!({"k": 1}), "path"),
            ("spec.p q", vec!["k"], json!({"k": 1}), "path"),
        ] {
            let err = entry(path, &keys, value, false).unwrap_err();
            assert_eq!(
                err.field,
                format!("mutation.list_entry.{field}"),
                "{path} {keys:?}"
            );
        }
    }
}
