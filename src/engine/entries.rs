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
    let (last, way) = path.segments.split_last().expect("a path has a field");
    let mut at = doc;
    for (depth, segment) in way.iter().enumerate() {
        if !at.is_object() {
            return Err(not_an_object(field, path, depth, at));
        }
        let object = at.as_object_mut().expect("an object");
        let next = object.entry(segment.clone()).or_insert(Value::Null);
        if next.is_null() {
            if !create {
                return Ok(None);
            }
            *next = Value::Object(Map::new());
        }
        at = next;
    }
    if !at.is_object() {
        return Err(not_an_object(field, path, way.len(), at));
    }
    let object = at.as_object_mut().expect("an object");
    let list = object.entry(last.clone()).or_insert(Value::Null);
    if list.is_null() {
        if !create {
            return Ok(None);
        }
        *list = Value::Array(Vec::new());
    }
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
